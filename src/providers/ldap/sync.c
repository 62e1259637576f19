/*
 * sync: content synchronization (RFC 4533) of a domain, as a
 * refreshAndPersist search per search base ("feed"): users and groups
 * under one base share one feed; separate bases get one each.
 *
 * A feed's refresh phase is collected in one request (LP_SYNC) and stored
 * in one transaction when the server says the refresh is done: a full
 * refresh (no cookie, or one the server refused) is built aside and
 * swapped in whole, removing what the directory no longer has. Then each
 * notice (add, modify, delete, rename) joins a batch, stored at the end of
 * the read slice it came in (lp_sync_tick), so a burst is a few
 * transactions, each at most LP_TURN_SYNC_MS of reading apart. The cookie goes
 * into the transaction of the changes it covers, with the entryUUID
 * records a later delete or rename needs (syncmap.c): a restart resumes
 * where the store is, never ahead of it.
 *
 * While every feed is live the cache holds what the directory holds:
 * lookups send no search and entries do not expire (stored with ttl 0).
 * The feed is down when the connection goes (the server, the network,
 * a keepalive unanswered): cached data is served, the connection comes
 * back with the doubling, jittered probes of conn.c, the feeds resume with
 * their cookies; after ldap_sync_fallback_timeout down, entries expire and
 * lookups search again as when polling, until the feed is live again.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "providers/ldap/lprov_int.h"

#define LP_SYNC_RETRY_MIN_MS 1000  /* first wait before a feed starts again */
#define LP_SYNC_RETRY_MAX_MS 60000 /* longest */

static const char *dom(const struct lp_sync_feed *f)
{
	return f->sy->ld->cfg.name;
}

/* ==== set-up ==================================================================== */

static int feed_init(struct lp_sync *sy, struct lp_sync_feed *f, const char *base, bool u, bool g)
{
	struct lprov_domain *ld = sy->ld;
	struct idc_buf b = IDC_BUF_INIT;
	f->sy = sy;
	f->idx = (int)(f - sy->feed);
	f->base = base;
	f->users = u;
	f->groups = g;
	int rc = lp_oc_filter(&b, ld, u, g);
	f->filter = rc ? NULL : b.data;
	if (rc)
		idc_buf_free(&b);
	return rc;
}

struct lp_sync *lp_sync_new(struct lprov_domain *ld)
{
	if (ld->cfg.sync == LPROV_SYNC_POLL)
		return NULL;
	struct lp_sync *sy = calloc(1, sizeof(*sy));
	if (!sy)
		return NULL;
	sy->ld = ld;
	sy->map.seed = ld->hash_seed;
	sy->support = ld->cfg.sync == LPROV_SYNC_SYNCREPL ? LP_SY_YES : LP_SY_UNKNOWN;
	sy->backoff_ms = LP_SYNC_RETRY_MIN_MS;
	bool one = ld->gbase == ld->ubase;
	int rc = feed_init(sy, &sy->feed[0], ld->ubase, true, one);
	if (!rc && !one)
		rc = feed_init(sy, &sy->feed[1], ld->gbase, false, true);
	sy->nfeeds = one ? 1 : 2;
	if (rc) {
		ld->sync = sy;
		lp_sync_free(ld);
		return NULL;
	}
	return sy;
}

void lp_sync_free(struct lprov_domain *ld)
{
	struct lp_sync *sy = ld->sync;
	if (!sy)
		return;
	ld->sync = NULL;
	for (size_t i = 0; i < sy->nfeeds; i++) {
		struct lp_sync_feed *f = &sy->feed[i];
		lp_sync_batch_drop(f);
		free(f->filter);
		idc_buf_free(&f->cookie);
		idc_buf_free(&f->next);
	}
	lp_smap_free(&sy->map);
	free(sy);
}

/* ==== the feed's searches ============================================================ */

static uint32_t backoff_next(struct lp_sync *sy)
{
	uint32_t ms = sy->backoff_ms;
	sy->backoff_ms = ms >= LP_SYNC_RETRY_MAX_MS / 2 ? LP_SYNC_RETRY_MAX_MS : ms * 2;
	return (uint32_t)lp_jitter_ms(sy->ld, ms);
}

/* Stop f (its search abandoned, what it had not committed dropped); it
 * starts again after the backoff. */
void lp_sync_feed_restart(struct lp_sync_feed *f, const char *why)
{
	struct lprov_domain *ld = f->sy->ld;
	if (f->msgid && ld->conn)
		ldap_abandon_ext(ld->conn, f->msgid, NULL, NULL);
	idc_log(IDC_LOG_WARN, "ldap domain %s: sync feed of %s stopped: %s", dom(f), f->base, why);
	f->msgid = 0;
	f->refreshing = false;
	f->has_next = false;
	f->sweep = false;
	lp_sync_batch_drop(f);
	f->retry_ns = idc_now_ns() + (uint64_t)backoff_next(f->sy) * 1000000u;
}

/* What the feed stored never expires: when it stops following the
 * directory, every entry expires and the maps start over, so lookups
 * search again. */
static void expire_all(struct lp_sync *sy, const char *why)
{
	struct lprov_domain *ld = sy->ld;
	struct idc_diag d = {{0}};
	size_t n = 0;
	sy->fallen_back = true;
	int rc = cache_expire(ld->cache, ld->cfg.name, CACHE_ANY, NULL, &n, &d);
	idc_log(IDC_LOG_WARN,
		"ldap domain %s: %s: %zu cached entries expire and lookups search "
		"again%s%s",
		ld->cfg.name, why, n, rc ? ": " : "",
		rc ? (d.msg[0] ? d.msg : idc_strerror(rc)) : "");
	if (ld->hook)
		ld->hook(NULL, ld->hook_arg); /* the maps' records never expire otherwise */
}

/* The content synchronization is not to be had from this server. */
static void give_up(struct lp_sync *sy, const char *why)
{
	if (sy->support != LP_SY_NO && sy->was_live && !sy->fallen_back)
		expire_all(sy, "the sync feed is given up");
	if (sy->support != LP_SY_NO)
		idc_log(IDC_LOG_WARN, "ldap domain %s: %s: %s; polling instead", sy->ld->cfg.name,
			lp_server(sy->ld), why);
	sy->support = LP_SY_NO;
	for (size_t i = 0; i < sy->nfeeds; i++) {
		struct lp_sync_feed *f = &sy->feed[i];
		if (f->msgid && sy->ld->conn)
			ldap_abandon_ext(sy->ld->conn, f->msgid, NULL, NULL);
		f->msgid = 0;
		f->refreshing = false;
		lp_sync_batch_drop(f);
	}
}

static int feed_start(struct lp_sync_feed *f)
{
	struct lprov_domain *ld = f->sy->ld;
	struct idc_buf v = IDC_BUF_INIT;
	int rc = lp_sync_request(LP_SYNC_REFRESH_AND_PERSIST, f->has_cookie ? f->cookie.data : NULL,
				 f->has_cookie ? f->cookie.len : 0, &v);
	if (rc == 0)
		rc = lp_sync_batch_new(f);
	if (rc) {
		idc_buf_free(&v);
		return rc;
	}
	LDAPControl c = {(char *)LP_OID_SYNC_REQUEST, {v.len, v.data}, 1};
	LDAPControl *ctrls[] = {&c, NULL};
	int lrc =
	    ldap_search_ext(ld->conn, f->base, LDAP_SCOPE_SUBTREE, f->filter, (char **)ld->attrs, 0,
			    ctrls, NULL, NULL, LDAP_NO_LIMIT, &f->msgid);
	idc_buf_free(&v);
	if (lrc != LDAP_SUCCESS) {
		f->msgid = 0;
		ld->broken = true; /* the connection is replaced; the feed starts again */
		return -EIO;
	}
	ld->nsearches++;
	f->refreshing = true;
	f->full = !f->has_cookie;
	f->sweep = f->full;
	f->gen++;
	f->nrefresh = 0;
	f->started_ns = idc_now_ns();
	f->sy->last_msg_ns = f->started_ns; /* quiet from now on, if at all */
	idc_log(IDC_LOG_INFO, "ldap domain %s: %s: sync feed of %s: %s", dom(f), lp_server(ld),
		f->base, f->full ? "full refresh" : "resuming with the stored cookie");
	return 0;
}

static void rootdse_send(struct lp_sync *sy)
{
	struct lprov_domain *ld = sy->ld;
	char *attrs[] = {"supportedControl", NULL};
	if (ldap_search_ext(ld->conn, "", LDAP_SCOPE_BASE, "(objectClass=*)", attrs, 0, NULL, NULL,
			    NULL, 2, &sy->rootdse_msgid) != LDAP_SUCCESS) {
		sy->rootdse_msgid = 0;
		ld->broken = true;
		return;
	}
	ld->nsearches++;
	sy->rootdse_has = false;
}

/* ==== messages ======================================================================= */

bool lp_sync_owns(const struct lprov_domain *ld, int msgid)
{
	const struct lp_sync *sy = ld->sync;
	if (!sy || msgid <= 0)
		return false;
	if (msgid == sy->rootdse_msgid || msgid == sy->ka_msgid)
		return true;
	for (size_t i = 0; i < sy->nfeeds; i++)
		if (sy->feed[i].msgid == msgid)
			return true;
	return false;
}

static void set_next_cookie(struct lp_sync_feed *f, const struct lp_sync_msg *m)
{
	if (!m->has_cookie || m->cookie_len > LP_COOKIE_MAX)
		return;
	idc_buf_reset(&f->next);
	f->has_next = idc_buf_append(&f->next, m->cookie, m->cookie_len) == 0;
}

/* A notice for an entry the open batch already changed: the batch is
 * stored first, so the later notice wins (a refresh names each once). */
static bool touch(struct lp_sync_feed *f, const unsigned char *uuid)
{
	char key[40];
	lp_smap_key(uuid, key);
	if (lp_map_get(&f->touched, key)) {
		if (f->refreshing)
			return false;
		if (lp_sync_commit(f) || lp_sync_batch_new(f))
			return false;
	}
	char *k = idc_arena_strndup(&f->batch->arena, key, strlen(key));
	return k && lp_map_put(&f->touched, k, k) >= 0;
}

static int push_op(struct lp_sync_feed *f, const unsigned char *uuid, const char *uname,
		   const char *gname, const char *ndn)
{
	struct lp_sop *op = idc_arena_alloc(&f->batch->arena, sizeof(*op));
	if (!op)
		return -ENOMEM;
	memcpy(op->uuid, uuid, LP_UUID_LEN);
	op->uname = uname;
	op->gname = gname;
	op->ndn = ndn;
	f->sy->nchanges += !f->refreshing;
	return lp_vec_push(&f->ops, op);
}

static void entry_changed(struct lp_sync_feed *f, LDAPMessage *msg, const unsigned char *uuid)
{
	struct lprov_domain *ld = f->sy->ld;
	struct lp_req *r = f->batch;
	if (!touch(f, uuid))
		return;
	r = f->batch; /* touch() may have stored the last one */
	char *dn = ldap_get_dn(ld->conn, msg);
	char *ndn = dn ? lp_dn_normalize(&r->arena, dn, strlen(dn)) : NULL;
	ldap_memfree(dn);
	if (!ndn)
		return;
	lp_entry(ld, &f->fs, msg);
	const struct lp_user *u = lp_map_get(&r->udn, ndn);
	const struct lp_group *g = lp_map_get(&r->gdn, ndn);
	/* neither: no longer a valid user or group, which removes it */
	if (push_op(f, uuid, u ? u->name : NULL, g ? g->name : NULL, ndn))
		r->partial = true;
}

static void entry_deleted(struct lp_sync_feed *f, const unsigned char *uuid)
{
	if (!lp_smap_uuid(&f->sy->map, uuid) || !touch(f, uuid))
		return; /* never stored: nothing to remove */
	if (push_op(f, uuid, NULL, NULL, ""))
		f->batch->partial = true;
}

static void entry_present(struct lp_sync_feed *f, const unsigned char *uuid)
{
	struct lp_sent *e = lp_smap_uuid(&f->sy->map, uuid);
	if (e)
		e->seen = f->gen;
}

static void protocol_error(struct lp_sync_feed *f, const char *what)
{
	struct lprov_domain *ld = f->sy->ld;
	lp_log_once(ld, IDC_LOG_WARN, "ldap domain %s: %s: sync feed: %s", dom(f), lp_server(ld),
		    what);
	lp_conn_fail(ld, what);
}

/* ldap_max_memory: a refresh phase larger than the domain may hold is
 * not to be had this way. */
/* ldap_max_memory, ldap_max_entries: a refresh phase larger than the
 * domain may hold, or a directory with more entries than it may take, is
 * not to be followed this way (a server sending adds without end included). */
static bool over_limits(struct lp_sync_feed *f)
{
	const struct lprov_config *c = &f->sy->ld->cfg;
	if (f->refreshing && f->batch && f->batch->arena.total > c->max_memory) {
		give_up(f->sy, "the refresh holds more than ldap_max_memory");
		return true;
	}
	if (f->sy->map.n + f->ops.n > c->max_entries) {
		give_up(f->sy, "the feed holds more entries than ldap_max_entries");
		return true;
	}
	return false;
}

static void on_entry(struct lp_sync_feed *f, LDAPMessage *msg)
{
	struct lprov_domain *ld = f->sy->ld;
	LDAPControl **ctrls = NULL;
	if (ldap_get_entry_controls(ld->conn, msg, &ctrls) != LDAP_SUCCESS)
		ctrls = NULL;
	LDAPControl *c = ldap_control_find(LP_OID_SYNC_STATE, ctrls, NULL);
	struct lp_sync_msg m;
	int rc =
	    c ? lp_sync_parse_state(c->ldctl_value.bv_val, c->ldctl_value.bv_len, &m) : -EPROTO;
	if (rc) {
		ldap_controls_free(ctrls);
		return protocol_error(f, "an entry without a valid Sync State control");
	}
	set_next_cookie(f, &m);
	f->nrefresh += f->refreshing;
	if (m.state == LP_SYNC_PRESENT)
		entry_present(f, m.uuid);
	else if (m.state == LP_SYNC_DELETE)
		entry_deleted(f, m.uuid);
	else
		entry_changed(f, msg, m.uuid);
	ldap_controls_free(ctrls);
	over_limits(f);
}

static void refresh_done(struct lp_sync_feed *f)
{
	struct lp_sync *sy = f->sy;
	f->refreshing = false;
	size_t n = f->ops.n;
	if (lp_sync_commit(f))
		return;
	sy->nrefreshes++;
	sy->nfull += f->full;
	sy->backoff_ms = LP_SYNC_RETRY_MIN_MS;
	idc_log(IDC_LOG_INFO,
		"ldap domain %s: sync feed of %s live: %s, %zu entries named, %zu changed, "
		"%.0f ms",
		dom(f), f->base, f->full ? "full refresh" : "resumed", f->nrefresh, n,
		(double)(idc_now_ns() - f->started_ns) / 1e6);
}

static void on_idset(struct lp_sync_feed *f, const struct lp_sync_msg *m)
{
	for (size_t i = 0; i < m->nuuids; i++) {
		const unsigned char *u = m->uuids + i * LP_UUID_LEN;
		if (m->deletes)
			entry_deleted(f, u);
		else
			entry_present(f, u);
	}
}

static void on_intermediate(struct lp_sync_feed *f, LDAPMessage *msg)
{
	struct lprov_domain *ld = f->sy->ld;
	char *oid = NULL;
	struct berval *data = NULL;
	if (ldap_parse_intermediate(ld->conn, msg, &oid, &data, NULL, 0) != LDAP_SUCCESS || !oid ||
	    strcmp(oid, LP_OID_SYNC_INFO)) {
		ldap_memfree(oid);
		ber_bvfree(data);
		return; /* not ours to read */
	}
	struct lp_sync_msg m;
	int rc = data ? lp_sync_parse_info(data->bv_val, data->bv_len, &m) : -EPROTO;
	ldap_memfree(oid);
	if (rc == 0)
		set_next_cookie(f, &m); /* m points into data */
	ber_bvfree(data);
	if (rc)
		return protocol_error(f, "a malformed Sync Info message");
	if (m.kind == LP_SYNC_MSG_IDSET)
		on_idset(f, &m);
	if (m.kind == LP_SYNC_MSG_REFRESH_PRESENT && f->refreshing)
		f->sweep = true;
	bool done =
	    (m.kind == LP_SYNC_MSG_REFRESH_PRESENT || m.kind == LP_SYNC_MSG_REFRESH_DELETE) &&
	    m.done && f->refreshing;
	lp_sync_msg_free(&m);
	if (done)
		refresh_done(f);
}

/* The server ended the search (a refresh-only answer, a refused cookie,
 * an error). */
static void on_result(struct lp_sync_feed *f, LDAPMessage *msg)
{
	struct lp_sync *sy = f->sy;
	struct lprov_domain *ld = sy->ld;
	int err = LDAP_OTHER;
	char *text = NULL;
	LDAPControl **ctrls = NULL;
	if (ldap_parse_result(ld->conn, msg, &err, NULL, &text, NULL, &ctrls, 0) != LDAP_SUCCESS)
		err = LDAP_OTHER;
	LDAPControl *c = ldap_control_find(LP_OID_SYNC_DONE, ctrls, NULL);
	struct lp_sync_msg m;
	bool done_ok =
	    c && lp_sync_parse_done(c->ldctl_value.bv_val, c->ldctl_value.bv_len, &m) == 0;
	if (done_ok && err == LDAP_SUCCESS && f->refreshing) {
		set_next_cookie(f, &m); /* m points into ctrls */
		f->sweep |= !m.deletes;
	}
	char why[300];
	snprintf(why, sizeof(why), "%s%s%.200s", ldap_err2string(err), text && *text ? ": " : "",
		 text ? text : "");
	ldap_memfree(text);
	ldap_controls_free(ctrls);
	f->msgid = 0;
	if (err == LP_E_SYNC_REFRESH_REQUIRED) {
		idc_log(IDC_LOG_INFO,
			"ldap domain %s: the server refused the sync cookie; a full "
			"refresh follows",
			dom(f));
		lp_sync_batch_drop(f);
		f->has_cookie = f->has_next = false;
		f->refreshing = false;
		f->retry_ns = idc_now_ns();
		return;
	}
	if (err == LDAP_UNAVAILABLE_CRITICAL_EXTENSION || err == LDAP_PROTOCOL_ERROR)
		return give_up(sy, why);
	if (err == LDAP_SUCCESS && f->refreshing)
		refresh_done(f);
	lp_sync_feed_restart(f, err == LDAP_SUCCESS ? "the server ended the search" : why);
}

static void on_rootdse(struct lp_sync *sy, LDAPMessage *msg)
{
	struct lprov_domain *ld = sy->ld;
	if (ldap_msgtype(msg) == LDAP_RES_SEARCH_ENTRY) {
		struct berval **v = ldap_get_values_len(ld->conn, msg, "supportedControl");
		for (size_t i = 0; v && v[i]; i++)
			sy->rootdse_has |=
			    idc_memcaseeq(v[i]->bv_val, v[i]->bv_len, LP_OID_SYNC_REQUEST,
					  strlen(LP_OID_SYNC_REQUEST));
		ldap_value_free_len(v);
		return;
	}
	if (ldap_msgtype(msg) != LDAP_RES_SEARCH_RESULT)
		return;
	sy->rootdse_msgid = 0;
	if (!sy->rootdse_has)
		return give_up(sy, "the server does not list content synchronization");
	sy->support = LP_SY_YES;
	idc_log(IDC_LOG_INFO, "ldap domain %s: %s offers content synchronization", ld->cfg.name,
		lp_server(ld));
}

void lp_sync_message(struct lprov_domain *ld, LDAPMessage *msg)
{
	struct lp_sync *sy = ld->sync;
	int id = ldap_msgid(msg);
	sy->last_msg_ns = idc_now_ns();
	if (id == sy->rootdse_msgid)
		return on_rootdse(sy, msg);
	if (id == sy->ka_msgid) {
		sy->ka_msgid = 0;
		return;
	}
	for (size_t i = 0; i < sy->nfeeds; i++) {
		struct lp_sync_feed *f = &sy->feed[i];
		if (f->msgid != id)
			continue;
		if (lp_sync_batch_new(f))
			return lp_sync_feed_restart(f, idc_strerror(-ENOMEM));
		if (!f->refreshing && !f->first_ns)
			f->first_ns = sy->last_msg_ns; /* the trace's start (lp_sync_commit) */
		switch (ldap_msgtype(msg)) {
		case LDAP_RES_SEARCH_ENTRY:
			return on_entry(f, msg);
		case LDAP_RES_INTERMEDIATE:
			return on_intermediate(f, msg);
		case LDAP_RES_SEARCH_RESULT:
			return on_result(f, msg);
		default:
			return; /* references: not followed */
		}
	}
}

/* ==== the loop's turn ================================================================== */

bool lp_sync_live(const struct lprov_domain *ld)
{
	const struct lp_sync *sy = ld->sync;
	if (!sy || sy->support != LP_SY_YES || !ld->conn || ld->hs)
		return false;
	for (size_t i = 0; i < sy->nfeeds; i++)
		if (!sy->feed[i].msgid || sy->feed[i].refreshing)
			return false;
	return true;
}

bool lp_sync_active(const struct lprov_domain *ld)
{
	const struct lp_sync *sy = ld->sync;
	if (!sy)
		return false;
	bool any = sy->rootdse_msgid || sy->ka_msgid;
	for (size_t i = 0; i < sy->nfeeds; i++)
		any |= sy->feed[i].msgid != 0;
	return any;
}

static bool wanted(const struct lp_sync *sy)
{
	return sy && sy->support != LP_SY_NO;
}

bool lp_sync_wanted(const struct lprov_domain *ld)
{
	return wanted(ld->sync);
}

bool lp_sync_polls(const struct lprov_domain *ld)
{
	return !wanted(ld->sync) || ld->sync->fallen_back;
}

void lprov_domain_expired(struct lprov_domain *ld)
{
	struct lp_sync *sy = ld->sync;
	if (!lp_sync_live(ld))
		return;
	idc_log(IDC_LOG_INFO, "ldap domain %s: entries expired: the sync feed refreshes in full",
		ld->cfg.name);
	for (size_t i = 0; i < sy->nfeeds; i++) {
		struct lp_sync_feed *f = &sy->feed[i];
		/* what a batch held comes again with the full refresh (and no
		 * store may run here: the caller may hold a read transaction) */
		ldap_abandon_ext(ld->conn, f->msgid, NULL, NULL);
		f->msgid = 0;
		f->has_cookie = f->has_next = false;
		lp_sync_batch_drop(f);
		f->retry_ns = idc_now_ns();
	}
}

void lp_sync_lost(struct lprov_domain *ld)
{
	struct lp_sync *sy = ld->sync;
	if (!sy)
		return;
	sy->rootdse_msgid = sy->ka_msgid = 0;
	for (size_t i = 0; i < sy->nfeeds; i++) {
		struct lp_sync_feed *f = &sy->feed[i];
		if (f->msgid && !f->refreshing)
			lp_sync_commit(f); /* the notices that came are true */
		f->msgid = 0;
		f->refreshing = false;
		f->has_next = false;
		f->sweep = false;
		lp_sync_batch_drop(f);
		f->retry_ns = 0; /* as soon as a connection is back */
	}
}

/* Down for ldap_sync_fallback_timeout: entries expire again and lookups
 * search, as when polling, until the feed is live again. */
static void fall_back(struct lp_sync *sy)
{
	char why[96];
	snprintf(why, sizeof(why), "the sync feed is down for %u s (ldap_sync_fallback_timeout)",
		 (unsigned)(sy->ld->cfg.sync_fallback_ms / 1000));
	expire_all(sy, why);
}

static void track_down(struct lp_sync *sy, uint64_t now)
{
	bool live = lp_sync_live(sy->ld);
	if (live) {
		if (sy->down_since_ns || !sy->was_live)
			idc_log(IDC_LOG_INFO, "ldap domain %s: sync live", sy->ld->cfg.name);
		sy->down_since_ns = 0;
		sy->was_live = true;
		sy->fallen_back = false;
		return;
	}
	if (!sy->was_live)
		return; /* the first refresh: lookups search as usual meanwhile */
	if (!sy->down_since_ns)
		sy->down_since_ns = now;
	if (!sy->fallen_back &&
	    now - sy->down_since_ns >= (uint64_t)sy->ld->cfg.sync_fallback_ms * 1000000u)
		fall_back(sy);
}

/* Whether a feed's search is out on a ready connection (a quiet refresh
 * is checked as a quiet persist phase is). */
static bool feeds_running(const struct lp_sync *sy)
{
	const struct lprov_domain *ld = sy->ld;
	bool any = false;
	for (size_t i = 0; i < sy->nfeeds; i++)
		any |= sy->feed[i].msgid != 0;
	return any && ld->conn && !ld->hs;
}

static void keepalive(struct lp_sync *sy, uint64_t now)
{
	struct lprov_domain *ld = sy->ld;
	uint64_t every = (uint64_t)ld->cfg.sync_keepalive_ms * 1000000u;
	if (sy->ka_msgid && now >= sy->ka_deadline_ns) {
		sy->ka_msgid = 0;
		lp_conn_fail(ld, "no answer to the sync feed's keepalive within "
				 "ldap_network_timeout");
		return;
	}
	if (!every || sy->ka_msgid || !feeds_running(sy) || now - sy->last_msg_ns < every)
		return;
	if (ldap_extended_operation(ld->conn, LDAP_EXOP_WHO_AM_I, NULL, NULL, NULL,
				    &sy->ka_msgid) != LDAP_SUCCESS) {
		sy->ka_msgid = 0;
		ld->broken = true;
		return;
	}
	sy->ka_deadline_ns = now + (uint64_t)ld->cfg.network_timeout_ms * 1000000u;
}

/* The users' feed first: the groups' refresh then names its member DNs
 * from the users' records (ldap_member_names_from_rdn = false). */
static void start_feeds(struct lp_sync *sy, uint64_t now)
{
	for (size_t i = 0; i < sy->nfeeds && sy->ld->conn && !sy->ld->broken; i++) {
		struct lp_sync_feed *f = &sy->feed[i];
		if (!f->msgid && now >= f->retry_ns && feed_start(f) == -ENOMEM)
			f->retry_ns = now + (uint64_t)backoff_next(sy) * 1000000u;
		if (!f->msgid || f->refreshing)
			return;
	}
}

void lp_sync_tick(struct lprov_domain *ld, uint64_t now)
{
	struct lp_sync *sy = ld->sync;
	if (!wanted(sy))
		return;
	if (!sy->loaded)
		lp_sync_load_state(sy);
	for (size_t i = 0; i < sy->nfeeds; i++)
		if (!sy->feed[i].refreshing)
			lp_sync_commit(&sy->feed[i]);
	keepalive(sy, now);
	track_down(sy, now);
	if (!ld->online || ld->broken)
		return; /* conn.c's probes bring the connection back */
	if (!ld->conn && lp_conn_ensure(ld))
		return; /* offline now: the probes bring the connection back */
	if (!ld->conn || ld->hs)
		return; /* the set-up goes on from the loop (lp_conn_handshake) */
	if (sy->support == LP_SY_UNKNOWN && !sy->rootdse_msgid)
		rootdse_send(sy);
	if (sy->support == LP_SY_YES)
		start_feeds(sy, now);
}

static void earliest(uint64_t *best, uint64_t t)
{
	if (t && (!*best || t < *best))
		*best = t;
}

uint64_t lp_sync_next_ns(const struct lprov_domain *ld)
{
	const struct lp_sync *sy = ld->sync;
	uint64_t best = 0, now = idc_now_ns();
	if (!wanted(sy))
		return 0;
	if (sy->down_since_ns && !sy->fallen_back)
		earliest(&best, sy->down_since_ns + (uint64_t)ld->cfg.sync_fallback_ms * 1000000u);
	if (!ld->online)
		return best; /* conn.c's probes come first */
	if (!sy->loaded || (!ld->conn && !ld->broken))
		return now;
	if (sy->support == LP_SY_UNKNOWN && !sy->rootdse_msgid && ld->conn && !ld->hs)
		return now;
	for (size_t i = 0; i < sy->nfeeds; i++) {
		const struct lp_sync_feed *f = &sy->feed[i];
		if (!f->refreshing && (f->ops.n || f->has_next))
			return now;
		if (!f->msgid && sy->support == LP_SY_YES && ld->conn && !ld->hs)
			earliest(&best, f->retry_ns ? f->retry_ns : now);
		if (!f->msgid || f->refreshing)
			break; /* the next feed waits for this one (start_feeds) */
	}
	earliest(&best, sy->ka_msgid ? sy->ka_deadline_ns : 0);
	if (!sy->ka_msgid && ld->cfg.sync_keepalive_ms && feeds_running(sy))
		earliest(&best, sy->last_msg_ns + (uint64_t)ld->cfg.sync_keepalive_ms * 1000000u);
	return best;
}

void lp_sync_status(const struct lprov_domain *ld, struct lprov_domain_status *st)
{
	const struct lp_sync *sy = ld->sync;
	st->sync = "poll";
	if (!wanted(sy))
		return;
	bool refreshing = false;
	for (size_t i = 0; i < sy->nfeeds; i++)
		refreshing |= sy->feed[i].msgid && sy->feed[i].refreshing;
	st->sync = lp_sync_live(ld) ? "live" : refreshing ? "refreshing" : "down";
	st->sync_cookie_time = sy->cookie_time;
	st->sync_entries = sy->map.n;
	st->sync_changes = sy->nchanges;
	st->sync_refreshes = sy->nrefreshes;
	st->sync_full = sy->nfull;
}
