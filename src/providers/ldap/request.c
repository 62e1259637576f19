/*
 * request: one lookup from first search to cache commit, and the domain
 * object around the requests (coalescing, negative cache, event loop).
 *
 * A lookup is a short series of waves; each wave is a set of searches sent
 * together (pipelined) and the next wave starts when all of them answered:
 *   find:      the user or group asked for (initgroups: the user);
 *   groups-of: initgroups only, one search (|(memberUid=NAME)(member=DN));
 *   parents:   rfc2307bis, groups that have a found group as member, in
 *              batches of LP_PARENT_BATCH DNs per search, until no new group;
 *   members:   member DNs no search has returned yet, batched by the
 *              naming attribute of their RDN, (|(uid=a)(uid=b)...), and
 *              matched back by DN; found groups bring their own members;
 *   verify:    lookups of groups and initgroups, once the rest is done: the
 *              cached groups the answer contradicts by leaving them out,
 *              asked for again by name (usually none: nothing is sent).
 * Every DN is asked for at most once per lookup, so nested groups with a
 * cycle end; nesting a directory invents without end stops at
 * ldap_group_nesting_level waves each way, and every request at
 * ldap_max_searches, ldap_max_entries and ldap_max_memory (search.c). Then everything found is
 * written in one cache transaction. An enumeration commits as its pages arrive (lp_req_page): the
 * users of each page, and the groups whose members are all known; what is left (groups with members
 * still to resolve) goes in the final transaction.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "providers/ldap/lprov_int.h"

/* ==== negative cache ========================================================= */

static uint64_t key_hash(const struct lprov_domain *ld, enum lprov_lookup_kind kind,
			 const char *name, uint32_t id)
{
	char buf[CACHE_NAME_MAX + 32];
	int n = snprintf(buf, sizeof(buf), "%d:%u:", (int)kind, (unsigned)id);
	/* the directory answers every spelling its matching rule equates alike */
	bool group = kind == LPROV_LOOKUP_GRNAM || kind == LPROV_LOOKUP_GRGID;
	enum lprov_attr f = group ? LPROV_MAP_GROUP_NAME : LPROV_MAP_USER_NAME;
	n += (int)cache_name_fold(cache_name_rule_of_attr(ld->attr[f]), name, buf + n);
	return idc_hash64(buf, (size_t)n, ld->hash_seed) | 1;
}

static struct lp_neg *neg_slot(struct lprov_domain *ld, uint64_t h)
{
	return &ld->neg[h % LP_NEG_SLOTS];
}

static bool neg_hit(struct lprov_domain *ld, uint64_t h)
{
	struct lp_neg *n = neg_slot(ld, h);
	return n->h == h && idc_now_ns() < n->expires_ns;
}

/* ==== request lifecycle ========================================================= */

static void req_clear(struct lp_req *r)
{
	idc_arena_free(&r->arena);
	lp_vec_free(&r->users);
	lp_vec_free(&r->groups);
	lp_vec_free(&r->memq);
	lp_vec_free(&r->parentq);
	lp_vec_free(&r->ru);
	lp_vec_free(&r->rg);
	lp_map_free(&r->udn);
	lp_map_free(&r->gdn);
	lp_map_free(&r->uname);
	lp_map_free(&r->asked);
	lp_map_free(&r->rdn_names);
	r->scanned = 0;
	r->users_stored = 0;
	r->target = NULL;
	r->phase = 0;
	r->pending = 0;
	r->refresh_sent = 0;
	r->verified = false;
	r->partial = false;
	r->nentries = r->unstored = r->paged_bytes = 0;
	r->nsent = r->up = r->down = 0;
	r->cut = false;
}

static void req_free(struct lp_req *r)
{
	req_clear(r);
	free(r->name);
	free(r->w);
	free(r);
}

static void req_unlink(struct lprov_domain *ld, struct lp_req *r)
{
	for (struct lp_req **p = &ld->reqs; *p; p = &(*p)->next)
		if (*p == r) {
			*p = r->next;
			return;
		}
}

/* Forget r's searches still in flight (their replies will be ignored). */
static void req_forget_searches(struct lprov_domain *ld, struct lp_req *r)
{
	for (struct lp_search **p = &ld->searches; *p;) {
		struct lp_search *s = *p;
		if (s->req == r) {
			*p = s->next;
			if (ld->conn)
				ldap_abandon_ext(ld->conn, s->msgid, NULL, NULL);
			lp_search_free(s);
		} else {
			p = &s->next;
		}
	}
}

/* Take r out, tell every waiter, free it. */
static void req_complete(struct lp_req *r, enum lprov_lookup_result res)
{
	struct lprov_domain *ld = r->ld;
	req_unlink(ld, r);
	req_forget_searches(ld, r);
	if (r->kind != LPROV_LOOKUP_ENUMERATE && r->kind != LP_REFRESH) {
		uint64_t h = key_hash(ld, r->kind, r->name, r->id);
		struct lp_neg *n = neg_slot(ld, h);
		if (res == LPROV_LOOKUP_NOTFOUND)
			*n = (struct lp_neg){h, idc_now_ns() +
						    ld->cfg.negative_timeout_ms * 1000000ull};
		else if (n->h == h)
			n->h = 0;
	}
	for (size_t i = 0; i < r->nw; i++)
		r->w[i].cb(res, r->w[i].arg);
	req_free(r);
}

void lp_req_finish_all(struct lprov_domain *ld, enum lprov_lookup_result res)
{
	/* Bounded: each round removes the head. */
	while (ld->reqs)
		req_complete(ld->reqs, res);
}

static int add_waiter(struct lp_req *r, lprov_lookup_cb cb, void *arg)
{
	if (!cb)
		return 0;
	if (r->nw == r->wcap) {
		size_t c = r->wcap ? r->wcap * 2 : 4;
		struct lp_waiter *w = realloc(r->w, c * sizeof(*w));
		if (!w)
			return -ENOMEM;
		r->w = w;
		r->wcap = c;
	}
	r->w[r->nw++] = (struct lp_waiter){cb, arg};
	return 0;
}

/* ==== filters ==================================================================== */

static int oc_filter(struct idc_buf *b, const struct lprov_domain *ld, bool user, bool group)
{
	const char *u = ld->attr[LPROV_MAP_USER_OC], *g = ld->attr[LPROV_MAP_GROUP_OC];
	if (user && group)
		return idc_buf_printf(b, "(|(objectClass=%s)(objectClass=%s))", u, g);
	return idc_buf_printf(b, "(objectClass=%s)", user ? u : g);
}

/* "(attr=value)" with value escaped. */
static int eq_filter(struct idc_buf *b, const char *attr, const char *v)
{
	int rc = idc_buf_printf(b, "(%s=", attr);
	if (!rc)
		rc = lp_filter_escape(b, v, strlen(v));
	return rc ? rc : idc_buf_putc(b, ')');
}

/* ==== waves ====================================================================== */

static int send_search(struct lp_req *r, enum lp_purpose p, const char *base,
		       const struct idc_buf *f, bool paged)
{
	return lp_search_send(r->ld, r, p, base, LDAP_SCOPE_SUBTREE, f->data, paged);
}

static int send_find(struct lp_req *r)
{
	struct lprov_domain *ld = r->ld;
	const char *const *at = ld->attr;
	struct idc_buf f = IDC_BUF_INIT;
	bool user = r->kind == LPROV_LOOKUP_PWNAM || r->kind == LPROV_LOOKUP_PWUID ||
		    r->kind == LPROV_LOOKUP_INITGROUPS;
	char id[16];
	snprintf(id, sizeof(id), "%u", (unsigned)r->id);
	int rc = idc_buf_printf(&f, "(&");
	if (!rc)
		rc = oc_filter(&f, ld, user, !user);
	if (!rc && r->kind == LPROV_LOOKUP_PWUID)
		rc = eq_filter(&f, at[LPROV_MAP_USER_UID], id);
	else if (!rc && r->kind == LPROV_LOOKUP_GRGID)
		rc = eq_filter(&f, at[LPROV_MAP_GROUP_GID], id);
	else if (!rc)
		rc = eq_filter(&f, at[user ? LPROV_MAP_USER_NAME : LPROV_MAP_GROUP_NAME], r->name);
	if (!rc)
		rc = idc_buf_putc(&f, ')');
	if (!rc)
		rc = send_search(r, LP_S_FIND, user ? ld->ubase : ld->gbase, &f, false);
	idc_buf_free(&f);
	return rc;
}

/* enumerate: every user, then every group, page by page. One after the
 * other: slapd keeps one paged search per connection and invalidates the
 * cookie of the first when a second starts. */
static int send_enum(struct lp_req *r, bool groups)
{
	struct lprov_domain *ld = r->ld;
	struct idc_buf f = IDC_BUF_INIT;
	int rc = oc_filter(&f, ld, !groups, groups);
	if (!rc)
		rc = send_search(r, LP_S_FIND, groups ? ld->gbase : ld->ubase, &f, true);
	idc_buf_free(&f);
	return rc;
}

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

/* The users (group false) or groups named in v, LP_MEMBER_BATCH names per
 * search. */
static int send_by_names(struct lp_req *r, bool group, const struct lp_vec *v)
{
	struct lprov_domain *ld = r->ld;
	const char *attr = ld->attr[group ? LPROV_MAP_GROUP_NAME : LPROV_MAP_USER_NAME];
	struct idc_buf f = IDC_BUF_INIT;
	int rc = 0;
	for (size_t i = 0; i < v->n && !rc; i += LP_MEMBER_BATCH) {
		idc_buf_reset(&f);
		rc = idc_buf_printf(&f, "(&");
		if (!rc)
			rc = oc_filter(&f, ld, !group, group);
		if (!rc)
			rc = idc_buf_printf(&f, "(|");
		for (size_t j = i; j < v->n && j < i + LP_MEMBER_BATCH && !rc; j++)
			rc = eq_filter(&f, attr, v->v[j]);
		if (!rc)
			rc = idc_buf_printf(&f, "))");
		if (!rc)
			rc = send_search(r, LP_S_NAMES, group ? ld->gbase : ld->ubase, &f, false);
	}
	idc_buf_free(&f);
	return rc;
}

/* refresh: the collected names. */
static int send_refresh(struct lp_req *r)
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
		rc = send_by_names(r, kind, kind ? &r->rg : &r->ru);
	if (!rc && (r->ru.n || r->rg.n))
		idc_log(IDC_LOG_DEBUG, "ldap domain %s: refreshing %zu users and %zu groups",
			ld->cfg.name, r->ru.n, r->rg.n);
	return rc;
}

static int send_groups_of(struct lp_req *r)
{
	struct lprov_domain *ld = r->ld;
	struct idc_buf f = IDC_BUF_INIT;
	bool bis = ld->cfg.schema == LPROV_RFC2307BIS;
	int rc = idc_buf_printf(&f, "(&");
	if (!rc)
		rc = oc_filter(&f, ld, false, true);
	if (!rc && bis)
		rc = idc_buf_printf(&f, "(|");
	if (!rc)
		rc = eq_filter(&f, bis ? "memberUid" : ld->attr[LPROV_MAP_GROUP_MEMBER],
			       r->target->name);
	if (!rc && bis)
		rc = eq_filter(&f, ld->attr[LPROV_MAP_GROUP_MEMBER], r->target->dn);
	if (!rc)
		rc = idc_buf_printf(&f, bis ? "))" : ")");
	if (!rc)
		rc = send_search(r, LP_S_GROUPS_OF, ld->gbase, &f, false);
	idc_buf_free(&f);
	return rc;
}

/* Groups that have one of the queued groups as a member. */
static int send_parents(struct lp_req *r)
{
	struct lprov_domain *ld = r->ld;
	struct idc_buf f = IDC_BUF_INIT;
	int rc = 0;
	for (size_t i = 0; i < r->parentq.n && !rc; i += LP_PARENT_BATCH) {
		idc_buf_reset(&f);
		rc = idc_buf_printf(&f, "(&");
		if (!rc)
			rc = oc_filter(&f, ld, false, true);
		if (!rc)
			rc = idc_buf_printf(&f, "(|");
		for (size_t j = i; j < r->parentq.n && j < i + LP_PARENT_BATCH && !rc; j++)
			rc = eq_filter(&f, ld->attr[LPROV_MAP_GROUP_MEMBER], r->parentq.v[j]);
		if (!rc)
			rc = idc_buf_printf(&f, "))");
		if (!rc)
			rc = send_search(r, LP_S_PARENTS, ld->gbase, &f, false);
	}
	r->parentq.n = 0;
	idc_buf_free(&f);
	return rc;
}

/* Member DNs batched by (search base, naming attribute of the RDN). */
struct bucket {
	const char *base;
	bool user, group;
	char *attr;
	struct idc_buf f;
	size_t count;
};

static int bucket_flush(struct lp_req *r, struct bucket *b)
{
	if (!b->count)
		return 0;
	int rc = idc_buf_printf(&b->f, "))");
	if (!rc)
		rc = send_search(r, LP_S_MEMBERS, b->base, &b->f, false);
	idc_buf_reset(&b->f);
	b->count = 0;
	return rc;
}

static int bucket_add(struct lp_req *r, struct bucket *b, const char *value)
{
	int rc = 0;
	if (!b->count) {
		rc = idc_buf_printf(&b->f, "(&");
		if (!rc)
			rc = oc_filter(&b->f, r->ld, b->user, b->group);
		if (!rc)
			rc = idc_buf_printf(&b->f, "(|");
	}
	if (!rc)
		rc = eq_filter(&b->f, b->attr, value);
	if (!rc && ++b->count == LP_MEMBER_BATCH)
		rc = bucket_flush(r, b);
	return rc;
}

#define LP_BUCKETS 16

static struct bucket *bucket_for(struct bucket *bs, size_t *n, const char *base, bool user,
				 bool group, char *attr)
{
	for (size_t i = 0; i < *n; i++)
		if (bs[i].base == base && bs[i].user == user && !strcmp(bs[i].attr, attr))
			return &bs[i];
	if (*n == LP_BUCKETS)
		return NULL;
	bs[*n] = (struct bucket){base, user, group, attr, IDC_BUF_INIT, 0};
	return &bs[(*n)++];
}

static int queue_member(struct lp_req *r, struct bucket *bs, size_t *nb, const char *ndn)
{
	struct lprov_domain *ld = r->ld;
	char *attr, *value;
	if (lp_dn_first_ava(&r->arena, ndn, &attr, &value))
		return 0; /* not reachable by a filter: left unresolved */
	bool same = ld->ubase == ld->gbase;
	bool in_u = lp_dn_under(ndn, ld->nubase), in_g = lp_dn_under(ndn, ld->ngbase);
	int rc = 0;
	if (same && in_u) {
		struct bucket *b = bucket_for(bs, nb, ld->ubase, true, true, attr);
		return b ? bucket_add(r, b, value) : 0;
	}
	if (in_u) {
		struct bucket *b = bucket_for(bs, nb, ld->ubase, true, false, attr);
		rc = b ? bucket_add(r, b, value) : 0;
	}
	if (!rc && in_g) {
		struct bucket *b = bucket_for(bs, nb, ld->gbase, false, true, attr);
		rc = b ? bucket_add(r, b, value) : 0;
	}
	if (!in_u && !in_g)
		lp_log_once(ld, IDC_LOG_INFO,
			    "ldap domain %s: member \"%.300s\" is outside the search bases; "
			    "not resolved",
			    ld->cfg.name, ndn);
	return rc;
}

static int send_members(struct lp_req *r)
{
	struct bucket bs[LP_BUCKETS];
	size_t nb = 0;
	int rc = 0;
	for (size_t i = 0; i < r->memq.n && !rc; i++)
		rc = queue_member(r, bs, &nb, r->memq.v[i]);
	for (size_t i = 0; i < nb; i++) {
		if (!rc)
			rc = bucket_flush(r, &bs[i]);
		idc_buf_free(&bs[i].f);
	}
	r->memq.n = 0;
	return rc;
}

/* Queue the parents and members of groups found since the last wave. */
static int queue_new_groups(struct lp_req *r)
{
	bool up = r->kind == LPROV_LOOKUP_INITGROUPS && r->ld->cfg.schema == LPROV_RFC2307BIS;
	int rc = 0;
	for (; r->scanned < r->groups.n && !rc; r->scanned++) {
		struct lp_group *g = r->groups.v[r->scanned];
		if (up && g->ancestor)
			rc = lp_vec_push(&r->parentq, (void *)g->ndn);
		for (size_t i = 0; i < g->nmdns && !rc; i++) {
			const char *m = g->mdns[i];
			if (lp_map_get(&r->udn, m) || lp_map_get(&r->gdn, m))
				continue;
			rc = lp_map_put(&r->asked, m, (void *)m);
			if (rc == 0)
				rc = lp_vec_push(&r->memq, (void *)m);
			else if (rc == 1)
				rc = 0;
		}
	}
	return rc;
}

/* ==== change reports (lprov_domain_set_hook) ============================================ */

static bool group_due(const struct lp_req *r, const struct lp_group *g, bool page);

/* One side of a change: a record as the cache held it before the
 * transaction or as it was stored (strings in the tracker's arena or the
 * request's). */
struct rec {
	bool present;
	const char *name;
	uint32_t id;
	const char **mem, **nested; /* groups: member users, member groups */
	size_t nmem, nnested;
};

/* An entry the directory no longer has, removed by store(): the name a
 * lookup by name did not find, or a name a refresh asked for that its
 * complete answer did not hold (collect_gone). */
struct gone {
	const char *name;
	bool group;
	bool deleted;   /* by this transaction */
	struct rec old; /* as the cache held it (when tracking) */
};

struct gone_list {
	struct gone *v;
	size_t n;
};

/* What one store() needs to tell the hook: the records before (read
 * before the transaction begins) and after, for the users and groups it
 * writes and the entries it deletes. */
struct track {
	bool on;      /* a hook is set */
	bool unknown; /* something could not be read or kept: report NULL */
	struct idc_arena a;
	struct rec *uold, *unew; /* per user from users_stored */
	struct rec *gold, *gnew; /* per group index */
};

static const char **copy_names(struct idc_arena *a, const char *const *v, size_t n)
{
	const char **out = idc_arena_alloc(a, (n ? n : 1) * sizeof(*out));
	for (size_t i = 0; out && i < n; i++)
		if (!(out[i] = idc_arena_strndup(a, v[i], strlen(v[i]))))
			return NULL;
	return out;
}

static void keep_user(struct track *tr, const struct cache_user *u, struct rec *o)
{
	o->name = idc_arena_strndup(&tr->a, u->name, strlen(u->name));
	o->id = u->uid;
	o->present = o->name != NULL;
	tr->unknown |= !o->present;
}

static void keep_group(struct track *tr, const struct cache_group *g, struct rec *o)
{
	o->name = idc_arena_strndup(&tr->a, g->name, strlen(g->name));
	o->id = g->gid;
	o->mem = copy_names(&tr->a, g->members, g->nmembers);
	o->nmem = g->nmembers;
	o->nested = copy_names(&tr->a, g->member_groups, g->nmember_groups);
	o->nnested = g->nmember_groups;
	o->present = o->name && o->mem && o->nested;
	tr->unknown |= !o->present;
}

/* The records as the cache holds them before the transaction. */
static void track_begin(struct lp_req *r, struct track *tr, bool page, struct gone_list *gl)
{
	struct lprov_domain *ld = r->ld;
	const char *doms[] = {ld->cfg.name};
	memset(tr, 0, sizeof(*tr));
	tr->on = ld->hook != NULL;
	if (!tr->on)
		return;
	size_t nu = r->users.n - r->users_stored, ng = r->groups.n;
	tr->uold = calloc(nu + 1, sizeof(*tr->uold));
	tr->unew = calloc(nu + 1, sizeof(*tr->unew));
	tr->gold = calloc(ng + 1, sizeof(*tr->gold));
	tr->gnew = calloc(ng + 1, sizeof(*tr->gnew));
	struct cache_reader *rd = NULL;
	if (!tr->uold || !tr->unew || !tr->gold || !tr->gnew ||
	    cache_reader_begin(ld->cache, &rd)) {
		tr->unknown = true;
		return;
	}
	struct cache_user u;
	struct cache_group g;
	for (size_t i = 0; i < nu && !tr->unknown; i++) {
		const struct lp_user *lu = r->users.v[r->users_stored + i];
		int rc = cache_user_by_name(rd, doms, 1, lu->name, false, &u, NULL);
		if (rc == 0)
			keep_user(tr, &u, &tr->uold[i]);
		else if (rc != -ENOENT)
			tr->unknown = true;
	}
	for (size_t i = 0; i < ng && !tr->unknown; i++) {
		const struct lp_group *lg = r->groups.v[i];
		if (!group_due(r, lg, page))
			continue;
		int rc = cache_group_by_name(rd, doms, 1, lg->name, false, &g, NULL);
		if (rc == 0)
			keep_group(tr, &g, &tr->gold[i]);
		else if (rc != -ENOENT)
			tr->unknown = true;
	}
	for (size_t i = 0; i < gl->n && !tr->unknown; i++) {
		struct gone *x = &gl->v[i];
		int rc = x->group ? cache_group_by_name(rd, doms, 1, x->name, false, &g, NULL)
				  : cache_user_by_name(rd, doms, 1, x->name, false, &u, NULL);
		if (rc == 0 && x->group)
			keep_group(tr, &g, &x->old);
		else if (rc == 0)
			keep_user(tr, &u, &x->old);
		else if (rc != -ENOENT)
			tr->unknown = true;
	}
	cache_reader_end(rd);
}

static int cmp_name(const void *a, const void *b)
{
	return strcasecmp(*(const char *const *)a, *(const char *const *)b);
}

/* Whether two lists of group names hold the same names (sorted in place). */
static bool same_names(const char **a, size_t na, const char **b, size_t nb)
{
	if (na != nb)
		return false;
	if (na) {
		qsort(a, na, sizeof(*a), cmp_name);
		qsort(b, nb, sizeof(*b), cmp_name);
	}
	for (size_t i = 0; i < na; i++)
		if (strcasecmp(a[i], b[i]))
			return false;
	return true;
}

static void emit(struct lprov_domain *ld, bool group, struct rec *o, struct rec *n)
{
	if (o->present && n->present && strcmp(o->name, n->name)) {
		/* The same entry under a name in another case: went and came. */
		struct rec none = {0};
		emit(ld, group, o, &none);
		emit(ld, group, &none, n);
		return;
	}
	if (!o->present && !n->present)
		return;
	struct lprov_change ch = {.group = group,
				  .old_name = o->present ? o->name : NULL,
				  .new_name = n->present ? n->name : NULL,
				  .old_id = o->id,
				  .new_id = n->id,
				  .old_mem = o->mem,
				  .nold_mem = o->nmem,
				  .new_mem = n->mem,
				  .nnew_mem = n->nmem};
	if (group && (o->nnested || n->nnested))
		ch.nested_changed = !o->present || !n->present || o->id != n->id ||
				    !same_names(o->nested, o->nnested, n->nested, n->nnested);
	ld->hook(&ch, ld->hook_arg);
}

/* After the commit: tell the hook what changed. */
static void track_report(struct lp_req *r, struct track *tr, struct gone_list *gl)
{
	struct lprov_domain *ld = r->ld;
	if (!tr->on)
		return;
	if (tr->unknown) {
		ld->hook(NULL, ld->hook_arg);
		return;
	}
	for (size_t i = 0; i < r->users.n - r->users_stored; i++)
		if (tr->unew[i].present)
			emit(ld, false, &tr->uold[i], &tr->unew[i]);
	for (size_t i = 0; i < r->groups.n; i++)
		if (tr->gnew[i].present)
			emit(ld, true, &tr->gold[i], &tr->gnew[i]);
	for (size_t i = 0; i < gl->n; i++) {
		struct rec none = {0};
		if (gl->v[i].deleted)
			emit(ld, gl->v[i].group, &gl->v[i].old, &none);
	}
}

static void track_free(struct track *tr)
{
	free(tr->uold);
	free(tr->unew);
	free(tr->gold);
	free(tr->gnew);
	idc_arena_free(&tr->a);
}

/* ==== the answer into the cache ======================================================= */

/* An id the directory gives two names (a uidNumber of two users, a
 * gidNumber of two groups) is kept for both, as glibc's files module
 * would, but is worth an administrator's look: logged once with the DN
 * being stored and the name already holding it. */
static void note_shared_id(struct lprov_domain *ld, struct cache_txn *t, bool group, const char *dn,
			   const char *name, uint32_t id)
{
	char other[CACHE_NAME_MAX + 1];
	int rc = group ? cache_gid_taken(t, ld->cfg.name, id, name, other)
		       : cache_uid_taken(t, ld->cfg.name, id, name, other);
	if (rc == 1)
		lp_log_once(ld, IDC_LOG_WARN,
			    "ldap domain %s: %s: entry \"%.300s\": %s %u is also held by %s",
			    ld->cfg.name, lp_server(ld), dn,
			    ld->attr[group ? LPROV_MAP_GROUP_GID : LPROV_MAP_USER_UID],
			    (unsigned)id, other);
}

/* A member named by its DN's RDN (ldap_member_names_from_rdn): the RDN
 * value matches the user's name under the naming attribute's rule, not
 * byte for byte ("uid=USER1" for user1), so the group lists the user as
 * the cache holds it (stored earlier in this transaction or before). A
 * user the cache does not hold keeps the RDN's spelling. */
static int rdn_member(struct cache_txn *t, struct lp_req *r, const char **name)
{
	const char *known = lp_map_get(&r->rdn_names, *name);
	if (known) { /* a member of many groups is looked up once */
		*name = known;
		return 0;
	}
	char stored[CACHE_NAME_MAX + 1];
	const char *rdn = *name;
	int rc = cache_user_name(t, r->ld->cfg.name, rdn, stored);
	if (rc == 1 && strcmp(stored, rdn))
		*name = idc_arena_strndup(&r->arena, stored, strlen(stored));
	if (rc >= 0 && !*name)
		return -ENOMEM;
	return rc < 0 ? rc : lp_map_put(&r->rdn_names, rdn, (void *)*name) < 0 ? -ENOMEM : 0;
}

/* Store g; when tr is on and the record changed, *out gets what was
 * stored (the lists copied into tr's arena). */
static int put_group(struct cache_txn *t, struct lp_req *r, struct lp_group *g, struct track *tr,
		     struct rec *out, struct idc_diag *d)
{
	size_t cap = g->nuids + g->nmdns;
	const char **names = cap ? malloc(cap * sizeof(*names)) : NULL;
	const char **nested = g->nmdns ? malloc(g->nmdns * sizeof(*nested)) : NULL;
	if ((cap && !names) || (g->nmdns && !nested)) {
		free(names);
		free(nested);
		return -ENOMEM;
	}
	size_t nn = 0, ng = 0;
	int rc = 0;
	for (size_t i = 0; i < g->nuids && !rc; i++) {
		names[nn] = g->uids[i];
		if (i >= g->nuid_values)
			rc = rdn_member(t, r, &names[nn]);
		nn++;
	}
	for (size_t i = 0; i < g->nmdns && !rc; i++) {
		struct lp_user *u = lp_map_get(&r->udn, g->mdns[i]);
		struct lp_group *m = u ? NULL : lp_map_get(&r->gdn, g->mdns[i]);
		if (u)
			names[nn++] = u->name;
		else if (m && m != g)
			nested[ng++] = m->name;
	}
	struct cache_group cg = {g->name, g->gid, 0, names, nn, nested, ng, g->dn};
	bool changed = false;
	if (!rc)
		rc = cache_put_group(t, r->ld->cfg.name, &cg, &changed, d);
	if (rc == 0 && changed)
		note_shared_id(r->ld, t, true, g->dn, g->name, g->gid);
	if (rc == 0 && changed && tr->on && !tr->unknown) {
		/* The strings live in the request's arena; the arrays are copied. */
		out->mem = idc_arena_alloc(&tr->a, (nn ? nn : 1) * sizeof(*out->mem));
		out->nested = idc_arena_alloc(&tr->a, (ng ? ng : 1) * sizeof(*out->nested));
		if (out->mem && out->nested) {
			if (nn)
				memcpy(out->mem, names, nn * sizeof(*names));
			if (ng)
				memcpy(out->nested, nested, ng * sizeof(*nested));
			*out = (struct rec){true, g->name, g->gid, out->mem, out->nested, nn, ng};
		} else {
			tr->unknown = true;
		}
	}
	free(names);
	free(nested);
	return rc;
}

/* Not storable (a name taken in another case...): log, keep the rest. */
static int soft(struct lprov_domain *ld, int rc, const char *dn, struct idc_diag *d)
{
	if (rc != -EINVAL)
		return rc;
	lp_log_once(ld, IDC_LOG_WARN, "ldap domain %s: entry \"%.300s\" not cached: %s",
		    ld->cfg.name, dn, d->msg);
	return 0;
}

/* Whether a and b name one entry of the cache (the directory answered one
 * spelling for the other). */
static bool name_eq(const char *a, const char *b)
{
	return cache_name_equal(CACHE_NAMES_STORED, a, b);
}

static enum lprov_lookup_result answer(const struct lp_req *r)
{
	bool found = false;
	for (size_t i = 0; i < r->users.n && !found; i++) {
		const struct lp_user *u = r->users.v[i];
		found = (r->kind == LPROV_LOOKUP_PWNAM && name_eq(u->name, r->name)) ||
			(r->kind == LPROV_LOOKUP_PWUID && u->uid == r->id);
	}
	for (size_t i = 0; i < r->groups.n && !found; i++) {
		const struct lp_group *g = r->groups.v[i];
		found = (r->kind == LPROV_LOOKUP_GRNAM && name_eq(g->name, r->name)) ||
			(r->kind == LPROV_LOOKUP_GRGID && g->gid == r->id);
	}
	if (r->kind == LPROV_LOOKUP_INITGROUPS)
		found = r->target != NULL;
	if (r->kind == LPROV_LOOKUP_ENUMERATE || r->kind == LP_REFRESH)
		found = true;
	return found ? LPROV_LOOKUP_FOUND : LPROV_LOOKUP_NOTFOUND;
}

/* Whether every member DN of g is a user or group of this answer. */
static bool members_known(const struct lp_req *r, const struct lp_group *g)
{
	for (size_t i = 0; i < g->nmdns; i++)
		if (!lp_map_get(&r->udn, g->mdns[i]) && !lp_map_get(&r->gdn, g->mdns[i]))
			return false;
	return true;
}

/* Whether g goes into this transaction: not committed yet, and for a page
 * of an enumeration only when its members are known (the others wait for
 * the final transaction, after the member searches). */
static bool group_due(const struct lp_req *r, const struct lp_group *g, bool page)
{
	return !g->stored && (!page || members_known(r, g));
}

/* name as the cache keys it (CACHE_NAMES_STORED), in a: two spellings the
 * cache holds as one entry fold alike, so an answer in the directory's
 * spelling is not taken for the cached name's absence. */
static char *fold_name(struct idc_arena *a, const char *name)
{
	char f[CACHE_NAME_MAX + 1];
	size_t n = cache_name_fold(CACHE_NAMES_STORED, name, f);
	return idc_arena_strndup(a, n ? f : name, n ? n : strlen(name));
}

/* Folded names (fold_name) of the users or groups of the answer. */
static int answered_names(struct lp_req *r, bool group, struct lp_map *out)
{
	const struct lp_vec *v = group ? &r->groups : &r->users;
	for (size_t i = 0; i < v->n; i++) {
		const char *name = group ? ((const struct lp_group *)v->v[i])->name
					 : ((const struct lp_user *)v->v[i])->name;
		char *f = fold_name(&r->arena, name);
		if (!f || lp_map_put(out, f, v->v[i]) < 0)
			return -ENOMEM;
	}
	return 0;
}

static int gone_push(struct gone_list *gl, size_t cap, const char *name, bool group)
{
	if (!gl->v && !(gl->v = calloc(cap, sizeof(*gl->v))))
		return -ENOMEM;
	gl->v[gl->n++] = (struct gone){.name = name, .group = group};
	return 0;
}

/* The names of one kind a refresh asked for, its answer lacks, and the
 * cache holds stored before the refresh's searches went out (one stored
 * since, by a lookup of its own, waits for the next refresh). A name the
 * cache cannot be read for is kept. */
static int refresh_gone(struct lp_req *r, struct cache_reader *rd, bool group,
			const struct lp_map *answered, struct gone_list *gl, size_t cap)
{
	const char *doms[] = {r->ld->cfg.name};
	const struct lp_vec *asked = group ? &r->rg : &r->ru;
	int rc = 0;
	for (size_t i = 0; i < asked->n && !rc; i++) {
		const char *name = asked->v[i];
		char *f = fold_name(&r->arena, name);
		if (!f)
			return -ENOMEM;
		if (lp_map_get(answered, f))
			continue;
		struct cache_meta m;
		struct cache_user u;
		struct cache_group g;
		int found = group ? cache_group_by_name(rd, doms, 1, name, false, &g, &m)
				  : cache_user_by_name(rd, doms, 1, name, false, &u, &m);
		if (found == 0 && m.last_update < r->refresh_sent)
			rc = gone_push(gl, cap, name, group);
	}
	return rc;
}

/* What store() removes: for a lookup by name that found nothing, that
 * name; for a refresh or a verify wave whose every search completed
 * (LDAP_SUCCESS, nothing lost to memory: !r->partial), the names it asked
 * for that the directory answered without. A failed or timed-out search never gets here (the
 * request is restarted or completed offline without a store). */
static int collect_gone(struct lp_req *r, enum lprov_lookup_result res, bool page,
			struct gone_list *gl)
{
	memset(gl, 0, sizeof(*gl));
	if (page)
		return 0;
	if (res == LPROV_LOOKUP_NOTFOUND &&
	    (r->kind == LPROV_LOOKUP_PWNAM || r->kind == LPROV_LOOKUP_GRNAM))
		return gone_push(gl, 1, r->name, r->kind == LPROV_LOOKUP_GRNAM);
	if (r->partial || (!r->ru.n && !r->rg.n))
		return 0; /* neither a refresh nor a verify wave asked by name */
	struct lp_map unames = {0}, gnames = {0};
	int rc = answered_names(r, false, &unames);
	if (!rc)
		rc = answered_names(r, true, &gnames);
	struct cache_reader *rd = NULL;
	if (!rc && cache_reader_begin(r->ld->cache, &rd))
		rd = NULL; /* unreadable: nothing is deleted this time */
	size_t cap = r->ru.n + r->rg.n;
	if (!rc && rd)
		rc = refresh_gone(r, rd, false, &unames, gl, cap);
	if (!rc && rd)
		rc = refresh_gone(r, rd, true, &gnames, gl, cap);
	if (rd)
		cache_reader_end(rd);
	lp_map_free(&unames);
	lp_map_free(&gnames);
	return rc;
}

/* Remove the entries of gl from the cache (one absent already is no
 * error); marks those removed for track_report. */
static int del_gone(struct cache_txn *t, struct lprov_domain *ld, struct gone_list *gl,
		    struct idc_diag *d)
{
	for (size_t i = 0; i < gl->n; i++) {
		struct gone *x = &gl->v[i];
		int rc = x->group ? cache_del_group(t, ld->cfg.name, x->name, d)
				  : cache_del_user(t, ld->cfg.name, x->name, d);
		if (rc && rc != -ENOENT)
			return rc;
		x->deleted = rc == 0;
	}
	return 0;
}

/* What was found and not yet committed, in one transaction; what the
 * directory no longer has is removed (collect_gone). page: an
 * enumeration's intermediate commit (users so far, groups whose members
 * are known). An unchanged entry writes only the timestamps db
 * (cache_put_user/cache_put_group). */
static int store(struct lp_req *r, enum lprov_lookup_result res, bool page, struct idc_diag *d)
{
	struct lprov_domain *ld = r->ld;
	size_t ngroups = 0;
	for (size_t i = 0; i < r->groups.n; i++)
		ngroups += group_due(r, r->groups.v[i], page);
	struct gone_list gl;
	int rc = collect_gone(r, res, page, &gl);
	bool enumerating = page || r->kind == LPROV_LOOKUP_ENUMERATE || r->kind == LP_REFRESH;
	if (rc || (enumerating && r->users_stored == r->users.n && !ngroups && !gl.n)) {
		free(gl.v);
		return rc;
	}
	struct track tr;
	track_begin(r, &tr, page, &gl);
	struct cache_txn *t;
	rc = cache_txn_begin(ld->cache, &t, d);
	if (rc)
		goto out;
	rc = cache_domain_ensure(t, ld->cfg.name, ld->cfg.entry_cache_timeout, d);
	for (size_t i = r->users_stored; i < r->users.n && !rc; i++) {
		const struct lp_user *u = r->users.v[i];
		struct cache_user cu = {u->name, u->uid,   u->gid, u->gecos,
					u->dir,  u->shell, 0,      u->dn};
		bool changed = false;
		rc = soft(ld, cache_put_user(t, ld->cfg.name, &cu, &changed, d), u->dn, d);
		if (!rc && changed)
			note_shared_id(ld, t, false, u->dn, u->name, u->uid);
		if (!rc && changed && tr.on && !tr.unknown)
			tr.unew[i - r->users_stored] =
			    (struct rec){.present = true, .name = u->name, .id = u->uid};
	}
	for (size_t i = 0; i < r->groups.n && !rc; i++) {
		struct lp_group *g = r->groups.v[i];
		if (group_due(r, g, page))
			rc = soft(ld, put_group(t, r, g, &tr, tr.on ? &tr.gnew[i] : NULL, d), g->dn,
				  d);
	}
	if (!rc)
		rc = del_gone(t, ld, &gl, d);
	if (rc == -ENOENT)
		rc = 0;
	if (rc) {
		cache_txn_abort(t);
		goto out;
	}
	rc = cache_txn_commit(t, d);
	if (rc)
		goto out;
	ld->ncommits++;
	track_report(r, &tr, &gl);
	size_t nu = 0, ng = 0;
	for (size_t i = 0; i < gl.n; i++)
		*(gl.v[i].group ? &ng : &nu) += gl.v[i].deleted;
	if (r->kind == LP_REFRESH && nu + ng)
		idc_log(IDC_LOG_INFO,
			"ldap domain %s: refresh: %zu users and %zu groups no longer in the "
			"directory removed from the cache",
			ld->cfg.name, nu, ng);
	else if (nu + ng)
		idc_log(IDC_LOG_INFO,
			"ldap domain %s: %zu users and %zu groups no longer in the directory under "
			"their cached names (removed or renamed) removed from the cache",
			ld->cfg.name, nu, ng);
	r->users_stored = r->users.n;
	for (size_t i = 0; i < r->groups.n; i++) {
		struct lp_group *g = r->groups.v[i];
		if (group_due(r, g, page))
			g->stored = true;
	}
out:
	track_free(&tr);
	free(gl.v);
	return rc;
}

void lp_req_page(struct lp_req *r)
{
	struct idc_diag d = {{0}};
	size_t nu = r->users.n - r->users_stored;
	uint64_t t0 = idc_now_ns();
	int rc = store(r, LPROV_LOOKUP_FOUND, true, &d);
	if (rc)
		/* Left for the final transaction, which tries again. */
		idc_log(IDC_LOG_WARN, "ldap domain %s: storing an enumeration page failed: %s",
			r->ld->cfg.name, d.msg[0] ? d.msg : idc_strerror(rc));
	else
		idc_log(IDC_LOG_DEBUG,
			"ldap domain %s: enumeration page: %zu users stored in %.1f ms",
			r->ld->cfg.name, nu, (double)(idc_now_ns() - t0) / 1e6);
	r->unstored = 0;
	r->ld->yield = true;
}

static void finish(struct lp_req *r)
{
	struct idc_diag d = {{0}};
	enum lprov_lookup_result res = answer(r);
	uint64_t t0 = idc_now_ns();
	int rc = store(r, res, false, &d);
	idc_log(IDC_LOG_DEBUG, "ldap domain %s: %zu users, %zu groups stored in %.1f ms",
		r->ld->cfg.name, r->users.n, r->groups.n, (double)(idc_now_ns() - t0) / 1e6);
	if (rc) {
		idc_log(IDC_LOG_ERR, "ldap domain %s: storing the answer failed: %s",
			r->ld->cfg.name, d.msg[0] ? d.msg : idc_strerror(rc));
		res = LPROV_LOOKUP_FAILED;
	}
	req_complete(r, res);
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
	char *f = fold_name(&x->r->arena, name);
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
		held = name_eq(holders.v[i], name);
	for (size_t i = 0; i < holders.n && !held && !rc; i++)
		rc = take_stale(x, holders.v[i]);
	lp_vec_free(&holders);
	return rc;
}

static int stale_users(struct lp_req *r, struct cache_reader *rd, struct stale *x)
{
	const char *dom = r->ld->cfg.name;
	int rc = answered_names(r, false, &x->seen);
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
	int rc = answered_names(r, true, &x->seen);
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
static int send_verify(struct lp_req *r)
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
		rc = send_by_names(r, false, &r->ru);
	return rc ? rc : send_by_names(r, true, &r->rg);
}

/* ==== stepping ======================================================================= */

static struct lp_user *find_target(struct lp_req *r)
{
	for (size_t i = 0; i < r->users.n; i++) {
		struct lp_user *u = r->users.v[i];
		if (name_eq(u->name, r->name))
			return u;
	}
	return NULL;
}

/* ldap_group_nesting_level: whether the next wave (parents: up, members:
 * down; the first member wave holds direct members) goes deeper than the
 * level allows. Then the request is cut, logged once with a DN it would
 * have followed. */
static bool too_deep(struct lp_req *r, bool up)
{
	struct lprov_domain *ld = r->ld;
	uint32_t level = ld->cfg.nesting_level;
	if (up ? ++r->up <= level : ++r->down <= level + 1)
		return false;
	char what[96];
	lp_req_describe(r, what, sizeof(what));
	const struct lp_vec *q = up ? &r->parentq : &r->memq;
	lp_log_once(ld, IDC_LOG_WARN,
		    "ldap domain %s: %s: %s: groups nested deeper than ldap_group_nesting_level = "
		    "%u; not followed past \"%.300s\"",
		    ld->cfg.name, lp_server(ld), what, (unsigned)level,
		    q->n ? (const char *)q->v[0] : "");
	r->cut = r->partial = true;
	return true;
}

/* Send the next wave, or finish. A failed send leaves r waiting for the
 * connection to be replaced (ld->broken), which restarts it. */
static void req_step(struct lp_req *r)
{
	int rc = 0;
	if (r->cut) {
		/* a limit was reached (ldap_max_entries, ldap_max_searches,
		 * ldap_group_nesting_level): what came is the answer */
		if (r->kind == LPROV_LOOKUP_INITGROUPS && r->phase == 1)
			r->target = find_target(r);
		return finish(r);
	}
	if (r->phase == 0 && r->kind == LP_REFRESH) {
		r->phase = 2; /* then members, like a group lookup */
		rc = send_refresh(r);
		if (!rc && !r->pending)
			return finish(r); /* nothing expired */
	} else if (r->phase == 0) {
		r->phase = 1;
		rc = r->kind == LPROV_LOOKUP_ENUMERATE ? send_enum(r, false) : send_find(r);
	} else if (r->phase == 1 && r->kind == LPROV_LOOKUP_ENUMERATE) {
		r->phase = 2;
		rc = send_enum(r, true);
	} else if (r->phase == 1 && r->kind == LPROV_LOOKUP_INITGROUPS) {
		r->phase = 2;
		r->target = find_target(r);
		if (!r->target)
			return finish(r);
		rc = send_groups_of(r);
	} else {
		r->phase = 2;
		rc = queue_new_groups(r);
		if (!rc && (r->parentq.n || r->memq.n) && too_deep(r, r->parentq.n != 0))
			return finish(r);
		if (!rc && r->parentq.n)
			rc = send_parents(r);
		else if (!rc && r->memq.n)
			rc = send_members(r);
		else if (!rc && !r->pending && !r->verified)
			rc = send_verify(r);
		else if (!rc && !r->pending)
			return finish(r);
		if (!rc && !r->pending)
			return req_step(r); /* nothing went out: the next step */
	}
	if (rc == -E2BIG) {
		/* ldap_max_searches spent (r->cut): finish once what went out answered */
		if (!r->pending)
			finish(r);
		return;
	}
	if (rc == -ENOMEM) {
		req_complete(r, LPROV_LOOKUP_FAILED);
	} else if (rc) {
		r->ld->broken = true;
		req_forget_searches(r->ld, r);
		req_clear(r);
	}
}

void lp_req_searched(struct lp_req *r)
{
	req_step(r);
}

void lp_req_restart_all(struct lprov_domain *ld)
{
	/* Detach first: a restart may fail the new server too and complete
	 * requests; each one is re-linked before it is stepped. */
	struct lp_req *list = ld->reqs;
	ld->reqs = NULL;
	while (list) {
		struct lp_req *r = list;
		list = r->next;
		r->next = ld->reqs;
		ld->reqs = r;
		/* one that waited for the connection has not started yet */
		bool began = r->phase != 0;
		req_clear(r);
		if ((began && ++r->restarts > (int)ld->cfg.nuris + 1) || !ld->conn)
			req_complete(r, LPROV_LOOKUP_OFFLINE);
		else
			req_step(r);
	}
}

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
		if (i == LPROV_MAP_USER_OC || i == LPROV_MAP_GROUP_OC)
			continue;
		bool dup = false;
		for (size_t j = 0; j < n && !dup; j++)
			dup = !strcasecmp(ld->attrs[j], a);
		if (!dup && n < IDC_ARRAY_SIZE(ld->attrs) - 1)
			ld->attrs[n++] = a;
	}
	ld->attrs[n] = NULL;
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
	if (ld->cfg.enumerate)
		ld->next_enum_ns = idc_now_ns();
	if (ld->cfg.refresh_expired_ms)
		ld->next_refresh_ns = idc_now_ns() + ld->cfg.refresh_expired_ms * 1000000ull;
	*out = ld;
	return 0;
}

void lprov_domain_set_hook(struct lprov_domain *ld, lprov_change_fn fn, void *arg)
{
	ld->hook = fn;
	ld->hook_arg = fn ? arg : NULL;
}

void lprov_domain_free(struct lprov_domain *ld)
{
	if (!ld)
		return;
	lp_req_finish_all(ld, LPROV_LOOKUP_FAILED);
	lp_conn_close(ld);
	if (ld->password)
		explicit_bzero(ld->password, strlen(ld->password));
	free(ld->password);
	idc_arena_free(&ld->arena);
	lp_hset_free(&ld->logged);
	lprov_config_free(&ld->cfg);
	free(ld);
}

static struct lp_req *find_req(struct lprov_domain *ld, enum lprov_lookup_kind kind,
			       const char *name, uint32_t id)
{
	for (struct lp_req *r = ld->reqs; r; r = r->next)
		if (r->kind == kind && r->id == id &&
		    ((!name && !r->name) || (name && r->name && name_eq(name, r->name))))
			return r;
	return NULL;
}

static enum lprov_lookup_result start_lookup(struct lprov_domain *ld, enum lprov_lookup_kind kind,
					     const char *name, uint32_t id, lprov_lookup_cb cb,
					     void *arg);

enum lprov_lookup_result lprov_domain_lookup(struct lprov_domain *ld, enum lprov_lookup_kind kind,
					     const char *name, uint32_t id, lprov_lookup_cb cb,
					     void *arg)
{
	bool by_name = kind == LPROV_LOOKUP_PWNAM || kind == LPROV_LOOKUP_GRNAM ||
		       kind == LPROV_LOOKUP_INITGROUPS;
	if (kind < LPROV_LOOKUP_PWNAM || kind > LPROV_LOOKUP_ENUMERATE)
		return LPROV_LOOKUP_FAILED;
	if (by_name && (!name || !cache_name_valid(name, strlen(name))))
		return LPROV_LOOKUP_NOTFOUND;
	if (!by_name) {
		name = NULL;
		if (kind == LPROV_LOOKUP_ENUMERATE)
			id = 0;
	}
	/* min_id/max_id: such an id is never stored; the directory is not asked. */
	if ((kind == LPROV_LOOKUP_PWUID || kind == LPROV_LOOKUP_GRGID) &&
	    !lp_id_in_range(&ld->cfg, id))
		return LPROV_LOOKUP_NOTFOUND;
	if (kind != LPROV_LOOKUP_ENUMERATE && neg_hit(ld, key_hash(ld, kind, name, id))) {
		ld->nneg++;
		return LPROV_LOOKUP_NOTFOUND;
	}
	return start_lookup(ld, kind, name, id, cb, arg);
}

/* Join an identical request in flight, or start one. */
static enum lprov_lookup_result start_lookup(struct lprov_domain *ld, enum lprov_lookup_kind kind,
					     const char *name, uint32_t id, lprov_lookup_cb cb,
					     void *arg)
{
	struct lp_req *r = find_req(ld, kind, name, id);
	if (r) {
		ld->njoined++;
		return add_waiter(r, cb, arg) ? LPROV_LOOKUP_FAILED : LPROV_LOOKUP_PENDING;
	}
	if (lp_conn_ensure(ld))
		return LPROV_LOOKUP_OFFLINE;
	r = calloc(1, sizeof(*r));
	if (!r || (name && !(r->name = strdup(name))) || add_waiter(r, cb, arg)) {
		if (r)
			req_free(r);
		return LPROV_LOOKUP_FAILED;
	}
	r->ld = ld;
	r->kind = kind;
	r->id = id;
	r->next = ld->reqs;
	ld->reqs = r;
	ld->nlookups++;
	if (!ld->hs)
		req_step(r); /* else it goes out when the connection is ready */
	return LPROV_LOOKUP_PENDING;
}

size_t lprov_domain_fds(const struct lprov_domain *ld, int *fds, size_t max)
{
	if (!ld->conn || ld->fd < 0)
		return 0;
	if (max)
		fds[0] = ld->fd;
	return 1;
}

static void earliest(uint64_t *best, uint64_t t)
{
	if (t && (!*best || t < *best))
		*best = t;
}

int64_t lprov_domain_next_timeout(const struct lprov_domain *ld)
{
	if (ld->more || ld->broken)
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
	if (ld->online) {
		earliest(&best, ld->next_enum_ns);
		earliest(&best, ld->next_refresh_ns);
	}
	if (!best)
		return -1;
	uint64_t now = idc_now_ns();
	return best <= now ? 0 : (int64_t)((best - now + 999999) / 1000000);
}

static void maybe_enumerate(struct lprov_domain *ld, uint64_t now)
{
	if (!ld->next_enum_ns || now < ld->next_enum_ns || !ld->online)
		return;
	ld->next_enum_ns = now + LP_ENUM_EVERY_MS * 1000000ull;
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
	if (!ld->next_refresh_ns || now < ld->next_refresh_ns || !ld->online)
		return;
	ld->next_refresh_ns = now + ld->cfg.refresh_expired_ms * 1000000ull;
	if (find_req(ld, LP_REFRESH, NULL, 0))
		return; /* the last one is still running */
	if (start_lookup(ld, LP_REFRESH, NULL, 0, NULL, NULL) == LPROV_LOOKUP_OFFLINE)
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

void lprov_domain_process(struct lprov_domain *ld)
{
	if (!ld->range_checked)
		drop_out_of_range(ld);
	if (ld->broken) {
		ld->broken = false;
		lp_conn_fail(ld, "sending a search failed");
	}
	if (ld->hs)
		lp_conn_handshake(ld, idc_now_ns());
	if (ld->conn && !ld->hs && ld->searches)
		lp_read(ld);
	uint64_t now = idc_now_ns();
	lp_search_deadlines(ld, now);
	lp_conn_timers(ld, now);
	maybe_enumerate(ld, now);
	maybe_refresh(ld, now);
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
	    .searches = ld->nsearches,
	    .lookups = ld->nlookups,
	    .joined = ld->njoined,
	    .negative_hits = ld->nneg,
	    .commits = ld->ncommits,
	    .in_flight = n,
	};
}
