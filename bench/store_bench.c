/*
 * store_bench: how fast the store adds, imports, searches and exports, with
 * bare LMDB doing the same puts beside it and docs/DESIGN.md §9's budgets printed
 * next to the numbers. Budgets are information: the exit code says only
 * whether every benchmark ran.
 *
 * Sections (--only a,b,...):
 *  a  20,000 adds in one transaction: 5 indexes / no index / raw LMDB
 *  b  µs per indexed add at 10^3..10^6 entries (batches of 10,000 per txn)
 *  c  LDIF import (ldif_next + store_add, one STORE_TXN_BULK transaction)
 *  d  indexed equality search, 1/2/4 threads, parse+search and pre-parsed
 *  e  LDIF export (whole tree + ldif_write_entry, written to /dev/null)
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <lmdb.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gen.h"
#include "scratch.h"
#include "store/store.h"

#define MAX_RUNS    15
#define BATCH       10000 /* adds per transaction in section b */
#define RENEW_EVERY 1024  /* searches per read transaction in section d */
#define SEARCH_POOL 256   /* uids per search thread; a parsed filter keeps a 64 KiB arena */
#define BIG_MAP     ((size_t)16 << 30) /* no growth during a measurement */
#define PEOPLE      "ou=people,dc=example,dc=com"
#define BUDGET_ADDS 0.1    /* s for 20,000 indexed adds in one txn */
#define BUDGET_IMP  250000 /* entries/s imported */
#define BUDGET_SRCH 1e6    /* searches/s per core */
#define BUDGET_EXP  480000 /* entries/s exported: 2x slapcat's 240,000/s */

static const char *const bench_indexes[] = {"uid", "cn", "objectClass", "uidNumber", "gidNumber"};

/* ==== options ================================================================== */

static struct {
	bool quick;
	bool nosync;
	bool writemap; /* sections a and b: stores opened STORE_WRITEMAP */
	bool keep;     /* leave the imported stores for a look afterwards */
	unsigned only; /* bit per section, 0: all */
	unsigned runs;
	double seconds; /* per search measurement */
	const char *json;
	const char *tmp;
	const char *store; /* section d: search this store of `users` users */
	uint64_t users;    /* section d: users searched (0: 100,000, quick 10,000) */
	unsigned threads;  /* section d: only the rows of this many threads (0: all) */
	const char *rows;  /* section d: kinds of rows, "pPt" (see usage) */
	uint64_t seed;
} opt = {.runs = 5, .seconds = 1.0, .seed = 1, .rows = "pPt"};

/* ==== results ===================================================================
 * Every number is printed as a table row when measured and kept for --json. */

struct result {
	char sect;
	char name[80];
	double value, min, max;
	const char *unit;
	unsigned runs;
	char note[256];
};

static struct result results[128];
static size_t nresults;
static char cur_sect;

/* v with thousands separators when large, else 3 significant-ish digits. */
static const char *fmt_num(double v, char *buf, size_t cap)
{
	if (v < 1000) {
		snprintf(buf, cap, v < 10 ? "%.3f" : "%.1f", v);
		return buf;
	}
	char raw[32];
	int n = snprintf(raw, sizeof(raw), "%.0f", v), o = 0;
	for (int i = 0; i < n && o + 2 < (int)cap; i++) {
		if (i && (n - i) % 3 == 0)
			buf[o++] = ',';
		buf[o++] = raw[i];
	}
	buf[o] = '\0';
	return buf;
}

/* Record and print one number; min/max shown when there were several runs. */
static void result(const char *name, double value, double min, double max, unsigned runs,
		   const char *unit)
{
	char v[40], lo[40], hi[40];
	printf("  %-50s %14s %-10s", name, fmt_num(value, v, sizeof(v)), unit);
	if (runs > 1)
		printf(" median of %u (min %s, max %s)", runs, fmt_num(min, lo, sizeof(lo)),
		       fmt_num(max, hi, sizeof(hi)));
	printf("\n");
	if (nresults == IDC_ARRAY_SIZE(results))
		return;
	struct result *r = &results[nresults++];
	*r = (struct result){
	    .sect = cur_sect, .value = value, .min = min, .max = max, .unit = unit, .runs = runs};
	snprintf(r->name, sizeof(r->name), "%s", name);
}

/* A line under the last result (ratio, budget); also kept as its note. */
static void note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void note(const char *fmt, ...)
{
	char line[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	printf("      %s\n", line);
	if (nresults == 0)
		return;
	struct result *r = &results[nresults - 1];
	size_t len = strlen(r->note);
	snprintf(r->note + len, sizeof(r->note) - len, "%s%s", len ? "; " : "", line);
}

/* Median, min and max of v[0..n) (sorts v). */
struct spread {
	double med, min, max;
};

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static struct spread spread_of(double *v, unsigned n)
{
	qsort(v, n, sizeof(*v), cmp_double);
	double med = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
	return (struct spread){med, v[0], v[n - 1]};
}

static double secs_since(uint64_t t0)
{
	return (double)(idc_now_ns() - t0) / 1e9;
}

/* CPU seconds of the whole process so far: beside wall time it shows how
 * much of a run was spent waiting for the disk. */
static double cpu_secs(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int fail(int rc, const struct idc_diag *d, const char *what)
{
	fprintf(stderr, "store_bench: %s: %s%s%s\n", what, idc_strerror(rc),
		d && d->msg[0] ? ": " : "", d ? d->msg : "");
	return rc;
}

/* ==== temporary directories ====================================================== */

static int tmp_dir(char *out, size_t cap, const char *what)
{
	snprintf(out, cap, "%s/idcache-bench-%s.XXXXXX", opt.tmp, what);
	return mkdtemp(out) ? 0 : -errno;
}

/* ==== generated entries ============================================================
 * Entries are built before the clock starts: a measurement times the store,
 * not the generator. */

struct batch {
	struct idc_arena arena;
	struct store_entry *e;
	size_t n, cap;
};

static void batch_free(struct batch *b)
{
	idc_arena_free(&b->arena);
	free(b->e);
	*b = (struct batch){0};
}

/* Copy r's bytes into b's arena (r is reused by the generator) and build
 * the entry from them. */
static int batch_push(struct batch *b, const struct gen_rec *r, struct idc_diag *d)
{
	if (b->n == b->cap) {
		size_t cap = b->cap ? b->cap * 2 : 1024;
		struct store_entry *e = realloc(b->e, cap * sizeof(*e));
		if (!e)
			return -ENOMEM;
		b->e = e;
		b->cap = cap;
	}
	char *text = idc_arena_alloc(&b->arena, r->text.len + 1);
	struct store_pair *p = idc_arena_alloc(&b->arena, r->npairs * sizeof(*p) + 1);
	if (!text || !p)
		return -ENOMEM;
	memcpy(text, r->text.data, r->text.len);
	for (size_t i = 0; i < r->npairs; i++) {
		p[i].name = r->pairs[i].name;
		p[i].value.ptr = text + (r->pairs[i].value.ptr - r->text.data);
		p[i].value.len = r->pairs[i].value.len;
	}
	struct store_val dn = {text + (r->dn.ptr - r->text.data), r->dn.len};
	return store_entry_from_pairs(&b->arena, dn, p, r->npairs, &b->e[b->n++], d);
}

/* Fill b (emptied first) with entries first..first+n-1 of g's sequence. */
static int batch_fill(struct batch *b, const struct gen *g, uint64_t first, uint64_t n,
		      struct idc_diag *d)
{
	struct gen_rec r = GEN_REC_INIT;
	int rc = 0;
	idc_arena_reset(&b->arena);
	b->n = 0;
	for (uint64_t i = first; rc == 0 && i < first + n; i++) {
		rc = gen_entry(g, i, &r);
		rc = rc < 0 ? rc : batch_push(b, &r, d);
	}
	gen_rec_free(&r);
	return rc;
}

/* A generator of users users and users/100 groups from the bench seed. */
static int make_gen(uint64_t users, struct gen **g)
{
	struct gen_opts o = {.users = users, .groups = users / 100, .seed = opt.seed};
	struct idc_diag d = {{0}};
	int rc = gen_new(&o, g, &d);
	return rc < 0 ? fail(rc, &d, "generator") : 0;
}

/* ==== store helpers ================================================================= */

static int open_store(const char *dir, bool indexed, unsigned flags, struct store **s,
		      struct idc_diag *d)
{
	struct store_options o = {
	    .flags = flags | (opt.nosync ? STORE_NOSYNC : 0) | (opt.writemap ? STORE_WRITEMAP : 0),
	    .map_size = BIG_MAP,
	    .indexes = indexed ? bench_indexes : NULL,
	    .nindexes = indexed ? IDC_ARRAY_SIZE(bench_indexes) : 0,
	};
	return store_open(dir, &o, s, d);
}

static int add_fn(struct store_txn *t, void *arg, struct idc_diag *d)
{
	const struct batch *b = arg;
	for (size_t i = 0; i < b->n; i++) {
		int rc = store_add(t, &b->e[i], NULL, d);
		if (rc < 0) {
			idc_diag_prefix(d, "add #%zu: ", i);
			return rc;
		}
	}
	return 0;
}

/* All of b in one write transaction (store_write grows a full map). */
static int add_batch(struct store *s, unsigned txn_flags, struct batch *b, struct idc_diag *d)
{
	return store_write(s, txn_flags, add_fn, b, d);
}

/* A new store in a new directory holding the base and the two ou entries. */
static int fresh_store(const struct gen *g, bool indexed, char *dir, size_t cap, struct store **s,
		       struct idc_diag *d)
{
	int rc = tmp_dir(dir, cap, "store");
	if (rc < 0)
		return idc_diag_set(d, rc, "mkdtemp under %s", opt.tmp);
	struct batch top = {0};
	rc = open_store(dir, indexed, STORE_CREATE, s, d);
	rc = rc < 0 ? rc : batch_fill(&top, g, 0, 3, d);
	rc = rc < 0 ? rc : add_batch(*s, 0, &top, d);
	batch_free(&top);
	if (rc < 0 && *s) {
		store_close(*s);
		*s = NULL;
	}
	return rc;
}

/* ==== raw LMDB: the same puts without the store ========================================
 * Keys and values shaped as the store's (docs/DESIGN.md §4): id2entry u64 -> an
 * encoded entry of the same size class, dn2id RDN-reversed lowercase DN ->
 * id, eq.<attr> normalized value -> id with MDB_DUPSORT|MDB_DUPFIXED|
 * MDB_INTEGERDUP. Everything is encoded before the clock starts. */

enum { RAW_ID2ENTRY, RAW_DN2ID, RAW_EQ0, RAW_NDB = RAW_EQ0 + 5 };

struct raw_key {
	unsigned db;
	struct store_val key;
};

struct raw_entry {
	struct store_val enc, rkey;
	struct raw_key keys[16];
	size_t nkeys;
};

struct raw_set {
	struct idc_arena arena;
	struct raw_entry *e;
	size_t n;
};

/* Length-prefixed DN and pairs, as the store's codec does. */
static struct store_val raw_encode(struct idc_arena *a, const struct gen_rec *r)
{
	size_t len = 4 + r->dn.len;
	for (size_t i = 0; i < r->npairs; i++)
		len += 8 + r->pairs[i].name.len + r->pairs[i].value.len;
	char *p = idc_arena_alloc(a, len), *w = p;
	if (!p)
		return (struct store_val){NULL, 0};
	uint32_t n = (uint32_t)r->dn.len;
	memcpy(w, &n, 4);
	memcpy(w + 4, r->dn.ptr, n);
	w += 4 + n;
	for (size_t i = 0; i < r->npairs; i++) {
		const struct store_pair *pr = &r->pairs[i];
		uint32_t nl = (uint32_t)pr->name.len, vl = (uint32_t)pr->value.len;
		memcpy(w, &nl, 4);
		memcpy(w + 4, pr->name.ptr, nl);
		w += 4 + nl;
		memcpy(w, &vl, 4);
		memcpy(w + 4, pr->value.ptr, vl);
		w += 4 + vl;
	}
	return (struct store_val){p, len};
}

/* "uid=a,ou=people,dc=example,dc=com" -> "dc=com,dc=example,ou=people,uid=a"
 * lowercased (generated DNs have no escapes or spaces). */
static struct store_val raw_rkey(struct idc_arena *a, struct store_val dn)
{
	char *out = idc_arena_alloc(a, dn.len + 1);
	if (!out)
		return (struct store_val){NULL, 0};
	size_t o = 0, end = dn.len;
	while (end > 0) {
		size_t start = end;
		while (start > 0 && dn.ptr[start - 1] != ',')
			start--;
		if (o)
			out[o++] = ',';
		for (size_t i = start; i < end; i++)
			out[o++] = idc_tolower(dn.ptr[i]);
		end = start ? start - 1 : 0;
	}
	return (struct store_val){out, o};
}

/* Index key of value v: integer rule for the numbers, caseIgnore else. */
static struct store_val raw_norm(struct idc_arena *a, unsigned db, struct store_val v)
{
	if (db == RAW_EQ0 + 3 || db == RAW_EQ0 + 4) {
		uint64_t x = (uint64_t)strtoll(v.ptr, NULL, 10) ^ (1ULL << 63);
		unsigned char *k = idc_arena_alloc(a, 8);
		for (int i = 0; k && i < 8; i++)
			k[i] = (unsigned char)(x >> (56 - 8 * i));
		return (struct store_val){(const char *)k, k ? 8 : 0};
	}
	char *k = idc_arena_alloc(a, v.len + 1);
	for (size_t i = 0; k && i < v.len; i++)
		k[i] = idc_tolower(v.ptr[i]);
	return (struct store_val){k, k ? v.len : 0};
}

static int raw_index_of(struct store_val name)
{
	for (size_t i = 0; i < IDC_ARRAY_SIZE(bench_indexes); i++)
		if (idc_memcaseeq(name.ptr, name.len, bench_indexes[i], strlen(bench_indexes[i])))
			return (int)i;
	return -1;
}

static int raw_push(struct raw_set *rs, const struct gen_rec *r)
{
	struct raw_entry *e = &rs->e[rs->n++];
	e->enc = raw_encode(&rs->arena, r);
	e->rkey = raw_rkey(&rs->arena, r->dn);
	e->nkeys = 0;
	for (size_t i = 0; i < r->npairs && e->nkeys < IDC_ARRAY_SIZE(e->keys); i++) {
		int x = raw_index_of(r->pairs[i].name);
		if (x < 0)
			continue;
		unsigned db = RAW_EQ0 + (unsigned)x;
		struct store_val k = raw_norm(&rs->arena, db, r->pairs[i].value);
		if (!k.ptr)
			return -ENOMEM;
		e->keys[e->nkeys++] = (struct raw_key){db, k};
	}
	return e->enc.ptr && e->rkey.ptr ? 0 : -ENOMEM;
}

/* Raw records of entries first..first+n-1 of g's sequence. */
static int raw_fill(struct raw_set *rs, const struct gen *g, uint64_t first, uint64_t n)
{
	struct gen_rec r = GEN_REC_INIT;
	rs->e = calloc(n ? n : 1, sizeof(*rs->e));
	int rc = rs->e ? 0 : -ENOMEM;
	for (uint64_t i = first; rc == 0 && i < first + n; i++) {
		rc = gen_entry(g, i, &r);
		rc = rc < 0 ? rc : raw_push(rs, &r);
	}
	gen_rec_free(&r);
	return rc;
}

static void raw_free(struct raw_set *rs)
{
	idc_arena_free(&rs->arena);
	free(rs->e);
	*rs = (struct raw_set){0};
}

static int raw_open(const char *dir, MDB_env **env, MDB_dbi dbi[RAW_NDB])
{
	static const char *const names[RAW_NDB] = {
	    "id2entry",       "dn2id",        "eq.uid",       "eq.cn",
	    "eq.objectclass", "eq.uidnumber", "eq.gidnumber",
	};
	MDB_txn *txn = NULL;
	int rc = mdb_env_create(env);
	rc = rc ? rc : mdb_env_set_maxdbs(*env, 16);
	rc = rc ? rc : mdb_env_set_mapsize(*env, (size_t)1 << 30);
	rc = rc ? rc
		: mdb_env_open(*env, dir,
			       (opt.nosync ? MDB_NOSYNC : 0) | (opt.writemap ? MDB_WRITEMAP : 0),
			       0644);
	rc = rc ? rc : mdb_txn_begin(*env, NULL, 0, &txn);
	for (unsigned i = 0; rc == 0 && i < RAW_NDB; i++) {
		unsigned fl = MDB_CREATE | (i == RAW_ID2ENTRY ? MDB_INTEGERKEY : 0) |
			      (i >= RAW_EQ0 ? MDB_DUPSORT | MDB_DUPFIXED | MDB_INTEGERDUP : 0);
		rc = mdb_dbi_open(txn, names[i], fl, &dbi[i]);
	}
	rc = rc ? rc : mdb_txn_commit(txn);
	return rc;
}

static int raw_put(MDB_txn *txn, MDB_dbi dbi, struct store_val k, const void *v, size_t vlen)
{
	MDB_val key = {k.len, (void *)k.ptr}, val = {vlen, (void *)v};
	return mdb_put(txn, dbi, &key, &val, 0);
}

/* One entry: id2entry, dn2id and one put per indexed value. */
static int raw_add(MDB_txn *txn, const MDB_dbi dbi[RAW_NDB], const struct raw_entry *e, size_t id)
{
	struct store_val idk = {(const char *)&id, sizeof(id)};
	int rc = raw_put(txn, dbi[RAW_ID2ENTRY], idk, e->enc.ptr, e->enc.len);
	rc = rc ? rc : raw_put(txn, dbi[RAW_DN2ID], e->rkey, &id, sizeof(id));
	for (size_t k = 0; rc == 0 && k < e->nkeys; k++)
		rc = raw_put(txn, dbi[e->keys[k].db], e->keys[k].key, &id, sizeof(id));
	return rc;
}

/* Time rs's puts in one transaction (commit included) in a new env. */
static int raw_run(const struct raw_set *rs, double *secs)
{
	char dir[PATH_MAX];
	MDB_env *env = NULL;
	MDB_dbi dbi[RAW_NDB];
	MDB_txn *txn = NULL;
	int rc = tmp_dir(dir, sizeof(dir), "raw");
	if (rc < 0)
		return rc;
	rc = raw_open(dir, &env, dbi);
	uint64_t t0 = idc_now_ns();
	rc = rc ? rc : mdb_txn_begin(env, NULL, 0, &txn);
	for (size_t i = 0; rc == 0 && i < rs->n; i++)
		rc = raw_add(txn, dbi, &rs->e[i], 4 + i); /* ids 1-3: base entries */
	if (rc && txn)
		mdb_txn_abort(txn);
	rc = rc ? rc : mdb_txn_commit(txn);
	*secs = secs_since(t0);
	if (env)
		mdb_env_close(env);
	scratch_rm_tree(dir);
	if (rc)
		fprintf(stderr, "store_bench: raw LMDB: %s\n", mdb_strerror(rc));
	return rc ? -EIO : 0;
}

/* ==== a: 20,000 adds in one transaction ============================================ */

/* Time b's adds in one transaction (commit included) in a fresh store. */
static int store_run(const struct gen *g, bool indexed, struct batch *b, double *secs)
{
	char dir[PATH_MAX] = "";
	struct store *s = NULL;
	struct idc_diag d = {{0}};
	int rc = fresh_store(g, indexed, dir, sizeof(dir), &s, &d);
	uint64_t t0 = idc_now_ns();
	rc = rc < 0 ? rc : add_batch(s, 0, b, &d);
	*secs = secs_since(t0);
	if (s)
		store_close(s);
	scratch_rm_tree(dir);
	return rc < 0 ? fail(rc, &d, indexed ? "indexed adds" : "unindexed adds") : 0;
}

struct a_times {
	double idx[MAX_RUNS], none[MAX_RUNS], raw[MAX_RUNS];
};

/* The three variants interleaved, run after run, so drift hits all alike. */
static int a_measure(const struct gen *g, uint64_t n, struct a_times *t)
{
	struct batch b = {0};
	struct raw_set rs = {0};
	struct idc_diag d = {{0}};
	int rc = batch_fill(&b, g, 3, n, &d);
	if (rc < 0)
		fail(rc, &d, "building entries");
	rc = rc < 0 ? rc : raw_fill(&rs, g, 3, n);
	for (unsigned r = 0; rc == 0 && r < opt.runs; r++) {
		rc = store_run(g, true, &b, &t->idx[r]);
		rc = rc < 0 ? rc : store_run(g, false, &b, &t->none[r]);
		rc = rc < 0 ? rc : raw_run(&rs, &t->raw[r]);
	}
	batch_free(&b);
	raw_free(&rs);
	return rc;
}

static int bench_a(void)
{
	uint64_t n = opt.quick ? 2000 : 20000;
	struct gen *g;
	struct a_times t;
	char label[80];
	if (make_gen(n, &g) < 0)
		return -EINVAL;
	int rc = a_measure(g, n, &t);
	gen_free(g);
	if (rc < 0)
		return rc;
	struct spread idx = spread_of(t.idx, opt.runs), none = spread_of(t.none, opt.runs),
		      raw = spread_of(t.raw, opt.runs);
	snprintf(label, sizeof(label), "%llu adds, 5 indexes, one txn", (unsigned long long)n);
	result(label, idx.med, idx.min, idx.max, opt.runs, "s");
	double budget = BUDGET_ADDS * (double)n / 20000;
	note("budget <= %.3f s%s (docs/DESIGN.md §9): %s", budget, n == 20000 ? "" : " (pro rata)",
	     idx.med <= budget ? "within budget" : "over budget");
	note("%.0f adds/s, %.2f us per add", (double)n / idx.med, idx.med * 1e6 / (double)n);
	snprintf(label, sizeof(label), "%llu adds, no index, one txn", (unsigned long long)n);
	result(label, none.med, none.min, none.max, opt.runs, "s");
	note("5 indexes cost %.2fx the unindexed adds", idx.med / none.med);
	snprintf(label, sizeof(label), "%llu raw LMDB puts (same keys), one txn",
		 (unsigned long long)n);
	result(label, raw.med, raw.min, raw.max, opt.runs, "s");
	note("idcache indexed adds take %.2fx raw LMDB; unindexed %.2fx", idx.med / raw.med,
	     none.med / raw.med);
	return 0;
}

/* ==== b: cost per add against store size ============================================= */

/* Add users 0..n-1 in batches of BATCH per txn; µs per add, clock running
 * only inside the transactions (batches are built with it stopped), and
 * the CPU µs (user + system) of the same adds: on a machine others load,
 * waiting for a core inflates the first and not the second. */
static int per_add(const struct gen *g, uint64_t n, double *us, double *cpu_us)
{
	char dir[PATH_MAX] = "";
	struct store *s = NULL;
	struct idc_diag d = {{0}};
	struct batch b = {0};
	double total = 0, cpu = 0;
	int rc = fresh_store(g, true, dir, sizeof(dir), &s, &d);
	for (uint64_t first = 0; rc == 0 && first < n; first += BATCH) {
		uint64_t m = n - first < BATCH ? n - first : BATCH;
		rc = batch_fill(&b, g, 3 + first, m, &d);
		double c0 = cpu_secs();
		uint64_t t0 = idc_now_ns();
		rc = rc < 0 ? rc : add_batch(s, 0, &b, &d);
		total += secs_since(t0);
		cpu += cpu_secs() - c0;
	}
	batch_free(&b);
	if (s)
		store_close(s);
	if (opt.keep && dir[0])
		printf("  kept store of %llu users grown by adds: %s\n", (unsigned long long)n,
		       dir);
	else
		scratch_rm_tree(dir);
	*us = total * 1e6 / (double)n;
	*cpu_us = cpu * 1e6 / (double)n;
	return rc < 0 ? fail(rc, &d, "per-add run") : 0;
}

/* With --store: BATCH users more added to that store of --users users,
 * in one transaction: the cost of an add at that size rather than the
 * mean over the store's growth. Not inlined: callgrind's
 * --toggle-collect=add_more counts the instructions of the adds. */
__attribute__((noinline)) static int add_more(struct store *s, struct batch *b, struct idc_diag *d)
{
	return add_batch(s, 0, b, d);
}

static int bench_b_more(void)
{
	struct gen *g;
	struct store *s = NULL;
	struct batch b = {0};
	struct idc_diag d = {{0}};
	char label[80];
	if (make_gen(opt.users + BATCH, &g) < 0)
		return -EINVAL;
	int rc = batch_fill(&b, g, 3 + opt.users, BATCH, &d);
	rc = rc < 0 ? rc : open_store(opt.store, true, 0, &s, &d);
	uint64_t t0 = idc_now_ns();
	rc = rc < 0 ? rc : add_more(s, &b, &d);
	double secs = secs_since(t0);
	if (s)
		store_close(s);
	batch_free(&b);
	gen_free(g);
	if (rc < 0)
		return fail(rc, &d, "adds to --store");
	snprintf(label, sizeof(label), "us per add, %d users added to %llu", BATCH,
		 (unsigned long long)opt.users);
	result(label, secs * 1e6 / BATCH, 0, 0, 1, "us");
	note("one transaction, commit included; the store in %s now holds them", opt.store);
	return 0;
}

static int bench_b(void)
{
	if (opt.store)
		return bench_b_more();
	static const uint64_t sizes[] = {1000, 10000, 100000, 1000000};
	size_t nsizes = opt.quick ? 2 : IDC_ARRAY_SIZE(sizes);
	double us[IDC_ARRAY_SIZE(sizes)], cpu[IDC_ARRAY_SIZE(sizes)], v[MAX_RUNS], c[MAX_RUNS];
	struct gen *g;
	char label[80];
	if (make_gen(sizes[nsizes - 1], &g) < 0)
		return -EINVAL;
	printf("  (indexed adds in batches of %d per transaction, users added to a store\n"
	       "   holding only the base entries; median of runs for sizes <= 10^4)\n",
	       BATCH);
	int rc = 0;
	for (size_t i = 0; rc == 0 && i < nsizes; i++) {
		unsigned runs = sizes[i] <= 10000 ? opt.runs : 1;
		for (unsigned r = 0; rc == 0 && r < runs; r++)
			rc = per_add(g, sizes[i], &v[r], &c[r]);
		if (rc < 0)
			break;
		struct spread sp = spread_of(v, runs), cp = spread_of(c, runs);
		us[i] = sp.med;
		cpu[i] = cp.med;
		snprintf(label, sizeof(label), "us per add, %llu entries",
			 (unsigned long long)sizes[i]);
		result(label, sp.med, sp.min, sp.max, runs, "us");
		note("CPU %.2f us per add (median; min %.2f, max %.2f)", cp.med, cp.min, cp.max);
	}
	gen_free(g);
	if (rc < 0)
		return rc;
	double lo = us[0], hi = us[0], clo = cpu[0], chi = cpu[0];
	for (size_t i = 1; i < nsizes; i++) {
		lo = us[i] < lo ? us[i] : lo;
		hi = us[i] > hi ? us[i] : hi;
		clo = cpu[i] < clo ? cpu[i] : clo;
		chi = cpu[i] > chi ? cpu[i] : chi;
	}
	result("flatness: largest / smallest us per add", hi / lo, hi / lo, hi / lo, 1, "x");
	note("goal (docs/DESIGN.md §9): flat from 10^3 to 10^6 entries; 1.0x is perfectly flat");
	result("flatness of the CPU us per add", chi / clo, chi / clo, chi / clo, 1, "x");
	return 0;
}

/* ==== c: LDIF import ===================================================================== */

/* Stores kept for later sections: c's import results serve d and e. */
static struct fixture {
	uint64_t users;
	char dir[PATH_MAX];
} fixtures[4];

static void fixtures_free(void)
{
	for (size_t i = 0; i < IDC_ARRAY_SIZE(fixtures); i++) {
		if (opt.keep && fixtures[i].users)
			printf("kept store of %llu users: %s\n",
			       (unsigned long long)fixtures[i].users, fixtures[i].dir);
		else
			scratch_rm_tree(fixtures[i].dir);
		fixtures[i] = (struct fixture){0};
	}
}

/* Keep dir as the store of `users` users (or remove it when full). */
static void fixture_keep(uint64_t users, const char *dir)
{
	for (size_t i = 0; i < IDC_ARRAY_SIZE(fixtures); i++) {
		if (fixtures[i].users == 0 || fixtures[i].users == users) {
			scratch_rm_tree(fixtures[i].dir);
			fixtures[i].users = users;
			snprintf(fixtures[i].dir, sizeof(fixtures[i].dir), "%s", dir);
			return;
		}
	}
	scratch_rm_tree(dir);
}

/* Write the LDIF of g into a new temporary file; its path in out. */
static int write_ldif(const struct gen *g, char *out, size_t cap)
{
	struct idc_diag d = {{0}};
	snprintf(out, cap, "%s/idcache-bench-XXXXXX.ldif", opt.tmp);
	int fd = mkstemps(out, 5);
	if (fd < 0)
		return fail(-errno, NULL, "mkstemps");
	FILE *f = fdopen(fd, "w");
	int rc = f ? gen_write_ldif(g, f, &d) : -errno;
	if ((f ? fclose(f) : close(fd)) != 0 && rc == 0)
		rc = -EIO;
	if (rc < 0) {
		unlink(out);
		return fail(rc, &d, out);
	}
	return 0;
}

/* Import ldif into a new indexed store in dir; time from open to commit. */
static int import_file(const char *ldif, const char *dir, double *secs, double *cpu,
		       uint64_t *count)
{
	struct idc_diag d = {{0}};
	struct store *s = NULL;
	struct ldif_import j = {.name = ldif};
	double c0 = cpu_secs();
	uint64_t t0 = idc_now_ns();
	j.f = fopen(ldif, "r");
	int rc = j.f ? 0 : -errno;
	rc = rc < 0 ? rc : open_store(dir, true, STORE_CREATE, &s, &d);
	rc = rc < 0 ? rc : store_write(s, STORE_TXN_BULK, ldif_import_fn, &j, &d);
	*secs = secs_since(t0);
	*cpu = cpu_secs() - c0;
	*count = j.records;
	if (s)
		store_close(s);
	if (j.f)
		fclose(j.f);
	return rc < 0 ? fail(rc, &d, "import") : 0;
}

/* Import users users `runs` times; the last store is kept as a fixture. */
static int import_size(uint64_t users, unsigned runs, struct spread *sp, double *cpu_share,
		       uint64_t *count)
{
	char ldif[PATH_MAX], dir[PATH_MAX] = "";
	double v[MAX_RUNS], cpu = 0, wall = 0, c;
	struct gen *g;
	if (make_gen(users, &g) < 0)
		return -EINVAL;
	int rc = write_ldif(g, ldif, sizeof(ldif));
	gen_free(g);
	if (rc < 0)
		return rc;
	for (unsigned r = 0; rc == 0 && r < runs; r++) {
		scratch_rm_tree(dir);
		rc = tmp_dir(dir, sizeof(dir), "import");
		rc = rc < 0 ? rc : import_file(ldif, dir, &v[r], &c, count);
		cpu += rc < 0 ? 0 : c;
		wall += rc < 0 ? 0 : v[r];
		v[r] = rc < 0 ? 0 : (double)*count / v[r];
	}
	if (rc == 0)
		fixture_keep(users, dir);
	else
		scratch_rm_tree(dir);
	unlink(ldif);
	*sp = rc == 0 ? spread_of(v, runs) : (struct spread){0};
	*cpu_share = wall > 0 ? cpu / wall : 0;
	return rc;
}

/* The store of `users` users, imported now unless a fixture has it. */
static int fixture_get(uint64_t users, const char **dir)
{
	for (int pass = 0; pass < 2; pass++) {
		for (size_t i = 0; i < IDC_ARRAY_SIZE(fixtures); i++) {
			if (fixtures[i].users == users) {
				*dir = fixtures[i].dir;
				return 0;
			}
		}
		struct spread sp;
		uint64_t count;
		double share;
		int rc = pass ? -ENOENT : import_size(users, 1, &sp, &share, &count);
		if (rc < 0)
			return rc;
	}
	return -ENOENT;
}

static int bench_c(void)
{
	uint64_t sizes[] = {opt.quick ? 10000 : 100000, 1000000};
	size_t nsizes = opt.quick ? 1 : 2;
	char label[80];
	printf("  (users + users/100 groups, file generated first and warm in the page cache;\n"
	       "   ldif_next + store_entry_from_pairs + store_add in one STORE_TXN_BULK txn)\n");
	for (size_t i = 0; i < nsizes; i++) {
		unsigned runs = sizes[i] >= 1000000 ? 1 : (opt.runs < 3 ? opt.runs : 3);
		struct spread sp;
		uint64_t count = 0;
		double share;
		int rc = import_size(sizes[i], runs, &sp, &share, &count);
		if (rc < 0)
			return rc;
		snprintf(label, sizeof(label), "import %llu entries (%llu users)",
			 (unsigned long long)count, (unsigned long long)sizes[i]);
		result(label, sp.med, sp.min, sp.max, runs, "entries/s");
		note("budget >= %d entries/s for 1M (docs/DESIGN.md §9; slapadd -q: 53,000/s): %s",
		     BUDGET_IMP, sp.med >= BUDGET_IMP ? "within budget" : "over budget");
		note("CPU busy %.0f%% of the wall time (the rest: waiting for the disk)",
		     share * 100);
	}
	return 0;
}

/* ==== d: indexed equality search ======================================================== */

struct search_thread {
	pthread_t tid;
	struct store *s;
	const struct gen *g;
	unsigned idx;
	bool preparsed;
	int per_txn; /* searches per read transaction */
	pthread_barrier_t *start;
	char (*text)[80];              /* SEARCH_POOL filter strings */
	struct store_filter **filters; /* the same, parsed (preparsed mode) */
	uint64_t ops, misses;
	double secs;
	double cpu; /* the thread's own CPU time over the same searches */
	int rc;
	struct idc_diag d;
};

static double thread_cpu_secs(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int count_cb(const struct store_entry *e, void *arg)
{
	(void)e;
	(*(uint64_t *)arg)++;
	return 0;
}

/* Random existing uids of this thread, as filter text and maybe parsed. */
static int search_pool(struct search_thread *st)
{
	uint64_t s = opt.seed * 1000003 + st->idx, users = gen_users(st->g);
	for (size_t i = 0; i < SEARCH_POOL; i++) {
		char name[64];
		s = s * 6364136223846793005ULL + 1442695040888963407ULL; /* LCG: enough here */
		gen_user_name(st->g, (s >> 17) % users, name, sizeof(name));
		snprintf(st->text[i], sizeof(st->text[i]), "(uid=%s)", name);
		if (!st->preparsed)
			continue;
		int rc =
		    store_filter_parse(st->text[i], strlen(st->text[i]), &st->filters[i], &st->d);
		if (rc < 0)
			return rc;
	}
	return 0;
}

/* One search of pool slot i: parse (unless preparsed), search, free. Not
 * inlined: `valgrind --tool=callgrind --toggle-collect=search_one` counts
 * the instructions of a search, and --toggle-collect=search_txn those of
 * a search with its read transaction around it (the "txn each" rows). */
__attribute__((noinline)) static int search_one(struct search_thread *st, struct store_txn *t,
						size_t i)
{
	struct store_filter *f = st->preparsed ? st->filters[i] : NULL;
	struct store_search q = {{PEOPLE, strlen(PEOPLE)}, STORE_SCOPE_SUB, NULL, 0};
	uint64_t found = 0;
	int rc = 0;
	if (!f)
		rc = store_filter_parse(st->text[i], strlen(st->text[i]), &f, &st->d);
	q.filter = f;
	rc = rc < 0 ? rc : store_search(t, &q, count_cb, &found, &st->d);
	if (!st->preparsed && f)
		store_filter_free(f);
	st->misses += found != 1;
	return rc;
}

/* One read transaction of st->per_txn searches from pool slot *slot on. */
__attribute__((noinline)) static int search_txn(struct search_thread *st, size_t *slot)
{
	struct store_txn *t = NULL;
	int rc = store_txn_begin(st->s, NULL, STORE_TXN_RDONLY, &t, &st->d);
	for (int k = 0; rc == 0 && k < st->per_txn; k++) {
		rc = search_one(st, t, *slot);
		*slot = (*slot + 1) % SEARCH_POOL;
		st->ops++;
	}
	if (t)
		store_txn_abort(t);
	return rc;
}

/* Searches in read transactions of per_txn searches until time is up. */
static int search_loop(struct search_thread *st)
{
	uint64_t t0 = idc_now_ns(), end = t0 + (uint64_t)(opt.seconds * 1e9);
	double c0 = thread_cpu_secs();
	size_t slot = 0;
	int rc = 0;
	while (rc == 0 && idc_now_ns() < end)
		rc = search_txn(st, &slot);
	st->secs = secs_since(t0);
	st->cpu = thread_cpu_secs() - c0;
	return rc;
}

static void *search_main(void *arg)
{
	struct search_thread *st = arg;
	st->text = calloc(SEARCH_POOL, sizeof(*st->text));
	st->filters = calloc(SEARCH_POOL, sizeof(*st->filters));
	st->rc = st->text && st->filters ? search_pool(st) : -ENOMEM;
	pthread_barrier_wait(st->start);
	if (st->rc == 0)
		st->rc = search_loop(st);
	for (size_t i = 0; st->filters && i < SEARCH_POOL; i++)
		store_filter_free(st->filters[i]);
	free(st->filters);
	free(st->text);
	return NULL;
}

/* Run nthreads searchers together; total searches/s (sum of each rate). */
/* *rate: searches/s of all threads together; *per_cpu: searches per second
 * of CPU time the searching threads got. On a machine others load, a
 * thread waits for a core and the first falls while the second does not;
 * contention inside the process (a lock, a shared cache line, malloc)
 * lowers both. */
static int search_run(struct store *s, const struct gen *g, unsigned nthreads, bool preparsed,
		      int per_txn, double *rate, double *per_cpu)
{
	struct search_thread st[8];
	pthread_barrier_t start;
	pthread_barrier_init(&start, NULL, nthreads);
	int rc = 0;
	for (unsigned i = 0; i < nthreads; i++) {
		st[i] = (struct search_thread){.s = s,
					       .g = g,
					       .idx = i,
					       .preparsed = preparsed,
					       .per_txn = per_txn,
					       .start = &start};
		if (pthread_create(&st[i].tid, NULL, search_main, &st[i]) != 0) {
			/* the started ones wait at the barrier for ever: stop here */
			fail(-EAGAIN, NULL, "pthread_create");
			exit(1);
		}
	}
	*rate = 0;
	double ops = 0, cpu = 0;
	for (unsigned i = 0; i < nthreads; i++) {
		pthread_join(st[i].tid, NULL);
		if (st[i].rc < 0 && rc == 0)
			rc = fail(st[i].rc, &st[i].d, "search");
		if (st[i].misses && rc == 0)
			rc = fail(-EIO, NULL, "search found not exactly one entry");
		*rate += st[i].secs > 0 ? (double)st[i].ops / st[i].secs : 0;
		ops += (double)st[i].ops;
		cpu += st[i].cpu;
	}
	*per_cpu = cpu > 0 ? ops / cpu : 0;
	pthread_barrier_destroy(&start);
	return rc;
}

static void search_report(unsigned threads, bool preparsed, int per_txn, double rate,
			  double per_cpu, long ncpu)
{
	char label[80];
	double cores = threads < ncpu ? threads : (double)ncpu;
	snprintf(label, sizeof(label), "uid=<random>, %u thread%s, %s%s", threads,
		 threads > 1 ? "s" : "", preparsed ? "pre-parsed" : "parse+search",
		 per_txn == 1 ? ", txn each" : "");
	result(label, rate, rate, rate, 1, "searches/s");
	note("%.0f per core (%g core%s busy); budget >= 1,000,000/s per core: %s", rate / cores,
	     cores, cores > 1 ? "s" : "",
	     rate / cores >= BUDGET_SRCH ? "within budget" : "over budget");
	note("%.0f per CPU-second the threads got (falling with more threads: contention "
	     "inside the process; steady: the machine is short of cores)",
	     per_cpu);
}

static int bench_d(void)
{
	static const unsigned threads[] = {1, 2, 4};
	uint64_t users = opt.users ? opt.users : opt.quick ? 10000 : 100000;
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	const char *dir = opt.store;
	struct store *s = NULL;
	struct gen *g = NULL;
	struct idc_diag d = {{0}};
	int rc = dir ? 0 : fixture_get(users, &dir);
	rc = rc < 0 ? rc : open_store(dir, true, STORE_RDONLY, &s, &d);
	if (rc < 0)
		return fail(rc, &d, "search store");
	rc = make_gen(users, &g);
	printf("  (%llu users; base %s, subtree; %.1f s per row; read txn renewed every %d\n"
	       "   searches, or for each (\"txn each\"); %ld CPUs online)\n",
	       (unsigned long long)users, PEOPLE, opt.seconds, RENEW_EVERY, ncpu);
	for (int pre = 0; rc == 0 && pre < 2; pre++) {
		for (size_t i = 0; rc == 0 && i < IDC_ARRAY_SIZE(threads); i++) {
			double rate, per_cpu;
			if ((opt.threads && threads[i] != opt.threads) ||
			    !strchr(opt.rows, pre ? 'P' : 'p'))
				continue;
			rc = search_run(s, g, threads[i], pre, RENEW_EVERY, &rate, &per_cpu);
			if (rc == 0)
				search_report(threads[i], pre, RENEW_EVERY, rate, per_cpu, ncpu);
		}
	}
	/* The daemon's pattern: a read transaction per lookup (batch). */
	for (unsigned n = 1; rc == 0 && n <= 2; n++) {
		double rate, per_cpu;
		if ((opt.threads && n != opt.threads) || !strchr(opt.rows, 't'))
			continue;
		rc = search_run(s, g, n, false, 1, &rate, &per_cpu);
		if (rc == 0)
			search_report(n, false, 1, rate, per_cpu, ncpu);
	}
	if (g)
		gen_free(g);
	store_close(s);
	return rc;
}

/* ==== e: LDIF export ======================================================================== */

struct export_job {
	struct idc_buf buf;
	int fd;
	uint64_t count;
};

/* Write out the buffer once it passes 1 MiB, as an exporter would. */
static int export_flush(struct export_job *j)
{
	size_t off = 0;
	while (off < j->buf.len) {
		ssize_t n = write(j->fd, j->buf.data + off, j->buf.len - off);
		if (n < 0 && errno != EINTR)
			return -errno;
		off += n > 0 ? (size_t)n : 0;
	}
	idc_buf_reset(&j->buf);
	return 0;
}

static int export_cb(const struct store_entry *e, void *arg)
{
	struct export_job *j = arg;
	int rc = ldif_write_entry(&j->buf, e, NULL, 0);
	j->count++;
	if (rc == 0 && j->buf.len >= (1u << 20))
		rc = export_flush(j);
	return rc;
}

/* Export the whole store at dir to /dev/null; entries/s. */
static int export_run(const char *dir, double *rate, uint64_t *count)
{
	struct idc_diag d = {{0}};
	struct store *s = NULL;
	struct store_txn *t = NULL;
	struct export_job j = {IDC_BUF_INIT, open("/dev/null", O_WRONLY | O_CLOEXEC), 0};
	struct store_search q = {{"", 0}, STORE_SCOPE_SUB, NULL, 0};
	int rc = j.fd < 0 ? -errno : open_store(dir, true, STORE_RDONLY, &s, &d);
	uint64_t t0 = idc_now_ns();
	rc = rc < 0 ? rc : store_txn_begin(s, NULL, STORE_TXN_RDONLY, &t, &d);
	rc = rc < 0 ? rc : store_search(t, &q, export_cb, &j, &d);
	rc = rc < 0 ? rc : export_flush(&j);
	double secs = secs_since(t0);
	if (t)
		store_txn_abort(t);
	if (s)
		store_close(s);
	if (j.fd >= 0)
		close(j.fd);
	idc_buf_free(&j.buf);
	*rate = secs > 0 ? (double)j.count / secs : 0;
	*count = j.count;
	return rc < 0 ? fail(rc, &d, "export") : 0;
}

static int bench_e(void)
{
	uint64_t sizes[] = {opt.quick ? 10000 : 100000, 1000000};
	size_t nsizes = opt.quick ? 1 : 2;
	char label[80];
	printf("  (search of the whole tree + ldif_write_entry into a 1 MiB buffer, written\n"
	       "   to /dev/null; the store is warm in the page cache)\n");
	for (size_t i = 0; i < nsizes; i++) {
		unsigned runs = sizes[i] >= 1000000 ? 1 : opt.runs;
		double v[MAX_RUNS];
		uint64_t count = 0;
		const char *dir;
		int rc = fixture_get(sizes[i], &dir);
		for (unsigned r = 0; rc == 0 && r < runs; r++)
			rc = export_run(dir, &v[r], &count);
		if (rc < 0)
			return rc;
		struct spread sp = spread_of(v, runs);
		snprintf(label, sizeof(label), "export %llu entries", (unsigned long long)count);
		result(label, sp.med, sp.min, sp.max, runs, "entries/s");
		note("budget >= %d entries/s (2x slapcat's 240,000/s, docs/DESIGN.md §9): %s",
		     BUDGET_EXP, sp.med >= BUDGET_EXP ? "within budget" : "over budget");
	}
	return 0;
}

/* ==== JSON ==================================================================================== */

static void json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c < 0x20)
			fprintf(f, "\\u%04x", c);
		else
			fputc(c, f);
	}
	fputc('"', f);
}

static void json_result(FILE *f, const struct result *r)
{
	fprintf(f, "    {\"section\": \"%c\", \"name\": ", r->sect);
	json_str(f, r->name);
	fprintf(f, ", \"value\": %.6g, \"min\": %.6g, \"max\": %.6g, \"unit\": ", r->value, r->min,
		r->max);
	json_str(f, r->unit);
	fprintf(f, ", \"runs\": %u, \"note\": ", r->runs);
	json_str(f, r->note);
	fprintf(f, "}");
}

static int write_json(const char *path, const char *durability)
{
	FILE *f = fopen(path, "w");
	if (!f)
		return fail(-errno, NULL, path);
	fprintf(f, "{\n  \"benchmark\": \"store_bench\",\n  \"quick\": %s,\n  \"durability\": ",
		opt.quick ? "true" : "false");
	json_str(f, durability);
	fprintf(f, ",\n  \"cpus\": %ld,\n  \"seed\": %llu,\n  \"results\": [\n",
		sysconf(_SC_NPROCESSORS_ONLN), (unsigned long long)opt.seed);
	for (size_t i = 0; i < nresults; i++) {
		json_result(f, &results[i]);
		fprintf(f, "%s\n", i + 1 < nresults ? "," : "");
	}
	fprintf(f, "  ]\n}\n");
	return fclose(f) == 0 ? 0 : fail(-EIO, NULL, path);
}

/* ==== main =====================================================================================
 */

static const struct section {
	char id;
	const char *title;
	int (*run)(void);
} sections[] = {
    {'a', "adds in one transaction: 5 indexes / no index / raw LMDB", bench_a},
    {'b', "cost per indexed add against store size", bench_b},
    {'c', "LDIF import", bench_c},
    {'d', "indexed equality search", bench_d},
    {'e', "LDIF export", bench_e},
};

static void usage(FILE *f)
{
	fprintf(f,
		"usage: store_bench [--quick] [--only a,b,c,d,e] [--json FILE] [--runs N]\n"
		"                   [--seconds S] [--nosync] [--seed S] [--keep]\n"
		"                   [--users N] [--store DIR] [--threads N] [--rows pPt]\n"
		"  --quick    small sizes (CI smoke, well under 20 s)\n"
		"  --only     sections: a adds/raw LMDB, b per-add cost, c import,\n"
		"             d search, e export\n"
		"  --json     also write the results as JSON to FILE\n"
		"  --runs     runs per median (default 5, quick 3; max %d)\n"
		"  --seconds  duration of each search row (default 1, quick 0.2)\n"
		"  --nosync   no fsync at commit (STORE_NOSYNC / MDB_NOSYNC)\n"
		"  --keep     leave the imported stores, and section b's (their paths are\n"
		"             printed)\n"
		"  --writemap open the stores STORE_WRITEMAP (as `db import` does)\n"
		"  --users    users of the store section d searches (default 100,000)\n"
		"  --store    section d searches this store (one --keep left, of --users\n"
		"             users and the same --seed) instead of importing one;\n"
		"             section b adds 10,000 more users to it (it is written)\n"
		"  --threads  section d: only the rows of N threads (1, 2 or 4); two\n"
		"             processes of --threads 1 side by side against one of\n"
		"             --threads 2 tell contention in the process from a busy machine\n"
		"  --rows     section d: p parse+search, P pre-parsed, t a read txn per\n"
		"             search (default all; one kind per run for callgrind)\n"
		"Temporary stores go under $TMPDIR (default /tmp).\n",
		MAX_RUNS);
}

/* "a,c" or "ac" -> section bits; 0 on a letter that names no section. */
static unsigned parse_only(const char *s)
{
	unsigned bits = 0;
	for (; *s; s++) {
		if (*s == ',')
			continue;
		if (*s < 'a' || *s >= 'a' + (int)IDC_ARRAY_SIZE(sections))
			return 0;
		bits |= 1u << (*s - 'a');
	}
	return bits;
}

static int parse_args(int argc, char **argv)
{
	static const struct option lo[] = {
	    {"quick", no_argument, NULL, 'q'},
	    {"only", required_argument, NULL, 'o'},
	    {"json", required_argument, NULL, 'j'},
	    {"runs", required_argument, NULL, 'r'},
	    {"seconds", required_argument, NULL, 's'},
	    {"nosync", no_argument, NULL, 'n'},
	    {"seed", required_argument, NULL, 'S'},
	    {"keep", no_argument, NULL, 'k'},
	    {"writemap", no_argument, NULL, 'w'},
	    {"users", required_argument, NULL, 'u'},
	    {"store", required_argument, NULL, 'D'},
	    {"threads", required_argument, NULL, 'T'},
	    {"rows", required_argument, NULL, 'R'},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	int c, runs = 0;
	double seconds = 0;
	while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		if (c == 'q')
			opt.quick = true;
		else if (c == 'o' && (opt.only = parse_only(optarg)) != 0)
			continue;
		else if (c == 'j')
			opt.json = optarg;
		else if (c == 'r' && (runs = atoi(optarg)) >= 1 && runs <= MAX_RUNS)
			continue;
		else if (c == 's' && (seconds = atof(optarg)) > 0)
			continue;
		else if (c == 'n')
			opt.nosync = true;
		else if (c == 'k')
			opt.keep = true;
		else if (c == 'w')
			opt.writemap = true;
		else if (c == 'S')
			opt.seed = strtoull(optarg, NULL, 10);
		else if (c == 'u' && (opt.users = strtoull(optarg, NULL, 10)) >= 100)
			continue;
		else if (c == 'D')
			opt.store = optarg;
		else if (c == 'R' && optarg[0] && strspn(optarg, "pPt") == strlen(optarg))
			opt.rows = optarg;
		else if (c == 'T' && (opt.threads = (unsigned)atoi(optarg)) >= 1 &&
			 opt.threads <= 4)
			continue;
		else
			return c == 'h' ? 1 : -EINVAL;
	}
	opt.runs = runs ? (unsigned)runs : opt.quick ? 3 : 5;
	opt.seconds = seconds > 0 ? seconds : opt.quick ? 0.2 : 1.0;
	return optind == argc ? 0 : -EINVAL;
}

static const char *durability(void)
{
	if (opt.writemap)
		return opt.nosync ? "no-sync, STORE_WRITEMAP (MDB_NOSYNC | MDB_WRITEMAP)"
				  : "durable, STORE_WRITEMAP (msync at every commit)";
	return opt.nosync ? "no-sync (STORE_NOSYNC / MDB_NOSYNC: no fsync at commit)"
			  : "durable (fsync at every commit, store and raw LMDB alike)";
}

static void header(void)
{
#ifdef NDEBUG
	const char *build = "release (NDEBUG)";
#else
	const char *build = "NOT a release build (assertions on): numbers are pessimistic";
#endif
	printf("idcache store benchmark%s\n", opt.quick ? " (--quick: small sizes)" : "");
	printf("  durability: %s\n  build: %s\n  temporary stores: %s   CPUs online: %ld\n",
	       durability(), build, opt.tmp, sysconf(_SC_NPROCESSORS_ONLN));
	printf("  indexes: uid cn objectClass uidNumber gidNumber (equality)\n");
}

int main(int argc, char **argv)
{
	int rc = parse_args(argc, argv);
	if (rc != 0) {
		usage(rc > 0 ? stdout : stderr);
		return rc > 0 ? 0 : 2;
	}
	opt.tmp = getenv("TMPDIR") && getenv("TMPDIR")[0] ? getenv("TMPDIR") : "/tmp";
	idc_log_init("store_bench", true, IDC_LOG_WARN);
	setvbuf(stdout, NULL, _IOLBF, 0);
	header();
	int failed = 0;
	for (size_t i = 0; i < IDC_ARRAY_SIZE(sections); i++) {
		if (opt.only && !(opt.only & (1u << i)))
			continue;
		cur_sect = sections[i].id;
		printf("\n%c) %s\n", sections[i].id, sections[i].title);
		uint64_t t0 = idc_now_ns();
		if (sections[i].run() < 0) {
			printf("  FAILED (see stderr)\n");
			failed = 1;
		}
		printf("  [section took %.1f s]\n", secs_since(t0));
	}
	fixtures_free();
	if (opt.json && write_json(opt.json, durability()) < 0)
		failed = 1;
	return failed;
}
