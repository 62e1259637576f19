/* timestamps: lastUpdate/expiry per entry in timestamps.mdb, opened
 * MDB_NOSYNC. Disposable by design: when it cannot be opened it is deleted
 * and created anew (entries then simply count as never refreshed). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache_int.h"

/* A file shorter than the pages its meta page claims (truncated) would
 * fault (SIGBUS) on the first read of a missing page: count it as damaged.
 * MDB_CORRUPTED or 0. */
static int ts_check_size(MDB_env *env, const char *path)
{
	MDB_envinfo info;
	MDB_stat st;
	struct stat sb;
	if (mdb_env_info(env, &info) || mdb_env_stat(env, &st) || stat(path, &sb) < 0)
		return MDB_CORRUPTED;
	if ((uint64_t)sb.st_size < ((uint64_t)info.me_last_pgno + 1) * st.ms_psize)
		return MDB_CORRUPTED;
	return 0;
}

static int ts_try_open(struct cache *c, const char *path)
{
	int rc = mdb_env_create(&c->ts_env);
	if (rc)
		return rc;
	mdb_env_set_mapsize(c->ts_env, (size_t)256 << 20);
	rc = mdb_env_open(c->ts_env, path, MDB_NOSUBDIR | MDB_NOSYNC | MDB_NOTLS, 0644);
	if (!rc)
		rc = ts_check_size(c->ts_env, path);
	MDB_txn *txn = NULL;
	if (!rc)
		rc = mdb_txn_begin(c->ts_env, NULL, 0, &txn);
	if (!rc)
		rc = mdb_dbi_open(txn, NULL, 0, &c->ts_dbi);
	if (!rc)
		rc = mdb_txn_commit(txn);
	else if (txn)
		mdb_txn_abort(txn);
	if (rc) {
		mdb_env_close(c->ts_env);
		c->ts_env = NULL;
	}
	return rc;
}

int ts_open(struct cache *c, struct idc_diag *d)
{
	char path[4096], lock[4200];
	snprintf(path, sizeof(path), "%s/timestamps.mdb", c->dir);
	snprintf(lock, sizeof(lock), "%s-lock", path);
	int rc = ts_try_open(c, path);
	if (rc == 0)
		return 0;
	idc_log(IDC_LOG_WARN, "%s: %s; recreating it (timestamps are disposable)", path,
		mdb_strerror(rc));
	unlink(path);
	unlink(lock);
	rc = ts_try_open(c, path);
	if (rc)
		return idc_diag_set(d, rc > 0 ? -rc : -EIO, "%s: %s", path, mdb_strerror(rc));
	return 0;
}

bool ts_healthy(struct cache *c)
{
	/* The file's size first: reading LMDB's meta pages from a mapping of
	 * a file truncated under us would fault. */
	int fd;
	struct stat sb;
	long psize = sysconf(_SC_PAGESIZE);
	if (!c->ts_env || mdb_env_get_fd(c->ts_env, &fd) || fstat(fd, &sb) < 0 || psize <= 0 ||
	    sb.st_size < 2 * psize)
		return false;
	MDB_envinfo info;
	if (mdb_env_info(c->ts_env, &info))
		return false;
	return (uint64_t)sb.st_size >= ((uint64_t)info.me_last_pgno + 1) * (uint64_t)psize;
}

int ts_rebuild(struct cache *c, struct idc_diag *d)
{
	char path[4096], lock[4200];
	snprintf(path, sizeof(path), "%s/timestamps.mdb", c->dir);
	snprintf(lock, sizeof(lock), "%s-lock", path);
	idc_log(IDC_LOG_WARN, "%s: damaged while open; recreating it", path);
	ts_close(c);
	unlink(path);
	unlink(lock);
	return ts_open(c, d);
}

void ts_close(struct cache *c)
{
	if (c->ts_env)
		mdb_env_close(c->ts_env);
	c->ts_env = NULL;
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

int ts_put(MDB_txn *txn, MDB_dbi dbi, const struct idc_buf *key, const struct ts_rec *r)
{
	MDB_val k = {key->len, key->data}, v = {sizeof(*r), (void *)r};
	int rc = mdb_put(txn, dbi, &k, &v, 0);
	return rc ? -EIO : 0;
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

int ts_del(MDB_txn *txn, MDB_dbi dbi, const struct idc_buf *key)
{
	MDB_val k = {key->len, key->data};
	int rc = mdb_del(txn, dbi, &k, NULL);
	return rc == 0 || rc == MDB_NOTFOUND ? 0 : -EIO;
}
