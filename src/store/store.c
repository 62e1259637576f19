/* store: the LMDB environment, its named databases, transactions, meta and
 * map growth. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/sysmacros.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "store_int.h"

_Static_assert(sizeof(size_t) == sizeof(uint64_t), "ids are stored as size_t integer keys");

#define DEFAULT_MAP ((size_t)1 << 30)
#define MAX_GROWS   16

/* Whether the write transaction open in this thread (one writer per
 * store, and LMDB keeps a write transaction to its thread) met a full
 * map. LMDB answers every later call on a failed transaction with
 * MDB_BAD_TXN; after a full map that must still say "full", so that the
 * caller grows the map even when the call that met it first was one whose
 * error its caller set aside (a search flushing pending index writes, asked
 * only to log). Reset when a write transaction begins. */
static _Thread_local bool txn_met_full;

int store_mdb_err(int rc)
{
	switch (rc) {
	case 0:
		return 0;
	case MDB_MAP_FULL:
	case MDB_TXN_FULL:
		txn_met_full = true;
		return IDC_EMAPFULL;
	case MDB_NOTFOUND:
		return -ENOENT;
	case MDB_KEYEXIST:
		return -EEXIST;
	case MDB_BAD_TXN:
		return txn_met_full ? IDC_EMAPFULL : IDC_ECORRUPT;
	case MDB_CORRUPTED:
	case MDB_PAGE_NOTFOUND:
	case MDB_INVALID:
		return IDC_ECORRUPT;
	case MDB_VERSION_MISMATCH:
		return IDC_EVERSION;
	case MDB_READERS_FULL:
		return -EAGAIN;
	case MDB_BAD_VALSIZE:
		return -E2BIG;
	default:
		return rc > 0 ? -rc : -EIO;
	}
}

int store_lmdb_err(const char *path, int rc)
{
	/* LMDB reports a short write as EIO ("filesystem full?"): a disk that
	 * fills in the middle of a commit. Say so when it is. */
	struct statvfs vfs;
	if (rc == EIO && path && statvfs(path, &vfs) == 0 &&
	    (uint64_t)vfs.f_bavail * vfs.f_frsize < ((uint64_t)1 << 20))
		return -ENOSPC;
	return store_mdb_err(rc);
}

/* ---- meta ------------------------------------------------------------------- */

static int meta_get_u64(MDB_txn *txn, MDB_dbi dbi, const char *k, uint64_t *v)
{
	MDB_val key = {strlen(k), (void *)k}, val;
	int rc = mdb_get(txn, dbi, &key, &val);
	if (rc)
		return store_mdb_err(rc);
	if (val.mv_size != sizeof(*v))
		return IDC_ECORRUPT;
	memcpy(v, val.mv_data, sizeof(*v));
	return 0;
}

static int meta_put_u64(MDB_txn *txn, MDB_dbi dbi, const char *k, uint64_t v)
{
	MDB_val key = {strlen(k), (void *)k}, val = {sizeof(v), &v};
	return store_mdb_err(mdb_put(txn, dbi, &key, &val, 0));
}

/* A new store: format version and first id; the index list from opt. */
static int store_init_meta(struct store *s, MDB_txn *txn, const struct store_options *opt,
			   struct idc_diag *d)
{
	int rc = meta_put_u64(txn, s->meta, "format", STORE_FORMAT_VERSION);
	if (!rc)
		rc = meta_put_u64(txn, s->meta, "next_id", 1);
	if (rc)
		return rc;
	struct idc_buf list = IDC_BUF_INIT;
	char canon[STORE_ATTR_MAX];
	for (size_t i = 0; i < opt->nindexes && !rc; i++) {
		size_t n = store_attr_canon(opt->indexes[i], strlen(opt->indexes[i]), canon);
		if (n == 0) {
			rc = idc_diag_set(d, IDC_ESYNTAX,
					  "invalid attribute name '%s' in index list",
					  opt->indexes[i]);
			break;
		}
		if (list.len)
			rc = idc_buf_putc(&list, ',');
		if (!rc)
			rc = idc_buf_append(&list, canon, n);
	}
	if (!rc) {
		MDB_val key = {7, "indexes"}, val = {list.len, list.data ? list.data : ""};
		rc = store_mdb_err(mdb_put(txn, s->meta, &key, &val, 0));
	}
	idc_buf_free(&list);
	return rc;
}

static int store_open_dbs(struct store *s, MDB_txn *txn, bool create)
{
	unsigned c = create ? MDB_CREATE : 0;
	int rc = mdb_dbi_open(txn, "id2entry", c | MDB_INTEGERKEY, &s->id2entry);
	if (!rc)
		rc = mdb_dbi_open(txn, "dn2id", c, &s->dn2id);
	if (!rc)
		rc = mdb_dbi_open(txn, "meta", c, &s->meta);
	return rc == MDB_NOTFOUND ? IDC_ENOTSTORE : store_mdb_err(rc);
}

/* The index databases, once the format is known to be this build's (an
 * older store's were made with other flags). */
static int store_open_indexes(struct store *s, MDB_txn *txn, bool create)
{
	int rc = mdb_dbi_open(txn, "pres", (create ? MDB_CREATE : 0) | INDEX_DB_FLAGS, &s->pres);
	if (rc)
		return rc == MDB_NOTFOUND ? IDC_ECORRUPT : store_mdb_err(rc);
	return index_load(s, txn);
}

/* ---- open / close ---------------------------------------------------------------- */

/* Mode of the files the store creates. */
static mode_t store_file_mode(unsigned flags)
{
	return (flags & STORE_PRIVATE) ? 0600 : 0644;
}

int store_lmdb_lock_reserve(const char *lock, unsigned max_readers, mode_t mode)
{
	int fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, mode);
	if (fd < 0)
		return errno == ENOSPC || errno == EDQUOT || errno == EISDIR ? -errno : 0;
	/* LMDB 0.9: a header of three 64-byte cache lines, then 64 bytes a
	 * reader; more than it needs is fine (it takes the file's size). A
	 * larger file keeps its size: readers take the lowest free slots. */
	off_t want = ((off_t)max_readers * 64 + 256 + 4095) & ~(off_t)4095;
	struct stat st;
	int rc = 0;
	if (fstat(fd, &st) == 0 && !S_ISREG(st.st_mode))
		rc = -EINVAL; /* a FIFO or a device: LMDB cannot use it either */
	else if (fallocate(fd, 0, 0, want) < 0 && (errno == ENOSPC || errno == EDQUOT))
		rc = -errno;
	close(fd);
	return rc;
}

static int store_env_create(struct store *s, const struct store_options *opt, struct idc_diag *d)
{
	int rc = mdb_env_create(&s->env);
	if (rc)
		return idc_diag_set(d, store_mdb_err(rc), "cannot create LMDB environment");
	mdb_env_set_maxdbs(s->env, 4 + STORE_MAX_INDEXES);
	unsigned readers = opt->max_readers ? opt->max_readers : 126;
	mdb_env_set_maxreaders(s->env, readers);
	s->map_size = opt->map_size ? opt->map_size : DEFAULT_MAP;
	mdb_env_set_mapsize(s->env, s->map_size);
	unsigned flags = MDB_NOTLS | MDB_NORDAHEAD;
	if (opt->flags & STORE_RDONLY)
		flags |= MDB_RDONLY;
	if (opt->flags & STORE_NOSYNC)
		flags |= MDB_NOSYNC;
	if ((opt->flags & STORE_WRITEMAP) && !(opt->flags & STORE_RDONLY))
		flags |= MDB_WRITEMAP;
	char lock[4200];
	snprintf(lock, sizeof(lock), "%s/lock.mdb", s->dir);
	rc = store_lmdb_lock_reserve(lock, readers, store_file_mode(opt->flags));
	if (rc)
		return idc_diag_set(d, rc, "%s: %s", lock,
				    rc == -EINVAL ? "not a regular file" : idc_strerror(rc));
	rc = mdb_env_open(s->env, s->dir, flags, store_file_mode(opt->flags));
	if (rc == MDB_INVALID || rc == MDB_VERSION_MISMATCH)
		return idc_diag_set(d, IDC_ENOTSTORE, "%s: data.mdb is not an LMDB store", s->dir);
	if (rc)
		return idc_diag_set(d, store_mdb_err(rc), "%s: cannot open store: %s", s->dir,
				    mdb_strerror(rc));
	MDB_envinfo info;
	mdb_env_info(s->env, &info);
	s->map_size = info.me_mapsize;
	return 0;
}

/* Open the named databases, write meta on a new store, check the format. */
static int store_load(struct store *s, const struct store_options *opt, bool fresh,
		      struct idc_diag *d)
{
	bool rdonly = opt->flags & STORE_RDONLY;
	MDB_txn *txn;
	int rc = mdb_txn_begin(s->env, NULL, rdonly ? MDB_RDONLY : 0, &txn);
	if (rc)
		return idc_diag_set(d, store_mdb_err(rc), "%s: %s", s->dir, mdb_strerror(rc));
	rc = store_open_dbs(s, txn, fresh && !rdonly);
	if (!rc && fresh)
		rc = store_init_meta(s, txn, opt, d);
	uint64_t fmt = 0;
	if (!rc)
		rc = meta_get_u64(txn, s->meta, "format", &fmt);
	if (rc == -ENOENT)
		rc = IDC_ENOTSTORE;
	if (!rc && fmt != STORE_FORMAT_VERSION)
		rc = idc_diag_set(d, IDC_EVERSION,
				  "%s: store format %llu, this build reads %d (export it with the "
				  "idcache that wrote it, then init a new store and import)",
				  s->dir, (unsigned long long)fmt, STORE_FORMAT_VERSION);
	if (!rc)
		rc = store_open_indexes(s, txn, fresh && !rdonly);
	if (rc) {
		mdb_txn_abort(txn);
		if (rc == IDC_ENOTSTORE)
			idc_diag_set(d, rc, "%s: not an idcache store", s->dir);
		return rc;
	}
	rc = store_mdb_err(mdb_txn_commit(txn));
	if (!rdonly && fresh)
		s->commits++;
	return rc;
}

static int store_check_dir(const char *dir, const struct store_options *opt, bool *fresh,
			   struct idc_diag *d)
{
	struct stat st;
	if (stat(dir, &st) < 0)
		return idc_diag_set(d, -errno, "%s: %s", dir, strerror(errno));
	if (!S_ISDIR(st.st_mode))
		return idc_diag_set(d, -ENOTDIR, "%s: not a directory", dir);
	char path[4096];
	snprintf(path, sizeof(path), "%s/data.mdb", dir);
	*fresh = access(path, F_OK) != 0;
	if (*fresh && !(opt->flags & STORE_CREATE))
		return idc_diag_set(d, IDC_ENOTSTORE, "%s: no store here (create one with init)",
				    dir);
	if (*fresh && (opt->flags & STORE_RDONLY))
		return idc_diag_set(d, IDC_ENOTSTORE, "%s: no store here", dir);
	if (!(opt->flags & STORE_RDONLY) && access(dir, W_OK) != 0)
		return idc_diag_set(d, -errno, "%s: %s", dir, strerror(errno));
	return 0;
}

static int store_open_lock(struct store *s, struct idc_diag *d)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/write.lock", s->dir);
	s->lockfd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, store_file_mode(s->flags));
	if (s->lockfd < 0)
		return idc_diag_set(d, -errno, "%s: %s", path, strerror(errno));
	return 0;
}

int store_open(const char *dir, const struct store_options *opt, struct store **out,
	       struct idc_diag *d)
{
	static const struct store_options defaults = {0};
	if (!opt)
		opt = &defaults;
	bool fresh;
	int rc = store_check_dir(dir, opt, &fresh, d);
	if (rc)
		return rc;
	struct store *s = calloc(1, sizeof(*s));
	if (!s || !(s->dir = strdup(dir))) {
		free(s);
		return -ENOMEM;
	}
	s->lockfd = -1;
	s->flags = opt->flags;
	s->max_readers = opt->max_readers;
	pthread_mutex_init(&s->heal_mu, NULL);
	rc = store_env_create(s, opt, d);
	if (!rc && !(opt->flags & STORE_RDONLY))
		rc = store_open_lock(s, d);
	if (!rc)
		rc = store_load(s, opt, fresh, d);
	if (rc) {
		store_close(s);
		return rc;
	}
	*out = s;
	return 0;
}

static void spare_drop(struct store *s);

void store_close(struct store *s)
{
	if (!s)
		return;
	spare_drop(s);
	if (s->env)
		mdb_env_close(s->env);
	if (s->lockfd >= 0)
		close(s->lockfd);
	pthread_mutex_destroy(&s->heal_mu);
	free(s->dir);
	free(s);
}

uint64_t store_commit_count(const struct store *s)
{
	return s->commits;
}

/* The maps of the data file, from one line of /proc/self/maps; whether
 * the line is one. */
static bool data_map_line(const char *line, const struct stat *st, unsigned long *lo,
			  unsigned long *hi)
{
	unsigned long ino;
	unsigned maj, min;
	char perms[5];
	if (sscanf(line, "%lx-%lx %4s %*x %x:%x %lu", lo, hi, perms, &maj, &min, &ino) != 6)
		return false;
	/* read-only: a map written in place holds dirty pages */
	return ino == st->st_ino && makedev(maj, min) == st->st_dev && perms[1] != 'w' && *hi > *lo;
}

/* madvise holds the process's map lock while it unmaps: a gigabyte at
 * once kept another thread's page fault or munmap waiting (spinning) for
 * tens of milliseconds. In steps, the lock is let go of between them. */
#define STORE_RELEASE_STEP (16ul << 20)

static int release_range(unsigned long lo, unsigned long hi)
{
	for (unsigned long a = lo; a < hi; a += STORE_RELEASE_STEP) {
		unsigned long n = hi - a < STORE_RELEASE_STEP ? hi - a : STORE_RELEASE_STEP;
		if (madvise((void *)a, n, MADV_DONTNEED) < 0)
			return -errno;
	}
	return 0;
}

static int env_enter(struct store *s, struct idc_diag *d);
static void env_leave(struct store *s);

int store_map_release(struct store *s)
{
	int fd;
	struct stat st;
	if (s->flags & STORE_WRITEMAP)
		return 0;
	/* entered throughout: a reopen meanwhile would unmap what is released */
	int rc = env_enter(s, NULL);
	if (rc)
		return rc;
	FILE *f = NULL;
	if (mdb_env_get_fd(s->env, &fd) || fstat(fd, &st))
		rc = -EIO;
	/* LMDB does not say where it mapped the file (mdb_env_info's
	 * me_mapaddr is the address stored for MDB_FIXEDMAP, NULL here) */
	else if (!(f = fopen("/proc/self/maps", "re")))
		rc = -errno;
	if (rc) {
		env_leave(s);
		return rc;
	}
	char line[512];
	bool head = true; /* line begins a line of the file (not a long one's rest) */
	while (fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;
		int r = head && data_map_line(line, &st, &lo, &hi) ? release_range(lo, hi) : 0;
		rc = rc ? rc : r;
		head = strchr(line, '\n') != NULL;
	}
	fclose(f);
	env_leave(s);
	return rc;
}

static _Thread_local unsigned env_held;

/* LMDB remaps whatever read transactions other threads hold, and the
 * entries and cursors they hold point into the old map: the grow turns
 * new uses away (they wait on heal_mu, or fail with -EAGAIN in a thread
 * that holds one itself, which the grow would wait for) and waits for
 * those open to end. */
#define GROW_WAIT_MS 2000

int store_grow(struct store *s)
{
	if (s->map_size > SIZE_MAX / 2)
		return -ENOMEM;
	if (env_held)
		return -EBUSY; /* a transaction of this thread is open */
	size_t size = s->map_size * 2;
	int rc = env_enter(s, NULL); /* a fatal environment is reopened first */
	if (rc)
		return rc;
	env_leave(s);
	pthread_mutex_lock(&s->heal_mu);
	atomic_store(&s->hold, true);
	for (int ms = 0; atomic_load(&s->users) != 0; ms++) {
		if (ms == GROW_WAIT_MS) {
			rc = -EBUSY;
			break;
		}
		struct timespec tick = {0, 1000000};
		nanosleep(&tick, NULL);
	}
	if (!rc && atomic_load(&s->fatal))
		rc = -EIO;
	if (!rc) {
		spare_drop(s); /* nothing kept across the remap */
		rc = store_mdb_err(mdb_env_set_mapsize(s->env, size));
	}
	if (!rc)
		s->map_size = size;
	atomic_store(&s->hold, false);
	pthread_mutex_unlock(&s->heal_mu);
	return rc;
}

size_t store_map_size(const struct store *s)
{
	return s->map_size;
}

/* ---- transactions --------------------------------------------------------------- */

static int store_lock_writer(struct store *s, struct idc_diag *d)
{
	if (flock(s->lockfd, LOCK_EX | LOCK_NB) == 0) {
		char pid[32];
		int n = snprintf(pid, sizeof(pid), "%ld\n", (long)getpid());
		if (ftruncate(s->lockfd, 0) == 0 && pwrite(s->lockfd, pid, (size_t)n, 0) < 0)
			idc_log(IDC_LOG_DEBUG, "%s/write.lock: cannot record pid", s->dir);
		return 0;
	}
	if (errno != EWOULDBLOCK)
		return idc_diag_set(d, -errno, "%s/write.lock: %s", s->dir, strerror(errno));
	char pid[32] = "";
	ssize_t n = pread(s->lockfd, pid, sizeof(pid) - 1, 0);
	if (n > 0)
		pid[strcspn(pid, "\n")] = '\0';
	return idc_diag_set(d, -EBUSY, "%s: another process%s%s is writing to the store", s->dir,
			    n > 0 ? " (pid " : "", n > 0 ? strcat(pid, ")") : "");
}

static void txn_free(struct store_txn *t)
{
	store_search_mem_free(t);
	store_scratch_free(&t->sc);
	store_scratch_free(&t->sc2);
	store_ndn_free(&t->ndn);
	idc_buf_free(&t->key);
	idc_buf_free(&t->key2);
	idc_buf_free(&t->norm);
	idc_buf_free(&t->enc);
	idc_buf_free(&t->copy);
	idc_buf_free(&t->pkey);
	if (t->ap)
		store_add_prep_free(t->ap);
	free(t->ap);
	idc_arena_free(&t->arena);
	index_bulk_free(t);
	free(t);
}

static void txn_unlock(struct store_txn *t)
{
	if (!t->parent && !(t->flags & STORE_TXN_RDONLY))
		flock(t->s->lockfd, LOCK_UN);
}

/* ---- the spare read transaction ----------------------------------------------------
 * A process doing one lookup per read transaction (the daemon answers each
 * batch of requests in a fresh one) would otherwise allocate and free the
 * txn, LMDB's txn and the search memory every time: an ended read
 * transaction is reset (mdb_txn_reset: it holds no snapshot, so it keeps
 * no pages from reuse) and parked, and the next read renews it, seeing the
 * newest commit as a fresh begin does. A few slots per store (threads
 * reading at once each find one); MDB_NOTLS lets any thread renew one. */

static void spare_free(struct store_txn *t)
{
	mdb_txn_abort(t->txn);
	txn_free(t);
}

static struct store_txn *spare_take(struct store *s, unsigned flags)
{
	for (size_t i = 0; i < STORE_SPARE_TXNS; i++) {
		if (!atomic_load_explicit(&s->spare[i], memory_order_relaxed))
			continue;
		struct store_txn *t = atomic_exchange(&s->spare[i], NULL);
		if (t && mdb_txn_renew(t->txn) == 0) {
			t->flags = flags;
			return t;
		}
		if (t)
			spare_free(t);
	}
	return NULL;
}

static void spare_put(struct store_txn *t)
{
	if (atomic_load(&t->s->fatal)) { /* of an environment to be closed */
		spare_free(t);
		return;
	}
	store_search_mem_reset(t);
	idc_arena_reset(&t->arena);
	mdb_txn_reset(t->txn);
	for (size_t i = 0; i < STORE_SPARE_TXNS; i++) {
		struct store_txn *none = NULL;
		if (atomic_compare_exchange_strong(&t->s->spare[i], &none, t))
			return;
	}
	spare_free(t);
}

static void spare_drop(struct store *s)
{
	for (size_t i = 0; i < STORE_SPARE_TXNS; i++) {
		struct store_txn *t = atomic_exchange(&s->spare[i], NULL);
		if (t)
			spare_free(t);
	}
}

/* ---- a failed write ----------------------------------------------------------------
 * LMDB sets its environment's fatal flag when a commit cannot write the
 * meta page (mdb_env_write_meta: a failed pwrite of it, or msync with
 * MDB_WRITEMAP), and from then on refuses every transaction, reads
 * included, with MDB_PANIC: it no longer knows what the page holds. The
 * file is sound at the last commit (the data pages of the failed one are
 * pages it had free), so closing the environment and opening it again
 * gives that commit back. No thread of this process may use the
 * environment meanwhile: every use enters it (env_enter), and the reopen
 * is done by an entrant that finds fatal set and no other use open, under
 * heal_mu; entrants that find it set wait there, then go on or fail. */

#define HEAL_RETRY_MIN_NS (1000000000ull) /* after a failed reopen: 1 s, doubling */
#define HEAL_RETRY_MAX_NS (60000000000ull)

/* Whether LMDB refuses transactions: the one sign of its fatal flag
 * (mdb_env_get_flags does not show it). */
static bool env_panicked(struct store *s)
{
	MDB_txn *txn;
	int rc = mdb_txn_begin(s->env, NULL, MDB_RDONLY, &txn);
	if (rc == 0)
		mdb_txn_abort(txn);
	return rc == MDB_PANIC;
}

/* The environment is fatal, found so by what (a commit that failed with
 * LMDB's mdb_rc, or a begin refused): logged once, the reopen is due. */
static void env_failed(struct store *s, const char *what, int mdb_rc)
{
	pthread_mutex_lock(&s->heal_mu);
	if (!atomic_load(&s->fatal)) {
		struct store_health *h = &s->health;
		h->failures++;
		h->down = true;
		h->failed_at = (int64_t)time(NULL);
		snprintf(h->why, sizeof(h->why), "%s: %s", what, mdb_strerror(mdb_rc));
		s->retry_ns = 0;
		atomic_store(&s->fatal, true);
		idc_log(IDC_LOG_ERR,
			"%s: %s and left LMDB's environment unusable: that transaction is lost; "
			"reopening the store at its last commit",
			s->dir, h->why);
	}
	pthread_mutex_unlock(&s->heal_mu);
}

/* After a failed meta write LMDB writes the older meta page back with its
 * own transaction id but the lost transaction's roots, which may lie past
 * its last page: a page verify.c calls damaged, and the next open would
 * set the store aside. One commit writes that page anew. A write lock
 * another process holds (or any other failure that leaves the environment
 * usable) leaves it to that writer's next commit. */
static int env_rewrite_meta(struct store *s)
{
	if ((s->flags & STORE_RDONLY) || store_lock_writer(s, NULL) != 0)
		return 0;
	MDB_txn *txn;
	uint64_t next = 0;
	int rc = mdb_txn_begin(s->env, NULL, 0, &txn);
	if (rc == 0) {
		if (meta_get_u64(txn, s->meta, "next_id", &next) == 0 &&
		    meta_put_u64(txn, s->meta, "next_id", next) == 0)
			rc = mdb_txn_commit(txn);
		else
			mdb_txn_abort(txn);
	}
	flock(s->lockfd, LOCK_UN);
	if (rc == 0) {
		s->commits++;
		return 0;
	}
	return rc == MDB_PANIC || env_panicked(s) ? -EIO : 0;
}

/* Close the environment and open it again (no use of it open). */
static int env_reopen(struct store *s, struct idc_diag *d)
{
	spare_drop(s);
	mdb_env_close(s->env);
	s->env = NULL;
	const struct store_options opt = {.flags = s->flags & ~STORE_CREATE,
					  .map_size = s->map_size,
					  .max_readers = s->max_readers};
	int rc = store_env_create(s, &opt, d);
	if (!rc)
		rc = store_load(s, &opt, false, d);
	if (!rc && (rc = env_rewrite_meta(s)) != 0)
		idc_diag_set(d, rc, "the commit that rewrites its meta page failed too");
	return rc;
}

/* Reopen a fatal environment when nothing else uses it and a retry is due;
 * 0 once it is usable (by this call or another thread's), else -EIO with d
 * saying why. */
static int env_heal(struct store *s, struct idc_diag *d)
{
	static const char *const pending = "a write failed; it is reopened once no transaction of "
					   "this process is open";
	pthread_mutex_lock(&s->heal_mu);
	int rc = 0;
	uint64_t now = idc_now_ns();
	if (!atomic_load(&s->fatal))
		rc = 0; /* another thread reopened it */
	else if (atomic_load(&s->users) != 0)
		rc = idc_diag_set(d, -EIO, "%s: %s", s->dir, pending);
	else if (now < s->retry_ns)
		rc = idc_diag_set(d, -EIO,
				  "%s: unusable since a write failed (%s); reopening it "
				  "again in %llu s",
				  s->dir, s->health.why,
				  (unsigned long long)((s->retry_ns - now) / 1000000000ull + 1));
	else {
		struct idc_diag why = {{0}};
		rc = env_reopen(s, &why);
		if (rc == 0) {
			s->health.reopens++;
			s->health.down = false;
			s->retry_ns = 0;
			s->heal_wait_ns = 0;
			atomic_store(&s->fatal, false);
			idc_log(IDC_LOG_WARN,
				"%s: reopened at its last commit after a failed write; what the "
				"lost transaction held is stored again as its providers send it",
				s->dir);
		} else {
			bool first = s->heal_wait_ns == 0;
			s->heal_wait_ns = first ? HEAL_RETRY_MIN_NS
					  : s->heal_wait_ns * 2 > HEAL_RETRY_MAX_NS
					      ? HEAL_RETRY_MAX_NS
					      : s->heal_wait_ns * 2;
			s->retry_ns = now + s->heal_wait_ns;
			idc_log(first ? IDC_LOG_ERR : IDC_LOG_DEBUG,
				"%s: cannot reopen it after a failed write: %s; every transaction "
				"fails until it can (retried, at most every %llu s)",
				s->dir, why.msg[0] ? why.msg : idc_strerror(rc),
				(unsigned long long)(HEAL_RETRY_MAX_NS / 1000000000ull));
			rc = idc_diag_set(d, -EIO, "%s: cannot reopen it after a failed write: %s",
					  s->dir, why.msg[0] ? why.msg : idc_strerror(rc));
		}
	}
	pthread_mutex_unlock(&s->heal_mu);
	return rc;
}

/* Before any use of s->env: 0, or -EIO while it is fatal and cannot be
 * reopened now (d says why). Paired with env_leave. */
static int env_enter(struct store *s, struct idc_diag *d)
{
	for (int tries = 0; tries < 4; tries++) {
		atomic_fetch_add(&s->users, 1);
		if (!atomic_load(&s->fatal) && !atomic_load(&s->hold)) {
			env_held++;
			return 0;
		}
		atomic_fetch_sub(&s->users, 1);
		if (!atomic_load(&s->fatal) && env_held)
			return idc_diag_set(d, -EAGAIN, "%s: its map is being grown", s->dir);
		int rc = env_heal(s, d); /* waits for a grow to end */
		if (rc)
			return rc;
	}
	return idc_diag_set(d, -EIO, "%s: reopened or grown again and again", s->dir);
}

static void env_leave(struct store *s)
{
	env_held--;
	atomic_fetch_sub(&s->users, 1);
}

void store_health(struct store *s, struct store_health *out)
{
	pthread_mutex_lock(&s->heal_mu);
	*out = s->health;
	pthread_mutex_unlock(&s->heal_mu);
}

int store_txn_begin(struct store *s, struct store_txn *parent, unsigned flags,
		    struct store_txn **out, struct idc_diag *d)
{
	bool rdonly = flags & STORE_TXN_RDONLY;
	if (!rdonly && (s->flags & STORE_RDONLY))
		return idc_diag_set(d, -EROFS, "%s: store was opened read-only", s->dir);
	if (parent && (rdonly || (parent->flags & STORE_TXN_RDONLY)))
		return idc_diag_set(d, -EINVAL, "nested transactions must be write transactions");
	int rc = env_enter(s, d); /* left when the transaction ends */
	if (rc)
		return rc;
	if (rdonly && (*out = spare_take(s, flags)) != NULL)
		return 0;
	struct store_txn *t = calloc(1, sizeof(*t));
	if (!t) {
		env_leave(s);
		return -ENOMEM;
	}
	t->s = s;
	t->parent = parent;
	t->flags = flags;
	/* Every write transaction takes the bulk path: reads of the indexes in
	 * the same transaction (search, modify, delete, check) flush first. */
	t->bulk_ok = !rdonly;
	rc = (!rdonly && !parent) ? store_lock_writer(s, d) : 0;
	if (rc) {
		free(t);
		env_leave(s);
		return rc;
	}
	if (!rdonly && !parent)
		txn_met_full = false;
	if (parent)
		rc = index_bulk_flush(parent);
	if (!rc) {
		/* LMDB's own codes are negative (MDB_PANIC after a failed meta
		 * write), errno values positive: both are mapped here */
		int mrc = mdb_txn_begin(s->env, parent ? parent->txn : NULL,
					rdonly ? MDB_RDONLY : 0, &t->txn);
		if (mrc == MDB_PANIC)
			env_failed(s, "a transaction was refused", mrc);
		if (mrc)
			rc = idc_diag_set(d, store_mdb_err(mrc), "%s: cannot begin transaction: %s",
					  s->dir, mdb_strerror(mrc));
	}
	if (rc == 0 && !rdonly) {
		if (parent)
			t->next_id = parent->next_id;
		else
			rc = meta_get_u64(t->txn, s->meta, "next_id", &t->next_id);
	}
	if (rc) {
		if (t->txn)
			mdb_txn_abort(t->txn);
		txn_unlock(t);
		txn_free(t);
		env_leave(s);
		return rc;
	}
	*out = t;
	return 0;
}

static int txn_finish_write(struct store_txn *t)
{
	int rc = index_bulk_flush(t);
	if (!rc)
		rc = meta_put_u64(t->txn, t->s->meta, "next_id", t->next_id);
	return rc;
}

/* mdb_txn_commit, with MDB_NOMETASYNC for this commit alone when the
 * transaction asked for it (the flag is the environment's; the daemon's
 * one writer sets and clears it around its own commit). */
static int commit_mdb(struct store_txn *t)
{
	unsigned have = 0;
	bool lazy = (t->flags & STORE_TXN_NOMETASYNC) && !t->parent &&
		    mdb_env_get_flags(t->s->env, &have) == 0 &&
		    !(have & (MDB_NOMETASYNC | MDB_NOSYNC)) &&
		    mdb_env_set_flags(t->s->env, MDB_NOMETASYNC, 1) == 0;
	int rc = mdb_txn_commit(t->txn);
	if (lazy)
		mdb_env_set_flags(t->s->env, MDB_NOMETASYNC, 0);
	return rc;
}

int store_txn_commit(struct store_txn *t, struct idc_diag *d)
{
	struct store *s = t->s;
	bool rdonly = t->flags & STORE_TXN_RDONLY;
	int rc = rdonly ? 0 : txn_finish_write(t);
	if (rc) {
		mdb_txn_abort(t->txn);
	} else {
		int mrc = commit_mdb(t);
		if (mrc && mrc != MDB_MAP_FULL && !t->parent && !rdonly && env_panicked(s))
			env_failed(s, "a commit failed", mrc);
		rc = store_lmdb_err(s->dir, mrc);
		if (rc == 0 && t->parent) {
			t->parent->next_id = t->next_id;
			idc_buf_reset(&t->parent->pkey); /* the child may have deleted it */
			t->parent->index_changed |= t->index_changed;
		} else if (rc == 0 && !rdonly) {
			s->commits++;
		}
	}
	if (rc && rc != IDC_EMAPFULL)
		idc_diag_set(d, rc, "%s: commit failed: %s", s->dir, idc_strerror(rc));
	bool reload = rc == 0 && !t->parent && t->index_changed;
	txn_unlock(t);
	txn_free(t);
	if (reload) {
		MDB_txn *txn;
		if (mdb_txn_begin(s->env, NULL, MDB_RDONLY, &txn) == 0) {
			index_load(s, txn);
			mdb_txn_commit(txn);
		}
	}
	env_leave(s);
	return rc;
}

void store_txn_abort(struct store_txn *t)
{
	if (!t)
		return;
	struct store *s = t->s;
	if (t->flags & STORE_TXN_RDONLY) {
		spare_put(t);
	} else {
		mdb_txn_abort(t->txn);
		txn_unlock(t);
		txn_free(t);
	}
	env_leave(s);
}

int store_write(struct store *s, unsigned flags, store_txn_fn fn, void *arg, struct idc_diag *d)
{
	for (int tries = 0;; tries++) {
		struct store_txn *t;
		int rc = store_txn_begin(s, NULL, flags & ~STORE_TXN_RDONLY, &t, d);
		if (rc)
			return rc;
		rc = fn(t, arg, d);
		if (rc)
			store_txn_abort(t);
		else
			rc = store_txn_commit(t, d);
		if (rc != IDC_EMAPFULL || tries >= MAX_GROWS)
			return rc == IDC_EMAPFULL ? idc_diag_set(d, rc, "%s: map full at %zu bytes",
								 s->dir, s->map_size)
						  : rc;
		rc = store_grow(s);
		if (rc)
			return idc_diag_set(d, rc, "%s: cannot grow the map", s->dir);
		idc_log(IDC_LOG_INFO, "%s: map grown to %zu MiB", s->dir, s->map_size >> 20);
	}
}
