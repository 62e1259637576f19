/*
 * Content synchronization's messages (syncmsg.c) and entryUUID records
 * (syncmap.c): values encoded by liblber's own ber_printf parse to what
 * was encoded; truncated, overlong, indefinite, trailing and mistyped
 * values are refused; the Sync Request is byte-exact.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "providers/ldap/lprov_int.h"

static const unsigned char uuid[LP_UUID_LEN] = {1, 2,  3,  4,  5,  6,  7,  8,
						9, 10, 11, 12, 13, 14, 15, 16};
static const char cookie[] = "rid=000,csn=20261202001549.902763Z#000000#000#000000";

/* What ber_printf(fmt, ...) encodes, into out (malloc'd). */
static size_t encode(unsigned char **out, const char *fmt, ...)
{
	BerElement *ber = ber_alloc_t(LBER_USE_DER);
	assert_non_null(ber);
	va_list ap;
	va_start(ap, fmt);
	/* one value per call: ber_printf takes no va_list */
	const char *f = fmt;
	int rc = 0;
	for (; *f && rc >= 0; f++) {
		switch (*f) {
		case 'e':
			rc = ber_printf(ber, "e", va_arg(ap, int));
			break;
		case 'b':
			rc = ber_printf(ber, "b", va_arg(ap, int));
			break;
		case 'i':
			rc = ber_printf(ber, "i", va_arg(ap, int));
			break;
		case 'o': {
			const char *p = va_arg(ap, const char *);
			size_t n = va_arg(ap, size_t);
			rc = ber_printf(ber, "o", p, (ber_len_t)n);
			break;
		}
		case 't':
			rc = ber_printf(ber, "t", (ber_tag_t)va_arg(ap, int));
			break;
		default: {
			char one[2] = {*f, 0};
			rc = ber_printf(ber, one);
		}
		}
	}
	va_end(ap);
	if (rc < 0)
		fail_msg("ber_printf failed at '%c' of %s", f[-1], fmt);
	struct berval *bv = NULL;
	assert_int_equal(ber_flatten(ber, &bv), 0);
	*out = malloc(bv->bv_len);
	memcpy(*out, bv->bv_val, bv->bv_len);
	size_t n = bv->bv_len;
	ber_bvfree(bv);
	ber_free(ber, 1);
	return n;
}

static void test_state(void **state)
{
	(void)state;
	unsigned char *v;
	struct lp_sync_msg m;
	size_t n = encode(&v, "{eoo}", LP_SYNC_MODIFY, (const char *)uuid, (size_t)16, cookie,
			  strlen(cookie));
	assert_int_equal(lp_sync_parse_state(v, n, &m), 0);
	assert_int_equal(m.kind, LP_SYNC_MSG_STATE);
	assert_int_equal(m.state, LP_SYNC_MODIFY);
	assert_memory_equal(m.uuid, uuid, 16);
	assert_true(m.has_cookie);
	assert_int_equal(m.cookie_len, strlen(cookie));
	assert_memory_equal(m.cookie, cookie, strlen(cookie));
	/* every truncation is refused, never read past */
	for (size_t k = 0; k < n; k++)
		assert_int_equal(lp_sync_parse_state(v, k, &m), -EPROTO);
	free(v);
	/* no cookie */
	n = encode(&v, "{eo}", LP_SYNC_DELETE, (const char *)uuid, (size_t)16);
	assert_int_equal(lp_sync_parse_state(v, n, &m), 0);
	assert_false(m.has_cookie);
	assert_int_equal(m.state, LP_SYNC_DELETE);
	free(v);
	/* a UUID of 15 bytes, a state beyond delete, an integer for the enum */
	n = encode(&v, "{eo}", LP_SYNC_ADD, (const char *)uuid, (size_t)15);
	assert_int_equal(lp_sync_parse_state(v, n, &m), -EPROTO);
	free(v);
	n = encode(&v, "{eo}", 4, (const char *)uuid, (size_t)16);
	assert_int_equal(lp_sync_parse_state(v, n, &m), -EPROTO);
	free(v);
	n = encode(&v, "{io}", 1, (const char *)uuid, (size_t)16);
	assert_int_equal(lp_sync_parse_state(v, n, &m), -EPROTO);
	free(v);
	/* something after the cookie */
	n = encode(&v, "{eoob}", 1, (const char *)uuid, (size_t)16, cookie, strlen(cookie), 1);
	assert_int_equal(lp_sync_parse_state(v, n, &m), -EPROTO);
	free(v);
}

static void test_lengths(void **state)
{
	(void)state;
	struct lp_sync_msg m;
	/* indefinite length, a length past the end, a 5-byte length, a
	 * multi-byte tag, a second element after the SEQUENCE */
	static const unsigned char indef[] = {0x30, 0x80, 0x0a, 0x01, 0x01, 0x00, 0x00};
	static const unsigned char past[] = {0x30, 0x84, 0x7f, 0xff, 0xff, 0xff, 0x0a, 0x01, 0x01};
	static const unsigned char five[] = {0x30, 0x85, 0, 0, 0, 0, 3, 0x0a, 0x01, 0x01};
	static const unsigned char mtag[] = {0x3f, 0x81, 0x01, 0x00};
	static const unsigned char two[] = {0x30, 0x00, 0x30, 0x00};
	assert_int_equal(lp_sync_parse_state(indef, sizeof(indef), &m), -EPROTO);
	assert_int_equal(lp_sync_parse_state(past, sizeof(past), &m), -EPROTO);
	assert_int_equal(lp_sync_parse_state(five, sizeof(five), &m), -EPROTO);
	assert_int_equal(lp_sync_parse_done(mtag, sizeof(mtag), &m), -EPROTO);
	assert_int_equal(lp_sync_parse_done(two, sizeof(two), &m), -EPROTO);
	assert_int_equal(lp_sync_parse_done(two, 2, &m), 0); /* empty: both defaults */
	assert_false(m.has_cookie);
	assert_false(m.deletes);
	assert_int_equal(lp_sync_parse_done(NULL, 0, &m), -EPROTO);
	assert_int_equal(lp_sync_parse_info(NULL, 0, &m), -EPROTO);
}

static void test_done(void **state)
{
	(void)state;
	unsigned char *v;
	struct lp_sync_msg m;
	size_t n = encode(&v, "{ob}", cookie, strlen(cookie), 1);
	assert_int_equal(lp_sync_parse_done(v, n, &m), 0);
	assert_true(m.has_cookie && m.deletes);
	free(v);
	n = encode(&v, "{b}", 0);
	assert_int_equal(lp_sync_parse_done(v, n, &m), 0);
	assert_false(m.has_cookie || m.deletes);
	free(v);
}

static void test_info(void **state)
{
	(void)state;
	unsigned char *v;
	struct lp_sync_msg m;
	/* newcookie [0] */
	size_t n = encode(&v, "to", 0x80, cookie, strlen(cookie));
	assert_int_equal(lp_sync_parse_info(v, n, &m), 0);
	assert_int_equal(m.kind, LP_SYNC_MSG_NEWCOOKIE);
	assert_int_equal(m.cookie_len, strlen(cookie));
	free(v);
	/* refreshDelete [1], empty: refreshDone defaults to TRUE */
	n = encode(&v, "t{}", 0xa1);
	assert_int_equal(lp_sync_parse_info(v, n, &m), 0);
	assert_int_equal(m.kind, LP_SYNC_MSG_REFRESH_DELETE);
	assert_true(m.done);
	free(v);
	/* refreshPresent [2] with a cookie and refreshDone FALSE */
	n = encode(&v, "t{ob}", 0xa2, cookie, strlen(cookie), 0);
	assert_int_equal(lp_sync_parse_info(v, n, &m), 0);
	assert_int_equal(m.kind, LP_SYNC_MSG_REFRESH_PRESENT);
	assert_false(m.done);
	assert_true(m.has_cookie);
	free(v);
	/* syncIdSet [3]: refreshDeletes TRUE, two UUIDs */
	static const unsigned char u2[16] = {0xff};
	n = encode(&v, "t{b[oo]}", 0xa3, 1, (const char *)uuid, (size_t)16, (const char *)u2,
		   (size_t)16);
	assert_int_equal(lp_sync_parse_info(v, n, &m), 0);
	assert_int_equal(m.kind, LP_SYNC_MSG_IDSET);
	assert_true(m.deletes);
	assert_int_equal(m.nuuids, 2);
	assert_memory_equal(m.uuids, uuid, 16);
	assert_memory_equal(m.uuids + 16, u2, 16);
	lp_sync_msg_free(&m);
	for (size_t k = 0; k < n; k++)
		assert_int_equal(lp_sync_parse_info(v, k, &m), -EPROTO);
	free(v);
	/* syncIdSet: a UUID of 17 bytes, and an empty set */
	static const unsigned char long_uuid[LP_UUID_LEN + 1] = {1};
	n = encode(&v, "t{[o]}", 0xa3, (const char *)long_uuid, sizeof(long_uuid));
	assert_int_equal(lp_sync_parse_info(v, n, &m), -EPROTO);
	free(v);
	n = encode(&v, "t{[]}", 0xa3);
	assert_int_equal(lp_sync_parse_info(v, n, &m), 0);
	assert_int_equal(m.nuuids, 0);
	assert_false(m.deletes);
	lp_sync_msg_free(&m);
	free(v);
	/* an unknown choice */
	n = encode(&v, "t{}", 0xa4);
	assert_int_equal(lp_sync_parse_info(v, n, &m), -EPROTO);
	free(v);
}

static void test_request(void **state)
{
	(void)state;
	struct idc_buf b = IDC_BUF_INIT;
	assert_int_equal(lp_sync_request(LP_SYNC_REFRESH_AND_PERSIST, NULL, 0, &b), 0);
	static const unsigned char plain[] = {0x30, 0x03, 0x0a, 0x01, 0x03};
	assert_int_equal(b.len, sizeof(plain));
	assert_memory_equal(b.data, plain, sizeof(plain));
	/* as liblber encodes it, cookies short and long */
	char big[300];
	memset(big, 'c', sizeof(big));
	const char *ck[] = {cookie, big};
	size_t ckn[] = {strlen(cookie), sizeof(big)};
	for (size_t i = 0; i < 2; i++) {
		unsigned char *v;
		size_t n = encode(&v, "{eo}", LP_SYNC_REFRESH_ONLY, ck[i], ckn[i]);
		assert_int_equal(lp_sync_request(LP_SYNC_REFRESH_ONLY, ck[i], ckn[i], &b), 0);
		assert_int_equal(b.len, n);
		assert_memory_equal(b.data, v, n);
		free(v);
	}
	char *huge = calloc(1, LP_COOKIE_MAX + 1);
	assert_int_equal(lp_sync_request(3, huge, LP_COOKIE_MAX + 1, &b), -E2BIG);
	free(huge);
	idc_buf_free(&b);
}

static void test_records(void **state)
{
	(void)state;
	struct lp_smap m = {.seed = 42};
	unsigned char u[16];
	for (int i = 0; i < 1000; i++) {
		memset(u, 0, 16);
		memcpy(u, &i, sizeof(i));
		char ndn[64];
		snprintf(ndn, sizeof(ndn), "uid=u%d,dc=x", i);
		assert_int_equal(lp_smap_set(&m, u, ndn + 4, NULL, ndn, 1), 0);
	}
	assert_int_equal(m.n, 1000);
	int k = 500;
	memset(u, 0, 16);
	memcpy(u, &k, sizeof(k));
	struct lp_sent *e = lp_smap_uuid(&m, u);
	assert_non_null(e);
	assert_ptr_equal(lp_smap_ndn(&m, "uid=u500,dc=x"), e);
	/* renamed: the old DN no longer finds it */
	assert_int_equal(lp_smap_set(&m, u, NULL, "g500", "cn=g500,dc=x", 2), 0);
	assert_int_equal(m.n, 1000);
	assert_null(lp_smap_ndn(&m, "uid=u500,dc=x"));
	e = lp_smap_ndn(&m, "cn=g500,dc=x");
	assert_non_null(e);
	assert_null(e->uname);
	assert_string_equal(e->gname, "g500");
	/* round trip through a record */
	char key[40];
	struct idc_buf v = IDC_BUF_INIT;
	lp_smap_key(e->uuid, key);
	assert_int_equal(lp_smap_value(e, &v), 0);
	struct lp_smap m2 = {0};
	assert_int_equal(lp_smap_load(&m2, key, v.data), 0);
	e = lp_smap_uuid(&m2, u);
	assert_non_null(e);
	assert_string_equal(e->gname, "g500");
	assert_string_equal(e->ndn, "cn=g500,dc=x");
	lp_smap_del(&m, u);
	assert_null(lp_smap_uuid(&m, u));
	assert_null(lp_smap_ndn(&m, "cn=g500,dc=x"));
	assert_int_equal(m.n, 999);
	/* records that are not: bad keys, two fields, no names, a bad name */
	const char *bad[][2] = {{"e.00", "a\n\nuid=a"},
				{"x.000102030405060708090a0b0c0d0e0f", "a\n\nuid=a"},
				{"e.0001020304050607080g0a0b0c0d0e0f", "a\n\nuid=a"},
				{"e.000102030405060708090a0b0c0d0e0f", "a\nuid=a"},
				{"e.000102030405060708090a0b0c0d0e0f", "\n\nuid=a"},
				{"e.000102030405060708090a0b0c0d0e0f", "a:b\n\nuid=a"},
				{"e.000102030405060708090a0b0c0d0e0f", "a\n\n"}};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(lp_smap_load(&m2, bad[i][0], bad[i][1]), -EINVAL);
	idc_buf_free(&v);
	lp_smap_free(&m);
	lp_smap_free(&m2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_state),   cmocka_unit_test(test_lengths),
	    cmocka_unit_test(test_done),    cmocka_unit_test(test_info),
	    cmocka_unit_test(test_request), cmocka_unit_test(test_records),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
