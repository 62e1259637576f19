/*
 * libnss_bench0.so.2: a do-nothing NSS module for bench/nss — the dispatch
 * floor. Every lookup answers one constant record, packed into the caller's
 * buffer the way a real module packs its answer, whatever key is asked;
 * initgroups adds the same 200 gids every time. What remains of a lookup
 * through it is glibc's own work: nsswitch.conf checks, dispatch, the
 * reentrant wrapper. Never installed; loaded by name through
 * LD_LIBRARY_PATH inside the benchmark's mount namespace only.
 */
#include <errno.h>
#include <grp.h>
#include <nss.h>
#include <pwd.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#define BENCH0_GROUPS    200
#define BENCH0_FIRST_GID 50000u

enum nss_status _nss_bench0_getpwnam_r(const char *name, struct passwd *pw, char *buf,
				       size_t buflen, int *errnop);
enum nss_status _nss_bench0_getpwuid_r(uid_t uid, struct passwd *pw, char *buf, size_t buflen,
				       int *errnop);
enum nss_status _nss_bench0_getgrnam_r(const char *name, struct group *gr, char *buf, size_t buflen,
				       int *errnop);
enum nss_status _nss_bench0_getgrgid_r(gid_t gid, struct group *gr, char *buf, size_t buflen,
				       int *errnop);
enum nss_status _nss_bench0_initgroups_dyn(const char *user, gid_t group, long *start, long *size,
					   gid_t **groupsp, long limit, int *errnop);

/* The constant strings, back to back with their NULs. */
static const char PW_STRS[] = "bench0\0x\0Bench Zero\0/home/bench0\0/bin/sh";
static const char GR_STRS[] = "bench0\0x\0first\0grpuser\0last";

static enum nss_status short_buffer(int *errnop)
{
	*errnop = ERANGE;
	return NSS_STATUS_TRYAGAIN;
}

static enum nss_status fill_pw(struct passwd *pw, char *buf, size_t buflen, int *errnop)
{
	if (buflen < sizeof(PW_STRS))
		return short_buffer(errnop);
	memcpy(buf, PW_STRS, sizeof(PW_STRS));
	pw->pw_name = buf;
	pw->pw_passwd = buf + 7;
	pw->pw_gecos = buf + 9;
	pw->pw_dir = buf + 20;
	pw->pw_shell = buf + 33;
	pw->pw_uid = 2000;
	pw->pw_gid = 2000;
	return NSS_STATUS_SUCCESS;
}

static enum nss_status fill_gr(struct group *gr, char *buf, size_t buflen, int *errnop)
{
	/* members' pointer array first (aligned), then the strings */
	size_t ptrs = 4 * sizeof(char *);
	size_t pad = (sizeof(char *) - ((uintptr_t)buf % sizeof(char *))) % sizeof(char *);
	if (buflen < pad + ptrs + sizeof(GR_STRS))
		return short_buffer(errnop);
	char **mem = (char **)(void *)(buf + pad);
	char *s = buf + pad + ptrs;
	memcpy(s, GR_STRS, sizeof(GR_STRS));
	mem[0] = s + 9;
	mem[1] = s + 15;
	mem[2] = s + 23;
	mem[3] = NULL;
	gr->gr_name = s;
	gr->gr_passwd = s + 7;
	gr->gr_gid = 2000;
	gr->gr_mem = mem;
	return NSS_STATUS_SUCCESS;
}

enum nss_status _nss_bench0_getpwnam_r(const char *name, struct passwd *pw, char *buf,
				       size_t buflen, int *errnop)
{
	(void)name;
	return fill_pw(pw, buf, buflen, errnop);
}

enum nss_status _nss_bench0_getpwuid_r(uid_t uid, struct passwd *pw, char *buf, size_t buflen,
				       int *errnop)
{
	(void)uid;
	return fill_pw(pw, buf, buflen, errnop);
}

enum nss_status _nss_bench0_getgrnam_r(const char *name, struct group *gr, char *buf, size_t buflen,
				       int *errnop)
{
	(void)name;
	return fill_gr(gr, buf, buflen, errnop);
}

enum nss_status _nss_bench0_getgrgid_r(gid_t gid, struct group *gr, char *buf, size_t buflen,
				       int *errnop)
{
	(void)gid;
	return fill_gr(gr, buf, buflen, errnop);
}

/* The same 200 gids for everyone, grown into glibc's array as every
 * module must (the harness passes room enough, so no realloc runs). */
enum nss_status _nss_bench0_initgroups_dyn(const char *user, gid_t group, long *start, long *size,
					   gid_t **groupsp, long limit, int *errnop)
{
	(void)user;
	long need = *start + BENCH0_GROUPS;
	if (need > *size) {
		long grow = limit > 0 && need > limit ? limit : need;
		if (grow <= *size)
			return NSS_STATUS_SUCCESS;
		gid_t *g = realloc(*groupsp, (size_t)grow * sizeof(*g));
		if (g == NULL) {
			*errnop = ENOMEM;
			return NSS_STATUS_TRYAGAIN;
		}
		*groupsp = g;
		*size = grow;
	}
	gid_t *g = *groupsp;
	for (uint32_t i = 0; i < BENCH0_GROUPS && *start < *size; i++)
		if (BENCH0_FIRST_GID + i != group)
			g[(*start)++] = BENCH0_FIRST_GID + i;
	return NSS_STATUS_SUCCESS;
}
