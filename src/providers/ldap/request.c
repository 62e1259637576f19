/*
 * request: the request state machine, one lookup from first search to
 * cache commit: the lookup entry point (coalescing, negative cache), the
 * steps from wave to wave, finishing.
 *
 * A lookup is a short series of waves (waves.c, refresh.c); each wave is a
 * set of searches sent together (pipelined) and the next wave starts when
 * all of them answered:
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
 * ldap_max_searches, ldap_max_entries and ldap_max_memory (search.c). Then
 * everything found is written in one cache transaction (store.c). An
 * enumeration commits as its pages arrive (lp_req_page): the users of each
 * page, and the groups whose members are all known; what is left (groups
 * with members still to resolve) goes in the final transaction.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "providers/ldap/lprov_int.h"

/* ==== negative cache ========================================================= */

/* The matching rule of the attribute a lookup of kind names. */
static enum cache_name_rule name_rule(const struct lprov_domain *ld, enum lprov_lookup_kind kind)
{
	bool group = kind == LPROV_LOOKUP_GRNAM || kind == LPROV_LOOKUP_GRGID;
	return cache_name_rule_of_attr(
	    ld->attr[group ? LPROV_MAP_GROUP_NAME : LPROV_MAP_USER_NAME]);
}

/* Whether a lookup of name b has the answer of one of name a (NULL: by
 * id), as the cache tells names apart (cache_name_answers): the negative
 * cache and coalescing never hand one name's answer to another. */
static bool same_name(const struct lprov_domain *ld, enum lprov_lookup_kind kind, const char *a,
		      const char *b)
{
	if (!a || !b)
		return !a && !b;
	return cache_name_answers(name_rule(ld, kind), a, b);
}

/* The slot of a lookup: the spellings same_name equates share it
 * (cache_name_hash); same_name decides on a hit. */
static uint64_t key_hash(const struct lprov_domain *ld, enum lprov_lookup_kind kind,
			 const char *name, uint32_t id)
{
	uint64_t seed = ld->hash_seed ^ (((uint64_t)kind << 32 | id) * 0x9e3779b97f4a7c15ull);
	return name ? cache_name_hash(name_rule(ld, kind), name, seed)
		    : idc_hash64("", 0, seed) | 1;
}

static struct lp_neg *neg_slot(struct lprov_domain *ld, uint64_t h)
{
	return &ld->neg[h % LP_NEG_SLOTS];
}

/* Whether slot n holds the lookup (h: its key_hash). */
static bool neg_is(const struct lprov_domain *ld, const struct lp_neg *n, uint64_t h,
		   enum lprov_lookup_kind kind, const char *name, uint32_t id)
{
	return n->h == h && n->kind == (int)kind && n->id == id &&
	       same_name(ld, kind, n->name, name);
}

static bool neg_hit(struct lprov_domain *ld, enum lprov_lookup_kind kind, const char *name,
		    uint32_t id)
{
	uint64_t h = key_hash(ld, kind, name, id);
	struct lp_neg *n = neg_slot(ld, h);
	return neg_is(ld, n, h, kind, name, id) && idc_now_ns() < n->expires_ns;
}

/* Remember that the lookup found nothing (notfound), or forget it. The
 * slot's earlier lookup goes; without memory for the name nothing is
 * remembered: the next lookup asks again. */
static void neg_note(struct lprov_domain *ld, enum lprov_lookup_kind kind, const char *name,
		     uint32_t id, bool notfound)
{
	uint64_t h = key_hash(ld, kind, name, id);
	struct lp_neg *n = neg_slot(ld, h);
	if (!notfound && !neg_is(ld, n, h, kind, name, id))
		return;
	free(n->name);
	*n = (struct lp_neg){0};
	if (!notfound || (name && !(n->name = strdup(name))))
		return;
	n->h = h;
	n->expires_ns = idc_now_ns() + ld->cfg.negative_timeout_ms * 1000000ull;
	n->kind = (int)kind;
	n->id = id;
}

/* The one rule for what an entry now cached makes untrue: every lookup by
 * either of its keys the negative cache holds, whichever lookup, refresh,
 * poll or feed brought it (a miss by uid, then the user found by name, must
 * not deny the uid the cache now answers until entry_negative_timeout).
 * Names match as a lookup's do (same_name): a miss for "NEGW" goes with
 * negw, one for "strasse" stays with straße. What leaves the cache makes
 * no miss untrue. */
void lp_neg_forget(struct lprov_domain *ld, bool group, const char *name, uint32_t id)
{
	if (group) {
		neg_note(ld, LPROV_LOOKUP_GRNAM, name, 0, false);
		neg_note(ld, LPROV_LOOKUP_GRGID, NULL, id, false);
		return;
	}
	neg_note(ld, LPROV_LOOKUP_PWNAM, name, 0, false);
	neg_note(ld, LPROV_LOOKUP_INITGROUPS, name, 0, false);
	neg_note(ld, LPROV_LOOKUP_PWUID, NULL, id, false);
}

void lp_neg_free(struct lprov_domain *ld)
{
	for (size_t i = 0; i < LP_NEG_SLOTS; i++) {
		free(ld->neg[i].name);
		ld->neg[i] = (struct lp_neg){0};
	}
}

/* ==== request lifecycle ========================================================= */

static void req_clear(struct lp_req *r)
{
	idc_arena_free(&r->arena);
	idc_arena_free(&r->uarena);
	lp_seen_free(&r->seen);
	idc_arena_free(&r->garena);
	lp_seen_free(&r->gseen);
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
	r->store_due = r->finish_due = false;
}

static void req_free(struct lp_req *r)
{
	req_clear(r);
	free(r->name);
	free(r->w);
	free(r);
}

void lp_req_release(struct lp_req *r)
{
	req_free(r);
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
	if (r->kind != LPROV_LOOKUP_ENUMERATE && r->kind != LP_REFRESH && r->kind != LP_POLL) {
		neg_note(ld, r->kind, r->name, r->id, res == LPROV_LOOKUP_NOTFOUND);
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

/* ==== finishing =========================================================== */

static enum lprov_lookup_result answer(const struct lp_req *r)
{
	bool found = false;
	for (size_t i = 0; i < r->users.n && !found; i++) {
		const struct lp_user *u = r->users.v[i];
		found = (r->kind == LPROV_LOOKUP_PWNAM && lp_name_eq(u->name, r->name)) ||
			(r->kind == LPROV_LOOKUP_PWUID && u->uid == r->id);
	}
	for (size_t i = 0; i < r->groups.n && !found; i++) {
		const struct lp_group *g = r->groups.v[i];
		found = (r->kind == LPROV_LOOKUP_GRNAM && lp_name_eq(g->name, r->name)) ||
			(r->kind == LPROV_LOOKUP_GRGID && g->gid == r->id);
	}
	if (r->kind == LPROV_LOOKUP_INITGROUPS)
		found = r->target != NULL;
	if (r->kind == LPROV_LOOKUP_ENUMERATE || r->kind == LP_REFRESH || r->kind == LP_POLL)
		found = true;
	/* An answer cut short (a limit, a lost entry, a search that did not
	 * succeed) proves no absence: NOTFOUND would remove the cached entry
	 * (collect_gone) and be negative-cached. */
	if (!found && r->partial)
		return LPROV_LOOKUP_FAILED;
	return found ? LPROV_LOOKUP_FOUND : LPROV_LOOKUP_NOTFOUND;
}

bool lp_req_retires(const struct lp_req *r)
{
	return r->kind == LPROV_LOOKUP_ENUMERATE || r->kind == LP_POLL;
}

const char *lp_req_user_of(const struct lp_req *r, const char *ndn)
{
	const struct lp_user *u = lp_map_get(&r->udn, ndn);
	if (u)
		return u->name;
	return r->seen.dn.used ? lp_seen_name(&r->seen, lp_seen_hash(r->ld, ndn)) : NULL;
}

const char *lp_req_group_of(const struct lp_req *r, const char *ndn, const struct lp_group *self)
{
	const struct lp_group *g = lp_map_get(&r->gdn, ndn);
	if (g)
		return g != self ? g->name : NULL;
	return r->gseen.dn.used ? lp_seen_name(&r->gseen, lp_seen_hash(r->ld, ndn)) : NULL;
}

size_t lp_req_bytes(const struct lp_req *r)
{
	return r->arena.total + r->uarena.total + lp_seen_bytes(&r->seen) + r->garena.total +
	       lp_seen_bytes(&r->gseen);
}

/* name's folded form's hash (as lp_fold_name folds). */
static uint64_t folded_hash(const struct lprov_domain *ld, const char *name)
{
	char f[CACHE_NAME_MAX + 1];
	size_t n = cache_name_fold(CACHE_NAMES_STORED, name, f);
	if (!n)
		snprintf(f, sizeof(f), "%s", name);
	return lp_seen_hash(ld, f);
}

/* The groups too, once every one held is stored and no member DN was
 * asked for (memq and asked point into them); rdn_names, a cache whose
 * keys are theirs, starts over. */
static void retire_groups(struct lp_req *r)
{
	struct lprov_domain *ld = r->ld;
	if (!lp_req_retires(r) || !r->groups.n || r->asked.used)
		return;
	for (size_t i = 0; i < r->groups.n; i++)
		if (!((const struct lp_group *)r->groups.v[i])->stored)
			return;
	for (size_t i = 0; i < r->groups.n; i++) {
		const struct lp_group *g = r->groups.v[i];
		if (lp_seen_add(&r->gseen, lp_seen_hash(ld, g->ndn), g->name,
				folded_hash(ld, g->name)) < 0)
			return; /* all stay (gseen only ever answers what gdn does not) */
	}
	r->groups.n = r->scanned = 0;
	lp_map_free(&r->gdn);
	lp_map_free(&r->rdn_names);
	idc_arena_free(&r->garena);
	r->paged_bytes = lp_req_bytes(r);
}

/* After a page was stored: its users leave r for r->seen (what the rest
 * of the request asks of them), and their arena is freed. When one cannot
 * be kept there (no memory) they all stay: nothing is lost. */
static void retire_users(struct lp_req *r)
{
	struct lprov_domain *ld = r->ld;
	if (!lp_req_retires(r) || r->users_stored != r->users.n)
		return;
	for (size_t i = 0; i < r->users.n; i++) {
		const struct lp_user *u = r->users.v[i];
		if (lp_seen_add(&r->seen, lp_seen_hash(ld, u->ndn), u->name,
				folded_hash(ld, u->name)) < 0)
			return;
	}
	/* a user that is also a group lives in r->arena, still held by gdn */
	r->users.n = r->users_stored = 0;
	lp_map_free(&r->udn);
	lp_map_free(&r->uname);
	idc_arena_free(&r->uarena);
	r->paged_bytes = lp_req_bytes(r);
}

/* A page's store (page) or the final one is over: logged; the final one
 * completes r. nu: the users it held; t0: when it began. */
void lp_req_stored(struct lp_req *r, bool page, enum lprov_lookup_result res, int rc,
		   const struct idc_diag *d, size_t nu, uint64_t t0)
{
	const char *dom = r->ld->cfg.name;
	double ms = (double)(idc_now_ns() - t0) / 1e6;
	if (page && rc)
		/* Left for the final transaction, which tries again; logged
		 * once per reason by lp_store_done. */
		idc_log(IDC_LOG_DEBUG, "ldap domain %s: storing an enumeration page failed: %s",
			dom, d->msg[0] ? d->msg : idc_strerror(rc));
	else if (page)
		idc_log(IDC_LOG_DEBUG,
			"ldap domain %s: enumeration page: %zu users stored in %.1f ms", dom, nu,
			ms);
	if (page) {
		if (!rc) {
			retire_users(r);
			retire_groups(r);
		}
		return;
	}
	idc_log(IDC_LOG_DEBUG, "ldap domain %s: %zu users, %zu groups stored in %.1f ms", dom,
		r->users.n + r->seen.dn.used, r->groups.n + r->gseen.dn.used, ms);
	if (rc) /* logged by lp_store_done */
		res = LPROV_LOOKUP_FAILED;
	req_complete(r, res);
}

/* Store r here, on the loop's thread, and go on. */
static void store_now(struct lp_req *r, bool page, enum lprov_lookup_result res)
{
	struct idc_diag d = {{0}};
	size_t nu = r->users.n - r->users_stored;
	uint64_t t0 = idc_now_ns();
	int rc = lp_store(r, res, page, &d);
	lp_req_stored(r, page, res, rc, &d, nu, t0);
}

void lp_req_page(struct lp_req *r)
{
	r->unstored = 0;
	r->ld->yield = true;
	if (lp_commit_background(r))
		r->store_due = true; /* lp_commit_kick hands it over */
	else
		store_now(r, true, LPROV_LOOKUP_FOUND);
}

static void finish(struct lp_req *r)
{
	enum lprov_lookup_result res = answer(r);
	if (!lp_commit_background(r))
		return store_now(r, false, res);
	r->finish_due = true;
	r->finish_res = res;
}

/* ==== stepping ======================================================================= */

static struct lp_user *find_target(struct lp_req *r)
{
	for (size_t i = 0; i < r->users.n; i++) {
		struct lp_user *u = r->users.v[i];
		if (lp_name_eq(u->name, r->name))
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
		rc = lp_wave_refresh(r);
		if (!rc && !r->pending)
			return finish(r); /* nothing expired */
	} else if (r->phase == 0 && r->kind == LP_POLL) {
		/* then members like an enumeration; the cache is not verified
		 * against a pass of changes */
		r->phase = 1;
		r->verified = true;
		r->refresh_sent = (int64_t)time(NULL);
		rc = lp_wave_poll(r, false);
	} else if (r->phase == 0) {
		r->phase = 1;
		rc = r->kind == LPROV_LOOKUP_ENUMERATE ? lp_wave_enum(r, false) : lp_wave_find(r);
	} else if (r->phase == 1 && r->kind == LP_POLL) {
		r->phase = 2;
		rc = lp_wave_poll(r, true);
	} else if (r->phase == 1 && r->kind == LPROV_LOOKUP_ENUMERATE) {
		r->phase = 2;
		rc = lp_wave_enum(r, true);
	} else if (r->phase == 1 && r->kind == LPROV_LOOKUP_INITGROUPS) {
		r->phase = 2;
		r->target = find_target(r);
		if (!r->target)
			return finish(r);
		rc = lp_wave_groups_of(r);
	} else {
		r->phase = 2;
		rc = lp_wave_queue_groups(r);
		if (!rc && (r->parentq.n || r->memq.n) && too_deep(r, r->parentq.n != 0))
			return finish(r);
		if (!rc && r->parentq.n)
			rc = lp_wave_parents(r);
		else if (!rc && r->memq.n)
			rc = lp_wave_members(r);
		else if (!rc && !r->pending && !r->verified)
			rc = lp_wave_verify(r);
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

/* ==== lookups ============================================================= */

struct lp_req *lp_req_find(struct lprov_domain *ld, enum lprov_lookup_kind kind, const char *name,
			   uint32_t id)
{
	for (struct lp_req *r = ld->reqs; r; r = r->next)
		if (r->kind == kind && r->id == id && same_name(ld, kind, r->name, name))
			return r;
	return NULL;
}

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
	/* One key per lookup, so that its negative cache slot and coalescing
	 * do not depend on what else a caller passes (confirm passes both). */
	if (by_name)
		id = 0;
	else
		name = NULL;
	if (kind == LPROV_LOOKUP_ENUMERATE)
		id = 0;
	/* min_id/max_id: such an id is never stored; the directory is not asked. */
	if ((kind == LPROV_LOOKUP_PWUID || kind == LPROV_LOOKUP_GRGID) &&
	    !lp_id_in_range(&ld->cfg, id))
		return LPROV_LOOKUP_NOTFOUND;
	/* The feed keeps the cache what the directory holds: no search. */
	if (lp_sync_live(ld))
		return LPROV_LOOKUP_NOTFOUND;
	if (kind != LPROV_LOOKUP_ENUMERATE && neg_hit(ld, kind, name, id)) {
		ld->nneg++;
		return LPROV_LOOKUP_NOTFOUND;
	}
	return lp_req_start(ld, kind, name, id, cb, arg);
}

/* Join an identical request in flight, or start one. */
enum lprov_lookup_result lp_req_start(struct lprov_domain *ld, enum lprov_lookup_kind kind,
				      const char *name, uint32_t id, lprov_lookup_cb cb, void *arg)
{
	struct lp_req *r = lp_req_find(ld, kind, name, id);
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
