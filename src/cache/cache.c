/* cache: opening, names, and everything that writes users and groups. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cache_int.h"

static const char *const cache_indexes[] = {"objectClass", "name",      "uidNumber",
					    "gidNumber",   "memberUid", "member"};

/* ---- names and DNs ----------------------------------------------------------------- */

bool cache_name_valid(const char *name, size_t len)
{
	return idc_name_valid(name, len);
}

bool cache_passwd_public(const char *p)
{
	return p && strspn(p, "!*") == strlen(p);
}

enum cache_name_rule cache_name_rule_of_attr(const char *attr)
{
	char canon[STORE_ATTR_MAX];
	size_t n = attr ? store_attr_canon(attr, strlen(attr), canon) : 0;
	switch (n ? store_attr_rule(canon, n) : STORE_RULE_CASE_IGNORE) {
	case STORE_RULE_CASE_EXACT:
		return CACHE_NAMES_CASE_EXACT;
	case STORE_RULE_OCTET:
	case STORE_RULE_INTEGER:
		return CACHE_NAMES_EXACT;
	default:
		return CACHE_NAMES_CASE_IGNORE;
	}
}

size_t cache_name_fold(enum cache_name_rule rule, const char *name, char out[CACHE_NAME_MAX + 1])
{
	size_t len = name ? strnlen(name, CACHE_NAME_MAX + 1) : 0, n = 0;
	out[0] = '\0';
	if (len == 0 || len > CACHE_NAME_MAX)
		return 0;
	if (rule == CACHE_NAMES_EXACT ||
	    store_normalize_text(rule == CACHE_NAMES_CASE_IGNORE, name, len, out,
				 CACHE_NAME_MAX + 1, &n) != 0) {
		memcpy(out, name, len + 1); /* see the header */
		n = len;
	}
	return n;
}

bool cache_name_equal(enum cache_name_rule rule, const char *a, const char *b)
{
	if (strcmp(a, b) == 0)
		return true;
	char fa[CACHE_NAME_MAX + 1], fb[CACHE_NAME_MAX + 1];
	size_t na = cache_name_fold(rule, a, fa), nb = cache_name_fold(rule, b, fb);
	return na && na == nb && memcmp(fa, fb, na) == 0;
}

bool cache_name_answers(enum cache_name_rule rule, const char *a, const char *b)
{
	return cache_name_equal(rule, a, b) && (rule != CACHE_NAMES_CASE_IGNORE ||
						store_text_same_lower(a, strlen(a), b, strlen(b)));
}

uint64_t cache_name_hash(enum cache_name_rule rule, const char *name, uint64_t seed)
{
	size_t len = strlen(name);
	if (rule == CACHE_NAMES_CASE_IGNORE) {
		struct idc_buf b = IDC_BUF_INIT;
		/* without memory: its own bytes, which only it answers then */
		uint64_t h = store_text_lower(name, len, &b) == 0 ? idc_hash64(b.data, b.len, seed)
								  : idc_hash64(name, len, seed);
		idc_buf_free(&b);
		return h | 1;
	}
	char f[CACHE_NAME_MAX + 1];
	size_t n = cache_name_fold(rule, name, f);
	return (n ? idc_hash64(f, n, seed) : idc_hash64(name, len, seed)) | 1;
}

bool cache_domain_name_valid(const char *d, size_t n)
{
	if (n == 0 || n > CACHE_DOMAIN_MAX)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((d[i] >= 'a' && d[i] <= 'z') || (d[i] >= 'A' && d[i] <= 'Z') ||
		      (d[i] >= '0' && d[i] <= '9') || d[i] == '-' || d[i] == '_' || d[i] == '.'))
			return false;
	return true;
}

/* RFC 4514 escaping of an RDN value. */
static int dn_escape(struct idc_buf *out, const char *v)
{
	int rc = 0;
	size_t n = strlen(v);
	for (size_t i = 0; i < n && !rc; i++) {
		char c = v[i];
		bool esc = strchr(",+\"\\<>;=", c) != NULL || (i == 0 && (c == '#' || c == ' ')) ||
			   (i == n - 1 && c == ' ');
		if (esc)
			rc = idc_buf_putc(out, '\\');
		if (!rc)
			rc = idc_buf_putc(out, c);
	}
	return rc;
}

int cache_dn_domain(struct idc_buf *out, const char *domain)
{
	idc_buf_reset(out);
	return idc_buf_printf(out, "cn=%s,cn=idcache", domain);
}

const char *cache_container_cn(int kind)
{
	return kind == KIND_USER ? "users" : kind == KIND_KEYS ? "sshkeys" : "groups";
}

int cache_dn_container(struct idc_buf *out, int kind, const char *domain)
{
	idc_buf_reset(out);
	return idc_buf_printf(out, "cn=%s,cn=%s,cn=idcache", cache_container_cn(kind), domain);
}

int cache_dn_entry(struct idc_buf *out, int kind, const char *domain, const char *name)
{
	idc_buf_reset(out);
	/* A keys record is named by an attribute of its own: "name" is indexed,
	 * and lookups by name would meet every keys record among their
	 * candidates (measured: three times slower). */
	const char *rdn = kind == KIND_KEYS ? CACHE_ATTR_KEYS_OF "=" : "name=";
	int rc = idc_buf_append(out, rdn, strlen(rdn));
	if (!rc)
		rc = dn_escape(out, name);
	if (!rc)
		rc = idc_buf_printf(out, ",cn=%s,cn=%s,cn=idcache", cache_container_cn(kind),
				    domain);
	return rc;
}

int cache_dn_extra(struct idc_buf *out, int kind, const char *domain, uint64_t order)
{
	idc_buf_reset(out);
	return idc_buf_printf(out, "entryOrder=%llu,cn=%s,cn=%s,cn=idcache",
			      (unsigned long long)order, kind == KIND_USER ? "users" : "groups",
			      domain);
}

size_t cache_number_filter(char *text, int kind, uint32_t id)
{
	int n = kind == KIND_USER ? snprintf(text, CACHE_NUMBER_FILTER_MAX, "(uidNumber=%u)", id)
				  : snprintf(text, CACHE_NUMBER_FILTER_MAX,
					     "(&(objectClass=group)(gidNumber=%u))", id);
	return (size_t)n;
}

int cache_search_kind(struct store_txn *st, struct idc_buf *base, int kind, const char *domain,
		      const char *filter, size_t flen, size_t limit, store_entry_cb cb, void *arg)
{
	struct store_filter *f = NULL;
	int rc = filter ? store_filter_parse(filter, flen, &f, NULL) : 0;
	if (!rc)
		rc = cache_dn_container(base, kind, domain);
	struct store_search q = {{base->data, base->len}, STORE_SCOPE_ONE, f, limit};
	if (!rc)
		rc = store_search(st, &q, cb, arg, NULL);
	store_filter_free(f);
	return rc;
}

uint32_t cache_domain_ttl(const struct cache *c, const char *domain)
{
	for (size_t i = 0; i < c->nttl; i++)
		if (strcmp(c->ttl[i].name, domain) == 0)
			return c->ttl[i].ttl;
	return 0;
}

/* ---- trusting cache.mdb ------------------------------------------------------------------
 * cache.mdb is durable, so it is checked rather than thrown away: its meta
 * pages at every open (microseconds), and every page in a child process
 * when it was not closed cleanly (a few seconds per GiB). The full
 * consistency check (a minute per GiB) is left to `idcache db check`. A
 * damaged store is moved aside, never deleted, and a new one is filled by
 * the providers. */

struct first_fault {
	long n;
	char text[256];
};

static void note_fault(const char *fault, void *arg)
{
	struct first_fault *f = arg;
	if (f->n++ == 0)
		snprintf(f->text, sizeof(f->text), "%s", fault);
}

/* Rename the damaged store dir to dir.damaged-<UTC time> and make a new
 * empty one; its timestamps go with it. */
static int set_aside(const char *state_dir, const char *dir, const char *why, struct idc_diag *d)
{
	char aside[4200], stamp[32], ts[4200];
	time_t now = time(NULL);
	struct tm tm;
	strftime(stamp, sizeof(stamp), "%Y%m%dT%H%M%SZ", gmtime_r(&now, &tm));
	snprintf(aside, sizeof(aside), "%s.damaged-%s", dir, stamp);
	int rc = rename(dir, aside);
	if (rc < 0 && (errno == EEXIST || errno == ENOTEMPTY)) { /* twice in a second */
		snprintf(aside, sizeof(aside), "%s.damaged-%s-%ld", dir, stamp, (long)getpid());
		rc = rename(dir, aside);
	}
	if (rc < 0)
		return idc_diag_set(d, -errno, "%s is damaged (%s) and cannot be moved aside: %s",
				    dir, why, strerror(errno));
	idc_log(IDC_LOG_ERR,
		"%s is damaged (%s): moved aside to %s; a new cache is filled from the providers",
		dir, why, aside);
	snprintf(ts, sizeof(ts), "%s/timestamps.mdb.clean", state_dir);
	unlink(ts);
	if (mkdir(dir, 0700) < 0)
		return idc_diag_set(d, -errno, "%s: %s", dir, strerror(errno));
	return 0;
}

/* Verify the store in dir (cache.mdb) before it is opened. */
static int cache_store_trust(const char *state_dir, const char *dir, struct idc_diag *d)
{
	char data[4200];
	snprintf(data, sizeof(data), "%s/data.mdb", dir);
	int mark = store_clean_take(data);
	bool clean = mark > 0;
	if (!clean && access(data, F_OK) == 0)
		idc_log(IDC_LOG_INFO, "%s %s: reading all of it first", dir,
			mark ? "changed after it was closed" : "was not closed cleanly");
	struct first_fault ff = {0};
	struct idc_diag vd = {{0}};
	int64_t t0 = idc_now_ns();
	long rc =
	    store_verify(dir, clean ? STORE_VERIFY_META : STORE_VERIFY_PAGES, note_fault, &ff, &vd);
	if (!clean && rc == 0)
		idc_log(IDC_LOG_INFO, "%s is sound (read in %lld ms)", dir,
			(long long)((idc_now_ns() - t0) / 1000000));
	if (rc == 0 || rc == IDC_ENOTSTORE)
		return 0;
	if (rc < 0 && rc != IDC_ECORRUPT) {
		idc_log(IDC_LOG_WARN, "%s: cannot verify it (%s); opening it as it is", dir,
			vd.msg[0] ? vd.msg : idc_strerror((int)rc));
		return 0;
	}
	if (rc > 0)
		snprintf(vd.msg, sizeof(vd.msg), "%ld fault%s, first: %s", ff.n,
			 ff.n == 1 ? "" : "s", ff.text);
	return set_aside(state_dir, dir, vd.msg, d);
}

/* ---- open / close -------------------------------------------------------------------- */

/* A cache.mdb of another store format (index keys prepared by another
 * rule) holds nothing the providers cannot give again: it starts over
 * empty instead of keeping the daemon from starting. */
static int open_store(const char *path, const struct store_options *so, struct store **st,
		      struct idc_diag *d)
{
	struct idc_diag own = {{0}};
	int rc = store_open(path, so, st, d ? d : &own);
	if (rc != IDC_EVERSION)
		return rc;
	idc_log(IDC_LOG_WARN, "%s; starting the cache over empty", d ? d->msg : own.msg);
	char f[4200];
	snprintf(f, sizeof(f), "%s/data.mdb", path);
	if (unlink(f) < 0 && errno != ENOENT)
		return idc_diag_set(d, -errno, "%s: %s", f, strerror(errno));
	snprintf(f, sizeof(f), "%s/lock.mdb", path);
	unlink(f);
	return store_open(path, so, st, d);
}

int cache_open(const char *state_dir, const struct cache_options *o, struct cache **out,
	       struct idc_diag *d)
{
	static const struct cache_options defaults = {0};
	if (!o)
		o = &defaults;
	struct cache *c = calloc(1, sizeof(*c));
	if (!c || !(c->dir = strdup(state_dir))) {
		free(c);
		return -ENOMEM;
	}
	pthread_mutex_init(&c->write_mu, NULL);
	char path[4096];
	snprintf(path, sizeof(path), "%s/cache.mdb", state_dir);
	int rc = 0;
	if (mkdir(path, 0700) < 0 && errno != EEXIST)
		rc = idc_diag_set(d, -errno, "%s: %s", path, strerror(errno));
	struct store_options so = {STORE_CREATE | STORE_PRIVATE | (o->nosync ? STORE_NOSYNC : 0),
				   o->map_size, cache_indexes, IDC_ARRAY_SIZE(cache_indexes), 0};
	if (!rc)
		rc = cache_store_trust(state_dir, path, d);
	if (!rc)
		rc = open_store(path, &so, &c->st, d);
	if (!rc) {
		c->ts_map = ts_map_size(store_map_size(c->st));
		rc = ts_open(c, d);
	}
	if (rc) {
		cache_close(c);
		return rc;
	}
	*out = c;
	return 0;
}

/* After the store was closed: the next open may skip the page walk. */
static void cache_mark_clean(const struct cache *c)
{
	char data[4200];
	snprintf(data, sizeof(data), "%s/cache.mdb/data.mdb", c->dir);
	int rc = store_clean_mark(data);
	if (rc)
		idc_log(IDC_LOG_WARN, "%s: cannot mark it closed cleanly: %s", data,
			idc_strerror(rc));
}

void cache_close(struct cache *c)
{
	if (!c)
		return;
	ts_close(c);
	if (c->st) {
		store_close(c->st);
		cache_mark_clean(c);
	}
	pthread_mutex_destroy(&c->write_mu);
	free(c->dir);
	free(c);
}

uint64_t cache_durable_commits(const struct cache *c)
{
	return store_commit_count(c->st);
}

void cache_health(struct cache *c, struct cache_health *out)
{
	struct store_health h;
	store_health(c->st, &h);
	*out = (struct cache_health){h.failures, h.reopens, h.down, h.failed_at, {0}};
	snprintf(out->why, sizeof(out->why), "%s", h.why);
}

/* ---- transactions ---------------------------------------------------------------------- */

int cache_txn_begin(struct cache *c, struct cache_txn **out, struct idc_diag *d)
{
	return cache_txn_begin_flags(c, 0, out, d);
}

int cache_txn_begin_flags(struct cache *c, unsigned flags, struct cache_txn **out,
			  struct idc_diag *d)
{
	struct cache_txn *t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->c = c;
	pthread_mutex_lock(&c->write_mu); /* released by txn_free */
	c->ts_full = false;               /* says what filled during this transaction only */
	int rc = store_txn_begin(c->st, NULL, (flags & CACHE_TXN_RESENT) ? STORE_TXN_NOMETASYNC : 0,
				 &t->st, d);
	/* A timestamps db damaged while open (cut or overwritten under the
	 * daemon, or refusing transactions after a failed meta write) is
	 * rebuilt here, where no transaction of this thread is on it, once
	 * another thread's readers are off it (ts_drain). */
	bool healthy = !rc && ts_healthy(c, &c->ts_size);
	int tsrc = healthy ? mdb_txn_begin(c->ts_env, NULL, 0, &t->ts) : 0;
	if (!rc && (!healthy || tsrc)) {
		t->ts = NULL;
		rc = ts_rebuild(c,
				healthy
				    ? mdb_strerror(tsrc)
				    : "its meta pages or its size do not hold up: a failed write, "
				      "or the file cut or overwritten",
				d);
		if (!rc && mdb_txn_begin(c->ts_env, NULL, 0, &t->ts) != 0)
			rc = idc_diag_set(d, -EIO, "%s/timestamps.mdb: cannot begin transaction",
					  c->dir);
	}
	if (rc) {
		cache_txn_abort(t);
		return rc;
	}
	*out = t;
	return 0;
}

int cache_grow(struct cache *c, struct idc_diag *d)
{
	pthread_mutex_lock(&c->write_mu);
	if (c->ts_full) { /* the transaction failed on the timestamps db's map */
		int trc = ts_grow(c, d);
		pthread_mutex_unlock(&c->write_mu);
		return trc;
	}
	int rc = store_grow(c->st);
	pthread_mutex_unlock(&c->write_mu);
	if (rc)
		return idc_diag_set(d, rc, "%s/cache.mdb: cannot grow the map: %s", c->dir,
				    idc_strerror(rc));
	idc_log(IDC_LOG_INFO, "%s/cache.mdb: map full, grown", c->dir);
	return 0;
}

int cache_map_release(struct cache *c, bool wait)
{
	if (wait)
		pthread_mutex_lock(&c->write_mu);
	else if (pthread_mutex_trylock(&c->write_mu))
		return -EBUSY;
	/* under write_mu: cache_grow does not remap meanwhile */
	int rc = store_map_release(c->st);
	pthread_mutex_unlock(&c->write_mu);
	return rc;
}

static void txn_free(struct cache_txn *t)
{
	pthread_mutex_unlock(&t->c->write_mu);
	idc_arena_free(&t->arena);
	idc_buf_free(&t->dn);
	idc_buf_free(&t->tmp);
	free(t);
}

/* A transaction that changed nothing durable is aborted rather than
 * committed: no fsync, no new pages, and the commit counter proves it. */
int cache_txn_commit(struct cache_txn *t, struct idc_diag *d)
{
	int rc = cache_tally_flush(t, d);
	if (rc) {
		cache_txn_abort(t);
		return rc;
	}
	if (t->dirty)
		rc = store_txn_commit(t->st, d);
	else
		store_txn_abort(t->st);
	t->st = NULL;
	int tsrc = rc == 0 ? mdb_txn_commit(t->ts) : 0;
	if (tsrc) {
		/* cache.mdb holds the entries; without their timestamps they
		 * count as expired (served, and refreshed). A full map is
		 * grown for the next transaction (the failed commit ended
		 * this one). */
		struct idc_diag why = {{0}};
		ts_fail(t->c, tsrc, "commit failed; its entries count as expired", &why);
		idc_log(IDC_LOG_WARN, "%s", why.msg);
		if (t->c->ts_full && ts_grow(t->c, &why))
			idc_log(IDC_LOG_WARN, "%s", why.msg);
	} else if (rc)
		mdb_txn_abort(t->ts);
	else
		ts_note_size(t->c);
	t->ts = NULL;
	txn_free(t);
	return rc;
}

void cache_txn_abort(struct cache_txn *t)
{
	if (!t)
		return;
	store_txn_abort(t->st);
	if (t->ts)
		mdb_txn_abort(t->ts);
	txn_free(t);
}

/* ---- writing entries ------------------------------------------------------------------- */

struct pairs {
	struct store_pair p[64];
	size_t n;
	struct store_pair *more; /* group members past the fixed ones */
	size_t cap;
};

static int pairs_add(struct cache_txn *t, struct pairs *ps, const char *name, const char *v)
{
	struct store_pair *arr = ps->p;
	if (ps->n >= IDC_ARRAY_SIZE(ps->p)) {
		if (ps->n == ps->cap || !ps->more) {
			size_t cap = ps->cap ? ps->cap * 2 : 256;
			struct store_pair *m = idc_arena_alloc(&t->arena, cap * sizeof(*m));
			if (!m)
				return -ENOMEM;
			memcpy(m, ps->more ? ps->more : ps->p, ps->n * sizeof(*m));
			ps->more = m;
			ps->cap = cap;
		}
		arr = ps->more;
	}
	arr[ps->n++] = (struct store_pair){{name, strlen(name)}, {v, strlen(v)}};
	return 0;
}

static struct store_pair *pairs_arr(struct pairs *ps)
{
	return ps->more ? ps->more : ps->p;
}

static const char *num(struct cache_txn *t, uint64_t v)
{
	char *s = idc_arena_alloc(&t->arena, 24);
	if (s)
		snprintf(s, 24, "%llu", (unsigned long long)v);
	return s;
}

/* A subordinate id range as stored ("START COUNT", or "unusable"); NULL
 * when none. */
static const char *subid_text(struct cache_txn *t, const struct cache_subid_range *r)
{
	if (r->count == 0)
		return r->start == CACHE_SUBID_UNUSABLE ? "unusable" : NULL;
	char *s = idc_arena_alloc(&t->arena, 24);
	if (s)
		snprintf(s, 24, "%u %u", (unsigned)r->start, (unsigned)r->count);
	return s;
}

int cache_ensure_entry(struct cache_txn *t, const char *dn, const char *cn, struct idc_diag *d)
{
	struct store_pair p[] = {{{"objectClass", 11}, {"container", 9}},
				 {{"cn", 2}, {cn, strlen(cn)}}};
	struct store_entry e;
	int rc = store_entry_from_pairs(&t->arena, (struct store_val){dn, strlen(dn)}, p, 2, &e, d);
	struct store_entry cur;
	if (!rc && store_get(t->st, e.dn, &cur, NULL) == 0)
		return 0;
	if (!rc)
		rc = store_add(t->st, &e, NULL, d);
	if (!rc)
		t->dirty = true;
	return rc;
}

int cache_domain_ensure(struct cache_txn *t, const char *domain, uint32_t ttl, struct idc_diag *d)
{
	if (!cache_domain_name_valid(domain, strlen(domain)))
		return idc_diag_set(d, -EINVAL, "invalid domain name '%s'", domain);
	idc_arena_reset(&t->arena);
	struct cache *c = t->c;
	size_t i;
	for (i = 0; i < c->nttl && strcmp(c->ttl[i].name, domain) != 0; i++)
		;
	if (i == c->nttl && c->nttl == CACHE_MAX_DOMAINS)
		return idc_diag_set(d, -ENOSPC, "at most %d domains", CACHE_MAX_DOMAINS);
	if (i == c->nttl) {
		snprintf(c->ttl[i].name, sizeof(c->ttl[i].name), "%s", domain);
		c->nttl++;
	}
	c->ttl[i].ttl = ttl;
	int rc = cache_ensure_entry(t, "cn=idcache", "idcache", d);
	if (!rc)
		rc = cache_dn_domain(&t->dn, domain);
	if (!rc)
		rc = cache_ensure_entry(t, t->dn.data, domain, d);
	for (int k = 0; k < 2 && !rc; k++)
		rc = cache_container_ensure(t, k ? KIND_GROUP : KIND_USER, domain, d);
	return rc;
}

/* Add or replace e; only a real difference writes cache.mdb. */
int cache_put_entry(struct cache_txn *t, const struct store_entry *e, bool *changed, bool *added,
		    struct idc_diag *d)
{
	bool ch = false, add = false;
	int rc = store_replace(t->st, e, &ch, d);
	if (rc == -ENOENT) {
		/* not stored yet: the replace's "no such entry" is no error, and
		 * must not stand as the message of a failure of the add */
		if (d)
			d->msg[0] = '\0';
		rc = store_add(t->st, e, NULL, d);
		ch = add = rc == 0;
	}
	if (rc == 0 && ch)
		t->dirty = true;
	if (changed)
		*changed = ch;
	if (added)
		*added = add;
	return rc;
}

static int touch(struct cache_txn *t, int kind, const char *domain, const char *name,
		 struct idc_diag *d)
{
	uint32_t ttl = cache_domain_ttl(t->c, domain);
	int64_t now = (int64_t)time(NULL);
	struct ts_rec r = {now, ttl ? now + ttl : 0, 0, 0};
	int rc = ts_key(kind, domain, name, &t->tmp);
	if (!rc)
		rc = ts_put(t, &t->tmp, &r, d);
	return rc ? rc : cache_tally_touch(t, domain, now);
}

/* The entry for name built from ps, stored (if it differs) and its
 * timestamps renewed; an extra record is stored under its order (its
 * timestamps are its name's). */
static int put_named(struct cache_txn *t, int kind, const char *domain, const char *name,
		     const uint64_t *extra_order, struct pairs *ps, bool *changed,
		     struct idc_diag *d)
{
	int rc = extra_order ? cache_dn_extra(&t->dn, kind, domain, *extra_order)
			     : cache_dn_entry(&t->dn, kind, domain, name);
	struct store_entry e;
	bool added = false;
	if (!rc)
		rc = store_entry_from_pairs(&t->arena, (struct store_val){t->dn.data, t->dn.len},
					    pairs_arr(ps), ps->n, &e, d);
	if (!rc)
		rc = cache_put_entry(t, &e, changed, &added, d);
	if (!rc && added)
		rc = cache_tally_entry(t, kind, domain, 1);
	if (!rc)
		rc = touch(t, kind, domain, name, d);
	return rc;
}

static int check_names(const char *domain, const char *name, struct idc_diag *d)
{
	if (!cache_domain_name_valid(domain, strlen(domain)))
		return idc_diag_set(d, -EINVAL, "invalid domain name '%s'", domain);
	if (!name || !cache_name_valid(name, strlen(name)))
		return idc_diag_set(d, -EINVAL, "invalid name '%.64s'", name ? name : "");
	return 0;
}

int cache_put_user(struct cache_txn *t, const char *domain, const struct cache_user *u,
		   bool *changed, struct idc_diag *d)
{
	int rc = check_names(domain, u->name, d);
	if (rc)
		return rc;
	idc_arena_reset(&t->arena);
	struct pairs ps = {.n = 0};
	const char *const kv[][2] = {
	    {"objectClass", "user"},
	    {"name", u->name},
	    {"uidNumber", num(t, u->uid)},
	    {"gidNumber", num(t, u->gid)},
	    {"gecos", u->gecos ? u->gecos : ""},
	    {"homeDirectory", u->dir ? u->dir : ""},
	    {"loginShell", u->shell ? u->shell : ""},
	    {"entryOrder", num(t, u->order)},
	    {"originalDN", u->orig_dn},
	    {"passwordField", cache_passwd_public(u->passwd) ? u->passwd : NULL},
	    {CACHE_ATTR_EXTRA, u->extra ? "TRUE" : NULL},
	    {CACHE_ATTR_SUBUID, subid_text(t, &u->subuid)},
	    {CACHE_ATTR_SUBGID, subid_text(t, &u->subgid)},
	};
	for (size_t i = 0; i < IDC_ARRAY_SIZE(kv) && !rc; i++)
		if (kv[i][1])
			rc = pairs_add(t, &ps, kv[i][0], kv[i][1]);
	return rc ? rc
		  : put_named(t, KIND_USER, domain, u->name, u->extra ? &u->order : NULL, &ps,
			      changed, d);
}

/* Members up to this index are checked for repeats by a scan as they are
 * added; a group with more offered is checked whole by dedupe_big. */
#define MEMBER_SCAN 64

/* Member names once each, in order (memberUid values form a set). */
static int add_members(struct cache_txn *t, struct pairs *ps, const struct cache_group *g)
{
	int rc = 0;
	for (size_t i = 0; i < g->nmembers && !rc; i++) {
		const char *m = g->members[i];
		bool dup = false;
		/* Small groups: a scan; the hash check below covers big ones. */
		for (size_t j = 0; j < i && !dup && i < MEMBER_SCAN; j++)
			dup = strcmp(g->members[j], m) == 0;
		if (!dup && m[0])
			rc = pairs_add(t, ps, "memberUid", m);
	}
	return rc;
}

static int uniq_cmp(const void *a, const void *b)
{
	const struct store_pair *x = a, *y = b;
	size_t n = x->value.len < y->value.len ? x->value.len : y->value.len;
	int c = memcmp(x->value.ptr, y->value.ptr, n);
	return c ? c : (x->value.len > y->value.len) - (x->value.len < y->value.len);
}

/* Drop repeated memberUid values in groups offered more than MEMBER_SCAN
 * names (sorted copy, then keep the first occurrence in the original
 * order). Decided on the names offered, not the values kept: those past
 * the scan may repeat earlier ones even when fewer than MEMBER_SCAN are
 * distinct. */
static int dedupe_big(struct cache_txn *t, struct pairs *ps, size_t first, size_t offered)
{
	size_t n = ps->n - first;
	if (offered <= MEMBER_SCAN || n < 2)
		return 0;
	struct store_pair *arr = pairs_arr(ps) + first;
	struct store_pair *s = malloc(n * sizeof(*s));
	if (!s)
		return -ENOMEM;
	memcpy(s, arr, n * sizeof(*s));
	qsort(s, n, sizeof(*s), uniq_cmp);
	bool any = false;
	for (size_t i = 1; i < n && !any; i++)
		any = uniq_cmp(&s[i], &s[i - 1]) == 0;
	free(s);
	if (!any)
		return 0;
	/* Rare: rebuild keeping first occurrences (quadratic only here). */
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		bool seen = false;
		for (size_t j = 0; j < k && !seen; j++)
			seen = uniq_cmp(&arr[j], &arr[i]) == 0;
		if (!seen)
			arr[k++] = arr[i];
	}
	ps->n = first + k;
	(void)t;
	return 0;
}

int cache_put_group(struct cache_txn *t, const char *domain, const struct cache_group *g,
		    bool *changed, struct idc_diag *d)
{
	int rc = check_names(domain, g->name, d);
	if (rc)
		return rc;
	idc_arena_reset(&t->arena);
	struct pairs ps = {.n = 0};
	const char *const kv[][2] = {
	    {"objectClass", "group"},
	    {"name", g->name},
	    {"gidNumber", num(t, g->gid)},
	    {"entryOrder", num(t, g->order)},
	    {"originalDN", g->orig_dn},
	    {"passwordField", cache_passwd_public(g->passwd) ? g->passwd : NULL},
	    {CACHE_ATTR_EXTRA, g->extra ? "TRUE" : NULL},
	};
	for (size_t i = 0; i < IDC_ARRAY_SIZE(kv) && !rc; i++)
		if (kv[i][1])
			rc = pairs_add(t, &ps, kv[i][0], kv[i][1]);
	size_t first = ps.n;
	if (!rc)
		rc = add_members(t, &ps, g);
	if (!rc)
		rc = dedupe_big(t, &ps, first, g->nmembers);
	for (size_t i = 0; i < g->nmember_groups && !rc; i++) {
		if (cache_dn_entry(&t->tmp, KIND_GROUP, domain, g->member_groups[i]))
			return -ENOMEM;
		char *dn = idc_arena_strndup(&t->arena, t->tmp.data, t->tmp.len);
		rc = dn ? pairs_add(t, &ps, "member", dn) : -ENOMEM;
	}
	return rc ? rc
		  : put_named(t, KIND_GROUP, domain, g->name, g->extra ? &g->order : NULL, &ps,
			      changed, d);
}

struct taken {
	const char *name;
	char *other;
	bool found;
};

static int taken_cb(const struct store_entry *e, void *arg)
{
	struct taken *k = arg;
	const struct store_attr *a = store_entry_attr(e, "name", 4);
	if (!a || a->nvals == 0 ||
	    idc_memcaseeq(a->vals[0].ptr, a->vals[0].len, k->name, strlen(k->name)))
		return 0;
	size_t n = a->vals[0].len > CACHE_NAME_MAX ? CACHE_NAME_MAX : a->vals[0].len;
	memcpy(k->other, a->vals[0].ptr, n);
	k->other[n] = '\0';
	k->found = true;
	return 1; /* one is enough */
}

static int id_taken(struct cache_txn *t, int kind, const char *domain, uint32_t id,
		    const char *name, char other[CACHE_NAME_MAX + 1])
{
	char text[CACHE_NUMBER_FILTER_MAX];
	size_t n = cache_number_filter(text, kind, id);
	struct taken k = {name, other, false};
	int rc = cache_search_kind(t->st, &t->tmp, kind, domain, text, n, 0, taken_cb, &k);
	if (rc == 1 || rc == -ENOENT)
		rc = 0;
	return rc < 0 ? rc : k.found;
}

int cache_uid_taken(struct cache_txn *t, const char *domain, uint32_t uid, const char *name,
		    char other[CACHE_NAME_MAX + 1])
{
	return id_taken(t, KIND_USER, domain, uid, name, other);
}

int cache_gid_taken(struct cache_txn *t, const char *domain, uint32_t gid, const char *name,
		    char other[CACHE_NAME_MAX + 1])
{
	return id_taken(t, KIND_GROUP, domain, gid, name, other);
}

int cache_user_name(struct cache_txn *t, const char *domain, const char *name,
		    char out[CACHE_NAME_MAX + 1])
{
	if (!cache_domain_name_valid(domain, strlen(domain)) ||
	    !cache_name_valid(name, strlen(name)))
		return 0;
	struct store_entry e;
	int rc = cache_dn_entry(&t->tmp, KIND_USER, domain, name);
	if (!rc)
		rc = store_get(t->st, (struct store_val){t->tmp.data, t->tmp.len}, &e, NULL);
	if (rc)
		return rc == -ENOENT ? 0 : rc;
	const struct store_attr *a = store_entry_attr(&e, "name", 4);
	if (!a || a->nvals == 0 || a->vals[0].len > CACHE_NAME_MAX)
		return 0;
	memcpy(out, a->vals[0].ptr, a->vals[0].len);
	out[a->vals[0].len] = '\0';
	return 1;
}

static int del_entry(struct cache_txn *t, int kind, const char *domain, const char *name,
		     struct idc_diag *d)
{
	int rc = check_names(domain, name, d);
	if (!rc)
		rc = cache_dn_entry(&t->dn, kind, domain, name);
	if (!rc)
		rc = store_delete(t->st, (struct store_val){t->dn.data, t->dn.len}, false, d);
	if (!rc)
		t->dirty = true;
	if (!rc)
		rc = cache_tally_entry(t, kind, domain, -1);
	if (!rc)
		rc = ts_key(kind, domain, name, &t->tmp);
	if (!rc)
		rc = ts_del(t, &t->tmp, d);
	if (!rc && kind == KIND_USER)
		rc = cache_keys_drop(t, domain, name, NULL, d); /* keys go with their user */
	return rc;
}

int cache_del_user(struct cache_txn *t, const char *domain, const char *name, struct idc_diag *d)
{
	return del_entry(t, KIND_USER, domain, name, d);
}

int cache_del_group(struct cache_txn *t, const char *domain, const char *name, struct idc_diag *d)
{
	return del_entry(t, KIND_GROUP, domain, name, d);
}

/* An extra record; its timestamps stay: they are its name's. */
static int del_extra(struct cache_txn *t, int kind, const char *domain, uint64_t order,
		     struct idc_diag *d)
{
	if (!cache_domain_name_valid(domain, strlen(domain)))
		return idc_diag_set(d, -EINVAL, "invalid domain name '%s'", domain);
	int rc = cache_dn_extra(&t->dn, kind, domain, order);
	if (!rc)
		rc = store_delete(t->st, (struct store_val){t->dn.data, t->dn.len}, false, d);
	if (!rc)
		t->dirty = true;
	return rc ? rc : cache_tally_entry(t, kind, domain, -1);
}

int cache_del_extra_user(struct cache_txn *t, const char *domain, uint64_t order,
			 struct idc_diag *d)
{
	return del_extra(t, KIND_USER, domain, order, d);
}

int cache_del_extra_group(struct cache_txn *t, const char *domain, uint64_t order,
			  struct idc_diag *d)
{
	return del_extra(t, KIND_GROUP, domain, order, d);
}

/* The names a search found, copied (the search's entries go with it). */
struct name_list {
	struct idc_arena *arena;
	const char **v;
	size_t n, cap;
};

static int collect_name(const struct store_entry *e, void *arg)
{
	struct name_list *l = arg;
	const struct store_attr *a = store_entry_attr(e, "name", 4);
	if (!a || a->nvals == 0 || store_entry_attr(e, CACHE_ATTR_EXTRA, strlen(CACHE_ATTR_EXTRA)))
		return 0; /* extra records are files ones, never in a ranged domain */
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 64;
		const char **v = realloc(l->v, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		l->v = v;
		l->cap = cap;
	}
	const char *name = idc_arena_strndup(l->arena, a->vals[0].ptr, a->vals[0].len);
	if (!name)
		return -ENOMEM;
	l->v[l->n++] = name;
	return 0;
}

/* "(|(A<=min-1)(A>=max+1)...)" for each attribute of attrs: the ids outside
 * min..max (max 0: no upper bound). Its length, or 0 when no id can be
 * outside. */
static size_t outside_filter(char *buf, size_t cap, const char *const *attrs, size_t nattrs,
			     uint32_t min, uint32_t max)
{
	size_t n = (size_t)snprintf(buf, cap, "(|");
	bool any = false;
	for (size_t i = 0; i < nattrs; i++) {
		if (min > 0)
			n += (size_t)snprintf(buf + n, cap - n, "(%s<=%u)", attrs[i], min - 1);
		if (max > 0 && max < UINT32_MAX)
			n += (size_t)snprintf(buf + n, cap - n, "(%s>=%u)", attrs[i], max + 1);
		any = any || min > 0 || (max > 0 && max < UINT32_MAX);
	}
	n += (size_t)snprintf(buf + n, cap - n, ")");
	return any && n < cap ? n : 0;
}

/* Remove the entries of kind in domain whose attrs hold an id outside
 * min..max; *count gets how many. */
static int drop_outside(struct cache_txn *t, int kind, const char *domain, const char *const *attrs,
			size_t nattrs, uint32_t min, uint32_t max, size_t *count,
			struct idc_diag *d)
{
	char filter[160];
	size_t flen = outside_filter(filter, sizeof(filter), attrs, nattrs, min, max);
	*count = 0;
	if (flen == 0)
		return 0;
	struct name_list l = {.arena = &t->arena};
	int rc = cache_search_kind(t->st, &t->tmp, kind, domain, filter, flen, 0, collect_name, &l);
	if (rc == -ENOENT)
		rc = 0;
	for (size_t i = 0; i < l.n && rc == 0; i++) {
		rc = del_entry(t, kind, domain, l.v[i], d);
		*count += rc == 0;
		rc = rc == -ENOENT ? 0 : rc;
	}
	free(l.v);
	return rc;
}

int cache_drop_outside(struct cache_txn *t, const char *domain, uint32_t min, uint32_t max,
		       size_t *users, size_t *groups, struct idc_diag *d)
{
	static const char *const uattrs[] = {"uidNumber", "gidNumber"};
	static const char *const gattrs[] = {"gidNumber"};
	int rc = drop_outside(t, KIND_USER, domain, uattrs, 2, min, max, users, d);
	return rc ? rc : drop_outside(t, KIND_GROUP, domain, gattrs, 1, min, max, groups, d);
}

/* Timestamps whose key starts with prefix: delete (del) or mark expired. */
static int ts_walk(struct cache *cc, MDB_txn *txn, const struct idc_buf *prefix, bool del,
		   const char *only_name, size_t *count, struct idc_diag *d)
{
	MDB_cursor *c;
	int orc = mdb_cursor_open(txn, cc->ts_dbi, &c);
	if (orc)
		return ts_fail(cc, orc, "cannot walk the timestamps", d);
	MDB_val k = {prefix->len, prefix->data}, v;
	int rc = mdb_cursor_get(c, &k, &v, prefix->len ? MDB_SET_RANGE : MDB_FIRST);
	for (; rc == 0; rc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
		if (k.mv_size < prefix->len || memcmp(k.mv_data, prefix->data, prefix->len) != 0)
			break;
		if (only_name && k.mv_size != prefix->len)
			break;
		if (del) {
			rc = mdb_cursor_del(c, 0);
		} else if (v.mv_size == sizeof(struct ts_rec)) {
			struct ts_rec r;
			memcpy(&r, v.mv_data, sizeof(r));
			r.flags |= TS_EXPIRED;
			MDB_val nv = {sizeof(r), &r};
			rc = mdb_cursor_put(c, &k, &nv, MDB_CURRENT);
		}
		if (rc)
			break;
		if (count)
			(*count)++;
	}
	mdb_cursor_close(c);
	return rc == 0 || rc == MDB_NOTFOUND
		   ? 0
		   : ts_fail(cc, rc,
			     del ? "cannot remove timestamps" : "cannot mark timestamps expired",
			     d);
}

int cache_domain_remove(struct cache_txn *t, const char *domain, struct idc_diag *d)
{
	if (!cache_domain_name_valid(domain, strlen(domain)))
		return idc_diag_set(d, -EINVAL, "invalid domain name '%s'", domain);
	int rc = cache_dn_domain(&t->dn, domain);
	if (!rc)
		rc = store_delete(t->st, (struct store_val){t->dn.data, t->dn.len}, true, d);
	t->keys_domain[0] = '\0';      /* its keys container, if any, went too */
	cache_tally_forget(t, domain); /* and its counts */
	if (rc == -ENOENT)
		return 0;
	if (!rc)
		t->dirty = true;
	static const int kinds[] = {KIND_USER, KIND_GROUP, KIND_DOMAIN};
	for (size_t k = 0; k < IDC_ARRAY_SIZE(kinds) && !rc; k++) {
		ts_key(kinds[k], domain, "", &t->tmp);
		rc = ts_walk(t->c, t->ts, &t->tmp, true, NULL, NULL, d);
	}
	return rc;
}

/* One attempt at cache_expire: a transaction of its own on the
 * timestamps db. */
static int expire_once(struct cache *c, const char *domain, enum cache_kind kind, const char *name,
		       size_t *count, struct idc_diag *d)
{
	MDB_txn *txn;
	int rc = mdb_txn_begin(c->ts_env, NULL, 0, &txn);
	if (rc)
		return ts_fail(c, rc, "cannot begin a transaction", d);
	struct idc_buf key = IDC_BUF_INIT;
	if (count)
		*count = 0;
	for (int k = 0; k < 2 && !rc; k++) {
		int kc = k ? KIND_GROUP : KIND_USER;
		if ((kind == CACHE_USER && kc != KIND_USER) ||
		    (kind == CACHE_GROUP && kc != KIND_GROUP))
			continue;
		if (domain)
			rc = ts_key(kc, domain, name ? name : "", &key);
		else
			rc = idc_buf_printf(&key, "%c", kc);
		if (!rc)
			rc = ts_walk(c, txn, &key, false, name, count, d);
		idc_buf_reset(&key);
	}
	idc_buf_free(&key);
	if (rc) {
		mdb_txn_abort(txn);
		return rc;
	}
	rc = mdb_txn_commit(txn);
	if (rc)
		return ts_fail(c, rc, "cannot commit", d);
	ts_note_size(c);
	return 0;
}

int cache_expire(struct cache *c, const char *domain, enum cache_kind kind, const char *name,
		 size_t *count, struct idc_diag *d)
{
	if (!ts_healthy(c, NULL)) /* rebuilt by the next write transaction */
		return idc_diag_set(d, -EIO,
				    "timestamps.mdb is damaged; it is rebuilt at the next refresh");
	/* Marking copies pages: a full map is grown and the walk run again. */
	for (int tries = 0;; tries++) {
		int rc = expire_once(c, domain, kind, name, count, d);
		if (rc != IDC_EMAPFULL || !c->ts_full || tries == CACHE_MAX_GROWS ||
		    ts_grow(c, d) != 0)
			return rc;
	}
}
