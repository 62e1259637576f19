/*
 * responder: the NSS requests — lookups by name and id, initgroups, and
 * passwd/group enumeration — answered from the cache.
 *
 * Domains are searched in the configured order, each with its own case
 * rule, and the first that knows the key and may serve it answers (what a
 * domain may not serve: precedence.c). A name the cache could
 * never hold is NOTFOUND without a lookup. The password field is "x"
 * (users and groups alike) unless the provider kept one that says nothing
 * secret ("", "*", "!": cache_passwd_public): idcache never holds or
 * serves password hashes.
 *
 * An extra record (a later line of a repeated name) found by id goes to
 * the maps, like every by-id answer, under its id only: the name belongs
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
		/* once per cause: a cache reopening after a failed write (its
		 * store said why) fails every batch until it is back */
		if (rc != dm->reader_err)
			idc_log(IDC_LOG_ERR, "cannot read the cache: %s", idc_strerror(rc));
		dm->reader = NULL;
	}
	dm->reader_err = rc < 0 ? rc : 0;
	return dm->reader;
}

void daemon_reader_end(struct daemon *dm)
{
	daemon_aside_end(dm);
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

int responder_finish(struct idc_buf *out, uint32_t cmd, size_t start, int rc)
{
	return finish(out, cmd, start, rc);
}

/* A directory was asked and its lookup failed (its answer could not be
 * stored, or was cut short), and no domain before it holds the key: the
 * answer is unknown, never "not found" (the provider logged why). */
#define WALK_EDIRECTORY (-EAGAIN)

/* NOTFOUND for -ENOENT, unless a domain that missed cannot know (unsure:
 * a files domain whose files it could not read, domain_current): then
 * UNAVAIL, so NSS asks the next source even after [NOTFOUND=return].
 * TRYAGAIN for WALK_EDIRECTORY. Anything else is a cache failure, logged
 * here, and UNAVAIL so glibc moves on to the next source. */
static int reply_failure(struct idc_buf *out, uint32_t cmd, int rc, bool unsure)
{
	if (rc == -ENOENT)
		return unsure ? proto_reply_status(out, cmd, PROTO_ST_UNAVAIL,
						   "a files domain could not read its files")
			      : proto_reply_status(out, cmd, PROTO_ST_NOTFOUND, NULL);
	if (rc == WALK_EDIRECTORY)
		return proto_reply_status(out, cmd, PROTO_ST_TRYAGAIN,
					  "the directory's answer could not be taken; try again");
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
 * An expired ldap entry is asked for again and the reply waits, like a
 * miss; one late in its lifetime is served and refreshed behind (settle,
 * docs/DESIGN.md §5). An ldap user's
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
	enum lprov_lookup_result res;
	size_t failed_at;    /* 1 + index of the domain whose lookup failed; 0: none */
	uint64_t config_gen; /* dm->config_gen the two indexes above belong to */
	bool pinned;         /* about the user of that name with uid (walk) */
	uint32_t uid;
	/* confirm(): the answer whose other key the earlier remote domains
	 * were asked for (checked), and confirm_gids() */
	char check_name[PROTO_NAME_MAX + 1];
	uint32_t check_id;
	bool checked;
	size_t gids_checked; /* 1 + the domain whose group list's gids were */
	unsigned checks_out; /* checks not answered yet, +1 while sending */
	bool check_failed;
};

enum { WALK_NEXT = 0, WALK_ANSWER, WALK_DEFER };

struct walk {
	struct daemon *dm;
	struct conn *c;
	const struct proto_req *req;
	struct pending *p; /* when resumed, else NULL until the walk defers */
	bool unsure;       /* a domain that is not current missed (reply_failure) */
	bool pinned;       /* only the user named req->name whose uid is uid */
	uint32_t uid;      /* (responder_handle_user) */
};

static enum lprov_lookup_kind lookup_kind(uint32_t cmd)
{
	switch (cmd) {
	case PROTO_CMD_GETPWNAM:
	case PROTO_CMD_SUBIDS:  /* the user, whose entry holds its ranges */
	case PROTO_CMD_SSHKEYS: /* the keys come with the user */
		return LPROV_LOOKUP_PWNAM;
	case PROTO_CMD_GETPWUID:
		return LPROV_LOOKUP_PWUID;
	case PROTO_CMD_GETGRNAM:
		return LPROV_LOOKUP_GRNAM;
	case PROTO_CMD_GETGRGID:
		return LPROV_LOOKUP_GRGID;
	default:
		return LPROV_LOOKUP_INITGROUPS;
	}
}

static bool by_name(uint32_t cmd)
{
	return cmd == PROTO_CMD_GETPWNAM || cmd == PROTO_CMD_GETGRNAM ||
	       cmd == PROTO_CMD_INITGROUPS || cmd == PROTO_CMD_SSHKEYS || cmd == PROTO_CMD_SUBIDS;
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
	if (p->res == LPROV_LOOKUP_FOUND && p->req.cmd == PROTO_CMD_INITGROUPS && p->asked)
		ldapdom_initgroups_note(p->asked, p->name);
	/* A reload since: next and failed_at index the old domains, and an
	 * ldap domain starts over on every reload, failing what it had in
	 * flight (not the directory's doing). The walk starts over, asking
	 * the domains in force. */
	if (p->config_gen != p->dm->config_gen) {
		p->next = p->failed_at = p->gids_checked = 0;
		p->checked = false;
		p->asked = NULL;
		p->config_gen = p->dm->config_gen;
	}
	c->wait = NULL;
	struct walk w = {p->dm, c, &p->req, p, false, p->pinned, p->uid};
	int rc = handle_lookup(&w, conn_reply_buf(c));
	daemon_reader_end(p->dm);
	if (c->wait != p)
		free(p);
	conn_resume(c, rc);
}

/* The provider's callback (from lprov_domain_process, or at once on a
 * failure): continue after the current batch, outside the provider. */
static void on_looked(enum lprov_lookup_result res, void *arg)
{
	struct pending *p = arg;
	p->res = res;
	if (res == LPROV_LOOKUP_FAILED) {
		p->asked = NULL; /* may be a domain being freed */
		p->failed_at = p->next;
	}
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
	p->config_gen = w->dm->config_gen;
	p->pinned = w->pinned;
	p->uid = w->uid;
	if (by_name(w->req->cmd)) {
		size_t n = w->req->name.len < PROTO_NAME_MAX ? w->req->name.len : PROTO_NAME_MAX;
		memcpy(p->name, w->req->name.p, n);
		p->req.name.p = p->name;
		p->req.name.len = (uint32_t)n;
	}
	return p;
}

/* Ask domain i's directory. WALK_DEFER when the reply must wait for it,
 * else WALK_NEXT (answered at once: not found, offline, failed; *failed
 * says which). */
static int ask(struct walk *w, size_t i, bool *failed, int *err)
{
	struct domain *d = w->dm->domains[i];
	struct pending *p = w->p ? w->p : pending_new(w);
	if (!p) {
		*err = -ENOMEM;
		return WALK_NEXT;
	}
	p->next = i + 1;
	p->asked = d;
	enum lprov_lookup_result res =
	    ldapdom_lookup(d, lookup_kind(w->req->cmd), by_name(w->req->cmd) ? p->name : NULL,
			   w->req->id, on_looked, p);
	if (res == LPROV_LOOKUP_PENDING) {
		w->p = p;
		w->c->wait = p;
		return WALK_DEFER;
	}
	*failed = res == LPROV_LOOKUP_FAILED;
	if (!w->p)
		free(p);
	return WALK_NEXT;
}

/* What a directory's cached entry needs before it answers (docs/DESIGN.md
 * §5, SSSD's rule): past its expiry (or marked expired by `idcache
 * expire`) the directory is asked and the reply waits for it; once older
 * than entry_cache_nowait_percentage of its lifetime (at least
 * RESPONDER_NOWAIT_MIN_S, so a short lifetime cannot make every lookup a
 * search) it answers and is refreshed behind. An entry that never expires
 * (a live feed's) just answers. */
enum freshness { FRESH_ANSWER, FRESH_BEHIND, FRESH_WAIT };

#define RESPONDER_NOWAIT_MIN_S 10

/* When an answer from d's entry with meta stops being one to give without
 * asking: the start of its refresh window, else its expiry (1, long past,
 * for an expired entry served when its directory cannot answer); 0 = never
 * (files domains are kept current by their own refresh; a live feed's
 * entries do not expire). The memory-cache records hold no longer. */
static int64_t answer_until(const struct domain *d, const struct cache_meta *meta)
{
	uint32_t pct = d->cfg->ldap ? d->cfg->ldap->nowait_percentage : 0;
	int64_t life = meta->expires - meta->last_update;
	if (!d->ldap || !meta->expires)
		return 0;
	if (meta->expired) /* served only as the cache's best (offline) */
		return 1;
	if (!pct || !meta->last_update || life <= 0)
		return meta->expires;
	int64_t after = life * pct / 100;
	if (after < RESPONDER_NOWAIT_MIN_S)
		after = RESPONDER_NOWAIT_MIN_S;
	return after < life ? meta->last_update + after : meta->expires;
}

static enum freshness freshness(const struct domain *d, const struct cache_meta *meta)
{
	if (meta->expired)
		return FRESH_WAIT;
	int64_t until = answer_until(d, meta);
	return until && (int64_t)time(NULL) >= until ? FRESH_BEHIND : FRESH_ANSWER;
}

/* Domain i's cache said rc (0 found, -ENOENT missing) with meta;
 * complete: the entry holds all the request needs. What to do next. An
 * entry that waits for its directory is served when the directory cannot
 * answer (offline, failed, already asked): never "not found". */
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
		else if (!domain_current(d))
			w->unsure = true;
		return rc == 0 ? WALK_ANSWER : WALK_NEXT;
	}
	enum freshness f = rc == 0 && complete && may_ask ? freshness(d, meta) : FRESH_ANSWER;
	if (f == FRESH_BEHIND)
		ldapdom_refresh(d, lookup_kind(w->req->cmd),
				by_name(w->req->cmd) ? w->req->name.p : NULL, w->req->id);
	if (rc == 0 && complete && f != FRESH_WAIT)
		return WALK_ANSWER;
	bool failed = !may_ask && w->p && w->p->failed_at == i + 1;
	int step = may_ask ? ask(w, i, &failed, err) : WALK_NEXT;
	if (step == WALK_DEFER || *err)
		return step == WALK_DEFER ? WALK_DEFER : WALK_ANSWER;
	if (rc == 0)
		return WALK_ANSWER; /* incomplete: the cache's best */
	/* Nothing cached and the directory's answer was lost: a later
	 * domain's entry of that name may not be the one to serve. */
	if (failed)
		*err = WALK_EDIRECTORY;
	return failed ? WALK_ANSWER : WALK_NEXT;
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

/* The memory-cache keys (enum mc_key) an answer named name is the socket's
 * answer for: the id it was asked by, or its name when that is the name
 * asked. Another spelling (a domain with case_sensitive = false matched
 * it) is not: an earlier domain may hold the entry's own spelling. Never
 * both: the first domain holding the name need not be the first holding
 * the id (docs/DESIGN.md §11). */
static unsigned answer_keys(const struct proto_req *req, const char *name)
{
	if (!by_name(req->cmd))
		return MC_KEY_ID;
	size_t n = strlen(name);
	return n == req->name.len && memcmp(name, req->name.p, n) == 0 ? MC_KEY_NAME : 0;
}

/* Whether the walk passes over domain i's user u: withheld (precedence.c),
 * or not the identity a pinned walk is about. The one rule that keeps a
 * record's groups, keys and ranges its own user's (docs/DESIGN.md §11). */
static bool passed_over(const struct walk *w, size_t i, const struct cache_user *u)
{
	return (w->pinned && u->uid != w->uid) || daemon_user_withheld(w->dm, i, u);
}

/* A walk's answer for a domain's entry it passed over: as if not held
 * (-ENOENT: the next domain may answer), unless a withholding check
 * failed, when no later domain may answer either (its error). */
static int not_held(struct daemon *dm)
{
	int rc = daemon_checks_failed(dm);
	return rc < 0 ? rc : -ENOENT;
}

/* A check's callback: once the last check is in, the walk runs again (an
 * earlier domain now holds the key if its directory has it; the
 * withholding check sees it). */
static void on_checked(enum lprov_lookup_result res, void *arg)
{
	struct pending *p = arg;
	p->res = LPROV_LOOKUP_NOTFOUND; /* no initgroups note: not the request's answer */
	p->check_failed |= res == LPROV_LOOKUP_FAILED;
	if (--p->checks_out == 0 && loop_defer(&p->dm->loop, resume, p) < 0 && p->c)
		conn_close(p->c, "out of memory"); /* p is leaked: it may still be referenced */
}

/* The pending a walk's checks go out on (w->p, or a new one: every
 * directory the walk met before `at` answered at once, and `at` answered
 * from its cache). checks_out starts with one for the sender, so no
 * callback resumes the walk while checks are still being sent. */
static struct pending *checks_begin(struct walk *w, size_t at)
{
	struct pending *p = w->p ? w->p : pending_new(w);
	if (!p)
		return NULL;
	if (!w->p)
		p->next = at + 1;
	p->checks_out = 1;
	p->check_failed = false;
	return p;
}

/* Ask earlier domain d for (kind, name, id) as a check on p; *again: the
 * walk must run again (asked, or held now). */
static void check_one(struct pending *p, struct domain *d, enum lprov_lookup_kind kind,
		      const char *name, uint32_t id, bool *again)
{
	p->checks_out++;
	enum lprov_lookup_result res = ldapdom_lookup(d, kind, name, id, on_checked, p);
	if (res != LPROV_LOOKUP_PENDING)
		p->checks_out--;
	p->check_failed |= res == LPROV_LOOKUP_FAILED;
	*again |= res == LPROV_LOOKUP_PENDING || res == LPROV_LOOKUP_FOUND;
}

/* The checks are sent: WALK_DEFER when the walk runs again once they are
 * in (or at once, an earlier domain holding the key now), WALK_NEXT when
 * every earlier directory said at once that it holds none (or cannot say,
 * offline), WALK_EDIRECTORY when one's answer was lost. */
static int checks_sent(struct walk *w, struct pending *p, bool again)
{
	if (--p->checks_out > 0 || (again && loop_defer(&w->dm->loop, resume, p) == 0)) {
		w->p = p;
		w->c->wait = p;
		return WALK_DEFER;
	}
	int rc = again ? -ENOMEM : p->check_failed ? WALK_EDIRECTORY : WALK_NEXT;
	if (!w->p)
		free(p);
	return rc;
}

/* Whether a domain before `at` is remote (its cache holds only what was
 * asked of it). */
static bool remote_before(const struct daemon *dm, size_t at)
{
	for (size_t j = 0; j < at; j++)
		if (dm->domains[j]->ldap)
			return true;
	return false;
}

/* Domain `at` answers with the entry (name, id). An earlier remote domain
 * that holds its other key withholds it (precedence.c), but it checks
 * that domain's cache only, which holds only what was asked of it: asked
 * by uid first, a later directory's alice would answer although the first
 * directory has an alice of its own, and getpwnam("alice") would then be
 * another user (docs/DESIGN.md §11). So each earlier remote domain's
 * directory is asked for the key the walk did not ask by (by name for a
 * lookup by id, by id for one by name) before the answer goes out, once
 * per walk and entry; its negative cache makes a repeat cheap. What
 * checks_sent says. */
static int confirm(struct walk *w, size_t at, bool group, const char *name, uint32_t id)
{
	struct daemon *dm = w->dm;
	bool named = !by_name(w->req->cmd);
	struct pending *p = w->p;
	if (!remote_before(dm, at))
		return WALK_NEXT;
	if (p && p->checked && p->check_id == id && strcmp(p->check_name, name) == 0)
		return p->check_failed ? WALK_EDIRECTORY : WALK_NEXT;
	if (!(p = checks_begin(w, at)))
		return -ENOMEM;
	size_t n = strnlen(name, PROTO_NAME_MAX); /* a cached name fits */
	memcpy(p->check_name, name, n);
	p->check_name[n] = '\0';
	p->check_id = id;
	p->checked = true;
	enum lprov_lookup_kind k = group ? (named ? LPROV_LOOKUP_GRNAM : LPROV_LOOKUP_GRGID)
					 : (named ? LPROV_LOOKUP_PWNAM : LPROV_LOOKUP_PWUID);
	bool again = false;
	for (size_t j = 0; j < at; j++)
		if (dm->domains[j]->ldap)
			check_one(p, dm->domains[j], k, named ? p->check_name : NULL, id, &again);
	return checks_sent(w, p, again);
}

/* The same for a user's group list from domain `at` (gids[0..n)): each
 * gid is asked of every earlier remote domain, all at once, before the
 * list goes out; a gid one of them holds then leaves the list
 * (daemon_gids_withhold). Without it a later directory could put its
 * users in an earlier directory's gid (a supplementary group of their
 * login) whenever that group was not cached yet. */
static int confirm_gids(struct walk *w, size_t at, const uint32_t *gids, size_t n)
{
	struct daemon *dm = w->dm;
	struct pending *p = w->p;
	if (!n || !remote_before(dm, at))
		return WALK_NEXT;
	if (p && p->gids_checked == at + 1)
		return p->check_failed ? WALK_EDIRECTORY : WALK_NEXT;
	if (!(p = checks_begin(w, at)))
		return -ENOMEM;
	p->gids_checked = at + 1;
	bool again = false;
	for (size_t j = 0; j < at; j++)
		for (size_t g = 0; dm->domains[j]->ldap && g < n; g++)
			check_one(p, dm->domains[j], LPROV_LOOKUP_GRGID, NULL, gids[g], &again);
	return checks_sent(w, p, again);
}

/* The user req names (by name or uid), from the first domain that holds it
 * and may serve it (docs/DESIGN.md §11): 0 with *u and *at (the domain's
 * index), -ENOENT, or an error; *step is WALK_DEFER when the reply waits
 * for a directory; *meta: the answering entry's. */
static int walk_user(struct walk *w, struct cache_user *u, struct cache_meta *meta, size_t *at,
		     int *step)
{
	struct daemon *dm = w->dm;
	const struct proto_req *req = w->req;
	struct cache_reader *r = daemon_reader(dm);
	int rc = !r ? -EIO : -ENOENT;
	*step = WALK_NEXT;
	if (r && by_name(req->cmd) && !cache_name_valid(req->name.p, req->name.len))
		*step = WALK_ANSWER;
	daemon_checks_failed(dm); /* an earlier request's */
	for (size_t i = 0; r && *step == WALK_NEXT && i < dm->ndomains; i++) {
		*meta = (struct cache_meta){0};
		rc = user_in(r, dm->domains[i]->cfg, req, u, meta);
		if (rc == 0 && passed_over(w, i, u)) {
			if ((rc = not_held(dm)) != -ENOENT)
				break;
			continue;
		}
		int err = 0;
		*step = settle(w, i, rc, meta, true, &err);
		rc = err ? err : rc;
		*at = i;
	}
	if (rc == 0 && *step == WALK_ANSWER && dm->domains[*at]->ldap) {
		int cs = confirm(w, *at, false, u->name, u->uid);
		if (cs == WALK_DEFER)
			*step = WALK_DEFER;
		else if (cs < 0)
			rc = cs;
	}
	return rc;
}

static int do_user(struct walk *w, struct idc_buf *out)
{
	struct daemon *dm = w->dm;
	const struct proto_req *req = w->req;
	struct cache_user u;
	struct cache_meta meta = {0};
	size_t at = 0;
	int step, rc = walk_user(w, &u, &meta, &at, &step);
	if (step == WALK_DEFER)
		return 0;
	if (rc < 0)
		return reply_failure(out, req->cmd, rc, w->unsure);
	if (req->cmd == PROTO_CMD_SUBIDS)
		return subid_reply_ranges(dm, at, &u, req, out);
	struct proto_passwd pw = to_proto(&u);
	daemon_mc_put_passwd(dm, &pw, answer_keys(req, u.name),
			     answer_until(dm->domains[at], &meta));
	size_t start;
	rc = proto_reply_begin(out, req->cmd, PROTO_ST_OK, &start);
	return finish(out, req->cmd, start, rc ? rc : put_user(out, &u));
}

/* A user's SSH public keys, from the domain whose user getpwnam would
 * answer with. The entry must be current: the answer decides a login. */
static int do_sshkeys(struct walk *w, struct idc_buf *out)
{
	uint32_t cmd = w->req->cmd;
	struct cache_user u;
	struct cache_meta meta = {0};
	size_t at = 0, n = 0;
	int step, rc = walk_user(w, &u, &meta, &at, &step);
	if (step == WALK_DEFER)
		return 0;
	const char *const *keys = NULL;
	if (rc == 0)
		rc = cache_user_keys(daemon_reader(w->dm), w->dm->domains[at]->cfg->name, u.name,
				     &keys, &n);
	if (rc < 0)
		return reply_failure(out, cmd, rc, w->unsure);
	size_t start;
	rc = proto_reply_begin(out, cmd, PROTO_ST_OK, &start);
	rc = rc ? rc : proto_put_u32(out, (uint32_t)n);
	for (size_t i = 0; rc == 0 && i < n; i++)
		rc = proto_put_cstr(out, keys[i]);
	return finish(out, cmd, start, rc);
}

/* ==== held requests ==========================================================================
 * A request whose answer needs a build its uid may not make yet (a stale
 * enumeration snapshot, a large group read again after a commit) waits on
 * the connection, which takes nothing else meanwhile, until its uid's
 * spacing has passed — or someone else's build made the answer current. */

static bool latest_stale(const struct daemon *dm, bool users);
static struct big_reply *big_find(struct daemon *dm, const struct proto_req *req, bool fresh);

/* Keep req (copied) as c's held request. */
static void hold_copy(struct conn *c, const struct proto_req *req)
{
	c->held = true;
	c->held_req = *req;
	if (req->name.len) /* <= PROTO_NAME_MAX: decoded */
		memcpy(c->held_name, req->name.p, req->name.len);
	c->held_name[req->name.len] = '\0';
	c->held_req.name.p = c->held_name;
}

/* Hold req (copied) for wait_ns; the held timer answers it. */
static int hold(struct conn *c, const struct proto_req *req, uint64_t wait_ns)
{
	struct daemon *dm = c->dm;
	hold_copy(c, req);
	c->held_until = idc_now_ns() + wait_ns;
	dm->held_requests++;
	if (!dm->held_timer.armed || c->held_until < dm->held_timer_at) {
		dm->held_timer_at = c->held_until;
		loop_timer_arm(&dm->held_timer, (wait_ns + 999999u) / 1000000u, 0);
	}
	return 0;
}

/* Whether c's held request must wait on (its build is still needed). */
static bool still_held(struct daemon *dm, struct conn *c, uint64_t now)
{
	const struct proto_req *req = &c->held_req;
	if (c->held_until <= now)
		return false;
	if (req->cmd == PROTO_CMD_GETGRNAM || req->cmd == PROTO_CMD_GETGRGID)
		return !big_find(dm, req, true);
	return latest_stale(dm, req->cmd <= PROTO_CMD_ENDPWENT);
}

void responder_held_timer(struct loop_timer *t)
{
	struct daemon *dm = t->owner;
	uint64_t now = idc_now_ns(), next = 0;
	for (struct conn *c = dm->conns, *nc; c; c = nc) {
		nc = c->next;
		if (!c->held || c->held_build) /* the build answers it */
			continue;
		if (still_held(dm, c, now)) {
			next = !next || c->held_until < next ? c->held_until : next;
			continue;
		}
		c->held = false;
		struct proto_req req = c->held_req;
		int rc = responder_handle(c, &req, conn_reply_buf(c));
		daemon_reader_end(dm);
		conn_resume(c, rc);
	}
	if (next) {
		dm->held_timer_at = next;
		loop_timer_arm(&dm->held_timer, (next - now + 999999u) / 1000000u, 0);
	}
}

/* ==== large group replies ===================================================================
 * A group whose record passes DAEMON_BIG_REPLY (a directory group of a
 * million members: ~10 MB, 0.4 s to read and pack) is kept packed, for the
 * cache generation it was read in, by the request that asked (the last
 * DAEMON_BIG_KEEP of them). Asked again it costs no cache read and no copy:
 * it is sent from the kept record like an enumeration batch. Kept only when
 * the walk read the cache alone (no directory asked: the same walk would
 * give the same answer until a commit) and the entry was fresh; not used
 * past its expiry, after a commit or a reload, or after `idcache expire`.
 * Reading it again after a commit is one uid's build, spaced like the
 * snapshots' (budget_build_wait): meanwhile the request waits. */

static bool big_key(const struct big_reply *b, const struct proto_req *req)
{
	if (!b->rec || b->cmd != req->cmd)
		return false;
	if (req->cmd == PROTO_CMD_GETGRGID)
		return b->id == req->id;
	return strlen(b->name) == req->name.len && memcmp(b->name, req->name.p, req->name.len) == 0;
}

/* The kept reply for req: fresh only (current generation, not expired),
 * or any (stale tells that reading it again is a build). */
static struct big_reply *big_find(struct daemon *dm, const struct proto_req *req, bool fresh)
{
	for (size_t i = 0; i < DAEMON_BIG_KEEP; i++) {
		struct big_reply *b = &dm->big[i];
		if (!big_key(b, req))
			continue;
		bool ok = b->gen == daemon_data_gen(dm) &&
			  (b->expires == 0 || (int64_t)time(NULL) < b->expires);
		return ok || !fresh ? b : NULL;
	}
	return NULL;
}

void responder_forget_replies(struct daemon *dm)
{
	for (size_t i = 0; i < DAEMON_BIG_KEEP; i++) {
		enum_snap_put(dm->big[i].rec);
		dm->big[i] = (struct big_reply){0};
	}
}

/* Queue the reply to req from b: the header here, the record from b. */
static int big_send(struct conn *c, const struct proto_req *req, struct big_reply *b,
		    struct idc_buf *out)
{
	size_t start;
	int rc = proto_reply_begin(out, req->cmd, PROTO_ST_OK, &start);
	if (rc < 0)
		return rc;
	proto_patch_u32(out, start, (uint32_t)(PROTO_HDR_SIZE + b->rec->recs.len));
	conn_queue_tail(c, b->rec, 0, b->rec->recs.len);
	c->dm->big_hits++;
	return 0;
}

/* Keep the record out[at, len) for req (answered by a walk of the cache
 * alone, from an entry with meta) and send it from there; -ENOMEM leaves
 * out as it was. */
static int big_keep(struct conn *c, const struct proto_req *req, const struct cache_meta *meta,
		    struct idc_buf *out, size_t at)
{
	struct daemon *dm = c->dm;
	struct enum_snap *s = calloc(1, sizeof(*s));
	if (!s || idc_buf_append(&s->recs, out->data + at, out->len - at) < 0) {
		free(s);
		return -ENOMEM;
	}
	s->refs = 1;
	struct big_reply *b = big_find(dm, req, false);
	b = b ? b : &dm->big[dm->big_next++ % DAEMON_BIG_KEEP];
	enum_snap_put(b->rec);
	*b = (struct big_reply){daemon_data_gen(dm), req->cmd, req->id, "", meta->expires, s};
	if (req->cmd == PROTO_CMD_GETGRNAM)
		memcpy(b->name, req->name.p, req->name.len);
	out->len = at - PROTO_HDR_SIZE;
	return big_send(c, req, b, out);
}

/* Answer a group request from a kept reply (1), hold it until its uid may
 * read a large group again (1), or let the walk answer (0). */
static int big_lookup(struct conn *c, const struct proto_req *req, struct idc_buf *out, int *rc)
{
	struct big_reply *b = big_find(c->dm, req, true);
	if (b) {
		*rc = big_send(c, req, b, out);
		return 1;
	}
	uint64_t wait = budget_build_wait(c->uid, idc_now_ns());
	if (!wait || !big_find(c->dm, req, false))
		return 0;
	*rc = hold(c, req, wait);
	return 1;
}

/* Keep a large record the walk just put in out[start, len). */
static int big_after(struct walk *w, const struct cache_meta *meta, struct idc_buf *out,
		     size_t start, uint64_t t0)
{
	size_t at = start + PROTO_HDR_SIZE;
	if (w->p || meta->expired || out->len - at <= DAEMON_BIG_REPLY || !w->c)
		return 0;
	uint64_t now = idc_now_ns();
	budget_built(w->c->uid, now, now - t0);
	w->dm->big_builds++;
	w->dm->big_build_ns += now - t0;
	big_keep(w->c, w->req, meta, out, at); /* out of memory: sent from out */
	return 0;
}

static int do_group(struct walk *w, struct idc_buf *out)
{
	struct daemon *dm = w->dm;
	const struct proto_req *req = w->req;
	uint64_t t0 = idc_now_ns();
	int rc = 0;
	if (!w->p && w->c && big_lookup(w->c, req, out, &rc))
		return rc;
	struct cache_reader *r = daemon_reader(dm);
	struct cache_group g;
	size_t at = 0; /* the domain asked last: the one answering */
	struct cache_meta meta = {0};
	int step = WALK_NEXT;
	rc = !r ? -EIO : -ENOENT;
	if (r && req->cmd == PROTO_CMD_GETGRNAM && !cache_name_valid(req->name.p, req->name.len))
		step = WALK_ANSWER;
	daemon_checks_failed(dm); /* an earlier request's */
	for (size_t i = 0; r && step == WALK_NEXT && i < dm->ndomains; i++) {
		meta = (struct cache_meta){0};
		rc = group_in(r, dm->domains[i]->cfg, req, &g, &meta);
		if (rc == 0 && daemon_group_withheld(dm, i, &g)) {
			if ((rc = not_held(dm)) != -ENOENT)
				break;
			continue;
		}
		int err = 0;
		step = settle(w, i, rc, &meta, true, &err);
		rc = err ? err : rc;
		at = i;
	}
	if (rc == 0 && step == WALK_ANSWER && dm->domains[at]->ldap) {
		int cs = confirm(w, at, true, g.name, g.gid);
		if (cs == WALK_DEFER)
			step = WALK_DEFER;
		else if (cs < 0)
			rc = cs;
	}
	if (step == WALK_DEFER)
		return 0;
	if (rc == 0)
		rc = daemon_group_members_kept(dm, at, &g);
	if (rc == 0) /* a member group's check that failed left it out */
		rc = daemon_checks_failed(dm);
	if (rc < 0)
		return reply_failure(out, req->cmd, rc, w->unsure);
	daemon_mc_put_group(dm, dm->domains[at], &g, answer_keys(req, g.name),
			    answer_until(dm->domains[at], &meta));
	size_t start;
	rc = proto_reply_begin(out, req->cmd, PROTO_ST_OK, &start);
	rc = finish(out, req->cmd, start, rc ? rc : put_group(out, &g));
	return rc ? rc : big_after(w, &meta, out, start, t0);
}

static int do_initgroups(struct walk *w, struct idc_buf *out)
{
	struct daemon *dm = w->dm;
	const struct proto_req *req = w->req;
	struct cache_reader *r = daemon_reader(dm);
	size_t n = 0;
	int64_t until = 0;
	int rc = !r ? -EIO : -ENOENT, step = WALK_NEXT;
	if (r && !cache_name_valid(req->name.p, req->name.len))
		step = WALK_ANSWER;
	daemon_checks_failed(dm); /* an earlier request's */
	for (size_t i = 0; r && step == WALK_NEXT && i < dm->ndomains; i++) {
		struct domain *d = dm->domains[i];
		struct cache_meta meta = {0};
		struct cache_user u;
		rc = user_in(r, d->cfg, req, &u, &meta);
		if (rc == 0 && passed_over(w, i, &u)) {
			if ((rc = not_held(dm)) != -ENOENT)
				break;
			continue;
		}
		int64_t fetched = 0;
		enum ldapdom_ig ig =
		    d->ldap ? ldapdom_initgroups_state(d, req->name.p, &fetched) : LDAPDOM_IG_FRESH;
		bool complete = ig != LDAPDOM_IG_UNKNOWN;
		meta.expired |= ig == LDAPDOM_IG_EXPIRED;
		if (ig == LDAPDOM_IG_FRESH && d->ldap && meta.expires) /* the list's own age */
			meta = (struct cache_meta){meta.domain, fetched,
						   fetched + d->cfg->entry_cache_timeout,
						   meta.expired};
		int err = 0;
		step = settle(w, i, rc, &meta, complete, &err);
		rc = err ? err : rc;
		if (step == WALK_ANSWER && rc == 0) {
			until = answer_until(d, &meta);
			rc = daemon_user_gids(dm, i, r, req->name.p, d->cfg->case_sensitive, &n);
		}
		if (step == WALK_ANSWER && rc == 0) {
			daemon_gids_withhold(dm, i, dm->gids, &n);
			rc = daemon_checks_failed(dm); /* a group left out unchecked */
		}
		if (step == WALK_ANSWER && rc == 0 && d->ldap) {
			int cs = confirm_gids(w, i, dm->gids, n);
			if (cs == WALK_DEFER)
				step = WALK_DEFER;
			else if (cs < 0)
				rc = cs;
		}
	}
	if (step == WALK_DEFER)
		return 0;
	if (rc < 0)
		return reply_failure(out, req->cmd, rc, w->unsure);
	/* Keyed by the name asked: the cache found the user under it. A
	 * pinned walk's answer is not the name's alone. */
	if (!w->pinned)
		daemon_mc_put_initgroups(dm, req->name.p, dm->gids, n, until);
	if (w->c && !w->pinned)
		w->c->ig_until = until;
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
	case PROTO_CMD_SUBIDS:
		return do_user(w, out);
	case PROTO_CMD_GETGRNAM:
	case PROTO_CMD_GETGRGID:
		return do_group(w, out);
	case PROTO_CMD_SSHKEYS:
		return do_sshkeys(w, out);
	default:
		return do_initgroups(w, out);
	}
}

/* ==== enumeration ==========================================================================
 * SET (or the first GET) takes a reference to a snapshot of every domain's
 * records in wire encoding; GETs hand it out in batches, sent straight from
 * the snapshot (conn_queue_tail). A snapshot is consistent (one read
 * transaction) and unaffected by refreshes while a client walks it, as
 * with getpwent over a file replaced meanwhile. The daemon keeps the
 * latest snapshot of each map and reuses it while the cache is unchanged.
 *
 * What one uid may cause (budget.c): each distinct snapshot its cursors
 * hold is charged to it, and one it may not afford is refused (TRYAGAIN)
 * unless it holds none; a uid whose snapshot is stale builds a new one
 * only when its spacing since its last build has passed — until then the
 * request is held (the connection takes nothing else) and answered by
 * responder_held_timer, from a fresh snapshot. */

uint64_t daemon_data_gen(const struct daemon *dm)
{
	/* Every write to cache.mdb is a durable commit; configuration changes
	 * alter the domain list. Together they tell when a snapshot is stale. */
	return cache_durable_commits(dm->cache) * 1000003u + dm->config_gen;
}

void enum_snap_put(struct enum_snap *s)
{
	if (s && --s->refs == 0) {
		idc_buf_free(&s->recs);
		free(s->offs);
		free(s->holders);
		free(s);
	}
}

static size_t snap_bytes(const struct enum_snap *s)
{
	return s->recs.cap + s->cap * sizeof(*s->offs);
}

static struct snap_holder *snap_holder(struct enum_snap *s, const struct budget_uid *u)
{
	for (size_t i = 0; i < s->nholders; i++)
		if (s->holders[i].uid == u)
			return &s->holders[i];
	return NULL;
}

/* Take a cursor's reference to s for u, charging u the first time. */
static int snap_hold(struct daemon *dm, struct enum_snap *s, struct budget_uid *u)
{
	struct snap_holder *h = snap_holder(s, u);
	if (!h) {
		h = realloc(s->holders, (s->nholders + 1) * sizeof(*h));
		if (!h)
			return -ENOMEM;
		s->holders = h;
		h = &s->holders[s->nholders++];
		*h = (struct snap_holder){u, 0};
		budget_charge_snap(dm, u, snap_bytes(s), true);
	}
	h->cursors++;
	s->refs++;
	return 0;
}

void enum_cursor_free(struct daemon *dm, struct enum_cursor *e)
{
	struct enum_snap *s = e->snap;
	struct snap_holder *h = s ? snap_holder(s, e->uid) : NULL;
	if (h && --h->cursors == 0) {
		budget_charge_snap(dm, e->uid, snap_bytes(s), false);
		*h = s->holders[--s->nholders];
	}
	enum_snap_put(s);
	*e = (struct enum_cursor){0};
}

void enum_snaps_release(struct daemon *dm)
{
	for (size_t i = 0; i < 2; i++) {
		enum_snap_put(dm->snaps[i]);
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

/* ==== building a snapshot in slices ========================================================
 * A snapshot of a million users takes seconds to read: read in one turn,
 * it would hold every other client for them (docs/DESIGN.md §12). So it is
 * built by a job (struct snap_job, one per map at a time) in slices of
 * SNAP_SLICE_NS, each in a read transaction of its own, resumed after the
 * store key of the last record read (cache_enum_users_from); the loop
 * serves everyone else between two slices. Each domain's records are
 * kept as sorted runs (one per slice) and merged, also in slices, into
 * the cache's enumeration order; the domains follow in the configured
 * order.
 *
 * Consistency, as a paged LDAP search gives: each record is as the slice
 * that read it saw it. A record present throughout the build is listed
 * exactly once; one stored or removed meanwhile is listed when the slice
 * reaching its key still saw it; nothing is listed twice (a key is read
 * once), and a renamed entry is an old name removed and a new one stored.
 * The snapshot is marked with the cache state it began with, so a change
 * made meanwhile makes it stale for the next enumeration. A reload during
 * the build starts it over (the domains changed).
 *
 * The request that needs it, and every one of the map arriving while it
 * is built, waits on its connection (held_build: nothing else is taken
 * from it) and is answered from the new snapshot once it is complete, as
 * if it had been built at once; a connection that closes meanwhile is
 * simply not answered. The uid that started it is charged its time (the
 * sum of its slices) like a build in one go. */

#define SNAP_SLICE_NS    2000000u /* reading (and sorting what was read) per turn */
#define SNAP_CLOCK_EVERY 32u      /* records between two looks at the clock */

/* One record kept, with the keys that sort it (cache_enum_order). */
struct keyed {
	uint64_t order, key;
	size_t off, len; /* in recs */
};

/* A sorted part of k[] (one slice's records), and where its merge is. */
struct keyed_run {
	size_t pos, end;
};

/* One domain's records as the cache hands them over (in no order), with
 * the keys that sort them; dm and i: the domain, whose withheld entries
 * are left out. */
struct domain_recs {
	struct idc_buf recs;
	struct keyed *k;
	size_t n, cap;
	struct daemon *dm;
	size_t i;
	size_t walked;     /* records read since the map's pages were let go of */
	uint64_t deadline; /* idc_now_ns() at which the slice ends */
	unsigned tick;     /* records since the clock was read */
};

struct snap_job {
	bool users;
	struct enum_snap *s; /* what is built so far */
	struct domain_recs u;
	size_t domain;     /* being read, then merged */
	struct idc_buf at; /* its walk's position */
	bool merging;      /* its walk is done */
	struct keyed_run *runs;
	size_t nruns, runs_cap;
	size_t *heap; /* runs not merged yet, the one with the least head first */
	size_t nheap;
	uint64_t gen, config_gen;
	uint64_t serial;        /* the requests waiting for it hold it (held_build) */
	struct budget_uid *uid; /* who started it: taken (budget_get), charged its time */
	uint64_t spent_ns;
};

/* A snapshot reads every record: all of cache.mdb would stay mapped in the
 * daemon's resident set (a million users: 1 GiB, twice the LDIF). Let go
 * of it every SNAP_RELEASE_EVERY records read (a few ms at most), and
 * once it is built; skipped while a write transaction is open. */
#define SNAP_RELEASE_EVERY 65536u

static void walked(struct domain_recs *u)
{
	if (++u->walked < SNAP_RELEASE_EVERY)
		return;
	u->walked = 0;
	cache_map_release(u->dm->cache, false);
}

/* After a record: 1 (stop the walk here) once the slice's time is up. */
static int slice_over(struct domain_recs *u)
{
	if (++u->tick < SNAP_CLOCK_EVERY)
		return 0;
	u->tick = 0;
	return idc_now_ns() >= u->deadline;
}

static int keep_record(struct domain_recs *u, uint64_t order, uint64_t key, size_t off)
{
	if (u->n == u->cap) {
		size_t cap = u->cap ? u->cap * 2 : 1024;
		struct keyed *grown = realloc(u->k, cap * sizeof(*grown));
		if (!grown)
			return -ENOMEM;
		u->k = grown;
		u->cap = cap;
	}
	u->k[u->n++] = (struct keyed){order, key, off, u->recs.len - off};
	return 0;
}

static int add_user(const struct cache_user *cu, uint64_t key, void *arg)
{
	struct domain_recs *u = arg;
	walked(u);
	int rc;
	if (daemon_user_withheld(u->dm, u->i, cu)) {
		rc = daemon_checks_failed(u->dm); /* 0: skipped; a failed check fails the build */
	} else {
		size_t off = u->recs.len;
		rc = put_user(&u->recs, cu);
		rc = rc ? rc : keep_record(u, cu->order, key, off);
	}
	return rc ? rc : slice_over(u);
}

static int add_group(const struct cache_group *g, uint64_t key, void *arg)
{
	struct domain_recs *u = arg;
	walked(u);
	int rc;
	if (daemon_group_withheld(u->dm, u->i, g)) {
		rc = daemon_checks_failed(u->dm); /* as in add_user */
	} else {
		struct cache_group kept = *g;
		rc = daemon_group_members_kept(u->dm, u->i, &kept);
		rc = rc ? rc : daemon_checks_failed(u->dm);
		size_t off = u->recs.len;
		rc = rc ? rc : put_group(&u->recs, &kept);
		rc = rc ? rc : keep_record(u, g->order, key, off);
	}
	return rc ? rc : slice_over(u);
}

static int keyed_cmp(const void *a, const void *b)
{
	const struct keyed *x = a, *y = b;
	return cache_enum_order(x->order, x->key, y->order, y->key);
}

/* Sort the records read since first into a run of their own. */
static int run_add(struct snap_job *j, size_t first)
{
	if (j->u.n == first)
		return 0;
	if (j->nruns == j->runs_cap) {
		size_t cap = j->runs_cap ? j->runs_cap * 2 : 64;
		struct keyed_run *grown = realloc(j->runs, cap * sizeof(*grown));
		if (!grown)
			return -ENOMEM;
		j->runs = grown;
		j->runs_cap = cap;
	}
	qsort(j->u.k + first, j->u.n - first, sizeof(*j->u.k), keyed_cmp);
	j->runs[j->nruns++] = (struct keyed_run){first, j->u.n};
	return 0;
}

/* Read the current domain on until the slice is over or it is done. */
static int job_read(struct daemon *dm, struct snap_job *j)
{
	struct cache_reader *r = daemon_reader(dm);
	if (!r)
		return -EIO;
	const char *dn = dm->domains[j->domain]->cfg->name;
	size_t first = j->u.n;
	j->u.dm = dm;
	j->u.i = j->domain;
	daemon_checks_failed(dm); /* an earlier request's */
	int rc = j->users ? cache_enum_users_from(r, dn, &j->at, add_user, &j->u)
			  : cache_enum_groups_from(r, dn, &j->at, add_group, &j->u);
	daemon_reader_end(dm); /* no snapshot kept between two slices */
	if (rc >= 0) {
		int added = run_add(j, first);
		j->merging = rc == 0;
		rc = added;
	}
	return rc;
}

/* ---- the merge: a binary heap of runs by their next record ---- */

static bool run_less(const struct snap_job *j, size_t a, size_t b)
{
	const struct keyed *x = &j->u.k[j->runs[a].pos], *y = &j->u.k[j->runs[b].pos];
	return keyed_cmp(x, y) < 0;
}

static void heap_down(struct snap_job *j, size_t at)
{
	for (;;) {
		size_t least = at, l = 2 * at + 1, r = l + 1;
		if (l < j->nheap && run_less(j, j->heap[l], j->heap[least]))
			least = l;
		if (r < j->nheap && run_less(j, j->heap[r], j->heap[least]))
			least = r;
		if (least == at)
			return;
		size_t t = j->heap[at];
		j->heap[at] = j->heap[least];
		j->heap[least] = t;
		at = least;
	}
}

static int merge_begin(struct snap_job *j)
{
	free(j->heap);
	j->heap = malloc((j->nruns ? j->nruns : 1) * sizeof(*j->heap));
	if (!j->heap)
		return -ENOMEM;
	for (size_t r = 0; r < j->nruns; r++)
		j->heap[r] = r;
	j->nheap = j->nruns;
	for (size_t r = j->nheap / 2; r-- > 0;)
		heap_down(j, r);
	return idc_buf_reserve(&j->s->recs, j->u.recs.len);
}

/* The domain's records into the snapshot in order, until the slice is
 * over or they are all in (then on to the next domain). */
static int job_merge(struct snap_job *j)
{
	struct domain_recs *u = &j->u;
	int rc = j->heap ? 0 : merge_begin(j);
	while (rc == 0 && j->nheap > 0) {
		if (slice_over(u))
			return 0;
		struct keyed_run *run = &j->runs[j->heap[0]];
		const struct keyed *k = &u->k[run->pos++];
		rc = snap_mark(j->s);
		rc = rc ? rc : idc_buf_append(&j->s->recs, u->recs.data + k->off, k->len);
		if (run->pos == run->end)
			j->heap[0] = j->heap[--j->nheap];
		heap_down(j, 0);
	}
	if (rc)
		return rc;
	free(j->heap);
	j->heap = NULL;
	idc_buf_reset(&u->recs);
	idc_buf_reset(&j->at);
	u->n = j->nruns = 0;
	j->merging = false;
	j->domain++;
	return 0;
}

/* Back to nothing read (a reload changed the domains). */
static void job_restart(struct daemon *dm, struct snap_job *j)
{
	enum_snap_put(j->s);
	j->s = calloc(1, sizeof(*j->s));
	if (j->s)
		j->s->refs = 1;
	free(j->heap);
	j->heap = NULL;
	idc_buf_reset(&j->u.recs);
	idc_buf_reset(&j->at);
	j->u.n = j->nruns = j->domain = 0;
	j->merging = false;
	j->gen = daemon_data_gen(dm);
	j->config_gen = dm->config_gen;
}

static void job_free(struct daemon *dm, struct snap_job *j)
{
	dm->snap_jobs[j->users ? 0 : 1] = NULL;
	enum_snap_put(j->s);
	idc_buf_free(&j->u.recs);
	free(j->u.k);
	idc_buf_free(&j->at);
	free(j->runs);
	free(j->heap);
	budget_put(dm, j->uid);
	free(j);
}

/* Start building the map's snapshot for c (answered when it is built). */
static int job_start(struct conn *c, bool users)
{
	struct daemon *dm = c->dm;
	struct snap_job *j = calloc(1, sizeof(*j));
	if (!j)
		return -ENOMEM;
	j->users = users;
	j->serial = ++dm->snap_serial;
	j->u.recs = (struct idc_buf)IDC_BUF_INIT;
	j->at = (struct idc_buf)IDC_BUF_INIT;
	dm->snap_jobs[users ? 0 : 1] = j;
	job_restart(dm, j);
	j->uid = budget_get(dm, c->peer_uid); /* NULL: not charged */
	int rc = j->s ? loop_timer_arm(&dm->snap_timer, 0, 0) : -ENOMEM;
	if (rc < 0)
		job_free(dm, j);
	return rc;
}

static int enum_answer(struct conn *c, const struct proto_req *req, int rc, struct idc_buf *out);
static int enum_take(struct conn *c, struct enum_cursor *e, struct enum_snap *s);

/* Answer the requests waiting for build serial: from s, or the error rc. */
static void job_answer(struct daemon *dm, uint64_t serial, struct enum_snap *s, int rc)
{
	if (s)
		s->refs++; /* whatever the answered connections do next */
	for (struct conn *c = dm->conns, *nc; c; c = nc) {
		nc = c->next;
		if (!c->held || c->held_build != serial)
			continue;
		c->held = false;
		c->held_build = 0;
		struct proto_req req = c->held_req;
		struct enum_cursor *e = req.cmd <= PROTO_CMD_ENDPWENT ? &c->pw : &c->gr;
		int r = rc < 0 ? rc : enum_take(c, e, s);
		conn_resume(c, enum_answer(c, &req, r, conn_reply_buf(c)));
	}
	enum_snap_put(s);
}

/* The job is done (rc 0) or failed: its snapshot becomes the latest. */
static void job_end(struct daemon *dm, struct snap_job *j, int rc)
{
	struct enum_snap *s = NULL;
	cache_map_release(dm->cache, false);
	if (rc == 0)
		rc = snap_mark(j->s); /* end of the last record */
	if (rc == 0) {
		s = j->s;
		j->s = NULL;
		s->n--; /* the end mark is not a record */
		s->gen = j->gen;
		struct enum_snap **latest = &dm->snaps[j->users ? 0 : 1];
		enum_snap_put(*latest);
		*latest = s;
		budget_built(j->uid, idc_now_ns(), j->spent_ns);
		dm->enum_builds++;
		dm->enum_build_ns += j->spent_ns;
	} else {
		idc_log(IDC_LOG_WARN, "cannot build the %s enumeration: %s",
			j->users ? "passwd" : "group", idc_strerror(rc));
	}
	uint64_t serial = j->serial;
	job_free(dm, j);
	job_answer(dm, serial, s, rc);
}

/* One slice of j: 1 when it is over (ended), else 0. */
static int job_slice(struct daemon *dm, struct snap_job *j)
{
	uint64_t t0 = idc_now_ns();
	if (j->config_gen != dm->config_gen)
		job_restart(dm, j);
	j->u.deadline = t0 + SNAP_SLICE_NS;
	j->u.tick = 0;
	int rc = j->s ? 0 : -ENOMEM;
	while (rc == 0 && j->domain < dm->ndomains && idc_now_ns() < j->u.deadline)
		rc = j->merging ? job_merge(j) : job_read(dm, j);
	j->spent_ns += idc_now_ns() - t0;
	if (rc == 0 && j->domain < dm->ndomains)
		return 0;
	job_end(dm, j, rc);
	return 1;
}

void responder_snap_timer(struct loop_timer *t)
{
	struct daemon *dm = t->owner;
	size_t k = dm->snap_turn++ & 1;
	struct snap_job *j = dm->snap_jobs[k] ? dm->snap_jobs[k] : dm->snap_jobs[1 - k];
	if (j)
		job_slice(dm, j);
	if ((dm->snap_jobs[0] || dm->snap_jobs[1]) && loop_timer_arm(&dm->snap_timer, 0, 0) < 0) {
		for (size_t i = 0; i < 2; i++)
			if (dm->snap_jobs[i])
				job_end(dm, dm->snap_jobs[i], -EIO);
	}
}

void responder_builds_stop(struct daemon *dm)
{
	for (size_t i = 0; i < 2; i++)
		if (dm->snap_jobs[i])
			job_free(dm, dm->snap_jobs[i]);
}

/* ==== enumeration requests ================================================================= */

/* Whether the latest snapshot of the map is missing or stale. */
static bool latest_stale(const struct daemon *dm, bool users)
{
	const struct enum_snap *s = dm->snaps[users ? 0 : 1];
	return !s || s->gen != daemon_data_gen(dm);
}

/* Whether c's uid may hold s (NULL: a snapshot about s's size to come). */
static bool affords(struct conn *c, struct enum_snap *s, bool users)
{
	struct enum_snap *like = s ? s : c->dm->snaps[users ? 0 : 1];
	if (s && snap_holder(s, c->uid))
		return true;
	if (budget_snap_admit(c->dm, c->uid, like ? snap_bytes(like) : 0))
		return true;
	c->dm->enum_refused++;
	idc_log(IDC_LOG_DEBUG, "uid %d holds enumerations over its budget: refusing one",
		(int)c->peer_uid);
	return false;
}

/* Point e at s for c's uid. -EAGAIN: over its budget. */
static int enum_take(struct conn *c, struct enum_cursor *e, struct enum_snap *s)
{
	enum_cursor_free(c->dm, e);
	if (!affords(c, s, e == &c->pw))
		return -EAGAIN;
	int rc = snap_hold(c->dm, s, c->uid);
	if (rc == 0) {
		e->snap = s;
		e->uid = c->uid;
	}
	return rc;
}

/* The records of one GET reply, from the cursor while they fit max_count
 * and max_bytes (a frame always gets at least one), queued after the
 * frame's head without a copy. */
static int put_batch(struct conn *c, struct enum_cursor *e, const struct proto_req *req,
		     struct idc_buf *out)
{
	const struct enum_snap *s = e->snap;
	size_t start, first = e->pos;
	int rc = proto_reply_begin(out, req->cmd, PROTO_ST_OK, &start);
	rc = rc ? rc : proto_put_u32(out, 0);
	if (rc < 0)
		return finish(out, req->cmd, start, rc);
	size_t head = out->len - start;
	uint32_t count = 0;
	while (e->pos < s->n && (req->max_count == 0 || count < req->max_count)) {
		size_t frame = head + s->offs[e->pos + 1] - s->offs[first];
		if (count > 0 &&
		    ((req->max_bytes && frame > req->max_bytes) || frame > PROTO_MAX_REPLY))
			break;
		count++;
		e->pos++;
	}
	size_t len = head + s->offs[e->pos] - s->offs[first];
	if (len > PROTO_MAX_REPLY) /* one record alone is too large */
		return finish(out, req->cmd, start, -EMSGSIZE);
	proto_patch_u32(out, start, (uint32_t)len);
	proto_patch_u32(out, start + PROTO_HDR_SIZE, count);
	conn_queue_tail(c, e->snap, s->offs[first], s->offs[e->pos]);
	return 0;
}

/* The reply to a SET or GET whose cursor was pointed (rc 0) or not. */
static int enum_answer(struct conn *c, const struct proto_req *req, int rc, struct idc_buf *out)
{
	struct enum_cursor *e = req->cmd <= PROTO_CMD_ENDPWENT ? &c->pw : &c->gr;
	if (rc == -EAGAIN)
		return proto_reply_status(out, req->cmd, PROTO_ST_TRYAGAIN,
					  "too many enumerations held open by this user");
	if (rc < 0)
		return reply_failure(out, req->cmd, rc == -ENOENT ? -EIO : rc, false);
	if (req->cmd == PROTO_CMD_SETPWENT || req->cmd == PROTO_CMD_SETGRENT)
		return proto_reply_status(out, req->cmd, PROTO_ST_OK, NULL);
	if (e->pos >= e->snap->n)
		return proto_reply_status(out, req->cmd, PROTO_ST_NOTFOUND, NULL);
	return put_batch(c, e, req, out);
}

/* Point c's cursor of the map at the latest snapshot: at once (0, or an
 * error), or once a build is done (1: req waits, held). A build under way
 * is joined; a new one starts when the uid's spacing allows, until then
 * the request is held (responder_held_timer). */
static int enum_point(struct conn *c, const struct proto_req *req, bool users)
{
	struct daemon *dm = c->dm;
	struct enum_cursor *e = users ? &c->pw : &c->gr;
	bool stale = latest_stale(dm, users);
	if (!stale)
		return enum_take(c, e, dm->snaps[users ? 0 : 1]);
	enum_cursor_free(dm, e);
	if (!affords(c, NULL, users)) /* refused before building for it */
		return -EAGAIN;
	uint64_t wait = dm->snap_jobs[users ? 0 : 1] ? 0 : budget_build_wait(c->uid, idc_now_ns());
	if (wait > 0) {
		hold(c, req, wait);
		return 1;
	}
	int rc = dm->snap_jobs[users ? 0 : 1] ? 0 : job_start(c, users);
	if (rc < 0)
		return rc;
	hold_copy(c, req);
	c->held_build = dm->snap_jobs[users ? 0 : 1]->serial;
	return 1;
}

static int enum_request(struct conn *c, const struct proto_req *req, struct idc_buf *out)
{
	bool users = req->cmd <= PROTO_CMD_ENDPWENT;
	struct enum_cursor *e = users ? &c->pw : &c->gr;
	int rc = 0;
	if (req->cmd == PROTO_CMD_ENDPWENT || req->cmd == PROTO_CMD_ENDGRENT) {
		enum_cursor_free(c->dm, e);
		return proto_reply_status(out, req->cmd, PROTO_ST_OK, NULL);
	}
	if (req->cmd == PROTO_CMD_SETPWENT || req->cmd == PROTO_CMD_SETGRENT)
		enum_cursor_free(c->dm, e); /* restarted: its old snapshot is not charged */
	if (!e->snap)
		rc = enum_point(c, req, users);
	if (rc == 1)
		return 0; /* answered when its snapshot is there */
	return enum_answer(c, req, rc, out);
}

/* ==== dispatch ================================================================================ */

int responder_handle(struct conn *c, const struct proto_req *req, struct idc_buf *out)
{
	switch (req->cmd) {
	case PROTO_CMD_GETPWNAM:
	case PROTO_CMD_GETPWUID:
	case PROTO_CMD_GETGRNAM:
	case PROTO_CMD_GETGRGID:
	case PROTO_CMD_INITGROUPS:
	case PROTO_CMD_SSHKEYS:
	case PROTO_CMD_SUBIDS: {
		struct walk w = {c->dm, c, req, NULL, false, false, 0};
		return handle_lookup(&w, out);
	}
	case PROTO_CMD_SUBID_OWNERS:
		return subid_reply_owners(c->dm, req, out);
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

int responder_handle_user(struct conn *c, const struct proto_req *req, uint32_t uid,
			  struct idc_buf *out)
{
	if (req->cmd != PROTO_CMD_INITGROUPS && req->cmd != PROTO_CMD_SSHKEYS &&
	    req->cmd != PROTO_CMD_SUBIDS)
		return proto_reply_status(out, req->cmd, PROTO_ST_BADREQ, "not about a user");
	struct walk w = {c->dm, c, req, NULL, false, true, uid};
	return handle_lookup(&w, out);
}
