/*
 * `idcache db import` and `idcache db modify`: apply an LDIF file (entries
 * and changetype records) to the store.
 *
 * By default the whole file is one transaction: all of it or none of it.
 * store_write may run the transaction again after growing the map, so the
 * input must be readable twice: a file is re-opened, standard input is read
 * into memory first. With --batch N, every N records are committed on their
 * own (for files too large for one transaction); each batch is copied out of
 * the parser so that it, too, can be re-run.
 */
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ==== input ===================================================================== */

struct import_src {
	const char *path; /* as given; "-" is standard input */
	const char *name; /* in messages */
	char *mem;        /* standard input, read whole */
	size_t memlen;
	uint64_t size; /* bytes, 0 when unknown */
};

static int src_read_stdin(struct import_src *src)
{
	struct idc_buf b = IDC_BUF_INIT;
	for (;;) {
		if (idc_buf_reserve(&b, 1 << 16) != 0) {
			idc_buf_free(&b);
			return -ENOMEM;
		}
		size_t n = fread(b.data + b.len, 1, b.cap - b.len - 1, stdin);
		b.len += n;
		if (n == 0)
			break;
	}
	if (ferror(stdin)) {
		idc_buf_free(&b);
		return -EIO;
	}
	src->mem = b.data;
	src->memlen = b.len;
	src->size = b.len;
	return 0;
}

/* Check the input can be read (before the store is opened) and learn its
 * size. 0 or -errno. */
static int src_load(struct import_src *src, const char *path)
{
	*src = (struct import_src){path, path, NULL, 0, 0};
	if (strcmp(path, "-") == 0) {
		src->name = "stdin";
		return src_read_stdin(src);
	}
	FILE *f = fopen(path, "r");
	if (!f)
		return -errno;
	struct stat st;
	if (fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode))
		src->size = (uint64_t)st.st_size;
	fclose(f);
	return 0;
}

/* A fresh stream over the whole input, or NULL with errno set. */
static FILE *src_open(const struct import_src *src)
{
	if (!src->mem)
		return fopen(src->path, "r");
	if (src->memlen == 0) /* fmemopen refuses an empty buffer */
		return fopen("/dev/null", "r");
	return fmemopen(src->mem, src->memlen, "r");
}

/* ==== progress ===================================================================== */

#define NS_PER_S 1000000000ull

/* A progress line on a terminal's stderr once an import runs for more than
 * a second, rewritten in place twice a second. */
struct progress {
	bool enabled;
	bool shown;
	uint64_t start;
	uint64_t next; /* when to print again */
	uint64_t size; /* input bytes, 0 unknown */
};

static void progress_init(struct progress *p, bool quiet, uint64_t size)
{
	uint64_t now = idc_now_ns();
	*p = (struct progress){!quiet && isatty(STDERR_FILENO), false, now, now + NS_PER_S, size};
}

static void progress_tick(struct progress *p, uint64_t records, uint64_t offset)
{
	if (!p->enabled || (records & 255) != 0)
		return;
	uint64_t now = idc_now_ns();
	if (now < p->next)
		return;
	p->next = now + NS_PER_S / 2;
	p->shown = true;
	double secs = (double)(now - p->start) / 1e9;
	fprintf(stderr, "\r\033[Kimport: %llu records, %.0f records/s", (unsigned long long)records,
		(double)records / secs);
	if (p->size)
		fprintf(stderr, ", %.0f%%", 100.0 * (double)offset / (double)p->size);
	fflush(stderr);
}

static void progress_note(struct progress *p, const char *what)
{
	if (p->shown) {
		fprintf(stderr, "\r\033[Kimport: %s", what);
		fflush(stderr);
	}
}

static void progress_clear(struct progress *p)
{
	if (p->shown)
		fputs("\r\033[K", stderr);
	p->shown = false;
}

/* ==== applying records ================================================================ */

struct import_job {
	struct import_src src;
	struct progress prog;
	struct idc_arena scratch; /* entry built from one record */
	uint64_t records;         /* applied in the current (or last) attempt */
	uint64_t committed;       /* --batch: records in committed batches */
	size_t batch;             /* 0: one transaction */
	unsigned txn_flags;
};

/* ==== one transaction ==================================================================== */

static int open_reader(struct import_job *job, FILE **f, struct ldif_reader **r, struct idc_diag *d)
{
	*f = src_open(&job->src);
	if (!*f)
		return idc_diag_set(d, -errno, "%s: %s", job->src.name, strerror(errno));
	int rc = ldif_open(*f, job->src.name, r);
	if (rc != 0) {
		fclose(*f);
		return idc_diag_set(d, rc, "%s: %s", job->src.name, idc_strerror(rc));
	}
	return 0;
}

static void import_tick(void *arg, uint64_t records, uint64_t offset)
{
	struct import_job *job = arg;
	progress_tick(&job->prog, records, offset);
}

static void import_note(void *arg, const char *what)
{
	struct import_job *job = arg;
	progress_note(&job->prog, what);
}

/* The whole input in one transaction: the store's own import step, which
 * store_write may run again (it rewinds the stream) and which notes when it
 * writes the indexes, then a note while the commit syncs. */
struct import_all {
	struct import_job *job;
	struct ldif_import im;
};

static int import_all_fn(struct store_txn *t, void *arg, struct idc_diag *d)
{
	struct import_all *a = arg;
	int rc = ldif_import_fn(t, &a->im, d);
	a->job->records = a->im.records;
	if (rc == 0)
		progress_note(&a->job->prog, "syncing");
	return rc;
}

static int import_all(struct store *s, struct import_job *job, struct idc_diag *d)
{
	struct ldif_progress p = {import_tick, job, import_note};
	struct import_all a = {job, {src_open(&job->src), job->src.name, &p, 0}};
	if (!a.im.f)
		return idc_diag_set(d, -errno, "%s: %s", job->src.name, strerror(errno));
	int rc = store_write(s, job->txn_flags, import_all_fn, &a, d);
	fclose(a.im.f);
	return rc;
}

/* ==== batches ============================================================================== */

/* Records of one batch, copied out of the parser into arena. */
struct batch {
	struct ldif_record *recs;
	size_t n;
	struct idc_arena arena;
	struct import_job *job;
};

/* store_txn_fn: one batch. Re-runnable: the records are our own copies. */
static int import_batch_fn(struct store_txn *t, void *arg, struct idc_diag *d)
{
	struct batch *b = arg;
	for (size_t i = 0; i < b->n; i++) {
		int rc = ldif_apply(t, &b->recs[i], b->job->src.name, &b->job->scratch, d);
		if (rc != 0)
			return rc;
	}
	return 0;
}

/* Read up to job->batch records into b. 1 when records were read, 0 at
 * the end of the input, or a negative error with d set. */
static int batch_fill(struct batch *b, struct ldif_reader *r, struct idc_diag *d)
{
	idc_arena_reset(&b->arena);
	b->n = 0;
	int rc = 0;
	while (b->n < b->job->batch && (rc = ldif_next(r, &b->recs[b->n], d)) == 1) {
		if (ldif_record_copy(&b->arena, r, &b->recs[b->n]) != 0)
			return idc_diag_set(d, -ENOMEM, "out of memory");
		b->n++;
		progress_tick(&b->job->prog, b->job->committed + b->n, ldif_offset(r));
	}
	return rc < 0 ? rc : b->n > 0;
}

static int import_batches(struct store *s, struct import_job *job, struct ldif_reader *r,
			  struct idc_diag *d)
{
	struct batch b = {NULL, 0, IDC_ARENA_INIT, job};
	if (!(b.recs = calloc(job->batch, sizeof(*b.recs))))
		return idc_diag_set(d, -ENOMEM, "out of memory for --batch %zu", job->batch);
	int rc;
	while ((rc = batch_fill(&b, r, d)) == 1) {
		if ((rc = store_write(s, job->txn_flags, import_batch_fn, &b, d)) != 0)
			break;
		job->committed += b.n;
	}
	job->records = job->committed;
	free(b.recs);
	idc_arena_free(&b.arena);
	return rc;
}

/* store_write can't hold a reader across batches, so batches get theirs here. */
static int import_batched(struct store *s, struct import_job *job, struct idc_diag *d)
{
	FILE *f;
	struct ldif_reader *r;
	int rc = open_reader(job, &f, &r, d);
	if (rc != 0)
		return rc;
	rc = import_batches(s, job, r, d);
	ldif_close(r);
	fclose(f);
	return rc;
}

/* ==== the commands ========================================================================== */

struct import_opts {
	bool quiet;
	size_t batch;
	const char *path;
};

static int import_parse(struct db_ctx *ctx, int argc, char **argv, struct import_opts *o)
{
	static const struct option longopts[] = {
	    {"dir", required_argument, NULL, 'd'},
	    {"help", no_argument, NULL, 'h'},
	    {"quiet", no_argument, NULL, 'q'},
	    {"batch", required_argument, NULL, 'B'},
	    {NULL, 0, NULL, 0},
	};
	int opt, rc;
	while ((opt = getopt_long(argc, argv, "d:hq", longopts, NULL)) != -1) {
		if (opt == 'q') {
			o->quiet = true;
		} else if (opt == 'B') {
			if (cli_parse_size(optarg, &o->batch) != 0 || o->batch == 0) {
				fprintf(stderr,
					"idcache: %s: --batch: '%s' is not a positive number\n",
					ctx->name, optarg);
				return db_usage(ctx);
			}
		} else if ((rc = db_other_opt(ctx, opt)) >= 0) {
			return rc;
		}
	}
	if (argc - optind != 1)
		return db_usage(ctx);
	o->path = argv[optind];
	return -1;
}

/* The one-line report of a failed import: where, why and what was kept. */
static int import_failed(struct db_ctx *ctx, const struct import_job *job, int rc,
			 struct idc_diag *d)
{
	idc_diag_complete(d, rc);
	if (rc == -EBUSY) /* d says who holds the store */
		return cli_err("%s: %s", ctx->name, d->msg);
	if (job->batch)
		return cli_err("%s %s (%llu records before it were committed)", ctx->name, d->msg,
			       (unsigned long long)job->committed);
	return cli_err("%s %s (nothing was changed)", ctx->name, d->msg);
}

static void import_summary(const struct db_ctx *ctx, const struct import_job *job)
{
	double secs = (double)(idc_now_ns() - job->prog.start) / 1e9;
	const char *verb = strcmp(ctx->name, "import") == 0 ? "imported" : "applied";
	const char *what = strcmp(ctx->name, "import") == 0 ? "entries" : "changes";
	fprintf(stderr, "%s %llu %s in %.2f s (%.0f %s/s)\n", verb,
		(unsigned long long)job->records, what, secs,
		secs > 0 ? (double)job->records / secs : 0.0, what);
}

/* A whole-file import writes the map in place (STORE_WRITEMAP) into a map
 * sized for the file (docs/DESIGN.md §4.1); batches and modify stay on the
 * ordinary path. */
static int import_open(struct db_ctx *ctx, const struct import_job *job)
{
	if (job->batch || !(job->txn_flags & STORE_TXN_BULK))
		return db_open(ctx, 0);
	return db_open_sized(ctx, STORE_WRITEMAP, store_import_map_size(job->src.size));
}

static int run_import(struct db_ctx *ctx, int argc, char **argv, unsigned txn_flags)
{
	struct import_opts o = {0};
	int rc = import_parse(ctx, argc, argv, &o);
	if (rc >= 0)
		return rc;
	struct import_job job = {.batch = o.batch, .txn_flags = txn_flags};
	int lrc = src_load(&job.src, o.path);
	if (lrc != 0)
		return cli_fail(lrc, NULL, "%s: cannot read %s", ctx->name, o.path);
	if ((rc = import_open(ctx, &job)) != CLI_OK)
		goto out;
	progress_init(&job.prog, o.quiet, job.src.size);
	struct idc_diag d = {{0}};
	if (job.batch)
		lrc = import_batched(ctx->store, &job, &d);
	else
		lrc = import_all(ctx->store, &job, &d);
	progress_clear(&job.prog);
	if (lrc != 0)
		rc = import_failed(ctx, &job, lrc, &d);
	else if (!o.quiet)
		import_summary(ctx, &job);
out:
	idc_arena_free(&job.scratch);
	free(job.src.mem);
	return rc;
}

int db_cmd_import(struct db_ctx *ctx, int argc, char **argv)
{
	return run_import(ctx, argc, argv, STORE_TXN_BULK);
}

int db_cmd_modify(struct db_ctx *ctx, int argc, char **argv)
{
	/* changes to a few entries: the ordinary write path, not the bulk one */
	return run_import(ctx, argc, argv, 0);
}
