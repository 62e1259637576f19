/*
 * lprov, the LDAP provider: users and groups from LDAP directories into
 * the cache (docs/DESIGN.md §6), for a single-threaded epoll daemon.
 *
 * Owns: one libldap connection per domain (a URI list with failover), the
 * in-flight lookups (identical ones coalesced), an in-memory negative
 * cache, the online/offline state, the content synchronization feed
 * (RFC 4533, ldap_sync; docs/DESIGN.md §6.1) with its entryUUID records,
 * and the periodic poll passes (ldap_poll_interval, §6.2). The feed's
 * cookie and records and the poll's mark live in the cache's provider
 * state (cache.h), written in the transactions they describe.
 * May call: cache, util, libldap/liblber, libc.
 *
 * Names: lprov_ / LPROV_ here, lp_ / LP_ inside (lprov_int.h); ldap_ and
 * LDAP_ stay libldap's. This header needs no libldap headers.
 *
 * Wiring into an epoll loop:
 *   lprov_domain_new(cfg, cache) once per domain;
 *   after every lprov_domain_* call, lprov_domain_fds() tells which
 *     descriptors to watch for EPOLLIN (the set changes on reconnect) and
 *     lprov_domain_next_timeout() when to call lprov_domain_process() even
 *     without an event (search deadlines, offline probes, failback);
 *   on EPOLLIN or the timeout: lprov_domain_process().
 *   With a feed (ldap_sync = auto or syncrepl) the domain connects at its
 *   first lprov_domain_process(), not at its first lookup.
 *   A cache miss or an expired entry: lprov_domain_lookup(); when it
 *   returns LPROV_LOOKUP_PENDING the callback runs later, from
 *   lprov_domain_process() (or lprov_domain_free(), with LPROV_LOOKUP_FAILED),
 *   after which the answer is read from the cache.
 *
 * Blocking: nothing blocks the caller's loop. Searches and their results
 * are asynchronous (msgids, results read with a zero timeout when the
 * socket is readable). Connection setup — on the first lookup, on failover
 * and on probes while offline — runs one step at a time: the TCP connect in
 * progress, StartTLS and the bind by message id, and the TLS handshake
 * (libldap has none that returns when the socket would block) on a helper
 * thread the loop hears from through an eventfd; each step has
 * ldap_network_timeout as its deadline.
 *
 * Bounded work: one lprov_domain_process() reads a slice of messages
 * (LP_TURN_MSGS or LP_TURN_MS) and commits a large answer as it comes,
 * the transaction on the domain's committer thread (lprov_domain_fds is
 * then its eventfd);
 * what one server can make a request cost is capped (ldap_max_reply_size
 * per message, ldap_max_entries, ldap_max_searches,
 * ldap_group_nesting_level, ldap_max_memory: see lprov_config).
 */
#ifndef IDC_LPROV_H
#define IDC_LPROV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cache/cache.h"
#include "util/util.h"

/* ==== configuration ====================================================== */

enum lprov_schema { LPROV_RFC2307 = 0, LPROV_RFC2307BIS };

/* ldap_sync: how the cache follows the directory. AUTO: content
 * synchronization (RFC 4533) when the rootDSE lists its control, else
 * POLL; SYNCREPL: content synchronization, and a server without it is
 * polled (logged); POLL: lookups and their expiry only. */
enum lprov_sync_mode { LPROV_SYNC_AUTO = 0, LPROV_SYNC_SYNCREPL, LPROV_SYNC_POLL };

/* ldap_tls_reqcert values, as libldap's LDAP_OPT_X_TLS_* levels. */
enum lprov_reqcert {
	LPROV_REQCERT_NEVER = 0,
	LPROV_REQCERT_ALLOW,
	LPROV_REQCERT_TRY,
	LPROV_REQCERT_DEMAND
};

/* Attribute maps, indexes into lprov_config.map. */
enum lprov_attr {
	LPROV_MAP_USER_NAME = 0, /* ldap_user_name: uid */
	LPROV_MAP_USER_UID,      /* ldap_user_uid_number: uidNumber */
	LPROV_MAP_USER_GID,      /* ldap_user_gid_number: gidNumber */
	LPROV_MAP_USER_GECOS,    /* ldap_user_gecos: gecos */
	LPROV_MAP_USER_HOME,     /* ldap_user_home_directory: homeDirectory */
	LPROV_MAP_USER_SHELL,    /* ldap_user_shell: loginShell */
	LPROV_MAP_USER_OC,       /* ldap_user_object_class: posixAccount */
	LPROV_MAP_GROUP_NAME,    /* ldap_group_name: cn */
	LPROV_MAP_GROUP_GID,     /* ldap_group_gid_number: gidNumber */
	LPROV_MAP_GROUP_MEMBER,  /* ldap_group_member: memberUid / member (2307bis) */
	LPROV_MAP_GROUP_OC,      /* ldap_group_object_class: posixGroup */
	LPROV_MAP_USER_SSH_KEY,  /* ldap_user_ssh_public_key: sshPublicKey (ldapPublicKey) */
	/* Subordinate id ranges on the user's entry, a first id and a count
	 * each: none read unless configured (no standard schema puts them on
	 * the user). Both of a pair or neither (lprov_config_check). */
	LPROV_MAP_USER_SUBUID_NUMBER, /* ldap_user_subuid_number: none */
	LPROV_MAP_USER_SUBUID_COUNT,  /* ldap_user_subuid_count: none */
	LPROV_MAP_USER_SUBGID_NUMBER, /* ldap_user_subgid_number: none */
	LPROV_MAP_USER_SUBGID_COUNT,  /* ldap_user_subgid_count: none */
	LPROV_MAP_COUNT
};

#define LPROV_URIS_MAX 16

/* All strings owned (malloc); times in milliseconds (the config gives
 * seconds, fractions allowed). */
struct lprov_config {
	char *name; /* cache domain */
	char *uris[LPROV_URIS_MAX];
	size_t nuris;
	char *search_base, *user_base, *group_base; /* user/group default to search_base */
	enum lprov_schema schema;
	char *map[LPROV_MAP_COUNT]; /* NULL: the schema's default (subid ones: not read) */
	char *bind_dn;              /* NULL: anonymous */
	char *authtok_file;         /* password file for bind_dn (first line) */
	char *authtok;              /* the password itself (set_authtok), read by the
				     * caller while it could; wiped when freed */
	bool start_tls;
	/* ldap_auth_disable_tls_never_use_in_production (sssd's name): allow
	 * a bind password over plain ldap:// without StartTLS, which
	 * lprov_config_check refuses otherwise. */
	bool insecure_bind;
	char *tls_cacert;
	enum lprov_reqcert tls_reqcert;
	uint32_t network_timeout_ms;  /* ldap_network_timeout: 6 s */
	uint32_t search_timeout_ms;   /* ldap_search_timeout: 6 s */
	uint32_t page_size;           /* ldap_page_size: 1000 */
	uint32_t entry_cache_timeout; /* seconds; 5400 */
	/* entry_cache_nowait_percentage (sssd's): a lookup of an entry older
	 * than this percentage of its lifetime (at least 10 s) is answered from
	 * the cache and refreshed behind; 0 = never. 0-99; 50. */
	uint32_t nowait_percentage;
	uint32_t negative_timeout_ms; /* entry_negative_timeout: 15 s */
	uint32_t refresh_expired_ms;  /* refresh_expired_interval: 0 = off */
	uint32_t offline_timeout_ms;  /* offline_timeout: first probe delay, 60 s */
	uint32_t primary_retry_ms;    /* failover_primary_timeout: 31 s */
	/* min_id / max_id (sssd.conf): users whose uidNumber or gidNumber and
	 * groups whose gidNumber fall outside min_id..max_id are ignored
	 * (logged once with the DN), and lookups by such an id are NOTFOUND
	 * without a search. Defaults 1 and 0 (no upper limit): a directory
	 * cannot hand out uid 0 or gid 0 unless min_id = 0 says so. */
	uint32_t min_id, max_id;
	bool enumerate;
	bool ignore_group_members;
	/* ldap_member_names_from_rdn (default true): a member DN of the form
	 * "<ldap_user_name>=NAME,<below the user base>" names user NAME
	 * without fetching the entry (an RDN value is always one of the
	 * entry's values; X.501). Such members are stored as names the cache
	 * may not hold as users yet (fetched on their own lookup). false:
	 * every member DN is fetched (in batches) and every member user is
	 * cached. */
	bool member_names_from_rdn;
	/* What one directory may make a request cost (a hostile or
	 * impersonated server included): */
	uint32_t max_reply_bytes;  /* ldap_max_reply_size: one LDAP message, 64 MiB;
				    * a larger one drops the connection */
	uint32_t max_entries;      /* ldap_max_entries: entries one lookup,
				    * enumeration or refresh takes, 100000 */
	uint32_t nesting_level;    /* ldap_group_nesting_level: nested group
				    * levels followed up and down, 32 */
	uint32_t max_searches;     /* ldap_max_searches: searches one request
				    * sends (pages not counted), 500 */
	uint32_t max_memory;       /* ldap_max_memory: bytes the requests in
				    * flight hold for what they read, 128 MiB */
	enum lprov_sync_mode sync; /* ldap_sync: auto */
	/* ldap_sync_fallback_timeout: how long the feed may be down before
	 * lookups search and entries expire again as when polling, 300 s */
	uint32_t sync_fallback_ms;
	/* ldap_sync_keepalive: a quiet feed's connection is checked (an
	 * extended operation, not a search) this often, 60 s; 0 never */
	uint32_t sync_keepalive_ms;
	/* ldap_poll_interval: without a live feed, every user and group
	 * changed since the last pass is fetched this often (jittered); 0
	 * (default) never. ldap_poll_full_interval: every so often the pass
	 * fetches everything and removes what the directory no longer has,
	 * 3600 s; 0: only the first pass. */
	uint32_t poll_ms, poll_full_ms;
};

/* Defaults for domain name. 0 or -ENOMEM. */
int lprov_config_init(struct lprov_config *c, const char *name);
void lprov_config_free(struct lprov_config *c);
/* Apply one "key = value" (sssd.conf names). 0; -ENOENT for a key this
 * provider does not know; -EINVAL for a bad value (d says why). ldap_uri
 * is a comma/space separated list. */
int lprov_config_set(struct lprov_config *c, const char *key, const char *value,
		     struct idc_diag *d);
/* The bind password itself (len bytes, no NUL needed), replacing any
 * earlier one, which is wiped: the daemon reads ldap_default_authtok_file
 * while still root and hands the secret over, so the provider does not
 * open the file (it reads it with lprov_read_authtok only when no
 * secret was handed over). 0 or -ENOMEM. */
int lprov_config_set_authtok(struct lprov_config *c, const char *secret, size_t len);
/* The bind password in path, the one policy for ldap_default_authtok_file:
 * opened without following a symbolic link; the descriptor read must be a
 * regular file with no group or other permission bits, owned by root, by
 * this process's user or by also_owner ((uid_t)-1: nobody else); its first
 * line, not empty. *out: malloc'd, the caller wipes and frees it. d says
 * why a file is refused, without the path. -EACCES when it cannot be
 * opened for permission (the caller may keep an earlier password). */
int lprov_read_authtok(const char *path, uid_t also_owner, char **out, struct idc_diag *d);
/* Check the whole config (uris, bases, a password when binding, min_id
 * <= max_id, no bind password over plain ldap:// without StartTLS unless
 * insecure_bind). */
int lprov_config_check(const struct lprov_config *c, struct idc_diag *d);

/* ==== domain ============================================================== */

struct lprov_domain;

/* Copies cfg; keeps c (which must outlive the domain). Connects nothing
 * yet. 0, -EINVAL (d says why) or -ENOMEM. */
int lprov_domain_new(const struct lprov_config *cfg, struct cache *c, struct lprov_domain **out,
		     struct idc_diag *d);
/* Completes pending lookups with LPROV_LOOKUP_FAILED, then frees. */
void lprov_domain_free(struct lprov_domain *ld);
/* Waits for a store in flight and tells its changes to the hook: called
 * for every domain before any is freed, since the hook may look at the
 * others (lprov_domain_free does the same, for a domain freed alone). */
void lprov_domain_drain(struct lprov_domain *ld);

/* ==== lookups ============================================================= */

enum lprov_lookup_kind {
	LPROV_LOOKUP_PWNAM = 1,
	LPROV_LOOKUP_PWUID,
	LPROV_LOOKUP_GRNAM,
	LPROV_LOOKUP_GRGID,
	LPROV_LOOKUP_INITGROUPS, /* the user, its groups and their ancestors */
	LPROV_LOOKUP_ENUMERATE,  /* everything, paged (key unused) */
};

enum lprov_lookup_result {
	LPROV_LOOKUP_PENDING = 0, /* went out; the callback will say */
	LPROV_LOOKUP_FOUND,       /* the cache now holds the answer */
	LPROV_LOOKUP_NOTFOUND,    /* the directory has no such entry (negative-cached) */
	LPROV_LOOKUP_OFFLINE,     /* no server answers: serve the cache, expired or not */
	LPROV_LOOKUP_FAILED,      /* the answer could not be stored (d logged) */
};

typedef void (*lprov_lookup_cb)(enum lprov_lookup_result res, void *arg);

/* Look up name (PWNAM, GRNAM, INITGROUPS) or id (PWUID, GRGID). Returns
 * LPROV_LOOKUP_PENDING and calls cb exactly once later, or returns another
 * result at once (negative cache hit, offline, invalid name) without
 * calling cb. A lookup identical to one in flight joins it. */
enum lprov_lookup_result lprov_domain_lookup(struct lprov_domain *ld, enum lprov_lookup_kind kind,
					     const char *name, uint32_t id, lprov_lookup_cb cb,
					     void *arg);

/* ==== event loop =========================================================== */

/* Descriptors to watch for EPOLLIN: writes up to max into fds, returns how
 * many there are (0 or 1). */
size_t lprov_domain_fds(const struct lprov_domain *ld, int *fds, size_t max);
/* Milliseconds until lprov_domain_process() must run without an event, or
 * -1 when nothing is scheduled. */
int64_t lprov_domain_next_timeout(const struct lprov_domain *ld);
/* Read what the server sent (never blocks), handle deadlines, probes and
 * failback. Callbacks of finished lookups run from here. */
void lprov_domain_process(struct lprov_domain *ld);
/* Offline: probe the servers at the next lprov_domain_process instead of
 * when the backoff ends (the admin says a server is back); a failed probe
 * waits offline_timeout again. Online: nothing. */
void lprov_domain_retry_now(struct lprov_domain *ld);

/* The domain's cached entries were marked expired (idcache expire, or an
 * expired entry served). With a live sync feed the feed refreshes in full
 * (without its cookie), which stores every entry fresh again; otherwise
 * nothing: lookups refresh what they find expired. */
void lprov_domain_expired(struct lprov_domain *ld);

/* ==== change reports ========================================================= */

/* After a transaction of the domain commits, the hook hears (struct
 * cache_change, moved always false) of every user and group whose stored
 * record changed: added (old_name NULL), removed
 * (new_name NULL), or changed in place (both set and equal; a name whose
 * case changed is reported as a removal and an addition). Strings and
 * member lists are valid during the call only. Entries stored with the
 * content the cache held are not reported. A call with ch NULL means the
 * changes of a commit could not be told (out of memory, the cache could
 * not be read before writing): anything may have changed.
 * Report the changes of later commits to fn(ch, arg); fn NULL: stop. */
void lprov_domain_set_hook(struct lprov_domain *ld, cache_change_fn fn, void *arg);

/* ==== messages =============================================================== */

/* Log fmt once per distinct message, in the set the provider's own
 * "logged once" warnings use (lp_log_once), for the daemon's notes about
 * this domain's entries. The message is remembered even when level is
 * not logged. Whether it is new; false once the set is full. */
bool lprov_domain_log_once(struct lprov_domain *ld, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ==== status =============================================================== */

struct lprov_domain_status {
	bool online;
	int64_t since;          /* unix seconds the state began */
	const char *server;     /* URI in use, or NULL (valid until the next call) */
	const char *last_error; /* last connection error, "" if none */
	/* the last answer the cache could not store ("" if none), when
	 * (unix seconds, 0 never), and how many could not be */
	const char *store_error;
	int64_t store_error_time;
	uint64_t store_failures;
	uint64_t searches;      /* searches sent */
	uint64_t lookups;       /* lookups started (not joined, not answered at once) */
	uint64_t joined;        /* lookups that joined one in flight */
	uint64_t negative_hits; /* answered NOTFOUND from the negative cache */
	uint64_t commits;       /* cache transactions committed */
	size_t in_flight;
	/* lprov_domain_process calls, the longest in the loop thread's CPU
	 * time (what the domain held the loop for, whatever else the machine
	 * ran), and how many took more than 10 ms of it */
	uint64_t turns, turn_cpu_max_us, turns_over_10ms;
	/* content synchronization: "poll" (not used), "refreshing", "live"
	 * or "down" */
	const char *sync;
	int64_t sync_cookie_time; /* unix seconds the cookie was stored; 0 none */
	uint64_t sync_entries;    /* directory entries the feed holds */
	uint64_t sync_changes;    /* entries added, changed or deleted by the feed */
	uint64_t sync_refreshes;  /* refresh phases completed */
	uint64_t sync_full;       /* of which full refreshes (no or a refused cookie) */
};
void lprov_domain_get_status(const struct lprov_domain *ld, struct lprov_domain_status *st);

#endif
