/*
 * store: a request's answer into the cache, in one transaction (or one per
 * enumeration page), with what the directory no longer has removed.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "providers/ldap/lprov_int.h"

/* ==== the answer into the cache ======================================================= */

/* An id the directory gives two names (a uidNumber of two users, a
 * gidNumber of two groups) is kept for both, as glibc's files module
 * would, but is worth an administrator's look: logged once with the DN
 * being stored and the name already holding it. The search's own error is
 * the transaction's: it flushes the pending index writes, so a full map
 * may show here first (and must grow it). */
static int note_shared_id(struct lprov_domain *ld, struct cache_txn *t, bool group, const char *dn,
			  const char *name, uint32_t id, struct idc_diag *d)
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
	if (rc < 0)
		return idc_diag_set(d, rc,
				    "entry \"%.300s\": cannot look for another holder of %s %u: %s",
				    dn, group ? "gid" : "uid", (unsigned)id, idc_strerror(rc));
	return 0;
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
static int put_group(struct cache_txn *t, struct lp_req *r, struct lp_group *g, struct lp_track *tr,
		     struct lp_rec *out, struct idc_diag *d)
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
		const char *u = lp_req_user_of(r, g->mdns[i]);
		const char *m = u ? NULL : lp_req_group_of(r, g->mdns[i], g);
		if (u)
			names[nn++] = u;
		else if (m)
			nested[ng++] = m;
	}
	struct cache_group cg = {g->name, g->gid, 0, names, nn, nested, ng, g->dn};
	bool changed = false;
	if (!rc)
		rc = cache_put_group(t, r->ld->cfg.name, &cg, &changed, d);
	if (rc == 0 && changed)
		rc = note_shared_id(r->ld, t, true, g->dn, g->name, g->gid, d);
	if (rc == 0 && changed && tr->on && !tr->unknown) {
		/* The strings live in the request's arena; the arrays are copied. */
		out->mem = idc_arena_alloc(&tr->a, (nn ? nn : 1) * sizeof(*out->mem));
		out->nested = idc_arena_alloc(&tr->a, (ng ? ng : 1) * sizeof(*out->nested));
		if (out->mem && out->nested) {
			if (nn)
				memcpy(out->mem, names, nn * sizeof(*names));
			if (ng)
				memcpy(out->nested, nested, ng * sizeof(*nested));
			*out =
			    (struct lp_rec){true, g->name, g->gid, out->mem, out->nested, nn, ng};
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
bool lp_name_eq(const char *a, const char *b)
{
	return cache_name_equal(CACHE_NAMES_STORED, a, b);
}

/* Whether every member DN of g is a user or group of this answer. */
static bool members_known(const struct lp_req *r, const struct lp_group *g)
{
	for (size_t i = 0; i < g->nmdns; i++)
		if (!lp_req_user_of(r, g->mdns[i]) && !lp_req_group_of(r, g->mdns[i], NULL))
			return false;
	return true;
}

/* Whether g goes into this transaction: not committed yet, and for a page
 * of an enumeration only when its members are known (the others wait for
 * the final transaction, after the member searches). */
bool lp_group_due(const struct lp_req *r, const struct lp_group *g, bool page)
{
	return !g->stored && (!page || members_known(r, g));
}

/* name as the cache keys it (CACHE_NAMES_STORED), in a: two spellings the
 * cache holds as one entry fold alike, so an answer in the directory's
 * spelling is not taken for the cached name's absence. */
char *lp_fold_name(struct idc_arena *a, const char *name)
{
	char f[CACHE_NAME_MAX + 1];
	size_t n = cache_name_fold(CACHE_NAMES_STORED, name, f);
	return idc_arena_strndup(a, n ? f : name, n ? n : strlen(name));
}

/* Folded names (lp_fold_name) of the users or groups of the answer. */
int lp_answered_names(struct lp_req *r, bool group, struct lp_map *out)
{
	const struct lp_vec *v = group ? &r->groups : &r->users;
	for (size_t i = 0; i < v->n; i++) {
		const char *name = group ? ((const struct lp_group *)v->v[i])->name
					 : ((const struct lp_user *)v->v[i])->name;
		char *f = lp_fold_name(&r->arena, name);
		if (!f || lp_map_put(out, f, v->v[i]) < 0)
			return -ENOMEM;
	}
	return 0;
}

static int gone_push(struct lp_gone_list *gl, size_t cap, const char *name, bool group)
{
	if (!gl->v && !(gl->v = calloc(cap, sizeof(*gl->v))))
		return -ENOMEM;
	gl->v[gl->n++] = (struct lp_gone){.name = name, .group = group};
	return 0;
}

/* The names of one kind a refresh asked for, its answer lacks, and the
 * cache holds stored before the refresh's searches went out (one stored
 * since, by a lookup of its own, waits for the next refresh). A name the
 * cache cannot be read for is kept. */
static int refresh_gone(struct lp_req *r, struct cache_reader *rd, bool group,
			const struct lp_map *answered, struct lp_gone_list *gl, size_t cap)
{
	const char *doms[] = {r->ld->cfg.name};
	const struct lp_vec *asked = group ? &r->rg : &r->ru;
	int rc = 0;
	for (size_t i = 0; i < asked->n && !rc; i++) {
		const char *name = asked->v[i];
		char *f = lp_fold_name(&r->arena, name);
		if (!f)
			return -ENOMEM;
		if (lp_map_get(answered, f) ||
		    lp_seen_has_name(group ? &r->gseen : &r->seen, lp_seen_hash(r->ld, f)))
			continue; /* answered (seen: by a page let go of) */
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

/* What lp_store() removes: for a lookup by name that found nothing, that
 * name; for a refresh or a verify wave whose every search completed
 * (LDAP_SUCCESS, nothing lost to memory: !r->partial), the names it asked
 * for that the directory answered without. A failed or timed-out search never gets here (the
 * request is restarted or completed offline without a store). */
static int collect_gone(struct lp_req *r, enum lprov_lookup_result res, bool page,
			struct lp_gone_list *gl)
{
	memset(gl, 0, sizeof(*gl));
	if (page)
		return 0;
	if (r->kind == LP_SYNC)
		return lp_sync_gone(r, gl);
	if (res == LPROV_LOOKUP_NOTFOUND &&
	    (r->kind == LPROV_LOOKUP_PWNAM || r->kind == LPROV_LOOKUP_GRNAM))
		return gone_push(gl, 1, r->name, r->kind == LPROV_LOOKUP_GRNAM);
	if (r->partial || (!r->ru.n && !r->rg.n))
		return 0; /* neither a refresh nor a verify wave asked by name */
	struct lp_map unames = {0}, gnames = {0};
	int rc = lp_answered_names(r, false, &unames);
	if (!rc)
		rc = lp_answered_names(r, true, &gnames);
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
 * error); marks those removed for lp_track_report. */
static int del_gone(struct cache_txn *t, struct lprov_domain *ld, struct lp_gone_list *gl,
		    struct idc_diag *d)
{
	for (size_t i = 0; i < gl->n; i++) {
		struct lp_gone *x = &gl->v[i];
		int rc = x->group ? cache_del_group(t, ld->cfg.name, x->name, d)
				  : cache_del_user(t, ld->cfg.name, x->name, d);
		if (rc && rc != -ENOENT)
			return rc;
		x->deleted = rc == 0;
	}
	return 0;
}

/* The user's SSH keys, stored beside it (the maps do not hold them: no
 * change to report). */
static int put_keys(struct cache_txn *t, struct lprov_domain *ld, const struct lp_user *u,
		    struct idc_diag *d)
{
	return cache_put_user_keys(t, ld->cfg.name, u->name, u->keys, u->nkeys, NULL, d);
}

/* The users and groups of r not committed yet, into t; tr (when on) learns
 * what was stored for each changed record. */
static int put_entries(struct cache_txn *t, struct lp_req *r, struct lp_track *tr, bool page,
		       struct idc_diag *d)
{
	struct lprov_domain *ld = r->ld;
	int rc = 0;
	for (size_t i = r->users_stored; i < r->users.n && !rc; i++) {
		const struct lp_user *u = r->users.v[i];
		struct cache_user cu = {u->name, u->uid,   u->gid, u->gecos,
					u->dir,  u->shell, 0,      u->dn};
		cu.subuid = u->subuid;
		cu.subgid = u->subgid;
		bool changed = false;
		int put = cache_put_user(t, ld->cfg.name, &cu, &changed, d);
		rc = soft(ld, put, u->dn, d);
		if (!put)
			rc = soft(ld, put_keys(t, ld, u, d), u->dn, d);
		if (!rc && changed)
			rc = note_shared_id(ld, t, false, u->dn, u->name, u->uid, d);
		if (!rc && changed && tr->on && !tr->unknown)
			tr->unew[i - r->users_stored] =
			    (struct lp_rec){.present = true, .name = u->name, .id = u->uid};
	}
	for (size_t i = 0; i < r->groups.n && !rc; i++) {
		struct lp_group *g = r->groups.v[i];
		if (lp_group_due(r, g, page))
			rc = soft(ld, put_group(t, r, g, tr, tr->on ? &tr->gnew[i] : NULL, d),
				  g->dn, d);
	}
	return rc;
}

/* Say how many entries a committed store removed (del_gone). */
static void log_gone(const struct lp_req *r, const struct lp_gone_list *gl)
{
	const char *dom = r->ld->cfg.name;
	size_t nu = 0, ng = 0;
	for (size_t i = 0; i < gl->n; i++)
		*(gl->v[i].group ? &ng : &nu) += gl->v[i].deleted;
	if (r->kind == LP_REFRESH && nu + ng)
		idc_log(IDC_LOG_INFO,
			"ldap domain %s: refresh: %zu users and %zu groups no longer in the "
			"directory removed from the cache",
			dom, nu, ng);
	else if (nu + ng)
		idc_log(IDC_LOG_INFO,
			"ldap domain %s: %zu users and %zu groups no longer in the directory under "
			"their cached names (removed or renamed) removed from the cache",
			dom, nu, ng);
}

/* The writes of lp_store's transaction t, then its commit; aborted on an
 * error. */
static int write_txn(struct lp_req *r, struct cache_txn *t, struct lp_track *tr, bool page,
		     struct lp_gone_list *gl, bool mark, struct idc_diag *d)
{
	struct lprov_domain *ld = r->ld;
	/* what the sync feed stores stays true until it says otherwise */
	int rc = cache_domain_ensure(t, ld->cfg.name,
				     r->kind == LP_SYNC ? 0 : ld->cfg.entry_cache_timeout, d);
	if (!rc)
		rc = put_entries(t, r, tr, page, d);
	if (!rc)
		rc = del_gone(t, ld, gl, d);
	if (rc == -ENOENT)
		rc = 0;
	if (!rc && r->kind == LP_SYNC)
		rc = lp_sync_store_state(r, t, d);
	if (!rc && mark)
		rc = lp_poll_store_state(r, t, d);
	if (rc == -ENOENT)
		rc = 0;
	if (rc) {
		cache_txn_abort(t);
		return rc;
	}
	r->written_ns = idc_now_ns();
	rc = cache_txn_commit(t, d);
	r->committed_ns = idc_now_ns();
	return rc;
}

/* lp_store could not write: the one place that says so. Logged once per
 * reason (a full disk fails every page alike), kept for `idcache status`
 * with the request it failed. */
static void store_failed(struct lp_req *r, bool page, int rc, const struct idc_diag *d)
{
	struct lprov_domain *ld = r->ld;
	const char *why = d->msg[0] ? d->msg : idc_strerror(rc);
	char what[96];
	lp_req_describe(r, what, sizeof(what));
	snprintf(ld->store_error, sizeof(ld->store_error), "%s%s: %.256s", what,
		 page ? " (a page)" : "", why);
	ld->store_error_time = (int64_t)time(NULL);
	ld->nstore_failures++;
	lp_log_once(ld, IDC_LOG_ERR,
		    "ldap domain %s: the cache refused what the directory sent: %s", ld->cfg.name,
		    why);
}

/* Groups of r that go into this transaction. */
static size_t groups_due(const struct lp_req *r, bool page)
{
	size_t n = 0;
	for (size_t i = 0; i < r->groups.n; i++)
		n += lp_group_due(r, r->groups.v[i], page);
	return n;
}

void lp_store_init(struct lp_store_job *j, struct lp_req *r, enum lprov_lookup_result res,
		   bool page)
{
	memset(j, 0, sizeof(*j));
	j->r = r;
	j->res = res;
	j->page = page;
	/* a complete poll pass stores its mark even when nothing else changed */
	j->mark = r->kind == LP_POLL && !page && !r->partial;
}

/* Whether the store has nothing to write (an unchanged entry still gets
 * its timestamps; an enumeration's page with nothing new does not). */
static bool nothing_to_store(const struct lp_store_job *j)
{
	const struct lp_req *r = j->r;
	bool enumerating = j->page || r->kind == LPROV_LOOKUP_ENUMERATE || r->kind == LP_REFRESH ||
			   r->kind == LP_POLL;
	return enumerating && r->users_stored == r->users.n && !groups_due(r, j->page) &&
	       !j->gl.n && !j->mark;
}

void lp_store_run(struct lp_store_job *j)
{
	struct lp_req *r = j->r;
	lp_track_free(&j->tr); /* of an attempt that found the map full */
	free(j->gl.v);
	memset(&j->gl, 0, sizeof(j->gl));
	j->wrote = false;
	j->rc = 0;
	if (j->page && nothing_to_store(j))
		return; /* a page removes nothing: no need to read the cache */
	/* The cache is read (what is gone, the records before) inside the
	 * transaction's window: a reader begun now sees the state before it,
	 * and no other writer of this process can grow the map meanwhile
	 * (cache_grow waits for the transaction). */
	struct cache_txn *t;
	/* a feed's batch goes with its cookie, a poll pass's last page with
	 * its mark: an OS crash that undoes one makes the server send it again */
	bool resent = r->kind == LP_SYNC || r->kind == LP_POLL;
	int rc = cache_txn_begin_flags(r->ld->cache, resent ? CACHE_TXN_RESENT : 0, &t, &j->d);
	if (rc) {
		j->rc = rc;
		return;
	}
	rc = collect_gone(r, j->res, j->page, &j->gl);
	if (rc || nothing_to_store(j)) {
		cache_txn_abort(t);
		j->rc = rc;
		return;
	}
	lp_track_begin(r, &j->tr, j->page, &j->gl);
	j->rc = write_txn(r, t, &j->tr, j->page, &j->gl, j->mark, &j->d);
	j->wrote = j->rc == 0;
}

bool lp_store_report(struct lp_store_job *j, uint64_t until_ns)
{
	return !j->wrote || lp_track_report(j->r, &j->tr, &j->gl, until_ns);
}

int lp_store_done(struct lp_store_job *j)
{
	struct lp_req *r = j->r;
	if (j->wrote) {
		r->ld->ncommits++;
		if (j->mark)
			lp_poll_committed(r);
		lp_store_report(j, UINT64_MAX);
		log_gone(r, &j->gl);
	}
	if (!j->rc) {
		for (size_t i = r->users_stored; i < r->users.n; i++) {
			const struct lp_user *u = r->users.v[i];
			lp_neg_forget(r->ld, false, u->name, u->uid);
		}
		r->users_stored = r->users.n;
		for (size_t i = 0; i < r->groups.n; i++) {
			struct lp_group *g = r->groups.v[i];
			if (!lp_group_due(r, g, j->page))
				continue;
			g->stored = true;
			lp_neg_forget(r->ld, true, g->name, g->gid);
		}
	} else {
		store_failed(r, j->page, j->rc, &j->d);
	}
	lp_track_free(&j->tr);
	free(j->gl.v);
	memset(&j->gl, 0, sizeof(j->gl));
	return j->rc;
}

/* What was found and not yet committed, in one transaction; what the
 * directory no longer has is removed (collect_gone). page: an
 * enumeration's intermediate commit (users so far, groups whose members
 * are known). An unchanged entry writes only the timestamps db
 * (cache_put_user/cache_put_group). */
int lp_store(struct lp_req *r, enum lprov_lookup_result res, bool page, struct idc_diag *d)
{
	struct lp_store_job j;
	lp_store_init(&j, r, res, page);
	/* A full map fails the whole transaction: grow it (the cache doubles
	 * the map) and write everything again, as the files provider does. */
	for (;; j.tries++) {
		lp_store_run(&j);
		if (j.rc != IDC_EMAPFULL || j.tries == LP_GROW_TRIES ||
		    cache_grow(r->ld->cache, &j.d) != 0)
			break;
	}
	int rc = lp_store_done(&j);
	*d = j.d;
	return rc;
}
