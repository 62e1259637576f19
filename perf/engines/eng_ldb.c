/*
 * engines/ldb: Samba's ldb through its C API (Debian's libldb-dev), on its
 * tdb:// and mdb:// backends, configured as Samba runs it: GUID index mode
 * (@IDXGUID objectGUID, @IDX_DN_GUID GUID, which the mdb backend requires;
 * the tdb one gets the same for a like-for-like pair), @IDXATTR for the
 * run's indexes and @ATTRIBUTES giving uid/cn/sn caseIgnore and the numbers
 * integer matching, as idcache's schema does. The generated entries carry
 * no objectGUID, so this engine adds one per entry (eng_guid): the only
 * bytes it stores that other engines do not.
 *
 * ldb contexts are not thread-safe and tdb locks are per process, so
 * workers are forked processes, each with its own context (fork_workers).
 * Commits are durable: ldb syncs unless LDB_FLG_NOSYNC, which is not used.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ldb.h>
#include <talloc.h>

#include "engine.h"

#define LMDB_MAP "lmdb_env_size:17179869184" /* default 1 MiB map fits nothing */

struct eng {
	struct ldb_context *ldb; /* NULL while released */
	char url[4200];
	char dir[4096];
	char base[1024];
	uint64_t seed;
	uint64_t next_guid; /* entry number for the next objectGUID */
};

struct eng_worker {
	struct ldb_context *ldb;
};

static int ldb_fail(struct ldb_context *ldb, int lrc, struct idc_diag *d, const char *what)
{
	const char *msg = ldb ? ldb_errstring(ldb) : NULL;
	return idc_diag_set(d, lrc == LDB_ERR_NO_SUCH_OBJECT ? -ENOENT : -EIO, "ldb %s: %s (%d)",
			    what, msg && msg[0] ? msg : ldb_strerror(lrc), lrc);
}

static int ldb_available(char *why, size_t cap)
{
	(void)why, (void)cap;
	return 0;
}

/* ldb's debug lines ("no-rule extended matches not supported yet") would
 * go to stderr over the progress line; the failure is reported anyway. */
static void quiet(void *ctx, enum ldb_debug_level level, const char *fmt, va_list ap)
{
	(void)ctx, (void)level, (void)fmt, (void)ap;
}

/* A new context connected to url; the map option matters to mdb only. */
static int connect_url(const char *url, struct ldb_context **out, struct idc_diag *d)
{
	const char *options[] = {LMDB_MAP, NULL};
	struct ldb_context *ldb = ldb_init(NULL, NULL);
	if (!ldb)
		return -ENOMEM;
	ldb_set_debug(ldb, quiet, NULL);
	int lrc = ldb_connect(ldb, url, 0, options);
	if (lrc != LDB_SUCCESS) {
		int rc = ldb_fail(ldb, lrc, d, "connect");
		talloc_free(ldb);
		return rc;
	}
	*out = ldb;
	return 0;
}

static int ensure_open(struct eng *e, struct idc_diag *d)
{
	return e->ldb ? 0 : connect_url(e->url, &e->ldb, d);
}

/* @INDEXLIST and @ATTRIBUTES, before any entry (ldb reindexes otherwise). */
static int write_config(struct eng *e, const struct eng_cfg *cfg, struct idc_diag *d)
{
	static const char *const attrs[][2] = {
	    {"uid", "CASE_INSENSITIVE"}, {"cn", "CASE_INSENSITIVE"}, {"sn", "CASE_INSENSITIVE"},
	    {"uidNumber", "INTEGER"},    {"gidNumber", "INTEGER"},
	};
	TALLOC_CTX *tmp = talloc_new(NULL);
	struct ldb_message *idx = ldb_msg_new(tmp), *at = ldb_msg_new(tmp);
	int lrc = LDB_ERR_OPERATIONS_ERROR;
	if (!idx || !at)
		goto out;
	idx->dn = ldb_dn_new(idx, e->ldb, "@INDEXLIST");
	at->dn = ldb_dn_new(at, e->ldb, "@ATTRIBUTES");
	lrc = ldb_msg_add_string(idx, "@IDXGUID", "objectGUID");
	lrc = lrc ? lrc : ldb_msg_add_string(idx, "@IDX_DN_GUID", "GUID");
	for (size_t i = 0; lrc == 0 && i < cfg->nindexes; i++)
		lrc = ldb_msg_add_string(idx, "@IDXATTR", cfg->indexes[i]);
	for (size_t i = 0; lrc == 0 && i < IDC_ARRAY_SIZE(attrs); i++)
		lrc = ldb_msg_add_string(at, attrs[i][0], attrs[i][1]);
	lrc = lrc ? lrc : ldb_add(e->ldb, idx);
	lrc = lrc ? lrc : ldb_add(e->ldb, at);
out:
	talloc_free(tmp);
	return lrc ? ldb_fail(e->ldb, lrc, d, "@INDEXLIST/@ATTRIBUTES") : 0;
}

static int create_common(const struct eng_cfg *cfg, const char *scheme, struct eng **out,
			 struct idc_diag *d)
{
	struct eng *e = calloc(1, sizeof(*e));
	if (!e)
		return -ENOMEM;
	snprintf(e->dir, sizeof(e->dir), "%s", cfg->dir);
	snprintf(e->url, sizeof(e->url), "%s://%s/sam.ldb", scheme, cfg->dir);
	e->seed = cfg->seed;
	snprintf(e->base, sizeof(e->base), "%s", cfg->base);
	int rc = ensure_open(e, d);
	rc = rc < 0 ? rc : write_config(e, cfg, d);
	if (rc < 0) {
		talloc_free(e->ldb);
		free(e);
		return rc;
	}
	*out = e;
	return 0;
}

static int tdb_create(const struct eng_cfg *cfg, struct eng **out, struct idc_diag *d)
{
	return create_common(cfg, "tdb", out, d);
}

static int mdb_create(const struct eng_cfg *cfg, struct eng **out, struct idc_diag *d)
{
	return create_common(cfg, "mdb", out, d);
}

static int add_guid(struct eng *e, struct ldb_message *msg)
{
	uint8_t g[16];
	eng_guid(e->seed, e->next_guid++, g);
	struct ldb_val v = {.data = g, .length = sizeof(g)};
	return ldb_msg_add_value(msg, "objectGUID", &v, NULL);
}

/* ==== import and export: ldb's own LDIF reader and writer ======================== */

static int import_all(struct eng *e, FILE *f, uint64_t *count, struct idc_diag *d)
{
	struct ldb_ldif *ldif;
	int lrc = LDB_SUCCESS;
	while (lrc == LDB_SUCCESS && (ldif = ldb_ldif_read_file(e->ldb, f)) != NULL) {
		lrc = add_guid(e, ldif->msg);
		lrc = lrc ? lrc : ldb_add(e->ldb, ldif->msg);
		*count += lrc == LDB_SUCCESS;
		ldb_ldif_read_free(e->ldb, ldif);
	}
	return lrc ? ldb_fail(e->ldb, lrc, d, "add") : 0;
}

/* One transaction for the whole file, as ldbadd does. */
static int eldb_import(struct eng *e, const char *path, uint64_t *count, struct idc_diag *d)
{
	*count = 0;
	int rc = ensure_open(e, d);
	if (rc < 0)
		return rc;
	FILE *f = fopen(path, "r");
	if (!f)
		return idc_diag_set(d, -errno, "%s: %s", path, strerror(errno));
	int lrc = ldb_transaction_start(e->ldb);
	rc = lrc ? ldb_fail(e->ldb, lrc, d, "transaction") : import_all(e, f, count, d);
	if (rc == 0 && (lrc = ldb_transaction_commit(e->ldb)) != LDB_SUCCESS)
		rc = ldb_fail(e->ldb, lrc, d, "commit");
	else if (rc < 0 && lrc == LDB_SUCCESS)
		ldb_transaction_cancel(e->ldb);
	fclose(f);
	return rc;
}

static int eldb_export(struct eng *e, const char *path, uint64_t *count, struct idc_diag *d)
{
	int rc = ensure_open(e, d);
	if (rc < 0)
		return rc;
	FILE *f = fopen(path, "w");
	if (!f)
		return idc_diag_set(d, -errno, "%s: %s", path, strerror(errno));
	TALLOC_CTX *tmp = talloc_new(NULL);
	struct ldb_result *res = NULL;
	/* the base's subtree: every entry, not ldb's @-records */
	int lrc = ldb_search(e->ldb, tmp, &res, ldb_dn_new(tmp, e->ldb, e->base), LDB_SCOPE_SUBTREE,
			     NULL, NULL);
	rc = lrc ? ldb_fail(e->ldb, lrc, d, "search") : 0;
	for (unsigned i = 0; rc == 0 && i < res->count; i++) {
		struct ldb_ldif l = {.changetype = LDB_CHANGETYPE_NONE, .msg = res->msgs[i]};
		if (ldb_ldif_write_file(e->ldb, f, &l) < 0)
			rc = idc_diag_set(d, -EIO, "%s: write failed", path);
	}
	*count = rc == 0 ? res->count : 0;
	talloc_free(tmp);
	if (fclose(f) != 0 && rc == 0)
		rc = idc_diag_set(d, -EIO, "%s: %s", path, strerror(errno));
	return rc;
}

/* ==== add, search, modify ========================================================= */

static int eldb_add(struct eng *e, const struct gen_rec *r, struct idc_diag *d)
{
	int rc = ensure_open(e, d);
	if (rc < 0)
		return rc;
	TALLOC_CTX *tmp = talloc_new(NULL);
	struct ldb_message *msg = ldb_msg_new(tmp);
	int lrc = msg ? LDB_SUCCESS : LDB_ERR_OPERATIONS_ERROR;
	if (msg)
		msg->dn = ldb_dn_new_fmt(msg, e->ldb, "%.*s", (int)r->dn.len, r->dn.ptr);
	for (size_t i = 0; lrc == LDB_SUCCESS && i < r->npairs; i++) {
		char *name = talloc_strndup(msg, r->pairs[i].name.ptr, r->pairs[i].name.len);
		char *val = talloc_strndup(msg, r->pairs[i].value.ptr, r->pairs[i].value.len);
		lrc = name && val ? ldb_msg_add_string(msg, name, val) : LDB_ERR_OPERATIONS_ERROR;
	}
	lrc = lrc ? lrc : add_guid(e, msg);
	/* ldb_add outside a transaction runs in its own, committed with sync */
	lrc = lrc ? lrc : ldb_add(e->ldb, msg);
	talloc_free(tmp);
	return lrc ? ldb_fail(e->ldb, lrc, d, "add") : 0;
}

static void eldb_release(struct eng *e)
{
	talloc_free(e->ldb);
	e->ldb = NULL;
}

static int eldb_worker_open(struct eng *e, struct eng_worker **out, struct idc_diag *d)
{
	struct eng_worker *w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	int rc = connect_url(e->url, &w->ldb, d);
	if (rc < 0) {
		free(w);
		return rc;
	}
	*out = w;
	return 0;
}

static int eldb_search(struct eng_worker *w, const char *base, const char *filter, uint64_t *found,
		       struct idc_diag *d)
{
	TALLOC_CTX *tmp = talloc_new(NULL);
	struct ldb_result *res = NULL;
	int lrc = ldb_search(w->ldb, tmp, &res, ldb_dn_new(tmp, w->ldb, base), LDB_SCOPE_SUBTREE,
			     NULL, "%s", filter);
	*found = lrc == LDB_SUCCESS ? res->count : 0;
	talloc_free(tmp);
	if (lrc && strstr(filter, ":dn:"))
		return idc_diag_set(d, -EOPNOTSUPP,
				    "ldb has no extensible match with :dn: and no matching rule "
				    "(\"dnAttributes extended match not supported yet\")");
	return lrc ? ldb_fail(w->ldb, lrc, d, "search") : 0;
}

static int eldb_modify(struct eng_worker *w, const char *dn, const char *attr, const char *value,
		       struct idc_diag *d)
{
	TALLOC_CTX *tmp = talloc_new(NULL);
	struct ldb_message *msg = ldb_msg_new(tmp);
	struct ldb_message_element *el;
	int lrc = msg ? LDB_SUCCESS : LDB_ERR_OPERATIONS_ERROR;
	if (msg)
		msg->dn = ldb_dn_new(msg, w->ldb, dn);
	lrc = lrc ? lrc : ldb_msg_add_empty(msg, attr, LDB_FLAG_MOD_REPLACE, &el);
	lrc = lrc ? lrc : ldb_msg_add_string(msg, attr, value);
	lrc = lrc ? lrc : ldb_modify(w->ldb, msg);
	talloc_free(tmp);
	return lrc ? ldb_fail(w->ldb, lrc, d, "modify") : 0;
}

static void eldb_worker_close(struct eng_worker *w)
{
	talloc_free(w->ldb);
	free(w);
}

static int64_t eldb_disk_bytes(struct eng *e)
{
	return eng_du(e->dir);
}

static void eldb_destroy(struct eng *e)
{
	if (!e)
		return;
	talloc_free(e->ldb);
	free(e);
}

/* ldb rewrites an index's whole list of entries on each add, so its import
 * grows about quadratically: past this size a sample takes hours. */
#define LDB_MAX_USERS 100000
#define LDB_MAX_USERS_WHY                                                                          \
	"capped at 100,000 users: ldb's import grows about quadratically (each add rewrites "      \
	"the index lists), hours per sample beyond"

const struct eng_ops eng_ldb_tdb = {
    .name = "ldb-tdb",
    .durability = "durable: ldb transactions sync at commit (no LDB_FLG_NOSYNC)",
    .max_users = LDB_MAX_USERS,
    .max_users_why = LDB_MAX_USERS_WHY,
    .access = "ldb C API in process (" LDB_VERSION "), tdb backend",
    .fork_workers = true,
    .available = ldb_available,
    .create = tdb_create,
    .import = eldb_import,
    .export = eldb_export,
    .add = eldb_add,
    .release = eldb_release,
    .worker_open = eldb_worker_open,
    .search = eldb_search,
    .modify = eldb_modify,
    .worker_close = eldb_worker_close,
    .disk_bytes = eldb_disk_bytes,
    .destroy = eldb_destroy,
};

const struct eng_ops eng_ldb_mdb = {
    .name = "ldb-mdb",
    .durability = "durable: ldb transactions sync at commit (no LDB_FLG_NOSYNC)",
    .max_users = LDB_MAX_USERS,
    .max_users_why = LDB_MAX_USERS_WHY,
    .access = "ldb C API in process (" LDB_VERSION "), LMDB backend",
    .fork_workers = true,
    .available = ldb_available,
    .create = mdb_create,
    .import = eldb_import,
    .export = eldb_export,
    .add = eldb_add,
    .release = eldb_release,
    .worker_open = eldb_worker_open,
    .search = eldb_search,
    .modify = eldb_modify,
    .worker_close = eldb_worker_close,
    .disk_bytes = eldb_disk_bytes,
    .destroy = eldb_destroy,
};
