/*
 * precedence: what a domain may not serve although it holds it (docs/DESIGN.md
 * §11). The domain order decides between domains; this decides whether a
 * remote domain may serve an entry at all.
 *
 * A remote (ldap) domain's user or group is withheld when
 *   - filter_users / filter_groups list its name (every domain: a files
 *     domain only with lists of its own), or, unless allow_local_overlap,
 *   - its name or its id (uid, gid) is held by the host's own files or by
 *     an earlier domain in `domains` order.
 * The host's own files are the files domains' data when the configuration
 * has any (wherever they stand in the order), else /etc/passwd and
 * /etc/group as read here (read again when their inode, size or mtime
 * changed, looked at no more than once a second, and at least at every
 * sweep: a change starts the memory-cache maps it may affect over). Names compare exactly,
 * or, when either side's domain ignores case, as the cache answers a lookup ignoring
 * case (cache_name_answers: Unicode case and compatibility forms, so FULLWIDTH
 * ｒｏｏｔ, which a lookup of root is answered with, is held by the host's root).
 *
 * A withheld entry is answered as if its domain did not hold it: a lookup
 * goes on to the next domain, its gid leaves its members' group lists, an
 * enumeration skips it. The names filter_users lists leave the domain's
 * group member lists too (sssd's filter_users_in_groups default), and so
 * do, unless allow_local_overlap, the names of the host's own users and
 * of an earlier domain's (member_held): the domain's user of such a name
 * is withheld. Each is logged once with its DN,
 * in the provider's log-once set, and counted (domain.NAME.withheld in `idcache status`).
 *
 * Lookups here run on a reader of their own (dm->aside), so the records
 * the responder holds from daemon_reader stay valid.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>

#include "daemon/daemon.h"

#define HOST_PASSWD "/etc/passwd"
/* withheld_why's tag when a check could not be made */
static const char CHECK_FAILED[] = "check failed";
#define HOST_GROUP "/etc/group"

/* The host's passwd or group file as last read. */
struct host_file {
	struct files_snapshot *s; /* NULL: absent or unreadable */
	uint32_t *ids;            /* sorted uids or gids */
	char **folded;            /* sorted, fold_copy's "FOLDED\0NAME" */
	size_t n;
	struct stat st;
	bool have_st;
	bool lacking; /* it could not be read for want of memory or descriptors */
};

struct host_files {
	struct host_file pw, gr;
	int64_t checked; /* unix seconds of the last stat */
	uint64_t reads;  /* times a file was read again */
};

/* What gid_withheld found for (domain, gid), while the data it looked at
 * is unchanged (gen): a user's group list checks each of its groups, and
 * users share groups. Direct-mapped; a collision costs a recheck. */
#define MEMO_SLOTS 4096u

struct gid_memo {
	uint64_t gen; /* 0: empty */
	size_t domain;
	uint32_t gid;
	bool withheld;
};

/* Every uid and gid the files domains hold (users' uid and primary gid,
 * groups' gid), sorted, and their users' names (fold_copy's form,
 * sorted), for the data generation gen: a range or member check is a
 * binary search, not a scan per request. */
struct held_ids {
	uint64_t gen; /* held_gen() when built; 0: not built */
	uint32_t *ids;
	size_t n, cap;
	struct idc_buf folded; /* the names' fold_copy forms, one after another */
	char **names;          /* into folded, sorted */
	size_t nnames;
	bool names_cs; /* every files domain compares names exactly */
	bool failed;   /* the last build could not read or keep everything */
};

static void held_names_clear(struct held_ids *h)
{
	idc_buf_reset(&h->folded);
	h->nnames = 0;
}

/* ==== the host's files ============================================================ */

static void host_file_clear(struct host_file *h)
{
	files_snapshot_free(h->s);
	for (size_t i = 0; h->folded && i < h->n; i++)
		free(h->folded[i]);
	free(h->folded);
	free(h->ids);
	*h = (struct host_file){0};
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return x < y ? -1 : x > y;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* name's cache_name_fold form (the cache's key rule) into f; its length.
 * It sorts the indexes below and is what they are searched by. */
static size_t fold_key(const char *name, char f[CACHE_NAME_MAX + 1])
{
	size_t n = cache_name_fold(CACHE_NAMES_STORED, name, f);
	return n ? n : (size_t)snprintf(f, CACHE_NAME_MAX + 1, "%.*s", CACHE_NAME_MAX, name);
}

/* "FOLDED\0NAME": fold_key's form, which sorts the index, then name
 * itself, which host_holds compares with cache_name_answers. */
static char *fold_copy(const char *name)
{
	char f[CACHE_NAME_MAX + 1];
	size_t n = fold_key(name, f), len = strlen(name);
	char *c = malloc(n + 1 + len + 1);
	if (c) {
		memcpy(c, f, n + 1);
		memcpy(c + n + 1, name, len + 1);
	}
	return c;
}

/* Whether the sorted folded[0..n) (fold_copy's form) hold name: exactly
 * (cs), or a name that a lookup of name is answered by, as the cache
 * answers one ignoring case (cache_name_answers): FULLWIDTH ｒｏｏｔ is root
 * to a directory, and to the cache. Searched by the folded form alone
 * (strcmp stops at its NUL), kept on the stack: a member check of a big
 * group allocates nothing. */
static bool folded_holds(char *const *folded, size_t n, const char *name, bool cs)
{
	char f[CACHE_NAME_MAX + 1];
	fold_key(name, f);
	const char *key = f;
	char *const *at = n ? bsearch(&key, folded, n, sizeof(*folded), cmp_str) : NULL;
	bool found = false;
	while (at && at > folded && !strcmp(at[-1], key))
		at--; /* the first of the names sharing the folded form */
	for (; at && at < folded + n && !strcmp(*at, key) && !found; at++) {
		const char *stored = *at + strlen(*at) + 1;
		found = cs ? strcmp(stored, name) == 0
			   : cache_name_answers(CACHE_NAMES_STORED, stored, name);
	}
	return found;
}

static bool host_holds_name(const struct host_file *h, const char *name)
{
	return folded_holds(h->folded, h->n, name, false);
}

/* The sorted id and folded name indexes of h->s. */
static int host_index(struct host_file *h, bool group)
{
	size_t n = group ? h->s->ngroups : h->s->nusers;
	h->ids = calloc(n ? n : 1, sizeof(*h->ids));
	h->folded = calloc(n ? n : 1, sizeof(*h->folded));
	if (!h->ids || !h->folded)
		return -ENOMEM;
	for (; h->n < n; h->n++) {
		size_t i = h->n;
		h->ids[i] = group ? h->s->groups[i].gid : h->s->users[i].uid;
		if (!(h->folded[i] = fold_copy(group ? h->s->groups[i].name : h->s->users[i].name)))
			return -ENOMEM;
	}
	qsort(h->ids, n, sizeof(*h->ids), cmp_u32);
	qsort(h->folded, n, sizeof(*h->folded), cmp_str);
	return 0;
}

static int host_read(struct host_file *h, const char *path, bool group)
{
	char *data = NULL;
	size_t len = 0;
	int rc = files_read(path, &data, &len);
	if (rc == 0 && !(h->s = files_snapshot_new()))
		rc = -ENOMEM;
	if (rc == 0)
		rc = group ? files_snapshot_add_group(h->s, path, 0, data, len, false)
			   : files_snapshot_add_passwd(h->s, path, 0, data, len, false);
	free(data);
	return rc == 0 ? host_index(h, group) : rc;
}

/* Read path again when it changed since h was read; whether it did. */
static bool host_refresh(struct host_file *h, const char *path, bool group, uint64_t *reads)
{
	struct stat st;
	bool have = stat(path, &st) == 0;
	if (have == h->have_st &&
	    (!have || (st.st_ino == h->st.st_ino && st.st_dev == h->st.st_dev &&
		       st.st_size == h->st.st_size && st.st_mtim.tv_sec == h->st.st_mtim.tv_sec &&
		       st.st_mtim.tv_nsec == h->st.st_mtim.tv_nsec)))
		return false;
	host_file_clear(h);
	h->have_st = have;
	if (have)
		h->st = st;
	(*reads)++;
	int rc = have ? host_read(h, path, group) : 0;
	if (rc < 0) {
		/* Nothing known is held: remote entries are served as if the
		 * file were empty, which the log says. */
		idc_log(IDC_LOG_ERR, "%s: cannot read it to keep remote domains off its names: %s",
			path, idc_strerror(rc));
		host_file_clear(h);
		/* A passing shortage withholds every remote entry (host_holds)
		 * and is read again at the next look, not at the next change. */
		h->lacking = rc == -ENOMEM || rc == -EMFILE || rc == -ENFILE;
		h->have_st = have && !h->lacking;
		h->st = st;
	}
	return true;
}

/* Whether the daemon reads the host's files itself: no files domain, or
 * one that has not loaded since start (it could not read its files or
 * store them): its cache may hold nothing, and a directory entry must not
 * take a local name or id meanwhile. */
static bool reads_host(const struct daemon *dm)
{
	bool files = false;
	for (size_t i = 0; i < dm->ndomains; i++) {
		if (dm->domains[i]->ldap)
			continue;
		if (!dm->domains[i]->loaded)
			return true;
		files = true;
	}
	return !files;
}

static struct host_files *host_files(struct daemon *dm)
{
	if (!dm->host && !(dm->host = calloc(1, sizeof(*dm->host))))
		return NULL;
	int64_t now = (int64_t)time(NULL);
	if (now == dm->host->checked)
		return dm->host;
	bool first = dm->host->checked == 0; /* the maps hold nothing this withholds */
	dm->host->checked = now;
	/* The maps may hold entries the change withholds now (or the other
	 * way round): start over the maps of the kind, and the group lists. */
	bool pw = host_refresh(&dm->host->pw, HOST_PASSWD, false, &dm->host->reads);
	bool gr = host_refresh(&dm->host->gr, HOST_GROUP, true, &dm->host->reads);
	if (pw && !first)
		daemon_mc_reset(dm, 0);
	if (gr && !first)
		daemon_mc_reset(dm, 1);
	if ((pw || gr) && !first)
		daemon_mc_reset(dm, 2);
	return dm->host;
}

void daemon_host_check(struct daemon *dm)
{
	bool remote = false;
	for (size_t i = 0; i < dm->ndomains; i++)
		remote = remote || dm->domains[i]->ldap;
	if (remote && reads_host(dm))
		host_files(dm);
}

void daemon_host_free(struct daemon *dm)
{
	free(dm->gid_memo);
	dm->gid_memo = NULL;
	if (dm->held_ids) {
		idc_buf_free(&dm->held_ids->folded);
		free(dm->held_ids->names);
		free(dm->held_ids->ids);
	}
	free(dm->held_ids);
	dm->held_ids = NULL;
	free(dm->members);
	dm->members = NULL;
	dm->members_cap = 0;
	if (!dm->host)
		return;
	host_file_clear(&dm->host->pw);
	host_file_clear(&dm->host->gr);
	free(dm->host);
	dm->host = NULL;
}

static bool host_holds(const struct host_file *h, bool group, const char *name, bool cs,
		       uint32_t id, bool *by_name)
{
	if (!h->s)
		return false;
	if (cs)
		*by_name = (group ? files_snapshot_group(h->s, name)
				  : files_snapshot_user(h->s, name)) >= 0;
	else
		*by_name = host_holds_name(h, name);
	return *by_name || bsearch(&id, h->ids, h->n, sizeof(*h->ids), cmp_u32) != NULL;
}

/* ==== domains =================================================================== */

static struct cache_reader *aside(struct daemon *dm)
{
	if (!dm->aside && cache_reader_begin(dm->cache, &dm->aside) < 0)
		dm->aside = NULL;
	return dm->aside;
}

void daemon_aside_end(struct daemon *dm)
{
	cache_reader_end(dm->aside);
	dm->aside = NULL;
}

struct entry {
	bool group;
	const char *name;
	uint32_t id;
	const char *dn;
};

/* A check that could not be made (no reader, a lookup that failed, the
 * host's files not kept) withholds: an entry is never served because its
 * check failed. The error is kept for the responder to answer with
 * (daemon_checks_failed), so the lookup fails instead of going on to the
 * next domain. */
static const char *check_failed(struct daemon *dm, int err, char *why, size_t cap)
{
	dm->checks_err = err;
	snprintf(why, cap, "the check failed: %s", idc_strerror(err));
	return CHECK_FAILED;
}

int daemon_checks_failed(struct daemon *dm)
{
	int err = dm->checks_err;
	dm->checks_err = 0;
	return err;
}

/* Whether domain j holds e's name or id: the tag saying which (NULL: it
 * does not), why the long form. Files domains are the host's own. */
static const char *domain_holds(struct daemon *dm, size_t i, size_t j, const struct entry *e,
				char *why, size_t cap)
{
	struct cache_reader *r = aside(dm);
	const struct config_domain *cfg = dm->domains[j]->cfg;
	const char *dn = cfg->name;
	bool cs = cfg->case_sensitive && dm->domains[i]->cfg->case_sensitive;
	bool local = !dm->domains[j]->ldap;
	struct cache_user u;
	struct cache_group g;
	if (!r)
		return check_failed(dm, -EIO, why, cap);
	int rn = e->group ? cache_group_by_name(r, &dn, 1, e->name, cs, &g, NULL)
			  : cache_user_by_name(r, &dn, 1, e->name, cs, &u, NULL);
	int ri = rn == 0    ? -ENOENT
		 : e->group ? cache_group_by_gid(r, &dn, 1, e->id, &g, NULL)
			    : cache_user_by_uid(r, &dn, 1, e->id, &u, NULL);
	if ((rn < 0 && rn != -ENOENT) || (ri < 0 && ri != -ENOENT))
		return check_failed(dm, rn < 0 && rn != -ENOENT ? rn : ri, why, cap);
	bool name = rn == 0, id = ri == 0;
	if (name)
		snprintf(why, cap, "the name is held by domain %s", dn);
	else if (id)
		snprintf(why, cap, "%s %u is held by domain %s", e->group ? "gid" : "uid", e->id,
			 dn);
	if (!name && !id)
		return NULL;
	return local ? (name ? "local name" : "local id")
		     : (name ? "earlier domain name" : "earlier domain id");
}

/* Whether the host's files or a domain before i (or any files domain)
 * hold e's name or id: domain_holds' tag, or NULL. */
static const char *held(struct daemon *dm, size_t i, const struct entry *e, char *why, size_t cap)
{
	const char *tag = NULL;
	for (size_t j = 0; j < dm->ndomains && !tag; j++)
		if (j != i && (j < i || !dm->domains[j]->ldap))
			tag = domain_holds(dm, i, j, e, why, cap);
	if (tag)
		return tag;
	if (!reads_host(dm))
		return NULL;
	struct host_files *h = host_files(dm);
	bool by_name = false;
	if (!h || (e->group ? h->gr.lacking : h->pw.lacking))
		return check_failed(dm, -ENOMEM, why, cap);
	if (!host_holds(e->group ? &h->gr : &h->pw, e->group, e->name,
			dm->domains[i]->cfg->case_sensitive, e->id, &by_name))
		return NULL;
	if (by_name)
		snprintf(why, cap, "the name is held by %s", e->group ? HOST_GROUP : HOST_PASSWD);
	else
		snprintf(why, cap, "%s %u is held by %s", e->group ? "gid" : "uid", e->id,
			 e->group ? HOST_GROUP : HOST_PASSWD);
	return by_name ? "local name" : "local id";
}

/* Why domain i may not serve e: a short tag (NULL: it may), why the long
 * form. Neither logs nor counts. */
static const char *withheld_why(struct daemon *dm, size_t i, const struct entry *e, char *why,
				size_t cap)
{
	struct domain *d = dm->domains[i];
	const struct config_domain *cfg = d->cfg;
	const char *filter = e->group ? "filter_groups" : "filter_users";
	if (config_names_has(e->group ? &cfg->filter_groups : &cfg->filter_users, e->name,
			     cfg->case_sensitive)) {
		snprintf(why, cap, "%s lists it", filter);
		return filter;
	}
	if (!d->ldap || cfg->allow_local_overlap)
		return NULL;
	return held(dm, i, e, why, cap);
}

static bool withheld(struct daemon *dm, size_t i, const struct entry *e)
{
	struct domain *d = dm->domains[i];
	char why[160], msg[768];
	const char *tag = withheld_why(dm, i, e, why, sizeof(why));
	if (!tag)
		return false;
	if (!d->ldap || tag == CHECK_FAILED)
		return true; /* a files domain's own filter, or no finding: nothing to report */
	snprintf(msg, sizeof(msg), "domain %s: %s \"%s\" (%s %u, %.400s) not served: %s",
		 d->cfg->name, e->group ? "group" : "user", e->name, e->group ? "gid" : "uid",
		 e->id, e->dn ? e->dn : "no DN", why);
	if (ldapdom_note_once(d, msg))
		d->withheld++;
	return true;
}

const char *daemon_withheld_reason(struct daemon *dm, size_t i, bool group, const char *name,
				   uint32_t id)
{
	char why[160];
	struct entry e = {group, name, id, NULL};
	return withheld_why(dm, i, &e, why, sizeof(why));
}

bool daemon_user_withheld(struct daemon *dm, size_t i, const struct cache_user *u)
{
	struct entry e = {false, u->name, u->uid, u->orig_dn};
	return withheld(dm, i, &e);
}

bool daemon_group_withheld(struct daemon *dm, size_t i, const struct cache_group *g)
{
	struct entry e = {true, g->name, g->gid, g->orig_dn};
	return withheld(dm, i, &e);
}

/* Whether domain i's group gid is withheld. The group's strings are
 * copied first: the checks use the same reader. */
static bool gid_withheld(struct daemon *dm, size_t i, uint32_t gid)
{
	struct cache_reader *r = aside(dm);
	const char *dn = dm->domains[i]->cfg->name;
	struct cache_group g;
	char why[160];
	int rc = r ? cache_group_by_gid(r, &dn, 1, gid, &g, NULL) : -EIO;
	if (rc == -ENOENT)
		return false;
	if (rc < 0)
		return check_failed(dm, rc, why, sizeof(why)) != NULL;
	char name[CACHE_NAME_MAX + 1], odn[512];
	snprintf(name, sizeof(name), "%s", g.name);
	snprintf(odn, sizeof(odn), "%s", g.orig_dn ? g.orig_dn : "no DN");
	struct entry e = {true, name, gid, odn};
	return withheld(dm, i, &e);
}

/* The state gid_withheld's answers depend on: the cache's data and
 * configuration, and the host's files as read. Never 0. */
static uint64_t memo_gen(struct daemon *dm)
{
	struct host_files *h = reads_host(dm) ? host_files(dm) : NULL;
	return (daemon_data_gen(dm) ^ ((h ? h->reads : 0) << 48)) | 1u << 31;
}

uint64_t daemon_checks_gen(struct daemon *dm)
{
	return memo_gen(dm);
}

static bool gid_withheld_memo(struct daemon *dm, size_t i, uint32_t gid, uint64_t gen)
{
	if (!dm->gid_memo && !(dm->gid_memo = calloc(MEMO_SLOTS, sizeof(*dm->gid_memo))))
		return gid_withheld(dm, i, gid);
	struct gid_memo *m = &dm->gid_memo[(gid * 2654435761u + i) % MEMO_SLOTS];
	if (m->gen != gen || m->domain != i || m->gid != gid) {
		bool w = gid_withheld(dm, i, gid);
		/* a check that failed is made again next time */
		*m = (struct gid_memo){dm->checks_err ? 0 : gen, i, gid, w};
	}
	return m->withheld;
}

void daemon_gids_withhold(struct daemon *dm, size_t i, uint32_t *gids, size_t *n)
{
	const struct domain *d = dm->domains[i];
	if (!d->ldap && d->cfg->filter_groups.n == 0)
		return;
	uint64_t gen = memo_gen(dm);
	size_t kept = 0;
	for (size_t k = 0; k < *n; k++)
		if (!gid_withheld_memo(dm, i, gids[k], gen))
			gids[kept++] = gids[k];
	*n = kept;
}

/* How domain i's nesting is followed: as deep as its provider fetches
 * groups (files domains have none), past its withheld member groups. */
struct nesting {
	struct cache_nesting nest;
	struct daemon *dm;
	size_t i;
};

static bool skip_withheld(const struct cache_group *g, void *arg)
{
	const struct nesting *n = arg;
	return daemon_group_withheld(n->dm, n->i, g);
}

static const struct cache_nesting *nesting(struct daemon *dm, size_t i, struct nesting *n)
{
	const struct config_domain *cfg = dm->domains[i]->cfg;
	*n = (struct nesting){{cfg->ldap ? cfg->ldap->nesting_level : 0, skip_withheld, n}, dm, i};
	return &n->nest;
}

int daemon_user_gids(struct daemon *dm, size_t i, struct cache_reader *r, const char *name,
		     bool case_sensitive, size_t *n)
{
	const char *dn = dm->domains[i]->cfg->name;
	struct nesting nest;
	const struct cache_nesting *how = nesting(dm, i, &nest);
	int rc = cache_initgroups(r, &dn, 1, name, case_sensitive, how, dm->gids, dm->gids_cap, n);
	if (rc == -ERANGE) {
		uint32_t *grown = realloc(dm->gids, *n * sizeof(*grown));
		if (!grown)
			return -ENOMEM;
		dm->gids = grown;
		dm->gids_cap = *n;
		rc = cache_initgroups(r, &dn, 1, name, case_sensitive, how, dm->gids, dm->gids_cap,
				      n);
	}
	return rc;
}

static struct held_ids *held_ids(struct daemon *dm);

/* Whether an earlier remote domain j < i holds a user named member, as
 * its cache says (the reader is dm->aside: g's members stay valid). A
 * lookup that fails is a check that could not be made (check_failed). */
static bool member_earlier(struct daemon *dm, size_t i, const char *member)
{
	char why[160];
	for (size_t j = 0; j < i; j++) {
		const struct config_domain *cfg = dm->domains[j]->cfg;
		const char *dn = cfg->name;
		bool cs = cfg->case_sensitive && dm->domains[i]->cfg->case_sensitive;
		if (!dm->domains[j]->ldap)
			continue; /* files domains: held_ids */
		struct cache_reader *r = aside(dm);
		struct cache_user u;
		int rc = r ? cache_user_by_name(r, &dn, 1, member, cs, &u, NULL) : -EIO;
		if (rc == 0)
			return true;
		if (rc != -ENOENT)
			return check_failed(dm, rc, why, sizeof(why)) != NULL;
	}
	return false;
}

/* Whether member, a member name of remote domain i's group, names another
 * domain's user: the host's own (h: held_ids; hf: the host's files when
 * read here) or an earlier domain's. The domain's user of that name is
 * withheld then, and the name means that other user, whose group list
 * (initgroups, from its own domain alone) never holds this group: left
 * out, or getgrnam's members and the user's groups would disagree, and
 * the directory would add other domains' users to its groups
 * (docs/DESIGN.md §11). The one member rule of every path. */
static bool member_held(struct daemon *dm, size_t i, const struct held_ids *h,
			const struct host_files *hf, const char *member)
{
	bool cs = dm->domains[i]->cfg->case_sensitive;
	if (!h || h->failed || folded_holds(h->names, h->nnames, member, cs && h->names_cs))
		return true; /* unknown: left out rather than served wrongly */
	if (hf && hf->pw.s &&
	    (cs ? files_snapshot_user(hf->pw.s, member) >= 0 : host_holds_name(&hf->pw, member)))
		return true;
	return member_earlier(dm, i, member);
}

int daemon_group_members_kept(struct daemon *dm, size_t i, struct cache_group *g)
{
	const struct config_domain *cfg = dm->domains[i]->cfg;
	size_t n = 0;
	if (g->nmember_groups) {
		struct cache_reader *r = daemon_reader(dm);
		struct nesting nest;
		int rc = r ? cache_group_members(r, cfg->name, g, nesting(dm, i, &nest)) : -EIO;
		if (rc < 0)
			return rc;
	}
	bool local = dm->domains[i]->ldap && !cfg->allow_local_overlap;
	if ((cfg->filter_users.n == 0 && !local) || g->nmembers == 0)
		return 0;
	const struct held_ids *h = local ? held_ids(dm) : NULL;
	const struct host_files *hf = local && reads_host(dm) ? host_files(dm) : NULL;
	if (g->nmembers > dm->members_cap) {
		const char **grown = realloc(dm->members, g->nmembers * sizeof(*grown));
		if (!grown)
			return -ENOMEM;
		dm->members = grown;
		dm->members_cap = g->nmembers;
	}
	for (size_t k = 0; k < g->nmembers; k++)
		if (!config_names_has(&cfg->filter_users, g->members[k], cfg->case_sensitive) &&
		    !(local && member_held(dm, i, h, hf, g->members[k])))
			dm->members[n++] = g->members[k];
	g->members = dm->members;
	g->nmembers = n;
	return 0;
}

/* ==== ids a range may not hold ==================================================== */

/* Whether the sorted ids[0..n) hold one in lo..hi. */
static bool sorted_within(const uint32_t *ids, size_t n, uint32_t lo, uint32_t hi)
{
	size_t a = 0, b = n; /* first index with ids[i] >= lo */
	while (a < b) {
		size_t m = a + (b - a) / 2;
		if (ids[m] < lo)
			a = m + 1;
		else
			b = m;
	}
	return a < n && ids[a] <= hi;
}

static int held_push(struct held_ids *h, uint32_t id)
{
	if (h->n == h->cap) {
		size_t cap = h->cap ? h->cap * 2 : 256;
		uint32_t *grown = realloc(h->ids, cap * sizeof(*grown));
		if (!grown)
			return -ENOMEM;
		h->ids = grown;
		h->cap = cap;
	}
	h->ids[h->n++] = id;
	return 0;
}

/* name appended to h->folded in fold_copy's form. */
static int held_name(struct held_ids *h, const char *name)
{
	char f[CACHE_NAME_MAX + 1];
	size_t n = fold_key(name, f);
	int rc = idc_buf_append(&h->folded, f, n + 1);
	rc = rc ? rc : idc_buf_append(&h->folded, name, strlen(name) + 1);
	h->nnames += rc == 0;
	return rc;
}

/* h->names: the folded names, sorted (pointers into h->folded, which is
 * whole now). */
static int held_names_sort(struct held_ids *h)
{
	char **v = realloc(h->names, (h->nnames ? h->nnames : 1) * sizeof(*v));
	if (!v)
		return -ENOMEM;
	h->names = v;
	for (size_t i = 0, off = 0; i < h->nnames; i++) {
		v[i] = h->folded.data + off;
		off += strlen(v[i]) + 1;
		off += strlen(h->folded.data + off) + 1;
	}
	qsort(v, h->nnames, sizeof(*v), cmp_str);
	return 0;
}

static int held_user(const struct cache_user *u, uint64_t key, void *arg)
{
	(void)key;
	int rc = held_push(arg, u->uid);
	rc = rc ? rc : held_push(arg, u->gid);
	return rc ? rc : held_name(arg, u->name);
}

static int held_group(const struct cache_group *g, uint64_t key, void *arg)
{
	(void)key;
	return held_push(arg, g->gid);
}

/* The state held_ids is built from: the files domains' data and the
 * configuration (which domains there are), never the directory's, so
 * the commits of an ldap domain (every page of its enumeration, every
 * entry fetched for a lookup) leave it standing: rebuilding it reads
 * every files entry, tens of milliseconds on the loop for a big files
 * domain. Never 0. */
static uint64_t held_gen(const struct daemon *dm)
{
	return (dm->files_gen * 1000003u + dm->config_gen) | 1ull << 63;
}

static struct held_ids *held_ids(struct daemon *dm)
{
	uint64_t gen = held_gen(dm);
	struct held_ids *h = dm->held_ids;
	if (!h && !(h = dm->held_ids = calloc(1, sizeof(*h))))
		return NULL;
	if (h->gen == gen)
		return h;
	uint64_t t0 = idc_now_ns();
	struct cache_reader *r = aside(dm);
	int rc = r ? 0 : -EIO;
	h->n = 0;
	held_names_clear(h);
	h->names_cs = true;
	for (size_t i = 0; rc == 0 && i < dm->ndomains; i++) {
		const char *name = dm->domains[i]->cfg->name;
		if (dm->domains[i]->ldap)
			continue;
		h->names_cs = h->names_cs && dm->domains[i]->cfg->case_sensitive;
		rc = cache_enum_users_unsorted(r, name, held_user, h);
		if (rc == 0)
			rc = cache_enum_groups_unsorted(r, name, held_group, h);
	}
	qsort(h->ids, h->n, sizeof(*h->ids), cmp_u32);
	rc = rc ? rc : held_names_sort(h);
	if (rc < 0)
		h->nnames = 0;
	h->failed = rc < 0;
	h->gen = h->failed ? 0 : gen; /* a build that failed is made again next time */
	dm->held_builds++;
	dm->held_build_ns += idc_now_ns() - t0;
	return h;
}

/* Domain i's ids against lo..hi: an ldap domain by the ids it may hold
 * (min_id..max_id: the directory is not all cached), a files domain by
 * those it holds (h). */
static bool domain_ids_within(struct daemon *dm, size_t i, const struct held_ids *h, uint32_t lo,
			      uint32_t hi)
{
	const struct config_domain *cfg = dm->domains[i]->cfg;
	if (cfg->ldap) {
		uint32_t max = cfg->ldap->max_id ? cfg->ldap->max_id : UINT32_MAX;
		return cfg->ldap->min_id <= hi && lo <= max;
	}
	/* Unreadable: held, so nothing is served. */
	return !h || h->failed || sorted_within(h->ids, h->n, lo, hi);
}

const char *daemon_ids_held(struct daemon *dm, uint32_t lo, uint32_t hi)
{
	struct held_ids *h = held_ids(dm);
	for (size_t i = 0; i < dm->ndomains; i++)
		if (domain_ids_within(dm, i, h, lo, hi))
			return dm->domains[i]->cfg->name;
	struct host_files *hf = reads_host(dm) ? host_files(dm) : NULL;
	if (reads_host(dm) && !hf)
		return "the host's files (out of memory)";
	if (hf && (sorted_within(hf->pw.ids, hf->pw.n, lo, hi) ||
		   sorted_within(hf->gr.ids, hf->gr.n, lo, hi)))
		return "the host's files";
	return NULL;
}
