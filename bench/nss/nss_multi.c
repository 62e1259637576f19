/*
 * nss_multi: NSS lookup throughput through glibc, N processes at once.
 *
 *   nss_multi NPROCS TARGET_S REPS MODE KEY [EXPECT]
 *     MODE  pwnam | pwuid | grnam | grouplist
 *     KEY   the name (pwnam, grnam, grouplist) or number (pwuid) looked up
 *     EXPECT grouplist: the number of groups every call must return
 *
 * The parent checks the key resolves, then calibrates: it times lookups in
 * its own process until 50 ms have passed, and sizes each child's loop so
 * that one run of NPROCS children lasts about TARGET_S seconds on this
 * machine's CPUs. Then REPS runs: fork NPROCS children, each does LOOPS
 * lookups and checks every answer, the parent waits for all. Per run:
 * us_per_lookup = wall time / (NPROCS x LOOPS), the figure the reference
 * measurements quoted in the README report. One line of key=value on stdout:
 * the median, min and max over the runs, and failed lookups (must be 0).
 * Which source answers is nsswitch.conf's business (bench/nss/nss_bench.sh
 * bind-mounts one per row in a private mount namespace).
 */
#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_REPS   99
#define MAX_GROUPS 4096
#define BUF_SIZE   (1 << 16)

enum mode { PWNAM, PWUID, GRNAM, GROUPLIST };

struct job {
	enum mode mode;
	const char *key;
	uid_t id;
	gid_t base; /* grouplist: the user's primary gid */
	int expect; /* grouplist: groups per answer */
};

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* One lookup; 0 when it returned the expected kind of answer. */
static int lookup(const struct job *j, char *buf)
{
	struct passwd pw, *pres = NULL;
	struct group gr, *gres = NULL;
	static gid_t groups[MAX_GROUPS];
	int n = MAX_GROUPS;
	switch (j->mode) {
	case PWNAM:
		return getpwnam_r(j->key, &pw, buf, BUF_SIZE, &pres) != 0 || pres == NULL;
	case PWUID:
		return getpwuid_r(j->id, &pw, buf, BUF_SIZE, &pres) != 0 || pres == NULL;
	case GRNAM:
		return getgrnam_r(j->key, &gr, buf, BUF_SIZE, &gres) != 0 || gres == NULL;
	case GROUPLIST:
		return getgrouplist(j->key, j->base, groups, &n) < 0 || n != j->expect;
	}
	return 1;
}

static int parse_job(char **argv, int argc, struct job *j)
{
	const char *m = argv[4];
	j->key = argv[5];
	j->mode = !strcmp(m, "pwnam")   ? PWNAM
		  : !strcmp(m, "pwuid") ? PWUID
		  : !strcmp(m, "grnam") ? GRNAM
					: GROUPLIST;
	if (j->mode == GROUPLIST && strcmp(m, "grouplist") != 0)
		return -1;
	j->id = (uid_t)strtoul(j->key, NULL, 10);
	j->expect = argc > 6 ? atoi(argv[6]) : -1;
	if (j->mode == GROUPLIST) {
		char buf[BUF_SIZE];
		struct passwd pw, *res = NULL;
		if (getpwnam_r(j->key, &pw, buf, sizeof(buf), &res) != 0 || res == NULL)
			return -1;
		j->base = pw.pw_gid;
		gid_t g[MAX_GROUPS];
		int n = MAX_GROUPS;
		if (getgrouplist(j->key, j->base, g, &n) < 0)
			return -1;
		if (j->expect >= 0 && n != j->expect) {
			fprintf(stderr, "nss_multi: %s is in %d groups, not %d\n", j->key, n,
				j->expect);
			return -1;
		}
		j->expect = n;
	}
	return 0;
}

/* Lookups per child so that a run lasts about target seconds. */
static long calibrate(const struct job *j, int nprocs, double target, char *buf)
{
	long k = 0;
	double t0 = now(), el;
	do {
		if (lookup(j, buf) != 0)
			return -1;
		k++;
		el = now() - t0;
	} while (el < 0.05);
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	double per = el / (double)k; /* one process alone */
	double loops = target * (double)(cpus > 0 ? cpus : 1) / (per * nprocs);
	if (loops > 5e7)
		loops = 5e7;
	return loops < 5 ? 5 : (long)loops;
}

/* One run: NPROCS children of LOOPS lookups each. Seconds, or <0. */
static double run_once(const struct job *j, int nprocs, long loops, long *failed)
{
	double t0 = now();
	for (int p = 0; p < nprocs; p++) {
		pid_t pid = fork();
		if (pid < 0)
			return -1;
		if (pid == 0) {
			static char buf[BUF_SIZE];
			long bad = 0;
			for (long i = 0; i < loops; i++)
				bad += lookup(j, buf);
			_exit(bad ? 1 : 0);
		}
	}
	int st;
	while (wait(&st) > 0)
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
			(*failed)++;
	return now() - t0;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	if (argc < 6) {
		fprintf(stderr,
			"usage: %s NPROCS TARGET_S REPS pwnam|pwuid|grnam|grouplist KEY "
			"[EXPECT]\n",
			argv[0]);
		return 2;
	}
	int nprocs = atoi(argv[1]), reps = atoi(argv[3]);
	double target = atof(argv[2]);
	struct job j;
	static char buf[BUF_SIZE];
	if (nprocs < 1 || reps < 1 || reps > MAX_REPS || target <= 0 || parse_job(argv, argc, &j)) {
		fprintf(stderr, "nss_multi: bad arguments, or %s %s does not resolve\n", argv[4],
			argv[5]);
		return 2;
	}
	long loops = calibrate(&j, nprocs, target, buf);
	if (loops < 0) {
		fprintf(stderr, "nss_multi: %s %s does not resolve\n", argv[4], argv[5]);
		return 1;
	}
	double us[MAX_REPS];
	long failed = 0;
	for (int r = 0; r < reps; r++) {
		double el = run_once(&j, nprocs, loops, &failed);
		if (el < 0) {
			perror("nss_multi: fork");
			return 1;
		}
		us[r] = el * 1e6 / ((double)nprocs * (double)loops);
	}
	qsort(us, (size_t)reps, sizeof(*us), cmp_double);
	double median = reps % 2 ? us[reps / 2] : (us[reps / 2 - 1] + us[reps / 2]) / 2;
	printf("mode=%s key=%s nprocs=%d loops=%ld reps=%d us_median=%.4f us_min=%.4f "
	       "us_max=%.4f lookups_per_s=%.0f failed_children=%ld",
	       argv[4], argv[5], nprocs, loops, reps, median, us[0], us[reps - 1], 1e6 / median,
	       failed);
	if (j.mode == GROUPLIST)
		printf(" ngroups=%d", j.expect);
	printf("\n");
	return failed ? 1 : 0;
}
