/* cache: a domain's user and group counts and its newest update, kept as
 * they change so that `idcache status` reads them in O(1) (docs/DESIGN.md
 * §5, "Counts").
 *
 * The counts live on the containers (entryCount on cn=users and cn=groups),
 * written once per transaction from the changes it made, so every snapshot
 * holds the counts of its own entries. The newest update is a record of
 * the timestamps db (kind KIND_DOMAIN), raised at commit; that db is
 * disposable, and so is the record. A container without a count (a cache
 * written before counts were kept) is counted once, by the walk the
 * readers fall back on too. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "cache_int.h"

/* ---- reading ---------------------------------------------------------------------------- */

/* The count a container entry holds; false when it holds none that is a
 * plain decimal number. */
static bool count_of(const struct store_entry *e, uint64_t *n)
{
	const struct store_attr *a =
	    store_entry_attr(e, CACHE_ATTR_COUNT, sizeof(CACHE_ATTR_COUNT) - 1);
	if (!a || a->nvals != 1 || a->vals[0].len == 0 || a->vals[0].len > 19)
		return false;
	uint64_t v = 0;
	for (size_t i = 0; i < a->vals[0].len; i++) {
		char ch = a->vals[0].ptr[i];
		if (ch < '0' || ch > '9')
			return false;
		v = v * 10 + (uint64_t)(ch - '0'); /* 19 digits cannot overflow */
	}
	*n = v;
	return true;
}

static int count_cb(const struct store_entry *e, void *arg)
{
	(void)e;
	(*(uint64_t *)arg)++;
	return 0;
}

/* The entries one level below the container, counted one by one (the way
 * there is when no count is kept: it decodes every entry). */
static int count_walk(struct store_txn *st, struct idc_buf *base, int kind, const char *domain,
		      uint64_t *n)
{
	*n = 0;
	int rc = cache_search_kind(st, base, kind, domain, NULL, 0, 0, count_cb, n);
	return rc == -ENOENT ? 0 : rc; /* domain not stored yet: none */
}

/* A container's count: the one it keeps, else walked. *kept says which
 * (may be NULL); -ENOENT when the container does not exist. */
static int container_count(struct store_txn *st, struct idc_buf *dn, int kind, const char *domain,
			   uint64_t *n, bool *kept)
{
	struct store_entry e;
	int rc = cache_dn_container(dn, kind, domain);
	if (!rc)
		rc = store_get(st, (struct store_val){dn->data, dn->len}, &e, NULL);
	if (rc)
		return rc;
	bool k = count_of(&e, n);
	if (kept)
		*kept = k;
	return k ? 0 : count_walk(st, dn, kind, domain, n);
}

/* The newest update the timestamps db records for domain, else the newest
 * of its entries' timestamps (a timestamps db rebuilt, or from before the
 * record was kept). */
static int64_t newest_walk(struct cache_reader *r, const char *domain)
{
	int64_t best = 0;
	for (int k = 0; k < 2 && r->ts; k++) {
		if (ts_key(k ? KIND_GROUP : KIND_USER, domain, "", &r->tmp))
			break;
		MDB_cursor *c;
		if (mdb_cursor_open(r->ts, r->c->ts_dbi, &c))
			break;
		MDB_val key = {r->tmp.len, r->tmp.data}, v;
		int rc = mdb_cursor_get(c, &key, &v, MDB_SET_RANGE);
		for (; rc == 0; rc = mdb_cursor_get(c, &key, &v, MDB_NEXT)) {
			if (key.mv_size < r->tmp.len ||
			    memcmp(key.mv_data, r->tmp.data, r->tmp.len))
				break;
			struct ts_rec t;
			if (v.mv_size == sizeof(t)) {
				memcpy(&t, v.mv_data, sizeof(t));
				if (t.last_update > best)
					best = t.last_update;
			}
		}
		mdb_cursor_close(c);
	}
	return best;
}

static int64_t newest_update(struct cache_reader *r, const char *domain)
{
	struct ts_rec t;
	if (!r->ts)
		return 0;
	if (ts_key(KIND_DOMAIN, domain, "", &r->tmp) == 0 &&
	    ts_get(r->ts, r->c->ts_dbi, &r->tmp, &t) == 0)
		return t.last_update;
	return newest_walk(r, domain);
}

int cache_domain_stats(struct cache_reader *r, const char *domain, struct cache_domain_stats *out)
{
	*out = (struct cache_domain_stats){0, 0, 0};
	if (!cache_domain_name_valid(domain, strlen(domain)))
		return -EINVAL;
	int rc = container_count(r->st, &r->dn, KIND_USER, domain, &out->users, NULL);
	if (!rc)
		rc = container_count(r->st, &r->dn, KIND_GROUP, domain, &out->groups, NULL);
	if (rc == -ENOENT)
		rc = 0; /* domain not stored yet: empty */
	out->last_update = newest_update(r, domain);
	return rc;
}

/* ---- writing ---------------------------------------------------------------------------- */

/* Write count n on the container of kind in domain. */
static int count_put(struct cache_txn *t, int kind, const char *domain, uint64_t n,
		     struct idc_diag *d)
{
	char text[24];
	snprintf(text, sizeof(text), "%llu", (unsigned long long)n);
	const char *cn = cache_container_cn(kind);
	struct store_pair p[] = {
	    {{"objectClass", 11}, {"container", 9}},
	    {{"cn", 2}, {cn, strlen(cn)}},
	    {{CACHE_ATTR_COUNT, sizeof(CACHE_ATTR_COUNT) - 1}, {text, strlen(text)}}};
	struct store_entry e;
	int rc = cache_dn_container(&t->dn, kind, domain);
	if (!rc)
		rc = store_entry_from_pairs(&t->arena, (struct store_val){t->dn.data, t->dn.len}, p,
					    IDC_ARRAY_SIZE(p), &e, d);
	return rc ? rc : cache_put_entry(t, &e, NULL, NULL, d);
}

int cache_container_ensure(struct cache_txn *t, int kind, const char *domain, struct idc_diag *d)
{
	uint64_t n;
	bool kept;
	int rc = container_count(t->st, &t->dn, kind, domain, &n, &kept);
	if (rc == -ENOENT)
		return count_put(t, kind, domain, 0, d); /* new: nothing below it */
	if (rc || kept)
		return rc;
	idc_log(IDC_LOG_INFO, "cache domain %s: %llu %s counted once, kept from now on", domain,
		(unsigned long long)n, cache_container_cn(kind));
	return count_put(t, kind, domain, n, d);
}

/* The transaction's tally of domain, made when missing; NULL when the
 * table is full. */
static struct cache_tally *tally_of(struct cache_txn *t, const char *domain)
{
	for (size_t i = 0; i < t->ntally; i++)
		if (strcmp(t->tally[i].domain, domain) == 0)
			return &t->tally[i];
	if (t->ntally == CACHE_MAX_DOMAINS)
		return NULL;
	struct cache_tally *y = &t->tally[t->ntally++];
	*y = (struct cache_tally){.newest = 0};
	snprintf(y->domain, sizeof(y->domain), "%s", domain);
	return y;
}

int cache_tally_entry(struct cache_txn *t, int kind, const char *domain, int delta)
{
	struct cache_tally *y = tally_of(t, domain);
	if (!y)
		return -ENOSPC;
	y->delta[kind == KIND_GROUP] += delta;
	return 0;
}

int cache_tally_touch(struct cache_txn *t, const char *domain, int64_t now)
{
	struct cache_tally *y = tally_of(t, domain);
	if (!y)
		return -ENOSPC;
	if (now > y->newest)
		y->newest = now;
	return 0;
}

void cache_tally_forget(struct cache_txn *t, const char *domain)
{
	for (size_t i = 0; i < t->ntally; i++)
		if (strcmp(t->tally[i].domain, domain) == 0) {
			t->tally[i] = t->tally[--t->ntally];
			return;
		}
}

/* Raise the domain's newest update to newest. */
static int newest_put(struct cache_txn *t, const char *domain, int64_t newest, struct idc_diag *d)
{
	struct ts_rec r = {0, 0, 0, 0};
	int rc = ts_key(KIND_DOMAIN, domain, "", &t->tmp);
	if (rc)
		return rc;
	if (ts_get(t->ts, t->c->ts_dbi, &t->tmp, &r) == 0 && r.last_update >= newest)
		return 0;
	r = (struct ts_rec){newest, 0, 0, 0};
	return ts_put(t, &t->tmp, &r, d);
}

/* A count moved by delta; a container without one is counted (the walk
 * sees this transaction's changes, so delta is in it already). */
static int count_move(struct cache_txn *t, int kind, const char *domain, int64_t delta,
		      struct idc_diag *d)
{
	uint64_t n;
	bool kept;
	int rc = container_count(t->st, &t->dn, kind, domain, &n, &kept);
	if (rc == -ENOENT)
		return 0; /* removed in this transaction */
	if (rc)
		return rc;
	if (kept)
		n = delta < 0 && (uint64_t)-delta > n ? 0 : n + (uint64_t)delta;
	return count_put(t, kind, domain, n, d);
}

int cache_tally_flush(struct cache_txn *t, struct idc_diag *d)
{
	int rc = 0;
	for (size_t i = 0; i < t->ntally && !rc; i++) {
		struct cache_tally *y = &t->tally[i];
		for (int k = 0; k < 2 && !rc; k++)
			if (y->delta[k])
				rc = count_move(t, k ? KIND_GROUP : KIND_USER, y->domain,
						y->delta[k], d);
		if (!rc && y->newest)
			rc = newest_put(t, y->domain, y->newest, d);
	}
	return rc;
}
