/* Internals shared by the cache module's files. */
#ifndef IDC_CACHE_INT_H
#define IDC_CACHE_INT_H

#include <lmdb.h>
#include <pthread.h>
#include <stdatomic.h>

#include "cache.h"
#include "store/store.h"

#define CACHE_MAX_DOMAINS 32
#define CACHE_MAX_GROWS   8 /* doublings of a map one transaction may ask for */

struct cache_domain_ttl {
	char name[CACHE_DOMAIN_MAX + 1];
	uint32_t ttl;
};

struct cache {
	struct store *st;
	char *dir;
	MDB_env *ts_env;
	MDB_dbi ts_dbi;
	/* The last reader's timestamps txn, reset; the next reader renews it
	 * (lookup.c). Aborted before ts_env closes. NULL when none. */
	_Atomic(MDB_txn *) ts_spare;
	/* Readers of another thread on ts_env (lookup.c, ts_read_begin):
	 * ts_users counts them; ts_closing, set by the writer that must
	 * close or remap ts_env (ts_drain), turns new ones away (they read
	 * without timestamps). An entrant adds itself, then reads
	 * ts_closing; the writer sets it, then reads ts_users (seq_cst). */
	_Atomic unsigned ts_users;
	_Atomic bool ts_closing;
	uint64_t ts_size; /* size of timestamps.mdb the writer last saw */
	size_t ts_map;    /* its map size (timestamps.c) */
	bool ts_full;     /* its map filled in the current (or last) transaction:
			   * the next cache_grow grows it, not cache.mdb's */
	/* Held from cache_txn_begin to its commit or abort, and by
	 * cache_grow: a writer on another thread (the LDAP provider's
	 * committer) never has a transaction open while the map is remapped,
	 * and a grow waits for that writer's transaction to end. */
	pthread_mutex_t write_mu;
	struct cache_domain_ttl ttl[CACHE_MAX_DOMAINS];
	size_t nttl;
};

/* What a transaction changed in one domain (counts.c): entries added less
 * removed, per kind (users, groups), and the newest timestamp it gave. */
struct cache_tally {
	char domain[CACHE_DOMAIN_MAX + 1];
	int64_t delta[2];
	int64_t newest;
};

struct cache_txn {
	struct cache *c;
	struct store_txn *st;
	MDB_txn *ts;
	bool dirty; /* cache.mdb was written */
	/* Whether keys_domain has a cn=sshkeys container (sshkeys.c), learnt
	 * once per transaction: without one no user of it has keys. */
	char keys_domain[CACHE_DOMAIN_MAX + 1];
	bool keys_container;
	struct idc_arena arena;
	struct idc_buf dn, tmp;
	struct cache_tally tally[CACHE_MAX_DOMAINS];
	size_t ntally;
};

struct cache_reader {
	struct cache *c;
	struct store_txn *st;
	MDB_txn *ts; /* NULL when the timestamps db is unavailable */
	struct idc_arena arena;
	struct idc_buf dn, tmp;
	/* cache_group_members: the list it answers (heap, grown) and the DN
	 * of the member group it reads (not dn: an enumeration's search may
	 * hold that) */
	const char **flat;
	size_t flat_cap;
	struct idc_buf walk_dn;
};

/* Timestamps of one entry. */
struct ts_rec {
	int64_t last_update;
	int64_t expires; /* 0: never */
	uint32_t flags;  /* TS_EXPIRED */
	uint32_t pad;
};
#define TS_EXPIRED 1u

enum {
	KIND_USER = 'u',
	KIND_GROUP = 'g',
	KIND_KEYS = 'k',  /* a user's SSH keys (sshkeys.c) */
	KIND_DOMAIN = 'd' /* timestamps db only: a domain's newest update (counts.c) */
};

/* timestamps.c */
int ts_open(struct cache *c, struct idc_diag *d);
void ts_close(struct cache *c);
/* lookup.c: abort the spare read txn (before ts_env closes). */
void ts_spare_drop(struct cache *c);
/* Before ts_env is closed or remapped (the writer): turn new readers away
 * and wait, a little (200 ms), for those open to end. 0, or -EBUSY (d
 * says why, readers let in again) with some still open: the caller fails
 * and tries again at its next transaction. ts_undrain lets readers in
 * again. */
int ts_drain(struct cache *c, struct idc_diag *d);
void ts_undrain(struct cache *c);
/* Whether the open timestamps db is still whole: its meta pages sound, the
 * file no shorter than the writer last saw it (not truncated under us).
 * *size (may be NULL) gets its size; only the writer records it in
 * c->ts_size. */
bool ts_healthy(const struct cache *c, uint64_t *size);
/* After a commit to it: record the file's size in c->ts_size (writer). */
void ts_note_size(struct cache *c);
/* Close, delete and create anew (no transaction on it may be open); why
 * goes to the log. */
int ts_rebuild(struct cache *c, const char *why, struct idc_diag *d);
/* Key "<kind><domain>\0<folded name>" into out. */
int ts_key(int kind, const char *domain, const char *name, struct idc_buf *out);
/* The timestamps db's first map for a cache.mdb map of cache_map bytes. */
#define TS_MAP_MIN ((size_t)256 << 10)
#define TS_MAP_CAP ((size_t)1 << 30) /* it may always grow this far (timestamps.c) */
size_t ts_map_size(size_t cache_map);
/* An LMDB code of the timestamps db as ours; a full map is IDC_EMAPFULL
 * and marks c->ts_full (the next cache_grow doubles this map). */
int ts_err(struct cache *c, int mdb_rc);
/* ts_err, with what failed in d ("<dir>/timestamps.mdb: <what>: <why>"). */
int ts_fail(struct cache *c, int mdb_rc, const char *what, struct idc_diag *d);
/* Double the map, up to cache.mdb's or TS_MAP_CAP (-ENOSPC past it); no
 * transaction on it may be open. */
int ts_grow(struct cache *c, struct idc_diag *d);
int ts_put(struct cache_txn *t, const struct idc_buf *key, const struct ts_rec *r,
	   struct idc_diag *d);
int ts_get(MDB_txn *txn, MDB_dbi dbi, const struct idc_buf *key, struct ts_rec *r);
int ts_del(struct cache_txn *t, const struct idc_buf *key, struct idc_diag *d);

/* sshkeys.c: remove the keys record of user name (none: 0, *changed
 * false; changed may be NULL). */
int cache_keys_drop(struct cache_txn *t, const char *domain, const char *name, bool *changed,
		    struct idc_diag *d);
/* cache.c: create the entry dn (objectClass container, cn) if missing. */
int cache_ensure_entry(struct cache_txn *t, const char *dn, const char *cn, struct idc_diag *d);
/* cache.c: add or replace e; only a real difference writes cache.mdb.
 * *added (may be NULL) says whether e was new. */
int cache_put_entry(struct cache_txn *t, const struct store_entry *e, bool *changed, bool *added,
		    struct idc_diag *d);

/* cache.c: DN text of a domain container, or of a user/group entry. */
int cache_dn_domain(struct idc_buf *out, const char *domain);
int cache_dn_container(struct idc_buf *out, int kind, const char *domain);
int cache_dn_entry(struct idc_buf *out, int kind, const char *domain, const char *name);
int cache_dn_extra(struct idc_buf *out, int kind, const char *domain, uint64_t order);
/* The cn of the container of kind's entries ("users", "groups", "sshkeys"). */
const char *cache_container_cn(int kind);

/* counts.c: counts of the entries below cn=users and cn=groups, kept on
 * each container as CACHE_ATTR_COUNT, and a domain's newest update, kept
 * in the timestamps db; both written at commit from the transaction's
 * tallies. */
#define CACHE_ATTR_COUNT "entrycount" /* canonical (lower case) */
/* Create the container of kind (user or group) in domain with count 0, or
 * count the entries of one that keeps none. */
int cache_container_ensure(struct cache_txn *t, int kind, const char *domain, struct idc_diag *d);
/* An entry of kind added (delta 1) or removed (-1) in domain. -ENOSPC when
 * the transaction touched more than CACHE_MAX_DOMAINS domains. */
int cache_tally_entry(struct cache_txn *t, int kind, const char *domain, int delta);
/* A timestamp of now given to an entry of domain. */
int cache_tally_touch(struct cache_txn *t, const char *domain, int64_t now);
/* The domain was removed (its counts with it). */
void cache_tally_forget(struct cache_txn *t, const char *domain);
/* Write the tallies (before the commit). */
int cache_tally_flush(struct cache_txn *t, struct idc_diag *d);
/* The attribute naming a keys record (sshkeys.c): the user's name. */
#define CACHE_ATTR_KEYS_OF "sshKeysOf"
/* Attribute marking an extra record (cache.h, "Extra records"). */
#define CACHE_ATTR_EXTRA "extrarecord" /* canonical (lower case) */
/* A user's subordinate id ranges, "START COUNT" (cache_user.subuid/subgid). */
#define CACHE_ATTR_SUBUID "subuidrange"
#define CACHE_ATTR_SUBGID "subgidrange"
uint32_t cache_domain_ttl(const struct cache *c, const char *domain);
/* Search one level below the domain's users or groups container with the
 * filter text (NULL: every entry), at most limit matches (0: all); base is
 * scratch for the container's DN. store_search's result (cb's value
 * included). */
int cache_search_kind(struct store_txn *st, struct idc_buf *base, int kind, const char *domain,
		      const char *filter, size_t flen, size_t limit, store_entry_cb cb, void *arg);
/* The filter finding a kind's entries by number, into text (size at least
 * CACHE_NUMBER_FILTER_MAX); its length. Users hold gidNumber too (their
 * primary group): a group's filter names the class as well, so a gid that
 * a hundred thousand users share is looked up among the groups, not by
 * reading each of those users (the store intersects the two indexes). */
#define CACHE_NUMBER_FILTER_MAX 64
size_t cache_number_filter(char *text, int kind, uint32_t id);

#endif
