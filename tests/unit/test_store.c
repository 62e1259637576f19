/* Unit tests of the store core: open, transactions, add/modify/replace/
 * delete/modrdn, search and the planner, indexes, check, bulk and growth. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "store/store_int.h"

static const char *const default_indexes[] = {"objectClass", "uid",       "cn",
					      "uidNumber",   "gidNumber", "member"};

struct fx {
	char dir[64];
	struct store *s;
	struct idc_arena arena;
};

static void rm_store(const char *dir)
{
	char p[512];
	const char *files[] = {"data.mdb", "lock.mdb", "write.lock"};
	for (size_t i = 0; i < 3; i++) {
		snprintf(p, sizeof(p), "%s/%s", dir, files[i]);
		unlink(p);
	}
	rmdir(dir);
}

static int open_fx(struct fx *f, size_t map)
{
	strcpy(f->dir, "/tmp/idc-store-XXXXXX");
	if (!mkdtemp(f->dir))
		return -1;
	struct store_options o = {STORE_CREATE | STORE_NOSYNC, map, default_indexes,
				  IDC_ARRAY_SIZE(default_indexes), 0};
	struct idc_diag d;
	int rc = store_open(f->dir, &o, &f->s, &d);
	if (rc)
		fprintf(stderr, "open: %s\n", d.msg);
	f->arena = (struct idc_arena)IDC_ARENA_INIT;
	return rc;
}

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));
	*state = f;
	return open_fx(f, 0);
}

static int teardown(void **state)
{
	struct fx *f = *state;
	store_close(f->s);
	idc_arena_free(&f->arena);
	rm_store(f->dir);
	free(f);
	return 0;
}

/* Entry from "dn\nattr: value\n..." text; all memory in the fixture arena. */
static struct store_entry mk(struct fx *f, const char *text)
{
	char *copy = idc_arena_strndup(&f->arena, text, strlen(text));
	struct store_pair pairs[64];
	size_t n = 0;
	char *save, *line = strtok_r(copy, "\n", &save);
	struct store_val dn = {line, strlen(line)};
	while ((line = strtok_r(NULL, "\n", &save)) && n < 64) {
		char *colon = strstr(line, ": ");
		assert_non_null(colon);
		*colon = '\0';
		pairs[n].name = (struct store_val){line, strlen(line)};
		pairs[n].value = (struct store_val){colon + 2, strlen(colon + 2)};
		n++;
	}
	struct store_entry e;
	assert_int_equal(store_entry_from_pairs(&f->arena, dn, pairs, n, &e, NULL), 0);
	return e;
}

static int add(struct fx *f, const char *text)
{
	struct store_txn *t;
	struct idc_diag d = {""};
	int rc = store_txn_begin(f->s, NULL, 0, &t, &d);
	assert_int_equal(rc, 0);
	struct store_entry e = mk(f, text);
	rc = store_add(t, &e, NULL, &d);
	if (rc == 0)
		rc = store_txn_commit(t, &d);
	else
		store_txn_abort(t);
	return rc;
}

static void add_tree(struct fx *f)
{
	assert_int_equal(add(f, "dc=example,dc=com\nobjectClass: domain\ndc: example"), 0);
	assert_int_equal(add(f, "ou=people,dc=example,dc=com\nobjectClass: organizationalUnit\n"
				"ou: people"),
			 0);
	assert_int_equal(add(f, "ou=groups,dc=example,dc=com\nobjectClass: organizationalUnit\n"
				"ou: groups"),
			 0);
	static const char *users[] = {"alice", "bob", "carol", "dave", "eve"};
	for (int i = 0; i < 5; i++) {
		char buf[512];
		snprintf(buf, sizeof(buf),
			 "uid=%s,ou=people,dc=example,dc=com\nobjectClass: posixAccount\n"
			 "objectClass: person\nuid: %s\ncn: %c%s Smith\nsn: Smith\nuidNumber: %d\n"
			 "gidNumber: 100\nhomeDirectory: /home/%s",
			 users[i], users[i], users[i][0] - 32, users[i] + 1, 1000 + i * 10 - 20,
			 users[i]);
		assert_int_equal(add(f, buf), 0);
	}
	assert_int_equal(add(f, "cn=staff,ou=groups,dc=example,dc=com\nobjectClass: groupOfNames\n"
				"cn: staff\ngidNumber: 100\n"
				"member: uid=alice,ou=people,dc=example,dc=com\n"
				"member: UID=Bob, ou=People,dc=example,dc=com"),
			 0);
}

/* store_check finds no fault. */
static void assert_checks(struct fx *f)
{
	struct store_txn *t;
	assert_int_equal(store_txn_begin(f->s, NULL, STORE_TXN_RDONLY, &t, NULL), 0);
	assert_int_equal(store_check(t, NULL, NULL), 0);
	store_txn_abort(t);
}

/* ---- search helpers ------------------------------------------------------------------ */

struct collect {
	char dns[64][128];
	size_t n;
};

static int collect_cb(const struct store_entry *e, void *arg)
{
	struct collect *c = arg;
	if (c->n < 64)
		snprintf(c->dns[c->n], 128, "%.*s", (int)e->dn.len, e->dn.ptr);
	c->n++;
	return 0;
}

static int search(struct fx *f, const char *base, enum store_scope scope, const char *filter,
		  size_t limit, struct collect *c, char *plan)
{
	struct store_txn *t;
	struct store_filter *flt = NULL;
	struct idc_diag d = {""};
	memset(c, 0, sizeof(*c));
	assert_int_equal(store_txn_begin(f->s, NULL, STORE_TXN_RDONLY, &t, NULL), 0);
	if (filter)
		assert_int_equal(store_filter_parse(filter, strlen(filter), &flt, &d), 0);
	struct store_search q = {{base, strlen(base)}, scope, flt, limit};
	int rc = store_search(t, &q, collect_cb, c, &d);
	if (plan) {
		struct idc_buf b = IDC_BUF_INIT;
		store_search_plan(t, &q, &b);
		snprintf(plan, 256, "%s", b.data ? b.data : "");
		idc_buf_free(&b);
	}
	store_filter_free(flt);
	store_txn_abort(t);
	return rc;
}

static size_t count(struct fx *f, const char *filter)
{
	struct collect c;
	assert_int_equal(search(f, "dc=example,dc=com", STORE_SCOPE_SUB, filter, 0, &c, NULL), 0);
	return c.n;
}

/* ---- open ------------------------------------------------------------------------------- */

static void test_open_errors(void **state)
{
	(void)state;
	struct store *s;
	struct idc_diag d = {""};
	assert_int_equal(store_open("/nonexistent/idc", NULL, &s, &d), -ENOENT);
	assert_non_null(strstr(d.msg, "/nonexistent/idc"));
	char dir[] = "/tmp/idc-empty-XXXXXX";
	assert_non_null(mkdtemp(dir));
	assert_int_equal(store_open(dir, NULL, &s, &d), IDC_ENOTSTORE);
	struct store_options ro = {STORE_RDONLY};
	assert_int_equal(store_open(dir, &ro, &s, &d), IDC_ENOTSTORE);
	/* Something that is not LMDB at all. */
	char p[128];
	snprintf(p, sizeof(p), "%s/data.mdb", dir);
	FILE *fp = fopen(p, "w");
	assert_non_null(fp);
	fputs("this is not a database, just text that is long enough to be read\n", fp);
	fclose(fp);
	assert_int_equal(store_open(dir, NULL, &s, &d), IDC_ENOTSTORE);
	rm_store(dir);
	/* Bad index name at creation. */
	char dir2[] = "/tmp/idc-bad-XXXXXX";
	assert_non_null(mkdtemp(dir2));
	const char *bad[] = {"uid", "not valid!"};
	struct store_options o = {STORE_CREATE, 0, bad, 2, 0};
	assert_int_equal(store_open(dir2, &o, &s, &d), IDC_ESYNTAX);
	rm_store(dir2);
}

/* A store of format 2 (ids one per dup, MDB_DUPFIXED | MDB_INTEGERDUP)
 * written with LMDB directly: refused with a message that says what to do,
 * read-only or not, and left as it was. */
static void test_old_format_refused(void **state)
{
	(void)state;
	char dir[] = "/tmp/idc-old-XXXXXX";
	assert_non_null(mkdtemp(dir));
	MDB_env *env;
	MDB_txn *txn;
	MDB_dbi meta, pres, eq, dbi;
	assert_int_equal(mdb_env_create(&env), 0);
	assert_int_equal(mdb_env_set_maxdbs(env, 8), 0);
	assert_int_equal(mdb_env_open(env, dir, 0, 0600), 0);
	assert_int_equal(mdb_txn_begin(env, NULL, 0, &txn), 0);
	unsigned old = MDB_CREATE | MDB_DUPSORT | MDB_DUPFIXED | MDB_INTEGERDUP;
	assert_int_equal(mdb_dbi_open(txn, "id2entry", MDB_CREATE | MDB_INTEGERKEY, &dbi), 0);
	assert_int_equal(mdb_dbi_open(txn, "dn2id", MDB_CREATE, &dbi), 0);
	assert_int_equal(mdb_dbi_open(txn, "meta", MDB_CREATE, &meta), 0);
	assert_int_equal(mdb_dbi_open(txn, "pres", old, &pres), 0);
	assert_int_equal(mdb_dbi_open(txn, "eq.uid", old, &eq), 0);
	uint64_t fmt = 2, next = 2;
	size_t id = 1;
	MDB_val k = {6, "format"}, v = {sizeof(fmt), &fmt};
	assert_int_equal(mdb_put(txn, meta, &k, &v, 0), 0);
	k = (MDB_val){7, "next_id"}, v = (MDB_val){sizeof(next), &next};
	assert_int_equal(mdb_put(txn, meta, &k, &v, 0), 0);
	k = (MDB_val){7, "indexes"}, v = (MDB_val){3, "uid"};
	assert_int_equal(mdb_put(txn, meta, &k, &v, 0), 0);
	k = (MDB_val){5, "alice"}, v = (MDB_val){sizeof(id), &id};
	assert_int_equal(mdb_put(txn, eq, &k, &v, 0), 0);
	assert_int_equal(mdb_txn_commit(txn), 0);
	mdb_env_close(env);
	struct store *s;
	struct idc_diag d = {""};
	struct store_options rw = {0}, ro = {STORE_RDONLY};
	assert_int_equal(store_open(dir, &rw, &s, &d), IDC_EVERSION);
	assert_non_null(strstr(d.msg, "store format 2"));
	assert_non_null(strstr(d.msg, "export"));
	d.msg[0] = '\0';
	assert_int_equal(store_open(dir, &ro, &s, &d), IDC_EVERSION);
	assert_non_null(strstr(d.msg, "store format 2"));
	rm_store(dir);
}

static void test_reopen_keeps_data(void **state)
{
	struct fx *f = *state;
	add_tree(f);
	store_close(f->s);
	struct store_options ro = {STORE_RDONLY};
	assert_int_equal(store_open(f->dir, &ro, &f->s, NULL), 0);
	assert_int_equal(count(f, "(uid=alice)"), 1);
	const char *const *names;
	assert_int_equal(store_index_list(f->s, &names), IDC_ARRAY_SIZE(default_indexes));
	assert_string_equal(names[0], "objectclass");
	struct store_txn *t;
	assert_int_equal(store_txn_begin(f->s, NULL, 0, &t, NULL), -EROFS);
}

/* ---- add -------------------------------------------------------------------------------- */

static void test_add_errors(void **state)
{
	struct fx *f = *state;
	add_tree(f);
	assert_int_equal(add(f, "uid=alice,ou=people,dc=example,dc=com\nuid: alice"), -EEXIST);
	assert_int_equal(add(f, "UID=ALICE , ou=people,dc=example,dc=com\nuid: alice"), -EEXIST);
	assert_int_equal(add(f, "uid=x,ou=nope,dc=example,dc=com\nuid: x"), IDC_ENOPARENT);
	/* No ancestor at all: a new naming context is fine. */
	assert_int_equal(add(f, "uid=x,ou=other,dc=org\nuid: x"), 0);
	assert_int_equal(add(f, "uid=y,ou=people,dc=example,dc=com\nuid: z"), IDC_ENAMING);
	assert_int_equal(add(f, "uid=y,ou=people,dc=example,dc=com\nuid: y\nuidNumber: 12a"),
			 IDC_ESYNTAX);
	assert_int_equal(add(f, "uid=y,ou=people,dc=example,dc=com\nuid: y\nuid: Y"),
			 IDC_EVALEXISTS);
	assert_int_equal(add(f, "uid=y,,dc=example\nuid: y"), IDC_ESYNTAX);
	assert_int_equal(count(f, "(uid=y)"), 0);
}

static void test_add_too_big(void **state)
{
	struct fx *f = *state;
	add_tree(f);
	struct store_txn *t;
	assert_int_equal(store_txn_begin(f->s, NULL, 0, &t, NULL), 0);
	size_t len = STORE_ENTRY_MAX + 10;
	char *big = malloc(len);
	memset(big, 'x', len);
	struct store_val v = {big, len};
	struct store_attr a[2] = {{{"description", 11}, {"description", 11}, &v, 1},
				  {{"uid", 3}, {"uid", 3}, &(struct store_val){"big", 3}, 1}};
	struct store_entry e = {0, {"uid=big,ou=people,dc=example,dc=com", 35}, a, 2};
	struct idc_diag d;
	assert_int_equal(store_add(t, &e, NULL, &d), -E2BIG);
	store_txn_abort(t);
	free(big);
}

static void test_get(void **state)
{
	struct fx *f = *state;
	add_tree(f);
	struct store_txn *t;
	assert_int_equal(store_txn_begin(f->s, NULL, STORE_TXN_RDONLY, &t, NULL), 0);
	struct store_entry e;
	const char *dn = "UID=carol,OU=people,dc=EXAMPLE,dc=com";
	assert_int_equal(store_get(t, (struct store_val){dn, strlen(dn)}, &e, NULL), 0);
	assert_memory_equal(e.dn.ptr, "uid=carol,", 10);
	const struct store_attr *a = store_entry_attr(&e, "uidnumber", 9);
	assert_non_null(a);
	assert_int_equal(a->nvals, 1);
	assert_memory_equal(a->vals[0].ptr, "1000", 4);
	assert_int_equal(store_get_id(t, e.id, &e), 0);
	assert_int_equal(store_get(t, (struct store_val){"uid=zz,dc=x", 11}, &e, NULL), -ENOENT);
	store_txn_abort(t);
}

/* ---- search ------------------------------------------------------------------------------- */

static void test_search_scopes(void **state)
{
	struct fx *f = *state;
	add_tree(f);
	struct collect c;
	assert_int_equal(search(f, "dc=example,dc=com", STORE_SCOPE_BASE, NULL, 0, &c, NULL), 0);
	assert_int_equal(c.n, 1);
	assert_int_equal(search(f, "dc=example,dc=com", STORE_SCOPE_ONE, NULL, 0, &c, NULL), 0);
	assert_int_equal(c.n, 2);
	assert_int_equal(
	    search(f, "ou=people,dc=example,dc=com", STORE_SCOPE_ONE, NULL, 0, &c, NULL), 0);
	assert_int_equal(c.n, 5);
	assert_int_equal(search(f, "dc=example,dc=com", STORE_SCOPE_SUB, NULL, 0, &c, NULL), 0);
	assert_int_equal(c.n, 9);
	assert_string_equal(c.dns[0], "dc=example,dc=com"); /* parents first */
	assert_int_equal(search(f, "", STORE_SCOPE_SUB, NULL, 0, &c, NULL), 0);
	assert_int_equal(c.n, 9);
	assert_int_equal(
	    search(f, "ou=people,dc=example,dc=com", STORE_SCOPE_SUB, "(uid=alice)", 0, &c, NULL),
	    0);
	assert_int_equal(c.n, 1);
	assert_int_equal(
	    search(f, "ou=groups,dc=example,dc=com", STORE_SCOPE_SUB, "(uid=alice)", 0, &c, NULL),
	    0);
	assert_int_equal(c.n, 0);
	assert_int_equal(search(f, "ou=none,dc=example,dc=com", STORE_SCOPE_SUB, NULL, 0, &c, NULL),
			 -ENOENT);
	assert_int_equal(
	    search(f, "dc=example,dc=com", STORE_SCOPE_SUB, "(objectClass=person)", 3, &c, NULL),
	    IDC_ESIZELIMIT);
	assert_int_equal(c.n, 3);
	assert_int_equal(
	    search(f, "dc=example,dc=com", STORE_SCOPE_SUB, "(objectClass=person)", 5, &c, NULL),
	    0);
}

static void test_search_filters(void **state)
{
	struct fx *f = *state;
	add_tree(f);
	assert_int_equal(count(f, "(uid=ALICE)"), 1);
	assert_int_equal(count(f, "(uidNumber>=1000)"), 3);
	assert_int_equal(count(f, "(uidNumber<=990)"), 2);
	assert_int_equal(count(f, "(uidNumber<=-5)"), 0);
	assert_int_equal(count(f, "(cn=a*)"), 1);
	assert_int_equal(count(f, "(cn=*smith)"), 5);
	assert_int_equal(count(f, "(sn=smith)"), 5); /* not indexed: scan */
	assert_int_equal(count(f, "(&(objectClass=person)(uid=bob))"), 1);
	assert_int_equal(count(f, "(|(uid=bob)(uid=carol)(uid=nobody))"), 2);
	assert_int_equal(count(f, "(|(uid=bob)(sn=smith))"), 5);
	assert_int_equal(count(f, "(!(objectClass=person))"), 4);
	assert_int_equal(count(f, "(member=uid=bob,ou=people,dc=example,dc=com)"), 1);
	assert_int_equal(count(f, "(uid:dn:=alice)"), 1);
	assert_int_equal(count(f, "(ou:dn:=people)"), 6);
	assert_int_equal(count(f, "(uid:caseExactMatch:=Alice)"), 0);
	assert_int_equal(count(f, "(uid:caseExactMatch:=alice)"), 1);
	assert_int_equal(count(f, "(uid=*)"), 5);
	assert_int_equal(count(f, "(uidNumber=abc)"), 0);
	assert_int_equal(count(f, "(&)"), 9);
	assert_int_equal(count(f, "(|)"), 0);
}

static void test_search_plan(void **state)
{
	struct fx *f = *state;
	add_tree(f);
	struct collect c;
	char plan[256];
	search(f, "dc=example,dc=com", STORE_SCOPE_SUB, "(uid=alice)", 0, &c, plan);
	assert_non_null(strstr(plan, "eq uid"));
	assert_non_null(strstr(plan, "1 candidates"));
	search(f, "dc=example,dc=com", STORE_SCOPE_SUB, "(sn=smith)", 0, &c, plan);
	assert_non_null(strstr(plan, "scan"));
	search(f, "dc=example,dc=com", STORE_SCOPE_SUB, "(&(objectClass=person)(uid=bob))", 0, &c,
	       plan);
	assert_non_null(strstr(plan, "and("));
	assert_non_null(strstr(plan, "1 candidates"));
	search(f, "dc=example,dc=com", STORE_SCOPE_SUB, "(cn=ca*)", 0, &c, plan);
	assert_non_null(strstr(plan, "prefix cn"));
	search(f, "dc=example,dc=com", STORE_SCOPE_SUB, "(uidNumber>=1000)", 0, &c, plan);
	assert_non_null(strstr(plan, "range>= uidnumber"));
	assert_non_null(strstr(plan, "3 candidates"));
}

/* A far larger branch of an AND is probed in its index for each of a few
 * candidates: a group by its gid, which users hold too, is found without
 * the users being read (the plan says so), in any block of the index's
 * ids (the group in the middle of a thousand). */
static void test_search_probe(void **state)
{
	struct fx *f = *state;
	add_tree(f);
	char buf[512];
	for (int i = 0; i < 1000; i++) {
		if (i == 500)
			assert_int_equal(
			    add(f, "uid=mid,ou=people,dc=example,dc=com\n"
				   "objectClass: posixAccount\nuid: mid\ngidNumber: 2250"),
			    0);
		snprintf(buf, sizeof(buf),
			 "cn=g%d,ou=groups,dc=example,dc=com\nobjectClass: groupOfNames\n"
			 "cn: g%d\ngidNumber: %d",
			 i, i, 2000 + i);
		assert_int_equal(add(f, buf), 0);
	}
	struct collect c;
	char plan[256];
	const char *base = "dc=example,dc=com";
	assert_int_equal(search(f, base, STORE_SCOPE_SUB,
				"(&(objectClass=groupOfNames)(gidNumber=2250))", 0, &c, plan),
			 0);
	print_message("plan: %s\n", plan);
	assert_non_null(strstr(plan, "probe objectclass"));
	assert_non_null(strstr(plan, "-> 1 candidates"));
	assert_int_equal(c.n, 1);
	assert_string_equal(c.dns[0], "cn=g250,ou=groups,dc=example,dc=com");
	/* the five users and staff hold 100: staff is the one group */
	assert_int_equal(search(f, base, STORE_SCOPE_SUB,
				"(&(gidNumber=100)(objectClass=groupOfNames))", 0, &c, plan),
			 0);
	assert_non_null(strstr(plan, "-> 1 candidates"));
	assert_int_equal(c.n, 1);
	assert_string_equal(c.dns[0], "cn=staff,ou=groups,dc=example,dc=com");
	/* presence is probed too; nothing dropped that matches */
	assert_int_equal(search(f, base, STORE_SCOPE_SUB, "(&(gidNumber=2250)(cn=*))", 0, &c, plan),
			 0);
	assert_int_equal(c.n, 1);
	assert_int_equal(search(f, base, STORE_SCOPE_SUB,
				"(&(gidNumber=2250)(objectClass=posixAccount)(objectClass=*))", 0,
				&c, plan),
			 0);
	assert_int_equal(c.n, 1);
	assert_string_equal(c.dns[0], "uid=mid,ou=people,dc=example,dc=com");
	/* a group no candidate is: none left */
	assert_int_equal(search(f, base, STORE_SCOPE_SUB,
				"(&(objectClass=groupOfNames)(gidNumber=4000))", 0, &c, plan),
			 0);
	assert_int_equal(c.n, 0);
}

struct stop_ctx {
	int seen;
};

static int stop_cb(const struct store_entry *e, void *arg)
{
	(void)e;
	struct stop_ctx *s = arg;
	return ++s->seen == 2 ? 42 : 0;
}

static void test_search_callback_stops(void **state)
{
	struct fx *f = *state;
	add_tree(f);
	struct store_txn *t;
	assert_int_equal(store_txn_begin(f->s, NULL, STORE_TXN_RDONLY, &t, NULL), 0);
	struct store_search q = {{"", 0}, STORE_SCOPE_SUB, NULL, 0};
	struct stop_ctx sc = {0};
	assert_int_equal(store_search(t, &q, stop_cb, &sc, NULL), 42);
	assert_int_equal(sc.seen, 2);
	store_txn_abort(t);
}

/* A search from inside another's callback, on the same transaction, with
 * another base: both see their own results. */
struct nest_ctx {
	struct store_txn *t;
	size_t outer, inner;
};

static int nest_inner_cb(const struct store_entry *e, void *arg)
{
	(void)e;
	((struct nest_ctx *)arg)->inner++;
	return 0;
}

static int nest_outer_cb(const struct store_entry *e, void *arg)
{
	struct nest_ctx *n = arg;
	n->outer++;
	struct store_search q = {{"ou=groups,dc=example,dc=com", 27}, STORE_SCOPE_SUB, NULL, 0};
	(void)e;
	return store_search(n->t, &q, nest_inner_cb, n, NULL);
}

static void search_uid(struct store_txn *t, const char *base, const char *filter, int want_rc,
		       size_t want)
{
	struct store_filter *flt;
	assert_int_equal(store_filter_parse(filter, strlen(filter), &flt, NULL), 0);
	struct store_search q = {{base, strlen(base)}, STORE_SCOPE_SUB, flt, 0};
	struct collect c = {0};
	assert_int_equal(store_search(t, &q, collect_cb, &c, NULL), want_rc);
	assert_int_equal(c.n, want);
	store_filter_free(flt);
}

static void test_search_reuse(void **state)
{
	struct fx *f = *state;
	add_tree(f);
	struct store_txn *t;
	assert_int_equal(store_txn_begin(f->s, NULL, STORE_TXN_RDONLY, &t, NULL), 0);
	struct nest_ctx n = {t, 0, 0};
	struct store_filter *flt;
	assert_int_equal(store_filter_parse("(objectClass=posixAccount)", 26, &flt, NULL), 0);
	struct store_search q = {{"ou=people,dc=example,dc=com", 27}, STORE_SCOPE_SUB, flt, 0};
	assert_int_equal(store_search(t, &q, nest_outer_cb, &n, NULL), 0);
	store_filter_free(flt);
	assert_int_equal(n.outer, 5);
	assert_int_equal(n.inner, 5 * 2);
	/* bases alternating, spelled differently, missing, in one read txn */
	for (int i = 0; i < 3; i++) {
		search_uid(t, "ou=people,dc=example,dc=com", "(uid=bob)", 0, 1);
		search_uid(t, "OU=People, DC=example,dc=com", "(uid=carol)", 0, 1);
		search_uid(t, "ou=groups,dc=example,dc=com", "(uid=bob)", 0, 0);
		search_uid(t, "ou=nobody,dc=example,dc=com", "(uid=bob)", -ENOENT, 0);
	}
	store_txn_abort(t);
	/* a write txn sees its own deletes of the base */
	assert_int_equal(store_txn_begin(f->s, NULL, 0, &t, NULL), 0);
	search_uid(t, "uid=eve,ou=people,dc=example,dc=com", "(uid=eve)", 0, 1);
	struct store_val dn = {"uid=eve,ou=people,dc=example,dc=com", 35};
	assert_int_equal(store_delete(t, dn, false, NULL), 0);
	search_uid(t, "uid=eve,ou=people,dc=example,dc=com", "(uid=eve)", -ENOENT, 0);
	store_txn_abort(t);
}

static uint64_t first_id;

static int id_cb(const struct store_entry *e, void *arg)
{
	(void)arg;
	first_id = e->id;
	return 0;
}

/* The id of the entry at dn in a new read transaction, 0 when none. */
static uint64_t read_id(struct fx *f, const char *dn, struct store_txn **kept)
{
	struct store_txn *t;
	assert_int_equal(store_txn_begin(f->s, NULL, STORE_TXN_RDONLY, &t, NULL), 0);
	struct store_search q = {{dn, strlen(dn)}, STORE_SCOPE_BASE, NULL, 0};
	first_id = 0;
	int rc = store_search(t, &q, id_cb, NULL, NULL);
	assert_true(rc == 0 || rc == -ENOENT);
	*kept = t;
	store_txn_abort(t);
	return first_id;
}

/* An ended read transaction is renewed by the next: it must see what was
 * committed since, and not the base its last search kept. */
static void test_read_txn_renewed(void **state)
{
	struct fx *f = *state;
	add_tree(f);
	const char *eve = "uid=eve,ou=people,dc=example,dc=com";
	struct store_txn *a, *b, *t;
	uint64_t old = read_id(f, eve, &a);
	assert_true(old != 0);
	assert_int_equal(store_txn_begin(f->s, NULL, 0, &t, NULL), 0);
	assert_int_equal(store_delete(t, (struct store_val){eve, strlen(eve)}, false, NULL), 0);
	assert_int_equal(store_txn_commit(t, NULL), 0);
	assert_int_equal(read_id(f, eve, &b), 0);
	assert_int_equal(add(f, "uid=eve,ou=people,dc=example,dc=com\nobjectClass: person\n"
				"uid: eve\ncn: Eve\nsn: Smith"),
			 0);
	uint64_t now = read_id(f, eve, &b);
	assert_true(now != 0 && now != old);
	assert_ptr_equal(a, b); /* the same transaction, renewed */
	/* two readers at once: one renewed, one new; both end cleanly */
	assert_int_equal(store_txn_begin(f->s, NULL, STORE_TXN_RDONLY, &a, NULL), 0);
	assert_int_equal(store_txn_begin(f->s, NULL, STORE_TXN_RDONLY, &b, NULL), 0);
	assert_true(a != b);
	search_uid(a, "ou=people,dc=example,dc=com", "(uid=eve)", 0, 1);
	search_uid(b, "ou=people,dc=example,dc=com", "(uid=bob)", 0, 1);
	store_txn_abort(a);
	store_txn_abort(b);
	assert_int_equal(store_grow(f->s), 0); /* drops the spare */
	assert_int_equal(count(f, "(uid=eve)"), 1);
}

/* The base a search kept outlives its read transaction: renewed on the same
 * snapshot the next finds it without looking; after a commit it looks
 * again, and a reader still on the old snapshot keeps seeing the old tree. */
static void test_search_base_kept(void **state)
{
	struct fx *f = *state;
	add_tree(f);
	const char *people = "ou=people,dc=example,dc=com";
	struct store_val dn = {"uid=eve,ou=people,dc=example,dc=com", 35};
	struct store_txn *r, *old, *w;
	for (int i = 0; i < 3; i++) { /* renewed, nothing written since */
		assert_int_equal(store_txn_begin(f->s, NULL, STORE_TXN_RDONLY, &r, NULL), 0);
		search_uid(r, people, "(uid=eve)", 0, 1);
		search_uid(r, dn.ptr, "(uid=eve)", 0, 1);
		store_txn_abort(r);
	}
	/* a write that deletes the base and is aborted changes nothing */
	assert_int_equal(store_txn_begin(f->s, NULL, 0, &w, NULL), 0);
	assert_int_equal(store_delete(w, dn, false, NULL), 0);
	store_txn_abort(w);
	assert_int_equal(store_txn_begin(f->s, NULL, STORE_TXN_RDONLY, &r, NULL), 0);
	search_uid(r, dn.ptr, "(uid=eve)", 0, 1);
	store_txn_abort(r);
	/* committed: the renewed reader looks again; one still open does not see it */
	assert_int_equal(store_txn_begin(f->s, NULL, STORE_TXN_RDONLY, &old, NULL), 0);
	search_uid(old, dn.ptr, "(uid=eve)", 0, 1);
	assert_int_equal(store_txn_begin(f->s, NULL, 0, &w, NULL), 0);
	assert_int_equal(store_delete(w, dn, false, NULL), 0);
	assert_int_equal(store_txn_commit(w, NULL), 0);
	search_uid(old, dn.ptr, "(uid=eve)", 0, 1);
	store_txn_abort(old);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(store_txn_begin(f->s, NULL, STORE_TXN_RDONLY, &r, NULL), 0);
		search_uid(r, dn.ptr, "(uid=eve)", -ENOENT, 0);
		search_uid(r, people, "(uid=eve)", 0, 0);
		store_txn_abort(r);
	}
	/* added again under a new id: found again, by the new id */
	assert_int_equal(add(f, "uid=eve,ou=people,dc=example,dc=com\nobjectClass: person\n"
				"uid: eve\ncn: Eve\nsn: Smith"),
			 0);
	assert_int_equal(store_txn_begin(f->s, NULL, STORE_TXN_RDONLY, &r, NULL), 0);
	search_uid(r, dn.ptr, "(uid=eve)", 0, 1);
	store_txn_abort(r);
}

static int add_in(struct fx *f, struct store_txn *t, const char *text)
{
	struct store_entry e = mk(f, text);
	return store_add(t, &e, NULL, NULL);
}

/* store_add remembers the parent it found last: deletes, in the txn or a
 * committed child, must make it look again; a refused duplicate writes
 * nothing. */
static void test_add_parent_memo(void **state)
{
	struct fx *f = *state;
	add_tree(f);
	struct store_txn *t, *c;
	assert_int_equal(store_txn_begin(f->s, NULL, 0, &t, NULL), 0);
	assert_int_equal(add_in(f, t, "ou=x,dc=example,dc=com\nou: x"), 0);
	assert_int_equal(add_in(f, t, "cn=a,ou=x,dc=example,dc=com\ncn: a"), 0);
	assert_int_equal(
	    store_delete(t, (struct store_val){"ou=x,dc=example,dc=com", 22}, true, NULL), 0);
	assert_int_equal(add_in(f, t, "cn=b,ou=x,dc=example,dc=com\ncn: b"), IDC_ENOPARENT);
	assert_int_equal(add_in(f, t, "ou=y,dc=example,dc=com\nou: y"), 0);
	assert_int_equal(add_in(f, t, "cn=a,ou=y,dc=example,dc=com\ncn: a"), 0);
	assert_int_equal(store_txn_begin(f->s, t, 0, &c, NULL), 0);
	assert_int_equal(
	    store_delete(c, (struct store_val){"ou=y,dc=example,dc=com", 22}, true, NULL), 0);
	assert_int_equal(store_txn_commit(c, NULL), 0);
	assert_int_equal(add_in(f, t, "cn=b,ou=y,dc=example,dc=com\ncn: b"), IDC_ENOPARENT);
	assert_int_equal(add_in(f, t, "uid=bob,ou=people,dc=example,dc=com\nuid: bob"), -EEXIST);
	assert_int_equal(store_check(t, NULL, NULL), 0);
	assert_int_equal(store_txn_commit(t, NULL), 0);
	assert_int_equal(count(f, "(objectClass=*)"), 9);
}

/* Keys with many ids, flushed into indexes that already hold some. */
static void test_bulk_runs_into_full_index(void **state)
{
	struct fx *f = *state;
	add_tree(f);
	for (int round = 0; round < 3; round++) {
		struct store_txn *t;
		assert_int_equal(store_txn_begin(f->s, NULL, 0, &t, NULL), 0);
		for (int i = 0; i < 300; i++) {
			char e[256];
			snprintf(e, sizeof(e),
				 "uid=r%dn%d,ou=people,dc=example,dc=com\nobjectClass: account\n"
				 "uid: r%dn%d\ngidNumber: %d",
				 round, i, round, i, 500 + i % 3);
			assert_int_equal(add_in(f, t, e), 0);
		}
		assert_int_equal(store_txn_commit(t, NULL), 0);
	}
	assert_int_equal(count(f, "(objectClass=account)"), 900);
	assert_int_equal(count(f, "(gidNumber=501)"), 300);
	assert_checks(f);
}

/* Two threads flushing adds into two stores at once: each flush sorts
 * its own keys. Keys arrive out of order so the sort runs. */
struct flush_job {
	struct fx f;
	pthread_barrier_t *go;
	unsigned seed;
	int rc;
	long faults;
};

static void *flush_main(void *arg)
{
	struct flush_job *j = arg;
	struct store_txn *t;
	j->rc = store_txn_begin(j->f.s, NULL, 0, &t, NULL);
	for (int i = 0; i < 4000 && j->rc == 0; i++) {
		char e[256];
		unsigned k = (unsigned)(i * 2654435761u + j->seed) % 1000003u;
		snprintf(e, sizeof(e), "cn=n%u,dc=example,dc=com\ncn: n%u\nuid: u%u", k, k, k);
		struct store_entry en = mk(&j->f, e);
		j->rc = store_add(t, &en, NULL, NULL);
	}
	pthread_barrier_wait(j->go);
	if (j->rc == 0)
		j->rc = store_txn_commit(t, NULL);
	else
		store_txn_abort(t);
	if (j->rc == 0 && store_txn_begin(j->f.s, NULL, STORE_TXN_RDONLY, &t, NULL) == 0) {
		j->faults = store_check(t, NULL, NULL);
		store_txn_abort(t);
	}
	return NULL;
}

static void test_bulk_flush_threads(void **state)
{
	(void)state;
	for (unsigned round = 0; round < 8; round++) {
		struct flush_job j[2] = {{.seed = round * 7 + 1}, {.seed = round * 7 + 3}};
		pthread_barrier_t go;
		pthread_t tid[2];
		pthread_barrier_init(&go, NULL, 2);
		for (int i = 0; i < 2; i++) {
			assert_int_equal(open_fx(&j[i].f, 0), 0);
			assert_int_equal(add(&j[i].f, "dc=example,dc=com\ndc: example"), 0);
			j[i].go = &go;
			assert_int_equal(pthread_create(&tid[i], NULL, flush_main, &j[i]), 0);
		}
		for (int i = 0; i < 2; i++) {
			pthread_join(tid[i], NULL);
			assert_int_equal(j[i].rc, 0);
			assert_int_equal(j[i].faults, 0);
			store_close(j[i].f.s);
			idc_arena_free(&j[i].f.arena);
			rm_store(j[i].f.dir);
		}
		pthread_barrier_destroy(&go);
	}
}

/* ---- modify / replace ----------------------------------------------------------------------- */

static int modify(struct fx *f, const char *dn, struct store_mod *m, size_t n, bool *changed)
{
	struct store_txn *t;
	struct idc_diag d = {""};
	assert_int_equal(store_txn_begin(f->s, NULL, 0, &t, NULL), 0);
	int rc = store_modify(t, (struct store_val){dn, strlen(dn)}, m, n, changed, &d);
	if (rc == 0)
		rc = store_txn_commit(t, &d);
	else
		store_txn_abort(t);
	return rc;
}

#define V(s) ((struct store_val){s, sizeof(s) - 1})

static void test_modify(void **state)
{
	struct fx *f = *state;
	add_tree(f);
	const char *dn = "uid=alice,ou=people,dc=example,dc=com";
	struct store_val v1[] = {V("Alice Two")}, v2[] = {V("2000")}, v3[] = {V("alice smith")};
	struct store_mod m[] = {{STORE_MOD_ADD, V("cn"), v1, 1},
				{STORE_MOD_REPLACE, V("uidNumber"), v2, 1},
				{STORE_MOD_DELETE, V("cn"), v3, 1}};
	bool changed = false;
	assert_int_equal(modify(f, dn, m, 3, &changed), 0);
	assert_true(changed);
	assert_int_equal(count(f, "(uidNumber=2000)"), 1);
	assert_int_equal(count(f, "(uidNumber=980)"), 0);
	assert_int_equal(count(f, "(cn=alice two)"), 1);
	assert_int_equal(count(f, "(cn=alice smith)"), 0);
	/* Errors leave the entry as it was. */
	struct store_mod dup[] = {{STORE_MOD_ADD, V("cn"), v1, 1}};
	assert_int_equal(modify(f, dn, dup, 1, NULL), IDC_EVALEXISTS);
	struct store_mod gone[] = {{STORE_MOD_DELETE, V("cn"), v3, 1}};
	assert_int_equal(modify(f, dn, gone, 1, NULL), IDC_ENOATTR);
	struct store_mod noattr[] = {{STORE_MOD_DELETE, V("mail"), NULL, 0}};
	assert_int_equal(modify(f, dn, noattr, 1, NULL), IDC_ENOATTR);
	struct store_mod naming[] = {{STORE_MOD_DELETE, V("uid"), NULL, 0}};
	assert_int_equal(modify(f, dn, naming, 1, NULL), IDC_ENAMING);
	struct store_val bad[] = {V("x1")};
	struct store_mod syntax[] = {{STORE_MOD_ADD, V("cn"), v3, 1},
				     {STORE_MOD_REPLACE, V("gidNumber"), bad, 1}};
	assert_int_equal(modify(f, dn, syntax, 2, NULL), IDC_ESYNTAX);
	assert_int_equal(count(f, "(cn=alice smith)"), 0);
	assert_int_equal(modify(f, "uid=nobody,dc=example,dc=com", syntax, 1, NULL), -ENOENT);
	/* Replacing with the same values changes nothing. */
	struct store_mod same[] = {{STORE_MOD_REPLACE, V("uidNumber"), v2, 1}};
	assert_int_equal(modify(f, dn, same, 1, &changed), 0);
	assert_false(changed);
	/* Removing the whole attribute, and the presence index follows. */
	struct store_mod rm[] = {{STORE_MOD_REPLACE, V("uidNumber"), NULL, 0}};
	assert_int_equal(modify(f, dn, rm, 1, &changed), 0);
	assert_true(changed);
	assert_int_equal(count(f, "(uidNumber=*)"), 4);
	/* A modify after an add in one transaction checks its own entry's
	 * naming, not the DN the add kept. */
	struct store_txn *t;
	assert_int_equal(store_txn_begin(f->s, NULL, 0, &t, NULL), 0);
	struct store_entry e = mk(f, "uid=zed,ou=people,dc=example,dc=com\n"
				     "objectClass: account\nuid: zed");
	assert_int_equal(store_add(t, &e, NULL, NULL), 0);
	struct store_mod ok[] = {{STORE_MOD_ADD, V("cn"), v3, 1}};
	assert_int_equal(store_modify(t, (struct store_val){dn, strlen(dn)}, ok, 1, NULL, NULL), 0);
	assert_int_equal(store_txn_commit(t, NULL), 0);
	assert_int_equal(count(f, "(cn=alice smith)"), 1);
	assert_int_equal(store_txn_begin(f->s, NULL, STORE_TXN_RDONLY, &t, NULL), 0);
	assert_int_equal(store_check(t, NULL, NULL), 0);
	store_txn_abort(t);
}

static void test_replace_counts_commits(void **state)
{
	struct fx *f = *state;
	add_tree(f);
	struct store_entry e =
	    mk(f, "uid=bob,ou=people,dc=example,dc=com\nobjectClass: posixAccount\n"
		  "objectClass: person\nuid: bob\ncn: Bob Smith\nsn: Smith\nuidNumber: 990\n"
		  "gidNumber: 100\nhomeDirectory: /home/bob");
	struct store_txn *t;
	bool changed = true;
	assert_int_equal(store_txn_begin(f->s, NULL, 0, &t, NULL), 0);
	assert_int_equal(store_replace(t, &e, &changed, NULL), 0);
	assert_false(changed);
	store_txn_abort(t);
	struct store_entry e2 =
	    mk(f, "uid=bob,ou=people,dc=example,dc=com\nobjectClass: posixAccount\n"
		  "objectClass: person\nuid: bob\ncn: Robert Smith\nsn: Smith\nuidNumber: 990\n"
		  "gidNumber: 100\nhomeDirectory: /home/bob");
	uint64_t before = store_commit_count(f->s);
	assert_int_equal(store_txn_begin(f->s, NULL, 0, &t, NULL), 0);
	assert_int_equal(store_replace(t, &e2, &changed, NULL), 0);
	assert_true(changed);
	assert_int_equal(store_txn_commit(t, NULL), 0);
	assert_int_equal(store_commit_count(f->s), before + 1);
	assert_int_equal(count(f, "(cn=robert smith)"), 1);
	assert_int_equal(count(f, "(cn=bob smith)"), 0);
}

/* ---- delete / modrdn --------------------------------------------------------------------------
 */

static int del(struct fx *f, const char *dn, bool subtree)
{
	struct store_txn *t;
	assert_int_equal(store_txn_begin(f->s, NULL, 0, &t, NULL), 0);
	int rc = store_delete(t, (struct store_val){dn, strlen(dn)}, subtree, NULL);
	if (rc == 0)
		rc = store_txn_commit(t, NULL);
	else
		store_txn_abort(t);
	return rc;
}

static void test_delete(void **state)
{
	struct fx *f = *state;
	add_tree(f);
	assert_int_equal(del(f, "uid=alice,ou=people,dc=example,dc=com", false), 0);
	assert_int_equal(count(f, "(uid=alice)"), 0);
	assert_int_equal(del(f, "uid=alice,ou=people,dc=example,dc=com", false), -ENOENT);
	assert_int_equal(del(f, "ou=people,dc=example,dc=com", false), IDC_ENOTLEAF);
	assert_int_equal(count(f, "(objectClass=person)"), 4);
	assert_int_equal(del(f, "ou=people,dc=example,dc=com", true), 0);
	assert_int_equal(count(f, "(objectClass=*)"), 3);
	assert_checks(f);
}

static int modrdn(struct fx *f, const char *dn, const char *rdn, bool delold, const char *sup)
{
	struct store_txn *t;
	struct idc_diag d = {""};
	assert_int_equal(store_txn_begin(f->s, NULL, 0, &t, NULL), 0);
	struct store_val s = {sup, sup ? strlen(sup) : 0};
	int rc = store_modrdn(t, (struct store_val){dn, strlen(dn)},
			      (struct store_val){rdn, strlen(rdn)}, delold, sup ? &s : NULL, &d);
	if (rc == 0)
		rc = store_txn_commit(t, &d);
	else
		store_txn_abort(t);
	return rc;
}

static void test_modrdn(void **state)
{
	struct fx *f = *state;
	add_tree(f);
	assert_int_equal(modrdn(f, "uid=eve,ou=people,dc=example,dc=com", "uid=eva", true, NULL),
			 0);
	assert_int_equal(count(f, "(uid=eve)"), 0);
	assert_int_equal(count(f, "(uid=eva)"), 1);
	struct collect c;
	assert_int_equal(
	    search(f, "uid=eva,ou=people,dc=example,dc=com", STORE_SCOPE_BASE, NULL, 0, &c, NULL),
	    0);
	assert_int_equal(c.n, 1);
	assert_int_equal(
	    modrdn(f, "uid=dave,ou=people,dc=example,dc=com", "uid=david", false, NULL), 0);
	assert_int_equal(count(f, "(uid=dave)"), 1); /* old value kept */
	assert_int_equal(count(f, "(uid=david)"), 1);
	assert_int_equal(modrdn(f, "uid=eva,ou=people,dc=example,dc=com", "uid=eva", true,
				"ou=groups,dc=example,dc=com"),
			 0);
	assert_int_equal(
	    search(f, "ou=groups,dc=example,dc=com", STORE_SCOPE_ONE, "(uid=eva)", 0, &c, NULL), 0);
	assert_int_equal(c.n, 1);
	assert_int_equal(modrdn(f, "ou=people,dc=example,dc=com", "ou=folk", true, NULL),
			 IDC_ENOTLEAF);
	assert_int_equal(modrdn(f, "uid=bob,ou=people,dc=example,dc=com", "uid=carol", true, NULL),
			 -EEXIST);
	assert_int_equal(modrdn(f, "uid=bob,ou=people,dc=example,dc=com", "uid=bobby", true,
				"ou=missing,dc=example,dc=com"),
			 IDC_ENOPARENT);
	assert_checks(f);
}

/* ---- transactions ------------------------------------------------------------------------------
 */

static void test_txn_abort_and_nested(void **state)
{
	struct fx *f = *state;
	add_tree(f);
	struct store_txn *t, *child, *reader;
	assert_int_equal(store_txn_begin(f->s, NULL, STORE_TXN_RDONLY, &reader, NULL), 0);
	assert_int_equal(store_txn_begin(f->s, NULL, 0, &t, NULL), 0);
	struct store_entry e = mk(f, "uid=n1,ou=people,dc=example,dc=com\nuid: n1");
	assert_int_equal(store_add(t, &e, NULL, NULL), 0);
	assert_int_equal(store_txn_begin(f->s, t, 0, &child, NULL), 0);
	struct store_entry e2 = mk(f, "uid=n2,ou=people,dc=example,dc=com\nuid: n2");
	assert_int_equal(store_add(child, &e2, NULL, NULL), 0);
	store_txn_abort(child);
	assert_int_equal(store_txn_begin(f->s, t, 0, &child, NULL), 0);
	struct store_entry e3 = mk(f, "uid=n3,ou=people,dc=example,dc=com\nuid: n3");
	uint64_t id3;
	assert_int_equal(store_add(child, &e3, &id3, NULL), 0);
	assert_int_equal(store_txn_commit(child, NULL), 0);
	/* Ids handed out in the child stay used after its commit. */
	struct store_entry e4 = mk(f, "uid=n4,ou=people,dc=example,dc=com\nuid: n4");
	uint64_t id4;
	assert_int_equal(store_add(t, &e4, &id4, NULL), 0);
	assert_true(id4 > id3);
	assert_int_equal(store_txn_commit(t, NULL), 0);
	assert_int_equal(count(f, "(uid=n1)"), 1);
	assert_int_equal(count(f, "(uid=n2)"), 0);
	assert_int_equal(count(f, "(uid=n3)"), 1);
	/* The reader still sees its snapshot. */
	struct store_entry got;
	assert_int_equal(store_get(reader,
				   (struct store_val){"uid=n1,ou=people,dc=example,dc=com", 34},
				   &got, NULL),
			 -ENOENT);
	store_txn_abort(reader);
	/* Aborted write: nothing. */
	assert_int_equal(store_txn_begin(f->s, NULL, 0, &t, NULL), 0);
	struct store_entry e5 = mk(f, "uid=n5,ou=people,dc=example,dc=com\nuid: n5");
	assert_int_equal(store_add(t, &e5, NULL, NULL), 0);
	store_txn_abort(t);
	assert_int_equal(count(f, "(uid=n5)"), 0);
	/* Read-only transactions cannot nest. */
	assert_int_equal(store_txn_begin(f->s, NULL, STORE_TXN_RDONLY, &reader, NULL), 0);
	assert_int_equal(store_txn_begin(f->s, reader, 0, &child, NULL), -EINVAL);
	store_txn_abort(reader);
}

/* STORE_TXN_NOMETASYNC on a store that flushes (the fixture's does not):
 * the commit is made and read back after a reopen, and the transactions
 * after it (plain, and one with a nested child) commit as before, so the
 * environment's flag was put back. */
static void test_txn_nometasync(void **state)
{
	struct fx *f = *state;
	store_close(f->s);
	rm_store(f->dir);
	assert_non_null(mkdtemp(strcpy(f->dir, "/tmp/idc-store-XXXXXX")));
	struct store_options o = {STORE_CREATE, 0, default_indexes, IDC_ARRAY_SIZE(default_indexes),
				  0};
	assert_int_equal(store_open(f->dir, &o, &f->s, NULL), 0);
	add_tree(f);
	struct store_txn *t, *child;
	const char *names[] = {"m1", "m2", "m3"};
	for (size_t i = 0; i < 3; i++) {
		unsigned flags = i == 1 ? 0 : STORE_TXN_NOMETASYNC;
		assert_int_equal(store_txn_begin(f->s, NULL, flags, &t, NULL), 0);
		char text[96];
		snprintf(text, sizeof(text), "uid=%s,ou=people,dc=example,dc=com\nuid: %s",
			 names[i], names[i]);
		struct store_entry e = mk(f, text);
		if (i == 2) { /* the flag is the outer transaction's */
			assert_int_equal(
			    store_txn_begin(f->s, t, STORE_TXN_NOMETASYNC, &child, NULL), 0);
			assert_int_equal(store_add(child, &e, NULL, NULL), 0);
			assert_int_equal(store_txn_commit(child, NULL), 0);
		} else {
			assert_int_equal(store_add(t, &e, NULL, NULL), 0);
		}
		assert_int_equal(store_txn_commit(t, NULL), 0);
	}
	store_close(f->s);
	assert_int_equal(store_open(f->dir, &o, &f->s, NULL), 0);
	assert_int_equal(count(f, "(|(uid=m1)(uid=m2)(uid=m3))"), 3);
}

static void test_second_writer(void **state)
{
	struct fx *f = *state;
	struct store *s2;
	assert_int_equal(store_open(f->dir, NULL, &s2, NULL), 0);
	struct store_txn *t, *t2;
	struct idc_diag d = {""};
	assert_int_equal(store_txn_begin(f->s, NULL, 0, &t, NULL), 0);
	assert_int_equal(store_txn_begin(s2, NULL, 0, &t2, &d), -EBUSY);
	assert_non_null(strstr(d.msg, "another process"));
	store_txn_abort(t);
	assert_int_equal(store_txn_begin(s2, NULL, 0, &t2, &d), 0);
	store_txn_abort(t2);
	store_close(s2);
}

/* ---- indexes, check, bulk, growth, long values ------------------------------------------------
 */

static void test_index_add_remove(void **state)
{
	struct fx *f = *state;
	add_tree(f);
	char plan[256];
	struct collect c;
	search(f, "dc=example,dc=com", STORE_SCOPE_SUB, "(sn=smith)", 0, &c, plan);
	assert_non_null(strstr(plan, "scan"));
	struct store_txn *t;
	struct idc_diag d;
	assert_int_equal(store_txn_begin(f->s, NULL, 0, &t, NULL), 0);
	assert_int_equal(store_index_add(t, "surname", &d), 0);
	assert_int_equal(store_txn_commit(t, NULL), 0);
	search(f, "dc=example,dc=com", STORE_SCOPE_SUB, "(sn=smith)", 0, &c, plan);
	assert_non_null(strstr(plan, "eq sn"));
	assert_int_equal(c.n, 5);
	assert_int_equal(store_txn_begin(f->s, NULL, 0, &t, NULL), 0);
	assert_int_equal(store_index_add(t, "sn", &d), -EEXIST);
	assert_int_equal(store_index_remove(t, "uid", &d), 0);
	assert_int_equal(store_index_remove(t, "mail", &d), -ENOENT);
	assert_int_equal(store_txn_commit(t, NULL), 0);
	search(f, "dc=example,dc=com", STORE_SCOPE_SUB, "(uid=bob)", 0, &c, plan);
	assert_non_null(strstr(plan, "scan"));
	assert_int_equal(c.n, 1);
	assert_int_equal(store_txn_begin(f->s, NULL, STORE_TXN_RDONLY, &t, NULL), 0);
	assert_int_equal(store_check(t, NULL, NULL), 0);
	store_txn_abort(t);
}

static void count_fault(const char *line, void *arg)
{
	(void)line;
	(*(int *)arg)++;
}

static void test_check_finds_faults(void **state)
{
	struct fx *f = *state;
	add_tree(f);
	struct store_txn *t;
	assert_int_equal(store_txn_begin(f->s, NULL, 0, &t, NULL), 0);
	/* Break each structure behind the store's back. */
	const struct store_index *ix = index_find(f->s, "uid", 3);
	MDB_val k = {5, "alice"};
	assert_int_equal(mdb_del(t->txn, ix->dbi, &k, NULL), 0);
	size_t bogus = 999;
	MDB_val k2 = {4, "nope"}, v2 = {sizeof(bogus), &bogus};
	assert_int_equal(mdb_put(t->txn, ix->dbi, &k2, &v2, 0), 0);
	MDB_val dk = {25, "dc=com,dc=example,ou=peop"};
	MDB_cursor *c;
	assert_int_equal(mdb_cursor_open(t->txn, f->s->dn2id, &c), 0);
	MDB_val ck = dk, cv;
	assert_int_equal(mdb_cursor_get(c, &ck, &cv, MDB_SET_RANGE), 0);
	assert_int_equal(mdb_cursor_del(c, 0), 0); /* ou=people's own key */
	mdb_cursor_close(c);
	int faults = 0;
	long n = store_check(t, count_fault, &faults);
	assert_true(n >= 3);
	assert_int_equal(n, faults);
	store_txn_abort(t);
}

static int bulk_fn(struct store_txn *t, void *arg, struct idc_diag *d)
{
	struct fx *f = arg;
	idc_arena_reset(&f->arena);
	for (int i = 0; i < 3000; i++) {
		char buf[512];
		snprintf(buf, sizeof(buf),
			 "uid=u%05d,ou=people,dc=example,dc=com\nobjectClass: person\nuid: u%05d\n"
			 "cn: user %d\nuidNumber: %d\ndescription: %0200d",
			 i, i, i, 20000 + i, i);
		struct store_entry e = mk(f, buf);
		int rc = store_add(t, &e, NULL, d);
		if (rc)
			return rc;
	}
	/* A modify inside the same bulk transaction sees the pending keys. */
	struct store_val v[] = {V("30000")};
	struct store_mod m[] = {{STORE_MOD_REPLACE, V("uidNumber"), v, 1}};
	const char *dn = "uid=u00007,ou=people,dc=example,dc=com";
	return store_modify(t, (struct store_val){dn, strlen(dn)}, m, 1, NULL, d);
}

static void test_bulk_and_growth(void **state)
{
	struct fx *f = *state;
	store_close(f->s);
	rm_store(f->dir);
	assert_int_equal(open_fx(f, 256 * 1024), 0);
	add_tree(f);
	struct idc_diag d = {""};
	assert_int_equal(store_write(f->s, STORE_TXN_BULK, bulk_fn, f, &d), 0);
	assert_int_equal(count(f, "(objectClass=person)"), 3005);
	assert_int_equal(count(f, "(uid=u02999)"), 1);
	assert_int_equal(count(f, "(uidNumber=30000)"), 1);
	assert_int_equal(count(f, "(uidNumber=20007)"), 0);
	assert_int_equal(count(f, "(cn=user 12*)"), 111);
	struct store_txn *t;
	assert_int_equal(store_txn_begin(f->s, NULL, STORE_TXN_RDONLY, &t, NULL), 0);
	assert_int_equal(store_check(t, NULL, NULL), 0);
	struct store_stats st;
	assert_int_equal(store_stats(t, &st), 0);
	assert_int_equal(st.entries, 3009);
	assert_true(st.map_size > 256 * 1024);
	store_txn_abort(t);
}

/* ---- id blocks (index.c): appends, merges, splits, removals ---------------------------- */

#define BLK_USERS 700 /* past ten blocks of 63 under one key */
#define BLK_GIDS  3

struct blk_model {
	int gid[BLK_USERS * 2]; /* -1: no such entry */
	size_t n;               /* entries added so far */
	uint32_t seed;
};

static uint32_t blk_rand(struct blk_model *m)
{
	m->seed = m->seed * 1103515245u + 12345u;
	return m->seed >> 8;
}

static int blk_add(struct fx *f, struct store_txn *t, size_t i, int gid, struct idc_diag *d)
{
	char buf[256];
	snprintf(buf, sizeof(buf),
		 "uid=b%04zu,ou=people,dc=example,dc=com\nobjectClass: person\nuid: b%04zu\n"
		 "cn: b %zu\nsn: b\ngidNumber: %d",
		 i, i, i, gid);
	struct store_entry e = mk(f, buf);
	return store_add(t, &e, NULL, d);
}

static void blk_expect(struct fx *f, const struct blk_model *m)
{
	size_t per[BLK_GIDS] = {0}, alive = 0;
	for (size_t i = 0; i < m->n; i++)
		if (m->gid[i] >= 0) {
			per[m->gid[i]]++;
			alive++;
		}
	for (int g = 0; g < BLK_GIDS; g++) {
		char flt[32];
		snprintf(flt, sizeof(flt), "(gidNumber=%d)", g);
		assert_int_equal(count(f, flt), per[g]);
	}
	assert_int_equal(count(f, "(&(objectClass=person)(sn=b))"), alive);
	assert_int_equal(count(f, "(&(gidNumber=*)(sn=b))"), alive);
	assert_checks(f);
}

/* One transaction of adds (new ids past every block), gidNumber moves of
 * random older entries (inserts into the middle of full blocks: splits)
 * and deletes (removals, blocks emptied). */
static void blk_round(struct fx *f, struct blk_model *m, size_t adds, size_t moves, size_t dels)
{
	struct store_txn *t;
	struct idc_diag d = {""};
	assert_int_equal(store_txn_begin(f->s, NULL, 0, &t, &d), 0);
	idc_arena_reset(&f->arena);
	for (size_t k = 0; k < adds; k++, m->n++) {
		m->gid[m->n] = (int)(blk_rand(m) % BLK_GIDS);
		assert_int_equal(blk_add(f, t, m->n, m->gid[m->n], &d), 0);
	}
	for (size_t k = 0; k < moves + dels; k++) {
		size_t i = blk_rand(m) % m->n;
		if (m->gid[i] < 0)
			continue;
		char dn[64], gid[8];
		snprintf(dn, sizeof(dn), "uid=b%04zu,ou=people,dc=example,dc=com", i);
		struct store_val dnv = {dn, strlen(dn)};
		if (k >= moves) {
			assert_int_equal(store_delete(t, dnv, false, &d), 0);
			m->gid[i] = -1;
			continue;
		}
		m->gid[i] = (m->gid[i] + 1) % BLK_GIDS;
		snprintf(gid, sizeof(gid), "%d", m->gid[i]);
		struct store_val v[] = {{gid, strlen(gid)}};
		struct store_mod mod[] = {{STORE_MOD_REPLACE, V("gidNumber"), v, 1}};
		assert_int_equal(store_modify(t, dnv, mod, 1, NULL, &d), 0);
	}
	assert_int_equal(store_txn_commit(t, &d), 0);
	blk_expect(f, m);
}

static void test_index_blocks(void **state)
{
	struct fx *f = *state;
	add_tree(f);
	struct blk_model *m = calloc(1, sizeof(*m));
	m->seed = 17;
	blk_round(f, m, BLK_USERS, 0, 0); /* empty indexes: appended blocks */
	blk_round(f, m, 100, 0, 0);       /* the last blocks filled, then new ones */
	blk_round(f, m, 0, 300, 0);       /* inserts in the middle, splits */
	blk_round(f, m, 50, 200, 150);    /* all of it at once */
	blk_round(f, m, 0, 0, BLK_USERS); /* most entries gone, blocks emptied */
	blk_round(f, m, BLK_USERS / 2, 100, 10);
	/* a key holding many blocks keeps each within INDEX_BLOCK_IDS ids */
	struct store_txn *t;
	assert_int_equal(store_txn_begin(f->s, NULL, STORE_TXN_RDONLY, &t, NULL), 0);
	MDB_cursor *c;
	assert_int_equal(mdb_cursor_open(t->txn, f->s->pres, &c), 0);
	MDB_val k = {9, "gidnumber"}, v;
	size_t blocks = 0, ids = 0;
	uint64_t buf[INDEX_BLOCK_IDS], last = 0;
	for (int rc = mdb_cursor_get(c, &k, &v, MDB_SET); rc == 0;
	     rc = mdb_cursor_get(c, &k, &v, MDB_NEXT_DUP)) {
		size_t n = index_block_decode(v, buf);
		assert_true(n > 0);
		assert_true(buf[0] > last);
		last = buf[n - 1];
		blocks++;
		ids += n;
	}
	mdb_cursor_close(c);
	store_txn_abort(t);
	assert_true(blocks > 5);
	assert_true(ids > blocks);
	free(m);
}

static void test_long_values(void **state)
{
	struct fx *f = *state;
	add_tree(f);
	char val[1200], val2[1200], buf[3000];
	memset(val, 'q', sizeof(val) - 1);
	val[sizeof(val) - 1] = '\0';
	memcpy(val2, val, sizeof(val));
	val2[600] = 'r'; /* same 503-byte key prefix, other hash */
	snprintf(buf, sizeof(buf), "cn=long1,ou=groups,dc=example,dc=com\ncn: long1\ncn: %s", val);
	assert_int_equal(add(f, buf), 0);
	snprintf(buf, sizeof(buf), "cn=long2,ou=groups,dc=example,dc=com\ncn: long2\ncn: %s", val2);
	assert_int_equal(add(f, buf), 0);
	char filter[1300];
	snprintf(filter, sizeof(filter), "(cn=%s)", val);
	assert_int_equal(count(f, filter), 1);
	snprintf(filter, sizeof(filter), "(cn=%.600s*)", val);
	assert_int_equal(count(f, filter), 2);
	/* A DN longer than LMDB's key limit. */
	char dn[2000];
	snprintf(dn, sizeof(dn), "cn=%.900s,ou=groups,dc=example,dc=com\ncn: %.900s", val, val);
	assert_int_equal(add(f, dn), 0);
	snprintf(dn, sizeof(dn), "cn=%.900s,ou=groups,dc=example,dc=com\ncn: %.900s", val2, val2);
	assert_int_equal(add(f, dn), 0);
	assert_int_equal(add(f, dn), -EEXIST);
	snprintf(filter, sizeof(filter), "(cn=%.900s)", val2);
	assert_int_equal(count(f, filter), 1);
	assert_checks(f);
}

/* ---- the add fast paths ------------------------------------------------------------------ */

/* Keys of the bulk path arriving in order, then out of order, then again
 * equal to earlier ones: every grouping mode must give the same index. */
static int order_fn(struct store_txn *t, void *arg, struct idc_diag *d)
{
	struct fx *f = arg;
	idc_arena_reset(&f->arena);
	/* uid increasing, gidNumber increasing with repeats; then a smaller
	 * uid and gidNumber; then gidNumbers seen before the switch. */
	static const struct {
		const char *uid;
		int gid;
	} rows[] = {
	    {"k100", -5}, {"k101", -5}, {"k102", 7},  {"k103", 7},   {"k104", 100},
	    {"k050", 3},  {"k105", 7},  {"k106", -5}, {"k107", 100}, {"k001", 1000},
	};
	for (size_t i = 0; i < IDC_ARRAY_SIZE(rows); i++) {
		char buf[512];
		snprintf(buf, sizeof(buf),
			 "uid=%s,ou=people,dc=example,dc=com\nobjectClass: person\nuid: %s\n"
			 "cn: same\ngidNumber: %d",
			 rows[i].uid, rows[i].uid, rows[i].gid);
		struct store_entry e = mk(f, buf);
		int rc = store_add(t, &e, NULL, d);
		if (rc)
			return rc;
	}
	return 0;
}

static void test_bulk_key_order(void **state)
{
	struct fx *f = *state;
	add_tree(f);
	struct idc_diag d = {""};
	assert_int_equal(store_write(f->s, STORE_TXN_BULK, order_fn, f, &d), 0);
	assert_int_equal(count(f, "(uid=k050)"), 1);
	assert_int_equal(count(f, "(uid=k001)"), 1);
	assert_int_equal(count(f, "(uid=k107)"), 1);
	assert_int_equal(count(f, "(uid=k1*)"), 8);
	assert_int_equal(count(f, "(gidNumber=-5)"), 3);
	assert_int_equal(count(f, "(gidNumber=7)"), 3);
	assert_int_equal(count(f, "(gidNumber=100)"), 8); /* 2 here, 6 in add_tree */
	assert_int_equal(count(f, "(gidNumber=3)"), 1);
	assert_int_equal(count(f, "(&(gidNumber>=-5)(gidNumber<=7))"), 7);
	assert_int_equal(count(f, "(cn=same)"), 10);
	assert_checks(f);
}

/* The suffix and ou=people, added in t. */
static int add_people_base(struct store_txn *t, struct fx *f, struct idc_diag *d)
{
	static const char *const tree[] = {
	    "dc=example,dc=com\nobjectClass: domain\ndc: example",
	    "ou=people,dc=example,dc=com\nobjectClass: organizationalUnit\nou: people"};
	for (size_t i = 0; i < IDC_ARRAY_SIZE(tree); i++) {
		struct store_entry e = mk(f, tree[i]);
		int rc = store_add(t, &e, NULL, d);
		if (rc)
			return rc;
	}
	return 0;
}

/* Keys for the bulk sort (index.c, refs_sort): runs of a shared first 8,
 * 16 or 23 bytes, keys ending exactly at a slice's end, keys that begin
 * others, bytes above 0x7f; distinct for distinct i. */
#define SORT_KEYS     3000
#define SORT_NUL_KEYS 40

static void sort_key(size_t i, char *out, size_t cap)
{
	static const size_t pre[] = {1, 8, 16, 23};
	size_t n = 0, q = (i / 4) % 20, tail = i / 80;
	for (size_t k = 0; k < pre[i % 4]; k++)
		out[n++] = 'p';
	for (size_t k = 0; k < q; k++)
		out[n++] = 'q';
	for (; tail; tail /= 10) {
		if (tail % 10 == 9) {
			out[n++] = (char)0xc3; /* é */
			out[n++] = (char)0xa9;
		} else {
			out[n++] = (char)('a' + tail % 10);
		}
	}
	assert_true(n < cap);
	out[n] = '\0';
}

static int sort_fn(struct store_txn *t, void *arg, struct idc_diag *d)
{
	struct fx *f = arg;
	idc_arena_reset(&f->arena);
	int rc = add_people_base(t, f, d);
	if (rc)
		return rc;
	for (size_t i = 0; i < SORT_KEYS; i++) {
		char key[64], buf[256];
		sort_key((i * 7 + 3) % SORT_KEYS, key, sizeof(key)); /* a permutation */
		snprintf(
		    buf, sizeof(buf),
		    "uid=o%04zu,ou=people,dc=example,dc=com\nobjectClass: person\nuid: o%04zu\n"
		    "cn: %s",
		    i, i, key);
		struct store_entry e = mk(f, buf);
		rc = store_add(t, &e, NULL, d);
		if (rc)
			return rc;
	}
	/* Keys that differ only in trailing NUL bytes (not UTF-8, so kept as
	 * bytes): several of them end within one slice of a run. */
	static const size_t pre[] = {1, 7, 8, 15};
	for (size_t j = 0; j < SORT_NUL_KEYS; j++) {
		char buf[256];
		snprintf(
		    buf, sizeof(buf),
		    "uid=z%04zu,ou=people,dc=example,dc=com\nobjectClass: person\nuid: z%04zu\n"
		    "cn: x",
		    j, j);
		struct store_entry e = mk(f, buf);
		char *v = idc_arena_alloc(&f->arena, 32);
		size_t n = 0;
		for (size_t k = 0; k < pre[j % 4]; k++)
			v[n++] = 'p';
		v[n++] = (char)0xff;
		for (size_t k = 0; k < j / 4; k++)
			v[n++] = '\0';
		for (size_t a = 0; a < e.nattrs; a++)
			if (e.attrs[a].norm.len == 2 && memcmp(e.attrs[a].norm.ptr, "cn", 2) == 0)
				e.attrs[a].vals[0] = (struct store_val){v, n};
		rc = store_add(t, &e, NULL, d);
		if (rc)
			return rc;
	}
	return 0;
}

/* The flush appends the keys of an empty index in sorted order, and an
 * append out of order fails the transaction: every key must be found. */
static void test_bulk_sort_keys(void **state)
{
	struct fx *f = *state;
	struct idc_diag d = {""};
	assert_int_equal(store_write(f->s, STORE_TXN_BULK, sort_fn, f, &d), 0);
	for (size_t i = 0; i < SORT_KEYS; i += 7) {
		char key[64], filter[96];
		sort_key(i, key, sizeof(key));
		snprintf(filter, sizeof(filter), "(cn=%s)", key);
		assert_int_equal(count(f, filter), 1);
	}
	assert_int_equal(count(f, "(cn=p*)"), SORT_KEYS + SORT_NUL_KEYS);
	assert_int_equal(count(f, "(uid=z*)"), SORT_NUL_KEYS);
	assert_checks(f);
}

/* ---- slack in appended leaves (index.c, slack_append) ------------------------------ */

#define SLACK_USERS 8000
#define SLACK_ADDS  200

struct slack_run {
	struct fx *f;
	size_t from, n;
	bool tree; /* the base entries first */
};

/* A cn spread over the whole key range, even for the first import, odd
 * (so between two imported keys) for the adds after it. */
static unsigned slack_cn(size_t i, bool later)
{
	return (unsigned)((i * 2654435761u) % 1000000000u) * 2u + later;
}

static int slack_fn(struct store_txn *t, void *arg, struct idc_diag *d)
{
	struct slack_run *r = arg;
	idc_arena_reset(&r->f->arena);
	int rc = r->tree ? add_people_base(t, r->f, d) : 0;
	if (rc)
		return rc;
	for (size_t i = r->from; i < r->from + r->n; i++) {
		char buf[256];
		snprintf(
		    buf, sizeof(buf),
		    "uid=s%06zu,ou=people,dc=example,dc=com\nobjectClass: person\nuid: s%06zu\n"
		    "cn: c%010u",
		    i, i, slack_cn(i, r->from > 0));
		struct store_entry e = mk(r->f, buf);
		rc = store_add(t, &e, NULL, d);
		if (rc)
			return rc;
	}
	return 0;
}

/* Leaf pages of eq.cn, read with LMDB itself while the store is closed. */
static size_t cn_leaves(const char *dir)
{
	MDB_env *env;
	MDB_txn *txn;
	MDB_dbi dbi;
	MDB_stat st;
	assert_int_equal(mdb_env_create(&env), 0);
	assert_int_equal(mdb_env_set_maxdbs(env, 32), 0);
	assert_int_equal(mdb_env_open(env, dir, MDB_RDONLY, 0600), 0);
	assert_int_equal(mdb_txn_begin(env, NULL, MDB_RDONLY, &txn), 0);
	assert_int_equal(mdb_dbi_open(txn, "eq.cn", 0, &dbi), 0);
	assert_int_equal(mdb_stat(txn, dbi, &st), 0);
	assert_int_equal(st.ms_entries, SLACK_USERS + SLACK_ADDS * (st.ms_entries > SLACK_USERS));
	mdb_txn_abort(txn);
	mdb_env_close(env);
	return st.ms_leaf_pages;
}

static void slack_reopen(struct fx *f)
{
	store_close(f->s);
	f->s = NULL;
	struct store_options o = {STORE_NOSYNC, 0, default_indexes, IDC_ARRAY_SIZE(default_indexes),
				  0};
	struct idc_diag d = {""};
	assert_int_equal(store_open(f->dir, &o, &f->s, &d), 0);
}

/* Keys imported into an empty index leave room in their leaves: random
 * adds after the import fit there instead of splitting a leaf each (LMDB's
 * MDB_APPEND alone packs every leaf full), and every key and id is intact. */
static void test_bulk_leaves_keep_slack(void **state)
{
	struct fx *f = *state;
	struct idc_diag d = {""};
	struct slack_run r = {f, 0, SLACK_USERS, true};
	assert_int_equal(store_write(f->s, STORE_TXN_BULK, slack_fn, &r, &d), 0);
	store_close(f->s);
	f->s = NULL;
	size_t before = cn_leaves(f->dir);
	slack_reopen(f);
	r = (struct slack_run){f, SLACK_USERS, SLACK_ADDS, false};
	assert_int_equal(store_write(f->s, 0, slack_fn, &r, &d), 0);
	store_close(f->s);
	f->s = NULL;
	size_t after = cn_leaves(f->dir);
	assert_true(before > 20); /* the adds reach most leaves, several each */
	assert_true(after <= before + before / 10);
	slack_reopen(f);
	char filter[64];
	for (size_t i = 0; i < SLACK_USERS + SLACK_ADDS; i += 97) {
		snprintf(filter, sizeof(filter), "(cn=c%010u)", slack_cn(i, i >= SLACK_USERS));
		assert_int_equal(count(f, filter), 1);
	}
	assert_int_equal(count(f, "(cn=*)"), SLACK_USERS + SLACK_ADDS);
	assert_checks(f);
}

/* One normalization per value serves the checks and the index keys: a
 * failed add leaves no keys behind for the next one, and values that skip
 * normalization (one text value, unindexed) still compare by their rule. */
static int failing_fn(struct store_txn *t, void *arg, struct idc_diag *d)
{
	struct fx *f = arg;
	idc_arena_reset(&f->arena);
	static const struct {
		const char *text;
		int rc;
	} cases[] = {
	    {"uid=p1,ou=people,dc=example,dc=com\nuid: p1\ncn: bad\nuidNumber: 1x", IDC_ESYNTAX},
	    {"uid=p2,ou=people,dc=example,dc=com\nuid: p2\ncn: dup\ncn: DUP", IDC_EVALEXISTS},
	    {"uid=p3,ou=people,dc=example,dc=com\nuid: other\ncn: naming", IDC_ENAMING},
	    {"uid=p4,ou=people,dc=example,dc=com\nuid: p4\ncn: ok\nsn:  Two   Words ", 0},
	    {"uid=P5,ou=people,dc=example,dc=com\nuid: p5\ncn: upper rdn", 0},
	    {"cn=a\\2cb,ou=groups,dc=example,dc=com\ncn: a,b", 0},
	    {"cn=e,ou=groups,dc=example,dc=com\ncn: e\ndescription: ", 0},
	};
	for (size_t i = 0; i < IDC_ARRAY_SIZE(cases); i++) {
		struct store_entry e = mk(f, cases[i].text);
		int rc = store_add(t, &e, NULL, d);
		if (rc != cases[i].rc)
			return rc ? rc : -EINVAL;
	}
	/* 20 values (past the small-array case), the last equal to the third */
	char buf[1024];
	int n = snprintf(buf, sizeof(buf), "cn=many,ou=groups,dc=example,dc=com\ncn: many");
	for (int i = 0; i < 19; i++)
		n += snprintf(buf + n, sizeof(buf) - (size_t)n, "\nmemberUid: m%d", i);
	snprintf(buf + n, sizeof(buf) - (size_t)n, "\nmemberUid: m2");
	struct store_entry e = mk(f, buf);
	int rc = store_add(t, &e, NULL, d);
	if (rc != IDC_EVALEXISTS)
		return rc ? rc : -EINVAL;
	buf[strlen(buf) - 1] = 'X'; /* memberUid is caseExact: m2 and mX differ */
	e = mk(f, buf);
	return store_add(t, &e, NULL, d);
}

/* dn2id keys long enough to be hashed, which store_add_prepare works out
 * for the writer: an entry under a parent whose key is not hashed, one
 * under a hashed parent, a missing long parent refused, and the keys the
 * same as those that searches and lookups use. */
static void test_add_long_dn_keys(void **state)
{
	struct fx *f = *state;
	add_tree(f);
	char a[300], b[300], text[2048], base[1024];
	memset(a, 'a', sizeof(a) - 1);
	a[sizeof(a) - 1] = '\0';
	memset(b, 'b', sizeof(b) - 1);
	b[sizeof(b) - 1] = '\0';
	snprintf(text, sizeof(text),
		 "ou=%s,dc=example,dc=com\nobjectClass: organizationalUnit\nou: %s", a, a);
	assert_int_equal(add(f, text), 0);
	snprintf(text, sizeof(text), "uid=%s,ou=%s,dc=example,dc=com\nobjectClass: person\nuid: %s",
		 b, a, b);
	assert_int_equal(add(f, text), 0);
	assert_int_equal(add(f, text), -EEXIST);
	snprintf(text, sizeof(text),
		 "cn=g,uid=%s,ou=%s,dc=example,dc=com\nobjectClass: person\ncn: g", b, a);
	assert_int_equal(add(f, text), 0);
	snprintf(text, sizeof(text),
		 "cn=h,uid=%sc,ou=%s,dc=example,dc=com\nobjectClass: person\ncn: h", b, a);
	assert_int_equal(add(f, text), IDC_ENOPARENT);
	struct collect c;
	snprintf(base, sizeof(base), "uid=%s,ou=%s,dc=example,dc=com", b, a);
	assert_int_equal(search(f, base, STORE_SCOPE_ONE, "(objectClass=*)", 0, &c, NULL), 0);
	assert_int_equal(c.n, 1);
	snprintf(base, sizeof(base), "ou=%s,dc=example,dc=com", a);
	assert_int_equal(search(f, base, STORE_SCOPE_SUB, "(objectClass=person)", 0, &c, NULL), 0);
	assert_int_equal(c.n, 2);
	struct store_txn *t;
	struct store_entry e;
	assert_int_equal(store_txn_begin(f->s, NULL, STORE_TXN_RDONLY, &t, NULL), 0);
	snprintf(base, sizeof(base), "cn=g,uid=%s,ou=%s,dc=example,dc=com", b, a);
	assert_int_equal(store_get(t, (struct store_val){base, strlen(base)}, &e, NULL), 0);
	assert_int_equal(e.dn.len, strlen(base));
	assert_int_equal(store_check(t, NULL, NULL), 0);
	store_txn_abort(t);
}

/* ---- children of DNs whose dn2id keys are hashed ---------------------------------------- */

/* DN text "<rdn>,ou=<n x c><tail>,dc=example,dc=com" (rdn NULL: the ou itself). */
static const char *long_dn(char *out, size_t cap, const char *rdn, size_t n, char c,
			   const char *tail)
{
	char v[STORE_KEY_MAX];
	assert_true(n < sizeof(v));
	memset(v, c, n);
	v[n] = '\0';
	snprintf(out, cap, "%s%sou=%s%s,dc=example,dc=com", rdn ? rdn : "", rdn ? "," : "", v,
		 tail);
	return out;
}

static int add_long(struct fx *f, const char *dn)
{
	char text[2048];
	const char *eq = strchr(dn, '='), *comma = strchr(dn, ',');
	snprintf(text, sizeof(text), "%s\nobjectClass: %s\n%.*s: %.*s", dn,
		 dn[0] == 'o' ? "organizationalUnit" : "person", (int)(eq - dn), dn,
		 (int)(comma - eq - 1), eq + 1);
	return add(f, text);
}

static size_t n_below(struct fx *f, const char *base, enum store_scope scope, const char *filter)
{
	struct collect c;
	assert_int_equal(search(f, base, scope, filter, 0, &c, NULL), 0);
	return c.n;
}

/* store_search_from's count: it never visits the base. */
static size_t n_walked(struct fx *f, const char *base, enum store_scope scope)
{
	struct store_txn *t;
	struct collect c = {0};
	struct idc_buf at = IDC_BUF_INIT;
	struct store_search q = {{base, strlen(base)}, scope, NULL, 0};
	assert_int_equal(store_txn_begin(f->s, NULL, STORE_TXN_RDONLY, &t, NULL), 0);
	assert_int_equal(store_search_from(t, &q, &at, collect_cb, &c, NULL), 0);
	store_txn_abort(t);
	idc_buf_free(&at);
	return c.n;
}

/* Parents whose keys are hashed and share their kept prefix with a
 * sibling's: leaves delete and rename, parents refuse, and each one's
 * searches list its own children only. */
static void test_long_dn_children_hashed(void **state)
{
	struct fx *f = *state;
	add_tree(f);
	/* reversed keys "dc=com,dc=example,ou=aaa...a1": 522 bytes, hashed */
	char p1[1024], p2[1024], c1[1024], c2[1024], moved[1024];
	long_dn(p1, sizeof(p1), NULL, 500, 'a', "1");
	long_dn(p2, sizeof(p2), NULL, 500, 'a', "2");
	long_dn(c1, sizeof(c1), "uid=c", 500, 'a', "1");
	long_dn(c2, sizeof(c2), "uid=d", 500, 'a', "2");
	long_dn(moved, sizeof(moved), "uid=d", 500, 'a', "1");
	assert_int_equal(add_long(f, p1), 0);
	assert_int_equal(add_long(f, p2), 0);
	assert_int_equal(del(f, p2, false), 0); /* a leaf, its sibling kept */
	assert_int_equal(n_below(f, p1, STORE_SCOPE_BASE, NULL), 1);
	assert_int_equal(add_long(f, p2), 0);
	assert_int_equal(del(f, p2, true), 0); /* a subtree of one, its sibling kept */
	assert_int_equal(n_below(f, p1, STORE_SCOPE_BASE, NULL), 1);
	assert_int_equal(add_long(f, p2), 0);
	assert_int_equal(add_long(f, c1), 0);
	assert_int_equal(del(f, p1, false), IDC_ENOTLEAF);
	assert_int_equal(modrdn(f, p1, "ou=other", true, NULL), IDC_ENOTLEAF);
	assert_int_equal(del(f, p2, false), 0); /* the sibling of a parent */
	assert_int_equal(add_long(f, p2), 0);
	assert_int_equal(add_long(f, c2), 0);
	for (int i = 0; i < 2; i++) {
		const char *flt = i ? "(objectClass=*)" : NULL;
		assert_int_equal(n_below(f, p1, STORE_SCOPE_ONE, flt), 1);
		assert_int_equal(n_below(f, p1, STORE_SCOPE_SUB, flt), 2);
		assert_int_equal(n_below(f, p2, STORE_SCOPE_SUB, flt), 2);
	}
	assert_int_equal(n_walked(f, p1, STORE_SCOPE_ONE), 1);
	assert_int_equal(n_walked(f, p1, STORE_SCOPE_SUB), 1);
	/* a child renamed, then one moved over from the sibling */
	assert_int_equal(modrdn(f, c1, "uid=e", true, NULL), 0);
	assert_int_equal(del(f, p1, false), IDC_ENOTLEAF);
	assert_int_equal(modrdn(f, c2, "uid=d", true, p1), 0);
	assert_int_equal(n_below(f, p1, STORE_SCOPE_ONE, NULL), 2);
	assert_int_equal(n_walked(f, p1, STORE_SCOPE_SUB), 2);
	assert_int_equal(n_below(f, p2, STORE_SCOPE_ONE, NULL), 0);
	assert_int_equal(modrdn(f, p2, "ou=p2", true, NULL), 0); /* a leaf again */
	assert_int_equal(del(f, moved, false), 0);
	assert_checks(f);
	assert_int_equal(del(f, p1, true), 0);
	assert_int_equal(n_below(f, "dc=example,dc=com", STORE_SCOPE_ONE, NULL), 3);
	assert_checks(f);
}

/* Parents first, as an export needs: each entry's parent is seen before it
 * (or is outside the walk). DNs kept in the fixture arena. */
struct order {
	struct fx *f;
	const char *seen[64];
	size_t n;
	bool parent_later;
};

static int order_cb(const struct store_entry *e, void *arg)
{
	struct order *o = arg;
	const char *comma = memchr(e->dn.ptr, ',', e->dn.len);
	size_t plen = comma ? e->dn.len - (size_t)(comma + 1 - e->dn.ptr) : 0;
	bool seen = false;
	for (size_t i = 0; i < o->n && comma; i++)
		seen |= strlen(o->seen[i]) == plen && memcmp(o->seen[i], comma + 1, plen) == 0;
	if (comma && !seen && o->n)
		o->parent_later = true;
	if (o->n < 64)
		o->seen[o->n++] = idc_arena_strndup(&o->f->arena, e->dn.ptr, e->dn.len);
	return 0;
}

/* A subtree search visits parents before their children, also where the
 * keys of both are hashed and so ordered by their hashes. */
static void test_long_dn_parents_first(void **state)
{
	struct fx *f = *state;
	add_tree(f);
	char dn[1024], rdn[32];
	assert_int_equal(add_long(f, long_dn(dn, sizeof(dn), NULL, 500, 'a', "1")), 0);
	for (int i = 0; i < 12; i++) {
		snprintf(rdn, sizeof(rdn), "uid=c%d", i);
		assert_int_equal(add_long(f, long_dn(dn, sizeof(dn), rdn, 500, 'a', "1")), 0);
		snprintf(rdn, sizeof(rdn), "ou=g,uid=c%d", i);
		assert_int_equal(add_long(f, long_dn(dn, sizeof(dn), rdn, 500, 'a', "1")), 0);
	}
	const char *bases[] = {"dc=example,dc=com", long_dn(dn, sizeof(dn), NULL, 500, 'a', "1")};
	for (size_t b = 0; b < 2; b++) {
		struct store_txn *t;
		struct order o = {f, {0}, 0, false};
		struct store_search q = {{bases[b], strlen(bases[b])}, STORE_SCOPE_SUB, NULL, 0};
		assert_int_equal(store_txn_begin(f->s, NULL, STORE_TXN_RDONLY, &t, NULL), 0);
		assert_int_equal(store_search(t, &q, order_cb, &o, NULL), 0);
		store_txn_abort(t);
		assert_int_equal(o.n, b ? 25 : 34);
		assert_false(o.parent_later);
	}
}

/* Parents whose keys are not hashed but longer than the prefix a hashed
 * key keeps (505 bytes): their children's keys cannot tell whose they are,
 * so the entry's DN decides. */
static void test_long_dn_children_past_prefix(void **state)
{
	struct fx *f = *state;
	add_tree(f);
	char q1[1024], q2[1024], k1[1024], k2[1024];
	long_dn(q1, sizeof(q1), NULL, 482, 'x', "b1");
	long_dn(q2, sizeof(q2), NULL, 482, 'x', "b2");
	long_dn(k1, sizeof(k1), "uid=k", 482, 'x', "b1");
	long_dn(k2, sizeof(k2), "uid=k", 482, 'x', "b2");
	assert_int_equal(add_long(f, q1), 0);
	assert_int_equal(add_long(f, q2), 0);
	assert_int_equal(add_long(f, k2), 0);
	assert_int_equal(n_below(f, q1, STORE_SCOPE_SUB, NULL), 1);
	assert_int_equal(n_walked(f, q1, STORE_SCOPE_SUB), 0);
	assert_int_equal(n_walked(f, q2, STORE_SCOPE_ONE), 1);
	assert_int_equal(del(f, q2, false), IDC_ENOTLEAF);
	assert_int_equal(del(f, q1, false), 0);
	assert_int_equal(add_long(f, q1), 0);
	assert_int_equal(add_long(f, k1), 0);
	assert_int_equal(del(f, k2, false), 0);
	assert_int_equal(del(f, q2, false), 0);
	assert_int_equal(del(f, q1, false), IDC_ENOTLEAF);
	assert_int_equal(n_below(f, q1, STORE_SCOPE_ONE, "(uid=k)"), 1);
	assert_checks(f);
}

static void test_add_checks_and_keys(void **state)
{
	struct fx *f = *state;
	add_tree(f);
	struct idc_diag d = {""};
	assert_int_equal(store_write(f->s, STORE_TXN_BULK, failing_fn, f, &d), 0);
	assert_int_equal(count(f, "(cn=bad)"), 0);
	assert_int_equal(count(f, "(cn=dup)"), 0);
	assert_int_equal(count(f, "(cn=naming)"), 0);
	assert_int_equal(count(f, "(uid=p1)"), 0);
	assert_int_equal(count(f, "(uid=p4)"), 1);
	assert_int_equal(count(f, "(sn=two words)"), 1);
	assert_int_equal(count(f, "(uid=p5)"), 1);
	assert_int_equal(count(f, "(cn=a,b)"), 1);
	assert_int_equal(count(f, "(cn=many)"), 1);
	assert_int_equal(count(f, "(memberUid=m18)"), 1);
	assert_int_equal(count(f, "(description=*)"), 1);
	assert_checks(f);
}

/* store_attr_canon and store_attr_rule remember recent answers: asking many
 * names in turn (so that slots are shared and replaced) must give the same
 * answers as asking each once. store_attr_canon_ref keeps each short name
 * once for all threads, even two whose hashes share a slot (objectClass and
 * homeDirectory do): asked again, it hands out the kept copy, which knows
 * its rule. */
static void test_attr_name_memo(void **state)
{
	(void)state;
	static const struct {
		const char *name, *canon;
		enum store_rule rule;
	} names[] = {
	    {"objectClass", "objectclass", STORE_RULE_CASE_IGNORE},
	    {"objectclass", "objectclass", STORE_RULE_CASE_IGNORE},
	    {"OBJECTCLASS", "objectclass", STORE_RULE_CASE_IGNORE},
	    {"uidNumber", "uidnumber", STORE_RULE_INTEGER},
	    {"gidNumber", "gidnumber", STORE_RULE_INTEGER},
	    {"member", "member", STORE_RULE_DN},
	    {"memberUid", "memberuid", STORE_RULE_CASE_EXACT},
	    {"homeDirectory", "homedirectory", STORE_RULE_CASE_EXACT},
	    {"gn", "givenname", STORE_RULE_CASE_IGNORE},
	    {"GN", "givenname", STORE_RULE_CASE_IGNORE},
	    {"2.5.4.3", "cn", STORE_RULE_CASE_IGNORE},
	    {"commonName;lang-de", "cn;lang-de", STORE_RULE_CASE_IGNORE},
	    {"userCertificate;binary", "usercertificate;binary", STORE_RULE_OCTET},
	    {"description;binary", "description;binary", STORE_RULE_OCTET},
	    {"x-Some-Very-Long-Attribute-Name-Past-The-Memo",
	     "x-some-very-long-attribute-name-past-the-memo", STORE_RULE_CASE_IGNORE},
	    {"1bad", NULL, STORE_RULE_CASE_IGNORE},
	    {"bad name", NULL, STORE_RULE_CASE_IGNORE},
	    {"a", "a", STORE_RULE_CASE_IGNORE},
	    {"A", "a", STORE_RULE_CASE_IGNORE},
	};
	for (int round = 0; round < 3; round++) {
		for (size_t i = 0; i < IDC_ARRAY_SIZE(names); i++) {
			char out[STORE_ATTR_MAX];
			size_t n = store_attr_canon(names[i].name, strlen(names[i].name), out);
			if (!names[i].canon) {
				assert_int_equal(n, 0);
				continue;
			}
			assert_int_equal(n, strlen(names[i].canon));
			assert_string_equal(out, names[i].canon);
			assert_int_equal(store_attr_rule(out, n), names[i].rule);
		}
		/* many distinct names in between push the ones above out */
		for (int k = 0; k < 200 && round == 1; k++) {
			char nm[16], out[STORE_ATTR_MAX];
			int len = snprintf(nm, sizeof(nm), "attr%dX", k);
			assert_int_equal(store_attr_canon(nm, (size_t)len, out), (size_t)len);
			assert_int_equal(out[len - 1], 'x');
			assert_int_equal(store_attr_rule(out, (size_t)len), STORE_RULE_CASE_IGNORE);
		}
	}
	for (int round = 0; round < 2; round++)
		for (size_t i = 0; i < IDC_ARRAY_SIZE(names); i++) {
			size_t len = strlen(names[i].name);
			char buf[STORE_ATTR_MAX];
			const char *c;
			if (!names[i].canon || len >= 32)
				continue;
			size_t n = store_attr_canon_ref(names[i].name, len, buf, &c);
			assert_int_equal(n, strlen(names[i].canon));
			assert_memory_equal(c, names[i].canon, n + 1);
			assert_int_equal(store_attr_rule(c, n), names[i].rule);
			if (round == 1)
				assert_ptr_not_equal(c, buf);
		}
}

/* Values of one attribute keep their order, wherever and however its name
 * is spelled among the pairs; attributes come sorted by canonical name,
 * each named as first written. Also past 64 runs of names (qsort). */
static void test_entry_from_pairs_order(void **state)
{
	(void)state;
	struct idc_arena a = IDC_ARENA_INIT;
	struct store_pair p[140];
	struct store_entry e;
	/* each twice in a row (the second ordered as the first was); the
	 * second case's names make the same runs, at other places */
	static const char *cases[][2][8] = {
	    {{"cn", "objectClass", "CN", "commonName", "objectClass", "objectClass", "sn", "cn"},
	     {"a", "x", "b", "c", "y", "z", "q", "d"}},
	    {{"cn", "objectClass", "objectClass", "CN", "commonName", "objectClass", "sn", "cn"},
	     {"a", "x", "y", "b", "c", "z", "q", "d"}},
	};
	const char *want[][3] = {
	    {"cn", "cn", "abcd"}, {"objectclass", "objectClass", "xyz"}, {"sn", "sn", "q"}};
	for (size_t round = 0; round < 4; round++) {
		for (size_t i = 0; i < 8; i++) {
			const char *nm = cases[round / 2][0][i], *v = cases[round / 2][1][i];
			p[i] = (struct store_pair){{nm, strlen(nm)}, {v, 1}};
		}
		assert_int_equal(
		    store_entry_from_pairs(&a, (struct store_val){"cn=a", 4}, p, 8, &e, NULL), 0);
		assert_int_equal(e.nattrs, 3);
		for (size_t i = 0; i < 3; i++) {
			assert_int_equal(e.attrs[i].norm.len, strlen(want[i][0]));
			assert_memory_equal(e.attrs[i].norm.ptr, want[i][0], e.attrs[i].norm.len);
			assert_int_equal(e.attrs[i].name.len, strlen(want[i][1]));
			assert_memory_equal(e.attrs[i].name.ptr, want[i][1], e.attrs[i].name.len);
			assert_int_equal(e.attrs[i].nvals, strlen(want[i][2]));
			for (size_t j = 0; j < e.attrs[i].nvals; j++)
				assert_memory_equal(e.attrs[i].vals[j].ptr, &want[i][2][j], 1);
		}
	}
	/* 140 pairs alternating between two names: 140 runs */
	static const char digits[] = "0123456789";
	for (size_t i = 0; i < 140; i++)
		p[i] = (struct store_pair){{i % 2 ? "ou" : "description", i % 2 ? 2 : 11},
					   {&digits[i % 10], 1}};
	assert_int_equal(
	    store_entry_from_pairs(&a, (struct store_val){"cn=a", 4}, p, 140, &e, NULL), 0);
	assert_int_equal(e.nattrs, 2);
	assert_memory_equal(e.attrs[0].norm.ptr, "description", 11);
	assert_memory_equal(e.attrs[1].norm.ptr, "ou", 2);
	for (size_t k = 0; k < 2; k++) {
		assert_int_equal(e.attrs[k].nvals, 70);
		for (size_t j = 0; j < 70; j++)
			assert_memory_equal(e.attrs[k].vals[j].ptr, &digits[(2 * j + k) % 10], 1);
	}
	p[7].name = (struct store_val){"bad name", 8};
	assert_int_equal(store_entry_from_pairs(&a, (struct store_val){"cn=a", 4}, p, 8, &e, NULL),
			 IDC_ESYNTAX);
	idc_arena_free(&a);
}

/* The codec gives back what it was given, for values of every length the
 * encoder copies a different way (none, bytes, words, memcpy). */
static void test_entry_codec_round_trip(void **state)
{
	(void)state;
	static const char text[] = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOP";
	struct store_val vals[41];
	for (size_t i = 0; i < 41; i++)
		vals[i] = (struct store_val){text + i % 7, i};
	struct store_attr attrs[] = {
	    {{"cn", 2}, {"cn", 2}, vals, 20, 1},
	    {{"description", 11}, {"description", 11}, vals + 20, 21, 0},
	};
	struct store_val dn = {"cn=0123456789abcdef,dc=example", 30};
	struct store_entry e = {7, dn, attrs, 2}, out;
	struct idc_buf b = IDC_BUF_INIT;
	struct store_scratch sc = {0};
	struct store_val ndn;
	assert_int_equal(store_entry_encode(&e, (struct store_val){"x", 1}, &b), 0);
	assert_int_equal(store_entry_decode(b.data, b.len, 7, &sc, &out, &ndn), 0);
	assert_int_equal(ndn.len, 1);
	assert_int_equal(out.dn.len, dn.len);
	assert_memory_equal(out.dn.ptr, dn.ptr, dn.len);
	assert_int_equal(out.nattrs, 2);
	for (size_t i = 0; i < 2; i++) {
		assert_int_equal(out.attrs[i].rank, attrs[i].rank);
		assert_int_equal(out.attrs[i].nvals, attrs[i].nvals);
		assert_memory_equal(out.attrs[i].name.ptr, attrs[i].name.ptr, attrs[i].name.len);
		for (size_t j = 0; j < attrs[i].nvals; j++) {
			assert_int_equal(out.attrs[i].vals[j].len, attrs[i].vals[j].len);
			assert_memory_equal(out.attrs[i].vals[j].ptr, attrs[i].vals[j].ptr,
					    attrs[i].vals[j].len);
		}
	}
	idc_buf_free(&b);
	store_scratch_free(&sc);
}

static void test_entry_codec_rejects_garbage(void **state)
{
	(void)state;
	struct store_scratch sc = {0};
	struct store_entry e;
	unsigned char junk[64];
	for (size_t len = 0; len < sizeof(junk); len++) {
		memset(junk, 0xff, sizeof(junk));
		junk[0] = 1;
		assert_int_not_equal(store_entry_decode(junk, len, 1, &sc, &e, NULL), 0);
	}
	store_scratch_free(&sc);
}

/* ==== damage: meta pages, the child check, the clean marker ================= */

static size_t read_file(const char *path, uint8_t *buf, size_t max)
{
	FILE *fp = fopen(path, "rb");
	assert_non_null(fp);
	size_t n = fread(buf, 1, max, fp);
	fclose(fp);
	return n;
}

static void write_file(const char *path, const uint8_t *buf, size_t n)
{
	FILE *fp = fopen(path, "wb");
	assert_non_null(fp);
	assert_int_equal(fwrite(buf, 1, n, fp), n);
	assert_int_equal(fclose(fp), 0);
}

static void put64(uint8_t *p, uint64_t v)
{
	memcpy(p, &v, sizeof(v));
}

/* Offsets in the first 8 KiB of a data file with 4 KiB pages: meta page m
 * starts at m * 4096, its body 16 bytes later. */
#define META(m, off) ((m)*4096 + 16 + (off))

static void expect_corrupt(const uint8_t *good, size_t n, size_t at, const uint8_t *bytes,
			   size_t len, const char *what)
{
	static uint8_t bad[8192];
	memcpy(bad, good, n);
	memcpy(bad + at, bytes, len);
	struct store_lmdb_meta m;
	struct idc_diag d = {""};
	int rc = store_lmdb_meta_parse(bad, n, &m, &d);
	if (rc != IDC_ECORRUPT || !d.msg[0])
		fail_msg("%s: rc %d, '%s'", what, rc, d.msg);
}

static void test_meta_pages(void **state)
{
	struct fx *f = *state;
	add_tree(f);
	char path[128];
	snprintf(path, sizeof(path), "%s/data.mdb", f->dir);
	static uint8_t good[8192];
	assert_int_equal(read_file(path, good, sizeof(good)), sizeof(good));
	struct store_lmdb_meta m;
	struct idc_diag d = {""};
	assert_int_equal(store_lmdb_meta_parse(good, sizeof(good), &m, &d), 0);
	assert_int_equal(m.psize, 4096);
	assert_true(m.last_pg >= 2 && m.txnid >= 1 && m.mapsize >= (m.last_pg + 1) * 4096);
	assert_true(m.root[1] >= 2 && m.root[1] <= m.last_pg);
	/* every prefix too short for both meta pages */
	for (size_t n = 0; n < 4096 + 152; n += 97)
		assert_int_equal(store_lmdb_meta_parse(good, n, &m, NULL), IDC_ECORRUPT);
	uint8_t zero8[8] = {0}, big[8], one[1] = {0};
	put64(big, UINT64_C(1) << 50);
	uint32_t psize_odd = 3000, psize_huge = 1u << 17;
	for (int k = 0; k < 2; k++) {
		expect_corrupt(good, sizeof(good), META(k, 0), zero8, 4, "magic");
		expect_corrupt(good, sizeof(good), META(k, 4), zero8, 4, "version");
		expect_corrupt(good, sizeof(good), META(k, 120), zero8, 8, "last page 0");
		expect_corrupt(good, sizeof(good), META(k, 120), big, 8, "last page past 2^48");
		expect_corrupt(good, sizeof(good), META(k, 16), zero8, 8, "map size 0");
		expect_corrupt(good, sizeof(good), k * 4096 + 10, one, 1, "not a meta page");
		expect_corrupt(good, sizeof(good), META(k, 72 + 40), big, 8, "main root");
		expect_corrupt(good, sizeof(good), META(k, 72 + 40), zero8, 8,
			       "root on a meta page");
		expect_corrupt(good, sizeof(good), META(k, 72 + 6), zero8, 2,
			       "depth 0 with a root");
		expect_corrupt(good, sizeof(good), META(k, 72 + 16), big, 8, "leaf pages");
	}
	expect_corrupt(good, sizeof(good), META(0, 24), (uint8_t *)&psize_odd, 4, "page size");
	expect_corrupt(good, sizeof(good), META(0, 24), (uint8_t *)&psize_huge, 4, "page size");
	expect_corrupt(good, sizeof(good), META(1, 24), (uint8_t *)&psize_odd, 4, "sizes differ");
}

/* The file against its meta pages: empty, cut, and ending early but sound. */
static void test_meta_file_check(void **state)
{
	struct fx *f = *state;
	add_tree(f);
	char path[128], copy[160];
	snprintf(path, sizeof(path), "%s/data.mdb", f->dir);
	snprintf(copy, sizeof(copy), "%s/copy.mdb", f->dir);
	static uint8_t buf[1 << 20];
	size_t n = read_file(path, buf, sizeof(buf));
	struct store_lmdb_meta m;
	struct idc_diag d = {""};
	write_file(copy, buf, n);
	assert_int_equal(store_lmdb_file_check(copy, &m, &d), 0);
	assert_true(m.covered);
	assert_int_equal(m.file_size, n);
	assert_int_equal(truncate(copy, 0), 0);
	assert_int_equal(store_lmdb_file_check(copy, &m, &d), IDC_ECORRUPT);
	assert_non_null(strstr(d.msg, "empty"));
	write_file(copy, buf, 3 * 4096); /* both meta pages and one more */
	assert_int_equal(store_lmdb_file_check(copy, &m, &d), IDC_ECORRUPT);
	assert_non_null(strstr(d.msg, "truncated"));
	/* last page raised past the end: nothing refers to the missing pages */
	store_lmdb_meta_parse(buf, n, &m, NULL);
	for (int k = 0; k < 2; k++)
		put64(buf + META(k, 120), m.last_pg + 5);
	write_file(copy, buf, n);
	assert_int_equal(store_lmdb_file_check(copy, &m, &d), 0);
	assert_false(m.covered);
	assert_int_equal(store_lmdb_file_check("/nonexistent/data.mdb", &m, &d), -ENOENT);
	unlink(copy);
}

/* 200 random bytes past the meta pages, seeds 1..8: whatever LMDB does
 * with them (fault, abort, an error, nothing), it happens in the child, and
 * store_verify reports instead of taking this process down. */
static void test_verify_survives_damage(void **state)
{
	struct fx *f = *state;
	add_tree(f);
	for (int i = 0; i < 300; i++) {
		char e[256];
		snprintf(e, sizeof(e),
			 "uid=u%d,ou=people,dc=example,dc=com\nobjectClass: account\n"
			 "uid: u%d\ncn: user number %d",
			 i, i, i);
		assert_int_equal(add(f, e), 0);
	}
	assert_int_equal(store_verify(f->dir, STORE_VERIFY_FULL, NULL, NULL, NULL), 0);
	char path[128], dir[64], copy[160];
	snprintf(path, sizeof(path), "%s/data.mdb", f->dir);
	static uint8_t buf[4 << 20];
	size_t n = read_file(path, buf, sizeof(buf));
	strcpy(dir, "/tmp/idc-damage-XXXXXX");
	assert_non_null(mkdtemp(dir));
	snprintf(copy, sizeof(copy), "%s/data.mdb", dir);
	int damaged = 0;
	for (unsigned seed = 1; seed <= 8; seed++) {
		static uint8_t bad[4 << 20];
		memcpy(bad, buf, n);
		srand(seed);
		for (int i = 0; i < 200; i++)
			bad[8192 + (size_t)rand() % (n - 8192)] = (uint8_t)rand();
		write_file(copy, bad, n);
		struct idc_diag d = {""};
		long rc = store_verify(dir, STORE_VERIFY_FULL, NULL, NULL, &d);
		assert_true(rc >= 0 || rc == IDC_ECORRUPT);
		damaged += rc != 0;
		snprintf(path, sizeof(path), "%s/lock.mdb", dir);
		unlink(path);
	}
	assert_true(damaged >= 6);
	unlink(copy);
	rmdir(dir);
}

static void test_clean_marker(void **state)
{
	struct fx *f = *state;
	add_tree(f);
	store_close(f->s);
	f->s = NULL;
	char data[128], marker[160];
	snprintf(data, sizeof(data), "%s/data.mdb", f->dir);
	snprintf(marker, sizeof(marker), "%s.clean", data);
	assert_int_equal(store_clean_take(data), 0); /* none yet */
	assert_int_equal(store_clean_mark(data), 0);
	struct stat st;
	assert_int_equal(stat(marker, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	assert_int_equal(store_clean_take(data), 1);
	assert_int_equal(access(marker, F_OK), -1); /* taken: a crash now leaves none */
	assert_int_equal(store_clean_take(data), 0);
	assert_int_equal(store_clean_mark(data), 0);
	FILE *fp = fopen(data, "ab"); /* any write changes size or mtime */
	fputc(0, fp);
	fclose(fp);
	assert_int_equal(store_clean_take(data), -ESTALE);
	unlink(marker);
}

/* LMDB's lock file has blocks for its whole reader table: LMDB writes it
 * through a map, where a hole is SIGBUS on a full disk. */
static void test_lock_reserve(void **state)
{
	struct fx *f = *state;
	char lock[128], sparse[160];
	struct stat st;
	snprintf(lock, sizeof(lock), "%s/lock.mdb", f->dir);
	assert_int_equal(stat(lock, &st), 0);
	assert_true((off_t)st.st_blocks * 512 >= st.st_size);
	/* one LMDB made (ftruncate: all hole) gets its blocks */
	snprintf(sparse, sizeof(sparse), "%s/sparse-lock", f->dir);
	int fd = open(sparse, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, 8192), 0);
	close(fd);
	assert_int_equal(store_lmdb_lock_reserve(sparse, 126, 0600), 0);
	assert_int_equal(stat(sparse, &st), 0);
	assert_true(st.st_size >= 8192);
	assert_true((off_t)st.st_blocks * 512 >= st.st_size);
	unlink(sparse);
	/* not a file LMDB could use: said here, where the name is known */
	snprintf(sparse, sizeof(sparse), "%s/dir-lock", f->dir);
	assert_int_equal(mkdir(sparse, 0700), 0);
	assert_int_equal(store_lmdb_lock_reserve(sparse, 126, 0600), -EISDIR);
	rmdir(sparse);
	snprintf(sparse, sizeof(sparse), "%s/fifo-lock", f->dir);
	assert_int_equal(mkfifo(sparse, 0600), 0);
	assert_int_equal(store_lmdb_lock_reserve(sparse, 126, 0600), -EINVAL);
	unlink(sparse);
	/* nowhere to create it: left to LMDB, which reports it */
	assert_int_equal(store_lmdb_lock_reserve("/nonexistent/lock.mdb", 126, 0600), 0);
}

static void test_lmdb_errors(void **state)
{
	(void)state;
	assert_int_equal(store_lmdb_err("/tmp", MDB_MAP_FULL), IDC_EMAPFULL);
	assert_int_equal(store_lmdb_err("/tmp", MDB_CORRUPTED), IDC_ECORRUPT);
	assert_int_equal(store_lmdb_err("/tmp", ENOSPC), -ENOSPC);
	assert_int_equal(store_lmdb_err(NULL, EIO), -EIO);
}

int main(void)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_open_errors),
	    cmocka_unit_test(test_old_format_refused),
	    T(test_meta_pages),
	    T(test_meta_file_check),
	    T(test_verify_survives_damage),
	    T(test_clean_marker),
	    T(test_lock_reserve),
	    cmocka_unit_test(test_lmdb_errors),
	    cmocka_unit_test(test_bulk_flush_threads),
	    cmocka_unit_test_setup_teardown(test_search_reuse, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_read_txn_renewed, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_search_base_kept, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_add_parent_memo, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_bulk_runs_into_full_index, setup, teardown),
	    T(test_reopen_keeps_data),
	    T(test_txn_nometasync),
	    T(test_add_errors),
	    T(test_add_too_big),
	    T(test_get),
	    T(test_search_scopes),
	    T(test_search_filters),
	    T(test_search_plan),
	    T(test_search_probe),
	    T(test_search_callback_stops),
	    T(test_modify),
	    T(test_replace_counts_commits),
	    T(test_delete),
	    T(test_modrdn),
	    T(test_txn_abort_and_nested),
	    T(test_second_writer),
	    T(test_index_add_remove),
	    T(test_check_finds_faults),
	    T(test_bulk_and_growth),
	    T(test_index_blocks),
	    T(test_long_values),
	    T(test_bulk_key_order),
	    T(test_bulk_sort_keys),
	    T(test_bulk_leaves_keep_slack),
	    T(test_add_checks_and_keys),
	    T(test_add_long_dn_keys),
	    T(test_long_dn_children_hashed),
	    T(test_long_dn_children_past_prefix),
	    T(test_long_dn_parents_first),
	    cmocka_unit_test(test_attr_name_memo),
	    cmocka_unit_test(test_entry_from_pairs_order),
	    cmocka_unit_test(test_entry_codec_round_trip),
	    cmocka_unit_test(test_entry_codec_rejects_garbage),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
