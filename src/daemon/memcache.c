/*
 * memcache: the daemon's side of the shared-memory cache (src/mc) — creating
 * the maps at the configured sizes, handing them to clients (MCMAP), their
 * heartbeat, writing the records the responder answers with, dropping what
 * a change or an expire makes stale, and the counters `idcache status`
 * shows.
 *
 * Records written here expire after DAEMON_MC_TTL_S at the latest, and no
 * later than the answer they hold stops being one to give without asking
 * the directory (the caller's `until`: a record never outlives its
 * entry's expiry, nor lets the refresh window pass unseen): the changes we
 * know of drop them sooner, and the bound keeps a client from serving a
 * dead daemon's answers for long.
 *
 * What a change drops, exactly (nothing else is touched):
 *   user added/removed/changed   passwd records by old and new name and by
 *                                old and new uid; when the name came or
 *                                went, its initgroups record too
 *   group added/removed/changed  group records by old and new name and by
 *                                old and new gid; the initgroups records of
 *                                every member whose answer moves: all
 *                                members when the group came, went, got a
 *                                new gid or moved in the file, else those
 *                                added or removed
 *   ldap group, nested           as a group change, and when the users of
 *                                its member groups gain or lose it (its
 *                                member groups changed, or it came, went
 *                                or got a new gid with member groups), every
 *                                initgroups record (those users are found
 *                                only by a walk)
 *   ldap group, any change       the group records (name and gid) of every
 *                                group nesting it within the domain's
 *                                ldap_group_nesting_level: their member
 *                                lists hold its users (cache_group_members);
 *                                past DAEMON_MC_PARENTS_MAX of them the
 *                                group map, once per provider call
 *   ldap commit not described    every record (daemon_mc_change(NULL))
 *   a name or id new (any        the remote domains' entries carrying it,
 *   domain), while remote        which are withheld now (precedence.c):
 *   domains are checked          by their own name (any spelling the
 *                                new name answers for) and id, and their
 *                                members' group lists; for a group nested in
 *                                another, the group map (the lists that
 *                                held its users); for a user name,
 *                                the records of the groups of later
 *                                domains listing it and of those nesting
 *                                them (member lists leave the names of
 *                                local and earlier users out)
 *   expire --user / --group      the same for the entry as the cache and
 *                                the map know it (its id included, whatever
 *                                the case of the name asked)
 * initgroups records are keyed by the name the client asked. A domain with
 * case_sensitive = false answers several spellings, so there only the
 * folded spelling (cache_name_fold under caseIgnore) is stored, and
 * invalidation drops the given and the folded spelling. Likewise a remote
 * group's member list loses a name when a user of it appears in a files
 * or an earlier domain (precedence.c, member_held); the member index that
 * finds the groups listing it is exact, so it is searched by the user's
 * spelling and its folded one, and a list naming a member in another
 * spelling (ALICE) is not kept in the maps while names are compared
 * ignoring case (members_findable): the socket answers it.
 *
 * glibc's nscd maps (nscdmaps.c) follow these maps call by call: every
 * record written, dropped or reset here is written, dropped or reset
 * there too, whether or not the mc map of its kind is enabled. The one
 * exception is what a group list holds: the nscd socket answers a user's
 * groups with the host's sources' added (nss.sock does not: glibc adds
 * them from the next sources), so the nscd maps take theirs from that
 * answer (daemon_mc_put_nscd_initgroups), under the same spelling rule,
 * and drop them here with the others.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "daemon/daemon.h"

#define DAEMON_MC_TTL_S 300

static uint64_t map_bytes(const struct config *cfg, int k)
{
	uint32_t mib = k == 0   ? cfg->memcache_size_passwd
		       : k == 1 ? cfg->memcache_size_group
				: cfg->memcache_size_initgroups;
	return (uint64_t)mib << 20;
}

int daemon_mc_configure(struct daemon *dm, const struct config *cfg)
{
	for (int k = 0; k < 3; k++) {
		uint64_t want = map_bytes(cfg, k);
		struct mc_stats st;
		mc_writer_stats(dm->mc[k], &st);
		if (dm->mc_opened && st.size == want)
			continue;
		/* A map whose size changes starts over in a new map; one
		 * being disabled is withdrawn from its readers first. */
		int rc;
		if (dm->mc[k] != NULL && want != 0) {
			rc = mc_writer_reset(dm->mc[k], want);
		} else {
			mc_writer_retire(dm->mc[k]);
			mc_writer_close(dm->mc[k]);
			dm->mc[k] = NULL;
			rc = mc_writer_open(MC_PASSWD + (uint32_t)k, want, &dm->mc[k]);
		}
		if (rc < 0)
			idc_log(IDC_LOG_ERR, "memory cache %s: %s",
				mc_kind_name(MC_PASSWD + (uint32_t)k), idc_strerror(rc));
	}
	dm->mc_opened = true;
	return 0;
}

void daemon_mc_close(struct daemon *dm)
{
	for (int k = 0; k < 3; k++) {
		/* Stopping: records must not outlive the daemon that answers
		 * for them (a killed daemon's records expire by their TTL). */
		mc_writer_retire(dm->mc[k]);
		mc_writer_close(dm->mc[k]);
		dm->mc[k] = NULL;
	}
	nscdmaps_close(dm);
}

int daemon_mc_fds(struct daemon *dm, uint32_t mask, int fds[3])
{
	int n = 0;
	for (uint32_t k = MC_PASSWD; k <= MC_INITGROUPS; k++) {
		int fd = mc_writer_fd(dm->mc[k - MC_PASSWD]);
		if ((mask & (1u << k)) && fd >= 0)
			fds[n++] = fd;
	}
	return n;
}

int daemon_mc_share(struct conn *c, uint32_t kind, struct idc_buf *out)
{
	if (kind > MC_INITGROUPS)
		return proto_reply_status(out, PROTO_CMD_MCMAP, PROTO_ST_BADREQ, "no such map");
	/* The descriptors of a reply the client does not read stay in flight
	 * in its socket, and the kernel counts them against our open-file
	 * limit: one MCMAP per connection keeps that within what
	 * listener_fd_budget (listen.c) allows for the configured connections. */
	if (c->mapped)
		return proto_reply_status(out, PROTO_CMD_MCMAP, PROTO_ST_BADREQ,
					  "one MCMAP per connection");
	/* ... and they outlive our end of it: bounded per uid (peers.c) */
	if (!peer_may_map(c))
		return proto_reply_status(out, PROTO_CMD_MCMAP, PROTO_ST_UNAVAIL,
					  "too many unread map replies");
	c->mapped = true;
	uint32_t mask = 0, n = 0;
	for (uint32_t k = MC_PASSWD; k <= MC_INITGROUPS; k++)
		if ((kind == 0 || k == kind) && mc_writer_fd(c->dm->mc[k - MC_PASSWD]) >= 0) {
			mask |= 1u << k;
			n++;
		}
	if (n == 0)
		return proto_reply_status(out, PROTO_CMD_MCMAP, PROTO_ST_UNAVAIL, "map disabled");
	size_t start;
	int rc = proto_reply_begin(out, PROTO_CMD_MCMAP, PROTO_ST_OK, &start);
	rc = rc ? rc : proto_put_u32(out, n);
	for (uint32_t k = MC_PASSWD; rc == 0 && k <= MC_INITGROUPS; k++)
		if (mask & (1u << k))
			rc = proto_put_u32(out, k);
	rc = rc ? rc : proto_reply_end(out, start);
	if (rc == 0)
		conn_pass_maps(c, mask, start);
	return rc;
}

void daemon_mc_beat(struct daemon *dm)
{
	uint32_t now = mc_clock_ms(NULL);
	for (int k = 0; k < 3; k++)
		mc_writer_beat(dm->mc[k], now);
	nscdmaps_beat(dm);
}

/* until: when the answer stops being one to give without asking
 * (responder.c), 0 = no bound of its own. */
static int64_t expiry(int64_t until)
{
	int64_t ttl = (int64_t)time(NULL) + DAEMON_MC_TTL_S;
	return until && until < ttl ? until : ttl;
}

/* Failures only cost a later socket round trip: logged at debug level. */
static void note(const char *what, int rc)
{
	if (rc < 0 && rc != -E2BIG)
		idc_log(IDC_LOG_DEBUG, "memory cache: cannot store %s: %s", what, idc_strerror(rc));
}

void daemon_mc_put_passwd(struct daemon *dm, const struct proto_passwd *pw, unsigned keys,
			  int64_t until)
{
	if (keys != 0)
		note("a user", mc_put_passwd(dm->mc[0], pw, expiry(until), keys));
	nscdmaps_put_passwd(dm, pw, keys, expiry(until));
}

static bool any_case_insensitive(const struct daemon *dm);

/* See the top of the file: only a list whose every member a spelling
 * invalidation can find. Files domains' lists lose no member. */
static bool members_findable(const struct daemon *dm, const struct domain *d,
			     const struct cache_group *g)
{
	if (!d->ldap || d->cfg->allow_local_overlap || !any_case_insensitive(dm))
		return true;
	char folded[CACHE_NAME_MAX + 1];
	for (size_t i = 0; i < g->nmembers; i++) {
		const char *m = g->members[i];
		if (cache_name_fold(CACHE_NAMES_CASE_IGNORE, m, folded) != strlen(m) ||
		    strcmp(folded, m) != 0)
			return false;
	}
	return true;
}

void daemon_mc_put_group(struct daemon *dm, const struct domain *d, const struct cache_group *g,
			 unsigned keys, int64_t until)
{
	if (keys != 0 && !members_findable(dm, d, g))
		keys = 0;
	nscdmaps_put_group(dm, g, keys, expiry(until));
	if (dm->mc[1] == NULL || keys == 0)
		return;
	struct idc_buf b = IDC_BUF_INIT;
	int rc = 0;
	for (size_t i = 0; rc == 0 && i < g->nmembers; i++)
		rc = proto_put_cstr(&b, g->members[i]);
	const char *pw = daemon_passwd_field(g->passwd);
	struct proto_group gr = {{g->name, (uint32_t)strlen(g->name)},
				 {pw, (uint32_t)strlen(pw)},
				 g->gid,
				 {(const uint8_t *)b.data, b.len, (uint32_t)g->nmembers}};
	if (rc == 0)
		rc = mc_put_group(dm->mc[1], &gr, expiry(until), keys);
	note("a group", rc);
	idc_buf_free(&b);
}

/* ==== name spellings ============================================================ */

static bool any_case_insensitive(const struct daemon *dm)
{
	for (size_t i = 0; i < dm->ndomains; i++)
		if (!dm->domains[i]->cfg->case_sensitive)
			return true;
	return false;
}

/* See the top of the file: only a spelling invalidation can find. */
static bool initgroups_key_ok(const struct daemon *dm, const char *user)
{
	char folded[CACHE_NAME_MAX + 1];
	return !any_case_insensitive(dm) ||
	       (cache_name_fold(CACHE_NAMES_CASE_IGNORE, user, folded) == strlen(user) &&
		strcmp(folded, user) == 0);
}

void daemon_mc_put_initgroups(struct daemon *dm, const char *user, const uint32_t *gids, size_t n,
			      int64_t until)
{
	if (dm->mc[2] != NULL && initgroups_key_ok(dm, user))
		note("a group list",
		     mc_put_initgroups(dm->mc[2], user, strlen(user), gids, n, expiry(until)));
}

uint64_t daemon_mc_ig_epoch(const struct daemon *dm)
{
	return dm->mc_ig_epoch;
}

void daemon_mc_put_nscd_initgroups(struct daemon *dm, const char *user, const uint32_t *gids,
				   size_t n, uint64_t epoch, int64_t until)
{
	/* A group list dropped since the cache's part was read: this one may
	 * be the old one, so it is not kept (the socket answers again). */
	if (nscdmaps_on(dm) && epoch == dm->mc_ig_epoch && initgroups_key_ok(dm, user))
		nscdmaps_put_initgroups(dm, user, gids, n, expiry(until));
}

/* ==== invalidation ==============================================================
 * Every drop goes through these two, which drop from both kinds of maps. */

static void inval_name(struct daemon *dm, int k, const char *name, size_t len)
{
	mc_invalidate_name(dm->mc[k], name, len);
	nscdmaps_drop_name(dm, k, name);
}

static void inval_id(struct daemon *dm, int k, uint32_t id)
{
	mc_invalidate_id(dm->mc[k], id);
	nscdmaps_drop_id(dm, k, id);
}

static void drop_initgroups(struct daemon *dm, const char *user)
{
	dm->mc_ig_epoch++;
	if (user == NULL || (dm->mc[2] == NULL && !nscdmaps_on(dm)))
		return;
	inval_name(dm, 2, user, strlen(user));
	char folded[CACHE_NAME_MAX + 1];
	size_t n =
	    any_case_insensitive(dm) ? cache_name_fold(CACHE_NAMES_CASE_IGNORE, user, folded) : 0;
	if (n && strcmp(folded, user) != 0)
		inval_name(dm, 2, folded, n);
}

/* The record named name in map k and every record answering for its id. */
static void drop_named(struct daemon *dm, int k, const char *name)
{
	if (name == NULL || (dm->mc[k] == NULL && !nscdmaps_on(dm)))
		return;
	uint32_t id;
	size_t len = strlen(name);
	if (mc_lookup_id(dm->mc[k], name, len, &id) == 0)
		inval_id(dm, k, id);
	if (nscdmaps_id_of(dm, k, name, &id) == 0) /* the maps may differ */
		inval_id(dm, k, id);
	inval_name(dm, k, name, len);
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static void drop_all_members(struct daemon *dm, const struct cache_change *ch)
{
	for (size_t i = 0; i < ch->nold_mem; i++)
		drop_initgroups(dm, ch->old_mem[i]);
	for (size_t i = 0; i < ch->nnew_mem; i++)
		drop_initgroups(dm, ch->new_mem[i]);
}

/* The members in one list and not the other (sorted copies, merged). */
static void drop_member_changes(struct daemon *dm, const struct cache_change *ch)
{
	size_t no = ch->nold_mem, nn = ch->nnew_mem;
	const char **o = malloc((no + 1) * sizeof(*o)), **n = malloc((nn + 1) * sizeof(*n));
	if (o == NULL || n == NULL) {
		drop_all_members(dm, ch); /* more than needed, never less */
		free(o);
		free(n);
		return;
	}
	memcpy(o, ch->old_mem, no * sizeof(*o));
	memcpy(n, ch->new_mem, nn * sizeof(*n));
	qsort(o, no, sizeof(*o), cmp_str);
	qsort(n, nn, sizeof(*n), cmp_str);
	size_t i = 0, j = 0;
	while (i < no || j < nn) {
		int c = i == no ? 1 : j == nn ? -1 : strcmp(o[i], n[j]);
		if (c < 0)
			drop_initgroups(dm, o[i++]);
		else if (c > 0)
			drop_initgroups(dm, n[j++]);
		else
			i++, j++;
	}
	free(o);
	free(n);
}

static void drop_change(struct daemon *dm, const struct cache_change *ch);

/* Whether some remote domain is kept off the names and ids of the others
 * (precedence.c). */
static bool overlap_checked(const struct daemon *dm)
{
	for (size_t i = 0; i < dm->ndomains; i++)
		if (dm->domains[i]->ldap && !dm->domains[i]->cfg->allow_local_overlap)
			return true;
	return false;
}

static void drop_shadowed(struct daemon *dm, const struct cache_change *ch,
			  const struct domain *from);

/* A change of a files domain (from NULL) or of ldap domain from. */
static void change(struct daemon *dm, const struct cache_change *ch, const struct domain *from)
{
	if (ch == NULL) { /* only an ldap domain reports one */
		idc_log(IDC_LOG_INFO, "memory cache: an ldap commit's changes are not known; "
				      "every map reset");
		for (int k = 0; k < 3; k++)
			daemon_mc_reset(dm, k);
		return;
	}
	drop_change(dm, ch);
	drop_shadowed(dm, ch, from);
	/* Who is in a nested group is not told record by record: the map is
	 * reset, once for all the groups of a commit (a reset costs ~10 ms,
	 * and a directory may change many groups at once). */
	if (ch->group && ch->nested_changed)
		dm->mc_nested_reset = true;
}

void daemon_mc_change(const struct cache_change *ch, void *arg)
{
	change(arg, ch, NULL);
}

static void drop_change(struct daemon *dm, const struct cache_change *ch)
{
	int k = ch->group ? 1 : 0;
	bool came_or_went = ch->old_name == NULL || ch->new_name == NULL;
	const char *names[2] = {ch->old_name, ch->new_name};
	for (int i = 0; i < 2; i++) {
		if (names[i] == NULL)
			continue;
		inval_name(dm, k, names[i], strlen(names[i]));
		inval_id(dm, k, i == 0 ? ch->old_id : ch->new_id);
	}
	if (!ch->group) {
		/* A user's group list depends on its name only. */
		if (came_or_went)
			drop_initgroups(dm, ch->old_name ? ch->old_name : ch->new_name);
		return;
	}
	if (came_or_went || ch->old_id != ch->new_id || ch->moved)
		drop_all_members(dm, ch);
	else
		drop_member_changes(dm, ch);
}

void daemon_mc_ldap_flush(struct daemon *dm)
{
	if (dm->mc_groups_reset) {
		dm->mc_groups_reset = false;
		daemon_mc_reset(dm, 1);
	}
	if (!dm->mc_nested_reset)
		return;
	dm->mc_nested_reset = false;
	daemon_mc_reset(dm, 2);
}

/* ==== parents of a changed group ==================================================
 * A group's record lists the users of its member groups too
 * (cache_group_members), so a group that changed makes the records of the
 * groups nesting it stale, up to the levels they are followed: those are
 * dropped by name and gid, found by walking up the cache as committed.
 * Past DAEMON_MC_PARENTS_MAX parents (or without a reader) the group map
 * is reset instead, once for the commit. */
#define DAEMON_MC_PARENTS_MAX 256u

struct parents {
	char **v; /* names, heap; [0, level_end) walked, the rest the next level */
	size_t n, cap;
	bool failed;
};

static int parent_cb(const char *name, void *arg)
{
	struct parents *p = arg;
	for (size_t i = 0; i < p->n; i++)
		if (strcasecmp(p->v[i], name) == 0) /* a cycle, or met twice */
			return 0;
	if (p->n == DAEMON_MC_PARENTS_MAX)
		return -E2BIG;
	if (p->n == p->cap) {
		size_t cap = p->cap ? p->cap * 2 : 8;
		char **grown = realloc(p->v, cap * sizeof(*grown));
		if (!grown)
			return -ENOMEM;
		p->v = grown;
		p->cap = cap;
	}
	return (p->v[p->n] = strdup(name)) ? (p->n++, 0) : -ENOMEM;
}

/* Every group of domain cfg nesting one of p's groups (from start on)
 * within its nesting level, into p after them. */
static int walk_up(struct cache_reader *r, const struct config_domain *cfg, struct parents *p,
		   size_t start)
{
	int rc = 0;
	uint32_t levels = cfg->ldap ? cfg->ldap->nesting_level : 0;
	for (uint32_t level = 0; !rc && level < levels && start < p->n; level++) {
		size_t end = p->n;
		for (size_t i = start; !rc && i < end; i++)
			rc =
			    cache_linked(r, cfg->name, CACHE_LINK_NESTED, p->v[i], 0, parent_cb, p);
		start = end;
	}
	return rc;
}

/* Every group of domain cfg that nests one of ch's names within its
 * nesting level, into p after the names (*names of them: one when both
 * are the same). */
static int walk_parents(struct cache_reader *r, const struct config_domain *cfg,
			const struct cache_change *ch, struct parents *p, size_t *names)
{
	int rc = 0;
	if (ch->old_name)
		rc = parent_cb(ch->old_name, p);
	if (!rc && ch->new_name)
		rc = parent_cb(ch->new_name, p);
	*names = p->n;
	return rc ? rc : walk_up(r, cfg, p, 0);
}

/* p's groups of domain cfg from start on: their records, by name and gid
 * (one kept by gid only too). */
static void drop_groups(struct daemon *dm, struct cache_reader *r, const struct config_domain *cfg,
			const struct parents *p, size_t start)
{
	for (size_t i = start; i < p->n; i++) {
		const char *dn = cfg->name;
		struct cache_group g;
		drop_named(dm, 1, p->v[i]);
		if (cache_group_by_name(r, &dn, 1, p->v[i], false, &g, NULL) == 0)
			inval_id(dm, 1, g.gid);
	}
}

static void parents_free(struct parents *p)
{
	for (size_t i = 0; i < p->n; i++)
		free(p->v[i]);
	free(p->v);
}

static void drop_parents(struct daemon *dm, const struct config_domain *cfg,
			 const struct cache_change *ch)
{
	if (dm->mc_groups_reset || (dm->mc[1] == NULL && !nscdmaps_on(dm)))
		return;
	struct parents p = {0};
	struct cache_reader *r = NULL;
	int rc = cache_reader_begin(dm->cache, &r);
	size_t names = 0;
	if (rc == 0)
		rc = walk_parents(r, cfg, ch, &p, &names);
	if (rc == 0)
		drop_groups(dm, r, cfg, &p, names);
	if (rc != 0) /* more than needed, never less */
		dm->mc_groups_reset = true;
	cache_reader_end(r);
	parents_free(&p);
}

/* A user name new in a files domain or an earlier one leaves remote
 * domain cfg's member lists (precedence.c, member_held): the records of its groups
 * listing the name, and of those nesting them (their lists hold its
 * users), go. Past DAEMON_MC_PARENTS_MAX of them the group map starts over. */
static void drop_listing(struct daemon *dm, struct cache_reader *r, const struct config_domain *cfg,
			 const char *user)
{
	if (dm->mc[1] == NULL && !nscdmaps_on(dm))
		return;
	struct parents p = {0};
	char folded[CACHE_NAME_MAX + 1];
	size_t n =
	    any_case_insensitive(dm) ? cache_name_fold(CACHE_NAMES_CASE_IGNORE, user, folded) : 0;
	int rc = cache_linked(r, cfg->name, CACHE_LINK_MEMBER, user, 0, parent_cb, &p);
	if (rc == 0 && n && strcmp(folded, user) != 0) /* members_findable */
		rc = cache_linked(r, cfg->name, CACHE_LINK_MEMBER, folded, 0, parent_cb, &p);
	rc = rc ? rc : walk_up(r, cfg, &p, 0);
	if (rc == 0)
		drop_groups(dm, r, cfg, &p, 0);
	else
		daemon_mc_reset(dm, 1);
	parents_free(&p);
}

void daemon_mc_ldap_change(const struct cache_change *ch, void *arg)
{
	struct domain *d = arg;
	change(d->dm, ch, d);
	if (ch != NULL && ch->group)
		drop_parents(d->dm, d->cfg, ch);
}

/* ==== names and ids taken from remote domains =====================================
 * A name or id new in one domain withholds the remote domains' entries
 * that carry it (precedence.c). drop_change dropped the records keyed by
 * that name and id; such an entry also answers under its own name (which
 * may be another spelling: Carol for a new carol) and id, and in its
 * members' group lists. */

static int any_cb(const char *name, void *arg)
{
	(void)name;
	*(bool *)arg = true;
	return 1;
}

/* g of domain dn is withheld now: its members' group lists go, and the
 * records of the groups nesting it, whose member lists held its users
 * (cache_group_members passes over it now; found only by a walk, so the
 * group map starts over: more than needed, never less). */
static void drop_members(struct daemon *dm, struct cache_reader *r, const char *dn,
			 const struct cache_group *g)
{
	for (size_t m = 0; m < g->nmembers; m++)
		drop_initgroups(dm, g->members[m]);
	if (g->nmember_groups) /* their users are found only by a walk */
		daemon_mc_reset(dm, 2);
	/* last: the search reuses the reader's memory g points into */
	bool nested = false;
	int rc = cache_linked(r, dn, CACHE_LINK_NESTED, g->name, 0, any_cb, &nested);
	if (nested || (rc != 0 && rc != 1))
		daemon_mc_reset(dm, 1);
}

/* Whether an entry named name with id is not ch's own (whose records
 * drop_change dropped): one that a lookup of ch's name or id found in
 * another spelling or with another id is keyed in the maps by its own
 * name, and goes by it. */
static bool other_entry(const struct cache_change *ch, const char *name, uint32_t id)
{
	return strcmp(name, ch->new_name) != 0 || id != ch->new_id;
}

/* Domain dn's entries carrying ch's new name (in any spelling it answers
 * for: dropping more is safe) or id, but not ch's own: every record of
 * theirs. Each result is used before the next lookup. */
static void drop_shadowed_in(struct daemon *dm, struct cache_reader *r,
			     const struct config_domain *cfg, const struct cache_change *ch,
			     bool listing)
{
	const char *dn = cfg->name;
	struct cache_user u;
	struct cache_group g;
	for (int by_id = 0; !ch->group && by_id < 2; by_id++) {
		int rc = by_id ? cache_user_by_uid(r, &dn, 1, ch->new_id, &u, NULL)
			       : cache_user_by_name(r, &dn, 1, ch->new_name, false, &u, NULL);
		if (rc == 0 && other_entry(ch, u.name, u.uid)) {
			drop_named(dm, 0, u.name);
			inval_id(dm, 0, u.uid);
			drop_initgroups(dm, u.name);
		}
	}
	if (!ch->group && listing)
		drop_listing(dm, r, cfg, ch->new_name);
	for (int by_id = 0; ch->group && by_id < 2; by_id++) {
		int rc = by_id ? cache_group_by_gid(r, &dn, 1, ch->new_id, &g, NULL)
			       : cache_group_by_name(r, &dn, 1, ch->new_name, false, &g, NULL);
		if (rc == 0 && other_entry(ch, g.name, g.gid)) {
			drop_named(dm, 1, g.name);
			inval_id(dm, 1, g.gid);
			drop_members(dm, r, dn, &g);
		}
	}
}

/* ch's name or id, new in domain from (NULL: a files domain), withholds
 * the remote domains' entries carrying it; its user name leaves the
 * member lists of the remote domains after from (all, for a files one). */
static void drop_shadowed(struct daemon *dm, const struct cache_change *ch,
			  const struct domain *from)
{
	bool fresh = ch->new_name && (!ch->old_name || ch->old_id != ch->new_id ||
				      strcmp(ch->old_name, ch->new_name) != 0);
	if (!fresh || !overlap_checked(dm))
		return;
	struct cache_reader *r;
	if (cache_reader_begin(dm->cache, &r) < 0) {
		daemon_mc_reset(dm, ch->group ? 1 : 0); /* more than needed, never less */
		daemon_mc_reset(dm, 2);
		return;
	}
	bool later = from == NULL;
	for (size_t i = 0; i < dm->ndomains; i++) {
		if (dm->domains[i]->ldap && !dm->domains[i]->cfg->allow_local_overlap)
			drop_shadowed_in(dm, r, dm->domains[i]->cfg, ch, later);
		later |= dm->domains[i] == from;
	}
	cache_reader_end(r);
}

/* expire --user NAME: the user as each domain's cache knows it. */
static void expire_user(struct daemon *dm, const char *name)
{
	drop_named(dm, 0, name);
	drop_initgroups(dm, name);
	struct cache_reader *r = daemon_reader(dm);
	for (size_t i = 0; r && i < dm->ndomains; i++) {
		const struct config_domain *cfg = dm->domains[i]->cfg;
		const char *dn = cfg->name;
		struct cache_user u;
		if (cache_user_by_name(r, &dn, 1, name, cfg->case_sensitive, &u, NULL) != 0)
			continue;
		drop_named(dm, 0, u.name);
		inval_id(dm, 0, u.uid);
		drop_initgroups(dm, u.name);
	}
}

/* expire --group NAME: the group, and the group lists of its members. */
static void expire_group(struct daemon *dm, const char *name)
{
	drop_named(dm, 1, name);
	struct cache_reader *r = daemon_reader(dm);
	for (size_t i = 0; r && i < dm->ndomains; i++) {
		const struct config_domain *cfg = dm->domains[i]->cfg;
		const char *dn = cfg->name;
		struct cache_group g;
		if (cache_group_by_name(r, &dn, 1, name, cfg->case_sensitive, &g, NULL) != 0)
			continue;
		drop_named(dm, 1, g.name);
		inval_id(dm, 1, g.gid);
		for (size_t m = 0; m < g.nmembers; m++)
			drop_initgroups(dm, g.members[m]);
		/* Members of nested groups have it too, found only by a walk. */
		if (g.nmember_groups)
			daemon_mc_reset(dm, 2);
	}
	if (r == NULL) /* members unknown: drop every group list */
		daemon_mc_reset(dm, 2);
}

void daemon_mc_expire(struct daemon *dm, uint32_t what, const char *name)
{
	if (what == PROTO_EXPIRE_USER && name != NULL) {
		expire_user(dm, name);
		return;
	}
	if (what == PROTO_EXPIRE_GROUP && name != NULL) {
		expire_group(dm, name);
		return;
	}
	for (int k = 0; k < 3; k++)
		daemon_mc_reset(dm, k);
}

void daemon_mc_reset(struct daemon *dm, int k)
{
	if (k == 2)
		dm->mc_ig_epoch++;
	nscdmaps_reset(dm, k);
	int rc = mc_writer_reset(dm->mc[k], 0);
	if (rc < 0)
		idc_log(IDC_LOG_ERR, "memory cache %s: reset failed: %s",
			mc_kind_name(MC_PASSWD + (uint32_t)k), idc_strerror(rc));
}

void daemon_mc_status(struct daemon *dm, struct idc_buf *b)
{
	for (int k = 0; k < 3; k++) {
		struct mc_stats st;
		const char *name = mc_kind_name(MC_PASSWD + (uint32_t)k);
		mc_writer_stats(dm->mc[k], &st);
		idc_buf_printf(b,
			       "memcache_%s_size=%" PRIu64 "\nmemcache_%s_records=%u\n"
			       "memcache_%s_slots_used=%u/%u\nmemcache_%s_evictions=%" PRIu64
			       "\nmemcache_%s_generation=%" PRIu64 "\n",
			       name, st.size, name, st.records, name, st.slots_used, st.slot_count,
			       name, st.evictions, name, st.generation);
	}
	nscdmaps_status(dm, b);
}
