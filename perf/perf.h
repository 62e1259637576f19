/*
 * perf: idcache-perf, the program behind `idcache perf` — measure idcache's
 * store and NSS lookups beside Samba ldb, OpenLDAP and other NSS sources on
 * the same generated data, and report it for people (a table, SVG, HTML)
 * and machines (JSON, CSV). Internal to perf/; installed only when
 * configured with -Dperf=true, so the admin tool links none of it.
 *
 * May call: the store, the cli message helpers (cli/msg.h), the data
 * generator (bench/gen.h) and the engines (engines/engine.h).
 *
 * Files by role: main.c (command line), perf_run.c (the run: data,
 * engines, tests, budget), perf_work.c (timed workers in threads or
 * processes), perf_stats.c (median, spread, outliers, ratio wording),
 * perf_json.c (result file out and in), perf_report.c (terminal table,
 * compare), perf_svg.c (SVG plot and the HTML page), perf_nss.c (NSS
 * lookups: data, idcached in a private namespace, measuring processes);
 * engines/ holds one file per engine.
 */
#ifndef IDC_PERF_H
#define IDC_PERF_H

#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "util/util.h"

#define PERF_MAX_SAMPLES 64
#define PERF_MAX_ENGINES 16
#define PERF_MAX_FACTS   24

/* ==== statistics (perf_stats.c) ================================================ */

/* Outlier rule: Tukey's fences. A sample below Q1 - 1.5 IQR or above
 * Q3 + 1.5 IQR is an outlier; outliers are dropped before the median,
 * min and max are taken, and counted. */
#define PERF_OUTLIER_RULE                                                                          \
	"samples outside Tukey's fences (Q1 - 1.5 IQR, Q3 + 1.5 IQR) are dropped and counted"

struct perf_stats {
	double median, min, max; /* of the samples kept */
	double q1, q3;           /* of all samples (linear interpolation) */
	unsigned n;              /* samples given */
	unsigned outliers;       /* samples dropped by the rule */
};

/* Quantile p (0..1) of sorted[0..n), linear between closest ranks. n > 0. */
double perf_quantile(const double *sorted, unsigned n, double p);

/* Statistics of v[0..n) (v is not changed). -EINVAL when n is 0 or over
 * PERF_MAX_SAMPLES. */
int perf_stats_of(const double *v, unsigned n, struct perf_stats *out);

/* Half the min..max range as a percentage of the median (0 when median 0). */
double perf_spread_pct(const struct perf_stats *s);

/* Which of two rates is better, when "about the same" is within 3%:
 * 1 when a beats b, -1 when b beats a, 0 about the same. Higher is better. */
int perf_ratio_dir(double a, double b);

/* The ratio in words, direction first, never a signed percentage:
 * "idcache 41.2× faster than ldb-tdb", "idcache 1.35× slower than
 * openldap", "idcache about as fast as ldb-mdb (1.02×)". Rates: higher is
 * better. Writes into out (NUL-terminated, truncated to cap); returns
 * out. a or b not positive: "no ratio (...)". */
const char *perf_ratio_text(const char *name_a, double a, const char *name_b, double b, char *out,
			    size_t cap);

/* v with thousands separators ("1,234,567"), or 3 significant digits
 * below 100 ("41.2", "0.523"). */
const char *perf_fmt_num(double v, char *out, size_t cap);

/* ==== results ======================================================================= */

enum perf_status { PERF_OK, PERF_UNAVAILABLE, PERF_SKIPPED, PERF_FAILED, PERF_UNSUPPORTED };
const char *perf_status_name(enum perf_status s);
int perf_status_parse(const char *s, enum perf_status *out);

struct perf_row {
	char test[24];
	char engine[24];
	uint64_t users;
	unsigned threads; /* 0: not a threaded test */
	enum perf_status status;
	char why[320];   /* reason when not PERF_OK */
	char unit[24];   /* "entries/s", "searches/s" ... */
	char cache[160]; /* "hot", "cold", "hot (cold asked, not permitted: ...)" */
	double samples[PERF_MAX_SAMPLES];
	unsigned nsamples;
	struct perf_stats st;
	uint64_t count; /* entries imported/exported, or operations done */
};

struct perf_engine_info {
	char name[24];
	bool available;
	char why[256];
	char durability[160];
	char access[160];
};

struct perf_size {
	char engine[24];
	uint64_t users;
	uint64_t entries;
	int64_t disk_bytes;
	uint64_t ldif_bytes;
};

struct perf_fact {
	char key[32];
	char val[256];
};

struct perf_results {
	struct perf_fact facts[PERF_MAX_FACTS]; /* machine and run facts */
	size_t nfacts;
	struct perf_engine_info engines[PERF_MAX_ENGINES];
	size_t nengines;
	struct perf_row *rows;
	size_t nrows, caprows;
	struct perf_size *sizes;
	size_t nsizes, capsizes;
	char indexes[256]; /* "uid,cn,..." */
	bool interrupted;
};

/* A new row appended (zeroed); NULL on ENOMEM. Pointers to earlier rows
 * may move. */
struct perf_row *perf_row_add(struct perf_results *r);
int perf_size_add(struct perf_results *r, const struct perf_size *s);
void perf_fact_set(struct perf_results *r, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
const char *perf_fact_get(const struct perf_results *r, const char *key);
void perf_results_free(struct perf_results *r);

/* The row for (test, engine, users, threads), or NULL. */
const struct perf_row *perf_find(const struct perf_results *r, const char *test, const char *engine,
				 uint64_t users, unsigned threads);

/* ==== tests (perf_run.c) ================================================================ */

struct perf_test {
	const char *name;
	const char *unit;
	const char *what; /* one line for `perf list` and the report */
	bool threaded;    /* run at each thread count */
	bool nss;         /* through the NSS module: needs idcached */
};
extern const struct perf_test perf_tests[];
extern const size_t perf_ntests;
const struct perf_test *perf_test_find(const char *name);

/* Set by SIGINT: stop after the current measurement, keep what finished. */
extern volatile sig_atomic_t perf_stop;

struct perf_opts {
	const char *tests[16];
	size_t ntests;
	uint64_t users[16];
	size_t nusers;
	unsigned threads[8];
	size_t nthreads;
	const char *engines[PERF_MAX_ENGINES];
	size_t nengines;
	unsigned samples;
	double seconds; /* per sample of a time-bound test */
	double budget;  /* skip a measurement predicted to take longer */
	bool cold;
	uint64_t seed;
	const char *dir; /* scratch directory */
	const char *out; /* JSON path; CSV beside it */
};

/* Run everything o asks for into res (facts, engines, rows, sizes). 0, or
 * a negative code when the run could not start; a failing measurement is a
 * PERF_FAILED row, not an error. Returns with res->interrupted on SIGINT. */
int perf_run(const struct perf_opts *o, struct perf_results *res);

/* ==== workers (perf_work.c) ================================================================ */

struct eng_ops;
struct eng;
struct gen;

enum perf_op {
	PERF_OP_SEARCH_UID,
	PERF_OP_SEARCH_UID_IN_DN,
	PERF_OP_SEARCH_SUB,
	PERF_OP_MODIFY_SN
};

struct perf_work {
	const struct eng_ops *ops;
	struct eng *e;
	const struct gen *g;
	enum perf_op op;
	const char *people; /* base of the searches: "ou=people,<base>" */
	unsigned workers;
	unsigned phases; /* each `seconds` long; the caller decides which are warm-up */
	double seconds;
	uint64_t seed;
};

/* Run w->workers workers (threads, or processes for fork_workers engines)
 * doing w->op for w->phases consecutive phases; rates[p] = operations
 * completed in phase p by all workers / seconds. 0, or a negative code
 * with d saying what failed (the first failing worker's message). */
int perf_work_run(const struct perf_work *w, double *rates, struct idc_diag *d);

/* ==== NSS lookups (perf_nss.c) ==============================================================
 * The getpwnam, getpwuid and initgroups tests: glibc's lookups answered by
 * each NSS engine (engines/eng_nss.c) on generated passwd and group
 * files, in processes inside a private mount namespace. */

struct nss_eng_ops;

#define PERF_NSS_BIG_GROUPS 200u /* groups of the initgroups user */

struct perf_nss {
	uint64_t users, seed;
	char dir[PATH_MAX];      /* private: data, nsswitch.conf files, run, state, logs */
	char exe[PATH_MAX];      /* this idcache, exec'd as the measuring process */
	char idcached[PATH_MAX]; /* beside it in the build tree */
	char moddir[PATH_MAX];   /* libnss_idcache.so.2's directory (LD_LIBRARY_PATH) */
	pid_t daemon;            /* 0: not running */
	int daemon_status;       /* wait status once stopped */
	double ready_seconds;    /* start to "ready" */
};

/* Why no NSS test can run here (idcached or the module not built, no
 * private mount namespace), or NULL. */
const char *perf_nss_unavailable(char *buf, size_t cap);
/* 0 when engine e can be measured here, else < 0 with why. */
int perf_nss_available(const struct nss_eng_ops *e, char *why, size_t cap);

/* A private directory (under work when its path is short enough for a
 * socket, else /tmp) with the generated passwd and group for users, an
 * nsswitch.conf per source and idcached's config. */
int perf_nss_open(struct perf_nss *n, const char *work, uint64_t users, uint64_t seed,
		  struct idc_diag *d);
/* Start idcached on n's files and wait for its "ready" line. */
int perf_nss_start_daemon(struct perf_nss *n, struct idc_diag *d);
void perf_nss_stop_daemon(struct perf_nss *n);
/* Stop the daemon (if running) and remove n's directory. */
void perf_nss_close(struct perf_nss *n);

/* procs processes doing test's lookup through e for phases consecutive
 * phases of seconds each: rates[p] = lookups completed in phase p by all
 * processes / seconds. 0, or < 0 with d saying what failed. */
int perf_nss_measure(struct perf_nss *n, const struct nss_eng_ops *e, const char *test,
		     unsigned procs, unsigned phases, double seconds, double *rates,
		     struct idc_diag *d);

/* `idcache perf _nss-child ...`: the measuring process (internal). */
int perf_nss_child_main(int argc, char **argv);

/* µs one process spends per lookup in a row of lookups/s: processes /
 * total rate. 0 when the row has no figure. */
double perf_us_per_lookup(const struct perf_row *w);

/* ==== result files (perf_json.c) ================================================================
 */

int perf_json_write(const struct perf_results *r, const char *path, struct idc_diag *d);
int perf_csv_write(const struct perf_results *r, const char *path, struct idc_diag *d);
int perf_json_read(const char *path, struct perf_results *r, struct idc_diag *d);
/* JSON string escaping (also used for SVG/HTML-free contexts). */
void perf_json_str(FILE *f, const char *s);

/* ==== output (perf_report.c, perf_svg.c) ================================================== */

/* The table for people; colour when color. */
void perf_report_table(FILE *out, const struct perf_results *r, bool color);
/* Two result files side by side: B against A per row. */
void perf_report_compare(FILE *out, const struct perf_results *a, const char *name_a,
			 const struct perf_results *b, const char *name_b, bool color);
/* Whether to colour f: a terminal and NO_COLOR unset or empty. */
bool perf_want_color(FILE *f);

/* SVG: one panel per test, log users vs log rate, a line per engine
 * (lowest thread count). standalone: with the XML declaration. */
void perf_svg_write(FILE *out, const struct perf_results *r, bool standalone);
/* One self-contained HTML page: facts, tables, the plot; with b (may be
 * NULL) a comparison of a and b instead of a's table. */
void perf_html_write(FILE *out, const struct perf_results *a, const char *name_a,
		     const struct perf_results *b, const char *name_b);
/* Text with & < > " escaped for XML and HTML. */
void perf_xml_text(FILE *f, const char *s);

#endif
