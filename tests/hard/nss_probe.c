/*
 * nss_probe: what a (possibly setuid) program sees through NSS.
 *
 * Used by tests/integration/test_hard_privs.py, which compiles it with the
 * system cc and installs one copy setuid root. Prints, one per line:
 *   secure=<getauxval(AT_SECURE)> ruid=<getuid()> euid=<geteuid()>
 *   env_rundir=<getenv("IDCACHE_RUNDIR") or "-">
 *   env_memcache=<getenv("IDCACHE_MEMCACHE") or "-">
 *   then for each NAME argument:
 *     user NAME found <uid> <gid> <gecos>      or   user NAME missing <errno>
 *   mc_maps=<number of /proc/self/maps lines naming a memory-cache map>
 *   mc_map <path>   (one line per such mapping)
 * Exit status 0 unless something outside NSS failed.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <unistd.h>

static const char *or_dash(const char *s)
{
	return s ? s : "-";
}

/* Mappings of the daemon's maps (memfds named idcache-passwd, -group,
 * -initgroups): proof that the module mapped the memory cache. */
static int print_mc_maps(void)
{
	FILE *f = fopen("/proc/self/maps", "re");
	if (!f) {
		perror("nss_probe: /proc/self/maps");
		return -1;
	}
	char line[4096];
	char paths[16][1024];
	int n = 0;
	while (fgets(line, sizeof(line), f)) {
		char *path = strchr(line, '/');
		if (!path || strncmp(path, "/memfd:idcache-", 15) != 0)
			continue;
		path[strcspn(path, "\n")] = '\0';
		if (n < 16)
			snprintf(paths[n], sizeof(paths[n]), "%s", path);
		n++;
	}
	fclose(f);
	printf("mc_maps=%d\n", n);
	for (int i = 0; i < n && i < 16; i++)
		printf("mc_map %s\n", paths[i]);
	return 0;
}

int main(int argc, char **argv)
{
	printf("secure=%lu ruid=%d euid=%d\n", getauxval(AT_SECURE), (int)getuid(), (int)geteuid());
	printf("env_rundir=%s\n", or_dash(getenv("IDCACHE_RUNDIR")));
	printf("env_memcache=%s\n", or_dash(getenv("IDCACHE_MEMCACHE")));
	for (int i = 1; i < argc; i++) {
		errno = 0;
		struct passwd *pw = getpwnam(argv[i]);
		if (pw)
			printf("user %s found %u %u %s\n", argv[i], (unsigned)pw->pw_uid,
			       (unsigned)pw->pw_gid, pw->pw_gecos);
		else
			printf("user %s missing %d\n", argv[i], errno);
	}
	int rc = print_mc_maps();
	fflush(stdout);
	return rc < 0 ? 1 : 0;
}
