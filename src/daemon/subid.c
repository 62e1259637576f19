/*
 * subid: the SUBIDS and SUBID_OWNERS requests of nss.sock, which the
 * libsubid plugin (src/subid) sends (docs/DESIGN.md "Subordinate ids").
 *
 * A user's range of a kind is the one its directory entry names (cached
 * with the user), else, when its domain has subid_allocate, the
 * allocation's (subid/subid.h) for its uid, else none. Which user a name
 * is follows passwd's rule (§11): the responder's walk finds it
 * (responder.c, do_user) and hands it here with its domain.
 *
 * A range is served only when no user or group id may lie in it
 * (daemon_ids_held: the files domains' ids, every ldap domain's
 * min_id..max_id, the host's files) and, for a directory's range, when it
 * does not reach into the allocation's block while any domain allocates:
 * otherwise its owner could map someone else's ids. A refused range is
 * answered as none and logged once per user, kind and reason.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/daemon.h"
#include "subid/subid.h"

/* Remembered refusals, so each is logged once (until evicted). */
#define SUBID_NOTED 256u
static uint64_t noted[SUBID_NOTED];

static void note_refused(const char *msg)
{
	uint64_t h = idc_hash64(msg, strlen(msg), 0x5ab1d) | 1u;
	uint64_t *slot = &noted[h % SUBID_NOTED];
	if (*slot == h)
		return;
	*slot = h;
	idc_log(IDC_LOG_WARN, "%s", msg);
}

static bool any_allocates(const struct daemon *dm)
{
	for (size_t i = 0; i < dm->ndomains; i++)
		if (dm->domains[i]->cfg->subid_allocate)
			return true;
	return false;
}

/* What user u of domain i has of a kind: a range (count >= 1) and where
 * it comes from, or none; refused names who may hold ids of the range
 * that was found but is not served (NULL when served or none). */
struct pick {
	uint32_t start, count;
	const char *source;  /* "directory", "allocation", NULL: none */
	const char *refused; /* daemon_ids_held's holder, or the block */
};

/* Who may hold an id of start..+count, for a range from the directory or
 * not; NULL: nobody, it may be served. */
static const char *range_holder(struct daemon *dm, uint32_t start, uint32_t count, bool from_dir)
{
	uint32_t last = start + count - 1, first_a, last_a;
	const char *held = daemon_ids_held(dm, start, last);
	subid_alloc_block(&dm->cfg->subid.alloc, &first_a, &last_a);
	if (!held && from_dir && any_allocates(dm) && start <= last_a && first_a <= last)
		held = "the subid allocation's block";
	return held;
}

static void pick(struct daemon *dm, size_t i, const struct cache_user *u, uint32_t kind,
		 struct pick *p)
{
	const struct cache_subid_range *dir = kind == PROTO_SUBID_UID ? &u->subuid : &u->subgid;
	*p = (struct pick){0};
	if (dir->count == 0 && dir->start == CACHE_SUBID_UNUSABLE)
		return; /* the entry names one that is none: not the allocation's either */
	if (dir->count) {
		*p = (struct pick){dir->start, dir->count, "directory", NULL};
	} else if (dm->domains[i]->cfg->subid_allocate &&
		   subid_alloc_range(&dm->cfg->subid.alloc, u->uid, &p->start, &p->count)) {
		p->source = "allocation";
	} else {
		return;
	}
	p->refused = range_holder(dm, p->start, p->count, dir->count != 0);
}

/* User u of domain i: its range of kind, true when it has one to serve;
 * a refusal is logged (once). */
static bool range_of(struct daemon *dm, size_t i, const struct cache_user *u, uint32_t kind,
		     uint32_t *start, uint32_t *count)
{
	struct pick p;
	char msg[400], dn[220] = "";
	pick(dm, i, u, kind, &p);
	*start = p.start;
	*count = p.count;
	if (!p.source || !p.refused)
		return p.source != NULL;
	if (u->orig_dn)
		snprintf(dn, sizeof(dn), " (%.200s)", u->orig_dn);
	snprintf(
	    msg, sizeof(msg),
	    "subordinate %s range %u-%u of user %.64s%s not served: ids in it may belong to %s",
	    kind == PROTO_SUBID_UID ? "uid" : "gid", (unsigned)p.start,
	    (unsigned)(p.start + p.count - 1), u->name, dn, p.refused);
	note_refused(msg);
	return false;
}

void subid_user_info(struct daemon *dm, size_t i, const struct cache_user *u, struct idc_buf *b)
{
	for (uint32_t kind = PROTO_SUBID_UID; kind <= PROTO_SUBID_GID; kind++) {
		const char *key = kind == PROTO_SUBID_UID ? "subuid" : "subgid";
		const struct cache_subid_range *dir =
		    kind == PROTO_SUBID_UID ? &u->subuid : &u->subgid;
		struct pick p;
		pick(dm, i, u, kind, &p);
		if (p.source && !p.refused)
			idc_buf_printf(b, "%s=%u %u (%s)\n", key, (unsigned)p.start,
				       (unsigned)p.count, p.source);
		else if (p.source)
			idc_buf_printf(
			    b, "%s=none (%s %u %u refused: ids in it may belong to %s)\n", key,
			    p.source, (unsigned)p.start, (unsigned)p.count, p.refused);
		else
			idc_buf_printf(b, "%s=none%s\n", key,
				       dir->start == CACHE_SUBID_UNUSABLE
					   ? " (the directory's value is no range)"
					   : "");
	}
}

int subid_reply_ranges(struct daemon *dm, size_t i, const struct cache_user *u,
		       const struct proto_req *req, struct idc_buf *out)
{
	uint32_t start, count;
	bool have = range_of(dm, i, u, req->what, &start, &count);
	size_t at;
	int rc = proto_reply_begin(out, req->cmd, PROTO_ST_OK, &at);
	rc = rc ? rc : proto_put_u32(out, u->uid);
	rc = rc ? rc : proto_put_u32(out, have ? 1 : 0);
	rc = rc || !have ? rc : proto_put_u32(out, start);
	rc = rc || !have ? rc : proto_put_u32(out, count);
	return responder_finish(out, req->cmd, at, rc);
}

/* ==== owners ==================================================================== */

struct owners {
	struct daemon *dm;
	uint32_t kind, id;
	uint32_t uids[64]; /* a reply holds at most this many */
	size_t n;
};

static void owners_add(struct owners *o, uint32_t uid)
{
	for (size_t k = 0; k < o->n; k++)
		if (o->uids[k] == uid)
			return;
	if (o->n < IDC_ARRAY_SIZE(o->uids))
		o->uids[o->n++] = uid;
}

/* The allocation's owner of o->id: the user holding the uid it maps to,
 * by passwd's rule for ids (the first domain that holds it), if that
 * domain allocates and the user has no range of its own. */
static int alloc_owner(struct owners *o, struct cache_reader *r)
{
	uint32_t uid, start, count;
	if (!subid_alloc_owner(&o->dm->cfg->subid.alloc, o->id, &uid))
		return 0;
	for (size_t i = 0; i < o->dm->ndomains; i++) {
		const char *dn = o->dm->domains[i]->cfg->name;
		struct cache_user u;
		int rc = cache_user_by_uid(r, &dn, 1, uid, &u, NULL);
		if (rc == -ENOENT || (rc == 0 && daemon_user_withheld(o->dm, i, &u)))
			continue;
		if (rc == 0 && range_of(o->dm, i, &u, o->kind, &start, &count) && o->id >= start &&
		    o->id - start < count)
			owners_add(o, u.uid);
		return rc;
	}
	return 0;
}

/* Whether domain i's users may carry directory ranges of kind. */
static bool reads_ranges(const struct domain *d, uint32_t kind)
{
	const struct lprov_config *l = d->cfg->ldap;
	return l && l->map[kind == PROTO_SUBID_UID ? LPROV_MAP_USER_SUBUID_NUMBER
						   : LPROV_MAP_USER_SUBGID_NUMBER];
}

/* ==== the directory ranges served ===============================================
 * Every cached user of a domain that reads range attributes and carries a
 * directory range of a kind it reads is remembered here with its ranges
 * and which of them are served (range_of's rule, after
 * daemon_user_withheld); the served ones are also in a subid_set per
 * kind, which an owners request searches: O(log n) per request whatever
 * the directory's size.
 *
 * Built from the cache once per state of what the checks see apart from
 * the directories' entries (daemon_checks_gen: the files domains, the
 * configuration, the host's files), none of which a local user may
 * change. A directory's commits keep it current entry by entry
 * (subid_ldap_change, told each change after the commit): the user that
 * changed is read again, and so are the users of later ldap domains that
 * its old or new name or uid withholds or no longer withholds (§11). A
 * commit whose changes are not known, or an update that failed, has it
 * built again on the next request. */
struct served_user {
	uint64_t hash;                 /* user_hash(domain, name) */
	uint32_t domain, uid;          /* index in dm->domains */
	struct cache_subid_range r[2]; /* served, by kind - PROTO_SUBID_UID; count 0: none */
	char name[];                   /* as stored */
};

struct subid_served {
	uint64_t gen;              /* daemon_checks_gen() when built; 0: to build */
	struct served_user **slot; /* by hash, linear probing; cap a power of two */
	size_t cap, n;
	struct subid_set *set[2]; /* the served ranges, by kind */
	int err;                  /* of the last build: requests fail until the next */
};

/* The table's key: a name's hash under the cache's case-ignoring rule
 * (every spelling a check by name may equate shares it), per domain. */
static uint64_t user_hash(size_t domain, const char *name)
{
	return cache_name_hash(CACHE_NAMES_CASE_IGNORE, name, 0x5ab1dull + domain);
}

static size_t slot_of(const struct subid_served *s, uint64_t hash)
{
	return (size_t)(hash ^ hash >> 29) & (s->cap - 1);
}

/* The slot holding domain's user name exactly, or s->cap. */
static size_t slot_find(const struct subid_served *s, size_t domain, const char *name)
{
	if (!s->cap)
		return 0;
	uint64_t h = user_hash(domain, name);
	for (size_t k = slot_of(s, h); s->slot[k]; k = (k + 1) & (s->cap - 1)) {
		const struct served_user *e = s->slot[k];
		if (e->hash == h && e->domain == domain && strcmp(e->name, name) == 0)
			return k;
	}
	return s->cap;
}

static void slot_put(struct subid_served *s, struct served_user *e)
{
	size_t k = slot_of(s, e->hash);
	while (s->slot[k])
		k = (k + 1) & (s->cap - 1);
	s->slot[k] = e;
	s->n++;
}

static int slots_grow(struct subid_served *s)
{
	if ((s->n + 1) * 4 <= s->cap * 3)
		return 0;
	size_t cap = s->cap ? s->cap * 2 : 1024, old = s->cap;
	struct served_user **v = calloc(cap, sizeof(*v)), **was = s->slot;
	if (!v)
		return -ENOMEM;
	s->slot = v;
	s->cap = cap;
	s->n = 0;
	for (size_t k = 0; k < old; k++)
		if (was[k])
			slot_put(s, was[k]);
	free(was);
	return 0;
}

/* Empty slot k, moving the entries after it back so that each stays
 * reachable from its own slot (linear probing's deletion). */
static void slot_clear(struct subid_served *s, size_t k)
{
	size_t mask = s->cap - 1;
	s->slot[k] = NULL;
	s->n--;
	for (size_t j = (k + 1) & mask; s->slot[j]; j = (j + 1) & mask) {
		size_t home = slot_of(s, s->slot[j]->hash);
		/* it may move to k when k lies cyclically in [home, j) */
		if (((j - home) & mask) >= ((j - k) & mask)) {
			s->slot[k] = s->slot[j];
			s->slot[j] = NULL;
			k = j;
		}
	}
}

static void unserve(struct subid_served *s, const struct served_user *e)
{
	for (int k = 0; k < 2; k++)
		if (e->r[k].count)
			subid_set_del(s->set[k], e->r[k].start, e->r[k].count, e->uid);
}

/* Forget domain's user name, if remembered. */
static void forget(struct subid_served *s, size_t domain, const char *name)
{
	size_t k = slot_find(s, domain, name);
	if (k == s->cap)
		return;
	struct served_user *e = s->slot[k];
	unserve(s, e);
	slot_clear(s, k);
	free(e);
}

/* Remember user u of domain i, which is not yet, when it carries a
 * directory range of a kind its domain reads (withheld or not: a change
 * elsewhere may let it be served), its served ranges into the sets. 0 or
 * -ENOMEM. */
static int remember(struct daemon *dm, struct subid_served *s, size_t i, const struct cache_user *u)
{
	bool reads[2], any = false;
	for (uint32_t kind = PROTO_SUBID_UID; kind <= PROTO_SUBID_GID; kind++) {
		const struct cache_subid_range *dir =
		    kind == PROTO_SUBID_UID ? &u->subuid : &u->subgid;
		reads[kind - PROTO_SUBID_UID] = dir->count && reads_ranges(dm->domains[i], kind);
		any |= reads[kind - PROTO_SUBID_UID];
	}
	if (!any)
		return 0;
	size_t len = strlen(u->name);
	struct served_user *e = calloc(1, sizeof(*e) + len + 1);
	if (!e || slots_grow(s) < 0) {
		free(e);
		return -ENOMEM;
	}
	*e = (struct served_user){user_hash(i, u->name), (uint32_t)i, u->uid, {{0, 0}, {0, 0}}};
	memcpy(e->name, u->name, len + 1);
	slot_put(s, e);
	if (daemon_user_withheld(dm, i, u))
		return 0;
	for (uint32_t kind = PROTO_SUBID_UID; kind <= PROTO_SUBID_GID; kind++) {
		struct cache_subid_range r;
		if (!reads[kind - PROTO_SUBID_UID] ||
		    !range_of(dm, i, u, kind, &r.start, &r.count) ||
		    !subid_range_ok(r.start, r.count))
			continue;
		if (subid_set_add(s->set[kind - PROTO_SUBID_UID], r.start, r.count, u->uid) < 0)
			return -ENOMEM; /* what it has served so far is taken away with it */
		e->r[kind - PROTO_SUBID_UID] = r;
	}
	return 0;
}

static void served_clear(struct subid_served *s)
{
	for (size_t k = 0; k < s->cap; k++)
		free(s->slot[k]);
	free(s->slot);
	s->slot = NULL;
	s->cap = s->n = 0;
	for (int k = 0; k < 2; k++) {
		subid_set_free(s->set[k]);
		s->set[k] = NULL;
	}
}

static bool reads_any(const struct domain *d)
{
	return reads_ranges(d, PROTO_SUBID_UID) || reads_ranges(d, PROTO_SUBID_GID);
}

struct served_build {
	struct daemon *dm;
	size_t domain;
	struct subid_served *s;
};

static int served_user(const struct cache_user *u, uint64_t key, void *arg)
{
	struct served_build *b = arg;
	(void)key;
	return remember(b->dm, b->s, b->domain, u);
}

/* Every cached user of the domains that read ranges, read on r. */
static void served_build(struct daemon *dm, struct subid_served *s, struct cache_reader *r)
{
	uint64_t t0 = idc_now_ns();
	struct served_build b = {dm, 0, s};
	served_clear(s);
	(void)daemon_checks_failed(dm); /* the build's own checks are what count */
	s->err = 0;
	for (int k = 0; k < 2 && !s->err; k++)
		s->err = (s->set[k] = subid_set_new()) ? 0 : -ENOMEM;
	for (size_t i = 0; !s->err && i < dm->ndomains; i++) {
		b.domain = i;
		if (reads_any(dm->domains[i]))
			s->err = cache_enum_users_unsorted(r, dm->domains[i]->cfg->name,
							   served_user, &b);
	}
	int failed = daemon_checks_failed(dm); /* a user withheld for it may be served */
	s->err = s->err ? s->err : failed;
	if (s->err)
		served_clear(s);
	dm->subid_builds++;
	dm->subid_build_ns += idc_now_ns() - t0;
}

static struct subid_served *served(struct daemon *dm, struct cache_reader *r)
{
	uint64_t gen = daemon_checks_gen(dm);
	struct subid_served *s = dm->subid_served;
	if (!s && !(s = dm->subid_served = calloc(1, sizeof(*s))))
		return NULL;
	if (s->gen == gen)
		return s;
	served_build(dm, s, r);
	s->gen = s->err ? 0 : gen; /* a build that failed is made again next time */
	return s;
}

void subid_free(struct daemon *dm)
{
	if (dm->subid_served)
		served_clear(dm->subid_served);
	free(dm->subid_served);
	dm->subid_served = NULL;
}

/* ---- kept current by the directories' commits ---- */

/* Domain i's user name as the cache holds it now, remembered afresh. */
static int reread(struct daemon *dm, struct subid_served *s, struct cache_reader *r, size_t i,
		  const char *name)
{
	const char *dn = dm->domains[i]->cfg->name;
	struct cache_user u;
	forget(s, i, name);
	int rc = cache_user_by_name(r, &dn, 1, name, true, &u, NULL);
	if (rc == -ENOENT)
		return 0;
	return rc < 0 ? rc : remember(dm, s, i, &u);
}

struct names {
	char **v;
	size_t n, cap;
};

static int names_add(const char *name, void *arg)
{
	struct names *ns = arg;
	if (ns->n == ns->cap) {
		size_t cap = ns->cap ? ns->cap * 2 : 8;
		char **grown = realloc(ns->v, cap * sizeof(*grown));
		if (!grown)
			return -ENOMEM;
		ns->v = grown;
		ns->cap = cap;
	}
	return (ns->v[ns->n] = strdup(name)) ? (ns->n++, 0) : -ENOMEM;
}

static void names_free(struct names *ns)
{
	for (size_t k = 0; k < ns->n; k++)
		free(ns->v[k]);
	free(ns->v);
}

/* Into ns, the users of domain j remembered that a name of another domain
 * may withhold (§11's check by name: every spelling it may equate). Every
 * user with a range is remembered, so these are all whose served ranges a
 * change of that name may change. */
static int remembered_like(const struct subid_served *s, size_t j, const char *name,
			   struct names *ns)
{
	if (!s->cap)
		return 0;
	uint64_t h = user_hash(j, name);
	int rc = 0;
	for (size_t k = slot_of(s, h); !rc && s->slot[k]; k = (k + 1) & (s->cap - 1))
		if (s->slot[k]->hash == h && s->slot[k]->domain == j)
			rc = names_add(s->slot[k]->name, ns);
	return rc;
}

/* The users of domain j, after the domain i that changed, whose
 * withholding ch's names and uids decide: into ns. */
static int shadowed(struct daemon *dm, const struct subid_served *s, struct cache_reader *r,
		    size_t j, const struct cache_change *ch, struct names *ns)
{
	const char *dn = dm->domains[j]->cfg->name;
	const char *name[2] = {ch->old_name, ch->new_name};
	uint32_t id[2] = {ch->old_id, ch->new_id};
	int rc = 0;
	for (int k = 0; k < 2 && !rc; k++) {
		if (!name[k])
			continue;
		rc = remembered_like(s, j, name[k], ns);
		rc = rc ? rc : cache_linked(r, dn, CACHE_LINK_UID, NULL, id[k], names_add, ns);
	}
	return rc;
}

/* ch of domain i, read on r: 0, or an error (then everything is read
 * again on the next request). */
static int apply_change(struct daemon *dm, struct subid_served *s, struct cache_reader *r, size_t i,
			const struct cache_change *ch)
{
	int rc = 0;
	if (reads_any(dm->domains[i])) {
		rc = ch->old_name ? reread(dm, s, r, i, ch->old_name) : 0;
		if (!rc && ch->new_name && (!ch->old_name || strcmp(ch->old_name, ch->new_name)))
			rc = reread(dm, s, r, i, ch->new_name);
	}
	for (size_t j = i + 1; !rc && j < dm->ndomains; j++) {
		const struct domain *d = dm->domains[j];
		if (!d->ldap || d->cfg->allow_local_overlap || !reads_any(d))
			continue;
		struct names ns = {NULL, 0, 0};
		rc = shadowed(dm, s, r, j, ch, &ns);
		for (size_t k = 0; !rc && k < ns.n; k++)
			rc = reread(dm, s, r, j, ns.v[k]);
		names_free(&ns);
	}
	int failed = daemon_checks_failed(dm);
	return rc ? rc : failed;
}

void subid_ldap_change(struct daemon *dm, const struct domain *d, const struct cache_change *ch)
{
	struct subid_served *s = dm->subid_served;
	if (!s || !s->gen || (ch && ch->group))
		return; /* not built (it will be from the cache), or no user */
	size_t i = 0;
	while (i < dm->ndomains && dm->domains[i] != d)
		i++;
	/* The checks must read the committed cache: a reader of theirs left
	 * open (not between requests, as the provider tells changes) may
	 * predate the commit, and so may a state of what they see that
	 * changed (a reload). */
	if (!ch || i == dm->ndomains || dm->aside || s->gen != daemon_checks_gen(dm)) {
		s->gen = 0;
		return;
	}
	struct cache_reader *r;
	int rc = cache_reader_begin(dm->cache, &r);
	if (rc == 0) {
		rc = apply_change(dm, s, r, i, ch);
		cache_reader_end(r);
	}
	daemon_aside_end(dm);
	dm->subid_updates++;
	if (rc < 0) {
		idc_log(IDC_LOG_WARN,
			"subordinate ids: a change could not be followed (%s); "
			"all are read again when next asked",
			idc_strerror(rc));
		s->gen = 0;
	}
}

static int owner_found(uint32_t uid, void *arg)
{
	struct owners *o = arg;
	owners_add(o, uid);
	return o->n == IDC_ARRAY_SIZE(o->uids); /* a reply holds no more */
}

/* The directory ranges are those of the cached users: the owners of ranges
 * the cache does not hold yet are not known. */
int subid_reply_owners(struct daemon *dm, const struct proto_req *req, struct idc_buf *out)
{
	struct cache_reader *r = daemon_reader(dm);
	struct owners o = {.dm = dm, .kind = req->what, .id = req->id};
	int rc = r ? alloc_owner(&o, r) : -EIO;
	struct subid_served *s = rc == 0 ? served(dm, r) : NULL;
	if (rc == 0)
		rc = !s ? -ENOMEM : s->err;
	if (rc == 0)
		(void)subid_set_find(s->set[o.kind - PROTO_SUBID_UID], o.id, owner_found, &o);
	if (rc < 0) {
		idc_log(IDC_LOG_WARN, "SUBID_OWNERS: cache lookup failed: %s", idc_strerror(rc));
		return proto_reply_status(out, req->cmd, PROTO_ST_UNAVAIL, NULL);
	}
	size_t at;
	rc = proto_reply_begin(out, req->cmd, PROTO_ST_OK, &at);
	rc = rc ? rc : proto_put_u32(out, (uint32_t)o.n);
	for (size_t k = 0; rc == 0 && k < o.n; k++)
		rc = proto_put_u32(out, o.uids[k]);
	return responder_finish(out, req->cmd, at, rc);
}
