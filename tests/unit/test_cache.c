/* Unit tests of the identity cache: writes, no-op refreshes, lookups,
 * initgroups with nesting and cycles, enumeration, expiry, timestamps. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <lmdb.h>

#include "cache/cache.h"
#include "cache/cache_int.h" /* cache_number_filter: the filter whose plan is checked */
#include "store/store.h"

struct fx {
	char dir[64];
	struct cache *c;
};

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));
	strcpy(f->dir, "/tmp/idc-cache-XXXXXX");
	if (!mkdtemp(f->dir))
		return -1;
	struct cache_options o = {.nosync = true};
	*state = f;
	return cache_open(f->dir, &o, &f->c, NULL);
}

static int teardown(void **state)
{
	struct fx *f = *state;
	cache_close(f->c);
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", f->dir);
	if (system(cmd) != 0)
		return -1;
	free(f);
	return 0;
}

static const struct cache_user alice = {"alice", 1000, 100, "Alice", "/home/alice", "/bin/sh", 1};
static const struct cache_user bob = {"Bob", 1001, 100, "", "/home/bob", "", 2};
static const struct cache_user bob2 = {"bob2", 1001, 101, "Bob two", "/home/bob2", "/bin/sh", 3};

static void put_users(struct fx *f, uint32_t ttl)
{
	struct cache_txn *t;
	assert_int_equal(cache_txn_begin(f->c, &t, NULL), 0);
	assert_int_equal(cache_domain_ensure(t, "local", ttl, NULL), 0);
	bool ch;
	/* bob2 first: lookups by uid pick the lowest order, not the first stored */
	assert_int_equal(cache_put_user(t, "local", &bob2, &ch, NULL), 0);
	assert_int_equal(cache_put_user(t, "local", &alice, &ch, NULL), 0);
	assert_int_equal(cache_put_user(t, "local", &bob, &ch, NULL), 0);
	const char *staff_m[] = {"alice", "ghost", "alice"};
	const char *admins_m[] = {"Bob"};
	const char *nested[] = {"staff"};
	const char *loop_m[] = {"admins"};
	struct cache_group admins = {"admins", 201, 2, admins_m, 1, nested, 1, NULL};
	/* all includes admins, admins includes staff: alice reaches all three;
	 * loop includes admins and is included by staff (a cycle). */
	struct cache_group all = {"all", 202, 3, NULL, 0, (const char *[]){"admins"}, 1, NULL};
	struct cache_group loop = {"loop", 203, 4, NULL, 0, loop_m, 1, NULL};
	assert_int_equal(cache_put_group(t, "local", &admins, &ch, NULL), 0);
	assert_int_equal(cache_put_group(t, "local", &all, &ch, NULL), 0);
	assert_int_equal(cache_put_group(t, "local", &loop, &ch, NULL), 0);
	struct cache_group staff2 = {"staff", 200, 1, staff_m, 3, (const char *[]){"loop"}, 1};
	assert_int_equal(cache_put_group(t, "local", &staff2, &ch, NULL), 0);
	assert_int_equal(cache_txn_commit(t, NULL), 0);
}

static const char *const dom[] = {"local"};

/* Nesting followed as the LDAP provider's default ldap_group_nesting_level. */
static const struct cache_nesting deep = {32, NULL, NULL};

static void test_lookups(void **state)
{
	struct fx *f = *state;
	put_users(f, 0);
	struct cache_txn *t;
	bool ch;
	struct cache_group odd = {"odd", 204, 5, NULL, 0, (const char *[]){"a+b=c", "#x y "}, 2};
	assert_int_equal(cache_txn_begin(f->c, &t, NULL), 0);
	assert_int_equal(cache_put_group(t, "local", &odd, &ch, NULL), 0);
	assert_int_equal(cache_txn_commit(t, NULL), 0);
	struct cache_reader *r;
	assert_int_equal(cache_reader_begin(f->c, &r), 0);
	struct cache_user u;
	struct cache_meta m;
	assert_int_equal(cache_user_by_name(r, dom, 1, "alice", true, &u, &m), 0);
	assert_string_equal(u.dir, "/home/alice");
	assert_int_equal(u.uid, 1000);
	assert_string_equal(m.domain, "local");
	assert_false(m.expired);
	assert_true(m.last_update > 0);
	assert_int_equal(cache_user_by_name(r, dom, 1, "bob", true, &u, NULL), -ENOENT);
	assert_int_equal(cache_user_by_name(r, dom, 1, "bob", false, &u, NULL), 0);
	assert_string_equal(u.name, "Bob");
	assert_string_equal(u.gecos, "");
	assert_int_equal(cache_user_by_uid(r, dom, 1, 1001, &u, NULL), 0);
	assert_string_equal(u.name, "Bob");
	assert_int_equal(cache_user_by_uid(r, dom, 1, 4242, &u, NULL), -ENOENT);
	assert_int_equal(cache_user_by_name(r, dom, 1, "a/b", false, &u, NULL), -ENOENT);
	const char *const two[] = {"other", "local"};
	assert_int_equal(cache_user_by_name(r, two, 2, "alice", true, &u, NULL), 0);
	struct cache_group g;
	assert_int_equal(cache_group_by_name(r, dom, 1, "staff", true, &g, NULL), 0);
	assert_int_equal(g.gid, 200);
	assert_int_equal(g.nmembers, 2); /* "alice" once, and the ghost */
	assert_string_equal(g.members[0], "alice");
	assert_string_equal(g.members[1], "ghost");
	assert_int_equal(cache_group_by_gid(r, dom, 1, 201, &g, NULL), 0);
	assert_string_equal(g.name, "admins");
	/* nested groups come back by name: a change of nesting is seen */
	assert_int_equal(g.nmember_groups, 1);
	assert_string_equal(g.member_groups[0], "staff");
	assert_int_equal(cache_group_by_name(r, dom, 1, "loop", true, &g, NULL), 0);
	assert_int_equal(g.nmember_groups, 1);
	assert_string_equal(g.member_groups[0], "admins");
	assert_int_equal(cache_group_by_name(r, dom, 1, "odd", true, &g, NULL), 0);
	assert_int_equal(g.nmember_groups, 2); /* names the DN escapes come back whole */
	assert_string_equal(g.member_groups[0], "a+b=c");
	assert_string_equal(g.member_groups[1], "#x y ");
	cache_reader_end(r);
}

static void test_initgroups(void **state)
{
	struct fx *f = *state;
	put_users(f, 0);
	struct cache_reader *r;
	assert_int_equal(cache_reader_begin(f->c, &r), 0);
	uint32_t gids[16];
	size_t n;
	assert_int_equal(cache_initgroups(r, dom, 1, "alice", true, &deep, gids, 16, &n), 0);
	/* staff lists alice; admins nests staff; all and loop nest admins (in
	 * provider order); staff nests loop: a cycle, ended. No primary gid 100:
	 * no group lists alice under it. */
	assert_int_equal(n, 4);
	assert_int_equal(gids[0], 200);
	assert_int_equal(gids[1], 201);
	assert_int_equal(gids[2], 202);
	assert_int_equal(gids[3], 203);
	assert_int_equal(cache_initgroups(r, dom, 1, "alice", true, &deep, gids, 2, &n), -ERANGE);
	assert_int_equal(n, 4);
	assert_int_equal(cache_initgroups(r, dom, 1, "Bob", true, &deep, gids, 16, &n), 0);
	assert_int_equal(n, 4); /* admins; all, loop; staff (nests loop) */
	assert_int_equal(gids[0], 201);
	assert_int_equal(gids[3], 200);
	assert_int_equal(cache_initgroups(r, dom, 1, "nobody", true, &deep, gids, 16, &n), -ENOENT);
	cache_reader_end(r);
}

static void test_noop_refresh_writes_nothing_durable(void **state)
{
	struct fx *f = *state;
	put_users(f, 0);
	uint64_t before = cache_durable_commits(f->c);
	put_users(f, 0); /* same content again */
	assert_int_equal(cache_durable_commits(f->c), before);
	struct cache_txn *t;
	bool ch = true;
	struct cache_user a2 = alice;
	a2.shell = "/bin/zsh";
	assert_int_equal(cache_txn_begin(f->c, &t, NULL), 0);
	assert_int_equal(cache_put_user(t, "local", &a2, &ch, NULL), 0);
	assert_true(ch);
	assert_int_equal(cache_txn_commit(t, NULL), 0);
	assert_int_equal(cache_durable_commits(f->c), before + 1);
}

static int count_cb(const struct cache_user *u, void *arg)
{
	char *names = arg;
	strcat(names, u->name);
	strcat(names, ",");
	return 0;
}

struct keyed_name {
	uint64_t order, key;
	char name[32];
};

static struct keyed_name seen[16];
static size_t nseen;

static int keyed_user_cb(const struct cache_user *u, uint64_t key, void *arg)
{
	(void)arg;
	assert_true(nseen < 16);
	seen[nseen] = (struct keyed_name){u->order, key, ""};
	snprintf(seen[nseen++].name, sizeof(seen[0].name), "%s", u->name);
	return 0;
}

static int keyed_group_cb(const struct cache_group *g, uint64_t key, void *arg)
{
	(void)arg;
	assert_true(nseen < 16);
	seen[nseen] = (struct keyed_name){g->order, key, ""};
	snprintf(seen[nseen++].name, sizeof(seen[0].name), "%s", g->name);
	return 0;
}

static int keyed_cmp(const void *a, const void *b)
{
	const struct keyed_name *x = a, *y = b;
	return cache_enum_order(x->order, x->key, y->order, y->key);
}

/* seen[], sorted, as "a,b,c,". */
static const char *seen_sorted(void)
{
	static char out[256];
	out[0] = '\0';
	qsort(seen, nseen, sizeof(seen[0]), keyed_cmp);
	for (size_t i = 0; i < nseen; i++) {
		strcat(out, seen[i].name);
		strcat(out, ",");
	}
	nseen = 0;
	return out;
}

static int group_names_cb(const struct cache_group *g, void *arg)
{
	strcat(arg, g->name);
	strcat(arg, ",");
	return 0;
}

/* One pass in no order, sorted by cache_enum_order: the ordered walk. */
static void test_enum_unsorted(void **state)
{
	struct fx *f = *state;
	put_users(f, 0);
	struct cache_reader *r;
	char names[256] = "";
	assert_int_equal(cache_reader_begin(f->c, &r), 0);
	assert_int_equal(cache_enum_users(r, "local", count_cb, names), 0);
	assert_int_equal(cache_enum_users_unsorted(r, "local", keyed_user_cb, NULL), 0);
	assert_string_equal(seen_sorted(), names);
	names[0] = '\0';
	assert_int_equal(cache_enum_groups(r, "local", group_names_cb, names), 0);
	assert_int_equal(cache_enum_groups_unsorted(r, "local", keyed_group_cb, NULL), 0);
	assert_string_equal(seen_sorted(), names);
	assert_int_equal(cache_enum_users_unsorted(r, "empty", keyed_user_cb, NULL), 0);
	assert_int_equal(nseen, 0);
	cache_reader_end(r);
}

/* What a walk in parts passed: names (with u's gecos), one part at most
 * `every` records long. */
struct parts {
	char names[256][16];
	char gecos[256][16];
	size_t n, every, in_part;
};

static int part_user_cb(const struct cache_user *u, uint64_t key, void *arg)
{
	(void)key;
	struct parts *p = arg;
	assert_true(p->n < 256);
	snprintf(p->names[p->n], sizeof(p->names[0]), "%s", u->name);
	snprintf(p->gecos[p->n++], sizeof(p->gecos[0]), "%s", u->gecos);
	return ++p->in_part == p->every;
}

static int part_group_cb(const struct cache_group *g, uint64_t key, void *arg)
{
	(void)key;
	struct parts *p = arg;
	assert_true(p->n < 256);
	snprintf(p->names[p->n++], sizeof(p->names[0]), "%s", g->name);
	return ++p->in_part == p->every;
}

/* How many times the walk passed name (-1: with another gecos than want). */
static int passed(const struct parts *p, const char *name, const char *want)
{
	int n = 0;
	for (size_t i = 0; i < p->n; i++)
		if (strcmp(p->names[i], name) == 0)
			n = want && strcmp(p->gecos[i], want) != 0 ? -1 : n + 1;
	return n;
}

static void put_one(struct fx *f, const char *name, uint32_t uid, const char *gecos, bool del)
{
	struct cache_txn *t;
	bool ch;
	struct cache_user u = {name, uid, 100, gecos, "/home/x", "/bin/sh", uid};
	assert_int_equal(cache_txn_begin(f->c, &t, NULL), 0);
	if (del)
		assert_int_equal(cache_del_user(t, "local", name, NULL), 0);
	else
		assert_int_equal(cache_put_user(t, "local", &u, &ch, NULL), 0);
	assert_int_equal(cache_txn_commit(t, NULL), 0);
}

/* The walk in parts, each in a reader of its own, with changes between
 * them: what was there throughout is passed once; a change is seen when
 * the walk's position had not passed the entry yet; nothing twice. */
static void test_enum_from(void **state)
{
	struct fx *f = *state;
	struct cache_txn *t;
	bool ch;
	assert_int_equal(cache_txn_begin(f->c, &t, NULL), 0);
	assert_int_equal(cache_domain_ensure(t, "local", 0, NULL), 0);
	char name[16];
	for (uint32_t i = 0; i < 100; i++) {
		snprintf(name, sizeof(name), "u%03u", i);
		struct cache_user u = {name, 2000 + i, 100, "old", "/home/x", "/bin/sh", i + 1};
		assert_int_equal(cache_put_user(t, "local", &u, &ch, NULL), 0);
	}
	assert_int_equal(cache_txn_commit(t, NULL), 0);
	struct parts *p = calloc(1, sizeof(*p));
	p->every = 7;
	struct idc_buf at = IDC_BUF_INIT;
	struct cache_reader *r;
	int rc, nparts = 0;
	do {
		p->in_part = 0;
		assert_int_equal(cache_reader_begin(f->c, &r), 0);
		rc = cache_enum_users_from(r, "local", &at, part_user_cb, p);
		cache_reader_end(r);
		assert_true(rc == 0 || rc == 1);
		if (nparts++ == 0) { /* u000-u006 passed */
			assert_int_equal(rc, 1);
			assert_int_equal(p->n, 7);
			put_one(f, "u003", 0, NULL, true);       /* passed: stays passed */
			put_one(f, "u050", 0, NULL, true);       /* ahead: never passed */
			put_one(f, "u060", 2060, "new", false);  /* ahead: passed as changed */
			put_one(f, "a_new", 3000, "new", false); /* behind: not passed */
			put_one(f, "z_new", 3001, "new", false); /* ahead: passed */
			put_one(f, "u006", 2006, "new", false);  /* the last passed: not again */
		}
	} while (rc == 1);
	assert_true(nparts >= 15);
	for (uint32_t i = 0; i < 100; i++) {
		snprintf(name, sizeof(name), "u%03u", i);
		int want = i == 50 ? 0 : 1;
		assert_int_equal(passed(p, name, i == 60 ? "new" : "old"), want);
	}
	assert_int_equal(passed(p, "a_new", NULL), 0);
	assert_int_equal(passed(p, "z_new", "new"), 1);
	assert_int_equal(p->n, 100); /* 100 - u050 + z_new */
	/* in one reader too, a part at a time; and groups */
	memset(p, 0, sizeof(*p));
	p->every = 1;
	idc_buf_reset(&at);
	put_users(f, 0);
	assert_int_equal(cache_reader_begin(f->c, &r), 0);
	while ((rc = cache_enum_groups_from(r, "local", &at, part_group_cb, p)) == 1)
		p->in_part = 0;
	assert_int_equal(rc, 0);
	assert_int_equal(p->n, 4); /* admins, all, loop, staff: each once */
	idc_buf_reset(&at);
	assert_int_equal(cache_enum_users_from(r, "empty", &at, part_user_cb, p), 0);
	cache_reader_end(r);
	idc_buf_free(&at);
	free(p);
}

static void test_enum_delete_expire(void **state)
{
	struct fx *f = *state;
	put_users(f, 3600);
	struct cache_reader *r;
	char names[256] = "";
	assert_int_equal(cache_reader_begin(f->c, &r), 0);
	assert_int_equal(cache_enum_users(r, "local", count_cb, names), 0);
	assert_string_equal(names, "alice,Bob,bob2,"); /* provider order */
	struct cache_domain_stats st;
	assert_int_equal(cache_domain_stats(r, "local", &st), 0);
	assert_int_equal(st.users, 3);
	assert_int_equal(st.groups, 4);
	names[0] = '\0';
	assert_int_equal(cache_enum_users(r, "empty", count_cb, names), 0);
	assert_string_equal(names, "");
	cache_reader_end(r);

	struct cache_txn *t;
	assert_int_equal(cache_txn_begin(f->c, &t, NULL), 0);
	assert_int_equal(cache_del_user(t, "local", "Bob", NULL), 0);
	assert_int_equal(cache_del_user(t, "local", "Bob", NULL), -ENOENT);
	assert_int_equal(cache_txn_commit(t, NULL), 0);

	size_t n;
	assert_int_equal(cache_expire(f->c, "local", CACHE_USER, "alice", &n, NULL), 0);
	assert_int_equal(n, 1);
	assert_int_equal(cache_reader_begin(f->c, &r), 0);
	struct cache_user u;
	struct cache_meta m;
	assert_int_equal(cache_user_by_name(r, dom, 1, "alice", true, &u, &m), 0);
	assert_true(m.expired); /* still served */
	assert_true(m.expires > m.last_update);
	assert_int_equal(cache_user_by_name(r, dom, 1, "bob2", true, &u, &m), 0);
	assert_false(m.expired);
	assert_int_equal(cache_user_by_name(r, dom, 1, "Bob", true, &u, &m), -ENOENT);
	cache_reader_end(r);
	assert_int_equal(cache_expire(f->c, NULL, CACHE_ANY, NULL, &n, NULL), 0);
	assert_int_equal(n, 6); /* 2 users + 4 groups */

	assert_int_equal(cache_txn_begin(f->c, &t, NULL), 0);
	assert_int_equal(cache_domain_remove(t, "local", NULL), 0);
	assert_int_equal(cache_txn_commit(t, NULL), 0);
	assert_int_equal(cache_reader_begin(f->c, &r), 0);
	assert_int_equal(cache_user_by_name(r, dom, 1, "alice", true, &u, &m), -ENOENT);
	cache_reader_end(r);
}

/* A narrowed id range: users whose uid or gid, and groups whose gid, fall
 * outside are removed; the rest stays; another domain is untouched. */
static void test_drop_outside(void **state)
{
	struct fx *f = *state;
	put_users(f, 3600); /* alice 1000/100, Bob 1001/100, bob2 1001/101; groups 200-203 */
	struct cache_txn *t;
	bool ch;
	const struct cache_user root0 = {"root0", 0, 0, "", "/", "/bin/sh", 5};
	const struct cache_user hi = {"hi", 70000, 100, "", "/", "/bin/sh", 6};
	const struct cache_user lowgid = {"lowgid", 1500, 0, "", "/", "/bin/sh", 7};
	const struct cache_group wheel0 = {"wheel0", 0, 8, NULL, 0, NULL, 0, NULL};
	assert_int_equal(cache_txn_begin(f->c, &t, NULL), 0);
	assert_int_equal(cache_domain_ensure(t, "other", 3600, NULL), 0);
	assert_int_equal(cache_put_user(t, "local", &root0, &ch, NULL), 0);
	assert_int_equal(cache_put_user(t, "local", &hi, &ch, NULL), 0);
	assert_int_equal(cache_put_user(t, "local", &lowgid, &ch, NULL), 0);
	assert_int_equal(cache_put_group(t, "local", &wheel0, &ch, NULL), 0);
	assert_int_equal(cache_put_user(t, "other", &root0, &ch, NULL), 0);
	size_t nu = 9, ng = 9;
	/* no bounds at all: nothing to look for */
	assert_int_equal(cache_drop_outside(t, "local", 0, 0, &nu, &ng, NULL), 0);
	assert_int_equal(nu + ng, 0);
	/* 1..60000 drops root0, hi, lowgid and wheel0; 201 as the upper
	 * bound then drops the groups above it too */
	assert_int_equal(cache_drop_outside(t, "local", 1, 60000, &nu, &ng, NULL), 0);
	assert_int_equal(nu, 3);
	assert_int_equal(ng, 1);
	assert_int_equal(cache_drop_outside(t, "local", 1, 201, &nu, &ng, NULL), 0);
	assert_int_equal(nu, 3); /* alice, Bob, bob2: uid above 201 */
	assert_int_equal(ng, 2); /* all (202), loop (203) */
	assert_int_equal(cache_txn_commit(t, NULL), 0);
	struct cache_reader *r;
	struct cache_user u;
	struct cache_group g;
	const char *other[] = {"other"};
	assert_int_equal(cache_reader_begin(f->c, &r), 0);
	assert_int_equal(cache_user_by_name(r, dom, 1, "root0", true, &u, NULL), -ENOENT);
	assert_int_equal(cache_user_by_name(r, dom, 1, "alice", true, &u, NULL), -ENOENT);
	assert_int_equal(cache_group_by_name(r, dom, 1, "staff", true, &g, NULL), 0);
	assert_int_equal(cache_group_by_name(r, dom, 1, "admins", true, &g, NULL), 0);
	assert_int_equal(cache_group_by_name(r, dom, 1, "all", true, &g, NULL), -ENOENT);
	assert_int_equal(cache_user_by_name(r, other, 1, "root0", true, &u, NULL), 0);
	cache_reader_end(r);
}

static void test_bad_names(void **state)
{
	struct fx *f = *state;
	assert_false(cache_name_valid("", 0));
	assert_false(cache_name_valid("a/b", 3));
	assert_false(cache_name_valid("a:b", 3));
	assert_false(cache_name_valid("-x", 2));
	assert_false(cache_name_valid("..", 2));
	assert_false(cache_name_valid("a\nb", 3));
	assert_true(cache_name_valid("host$", 5));
	assert_true(cache_name_valid("a.b_c-d", 7));
	struct cache_txn *t;
	struct idc_diag d = {""};
	assert_int_equal(cache_txn_begin(f->c, &t, NULL), 0);
	assert_int_equal(cache_domain_ensure(t, "bad domain", 0, &d), -EINVAL);
	assert_int_equal(cache_domain_ensure(t, "local", 0, NULL), 0);
	struct cache_user u = alice;
	u.name = "x:y";
	assert_int_equal(cache_put_user(t, "local", &u, NULL, &d), -EINVAL);
	assert_non_null(strstr(d.msg, "invalid name"));
	/* Names with DN specials are escaped, stored and found again. */
	u.name = "o'neil+x=y";
	assert_int_equal(cache_put_user(t, "local", &u, NULL, &d), 0);
	assert_int_equal(cache_txn_commit(t, NULL), 0);
	struct cache_reader *r;
	assert_int_equal(cache_reader_begin(f->c, &r), 0);
	struct cache_user got;
	assert_int_equal(cache_user_by_name(r, dom, 1, "o'neil+x=y", true, &got, NULL), 0);
	cache_reader_end(r);
}

static void test_timestamps_rebuilt(void **state)
{
	struct fx *f = *state;
	put_users(f, 0);
	cache_close(f->c);
	char path[128];
	snprintf(path, sizeof(path), "%s/timestamps.mdb", f->dir);
	FILE *fp = fopen(path, "w");
	assert_non_null(fp);
	fputs("garbage that is not an LMDB file at all, long enough to be read as one", fp);
	fclose(fp);
	struct cache_options o = {.nosync = true};
	assert_int_equal(cache_open(f->dir, &o, &f->c, NULL), 0);
	struct cache_reader *r;
	assert_int_equal(cache_reader_begin(f->c, &r), 0);
	struct cache_user u;
	struct cache_meta m;
	assert_int_equal(cache_user_by_name(r, dom, 1, "alice", true, &u, &m), 0);
	assert_true(m.expired); /* no timestamps: due for refresh, still served */
	cache_reader_end(r);
}

static void check_fold(enum cache_name_rule r, const char *in, const char *want)
{
	char out[CACHE_NAME_MAX + 1];
	size_t n = cache_name_fold(r, in, out);
	if (n != strlen(want) || strcmp(out, want) != 0)
		fail_msg("rule %d: '%s' -> '%s', want '%s'", (int)r, in, out, want);
}

/* One fold for every layer, by the rule of where the names come from. */
static void test_name_fold(void **state)
{
	(void)state;
	check_fold(CACHE_NAMES_CASE_IGNORE, "ALICE", "alice");
	check_fold(CACHE_NAMES_CASE_IGNORE, "Stra\u00DFe", "strasse");
	check_fold(CACHE_NAMES_CASE_IGNORE, "\u00C9MILE", "\u00E9mile");
	check_fold(CACHE_NAMES_CASE_IGNORE, "E\u0301mile", "\u00E9mile");
	check_fold(CACHE_NAMES_CASE_EXACT, "\uFB01sh", "fish");
	check_fold(CACHE_NAMES_CASE_EXACT, "Alice", "Alice");
	check_fold(CACHE_NAMES_EXACT, "Alice  B", "Alice  B"); /* glibc compares bytes */
	check_fold(CACHE_NAMES_STORED, "Bob", "bob");
	check_fold(CACHE_NAMES_CASE_IGNORE, "", "");
	char big[CACHE_NAME_MAX + 2], out[CACHE_NAME_MAX + 1];
	memset(big, 'A', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	assert_int_equal(cache_name_fold(CACHE_NAMES_CASE_IGNORE, big, out), 0); /* too long */
	big[CACHE_NAME_MAX] = '\0';
	assert_int_equal(cache_name_fold(CACHE_NAMES_CASE_IGNORE, big, out), CACHE_NAME_MAX);
	assert_int_equal(out[0], 'a');
	/* 85 x U+FDFA is 255 bytes that NFKC makes ~2,800: kept as given */
	for (int i = 0; i < 85; i++)
		memcpy(big + 3 * i, "\uFDFA", 3);
	assert_int_equal(cache_name_fold(CACHE_NAMES_CASE_IGNORE, big, out), CACHE_NAME_MAX);
	assert_memory_equal(out, big, CACHE_NAME_MAX + 1);

	assert_true(cache_name_equal(CACHE_NAMES_CASE_IGNORE, "Stra\u00DFe", "STRASSE"));
	assert_false(cache_name_equal(CACHE_NAMES_EXACT, "Alice", "alice"));
	assert_false(cache_name_equal(CACHE_NAMES_CASE_IGNORE, "", "\u200B"));
	assert_true(cache_name_equal(CACHE_NAMES_CASE_IGNORE, "", ""));
	/* a lookup tells apart what caseIgnore keys alike; hashes follow it */
	const enum cache_name_rule ci = CACHE_NAMES_CASE_IGNORE;
	assert_false(cache_name_answers(ci, "stra\u00DFe", "strasse"));
	assert_true(cache_name_answers(ci, "Stra\u00DFe", "STRA\u00DFE"));
	assert_true(cache_name_answers(ci, "strasse", "STRASSE"));
	assert_int_equal(cache_name_hash(ci, "Stra\u00DFe", 7),
			 cache_name_hash(ci, "stra\u00DFe", 7));
	assert_int_equal(cache_name_hash(ci, "STRASSE", 7), cache_name_hash(ci, "strasse", 7));
	assert_true(cache_name_hash(ci, "stra\u00DFe", 7) != cache_name_hash(ci, "strasse", 7));
	assert_true(cache_name_hash(CACHE_NAMES_EXACT, "Alice", 7) !=
		    cache_name_hash(CACHE_NAMES_EXACT, "alice", 7));

	assert_int_equal(cache_name_rule_of_attr("uid"), CACHE_NAMES_CASE_IGNORE);
	assert_int_equal(cache_name_rule_of_attr("CN"), CACHE_NAMES_CASE_IGNORE);
	assert_int_equal(cache_name_rule_of_attr("memberUid"), CACHE_NAMES_CASE_EXACT);
	assert_int_equal(cache_name_rule_of_attr("userPassword"), CACHE_NAMES_EXACT);
	assert_int_equal(cache_name_rule_of_attr("sAMAccountName"), CACHE_NAMES_CASE_IGNORE);
}

/* Timestamps are keyed by the name as the cache folds it: expiring a user
 * in another spelling expires the one entry both spellings name. */
static void test_expire_other_spelling(void **state)
{
	struct fx *f = *state;
	static const struct cache_user u = {"Stra\u00DFe", 3000, 100, "", "/home/s", "/bin/sh", 9};
	struct cache_txn *t;
	bool ch;
	assert_int_equal(cache_txn_begin(f->c, &t, NULL), 0);
	assert_int_equal(cache_domain_ensure(t, "local", 0, NULL), 0);
	assert_int_equal(cache_put_user(t, "local", &u, &ch, NULL), 0);
	assert_int_equal(cache_txn_commit(t, NULL), 0);
	size_t n = 0;
	assert_int_equal(cache_expire(f->c, "local", CACHE_USER, "STRASSE", &n, NULL), 0);
	assert_int_equal(n, 1);
	struct cache_reader *r;
	assert_int_equal(cache_reader_begin(f->c, &r), 0);
	struct cache_user got;
	struct cache_meta m;
	assert_int_equal(cache_user_by_name(r, dom, 1, "STRA\u00DFE", false, &got, &m), 0);
	assert_string_equal(got.name, "Stra\u00DFe");
	assert_true(m.expired);
	/* One entry to caseIgnore, but two names to a directory that folds
	 * case code point by code point: "strasse" is not this user. */
	assert_int_equal(cache_user_by_name(r, dom, 1, "strasse", false, &got, &m), -ENOENT);
	cache_reader_end(r);
}

/* Rewrite the format number in the meta database of the store at dir. */
static void set_store_format(const char *dir, uint64_t v)
{
	MDB_env *env;
	MDB_txn *txn;
	MDB_dbi dbi;
	assert_int_equal(mdb_env_create(&env), 0);
	assert_int_equal(mdb_env_set_maxdbs(env, 256), 0);
	assert_int_equal(mdb_env_open(env, dir, 0, 0600), 0);
	assert_int_equal(mdb_txn_begin(env, NULL, 0, &txn), 0);
	assert_int_equal(mdb_dbi_open(txn, "meta", 0, &dbi), 0);
	MDB_val k = {6, "format"}, val = {sizeof(v), &v};
	assert_int_equal(mdb_put(txn, dbi, &k, &val, 0), 0);
	assert_int_equal(mdb_txn_commit(txn), 0);
	mdb_env_close(env);
}

/* A cache.mdb written under another store format (older index keys) is
 * started over empty: the daemon still starts, and the providers fill it. */
static void test_other_format_starts_over(void **state)
{
	struct fx *f = *state;
	put_users(f, 0);
	cache_close(f->c);
	f->c = NULL;
	char path[128];
	snprintf(path, sizeof(path), "%s/cache.mdb", f->dir);
	set_store_format(path, 99); /* any number but this build's */
	struct cache_options o = {.nosync = true};
	assert_int_equal(cache_open(f->dir, &o, &f->c, NULL), 0);
	struct cache_reader *r;
	assert_int_equal(cache_reader_begin(f->c, &r), 0);
	struct cache_user u;
	assert_int_equal(cache_user_by_name(r, dom, 1, "alice", true, &u, NULL), -ENOENT);
	cache_reader_end(r);
	put_users(f, 0);
}

/* A map too small for a transaction: the caller grows it and runs the
 * transaction again, as the files provider does. */
static int put_many(struct cache *c, int n)
{
	struct cache_txn *t;
	int rc = cache_txn_begin(c, &t, NULL);
	if (!rc)
		rc = cache_domain_ensure(t, "big", 0, NULL);
	for (int i = 0; i < n && !rc; i++) {
		char name[32], gecos[200];
		snprintf(name, sizeof(name), "u%06d", i);
		memset(gecos, 'g', sizeof(gecos) - 1);
		gecos[sizeof(gecos) - 1] = '\0';
		struct cache_user u = {
		    name, (uint32_t)(10000 + i), 100, gecos, "/home/x", "/bin/sh", (uint64_t)i};
		rc = cache_put_user(t, "big", &u, NULL, NULL);
	}
	if (rc) {
		cache_txn_abort(t);
		return rc;
	}
	return cache_txn_commit(t, NULL);
}

static void test_map_full_grows(void **state)
{
	(void)state;
	char dir[] = "/tmp/idc-cache-small-XXXXXX";
	assert_non_null(mkdtemp(dir));
	struct cache_options o = {.nosync = true, .map_size = 256 * 1024};
	struct cache *c;
	assert_int_equal(cache_open(dir, &o, &c, NULL), 0);
	int rc, grows = 0;
	while ((rc = put_many(c, 5000)) == IDC_EMAPFULL && grows < 10) {
		assert_int_equal(cache_grow(c, NULL), 0);
		grows++;
	}
	assert_int_equal(rc, 0);
	assert_true(grows > 0);
	struct cache_reader *r;
	assert_int_equal(cache_reader_begin(c, &r), 0);
	struct cache_domain_stats st;
	assert_int_equal(cache_domain_stats(r, "big", &st), 0);
	assert_int_equal(st.users, 5000);
	cache_reader_end(r);
	cache_close(c);
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	assert_int_equal(system(cmd), 0);
}

/* Groups g<from>..g<from+n-1> of domain "big" (ttl 3600) of 30 members
 * each in one transaction (users u<from>..u<from+n-1> too with users
 * set), each followed by the search an LDAP store makes for another holder
 * of its id, whose result is set aside as the provider's logging did: the
 * transaction's first failure. *search_full counts the searches that met
 * the full map first: they flush the pending index writes, and a group's
 * 30 memberUid keys make that flush likely to be what fills the map. */
static int put_page(struct cache *c, int from, int n, bool users, int *search_full)
{
	struct cache_txn *t;
	int rc = cache_txn_begin(c, &t, NULL);
	if (!rc)
		rc = cache_domain_ensure(t, "big", 3600, NULL);
	char mem[30][16], name[32], other[CACHE_NAME_MAX + 1];
	const char *mp[30];
	for (int i = from; i < from + n && !rc; i++) {
		snprintf(name, sizeof(name), "%c%06d", users ? 'u' : 'g', i);
		uint32_t id = (uint32_t)(10000 + i);
		if (users) {
			struct cache_user u = {name,      id,        100,        "",
					       "/home/x", "/bin/sh", (uint64_t)i};
			rc = cache_put_user(t, "big", &u, NULL, NULL);
		} else {
			for (int k = 0; k < 30; k++) {
				snprintf(mem[k], sizeof(mem[k]), "u%06d", (i * 7 + k * 131) % 9973);
				mp[k] = mem[k];
			}
			struct cache_group g = {name, id, (uint64_t)i, mp, 30};
			rc = cache_put_group(t, "big", &g, NULL, NULL);
		}
		int taken = rc      ? 0
			    : users ? cache_uid_taken(t, "big", id, name, other)
				    : cache_gid_taken(t, "big", id, name, other);
		if (taken == IDC_EMAPFULL)
			(*search_full)++;
	}
	if (rc) {
		cache_txn_abort(t);
		return rc;
	}
	return cache_txn_commit(t, NULL);
}

/* Pages of 250 users or groups into a cache whose maps start at 1 MiB (cache.mdb)
 * and 256 KiB (timestamps.mdb): every failure is a full map, which grows,
 * and the page runs again. */
static int put_pages(struct cache *c, int total, bool users, int *grows, int *search_full)
{
	int rc = 0;
	for (int from = 0; from < total && !rc; from += 250) {
		while ((rc = put_page(c, from, 250, users, search_full)) == IDC_EMAPFULL &&
		       *grows < 64) {
			assert_int_equal(cache_grow(c, NULL), 0);
			(*grows)++;
		}
	}
	return rc;
}

static off_t file_size(const char *dir, const char *name)
{
	char path[160];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	FILE *fp = fopen(path, "r");
	assert_non_null(fp);
	assert_int_equal(fseeko(fp, 0, SEEK_END), 0);
	off_t n = ftello(fp);
	fclose(fp);
	return n;
}

/* timestamps.mdb fills up long before cache.mdb when entries are small (a
 * million users at a 256 MiB map did): its map grows too, so every entry
 * keeps its timestamps, and marking them all expired (which copies every
 * page) grows it again if it must. A map that did not grow failed the
 * pages with -ENOSPC instead. */
static void test_timestamps_map_grows(void **state)
{
	(void)state;
	char dir[] = "/tmp/idc-cache-ts-XXXXXX";
	assert_non_null(mkdtemp(dir));
	struct cache_options o = {.nosync = true, .map_size = 1 << 20};
	struct cache *c;
	assert_int_equal(cache_open(dir, &o, &c, NULL), 0);
	int grows = 0, search_full = 0;
	assert_int_equal(put_pages(c, 8000, true, &grows, &search_full), 0);
	/* the timestamps outgrew their first map: the path was taken */
	assert_true(file_size(dir, "timestamps.mdb") > (off_t)256 << 10);
	struct cache_reader *r;
	assert_int_equal(cache_reader_begin(c, &r), 0);
	const char *big[] = {"big"};
	for (int i = 0; i < 8000; i += 97) {
		char name[32];
		snprintf(name, sizeof(name), "u%06d", i);
		struct cache_user u;
		struct cache_meta m;
		assert_int_equal(cache_user_by_name(r, big, 1, name, true, &u, &m), 0);
		assert_true(m.last_update > 0);
		assert_false(m.expired);
	}
	cache_reader_end(r);
	size_t n = 0;
	assert_int_equal(cache_expire(c, "big", CACHE_ANY, NULL, &n, NULL), 0);
	assert_int_equal(n, 8000);
	cache_close(c);
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	assert_int_equal(system(cmd), 0);
}

/* A full map met first by a search inside a write transaction (it flushes
 * the pending index writes) whose caller sets the error aside: LMDB fails
 * every later call of the transaction, and those failures must still say
 * "map full" so that the map grows. They said "store data is corrupted",
 * and an LDAP enumeration stopped storing for good. */
static void test_full_map_met_by_a_search(void **state)
{
	(void)state;
	char dir[] = "/tmp/idc-cache-srch-XXXXXX";
	assert_non_null(mkdtemp(dir));
	struct cache_options o = {.nosync = true, .map_size = 1 << 20};
	struct cache *c;
	assert_int_equal(cache_open(dir, &o, &c, NULL), 0);
	int grows = 0, search_full = 0;
	assert_int_equal(put_pages(c, 6000, false, &grows, &search_full), 0);
	assert_true(search_full > 0); /* the case was met */
	struct cache_reader *r;
	assert_int_equal(cache_reader_begin(c, &r), 0);
	struct cache_domain_stats st;
	assert_int_equal(cache_domain_stats(r, "big", &st), 0);
	assert_int_equal(st.groups, 6000);
	cache_reader_end(r);
	cache_close(c);
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	assert_int_equal(system(cmd), 0);
}

/* Raise last_pg in both meta pages of the LMDB file at path by n: the file
 * then ends before its last page, as it does when the pages a transaction
 * allocated and freed again were never written. Sound: nothing refers to
 * those pages. */
static void leave_unwritten_tail(const char *path, uint64_t n)
{
	int fd = open(path, O_RDWR);
	assert_true(fd >= 0);
	for (off_t meta = 0; meta <= 4096; meta += 4096) {
		uint64_t last;
		const off_t at = meta + 16 + 120; /* page header, then mm_last_pg */
		assert_int_equal(pread(fd, &last, sizeof(last), at), sizeof(last));
		last += n;
		assert_int_equal(pwrite(fd, &last, sizeof(last), at), sizeof(last));
	}
	close(fd);
}

/* The health check of the open timestamps db must not call such a file
 * damaged and throw the timestamps away. */
static void test_timestamps_kept_when_the_file_ends_early(void **state)
{
	struct fx *f = *state;
	put_users(f, 0);
	char path[128];
	snprintf(path, sizeof(path), "%s/timestamps.mdb", f->dir);
	leave_unwritten_tail(path, 8);
	struct cache_txn *t;
	assert_int_equal(cache_txn_begin(f->c, &t, NULL), 0);
	cache_txn_abort(t);
	struct cache_reader *r;
	assert_int_equal(cache_reader_begin(f->c, &r), 0);
	struct cache_user u;
	struct cache_meta m;
	assert_int_equal(cache_user_by_name(r, dom, 1, "alice", true, &u, &m), 0);
	assert_true(m.last_update > 0);
	cache_reader_end(r);
}

/* ---- SSH keys ------------------------------------------------------------------------ */

#define KEY_A "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAICStQcRIvPHZ+wS93xC07bs2rt8U4c+CoK7FmO0VgVue a"
#define KEY_B "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAICStQcRIvPHZ+wS93xC07bs2rt8U4c+CoK7FmO0VgVue b"

static int put_keys(struct fx *f, const char *name, const char *const *keys, size_t n, bool *ch)
{
	struct cache_txn *t;
	assert_int_equal(cache_txn_begin(f->c, &t, NULL), 0);
	struct idc_diag d = {{0}};
	int rc = cache_put_user_keys(t, "local", name, keys, n, ch, &d);
	assert_int_equal(rc ? (cache_txn_abort(t), 0) : cache_txn_commit(t, NULL), 0);
	return rc;
}

/* The keys of name as one string, "|" between them. */
static const char *keys_of(struct fx *f, const char *name, char *out, size_t cap)
{
	struct cache_reader *r;
	assert_int_equal(cache_reader_begin(f->c, &r), 0);
	const char *const *keys;
	size_t n;
	assert_int_equal(cache_user_keys(r, "local", name, &keys, &n), 0);
	out[0] = '\0';
	for (size_t i = 0; i < n; i++)
		snprintf(out + strlen(out), cap - strlen(out), "%s%s", i ? "|" : "", keys[i]);
	cache_reader_end(r);
	return out;
}

static void test_ssh_keys(void **state)
{
	struct fx *f = *state;
	char got[1024];
	put_users(f, 0);
	assert_string_equal(keys_of(f, "alice", got, sizeof(got)), "");
	bool ch = false;
	const char *two[] = {KEY_B, KEY_A, KEY_B}; /* given twice: kept once, in order */
	assert_int_equal(put_keys(f, "alice", two, 3, &ch), 0);
	assert_true(ch);
	assert_string_equal(keys_of(f, "ALICE", got, sizeof(got)), KEY_B "|" KEY_A);
	/* The same keys again write nothing durable. */
	uint64_t commits = cache_durable_commits(f->c);
	assert_int_equal(put_keys(f, "alice", two, 2, &ch), 0);
	assert_false(ch);
	assert_int_equal(cache_durable_commits(f->c), commits);
	/* The user record does not carry them: passwd lookups are unchanged. */
	struct cache_reader *r;
	struct cache_user u;
	assert_int_equal(cache_reader_begin(f->c, &r), 0);
	assert_int_equal(cache_user_by_name(r, dom, 1, "alice", true, &u, NULL), 0);
	assert_string_equal(u.shell, "/bin/sh");
	cache_reader_end(r);
	/* A key that is no authorized_keys line is refused, the old ones stay. */
	const char *bad[] = {KEY_A, "ssh-ed25519 not!base64"};
	assert_int_equal(put_keys(f, "alice", bad, 2, &ch), -EINVAL);
	const char *padded[] = {" " KEY_A};
	assert_int_equal(put_keys(f, "alice", padded, 1, &ch), -EINVAL);
	assert_string_equal(keys_of(f, "alice", got, sizeof(got)), KEY_B "|" KEY_A);
	/* None: removed. */
	assert_int_equal(put_keys(f, "alice", NULL, 0, &ch), 0);
	assert_true(ch);
	assert_string_equal(keys_of(f, "alice", got, sizeof(got)), "");
	assert_int_equal(put_keys(f, "alice", NULL, 0, &ch), 0);
	assert_false(ch);
}

static void test_ssh_keys_go_with_user(void **state)
{
	struct fx *f = *state;
	char got[1024];
	put_users(f, 0);
	const char *one[] = {KEY_A};
	bool ch;
	assert_int_equal(put_keys(f, "alice", one, 1, &ch), 0);
	assert_int_equal(put_keys(f, "bob2", one, 1, &ch), 0);
	struct cache_txn *t;
	assert_int_equal(cache_txn_begin(f->c, &t, NULL), 0);
	assert_int_equal(cache_del_user(t, "local", "alice", NULL), 0);
	size_t nu, ng;
	assert_int_equal(cache_drop_outside(t, "local", 1, 1000, &nu, &ng, NULL), 0);
	assert_int_equal(nu, 2); /* Bob and bob2, uid 1001 */
	assert_int_equal(cache_txn_commit(t, NULL), 0);
	assert_string_equal(keys_of(f, "alice", got, sizeof(got)), "");
	assert_string_equal(keys_of(f, "bob2", got, sizeof(got)), "");
	/* A user stored again has none until its provider gives them. */
	put_users(f, 0);
	assert_string_equal(keys_of(f, "alice", got, sizeof(got)), "");
	assert_int_equal(put_keys(f, "alice", one, 1, &ch), 0);
	/* Removed and filled again in one transaction (a rebuild): the keys
	 * container is made again. */
	assert_int_equal(cache_txn_begin(f->c, &t, NULL), 0);
	assert_int_equal(cache_put_user_keys(t, "local", "alice", one, 1, &ch, NULL), 0);
	assert_int_equal(cache_domain_remove(t, "local", NULL), 0);
	assert_int_equal(cache_domain_ensure(t, "local", 0, NULL), 0);
	assert_int_equal(cache_put_user(t, "local", &alice, &ch, NULL), 0);
	assert_int_equal(cache_put_user_keys(t, "local", "alice", one, 1, &ch, NULL), 0);
	assert_int_equal(cache_txn_commit(t, NULL), 0);
	assert_string_equal(keys_of(f, "alice", got, sizeof(got)), KEY_A);
	assert_int_equal(cache_txn_begin(f->c, &t, NULL), 0);
	assert_int_equal(cache_domain_remove(t, "local", NULL), 0);
	assert_int_equal(cache_txn_commit(t, NULL), 0);
	assert_string_equal(keys_of(f, "alice", got, sizeof(got)), "");
}

/* A member listed twice past the first 64 names, in a group whose distinct
 * members are fewer than 64 (an LDAP group naming each user by memberUid and
 * by member DN): stored once, not refused as a repeated value. */
static void test_repeats_past_the_scan(void **state)
{
	struct fx *f = *state;
	enum { N = 40 };
	char names[N][16];
	const char *m[2 * N];
	for (int i = 0; i < N; i++) {
		snprintf(names[i], sizeof(names[i]), "user%d", i);
		m[i] = m[N + i] = names[i];
	}
	struct cache_group g = {"both", 300, 1, m, 2 * N, NULL, 0, NULL};
	struct cache_txn *t;
	bool ch;
	assert_int_equal(cache_txn_begin(f->c, &t, NULL), 0);
	assert_int_equal(cache_domain_ensure(t, "local", 0, NULL), 0);
	assert_int_equal(cache_put_group(t, "local", &g, &ch, NULL), 0);
	assert_int_equal(cache_txn_commit(t, NULL), 0);
	struct cache_reader *r;
	assert_int_equal(cache_reader_begin(f->c, &r), 0);
	struct cache_group out;
	assert_int_equal(cache_group_by_name(r, dom, 1, "both", true, &out, NULL), 0);
	assert_int_equal(out.nmembers, N);
	assert_string_equal(out.members[N - 1], names[N - 1]);
	cache_reader_end(r);
}

/* Four groups nested three deep, with cycles (mid nests top, bottom
 * nests mid), a member group the cache lacks, and users listed again in
 * another case further down. */
static void put_nested(struct fx *f)
{
	struct cache_txn *t;
	bool ch;
	struct cache_group gs[] = {
	    {"top", 300, 1, (const char *[]){"u0"}, 1, (const char *[]){"mid", "missing"}, 2},
	    {"mid", 301, 2, (const char *[]){"u1", "U0"}, 2, (const char *[]){"low", "top"}, 2},
	    {"low", 302, 3, (const char *[]){"u2", "U1"}, 2, (const char *[]){"bottom"}, 1},
	    {"bottom", 303, 4, (const char *[]){"u3"}, 1, (const char *[]){"mid"}, 1},
	    {"flat", 304, 5, (const char *[]){"u9"}, 1, NULL, 0},
	};
	assert_int_equal(cache_txn_begin(f->c, &t, NULL), 0);
	assert_int_equal(cache_domain_ensure(t, "local", 0, NULL), 0);
	for (size_t i = 0; i < sizeof(gs) / sizeof(gs[0]); i++)
		assert_int_equal(cache_put_group(t, "local", &gs[i], &ch, NULL), 0);
	assert_int_equal(cache_txn_commit(t, NULL), 0);
}

/* g's flattened list to depth, joined with ','. */
static void members_of(struct cache_reader *r, const char *name, unsigned depth, char *out,
		       size_t size)
{
	struct cache_group g;
	assert_int_equal(cache_group_by_name(r, dom, 1, name, true, &g, NULL), 0);
	const struct cache_nesting nest = {depth, NULL, NULL};
	assert_int_equal(cache_group_members(r, "local", &g, &nest), 0);
	out[0] = '\0';
	for (size_t i = 0; i < g.nmembers; i++) {
		if (i)
			strncat(out, ",", size - strlen(out) - 1);
		strncat(out, g.members[i], size - strlen(out) - 1);
	}
}

struct enum_flat {
	struct cache_reader *r;
	char top[64];
	size_t groups;
};

static int enum_flat_cb(const struct cache_group *g, uint64_t key, void *arg)
{
	struct enum_flat *e = arg;
	struct cache_group c = *g;
	(void)key;
	e->groups++;
	assert_int_equal(cache_group_members(e->r, "local", &c, &deep), 0);
	if (strcmp(c.name, "top") == 0)
		for (size_t i = 0; i < c.nmembers; i++)
			strncat(e->top, c.members[i], sizeof(e->top) - strlen(e->top) - 1);
	return 0;
}

static void test_group_members_nested(void **state)
{
	struct fx *f = *state;
	put_nested(f);
	struct cache_reader *r;
	assert_int_equal(cache_reader_begin(f->c, &r), 0);
	char got[256];
	/* level by level; "U0" and "U1" are u0 and u1 again (caseIgnore) */
	members_of(r, "top", 32, got, sizeof(got));
	assert_string_equal(got, "u0,u1,u2,u3");
	/* ldap_group_nesting_level: levels followed */
	members_of(r, "top", 0, got, sizeof(got));
	assert_string_equal(got, "u0");
	members_of(r, "top", 1, got, sizeof(got));
	assert_string_equal(got, "u0,u1");
	members_of(r, "top", 2, got, sizeof(got));
	assert_string_equal(got, "u0,u1,u2");
	/* a group's own list is served as stored; the cycle back to top adds
	 * u0 only as the U0 mid lists */
	members_of(r, "mid", 32, got, sizeof(got));
	assert_string_equal(got, "u1,U0,u2,u3");
	members_of(r, "bottom", 32, got, sizeof(got));
	assert_string_equal(got, "u3,u1,U0,u2");
	members_of(r, "flat", 32, got, sizeof(got));
	assert_string_equal(got, "u9");
	/* inside an enumeration's callback, on the same reader */
	struct enum_flat e = {.r = r};
	assert_int_equal(cache_enum_groups_unsorted(r, "local", enum_flat_cb, &e), 0);
	assert_int_equal(e.groups, 5);
	assert_string_equal(e.top, "u0u1u2u3");
	cache_reader_end(r);
}

/* A chain of CHAIN groups, each nested in the next (g<k+1> has member
 * g<k>), closed into a cycle (g0 has member g<CHAIN-1>); g<k> lists user
 * u<k>, g0 also "deep". */
#define CHAIN 10000

static void put_chain(struct fx *f)
{
	struct cache_txn *t;
	bool ch;
	assert_int_equal(cache_txn_begin(f->c, &t, NULL), 0);
	assert_int_equal(cache_domain_ensure(t, "local", 0, NULL), 0);
	const struct cache_user u = {"deep", 1100, 100, "", "/home/deep", "/bin/sh", 1};
	assert_int_equal(cache_put_user(t, "local", &u, &ch, NULL), 0);
	for (unsigned k = 0; k < CHAIN; k++) {
		char name[16], user[16], inner[16];
		snprintf(name, sizeof(name), "g%u", k);
		snprintf(user, sizeof(user), "u%u", k);
		snprintf(inner, sizeof(inner), "g%u", (k + CHAIN - 1) % CHAIN);
		const char *users[] = {user, "deep"};
		const char *nested[] = {inner};
		struct cache_group g = {name, 10000 + k, k + 1, users, k ? 1 : 2, nested, 1, NULL};
		assert_int_equal(cache_put_group(t, "local", &g, &ch, NULL), 0);
	}
	assert_int_equal(cache_txn_commit(t, NULL), 0);
}

/* ldap_group_nesting_level bounds how far a chain is followed, up
 * (initgroups) and down (a group's members); a cycle ends either way. */
static void test_nesting_bounded(void **state)
{
	struct fx *f = *state;
	put_chain(f);
	struct cache_reader *r;
	assert_int_equal(cache_reader_begin(f->c, &r), 0);
	static uint32_t gids[CHAIN];
	size_t n;
	/* g0 lists deep; g1..g32 nest it 1..32 levels up */
	assert_int_equal(cache_initgroups(r, dom, 1, "deep", true, &deep, gids, CHAIN, &n), 0);
	assert_int_equal(n, 33);
	for (size_t k = 0; k < n; k++)
		assert_int_equal(gids[k], 10000 + k);
	const struct cache_nesting none = {0, NULL, NULL};
	assert_int_equal(cache_initgroups(r, dom, 1, "deep", true, &none, gids, CHAIN, &n), 0);
	assert_int_equal(n, 1);
	/* unbounded, the cycle ends: each group once */
	const struct cache_nesting all = {CHAIN * 2, NULL, NULL};
	assert_int_equal(cache_initgroups(r, dom, 1, "deep", true, &all, gids, CHAIN, &n), 0);
	assert_int_equal(n, CHAIN);
	/* down: g0's own users, then 32 levels: u<CHAIN-1> .. u<CHAIN-32> */
	struct cache_group g;
	assert_int_equal(cache_group_by_name(r, dom, 1, "g0", true, &g, NULL), 0);
	assert_int_equal(cache_group_members(r, "local", &g, &deep), 0);
	assert_int_equal(g.nmembers, 2 + 32);
	assert_string_equal(g.members[2], "u9999");
	assert_string_equal(g.members[33], "u9968");
	assert_int_equal(cache_group_by_name(r, dom, 1, "g0", true, &g, NULL), 0);
	assert_int_equal(cache_group_members(r, "local", &g, &all), 0);
	assert_int_equal(g.nmembers, CHAIN + 1); /* the cycle back to g0 adds nothing */
	cache_reader_end(r);
}

/* The daemon's withheld groups, as a skip: the groups named in arg. */
static bool skip_named(const struct cache_group *g, void *arg)
{
	for (const char *const *p = arg; *p; p++)
		if (strcmp(g->name, *p) == 0)
			return true;
	return false;
}

/* A member group passed over adds none of its users, nor those of the
 * groups nested only through it, to a group nesting it; nor, to a user's
 * list, the groups nesting it. */
static void test_nesting_skips_withheld(void **state)
{
	struct fx *f = *state;
	put_nested(f);
	put_users(f, 0);
	struct cache_reader *r;
	assert_int_equal(cache_reader_begin(f->c, &r), 0);
	const char *mid[] = {"mid", NULL}, *low[] = {"low", NULL};
	const struct cache_nesting skip_mid = {32, skip_named, mid},
				   skip_low = {32, skip_named, low};
	struct cache_group g;
	assert_int_equal(cache_group_by_name(r, dom, 1, "top", true, &g, NULL), 0);
	assert_int_equal(cache_group_members(r, "local", &g, &skip_mid), 0);
	assert_int_equal(g.nmembers, 1); /* low and bottom only nest in top through mid */
	assert_string_equal(g.members[0], "u0");
	assert_int_equal(cache_group_by_name(r, dom, 1, "top", true, &g, NULL), 0);
	assert_int_equal(cache_group_members(r, "local", &g, &skip_low), 0);
	assert_int_equal(g.nmembers, 2); /* bottom nests mid too: reached only through low */
	assert_string_equal(g.members[1], "u1");
	/* alice: staff lists her; admins nests staff, all and loop nest admins */
	const char *admins[] = {"admins", NULL};
	const struct cache_nesting skip_admins = {32, skip_named, admins};
	uint32_t gids[16];
	size_t n;
	assert_int_equal(cache_initgroups(r, dom, 1, "alice", true, &skip_admins, gids, 16, &n), 0);
	assert_int_equal(n, 2); /* staff, admins (its own gid the caller drops) */
	assert_int_equal(gids[0], 200);
	assert_int_equal(gids[1], 201);
	cache_reader_end(r);
}

/* ---- counts kept for `idcache status` ---------------------------------------------------- */

static int one_user(const struct cache_user *u, uint64_t key, void *arg)
{
	(void)u;
	(void)key;
	(*(size_t *)arg)++;
	return 0;
}

static int one_group(const struct cache_group *g, uint64_t key, void *arg)
{
	(void)g;
	(void)key;
	(*(size_t *)arg)++;
	return 0;
}

/* The counts status reads, which must be what an enumeration finds. */
static struct cache_domain_stats counts(struct cache *c, const char *domain, size_t users,
					size_t groups)
{
	struct cache_reader *r;
	struct cache_domain_stats st;
	size_t nu = 0, ng = 0;
	assert_int_equal(cache_reader_begin(c, &r), 0);
	assert_int_equal(cache_domain_stats(r, domain, &st), 0);
	assert_int_equal(cache_enum_users_unsorted(r, domain, one_user, &nu), 0);
	assert_int_equal(cache_enum_groups_unsorted(r, domain, one_group, &ng), 0);
	cache_reader_end(r);
	if (nu != users || ng != groups || st.users != nu || st.groups != ng)
		print_message("%s: enumerated %zu/%zu, counted %llu/%llu, want %zu/%zu\n", domain,
			      nu, ng, (unsigned long long)st.users, (unsigned long long)st.groups,
			      users, groups);
	assert_int_equal(nu, users);
	assert_int_equal(ng, groups);
	assert_int_equal(st.users, users);
	assert_int_equal(st.groups, groups);
	return st;
}

/* The container of a domain's users as the store holds it: whether it
 * keeps a count, and (keep) replaced by one without, as a cache written
 * before counts were kept has it. */
static bool user_count_kept(const char *dir, bool drop)
{
	char path[128];
	snprintf(path, sizeof(path), "%s/cache.mdb", dir);
	struct store_options so = {0};
	struct store *s;
	struct store_txn *t;
	assert_int_equal(store_open(path, &so, &s, NULL), 0);
	assert_int_equal(store_txn_begin(s, NULL, 0, &t, NULL), 0);
	const char *dn = "cn=users,cn=local,cn=idcache";
	struct store_entry e;
	assert_int_equal(store_get(t, (struct store_val){dn, strlen(dn)}, &e, NULL), 0);
	bool kept = store_entry_attr(&e, "entrycount", 10) != NULL;
	if (drop) {
		struct idc_arena a = {0};
		struct store_pair p[] = {{{"objectClass", 11}, {"container", 9}},
					 {{"cn", 2}, {"users", 5}}};
		assert_int_equal(
		    store_entry_from_pairs(&a, (struct store_val){dn, strlen(dn)}, p, 2, &e, NULL),
		    0);
		assert_int_equal(store_replace(t, &e, NULL, NULL), 0);
		idc_arena_free(&a);
	}
	assert_int_equal(store_txn_commit(t, NULL), 0);
	store_close(s);
	return kept;
}

/* A gid that thousands of users hold as their primary group is looked up
 * among the groups: the plan reads the groups' class, not every user
 * (the daemon answered getgrgid of such a gid in 70-120 ms, reading each
 * of 200,000 users, on its loop). */
static void test_gid_shared_by_users(void **state)
{
	struct fx *f = *state;
	enum { N = 3000 };
	struct cache_txn *t;
	bool ch;
	assert_int_equal(cache_txn_begin(f->c, &t, NULL), 0);
	assert_int_equal(cache_domain_ensure(t, "local", 0, NULL), 0);
	for (unsigned i = 0; i < N; i++) {
		char name[16];
		snprintf(name, sizeof(name), "u%04u", i);
		struct cache_user u = {name, 10000 + i, 700, "", "/", "/bin/sh", i + 1};
		assert_int_equal(cache_put_user(t, "local", &u, &ch, NULL), 0);
	}
	struct cache_group crew = {"crew", 700, N + 1, NULL, 0, NULL, 0, NULL};
	struct cache_group other = {"other", 701, N + 2, NULL, 0, NULL, 0, NULL};
	assert_int_equal(cache_put_group(t, "local", &crew, &ch, NULL), 0);
	assert_int_equal(cache_put_group(t, "local", &other, &ch, NULL), 0);
	char taken[CACHE_NAME_MAX + 1];
	assert_int_equal(cache_gid_taken(t, "local", 700, "newcomer", taken), 1);
	assert_string_equal(taken, "crew");
	assert_int_equal(cache_gid_taken(t, "local", 702, "newcomer", taken), 0);
	assert_int_equal(cache_txn_commit(t, NULL), 0);

	struct cache_reader *r;
	struct cache_group g;
	assert_int_equal(cache_reader_begin(f->c, &r), 0);
	assert_int_equal(cache_group_by_gid(r, dom, 1, 700, &g, NULL), 0);
	assert_string_equal(g.name, "crew");
	assert_int_equal(cache_group_by_gid(r, dom, 1, 702, &g, NULL), -ENOENT);
	struct cache_user u;
	assert_int_equal(cache_user_by_uid(r, dom, 1, 10000 + N - 1, &u, NULL), 0);
	assert_int_equal(u.gid, 700);
	cache_reader_end(r);
	cache_close(f->c);
	f->c = NULL;

	/* the plan of the filter the lookups above used */
	char path[128], text[CACHE_NUMBER_FILTER_MAX];
	snprintf(path, sizeof(path), "%s/cache.mdb", f->dir);
	size_t tlen = cache_number_filter(text, KIND_GROUP, 700);
	struct store_options so = {0};
	struct store *s;
	struct store_txn *st;
	struct store_filter *flt;
	struct idc_buf plan = IDC_BUF_INIT;
	assert_int_equal(store_open(path, &so, &s, NULL), 0);
	assert_int_equal(store_txn_begin(s, NULL, STORE_TXN_RDONLY, &st, NULL), 0);
	assert_int_equal(store_filter_parse(text, tlen, &flt, NULL), 0);
	const char *base = "cn=groups,cn=local,cn=idcache";
	struct store_search q = {{base, strlen(base)}, STORE_SCOPE_ONE, flt, 0};
	assert_int_equal(store_search_plan(st, &q, &plan), 0);
	assert_int_equal(idc_buf_putc(&plan, '\0'), 0);
	print_message("plan: %s\n", plan.data);
	const char *n = strstr(plan.data, " -> ");
	assert_non_null(n);
	assert_true(strtoul(n + 4, NULL, 10) <= 2); /* the two groups, not 3,000 users */
	idc_buf_free(&plan);
	store_filter_free(flt);
	store_txn_abort(st);
	store_close(s);
}

/* Resident kB of this process's maps of dir's cache.mdb data file. */
static long data_rss_kb(const char *dir)
{
	char path[128], line[512];
	snprintf(path, sizeof(path), "%s/cache.mdb/data.mdb", dir);
	FILE *f = fopen("/proc/self/smaps", "r");
	assert_non_null(f);
	long kb = 0;
	bool in = false;
	while (fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;
		char perms[5];
		long v;
		size_t n = strlen(line), pn = strlen(path);
		if (sscanf(line, "%lx-%lx %4s", &lo, &hi, perms) == 3)
			in = n > pn && line[n - 1] == '\n' &&
			     memcmp(line + n - 1 - pn, path, pn) == 0;
		else if (in && sscanf(line, "Rss: %ld kB", &v) == 1)
			kb += v;
	}
	fclose(f);
	return kb;
}

static int walk_user_cb(const struct cache_user *u, void *arg)
{
	*(size_t *)arg += strlen(u->name) > 0;
	return 0;
}

/* cache_map_release: the pages a walk mapped leave the resident set, the
 * entries read the same after; with a write transaction open elsewhere it
 * does not wait (-EBUSY) unless told to. */
static void test_map_release(void **state)
{
	struct fx *f = *state;
	enum { N = 3000 };
	struct cache_txn *t;
	assert_int_equal(cache_txn_begin(f->c, &t, NULL), 0);
	assert_int_equal(cache_domain_ensure(t, "local", 0, NULL), 0);
	for (uint32_t i = 0; i < N; i++) {
		char name[32], gecos[200];
		snprintf(name, sizeof(name), "user%u", i);
		memset(gecos, 'g', sizeof(gecos) - 1);
		gecos[sizeof(gecos) - 1] = '\0';
		struct cache_user u = {name, 10000 + i, 100, gecos, "/home/x", "/bin/sh", i + 1};
		bool ch;
		assert_int_equal(cache_put_user(t, "local", &u, &ch, NULL), 0);
	}
	assert_int_equal(cache_txn_commit(t, NULL), 0);
	struct cache_reader *r;
	size_t n = 0;
	assert_int_equal(cache_reader_begin(f->c, &r), 0);
	assert_int_equal(cache_enum_users(r, "local", walk_user_cb, &n), 0);
	assert_int_equal(n, N);
	long before = data_rss_kb(f->dir);
	assert_true(before > 100); /* ~1 MiB of records mapped by the walk */
	assert_int_equal(cache_map_release(f->c, false), 0);
	assert_int_equal(data_rss_kb(f->dir), 0);
	/* the same reader reads on, from the page cache */
	struct cache_user u;
	assert_int_equal(cache_user_by_name(r, dom, 1, "user2999", false, &u, NULL), 0);
	assert_int_equal(u.uid, 12999);
	n = 0;
	assert_int_equal(cache_enum_users(r, "local", walk_user_cb, &n), 0);
	assert_int_equal(n, N);
	cache_reader_end(r);
	assert_true(data_rss_kb(f->dir) > 0);
	/* a write transaction open: not waited for */
	assert_int_equal(cache_txn_begin(f->c, &t, NULL), 0);
	assert_int_equal(cache_map_release(f->c, false), -EBUSY);
	cache_txn_abort(t);
	assert_int_equal(cache_map_release(f->c, true), 0);
	assert_int_equal(data_rss_kb(f->dir), 0);
}

static void test_counts_kept(void **state)
{
	struct fx *f = *state;
	counts(f->c, "local", 0, 0);
	put_users(f, 3600);
	struct cache_domain_stats st = counts(f->c, "local", 3, 4);
	assert_true(st.last_update > 0);
	put_users(f, 3600); /* a refresh that changes nothing */
	counts(f->c, "local", 3, 4);

	struct cache_txn *t;
	bool ch;
	struct cache_user extra = alice;
	extra.order = 10;
	extra.extra = true;
	const struct cache_user carol = {"carol", 1002, 100, "", "/home/carol", "", 11};
	assert_int_equal(cache_txn_begin(f->c, &t, NULL), 0);
	assert_int_equal(cache_put_user(t, "local", &extra, &ch, NULL), 0);
	assert_int_equal(cache_put_user(t, "local", &carol, &ch, NULL), 0);
	assert_int_equal(cache_del_group(t, "local", "loop", NULL), 0);
	assert_int_equal(cache_txn_commit(t, NULL), 0);
	counts(f->c, "local", 5, 3);

	/* added and removed in one transaction; and an aborted one */
	const struct cache_user dave = {"dave", 1003, 100, "", "/home/dave", "", 12};
	assert_int_equal(cache_txn_begin(f->c, &t, NULL), 0);
	assert_int_equal(cache_put_user(t, "local", &dave, &ch, NULL), 0);
	assert_int_equal(cache_del_user(t, "local", "dave", NULL), 0);
	assert_int_equal(cache_del_extra_user(t, "local", 10, NULL), 0);
	assert_int_equal(cache_txn_commit(t, NULL), 0);
	counts(f->c, "local", 4, 3);
	assert_int_equal(cache_txn_begin(f->c, &t, NULL), 0);
	assert_int_equal(cache_put_user(t, "local", &dave, &ch, NULL), 0);
	assert_int_equal(cache_del_user(t, "local", "Bob", NULL), 0);
	cache_txn_abort(t);
	counts(f->c, "local", 4, 3);

	/* a narrowed range; another domain is counted apart */
	size_t nu, ng;
	assert_int_equal(cache_txn_begin(f->c, &t, NULL), 0);
	assert_int_equal(cache_domain_ensure(t, "other", 0, NULL), 0);
	assert_int_equal(cache_put_user(t, "other", &dave, &ch, NULL), 0);
	assert_int_equal(cache_drop_outside(t, "local", 1, 1001, &nu, &ng, NULL), 0);
	assert_int_equal(cache_txn_commit(t, NULL), 0);
	assert_int_equal(nu, 1); /* carol (uid 1002) */
	assert_int_equal(ng, 0);
	counts(f->c, "other", 1, 0);
	st = counts(f->c, "local", 3, 3);
	assert_true(st.last_update > 0); /* kept when entries go */

	/* removed and filled again in one transaction, then removed */
	assert_int_equal(cache_txn_begin(f->c, &t, NULL), 0);
	assert_int_equal(cache_put_user(t, "local", &dave, &ch, NULL), 0);
	assert_int_equal(cache_domain_remove(t, "local", NULL), 0);
	assert_int_equal(cache_domain_ensure(t, "local", 0, NULL), 0);
	assert_int_equal(cache_put_user(t, "local", &carol, &ch, NULL), 0);
	assert_int_equal(cache_txn_commit(t, NULL), 0);
	counts(f->c, "local", 1, 0);
	assert_int_equal(cache_txn_begin(f->c, &t, NULL), 0);
	assert_int_equal(cache_domain_remove(t, "local", NULL), 0);
	assert_int_equal(cache_txn_commit(t, NULL), 0);
	st = counts(f->c, "local", 0, 0);
	assert_int_equal(st.last_update, 0);
	counts(f->c, "other", 1, 0);

	/* a container that keeps no count (a cache from before): counted by
	 * the readers, and kept again by the next write */
	put_users(f, 3600);
	cache_close(f->c);
	assert_true(user_count_kept(f->dir, true));
	struct cache_options o = {.nosync = true};
	assert_int_equal(cache_open(f->dir, &o, &f->c, NULL), 0);
	counts(f->c, "local", 3, 4);
	assert_int_equal(cache_txn_begin(f->c, &t, NULL), 0);
	assert_int_equal(cache_domain_ensure(t, "local", 0, NULL), 0);
	assert_int_equal(cache_put_user(t, "local", &carol, &ch, NULL), 0);
	assert_int_equal(cache_txn_commit(t, NULL), 0);
	counts(f->c, "local", 4, 4);
	cache_close(f->c);
	assert_true(user_count_kept(f->dir, false));
	assert_int_equal(cache_open(f->dir, &o, &f->c, NULL), 0);
	counts(f->c, "local", 4, 4);
}

int main(void)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
	const struct CMUnitTest tests[] = {
	    T(test_lookups),
	    T(test_initgroups),
	    T(test_group_members_nested),
	    T(test_nesting_bounded),
	    T(test_nesting_skips_withheld),
	    T(test_noop_refresh_writes_nothing_durable),
	    T(test_enum_delete_expire),
	    T(test_enum_unsorted),
	    T(test_enum_from),
	    T(test_drop_outside),
	    T(test_bad_names),
	    T(test_timestamps_rebuilt),
	    T(test_timestamps_kept_when_the_file_ends_early),
	    T(test_other_format_starts_over),
	    cmocka_unit_test(test_name_fold),
	    T(test_expire_other_spelling),
	    T(test_ssh_keys),
	    T(test_ssh_keys_go_with_user),
	    cmocka_unit_test(test_map_full_grows),
	    T(test_map_release),
	    cmocka_unit_test(test_timestamps_map_grows),
	    cmocka_unit_test(test_full_map_met_by_a_search),
	    T(test_gid_shared_by_users),
	    T(test_repeats_past_the_scan),
	    T(test_counts_kept),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
