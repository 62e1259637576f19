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
 *   responder.c  NSS requests: lookups and enumeration
 *   admin.c      admin requests: status, expire, reload, user/group info
 *   domains.c    per-domain provider state: files refresh, inotify, timers
 *   reload.c     re-reading the configuration (SIGHUP, RELOAD)
 *   memcache.c   the shared-memory cache maps (src/mc): writing, dropping
 */
#ifndef IDC_DAEMON_H
#define IDC_DAEMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "cache/cache.h"
#include "daemon/config.h"
#include "daemon/loop.h"
#include "mc/mc.h"
#include "proto/proto.h"
#include "providers/files/files.h"
#include "util/util.h"

#define DAEMON_MAX_CONNS     1024
#define DAEMON_IDLE_MS       60000u                /* close a connection silent this long */
#define DAEMON_SWEEP_MS      5000u                 /* how often idle connections are looked for */
#define DAEMON_OUT_HIGH      (256u * 1024u)        /* stop taking requests above this backlog */
#define DAEMON_OUT_MAX       (64u * 1024u * 1024u) /* close a client whose backlog passes this */
#define DAEMON_IN_MAX        (64u * 1024u)         /* stop reading above this much unparsed input */
#define DAEMON_CMD_MAX       40u                   /* request counters by command number */
#define DAEMON_RETRY_MS      10000u                /* after a failed refresh */
#define DAEMON_POLL_MS       30000u /* refresh interval when inotify is unavailable */
#define DAEMON_EXPIRED_MIN_S 60     /* at most one expiry-driven refresh per domain */

/* ---- one served domain (domains.c) ------------------------------------------ */
struct daemon;

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

/* ---- ldap domains (ldapdom.c) ------------------------------------------------
 * The provider of an `id_provider = ldap` domain in the loop. Every call
 * into the provider is followed by re-watching its descriptor and timer. */
struct ldapdom;
/* Create d->ldap from d->cfg->ldap. 0 or -errno (logged). */
int ldapdom_new(struct domain *d);
/* Stop watching (domain_retire: events of this batch may still come). */
void ldapdom_close_io(struct ldapdom *l);
/* Free; pending lookups complete with LDAP_LOOKUP_FAILED first. */
void ldapdom_free(struct ldapdom *l);
/* ldap_domain_lookup on d's provider (ldap.h: PENDING and cb later, or
 * an immediate result without cb). */
enum ldap_lookup_result ldapdom_lookup(struct domain *d, enum ldap_lookup_kind kind,
				       const char *name, uint32_t id, ldap_lookup_cb cb, void *arg);
/* Refresh an expired entry in the background (no callback). */
void ldapdom_refresh(struct domain *d, enum ldap_lookup_kind kind, const char *name, uint32_t id);
/* Whether name's group list was fetched from the directory since start
 * (until then the cache may hold only some of its groups), and whether
 * that fetch is older than entry_cache_timeout or an expire. */
enum ldapdom_ig { LDAPDOM_IG_UNKNOWN = 0, LDAPDOM_IG_FRESH, LDAPDOM_IG_EXPIRED };
enum ldapdom_ig ldapdom_initgroups_state(const struct domain *d, const char *name);
void ldapdom_initgroups_note(struct domain *d, const char *name);
/* `idcache expire`: every group list fetched counts as expired. */
void ldapdom_expire(struct ldapdom *l);
void ldapdom_status(const struct domain *d, struct ldap_domain_status *st);
/* An offline domain probes its servers now, not when its backoff ends
 * (SIGUSR2). Not ldap, or online: nothing. */
void ldapdom_retry_now(struct domain *d);

/* ---- one client connection (conn.c) ---------------------------------------- */
/* One map's enumeration in wire encoding, built once per cache state and
 * shared (reference-counted) by every connection walking it: a thousand
 * enumerating clients cost one copy, and only the first pays the build. */
struct enum_snap {
	unsigned refs;
	uint64_t gen;        /* daemon_data_gen() when built */
	struct idc_buf recs; /* records back to back */
	size_t *offs;        /* start of record i; offs[n] = recs.len */
	size_t n, cap;
};

struct enum_cursor {
	struct enum_snap *snap; /* NULL: not started */
	size_t pos;
};

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
	struct proto_reader rd;
	struct idc_buf out;
	size_t out_off; /* bytes of out already sent */
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
};

/* Queue the reply frame starting at out offset at to carry the
 * descriptors of the maps in mask (bit per MC kind). */
void conn_pass_maps(struct conn *c, uint32_t mask, size_t at);
/* Take over an accepted socket. 0 or -errno (fd closed). */
int conn_new(struct daemon *dm, int fd, bool admin);
/* Close and free (after the current batch). */
void conn_close(struct conn *c, const char *why);
/* Close connections idle for DAEMON_IDLE_MS. */
void conn_sweep(struct daemon *dm);
/* The reply of c's waiting request was queued (rc 0) or could not be
 * built (rc < 0: close): take its next requests, flush, re-arm. */
void conn_resume(struct conn *c, int rc);

/* ---- request handlers ---------------------------------------------------------
 * Append the reply (one frame) to out. Return 0, or <0 only when out of
 * memory (the connection is then closed). */
int responder_handle(struct conn *c, const struct proto_req *req, struct idc_buf *out);
/* The password field served for a kept one (cache_user.passwd): itself
 * when cache_passwd_public() allows it, else "x". */
const char *daemon_passwd_field(const char *kept);
/* The connection closes: its waiting request, if any, is answered to no one. */
void responder_detach(struct conn *c);
void enum_cursor_free(struct enum_cursor *e);
int admin_handle(struct conn *c, const struct proto_req *req, struct idc_buf *out);

/* The read transaction shared by the requests of one connection's batch,
 * begun on first use and ended by daemon_reader_end. NULL on failure. */
struct cache_reader *daemon_reader(struct daemon *dm);
void daemon_reader_end(struct daemon *dm);

/* ---- listeners (listen.c) --------------------------------------------------- */
struct listener {
	struct loop_io io;
	struct daemon *dm;
	char path[108];
	bool admin;
};

/* Create, bind (mode), listen; refuses to replace a socket a live daemon
 * answers on. 0 or -errno, logged. */
int listener_open(struct daemon *dm, struct listener *l, const char *path, mode_t mode, bool admin);
int listener_start(struct daemon *dm, struct listener *l);
/* Close and remove the socket file. */
void listener_close(struct listener *l);

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
/* user's uid and gid, as privs_prepare finds them: /etc/passwd, else NSS
 * (*in_files says which). 0, -ENOENT or -errno. */
int privs_find_user(const char *user, uid_t *uid, gid_t *gid, bool *in_files);
/* mkdir -p with mode 0755; when dropping, chown to the user. */
int privs_make_dir(const struct privs *p, const char *path, bool recursive_chown);
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
/* Records the responder answered with; by_id: the answer to a by-id lookup. */
void daemon_mc_put_passwd(struct daemon *dm, const struct proto_passwd *pw, bool by_id);
void daemon_mc_put_group(struct daemon *dm, const struct cache_group *g, bool by_id);
void daemon_mc_put_initgroups(struct daemon *dm, const char *user, const uint32_t *gids, size_t n);
/* A provider's committed change (files_domain_set_hook; arg: the daemon):
 * drop exactly the records it affects. */
void daemon_mc_files_change(const struct files_change *ch, void *arg);
/* The same for an ldap domain (ldap_domain_set_hook; arg: the daemon);
 * ch NULL (the changes are unknown): every map is reset. */
void daemon_mc_ldap_change(const struct ldap_change *ch, void *arg);
/* `idcache expire` (what: PROTO_EXPIRE_*): drop the affected records. */
void daemon_mc_expire(struct daemon *dm, uint32_t what, const char *name);
/* Drop every record of map k (0 passwd, 1 group, 2 initgroups). */
void daemon_mc_reset(struct daemon *dm, int k);
void daemon_mc_status(struct daemon *dm, struct idc_buf *b);

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
	struct conn *conns;
	size_t nconns;
	uint64_t refused, refused_logged_ns;
	int spare_fd; /* given up to accept-and-close when out of descriptors */
	struct loop_io sig;
	struct loop_timer sweep;
	struct loop_timer beat; /* the maps' heartbeat, every MC_BEAT_MS */
	bool foreground;
	struct cache_reader *reader;
	uint64_t start_ns;
	int64_t start_time;
	uint64_t requests[DAEMON_CMD_MAX];
	struct mc_writer *mc[3]; /* passwd, group, initgroups; NULL: disabled */
	bool mc_opened;
	uint32_t *gids; /* initgroups scratch */
	size_t gids_cap;
	bool ready;
	uint64_t config_gen;        /* bumped by every applied configuration */
	struct enum_snap *snaps[2]; /* latest passwd / group enumeration */
};

/* Changes whenever what an enumeration returns may have changed. */
uint64_t daemon_data_gen(const struct daemon *dm);
/* Drop the daemon's own references to the enumeration snapshots. */
void enum_snaps_release(struct daemon *dm);

/* Log the "ready" line once every domain had its first refresh (main.c). */
void daemon_check_ready(struct daemon *dm);

#endif
