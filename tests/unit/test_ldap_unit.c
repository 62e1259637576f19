/* Unit tests of the LDAP provider's pure parts: options, DN normalization
 * and first-RDN extraction, filter escaping, "logged once", the domain
 * lifecycle without a server. */
#include <errno.h>
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

#include "providers/ldap/lprov_int.h"

static void test_options(void **state)
{
	(void)state;
	struct lprov_config c;
	struct idc_diag d = {{0}};
	assert_int_equal(lprov_config_init(&c, "dir"), 0);
	assert_int_equal(c.tls_reqcert, LPROV_REQCERT_DEMAND);
	assert_false(c.enumerate);
	assert_int_equal(lprov_config_set(&c, "ldap_uri", "ldap://127.0.0.1:1, ldaps://h:2", &d),
			 0);
	assert_int_equal(c.nuris, 2);
	assert_string_equal(c.uris[1], "ldaps://h:2");
	assert_int_equal(lprov_config_set(&c, "ldap_uri", "http://x", &d), -EINVAL);
	assert_int_equal(lprov_config_set(&c, "ldap_network_timeout", "0.25", &d), 0);
	assert_int_equal(c.network_timeout_ms, 250);
	assert_int_equal(lprov_config_set(&c, "ldap_search_timeout", "x", &d), -EINVAL);
	assert_int_equal(lprov_config_set(&c, "no_such_key", "1", &d), -ENOENT);
	assert_int_equal(lprov_config_set(&c, "ldap_schema", "rfc2307bis", &d), 0);
	assert_string_equal(lp_attr(&c, LPROV_MAP_GROUP_MEMBER), "member");
	assert_int_equal(lprov_config_set(&c, "ldap_schema", "rfc2307", &d), 0);
	assert_string_equal(lp_attr(&c, LPROV_MAP_GROUP_MEMBER), "memberUid");
	assert_int_equal(lprov_config_set(&c, "ldap_group_member", "uniqueMember", &d), 0);
	assert_string_equal(lp_attr(&c, LPROV_MAP_GROUP_MEMBER), "uniqueMember");
	assert_int_equal(lprov_config_set(&c, "ldap_tls_reqcert", "never", &d), 0);
	assert_int_equal(c.tls_reqcert, LPROV_REQCERT_NEVER);
	assert_int_equal(lprov_config_check(&c, &d), -EINVAL); /* no base */
	assert_int_equal(lprov_config_set(&c, "ldap_search_base", "dc=x", &d), 0);
	assert_int_equal(lprov_config_check(&c, &d), 0);
	assert_int_equal(lprov_config_set(&c, "ldap_default_bind_dn", "cn=a,dc=x", &d), 0);
	assert_int_equal(lprov_config_check(&c, &d), -EINVAL); /* no password file */
	lprov_config_free(&c);
}

/* What a directory may make a request cost: defaults, sizes, checks. */
static void test_limits(void **state)
{
	(void)state;
	struct lprov_config c;
	struct idc_diag d = {{0}};
	assert_int_equal(lprov_config_init(&c, "dir"), 0);
	assert_int_equal(c.max_reply_bytes, 64u << 20);
	assert_int_equal(c.max_entries, 100000);
	assert_int_equal(c.nesting_level, 32);
	assert_int_equal(c.max_searches, 500);
	assert_int_equal(c.max_memory, 128u << 20);
	lprov_config_set(&c, "ldap_uri", "ldap://127.0.0.1:1", &d);
	lprov_config_set(&c, "ldap_search_base", "dc=x", &d);
	const struct {
		const char *v;
		int rc;
		uint32_t bytes;
	} sizes[] = {{"65536", 0, 65536},        {"64k", 0, 65536},   {"16M", 0, 16u << 20},
		     {"2G", 0, 1u << 31},        {"3G", -EINVAL, 0},  {"", -EINVAL, 0},
		     {"k", -EINVAL, 0},          {"12x", -EINVAL, 0}, {"-1", -EINVAL, 0},
		     {"99999999999", -EINVAL, 0}};
	for (size_t i = 0; i < IDC_ARRAY_SIZE(sizes); i++) {
		c.max_reply_bytes = 7;
		assert_int_equal(lprov_config_set(&c, "ldap_max_reply_size", sizes[i].v, &d),
				 sizes[i].rc);
		assert_int_equal(c.max_reply_bytes, sizes[i].rc ? 7 : sizes[i].bytes);
	}
	assert_int_equal(lprov_config_set(&c, "ldap_max_reply_size", "1k", &d), 0);
	assert_int_equal(lprov_config_check(&c, &d), -EINVAL); /* below LP_REPLY_MIN */
	assert_non_null(strstr(d.msg, "ldap_max_reply_size"));
	assert_int_equal(lprov_config_set(&c, "ldap_max_reply_size", "1M", &d), 0);
	assert_int_equal(lprov_config_check(&c, &d), 0);
	assert_int_equal(lprov_config_set(&c, "ldap_max_memory", "512k", &d), 0);
	assert_int_equal(lprov_config_check(&c, &d), -EINVAL); /* below LP_MEMORY_MIN */
	assert_int_equal(lprov_config_set(&c, "ldap_max_memory", "1G", &d), 0);
	assert_int_equal(c.max_memory, 1u << 30);
	assert_int_equal(lprov_config_check(&c, &d), 0);
	assert_int_equal(lprov_config_set(&c, "ldap_max_entries", "0", &d), 0);
	assert_int_equal(lprov_config_check(&c, &d), -EINVAL);
	assert_int_equal(lprov_config_set(&c, "ldap_max_entries", "5", &d), 0);
	assert_int_equal(lprov_config_set(&c, "ldap_max_searches", "0", &d), 0);
	assert_int_equal(lprov_config_check(&c, &d), -EINVAL);
	assert_int_equal(lprov_config_set(&c, "ldap_max_searches", "7", &d), 0);
	assert_int_equal(lprov_config_set(&c, "ldap_group_nesting_level", "0", &d), 0);
	assert_int_equal(lprov_config_check(&c, &d), 0);
	assert_int_equal(lprov_config_set(&c, "ldap_group_nesting_level", "1001", &d), 0);
	assert_int_equal(lprov_config_check(&c, &d), -EINVAL);
	assert_int_equal(lprov_config_set(&c, "ldap_group_nesting_level", "x", &d), -EINVAL);
	lprov_config_free(&c);
}

static void test_req_describe(void **state)
{
	(void)state;
	char buf[96];
	struct lp_req r = {.kind = LPROV_LOOKUP_PWNAM, .name = (char *)"alice"};
	lp_req_describe(&r, buf, sizeof(buf));
	assert_string_equal(buf, "getpwnam alice");
	r = (struct lp_req){.kind = LPROV_LOOKUP_GRGID, .id = 42};
	lp_req_describe(&r, buf, sizeof(buf));
	assert_string_equal(buf, "getgrgid 42");
	r = (struct lp_req){.kind = LPROV_LOOKUP_ENUMERATE};
	lp_req_describe(&r, buf, sizeof(buf));
	assert_string_equal(buf, "enumeration");
	r = (struct lp_req){.kind = LP_REFRESH};
	lp_req_describe(&r, buf, sizeof(buf));
	assert_string_equal(buf, "refresh of expired entries");
}

static void test_dn(void **state)
{
	(void)state;
	struct idc_arena a = IDC_ARENA_INIT;
	const char *plain = "uid=Alice,ou=People,dc=Example,dc=com";
	assert_string_equal(lp_dn_normalize(&a, plain, strlen(plain)),
			    "uid=alice,ou=people,dc=example,dc=com");
	const char *spaced = "uid = Bob , ou=people, dc=example,dc=com";
	assert_string_equal(lp_dn_normalize(&a, spaced, strlen(spaced)),
			    "uid=bob,ou=people,dc=example,dc=com");
	const char *esc = "cn=Smith\\, John,dc=x";
	char *n = lp_dn_normalize(&a, esc, strlen(esc));
	assert_non_null(n);
	char *attr, *value;
	assert_int_equal(lp_dn_first_ava(&a, n, &attr, &value), 0);
	assert_string_equal(attr, "cn");
	assert_string_equal(value, "smith, john");
	assert_int_equal(lp_dn_first_ava(&a, "uid=x,dc=y", &attr, &value), 0);
	assert_string_equal(value, "x");
	const char *bad[] = {"not a dn", "=x,dc=y", "uid=x,,dc=y", "uid"};
	for (size_t i = 0; i < IDC_ARRAY_SIZE(bad); i++)
		assert_null(lp_dn_normalize(&a, bad[i], strlen(bad[i])));
	assert_null(lp_dn_normalize(&a, "uid=a\0b,dc=x", 12));
	/* Beyond ASCII, values fold as the store compares them (caseIgnore:
	 * Unicode case folding and NFKC), and the normal form is a fixed point. */
	const char *upper = "uid=\xc3\x89MILE,ou=People,dc=x";
	const char *lower = "uid=\xc3\xa9mile,ou=people,dc=x";
	char *nu = lp_dn_normalize(&a, upper, strlen(upper));
	char *nl = lp_dn_normalize(&a, lower, strlen(lower));
	assert_non_null(nu);
	assert_non_null(nl);
	assert_string_equal(nu, nl);
	assert_string_equal(lp_dn_normalize(&a, nu, strlen(nu)), nu);
	const char *wide = "uid=\xef\xbc\xa1lice,dc=x"; /* fullwidth A: NFKC makes it "a" */
	assert_string_equal(lp_dn_normalize(&a, wide, strlen(wide)), "uid=alice,dc=x");
	assert_int_equal(lp_dn_first_ava(&a, nu, &attr, &value), 0);
	assert_string_equal(value, "\xc3\xa9mile");
	/* An escaped NUL is not cut short by the folding. */
	const char *nul = "uid=\xc3\xa9\\00x,dc=x";
	char *nn = lp_dn_normalize(&a, nul, strlen(nul));
	assert_true(!nn || strcmp(nn, "uid=\xc3\xa9,dc=x") != 0);
	assert_true(lp_dn_under("uid=a,dc=x", "dc=x"));
	assert_true(lp_dn_under("dc=x", "dc=x"));
	assert_false(lp_dn_under("uid=a,dc=xx", "dc=x"));
	assert_false(lp_dn_under("uid=a,adc=x", "dc=x"));
	idc_arena_free(&a);
}

static void test_filter_escape(void **state)
{
	(void)state;
	struct idc_buf b = IDC_BUF_INIT;
	assert_int_equal(lp_filter_escape(&b, "a*(b)\\c", 7), 0);
	assert_string_equal(b.data, "a\\2a\\28b\\29\\5cc");
	idc_buf_free(&b);
}

static void test_map(void **state)
{
	(void)state;
	struct lp_map m = {0};
	char keys[2000][16];
	for (int i = 0; i < 2000; i++) {
		snprintf(keys[i], sizeof(keys[i]), "k%d", i);
		assert_int_equal(lp_map_put(&m, keys[i], keys[i]), 0);
	}
	assert_int_equal(lp_map_put(&m, "k7", NULL), 1);
	for (int i = 0; i < 2000; i++)
		assert_ptr_equal(lp_map_get(&m, keys[i]), keys[i]);
	assert_null(lp_map_get(&m, "nope"));
	lp_map_free(&m);
}

/* ==== logged once ======================================================= */

/* A domain that never connects (nothing listens on port 1). */
static struct lprov_domain *quiet_domain(struct lprov_config *cfg)
{
	struct idc_diag d = {{0}};
	struct lprov_domain *ld;
	lprov_config_init(cfg, "dir");
	lprov_config_set(cfg, "ldap_uri", "ldap://127.0.0.1:1", &d);
	lprov_config_set(cfg, "ldap_search_base", "dc=example,dc=com", &d);
	assert_int_equal(lprov_domain_new(cfg, NULL, &ld, &d), 0);
	return ld;
}

/* stderr (where idc_log writes) into a temporary file until log_end. */
struct captured {
	FILE *f;
	int saved;
};

static void log_begin(struct captured *c)
{
	fflush(stderr);
	c->f = tmpfile();
	assert_non_null(c->f);
	c->saved = dup(2);
	assert_true(c->saved >= 0);
	assert_int_equal(dup2(fileno(c->f), 2), 2);
}

/* The captured lines; NUL-separated in the returned buffer, *n of them. */
static char *log_end(struct captured *c, size_t *n)
{
	fflush(stderr);
	assert_int_equal(dup2(c->saved, 2), 2);
	close(c->saved);
	long len = ftell(c->f);
	assert_true(len >= 0);
	char *text = calloc(1, (size_t)len + 1);
	assert_non_null(text);
	rewind(c->f);
	assert_int_equal(fread(text, 1, (size_t)len, c->f), (size_t)len);
	fclose(c->f);
	*n = 0;
	for (char *p = text; *p; p++)
		if (*p == '\n') {
			*p = '\0';
			(*n)++;
		}
	return text;
}

/* How often "msg <i>;" was logged, for each i < max, into count[]; the
 * number of lines that are none of them into *other. */
static void count_msgs(const char *text, size_t nlines, unsigned *count, size_t max, size_t *other,
		       size_t *suppressed)
{
	const char *p = text;
	*other = *suppressed = 0;
	for (size_t l = 0; l < nlines; l++, p += strlen(p) + 1) {
		const char *m = strstr(p, "msg ");
		char *end;
		unsigned long i = m ? strtoul(m + 4, &end, 10) : 0;
		if (m && *end == ';' && i < max)
			count[i]++;
		else if (strstr(p, "further distinct warnings suppressed"))
			(*suppressed)++;
		else
			(*other)++;
	}
}

/* Many distinct messages, each repeated later in another order: each
 * appears exactly once (a table where two messages can share a slot
 * evicts one and logs it again). */
static void test_log_once_exact(void **state)
{
	(void)state;
	enum { N = 12000 };
	struct lprov_config cfg;
	struct lprov_domain *ld = quiet_domain(&cfg);
	unsigned *count = calloc(N + 1, sizeof(*count));
	assert_non_null(count);
	idc_log_init("test_ldap_unit", true, IDC_LOG_WARN);
	struct captured c;
	log_begin(&c);
	for (int round = 0; round < 3; round++)
		for (unsigned i = 0; i < N; i++) {
			unsigned k = round == 1 ? N - 1 - i : (i * 7919u) % N;
			lp_log_once(ld, IDC_LOG_WARN, "entry \"uid=u%u,dc=x\": msg %u; skipped", k,
				    k);
		}
	/* above the log level: neither logged nor remembered */
	lp_log_once(ld, IDC_LOG_INFO, "msg %u; info", (unsigned)N);
	size_t nlines, other, suppressed;
	char *text = log_end(&c, &nlines);
	idc_log_init("test_ldap_unit", true, IDC_LOG_ERR);
	count_msgs(text, nlines, count, N + 1, &other, &suppressed);
	for (unsigned i = 0; i < N; i++)
		if (count[i] != 1)
			fail_msg("message %u logged %u times", i, count[i]);
	assert_int_equal(count[N], 0);
	assert_int_equal(other + suppressed, 0);
	assert_int_equal(nlines, N);
	free(text);
	free(count);
	lprov_domain_free(ld);
	lprov_config_free(&cfg);
}

/* Past LP_LOGGED_MAX distinct messages: one line says further ones are
 * suppressed, none of them is logged, the remembered ones stay silent,
 * and the set stops growing. */
static void test_log_once_cap(void **state)
{
	(void)state;
	enum { N = LP_LOGGED_MAX + 3000 };
	struct lprov_config cfg;
	struct lprov_domain *ld = quiet_domain(&cfg);
	unsigned *count = calloc(N, sizeof(*count));
	assert_non_null(count);
	idc_log_init("test_ldap_unit", true, IDC_LOG_WARN);
	struct captured c;
	log_begin(&c);
	for (int round = 0; round < 2; round++)
		for (unsigned i = 0; i < N; i++)
			lp_log_once(ld, IDC_LOG_ERR, "msg %u; bad", i);
	size_t nlines, other, suppressed;
	char *text = log_end(&c, &nlines);
	idc_log_init("test_ldap_unit", true, IDC_LOG_ERR);
	count_msgs(text, nlines, count, N, &other, &suppressed);
	for (unsigned i = 0; i < N; i++)
		if (count[i] != (i < LP_LOGGED_MAX ? 1u : 0u))
			fail_msg("message %u logged %u times", i, count[i]);
	assert_int_equal(suppressed, 1);
	assert_int_equal(other, 0);
	assert_int_equal(ld->logged.t.used, LP_LOGGED_MAX);
	/* 256 KiB at most, the table of the last growth copied and freed */
	assert_true(idc_oat_bytes(&ld->logged.t, sizeof(uint64_t)) <=
		    2 * (size_t)LP_LOGGED_MAX * sizeof(uint64_t));
	free(text);
	free(count);
	lprov_domain_free(ld);
	lprov_config_free(&cfg);
}

static void test_hset(void **state)
{
	(void)state;
	struct lp_hset s = {0};
	for (uint64_t h = 1; h <= 1000; h++)
		assert_int_equal(lp_hset_add(&s, h * 0x9e3779b97f4a7c15ull | 1, 1000), 0);
	for (uint64_t h = 1; h <= 1000; h++)
		assert_int_equal(lp_hset_add(&s, h * 0x9e3779b97f4a7c15ull | 1, 1000), 1);
	assert_int_equal(lp_hset_add(&s, 2, 1000), -ENOSPC);
	assert_int_equal(s.t.used, 1000);
	lp_hset_free(&s);
	assert_null(s.t.slot);
}

/* What an enumeration keeps of the users it let go of: DN hash -> name,
 * folded-name hashes; a repeated DN is told, names survive growth. */
static void test_seen(void **state)
{
	(void)state;
	enum { N = 50000 };
	struct lprov_config cfg;
	struct lprov_domain *ld = quiet_domain(&cfg);
	struct lp_seen s = {0};
	assert_null(lp_seen_name(&s, 1));
	assert_false(lp_seen_has_name(&s, 1));
	char dn[64], name[32];
	for (unsigned i = 0; i < N; i++) {
		snprintf(dn, sizeof(dn), "uid=u%u,ou=people,dc=example,dc=com", i);
		snprintf(name, sizeof(name), "u%u", i);
		assert_int_equal(
		    lp_seen_add(&s, lp_seen_hash(ld, dn), name, lp_seen_hash(ld, name)), 0);
	}
	assert_int_equal(s.dn.used, N);
	/* the same DN again: 1, the first name kept */
	snprintf(dn, sizeof(dn), "uid=u%u,ou=people,dc=example,dc=com", 7u);
	assert_int_equal(lp_seen_add(&s, lp_seen_hash(ld, dn), "other", lp_seen_hash(ld, "other")),
			 1);
	assert_string_equal(lp_seen_name(&s, lp_seen_hash(ld, dn)), "u7");
	assert_true(lp_seen_has_name(&s, lp_seen_hash(ld, "other")));
	for (unsigned i = 0; i < N; i += 997) {
		snprintf(dn, sizeof(dn), "uid=u%u,ou=people,dc=example,dc=com", i);
		snprintf(name, sizeof(name), "u%u", i);
		assert_string_equal(lp_seen_name(&s, lp_seen_hash(ld, dn)), name);
		assert_true(lp_seen_has_name(&s, lp_seen_hash(ld, name)));
	}
	assert_null(lp_seen_name(&s, lp_seen_hash(ld, "uid=nobody,dc=example,dc=com")));
	assert_false(lp_seen_has_name(&s, lp_seen_hash(ld, "nobody")));
	/* compact: well under the parsed records it stands for */
	size_t bytes = lp_seen_bytes(&s);
	printf("seen: %u users in %zu bytes (%.1f a user)\n", (unsigned)N, bytes,
	       (double)bytes / N);
	assert_true(bytes < (size_t)N * 100);
	assert_true(lp_seen_hash(ld, "") != 0);
	lp_seen_free(&s);
	assert_null(s.dn.slot);
	assert_int_equal(lp_seen_bytes(&s), 0);
	lprov_domain_free(ld);
	lprov_config_free(&cfg);
}

/* No server listening: the lookup answers OFFLINE at once, and the next
 * one too (no reconnect before the probe time). */
static void test_offline_without_server(void **state)
{
	(void)state;
	char dir[] = "/tmp/idc-ldap-unit-XXXXXX";
	assert_non_null(mkdtemp(dir));
	struct cache *c;
	struct idc_diag d = {{0}};
	struct cache_options co = {.nosync = true};
	assert_int_equal(cache_open(dir, &co, &c, &d), 0);
	struct lprov_config cfg;
	lprov_config_init(&cfg, "dir");
	lprov_config_set(&cfg, "ldap_uri", "ldap://127.0.0.1:1", &d);
	lprov_config_set(&cfg, "ldap_search_base", "dc=example,dc=com", &d);
	struct lprov_domain *ld;
	assert_int_equal(lprov_domain_new(&cfg, c, &ld, &d), 0);
	uint64_t t0 = idc_now_ns();
	assert_int_equal(lprov_domain_lookup(ld, LPROV_LOOKUP_PWNAM, "alice", 0, NULL, NULL),
			 LPROV_LOOKUP_OFFLINE);
	assert_int_equal(lprov_domain_lookup(ld, LPROV_LOOKUP_PWUID, NULL, 5, NULL, NULL),
			 LPROV_LOOKUP_OFFLINE);
	assert_true(idc_now_ns() - t0 < 1000000000ull);
	assert_int_equal(lprov_domain_lookup(ld, LPROV_LOOKUP_PWNAM, "bad:name", 0, NULL, NULL),
			 LPROV_LOOKUP_NOTFOUND);
	struct lprov_domain_status st;
	lprov_domain_get_status(ld, &st);
	assert_false(st.online);
	assert_true(lprov_domain_next_timeout(ld) > 0);
	lprov_domain_free(ld);
	lprov_config_free(&cfg);
	cache_close(c);
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	assert_int_equal(system(cmd), 0);
}

/* One policy for the bind password file, whoever reads it: the daemon's
 * configuration at start, or the provider when no secret was handed over. */
static char *authtok_of(const char *path, const char *text, mode_t mode, int *rc,
			struct idc_diag *d)
{
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
	assert_int_equal(chmod(path, mode), 0);
	char *pw = NULL;
	*rc = lprov_read_authtok(path, (uid_t)-1, &pw, d);
	return pw;
}

static void test_authtok_file_policy(void **state)
{
	(void)state;
	char dir[] = "/tmp/idc-authtok-XXXXXX", path[64], link[64];
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/pw", dir);
	snprintf(link, sizeof(link), "%s/link", dir);
	struct idc_diag d = {{0}};
	int rc;
	char *pw = authtok_of(path, "s3cret\nsecond line\n", 0600, &rc, &d);
	assert_int_equal(rc, 0);
	assert_string_equal(pw, "s3cret");
	free(pw);
	pw = authtok_of(path, "s3cret\n", 0640, &rc, &d);
	assert_int_equal(rc, -EPERM);
	assert_null(pw);
	assert_non_null(strstr(d.msg, "readable or writable by group or others"));
	pw = authtok_of(path, "\nlater\n", 0600, &rc, &d);
	assert_int_equal(rc, -EINVAL);
	assert_non_null(strstr(d.msg, "empty"));
	assert_int_equal(symlink(path, link), 0);
	rc = lprov_read_authtok(link, (uid_t)-1, &pw, &d);
	assert_int_equal(rc, -ELOOP);
	assert_non_null(strstr(d.msg, "symbolic link"));
	rc = lprov_read_authtok(dir, (uid_t)-1, &pw, &d);
	assert_int_equal(rc, -EINVAL);
	assert_non_null(strstr(d.msg, "not a regular file"));
	unlink(link);
	unlink(path);
	rmdir(dir);
}

int main(void)
{
	idc_log_init("test_ldap_unit", true, IDC_LOG_ERR);
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_options),
	    cmocka_unit_test(test_dn),
	    cmocka_unit_test(test_filter_escape),
	    cmocka_unit_test(test_map),
	    cmocka_unit_test(test_hset),
	    cmocka_unit_test(test_seen),
	    cmocka_unit_test(test_log_once_exact),
	    cmocka_unit_test(test_log_once_cap),
	    cmocka_unit_test(test_offline_without_server),
	    cmocka_unit_test(test_authtok_file_policy),
	    cmocka_unit_test(test_limits),
	    cmocka_unit_test(test_req_describe),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
