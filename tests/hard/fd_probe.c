/*
 * fd_probe: does the NSS module leave a descriptor open across exec?
 *
 * Used by tests/integration/test_hard_privs.py (compiled there with the
 * system cc). `fd_probe USER GROUP` first prints
 *   start FD TARGET       every descriptor it inherited (but 0, 1, 2)
 * then resolves through NSS with every kind of
 * request the module serves: getpwnam, getpwuid, getgrnam, getgrgid,
 * initgroups (as root; getgrouplist otherwise), and leaves a passwd and a
 * group enumeration OPEN (setpwent/getpwent and setgrent/getgrent, no
 * endXXent), so the module holds its enumeration connections. It prints
 *   before FD TARGET      every descriptor it holds now (but 0, 1, 2)
 *   mc_maps=N             mappings of the daemon's maps (memfd:idcache-*)
 *   lookups=OK|FAILED ... what each lookup returned
 * then execs itself as `fd_probe --list`, which prints
 *   after FD TARGET       every descriptor that survived the exec (0-2 and
 *                         the one it lists /proc/self/fd with excepted)
 *   end
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void list_fds(const char *tag)
{
	DIR *d = opendir("/proc/self/fd");
	if (!d) {
		perror("fd_probe: /proc/self/fd");
		exit(3);
	}
	int self = dirfd(d);
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.')
			continue;
		int fd = atoi(e->d_name);
		if (fd <= 2 || fd == self)
			continue;
		char link[PATH_MAX + 32], target[PATH_MAX];
		snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
		ssize_t n = readlink(link, target, sizeof(target) - 1);
		target[n < 0 ? 0 : n] = '\0';
		printf("%s %d %s\n", tag, fd, n < 0 ? "?" : target);
	}
	closedir(d);
}

static int count_mc_maps(void)
{
	FILE *f = fopen("/proc/self/maps", "re");
	if (!f)
		return -1;
	char line[4096];
	int n = 0;
	while (fgets(line, sizeof(line), f))
		if (strstr(line, "/memfd:idcache-"))
			n++;
	fclose(f);
	return n;
}

int main(int argc, char **argv)
{
	if (argc == 2 && strcmp(argv[1], "--list") == 0) {
		list_fds("after");
		printf("end\n");
		return 0;
	}
	if (argc != 3) {
		fprintf(stderr, "usage: fd_probe USER GROUP | fd_probe --list\n");
		return 2;
	}
	const char *user = argv[1], *group = argv[2];
	list_fds("start");
	struct passwd *pw = getpwnam(user);
	uid_t uid = pw ? pw->pw_uid : 0;
	gid_t gid = pw ? pw->pw_gid : 0;
	printf("lookups getpwnam=%s", pw ? "OK" : "FAILED");
	printf(" getpwuid=%s", pw && getpwuid(uid) ? "OK" : "FAILED");
	struct group *gr = getgrnam(group);
	gid_t ggid = gr ? gr->gr_gid : 0;
	printf(" getgrnam=%s", gr ? "OK" : "FAILED");
	printf(" getgrgid=%s", gr && getgrgid(ggid) ? "OK" : "FAILED");
	if (geteuid() == 0) {
		printf(" initgroups=%s", initgroups(user, gid) == 0 ? "OK" : "FAILED");
		gid_t now[256];
		int n = getgroups(256, now);
		printf(" ngroups=%d", n);
	} else {
		gid_t gl[256];
		int n = 256;
		printf(" getgrouplist=%s", getgrouplist(user, gid, gl, &n) >= 0 ? "OK" : "FAILED");
		printf(" ngroups=%d", n);
	}
	/* Enumerations left open on purpose: no endpwent/endgrent. */
	setpwent();
	printf(" getpwent=%s", getpwent() ? "OK" : "FAILED");
	setgrent();
	printf(" getgrent=%s", getgrent() ? "OK" : "FAILED");
	printf("\n");
	list_fds("before");
	printf("mc_maps=%d\n", count_mc_maps());
	fflush(stdout);
	char *args[] = {argv[0], "--list", NULL};
	execv("/proc/self/exe", args);
	perror("fd_probe: execv /proc/self/exe");
	return 3;
}
