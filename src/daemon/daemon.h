/*
 * idcached internals: the state one daemon process holds and the entry
 * points of its parts. Internal header of src/daemon only.
 *
 * Files, one role each:
 *   main.c       command line, start-up order, shutdown
 *   config.c     idcache.conf (config.h)
 *   loop.c       epoll, timers, deferred frees (loop.h)
 *   privs.c      directories, ownership, dropping root
 *   listen.c     the two Unix sockets and accepting connections
 *   conn.c       one client connection: framing, HELLO, output queue,
 *                back-pressure, idle timeout
 *   budget.c     memory and snapshot builds charged to each peer uid
 *   responder.c  NSS requests: lookups and enumeration
 *   admin.c      admin requests: status, expire, reload, user/group info
 *   domains.c    per-domain provider state: files refresh, inotify, timers
 *   ldapdom.c    ldap domains: the provider in the loop, deferred lookups,
 *                status
 *   reload.c     re-reading the configuration (SIGHUP, RELOAD)
 *   memcache.c   the shared-memory cache maps (src/mc): writing, dropping
 *   nscdmaps.c   glibc's nscd maps (src/nscddb), kept beside the mc maps
 *   reaper.c     closing client descriptors off the loop thread
 *   peers.c      per-uid accounts: connections, unread map descriptors
 *   precedence.c what a domain may not serve: filters, overlap with the
 *                host's files and earlier domains
 *   userdb.c     systemd's user database socket (Varlink, src/userdb):
 *                its calls answered through the responder
 *   subid.c      subordinate id ranges (SUBIDS, SUBID_OWNERS)
 *   nscd.c       the nscd protocol's socket: requests, answers via the
 *                responder, GETFD replies
 *   nscdhost.c   the host's other NSS sources for that socket, off the
 *                loop; its negative answers
 *   nscdmaps.c   glibc's persistent-database maps handed out by GETFD
 */
#ifndef IDC_DAEMON_H
#define IDC_DAEMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "cache/cache.h"
#include "daemon/config.h"
#include "daemon/loop.h"
#include "mc/mc.h"
#include "nscd/nscd.h"
#include "proto/proto.h"
#include "providers/files/files.h"
#include "util/util.h"

#define DAEMON_IDLE_MS       60000u                /* close a connection silent this long */
#define DAEMON_SWEEP_MS      5000u                 /* how often idle connections are looked for */
#define DAEMON_OUT_HIGH      (256u * 1024u)        /* stop taking requests above this backlog */
#define DAEMON_OUT_MAX       (64u * 1024u * 1024u) /* close a client whose backlog passes this */
#define DAEMON_IN_MAX        (64u * 1024u)         /* stop reading above this much unparsed input */
#define DAEMON_CMD_MAX       40u                   /* request counters by command number */
#define DAEMON_RETRY_MS      10000u                /* after a failed refresh */
#define DAEMON_POLL_MS       30000u        /* refresh interval when inotify is unavailable */
#define DAEMON_EXPIRED_MIN_S 60            /* at most one expiry-driven refresh per domain */
#define DAEMON_OUT_KEEP      (64u * 1024u) /* an output buffer larger than this is freed once sent */
#define DAEMON_UID_MEM       (64u * 1024u * 1024u)  /* output and snapshots one peer uid may hold */
#define DAEMON_MEM_TOTAL     (512u * 1024u * 1024u) /* past this, each uid gets a fair share */
/* A uid may build an enumeration snapshot again only after SPACING times
 * its last build took (at most WAIT_MAX_MS): its builds take at most a
 * tenth of the loop, and a small map waits for nothing noticeable. */
#define DAEMON_SNAP_SPACING     10u
#define DAEMON_SNAP_WAIT_MAX_MS 2000u
#define DAEMON_BIG_REPLY        (64u * 1024u) /* a group record kept packed past this */
#define DAEMON_BIG_KEEP         4u            /* that many kept at once */

/* Per-uid limits (peers.c, listen.c); the numbers are in config_limits */
#define DAEMON_SHED_IDLE_MS 1000u  /* silent this long: may be closed for a newcomer */
#define DAEMON_WARN_MS      60000u /* one warning per uid and cause this often */

/* Descriptors passed to us (reaper.c) */
#define DAEMON_PASSED_FDS_MAX 253  /* the kernel's SCM_MAX_FD: most in one message */
#define DAEMON_SCM_PIDFD      0x04 /* SCM_PIDFD where the headers lack it */

/* ---- one served domain (domains.c) ------------------------------------------ */
struct daemon;
struct nscddb;

struct domain {
	struct daemon *dm;
	const struct config_domain *cfg; /* points into dm->cfg */
	struct files_domain *files;
	struct files_watch *watch;
	struct loop_io watch_io;
	struct loop_timer refresh; /* debounce / retry / poll */
	struct loop_timer retry;   /* re-watch missing directories */
	bool loaded;               /* a refresh succeeded since start */
	bool attempted;            /* a refresh ran (for the "ready" line) */
	uint64_t start_ns;         /* creation time, until the first load is logged */
	bool invalidate;           /* next refresh re-stores everything */
	int64_t last_refresh;      /* unix time of the last successful refresh */
	int64_t last_expired_refresh;
	uint64_t refresh_ok, refresh_failed;
	uint64_t last_refresh_ms;
	struct files_refresh_stats last;
	char last_error[512];
	struct ldapdom *ldap; /* id_provider = ldap (ldapdom.c); NULL for files */
	uint64_t withheld;    /* distinct entries not served (precedence.c) */
};

int domain_new(struct daemon *dm, const struct config_domain *cfg, struct domain **out);
/* Release now (at shutdown) or after the current batch (domain_retire). */
void domain_free(struct domain *d);
void domain_retire(struct domain *d);
/* Refresh after delay_ms unless a refresh is due sooner; invalidate: store
 * every record again (renewing timestamps), not only the changes. */
void domain_schedule(struct domain *d, uint64_t delay_ms, bool invalidate);
/* Refresh now; 0 or the refresh's error (logged here). */
int domain_refresh(struct domain *d);
/* Whether two configurations need no new provider state to switch. */
bool domain_same_source(const struct config_domain *a, const struct config_domain *b);
struct domain *daemon_domain(struct daemon *dm, const char *name);
/* Whether the cache holds what d's source says: an ldap domain, or a files
 * domain whose last refresh succeeded (and one did since start). A files
 * domain that is not current cannot say a name is absent (responder.c). */
bool domain_current(const struct domain *d);

/* ---- ldap domains (ldapdom.c) ------------------------------------------------
 * The provider of an `id_provider = ldap` domain in the loop. Every call
 * into the provider is followed by re-watching its descriptor and timer. */
struct ldapdom;
/* Create d->ldap from d->cfg->ldap. 0 or -errno (logged). */
int ldapdom_new(struct domain *d);
/* Stop watching (domain_retire: events of this batch may still come). */
void ldapdom_close_io(struct ldapdom *l);
/* Finish a store in flight (stop: before any domain is freed). */
void ldapdom_drain(struct ldapdom *l);
/* Free; pending lookups complete with LPROV_LOOKUP_FAILED first. */
void ldapdom_free(struct ldapdom *l);
/* lprov_domain_lookup on d's provider (lprov.h: PENDING and cb later, or
 * an immediate result without cb). */
enum lprov_lookup_result ldapdom_lookup(struct domain *d, enum lprov_lookup_kind kind,
					const char *name, uint32_t id, lprov_lookup_cb cb,
					void *arg);
/* Refresh an entry in its refresh window in the background (no callback). */
void ldapdom_refresh(struct domain *d, enum lprov_lookup_kind kind, const char *name, uint32_t id);
/* Whether name's group list was fetched from the directory since start
 * (until then the cache may hold only some of its groups), and whether
 * that fetch is older than entry_cache_timeout or an expire; *at (may be
 * NULL): when it was, unix seconds (0 for UNKNOWN and after an expire). */
enum ldapdom_ig { LDAPDOM_IG_UNKNOWN = 0, LDAPDOM_IG_FRESH, LDAPDOM_IG_EXPIRED };
enum ldapdom_ig ldapdom_initgroups_state(const struct domain *d, const char *name, int64_t *at);
void ldapdom_initgroups_note(struct domain *d, const char *name);
/* `idcache expire`: every group list fetched counts as expired. */
void ldapdom_expire(struct ldapdom *l);
void ldapdom_status(const struct domain *d, struct lprov_domain_status *st);
/* Log msg (WARN) once per distinct text, in the provider's log-once set;
 * whether it is new. */
bool ldapdom_note_once(struct domain *d, const char *msg);
/* An offline domain probes its servers now, not when its backoff ends
 * (SIGUSR2). Not ldap, or online: nothing. */
void ldapdom_retry_now(struct domain *d);

/* ---- one client connection (conn.c) ---------------------------------------- */
struct budget_uid;
struct snap_holder {
	struct budget_uid *uid;
	unsigned cursors;
};

/* One map's enumeration in wire encoding, built once per cache state and
 * shared (reference-counted) by every connection walking it: a thousand
 * enumerating clients cost one copy, and only the first pays the build. */
struct enum_snap {
	unsigned refs;
	uint64_t gen;        /* daemon_data_gen() when built */
	struct idc_buf recs; /* records back to back */
	size_t *offs;        /* start of record i; offs[n] = recs.len */
	size_t n, cap;
	/* The uids whose cursors hold it, each charged its size once
	 * (budget.c): a uid pays for each distinct snapshot it keeps alive. */
	struct snap_holder *holders;
	size_t nholders;
};

/* A large group reply kept packed (responder.c). */
struct big_reply {
	uint64_t gen; /* daemon_data_gen() when read */
	uint32_t cmd, id;
	char name[PROTO_NAME_MAX + 1];
	int64_t expires;       /* unix seconds; 0: never */
	struct enum_snap *rec; /* one record; NULL: slot unused */
};

struct enum_cursor {
	struct enum_snap *snap; /* NULL: not started */
	size_t pos;
	struct budget_uid *uid; /* charged for snap */
};

/* Release one reference (the last frees it). */
void enum_snap_put(struct enum_snap *s);

struct conn {
	struct loop_io io;
	struct daemon *dm;
	struct conn *prev, *next;
	bool admin;   /* came in on admin.sock */
	bool greeted; /* HELLO accepted */
	bool closing; /* close once the output is flushed */
	bool peer_ok; /* admin: root or the daemon's uid */
	uid_t peer_uid;
	pid_t peer_pid;
	struct budget_uid *uid; /* what the peer's uid is charged (NULL: no memory) */
	struct proto_reader rd;
	struct idc_buf out;
	size_t out_off;     /* bytes of out already sent */
	size_t out_charged; /* out.cap as charged to uid */
	/* After out: records of an enumeration reply sent straight from its
	 * snapshot (a reference held), so a reply left unread costs no copy.
	 * No request is taken while it waits: nothing may follow it in out. */
	struct enum_snap *tail;
	size_t tail_off, tail_end;
	bool mem_wait; /* uid over budget: takes no request until woken */
	/* The last answering stopped at the backlog's high mark, with work
	 * left (a streaming call, requests already read): sending the backlog
	 * must start it again, as no read may come to (conn.c). */
	bool backlogged;
	/* A request waiting for its uid's next build (responder.c); no later
	 * request is taken meanwhile. */
	bool held;
	struct proto_req held_req; /* name in held_name */
	char held_name[PROTO_NAME_MAX + 1];
	uint64_t held_until; /* idc_now_ns() */
	uint64_t held_build; /* ... for the snapshot build of this serial (held_until unused) */
	/* The last INITGROUPS answer's bound (answer_until, responder.c):
	 * the nscd maps keep the merged list no longer than nss.sock's maps. */
	int64_t ig_until;
	uint64_t last_active_ns;
	struct enum_cursor pw, gr;
	/* A request waiting for a directory (responder.c): no later request
	 * of this connection is taken until its reply is queued. */
	struct pending *wait;
	bool eof; /* the peer is done sending: close once wait is answered */
	/* Maps (bit per MC kind) whose descriptors go with the byte at out
	 * offset pass_at (an MCMAP reply), taken from the writers when that
	 * byte is sent: a client that does not read holds none of ours. One
	 * reply's at a time: no request is taken while they wait. */
	uint32_t pass_maps;
	size_t pass_at;
	bool mapped; /* MCMAP answered: one per connection (see memcache.c) */

	/* Its uid's account (peers.c; NULL on admin.sock), and whether the
	 * descriptors of its MCMAP reply went out and may still be unread. */
	struct peer *peer;
	bool maps_unread;

	/* On the userdb socket: its Varlink state (userdb.c), which reads
	 * instead of rd and takes the responder's replies; else NULL. */
	struct udb_conn *udb;
	/* Came in on the nscd socket: its request and answer (nscd.c);
	 * NULL on the other sockets. */
	struct nscd_conn *nscd;
};

/* Queue the reply frame starting at out offset at to carry the
 * descriptors of the maps in mask (bit per MC kind). */
void conn_pass_maps(struct conn *c, uint32_t mask, size_t at);
/* Take over an accepted socket whose peer is cred (SO_PEERCRED; uid -1
 * when unknown). 0 or -errno (fd closed). */
int conn_new(struct daemon *dm, int fd, bool admin, const struct ucred *cred);
/* conn_new, returning the connection; NULL (fd closed) on failure. */
struct conn *conn_create(struct daemon *dm, int fd, bool admin, const struct ucred *cred);
/* Whether c may take its next request now: not closing, nothing waiting
 * for a directory, a build, descriptors or a tail, output under
 * DAEMON_OUT_HIGH and its uid under budget (its output charged first). */
bool conn_may_take(struct conn *c);
/* Where the responder puts c's replies: c->out, or on the userdb socket
 * the buffer userdb.c reads them from. */
struct idc_buf *conn_reply_buf(struct conn *c);
/* conn_create; nscd: an nscd socket's connection (nscd.c frames it). */
struct conn *conn_new_kind(struct daemon *dm, int fd, bool admin, bool nscd,
			   const struct ucred *cred);
/* Release the tail (its records are not to be sent). */
void conn_drop_tail(struct conn *c);
/* Nothing under way: no request waiting or buffered, no output. */
bool conn_idle(const struct conn *c);
/* Close and free (after the current batch). */
void conn_close(struct conn *c, const char *why);
/* Close connections idle for DAEMON_IDLE_MS. */
void conn_sweep(struct daemon *dm);
/* The reply of c's waiting request was queued (rc 0) or could not be
 * built (rc < 0: close): take its next requests, flush, re-arm. */
void conn_resume(struct conn *c, int rc);
/* Send s->recs[off, end) after what c's output holds now (takes a reference). */
void conn_queue_tail(struct conn *c, struct enum_snap *s, size_t off, size_t end);
/* After the current batch, go on with the connections waiting for memory
 * whose uid is back under budget. */
void conn_wake_later(struct daemon *dm);

/* ---- request handlers ---------------------------------------------------------
 * Append the reply (one frame) to out. Return 0, or <0 only when out of
 * memory (the connection is then closed). */
int responder_handle(struct conn *c, const struct proto_req *req, struct idc_buf *out);
/* req (INITGROUPS, SSHKEYS, SUBIDS: by name) about one identity already
 * answered: the user named req->name whose uid is uid. Domains whose user
 * of that name has another uid are passed over, so a record's groups,
 * keys and ranges are its own user's (docs/DESIGN.md §11); NOTFOUND when
 * no domain serves that identity by that name. The maps are not told: they
 * answer the name alone. */
int responder_handle_user(struct conn *c, const struct proto_req *req, uint32_t uid,
			  struct idc_buf *out);
/* The password field served for a kept one (cache_user.passwd): itself
 * when cache_passwd_public() allows it, else "x". */
const char *daemon_passwd_field(const char *kept);
/* The connection closes: its waiting request, if any, is answered to no one. */
void responder_detach(struct conn *c);
void enum_cursor_free(struct daemon *dm, struct enum_cursor *e);
/* The held timer: held requests whose wait is over are answered. */
void responder_held_timer(struct loop_timer *t);
/* The snapshot timer: one slice of the snapshots being built. */
void responder_snap_timer(struct loop_timer *t);
/* At stop, once no connection is left: drop the builds under way. */
void responder_builds_stop(struct daemon *dm);
/* Drop the kept large group replies (`idcache expire`, shutdown). */
void responder_forget_replies(struct daemon *dm);
int admin_handle(struct conn *c, const struct proto_req *req, struct idc_buf *out);
/* Close the reply frame begun at start with rc so far: 0 ends it; a
 * failure replaces it with ERROR (logged). 0, or <0 out of memory. */
int responder_finish(struct idc_buf *out, uint32_t cmd, size_t start, int rc);

/* ---- subordinate ids (subid.c) ----------------------------------------------
 * The replies to SUBIDS for user u of domain i, which the responder's walk
 * found by passwd's rule, and to SUBID_OWNERS. Return as the handlers
 * above. */
int subid_reply_ranges(struct daemon *dm, size_t i, const struct cache_user *u,
		       const struct proto_req *req, struct idc_buf *out);
int subid_reply_owners(struct daemon *dm, const struct proto_req *req, struct idc_buf *out);
/* Free what subid.c keeps (at shutdown). */
void subid_free(struct daemon *dm);
/* USERINFO's lines for u of domain i: "subuid=START COUNT (SOURCE)", or
 * "subuid=none" with why; subgid likewise. Nothing is logged. */
void subid_user_info(struct daemon *dm, size_t i, const struct cache_user *u, struct idc_buf *b);

/* The read transaction shared by the requests of one connection's batch,
 * begun on first use and ended by daemon_reader_end. NULL on failure. */
struct cache_reader *daemon_reader(struct daemon *dm);
void daemon_reader_end(struct daemon *dm);

/* ---- which entries a domain may serve (precedence.c) ------------------------
 * Whether domain i's user or group is withheld (filter_users/_groups, or a
 * remote domain's entry whose name or id the host's files or an earlier
 * domain hold): answered as if the domain did not hold it. The first time,
 * logged with its DN and counted in the domain's `withheld`. */
bool daemon_user_withheld(struct daemon *dm, size_t i, const struct cache_user *u);
bool daemon_group_withheld(struct daemon *dm, size_t i, const struct cache_group *g);
/* The same check, without logging or counting, for the admin's info: why
 * domain i's entry is withheld as a short static string ("filter_users",
 * "local name", "earlier domain id", ...), or NULL when it is served. */
const char *daemon_withheld_reason(struct daemon *dm, size_t i, bool group, const char *name,
				   uint32_t id);
/* The error of a withholding check that could not be made since the last
 * call (0: none), cleared. Such a check withholds; a lookup it touched
 * must fail with this error, not go on to the next domain. */
int daemon_checks_failed(struct daemon *dm);
/* Remove from gids[0..*n), the group list of a user of domain i, the gids
 * of its withheld groups. */
void daemon_gids_withhold(struct daemon *dm, size_t i, uint32_t *gids, size_t *n);
/* The gids of user name of domain i as cache_initgroups gives them on r
 * (nested groups followed as for daemon_group_members_kept), into dm->gids,
 * grown as needed; *n their count. The withheld groups' own gids are left
 * for daemon_gids_withhold. 0, -ENOENT (no such user) or an error. */
int daemon_user_gids(struct daemon *dm, size_t i, struct cache_reader *r, const char *name,
		     bool case_sensitive, size_t *n);
/* The member list domain i serves for its group g (a record just read
 * on daemon_reader): the users of its member groups added
 * (cache_group_members, to the domain's ldap_group_nesting_level, passing
 * over withheld member groups and what is nested only through them), then
 * the names filter_users lists dropped. g->members then points into the
 * reader's or dm's scratch, valid until the next call. 0 or -ENOMEM. */
int daemon_group_members_kept(struct daemon *dm, size_t i, struct cache_group *g);
/* Which holder may have a user or group id in lo..hi: the name of the
 * first domain that may (an ldap domain: its min_id..max_id, max_id 0
 * being no bound; a files domain: an id it holds), "the host's files"
 * (no files domain: /etc/passwd and /etc/group as read here), or NULL
 * when none may. A subordinate id range is served only when NULL. */
const char *daemon_ids_held(struct daemon *dm, uint32_t lo, uint32_t hi);
/* A number that changes whenever what these checks see may have (a
 * commit, a reload, the host's files read again): what is derived from
 * them may be kept while it stays. */
uint64_t daemon_checks_gen(struct daemon *dm);
/* End the checks' reader (with daemon_reader_end); free the host files
 * and what the checks remember. */
void daemon_aside_end(struct daemon *dm);
void daemon_host_free(struct daemon *dm);
/* The sweep: notice a change of the host's files even while every lookup
 * is a memory-cache hit. */
void daemon_host_check(struct daemon *dm);

/* ---- per-uid budgets (budget.c) ---------------------------------------------
 * Charges are kept in bytes; a NULL uid (no memory for the entry) is never
 * charged nor limited. */
/* The entry of uid, counting one more user of it; NULL when out of memory. */
struct budget_uid *budget_get(struct daemon *dm, uid_t uid);
void budget_put(struct daemon *dm, struct budget_uid *u);
/* Free unused entries (all: every entry, at shutdown). */
void budget_sweep(struct daemon *dm, bool all);
/* Whether u's connections must stop taking requests. */
bool budget_over(const struct daemon *dm, const struct budget_uid *u);
/* An output buffer charged old bytes now holds now. */
void budget_charge_out(struct daemon *dm, struct budget_uid *u, size_t old, size_t now);
/* Whether u may start holding one more snapshot of size bytes. */
bool budget_snap_admit(const struct daemon *dm, const struct budget_uid *u, size_t size);
void budget_charge_snap(struct daemon *dm, struct budget_uid *u, size_t size, bool add);
/* How long (ns) u must wait before building a snapshot; 0: now. */
uint64_t budget_build_wait(const struct budget_uid *u, uint64_t now);
/* u built a snapshot at now, which took took_ns. */
void budget_built(struct budget_uid *u, uint64_t now, uint64_t took_ns);

/* ---- systemd's user database (userdb.c) --------------------------------------
 * A Varlink socket (io.systemd.UserDatabase) counted and limited as
 * nss.sock is (its connections share each uid's account), whose calls are
 * answered by the responder: the same domain walk, precedence, waits for
 * directories and budgets. */
struct udb_conn;
/* Bind the socket cfg->userdb.socket names, if any (as root, before
 * the drop; its directory created 0755 when missing). 0 or -errno, logged. */
int userdb_open(struct daemon *dm, const struct config *cfg);
int userdb_start(struct daemon *dm);
void userdb_close(struct daemon *dm);
/* An accepted connection of the socket (as conn_new). */
int userdb_conn_new(struct daemon *dm, int fd, const struct ucred *cred);
void userdb_conn_free(struct conn *c);
/* Bytes received; what is buffered and not taken yet. */
int userdb_feed(struct conn *c, const void *p, size_t n);
size_t userdb_buffered(const struct conn *c);
/* Whether a call of c is under way (its replies not all queued). */
bool userdb_active(const struct conn *c);
/* Take c's calls while conn_may_take allows. 0, or <0: close c. */
int userdb_process(struct conn *c);
struct idc_buf *userdb_reply_buf(struct conn *c);
/* Its lines of `idcache status`. */
void userdb_status(struct daemon *dm, struct idc_buf *b);

/* ---- listeners (listen.c) --------------------------------------------------- */
struct listener {
	struct loop_io io;
	struct daemon *dm;
	char path[108];
	bool admin;
	bool userdb;      /* the userdb socket: connections through userdb_conn_new */
	bool nscd;        /* the nscd socket (its connections count as nss.sock's) */
	bool refuses_fds; /* SO_PASSRIGHTS is off */
};

/* Create, bind (mode), listen; refuses to replace a socket a live daemon
 * answers on. 0 or -errno, logged. */
int listener_open(struct daemon *dm, struct listener *l, const char *path, mode_t mode, bool admin);
/* The nscd socket (0666): refuses, naming nscd, to replace a socket that
 * another process answers on. */
int listener_open_nscd(struct daemon *dm, struct listener *l, const char *path);
int listener_start(struct daemon *dm, struct listener *l);
/* Raise the open-file limit (up to the hard one) to what cfg's connection
 * limits need: at start and at every configuration applied. */
void listener_fd_budget(const struct config *cfg);
/* Close and remove the socket file. */
void listener_close(struct listener *l);

/* ---- per-uid accounting (peers.c) ---------------------------------------------- */
struct peer {
	uid_t uid;
	unsigned conns;       /* open nss.sock connections */
	unsigned unread_maps; /* MCMAP replies whose descriptors may be unread */
	uint64_t warned_ns;   /* peer_warn_due */
	uint64_t warned_maps_ns;
	struct peer *next;
};

struct peers;
/* uid's account, or NULL when it holds nothing. */
struct peer *peer_find(struct daemon *dm, uid_t uid);
/* uid's account, created when missing; NULL when out of memory. */
struct peer *peer_get(struct daemon *dm, uid_t uid);
/* Forget p if it holds nothing any more (p may be NULL). */
void peer_put(struct daemon *dm, struct peer *p);
/* Whether a warning about p is due (at most one per DAEMON_WARN_MS). */
bool peer_warn_due(struct peer *p);
/* Close the lingerers; free every account. */
void peers_free(struct daemon *dm);
/* c's MCMAP reply went out with its descriptors. */
void peer_maps_sent(struct conn *c);
/* The kernel refused to send c's map descriptors (ETOOMANYREFS): counted,
 * logged once per DAEMON_WARN_MS. */
void peer_maps_failed(struct conn *c);
/* Whether c may have the maps: its uid holds fewer unread replies than
 * max_unread_maps_per_uid and all uids fewer than the open-file limit
 * allows. A refusal is counted and logged (once per DAEMON_WARN_MS). */
bool peer_may_map(struct conn *c);
/* At c's close: whether its socket was kept because its reply is still
 * unread (then c->io is forgotten, not closed). */
bool peer_linger(struct conn *c);
/* Every DAEMON_SWEEP_MS: re-check the unread replies, close the lingerers
 * whose peer read or went. */
void peers_sweep(struct daemon *dm);
/* MCMAP replies whose descriptors may be unread, every uid. */
size_t peers_unread(const struct daemon *dm);

/* ---- closing off the loop (reaper.c) ------------------------------------------
 * See reaper.c for why. Started after the signals are blocked (the thread
 * inherits the mask) and the open-file limit is set (it sizes the queue). */
struct reaper;
int reaper_start(struct daemon *dm);
/* Close fd on the reaper's thread; drain_first: a client socket, whose
 * queued descriptors are received and closed there first. Never blocks on
 * the close itself. */
void reaper_close(struct daemon *dm, int fd, bool drain_first);
/* Stop watching a client socket and close it: on the loop when the kernel
 * refuses passed descriptors on our sockets, else through the reaper. */
void reaper_close_client(struct daemon *dm, struct loop_io *io);
/* The same for a client socket not watched. */
void reaper_close_socket(struct daemon *dm, int fd);
/* The loop's non-blocking recv on a client socket: never releases a
 * passed descriptor in the calling thread. *passed: the peer passed some
 * (then nothing is read and 0 returned; drop the connection, whose close
 * goes to the reaper). recv's result otherwise. */
ssize_t reaper_recv(struct daemon *dm, int fd, void *buf, size_t len, bool *passed);
/* Let the queue empty (bounded wait) and end the thread. */
void reaper_stop(struct daemon *dm);

/* ---- privileges (privs.c) ------------------------------------------------------ */
struct privs {
	bool drop; /* started as root */
	uid_t uid;
	gid_t gid;
	gid_t *groups;
	int ngroups;
};

/* Look up user in /etc/passwd (NSS only when the file lacks it, and
 * before any socket exists: NSS may ask our own module). Not root:
 * drop = false. */
int privs_prepare(const char *user, struct privs *p);
/* mkdir -p (parents 0755); when dropping, chown to the user. private_tree
 * (state_dir): the directory 0700 and, two levels down, directories 0700
 * and files 0600, existing ones included, all chowned; otherwise 0755
 * (run_dir, whose nss.sock everyone must reach). */
int privs_make_dir(const struct privs *p, const char *path, bool private_tree);
/* mkdir -p (0755), owned by whoever creates it and never chowned: a
 * directory others may use too (the nscd socket's, /var/run/nscd). */
int privs_make_shared_dir(const char *path);
/* user's uid and gid, as privs_prepare finds them: /etc/passwd, else NSS
 * (*in_files says which). 0, -ENOENT or -errno. */
int privs_find_user(const char *user, uid_t *uid, gid_t *gid, bool *in_files);
int privs_chown_path(const struct privs *p, const char *path);
/* setgroups, setresgid, setresuid; then verify root cannot come back. */
int privs_drop(const struct privs *p);
void privs_free(struct privs *p);

/* ---- reload (reload.c) --------------------------------------------------------- */
/* Switch to cfg (taken over on success): domains kept, created, retired;
 * new ones are scheduled for an immediate refresh. 0 or -errno. */
int daemon_apply_config(struct daemon *dm, struct config *cfg);
/* Re-read the configuration and apply it; errors go to *errors (and the
 * log). 0, or <0 with the old configuration still in force. */
int daemon_reload(struct daemon *dm, struct idc_buf *errors);
/* Every offline ldap domain probes its servers now (SIGUSR2, as SSSD's
 * "go online"; a reload starts ldap domains over anyway), not when its
 * backoff ends. */
void daemon_retry_offline(struct daemon *dm);

/* ---- shared-memory cache (memcache.c) -----------------------------------------
 * Maps in run_dir/mc sized by cfg (MiB); a size change starts that map
 * over. Every function tolerates disabled maps. */
int daemon_mc_configure(struct daemon *dm, const struct config *cfg);
void daemon_mc_close(struct daemon *dm);
/* Answer MCMAP: the reply listing map kind (0: every map served), whose
 * descriptors c sends with it. 0 or -ENOMEM. */
int daemon_mc_share(struct conn *c, uint32_t kind, struct idc_buf *out);
/* The read-only descriptors of the maps in mask still served, in kind
 * order, into fds[0..3) (owned by the writers: valid until the next reset);
 * their number. */
int daemon_mc_fds(struct daemon *dm, uint32_t mask, int fds[3]);
/* The maps' heartbeat (mc/layout.h): called every MC_BEAT_MS. */
void daemon_mc_beat(struct daemon *dm);
/* Records the responder answered with, for the lookups (keys: enum
 * mc_key) they are the answer to; keys 0 stores nothing. until: unix
 * seconds after which the answer must come from the daemon again (its
 * entry expires or enters its refresh window), 0 = no bound but the
 * maps' own. */
void daemon_mc_put_passwd(struct daemon *dm, const struct proto_passwd *pw, unsigned keys,
			  int64_t until);
/* g: domain d's group as answered (d: whether its list may lose members). */
void daemon_mc_put_group(struct daemon *dm, const struct domain *d, const struct cache_group *g,
			 unsigned keys, int64_t until);
void daemon_mc_put_initgroups(struct daemon *dm, const char *user, const uint32_t *gids, size_t n,
			      int64_t until);
/* The nscd socket's INITGROUPS answer for a user the cache holds (the
 * host's groups merged), for glibc's nscd maps only: nss.sock's answer
 * lacks the host's groups. epoch: daemon_mc_ig_epoch() when the cache's
 * groups were read; the list is not kept if a group list was dropped
 * since (it may be the old one). until: as daemon_mc_put_initgroups's,
 * the cache's part's (0: no bound of its own). */
uint64_t daemon_mc_ig_epoch(const struct daemon *dm);
void daemon_mc_put_nscd_initgroups(struct daemon *dm, const char *user, const uint32_t *gids,
				   size_t n, uint64_t epoch, int64_t until);
/* A files domain's committed change (files_domain_set_hook; arg: the
 * daemon): drop exactly the records it affects (a user name new there also
 * the remote groups listing it: their lists leave local names out). ch NULL (an ldap commit whose
 * changes are unknown): every map is reset. A change of nested groups resets the initgroups map,
 * once per call into the provider: daemon_mc_ldap_flush after it returns. */
void daemon_mc_change(const struct cache_change *ch, void *arg);
void daemon_mc_ldap_flush(struct daemon *dm);
/* An ldap domain's hook (arg: its struct domain): as daemon_mc_change
 * (its users are no local names), then the records of the groups nesting a changed group (their
 * member lists hold its users: cache_group_members) are dropped too. */
void daemon_mc_ldap_change(const struct cache_change *ch, void *arg);
/* `idcache expire` (what: PROTO_EXPIRE_*): drop the affected records. */
void daemon_mc_expire(struct daemon *dm, uint32_t what, const char *name);
/* Drop every record of map k (0 passwd, 1 group, 2 initgroups). */
void daemon_mc_reset(struct daemon *dm, int k);
void daemon_mc_status(struct daemon *dm, struct idc_buf *b);

/* ---- the nscd socket (nscd.c) -------------------------------------------------
 * nscd_socket in idcache.conf: glibc's and musl's nscd clients. Opened
 * with the other sockets, before root is dropped (its directory made
 * 0755 and owned by the daemon's user, like run_dir); nothing when not
 * configured. */
struct nscd_conn;
int daemon_nscd_open(struct daemon *dm, const struct privs *p);
/* Start the host lookups and accept. 0 or -errno (logged). */
int daemon_nscd_start(struct daemon *dm);
/* Close and remove the socket; daemon_nscd_fini after the connections. */
void daemon_nscd_stop(struct daemon *dm);
void daemon_nscd_fini(struct daemon *dm);
/* A connection's state: allocated (0 or -ENOMEM), freed. */
int daemon_nscd_conn_init(struct conn *c);
void daemon_nscd_conn_free(struct conn *c);
/* Bytes read from the client (beyond one request they are dropped). */
int daemon_nscd_feed(struct conn *c, const void *p, size_t n);
/* Answer the request once complete, rewrite the responder's staged reply
 * once it is, or ask the host's sources. <0 only when out of memory. */
int daemon_nscd_process(struct conn *c);
/* Waiting for the host's sources (no reply may go yet). */
bool daemon_nscd_busy(const struct conn *c);
/* The connection closes: its host lookup answers no one. */
void daemon_nscd_detach(struct conn *c);
/* The descriptor to send with out byte off (a GETFD reply), or -1; sent:
 * closed (ours was a duplicate). */
int daemon_nscd_fd_at(const struct conn *c, size_t off);
void daemon_nscd_fd_sent(struct conn *c);
/* `idcache status`: the socket, its requests, the host lookups. */
void daemon_nscd_status(struct daemon *dm, struct idc_buf *b);

/* ---- the host's sources for the nscd socket (nscdhost.c) ------------------------
 * Threads of their own (see nscdhost.c); everything here is called on
 * the loop thread. */
struct nscd_job {
	struct nscd_job *next;
	struct conn *c; /* the client; NULL once it closed (loop thread only) */
	int32_t type;   /* an nscd lookup */
	char key[NSCD_KEY_MAX + 1];
	uint32_t id;    /* by-id lookups: the key's value */
	uint32_t *gids; /* INITGROUPS: the cache's groups, the host's added */
	size_t ngids;
	bool cache_found;  /* INITGROUPS: the cache knows the user */
	uint64_t ig_epoch; /* INITGROUPS: daemon_mc_ig_epoch() when the cache's were read */
	int64_t ig_until;  /* INITGROUPS: when the cache's part stops being one to give */
	uint8_t *reply;    /* the worker's answer in nscd's layout; NULL: close */
	size_t reply_len;
	bool notfound; /* no source holds the key */
};
struct nscd_host;
int nscd_host_start(struct daemon *dm);
void nscd_host_stop(struct daemon *dm);
/* Queue j (taken over on success); its answer comes to
 * daemon_nscd_answered. -EAGAIN: the queue is full (j is the caller's). */
int nscd_host_submit(struct daemon *dm, struct nscd_job *j);
void daemon_nscd_answered(struct nscd_job *j);
void nscd_job_free(struct nscd_job *j);
/* Negative answers (nscd_negative_ttl seconds): whether key of type is
 * one no source held lately; remember one; forget all (a reload). */
bool nscd_neg_has(struct daemon *dm, int32_t type, const char *key);
void nscd_neg_put(struct daemon *dm, int32_t type, const char *key);
void nscd_neg_clear(struct daemon *dm);

/* ---- glibc's persistent-database maps (nscdmaps.c) ---------------------------
 * The read-only, sealed descriptor of database db's map in glibc's
 * numbering (0 passwd, 1 group) and *size, the map's size as GETFD
 * replies tell it; owned by nscdmaps.c, valid on the loop thread until it
 * returns to the loop (the caller duplicates it to keep it). -ENOSYS or
 * -errno when there is none: glibc then reads through the socket.
 * The first call for db creates its map. */
int nscdmaps_fd(struct daemon *dm, int db, uint64_t *size);
/* The rest follows the memory cache: memcache.c calls each beside its mc
 * counterpart (k: the mc kind, 0 passwd, 1 group, 2 initgroups; keys:
 * enum mc_key). Every one does nothing for a map not created. */
bool nscdmaps_on(const struct daemon *dm);
void nscdmaps_put_passwd(struct daemon *dm, const struct proto_passwd *pw, unsigned keys,
			 int64_t expire);
void nscdmaps_put_group(struct daemon *dm, const struct cache_group *g, unsigned keys,
			int64_t expire);
/* (daemon_mc_put_nscd_initgroups: the nscd socket's answer) */
void nscdmaps_put_initgroups(struct daemon *dm, const char *user, const uint32_t *gids, size_t n,
			     int64_t expire);
/* The record answering name / id lookups of kind k, from all its keys. */
void nscdmaps_drop_name(struct daemon *dm, int k, const char *name);
void nscdmaps_drop_id(struct daemon *dm, int k, uint32_t id);
/* The id of the record answering name lookups of kind k: 0 or -ENOENT. */
int nscdmaps_id_of(struct daemon *dm, int k, const char *name, uint32_t *id);
/* Every record of kind k. */
void nscdmaps_reset(struct daemon *dm, int k);
/* Timestamp renewed, expired records out (every MC_BEAT_MS). */
void nscdmaps_beat(struct daemon *dm);
/* Mark the maps so their clients ask again, and free them (stopping). */
void nscdmaps_close(struct daemon *dm);
void nscdmaps_status(const struct daemon *dm, struct idc_buf *b);

/* ---- the daemon --------------------------------------------------------------- */
struct daemon {
	struct loop loop;
	const char *config_path;
	struct config *cfg;
	/* fixed at start: a reload that changes them only warns */
	char *run_dir, *state_dir, *user;
	uid_t uid; /* after dropping privileges */
	struct cache *cache;
	struct domain **domains; /* same order as cfg->domains */
	size_t ndomains;
	const char **names; /* domain names for multi-domain lookups */
	struct listener nss, admin;
	struct listener userdb;                        /* io.fd -1: not served (userdb.c) */
	const char *udb_service;                       /* its file name, the service clients name */
	uint64_t udb_calls, udb_errors, udb_malformed; /* `idcache status` */
	struct conn *conns;
	size_t nconns;
	uint64_t refused, refused_logged_ns;
	/* SO_PASSRIGHTS is off on both sockets: no client can pass us a
	 * descriptor (listen.c); else they are received and closed by the
	 * reaper. */
	bool kernel_refuses_fds;
	struct reaper *reaper;
	uint64_t refused_fds; /* connections dropped for passing descriptors */
	int spare_fd;         /* given up to accept-and-close when out of descriptors */
	struct loop_io sig;
	struct loop_timer sweep;
	struct loop_timer beat; /* the maps' heartbeat, every MC_BEAT_MS */
	bool foreground;
	struct cache_reader *reader;
	int reader_err; /* the last failure of daemon_reader, logged once; 0 after a success */
	uint64_t start_ns;
	int64_t start_time;
	uint64_t requests[DAEMON_CMD_MAX];
	struct mc_writer *mc[3];     /* passwd, group, initgroups; NULL: disabled */
	struct nscddb *nscd_maps[2]; /* glibc's passwd, group (nscdmaps.c); NULL: none yet */
	bool mc_opened;
	bool mc_nested_reset; /* daemon_mc_ldap_flush resets the initgroups map */
	bool mc_groups_reset; /* ... and the group map (parents past the bound) */
	uint64_t mc_ig_epoch; /* bumped by every group list dropped (memcache.c) */
	uint32_t *gids;       /* initgroups scratch */
	size_t gids_cap;
	bool ready;
	uint64_t config_gen;           /* bumped by every applied configuration */
	uint64_t files_gen;            /* bumped by every files domain refresh (domains.c) */
	struct enum_snap *snaps[2];    /* latest passwd / group enumeration */
	struct snap_job *snap_jobs[2]; /* passwd / group snapshot being built */
	struct loop_timer snap_timer;  /* its next slice (responder.c) */
	unsigned snap_turn;            /* which build's slice comes next */
	uint64_t snap_serial;          /* of the last build started */

	/* Per-uid accounts (peers.c), admin.sock's connections (of nconns)
	 * and the limits' counters: refusals, idle connections closed for a
	 * newcomer, MCMAP refused for unread replies or not sent by the
	 * kernel. */
	struct peers *peers;
	size_t nadmin;
	uint64_t refused_uid, refused_full, shed_idle;
	uint64_t mcmap_refused, mcmap_failed;
	struct cache_reader *aside;          /* precedence.c's checks, ended with reader */
	struct host_files *host;             /* /etc/passwd, /etc/group (precedence.c) */
	struct gid_memo *gid_memo;           /* precedence.c */
	int checks_err;                      /* precedence.c: a check that failed, withholding */
	struct held_ids *held_ids;           /* precedence.c: the files domains' ids, sorted */
	uint64_t held_builds, held_build_ns; /* ... built, and the time it took */
	struct subid_served *subid_served;   /* subid.c: the directory ranges served */
	const char **members;                /* precedence.c: member list scratch */
	size_t members_cap;
	struct budget_uid *budgets;   /* per peer uid (budget.c) */
	size_t budget_total;          /* bytes charged to all uids */
	size_t budget_out;            /* of which output queues */
	size_t budget_waiting;        /* connections with mem_wait set */
	bool wake_queued;             /* conn_wake_later's call is deferred */
	struct loop_timer held_timer; /* held requests (responder.c) */
	uint64_t held_timer_at;       /* when it fires, idc_now_ns() */
	uint64_t enum_builds, enum_build_ns, held_requests, enum_refused, mem_waits;
	struct big_reply big[DAEMON_BIG_KEEP];
	size_t big_next;
	uint64_t big_builds, big_build_ns, big_hits;

	/* The nscd socket (nscd.c): its path, fixed at start (NULL: not
	 * served), listener, host lookups, and requests by nscd type. */
	char *nscd_path;
	struct listener nscd;
	struct nscd_host *nscd_host;
	uint64_t nscd_requests[NSCD_TYPE_COUNT];
	/* host lookups asked, refused (queue full), negative answers given */
	uint64_t nscd_host_asked, nscd_host_full, nscd_negative_hits;
};

/* Changes whenever what an enumeration returns may have changed. */
uint64_t daemon_data_gen(const struct daemon *dm);
/* Drop the daemon's own references to the enumeration snapshots. */
void enum_snaps_release(struct daemon *dm);

/* Log the "ready" line once every domain had its first refresh (main.c). */
void daemon_check_ready(struct daemon *dm);

#endif
