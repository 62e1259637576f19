/*
 * proto server side: the incremental frame reader the daemon feeds from its
 * non-blocking sockets, and reply builders appending to an idc_buf. Allocates
 * (through idc_buf), so it is not linked into the NSS module.
 */
#include "proto/proto.h"

#include <errno.h>
#include <string.h>

/* ---- frame reader ---------------------------------------------------------- */

void proto_reader_init(struct proto_reader *r, uint32_t max_frame)
{
	memset(r, 0, sizeof(*r));
	r->max_frame = max_frame < PROTO_HDR_SIZE ? PROTO_HDR_SIZE : max_frame;
}

void proto_reader_free(struct proto_reader *r)
{
	idc_buf_free(&r->in);
	r->off = 0;
}

size_t proto_reader_buffered(const struct proto_reader *r)
{
	return r->in.len - r->off;
}

/* Check the header at the read position once its 16 bytes are in, so a bad
 * length is refused before the peer makes us buffer up to it. */
static int check_head(struct proto_reader *r)
{
	struct proto_hdr h;
	if (r->err == 0 && proto_reader_buffered(r) >= PROTO_HDR_SIZE &&
	    proto_decode_hdr(r->in.data + r->off, PROTO_HDR_SIZE, r->max_frame, &h) < 0)
		r->err = -EBADMSG;
	return r->err;
}

int proto_reader_feed(struct proto_reader *r, const void *p, size_t n)
{
	if (r->err)
		return r->err;
	/* Drop consumed frames first so the buffer holds at most one partial
	 * frame plus what this feed brings. */
	if (r->off > 0) {
		size_t left = proto_reader_buffered(r);
		memmove(r->in.data, r->in.data + r->off, left);
		r->in.len = left;
		r->off = 0;
	}
	if (n > 0 && idc_buf_append(&r->in, p, n) < 0)
		return -ENOMEM;
	return check_head(r);
}

int proto_reader_next(struct proto_reader *r, struct proto_frame *f)
{
	if (check_head(r) < 0)
		return r->err;
	size_t avail = proto_reader_buffered(r);
	if (avail < PROTO_HDR_SIZE)
		return 0;
	struct proto_hdr h;
	proto_decode_hdr(r->in.data + r->off, PROTO_HDR_SIZE, r->max_frame, &h);
	if (avail < h.length)
		return 0;
	f->hdr = h;
	f->payload = (const uint8_t *)r->in.data + r->off + PROTO_HDR_SIZE;
	f->len = h.length - PROTO_HDR_SIZE;
	r->off += h.length;
	/* The next frame's header may already be here: refuse it early too. */
	check_head(r);
	return 1;
}

/* ---- reply builders ------------------------------------------------------- */

int proto_put_u32(struct idc_buf *b, uint32_t v)
{
	return idc_buf_append(b, &v, 4);
}

void proto_patch_u32(struct idc_buf *b, size_t at, uint32_t v)
{
	if (at <= b->len && b->len - at >= 4)
		memcpy(b->data + at, &v, 4);
}

int proto_reply_begin(struct idc_buf *b, uint32_t cmd, uint32_t status, size_t *start)
{
	uint32_t h[4] = {0, cmd, status, 0};
	*start = b->len;
	return idc_buf_append(b, h, sizeof(h));
}

int proto_reply_end(struct idc_buf *b, size_t start)
{
	if (start > b->len || b->len - start < PROTO_HDR_SIZE)
		return -EINVAL;
	size_t len = b->len - start;
	if (len > PROTO_MAX_REPLY) {
		b->len = start;
		if (b->data)
			b->data[start] = '\0';
		return -EMSGSIZE;
	}
	proto_patch_u32(b, start, (uint32_t)len);
	return 0;
}

int proto_put_str(struct idc_buf *b, const char *s, size_t len)
{
	if (len > PROTO_MAX_REPLY || (len && memchr(s, '\0', len)))
		return -EINVAL;
	int rc = proto_put_u32(b, (uint32_t)len);
	if (rc == 0 && len)
		rc = idc_buf_append(b, s, len);
	return rc == 0 ? idc_buf_putc(b, '\0') : rc;
}

int proto_put_cstr(struct idc_buf *b, const char *s)
{
	return proto_put_str(b, s ? s : "", s ? strlen(s) : 0);
}

int proto_put_passwd(struct idc_buf *b, const struct proto_passwd *pw)
{
	int rc = proto_put_str(b, pw->name.p, pw->name.len);
	rc = rc ? rc : proto_put_str(b, pw->passwd.p, pw->passwd.len);
	rc = rc ? rc : proto_put_u32(b, pw->uid);
	rc = rc ? rc : proto_put_u32(b, pw->gid);
	rc = rc ? rc : proto_put_str(b, pw->gecos.p, pw->gecos.len);
	rc = rc ? rc : proto_put_str(b, pw->dir.p, pw->dir.len);
	return rc ? rc : proto_put_str(b, pw->shell.p, pw->shell.len);
}

int proto_put_group(struct idc_buf *b, const struct proto_group *gr)
{
	int rc = proto_put_str(b, gr->name.p, gr->name.len);
	rc = rc ? rc : proto_put_str(b, gr->passwd.p, gr->passwd.len);
	rc = rc ? rc : proto_put_u32(b, gr->gid);
	rc = rc ? rc : proto_put_u32(b, gr->mem.count);
	/* The list is already in wire encoding: copy it whole. */
	return rc || gr->mem.size == 0 ? rc : idc_buf_append(b, gr->mem.p, gr->mem.size);
}

int proto_put_group_cstr(struct idc_buf *b, const char *name, const char *passwd, uint32_t gid,
			 const char *const *mem, uint32_t nmem)
{
	int rc = proto_put_cstr(b, name);
	rc = rc ? rc : proto_put_cstr(b, passwd);
	rc = rc ? rc : proto_put_u32(b, gid);
	rc = rc ? rc : proto_put_u32(b, nmem);
	for (uint32_t i = 0; rc == 0 && i < nmem; i++)
		rc = proto_put_cstr(b, mem[i]);
	return rc;
}

int proto_reply_status(struct idc_buf *b, uint32_t cmd, uint32_t status, const char *msg)
{
	size_t start;
	int rc = proto_reply_begin(b, cmd, status, &start);
	if (rc == 0 && msg)
		rc = proto_put_cstr(b, msg);
	if (rc == 0)
		rc = proto_reply_end(b, start);
	if (rc < 0 && start <= b->len)
		b->len = start; /* never leave half a frame in the output */
	return rc;
}
