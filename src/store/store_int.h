/*
 * Internals shared by the files of the store module; nothing outside
 * src/store includes this.
 */
#ifndef IDC_STORE_INT_H
#define IDC_STORE_INT_H

#include <stdint.h>
#include <string.h>

#include "store.h"

/* Append the normalized text of dn to out (no store_ndn needed): the DN
 * matching rule uses it, so normalizing a member value allocates nothing
 * beyond out's growth. Errors as store_dn_normalize. */
int store_dn_normalize_append(const char *dn, size_t len, struct idc_buf *out, struct idc_diag *d);

/* cb for each AVA of the first RDN of dn (rdn 0), dn being what
 * store_dn_normalize made n from: from the AVAs n kept, or by parsing that
 * RDN again when it kept none or n is NULL (dn must have normalized). The
 * first non-zero return of cb, or 0. */
int store_dn_rdn0_avas(const struct store_ndn *n, const char *dn, size_t len, store_ava_cb cb,
		       void *arg, struct idc_diag *d);

/* prep.c: RFC 4518 preparation of text under caseIgnore (fold) or
 * caseExact, appended to out. A part of a substring assertion keeps one
 * space where it meets the rest of the value: an initial part at its end, a
 * final part at its start, an any part at both. Never fails on input (see
 * prep.c for text that is not UTF-8); 0 or -ENOMEM. */
enum store_prep_part {
	STORE_PREP_VALUE,   /* a value or an equality assertion */
	STORE_PREP_INITIAL, /* substrings: initial */
	STORE_PREP_ANY,     /* substrings: any */
	STORE_PREP_FINAL,   /* substrings: final */
};
int store_prep(const char *v, size_t len, bool fold, enum store_prep_part part,
	       struct idc_buf *out);

/* ---- filter tree -------------------------------------------------------------
 * Built by store_filter_parse; read by filter.c (evaluation) and search.c
 * (the planner). All strings are owned by the tree (one arena). */
enum store_filter_type {
	SF_AND,     /* kids; empty "(&)" is absolute true */
	SF_OR,      /* kids; empty "(|)" is absolute false */
	SF_NOT,     /* kids[0] */
	SF_EQ,      /* attr = value */
	SF_APPROX,  /* attr ~= value: evaluated as equality */
	SF_GE,      /* attr >= value */
	SF_LE,      /* attr <= value */
	SF_PRESENT, /* attr =* */
	SF_SUBSTR,  /* attr = initial*any*...*final */
	SF_EXT,     /* [attr][:dn][:rule]:=value */
};

struct store_filter {
	enum store_filter_type type;
	struct store_filter **kids;
	size_t nkids;

	/* attribute assertions (all but AND/OR/NOT) */
	char *attr; /* canonical name; NULL for ":rule:=" without attr */
	size_t attr_len;
	enum store_rule rule;  /* the attribute's rule, or the extensible one */
	bool has_rule;         /* SF_EXT named a rule */
	bool dn_attrs;         /* SF_EXT with ":dn" */
	struct store_val raw;  /* assertion value, escapes undone */
	struct store_val norm; /* raw normalized under rule */
	bool valid;            /* false: raw is not of the rule's syntax, so the
				* assertion is Undefined for every entry */

	/* SF_SUBSTR: each part normalized under the attribute's rule (with
	 * caseIgnore/caseExact space handling applied per part) */
	struct store_val initial; /* len 0 and ptr NULL: none */
	struct store_val *any;
	size_t nany;
	struct store_val final;
};

/* Three-valued result of evaluating a filter (RFC 4511 4.5.1.7). */
enum { SF_FALSE = 0, SF_TRUE = 1, SF_UNDEF = 2 };
int store_filter_eval(const struct store_filter *f, const struct store_entry *e,
		      struct idc_buf *scratch);

/* The first 8 bytes of p[0..n), big-endian, zero-padded: integers that
 * order as memcmp orders the bytes they cover, so a sort settles most
 * comparisons of keys or names with one of them (ties need the rest, then
 * the lengths). */
static inline uint64_t store_prefix64(const char *p, size_t n)
{
	uint64_t x = 0;
	memcpy(&x, p, n < 8 ? n : 8);
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	x = __builtin_bswap64(x);
#endif
	return x;
}

/* Whether a[0..n) equals b[0..n): names and keys of a dozen bytes, where a
 * few overlapping word loads beat a call to memcmp. */
static inline bool store_short_eq(const char *a, const char *b, size_t n)
{
	uint64_t x, y;
	uint32_t v, w;
	if (n >= 8) {
		for (size_t i = 0; i + 8 < n; i += 8) {
			memcpy(&x, a + i, 8);
			memcpy(&y, b + i, 8);
			if (x != y)
				return false;
		}
		memcpy(&x, a + n - 8, 8);
		memcpy(&y, b + n - 8, 8);
		return x == y;
	}
	if (n >= 4) {
		memcpy(&v, a, 4);
		memcpy(&w, b, 4);
		if (v != w)
			return false;
		memcpy(&v, a + n - 4, 4);
		memcpy(&w, b + n - 4, 4);
		return v == w;
	}
	for (size_t i = 0; i < n; i++)
		if (a[i] != b[i])
			return false;
	return true;
}

#endif

/* ==== store internals (store.c, index.c, ops.c, search.c, check.c) ========== */
#include <lmdb.h>
#include <pthread.h>
#include <stdatomic.h>

/* 2: text keys prepared by RFC 4518; 3: index values in id blocks */
#define STORE_FORMAT_VERSION 3
#define STORE_MAX_INDEXES    120
#define STORE_SPARE_TXNS     4 /* reset read txns kept for reuse */
/* LMDB's largest key with default page size is 511; index keys at or past
 * this length become a prefix plus a 64-bit hash of the whole value, and
 * every candidate is re-checked against the filter anyway. */
#define STORE_KEY_MAX    511
#define STORE_KEY_PREFIX (STORE_KEY_MAX - 8)

struct store_index {
	char name[STORE_ATTR_MAX]; /* canonical */
	size_t name_len;
	enum store_rule rule;
	MDB_dbi dbi; /* eq.<name> */
};

struct store {
	MDB_env *env;
	MDB_dbi id2entry, dn2id, pres, meta;
	struct store_index idx[STORE_MAX_INDEXES];
	const char *idx_names[STORE_MAX_INDEXES];
	size_t nidx;
	uint64_t idx_mask; /* index_load: a bit per name (index.c, idx_bit) */
	char *dir;
	int lockfd;     /* write.lock; flock held during write txns */
	unsigned flags; /* store_open_flags */
	size_t map_size;
	uint64_t commits;
	/* Read transactions ended, reset, for the next reads to renew
	 * (store.c, spare_take); a slot per thread that reads at once, up to
	 * STORE_SPARE_TXNS. NULL when empty. */
	_Atomic(struct store_txn *) spare[STORE_SPARE_TXNS];
	/* LMDB's fatal state (store.c, "a failed write"): a commit whose meta
	 * page could not be written leaves env refusing every transaction
	 * (MDB_PANIC) until it is closed and opened again, which may be done
	 * only while nothing of this process uses it. users counts the
	 * transactions open and the calls on env in flight (env_enter); fatal
	 * says env is to be reopened. Both seq_cst: an entrant adds itself
	 * and then reads fatal, the reopen sets fatal and then reads users,
	 * so one of them sees the other. */
	_Atomic unsigned users;
	_Atomic bool fatal;
	_Atomic bool hold;          /* store_grow waits for the other uses to end */
	pthread_mutex_t heal_mu;    /* the reopen; health and retry_ns */
	struct store_health health; /* under heal_mu */
	uint64_t retry_ns;          /* a failed reopen: none before (monotonic) */
	uint64_t heal_wait_ns;      /* the wait after the last failed reopen */
	unsigned max_readers;       /* the open's, for a reopen */
};

/* Decoded-entry scratch: arrays reused across decodes. */
struct store_scratch {
	struct store_attr *attrs;
	size_t acap;
	struct store_val *vals;
	size_t vcap;
};

/* Pending (key, id) pairs of the bulk path, for one database: distinct
 * keys in groups (found through an open-addressing hash), pairs as
 * (group, id) in arrival order. */
struct bulk_list {
	MDB_dbi dbi;
	bool was_empty;
	struct idc_buf keys; /* distinct key bytes back to back */
	struct bulk_group *groups;
	size_t ngroups, gcap;
	uint64_t *hash; /* SLOT(group, hash) or SLOT_EMPTY (index.c) */
	size_t hcap;
	struct bulk_item *items;
	size_t n, cap;
	struct bulk_big *big; /* ids of keys holding many (index.c, BULK_BIG) */
	size_t nbig, bigcap;
	bool sorted;     /* groups were created in increasing key order (uid,
			  * uidNumber of generated or exported data): no sort */
	uint32_t *named; /* pres: group + 1 of each index's name, by index (index.c) */
};

/* store_txn.bulk_of: the bulk list of each dbi below this, by number */
#define STORE_BULK_DBIS 128

/* One index key of the entry being added: bytes akeys[off..off+len) for
 * index idx[ix]. store_add gathers them while checking the values, so each
 * value is normalized once for both. */
struct add_key {
	size_t off;
	uint32_t len;
	uint32_t ix;
	uint64_t hash; /* index_key_hash: worked out where the key is made, off the writer */
};

/* What an add works out from the entry alone, before it reads or writes
 * the database: the normalized DN, the checked values' index keys and the
 * encoded entry. store_add_prepare needs no transaction, so the import's
 * worker threads run it side by side (import.c) while one writer applies
 * the results in order; store_add runs both halves on t->ap. */
struct add_prep {
	struct store_ndn ndn;
	struct idc_buf enc;   /* the id2entry record */
	struct idc_buf akeys; /* index keys, back to back */
	struct add_key *ak;
	size_t nak, akcap;
	uint32_t ak_pres[STORE_MAX_INDEXES]; /* idx[] of indexed attributes present */
	size_t npres;
	/* dn2id keys (store_dn_key's), worked out here so that the writer
	 * only looks them up: the entry's in dkey[0..dkey_len), its parent's
	 * in dkey[pkey_off..pkey_off + pkey_len) (the start of the entry's,
	 * unless that one is hashed) */
	struct idc_buf dkey;
	size_t dkey_len, pkey_off, pkey_len;
	struct idc_buf norm, want; /* scratch of the checks */
};

/* The half of store_add that needs only s's index list (read, never
 * changed while a write transaction is open): thread-safe on distinct p.
 * Errors as store_add's that concern the entry itself. */
int store_add_prepare(const struct store *s, struct add_prep *p, const struct store_entry *e,
		      struct idc_diag *d);
/* The other half: parent and DN checks and the puts, in t's order. dn is
 * the entry's DN as given (for messages). */
int store_add_prepared(struct store_txn *t, const struct add_prep *p, struct store_val dn,
		       uint64_t *id, struct idc_diag *d);
void store_add_prep_free(struct add_prep *p);

struct store_txn {
	struct store *s;
	MDB_txn *txn;
	struct store_txn *parent;
	unsigned flags;
	bool index_changed; /* reload the index list after commit */
	bool bulk_ok;       /* index puts of adds are collected (bulk path) */
	uint64_t next_id;
	struct store_scratch sc;  /* store_get / store_get_id results */
	struct store_scratch sc2; /* internal reads that must not clobber sc */
	struct store_ndn ndn;
	struct idc_buf key, key2, norm, enc, copy;
	struct idc_arena arena; /* per-operation; reset at each op */
	struct bulk_list *bulk; /* per dbi, while bulk_ok */
	size_t nbulk;
	uint8_t bulk_of[STORE_BULK_DBIS]; /* dbi -> 1 + its place in bulk, or 0 */
	struct add_prep *ap;     /* store_add's and store_replace's checks; NULL until used */
	struct search_mem *smem; /* search.c: memory searches reuse; lent to one at a time */
	struct idc_buf pkey;     /* store_add: dn2id key of the parent found last; a
				  * delete here or a committed child clears it */
};

/* Map an LMDB code to ours (MDB_MAP_FULL -> IDC_EMAPFULL, ...). */
int store_mdb_err(int rc);

/* entry.c: the id2entry codec. Layout: u8 version, u8 0, u16 0, u32 dn_len,
 * u32 ndn_len, u32 nattrs, dn, ndn, then per attribute u16 norm_len,
 * u16 name_len, u32 nvals, u32 rank, norm, name, per value u32 len +
 * bytes. */
int store_entry_encode(const struct store_entry *e, struct store_val ndn, struct idc_buf *out);
/* Decode p[0..len) (untrusted) into out using sc's arrays; *ndn gets the
 * stored normalized DN. IDC_ECORRUPT on any inconsistency. */
int store_entry_decode(const void *p, size_t len, uint64_t id, struct store_scratch *sc,
		       struct store_entry *out, struct store_val *ndn);
void store_scratch_free(struct store_scratch *sc);
/* Only the stored normalized DN of the record p[0..len) (untrusted), not
 * its attributes. IDC_ECORRUPT when the record's head is wrong. */
int store_entry_ndn(const void *p, size_t len, struct store_val *ndn);

/* index.c */
/* eq.<attr> and pres: key -> dups that are blocks of 1 to INDEX_BLOCK_IDS
 * ids, big-endian, increasing, not overlapping (so LMDB's order of the
 * dups is their first ids'; 63 ids keep a block within LMDB's 511-byte
 * limit on dups). */
#define INDEX_BLOCK_IDS 63
#define INDEX_DB_FLAGS  MDB_DUPSORT
/* The ids of block v (untrusted) into ids[INDEX_BLOCK_IDS]: their count,
 * or 0 when v is not a block. */
size_t index_block_decode(MDB_val v, uint64_t *ids);
/* Ids under the key c stands on, whose first block is v: exact for one
 * block, else an upper bound. SIZE_MAX when LMDB fails. */
size_t index_count_estimate(MDB_cursor *c, MDB_val v);
/* Does the index hold (key, id)? */
bool index_pair_has(MDB_txn *txn, MDB_dbi dbi, struct store_val key, uint64_t id);
/* The same with c, a cursor on the index: 1 held, 0 not, or an error. */
int index_cursor_has(MDB_cursor *c, struct store_val key, uint64_t id);
/* Index key for normalized value n: NULL result (*skip) for an empty value,
 * n itself when short, prefix + hash when long. Key bytes go to out. */
int index_key(struct store_val n, struct idc_buf *out, bool *skip);
const struct store_index *index_find(const struct store *s, const char *norm, size_t len);
/* Bring the indexes from old to new (either may be NULL) for entry id. */
int index_update(struct store_txn *t, uint64_t id, const struct store_entry *old,
		 const struct store_entry *new_e);
/* Index pairs of a new entry from the keys store_add_prepare gathered in
 * p: the same pairs as index_update(t, id, NULL, e) without normalizing
 * again. */
int index_add(struct store_txn *t, const struct add_prep *p, uint64_t id);
/* Ask the CPU for the bulk table slots p's keys will probe, a few adds
 * before index_add of p runs (their misses then overlap); changes nothing. */
void index_add_prefetch(struct store_txn *t, const struct add_prep *p);
/* The bulk tables' hash of an index key (in memory only, index.c). */
uint64_t index_key_hash(const char *p, size_t n);
/* Append the index key of a normalized value that store_normalize wrote
 * at out[start..): an empty value is removed (*skip), a long one becomes
 * prefix + hash in place. The rules of index_key, without a copy. */
int index_key_inplace(struct idc_buf *out, size_t start, bool *skip);
/* Write pending bulk pairs (sorted) to the databases. */
int index_bulk_flush(struct store_txn *t);
void index_bulk_free(struct store_txn *t);
int index_load(struct store *s, MDB_txn *txn);
int index_meta_write(struct store_txn *t, const char *const *names, size_t n);

/* ops.c helpers */
/* t->key = the dn2id key of n without its first skip RDNs (long keys
 * hashed like index keys); t->key2 = the plain reversed key. */
int store_dn_key(struct store_txn *t, const struct store_ndn *n, size_t skip);
int store_get_ndn(struct store_txn *t, const struct store_ndn *n, uint64_t *id);
/* What lies below an entry in dn2id. below: the entry's reversed key and
 * a ',' (t->key2 of store_dn_key, plus ','); base: its normalized DN. The
 * records below it are in the run of keys that begin with
 * store_dn2id_seek(below), where a cursor starts (MDB_SET_RANGE); each
 * record (k, v) of the walk is STORE_BELOW_END past the run, else
 * STORE_BELOW_YES when below, STORE_BELOW_NO when not (the entry itself
 * or a sibling whose key shares the prefix a hashed key keeps: go on),
 * or a negative error. A hashed key under a prefix longer than the part
 * kept cannot tell: the entry's stored DN decides (store_ndn_below). */
enum store_below { STORE_BELOW_END, STORE_BELOW_NO, STORE_BELOW_YES };
int store_dn2id_below(MDB_txn *txn, const struct store *s, struct store_val below,
		      struct store_val base, MDB_val k, MDB_val v);
static inline MDB_val store_dn2id_seek(struct store_val below)
{
	return (MDB_val){below.len < STORE_KEY_PREFIX ? below.len : STORE_KEY_PREFIX,
			 (void *)below.ptr};
}
int store_read_entry(struct store_txn *t, uint64_t id, struct store_scratch *sc,
		     struct store_entry *out, struct store_val *ndn);
/* ldif_apply.c: d (holding what failed, or empty) becomes "name:line: op
 * 'dn': why", the message of a record that failed with rc. */
void ldif_diag_record(struct idc_diag *d, int rc, const struct ldif_record *rec, const char *name);
/* import.c: every record r yields applied to t in order, the adds
 * prepared on im->workers threads (im->records counts; progress ticks). */
int ldif_import_run(struct store_txn *t, struct ldif_reader *r, struct ldif_import *im,
		    struct idc_diag *d);

/* search.c: release what searches kept in t (t->smem). */
void store_search_mem_free(struct store_txn *t);
void store_search_mem_reset(struct store_txn *t);
