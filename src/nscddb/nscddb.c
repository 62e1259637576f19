/*
 * nscddb: the writer of glibc's nscd map layout, and glibc's lookup over it
 * (layout, consistency and staleness: nscddb.h).
 *
 * The writer keeps the bump pointer, the entry count and the geometry in
 * private memory and trusts the map only for the chain words it walks,
 * every one bound-checked against the bytes it has written, and every walk
 * bounded by its own entry count: a map someone corrupted makes lookups
 * miss and unlinks misfire, never an access outside the mapping or an
 * endless loop.
 */
#include <assert.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "nscddb/nscddb.h"
#include "util/util.h"

static_assert(sizeof(struct nscddb_head) == NSCDDB_HEAD_SIZE, "glibc's database_pers_head");
static_assert(offsetof(struct nscddb_head, timestamp) == 16, "timestamp");
static_assert(offsetof(struct nscddb_head, module) == 40, "module");
static_assert(offsetof(struct nscddb_head, first_free) == 48, "first_free");
static_assert(sizeof(struct nscddb_hashentry) == NSCDDB_HE_SIZE, "glibc's hashentry");
static_assert(offsetof(struct nscddb_hashentry, next) == 16, "next");
static_assert(offsetof(struct nscddb_hashentry, packet) == 20, "packet");
static_assert(sizeof(struct nscddb_datahead) == NSCDDB_DH_SIZE, "glibc's datahead");
static_assert(offsetof(struct nscddb_datahead, usable) == 18, "usable");
static_assert(sizeof(struct nscddb_pw_resp) == 36, "pw_response_header");
static_assert(sizeof(struct nscddb_gr_resp) == 24, "gr_response_header");
static_assert(sizeof(struct nscddb_initgr_resp) == 12, "initgr_response_header");

struct nscddb {
	int db;
	uint8_t *base; /* our read-write mapping */
	size_t len;
	int ro; /* the descriptor handed out */
	struct nscddb_head *h;
	_Atomic uint32_t *table;
	uint8_t *data;
	uint32_t module, data_size;
	uint32_t first_free; /* bytes of data written */
	uint32_t entries;    /* hash entries linked */
	uint64_t swaps;
	int64_t next_expiry; /* no record expires before (nscddb_beat) */
	int stale_s;         /* NSCDDB_STALE_S, or nscddb_set_stale's */
	uint32_t max;        /* data area bound: NSCDDB_DATA_MAX or nscddb_set_max's */
	uint64_t resets;     /* swaps that started over empty */
	bool changing;       /* gc_cycle odd: an operation unlinked */
};

uint32_t nscddb_hash(const void *key, size_t len)
{
	const unsigned char *p = key;
	uint32_t h = 0;
	for (size_t i = 0; i < len; i++)
		h = p[i] + 65599u * h;
	return h;
}

static bool db_has_type(int db, int type)
{
	if (db == NSCDDB_PASSWD)
		return type == NSCDDB_GETPWBYNAME || type == NSCDDB_GETPWBYUID;
	return type == NSCDDB_GETGRBYNAME || type == NSCDDB_GETGRBYGID || type == NSCDDB_INITGROUPS;
}

/* ==== building a map ============================================================== */

static bool is_prime(uint32_t n)
{
	if (n < 2 || n % 2 == 0)
		return n == 2;
	for (uint32_t d = 3; d <= n / d; d += 2)
		if (n % d == 0)
			return false;
	return true;
}

/* Buckets for a data area: about one per 128 bytes (a record and its two
 * entries take 150 or more), a prime but not 2^k - 1: glibc takes sdbm
 * modulo it, and sdbm's values for names and ids that differ in a digit
 * crowd some residues of 2^k + 1 and of Mersenne primes (measured: chains
 * 1.5 to 2.5 times as long). */
static uint32_t module_for(uint32_t data_size)
{
	uint32_t n = data_size / 128;
	while (!is_prime(n) || (n & (n + 1)) == 0)
		n--;
	return n;
}

/* The timestamp glibc reads: stale_s short of its MAPPING_TIMEOUT. */
static uint64_t stamp(int64_t now, int stale_s)
{
	return (uint64_t)(now - NSCDDB_MAPPING_TIMEOUT + stale_s);
}

static int map_create(int db, uint32_t data_size, uint8_t **base, int *ro, size_t *len)
{
	uint32_t module = module_for(data_size);
	uint64_t size = nscddb_data_off(module) + data_size;
	int rc = idc_memfd_sealed(
	    db == NSCDDB_PASSWD ? "idcache-nscd-passwd" : "idcache-nscd-group", size, base, ro);
	if (rc < 0)
		return rc;
	struct nscddb_head *h = (struct nscddb_head *)(void *)*base;
	h->version = NSCDDB_VERSION;
	h->header_size = NSCDDB_HEAD_SIZE;
	h->module = (int32_t)module;
	atomic_store_explicit(&h->data_size, (int32_t)data_size, memory_order_relaxed);
	atomic_store_explicit(&h->timestamp, stamp(time(NULL), NSCDDB_STALE_S),
			      memory_order_relaxed);
	memset(*base + NSCDDB_HEAD_SIZE, 0xff, (size_t)module * 4); /* ENDREF */
	*len = (size_t)size;
	return 0;
}

static void adopt(struct nscddb *m, uint8_t *base, int ro, size_t len)
{
	m->base = base;
	m->ro = ro;
	m->len = len;
	m->h = (struct nscddb_head *)(void *)base;
	m->module = (uint32_t)m->h->module;
	m->data_size = (uint32_t)m->h->data_size;
	m->table = (_Atomic uint32_t *)(void *)(base + NSCDDB_HEAD_SIZE);
	m->data = base + nscddb_data_off(m->module);
	m->first_free = 0;
	m->entries = 0;
}

/* Readers inside the map look again (gc_cycle odd for good), and each
 * client asks for a new map at its next lookup (data_size past what it
 * mapped); then our side lets go. */
static void map_retire(struct nscddb *m)
{
	int32_t c = atomic_load_explicit(&m->h->gc_cycle, memory_order_relaxed);
	atomic_store_explicit(&m->h->gc_cycle, c | 1, memory_order_release);
	atomic_store_explicit(&m->h->data_size, INT32_MAX, memory_order_release);
	munmap(m->base, m->len);
	close(m->ro);
}

int nscddb_open(int db, uint32_t data_size, struct nscddb **out)
{
	*out = NULL;
	if ((db != NSCDDB_PASSWD && db != NSCDDB_GROUP) || data_size < NSCDDB_DATA_MIN ||
	    data_size > NSCDDB_DATA_MAX)
		return -EINVAL;
	struct nscddb *m = calloc(1, sizeof(*m));
	if (m == NULL)
		return -ENOMEM;
	uint8_t *base;
	int ro;
	size_t len;
	int rc = map_create(db, data_size & ~7u, &base, &ro, &len);
	if (rc < 0) {
		free(m);
		return rc;
	}
	m->db = db;
	m->next_expiry = INT64_MAX;
	m->stale_s = NSCDDB_STALE_S;
	m->max = NSCDDB_DATA_MAX;
	adopt(m, base, ro, len);
	*out = m;
	return 0;
}

void nscddb_close(struct nscddb *m)
{
	if (m == NULL)
		return;
	map_retire(m);
	free(m);
}

int nscddb_fd(const struct nscddb *m, uint64_t *size)
{
	if (m == NULL)
		return -ENODATA;
	*size = m->len;
	return m->ro;
}

void nscddb_set_stale(struct nscddb *m, int stale_s)
{
	if (m != NULL && stale_s >= 1 && stale_s <= NSCDDB_MAPPING_TIMEOUT)
		m->stale_s = stale_s;
}

void nscddb_set_max(struct nscddb *m, uint32_t max)
{
	if (m != NULL && max >= m->data_size && max <= NSCDDB_DATA_MAX)
		m->max = max & ~7u;
}

void *nscddb_base(const struct nscddb *m, size_t *len)
{
	*len = m ? m->len : 0;
	return m ? m->base : NULL;
}

void nscddb_stats(const struct nscddb *m, struct nscddb_stats *st)
{
	memset(st, 0, sizeof(*st));
	if (m == NULL)
		return;
	st->size = m->len;
	st->data_size = m->data_size;
	st->used = m->first_free;
	st->entries = m->entries;
	st->swaps = m->swaps;
	st->resets = m->resets;
}

/* ==== the writer's view of its map ============================================== */

/* The entry at ref, if it lies in what we wrote. */
static struct nscddb_hashentry *entry_at(const struct nscddb *m, uint32_t ref)
{
	if (ref == NSCDDB_ENDREF || ref % 8 != 0 || (uint64_t)ref + NSCDDB_HE_SIZE > m->first_free)
		return NULL;
	return (struct nscddb_hashentry *)(void *)(m->data + ref);
}

/* The record at ref, if it lies (whole) in what we wrote. */
static struct nscddb_datahead *record_at(const struct nscddb *m, uint32_t ref)
{
	if (ref % 8 != 0 || (uint64_t)ref + NSCDDB_DH_SIZE > m->first_free)
		return NULL;
	struct nscddb_datahead *dh = (struct nscddb_datahead *)(void *)(m->data + ref);
	if (dh->allocsize < NSCDDB_DH_SIZE ||
	    (uint64_t)ref + (uint64_t)dh->allocsize > m->first_free || dh->recsize < 0 ||
	    (uint64_t)dh->recsize + NSCDDB_DH_SIZE > (uint64_t)dh->allocsize)
		return NULL;
	return dh;
}

static bool entry_is(const struct nscddb *m, const struct nscddb_hashentry *he, int type,
		     const char *key, size_t keylen)
{
	return he->type == type && he->len >= 0 && (size_t)he->len == keylen &&
	       (uint64_t)he->key + keylen <= m->first_free &&
	       memcmp(m->data + he->key, key, keylen) == 0;
}

/* The link (a bucket word or an entry's next) holding the entry for
 * type/key, or NULL. */
static _Atomic uint32_t *find_link(struct nscddb *m, int type, const char *key, size_t keylen)
{
	_Atomic uint32_t *link = &m->table[nscddb_hash(key, keylen) % m->module];
	for (uint32_t n = 0; n <= m->entries; n++) {
		struct nscddb_hashentry *he =
		    entry_at(m, atomic_load_explicit(link, memory_order_relaxed));
		if (he == NULL)
			return NULL;
		if (entry_is(m, he, type, key, keylen))
			return link;
		link = &he->next;
	}
	return NULL;
}

static struct nscddb_hashentry *link_entry(const struct nscddb *m, const _Atomic uint32_t *link)
{
	return entry_at(m, atomic_load_explicit(link, memory_order_relaxed));
}

/* gc_cycle odd from an operation's first unlink to its end (glibc's
 * protocol): a reader that saw it move looks again. */
static void change_begin(struct nscddb *m)
{
	if (m->changing)
		return;
	m->changing = true;
	int32_t c = atomic_load_explicit(&m->h->gc_cycle, memory_order_relaxed);
	atomic_store_explicit(&m->h->gc_cycle, c + 1, memory_order_relaxed);
	atomic_thread_fence(memory_order_seq_cst);
}

/* The operation is over (nothing to do if it unlinked nothing). */
static void change_end(struct nscddb *m)
{
	if (!m->changing)
		return;
	m->changing = false;
	int32_t c = atomic_load_explicit(&m->h->gc_cycle, memory_order_relaxed);
	atomic_store_explicit(&m->h->gc_cycle, c + 1, memory_order_release);
}

/* Unlink the entry link holds; change_end when the operation is over. */
static void unlink_at(struct nscddb *m, _Atomic uint32_t *link)
{
	struct nscddb_hashentry *he = link_entry(m, link);
	if (he == NULL)
		return;
	change_begin(m);
	atomic_store_explicit(link, atomic_load_explicit(&he->next, memory_order_relaxed),
			      memory_order_release);
	m->entries--;
	m->h->nentries = (int32_t)m->entries;
}

/* ==== what a record answers ======================================================= */

struct rec_keys {
	const char *name; /* inside the record, NUL-terminated; NULL: none */
	size_t name_len;  /* with the NUL */
	uint32_t id;
	bool has_id;
};

static bool pw_keys(const struct nscddb_datahead *dh, struct rec_keys *k)
{
	const struct nscddb_pw_resp *r = (const void *)(dh + 1);
	if ((size_t)dh->recsize < sizeof(*r) || r->name_len < 1 ||
	    (size_t)r->name_len > (size_t)dh->recsize - sizeof(*r))
		return false;
	k->name = (const char *)(r + 1);
	k->name_len = (size_t)r->name_len;
	k->id = r->uid;
	k->has_id = true;
	return k->name[k->name_len - 1] == '\0';
}

static bool gr_keys(const struct nscddb_datahead *dh, struct rec_keys *k)
{
	const struct nscddb_gr_resp *r = (const void *)(dh + 1);
	size_t avail = (size_t)dh->recsize;
	if (avail < sizeof(*r) || r->mem_cnt < 0 || r->name_len < 1 ||
	    (uint64_t)r->mem_cnt * 4 + (uint64_t)r->name_len > avail - sizeof(*r))
		return false;
	k->name = (const char *)(r + 1) + (size_t)r->mem_cnt * 4;
	k->name_len = (size_t)r->name_len;
	k->id = r->gid;
	k->has_id = true;
	return k->name[k->name_len - 1] == '\0';
}

/* The name and id a record of type answers (initgroups: no id). */
static bool record_keys(const struct nscddb *m, uint32_t ref, int type, struct rec_keys *k)
{
	const struct nscddb_datahead *dh = record_at(m, ref);
	memset(k, 0, sizeof(*k));
	if (dh == NULL)
		return false;
	if (type == NSCDDB_GETPWBYNAME || type == NSCDDB_GETPWBYUID)
		return pw_keys(dh, k);
	if (type == NSCDDB_GETGRBYNAME || type == NSCDDB_GETGRBYGID)
		return gr_keys(dh, k);
	return false;
}

static int id_type(int name_type)
{
	return name_type == NSCDDB_GETPWBYNAME ? NSCDDB_GETPWBYUID : NSCDDB_GETGRBYGID;
}

static int name_type(int id_type)
{
	return id_type == NSCDDB_GETPWBYUID ? NSCDDB_GETPWBYNAME : NSCDDB_GETGRBYNAME;
}

/* The decimal key glibc sends for an id (nscd_getpw_r.c: unsigned). */
static size_t id_key(uint32_t id, char buf[16])
{
	return (size_t)snprintf(buf, 16, "%u", id) + 1;
}

/* ==== removing ==================================================================== */

/* Unlink the entry for type/key; its record's ref into *packet. */
static bool unlink_key(struct nscddb *m, int type, const char *key, size_t keylen, uint32_t *packet)
{
	_Atomic uint32_t *link = find_link(m, type, key, keylen);
	struct nscddb_hashentry *he = link ? link_entry(m, link) : NULL;
	if (he == NULL)
		return false;
	if (packet)
		*packet = he->packet;
	unlink_at(m, link);
	return true;
}

/* Unlink the entry for type/key if it points at packet. */
static void unlink_if(struct nscddb *m, int type, const char *key, size_t keylen, uint32_t packet)
{
	_Atomic uint32_t *link = find_link(m, type, key, keylen);
	struct nscddb_hashentry *he = link ? link_entry(m, link) : NULL;
	if (he != NULL && he->packet == packet)
		unlink_at(m, link);
}

/* Unlink the other key of the record at packet, which answered type. */
static void unlink_other(struct nscddb *m, int type, uint32_t packet)
{
	struct rec_keys k;
	if (!record_keys(m, packet, type, &k))
		return;
	if (type == NSCDDB_GETPWBYNAME || type == NSCDDB_GETGRBYNAME) {
		char buf[16];
		size_t n = id_key(k.id, buf);
		unlink_if(m, id_type(type), buf, n, packet);
	} else {
		unlink_if(m, name_type(type), k.name, k.name_len, packet);
	}
}

static int drop_key(struct nscddb *m, int type, const char *key, size_t keylen)
{
	if (m == NULL || !db_has_type(m->db, type) || keylen > NSCDDB_KEY_MAX)
		return 0;
	_Atomic uint32_t *link = find_link(m, type, key, keylen);
	struct nscddb_hashentry *he = link ? link_entry(m, link) : NULL;
	if (he == NULL)
		return 0;
	uint32_t packet = he->packet;
	unlink_at(m, link);
	if (type != NSCDDB_INITGROUPS)
		unlink_other(m, type, packet);
	change_end(m);
	return 1;
}

int nscddb_drop_name(struct nscddb *m, int type, const char *name)
{
	if (type == NSCDDB_GETPWBYUID || type == NSCDDB_GETGRBYGID)
		return 0;
	return drop_key(m, type, name, strlen(name) + 1);
}

int nscddb_drop_id(struct nscddb *m, int type, uint32_t id)
{
	if (type != NSCDDB_GETPWBYUID && type != NSCDDB_GETGRBYGID)
		return 0;
	char buf[16];
	size_t n = id_key(id, buf);
	return drop_key(m, type, buf, n);
}

int nscddb_id_of(struct nscddb *m, int type, const char *name, uint32_t *id)
{
	if (m == NULL || (type != NSCDDB_GETPWBYNAME && type != NSCDDB_GETGRBYNAME) ||
	    !db_has_type(m->db, type) || strlen(name) >= NSCDDB_KEY_MAX)
		return -ENOENT;
	_Atomic uint32_t *link = find_link(m, type, name, strlen(name) + 1);
	struct nscddb_hashentry *he = link ? link_entry(m, link) : NULL;
	struct rec_keys k;
	if (he == NULL || !record_keys(m, he->packet, type, &k))
		return -ENOENT;
	*id = k.id;
	return 0;
}

/* Unlink every entry for which drop() holds; the number unlinked. */
static int sweep(struct nscddb *m,
		 bool (*drop)(const struct nscddb *, const struct nscddb_hashentry *, const void *),
		 const void *arg)
{
	int n = 0;
	uint32_t budget = m->entries; /* a corrupted chain cannot loop us */
	for (uint32_t b = 0; b < m->module; b++) {
		_Atomic uint32_t *link = &m->table[b];
		struct nscddb_hashentry *he;
		while ((he = link_entry(m, link)) != NULL && budget > 0) {
			budget--;
			if (!drop(m, he, arg)) {
				link = &he->next;
				continue;
			}
			n++;
			unlink_at(m, link);
		}
	}
	change_end(m);
	return n;
}

static bool is_type(const struct nscddb *m, const struct nscddb_hashentry *he, const void *arg)
{
	(void)m;
	int type = *(const int *)arg;
	return type < 0 || he->type == type;
}

int nscddb_drop_type(struct nscddb *m, int type)
{
	return m ? sweep(m, is_type, &type) : 0;
}

/* Expired at arg[0]; the earliest expiry of what stays into arg[1]. */
static bool is_expired(const struct nscddb *m, const struct nscddb_hashentry *he, const void *arg)
{
	int64_t *t = (int64_t *)(uintptr_t)arg;
	const struct nscddb_datahead *dh = record_at(m, he->packet);
	if (dh == NULL || (int64_t)dh->timeout <= t[0])
		return true;
	if ((int64_t)dh->timeout < t[1])
		t[1] = (int64_t)dh->timeout;
	return false;
}

int nscddb_beat(struct nscddb *m, int64_t now)
{
	if (m == NULL)
		return 0;
	atomic_store_explicit(&m->h->timestamp, stamp(now, m->stale_s), memory_order_release);
	if (m->entries == 0 || now < m->next_expiry)
		return 0;
	int64_t t[2] = {now, INT64_MAX};
	int n = sweep(m, is_expired, t);
	m->next_expiry = t[1];
	return n;
}

/* ==== swapping in a new map =========================================================
 * Copy the live records into a new map of data_size bytes: each record
 * once (a table maps old refs to new), each entry rehashed. */

struct ref_map {
	uint32_t *from, *to;
	size_t cap; /* power of two */
};

static uint32_t *ref_slot(struct ref_map *r, uint32_t from)
{
	size_t i = (from / 8u * 2654435761u) & (r->cap - 1);
	while (r->from[i] != NSCDDB_ENDREF && r->from[i] != from)
		i = (i + 1) & (r->cap - 1);
	return &r->from[i];
}

static int ref_map_init(struct ref_map *r, uint32_t entries)
{
	r->cap = 16;
	while (r->cap < (size_t)entries * 2 + 2)
		r->cap *= 2;
	r->from = malloc(r->cap * sizeof(uint32_t));
	r->to = malloc(r->cap * sizeof(uint32_t));
	if (r->from == NULL || r->to == NULL) {
		free(r->from);
		free(r->to);
		return -ENOMEM;
	}
	memset(r->from, 0xff, r->cap * sizeof(uint32_t));
	return 0;
}

static uint32_t round8(uint64_t n)
{
	return (uint32_t)((n + 7) & ~(uint64_t)7);
}

/* Bytes the live records and entries take. */
static uint64_t live_bytes(const struct nscddb *m, struct ref_map *seen)
{
	uint64_t total = 0;
	uint32_t budget = m->entries;
	for (uint32_t b = 0; b < m->module; b++) {
		const struct nscddb_hashentry *he = link_entry(m, &m->table[b]);
		for (; he != NULL && budget > 0; he = link_entry(m, &he->next), budget--) {
			const struct nscddb_datahead *dh = record_at(m, he->packet);
			uint32_t *slot = ref_slot(seen, he->packet);
			total += NSCDDB_HE_SIZE;
			if (dh != NULL && *slot == NSCDDB_ENDREF) {
				*slot = he->packet;
				total += round8((uint64_t)dh->allocsize);
			}
		}
	}
	return total;
}

static int64_t alloc(struct nscddb *m, uint64_t n);

/* Link a new entry for type/key (keyoff: its bytes in the data area) to
 * the record at packet. The space is there (the caller reserved it). */
static void link_new(struct nscddb *m, int type, uint32_t keyoff, size_t keylen, uint32_t packet,
		     bool first)
{
	int64_t off = alloc(m, NSCDDB_HE_SIZE);
	assert(off >= 0);
	struct nscddb_hashentry *he = (struct nscddb_hashentry *)(void *)(m->data + off);
	memset(he, 0, sizeof(*he));
	he->type = (uint8_t)type;
	he->first = first;
	he->len = (int32_t)keylen;
	he->key = keyoff;
	he->packet = packet;
	_Atomic uint32_t *head = &m->table[nscddb_hash(m->data + keyoff, keylen) % m->module];
	atomic_store_explicit(&he->next, atomic_load_explicit(head, memory_order_relaxed),
			      memory_order_relaxed);
	atomic_store_explicit(head, (uint32_t)off, memory_order_release);
	m->entries++;
	m->h->nentries = (int32_t)m->entries;
	if (m->entries > (uint32_t)m->h->maxnentries)
		m->h->maxnentries = (int32_t)m->entries;
}

/* Copy one entry of old into m (its record first, once). */
static void copy_entry(struct nscddb *m, const struct nscddb *old,
		       const struct nscddb_hashentry *he, struct ref_map *moved)
{
	const struct nscddb_datahead *dh = record_at(old, he->packet);
	if (dh == NULL || he->len < 1 || he->key < he->packet ||
	    (uint64_t)he->key + (uint64_t)he->len > (uint64_t)he->packet + (uint64_t)dh->allocsize)
		return; /* a key outside its record: not ours, not copied */
	uint32_t *slot = ref_slot(moved, he->packet);
	uint32_t to;
	if (*slot == he->packet) {
		to = moved->to[slot - moved->from];
	} else {
		int64_t off = alloc(m, round8((uint64_t)dh->allocsize));
		if (off < 0)
			return;
		memcpy(m->data + off, dh, (size_t)dh->allocsize);
		*slot = he->packet;
		to = moved->to[slot - moved->from] = (uint32_t)off;
	}
	if ((uint64_t)m->first_free + NSCDDB_HE_SIZE <= m->data_size)
		link_new(m, he->type, to + (he->key - he->packet), (size_t)he->len, to, he->first);
}

static int swap_map(struct nscddb *m, uint64_t need)
{
	struct ref_map seen;
	int rc = ref_map_init(&seen, m->entries);
	if (rc < 0)
		return rc;
	uint64_t live = live_bytes(m, &seen) + need;
	uint64_t size = m->data_size;
	while (size < m->max && live > size / 2)
		size *= 2;
	if (size > m->max)
		size = m->max;
	/* At the bound and still mostly live: start over empty, keeping
	 * nothing (a hit-rate loss the socket answers, never a wrong answer;
	 * copying would leave room for few records before the next swap). */
	bool keep = live <= size - size / 4;
	struct nscddb next = {.db = m->db,
			      .swaps = m->swaps + 1,
			      .resets = m->resets + !keep,
			      .next_expiry = m->next_expiry,
			      .stale_s = m->stale_s,
			      .max = m->max};
	uint8_t *base;
	int ro;
	size_t len;
	rc = map_create(m->db, (uint32_t)size, &base, &ro, &len);
	if (rc < 0)
		goto out;
	adopt(&next, base, ro, len);
	memset(seen.from, 0xff, seen.cap * sizeof(uint32_t));
	uint32_t budget = keep ? m->entries : 0;
	for (uint32_t b = 0; b < m->module && budget > 0; b++)
		for (const struct nscddb_hashentry *he = link_entry(m, &m->table[b]);
		     he != NULL && budget > 0; he = link_entry(m, &he->next), budget--)
			copy_entry(&next, m, he, &seen);
	atomic_store_explicit(&next.h->timestamp,
			      atomic_load_explicit(&m->h->timestamp, memory_order_relaxed),
			      memory_order_relaxed);
	map_retire(m);
	*m = next;
out:
	free(seen.from);
	free(seen.to);
	return rc;
}

/* n bytes (a multiple of 8) of data, or -ENOSPC. */
static int64_t alloc(struct nscddb *m, uint64_t n)
{
	if ((uint64_t)m->first_free + n > m->data_size)
		return -ENOSPC;
	int64_t off = m->first_free;
	m->first_free += (uint32_t)n;
	m->h->first_free = (int32_t)m->first_free;
	return off;
}

/* Room for n more bytes, swapping in a bigger or compacted map if needed. */
static int reserve(struct nscddb *m, uint64_t n)
{
	if (n > m->max / 4)
		return -E2BIG;
	if ((uint64_t)m->first_free + n <= m->data_size)
		return 0;
	int rc = swap_map(m, n);
	if (rc == 0 && (uint64_t)m->first_free + n > m->data_size)
		rc = -ENOSPC;
	return rc;
}

/* ==== storing ====================================================================== */

/* A record being written: its datahead at off, and where the next bytes go. */
struct rec_out {
	struct nscddb_datahead *dh;
	uint32_t off;
	uint8_t *p;
};

static void rec_begin(struct nscddb *m, struct rec_out *r, uint32_t size, int64_t expire,
		      int64_t now)
{
	r->off = (uint32_t)alloc(m, round8(size));
	r->dh = (struct nscddb_datahead *)(void *)(m->data + r->off);
	memset(r->dh, 0, round8(size));
	r->dh->allocsize = (int32_t)size;
	r->dh->timeout = (uint64_t)expire;
	r->dh->usable = 1;
	r->dh->ttl = expire > now ? (uint32_t)(expire - now) : 0;
	if (expire < m->next_expiry)
		m->next_expiry = expire;
	r->p = (uint8_t *)(r->dh + 1);
}

/* Room for a record whose response takes resp_len bytes and its keys
 * keys_len more, and for its nentries hash entries; the record begun in r. */
static int rec_open(struct nscddb *m, struct rec_out *r, uint64_t resp_len, uint64_t keys_len,
		    int nentries, int64_t expire, int64_t now)
{
	uint64_t size = NSCDDB_DH_SIZE + resp_len + keys_len;
	int rc = reserve(m, round8(size) + (uint64_t)nentries * NSCDDB_HE_SIZE);
	if (rc < 0)
		return rc;
	rec_begin(m, r, (uint32_t)size, expire, now);
	return 0;
}

static uint32_t rec_put(struct rec_out *r, const void *src, size_t n)
{
	uint32_t at = (uint32_t)(r->p - (uint8_t *)r->dh) + r->off;
	memcpy(r->p, src, n);
	r->p += n;
	return at;
}

/* Link the new record at packet for the keys in want: each key taken
 * over from the record answering it; when that record is the same entry
 * (same name and id), its other key too. */
static void publish(struct nscddb *m, int ntype, uint32_t name_off, size_t name_len,
		    uint32_t id_off, size_t id_len, uint32_t packet, unsigned want)
{
	const char *name = (const char *)m->data + name_off;
	const char *idk = (const char *)m->data + id_off;
	int itype = id_type(ntype);
	for (int i = 0; i < 2; i++) {
		unsigned key = i == 0 ? NSCDDB_KEY_NAME : NSCDDB_KEY_ID;
		uint32_t old;
		if (!(want & key))
			continue;
		bool had = i == 0 ? unlink_key(m, ntype, name, name_len, &old)
				  : unlink_key(m, itype, idk, id_len, &old);
		struct rec_keys k;
		if (had && record_keys(m, old, ntype, &k) && k.name_len == name_len &&
		    memcmp(k.name, name, name_len) == 0 && k.id == strtoul(idk, NULL, 10)) {
			want |= NSCDDB_KEY_NAME | NSCDDB_KEY_ID;
			unlink_other(m, i == 0 ? ntype : itype, old);
		}
	}
	if (want & NSCDDB_KEY_NAME)
		link_new(m, ntype, name_off, name_len, packet, true);
	if (want & NSCDDB_KEY_ID)
		link_new(m, itype, id_off, id_len, packet, !(want & NSCDDB_KEY_NAME));
	change_end(m);
}

static bool strings_ok(const char *const *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (s[i] == NULL || strlen(s[i]) >= NSCDDB_KEY_MAX)
			return false;
	return true;
}

int nscddb_put_passwd(struct nscddb *m, const struct nscddb_passwd *pw, unsigned keys,
		      int64_t expire, int64_t now)
{
	if (m == NULL)
		return 0;
	const char *s[5] = {pw->name, pw->passwd, pw->gecos, pw->dir, pw->shell};
	if (m->db != NSCDDB_PASSWD || keys == 0 || (keys & ~3u) || !strings_ok(s, 5) || !*pw->name)
		return -EINVAL;
	size_t len[5], total = 0;
	for (int i = 0; i < 5; i++)
		total += len[i] = strlen(s[i]) + 1;
	char idk[16];
	size_t idlen = id_key(pw->uid, idk);
	struct rec_out r;
	int rc = rec_open(m, &r, sizeof(struct nscddb_pw_resp) + total, idlen, 2, expire, now);
	if (rc < 0)
		return rc;
	struct nscddb_pw_resp resp = {NSCDDB_PROTO_VERSION,
				      1,
				      (int32_t)len[0],
				      (int32_t)len[1],
				      pw->uid,
				      pw->gid,
				      (int32_t)len[2],
				      (int32_t)len[3],
				      (int32_t)len[4]};
	rec_put(&r, &resp, sizeof(resp));
	uint32_t name_off = rec_put(&r, s[0], len[0]);
	for (int i = 1; i < 5; i++)
		rec_put(&r, s[i], len[i]);
	r.dh->recsize = (int32_t)(sizeof(resp) + total);
	uint32_t id_off = rec_put(&r, idk, idlen);
	publish(m, NSCDDB_GETPWBYNAME, name_off, len[0], id_off, idlen, r.off, keys);
	return 0;
}

int nscddb_put_group(struct nscddb *m, const struct nscddb_group *gr, unsigned keys, int64_t expire,
		     int64_t now)
{
	if (m == NULL)
		return 0;
	const char *s[2] = {gr->name, gr->passwd};
	if (m->db != NSCDDB_GROUP || keys == 0 || (keys & ~3u) || !strings_ok(s, 2) || !*gr->name ||
	    !strings_ok(gr->members, gr->nmembers) || gr->nmembers > INT32_MAX / 8)
		return -EINVAL;
	uint64_t total = strlen(s[0]) + strlen(s[1]) + 2;
	for (size_t i = 0; i < gr->nmembers; i++)
		total += 4 + strlen(gr->members[i]) + 1;
	char idk[16];
	size_t idlen = id_key(gr->gid, idk);
	struct rec_out r;
	int rc = rec_open(m, &r, sizeof(struct nscddb_gr_resp) + total, idlen, 2, expire, now);
	if (rc < 0)
		return rc;
	struct nscddb_gr_resp resp = {NSCDDB_PROTO_VERSION,      1,       (int32_t)strlen(s[0]) + 1,
				      (int32_t)strlen(s[1]) + 1, gr->gid, (int32_t)gr->nmembers};
	rec_put(&r, &resp, sizeof(resp));
	for (size_t i = 0; i < gr->nmembers; i++) {
		uint32_t l = (uint32_t)strlen(gr->members[i]) + 1;
		rec_put(&r, &l, 4);
	}
	uint32_t name_off = rec_put(&r, s[0], (size_t)resp.name_len);
	rec_put(&r, s[1], (size_t)resp.passwd_len);
	for (size_t i = 0; i < gr->nmembers; i++)
		rec_put(&r, gr->members[i], strlen(gr->members[i]) + 1);
	r.dh->recsize = (int32_t)(sizeof(resp) + total);
	uint32_t id_off = rec_put(&r, idk, idlen);
	publish(m, NSCDDB_GETGRBYNAME, name_off, (size_t)resp.name_len, id_off, idlen, r.off, keys);
	return 0;
}

int nscddb_put_initgroups(struct nscddb *m, const char *user, const uint32_t *gids, size_t n,
			  int64_t expire, int64_t now)
{
	if (m == NULL)
		return 0;
	size_t ulen = strlen(user) + 1;
	if (m->db != NSCDDB_GROUP || ulen < 2 || ulen > NSCDDB_KEY_MAX || n > INT32_MAX / 8)
		return -EINVAL;
	struct rec_out r;
	int rc = rec_open(m, &r, sizeof(struct nscddb_initgr_resp) + n * 4, ulen, 1, expire, now);
	if (rc < 0)
		return rc;
	struct nscddb_initgr_resp resp = {NSCDDB_PROTO_VERSION, 1, (int32_t)n};
	rec_put(&r, &resp, sizeof(resp));
	if (n)
		rec_put(&r, gids, n * 4);
	r.dh->recsize = (int32_t)(sizeof(resp) + n * 4);
	uint32_t key_off = rec_put(&r, user, ulen);
	unlink_key(m, NSCDDB_INITGROUPS, user, ulen, NULL);
	link_new(m, NSCDDB_INITGROUPS, key_off, ulen, r.off, true);
	change_end(m);
	return 0;
}

/* ==== glibc's lookup ================================================================ */

static size_t resp_size(int type)
{
	if (type == NSCDDB_GETPWBYNAME || type == NSCDDB_GETPWBYUID)
		return sizeof(struct nscddb_pw_resp);
	if (type == NSCDDB_INITGROUPS)
		return sizeof(struct nscddb_initgr_resp);
	return sizeof(struct nscddb_gr_resp);
}

/* The entry at work of a data area of datasize bytes, or NULL. */
static const struct nscddb_hashentry *find_entry_at(const uint8_t *data, uint64_t datasize,
						    uint32_t work)
{
	if (work == NSCDDB_ENDREF || (uint64_t)work + NSCDDB_HE_MIN > datasize || work % 8)
		return NULL;
	return (const struct nscddb_hashentry *)(const void *)(data + work);
}

static const struct nscddb_datahead *find_match(const uint8_t *data, uint64_t datasize,
						const struct nscddb_hashentry *he, int type,
						const char *key, size_t keylen)
{
	if (he->type != type || he->len < 0 || (size_t)he->len != keylen ||
	    (uint64_t)he->key + keylen > datasize || memcmp(key, data + he->key, keylen) != 0 ||
	    (uint64_t)he->packet + NSCDDB_DH_SIZE > datasize || he->packet % 8)
		return NULL;
	const struct nscddb_datahead *dh = (const void *)(data + he->packet);
	if (!dh->usable || dh->allocsize < 0 ||
	    (uint64_t)he->packet + (uint64_t)dh->allocsize > datasize ||
	    (uint64_t)he->packet + NSCDDB_DH_SIZE + resp_size(type) > datasize)
		return NULL;
	return dh;
}

const struct nscddb_datahead *nscddb_find(const void *base, size_t len, int type, const char *key,
					  size_t keylen)
{
	const struct nscddb_head *h = base;
	if (len < NSCDDB_HEAD_SIZE || h->version != NSCDDB_VERSION ||
	    h->header_size != NSCDDB_HEAD_SIZE || h->module <= 0)
		return NULL;
	int32_t ds = h->data_size;
	uint64_t off = nscddb_data_off((uint32_t)h->module);
	if (ds < 0 || off + (uint64_t)ds > len)
		return NULL;
	const uint8_t *data = (const uint8_t *)base + off;
	const uint32_t *table =
	    (const uint32_t *)(const void *)((const uint8_t *)base + NSCDDB_HEAD_SIZE);
	uint64_t datasize = (uint64_t)ds;
	/* glibc's walk: bounded by the data size, with a trailing pointer
	 * moving at half speed to stop on a cycle. */
	uint32_t trail = table[nscddb_hash(key, keylen) % (uint32_t)h->module], work = trail;
	uint64_t loops = datasize / (NSCDDB_HE_MIN + NSCDDB_DH_SIZE / 2);
	const struct nscddb_hashentry *he;
	for (int tick = 0; (he = find_entry_at(data, datasize, work)) != NULL; tick = !tick) {
		const struct nscddb_datahead *dh =
		    find_match(data, datasize, he, type, key, keylen);
		if (dh != NULL)
			return dh;
		work = he->next;
		if (work == trail || loops-- == 0)
			return NULL;
		if (tick) {
			const struct nscddb_hashentry *t = find_entry_at(data, datasize, trail);
			if (t == NULL)
				return NULL;
			trail = t->next;
		}
	}
	return NULL;
}
