/*
 * subid unit tests: the allocation formula (subid/subid.h) — collision-free
 * over every covered uid, inside its block, never reaching (uid_t)-1, its
 * inverse, the boundaries of the default and of configurations that only
 * just fit — and the range rule.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
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

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_default_whole_range),
	    cmocka_unit_test(test_edges),
	    cmocka_unit_test(test_refused),
	    cmocka_unit_test(test_range_rule),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
