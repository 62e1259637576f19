/*
 * ldapdom: an `id_provider = ldap` domain inside idcached — the provider
 * (src/providers/ldap) wired into the epoll loop, directory lookups for
 * the responder, and the memory of which users' group lists came from the
 * directory.
 *
 * Loop wiring (the provider's contract, lprov.h): after every call into the
 * provider, sync() watches the descriptor lprov_domain_fds() names (it
 * changes on reconnect and failover) and arms a timer for
 * lprov_domain_next_timeout() (search deadlines, offline probes, failback,
 * enumeration); either event calls lprov_domain_process(). The descriptor
 * belongs to libldap: it is watched, never closed here.
 *
 * The provider reports every user and group a commit changed (added,
 * removed, changed in place, with old and new name, id and members;
 * lprov_domain_set_hook), and the memory cache drops exactly the records
 * they affect (daemon_mc_change), as for a files refresh.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>

#include "daemon/daemon.h"

#ifdef IDC_HAVE_LDAP

/* Users whose initgroups was fetched from the directory since start, and
 * when (direct-mapped hashes of the names as a lookup tells them apart,
 * cache_name_hash: straße's fetch says nothing of strasse's groups; a
 * collision only costs one more fetch).
 * The user entry's own expiry is not enough: a getpwnam may refresh the
 * user alone while its groups stay expired. */
#define LDAPDOM_IG_SLOTS 16384u

struct ldapdom {
	struct domain *d;
	struct lprov_domain *ld;
	struct loop_io io; /* libldap's descriptor: forgotten, never closed */
	struct loop_timer timer;
	uint64_t seed;
	unsigned ig_refreshing; /* background initgroups refreshes in flight */
	struct ig_slot {
		uint64_t h;
		int64_t at; /* unix seconds of the fetch; 0: expired */
	} ig[LDAPDOM_IG_SLOTS];
};

/* ==== the provider in the loop ==================================================== */

static void on_io(struct loop_io *io, uint32_t events);

/* (Re-)register fd. The number alone does not tell a new connection from
 * the old one (libldap may get the same number back after a close, and the
 * kernel dropped the old registration with the old socket), so an
 * unchanged fd is re-registered: MOD, or ADD when it is gone. */
static void watch_fd(struct ldapdom *l, int fd)
{
	struct loop *loop = &l->d->dm->loop;
	if (fd != l->io.fd) {
		loop_io_forget(&l->io); /* its fd was closed by libldap: DEL fails harmlessly */
		if (fd >= 0 && loop_add(loop, &l->io, fd, EPOLLIN, on_io, l) < 0) {
			idc_log(IDC_LOG_ERR, "ldap domain %s: cannot watch the connection",
				l->d->cfg->name);
			l->io.fd = -1;
		}
		return;
	}
	if (fd < 0)
		return;
	struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &l->io};
	if (epoll_ctl(loop->epfd, EPOLL_CTL_MOD, fd, &ev) < 0 && errno == ENOENT &&
	    epoll_ctl(loop->epfd, EPOLL_CTL_ADD, fd, &ev) < 0)
		idc_log(IDC_LOG_ERR, "ldap domain %s: cannot watch the connection",
			l->d->cfg->name);
}

/* Follow the provider's descriptor and next deadline. */
static void sync_loop(struct ldapdom *l)
{
	int fd = -1;
	if (lprov_domain_fds(l->ld, &fd, 1) == 0)
		fd = -1;
	watch_fd(l, fd);
	int64_t ms = lprov_domain_next_timeout(l->ld);
	if (ms < 0)
		loop_timer_disarm(&l->timer);
	else if (loop_timer_arm(&l->timer, (uint64_t)ms, 0) < 0)
		idc_log(IDC_LOG_ERR, "ldap domain %s: cannot arm its timer", l->d->cfg->name);
}

static void process(struct ldapdom *l)
{
	struct daemon *dm = l->d->dm;
	daemon_reader_end(dm);       /* the provider writes: no read txn of ours open */
	lprov_domain_process(l->ld); /* changes reach daemon_mc_change */
	daemon_mc_ldap_flush(dm);
	sync_loop(l);
}

static void on_io(struct loop_io *io, uint32_t events)
{
	(void)events;
	process(loop_owner(io));
}

static void on_timer(struct loop_timer *t)
{
	process(t->owner);
}

/* ==== life cycle ======================================================================= */

int ldapdom_new(struct domain *d)
{
	struct idc_diag diag = {{0}};
	struct ldapdom *l = calloc(1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	l->d = d;
	l->io.fd = -1;
	l->timer.io.fd = -1;
	l->seed = idc_now_ns();
	int rc = lprov_domain_new(d->cfg->ldap, d->dm->cache, &l->ld, &diag);
	if (rc == 0)
		rc = loop_timer_init(&d->dm->loop, &l->timer, on_timer, l);
	if (rc < 0) {
		idc_log(IDC_LOG_ERR, "ldap domain %s: %s", d->cfg->name,
			diag.msg[0] ? diag.msg : idc_strerror(rc));
		lprov_domain_free(l->ld);
		free(l);
		return rc;
	}
	d->ldap = l;
	lprov_domain_set_hook(l->ld, daemon_mc_ldap_change, d);
	/* Before any lookup is answered from the cache: the first run drops
	 * what a narrowed min_id..max_id no longer allows; with enumerate =
	 * true the first enumeration is due now too, and with a sync feed
	 * (ldap_sync) the connection starts. */
	process(l);
	idc_log(IDC_LOG_INFO, "ldap domain %s: %zu server(s), first %s", d->cfg->name,
		d->cfg->ldap->nuris, d->cfg->ldap->uris[0]);
	return 0;
}

void ldapdom_close_io(struct ldapdom *l)
{
	if (!l)
		return;
	loop_io_forget(&l->io);
	loop_timer_close(&l->timer);
}

void ldapdom_drain(struct ldapdom *l)
{
	if (l)
		lprov_domain_drain(l->ld);
}

void ldapdom_free(struct ldapdom *l)
{
	if (!l)
		return;
	ldapdom_close_io(l);
	lprov_domain_free(l->ld); /* pending lookups complete with FAILED */
	free(l);
}

/* ==== lookups ============================================================================ */

enum lprov_lookup_result ldapdom_lookup(struct domain *d, enum lprov_lookup_kind kind,
					const char *name, uint32_t id, lprov_lookup_cb cb,
					void *arg)
{
	struct ldapdom *l = d->ldap;
	enum lprov_lookup_result res = lprov_domain_lookup(l->ld, kind, name, id, cb, arg);
	daemon_mc_ldap_flush(d->dm);
	sync_loop(l);
	return res;
}

static void ig_note(struct ldapdom *l, const char *name);

/* A background initgroups refresh, and the name whose group list it
 * renews (its fetch time moves only when the directory answered). */
struct ig_refresh {
	struct ldapdom *l; /* alive: ldapdom_free completes pending lookups first */
	char name[];
};

static void on_ig_refreshed(enum lprov_lookup_result res, void *arg)
{
	struct ig_refresh *r = arg;
	r->l->ig_refreshing--;
	if (res == LPROV_LOOKUP_FOUND)
		ig_note(r->l, r->name);
	free(r);
}

/* Serving an entry in its refresh window (entry_cache_nowait_percentage):
 * refresh it behind the reply. An initgroups refresh stores the user's
 * groups, so while one runs the groups it is about to store are not
 * refreshed one by one (`id` asks for each). */
void ldapdom_refresh(struct domain *d, enum lprov_lookup_kind kind, const char *name, uint32_t id)
{
	struct ldapdom *l = d->ldap;
	bool group = kind == LPROV_LOOKUP_GRNAM || kind == LPROV_LOOKUP_GRGID;
	if (group && l->ig_refreshing)
		return;
	struct ig_refresh *r = NULL;
	if (kind == LPROV_LOOKUP_INITGROUPS) {
		size_t n = strlen(name);
		if (!(r = malloc(sizeof(*r) + n + 1)))
			return; /* the list expires and is waited for instead */
		r->l = l;
		memcpy(r->name, name, n + 1);
	}
	enum lprov_lookup_result res =
	    lprov_domain_lookup(l->ld, kind, name, id, r ? on_ig_refreshed : NULL, r);
	if (res == LPROV_LOOKUP_PENDING && r)
		l->ig_refreshing++;
	else
		free(r);
	daemon_mc_ldap_flush(d->dm);
	sync_loop(l);
}

static uint64_t ig_hash(const struct ldapdom *l, const char *name)
{
	return cache_name_hash(CACHE_NAMES_STORED, name, l->seed);
}

enum ldapdom_ig ldapdom_initgroups_state(const struct domain *d, const char *name, int64_t *at)
{
	uint64_t h = ig_hash(d->ldap, name);
	const struct ig_slot *s = &d->ldap->ig[h % LDAPDOM_IG_SLOTS];
	uint32_t ttl = d->cfg->entry_cache_timeout;
	if (at)
		*at = s->h == h ? s->at : 0;
	if (s->h != h)
		return LDAPDOM_IG_UNKNOWN;
	if (s->at == 0 || (ttl && (int64_t)time(NULL) - s->at >= (int64_t)ttl))
		return LDAPDOM_IG_EXPIRED;
	return LDAPDOM_IG_FRESH;
}

static void ig_note(struct ldapdom *l, const char *name)
{
	uint64_t h = ig_hash(l, name);
	l->ig[h % LDAPDOM_IG_SLOTS] = (struct ig_slot){h, (int64_t)time(NULL)};
}

void ldapdom_initgroups_note(struct domain *d, const char *name)
{
	ig_note(d->ldap, name);
}

void ldapdom_expire(struct ldapdom *l)
{
	for (size_t i = 0; i < LDAPDOM_IG_SLOTS; i++)
		l->ig[i].at = 0;
	lprov_domain_expired(l->ld); /* a live feed refreshes in full */
	sync_loop(l);
}

void ldapdom_status(const struct domain *d, struct lprov_domain_status *st)
{
	lprov_domain_get_status(d->ldap->ld, st);
}

bool ldapdom_note_once(struct domain *d, const char *msg)
{
	return lprov_domain_log_once(d->ldap->ld, IDC_LOG_WARN, "%s", msg);
}

void ldapdom_retry_now(struct domain *d)
{
	if (!d->ldap)
		return;
	lprov_domain_retry_now(d->ldap->ld);
	sync_loop(d->ldap); /* the timer fires at once */
}

#else /* no libldap: config.c refuses `id_provider = ldap`, so none of this runs */

int ldapdom_new(struct domain *d)
{
	(void)d;
	return -ENOTSUP;
}

void ldapdom_close_io(struct ldapdom *l)
{
	(void)l;
}

void ldapdom_free(struct ldapdom *l)
{
	(void)l;
}

enum lprov_lookup_result ldapdom_lookup(struct domain *d, enum lprov_lookup_kind kind,
					const char *name, uint32_t id, lprov_lookup_cb cb,
					void *arg)
{
	(void)d, (void)kind, (void)name, (void)id, (void)cb, (void)arg;
	return LPROV_LOOKUP_FAILED;
}

enum ldapdom_ig ldapdom_initgroups_state(const struct domain *d, const char *name, int64_t *at)
{
	(void)d, (void)name;
	if (at)
		*at = 0;
	return LDAPDOM_IG_UNKNOWN;
}

void ldapdom_expire(struct ldapdom *l)
{
	(void)l;
}

void ldapdom_initgroups_note(struct domain *d, const char *name)
{
	(void)d, (void)name;
}

void ldapdom_refresh(struct domain *d, enum lprov_lookup_kind kind, const char *name, uint32_t id)
{
	(void)d, (void)kind, (void)name, (void)id;
}

void ldapdom_status(const struct domain *d, struct lprov_domain_status *st)
{
	(void)d;
	memset(st, 0, sizeof(*st));
}

bool ldapdom_note_once(struct domain *d, const char *msg)
{
	(void)d, (void)msg;
	return false;
}

void ldapdom_retry_now(struct domain *d)
{
	(void)d;
}

#endif
