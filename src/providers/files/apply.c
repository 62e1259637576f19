/*
 * files provider: a domain's files, the last applied snapshot, and the diff
 * that brings the cache from the old snapshot to a new parse in one
 * transaction. Unchanged records are not written at all, so one added user
 * costs one put however long the file is. When only a few lines changed,
 * partial.c parses and diffs those alone and applies its plan here.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "files_int.h"

/* Orders are spaced so that a line inserted or removed leaves the orders
 * of the other records as they were (no rewrite of every later record);
 * only when a gap is used up is everything renumbered. */
#define ORDER_GAP (1ull << 16)

#define ABSENT_HASH 0x616273656e74ull /* content hash of a missing file */

/* ==== domain ==================================================================== */

static void free_paths(char **p, size_t n)
{
	for (size_t i = 0; p && i < n; i++)
		free(p[i]);
	free(p);
}

int files_domain_new(const struct files_domain_config *cfg, struct files_domain **out)
{
	size_t n = cfg->npasswd + cfg->ngroup;
	if (!cfg->name || !*cfg->name || n == 0)
		return -EINVAL;
	struct files_domain *fd = calloc(1, sizeof(*fd));
	if (!fd)
		return -ENOMEM;
	fd->name = strdup(cfg->name);
	fd->paths = calloc(n, sizeof(*fd->paths));
	fd->applied = calloc(n, sizeof(*fd->applied));
	fd->logged = calloc(n, sizeof(*fd->logged));
	fd->raw = calloc(n, sizeof(*fd->raw));
	fd->rawlen = calloc(n, sizeof(*fd->rawlen));
	bool ok = fd->name && fd->paths && fd->applied && fd->logged && fd->raw && fd->rawlen;
	for (size_t i = 0; ok && i < n; i++) {
		const char *p =
		    i < cfg->npasswd ? cfg->passwd_files[i] : cfg->group_files[i - cfg->npasswd];
		ok = p && (fd->paths[i] = strdup(p)) != NULL;
	}
	fd->npasswd = cfg->npasswd;
	fd->ngroup = cfg->ngroup;
	fd->ttl = cfg->ttl;
	if (!ok) {
		files_domain_free(fd);
		return -ENOMEM;
	}
	*out = fd;
	return 0;
}

void files_domain_free(struct files_domain *fd)
{
	if (!fd)
		return;
	free_paths(fd->raw, fd->raw ? fd->npasswd + fd->ngroup : 0);
	free(fd->rawlen);
	free_paths(fd->paths, fd->npasswd + fd->ngroup);
	free(fd->applied);
	free(fd->logged);
	files_snapshot_free(fd->snap);
	free(fd->name);
	free(fd);
}

size_t files_domain_paths(const struct files_domain *fd, const char *const **paths)
{
	*paths = (const char *const *)fd->paths;
	return fd->npasswd + fd->ngroup;
}

void files_domain_invalidate(struct files_domain *fd)
{
	files_snapshot_free(fd->snap);
	fd->snap = NULL;
}

const struct files_snapshot *files_domain_snapshot(const struct files_domain *fd)
{
	return fd->snap;
}

void files_domain_set_partial(struct files_domain *fd, bool on)
{
	fd->no_partial = !on;
}

void files_domain_set_hook(struct files_domain *fd, cache_change_fn fn, void *arg)
{
	fd->hook = fn;
	fd->hook_arg = fn ? arg : NULL;
}

/* ==== reading the files ============================================================ */

static void loaded_free(struct files_loaded *l, size_t n)
{
	for (size_t i = 0; l->buf && i < n; i++)
		free(l->buf[i]);
	free(l->buf);
	free(l->len);
	free(l->hash);
}

/* Read every file. A missing one is empty; any other failure fails. */
static int load_files(struct files_domain *fd, struct files_loaded *l, struct idc_diag *d)
{
	size_t n = fd->npasswd + fd->ngroup;
	l->buf = calloc(n, sizeof(*l->buf));
	l->len = calloc(n, sizeof(*l->len));
	l->hash = calloc(n, sizeof(*l->hash));
	if (!l->buf || !l->len || !l->hash)
		return idc_diag_set(d, -ENOMEM, "files domain %s: out of memory", fd->name);
	for (size_t i = 0; i < n; i++) {
		int rc = files_read(fd->paths[i], &l->buf[i], &l->len[i]);
		if (rc == -ENOENT) {
			l->hash[i] = ABSENT_HASH;
			if (fd->logged[i] != ABSENT_HASH)
				idc_log(IDC_LOG_INFO, "%s: absent, read as empty", fd->paths[i]);
			continue;
		}
		if (rc)
			return idc_diag_set(d, rc, "%s: %s; keeping the last data", fd->paths[i],
					    idc_strerror(rc));
		l->hash[i] = idc_hash64(l->buf[i], l->len[i], l->len[i]);
	}
	return 0;
}

/* Parse the loaded files into s (taking the buffers). Lines are logged only
 * for a file whose content was not parsed before. */
static int parse_files(struct files_domain *fd, struct files_loaded *l, struct files_snapshot *s)
{
	for (size_t i = 0; i < fd->npasswd + fd->ngroup; i++) {
		if (!l->buf[i])
			continue;
		bool log_bad = l->hash[i] != fd->logged[i];
		bool pw = i < fd->npasswd;
		uint32_t file = (uint32_t)(pw ? i : i - fd->npasswd);
		/* The parse writes NULs into its buffer; the file's bytes stay
		 * in l->buf for the next refresh to compare against. */
		char *buf = malloc(l->len[i] + 1);
		if (!buf)
			return -ENOMEM;
		memcpy(buf, l->buf[i], l->len[i] + 1);
		int rc =
		    pw ? files_snapshot_take_passwd(s, fd->paths[i], file, buf, l->len[i], log_bad)
		       : files_snapshot_take_group(s, fd->paths[i], file, buf, l->len[i], log_bad);
		if (rc)
			return rc;
	}
	for (size_t i = 0; i < fd->npasswd + fd->ngroup; i++)
		fd->logged[i] = l->hash[i];
	return 0;
}

static bool unchanged_files(const struct files_domain *fd, const struct files_loaded *l)
{
	if (!fd->snap)
		return false;
	for (size_t i = 0; i < fd->npasswd + fd->ngroup; i++)
		if (l->hash[i] != fd->applied[i])
			return false;
	return true;
}

/* ==== the cache's view, when no snapshot is kept ======================================= */

static int push_user_cb(const struct cache_user *u, void *arg)
{
	return files_snapshot_push_user(arg, u);
}

static int push_group_cb(const struct cache_group *g, void *arg)
{
	return files_snapshot_push_group(arg, g);
}

/* What the cache holds for the domain, as a snapshot (empty if nothing). */
static int snapshot_from_cache(struct cache *c, const char *domain, struct files_snapshot **out,
			       struct idc_diag *d)
{
	struct files_snapshot *s = files_snapshot_new();
	struct cache_reader *r = NULL;
	int rc = s ? cache_reader_begin(c, &r) : -ENOMEM;
	if (rc == 0) {
		rc = cache_enum_users(r, domain, push_user_cb, s);
		if (rc == 0 || rc == -ENOENT)
			rc = cache_enum_groups(r, domain, push_group_cb, s);
		if (rc == -ENOENT)
			rc = 0; /* the domain is not in the cache yet */
		cache_reader_end(r);
	}
	if (rc) {
		files_snapshot_free(s);
		return idc_diag_set(d, rc, "files domain %s: reading the cache: %s", domain,
				    idc_strerror(rc));
	}
	*out = s;
	return 0;
}

/* ==== diff ======================================================================== */

/* order[i] holds the old order of record i or 0; keep the old orders that
 * still increase and give the others orders between their neighbours.
 * Returns true when there was no room and everything was renumbered. */
bool files_assign_orders(uint64_t *order, size_t n)
{
	uint64_t last = 0;
	for (size_t i = 0; i < n; i++) {
		if (order[i] > last)
			last = order[i];
		else
			order[i] = 0;
	}
	uint64_t prev = 0;
	for (size_t i = 0; i < n;) {
		if (order[i]) {
			prev = order[i++];
			continue;
		}
		size_t j = i;
		while (j < n && !order[j])
			j++;
		uint64_t k = j - i, step = ORDER_GAP;
		if (j < n)
			step = (order[j] - prev) / (k + 1);
		else if (prev > UINT64_MAX - ORDER_GAP * (k + 1))
			step = 0;
		if (step == 0) { /* no room: renumber everything */
			for (size_t m = 0; m < n; m++)
				order[m] = (m + 1) * ORDER_GAP;
			return true;
		}
		for (size_t m = 0; m < k; m++)
			order[i + m] = prev + step * (m + 1);
		prev = order[j - 1];
		i = j;
	}
	return false;
}

void files_plan_free(struct files_plan *p)
{
	free(p->put_u);
	free(p->del_u);
	free(p->put_g);
	free(p->del_g);
}

/* Per kind: match new records to old ones by exact name, assign orders,
 * and list what to put and what to delete. */
struct kind_ops {
	size_t nnew, nold;
	long (*find_old)(const struct files_snapshot *old, const struct files_snapshot *ns,
			 size_t i);
	uint64_t *(*order)(struct files_snapshot *s, size_t i);
	uint64_t (*hash)(const struct files_snapshot *s, size_t i);
	bool renumber; /* give every record a new order */
};

static long user_find(const struct files_snapshot *old, const struct files_snapshot *ns, size_t i)
{
	return files_snapshot_find_user(old, ns->users[i].name, ns->users[i].key);
}

static long group_find(const struct files_snapshot *old, const struct files_snapshot *ns, size_t i)
{
	return files_snapshot_find_group(old, ns->groups[i].name, ns->groups[i].key);
}

static uint64_t *user_order(struct files_snapshot *s, size_t i)
{
	return &s->users[i].order;
}

static uint64_t *group_order(struct files_snapshot *s, size_t i)
{
	return &s->groups[i].order;
}

static uint64_t user_hash(const struct files_snapshot *s, size_t i)
{
	return s->users[i].hash;
}

static uint64_t group_hash(const struct files_snapshot *s, size_t i)
{
	return s->groups[i].hash;
}

static int diff_kind(const struct kind_ops *k, struct files_snapshot *old,
		     struct files_snapshot *ns, bool full, size_t **put, size_t *nput, size_t **del,
		     size_t *ndel, struct files_kind_stats *st)
{
	long *match = malloc((k->nnew + 1) * sizeof(*match));
	bool *seen = calloc(k->nold + 1, sizeof(*seen));
	uint64_t *order = malloc((k->nnew + 1) * sizeof(*order));
	*put = malloc((k->nnew + 1) * sizeof(**put));
	*del = malloc((k->nold + 1) * sizeof(**del));
	int rc = match && seen && order && *put && *del ? 0 : -ENOMEM;
	for (size_t i = 0; rc == 0 && i < k->nnew; i++) {
		match[i] = k->find_old(old, ns, i);
		order[i] = match[i] >= 0 && !k->renumber ? *k->order(old, (size_t)match[i]) : 0;
		if (match[i] >= 0)
			seen[match[i]] = true;
	}
	if (rc == 0)
		(void)files_assign_orders(order, k->nnew);
	*nput = *ndel = 0;
	for (size_t i = 0; rc == 0 && i < k->nnew; i++) {
		*k->order(ns, i) = order[i];
		bool same = match[i] >= 0 && k->hash(old, (size_t)match[i]) == k->hash(ns, i);
		bool moved = match[i] >= 0 && *k->order(old, (size_t)match[i]) != order[i];
		st->added += match[i] < 0;
		st->changed += match[i] >= 0 && (!same || moved);
		st->unchanged += same && !moved;
		if (full || !same || moved)
			(*put)[(*nput)++] = i;
	}
	for (size_t j = 0; rc == 0 && j < k->nold; j++)
		if (!seen[j])
			(*del)[(*ndel)++] = j;
	st->removed = *ndel;
	st->total = k->nnew;
	free(match);
	free(seen);
	free(order);
	return rc;
}

/* ---- extra records ----------------------------------------------------------------
 * Few files repeat a name, so extra records are not diffed one by one:
 * when any differs (content or order), all are replaced. Each takes the
 * order just after the named record before it in the file, so lookups by
 * id still find the first line holding the id. */

static size_t extra_count(const struct files_snapshot *s, int k)
{
	return k ? s->nxgroups : s->nxusers;
}

static size_t extra_prev(const struct files_snapshot *s, int k, size_t i)
{
	return k ? s->xgroups[i].prev : s->xusers[i].prev;
}

static uint64_t *extra_order(struct files_snapshot *s, int k, size_t i)
{
	return k ? &s->xgroups[i].order : &s->xusers[i].order;
}

static uint64_t extra_hash(const struct files_snapshot *s, int k, size_t i)
{
	/* order included: a record that moved must be stored again */
	uint64_t order = k ? s->xgroups[i].order : s->xusers[i].order;
	return (k ? s->xgroups[i].hash : s->xusers[i].hash) ^ idc_hash64(&order, 8, 0);
}

static uint64_t named_order(struct files_snapshot *s, int k, size_t i)
{
	return k ? s->groups[i].order : s->users[i].order;
}

/* Orders for the extra records of kind k, between the named records' (set
 * already). false when a gap is too small; with squeeze they are then
 * put as close as the gap allows. */
static bool extra_orders(struct files_snapshot *s, int k, bool squeeze)
{
	size_t nnamed = k ? s->ngroups : s->nusers, run = SIZE_MAX;
	uint64_t step = 0;
	for (size_t i = 0; i < extra_count(s, k); i++) {
		size_t prev = extra_prev(s, k, i);
		uint64_t lo = prev ? named_order(s, k, prev - 1) : 0;
		uint64_t hi = prev < nnamed ? named_order(s, k, prev) : UINT64_MAX;
		step = prev == run ? step + 1 : 1;
		run = prev;
		if (hi - lo <= step && !squeeze)
			return false;
		*extra_order(s, k, i) = hi - lo > step ? lo + step : hi - 1;
	}
	return true;
}

static bool extras_differ(const struct files_snapshot *old, const struct files_snapshot *ns, int k)
{
	if (extra_count(old, k) != extra_count(ns, k))
		return true;
	for (size_t i = 0; i < extra_count(ns, k); i++)
		if (extra_hash(old, k, i) != extra_hash(ns, k, i))
			return true;
	return false;
}

/* One kind's diff, its named records renumbered when their extras need
 * room. */
static int diff_with_extras(struct kind_ops *ko, int k, struct files_snapshot *old,
			    struct files_snapshot *ns, bool full, size_t **put, size_t *nput,
			    size_t **del, size_t *ndel, struct files_kind_stats *st)
{
	int rc = diff_kind(ko, old, ns, full, put, nput, del, ndel, st);
	if (rc || extra_orders(ns, k, false))
		return rc;
	free(*put);
	free(*del);
	*st = (struct files_kind_stats){0};
	ko->renumber = true;
	rc = diff_kind(ko, old, ns, full, put, nput, del, ndel, st);
	if (rc == 0)
		extra_orders(ns, k, true);
	return rc;
}

static int make_plan(struct files_snapshot *old, struct files_snapshot *ns, bool full,
		     struct files_plan *p, struct files_refresh_stats *st)
{
	struct kind_ops u = {ns->nusers, old->nusers, user_find, user_order, user_hash, false};
	struct kind_ops g = {ns->ngroups, old->ngroups, group_find, group_order, group_hash, false};
	int rc = diff_with_extras(&u, 0, old, ns, full, &p->put_u, &p->nput_u, &p->del_u,
				  &p->ndel_u, &st->users);
	if (rc == 0)
		rc = diff_with_extras(&g, 1, old, ns, full, &p->put_g, &p->nput_g, &p->del_g,
				      &p->ndel_g, &st->groups);
	for (int k = 0; k < 2 && rc == 0; k++)
		p->extras[k] = extras_differ(old, ns, k);
	return rc;
}

/* ==== apply ======================================================================== */

static int put_user(struct cache_txn *t, const struct files_domain *fd, const struct files_user *u,
		    bool extra, struct idc_diag *d)
{
	struct cache_user cu = {u->name,  u->uid,   u->gid, u->gecos,  u->dir,
				u->shell, u->order, NULL,   u->passwd, extra};
	bool changed;
	int rc = cache_put_user(t, fd->name, &cu, &changed, d);
	if (rc)
		idc_diag_prefix(d, "%s:%u: user '%s': ", fd->paths[u->file], u->line, u->name);
	return rc;
}

static int put_group(struct cache_txn *t, const struct files_domain *fd,
		     const struct files_snapshot *s, const struct files_group *g, bool extra,
		     struct idc_diag *d)
{
	struct cache_group cg = {
	    g->name,     g->gid, g->order, files_snapshot_members(s, g->mem_first),
	    g->nmembers, NULL,   0,        NULL,
	    g->passwd,   extra};
	bool changed;
	int rc = cache_put_group(t, fd->name, &cg, &changed, d);
	if (rc)
		idc_diag_prefix(d, "%s:%u: group '%s': ", fd->paths[fd->npasswd + g->file], g->line,
				g->name);
	return rc;
}

static int ok_if_absent(int rc)
{
	return rc == -ENOENT ? 0 : rc;
}

/* Every extra record of a kind the plan replaces: the old ones go first
 * (a new one may take an old one's order). */
static int write_extras(struct cache_txn *t, const struct files_domain *fd,
			const struct files_snapshot *old, const struct files_snapshot *ns,
			const struct files_plan *p, struct idc_diag *d)
{
	int rc = 0;
	for (size_t i = 0; p->extras[0] && rc == 0 && i < old->nxusers; i++)
		rc = ok_if_absent(cache_del_extra_user(t, fd->name, old->xusers[i].order, d));
	for (size_t i = 0; p->extras[1] && rc == 0 && i < old->nxgroups; i++)
		rc = ok_if_absent(cache_del_extra_group(t, fd->name, old->xgroups[i].order, d));
	for (size_t i = 0; p->extras[0] && rc == 0 && i < ns->nxusers; i++)
		rc = put_user(t, fd, &ns->xusers[i], true, d);
	for (size_t i = 0; p->extras[1] && rc == 0 && i < ns->nxgroups; i++)
		rc = put_group(t, fd, ns, &ns->xgroups[i], true, d);
	return rc;
}

/* The plan's writes, deletions first (a name re-cased in the file is a
 * delete and an add). */
static int write_plan(struct cache_txn *t, const struct files_domain *fd,
		      const struct files_snapshot *old, const struct files_snapshot *ns,
		      const struct files_plan *p, struct idc_diag *d)
{
	int rc = cache_domain_ensure(t, fd->name, fd->ttl, d);
	for (size_t i = 0; rc == 0 && i < p->ndel_u; i++)
		rc = ok_if_absent(cache_del_user(t, fd->name, old->users[p->del_u[i]].name, d));
	for (size_t i = 0; rc == 0 && i < p->ndel_g; i++)
		rc = ok_if_absent(cache_del_group(t, fd->name, old->groups[p->del_g[i]].name, d));
	for (size_t i = 0; rc == 0 && i < p->nput_u; i++)
		rc = put_user(t, fd, &ns->users[p->put_u[i]], false, d);
	for (size_t i = 0; rc == 0 && i < p->nput_g; i++)
		rc = put_group(t, fd, ns, &ns->groups[p->put_g[i]], false, d);
	return rc ? rc : write_extras(t, fd, old, ns, p, d);
}

int files_apply_plan(struct files_domain *fd, struct cache *c, const struct files_snapshot *old,
		     const struct files_snapshot *ns, const struct files_plan *p,
		     struct idc_diag *d)
{
	int rc;
	/* A full map fails the whole transaction: grow it and write the plan
	 * again (the cache doubles the map each time). */
	for (int tries = 0;; tries++) {
		struct cache_txn *t;
		rc = cache_txn_begin(c, &t, d);
		if (rc == 0) {
			rc = write_plan(t, fd, old, ns, p, d);
			if (rc == 0)
				rc = cache_txn_commit(t, d);
			else
				cache_txn_abort(t);
		}
		if (rc != IDC_EMAPFULL || tries == 8 || cache_grow(c, d) != 0)
			break;
	}
	if (rc)
		idc_diag_prefix(d, "files domain %s: nothing applied: ", fd->name);
	return rc;
}

/* ==== why a name is not served ======================================================= */

/* Whether the line at byte off of raw[0..len) has name in its name field
 * (after leading white space, up to ':' or the end of the line). */
static bool line_named(const char *raw, size_t len, uint32_t off, const char *name, size_t *llen)
{
	if (off >= len)
		return false;
	const char *p = raw + off, *nl = memchr(p, '\n', len - off);
	const char *end = nl ? nl : raw + len;
	*llen = (size_t)(end - p);
	while (p < end && (*p == ' ' || (*p >= '\t' && *p <= '\r')))
		p++;
	size_t n = strlen(name);
	return (size_t)(end - p) >= n && memcmp(p, name, n) == 0 && (p + n == end || p[n] == ':');
}

/* What the parser said of the line (a copy is parsed: it writes NULs). */
static const char *skip_reason(const char *line, size_t len, bool group)
{
	char *copy = malloc(len + 1);
	if (!copy)
		return "skipped";
	memcpy(copy, line, len);
	copy[len] = '\0';
	const char *why = NULL;
	struct files_pwent pe;
	struct files_grent ge;
	enum files_line r = group ? files_parse_grline(copy, len, &ge, &why)
				  : files_parse_pwline(copy, len, &pe, &why);
	free(copy);
	if (r == FILES_LINE_BAD && why)
		return why;
	return group ? "invalid group name" : "invalid user name";
}

int files_domain_why(const struct files_domain *fd, bool group, const char *name, char *out,
		     size_t cap)
{
	const struct files_snapshot *s = fd->snap;
	const struct files_skips *sk = s ? (group ? &s->gskip : &s->uskip) : NULL;
	for (size_t i = 0; sk && i < sk->n; i++) {
		const struct files_skip *e = &sk->v[i];
		size_t pi = group ? fd->npasswd + e->file : e->file, len;
		if (e->dup || pi >= fd->npasswd + fd->ngroup || !fd->raw[pi] ||
		    !line_named(fd->raw[pi], fd->rawlen[pi], e->off, name, &len))
			continue;
		snprintf(out, cap, "%s:%u: %s; line skipped", fd->paths[pi], e->line,
			 skip_reason(fd->raw[pi] + e->off, len, group));
		return 1;
	}
	return 0;
}

/* ==== change hook ================================================================== */

/* One user of the plan: o before (NULL: added), n after (NULL: removed). A
 * record put again with the content and order it had is no change. */
static void report_user(const struct files_domain *fd, const struct files_user *o,
			const struct files_user *n)
{
	if (o && n && o->hash == n->hash && o->order == n->order)
		return;
	struct cache_change ch = {.group = false};
	if (o) {
		ch.old_name = o->name;
		ch.old_id = o->uid;
	}
	if (n) {
		ch.new_name = n->name;
		ch.new_id = n->uid;
	}
	ch.moved = o && n && o->order != n->order;
	fd->hook(&ch, fd->hook_arg);
}

static void report_group(const struct files_domain *fd, const struct files_snapshot *old,
			 const struct files_group *o, const struct files_snapshot *ns,
			 const struct files_group *n)
{
	if (o && n && o->hash == n->hash && o->order == n->order)
		return;
	struct cache_change ch = {.group = true};
	if (o) {
		ch.old_name = o->name;
		ch.old_id = o->gid;
		ch.old_mem = files_snapshot_members(old, o->mem_first);
		ch.nold_mem = o->nmembers;
	}
	if (n) {
		ch.new_name = n->name;
		ch.new_id = n->gid;
		ch.new_mem = files_snapshot_members(ns, n->mem_first);
		ch.nnew_mem = n->nmembers;
	}
	ch.moved = o && n && o->order != n->order;
	fd->hook(&ch, fd->hook_arg);
}

/* Replaced extra records: each old one went, each new one came. */
static void report_extras(const struct files_domain *fd, const struct files_snapshot *old,
			  const struct files_snapshot *ns, const struct files_plan *p)
{
	for (size_t i = 0; p->extras[0] && i < old->nxusers; i++)
		report_user(fd, &old->xusers[i], NULL);
	for (size_t i = 0; p->extras[0] && i < ns->nxusers; i++)
		report_user(fd, NULL, &ns->xusers[i]);
	for (size_t i = 0; p->extras[1] && i < old->nxgroups; i++)
		report_group(fd, old, &old->xgroups[i], ns, NULL);
	for (size_t i = 0; p->extras[1] && i < ns->nxgroups; i++)
		report_group(fd, old, NULL, ns, &ns->xgroups[i]);
}

/* Tell the hook what the committed plan changed: removals first, as they
 * were applied. */
void files_report_plan(const struct files_domain *fd, const struct files_snapshot *old,
		       const struct files_snapshot *ns, const struct files_plan *p)
{
	for (size_t j = 0; j < p->ndel_u; j++)
		report_user(fd, &old->users[p->del_u[j]], NULL);
	for (size_t j = 0; j < p->ndel_g; j++)
		report_group(fd, old, &old->groups[p->del_g[j]], ns, NULL);
	for (size_t i = 0; i < p->nput_u; i++) {
		const struct files_user *n = &ns->users[p->put_u[i]];
		long o = files_snapshot_find_user(old, n->name, n->key);
		report_user(fd, o >= 0 ? &old->users[o] : NULL, n);
	}
	for (size_t i = 0; i < p->nput_g; i++) {
		const struct files_group *n = &ns->groups[p->put_g[i]];
		long o = files_snapshot_find_group(old, n->name, n->key);
		report_group(fd, old, o >= 0 ? &old->groups[o] : NULL, ns, n);
	}
	report_extras(fd, old, ns, p);
}

bool files_plan_empty(const struct files_plan *p)
{
	return !p->nput_u && !p->ndel_u && !p->nput_g && !p->ndel_g && !p->extras[0] &&
	       !p->extras[1];
}

/* Take the loaded bytes as what the kept snapshot was parsed from. */
void files_keep_raw(struct files_domain *fd, struct files_loaded *l)
{
	for (size_t i = 0; i < fd->npasswd + fd->ngroup; i++) {
		free(fd->raw[i]);
		fd->raw[i] = l->buf[i];
		fd->rawlen[i] = l->buf[i] ? l->len[i] : 0;
		l->buf[i] = NULL;
	}
}

/* ==== refresh ====================================================================== */

/* Diff ns against the kept snapshot (or the cache) and apply it. */
static int diff_and_apply(struct files_domain *fd, struct cache *c, struct files_snapshot *ns,
			  struct files_refresh_stats *st, struct idc_diag *d)
{
	bool full = fd->snap == NULL;
	struct files_snapshot *old = fd->snap;
	int rc = full ? snapshot_from_cache(c, fd->name, &old, d) : 0;
	if (rc)
		return rc;
	uint64_t t0 = idc_now_ns();
	struct files_plan p = {0};
	rc = make_plan(old, ns, full, &p, st);
	uint64_t t1 = idc_now_ns();
	st->diff_ns = t1 - t0;
	if (rc)
		idc_diag_set(d, rc, "files domain %s: diff: %s", fd->name, idc_strerror(rc));
	else if (!files_plan_empty(&p) || full)
		rc = files_apply_plan(fd, c, old, ns, &p, d);
	st->committed = rc == 0 && (!files_plan_empty(&p) || full);
	if (st->committed && fd->hook)
		files_report_plan(fd, old, ns, &p);
	st->apply_ns = idc_now_ns() - t1;
	files_plan_free(&p);
	if (full)
		files_snapshot_free(old);
	return rc;
}

int files_domain_refresh(struct files_domain *fd, struct cache *c, struct files_refresh_stats *st,
			 struct idc_diag *d)
{
	struct files_refresh_stats local;
	st = st ? st : &local;
	memset(st, 0, sizeof(*st));
	uint64_t t0 = idc_now_ns();
	struct files_loaded l = {0};
	size_t n = fd->npasswd + fd->ngroup;
	int rc = load_files(fd, &l, d);
	if (rc == 0 && unchanged_files(fd, &l)) {
		st->skipped = true;
		st->users.total = st->users.unchanged = fd->snap->nusers;
		st->groups.total = st->groups.unchanged = fd->snap->ngroups;
		st->malformed = fd->snap->malformed;
		st->duplicates = fd->snap->duplicates;
		loaded_free(&l, n);
		return 0;
	}
	if (rc == 0) {
		int r = files_partial_refresh(fd, c, &l, st, d);
		if (r != 1) {
			loaded_free(&l, n);
			return r;
		}
	}
	struct files_snapshot *ns = rc == 0 ? files_snapshot_new() : NULL;
	if (rc == 0 && !ns)
		rc = idc_diag_set(d, -ENOMEM, "files domain %s: out of memory", fd->name);
	if (rc == 0 && (rc = parse_files(fd, &l, ns)) != 0)
		idc_diag_set(d, rc, "files domain %s: parse: %s", fd->name, idc_strerror(rc));
	st->parse_ns = idc_now_ns() - t0;
	if (rc == 0) {
		st->malformed = ns->malformed;
		st->duplicates = ns->duplicates;
		rc = diff_and_apply(fd, c, ns, st, d);
	}
	if (rc == 0) {
		files_snapshot_free(fd->snap);
		fd->snap = ns;
		memcpy(fd->applied, l.hash, n * sizeof(*l.hash));
		files_keep_raw(fd, &l);
	} else {
		files_snapshot_free(ns);
	}
	loaded_free(&l, n);
	return rc;
}
