/*
 * A static musl test client: musl has no NSS, and after its own files asks
 * the nscd socket. Usage: musl_nscd_client USER UID GROUP GID USER2;
 * prints one line per lookup (getpwnam, getpwuid, getgrnam, getgrgid,
 * getgrouplist of USER, getpwnam of USER2); exit 1 at the first not found.
 */
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>

static int pwnam(const char *name)
{
	struct passwd *p = getpwnam(name);
	if (!p) {
		printf("pwnam %s: not found\n", name);
		return 1;
	}
	printf("pwnam %s %u %u %s %s %s\n", p->pw_name, (unsigned)p->pw_uid, (unsigned)p->pw_gid,
	       p->pw_gecos, p->pw_dir, p->pw_shell);
	return 0;
}

static void print_group(const char *what, const struct group *g)
{
	printf("%s %s %u ", what, g->gr_name, (unsigned)g->gr_gid);
	for (char **m = g->gr_mem; *m; m++)
		printf("%s%s", *m, m[1] ? "," : "");
	printf("\n");
}

int main(int argc, char **argv)
{
	if (argc != 6)
		return 2;
	if (pwnam(argv[1]))
		return 1;
	struct passwd *p = getpwuid((uid_t)strtoul(argv[2], NULL, 10));
	if (!p)
		return printf("pwuid %s: not found\n", argv[2]), 1;
	printf("pwuid %s %s\n", argv[2], p->pw_name);
	struct group *g = getgrnam(argv[3]);
	if (!g)
		return printf("grnam %s: not found\n", argv[3]), 1;
	print_group("grnam", g);
	g = getgrgid((gid_t)strtoul(argv[4], NULL, 10));
	if (!g)
		return printf("grgid %s: not found\n", argv[4]), 1;
	printf("grgid %s %s ", argv[4], g->gr_name);
	for (char **m = g->gr_mem; *m; m++)
		printf("%s%s", *m, m[1] ? "," : "");
	printf("\n");
	struct passwd *u = getpwnam(argv[1]);
	gid_t groups[256];
	int n = 256;
	if (!u || getgrouplist(argv[1], u->pw_gid, groups, &n) < 0)
		return printf("grouplist %s: failed\n", argv[1]), 1;
	printf("grouplist %s", argv[1]);
	for (int i = 0; i < n; i++)
		printf(" %u", (unsigned)groups[i]);
	printf("\n");
	return pwnam(argv[5]);
}
