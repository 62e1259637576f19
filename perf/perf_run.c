/*
 * perf: the run. For each number of users: generate the LDIF once (the
 * same bytes for every engine), then per engine: import (fresh store each
 * sample), export, the threaded searches and modify, and adds; record a
 * row per (test, engine, users, threads) whatever happened, so nothing is
 * silently missing. A measurement predicted to take longer than the budget
 * is skipped with the prediction as its reason.
 */
#include <errno.h>
#include <fcntl.h>
#include <gnu/libc-version.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "cli/msg.h"
#include "engines/engine.h"
#include "gen.h"
#include "scratch.h"
#include "perf.h"

volatile sig_atomic_t perf_stop;

const struct perf_test perf_tests[] = {
    {"import", "entries/s", "LDIF file into an empty indexed store (engine's bulk path)", false,
     false},
    {"export", "entries/s", "whole store to an LDIF file", false, false},
    {"search_uid", "searches/s", "(uid=X), X a random existing user, subtree of ou=people", true,
     false},
    {"search_uid_in_dn", "searches/s", "(uid:dn:=X): extensible match on attribute or DN", true,
     false},
    {"search_sub", "searches/s", "(uid=*NNNNNNN): final substring, one match, no substring index",
     true, false},
    {"modify_sn", "modifies/s", "replace sn of a random user, one durable transaction each", true,
     false},
    {"add", "adds/s", "one new user per durable transaction, one writer", false, false},
    {"getpwnam", "lookups/s", "getpwnam_r of a random existing user through glibc's NSS", true,
     true},
    {"getpwuid", "lookups/s", "getpwuid_r of a random existing uid through glibc's NSS", true,
     true},
    {"initgroups", "lookups/s",
     "getgrouplist of the user in 200 groups (the others in about 10) through glibc's NSS", true,
     true},
};
const size_t perf_ntests = IDC_ARRAY_SIZE(perf_tests);

static const char *const run_indexes[] = {"uid",         "cn",        "sn",
					  "objectClass", "uidNumber", "gidNumber"};

#define BASE_DN   "dc=example,dc=com"
#define PEOPLE_DN "ou=people," BASE_DN

const struct perf_test *perf_test_find(const char *name)
{
	for (size_t i = 0; i < perf_ntests; i++)
		if (strcmp(perf_tests[i].name, name) == 0)
			return &perf_tests[i];
	return NULL;
}

/* ==== progress and scratch files ====================================================== */

struct run {
	const struct perf_opts *o;
	struct perf_results *res;
	uint64_t t0;
	bool tty;
	char cache_label[160];
	bool can_drop;
	/* for the budget: last per-run seconds of (engine, test) and its users */
	struct {
		char key[48];
		uint64_t users[2];
		double secs[2];
	} hist[64];
	size_t nhist;
};

static void progress(struct run *r, const char *test, const char *engine, uint64_t users,
		     unsigned threads)
{
	uint64_t s = (idc_now_ns() - r->t0) / 1000000000u;
	char u[32];
	fprintf(stderr, "%sperf: %-16s %-15s users %-9s threads %u   elapsed %llu:%02llu%s",
		r->tty ? "\r" : "", test, engine, perf_fmt_num((double)users, u, sizeof(u)),
		threads ? threads : 1, (unsigned long long)(s / 60), (unsigned long long)(s % 60),
		r->tty ? "\033[K" : "\n");
	fflush(stderr);
}

/* Drop the page cache for a cold sample; false when not permitted. */
static bool drop_caches(char *why, size_t cap)
{
	sync();
	int fd = open("/proc/sys/vm/drop_caches", O_WRONLY | O_CLOEXEC);
	bool ok = fd >= 0 && write(fd, "3", 1) == 1;
	if (!ok)
		snprintf(why, cap, "%s", strerror(errno));
	if (fd >= 0)
		close(fd);
	return ok;
}

static void before_sample(struct run *r)
{
	char why[64];
	if (r->o->cold && r->can_drop && !drop_caches(why, sizeof(why))) {
		r->can_drop = false;
		snprintf(r->cache_label, sizeof(r->cache_label),
			 "hot (cold asked, but the page cache cannot be dropped here: %s)", why);
	}
}

/* ==== rows ================================================================================ */

static struct perf_row *row_new(struct run *r, const struct perf_test *t, const char *engine,
				uint64_t users, unsigned threads)
{
	struct perf_row *row = perf_row_add(r->res);
	if (!row)
		return NULL;
	snprintf(row->test, sizeof(row->test), "%s", t->name);
	snprintf(row->engine, sizeof(row->engine), "%s", engine);
	snprintf(row->unit, sizeof(row->unit), "%s", t->unit);
	snprintf(row->cache, sizeof(row->cache), "%s", r->cache_label);
	row->users = users;
	row->threads = threads;
	return row;
}

static void row_status(struct perf_row *row, enum perf_status s, const char *why)
{
	if (!row)
		return;
	row->status = s;
	snprintf(row->why, sizeof(row->why), "%.300s", why);
}

static void row_samples(struct perf_row *row, const double *v, unsigned n)
{
	if (!row)
		return;
	memcpy(row->samples, v, n * sizeof(*v));
	row->nsamples = n;
	row->status = PERF_OK;
	perf_stats_of(v, n, &row->st);
	/* A rate of 0 is no figure: most samples' windows ended before one
	 * operation did (a busy machine, or --seconds too short). */
	if (!(row->st.median > 0))
		row_status(row, PERF_FAILED,
			   "no operation completed within most samples' windows (raise --seconds)");
}

/* A row for every thread count of test t, all with the same status. */
static void rows_all(struct run *r, const struct perf_test *t, const char *engine, uint64_t users,
		     enum perf_status s, const char *why)
{
	if (!t->threaded) {
		row_status(row_new(r, t, engine, users, 0), s, why);
		return;
	}
	for (size_t i = 0; i < r->o->nthreads; i++)
		row_status(row_new(r, t, engine, users, r->o->threads[i]), s, why);
}

static bool wanted(const struct perf_opts *o, const char *test)
{
	for (size_t i = 0; i < o->ntests; i++)
		if (strcmp(o->tests[i], test) == 0)
			return true;
	return false;
}

/* ==== budget ============================================================================== */

static double *hist_for(struct run *r, const char *engine, const char *test, uint64_t **users)
{
	char key[48];
	snprintf(key, sizeof(key), "%s/%s", engine, test);
	for (size_t i = 0; i < r->nhist; i++)
		if (strcmp(r->hist[i].key, key) == 0) {
			*users = r->hist[i].users;
			return r->hist[i].secs;
		}
	if (r->nhist == IDC_ARRAY_SIZE(r->hist))
		return NULL;
	snprintf(r->hist[r->nhist].key, sizeof(key), "%s", key);
	*users = r->hist[r->nhist].users;
	return r->hist[r->nhist++].secs;
}

/* Seconds one run at users is predicted to take, from the last two sizes
 * measured (growth exponent clamped to 1..2.5: ldb's index lists grow
 * quadratically), or 0 when nothing is known. */
static double predict(struct run *r, const char *engine, const char *test, uint64_t users)
{
	uint64_t *u;
	double *s = hist_for(r, engine, test, &u);
	if (!s || u[1] == 0)
		return 0;
	double e = 1;
	if (u[0] && s[0] > 0.05 && u[1] > u[0])
		e = log(s[1] / s[0]) / log((double)u[1] / (double)u[0]);
	e = e < 1 ? 1 : e > 2.5 ? 2.5 : e;
	return s[1] * pow((double)users / (double)u[1], e);
}

static void remember(struct run *r, const char *engine, const char *test, uint64_t users,
		     double secs)
{
	uint64_t *u;
	double *s = hist_for(r, engine, test, &u);
	if (!s)
		return;
	u[0] = u[1], s[0] = s[1];
	u[1] = users, s[1] = secs;
}

/* Skip when (samples + warm-up) runs would pass the budget. */
static bool over_budget(struct run *r, const char *engine, const char *test, uint64_t users,
			char *why, size_t cap)
{
	double one = predict(r, engine, test, users);
	double all = one * (r->o->samples + 1);
	if (all <= r->o->budget)
		return false;
	snprintf(why, cap,
		 "predicted %.0f s for %u runs (over the %.0f s budget; --budget raises it)", all,
		 r->o->samples + 1, r->o->budget);
	return true;
}

/* ==== one engine at one size ================================================================ */

struct cell {
	struct run *r;
	const struct eng_ops *ops;
	struct eng *e; /* the store the later tests use */
	const struct gen *g;
	uint64_t users;
	char ldif[PATH_MAX];
	char dir[PATH_MAX];
	char why[400]; /* why the store is missing, for the tests after import */
};

static int new_store(struct cell *c, struct eng **out, struct idc_diag *d)
{
	scratch_rm_tree(c->dir);
	if (mkdir(c->dir, 0700) < 0)
		return idc_diag_set(d, -errno, "%s: %s", c->dir, strerror(errno));
	struct eng_cfg cfg = {c->dir, BASE_DN, run_indexes, IDC_ARRAY_SIZE(run_indexes),
			      c->r->o->seed};
	return c->ops->create(&cfg, out, d);
}

/* Warm-up + samples fresh imports; the last store stays for later tests. */
static void test_import(struct cell *c, const struct perf_test *t)
{
	struct perf_row *row = row_new(c->r, t, c->ops->name, c->users, 0);
	unsigned runs = c->r->o->samples + 1;
	double v[PERF_MAX_SAMPLES + 1];
	struct idc_diag d = {{0}};
	uint64_t count = 0;
	int rc = 0;
	if (c->ops->max_users && c->users > c->ops->max_users)
		snprintf(c->why, sizeof(c->why), "%s", c->ops->max_users_why);
	if ((c->ops->max_users && c->users > c->ops->max_users) ||
	    over_budget(c->r, c->ops->name, t->name, c->users, c->why, sizeof(c->why))) {
		row_status(row, PERF_SKIPPED, c->why);
		return;
	}
	for (unsigned i = 0; rc == 0 && i < runs && !perf_stop; i++) {
		if (c->e)
			c->ops->destroy(c->e);
		c->e = NULL;
		rc = new_store(c, &c->e, &d);
		before_sample(c->r);
		uint64_t t0 = idc_now_ns();
		rc = rc < 0 ? rc : c->ops->import(c->e, c->ldif, &count, &d);
		double secs = (double)(idc_now_ns() - t0) / 1e9;
		v[i] = (double)count / secs;
		remember(c->r, c->ops->name, t->name, c->users, secs);
	}
	uint64_t want = gen_nentries(c->g);
	if (rc == 0 && !perf_stop && count != want)
		rc = idc_diag_set(&d, -EIO, "stored %llu of %llu entries",
				  (unsigned long long)count, (unsigned long long)want);
	if (rc < 0 || perf_stop) {
		idc_diag_complete(&d, rc);
		snprintf(c->why, sizeof(c->why), "import failed: %.380s", d.msg);
		row_status(row, PERF_FAILED, perf_stop ? "interrupted" : d.msg);
		if (c->e)
			c->ops->destroy(c->e);
		c->e = NULL;
		return;
	}
	row_samples(row, v + 1, runs - 1);
	row->count = count;
	struct perf_size sz = {"", c->users, count, c->ops->disk_bytes(c->e), 0};
	struct stat st;
	sz.ldif_bytes = stat(c->ldif, &st) == 0 ? (uint64_t)st.st_size : 0;
	snprintf(sz.engine, sizeof(sz.engine), "%s", c->ops->name);
	perf_size_add(c->r->res, &sz);
}

static void test_export(struct cell *c, const struct perf_test *t)
{
	struct perf_row *row = row_new(c->r, t, c->ops->name, c->users, 0);
	unsigned runs = c->r->o->samples + 1;
	double v[PERF_MAX_SAMPLES + 1];
	char out[PATH_MAX + 16], why[400];
	struct idc_diag d = {{0}};
	uint64_t count = 0;
	int rc = 0;
	if (over_budget(c->r, c->ops->name, t->name, c->users, why, sizeof(why))) {
		row_status(row, PERF_SKIPPED, why);
		return;
	}
	snprintf(out, sizeof(out), "%s.export", c->dir);
	for (unsigned i = 0; rc == 0 && i < runs && !perf_stop; i++) {
		before_sample(c->r);
		uint64_t t0 = idc_now_ns();
		rc = c->ops->export(c->e, out, &count, &d);
		double secs = (double)(idc_now_ns() - t0) / 1e9;
		v[i] = (double)count / secs;
		remember(c->r, c->ops->name, t->name, c->users, secs);
	}
	unlink(out);
	if (rc == 0 && !perf_stop && count != gen_nentries(c->g))
		rc = idc_diag_set(&d, -EIO, "wrote %llu of %llu entries", (unsigned long long)count,
				  (unsigned long long)gen_nentries(c->g));
	if (rc < 0 || perf_stop) {
		idc_diag_complete(&d, rc);
		row_status(row, PERF_FAILED, perf_stop ? "interrupted" : d.msg);
		return;
	}
	row_samples(row, v + 1, runs - 1);
	row->count = count;
}

/* Time-bound adds of users past the generated ones (same generator, so the
 * same bytes for every engine), one writer. */
static void test_add(struct cell *c, const struct perf_test *t)
{
	struct perf_row *row = row_new(c->r, t, c->ops->name, c->users, 0);
	struct gen_opts go = {
	    .users = c->users + 10000000, .groups = gen_groups(c->g), .seed = c->r->o->seed};
	struct gen *more = NULL;
	struct gen_rec rec = GEN_REC_INIT;
	struct idc_diag d = {{0}};
	double v[PERF_MAX_SAMPLES + 1];
	uint64_t next = c->users, ns = (uint64_t)(c->r->o->seconds * 1e9);
	unsigned runs = c->r->o->samples + 1;
	int rc = gen_new(&go, &more, &d);
	for (unsigned i = 0; rc == 0 && i < runs && !perf_stop; i++) {
		before_sample(c->r);
		uint64_t t0 = idc_now_ns(), n = 0;
		while (rc == 0 && !perf_stop && idc_now_ns() - t0 < ns) {
			rc = gen_user(more, next++, &rec);
			rc = rc < 0 ? rc : c->ops->add(c->e, &rec, &d);
			n += rc == 0;
		}
		v[i] = (double)n / ((double)(idc_now_ns() - t0) / 1e9);
	}
	gen_rec_free(&rec);
	gen_free(more);
	if (rc < 0 || perf_stop) {
		idc_diag_complete(&d, rc);
		row_status(row, PERF_FAILED, perf_stop ? "interrupted" : d.msg);
		return;
	}
	row_samples(row, v + 1, runs - 1);
	row->count = next - c->users;
}

static enum perf_op op_of(const char *test)
{
	if (strcmp(test, "search_uid") == 0)
		return PERF_OP_SEARCH_UID;
	if (strcmp(test, "search_uid_in_dn") == 0)
		return PERF_OP_SEARCH_UID_IN_DN;
	if (strcmp(test, "search_sub") == 0)
		return PERF_OP_SEARCH_SUB;
	return PERF_OP_MODIFY_SN;
}

/* The phases of one thread count: hot runs warm-up + samples in one go;
 * cold drops the cache before each sample and runs it alone. */
static int threaded_samples(struct cell *c, struct perf_work *w, double *v, struct idc_diag *d)
{
	double rates[PERF_MAX_SAMPLES + 1];
	unsigned n = c->r->o->samples;
	if (!c->r->o->cold || !c->r->can_drop) {
		w->phases = n + 1;
		int rc = perf_work_run(w, rates, d);
		memcpy(v, rates + 1, n * sizeof(*v));
		return rc;
	}
	w->phases = 1;
	for (unsigned i = 0; i < n && !perf_stop; i++) {
		before_sample(c->r);
		int rc = perf_work_run(w, &v[i], d);
		if (rc < 0)
			return rc;
	}
	return 0;
}

static void test_threaded(struct cell *c, const struct perf_test *t)
{
	struct idc_diag d = {{0}};
	int rc = c->ops->serve ? c->ops->serve(c->e, &d) : 0;
	for (size_t i = 0; i < c->r->o->nthreads && !perf_stop; i++) {
		unsigned th = c->r->o->threads[i];
		struct perf_row *row = row_new(c->r, t, c->ops->name, c->users, th);
		progress(c->r, t->name, c->ops->name, c->users, th);
		struct perf_work w = {c->ops,       c->e, c->g, op_of(t->name),
				      PEOPLE_DN,    th,   0,    c->r->o->seconds,
				      c->r->o->seed};
		double v[PERF_MAX_SAMPLES];
		rc = rc < 0 ? rc : threaded_samples(c, &w, v, &d);
		if (rc == 0 && !perf_stop) {
			row_samples(row, v, c->r->o->samples);
			continue;
		}
		idc_diag_complete(&d, rc);
		/* ldb has no extensible match without a matching rule: a limit of
		 * the engine, not a failure of the run */
		bool unsupported = rc == -EOPNOTSUPP;
		row_status(row,
			   perf_stop     ? PERF_FAILED
			   : unsupported ? PERF_UNSUPPORTED
					 : PERF_FAILED,
			   perf_stop ? "interrupted" : d.msg);
		rc = 0; /* the next thread count gets its own try */
	}
}

static void run_cell(struct cell *c)
{
	const struct perf_opts *o = c->r->o;
	c->why[0] = '\0';
	if (!wanted(o, "import")) { /* the other tests still need a store */
		struct idc_diag d = {{0}};
		uint64_t n;
		int rc = new_store(c, &c->e, &d);
		rc = rc < 0 ? rc : c->ops->import(c->e, c->ldif, &n, &d);
		if (rc < 0) {
			idc_diag_complete(&d, rc);
			snprintf(c->why, sizeof(c->why), "import failed: %.380s", d.msg);
			if (c->e)
				c->ops->destroy(c->e);
			c->e = NULL;
		}
	}
	for (size_t i = 0; i < perf_ntests && !perf_stop; i++) {
		const struct perf_test *t = &perf_tests[i];
		if (!wanted(o, t->name))
			continue;
		if (t->nss) /* the NSS engines' (run_nss) */
			continue;
		if (!c->e && strcmp(t->name, "import") != 0) {
			rows_all(c->r, t, c->ops->name, c->users, PERF_SKIPPED,
				 c->why[0] ? c->why : "no store: import not run");
			continue;
		}
		progress(c->r, t->name, c->ops->name, c->users, 0);
		if (strcmp(t->name, "import") == 0)
			test_import(c, t);
		else if (strcmp(t->name, "export") == 0)
			test_export(c, t);
		else if (strcmp(t->name, "add") == 0)
			test_add(c, t);
		else
			test_threaded(c, t);
	}
}

/* ==== the whole run ========================================================================== */

/* First line of a command's output (versions), or "". */
static void first_line(const char *cmd, char *out, size_t cap)
{
	out[0] = '\0';
	FILE *p = popen(cmd, "r");
	if (!p)
		return;
	if (fgets(out, (int)cap, p))
		out[strcspn(out, "\n")] = '\0';
	pclose(p);
}

static void machine_facts(struct perf_results *res, const struct perf_opts *o)
{
	char line[256] = "", model[256] = "unknown";
	FILE *f = fopen("/proc/cpuinfo", "r");
	while (f && fgets(line, sizeof(line), f))
		if (strncmp(line, "model name", 10) == 0 && strchr(line, ':')) {
			snprintf(model, sizeof(model), "%s", strchr(line, ':') + 2);
			model[strcspn(model, "\n")] = '\0';
			break;
		}
	if (f)
		fclose(f);
	struct utsname u;
	uname(&u);
	time_t now = time(NULL);
	char when[64];
	strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
	perf_fact_set(res, "date", "%s", when);
	perf_fact_set(res, "cpu", "%s", model);
	perf_fact_set(res, "cpus_online", "%ld", sysconf(_SC_NPROCESSORS_ONLN));
	perf_fact_set(res, "memory_bytes", "%lld",
		      (long long)sysconf(_SC_PHYS_PAGES) * sysconf(_SC_PAGESIZE));
	perf_fact_set(res, "kernel", "%s %s %s", u.sysname, u.release, u.machine);
	perf_fact_set(res, "scratch_dir", "%s", o->dir);
	first_line("/usr/sbin/slapd -VV 2>&1 | sed -n 's/^@(#) \\$//p'", line, sizeof(line));
	perf_fact_set(res, "openldap", "%s", line[0] ? line : "not installed");
	perf_fact_set(res, "seed", "%llu", (unsigned long long)o->seed);
	perf_fact_set(res, "samples", "%u (after one warm-up)", o->samples);
	perf_fact_set(res, "sample_seconds", "%g (time-bound tests)", o->seconds);
	perf_fact_set(res, "outlier_rule", "%s", PERF_OUTLIER_RULE);
	perf_fact_set(res, "cache", "%s", o->cold ? "cold asked" : "hot (after a warm-up)");
	perf_fact_set(res, "data",
		      "users with 10-digit uids, groups = users/100 (10 members "
		      "on average), from bench/gen.c");
	perf_fact_set(res, "glibc", "%s", gnu_get_libc_version());
	perf_fact_set(res, "nss_method",
		      "glibc getpwnam_r/getpwuid_r/getgrouplist in N processes (the threads "
		      "option) in a private mount namespace with a generated nsswitch.conf; "
		      "us per lookup = N / total rate; idcached run by the tool, passwd map "
		      "sized for the users");
	size_t n = 0;
	for (size_t i = 0; i < IDC_ARRAY_SIZE(run_indexes); i++)
		n += (size_t)snprintf(res->indexes + n, sizeof(res->indexes) - n, "%s%s",
				      i ? "," : "", run_indexes[i]);
}

static bool engine_wanted(const struct perf_opts *o, const char *name)
{
	for (size_t i = 0; i < o->nengines; i++)
		if (strcmp(o->engines[i], name) == 0)
			return true;
	return false;
}

/* The LDIF every engine of this size reads: generated once, records only
 * (slapadd takes a "version: 1" line for an entry without a DN). */
static int write_data(const struct perf_opts *o, uint64_t users, const char *path, struct gen **g,
		      struct idc_diag *d)
{
	struct gen_opts go = {
	    .users = users, .groups = users / 100 ? users / 100 : 1, .seed = o->seed};
	struct gen_rec rec = GEN_REC_INIT;
	struct idc_buf buf = IDC_BUF_INIT;
	int rc = gen_new(&go, g, d);
	FILE *f = rc < 0 ? NULL : fopen(path, "w");
	if (rc == 0 && !f)
		rc = idc_diag_set(d, -errno, "%s: %s", path, strerror(errno));
	for (uint64_t n = 0; rc == 0 && n < gen_nentries(*g); n++) {
		rc = gen_entry(*g, n, &rec);
		rc = rc < 0 ? rc : gen_rec_ldif(&rec, &buf);
		if (rc == 0 && (buf.len >= (1u << 20) || n + 1 == gen_nentries(*g))) {
			rc = fwrite(buf.data, 1, buf.len, f) == buf.len ? 0 : -EIO;
			idc_buf_reset(&buf);
		}
	}
	if (f && fclose(f) != 0 && rc == 0)
		rc = idc_diag_set(d, -EIO, "%s: %s", path, strerror(errno));
	gen_rec_free(&rec);
	idc_buf_free(&buf);
	return rc;
}

/* ==== the NSS tests ========================================================================= */

static const struct perf_engine_info *engine_info(const struct run *r, const char *name)
{
	for (size_t i = 0; i < r->res->nengines; i++)
		if (strcmp(r->res->engines[i].name, name) == 0)
			return &r->res->engines[i];
	return NULL;
}

/* Rows for every wanted NSS test of engine e, all with the same status. */
static void nss_rows_all(struct run *r, const struct nss_eng_ops *e, uint64_t users,
			 enum perf_status s, const char *why)
{
	for (size_t k = 0; k < perf_ntests; k++)
		if (perf_tests[k].nss && wanted(r->o, perf_tests[k].name))
			rows_all(r, &perf_tests[k], e->name, users, s, why);
}

static void nss_engine(struct run *r, struct perf_nss *n, const struct nss_eng_ops *e)
{
	char label[160];
	snprintf(label, sizeof(label), "%s%s",
		 e->prefill ? "hot (every key looked up once first: the memory cache holds "
			      "what idcached answered)"
			    : "hot",
		 r->o->cold ? "; cold asked, not applied to lookups" : "");
	for (size_t k = 0; k < perf_ntests && !perf_stop; k++) {
		const struct perf_test *t = &perf_tests[k];
		if (!t->nss || !wanted(r->o, t->name))
			continue;
		for (size_t i = 0; i < r->o->nthreads && !perf_stop; i++) {
			unsigned procs = r->o->threads[i];
			struct perf_row *row = row_new(r, t, e->name, n->users, procs);
			struct idc_diag d = {{0}};
			double v[PERF_MAX_SAMPLES + 1];
			progress(r, t->name, e->name, n->users, procs);
			if (row)
				snprintf(row->cache, sizeof(row->cache), "%s", label);
			int rc = perf_nss_measure(n, e, t->name, procs, r->o->samples + 1,
						  r->o->seconds, v, &d);
			if (rc < 0 || perf_stop) {
				idc_diag_complete(&d, rc);
				row_status(row, PERF_FAILED, perf_stop ? "interrupted" : d.msg);
				continue;
			}
			row_samples(row, v + 1, r->o->samples);
			double total = 0;
			for (unsigned s = 1; s <= r->o->samples; s++)
				total += v[s] * r->o->seconds;
			if (row)
				row->count = (uint64_t)(total + 0.5);
		}
	}
}

/* The NSS engines at one size: one data directory and one idcached for
 * all of them (started when an engine needs it), stopped at the end. */
static void run_nss(struct run *r, uint64_t users, const char *work)
{
	bool any = false;
	for (size_t k = 0; k < perf_ntests; k++)
		any |= perf_tests[k].nss && wanted(r->o, perf_tests[k].name);
	if (!any)
		return;
	struct perf_nss n = {0};
	struct idc_diag d = {{0}}, dd = {{0}};
	int rc = 1, drc = 1; /* 1: not tried yet */
	for (size_t i = 0; i < nss_eng_count && !perf_stop; i++) {
		const struct nss_eng_ops *e = nss_eng_all[i];
		const struct perf_engine_info *info = engine_info(r, e->name);
		if (!engine_wanted(r->o, e->name) || !info)
			continue;
		if (!info->available) {
			nss_rows_all(r, e, users, PERF_UNAVAILABLE, info->why);
			continue;
		}
		if (rc == 1) {
			progress(r, "generate passwd", "-", users, 0);
			rc = perf_nss_open(&n, work, users, r->o->seed, &d);
			idc_diag_complete(&d, rc);
		}
		if (rc < 0) {
			nss_rows_all(r, e, users, PERF_FAILED, d.msg);
			continue;
		}
		if (e->daemon && drc == 1) {
			progress(r, "start idcached", "-", users, 0);
			drc = perf_nss_start_daemon(&n, &dd);
			idc_diag_complete(&dd, drc);
			if (drc == 0)
				perf_fact_set(r->res, "idcached_ready_s",
					      "%.2f (start to ready, %llu users)", n.ready_seconds,
					      (unsigned long long)users);
		}
		if (e->daemon && drc < 0) {
			nss_rows_all(r, e, users, PERF_FAILED, dd.msg);
			continue;
		}
		nss_engine(r, &n, e);
	}
	perf_nss_close(&n);
}

static void run_size(struct run *r, uint64_t users, const char *work)
{
	struct cell c = {.r = r, .users = users};
	struct idc_diag d = {{0}};
	struct gen *g = NULL;
	bool store_tests = false; /* else no LDIF and no store: the NSS tests need neither */
	for (size_t k = 0; k < perf_ntests; k++)
		store_tests |= !perf_tests[k].nss && wanted(r->o, perf_tests[k].name);
	snprintf(c.ldif, sizeof(c.ldif), "%.2000s/data-%llu.ldif", work, (unsigned long long)users);
	if (store_tests)
		progress(r, "generate LDIF", "-", users, 0);
	int rc = store_tests ? write_data(r->o, users, c.ldif, &g, &d) : 0;
	c.g = g;
	for (size_t i = 0; store_tests && i < eng_count && !perf_stop; i++) {
		struct perf_engine_info *info = &r->res->engines[i];
		c.ops = eng_all[i];
		if (!engine_wanted(r->o, c.ops->name))
			continue;
		for (size_t k = 0; (!info->available || rc < 0) && k < perf_ntests; k++) {
			if (!wanted(r->o, perf_tests[k].name) || perf_tests[k].nss)
				continue;
			idc_diag_complete(&d, rc);
			rows_all(r, &perf_tests[k], c.ops->name, users,
				 rc < 0 ? PERF_FAILED : PERF_UNAVAILABLE,
				 rc < 0 ? d.msg : info->why);
		}
		if (!info->available || rc < 0)
			continue;
		snprintf(c.dir, sizeof(c.dir), "%.2000s/%s-%llu", work, c.ops->name,
			 (unsigned long long)users);
		run_cell(&c);
		if (c.e)
			c.ops->destroy(c.e);
		c.e = NULL;
		scratch_rm_tree(c.dir);
	}
	gen_free(g);
	unlink(c.ldif);
	run_nss(r, users, work);
}

int perf_run(const struct perf_opts *o, struct perf_results *res)
{
	struct run *r = calloc(1, sizeof(*r));
	char work[PATH_MAX / 2];
	if (!r)
		return -ENOMEM;
	*r = (struct run){
	    .o = o, .res = res, .t0 = idc_now_ns(), .tty = isatty(2), .can_drop = o->cold};
	snprintf(r->cache_label, sizeof(r->cache_label), "%s",
		 o->cold ? "cold (page cache dropped before each sample)" : "hot");
	machine_facts(res, o);
	for (size_t i = 0; i < eng_count; i++) {
		struct perf_engine_info *info = &res->engines[res->nengines++];
		snprintf(info->name, sizeof(info->name), "%s", eng_all[i]->name);
		info->available = eng_all[i]->available(info->why, sizeof(info->why)) == 0;
		snprintf(info->durability, sizeof(info->durability), "%s", eng_all[i]->durability);
		snprintf(info->access, sizeof(info->access), "%s", eng_all[i]->access);
	}
	for (size_t i = 0; i < nss_eng_count && res->nengines < PERF_MAX_ENGINES; i++) {
		struct perf_engine_info *info = &res->engines[res->nengines++];
		snprintf(info->name, sizeof(info->name), "%s", nss_eng_all[i]->name);
		info->available =
		    perf_nss_available(nss_eng_all[i], info->why, sizeof(info->why)) == 0;
		snprintf(info->durability, sizeof(info->durability), "n/a (lookups only)");
		snprintf(info->access, sizeof(info->access), "%s", nss_eng_all[i]->access);
	}
	snprintf(work, sizeof(work), "%s/idcache-perf.XXXXXX", o->dir);
	if (!mkdtemp(work)) {
		int rc = -errno;
		free(r);
		return rc;
	}
	for (size_t i = 0; i < o->nusers && !perf_stop; i++)
		run_size(r, o->users[i], work);
	if (r->tty)
		fputs("\r\033[K", stderr);
	res->interrupted = perf_stop != 0;
	scratch_rm_tree(work);
	free(r);
	return 0;
}
