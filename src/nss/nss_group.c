/*
 * nss group: getgrnam_r, getgrgid_r, the grent enumeration and
 * initgroups_dyn. Large groups are received straight into the caller's
 * buffer and unpacked in place (see proto_pack_group), so a group of any
 * size needs no memory of ours.
 */
#include "nss/nss_int.h"

#include <errno.h>
#include <grp.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>

nss_getgrnam_r _nss_idcache_getgrnam_r;
nss_getgrgid_r _nss_idcache_getgrgid_r;
nss_setgrent _nss_idcache_setgrent;
nss_getgrent_r _nss_idcache_getgrent_r;
nss_endgrent _nss_idcache_endgrent;
nss_initgroups_dyn _nss_idcache_initgroups_dyn;

static struct idc_ent grent = IDC_ENT_INIT(PROTO_CMD_SETGRENT, PROTO_CMD_GETGRENT);

static enum nss_status gr_lookup(const struct proto_req *req, long long want_gid,
				 struct group *result, char *buf, size_t buflen, int *err)
{
	uint8_t stack[IDC_NSS_STACK_REPLY];
	const uint8_t *payload = NULL;
	size_t n = 0;
	enum nss_status st =
	    idc_nss_fetch(req, buf, buflen, stack, sizeof(stack), &payload, &n, err);
	if (st != NSS_STATUS_SUCCESS)
		return st;
	struct proto_group gr;
	if (proto_decode_group(payload, n, &gr) < 0 ||
	    (want_gid >= 0 && gr.gid != (uint32_t)want_gid))
		return NSS_STATUS_UNAVAIL;
	if (proto_pack_group(&gr, result, buf, buflen) < 0) {
		*err = ERANGE;
		return NSS_STATUS_TRYAGAIN;
	}
	return NSS_STATUS_SUCCESS;
}

enum nss_status _nss_idcache_getgrnam_r(const char *name, struct group *result, char *buf,
					size_t buflen, int *errnop)
{
	int saved = errno;
	struct proto_req req = {.cmd = PROTO_CMD_GETGRNAM};
	if (!idc_nss_name_ok(name, &req.name))
		return idc_nss_done(NSS_STATUS_NOTFOUND, ENOENT, saved, errnop);
	struct mc_reader *mc = idc_nss_mc(MC_GROUP);
	int rc = mc ? mc_getgrnam(mc, req.name.p, req.name.len, result, buf, buflen) : -ENOENT;
	if (rc != -ENOENT)
		return idc_nss_mc_done(rc, saved, errnop);
	int err = 0;
	enum nss_status st = gr_lookup(&req, -1, result, buf, buflen, &err);
	return idc_nss_done(st, err, saved, errnop);
}

enum nss_status _nss_idcache_getgrgid_r(gid_t gid, struct group *result, char *buf, size_t buflen,
					int *errnop)
{
	int saved = errno;
	struct proto_req req = {.cmd = PROTO_CMD_GETGRGID, .id = gid};
	struct mc_reader *mc = idc_nss_mc(MC_GROUP);
	int rc = mc ? mc_getgrgid(mc, gid, result, buf, buflen) : -ENOENT;
	if (rc != -ENOENT)
		return idc_nss_mc_done(rc, saved, errnop);
	int err = 0;
	enum nss_status st = gr_lookup(&req, (long long)gid, result, buf, buflen, &err);
	return idc_nss_done(st, err, saved, errnop);
}

enum nss_status _nss_idcache_setgrent(int stayopen)
{
	(void)stayopen;
	int saved = errno;
	enum nss_status st = idc_ent_set(&grent);
	errno = saved;
	return st;
}

enum nss_status _nss_idcache_getgrent_r(struct group *result, char *buf, size_t buflen, int *errnop)
{
	return idc_ent_get(&grent, result, buf, buflen, errnop);
}

enum nss_status _nss_idcache_endgrent(void)
{
	int saved = errno;
	enum nss_status st = idc_ent_end(&grent);
	errno = saved;
	return st;
}

/* ---- initgroups ------------------------------------------------------------ */

/* The caller's array, as glibc hands it over: used entries, capacity, limit
 * (<= 0: none). */
struct gid_array {
	long *start, *size;
	gid_t **groups;
	long limit;
};

/* Append gid unless it is skip or already present. Grows *groups the way
 * glibc expects (doubling, capped at limit; realloc of the caller's array is
 * part of the initgroups_dyn contract). 0 added or skipped, 1 the limit is
 * reached (stop quietly), -ENOMEM. */
static int gid_add(struct gid_array *a, gid_t gid, gid_t skip)
{
	if (gid == skip)
		return 0;
	for (long i = 0; i < *a->start; i++)
		if ((*a->groups)[i] == gid)
			return 0;
	if (*a->start >= *a->size) {
		if (a->limit > 0 && *a->size >= a->limit)
			return 1;
		long nsize = *a->size > 0 ? *a->size * 2 : 16;
		if (a->limit > 0 && nsize > a->limit)
			nsize = a->limit;
		if ((unsigned long)nsize > SIZE_MAX / sizeof(gid_t))
			return -ENOMEM;
		gid_t *ng = realloc(*a->groups, (size_t)nsize * sizeof(gid_t));
		if (ng == NULL)
			return -ENOMEM;
		*a->groups = ng;
		*a->size = nsize;
	}
	(*a->groups)[(*a->start)++] = gid;
	return 0;
}

/* Stream the gid list from the socket in stack-sized chunks: a user in
 * thousands of groups needs no buffer of ours. The frame length was checked
 * against the count before the first gid is read. */
static enum nss_status ig_receive(struct proto_client *c, gid_t skip, struct gid_array *a, int *err)
{
	uint32_t count, chunk[256];
	size_t n = c->pending;
	if (n < 4 || (n - 4) % 4 != 0 || proto_client_read(c, &count, 4) < 0 ||
	    (size_t)count != (n - 4) / 4)
		return NSS_STATUS_UNAVAIL;
	while (count > 0) {
		uint32_t k =
		    count < IDC_ARRAY_SIZE(chunk) ? count : (uint32_t)IDC_ARRAY_SIZE(chunk);
		if (proto_client_read(c, chunk, (size_t)k * 4) < 0)
			return NSS_STATUS_UNAVAIL;
		for (uint32_t i = 0; i < k; i++) {
			int rc = gid_add(a, chunk[i], skip);
			if (rc == 1)
				return NSS_STATUS_SUCCESS;
			if (rc < 0) {
				*err = ENOMEM;
				return NSS_STATUS_TRYAGAIN;
			}
		}
		count -= k;
	}
	return NSS_STATUS_SUCCESS;
}

/* Make room for n more gids without passing the limit (false: cannot, let
 * the socket path apply the limit its way). */
static bool gid_room(struct gid_array *a, size_t n)
{
	if ((size_t)(*a->size - *a->start) >= n)
		return true;
	if (n > (size_t)LONG_MAX / 2 || (a->limit > 0 && *a->start + (long)n > a->limit) ||
	    (size_t)(*a->start + (long)n) > SIZE_MAX / sizeof(gid_t))
		return false;
	long nsize = *a->start + (long)n;
	gid_t *ng = realloc(*a->groups, (size_t)nsize * sizeof(gid_t));
	if (ng == NULL)
		return false;
	*a->groups = ng;
	*a->size = nsize;
	return true;
}

/* initgroups from the shared-memory cache: the gids are copied straight
 * into the caller's array after the used part, then the primary group and
 * gids already present are squeezed out. True on a hit (the array holds
 * the answer); false leaves the used part as it was for the socket path. */
static bool ig_from_mc(const struct proto_str *user, gid_t skip, struct gid_array *a)
{
	_Static_assert(sizeof(gid_t) == sizeof(uint32_t), "gid_t is 32 bits");
	struct mc_reader *mc = idc_nss_mc(MC_INITGROUPS);
	if (mc == NULL || *a->start < 0 || *a->size < *a->start)
		return false;
	size_t n = 0;
	long used = *a->start;
	int rc = mc_initgroups(mc, user->p, user->len, (uint32_t *)(*a->groups + used),
			       (size_t)(*a->size - used), &n);
	if (rc == -ERANGE && gid_room(a, n))
		rc = mc_initgroups(mc, user->p, user->len, (uint32_t *)(*a->groups + used),
				   (size_t)(*a->size - used), &n);
	if (rc < 0)
		return false;
	gid_t *g = *a->groups;
	long out = used;
	for (size_t i = 0; i < n; i++) {
		gid_t gid = g[used + (long)i];
		bool dup = gid == skip;
		for (long j = 0; j < used && !dup; j++)
			dup = g[j] == gid;
		if (!dup)
			g[out++] = gid;
	}
	*a->start = out;
	return true;
}

enum nss_status _nss_idcache_initgroups_dyn(const char *user, gid_t group, long int *start,
					    long int *size, gid_t **groupsp, long int limit,
					    int *errnop)
{
	int saved = errno;
	struct proto_req req = {.cmd = PROTO_CMD_INITGROUPS};
	if (!idc_nss_name_ok(user, &req.name))
		return idc_nss_done(NSS_STATUS_NOTFOUND, ENOENT, saved, errnop);
	struct gid_array a = {start, size, groupsp, limit};
	if (ig_from_mc(&req.name, group, &a))
		return idc_nss_done(NSS_STATUS_SUCCESS, 0, saved, errnop);
	uint8_t frame[PROTO_HDR_SIZE + 4 + PROTO_NAME_MAX + 1];
	int len = proto_encode_request(frame, sizeof(frame), &req);
	struct proto_client c;
	struct proto_hdr h;
	if (len < 0 || idc_nss_connect(&c) < 0)
		return idc_nss_done(NSS_STATUS_UNAVAIL, 0, saved, errnop);
	int err = 0;
	enum nss_status st = NSS_STATUS_UNAVAIL;
	if (proto_client_request(&c, frame, (size_t)len, &h) == 0) {
		st = h.status == PROTO_ST_OK ? ig_receive(&c, group, &a, &err)
					     : idc_nss_status(h.status, &err);
	}
	idc_nss_close(&c);
	return idc_nss_done(st, err, saved, errnop);
}
