/*
 * subid unit tests: the allocation formula (subid/subid.h) — collision-free
 * over every covered uid, inside its block, never reaching (uid_t)-1, its
 * inverse, the boundaries of the default and of configurations that only
 * just fit — the range rule, and the range set (subid_set) against a
 * plain list.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "subid/subid.h"

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

/* Every covered uid, in order: each range starts exactly where the previous
 * one ended (so none overlaps another), the first at base, the last ends at
 * the block's end, below 2^32 - 1; the inverse maps each range's first,
 * middle and last id back to its uid. A walk, not a pairwise check: ranges
 * in increasing order that touch end to end cannot overlap. */
static void check_whole(const struct subid_alloc *a)
{
	char why[200];
	assert_int_equal(subid_alloc_check(a, why, sizeof(why)), 0);
	uint32_t first, last;
	subid_alloc_block(a, &first, &last);
	assert_int_equal(first, a->base);
	uint64_t next = a->base;
	for (uint64_t uid = a->uid_min; uid <= a->uid_max; uid++) {
		uint32_t start, count, back;
		assert_true(subid_alloc_range(a, (uint32_t)uid, &start, &count));
		assert_int_equal(start, next);
		assert_int_equal(count, a->size);
		assert_true(subid_range_ok(start, count));
		uint32_t probes[] = {start, start + count / 2, start + count - 1};
		for (size_t k = 0; k < N_OF(probes); k++) {
			assert_true(subid_alloc_owner(a, probes[k], &back));
			assert_int_equal(back, uid);
		}
		next = (uint64_t)start + count;
	}
	assert_int_equal(next - 1, last);
	assert_true(next <= UINT32_MAX);
	uint32_t uid;
	if (a->base > 0)
		assert_false(subid_alloc_owner(a, a->base - 1, &uid));
	if (last < UINT32_MAX)
		assert_false(subid_alloc_owner(a, last + 1, &uid));
}

static void test_default_whole_range(void **state)
{
	(void)state;
	struct subid_alloc a;
	subid_alloc_default(&a);
	assert_int_equal(a.base, 2147483648u);
	assert_int_equal(a.size, 65536u);
	assert_int_equal(a.uid_min, 1000u);
	/* (2^32 - 1 - 2^31) / 65536 = 32767 ranges: uids 1000..33766. */
	assert_int_equal(a.uid_max, 33766u);
	check_whole(&a);
	uint32_t start, count;
	assert_false(subid_alloc_range(&a, 999, &start, &count));
	assert_false(subid_alloc_range(&a, 33767, &start, &count));
	assert_false(subid_alloc_range(&a, 0, &start, &count));
	assert_false(subid_alloc_range(&a, UINT32_MAX, &start, &count));
	assert_true(subid_alloc_range(&a, 33766, &start, &count));
	assert_int_equal(start, 4294901760u - 65536u);
}

/* Configurations at the edges: the largest block that fits, size 1 up to
 * 2^32 - 2, base 0. */
static void test_edges(void **state)
{
	(void)state;
	struct subid_alloc cases[] = {
	    {.base = 0, .size = 1, .uid_min = 0, .uid_max = 200000},
	    {.base = 4294967294u, .size = 1, .uid_min = 5, .uid_max = 5},
	    {.base = 1, .size = 4294967294u, .uid_min = 7, .uid_max = 7},
	    {.base = 100000, .size = 65536, .uid_min = 1000, .uid_max = 1000 + 65533},
	};
	for (size_t i = 0; i < N_OF(cases); i++) {
		bool fits;
		uint32_t max =
		    subid_alloc_max_uid(cases[i].base, cases[i].size, cases[i].uid_min, &fits);
		assert_true(fits);
		if (i > 0)
			assert_int_equal(max, cases[i].uid_max); /* exactly full */
		check_whole(&cases[i]);
	}
}

static void test_refused(void **state)
{
	(void)state;
	char why[200];
	struct subid_alloc a = {.base = 2147483648u,
				.size = 65536,
				.uid_min = 1000,
				.uid_max = 33767}; /* one range too many */
	assert_int_equal(subid_alloc_check(&a, why, sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, "at most 33766"));
	a.uid_max = 999;
	assert_int_equal(subid_alloc_check(&a, why, sizeof(why)), -EINVAL);
	a.uid_max = 2000;
	a.size = 0;
	assert_int_equal(subid_alloc_check(&a, why, sizeof(why)), -EINVAL);
	bool fits = true;
	assert_int_equal(subid_alloc_max_uid(4294967295u, 1, 0, &fits), 0);
	assert_false(fits);
	assert_int_equal(subid_alloc_max_uid(4294967294u, 2, 0, &fits), 0);
	assert_false(fits);
	/* uid_max never reaches (uid_t)-1 however small the size. */
	assert_int_equal(subid_alloc_max_uid(0, 1, 4294967290u, &fits), 4294967294u);
	assert_true(fits);
}

static void test_range_rule(void **state)
{
	(void)state;
	assert_true(subid_range_ok(0, 1));
	assert_true(subid_range_ok(0, 4294967295u));  /* 0..2^32-2 */
	assert_true(subid_range_ok(4294967294u, 1));  /* the last id allowed */
	assert_false(subid_range_ok(4294967295u, 1)); /* (uid_t)-1 */
	assert_false(subid_range_ok(1, 4294967295u)); /* wraps */
	assert_false(subid_range_ok(5, 0));
}

/* ==== the range set ==== */

struct found {
	uint32_t uids[64];
	size_t n;
};

static int collect(uint32_t uid, void *arg)
{
	struct found *f = arg;
	if (f->n == N_OF(f->uids))
		return 1;
	f->uids[f->n++] = uid;
	return 0;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return x < y ? -1 : x > y;
}

struct plain {
	uint32_t start, count, uid;
};

/* The uids of v[0..n) holding id, sorted, duplicates kept once per triple. */
static size_t plain_find(const struct plain *v, size_t n, uint32_t id, uint32_t *out)
{
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		if (id < v[i].start || id - v[i].start >= v[i].count)
			continue;
		bool dup = false; /* the same triple added again is found once */
		for (size_t j = 0; j < i && !dup; j++)
			dup = v[j].start == v[i].start && v[j].count == v[i].count &&
			      v[j].uid == v[i].uid;
		if (!dup)
			out[k++] = v[i].uid;
	}
	qsort(out, k, sizeof(*out), cmp_u32);
	return k;
}

static void check_find(const struct subid_set *s, const struct plain *v, size_t n, uint32_t id)
{
	struct found f = {{0}, 0};
	uint32_t want[4096];
	assert_int_equal(subid_set_find(s, id, collect, &f), 0);
	size_t k = plain_find(v, n, id, want);
	assert_int_equal(f.n, k);
	qsort(f.uids, f.n, sizeof(*f.uids), cmp_u32);
	for (size_t i = 0; i < k; i++)
		assert_int_equal(f.uids[i], want[i]);
}

/* Random adds and removes of overlapping ranges, the same triple now and
 * then twice: after each step, every probed id is found in exactly the
 * ranges a plain list holds. */
static void test_set_random(void **state)
{
	(void)state;
	enum { MAX = 48 };
	struct plain v[MAX];
	size_t n = 0;
	struct subid_set *s = subid_set_new();
	assert_non_null(s);
	srand(7);
	for (int step = 0; step < 4000; step++) {
		if (n < MAX && (n == 0 || rand() % 3 != 0)) {
			struct plain p = {(uint32_t)(rand() % 1000), 1 + (uint32_t)(rand() % 200),
					  (uint32_t)(rand() % 20)};
			if (n && rand() % 5 == 0)
				p = v[(size_t)rand() % n];
			assert_int_equal(subid_set_add(s, p.start, p.count, p.uid), 0);
			v[n++] = p;
		} else {
			size_t i = (size_t)rand() % n;
			assert_true(subid_set_del(s, v[i].start, v[i].count, v[i].uid));
			v[i] = v[--n];
		}
		for (int probe = 0; probe < 8; probe++)
			check_find(s, v, n, (uint32_t)(rand() % 1300));
	}
	while (n) {
		assert_true(subid_set_del(s, v[n - 1].start, v[n - 1].count, v[n - 1].uid));
		n--;
	}
	assert_int_equal(subid_set_size(s), 0);
	assert_false(subid_set_del(s, 1, 1, 1));
	subid_set_free(s);
}

/* The ends of the id space, a triple held twice and removed once, a stop
 * by the callback, and many ranges added in order (a sorted directory)
 * searched by their ids. */
static void test_set_edges(void **state)
{
	(void)state;
	struct subid_set *s = subid_set_new();
	assert_non_null(s);
	assert_int_equal(subid_set_add(s, 0, 4294967295u, 1), 0);
	assert_int_equal(subid_set_add(s, 4294967294u, 1, 2), 0);
	assert_int_equal(subid_set_add(s, 4294967294u, 1, 2), 0);
	assert_int_equal(subid_set_size(s), 2);
	struct found f = {{0}, 0};
	assert_int_equal(subid_set_find(s, 4294967294u, collect, &f), 0);
	assert_int_equal(f.n, 2);
	assert_true(subid_set_del(s, 4294967294u, 1, 2));
	f.n = 0;
	assert_int_equal(subid_set_find(s, 4294967294u, collect, &f), 0);
	assert_int_equal(f.n, 2); /* still held once */
	assert_true(subid_set_del(s, 4294967294u, 1, 2));
	assert_false(subid_set_del(s, 4294967294u, 1, 2));
	f.n = 0;
	assert_int_equal(subid_set_find(s, 4294967294u, collect, &f), 0);
	assert_int_equal(f.n, 1);
	assert_true(subid_set_del(s, 0, 4294967295u, 1));
	for (uint32_t u = 0; u < 100000; u++)
		assert_int_equal(subid_set_add(s, 100000u + u * 4096u, 4096, u), 0);
	for (uint32_t u = 0; u < 100000; u += 997) {
		f.n = 0;
		assert_int_equal(subid_set_find(s, 100000u + u * 4096u + 4095u, collect, &f), 0);
		assert_int_equal(f.n, 1);
		assert_int_equal(f.uids[0], u);
	}
	f.n = 0;
	assert_int_equal(subid_set_find(s, 99999, collect, &f), 0);
	assert_int_equal(f.n, 0);
	assert_int_equal(subid_set_add(s, 100000, 1, 7), 0);
	f.n = 63; /* one more fits: the second found stops the walk */
	assert_int_equal(subid_set_find(s, 100000, collect, &f), 1);
	subid_set_free(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_default_whole_range),
	    cmocka_unit_test(test_edges),
	    cmocka_unit_test(test_refused),
	    cmocka_unit_test(test_range_rule),
	    cmocka_unit_test(test_set_random),
	    cmocka_unit_test(test_set_edges),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
