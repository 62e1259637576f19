/*
 * proto unit tests: request and reply round trips, rejection of every
 * truncation and malformed field, the NSS packers at every buffer size, the
 * server's frame reader and the client's drain-on-ERANGE.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "proto/proto.h"

static struct proto_str S(const char *s) {
	struct proto_str v = {s, (uint32_t)strlen(s)};
	return v;
}

/* ---- requests ---------------------------------------------------------------- */

static const struct proto_req sample_reqs[] = {
    {.cmd = PROTO_CMD_HELLO, .version = PROTO_VERSION},
    {.cmd = PROTO_CMD_GETPWNAM, .name = {"alice", 5}},
    {.cmd = PROTO_CMD_GETPWUID, .id = 1000},
    {.cmd = PROTO_CMD_GETGRNAM, .name = {"wheel", 5}},
    {.cmd = PROTO_CMD_GETGRGID, .id = 0xfffffffeu},
    {.cmd = PROTO_CMD_INITGROUPS, .name = {"bob", 3}},
    {.cmd = PROTO_CMD_SETPWENT},
    {.cmd = PROTO_CMD_GETPWENT, .max_count = 100, .max_bytes = 65536},
    {.cmd = PROTO_CMD_ENDPWENT},
    {.cmd = PROTO_CMD_SETGRENT},
    {.cmd = PROTO_CMD_GETGRENT, .max_count = 0, .max_bytes = 0},
    {.cmd = PROTO_CMD_ENDGRENT},
    {.cmd = PROTO_CMD_MCMAP, .id = 2},
    {.cmd = PROTO_CMD_MCMAP, .id = 0},
    {.cmd = PROTO_CMD_STATUS},
    {.cmd = PROTO_CMD_EXPIRE, .what = PROTO_EXPIRE_USER, .name = {"carol", 5}},
    {.cmd = PROTO_CMD_EXPIRE, .what = PROTO_EXPIRE_GROUP, .name = {"staff", 5}},
    {.cmd = PROTO_CMD_EXPIRE, .what = PROTO_EXPIRE_ALL, .name = {"", 0}},
    {.cmd = PROTO_CMD_RELOAD},
    {.cmd = PROTO_CMD_USERINFO, .name = {"alice", 5}},
    {.cmd = PROTO_CMD_GROUPINFO, .name = {"wheel", 5}},
    {.cmd = PROTO_CMD_SSHKEYS, .name = {"alice", 5}},
    {.cmd = PROTO_CMD_SUBIDS, .what = PROTO_SUBID_UID, .name = {"alice", 5}},
    {.cmd = PROTO_CMD_SUBIDS, .what = PROTO_SUBID_GID, .name = {"bob", 3}},
    {.cmd = PROTO_CMD_SUBID_OWNERS, .what = PROTO_SUBID_GID, .id = 0xfffffffeu},
};

static int decode_frame(const uint8_t *buf, size_t n, struct proto_req *out)
{
	struct proto_hdr h;
	int rc = proto_decode_hdr(buf, n, PROTO_MAX_REQUEST, &h);
	if (rc < 0)
		return rc;
	return proto_decode_request(&h, buf + PROTO_HDR_SIZE, n - PROTO_HDR_SIZE, out);
}

static void test_request_roundtrip(void **state)
{
	(void)state;
	for (size_t i = 0; i < IDC_ARRAY_SIZE(sample_reqs); i++) {
		const struct proto_req *in = &sample_reqs[i];
		uint8_t buf[PROTO_MAX_REQUEST];
		int len = proto_encode_request(buf, sizeof(buf), in);
		assert_true(len >= (int)PROTO_HDR_SIZE);
		struct proto_req out;
		assert_int_equal(decode_frame(buf, (size_t)len, &out), 0);
		assert_int_equal(out.cmd, in->cmd);
		assert_int_equal(out.id, in->id);
		assert_int_equal(out.version, in->version);
		assert_int_equal(out.max_count, in->max_count);
		assert_int_equal(out.max_bytes, in->max_bytes);
		assert_int_equal(out.what, in->what);
		assert_int_equal(out.name.len, in->name.len);
		if (in->name.len)
			assert_memory_equal(out.name.p, in->name.p, in->name.len);
		assert_int_equal(out.name.p[out.name.len], '\0');
		/* The exact size is needed: one byte less fails. */
		assert_int_equal(proto_encode_request(buf, (size_t)len - 1, in), -EMSGSIZE);
	}
}

/* Every shorter and every longer payload of each valid request is refused. */
static void test_request_truncation(void **state)
{
	(void)state;
	for (size_t i = 0; i < IDC_ARRAY_SIZE(sample_reqs); i++) {
		uint8_t buf[PROTO_MAX_REQUEST];
		int len = proto_encode_request(buf, sizeof(buf) - 8, &sample_reqs[i]);
		assert_true(len > 0);
		struct proto_hdr h;
		assert_int_equal(proto_decode_hdr(buf, (size_t)len, PROTO_MAX_REQUEST, &h), 0);
		struct proto_req out;
		for (size_t k = 0; k < (size_t)len - PROTO_HDR_SIZE; k++) {
			h.length = (uint32_t)(PROTO_HDR_SIZE + k);
			assert_int_equal(proto_decode_request(&h, buf + PROTO_HDR_SIZE, k, &out),
					 -EBADMSG);
		}
		memset(buf + len, 'x', 4);
		h.length = (uint32_t)len + 1;
		assert_int_equal(proto_decode_request(&h, buf + PROTO_HDR_SIZE,
						      (size_t)len + 1 - PROTO_HDR_SIZE, &out),
				 -EBADMSG);
		/* A header/payload size mismatch is refused too. */
		h.length = (uint32_t)len;
		assert_int_equal(proto_decode_request(&h, buf + PROTO_HDR_SIZE,
						      (size_t)len - PROTO_HDR_SIZE + 1, &out),
				 -EBADMSG);
	}
}

static void test_request_bad_fields(void **state)
{
	(void)state;
	uint8_t buf[PROTO_MAX_REQUEST];
	struct proto_req out;
	struct proto_req r = {.cmd = PROTO_CMD_GETPWNAM, .name = S("alice")};
	int len = proto_encode_request(buf, sizeof(buf), &r);
	assert_true(len > 0);

	/* unknown command, non-zero status, non-zero reserved */
	uint32_t v = 99;
	memcpy(buf + 4, &v, 4);
	assert_int_equal(decode_frame(buf, (size_t)len, &out), -EBADMSG);
	v = PROTO_CMD_GETPWNAM;
	memcpy(buf + 4, &v, 4);
	v = 1;
	memcpy(buf + 8, &v, 4);
	assert_int_equal(decode_frame(buf, (size_t)len, &out), -EBADMSG);
	v = 0;
	memcpy(buf + 8, &v, 4);
	v = 7;
	memcpy(buf + 12, &v, 4);
	assert_int_equal(decode_frame(buf, (size_t)len, &out), -EBADMSG);
	v = 0;
	memcpy(buf + 12, &v, 4);
	assert_int_equal(decode_frame(buf, (size_t)len, &out), 0);

	/* string: missing NUL at the declared length, embedded NUL, huge len */
	buf[PROTO_HDR_SIZE + 4 + 5] = 'x';
	assert_int_equal(decode_frame(buf, (size_t)len, &out), -EBADMSG);
	buf[PROTO_HDR_SIZE + 4 + 5] = '\0';
	buf[PROTO_HDR_SIZE + 4 + 2] = '\0';
	assert_int_equal(decode_frame(buf, (size_t)len, &out), -EBADMSG);
	buf[PROTO_HDR_SIZE + 4 + 2] = 'i';
	v = 0xffffffffu;
	memcpy(buf + PROTO_HDR_SIZE, &v, 4);
	assert_int_equal(decode_frame(buf, (size_t)len, &out), -EBADMSG);
	v = 4; /* shorter than the bytes present: trailing garbage */
	memcpy(buf + PROTO_HDR_SIZE, &v, 4);
	assert_int_equal(decode_frame(buf, (size_t)len, &out), -EBADMSG);

	/* names: empty, too long, embedded NUL; EXPIRE rules */
	char longname[PROTO_NAME_MAX + 2];
	memset(longname, 'a', sizeof(longname));
	struct proto_req bad[] = {
	    {.cmd = PROTO_CMD_GETPWNAM, .name = {"", 0}},
	    {.cmd = PROTO_CMD_GETGRNAM, .name = {longname, PROTO_NAME_MAX + 1}},
	    {.cmd = PROTO_CMD_INITGROUPS, .name = {"a\0b", 3}},
	    {.cmd = PROTO_CMD_EXPIRE, .what = PROTO_EXPIRE_USER, .name = {"", 0}},
	    {.cmd = PROTO_CMD_EXPIRE, .what = PROTO_EXPIRE_ALL, .name = {"x", 1}},
	    {.cmd = PROTO_CMD_EXPIRE, .what = 9, .name = {"x", 1}},
	    {.cmd = 77},
	    {.cmd = PROTO_CMD_SUBIDS, .what = 0, .name = {"x", 1}},
	    {.cmd = PROTO_CMD_SUBIDS, .what = 3, .name = {"x", 1}},
	    {.cmd = PROTO_CMD_SUBIDS, .what = PROTO_SUBID_UID, .name = {"", 0}},
	    {.cmd = PROTO_CMD_SUBID_OWNERS, .what = PROTO_EXPIRE_ALL, .id = 5},
	};
	for (size_t i = 0; i < IDC_ARRAY_SIZE(bad); i++)
		assert_int_equal(proto_encode_request(buf, sizeof(buf), &bad[i]), -EINVAL);
	struct proto_req ok = {.cmd = PROTO_CMD_GETGRNAM, .name = {longname, PROTO_NAME_MAX}};
	assert_true(proto_encode_request(buf, sizeof(buf), &ok) > 0);

	/* The same rules hold at the decoder: hand-made empty name. */
	uint8_t raw[PROTO_HDR_SIZE + 5];
	uint32_t hdr[4] = {sizeof(raw), PROTO_CMD_GETPWNAM, 0, 0};
	memcpy(raw, hdr, 16);
	memset(raw + 16, 0, 5);
	assert_int_equal(decode_frame(raw, sizeof(raw), &out), -EBADMSG);
}

static void test_header(void **state)
{
	(void)state;
	struct proto_hdr h;
	uint32_t raw[4] = {16, PROTO_CMD_STATUS, 0, 0};
	assert_int_equal(proto_decode_hdr(raw, 16, PROTO_MAX_REQUEST, &h), 0);
	assert_int_equal(proto_decode_hdr(raw, 15, PROTO_MAX_REQUEST, &h), -EBADMSG);
	raw[0] = 15;
	assert_int_equal(proto_decode_hdr(raw, 16, PROTO_MAX_REQUEST, &h), -EBADMSG);
	raw[0] = PROTO_MAX_REQUEST + 1;
	assert_int_equal(proto_decode_hdr(raw, 16, PROTO_MAX_REQUEST, &h), -EBADMSG);
	assert_int_equal(proto_decode_hdr(raw, 16, PROTO_MAX_REPLY, &h), 0);
	raw[0] = PROTO_MAX_REPLY + 1;
	assert_int_equal(proto_decode_hdr(raw, 16, PROTO_MAX_REPLY, &h), -EBADMSG);
	raw[0] = 16;
	raw[3] = 1;
	assert_int_equal(proto_decode_hdr(raw, 16, PROTO_MAX_REPLY, &h), -EBADMSG);
	assert_true(proto_cmd_known(PROTO_CMD_RELOAD));
	assert_true(proto_cmd_known(PROTO_CMD_MCMAP));
	assert_false(proto_cmd_is_admin(PROTO_CMD_MCMAP));
	assert_false(proto_cmd_known(14));
	assert_true(proto_cmd_known(PROTO_CMD_SUBIDS));
	assert_false(proto_cmd_is_admin(PROTO_CMD_SUBID_OWNERS));
	assert_false(proto_cmd_known(PROTO_CMD_SUBID_OWNERS + 1));
	assert_true(proto_cmd_is_admin(PROTO_CMD_EXPIRE));
	assert_false(proto_cmd_is_admin(PROTO_CMD_GETPWNAM));
	assert_string_equal(proto_cmd_name(PROTO_CMD_INITGROUPS), "INITGROUPS");
}

/* ---- replies --------------------------------------------------------------------- */

static const struct proto_passwd alice = {
    .name = {"alice", 5},
    .passwd = {"x", 1},
    .uid = 1000,
    .gid = 100,
    .gecos = {"Alice Liddell,,,", 16},
    .dir = {"/home/alice", 11},
    .shell = {"/bin/bash", 9},
};

static const char *const wheel_mem[] = {"alice", "bob", "", "carol"};

/* Payload of one reply built with the server's builders: b holds the frame,
 * returns the payload pointer and size. */
static const uint8_t *payload_of(struct idc_buf *b, size_t start, size_t *n)
{
	struct proto_hdr h;
	assert_int_equal(proto_decode_hdr(b->data + start, b->len - start, PROTO_MAX_REPLY, &h), 0);
	assert_int_equal(h.length, b->len - start);
	*n = h.length - PROTO_HDR_SIZE;
	return (const uint8_t *)b->data + start + PROTO_HDR_SIZE;
}

static void build_passwd(struct idc_buf *b, const struct proto_passwd *pw)
{
	size_t start;
	assert_int_equal(proto_reply_begin(b, PROTO_CMD_GETPWNAM, PROTO_ST_OK, &start), 0);
	assert_int_equal(proto_put_passwd(b, pw), 0);
	assert_int_equal(proto_reply_end(b, start), 0);
}

static void build_group(struct idc_buf *b, const char *const *mem, uint32_t nmem)
{
	size_t start;
	assert_int_equal(proto_reply_begin(b, PROTO_CMD_GETGRNAM, PROTO_ST_OK, &start), 0);
	assert_int_equal(proto_put_group_cstr(b, "wheel", "x", 10, mem, nmem), 0);
	assert_int_equal(proto_reply_end(b, start), 0);
}

static void check_passwd(const struct proto_passwd *a, const struct proto_passwd *b)
{
	assert_string_equal(a->name.p, b->name.p);
	assert_string_equal(a->passwd.p, b->passwd.p);
	assert_string_equal(a->gecos.p, b->gecos.p);
	assert_string_equal(a->dir.p, b->dir.p);
	assert_string_equal(a->shell.p, b->shell.p);
	assert_int_equal(a->uid, b->uid);
	assert_int_equal(a->gid, b->gid);
}

/* Every proper prefix of an exactly-consumed payload must be refused, and
 * one byte more too. */
typedef int (*decode_fn)(const void *p, size_t n, void *out);

static void check_prefixes(const uint8_t *p, size_t n, decode_fn fn, void *out)
{
	uint8_t *copy = malloc(n + 1);
	assert_non_null(copy);
	for (size_t k = 0; k < n; k++) {
		memcpy(copy, p, k); /* exact-size region: a read past k shows under ASan */
		uint8_t *tight = malloc(k ? k : 1);
		memcpy(tight, copy, k);
		assert_int_equal(fn(tight, k, out), -EBADMSG);
		free(tight);
	}
	memcpy(copy, p, n);
	copy[n] = 0;
	assert_int_equal(fn(copy, n + 1, out), -EBADMSG);
	free(copy);
}

static int dec_passwd(const void *p, size_t n, void *out)
{
	return proto_decode_passwd(p, n, out);
}
static int dec_group(const void *p, size_t n, void *out)
{
	return proto_decode_group(p, n, out);
}
static int dec_gids(const void *p, size_t n, void *out)
{
	return proto_decode_gids(p, n, out);
}
static int dec_u32(const void *p, size_t n, void *out)
{
	return proto_decode_u32(p, n, out);
}
static int dec_pwbatch(const void *p, size_t n, void *out)
{
	return proto_decode_batch(PROTO_CMD_GETPWENT, p, n, out);
}
static int dec_grbatch(const void *p, size_t n, void *out)
{
	return proto_decode_batch(PROTO_CMD_GETGRENT, p, n, out);
}

static int dec_sshkeys(const void *p, size_t n, void *out)
{
	return proto_decode_sshkeys(p, n, out);
}

/* An SSHKEYS reply with keys[0..n) as built by the daemon. */
static const uint8_t *build_sshkeys(struct idc_buf *b, const char *const *keys, uint32_t n,
				    size_t *len)
{
	size_t start;
	idc_buf_reset(b);
	assert_int_equal(proto_reply_begin(b, PROTO_CMD_SSHKEYS, PROTO_ST_OK, &start), 0);
	assert_int_equal(proto_put_u32(b, n), 0);
	for (uint32_t i = 0; i < n; i++)
		assert_int_equal(proto_put_cstr(b, keys[i]), 0);
	assert_int_equal(proto_reply_end(b, start), 0);
	return payload_of(b, start, len);
}

static void test_reply_sshkeys(void **state)
{
	(void)state;
	static const char *const keys[] = {"ssh-ed25519 AAAA a", "ssh-rsa BBBB b c"};
	struct idc_buf b = IDC_BUF_INIT;
	size_t n, off = 0;
	const uint8_t *p = build_sshkeys(&b, keys, 2, &n);
	struct proto_strlist l;
	struct proto_str k;
	assert_int_equal(proto_decode_sshkeys(p, n, &l), 0);
	assert_int_equal(l.count, 2);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(proto_strlist_next(&l, &off, &k), 1);
		assert_string_equal(k.p, keys[i]);
	}
	assert_int_equal(proto_strlist_next(&l, &off, &k), 0);
	check_prefixes(p, n, dec_sshkeys, &l);
	/* None is an answer (a user without keys)... */
	p = build_sshkeys(&b, keys, 0, &n);
	assert_int_equal(proto_decode_sshkeys(p, n, &l), 0);
	assert_int_equal(l.count, 0);
	/* ...an empty key is not, nor a count the bytes cannot hold. */
	static const char *const empty[] = {"ssh-ed25519 AAAA", ""};
	p = build_sshkeys(&b, empty, 2, &n);
	assert_int_equal(proto_decode_sshkeys(p, n, &l), -EBADMSG);
	p = build_sshkeys(&b, keys, 1, &n);
	uint8_t *copy = malloc(n);
	memcpy(copy, p, n);
	uint32_t two = 2;
	memcpy(copy, &two, 4);
	assert_int_equal(proto_decode_sshkeys(copy, n, &l), -EBADMSG);
	free(copy);
	idc_buf_free(&b);
	/* Anyone may ask: not an admin command. */
	assert_true(proto_cmd_known(PROTO_CMD_SSHKEYS));
	assert_false(proto_cmd_is_admin(PROTO_CMD_SSHKEYS));
	assert_string_equal(proto_cmd_name(PROTO_CMD_SSHKEYS), "SSHKEYS");
}

static void test_reply_passwd(void **state)
{
	(void)state;
	struct idc_buf b = IDC_BUF_INIT;
	build_passwd(&b, &alice);
	size_t n;
	const uint8_t *p = payload_of(&b, 0, &n);
	struct proto_passwd pw;
	assert_int_equal(proto_decode_passwd(p, n, &pw), 0);
	check_passwd(&pw, &alice);
	check_prefixes(p, n, dec_passwd, &pw);

	/* An empty user name is refused even though well-formed. */
	struct proto_passwd anon = alice;
	anon.name = S("");
	idc_buf_reset(&b);
	build_passwd(&b, &anon);
	p = payload_of(&b, 0, &n);
	assert_int_equal(proto_decode_passwd(p, n, &pw), -EBADMSG);
	idc_buf_free(&b);
}

static void test_reply_group(void **state)
{
	(void)state;
	struct idc_buf b = IDC_BUF_INIT;
	build_group(&b, wheel_mem, 4);
	size_t n;
	const uint8_t *p = payload_of(&b, 0, &n);
	struct proto_group gr;
	assert_int_equal(proto_decode_group(p, n, &gr), 0);
	assert_string_equal(gr.name.p, "wheel");
	assert_string_equal(gr.passwd.p, "x");
	assert_int_equal(gr.gid, 10);
	assert_int_equal(gr.mem.count, 4);
	size_t off = 0;
	struct proto_str m;
	for (int i = 0; i < 4; i++) {
		assert_int_equal(proto_strlist_next(&gr.mem, &off, &m), 1);
		assert_string_equal(m.p, wheel_mem[i]);
	}
	assert_int_equal(proto_strlist_next(&gr.mem, &off, &m), 0);
	check_prefixes(p, n, dec_group, &gr);

	/* A member count larger than the bytes could hold fails up front. */
	uint8_t *copy = malloc(n);
	memcpy(copy, p, n);
	uint32_t huge = 0x7fffffff;
	size_t nmem_at = 4 + 6 + 4 + 2 + 4;
	memcpy(copy + nmem_at, &huge, 4);
	assert_int_equal(proto_decode_group(copy, n, &gr), -EBADMSG);
	free(copy);

	/* proto_strlist_init: the mc reader's entry point. */
	struct proto_strlist l;
	assert_int_equal(proto_strlist_init(&l, p + nmem_at + 4, n - nmem_at - 4, 4), 0);
	assert_int_equal(proto_strlist_init(&l, p + nmem_at + 4, n - nmem_at - 4, 3), -EBADMSG);
	assert_int_equal(proto_strlist_init(&l, p + nmem_at + 4, n - nmem_at - 5, 4), -EBADMSG);
	idc_buf_free(&b);
}

static void test_reply_gids_text_u32(void **state)
{
	(void)state;
	struct idc_buf b = IDC_BUF_INIT;
	size_t start, n;
	assert_int_equal(proto_reply_begin(&b, PROTO_CMD_INITGROUPS, PROTO_ST_OK, &start), 0);
	assert_int_equal(proto_put_u32(&b, 3), 0);
	for (uint32_t g = 10; g < 13; g++)
		assert_int_equal(proto_put_u32(&b, g), 0);
	assert_int_equal(proto_reply_end(&b, start), 0);
	const uint8_t *p = payload_of(&b, start, &n);
	struct proto_gids g;
	assert_int_equal(proto_decode_gids(p, n, &g), 0);
	assert_int_equal(g.count, 3);
	assert_int_equal(proto_gids_get(&g, 0), 10);
	assert_int_equal(proto_gids_get(&g, 2), 12);
	assert_int_equal(proto_gids_get(&g, 3), 0);
	check_prefixes(p, n, dec_gids, &g);

	idc_buf_reset(&b);
	assert_int_equal(proto_reply_status(&b, PROTO_CMD_STATUS, PROTO_ST_OK, "users=3\n"), 0);
	p = payload_of(&b, 0, &n);
	struct proto_str s;
	assert_int_equal(proto_decode_text(p, n, &s), 0);
	assert_string_equal(s.p, "users=3\n");
	assert_int_equal(proto_decode_text(p, 0, &s), 0);
	assert_int_equal(s.len, 0);
	assert_int_equal(proto_decode_text(p, n - 1, &s), -EBADMSG);

	idc_buf_reset(&b);
	assert_int_equal(proto_reply_begin(&b, PROTO_CMD_HELLO, PROTO_ST_OK, &start), 0);
	assert_int_equal(proto_put_u32(&b, PROTO_VERSION), 0);
	assert_int_equal(proto_reply_end(&b, start), 0);
	p = payload_of(&b, 0, &n);
	uint32_t v;
	assert_int_equal(proto_decode_u32(p, n, &v), 0);
	assert_int_equal(v, PROTO_VERSION);
	check_prefixes(p, n, dec_u32, &v);

	/* A string with a NUL inside cannot be put on the wire. */
	assert_int_equal(proto_put_str(&b, "a\0b", 3), -EINVAL);
	idc_buf_free(&b);
}

static int dec_subids(const void *p, size_t n, void *out)
{
	return proto_decode_subids(p, n, out);
}

/* A SUBIDS reply of the given ranges (pairs) for uid. */
static const uint8_t *subids_reply(struct idc_buf *b, uint32_t uid, const uint32_t *r, uint32_t n,
				   size_t *len)
{
	size_t start;
	idc_buf_reset(b);
	assert_int_equal(proto_reply_begin(b, PROTO_CMD_SUBIDS, PROTO_ST_OK, &start), 0);
	assert_int_equal(proto_put_u32(b, uid), 0);
	assert_int_equal(proto_put_u32(b, n), 0);
	for (uint32_t i = 0; i < 2 * n; i++)
		assert_int_equal(proto_put_u32(b, r[i]), 0);
	assert_int_equal(proto_reply_end(b, start), 0);
	return payload_of(b, start, len);
}

/* SUBIDS: ranges round-trip; a range of count 0, one reaching 2^32 - 1
 * or wrapping, a count that disagrees with the size, and every prefix are
 * refused. */
static void test_reply_subids(void **state)
{
	(void)state;
	struct idc_buf b = IDC_BUF_INIT;
	struct proto_subids s;
	size_t n;
	/* The last one ends at 2^32 - 2: the highest id a range may hold. */
	const uint32_t good[] = {2147483648u, 65536, 100000, 1, 1, 0xfffffffeu};
	const uint8_t *p = subids_reply(&b, 10001, good, 3, &n);
	assert_int_equal(proto_decode_subids(p, n, &s), 0);
	assert_int_equal(s.uid, 10001);
	assert_int_equal(s.count, 3);
	for (uint32_t i = 0; i < 3; i++) {
		uint32_t start, count;
		proto_subids_get(&s, i, &start, &count);
		assert_int_equal(start, good[2 * i]);
		assert_int_equal(count, good[2 * i + 1]);
	}
	uint32_t start = 1, count = 1;
	proto_subids_get(&s, 3, &start, &count);
	assert_int_equal(start, 0);
	assert_int_equal(count, 0);
	check_prefixes(p, n, dec_subids, &s);

	p = subids_reply(&b, 7, good, 0, &n);
	assert_int_equal(proto_decode_subids(p, n, &s), 0);
	assert_int_equal(s.count, 0);

	const uint32_t bad[][2] = {{5, 0}, {1, 0xffffffffu}, {0xfffffffeu, 2}, {2, 0xfffffffeu}};
	for (size_t i = 0; i < IDC_ARRAY_SIZE(bad); i++) {
		p = subids_reply(&b, 7, bad[i], 1, &n);
		assert_int_equal(proto_decode_subids(p, n, &s), -EBADMSG);
	}
	/* The count says two, one is there; and one more byte than ranges. */
	p = subids_reply(&b, 7, good, 1, &n);
	uint8_t copy[64];
	memcpy(copy, p, n);
	uint32_t two = 2;
	memcpy(copy + 4, &two, 4);
	assert_int_equal(proto_decode_subids(copy, n, &s), -EBADMSG);
	copy[n] = 0;
	memcpy(copy + 4, "\1\0\0\0", 4);
	assert_int_equal(proto_decode_subids(copy, n + 1, &s), -EBADMSG);
	idc_buf_free(&b);
}

/* USERINFO / GROUPINFO: admin-only, a name as GETPWNAM's, a text reply. */
static void test_admin_info(void **state)
{
	(void)state;
	static const uint32_t cmds[] = {PROTO_CMD_USERINFO, PROTO_CMD_GROUPINFO};
	for (size_t i = 0; i < IDC_ARRAY_SIZE(cmds); i++) {
		assert_true(proto_cmd_known(cmds[i]));
		assert_true(proto_cmd_is_admin(cmds[i]));
		uint8_t buf[PROTO_MAX_REQUEST];
		struct proto_req req = {.cmd = cmds[i], .name = {"", 0}};
		assert_int_equal(proto_encode_request(buf, sizeof(buf), &req), -EINVAL);
		char longname[PROTO_NAME_MAX + 1];
		memset(longname, 'a', sizeof(longname));
		req.name = (struct proto_str){longname, PROTO_NAME_MAX + 1};
		assert_int_equal(proto_encode_request(buf, sizeof(buf), &req), -EINVAL);
		req.name = (struct proto_str){longname, PROTO_NAME_MAX};
		int len = proto_encode_request(buf, sizeof(buf), &req);
		assert_true(len > 0);
		struct proto_req out;
		assert_int_equal(decode_frame(buf, (size_t)len, &out), 0);
		assert_int_equal(out.cmd, cmds[i]);
		assert_int_equal(out.name.len, PROTO_NAME_MAX);
	}
	assert_string_equal(proto_cmd_name(PROTO_CMD_USERINFO), "USERINFO");
	assert_string_equal(proto_cmd_name(PROTO_CMD_GROUPINFO), "GROUPINFO");
	assert_false(proto_cmd_known(PROTO_CMD_GROUPINFO + 1));
	assert_false(proto_cmd_is_admin(PROTO_CMD_GROUPINFO + 1));

	struct idc_buf b = IDC_BUF_INIT;
	size_t n;
	assert_int_equal(
	    proto_reply_status(&b, PROTO_CMD_USERINFO, PROTO_ST_OK, "name=alice\nuid=1000\n"), 0);
	const uint8_t *p = payload_of(&b, 0, &n);
	struct proto_str s;
	assert_int_equal(proto_decode_text(p, n, &s), 0);
	assert_string_equal(s.p, "name=alice\nuid=1000\n");
	idc_buf_free(&b);
}

static void test_reply_batches(void **state)
{
	(void)state;
	struct idc_buf b = IDC_BUF_INIT;
	size_t start, n, cnt;
	assert_int_equal(proto_reply_begin(&b, PROTO_CMD_GETPWENT, PROTO_ST_OK, &start), 0);
	cnt = b.len;
	assert_int_equal(proto_put_u32(&b, 0), 0);
	for (int i = 0; i < 3; i++)
		assert_int_equal(proto_put_passwd(&b, &alice), 0);
	proto_patch_u32(&b, cnt, 3);
	assert_int_equal(proto_reply_end(&b, start), 0);
	const uint8_t *p = payload_of(&b, start, &n);
	struct proto_batch bt;
	assert_int_equal(proto_decode_batch(PROTO_CMD_GETPWENT, p, n, &bt), 0);
	assert_int_equal(bt.count, 3);
	size_t off = 0;
	struct proto_passwd pw;
	for (int i = 0; i < 3; i++) {
		assert_int_equal(proto_batch_next_passwd(&bt, &off, &pw), 1);
		check_passwd(&pw, &alice);
	}
	assert_int_equal(proto_batch_next_passwd(&bt, &off, &pw), 0);
	check_prefixes(p, n, dec_pwbatch, &bt);
	/* the wrong kind, a zero count */
	assert_int_equal(proto_decode_batch(PROTO_CMD_GETGRENT, p, n, &bt), -EBADMSG);
	assert_int_equal(proto_decode_batch(PROTO_CMD_GETPWNAM, p, n, &bt), -EBADMSG);
	uint32_t zero = 0;
	assert_int_equal(proto_decode_batch(PROTO_CMD_GETPWENT, &zero, 4, &bt), -EBADMSG);

	idc_buf_reset(&b);
	assert_int_equal(proto_reply_begin(&b, PROTO_CMD_GETGRENT, PROTO_ST_OK, &start), 0);
	assert_int_equal(proto_put_u32(&b, 2), 0);
	assert_int_equal(proto_put_group_cstr(&b, "wheel", "x", 10, wheel_mem, 4), 0);
	assert_int_equal(proto_put_group_cstr(&b, "empty", "", 11, NULL, 0), 0);
	assert_int_equal(proto_reply_end(&b, start), 0);
	p = payload_of(&b, start, &n);
	assert_int_equal(proto_decode_batch(PROTO_CMD_GETGRENT, p, n, &bt), 0);
	off = 0;
	struct proto_group gr;
	assert_int_equal(proto_batch_next_group(&bt, &off, &gr), 1);
	assert_int_equal(gr.mem.count, 4);
	assert_int_equal(proto_batch_next_group(&bt, &off, &gr), 1);
	assert_string_equal(gr.name.p, "empty");
	assert_int_equal(gr.mem.count, 0);
	assert_int_equal(proto_batch_next_group(&bt, &off, &gr), 0);
	check_prefixes(p, n, dec_grbatch, &bt);

	/* Re-encoding a decoded group (proto_put_group) gives the same bytes. */
	off = 0;
	assert_int_equal(proto_batch_next_group(&bt, &off, &gr), 1);
	struct idc_buf c = IDC_BUF_INIT;
	assert_int_equal(proto_put_group(&c, &gr), 0);
	assert_memory_equal(c.data, p + 4, c.len);
	idc_buf_free(&c);
	idc_buf_free(&b);
}

static void test_reply_too_big(void **state)
{
	(void)state;
	struct idc_buf b = IDC_BUF_INIT;
	size_t start;
	assert_int_equal(proto_reply_status(&b, PROTO_CMD_RELOAD, PROTO_ST_OK, NULL), 0);
	size_t keep = b.len;
	assert_int_equal(proto_reply_begin(&b, PROTO_CMD_GETGRGID, PROTO_ST_OK, &start), 0);
	assert_int_equal(idc_buf_reserve(&b, PROTO_MAX_REPLY), 0);
	memset(b.data + b.len, 'a', PROTO_MAX_REPLY - PROTO_HDR_SIZE + 1);
	b.len += PROTO_MAX_REPLY - PROTO_HDR_SIZE + 1;
	assert_int_equal(proto_reply_end(&b, start), -EMSGSIZE);
	assert_int_equal(b.len, keep); /* the oversized frame is gone, the earlier one kept */
	idc_buf_free(&b);
}

/* ---- packing ------------------------------------------------------------------------ */

static void test_pack_passwd_sweep(void **state)
{
	(void)state;
	size_t need = proto_passwd_size(&alice);
	assert_int_equal(need, 5 + 1 + 16 + 11 + 9 + 5);
	for (size_t len = 0; len <= need; len++) {
		char *buf = malloc(len ? len : 1);
		struct passwd out;
		memset(&out, 0, sizeof(out));
		int rc = proto_pack_passwd(&alice, &out, len ? buf : NULL, len);
		if (len < need) {
			assert_int_equal(rc, -ERANGE);
			assert_null(out.pw_name); /* nothing written */
		} else {
			assert_int_equal(rc, 0);
			assert_string_equal(out.pw_name, "alice");
			assert_string_equal(out.pw_passwd, "x");
			assert_string_equal(out.pw_gecos, "Alice Liddell,,,");
			assert_string_equal(out.pw_dir, "/home/alice");
			assert_string_equal(out.pw_shell, "/bin/bash");
			assert_int_equal(out.pw_uid, 1000);
			assert_int_equal(out.pw_gid, 100);
		}
		free(buf);
	}
}

static void check_group(const struct group *g, const char *const *mem, uint32_t nmem)
{
	assert_string_equal(g->gr_name, "wheel");
	assert_string_equal(g->gr_passwd, "x");
	assert_int_equal(g->gr_gid, 10);
	for (uint32_t i = 0; i < nmem; i++)
		assert_string_equal(g->gr_mem[i], mem[i]);
	assert_null(g->gr_mem[nmem]);
	assert_int_equal((uintptr_t)g->gr_mem % sizeof(char *), 0);
}

/* Sweep every size at every alignment of the caller's buffer. */
static void test_pack_group_sweep(void **state)
{
	(void)state;
	struct idc_buf b = IDC_BUF_INIT;
	build_group(&b, wheel_mem, 4);
	size_t n;
	const uint8_t *p = payload_of(&b, 0, &n);
	struct proto_group gr;
	assert_int_equal(proto_decode_group(p, n, &gr), 0);
	char *area = malloc(256 + 8);
	for (size_t align = 0; align < 8; align++) {
		char *buf = area + align;
		size_t need = proto_group_size(&gr, buf);
		assert_true(need < 256);
		for (size_t len = 0; len <= need; len++) {
			struct group out;
			memset(&out, 0, sizeof(out));
			int rc = proto_pack_group(&gr, &out, buf, len);
			if (len < need) {
				assert_int_equal(rc, -ERANGE);
				assert_null(out.gr_name);
			} else {
				assert_int_equal(rc, 0);
				check_group(&out, wheel_mem, 4);
				assert_true((char *)&out.gr_mem[5] <= buf + len);
			}
		}
	}
	free(area);
	idc_buf_free(&b);
}

/* The NSS path: payload received into the caller's buffer, packed in place. */
static void test_pack_in_place(void **state)
{
	(void)state;
	enum { N = 500 };
	static char names[N][16];
	const char *mem[N];
	for (int i = 0; i < N; i++) {
		snprintf(names[i], sizeof(names[i]), "member%04d", i);
		mem[i] = names[i];
	}
	struct idc_buf b = IDC_BUF_INIT;
	build_group(&b, mem, N);
	size_t n;
	const uint8_t *p = payload_of(&b, 0, &n);
	struct proto_group gr;
	assert_int_equal(proto_decode_group(p, n, &gr), 0);
	size_t cap = n + 8 * (N + 2);
	char *area = malloc(cap + 8);
	for (size_t align = 0; align < 8; align += 3) {
		char *buf = area + align;
		memcpy(buf, p, n);
		struct proto_group in;
		assert_int_equal(proto_decode_group(buf, n, &in), 0);
		size_t need = proto_group_size(&in, buf);
		assert_true(need >= n); /* two or more members: packed >= encoded */
		struct group out;
		assert_int_equal(proto_pack_group(&in, &out, buf, need), 0);
		assert_string_equal(out.gr_name, "wheel");
		for (int i = 0; i < N; i++)
			assert_string_equal(out.gr_mem[i], mem[i]);
		assert_null(out.gr_mem[N]);
	}
	idc_buf_reset(&b);
	build_passwd(&b, &alice);
	p = payload_of(&b, 0, &n);
	memcpy(area, p, n);
	struct proto_passwd pw;
	assert_int_equal(proto_decode_passwd(area, n, &pw), 0);
	struct passwd pout;
	assert_int_equal(proto_pack_passwd(&pw, &pout, area, n), 0);
	assert_string_equal(pout.pw_name, "alice");
	assert_string_equal(pout.pw_gecos, "Alice Liddell,,,");
	assert_string_equal(pout.pw_shell, "/bin/bash");
	free(area);
	idc_buf_free(&b);
}

/* ---- frame reader ---------------------------------------------------------------------- */

static void test_reader(void **state)
{
	(void)state;
	uint8_t stream[PROTO_MAX_REQUEST * 2];
	size_t len = 0;
	for (size_t i = 0; i < IDC_ARRAY_SIZE(sample_reqs); i++) {
		int l = proto_encode_request(stream + len, sizeof(stream) - len, &sample_reqs[i]);
		assert_true(l > 0);
		len += (size_t)l;
	}
	/* byte by byte, then in chunks of 7, then all at once */
	size_t steps[] = {1, 7, sizeof(stream)};
	for (size_t s = 0; s < IDC_ARRAY_SIZE(steps); s++) {
		struct proto_reader r;
		proto_reader_init(&r, PROTO_MAX_REQUEST);
		size_t got = 0;
		for (size_t off = 0; off < len; off += steps[s]) {
			size_t k = len - off < steps[s] ? len - off : steps[s];
			assert_int_equal(proto_reader_feed(&r, stream + off, k), 0);
			struct proto_frame f;
			while (proto_reader_next(&r, &f) == 1) {
				struct proto_req req;
				assert_int_equal(
				    proto_decode_request(&f.hdr, f.payload, f.len, &req), 0);
				assert_int_equal(req.cmd, sample_reqs[got].cmd);
				got++;
			}
		}
		assert_int_equal(got, IDC_ARRAY_SIZE(sample_reqs));
		assert_int_equal(proto_reader_buffered(&r), 0);
		proto_reader_free(&r);
	}
}

static void test_reader_rejects(void **state)
{
	(void)state;
	struct proto_reader r;
	struct proto_frame f;
	/* Too long: refused as soon as the header is in, no payload needed. */
	uint32_t big[4] = {PROTO_MAX_REQUEST + 1, PROTO_CMD_GETPWNAM, 0, 0};
	proto_reader_init(&r, PROTO_MAX_REQUEST);
	assert_int_equal(proto_reader_feed(&r, big, 15), 0);
	assert_int_equal(proto_reader_next(&r, &f), 0);
	assert_int_equal(proto_reader_feed(&r, (uint8_t *)big + 15, 1), -EBADMSG);
	assert_int_equal(proto_reader_next(&r, &f), -EBADMSG);
	assert_int_equal(proto_reader_feed(&r, big, 4), -EBADMSG); /* sticky */
	proto_reader_free(&r);

	/* Too short a length; a bad second header right behind a good frame. */
	uint32_t two[8] = {16, PROTO_CMD_STATUS, 0, 0, 8, PROTO_CMD_STATUS, 0, 0};
	proto_reader_init(&r, PROTO_MAX_REQUEST);
	assert_int_equal(proto_reader_feed(&r, two, 16), 0);
	assert_int_equal(proto_reader_next(&r, &f), 1);
	assert_int_equal(f.hdr.command, PROTO_CMD_STATUS);
	assert_int_equal(f.len, 0);
	assert_int_equal(proto_reader_feed(&r, two + 4, 16), -EBADMSG);
	proto_reader_free(&r);

	/* reserved != 0 */
	uint32_t res[4] = {16, PROTO_CMD_STATUS, 0, 5};
	proto_reader_init(&r, PROTO_MAX_REQUEST);
	assert_int_equal(proto_reader_feed(&r, res, 16), -EBADMSG);
	proto_reader_free(&r);
}

/* ---- client ------------------------------------------------------------------------------ */

/* The peer's replies are queued in the socket before the client asks, which
 * is all a request/response client can observe. */
static void test_client_drain(void **state)
{
	(void)state;
	int sv[2];
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	fcntl(sv[0], F_SETFL, O_NONBLOCK);
	struct idc_buf b = IDC_BUF_INIT;
	size_t start;
	assert_int_equal(proto_reply_begin(&b, PROTO_CMD_HELLO, PROTO_ST_OK, &start), 0);
	assert_int_equal(proto_put_u32(&b, PROTO_VERSION), 0);
	assert_int_equal(proto_reply_end(&b, start), 0);
	build_passwd(&b, &alice);
	build_passwd(&b, &alice);
	assert_int_equal(write(sv[1], b.data, b.len), (ssize_t)b.len);

	struct proto_client c = {.fd = sv[0], .timeout_ms = 2000};
	uint8_t req[64], small[8], full[256];
	struct proto_req r = {.cmd = PROTO_CMD_GETPWNAM, .name = S("alice")};
	int len = proto_encode_request(req, sizeof(req), &r);
	struct proto_hdr h;
	size_t n;
	assert_int_equal(proto_client_call(&c, req, (size_t)len, &h, small, sizeof(small), &n),
			 -ERANGE);
	assert_true(n > sizeof(small));
	assert_true(c.greeted);
	assert_int_equal(c.pending, 0);
	assert_int_equal(proto_client_call(&c, req, (size_t)len, &h, full, sizeof(full), &n), 0);
	struct proto_passwd pw;
	assert_int_equal(proto_decode_passwd(full, n, &pw), 0);
	check_passwd(&pw, &alice);

	/* The peer is gone: EOF is an error and the client closes itself. */
	close(sv[1]);
	assert_true(proto_client_call(&c, req, (size_t)len, &h, full, sizeof(full), &n) < 0);
	assert_int_equal(c.fd, -1);
	assert_int_equal(proto_client_call(&c, req, (size_t)len, &h, full, sizeof(full), &n),
			 -ENOTCONN);
	idc_buf_free(&b);
}

/* Descriptors this process has open. */
static int open_fds(void)
{
	int n = 0;
	for (int fd = 0; fd < 1024; fd++)
		n += fcntl(fd, F_GETFD) >= 0;
	return n;
}

/* Send b as a reply, its first byte carrying nfds copies of fd. */
static void send_with_fds(int sock, const struct idc_buf *b, int fd, int nfds)
{
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(4 * sizeof(int))];
	} ctl;
	memset(&ctl, 0, sizeof(ctl));
	struct iovec iov = {b->data, b->len};
	struct msghdr mh = {.msg_iov = &iov,
			    .msg_iovlen = 1,
			    .msg_control = ctl.buf,
			    .msg_controllen = CMSG_SPACE((size_t)nfds * sizeof(int))};
	struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN((size_t)nfds * sizeof(int));
	for (int i = 0; i < nfds; i++)
		memcpy(CMSG_DATA(cm) + (size_t)i * sizeof(int), &fd, sizeof(int));
	assert_int_equal(sendmsg(sock, &mh, 0), (ssize_t)b->len);
}

static void mcmap_reply(struct idc_buf *b, bool hello, uint32_t n)
{
	size_t start;
	idc_buf_reset(b);
	if (hello) {
		assert_int_equal(proto_reply_begin(b, PROTO_CMD_HELLO, PROTO_ST_OK, &start), 0);
		assert_int_equal(proto_put_u32(b, PROTO_VERSION), 0);
		assert_int_equal(proto_reply_end(b, start), 0);
	}
	assert_int_equal(proto_reply_begin(b, PROTO_CMD_MCMAP, PROTO_ST_OK, &start), 0);
	assert_int_equal(proto_put_u32(b, n), 0);
	for (uint32_t k = 1; k <= n; k++)
		assert_int_equal(proto_put_u32(b, k), 0);
	assert_int_equal(proto_reply_end(b, start), 0);
}

/* MCMAP: the descriptors riding on the reply are received in order
 * (CLOEXEC); more than the caller takes are a protocol error with nothing
 * left open; a descriptor riding on a reply that takes none is dropped by
 * the kernel, not leaked. */
static void test_client_fd(void **state)
{
	(void)state;
	int sv[2], pp[2];
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	assert_int_equal(pipe(pp), 0);
	struct stat want, got;
	assert_int_equal(fstat(pp[0], &want), 0);
	uint8_t req[64], payload[64];
	struct proto_req r = {.cmd = PROTO_CMD_MCMAP, .id = 0};
	int len = proto_encode_request(req, sizeof(req), &r);
	assert_true(len > 0);
	struct idc_buf b = IDC_BUF_INIT;
	struct proto_hdr h;
	int fds[PROTO_FDS_MAX];
	uint32_t kinds[PROTO_FDS_MAX];
	size_t n = 99, nk = 0;

	/* HELLO's reply first, on its own; the fds with the MCMAP reply. */
	size_t start;
	assert_int_equal(proto_reply_begin(&b, PROTO_CMD_HELLO, PROTO_ST_OK, &start), 0);
	assert_int_equal(proto_put_u32(&b, PROTO_VERSION), 0);
	assert_int_equal(proto_reply_end(&b, start), 0);
	assert_int_equal(write(sv[1], b.data, b.len), (ssize_t)b.len);
	mcmap_reply(&b, false, 3);
	send_with_fds(sv[1], &b, pp[0], 3);
	struct proto_client c = {.fd = sv[0], .timeout_ms = 2000};
	fcntl(sv[0], F_SETFL, O_NONBLOCK);
	assert_int_equal(proto_client_request_fds(&c, req, (size_t)len, &h, fds, 3, &n), 0);
	assert_int_equal(h.status, PROTO_ST_OK);
	assert_int_equal(n, 3);
	for (size_t i = 0; i < n; i++) {
		assert_int_equal(fstat(fds[i], &got), 0);
		assert_int_equal(got.st_ino, want.st_ino);
		assert_true(fcntl(fds[i], F_GETFD) & FD_CLOEXEC);
		close(fds[i]);
	}
	size_t plen = c.pending;
	assert_int_equal(proto_client_read(&c, payload, plen), 0);
	assert_int_equal(proto_decode_mcmap(payload, plen, kinds, PROTO_FDS_MAX, &nk), 0);
	assert_int_equal(nk, 3);
	assert_int_equal(kinds[2], 3);
	assert_int_equal(proto_decode_mcmap(payload, plen, kinds, 2, &nk), -EBADMSG);
	assert_int_equal(proto_decode_mcmap(payload, plen - 1, kinds, 3, &nk), -EBADMSG);
	uint32_t none = 0;
	assert_int_equal(proto_decode_mcmap(&none, 4, kinds, 3, &nk), -EBADMSG);

	/* More descriptors than taken: refused, all closed, connection closed. */
	int before = open_fds();
	mcmap_reply(&b, false, 1);
	send_with_fds(sv[1], &b, pp[0], 2);
	assert_int_equal(proto_client_request_fds(&c, req, (size_t)len, &h, fds, 1, &n), -EBADMSG);
	assert_int_equal(n, 0);
	assert_int_equal(c.fd, -1);
	assert_int_equal(open_fds(), before - 1); /* the client's socket */
	close(sv[1]);

	/* A plain request: whatever rides on the reply is not installed. */
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	fcntl(sv[0], F_SETFL, O_NONBLOCK);
	mcmap_reply(&b, true, 1);
	send_with_fds(sv[1], &b, pp[0], 1);
	before = open_fds();
	c = (struct proto_client){.fd = sv[0], .timeout_ms = 2000};
	assert_int_equal(proto_client_request(&c, req, (size_t)len, &h), 0);
	assert_int_equal(open_fds(), before);
	proto_client_close(&c);
	close(sv[1]);
	close(pp[0]);
	close(pp[1]);
	idc_buf_free(&b);
}

static void test_client_connect_missing(void **state)
{
	(void)state;
	struct proto_client c;
	assert_int_equal(proto_client_connect(&c, "/nonexistent/idcache/nss.sock", 100), -ENOENT);
	assert_int_equal(c.fd, -1);
	char longpath[200];
	memset(longpath, 'a', sizeof(longpath) - 1);
	longpath[sizeof(longpath) - 1] = '\0';
	assert_int_equal(proto_client_connect(&c, longpath, 100), -ENAMETOOLONG);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_request_roundtrip),
	    cmocka_unit_test(test_request_truncation),
	    cmocka_unit_test(test_request_bad_fields),
	    cmocka_unit_test(test_header),
	    cmocka_unit_test(test_reply_passwd),
	    cmocka_unit_test(test_reply_group),
	    cmocka_unit_test(test_reply_gids_text_u32),
	    cmocka_unit_test(test_reply_subids),
	    cmocka_unit_test(test_admin_info),
	    cmocka_unit_test(test_reply_batches),
	    cmocka_unit_test(test_reply_too_big),
	    cmocka_unit_test(test_pack_passwd_sweep),
	    cmocka_unit_test(test_pack_group_sweep),
	    cmocka_unit_test(test_pack_in_place),
	    cmocka_unit_test(test_reader),
	    cmocka_unit_test(test_reader_rejects),
	    cmocka_unit_test(test_client_drain),
	    cmocka_unit_test(test_client_fd),
	    cmocka_unit_test(test_client_connect_missing),
	    cmocka_unit_test(test_reply_sshkeys),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
