/*
 * libnss_slow.so.2, a test NSS source that takes SLOW_SECONDS (3) to say
 * "not found" for any name starting with "slow", and answers "not found"
 * at once otherwise: a directory that hangs, for the daemon's host lookups.
 */
#include <errno.h>
#include <nss.h>
#include <pwd.h>
#include <string.h>
#include <unistd.h>

enum nss_status _nss_slow_getpwnam_r(const char *name, struct passwd *pw, char *buf, size_t len,
				     int *errnop);

enum nss_status _nss_slow_getpwnam_r(const char *name, struct passwd *pw, char *buf, size_t len,
				     int *errnop)
{
	(void)pw;
	(void)buf;
	(void)len;
	if (strncmp(name, "slow", 4) == 0)
		sleep(3);
	*errnop = ENOENT;
	return NSS_STATUS_NOTFOUND;
}
