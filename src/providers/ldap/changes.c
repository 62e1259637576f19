/*
 * changes: what one commit of a request changed, told to the domain's
 * hook (lprov_domain_set_hook): the records read before the transaction
 * beside those it stored or deleted.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "providers/ldap/lprov_int.h"

/* ==== change reports (lprov_domain_set_hook) ============================================ */

static const char **copy_names(struct idc_arena *a, const char *const *v, size_t n)
{
	const char **out = idc_arena_alloc(a, (n ? n : 1) * sizeof(*out));
	for (size_t i = 0; out && i < n; i++)
		if (!(out[i] = idc_arena_strndup(a, v[i], strlen(v[i]))))
			return NULL;
	return out;
}

static void keep_user(struct lp_track *tr, const struct cache_user *u, struct lp_rec *o)
{
	o->name = idc_arena_strndup(&tr->a, u->name, strlen(u->name));
	o->id = u->uid;
	o->present = o->name != NULL;
	tr->unknown |= !o->present;
}

static void keep_group(struct lp_track *tr, const struct cache_group *g, struct lp_rec *o)
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
void lp_track_begin(struct lp_req *r, struct lp_track *tr, bool page, struct lp_gone_list *gl)
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
		if (!lp_group_due(r, lg, page))
			continue;
		int rc = cache_group_by_name(rd, doms, 1, lg->name, false, &g, NULL);
		if (rc == 0)
			keep_group(tr, &g, &tr->gold[i]);
		else if (rc != -ENOENT)
			tr->unknown = true;
	}
	for (size_t i = 0; i < gl->n && !tr->unknown; i++) {
		struct lp_gone *x = &gl->v[i];
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

static void emit(struct lprov_domain *ld, bool group, struct lp_rec *o, struct lp_rec *n)
{
	if (o->present && n->present && strcmp(o->name, n->name)) {
		/* The same entry under a name in another case: went and came. */
		struct lp_rec none = {0};
		emit(ld, group, o, &none);
		emit(ld, group, &none, n);
		return;
	}
	if (!o->present && !n->present)
		return;
	struct cache_change ch = {.group = group,
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

/* After the commit: tell the hook what changed from tr->told on (the
 * users, the groups, then what is gone), until until_ns has passed (one
 * change at least). Whether all were told. */
bool lp_track_report(struct lp_req *r, struct lp_track *tr, struct lp_gone_list *gl,
		     uint64_t until_ns)
{
	struct lprov_domain *ld = r->ld;
	if (!tr->on)
		return true;
	if (tr->unknown) {
		if (!tr->told++)
			ld->hook(NULL, ld->hook_arg);
		return true;
	}
	size_t nu = r->users.n - r->users_stored, ng = r->groups.n, n = nu + ng + gl->n;
	for (bool said = false; tr->told < n; tr->told++) {
		/* one change at least, then until the time is up */
		if (said && until_ns != UINT64_MAX && idc_now_ns() >= until_ns)
			break;
		size_t i = tr->told;
		struct lp_rec none = {0};
		if (i < nu && tr->unew[i].present)
			emit(ld, false, &tr->uold[i], &tr->unew[i]);
		else if (i >= nu && i < nu + ng && tr->gnew[i - nu].present)
			emit(ld, true, &tr->gold[i - nu], &tr->gnew[i - nu]);
		else if (i >= nu + ng && gl->v[i - nu - ng].deleted)
			emit(ld, gl->v[i - nu - ng].group, &gl->v[i - nu - ng].old, &none);
		else
			continue;
		said = true;
	}
	return tr->told >= n;
}

void lp_track_free(struct lp_track *tr)
{
	free(tr->uold);
	free(tr->unew);
	free(tr->gold);
	free(tr->gnew);
	idc_arena_free(&tr->a);
}
