/*
 * responder: the NSS requests — lookups by name and id, initgroups, and
 * passwd/group enumeration — answered from the cache.
 *
 * Domains are searched in the configured order, each with its own case
 * rule, and the first that knows the key answers. A name the cache could
 * never hold is NOTFOUND without a lookup. The password field is always
 * "x" (users and groups alike): idcache never holds or serves password
 * hashes, and "x" is what shadow-based systems put there anyway.
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

static int put_user(struct idc_buf *out, const struct cache_user *u)
{
	struct proto_passwd pw = {pstr(u->name),  pstr(NO_PASSWORD), u->uid,        u->gid,
				  pstr(u->gecos), pstr(u->dir),      pstr(u->shell)};
	return proto_put_passwd(out, &pw);
}

static int put_group(struct idc_buf *out, const struct cache_group *g)
{
	return proto_put_group_cstr(out, g->name, NO_PASSWORD, g->gid, g->members,
				    (uint32_t)g->nmembers);
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

/* ==== lookups ============================================================================= */

static int user_by_name(struct daemon *dm, struct cache_reader *r, const char *name,
			struct cache_user *u)
{
	struct cache_meta meta;
	for (size_t i = 0; i < dm->ndomains; i++) {
		const struct config_domain *cfg = dm->domains[i]->cfg;
		const char *dn = cfg->name;
		int rc = cache_user_by_name(r, &dn, 1, name, cfg->case_sensitive, u, &meta);
		if (rc == 0)
			note_meta(dm, &meta);
		if (rc != -ENOENT)
			return rc;
	}
	return -ENOENT;
}

static int group_by_name(struct daemon *dm, struct cache_reader *r, const char *name,
			 struct cache_group *g)
{
	struct cache_meta meta;
	for (size_t i = 0; i < dm->ndomains; i++) {
		const struct config_domain *cfg = dm->domains[i]->cfg;
		const char *dn = cfg->name;
		int rc = cache_group_by_name(r, &dn, 1, name, cfg->case_sensitive, g, &meta);
		if (rc == 0)
			note_meta(dm, &meta);
		if (rc != -ENOENT)
			return rc;
	}
	return -ENOENT;
}

static int do_user(struct daemon *dm, const struct proto_req *req, struct idc_buf *out)
{
	struct cache_reader *r = daemon_reader(dm);
	struct cache_user u;
	struct cache_meta meta = {0};
	int rc = !r ? -EIO : dm->ndomains == 0 ? -ENOENT : 0;
	if (rc == 0 && req->cmd == PROTO_CMD_GETPWNAM)
		rc = cache_name_valid(req->name.p, req->name.len)
			 ? user_by_name(dm, r, req->name.p, &u)
			 : -ENOENT;
	else if (rc == 0)
		rc = cache_user_by_uid(r, dm->names, dm->ndomains, req->id, &u, &meta);
	if (rc < 0)
		return reply_failure(out, req->cmd, rc);
	note_meta(dm, &meta);
	struct proto_passwd pw = {pstr(u.name),  pstr(NO_PASSWORD), u.uid,        u.gid,
				  pstr(u.gecos), pstr(u.dir),       pstr(u.shell)};
	daemon_mc_put_passwd(dm, &pw, req->cmd == PROTO_CMD_GETPWUID);
	size_t start;
	rc = proto_reply_begin(out, req->cmd, PROTO_ST_OK, &start);
	return finish(out, req->cmd, start, rc ? rc : put_user(out, &u));
}

static int do_group(struct daemon *dm, const struct proto_req *req, struct idc_buf *out)
{
	struct cache_reader *r = daemon_reader(dm);
	struct cache_group g;
	struct cache_meta meta = {0};
	int rc = !r ? -EIO : dm->ndomains == 0 ? -ENOENT : 0;
	if (rc == 0 && req->cmd == PROTO_CMD_GETGRNAM)
		rc = cache_name_valid(req->name.p, req->name.len)
			 ? group_by_name(dm, r, req->name.p, &g)
			 : -ENOENT;
	else if (rc == 0)
		rc = cache_group_by_gid(r, dm->names, dm->ndomains, req->id, &g, &meta);
	if (rc < 0)
		return reply_failure(out, req->cmd, rc);
	note_meta(dm, &meta);
	daemon_mc_put_group(dm, g.name, g.gid, (const char *const *)g.members, g.nmembers,
			    req->cmd == PROTO_CMD_GETGRGID);
	size_t start;
	rc = proto_reply_begin(out, req->cmd, PROTO_ST_OK, &start);
	return finish(out, req->cmd, start, rc ? rc : put_group(out, &g));
}

/* The gids of name in the first domain that knows the user, into
 * dm->gids (grown as cache_initgroups asks). */
static int user_gids(struct daemon *dm, struct cache_reader *r, const char *name, size_t *n)
{
	for (size_t i = 0; i < dm->ndomains; i++) {
		const struct config_domain *cfg = dm->domains[i]->cfg;
		const char *dn = cfg->name;
		int rc = cache_initgroups(r, &dn, 1, name, cfg->case_sensitive, dm->gids,
					  dm->gids_cap, n);
		if (rc == -ERANGE) {
			uint32_t *grown = realloc(dm->gids, *n * sizeof(*grown));
			if (!grown)
				return -ENOMEM;
			dm->gids = grown;
			dm->gids_cap = *n;
			rc = cache_initgroups(r, &dn, 1, name, cfg->case_sensitive, dm->gids,
					      dm->gids_cap, n);
		}
		if (rc != -ENOENT)
			return rc;
	}
	return -ENOENT;
}

static int do_initgroups(struct daemon *dm, const struct proto_req *req, struct idc_buf *out)
{
	struct cache_reader *r = daemon_reader(dm);
	size_t n = 0;
	int rc = !r ? -EIO : 0;
	if (rc == 0)
		rc = cache_name_valid(req->name.p, req->name.len)
			 ? user_gids(dm, r, req->name.p, &n)
			 : -ENOENT;
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
		return do_user(c->dm, req, out);
	case PROTO_CMD_GETGRNAM:
	case PROTO_CMD_GETGRGID:
		return do_group(c->dm, req, out);
	case PROTO_CMD_INITGROUPS:
		return do_initgroups(c->dm, req, out);
	case PROTO_CMD_SETPWENT:
	case PROTO_CMD_GETPWENT:
	case PROTO_CMD_ENDPWENT:
	case PROTO_CMD_SETGRENT:
	case PROTO_CMD_GETGRENT:
	case PROTO_CMD_ENDGRENT:
		return enum_request(c, req, out);
	default:
		return proto_reply_status(out, req->cmd, PROTO_ST_BADREQ, "not a lookup");
	}
}
