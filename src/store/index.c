/* index: equality and presence index keys, their maintenance on every
 * write, the sorted bulk path, and adding or dropping an index. */
#include <endian.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "store_int.h"

/* ---- keys ------------------------------------------------------------------- */

int index_key(struct store_val n, struct idc_buf *out, bool *skip)
{
	idc_buf_reset(out);
	*skip = n.len == 0; /* LMDB keys cannot be empty; (attr=) falls back to a scan */
	if (*skip)
		return 0;
	if (n.len < STORE_KEY_MAX)
		return idc_buf_append(out, n.ptr, n.len);
	uint64_t h = idc_hash64(n.ptr, n.len, 0);
	int rc = idc_buf_append(out, n.ptr, STORE_KEY_PREFIX);
	return rc ? rc : idc_buf_append(out, &h, sizeof(h));
}

int index_key_inplace(struct idc_buf *out, size_t start, bool *skip)
{
	size_t n = out->len - start;
	*skip = n == 0;
	if (n < STORE_KEY_MAX)
		return 0;
	uint64_t h = idc_hash64(out->data + start, n, 0);
	out->len = start + STORE_KEY_PREFIX;
	return idc_buf_append(out, &h, sizeof(h));
}

/* A name's bit in store.idx_mask: the first byte and the length, which
 * tell most attribute names of an entry apart from a handful of indexed
 * ones. */
static uint64_t idx_bit(const char *name, size_t len)
{
	return UINT64_C(1) << (((unsigned char)name[0] + len * 7) & 63);
}

const struct store_index *index_find(const struct store *s, const char *norm, size_t len)
{
	/* every attribute of every add asks: most are not indexed, which the
	 * mask tells at once; then the first byte and word loads */
	if (len == 0 || !(s->idx_mask & idx_bit(norm, len)))
		return NULL;
	for (size_t i = 0; i < s->nidx; i++)
		if (s->idx[i].name_len == len && s->idx[i].name[0] == norm[0] &&
		    store_short_eq(s->idx[i].name, norm, len))
			return &s->idx[i];
	return NULL;
}

/* ---- loading the index list -------------------------------------------------------- */

int index_load(struct store *s, MDB_txn *txn)
{
	MDB_val key = {7, "indexes"}, val;
	int rc = mdb_get(txn, s->meta, &key, &val);
	if (rc)
		return rc == MDB_NOTFOUND ? IDC_ECORRUPT : store_mdb_err(rc);
	s->nidx = 0;
	s->idx_mask = 0;
	const char *p = val.mv_data, *end = p + val.mv_size;
	while (p < end) {
		const char *comma = memchr(p, ',', (size_t)(end - p));
		size_t n = (size_t)((comma ? comma : end) - p);
		if (n == 0 || n >= STORE_ATTR_MAX || s->nidx == STORE_MAX_INDEXES)
			return IDC_ECORRUPT;
		struct store_index *ix = &s->idx[s->nidx];
		memcpy(ix->name, p, n);
		ix->name[n] = '\0';
		ix->name_len = n;
		s->idx_mask |= idx_bit(ix->name, n);
		ix->rule = store_attr_rule(ix->name, n);
		char dbname[STORE_ATTR_MAX + 4];
		snprintf(dbname, sizeof(dbname), "eq.%s", ix->name);
		unsigned flags = INDEX_DB_FLAGS;
		if (!(s->flags & STORE_RDONLY))
			flags |= MDB_CREATE;
		rc = mdb_dbi_open(txn, dbname, flags, &ix->dbi);
		if (rc)
			return rc == MDB_NOTFOUND ? IDC_ECORRUPT : store_mdb_err(rc);
		s->idx_names[s->nidx++] = ix->name;
		p += n + 1;
	}
	return 0;
}

int index_meta_write(struct store_txn *t, const char *const *names, size_t n)
{
	struct idc_buf list = IDC_BUF_INIT;
	int rc = 0;
	for (size_t i = 0; i < n && !rc; i++) {
		if (list.len)
			rc = idc_buf_putc(&list, ',');
		if (!rc)
			rc = idc_buf_append(&list, names[i], strlen(names[i]));
	}
	if (!rc) {
		MDB_val key = {7, "indexes"}, val = {list.len, list.data ? list.data : ""};
		rc = store_mdb_err(mdb_put(t->txn, t->s->meta, &key, &val, 0));
	}
	idc_buf_free(&list);
	t->index_changed = true;
	return rc;
}

size_t store_index_list(struct store *s, const char *const **names)
{
	*names = s->idx_names;
	return s->nidx;
}

/* ---- the bulk path ----------------------------------------------------------------
 * Every write transaction collects the index pairs of its adds per
 * database and writes them at commit (or before anything reads the indexes)
 * in key order: B-tree pages then fill left to right, and an index that was
 * empty takes MDB_APPEND (no search at all). docs/DESIGN.md §4 has the figures.
 * Equal keys are grouped through a hash table as they arrive, so the sort
 * is over distinct keys only (objectClass has a handful for a million
 * entries); ids of one key arrive in increasing order already. */

struct bulk_group {
	size_t off; /* key bytes in keys */
	uint64_t hash;
	uint16_t len;   /* index keys are at most STORE_KEY_MAX bytes */
	uint16_t big;   /* 1 + its place in bulk_list.big, or 0 */
	uint32_t count; /* its pairs in items; then: start of their ids in the sorted order */
};

/* A key's ids past its first BULK_BIG pairs (objectClass top, each
 * index's name in pres: nearly every entry) go to a list of their own
 * rather than into items, with no group number beside each and nothing
 * to sort: an import of a million entries holds 10 million such ids. */
#define BULK_BIG 64
struct bulk_big {
	uint64_t *ids;
	size_t n, cap;
};

/* A hash slot: the group index in the low half, the top of the key's hash
 * in the high half, so a probe past a different key (and every new key,
 * the common case for uid) reads neither the group nor its bytes. */
#define SLOT_EMPTY UINT64_MAX
#define SLOT(g, h) ((uint64_t)(g) | ((h)&UINT64_C(0xffffffff00000000)))

struct bulk_item {
	uint32_t group;
	uint64_t id;
};

static __attribute__((noinline)) struct bulk_list *bulk_new(struct store_txn *t, MDB_dbi dbi)
{
	for (size_t i = 0; i < t->nbulk; i++)
		if (t->bulk[i].dbi == dbi)
			return &t->bulk[i];
	struct bulk_list *b = realloc(t->bulk, (t->nbulk + 1) * sizeof(*b));
	if (!b)
		return NULL;
	t->bulk = b;
	if (dbi < STORE_BULK_DBIS && t->nbulk < UINT8_MAX)
		t->bulk_of[dbi] = (uint8_t)(t->nbulk + 1);
	b = &t->bulk[t->nbulk++];
	*b = (struct bulk_list){.dbi = dbi, .sorted = true};
	MDB_stat st;
	b->was_empty = mdb_stat(t->txn, dbi, &st) == 0 && st.ms_entries == 0;
	return b;
}

/* The bulk list of dbi, made on first use. */
static struct bulk_list *bulk_for(struct store_txn *t, MDB_dbi dbi)
{
	unsigned i = dbi < STORE_BULK_DBIS ? t->bulk_of[dbi] : 0;
	return i ? &t->bulk[i - 1] : bulk_new(t, dbi);
}

/* A table of at least twice the groups' count (and a power of two) holding
 * all groups. */
static int bulk_rehash(struct bulk_list *b, size_t want)
{
	size_t cap = b->hcap ? b->hcap * 2 : 1024;
	while (cap < want * 2)
		cap *= 2;
	uint64_t *h = malloc(cap * sizeof(*h));
	if (!h)
		return -ENOMEM;
	memset(h, 0xff, cap * sizeof(*h));
	for (uint32_t g = 0; g < b->ngroups; g++) {
		uint64_t x = b->groups[g].hash;
		size_t i = x & (cap - 1);
		while (h[i] != SLOT_EMPTY)
			i = (i + 1) & (cap - 1);
		h[i] = SLOT(g, x);
	}
	free(b->hash);
	b->hash = h;
	b->hcap = cap;
	return 0;
}

/* The hash of the bulk tables (in memory only): keys up to 32 bytes (most
 * index keys are a short name or an 8-byte integer) by a few overlapping
 * word loads and multiplies, longer ones by idc_hash64. */
uint64_t index_key_hash(const char *p, size_t n)
{
	if (n > 32)
		return idc_hash64(p, n, 0);
	uint64_t a = 0, b = 0, c = 0, d = 0;
	if (n >= 16) {
		memcpy(&a, p, 8);
		memcpy(&b, p + 8, 8);
		memcpy(&c, p + n - 16, 8);
		memcpy(&d, p + n - 8, 8);
	} else if (n >= 8) {
		memcpy(&a, p, 8);
		memcpy(&b, p + n - 8, 8);
	} else if (n >= 4) {
		uint32_t x, y;
		memcpy(&x, p, 4);
		memcpy(&y, p + n - 4, 4);
		a = x;
		b = y;
	} else {
		for (size_t i = 0; i < n; i++)
			a = a << 8 | (unsigned char)p[i];
	}
	uint64_t h = (a ^ UINT64_C(0x9e3779b97f4a7c15)) * (b ^ UINT64_C(0xc2b2ae3d27d4eb4f) ^ n);
	h ^= (c ^ UINT64_C(0x165667b19e3779f9)) * (d ^ UINT64_C(0x27d4eb2f165667c5));
	/* murmur3's finalizer: every bit of h moves the low and the high ones */
	h ^= h >> 33;
	h *= UINT64_C(0xff51afd7ed558ccd);
	h ^= h >> 33;
	h *= UINT64_C(0xc4ceb9fe1a85ec53);
	return h ^ (h >> 33);
}

static int key_cmp(const char *a, size_t alen, const char *b, size_t blen)
{
	int c = memcmp(a, b, alen < blen ? alen : blen);
	return c ? c : (alen > blen) - (alen < blen);
}

/* A new group for key (hash x); UINT32_MAX on ENOMEM. */
static uint32_t bulk_new_group(struct bulk_list *b, struct store_val key, uint64_t x)
{
	if (b->ngroups == b->gcap) {
		size_t cap = b->gcap ? b->gcap * 2 : 256;
		struct bulk_group *g = realloc(b->groups, cap * sizeof(*g));
		if (!g)
			return UINT32_MAX;
		b->groups = g;
		b->gcap = cap;
	}
	if (key.len > UINT16_MAX)
		return UINT32_MAX; /* not an index key (STORE_KEY_MAX) */
	b->groups[b->ngroups] = (struct bulk_group){b->keys.len, x, (uint16_t)key.len, 0, 0};
	if (idc_buf_append(&b->keys, key.ptr, key.len))
		return UINT32_MAX;
	return (uint32_t)b->ngroups++;
}

/* The group of key (x: its index_key_hash), created when new; UINT32_MAX
 * on ENOMEM.
 *
 * While keys come in increasing order (uid and uidNumber of a generated or
 * exported file), a key is either the last group's or greater than every
 * group's: no table is touched, which for a million distinct keys saves a
 * cache miss per key. The first key out of order builds the table from the
 * groups so far, and it takes over. */
static uint32_t bulk_group_of(struct bulk_list *b, struct store_val key, uint64_t x)
{
	if (b->sorted) {
		int c = 1;
		if (b->ngroups) {
			const struct bulk_group *last = &b->groups[b->ngroups - 1];
			c = key_cmp(key.ptr, key.len, b->keys.data + last->off, last->len);
		}
		if (c > 0)
			return bulk_new_group(b, key, x);
		if (c == 0)
			return (uint32_t)(b->ngroups - 1);
		b->sorted = false;
		if (bulk_rehash(b, b->ngroups + 1))
			return UINT32_MAX;
	}
	if ((b->ngroups + 1) * 2 > b->hcap && bulk_rehash(b, b->ngroups + 1))
		return UINT32_MAX;
	uint64_t tag = SLOT(0, x);
	size_t i = x & (b->hcap - 1);
	for (; b->hash[i] != SLOT_EMPTY; i = (i + 1) & (b->hcap - 1)) {
		if ((b->hash[i] & UINT64_C(0xffffffff00000000)) != tag)
			continue;
		uint32_t gi = (uint32_t)b->hash[i];
		const struct bulk_group *g = &b->groups[gi];
		if (g->len == key.len && store_short_eq(b->keys.data + g->off, key.ptr, key.len))
			return gi;
	}
	uint32_t g = bulk_new_group(b, key, x);
	if (g != UINT32_MAX)
		b->hash[i] = SLOT(g, x);
	return g;
}

static __attribute__((noinline)) int bulk_grow(struct bulk_list *b)
{
	size_t cap = b->cap ? b->cap * 2 : 1024;
	struct bulk_item *it = realloc(b->items, cap * sizeof(*it));
	if (!it)
		return -ENOMEM;
	b->items = it;
	b->cap = cap;
	return 0;
}

static __attribute__((noinline)) int big_grow(struct bulk_big *x)
{
	size_t cap = x->cap ? x->cap * 2 : 1024;
	uint64_t *ids = realloc(x->ids, cap * sizeof(*ids));
	if (!ids)
		return -ENOMEM;
	x->ids = ids;
	x->cap = cap;
	return 0;
}

/* Group g's list of its own, made when it has BULK_BIG pairs in items. */
static __attribute__((noinline)) int big_new(struct bulk_list *b, uint32_t g)
{
	if (b->nbig == UINT16_MAX)
		return 0; /* the rest stay in items */
	if (b->nbig == b->bigcap) {
		size_t cap = b->bigcap ? b->bigcap * 2 : 16;
		struct bulk_big *x = realloc(b->big, cap * sizeof(*x));
		if (!x)
			return -ENOMEM;
		b->big = x;
		b->bigcap = cap;
	}
	b->big[b->nbig++] = (struct bulk_big){NULL, 0, 0};
	b->groups[g].big = (uint16_t)b->nbig;
	return 0;
}

/* Pair (group g, id) into b. */
static int bulk_put(struct bulk_list *b, uint32_t g, uint64_t id)
{
	if (g == UINT32_MAX)
		return -ENOMEM;
	struct bulk_group *grp = &b->groups[g];
	if (grp->big) {
		struct bulk_big *x = &b->big[grp->big - 1];
		if (x->n == x->cap && big_grow(x))
			return -ENOMEM;
		x->ids[x->n++] = id;
		return 0;
	}
	if (b->n == b->cap && bulk_grow(b))
		return -ENOMEM;
	b->items[b->n++] = (struct bulk_item){g, id};
	return ++grp->count == BULK_BIG ? big_new(b, g) : 0;
}

/* (key, id) to dbi's bulk list; x: key's index_key_hash. */
static int bulk_add(struct store_txn *t, MDB_dbi dbi, struct store_val key, uint64_t x, uint64_t id)
{
	struct bulk_list *b = bulk_for(t, dbi);
	return b ? bulk_put(b, bulk_group_of(b, key, x), id) : -ENOMEM;
}

/* bulk_add of (the name of index ix, id) to pres: the name stays where it
 * is for the whole transaction, so its group is looked up once. */
static int bulk_add_named(struct store_txn *t, uint32_t ix, uint64_t id)
{
	const struct store_index *x = &t->s->idx[ix];
	struct bulk_list *b = bulk_for(t, t->s->pres);
	if (!b)
		return -ENOMEM;
	if (!b->named && !(b->named = calloc(STORE_MAX_INDEXES, sizeof(*b->named))))
		return -ENOMEM;
	uint32_t g = b->named[ix] - 1;
	if (b->named[ix] == 0) {
		g = bulk_group_of(b, (struct store_val){x->name, x->name_len},
				  index_key_hash(x->name, x->name_len));
		if (g != UINT32_MAX)
			b->named[ix] = g + 1;
	}
	return bulk_put(b, g, id);
}

/* ---- sorting the groups ------------------------------------------------------------
 * Keys are ordered as memcmp orders their bytes, a key before the longer
 * keys it begins. A multikey radix sort: the groups are ordered by the
 * eight bytes of their keys at depth d (store_prefix64, zero-padded) with
 * an LSD radix sort, then each run of equal slices is split: keys that end
 * within the slice come first, shorter before longer (each is a prefix of
 * the others in the run, the padding standing for its missing bytes), and
 * the rest are sorted again at d + 8. docs/DESIGN.md §4.1 has the figures. */

/* A group and the slice of its key being sorted on. */
struct group_ref {
	uint64_t pfx;
	uint32_t g;
};

#define RADIX_SMALL 32 /* runs up to this many: insertion sort */

static void refs_insertion(struct group_ref *r, size_t n)
{
	for (size_t i = 1; i < n; i++) {
		struct group_ref x = r[i];
		size_t j = i;
		for (; j > 0 && r[j - 1].pfx > x.pfx; j--)
			r[j] = r[j - 1];
		r[j] = x;
	}
}

/* r[0..n) by pfx, through tmp[0..n); a pass whose byte is the same in
 * every ref is skipped. */
static void refs_radix(struct group_ref *r, struct group_ref *tmp, size_t n)
{
	if (n <= RADIX_SMALL) {
		refs_insertion(r, n);
		return;
	}
	size_t cnt[8][256] = {{0}};
	for (size_t i = 0; i < n; i++)
		for (unsigned b = 0; b < 8; b++)
			cnt[b][(r[i].pfx >> (8 * b)) & 0xff]++;
	struct group_ref *src = r, *dst = tmp;
	for (unsigned b = 0; b < 8; b++) {
		size_t *c = cnt[b];
		if (c[(src[0].pfx >> (8 * b)) & 0xff] == n)
			continue;
		size_t pos = 0;
		for (unsigned v = 0; v < 256; v++) {
			size_t k = c[v];
			c[v] = pos;
			pos += k;
		}
		for (size_t i = 0; i < n; i++)
			dst[c[(src[i].pfx >> (8 * b)) & 0xff]++] = src[i];
		struct group_ref *x = src;
		src = dst;
		dst = x;
	}
	if (src != r)
		memcpy(r, src, n * sizeof(*r));
}

/* r[0..n), groups whose keys agree on their first d bytes, in key order. */
static void refs_sort(const struct bulk_list *b, struct group_ref *r, struct group_ref *tmp,
		      size_t n, size_t d)
{
	for (size_t i = 0; i < n; i++) {
		const struct bulk_group *g = &b->groups[r[i].g];
		r[i].pfx = g->len > d ? store_prefix64(b->keys.data + g->off + d, g->len - d) : 0;
	}
	refs_radix(r, tmp, n);
	for (size_t i = 0; i < n;) {
		size_t e = i + 1;
		while (e < n && r[e].pfx == r[i].pfx)
			e++;
		if (e - i > 1) {
			/* the keys ending within the slice first, by length (the
			 * run shares its slice, so their lengths are distinct),
			 * then the others at d + 8 */
			size_t k = i;
			for (size_t j = i; j < e; j++) {
				uint32_t len = b->groups[r[j].g].len;
				if (len <= d + 8) {
					struct group_ref x = r[j];
					r[j] = r[k];
					r[k++] = (struct group_ref){len, x.g};
				}
			}
			refs_insertion(r + i, k - i);
			if (e - k > 1)
				refs_sort(b, r + k, tmp + k, e - k, d + 8);
		}
		i = e;
	}
}

/* order[] gets the groups in key order; 0 or -ENOMEM. */
static int sort_groups(const struct bulk_list *b, uint32_t *order)
{
	if (b->sorted) {
		for (uint32_t g = 0; g < b->ngroups; g++)
			order[g] = g;
		return 0;
	}
	size_t n = b->ngroups ? b->ngroups : 1;
	struct group_ref *r = malloc(2 * n * sizeof(*r));
	if (!r)
		return -ENOMEM;
	for (uint32_t g = 0; g < b->ngroups; g++)
		r[g].g = g;
	refs_sort(b, r, r + n, b->ngroups, 0);
	for (uint32_t k = 0; k < b->ngroups; k++)
		order[k] = r[k].g;
	free(r);
	return 0;
}

/* Ids grouped by key in key order (a counting sort keeps each key's ids in
 * arrival order, which is increasing). order[] gets the groups sorted. */
static uint64_t *bulk_sort(struct bulk_list *b, uint32_t *order)
{
	uint64_t *ids = malloc((b->n ? b->n : 1) * sizeof(*ids));
	if (!ids || sort_groups(b, order)) {
		free(ids);
		return NULL;
	}
	size_t pos = 0;
	for (uint32_t k = 0; k < b->ngroups; k++) {
		struct bulk_group *g = &b->groups[order[k]];
		uint32_t c = g->count;
		g->count = (uint32_t)pos;
		pos += c;
	}
	for (size_t i = 0; i < b->n; i++)
		ids[b->groups[b->items[i].group].count++] = b->items[i].id;
	return ids;
}

/* ---- id blocks ---------------------------------------------------------------------
 * The value of an index key is a set of sorted dups, each a block of 1 to
 * INDEX_BLOCK_IDS ids stored big-endian in increasing order; blocks do
 * not overlap, so LMDB's memcmp order of dups is the order of their first
 * ids (docs/DESIGN.md §4). One put carries a block, not an id. */

static void block_encode(const uint64_t *ids, size_t n, uint64_t *be)
{
	for (size_t i = 0; i < n; i++)
		be[i] = htobe64(ids[i]);
}

size_t index_block_decode(MDB_val v, uint64_t *ids)
{
	size_t n = v.mv_size / sizeof(uint64_t);
	if (v.mv_size % sizeof(uint64_t) || n == 0 || n > INDEX_BLOCK_IDS)
		return 0;
	const unsigned char *p = v.mv_data;
	for (size_t i = 0; i < n; i++) {
		uint64_t x;
		memcpy(&x, p + i * sizeof(x), sizeof(x));
		ids[i] = be64toh(x);
		if (i > 0 && ids[i] <= ids[i - 1])
			return 0;
	}
	return n;
}

size_t index_count_estimate(MDB_cursor *c, MDB_val v)
{
	size_t n = 0;
	if (mdb_cursor_count(c, &n) != 0)
		return SIZE_MAX;
	return n == 1 ? v.mv_size / sizeof(uint64_t) : n * INDEX_BLOCK_IDS;
}

/* Put ids[0..n) (increasing, unique) as full blocks under key: flags for
 * the first put, then next for the rest. */
static int put_blocks(MDB_cursor *c, MDB_val *key, const uint64_t *ids, size_t n, unsigned first,
		      unsigned next)
{
	uint64_t be[INDEX_BLOCK_IDS];
	for (size_t done = 0; done < n;) {
		size_t k = n - done < INDEX_BLOCK_IDS ? n - done : INDEX_BLOCK_IDS;
		block_encode(ids + done, k, be);
		MDB_val v = {k * sizeof(uint64_t), be};
		int rc = mdb_cursor_put(c, key, &v, done == 0 ? first : next);
		if (rc)
			return rc;
		done += k;
	}
	return 0;
}

/* Position c on the block of key where id belongs (holding it, or the
 * last whose first id is below it, or the first block); copy it to ids.
 * *n = 0: the key is absent. Returns 0, or an LMDB code (MDB_CORRUPTED for
 * a block that does not decode). */
static int block_find(MDB_cursor *c, MDB_val *key, uint64_t id, uint64_t *ids, size_t *n)
{
	uint64_t be = htobe64(id);
	MDB_val k = *key, v = {sizeof(be), &be};
	*n = 0;
	int rc = mdb_cursor_get(c, &k, &v, MDB_GET_BOTH_RANGE);
	if (rc == 0) {
		uint64_t first;
		memcpy(&first, v.mv_data, sizeof(first));
		if (be64toh(first) != id) {
			MDB_val pk, pv;
			rc = mdb_cursor_get(c, &pk, &pv, MDB_PREV_DUP);
			if (rc == 0)
				v = pv;
			else if (rc == MDB_NOTFOUND) { /* id precedes every block */
				k = *key;
				v = (MDB_val){sizeof(be), &be};
				rc = mdb_cursor_get(c, &k, &v, MDB_GET_BOTH_RANGE);
			}
		}
	} else if (rc == MDB_NOTFOUND) {
		k = *key;
		rc = mdb_cursor_get(c, &k, &v, MDB_SET);
		if (rc == 0)
			rc = mdb_cursor_get(c, &k, &v, MDB_LAST_DUP);
		if (rc == MDB_NOTFOUND)
			return 0;
	}
	if (rc)
		return rc;
	*n = index_block_decode(v, ids);
	return *n ? 0 : MDB_CORRUPTED;
}

/* Replace the block under c (ids[0..n) now) by ids split in halves when
 * they do not fit one: n may be INDEX_BLOCK_IDS + 1. */
static int block_rewrite(MDB_cursor *c, MDB_val *key, const uint64_t *ids, size_t n)
{
	int rc = mdb_cursor_del(c, 0);
	if (rc || n == 0)
		return rc;
	size_t half = n > INDEX_BLOCK_IDS ? n / 2 : n;
	rc = put_blocks(c, key, ids, half, 0, 0);
	return rc || half == n ? rc : put_blocks(c, key, ids + half, n - half, 0, 0);
}

static size_t id_pos(const uint64_t *ids, size_t n, uint64_t id)
{
	size_t lo = 0, hi = n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (ids[mid] < id)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* One (key, id) pair in; present already is fine. */
static int block_insert(MDB_cursor *c, MDB_val *key, uint64_t id)
{
	uint64_t ids[INDEX_BLOCK_IDS + 1];
	size_t n;
	int rc = block_find(c, key, id, ids, &n);
	if (rc || n == 0)
		return rc ? rc : put_blocks(c, key, &id, 1, 0, 0);
	size_t i = id_pos(ids, n, id);
	if (i < n && ids[i] == id)
		return 0;
	if (i == n && n == INDEX_BLOCK_IDS) /* past a full block: a block of its own */
		return put_blocks(c, key, &id, 1, 0, 0);
	memmove(ids + i + 1, ids + i, (n - i) * sizeof(*ids));
	ids[i] = id;
	return block_rewrite(c, key, ids, n + 1);
}

/* One (key, id) pair out; absent is fine. */
static int block_remove(MDB_cursor *c, MDB_val *key, uint64_t id)
{
	uint64_t ids[INDEX_BLOCK_IDS + 1];
	size_t n;
	int rc = block_find(c, key, id, ids, &n);
	if (rc || n == 0)
		return rc;
	size_t i = id_pos(ids, n, id);
	if (i == n || ids[i] != id)
		return 0;
	memmove(ids + i, ids + i + 1, (n - i - 1) * sizeof(*ids));
	return block_rewrite(c, key, ids, n - 1);
}

int index_cursor_has(MDB_cursor *c, struct store_val key, uint64_t id)
{
	uint64_t ids[INDEX_BLOCK_IDS + 1];
	size_t n;
	MDB_val k = {key.len, (void *)key.ptr};
	int rc = block_find(c, &k, id, ids, &n);
	if (rc)
		return store_mdb_err(rc);
	size_t i = n ? id_pos(ids, n, id) : 0;
	return i < n && ids[i] == id;
}

bool index_pair_has(MDB_txn *txn, MDB_dbi dbi, struct store_val key, uint64_t id)
{
	MDB_cursor *c;
	if (mdb_cursor_open(txn, dbi, &c))
		return false;
	bool has = index_cursor_has(c, key, id) == 1;
	mdb_cursor_close(c);
	return has;
}

/* The last block of the key under c into ids (*n of them). */
static int last_block(MDB_cursor *c, uint64_t *ids, size_t *n)
{
	MDB_val k, v;
	int rc = mdb_cursor_get(c, &k, &v, MDB_LAST_DUP);
	if (!rc && (*n = index_block_decode(v, ids)) == 0)
		rc = MDB_CORRUPTED;
	return rc;
}

/* The ids[0..n) of one key (increasing, unique) into a database that had
 * data: a new key takes full blocks; ids past the key's last block fill
 * it and then take new blocks; any others (a modify re-adding a value of
 * an older entry) go in one by one. */
static int key_merge(MDB_cursor *c, MDB_val *key, const uint64_t *ids, size_t n)
{
	/* A new key (each one of cn, uid, gidNumber): one search for the put,
	 * not one to find it absent and another to insert. */
	size_t first = n < INDEX_BLOCK_IDS ? n : INDEX_BLOCK_IDS;
	int rc = put_blocks(c, key, ids, first, MDB_NOOVERWRITE, 0);
	if (rc == 0)
		return put_blocks(c, key, ids + first, n - first, MDB_APPENDDUP, MDB_APPENDDUP);
	if (rc != MDB_KEYEXIST)
		return rc;
	MDB_val k = *key, v;
	rc = mdb_cursor_get(c, &k, &v, MDB_SET);
	uint64_t last[INDEX_BLOCK_IDS + 1];
	size_t nl = 0, i = 0;
	if (!rc)
		rc = last_block(c, last, &nl);
	for (; !rc && i < n && ids[i] <= last[nl - 1]; i++)
		rc = block_insert(c, key, ids[i]);
	if (!rc && i > 0 && i < n) { /* an insert may have split the last block */
		k = *key;
		rc = mdb_cursor_get(c, &k, &v, MDB_SET);
		if (!rc)
			rc = last_block(c, last, &nl);
	}
	if (rc || i == n)
		return rc;
	size_t room = INDEX_BLOCK_IDS - nl;
	if (room > n - i)
		room = n - i;
	if (room) {
		memcpy(last + nl, ids + i, room * sizeof(*ids));
		rc = block_rewrite(c, key, last, nl + room);
		i += room;
	}
	/* past every block of the key: appended dups, no search of its blocks */
	return rc ? rc : put_blocks(c, key, ids + i, n - i, MDB_APPENDDUP, MDB_APPENDDUP);
}

static size_t ids_unique(uint64_t *ids, size_t n)
{
	size_t m = 0;
	for (size_t i = 0; i < n; i++)
		if (m == 0 || ids[i] != ids[m - 1])
			ids[m++] = ids[i];
	return m;
}

/* ---- slack in appended leaves ------------------------------------------------------
 * MDB_APPEND packs leaves full, so after an import the first insert of a
 * random key (cn, gidNumber, a new user's uid) into each leaf splits it: a
 * page split per add at 10^6 entries. LMDB has no fill factor; this makes
 * one. While an index is appended, one key in every SLACK_EVERY bytes of
 * leaf nodes goes in with its block padded to SLACK_PAD bytes; once the
 * index is written, those keys get their own block back (delete and put:
 * LMDB leaves a leaf over a quarter full as it is, and the smaller node fits
 * where the larger was). The room they held stays free in every leaf,
 * SLACK_PAD / (SLACK_EVERY + SLACK_PAD) of it, a quarter. docs/DESIGN.md §4. */
#define SLACK_PAD   256 /* bytes: a block of 32 ids */
#define SLACK_EVERY (3 * SLACK_PAD)

struct slack_key {
	MDB_val key;
	const uint64_t *ids; /* its ids[0..n) */
	size_t n;
};

struct slack {
	struct idc_buf pad; /* struct slack_key of each padded key, in key order */
	size_t used;        /* leaf bytes appended since the last padded key */
};

/* Append key's ids; padded when its turn has come (and one block holds them). */
static int slack_append(MDB_cursor *c, struct slack *sl, MDB_val *key, const uint64_t *ids,
			size_t n)
{
	size_t bytes = n * sizeof(uint64_t);
	sl->used += 8 + key->mv_size + bytes + 2; /* node header, key, data, slot */
	if (bytes >= SLACK_PAD || sl->used < SLACK_EVERY)
		return put_blocks(c, key, ids, n, MDB_APPEND, MDB_APPENDDUP);
	struct slack_key p = {*key, ids, n};
	if (idc_buf_append(&sl->pad, &p, sizeof(p)))
		return ENOMEM;
	uint64_t be[SLACK_PAD / sizeof(uint64_t)] = {0};
	block_encode(ids, n, be); /* the tail is never read: slack_release rewrites it */
	MDB_val v = {SLACK_PAD, be};
	sl->used = 0;
	return mdb_cursor_put(c, key, &v, MDB_APPEND);
}

/* Every padded key back to its own block, leaving the room behind. */
static int slack_release(MDB_cursor *c, struct slack *sl)
{
	int rc = 0;
	for (size_t off = 0; off < sl->pad.len && !rc; off += sizeof(struct slack_key)) {
		struct slack_key p;
		memcpy(&p, sl->pad.data + off, sizeof(p));
		MDB_val k = p.key, v;
		rc = mdb_cursor_get(c, &k, &v, MDB_SET);
		if (!rc)
			rc = mdb_cursor_del(c, 0);
		if (!rc)
			rc = put_blocks(c, &p.key, p.ids, p.n, 0, 0);
	}
	return rc;
}

/* The ids of group g, increasing and unique, into *n: ids[pos..end) as
 * bulk_sort left them, followed by its own list when it has one (which
 * then holds them all). NULL on ENOMEM. */
static const uint64_t *group_ids(struct bulk_list *b, const struct bulk_group *g, uint64_t *ids,
				 size_t pos, size_t end, size_t *n)
{
	size_t k = end - pos;
	if (!g->big) {
		*n = ids_unique(ids + pos, k); /* a value twice in one entry */
		return ids + pos;
	}
	struct bulk_big *x = &b->big[g->big - 1];
	if (x->n + k > x->cap) {
		uint64_t *grown = realloc(x->ids, (x->n + k) * sizeof(*grown));
		if (!grown)
			return NULL;
		x->ids = grown;
		x->cap = x->n + k;
	}
	memmove(x->ids + k, x->ids, x->n * sizeof(*x->ids));
	memcpy(x->ids, ids + pos, k * sizeof(*x->ids));
	x->n += k;
	*n = ids_unique(x->ids, x->n);
	return x->ids;
}

/* ---- the flush ----------------------------------------------------------------------
 * Each bulk list is first made ready off the transaction (its groups
 * sorted, each key's ids gathered, in order and unique), which touches
 * only the list, and then written by the transaction's thread, which only
 * puts. A large flush makes lists ready on helper threads, in the order
 * they are written, while the transaction's thread writes the ones before
 * (an LMDB write transaction belongs to one thread, the sorts need none);
 * it makes the list it is to write next itself when no helper has taken
 * it. docs/DESIGN.md §4.1. */

/* One key to put: ids[0..n) of group g. */
struct flush_run {
	const uint64_t *ids;
	size_t n;
	uint32_t g;
};

struct flush_list {
	struct flush_run *runs; /* one per group, in key order */
	uint64_t *ids;          /* bulk_sort's, which runs point into */
	int rc;
	bool ready;
};

/* Make b ready into fl: from then on b's pairs are in fl (its items and
 * hash table are let go of). 0 or -ENOMEM. */
static int bulk_ready(struct bulk_list *b, struct flush_list *fl)
{
	uint32_t *order = malloc((b->ngroups ? b->ngroups : 1) * sizeof(*order));
	fl->runs = order ? malloc((b->ngroups ? b->ngroups : 1) * sizeof(*fl->runs)) : NULL;
	fl->ids = fl->runs ? bulk_sort(b, order) : NULL;
	int rc = fl->ids ? 0 : -ENOMEM;
	free(b->items);
	free(b->hash);
	b->items = NULL;
	b->hash = NULL;
	b->n = b->cap = b->hcap = 0;
	size_t pos = 0;
	for (uint32_t k = 0; k < b->ngroups && !rc; k++) {
		const struct bulk_group *g = &b->groups[order[k]];
		size_t end = g->count; /* bulk_sort left the end of its ids here */
		struct flush_run *r = &fl->runs[k];
		r->g = order[k];
		r->ids = group_ids(b, g, fl->ids, pos, end, &r->n);
		if (!r->ids)
			rc = -ENOMEM;
		pos = end;
	}
	free(order);
	return rc;
}

static int bulk_write(struct store_txn *t, struct bulk_list *b, const struct flush_list *fl)
{
	MDB_cursor *c = NULL;
	struct slack sl = {IDC_BUF_INIT, 0};
	int rc = mdb_cursor_open(t->txn, b->dbi, &c);
	for (uint32_t k = 0; k < b->ngroups && !rc; k++) {
		const struct flush_run *r = &fl->runs[k];
		const struct bulk_group *g = &b->groups[r->g];
		MDB_val key = {g->len, b->keys.data + g->off};
		if (b->was_empty)
			rc = slack_append(c, &sl, &key, r->ids, r->n);
		else
			rc = key_merge(c, &key, r->ids, r->n);
		/* under an append, present already means the pairs were not in order */
		if (rc == MDB_KEYEXIST) {
			idc_log(IDC_LOG_ERR, "%s: index pairs out of order at flush", t->s->dir);
			rc = MDB_CORRUPTED;
		}
	}
	if (!rc && sl.pad.len)
		rc = slack_release(c, &sl);
	idc_buf_free(&sl.pad);
	if (c)
		mdb_cursor_close(c);
	return rc == ENOMEM ? -ENOMEM : store_mdb_err(rc);
}

/* Pairs and ids below this are made ready on the transaction's thread
 * alone: threads cost more than they save (every commit flushes). */
#define FLUSH_PARALLEL_MIN ((size_t)1 << 18)
#define FLUSH_HELPERS_MAX  8

struct flush_pool {
	struct store_txn *t;
	struct flush_list *fl;
	pthread_mutex_t mu;
	pthread_cond_t cv; /* a list became ready, or stop */
	size_t next;       /* the first list nobody has taken */
	bool stop;
};

/* Take the next list and make it ready; false when none was left (or
 * the flush stops). Called and returns with mu held. */
static bool pool_ready_one(struct flush_pool *p)
{
	if (p->stop || p->next == p->t->nbulk)
		return false;
	size_t i = p->next++;
	pthread_mutex_unlock(&p->mu);
	int rc = bulk_ready(&p->t->bulk[i], &p->fl[i]);
	pthread_mutex_lock(&p->mu);
	p->fl[i].rc = rc;
	p->fl[i].ready = true;
	pthread_cond_broadcast(&p->cv);
	return true;
}

static void *flush_helper(void *arg)
{
	struct flush_pool *p = arg;
	pthread_mutex_lock(&p->mu);
	while (pool_ready_one(p))
		;
	pthread_mutex_unlock(&p->mu);
	return NULL;
}

static unsigned flush_helpers(const struct store_txn *t)
{
	size_t pairs = 0;
	for (size_t i = 0; i < t->nbulk; i++) {
		pairs += t->bulk[i].n;
		for (size_t k = 0; k < t->bulk[i].nbig; k++)
			pairs += t->bulk[i].big[k].n;
	}
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	size_t n = cpus > 1 ? (size_t)cpus - 1 : 0;
	if (n > t->nbulk - 1)
		n = t->nbulk - 1;
	if (n > FLUSH_HELPERS_MAX)
		n = FLUSH_HELPERS_MAX;
	return pairs < FLUSH_PARALLEL_MIN ? 0 : (unsigned)n;
}

int index_bulk_flush(struct store_txn *t)
{
	if (t->nbulk == 0)
		return 0;
	struct flush_pool p = {.t = t, .fl = calloc(t->nbulk, sizeof(*p.fl))};
	if (!p.fl) {
		index_bulk_free(t);
		return -ENOMEM;
	}
	pthread_mutex_init(&p.mu, NULL);
	pthread_cond_init(&p.cv, NULL);
	pthread_t th[FLUSH_HELPERS_MAX];
	unsigned nth = 0, want = flush_helpers(t);
	while (nth < want && pthread_create(&th[nth], NULL, flush_helper, &p) == 0)
		nth++;
	int rc = 0;
	pthread_mutex_lock(&p.mu);
	for (size_t i = 0; i < t->nbulk && !rc; i++) {
		/* list i itself when no helper has taken it; a later one would
		 * hold up the writes of the ones the helpers make ready */
		while (!p.fl[i].ready)
			if (p.next != i || !pool_ready_one(&p))
				pthread_cond_wait(&p.cv, &p.mu);
		pthread_mutex_unlock(&p.mu);
		rc = p.fl[i].rc ? p.fl[i].rc : bulk_write(t, &t->bulk[i], &p.fl[i]);
		pthread_mutex_lock(&p.mu);
	}
	p.stop = true;
	pthread_mutex_unlock(&p.mu);
	for (unsigned k = 0; k < nth; k++)
		pthread_join(th[k], NULL);
	for (size_t i = 0; i < t->nbulk; i++) {
		free(p.fl[i].runs);
		free(p.fl[i].ids);
	}
	free(p.fl);
	pthread_cond_destroy(&p.cv);
	pthread_mutex_destroy(&p.mu);
	index_bulk_free(t);
	return rc;
}

void index_bulk_free(struct store_txn *t)
{
	for (size_t i = 0; i < t->nbulk; i++) {
		free(t->bulk[i].items);
		free(t->bulk[i].groups);
		free(t->bulk[i].hash);
		free(t->bulk[i].named);
		for (size_t k = 0; k < t->bulk[i].nbig; k++)
			free(t->bulk[i].big[k].ids);
		free(t->bulk[i].big);
		idc_buf_free(&t->bulk[i].keys);
	}
	free(t->bulk);
	t->bulk = NULL;
	t->nbulk = 0;
	memset(t->bulk_of, 0, sizeof(t->bulk_of));
}

/* ---- maintenance ------------------------------------------------------------------- */

/* One pair through a cursor of its own (op: block_insert or block_remove). */
static int pair_apply(struct store_txn *t, MDB_dbi dbi, struct store_val key, uint64_t id,
		      int (*op)(MDB_cursor *, MDB_val *, uint64_t))
{
	MDB_cursor *c;
	int rc = mdb_cursor_open(t->txn, dbi, &c);
	if (rc)
		return store_mdb_err(rc);
	MDB_val k = {key.len, (void *)key.ptr};
	rc = op(c, &k, id);
	mdb_cursor_close(c);
	return store_mdb_err(rc);
}

/* Put (key, id): to the bulk list when the transaction has them, else
 * into the index at once. x: key's index_key_hash, which only the bulk
 * list reads (an add's keys come with theirs, add_key.hash). */
static int pair_put_hashed(struct store_txn *t, MDB_dbi dbi, struct store_val key, uint64_t x,
			   uint64_t id)
{
	if (t->bulk_ok)
		return bulk_add(t, dbi, key, x, id);
	return pair_apply(t, dbi, key, id, block_insert);
}

static int pair_put(struct store_txn *t, MDB_dbi dbi, struct store_val key, uint64_t id)
{
	uint64_t x = t->bulk_ok ? index_key_hash(key.ptr, key.len) : 0;
	return pair_put_hashed(t, dbi, key, x, id);
}

static int pair_del(struct store_txn *t, MDB_dbi dbi, struct store_val key, uint64_t id)
{
	return pair_apply(t, dbi, key, id, block_remove);
}

/* All keys of attribute a under index ix, as (offset, len) into keys,
 * sorted, duplicates dropped. */
struct keyref {
	size_t off;
	size_t len;
};

static _Thread_local const char *keys_base;

static int keyref_cmp(const void *a, const void *b)
{
	const struct keyref *x = a, *y = b;
	size_t n = x->len < y->len ? x->len : y->len;
	int c = memcmp(keys_base + x->off, keys_base + y->off, n);
	return c ? c : (x->len > y->len) - (x->len < y->len);
}

static int attr_keys(struct store_txn *t, const struct store_index *ix, const struct store_attr *a,
		     struct idc_buf *keys, struct keyref **refs, size_t *n)
{
	*n = 0;
	idc_buf_reset(keys);
	if (!a)
		return 0;
	struct keyref *r = malloc(a->nvals * sizeof(*r));
	if (!r)
		return -ENOMEM;
	int rc = 0;
	for (size_t i = 0; i < a->nvals && !rc; i++) {
		idc_buf_reset(&t->norm);
		bool skip;
		rc = store_normalize(ix->rule, a->vals[i].ptr, a->vals[i].len, &t->norm, NULL);
		if (rc == IDC_ESYNTAX) { /* validated on write; unreachable for stored data */
			rc = 0;
			continue;
		}
		if (!rc)
			rc = index_key((struct store_val){t->norm.data, t->norm.len}, &t->key2,
				       &skip);
		if (rc || skip)
			continue;
		r[*n] = (struct keyref){keys->len, t->key2.len};
		rc = idc_buf_append(keys, t->key2.data, t->key2.len);
		(*n)++;
	}
	if (rc) {
		free(r);
		return rc;
	}
	keys_base = keys->data;
	qsort(r, *n, sizeof(*r), keyref_cmp);
	*refs = r;
	return 0;
}

static int keyref_cmp2(const char *ab, const struct keyref *a, const char *bb,
		       const struct keyref *b)
{
	size_t n = a->len < b->len ? a->len : b->len;
	int c = memcmp(ab + a->off, bb + b->off, n);
	return c ? c : (a->len > b->len) - (a->len < b->len);
}

/* Delete keys only in old, put keys only in new. */
static int index_merge(struct store_txn *t, MDB_dbi dbi, uint64_t id, const struct idc_buf *ok,
		       const struct keyref *o, size_t no, const struct idc_buf *nk,
		       const struct keyref *nw, size_t nn)
{
	size_t i = 0, j = 0;
	int rc = 0;
	while ((i < no || j < nn) && !rc) {
		int c = i == no ? 1 : j == nn ? -1 : keyref_cmp2(ok->data, &o[i], nk->data, &nw[j]);
		if (c < 0) {
			rc =
			    pair_del(t, dbi, (struct store_val){ok->data + o[i].off, o[i].len}, id);
			i++;
		} else if (c > 0) {
			rc = pair_put(t, dbi, (struct store_val){nk->data + nw[j].off, nw[j].len},
				      id);
			j++;
		} else {
			i++;
			j++;
		}
	}
	return rc;
}

static int index_update_one(struct store_txn *t, const struct store_index *ix, uint64_t id,
			    const struct store_attr *oa, const struct store_attr *na)
{
	struct idc_buf ok = IDC_BUF_INIT, nk = IDC_BUF_INIT;
	struct keyref *o = NULL, *nw = NULL;
	size_t no = 0, nn = 0;
	int rc = attr_keys(t, ix, oa, &ok, &o, &no);
	if (!rc)
		rc = attr_keys(t, ix, na, &nk, &nw, &nn);
	if (!rc)
		rc = index_merge(t, ix->dbi, id, &ok, o, no, &nk, nw, nn);
	struct store_val pk = {ix->name, ix->name_len};
	if (!rc && oa && !na)
		rc = pair_del(t, t->s->pres, pk, id);
	else if (!rc && na && !oa)
		rc = pair_put(t, t->s->pres, pk, id);
	free(o);
	free(nw);
	idc_buf_free(&ok);
	idc_buf_free(&nk);
	return rc;
}

static bool attr_same(const struct store_attr *a, const struct store_attr *b)
{
	if (!a || !b)
		return a == b;
	if (a->nvals != b->nvals)
		return false;
	for (size_t i = 0; i < a->nvals; i++)
		if (a->vals[i].len != b->vals[i].len ||
		    memcmp(a->vals[i].ptr, b->vals[i].ptr, a->vals[i].len) != 0)
			return false;
	return true;
}

int index_update(struct store_txn *t, uint64_t id, const struct store_entry *old,
		 const struct store_entry *new_e)
{
	const struct store *s = t->s;
	for (size_t i = 0; i < s->nidx; i++) {
		const struct store_index *ix = &s->idx[i];
		const struct store_attr *oa =
		    old ? store_entry_attr(old, ix->name, ix->name_len) : NULL;
		const struct store_attr *na =
		    new_e ? store_entry_attr(new_e, ix->name, ix->name_len) : NULL;
		if (attr_same(oa, na))
			continue;
		int rc = index_update_one(t, ix, id, oa, na);
		if (rc)
			return rc;
	}
	return 0;
}

int index_add(struct store_txn *t, const struct add_prep *p, uint64_t id)
{
	const struct store *s = t->s;
	int rc = 0;
	for (size_t i = 0; i < p->nak && !rc; i++) {
		const struct add_key *k = &p->ak[i];
		rc = pair_put_hashed(t, s->idx[k->ix].dbi,
				     (struct store_val){p->akeys.data + k->off, k->len}, k->hash,
				     id);
	}
	for (size_t i = 0; i < p->npres && !rc; i++) {
		const struct store_index *ix = &s->idx[p->ak_pres[i]];
		rc = t->bulk_ok
			 ? bulk_add_named(t, p->ak_pres[i], id)
			 : pair_put(t, s->pres, (struct store_val){ix->name, ix->name_len}, id);
	}
	return rc;
}

void index_add_prefetch(struct store_txn *t, const struct add_prep *p)
{
	for (size_t i = 0; i < p->nak; i++) {
		MDB_dbi dbi = t->s->idx[p->ak[i].ix].dbi;
		unsigned bi = dbi < STORE_BULK_DBIS ? t->bulk_of[dbi] : 0;
		const struct bulk_list *b = bi ? &t->bulk[bi - 1] : NULL;
		if (b && !b->sorted && b->hcap)
			__builtin_prefetch(&b->hash[p->ak[i].hash & (b->hcap - 1)]);
	}
}

/* ---- adding and dropping an index ---------------------------------------------------- */

static int index_build(struct store_txn *t, struct store_index *ix)
{
	MDB_cursor *c;
	int rc = mdb_cursor_open(t->txn, t->s->id2entry, &c);
	if (rc)
		return store_mdb_err(rc);
	MDB_val k, v;
	int op = MDB_FIRST;
	while ((rc = mdb_cursor_get(c, &k, &v, op)) == 0) {
		op = MDB_NEXT;
		struct store_entry e;
		size_t id;
		memcpy(&id, k.mv_data, sizeof(id));
		rc = store_entry_decode(v.mv_data, v.mv_size, id, &t->sc2, &e, NULL);
		const struct store_attr *a =
		    rc ? NULL : store_entry_attr(&e, ix->name, ix->name_len);
		if (!rc && a)
			rc = index_update_one(t, ix, id, NULL, a);
		if (rc)
			break;
	}
	mdb_cursor_close(c);
	return rc == MDB_NOTFOUND ? 0 : store_mdb_err(rc);
}

int store_index_add(struct store_txn *t, const char *attr, struct idc_diag *d)
{
	struct store *s = t->s;
	struct store_index ix = {0};
	ix.name_len = store_attr_canon(attr, strlen(attr), ix.name);
	if (ix.name_len == 0)
		return idc_diag_set(d, IDC_ESYNTAX, "invalid attribute name '%s'", attr);
	ix.name[ix.name_len] = '\0';
	if (index_find(s, ix.name, ix.name_len))
		return idc_diag_set(d, -EEXIST, "attribute '%s' is already indexed", ix.name);
	if (s->nidx == STORE_MAX_INDEXES)
		return idc_diag_set(d, -ENOSPC, "at most %d indexes", STORE_MAX_INDEXES);
	ix.rule = store_attr_rule(ix.name, ix.name_len);
	char dbname[STORE_ATTR_MAX + 4];
	snprintf(dbname, sizeof(dbname), "eq.%s", ix.name);
	int rc = index_bulk_flush(t);
	if (!rc)
		rc = store_mdb_err(
		    mdb_dbi_open(t->txn, dbname, MDB_CREATE | INDEX_DB_FLAGS, &ix.dbi));
	/* A left-over database from an aborted attempt must start empty. */
	if (!rc)
		rc = store_mdb_err(mdb_drop(t->txn, ix.dbi, 0));
	if (!rc)
		rc = index_build(t, &ix);
	const char *names[STORE_MAX_INDEXES + 1];
	for (size_t i = 0; i < s->nidx; i++)
		names[i] = s->idx[i].name;
	names[s->nidx] = ix.name;
	if (!rc)
		rc = index_meta_write(t, names, s->nidx + 1);
	return rc ? idc_diag_set(d, rc, "index %s: %s", ix.name, idc_strerror(rc)) : 0;
}

int store_index_remove(struct store_txn *t, const char *attr, struct idc_diag *d)
{
	struct store *s = t->s;
	char canon[STORE_ATTR_MAX];
	size_t n = store_attr_canon(attr, strlen(attr), canon);
	const struct store_index *ix = n ? index_find(s, canon, n) : NULL;
	if (!ix)
		return idc_diag_set(d, -ENOENT, "attribute '%s' is not indexed", attr);
	int rc = index_bulk_flush(t);
	MDB_val k = {ix->name_len, (void *)ix->name};
	if (!rc) {
		rc = mdb_del(t->txn, s->pres, &k, NULL);
		rc = rc == MDB_NOTFOUND ? 0 : store_mdb_err(rc);
	}
	if (!rc)
		rc = store_mdb_err(mdb_drop(t->txn, ix->dbi, 0));
	const char *names[STORE_MAX_INDEXES];
	size_t k2 = 0;
	for (size_t i = 0; i < s->nidx; i++)
		if (&s->idx[i] != ix)
			names[k2++] = s->idx[i].name;
	if (!rc)
		rc = index_meta_write(t, names, k2);
	return rc ? idc_diag_set(d, rc, "index %s: %s", ix->name, idc_strerror(rc)) : 0;
}
