/*
 * nscd unit tests: the request decoder on every prefix and malformed
 * header, key parsing, every reply's exact layout (field order and
 * lengths as glibc's and musl's clients read them), round trips through
 * the reply decoders, truncations and short buffers.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "nscd/nscd.h"

static int32_t field(const uint8_t *p, size_t i)
{
	int32_t v;
	memcpy(&v, p + 4 * i, 4);
	return v;
}

static size_t put_hdr(uint8_t *p, int32_t version, int32_t type, int32_t len)
{
	memcpy(p, &version, 4);
	memcpy(p + 4, &type, 4);
	memcpy(p + 8, &len, 4);
	return NSCD_REQ_HDR;
}

/* ---- requests --------------------------------------------------------------- */

static void test_request_round_trip(void **state)
{
	(void)state;
	uint8_t buf[NSCD_REQ_HDR + NSCD_KEY_MAX];
	int n = nscd_encode_request(buf, sizeof(buf), NSCD_GETPWBYNAME, "alice");
	assert_int_equal(n, NSCD_REQ_HDR + 6);
	assert_int_equal(field(buf, 0), 2);
	assert_int_equal(field(buf, 1), 0);
	assert_int_equal(field(buf, 2), 6); /* the NUL counted */
	struct nscd_req req;
	for (int i = 0; i < n; i++) /* every prefix: more bytes needed */
		assert_int_equal(nscd_decode_request(buf, (size_t)i, &req), -EAGAIN);
	assert_int_equal(nscd_decode_request(buf, (size_t)n, &req), 0);
	assert_int_equal(req.type, NSCD_GETPWBYNAME);
	assert_int_equal(req.key_len, 6);
	assert_string_equal(nscd_key_name(&req), "alice");
	/* trailing bytes are not its business */
	assert_int_equal(nscd_decode_request(buf, sizeof(buf), &req), 0);
	assert_int_equal(req.key_len, 6);
}

static void test_request_rejects(void **state)
{
	(void)state;
	uint8_t buf[NSCD_REQ_HDR + NSCD_KEY_MAX + 8] = {0};
	struct nscd_req req;
	put_hdr(buf, 1, 0, 2); /* another version: told at once, from 4 bytes */
	assert_int_equal(nscd_decode_request(buf, 4, &req), -EBADMSG);
	put_hdr(buf, 2, -1, 2);
	assert_int_equal(nscd_decode_request(buf, NSCD_REQ_HDR, &req), -EBADMSG);
	put_hdr(buf, 2, NSCD_TYPE_COUNT, 2);
	assert_int_equal(nscd_decode_request(buf, NSCD_REQ_HDR, &req), -EBADMSG);
	put_hdr(buf, 2, 0, -1);
	assert_int_equal(nscd_decode_request(buf, NSCD_REQ_HDR, &req), -EBADMSG);
	put_hdr(buf, 2, 0, NSCD_KEY_MAX + 1);
	assert_int_equal(nscd_decode_request(buf, sizeof(buf), &req), -EBADMSG);
	put_hdr(buf, 2, 0, INT32_MAX);
	assert_int_equal(nscd_decode_request(buf, sizeof(buf), &req), -EBADMSG);
	put_hdr(buf, 2, 0, NSCD_KEY_MAX); /* the largest key glibc sends */
	assert_int_equal(nscd_decode_request(buf, NSCD_REQ_HDR + NSCD_KEY_MAX - 1, &req), -EAGAIN);
	assert_int_equal(nscd_decode_request(buf, NSCD_REQ_HDR + NSCD_KEY_MAX, &req), 0);
	put_hdr(buf, 2, NSCD_SHUTDOWN, 0); /* no key at all */
	assert_int_equal(nscd_decode_request(buf, NSCD_REQ_HDR, &req), 0);
	assert_null(nscd_key_name(&req));
}

static struct nscd_req key_req(const char *key, uint32_t len)
{
	return (struct nscd_req){NSCD_GETPWBYUID, key, len};
}

static void test_keys(void **state)
{
	(void)state;
	struct nscd_req r = key_req("ab\0c", 5);
	assert_null(nscd_key_name(&r)); /* a NUL inside */
	r = key_req("abc", 3);
	assert_null(nscd_key_name(&r)); /* not terminated */
	r = key_req("abc", 4);
	assert_string_equal(nscd_key_name(&r), "abc");
	uint32_t id = 7;
	const struct {
		const char *s;
		int rc;
		uint32_t id;
	} ids[] = {
	    {"0", 0, 0},
	    {"1000", 0, 1000},
	    {"4294967295", 0, 4294967295u},
	    {"4294967296", -EBADMSG, 0},
	    {"99999999999999999999999", -EBADMSG, 0},
	    {"-1", -EBADMSG, 0},
	    {"", -EBADMSG, 0},
	    {"12a", -EBADMSG, 0},
	    {" 12", -EBADMSG, 0},
	};
	for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) {
		r = key_req(ids[i].s, (uint32_t)strlen(ids[i].s) + 1);
		assert_int_equal(nscd_key_id(&r, &id), ids[i].rc);
		if (ids[i].rc == 0)
			assert_int_equal(id, ids[i].id);
	}
	assert_true(nscd_type_is_lookup(NSCD_INITGROUPS));
	assert_false(nscd_type_is_lookup(NSCD_GETFDPW));
	assert_false(nscd_type_is_lookup(NSCD_GETAI));
}

/* ---- replies ------------------------------------------------------------------ */

static const struct nscd_passwd alice = {"alice",   "x",           1000,     100,
					 "Alice A", "/home/alice", "/bin/sh"};

static void test_passwd_layout(void **state)
{
	(void)state;
	uint8_t buf[256];
	int n = nscd_encode_passwd(buf, sizeof(buf), &alice);
	assert_int_equal(n, (int)nscd_passwd_size(&alice));
	/* pw_response_header: version, found, name_len, passwd_len, uid,
	 * gid, gecos_len, dir_len, shell_len */
	const int32_t want[] = {2, 1, 6, 2, 1000, 100, 8, 12, 8};
	for (size_t i = 0; i < 9; i++)
		assert_int_equal(field(buf, i), want[i]);
	assert_memory_equal(buf + 36, "alice\0x\0Alice A\0/home/alice\0/bin/sh\0", 36);
	assert_int_equal(n, 36 + 36);
	struct nscd_passwd_view v;
	assert_int_equal(nscd_decode_passwd(buf, (size_t)n, &v), n);
	assert_int_equal(v.found, 1);
	assert_string_equal(v.pw.dir, "/home/alice");
	assert_int_equal(v.pw.uid, 1000);
	for (int i = 0; i < n; i++) {
		assert_int_equal(nscd_decode_passwd(buf, (size_t)i, &v), -EAGAIN);
		assert_int_equal(nscd_encode_passwd(buf + 128, (size_t)i, &alice), -EMSGSIZE);
	}
}

static void test_passwd_decode_rejects(void **state)
{
	(void)state;
	uint8_t buf[256];
	int n = nscd_encode_passwd(buf, sizeof(buf), &alice);
	struct nscd_passwd_view v;
	uint8_t bad[256];
	const struct {
		size_t field;
		int32_t v;
	} cases[] = {{0, 1}, {1, 2}, {1, -2}, {2, 0}, {2, -1}, {2, 5}, {2, 7}, {8, 1000}};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		memcpy(bad, buf, (size_t)n);
		memcpy(bad + 4 * cases[i].field, &cases[i].v, 4);
		int rc = nscd_decode_passwd(bad, (size_t)n, &v);
		assert_true(rc == -EBADMSG || rc == -EAGAIN);
	}
	uint8_t notfound[NSCD_PW_HDR];
	assert_int_equal(nscd_encode_status(notfound, sizeof(notfound), NSCD_GETPWBYUID, 0),
			 NSCD_PW_HDR);
	assert_int_equal(nscd_decode_passwd(notfound, sizeof(notfound), &v), NSCD_PW_HDR);
	assert_int_equal(v.found, 0);
}

static void test_group_layout(void **state)
{
	(void)state;
	const char *mem[] = {"alice", "bob"};
	struct nscd_group g = {"staff", "x", 50, mem, 2};
	uint8_t buf[256];
	int n = nscd_encode_group(buf, sizeof(buf), &g);
	assert_int_equal(n, (int)nscd_group_size(&g));
	/* gr_response_header: version, found, name_len, passwd_len, gid,
	 * mem_cnt; then each member's length, name, passwd, members */
	const int32_t want[] = {2, 1, 6, 2, 50, 2, 6, 4};
	for (size_t i = 0; i < 8; i++)
		assert_int_equal(field(buf, i), want[i]);
	assert_memory_equal(buf + 32, "staff\0x\0alice\0bob\0", 18);
	struct nscd_group_view v;
	assert_int_equal(nscd_decode_group(buf, (size_t)n, &v), n);
	assert_int_equal(v.nmem, 2);
	assert_string_equal(nscd_group_member(&v, 1), "bob");
	for (int i = 0; i < n; i++)
		assert_int_equal(nscd_decode_group(buf, (size_t)i, &v), -EAGAIN);
	int32_t huge = INT32_MAX;
	memcpy(buf + 20, &huge, 4); /* mem_cnt beyond what came */
	assert_int_equal(nscd_decode_group(buf, (size_t)n, &v), -EAGAIN);
	huge = -1;
	memcpy(buf + 20, &huge, 4);
	assert_int_equal(nscd_decode_group(buf, (size_t)n, &v), -EBADMSG);
	struct nscd_group empty = {"none", "", 7, NULL, 0};
	n = nscd_encode_group(buf, sizeof(buf), &empty);
	assert_int_equal(n, 24 + 5 + 1);
	assert_int_equal(nscd_decode_group(buf, (size_t)n, &v), n);
	assert_string_equal(v.passwd, "");
}

static void test_initgroups_layout(void **state)
{
	(void)state;
	const uint32_t gids[] = {10, 20, 4294967294u};
	uint8_t buf[64];
	int n = nscd_encode_initgroups(buf, sizeof(buf), gids, 3);
	assert_int_equal(n, 12 + 12);
	assert_int_equal(field(buf, 0), 2);
	assert_int_equal(field(buf, 1), 1);
	assert_int_equal(field(buf, 2), 3);
	struct nscd_initgroups_view v;
	assert_int_equal(nscd_decode_initgroups(buf, (size_t)n, &v), n);
	assert_int_equal(nscd_gid(&v, 2), 4294967294u);
	for (int i = 0; i < n; i++)
		assert_int_equal(nscd_decode_initgroups(buf, (size_t)i, &v), -EAGAIN);
	assert_int_equal(nscd_encode_initgroups(buf, 23, gids, 3), -EMSGSIZE);
}

static void test_status_headers(void **state)
{
	(void)state;
	const struct {
		int32_t type;
		size_t size;
	} want[] = {
	    {NSCD_GETPWBYNAME, 36},   {NSCD_GETGRBYGID, 24},      {NSCD_INITGROUPS, 12},
	    {NSCD_GETHOSTBYNAME, 32}, {NSCD_GETHOSTBYADDRv6, 32}, {NSCD_GETAI, 24},
	    {NSCD_GETSERVBYPORT, 24}, {NSCD_GETNETGRENT, 16},     {NSCD_INNETGR, 12},
	    {NSCD_SHUTDOWN, 0},       {NSCD_GETSTAT, 0},          {NSCD_INVALIDATE, 0},
	    {NSCD_GETFDPW, 0},        {NSCD_GETFDHST, 0},
	};
	uint8_t buf[64];
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		assert_int_equal(nscd_status_size(want[i].type), want[i].size);
		memset(buf, 0xee, sizeof(buf));
		int n = nscd_encode_status(buf, sizeof(buf), want[i].type, -1);
		assert_int_equal(n, (int)want[i].size);
		if (!n)
			continue;
		assert_int_equal(field(buf, 0), 2);
		assert_int_equal(field(buf, 1), -1);
		for (size_t k = 2; k < want[i].size / 4; k++)
			assert_int_equal(field(buf, k), 0);
	}
	assert_int_equal(nscd_encode_status(buf, 35, NSCD_GETPWBYNAME, 0), -EMSGSIZE);
}

static void test_fd_reply(void **state)
{
	(void)state;
	uint8_t buf[32];
	assert_int_equal(nscd_encode_invalidate(buf, sizeof(buf), 22), 4);
	assert_int_equal(field(buf, 0), 22);
	assert_int_equal(nscd_encode_invalidate(buf, 3, 0), -EMSGSIZE);
	int n = nscd_encode_fd_reply(buf, sizeof(buf), "passwd", 7, 123456789u);
	assert_int_equal(n, 7 + 8);
	assert_memory_equal(buf, "passwd", 7);
	uint64_t size;
	memcpy(&size, buf + 7, 8);
	assert_int_equal(size, 123456789u);
	assert_int_equal(nscd_encode_fd_reply(buf, 14, "passwd", 7, 1), -EMSGSIZE);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_request_round_trip),
	    cmocka_unit_test(test_request_rejects),
	    cmocka_unit_test(test_keys),
	    cmocka_unit_test(test_passwd_layout),
	    cmocka_unit_test(test_passwd_decode_rejects),
	    cmocka_unit_test(test_group_layout),
	    cmocka_unit_test(test_initgroups_layout),
	    cmocka_unit_test(test_status_headers),
	    cmocka_unit_test(test_fd_reply),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
