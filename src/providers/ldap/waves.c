/*
 * waves: the searches one step of a request sends together (request.c):
 * the entry asked for, an enumeration's pages, the groups of a user, the
 * parents of groups (rfc2307bis), member DNs batched by their RDN's
 * naming attribute, and entries asked for again by name.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "providers/ldap/lprov_int.h"

/* ==== filters ==================================================================== */

int lp_oc_filter(struct idc_buf *b, const struct lprov_domain *ld, bool user, bool group)
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

int lp_wave_find(struct lp_req *r)
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
		rc = lp_oc_filter(&f, ld, user, !user);
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
int lp_wave_enum(struct lp_req *r, bool groups)
{
	struct lprov_domain *ld = r->ld;
	struct idc_buf f = IDC_BUF_INIT;
	int rc = lp_oc_filter(&f, ld, !groups, groups);
	if (!rc)
		rc = send_search(r, LP_S_FIND, groups ? ld->gbase : ld->ubase, &f, true);
	idc_buf_free(&f);
	return rc;
}

/* The users (group false) or groups named in v, LP_MEMBER_BATCH names per
 * search. */
int lp_wave_by_names(struct lp_req *r, bool group, const struct lp_vec *v)
{
	struct lprov_domain *ld = r->ld;
	const char *attr = ld->attr[group ? LPROV_MAP_GROUP_NAME : LPROV_MAP_USER_NAME];
	struct idc_buf f = IDC_BUF_INIT;
	int rc = 0;
	for (size_t i = 0; i < v->n && !rc; i += LP_MEMBER_BATCH) {
		idc_buf_reset(&f);
		rc = idc_buf_printf(&f, "(&");
		if (!rc)
			rc = lp_oc_filter(&f, ld, !group, group);
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

int lp_wave_groups_of(struct lp_req *r)
{
	struct lprov_domain *ld = r->ld;
	struct idc_buf f = IDC_BUF_INIT;
	bool bis = ld->cfg.schema == LPROV_RFC2307BIS;
	int rc = idc_buf_printf(&f, "(&");
	if (!rc)
		rc = lp_oc_filter(&f, ld, false, true);
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
int lp_wave_parents(struct lp_req *r)
{
	struct lprov_domain *ld = r->ld;
	struct idc_buf f = IDC_BUF_INIT;
	int rc = 0;
	for (size_t i = 0; i < r->parentq.n && !rc; i += LP_PARENT_BATCH) {
		idc_buf_reset(&f);
		rc = idc_buf_printf(&f, "(&");
		if (!rc)
			rc = lp_oc_filter(&f, ld, false, true);
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
			rc = lp_oc_filter(&b->f, r->ld, b->user, b->group);
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

int lp_wave_members(struct lp_req *r)
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
int lp_wave_queue_groups(struct lp_req *r)
{
	bool up = r->kind == LPROV_LOOKUP_INITGROUPS && r->ld->cfg.schema == LPROV_RFC2307BIS;
	int rc = 0;
	for (; r->scanned < r->groups.n && !rc; r->scanned++) {
		struct lp_group *g = r->groups.v[r->scanned];
		if (up && g->ancestor)
			rc = lp_vec_push(&r->parentq, (void *)g->ndn);
		for (size_t i = 0; i < g->nmdns && !rc; i++) {
			const char *m = g->mdns[i];
			if (lp_req_user_of(r, m) || lp_req_group_of(r, m, NULL))
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
