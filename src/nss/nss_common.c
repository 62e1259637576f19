/*
 * nss common: errno discipline, name checks, finding the daemon's socket and
 * the one-shot lookup exchange shared by every getXXbyYY entry point.
 */
#include "nss/nss_int.h"
#include "util/util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

enum nss_status idc_nss_done(enum nss_status st, int err, int saved_errno, int *errnop)
{
	errno = saved_errno;
	if (err)
		*errnop = err;
	return st;
}

bool idc_nss_name_ok(const char *name, struct proto_str *out)
{
	if (name == NULL)
		return false;
	size_t len = strnlen(name, PROTO_NAME_MAX + 1);
	/* The daemon's own rule (util), checked here so a malformed name costs
	 * no connection: NOTFOUND at once, as docs/DESIGN.md §8 asks. */
	if (len > PROTO_NAME_MAX || !idc_name_valid(name, len))
		return false;
	out->p = name;
	out->len = (uint32_t)len;
	return true;
}

/* One reader per map for the whole process, set up once. A forked child
 * inherits them with their mappings (see mc/reader.c). */
static struct mc_reader mc_readers[3];
static bool mc_enabled;
static pthread_once_t mc_once = PTHREAD_ONCE_INIT;

/* Hand out what one MCMAP reply brought: the map of kind is returned, the
 * others are offered to their readers; anything unexpected is closed. */
static int mc_distribute(uint32_t kind, const int *fds, const uint32_t *kinds, size_t n)
{
	int mine = -ENODATA; /* the daemon serves other maps, not this one */
	for (size_t i = 0; i < n; i++) {
		uint32_t k = kinds[i];
		if (k == kind && mine < 0)
			mine = fds[i];
		else if (k >= MC_PASSWD && k <= MC_INITGROUPS && k != kind)
			mc_reader_offer(&mc_readers[k - MC_PASSWD], fds[i]);
		else
			close(fds[i]);
	}
	return mine;
}

/* The daemon hands the maps over nss.sock as read-only descriptors of
 * sealed memfds (MCMAP): nothing under run_dir is opened or trusted as a
 * file, and the seal is what makes a mapping safe to read (mc/reader.c).
 * One request brings every map, so a process pays one round trip however
 * many kinds it looks up. */
static int mc_source(void *ctx, uint32_t kind)
{
	(void)ctx;
	uint8_t frame[PROTO_HDR_SIZE + 4];
	uint8_t payload[4 + 4 * PROTO_FDS_MAX];
	struct proto_req req = {.cmd = PROTO_CMD_MCMAP, .id = 0};
	struct proto_client c;
	struct proto_hdr h;
	int fds[PROTO_FDS_MAX];
	uint32_t kinds[PROTO_FDS_MAX];
	size_t nfds = 0, nkinds = 0;
	int len = proto_encode_request(frame, sizeof(frame), &req);
	if (len < 0)
		return len;
	int rc = idc_nss_connect(&c);
	if (rc < 0)
		return rc;
	rc = proto_client_request_fds(&c, frame, (size_t)len, &h, fds, PROTO_FDS_MAX, &nfds);
	if (rc == 0 && h.status == PROTO_ST_UNAVAIL) {
		rc = -ENODATA; /* maps disabled: the reader waits before asking again */
	} else if (rc == 0) {
		size_t n = c.pending;
		if (h.status != PROTO_ST_OK || n > sizeof(payload) ||
		    proto_client_read(&c, payload, n) < 0 ||
		    proto_decode_mcmap(payload, n, kinds, PROTO_FDS_MAX, &nkinds) < 0 ||
		    nkinds != nfds)
			rc = -EPROTO;
	}
	idc_nss_close(&c);
	if (rc < 0) {
		while (nfds > 0)
			close(fds[--nfds]);
		return rc;
	}
	return mc_distribute(kind, fds, kinds, nfds);
}

static void mc_setup(void)
{
	const char *env = secure_getenv("IDCACHE_MEMCACHE");
	if (env != NULL && strcmp(env, "no") == 0)
		return;
	for (uint32_t k = 0; k < 3; k++)
		if (mc_reader_init(&mc_readers[k], MC_PASSWD + k, mc_source, NULL) < 0)
			return;
	mc_enabled = true;
}

struct mc_reader *idc_nss_mc(uint32_t kind)
{
	if (kind < MC_PASSWD || kind > MC_INITGROUPS || idc_nss_in_daemon() ||
	    pthread_once(&mc_once, mc_setup) != 0)
		return NULL;
	return mc_enabled ? &mc_readers[kind - MC_PASSWD] : NULL;
}

enum nss_status idc_nss_mc_done(int rc, int saved_errno, int *errnop)
{
	if (rc == 0)
		return idc_nss_done(NSS_STATUS_SUCCESS, 0, saved_errno, errnop);
	return idc_nss_done(NSS_STATUS_TRYAGAIN, ERANGE, saved_errno, errnop);
}

/* A daemon that let a call reach its deadline (stopped, wedged) is not
 * asked again for IDC_NSS_QUIET_MS: lookups meanwhile are UNAVAIL at once
 * and glibc asks the next source. Without it a stopped daemon would cost
 * every lookup the whole timeout, and a process's first lookup twice (the
 * memory cache's MCMAP, then the lookup). glibc backs off from an
 * unresponsive nscd the same way. */
#define IDC_NSS_QUIET_MS 10000u
static _Atomic uint64_t quiet_until_ns;

void idc_nss_close(struct proto_client *c)
{
	if (c->timed_out)
		atomic_store(&quiet_until_ns, idc_now_ns() + IDC_NSS_QUIET_MS * 1000000ull);
	c->timed_out = false; /* noted once, however often c is closed again */
	proto_client_close(c);
}

int idc_nss_connect(struct proto_client *c)
{
	if (idc_nss_in_daemon() || idc_now_ns() < atomic_load(&quiet_until_ns)) {
		memset(c, 0, sizeof(*c));
		c->fd = -1;
		return -EAGAIN;
	}
	char path[128]; /* sun_path is 108: anything longer fails below anyway */
	if (proto_nss_socket_path(path, sizeof(path)) < 0) {
		c->fd = -1;
		return -ENAMETOOLONG;
	}
	return proto_client_connect(c, path, PROTO_CLIENT_TIMEOUT_MS);
}

enum nss_status idc_nss_status(uint32_t st, int *err)
{
	switch (st) {
	case PROTO_ST_NOTFOUND:
		*err = ENOENT;
		return NSS_STATUS_NOTFOUND;
	case PROTO_ST_TRYAGAIN:
		*err = EAGAIN;
		return NSS_STATUS_TRYAGAIN;
	default:
		/* UNAVAIL, ERROR, BADREQ, VERSION or an unknown code: let glibc
		 * ask the next source. */
		*err = 0;
		return NSS_STATUS_UNAVAIL;
	}
}

/* Where an OK reply of n bytes is received: the caller's buffer first (no
 * copy; the packers handle the overlap), else the stack area. NULL if
 * neither holds it. For a group with two or more members the packed form is
 * never smaller than the encoded one, so "does not fit buf" already proves
 * ERANGE; for other records the stack area keeps the answer exact up to its
 * size, and beyond it glibc's retry with a larger buffer succeeds. */
static uint8_t *recv_area(char *buf, size_t buflen, uint8_t *stack, size_t stacklen, size_t n)
{
	if (buf != NULL && n <= buflen)
		return (uint8_t *)buf;
	if (n <= stacklen)
		return stack;
	return NULL;
}

enum nss_status idc_nss_fetch(const struct proto_req *req, char *buf, size_t buflen, uint8_t *stack,
			      size_t stacklen, const uint8_t **payload, size_t *n, int *err)
{
	uint8_t frame[PROTO_HDR_SIZE + 8 + PROTO_NAME_MAX + 1];
	struct proto_client c;
	struct proto_hdr h;
	*err = 0;
	int len = proto_encode_request(frame, sizeof(frame), req);
	if (len < 0 || idc_nss_connect(&c) < 0)
		return NSS_STATUS_UNAVAIL;
	enum nss_status st = NSS_STATUS_UNAVAIL;
	if (proto_client_request(&c, frame, (size_t)len, &h) < 0)
		goto out;
	if (h.status != PROTO_ST_OK) {
		st = idc_nss_status(h.status, err);
		goto out;
	}
	*n = c.pending;
	uint8_t *area = recv_area(buf, buflen, stack, stacklen, *n);
	if (area == NULL) {
		*err = ERANGE;
		st = NSS_STATUS_TRYAGAIN;
		goto out;
	}
	if (proto_client_read(&c, area, *n) == 0) {
		*payload = area;
		st = NSS_STATUS_SUCCESS;
	}
out:
	/* Unread bytes are simply dropped with the connection. */
	idc_nss_close(&c);
	return st;
}
