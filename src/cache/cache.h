/*
 * cache: the identity model (users, groups, memberships, initgroups) kept
 * in the store, plus a disposable timestamps database (docs/DESIGN.md §5).
 *
 * Owns: state_dir/cache.mdb/ (a store; durable) and state_dir/timestamps.mdb
 * (LMDB, MDB_NOSYNC, deleted and rebuilt when damaged).
 * May call: store, util, liblmdb (the timestamps db only), libc.
 *
 * Layout in the store: cn=idcache, then per domain cn=<domain>,cn=idcache
 * with cn=users and cn=groups below it; users are
 * name=<name>,cn=users,cn=<domain>,cn=idcache and groups likewise. Group
 * members are user names (memberUid, which may name users the cache does
 * not hold: "ghosts") and DNs of member groups (member), which nest.
 * A user's SSH public keys, when its provider has any, are a record of
 * their own under cn=sshkeys beside cn=users (see "SSH public keys").
 *
 * Names are compared as the store's caseIgnore rule does for the DN, and
 * lookups in a case-sensitive domain then require the exact name; in one
 * that ignores case, a name other than the entry's must equal it under
 * store_text_same_lower (case ignored code point by code point: ß is not
 * "ss"), as a directory compares. Two
 * names differing only in case share one named entry in a domain: storing
 * the second replaces the first.
 *
 * Extra records: a provider whose source may repeat a name (files: glibc
 * reads every line) stores the first record of each folded name as the
 * named entry and every later one with extra set. An extra record lives
 * at entryOrder=<order>,cn=users|groups,... (its order is its key: unique
 * in the domain); lookups by id and enumeration see it like any other, in
 * order; a lookup by name in a case-sensitive domain answers the lowest
 * order record with exactly the name asked, so "Alice" after "alice" is
 * found, and a second "alice" never is (glibc answers the first).
 *
 * Threads: one write transaction at a time, from any thread (the daemon's
 * loop, or the LDAP provider's committer): cache_txn_begin waits while
 * another thread's transaction is open, and so does cache_grow. Read
 * functions may run in any thread with their own read transaction; the
 * writer closes or remaps timestamps.mdb only with no reader on it
 * (ts_drain), and the store reopens cache.mdb after a failed write only
 * with no transaction open (store_health).
 */
#ifndef IDC_CACHE_H
#define IDC_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "util/util.h"

#define CACHE_NAME_MAX   IDC_NAME_MAX /* longest user or group name accepted */
#define CACHE_DOMAIN_MAX 64u          /* longest domain name */

struct cache;
struct cache_txn;

struct cache_options {
	bool nosync;     /* cache.mdb without fsync (tests, benchmarks) */
	size_t map_size; /* 0: the store's default */
};

/* Open or create the cache in state_dir (which must exist). The timestamps
 * db is recreated if it cannot be opened. */
int cache_open(const char *state_dir, const struct cache_options *o, struct cache **out,
	       struct idc_diag *d);
void cache_close(struct cache *c);

/* Durable commits made to cache.mdb through this handle. */
uint64_t cache_durable_commits(const struct cache *c);

/* A commit of cache.mdb that failed at LMDB's meta page leaves its
 * environment refusing every transaction; the store reopens it at its
 * last commit by itself (store_health, docs/DESIGN.md §10): the failed
 * transaction, its timestamps with it, is lost, and its provider sends
 * what it held again (a failed store is retried as any other). Meanwhile
 * readers and writers fail with -EIO. What happened, for `idcache
 * status`. */
struct cache_health {
	uint64_t failures; /* times cache.mdb's environment became unusable */
	uint64_t reopens;  /* times it was reopened */
	bool down;         /* unusable now: lookups of the cache fail */
	int64_t failed_at; /* unix seconds of the last failure; 0: none */
	char why[256];     /* what failed last */
};
void cache_health(struct cache *c, struct cache_health *out);

/* ---- records ------------------------------------------------------------------ */

/* A user as a provider hands it over and as lookups return it. Strings are
 * NUL-terminated; in results they point into memory valid until the next
 * call on the same read handle (see cache_reader). */
struct cache_user {
	const char *name;
	uint32_t uid;
	uint32_t gid;
	const char *gecos;
	const char *dir;
	const char *shell;
	uint64_t order; /* provider's order (files: line number); lookups
			 * by uid return the lowest order on ties */
	/* LDAP: the entry's DN; NULL otherwise. The directory's
	 * modifyTimestamp is not kept: a refresh that finds only it changed
	 * writes the timestamps db alone. */
	const char *orig_dn;
	const char *passwd; /* the password field when cache_passwd_public()
			     * allows it, else NULL (served as "x") */
	bool extra;         /* a later record for a name an earlier record
			     * of the domain holds (see "Extra records") */
	/* LDAP: the subordinate uid and gid ranges the entry names (the
	 * domain's ldap_user_subuid_* / ldap_user_subgid_* attributes);
	 * count 0 when none. Checked by the provider (subid_range_ok); an
	 * entry naming one that is no range has count 0 and start
	 * CACHE_SUBID_UNUSABLE: it gets none, not even the allocation's. */
	struct cache_subid_range {
		uint32_t start, count;
	} subuid, subgid;
};

#define CACHE_SUBID_UNUSABLE UINT32_MAX

struct cache_group {
	const char *name;
	uint32_t gid;
	uint64_t order;
	const char *const *members; /* user names, in the provider's order; a set:
				     * a name given twice is stored once
				     * (glibc's files module would repeat it) */
	size_t nmembers;
	const char *const *member_groups; /* names of nested member groups (same domain) */
	size_t nmember_groups;
	const char *orig_dn;
	const char *passwd; /* as cache_user.passwd */
	bool extra;         /* as cache_user.extra */
};

/* One committed change to a user or group, as a provider's change hook
 * reports it to the daemon (files_domain_set_hook, lprov_domain_set_hook;
 * each says when it reports): added (old_name NULL), removed (new_name
 * NULL), or changed in place (both set). Strings and member lists are
 * valid during the call only. */
struct cache_change {
	bool group;                 /* else a user */
	const char *old_name;       /* NULL: added */
	const char *new_name;       /* NULL: removed */
	uint32_t old_id, new_id;    /* uid or gid; valid with the name */
	const char *const *old_mem; /* groups: member user names before */
	size_t nold_mem;
	const char *const *new_mem; /* groups: member user names after */
	size_t nnew_mem;
	/* files: both present, and the record's order changed (it moved
	 * against its neighbours) */
	bool moved;
	/* ldap groups: the users of member groups (nested, rfc2307bis) gained
	 * or lost this group: the set of member groups changed, or the group
	 * came, went or got a new gid while it had member groups */
	bool nested_changed;
};

typedef void (*cache_change_fn)(const struct cache_change *ch, void *arg);

/* Whether a password field says nothing secret and may be stored and
 * served as it is: empty, or made only of '!' and '*' (glibc passes "*",
 * "!" and "" through, and an empty field means something to pam_unix).
 * Anything else (a hash, "x") is served as "x". */
bool cache_passwd_public(const char *p);

/* Whether a name may be stored: 1..CACHE_NAME_MAX bytes, no '/', ':', ',',
 * no control characters or NUL, not starting with '-', '+' or space, not
 * "." or "..". Used by providers, the daemon and the NSS module's peer. */
bool cache_name_valid(const char *name, size_t len);

/* Whether a domain may be named so (its name is an RDN value of every DN the
 * domain holds): 1..CACHE_DOMAIN_MAX letters, digits, '-', '_' or '.'. The
 * one check, for the configuration and the cache alike. */
bool cache_domain_name_valid(const char *name, size_t len);

/* ---- comparing names ------------------------------------------------------------------
 * The one place that says when two spellings are the same name. Every layer
 * that keys or compares names (providers, the daemon's memory-cache keys,
 * negative caches, timestamps) folds with cache_name_fold and compares the
 * folded bytes.
 *
 * The rule depends on where the names come from:
 *  - files domains compare names exactly, as glibc's files module does
 *    ("Alice" and "alice" are two users): CACHE_NAMES_EXACT;
 *  - LDAP names fold by the matching rule of the attribute that holds them
 *    (cache_name_rule_of_attr): caseIgnore for uid and cn, so "Alice" and
 *    "ALICE" are one user;
 *  - the cache itself keys an entry by its name under CACHE_NAMES_STORED
 *    (the rule of the name attribute in the entry's DN): names equal under
 *    it are one entry of a domain, and timestamps are keyed alike.
 * caseIgnore and caseExact are the store's rules: RFC 4518 preparation
 * (NFKC, insignificant spaces; caseIgnore also folds case by Unicode, so
 * "STRASSE" is "straße"). */
enum cache_name_rule {
	CACHE_NAMES_EXACT,       /* the bytes as given */
	CACHE_NAMES_CASE_EXACT,  /* the store's caseExactMatch */
	CACHE_NAMES_CASE_IGNORE, /* the store's caseIgnoreMatch */
};
#define CACHE_NAMES_STORED CACHE_NAMES_CASE_IGNORE

/* The rule of the values of attribute attr (an LDAP attribute name) in the
 * store's schema; caseIgnore for attributes it does not know. */
enum cache_name_rule cache_name_rule_of_attr(const char *attr);

/* name folded under rule into out, NUL-terminated; the length of the folded
 * form. 0 (out "") when name is empty or longer than CACHE_NAME_MAX bytes:
 * such a name is never stored (cache_name_valid). A name whose folded form
 * would pass CACHE_NAME_MAX bytes (NFKC expands some compatibility
 * characters many times over), or that memory ran out for, is given as it
 * is: it then matches only its
 * own spelling, and never another name's folded form (a folded form folds
 * to itself; such a name does not). Allocates only for text beyond
 * printable ASCII. */
size_t cache_name_fold(enum cache_name_rule rule, const char *name, char out[CACHE_NAME_MAX + 1]);

/* Whether a and b are one name under rule (their folds are equal). Strings
 * that are no names (empty, too long) are equal only byte for byte. */
bool cache_name_equal(enum cache_name_rule rule, const char *a, const char *b);

/* Whether a lookup of name b is answered by the entry named a under rule:
 * cache_name_equal, and for caseIgnore also store_text_same_lower (case
 * ignored code point by code point, as a directory compares: straße and
 * strasse are two users, though caseIgnore keys them alike). The rule a
 * lookup by name in a domain that ignores case applies; every table of
 * lookups by name (negative caches, coalescing, member sets) hashes the
 * cache_name_fold form, which names equal so share, and compares with this
 * on a hit. */
bool cache_name_answers(enum cache_name_rule rule, const char *a, const char *b);
/* A hash of name (seeded) that the names cache_name_answers equates under
 * rule share, and names it tells apart (straße, strasse) seldom do: of the
 * store_text_lower form for caseIgnore, else of the cache_name_fold form.
 * Never 0. For the tables that key lookups by name; one that keeps the
 * names compares them with cache_name_answers on a hit. */
uint64_t cache_name_hash(enum cache_name_rule rule, const char *name, uint64_t seed);

/* ---- writing ------------------------------------------------------------------------
 * Everything between begin and commit is one store transaction: readers see
 * all of it or none. An entry stored with the same content as before writes
 * nothing durable; only its timestamps change (in the timestamps db, which
 * commits alongside). */
int cache_txn_begin(struct cache *c, struct cache_txn **out, struct idc_diag *d);
/* CACHE_TXN_RESENT: what the transaction stores its source sends again
 * when an OS crash undid it (a sync feed's batch stored with its cookie,
 * a poll pass with its mark): the commit flushes once, not twice
 * (STORE_TXN_NOMETASYNC; the store stays sound, the commit may be lost). */
enum cache_txn_flags { CACHE_TXN_RESENT = 1 << 0 };
int cache_txn_begin_flags(struct cache *c, unsigned flags, struct cache_txn **out,
			  struct idc_diag *d);
/* After a transaction failed with IDC_EMAPFULL (and was aborted): double
 * the map of cache.mdb. No transaction of this process may be open. */
int cache_grow(struct cache *c, struct idc_diag *d);
/* Unmap from this process the pages of cache.mdb it has read
 * (store_map_release): after a bulk store or a walk of every entry, the
 * mapped file would otherwise stay in the daemon's resident set, as large
 * as the file. wait: wait for another thread's write transaction (else
 * -EBUSY while one is open). Never while this thread has one open. */
int cache_map_release(struct cache *c, bool wait);
int cache_txn_commit(struct cache_txn *t, struct idc_diag *d);
void cache_txn_abort(struct cache_txn *t);

/* Create the domain's entries if missing. ttl: seconds an entry stays
 * fresh after it was stored (entry_cache_timeout); 0 = never expires. */
int cache_domain_ensure(struct cache_txn *t, const char *domain, uint32_t ttl, struct idc_diag *d);

/* Store (add or update) u / g in domain. *changed says whether cache.mdb was
 * written. Invalid names, or a name already taken in another case: errors
 * with d naming the entry. */
int cache_put_user(struct cache_txn *t, const char *domain, const struct cache_user *u,
		   bool *changed, struct idc_diag *d);
int cache_put_group(struct cache_txn *t, const char *domain, const struct cache_group *g,
		    bool *changed, struct idc_diag *d);
/* Another user of domain already holding uid (as stored so far in this
 * transaction): 1 with its name copied into other[0..CACHE_NAME_MAX], 0 when
 * none but `name` holds it, or a negative error. Providers that treat a
 * shared uid as suspect (LDAP) use it to log; files domains allow it. */
int cache_uid_taken(struct cache_txn *t, const char *domain, uint32_t uid, const char *name,
		    char other[CACHE_NAME_MAX + 1]);
/* The same for another group of domain holding gid. */
int cache_gid_taken(struct cache_txn *t, const char *domain, uint32_t gid, const char *name,
		    char other[CACHE_NAME_MAX + 1]);

/* The name user `name` of domain is stored under (names compare with the
 * cache's rule, so it may differ in case), as stored so far in this
 * transaction: 1 with it copied into out[0..CACHE_NAME_MAX], 0 when no
 * user has the name, or a negative error. A provider that learns a member
 * name from elsewhere than the user's entry (an LDAP member DN's RDN)
 * lists the user as it is named. */
int cache_user_name(struct cache_txn *t, const char *domain, const char *name,
		    char out[CACHE_NAME_MAX + 1]);

/* Remove; -ENOENT when absent. */
int cache_del_user(struct cache_txn *t, const char *domain, const char *name, struct idc_diag *d);
int cache_del_group(struct cache_txn *t, const char *domain, const char *name, struct idc_diag *d);
/* Remove the extra record stored with this order; -ENOENT when absent. */
int cache_del_extra_user(struct cache_txn *t, const char *domain, uint64_t order,
			 struct idc_diag *d);
int cache_del_extra_group(struct cache_txn *t, const char *domain, uint64_t order,
			  struct idc_diag *d);
/* Remove the whole domain (users, groups, timestamps). */
int cache_domain_remove(struct cache_txn *t, const char *domain, struct idc_diag *d);
/* Remove the users of domain whose uid or gid, and the groups whose gid, is
 * outside min..max (max 0: no upper bound): what a narrowed id range no
 * longer allows. *users and *groups get how many. 0 or -errno. */
int cache_drop_outside(struct cache_txn *t, const char *domain, uint32_t min, uint32_t max,
		       size_t *users, size_t *groups, struct idc_diag *d);

/* ---- reading ------------------------------------------------------------------------
 * A reader is a read transaction plus scratch memory; results stay valid
 * until the next call on the reader or cache_reader_end. Lookups search the
 * given domains in order; the first that knows the key answers. */
struct cache_reader;
int cache_reader_begin(struct cache *c, struct cache_reader **out);
void cache_reader_end(struct cache_reader *r);

/* Entry state as seen by a lookup. */
struct cache_meta {
	const char *domain;
	int64_t last_update; /* unix seconds; 0 when unknown */
	int64_t expires;     /* unix seconds; 0 = never */
	bool expired;        /* expires passed, or marked expired */
};

/* 0, or -ENOENT when no domain holds the key. meta may be NULL. */
int cache_user_by_name(struct cache_reader *r, const char *const *domains, size_t ndomains,
		       const char *name, bool case_sensitive, struct cache_user *out,
		       struct cache_meta *meta);
int cache_user_by_uid(struct cache_reader *r, const char *const *domains, size_t ndomains,
		      uint32_t uid, struct cache_user *out, struct cache_meta *meta);
int cache_group_by_name(struct cache_reader *r, const char *const *domains, size_t ndomains,
			const char *name, bool case_sensitive, struct cache_group *out,
			struct cache_meta *meta);
int cache_group_by_gid(struct cache_reader *r, const char *const *domains, size_t ndomains,
		       uint32_t gid, struct cache_group *out, struct cache_meta *meta);

/* How nested groups are followed (cache_initgroups, cache_group_members;
 * the daemon fills it for a domain: daemon_nesting). depth: levels of
 * nesting followed past a group's own (the domain's
 * ldap_group_nesting_level, as deep as its provider fetches; 0: none), so
 * a chain of any length
 * costs at most depth levels of reads; every group is met once, so a
 * cycle ends. skip (NULL: none): a member group its domain does not serve
 * (withheld), passed over with everything reached only through it: it
 * adds no users to a group nesting it, and no group nesting it to a
 * user's list (its own gid the caller leaves out). skip may not use the
 * reader it is given for. */
struct cache_nesting {
	unsigned depth;
	bool (*skip)(const struct cache_group *g, void *arg);
	void *arg;
};

/* The gids of the groups of user `name` in its domain, as glibc's
 * initgroups wants them: every group that lists the user (memberUid), then,
 * level by level down to nest->depth levels, every group that has one of
 * those as a member group (one nest->skip passes over: none through it);
 * each level in provider order, each gid once, cycles end. The user's
 * primary gid is NOT added unless a group lists the user — glibc adds it
 * itself, and a caller asking getgrouplist(user, other) must not get it
 * (glibc's files module behaves so). *n gets the count; -ERANGE with *n =
 * needed when max is too small. -ENOENT when no domain holds the user. */
int cache_initgroups(struct cache_reader *r, const char *const *domains, size_t ndomains,
		     const char *name, bool case_sensitive, const struct cache_nesting *nest,
		     uint32_t *gids, size_t max, size_t *n);

/* The member names of group g of domain (a record a lookup or an
 * enumeration on r just returned) as getgrnam lists them: g's own
 * members as stored, then the users of its member groups (rfc2307bis
 * nesting), level by level down to nest->depth levels (0: g's own only),
 * each level in the order its groups are listed, each name once
 * (cache_name_answers under CACHE_NAMES_STORED). A member group met again
 * (a cycle), not held by the cache, or one nest->skip passes over adds
 * nothing (nor do the groups it nests, through it). The one rule for a
 * group's member list: every path serving one calls it. On success
 * g->members and g->nmembers name the list (valid until the next call on
 * r); g is left alone when it has no member groups. 0 or -ENOMEM / a
 * store error. */
int cache_group_members(struct cache_reader *r, const char *domain, struct cache_group *g,
			const struct cache_nesting *nest);

/* Users or groups of one domain in provider order (cache_user.order). cb's
 * record is valid during the call; a non-zero return stops and is returned. */
typedef int (*cache_user_cb)(const struct cache_user *u, void *arg);
typedef int (*cache_group_cb)(const struct cache_group *g, void *arg);
int cache_enum_users(struct cache_reader *r, const char *domain, cache_user_cb cb, void *arg);
int cache_enum_groups(struct cache_reader *r, const char *domain, cache_group_cb cb, void *arg);
/* The same records in one pass, in no particular order: sorting them by
 * (record's order, key) gives the order above. For callers that keep
 * every record anyway (the daemon's enumeration snapshots): each entry is
 * read once instead of twice. */
typedef int (*cache_user_key_cb)(const struct cache_user *u, uint64_t key, void *arg);
typedef int (*cache_group_key_cb)(const struct cache_group *g, uint64_t key, void *arg);
/* The enumeration order of records a and b by (order, key): <0, 0, >0. */
int cache_enum_order(uint64_t a_order, uint64_t a_key, uint64_t b_order, uint64_t b_key);
int cache_enum_users_unsorted(struct cache_reader *r, const char *domain, cache_user_key_cb cb,
			      void *arg);
int cache_enum_groups_unsorted(struct cache_reader *r, const char *domain, cache_group_key_cb cb,
			       void *arg);

/* The unsorted walk in parts, each in a reader of its own (a loop that
 * must not read a million entries in one go): from the record after *at
 * (IDC_BUF_INIT: the first; the caller frees it), until cb returns > 0
 * (stop after this record) or < 0 (fail). 0: the domain is done; 1:
 * stopped, call again with *at, in this reader or a later one. The order
 * is the records' keys in the store (their names), so a record present
 * throughout is passed exactly once; one stored or removed meanwhile is
 * passed as the reader that reached its key saw it (store_search_from). */
int cache_enum_users_from(struct cache_reader *r, const char *domain, struct idc_buf *at,
			  cache_user_key_cb cb, void *arg);
int cache_enum_groups_from(struct cache_reader *r, const char *domain, struct idc_buf *at,
			   cache_group_key_cb cb, void *arg);

/* The names of the entries of domain linked to a name or an id, in
 * provider order, to cb (valid during the call; a non-zero return stops and
 * is returned): CACHE_LINK_MEMBER, the groups that list user `name`
 * (memberUid, as cache_initgroups finds them); CACHE_LINK_NESTED, the groups
 * that have group `name` as a member group; CACHE_LINK_GID, the groups
 * holding gid `id`; CACHE_LINK_UID, the users holding uid `id`. A provider
 * compares them with what the directory answered, to ask again for what the
 * answer left out. 0 when none. */
enum cache_link { CACHE_LINK_MEMBER, CACHE_LINK_NESTED, CACHE_LINK_GID, CACHE_LINK_UID };
typedef int (*cache_name_cb)(const char *name, void *arg);
int cache_linked(struct cache_reader *r, const char *domain, enum cache_link how, const char *name,
		 uint32_t id, cache_name_cb cb, void *arg);

/* ---- SSH public keys ----------------------------------------------------------------
 * A user's SSH public keys (authorized_keys lines, idc_ssh_key_check) are a
 * record of their own beside the user, sshKeysOf=<name>,cn=sshkeys,
 * cn=<domain>,cn=idcache, not attributes of the user entry: passwd lookups,
 * the maps and enumeration never read or compare them, and an unchanged key
 * set writes nothing durable. The record has no "name" (an indexed
 * attribute every lookup by name searches). They carry no timestamps of their own: they are
 * as fresh as their user, whose provider stores both in one transaction,
 * and they go when the user is removed (cache_del_user, a narrowed id range,
 * the domain's removal). */
#define CACHE_SSH_KEYS_MAX 256u /* keys kept per user */

/* Set the keys of user name in domain to keys[0..nkeys) (each a checked,
 * trimmed line; one given twice is kept once; nkeys 0 removes them).
 * *changed (may be NULL) says whether cache.mdb was written. -EINVAL with d
 * naming the bad key. Callers store the user in the same transaction. */
int cache_put_user_keys(struct cache_txn *t, const char *domain, const char *name,
			const char *const *keys, size_t nkeys, bool *changed, struct idc_diag *d);

/* The keys of user name (the name the user is stored under, as
 * cache_user_by_name returns it) in domain, in the order they were stored:
 * *keys[0..*nkeys), valid like every reader result (until the next call on
 * r); unlike other calls it leaves r's earlier results valid, so name may
 * be a cache_user's. No keys, or no such user: 0 with *nkeys 0. The caller decides which
 * domain's user answers (the daemon: as for getpwnam, docs/DESIGN.md §11).
 * 0 or a negative error. */
int cache_user_keys(struct cache_reader *r, const char *domain, const char *name,
		    const char *const **keys, size_t *nkeys);

/* ---- expiry ------------------------------------------------------------------------- */

/* Mark entries expired (served until a provider refreshes them): one user,
 * one group, or all (name NULL, kind 0). Writes only the timestamps db. */
enum cache_kind { CACHE_ANY = 0, CACHE_USER, CACHE_GROUP };
int cache_expire(struct cache *c, const char *domain, enum cache_kind kind, const char *name,
		 size_t *count, struct idc_diag *d);

/* Counts for `idcache status`. */
struct cache_domain_stats {
	uint64_t users;
	uint64_t groups;
	int64_t last_update; /* newest lastUpdate of the domain's entries */
};
int cache_domain_stats(struct cache_reader *r, const char *domain, struct cache_domain_stats *out);

/* ---- provider state ------------------------------------------------------------------
 * Records a provider keeps beside a domain's entries, written in the
 * caller's transaction so that they commit with the data they describe (an
 * LDAP domain's sync cookie, and which directory entry each cached entry
 * came from). Keys: 1..CACHE_STATE_KEY_MAX bytes of [a-z0-9._-]; values:
 * NUL-terminated text up to CACHE_STATE_VALUE_MAX bytes. Removed with the
 * domain (cache_domain_remove). */
#define CACHE_STATE_KEY_MAX   64u
#define CACHE_STATE_VALUE_MAX 65536u
/* Add or replace; writes cache.mdb only when the value changed. */
int cache_state_put(struct cache_txn *t, const char *domain, const char *key, const char *value,
		    struct idc_diag *d);
/* Remove one; -ENOENT when absent. */
int cache_state_del(struct cache_txn *t, const char *domain, const char *key, struct idc_diag *d);
/* The value of key: *out malloc'd (the caller frees); -ENOENT when absent. */
int cache_state_get(struct cache_reader *r, const char *domain, const char *key, char **out);
/* Every record of domain to cb, in no stated order (strings valid during
 * the call; a non-zero return stops the walk and is returned). */
typedef int (*cache_state_cb)(const char *key, const char *value, void *arg);
int cache_state_enum(struct cache_reader *r, const char *domain, cache_state_cb cb, void *arg);

#endif
