/*
 * config: idcache.conf parsed with libinih.
 *
 * inih hands its handler section, key and value but (as Debian builds it)
 * no line number, and reports syntax errors only as "the first bad line".
 * So we feed it through our own line reader (ini_parse_stream): the reader
 * counts lines, refuses NUL bytes and over-long lines (inih would split or
 * truncate them silently), and classifies each line the way inih will, so
 * section headers and syntax errors are seen with their line number. The
 * handler then knows the current line and section from the reader's state.
 */
#include "daemon/config.h"

#include <errno.h>
#include <fcntl.h>
#include <ini.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "cache/cache.h"

enum section_kind { SEC_NONE = 0, SEC_IDCACHE, SEC_DOMAIN, SEC_SKIP };

struct parse {
	const char *label;
	const char *p, *end; /* text not yet handed to inih */
	unsigned line;       /* line most recently handed to inih */
	struct idc_buf *errors;
	unsigned nerr;
	bool oom;
	struct config *cfg;
	enum section_kind sec;
	struct config_domain *all; /* every [domain/NAME] in file order */
	size_t nall, cap;
	size_t cur; /* index in all when sec == SEC_DOMAIN */
	unsigned idcache_line;
	char *domains_list; /* raw `domains` value */
	unsigned domains_line;
};

/* ==== errors ================================================================== */

static void perr_at(struct parse *ps, unsigned line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void perr_at(struct parse *ps, unsigned line, const char *fmt, ...)
{
	ps->nerr++;
	if (!ps->errors)
		return;
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (line)
		idc_buf_printf(ps->errors, "%s:%u: %s\n", ps->label, line, msg);
	else
		idc_buf_printf(ps->errors, "%s: %s\n", ps->label, msg);
}

#define perr(ps, ...) perr_at((ps), (ps)->line, __VA_ARGS__)

/* ==== value parsers ============================================================== */

static int parse_uint(const char *v, uint32_t max, uint32_t *out)
{
	uint64_t n = 0;
	if (!*v)
		return -EINVAL;
	for (const char *s = v; *s; s++) {
		if (*s < '0' || *s > '9')
			return -EINVAL;
		n = n * 10 + (uint64_t)(*s - '0');
		if (n > max)
			return -ERANGE;
	}
	*out = (uint32_t)n;
	return 0;
}

static int parse_bool(const char *v, bool *out)
{
	static const char *const yes[] = {"true", "yes", "on", "1"};
	static const char *const no[] = {"false", "no", "off", "0"};
	for (size_t i = 0; i < IDC_ARRAY_SIZE(yes); i++) {
		if (strcasecmp(v, yes[i]) == 0)
			return *out = true, 0;
		if (strcasecmp(v, no[i]) == 0)
			return *out = false, 0;
	}
	return -EINVAL;
}

static bool has_control(const char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || *s == 0x7f)
			return true;
	return false;
}

/* An absolute path without control characters that fits PATH_MAX. */
static bool path_ok(const char *s, size_t len)
{
	return len > 0 && len < PATH_MAX && s[0] == '/' && !memchr(s, '\0', len);
}

static void strv_free(char **v, size_t n)
{
	for (size_t i = 0; v && i < n; i++)
		free(v[i]);
	free(v);
}

/* Next comma-separated item of *s, trimmed of blanks; NULL at the end. *len
 * gets its length (0 for an empty item, which the callers refuse). */
static const char *next_item(const char **s, size_t *len)
{
	if (!*s)
		return NULL;
	const char *a = *s, *comma = strchr(a, ',');
	const char *b = comma ? comma : a + strlen(a);
	*s = comma ? comma + 1 : NULL;
	while (a < b && (*a == ' ' || *a == '\t'))
		a++;
	while (b > a && (b[-1] == ' ' || b[-1] == '\t'))
		b--;
	*len = (size_t)(b - a);
	return a;
}

/* A list of absolute paths, comma-separated. 0, -EINVAL (message in why),
 * -ENOMEM. */
static int parse_paths(const char *v, char ***out, size_t *n, const char **why)
{
	char **list = NULL;
	size_t count = 0, len;
	const char *item;
	for (const char *s = v; (item = next_item(&s, &len));) {
		if (!path_ok(item, len)) {
			*why = len ? "not an absolute path" : "empty item in the list";
			strv_free(list, count);
			return -EINVAL;
		}
		char **grown = realloc(list, (count + 1) * sizeof(*list));
		char *copy = grown ? strndup(item, len) : NULL;
		if (grown)
			list = grown;
		if (!copy) {
			strv_free(list, count);
			return -ENOMEM;
		}
		list[count++] = copy;
	}
	*out = list;
	*n = count;
	return 0;
}

static void names_free(struct config_names *l)
{
	strv_free(l->v, l->n);
	*l = (struct config_names){0};
}

/* A comma-separated list of user or group names (may be empty). 0,
 * -EINVAL (message in why, the bad name in *bad[0..*badlen)), -ENOMEM. */
static int parse_names(const char *v, struct config_names *out, const char **bad, size_t *badlen)
{
	struct config_names l = {.set = true};
	size_t len;
	const char *item;
	for (const char *s = *v ? v : NULL; (item = next_item(&s, &len));) {
		if (!cache_name_valid(item, len)) {
			*bad = item;
			*badlen = len;
			names_free(&l);
			return -EINVAL;
		}
		char **grown = realloc(l.v, (l.n + 1) * sizeof(*l.v));
		char *copy = grown ? strndup(item, len) : NULL;
		if (grown)
			l.v = grown;
		if (!copy) {
			names_free(&l);
			return -ENOMEM;
		}
		l.v[l.n++] = copy;
	}
	*out = l;
	return 0;
}

static int names_copy(const struct config_names *from, struct config_names *to)
{
	struct config_names l = {.v = calloc(from->n ? from->n : 1, sizeof(char *))};
	for (size_t i = 0; l.v && i < from->n; i++, l.n++)
		if (!(l.v[i] = strdup(from->v[i]))) {
			names_free(&l);
			return -ENOMEM;
		}
	if (!l.v)
		return -ENOMEM;
	names_free(to);
	*to = l;
	return 0;
}

bool config_names_has(const struct config_names *list, const char *name, bool case_sensitive)
{
	for (size_t i = 0; i < list->n; i++)
		if (case_sensitive ? strcmp(list->v[i], name) == 0
				   : cache_name_answers(CACHE_NAMES_STORED, name, list->v[i]))
			return true;
	return false;
}

/* ==== keys ========================================================================= */

/* Replace *slot with a copy of v. */
static int set_str(struct parse *ps, char **slot, const char *v)
{
	char *copy = strdup(v);
	if (!copy) {
		ps->oom = true;
		return -ENOMEM;
	}
	free(*slot);
	*slot = copy;
	return 0;
}

/* Mark key bit as given; false (and an error) when it was already. */
static bool first_time(struct parse *ps, unsigned *seen, unsigned bit, const char *key)
{
	if (*seen & bit) {
		perr(ps, "'%s' is given twice in this section", key);
		return false;
	}
	*seen |= bit;
	return true;
}

static void set_level(struct parse *ps, const char *key, const char *v, int *out)
{
	uint32_t n;
	if (parse_uint(v, 9, &n) < 0)
		perr(ps, "%s: '%s' is not a level from 0 to 9", key, v);
	else
		*out = (int)n;
}

/* An absolute path of at most max bytes. */
static void set_path(struct parse *ps, const char *key, const char *v, size_t max, char **out)
{
	if (!path_ok(v, strlen(v)))
		perr(ps, "%s: '%s' is not an absolute path", key, v);
	else if (strlen(v) > max)
		perr(ps, "%s: path longer than %zu bytes", key, max);
	else
		set_str(ps, out, v);
}

static void set_dir(struct parse *ps, const char *key, const char *v, char **out)
{
	/* the socket path run_dir/admin.sock must fit sockaddr_un */
	size_t max = strcmp(key, "run_dir") == 0 ? sizeof(((struct sockaddr_un *)0)->sun_path) - 12
						 : PATH_MAX - 64;
	set_path(ps, key, v, max, out);
}

static void set_memcache(struct parse *ps, const char *key, const char *v, uint32_t *out)
{
	int rc = parse_uint(v, 4096, out);
	if (rc < 0)
		perr(ps, "%s: '%s' is not a size in MiB from 0 to 4096", key, v);
}

static void set_names(struct parse *ps, const char *key, const char *v, struct config_names *out)
{
	const char *bad = "";
	size_t badlen = 0;
	struct config_names l;
	int rc = parse_names(v, &l, &bad, &badlen);
	if (rc == -ENOMEM) {
		ps->oom = true;
	} else if (rc < 0) {
		perr(ps, "%s: '%.*s' is not a valid name", key, (int)(badlen > 64 ? 64 : badlen),
		     bad);
	} else {
		names_free(out);
		*out = l;
	}
}

/* Keys whose value may be empty: an empty list. */
static bool empty_ok(const char *key)
{
	return strcmp(key, "filter_users") == 0 || strcmp(key, "filter_groups") == 0 ||
	       strcmp(key, "userdb_socket") == 0;
}

static const char *const idcache_keys[] = {
    "run_dir",
    "state_dir",
    "user",
    "domains",
    "debug_level",
    "memcache_size_passwd",
    "memcache_size_group",
    "memcache_size_initgroups",
    "filter_users",
    "filter_groups",
    "nscd_socket",
    "nscd_negative_ttl",
    "nscd_shared",
    "cache_map_size",
};

static int key_index(const char *const *keys, size_t n, const char *key)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(keys[i], key) == 0)
			return (int)i;
	return -1;
}

/* A key of a table of keys[0..n) given at most once each (seen: bit per
 * key, lines[k]: where key k was given): its index when its value is to be
 * parsed now, TABLE_KEY_NONE when it is none of them, TABLE_KEY_REPEATED
 * when it was given before (reported). */
#define TABLE_KEY_NONE     (-1)
#define TABLE_KEY_REPEATED (-2)
static int table_key(struct parse *ps, const char *const *keys, size_t n, const char *key,
		     unsigned *seen, unsigned *lines)
{
	int k = key_index(keys, n, key);
	if (k < 0)
		return TABLE_KEY_NONE;
	if (!first_time(ps, seen, 1u << k, key))
		return TABLE_KEY_REPEATED;
	lines[k] = ps->line;
	return k;
}

/* ---- connection limits ------------------------------------------------------------ */

static const char *const limit_keys[] = {
    "max_connections",       "max_connections_per_uid", "root_reserved_connections",
    "admin_max_connections", "max_unread_maps_per_uid",
};

static void limits_default(struct config_limits *l)
{
	l->max_connections = CONFIG_DEFAULT_MAX_CONNS;
	l->max_connections_per_uid = CONFIG_DEFAULT_MAX_CONNS_UID;
	l->root_reserved = CONFIG_DEFAULT_ROOT_RESERVED;
	l->admin_max_connections = CONFIG_DEFAULT_ADMIN_CONNS;
	l->max_unread_maps_per_uid = CONFIG_DEFAULT_UNREAD_MAPS;
}

static uint32_t *limit_slot(struct config_limits *l, int k)
{
	uint32_t *slots[] = {&l->max_connections, &l->max_connections_per_uid, &l->root_reserved,
			     &l->admin_max_connections, &l->max_unread_maps_per_uid};
	return slots[k];
}

/* A key of limit_keys: 1 when it was one (handled, errors reported). */
static bool limit_key(struct parse *ps, const char *key, const char *v)
{
	struct config_limits *l = &ps->cfg->limits;
	int k = table_key(ps, limit_keys, IDC_ARRAY_SIZE(limit_keys), key, &l->seen, l->line);
	if (k < 0)
		return k == TABLE_KEY_REPEATED;
	uint32_t min = k == 2 ? 0 : 1, n = 0;
	/* a refused value keeps the default: checked against the others, it
	 * would be reported again as theirs */
	if (parse_uint(v, CONFIG_MAX_CONNS_LIMIT, &n) < 0 || n < min)
		perr(ps, "%s: '%s' is not a number from %u to %u", key, v, (unsigned)min,
		     CONFIG_MAX_CONNS_LIMIT);
	else
		*limit_slot(l, k) = n;
	return true;
}

/* The limits against each other, at the line of the key that breaks it
 * (of the other one when that one was left at its default). */
static void check_limits(struct parse *ps)
{
	const struct config_limits *l = &ps->cfg->limits;
	if (l->max_connections_per_uid > l->max_connections)
		perr_at(ps, l->line[1] ? l->line[1] : l->line[0],
			"max_connections_per_uid (%u) is more than max_connections (%u)",
			l->max_connections_per_uid, l->max_connections);
	if (l->root_reserved >= l->max_connections)
		perr_at(
		    ps, l->line[2] ? l->line[2] : l->line[0],
		    "root_reserved_connections (%u) leaves no connection of max_connections (%u) "
		    "for other users",
		    l->root_reserved, l->max_connections);
}

/* ---- systemd's user database ------------------------------------------------------ */

static const char *const userdb_keys[] = {"userdb_socket", "userdb_enumerate"};

/* The socket's path: absolute, fitting sun_path, its file name (the
 * service name clients pass) printable. Empty: not served. */
static void set_userdb_socket(struct parse *ps, const char *v)
{
	const char *base = strrchr(v, '/');
	if (!*v)
		return;
	if (!path_ok(v, strlen(v)) || has_control(v))
		perr(ps, "userdb_socket: '%s' is not an absolute path", v);
	else if (strlen(v) >= sizeof(((struct sockaddr_un *)0)->sun_path))
		perr(ps, "userdb_socket: path longer than %zu bytes",
		     sizeof(((struct sockaddr_un *)0)->sun_path) - 1);
	else if (!base[1] || strcmp(base, "/.") == 0 || strcmp(base, "/..") == 0)
		perr(ps, "userdb_socket: '%s' names no socket file (the service name)", v);
	else
		set_str(ps, &ps->cfg->userdb.socket, v);
}

/* A key of userdb_keys: true when it was one (handled, errors reported). */
static bool userdb_key(struct parse *ps, const char *key, const char *v)
{
	struct config_userdb *u = &ps->cfg->userdb;
	int k = key_index(userdb_keys, IDC_ARRAY_SIZE(userdb_keys), key);
	if (k < 0)
		return false;
	if (!first_time(ps, &u->seen, 1u << k, key))
		return true;
	if (k == 0)
		set_userdb_socket(ps, v);
	else if (parse_bool(v, &u->enumerate) < 0)
		perr(ps, "%s: '%s' is not true or false", key, v);
	return true;
}

/* ---- subordinate id allocation ------------------------------------------------------ */

static const char *const subid_keys[] = {"subid_base", "subid_size", "subid_uid_min",
					 "subid_uid_max"};

static uint32_t *subid_slot(struct subid_alloc *a, int k)
{
	uint32_t *slots[] = {&a->base, &a->size, &a->uid_min, &a->uid_max};
	return slots[k];
}

/* A key of subid_keys: whether it was one (handled, errors reported). */
static bool subid_key(struct parse *ps, const char *key, const char *v)
{
	struct config_subid *s = &ps->cfg->subid;
	int k = table_key(ps, subid_keys, IDC_ARRAY_SIZE(subid_keys), key, &s->seen, s->line);
	if (k < 0)
		return k == TABLE_KEY_REPEATED;
	if (parse_uint(v, UINT32_MAX - 1, subid_slot(&s->alloc, k)) < 0)
		perr(ps, "%s: '%s' is not a number from 0 to %u", key, v, UINT32_MAX - 1);
	return true;
}

/* The allocation whole: subid_uid_max's default, then subid_alloc_check,
 * reported at the last subid key given. */
static void check_subid(struct parse *ps)
{
	struct config_subid *s = &ps->cfg->subid;
	bool fits = true;
	if (!(s->seen & (1u << 3)))
		s->alloc.uid_max =
		    subid_alloc_max_uid(s->alloc.base, s->alloc.size, s->alloc.uid_min, &fits);
	unsigned line = 0;
	for (size_t k = 0; k < IDC_ARRAY_SIZE(s->line); k++)
		line = s->line[k] > line ? s->line[k] : line;
	char why[200];
	if (!fits && s->alloc.size)
		perr_at(ps, line,
			"no subordinate id range of subid_size %u fits above subid_base %u",
			(unsigned)s->alloc.size, (unsigned)s->alloc.base);
	else if (subid_alloc_check(&s->alloc, why, sizeof(why)) < 0)
		perr_at(ps, line, "%s", why);
}

static void idcache_key(struct parse *ps, const char *key, const char *v)
{
	struct config *c = ps->cfg;
	int k = key_index(idcache_keys, IDC_ARRAY_SIZE(idcache_keys), key);
	if (k < 0 && limit_key(ps, key, v))
		return;
	if (k < 0 && userdb_key(ps, key, v))
		return;
	if (k < 0 && subid_key(ps, key, v))
		return;
	if (k < 0) {
		perr(ps, "unknown key '%s' in [idcache]", key);
		return;
	}
	if (!first_time(ps, &c->seen, 1u << k, key))
		return;
	switch (k) {
	case 0:
	case 1:
		set_dir(ps, key, v, k == 0 ? &c->run_dir : &c->state_dir);
		break;
	case 2:
		if (!cache_name_valid(v, strlen(v)))
			perr(ps, "user: '%s' is not a valid user name", v);
		else
			set_str(ps, &c->user, v);
		break;
	case 3:
		ps->domains_line = ps->line;
		set_str(ps, &ps->domains_list, v);
		break;
	case 4:
		set_level(ps, key, v, &c->debug_level);
		break;
	case 8:
	case 9:
		set_names(ps, key, v, k == 8 ? &c->filter_users : &c->filter_groups);
		break;
	case 10:
		set_path(ps, key, v, sizeof(((struct sockaddr_un *)0)->sun_path) - 1,
			 &c->nscd_socket);
		break;
	case 11:
		if (parse_uint(v, CONFIG_NSCD_NEG_TTL_MAX, &c->nscd_negative_ttl) < 0)
			perr(ps, "%s: '%s' is not a number of seconds from 0 to %u", key, v,
			     CONFIG_NSCD_NEG_TTL_MAX);
		break;
	case 12:
		if (parse_bool(v, &c->nscd_shared) < 0)
			perr(ps, "%s: '%s' is not true or false", key, v);
		break;
	case 13:
		if (parse_uint(v, CONFIG_CACHE_MAP_MAX_MB, &c->cache_map_size) < 0 ||
		    c->cache_map_size < 1)
			perr(ps, "%s: '%s' is not a size in MiB from 1 to %u", key, v,
			     CONFIG_CACHE_MAP_MAX_MB);
		break;
	default:
		set_memcache(ps, key, v,
			     k == 5   ? &c->memcache_size_passwd
			     : k == 6 ? &c->memcache_size_group
				      : &c->memcache_size_initgroups);
	}
}

static const char *const domain_keys[] = {
    "id_provider", "passwd_files", "group_files",   "entry_cache_timeout", "case_sensitive",
    "debug_level", "filter_users", "filter_groups", "allow_local_overlap", "subid_allocate",
};

#define DOMAIN_KEY_CASE_SENSITIVE 4 /* index in domain_keys */
#define DOMAIN_KEY_OVERLAP        8
#define DOMAIN_KEY_SUBID          9

static void set_provider(struct parse *ps, struct config_domain *d, const char *v)
{
	if (strcmp(v, "files") == 0)
		d->provider = CONFIG_PROVIDER_FILES;
#ifdef IDC_HAVE_LDAP
	else if (strcmp(v, "ldap") == 0)
		d->provider = CONFIG_PROVIDER_LDAP;
	else
		perr(ps, "id_provider: unknown provider '%s' (supported: files, ldap)", v);
#else
	else if (strcmp(v, "ldap") == 0)
		perr(ps, "id_provider: 'ldap' is not supported by this build (no libldap)");
	else
		perr(ps, "id_provider: unknown provider '%s' (supported: files)", v);
#endif
}

/* The ldap provider's keys (idcache.conf(5)); their values are checked by
 * lprov_config_set. entry_cache_timeout is a common domain key. */
static const char *const ldap_keys[] = {
    "ldap_uri",
    "ldap_search_base",
    "ldap_user_search_base",
    "ldap_group_search_base",
    "ldap_schema",
    "ldap_user_name",
    "ldap_user_uid_number",
    "ldap_user_gid_number",
    "ldap_user_gecos",
    "ldap_user_home_directory",
    "ldap_user_shell",
    "ldap_user_object_class",
    "ldap_group_name",
    "ldap_group_gid_number",
    "ldap_group_member",
    "ldap_group_object_class",
    "ldap_user_ssh_public_key",
    "ldap_default_bind_dn",
    "ldap_default_authtok_file",
    "ldap_id_use_start_tls",
    "ldap_auth_disable_tls_never_use_in_production",
    "ldap_tls_cacert",
    "ldap_tls_reqcert",
    "ldap_network_timeout",
    "ldap_search_timeout",
    "ldap_page_size",
    "entry_negative_timeout",
    "entry_cache_nowait_percentage",
    "refresh_expired_interval",
    "enumerate",
    "ignore_group_members",
    "ldap_member_names_from_rdn",
    "offline_timeout",
    "failover_primary_timeout",
    "min_id",
    "max_id",
    "ldap_max_reply_size",
    "ldap_max_entries",
    "ldap_group_nesting_level",
    "ldap_max_searches",
    "ldap_max_memory",
    "ldap_user_subuid_number",
    "ldap_user_subuid_count",
    "ldap_user_subgid_number",
    "ldap_user_subgid_count",
    "ldap_sync",
    "ldap_sync_fallback_timeout",
    "ldap_sync_keepalive",
    "ldap_poll_interval",
    "ldap_poll_full_interval",
};

#ifdef IDC_HAVE_LDAP
/* d's ldap options, created with their defaults on first use; NULL when
 * out of memory (noted). */
static struct lprov_config *ldap_cfg(struct parse *ps, struct config_domain *d)
{
	if (d->ldap)
		return d->ldap;
	if (!(d->ldap = calloc(1, sizeof(*d->ldap))) || lprov_config_init(d->ldap, d->name) < 0) {
		free(d->ldap);
		d->ldap = NULL;
		ps->oom = true;
	}
	return d->ldap;
}
#endif

/* One ldap provider key: 0 when it is one (handled, errors reported),
 * -ENOENT when it is not. */
static int ldap_key(struct parse *ps, struct config_domain *d, const char *key, const char *v)
{
	int k = key_index(ldap_keys, IDC_ARRAY_SIZE(ldap_keys), key);
	if (k < 0)
		return -ENOENT;
	if (d->ldap_seen & (1ull << k)) {
		perr(ps, "'%s' is given twice in this section", key);
		return 0;
	}
	d->ldap_seen |= 1ull << k;
	if (!d->ldap_line)
		d->ldap_line = ps->line;
	bool file =
	    strcmp(key, "ldap_default_authtok_file") == 0 || strcmp(key, "ldap_tls_cacert") == 0;
	if (file && !path_ok(v, strlen(v))) {
		perr(ps, "%s: '%s' is not an absolute path", key, v);
		return 0;
	}
#ifdef IDC_HAVE_LDAP
	struct idc_diag diag = {{0}};
	if (!ldap_cfg(ps, d))
		return 0;
	int rc = lprov_config_set(d->ldap, key, v, &diag);
	if (rc == -ENOMEM)
		ps->oom = true;
	else if (rc < 0)
		perr(ps, "%s", diag.msg);
#else
	(void)v;
#endif
	return 0;
}

static void set_files(struct parse *ps, const char *key, const char *v, char ***list, size_t *n)
{
	const char *why = "";
	char **paths;
	size_t count;
	int rc = parse_paths(v, &paths, &count, &why);
	if (rc == -ENOMEM) {
		ps->oom = true;
		return;
	}
	if (rc < 0) {
		perr(ps, "%s: %s", key, why);
		return;
	}
	strv_free(*list, *n);
	*list = paths;
	*n = count;
}

static void domain_key(struct parse *ps, const char *key, const char *v)
{
	struct config_domain *d = &ps->all[ps->cur];
	int k = key_index(domain_keys, IDC_ARRAY_SIZE(domain_keys), key);
	if (k < 0 && ldap_key(ps, d, key, v) == 0)
		return;
	if (k < 0) {
		perr(ps, "unknown key '%s' in [domain/%s]", key, d->name);
		return;
	}
	if (!first_time(ps, &d->seen, 1u << k, key))
		return;
	switch (k) {
	case 0:
		set_provider(ps, d, v);
		break;
	case 1:
		set_files(ps, key, v, &d->passwd_files, &d->npasswd);
		break;
	case 2:
		set_files(ps, key, v, &d->group_files, &d->ngroup);
		break;
	case 3:
		if (parse_uint(v, UINT32_MAX, &d->entry_cache_timeout) < 0)
			perr(ps, "entry_cache_timeout: '%s' is not a number of seconds", v);
		break;
	case 4:
	case DOMAIN_KEY_OVERLAP:
		if (parse_bool(v, k == 4 ? &d->case_sensitive : &d->allow_local_overlap) < 0)
			perr(ps, "%s: '%s' is not true or false", key, v);
		break;
	case DOMAIN_KEY_SUBID:
		if (parse_bool(v, &d->subid_allocate) < 0)
			perr(ps, "%s: '%s' is not true or false", key, v);
		break;
	case 6:
	case 7:
		set_names(ps, key, v, k == 6 ? &d->filter_users : &d->filter_groups);
		break;
	default:
		set_level(ps, key, v, &d->debug_level);
	}
}

/* inih's callback: one key = value of the line the reader handed out last. */
static int on_key(void *user, const char *section, const char *key, const char *value)
{
	(void)section; /* inih truncates long names; the reader's state is exact */
	struct parse *ps = user;
	if (!value || (!*value && !empty_ok(key))) {
		perr(ps, "'%s' has an empty value", key);
		return 1;
	}
	if (has_control(value)) {
		perr(ps, "'%s': the value contains a control character", key);
		return 1;
	}
	switch (ps->sec) {
	case SEC_NONE:
		perr(ps, "'%s' is outside any section", key);
		break;
	case SEC_IDCACHE:
		idcache_key(ps, key, value);
		break;
	case SEC_DOMAIN:
		domain_key(ps, key, value);
		break;
	case SEC_SKIP:
		break; /* the section header was already reported */
	}
	return 1; /* our errors are counted; keep inih going */
}

/* ==== sections ========================================================================= */

static struct config_domain *find_domain(struct parse *ps, const char *name, size_t len)
{
	for (size_t i = 0; i < ps->nall; i++)
		if (ps->all[i].name && strlen(ps->all[i].name) == len &&
		    memcmp(ps->all[i].name, name, len) == 0)
			return &ps->all[i];
	return NULL;
}

static int add_domain(struct parse *ps, const char *name, size_t len)
{
	if (ps->nall == ps->cap) {
		size_t cap = ps->cap ? ps->cap * 2 : 4;
		struct config_domain *grown = realloc(ps->all, cap * sizeof(*grown));
		if (!grown)
			return -ENOMEM;
		ps->all = grown;
		ps->cap = cap;
	}
	struct config_domain *d = &ps->all[ps->nall];
	*d = (struct config_domain){.line = ps->line,
				    .case_sensitive = true,
				    .debug_level = -1,
				    .entry_cache_timeout = CONFIG_DEFAULT_TTL};
	if (!(d->name = strndup(name, len)))
		return -ENOMEM;
	ps->cur = ps->nall++;
	return 0;
}

static void open_domain(struct parse *ps, const char *name, size_t len)
{
	struct config_domain *old = find_domain(ps, name, len);
	ps->sec = SEC_SKIP;
	if (!cache_domain_name_valid(name, len)) {
		perr(ps, "[domain/%.*s]: a domain name is 1-%u letters, digits, '-', '_' or '.'",
		     (int)len, name, CONFIG_DOMAIN_MAX);
	} else if (old) {
		perr(ps, "[domain/%s] is repeated (first at line %u)", old->name, old->line);
	} else if (add_domain(ps, name, len) < 0) {
		ps->oom = true;
	} else {
		ps->sec = SEC_DOMAIN;
	}
}

/* A header line "[name]" (s after the '['), checked as inih reads it. */
static void on_section(struct parse *ps, const char *s, size_t n)
{
	const char *close = memchr(s, ']', n);
	ps->sec = SEC_SKIP;
	if (!close) {
		perr(ps, "section header without ']'");
		return;
	}
	size_t len = (size_t)(close - s);
	if (len == 7 && memcmp(s, "idcache", 7) == 0) {
		if (ps->idcache_line)
			perr(ps, "[idcache] is repeated (first at line %u)", ps->idcache_line);
		else
			ps->sec = SEC_IDCACHE, ps->idcache_line = ps->line;
	} else if (len >= 7 && memcmp(s, "domain/", 7) == 0) {
		open_domain(ps, s + 7, len - 7);
	} else {
		perr(ps, "unknown section [%.*s] (expected [idcache] or [domain/NAME])",
		     (int)(len > 64 ? 64 : len), s);
	}
}

/* ==== line reader ========================================================================== */

/* Classify line[0..n) as inih will, to catch what it would only count:
 * section headers and lines that are neither comment nor key = value. */
static void inspect_line(struct parse *ps, const char *line, size_t n)
{
	while (n && (*line == ' ' || *line == '\t' || *line == '\r')) {
		line++;
		n--;
	}
	while (n && (line[n - 1] == ' ' || line[n - 1] == '\t' || line[n - 1] == '\r'))
		n--;
	if (ps->line == 1 && n >= 3 && memcmp(line, "\xEF\xBB\xBF", 3) == 0) {
		line += 3; /* UTF-8 BOM: inih skips it */
		n -= 3;
	}
	if (n == 0 || *line == ';' || *line == '#')
		return;
	if (*line == '[')
		on_section(ps, line + 1, n - 1);
	else if (!memchr(line, '=', n) && !memchr(line, ':', n))
		perr(ps, "expected 'key = value', '[section]' or a comment");
	else if (*line == '=' || *line == ':')
		perr(ps, "a key name is missing before '%c'", *line);
}

/* ini_reader: the next line into str[0..num), fgets-style. A line inih
 * could not take whole is replaced by an empty one after reporting it, so
 * inih's line count stays equal to ours. */
static char *read_line(char *str, int num, void *stream)
{
	struct parse *ps = stream;
	if (ps->p >= ps->end || num < 2)
		return NULL;
	const char *nl = memchr(ps->p, '\n', (size_t)(ps->end - ps->p));
	size_t n = nl ? (size_t)(nl - ps->p) : (size_t)(ps->end - ps->p);
	const char *line = ps->p;
	ps->p = nl ? nl + 1 : ps->end;
	ps->line++;
	if (memchr(line, '\0', n)) {
		perr(ps, "the line contains a NUL byte");
		n = 0;
	} else if (n + 2 > (size_t)num || n > CONFIG_LINE_MAX) {
		perr(ps, "line longer than %u bytes", CONFIG_LINE_MAX);
		n = 0;
	}
	memcpy(str, line, n);
	if (n > 0)
		inspect_line(ps, line, n);
	str[n] = '\n';
	str[n + 1] = '\0';
	return str;
}

/* ==== whole file ============================================================================ */

#ifdef IDC_HAVE_LDAP
/* An ldap domain: no files keys; case-insensitive unless told (LDAP names
 * are caseIgnore); the provider's whole-config check. */
static void check_ldap_domain(struct parse *ps, struct config_domain *d)
{
	struct idc_diag diag = {{0}};
	if (d->passwd_files || d->group_files)
		perr_at(ps, d->line,
			"[domain/%s]: passwd_files and group_files are for "
			"id_provider = files",
			d->name);
	if (!(d->seen & (1u << DOMAIN_KEY_CASE_SENSITIVE)))
		d->case_sensitive = false;
	if (!ldap_cfg(ps, d))
		return;
	d->ldap->entry_cache_timeout = d->entry_cache_timeout;
	if (lprov_config_check(d->ldap, &diag) < 0)
		perr_at(ps, d->line, "[domain/%s]: %s", d->name, diag.msg);
	bool ranges = d->ldap->map[LPROV_MAP_USER_SUBUID_NUMBER] ||
		      d->ldap->map[LPROV_MAP_USER_SUBGID_NUMBER];
	if ((ranges || d->subid_allocate) && d->ldap->max_id == 0)
		perr_at(ps, d->line,
			"[domain/%s]: subordinate id ranges (%s) need max_id: without it any id "
			"from min_id may be a user's, and no range is ever served",
			d->name, ranges ? "ldap_user_subuid_*/subgid_*" : "subid_allocate");
}
#endif

static void check_domain(struct parse *ps, struct config_domain *d)
{
	if (!d->provider) {
		perr_at(ps, d->line, "[domain/%s]: id_provider is missing (id_provider = files)",
			d->name);
		return;
	}
	if (!(d->seen & (1u << DOMAIN_KEY_SUBID)))
		d->subid_allocate = d->provider == CONFIG_PROVIDER_FILES;
	if (d->provider != CONFIG_PROVIDER_LDAP && d->ldap_line) {
		perr_at(ps, d->ldap_line, "[domain/%s]: ldap options need id_provider = ldap",
			d->name);
		return;
	}
	if (d->provider != CONFIG_PROVIDER_LDAP && (d->seen & (1u << DOMAIN_KEY_OVERLAP)))
		perr_at(ps, d->line,
			"[domain/%s]: allow_local_overlap is for remote domains "
			"(id_provider = ldap); a files domain is the host's own",
			d->name);
#ifdef IDC_HAVE_LDAP
	if (d->provider == CONFIG_PROVIDER_LDAP) {
		check_ldap_domain(ps, d);
		return;
	}
#endif
	/* sssd's files provider defaults, so a bare domain mirrors the host */
	if (!d->passwd_files && parse_paths("/etc/passwd", &d->passwd_files, &d->npasswd, NULL))
		ps->oom = true;
	if (!d->group_files && parse_paths("/etc/group", &d->group_files, &d->ngroup, NULL))
		ps->oom = true;
}

static void domain_free(struct config_domain *d)
{
	free(d->name);
	names_free(&d->filter_users);
	names_free(&d->filter_groups);
	strv_free(d->passwd_files, d->npasswd);
	strv_free(d->group_files, d->ngroup);
#ifdef IDC_HAVE_LDAP
	if (d->ldap)
		lprov_config_free(d->ldap);
#endif
	free(d->ldap);
}

/* Move domain *d into the served list (which takes ownership). */
static void serve(struct config *c, struct config_domain *d)
{
	c->domains[c->ndomains++] = *d;
	*d = (struct config_domain){0};
}

/* The served domains: the `domains` list in its order, else all. */
static void pick_domains(struct parse *ps)
{
	struct config *c = ps->cfg;
	if (!(c->domains = calloc(ps->nall ? ps->nall : 1, sizeof(*c->domains)))) {
		ps->oom = true;
		return;
	}
	if (!ps->domains_list) {
		for (size_t i = 0; i < ps->nall; i++)
			serve(c, &ps->all[i]);
		return;
	}
	size_t len;
	const char *item;
	for (const char *s = ps->domains_list; (item = next_item(&s, &len));) {
		/* served ones left ps->all (name NULL): a repeat is not found */
		struct config_domain *d = find_domain(ps, item, len);
		if (d) {
			serve(c, d);
			continue;
		}
		for (size_t i = 0; i < c->ndomains; i++)
			if (strlen(c->domains[i].name) == len &&
			    memcmp(c->domains[i].name, item, len) == 0)
				d = &c->domains[i];
		if (d)
			perr_at(ps, ps->domains_line, "domains: '%.*s' is listed twice", (int)len,
				item);
		else if (len == 0)
			perr_at(ps, ps->domains_line, "domains: empty item in the list");
		else
			perr_at(ps, ps->domains_line, "domains: no section [domain/%.*s]",
				(int)(len > 64 ? 64 : len), item);
	}
}

/* sssd's default for both lists: root. */
static int set_default_names(struct config_names *l)
{
	const char *bad;
	size_t badlen;
	return parse_names("root", l, &bad, &badlen);
}

/* Each remote domain without lists of its own takes [idcache]'s. */
static int resolve_filters(struct config *c)
{
	for (size_t i = 0; i < c->ndomains; i++) {
		struct config_domain *d = &c->domains[i];
		if (d->provider != CONFIG_PROVIDER_LDAP)
			continue;
		if (!d->filter_users.set && names_copy(&c->filter_users, &d->filter_users) < 0)
			return -ENOMEM;
		if (!d->filter_groups.set && names_copy(&c->filter_groups, &d->filter_groups) < 0)
			return -ENOMEM;
	}
	return 0;
}

static int set_defaults(struct config *c)
{
	if (!c->filter_users.set && set_default_names(&c->filter_users) < 0)
		return -ENOMEM;
	if (!c->filter_groups.set && set_default_names(&c->filter_groups) < 0)
		return -ENOMEM;
	if (!c->run_dir && !(c->run_dir = strdup(CONFIG_DEFAULT_RUN_DIR)))
		return -ENOMEM;
	if (!c->state_dir && !(c->state_dir = strdup(CONFIG_DEFAULT_STATE_DIR)))
		return -ENOMEM;
	if (!c->user && !(c->user = strdup(CONFIG_DEFAULT_USER)))
		return -ENOMEM;
	return 0;
}

static void finish(struct parse *ps)
{
	for (size_t i = 0; i < ps->nall; i++)
		check_domain(ps, &ps->all[i]);
	pick_domains(ps);
	check_limits(ps);
	check_subid(ps);
	if (ps->nall == 0)
		perr_at(ps, 0, "no domain configured (add a [domain/NAME] section)");
	if (set_defaults(ps->cfg) < 0 || (ps->cfg->domains && resolve_filters(ps->cfg) < 0))
		ps->oom = true;
}

static void configure_inih(void)
{
#ifdef IDC_INIH_RUNTIME_OPTIONS
	/* Debian's inih takes its options at run time: a heap line buffer
	 * big enough for long path lists, and no continuation lines (an
	 * indented key = value is an ordinary line, as in sssd.conf). */
	ini_use_stack = false;
	ini_allow_realloc = false;
	ini_max_line = (int)CONFIG_LINE_MAX + 3;
	ini_initial_alloc = (int)CONFIG_LINE_MAX + 3;
	ini_allow_multiline = false;
	ini_allow_no_value = false;
	ini_stop_on_first_error = false;
#endif
}

int config_parse(const char *label, const char *text, size_t len, struct config **out,
		 struct idc_buf *errors)
{
	struct parse ps = {.label = label, .p = text, .end = text + len, .errors = errors};
	if (!(ps.cfg = calloc(1, sizeof(*ps.cfg))))
		return -ENOMEM;
	ps.cfg->debug_level = -1;
	/* The memory cache is on unless a size is set to 0 (docs/DESIGN.md §7). */
	ps.cfg->memcache_size_passwd = CONFIG_DEFAULT_MEMCACHE_MB;
	ps.cfg->memcache_size_group = CONFIG_DEFAULT_MEMCACHE_MB;
	ps.cfg->memcache_size_initgroups = CONFIG_DEFAULT_MEMCACHE_MB;
	ps.cfg->cache_map_size = CONFIG_DEFAULT_CACHE_MAP_MB;
	limits_default(&ps.cfg->limits);
	ps.cfg->userdb.enumerate = true;
	subid_alloc_default(&ps.cfg->subid.alloc);
	ps.cfg->nscd_negative_ttl = CONFIG_DEFAULT_NSCD_NEG_TTL;
	ps.cfg->nscd_shared = true; /* as nscd.conf's "shared yes" */
	configure_inih();
	int rc = ini_parse_stream(read_line, &ps, on_key, &ps);
	if (rc > 0 && ps.nerr == 0)
		perr_at(&ps, (unsigned)rc, "syntax error"); /* one our reader did not foresee */
	if (rc < 0)
		ps.oom = true;
	finish(&ps);
	for (size_t i = 0; i < ps.nall; i++)
		domain_free(&ps.all[i]);
	free(ps.all);
	free(ps.domains_list);
	if (ps.oom || ps.nerr) {
		config_free(ps.cfg);
		return ps.oom ? -ENOMEM : IDC_ESYNTAX;
	}
	*out = ps.cfg;
	return 0;
}

/* ==== file ==================================================================================== */

static int load_fail(struct idc_buf *errors, int rc, const char *path, const char *why)
{
	if (errors)
		idc_buf_printf(errors, "%s: %s\n", path, why ? why : idc_strerror(rc));
	return rc;
}

/* Refuse what must not configure the daemon; st from fstat of the open fd,
 * so the checks apply to the very file that is read. */
static int check_file(const char *path, const struct stat *st, struct idc_buf *errors)
{
	if (!S_ISREG(st->st_mode))
		return load_fail(errors, -EINVAL, path, "not a regular file");
	if (st->st_mode & (S_IWGRP | S_IWOTH))
		return load_fail(errors, -EPERM, path,
				 "writable by group or others; refusing it (chmod go-w)");
	/* Whoever owns the file can rewrite it: only root, or the user the
	 * daemon runs as, may. */
	if (st->st_uid != 0 && st->st_uid != geteuid())
		return load_fail(errors, -EPERM, path,
				 "owned by another user; refusing it (chown root)");
	if (st->st_size > (off_t)CONFIG_FILE_MAX)
		return load_fail(errors, -EFBIG, path, "larger than 1 MiB");
	return 0;
}

#ifdef IDC_HAVE_LDAP
/* The configured user's uid, or (uid_t)-1 when it is not known. */
static uid_t user_uid(const char *user)
{
	struct passwd pw, *res = NULL;
	char buf[4096];
	if (!user || getpwnam_r(user, &pw, buf, sizeof(buf), &res) != 0 || !res)
		return (uid_t)-1;
	return pw.pw_uid;
}

/* The password prev's domain of that name read from the same file, or NULL. */
static const char *prev_secret(const struct config *prev, const struct config_domain *d)
{
	const struct config_domain *o = prev ? config_domain(prev, d->name) : NULL;
	if (!o || !o->ldap || !o->ldap->authtok || !o->ldap->authtok_file ||
	    strcmp(o->ldap->authtok_file, d->ldap->authtok_file) != 0)
		return NULL;
	return o->ldap->authtok;
}

/* The bind password file of an ldap domain, read now (at start, still as
 * root) and kept in memory for the provider, which never opens it. Opened
 * without following a symlink; the checks apply to the descriptor that is
 * read: a regular file no group or other can touch, owned by root, the
 * invoking user or the daemon's user. On a reload (prev) that cannot open
 * it any more (EACCES: a root-only file after the privilege drop), the
 * password read from the same path before is kept. */
static int read_secret(const struct config *c, const struct config *prev, struct config_domain *d,
		       struct idc_buf *errors)
{
	const char *path = d->ldap ? d->ldap->authtok_file : NULL;
	if (!path)
		return 0;
	struct idc_diag dg = {{0}};
	char *pw = NULL;
	int rc = lprov_read_authtok(path, user_uid(c->user), &pw, &dg);
	const char *old = rc == -EACCES ? prev_secret(prev, d) : NULL;
	if (old) {
		idc_log(IDC_LOG_INFO,
			"%s: not readable now; keeping the password read from it at start", path);
		return lprov_config_set_authtok(d->ldap, old, strlen(old));
	}
	if (rc)
		return load_fail(errors, rc, path, dg.msg[0] ? dg.msg : NULL);
	rc = lprov_config_set_authtok(d->ldap, pw, strlen(pw));
	explicit_bzero(pw, strlen(pw));
	free(pw);
	return rc;
}
#endif

static int load(const char *path, const struct config *prev, struct config **out,
		struct idc_buf *errors)
{
	/* O_NONBLOCK: a FIFO would block a reload, and the loop (check_file
	 * refuses anything but a regular file). */
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0)
		return load_fail(errors, -errno, path, NULL);
	struct stat st;
	int rc = fstat(fd, &st) < 0 ? -errno : 0;
	if (rc == 0)
		rc = check_file(path, &st, errors);
	else
		load_fail(errors, rc, path, NULL);
	char *buf = rc == 0 ? malloc(CONFIG_FILE_MAX + 1) : NULL;
	size_t len = 0;
	if (rc == 0 && !buf)
		rc = load_fail(errors, -ENOMEM, path, NULL);
	if (rc == 0 && (rc = idc_read_full(fd, buf, CONFIG_FILE_MAX + 1, &len)) < 0)
		load_fail(errors, rc, path, NULL);
	if (rc == 0 && len > CONFIG_FILE_MAX) /* grew since fstat */
		rc = load_fail(errors, -EFBIG, path, "larger than 1 MiB");
	close(fd);
	struct config *cfg = NULL;
	if (rc == 0)
		rc = config_parse(path, buf, len, &cfg, errors);
	free(buf);
#ifdef IDC_HAVE_LDAP
	for (size_t i = 0; rc == 0 && i < cfg->ndomains; i++)
		rc = read_secret(cfg, prev, &cfg->domains[i], errors);
#else
	(void)prev;
#endif
	if (rc == 0)
		*out = cfg;
	else
		config_free(cfg);
	return rc;
}

int config_load(const char *path, struct config **out, struct idc_buf *errors)
{
	return load(path, NULL, out, errors);
}

int config_reload(const char *path, const struct config *prev, struct config **out,
		  struct idc_buf *errors)
{
	return load(path, prev, out, errors);
}

void config_free(struct config *c)
{
	if (!c)
		return;
	for (size_t i = 0; i < c->ndomains; i++)
		domain_free(&c->domains[i]);
	free(c->domains);
	names_free(&c->filter_users);
	names_free(&c->filter_groups);
	free(c->run_dir);
	free(c->nscd_socket);
	free(c->state_dir);
	free(c->user);
	free(c->userdb.socket);
	free(c);
}

const struct config_domain *config_domain(const struct config *c, const char *name)
{
	for (size_t i = 0; i < c->ndomains; i++)
		if (strcmp(c->domains[i].name, name) == 0)
			return &c->domains[i];
	return NULL;
}

int config_log_level(int debug_level)
{
	/* sssd's scale: 0-1 fatal/critical, 2 serious, 3-5 minor and
	 * configuration, 6-9 tracing */
	if (debug_level < 0)
		return IDC_LOG_INFO;
	if (debug_level <= 1)
		return IDC_LOG_ERR;
	if (debug_level == 2)
		return IDC_LOG_WARN;
	return debug_level <= 5 ? IDC_LOG_INFO : IDC_LOG_DEBUG;
}

int config_effective_log_level(const struct config *c)
{
	int level = c->debug_level;
	for (size_t i = 0; i < c->ndomains; i++)
		if (c->domains[i].debug_level > level)
			level = c->domains[i].debug_level;
	return config_log_level(level);
}
