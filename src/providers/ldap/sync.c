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
 * transactions, each at most LP_TURN_MS of reading apart. The cookie goes
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

enum sy_support { SY_UNKNOWN = 0, SY_YES, SY_NO };

/* One change a batch makes to the entryUUID records. */
struct sop {
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
	struct lp_vec ops;   /* struct sop * (batch arena) */
	struct lp_map touched;
	uint64_t retry_ns; /* not running: start again then */
	uint64_t started_ns;
	size_t nrefresh; /* entries of this refresh phase */
};

struct lp_sync {
	struct lprov_domain *ld;
	enum sy_support support;
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
	sy->support = ld->cfg.sync == LPROV_SYNC_SYNCREPL ? SY_YES : SY_UNKNOWN;
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

static void batch_drop(struct lp_sync_feed *f)
{
	if (f->batch)
		lp_req_release(f->batch);
	f->batch = NULL;
	lp_vec_free(&f->ops);
	lp_map_free(&f->touched);
}

void lp_sync_free(struct lprov_domain *ld)
{
	struct lp_sync *sy = ld->sync;
	if (!sy)
		return;
	ld->sync = NULL;
	for (size_t i = 0; i < sy->nfeeds; i++) {
		struct lp_sync_feed *f = &sy->feed[i];
		batch_drop(f);
		free(f->filter);
		idc_buf_free(&f->cookie);
		idc_buf_free(&f->next);
	}
	lp_smap_free(&sy->map);
	free(sy);
}

/* ==== state in the cache ========================================================== */

/* What a cookie is valid for: the base and filter it was given for. */
static uint64_t fingerprint(const struct lp_sync_feed *f)
{
	struct idc_buf b = IDC_BUF_INIT;
	uint64_t h = 0;
	if (idc_buf_printf(&b, "%s\n%s", f->base, f->filter) == 0)
		h = idc_hash64(b.data, b.len, 0x5eed);
	idc_buf_free(&b);
	return h;
}

static int hexval(char c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* "cookie.N" = "<fingerprint, 16 hex> <unix seconds stored> <cookie in hex>" */
static void load_cookie(struct lp_sync_feed *f, const char *v)
{
	char fp[17];
	snprintf(fp, sizeof(fp), "%016llx", (unsigned long long)fingerprint(f));
	int64_t at = 0;
	size_t i = 17, n = strlen(v);
	for (; i < n && i < 17 + 18 && v[i] >= '0' && v[i] <= '9'; i++)
		at = at * 10 + (v[i] - '0');
	if (n < i + 1 || strncmp(v, fp, 16) || v[16] != ' ' || v[i] != ' ' || (n - i - 1) % 2 ||
	    (n - i - 1) / 2 > LP_COOKIE_MAX) {
		idc_log(IDC_LOG_INFO,
			"ldap domain %s: the stored sync cookie is for another search; a full "
			"refresh follows",
			dom(f));
		return;
	}
	idc_buf_reset(&f->cookie);
	f->sy->cookie_time = at > f->sy->cookie_time ? at : f->sy->cookie_time;
	for (i++; i < n; i += 2) {
		int hi = hexval(v[i]), lo = hexval(v[i + 1]);
		if (hi < 0 || lo < 0 || idc_buf_putc(&f->cookie, (char)(hi << 4 | lo)))
			return;
	}
	f->has_cookie = true;
}

static int load_one(const char *key, const char *value, void *arg)
{
	struct lp_sync *sy = arg;
	if (!strncmp(key, "cookie.", 7)) {
		for (size_t i = 0; i < sy->nfeeds; i++)
			if (key[7] == (char)('0' + i) && !key[8])
				load_cookie(&sy->feed[i], value);
		return 0;
	}
	int rc = lp_smap_load(&sy->map, key, value);
	return rc == -ENOMEM ? rc : 0;
}

/* The cookies and entryUUID records the last run stored. A cache that
 * cannot be read starts the feeds over (a full refresh). */
static void load_state(struct lp_sync *sy)
{
	struct cache_reader *rd;
	sy->loaded = true;
	if (cache_reader_begin(sy->ld->cache, &rd))
		return;
	int rc = cache_state_enum(rd, sy->ld->cfg.name, load_one, sy);
	cache_reader_end(rd);
	if (rc) {
		lp_smap_free(&sy->map);
		sy->map.seed = sy->ld->hash_seed;
		for (size_t i = 0; i < sy->nfeeds; i++)
			sy->feed[i].has_cookie = false;
	}
}

static int put_cookie(struct lp_sync_feed *f, struct cache_txn *t, struct idc_diag *d)
{
	struct idc_buf v = IDC_BUF_INIT;
	char key[16];
	snprintf(key, sizeof(key), "cookie.%d", f->idx);
	int rc = idc_buf_printf(&v, "%016llx %lld ", (unsigned long long)fingerprint(f),
				(long long)time(NULL));
	for (size_t i = 0; !rc && i < f->next.len; i++)
		rc = idc_buf_printf(&v, "%02x", (unsigned char)f->next.data[i]);
	if (!rc)
		rc = cache_state_put(t, f->sy->ld->cfg.name, key, v.data, d);
	idc_buf_free(&v);
	return rc;
}

/* Whether the record e stands for entries of f's kinds only. */
static bool covers(const struct lp_sync_feed *f, const struct lp_sent *e)
{
	return (!e->uname || f->users) && (!e->gname || f->groups);
}

/* A record the sweep of a present phase removes: of f's kinds, neither
 * named in the phase nor changed by the batch. */
static bool swept(const struct lp_sync_feed *f, const struct lp_sent *e, struct lp_req *r)
{
	char key[40];
	lp_smap_key(e->uuid, key);
	(void)r;
	return f->sweep && !f->refreshing && covers(f, e) && e->seen != f->gen &&
	       !lp_map_get(&f->touched, key);
}

int lp_sync_store_state(struct lp_req *r, struct cache_txn *t, struct idc_diag *d)
{
	struct lp_sync_feed *f = r->feed;
	struct lp_sync *sy = f->sy;
	const char *name = sy->ld->cfg.name;
	struct idc_buf v = IDC_BUF_INIT;
	char key[40];
	int rc = 0;
	for (size_t i = 0; i < f->ops.n && !rc; i++) {
		const struct sop *op = f->ops.v[i];
		lp_smap_key(op->uuid, key);
		if (!op->uname && !op->gname) {
			rc = cache_state_del(t, name, key, d);
			rc = rc == -ENOENT ? 0 : rc;
			continue;
		}
		struct lp_sent e = {
		    .uname = (char *)op->uname, .gname = (char *)op->gname, .ndn = (char *)op->ndn};
		rc = lp_smap_value(&e, &v);
		if (!rc)
			rc = cache_state_put(t, name, key, v.data, d);
	}
	for (size_t b = 0; b < sy->map.nb && !rc; b++)
		for (struct lp_sent *e = sy->map.by_uuid[b]; e && !rc; e = e->next_uuid)
			if (swept(f, e, r)) {
				lp_smap_key(e->uuid, key);
				rc = cache_state_del(t, name, key, d);
				rc = rc == -ENOENT ? 0 : rc;
			}
	idc_buf_free(&v);
	if (!rc && f->has_next)
		rc = put_cookie(f, t, d);
	return rc;
}

/* ==== what a batch removes ========================================================== */

static int gone_add(struct lp_req *r, struct lp_gone_list *gl, size_t *cap, const char *name,
		    bool group)
{
	if (gl->n == *cap) {
		size_t c = *cap ? *cap * 2 : 16;
		struct lp_gone *v = realloc(gl->v, c * sizeof(*v));
		if (!v)
			return -ENOMEM;
		gl->v = v;
		*cap = c;
	}
	const char *s = idc_arena_strndup(&r->arena, name, strlen(name));
	if (!s)
		return -ENOMEM;
	gl->v[gl->n++] = (struct lp_gone){.name = s, .group = group};
	return 0;
}

/* The names the batch stores, folded, per kind: what must not be removed. */
struct keep {
	struct lp_map users, groups;
};

static int keep_name(struct lp_req *r, struct lp_map *m, const char *name)
{
	char *f = name ? lp_fold_name(&r->arena, name) : NULL;
	if (!name)
		return 0;
	return !f || lp_map_put(m, f, (void *)name) < 0 ? -ENOMEM : 0;
}

static bool kept(struct lp_req *r, const struct lp_map *m, const char *name)
{
	char *f = lp_fold_name(&r->arena, name);
	return !f || lp_map_get(m, f);
}

/* Old names an op's entry no longer has (deleted, renamed, no longer a
 * user or a group). */
static int gone_renamed(struct lp_req *r, struct lp_gone_list *gl, size_t *cap)
{
	struct lp_sync_feed *f = r->feed;
	int rc = 0;
	for (size_t i = 0; i < f->ops.n && !rc; i++) {
		const struct sop *op = f->ops.v[i];
		const struct lp_sent *old = lp_smap_uuid(&f->sy->map, op->uuid);
		if (!old)
			continue;
		if (old->uname && (!op->uname || !lp_name_eq(old->uname, op->uname)))
			rc = gone_add(r, gl, cap, old->uname, false);
		if (!rc && old->gname && (!op->gname || !lp_name_eq(old->gname, op->gname)))
			rc = gone_add(r, gl, cap, old->gname, true);
	}
	return rc;
}

struct sweep_walk {
	struct lp_req *r;
	struct lp_gone_list *gl;
	size_t *cap;
	const struct lp_map *keep;
	bool group;
};

static int sweep_user(const struct cache_user *u, void *arg)
{
	struct sweep_walk *w = arg;
	return kept(w->r, w->keep, u->name) ? 0 : gone_add(w->r, w->gl, w->cap, u->name, false);
}

static int sweep_group(const struct cache_group *g, void *arg)
{
	struct sweep_walk *w = arg;
	return kept(w->r, w->keep, g->name) ? 0 : gone_add(w->r, w->gl, w->cap, g->name, true);
}

/* The names to keep: what the batch stores and what the phase named. */
static int keep_build(struct lp_req *r, struct keep *k)
{
	struct lp_sync_feed *f = r->feed;
	int rc = 0;
	for (size_t i = 0; i < r->users.n && !rc; i++)
		rc = keep_name(r, &k->users, ((struct lp_user *)r->users.v[i])->name);
	for (size_t i = 0; i < r->groups.n && !rc; i++)
		rc = keep_name(r, &k->groups, ((struct lp_group *)r->groups.v[i])->name);
	for (size_t b = 0; b < f->sy->map.nb && !rc; b++)
		for (struct lp_sent *e = f->sy->map.by_uuid[b]; e && !rc; e = e->next_uuid) {
			char key[40];
			lp_smap_key(e->uuid, key);
			if (e->seen != f->gen || lp_map_get(&f->touched, key))
				continue;
			rc = keep_name(r, &k->users, e->uname);
			if (!rc)
				rc = keep_name(r, &k->groups, e->gname);
		}
	return rc;
}

/* After a present phase: every cached entry of the feed's kinds the phase
 * neither delivered nor named (entries cached before the feed included). */
static int gone_swept(struct lp_req *r, struct lp_gone_list *gl, size_t *cap)
{
	struct lp_sync_feed *f = r->feed;
	struct keep k = {{0}, {0}};
	struct cache_reader *rd = NULL;
	int rc = keep_build(r, &k);
	if (!rc)
		rc = cache_reader_begin(f->sy->ld->cache, &rd);
	struct sweep_walk w = {r, gl, cap, &k.users, false};
	if (!rc && f->users)
		rc = cache_enum_users(rd, dom(f), sweep_user, &w);
	w = (struct sweep_walk){r, gl, cap, &k.groups, true};
	if (!rc && f->groups)
		rc = cache_enum_groups(rd, dom(f), sweep_group, &w);
	if (rd)
		cache_reader_end(rd);
	lp_map_free(&k.users);
	lp_map_free(&k.groups);
	return rc == -ENOENT ? 0 : rc;
}

/* Drop from gl what the batch stores again (a name that moved from one
 * entry to another): the put replaces it. */
static int unkeep_stored(struct lp_req *r, struct lp_gone_list *gl)
{
	struct keep k = {{0}, {0}};
	int rc = 0;
	for (size_t i = 0; i < r->users.n && !rc; i++)
		rc = keep_name(r, &k.users, ((struct lp_user *)r->users.v[i])->name);
	for (size_t i = 0; i < r->groups.n && !rc; i++)
		rc = keep_name(r, &k.groups, ((struct lp_group *)r->groups.v[i])->name);
	size_t n = 0;
	for (size_t i = 0; i < gl->n && !rc; i++)
		if (!kept(r, gl->v[i].group ? &k.groups : &k.users, gl->v[i].name))
			gl->v[n++] = gl->v[i];
	gl->n = rc ? gl->n : n;
	lp_map_free(&k.users);
	lp_map_free(&k.groups);
	return rc;
}

int lp_sync_gone(struct lp_req *r, struct lp_gone_list *gl)
{
	size_t cap = 0;
	memset(gl, 0, sizeof(*gl));
	int rc = gone_renamed(r, gl, &cap);
	if (!rc && r->feed->sweep && !r->feed->refreshing)
		rc = gone_swept(r, gl, &cap);
	if (!rc)
		rc = unkeep_stored(r, gl);
	return rc;
}

/* ==== committing a batch ============================================================ */

/* Member DNs the batch does not hold, named from the records: a group
 * changed alone still lists its members and nested groups. */
static int resolve_members(struct lp_req *r)
{
	const struct lp_smap *m = &r->feed->sy->map;
	for (size_t i = 0; i < r->groups.n; i++) {
		const struct lp_group *g = r->groups.v[i];
		for (size_t j = 0; j < g->nmdns; j++) {
			const char *ndn = g->mdns[j];
			if (lp_map_get(&r->udn, ndn) || lp_map_get(&r->gdn, ndn))
				continue;
			const struct lp_sent *e = lp_smap_ndn(m, ndn);
			if (!e)
				continue;
			if (e->uname) {
				struct lp_user *u = idc_arena_alloc(&r->arena, sizeof(*u));
				if (!u)
					return -ENOMEM;
				*u = (struct lp_user){.ndn = ndn, .name = e->uname};
				if (lp_map_put(&r->udn, ndn, u) < 0)
					return -ENOMEM;
			} else if (e->gname) {
				struct lp_group *s = idc_arena_alloc(&r->arena, sizeof(*s));
				if (!s)
					return -ENOMEM;
				*s = (struct lp_group){.ndn = ndn, .name = e->gname};
				if (lp_map_put(&r->gdn, ndn, s) < 0)
					return -ENOMEM;
			}
		}
	}
	return 0;
}

/* The committed batch into the records in memory. */
static int apply_ops(struct lp_sync_feed *f)
{
	struct lp_sync *sy = f->sy;
	int rc = 0;
	for (size_t b = 0; b < sy->map.nb; b++)
		for (struct lp_sent *e = sy->map.by_uuid[b], *next; e; e = next) {
			next = e->next_uuid;
			if (swept(f, e, f->batch))
				lp_smap_del(&sy->map, e->uuid);
		}
	for (size_t i = 0; i < f->ops.n && !rc; i++) {
		const struct sop *op = f->ops.v[i];
		if (!op->uname && !op->gname)
			lp_smap_del(&sy->map, op->uuid);
		else
			rc = lp_smap_set(&sy->map, op->uuid, op->uname, op->gname, op->ndn, f->gen);
	}
	return rc;
}

static void feed_restart(struct lp_sync_feed *f, const char *why);

/* Store the batch (and the cookie) in one transaction. */
static int commit(struct lp_sync_feed *f)
{
	struct lp_req *r = f->batch;
	if (!r || (!f->ops.n && !f->has_next && !f->sweep))
		return 0;
	struct idc_diag d = {{0}};
	uint64_t t0 = idc_now_ns();
	int rc = resolve_members(r);
	if (!rc)
		rc = lp_store(r, LPROV_LOOKUP_FOUND, false, &d);
	if (!rc)
		rc = apply_ops(f);
	if (rc) {
		idc_log(IDC_LOG_ERR, "ldap domain %s: storing what the sync feed sent failed: %s",
			dom(f), d.msg[0] ? d.msg : idc_strerror(rc));
		feed_restart(f, "a store failed");
		return rc;
	}
	idc_log(IDC_LOG_DEBUG, "ldap domain %s: sync: %zu changes stored in %.1f ms", dom(f),
		f->ops.n, (double)(idc_now_ns() - t0) / 1e6);
	if (f->has_next) {
		idc_buf_reset(&f->cookie);
		rc = idc_buf_append(&f->cookie, f->next.data, f->next.len);
		f->has_cookie = rc == 0;
		f->has_next = false;
		f->sy->cookie_time = (int64_t)time(NULL);
	}
	f->sweep = false;
	batch_drop(f);
	return 0;
}

static int batch_new(struct lp_sync_feed *f)
{
	if (f->batch)
		return 0;
	struct lp_req *r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->ld = f->sy->ld;
	r->kind = LP_SYNC;
	r->feed = f;
	f->batch = r;
	f->fs = (struct lp_search){.req = r, .purpose = LP_S_NAMES};
	return 0;
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
static void feed_restart(struct lp_sync_feed *f, const char *why)
{
	struct lprov_domain *ld = f->sy->ld;
	if (f->msgid && ld->conn)
		ldap_abandon_ext(ld->conn, f->msgid, NULL, NULL);
	idc_log(IDC_LOG_WARN, "ldap domain %s: sync feed of %s stopped: %s", dom(f), f->base, why);
	f->msgid = 0;
	f->refreshing = false;
	f->has_next = false;
	f->sweep = false;
	batch_drop(f);
	f->retry_ns = idc_now_ns() + (uint64_t)backoff_next(f->sy) * 1000000u;
}

/* The content synchronization is not to be had from this server. */
static void give_up(struct lp_sync *sy, const char *why)
{
	if (sy->support != SY_NO)
		idc_log(IDC_LOG_WARN, "ldap domain %s: %s: %s; polling instead", sy->ld->cfg.name,
			lp_server(sy->ld), why);
	sy->support = SY_NO;
	for (size_t i = 0; i < sy->nfeeds; i++) {
		struct lp_sync_feed *f = &sy->feed[i];
		if (f->msgid && sy->ld->conn)
			ldap_abandon_ext(sy->ld->conn, f->msgid, NULL, NULL);
		f->msgid = 0;
		f->refreshing = false;
		batch_drop(f);
	}
}

static int feed_start(struct lp_sync_feed *f)
{
	struct lprov_domain *ld = f->sy->ld;
	struct idc_buf v = IDC_BUF_INIT;
	int rc = lp_sync_request(LP_SYNC_REFRESH_AND_PERSIST, f->has_cookie ? f->cookie.data : NULL,
				 f->has_cookie ? f->cookie.len : 0, &v);
	if (rc == 0)
		rc = batch_new(f);
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
		if (commit(f) || batch_new(f))
			return false;
	}
	char *k = idc_arena_strndup(&f->batch->arena, key, strlen(key));
	return k && lp_map_put(&f->touched, k, k) >= 0;
}

static int push_op(struct lp_sync_feed *f, const unsigned char *uuid, const char *uname,
		   const char *gname, const char *ndn)
{
	struct sop *op = idc_arena_alloc(&f->batch->arena, sizeof(*op));
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
static bool over_memory(struct lp_sync_feed *f)
{
	if (f->batch->arena.total <= f->sy->ld->cfg.max_memory)
		return false;
	give_up(f->sy, "the refresh holds more than ldap_max_memory");
	return true;
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
	if (f->refreshing)
		over_memory(f);
}

static void refresh_done(struct lp_sync_feed *f)
{
	struct lp_sync *sy = f->sy;
	f->refreshing = false;
	size_t n = f->ops.n;
	if (commit(f))
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
		batch_drop(f);
		f->has_cookie = f->has_next = false;
		f->refreshing = false;
		f->retry_ns = idc_now_ns();
		return;
	}
	if (err == LDAP_UNAVAILABLE_CRITICAL_EXTENSION || err == LDAP_PROTOCOL_ERROR)
		return give_up(sy, why);
	if (err == LDAP_SUCCESS && f->refreshing)
		refresh_done(f);
	feed_restart(f, err == LDAP_SUCCESS ? "the server ended the search" : why);
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
	sy->support = SY_YES;
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
		if (batch_new(f))
			return feed_restart(f, idc_strerror(-ENOMEM));
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
	if (!sy || sy->support != SY_YES || !ld->conn || ld->hs)
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
	return sy && sy->support != SY_NO;
}

bool lp_sync_wanted(const struct lprov_domain *ld)
{
	return wanted(ld->sync);
}

bool lp_sync_polls(const struct lprov_domain *ld)
{
	return !wanted(ld->sync) || ld->sync->fallen_back;
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
			commit(f); /* the notices that came are true */
		f->msgid = 0;
		f->refreshing = false;
		f->has_next = false;
		f->sweep = false;
		batch_drop(f);
		f->retry_ns = 0; /* as soon as a connection is back */
	}
}

/* Down for ldap_sync_fallback_timeout: entries expire again and lookups
 * search, as when polling, until the feed is live again. */
static void fall_back(struct lp_sync *sy)
{
	struct lprov_domain *ld = sy->ld;
	struct idc_diag d = {{0}};
	size_t n = 0;
	sy->fallen_back = true;
	int rc = cache_expire(ld->cache, ld->cfg.name, CACHE_ANY, NULL, &n, &d);
	idc_log(IDC_LOG_WARN,
		"ldap domain %s: the sync feed is down for %u s (ldap_sync_fallback_timeout): "
		"%zu cached entries expire and lookups search again%s%s",
		ld->cfg.name, (unsigned)(ld->cfg.sync_fallback_ms / 1000), n, rc ? ": " : "",
		rc ? (d.msg[0] ? d.msg : idc_strerror(rc)) : "");
	if (ld->hook)
		ld->hook(NULL, ld->hook_arg); /* the maps' records never expire otherwise */
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
		load_state(sy);
	for (size_t i = 0; i < sy->nfeeds; i++)
		if (!sy->feed[i].refreshing)
			commit(&sy->feed[i]);
	keepalive(sy, now);
	track_down(sy, now);
	if (!ld->online || ld->broken)
		return; /* conn.c's probes bring the connection back */
	if (!ld->conn && lp_conn_ensure(ld))
		return; /* offline now: the probes bring the connection back */
	if (!ld->conn || ld->hs)
		return; /* the set-up goes on from the loop (lp_conn_handshake) */
	if (sy->support == SY_UNKNOWN && !sy->rootdse_msgid)
		rootdse_send(sy);
	if (sy->support == SY_YES)
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
	if (sy->support == SY_UNKNOWN && !sy->rootdse_msgid && ld->conn && !ld->hs)
		return now;
	for (size_t i = 0; i < sy->nfeeds; i++) {
		const struct lp_sync_feed *f = &sy->feed[i];
		if (!f->refreshing && (f->ops.n || f->has_next))
			return now;
		if (!f->msgid && sy->support == SY_YES && ld->conn && !ld->hs)
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
