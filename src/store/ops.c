/* ops: add, modify, replace, delete, modrdn and reads of single entries. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "store_int.h"

#define SHOWN(v) (int)((v).len > 80 ? 80 : (v).len), (v).ptr

/* ---- reads -------------------------------------------------------------------- */

int store_dn_key(struct store_txn *t, const struct store_ndn *n, size_t skip)
{
	int rc = store_ndn_rkey(n, skip, &t->key2);
	bool empty;
	if (!rc)
		rc = index_key((struct store_val){t->key2.data, t->key2.len}, &t->key, &empty);
	return rc;
}

int store_get_ndn(struct store_txn *t, const struct store_ndn *n, uint64_t *id)
{
	int rc = store_dn_key(t, n, 0);
	if (rc)
		return rc;
	if (t->key.len == 0)
		return -ENOENT;
	MDB_val k = {t->key.len, t->key.data}, v;
	rc = mdb_get(t->txn, t->s->dn2id, &k, &v);
	if (rc)
		return store_mdb_err(rc);
	if (v.mv_size != sizeof(size_t))
		return IDC_ECORRUPT;
	memcpy(id, v.mv_data, sizeof(size_t));
	return 0;
}

int store_dn2id_below(MDB_txn *txn, const struct store *s, struct store_val below,
		      struct store_val base, MDB_val k, MDB_val v)
{
	MDB_val seek = store_dn2id_seek(below);
	if (k.mv_size < seek.mv_size || memcmp(k.mv_data, seek.mv_data, seek.mv_size) != 0)
		return STORE_BELOW_END;
	size_t id;
	if (v.mv_size != sizeof(id))
		return STORE_BELOW_NO; /* `db check` reports it */
	if (k.mv_size < STORE_KEY_MAX) /* the whole reversed DN */
		return k.mv_size > below.len && memcmp(k.mv_data, below.ptr, below.len) == 0
			   ? STORE_BELOW_YES
			   : STORE_BELOW_NO;
	if (below.len <= STORE_KEY_PREFIX)
		return STORE_BELOW_YES;
	memcpy(&id, v.mv_data, sizeof(id));
	MDB_val ek = {sizeof(id), &id}, ev;
	struct store_val ndn;
	int rc = mdb_get(txn, s->id2entry, &ek, &ev);
	if (rc == MDB_NOTFOUND)
		return STORE_BELOW_NO; /* likewise */
	if (rc)
		return store_mdb_err(rc);
	rc = store_entry_ndn(ev.mv_data, ev.mv_size, &ndn);
	if (rc)
		return rc;
	return store_ndn_below(ndn, base) ? STORE_BELOW_YES : STORE_BELOW_NO;
}

int store_read_entry(struct store_txn *t, uint64_t id, struct store_scratch *sc,
		     struct store_entry *out, struct store_val *ndn)
{
	size_t sid = id;
	MDB_val k = {sizeof(sid), &sid}, v;
	int rc = mdb_get(t->txn, t->s->id2entry, &k, &v);
	if (rc)
		return store_mdb_err(rc);
	return store_entry_decode(v.mv_data, v.mv_size, id, sc, out, ndn);
}

static int normalize_dn(struct store_txn *t, struct store_val dn, struct idc_diag *d)
{
	if (dn.len > STORE_DN_MAX)
		return idc_diag_set(d, -E2BIG, "DN longer than %d bytes", STORE_DN_MAX);
	return store_dn_normalize(dn.ptr, dn.len, &t->ndn, d);
}

int store_get(struct store_txn *t, struct store_val dn, struct store_entry *out, struct idc_diag *d)
{
	int rc = normalize_dn(t, dn, d);
	uint64_t id;
	if (!rc)
		rc = store_get_ndn(t, &t->ndn, &id);
	if (!rc)
		rc = store_read_entry(t, id, &t->sc, out, NULL);
	if (rc == -ENOENT)
		idc_diag_set(d, rc, "no such entry: %.*s", SHOWN(dn));
	return rc;
}

int store_get_id(struct store_txn *t, uint64_t id, struct store_entry *out)
{
	return store_read_entry(t, id, &t->sc, out, NULL);
}

/* ---- validation ------------------------------------------------------------------- */

static int u64_cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return (x > y) - (x < y);
}

/* Whether two of h[0..n) are equal. Entries have a handful of values per
 * attribute: comparing all pairs beats qsort's call overhead there. */
static bool has_dup_hash(uint64_t *h, size_t n)
{
	if (n <= 16) {
		for (size_t i = 1; i < n; i++)
			for (size_t j = 0; j < i; j++)
				if (h[i] == h[j])
					return true;
		return false;
	}
	qsort(h, n, sizeof(*h), u64_cmp);
	for (size_t i = 1; i < n; i++)
		if (h[i] == h[i - 1])
			return true;
	return false;
}

/* Remember index key akeys[start..) of value for index ix (store_add). */
static int keep_key(struct add_prep *p, size_t start, uint32_t ix)
{
	bool skip;
	int rc = index_key_inplace(&p->akeys, start, &skip);
	if (rc || skip)
		return rc;
	if (p->nak == p->akcap) {
		size_t cap = p->akcap ? p->akcap * 2 : 32;
		struct add_key *k = realloc(p->ak, cap * sizeof(*k));
		if (!k)
			return -ENOMEM;
		p->ak = k;
		p->akcap = cap;
	}
	size_t len = p->akeys.len - start;
	p->ak[p->nak++] =
	    (struct add_key){start, (uint32_t)len, ix, index_key_hash(p->akeys.data + start, len)};
	return 0;
}

/* Every value must be of its rule's syntax, and no two equal under the rule
 * (LDAP values are sets). Equal 64-bit hashes of normalized values count as
 * equal: a false alarm needs a collision inside one attribute. With keep
 * (store_add), the index keys of an indexed attribute are gathered in
 * p->ak from the same normalization. */
static int check_attr(const struct store *s, struct add_prep *p, const struct store_attr *a,
		      bool keep, struct idc_diag *d)
{
	if (a->nvals == 0)
		return idc_diag_set(d, IDC_ESYNTAX, "attribute %.*s has no values", SHOWN(a->name));
	const struct store_index *ix = keep ? index_find(s, a->norm.ptr, a->norm.len) : NULL;
	enum store_rule r = store_attr_rule(a->norm.ptr, a->norm.len);
	/* Text and octet values always normalize, and one value cannot repeat:
	 * nothing to check, and no index wants the normalized form. */
	if (!ix && a->nvals == 1 && r != STORE_RULE_INTEGER && r != STORE_RULE_DN &&
	    (a->vals[0].ptr || a->vals[0].len == 0))
		return 0;
	uint32_t ixn = ix ? (uint32_t)(ix - s->idx) : 0;
	/* a valid entry names each attribute once, so at most nidx fit; the
	 * bound only matters for an entry refused below as listing one twice */
	if (ix && p->npres < STORE_MAX_INDEXES)
		p->ak_pres[p->npres++] = ixn;
	uint64_t small[16], *h = a->nvals <= 16 ? small : malloc(a->nvals * sizeof(*h));
	if (!h)
		return -ENOMEM;
	int rc = 0;
	struct idc_diag vd; /* not "= {0}": clearing 512 bytes per value showed up */
	for (size_t i = 0; i < a->nvals && !rc; i++) {
		struct idc_buf *out = ix ? &p->akeys : &p->norm;
		size_t start = ix ? p->akeys.len : 0;
		if (!ix)
			idc_buf_reset(&p->norm);
		vd.msg[0] = '\0';
		rc = store_normalize(r, a->vals[i].ptr, a->vals[i].len, out, &vd);
		if (rc)
			rc = idc_diag_set(d, rc, "attribute %.*s: value '%.*s': %s", SHOWN(a->name),
					  SHOWN(a->vals[i]), vd.msg);
		else if (a->nvals > 1) /* one value cannot repeat: no hash */
			h[i] = idc_hash64(out->data + start, out->len - start, 0);
		if (!rc && ix)
			rc = keep_key(p, start, ixn);
	}
	if (!rc && a->nvals > 1 && has_dup_hash(h, a->nvals))
		rc = idc_diag_set(d, IDC_EVALEXISTS, "attribute %.*s: a value appears twice",
				  SHOWN(a->name));
	if (h != small)
		free(h);
	return rc;
}

struct naming_ctx {
	const struct store_entry *e;
	struct idc_buf *want, *have;
	struct idc_diag *d;
};

/* Each AVA of the entry's own RDN must be one of its values. */
static int naming_ava(struct store_val type, struct store_val value, size_t rdn, void *arg)
{
	struct naming_ctx *c = arg;
	(void)rdn; /* always 0 */
	char buf[STORE_ATTR_MAX];
	const char *canon;
	size_t n = store_attr_canon_ref(type.ptr, type.len, buf, &canon);
	const struct store_attr *a = n ? store_entry_attr(c->e, canon, n) : NULL;
	enum store_rule r = store_attr_rule(canon, n);
	/* The same bytes normalize the same way, and check_attr has seen the
	 * attribute's values normalize: the usual case needs no more work. */
	for (size_t i = 0; a && i < a->nvals; i++)
		if (a->vals[i].len == value.len &&
		    memcmp(a->vals[i].ptr, value.ptr, value.len) == 0)
			return 0;
	idc_buf_reset(c->want);
	if (a && store_normalize(r, value.ptr, value.len, c->want, NULL) == 0) {
		for (size_t i = 0; i < a->nvals; i++) {
			idc_buf_reset(c->have);
			if (store_normalize(r, a->vals[i].ptr, a->vals[i].len, c->have, NULL) ==
				0 &&
			    c->have->len == c->want->len &&
			    memcmp(c->have->data, c->want->data, c->want->len) == 0)
				return 0;
		}
	}
	return idc_diag_set(c->d, IDC_ENAMING,
			    "entry %.*s: naming value %.*s=%.*s is not among its values",
			    SHOWN(c->e->dn), SHOWN(type), SHOWN(value));
}

/* ndn: e's DN normalized (its AVAs kept), or NULL to parse it again. */
static int check_naming(struct add_prep *p, const struct store_entry *e,
			const struct store_ndn *ndn, struct idc_diag *d)
{
	/* p->norm is free once check_attr is done */
	struct naming_ctx c = {e, &p->want, &p->norm, d};
	return store_dn_rdn0_avas(ndn, e->dn.ptr, e->dn.len, naming_ava, &c, d);
}

/* keep: gather the index keys for index_add (store_add). ndn: e's DN
 * normalized, or NULL (check_naming). */
static int check_entry(const struct store *s, struct add_prep *p, const struct store_entry *e,
		       bool keep, const struct store_ndn *ndn, struct idc_diag *d)
{
	if (keep) {
		idc_buf_reset(&p->akeys);
		p->nak = 0;
		p->npres = 0;
	}
	for (size_t i = 0; i < e->nattrs; i++) {
		int rc = check_attr(s, p, &e->attrs[i], keep, d);
		if (rc)
			return rc;
		if (i > 0 && e->attrs[i].norm.len == e->attrs[i - 1].norm.len &&
		    memcmp(e->attrs[i].norm.ptr, e->attrs[i - 1].norm.ptr, e->attrs[i].norm.len) ==
			0)
			return idc_diag_set(d, -EINVAL, "attribute %.*s listed twice",
					    SHOWN(e->attrs[i].name));
	}
	return check_naming(p, e, ndn, d);
}

/* ---- add ------------------------------------------------------------------------------ */

static int flush_bulk(struct store_txn *t)
{
	return t->nbulk ? index_bulk_flush(t) : 0;
}

/* The parent must exist, unless no ancestor does (a new naming context).
 * Adds come in runs under one parent: the last one found is not looked up
 * again. */
static int check_parent(struct store_txn *t, const struct store_ndn *ndn, struct store_val pkey,
			struct store_val dn, struct idc_diag *d)
{
	for (size_t skip = 1; skip < ndn->nrdn; skip++) {
		struct store_val key = pkey; /* the parent's, from store_add_prepare */
		if (skip > 1) {
			int rc = store_dn_key(t, ndn, skip);
			if (rc)
				return rc;
			key = (struct store_val){t->key.data, t->key.len};
		}
		if (skip == 1 && t->pkey.len == key.len && key.len &&
		    memcmp(t->pkey.data, key.ptr, key.len) == 0)
			return 0;
		MDB_val k = {key.len, (void *)key.ptr}, v;
		int rc = mdb_get(t->txn, t->s->dn2id, &k, &v);
		if (rc == 0 && skip == 1) {
			idc_buf_reset(&t->pkey);
			return idc_buf_append(&t->pkey, key.ptr, key.len);
		}
		if (rc == 0)
			return idc_diag_set(d, IDC_ENOPARENT, "parent of %.*s does not exist",
					    SHOWN(dn));
		if (rc != MDB_NOTFOUND)
			return store_mdb_err(rc);
	}
	return 0;
}

static int put_entry(struct store_txn *t, uint64_t id, const struct idc_buf *enc, unsigned flags)
{
	size_t sid = id;
	MDB_val k = {sizeof(sid), &sid}, v = {enc->len, enc->data};
	return store_mdb_err(mdb_put(t->txn, t->s->id2entry, &k, &v, flags));
}

/* p->dkey: the dn2id keys of the entry and of its parent. The parent's
 * reversed DN begins the entry's ("dc=com,ou=people" of
 * "dc=com,ou=people,uid=a"), so it is a copy only when the entry's key is
 * long enough to be hashed. */
static int prep_dn_keys(struct add_prep *p)
{
	const struct store_ndn *n = &p->ndn;
	bool empty;
	int rc = store_ndn_rkey(n, 0, &p->dkey);
	if (rc)
		return rc;
	size_t rdn0 = (n->nrdn > 1 ? n->off[1] - 1 : n->text.len) - n->off[0];
	p->pkey_off = 0;
	p->pkey_len = n->nrdn > 1 ? p->dkey.len - rdn0 - 1 : 0;
	if (p->dkey.len < STORE_KEY_MAX) {
		p->dkey_len = p->dkey.len;
		return 0;
	}
	rc = index_key_inplace(&p->dkey, 0, &empty);
	p->dkey_len = p->dkey.len;
	if (rc || n->nrdn < 2)
		return rc;
	p->pkey_off = p->dkey.len;
	rc = store_ndn_rkey(n, 1, &p->norm);
	if (!rc)
		rc = idc_buf_append(&p->dkey, p->norm.data, p->norm.len);
	if (!rc)
		rc = index_key_inplace(&p->dkey, p->pkey_off, &empty);
	p->pkey_len = p->dkey.len - p->pkey_off;
	return rc;
}

int store_add_prepare(const struct store *s, struct add_prep *p, const struct store_entry *e,
		      struct idc_diag *d)
{
	if (e->dn.len > STORE_DN_MAX)
		return idc_diag_set(d, -E2BIG, "DN longer than %d bytes", STORE_DN_MAX);
	int rc = store_dn_normalize(e->dn.ptr, e->dn.len, &p->ndn, d);
	if (rc)
		return rc;
	if (p->ndn.nrdn == 0)
		return idc_diag_set(d, -EINVAL, "the empty DN cannot hold an entry");
	rc = check_entry(s, p, e, true, &p->ndn, d);
	if (!rc)
		rc = prep_dn_keys(p);
	if (!rc)
		rc = store_entry_encode(e, (struct store_val){p->ndn.text.data, p->ndn.text.len},
					&p->enc);
	if (rc == -E2BIG)
		return idc_diag_set(d, rc, "entry %.*s is larger than %u bytes", SHOWN(e->dn),
				    STORE_ENTRY_MAX);
	return rc;
}

int store_add_prepared(struct store_txn *t, const struct add_prep *p, struct store_val dn,
		       uint64_t *idp, struct idc_diag *d)
{
	const char *keys = p->dkey.data;
	int rc =
	    check_parent(t, &p->ndn, (struct store_val){keys + p->pkey_off, p->pkey_len}, dn, d);
	if (rc)
		return rc;
	/* Nothing is written before this put, which doubles as the check
	 * that the DN is new: a present one leaves the transaction as it was. */
	uint64_t id = t->next_id;
	size_t sid = id;
	MDB_val k = {p->dkey_len, (void *)keys};
	MDB_val v = {sizeof(sid), &sid};
	rc = mdb_put(t->txn, t->s->dn2id, &k, &v, MDB_NOOVERWRITE);
	if (rc == MDB_KEYEXIST)
		return idc_diag_set(d, -EEXIST, "entry %.*s already exists", SHOWN(dn));
	rc = store_mdb_err(rc);
	if (!rc)
		rc = put_entry(t, id, &p->enc, MDB_APPEND);
	if (!rc)
		rc = index_add(t, p, id);
	if (rc)
		return rc;
	t->next_id++;
	if (idp)
		*idp = id;
	return 0;
}

void store_add_prep_free(struct add_prep *p)
{
	store_ndn_free(&p->ndn);
	idc_buf_free(&p->enc);
	idc_buf_free(&p->akeys);
	idc_buf_free(&p->dkey);
	idc_buf_free(&p->norm);
	idc_buf_free(&p->want);
	free(p->ak);
	*p = (struct add_prep){.ndn = STORE_NDN_INIT};
}

/* t's add_prep, made on first use: read transactions never need one, and
 * their begin (a calloc of the transaction) stays small. */
static struct add_prep *txn_prep(struct store_txn *t)
{
	if (!t->ap && (t->ap = malloc(sizeof(*t->ap))) != NULL)
		*t->ap = (struct add_prep){.ndn = STORE_NDN_INIT};
	return t->ap;
}

int store_add(struct store_txn *t, const struct store_entry *e, uint64_t *idp, struct idc_diag *d)
{
	struct add_prep *p = txn_prep(t);
	if (!p)
		return -ENOMEM;
	int rc = store_add_prepare(t->s, p, e, d);
	return rc ? rc : store_add_prepared(t, p, e->dn, idp, d);
}

/* ---- modify ------------------------------------------------------------------------ */

/* A mutable copy of an entry's attributes for applying modifications. */
struct work {
	struct store_attr *attrs;
	size_t n, cap;
};

static struct store_attr *work_find(struct work *w, const char *norm, size_t len)
{
	for (size_t i = 0; i < w->n; i++)
		if (w->attrs[i].norm.len == len && memcmp(w->attrs[i].norm.ptr, norm, len) == 0)
			return &w->attrs[i];
	return NULL;
}

static int work_grow_vals(struct idc_arena *a, struct store_attr *at, size_t more)
{
	struct store_val *v = idc_arena_alloc(a, (at->nvals + more) * sizeof(*v));
	if (!v)
		return -ENOMEM;
	if (at->nvals)
		memcpy(v, at->vals, at->nvals * sizeof(*v));
	at->vals = v;
	return 0;
}

static struct store_attr *work_add_attr(struct idc_arena *a, struct work *w, struct store_val name,
					const char *canon, size_t n)
{
	if (w->n == w->cap) {
		size_t cap = w->cap ? w->cap * 2 : 16;
		struct store_attr *na = idc_arena_alloc(a, cap * sizeof(*na));
		if (!na)
			return NULL;
		if (w->n)
			memcpy(na, w->attrs, w->n * sizeof(*na));
		w->attrs = na;
		w->cap = cap;
	}
	char *c = idc_arena_strndup(a, canon, n);
	if (!c)
		return NULL;
	uint32_t rank = 0; /* a new attribute goes after those present */
	for (size_t i = 0; i < w->n; i++)
		if (w->attrs[i].rank >= rank)
			rank = w->attrs[i].rank + 1;
	w->attrs[w->n] = (struct store_attr){name, {c, n}, NULL, 0, rank};
	return &w->attrs[w->n++];
}

/* Index of the value of at equal to v under rule r, or -1. */
static long work_value_find(struct store_txn *t, enum store_rule r, const struct store_attr *at,
			    struct store_val v)
{
	idc_buf_reset(&t->norm);
	if (store_normalize(r, v.ptr, v.len, &t->norm, NULL))
		return -1;
	for (size_t i = 0; i < at->nvals; i++) {
		idc_buf_reset(&t->key2);
		if (store_normalize(r, at->vals[i].ptr, at->vals[i].len, &t->key2, NULL) == 0 &&
		    t->key2.len == t->norm.len &&
		    memcmp(t->key2.data, t->norm.data, t->norm.len) == 0)
			return (long)i;
	}
	return -1;
}

/* The work starts as a copy of e's attributes (values by reference). */
static int work_from_entry(struct store_txn *t, struct work *w, const struct store_entry *e)
{
	for (size_t i = 0; i < e->nattrs; i++) {
		const struct store_attr *a = &e->attrs[i];
		struct store_attr *at =
		    work_add_attr(&t->arena, w, a->name, a->norm.ptr, a->norm.len);
		if (!at || work_grow_vals(&t->arena, at, a->nvals))
			return -ENOMEM;
		if (a->nvals)
			memcpy(at->vals, a->vals, a->nvals * sizeof(*at->vals));
		at->nvals = a->nvals;
		at->rank = a->rank;
	}
	return 0;
}

static int mod_add(struct store_txn *t, struct work *w, const struct store_mod *m,
		   const char *canon, size_t n, struct idc_diag *d)
{
	struct store_attr *at = work_find(w, canon, n);
	if (!at && !(at = work_add_attr(&t->arena, w, m->attr, canon, n)))
		return -ENOMEM;
	enum store_rule r = store_attr_rule(canon, n);
	if (work_grow_vals(&t->arena, at, m->nvals))
		return -ENOMEM;
	for (size_t i = 0; i < m->nvals; i++) {
		if (work_value_find(t, r, at, m->vals[i]) >= 0)
			return idc_diag_set(d, IDC_EVALEXISTS,
					    "attribute %.*s: value '%.*s' already exists",
					    SHOWN(m->attr), SHOWN(m->vals[i]));
		at->vals[at->nvals++] = m->vals[i];
	}
	return 0;
}

static int mod_delete(struct store_txn *t, struct work *w, const struct store_mod *m,
		      const char *canon, size_t n, struct idc_diag *d)
{
	struct store_attr *at = work_find(w, canon, n);
	if (!at || at->nvals == 0)
		return idc_diag_set(d, IDC_ENOATTR, "no attribute %.*s", SHOWN(m->attr));
	if (m->nvals == 0) {
		at->nvals = 0;
		return 0;
	}
	enum store_rule r = store_attr_rule(canon, n);
	for (size_t i = 0; i < m->nvals; i++) {
		long k = work_value_find(t, r, at, m->vals[i]);
		if (k < 0)
			return idc_diag_set(d, IDC_ENOATTR, "attribute %.*s has no value '%.*s'",
					    SHOWN(m->attr), SHOWN(m->vals[i]));
		memmove(&at->vals[k], &at->vals[k + 1],
			(at->nvals - (size_t)k - 1) * sizeof(*at->vals));
		at->nvals--;
	}
	return 0;
}

static int mod_replace(struct store_txn *t, struct work *w, const struct store_mod *m,
		       const char *canon, size_t n)
{
	struct store_attr *at = work_find(w, canon, n);
	if (!at && m->nvals == 0)
		return 0;
	if (!at && !(at = work_add_attr(&t->arena, w, m->attr, canon, n)))
		return -ENOMEM;
	at->nvals = 0;
	if (work_grow_vals(&t->arena, at, m->nvals))
		return -ENOMEM;
	if (m->nvals)
		memcpy(at->vals, m->vals, m->nvals * sizeof(*m->vals));
	at->nvals = m->nvals;
	return 0; /* duplicates and syntax: check_entry on the result */
}

static int norm_cmp(const void *a, const void *b)
{
	const struct store_attr *x = a, *y = b;
	size_t n = x->norm.len < y->norm.len ? x->norm.len : y->norm.len;
	int c = memcmp(x->norm.ptr, y->norm.ptr, n);
	return c ? c : (x->norm.len > y->norm.len) - (x->norm.len < y->norm.len);
}

/* Drop emptied attributes and sort: the work becomes an entry. */
static void work_finish(struct work *w, struct store_val dn, uint64_t id, struct store_entry *e)
{
	size_t k = 0;
	for (size_t i = 0; i < w->n; i++)
		if (w->attrs[i].nvals)
			w->attrs[k++] = w->attrs[i];
	w->n = k;
	qsort(w->attrs, w->n, sizeof(*w->attrs), norm_cmp);
	*e = (struct store_entry){id, dn, w->attrs, w->n};
}

static int apply_mods(struct store_txn *t, struct work *w, const struct store_mod *mods,
		      size_t nmods, struct idc_diag *d)
{
	char canon[STORE_ATTR_MAX];
	for (size_t i = 0; i < nmods; i++) {
		const struct store_mod *m = &mods[i];
		size_t n = store_attr_canon(m->attr.ptr, m->attr.len, canon);
		if (n == 0)
			return idc_diag_set(d, IDC_ESYNTAX, "invalid attribute name '%.*s'",
					    SHOWN(m->attr));
		int rc = m->op == STORE_MOD_ADD      ? mod_add(t, w, m, canon, n, d)
			 : m->op == STORE_MOD_DELETE ? mod_delete(t, w, m, canon, n, d)
						     : mod_replace(t, w, m, canon, n);
		if (rc)
			return rc;
	}
	return 0;
}

/* Read the entry at dn into a private copy (the map's pages may be reused
 * while this transaction writes). Leaves t->ndn holding dn. */
static int load_private(struct store_txn *t, struct store_val dn, uint64_t *id,
			struct store_entry *old, struct idc_diag *d)
{
	int rc = normalize_dn(t, dn, d);
	if (!rc)
		rc = store_get_ndn(t, &t->ndn, id);
	if (rc == -ENOENT)
		return idc_diag_set(d, rc, "no such entry: %.*s", SHOWN(dn));
	size_t sid = *id;
	MDB_val k = {sizeof(sid), &sid}, v;
	if (!rc)
		rc = store_mdb_err(mdb_get(t->txn, t->s->id2entry, &k, &v));
	if (!rc) {
		idc_buf_reset(&t->copy);
		rc = idc_buf_append(&t->copy, v.mv_data, v.mv_size);
	}
	if (!rc)
		rc = store_entry_decode(t->copy.data, t->copy.len, *id, &t->sc2, old, NULL);
	return rc;
}

/* Write new over old at id if the encodings differ. */
static int rewrite(struct store_txn *t, uint64_t id, const struct store_entry *old,
		   const struct store_entry *new_e, bool *changed, struct idc_diag *d)
{
	struct add_prep *p = txn_prep(t);
	int rc = p ? check_entry(t->s, p, new_e, false, NULL, d) : -ENOMEM;
	struct store_val ndn = {t->ndn.text.data, t->ndn.text.len};
	if (!rc)
		rc = store_entry_encode(new_e, ndn, &t->enc);
	if (rc)
		return rc;
	bool diff = t->enc.len != t->copy.len || memcmp(t->enc.data, t->copy.data, t->enc.len) != 0;
	if (changed)
		*changed = diff;
	if (!diff)
		return 0;
	rc = index_update(t, id, old, new_e);
	size_t sid = id;
	MDB_val k = {sizeof(sid), &sid}, v = {t->enc.len, t->enc.data};
	if (!rc)
		rc = store_mdb_err(mdb_put(t->txn, t->s->id2entry, &k, &v, 0));
	return rc;
}

int store_modify(struct store_txn *t, struct store_val dn, const struct store_mod *mods,
		 size_t nmods, bool *changed, struct idc_diag *d)
{
	idc_arena_reset(&t->arena);
	int rc = flush_bulk(t);
	uint64_t id;
	struct store_entry old, new_e;
	if (!rc)
		rc = load_private(t, dn, &id, &old, d);
	if (rc)
		return rc;
	struct work w = {0};
	rc = work_from_entry(t, &w, &old);
	if (!rc)
		rc = apply_mods(t, &w, mods, nmods, d);
	if (rc)
		return rc;
	work_finish(&w, old.dn, id, &new_e);
	return rewrite(t, id, &old, &new_e, changed, d);
}

int store_replace(struct store_txn *t, const struct store_entry *e, bool *changed,
		  struct idc_diag *d)
{
	idc_arena_reset(&t->arena);
	int rc = flush_bulk(t);
	uint64_t id;
	struct store_entry old;
	if (!rc)
		rc = load_private(t, e->dn, &id, &old, d);
	if (rc)
		return rc;
	struct store_entry ne = *e;
	ne.dn = old.dn; /* the DN as first given stays */
	return rewrite(t, id, &old, &ne, changed, d);
}

/* ---- delete ---------------------------------------------------------------------------- */

static int delete_id(struct store_txn *t, uint64_t id, struct idc_diag *d)
{
	size_t sid = id;
	MDB_val k = {sizeof(sid), &sid}, v;
	int rc = store_mdb_err(mdb_get(t->txn, t->s->id2entry, &k, &v));
	struct store_entry old;
	struct store_val ndn;
	if (!rc) {
		idc_buf_reset(&t->copy);
		rc = idc_buf_append(&t->copy, v.mv_data, v.mv_size);
	}
	if (!rc)
		rc = store_entry_decode(t->copy.data, t->copy.len, id, &t->sc2, &old, &ndn);
	if (!rc)
		rc = index_update(t, id, &old, NULL);
	if (!rc)
		rc = store_dn_normalize(ndn.ptr, ndn.len, &t->ndn, d);
	if (!rc)
		rc = store_dn_key(t, &t->ndn, 0);
	MDB_val dk = {t->key.len, t->key.data};
	if (!rc)
		rc = store_mdb_err(mdb_del(t->txn, t->s->dn2id, &dk, NULL));
	idc_buf_reset(&t->pkey);
	if (!rc)
		rc = store_mdb_err(mdb_del(t->txn, t->s->id2entry, &k, NULL));
	return rc;
}

/* Ids of the entries below the one whose reversed key is in t->key2 and
 * normalized DN in t->ndn. */
static int children_ids(struct store_txn *t, size_t max, uint64_t **ids, size_t *n)
{
	*ids = NULL;
	*n = 0;
	int rc = idc_buf_putc(&t->key2, ',');
	if (rc)
		return rc;
	struct store_val below = {t->key2.data, t->key2.len};
	struct store_val base = {t->ndn.text.data, t->ndn.text.len};
	MDB_cursor *c;
	rc = mdb_cursor_open(t->txn, t->s->dn2id, &c);
	if (rc)
		return store_mdb_err(rc);
	MDB_val k = store_dn2id_seek(below), v;
	size_t cap = 0;
	int at = STORE_BELOW_NO;
	for (rc = mdb_cursor_get(c, &k, &v, MDB_SET_RANGE); rc == 0 && *n < max;
	     rc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
		at = store_dn2id_below(t->txn, t->s, below, base, k, v);
		if (at == STORE_BELOW_NO)
			continue;
		if (at != STORE_BELOW_YES)
			break;
		if (*n == cap) {
			cap = cap ? cap * 2 : 64;
			uint64_t *p = realloc(*ids, cap * sizeof(*p));
			if (!p) {
				at = -ENOMEM;
				break;
			}
			*ids = p;
		}
		memcpy(&(*ids)[(*n)++], v.mv_data, sizeof(uint64_t));
	}
	mdb_cursor_close(c);
	rc = at < 0 ? at : rc == 0 || rc == MDB_NOTFOUND ? 0 : store_mdb_err(rc);
	if (rc) {
		free(*ids);
		*ids = NULL;
		*n = 0;
	}
	return rc;
}

int store_delete(struct store_txn *t, struct store_val dn, bool subtree, struct idc_diag *d)
{
	int rc = flush_bulk(t);
	uint64_t id;
	if (!rc)
		rc = normalize_dn(t, dn, d);
	if (!rc)
		rc = store_get_ndn(t, &t->ndn, &id);
	if (rc == -ENOENT)
		return idc_diag_set(d, rc, "no such entry: %.*s", SHOWN(dn));
	uint64_t *kids = NULL;
	size_t nkids = 0;
	/* t->key2 still holds dn's reversed key from store_get_ndn. */
	if (!rc)
		rc = children_ids(t, subtree ? SIZE_MAX : 1, &kids, &nkids);
	if (!rc && nkids && !subtree)
		rc = idc_diag_set(d, IDC_ENOTLEAF,
				  "%.*s has children (delete the subtree to remove them)",
				  SHOWN(dn));
	for (size_t i = 0; i < nkids && !rc; i++)
		rc = delete_id(t, kids[i], d);
	free(kids);
	if (!rc)
		rc = delete_id(t, id, d);
	return rc;
}

/* ---- modrdn ------------------------------------------------------------------------------ */

/* Length of the first RDN of a DN as written: up to the first unescaped
 * ',' (or ';'). */
static size_t first_rdn_len(struct store_val dn)
{
	for (size_t i = 0; i < dn.len; i++) {
		if (dn.ptr[i] == '\\')
			i++;
		else if (dn.ptr[i] == ',' || dn.ptr[i] == ';')
			return i;
	}
	return dn.len;
}

struct rdn_mods {
	struct store_txn *t;
	struct store_mod *mods;
	struct store_val *vals;
	size_t n;
	enum store_mod_op op;
};

static int rdn_collect(struct store_val type, struct store_val value, size_t rdn, void *arg)
{
	struct rdn_mods *r = arg;
	if (rdn != 0)
		return 1;
	char *v = idc_arena_strndup(&r->t->arena, value.ptr, value.len);
	if (!v || r->n == 16) /* 16 AVAs in one RDN is plenty */
		return -ENOMEM;
	r->vals[r->n] = (struct store_val){v, value.len};
	r->mods[r->n] = (struct store_mod){r->op, type, &r->vals[r->n], 1};
	r->n++;
	return 0;
}

/* Rename: the entry's values with the old RDN values dropped (ndel mods)
 * and the new ones added (nadd), stored under newdn with a new id (so a
 * parent's id stays below its children's), then the old entry deleted. */
static int modrdn_apply(struct store_txn *t, uint64_t id, struct store_val newdn,
			struct store_mod *mods, size_t ndel, size_t nadd, struct idc_diag *d)
{
	/* The work must survive delete_id reusing t->copy and t->sc2. */
	char *buf = idc_arena_alloc(&t->arena, t->copy.len);
	struct store_entry old, ne;
	if (!buf)
		return -ENOMEM;
	memcpy(buf, t->copy.data, t->copy.len);
	int rc = store_entry_decode(buf, t->copy.len, id, &t->sc2, &old, NULL);
	struct work w = {0};
	if (!rc)
		rc = work_from_entry(t, &w, &old);
	for (size_t i = 0; i < ndel + nadd && !rc; i++) {
		mods[i].op = i < ndel ? STORE_MOD_DELETE : STORE_MOD_ADD;
		rc = apply_mods(t, &w, &mods[i], 1, NULL);
		if (rc == IDC_ENOATTR || rc == IDC_EVALEXISTS)
			rc = 0;
	}
	if (rc)
		return rc;
	work_finish(&w, newdn, 0, &ne);
	rc = store_add(t, &ne, NULL, d);
	if (!rc)
		rc = delete_id(t, id, d);
	return rc;
}

int store_modrdn(struct store_txn *t, struct store_val dn, struct store_val newrdn,
		 bool deleteoldrdn, const struct store_val *newsuperior, struct idc_diag *d)
{
	idc_arena_reset(&t->arena);
	int rc = flush_bulk(t);
	uint64_t id;
	struct store_entry old;
	if (!rc)
		rc = load_private(t, dn, &id, &old, d);
	if (rc)
		return rc;
	uint64_t *kids;
	size_t nkids;
	rc = store_ndn_rkey(&t->ndn, 0, &t->key2);
	if (!rc)
		rc = children_ids(t, 1, &kids, &nkids);
	if (rc)
		return rc;
	free(kids);
	if (nkids)
		return idc_diag_set(d, IDC_ENOTLEAF,
				    "%.*s has children: only leaves can be renamed", SHOWN(dn));
	/* New DN text: newrdn "," (newsuperior or the old parent). */
	size_t fl = first_rdn_len(old.dn);
	struct store_val sup = newsuperior
				   ? *newsuperior
				   : (struct store_val){old.dn.ptr + fl + (fl < old.dn.len),
							old.dn.len - fl - (fl < old.dn.len)};
	size_t dlen = newrdn.len + 1 + sup.len;
	char *ndn = idc_arena_alloc(&t->arena, dlen + 1);
	if (!ndn)
		return -ENOMEM;
	memcpy(ndn, newrdn.ptr, newrdn.len);
	ndn[newrdn.len] = ',';
	if (sup.len)
		memcpy(ndn + newrdn.len + 1, sup.ptr, sup.len);
	struct store_val newdn = {ndn, sup.len ? dlen : newrdn.len};
	/* Values: drop the old RDN's (if asked), add the new RDN's. */
	struct store_mod mods[32];
	struct store_val vals[32];
	struct rdn_mods del = {t, mods, vals, 0, STORE_MOD_DELETE};
	if (deleteoldrdn)
		rc = store_dn_foreach_ava(old.dn.ptr, old.dn.len, rdn_collect, &del, d);
	struct rdn_mods add = {t, mods + del.n, vals + del.n, 0, STORE_MOD_ADD};
	if (rc >= 0)
		rc = store_dn_foreach_ava(newrdn.ptr, newrdn.len, rdn_collect, &add, d);
	if (rc < 0)
		return rc;
	return modrdn_apply(t, id, newdn, mods, del.n, add.n, d);
}
