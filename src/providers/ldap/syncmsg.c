/*
 * syncmsg: the messages of LDAP content synchronization (RFC 4533) as
 * bytes: the Sync Request control a search sends, and the Sync State and
 * Sync Done controls and Sync Info messages a server answers with. A small
 * BER reader of its own: every length is checked against what is left of
 * its enclosing element before anything is read, nothing points outside
 * the input, indefinite lengths and tags beyond one byte are refused
 * (RFC 4511 §5.1 allows neither), and the only allocation is the list of
 * a syncIdSet's UUIDs, bounded by the message's own size.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "providers/ldap/lprov_int.h"

#define T_BOOLEAN    0x01
#define T_OCTETS     0x04
#define T_ENUMERATED 0x0a
#define T_SEQUENCE   0x30
#define T_SET        0x31
#define T_NEWCOOKIE  0x80 /* [0] syncCookie */
#define T_REFRESHDEL 0xa1 /* [1] refreshDelete */
#define T_REFRESHPRE 0xa2 /* [2] refreshPresent */
#define T_IDSET      0xa3 /* [3] syncIdSet */

/* ==== reading ================================================================ */

struct rd {
	const unsigned char *p, *end;
};

/* The next element: its tag and contents (c), and rd past it. -EPROTO
 * when it does not fit. */
static int next(struct rd *r, unsigned *tag, struct rd *c)
{
	if (r->end - r->p < 2)
		return -EPROTO;
	unsigned t = r->p[0];
	if ((t & 0x1f) == 0x1f)
		return -EPROTO; /* multi-byte tag */
	const unsigned char *q = r->p + 1;
	size_t len = *q++;
	if (len & 0x80) {
		size_t n = len & 0x7f;
		if (n == 0 || n > 4 || (size_t)(r->end - q) < n)
			return -EPROTO; /* indefinite, or longer than the message can be */
		len = 0;
		for (size_t i = 0; i < n; i++)
			len = len << 8 | *q++;
	}
	if ((size_t)(r->end - q) < len)
		return -EPROTO;
	*tag = t;
	*c = (struct rd){q, q + len};
	r->p = q + len;
	return 0;
}

static bool more(const struct rd *r)
{
	return r->p < r->end;
}

/* The next element if it has tag want: 1 read, 0 absent (rd unmoved). */
static int next_if(struct rd *r, unsigned want, struct rd *c)
{
	struct rd save = *r;
	unsigned tag;
	if (!more(r))
		return 0;
	int rc = next(r, &tag, c);
	if (rc)
		return rc;
	if (tag != want) {
		*r = save;
		return 0;
	}
	return 1;
}

static int small_int(const struct rd *c, int *out)
{
	size_t n = (size_t)(c->end - c->p);
	if (n == 0 || n > 2 || (c->p[0] & 0x80))
		return -EPROTO; /* the enumerations here are small and positive */
	*out = n == 1 ? c->p[0] : c->p[0] << 8 | c->p[1];
	return 0;
}

static int boolean(const struct rd *c, bool *out)
{
	if (c->end - c->p != 1)
		return -EPROTO;
	*out = c->p[0] != 0;
	return 0;
}

/* An optional cookie (OCTET STRING) next in r. */
static int opt_cookie(struct rd *r, struct lp_sync_msg *m)
{
	struct rd c;
	int rc = next_if(r, T_OCTETS, &c);
	if (rc == 1) {
		m->cookie = c.p;
		m->cookie_len = (size_t)(c.end - c.p);
		m->has_cookie = true;
	}
	return rc < 0 ? rc : 0;
}

/* An optional BOOLEAN next in r, else def. */
static int opt_bool(struct rd *r, bool def, bool *out)
{
	struct rd c;
	int rc = next_if(r, T_BOOLEAN, &c);
	*out = def;
	return rc == 1 ? boolean(&c, out) : rc;
}

/* The whole value is one SEQUENCE and nothing follows it. */
static int outer(const void *val, size_t len, unsigned want, struct rd *c)
{
	struct rd r = {val, (const unsigned char *)val + len};
	unsigned tag;
	if (!val || next(&r, &tag, c) || tag != want || more(&r))
		return -EPROTO;
	return 0;
}

/* ==== controls and messages =================================================== */

int lp_sync_parse_state(const void *val, size_t len, struct lp_sync_msg *m)
{
	memset(m, 0, sizeof(*m));
	m->kind = LP_SYNC_MSG_STATE;
	struct rd s, c;
	unsigned tag;
	int rc = outer(val, len, T_SEQUENCE, &s);
	if (!rc)
		rc = next(&s, &tag, &c);
	if (!rc && tag != T_ENUMERATED)
		rc = -EPROTO;
	if (!rc)
		rc = small_int(&c, &m->state);
	if (!rc && m->state > LP_SYNC_DELETE)
		rc = -EPROTO;
	if (!rc)
		rc = next(&s, &tag, &c);
	if (!rc && (tag != T_OCTETS || c.end - c.p != LP_UUID_LEN))
		rc = -EPROTO;
	if (!rc) {
		memcpy(m->uuid, c.p, LP_UUID_LEN);
		rc = opt_cookie(&s, m);
	}
	return !rc && more(&s) ? -EPROTO : rc;
}

int lp_sync_parse_done(const void *val, size_t len, struct lp_sync_msg *m)
{
	memset(m, 0, sizeof(*m));
	m->kind = LP_SYNC_MSG_DONE;
	struct rd s;
	int rc = outer(val, len, T_SEQUENCE, &s);
	if (!rc)
		rc = opt_cookie(&s, m);
	if (!rc)
		rc = opt_bool(&s, false, &m->deletes);
	return !rc && more(&s) ? -EPROTO : rc;
}

/* syncIdSet: cookie, refreshDeletes, then a SET OF 16-byte UUIDs, copied
 * into m->uuids (malloc, at most one per 18 bytes of the message). */
static int parse_idset(struct rd *s, struct lp_sync_msg *m)
{
	struct rd set, c;
	unsigned tag;
	int rc = opt_cookie(s, m);
	if (!rc)
		rc = opt_bool(s, false, &m->deletes);
	if (!rc)
		rc = next(s, &tag, &set);
	if (!rc && (tag != T_SET || more(s)))
		rc = -EPROTO;
	size_t cap = rc ? 0 : (size_t)(set.end - set.p) / (2 + LP_UUID_LEN);
	if (!rc && cap && !(m->uuids = malloc(cap * LP_UUID_LEN)))
		rc = -ENOMEM;
	while (!rc && more(&set)) {
		rc = next(&set, &tag, &c);
		if (!rc && (tag != T_OCTETS || c.end - c.p != LP_UUID_LEN || m->nuuids == cap))
			rc = -EPROTO;
		if (!rc)
			memcpy(m->uuids + LP_UUID_LEN * m->nuuids++, c.p, LP_UUID_LEN);
	}
	return rc;
}

int lp_sync_parse_info(const void *val, size_t len, struct lp_sync_msg *m)
{
	memset(m, 0, sizeof(*m));
	struct rd r = {val, (const unsigned char *)val + len}, s;
	unsigned tag;
	int rc = val ? next(&r, &tag, &s) : -EPROTO;
	if (!rc && more(&r))
		rc = -EPROTO;
	if (rc)
		return rc;
	switch (tag) {
	case T_NEWCOOKIE:
		m->kind = LP_SYNC_MSG_NEWCOOKIE;
		m->cookie = s.p;
		m->cookie_len = (size_t)(s.end - s.p);
		m->has_cookie = true;
		return 0;
	case T_REFRESHDEL:
	case T_REFRESHPRE:
		m->kind =
		    tag == T_REFRESHDEL ? LP_SYNC_MSG_REFRESH_DELETE : LP_SYNC_MSG_REFRESH_PRESENT;
		rc = opt_cookie(&s, m);
		if (!rc)
			rc = opt_bool(&s, true, &m->done);
		return !rc && more(&s) ? -EPROTO : rc;
	case T_IDSET:
		m->kind = LP_SYNC_MSG_IDSET;
		rc = parse_idset(&s, m);
		if (rc)
			lp_sync_msg_free(m);
		return rc;
	default:
		return -EPROTO;
	}
}

void lp_sync_msg_free(struct lp_sync_msg *m)
{
	free(m->uuids);
	m->uuids = NULL;
	m->nuuids = 0;
}

/* ==== the request ============================================================= */

static int put_tl(struct idc_buf *b, unsigned tag, size_t len)
{
	unsigned char h[6] = {(unsigned char)tag};
	size_t n = 2;
	if (len < 0x80) {
		h[1] = (unsigned char)len;
	} else if (len <= 0xffff) {
		h[1] = 0x82;
		h[2] = (unsigned char)(len >> 8);
		h[3] = (unsigned char)len;
		n = 4;
	} else {
		return -E2BIG;
	}
	return idc_buf_append(b, h, n);
}

int lp_sync_request(int mode, const void *cookie, size_t cookie_len, struct idc_buf *out)
{
	if (cookie_len > LP_COOKIE_MAX)
		return -E2BIG;
	/* mode ENUMERATED (3 bytes), cookie (header and bytes) */
	size_t hl = cookie_len < 0x80 ? 2 : 4;
	size_t inner = 3 + (cookie ? hl + cookie_len : 0);
	idc_buf_reset(out);
	int rc = put_tl(out, T_SEQUENCE, inner);
	if (!rc)
		rc = put_tl(out, T_ENUMERATED, 1);
	if (!rc)
		rc = idc_buf_putc(out, (char)mode);
	if (!rc && cookie)
		rc = put_tl(out, T_OCTETS, cookie_len);
	if (!rc && cookie && cookie_len)
		rc = idc_buf_append(out, cookie, cookie_len);
	return rc;
}
