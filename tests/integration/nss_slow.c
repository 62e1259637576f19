/*
 * libnss_slow.so.2, a test NSS source beside files in the daemon's
 * nsswitch.conf: it takes 3 seconds to say "not found" for any name
 * starting with "slow" (a directory that hangs), knows one user of its
 * own, "othersrc" (uid 7600), and answers "not found" at once otherwise.
 */
#include <errno.h>
#include <nss.h>
#include <pwd.h>
#include <string.h>
#include <unistd.h>

enum nss_status _nss_slow_getpwnam_r(const char *name, struct passwd *pw, char *buf, size_t len,
				     int *errnop);
enum nss_status _nss_slow_getpwuid_r(uid_t uid, struct passwd *pw, char *buf, size_t len,
				     int *errnop);

static enum nss_status other(struct passwd *pw, char *buf, size_t len, int *errnop)
{
	static const char strings[] = "othersrc\0x\0other source\0/home/o\0/bin/sh";
	if (len < sizeof(strings)) {
		*errnop = ERANGE;
		return NSS_STATUS_TRYAGAIN;
	}
	memcpy(buf, strings, sizeof(strings));
	*pw = (struct passwd){buf, buf + 9, 7600, 7600, buf + 11, buf + 24, buf + 32};
	return NSS_STATUS_SUCCESS;
}

enum nss_status _nss_slow_getpwnam_r(const char *name, struct passwd *pw, char *buf, size_t len,
				     int *errnop)
{
	if (strcmp(name, "othersrc") == 0)
		return other(pw, buf, len, errnop);
	if (strncmp(name, "slow", 4) == 0)
		sleep(3);
	*errnop = ENOENT;
	return NSS_STATUS_NOTFOUND;
}

enum nss_status _nss_slow_getpwuid_r(uid_t uid, struct passwd *pw, char *buf, size_t len,
				     int *errnop)
{
	if (uid == 7600)
		return other(pw, buf, len, errnop);
	*errnop = ENOENT;
	return NSS_STATUS_NOTFOUND;
}
