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

/* The directory ranges served, both kinds, found among the cached users
 * once per state of what the checks see (daemon_checks_gen): an owners
 * request scans this array, not the cache. */
struct served_range {
	uint32_t start, count, uid, kind;
};

struct subid_served {
	uint64_t gen; /* 0: not built */
	struct served_range *v;
	size_t n, cap;
	int err; /* of the last build: every request fails until the next */
};

struct served_build {
	struct daemon *dm;
	size_t domain;
	struct subid_served *s;
};

static int served_push(struct subid_served *s, const struct served_range *r)
{
	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 64;
		struct served_range *grown = realloc(s->v, cap * sizeof(*grown));
		if (!grown)
			return -ENOMEM;
		s->v = grown;
		s->cap = cap;
	}
	s->v[s->n++] = *r;
	return 0;
}

static int served_user(const struct cache_user *u, uint64_t key, void *arg)
{
	struct served_build *b = arg;
	(void)key;
	if ((!u->subuid.count && !u->subgid.count) || daemon_user_withheld(b->dm, b->domain, u))
		return 0;
	int rc = 0;
	for (uint32_t kind = PROTO_SUBID_UID; kind <= PROTO_SUBID_GID && !rc; kind++) {
		const struct cache_subid_range *dir =
		    kind == PROTO_SUBID_UID ? &u->subuid : &u->subgid;
		struct served_range r = {0, 0, u->uid, kind};
		if (dir->count && reads_ranges(b->dm->domains[b->domain], kind) &&
		    range_of(b->dm, b->domain, u, kind, &r.start, &r.count))
			rc = served_push(b->s, &r);
	}
	return rc;
}

static struct subid_served *served(struct daemon *dm, struct cache_reader *r)
{
	uint64_t gen = daemon_checks_gen(dm);
	struct subid_served *s = dm->subid_served;
	if (!s && !(s = dm->subid_served = calloc(1, sizeof(*s))))
		return NULL;
	if (s->gen == gen)
		return s;
	struct served_build b = {dm, 0, s};
	s->n = 0;
	s->err = 0;
	for (size_t i = 0; !s->err && i < dm->ndomains; i++) {
		b.domain = i;
		if (reads_ranges(dm->domains[i], PROTO_SUBID_UID) ||
		    reads_ranges(dm->domains[i], PROTO_SUBID_GID))
			s->err = cache_enum_users_unsorted(r, dm->domains[i]->cfg->name,
							   served_user, &b);
	}
	s->gen = gen;
	return s;
}

void subid_free(struct daemon *dm)
{
	if (dm->subid_served)
		free(dm->subid_served->v);
	free(dm->subid_served);
	dm->subid_served = NULL;
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
	for (size_t k = 0; rc == 0 && k < s->n; k++)
		if (s->v[k].kind == o.kind && o.id >= s->v[k].start &&
		    o.id - s->v[k].start < s->v[k].count)
			owners_add(&o, s->v[k].uid);
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
