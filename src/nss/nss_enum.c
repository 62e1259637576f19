/*
 * nss enumeration: setXXent/getXXent_r/endXXent over one connection per map.
 * Batches are kept in an anonymous mapping rather than the heap: this is not
 * the lookup hot path, but the module still stays out of the host's malloc.
 * The mapping grows only when a single record exceeds it (a huge group).
 */
#include "nss/nss_int.h"

#include <errno.h>
#include <sys/mman.h>
#include <unistd.h>

#define ENT_BUF_MIN   (32u * 1024u)
#define ENT_MAX_COUNT 256u

/* Forget the connection and the batch; keep the mapping for reuse. Called in
 * a forked child too: closing the inherited descriptor there leaves the
 * parent's connection (and its server cursor) untouched. */
static void ent_reset(struct idc_ent *e)
{
	idc_nss_close(&e->c);
	e->done = false;
	e->left = 0;
	e->off = 0;
	e->pid = getpid();
}

static void ent_unmap(struct idc_ent *e)
{
	if (e->buf)
		munmap(e->buf, e->cap);
	e->buf = NULL;
	e->cap = 0;
}

/* Make the batch buffer at least need bytes. 0 or -ENOMEM. */
static int ent_reserve(struct idc_ent *e, size_t need)
{
	if (need < ENT_BUF_MIN)
		need = ENT_BUF_MIN;
	if (e->buf && e->cap >= need)
		return 0;
	size_t pg = 65536;
	size_t cap = (need + pg - 1) / pg * pg;
	void *p = mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return -ENOMEM;
	ent_unmap(e);
	e->buf = p;
	e->cap = cap;
	return 0;
}

/* A simple request (SETxxENT) whose OK reply has no payload. */
static int ent_simple(struct idc_ent *e, uint32_t cmd)
{
	uint8_t frame[PROTO_HDR_SIZE];
	struct proto_req req = {.cmd = cmd};
	struct proto_hdr h;
	int len = proto_encode_request(frame, sizeof(frame), &req);
	if (len < 0 || proto_client_request(&e->c, frame, (size_t)len, &h) < 0)
		return -EIO;
	if (h.status != PROTO_ST_OK || proto_client_skip(&e->c) < 0)
		return -EIO;
	return 0;
}

/* Open the connection and start the server's cursor. */
static enum nss_status ent_open(struct idc_ent *e)
{
	ent_reset(e);
	if (idc_nss_connect(&e->c) < 0)
		return NSS_STATUS_UNAVAIL;
	if (ent_simple(e, e->set_cmd) < 0) {
		ent_reset(e);
		return NSS_STATUS_UNAVAIL;
	}
	return NSS_STATUS_SUCCESS;
}

enum nss_status idc_ent_set(struct idc_ent *e)
{
	pthread_mutex_lock(&e->lock);
	enum nss_status st = ent_open(e);
	pthread_mutex_unlock(&e->lock);
	return st;
}

enum nss_status idc_ent_end(struct idc_ent *e)
{
	pthread_mutex_lock(&e->lock);
	/* Closing drops the server's cursor; no ENDxxENT round trip needed. */
	ent_reset(e);
	ent_unmap(e);
	pthread_mutex_unlock(&e->lock);
	return NSS_STATUS_SUCCESS;
}

/* Fetch the next batch into e->buf. SUCCESS with left > 0, NOTFOUND at the
 * end, or a failure status with *err. */
static enum nss_status ent_fetch(struct idc_ent *e, int *err)
{
	uint8_t frame[PROTO_HDR_SIZE + 8];
	struct proto_hdr h;
	if (ent_reserve(e, 0) < 0)
		return NSS_STATUS_UNAVAIL;
	struct proto_req req = {
	    .cmd = e->get_cmd, .max_count = ENT_MAX_COUNT, .max_bytes = (uint32_t)e->cap};
	int len = proto_encode_request(frame, sizeof(frame), &req);
	if (len < 0 || proto_client_request(&e->c, frame, (size_t)len, &h) < 0)
		return NSS_STATUS_UNAVAIL;
	if (h.status != PROTO_ST_OK) {
		if (h.status == PROTO_ST_NOTFOUND)
			e->done = true;
		return idc_nss_status(h.status, err);
	}
	size_t n = e->c.pending;
	if (ent_reserve(e, n) < 0 || proto_client_read(&e->c, e->buf, n) < 0 ||
	    proto_decode_batch(e->get_cmd, e->buf, n, &e->batch) < 0)
		return NSS_STATUS_UNAVAIL;
	e->off = 0;
	e->left = e->batch.count;
	return NSS_STATUS_SUCCESS;
}

/* Pack the record at e->off; advance only on success. */
static int ent_pack(struct idc_ent *e, void *result, char *buf, size_t buflen)
{
	size_t off = e->off;
	int rc;
	if (e->get_cmd == PROTO_CMD_GETPWENT) {
		struct proto_passwd pw;
		if (proto_batch_next_passwd(&e->batch, &off, &pw) != 1)
			return -EBADMSG;
		rc = proto_pack_passwd(&pw, result, buf, buflen);
	} else {
		struct proto_group gr;
		if (proto_batch_next_group(&e->batch, &off, &gr) != 1)
			return -EBADMSG;
		rc = proto_pack_group(&gr, result, buf, buflen);
	}
	if (rc == 0) {
		e->off = off;
		e->left--;
	}
	return rc;
}

static enum nss_status ent_get_locked(struct idc_ent *e, void *result, char *buf, size_t buflen,
				      int *err)
{
	if (e->pid != getpid())
		ent_reset(e); /* forked child: the connection belongs to the parent */
	if (e->c.fd < 0 && e->left == 0 && !e->done) {
		/* getXXent without setXXent starts the enumeration implicitly. */
		enum nss_status st = ent_open(e);
		if (st != NSS_STATUS_SUCCESS)
			return st;
	}
	if (e->left == 0) {
		if (e->done) {
			*err = ENOENT;
			return NSS_STATUS_NOTFOUND;
		}
		enum nss_status st = ent_fetch(e, err);
		if (st != NSS_STATUS_SUCCESS) {
			if (st != NSS_STATUS_NOTFOUND)
				ent_reset(e);
			return st;
		}
	}
	int rc = ent_pack(e, result, buf, buflen);
	if (rc == -ERANGE) {
		*err = ERANGE;
		return NSS_STATUS_TRYAGAIN;
	}
	if (rc < 0) {
		ent_reset(e);
		return NSS_STATUS_UNAVAIL;
	}
	return NSS_STATUS_SUCCESS;
}

enum nss_status idc_ent_get(struct idc_ent *e, void *result, char *buf, size_t buflen, int *errnop)
{
	int saved = errno;
	int err = 0;
	pthread_mutex_lock(&e->lock);
	enum nss_status st = ent_get_locked(e, result, buf, buflen, &err);
	pthread_mutex_unlock(&e->lock);
	return idc_nss_done(st, err, saved, errnop);
}
