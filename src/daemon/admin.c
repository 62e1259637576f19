/*
 * admin: requests on admin.sock (the peer was already checked: root or the
 * daemon's own user) — STATUS, EXPIRE, RELOAD, USERINFO and GROUPINFO.
 * Replies are "key=value\n" text for the CLI to show as it is.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "daemon/daemon.h"

#ifndef IDC_VERSION
#define IDC_VERSION "unknown"
#endif

/* ==== text helpers ================================================================= */

/* key=value with control characters shown as '?', so one value is one
 * line whatever a provider stored. */
static void kv(struct idc_buf *b, const char *key, const char *value)
{
	idc_buf_printf(b, "%s=", key);
	for (const char *s = value ? value : ""; *s; s++)
		idc_buf_putc(b, ((unsigned char)*s < 0x20 || *s == 0x7f) ? '?' : *s);
	idc_buf_putc(b, '\n');
}

static void kv_time(struct idc_buf *b, const char *key, int64_t t)
{
	char when[64] = "never";
	struct tm tm;
	time_t tt = (time_t)t;
	if (t > 0 && gmtime_r(&tt, &tm))
		strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
	idc_buf_printf(b, "%s=%lld (%s)\n", key, (long long)t, when);
}

static int reply_text(struct idc_buf *out, uint32_t cmd, const struct idc_buf *text)
{
	return proto_reply_status(out, cmd, PROTO_ST_OK, text->data ? text->data : "");
}

/* ==== STATUS ========================================================================== */

static long rss_kib(void)
{
	long pages_total = 0, pages_rss = 0;
	FILE *f = fopen("/proc/self/statm", "re");
	if (!f)
		return -1;
	int n = fscanf(f, "%ld %ld", &pages_total, &pages_rss);
	fclose(f);
	return n == 2 ? pages_rss * (sysconf(_SC_PAGESIZE) / 1024) : -1;
}

/* An ldap domain's content synchronization: its state, the stored
 * cookie's age in seconds (-1: none), and its counters. */
static void status_sync(const char *n, const struct lprov_domain_status *st, struct idc_buf *b)
{
	int64_t age = st->sync_cookie_time ? (int64_t)time(NULL) - st->sync_cookie_time : -1;
	idc_buf_printf(
	    b,
	    "domain.%s.sync=%s\ndomain.%s.sync_cookie_age=%lld\n"
	    "domain.%s.sync_entries=%llu\ndomain.%s.sync_changes=%llu\n"
	    "domain.%s.sync_refreshes=%llu\ndomain.%s.sync_full_refreshes=%llu\n",
	    n, st->sync ? st->sync : "poll", n, (long long)age, n,
	    (unsigned long long)st->sync_entries, n, (unsigned long long)st->sync_changes, n,
	    (unsigned long long)st->sync_refreshes, n, (unsigned long long)st->sync_full);
}

/* An ldap domain: connection state and the provider's counters. */
static void status_ldap(struct domain *d, struct idc_buf *b)
{
	const char *n = d->cfg->name;
	struct lprov_domain_status st;
	char key[128];
	ldapdom_status(d, &st);
	idc_buf_printf(b, "domain.%s.state=%s\n", n, st.online ? "online" : "offline");
	snprintf(key, sizeof(key), "domain.%s.state_since", n);
	kv_time(b, key, st.since);
	snprintf(key, sizeof(key), "domain.%s.server", n);
	kv(b, key, st.server);
	snprintf(key, sizeof(key), "domain.%s.last_error", n);
	kv(b, key, st.last_error);
	snprintf(key, sizeof(key), "domain.%s.store_error", n);
	kv(b, key, st.store_error ? st.store_error : "");
	snprintf(key, sizeof(key), "domain.%s.store_error_time", n);
	kv_time(b, key, st.store_error_time);
	idc_buf_printf(b, "domain.%s.store_failures=%llu\n", n,
		       (unsigned long long)st.store_failures);
	idc_buf_printf(b,
		       "domain.%s.ldap_searches=%llu\ndomain.%s.ldap_lookups=%llu\n"
		       "domain.%s.ldap_joined=%llu\ndomain.%s.ldap_negative_hits=%llu\n"
		       "domain.%s.ldap_commits=%llu\ndomain.%s.ldap_in_flight=%zu\n"
		       "domain.%s.withheld=%llu\n",
		       n, (unsigned long long)st.searches, n, (unsigned long long)st.lookups, n,
		       (unsigned long long)st.joined, n, (unsigned long long)st.negative_hits, n,
		       (unsigned long long)st.commits, n, st.in_flight, n,
		       (unsigned long long)d->withheld);
	idc_buf_printf(b,
		       "domain.%s.ldap_turns=%llu\ndomain.%s.ldap_turn_cpu_max_us=%llu\n"
		       "domain.%s.ldap_turns_over_10ms=%llu\n",
		       n, (unsigned long long)st.turns, n, (unsigned long long)st.turn_cpu_max_us,
		       n, (unsigned long long)st.turns_over_10ms);
	status_sync(n, &st, b);
}

static void status_domain(struct daemon *dm, struct domain *d, struct idc_buf *b)
{
	const char *n = d->cfg->name;
	struct cache_domain_stats st = {0};
	struct cache_reader *r = daemon_reader(dm);
	if (r && cache_domain_stats(r, n, &st) < 0)
		memset(&st, 0, sizeof(st));
	idc_buf_printf(b, "domain.%s.provider=%s\n", n, d->ldap ? "ldap" : "files");
	idc_buf_printf(b, "domain.%s.users=%llu\n", n, (unsigned long long)st.users);
	idc_buf_printf(b, "domain.%s.groups=%llu\n", n, (unsigned long long)st.groups);
	char key[128];
	snprintf(key, sizeof(key), "domain.%s.last_update", n);
	kv_time(b, key, st.last_update);
	if (d->ldap) {
		status_ldap(d, b);
		return;
	}
	snprintf(key, sizeof(key), "domain.%s.last_refresh", n);
	kv_time(b, key, d->last_refresh);
	idc_buf_printf(b, "domain.%s.last_refresh_ms=%llu\n", n,
		       (unsigned long long)d->last_refresh_ms);
	idc_buf_printf(b, "domain.%s.refreshes=%llu\n", n, (unsigned long long)d->refresh_ok);
	idc_buf_printf(b, "domain.%s.refresh_failures=%llu\n", n,
		       (unsigned long long)d->refresh_failed);
	idc_buf_printf(b, "domain.%s.malformed_lines=%zu\n", n, d->last.malformed);
	idc_buf_printf(b, "domain.%s.repeated_name_lines=%zu\n", n, d->last.duplicates);
	snprintf(key, sizeof(key), "domain.%s.last_error", n);
	kv(b, key, d->last_error);
}

static void status_requests(struct daemon *dm, struct idc_buf *b)
{
	for (uint32_t cmd = 1; cmd < DAEMON_CMD_MAX; cmd++) {
		if (!proto_cmd_known(cmd))
			continue;
		char key[64];
		snprintf(key, sizeof(key), "requests.%s", proto_cmd_name(cmd));
		for (char *s = key; *s; s++)
			*s = idc_tolower(*s);
		idc_buf_printf(b, "%s=%llu\n", key, (unsigned long long)dm->requests[cmd]);
	}
}

/* What the per-uid budgets did (budget.c, responder.c's enumeration). */
static void status_budget(struct daemon *dm, struct idc_buf *b)
{
	idc_buf_printf(b, "enum.snapshots_built=%llu\nenum.build_ms=%llu\n",
		       (unsigned long long)dm->enum_builds,
		       (unsigned long long)(dm->enum_build_ns / 1000000u));
	idc_buf_printf(b, "requests_delayed=%llu\nenum.refused_over_budget=%llu\n",
		       (unsigned long long)dm->held_requests, (unsigned long long)dm->enum_refused);
	idc_buf_printf(b, "big_groups.built=%llu\nbig_groups.build_ms=%llu\n",
		       (unsigned long long)dm->big_builds,
		       (unsigned long long)(dm->big_build_ns / 1000000u));
	idc_buf_printf(b, "big_groups.reused=%llu\n", (unsigned long long)dm->big_hits);
	idc_buf_printf(b, "checks.local_index_built=%llu\nchecks.local_index_build_ms=%llu\n",
		       (unsigned long long)dm->held_builds,
		       (unsigned long long)(dm->held_build_ns / 1000000u));
	idc_buf_printf(b, "budget.bytes=%zu\nbudget.waits=%llu\n", dm->budget_total,
		       (unsigned long long)dm->mem_waits);
}

/* A failed write of cache.mdb and its reopen (cache_health). */
static void status_cache_health(struct daemon *dm, struct idc_buf *b)
{
	struct cache_health h;
	cache_health(dm->cache, &h);
	idc_buf_printf(b, "cache_failures=%llu\ncache_reopens=%llu\ncache_down=%d\n",
		       (unsigned long long)h.failures, (unsigned long long)h.reopens, h.down);
	kv(b, "cache_failure", h.why);
	kv_time(b, "cache_failure_time", h.failed_at);
}

static int do_status(struct daemon *dm, const struct proto_req *req, struct idc_buf *out)
{
	struct idc_buf b = IDC_BUF_INIT;
	idc_buf_printf(&b, "version=%s\npid=%ld\n", IDC_VERSION, (long)getpid());
	kv_time(&b, "started", dm->start_time);
	idc_buf_printf(&b, "uptime=%lld\n", (long long)(time(NULL) - dm->start_time));
	idc_buf_printf(&b, "rss_kib=%ld\n", rss_kib());
	idc_buf_printf(&b, "connections=%zu\nrefused_connections=%llu\n", dm->nconns,
		       (unsigned long long)dm->refused);
	idc_buf_printf(&b,
		       "connections_admin=%zu\nrefused_connections_uid_limit=%llu\n"
		       "refused_connections_full=%llu\nshed_idle_connections=%llu\n",
		       dm->nadmin, (unsigned long long)dm->refused_uid,
		       (unsigned long long)dm->refused_full, (unsigned long long)dm->shed_idle);
	idc_buf_printf(&b,
		       "mcmap_unread=%zu\nmcmap_refused_unread=%llu\nmcmap_send_failures=%llu\n",
		       peers_unread(dm), (unsigned long long)dm->mcmap_refused,
		       (unsigned long long)dm->mcmap_failed);
	idc_buf_printf(&b, "refused_descriptors=%llu\npassed_descriptors_refused_by=%s\n",
		       (unsigned long long)dm->refused_fds,
		       dm->kernel_refuses_fds ? "kernel" : "daemon");
	kv(&b, "config", dm->config_path);
	kv(&b, "run_dir", dm->run_dir);
	kv(&b, "state_dir", dm->state_dir);
	idc_buf_printf(&b, "cache_durable_commits=%llu\n",
		       (unsigned long long)cache_durable_commits(dm->cache));
	status_cache_health(dm, &b);
	idc_buf_printf(&b, "domains=");
	for (size_t i = 0; i < dm->ndomains; i++)
		idc_buf_printf(&b, "%s%s", i ? "," : "", dm->domains[i]->cfg->name);
	idc_buf_putc(&b, '\n');
	for (size_t i = 0; i < dm->ndomains; i++)
		status_domain(dm, dm->domains[i], &b);
	status_requests(dm, &b);
	status_budget(dm, &b);
	userdb_status(dm, &b);
	daemon_mc_status(dm, &b);
	daemon_nscd_status(dm, &b);
	int rc = b.data ? reply_text(out, req->cmd, &b) : -ENOMEM;
	idc_buf_free(&b);
	return rc;
}

/* ==== EXPIRE / RELOAD ===================================================================== */

/* Whether domain i holds name as its lookups match it: the cache's expiry
 * keys fold case, so a case-sensitive domain is asked first (ALICE must not
 * expire alice). */
static bool holds_name(struct daemon *dm, size_t i, enum cache_kind kind, const char *name)
{
	const struct config_domain *cfg = dm->domains[i]->cfg;
	struct cache_reader *r = daemon_reader(dm);
	const char *dn = cfg->name;
	struct cache_user u;
	struct cache_group g;
	if (!cfg->case_sensitive || r == NULL)
		return true; /* the cache's own folding decides */
	return kind == CACHE_USER ? cache_user_by_name(r, &dn, 1, name, true, &u, NULL) == 0
				  : cache_group_by_name(r, &dn, 1, name, true, &g, NULL) == 0;
}

static int do_expire(struct daemon *dm, const struct proto_req *req, struct idc_buf *out)
{
	enum cache_kind kind = req->what == PROTO_EXPIRE_USER    ? CACHE_USER
			       : req->what == PROTO_EXPIRE_GROUP ? CACHE_GROUP
								 : CACHE_ANY;
	const char *name = req->what == PROTO_EXPIRE_ALL ? NULL : req->name.p;
	size_t total = 0;
	/* A name no domain can hold: refused before the cache, the memory
	 * cache or a refresh is touched. */
	if (name != NULL && !idc_name_valid(name, req->name.len)) {
		idc_log(IDC_LOG_INFO, "expire refused: invalid %s name",
			kind == CACHE_USER ? "user" : "group");
		return proto_reply_status(out, req->cmd, PROTO_ST_BADREQ, "invalid name");
	}
	bool *skip = calloc(dm->ndomains + 1, sizeof(*skip));
	if (skip == NULL)
		return proto_reply_status(out, req->cmd, PROTO_ST_ERROR, "out of memory");
	for (size_t i = 0; name && i < dm->ndomains; i++)
		skip[i] = !holds_name(dm, i, kind, name);
	daemon_reader_end(dm); /* LMDB: no write txn while this thread reads */
	for (size_t i = 0; i < dm->ndomains; i++) {
		size_t count = 0;
		struct idc_diag d = {{0}};
		int rc = skip[i] ? 0
				 : cache_expire(dm->cache, dm->domains[i]->cfg->name, kind, name,
						&count, &d);
		if (rc < 0) {
			free(skip);
			idc_log(IDC_LOG_ERR, "expire: %s", d.msg[0] ? d.msg : idc_strerror(rc));
			return proto_reply_status(out, req->cmd, PROTO_ST_ERROR, d.msg);
		}
		total += count;
		/* files domains have the truth at hand: fetch it back now */
		if (!skip[i])
			domain_schedule(dm->domains[i], 0, true);
	}
	free(skip);
	daemon_mc_expire(dm, req->what, name);
	nscd_neg_clear(dm);           /* what the host's sources lacked is asked again */
	responder_forget_replies(dm); /* kept replies were fresh */
	idc_log(IDC_LOG_INFO, "expired %zu entries on request", total);
	size_t start;
	int rc = proto_reply_begin(out, req->cmd, PROTO_ST_OK, &start);
	rc = rc ? rc : proto_put_u32(out, total > UINT32_MAX ? UINT32_MAX : (uint32_t)total);
	return rc ? rc : proto_reply_end(out, start);
}

static int do_reload(struct daemon *dm, const struct proto_req *req, struct idc_buf *out)
{
	struct idc_buf errors = IDC_BUF_INIT;
	daemon_reader_end(dm);
	int rc = daemon_reload(dm, &errors);
	if (rc < 0)
		rc = proto_reply_status(out, req->cmd, PROTO_ST_ERROR,
					errors.data ? errors.data : idc_strerror(rc));
	else
		rc = proto_reply_status(out, req->cmd, PROTO_ST_OK, NULL);
	idc_buf_free(&errors);
	return rc;
}

/* ==== USERINFO / GROUPINFO ================================================================== */

static void info_meta(struct idc_buf *b, const struct cache_meta *m)
{
	kv(b, "domain", m->domain);
	kv_time(b, "last_update", m->last_update);
	if (m->expires)
		kv_time(b, "expires", m->expires);
	else
		kv(b, "expires", "never");
	kv(b, "expired", m->expired ? "yes" : "no");
}

/* Why lookups pass domain i's entry by (precedence.c), when they do. */
static void info_withheld(struct daemon *dm, size_t i, bool group, const char *name, uint32_t id,
			  struct idc_buf *b)
{
	const char *why = daemon_withheld_reason(dm, i, group, name, id);
	if (why)
		kv(b, "withheld", why);
}

static void info_gids(struct daemon *dm, size_t i, struct cache_reader *r, const char *name,
		      struct idc_buf *b)
{
	size_t n = 0;
	int rc = daemon_user_gids(dm, i, r, name, true, &n);
	idc_buf_printf(b, "groups=");
	for (size_t k = 0; rc == 0 && k < n; k++)
		idc_buf_printf(b, "%s%u", k ? "," : "", dm->gids[k]);
	idc_buf_putc(b, '\n');
}

/* How many SSH public keys the user has (the keys themselves: idcache
 * ssh-authorized-keys). */
static void info_keys(struct cache_reader *r, const char *domain, const char *name,
		      struct idc_buf *b)
{
	const char *const *keys;
	size_t n = 0;
	if (cache_user_keys(r, domain, name, &keys, &n) == 0)
		idc_buf_printf(b, "ssh_keys=%zu\n", n);
}

static int user_info(struct daemon *dm, struct cache_reader *r, const char *name, struct idc_buf *b)
{
	struct cache_user u;
	struct cache_meta m;
	int rc = -ENOENT;
	size_t i = 0;
	for (; i < dm->ndomains; i++) {
		const struct config_domain *cfg = dm->domains[i]->cfg;
		const char *dn = cfg->name;
		rc = cache_user_by_name(r, &dn, 1, name, cfg->case_sensitive, &u, &m);
		if (rc != -ENOENT)
			break;
	}
	if (rc < 0)
		return rc;
	kv(b, "name", u.name);
	idc_buf_printf(b, "uid=%u\ngid=%u\n", u.uid, u.gid);
	kv(b, "gecos", u.gecos);
	kv(b, "home", u.dir);
	kv(b, "shell", u.shell);
	idc_buf_printf(b, "order=%llu\n", (unsigned long long)u.order);
	if (u.orig_dn)
		kv(b, "original_dn", u.orig_dn);
	info_keys(r, dm->domains[i]->cfg->name, u.name, b);
	info_meta(b, &m);
	info_withheld(dm, i, false, u.name, u.uid, b);
	subid_user_info(dm, i, &u, b);
	/* last, with a copy of the name: the group search starts r's memory,
	 * which holds u, over */
	char own[CACHE_NAME_MAX + 1];
	snprintf(own, sizeof(own), "%s", u.name);
	info_gids(dm, i, r, own, b);
	return 0;
}

static void list(struct idc_buf *b, const char *key, const char *const *v, size_t n)
{
	idc_buf_printf(b, "%s=", key);
	for (size_t i = 0; i < n; i++)
		idc_buf_printf(b, "%s%s", i ? "," : "", v[i]);
	idc_buf_putc(b, '\n');
}

static int group_info(struct daemon *dm, struct cache_reader *r, const char *name,
		      struct idc_buf *b)
{
	struct cache_group g;
	struct cache_meta m;
	int rc = -ENOENT;
	size_t i = 0;
	for (; i < dm->ndomains; i++) {
		const struct config_domain *cfg = dm->domains[i]->cfg;
		const char *dn = cfg->name;
		rc = cache_group_by_name(r, &dn, 1, name, cfg->case_sensitive, &g, &m);
		if (rc != -ENOENT)
			break;
	}
	if (rc < 0)
		return rc;
	kv(b, "name", g.name);
	idc_buf_printf(b, "gid=%u\n", g.gid);
	list(b, "members", g.members, g.nmembers);
	list(b, "member_groups", g.member_groups, g.nmember_groups);
	idc_buf_printf(b, "order=%llu\n", (unsigned long long)g.order);
	if (g.orig_dn)
		kv(b, "original_dn", g.orig_dn);
	info_meta(b, &m);
	info_withheld(dm, i, true, g.name, g.gid, b);
	return 0;
}

/* Why no domain serves the name: a skipped line of a files domain, or the
 * name another case spells (names are case-sensitive there). Text in b. */
static const char *why_not_served(struct daemon *dm, struct cache_reader *r,
				  const struct proto_req *req, struct idc_buf *b)
{
	bool group = req->cmd == PROTO_CMD_GROUPINFO;
	const char *name = req->name.p;
	char why[600];
	idc_buf_reset(b);
	idc_buf_printf(b, "no served domain holds this name");
	for (size_t i = 0; i < dm->ndomains; i++) {
		struct domain *d = dm->domains[i];
		const char *dn = d->cfg->name;
		struct cache_user u;
		struct cache_group g;
		if (d->files && files_domain_why(d->files, group, name, why, sizeof(why)))
			idc_buf_printf(b, "; %s", why);
		else if (r && d->cfg->case_sensitive && cache_name_valid(name, strlen(name)) &&
			 (group ? cache_group_by_name(r, &dn, 1, name, false, &g, NULL)
				: cache_user_by_name(r, &dn, 1, name, false, &u, NULL)) == 0)
			idc_buf_printf(b, "; domain %s has '%s' (names are case-sensitive)", dn,
				       group ? g.name : u.name);
	}
	return b->data ? b->data : "no served domain holds this name";
}

static int do_info(struct daemon *dm, const struct proto_req *req, struct idc_buf *out)
{
	struct cache_reader *r = daemon_reader(dm);
	struct idc_buf b = IDC_BUF_INIT;
	int rc = !r ? -EIO : !cache_name_valid(req->name.p, req->name.len) ? -ENOENT : 0;
	if (rc == 0)
		rc = req->cmd == PROTO_CMD_USERINFO ? user_info(dm, r, req->name.p, &b)
						    : group_info(dm, r, req->name.p, &b);
	if (rc == 0)
		rc = b.data ? reply_text(out, req->cmd, &b) : -ENOMEM;
	else if (rc == -ENOENT)
		rc = proto_reply_status(out, req->cmd, PROTO_ST_NOTFOUND,
					why_not_served(dm, r, req, &b));
	else
		rc = proto_reply_status(out, req->cmd, PROTO_ST_ERROR, idc_strerror(rc));
	idc_buf_free(&b);
	return rc;
}

/* ==== dispatch =================================================================================
 */

int admin_handle(struct conn *c, const struct proto_req *req, struct idc_buf *out)
{
	switch (req->cmd) {
	case PROTO_CMD_STATUS:
		return do_status(c->dm, req, out);
	case PROTO_CMD_EXPIRE:
		return do_expire(c->dm, req, out);
	case PROTO_CMD_RELOAD:
		return do_reload(c->dm, req, out);
	case PROTO_CMD_USERINFO:
	case PROTO_CMD_GROUPINFO:
		return do_info(c->dm, req, out);
	default:
		return proto_reply_status(out, req->cmd, PROTO_ST_BADREQ, "not an admin command");
	}
}
