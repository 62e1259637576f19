/*
 * nscd: encoding and decoding the nscd socket's messages (nscd.h). Every
 * field is an int32 in host byte order, copied with memcpy: a reply's
 * strings leave what follows them unaligned.
 */
#include "nscd/nscd.h"

#include <errno.h>
#include <string.h>

/* ==== int32 fields ================================================================ */

static void put32(uint8_t **p, int32_t v)
{
	memcpy(*p, &v, 4);
	*p += 4;
}

static int32_t get32(const uint8_t *p, size_t i)
{
	int32_t v;
	memcpy(&v, p + 4 * i, 4);
	return v;
}

static uint8_t *put_str(uint8_t *p, const char *s)
{
	size_t n = strlen(s) + 1;
	memcpy(p, s, n);
	return p + n;
}

/* strlen + 1 as an int32 length; the encoders' sizes keep it in range. */
static int32_t slen(const char *s)
{
	return (int32_t)(strlen(s) + 1);
}

/* ==== requests ========================================================================= */

int nscd_decode_request(const void *p, size_t n, struct nscd_req *req)
{
	const uint8_t *b = p;
	if (n < NSCD_REQ_HDR)
		return n >= 4 && get32(b, 0) != NSCD_VERSION ? -EBADMSG : -EAGAIN;
	int32_t version = get32(b, 0), type = get32(b, 1), len = get32(b, 2);
	if (version != NSCD_VERSION || type < 0 || type >= NSCD_TYPE_COUNT || len < 0 ||
	    (uint32_t)len > NSCD_KEY_MAX)
		return -EBADMSG;
	if (n - NSCD_REQ_HDR < (size_t)len)
		return -EAGAIN;
	*req = (struct nscd_req){type, (const char *)b + NSCD_REQ_HDR, (uint32_t)len};
	return 0;
}

const char *nscd_key_name(const struct nscd_req *req)
{
	if (req->key_len == 0 || req->key[req->key_len - 1] != '\0' ||
	    memchr(req->key, '\0', req->key_len - 1))
		return NULL;
	return req->key;
}

int nscd_key_id(const struct nscd_req *req, uint32_t *id)
{
	const char *s = nscd_key_name(req);
	uint64_t v = 0;
	if (!s || !*s)
		return -EBADMSG;
	for (; *s; s++) {
		if (*s < '0' || *s > '9')
			return -EBADMSG;
		v = v * 10 + (uint64_t)(*s - '0');
		if (v > UINT32_MAX)
			return -EBADMSG;
	}
	*id = (uint32_t)v;
	return 0;
}

int nscd_encode_request(void *buf, size_t cap, int32_t type, const char *key)
{
	size_t klen = strlen(key) + 1;
	if (type < 0 || type >= NSCD_TYPE_COUNT || klen > NSCD_KEY_MAX)
		return -EINVAL;
	if (cap < NSCD_REQ_HDR + klen)
		return -EMSGSIZE;
	uint8_t *p = buf;
	put32(&p, NSCD_VERSION);
	put32(&p, type);
	put32(&p, (int32_t)klen);
	memcpy(p, key, klen);
	return (int)(NSCD_REQ_HDR + klen);
}

bool nscd_type_is_lookup(int32_t type)
{
	return type == NSCD_GETPWBYNAME || type == NSCD_GETPWBYUID || type == NSCD_GETGRBYNAME ||
	       type == NSCD_GETGRBYGID || type == NSCD_INITGROUPS;
}

/* ==== replies ============================================================================ */

/* Start a found reply of size bytes in buf: past its version and found
 * fields, or NULL when cap is short or size passes the int return (and so
 * any int32 length inside it). */
static uint8_t *begin_found(void *buf, size_t size, size_t cap)
{
	if (size > INT32_MAX || size > cap)
		return NULL;
	uint8_t *p = buf;
	put32(&p, NSCD_VERSION);
	put32(&p, 1);
	return p;
}

size_t nscd_passwd_size(const struct nscd_passwd *pw)
{
	return NSCD_PW_HDR + strlen(pw->name) + strlen(pw->passwd) + strlen(pw->gecos) +
	       strlen(pw->dir) + strlen(pw->shell) + 5;
}

int nscd_encode_passwd(void *buf, size_t cap, const struct nscd_passwd *pw)
{
	size_t size = nscd_passwd_size(pw);
	uint8_t *p = begin_found(buf, size, cap);
	if (!p)
		return -EMSGSIZE;
	put32(&p, slen(pw->name));
	put32(&p, slen(pw->passwd));
	put32(&p, (int32_t)pw->uid);
	put32(&p, (int32_t)pw->gid);
	put32(&p, slen(pw->gecos));
	put32(&p, slen(pw->dir));
	put32(&p, slen(pw->shell));
	p = put_str(p, pw->name);
	p = put_str(p, pw->passwd);
	p = put_str(p, pw->gecos);
	p = put_str(p, pw->dir);
	put_str(p, pw->shell);
	return (int)size;
}

size_t nscd_group_size(const struct nscd_group *gr)
{
	size_t size = NSCD_GR_HDR + strlen(gr->name) + strlen(gr->passwd) + 2;
	for (uint32_t i = 0; i < gr->nmem; i++)
		size += 4 + strlen(gr->mem[i]) + 1;
	return size;
}

int nscd_encode_group(void *buf, size_t cap, const struct nscd_group *gr)
{
	size_t size = nscd_group_size(gr);
	uint8_t *p = gr->nmem <= INT32_MAX ? begin_found(buf, size, cap) : NULL;
	if (!p)
		return -EMSGSIZE;
	put32(&p, slen(gr->name));
	put32(&p, slen(gr->passwd));
	put32(&p, (int32_t)gr->gid);
	put32(&p, (int32_t)gr->nmem);
	for (uint32_t i = 0; i < gr->nmem; i++)
		put32(&p, slen(gr->mem[i]));
	p = put_str(p, gr->name);
	p = put_str(p, gr->passwd);
	for (uint32_t i = 0; i < gr->nmem; i++)
		p = put_str(p, gr->mem[i]);
	return (int)size;
}

size_t nscd_initgroups_size(uint32_t n)
{
	return NSCD_INITGR_HDR + 4 * (size_t)n;
}

int nscd_encode_initgroups(void *buf, size_t cap, const uint32_t *gids, uint32_t n)
{
	size_t size = nscd_initgroups_size(n);
	uint8_t *p = begin_found(buf, size, cap);
	if (!p)
		return -EMSGSIZE;
	put32(&p, (int32_t)n);
	for (uint32_t i = 0; i < n; i++)
		put32(&p, (int32_t)gids[i]);
	return (int)size;
}

/* The int32 fields of each database's reply header (glibc's
 * hst_response_header, ai_response_header, serv_response_header,
 * netgroup_response_header, innetgroup_response_header). */
size_t nscd_status_size(int32_t type)
{
	switch (type) {
	case NSCD_GETPWBYNAME:
	case NSCD_GETPWBYUID:
		return NSCD_PW_HDR;
	case NSCD_GETGRBYNAME:
	case NSCD_GETGRBYGID:
		return NSCD_GR_HDR;
	case NSCD_INITGROUPS:
		return NSCD_INITGR_HDR;
	case NSCD_GETHOSTBYNAME:
	case NSCD_GETHOSTBYNAMEv6:
	case NSCD_GETHOSTBYADDR:
	case NSCD_GETHOSTBYADDRv6:
		return 8 * 4;
	case NSCD_GETAI:
	case NSCD_GETSERVBYNAME:
	case NSCD_GETSERVBYPORT:
		return 6 * 4;
	case NSCD_GETNETGRENT:
		return 4 * 4;
	case NSCD_INNETGR:
		return 3 * 4;
	default:
		return 0;
	}
}

int nscd_encode_status(void *buf, size_t cap, int32_t type, int32_t found)
{
	size_t size = nscd_status_size(type);
	if (size > cap)
		return -EMSGSIZE;
	uint8_t *p = buf;
	memset(p, 0, size);
	if (size) {
		put32(&p, NSCD_VERSION);
		put32(&p, found);
	}
	return (int)size;
}

int nscd_encode_invalidate(void *buf, size_t cap, int32_t err)
{
	if (cap < 4)
		return -EMSGSIZE;
	memcpy(buf, &err, 4);
	return 4;
}

int nscd_encode_fd_reply(void *buf, size_t cap, const char *key, uint32_t key_len, uint64_t mapsize)
{
	size_t size = (size_t)key_len + sizeof(mapsize);
	if (key_len > NSCD_KEY_MAX || size > cap)
		return -EMSGSIZE;
	memcpy(buf, key, key_len);
	memcpy((uint8_t *)buf + key_len, &mapsize, sizeof(mapsize));
	return (int)size;
}

/* ==== decoding replies ====================================================================== */

/* The header of nfields int32 at p: -EAGAIN when n is short, -EBADMSG for
 * another version or a found other than 1, 0 or -1. */
static int header(const uint8_t *p, size_t n, size_t nfields, int32_t *found)
{
	if (n < 4 * nfields)
		return -EAGAIN;
	*found = get32(p, 1);
	if (get32(p, 0) != NSCD_VERSION || *found < -1 || *found > 1)
		return -EBADMSG;
	return 0;
}

/* A string of len bytes (its NUL counted) at *off in p[0..n): its start,
 * *off moved past it; NULL when it does not fit or is not terminated
 * exactly there. *short_ tells the caller whether more bytes could help. */
static const char *take_str(const uint8_t *p, size_t n, size_t *off, int32_t len, bool *short_)
{
	if (len < 1)
		return NULL;
	if (n - *off < (size_t)len) {
		*short_ = true;
		return NULL;
	}
	const char *s = (const char *)p + *off;
	if (memchr(s, '\0', (size_t)len) != s + len - 1)
		return NULL;
	*off += (size_t)len;
	return s;
}

int nscd_decode_passwd(const void *buf, size_t n, struct nscd_passwd_view *v)
{
	const uint8_t *p = buf;
	int rc = header(p, n, 9, &v->found);
	if (rc < 0 || v->found != 1)
		return rc < 0 ? rc : (int)NSCD_PW_HDR;
	size_t off = NSCD_PW_HDR;
	bool short_ = false;
	const char **f[] = {&v->pw.name, &v->pw.passwd, &v->pw.gecos, &v->pw.dir, &v->pw.shell};
	const size_t field[] = {2, 3, 6, 7, 8};
	for (size_t i = 0; i < 5; i++)
		if (!(*f[i] = take_str(p, n, &off, get32(p, field[i]), &short_)))
			return short_ ? -EAGAIN : -EBADMSG;
	v->pw.uid = (uint32_t)get32(p, 4);
	v->pw.gid = (uint32_t)get32(p, 5);
	return off > INT32_MAX ? -EBADMSG : (int)off;
}

int nscd_decode_group(const void *buf, size_t n, struct nscd_group_view *v)
{
	const uint8_t *p = buf;
	int rc = header(p, n, 6, &v->found);
	if (rc < 0 || v->found != 1)
		return rc < 0 ? rc : (int)NSCD_GR_HDR;
	int32_t cnt = get32(p, 5);
	if (cnt < 0)
		return -EBADMSG;
	v->nmem = (uint32_t)cnt;
	if ((n - NSCD_GR_HDR) / 4 < v->nmem)
		return -EAGAIN;
	v->lens = p + NSCD_GR_HDR;
	size_t off = NSCD_GR_HDR + 4 * (size_t)v->nmem;
	bool short_ = false;
	v->name = take_str(p, n, &off, get32(p, 2), &short_);
	v->passwd = v->name ? take_str(p, n, &off, get32(p, 3), &short_) : NULL;
	v->mem = (const char *)p + off;
	for (uint32_t i = 0; v->passwd && i < v->nmem; i++)
		if (!take_str(p, n, &off, get32(v->lens, i), &short_))
			return short_ ? -EAGAIN : -EBADMSG;
	if (!v->passwd)
		return short_ ? -EAGAIN : -EBADMSG;
	v->gid = (uint32_t)get32(p, 4);
	return off > INT32_MAX ? -EBADMSG : (int)off;
}

int nscd_decode_initgroups(const void *buf, size_t n, struct nscd_initgroups_view *v)
{
	const uint8_t *p = buf;
	int rc = header(p, n, 3, &v->found);
	if (rc < 0)
		return rc;
	int32_t cnt = get32(p, 2);
	if (cnt < 0 || (v->found != 1 && cnt != 0))
		return -EBADMSG;
	v->n = (uint32_t)cnt;
	if ((n - NSCD_INITGR_HDR) / 4 < v->n)
		return -EAGAIN;
	v->gids = p + NSCD_INITGR_HDR;
	size_t size = nscd_initgroups_size(v->n);
	return size > INT32_MAX ? -EBADMSG : (int)size;
}

const char *nscd_group_member(const struct nscd_group_view *v, uint32_t i)
{
	const char *s = v->mem;
	for (uint32_t k = 0; k < i; k++)
		s += get32(v->lens, k);
	return s;
}

uint32_t nscd_gid(const struct nscd_initgroups_view *v, uint32_t i)
{
	return (uint32_t)get32(v->gids, i);
}
