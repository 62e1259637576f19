/*
 * nss passwd: getpwnam_r, getpwuid_r and the pwent enumeration. Each entry
 * point saves errno first and leaves through idc_nss_done.
 */
#include "nss/nss_int.h"

#include <errno.h>
#include <pwd.h>

nss_getpwnam_r _nss_idcache_getpwnam_r;
nss_getpwuid_r _nss_idcache_getpwuid_r;
nss_setpwent _nss_idcache_setpwent;
nss_getpwent_r _nss_idcache_getpwent_r;
nss_endpwent _nss_idcache_endpwent;

static struct idc_ent pwent = IDC_ENT_INIT(PROTO_CMD_SETPWENT, PROTO_CMD_GETPWENT);

/* Fetch, validate, pack. want_uid >= 0: the record must carry that uid (a
 * confused server must not hand out another user's entry). */
static enum nss_status pw_lookup(const struct proto_req *req, long long want_uid,
				 struct passwd *result, char *buf, size_t buflen, int *err)
{
	uint8_t stack[IDC_NSS_STACK_REPLY];
	const uint8_t *payload = NULL;
	size_t n = 0;
	enum nss_status st =
	    idc_nss_fetch(req, buf, buflen, stack, sizeof(stack), &payload, &n, err);
	if (st != NSS_STATUS_SUCCESS)
		return st;
	struct proto_passwd pw;
	if (proto_decode_passwd(payload, n, &pw) < 0 ||
	    (want_uid >= 0 && pw.uid != (uint32_t)want_uid))
		return NSS_STATUS_UNAVAIL;
	if (proto_pack_passwd(&pw, result, buf, buflen) < 0) {
		*err = ERANGE;
		return NSS_STATUS_TRYAGAIN;
	}
	return NSS_STATUS_SUCCESS;
}

enum nss_status _nss_idcache_getpwnam_r(const char *name, struct passwd *result, char *buf,
					size_t buflen, int *errnop)
{
	int saved = errno;
	struct proto_req req = {.cmd = PROTO_CMD_GETPWNAM};
	if (!idc_nss_name_ok(name, &req.name))
		return idc_nss_done(NSS_STATUS_NOTFOUND, ENOENT, saved, errnop);
	struct mc_reader *mc = idc_nss_mc(MC_PASSWD);
	int rc = mc ? mc_getpwnam(mc, req.name.p, req.name.len, result, buf, buflen) : -ENOENT;
	if (rc != -ENOENT)
		return idc_nss_mc_done(rc, saved, errnop);
	int err = 0;
	enum nss_status st = pw_lookup(&req, -1, result, buf, buflen, &err);
	return idc_nss_done(st, err, saved, errnop);
}

enum nss_status _nss_idcache_getpwuid_r(uid_t uid, struct passwd *result, char *buf, size_t buflen,
					int *errnop)
{
	int saved = errno;
	struct proto_req req = {.cmd = PROTO_CMD_GETPWUID, .id = uid};
	struct mc_reader *mc = idc_nss_mc(MC_PASSWD);
	int rc = mc ? mc_getpwuid(mc, uid, result, buf, buflen) : -ENOENT;
	if (rc != -ENOENT)
		return idc_nss_mc_done(rc, saved, errnop);
	int err = 0;
	enum nss_status st = pw_lookup(&req, (long long)uid, result, buf, buflen, &err);
	return idc_nss_done(st, err, saved, errnop);
}

enum nss_status _nss_idcache_setpwent(int stayopen)
{
	(void)stayopen; /* the enumeration connection stays open until endpwent anyway */
	int saved = errno;
	enum nss_status st = idc_ent_set(&pwent);
	errno = saved;
	return st;
}

enum nss_status _nss_idcache_getpwent_r(struct passwd *result, char *buf, size_t buflen,
					int *errnop)
{
	return idc_ent_get(&pwent, result, buf, buflen, errnop);
}

enum nss_status _nss_idcache_endpwent(void)
{
	int saved = errno;
	enum nss_status st = idc_ent_end(&pwent);
	errno = saved;
	return st;
}
