/*
 * refresh: entries asked for again by name, and removed when the answer
 * leaves them out (store.c's collect_gone): the expired ones, in the
 * background (refresh_expired_interval), and those the cache holds that
 * a complete answer to a lookup contradicts (the verify wave).
 */
#include <errno.h>
#include <string.h>
#include <time.h>

#include "providers/ldap/lprov_int.h"

/* ==== refresh ============================================================= */

/* refresh: the names of the domain's entries that are expired or expire
 * before the next run (at most LP_REFRESH_MAX of each kind), into r->ru
 * and r->rg. */
struct expired_scan {
	struct lp_req *r;
	struct lp_vec *all;
};

static int scan_user(const struct cache_user *u, void *arg)
{
	struct expired_scan *x = arg;
	char *n = idc_arena_strndup(&x->r->arena, u->name, strlen(u->name));
	return n ? lp_vec_push(x->all, n) : -ENOMEM;
}

static int scan_group(const struct cache_group *g, void *arg)
{
	struct expired_scan *x = arg;
	char *n = idc_arena_strndup(&x->r->arena, g->name, strlen(g->name));
	return n ? lp_vec_push(x->all, n) : -ENOMEM;
}

int lp_cached_names(struct lp_req *r)
{
	struct lprov_domain *ld = r->ld;
	struct cache_reader *rd;
	struct expired_scan u = {r, &r->ru}, g = {r, &r->rg};
	int rc = cache_reader_begin(ld->cache, &rd);
	if (rc)
		return rc;
	rc = cache_enum_users(rd, ld->cfg.name, scan_user, &u);
	if (rc == 0 || rc == -ENOENT)
		rc = cache_enum_groups(rd, ld->cfg.name, scan_group, &g);
	cache_reader_end(rd);
	return rc == -ENOENT ? 0 : rc;
}

static int collect_expired(struct lp_req *r)
{
	struct lprov_domain *ld = r->ld;
	const char *doms[] = {ld->cfg.name};
	int64_t soon = (int64_t)time(NULL) + (int64_t)(ld->cfg.refresh_expired_ms / 1000) + 1;
	struct cache_reader *rd;
	int rc = cache_reader_begin(ld->cache, &rd);
	if (rc)
		return rc;
	for (int kind = 0; kind < 2 && !rc; kind++) {
		struct lp_vec all = {0};
		struct expired_scan x = {r, &all};
		struct lp_vec *out = kind ? &r->rg : &r->ru;
		rc = kind ? cache_enum_groups(rd, ld->cfg.name, scan_group, &x)
			  : cache_enum_users(rd, ld->cfg.name, scan_user, &x);
		if (rc == -ENOENT)
			rc = 0; /* nothing cached yet */
		for (size_t i = 0; i < all.n && !rc && out->n < LP_REFRESH_MAX; i++) {
			struct cache_meta m;
			struct cache_user u;
			struct cache_group g;
			int found = kind ? cache_group_by_name(rd, doms, 1, all.v[i], false, &g, &m)
					 : cache_user_by_name(rd, doms, 1, all.v[i], false, &u, &m);
			if (found == 0 && (m.expired || (m.expires && m.expires <= soon)))
				rc = lp_vec_push(out, all.v[i]);
		}
		lp_vec_free(&all);
	}
	cache_reader_end(rd);
	return rc;
}

/* refresh: the collected names. */
int lp_wave_refresh(struct lp_req *r)
{
	struct lprov_domain *ld = r->ld;
	/* An entry stored in this second or later (by a lookup of its own,
	 * while this refresh runs) is not deleted on its word (refresh_gone). */
	r->refresh_sent = (int64_t)time(NULL);
	int rc = collect_expired(r);
	if (rc && rc != -ENOMEM) {
		idc_log(IDC_LOG_WARN, "ldap domain %s: reading the cache for a refresh: %s",
			ld->cfg.name, idc_strerror(rc));
		rc = 0; /* refresh what was collected */
	}
	for (int kind = 0; kind < 2 && !rc; kind++)
		rc = lp_wave_by_names(r, kind, kind ? &r->rg : &r->ru);
	if (!rc && (r->ru.n || r->rg.n))
		idc_log(IDC_LOG_DEBUG, "ldap domain %s: refreshing %zu users and %zu groups",
			ld->cfg.name, r->ru.n, r->rg.n);
	return rc;
}

/* ==== verify ========================================================================= *
 * A complete answer says what the directory holds; the cache may hold
 * entries it contradicts by leaving them out: groups listing the
 * initgroups user, or having one of its groups as a member group (it was
 * removed); groups holding the gid asked for, users holding the uid asked
 * for; and the groups or users holding the id of an entry new to the cache
 * under its name (a rename: the old name stays otherwise). They are asked
 * for again by name: what comes back is stored as the directory has it
 * now, and the names that do not come back are removed (collect_gone).
 * Nothing is asked when the cache agrees, the usual case. */

/* Names of one kind to ask for again. */
struct stale {
	struct lp_req *r;
	struct lp_map seen;     /* folded names: the answer's, and those taken */
	struct lp_vec *out;     /* r->ru or r->rg */
	struct lp_vec *holders; /* renamed_from: the names holding one id */
};

/* Take name unless the answer holds it or it was taken already. */
static int take_stale(struct stale *x, const char *name)
{
	if (x->out->n >= LP_REFRESH_MAX)
		return 1; /* enough for one lookup */
	char *f = lp_fold_name(&x->r->arena, name);
	char *copy = idc_arena_strndup(&x->r->arena, name, strlen(name));
	if (!f || !copy)
		return -ENOMEM;
	int rc = lp_map_put(&x->seen, f, copy);
	return rc == 0 ? lp_vec_push(x->out, copy) : rc < 0 ? rc : 0;
}

static int stale_cb(const char *name, void *arg)
{
	return take_stale(arg, name);
}

static int holder_cb(const char *name, void *arg)
{
	struct stale *x = arg;
	char *copy = idc_arena_strndup(&x->r->arena, name, strlen(name));
	return copy ? lp_vec_push(x->holders, copy) : -ENOMEM;
}

/* The cached entries holding id (how: CACHE_LINK_UID or _GID), when none
 * of them is `name`: that entry is new to the cache under its name,
 * perhaps renamed from one of them. */
static int renamed_from(struct stale *x, struct cache_reader *rd, enum cache_link how, uint32_t id,
			const char *name)
{
	struct lp_vec holders = {0};
	x->holders = &holders;
	int rc = cache_linked(rd, x->r->ld->cfg.name, how, NULL, id, holder_cb, x);
	bool held = false;
	for (size_t i = 0; i < holders.n && !held; i++)
		held = lp_name_eq(holders.v[i], name);
	for (size_t i = 0; i < holders.n && !held && !rc; i++)
		rc = take_stale(x, holders.v[i]);
	lp_vec_free(&holders);
	return rc;
}

static int stale_users(struct lp_req *r, struct cache_reader *rd, struct stale *x)
{
	const char *dom = r->ld->cfg.name;
	int rc = lp_answered_names(r, false, &x->seen);
	if (!rc && r->kind == LPROV_LOOKUP_PWUID)
		rc = cache_linked(rd, dom, CACHE_LINK_UID, NULL, r->id, stale_cb, x);
	for (size_t i = 0; i < r->users.n && !rc; i++) {
		const struct lp_user *u = r->users.v[i];
		rc = renamed_from(x, rd, CACHE_LINK_UID, u->uid, u->name);
	}
	return rc == 1 ? 0 : rc;
}

static int stale_groups(struct lp_req *r, struct cache_reader *rd, struct stale *x)
{
	const char *dom = r->ld->cfg.name;
	bool up = r->kind == LPROV_LOOKUP_INITGROUPS && r->ld->cfg.schema == LPROV_RFC2307BIS;
	int rc = lp_answered_names(r, true, &x->seen);
	if (!rc && r->target)
		rc = cache_linked(rd, dom, CACHE_LINK_MEMBER, r->target->name, 0, stale_cb, x);
	if (!rc && r->kind == LPROV_LOOKUP_GRGID)
		rc = cache_linked(rd, dom, CACHE_LINK_GID, NULL, r->id, stale_cb, x);
	for (size_t i = 0; i < r->groups.n && !rc; i++) {
		const struct lp_group *g = r->groups.v[i];
		if (up && g->ancestor)
			rc = cache_linked(rd, dom, CACHE_LINK_NESTED, g->name, 0, stale_cb, x);
		if (!rc)
			rc = renamed_from(x, rd, CACHE_LINK_GID, g->gid, g->name);
	}
	return rc == 1 ? 0 : rc;
}

/* The stale names into r->ru and r->rg. */
static int collect_stale(struct lp_req *r)
{
	struct stale ux = {.r = r, .out = &r->ru}, gx = {.r = r, .out = &r->rg};
	struct cache_reader *rd = NULL;
	int rc = cache_reader_begin(r->ld->cache, &rd);
	if (!rc)
		rc = stale_users(r, rd, &ux);
	if (!rc)
		rc = stale_groups(r, rd, &gx);
	cache_reader_end(rd);
	lp_map_free(&ux.seen);
	lp_map_free(&gx.seen);
	return rc;
}

/* The verify wave, for lookups (not refreshes, enumerations): the stale
 * names asked for. A cache that cannot be read verifies nothing this
 * time. */
int lp_wave_verify(struct lp_req *r)
{
	struct lprov_domain *ld = r->ld;
	r->verified = true;
	if (r->kind == LPROV_LOOKUP_ENUMERATE || r->kind == LP_REFRESH || r->partial)
		return 0; /* an incomplete answer contradicts nothing */
	r->refresh_sent = (int64_t)time(NULL);
	int rc = collect_stale(r);
	if (rc && rc != -ENOMEM) {
		idc_log(IDC_LOG_WARN, "ldap domain %s: reading the cache to verify an answer: %s",
			ld->cfg.name, idc_strerror(rc));
		r->ru.n = r->rg.n = 0;
		rc = 0;
	}
	if (!rc && (r->ru.n || r->rg.n))
		idc_log(IDC_LOG_DEBUG,
			"ldap domain %s: %zu users and %zu groups cached but left out of an answer "
			"asked for again",
			ld->cfg.name, r->ru.n, r->rg.n);
	if (!rc)
		rc = lp_wave_by_names(r, false, &r->ru);
	return rc ? rc : lp_wave_by_names(r, true, &r->rg);
}
