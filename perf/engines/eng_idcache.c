/*
 * engines/idcache: the idcache store API in process (docs/DESIGN.md §4), durable
 * (fsync at every commit) or --nosync. Import and export use the store's
 * own LDIF reader and writer in one bulk transaction, as `idcache db
 * import/export` do (the import on a handle opened as that command opens
 * it: STORE_WRITEMAP, the map sized for the file); every search and modify
 * is its own transaction, as a daemon answering one request would run it.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine.h"
#include "store/store.h"

#define MAP_SIZE ((size_t)16 << 30) /* sparse: no growth inside a measurement */

struct eng {
	struct store *s;
	char dir[4096];
	unsigned flags; /* store_open_flags of the ordinary handle */
};

struct eng_worker {
	struct eng *e;
	struct idc_diag d;
};

static int idc_available(char *why, size_t cap)
{
	(void)why, (void)cap;
	return 0;
}

static int create_common(const struct eng_cfg *cfg, unsigned flags, struct eng **out,
			 struct idc_diag *d)
{
	struct eng *e = calloc(1, sizeof(*e));
	if (!e)
		return -ENOMEM;
	snprintf(e->dir, sizeof(e->dir), "%s", cfg->dir);
	e->flags = flags;
	struct store_options o = {.flags = STORE_CREATE | flags,
				  .map_size = MAP_SIZE,
				  .indexes = cfg->indexes,
				  .nindexes = cfg->nindexes};
	int rc = store_open(cfg->dir, &o, &e->s, d);
	if (rc < 0) {
		free(e);
		return rc;
	}
	*out = e;
	return 0;
}

static int idc_create(const struct eng_cfg *cfg, struct eng **out, struct idc_diag *d)
{
	return create_common(cfg, 0, out, d);
}

static int idc_create_nosync(const struct eng_cfg *cfg, struct eng **out, struct idc_diag *d)
{
	return create_common(cfg, STORE_NOSYNC, out, d);
}

/* ==== import and export ======================================================== */

/* The store reopened with flags and a map of map bytes. */
static int idc_reopen(struct eng *e, unsigned flags, size_t map, struct idc_diag *d)
{
	store_close(e->s);
	e->s = NULL;
	struct store_options o = {.flags = flags, .map_size = map};
	return store_open(e->dir, &o, &e->s, d);
}

/* As `idcache db import` runs it: the handle reopened with STORE_WRITEMAP
 * and the map store_import_map_size gives, the store's import step in one
 * transaction, then the ordinary handle back for the other tests. */
static int idc_import(struct eng *e, const char *ldif, uint64_t *count, struct idc_diag *d)
{
	struct ldif_import j = {.name = ldif};
	j.f = fopen(ldif, "r");
	if (!j.f)
		return idc_diag_set(d, -errno, "%s: %s", ldif, strerror(errno));
	struct stat st;
	uint64_t size = fstat(fileno(j.f), &st) == 0 ? (uint64_t)st.st_size : 0;
	int rc = idc_reopen(e, e->flags | STORE_WRITEMAP, store_import_map_size(size), d);
	if (rc == 0)
		rc = store_write(e->s, STORE_TXN_BULK, ldif_import_fn, &j, d);
	*count = j.records;
	fclose(j.f);
	struct idc_diag d2 = {{0}};
	int rc2 = idc_reopen(e, e->flags, MAP_SIZE, &d2);
	if (rc2 && !rc)
		*d = d2;
	return rc ? rc : rc2;
}

struct export_job {
	FILE *f;
	struct idc_buf buf;
	uint64_t count;
};

static int export_cb(const struct store_entry *ent, void *arg)
{
	struct export_job *j = arg;
	int rc = ldif_write_entry(&j->buf, ent, NULL, 0);
	j->count++;
	if (rc == 0 && j->buf.len >= (1u << 20)) {
		rc = fwrite(j->buf.data, 1, j->buf.len, j->f) == j->buf.len ? 0 : -EIO;
		idc_buf_reset(&j->buf);
	}
	return rc;
}

static int idc_export(struct eng *e, const char *path, uint64_t *count, struct idc_diag *d)
{
	struct export_job j = {fopen(path, "w"), IDC_BUF_INIT, 0};
	if (!j.f)
		return idc_diag_set(d, -errno, "%s: %s", path, strerror(errno));
	struct store_txn *t = NULL;
	struct store_search q = {{"", 0}, STORE_SCOPE_SUB, NULL, 0};
	int rc = store_txn_begin(e->s, NULL, STORE_TXN_RDONLY, &t, d);
	rc = rc < 0 ? rc : store_search(t, &q, export_cb, &j, d);
	if (rc == 0 && fwrite(j.buf.data, 1, j.buf.len, j.f) != j.buf.len)
		rc = -EIO;
	if (t)
		store_txn_abort(t);
	if (fclose(j.f) != 0 && rc == 0)
		rc = idc_diag_set(d, -EIO, "%s: %s", path, strerror(errno));
	idc_buf_free(&j.buf);
	*count = j.count;
	return rc;
}

/* ==== add, search, modify ========================================================= */

struct add_job {
	const struct gen_rec *r;
	struct idc_arena arena;
};

static int add_fn(struct store_txn *t, void *arg, struct idc_diag *d)
{
	struct add_job *j = arg;
	struct store_entry ent;
	idc_arena_reset(&j->arena);
	int rc = store_entry_from_pairs(&j->arena, j->r->dn, j->r->pairs, j->r->npairs, &ent, d);
	return rc < 0 ? rc : store_add(t, &ent, NULL, d);
}

static int idc_add(struct eng *e, const struct gen_rec *r, struct idc_diag *d)
{
	struct add_job j = {r, IDC_ARENA_INIT};
	int rc = store_write(e->s, 0, add_fn, &j, d);
	idc_arena_free(&j.arena);
	return rc;
}

static int idc_worker_open(struct eng *e, struct eng_worker **out, struct idc_diag *d)
{
	(void)d;
	struct eng_worker *w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->e = e;
	*out = w;
	return 0;
}

static int count_cb(const struct store_entry *ent, void *arg)
{
	(void)ent;
	++*(uint64_t *)arg;
	return 0;
}

/* Parse, plan and run the filter in its own read transaction: a request. */
static int idc_search(struct eng_worker *w, const char *base, const char *filter, uint64_t *found,
		      struct idc_diag *d)
{
	struct store_filter *f = NULL;
	struct store_txn *t = NULL;
	*found = 0;
	int rc = store_filter_parse(filter, strlen(filter), &f, d);
	rc = rc < 0 ? rc : store_txn_begin(w->e->s, NULL, STORE_TXN_RDONLY, &t, d);
	struct store_search q = {{base, strlen(base)}, STORE_SCOPE_SUB, f, 0};
	rc = rc < 0 ? rc : store_search(t, &q, count_cb, found, d);
	if (t)
		store_txn_abort(t);
	store_filter_free(f);
	return rc;
}

struct mod_job {
	const char *dn;
	struct store_mod mod;
};

static int mod_fn(struct store_txn *t, void *arg, struct idc_diag *d)
{
	struct mod_job *j = arg;
	return store_modify(t, (struct store_val){j->dn, strlen(j->dn)}, &j->mod, 1, NULL, d);
}

static int idc_modify(struct eng_worker *w, const char *dn, const char *attr, const char *value,
		      struct idc_diag *d)
{
	struct store_val v = {value, strlen(value)};
	struct mod_job j = {dn, {STORE_MOD_REPLACE, {attr, strlen(attr)}, &v, 1}};
	return store_write(w->e->s, 0, mod_fn, &j, d);
}

static void idc_worker_close(struct eng_worker *w)
{
	free(w);
}

static int64_t idc_disk_bytes(struct eng *e)
{
	return eng_du(e->dir);
}

static void idc_destroy(struct eng *e)
{
	if (!e)
		return;
	store_close(e->s);
	free(e);
}

#define IDC_OPS                                                                                    \
	.access = "store API in process", .fork_workers = false, .available = idc_available,       \
	.import = idc_import, .export = idc_export, .add = idc_add,                                \
	.worker_open = idc_worker_open, .search = idc_search, .modify = idc_modify,                \
	.worker_close = idc_worker_close, .disk_bytes = idc_disk_bytes, .destroy = idc_destroy

const struct eng_ops eng_idcache = {
    .name = "idcache",
    .durability = "durable: fsync at every commit (LMDB default)",
    .create = idc_create,
    IDC_OPS,
};

const struct eng_ops eng_idcache_nosync = {
    .name = "idcache-nosync",
    .durability = "no fsync at commit (STORE_NOSYNC): a crash may lose recent commits",
    .create = idc_create_nosync,
    IDC_OPS,
};
