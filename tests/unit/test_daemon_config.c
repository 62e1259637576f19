/*
 * Unit tests for src/daemon/config.c: good configs and their defaults,
 * every error with its file:line, and the file checks of config_load.
 */
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

#include "daemon/config.h"

/* Parse text; on failure return the error text (static), else NULL. */
static const char *parse_errors(const char *text, struct config **out)
{
	static char last[4096];
	struct idc_buf errors = IDC_BUF_INIT;
	*out = NULL;
	int rc = config_parse("t.conf", text, strlen(text), out, &errors);
	snprintf(last, sizeof(last), "%s", errors.data ? errors.data : "");
	idc_buf_free(&errors);
	if (rc == 0)
		return NULL;
	assert_int_equal(rc, IDC_ESYNTAX);
	assert_null(*out);
	return last;
}

static struct config *parse_ok(const char *text)
{
	struct config *c;
	const char *err = parse_errors(text, &c);
	if (err)
		fail_msg("unexpected errors: %s", err);
	return c;
}

/* text must fail with an error containing want (e.g. "t.conf:3: ..."). */
static void expect_error(const char *text, const char *want)
{
	struct config *c;
	const char *err = parse_errors(text, &c);
	if (!err)
		fail_msg("accepted: %s", text);
	if (!strstr(err, want))
		fail_msg("expected '%s' in: %s", want, err);
}

/* ==== nscd_socket ================================================================== */

static void test_nscd_socket(void **state)
{
	(void)state;
	const char *dom = "[domain/d]\nid_provider = files\n";
	char text[512];
	struct config *c = parse_ok(dom);
	assert_null(c->nscd_socket); /* off by default */
	assert_int_equal(c->nscd_negative_ttl, 20);
	assert_true(c->nscd_shared); /* maps handed out, as nscd's "shared yes" */
	config_free(c);
	snprintf(text, sizeof(text),
		 "[idcache]\nnscd_socket = /var/run/nscd/socket\nnscd_negative_ttl = 0\n%s", dom);
	c = parse_ok(text);
	assert_string_equal(c->nscd_socket, "/var/run/nscd/socket");
	assert_int_equal(c->nscd_negative_ttl, 0);
	config_free(c);
	snprintf(text, sizeof(text), "[idcache]\nnscd_shared = false\n%s", dom);
	c = parse_ok(text);
	assert_false(c->nscd_shared);
	config_free(c);
	snprintf(text, sizeof(text), "[idcache]\nnscd_shared = maybe\n%s", dom);
	expect_error(text, "t.conf:2: nscd_shared: 'maybe' is not true or false");
	snprintf(text, sizeof(text), "[idcache]\nnscd_socket = run/socket\n%s", dom);
	expect_error(text, "t.conf:2: nscd_socket: 'run/socket' is not an absolute path");
	snprintf(text, sizeof(text), "[idcache]\nnscd_socket = /%0120d\n%s", 0, dom);
	expect_error(text, "t.conf:2: nscd_socket: path longer than 107 bytes");
	snprintf(text, sizeof(text), "[idcache]\nnscd_negative_ttl = 3601\n%s", dom);
	expect_error(text, "t.conf:2: nscd_negative_ttl: '3601' is not a number of seconds");
	snprintf(text, sizeof(text), "[idcache]\nnscd_socket = /a\nnscd_socket = /b\n%s", dom);
	expect_error(text, "t.conf:3: 'nscd_socket' is given twice");
}

/* ==== good configs ================================================================= */

static void test_minimal_defaults(void **state)
{
	(void)state;
	struct config *c = parse_ok("[domain/local]\nid_provider = files\n");
	assert_string_equal(c->run_dir, CONFIG_DEFAULT_RUN_DIR);
	assert_string_equal(c->state_dir, CONFIG_DEFAULT_STATE_DIR);
	assert_string_equal(c->user, CONFIG_DEFAULT_USER);
	assert_int_equal(c->debug_level, -1);
	assert_int_equal(c->memcache_size_passwd, CONFIG_DEFAULT_MEMCACHE_MB);
	assert_int_equal(c->memcache_size_initgroups, CONFIG_DEFAULT_MEMCACHE_MB);
	assert_int_equal(c->ndomains, 1);
	const struct config_domain *d = &c->domains[0];
	assert_string_equal(d->name, "local");
	assert_int_equal(d->provider, CONFIG_PROVIDER_FILES);
	assert_int_equal(d->npasswd, 1);
	assert_string_equal(d->passwd_files[0], "/etc/passwd");
	assert_int_equal(d->ngroup, 1);
	assert_string_equal(d->group_files[0], "/etc/group");
	assert_int_equal(d->entry_cache_timeout, CONFIG_DEFAULT_TTL);
	assert_true(d->case_sensitive);
	assert_int_equal(d->debug_level, -1);
	assert_int_equal(d->line, 1);
	assert_int_equal(config_effective_log_level(c), IDC_LOG_INFO);
	config_free(c);
}

static void test_full(void **state)
{
	(void)state;
	struct config *c = parse_ok("; comment\n"
				    "# another\n"
				    "[idcache]\n"
				    "run_dir = /tmp/r\n"
				    "  state_dir=/tmp/s   ; inline comment\n"
				    "user = daemon\n"
				    "domains = b, a\n"
				    "debug_level = 7\n"
				    "memcache_size_passwd = 8\n"
				    "memcache_size_group = 0\n"
				    "memcache_size_initgroups = 10\n"
				    "\n"
				    "[domain/a]\n"
				    "id_provider = files\n"
				    "passwd_files = /x/passwd , /y/passwd\n"
				    "group_files = /x/group\n"
				    "entry_cache_timeout = 0\n"
				    "case_sensitive = False\n"
				    "debug_level = 2\n"
				    "[domain/b]\n"
				    "id_provider = files\r\n"
				    "[domain/unused]\n"
				    "id_provider = files\n");
	assert_string_equal(c->run_dir, "/tmp/r");
	assert_string_equal(c->state_dir, "/tmp/s");
	assert_string_equal(c->user, "daemon");
	assert_int_equal(c->debug_level, 7);
	assert_int_equal(c->memcache_size_passwd, 8);
	assert_int_equal(c->memcache_size_initgroups, 10);
	assert_int_equal(c->ndomains, 2);
	assert_string_equal(c->domains[0].name, "b"); /* the `domains` order */
	assert_string_equal(c->domains[1].name, "a");
	const struct config_domain *a = config_domain(c, "a");
	assert_non_null(a);
	assert_null(config_domain(c, "unused"));
	assert_int_equal(a->npasswd, 2);
	assert_string_equal(a->passwd_files[1], "/y/passwd");
	assert_int_equal(a->entry_cache_timeout, 0);
	assert_false(a->case_sensitive);
	assert_int_equal(a->line, 13);
	assert_int_equal(config_effective_log_level(c), IDC_LOG_DEBUG);
	config_free(c);
}

static void test_file_order_and_bom(void **state)
{
	(void)state;
	struct config *c = parse_ok("\xEF\xBB\xBF[domain/z]\nid_provider=files\n"
				    "[domain/y.x-1_2]\nid_provider=files");
	assert_int_equal(c->ndomains, 2);
	assert_string_equal(c->domains[0].name, "z");
	assert_string_equal(c->domains[1].name, "y.x-1_2");
	config_free(c);
}

static void test_log_levels(void **state)
{
	(void)state;
	assert_int_equal(config_log_level(-1), IDC_LOG_INFO);
	assert_int_equal(config_log_level(0), IDC_LOG_ERR);
	assert_int_equal(config_log_level(2), IDC_LOG_WARN);
	assert_int_equal(config_log_level(4), IDC_LOG_INFO);
	assert_int_equal(config_log_level(9), IDC_LOG_DEBUG);
}

/* ==== errors, each with its line ======================================================= */

#define DOM "[domain/d]\nid_provider = files\n"

static void test_errors(void **state)
{
	(void)state;
	expect_error("[nss]\nfoo = 1\n" DOM, "t.conf:1: unknown section [nss]");
	expect_error(DOM "bogus = 1\n", "t.conf:3: unknown key 'bogus' in [domain/d]");
	expect_error("[idcache]\nid_provider = files\n" DOM, "t.conf:2: unknown key 'id_provider'");
	expect_error("x = 1\n" DOM, "t.conf:1: 'x' is outside any section");
	expect_error(DOM "just words\n", "t.conf:3: expected 'key = value'");
	expect_error(DOM "= value\n", "t.conf:3: a key name is missing");
	expect_error("[domain/d\n", "t.conf:1: section header without ']'");
	expect_error("[domain/]\n", "t.conf:1: [domain/]: a domain name is");
	expect_error("[domain/a b]\n", "t.conf:1: [domain/a b]: a domain name is");
	expect_error(DOM "[domain/d]\n", "t.conf:3: [domain/d] is repeated (first at line 1)");
	expect_error("[idcache]\n[idcache]\n" DOM, "t.conf:2: [idcache] is repeated");
	expect_error("[domain/d]\nid_provider = nis\n", "t.conf:2: id_provider: unknown");
	expect_error("[domain/d]\npasswd_files = /p\n", "t.conf:1: [domain/d]: id_provider is "
							"missing");
	expect_error(DOM "id_provider = files\n", "t.conf:3: 'id_provider' is given twice");
	expect_error(DOM "passwd_files = rel/path\n", "t.conf:3: passwd_files: not an absolute");
	expect_error(DOM "group_files = /a,,/b\n", "t.conf:3: group_files: empty item");
	expect_error(DOM "entry_cache_timeout = -1\n", "t.conf:3: entry_cache_timeout: '-1'");
	expect_error(DOM "entry_cache_timeout = 4294967296\n", "t.conf:3: entry_cache_timeout");
	expect_error(DOM "case_sensitive = maybe\n", "t.conf:3: case_sensitive: 'maybe'");
	expect_error(DOM "debug_level = 10\n", "t.conf:3: debug_level: '10'");
	expect_error("[idcache]\nrun_dir = run\n" DOM, "t.conf:2: run_dir: 'run' is not an");
	expect_error("[idcache]\nuser = a:b\n" DOM, "t.conf:2: user: 'a:b' is not a valid");
	expect_error("[idcache]\nmemcache_size_group = 5000\n" DOM,
		     "t.conf:2: memcache_size_group");
	expect_error("[idcache]\ndomains = d, e\n" DOM, "t.conf:2: domains: no section "
							"[domain/e]");
	expect_error("[idcache]\ndomains = d, d\n" DOM, "t.conf:2: domains: 'd' is listed twice");
	expect_error("[idcache]\ndomains = d,\n" DOM, "t.conf:2: domains: empty item");
	expect_error("[idcache]\nuser =\n" DOM, "t.conf:2: 'user' has an empty value");
	expect_error("[idcache]\n", "t.conf: no domain configured");
	expect_error("", "no domain configured");
}

/* ==== connection limits ================================================================ */

static void test_connection_limits(void **state)
{
	(void)state;
	struct config *c = parse_ok(DOM);
	assert_int_equal(c->limits.max_connections, CONFIG_DEFAULT_MAX_CONNS);
	assert_int_equal(c->limits.max_connections_per_uid, CONFIG_DEFAULT_MAX_CONNS_UID);
	assert_int_equal(c->limits.root_reserved, CONFIG_DEFAULT_ROOT_RESERVED);
	assert_int_equal(c->limits.admin_max_connections, CONFIG_DEFAULT_ADMIN_CONNS);
	assert_int_equal(c->limits.max_unread_maps_per_uid, CONFIG_DEFAULT_UNREAD_MAPS);
	config_free(c);
	c = parse_ok("[idcache]\nmax_connections = 10\nmax_connections_per_uid = 3\n"
		     "root_reserved_connections = 0\nadmin_max_connections = 2\n"
		     "max_unread_maps_per_uid = 1\n" DOM);
	assert_int_equal(c->limits.max_connections, 10);
	assert_int_equal(c->limits.max_connections_per_uid, 3);
	assert_int_equal(c->limits.root_reserved, 0);
	assert_int_equal(c->limits.admin_max_connections, 2);
	assert_int_equal(c->limits.max_unread_maps_per_uid, 1);
	config_free(c);
	expect_error("[idcache]\nmax_connections = 0\n" DOM,
		     "t.conf:2: max_connections: '0' is not a number from 1 to 65536");
	expect_error("[idcache]\nadmin_max_connections = 65537\n" DOM,
		     "t.conf:2: admin_max_connections: '65537'");
	expect_error("[idcache]\nmax_connections = 8\nmax_connections = 9\n" DOM,
		     "t.conf:3: 'max_connections' is given twice");
	expect_error("[idcache]\nmax_connections = 8\nmax_connections_per_uid = 9\n" DOM,
		     "t.conf:3: max_connections_per_uid (9) is more than max_connections (8)");
	expect_error("[idcache]\nroot_reserved_connections = 1024\n" DOM,
		     "t.conf:2: root_reserved_connections (1024) leaves no connection");
}

static void test_userdb(void **state)
{
	(void)state;
	struct config *c = parse_ok(DOM);
	assert_null(c->userdb.socket); /* off by default */
	assert_true(c->userdb.enumerate);
	config_free(c);
	c = parse_ok("[idcache]\nuserdb_socket = /run/systemd/userdb/io.idcache\n"
		     "userdb_enumerate = no\n" DOM);
	assert_string_equal(c->userdb.socket, "/run/systemd/userdb/io.idcache");
	assert_false(c->userdb.enumerate);
	config_free(c);
	c = parse_ok("[idcache]\nuserdb_socket =\n" DOM);
	assert_null(c->userdb.socket);
	config_free(c);
	expect_error("[idcache]\nuserdb_socket = run/x\n" DOM,
		     "t.conf:2: userdb_socket: 'run/x' is not an absolute path");
	expect_error("[idcache]\nuserdb_socket = /run/systemd/userdb/\n" DOM,
		     "t.conf:2: userdb_socket: '/run/systemd/userdb/' names no socket file");
	expect_error(
	    "[idcache]\nuserdb_socket = /run/a/"
	    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n" DOM,
	    "t.conf:2: userdb_socket: path longer than 107 bytes");
	expect_error("[idcache]\nuserdb_enumerate = maybe\n" DOM,
		     "t.conf:2: userdb_enumerate: 'maybe' is not true or false");
	expect_error("[idcache]\nuserdb_socket = /a/b\nuserdb_socket = /a/c\n" DOM,
		     "t.conf:3: 'userdb_socket' is given twice");
}

/* ==== ldap domains ====================================================================== */

#define LDAP_DOM "[domain/dir]\nid_provider = ldap\nldap_uri = ldap://127.0.0.1:389\n"

static void test_ldap_domain(void **state)
{
	(void)state;
	struct config *c = parse_ok("[domain/dir]\n"
				    "ldap_uri = ldap://a.example, ldaps://b.example:636\n"
				    "ldap_search_base = dc=example,dc=com\n"
				    "ldap_group_search_base = ou=groups,dc=example,dc=com\n"
				    "id_provider = ldap\n" /* after the ldap keys: order is free */
				    "ldap_schema = rfc2307bis\n"
				    "ldap_user_name = sAMAccountName\n"
				    "ldap_user_ssh_public_key = altSecurityKey\n"
				    "ldap_id_use_start_tls = true\n"
				    "ldap_tls_cacert = /etc/ssl/ca.pem\n"
				    "ldap_tls_reqcert = try\n"
				    "ldap_network_timeout = 2.5\n"
				    "ldap_page_size = 500\n"
				    "entry_cache_timeout = 600\n"
				    "entry_negative_timeout = 30\n"
				    "entry_cache_nowait_percentage = 75\n"
				    "enumerate = yes\n"
				    "ignore_group_members = false\n"
				    "ldap_member_names_from_rdn = false\n"
				    "offline_timeout = 10\n"
				    "failover_primary_timeout = 40\n"
				    "[domain/local]\nid_provider = files\n");
	assert_int_equal(c->ndomains, 2);
	const struct config_domain *d = config_domain(c, "dir");
	assert_non_null(d);
	assert_int_equal(d->provider, CONFIG_PROVIDER_LDAP);
	assert_false(d->case_sensitive); /* LDAP names are caseIgnore */
	assert_null(d->passwd_files);
	assert_non_null(d->ldap);
	assert_string_equal(d->ldap->name, "dir");
	assert_int_equal(d->ldap->nuris, 2);
	assert_string_equal(d->ldap->uris[1], "ldaps://b.example:636");
	assert_string_equal(d->ldap->group_base, "ou=groups,dc=example,dc=com");
	assert_int_equal(d->ldap->schema, LPROV_RFC2307BIS);
	assert_string_equal(d->ldap->map[LPROV_MAP_USER_NAME], "sAMAccountName");
	assert_string_equal(d->ldap->map[LPROV_MAP_USER_SSH_KEY], "altSecurityKey");
	assert_true(d->ldap->start_tls);
	assert_int_equal(d->ldap->tls_reqcert, LPROV_REQCERT_TRY);
	assert_int_equal(d->ldap->network_timeout_ms, 2500);
	assert_int_equal(d->ldap->page_size, 500);
	assert_int_equal(d->ldap->entry_cache_timeout, 600);
	assert_int_equal(d->entry_cache_timeout, 600);
	assert_int_equal(d->ldap->negative_timeout_ms, 30000);
	assert_int_equal(d->ldap->nowait_percentage, 75);
	assert_true(d->ldap->enumerate);
	assert_false(d->ldap->member_names_from_rdn);
	assert_int_equal(d->ldap->offline_timeout_ms, 10000);
	assert_int_equal(d->ldap->primary_retry_ms, 40000);
	assert_true(config_domain(c, "local")->case_sensitive);
	assert_null(config_domain(c, "local")->ldap);
	config_free(c);

	c = parse_ok(LDAP_DOM "ldap_search_base = dc=x\ncase_sensitive = true\n");
	assert_true(c->domains[0].case_sensitive); /* given: kept */
	assert_int_equal(c->domains[0].ldap->tls_reqcert, LPROV_REQCERT_DEMAND);
	assert_null(c->domains[0].ldap->bind_dn);
	/* min_id = 1 by default: no uid 0 or gid 0 from a directory */
	assert_int_equal(c->domains[0].ldap->min_id, 1);
	assert_int_equal(c->domains[0].ldap->max_id, 0);
	assert_false(c->domains[0].ldap->insecure_bind);
	config_free(c);

	/* what a directory may make a request cost */
	c = parse_ok(LDAP_DOM "ldap_search_base = dc=x\nldap_max_reply_size = 8M\n"
			      "ldap_max_entries = 5000\nldap_group_nesting_level = 2\n"
			      "ldap_max_searches = 40\nldap_max_memory = 64M\n");
	assert_int_equal(c->domains[0].ldap->max_reply_bytes, 8u << 20);
	assert_int_equal(c->domains[0].ldap->max_entries, 5000);
	assert_int_equal(c->domains[0].ldap->nesting_level, 2);
	assert_int_equal(c->domains[0].ldap->max_searches, 40);
	assert_int_equal(c->domains[0].ldap->max_memory, 64u << 20);
	config_free(c);

	c = parse_ok(LDAP_DOM "ldap_search_base = dc=x\nmin_id = 1000\nmax_id = 60000\n");
	assert_int_equal(c->domains[0].ldap->min_id, 1000);
	assert_int_equal(c->domains[0].ldap->max_id, 60000);
	config_free(c);
	c = parse_ok(LDAP_DOM "ldap_search_base = dc=x\nmax_id = 60000\nmin_id = 0\n");
	assert_int_equal(c->domains[0].ldap->min_id, 0);
	config_free(c);

	/* a bind password: over ldaps://, StartTLS, or with the explicit override */
	c = parse_ok("[domain/dir]\nid_provider = ldap\nldap_uri = ldaps://a.example\n"
		     "ldap_search_base = dc=x\nldap_default_bind_dn = cn=a,dc=x\n"
		     "ldap_default_authtok_file = /nonexistent/pw\n");
	config_free(c);
	c = parse_ok(LDAP_DOM "ldap_search_base = dc=x\nldap_default_bind_dn = cn=a,dc=x\n"
			      "ldap_default_authtok_file = /nonexistent/pw\n"
			      "ldap_auth_disable_tls_never_use_in_production = true\n");
	assert_true(c->domains[0].ldap->insecure_bind);
	config_free(c);
	/* never/allow are accepted (and warned about at start) */
	c = parse_ok(LDAP_DOM "ldap_search_base = dc=x\nldap_tls_reqcert = never\n");
	assert_int_equal(c->domains[0].ldap->tls_reqcert, LPROV_REQCERT_NEVER);
	config_free(c);
	c = parse_ok(LDAP_DOM "ldap_search_base = dc=x\nldap_tls_reqcert = allow\n");
	assert_int_equal(c->domains[0].ldap->tls_reqcert, LPROV_REQCERT_ALLOW);
	config_free(c);
}

static void test_ldap_errors(void **state)
{
	(void)state;
	expect_error(LDAP_DOM "ldap_search_base = dc=x\nldap_schema = ad\n",
		     "t.conf:5: ldap_schema: bad value 'ad'");
	expect_error(LDAP_DOM "ldap_search_base = dc=x\nldap_uri = http://x\n",
		     "t.conf:5: 'ldap_uri' is given twice");
	expect_error("[domain/dir]\nid_provider = ldap\nldap_uri = http://x\n",
		     "t.conf:3: ldap_uri: bad value 'http://x'");
	expect_error(LDAP_DOM "ldap_search_base = dc=x\nldap_tls_reqcert = maybe\n",
		     "t.conf:5: ldap_tls_reqcert: bad value");
	expect_error(LDAP_DOM "ldap_search_base = dc=x\nldap_network_timeout = -1\n",
		     "t.conf:5: ldap_network_timeout: bad value");
	expect_error(LDAP_DOM "ldap_search_base = dc=x\nenumerate = sometimes\n",
		     "t.conf:5: enumerate: bad value");
	/* SSSD's range: 0 (off) to 99 */
	expect_error(LDAP_DOM "ldap_search_base = dc=x\nentry_cache_nowait_percentage = 100\n",
		     "t.conf:5: entry_cache_nowait_percentage: bad value");
	expect_error(LDAP_DOM "ldap_search_base = dc=x\nldap_page_size = 0\n",
		     "t.conf:1: [domain/dir]: ldap_page_size must be 1..100000");
	expect_error(LDAP_DOM "ldap_search_base = dc=x\nldap_max_reply_size = 1T\n",
		     "t.conf:5: ldap_max_reply_size: bad value '1T'");
	expect_error(LDAP_DOM "ldap_search_base = dc=x\nldap_max_reply_size = 4k\n",
		     "t.conf:1: [domain/dir]: ldap_max_reply_size must be at least 16384 bytes");
	expect_error(LDAP_DOM "ldap_search_base = dc=x\nldap_max_searches = 0\n",
		     "t.conf:1: [domain/dir]: ldap_max_entries and ldap_max_searches must be "
		     "positive");
	expect_error(LDAP_DOM, "t.conf:1: [domain/dir]: ldap_search_base is required");
	expect_error("[domain/dir]\nid_provider = ldap\n", "t.conf:1: [domain/dir]: ldap_uri is "
							   "required");
	expect_error(LDAP_DOM "ldap_search_base = dc=x\nldap_default_bind_dn = cn=a\n",
		     "ldap_default_bind_dn needs ldap_default_authtok_file");
	expect_error(LDAP_DOM "ldap_search_base = dc=x\npasswd_files = /p\n",
		     "t.conf:1: [domain/dir]: passwd_files and group_files are for");
	expect_error(DOM "ldap_uri = ldap://x\n", "t.conf:3: [domain/d]: ldap options need "
						  "id_provider = ldap");
	expect_error(LDAP_DOM "ldap_search_base = dc=x\nldap_tls_cacert = ca.pem\n",
		     "t.conf:5: ldap_tls_cacert: 'ca.pem' is not an absolute path");
	expect_error(LDAP_DOM "ldap_search_base = dc=x\nldap_bogus = 1\n",
		     "t.conf:5: unknown key 'ldap_bogus' in [domain/dir]");
	/* min_id / max_id */
	expect_error(LDAP_DOM "ldap_search_base = dc=x\nmin_id = -1\n",
		     "t.conf:5: min_id: bad value '-1'");
	expect_error(LDAP_DOM "ldap_search_base = dc=x\nmax_id = 4294967296\n",
		     "t.conf:5: max_id: bad value");
	expect_error(LDAP_DOM "ldap_search_base = dc=x\nmin_id = 10x\n",
		     "t.conf:5: min_id: bad value");
	expect_error(LDAP_DOM "ldap_search_base = dc=x\nmax_id = 100\nmin_id = 500\n",
		     "t.conf:6: min_id = 500: min_id must not exceed max_id");
	expect_error(LDAP_DOM "ldap_search_base = dc=x\nmin_id = 500\nmax_id = 100\n",
		     "t.conf:6: max_id = 100: min_id must not exceed max_id (min_id 500, max_id "
		     "100)");
	/* a base that is no DN: every search would fail at run time */
	expect_error(LDAP_DOM "ldap_search_base = example.com\n",
		     "t.conf:4: ldap_search_base: bad value 'example.com'");
	expect_error(LDAP_DOM "ldap_search_base = dc=x\nldap_user_search_base = ou=a,,dc=x\n",
		     "t.conf:5: ldap_user_search_base: bad value");
	expect_error(LDAP_DOM "ldap_search_base = dc=x\nldap_default_bind_dn = cn\n",
		     "t.conf:5: ldap_default_bind_dn: bad value");
	expect_error(LDAP_DOM "ldap_search_base = dc=x\nmin_id = 5\nmin_id = 6\n",
		     "t.conf:6: 'min_id' is given twice");
	expect_error(DOM "min_id = 1000\n", "t.conf:3: [domain/d]: ldap options need "
					    "id_provider = ldap");
	/* a bind password over plain ldap:// without StartTLS: refused, naming
	 * the domain, unless explicitly overridden */
	expect_error(LDAP_DOM "ldap_search_base = dc=x\nldap_default_bind_dn = cn=a,dc=x\n"
			      "ldap_default_authtok_file = /nonexistent/pw\n",
		     "t.conf:1: [domain/dir]: a bind password over plain ldap://127.0.0.1:389 "
		     "without StartTLS would cross the network in clear");
	expect_error("[domain/dir]\nid_provider = ldap\nldap_uri = ldaps://a, ldap://b\n"
		     "ldap_search_base = dc=x\nldap_default_bind_dn = cn=a,dc=x\n"
		     "ldap_default_authtok_file = /nonexistent/pw\n",
		     "[domain/dir]: a bind password over plain ldap://b");
	expect_error(LDAP_DOM "ldap_search_base = dc=x\nldap_default_bind_dn = cn=a,dc=x\n"
			      "ldap_default_authtok_file = /nonexistent/pw\n"
			      "ldap_id_use_start_tls = false\n"
			      "ldap_auth_disable_tls_never_use_in_production = false\n",
		     "ldap_auth_disable_tls_never_use_in_production = true");
	expect_error(LDAP_DOM "ldap_search_base = dc=x\n"
			      "ldap_auth_disable_tls_never_use_in_production = maybe\n",
		     "t.conf:5: ldap_auth_disable_tls_never_use_in_production: bad value");
}

/* filter_users / filter_groups and allow_local_overlap: sssd's defaults
 * (root) for remote domains, a domain's own list replacing [idcache]'s, an
 * empty value as an empty list, files domains untouched unless told. */
static void test_filters_and_overlap(void **state)
{
	(void)state;
	const char *dir = "id_provider = ldap\nldap_uri = ldap://a.example\n"
			  "ldap_search_base = dc=example,dc=com\n";
	char text[1024];
	snprintf(text, sizeof(text), "[domain/dir]\n%s[domain/local]\nid_provider = files\n", dir);
	struct config *c = parse_ok(text);
	const struct config_domain *d = config_domain(c, "dir"), *l = config_domain(c, "local");
	assert_int_equal(d->filter_users.n, 1);
	assert_string_equal(d->filter_users.v[0], "root");
	assert_int_equal(d->filter_groups.n, 1);
	assert_true(config_names_has(&d->filter_users, "ROOT", false));
	assert_false(config_names_has(&d->filter_users, "ROOT", true));
	assert_false(d->allow_local_overlap);
	assert_int_equal(l->filter_users.n, 0);
	assert_int_equal(l->filter_groups.n, 0);
	config_free(c);

	snprintf(text, sizeof(text),
		 "[idcache]\nfilter_users = root, daemon ,bin\nfilter_groups =\n"
		 "[domain/dir]\n%sallow_local_overlap = yes\nfilter_groups = sudo,adm\n"
		 "[domain/two]\n%s[domain/local]\nid_provider = files\nfilter_users = toor\n",
		 dir, dir);
	c = parse_ok(text);
	d = config_domain(c, "dir");
	assert_true(d->allow_local_overlap);
	assert_int_equal(d->filter_users.n, 3);
	assert_string_equal(d->filter_users.v[1], "daemon");
	assert_int_equal(d->filter_groups.n, 2);
	assert_string_equal(d->filter_groups.v[1], "adm");
	const struct config_domain *t = config_domain(c, "two");
	assert_false(t->allow_local_overlap);
	assert_int_equal(t->filter_users.n, 3);
	assert_int_equal(t->filter_groups.n, 0); /* [idcache]'s empty list */
	l = config_domain(c, "local");
	assert_int_equal(l->filter_users.n, 1);
	assert_string_equal(l->filter_users.v[0], "toor");
	assert_int_equal(l->filter_groups.n, 0);
	config_free(c);

	expect_error("[idcache]\nfilter_users = root,,bin\n[domain/l]\nid_provider = files\n",
		     "t.conf:2: filter_users: '' is not a valid name");
	expect_error("[domain/l]\nid_provider = files\nfilter_groups = a:b\n",
		     "t.conf:3: filter_groups: 'a:b' is not a valid name");
	expect_error("[domain/l]\nid_provider = files\nallow_local_overlap = true\n",
		     "t.conf:1: [domain/l]: allow_local_overlap is for remote domains");
	snprintf(text, sizeof(text), "[domain/dir]\n%sallow_local_overlap = maybe\n", dir);
	expect_error(text, "t.conf:5: allow_local_overlap: 'maybe' is not true or false");
	expect_error("[domain/l]\nid_provider = files\nfilter_users = a\nfilter_users = b\n",
		     "t.conf:4: 'filter_users' is given twice");
	expect_error("[domain/l]\nid_provider = files\ncase_sensitive =\n",
		     "t.conf:3: 'case_sensitive' has an empty value");
}

/* The subordinate id allocation: defaults, uid_max following the others,
 * a block that cannot fit refused at the last subid key's line, bad values,
 * subid_allocate's default per provider, the LDAP pairs whole. */
static void test_subids(void **state)
{
	(void)state;
	const char *dir = "id_provider = ldap\nldap_uri = ldap://a.example\n"
			  "ldap_search_base = dc=example,dc=com\n";
	char text[1024];
	snprintf(text, sizeof(text), "[domain/dir]\n%s[domain/local]\nid_provider = files\n", dir);
	struct config *c = parse_ok(text);
	assert_int_equal(c->subid.alloc.base, 2147483648u);
	assert_int_equal(c->subid.alloc.size, 65536u);
	assert_int_equal(c->subid.alloc.uid_min, 1000u);
	assert_int_equal(c->subid.alloc.uid_max, 33766u);
	assert_false(config_domain(c, "dir")->subid_allocate);
	assert_true(config_domain(c, "local")->subid_allocate);
	config_free(c);

	snprintf(text, sizeof(text),
		 "[idcache]\nsubid_base = 100000\nsubid_size = 1000\nsubid_uid_min = 0\n"
		 "[domain/dir]\n%ssubid_allocate = yes\nldap_user_subuid_number = a\n"
		 "ldap_user_subuid_count = b\nmax_id = 99999\n[domain/local]\nid_provider = files\n"
		 "subid_allocate = false\n",
		 dir);
	c = parse_ok(text);
	assert_int_equal(c->subid.alloc.uid_max, (4294967295u - 100000u) / 1000u - 1);
	assert_true(config_domain(c, "dir")->subid_allocate);
	assert_false(config_domain(c, "local")->subid_allocate);
	config_free(c);

	expect_error("[idcache]\nsubid_base = 2147483648\nsubid_uid_max = 33767\n"
		     "[domain/l]\nid_provider = files\n",
		     "t.conf:3: subid_base 2147483648 + 32768 ranges of subid_size 65536 passes "
		     "4294967295; subid_uid_max can be at most 33766");
	expect_error("[idcache]\nsubid_size = 0\n[domain/l]\nid_provider = files\n",
		     "t.conf:2: subid_size must be at least 1");
	expect_error("[idcache]\nsubid_uid_min = 5000\nsubid_uid_max = 10\n"
		     "[domain/l]\nid_provider = files\n",
		     "t.conf:3: subid_uid_min 5000 is above subid_uid_max 10");
	expect_error("[idcache]\nsubid_base = 4294967295\n[domain/l]\nid_provider = files\n",
		     "t.conf:2: subid_base: '4294967295' is not a number");
	expect_error("[idcache]\nsubid_base = 4294967294\nsubid_size = 2\n"
		     "[domain/l]\nid_provider = files\n",
		     "t.conf:3: no subordinate id range of subid_size 2 fits above subid_base "
		     "4294967294");
	expect_error("[domain/l]\nid_provider = files\nsubid_allocate = maybe\n",
		     "t.conf:3: subid_allocate: 'maybe' is not true or false");
	snprintf(text, sizeof(text), "[domain/dir]\n%sldap_user_subgid_count = c\n", dir);
	expect_error(text, "ldap_user_subgid_number and ldap_user_subgid_count are given together");
	/* Opting in on a domain whose ids are unbounded: nothing could be served. */
	snprintf(text, sizeof(text), "[domain/dir]\n%ssubid_allocate = true\n", dir);
	expect_error(text, "t.conf:1: [domain/dir]: subordinate id ranges (subid_allocate) need "
			   "max_id");
	snprintf(text, sizeof(text),
		 "[domain/dir]\n%sldap_user_subgid_number = a\nldap_user_subgid_count = b\n", dir);
	expect_error(text, "subordinate id ranges (ldap_user_subuid_*/subgid_*) need max_id");
}

static void test_hostile_lines(void **state)
{
	(void)state;
	char text[3 * CONFIG_LINE_MAX];
	/* a line over the limit: one error, and the lines after keep their numbers */
	int n = snprintf(text, sizeof(text), DOM "passwd_files = /");
	memset(text + n, 'a', CONFIG_LINE_MAX);
	snprintf(text + n + CONFIG_LINE_MAX, sizeof(text) - (size_t)n - CONFIG_LINE_MAX,
		 "\nbogus = 1\n");
	expect_error(text, "t.conf:3: line longer than");
	expect_error(text, "t.conf:4: unknown key 'bogus'");

	/* a NUL byte inside a line */
	static const char nul[] = "[domain/d]\nid_provider = files\npasswd_files = /a\0b\n";
	struct config *c;
	struct idc_buf errors = IDC_BUF_INIT;
	assert_int_equal(config_parse("t.conf", nul, sizeof(nul) - 1, &c, &errors), IDC_ESYNTAX);
	assert_non_null(strstr(errors.data, "t.conf:3: the line contains a NUL byte"));
	idc_buf_free(&errors);

	/* a long but acceptable path list */
	n = snprintf(text, sizeof(text), DOM "passwd_files = /");
	memset(text + n, 'p', 3000);
	snprintf(text + n + 3000, sizeof(text) - (size_t)n - 3000, ",/q\n");
	c = parse_ok(text);
	assert_int_equal(c->domains[0].npasswd, 2);
	assert_int_equal(strlen(c->domains[0].passwd_files[0]), 3001);
	config_free(c);

	/* several errors are all reported */
	struct config *c2;
	const char *err = parse_errors("[x]\n[domain/d]\nfoo=1\nbar=2\n", &c2);
	assert_non_null(err);
	assert_non_null(strstr(err, "t.conf:1:"));
	assert_non_null(strstr(err, "t.conf:3:"));
	assert_non_null(strstr(err, "t.conf:4:"));
	assert_non_null(strstr(err, "t.conf:2: [domain/d]: id_provider is missing"));
}

/* ==== files ============================================================================ */

static char tmpdir[64];

static const char *write_conf(const char *name, const char *text, mode_t mode)
{
	static char path[128];
	snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
	assert_int_equal(chmod(path, mode), 0);
	return path;
}

static void test_load(void **state)
{
	(void)state;
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/test_daemon_config.XXXXXX");
	assert_non_null(mkdtemp(tmpdir));
	struct config *c = NULL;
	struct idc_buf errors = IDC_BUF_INIT;

	const char *p = write_conf("ok.conf", DOM, 0644);
	assert_int_equal(config_load(p, &c, &errors), 0);
	assert_int_equal(c->ndomains, 1);
	config_free(c);

	p = write_conf("gw.conf", DOM, 0664);
	assert_int_equal(config_load(p, &c, &errors), -EPERM);
	assert_non_null(strstr(errors.data, "gw.conf: writable by group or others"));
	idc_buf_reset(&errors);
	p = write_conf("ow.conf", DOM, 0646);
	assert_int_equal(config_load(p, &c, &errors), -EPERM);
	assert_non_null(strstr(errors.data, "ow.conf: writable by group or others"));
	idc_buf_reset(&errors);

	p = write_conf("bad.conf", DOM "x = 1\n", 0600);
	assert_int_equal(config_load(p, &c, &errors), IDC_ESYNTAX);
	assert_non_null(strstr(errors.data, "bad.conf:3: unknown key 'x'"));
	idc_buf_reset(&errors);

	assert_int_equal(config_load(tmpdir, &c, &errors), -EINVAL);
	assert_non_null(strstr(errors.data, "not a regular file"));
	idc_buf_reset(&errors);
	char missing[128];
	snprintf(missing, sizeof(missing), "%s/none.conf", tmpdir);
	assert_int_equal(config_load(missing, &c, &errors), -ENOENT);
	assert_non_null(strstr(errors.data, "none.conf"));
	idc_buf_free(&errors);

	/* the bind password file: only its owner may read it */
	char conf[1024], pw[256];
	snprintf(pw, sizeof(pw), "%s/bind.pw", tmpdir);
	snprintf(conf, sizeof(conf),
		 LDAP_DOM "ldap_search_base = dc=x\nldap_default_bind_dn = cn=a,dc=x\n"
			  "ldap_id_use_start_tls = true\n"
			  "ldap_default_authtok_file = %s\n",
		 pw);
	char lconf[128];
	snprintf(lconf, sizeof(lconf), "%s", write_conf("ldap.conf", conf, 0600));
	p = lconf; /* write_conf's buffer is reused below */
	assert_int_equal(config_load(p, &c, &errors), -ENOENT);
	assert_non_null(strstr(errors.data, "bind.pw"));
	idc_buf_reset(&errors);
	write_conf("bind.pw", "secret\n", 0640);
	c = NULL;
	assert_int_equal(config_load(p, &c, &errors), -EPERM);
	assert_null(c);
	assert_non_null(strstr(errors.data, "bind.pw: ldap_default_authtok_file: readable or "
					    "writable by group or others"));
	idc_buf_reset(&errors);
	write_conf("bind.pw", "secret\n", 0604);
	assert_int_equal(config_load(p, &c, &errors), -EPERM);
	idc_buf_reset(&errors);
	write_conf("bind.pw", "secret\n", 0600);
	assert_int_equal(config_load(p, &c, &errors), 0);
	assert_string_equal(c->domains[0].ldap->authtok_file, pw);
	/* read at load (as root, before any privilege drop): the first line */
	assert_non_null(c->domains[0].ldap->authtok);
	assert_string_equal(c->domains[0].ldap->authtok, "secret");
	config_free(c);
	c = NULL;
	/* empty: refused, not an unauthenticated bind */
	write_conf("bind.pw", "\nsecret\n", 0600);
	assert_int_equal(config_load(p, &c, &errors), -EINVAL);
	assert_non_null(strstr(errors.data, "bind.pw: ldap_default_authtok_file: empty"));
	idc_buf_reset(&errors);
	write_conf("bind.pw", "secret\n", 0600);
	/* a symbolic link (even to a good file) is refused: O_NOFOLLOW */
	char lnk[256], lconf2[1024];
	snprintf(lnk, sizeof(lnk), "%s/bind.lnk", tmpdir);
	assert_int_equal(symlink(pw, lnk), 0);
	snprintf(lconf2, sizeof(lconf2),
		 LDAP_DOM "ldap_search_base = dc=x\nldap_default_bind_dn = cn=a,dc=x\n"
			  "ldap_id_use_start_tls = true\n"
			  "ldap_default_authtok_file = %s\n",
		 lnk);
	char lnkconf[128];
	snprintf(lnkconf, sizeof(lnkconf), "%s", write_conf("lnk.conf", lconf2, 0600));
	assert_int_equal(config_load(lnkconf, &c, &errors), -ELOOP);
	assert_null(c);
	assert_non_null(
	    strstr(errors.data, "bind.lnk: ldap_default_authtok_file: a symbolic link"));
	idc_buf_reset(&errors);
	unlink(lnk);
	unlink(lnkconf);
	/* a reload that cannot open the file keeps the password read before */
	struct config *prev = NULL;
	assert_int_equal(config_load(p, &prev, &errors), 0);
	assert_int_equal(config_reload(p, prev, &c, &errors), 0);
	assert_string_equal(c->domains[0].ldap->authtok, "secret");
	config_free(c);
	c = NULL;
	if (geteuid() != 0) { /* root opens anything: only testable unprivileged */
		assert_int_equal(chmod(pw, 0), 0);
		assert_int_equal(config_load(p, &c, &errors), -EACCES);
		idc_buf_reset(&errors);
		assert_int_equal(config_reload(p, prev, &c, &errors), 0);
		assert_string_equal(c->domains[0].ldap->authtok, "secret");
		config_free(c);
		c = NULL;
		assert_int_equal(chmod(pw, 0600), 0);
	}
	config_free(prev);
	if (geteuid() == 0) { /* another owner: refused */
		assert_int_equal(chown(pw, 4242, 4242), 0);
		assert_int_equal(config_load(p, &c, &errors), -EPERM);
		assert_non_null(strstr(errors.data, "owned by another user"));
	}
	idc_buf_free(&errors);

	const char *names[] = {"ok.conf", "gw.conf", "ow.conf", "bad.conf", "ldap.conf", "bind.pw"};
	for (size_t i = 0; i < IDC_ARRAY_SIZE(names); i++) {
		char path[128];
		snprintf(path, sizeof(path), "%s/%s", tmpdir, names[i]);
		unlink(path);
	}
	rmdir(tmpdir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_minimal_defaults),
	    cmocka_unit_test(test_full),
	    cmocka_unit_test(test_file_order_and_bom),
	    cmocka_unit_test(test_log_levels),
	    cmocka_unit_test(test_errors),
	    cmocka_unit_test(test_nscd_socket),
	    cmocka_unit_test(test_connection_limits),
	    cmocka_unit_test(test_userdb),
	    cmocka_unit_test(test_ldap_domain),
	    cmocka_unit_test(test_ldap_errors),
	    cmocka_unit_test(test_filters_and_overlap),
	    cmocka_unit_test(test_subids),
	    cmocka_unit_test(test_hostile_lines),
	    cmocka_unit_test(test_load),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
