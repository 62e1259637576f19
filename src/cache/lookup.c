/* lookup: read transactions over the cache — users, groups, initgroups
 * and enumeration (the counts are counts.c's). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cache_int.h"

/* A read txn on the timestamps db: the spare one renewed (the daemon
 * begins a reader per batch of requests), else a new one. */
static MDB_txn *ts_read_begin(struct cache *c)
{
	atomic_fetch_add(&c->ts_users, 1); /* left by ts_read_end */
	if (!atomic_load(&c->ts_closing) && ts_healthy(c, NULL)) {
		MDB_txn *t = atomic_exchange(&c->ts_spare, NULL);
		if (t && mdb_txn_renew(t) == 0)
			return t;
		if (t)
			mdb_txn_abort(t);
		if (mdb_txn_begin(c->ts_env, NULL, MDB_RDONLY, &t) == 0)
			return t;
	}
	atomic_fetch_sub(&c->ts_users, 1);
	return NULL;
}

static void ts_read_end(struct cache *c, MDB_txn *t)
{
	mdb_txn_reset(t);
	MDB_txn *none = NULL;
	if (!atomic_compare_exchange_strong(&c->ts_spare, &none, t))
		mdb_txn_abort(t);
	atomic_fetch_sub(&c->ts_users, 1);
}

void ts_spare_drop(struct cache *c)
{
	MDB_txn *t = atomic_exchange(&c->ts_spare, NULL);
	if (t)
		mdb_txn_abort(t);
}

int cache_reader_begin(struct cache *c, struct cache_reader **out)
{
	struct cache_reader *r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->c = c;
	int rc = store_txn_begin(c->st, NULL, STORE_TXN_RDONLY, &r->st, NULL);
	if (rc) {
		free(r);
		return rc;
	}
	/* timestamps are advisory: without them (NULL) the reader serves */
	r->ts = ts_read_begin(c);
	*out = r;
	return 0;
}

void cache_reader_end(struct cache_reader *r)
{
	if (!r)
		return;
	store_txn_abort(r->st);
	if (r->ts)
		ts_read_end(r->c, r->ts);
	idc_arena_free(&r->arena);
	idc_buf_free(&r->dn);
	idc_buf_free(&r->tmp);
	idc_buf_free(&r->walk_dn);
	free(r->flat);
	free(r);
}

/* ---- entry -> record ------------------------------------------------------------- */

static const char *str(struct cache_reader *r, const struct store_entry *e, const char *attr)
{
	const struct store_attr *a = store_entry_attr(e, attr, strlen(attr));
	if (!a || a->nvals == 0)
		return NULL;
	return idc_arena_strndup(&r->arena, a->vals[0].ptr, a->vals[0].len);
}

static uint64_t number(const struct store_entry *e, const char *attr)
{
	const struct store_attr *a = store_entry_attr(e, attr, strlen(attr));
	uint64_t v = 0;
	for (size_t i = 0; a && a->nvals && i < a->vals[0].len; i++) {
		char ch = a->vals[0].ptr[i];
		if (ch < '0' || ch > '9')
			break;
		v = v * 10 + (uint64_t)(ch - '0');
	}
	return v;
}

static bool is_extra(const struct store_entry *e)
{
	return store_entry_attr(e, CACHE_ATTR_EXTRA, strlen(CACHE_ATTR_EXTRA)) != NULL;
}

/* A stored range ("START COUNT" or "unusable", cache.c); count 0 when
 * absent, and start CACHE_SUBID_UNUSABLE too when not two numbers that
 * make a range: what is there is never taken for nothing. */
static struct cache_subid_range subid_range(const struct store_entry *e, const char *attr)
{
	const struct store_attr *a = store_entry_attr(e, attr, strlen(attr));
	struct cache_subid_range out = {0, 0};
	char text[32];
	unsigned long long start, count;
	char tail;
	if (!a || a->nvals == 0)
		return out;
	out.start = CACHE_SUBID_UNUSABLE;
	if (a->vals[0].len >= sizeof(text))
		return out;
	memcpy(text, a->vals[0].ptr, a->vals[0].len);
	text[a->vals[0].len] = '\0';
	if (text[0] < '0' || text[0] > '9' ||
	    sscanf(text, "%llu %llu%c", &start, &count, &tail) != 2 || count == 0 ||
	    start > UINT32_MAX || count > UINT32_MAX || start + count > UINT32_MAX)
		return out;
	out.start = (uint32_t)start;
	out.count = (uint32_t)count;
	return out;
}

static int to_user(struct cache_reader *r, const struct store_entry *e, struct cache_user *u)
{
	*u = (struct cache_user){0};
	u->name = str(r, e, "name");
	u->uid = (uint32_t)number(e, "uidnumber");
	u->gid = (uint32_t)number(e, "gidnumber");
	u->gecos = str(r, e, "gecos");
	u->dir = str(r, e, "homedirectory");
	u->shell = str(r, e, "loginshell");
	u->order = number(e, "entryorder");
	u->orig_dn = str(r, e, "originaldn");
	u->passwd = str(r, e, "passwordfield");
	u->extra = is_extra(e);
	u->subuid = subid_range(e, CACHE_ATTR_SUBUID);
	u->subgid = subid_range(e, CACHE_ATTR_SUBGID);
	if (!u->name || !u->gecos || !u->dir || !u->shell)
		return -ENOMEM; /* or an entry missing required attributes */
	return 0;
}

static int to_members(struct cache_reader *r, const struct store_entry *e, struct cache_group *g)
{
	const struct store_attr *m = store_entry_attr(e, "memberuid", 9);
	if (!m)
		return 0;
	const char **mem = idc_arena_alloc(&r->arena, m->nvals * sizeof(*mem));
	if (!mem)
		return -ENOMEM;
	for (size_t i = 0; i < m->nvals; i++)
		if (!(mem[i] = idc_arena_strndup(&r->arena, m->vals[i].ptr, m->vals[i].len)))
			return -ENOMEM;
	g->members = mem;
	g->nmembers = m->nvals;
	return 0;
}

/* The value of a DN's first AVA, unescaped, into name (arena): the name
 * in a member group's DN as cache_dn_entry writes it. */
struct rdn_value {
	struct idc_arena *arena;
	char *name;
};

static int rdn_value_cb(struct store_val type, struct store_val value, size_t rdn, void *arg)
{
	struct rdn_value *v = arg;
	(void)type;
	if (rdn != 0)
		return 1;
	v->name = idc_arena_strndup(v->arena, value.ptr, value.len);
	return v->name ? 1 : -ENOMEM;
}

/* Names of the member groups (the member DNs below the domain's groups
 * container): what a change of nesting is compared on. A value that does
 * not parse as the cache writes them is skipped. */
static int to_member_groups(struct cache_reader *r, const struct store_entry *e,
			    struct cache_group *g)
{
	const struct store_attr *m = store_entry_attr(e, "member", 6);
	if (!m)
		return 0;
	const char **mg = idc_arena_alloc(&r->arena, m->nvals * sizeof(*mg));
	if (!mg)
		return -ENOMEM;
	size_t n = 0;
	for (size_t i = 0; i < m->nvals; i++) {
		struct rdn_value v = {&r->arena, NULL};
		int rc =
		    store_dn_foreach_ava(m->vals[i].ptr, m->vals[i].len, rdn_value_cb, &v, NULL);
		if (rc == -ENOMEM)
			return rc;
		if (v.name && v.name[0])
			mg[n++] = v.name;
	}
	g->member_groups = mg;
	g->nmember_groups = n;
	return 0;
}

static int to_group(struct cache_reader *r, const struct store_entry *e, struct cache_group *g)
{
	*g = (struct cache_group){0};
	g->name = str(r, e, "name");
	g->gid = (uint32_t)number(e, "gidnumber");
	g->order = number(e, "entryorder");
	g->orig_dn = str(r, e, "originaldn");
	g->passwd = str(r, e, "passwordfield");
	g->extra = is_extra(e);
	int rc = to_members(r, e, g);
	if (!rc)
		rc = to_member_groups(r, e, g);
	return rc ? rc : g->name ? 0 : -ENOMEM;
}

static void fill_meta(struct cache_reader *r, int kind, const char *domain, const char *name,
		      struct cache_meta *meta)
{
	if (!meta)
		return;
	*meta = (struct cache_meta){domain, 0, 0, false};
	struct ts_rec t;
	if (!r->ts || ts_key(kind, domain, name, &r->tmp) ||
	    ts_get(r->ts, r->c->ts_dbi, &r->tmp, &t)) {
		meta->expired = true; /* no timestamps: treat as due for refresh */
		return;
	}
	meta->last_update = t.last_update;
	meta->expires = t.expires;
	meta->expired = (t.flags & TS_EXPIRED) || (t.expires && t.expires <= (int64_t)time(NULL));
}

/* ---- by name ------------------------------------------------------------------------ */

/* "(attr=value)" with value escaped as RFC 4515 wants, into ft. */
static int filter_eq(struct idc_buf *ft, const char *attr, struct store_val value)
{
	idc_buf_reset(ft);
	int rc = idc_buf_printf(ft, "(%s=", attr);
	for (size_t i = 0; i < value.len && !rc; i++) {
		unsigned char ch = (unsigned char)value.ptr[i];
		rc = strchr("*()\\", ch) || ch < 0x20 ? idc_buf_printf(ft, "\\%02x", ch)
						      : idc_buf_putc(ft, (char)ch);
	}
	return rc ? rc : idc_buf_putc(ft, ')');
}

struct pick {
	uint64_t best_order;
	uint64_t best_id;
	bool found;
	const char *name; /* set: only entries named exactly this */
	size_t len;
};

static int pick_cb(const struct store_entry *e, void *arg)
{
	struct pick *p = arg;
	if (p->name) {
		const struct store_attr *a = store_entry_attr(e, "name", 4);
		if (!a || a->nvals == 0 || a->vals[0].len != p->len ||
		    memcmp(a->vals[0].ptr, p->name, p->len) != 0)
			return 0;
	}
	uint64_t o = number(e, "entryorder");
	if (!p->found || o < p->best_order) {
		p->found = true;
		p->best_order = o;
		p->best_id = e->id;
	}
	return 0;
}

/* The lowest order entry of the domain named exactly name. */
static int get_exact(struct cache_reader *r, int kind, const char *domain, const char *name,
		     size_t len, struct store_entry *e)
{
	struct pick p = {.name = name, .len = len};
	int rc = filter_eq(&r->tmp, "name", (struct store_val){name, len});
	if (!rc)
		rc = cache_search_kind(r->st, &r->dn, kind, domain, r->tmp.data, r->tmp.len, 0,
				       pick_cb, &p);
	if (rc)
		return rc;
	return p.found ? store_get_id(r->st, p.best_id, e) : -ENOENT;
}

static int get_named(struct cache_reader *r, int kind, const char *domain, const char *name,
		     bool case_sensitive, struct store_entry *e)
{
	size_t len = strlen(name);
	if (!cache_name_valid(name, len))
		return -ENOENT;
	int rc = cache_dn_entry(&r->dn, kind, domain, name);
	if (!rc)
		rc = store_get(r->st, (struct store_val){r->dn.data, r->dn.len}, e, NULL);
	if (rc)
		return rc;
	const struct store_attr *a = store_entry_attr(e, "name", 4);
	if (!a || a->nvals == 0)
		return -ENOENT;
	if (a->vals[0].len == len && memcmp(a->vals[0].ptr, name, len) == 0)
		return 0;
	/* Ignoring case, the entry answers only a spelling its directory
	 * would take for its name too: caseIgnore keys straße and strasse
	 * alike, which OpenLDAP holds as two users. */
	if (!case_sensitive)
		return store_text_same_lower(a->vals[0].ptr, a->vals[0].len, name, len) ? 0
											: -ENOENT;
	/* A later record may hold exactly this spelling (an extra record). */
	return get_exact(r, kind, domain, name, len, e);
}

/* A key to look up in each domain, in order, until one holds it. */
struct lookup_key {
	int kind;
	const char *name; /* by name when set, else by number */
	bool case_sensitive;
	uint32_t number;
};

static int get_numbered(struct cache_reader *r, int kind, const char *domain, uint32_t v,
			struct store_entry *e);

static int lookup(struct cache_reader *r, const char *const *domains, size_t ndomains,
		  const struct lookup_key *k, void *out, struct cache_meta *meta)
{
	idc_arena_reset(&r->arena);
	for (size_t i = 0; i < ndomains; i++) {
		struct store_entry e;
		int rc = k->name ? get_named(r, k->kind, domains[i], k->name, k->case_sensitive, &e)
				 : get_numbered(r, k->kind, domains[i], k->number, &e);
		if (rc == -ENOENT)
			continue;
		if (!rc)
			rc = k->kind == KIND_USER ? to_user(r, &e, out) : to_group(r, &e, out);
		if (!rc)
			fill_meta(r, k->kind, domains[i],
				  k->kind == KIND_USER ? ((struct cache_user *)out)->name
						       : ((struct cache_group *)out)->name,
				  meta);
		return rc;
	}
	return -ENOENT;
}

int cache_user_by_name(struct cache_reader *r, const char *const *domains, size_t ndomains,
		       const char *name, bool case_sensitive, struct cache_user *out,
		       struct cache_meta *meta)
{
	struct lookup_key k = {KIND_USER, name, case_sensitive, 0};
	return lookup(r, domains, ndomains, &k, out, meta);
}

int cache_group_by_name(struct cache_reader *r, const char *const *domains, size_t ndomains,
			const char *name, bool case_sensitive, struct cache_group *out,
			struct cache_meta *meta)
{
	struct lookup_key k = {KIND_GROUP, name, case_sensitive, 0};
	return lookup(r, domains, ndomains, &k, out, meta);
}

int cache_user_by_uid(struct cache_reader *r, const char *const *domains, size_t ndomains,
		      uint32_t uid, struct cache_user *out, struct cache_meta *meta)
{
	struct lookup_key k = {KIND_USER, NULL, false, uid};
	return lookup(r, domains, ndomains, &k, out, meta);
}

int cache_group_by_gid(struct cache_reader *r, const char *const *domains, size_t ndomains,
		       uint32_t gid, struct cache_group *out, struct cache_meta *meta)
{
	struct lookup_key k = {KIND_GROUP, NULL, false, gid};
	return lookup(r, domains, ndomains, &k, out, meta);
}

/* ---- by number ----------------------------------------------------------------------- */

/* The entry with attr=v below the domain's container, lowest order. */
static int get_numbered(struct cache_reader *r, int kind, const char *domain, uint32_t v,
			struct store_entry *e)
{
	char text[CACHE_NUMBER_FILTER_MAX];
	size_t n = cache_number_filter(text, kind, v);
	struct pick p = {0};
	int rc = cache_search_kind(r->st, &r->dn, kind, domain, text, n, 0, pick_cb, &p);
	if (rc)
		return rc;
	return p.found ? store_get_id(r->st, p.best_id, e) : -ENOENT;
}

/* ---- initgroups -----------------------------------------------------------------------
 * The groups that list the user, then the groups that have those as
 * members, level by level; each level in provider order (glibc's files
 * module answers in file order), each group and each gid once. */

/* A set of 64-bit values (open addressing; 0 is stored as a flag). */
struct u64set {
	uint64_t *slot;
	size_t cap, n;
	bool has_zero;
};

static int set_add(struct u64set *s, uint64_t v, bool *added)
{
	*added = false;
	if (v == 0) {
		*added = !s->has_zero;
		s->has_zero = true;
		return 0;
	}
	if ((s->n + 1) * 2 > s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 64;
		uint64_t *ns = calloc(cap, sizeof(*ns));
		if (!ns)
			return -ENOMEM;
		for (size_t i = 0; i < s->cap; i++) {
			if (!s->slot[i])
				continue;
			size_t j = idc_hash64(&s->slot[i], 8, 0) & (cap - 1);
			while (ns[j])
				j = (j + 1) & (cap - 1);
			ns[j] = s->slot[i];
		}
		free(s->slot);
		s->slot = ns;
		s->cap = cap;
	}
	size_t j = idc_hash64(&v, 8, 0) & (s->cap - 1);
	for (; s->slot[j]; j = (j + 1) & (s->cap - 1))
		if (s->slot[j] == v)
			return 0;
	s->slot[j] = v;
	s->n++;
	*added = true;
	return 0;
}

struct found {
	uint64_t id;
	uint64_t order;
	uint32_t gid;
};

struct walk {
	struct cache_reader *r;
	const struct cache_nesting *nest;
	struct found *f;
	size_t n, cap;
	struct u64set seen; /* group entry ids */
};

static int group_cb(const struct store_entry *e, void *arg)
{
	struct walk *w = arg;
	bool added;
	int rc = set_add(&w->seen, e->id, &added);
	if (rc || !added)
		return rc; /* a cycle, or reached twice */
	if (w->n == w->cap) {
		size_t cap = w->cap ? w->cap * 2 : 64;
		struct found *p = realloc(w->f, cap * sizeof(*p));
		if (!p)
			return -ENOMEM;
		w->f = p;
		w->cap = cap;
	}
	w->f[w->n++] =
	    (struct found){e->id, number(e, "entryorder"), (uint32_t)number(e, "gidnumber")};
	return 0;
}

static int search_groups(struct walk *w, const char *domain, const char *attr,
			 struct store_val value)
{
	struct cache_reader *r = w->r;
	struct idc_buf ft = IDC_BUF_INIT;
	int rc = filter_eq(&ft, attr, value);
	struct idc_buf base = IDC_BUF_INIT;
	if (!rc)
		rc = cache_search_kind(r->st, &base, KIND_GROUP, domain, ft.data, ft.len, 0,
				       group_cb, w);
	idc_buf_free(&ft);
	idc_buf_free(&base);
	return rc;
}

static int found_cmp(const void *a, const void *b)
{
	const struct found *x = a, *y = b;
	if (x->order != y->order)
		return x->order < y->order ? -1 : 1;
	return (x->id > y->id) - (x->id < y->id);
}

/* Whether the nesting passes over group entry e (nest->skip). */
static int skipped(struct cache_reader *r, const struct cache_nesting *nest,
		   const struct store_entry *e, bool *skip)
{
	*skip = false;
	if (!nest->skip)
		return 0;
	struct cache_group g;
	int rc = to_group(r, e, &g);
	if (!rc)
		*skip = nest->skip(&g, nest->arg);
	return rc;
}

/* Parents of each level, down to nest->depth levels or a level that finds
 * nothing new; none through a group skipped. */
static int walk_levels(struct walk *w, const char *domain)
{
	size_t start = 0;
	int rc = 0;
	for (unsigned level = 0; start < w->n && !rc; level++) {
		size_t end = w->n;
		qsort(w->f + start, end - start, sizeof(*w->f), found_cmp);
		for (size_t i = start; i < end && !rc && level < w->nest->depth; i++) {
			struct store_entry g;
			bool skip = false;
			rc = store_get_id(w->r->st, w->f[i].id, &g);
			if (!rc)
				rc = skipped(w->r, w->nest, &g, &skip);
			if (rc || skip)
				continue;
			char *dn = idc_arena_strndup(&w->r->arena, g.dn.ptr, g.dn.len);
			rc = dn ? search_groups(w, domain, "member",
						(struct store_val){dn, g.dn.len})
				: -ENOMEM;
		}
		start = end;
	}
	return rc;
}

static int stop_cb(const struct store_entry *e, void *arg)
{
	(void)e;
	*(bool *)arg = true;
	return 1;
}

/* Whether any group of the domain has member groups: most domains (files
 * ones always) have none, and then the level walk, one search per group
 * found, is skipped. The presence index answers without a scan. */
static bool has_nesting(struct cache_reader *r, const char *domain)
{
	struct idc_buf base = IDC_BUF_INIT;
	bool found = false;
	int rc = cache_search_kind(r->st, &base, KIND_GROUP, domain, "(member=*)", 10, 1, stop_cb,
				   &found);
	idc_buf_free(&base);
	return found || (rc != 0 && rc != 1);
}

/* Each gid once (two groups may share one), in walk order. */
static int copy_gids(const struct walk *w, uint32_t *gids, size_t max, size_t *n)
{
	struct u64set seen = {0};
	int rc = 0;
	*n = 0;
	for (size_t i = 0; i < w->n && !rc; i++) {
		bool added;
		rc = set_add(&seen, w->f[i].gid, &added);
		if (!rc && added) {
			if (*n < max)
				gids[*n] = w->f[i].gid;
			(*n)++;
		}
	}
	free(seen.slot);
	return rc ? rc : *n > max ? -ERANGE : 0;
}

int cache_initgroups(struct cache_reader *r, const char *const *domains, size_t ndomains,
		     const char *name, bool case_sensitive, const struct cache_nesting *nest,
		     uint32_t *gids, size_t max, size_t *n)
{
	idc_arena_reset(&r->arena);
	*n = 0;
	for (size_t i = 0; i < ndomains; i++) {
		struct store_entry e;
		int rc = get_named(r, KIND_USER, domains[i], name, case_sensitive, &e);
		if (rc == -ENOENT)
			continue;
		if (rc)
			return rc;
		const struct store_attr *un = store_entry_attr(&e, "name", 4);
		struct store_val uname = un->vals[0];
		struct walk w = {.r = r, .nest = nest};
		char *nm = idc_arena_strndup(&r->arena, uname.ptr, uname.len);
		rc = nm ? search_groups(&w, domains[i], "memberUid",
					(struct store_val){nm, uname.len})
			: -ENOMEM;
		if (!rc && w.n && nest->depth && has_nesting(r, domains[i]))
			rc = walk_levels(&w, domains[i]);
		else if (!rc && w.n > 1)
			qsort(w.f, w.n, sizeof(*w.f), found_cmp); /* the one level, in order */
		if (!rc)
			rc = copy_gids(&w, gids, max, n);
		free(w.f);
		free(w.seen.slot);
		return rc;
	}
	return -ENOENT;
}

/* ---- a group's member names -------------------------------------------------------------
 * Direct members as stored, then the users of the member groups, level by
 * level (each in the order its parent lists it), each name once. */

/* Names compared as a lookup compares them (get_named): by the hash of
 * the folded form, then cache_name_answers (straße and strasse are two
 * users, as in the directory). */
struct nameset {
	struct name_slot {
		uint64_t h; /* 0: empty */
		const char *name;
	} * slot;
	size_t mask, n; /* mask: slots less one (slot NULL: none yet) */
};

static uint64_t name_hash(const char *name)
{
	char folded[CACHE_NAME_MAX + 1];
	size_t n = cache_name_fold(CACHE_NAMES_STORED, name, folded);
	if (n == 0) /* no name: hashed as given (equal only byte for byte) */
		return idc_hash64(name, strlen(name), 1) | 1;
	return idc_hash64(folded, n, 0) | 1;
}

static int nameset_grow(struct nameset *s)
{
	void *slot = s->slot;
	int rc = idc_oa_grow(&slot, &s->mask, sizeof(*s->slot), 64);
	s->slot = slot;
	return rc;
}

/* Add name (kept by the caller); *added false when an equal one is in. */
static int nameset_add(struct nameset *s, const char *name, bool *added)
{
	*added = false;
	if ((!s->slot || (s->n + 1) * 2 > s->mask + 1) && nameset_grow(s))
		return -ENOMEM;
	uint64_t h = name_hash(name);
	size_t j = h & s->mask;
	for (; s->slot[j].h; j = (j + 1) & s->mask)
		if (s->slot[j].h == h &&
		    cache_name_answers(CACHE_NAMES_STORED, s->slot[j].name, name))
			return 0;
	s->slot[j] = (struct name_slot){h, name};
	s->n++;
	*added = true;
	return 0;
}

/* A growable list of names (heap array; the names live elsewhere). */
struct names {
	const char **v;
	size_t n, cap;
};

static int names_push(struct names *l, const char *name)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 64;
		const char **p = realloc(l->v, cap * sizeof(*p));
		if (!p)
			return -ENOMEM;
		l->v = p;
		l->cap = cap;
	}
	l->v[l->n++] = name;
	return 0;
}

struct flatten {
	struct cache_reader *r;
	const char *domain;
	const struct cache_nesting *nest;
	struct names out;         /* the answer */
	struct nameset users;     /* names in out */
	struct nameset groups;    /* groups visited (the group itself first) */
	struct names level, next; /* member groups of this level, of the next */
};

/* The users of member group name not in the list yet, appended; its own
 * member groups queued for the next level. A group the cache does not
 * hold adds nothing. */
static int flatten_group(struct flatten *f, const char *name, bool last_level)
{
	struct cache_reader *r = f->r;
	bool added;
	int rc = nameset_add(&f->groups, name, &added);
	if (rc || !added)
		return rc; /* a cycle, or listed twice */
	struct store_entry e;
	rc = cache_dn_entry(&r->walk_dn, KIND_GROUP, f->domain, name);
	if (!rc)
		rc =
		    store_get(r->st, (struct store_val){r->walk_dn.data, r->walk_dn.len}, &e, NULL);
	if (rc)
		return rc == -ENOENT ? 0 : rc;
	bool skip;
	rc = skipped(r, f->nest, &e, &skip);
	if (rc || skip)
		return rc;
	struct cache_group mg = {0};
	rc = to_members(r, &e, &mg);
	if (!rc && !last_level)
		rc = to_member_groups(r, &e, &mg);
	for (size_t i = 0; i < mg.nmembers && !rc; i++) {
		rc = nameset_add(&f->users, mg.members[i], &added);
		if (!rc && added)
			rc = names_push(&f->out, mg.members[i]);
	}
	for (size_t i = 0; i < mg.nmember_groups && !rc; i++)
		rc = names_push(&f->next, mg.member_groups[i]);
	return rc;
}

static int flatten_levels(struct flatten *f, const struct cache_group *g)
{
	unsigned depth = f->nest->depth;
	bool added;
	int rc = nameset_add(&f->groups, g->name, &added);
	for (size_t i = 0; i < g->nmembers && !rc; i++) {
		rc = nameset_add(&f->users, g->members[i], &added);
		if (!rc) /* the group's own list as stored, repeats in case too */
			rc = names_push(&f->out, g->members[i]);
	}
	for (size_t i = 0; i < g->nmember_groups && !rc; i++)
		rc = names_push(&f->level, g->member_groups[i]);
	for (unsigned d = 1; d <= depth && f->level.n && !rc; d++) {
		for (size_t i = 0; i < f->level.n && !rc; i++)
			rc = flatten_group(f, f->level.v[i], d == depth);
		struct names t = f->level;
		f->level = f->next;
		f->next = t;
		f->next.n = 0;
	}
	return rc;
}

int cache_group_members(struct cache_reader *r, const char *domain, struct cache_group *g,
			const struct cache_nesting *nest)
{
	if (g->nmember_groups == 0 || nest->depth == 0)
		return 0;
	struct flatten f = {.r = r, .domain = domain, .nest = nest};
	/* the answer goes in r->flat, which outlives this call */
	f.out = (struct names){r->flat, 0, r->flat_cap};
	int rc = flatten_levels(&f, g);
	r->flat = f.out.v;
	r->flat_cap = f.out.cap;
	if (!rc) {
		g->members = r->flat;
		g->nmembers = f.out.n;
	}
	free(f.users.slot);
	free(f.groups.slot);
	free(f.level.v);
	free(f.next.v);
	return rc;
}

/* ---- enumeration ---------------------------------------------------------------------- */

struct ordered {
	uint64_t order;
	uint64_t id;
};

struct collect {
	struct ordered *v;
	size_t n, cap;
	int64_t newest;
};

static int collect_cb(const struct store_entry *e, void *arg)
{
	struct collect *c = arg;
	if (c->n == c->cap) {
		size_t cap = c->cap ? c->cap * 2 : 256;
		struct ordered *p = realloc(c->v, cap * sizeof(*p));
		if (!p)
			return -ENOMEM;
		c->v = p;
		c->cap = cap;
	}
	c->v[c->n++] = (struct ordered){number(e, "entryorder"), e->id};
	return 0;
}

int cache_enum_order(uint64_t a_order, uint64_t a_key, uint64_t b_order, uint64_t b_key)
{
	if (a_order != b_order)
		return a_order < b_order ? -1 : 1;
	return (a_key > b_key) - (a_key < b_key);
}

static int ordered_cmp(const void *a, const void *b)
{
	const struct ordered *x = a, *y = b;
	return cache_enum_order(x->order, x->id, y->order, y->id);
}

/* The entries of kind in domain that match filter (NULL: all), in
 * provider order. */
static int collect_kind(struct cache_reader *r, int kind, const char *domain,
			const struct idc_buf *filter, struct collect *c)
{
	int rc = cache_search_kind(r->st, &r->dn, kind, domain, filter ? filter->data : NULL,
				   filter ? filter->len : 0, 0, collect_cb, c);
	if (rc == -ENOENT)
		rc = 0; /* domain not loaded yet: empty */
	if (!rc && c->n > 1)
		qsort(c->v, c->n, sizeof(*c->v), ordered_cmp);
	return rc;
}

int cache_enum_users(struct cache_reader *r, const char *domain, cache_user_cb cb, void *arg)
{
	struct collect c = {0};
	int rc = collect_kind(r, KIND_USER, domain, NULL, &c);
	for (size_t i = 0; i < c.n && !rc; i++) {
		struct store_entry e;
		struct cache_user u;
		idc_arena_reset(&r->arena);
		rc = store_get_id(r->st, c.v[i].id, &e);
		if (!rc)
			rc = to_user(r, &e, &u);
		if (!rc)
			rc = cb(&u, arg);
	}
	free(c.v);
	return rc;
}

int cache_enum_groups(struct cache_reader *r, const char *domain, cache_group_cb cb, void *arg)
{
	struct collect c = {0};
	int rc = collect_kind(r, KIND_GROUP, domain, NULL, &c);
	for (size_t i = 0; i < c.n && !rc; i++) {
		struct store_entry e;
		struct cache_group g;
		idc_arena_reset(&r->arena);
		rc = store_get_id(r->st, c.v[i].id, &e);
		if (!rc)
			rc = to_group(r, &e, &g);
		if (!rc)
			rc = cb(&g, arg);
	}
	free(c.v);
	return rc;
}

/* The filter a link is searched with, into ft. */
static int link_filter(struct cache_reader *r, const char *domain, enum cache_link how,
		       const char *name, uint32_t id, struct idc_buf *ft)
{
	if (how == CACHE_LINK_UID || how == CACHE_LINK_GID) {
		char text[CACHE_NUMBER_FILTER_MAX];
		size_t n =
		    cache_number_filter(text, how == CACHE_LINK_UID ? KIND_USER : KIND_GROUP, id);
		return idc_buf_append(ft, text, n);
	}
	if (how == CACHE_LINK_MEMBER)
		return filter_eq(ft, "memberUid", (struct store_val){name, strlen(name)});
	int rc = cache_dn_entry(&r->tmp, KIND_GROUP, domain, name);
	return rc ? rc : filter_eq(ft, "member", (struct store_val){r->tmp.data, r->tmp.len});
}

int cache_linked(struct cache_reader *r, const char *domain, enum cache_link how, const char *name,
		 uint32_t id, cache_name_cb cb, void *arg)
{
	struct idc_buf ft = IDC_BUF_INIT;
	struct collect c = {0};
	int rc = link_filter(r, domain, how, name, id, &ft);
	if (!rc)
		rc = collect_kind(r, how == CACHE_LINK_UID ? KIND_USER : KIND_GROUP, domain, &ft,
				  &c);
	for (size_t i = 0; i < c.n && !rc; i++) {
		struct store_entry e;
		idc_arena_reset(&r->arena);
		rc = store_get_id(r->st, c.v[i].id, &e);
		const char *gname = rc ? NULL : str(r, &e, "name");
		if (!rc)
			rc = gname ? cb(gname, arg) : -ENOMEM;
	}
	free(c.v);
	idc_buf_free(&ft);
	return rc;
}

struct unsorted {
	struct cache_reader *r;
	cache_user_key_cb user;
	cache_group_key_cb group;
	void *arg;
};

static int unsorted_cb(const struct store_entry *e, void *arg)
{
	struct unsorted *x = arg;
	idc_arena_reset(&x->r->arena);
	if (x->user) {
		struct cache_user u;
		int rc = to_user(x->r, e, &u);
		return rc ? rc : x->user(&u, e->id, x->arg);
	}
	struct cache_group g;
	int rc = to_group(x->r, e, &g);
	return rc ? rc : x->group(&g, e->id, x->arg);
}

static int enum_unsorted(struct cache_reader *r, int kind, const char *domain, struct unsorted *x)
{
	int rc = cache_search_kind(r->st, &r->dn, kind, domain, NULL, 0, 0, unsorted_cb, x);
	return rc == -ENOENT ? 0 : rc; /* domain not loaded yet: empty */
}

/* enum_unsorted, resumable: from after *at, until a callback stops it. */
static int enum_from(struct cache_reader *r, int kind, const char *domain, struct idc_buf *at,
		     struct unsorted *x)
{
	int rc = cache_dn_container(&r->dn, kind, domain);
	struct store_search q = {{r->dn.data, r->dn.len}, STORE_SCOPE_ONE, NULL, 0};
	if (!rc)
		rc = store_search_from(r->st, &q, at, unsorted_cb, x, NULL);
	return rc == -ENOENT ? 0 : rc; /* domain not loaded yet: empty */
}

int cache_enum_users_from(struct cache_reader *r, const char *domain, struct idc_buf *at,
			  cache_user_key_cb cb, void *arg)
{
	struct unsorted x = {r, cb, NULL, arg};
	return enum_from(r, KIND_USER, domain, at, &x);
}

int cache_enum_groups_from(struct cache_reader *r, const char *domain, struct idc_buf *at,
			   cache_group_key_cb cb, void *arg)
{
	struct unsorted x = {r, NULL, cb, arg};
	return enum_from(r, KIND_GROUP, domain, at, &x);
}

int cache_enum_users_unsorted(struct cache_reader *r, const char *domain, cache_user_key_cb cb,
			      void *arg)
{
	struct unsorted x = {r, cb, NULL, arg};
	return enum_unsorted(r, KIND_USER, domain, &x);
}

int cache_enum_groups_unsorted(struct cache_reader *r, const char *domain, cache_group_key_cb cb,
			       void *arg)
{
	struct unsorted x = {r, NULL, cb, arg};
	return enum_unsorted(r, KIND_GROUP, domain, &x);
}
