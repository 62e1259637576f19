/* entry: building entries from pairs, attribute lookup, the id2entry codec. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "store_int.h"

/* ---- building ---------------------------------------------------------------- */

/* A run of pairs in a row under one attribute name as written
 * (objectClass five times, member a thousand): pairs[first..first + n). */
struct pair_run {
	const char *norm;
	size_t norm_len;
	uint64_t pfx; /* store_prefix64 of norm: names mostly differ there */
	size_t first, n;
	size_t pos; /* place among the runs as given */
};

static bool same_norm(const struct pair_run *x, const struct pair_run *y)
{
	/* interned names are one copy each (store_attr_canon_ref) */
	return x->norm == y->norm ||
	       (x->norm_len == y->norm_len && store_short_eq(x->norm, y->norm, x->norm_len));
}

/* By canonical name, then by position: the values of an attribute named
 * in several runs keep their given order. */
static int pair_run_cmp(const void *a, const void *b)
{
	const struct pair_run *x = a, *y = b;
	if (x->pfx != y->pfx)
		return x->pfx < y->pfx ? -1 : 1;
	/* Names are never empty. */
	if (x->norm != y->norm && (x->norm_len > 8 || y->norm_len > 8)) {
		size_t n = x->norm_len < y->norm_len ? x->norm_len : y->norm_len;
		int c = n > 8 ? memcmp(x->norm + 8, y->norm + 8, n - 8) : 0;
		if (c)
			return c;
	}
	if (x->norm_len != y->norm_len)
		return x->norm_len < y->norm_len ? -1 : 1;
	return x->first < y->first ? -1 : (x->first > y->first);
}

/* The runs of pairs[0..n) into runs (room for n), their canonical names
 * allocated in arena unless interned (*interned says whether all were);
 * their count, or 0 after setting *rc and d. */
static size_t pair_runs(struct idc_arena *a, const struct store_pair *pairs,
			const struct store_val *known, size_t n, struct pair_run *runs,
			bool *interned, int *rc, struct idc_diag *d)
{
	*interned = true;
	char canon[STORE_ATTR_MAX];
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		const struct store_val *nm = &pairs[i].name;
		if (i > 0 && nm->len == pairs[i - 1].name.len &&
		    store_short_eq(nm->ptr, pairs[i - 1].name.ptr, nm->len)) {
			runs[k - 1].n++;
			continue;
		}
		const char *p = known ? known[i].ptr : NULL;
		size_t len = p ? known[i].len : store_attr_canon_ref(nm->ptr, nm->len, canon, &p);
		if (len == 0) {
			*rc = idc_diag_set(d, IDC_ESYNTAX, "invalid attribute name '%.*s'",
					   (int)(nm->len > 64 ? 64 : nm->len), nm->ptr);
			return 0;
		}
		if (p == canon) {
			*interned = false;
			if (!(p = idc_arena_strndup(a, canon, len))) {
				*rc = -ENOMEM;
				return 0;
			}
		}
		runs[k] = (struct pair_run){p, len, store_prefix64(p, len), i, 1, k};
		k++;
	}
	return k;
}

#define SORT_MEMO_RUNS 64

/* The last order sort_runs worked out on this thread, and the names it
 * sorted: the entries of an import come in a few shapes (users, groups),
 * so most are ordered as the one before. The order depends on the names
 * alone (runs start in increasing order, so by first is by place). Kept
 * for interned names only: those stay where they are, so the same
 * pointers are the same names. */
struct sort_memo {
	size_t n;
	const char *norm[SORT_MEMO_RUNS];
	unsigned char order[SORT_MEMO_RUNS]; /* pos of the run at each place */
};

static _Thread_local struct sort_memo sort_memo;

static bool sort_memo_hit(const struct sort_memo *m, const struct pair_run *r, size_t n)
{
	if (m->n != n)
		return false;
	for (size_t i = 0; i < n; i++)
		if (m->norm[i] != r[i].norm)
			return false;
	return true;
}

/* runs[0..n) in order into out (room for n; may be runs itself when
 * there are more than SORT_MEMO_RUNS); the sorted array. Entries have a
 * dozen runs: insertion sort beats qsort's overhead; an entry with many
 * (names alternating) goes to qsort. */
static struct pair_run *sort_runs(struct pair_run *r, size_t n, bool interned, struct pair_run *out)
{
	if (n > SORT_MEMO_RUNS) {
		qsort(r, n, sizeof(*r), pair_run_cmp);
		return r;
	}
	struct sort_memo *m = &sort_memo;
	if (interned && sort_memo_hit(m, r, n)) {
		for (size_t i = 0; i < n; i++)
			out[i] = r[m->order[i]];
		return out;
	}
	memcpy(out, r, n * sizeof(*r));
	for (size_t i = 1; i < n; i++) {
		struct pair_run x = out[i];
		size_t j = i;
		while (j > 0 && pair_run_cmp(&out[j - 1], &x) > 0) {
			out[j] = out[j - 1];
			j--;
		}
		out[j] = x;
	}
	m->n = 0;
	if (interned) {
		for (size_t i = 0; i < n; i++) {
			m->norm[i] = r[i].norm;
			m->order[i] = (unsigned char)out[i].pos;
		}
		m->n = n;
	}
	return out;
}

static size_t count_attrs(const struct pair_run *runs, size_t n)
{
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		if (i == 0 || !same_norm(&runs[i], &runs[i - 1]))
			k++;
	return k;
}

int store_entry_from_pairs(struct idc_arena *arena, struct store_val dn,
			   const struct store_pair *pairs, size_t npairs, struct store_entry *out,
			   struct idc_diag *d)
{
	return store_entry_from_pairs_canon(arena, dn, pairs, NULL, npairs, out, d);
}

int store_entry_from_pairs_canon(struct idc_arena *arena, struct store_val dn,
				 const struct store_pair *pairs, const struct store_val *known,
				 size_t npairs, struct store_entry *out, struct idc_diag *d)
{
	*out = (struct store_entry){0, dn, NULL, 0};
	if (npairs == 0)
		return 0;
	struct pair_run small[SORT_MEMO_RUNS], sorted[SORT_MEMO_RUNS];
	struct pair_run *runs = npairs <= SORT_MEMO_RUNS ? small : malloc(npairs * sizeof(*runs));
	if (!runs)
		return -ENOMEM;
	int rc = 0;
	bool interned;
	size_t nruns = pair_runs(arena, pairs, known, npairs, runs, &interned, &rc, d);
	if (rc)
		goto out;
	const struct pair_run *sr = sort_runs(runs, nruns, interned, sorted);
	size_t nattrs = count_attrs(sr, nruns);
	struct store_attr *attrs = idc_arena_alloc(arena, nattrs * sizeof(*attrs));
	struct store_val *vals = idc_arena_alloc(arena, npairs * sizeof(*vals));
	rc = -ENOMEM;
	if (!attrs || !vals)
		goto out;
	size_t k = 0, nv = 0;
	for (size_t i = 0; i < nruns; i++) {
		const struct pair_run *r = &sr[i];
		if (i == 0 || !same_norm(r, &sr[i - 1]))
			attrs[k++] = (struct store_attr){
			    pairs[r->first].name, {r->norm, r->norm_len}, &vals[nv], 0};
		for (size_t j = 0; j < r->n; j++)
			vals[nv++] = pairs[r->first + j].value;
		attrs[k - 1].nvals += r->n;
	}
	out->attrs = attrs;
	out->nattrs = nattrs;
	rc = 0;
out:
	if (runs != small)
		free(runs);
	return rc;
}

const struct store_attr *store_entry_attr(const struct store_entry *e, const char *norm, size_t len)
{
	size_t lo = 0, hi = e->nattrs;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		const struct store_val *n = &e->attrs[mid].norm;
		size_t m = n->len < len ? n->len : len;
		int c = memcmp(n->ptr, norm, m);
		if (c == 0 && n->len != len)
			c = n->len < len ? -1 : 1;
		if (c == 0)
			return &e->attrs[mid];
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

/* ---- codec ------------------------------------------------------------------- */

#define ENTRY_CODEC_VERSION 1
#define ENTRY_HDR           16

/* The writes of the encoder go through a local pointer: stores through a
 * char pointer may alias the buffer's length, which the compiler would
 * otherwise reload and store at every field. */
static char *put_u16(char *w, uint16_t v)
{
	memcpy(w, &v, 2);
	return w + 2;
}

static char *put_u32(char *w, uint32_t v)
{
	memcpy(w, &v, 4);
	return w + 4;
}

/* Values and names are mostly a dozen bytes: up to 16 are copied by two
 * overlapping loads and stores instead of a call to memcpy. */
static char *put_bytes(char *w, const char *p, size_t n)
{
	if (n >= 8 && n <= 16) {
		uint64_t x, y;
		memcpy(&x, p, 8);
		memcpy(&y, p + n - 8, 8);
		memcpy(w, &x, 8);
		memcpy(w + n - 8, &y, 8);
	} else if (n >= 4 && n < 8) {
		uint32_t x, y;
		memcpy(&x, p, 4);
		memcpy(&y, p + n - 4, 4);
		memcpy(w, &x, 4);
		memcpy(w + n - 4, &y, 4);
	} else if (n < 4) {
		for (size_t i = 0; i < n; i++)
			w[i] = p[i];
	} else {
		memcpy(w, p, n);
	}
	return w + n;
}

/* The encoded size of e, or SIZE_MAX past STORE_ENTRY_MAX or when a name
 * does not fit its 16-bit length. */
static size_t encoded_size(const struct store_entry *e, size_t ndn_len)
{
	size_t n = ENTRY_HDR + e->dn.len + ndn_len;
	for (size_t i = 0; i < e->nattrs; i++) {
		const struct store_attr *a = &e->attrs[i];
		if (a->norm.len > UINT16_MAX || a->name.len > UINT16_MAX)
			return SIZE_MAX;
		n += 12 + a->norm.len + a->name.len;
		for (size_t j = 0; j < a->nvals; j++)
			n += 4 + a->vals[j].len;
		if (n > STORE_ENTRY_MAX)
			return SIZE_MAX;
	}
	return n;
}

int store_entry_encode(const struct store_entry *e, struct store_val ndn, struct idc_buf *out)
{
	size_t need = encoded_size(e, ndn.len);
	if (need > STORE_ENTRY_MAX)
		return -E2BIG;
	idc_buf_reset(out);
	int rc = idc_buf_reserve(out, need);
	if (rc)
		return rc;
	char *w = out->data;
	uint8_t hdr[4] = {ENTRY_CODEC_VERSION, 0, 0, 0};
	memcpy(w, hdr, 4);
	w = put_u32(w + 4, (uint32_t)e->dn.len);
	w = put_u32(w, (uint32_t)ndn.len);
	w = put_u32(w, (uint32_t)e->nattrs);
	w = put_bytes(w, e->dn.ptr, e->dn.len);
	w = put_bytes(w, ndn.ptr, ndn.len);
	for (size_t i = 0; i < e->nattrs; i++) {
		const struct store_attr *a = &e->attrs[i];
		w = put_u16(w, (uint16_t)a->norm.len);
		w = put_u16(w, (uint16_t)a->name.len);
		w = put_u32(w, (uint32_t)a->nvals);
		w = put_u32(w, a->rank);
		w = put_bytes(w, a->norm.ptr, a->norm.len);
		w = put_bytes(w, a->name.ptr, a->name.len);
		for (size_t j = 0; j < a->nvals; j++) {
			w = put_u32(w, (uint32_t)a->vals[j].len);
			w = put_bytes(w, a->vals[j].ptr, a->vals[j].len);
		}
	}
	out->len = (size_t)(w - out->data);
	out->data[out->len] = '\0';
	return 0;
}

/* A bounds-checked reader over untrusted bytes. */
struct rd {
	const char *p;
	size_t left;
};

static bool rd_u32(struct rd *r, uint32_t *v)
{
	if (r->left < 4)
		return false;
	memcpy(v, r->p, 4);
	r->p += 4;
	r->left -= 4;
	return true;
}

static bool rd_bytes(struct rd *r, size_t n, struct store_val *v)
{
	if (r->left < n)
		return false;
	*v = (struct store_val){r->p, n};
	r->p += n;
	r->left -= n;
	return true;
}

static int scratch_reserve(struct store_scratch *sc, size_t nattrs, size_t nvals)
{
	if (nattrs > sc->acap) {
		struct store_attr *a = realloc(sc->attrs, nattrs * sizeof(*a));
		if (!a)
			return -ENOMEM;
		sc->attrs = a;
		sc->acap = nattrs;
	}
	if (nvals > sc->vcap) {
		size_t cap = sc->vcap ? sc->vcap : 64;
		while (cap < nvals)
			cap *= 2;
		struct store_val *v = realloc(sc->vals, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		sc->vals = v;
		sc->vcap = cap;
	}
	return 0;
}

/* Names are short and mostly differ early: a byte loop beats a call to
 * memcmp, which every decode otherwise makes for each name pair sharing
 * a first byte. Decoded names are never empty. */
static bool norm_less(struct store_val a, struct store_val b)
{
	size_t n = a.len < b.len ? a.len : b.len;
	for (size_t i = 0; i < n; i++)
		if (a.ptr[i] != b.ptr[i])
			return (unsigned char)a.ptr[i] < (unsigned char)b.ptr[i];
	return a.len < b.len;
}

/* Values of one attribute: grows sc->vals (so earlier attrs are re-pointed
 * by the caller after all are read). Every search decodes each candidate,
 * so the header is read in one bounds check. */
static int decode_attr(struct rd *r, struct store_scratch *sc, size_t *nv, struct store_attr *a)
{
	uint16_t nl, ml;
	uint32_t cnt;
	if (r->left < 12)
		return IDC_ECORRUPT;
	memcpy(&nl, r->p, 2);
	memcpy(&ml, r->p + 2, 2);
	memcpy(&cnt, r->p + 4, 4);
	memcpy(&a->rank, r->p + 8, 4);
	r->p += 12;
	r->left -= 12;
	if (nl == 0 || ml == 0 || cnt == 0 || (size_t)nl + ml > r->left ||
	    cnt > (r->left - nl - ml) / 4)
		return IDC_ECORRUPT;
	a->norm = (struct store_val){r->p, nl};
	a->name = (struct store_val){r->p + nl, ml};
	r->p += (size_t)nl + ml;
	r->left -= (size_t)nl + ml;
	if (*nv + cnt > sc->vcap && scratch_reserve(sc, 0, *nv + cnt))
		return -ENOMEM;
	a->nvals = cnt;
	struct store_val *v = sc->vals + *nv;
	a->vals = v;
	for (uint32_t j = 0; j < cnt; j++) {
		uint32_t vl;
		if (!rd_u32(r, &vl) || !rd_bytes(r, vl, &v[j]))
			return IDC_ECORRUPT;
	}
	*nv += cnt;
	return 0;
}

/* The header and both DNs of the record r reads; r left at the first
 * attribute. */
static bool decode_head(struct rd *r, struct store_val *dn, struct store_val *ndn, uint32_t *na)
{
	struct store_val hdr;
	uint32_t dl, nl;
	if (!rd_bytes(r, 4, &hdr) || hdr.ptr[0] != ENTRY_CODEC_VERSION || hdr.ptr[1] ||
	    hdr.ptr[2] || hdr.ptr[3])
		return false;
	if (!rd_u32(r, &dl) || !rd_u32(r, &nl) || !rd_u32(r, na))
		return false;
	if (*na > r->left / 12)
		return false;
	return rd_bytes(r, dl, dn) && rd_bytes(r, nl, ndn);
}

int store_entry_ndn(const void *p, size_t len, struct store_val *ndn)
{
	struct rd r = {p, len};
	struct store_val dn;
	uint32_t na;
	return decode_head(&r, &dn, ndn, &na) ? 0 : IDC_ECORRUPT;
}

int store_entry_decode(const void *p, size_t len, uint64_t id, struct store_scratch *sc,
		       struct store_entry *out, struct store_val *ndn)
{
	struct rd r = {p, len};
	uint32_t na;
	struct store_val nd;
	*out = (struct store_entry){id, {NULL, 0}, NULL, 0};
	if (!decode_head(&r, &out->dn, &nd, &na))
		return IDC_ECORRUPT;
	if (ndn)
		*ndn = nd;
	if (na > sc->acap && scratch_reserve(sc, na, 0))
		return -ENOMEM;
	const struct store_val *vals = sc->vals;
	size_t nv = 0;
	for (uint32_t i = 0; i < na; i++) {
		int rc = decode_attr(&r, sc, &nv, &sc->attrs[i]);
		if (rc)
			return rc;
		if (i > 0 && !norm_less(sc->attrs[i - 1].norm, sc->attrs[i].norm))
			return IDC_ECORRUPT;
	}
	if (r.left != 0)
		return IDC_ECORRUPT;
	/* sc->vals moved while growing (rarely, once it fits the largest
	 * entry seen): point the attrs decoded before at the new place. */
	for (size_t i = 0, off = 0; sc->vals != vals && i < na; i++) {
		sc->attrs[i].vals = &sc->vals[off];
		off += sc->attrs[i].nvals;
	}
	out->attrs = sc->attrs;
	out->nattrs = na;
	return 0;
}

void store_scratch_free(struct store_scratch *sc)
{
	free(sc->attrs);
	free(sc->vals);
	*sc = (struct store_scratch){0};
}
