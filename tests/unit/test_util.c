/* Unit tests of util: error text, diagnostics, buffers, arena, hashing, SSH
 * public key lines. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "util/util.h"

static void test_strerror(void **state)
{
	(void)state;
	assert_string_equal(idc_strerror(0), "success");
	assert_string_equal(idc_strerror(-ENOENT), strerror(ENOENT));
	assert_string_equal(idc_strerror(IDC_ENOPARENT), "parent entry does not exist");
	assert_string_equal(idc_strerror(IDC_EVALEXISTS), "attribute value already exists");
	for (int rc = IDC_ERR_FIRST + 1; rc <= IDC_ERR_LAST; rc++)
		assert_non_null(idc_strerror(rc));
	assert_string_equal(idc_strerror(-999999), "unknown error");
}

static void test_diag(void **state)
{
	(void)state;
	struct idc_diag d = {""};
	assert_int_equal(idc_diag_set(&d, -EINVAL, "bad %s", "thing"), -EINVAL);
	assert_string_equal(d.msg, "bad thing");
	idc_diag_prefix(&d, "file:%d: ", 12);
	assert_string_equal(d.msg, "file:12: bad thing");
	assert_int_equal(idc_diag_set(NULL, -EIO, "ignored"), -EIO);
	idc_diag_prefix(NULL, "x");
	/* A prefix onto a full message drops the message's tail, not the
	 * terminator. */
	char big[600];
	memset(big, 'a', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	idc_diag_set(&d, -EINVAL, "%s", big);
	idc_diag_prefix(&d, "%s", "prefix: ");
	assert_int_equal(strlen(d.msg), sizeof(d.msg) - 1);
	assert_memory_equal(d.msg, "prefix: aaa", 11);
}

static void test_buf(void **state)
{
	(void)state;
	struct idc_buf b = IDC_BUF_INIT;
	for (int i = 0; i < 10000; i++)
		assert_int_equal(idc_buf_putc(&b, (char)('a' + i % 26)), 0);
	assert_int_equal(b.len, 10000);
	assert_int_equal(b.data[b.len], '\0');
	idc_buf_reset(&b);
	assert_int_equal(idc_buf_printf(&b, "%d-%s", 42, "x"), 0);
	assert_string_equal(b.data, "42-x");
	assert_int_equal(idc_buf_append(&b, "\0z", 2), 0);
	assert_int_equal(b.len, 6);
	assert_int_equal(idc_buf_reserve(&b, SIZE_MAX), -ENOMEM);
	idc_buf_free(&b);
	assert_null(b.data);
}

static void test_arena(void **state)
{
	(void)state;
	struct idc_arena a = IDC_ARENA_INIT;
	char *s = idc_arena_strndup(&a, "hello", 3);
	assert_string_equal(s, "hel");
	for (int i = 0; i < 1000; i++) {
		uint64_t *p = idc_arena_alloc(&a, 100);
		assert_non_null(p);
		assert_int_equal((uintptr_t)p % _Alignof(max_align_t), 0);
		memset(p, 0xab, 100);
	}
	/* total counts every chunk: at least what was asked for */
	assert_true(a.total >= 1000 * 100 + 3);
	size_t before = a.total;
	void *big = idc_arena_alloc(&a, 1 << 20);
	assert_non_null(big);
	memset(big, 1, 1 << 20);
	assert_true(a.total >= before + (1 << 20));
	idc_arena_reset(&a);
	assert_true(a.total > 0 && a.total < before);
	assert_non_null(idc_arena_alloc(&a, 10));
	idc_arena_free(&a);
	assert_int_equal(a.total, 0);
	assert_null(idc_arena_alloc(&a, SIZE_MAX));
	idc_arena_free(&a);
}

static void test_hash_and_case(void **state)
{
	(void)state;
	assert_int_equal(idc_hash64("abc", 3, 1), idc_hash64("abc", 3, 1));
	assert_int_not_equal(idc_hash64("abc", 3, 1), idc_hash64("abc", 3, 2));
	assert_int_not_equal(idc_hash64("abc", 3, 1), idc_hash64("abd", 3, 1));
	assert_true(idc_memcaseeq("UiD", 3, "uid", 3));
	assert_false(idc_memcaseeq("uid", 3, "uids", 4));
	assert_false(idc_memcaseeq("uid", 3, "uis", 3));
	assert_true(idc_now_ns() > 0);
}

/* ---- SSH public key lines ---------------------------------------------------- */

#define ED25519 "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAICStQcRIvPHZ+wS93xC07bs2rt8U4c+CoK7FmO0VgVue"
#define ECDSA                                                                                      \
	"ecdsa-sha2-nistp256 "                                                                     \
	"AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBIzobWjZnBQh2j+Tx69ZqJRdX3rzXQvtpkCI" \
	"2x3jVvQ3JakQvL2lMWl0f/bifILxjlEpwC9WnhrQmYe0Zfelbzc="

static const char *key_why(const char *line)
{
	struct idc_ssh_key k;
	int rc = idc_ssh_key_check(line, strlen(line), &k);
	assert_true((rc == 0) == (k.why == NULL));
	return k.why;
}

static void test_ssh_key_valid(void **state)
{
	(void)state;
	static const char *const good[] = {
	    ED25519,
	    ED25519 " alice@example.com",
	    ED25519 " a comment\twith  blanks",
	    ECDSA " ec key",
	    "no-pty,from=\"10.0.0.0/8,192.168.1.1\" " ED25519,
	    "command=\"echo \\\"hi there\\\"\",no-agent-forwarding " ED25519 " c",
	};
	for (size_t i = 0; i < IDC_ARRAY_SIZE(good); i++) {
		struct idc_ssh_key k;
		assert_int_equal(idc_ssh_key_check(good[i], strlen(good[i]), &k), 0);
		assert_int_equal(k.start, 0);
		assert_int_equal(k.len, strlen(good[i]));
	}
	/* Blanks and line breaks around the line are not part of it. */
	const char *padded = " \t" ED25519 " c\r\n";
	struct idc_ssh_key k;
	assert_int_equal(idc_ssh_key_check(padded, strlen(padded), &k), 0);
	assert_int_equal(k.start, 2);
	assert_int_equal(k.len, strlen(ED25519 " c"));
}

static void test_ssh_key_invalid(void **state)
{
	(void)state;
	static const char *const bad[][2] = {
	    {"", "empty"},
	    {" \n ", "empty"},
	    {"ssh-ed25519", "no key data"},
	    {"ssh-ed25519 ", "no key data"},
	    {"AAAAC3NzaC1lZDI1NTE5AAAAICStQcRIvPHZ", "no known key type"},
	    {"ssh-foo AAAAC3NzaC1lZDI1NTE5AAAAICStQcRIvPHZ", "no known key type"},
	    {"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5!AAAICStQcRIvPHZ", "not base64"},
	    {"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAICStQcRIvPHZ+", "not base64"}, /* length */
	    {"ssh-ed25519 AAAA=AAA", "not base64"},
	    /* base64 of an ECDSA key under the ed25519 type */
	    {"ssh-ed25519 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABB", "not a key of"},
	    {"ssh-ed25519 QUJD", "not a key of"}, /* decodes to 3 bytes */
	    {ED25519 "\n" ED25519, "line break"},
	    {ED25519 " a\x1b[2Jb", "control character"},
	    {"from=\"10.0.0.1 " ED25519, "quotes are not closed"},
	    {"no-pty ssh-foo AAAA", "no known key type"},
	};
	for (size_t i = 0; i < IDC_ARRAY_SIZE(bad); i++) {
		const char *why = key_why(bad[i][0]);
		assert_non_null(why);
		if (!strstr(why, bad[i][1]))
			fail_msg("'%s': '%s', want '%s'", bad[i][0], why, bad[i][1]);
	}
	char nul[] = ED25519 " x\0y";
	struct idc_ssh_key k;
	assert_int_equal(idc_ssh_key_check(nul, sizeof(nul) - 1, &k), -EINVAL);
	assert_non_null(strstr(k.why, "NUL"));
	/* Longer than IDC_SSH_KEY_MAX: refused without reading it as a key. */
	size_t n = IDC_SSH_KEY_MAX + 2;
	char *big = malloc(n + 1);
	assert_non_null(big);
	memset(big, 'A', n);
	memcpy(big, "ssh-rsa ", 8);
	big[n] = '\0';
	assert_non_null(strstr(key_why(big), "longer than"));
	free(big);
}

/* idc_oa_grow keeps every occupied slot, whole, findable by linear probing
 * from its hash in the larger table. */
static void test_oa_grow(void **state)
{
	(void)state;
	struct slot {
		uint64_t h;
		uint32_t v;
	};
	void *t = NULL;
	size_t mask = 0;
	assert_int_equal(idc_oa_grow(&t, &mask, sizeof(struct slot), 4), 0);
	assert_int_equal(mask, 3);
	struct slot *s = t;
	s[1] = (struct slot){5, 50}; /* 5 & 3 == 1 */
	s[2] = (struct slot){9, 90}; /* 9 & 3 == 1: probed on */
	assert_int_equal(idc_oa_grow(&t, &mask, sizeof(struct slot), 4), 0);
	assert_int_equal(mask, 7);
	s = t;
	size_t held = 0;
	for (size_t i = 0; i <= mask; i++)
		held += s[i].h != 0;
	assert_int_equal(held, 2);
	assert_int_equal(s[5].h, 5); /* 5 & 7 */
	assert_int_equal(s[5].v, 50);
	assert_int_equal(s[1].h, 9); /* 9 & 7 */
	assert_int_equal(s[1].v, 90);
	free(t);
}

struct oat_slot {
	uint64_t h;
	uint32_t v;
};

/* Hashes that share their low bits (long probe runs, the old and the new
 * table's homes apart), never 0. */
static uint64_t oat_key(uint32_t i)
{
	return ((uint64_t)i << 40) | ((uint64_t)i * 0x9e3779b97f4a7c15ull >> 40) | 1;
}

/* Every key inserted so far is found, with its value, and no other. */
static void oat_check(const struct idc_oat *t, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		const struct oat_slot *s = idc_oat_find(t, sizeof(*s), oat_key(i));
		if (!s || s->h != oat_key(i) || s->v != i)
			fail_msg("key %u of %u not found whole (old table %s, %zu of %zu copied)",
				 i, n, t->old ? "held" : "gone", t->moved,
				 t->old ? t->old_mask + 1 : 0);
	}
	assert_null(idc_oat_find(t, sizeof(struct oat_slot), oat_key(n)));
}

/* idc_oat grows a step at a time: every key stays findable at every
 * insertion, in the middle of a copy too; each growth's copy ends before
 * the next growth; the entries are counted once; in-place changes of a
 * found entry are kept through the copy. */
static void test_oat_grow(void **state)
{
	(void)state;
	enum { N = 40000 };
	struct idc_oat t = {0};
	assert_null(idc_oat_find(&t, sizeof(struct oat_slot), 5));
	assert_int_equal(idc_oat_bytes(&t, sizeof(struct oat_slot)), 0);
	size_t growths = 0, mid_copy = 0, last_mask = 0;
	for (uint32_t i = 0; i < N; i++) {
		void *slot;
		if (t.slot && (t.used + 1) * 2 > t.mask + 1)
			assert_null(t.old); /* the copy of the growth before is over */
		assert_int_equal(idc_oat_claim(&t, sizeof(struct oat_slot), oat_key(i), 16, &slot),
				 0);
		*(struct oat_slot *)slot = (struct oat_slot){oat_key(i), i};
		if (t.mask != last_mask) {
			growths++;
			last_mask = t.mask;
		}
		mid_copy += t.old != NULL;
		assert_int_equal(t.used, i + 1);
		assert_true(t.used * 2 <= t.mask + 1);
		if (i < 2000 || i % 97 == 0 || t.old)
			if (i < 2000 || i % 13 == 0)
				oat_check(&t, i + 1);
	}
	assert_true(growths >= 10);
	assert_true(mid_copy > 0);
	/* a value changed where it is found now survives the rest of a copy */
	while (!t.old) {
		void *slot;
		uint32_t i = (uint32_t)t.used;
		assert_int_equal(idc_oat_claim(&t, sizeof(struct oat_slot), oat_key(i), 16, &slot),
				 0);
		*(struct oat_slot *)slot = (struct oat_slot){oat_key(i), i};
	}
	uint32_t n = (uint32_t)t.used, changed = n - 2; /* in the old table */
	struct oat_slot *s = idc_oat_find(&t, sizeof(*s), oat_key(changed));
	s->v = 0xffffffffu;
	while (t.old) {
		void *slot;
		assert_int_equal(idc_oat_claim(&t, sizeof(struct oat_slot), oat_key(n), 16, &slot),
				 0);
		*(struct oat_slot *)slot = (struct oat_slot){oat_key(n), n};
		n++;
	}
	s = idc_oat_find(&t, sizeof(*s), oat_key(changed));
	assert_non_null(s);
	assert_int_equal(s->v, 0xffffffffu);
	/* once copied, each entry is held once in the one table left */
	size_t held = 0;
	for (size_t i = 0; i <= t.mask; i++)
		held += ((const struct oat_slot *)(t.slot + i * sizeof(struct oat_slot)))->h != 0;
	assert_int_equal(held, t.used);
	assert_int_equal(idc_oat_bytes(&t, sizeof(struct oat_slot)),
			 (t.mask + 1) * sizeof(struct oat_slot));
	idc_oat_free(&t);
	assert_null(t.slot);
	assert_null(t.old);
	assert_int_equal(t.used, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_strerror),
	    cmocka_unit_test(test_diag),
	    cmocka_unit_test(test_buf),
	    cmocka_unit_test(test_arena),
	    cmocka_unit_test(test_hash_and_case),
	    cmocka_unit_test(test_oa_grow),
	    cmocka_unit_test(test_oat_grow),
	    cmocka_unit_test(test_ssh_key_valid),
	    cmocka_unit_test(test_ssh_key_invalid),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
