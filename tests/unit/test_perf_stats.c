/*
 * The statistics behind `idcache perf`: median, quartiles, the outlier
 * rule, spread, and the wording of ratios (direction first, never a signed
 * percentage).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "perf.h"

static void test_median_odd_even(void **state)
{
	(void)state;
	struct perf_stats s;
	double odd[] = {5, 1, 3};
	assert_int_equal(perf_stats_of(odd, 3, &s), 0);
	assert_true(s.median == 3 && s.min == 1 && s.max == 5 && s.outliers == 0);
	double even[] = {4, 1, 3, 2};
	assert_int_equal(perf_stats_of(even, 4, &s), 0);
	assert_true(s.median == 2.5);
	/* the input is not reordered */
	assert_true(even[0] == 4 && even[1] == 1);
}

static void test_quartiles(void **state)
{
	(void)state;
	double v[] = {1, 2, 3, 4, 5};
	assert_true(perf_quantile(v, 5, 0.25) == 2);
	assert_true(perf_quantile(v, 5, 0.75) == 4);
	assert_true(perf_quantile(v, 5, 0.5) == 3);
	double w[] = {10, 20};
	assert_true(perf_quantile(w, 2, 0.25) == 12.5);
	assert_true(perf_quantile(w, 1, 0.9) == 10);
}

static void test_outlier_rule(void **state)
{
	(void)state;
	struct perf_stats s;
	/* Q1 = 100, Q3 = 102 (IQR 2): fences 97 .. 105; 200 is out */
	double v[] = {100, 101, 102, 100, 200, 101, 102};
	assert_int_equal(perf_stats_of(v, 7, &s), 0);
	assert_int_equal(s.outliers, 1);
	assert_true(s.max == 102 && s.min == 100);
	assert_true(s.median == 101);
	/* all equal: nothing is an outlier */
	double e[] = {7, 7, 7};
	assert_int_equal(perf_stats_of(e, 3, &s), 0);
	assert_int_equal(s.outliers, 0);
	assert_true(perf_spread_pct(&s) == 0);
}

static void test_bad_input(void **state)
{
	(void)state;
	struct perf_stats s;
	double v[1] = {1};
	assert_int_equal(perf_stats_of(v, 0, &s), -EINVAL);
	assert_int_equal(perf_stats_of(v, PERF_MAX_SAMPLES + 1, &s), -EINVAL);
}

static void test_spread(void **state)
{
	(void)state;
	struct perf_stats s;
	double v[] = {90, 100, 110};
	perf_stats_of(v, 3, &s);
	assert_true(perf_spread_pct(&s) > 9.99 && perf_spread_pct(&s) < 10.01);
}

static void test_ratio_words(void **state)
{
	(void)state;
	char buf[128];
	assert_string_equal(perf_ratio_text("idcache", 412, "ldb-tdb", 10, buf, sizeof(buf)),
			    "idcache 41.2× faster than ldb-tdb");
	assert_string_equal(perf_ratio_text("idcache", 100, "openldap", 135, buf, sizeof(buf)),
			    "idcache 1.35× slower than openldap");
	assert_string_equal(perf_ratio_text("idcache", 102, "ldb-mdb", 100, buf, sizeof(buf)),
			    "idcache about as fast as ldb-mdb (1.02×)");
	assert_string_equal(perf_ratio_text("a", 250000, "b", 100, buf, sizeof(buf)),
			    "a 2,500× faster than b");
	assert_non_null(strstr(perf_ratio_text("a", 0, "b", 1, buf, sizeof(buf)), "no ratio"));
	/* never a signed percentage */
	assert_null(strchr(perf_ratio_text("a", 1, "b", 3, buf, sizeof(buf)), '%'));
	assert_null(strchr(buf, '-'));
}

static void test_ratio_dir(void **state)
{
	(void)state;
	assert_int_equal(perf_ratio_dir(200, 100), 1);
	assert_int_equal(perf_ratio_dir(100, 200), -1);
	assert_int_equal(perf_ratio_dir(100, 102), 0);
	assert_int_equal(perf_ratio_dir(0, 100), 0);
}

static void test_fmt_num(void **state)
{
	(void)state;
	char buf[48];
	assert_string_equal(perf_fmt_num(1234567.4, buf, sizeof(buf)), "1,234,567");
	assert_string_equal(perf_fmt_num(41.23, buf, sizeof(buf)), "41.2");
	assert_string_equal(perf_fmt_num(100, buf, sizeof(buf)), "100");
	assert_string_equal(perf_fmt_num(0.5234, buf, sizeof(buf)), "0.523");
}

static void test_status_names(void **state)
{
	(void)state;
	enum perf_status s;
	assert_int_equal(perf_status_parse("unavailable", &s), 0);
	assert_int_equal(s, PERF_UNAVAILABLE);
	assert_string_equal(perf_status_name(PERF_SKIPPED), "skipped");
	assert_int_equal(perf_status_parse("bogus", &s), -EINVAL);
}

static void test_us_per_lookup(void **state)
{
	(void)state;
	struct perf_row w = {.status = PERF_OK, .threads = 4, .unit = "lookups/s"};
	w.st.median = 2000000; /* 4 processes, 2 M lookups/s in all: 2 µs each */
	assert_true(perf_us_per_lookup(&w) > 1.999 && perf_us_per_lookup(&w) < 2.001);
	w.threads = 0; /* not threaded: one process */
	assert_true(perf_us_per_lookup(&w) > 0.499 && perf_us_per_lookup(&w) < 0.501);
	w.status = PERF_FAILED;
	assert_true(perf_us_per_lookup(&w) == 0);
	w.status = PERF_OK;
	snprintf(w.unit, sizeof(w.unit), "searches/s"); /* only lookups have it */
	assert_true(perf_us_per_lookup(&w) == 0);
}

static void test_ratio_words_nss(void **state)
{
	(void)state;
	char buf[128];
	assert_string_equal(
	    perf_ratio_text("idcache-mc", 1420000, "files", 100000, buf, sizeof(buf)),
	    "idcache-mc 14.2× faster than files");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_median_odd_even), cmocka_unit_test(test_quartiles),
	    cmocka_unit_test(test_outlier_rule),    cmocka_unit_test(test_bad_input),
	    cmocka_unit_test(test_spread),          cmocka_unit_test(test_ratio_words),
	    cmocka_unit_test(test_ratio_dir),       cmocka_unit_test(test_fmt_num),
	    cmocka_unit_test(test_status_names),    cmocka_unit_test(test_us_per_lookup),
	    cmocka_unit_test(test_ratio_words_nss),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
