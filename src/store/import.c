/*
 * The import pipeline (docs/DESIGN.md §4 import): a reader thread parses
 * LDIF records into chunks, worker threads run the half of each add that
 * needs no transaction (store_add_prepare: the DN and every value
 * normalized and checked, the index keys, the encoded entry), and the
 * calling thread, which owns the write transaction, applies the chunks in
 * file order. Records other than adds are applied by the writer as
 * ldif_apply does. Chunks circulate in a ring of fixed size, so the records
 * in flight, and their memory, are bounded whatever the file's size.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "store_int.h"

#define CHUNK_RECS     256 /* records per chunk: one lock round trip each */
#define RING_CHUNKS    8   /* chunks in flight */
#define MAX_WORKERS    16
#define PREFETCH_AHEAD 4 /* adds: the bulk table slots of the add this far on are asked for */
#define SCRATCH_FIRST  ((size_t)16 << 10) /* bytes of a worker's entry arena */

/* Stores take about three times their LDIF; the map is address space, and
 * the data file stays sparse beyond what is written. */
#define MAP_PER_LDIF_BYTE 4
#define MAP_SLACK         ((uint64_t)64 << 20)
#define MAP_MIN           ((uint64_t)1 << 30)

size_t store_import_map_size(uint64_t ldif_bytes)
{
	uint64_t cap = SIZE_MAX / 2, want = MAP_MIN;
	if (ldif_bytes < (cap - MAP_SLACK) / MAP_PER_LDIF_BYTE)
		want = ldif_bytes * MAP_PER_LDIF_BYTE + MAP_SLACK;
	else
		want = cap;
	return (size_t)(want < MAP_MIN ? MAP_MIN : want);
}

enum chunk_state { CH_FREE, CH_READ, CH_PREPPING, CH_READY };

struct slot {
	struct ldif_record rec; /* copied into the chunk's arena */
	struct add_prep prep;   /* LDIF_ADD: store_add_prepare's result */
	int rc;                 /* and its code; diag says why */
	struct idc_diag diag;
};

struct chunk {
	enum chunk_state state;
	size_t n;
	struct slot *slots; /* CHUNK_RECS, reused with their buffers */
	struct idc_arena arena;
	uint64_t offset; /* reader's byte offset after slot n-1 */
	bool last;       /* the reader stopped after this chunk */
	int read_rc;     /* < 0: ldif_next failed after slot n-1 */
	struct idc_diag read_diag;
};

struct pipeline {
	const struct store *s;
	struct ldif_reader *r;
	pthread_mutex_t mu;
	pthread_cond_t cv; /* any chunk changed state, or stop */
	struct chunk ring[RING_CHUNKS];
	uint64_t nread, nprep; /* chunks handed on by the reader; taken by workers */
	bool read_done, stop;
};

/* ---- reader ------------------------------------------------------------------ */

/* Fill c from the reader: up to CHUNK_RECS records, or to the end or the
 * first error (kept in c to be reported in file order). */
static void chunk_fill(struct pipeline *p, struct chunk *c)
{
	idc_arena_reset(&c->arena);
	c->n = 0;
	c->read_rc = 0;
	c->last = false;
	while (c->n < CHUNK_RECS) {
		struct slot *sl = &c->slots[c->n];
		c->read_diag.msg[0] = '\0';
		int rc = ldif_next(p->r, &sl->rec, &c->read_diag);
		if (rc == 1 && ldif_record_copy(&c->arena, p->r, &sl->rec) != 0)
			rc = idc_diag_set(&c->read_diag, -ENOMEM, "out of memory");
		if (rc != 1) {
			c->read_rc = rc;
			c->last = true;
			break;
		}
		c->n++;
	}
	c->offset = ldif_offset(p->r);
}

static void *reader_main(void *arg)
{
	struct pipeline *p = arg;
	for (bool last = false; !last;) {
		pthread_mutex_lock(&p->mu);
		struct chunk *c = &p->ring[p->nread % RING_CHUNKS];
		while (!p->stop && c->state != CH_FREE)
			pthread_cond_wait(&p->cv, &p->mu);
		pthread_mutex_unlock(&p->mu);
		if (p->stop)
			break;
		chunk_fill(p, c);
		last = c->last;
		pthread_mutex_lock(&p->mu);
		c->state = CH_READ;
		p->nread++;
		p->read_done = last;
		pthread_cond_broadcast(&p->cv);
		pthread_mutex_unlock(&p->mu);
	}
	return NULL;
}

/* ---- workers ------------------------------------------------------------------- */

static void slot_prepare(const struct store *s, struct slot *sl, struct idc_arena *scratch)
{
	sl->rc = 0;
	if (sl->rec.change != LDIF_ADD)
		return;
	struct store_entry e;
	sl->diag.msg[0] = '\0';
	idc_arena_reset(scratch);
	sl->rc = store_entry_from_pairs_canon(scratch, sl->rec.dn, sl->rec.pairs, sl->rec.canon,
					      sl->rec.npairs, &e, &sl->diag);
	if (!sl->rc)
		sl->rc = store_add_prepare(s, &sl->prep, &e, &sl->diag);
}

/* The next chunk to prepare, or NULL when there is none and will be none. */
static struct chunk *worker_take(struct pipeline *p)
{
	pthread_mutex_lock(&p->mu);
	while (!p->stop && p->nprep == p->nread && !p->read_done)
		pthread_cond_wait(&p->cv, &p->mu);
	struct chunk *c = NULL;
	if (!p->stop && p->nprep < p->nread) {
		c = &p->ring[p->nprep++ % RING_CHUNKS];
		c->state = CH_PREPPING;
	}
	pthread_mutex_unlock(&p->mu);
	return c;
}

static void *worker_main(void *arg)
{
	struct pipeline *p = arg;
	struct idc_arena scratch = IDC_ARENA_INIT; /* the entry of one record */
	/* Reset keeps the arena's newest chunk: one that holds a whole entry
	 * from the start spares a malloc and a free per record. */
	if (idc_arena_alloc(&scratch, SCRATCH_FIRST))
		idc_arena_reset(&scratch);
	struct chunk *c;
	while ((c = worker_take(p)) != NULL) {
		for (size_t i = 0; i < c->n; i++)
			slot_prepare(p->s, &c->slots[i], &scratch);
		pthread_mutex_lock(&p->mu);
		c->state = CH_READY;
		pthread_cond_broadcast(&p->cv);
		pthread_mutex_unlock(&p->mu);
	}
	idc_arena_free(&scratch);
	return NULL;
}

/* ---- writer ---------------------------------------------------------------------- */

static int slot_apply(struct store_txn *t, struct slot *sl, const char *name,
		      struct idc_arena *scratch, struct idc_diag *d)
{
	if (sl->rec.change != LDIF_ADD)
		return ldif_apply(t, &sl->rec, name, scratch, d);
	int rc = sl->rc;
	if (rc) {
		memcpy(d->msg, sl->diag.msg, sizeof(d->msg));
	} else {
		d->msg[0] = '\0';
		rc = store_add_prepared(t, &sl->prep, sl->rec.dn, NULL, d);
	}
	if (rc)
		ldif_diag_record(d, rc, &sl->rec, name);
	return rc;
}

static int chunk_apply(struct store_txn *t, struct chunk *c, struct ldif_import *im,
		       struct idc_arena *scratch, struct idc_diag *d)
{
	for (size_t i = 0; i < c->n; i++) {
		const struct slot *ahead =
		    i + PREFETCH_AHEAD < c->n ? &c->slots[i + PREFETCH_AHEAD] : NULL;
		if (ahead && ahead->rec.change == LDIF_ADD && ahead->rc == 0)
			index_add_prefetch(t, &ahead->prep);
		int rc = slot_apply(t, &c->slots[i], im->name, scratch, d);
		if (rc)
			return rc;
		im->records++;
		if (im->progress && im->progress->tick)
			im->progress->tick(im->progress->arg, im->records, c->offset);
	}
	if (c->read_rc < 0)
		memcpy(d->msg, c->read_diag.msg, sizeof(d->msg));
	return c->read_rc < 0 ? c->read_rc : 0;
}

static int writer_run(struct pipeline *p, struct store_txn *t, struct ldif_import *im,
		      struct idc_diag *d)
{
	struct idc_arena scratch = IDC_ARENA_INIT;
	int rc = 0;
	for (uint64_t seq = 0;; seq++) {
		struct chunk *c = &p->ring[seq % RING_CHUNKS];
		pthread_mutex_lock(&p->mu);
		while (c->state != CH_READY)
			pthread_cond_wait(&p->cv, &p->mu);
		pthread_mutex_unlock(&p->mu);
		rc = chunk_apply(t, c, im, &scratch, d);
		bool last = c->last;
		pthread_mutex_lock(&p->mu);
		c->state = CH_FREE;
		p->stop |= rc != 0;
		pthread_cond_broadcast(&p->cv);
		pthread_mutex_unlock(&p->mu);
		if (rc || last)
			break;
	}
	idc_arena_free(&scratch);
	return rc;
}

/* ---- prefaulting the map ------------------------------------------------------------
 * With STORE_WRITEMAP each page the writer takes first is a page fault on
 * the data file (ext4 reserves its block there): a third of the writer's
 * time in a profile, on the one thread nothing else can help. A helper
 * thread makes those faults first (MADV_POPULATE_WRITE: the pages become
 * writable page-cache pages, their bytes unchanged), a window ahead of the
 * writer. LMDB takes new pages at the end of the file in order and writes
 * each one's number into its header as it takes it, so the first pages
 * past the committed end whose first bytes are still zero are where the
 * writer is; the helper stays at most PREFAULT_AHEAD past them, so at the
 * end at most that much of the file is zero pages made dirty (written by
 * the closing sync, then reused by the next pages the store takes).
 * Nothing the helper does changes a byte of the file, so what a kill
 * leaves is what it left without it. The helper reads page headers the
 * writer may be storing at that moment (relaxed atomic loads on its side):
 * a wrong guess only moves the window, never a byte. */
#define PREFAULT_AHEAD ((size_t)8 << 20)
#define PREFAULT_STEP  ((size_t)1 << 20)
#define PREFAULT_PEEK  8 /* zero pages skipped in a row (overflow pages) */

struct prefault {
	char *map;
	size_t psize, npages;
	size_t front; /* first page the writer has not reached, as far as known */
	size_t done;  /* pages [.., done) are prefaulted */
	_Atomic bool stop;
};

static bool page_used(const struct prefault *f, size_t pg)
{
	/* a relaxed read of bytes the writer may be storing: only a hint */
	const uint64_t *h = (const uint64_t *)(f->map + pg * f->psize);
	return __atomic_load_n(&h[0], __ATOMIC_RELAXED) != 0 ||
	       __atomic_load_n(&h[1], __ATOMIC_RELAXED) != 0;
}

/* Move front past the pages the writer has taken (within what is
 * prefaulted, so reading them faults nothing). */
static void prefault_track(struct prefault *f)
{
	while (f->front < f->done) {
		size_t k = 0;
		while (k < PREFAULT_PEEK && f->front + k < f->done && !page_used(f, f->front + k))
			k++;
		if (k == PREFAULT_PEEK || f->front + k == f->done)
			return;
		f->front += k + 1;
	}
}

static void *prefault_main(void *arg)
{
	struct prefault *f = arg;
	size_t ahead = PREFAULT_AHEAD / f->psize, step = PREFAULT_STEP / f->psize;
	while (!atomic_load(&f->stop)) {
		prefault_track(f);
		if (f->done < f->npages && f->done < f->front + ahead) {
			size_t n = f->npages - f->done < step ? f->npages - f->done : step;
			if (madvise(f->map + f->done * f->psize, n * f->psize, MADV_POPULATE_WRITE))
				break; /* an older kernel: the writer faults as before */
			f->done += n;
			continue;
		}
		struct timespec ts = {0, 1000000};
		nanosleep(&ts, NULL);
	}
	return NULL;
}

/* Where LMDB mapped the file (its API tells only a fixed address): a
 * record's bytes lie in a page of the map whose header starts with the
 * page's number; the two meta pages at the start confirm it. NULL when
 * they do not. */
static char *map_base(struct store_txn *t, size_t psize, size_t mapsize)
{
	MDB_val k = {6, "format"}, v;
	if (mdb_get(t->txn, t->s->meta, &k, &v))
		return NULL;
	uintptr_t page = (uintptr_t)v.mv_data & ~(uintptr_t)(psize - 1);
	uint64_t pgno;
	memcpy(&pgno, (const void *)page, sizeof(pgno));
	if (pgno == 0 || pgno >= mapsize / psize)
		return NULL;
	char *base = (char *)(page - pgno * psize);
	uint64_t m0, m1;
	memcpy(&m0, base, sizeof(m0));
	memcpy(&m1, base + psize, sizeof(m1));
	return m0 == 0 && m1 == 1 ? base : NULL;
}

/* Start the helper for t's store when it writes the map in place (and
 * the page header is LMDB 0.9's, which map_base and page_used read). */
static bool prefault_start(struct store_txn *t, struct prefault *f, pthread_t *th)
{
	MDB_envinfo info;
	MDB_stat st;
	int major, minor;
	mdb_version(&major, &minor, NULL);
	if (major != 0 || minor != 9)
		return false;
	if (!(t->s->flags & STORE_WRITEMAP) || mdb_env_info(t->s->env, &info) ||
	    mdb_env_stat(t->s->env, &st))
		return false;
	*f = (struct prefault){.map = map_base(t, st.ms_psize, info.me_mapsize),
			       .psize = st.ms_psize,
			       .npages = info.me_mapsize / st.ms_psize};
	if (!f->map)
		return false;
	f->front = f->done = info.me_last_pgno + 1;
	atomic_init(&f->stop, false);
	return pthread_create(th, NULL, prefault_main, f) == 0;
}

static void prefault_stop(struct prefault *f, pthread_t th)
{
	atomic_store(&f->stop, true);
	pthread_join(th, NULL);
}

/* ---- the pipeline ------------------------------------------------------------------ */

/* One preparing thread per CPU: preparing an add costs about twice what
 * the writer spends on it (id blocks made the writer's share small), so
 * the preparing threads, not the writer, are what more cores speed up;
 * the reader and the writer take their turns on the same cores. */
static unsigned workers_wanted(unsigned asked)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	unsigned n = asked ? asked : cpus > 0 ? (unsigned)cpus : 1;
	return n > MAX_WORKERS ? MAX_WORKERS : n;
}

static void pipeline_free(struct pipeline *p)
{
	for (size_t i = 0; i < RING_CHUNKS; i++) {
		struct chunk *c = &p->ring[i];
		for (size_t k = 0; c->slots && k < CHUNK_RECS; k++)
			store_add_prep_free(&c->slots[k].prep);
		free(c->slots);
		idc_arena_free(&c->arena);
	}
	pthread_cond_destroy(&p->cv);
	pthread_mutex_destroy(&p->mu);
}

static int pipeline_init(struct pipeline *p, const struct store *s, struct ldif_reader *r)
{
	*p = (struct pipeline){.s = s, .r = r};
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->cv, NULL);
	for (size_t i = 0; i < RING_CHUNKS; i++) {
		p->ring[i].arena = (struct idc_arena)IDC_ARENA_INIT;
		p->ring[i].slots = calloc(CHUNK_RECS, sizeof(struct slot));
		if (!p->ring[i].slots)
			return -ENOMEM;
	}
	return 0;
}

/* Tell the threads to stop and wait for them. */
static void pipeline_join(struct pipeline *p, pthread_t *th, size_t n)
{
	pthread_mutex_lock(&p->mu);
	p->stop = true;
	pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->mu);
	for (size_t i = 0; i < n; i++)
		pthread_join(th[i], NULL);
}

int ldif_import_run(struct store_txn *t, struct ldif_reader *r, struct ldif_import *im,
		    struct idc_diag *d)
{
	struct idc_diag local = {{0}};
	d = d ? d : &local;
	struct pipeline p;
	pthread_t th[MAX_WORKERS + 1];
	size_t nth = 0;
	unsigned nw = workers_wanted(im->workers);
	int rc = pipeline_init(&p, t->s, r);
	if (!rc && pthread_create(&th[nth], NULL, reader_main, &p) == 0)
		nth++;
	for (unsigned i = 0; !rc && nth > 0 && i < nw; i++)
		if (pthread_create(&th[nth], NULL, worker_main, &p) == 0)
			nth++;
	if (!rc && nth < 2)
		rc = -EAGAIN;
	struct prefault pf;
	pthread_t pf_th;
	bool pf_on = !rc && prefault_start(t, &pf, &pf_th);
	if (rc)
		idc_diag_set(d, rc, "%s: cannot start the import threads: %s", im->name,
			     idc_strerror(rc));
	else
		rc = writer_run(&p, t, im, d);
	pipeline_join(&p, th, nth);
	pipeline_free(&p);
	/* the index flush (the commit would run it) while the helper still
	 * prefaults: it takes a tenth of the store's pages */
	if (!rc && im->progress && im->progress->note)
		im->progress->note(im->progress->arg, "writing indexes");
	if (!rc && (rc = index_bulk_flush(t)) != 0 && rc != IDC_EMAPFULL)
		idc_diag_set(d, rc, "%s: writing the indexes: %s", im->name, idc_strerror(rc));
	if (pf_on)
		prefault_stop(&pf, pf_th);
	return rc;
}
