/* search: scopes, the index planner and the candidate loop. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "store_int.h"

/* ---- id lists ------------------------------------------------------------------
 * Sorted, unique ids; `all` means "no index narrows this: scan". */
struct idl {
	uint64_t *ids;
	size_t n, cap;
	bool all;
};

static int idl_reserve(struct idl *l, size_t more)
{
	if (l->n + more <= l->cap)
		return 0;
	size_t cap = l->cap ? l->cap : 16;
	while (cap < l->n + more)
		cap *= 2;
	uint64_t *p = realloc(l->ids, cap * sizeof(*p));
	if (!p)
		return -ENOMEM;
	l->ids = p;
	l->cap = cap;
	return 0;
}

static int u64cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return (x > y) - (x < y);
}

static void idl_sort_unique(struct idl *l)
{
	if (l->n < 2)
		return;
	qsort(l->ids, l->n, sizeof(*l->ids), u64cmp);
	size_t k = 1;
	for (size_t i = 1; i < l->n; i++)
		if (l->ids[i] != l->ids[k - 1])
			l->ids[k++] = l->ids[i];
	l->n = k;
}

static void idl_intersect(struct idl *a, const struct idl *b)
{
	size_t i = 0, j = 0, k = 0;
	while (i < a->n && j < b->n) {
		if (a->ids[i] < b->ids[j])
			i++;
		else if (a->ids[i] > b->ids[j])
			j++;
		else {
			a->ids[k++] = a->ids[i];
			i++;
			j++;
		}
	}
	a->n = k;
}

static int idl_union(struct idl *a, const struct idl *b)
{
	if (b->n == 0)
		return 0;
	int rc = idl_reserve(a, b->n);
	if (rc)
		return rc;
	memcpy(a->ids + a->n, b->ids, b->n * sizeof(*b->ids));
	a->n += b->n;
	idl_sort_unique(a);
	return 0;
}

static void idl_free(struct idl *l)
{
	free(l->ids);
	*l = (struct idl){0};
}

/* ---- memory a search reuses ------------------------------------------------------------
 * One search per transaction at a time borrows t->smem (a search started
 * from another's callback gets a fresh one), so a loop of searches in one
 * transaction allocates nothing after the first. In a read transaction the
 * snapshot cannot change, so it also keeps cursors, renewed when the
 * transaction is (LMDB dbi handles of the store are never closed: a
 * removed index is emptied, not deleted). The last base is kept
 * normalized (a pure function of its text), and in a read transaction its
 * id with the snapshot it was found in: a read transaction renewed on the
 * same snapshot (nothing committed since) finds it there. */
#define KEPT_CURSORS 8

struct kept_cursor {
	MDB_dbi dbi;
	MDB_cursor *c;
	bool busy;
	bool stale; /* its transaction was reset since: renew before use */
};

struct search_mem {
	struct store_scratch sc;           /* the decoded candidate */
	struct idc_buf scratch, key, norm; /* filter evaluation, index keys */
	struct idl ids;                    /* candidates */
	struct idc_buf base_raw;           /* base as given (empty: none kept) ... */
	struct store_ndn base;             /* ... normalized */
	uint64_t base_id;                  /* its id; 0: not known */
	size_t base_snap;                  /* mdb_txn_id of the read txn that found base_id */
	struct kept_cursor cur[KEPT_CURSORS];
	size_t ncur;
};

static struct search_mem *mem_take(struct store_txn *t)
{
	struct search_mem *m = t->smem;
	t->smem = NULL;
	return m ? m : calloc(1, sizeof(*m));
}

static void mem_free(struct search_mem *m)
{
	store_scratch_free(&m->sc);
	idc_buf_free(&m->scratch);
	idc_buf_free(&m->key);
	idc_buf_free(&m->norm);
	idl_free(&m->ids);
	idc_buf_free(&m->base_raw);
	store_ndn_free(&m->base);
	/* read-only cursors may be closed after their transaction ended */
	for (size_t i = 0; i < m->ncur; i++)
		mdb_cursor_close(m->cur[i].c);
	free(m);
}

static void mem_give(struct store_txn *t, struct search_mem *m)
{
	if (!t->smem)
		t->smem = m;
	else
		mem_free(m);
}

/* Before the read transaction is reset for reuse: its cursors wait to be
 * renewed by the next use; the buffers and the base stay (resolve_base
 * trusts its id only on the same snapshot). */
void store_search_mem_reset(struct store_txn *t)
{
	struct search_mem *m = t->smem;
	for (size_t i = 0; m && i < m->ncur; i++)
		m->cur[i].stale = true;
}

void store_search_mem_free(struct store_txn *t)
{
	if (t->smem)
		mem_free(t->smem);
	t->smem = NULL;
}

/* A cursor on dbi: a kept one in a read transaction, else a new one. */
static int cursor_take(struct store_txn *t, struct search_mem *m, MDB_dbi dbi, MDB_cursor **c)
{
	bool keep = m && (t->flags & STORE_TXN_RDONLY);
	for (size_t i = 0; keep && i < m->ncur; i++) {
		struct kept_cursor *k = &m->cur[i];
		if (k->dbi != dbi || k->busy)
			continue;
		if (k->stale && mdb_cursor_renew(t->txn, k->c) != 0) {
			mdb_cursor_close(k->c); /* not expected: open a new one below */
			*k = m->cur[--m->ncur];
			break;
		}
		k->stale = false;
		k->busy = true;
		*c = k->c;
		return 0;
	}
	int rc = mdb_cursor_open(t->txn, dbi, c);
	if (rc)
		return store_mdb_err(rc);
	if (keep && m->ncur < KEPT_CURSORS)
		m->cur[m->ncur++] = (struct kept_cursor){dbi, *c, true, false};
	return 0;
}

static void cursor_give(struct search_mem *m, MDB_cursor *c)
{
	for (size_t i = 0; m && i < m->ncur; i++) {
		if (m->cur[i].c == c) {
			m->cur[i].busy = false;
			return;
		}
	}
	mdb_cursor_close(c);
}

/* ---- reading indexes ---------------------------------------------------------------- */

/* Append every id under the cursor's current key, whose first block v
 * holds (blocks of ids, index.c). */
static int fetch_dups(MDB_cursor *c, MDB_val v, struct idl *out)
{
	MDB_val k;
	int rc = 0;
	do {
		if ((rc = idl_reserve(out, INDEX_BLOCK_IDS)) != 0)
			return rc;
		size_t n = index_block_decode(v, out->ids + out->n);
		if (n == 0)
			return IDC_ECORRUPT;
		out->n += n;
	} while ((rc = mdb_cursor_get(c, &k, &v, MDB_NEXT_DUP)) == 0);
	return rc == MDB_NOTFOUND ? 0 : store_mdb_err(rc);
}

static int fetch_key(struct store_txn *t, struct search_mem *m, MDB_dbi dbi, struct store_val key,
		     struct idl *out)
{
	MDB_cursor *c;
	int rc = cursor_take(t, m, dbi, &c);
	if (rc)
		return rc;
	MDB_val k = {key.len, (void *)key.ptr}, v;
	rc = mdb_cursor_get(c, &k, &v, MDB_SET);
	rc = rc == 0 ? fetch_dups(c, v, out) : rc == MDB_NOTFOUND ? 0 : store_mdb_err(rc);
	cursor_give(m, c);
	return rc;
}

static size_t count_key(struct store_txn *t, struct search_mem *m, MDB_dbi dbi,
			struct store_val key)
{
	MDB_cursor *c;
	if (cursor_take(t, m, dbi, &c))
		return SIZE_MAX;
	MDB_val k = {key.len, (void *)key.ptr}, v;
	size_t n = 0;
	if (mdb_cursor_get(c, &k, &v, MDB_SET) == 0)
		n = index_count_estimate(c, v);
	cursor_give(m, c);
	return n;
}

static int keycmp_prefix(MDB_val k, struct store_val p, size_t plen)
{
	size_t n = k.mv_size < plen ? k.mv_size : plen;
	int c = memcmp(k.mv_data, p.ptr, n);
	return c ? c : (k.mv_size < plen ? -1 : 0);
}

enum range { RANGE_GE, RANGE_LE, RANGE_PREFIX };

/* Ids of all keys in a range. Long keys compare on their prefix only, so
 * the set is a superset; candidates are re-checked. */
static int fetch_range(struct store_txn *t, struct search_mem *m, MDB_dbi dbi, enum range r,
		       struct store_val a, struct idl *out)
{
	size_t plen = a.len < STORE_KEY_PREFIX ? a.len : STORE_KEY_PREFIX;
	MDB_cursor *c;
	int rc = cursor_take(t, m, dbi, &c);
	if (rc)
		return rc;
	MDB_val k = {plen, (void *)a.ptr}, v;
	int op = r == RANGE_LE ? MDB_FIRST : MDB_SET_RANGE;
	if (plen == 0)
		op = MDB_FIRST;
	for (rc = mdb_cursor_get(c, &k, &v, op); rc == 0;
	     rc = mdb_cursor_get(c, &k, &v, MDB_NEXT_NODUP)) {
		int cmp = keycmp_prefix(k, a, plen);
		if ((r == RANGE_PREFIX && cmp != 0) || (r == RANGE_LE && cmp > 0))
			break;
		if ((rc = fetch_dups(c, v, out)) != 0)
			break;
	}
	cursor_give(m, c);
	if (rc && rc != MDB_NOTFOUND)
		return rc < 0 ? rc : store_mdb_err(rc);
	idl_sort_unique(out);
	return 0;
}

/* Ids of the entries below base, whose reversed key plus ',' is below
 * (store_dn2id_below), parents first: in key order, unless a key was
 * hashed (its hash, not its DN, orders it after the kept prefix, so a
 * child could come before its parent): then in id order, where a parent
 * is always before its children (ops.c: an entry's parent exists when it
 * gets its id, and a rename gives a new one). */
static int fetch_subtree(struct store_txn *t, struct search_mem *m, struct store_val below,
			 struct store_val base, struct idl *out)
{
	MDB_cursor *c;
	int rc = cursor_take(t, m, t->s->dn2id, &c);
	if (rc)
		return rc;
	MDB_val k = store_dn2id_seek(below), v;
	int at = 0;
	bool hashed = false;
	for (rc = mdb_cursor_get(c, &k, &v, MDB_SET_RANGE); rc == 0;
	     rc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
		at = store_dn2id_below(t->txn, t->s, below, base, k, v);
		if (at == STORE_BELOW_NO)
			continue;
		if (at != STORE_BELOW_YES || (at = idl_reserve(out, 1)) != 0)
			break;
		memcpy(&out->ids[out->n++], v.mv_data, sizeof(uint64_t));
		hashed |= k.mv_size == STORE_KEY_MAX;
	}
	cursor_give(m, c);
	if (at < 0)
		return at;
	if (hashed)
		idl_sort_unique(out);
	return rc == 0 || rc == MDB_NOTFOUND ? 0 : rc < 0 ? rc : store_mdb_err(rc);
}

/* ---- the planner --------------------------------------------------------------------- */

struct plan_ctx {
	struct store_txn *t;
	struct idc_buf *explain; /* NULL unless asked */
	struct search_mem *m;    /* key, norm and cursors */
	const struct store_filter *top;
	bool exact; /* top is an equality whose index key is the whole value */
};

static void explain(struct plan_ctx *p, const char *what, const struct store_filter *f)
{
	if (p->explain)
		idc_buf_printf(p->explain, "%s%s%.*s", what, f && f->attr ? " " : "",
			       f && f->attr ? (int)f->attr_len : 0, f && f->attr ? f->attr : "");
}

static int plan(struct plan_ctx *p, const struct store_filter *f, struct idl *out);

static const struct store_index *filter_index(struct plan_ctx *p, const struct store_filter *f)
{
	return f->attr ? index_find(p->t->s, f->attr, f->attr_len) : NULL;
}

/* Key of an assertion under the index's own rule. */
static int assertion_key(struct plan_ctx *p, const struct store_index *ix,
			 const struct store_filter *f, bool *skip)
{
	struct store_val n = f->norm;
	if (f->type == SF_EXT && f->rule != ix->rule) {
		idc_buf_reset(&p->m->norm);
		if (store_normalize(ix->rule, f->raw.ptr, f->raw.len, &p->m->norm, NULL)) {
			*skip = true;
			return 0;
		}
		n = (struct store_val){p->m->norm.data, p->m->norm.len};
	}
	return index_key(n, &p->m->key, skip);
}

/* Extensible ":dn:" also matches entries below a match (their DN holds the
 * value in an ancestor's RDN, and every RDN value is an attribute value of
 * its entry). */
static int add_subtrees(struct plan_ctx *p, struct idl *out)
{
	struct store_txn *t = p->t;
	size_t n = out->n;
	for (size_t i = 0; i < n; i++) {
		struct store_entry e;
		struct store_val ndn;
		int rc = store_read_entry(t, out->ids[i], &t->sc2, &e, &ndn);
		if (rc == 0)
			rc = store_dn_normalize(ndn.ptr, ndn.len, &t->ndn, NULL);
		if (rc == 0)
			rc = store_ndn_rkey(&t->ndn, 0, &t->key2);
		if (rc == 0)
			rc = idc_buf_putc(&t->key2, ',');
		if (rc == 0)
			rc = fetch_subtree(t, p->m, (struct store_val){t->key2.data, t->key2.len},
					   (struct store_val){t->ndn.text.data, t->ndn.text.len},
					   out);
		if (rc)
			return rc;
	}
	idl_sort_unique(out);
	return 0;
}

static int plan_assertion(struct plan_ctx *p, const struct store_filter *f, struct idl *out)
{
	const struct store_index *ix = filter_index(p, f);
	if (!ix) {
		out->all = true;
		explain(p, "scan", NULL);
		return 0;
	}
	if (f->type == SF_PRESENT) {
		explain(p, "pres", f);
		return fetch_key(p->t, p->m, p->t->s->pres,
				 (struct store_val){ix->name, ix->name_len}, out);
	}
	if (!f->valid) { /* Undefined for every entry: nothing can match */
		explain(p, "none", f);
		return 0;
	}
	bool skip = false;
	int rc = 0;
	switch (f->type) {
	case SF_EQ:
	case SF_APPROX:
	case SF_EXT:
		rc = assertion_key(p, ix, f, &skip);
		if (rc || skip)
			break;
		explain(p, "eq", f);
		if (f == p->top && f->type != SF_EXT && f->rule == ix->rule)
			p->exact = p->m->key.len < STORE_KEY_MAX;
		rc = fetch_key(p->t, p->m, ix->dbi,
			       (struct store_val){p->m->key.data, p->m->key.len}, out);
		if (!rc && f->type == SF_EXT && f->dn_attrs)
			rc = add_subtrees(p, out);
		return rc;
	case SF_GE:
	case SF_LE:
		explain(p, f->type == SF_GE ? "range>=" : "range<=", f);
		return fetch_range(p->t, p->m, ix->dbi, f->type == SF_GE ? RANGE_GE : RANGE_LE,
				   f->norm, out);
	case SF_SUBSTR:
		if (!f->initial.ptr || f->initial.len == 0 || ix->rule == STORE_RULE_INTEGER)
			break;
		explain(p, "prefix", f);
		return fetch_range(p->t, p->m, ix->dbi, RANGE_PREFIX, f->initial, out);
	default:
		break;
	}
	if (rc)
		return rc;
	out->all = true;
	explain(p, "scan", NULL);
	return 0;
}

/* Cheap size estimate of a node: ids under one key, else "large". */
static size_t estimate(struct plan_ctx *p, const struct store_filter *f)
{
	const struct store_index *ix = f->type >= SF_EQ ? filter_index(p, f) : NULL;
	if (!ix)
		return SIZE_MAX;
	if (f->type == SF_PRESENT)
		return count_key(p->t, p->m, p->t->s->pres,
				 (struct store_val){ix->name, ix->name_len});
	bool skip = false;
	if ((f->type == SF_EQ || f->type == SF_APPROX) && f->valid &&
	    assertion_key(p, ix, f, &skip) == 0 && !skip)
		return count_key(p->t, p->m, ix->dbi,
				 (struct store_val){p->m->key.data, p->m->key.len});
	return SIZE_MAX - 1;
}

struct kid_est {
	size_t est;
	size_t idx;
};

static int kid_est_cmp(const void *a, const void *b)
{
	const struct kid_est *x = a, *y = b;
	return (x->est > y->est) - (x->est < y->est);
}

/* Candidates few enough for a far larger branch to be probed (below). */
#define PROBE_MAX 64

/* The index and key an equality or presence assertion is looked up by;
 * false when f has none (not indexed, a substring, a key too short). */
static bool probe_key(struct plan_ctx *p, const struct store_filter *f, MDB_dbi *dbi,
		      struct store_val *key)
{
	const struct store_index *ix = filter_index(p, f);
	bool skip = false;
	if (!ix)
		return false;
	if (f->type == SF_PRESENT) {
		*dbi = p->t->s->pres;
		*key = (struct store_val){ix->name, ix->name_len};
		return true;
	}
	if ((f->type != SF_EQ && f->type != SF_APPROX) || !f->valid ||
	    assertion_key(p, ix, f, &skip) != 0 || skip)
		return false;
	*dbi = ix->dbi;
	*key = (struct store_val){p->m->key.data, p->m->key.len};
	return true;
}

/* Keep in out only the ids that the index holds under key: one lookup per
 * candidate in the index, where leaving the branch to the filter reads
 * each candidate's entry, a page of the data file mapped apiece (a group
 * by its gid, which ten users hold as their primary group: ten users'
 * pages read to find the one group). */
static int plan_probe(struct plan_ctx *p, MDB_dbi dbi, struct store_val key, struct idl *out)
{
	MDB_cursor *c;
	int rc = cursor_take(p->t, p->m, dbi, &c);
	if (rc)
		return rc;
	size_t kept = 0;
	for (size_t i = 0; i < out->n && !rc; i++) {
		rc = index_cursor_has(c, key, out->ids[i]);
		if (rc == 1)
			out->ids[kept++] = out->ids[i];
		rc = rc < 0 ? rc : 0;
	}
	if (!rc)
		out->n = kept;
	cursor_give(p->m, c);
	return rc;
}

/* AND: start from the smallest indexed branch; intersect others only while
 * they are not far larger; a far larger one is probed for each of a few
 * candidates when it can be, else left to the filter (re-checked on every
 * candidate). */
static int plan_and(struct plan_ctx *p, const struct store_filter *f, struct idl *out)
{
	struct kid_est est[64];
	size_t n = f->nkids < 64 ? f->nkids : 64;
	for (size_t i = 0; i < n; i++)
		est[i] = (struct kid_est){estimate(p, f->kids[i]), i};
	qsort(est, n, sizeof(*est), kid_est_cmp);
	out->all = true;
	if (p->explain)
		idc_buf_printf(p->explain, "and(");
	int rc = 0;
	for (size_t i = 0; i < n && !rc; i++) {
		if (!out->all && out->n == 0)
			break;
		if (!out->all && est[i].est > 100 * out->n + 100) {
			MDB_dbi dbi;
			struct store_val key;
			if (out->n > PROBE_MAX)
				break;
			if (!probe_key(p, f->kids[est[i].idx], &dbi, &key))
				continue;
			if (p->explain && i)
				idc_buf_putc(p->explain, ',');
			explain(p, "probe", f->kids[est[i].idx]);
			rc = plan_probe(p, dbi, key, out);
			continue;
		}
		struct idl k = {0};
		if (p->explain && i)
			idc_buf_putc(p->explain, ',');
		rc = plan(p, f->kids[est[i].idx], &k);
		if (!rc && !k.all) {
			if (out->all) {
				idl_free(out);
				*out = k;
				continue;
			}
			idl_intersect(out, &k);
		}
		idl_free(&k);
	}
	if (p->explain)
		idc_buf_putc(p->explain, ')');
	return rc;
}

static int plan_or(struct plan_ctx *p, const struct store_filter *f, struct idl *out)
{
	if (p->explain)
		idc_buf_printf(p->explain, "or(");
	int rc = 0;
	for (size_t i = 0; i < f->nkids && !rc && !out->all; i++) {
		struct idl k = {0};
		if (p->explain && i)
			idc_buf_putc(p->explain, ',');
		rc = plan(p, f->kids[i], &k);
		if (!rc && k.all) {
			idl_free(out);
			out->all = true;
		} else if (!rc) {
			rc = idl_union(out, &k);
		}
		idl_free(&k);
	}
	if (p->explain)
		idc_buf_putc(p->explain, ')');
	return rc;
}

static int plan(struct plan_ctx *p, const struct store_filter *f, struct idl *out)
{
	switch (f->type) {
	case SF_AND:
		return plan_and(p, f, out);
	case SF_OR:
		return plan_or(p, f, out);
	case SF_NOT:
		out->all = true;
		explain(p, "scan", NULL);
		return 0;
	default:
		return plan_assertion(p, f, out);
	}
}

/* ---- scope ------------------------------------------------------------------------------ */

/* Is the entry with normalized DN e in scope of base b? */
static bool in_scope(struct store_val e, struct store_val b, enum store_scope sc)
{
	if (b.len == 0) /* one level below the root: see root_child() */
		return true;
	if (e.len == b.len)
		return sc != STORE_SCOPE_ONE && memcmp(e.ptr, b.ptr, b.len) == 0;
	int depth = store_ndn_below(e, b);
	return sc == STORE_SCOPE_SUB ? depth > 0 : sc == STORE_SCOPE_ONE && depth == 1;
}

/* One level below the root holds the naming contexts: entries whose
 * parent is not stored. */
static bool root_child(struct store_txn *t, struct store_val ndn)
{
	if (store_ndn_below(ndn, (struct store_val){"", 0}) == 1)
		return true;
	if (store_dn_normalize(ndn.ptr, ndn.len, &t->ndn, NULL) != 0 ||
	    store_dn_key(t, &t->ndn, 1) != 0)
		return false;
	MDB_val k = {t->key.len, t->key.data}, v;
	return mdb_get(t->txn, t->s->dn2id, &k, &v) == MDB_NOTFOUND;
}

/* ---- the search ------------------------------------------------------------------------- */

struct run {
	struct store_txn *t;
	const struct store_search *q;
	struct search_mem *m;
	struct store_val base; /* normalized, child-first */
	bool exact;            /* every candidate matches the filter (plan_ctx) */
	store_entry_cb cb;
	void *arg;
	size_t sent;
};

/* Whether e fails the filter. An exact plan skips the evaluation; debug
 * builds still run it, as a check that the index agrees with the entry,
 * and on a disagreement say so and leave the entry out as before. */
static bool filtered_out(struct run *r, const struct store_entry *e)
{
	if (!r->q->filter)
		return false;
#ifdef NDEBUG
	if (r->exact)
		return false;
#endif
	bool out = store_filter_eval(r->q->filter, e, &r->m->scratch) != SF_TRUE;
	if (out && r->exact)
		idc_log(IDC_LOG_ERR,
			"%s: index and entry %llu disagree; `idcache db check` lists faults",
			r->t->s->dir, (unsigned long long)e->id);
	return out;
}

/* Check one stored entry and hand it over; 0 to go on. */
static int visit(struct run *r, MDB_val v, uint64_t id)
{
	struct store_entry e;
	struct store_val ndn;
	int rc = store_entry_decode(v.mv_data, v.mv_size, id, &r->m->sc, &e, &ndn);
	if (rc)
		return rc;
	if (!in_scope(ndn, r->base, r->q->scope))
		return 0;
	if (r->base.len == 0 && r->q->scope == STORE_SCOPE_ONE && !root_child(r->t, ndn))
		return 0;
	if (filtered_out(r, &e))
		return 0;
	if (r->q->sizelimit && r->sent == r->q->sizelimit)
		return IDC_ESIZELIMIT;
	r->sent++;
	return r->cb(&e, r->arg);
}

static int visit_id(struct run *r, uint64_t id)
{
	size_t sid = id;
	MDB_val k = {sizeof(sid), &sid}, v;
	int rc = mdb_get(r->t->txn, r->t->s->id2entry, &k, &v);
	if (rc == MDB_NOTFOUND)
		return 0; /* an index pointing nowhere: `db check` reports it */
	return rc ? store_mdb_err(rc) : visit(r, v, id);
}

static int scan_all(struct run *r)
{
	MDB_cursor *c;
	int rc = mdb_cursor_open(r->t->txn, r->t->s->id2entry, &c);
	if (rc)
		return store_mdb_err(rc);
	MDB_val k, v;
	int out = 0; /* visit's result: the callback's value may be positive */
	for (rc = mdb_cursor_get(c, &k, &v, MDB_FIRST); rc == 0 && out == 0;
	     rc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
		size_t id;
		memcpy(&id, k.mv_data, sizeof(id));
		out = visit(r, v, id);
	}
	mdb_cursor_close(c);
	if (out)
		return out;
	return rc == MDB_NOTFOUND || rc == 0 ? 0 : store_mdb_err(rc);
}

/* Candidates of the base's subtree from dn2id: the base itself first. */
static int scan_subtree(struct run *r, uint64_t base_id)
{
	struct store_txn *t = r->t;
	struct idl ids = {0};
	int rc = store_dn_key(t, &r->m->base, 0);
	if (!rc)
		rc = idc_buf_putc(&t->key2, ',');
	if (!rc)
		rc = fetch_subtree(t, r->m, (struct store_val){t->key2.data, t->key2.len}, r->base,
				   &ids);
	if (!rc && r->q->scope == STORE_SCOPE_SUB)
		rc = visit_id(r, base_id);
	for (size_t i = 0; i < ids.n && !rc; i++)
		rc = visit_id(r, ids.ids[i]);
	idl_free(&ids);
	return rc;
}

/* The base of the last search is kept: a caller searching one container
 * over and over normalizes it once, and looks it up once per snapshot
 * (a daemon answering each lookup in a read transaction of its own renews
 * the same snapshot until something is written). */
static bool base_normalized(const struct run *r)
{
	const struct idc_buf *b = &r->m->base_raw;
	return b->len == r->q->base.len && memcmp(b->data, r->q->base.ptr, b->len) == 0;
}

static int resolve_base(struct run *r, uint64_t *base_id, struct idc_diag *d)
{
	struct store_txn *t = r->t;
	struct search_mem *m = r->m;
	*base_id = 0;
	if (r->q->base.len == 0)
		return 0;
	if (!base_normalized(r)) {
		m->base_id = 0;
		idc_buf_reset(&m->base_raw);
		int rc = store_dn_normalize(r->q->base.ptr, r->q->base.len, &m->base, d);
		if (!rc)
			rc = idc_buf_append(&m->base_raw, r->q->base.ptr, r->q->base.len);
		if (rc) {
			idc_buf_reset(&m->base_raw);
			return rc;
		}
	}
	/* a write transaction changes under its own searches: look up each time */
	size_t snap = (t->flags & STORE_TXN_RDONLY) ? mdb_txn_id(t->txn) : 0;
	if (m->base_id == 0 || snap == 0 || m->base_snap != snap) {
		m->base_id = 0;
		int rc = store_get_ndn(t, &m->base, &m->base_id);
		if (rc == -ENOENT)
			return idc_diag_set(d, rc, "search base %.*s does not exist",
					    (int)(r->q->base.len > 200 ? 200 : r->q->base.len),
					    r->q->base.ptr);
		if (rc) {
			m->base_id = 0;
			return rc;
		}
		m->base_snap = snap;
	}
	*base_id = m->base_id;
	r->base = (struct store_val){m->base.text.data, m->base.text.len};
	return 0;
}

static int run_search(struct run *r, uint64_t base_id)
{
	if (r->q->scope == STORE_SCOPE_BASE)
		return base_id ? visit_id(r, base_id) : 0;
	struct plan_ctx p = {r->t, NULL, r->m, r->q->filter, false};
	struct idl *c = &r->m->ids;
	*c = (struct idl){c->ids, 0, c->cap, false};
	int rc = 0;
	if (r->q->filter)
		rc = plan(&p, r->q->filter, c);
	else
		c->all = true;
	if (!rc && c->all)
		return base_id ? scan_subtree(r, base_id) : scan_all(r);
	r->exact = p.exact;
	/* visits may run a search of their own: it gets other memory */
	for (size_t i = 0; i < c->n && !rc; i++)
		rc = visit_id(r, c->ids[i]);
	return rc;
}

/* Set r up for q on t, with its memory and its base: the start of every
 * search (r->m, when set, is given back by the caller). */
static int run_start(struct run *r, struct store_txn *t, const struct store_search *q,
		     store_entry_cb cb, void *arg, uint64_t *base_id, struct idc_diag *d)
{
	int rc = t->nbulk ? index_bulk_flush(t) : 0;
	*r = (struct run){.t = t, .q = q, .m = rc ? NULL : mem_take(t), .cb = cb, .arg = arg};
	if (!rc && !r->m)
		rc = -ENOMEM;
	return rc ? rc : resolve_base(r, base_id, d);
}

int store_search(struct store_txn *t, const struct store_search *q, store_entry_cb cb, void *arg,
		 struct idc_diag *d)
{
	struct run r;
	uint64_t base_id;
	int rc = run_start(&r, t, q, cb, arg, &base_id, d);
	if (!rc)
		rc = run_search(&r, base_id);
	if (rc == IDC_ESIZELIMIT)
		idc_diag_set(d, rc, "size limit of %zu entries exceeded", q->sizelimit);
	if (r.m)
		mem_give(t, r.m);
	return rc;
}

/* The walk of store_search_from: the subtree's dn2id keys from the one
 * after *at (or the first), each entry visited as a search visits it. */
static int walk_from(struct run *r, struct store_val below, struct idc_buf *at)
{
	MDB_cursor *c;
	int rc = cursor_take(r->t, r->m, r->t->s->dn2id, &c);
	if (rc)
		return rc;
	bool resumed = at->len > 0;
	MDB_val k = resumed ? (MDB_val){at->len, at->data} : store_dn2id_seek(below);
	MDB_val v;
	int out = 0; /* visit's result: the callback's value may be positive */
	rc = mdb_cursor_get(c, &k, &v, MDB_SET_RANGE);
	if (rc == 0 && resumed && k.mv_size == at->len && memcmp(k.mv_data, at->data, at->len) == 0)
		rc = mdb_cursor_get(c, &k, &v, MDB_NEXT); /* read by the call before */
	for (; rc == 0 && out == 0; rc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
		int where = store_dn2id_below(r->t->txn, r->t->s, below, r->base, k, v);
		if (where == STORE_BELOW_NO)
			continue;
		if (where != STORE_BELOW_YES) {
			out = where; /* past the run (0) or an error */
			break;
		}
		idc_buf_reset(at);
		if ((out = idc_buf_append(at, k.mv_data, k.mv_size)) != 0)
			break;
		uint64_t id;
		memcpy(&id, v.mv_data, sizeof(id));
		out = visit_id(r, id);
	}
	cursor_give(r->m, c);
	if (out)
		return out < 0 ? out : 1;
	return rc == 0 || rc == MDB_NOTFOUND ? 0 : store_mdb_err(rc);
}

int store_search_from(struct store_txn *t, const struct store_search *q, struct idc_buf *at,
		      store_entry_cb cb, void *arg, struct idc_diag *d)
{
	if (q->base.len == 0 || q->scope == STORE_SCOPE_BASE || q->sizelimit)
		return -EINVAL;
	struct run r;
	struct idc_buf prefix = IDC_BUF_INIT;
	uint64_t base_id;
	int rc = run_start(&r, t, q, cb, arg, &base_id, d);
	/* the key's text, copied: visits may look up DNs of their own */
	if (!rc)
		rc = store_dn_key(t, &r.m->base, 0);
	if (!rc)
		rc = idc_buf_append(&prefix, t->key2.data, t->key2.len);
	if (!rc)
		rc = idc_buf_putc(&prefix, ',');
	if (!rc)
		rc = walk_from(&r, (struct store_val){prefix.data, prefix.len}, at);
	idc_buf_free(&prefix);
	if (r.m)
		mem_give(t, r.m);
	return rc;
}

int store_search_plan(struct store_txn *t, const struct store_search *q, struct idc_buf *out)
{
	if (q->scope == STORE_SCOPE_BASE)
		return idc_buf_printf(out, "base");
	if (!q->filter)
		return idc_buf_printf(out, "scan");
	int rc = t->nbulk ? index_bulk_flush(t) : 0;
	struct plan_ctx p = {t, out, rc ? NULL : mem_take(t), q->filter, false};
	if (!rc && !p.m)
		rc = -ENOMEM;
	struct idl c = {0};
	if (!rc)
		rc = plan(&p, q->filter, &c);
	if (!rc)
		rc = c.all ? idc_buf_printf(out, " -> scan")
			   : idc_buf_printf(out, " -> %zu candidates", c.n);
	idl_free(&c);
	if (p.m)
		mem_give(t, p.m);
	return rc;
}
