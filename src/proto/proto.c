/*
 * proto codec: frame headers, requests, replies, and packing records into
 * NSS buffers. libc only and allocation-free (linked into the NSS module).
 * Every decoder checks a byte range before reading it.
 */
#include "proto/proto.h"
#include "subid/subid.h" /* subid_range_ok: header only */

#include <errno.h>
#include <stdalign.h>
#include <string.h>

/* ---- cursor over a byte range ---------------------------------------------- */

struct rd {
	const uint8_t *p;
	size_t n, off;
};

static int rd_u32(struct rd *r, uint32_t *v)
{
	if (r->n - r->off < 4)
		return -EBADMSG;
	memcpy(v, r->p + r->off, 4);
	r->off += 4;
	return 0;
}

/* A wire string: the declared length must fit the rest of the range with its
 * NUL, the byte at the length must be that NUL, and there must be no earlier
 * NUL (a C string view would otherwise be shorter than len). */
static int rd_str(struct rd *r, struct proto_str *s)
{
	uint32_t len;
	if (rd_u32(r, &len) < 0)
		return -EBADMSG;
	if (len >= r->n - r->off) /* need len + 1 bytes */
		return -EBADMSG;
	const char *p = (const char *)r->p + r->off;
	if (p[len] != '\0' || memchr(p, '\0', len) != NULL)
		return -EBADMSG;
	s->p = p;
	s->len = len;
	r->off += (size_t)len + 1;
	return 0;
}

static int rd_end(const struct rd *r)
{
	return r->off == r->n ? 0 : -EBADMSG;
}

static void wr_u32(uint8_t *p, uint32_t v)
{
	memcpy(p, &v, 4);
}

/* ---- commands ---------------------------------------------------------------- */

const char *proto_cmd_name(uint32_t cmd)
{
	switch (cmd) {
	case PROTO_CMD_HELLO:
		return "HELLO";
	case PROTO_CMD_GETPWNAM:
		return "GETPWNAM";
	case PROTO_CMD_GETPWUID:
		return "GETPWUID";
	case PROTO_CMD_GETGRNAM:
		return "GETGRNAM";
	case PROTO_CMD_GETGRGID:
		return "GETGRGID";
	case PROTO_CMD_INITGROUPS:
		return "INITGROUPS";
	case PROTO_CMD_SETPWENT:
		return "SETPWENT";
	case PROTO_CMD_GETPWENT:
		return "GETPWENT";
	case PROTO_CMD_ENDPWENT:
		return "ENDPWENT";
	case PROTO_CMD_SETGRENT:
		return "SETGRENT";
	case PROTO_CMD_GETGRENT:
		return "GETGRENT";
	case PROTO_CMD_ENDGRENT:
		return "ENDGRENT";
	case PROTO_CMD_MCMAP:
		return "MCMAP";
	case PROTO_CMD_SSHKEYS:
		return "SSHKEYS";
	case PROTO_CMD_SUBIDS:
		return "SUBIDS";
	case PROTO_CMD_SUBID_OWNERS:
		return "SUBID_OWNERS";
	case PROTO_CMD_STATUS:
		return "STATUS";
	case PROTO_CMD_EXPIRE:
		return "EXPIRE";
	case PROTO_CMD_RELOAD:
		return "RELOAD";
	case PROTO_CMD_USERINFO:
		return "USERINFO";
	case PROTO_CMD_GROUPINFO:
		return "GROUPINFO";
	default:
		return "?";
	}
}

bool proto_cmd_known(uint32_t cmd)
{
	return strcmp(proto_cmd_name(cmd), "?") != 0;
}

bool proto_cmd_is_admin(uint32_t cmd)
{
	return cmd >= PROTO_CMD_STATUS && cmd <= PROTO_CMD_GROUPINFO;
}

/* Payload shape of a request, by command. */
enum shape {
	SH_EMPTY,
	SH_NAME,
	SH_ID,
	SH_VERSION,
	SH_GETENT,
	SH_EXPIRE,
	SH_KIND_NAME, /* SUBIDS: u32 kind, str name */
	SH_KIND_ID,   /* SUBID_OWNERS: u32 kind, u32 id */
	SH_BAD
};

static enum shape req_shape(uint32_t cmd)
{
	switch (cmd) {
	case PROTO_CMD_HELLO:
		return SH_VERSION;
	case PROTO_CMD_GETPWNAM:
	case PROTO_CMD_GETGRNAM:
	case PROTO_CMD_INITGROUPS:
	case PROTO_CMD_SSHKEYS:
	case PROTO_CMD_USERINFO:
	case PROTO_CMD_GROUPINFO:
		return SH_NAME;
	case PROTO_CMD_GETPWUID:
	case PROTO_CMD_GETGRGID:
	case PROTO_CMD_MCMAP:
		return SH_ID;
	case PROTO_CMD_SETPWENT:
	case PROTO_CMD_ENDPWENT:
	case PROTO_CMD_SETGRENT:
	case PROTO_CMD_ENDGRENT:
	case PROTO_CMD_STATUS:
	case PROTO_CMD_RELOAD:
		return SH_EMPTY;
	case PROTO_CMD_GETPWENT:
	case PROTO_CMD_GETGRENT:
		return SH_GETENT;
	case PROTO_CMD_EXPIRE:
		return SH_EXPIRE;
	case PROTO_CMD_SUBIDS:
		return SH_KIND_NAME;
	case PROTO_CMD_SUBID_OWNERS:
		return SH_KIND_ID;
	default:
		return SH_BAD;
	}
}

/* ---- requests ----------------------------------------------------------------- */

/* Whether a name fits the rules for the command: EXPIRE ALL takes an empty
 * name, every other name is 1..PROTO_NAME_MAX bytes without NUL. */
static bool name_ok(const struct proto_str *s, bool want_empty)
{
	if (want_empty)
		return s->len == 0;
	return s->len > 0 && s->len <= PROTO_NAME_MAX && s->p != NULL &&
	       memchr(s->p, '\0', s->len) == NULL;
}

static bool expire_what_ok(uint32_t what)
{
	return what == PROTO_EXPIRE_USER || what == PROTO_EXPIRE_GROUP || what == PROTO_EXPIRE_ALL;
}

static bool subid_kind_ok(uint32_t kind)
{
	return kind == PROTO_SUBID_UID || kind == PROTO_SUBID_GID;
}

/* Whether req's leading u32 (what, or a subid kind) is valid for its shape. */
static bool what_ok(enum shape sh, uint32_t what)
{
	if (sh == SH_EXPIRE)
		return expire_what_ok(what);
	if (sh == SH_KIND_NAME || sh == SH_KIND_ID)
		return subid_kind_ok(what);
	return true;
}

int proto_encode_request(void *buf, size_t cap, const struct proto_req *req)
{
	enum shape sh = req_shape(req->cmd);
	bool has_name = sh == SH_NAME || sh == SH_EXPIRE || sh == SH_KIND_NAME;
	if (sh == SH_BAD || !what_ok(sh, req->what))
		return -EINVAL;
	if (has_name && !name_ok(&req->name, sh == SH_EXPIRE && req->what == PROTO_EXPIRE_ALL))
		return -EINVAL;

	size_t len = PROTO_HDR_SIZE;
	if (has_name)
		len += 4 + (size_t)req->name.len + 1;
	if (sh == SH_ID || sh == SH_VERSION || sh == SH_EXPIRE || sh == SH_KIND_NAME)
		len += 4;
	if (sh == SH_GETENT || sh == SH_KIND_ID)
		len += 8;
	if (len > cap || len > PROTO_MAX_REQUEST)
		return -EMSGSIZE;

	uint8_t *p = buf;
	wr_u32(p, (uint32_t)len);
	wr_u32(p + 4, req->cmd);
	wr_u32(p + 8, 0);
	wr_u32(p + 12, 0);
	p += PROTO_HDR_SIZE;
	switch (sh) {
	case SH_VERSION:
		wr_u32(p, req->version);
		break;
	case SH_ID:
		wr_u32(p, req->id);
		break;
	case SH_GETENT:
		wr_u32(p, req->max_count);
		wr_u32(p + 4, req->max_bytes);
		break;
	case SH_KIND_ID:
		wr_u32(p, req->what);
		wr_u32(p + 4, req->id);
		break;
	case SH_EXPIRE:
	case SH_KIND_NAME:
		wr_u32(p, req->what);
		p += 4;
		/* fall through */
	case SH_NAME:
		wr_u32(p, req->name.len);
		if (req->name.len)
			memcpy(p + 4, req->name.p, req->name.len);
		p[4 + req->name.len] = '\0';
		break;
	default:
		break;
	}
	return (int)len;
}

int proto_decode_hdr(const void *p, size_t n, uint32_t max_frame, struct proto_hdr *h)
{
	if (n < PROTO_HDR_SIZE)
		return -EBADMSG;
	struct proto_hdr t;
	memcpy(&t, p, PROTO_HDR_SIZE);
	if (t.length < PROTO_HDR_SIZE || t.length > max_frame || t.reserved != 0)
		return -EBADMSG;
	*h = t;
	return 0;
}

int proto_decode_request(const struct proto_hdr *h, const void *payload, size_t n,
			 struct proto_req *req)
{
	enum shape sh = req_shape(h->command);
	if (sh == SH_BAD || h->status != 0 || h->reserved != 0 || h->length > PROTO_MAX_REQUEST ||
	    (size_t)h->length - PROTO_HDR_SIZE != n)
		return -EBADMSG;
	struct rd r = {payload, n, 0};
	struct proto_req t;
	memset(&t, 0, sizeof(t));
	t.cmd = h->command;
	t.name.p = "";
	int rc = 0;
	switch (sh) {
	case SH_VERSION:
		rc = rd_u32(&r, &t.version);
		break;
	case SH_ID:
		rc = rd_u32(&r, &t.id);
		break;
	case SH_GETENT:
		rc = rd_u32(&r, &t.max_count) < 0 ? -EBADMSG : rd_u32(&r, &t.max_bytes);
		break;
	case SH_KIND_ID:
		if (rd_u32(&r, &t.what) < 0 || !what_ok(sh, t.what))
			return -EBADMSG;
		rc = rd_u32(&r, &t.id);
		break;
	case SH_EXPIRE:
	case SH_KIND_NAME:
		if (rd_u32(&r, &t.what) < 0 || !what_ok(sh, t.what))
			return -EBADMSG;
		/* fall through */
	case SH_NAME:
		rc = rd_str(&r, &t.name);
		if (rc == 0 && !name_ok(&t.name, sh == SH_EXPIRE && t.what == PROTO_EXPIRE_ALL))
			rc = -EBADMSG;
		break;
	default:
		break;
	}
	if (rc < 0 || rd_end(&r) < 0)
		return -EBADMSG;
	*req = t;
	return 0;
}

/* ---- replies --------------------------------------------------------------------- */

int proto_decode_u32(const void *payload, size_t n, uint32_t *v)
{
	struct rd r = {payload, n, 0};
	uint32_t t;
	if (rd_u32(&r, &t) < 0 || rd_end(&r) < 0)
		return -EBADMSG;
	*v = t;
	return 0;
}

int proto_decode_mcmap(const void *payload, size_t len, uint32_t *kinds, size_t cap, size_t *n)
{
	struct rd r = {payload, len, 0};
	uint32_t count;
	if (rd_u32(&r, &count) < 0 || count == 0 || count > cap)
		return -EBADMSG;
	for (uint32_t i = 0; i < count; i++)
		if (rd_u32(&r, &kinds[i]) < 0)
			return -EBADMSG;
	if (rd_end(&r) < 0)
		return -EBADMSG;
	*n = count;
	return 0;
}

static int rd_passwd(struct rd *r, struct proto_passwd *pw)
{
	if (rd_str(r, &pw->name) < 0 || rd_str(r, &pw->passwd) < 0 || rd_u32(r, &pw->uid) < 0 ||
	    rd_u32(r, &pw->gid) < 0 || rd_str(r, &pw->gecos) < 0 || rd_str(r, &pw->dir) < 0 ||
	    rd_str(r, &pw->shell) < 0)
		return -EBADMSG;
	/* A record without a name is useless to NSS and would look like a miss. */
	return pw->name.len > 0 ? 0 : -EBADMSG;
}

/* Validate count wire strings starting at the cursor; the list view covers
 * exactly them. The count is checked against the bytes left before the loop
 * (each string takes at least 5), so a huge count fails fast. */
static int rd_strlist(struct rd *r, uint32_t count, struct proto_strlist *l)
{
	if ((size_t)count > (r->n - r->off) / 5)
		return -EBADMSG;
	size_t start = r->off;
	for (uint32_t i = 0; i < count; i++) {
		struct proto_str s;
		if (rd_str(r, &s) < 0)
			return -EBADMSG;
	}
	l->p = r->p + start;
	l->size = r->off - start;
	l->count = count;
	return 0;
}

static int rd_group(struct rd *r, struct proto_group *gr)
{
	uint32_t nmem;
	if (rd_str(r, &gr->name) < 0 || rd_str(r, &gr->passwd) < 0 || rd_u32(r, &gr->gid) < 0 ||
	    rd_u32(r, &nmem) < 0 || rd_strlist(r, nmem, &gr->mem) < 0)
		return -EBADMSG;
	return gr->name.len > 0 ? 0 : -EBADMSG;
}

int proto_decode_passwd(const void *payload, size_t n, struct proto_passwd *pw)
{
	struct rd r = {payload, n, 0};
	struct proto_passwd t;
	if (rd_passwd(&r, &t) < 0 || rd_end(&r) < 0)
		return -EBADMSG;
	*pw = t;
	return 0;
}

int proto_decode_group(const void *payload, size_t n, struct proto_group *gr)
{
	struct rd r = {payload, n, 0};
	struct proto_group t;
	if (rd_group(&r, &t) < 0 || rd_end(&r) < 0)
		return -EBADMSG;
	*gr = t;
	return 0;
}

int proto_decode_gids(const void *payload, size_t n, struct proto_gids *g)
{
	struct rd r = {payload, n, 0};
	uint32_t count;
	if (rd_u32(&r, &count) < 0 || (size_t)count != (n - 4) / 4 || (n - 4) % 4 != 0)
		return -EBADMSG;
	g->p = r.p + 4;
	g->count = count;
	return 0;
}

uint32_t proto_gids_get(const struct proto_gids *g, uint32_t i)
{
	uint32_t v = 0;
	if (i < g->count)
		memcpy(&v, g->p + (size_t)i * 4, 4);
	return v;
}

int proto_strlist_init(struct proto_strlist *l, const void *p, size_t size, uint32_t count)
{
	struct rd r = {p, size, 0};
	struct proto_strlist t;
	if (rd_strlist(&r, count, &t) < 0 || rd_end(&r) < 0)
		return -EBADMSG;
	*l = t;
	return 0;
}

int proto_strlist_next(const struct proto_strlist *l, size_t *off, struct proto_str *out)
{
	if (*off >= l->size)
		return 0;
	struct rd r = {l->p, l->size, *off};
	if (rd_str(&r, out) < 0)
		return 0; /* cannot happen for a validated list; stop rather than read on */
	*off = r.off;
	return 1;
}

/* Smallest encoded record, used to bound a batch count before the loop. */
#define MIN_PASSWD_WIRE (5 * 5 + 8)
#define MIN_GROUP_WIRE  (2 * 5 + 8)

int proto_decode_batch(uint32_t cmd, const void *payload, size_t n, struct proto_batch *b)
{
	if (cmd != PROTO_CMD_GETPWENT && cmd != PROTO_CMD_GETGRENT)
		return -EBADMSG;
	struct rd r = {payload, n, 0};
	uint32_t count;
	size_t min = cmd == PROTO_CMD_GETPWENT ? MIN_PASSWD_WIRE : MIN_GROUP_WIRE;
	if (rd_u32(&r, &count) < 0 || count == 0 || (size_t)count > (n - 4) / min)
		return -EBADMSG;
	for (uint32_t i = 0; i < count; i++) {
		struct proto_passwd pw;
		struct proto_group gr;
		int rc = cmd == PROTO_CMD_GETPWENT ? rd_passwd(&r, &pw) : rd_group(&r, &gr);
		if (rc < 0)
			return -EBADMSG;
	}
	if (rd_end(&r) < 0)
		return -EBADMSG;
	b->p = r.p + 4;
	b->size = n - 4;
	b->count = count;
	b->cmd = cmd;
	return 0;
}

int proto_batch_next_passwd(const struct proto_batch *b, size_t *off, struct proto_passwd *out)
{
	if (b->cmd != PROTO_CMD_GETPWENT || *off >= b->size)
		return 0;
	struct rd r = {b->p, b->size, *off};
	if (rd_passwd(&r, out) < 0)
		return 0;
	*off = r.off;
	return 1;
}

int proto_batch_next_group(const struct proto_batch *b, size_t *off, struct proto_group *out)
{
	if (b->cmd != PROTO_CMD_GETGRENT || *off >= b->size)
		return 0;
	struct rd r = {b->p, b->size, *off};
	if (rd_group(&r, out) < 0)
		return 0;
	*off = r.off;
	return 1;
}

int proto_decode_sshkeys(const void *payload, size_t n, struct proto_strlist *keys)
{
	struct rd r = {payload, n, 0};
	uint32_t count;
	struct proto_strlist t;
	if (rd_u32(&r, &count) < 0 || rd_strlist(&r, count, &t) < 0 || rd_end(&r) < 0)
		return -EBADMSG;
	size_t off = 0;
	struct proto_str k;
	while (proto_strlist_next(&t, &off, &k) == 1)
		if (k.len == 0)
			return -EBADMSG;
	*keys = t;
	return 0;
}

int proto_decode_subids(const void *payload, size_t n, struct proto_subids *s)
{
	struct rd r = {payload, n, 0};
	uint32_t uid, count;
	if (rd_u32(&r, &uid) < 0 || rd_u32(&r, &count) < 0 || (size_t)count != (n - 8) / 8 ||
	    (n - 8) % 8 != 0)
		return -EBADMSG;
	for (uint32_t i = 0; i < count; i++) {
		uint32_t start, len;
		if (rd_u32(&r, &start) < 0 || rd_u32(&r, &len) < 0 || !subid_range_ok(start, len))
			return -EBADMSG;
	}
	s->uid = uid;
	s->p = (const uint8_t *)payload + 8;
	s->count = count;
	return 0;
}

void proto_subids_get(const struct proto_subids *s, uint32_t i, uint32_t *start, uint32_t *count)
{
	*start = *count = 0;
	if (i >= s->count)
		return;
	memcpy(start, s->p + (size_t)i * 8, 4);
	memcpy(count, s->p + (size_t)i * 8 + 4, 4);
}

int proto_decode_text(const void *payload, size_t n, struct proto_str *s)
{
	if (n == 0) {
		s->p = "";
		s->len = 0;
		return 0;
	}
	struct rd r = {payload, n, 0};
	struct proto_str t;
	if (rd_str(&r, &t) < 0 || rd_end(&r) < 0)
		return -EBADMSG;
	*s = t;
	return 0;
}

/* ---- packing ------------------------------------------------------------------------
 * Layout in the caller's buffer: all strings first, packed in wire order,
 * then (groups) the member pointer array, aligned. Strings go first because
 * the source may be the wire payload sitting in the same buffer: a packed
 * string (len + 1) is 4 bytes shorter than its encoding, so the write cursor
 * never passes the read cursor. The pointer array is written last, when no
 * source byte is still needed. */

static char *put_str(char *o, const struct proto_str *s, char **field)
{
	memmove(o, s->p, s->len);
	o[s->len] = '\0';
	*field = o;
	return o + s->len + 1;
}

size_t proto_passwd_size(const struct proto_passwd *pw)
{
	return (size_t)pw->name.len + pw->passwd.len + pw->gecos.len + pw->dir.len + pw->shell.len +
	       5;
}

int proto_pack_passwd(const struct proto_passwd *pw, struct passwd *out, char *buf, size_t buflen)
{
	if (proto_passwd_size(pw) > buflen)
		return -ERANGE;
	struct passwd t;
	memset(&t, 0, sizeof(t));
	char *o = buf;
	o = put_str(o, &pw->name, &t.pw_name);
	o = put_str(o, &pw->passwd, &t.pw_passwd);
	o = put_str(o, &pw->gecos, &t.pw_gecos);
	o = put_str(o, &pw->dir, &t.pw_dir);
	put_str(o, &pw->shell, &t.pw_shell);
	t.pw_uid = pw->uid;
	t.pw_gid = pw->gid;
	*out = t;
	return 0;
}

/* Bytes of all strings of a group, packed. The member bytes follow from the
 * encoded size: each member is 4 (length) + len + 1 on the wire. */
static size_t group_strings(const struct proto_group *gr)
{
	return (size_t)gr->name.len + 1 + gr->passwd.len + 1 + (gr->mem.size - 4u * gr->mem.count);
}

static size_t align_pad(uintptr_t at)
{
	size_t a = alignof(char *);
	return (a - (at % a)) % a;
}

size_t proto_group_size(const struct proto_group *gr, const char *buf)
{
	size_t s = group_strings(gr);
	return s + align_pad((uintptr_t)buf + s) + ((size_t)gr->mem.count + 1) * sizeof(char *);
}

int proto_pack_group(const struct proto_group *gr, struct group *out, char *buf, size_t buflen)
{
	/* A list not built by a decoder could claim an impossible size. */
	if (gr->mem.size < 4u * (size_t)gr->mem.count)
		return -EINVAL;
	if (proto_group_size(gr, buf) > buflen)
		return -ERANGE;
	struct group t;
	memset(&t, 0, sizeof(t));
	char *o = buf;
	o = put_str(o, &gr->name, &t.gr_name);
	o = put_str(o, &gr->passwd, &t.gr_passwd);
	char *first = o;
	size_t off = 0;
	struct proto_str m;
	uint32_t n = 0;
	char *dummy;
	while (n < gr->mem.count && proto_strlist_next(&gr->mem, &off, &m) == 1) {
		o = put_str(o, &m, &dummy);
		n++;
	}
	/* Now every source byte is consumed: build the array by walking the
	 * packed members (validated: no embedded NUL, so strlen finds each). */
	char **mem = (char **)(void *)(o + align_pad((uintptr_t)o));
	char *s = first;
	for (uint32_t i = 0; i < n; i++) {
		mem[i] = s;
		s += strlen(s) + 1;
	}
	mem[n] = NULL;
	t.gr_gid = gr->gid;
	t.gr_mem = mem;
	*out = t;
	return 0;
}
