/*
 * syncstore: what the content synchronization feed stores (sync.c hands
 * it batches): the cookies and entryUUID records read back at start and
 * written in the transaction of the changes they describe, the names a
 * batch removes (deleted, renamed, or left out by a present phase), and
 * the batch's commit through lp_store.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "providers/ldap/lprov_int.h"

static const char *dom(const struct lp_sync_feed *f)
{
	return f->sy->ld->cfg.name;
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
		int hi = lp_hex_val(v[i]), lo = lp_hex_val(v[i + 1]);
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
void lp_sync_load_state(struct lp_sync *sy)
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
	if (!rc)
		rc = lp_hex_append(&v, (const unsigned char *)f->next.data, f->next.len);
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

/* Whether the batch ends a present phase, whose sweep removes what the
 * phase did not name: only then is every record walked (a notice of the
 * persist phase touches its own records only). */
static bool sweeping(const struct lp_sync_feed *f)
{
	return f->sweep && !f->refreshing;
}

/* A record the sweep of a present phase removes: of f's kinds, neither
 * named in the phase nor changed by the batch. */
static bool swept(const struct lp_sync_feed *f, const struct lp_sent *e)
{
	if (!sweeping(f) || !covers(f, e) || e->seen == f->gen)
		return false;
	char key[40];
	lp_smap_key(e->uuid, key);
	return !lp_map_get(&f->touched, key);
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
		const struct lp_sop *op = f->ops.v[i];
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
	for (size_t b = 0; sweeping(f) && b < sy->map.nb && !rc; b++)
		for (struct lp_sent *e = sy->map.by_uuid[b]; e && !rc; e = e->next_uuid)
			if (swept(f, e)) {
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
		const struct lp_sop *op = f->ops.v[i];
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
			if (e->seen != f->gen)
				continue;
			lp_smap_key(e->uuid, key);
			if (lp_map_get(&f->touched, key))
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
	if (!rc && sweeping(r->feed))
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
	for (size_t b = 0; sweeping(f) && b < sy->map.nb; b++)
		for (struct lp_sent *e = sy->map.by_uuid[b], *next; e; e = next) {
			next = e->next_uuid;
			if (swept(f, e))
				lp_smap_del(&sy->map, e->uuid);
		}
	for (size_t i = 0; i < f->ops.n && !rc; i++) {
		const struct lp_sop *op = f->ops.v[i];
		if (!op->uname && !op->gname)
			lp_smap_del(&sy->map, op->uuid);
		else
			rc = lp_smap_set(&sy->map, op->uuid, op->uname, op->gname, op->ndn, f->gen);
	}
	return rc;
}

/* Where a batch's time went, for the fleet benchmark's breakdown: when
 * its first notice was read (CLOCK_MONOTONIC seconds), then milliseconds
 * after that until it was closed, its data written, the transaction
 * committed and the change reported to the maps. */
static void trace(const struct lp_sync_feed *f, const struct lp_req *r, uint64_t closed)
{
	if (idc_log_level() < IDC_LOG_DEBUG)
		return;
	uint64_t first = f->first_ns ? f->first_ns : closed, now = idc_now_ns();
	idc_log(IDC_LOG_DEBUG,
		"ldap domain %s: sync: %zu changes stored: read at %.6f, closed +%.3f ms, "
		"written +%.3f ms, committed +%.3f ms, reported +%.3f ms",
		dom(f), f->ops.n, (double)first / 1e9, (double)(closed - first) / 1e6,
		(double)(r->written_ns - first) / 1e6, (double)(r->committed_ns - first) / 1e6,
		(double)(now - first) / 1e6);
}

/* Store the batch (and the cookie) in one transaction. */
int lp_sync_commit(struct lp_sync_feed *f)
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
		lp_sync_feed_restart(f, "a store failed");
		return rc;
	}
	trace(f, r, t0);
	if (f->has_next) {
		idc_buf_reset(&f->cookie);
		rc = idc_buf_append(&f->cookie, f->next.data, f->next.len);
		f->has_cookie = rc == 0;
		f->has_next = false;
		f->sy->cookie_time = (int64_t)time(NULL);
	}
	f->sweep = false;
	lp_sync_batch_drop(f);
	return 0;
}

int lp_sync_batch_new(struct lp_sync_feed *f)
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

void lp_sync_batch_drop(struct lp_sync_feed *f)
{
	if (f->batch)
		lp_req_release(f->batch);
	f->batch = NULL;
	lp_vec_free(&f->ops);
	lp_map_free(&f->touched);
	f->first_ns = 0;
}
