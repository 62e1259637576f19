/*
 * store: an embedded LDAP-style directory on LMDB (docs/DESIGN.md §4).
 *
 * Owns: the LMDB environment of a store directory (data.mdb, lock.mdb and a
 * write.lock), the entry encoding, DN and value normalization (schema), RFC
 * 4515 filters, indexes, searches, consistency checks and LDIF.
 * May call: util, liblmdb, libunistring (prep.c), libc.
 *
 * Conventions: functions return 0 or a negative code (see util.h); those
 * that can fail on input take a `struct idc_diag *` (may be NULL) and fill
 * it with what and where. Every operation takes an explicit transaction.
 * Entries handed out by the store point into LMDB's map or into scratch
 * memory of the transaction: valid until the next store call on the same
 * transaction or its end, whichever comes first. Copy what you keep.
 */
#ifndef IDC_STORE_H
#define IDC_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "util/util.h"

/* ==== values, attributes, entries ======================================== */

/* Bytes that are not necessarily NUL-terminated. */
struct store_val {
	const char *ptr;
	size_t len;
};

#define STORE_ATTR_MAX  128         /* longest attribute description */
#define STORE_DN_MAX    8192        /* longest DN, in bytes */
#define STORE_ENTRY_MAX (64u << 20) /* largest encoded entry */

struct store_attr {
	struct store_val name;  /* as given by whoever added it */
	struct store_val norm;  /* canonical: lowercase, aliases resolved */
	struct store_val *vals; /* values as given, in the order given */
	size_t nvals;
	uint32_t rank; /* position among the entry's attributes as first given:
			* LDIF output keeps the order an entry came in */
};

/* An entry. attrs are sorted by norm (memcmp order), one per attribute. */
struct store_entry {
	uint64_t id;         /* 0 until stored */
	struct store_val dn; /* as given */
	struct store_attr *attrs;
	size_t nattrs;
};

/* An (attribute, value) pair as it comes from LDIF or a command line. */
struct store_pair {
	struct store_val name;
	struct store_val value;
};

/* Build an entry from pairs, grouping values of one attribute (names
 * compared canonically) in their order, attrs sorted. All memory comes from
 * arena; pairs' bytes are referenced, not copied. Invalid attribute names
 * give IDC_ESYNTAX. */
int store_entry_from_pairs(struct idc_arena *arena, struct store_val dn,
			   const struct store_pair *pairs, size_t npairs, struct store_entry *out,
			   struct idc_diag *d);
/* The same, with canon[i] (may be NULL) the interned canonical name of
 * pairs[i] or {NULL, 0} (struct ldif_record's canon). */
int store_entry_from_pairs_canon(struct idc_arena *arena, struct store_val dn,
				 const struct store_pair *pairs, const struct store_val *canon,
				 size_t npairs, struct store_entry *out, struct idc_diag *d);

/* The attribute with canonical name norm, or NULL. Binary search. */
const struct store_attr *store_entry_attr(const struct store_entry *e, const char *norm,
					  size_t len);

/* ==== schema: matching rules and normalization ============================== */

enum store_rule {
	STORE_RULE_CASE_IGNORE = 0, /* caseIgnoreMatch 2.5.13.2 */
	STORE_RULE_CASE_EXACT,      /* caseExactMatch 2.5.13.5 */
	STORE_RULE_INTEGER,         /* integerMatch 2.5.13.14 */
	STORE_RULE_DN,              /* distinguishedNameMatch 2.5.13.1 */
	STORE_RULE_OCTET,           /* octetStringMatch 2.5.13.17 */
};

/* Canonical form of an attribute description: ASCII lowercase, known
 * aliases mapped (commonName->cn, userid->uid, surname->sn ...), options
 * (";binary") kept lowercased. Writes at most STORE_ATTR_MAX bytes to out and
 * returns the length, or 0 when name is not a valid description
 * (descr = ALPHA *(ALPHA/DIGIT/"-"), or a numeric OID; options likewise). */
size_t store_attr_canon(const char *name, size_t len, char out[STORE_ATTR_MAX]);
/* The same, *canon pointing at the canonical name: a copy kept for the
 * life of the process (never changed once written) for the names asked
 * about first, else buf, which the caller copies if it keeps it. */
size_t store_attr_canon_ref(const char *name, size_t len, char buf[STORE_ATTR_MAX],
			    const char **canon);

/* Matching rule of a canonical attribute name; unknown ones: caseIgnore. */
enum store_rule store_attr_rule(const char *norm, size_t len);

/* Rule by name ("caseExactMatch", case-insensitive) or OID ("2.5.13.5").
 * 0 or -ENOENT. */
int store_rule_by_name(const char *name, size_t len, enum store_rule *out);

/* Append the normalized form of value v under rule r to out:
 *  caseIgnore: RFC 4518 string preparation (prep.c): controls and joiners
 *              dropped, separators made spaces, Unicode case folding and
 *              NFKC, leading/trailing spaces dropped, inner runs of spaces
 *              one. Text that is not UTF-8 or holds a prohibited code point
 *              keeps its bytes, ASCII lowercased, with the same spaces;
 *  caseExact:  the same without case folding;
 *  integer:    8 bytes, big-endian two's complement with the sign bit
 *              flipped, so memcmp orders numerically. Syntax: optional '-',
 *              digits, no leading zeros, fits int64, else IDC_ESYNTAX;
 *  DN:         the normalized DN text (store_dn_normalize);
 *  octet:      the bytes as they are.
 * Returns 0, IDC_ESYNTAX (with d saying why) or -ENOMEM. */
int store_normalize(enum store_rule r, const char *v, size_t len, struct idc_buf *out,
		    struct idc_diag *d);

/* store_normalize of caseIgnore (fold) or caseExact text into caller
 * memory: out[0..cap) gets the normalized form, NUL-terminated, and
 * *outlen its length. 0, -E2BIG when it does not fit, or -ENOMEM. Printable
 * ASCII text is done without allocating. */
int store_normalize_text(bool fold, const char *v, size_t len, char *out, size_t cap,
			 size_t *outlen);

/* Whether a and b are one text when case is ignored one code point at a
 * time (Unicode's lowercase mapping), after NFKC and with insignificant
 * spaces squeezed, as OpenLDAP's caseIgnoreMatch compares: narrower than
 * caseIgnore, which folds case fully (ß is "ss") and maps joiners and ZERO
 * WIDTH SPACE to nothing. For names two such texts may be two users of a
 * directory. Memory running out answers false. */
bool store_text_same_lower(const char *a, size_t alen, const char *b, size_t blen);
/* The form store_text_same_lower compares, appended to out: two texts are
 * one under it exactly when their forms are equal. 0 or -ENOMEM. */
int store_text_lower(const char *v, size_t len, struct idc_buf *out);

/* ==== DN (RFC 4514) ============================================================ */

#define STORE_DN_MAX_RDNS 64

/* A DN in normalized form: text "rdn0,rdn1,...": child first, attribute
 * types canonical, values normalized by their attribute's rule and then
 * escaped the one canonical way (store_dn_normalize documents it), the AVAs
 * of a multi-valued RDN sorted and joined by '+'. off[i] is where RDN i
 * starts in text; off[nrdn] == text.len. The root (empty DN) has nrdn == 0.
 * Owns text. */
#define STORE_NDN_RDN0_AVAS 4

struct store_ndn {
	struct idc_buf text;
	size_t nrdn;
	size_t off[STORE_DN_MAX_RDNS + 1];
	/* The AVAs of RDN 0 as store_dn_normalize found them in the DN it was
	 * given: type as written and value, as offsets into that DN, for the
	 * naming check of an add. nava0 == 0 when a value there had escapes
	 * or was hex (undone elsewhere), or there were more AVAs than fit. */
	size_t nava0;
	struct store_ndn_ava {
		uint32_t type_off, type_len, val_off, val_len;
	} ava0[STORE_NDN_RDN0_AVAS];
};

#define STORE_NDN_INIT                                                                             \
	{                                                                                          \
		IDC_BUF_INIT, 0,                                                                   \
		{                                                                                  \
			0                                                                          \
		}                                                                                  \
	}

/* Parse dn and fill out (reusing its memory). Errors: IDC_ESYNTAX with the
 * byte offset in d ("DN 'x': position 7: ..."), -E2BIG past STORE_DN_MAX
 * (for the DN and for its normalized text, which escaping can make longer),
 * STORE_DN_MAX_RDNS RDNs, or as many AVAs in one RDN. The same AVA twice in
 * one RDN, and unescaped '"', '<', '>' or NUL in a value, are IDC_ESYNTAX. Canonical escaping in
 * values: '\' before , + " \ < > ; = and before a leading '#' or space or a trailing space; bytes <
 * 0x20, 0x7f and NUL as \XX (lowercase hex); all else literal. */
int store_dn_normalize(const char *dn, size_t len, struct store_ndn *out, struct idc_diag *d);
void store_ndn_free(struct store_ndn *n);

/* Write the RDN-reversed key of n without its first `skip` RDNs into out
 * (replacing its content): "dc=com,dc=example,ou=people,uid=a". skip = 1
 * gives the parent's key; skip >= nrdn gives "" (the root). */
int store_ndn_rkey(const struct store_ndn *n, size_t skip, struct idc_buf *out);

/* How far normalized DN e lies below b (texts as store_dn_normalize
 * writes them; b empty: the root): 1 a child, 2 deeper, 0 not below (b
 * itself, a sibling, or elsewhere). The one rule of what is under a DN;
 * dn2id keys are asked through it where they cannot tell (store_int.h,
 * store_dn2id_below). */
int store_ndn_below(struct store_val e, struct store_val b);

/* One attribute value assertion of a DN, as parsed: type as written (not
 * canonical) and value with escapes undone (raw bytes, may contain NUL).
 * rdn is the RDN's index, 0 = the leftmost (the entry's own RDN). */
typedef int (*store_ava_cb)(struct store_val type, struct store_val value, size_t rdn, void *arg);

/* Call cb for each AVA of dn, left to right. Stops at the first non-zero
 * return of cb and returns it. IDC_ESYNTAX on a malformed DN. */
int store_dn_foreach_ava(const char *dn, size_t len, store_ava_cb cb, void *arg,
			 struct idc_diag *d);

/* ==== filters (RFC 4515) ===================================================== */

struct store_filter; /* opaque; see store_int.h for the tree */

/* Parse text (len bytes, no NUL needed) into a new filter tree owned by the
 * caller. A filter without outer parentheses ("uid=alice") is accepted, as
 * ldapsearch does. Errors: IDC_ESYNTAX with "position N: <why>" in d (N is
 * the 0-based byte offset), -E2BIG when nesting passes 256 or the text 1 MiB,
 * -ENOMEM. */
int store_filter_parse(const char *text, size_t len, struct store_filter **out, struct idc_diag *d);
void store_filter_free(struct store_filter *f);

/* The filter in RFC 4515 string form (normalized spacing, values escaped). */
int store_filter_format(const struct store_filter *f, struct idc_buf *out);

/* Evaluate f on e: 1 true, 0 false or undefined. scratch is reused for
 * value normalization (the caller owns it; any content is overwritten). */
int store_filter_match(const struct store_filter *f, const struct store_entry *e,
		       struct idc_buf *scratch);

/* ==== the store ================================================================ */

struct store;
struct store_txn;

enum store_open_flags {
	STORE_RDONLY = 1 << 0,   /* open an existing store for reading only */
	STORE_CREATE = 1 << 1,   /* create the store when the directory has none */
	STORE_NOSYNC = 1 << 2,   /* no fsync at commit (disposable data, benchmarks) */
	STORE_PRIVATE = 1 << 3,  /* files it creates are 0600, not 0644 */
	STORE_WRITEMAP = 1 << 4, /* write transactions write the map in place
				  * (MDB_WRITEMAP): no copy of each dirty page
				  * in memory and no write() of it at commit;
				  * for one large transaction (import). The
				  * data file grows to the map size (sparse) */
};

struct store_options {
	unsigned flags;             /* enum store_open_flags */
	size_t map_size;            /* initial map size in bytes; 0: 1 GiB or the file's */
	const char *const *indexes; /* with STORE_CREATE on a new store: attributes to index */
	size_t nindexes;
	unsigned max_readers; /* 0: 126 */
};

/* Open (or create) the store in directory dir. Errors: -ENOENT (no such
 * directory), IDC_ENOTSTORE (directory has no store and no STORE_CREATE),
 * IDC_EVERSION, -EACCES/-EROFS, all with d naming the path. */
int store_open(const char *dir, const struct store_options *opt, struct store **out,
	       struct idc_diag *d);
void store_close(struct store *s);

enum store_txn_flags {
	STORE_TXN_RDONLY = 1 << 0,
	STORE_TXN_BULK = 1 << 1, /* a hint that a large batch of adds follows;
				  * every write txn already collects index keys
				  * of adds and writes them sorted (docs/DESIGN.md §4
				  * bulk path), flushing before any index read */
	/* Commit with one flush instead of two (MDB_NOMETASYNC): the data
	 * pages are flushed, the meta page only written, so an OS crash may
	 * undo this transaction (never damage the store; LMDB keeps ACI).
	 * For data its source sends again (docs/DESIGN.md §6.1). */
	STORE_TXN_NOMETASYNC = 1 << 2,
};

/* Begin a transaction; parent (or NULL) makes it nested (write txns only).
 * A write txn takes the store's write lock without waiting: -EBUSY (d says
 * which pid holds it) when another process writes. */
int store_txn_begin(struct store *s, struct store_txn *parent, unsigned flags,
		    struct store_txn **out, struct idc_diag *d);
/* Commit; the txn is freed whatever the result. IDC_EMAPFULL: nothing was
 * written; call store_grow and run the whole transaction again. */
int store_txn_commit(struct store_txn *t, struct idc_diag *d);
/* An aborted read transaction is kept reset, up to STORE_SPARE_TXNS (4) per store, and renewed by
 * the next read's begin (any thread): the same as a fresh one, without
 * its allocations. */
void store_txn_abort(struct store_txn *t);

/* An LMDB return code as ours (MDB_MAP_FULL: IDC_EMAPFULL, MDB_CORRUPTED:
 * IDC_ECORRUPT, errno values negated), and LMDB's EIO for a short write as
 * -ENOSPC when the filesystem holding path (may be NULL) has under 1 MiB
 * left. For code that drives LMDB itself (the timestamps db). */
int store_lmdb_err(const char *path, int mdb_rc);

/* LMDB sizes its lock file with ftruncate (a hole) and writes it through a
 * shared map: on a full filesystem the first touch of a page without a
 * block is SIGBUS, at open or later when a reader takes a slot on a page
 * not touched before. Called before mdb_env_open: creates the lock file
 * (mode) and reserves blocks for its whole reader table (max_readers
 * slots), so a full disk is -ENOSPC (or -EDQUOT) instead; a lock file
 * that is a directory is -EISDIR, another kind of file -EINVAL. Anything
 * else (a read-only filesystem, no fallocate) is left to LMDB: 0. */
int store_lmdb_lock_reserve(const char *lock, unsigned max_readers, mode_t mode);

/* Double the map. LMDB remaps under the read transactions of other
 * threads, whose entries point into the map: new transactions wait (or,
 * in a thread holding one, fail with -EAGAIN) while the grow waits up to
 * 2 s for those open to end; -EBUSY when they do not, or when this
 * thread holds one. */
int store_grow(struct store *s);
/* Unmap from this process the map's pages it has read (MADV_DONTNEED;
 * found in /proc/self/maps by the data file's device and inode): they
 * stay in the kernel's page cache, and the next read of one maps it again
 * (a minor fault). A whole-map walk otherwise leaves every page of the
 * file counted in the process's resident set. Nothing for a map written
 * in place (STORE_WRITEMAP). The caller keeps store_grow from remapping
 * meanwhile. 0 or -errno. */
int store_map_release(struct store *s);
/* The map's size in bytes now. */
size_t store_map_size(const struct store *s);

/* Run fn in a write transaction, committing when it returns 0 and aborting
 * otherwise; on IDC_EMAPFULL (from fn or commit) grow the map and run fn
 * again, up to 16 times. fn must be safe to re-run. */
typedef int (*store_txn_fn)(struct store_txn *t, void *arg, struct idc_diag *d);
int store_write(struct store *s, unsigned flags, store_txn_fn fn, void *arg, struct idc_diag *d);

/* Number of durable commits this handle made (tests prove that a no-op
 * refresh writes nothing by watching it). */
uint64_t store_commit_count(const struct store *s);

/* A failed write (docs/DESIGN.md §10): a commit that fails at LMDB's meta
 * page (EIO from its pwrite or msync) leaves the environment refusing
 * every transaction (MDB_PANIC). The transaction is lost; the file still
 * holds the last commit. The store then closes and reopens the
 * environment by itself, at the first store_txn_begin (any thread) that
 * finds no transaction of this process open, and commits once to make
 * both meta pages whole again. Until then, and while reopening fails
 * (retried after 1 s, doubling to 60 s), every begin fails with -EIO and
 * d says why. Logged here, once per failure and once when reopened. */
struct store_health {
	uint64_t failures; /* times the environment was found unusable */
	uint64_t reopens;  /* times it was reopened */
	bool down;         /* unusable now: transactions fail */
	int64_t failed_at; /* unix seconds of the last failure; 0: none */
	char why[256];     /* what failed last */
};
void store_health(struct store *s, struct store_health *out);

/* ---- operations ---------------------------------------------------------------- */

/* Add e (e->id ignored). Errors: -EEXIST (DN present), IDC_ENOPARENT (the
 * parent is missing while some ancestor exists; an entry none of whose
 * ancestors exist starts a new naming context), IDC_ENAMING, IDC_ESYNTAX
 * (value of wrong syntax for its attribute's rule), -E2BIG (over
 * STORE_ENTRY_MAX). On success *id (if not NULL) is the new id. */
int store_add(struct store_txn *t, const struct store_entry *e, uint64_t *id, struct idc_diag *d);

enum store_mod_op { STORE_MOD_ADD, STORE_MOD_DELETE, STORE_MOD_REPLACE };
struct store_mod {
	enum store_mod_op op;
	struct store_val attr;
	const struct store_val *vals; /* DELETE with none: the whole attribute */
	size_t nvals;
};

/* Apply mods to the entry at dn, all or none (RFC 4511 semantics): ADD of a
 * present value IDC_EVALEXISTS; DELETE of an absent value or attribute
 * IDC_ENOATTR; REPLACE with no values removes the attribute. Changing the
 * values that name the entry is IDC_ENAMING. -ENOENT when dn is absent.
 * *changed (if not NULL) says whether anything differs afterwards. */
int store_modify(struct store_txn *t, struct store_val dn, const struct store_mod *mods,
		 size_t nmods, bool *changed, struct idc_diag *d);

/* Replace the whole entry at e->dn by e (same DN): indexes updated by
 * difference, nothing written when equal. *changed as above. */
int store_replace(struct store_txn *t, const struct store_entry *e, bool *changed,
		  struct idc_diag *d);

/* Delete the entry at dn. IDC_ENOTLEAF when it has children, unless
 * subtree, which deletes them all. -ENOENT when absent. */
int store_delete(struct store_txn *t, struct store_val dn, bool subtree, struct idc_diag *d);

/* Rename a leaf: new RDN newrdn, under newsuperior (NULL: same parent).
 * deleteoldrdn removes the old RDN values from the entry. IDC_ENOTLEAF for
 * an entry with children, -EEXIST when the new DN is taken. */
int store_modrdn(struct store_txn *t, struct store_val dn, struct store_val newrdn,
		 bool deleteoldrdn, const struct store_val *newsuperior, struct idc_diag *d);

/* The entry at dn (lifetime: see top of file). -ENOENT when absent. */
int store_get(struct store_txn *t, struct store_val dn, struct store_entry *out,
	      struct idc_diag *d);
/* The entry with id. -ENOENT when absent. */
int store_get_id(struct store_txn *t, uint64_t id, struct store_entry *out);

/* ---- search ---------------------------------------------------------------- */

enum store_scope { STORE_SCOPE_BASE, STORE_SCOPE_ONE, STORE_SCOPE_SUB };

struct store_search {
	struct store_val base; /* "" (len 0): the root, above every naming context */
	enum store_scope scope;
	const struct store_filter *filter; /* NULL: every entry */
	size_t sizelimit;                  /* 0: none */
};

/* Called for each matching entry; e is valid during the call only. A
 * non-zero return stops the search and is returned by store_search. */
typedef int (*store_entry_cb)(const struct store_entry *e, void *arg);

/* Search. Returns 0, -ENOENT when base does not exist, IDC_ESIZELIMIT after
 * sizelimit entries were passed to cb while more matched, or cb's value. */
int store_search(struct store_txn *t, const struct store_search *q, store_entry_cb cb, void *arg,
		 struct idc_diag *d);

/* A search of base's children (STORE_SCOPE_ONE) or descendants
 * (STORE_SCOPE_SUB; the base itself is not visited) that can stop and go
 * on in a later transaction: entries come in the order of their DN keys
 * (dn2id), from the one after *at (empty: from the first), and *at is
 * left holding the key of the last one read. cb returns 0 to go on, > 0
 * to stop after this entry, < 0 to fail. Returns 0 when the subtree is
 * done, 1 when cb stopped it (call again with *at), -ENOENT when base does
 * not exist, -EINVAL for the root, scope BASE or a sizelimit, else an
 * error or cb's value. Across transactions each entry is as the one that
 * read it saw it: one added meanwhile at a key already passed, or removed
 * after it was read, is not seen again; no key is visited twice. */
int store_search_from(struct store_txn *t, const struct store_search *q, struct idc_buf *at,
		      store_entry_cb cb, void *arg, struct idc_diag *d);

/* How a search would run, for tests and `db search --explain`: "scan",
 * "index eq.uid", "and(index eq.uid,index eq.objectclass)" ... and the
 * candidate estimate. */
int store_search_plan(struct store_txn *t, const struct store_search *q, struct idc_buf *out);

/* ---- indexes ------------------------------------------------------------------ */

/* Canonical names of indexed attributes, in order; valid until the next
 * index change or store_close. */
size_t store_index_list(struct store *s, const char *const **names);
/* Add an index and build it from every entry, in the caller's write txn.
 * -EEXIST when present. The index serves searches once committed. */
int store_index_add(struct store_txn *t, const char *attr, struct idc_diag *d);
/* Drop an index. -ENOENT when absent. */
int store_index_remove(struct store_txn *t, const char *attr, struct idc_diag *d);

/* ---- checking and statistics ------------------------------------------------------ */

/* Verify every invariant: each index key points at a live entry holding that
 * value; each indexed value of each entry is in its index; dn2id and
 * id2entry agree; each parent exists (or the entry starts a naming context);
 * meta is sane. cb gets one line per fault (may be NULL); returns the number
 * of faults (>= 0) or a negative error when the check could not run. */
typedef void (*store_fault_cb)(const char *fault, void *arg);
long store_check(struct store_txn *t, store_fault_cb cb, void *arg);

struct store_stats {
	uint64_t entries;
	uint64_t next_id;
	size_t map_size;   /* bytes */
	size_t used_bytes; /* pages in use × page size */
	size_t file_bytes; /* data.mdb on disk */
	unsigned format_version;
	size_t nindexes;
};
int store_stats(struct store_txn *t, struct store_stats *out);

/* ==== damage: deciding before trusting (verify.c) =================================== *
 * LMDB trusts its files: a damaged page faults whoever reads it. These read
 * an LMDB data file's meta pages with pread (bounded, never through a map),
 * and read everything else in a child process, so a fault ends the child. */

/* What an LMDB data file's newer meta page says. */
struct store_lmdb_meta {
	uint32_t psize;     /* page size */
	uint64_t mapsize;   /* map size the last writer used */
	uint64_t last_pg;   /* highest page number in use */
	uint64_t txnid;     /* newest committed transaction */
	uint64_t root[2];   /* root pages of the free list and the main db;
			     * UINT64_MAX: empty */
	uint64_t file_size; /* store_lmdb_fd_check: bytes on disk */
	bool covered;       /* store_lmdb_fd_check: the file reaches last_pg */
};

/* Parse the first len bytes of a data file (both meta pages: magic,
 * version, page size, map size, last page, roots and depths of both
 * databases; both must be sound, the newer one is returned). 0, or
 * IDC_ECORRUPT with d saying why. Reads nothing outside buf. */
int store_lmdb_meta_parse(const void *buf, size_t len, struct store_lmdb_meta *out,
			  struct idc_diag *d);

/* The same on the file open at fd (pread), and the file must hold both meta
 * pages and the pages the roots name; out->covered says whether it also
 * reaches last_pg (a sound file need not). 0, IDC_ECORRUPT (d: why), -errno. */
int store_lmdb_fd_check(int fd, struct store_lmdb_meta *out, struct idc_diag *d);
/* By path; d names it. -ENOENT when it does not exist. */
int store_lmdb_file_check(const char *path, struct store_lmdb_meta *out, struct idc_diag *d);

enum store_verify_level {
	STORE_VERIFY_META,  /* the meta pages against the file (microseconds); a
			     * file that ends before its last page gets PAGES */
	STORE_VERIFY_PAGES, /* and, in a child process, every record of every
			     * database read, the free list bounded, every entry
			     * decoded (seconds per GiB) */
	STORE_VERIFY_FULL,  /* and store_check in that child (minutes per GiB) */
};

/* Verify the store in dir without opening it in this process. Returns the
 * number of faults found (each passed to cb, which may be NULL; PAGES and
 * FULL only), IDC_ECORRUPT when the store cannot be used at all (d says
 * why: a bad meta page, a truncated file, the child killed by a signal),
 * IDC_ENOTSTORE when dir has no data.mdb, or -errno. */
long store_verify(const char *dir, enum store_verify_level level, store_fault_cb cb, void *arg,
		  struct idc_diag *d);

/* The clean-shutdown marker of an LMDB data file: "<file>.clean" (0600),
 * naming the file's device, inode, size, mtime and newest transaction.
 * store_clean_mark, after the last writer closed it, syncs the file, writes
 * the marker durably, and returns 0 or -errno. store_clean_take removes the
 * marker (durably, before anything writes the file again) and returns 1
 * when it described the file as it is now, 0 when there was none (or no
 * file), -ESTALE when the file changed since (or cannot be read). */
int store_clean_mark(const char *file);
int store_clean_take(const char *file);

/* ==== LDIF (RFC 2849) ============================================================== */

enum ldif_change { LDIF_ADD, LDIF_DELETE, LDIF_MODIFY, LDIF_MODRDN };

/* One LDIF record. For ADD: pairs (the entry, an attrval-record or a
 * changetype: add). For MODIFY: mods, each mod's vals are in pairs-like
 * storage owned by the parser. For MODRDN: newrdn, deleteoldrdn,
 * newsuperior (has_newsuperior). Everything points into parser memory valid
 * until the next ldif_next call or ldif_close. */
struct ldif_record {
	enum ldif_change change;
	unsigned long line; /* line where the record starts */
	struct store_val dn;
	struct store_pair *pairs;
	size_t npairs;
	/* per pair (with pairs): its name's canonical form as the reader found
	 * it, when interned (store_attr_canon_ref; it stays put), else
	 * {NULL, 0}: the entry builder need not look the name up again */
	struct store_val *canon;
	struct store_mod *mods;
	size_t nmods;
	struct store_val newrdn;
	bool deleteoldrdn;
	bool has_newsuperior;
	struct store_val newsuperior;
};

struct ldif_reader;

/* Read LDIF from f (not closed by the reader); name is used in messages
 * ("people.ldif:42: ..."). */
int ldif_open(FILE *f, const char *name, struct ldif_reader **out);
/* Next record: 1 with *rec filled, 0 at the end, IDC_ESYNTAX (d names
 * name:line and why), -E2BIG (line or record over 64 MiB), -EIO.
 * Rejected with a clear message: URL values (':<'), bad base64, control:
 * lines, unknown changetype, a version other than 1. */
int ldif_next(struct ldif_reader *r, struct ldif_record *rec, struct idc_diag *d);
/* Bytes consumed so far (for progress). */
uint64_t ldif_offset(const struct ldif_reader *r);
/* The reader's bytes of the record ldif_next returned last: every string
 * of it lies in [*p, *p + *n], its NUL included (*p + *n is readable). */
void ldif_record_span(const struct ldif_reader *r, const char **p, size_t *n);
void ldif_close(struct ldif_reader *r);

/* ---- applying LDIF (ldif_apply.c) ---- */

/* Make rec, which r's ldif_next returned last, copies in a (so rec
 * outlives the reader's next call): one copy of its span
 * (ldif_record_span), its strings pointing into it. 0 or -ENOMEM. */
int ldif_record_copy(struct idc_arena *a, const struct ldif_reader *r, struct ldif_record *rec);

/* Prefix d with what failed: "op 'dn': " before a message that does not
 * name dn, "op: " before one that does (op may be NULL: no op word); an
 * empty message first becomes idc_strerror(rc). */
void store_diag_about(struct idc_diag *d, int rc, const char *op, struct store_val dn);

/* Apply one record to t: add, delete, modify or modrdn. scratch holds the
 * entry an add builds (reset here; the caller frees it). On failure d reads
 * "name:line: add 'dn': why" and the code is returned unchanged, so
 * store_write still sees IDC_EMAPFULL and can grow the map. */
int ldif_apply(struct store_txn *t, const struct ldif_record *rec, const char *name,
	       struct idc_arena *scratch, struct idc_diag *d);

/* Progress of ldif_apply_all: tick (may be NULL) after each record with the
 * records applied so far and the reader's byte offset. */
struct ldif_progress {
	void (*tick)(void *arg, uint64_t records, uint64_t offset);
	void *arg;
	void (*note)(void *arg, const char *what); /* a phase begins; may be NULL */
};

/* Apply every record r yields, in order, in t: the import loop of `idcache
 * db import`. *records: records applied. 0, or the first error (d as
 * ldif_apply, or as ldif_next for bad input). p may be NULL. */
int ldif_apply_all(struct store_txn *t, struct ldif_reader *r, const char *name,
		   const struct ldif_progress *p, uint64_t *records, struct idc_diag *d);

/* An LDIF stream to import in one transaction: for store_write with
 * ldif_import_fn, which rewinds f and applies every record (re-runnable:
 * store_write runs it again after growing a full map) through the import
 * pipeline: a reader thread, worker threads preparing adds, and the
 * calling thread writing them in file order. Results and messages are
 * those of ldif_apply_all on the same input. f stays open.
 * records: out, the records applied. */
struct ldif_import {
	FILE *f;
	const char *name;                     /* in messages */
	const struct ldif_progress *progress; /* may be NULL */
	uint64_t records;
	unsigned workers; /* threads preparing adds beside the reader and the
			   * writer (docs/DESIGN.md §4.1); 0: one per online
			   * CPU */
};
int ldif_import_fn(struct store_txn *t, void *arg, struct idc_diag *d);

/* The map size to open a store with (and STORE_WRITEMAP) for importing
 * ldif_bytes of LDIF in one transaction: about four times the LDIF, at
 * least 1 GiB, so that the import does not fill the map and run again. */
size_t store_import_map_size(uint64_t ldif_bytes);

/* Append e as an LDIF record ("dn: ...\n" then "name: value\n" per value,
 * then a blank line) to out. Values that RFC 2849 says are not SAFE-STRINGs
 * (leading space, ':' or '<', trailing space, NUL, CR, LF, bytes >= 0x80)
 * go base64 with "::". Lines longer than 76 columns are folded as
 * ldapsearch does. attrs/nattrs (canonical names) select attributes: NULL
 * means all; "*" all user attributes; "1.1" none. */
int ldif_write_entry(struct idc_buf *out, const struct store_entry *e, const char *const *attrs,
		     size_t nattrs);

#endif
