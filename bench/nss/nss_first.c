/*
 * nss_first: what a fresh process pays for its first lookups through NSS —
 * getpwnam, getgrgid of its primary group and getgrouplist of one user,
 * timed together, then the same three again (warm). Prints
 * "first_us warm_us ok". bench/nss/first_lookup.sh runs it many times.
 */
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <time.h>

static double now_us(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

/* One round: 1 when all three answered. */
static int round_of(const char *user)
{
	struct passwd *pw = getpwnam(user);
	if (pw == NULL)
		return 0;
	struct group *gr = getgrgid(pw->pw_gid);
	gid_t gl[256];
	int n = 256;
	return gr != NULL && getgrouplist(user, pw->pw_gid, gl, &n) > 0;
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: nss_first USER\n");
		return 2;
	}
	double t0 = now_us();
	int ok = round_of(argv[1]);
	double t1 = now_us();
	ok &= round_of(argv[1]);
	double t2 = now_us();
	printf("%.1f %.1f %d\n", t1 - t0, t2 - t1, ok);
	return ok ? 0 : 1;
}
