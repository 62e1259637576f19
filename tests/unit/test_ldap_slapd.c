/*
 * The LDAP provider against real slapd instances on loopback (started by
 * tests/ldap/slapd.sh from a generated slapd.conf, fixtures from
 * tests/ldap/fixtures.ldif, certificates from tests/ldap/mkcerts.sh):
 * rfc2307 and rfc2307bis lookups, nested groups with a cycle, paging,
 * coalescing, the negative cache, failover and failback, StartTLS and
 * LDAPS with a test CA, a wrong-hostname certificate, a bad password,
 * offline behaviour, a server that never answers, and servers that stall
 * the TLS handshake (ldaps://, after StartTLS).
 *
 * Servers: A (StartTLS + LDAPS, good certificate), B (plain; failover
 * target), F (plain; stopped and restarted), W (LDAPS with a certificate
 * for another host name).
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
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "ldap_harness.h"
#include "providers/ldap/lprov.h"

#ifndef LDAP_TEST_DIR
#error "LDAP_TEST_DIR must name tests/ldap"
#endif

static char tmp[64];
static int port_a, port_as, port_b, port_f, port_w;

/* ==== servers ================================================================= */

static void start(const char *name, int port, const char *tls_args)
{
	assert_int_equal(lh_sh("%s/slapd.sh start %s/%s %d %s/fixtures.ldif %s >/dev/null",
			       LDAP_TEST_DIR, tmp, name, port, LDAP_TEST_DIR, tls_args),
			 0);
}

static void stop(const char *name)
{
	assert_int_equal(lh_sh("%s/slapd.sh stop %s/%s", LDAP_TEST_DIR, tmp, name), 0);
}

static int setup_servers(void **state)
{
	(void)state;
	snprintf(tmp, sizeof(tmp), "/tmp/idc-ldap-test-%d", (int)getpid());
	if (lh_sh("mkdir -p %s && %s/mkcerts.sh %s/certs", tmp, LDAP_TEST_DIR, tmp))
		return -1;
	port_a = lh_free_port();
	port_as = lh_free_port();
	port_b = lh_free_port();
	port_f = lh_free_port();
	port_w = lh_free_port();
	if (port_a < 0 || port_as < 0 || port_b < 0 || port_f < 0 || port_w < 0)
		return -1;
	char tls[256];
	snprintf(tls, sizeof(tls), "%s/certs %d server", tmp, port_as);
	start("a", port_a, tls);
	start("b", port_b, "");
	start("f", port_f, "");
	snprintf(tls, sizeof(tls), "%s/certs %d wrong", tmp, port_w + 1);
	start("w", port_w, tls);
	port_w++; /* W's LDAPS port */
	return 0;
}

static void stallers_stop(void);

static int teardown_servers(void **state)
{
	(void)state;
	stallers_stop();
	const char *names[] = {"a", "b", "f", "w"};
	for (size_t i = 0; i < IDC_ARRAY_SIZE(names); i++)
		lh_sh("%s/slapd.sh stop %s/%s", LDAP_TEST_DIR, tmp, names[i]);
	if (!getenv("KEEP_LDAP_TEST"))
		lh_sh("rm -rf %s", tmp);
	return 0;
}

/* ==== a domain and its loop ===================================================== */

struct env {
	char dir[128];
	struct cache *cache;
	struct lprov_domain *ld;
	struct lprov_config cfg;
	int ep, cur;
};

/* cache.mdb's first map size for the next env_open (0: the default). */
static size_t env_map_size;

/* Fresh cache and domain; opts are "key=value" strings ending with NULL. */
static void env_open(struct env *e, const char *uri, ...)
{
	static int seq;
	struct idc_diag d = {{0}};
	snprintf(e->dir, sizeof(e->dir), "%s/cache%d", tmp, seq++);
	assert_int_equal(lh_sh("mkdir -p %s", e->dir), 0);
	struct cache_options co = {.nosync = true, .map_size = env_map_size};
	env_map_size = 0;
	assert_int_equal(cache_open(e->dir, &co, &e->cache, &d), 0);
	lprov_config_init(&e->cfg, "dir");
	assert_int_equal(lprov_config_set(&e->cfg, "ldap_uri", uri, &d), 0);
	assert_int_equal(lprov_config_set(&e->cfg, "ldap_search_base", "dc=example,dc=com", &d), 0);
	assert_int_equal(lprov_config_set(&e->cfg, "ldap_network_timeout", "2", &d), 0);
	assert_int_equal(lprov_config_set(&e->cfg, "ldap_search_timeout", "3", &d), 0);
	/* the lookup path's searches, counted one by one (no rootDSE check) */
	assert_int_equal(lprov_config_set(&e->cfg, "ldap_sync", "poll", &d), 0);
	va_list ap;
	va_start(ap, uri);
	for (const char *kv = va_arg(ap, const char *); kv; kv = va_arg(ap, const char *)) {
		char k[128];
		const char *eq = strchr(kv, '=');
		snprintf(k, sizeof(k), "%.*s", (int)(eq - kv), kv);
		if (!strcmp(k, "authtok")) /* the password itself, as idcached hands it */
			assert_int_equal(lprov_config_set_authtok(&e->cfg, eq + 1, strlen(eq + 1)),
					 0);
		else if (lprov_config_set(&e->cfg, k, eq + 1, &d))
			fail_msg("%s", d.msg);
	}
	va_end(ap);
	if (lprov_domain_new(&e->cfg, e->cache, &e->ld, &d))
		fail_msg("%s", d.msg);
	e->ep = epoll_create1(EPOLL_CLOEXEC);
	e->cur = -1;
}

static void env_close(struct env *e)
{
	lprov_domain_free(e->ld);
	lprov_config_free(&e->cfg);
	cache_close(e->cache);
	close(e->ep);
}

/* One turn of the daemon's loop: wait (at most max_ms) and process. */
static void turn(struct env *e, int max_ms)
{
	int fd = -1;
	if (lprov_domain_fds(e->ld, &fd, 1) == 0)
		fd = -1;
	if (fd != e->cur) {
		if (e->cur >= 0)
			epoll_ctl(e->ep, EPOLL_CTL_DEL, e->cur, NULL);
		struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd};
		if (fd >= 0 && epoll_ctl(e->ep, EPOLL_CTL_ADD, fd, &ev))
			fd = -1;
		e->cur = fd;
	}
	int64_t t = lprov_domain_next_timeout(e->ld);
	if (t < 0 || t > max_ms)
		t = max_ms;
	struct epoll_event ev;
	epoll_wait(e->ep, &ev, 1, (int)t);
	lprov_domain_process(e->ld);
}

struct done {
	int calls;
	enum lprov_lookup_result res;
};

static void on_done(enum lprov_lookup_result res, void *arg)
{
	struct done *d = arg;
	d->calls++;
	d->res = res;
}

static void wait_done(struct env *e, struct done *d, int n)
{
	uint64_t until = idc_now_ns() + 20000000000ull;
	while (d->calls < n && idc_now_ns() < until)
		turn(e, 100);
	assert_int_equal(d->calls, n);
}

static enum lprov_lookup_result look(struct env *e, enum lprov_lookup_kind k, const char *name,
				     uint32_t id)
{
	struct done d = {0, 0};
	enum lprov_lookup_result r = lprov_domain_lookup(e->ld, k, name, id, on_done, &d);
	if (r != LPROV_LOOKUP_PENDING)
		return r;
	wait_done(e, &d, 1);
	return d.res;
}

static uint64_t searches(struct env *e)
{
	struct lprov_domain_status st;
	lprov_domain_get_status(e->ld, &st);
	return st.searches;
}

static bool cached_user(struct env *e, const char *name, uint32_t *uid)
{
	struct cache_reader *r;
	const char *doms[] = {"dir"};
	struct cache_user u;
	assert_int_equal(cache_reader_begin(e->cache, &r), 0);
	int rc = cache_user_by_name(r, doms, 1, name, false, &u, NULL);
	if (!rc && uid)
		*uid = u.uid;
	cache_reader_end(r);
	return rc == 0;
}

static char *uri(int port, const char *scheme)
{
	static char buf[4][64];
	static int k;
	char *b = buf[k++ % 4];
	snprintf(b, sizeof(buf[0]), "%s://127.0.0.1:%d", scheme, port);
	return b;
}

/* ==== tests ========================================================================= */

static void test_rfc2307(void **state)
{
	(void)state;
	struct env e;
	env_open(&e, uri(port_b, "ldap"), "ldap_schema=rfc2307", NULL);
	uint32_t uid = 0;
	assert_int_equal(look(&e, LPROV_LOOKUP_PWNAM, "alice", 0), LPROV_LOOKUP_FOUND);
	assert_true(cached_user(&e, "alice", &uid));
	assert_int_equal(uid, 10001);
	assert_int_equal(look(&e, LPROV_LOOKUP_PWUID, NULL, 10002), LPROV_LOOKUP_FOUND);
	assert_true(cached_user(&e, "bob", NULL));
	assert_int_equal(look(&e, LPROV_LOOKUP_INITGROUPS, "alice", 0), LPROV_LOOKUP_FOUND);
	char g[256];
	lh_gids_of(e.cache, "dir", "alice", g, sizeof(g));
	assert_string_equal(g, "20001"); /* memberUid only: the member DNs are 2307bis */
	assert_int_equal(look(&e, LPROV_LOOKUP_GRNAM, "ops", 0), LPROV_LOOKUP_FOUND);
	assert_int_equal(look(&e, LPROV_LOOKUP_GRGID, NULL, 29999), LPROV_LOOKUP_NOTFOUND);
	env_close(&e);
}

/* Both ways of resolving member users: by their RDN, and by batched
 * searches (ldap_member_names_from_rdn=false). */
static void check_rfc2307bis(const char *rdn_opt);

static void test_rfc2307bis_nested_cycle(void **state)
{
	(void)state;
	check_rfc2307bis("ldap_member_names_from_rdn=true");
	check_rfc2307bis("ldap_member_names_from_rdn=false");
}

static void check_rfc2307bis(const char *rdn_opt)
{
	struct env e;
	env_open(&e, uri(port_b, "ldap"), "ldap_schema=rfc2307bis", rdn_opt, NULL);
	uint64_t s0 = searches(&e);
	assert_int_equal(look(&e, LPROV_LOOKUP_INITGROUPS, "alice", 0), LPROV_LOOKUP_FOUND);
	/* user, groups-of, parents x3 levels, members: a handful, not one per member */
	assert_true(searches(&e) - s0 <= 8);
	char g[256];
	lh_gids_of(e.cache, "dir", "alice", g, sizeof(g));
	assert_string_equal(g, "20001,20010,20011,20014"); /* ops, dev, all (nests dev), top */
	assert_int_equal(look(&e, LPROV_LOOKUP_INITGROUPS, "frank", 0), LPROV_LOOKUP_FOUND);
	lh_gids_of(e.cache, "dir", "frank", g, sizeof(g));
	assert_string_equal(g, "20012,20013"); /* c1 <-> c2: the cycle ends */
	/* getgrnam of a nested group stores its member users and groups */
	assert_int_equal(look(&e, LPROV_LOOKUP_GRNAM, "all", 0), LPROV_LOOKUP_FOUND);
	struct cache_reader *r;
	struct cache_group cg;
	const char *doms[] = {"dir"};
	assert_int_equal(cache_reader_begin(e.cache, &r), 0);
	assert_int_equal(cache_group_by_name(r, doms, 1, "all", false, &cg, NULL), 0);
	assert_int_equal(cg.gid, 20011);
	assert_int_equal(cg.nmembers, 1);
	assert_string_equal(cg.members[0], "carol");
	cache_reader_end(r);
	env_close(&e);
}

static void test_coalesce_negative_unchanged(void **state)
{
	(void)state;
	struct env e;
	env_open(&e, uri(port_b, "ldap"), "ldap_schema=rfc2307bis", NULL);
	struct done d = {0, 0};
	uint64_t s0 = searches(&e);
	assert_int_equal(lprov_domain_lookup(e.ld, LPROV_LOOKUP_PWNAM, "bob", 0, on_done, &d),
			 LPROV_LOOKUP_PENDING);
	assert_int_equal(lprov_domain_lookup(e.ld, LPROV_LOOKUP_PWNAM, "BOB", 0, on_done, &d),
			 LPROV_LOOKUP_PENDING);
	wait_done(&e, &d, 2);
	assert_int_equal(d.res, LPROV_LOOKUP_FOUND);
	assert_int_equal(searches(&e) - s0, 1); /* one search for both */
	/* negative cache */
	assert_int_equal(look(&e, LPROV_LOOKUP_PWNAM, "nosuch", 0), LPROV_LOOKUP_NOTFOUND);
	s0 = searches(&e);
	assert_int_equal(lprov_domain_lookup(e.ld, LPROV_LOOKUP_PWNAM, "nosuch", 0, on_done, &d),
			 LPROV_LOOKUP_NOTFOUND);
	assert_int_equal(searches(&e), s0);
	/* a refresh that finds nothing changed writes nothing durable */
	assert_int_equal(look(&e, LPROV_LOOKUP_INITGROUPS, "alice", 0), LPROV_LOOKUP_FOUND);
	uint64_t c0 = cache_durable_commits(e.cache);
	assert_int_equal(look(&e, LPROV_LOOKUP_INITGROUPS, "alice", 0), LPROV_LOOKUP_FOUND);
	assert_int_equal(look(&e, LPROV_LOOKUP_PWNAM, "alice", 0), LPROV_LOOKUP_FOUND);
	assert_int_equal(cache_durable_commits(e.cache), c0);
	env_close(&e);
}

/* Spellings caseIgnore keys alike but a lookup tells apart (straße,
 * strasse: two users in the directory and the cache) share neither a
 * negative-cache entry nor a request; spellings of one name still do. */
static void test_negative_names_apart(void **state)
{
	(void)state;
	struct env e;
	env_open(&e, uri(port_b, "ldap"), "ldap_schema=rfc2307bis", NULL);
	assert_int_equal(look(&e, LPROV_LOOKUP_PWNAM,
			      "nosuchstra\xc3\x9f"
			      "e",
			      0),
			 LPROV_LOOKUP_NOTFOUND);
	uint64_t s0 = searches(&e);
	assert_int_equal(look(&e, LPROV_LOOKUP_PWNAM, "nosuchstrasse", 0), LPROV_LOOKUP_NOTFOUND);
	assert_int_equal(searches(&e) - s0, 1); /* asked for itself */
	s0 = searches(&e);
	/* each keeps its own slot (cache_name_hash); their spellings hit it */
	assert_int_equal(look(&e, LPROV_LOOKUP_PWNAM, "NoSuchStrasse", 0), LPROV_LOOKUP_NOTFOUND);
	assert_int_equal(look(&e, LPROV_LOOKUP_PWNAM, "NOSUCHSTRASSE", 0), LPROV_LOOKUP_NOTFOUND);
	assert_int_equal(look(&e, LPROV_LOOKUP_PWNAM,
			      "NoSuchStra\xc3\x9f"
			      "e",
			      0),
			 LPROV_LOOKUP_NOTFOUND);
	assert_int_equal(searches(&e), s0);
	/* in flight: one request per name, shared by its spellings only */
	struct done d = {0, 0};
	s0 = searches(&e);
	assert_int_equal(lprov_domain_lookup(e.ld, LPROV_LOOKUP_GRNAM,
					     "gstra\xc3\x9f"
					     "e",
					     0, on_done, &d),
			 LPROV_LOOKUP_PENDING);
	assert_int_equal(lprov_domain_lookup(e.ld, LPROV_LOOKUP_GRNAM, "gstrasse", 0, on_done, &d),
			 LPROV_LOOKUP_PENDING);
	assert_int_equal(lprov_domain_lookup(e.ld, LPROV_LOOKUP_GRNAM, "GSTRASSE", 0, on_done, &d),
			 LPROV_LOOKUP_PENDING);
	wait_done(&e, &d, 3);
	assert_int_equal(d.res, LPROV_LOOKUP_NOTFOUND);
	assert_int_equal(searches(&e) - s0, 2);
	env_close(&e);
}

static int count_group(const struct cache_group *g, void *arg)
{
	(void)g;
	(*(size_t *)arg)++;
	return 0;
}

static void test_paging_enumerate(void **state)
{
	(void)state;
	struct env e;
	env_open(&e, uri(port_b, "ldap"), "ldap_schema=rfc2307bis", "ldap_page_size=4",
		 "enumerate=true", NULL);
	uint64_t s0 = searches(&e);
	struct lprov_domain_status st;
	lprov_domain_get_status(e.ld, &st);
	uint64_t k0 = st.commits;
	assert_int_equal(look(&e, LPROV_LOOKUP_ENUMERATE, NULL, 0), LPROV_LOOKUP_FOUND);
	/* 31 groups and 7 users in pages of 4: at least 8 + 2 requests */
	assert_true(searches(&e) - s0 >= 10);
	/* committed page by page, not in one transaction at the end */
	lprov_domain_get_status(e.ld, &st);
	assert_true(st.commits - k0 >= 8);
	size_t n = 0;
	struct cache_reader *r;
	assert_int_equal(cache_reader_begin(e.cache, &r), 0);
	assert_int_equal(cache_enum_groups(r, "dir", count_group, &n), 0);
	cache_reader_end(r);
	assert_int_equal(n, 31);
	/* nested member groups survive the page commits */
	char g[256];
	lh_gids_of(e.cache, "dir", "alice", g, sizeof(g));
	assert_string_equal(g, "20001,20010,20011,20014"); /* ops, dev, all (nests dev), top */
	assert_true(cached_user(&e, "carol", NULL));
	/* enumerating again over an unchanged directory writes nothing durable */
	uint64_t c0 = cache_durable_commits(e.cache);
	assert_int_equal(look(&e, LPROV_LOOKUP_ENUMERATE, NULL, 0), LPROV_LOOKUP_FOUND);
	assert_int_equal(cache_durable_commits(e.cache), c0);
	env_close(&e);
}

/* An enumeration that fills cache.mdb's map grows it and stores all,
 * rather than failing every page and the final transaction. */
static void test_enumerate_grows_a_full_map(void **state)
{
	(void)state;
	struct env e;
	env_map_size = 64 << 10;
	env_open(&e, uri(port_b, "ldap"), "ldap_schema=rfc2307bis", "enumerate=true", NULL);
	assert_int_equal(look(&e, LPROV_LOOKUP_ENUMERATE, NULL, 0), LPROV_LOOKUP_FOUND);
	size_t n = 0;
	struct cache_reader *r;
	assert_int_equal(cache_reader_begin(e.cache, &r), 0);
	assert_int_equal(cache_enum_groups(r, "dir", count_group, &n), 0);
	cache_reader_end(r);
	assert_int_equal(n, 31);
	assert_true(cached_user(&e, "carol", NULL));
	env_close(&e);
}

static bool expired(struct env *e, const char *name, bool group)
{
	struct cache_reader *r;
	const char *doms[] = {"dir"};
	struct cache_user u;
	struct cache_group g;
	struct cache_meta m = {0};
	assert_int_equal(cache_reader_begin(e->cache, &r), 0);
	int rc = group ? cache_group_by_name(r, doms, 1, name, false, &g, &m)
		       : cache_user_by_name(r, doms, 1, name, false, &u, &m);
	cache_reader_end(r);
	assert_int_equal(rc, 0);
	return m.expired;
}

static void test_refresh_expired(void **state)
{
	(void)state;
	struct env e;
	env_open(&e, uri(port_b, "ldap"), "ldap_schema=rfc2307bis", "refresh_expired_interval=0.3",
		 NULL);
	assert_int_equal(look(&e, LPROV_LOOKUP_PWNAM, "alice", 0), LPROV_LOOKUP_FOUND);
	assert_int_equal(look(&e, LPROV_LOOKUP_PWNAM, "bob", 0), LPROV_LOOKUP_FOUND);
	assert_int_equal(look(&e, LPROV_LOOKUP_GRNAM, "all", 0), LPROV_LOOKUP_FOUND);
	struct idc_diag d = {{0}};
	size_t n = 0;
	assert_int_equal(cache_expire(e.cache, "dir", CACHE_ANY, NULL, &n, &d), 0);
	assert_true(n >= 3);
	assert_true(expired(&e, "alice", false));
	uint64_t c0 = cache_durable_commits(e.cache), s0 = searches(&e);
	/* no lookup: the interval alone refreshes them, in batched searches */
	uint64_t t0 = idc_now_ns();
	while (
	    idc_now_ns() - t0 < 1500000000ull &&
	    (expired(&e, "alice", false) || expired(&e, "bob", false) || expired(&e, "all", true)))
		turn(&e, 50);
	assert_false(expired(&e, "alice", false));
	assert_false(expired(&e, "bob", false));
	assert_false(expired(&e, "all", true));
	assert_true(searches(&e) - s0 <= 4); /* users, groups, maybe members */
	/* nothing changed in the directory: nothing durable written */
	assert_int_equal(cache_durable_commits(e.cache), c0);
	/* a run with nothing expired sends nothing */
	s0 = searches(&e);
	t0 = idc_now_ns();
	while (idc_now_ns() - t0 < 400000000ull)
		turn(&e, 50);
	assert_int_equal(searches(&e), s0);
	env_close(&e);
}

static void test_bad_entries(void **state)
{
	(void)state;
	struct env e;
	env_open(&e, uri(port_b, "ldap"), "ldap_schema=rfc2307bis", NULL);
	/* uidNumber beyond 32 bits: skipped (logged once) */
	assert_int_equal(look(&e, LPROV_LOOKUP_PWNAM, "eve", 0), LPROV_LOOKUP_NOTFOUND);
	/* two entries with uid=dup: the first is kept */
	uint32_t uid = 0;
	assert_int_equal(look(&e, LPROV_LOOKUP_PWNAM, "dup", 0), LPROV_LOOKUP_FOUND);
	assert_true(cached_user(&e, "dup", &uid));
	assert_true(uid == 10100 || uid == 10101);
	/* names the cache refuses never reach the directory */
	assert_int_equal(look(&e, LPROV_LOOKUP_PWNAM, "a:b", 0), LPROV_LOOKUP_NOTFOUND);
	assert_int_equal(look(&e, LPROV_LOOKUP_PWNAM, "x)(uid=*", 0), LPROV_LOOKUP_NOTFOUND);
	env_close(&e);
}

/* Change reports (lprov_domain_set_hook), recorded for the tests below. */
struct changes {
	int n, unknown;
	char last[256];
};

static void on_change(const struct cache_change *ch, void *arg)
{
	struct changes *c = arg;
	if (!ch) {
		c->unknown++;
		return;
	}
	c->n++;
	snprintf(c->last, sizeof(c->last), "%s %s:%u>%s:%u m%zu>%zu%s", ch->group ? "g" : "u",
		 ch->old_name ? ch->old_name : "-", (unsigned)ch->old_id,
		 ch->new_name ? ch->new_name : "-", (unsigned)ch->new_id, ch->nold_mem,
		 ch->nnew_mem, ch->nested_changed ? " nested" : "");
}

/* min_id/max_id and passwd fields: uid 0 / gid 0 are ignored by default,
 * ids outside the range never reach the directory, and ':', newlines and
 * control characters in gecos/home/shell make the entry unusable. */
static void test_id_range_and_fields(void **state)
{
	(void)state;
	struct env e;
	env_open(&e, uri(port_b, "ldap"), "ldap_schema=rfc2307bis", NULL);
	assert_int_equal(e.cfg.min_id, 1); /* the default */
	assert_int_equal(look(&e, LPROV_LOOKUP_PWNAM, "root0", 0), LPROV_LOOKUP_NOTFOUND);
	assert_int_equal(look(&e, LPROV_LOOKUP_PWNAM, "gid0", 0), LPROV_LOOKUP_NOTFOUND);
	assert_int_equal(look(&e, LPROV_LOOKUP_GRNAM, "wheel0", 0), LPROV_LOOKUP_NOTFOUND);
	assert_false(cached_user(&e, "root0", NULL));
	uint64_t s0 = searches(&e);
	assert_int_equal(look(&e, LPROV_LOOKUP_PWUID, NULL, 0), LPROV_LOOKUP_NOTFOUND);
	assert_int_equal(look(&e, LPROV_LOOKUP_GRGID, NULL, 0), LPROV_LOOKUP_NOTFOUND);
	assert_int_equal(searches(&e), s0); /* not asked */
	/* alice is in wheel0 (gid 0): not among her groups */
	assert_int_equal(look(&e, LPROV_LOOKUP_INITGROUPS, "alice", 0), LPROV_LOOKUP_FOUND);
	char g[256];
	lh_gids_of(e.cache, "dir", "alice", g, sizeof(g));
	assert_string_equal(g, "20001,20010,20011,20014");
	/* passwd fields */
	assert_int_equal(look(&e, LPROV_LOOKUP_PWNAM, "colon", 0), LPROV_LOOKUP_NOTFOUND);
	assert_int_equal(look(&e, LPROV_LOOKUP_PWNAM, "newline", 0), LPROV_LOOKUP_NOTFOUND);
	assert_int_equal(look(&e, LPROV_LOOKUP_PWNAM, "escape", 0), LPROV_LOOKUP_NOTFOUND);
	assert_int_equal(look(&e, LPROV_LOOKUP_PWUID, NULL, 10201), LPROV_LOOKUP_NOTFOUND);
	assert_false(cached_user(&e, "colon", NULL));
	assert_false(cached_user(&e, "newline", NULL));
	env_close(&e);

	/* min_id = 0 lets uid 0 through; max_id bounds from above */
	env_open(&e, uri(port_b, "ldap"), "min_id=0", "max_id=10002", NULL);
	assert_int_equal(look(&e, LPROV_LOOKUP_PWNAM, "root0", 0), LPROV_LOOKUP_FOUND);
	assert_int_equal(look(&e, LPROV_LOOKUP_PWNAM, "bob", 0), LPROV_LOOKUP_FOUND);
	assert_int_equal(look(&e, LPROV_LOOKUP_PWNAM, "carol", 0), LPROV_LOOKUP_NOTFOUND);
	s0 = searches(&e);
	assert_int_equal(look(&e, LPROV_LOOKUP_PWUID, NULL, 10003), LPROV_LOOKUP_NOTFOUND);
	assert_int_equal(searches(&e), s0);
	assert_int_equal(look(&e, LPROV_LOOKUP_PWUID, NULL, 10002), LPROV_LOOKUP_FOUND);
	env_close(&e);

	/* the option checks */
	struct lprov_config c;
	struct idc_diag d = {{0}};
	lprov_config_init(&c, "x");
	assert_int_equal(lprov_config_set(&c, "max_id", "100", &d), 0);
	assert_int_equal(lprov_config_set(&c, "min_id", "200", &d), -EINVAL);
	assert_non_null(strstr(d.msg, "min_id must not exceed max_id"));
	assert_int_equal(lprov_config_set(&c, "min_id", "-1", &d), -EINVAL);
	assert_int_equal(lprov_config_set(&c, "max_id", "4294967296", &d), -EINVAL);
	assert_int_equal(c.min_id, 1);
	assert_int_equal(c.max_id, 100);
	lprov_config_free(&c);
}

/* The change hook: a first lookup adds, a repeat with the same content
 * reports nothing, a NOTFOUND for a cached name removes. */
static void test_change_hook(void **state)
{
	(void)state;
	struct env e;
	struct changes ch = {0};
	env_open(&e, uri(port_b, "ldap"), "ldap_schema=rfc2307bis", "entry_negative_timeout=0",
		 NULL);
	lprov_domain_set_hook(e.ld, on_change, &ch);
	assert_int_equal(look(&e, LPROV_LOOKUP_PWNAM, "bob", 0), LPROV_LOOKUP_FOUND);
	assert_int_equal(ch.n, 1);
	assert_string_equal(ch.last, "u -:0>bob:10002 m0>0");
	assert_int_equal(look(&e, LPROV_LOOKUP_PWNAM, "bob", 0), LPROV_LOOKUP_FOUND);
	assert_int_equal(ch.n, 1); /* unchanged: nothing to report */
	assert_int_equal(look(&e, LPROV_LOOKUP_GRNAM, "ops", 0), LPROV_LOOKUP_FOUND);
	assert_int_equal(ch.n, 1 + 1);
	assert_non_null(strstr(ch.last, "g -:0>ops:20001"));
	/* a group with a member group (all nests dev): its members' lists move */
	assert_int_equal(look(&e, LPROV_LOOKUP_GRNAM, "all", 0), LPROV_LOOKUP_FOUND);
	assert_true(ch.n >= 3);
	int before = ch.n;
	assert_int_equal(look(&e, LPROV_LOOKUP_GRNAM, "all", 0), LPROV_LOOKUP_FOUND);
	assert_int_equal(ch.n, before);
	assert_int_equal(ch.unknown, 0);
	env_close(&e);
}

static void test_failover_failback(void **state)
{
	(void)state;
	struct env e;
	char uris[128];
	snprintf(uris, sizeof(uris), "%s,%s", uri(port_f, "ldap"), uri(port_b, "ldap"));
	env_open(&e, uris, "failover_primary_timeout=0.5", NULL);
	struct lprov_domain_status st;
	assert_int_equal(look(&e, LPROV_LOOKUP_PWNAM, "alice", 0), LPROV_LOOKUP_FOUND);
	lprov_domain_get_status(e.ld, &st);
	assert_string_equal(st.server, uri(port_f, "ldap"));
	stop("f");
	assert_int_equal(look(&e, LPROV_LOOKUP_PWNAM, "bob", 0), LPROV_LOOKUP_FOUND);
	lprov_domain_get_status(e.ld, &st);
	assert_true(st.online);
	assert_string_equal(st.server, uri(port_b, "ldap"));
	start("f", port_f, "");
	uint64_t until = idc_now_ns() + 700000000ull;
	while (idc_now_ns() < until)
		turn(&e, 50);
	assert_int_equal(look(&e, LPROV_LOOKUP_PWNAM, "carol", 0), LPROV_LOOKUP_FOUND);
	lprov_domain_get_status(e.ld, &st);
	assert_string_equal(st.server, uri(port_f, "ldap")); /* back on the primary */
	env_close(&e);
}

static void test_tls(void **state)
{
	(void)state;
	char ca[128], opt[160];
	snprintf(ca, sizeof(ca), "%s/certs/ca.pem", tmp);
	snprintf(opt, sizeof(opt), "ldap_tls_cacert=%s", ca);
	struct env e;
	struct lprov_domain_status st;
	/* StartTLS, certificate verified against the test CA */
	env_open(&e, uri(port_a, "ldap"), opt, "ldap_id_use_start_tls=true", NULL);
	assert_int_equal(look(&e, LPROV_LOOKUP_PWNAM, "alice", 0), LPROV_LOOKUP_FOUND);
	env_close(&e);
	/* LDAPS */
	env_open(&e, uri(port_as, "ldaps"), opt, NULL);
	assert_int_equal(look(&e, LPROV_LOOKUP_INITGROUPS, "alice", 0), LPROV_LOOKUP_FOUND);
	env_close(&e);
	/* a certificate for another host name is refused */
	env_open(&e, uri(port_w, "ldaps"), opt, NULL);
	assert_int_equal(look(&e, LPROV_LOOKUP_PWNAM, "alice", 0), LPROV_LOOKUP_OFFLINE);
	lprov_domain_get_status(e.ld, &st);
	assert_false(st.online);
	assert_non_null(strstr(st.last_error, "TLS handshake"));
	env_close(&e);
	/* StartTLS without the CA: the chain does not verify */
	env_open(&e, uri(port_a, "ldap"), "ldap_id_use_start_tls=true", NULL);
	assert_int_equal(look(&e, LPROV_LOOKUP_PWNAM, "alice", 0), LPROV_LOOKUP_OFFLINE);
	lprov_domain_get_status(e.ld, &st);
	assert_non_null(strstr(st.last_error, "StartTLS"));
	env_close(&e);
}

static void test_bind(void **state)
{
	(void)state;
	char pw[128], opt[160];
	snprintf(pw, sizeof(pw), "%s/pw", tmp);
	snprintf(opt, sizeof(opt), "ldap_default_authtok_file=%s", pw);
	struct env e;
	assert_int_equal(lh_sh("printf 'secret\\n' > %s && chmod 600 %s", pw, pw), 0);
	/* a password over plain ldap:// needs the explicit override */
	struct idc_diag d = {{0}};
	struct lprov_domain *ld = NULL;
	lprov_config_init(&e.cfg, "dir");
	assert_int_equal(lprov_config_set(&e.cfg, "ldap_uri", uri(port_b, "ldap"), &d), 0);
	assert_int_equal(lprov_config_set(&e.cfg, "ldap_search_base", "dc=x", &d), 0);
	assert_int_equal(lprov_config_set(&e.cfg, "ldap_default_bind_dn", "cn=a,dc=x", &d), 0);
	assert_int_equal(lprov_config_set(&e.cfg, "ldap_default_authtok_file", pw, &d), 0);
	assert_int_equal(lprov_domain_new(&e.cfg, NULL, &ld, &d), -EINVAL);
	assert_non_null(strstr(d.msg, "in clear"));
	lprov_config_free(&e.cfg);
	env_open(&e, uri(port_b, "ldap"), "ldap_default_bind_dn=cn=admin,dc=example,dc=com", opt,
		 "ldap_auth_disable_tls_never_use_in_production=true", NULL);
	assert_int_equal(look(&e, LPROV_LOOKUP_PWNAM, "alice", 0), LPROV_LOOKUP_FOUND);
	env_close(&e);
	/* StartTLS: no override needed */
	char caopt[160];
	snprintf(caopt, sizeof(caopt), "ldap_tls_cacert=%s/certs/ca.pem", tmp);
	env_open(&e, uri(port_a, "ldap"), "ldap_default_bind_dn=cn=admin,dc=example,dc=com", opt,
		 caopt, "ldap_id_use_start_tls=true", NULL);
	assert_int_equal(look(&e, LPROV_LOOKUP_PWNAM, "alice", 0), LPROV_LOOKUP_FOUND);
	env_close(&e);
	/* the secret handed over: the file is never opened (here it is gone) */
	assert_int_equal(lh_sh("rm -f %s", pw), 0);
	env_open(&e, uri(port_b, "ldap"), "ldap_default_bind_dn=cn=admin,dc=example,dc=com", opt,
		 "authtok=secret", "ldap_auth_disable_tls_never_use_in_production=true", NULL);
	assert_int_equal(look(&e, LPROV_LOOKUP_PWNAM, "alice", 0), LPROV_LOOKUP_FOUND);
	env_close(&e);
	/* the provider's own reading refuses a file group or others can read */
	assert_int_equal(lh_sh("printf 'secret\\n' > %s && chmod 640 %s", pw, pw), 0);
	lprov_config_init(&e.cfg, "dir");
	assert_int_equal(lprov_config_set(&e.cfg, "ldap_uri", uri(port_b, "ldap"), &d), 0);
	assert_int_equal(lprov_config_set(&e.cfg, "ldap_search_base", "dc=x", &d), 0);
	assert_int_equal(lprov_config_set(&e.cfg, "ldap_default_bind_dn", "cn=a,dc=x", &d), 0);
	assert_int_equal(lprov_config_set(&e.cfg, "ldap_default_authtok_file", pw, &d), 0);
	assert_int_equal(lprov_config_set(&e.cfg, "ldap_id_use_start_tls", "true", &d), 0);
	assert_int_equal(lprov_domain_new(&e.cfg, NULL, &ld, &d), -EPERM);
	lprov_config_free(&e.cfg);
	assert_int_equal(lh_sh("printf 'wrong\\n' > %s && chmod 600 %s", pw, pw), 0);
	env_open(&e, uri(port_b, "ldap"), "ldap_default_bind_dn=cn=admin,dc=example,dc=com", opt,
		 "ldap_auth_disable_tls_never_use_in_production=true", NULL);
	assert_int_equal(look(&e, LPROV_LOOKUP_PWNAM, "alice", 0), LPROV_LOOKUP_OFFLINE);
	struct lprov_domain_status st;
	lprov_domain_get_status(e.ld, &st);
	assert_non_null(strstr(st.last_error, "Invalid credentials"));
	env_close(&e);
}

static void test_offline(void **state)
{
	(void)state;
	struct env e;
	env_open(&e, uri(port_f, "ldap"), "ldap_schema=rfc2307bis", "offline_timeout=0.3", NULL);
	assert_int_equal(look(&e, LPROV_LOOKUP_INITGROUPS, "alice", 0), LPROV_LOOKUP_FOUND);
	stop("f");
	turn(&e, 50); /* the loop notices the closed connection */
	uint64_t t0 = idc_now_ns();
	assert_int_equal(look(&e, LPROV_LOOKUP_PWNAM, "alice", 0), LPROV_LOOKUP_OFFLINE);
	assert_int_equal(look(&e, LPROV_LOOKUP_PWNAM, "unknown", 0), LPROV_LOOKUP_OFFLINE);
	assert_true(idc_now_ns() - t0 < 100000000ull); /* fast: no waiting per lookup */
	/* what was cached is still there, expired or not */
	assert_true(cached_user(&e, "alice", NULL));
	char g[256];
	lh_gids_of(e.cache, "dir", "alice", g, sizeof(g));
	assert_string_equal(g, "20001,20010,20011,20014");
	assert_false(cached_user(&e, "unknown", NULL));
	struct lprov_domain_status st;
	lprov_domain_get_status(e.ld, &st);
	assert_false(st.online);
	assert_true(st.since > 0);
	/* back: the probe finds the server again */
	start("f", port_f, "");
	uint64_t until = idc_now_ns() + 5000000000ull;
	do {
		turn(&e, 50);
		lprov_domain_get_status(e.ld, &st);
	} while (!st.online && idc_now_ns() < until);
	assert_true(st.online);
	assert_int_equal(look(&e, LPROV_LOOKUP_PWNAM, "bob", 0), LPROV_LOOKUP_FOUND);
	env_close(&e);
}

/* A server that accepts connections and never says a word. */
static void test_silent_server(void **state)
{
	(void)state;
	int s = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(a);
	assert_int_equal(bind(s, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(s, 16), 0);
	assert_int_equal(getsockname(s, (struct sockaddr *)&a, &len), 0);
	int port = ntohs(a.sin_port);
	struct env e;
	env_open(&e, uri(port, "ldap"), "ldap_search_timeout=0.5", "ldap_network_timeout=0.5",
		 NULL);
	uint64_t t0 = idc_now_ns();
	assert_int_equal(look(&e, LPROV_LOOKUP_PWNAM, "alice", 0), LPROV_LOOKUP_OFFLINE);
	uint64_t ms = (idc_now_ns() - t0) / 1000000u;
	assert_true(ms >= 400 && ms < 3000);
	env_close(&e);
	/* StartTLS: the setup gives up after the network timeout */
	env_open(&e, uri(port, "ldap"), "ldap_network_timeout=0.5", "ldap_id_use_start_tls=true",
		 NULL);
	t0 = idc_now_ns();
	assert_int_equal(look(&e, LPROV_LOOKUP_PWNAM, "alice", 0), LPROV_LOOKUP_OFFLINE);
	ms = (idc_now_ns() - t0) / 1000000u;
	assert_true(ms < 3000);
	env_close(&e);
	close(s);
}

/* Wait for a lookup started on a stalled server: every lprov_domain_process
 * call returns at once; the answer (elapsed ms back) comes by the timer. */
static uint64_t wait_stalled(struct env *e, struct done *d, uint64_t t0)
{
	uint64_t worst = 0, until = idc_now_ns() + 10000000000ull;
	while (!d->calls && idc_now_ns() < until) {
		int fd = -1;
		if (lprov_domain_fds(e->ld, &fd, 1) == 0)
			fd = -1;
		if (fd != e->cur) {
			if (e->cur >= 0)
				epoll_ctl(e->ep, EPOLL_CTL_DEL, e->cur, NULL);
			struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd};
			if (fd >= 0 && epoll_ctl(e->ep, EPOLL_CTL_ADD, fd, &ev))
				fd = -1;
			e->cur = fd;
		}
		int64_t t = lprov_domain_next_timeout(e->ld);
		/* the handshake's deadline is a timer; a store at the committer
		 * (commit.c) is waited for on its eventfd */
		assert_true(t >= 0 || fd >= 0);
		struct epoll_event ev;
		epoll_wait(e->ep, &ev, 1, t < 0 || t > 100 ? 100 : (int)t);
		uint64_t p0 = idc_now_ns();
		lprov_domain_process(e->ld);
		uint64_t took = idc_now_ns() - p0;
		worst = took > worst ? took : worst;
	}
	assert_int_equal(d->calls, 1);
	uint64_t ms = (idc_now_ns() - t0) / 1000000u;
	printf("stalled handshake: answered after %llu ms, longest process call %.3f ms\n",
	       (unsigned long long)ms, (double)worst / 1e6);
	assert_true(worst < 50000000ull);
	return ms;
}

/* A server that accepts the connection and never answers the bind (or the
 * StartTLS request): the setup never blocks the caller; the handshake's
 * deadline (ldap_network_timeout) fails the server over, or the domain goes
 * offline. */
static void test_stalled_handshake(void **state)
{
	(void)state;
	int s = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(a);
	assert_int_equal(bind(s, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(s, 16), 0);
	assert_int_equal(getsockname(s, (struct sockaddr *)&a, &len), 0);
	int port = ntohs(a.sin_port);
	struct env e;
	struct lprov_domain_status st;
	/* plain bind, one server: pending at once, offline after the deadline */
	env_open(&e, uri(port, "ldap"), "ldap_network_timeout=0.5",
		 "ldap_default_bind_dn=cn=admin,dc=example,dc=com", "authtok=secret",
		 "ldap_auth_disable_tls_never_use_in_production=true", NULL);
	struct done d = {0, 0};
	uint64_t t0 = idc_now_ns();
	assert_int_equal(lprov_domain_lookup(e.ld, LPROV_LOOKUP_PWNAM, "alice", 0, on_done, &d),
			 LPROV_LOOKUP_PENDING);
	uint64_t call_ms = (idc_now_ns() - t0) / 1000000u;
	printf("stalled bind: lprov_domain_lookup returned after %llu ms\n",
	       (unsigned long long)call_ms);
	assert_true(call_ms < 100);
	/* a second lookup meanwhile waits for the same connection */
	struct done d2 = {0, 0};
	assert_int_equal(lprov_domain_lookup(e.ld, LPROV_LOOKUP_GRNAM, "top", 0, on_done, &d2),
			 LPROV_LOOKUP_PENDING);
	uint64_t ms = wait_stalled(&e, &d, t0);
	assert_int_equal(d.res, LPROV_LOOKUP_OFFLINE);
	assert_int_equal(d2.calls, 1);
	assert_int_equal(d2.res, LPROV_LOOKUP_OFFLINE);
	assert_true(ms >= 450 && ms < 3000);
	lprov_domain_get_status(e.ld, &st);
	assert_false(st.online);
	assert_non_null(strstr(st.last_error, "bind"));
	assert_non_null(strstr(st.last_error, "Timed out"));
	env_close(&e);
	/* failover: the stalled primary, then a real server */
	char uris[160];
	snprintf(uris, sizeof(uris), "%s,%s", uri(port, "ldap"), uri(port_b, "ldap"));
	env_open(&e, uris, "ldap_network_timeout=0.5",
		 "ldap_default_bind_dn=cn=admin,dc=example,dc=com", "authtok=secret",
		 "ldap_auth_disable_tls_never_use_in_production=true", NULL);
	d = (struct done){0, 0};
	t0 = idc_now_ns();
	assert_int_equal(lprov_domain_lookup(e.ld, LPROV_LOOKUP_PWNAM, "alice", 0, on_done, &d),
			 LPROV_LOOKUP_PENDING);
	assert_true(idc_now_ns() - t0 < 100000000ull);
	ms = wait_stalled(&e, &d, t0);
	assert_int_equal(d.res, LPROV_LOOKUP_FOUND);
	assert_true(ms >= 450 && ms < 3000);
	lprov_domain_get_status(e.ld, &st);
	assert_true(st.online);
	assert_string_equal(st.server, uri(port_b, "ldap"));
	assert_true(cached_user(&e, "alice", NULL));
	env_close(&e);
	/* StartTLS never answered: the same, named "StartTLS" */
	env_open(&e, uri(port, "ldap"), "ldap_network_timeout=0.5", "ldap_id_use_start_tls=true",
		 NULL);
	d = (struct done){0, 0};
	t0 = idc_now_ns();
	assert_int_equal(lprov_domain_lookup(e.ld, LPROV_LOOKUP_PWNAM, "alice", 0, on_done, &d),
			 LPROV_LOOKUP_PENDING);
	assert_true(idc_now_ns() - t0 < 100000000ull);
	ms = wait_stalled(&e, &d, t0);
	assert_int_equal(d.res, LPROV_LOOKUP_OFFLINE);
	assert_true(ms >= 450 && ms < 3000);
	lprov_domain_get_status(e.ld, &st);
	assert_non_null(strstr(st.last_error, "StartTLS"));
	env_close(&e);
	close(s);
}

/* ==== servers that stall the TLS handshake ====================================== */

/* A loopback listener (port in *port) that the kernel completes TCP
 * connections for and nobody ever reads: an ldaps:// server that never
 * answers the ClientHello. */
static int mute_listener(int *port)
{
	int s = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(a);
	assert_true(s >= 0);
	assert_int_equal(bind(s, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(s, 16), 0);
	assert_int_equal(getsockname(s, (struct sockaddr *)&a, &len), 0);
	*port = ntohs(a.sin_port);
	return s;
}

/* The StartTLS extended request in req (n bytes) answered with success: an
 * ExtendedResponse (RFC 4511 4.12, 4.14.2) with the request's message id,
 * resultCode 0, empty matchedDN and diagnosticMessage, and responseName
 * 1.3.6.1.4.1.1466.20037. Its length, or 0 when req is not an LDAPMessage
 * with a short message id. */
static size_t starttls_reply(const unsigned char *req, size_t n, unsigned char *out)
{
	static const char oid[] = "1.3.6.1.4.1.1466.20037";
	static const unsigned char result[] = {0x0a, 1, 0, 0x04, 0, 0x04, 0};
	size_t at = 2 + ((n > 1 && (req[1] & 0x80)) ? (req[1] & 0x7f) : 0); /* messageID */
	if (n < at + 3 || req[0] != 0x30 || req[at] != 0x02 || req[at + 1] > 4 ||
	    n < at + 2 + req[at + 1])
		return 0;
	size_t id = 2 + req[at + 1], body = sizeof(result) + 2 + (sizeof(oid) - 1), k = 0;
	out[k++] = 0x30; /* LDAPMessage */
	out[k++] = (unsigned char)(id + 2 + body);
	memcpy(out + k, req + at, id);
	k += id;
	out[k++] = 0x78; /* [APPLICATION 24] ExtendedResponse */
	out[k++] = (unsigned char)body;
	memcpy(out + k, result, sizeof(result));
	k += sizeof(result);
	out[k++] = 0x8a; /* [10] responseName */
	out[k++] = sizeof(oid) - 1;
	memcpy(out + k, oid, sizeof(oid) - 1);
	return k + sizeof(oid) - 1;
}

/* The staller's side of one connection: read what the client sends first,
 * then (mode 's') accept StartTLS or (mode 'p', after a ClientHello) send
 * the first 5 bytes of a TLS record that promises 64 more. Either way the
 * connection then stays open and silent. */
static void stall_one(int c, char mode)
{
	unsigned char in[4096], out[64];
	ssize_t n = read(c, in, sizeof(in));
	if (n <= 0)
		return;
	size_t k = 0;
	if (mode == 's') {
		k = starttls_reply(in, (size_t)n, out);
	} else if (mode == 'p') {
		static const unsigned char head[] = {0x16, 0x03, 0x03, 0x00, 0x40};
		memcpy(out, head, sizeof(head));
		k = sizeof(head);
	}
	if (k && write(c, out, k) != (ssize_t)k)
		return;
}

static pid_t stallers[4];

/* A staller (see stall_one) in a child process on a free loopback port;
 * stopped by stallers_stop. */
static int staller_start(char mode)
{
	int port;
	int s = mute_listener(&port);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL); /* gone with the test, however it ends */
		for (;;) {
			int c = accept(s, NULL, NULL);
			if (c >= 0)
				stall_one(c, mode); /* c stays open until the child is killed */
		}
	}
	close(s);
	for (size_t i = 0; i < IDC_ARRAY_SIZE(stallers); i++)
		if (!stallers[i]) {
			stallers[i] = pid;
			return port;
		}
	fail_msg("too many stallers");
	return -1;
}

static void stallers_stop(void)
{
	for (size_t i = 0; i < IDC_ARRAY_SIZE(stallers); i++)
		if (stallers[i]) {
			kill(stallers[i], SIGKILL);
			waitpid(stallers[i], NULL, 0);
			stallers[i] = 0;
		}
}

/* Start a lookup of alice on e: it must be pending at once, and the
 * callback is to come from the loop (wait_stalled). */
static uint64_t start_stalled(struct env *e, struct done *d)
{
	*d = (struct done){0, 0};
	uint64_t t0 = idc_now_ns();
	assert_int_equal(lprov_domain_lookup(e->ld, LPROV_LOOKUP_PWNAM, "alice", 0, on_done, d),
			 LPROV_LOOKUP_PENDING);
	uint64_t ms = (idc_now_ns() - t0) / 1000000u;
	printf("stalled TLS: lprov_domain_lookup returned after %llu ms\n", (unsigned long long)ms);
	assert_true(ms < 100);
	return t0;
}

static void assert_error(struct env *e, const char *a, const char *b)
{
	struct lprov_domain_status st;
	lprov_domain_get_status(e->ld, &st);
	if (!strstr(st.last_error, a) || !strstr(st.last_error, b))
		fail_msg("last_error \"%s\": want \"%s\" and \"%s\"", st.last_error, a, b);
}

/* Servers that complete the TCP connect and then stall the TLS handshake:
 * the handshake runs off the loop (every lprov_domain_process call returns
 * at once), its deadline (ldap_network_timeout) fails the server over to
 * the next URI, or the domain goes offline. First ldaps:// that never
 * answers the ClientHello. */
static void test_stalled_ldaps_handshake(void **state)
{
	(void)state;
	char ca[160], uris[200];
	snprintf(ca, sizeof(ca), "ldap_tls_cacert=%s/certs/ca.pem", tmp);
	int port;
	int mute = mute_listener(&port);
	struct env e;
	struct done d;
	struct lprov_domain_status st;
	/* one server: offline after the deadline */
	env_open(&e, uri(port, "ldaps"), ca, "ldap_network_timeout=0.5", NULL);
	uint64_t ms = wait_stalled(&e, &d, start_stalled(&e, &d));
	assert_int_equal(d.res, LPROV_LOOKUP_OFFLINE);
	assert_true(ms >= 450 && ms < 3000);
	assert_error(&e, "TLS handshake", "Timed out");
	env_close(&e);
	/* then a real server */
	snprintf(uris, sizeof(uris), "%s,%s", uri(port, "ldaps"), uri(port_b, "ldap"));
	env_open(&e, uris, ca, "ldap_network_timeout=0.5", NULL);
	ms = wait_stalled(&e, &d, start_stalled(&e, &d));
	assert_int_equal(d.res, LPROV_LOOKUP_FOUND);
	assert_true(ms >= 450 && ms < 3000);
	lprov_domain_get_status(e.ld, &st);
	assert_string_equal(st.server, uri(port_b, "ldap"));
	assert_true(cached_user(&e, "alice", NULL));
	env_close(&e);
	close(mute);
}

/* A server that accepts StartTLS and then never answers the ClientHello. */
static void test_stalled_starttls_handshake(void **state)
{
	(void)state;
	char ca[160], uris[200];
	snprintf(ca, sizeof(ca), "ldap_tls_cacert=%s/certs/ca.pem", tmp);
	int port = staller_start('s');
	struct env e;
	struct done d;
	struct lprov_domain_status st;
	env_open(&e, uri(port, "ldap"), ca, "ldap_id_use_start_tls=true",
		 "ldap_network_timeout=0.5", NULL);
	uint64_t ms = wait_stalled(&e, &d, start_stalled(&e, &d));
	assert_int_equal(d.res, LPROV_LOOKUP_OFFLINE);
	assert_true(ms >= 450 && ms < 3000);
	assert_error(&e, "TLS handshake after StartTLS", "Timed out");
	env_close(&e);
	/* then a real StartTLS server */
	snprintf(uris, sizeof(uris), "%s,%s", uri(port, "ldap"), uri(port_a, "ldap"));
	env_open(&e, uris, ca, "ldap_id_use_start_tls=true", "ldap_network_timeout=0.5", NULL);
	ms = wait_stalled(&e, &d, start_stalled(&e, &d));
	assert_int_equal(d.res, LPROV_LOOKUP_FOUND);
	assert_true(ms >= 450 && ms < 3000);
	lprov_domain_get_status(e.ld, &st);
	assert_string_equal(st.server, uri(port_a, "ldap"));
	env_close(&e);
	stallers_stop();
}

/* The first bytes of a reply to the ClientHello, then silence: past its
 * first read libldap waits in blocking mode with no bound of its own. */
static void test_partial_tls_reply(void **state)
{
	(void)state;
	char ca[160];
	snprintf(ca, sizeof(ca), "ldap_tls_cacert=%s/certs/ca.pem", tmp);
	int port = staller_start('p');
	struct env e;
	struct done d;
	env_open(&e, uri(port, "ldaps"), ca, "ldap_network_timeout=0.5", NULL);
	uint64_t ms = wait_stalled(&e, &d, start_stalled(&e, &d));
	assert_int_equal(d.res, LPROV_LOOKUP_OFFLINE);
	assert_true(ms >= 450 && ms < 3000);
	assert_error(&e, "TLS handshake", "Timed out");
	env_close(&e);
	stallers_stop();
}

/* The domain freed while a handshake stalls: the helper thread is ended
 * and joined at once (no wait for ldap_network_timeout), the lookup
 * completes as FAILED; under valgrind nothing leaks. */
static void test_free_during_tls_handshake(void **state)
{
	(void)state;
	int port;
	int mute = mute_listener(&port);
	struct env e;
	struct done d;
	env_open(&e, uri(port, "ldaps"), "ldap_network_timeout=30", NULL);
	start_stalled(&e, &d);
	for (int i = 0; i < 5; i++)
		turn(&e, 20); /* the helper is waiting for the ServerHello */
	assert_int_equal(d.calls, 0);
	uint64_t t0 = idc_now_ns();
	env_close(&e);
	uint64_t ms = (idc_now_ns() - t0) / 1000000u;
	printf("domain freed during a stalled TLS handshake in %llu ms\n", (unsigned long long)ms);
	assert_int_equal(d.calls, 1);
	assert_int_equal(d.res, LPROV_LOOKUP_FAILED);
	assert_true(ms < 1000);
	close(mute);
}

int main(void)
{
	/* Without Debian's slapd, ldap-utils and openssl there is nothing to
	 * test against: tell meson "skipped". */
	if (access("/usr/sbin/slapd", X_OK) || lh_sh("command -v ldapadd openssl >/dev/null"))
		return 77;
	idc_log_init("test_ldap_slapd", true,
		     getenv("LDAP_TEST_DEBUG") ? IDC_LOG_DEBUG : IDC_LOG_ERR);
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_rfc2307),
	    cmocka_unit_test(test_rfc2307bis_nested_cycle),
	    cmocka_unit_test(test_coalesce_negative_unchanged),
	    cmocka_unit_test(test_negative_names_apart),
	    cmocka_unit_test(test_paging_enumerate),
	    cmocka_unit_test(test_enumerate_grows_a_full_map),
	    cmocka_unit_test(test_refresh_expired),
	    cmocka_unit_test(test_bad_entries),
	    cmocka_unit_test(test_id_range_and_fields),
	    cmocka_unit_test(test_change_hook),
	    cmocka_unit_test(test_failover_failback),
	    cmocka_unit_test(test_tls),
	    cmocka_unit_test(test_bind),
	    cmocka_unit_test(test_offline),
	    cmocka_unit_test(test_silent_server),
	    cmocka_unit_test(test_stalled_handshake),
	    cmocka_unit_test(test_stalled_ldaps_handshake),
	    cmocka_unit_test(test_stalled_starttls_handshake),
	    cmocka_unit_test(test_partial_tls_reply),
	    cmocka_unit_test(test_free_during_tls_handshake),
	};
	/* LDAP_TEST_FILTER=test_partial*: run some tests only */
	if (getenv("LDAP_TEST_FILTER"))
		cmocka_set_test_filter(getenv("LDAP_TEST_FILTER"));
	return cmocka_run_group_tests(tests, setup_servers, teardown_servers);
}
