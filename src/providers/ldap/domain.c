/*
 * domain: the provider's domain object: its life cycle, the event loop's
 * timers and step (lprov_domain_process), and its status.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "providers/ldap/lprov_int.h"

/* ==== domain ============================================================================ */

static int copy_str(char **dst, const char *src)
{
	*dst = src ? strdup(src) : NULL;
	return src && !*dst ? -ENOMEM : 0;
}

static int copy_config(struct lprov_config *dst, const struct lprov_config *src)
{
	*dst = *src;
	char **s[] = {&dst->name,    &dst->search_base,  &dst->user_base,  &dst->group_base,
		      &dst->bind_dn, &dst->authtok_file, &dst->tls_cacert, &dst->authtok};
	const char *v[] = {src->name,    src->search_base,  src->user_base,  src->group_base,
			   src->bind_dn, src->authtok_file, src->tls_cacert, src->authtok};
	int rc = 0;
	for (size_t i = 0; i < IDC_ARRAY_SIZE(s); i++)
		*s[i] = NULL;
	for (size_t i = 0; i < LPROV_MAP_COUNT; i++)
		dst->map[i] = NULL;
	for (size_t i = 0; i < src->nuris; i++)
		dst->uris[i] = NULL;
	for (size_t i = 0; i < IDC_ARRAY_SIZE(s) && !rc; i++)
		rc = copy_str(s[i], v[i]);
	for (size_t i = 0; i < LPROV_MAP_COUNT && !rc; i++)
		rc = copy_str(&dst->map[i], src->map[i]);
	for (size_t i = 0; i < src->nuris && !rc; i++)
		rc = copy_str(&dst->uris[i], src->uris[i]);
	return rc;
}

/* The attributes every search asks for (each once). */
static void set_attrs(struct lprov_domain *ld)
{
	size_t n = 0;
	const char *want[] = {"objectClass", "memberUid"};
	for (size_t i = 0; i < LPROV_MAP_COUNT; i++)
		ld->attr[i] = lp_attr(&ld->cfg, (enum lprov_attr)i);
	for (size_t i = 0; i < LPROV_MAP_COUNT + IDC_ARRAY_SIZE(want); i++) {
		const char *a = i < LPROV_MAP_COUNT ? ld->attr[i] : want[i - LPROV_MAP_COUNT];
		if (i == LPROV_MAP_USER_OC || i == LPROV_MAP_GROUP_OC || !a)
			continue; /* objectClass is asked for once; NULL: not read */
		bool dup = false;
		for (size_t j = 0; j < n && !dup; j++)
			dup = !strcasecmp(ld->attrs[j], a);
		if (!dup && n < IDC_ARRAY_SIZE(ld->attrs) - 1)
			ld->attrs[n++] = a;
	}
	ld->attrs[n] = NULL;
	for (size_t i = 0; i <= n; i++)
		ld->poll_attrs[i] = ld->attrs[i];
	ld->poll_attrs[n] = "modifyTimestamp";
	ld->poll_attrs[n + 1] = "entryUSN";
	ld->poll_attrs[n + 2] = "entryCSN";
	ld->poll_attrs[n + 3] = NULL;
}

/* What the configuration leaves open on the wire, said once at start. */
static void warn_channel(const struct lprov_config *c)
{
	static const char *const level[] = {"never", "allow"};
	bool plain = false;
	for (size_t i = 0; i < c->nuris; i++)
		plain |= !strncasecmp(c->uris[i], "ldap://", 7);
	if (c->tls_reqcert <= LPROV_REQCERT_ALLOW)
		idc_log(IDC_LOG_WARN,
			"ldap domain %s: ldap_tls_reqcert = %s: the server's certificate is not "
			"verified; anyone on the path can impersonate the directory",
			c->name, level[c->tls_reqcert]);
	if (plain && !c->start_tls && c->bind_dn)
		idc_log(IDC_LOG_WARN,
			"ldap domain %s: the bind password crosses plain ldap:// in clear "
			"(ldap_auth_disable_tls_never_use_in_production = true)",
			c->name);
	else if (plain && !c->start_tls)
		idc_log(IDC_LOG_WARN,
			"ldap domain %s: plain ldap:// without StartTLS: answers are neither "
			"encrypted nor authenticated",
			c->name);
}

int lprov_domain_new(const struct lprov_config *cfg, struct cache *c, struct lprov_domain **out,
		     struct idc_diag *d)
{
	int rc = lprov_config_check(cfg, d);
	if (rc)
		return rc;
	struct lprov_domain *ld = calloc(1, sizeof(*ld));
	if (!ld)
		return -ENOMEM;
	pthread_mutex_init(&ld->log_mu, NULL);
	rc = copy_config(&ld->cfg, cfg);
	if (!rc && cfg->bind_dn && cfg->authtok)
		rc = copy_str(&ld->password, cfg->authtok);
	else if (!rc && cfg->bind_dn)
		rc = lprov_read_authtok(cfg->authtok_file, (uid_t)-1, &ld->password, d);
	if (rc) {
		lprov_domain_free(ld);
		return rc;
	}
	ld->cache = c;
	ld->fd = -1;
	ld->online = true;
	ld->since = (int64_t)time(NULL);
	ld->hash_seed = idc_now_ns();
	ld->members_max = LP_MEMBERS_MAX;
	ld->ubase = ld->cfg.user_base ? ld->cfg.user_base : ld->cfg.search_base;
	ld->gbase = ld->cfg.group_base ? ld->cfg.group_base : ld->cfg.search_base;
	ld->nubase = lp_dn_normalize(&ld->arena, ld->ubase, strlen(ld->ubase));
	ld->ngbase = lp_dn_normalize(&ld->arena, ld->gbase, strlen(ld->gbase));
	if (!ld->nubase || !ld->ngbase) {
		lprov_domain_free(ld);
		return idc_diag_set(d, -EINVAL, "a search base is not a DN");
	}
	if (!strcmp(ld->nubase, ld->ngbase))
		ld->gbase = ld->ubase; /* one base: member searches ask for both kinds */
	set_attrs(ld);
	warn_channel(&ld->cfg);
	ld->sync = lp_sync_new(ld);
	if (ld->cfg.sync != LPROV_SYNC_POLL && !ld->sync) {
		lprov_domain_free(ld);
		return -ENOMEM;
	}
	if (ld->cfg.enumerate)
		ld->next_enum_ns = idc_now_ns();
	if (ld->cfg.refresh_expired_ms)
		ld->next_refresh_ns = idc_now_ns() + ld->cfg.refresh_expired_ms * 1000000ull;
	*out = ld;
	return 0;
}

void lprov_domain_set_hook(struct lprov_domain *ld, cache_change_fn fn, void *arg)
{
	ld->hook = fn;
	ld->hook_arg = fn ? arg : NULL;
}

void lprov_domain_drain(struct lprov_domain *ld)
{
	if (ld)
		lp_commit_drain(ld);
}

void lprov_domain_free(struct lprov_domain *ld)
{
	if (!ld)
		return;
	lp_commit_free(ld); /* a store in flight is finished first */
	lp_req_finish_all(ld, LPROV_LOOKUP_FAILED);
	lp_neg_free(ld);
	lp_sync_free(ld); /* first: closing commits nothing then */
	lp_conn_close(ld);
	if (ld->password)
		explicit_bzero(ld->password, strlen(ld->password));
	free(ld->password);
	idc_arena_free(&ld->arena);
	lp_hset_free(&ld->logged);
	pthread_mutex_destroy(&ld->log_mu);
	lprov_config_free(&ld->cfg);
	free(ld);
}

size_t lprov_domain_fds(const struct lprov_domain *ld, int *fds, size_t max)
{
	/* frozen while the committer stores (commit.c): its eventfd */
	int fd = lp_commit_busy(ld) ? lp_commit_fd(ld) : ld->conn ? ld->fd : -1;
	if (fd < 0)
		return 0;
	if (max)
		fds[0] = fd;
	return 1;
}

static void earliest(uint64_t *best, uint64_t t)
{
	if (t && (!*best || t < *best))
		*best = t;
}

int64_t lprov_domain_next_timeout(const struct lprov_domain *ld)
{
	if (lp_commit_busy(ld)) /* its eventfd says when, or the hook is being told */
		return lp_commit_reporting(ld) ? 0 : -1;
	if (ld->more || ld->broken || lp_commit_due(ld))
		return 0;
	uint64_t best = 0;
	for (const struct lp_search *s = ld->searches; s; s = s->next)
		earliest(&best, s->deadline_ns);
	if (ld->hs) {
		earliest(&best, ld->hs_deadline_ns);
		/* a connect in progress is seen by polling (only EPOLLIN is watched) */
		if (ld->hs == LP_HS_CONNECT)
			earliest(&best, idc_now_ns() + LP_HS_POLL_MS * 1000000ull);
	}
	if (!ld->online && !ld->probe && !ld->hs)
		earliest(&best, ld->next_probe_ns);
	if (ld->online && ld->conn && !ld->hs)
		earliest(&best, ld->failback_ns);
	if (ld->online && !lp_sync_live(ld)) {
		earliest(&best, ld->next_enum_ns);
		earliest(&best, ld->next_refresh_ns);
	}
	earliest(&best, lp_sync_next_ns(ld));
	earliest(&best, lp_poll_next_ns(ld));
	if (!best)
		return -1;
	uint64_t now = idc_now_ns();
	return best <= now ? 0 : (int64_t)((best - now + 999999) / 1000000);
}

static void maybe_enumerate(struct lprov_domain *ld, uint64_t now)
{
	if (!ld->next_enum_ns || now < ld->next_enum_ns || !ld->online || lp_sync_live(ld))
		return;
	ld->next_enum_ns = now + lp_jitter_ms(ld, LP_ENUM_EVERY_MS) * 1000000ull;
	if (lprov_domain_lookup(ld, LPROV_LOOKUP_ENUMERATE, NULL, 0, NULL, NULL) ==
	    LPROV_LOOKUP_OFFLINE)
		idc_log(IDC_LOG_DEBUG, "ldap domain %s: enumeration postponed (offline)",
			ld->cfg.name);
}

/* refresh_expired_interval: refresh what expired (or is about to) in the
 * background, one request at a time; unchanged entries only get new
 * timestamps. Offline: skipped until the next interval. */
static void maybe_refresh(struct lprov_domain *ld, uint64_t now)
{
	if (!ld->next_refresh_ns || now < ld->next_refresh_ns || !ld->online || lp_sync_live(ld))
		return;
	ld->next_refresh_ns = now + lp_jitter_ms(ld, ld->cfg.refresh_expired_ms) * 1000000ull;
	if (lp_req_find(ld, LP_REFRESH, NULL, 0))
		return; /* the last one is still running */
	if (lp_req_start(ld, LP_REFRESH, NULL, 0, NULL, NULL) == LPROV_LOOKUP_OFFLINE)
		idc_log(IDC_LOG_DEBUG,
			"ldap domain %s: refresh of expired entries postponed "
			"(offline)",
			ld->cfg.name);
}

/* Entries a wider min_id..max_id let into the cache before (an earlier
 * configuration, an older version) would be served until they expire:
 * removed once, when the domain first runs (its hook is set by then), and
 * the memory cache told to start over — rare enough not to describe record
 * by record. */
static void drop_out_of_range(struct lprov_domain *ld)
{
	ld->range_checked = true;
	struct idc_diag d = {{0}};
	struct cache_txn *t;
	size_t nu = 0, ng = 0;
	int rc = cache_txn_begin(ld->cache, &t, &d);
	if (rc == 0) {
		rc = cache_drop_outside(t, ld->cfg.name, ld->cfg.min_id, ld->cfg.max_id, &nu, &ng,
					&d);
		if (rc)
			cache_txn_abort(t);
		else
			rc = cache_txn_commit(t, &d);
	}
	if (rc) {
		idc_log(IDC_LOG_WARN,
			"ldap domain %s: cannot remove cached entries outside min_id..max_id: %s",
			ld->cfg.name, d.msg[0] ? d.msg : idc_strerror(rc));
		return;
	}
	if (nu + ng == 0)
		return;
	ld->ncommits++;
	char range[64];
	idc_log(IDC_LOG_INFO, "ldap domain %s: %zu users and %zu groups cached outside %s removed",
		ld->cfg.name, nu, ng, lp_range_text(&ld->cfg, range, sizeof(range)));
	if (ld->hook)
		ld->hook(NULL, ld->hook_arg);
}

static uint64_t thread_cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void process(struct lprov_domain *ld);

void lprov_domain_process(struct lprov_domain *ld)
{
	uint64_t t0 = thread_cpu_ns();
	process(ld);
	uint64_t took = thread_cpu_ns() - t0;
	ld->turns++;
	ld->turns_slow += took > 10000000u;
	if (took > ld->turn_cpu_max_ns)
		ld->turn_cpu_max_ns = took;
}

static void process(struct lprov_domain *ld)
{
	if (!lp_commit_reap(ld))
		return; /* frozen: the committer holds a request */
	if (!ld->range_checked)
		drop_out_of_range(ld);
	if (ld->broken) {
		ld->broken = false;
		lp_conn_fail(ld, "sending a search failed");
	}
	if (ld->hs)
		lp_conn_handshake(ld, idc_now_ns());
	/* more: lp_read stopped at a slice or a page yield, maybe after the
	 * message that ended the last search; only lp_read clears it */
	if (ld->conn && !ld->hs && (ld->searches || ld->more || lp_sync_active(ld)))
		lp_read(ld);
	uint64_t now = idc_now_ns();
	lp_search_deadlines(ld, now);
	lp_conn_timers(ld, now);
	lp_sync_tick(ld, now);
	lp_poll_tick(ld, now);
	maybe_enumerate(ld, now);
	maybe_refresh(ld, now);
	lp_commit_kick(ld); /* last: from here the domain may be frozen */
}

void lprov_domain_get_status(const struct lprov_domain *ld, struct lprov_domain_status *st)
{
	size_t n = 0;
	for (const struct lp_req *r = ld->reqs; r; r = r->next)
		n++;
	*st = (struct lprov_domain_status){
	    .online = ld->online,
	    .since = ld->since,
	    .server = ld->conn ? ld->cfg.uris[ld->server] : NULL,
	    .last_error = ld->last_error,
	    .store_error = ld->store_error,
	    .store_error_time = ld->store_error_time,
	    .store_failures = ld->nstore_failures,
	    .searches = ld->nsearches,
	    .lookups = ld->nlookups,
	    .joined = ld->njoined,
	    .negative_hits = ld->nneg,
	    .commits = ld->ncommits,
	    .in_flight = n,
	    .turns = ld->turns,
	    .turn_cpu_max_us = ld->turn_cpu_max_ns / 1000,
	    .turns_over_10ms = ld->turns_slow,
	};
	lp_sync_status(ld, st);
}
