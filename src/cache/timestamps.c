/* timestamps: lastUpdate/expiry per entry in timestamps.mdb, opened
 * MDB_NOSYNC. Disposable by design: when it cannot be opened it is deleted
 * and created anew (entries then simply count as never refreshed).
 *
 * Its map is sized from cache.mdb's (a quarter of it) and doubled when
 * full, like cache.mdb's, up to the size of cache.mdb's map or TS_MAP_CAP,
 * whichever is larger: every entry has one record of a few dozen bytes
 * here against hundreds there, so a timestamps db larger than that is not
 * holding timestamps (the cap keeps a small first map of cache.mdb, which
 * need not grow as soon, from bounding it too early). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cache_int.h"

/* The file and its LMDB lock file, by name. */
static void ts_paths(const struct cache *c, char path[4096], char lock[4200])
{
	snprintf(path, 4096, "%s/timestamps.mdb", c->dir);
	snprintf(lock, 4200, "%s-lock", path);
}

static void ts_env_close(struct cache *c)
{
	ts_spare_drop(c);
	if (c->ts_env)
		mdb_env_close(c->ts_env);
	c->ts_env = NULL;
}

static int ts_try_open(struct cache *c, const char *path, const char *lock)
{
	int rc = -store_lmdb_lock_reserve(lock, 126, 0600);
	if (rc)
		return rc;
	rc = mdb_env_create(&c->ts_env);
	if (rc)
		return rc;
	mdb_env_set_mapsize(c->ts_env, c->ts_map);
	rc = mdb_env_open(c->ts_env, path, MDB_NOSUBDIR | MDB_NOSYNC | MDB_NOTLS, 0600);
	MDB_envinfo info;
	if (!rc && mdb_env_info(c->ts_env, &info) == 0)
		c->ts_map = info.me_mapsize; /* the file's own, when larger */
	MDB_txn *txn = NULL;
	if (!rc)
		rc = mdb_txn_begin(c->ts_env, NULL, 0, &txn);
	if (!rc)
		rc = mdb_dbi_open(txn, NULL, 0, &c->ts_dbi);
	if (!rc)
		rc = mdb_txn_commit(txn);
	else if (txn)
		mdb_txn_abort(txn);
	c->ts_size = 0;
	if (!rc && !ts_healthy(c, &c->ts_size))
		rc = MDB_CORRUPTED;
	if (rc)
		ts_env_close(c);
	return rc;
}

/* Whether the file left by the last run may be opened: only when that run
 * closed it (it is written without fsync, so after a crash of the machine
 * any page may be stale) and its meta pages hold up. Anything else: false,
 * with the reason logged, and the caller starts afresh. */
static bool ts_trust(const char *path)
{
	int clean = store_clean_take(path);
	if (access(path, F_OK) != 0)
		return false;
	struct store_lmdb_meta m;
	struct idc_diag why = {{0}};
	if (clean <= 0)
		idc_log(IDC_LOG_INFO, "%s %s; recreating it (timestamps are disposable)", path,
			clean ? "changed after it was closed" : "was not closed cleanly");
	else if (store_lmdb_file_check(path, &m, &why) != 0)
		idc_log(IDC_LOG_WARN, "%s; recreating it (timestamps are disposable)", why.msg);
	else
		return true;
	return false;
}

int ts_open(struct cache *c, struct idc_diag *d)
{
	char path[4096], lock[4200];
	ts_paths(c, path, lock);
	if (!ts_trust(path)) {
		unlink(path);
		unlink(lock);
	}
	int rc = ts_try_open(c, path, lock);
	if (rc == 0)
		return 0;
	idc_log(IDC_LOG_WARN, "%s: %s; recreating it (timestamps are disposable)", path,
		mdb_strerror(rc));
	unlink(path);
	unlink(lock);
	rc = ts_try_open(c, path, lock);
	if (rc)
		return idc_diag_set(d, store_lmdb_err(c->dir, rc), "%s: %s", path,
				    mdb_strerror(rc));
	return 0;
}

bool ts_healthy(const struct cache *c, uint64_t *size)
{
	/* From the file's own bytes (pread), never the map: reading LMDB's
	 * meta pages through a mapping of a file truncated under us would
	 * fault. LMDB never shrinks the file, so one shorter than we saw it
	 * was cut; one that ends before its last page need not be (pages
	 * freed by the transaction that allocated them are never written). */
	int fd;
	struct store_lmdb_meta m;
	if (!c->ts_env || mdb_env_get_fd(c->ts_env, &fd) || store_lmdb_fd_check(fd, &m, NULL))
		return false;
	bool whole = m.file_size >= c->ts_size;
	if (size) /* may be &c->ts_size: compared first */
		*size = m.file_size;
	return whole;
}

void ts_note_size(struct cache *c)
{
	int fd;
	struct stat st;
	if (c->ts_env && mdb_env_get_fd(c->ts_env, &fd) == 0 && fstat(fd, &st) == 0)
		c->ts_size = (uint64_t)st.st_size;
}

#define TS_DRAIN_MS 200

int ts_drain(struct cache *c, struct idc_diag *d)
{
	atomic_store(&c->ts_closing, true);
	for (int ms = 0; atomic_load(&c->ts_users) != 0; ms++) {
		if (ms == TS_DRAIN_MS) {
			ts_undrain(c);
			return idc_diag_set(d, -EBUSY,
					    "%s/timestamps.mdb: another thread still reads it; "
					    "closed or grown at the next transaction",
					    c->dir);
		}
		struct timespec tick = {0, 1000000};
		nanosleep(&tick, NULL);
	}
	return 0;
}

void ts_undrain(struct cache *c)
{
	atomic_store(&c->ts_closing, false);
}

int ts_rebuild(struct cache *c, const char *why, struct idc_diag *d)
{
	char path[4096], lock[4200];
	ts_paths(c, path, lock);
	int rc = ts_drain(c, d);
	if (rc)
		return rc;
	idc_log(IDC_LOG_WARN, "%s: damaged while open (%s); recreating it", path, why);
	ts_env_close(c);
	unlink(path);
	unlink(lock);
	rc = ts_open(c, d);
	ts_undrain(c);
	return rc;
}

void ts_close(struct cache *c)
{
	char path[4096], lock[4200];
	bool mark = ts_healthy(c, NULL);
	ts_env_close(c);
	ts_paths(c, path, lock);
	int rc = mark ? store_clean_mark(path) : 0;
	if (rc)
		idc_log(IDC_LOG_WARN, "%s: cannot mark it closed cleanly: %s", path,
			idc_strerror(rc));
}

int ts_key(int kind, const char *domain, const char *name, struct idc_buf *out)
{
	idc_buf_reset(out);
	int rc = idc_buf_putc(out, (char)kind);
	if (!rc)
		rc = idc_buf_append(out, domain, strlen(domain) + 1);
	char folded[CACHE_NAME_MAX + 1];
	size_t n = cache_name_fold(CACHE_NAMES_STORED, name, folded);
	return rc ? rc : idc_buf_append(out, folded, n);
}

size_t ts_map_size(size_t cache_map)
{
	size_t m = cache_map / 4;
	return m < TS_MAP_MIN ? TS_MAP_MIN : m;
}

/* An LMDB code of the timestamps db as ours. A full map is IDC_EMAPFULL,
 * as cache.mdb's is: the caller aborts, cache_grow doubles this map (it
 * was the one marked full), and the transaction runs again. */
int ts_err(struct cache *c, int rc)
{
	if (rc == MDB_MAP_FULL)
		c->ts_full = true;
	return store_lmdb_err(c->dir, rc);
}

int ts_fail(struct cache *c, int rc, const char *what, struct idc_diag *d)
{
	int err = ts_err(c, rc);
	if (err == IDC_EMAPFULL)
		return idc_diag_set(d, err, "%s/timestamps.mdb: %s: map full at %zu MiB", c->dir,
				    what, c->ts_map >> 20);
	return idc_diag_set(d, err, "%s/timestamps.mdb: %s: %s", c->dir, what, idc_strerror(err));
}

int ts_grow(struct cache *c, struct idc_diag *d)
{
	size_t limit = store_map_size(c->st), size = c->ts_map * 2;
	if (limit < TS_MAP_CAP)
		limit = TS_MAP_CAP;
	if (c->ts_map > SIZE_MAX / 2 || size > limit)
		return idc_diag_set(
		    d, -ENOSPC,
		    "%s/timestamps.mdb: map full at %zu MiB, as large as it may grow "
		    "(cache.mdb's map, at least 1 GiB)",
		    c->dir, c->ts_map >> 20);
	int rc = ts_drain(c, d); /* no reader of another thread across the remap */
	if (rc)
		return rc;
	ts_spare_drop(c); /* nothing kept across the remap */
	rc = mdb_env_set_mapsize(c->ts_env, size);
	ts_undrain(c);
	if (rc)
		return ts_fail(c, rc, "cannot grow the map", d);
	c->ts_map = size;
	c->ts_full = false;
	idc_log(IDC_LOG_INFO, "%s/timestamps.mdb: map full, grown to %zu MiB", c->dir, size >> 20);
	return 0;
}

int ts_put(struct cache_txn *t, const struct idc_buf *key, const struct ts_rec *r,
	   struct idc_diag *d)
{
	MDB_val k = {key->len, key->data}, v = {sizeof(*r), (void *)r};
	int rc = mdb_put(t->ts, t->c->ts_dbi, &k, &v, 0);
	return rc ? ts_fail(t->c, rc, "cannot store a timestamp", d) : 0;
}

int ts_get(MDB_txn *txn, MDB_dbi dbi, const struct idc_buf *key, struct ts_rec *r)
{
	MDB_val k = {key->len, key->data}, v;
	int rc = mdb_get(txn, dbi, &k, &v);
	if (rc == MDB_NOTFOUND)
		return -ENOENT;
	if (rc || v.mv_size != sizeof(*r))
		return -EIO;
	memcpy(r, v.mv_data, sizeof(*r));
	return 0;
}

int ts_del(struct cache_txn *t, const struct idc_buf *key, struct idc_diag *d)
{
	MDB_val k = {key->len, key->data};
	int rc = mdb_del(t->ts, t->c->ts_dbi, &k, NULL);
	/* a delete copies pages too: it may fill the map */
	return rc == 0 || rc == MDB_NOTFOUND ? 0
					     : ts_fail(t->c, rc, "cannot remove a timestamp", d);
}
