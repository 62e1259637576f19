/*
 * perf: the statistics behind every figure (median, spread, outliers) and
 * the wording of ratios, plus the small result containers. Kept free of
 * I/O so the unit test can hold it to exact numbers.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "perf.h"

#define SAME_WITHIN 1.03 /* ratios closer to 1 than this read "about as fast" */

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

double perf_quantile(const double *sorted, unsigned n, double p)
{
	double pos = p * (double)(n - 1);
	unsigned lo = (unsigned)pos;
	if (lo + 1 >= n)
		return sorted[n - 1];
	return sorted[lo] + (pos - (double)lo) * (sorted[lo + 1] - sorted[lo]);
}

int perf_stats_of(const double *v, unsigned n, struct perf_stats *out)
{
	if (n == 0 || n > PERF_MAX_SAMPLES)
		return -EINVAL;
	double s[PERF_MAX_SAMPLES], kept[PERF_MAX_SAMPLES];
	memcpy(s, v, n * sizeof(*s));
	qsort(s, n, sizeof(*s), cmp_double);
	double q1 = perf_quantile(s, n, 0.25), q3 = perf_quantile(s, n, 0.75);
	double lo = q1 - 1.5 * (q3 - q1), hi = q3 + 1.5 * (q3 - q1);
	unsigned k = 0;
	for (unsigned i = 0; i < n; i++)
		if (s[i] >= lo && s[i] <= hi)
			kept[k++] = s[i];
	/* fences always keep the quartile range, so k > 0; stated for the reader */
	*out = (struct perf_stats){
	    .median = perf_quantile(kept, k, 0.5),
	    .min = kept[0],
	    .max = kept[k - 1],
	    .q1 = q1,
	    .q3 = q3,
	    .n = n,
	    .outliers = n - k,
	};
	return 0;
}

double perf_spread_pct(const struct perf_stats *s)
{
	return s->median > 0 ? (s->max - s->min) / 2 / s->median * 100 : 0;
}

int perf_ratio_dir(double a, double b)
{
	if (a <= 0 || b <= 0)
		return 0;
	double r = a > b ? a / b : b / a;
	if (r < SAME_WITHIN)
		return 0;
	return a > b ? 1 : -1;
}

/* "41.2×" style: 3 significant digits below 100, whole numbers above. */
static void fmt_ratio(double r, char *out, size_t cap)
{
	char num[48];
	if (r < 10)
		snprintf(out, cap, "%.2f×", r);
	else if (r < 100)
		snprintf(out, cap, "%.1f×", r);
	else
		snprintf(out, cap, "%s×", perf_fmt_num(r, num, sizeof(num)));
}

const char *perf_ratio_text(const char *name_a, double a, const char *name_b, double b, char *out,
			    size_t cap)
{
	char r[64];
	if (!(a > 0) || !(b > 0)) {
		snprintf(out, cap, "no ratio (%s or %s has no figure)", name_a, name_b);
		return out;
	}
	int dir = perf_ratio_dir(a, b);
	fmt_ratio(a > b ? a / b : b / a, r, sizeof(r));
	if (dir == 0)
		snprintf(out, cap, "%s about as fast as %s (%s)", name_a, name_b, r);
	else
		snprintf(out, cap, "%s %s %s than %s", name_a, r, dir > 0 ? "faster" : "slower",
			 name_b);
	return out;
}

const char *perf_fmt_num(double v, char *out, size_t cap)
{
	if (!isfinite(v)) {
		snprintf(out, cap, "-");
		return out;
	}
	if (v < 100) {
		snprintf(out, cap, "%.3g", v);
		return out;
	}
	char raw[40];
	int n = snprintf(raw, sizeof(raw), "%.0f", v);
	size_t o = 0;
	for (int i = 0; i < n && o + 2 < cap; i++) {
		if (i && (n - i) % 3 == 0)
			out[o++] = ',';
		out[o++] = raw[i];
	}
	out[o] = '\0';
	return out;
}

/* ==== result containers ========================================================= */

static const char *const status_names[] = {"ok", "unavailable", "skipped", "failed", "unsupported"};

const char *perf_status_name(enum perf_status s)
{
	return (size_t)s < IDC_ARRAY_SIZE(status_names) ? status_names[s] : "failed";
}

int perf_status_parse(const char *s, enum perf_status *out)
{
	for (size_t i = 0; i < IDC_ARRAY_SIZE(status_names); i++) {
		if (strcmp(s, status_names[i]) == 0) {
			*out = (enum perf_status)i;
			return 0;
		}
	}
	return -EINVAL;
}

/* Grow an array of size elements to hold one more. */
static int grow(void **p, size_t *cap, size_t n, size_t size)
{
	if (n < *cap)
		return 0;
	size_t c = *cap ? *cap * 2 : 64;
	void *q = realloc(*p, c * size);
	if (!q)
		return -ENOMEM;
	*p = q;
	*cap = c;
	return 0;
}

struct perf_row *perf_row_add(struct perf_results *r)
{
	if (grow((void **)&r->rows, &r->caprows, r->nrows, sizeof(*r->rows)) < 0)
		return NULL;
	struct perf_row *row = &r->rows[r->nrows++];
	memset(row, 0, sizeof(*row));
	return row;
}

int perf_size_add(struct perf_results *r, const struct perf_size *s)
{
	if (grow((void **)&r->sizes, &r->capsizes, r->nsizes, sizeof(*r->sizes)) < 0)
		return -ENOMEM;
	r->sizes[r->nsizes++] = *s;
	return 0;
}

void perf_fact_set(struct perf_results *r, const char *key, const char *fmt, ...)
{
	struct perf_fact *f = NULL;
	for (size_t i = 0; i < r->nfacts && !f; i++)
		if (strcmp(r->facts[i].key, key) == 0)
			f = &r->facts[i];
	if (!f && r->nfacts == PERF_MAX_FACTS)
		return;
	if (!f)
		f = &r->facts[r->nfacts++];
	snprintf(f->key, sizeof(f->key), "%s", key);
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(f->val, sizeof(f->val), fmt, ap);
	va_end(ap);
}

const char *perf_fact_get(const struct perf_results *r, const char *key)
{
	for (size_t i = 0; i < r->nfacts; i++)
		if (strcmp(r->facts[i].key, key) == 0)
			return r->facts[i].val;
	return NULL;
}

const struct perf_row *perf_find(const struct perf_results *r, const char *test, const char *engine,
				 uint64_t users, unsigned threads)
{
	for (size_t i = 0; i < r->nrows; i++) {
		const struct perf_row *w = &r->rows[i];
		if (w->users == users && w->threads == threads && strcmp(w->test, test) == 0 &&
		    strcmp(w->engine, engine) == 0)
			return w;
	}
	return NULL;
}

void perf_results_free(struct perf_results *r)
{
	free(r->rows);
	free(r->sizes);
	memset(r, 0, sizeof(*r));
}

double perf_us_per_lookup(const struct perf_row *w)
{
	if (w->status != PERF_OK || !(w->st.median > 0) || strcmp(w->unit, "lookups/s") != 0)
		return 0;
	return 1e6 * (w->threads ? w->threads : 1) / w->st.median;
}
