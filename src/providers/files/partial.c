/*
 * files provider: the partial refresh. When at most one file per kind
 * changed, only the lines between the common prefix and suffix of its old
 * and new bytes (the window) are parsed and diffed (apply.c does the rest).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "files_int.h"

/* ==== partial refresh ================================================================
 * Most changes touch a few lines (useradd appends one, vipw edits one), yet
 * a full refresh re-parses, re-hashes and re-diffs every record. Instead,
 * when at most one file per kind changed, the bytes of that file are
 * compared with the ones the kept snapshot was parsed from: the lines in
 * the common prefix and suffix are the same records as before, so only
 * the lines between (the window) are parsed, and only the window's
 * records are diffed. The result must be exactly what a full refresh
 * would do (same records, orders, writes and hook reports); wherever the
 * window could change a record outside it (first occurrence wins across
 * the domain) or the orders would be renumbered, it gives up and the full
 * path runs. */

#define FAST_NBUFS_MAX 256 /* buffers a snapshot may pile up before a full parse */

/* Kind k (0 users, 1 groups) of a snapshot, record i. */
static size_t rec_count(const struct files_snapshot *s, int k)
{
	return k ? s->ngroups : s->nusers;
}

static uint32_t rec_file(const struct files_snapshot *s, int k, size_t i)
{
	return k ? s->groups[i].file : s->users[i].file;
}

static uint32_t rec_off(const struct files_snapshot *s, int k, size_t i)
{
	return k ? s->groups[i].off : s->users[i].off;
}

static uint32_t rec_line(const struct files_snapshot *s, int k, size_t i)
{
	return k ? s->groups[i].line : s->users[i].line;
}

static uint64_t rec_key(const struct files_snapshot *s, int k, size_t i)
{
	return k ? s->groups[i].key : s->users[i].key;
}

static uint64_t rec_hash(const struct files_snapshot *s, int k, size_t i)
{
	return k ? s->groups[i].hash : s->users[i].hash;
}

static uint64_t *rec_order(struct files_snapshot *s, int k, size_t i)
{
	return k ? &s->groups[i].order : &s->users[i].order;
}

static long rec_find(const struct files_snapshot *old, const struct files_snapshot *s, int k,
		     size_t i)
{
	return k ? files_snapshot_find_group(old, s->groups[i].name, s->groups[i].key)
		 : files_snapshot_find_user(old, s->users[i].name, s->users[i].key);
}

/* Length of the common prefix of a and b (n bytes each). */
static size_t common_prefix(const char *a, const char *b, size_t n)
{
	size_t i = 0;
	while (n - i >= 4096 && memcmp(a + i, b + i, 4096) == 0)
		i += 4096;
	while (i < n && a[i] == b[i])
		i++;
	return i;
}

/* Length of the common suffix of a[0..na) and b[0..nb), at most max. */
static size_t common_suffix(const char *a, size_t na, const char *b, size_t nb, size_t max)
{
	size_t i = 0;
	while (max - i >= 4096 && memcmp(a + na - i - 4096, b + nb - i - 4096, 4096) == 0)
		i += 4096;
	while (i < max && a[na - i - 1] == b[nb - i - 1])
		i++;
	return i;
}

static size_t count_nl(const char *p, size_t n)
{
	size_t c = 0;
	const char *end = p + n;
	while (p < end && (p = memchr(p, '\n', (size_t)(end - p))) != NULL) {
		c++;
		p++;
	}
	return c;
}

/* First record of kind k at or after byte off of file f (records are in
 * file, then offset order). */
static size_t first_at(const struct files_snapshot *s, int k, uint32_t f, size_t off)
{
	size_t lo = 0, hi = rec_count(s, k);
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		uint32_t mf = rec_file(s, k, mid);
		if (mf < f || (mf == f && rec_off(s, k, mid) < off))
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* Whether a line after the window was skipped as a repeat of a name some
 * old window record has: with that record edited away, the line would
 * become a record. Compared by key, so a collision only costs a full
 * parse. 0 no, 1 yes, or -ENOMEM. */
static int uncovers(const struct files_snapshot *old, int k, const struct files_window *w)
{
	const struct files_skips *sk = k ? &old->gskip : &old->uskip;
	size_t nd = 0;
	for (size_t i = 0; i < sk->n; i++)
		nd += sk->v[i].dup && (sk->v[i].file > w->file ||
				       (sk->v[i].file == w->file && sk->v[i].off >= w->old_end));
	if (nd == 0 || w->after == w->before)
		return 0;
	uint64_t *keys = malloc(nd * sizeof(*keys));
	if (!keys)
		return -ENOMEM;
	nd = 0;
	for (size_t i = 0; i < sk->n; i++)
		if (sk->v[i].dup && (sk->v[i].file > w->file ||
				     (sk->v[i].file == w->file && sk->v[i].off >= w->old_end)))
			keys[nd++] = sk->v[i].key;
	qsort(keys, nd, sizeof(*keys), cmp_u64);
	int r = 0;
	for (size_t i = w->before; i < w->after && !r; i++) {
		uint64_t key = rec_key(old, k, i);
		r = bsearch(&key, keys, nd, sizeof(*keys), cmp_u64) != NULL;
	}
	free(keys);
	return r;
}

/* Whether an extra record of kind k lies at or after byte pre of file f.
 * Extra records before the window stay as they are (their named records
 * and neighbours are before it too); the window's own lines repeating a
 * name give up in the window parse (files_outer.collide). Groups: any,
 * since their members interleave with the named groups' (splice_groups). */
static bool extras_from(const struct files_snapshot *old, int k, uint32_t f, size_t pre)
{
	if (k)
		return old->nxgroups > 0;
	for (size_t i = 0; i < old->nxusers; i++)
		if (old->xusers[i].file > f ||
		    (old->xusers[i].file == f && old->xusers[i].off >= pre))
			return true;
	return false;
}

/* Whether the extra users just before the window (after named record
 * first - 1) still sort before the record that follows them now. */
static bool extras_fit(const struct files_snapshot *ns, size_t first)
{
	uint64_t hi = first < ns->nusers ? ns->users[first].order : UINT64_MAX;
	for (size_t i = 0; i < ns->nxusers; i++)
		if (ns->xusers[i].prev == first && ns->xusers[i].order >= hi)
			return false;
	return true;
}

/* Find and parse the window of path pi (of kind k) into w. 0, 1 to give up,
 * or -errno. */
static int fast_window(struct files_domain *fd, const struct files_loaded *l, int k, size_t pi,
		       struct files_outer *outer, struct files_window *w)
{
	const struct files_snapshot *old = fd->snap;
	const struct files_skips *sk = k ? &old->gskip : &old->uskip;
	if (sk->overflow)
		return 1; /* the skipped lines are not all known */
	const char *ob = fd->raw[pi] ? fd->raw[pi] : "", *nb = l->buf[pi] ? l->buf[pi] : "";
	size_t olen = fd->raw[pi] ? fd->rawlen[pi] : 0, nlen = l->buf[pi] ? l->len[pi] : 0;
	size_t min = olen < nlen ? olen : nlen;
	/* The window starts at a line start in both, after whole lines that
	 * are the same, and ends after whole lines that are the same. */
	size_t pre = common_prefix(ob, nb, min);
	while (pre > 0 && ob[pre - 1] != '\n')
		pre--;
	size_t suf = common_suffix(ob, olen, nb, nlen, min - pre);
	size_t oe = olen - suf, ne = nlen - suf;
	if (!((oe == pre || ob[oe - 1] == '\n') && (ne == pre || nb[ne - 1] == '\n'))) {
		/* the suffix starts inside a line: it begins after that line
		 * (a newline inside the common suffix, so in both) */
		const char *q = memchr(ob + oe, '\n', olen - oe);
		oe = q ? (size_t)(q - ob) + 1 : olen;
		ne = nlen - (olen - oe);
	}
	uint32_t f = (uint32_t)(k ? pi - fd->npasswd : pi);
	if (extras_from(old, k, f, pre))
		return 1; /* the window could move or uncover extra records */
	w->file = f;
	w->pre = (uint32_t)pre;
	w->old_end = (uint32_t)oe;
	w->doff = (int64_t)ne - (int64_t)oe;
	w->dline = (int64_t)count_nl(nb + pre, ne - pre) - (int64_t)count_nl(ob + pre, oe - pre);
	w->before = first_at(old, k, f, pre);
	w->after = first_at(old, k, f, oe);
	int rc = uncovers(old, k, w);
	if (rc)
		return rc;
	/* The window's first line number, counted from the nearest line
	 * before it whose number is known. */
	uint32_t aline = 1, aoff = 0;
	if (w->before > 0 && rec_file(old, k, w->before - 1) == f) {
		aline = rec_line(old, k, w->before - 1);
		aoff = rec_off(old, k, w->before - 1);
	}
	for (size_t i = 0; i < sk->n; i++)
		if (sk->v[i].file == f && sk->v[i].off < pre && sk->v[i].off >= aoff) {
			aline = sk->v[i].line;
			aoff = sk->v[i].off;
		}
	uint32_t line0 = aline + (uint32_t)count_nl(ob + aoff, pre - aoff);
	size_t wl = ne - pre;
	char *buf = malloc(wl + 1);
	w->win = files_snapshot_new();
	if (!buf || !w->win) {
		free(buf);
		return -ENOMEM;
	}
	w->active = true;
	memcpy(buf, nb + pre, wl);
	buf[wl] = '\0';
	outer->before[k] = w->before;
	outer->after[k] = w->after;
	rc = files_snapshot_take_window(w->win, k == 1, fd->paths[pi], f, line0 - 1, (uint32_t)pre,
					buf, wl, l->hash[pi] != fd->logged[pi], outer);
	if (rc)
		return rc;
	if (outer->collide || (k ? &w->win->gskip : &w->win->uskip)->overflow)
		return 1;
	return 0;
}

/* The diff of kind k when only the window's records can differ: they get
 * orders as files_assign_orders would give them among all records (the old
 * records on either side keep theirs, which bound the window's), and only
 * they can be put or deleted. 0, 1 to give up (renumbering), or -ENOMEM. */
static int fast_kind(struct files_snapshot *old, struct files_snapshot *ns, int k,
		     const struct files_window *w, size_t **put, size_t *nput, size_t **del,
		     size_t *ndel, struct files_kind_stats *st)
{
	size_t nnew = rec_count(ns, k), nold = rec_count(old, k);
	size_t before = w->active ? w->before : nold, after = w->active ? w->after : nold;
	size_t nwin = nnew - (before + nold - after), noldw = after - before;
	*nput = *ndel = 0;
	*put = malloc((nwin + 1) * sizeof(**put));
	*del = malloc((noldw + 1) * sizeof(**del));
	uint64_t *ord = malloc((nwin + 2) * sizeof(*ord));
	long *match = malloc((nwin + 1) * sizeof(*match));
	bool *seen = calloc(noldw + 1, sizeof(*seen));
	int rc = *put && *del && ord && match && seen ? 0 : -ENOMEM;
	size_t m = 0;
	if (rc == 0 && before > 0)
		ord[m++] = *rec_order(old, k, before - 1);
	size_t first = m;
	for (size_t i = 0; rc == 0 && i < nwin; i++) {
		long o = rec_find(old, ns, k, before + i);
		if (o >= 0 && ((size_t)o < before || (size_t)o >= after))
			rc = 1; /* ruled out by the window parse; never guess */
		match[i] = o;
		ord[m++] = o >= 0 ? *rec_order(old, k, (size_t)o) : 0;
		if (o >= 0 && rc == 0)
			seen[(size_t)o - before] = true;
	}
	if (rc == 0 && after < nold)
		ord[m++] = *rec_order(old, k, after);
	if (rc == 0 && files_assign_orders(ord, m))
		rc = 1; /* a full refresh renumbers every record */
	for (size_t i = 0; rc == 0 && i < nwin; i++) {
		size_t j = before + i;
		*rec_order(ns, k, j) = ord[first + i];
		long o = match[i];
		bool same = o >= 0 && rec_hash(old, k, (size_t)o) == rec_hash(ns, k, j);
		bool moved = o >= 0 && *rec_order(old, k, (size_t)o) != ord[first + i];
		st->added += o < 0;
		st->changed += o >= 0 && (!same || moved);
		st->unchanged += same && !moved;
		if (!same || moved)
			(*put)[(*nput)++] = j;
	}
	for (size_t j = 0; rc == 0 && j < noldw; j++)
		if (!seen[j])
			(*del)[(*ndel)++] = before + j;
	st->unchanged += before + (nold - after);
	st->removed = *ndel;
	st->total = nnew;
	free(ord);
	free(match);
	free(seen);
	return rc;
}

/* Which file of each kind changed into changed[] (left -1: none), and the
 * bytes loaded into *total. 1 when two files of a kind changed: rare, not
 * worth the care. */
static int changed_files(const struct files_domain *fd, const struct files_loaded *l,
			 long changed[2], size_t *total)
{
	for (size_t i = 0; i < fd->npasswd + fd->ngroup; i++) {
		*total += l->len[i];
		if (l->hash[i] == fd->applied[i])
			continue;
		int k = i >= fd->npasswd;
		if (changed[k] >= 0)
			return 1;
		changed[k] = (long)i;
	}
	return 0;
}

/* The plan of ns, old with the windows w spliced in, against old. 0, 1 to
 * give up, or -ENOMEM. */
static int window_plan(struct files_snapshot *old, struct files_snapshot *ns,
		       const struct files_window w[2], struct files_plan *p,
		       struct files_refresh_stats *st)
{
	int rc =
	    fast_kind(old, ns, 0, &w[0], &p->put_u, &p->nput_u, &p->del_u, &p->ndel_u, &st->users);
	if (rc == 0 && w[0].active && !extras_fit(ns, w[0].before))
		rc = 1; /* a full refresh would renumber */
	if (rc == 0)
		rc = fast_kind(old, ns, 1, &w[1], &p->put_g, &p->nput_g, &p->del_g, &p->ndel_g,
			       &st->groups);
	return rc;
}

/* The refresh through windows. 1 when it does not apply (nothing was
 * done: the caller parses everything), else the refresh's result. */
int files_partial_refresh(struct files_domain *fd, struct cache *c, struct files_loaded *l,
			  struct files_refresh_stats *st, struct idc_diag *d)
{
	struct files_snapshot *old = fd->snap;
	size_t n = fd->npasswd + fd->ngroup, total = 0;
	if (!old || fd->no_partial || old->nbufs >= FAST_NBUFS_MAX)
		return 1;
	long changed[2] = {-1, -1};
	if (changed_files(fd, l, changed, &total))
		return 1;
	/* Buffers whose lines were edited away stay until a full parse. */
	if (old->buf_bytes > 2 * total + 65536)
		return 1;
	uint64_t t0 = idc_now_ns();
	struct files_window w[2] = {{0}};
	struct files_outer outer = {.old = old};
	int rc = 0;
	for (int k = 0; k < 2 && rc == 0; k++)
		if (changed[k] >= 0)
			rc = fast_window(fd, l, k, (size_t)changed[k], &outer, &w[k]);
	struct files_snapshot *ns = NULL;
	if (rc == 0)
		rc = files_snapshot_splice(old, w, &ns);
	for (int k = 0; k < 2; k++)
		files_snapshot_free(w[k].win);
	struct files_plan p = {0};
	uint64_t t1 = idc_now_ns();
	st->parse_ns = t1 - t0;
	if (rc == 0)
		rc = window_plan(old, ns, w, &p, st);
	uint64_t t2 = idc_now_ns();
	st->diff_ns = t2 - t1;
	if (rc) {
		/* any doubt, and any failure so far: the full path decides */
		files_plan_free(&p);
		files_snapshot_free(ns);
		memset(st, 0, sizeof(*st));
		return 1;
	}
	for (size_t i = 0; i < n; i++)
		fd->logged[i] = l->hash[i];
	st->malformed = ns->malformed;
	st->duplicates = ns->duplicates;
	if (!files_plan_empty(&p))
		rc = files_apply_plan(fd, c, old, ns, &p, d);
	st->committed = rc == 0 && !files_plan_empty(&p);
	if (st->committed && fd->hook)
		files_report_plan(fd, old, ns, &p);
	st->apply_ns = idc_now_ns() - t2;
	files_plan_free(&p);
	if (rc) {
		files_snapshot_free(ns);
		return rc;
	}
	/* ns holds old's buffers now: old goes without them */
	old->nborrowed = old->nbufs;
	ns->nborrowed = 0;
	files_snapshot_free(old);
	fd->snap = ns;
	memcpy(fd->applied, l->hash, n * sizeof(*l->hash));
	files_keep_raw(fd, l);
	st->partial = true;
	return 0;
}
