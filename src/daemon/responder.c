/*
 * responder: the NSS requests — lookups by name and id, initgroups, and
 * passwd/group enumeration — answered from the cache.
 *
 * Domains are searched in the configured order, each with its own case
 * rule, and the first that knows the key answers. A name the cache could
 * never hold is NOTFOUND without a lookup. The password field is "x"
 * (users and groups alike) unless the provider kept one that says nothing
 * secret ("", "*", "!": cache_passwd_public): idcache never holds or
 * serves password hashes.
 *
 * An extra record (a later line of a repeated name) found by id is not
 * written to the maps: there it would answer for the name, which belongs
 * to the first line.
 *
 * A read transaction is shared by the requests of one connection's batch
 * (daemon_reader) and ended when the batch is done, so a refresh committed
 * between two batches is seen by the next one.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon/daemon.h"

#define NO_PASSWORD "x"

/* ==== shared read transaction =================================================== */

struct cache_reader *daemon_reader(struct daemon *dm)
{
	if (dm->reader)
		return dm->reader;
	int rc = cache_reader_begin(dm->cache, &dm->reader);
	if (rc < 0) {
		idc_log(IDC_LOG_ERR, "cannot read the cache: %s", idc_strerror(rc));
		dm->reader = NULL;
	}
	return dm->reader;
}

void daemon_reader_end(struct daemon *dm)
{
	cache_reader_end(dm->reader);
	dm->reader = NULL;
}

/* ==== reply helpers =================================================================== */

static struct proto_str pstr(const char *s)
{
	s = s ? s : "";
	return (struct proto_str){s, (uint32_t)strlen(s)};
}

const char *daemon_passwd_field(const char *kept)
{
	return cache_passwd_public(kept) ? kept : NO_PASSWORD;
}

static struct proto_passwd to_proto(const struct cache_user *u)
{
	return (struct proto_passwd){pstr(u->name),  pstr(daemon_passwd_field(u->passwd)),
				     u->uid,         u->gid,
				     pstr(u->gecos), pstr(u->dir),
				     pstr(u->shell)};
}

static int put_user(struct idc_buf *out, const struct cache_user *u)
{
	struct proto_passwd pw = to_proto(u);
	return proto_put_passwd(out, &pw);
}

static int put_group(struct idc_buf *out, const struct cache_group *g)
{
	return proto_put_group_cstr(out, g->name, daemon_passwd_field(g->passwd), g->gid,
				    g->members, (uint32_t)g->nmembers);
}

/* Close the frame begun at start; a failure replaces it with ERROR. */
static int finish(struct idc_buf *out, uint32_t cmd, size_t start, int rc)
{
	if (rc == 0)
		rc = proto_reply_end(out, start);
	if (rc == 0)
		return 0;
	out->len = start;
	idc_log(IDC_LOG_WARN, "%s: cannot build the reply: %s", proto_cmd_name(cmd),
		idc_strerror(rc));
	return proto_reply_status(out, cmd, PROTO_ST_ERROR, "reply too large or out of memory");
}

/* NOTFOUND for -ENOENT; anything else is a cache failure, logged here,
 * and UNAVAIL so glibc moves on to the next source. */
static int reply_failure(struct idc_buf *out, uint32_t cmd, int rc)
{
	if (rc == -ENOENT)
		return proto_reply_status(out, cmd, PROTO_ST_NOTFOUND, NULL);
	idc_log(IDC_LOG_WARN, "%s: cache lookup failed: %s", proto_cmd_name(cmd), idc_strerror(rc));
	return proto_reply_status(out, cmd, PROTO_ST_UNAVAIL, NULL);
}

/* An expired entry is served, and its domain asked to refresh (at most
 * once a minute, so a damaged timestamps db cannot cause a refresh storm). */
static void note_meta(struct daemon *dm, const struct cache_meta *meta)
{
	struct domain *d = meta->expired && meta->domain ? daemon_domain(dm, meta->domain) : NULL;
	int64_t now = (int64_t)time(NULL);
	if (!d || now - d->last_expired_refresh < DAEMON_EXPIRED_MIN_S)
		return;
	d->last_expired_refresh = now;
	idc_log(IDC_LOG_DEBUG, "domain %s: served an expired entry; refreshing", d->cfg->name);
	domain_schedule(d, 0, true);
}

/* ==== lookups =============================================================================
 * Domains are asked in the configured order. A files domain answers from the
 * cache or passes. An ldap domain answers from the cache when the entry is
 * there and fresh; when it is missing, the directory is asked and the reply
 * waits (struct pending) — the connection takes no later request until it
 * is queued, so replies stay in order, while other connections are served.
 * When the directory has answered, the walk runs again over the cache,
 * without asking the directories already asked; offline or NOTFOUND moves
 * on to the next domain.
 *
 * Expired ldap entries are served at once and refreshed in the background
 * (DESIGN §5: served while a refresh is pending): `id` stays a cache read,
 * and what the refresh changes is seen by the next lookup. An ldap user's
 * group list is complete only once initgroups was fetched from the
 * directory (ldapdom_initgroups_state); until then initgroups waits for it,
 * like a miss. */

struct pending {
	struct daemon *dm;
	struct conn *c; /* NULL once the connection closed */
	struct proto_req req;
	char name[PROTO_NAME_MAX + 1];
	size_t next;          /* first domain whose directory may still be asked */
	struct domain *asked; /* the domain asked last (alive while its callback runs) */
	enum ldap_lookup_result res;
};

enum { WALK_NEXT = 0, WALK_ANSWER, WALK_DEFER };

struct walk {
	struct daemon *dm;
	struct conn *c;
	const struct proto_req *req;
	struct pending *p; /* when resumed, else NULL until the walk defers */
};

static enum ldap_lookup_kind lookup_kind(uint32_t cmd)
{
	switch (cmd) {
	case PROTO_CMD_GETPWNAM:
		return LDAP_LOOKUP_PWNAM;
	case PROTO_CMD_GETPWUID:
		return LDAP_LOOKUP_PWUID;
	case PROTO_CMD_GETGRNAM:
		return LDAP_LOOKUP_GRNAM;
	case PROTO_CMD_GETGRGID:
		return LDAP_LOOKUP_GRGID;
	default:
		return LDAP_LOOKUP_INITGROUPS;
	}
}

static bool by_name(uint32_t cmd)
{
	return cmd == PROTO_CMD_GETPWNAM || cmd == PROTO_CMD_GETGRNAM ||
	       cmd == PROTO_CMD_INITGROUPS;
}

static int handle_lookup(struct walk *w, struct idc_buf *out);

/* After the batch in which the directory answered: run the request again. */
static void resume(void *arg)
{
	struct pending *p = arg;
	struct conn *c = p->c;
	if (!c) {
		free(p);
		return;
	}
	if (p->res == LDAP_LOOKUP_FOUND && p->req.cmd == PROTO_CMD_INITGROUPS && p->asked)
		ldapdom_initgroups_note(p->asked, p->name);
	c->wait = NULL;
	struct walk w = {p->dm, c, &p->req, p};
	int rc = handle_lookup(&w, &c->out);
	daemon_reader_end(p->dm);
	if (c->wait != p)
		free(p);
	conn_resume(c, rc);
}

/* The provider's callback (from ldap_domain_process, or at once on a
 * failure): continue after the current batch, outside the provider. */
static void on_looked(enum ldap_lookup_result res, void *arg)
{
	struct pending *p = arg;
	p->res = res;
	if (res == LDAP_LOOKUP_FAILED)
		p->asked = NULL; /* may be a domain being freed */
	if (loop_defer(&p->dm->loop, resume, p) < 0 && p->c)
		conn_close(p->c, "out of memory"); /* p is leaked: it may still be referenced */
}

void responder_detach(struct conn *c)
{
	if (c->wait)
		c->wait->c = NULL; /* freed when the directory answers */
	c->wait = NULL;
}

static struct pending *pending_new(struct walk *w)
{
	struct pending *p = calloc(1, sizeof(*p));
	if (!p)
		return NULL;
	p->dm = w->dm;
	p->c = w->c;
	p->req = *w->req;
	if (by_name(w->req->cmd)) {
		size_t n = w->req->name.len < PROTO_NAME_MAX ? w->req->name.len : PROTO_NAME_MAX;
		memcpy(p->name, w->req->name.p, n);
		p->req.name.p = p->name;
		p->req.name.len = (uint32_t)n;
	}
	return p;
}

/* Ask domain i's directory. WALK_DEFER when the reply must wait for it,
 * else WALK_NEXT (answered at once: not found, offline, failed). */
static int ask(struct walk *w, size_t i, int *err)
{
	struct domain *d = w->dm->domains[i];
	struct pending *p = w->p ? w->p : pending_new(w);
	if (!p) {
		*err = -ENOMEM;
		return WALK_NEXT;
	}
	p->next = i + 1;
	p->asked = d;
	enum ldap_lookup_result res =
	    ldapdom_lookup(d, lookup_kind(w->req->cmd), by_name(w->req->cmd) ? p->name : NULL,
			   w->req->id, on_looked, p);
	if (res == LDAP_LOOKUP_PENDING) {
		w->p = p;
		w->c->wait = p;
		return WALK_DEFER;
	}
	if (!w->p)
		free(p);
	return WALK_NEXT;
}

/* Domain i's cache said rc (0 found, -ENOENT missing) with meta;
 * complete: the entry holds all the request needs. What to do next. */
static int settle(struct walk *w, size_t i, int rc, const struct cache_meta *meta, bool complete,
		  int *err)
{
	struct domain *d = w->dm->domains[i];
	bool may_ask = d->ldap && (!w->p || i >= w->p->next);
	if (rc < 0 && rc != -ENOENT) {
		*err = rc;
		return WALK_ANSWER;
	}
	if (!d->ldap) {
		if (rc == 0)
			note_meta(w->dm, meta);
		return rc == 0 ? WALK_ANSWER : WALK_NEXT;
	}
	if (rc == 0 && complete) {
		if (meta->expired && may_ask) /* serve now, refresh behind */
			ldapdom_refresh(d, lookup_kind(w->req->cmd),
					by_name(w->req->cmd) ? w->req->name.p : NULL, w->req->id);
		return WALK_ANSWER;
	}
	int step = may_ask ? ask(w, i, err) : WALK_NEXT;
	if (step == WALK_DEFER || *err)
		return step == WALK_DEFER ? WALK_DEFER : WALK_ANSWER;
	return rc == 0 ? WALK_ANSWER : WALK_NEXT; /* incomplete: the cache's best */
}

static int user_in(struct cache_reader *r, const struct config_domain *cfg,
		   const struct proto_req *req, struct cache_user *u, struct cache_meta *meta)
{
	const char *dn = cfg->name;
	if (req->cmd == PROTO_CMD_GETPWUID)
		return cache_user_by_uid(r, &dn, 1, req->id, u, meta);
	return cache_user_by_name(r, &dn, 1, req->name.p, cfg->case_sensitive, u, meta);
}

static int group_in(struct cache_reader *r, const struct config_domain *cfg,
		    const struct proto_req *req, struct cache_group *g, struct cache_meta *meta)
{
	const char *dn = cfg->name;
	if (req->cmd == PROTO_CMD_GETGRGID)
		return cache_group_by_gid(r, &dn, 1, req->id, g, meta);
	return cache_group_by_name(r, &dn, 1, req->name.p, cfg->case_sensitive, g, meta);
}

static int do_user(struct walk *w, struct idc_buf *out)
{
	struct daemon *dm = w->dm;
	const struct proto_req *req = w->req;
	struct cache_reader *r = daemon_reader(dm);
	struct cache_user u;
	int rc = !r ? -EIO : -ENOENT, step = WALK_NEXT;
	if (r && req->cmd == PROTO_CMD_GETPWNAM && !cache_name_valid(req->name.p, req->name.len))
		step = WALK_ANSWER;
	for (size_t i = 0; r && step == WALK_NEXT && i < dm->ndomains; i++) {
		struct cache_meta meta = {0};
		rc = user_in(r, dm->domains[i]->cfg, req, &u, &meta);
		int err = 0;
		step = settle(w, i, rc, &meta, true, &err);
		rc = err ? err : rc;
	}
	if (step == WALK_DEFER)
		return 0;
	if (rc < 0)
		return reply_failure(out, req->cmd, rc);
	struct proto_passwd pw = to_proto(&u);
	bool by_id = req->cmd == PROTO_CMD_GETPWUID;
	if (!(by_id && u.extra))
		daemon_mc_put_passwd(dm, &pw, by_id);
	size_t start;
	rc = proto_reply_begin(out, req->cmd, PROTO_ST_OK, &start);
	return finish(out, req->cmd, start, rc ? rc : put_user(out, &u));
}

static int do_group(struct walk *w, struct idc_buf *out)
{
	struct daemon *dm = w->dm;
	const struct proto_req *req = w->req;
	struct cache_reader *r = daemon_reader(dm);
	struct cache_group g;
	int rc = !r ? -EIO : -ENOENT, step = WALK_NEXT;
	if (r && req->cmd == PROTO_CMD_GETGRNAM && !cache_name_valid(req->name.p, req->name.len))
		step = WALK_ANSWER;
	for (size_t i = 0; r && step == WALK_NEXT && i < dm->ndomains; i++) {
		struct cache_meta meta = {0};
		rc = group_in(r, dm->domains[i]->cfg, req, &g, &meta);
		int err = 0;
		step = settle(w, i, rc, &meta, true, &err);
		rc = err ? err : rc;
	}
	if (step == WALK_DEFER)
		return 0;
	if (rc < 0)
		return reply_failure(out, req->cmd, rc);
	bool by_id = req->cmd == PROTO_CMD_GETGRGID;
	if (!(by_id && g.extra))
		daemon_mc_put_group(dm, &g, by_id);
	size_t start;
	rc = proto_reply_begin(out, req->cmd, PROTO_ST_OK, &start);
	return finish(out, req->cmd, start, rc ? rc : put_group(out, &g));
}

/* The gids of name in domain cfg, into dm->gids (grown as
 * cache_initgroups asks). */
static int domain_gids(struct daemon *dm, struct cache_reader *r, const struct config_domain *cfg,
		       const char *name, size_t *n)
{
	const char *dn = cfg->name;
	int rc = cache_initgroups(r, &dn, 1, name, cfg->case_sensitive, dm->gids, dm->gids_cap, n);
	if (rc == -ERANGE) {
		uint32_t *grown = realloc(dm->gids, *n * sizeof(*grown));
		if (!grown)
			return -ENOMEM;
		dm->gids = grown;
		dm->gids_cap = *n;
		rc = cache_initgroups(r, &dn, 1, name, cfg->case_sensitive, dm->gids, dm->gids_cap,
				      n);
	}
	return rc;
}

static int do_initgroups(struct walk *w, struct idc_buf *out)
{
	struct daemon *dm = w->dm;
	const struct proto_req *req = w->req;
	struct cache_reader *r = daemon_reader(dm);
	size_t n = 0;
	int rc = !r ? -EIO : -ENOENT, step = WALK_NEXT;
	if (r && !cache_name_valid(req->name.p, req->name.len))
		step = WALK_ANSWER;
	for (size_t i = 0; r && step == WALK_NEXT && i < dm->ndomains; i++) {
		struct domain *d = dm->domains[i];
		struct cache_meta meta = {0};
		struct cache_user u;
		rc = user_in(r, d->cfg, req, &u, &meta);
		enum ldapdom_ig ig =
		    d->ldap ? ldapdom_initgroups_state(d, req->name.p) : LDAPDOM_IG_FRESH;
		bool complete = ig != LDAPDOM_IG_UNKNOWN;
		meta.expired |= ig == LDAPDOM_IG_EXPIRED;
		int err = 0;
		step = settle(w, i, rc, &meta, complete, &err);
		rc = err ? err : rc;
		if (step == WALK_ANSWER && rc == 0)
			rc = domain_gids(dm, r, d->cfg, req->name.p, &n);
	}
	if (step == WALK_DEFER)
		return 0;
	if (rc < 0)
		return reply_failure(out, req->cmd, rc);
	/* Keyed by the name asked: the cache found the user under it. */
	daemon_mc_put_initgroups(dm, req->name.p, dm->gids, n);
	size_t start;
	rc = proto_reply_begin(out, req->cmd, PROTO_ST_OK, &start);
	rc = rc ? rc : proto_put_u32(out, (uint32_t)n);
	for (size_t i = 0; rc == 0 && i < n; i++)
		rc = proto_put_u32(out, dm->gids[i]);
	return finish(out, req->cmd, start, rc);
}

static int handle_lookup(struct walk *w, struct idc_buf *out)
{
	switch (w->req->cmd) {
	case PROTO_CMD_GETPWNAM:
	case PROTO_CMD_GETPWUID:
		return do_user(w, out);
	case PROTO_CMD_GETGRNAM:
	case PROTO_CMD_GETGRGID:
		return do_group(w, out);
	default:
		return do_initgroups(w, out);
	}
}

/* ==== enumeration ==========================================================================
 * SET (or the first GET) takes a reference to a snapshot of every domain's
 * records in wire encoding; GETs hand it out in batches. A snapshot is
 * consistent (one read transaction) and unaffected by refreshes while a
 * client walks it, as with getpwent over a file replaced meanwhile. The
 * daemon keeps the latest snapshot of each map and reuses it while the
 * cache is unchanged. */

uint64_t daemon_data_gen(const struct daemon *dm)
{
	/* Every write to cache.mdb is a durable commit; configuration changes
	 * alter the domain list. Together they tell when a snapshot is stale. */
	return cache_durable_commits(dm->cache) * 1000003u + dm->config_gen;
}

static void snap_put(struct enum_snap *s)
{
	if (s && --s->refs == 0) {
		idc_buf_free(&s->recs);
		free(s->offs);
		free(s);
	}
}

void enum_cursor_free(struct enum_cursor *e)
{
	snap_put(e->snap);
	*e = (struct enum_cursor){0};
}

void enum_snaps_release(struct daemon *dm)
{
	for (size_t i = 0; i < 2; i++) {
		snap_put(dm->snaps[i]);
		dm->snaps[i] = NULL;
	}
}

static int snap_mark(struct enum_snap *s)
{
	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 1024;
		size_t *grown = realloc(s->offs, cap * sizeof(*grown));
		if (!grown)
			return -ENOMEM;
		s->offs = grown;
		s->cap = cap;
	}
	s->offs[s->n++] = s->recs.len;
	return 0;
}

static int add_user(const struct cache_user *u, void *arg)
{
	struct enum_snap *s = arg;
	int rc = snap_mark(s);
	return rc ? rc : put_user(&s->recs, u);
}

static int add_group(const struct cache_group *g, void *arg)
{
	struct enum_snap *s = arg;
	int rc = snap_mark(s);
	return rc ? rc : put_group(&s->recs, g);
}

static int snap_build(struct daemon *dm, bool users, struct enum_snap **out)
{
	struct cache_reader *r = daemon_reader(dm);
	struct enum_snap *s = calloc(1, sizeof(*s));
	int rc = !s ? -ENOMEM : r ? 0 : -EIO;
	for (size_t i = 0; rc == 0 && i < dm->ndomains; i++) {
		const char *dn = dm->domains[i]->cfg->name;
		rc = users ? cache_enum_users(r, dn, add_user, s)
			   : cache_enum_groups(r, dn, add_group, s);
	}
	if (rc == 0)
		rc = snap_mark(s); /* end of the last record */
	if (rc < 0) {
		if (s)
			s->refs = 1;
		snap_put(s);
		return rc;
	}
	s->n--; /* the end mark is not a record */
	s->gen = daemon_data_gen(dm);
	s->refs = 1; /* the daemon's */
	*out = s;
	return 0;
}

static int collect(struct daemon *dm, struct enum_cursor *e, bool users)
{
	enum_cursor_free(e);
	struct enum_snap **latest = &dm->snaps[users ? 0 : 1];
	if (!*latest || (*latest)->gen != daemon_data_gen(dm)) {
		struct enum_snap *s;
		int rc = snap_build(dm, users, &s);
		if (rc < 0)
			return rc;
		snap_put(*latest);
		*latest = s;
	}
	(*latest)->refs++;
	e->snap = *latest;
	e->pos = 0;
	return 0;
}

/* Records from the cursor while they fit max_count and max_bytes (a frame
 * always gets at least one). */
static int put_batch(struct enum_cursor *e, const struct proto_req *req, struct idc_buf *out,
		     size_t start)
{
	const struct enum_snap *s = e->snap;
	size_t count_at = out->len;
	uint32_t count = 0;
	int rc = proto_put_u32(out, 0);
	while (rc == 0 && e->pos < s->n && (req->max_count == 0 || count < req->max_count)) {
		size_t len = s->offs[e->pos + 1] - s->offs[e->pos];
		size_t frame = out->len - start + len;
		if (count > 0 &&
		    ((req->max_bytes && frame > req->max_bytes) || frame > PROTO_MAX_REPLY))
			break;
		rc = idc_buf_append(out, s->recs.data + s->offs[e->pos], len);
		count++;
		e->pos++;
	}
	proto_patch_u32(out, count_at, count);
	return rc;
}

static int enum_request(struct conn *c, const struct proto_req *req, struct idc_buf *out)
{
	bool users = req->cmd <= PROTO_CMD_ENDPWENT;
	struct enum_cursor *e = users ? &c->pw : &c->gr;
	int rc = 0;
	if (req->cmd == PROTO_CMD_ENDPWENT || req->cmd == PROTO_CMD_ENDGRENT) {
		enum_cursor_free(e);
		return proto_reply_status(out, req->cmd, PROTO_ST_OK, NULL);
	}
	bool set = req->cmd == PROTO_CMD_SETPWENT || req->cmd == PROTO_CMD_SETGRENT;
	if (set || !e->snap)
		rc = collect(c->dm, e, users);
	if (rc < 0)
		return reply_failure(out, req->cmd, rc == -ENOENT ? -EIO : rc);
	if (set)
		return proto_reply_status(out, req->cmd, PROTO_ST_OK, NULL);
	if (e->pos >= e->snap->n)
		return proto_reply_status(out, req->cmd, PROTO_ST_NOTFOUND, NULL);
	size_t start;
	rc = proto_reply_begin(out, req->cmd, PROTO_ST_OK, &start);
	return finish(out, req->cmd, start, rc ? rc : put_batch(e, req, out, start));
}

/* ==== dispatch ================================================================================ */

int responder_handle(struct conn *c, const struct proto_req *req, struct idc_buf *out)
{
	switch (req->cmd) {
	case PROTO_CMD_GETPWNAM:
	case PROTO_CMD_GETPWUID:
	case PROTO_CMD_GETGRNAM:
	case PROTO_CMD_GETGRGID:
	case PROTO_CMD_INITGROUPS: {
		struct walk w = {c->dm, c, req, NULL};
		return handle_lookup(&w, out);
	}
	case PROTO_CMD_SETPWENT:
	case PROTO_CMD_GETPWENT:
	case PROTO_CMD_ENDPWENT:
	case PROTO_CMD_SETGRENT:
	case PROTO_CMD_GETGRENT:
	case PROTO_CMD_ENDGRENT:
		return enum_request(c, req, out);
	case PROTO_CMD_MCMAP:
		return daemon_mc_share(c, req->id, out);
	default:
		return proto_reply_status(out, req->cmd, PROTO_ST_BADREQ, "not a lookup");
	}
}
