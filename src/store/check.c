/* check: every invariant of the store, verified from both sides; and
 * statistics. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "store_int.h"

struct checker {
	struct store_txn *t;
	store_fault_cb cb;
	void *arg;
	long faults;
	struct store_ndn ndn;
	struct idc_buf key, norm;
	uint64_t max_id;
};

static void fault(struct checker *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void fault(struct checker *c, const char *fmt, ...)
{
	c->faults++;
	if (!c->cb)
		return;
	char line[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	c->cb(line, c->arg);
}

#define DNF(e) (int)((e)->dn.len > 200 ? 200 : (e)->dn.len), (e)->dn.ptr

/* ---- entries -> dn2id, parents, indexes --------------------------------------- */

static bool dn2id_has(struct checker *c, size_t skip, uint64_t *id)
{
	struct store_txn *t = c->t;
	if (store_dn_key(t, &c->ndn, skip))
		return false;
	MDB_val k = {t->key.len, t->key.data}, v;
	if (mdb_get(t->txn, t->s->dn2id, &k, &v) || v.mv_size != sizeof(uint64_t))
		return false;
	memcpy(id, v.mv_data, sizeof(*id));
	return true;
}

static void check_entry_indexes(struct checker *c, const struct store_entry *e)
{
	struct store *s = c->t->s;
	for (size_t i = 0; i < s->nidx; i++) {
		const struct store_index *ix = &s->idx[i];
		const struct store_attr *a = store_entry_attr(e, ix->name, ix->name_len);
		if (!a)
			continue;
		if (!index_pair_has(c->t->txn, s->pres, (struct store_val){ix->name, ix->name_len},
				    e->id))
			fault(c, "entry %llu (%.*s): %s missing from the presence index",
			      (unsigned long long)e->id, DNF(e), ix->name);
		for (size_t j = 0; j < a->nvals; j++) {
			bool skip;
			idc_buf_reset(&c->norm);
			if (store_normalize(ix->rule, a->vals[j].ptr, a->vals[j].len, &c->norm,
					    NULL) != 0) {
				fault(c, "entry %llu (%.*s): %s value %zu is not of its syntax",
				      (unsigned long long)e->id, DNF(e), ix->name, j);
				continue;
			}
			index_key((struct store_val){c->norm.data, c->norm.len}, &c->key, &skip);
			if (!skip &&
			    !index_pair_has(c->t->txn, ix->dbi,
					    (struct store_val){c->key.data, c->key.len}, e->id))
				fault(c, "entry %llu (%.*s): %s value %zu missing from eq.%s",
				      (unsigned long long)e->id, DNF(e), ix->name, j, ix->name);
		}
	}
}

static void check_one_entry(struct checker *c, const struct store_entry *e, struct store_val ndn)
{
	uint64_t id;
	if (store_dn_normalize(e->dn.ptr, e->dn.len, &c->ndn, NULL) != 0) {
		fault(c, "entry %llu: DN %.*s does not parse", (unsigned long long)e->id, DNF(e));
		return;
	}
	if (c->ndn.text.len != ndn.len || memcmp(c->ndn.text.data, ndn.ptr, ndn.len) != 0)
		fault(c, "entry %llu (%.*s): stored normalized DN differs",
		      (unsigned long long)e->id, DNF(e));
	if (!dn2id_has(c, 0, &id) || id != e->id)
		fault(c, "entry %llu (%.*s): dn2id does not point at it", (unsigned long long)e->id,
		      DNF(e));
	bool parent = c->ndn.nrdn < 2 || dn2id_has(c, 1, &id);
	for (size_t skip = 2; !parent && skip < c->ndn.nrdn; skip++)
		if (dn2id_has(c, skip, &id)) {
			fault(c, "entry %llu (%.*s): parent missing", (unsigned long long)e->id,
			      DNF(e));
			break;
		}
	check_entry_indexes(c, e);
}

/* Call fn for every record of dbi, in key order. */
typedef void (*record_fn)(struct checker *c, MDB_val k, MDB_val v, const void *arg);

static int walk(struct checker *c, MDB_dbi dbi, record_fn fn, const void *arg)
{
	MDB_cursor *cur;
	int rc = mdb_cursor_open(c->t->txn, dbi, &cur);
	if (rc)
		return store_mdb_err(rc);
	MDB_val k, v;
	for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0;
	     rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT))
		fn(c, k, v, arg);
	mdb_cursor_close(cur);
	return rc == MDB_NOTFOUND ? 0 : store_mdb_err(rc);
}

static void entry_record(struct checker *c, MDB_val k, MDB_val v, const void *arg)
{
	(void)arg;
	size_t id;
	struct store_entry e;
	struct store_val ndn;
	memcpy(&id, k.mv_data, sizeof(id));
	if (id > c->max_id)
		c->max_id = id;
	if (store_entry_decode(v.mv_data, v.mv_size, id, &c->t->sc2, &e, &ndn) != 0)
		fault(c, "entry %llu: record does not decode", (unsigned long long)id);
	else
		check_one_entry(c, &e, ndn);
}

/* ---- dn2id and indexes -> entries ----------------------------------------------------- */

static void dn2id_record(struct checker *c, MDB_val k, MDB_val v, const void *arg)
{
	(void)arg;
	struct store_txn *t = c->t;
	uint64_t id;
	struct store_entry e;
	struct store_val ndn;
	if (v.mv_size != sizeof(id)) {
		fault(c, "dn2id %.*s: bad value size", (int)k.mv_size, (char *)k.mv_data);
		return;
	}
	memcpy(&id, v.mv_data, sizeof(id));
	if (store_read_entry(t, id, &t->sc2, &e, &ndn) != 0) {
		fault(c, "dn2id %.*s: points at missing entry %llu", (int)k.mv_size,
		      (char *)k.mv_data, (unsigned long long)id);
		return;
	}
	if (store_dn_normalize(ndn.ptr, ndn.len, &c->ndn, NULL) != 0 ||
	    store_dn_key(t, &c->ndn, 0) != 0 || t->key.len != k.mv_size ||
	    memcmp(t->key.data, k.mv_data, k.mv_size) != 0)
		fault(c, "dn2id %.*s: entry %llu has another DN", (int)k.mv_size, (char *)k.mv_data,
		      (unsigned long long)id);
}

/* Does entry id hold a value of ix whose key is k? */
static bool entry_has_key(struct checker *c, const struct store_index *ix, MDB_val k, uint64_t id)
{
	struct store_entry e;
	if (store_read_entry(c->t, id, &c->t->sc2, &e, NULL) != 0)
		return false;
	const struct store_attr *a = store_entry_attr(&e, ix->name, ix->name_len);
	for (size_t j = 0; a && j < a->nvals; j++) {
		bool skip;
		idc_buf_reset(&c->norm);
		if (store_normalize(ix->rule, a->vals[j].ptr, a->vals[j].len, &c->norm, NULL))
			continue;
		index_key((struct store_val){c->norm.data, c->norm.len}, &c->key, &skip);
		if (!skip && c->key.len == k.mv_size &&
		    memcmp(c->key.data, k.mv_data, k.mv_size) == 0)
			return true;
	}
	return false;
}

static void index_record(struct checker *c, MDB_val k, MDB_val v, const void *arg)
{
	const struct store_index *ix = arg;
	uint64_t ids[INDEX_BLOCK_IDS];
	size_t n = index_block_decode(v, ids);
	if (n == 0)
		fault(c, "eq.%s: key '%.*s' holds a malformed id block", ix->name,
		      (int)(k.mv_size > 100 ? 100 : k.mv_size), (char *)k.mv_data);
	for (size_t i = 0; i < n; i++)
		if (!entry_has_key(c, ix, k, ids[i]))
			fault(c, "eq.%s: key '%.*s' points at entry %llu which lacks that value",
			      ix->name, (int)(k.mv_size > 100 ? 100 : k.mv_size), (char *)k.mv_data,
			      (unsigned long long)ids[i]);
}

static void pres_record(struct checker *c, MDB_val k, MDB_val v, const void *arg)
{
	(void)arg;
	struct store_txn *t = c->t;
	uint64_t ids[INDEX_BLOCK_IDS];
	size_t n = index_block_decode(v, ids);
	struct store_entry e;
	if (!index_find(t->s, k.mv_data, k.mv_size)) {
		fault(c, "pres: %.*s is not an indexed attribute", (int)k.mv_size,
		      (char *)k.mv_data);
		return;
	}
	if (n == 0)
		fault(c, "pres: %.*s holds a malformed id block", (int)k.mv_size,
		      (char *)k.mv_data);
	for (size_t i = 0; i < n; i++)
		if (store_read_entry(t, ids[i], &t->sc2, &e, NULL) != 0 ||
		    !store_entry_attr(&e, k.mv_data, k.mv_size))
			fault(c, "pres: %.*s points at entry %llu which lacks it", (int)k.mv_size,
			      (char *)k.mv_data, (unsigned long long)ids[i]);
}

static void check_meta(struct checker *c)
{
	struct store_txn *t = c->t;
	MDB_val k = {7, "next_id"}, v;
	uint64_t next = 0;
	if (mdb_get(t->txn, t->s->meta, &k, &v) || v.mv_size != sizeof(next))
		fault(c, "meta: next_id missing");
	else
		memcpy(&next, v.mv_data, sizeof(next));
	if (next <= c->max_id)
		fault(c, "meta: next_id %llu is not above the largest id %llu",
		      (unsigned long long)next, (unsigned long long)c->max_id);
}

long store_check(struct store_txn *t, store_fault_cb cb, void *arg)
{
	struct checker c = {.t = t, .cb = cb, .arg = arg, .ndn = STORE_NDN_INIT};
	int rc = t->nbulk ? index_bulk_flush(t) : 0;
	if (!rc)
		rc = walk(&c, t->s->id2entry, entry_record, NULL);
	if (!rc)
		rc = walk(&c, t->s->dn2id, dn2id_record, NULL);
	for (size_t i = 0; i < t->s->nidx && !rc; i++)
		rc = walk(&c, t->s->idx[i].dbi, index_record, &t->s->idx[i]);
	if (!rc)
		rc = walk(&c, t->s->pres, pres_record, NULL);
	if (!rc)
		check_meta(&c);
	store_ndn_free(&c.ndn);
	idc_buf_free(&c.key);
	idc_buf_free(&c.norm);
	return rc ? rc : c.faults;
}

int store_stats(struct store_txn *t, struct store_stats *out)
{
	struct store *s = t->s;
	MDB_stat st;
	MDB_envinfo info;
	int rc = mdb_stat(t->txn, s->id2entry, &st);
	if (rc)
		return store_mdb_err(rc);
	mdb_env_info(s->env, &info);
	*out = (struct store_stats){0};
	out->entries = st.ms_entries;
	out->map_size = info.me_mapsize;
	out->used_bytes = (info.me_last_pgno + 1) * (size_t)st.ms_psize;
	out->format_version = STORE_FORMAT_VERSION;
	out->nindexes = s->nidx;
	MDB_val k = {7, "next_id"}, v;
	if (mdb_get(t->txn, s->meta, &k, &v) == 0 && v.mv_size == sizeof(out->next_id))
		memcpy(&out->next_id, v.mv_data, sizeof(out->next_id));
	char path[4096];
	struct stat fst;
	snprintf(path, sizeof(path), "%s/data.mdb", s->dir);
	if (stat(path, &fst) == 0)
		out->file_bytes = (size_t)fst.st_size;
	return 0;
}
