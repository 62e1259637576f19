/*
 * The LDAP provider's background refresh and member cap against a real
 * slapd on loopback (tests/ldap/slapd.sh, fixtures tests/ldap/refresh.ldif):
 *  - a refresh removes the users and groups it asked for that the
 *    directory no longer has, reports them to the change hook, and their
 *    memberships go with them;
 *  - a refresh whose search is cut by a referral, or whose server stops
 *    answering half-way, removes nothing;
 *  - a group with more member values than the domain's cap keeps exactly
 *    the cap, says so once with its DN, and the rest of the answer stays;
 *  - what the directory changed is what the cache holds after a refresh:
 *    memberships removed (direct and nested), groups renamed (new DN, or
 *    the name attribute alone), member DNs in another case; and a change
 *    of modifyTimestamp alone writes nothing durable.
 * Reaches into the domain (lprov_int.h) to run the refresh at once and to
 * lower the cap.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "ldap_harness.h"
#include "providers/ldap/lprov_int.h"

#ifndef LDAP_TEST_DIR
#error "LDAP_TEST_DIR must name tests/ldap"
#endif

#define SUFFIX "dc=example,dc=com"
#define PEOPLE "ou=people," SUFFIX
#define GROUPS "ou=groups," SUFFIX

static char tmp[64];
static char uri[64];
static int slapd_pid;

/* ==== the server ============================================================ */

static int setup(void **state)
{
	(void)state;
	snprintf(tmp, sizeof(tmp), "/tmp/idc-ldap-refresh-%d", (int)getpid());
	int port = lh_free_port();
	if (port < 0 || lh_sh("mkdir -p %s", tmp))
		return -1;
	snprintf(uri, sizeof(uri), "ldap://127.0.0.1:%d", port);
	char cmd[512], out[64] = "";
	snprintf(cmd, sizeof(cmd), "%s/slapd.sh start %s/r %d %s/refresh.ldif", LDAP_TEST_DIR, tmp,
		 port, LDAP_TEST_DIR);
	FILE *p = popen(cmd, "r");
	if (!p)
		return -1;
	while (fgets(out, sizeof(out), p)) /* the last line is slapd's pid */
		slapd_pid = atoi(out);
	if (pclose(p) != 0 || slapd_pid <= 0)
		return -1;
	/* A referral object under the people branch, for test_referral_*
	 * (ManageDsaIT: added as an entry, not followed). */
	return lh_sh(
	    "printf 'dn: ou=elsewhere,%s\\nobjectClass: referral\\nobjectClass: "
	    "extensibleObject\\nou: elsewhere\\nref: ldap://127.0.0.1:9/%s\\n' | ldapadd -x "
	    "-M -H %s -D cn=admin,%s -w secret >/dev/null",
	    PEOPLE, PEOPLE, uri, SUFFIX);
}

static int teardown(void **state)
{
	(void)state;
	lh_sh("%s/slapd.sh stop %s/r", LDAP_TEST_DIR, tmp);
	if (!getenv("KEEP_LDAP_TEST"))
		lh_sh("rm -rf %s", tmp);
	return 0;
}

static void ldap_delete(const char *dn)
{
	assert_int_equal(
	    lh_sh("ldapdelete -x -H %s -D cn=admin,%s -w secret '%s'", uri, SUFFIX, dn), 0);
}

static void ldap_add_back(const char *ldif)
{
	assert_int_equal(lh_sh("printf '%s' | ldapadd -x -H %s -D cn=admin,%s -w secret >/dev/null",
			       ldif, uri, SUFFIX),
			 0);
}

/* ==== a domain and its loop =================================================== */

struct change {
	bool group;
	char old_name[64], new_name[64];
	uint32_t old_id;
	bool nested_changed;
};

struct env {
	char dir[128];
	struct cache *cache;
	struct lprov_config cfg;
	struct lprov_domain *ld;
	int ep, fd;
	struct change ch[64];
	size_t nch;
	bool unknown; /* the hook was told "anything may have changed" */
};

static void on_change(const struct cache_change *ch, void *arg)
{
	struct env *e = arg;
	if (!ch) {
		e->unknown = true;
		return;
	}
	if (e->nch == IDC_ARRAY_SIZE(e->ch))
		return;
	struct change *c = &e->ch[e->nch++];
	c->group = ch->group;
	snprintf(c->old_name, sizeof(c->old_name), "%s", ch->old_name ? ch->old_name : "");
	snprintf(c->new_name, sizeof(c->new_name), "%s", ch->new_name ? ch->new_name : "");
	c->old_id = ch->old_id;
	c->nested_changed = ch->nested_changed;
}

/* A domain "dir" on dir's cache (opened by the first domain of a test);
 * extra "key=value" settings end with NULL. */
static void env_open(struct env *e, struct env *share, ...)
{
	static int seq;
	struct idc_diag d = {{0}};
	memset(e, 0, sizeof(*e));
	if (share) {
		e->cache = share->cache;
	} else {
		snprintf(e->dir, sizeof(e->dir), "%s/cache%d", tmp, seq++);
		assert_int_equal(lh_sh("mkdir -p %s", e->dir), 0);
		struct cache_options co = {.nosync = true};
		assert_int_equal(cache_open(e->dir, &co, &e->cache, &d), 0);
	}
	lprov_config_init(&e->cfg, "dir");
	const char *base[] = {"ldap_uri",
			      uri,
			      "ldap_search_base",
			      SUFFIX,
			      "ldap_schema",
			      "rfc2307bis",
			      "ldap_network_timeout",
			      "2",
			      "ldap_search_timeout",
			      "2",
			      "refresh_expired_interval",
			      "3600",
			      "ldap_sync",
			      "poll"};
	for (size_t i = 0; i < IDC_ARRAY_SIZE(base); i += 2)
		assert_int_equal(lprov_config_set(&e->cfg, base[i], base[i + 1], &d), 0);
	va_list ap;
	va_start(ap, share);
	for (const char *k = va_arg(ap, const char *); k; k = va_arg(ap, const char *))
		if (lprov_config_set(&e->cfg, k, va_arg(ap, const char *), &d))
			fail_msg("%s: %s", k, d.msg);
	va_end(ap);
	if (lprov_domain_new(&e->cfg, e->cache, &e->ld, &d))
		fail_msg("%s", d.msg);
	lprov_domain_set_hook(e->ld, on_change, e);
	e->ep = epoll_create1(EPOLL_CLOEXEC);
	e->fd = -1;
}

static void env_close(struct env *e, bool close_cache)
{
	lprov_domain_free(e->ld);
	lprov_config_free(&e->cfg);
	close(e->ep);
	if (close_cache)
		cache_close(e->cache);
}

/* Wait for the domain's socket or timer (at most 100 ms), then process. */
static void pump(struct env *e)
{
	int fd = -1;
	if (lprov_domain_fds(e->ld, &fd, 1) == 0)
		fd = -1;
	if (fd != e->fd) {
		if (e->fd >= 0)
			epoll_ctl(e->ep, EPOLL_CTL_DEL, e->fd, NULL);
		struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd};
		e->fd = fd >= 0 && epoll_ctl(e->ep, EPOLL_CTL_ADD, fd, &ev) == 0 ? fd : -1;
	}
	int64_t t = lprov_domain_next_timeout(e->ld);
	struct epoll_event ev;
	epoll_wait(e->ep, &ev, 1, t < 0 || t > 100 ? 100 : (int)t);
	lprov_domain_process(e->ld);
}

struct result {
	bool done;
	enum lprov_lookup_result res;
};

static void on_result(enum lprov_lookup_result res, void *arg)
{
	struct result *r = arg;
	r->done = true;
	r->res = res;
}

static enum lprov_lookup_result lookup_key(struct env *e, enum lprov_lookup_kind kind,
					   const char *name, uint32_t id)
{
	struct result r = {false, LPROV_LOOKUP_FAILED};
	enum lprov_lookup_result res = lprov_domain_lookup(e->ld, kind, name, id, on_result, &r);
	if (res != LPROV_LOOKUP_PENDING)
		return res;
	uint64_t until = idc_now_ns() + 20000000000ull;
	while (!r.done && idc_now_ns() < until)
		pump(e);
	assert_true(r.done);
	return r.res;
}

static enum lprov_lookup_result lookup(struct env *e, enum lprov_lookup_kind kind, const char *name)
{
	return lookup_key(e, kind, name, 0);
}

/* The same by id (PWUID, GRGID). */
static enum lprov_lookup_result lookup_id(struct env *e, enum lprov_lookup_kind kind, uint32_t id)
{
	return lookup_key(e, kind, NULL, id);
}

/* Mark everything expired and run a refresh now, until it is over. */
static void refresh_now(struct env *e)
{
	struct idc_diag d = {{0}};
	size_t n = 0;
	assert_int_equal(cache_expire(e->cache, "dir", CACHE_ANY, NULL, &n, &d), 0);
	assert_null(e->ld->reqs);
	e->ld->next_refresh_ns = idc_now_ns();
	lprov_domain_process(e->ld);
	assert_non_null(e->ld->reqs); /* started */
	uint64_t until = idc_now_ns() + 20000000000ull;
	while (e->ld->reqs && idc_now_ns() < until)
		pump(e);
	assert_null(e->ld->reqs);
}

static bool has_user(struct env *e, const char *name)
{
	const char *doms[] = {"dir"};
	struct cache_reader *r;
	struct cache_user u;
	assert_int_equal(cache_reader_begin(e->cache, &r), 0);
	int rc = cache_user_by_name(r, doms, 1, name, false, &u, NULL);
	cache_reader_end(r);
	assert_true(rc == 0 || rc == -ENOENT);
	return rc == 0;
}

static bool has_group(struct env *e, const char *name, size_t *nmembers)
{
	const char *doms[] = {"dir"};
	struct cache_reader *r;
	struct cache_group g;
	assert_int_equal(cache_reader_begin(e->cache, &r), 0);
	int rc = cache_group_by_name(r, doms, 1, name, false, &g, NULL);
	if (rc == 0 && nmembers)
		*nmembers = g.nmembers;
	cache_reader_end(r);
	assert_true(rc == 0 || rc == -ENOENT);
	return rc == 0;
}

static const struct change *removal(const struct env *e, bool group, const char *name)
{
	for (size_t i = 0; i < e->nch; i++)
		if (e->ch[i].group == group && !strcmp(e->ch[i].old_name, name) &&
		    !e->ch[i].new_name[0])
			return &e->ch[i];
	return NULL;
}

/* ==== refresh ==================================================================== */

static const char remy_ldif[] = "dn: uid=remy," PEOPLE "\\nobjectClass: account\\nobjectClass: "
				"posixAccount\\nuid: remy\\ncn: remy\\nuidNumber: 30002\\n"
				"gidNumber: 30002\\nhomeDirectory: /home/remy\\n\\n"
				"dn: cn=rg_gone," GROUPS "\\nobjectClass: posixGroup\\n"
				"objectClass: extensibleObject\\ncn: rg_gone\\ngidNumber: 31002\\n"
				"memberUid: rena\\n";

static void cache_the_fixtures(struct env *a)
{
	const char *users[] = {"rena", "remy", "rita"};
	const char *groups[] = {"rg_stay", "rg_gone", "rg_top"};
	for (size_t i = 0; i < IDC_ARRAY_SIZE(users); i++)
		assert_int_equal(lookup(a, LPROV_LOOKUP_PWNAM, users[i]), LPROV_LOOKUP_FOUND);
	for (size_t i = 0; i < IDC_ARRAY_SIZE(groups); i++)
		assert_int_equal(lookup(a, LPROV_LOOKUP_GRNAM, groups[i]), LPROV_LOOKUP_FOUND);
	assert_int_equal(lookup(a, LPROV_LOOKUP_INITGROUPS, "rena"), LPROV_LOOKUP_FOUND);
	char gids[128];
	lh_gids_of(a->cache, "dir", "rena", gids, sizeof(gids));
	assert_string_equal(gids, "31001,31002,31003,31010,31011");
}

/* remy and rg_gone are deleted from the directory. A refresh whose user
 * search is cut by a referral deletes nothing, nor one whose server stops
 * answering; a complete one removes both (the hook told), rena loses
 * rg_gone and rg_top (reached through it), everything else stays. */
static void test_refresh_removes_what_the_directory_lost(void **state)
{
	(void)state;
	struct env a;
	env_open(&a, NULL, NULL);
	cache_the_fixtures(&a);
	/* A refresh leaves alone what was stored in the second its searches
	 * went out (a lookup may have brought it back): let that second pass,
	 * so that only the refresh's own rules keep entries below. */
	time_t stored = time(NULL);
	while (time(NULL) <= stored)
		usleep(50000);
	ldap_delete("uid=remy," PEOPLE);
	ldap_delete("cn=rg_gone," GROUPS);

	/* referral: the user base is the referral object */
	struct env b;
	env_open(&b, &a, "ldap_user_search_base", "ou=elsewhere," PEOPLE, "ldap_group_search_base",
		 GROUPS, NULL);
	uint64_t s0 = b.ld->nsearches;
	refresh_now(&b);
	assert_true(b.ld->nsearches > s0);
	assert_true(has_user(&b, "remy") && has_group(&b, "rg_gone", NULL));
	assert_false(b.unknown);
	for (size_t i = 0; i < b.nch; i++)
		assert_true(b.ch[i].new_name[0]); /* no removal reported */
	env_close(&b, false);

	/* the server stops answering during the refresh: offline, nothing
	 * deleted */
	struct env c;
	env_open(&c, &a, NULL);
	assert_int_equal(lookup(&c, LPROV_LOOKUP_PWNAM, "rita"), LPROV_LOOKUP_FOUND);
	assert_int_equal(lh_stop(slapd_pid), 0);
	s0 = c.ld->nsearches;
	refresh_now(&c);
	assert_int_equal(kill(slapd_pid, SIGCONT), 0);
	assert_true(c.ld->nsearches > s0);
	assert_false(c.ld->online);
	assert_true(has_user(&c, "remy") && has_group(&c, "rg_gone", NULL));
	for (size_t i = 0; i < c.nch; i++)
		assert_true(c.ch[i].new_name[0]); /* no removal reported */
	env_close(&c, false);

	/* complete: both removed, and reported */
	refresh_now(&a);
	assert_false(a.unknown);
	assert_false(has_user(&a, "remy"));
	assert_false(has_group(&a, "rg_gone", NULL));
	assert_true(has_user(&a, "rena") && has_user(&a, "rita"));
	assert_true(has_group(&a, "rg_stay", NULL) && has_group(&a, "rg_top", NULL));
	const struct change *u = removal(&a, false, "remy"), *g = removal(&a, true, "rg_gone");
	assert_non_null(u);
	assert_int_equal(u->old_id, 30002);
	assert_non_null(g);
	assert_int_equal(g->old_id, 31002);
	char gids[128];
	lh_gids_of(a.cache, "dir", "rena", gids, sizeof(gids));
	assert_string_equal(gids, "31001,31010,31011");
	const char *doms[] = {"dir"};
	struct cache_reader *r;
	struct cache_user cu;
	struct cache_group cg;
	assert_int_equal(cache_reader_begin(a.cache, &r), 0);
	assert_int_equal(cache_user_by_uid(r, doms, 1, 30002, &cu, NULL), -ENOENT);
	assert_int_equal(cache_group_by_gid(r, doms, 1, 31002, &cg, NULL), -ENOENT);
	cache_reader_end(r);
	/* a second refresh finds nothing more to remove */
	size_t nch = a.nch;
	refresh_now(&a);
	for (size_t i = nch; i < a.nch; i++)
		assert_true(a.ch[i].new_name[0]);
	env_close(&a, true);
	ldap_add_back(remy_ldif);
}

/* ==== the member cap ================================================================= */

struct captured {
	FILE *f;
	int saved;
};

static void capture_begin(struct captured *c)
{
	fflush(stderr);
	c->f = tmpfile();
	assert_non_null(c->f);
	c->saved = dup(2);
	assert_int_equal(dup2(fileno(c->f), 2), 2);
}

/* What was logged meanwhile (malloc'ed). */
static char *capture_end(struct captured *c)
{
	fflush(stderr);
	assert_int_equal(dup2(c->saved, 2), 2);
	close(c->saved);
	long len = ftell(c->f);
	char *text = calloc(1, (size_t)len + 1);
	assert_non_null(text);
	rewind(c->f);
	assert_int_equal(fread(text, 1, (size_t)len, c->f), (size_t)len);
	fclose(c->f);
	return text;
}

static size_t occurrences(const char *text, const char *what)
{
	size_t n = 0;
	for (const char *p = strstr(text, what); p; p = strstr(p + 1, what))
		n++;
	return n;
}

/* members_max lowered to 5: "big" (12 memberUid values) keeps 5 members,
 * "bigdn" (1 memberUid, 8 member DNs) keeps 1 + 5; each cut logged once
 * with the group's DN over repeated lookups; an initgroups answer holding
 * both keeps its other groups. */
static void test_member_cap(void **state)
{
	(void)state;
	struct env a;
	env_open(&a, NULL, NULL);
	assert_int_equal(a.ld->members_max, LP_MEMBERS_MAX);
	a.ld->members_max = 5;
	struct captured c;
	idc_log_init("test_ldap_refresh", true, IDC_LOG_WARN);
	capture_begin(&c);
	for (int round = 0; round < 3; round++) {
		struct idc_diag d = {{0}};
		assert_int_equal(cache_expire(a.cache, "dir", CACHE_ANY, NULL, NULL, &d), 0);
		assert_int_equal(lookup(&a, LPROV_LOOKUP_GRNAM, "big"), LPROV_LOOKUP_FOUND);
		assert_int_equal(lookup(&a, LPROV_LOOKUP_GRNAM, "bigdn"), LPROV_LOOKUP_FOUND);
		assert_int_equal(lookup(&a, LPROV_LOOKUP_INITGROUPS, "rena"), LPROV_LOOKUP_FOUND);
	}
	char *log = capture_end(&c);
	idc_log_init("test_ldap_refresh", true, IDC_LOG_ERR);
	size_t n = 0;
	assert_true(has_group(&a, "big", &n));
	assert_int_equal(n, 5);
	assert_true(has_group(&a, "bigdn", &n));
	assert_int_equal(n, 6);
	char gids[128];
	lh_gids_of(a.cache, "dir", "rena", gids, sizeof(gids));
	assert_string_equal(gids, "31001,31002,31003,31010,31011");
	const char *want[] = {
	    "group \"cn=big," GROUPS "\": 12 memberUid values, more than the 5 kept",
	    "group \"cn=bigdn," GROUPS "\": 8 member values, more than the 5 kept"};
	for (size_t i = 0; i < IDC_ARRAY_SIZE(want); i++)
		if (occurrences(log, want[i]) != 1)
			fail_msg("\"%s\" logged %zu times in:\n%s", want[i],
				 occurrences(log, want[i]), log);
	assert_int_equal(occurrences(log, "kept; the rest dropped"), 2);
	free(log);
	env_close(&a, true);
}

/* ==== freshness ====================================================================== */

static void ldap_modify(const char *ldif)
{
	assert_int_equal(
	    lh_sh("printf '%s' | ldapmodify -x -H %s -D cn=admin,%s -w secret >/dev/null", ldif,
		  uri, SUFFIX),
	    0);
}

/* Let the current second pass: what a lookup stores from now on is newer
 * than what is cached (timestamps have a one-second grain). */
static void let_a_second_pass(void)
{
	time_t now = time(NULL);
	while (time(NULL) <= now)
		usleep(50000);
}

static void expire_all(struct env *e)
{
	struct idc_diag d = {{0}};
	assert_int_equal(cache_expire(e->cache, "dir", CACHE_ANY, NULL, NULL, &d), 0);
}

/* The directory changes (ldif for ldapmodify) a second after what e
 * cached, which then counts as expired. */
static void change_and_expire(struct env *e, const char *ldif)
{
	let_a_second_pass();
	ldap_modify(ldif);
	expire_all(e);
}

/* An initgroups lookup of user, then its groups as the cache holds them. */
static void initgroups_are(struct env *e, const char *user, const char *want)
{
	char gids[128];
	assert_int_equal(lookup(e, LPROV_LOOKUP_INITGROUPS, user), LPROV_LOOKUP_FOUND);
	lh_gids_of(e->cache, "dir", user, gids, sizeof(gids));
	assert_string_equal(gids, want);
}

/* The change reported for group name since change number from: in place
 * (same name before and after), or NULL. */
static const struct change *changed_in_place(const struct env *e, size_t from, const char *name)
{
	for (size_t i = from; i < e->nch; i++)
		if (e->ch[i].group && !strcmp(e->ch[i].old_name, name) &&
		    !strcmp(e->ch[i].new_name, name))
			return &e->ch[i];
	return NULL;
}

static void group_by_gid(struct env *e, uint32_t gid, char *name, size_t n)
{
	const char *doms[] = {"dir"};
	struct cache_reader *r;
	struct cache_group g;
	assert_int_equal(cache_reader_begin(e->cache, &r), 0);
	int rc = cache_group_by_gid(r, doms, 1, gid, &g, NULL);
	snprintf(name, n, "%s", rc == 0 ? g.name : "");
	cache_reader_end(r);
}

/* fu1 is in fg_direct (memberUid), in fg_dn (member DN) and through it in
 * fg_parent. Taken out of fg_direct, and fg_dn out of fg_parent, in the
 * directory: the next initgroups drops both, and the change hook hears of
 * both groups (fg_parent's nesting changed). Then fu1 leaves fg_dn too. */
static void test_removed_memberships_go(void **state)
{
	(void)state;
	struct env a;
	env_open(&a, NULL, NULL);
	initgroups_are(&a, "fu1", "31101,31102,31103");
	change_and_expire(&a,
			  "dn: cn=fg_direct," GROUPS "\\nchangetype: modify\\ndelete: memberUid\\n"
			  "memberUid: fu1\\n\\ndn: cn=fg_parent," GROUPS "\\nchangetype: modify\\n"
			  "delete: member\\nmember: cn=fg_dn," GROUPS "\\n");
	size_t nch = a.nch;
	initgroups_are(&a, "fu1", "31102");
	assert_non_null(changed_in_place(&a, nch, "fg_direct"));
	const struct change *p = changed_in_place(&a, nch, "fg_parent");
	assert_non_null(p);
	assert_true(p->nested_changed);
	assert_true(has_group(&a, "fg_direct", NULL) && has_group(&a, "fg_parent", NULL));

	change_and_expire(&a, "dn: cn=fg_dn," GROUPS "\\nchangetype: modify\\ndelete: member\\n"
			      "member: uid=fu1," PEOPLE "\\n");
	initgroups_are(&a, "fu1", "");
	assert_false(a.unknown);
	env_close(&a, true);
}

/* fg_old gets a new DN (cn=fg_new), and the group named by its gidNumber
 * gets a new cn alone: a lookup of the new name or of the gid leaves only
 * the new name cached, and the old one is reported removed. */
static void test_renamed_groups_lose_the_old_name(void **state)
{
	(void)state;
	struct env a;
	env_open(&a, NULL, NULL);
	char name[64];
	assert_int_equal(lookup(&a, LPROV_LOOKUP_GRNAM, "fg_old"), LPROV_LOOKUP_FOUND);
	assert_int_equal(lookup(&a, LPROV_LOOKUP_GRNAM, "fg_attr_old"), LPROV_LOOKUP_FOUND);
	change_and_expire(&a, "dn: cn=fg_old," GROUPS "\\nchangetype: modrdn\\nnewrdn: cn=fg_new\\n"
			      "deleteoldrdn: 1\\n\\ndn: gidNumber=31105," GROUPS
			      "\\nchangetype: modify\\n"
			      "replace: cn\\ncn: fg_attr_new\\n");
	assert_int_equal(lookup_id(&a, LPROV_LOOKUP_GRGID, 31104), LPROV_LOOKUP_FOUND);
	assert_false(has_group(&a, "fg_old", NULL));
	assert_true(has_group(&a, "fg_new", NULL));
	group_by_gid(&a, 31104, name, sizeof(name));
	assert_string_equal(name, "fg_new");
	assert_non_null(removal(&a, true, "fg_old"));

	assert_int_equal(lookup(&a, LPROV_LOOKUP_GRNAM, "fg_attr_new"), LPROV_LOOKUP_FOUND);
	assert_false(has_group(&a, "fg_attr_old", NULL));
	group_by_gid(&a, 31105, name, sizeof(name));
	assert_string_equal(name, "fg_attr_new");
	assert_non_null(removal(&a, true, "fg_attr_old"));
	env_close(&a, true);
}

/* fu4 gets a new DN and name (uid=fu4new): a lookup by its uid leaves only
 * the new name cached, and the old one is reported removed. */
static void test_renamed_user_loses_the_old_name(void **state)
{
	(void)state;
	struct env a;
	env_open(&a, NULL, NULL);
	assert_int_equal(lookup(&a, LPROV_LOOKUP_PWNAM, "fu4"), LPROV_LOOKUP_FOUND);
	change_and_expire(&a, "dn: uid=fu4," PEOPLE "\\nchangetype: modrdn\\nnewrdn: uid=fu4new\\n"
			      "deleteoldrdn: 1\\n");
	assert_int_equal(lookup_id(&a, LPROV_LOOKUP_PWUID, 30104), LPROV_LOOKUP_FOUND);
	assert_false(has_user(&a, "fu4"));
	assert_true(has_user(&a, "fu4new"));
	const char *doms[] = {"dir"};
	struct cache_reader *rd;
	struct cache_user u;
	assert_int_equal(cache_reader_begin(a.cache, &rd), 0);
	assert_int_equal(cache_user_by_uid(rd, doms, 1, 30104, &u, NULL), 0);
	assert_string_equal(u.name, "fu4new");
	cache_reader_end(rd);
	assert_non_null(removal(&a, false, "fu4"));
	env_close(&a, true);
}

/* fg_case has "member: uid=FU2,..." for user fu2 (uid is caseIgnore):
 * the group lists fu2 as the user is named, and fu2's groups hold it. */
static void test_member_dn_in_another_case(void **state)
{
	(void)state;
	struct env a;
	env_open(&a, NULL, NULL);
	initgroups_are(&a, "fu2", "31106");
	const char *doms[] = {"dir"};
	for (int round = 0; round < 2; round++) {
		struct cache_reader *r;
		struct cache_group g;
		assert_int_equal(cache_reader_begin(a.cache, &r), 0);
		assert_int_equal(cache_group_by_name(r, doms, 1, "fg_case", true, &g, NULL), 0);
		assert_int_equal(g.nmembers, 1);
		assert_string_equal(g.members[0], "fu2");
		cache_reader_end(r);
		/* again by the group's own lookup, fu2 being cached */
		expire_all(&a);
		assert_int_equal(lookup(&a, LPROV_LOOKUP_GRNAM, "fg_case"), LPROV_LOOKUP_FOUND);
	}
	env_close(&a, true);
}

/* A change the cache does not keep (a description) moves modifyTimestamp
 * alone: refreshing the user and the group writes the timestamps db only
 * (no durable commit, nothing reported) and renews their timestamps. */
static void test_only_modify_timestamp_changed(void **state)
{
	(void)state;
	struct env a;
	env_open(&a, NULL, NULL);
	assert_int_equal(lookup(&a, LPROV_LOOKUP_PWNAM, "fu3"), LPROV_LOOKUP_FOUND);
	assert_int_equal(lookup(&a, LPROV_LOOKUP_GRNAM, "fg_ts"), LPROV_LOOKUP_FOUND);
	change_and_expire(
	    &a, "dn: uid=fu3," PEOPLE "\\nchangetype: modify\\nreplace: description\\n"
		"description: touched\\n\\ndn: cn=fg_ts," GROUPS "\\nchangetype: modify\\n"
		"replace: description\\ndescription: touched\\n");
	uint64_t commits = cache_durable_commits(a.cache);
	size_t nch = a.nch;
	int64_t before = (int64_t)time(NULL);
	assert_int_equal(lookup(&a, LPROV_LOOKUP_PWNAM, "fu3"), LPROV_LOOKUP_FOUND);
	assert_int_equal(lookup(&a, LPROV_LOOKUP_GRNAM, "fg_ts"), LPROV_LOOKUP_FOUND);
	assert_int_equal(cache_durable_commits(a.cache), commits);
	assert_int_equal(a.nch, nch);
	const char *doms[] = {"dir"};
	struct cache_reader *r;
	struct cache_user u;
	struct cache_group g;
	struct cache_meta mu, mg;
	assert_int_equal(cache_reader_begin(a.cache, &r), 0);
	assert_int_equal(cache_user_by_name(r, doms, 1, "fu3", true, &u, &mu), 0);
	assert_int_equal(cache_group_by_name(r, doms, 1, "fg_ts", true, &g, &mg), 0);
	cache_reader_end(r);
	assert_false(mu.expired || mg.expired);
	assert_true(mu.last_update >= before && mg.last_update >= before);
	env_close(&a, true);
}

/* ==== SSH keys ========================================================================== */

#define KEY1 "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAICStQcRIvPHZ+wS93xC07bs2rt8U4c+CoK7FmO0VgVue one"
#define KEY2 "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAICStQcRIvPHZ+wS93xC07bs2rt8U4c+CoK7FmO0VgVue two"

/* The keys the cache holds for name, "|" between them. */
static const char *keys_of(struct env *e, const char *name, char *out, size_t cap)
{
	struct cache_reader *r;
	const char *const *keys;
	size_t n;
	assert_int_equal(cache_reader_begin(e->cache, &r), 0);
	assert_int_equal(cache_user_keys(r, "dir", name, &keys, &n), 0);
	out[0] = '\0';
	for (size_t i = 0; i < n; i++)
		snprintf(out + strlen(out), cap - strlen(out), "%s%s", i ? "|" : "", keys[i]);
	cache_reader_end(r);
	return out;
}

/* sshPublicKey values follow the directory through lookups and refreshes;
 * a value that is no key is left out and logged once with the DN; a change
 * of keys alone writes the keys, reports no change of the user (the maps
 * do not hold keys) and an unchanged refresh writes nothing durable. */
static void test_ssh_keys_follow_the_directory(void **state)
{
	(void)state;
	char got[512];
	ldap_add_back("dn: uid=sshu," PEOPLE
		      "\\nobjectClass: account\\nobjectClass: posixAccount\\n"
		      "objectClass: ldapPublicKey\\nuid: sshu\\ncn: sshu\\nuidNumber: 31900\\n"
		      "gidNumber: 31900\\nhomeDirectory: /home/sshu\\nsshPublicKey: " KEY1 "\\n"
		      "sshPublicKey: ssh-ed25519 AAAA!notbase64\\nsshPublicKey:  " KEY2 "  \\n");
	struct env a;
	env_open(&a, NULL, NULL);
	struct captured c;
	idc_log_init("test_ldap_refresh", true, IDC_LOG_WARN);
	capture_begin(&c);
	assert_int_equal(lookup(&a, LPROV_LOOKUP_PWNAM, "sshu"), LPROV_LOOKUP_FOUND);
	refresh_now(&a);
	char *log = capture_end(&c);
	idc_log_init("test_ldap_refresh", true, IDC_LOG_ERR);
	assert_string_equal(keys_of(&a, "sshu", got, sizeof(got)), KEY1 "|" KEY2);
	const char *want = "entry \"uid=sshu," PEOPLE "\": sshPublicKey value 2 skipped: the key "
			   "data is not base64";
	if (occurrences(log, want) != 1)
		fail_msg("\"%s\" logged %zu times in:\n%s", want, occurrences(log, want), log);
	free(log);
	uint64_t commits = cache_durable_commits(a.cache);
	refresh_now(&a);
	assert_int_equal(cache_durable_commits(a.cache), commits);
	size_t nch = a.nch;
	change_and_expire(&a, "dn: uid=sshu," PEOPLE "\\nchangetype: modify\\nreplace: "
			      "sshPublicKey\\nsshPublicKey: " KEY2 "\\n");
	assert_int_equal(lookup(&a, LPROV_LOOKUP_PWNAM, "sshu"), LPROV_LOOKUP_FOUND);
	assert_string_equal(keys_of(&a, "sshu", got, sizeof(got)), KEY2);
	assert_true(cache_durable_commits(a.cache) > commits);
	assert_int_equal(a.nch, nch);
	change_and_expire(&a,
			  "dn: uid=sshu," PEOPLE "\\nchangetype: modify\\ndelete: sshPublicKey\\n");
	refresh_now(&a);
	assert_string_equal(keys_of(&a, "sshu", got, sizeof(got)), "");
	let_a_second_pass();
	ldap_delete("uid=sshu," PEOPLE);
	refresh_now(&a);
	assert_false(has_user(&a, "sshu"));
	assert_string_equal(keys_of(&a, "sshu", got, sizeof(got)), "");
	env_close(&a, true);
}

/* Entries of this test's own, added to the directory after their misses. */
#define NEG_USER(n, id)                                                                            \
	"dn: uid=" n "," PEOPLE "\\nobjectClass: account\\nobjectClass: posixAccount\\nuid: " n    \
	"\\ncn: " n "\\nuidNumber: " id "\\ngidNumber: " id "\\nhomeDirectory: /home/" n "\\n\\n"
#define NEG_GROUP(n, id)                                                                           \
	"dn: cn=" n "," GROUPS "\\nobjectClass: posixGroup\\ncn: " n "\\ngidNumber: " id "\\n\\n"

/* Until no request is in flight (the domain's first poll pass). */
static void settle(struct env *e)
{
	uint64_t until = idc_now_ns() + 20000000000ull;
	while (e->ld->reqs && idc_now_ns() < until)
		pump(e);
	assert_null(e->ld->reqs);
}

/* Run a poll pass now, until it is over. */
static void poll_now(struct env *e)
{
	settle(e);
	e->ld->next_poll_ns = idc_now_ns();
	lprov_domain_process(e->ld);
	assert_non_null(e->ld->reqs); /* started */
	settle(e);
}

struct neg_key {
	enum lprov_lookup_kind kind;
	const char *name; /* NULL: by id */
	uint32_t id;
};

/* Each lookup of k[0..n) answers want; how many of them the negative
 * cache answered. */
static uint64_t lookups_are(struct env *e, const struct neg_key *k, size_t n,
			    enum lprov_lookup_result want)
{
	uint64_t n0 = e->ld->nneg;
	for (size_t i = 0; i < n; i++) {
		enum lprov_lookup_result got = lookup_key(e, k[i].kind, k[i].name, k[i].id);
		if (got != want)
			fail_msg("lookup %d of %s/%u: %d, not %d", (int)k[i].kind,
				 k[i].name ? k[i].name : "-", (unsigned)k[i].id, (int)got,
				 (int)want);
	}
	return e->ld->nneg - n0;
}

/* A miss the negative cache remembers for one key of an entry goes once
 * any path caches the entry: a lookup by its other key (uid then name, gid
 * then name, a name in another case then the id), a refresh that gives a
 * cached user the uid that was missing, a poll pass or an enumeration
 * that brings entries new to the directory. Each path's misses are looked
 * up again before the next path runs (a later one would store the entry
 * too). Before, each answered NOTFOUND for entry_negative_timeout without
 * asking. */
static void test_negative_goes_with_the_entry(void **state)
{
	(void)state;
	struct env a;
	env_open(&a, NULL, "entry_negative_timeout", "600", "ldap_poll_interval", "3600", NULL);
	/* the slots of these keys differ under this seed (direct-mapped: one
	 * that evicted another would make the counts below wrong) */
	a.ld->hash_seed = 0x6e6567;
	const struct neg_key by_other[] = {{LPROV_LOOKUP_PWUID, NULL, 30301},
					   {LPROV_LOOKUP_GRGID, NULL, 30311},
					   {LPROV_LOOKUP_PWNAM, "NEGW", 0},
					   {LPROV_LOOKUP_INITGROUPS, "NegW", 0},
					   {LPROV_LOOKUP_GRNAM, "NEGK", 0}};
	const struct neg_key by_refresh[] = {{LPROV_LOOKUP_PWUID, NULL, 30304}};
	const struct neg_key by_poll[] = {{LPROV_LOOKUP_PWUID, NULL, 30305},
					  {LPROV_LOOKUP_GRGID, NULL, 30315}};
	const struct neg_key by_enum[] = {{LPROV_LOOKUP_PWUID, NULL, 30306},
					  {LPROV_LOOKUP_GRGID, NULL, 30316}};
	const struct {
		const struct neg_key *k;
		size_t n;
	} all[] = {{by_other, IDC_ARRAY_SIZE(by_other)},
		   {by_refresh, IDC_ARRAY_SIZE(by_refresh)},
		   {by_poll, IDC_ARRAY_SIZE(by_poll)},
		   {by_enum, IDC_ARRAY_SIZE(by_enum)}};
	for (size_t i = 0; i < IDC_ARRAY_SIZE(all); i++) {
		lookups_are(&a, all[i].k, all[i].n, LPROV_LOOKUP_NOTFOUND);
		/* remembered: not asked */
		assert_int_equal(lookups_are(&a, all[i].k, all[i].n, LPROV_LOOKUP_NOTFOUND),
				 all[i].n);
	}
	/* a lookup by name passing an id too (the daemon's confirm) shares
	 * the slot of the name alone */
	const struct neg_key confirm = {LPROV_LOOKUP_PWNAM, "negnone", 77},
			     plain = {LPROV_LOOKUP_PWNAM, "negnone", 0};
	lookups_are(&a, &confirm, 1, LPROV_LOOKUP_NOTFOUND);
	assert_int_equal(lookups_are(&a, &plain, 1, LPROV_LOOKUP_NOTFOUND), 1);

	settle(&a);
	ldap_add_back(NEG_USER("negu", "30301") NEG_GROUP("negg", "30311") NEG_USER("negw", "30302")
			  NEG_GROUP("negk", "30312") NEG_USER("negr", "30303"));
	assert_int_equal(lookup(&a, LPROV_LOOKUP_PWNAM, "negu"), LPROV_LOOKUP_FOUND);
	assert_int_equal(lookup(&a, LPROV_LOOKUP_GRNAM, "negg"), LPROV_LOOKUP_FOUND);
	assert_int_equal(lookup_id(&a, LPROV_LOOKUP_PWUID, 30302), LPROV_LOOKUP_FOUND);
	assert_int_equal(lookup_id(&a, LPROV_LOOKUP_GRGID, 30312), LPROV_LOOKUP_FOUND);
	assert_int_equal(lookups_are(&a, by_other, IDC_ARRAY_SIZE(by_other), LPROV_LOOKUP_FOUND),
			 0);

	assert_int_equal(lookup(&a, LPROV_LOOKUP_PWNAM, "negr"), LPROV_LOOKUP_FOUND);
	change_and_expire(&a, "dn: uid=negr," PEOPLE "\\nchangetype: modify\\nreplace: "
			      "uidNumber\\nuidNumber: 30304\\n");
	refresh_now(&a);
	assert_int_equal(lookups_are(&a, by_refresh, 1, LPROV_LOOKUP_FOUND), 0);

	ldap_add_back(NEG_USER("negp", "30305") NEG_GROUP("negq", "30315"));
	poll_now(&a);
	assert_true(has_user(&a, "negp") && has_group(&a, "negq", NULL));
	assert_int_equal(lookups_are(&a, by_poll, IDC_ARRAY_SIZE(by_poll), LPROV_LOOKUP_FOUND), 0);

	ldap_add_back(NEG_USER("nege", "30306") NEG_GROUP("negf", "30316"));
	assert_int_equal(lookup(&a, LPROV_LOOKUP_ENUMERATE, NULL), LPROV_LOOKUP_FOUND);
	settle(&a); /* the enumeration's final store */
	assert_true(has_user(&a, "nege") && has_group(&a, "negf", NULL));
	assert_int_equal(lookups_are(&a, by_enum, IDC_ARRAY_SIZE(by_enum), LPROV_LOOKUP_FOUND), 0);

	const char *dns[] = {"uid=negu," PEOPLE, "cn=negg," GROUPS,  "uid=negw," PEOPLE,
			     "cn=negk," GROUPS,  "uid=negr," PEOPLE, "uid=negp," PEOPLE,
			     "cn=negq," GROUPS,  "uid=nege," PEOPLE, "cn=negf," GROUPS};
	for (size_t i = 0; i < IDC_ARRAY_SIZE(dns); i++)
		ldap_delete(dns[i]);
	env_close(&a, true);
}

int main(void)
{
	idc_log_init("test_ldap_refresh", true, IDC_LOG_ERR);
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_refresh_removes_what_the_directory_lost),
	    cmocka_unit_test(test_member_cap),
	    cmocka_unit_test(test_removed_memberships_go),
	    cmocka_unit_test(test_renamed_groups_lose_the_old_name),
	    cmocka_unit_test(test_renamed_user_loses_the_old_name),
	    cmocka_unit_test(test_member_dn_in_another_case),
	    cmocka_unit_test(test_only_modify_timestamp_changed),
	    cmocka_unit_test(test_ssh_keys_follow_the_directory),
	    cmocka_unit_test(test_negative_goes_with_the_entry),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
