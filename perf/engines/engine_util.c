/* engines: the engine table and helpers every engine shares (engine.h). */
#include "engine.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

const struct eng_ops *const eng_all[] = {
    &eng_idcache, &eng_idcache_nosync, &eng_ldb_tdb, &eng_ldb_mdb, &eng_openldap,
};
const size_t eng_count = IDC_ARRAY_SIZE(eng_all);

/* nftw has no user argument; du runs on the harness's thread only. */
static int64_t du_total;

static int du_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)path, (void)ftw;
	if (flag == FTW_F)
		du_total += (int64_t)sb->st_blocks * 512;
	return 0;
}

int64_t eng_du(const char *dir)
{
	du_total = 0;
	if (nftw(dir, du_one, 16, FTW_PHYS) < 0)
		return -errno;
	return du_total;
}

/* The last non-empty line of log into d, for a failed tool's message. */
static void last_line(const char *log, char *out, size_t cap)
{
	out[0] = '\0';
	FILE *f = log ? fopen(log, "r") : NULL;
	if (!f)
		return;
	char line[400];
	while (fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\n")] = '\0';
		if (line[0])
			snprintf(out, cap, "%.250s", line);
	}
	fclose(f);
}

int eng_spawn_wait(char *const argv[], const char *log, struct idc_diag *d)
{
	pid_t pid = fork();
	if (pid < 0)
		return idc_diag_set(d, -errno, "fork: %s", strerror(errno));
	if (pid == 0) {
		int fd =
		    open(log ? log : "/dev/null", O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		execv(argv[0], argv);
		_exit(127);
	}
	int st;
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return idc_diag_set(d, -errno, "waitpid: %s", strerror(errno));
	if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
		return 0;
	char tail[300];
	last_line(log, tail, sizeof(tail));
	return idc_diag_set(d, -EIO, "%s exited with status %d%s%s", argv[0],
			    WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st),
			    tail[0] ? ": " : "", tail);
}

/* splitmix64 step: GUIDs must be distinct per entry, not secret. */
static uint64_t mix(uint64_t z)
{
	z += 0x9e3779b97f4a7c15ULL;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

void eng_guid(uint64_t seed, uint64_t n, uint8_t out[16])
{
	uint64_t a = mix(seed ^ 0x6c6462ULL), b = n; /* n itself: distinct by construction */
	memcpy(out, &a, 8);
	memcpy(out + 8, &b, 8);
}
