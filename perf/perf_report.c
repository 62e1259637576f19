/*
 * perf: the table people read. One block per test: a line per (users,
 * threads), a column per engine (median and spread), OpenLDAP after a bar
 * because its figures include the LDAP round trip, and under each line the
 * ratios in words, idcache first. Colour (on a terminal, unless NO_COLOR)
 * says which way each ratio goes; the words say it without colour too.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "perf.h"

#define REF     "idcache"    /* ratios are idcache's against each other engine */
#define REF_NSS "idcache-mc" /* ... and for the NSS lookups the memory cache's */
#define PROTO   "openldap"
#define C_GOOD  "\033[32m"
#define C_BAD   "\033[31m"
#define C_DIM   "\033[2m"
#define C_BOLD  "\033[1m"
#define C_RESET "\033[0m"
#define COLW    17

bool perf_want_color(FILE *f)
{
	const char *nc = getenv("NO_COLOR");
	return isatty(fileno(f)) && !(nc && nc[0]);
}

/* The engine a test's ratios are against: the memory cache for lookups. */
static const char *ref_engine(const char *test)
{
	const struct perf_test *t = perf_test_find(test);
	return t && t->nss ? REF_NSS : REF;
}

/* Engines that have rows of test, in the result file's engine order. */
static size_t engines_used(const struct perf_results *r, const char *test, const char **out)
{
	size_t n = 0;
	for (size_t i = 0; i < r->nengines && n < PERF_MAX_ENGINES; i++)
		for (size_t k = 0; k < r->nrows; k++)
			if (strcmp(r->rows[k].engine, r->engines[i].name) == 0 &&
			    strcmp(r->rows[k].test, test) == 0) {
				out[n++] = r->engines[i].name;
				break;
			}
	return n;
}

/* Distinct (users, threads) of test, in first-seen order. */
static size_t keys_of(const struct perf_results *r, const char *test, uint64_t *users,
		      unsigned *threads, size_t cap)
{
	size_t n = 0;
	for (size_t i = 0; i < r->nrows; i++) {
		const struct perf_row *w = &r->rows[i];
		if (strcmp(w->test, test) != 0)
			continue;
		bool seen = false;
		for (size_t k = 0; k < n && !seen; k++)
			seen = users[k] == w->users && threads[k] == w->threads;
		if (!seen && n < cap) {
			users[n] = w->users;
			threads[n++] = w->threads;
		}
	}
	return n;
}

/* The cell: "1,234,567 ±3%" or the status word. */
static void cell_text(const struct perf_row *w, char *out, size_t cap)
{
	char num[48];
	if (!w) {
		snprintf(out, cap, "-");
	} else if (w->status == PERF_OK) {
		snprintf(out, cap, "%s ±%.0f%%%s", perf_fmt_num(w->st.median, num, sizeof(num)),
			 perf_spread_pct(&w->st), w->st.outliers ? "*" : "");
	} else {
		snprintf(out, cap, "%s", perf_status_name(w->status));
	}
}

static void ratio_line(FILE *out, const struct perf_results *r, const char **eng, size_t neng,
		       const char *test, uint64_t users, unsigned threads, bool color)
{
	const char *refname = ref_engine(test);
	const struct perf_row *ref = perf_find(r, test, refname, users, threads);
	if (!ref || ref->status != PERF_OK)
		return;
	bool first = true;
	for (size_t i = 0; i < neng; i++) {
		const struct perf_row *o = perf_find(r, test, eng[i], users, threads);
		if (!o || o->status != PERF_OK || strcmp(eng[i], refname) == 0)
			continue;
		char txt[160];
		perf_ratio_text(refname, ref->st.median, eng[i], o->st.median, txt, sizeof(txt));
		int dir = perf_ratio_dir(ref->st.median, o->st.median);
		fprintf(out, "%s%s%s%s", first ? "        " : "; ",
			color ? (dir > 0   ? C_GOOD
				 : dir < 0 ? C_BAD
					   : "")
			      : "",
			txt, color ? C_RESET : "");
		first = false;
	}
	if (!first)
		fputc('\n', out);
}

/* For lookups: the time one process spends per call, per engine. */
static void us_line(FILE *out, const struct perf_results *r, const char **eng, size_t neng,
		    const char *test, uint64_t users, unsigned threads, bool color)
{
	bool first = true;
	for (size_t i = 0; i < neng; i++) {
		const struct perf_row *w = perf_find(r, test, eng[i], users, threads);
		double us = w ? perf_us_per_lookup(w) : 0;
		if (!(us > 0))
			continue;
		char num[48];
		fprintf(out, "%s%s %s",
			first ? (color ? "        " C_DIM "µs per lookup in each process: "
				       : "        µs per lookup in each process: ")
			      : "; ",
			eng[i], perf_fmt_num(us, num, sizeof(num)));
		first = false;
	}
	if (!first)
		fprintf(out, "%s\n", color ? C_RESET : "");
}

static void block_header(FILE *out, const struct perf_test *t, const char *unit, const char **eng,
			 size_t neng, bool color)
{
	fprintf(out, "\n%s%s%s — %s, higher is better%s\n", color ? C_BOLD : "", t ? t->name : "?",
		color ? C_RESET : "", unit, t ? "" : "");
	if (t)
		fprintf(out, "%s  %s%s\n", color ? C_DIM : "", t->what, color ? C_RESET : "");
	fprintf(out, "  %9s %4s %-6s", "users", "thr", "cache");
	for (size_t i = 0; i < neng; i++)
		fprintf(out, "%s%-*s", strcmp(eng[i], PROTO) == 0 ? "│ " : "", COLW,
			strcmp(eng[i], PROTO) == 0 ? "openldap (LDAP)" : eng[i]);
	fputc('\n', out);
}

/* Notes for rows without a figure, once per distinct reason. */
static void block_notes(FILE *out, const struct perf_results *r, const char *test, bool color)
{
	for (size_t i = 0; i < r->nrows; i++) {
		const struct perf_row *w = &r->rows[i];
		if (strcmp(w->test, test) != 0 || w->status == PERF_OK)
			continue;
		bool dup = false;
		for (size_t k = 0; k < i && !dup; k++)
			dup = strcmp(r->rows[k].test, test) == 0 &&
			      strcmp(r->rows[k].engine, w->engine) == 0 &&
			      r->rows[k].status == w->status && strcmp(r->rows[k].why, w->why) == 0;
		if (!dup)
			fprintf(out, "%s  %s %s: %s%s\n", color ? C_DIM : "", w->engine,
				perf_status_name(w->status), w->why, color ? C_RESET : "");
	}
}

static void test_block(FILE *out, const struct perf_results *r, const char *test, bool color)
{
	const char *eng[PERF_MAX_ENGINES];
	size_t neng = engines_used(r, test, eng);
	uint64_t users[256];
	unsigned threads[256];
	size_t nk = keys_of(r, test, users, threads, 256);
	const char *unit = "";
	for (size_t i = 0; i < r->nrows && !unit[0]; i++)
		if (strcmp(r->rows[i].test, test) == 0)
			unit = r->rows[i].unit;
	block_header(out, perf_test_find(test), unit, eng, neng, color);
	for (size_t k = 0; k < nk; k++) {
		char u[32], cell[64], th[16] = "-";
		const char *cache = "hot";
		if (threads[k])
			snprintf(th, sizeof(th), "%u", threads[k]);
		for (size_t i = 0; i < neng; i++) {
			const struct perf_row *w = perf_find(r, test, eng[i], users[k], threads[k]);
			if (w && w->status == PERF_OK)
				cache = strncmp(w->cache, "cold", 4) == 0 ? "cold" : "hot";
		}
		fprintf(out, "  %9s %4s %-6s", perf_fmt_num((double)users[k], u, sizeof(u)), th,
			cache);
		for (size_t i = 0; i < neng; i++) {
			const struct perf_row *w = perf_find(r, test, eng[i], users[k], threads[k]);
			cell_text(w, cell, sizeof(cell));
			bool ok = w && w->status == PERF_OK;
			fprintf(out, "%s%s%-*s%s", strcmp(eng[i], PROTO) == 0 ? "│ " : "",
				color && !ok ? C_DIM : "", COLW, cell, color && !ok ? C_RESET : "");
		}
		fputc('\n', out);
		ratio_line(out, r, eng, neng, test, users[k], threads[k], color);
		us_line(out, r, eng, neng, test, users[k], threads[k], color);
	}
	block_notes(out, r, test, color);
}

static const char *fact(const struct perf_results *r, const char *key)
{
	const char *v = perf_fact_get(r, key);
	return v ? v : "?";
}

void perf_report_table(FILE *out, const struct perf_results *r, bool color)
{
	fprintf(out, "idcache perf%s — %s, %s CPUs; %s\n", r->interrupted ? " (interrupted)" : "",
		fact(r, "cpu"), fact(r, "cpus_online"), fact(r, "date"));
	fprintf(out,
		"figures: median of %s; ±: half the min–max range in %% of the median; "
		"*: outliers dropped\n(%s); indexes: %s\n",
		fact(r, "samples"), PERF_OUTLIER_RULE, r->indexes);
	for (size_t i = 0; i < r->nengines; i++)
		fprintf(out, "  %-15s %s%s%s\n", r->engines[i].name,
			r->engines[i].available ? r->engines[i].durability : "unavailable: ",
			r->engines[i].available ? "; " : r->engines[i].why,
			r->engines[i].available ? r->engines[i].access : "");
	for (size_t t = 0; t < perf_ntests; t++) {
		bool any = false;
		for (size_t i = 0; i < r->nrows && !any; i++)
			any = strcmp(r->rows[i].test, perf_tests[t].name) == 0;
		if (any)
			test_block(out, r, perf_tests[t].name, color);
	}
	if (r->nsizes)
		fputs("\nstore sizes on disk after import\n", out);
	for (size_t i = 0; i < r->nsizes; i++) {
		char u[32], b[48], l[48];
		const struct perf_size *s = &r->sizes[i];
		fprintf(out, "  %-15s users %-9s %s bytes (LDIF %s bytes)\n", s->engine,
			perf_fmt_num((double)s->users, u, sizeof(u)),
			perf_fmt_num((double)s->disk_bytes, b, sizeof(b)),
			perf_fmt_num((double)s->ldif_bytes, l, sizeof(l)));
	}
}

/* ==== compare ====================================================================== */

void perf_report_compare(FILE *out, const struct perf_results *a, const char *name_a,
			 const struct perf_results *b, const char *name_b, bool color)
{
	fprintf(out, "%s against %s, row by row (higher is better)\n", name_b, name_a);
	fprintf(out, "  %-17s %-15s %9s %4s %16s %16s  %s\n", "test", "engine", "users", "thr",
		name_a, name_b, "");
	size_t shown = 0;
	for (size_t i = 0; i < b->nrows; i++) {
		const struct perf_row *y = &b->rows[i];
		const struct perf_row *x = perf_find(a, y->test, y->engine, y->users, y->threads);
		if (!x)
			continue;
		char u[32], ca[64], cb[64], th[16] = "-", txt[200] = "";
		cell_text(x, ca, sizeof(ca));
		cell_text(y, cb, sizeof(cb));
		if (y->threads)
			snprintf(th, sizeof(th), "%u", y->threads);
		int dir = 0;
		if (x->status == PERF_OK && y->status == PERF_OK) {
			perf_ratio_text(name_b, y->st.median, name_a, x->st.median, txt,
					sizeof(txt));
			dir = perf_ratio_dir(y->st.median, x->st.median);
		}
		fprintf(out, "  %-17s %-15s %9s %4s %16s %16s  %s%s%s\n", y->test, y->engine,
			perf_fmt_num((double)y->users, u, sizeof(u)), th, ca, cb,
			color ? (dir > 0   ? C_GOOD
				 : dir < 0 ? C_BAD
					   : "")
			      : "",
			txt, color ? C_RESET : "");
		shown++;
	}
	if (!shown)
		fprintf(out, "  (no row is in both files)\n");
}
