/*
 * lprov internals, shared by the provider's files. Nothing here is API.
 *   options.c  configuration: keys, defaults, checks, the bind password file
 *   conn.c     the connection: setup step by step, failover, offline, probes
 *   search.c   searches in flight: sending, reading replies, deadlines, limits
 *   entries.c  entries into parsed records; DNs, filters, log-once
 *   request.c  the request state machine: lookups, coalescing, negative
 *              cache, stepping from wave to wave, finishing
 *   waves.c    the searches of one step
 *   refresh.c  entries asked for again by name: refresh and verify
 *   store.c    the answer into the cache, and what is gone from the directory
 *   commit.c   background requests' stores on a worker thread
 *   seen.c     the users an enumeration stored and let go of
 *   changes.c  change reports to the domain's hook
 *   domain.c   the domain object: life cycle, timers, process, status
 *   syncmsg.c  content synchronization (RFC 4533) messages as bytes
 *   sync.c     content synchronization: the feeds, their searches and
 *              messages, live/down, keepalive, fallback
 *   syncstore.c what a feed stores: batches, the names they remove, the
 *              cookie and records written with them
 *   poll.c     the periodic passes of changed entries (no live feed)
 *   syncmap.c  which directory entry (entryUUID) each cached entry came
 *              from, in memory and in the cache's provider state
 */
#ifndef IDC_LPROV_INT_H
#define IDC_LPROV_INT_H

#include <ldap.h> /* OpenLDAP */
#include <pthread.h>

#include "providers/ldap/lprov.h"

#define LP_MEMBER_BATCH 250     /* RDN values per member-resolution search */
#define LP_DN_AVAS_MAX  256     /* AVAs in a DN the provider compares */
#define LP_PARENT_BATCH 100     /* group DNs per parent search */
#define LP_MEMBERS_MAX  1000000 /* member values kept per group */
#define LP_VALUE_MAX    4096    /* longest gecos/home/shell/timestamp kept */
#define LP_NEG_SLOTS    4096    /* negative cache (direct-mapped) */
#define LP_LOGGED_MAX   16384   /* distinct messages "logged once" remembers */
/* Work one process call does before it returns to the event loop (the
 * loop comes back at once when more is waiting): other clients are
 * answered between two slices of a large or hostile answer. */
#define LP_TURN_MSGS 256 /* messages read */
#define LP_TURN_MS   2   /* milliseconds spent reading them */
/* ...with a sync feed running, whose batches end with the slice (sync.c) */
#define LP_TURN_SYNC_MS      10
#define LP_COMMIT_EVERY      1000       /* entries a request holds before it commits them */
#define LP_COMMIT_BYTES      (1u << 20) /* ...or arena bytes it grew by since */
#define LP_SHARED_ID_MAX     16         /* entries a lookup by uid or gid takes */
#define LP_REPLY_MIN         16384      /* smallest ldap_max_reply_size */
#define LP_NESTING_MAX       1000       /* largest ldap_group_nesting_level */
#define LP_MEMORY_MIN        (1u << 20) /* smallest ldap_max_memory */
#define LP_BACKOFF_MAX_MS    3600000    /* longest wait between offline probes */
#define LP_SYNC_PROBE_MS     1000       /* with a sync feed: first wait offline */
#define LP_SYNC_PROBE_MAX_MS 60000      /* ...and longest */
#define LP_ENUM_EVERY_MS     300000     /* enumeration refresh */
#define LP_REFRESH_MAX       20000      /* names per kind one background refresh takes */
/* The background refresh of expired entries (refresh_expired_interval):
 * a request kind of its own, never asked for by a caller. */
#define LP_REFRESH ((enum lprov_lookup_kind)100)
/* Entries the content synchronization feed delivered: a refresh phase or
 * a batch of persist notices, stored like a refresh (sync.c). */
#define LP_SYNC ((enum lprov_lookup_kind)101)
/* The periodic pass of changed entries (ldap_poll_interval, poll.c);
 * id 1 for a full pass. */
#define LP_POLL ((enum lprov_lookup_kind)102)

/* The newest change a poll pass saw: an entryUSN (389-ds), else an
 * entryCSN (OpenLDAP: microseconds), else a modifyTimestamp (seconds);
 * the last two order as text. kind 0: none. */
struct lp_poll_mark {
	char kind; /* 'u', 'c', 't' */
	uint64_t usn;
	char text[64];
};

/* ==== small containers ==================================================== */

/* String -> pointer hash map (keys not owned; open addressing). */
struct lp_map {
	struct lp_map_slot *slot;
	size_t mask, used;
};
/* 0 when inserted, 1 when key was present (value untouched), -ENOMEM. */
int lp_map_put(struct lp_map *m, const char *key, void *val);
void *lp_map_get(const struct lp_map *m, const char *key);
void lp_map_free(struct lp_map *m);

struct lp_vec {
	void **v;
	size_t n, cap;
};
int lp_vec_push(struct lp_vec *v, void *p);
void lp_vec_free(struct lp_vec *v);

/* Set of 64-bit hashes (never 0), open addressing grown a step at a
 * time (idc_oat), up to `max` of them: what lp_log_once has logged, the
 * names an enumeration answered. */
struct lp_hset {
	struct idc_oat t; /* slots: the hashes */
};
/* 0 when added, 1 when h was present, -ENOSPC when max are held (h not
 * added), -ENOMEM. */
int lp_hset_add(struct lp_hset *s, uint64_t h, size_t max);
void lp_hset_free(struct lp_hset *s);

/* What an enumeration committed and let go of (seen.c): a seeded hash of
 * each user's normalized DN with its name, and of each folded name. */
struct lp_seen {
	struct idc_oat dn; /* struct lp_seen_slot; dn.used: users held */
	char *names;       /* NUL-terminated names, back to back */
	size_t nlen, ncap;
	struct lp_hset names_h;
};
/* Seeded hash of s, never 0: what lp_seen keys by. */
uint64_t lp_seen_hash(const struct lprov_domain *ld, const char *s);
/* 0 when added, 1 when dn_h was held (name_h is added either way), -ENOMEM. */
int lp_seen_add(struct lp_seen *s, uint64_t dn_h, const char *name, uint64_t name_h);
/* The name of the user whose DN hashes to dn_h, or NULL. */
const char *lp_seen_name(const struct lp_seen *s, uint64_t dn_h);
bool lp_seen_has_name(const struct lp_seen *s, uint64_t name_h);
/* Bytes it holds (ldap_max_memory counts them). */
size_t lp_seen_bytes(const struct lp_seen *s);
void lp_seen_free(struct lp_seen *s);
bool lp_hset_has(const struct lp_hset *s, uint64_t h);

/* ==== parsed records (strings in the request's arena) ===================== */

struct lp_user {
	const char *dn, *ndn, *name, *gecos, *dir, *shell;
	uint32_t uid, gid;
	const char **keys; /* SSH public keys that passed idc_ssh_key_check, trimmed */
	size_t nkeys;
	struct cache_subid_range subuid, subgid; /* count 0: none */
};

struct lp_group {
	const char *dn, *ndn, *name;
	uint32_t gid;
	const char **uids; /* memberUid values, then names from member DNs' RDNs */
	size_t nuids;
	size_t nuid_values; /* uids[0..nuid_values) came from memberUid */
	const char **mdns;  /* normalized member DNs */
	size_t nmdns;
	bool ancestor; /* found walking up from the user: its parents are wanted */
	bool stored;   /* enumeration: committed with an earlier page */
};

/* ==== searches and requests =============================================== */

/* LP_S_FIND: the request's own entry (by name or id) or an enumeration's
 * page; LP_S_NAMES: entries asked for again by a list of names (a refresh,
 * a verify wave), stored like found ones but with no count expected. */
enum lp_purpose { LP_S_FIND, LP_S_NAMES, LP_S_GROUPS_OF, LP_S_PARENTS, LP_S_MEMBERS, LP_S_PROBE };

struct lp_req;

struct lp_search {
	struct lp_search *next;
	struct lp_req *req; /* NULL for the probe */
	enum lp_purpose purpose;
	int msgid;
	char *base;
	int scope;
	char *filter;
	bool paged;
	struct berval cookie; /* paged results: where the next page starts */
	uint64_t deadline_ns;
	size_t expect;   /* entries the search may return (0: any number) */
	size_t nentries; /* entries it returned */
};

struct lp_waiter {
	lprov_lookup_cb cb;
	void *arg;
};

struct lp_sync_feed;

struct lp_req {
	struct lp_req *next;
	struct lp_sync_feed *feed; /* LP_SYNC: the feed it holds a batch of */
	struct lprov_domain *ld;
	enum lprov_lookup_kind kind;
	char *name;
	uint32_t id;
	struct lp_waiter *w;
	size_t nw, wcap;
	int phase;    /* kind-specific step */
	int pending;  /* searches in flight */
	int restarts; /* after failovers */
	struct idc_arena arena;
	struct lp_vec users, groups;   /* lp_user *, lp_group * */
	struct lp_map udn, gdn, uname; /* ndn -> user/group, name -> user */
	struct lp_map asked;           /* member ndns already asked for */
	struct lp_map rdn_names;       /* store: member name from an RDN -> as cached */
	struct lp_vec memq, parentq;   /* ndns to resolve / whose parents to find */
	size_t scanned;                /* groups already queued for members/parents */
	struct lp_user *target;        /* initgroups: the user */
	size_t users_stored;           /* enumeration: users committed page by page */
	/* enumeration, poll pass (lp_req_retires): the users of a page live
	 * in uarena and leave for `seen` once stored (lp_req_retire) */
	struct idc_arena uarena;
	struct lp_seen seen;
	/* ...and its groups in garena, let go of for gseen once every group
	 * it holds is stored and no member DN was asked for (lp_req_retire) */
	struct idc_arena garena;
	struct lp_seen gseen;
	struct lp_vec ru, rg; /* refresh, verify: user and group names (arena) */
	int64_t refresh_sent; /* refresh, verify: unix seconds its searches went out */
	/* the verify wave (lp_wave_verify) went out: cached groups the answer
	 * left out, asked for again by name into rg */
	bool verified;
	/* some search ended without LDAP_SUCCESS (referral, size or admin
	 * limit...) or an entry was lost to memory: the answer may lack
	 * entries the directory has, so a refresh deletes nothing */
	bool partial;
	/* ldap_max_entries, ldap_max_searches, ldap_group_nesting_level:
	 * what the request took so far; `cut` once one of them was reached
	 * (the request ends with what came, partial) */
	size_t nentries, unstored, paged_bytes; /* paged_bytes: arena.total at the last commit */
	uint32_t nsent, up, down;
	bool cut;
	struct lp_poll_mark mark; /* LP_POLL: the newest change of its answer */
	/* LP_SYNC: idc_now_ns() when its data was written and when committed
	 * (the sync feed's trace, lp_sync_commit) */
	uint64_t written_ns, committed_ns;
	/* background kinds (lp_commit_background): a page commit waits for
	 * the committer; the final store too (finish_res its result) */
	bool store_due, finish_due;
	enum lprov_lookup_result finish_res;
};

/* ==== domain ============================================================== */

/* A lookup the directory answered with nothing: h its key_hash, which
 * spellings of one name share; kind, id and name (heap; NULL by id) what
 * a hit must equal (cache_name_answers), so a spelling the directory
 * tells apart is asked for itself. */
struct lp_neg {
	uint64_t h;
	uint64_t expires_ns;
	int kind;
	uint32_t id;
	char *name;
};

struct lprov_domain {
	struct lprov_config cfg;
	struct cache *cache;
	const char *attr[LPROV_MAP_COUNT];
	const char *attrs[24]; /* requested in every search */
	const char *ubase, *gbase;
	char *password;
	/* connection */
	LDAP *conn;
	/* what the loop watches: conn's socket, or while the TLS handshake
	 * runs on its helper thread (LP_HS_TLS) that thread's eventfd */
	int fd;
	/* LP_HS_TLS: the helper thread, which owns conn until joined */
	struct lp_tls *tls;
	size_t server; /* index into cfg.uris of conn */
	bool online;   /* false: offline, serving the cache */
	/* setup of conn in progress (enum lp_hs): nothing but the handshake
	 * goes out until it is LP_HS_NONE */
	int hs;
	int hs_msgid;            /* StartTLS or bind in flight */
	uint64_t hs_deadline_ns; /* this step gives up (ldap_network_timeout) */
	int64_t since;           /* unix seconds the state began */
	uint32_t backoff_ms;
	uint64_t next_probe_ns;   /* offline: when to probe */
	uint64_t failback_ns;     /* on a secondary: when to try the primary; 0 never */
	uint64_t next_enum_ns;    /* enumerate: next run; 0 none */
	uint64_t next_refresh_ns; /* refresh_expired_interval: next run; 0 none */
	struct lp_search *probe;  /* offline: the rootDSE search that proves a server */
	bool more;                /* messages may be waiting inside libldap */
	bool broken;              /* a send failed: replace the connection */
	bool yield;               /* a page was committed: back to the event loop */
	struct idc_arena arena;   /* normalized bases */
	const char *nubase, *ngbase;
	char last_error[256];
	/* The last answer the cache refused (store.c: logged once per reason),
	 * when, and how many were. */
	char store_error[400];
	int64_t store_error_time;
	uint64_t nstore_failures;
	struct lp_search *searches; /* in flight, the probe included */
	struct lp_req *reqs;        /* in flight */
	struct lp_neg neg[LP_NEG_SLOTS];
	struct lp_commit *commit; /* NULL until the first background store */
	pthread_mutex_t log_mu;   /* logged, logged_full: the committer logs too */
	struct lp_hset logged;    /* lp_log_once */
	bool logged_full;         /* LP_LOGGED_MAX reached: said so once */
	bool range_checked;       /* cached ids outside min_id..max_id dropped (once) */
	size_t members_max;       /* member values kept per attribute (LP_MEMBERS_MAX) */
	uint64_t hash_seed;
	uint64_t rng;                  /* lp_jitter_ms */
	struct lp_sync *sync;          /* content synchronization; NULL: ldap_sync = poll */
	const char *poll_attrs[20];    /* attrs, and what a change is told by */
	struct lp_poll_mark poll_mark; /* as committed */
	bool poll_loaded;
	uint64_t next_poll_ns, next_full_ns;
	cache_change_fn hook; /* lprov_domain_set_hook */
	void *hook_arg;
	uint64_t nsearches, nlookups, njoined, nneg, ncommits;
	uint64_t turns, turn_cpu_max_ns, turns_slow; /* lprov_domain_status */
};

/* options.c */
const char *lp_attr(const struct lprov_config *c, enum lprov_attr a);
/* Whether id lies in min_id..max_id (max_id 0: no upper limit). */
bool lp_id_in_range(const struct lprov_config *c, uint32_t id);
/* The range in words for messages, into buf: "min_id 1..max_id 5000", or
 * "min_id 1.. (no max_id)" when max_id is 0 (no upper bound, not 0). */
const char *lp_range_text(const struct lprov_config *c, char *buf, size_t cap);

/* conn.c */
/* Connection setup, step by step, never waiting on the network: the TLS
 * handshake (ldaps://, after StartTLS), which libldap cannot do without
 * waiting, runs on a helper thread (LP_HS_TLS). */
enum lp_hs { LP_HS_NONE, LP_HS_CONNECT, LP_HS_STARTTLS, LP_HS_TLS, LP_HS_BIND };
#define LP_HS_POLL_MS 10 /* LP_HS_CONNECT: how often the socket is checked */
/* Advance the setup (a reply came, the socket connected, the step's
 * deadline passed: next server). */
void lp_conn_handshake(struct lprov_domain *ld, uint64_t now);
int lp_conn_ensure(struct lprov_domain *ld);
/* Drop conn; a TLS handshake in progress is ended first (its socket shut
 * down, its thread joined), so no thread outlives the call. */
void lp_conn_close(struct lprov_domain *ld);
/* The server failed (timeout, connection lost): drop it, restart what was
 * in flight on the next one, or go offline. */
void lp_conn_fail(struct lprov_domain *ld, const char *why);
void lp_go_offline(struct lprov_domain *ld, const char *why);
void lp_conn_timers(struct lprov_domain *ld, uint64_t now);
void lp_probe_answered(struct lprov_domain *ld);
const char *lp_server(const struct lprov_domain *ld);
/* ms scaled by a random factor in [0.75, 1.25): timers a fleet shares
 * (probes, the sync feed's restarts, poll passes) spread out. */
uint64_t lp_jitter_ms(struct lprov_domain *ld, uint64_t ms);

/* search.c */
int lp_search_send(struct lprov_domain *ld, struct lp_req *req, enum lp_purpose purpose,
		   const char *base, int scope, const char *filter, bool paged);
void lp_search_free(struct lp_search *s);
void lp_read(struct lprov_domain *ld);
void lp_search_deadlines(struct lprov_domain *ld, uint64_t now);
/* The domain was frozen for ns (commit.c): its searches' deadlines move. */
void lp_search_postpone(struct lprov_domain *ld, uint64_t ns);
/* Unlink and free every search (the connection is gone). */
void lp_search_drop_all(struct lprov_domain *ld);
/* "getpwnam NAME", "enumeration"...: r in log messages, into buf. */
void lp_req_describe(const struct lp_req *r, char *buf, size_t n);

/* entries.c */
void lp_entry(struct lprov_domain *ld, struct lp_search *s, LDAPMessage *msg);
/* Normalized DN (lower case, LDAPv3 string form) in arena, or NULL when dn
 * is not a DN. */
char *lp_dn_normalize(struct idc_arena *a, const char *dn, size_t len);
/* First RDN of a normalized DN: attr and (unescaped) value in arena. */
int lp_dn_first_ava(struct idc_arena *a, const char *ndn, char **attr, char **value);
/* Whether normalized dn lies at or below normalized base. */
bool lp_dn_under(const char *ndn, const char *nbase);
/* Append v escaped for a filter (RFC 4515). */
int lp_filter_escape(struct idc_buf *b, const char *v, size_t n);
/* Log fmt once per distinct message (as told by a seeded 64-bit hash);
 * after LP_LOGGED_MAX distinct messages, new ones are dropped (one line
 * says so), repeats stay silent. Messages above the log level are neither
 * logged nor remembered. */
void lp_log_once(struct lprov_domain *ld, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* request.c: the request state machine */
void lp_req_searched(struct lp_req *r); /* a search of r finished */
/* A page of an enumeration arrived: commit what it completed (a
 * background request's store waits for lp_commit_kick). */
void lp_req_page(struct lp_req *r);
/* A store of r is over (page: an intermediate one): logged; the final one
 * completes r with res (LPROV_LOOKUP_FAILED when rc says it failed). */
void lp_req_stored(struct lp_req *r, bool page, enum lprov_lookup_result res, int rc,
		   const struct idc_diag *d, size_t nu, uint64_t t0);
/* The connection is ready: send what waited for it, restart what was in
 * flight on a server that failed. */
void lp_req_restart_all(struct lprov_domain *ld);
void lp_req_finish_all(struct lprov_domain *ld, enum lprov_lookup_result res);
/* An entry stored in the cache: the negative cache forgets the misses of
 * its name and id (request.c). */
void lp_neg_forget(struct lprov_domain *ld, bool group, const char *name, uint32_t id);
/* The negative cache's names freed (the domain is closing). */
void lp_neg_free(struct lprov_domain *ld);
/* Free a request no list holds (an LP_SYNC batch). */
void lp_req_release(struct lp_req *r);
/* Whether r lets its stored users go (an enumeration, a poll pass). */
bool lp_req_retires(const struct lp_req *r);
/* The name of the user of this answer with normalized DN ndn (held or let
 * go of), or NULL. */
const char *lp_req_user_of(const struct lp_req *r, const char *ndn);
/* The name of the group of this answer with normalized DN ndn other
 * than self (held or let go of), or NULL. */
const char *lp_req_group_of(const struct lp_req *r, const char *ndn, const struct lp_group *self);
/* Bytes r holds for what it read (ldap_max_memory). */
size_t lp_req_bytes(const struct lp_req *r);
/* The request in flight for (kind, name, id), or NULL. */
struct lp_req *lp_req_find(struct lprov_domain *ld, enum lprov_lookup_kind kind, const char *name,
			   uint32_t id);
/* Join an identical request in flight, or start one (no negative cache,
 * no checks of name or id: lprov_domain_lookup's job). */
enum lprov_lookup_result lp_req_start(struct lprov_domain *ld, enum lprov_lookup_kind kind,
				      const char *name, uint32_t id, lprov_lookup_cb cb, void *arg);

/* "(objectClass=<user class>)", the group class, or both OR'ed. */
int lp_oc_filter(struct idc_buf *b, const struct lprov_domain *ld, bool user, bool group);
/* waves.c: the searches of one step; 0 or what lp_search_send returns
 * (-E2BIG once ldap_max_searches is spent) */
int lp_wave_find(struct lp_req *r);
int lp_wave_enum(struct lp_req *r, bool groups);
int lp_wave_groups_of(struct lp_req *r);
/* Groups that have one of r->parentq as a member (empties parentq). */
int lp_wave_parents(struct lp_req *r);
/* The member DNs of r->memq (empties memq). */
int lp_wave_members(struct lp_req *r);
/* The users (group false) or groups named in v. */
int lp_wave_by_names(struct lp_req *r, bool group, const struct lp_vec *v);
/* Queue the parents and members of groups found since the last wave. */
int lp_wave_queue_groups(struct lp_req *r);

/* refresh.c: entries asked for again by name */
int lp_wave_refresh(struct lp_req *r);
/* Every name the domain caches into r->ru and r->rg: what a complete
 * full pass's answer (LP_POLL) is compared with, as a refresh's. */
int lp_cached_names(struct lp_req *r);
int lp_wave_verify(struct lp_req *r);

/* store.c: the answer into the cache */
/* What was found and not yet committed, in one transaction; what the
 * directory no longer has is removed. page: an enumeration's intermediate
 * commit. */
int lp_store(struct lp_req *r, enum lprov_lookup_result res, bool page, struct idc_diag *d);
/* Whether a and b name one entry of the cache. */
bool lp_name_eq(const char *a, const char *b);
/* name as the cache keys it (CACHE_NAMES_STORED), in a; NULL: no memory. */
char *lp_fold_name(struct idc_arena *a, const char *name);
/* Folded names (lp_fold_name) of the users or groups of the answer. */
int lp_answered_names(struct lp_req *r, bool group, struct lp_map *out);
/* Whether g goes into this transaction (page: an enumeration page). */
bool lp_group_due(const struct lp_req *r, const struct lp_group *g, bool page);

/* changes.c: change reports (lprov_domain_set_hook) */
/* One side of a change: a record as the cache held it before the
 * transaction or as it was stored (strings in the tracker's arena or the
 * request's). */
struct lp_rec {
	bool present;
	const char *name;
	uint32_t id;
	const char **mem, **nested; /* groups: member users, member groups */
	size_t nmem, nnested;
};

/* An entry the directory no longer has, removed by lp_store(): the name a
 * lookup by name did not find, or a name a refresh asked for that its
 * complete answer did not hold (collect_gone). */
struct lp_gone {
	const char *name;
	bool group;
	bool deleted;      /* by this transaction */
	struct lp_rec old; /* as the cache held it (when tracking) */
};

struct lp_gone_list {
	struct lp_gone *v;
	size_t n;
};

/* What one lp_store() needs to tell the hook: the records before (read
 * before the transaction begins) and after, for the users and groups it
 * writes and the entries it deletes. */
struct lp_track {
	bool on;      /* a hook is set */
	bool unknown; /* something could not be read or kept: report NULL */
	struct idc_arena a;
	struct lp_rec *uold, *unew; /* per user from users_stored */
	struct lp_rec *gold, *gnew; /* per group index */
	size_t told;                /* lp_track_report: changes looked at */
};

/* The records as the cache holds them before the transaction. */
void lp_track_begin(struct lp_req *r, struct lp_track *tr, bool page, struct lp_gone_list *gl);
/* After the commit: tell the hook what changed, at most max changes from
 * where the last call stopped (tr->told). Whether all were told. */
bool lp_track_report(struct lp_req *r, struct lp_track *tr, struct lp_gone_list *gl,
		     uint64_t until_ns);
void lp_track_free(struct lp_track *tr);

/* One lp_store() in steps, so that its transaction can run on the
 * committer's thread (commit.c) while the loop serves others:
 * lp_store_init, lp_store_run (any thread; nothing else touches the
 * request meanwhile: its domain is frozen), again after the loop grew a
 * full map, then lp_store_done on the loop's thread (the hook told, the
 * entries marked stored). */
#define LP_GROW_TRIES 8 /* map doublings one store may ask for */
struct lp_store_job {
	struct lp_req *r;
	enum lprov_lookup_result res;
	bool page, mark;
	bool wrote; /* the last run committed */
	int rc;     /* of the last run */
	int tries;  /* runs that found the map full */
	struct lp_track tr;
	struct lp_gone_list gl;
	struct idc_diag d;
};
void lp_store_init(struct lp_store_job *j, struct lp_req *r, enum lprov_lookup_result res,
		   bool page);
void lp_store_run(struct lp_store_job *j);
/* Tell the hook more of what the commit changed, at least one change and
 * none begun after until_ns (idc_now_ns; UINT64_MAX: all); whether all
 * was told. */
bool lp_store_report(struct lp_store_job *j, uint64_t until_ns);
/* j's rc, after telling the hook the rest of what the commit changed. */
int lp_store_done(struct lp_store_job *j);
/* Time the hook is told changes in one loop turn (commit.c): a change
 * costs it 10-200 us (reader lookups of the groups nesting a group...),
 * so a fixed count of changes took 2-25 ms on a busy machine. */
#define LP_REPORT_SLICE_NS 2000000u

/* commit.c: the stores of background requests (enumeration, poll pass,
 * refresh of expired entries) on one worker thread per domain, so that
 * the loop answers other clients while a page is written and synced.
 * While a store is there the domain is frozen: lprov_domain_process only
 * waits for it (the loop watches the committer's eventfd instead of the
 * connection), so the worker is the only thread touching the request. */
struct lp_commit;
/* Whether r's stores go to the committer (else lp_store on the loop). */
bool lp_commit_background(const struct lp_req *r);
/* A store of r is waiting to be handed over (r->store_due, r->finish_due). */
bool lp_commit_due(const struct lprov_domain *ld);
/* Hand the first request with a store due to the committer. 0 when none
 * was due or one went; -errno when the thread could not start (the store
 * then ran here, on the loop). */
int lp_commit_kick(struct lprov_domain *ld);
bool lp_commit_busy(const struct lprov_domain *ld);
/* Busy telling the hook what a store changed, a slice per process call. */
bool lp_commit_reporting(const struct lprov_domain *ld);
/* When the committer is done: its store finished here (the hook, the
 * request continued or completed). Whether the domain is free again. */
bool lp_commit_reap(struct lprov_domain *ld);
/* Block until the committer is idle and reap (domain free). */
void lp_commit_drain(struct lprov_domain *ld);
int lp_commit_fd(const struct lprov_domain *ld);
void lp_commit_free(struct lprov_domain *ld);

/* ==== content synchronization (RFC 4533) ==================================== */

/* syncmsg.c: the controls and messages as bytes (hostile input: every
 * length checked, nothing read outside val[0..len)) */
#define LP_UUID_LEN                 16
#define LP_COOKIE_MAX               4096 /* longest cookie kept (OpenLDAP's are < 200 bytes) */
#define LP_OID_SYNC_REQUEST         "1.3.6.1.4.1.4203.1.9.1.1"
#define LP_OID_SYNC_STATE           "1.3.6.1.4.1.4203.1.9.1.2"
#define LP_OID_SYNC_DONE            "1.3.6.1.4.1.4203.1.9.1.3"
#define LP_OID_SYNC_INFO            "1.3.6.1.4.1.4203.1.9.1.4"
#define LP_SYNC_REFRESH_ONLY        1 /* Sync Request modes */
#define LP_SYNC_REFRESH_AND_PERSIST 3
#define LP_E_SYNC_REFRESH_REQUIRED  4096 /* result code: start over without a cookie */
enum { LP_SYNC_PRESENT = 0, LP_SYNC_ADD, LP_SYNC_MODIFY, LP_SYNC_DELETE }; /* Sync State */
enum lp_sync_msg_kind {
	LP_SYNC_MSG_STATE = 1,       /* Sync State control of an entry */
	LP_SYNC_MSG_DONE,            /* Sync Done control of the search's result */
	LP_SYNC_MSG_NEWCOOKIE,       /* Sync Info newcookie */
	LP_SYNC_MSG_REFRESH_DELETE,  /* Sync Info refreshDelete */
	LP_SYNC_MSG_REFRESH_PRESENT, /* Sync Info refreshPresent */
	LP_SYNC_MSG_IDSET,           /* Sync Info syncIdSet */
};
struct lp_sync_msg {
	enum lp_sync_msg_kind kind;
	int state;                       /* STATE: LP_SYNC_PRESENT.. */
	unsigned char uuid[LP_UUID_LEN]; /* STATE */
	const unsigned char *cookie;     /* into the parsed value */
	size_t cookie_len;
	bool has_cookie;
	bool done;            /* REFRESH_*: refreshDone (default TRUE) */
	bool deletes;         /* DONE, IDSET: refreshDeletes (default FALSE) */
	unsigned char *uuids; /* IDSET: nuuids * LP_UUID_LEN bytes (malloc) */
	size_t nuuids;
};
/* 0, -EPROTO for anything but a well-formed value, -ENOMEM. A message
 * parsed by lp_sync_parse_info is released with lp_sync_msg_free. */
int lp_sync_parse_state(const void *val, size_t len, struct lp_sync_msg *m);
int lp_sync_parse_done(const void *val, size_t len, struct lp_sync_msg *m);
int lp_sync_parse_info(const void *val, size_t len, struct lp_sync_msg *m);
void lp_sync_msg_free(struct lp_sync_msg *m);
/* The Sync Request control's value (mode, the cookie when not NULL) into
 * out. 0, -E2BIG for a cookie over LP_COOKIE_MAX, -ENOMEM. */
int lp_sync_request(int mode, const void *cookie, size_t cookie_len, struct idc_buf *out);

/* syncmap.c: directory entries the feed delivered, by entryUUID and by
 * normalized DN: what a delete (a UUID alone), a rename (a new DN and
 * name) and a member DN refer to. */
struct lp_sent {
	struct lp_sent *next_uuid, *next_ndn;
	unsigned char uuid[LP_UUID_LEN];
	char *uname, *gname; /* the user and the group the entry is (either NULL) */
	char *ndn;
	uint32_t seen; /* refresh generation it was last delivered or named in */
};
struct lp_smap {
	struct lp_sent **by_uuid, **by_ndn;
	size_t nb, n;
	uint64_t seed; /* of the hashes: the server picks UUIDs and DNs */
};
struct lp_sent *lp_smap_uuid(const struct lp_smap *m, const unsigned char *uuid);
struct lp_sent *lp_smap_ndn(const struct lp_smap *m, const char *ndn);
/* Add or replace the entry of uuid (strings copied). 0 or -ENOMEM. */
int lp_smap_set(struct lp_smap *m, const unsigned char *uuid, const char *uname, const char *gname,
		const char *ndn, uint32_t seen);
void lp_smap_del(struct lp_smap *m, const unsigned char *uuid);
void lp_smap_free(struct lp_smap *m);
/* The provider-state key of uuid ("e.<32 hex>") and the record's value
 * ("<uname>\n<gname>\n<ndn>"), into out. */
int lp_smap_key(const unsigned char *uuid, char out[40]);
int lp_smap_value(const struct lp_sent *e, struct idc_buf *out);
/* The record back (key and value from the cache); -EINVAL when it is not
 * one (skipped). */
int lp_smap_load(struct lp_smap *m, const char *key, const char *value);
/* Lower-case hex of p[0..n) appended to b; the value of one such digit
 * (-1 for another character). */
int lp_hex_append(struct idc_buf *b, const unsigned char *p, size_t n);
int lp_hex_val(char c);

/* sync.c, syncstore.c: the feeds of a domain */
enum lp_sync_support { LP_SY_UNKNOWN = 0, LP_SY_YES, LP_SY_NO };

/* One change a batch makes to the entryUUID records. */
struct lp_sop {
	unsigned char uuid[LP_UUID_LEN];
	const char *uname, *gname, *ndn; /* both names NULL: the entry is gone */
};

struct lp_sync_feed {
	struct lp_sync *sy;
	int idx;
	const char *base;
	char *filter;
	bool users, groups; /* the kinds it delivers */
	int msgid;          /* 0: not running */
	bool refreshing;
	bool full;  /* the refresh started without a cookie */
	bool sweep; /* a present phase: what it did not name is gone */
	uint32_t gen;
	struct idc_buf cookie; /* as committed */
	bool has_cookie;
	struct idc_buf next; /* to commit with the next batch */
	bool has_next;
	struct lp_req *batch;
	struct lp_search fs; /* what lp_entry reads: the batch */
	struct lp_vec ops;   /* struct lp_sop * (batch arena) */
	struct lp_map touched;
	uint64_t retry_ns; /* not running: start again then */
	uint64_t started_ns;
	uint64_t first_ns; /* persist phase: the open batch's first notice read */
	size_t nrefresh;   /* entries of this refresh phase */
};

struct lp_sync {
	struct lprov_domain *ld;
	enum lp_sync_support support;
	bool loaded; /* cookies and records read from the cache */
	int rootdse_msgid;
	bool rootdse_has;
	int ka_msgid;
	uint64_t ka_deadline_ns, last_msg_ns;
	struct lp_sync_feed feed[2];
	size_t nfeeds;
	struct lp_smap map;
	uint32_t backoff_ms;
	uint64_t down_since_ns; /* 0: live (or never was) */
	bool was_live, fallen_back;
	int64_t cookie_time;
	uint64_t nchanges, nrefreshes, nfull;
};

/* syncstore.c */
void lp_sync_load_state(struct lp_sync *sy);
/* Store f's batch and cookie in one transaction (nothing to store: 0);
 * on failure the feed starts over from the stored cookie. */
int lp_sync_commit(struct lp_sync_feed *f);
int lp_sync_batch_new(struct lp_sync_feed *f);
void lp_sync_batch_drop(struct lp_sync_feed *f);
/* sync.c: stop f (its search abandoned, what it had not committed
 * dropped); it starts again after the jittered backoff. */
void lp_sync_feed_restart(struct lp_sync_feed *f, const char *why);
/* sync.c */
struct lp_sync *lp_sync_new(struct lprov_domain *ld);
void lp_sync_free(struct lprov_domain *ld);
/* Whether msgid is the feed's (a sync search, its rootDSE check or its
 * keepalive): then lp_sync_message takes msg. */
bool lp_sync_owns(const struct lprov_domain *ld, int msgid);
void lp_sync_message(struct lprov_domain *ld, LDAPMessage *msg);
/* The loop's turn: start what is due, commit what a read slice brought. */
void lp_sync_tick(struct lprov_domain *ld, uint64_t now);
uint64_t lp_sync_next_ns(const struct lprov_domain *ld);
/* The connection is gone: the feed is down (what it had not committed of
 * a refresh is dropped; a persist batch is committed). */
void lp_sync_lost(struct lprov_domain *ld);
/* Whether something of the feed runs on the connection (it is not idle). */
bool lp_sync_active(const struct lprov_domain *ld);
/* Whether the cache follows the directory: lookups need no search. */
bool lp_sync_live(const struct lprov_domain *ld);
/* store.c for LP_SYNC: the names the batch removes, and the feed's state
 * written in the batch's transaction */
int lp_sync_gone(struct lp_req *r, struct lp_gone_list *gl);
int lp_sync_store_state(struct lp_req *r, struct cache_txn *t, struct idc_diag *d);
void lp_sync_status(const struct lprov_domain *ld, struct lprov_domain_status *st);
/* Whether the domain has a feed or may have one (not: ldap_sync = poll, or
 * a server without content synchronization). */
bool lp_sync_wanted(const struct lprov_domain *ld);
/* Whether the domain polls (no feed, a server without one, or the feed
 * down past ldap_sync_fallback_timeout). */
bool lp_sync_polls(const struct lprov_domain *ld);

/* poll.c */
bool lp_poll_due(const struct lprov_domain *ld);
void lp_poll_tick(struct lprov_domain *ld, uint64_t now);
uint64_t lp_poll_next_ns(const struct lprov_domain *ld);
/* The users (groups true: the groups) of the pass, paged: changed since
 * the mark, or all for a full pass. */
int lp_wave_poll(struct lp_req *r, bool groups);
/* An entry of the pass: its change moves r->mark. */
void lp_poll_entry(struct lp_req *r, LDAPMessage *msg);
/* The final store of a complete pass: the mark in its transaction, then,
 * committed, in memory. */
int lp_poll_store_state(struct lp_req *r, struct cache_txn *t, struct idc_diag *d);
void lp_poll_committed(struct lp_req *r);

#endif
