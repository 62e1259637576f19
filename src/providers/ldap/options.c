/* options: the domain's sssd.conf-like keys, their defaults and checks. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "providers/ldap/lprov_int.h"

static const char *const map_keys[LPROV_MAP_COUNT] = {
    [LPROV_MAP_USER_NAME] = "ldap_user_name",
    [LPROV_MAP_USER_UID] = "ldap_user_uid_number",
    [LPROV_MAP_USER_GID] = "ldap_user_gid_number",
    [LPROV_MAP_USER_GECOS] = "ldap_user_gecos",
    [LPROV_MAP_USER_HOME] = "ldap_user_home_directory",
    [LPROV_MAP_USER_SHELL] = "ldap_user_shell",
    [LPROV_MAP_USER_OC] = "ldap_user_object_class",
    [LPROV_MAP_GROUP_NAME] = "ldap_group_name",
    [LPROV_MAP_GROUP_GID] = "ldap_group_gid_number",
    [LPROV_MAP_GROUP_MEMBER] = "ldap_group_member",
    [LPROV_MAP_GROUP_OC] = "ldap_group_object_class",
    [LPROV_MAP_USER_SSH_KEY] = "ldap_user_ssh_public_key",
    [LPROV_MAP_USER_SUBUID_NUMBER] = "ldap_user_subuid_number",
    [LPROV_MAP_USER_SUBUID_COUNT] = "ldap_user_subuid_count",
    [LPROV_MAP_USER_SUBGID_NUMBER] = "ldap_user_subgid_number",
    [LPROV_MAP_USER_SUBGID_COUNT] = "ldap_user_subgid_count",
};

/* NULL: not read unless configured. */
static const char *const map_defaults[LPROV_MAP_COUNT] = {
    "uid",           "uidNumber",  "gidNumber",    "gecos",
    "homeDirectory", "loginShell", "posixAccount", "cn",
    "gidNumber",     "memberUid",  "posixGroup",   [LPROV_MAP_USER_SSH_KEY] = "sshPublicKey",
};

const char *lp_attr(const struct lprov_config *c, enum lprov_attr a)
{
	if (c->map[a])
		return c->map[a];
	if (a == LPROV_MAP_GROUP_MEMBER && c->schema == LPROV_RFC2307BIS)
		return "member";
	return map_defaults[a];
}

bool lp_id_in_range(const struct lprov_config *c, uint32_t id)
{
	return id >= c->min_id && (c->max_id == 0 || id <= c->max_id);
}

const char *lp_range_text(const struct lprov_config *c, char *buf, size_t cap)
{
	if (c->max_id == 0)
		snprintf(buf, cap, "min_id %u.. (no max_id)", (unsigned)c->min_id);
	else
		snprintf(buf, cap, "min_id %u..max_id %u", (unsigned)c->min_id,
			 (unsigned)c->max_id);
	return buf;
}

int lprov_config_init(struct lprov_config *c, const char *name)
{
	memset(c, 0, sizeof(*c));
	c->name = strdup(name ? name : "");
	if (!c->name)
		return -ENOMEM;
	c->tls_reqcert = LPROV_REQCERT_DEMAND;
	c->network_timeout_ms = 6000;
	c->search_timeout_ms = 6000;
	c->page_size = 1000;
	c->entry_cache_timeout = 5400;
	c->nowait_percentage = 50;
	c->negative_timeout_ms = 15000;
	c->offline_timeout_ms = 60000;
	c->primary_retry_ms = 31000;
	c->member_names_from_rdn = true;
	c->max_reply_bytes = 64u << 20;
	c->max_entries = 100000;
	c->nesting_level = 32;
	c->max_searches = 500;
	c->max_memory = 128u << 20;
	c->min_id = 1; /* sssd's default: no uid 0 or gid 0 from a directory */
	c->sync = LPROV_SYNC_AUTO;
	c->sync_fallback_ms = 300000;
	c->sync_keepalive_ms = 60000;
	c->poll_full_ms = 3600000;
	return 0;
}

void lprov_config_free(struct lprov_config *c)
{
	free(c->name);
	for (size_t i = 0; i < c->nuris; i++)
		free(c->uris[i]);
	free(c->search_base);
	free(c->user_base);
	free(c->group_base);
	for (size_t i = 0; i < LPROV_MAP_COUNT; i++)
		free(c->map[i]);
	free(c->bind_dn);
	free(c->authtok_file);
	if (c->authtok)
		explicit_bzero(c->authtok, strlen(c->authtok));
	free(c->authtok);
	free(c->tls_cacert);
	memset(c, 0, sizeof(*c));
}

int lprov_config_set_authtok(struct lprov_config *c, const char *secret, size_t len)
{
	char *p = malloc(len + 1);
	if (!p)
		return -ENOMEM;
	memcpy(p, secret, len);
	p[len] = '\0';
	if (c->authtok)
		explicit_bzero(c->authtok, strlen(c->authtok));
	free(c->authtok);
	c->authtok = p;
	return 0;
}

/* The policy for the password file, on the descriptor that is read. */
static int authtok_file_ok(int fd, uid_t also_owner, struct idc_diag *d)
{
	struct stat st;
	if (fstat(fd, &st) < 0)
		return idc_diag_set(d, -errno, "%s", idc_strerror(-errno));
	if (!S_ISREG(st.st_mode))
		return idc_diag_set(d, -EINVAL, "ldap_default_authtok_file: not a regular file");
	if (st.st_mode & (S_IRWXG | S_IRWXO))
		return idc_diag_set(d, -EPERM,
				    "ldap_default_authtok_file: readable or writable by group or "
				    "others; refusing it (chmod 600)");
	if (st.st_uid != 0 && st.st_uid != geteuid() && st.st_uid != also_owner)
		return idc_diag_set(d, -EPERM,
				    "ldap_default_authtok_file: owned by another user; refusing it "
				    "(chown it to root or the daemon's user)");
	return 0;
}

int lprov_read_authtok(const char *path, uid_t also_owner, char **out, struct idc_diag *d)
{
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0 && errno == ELOOP)
		return idc_diag_set(d, -ELOOP,
				    "ldap_default_authtok_file: a symbolic link; refusing it");
	if (fd < 0)
		return idc_diag_set(d, -errno, "%s", idc_strerror(-errno));
	char buf[1024];
	size_t len = 0;
	int rc = authtok_file_ok(fd, also_owner, d);
	if (!rc && (rc = idc_read_full(fd, buf, sizeof(buf) - 1, &len)) < 0)
		idc_diag_set(d, rc, "%s", idc_strerror(rc));
	close(fd);
	if (!rc) {
		buf[len] = '\0';
		len = strcspn(buf, "\r\n"); /* the first line */
		if (len == 0)
			rc = idc_diag_set(d, -EINVAL,
					  "ldap_default_authtok_file: empty (no password on the "
					  "first line)");
		else if (!(*out = strndup(buf, len)))
			rc = -ENOMEM;
	}
	explicit_bzero(buf, sizeof(buf));
	return rc;
}

/* Replace *slot with a copy of v. */
static int set_str(char **slot, const char *v)
{
	char *p = strdup(v);
	if (!p)
		return -ENOMEM;
	free(*slot);
	*slot = p;
	return 0;
}

/* A DN (search bases, the bind DN): one that does not parse would fail
 * every search at run time, so it is refused here, at its line. */
static int set_dn(char **slot, const char *v)
{
	LDAPDN dn = NULL;
	if (*v && ldap_str2dn(v, &dn, LDAP_DN_FORMAT_LDAPV3) != LDAP_SUCCESS)
		return -EINVAL;
	ldap_dnfree(dn);
	return set_str(slot, v);
}

static int parse_bool(const char *v, bool *out)
{
	if (!strcasecmp(v, "true") || !strcasecmp(v, "yes") || !strcmp(v, "1"))
		*out = true;
	else if (!strcasecmp(v, "false") || !strcasecmp(v, "no") || !strcmp(v, "0"))
		*out = false;
	else
		return -EINVAL;
	return 0;
}

/* "6", "0.5": seconds with up to three decimals, into milliseconds (at
 * most a day: a longer network timeout is a mistake). */
static int parse_secs_ms(const char *v, uint32_t *out)
{
	uint64_t ms = 0;
	const char *p = v;
	if (!*p)
		return -EINVAL;
	for (; *p >= '0' && *p <= '9'; p++) {
		ms = ms * 10 + (uint64_t)(*p - '0');
		if (ms > 86400)
			return -EINVAL;
	}
	ms *= 1000;
	if (*p == '.') {
		uint64_t scale = 100;
		for (p++; *p >= '0' && *p <= '9' && scale; p++, scale /= 10)
			ms += (uint64_t)(*p - '0') * scale;
	}
	if (*p || p == v)
		return -EINVAL;
	*out = (uint32_t)ms;
	return 0;
}

static int parse_u32(const char *v, uint32_t *out)
{
	uint64_t n = 0;
	const char *p = v;
	for (; *p >= '0' && *p <= '9'; p++) {
		n = n * 10 + (uint64_t)(*p - '0');
		if (n > UINT32_MAX)
			return -EINVAL;
	}
	if (*p || p == v)
		return -EINVAL;
	*out = (uint32_t)n;
	return 0;
}

/* "65536", "64k", "64M", "1G": bytes, into a 32-bit count (at most
 * 2 GiB). */
static int parse_size(const char *v, uint32_t *out)
{
	size_t n = strlen(v);
	uint32_t shift = 0;
	if (n > 1 && strchr("kKmMgG", v[n - 1]))
		shift = strchr("kK", v[n - 1]) ? 10 : strchr("mM", v[n - 1]) ? 20 : 30;
	char digits[16];
	size_t nd = n - (shift ? 1 : 0);
	if (nd == 0 || nd >= sizeof(digits))
		return -EINVAL;
	memcpy(digits, v, nd);
	digits[nd] = '\0';
	uint32_t base;
	if (parse_u32(digits, &base))
		return -EINVAL;
	uint64_t bytes = (uint64_t)base << shift;
	if (bytes > (1ull << 31))
		return -EINVAL;
	*out = (uint32_t)bytes;
	return 0;
}

/* ldap_uri: "ldap://a, ldaps://b" in failover order. A bad list leaves
 * the old one in place. */
static int parse_uris(struct lprov_config *c, const char *v)
{
	char *uris[LPROV_URIS_MAX];
	size_t n = 0;
	int rc = 0;
	for (const char *p = v; *p && !rc;) {
		while (*p == ',' || *p == ' ' || *p == '\t')
			p++;
		size_t len = strcspn(p, ", \t");
		if (!len)
			break;
		if (n == LPROV_URIS_MAX ||
		    (strncasecmp(p, "ldap://", 7) && strncasecmp(p, "ldaps://", 8)))
			rc = -EINVAL;
		else if (!(uris[n++] = strndup(p, len)))
			rc = -ENOMEM, n--;
		p += len;
	}
	if (!rc && !n)
		rc = -EINVAL;
	if (rc) {
		while (n)
			free(uris[--n]);
		return rc;
	}
	for (size_t i = 0; i < c->nuris; i++)
		free(c->uris[i]);
	memcpy(c->uris, uris, n * sizeof(*uris));
	c->nuris = n;
	return 0;
}

static int parse_reqcert(const char *v, enum lprov_reqcert *out)
{
	static const char *const names[] = {"never", "allow", "try", "demand"};
	for (size_t i = 0; i < IDC_ARRAY_SIZE(names); i++)
		if (!strcasecmp(v, names[i])) {
			*out = (enum lprov_reqcert)i;
			return 0;
		}
	if (!strcasecmp(v, "hard")) {
		*out = LPROV_REQCERT_DEMAND;
		return 0;
	}
	return -EINVAL;
}

static int parse_sync(const char *v, enum lprov_sync_mode *out)
{
	static const char *const names[] = {"auto", "syncrepl", "poll"};
	for (size_t i = 0; i < IDC_ARRAY_SIZE(names); i++)
		if (!strcasecmp(v, names[i])) {
			*out = (enum lprov_sync_mode)i;
			return 0;
		}
	return -EINVAL;
}

static int set_known(struct lprov_config *c, const char *k, const char *v)
{
	for (size_t i = 0; i < LPROV_MAP_COUNT; i++)
		if (!strcmp(k, map_keys[i]))
			return *v ? set_str(&c->map[i], v) : -EINVAL;
	if (!strcmp(k, "ldap_uri"))
		return parse_uris(c, v);
	if (!strcmp(k, "ldap_search_base"))
		return set_dn(&c->search_base, v);
	if (!strcmp(k, "ldap_user_search_base"))
		return set_dn(&c->user_base, v);
	if (!strcmp(k, "ldap_group_search_base"))
		return set_dn(&c->group_base, v);
	if (!strcmp(k, "ldap_schema")) {
		if (!strcasecmp(v, "rfc2307"))
			c->schema = LPROV_RFC2307;
		else if (!strcasecmp(v, "rfc2307bis"))
			c->schema = LPROV_RFC2307BIS;
		else
			return -EINVAL;
		return 0;
	}
	if (!strcmp(k, "ldap_default_bind_dn"))
		return set_dn(&c->bind_dn, v);
	if (!strcmp(k, "ldap_default_authtok_file"))
		return set_str(&c->authtok_file, v);
	if (!strcmp(k, "ldap_id_use_start_tls"))
		return parse_bool(v, &c->start_tls);
	if (!strcmp(k, "ldap_auth_disable_tls_never_use_in_production"))
		return parse_bool(v, &c->insecure_bind);
	if (!strcmp(k, "ldap_tls_cacert"))
		return set_str(&c->tls_cacert, v);
	if (!strcmp(k, "ldap_tls_reqcert"))
		return parse_reqcert(v, &c->tls_reqcert);
	if (!strcmp(k, "ldap_network_timeout"))
		return parse_secs_ms(v, &c->network_timeout_ms);
	if (!strcmp(k, "ldap_search_timeout"))
		return parse_secs_ms(v, &c->search_timeout_ms);
	if (!strcmp(k, "ldap_page_size"))
		return parse_u32(v, &c->page_size);
	if (!strcmp(k, "entry_cache_timeout"))
		return parse_u32(v, &c->entry_cache_timeout);
	if (!strcmp(k, "entry_cache_nowait_percentage")) {
		uint32_t n;
		if (parse_u32(v, &n) || n > 99)
			return -EINVAL;
		c->nowait_percentage = n;
		return 0;
	}
	if (!strcmp(k, "entry_negative_timeout"))
		return parse_secs_ms(v, &c->negative_timeout_ms);
	if (!strcmp(k, "refresh_expired_interval"))
		return parse_secs_ms(v, &c->refresh_expired_ms);
	if (!strcmp(k, "offline_timeout"))
		return parse_secs_ms(v, &c->offline_timeout_ms);
	if (!strcmp(k, "failover_primary_timeout"))
		return parse_secs_ms(v, &c->primary_retry_ms);
	if (!strcmp(k, "min_id") || !strcmp(k, "max_id")) {
		uint32_t n;
		bool min = k[1] == 'i';
		if (parse_u32(v, &n))
			return -EINVAL;
		/* Checked against the other bound as set so far: whichever of
		 * the two comes second is the one refused. */
		if (min ? c->max_id && n > c->max_id : n && n < c->min_id)
			return -ERANGE;
		*(min ? &c->min_id : &c->max_id) = n;
		return 0;
	}
	if (!strcmp(k, "enumerate"))
		return parse_bool(v, &c->enumerate);
	if (!strcmp(k, "ldap_member_names_from_rdn"))
		return parse_bool(v, &c->member_names_from_rdn);
	if (!strcmp(k, "ignore_group_members"))
		return parse_bool(v, &c->ignore_group_members);
	if (!strcmp(k, "ldap_max_reply_size"))
		return parse_size(v, &c->max_reply_bytes);
	if (!strcmp(k, "ldap_max_entries"))
		return parse_u32(v, &c->max_entries);
	if (!strcmp(k, "ldap_group_nesting_level"))
		return parse_u32(v, &c->nesting_level);
	if (!strcmp(k, "ldap_max_searches"))
		return parse_u32(v, &c->max_searches);
	if (!strcmp(k, "ldap_max_memory"))
		return parse_size(v, &c->max_memory);
	if (!strcmp(k, "ldap_sync"))
		return parse_sync(v, &c->sync);
	if (!strcmp(k, "ldap_sync_fallback_timeout"))
		return parse_secs_ms(v, &c->sync_fallback_ms);
	if (!strcmp(k, "ldap_sync_keepalive"))
		return parse_secs_ms(v, &c->sync_keepalive_ms);
	if (!strcmp(k, "ldap_poll_interval"))
		return parse_secs_ms(v, &c->poll_ms);
	if (!strcmp(k, "ldap_poll_full_interval"))
		return parse_secs_ms(v, &c->poll_full_ms);
	return -ENOENT;
}

int lprov_config_set(struct lprov_config *c, const char *key, const char *value, struct idc_diag *d)
{
	int rc = set_known(c, key, value);
	if (rc == -EINVAL)
		return idc_diag_set(d, rc, "%s: bad value '%.200s'", key, value);
	if (rc == -ENOENT)
		return idc_diag_set(d, rc, "%s: not an ldap provider option", key);
	if (rc == -ERANGE) { /* the two bounds as this line would make them */
		char lo[16], hi[16];
		bool min = key[1] == 'i';
		snprintf(lo, sizeof(lo), "%u", (unsigned)c->min_id);
		snprintf(hi, sizeof(hi), "%u", (unsigned)c->max_id);
		return idc_diag_set(
		    d, -EINVAL, "%s = %.200s: min_id must not exceed max_id (min_id %s, max_id %s)",
		    key, value, min ? value : lo, min ? hi : value);
	}
	return rc;
}

int lprov_config_check(const struct lprov_config *c, struct idc_diag *d)
{
	if (!c->nuris)
		return idc_diag_set(d, -EINVAL, "ldap_uri is required");
	if (!c->search_base && (!c->user_base || !c->group_base))
		return idc_diag_set(d, -EINVAL, "ldap_search_base is required");
	if (c->bind_dn && !c->authtok_file && !c->authtok)
		return idc_diag_set(d, -EINVAL,
				    "ldap_default_bind_dn needs ldap_default_authtok_file");
	if (c->page_size == 0 || c->page_size > 100000)
		return idc_diag_set(d, -EINVAL, "ldap_page_size must be 1..100000");
	if (c->max_reply_bytes < LP_REPLY_MIN)
		return idc_diag_set(d, -EINVAL, "ldap_max_reply_size must be at least %u bytes",
				    (unsigned)LP_REPLY_MIN);
	if (c->max_memory < LP_MEMORY_MIN)
		return idc_diag_set(d, -EINVAL, "ldap_max_memory must be at least %u bytes",
				    (unsigned)LP_MEMORY_MIN);
	if (c->max_entries == 0 || c->max_searches == 0)
		return idc_diag_set(d, -EINVAL,
				    "ldap_max_entries and ldap_max_searches must be positive");
	if (c->nesting_level > LP_NESTING_MAX)
		return idc_diag_set(d, -EINVAL, "ldap_group_nesting_level must be 0..%u",
				    (unsigned)LP_NESTING_MAX);
	if (c->network_timeout_ms == 0 || c->search_timeout_ms == 0)
		return idc_diag_set(d, -EINVAL, "timeouts must be positive");
	if (c->max_id && c->min_id > c->max_id)
		return idc_diag_set(d, -EINVAL, "min_id (%u) must not exceed max_id (%u)",
				    (unsigned)c->min_id, (unsigned)c->max_id);
	for (size_t i = LPROV_MAP_USER_SUBUID_NUMBER; i <= LPROV_MAP_USER_SUBGID_NUMBER; i += 2)
		if (!c->map[i] != !c->map[i + 1])
			return idc_diag_set(d, -EINVAL,
					    "%s and %s are given together or not at all",
					    map_keys[i], map_keys[i + 1]);
	for (size_t i = 0; c->bind_dn && !c->start_tls && !c->insecure_bind && i < c->nuris; i++)
		if (!strncasecmp(c->uris[i], "ldap://", 7))
			return idc_diag_set(
			    d, -EINVAL,
			    "a bind password over plain %.200s without StartTLS would cross the "
			    "network in clear: use ldaps:// or ldap_id_use_start_tls = true "
			    "(ldap_auth_disable_tls_never_use_in_production = true allows it)",
			    c->uris[i]);
	return 0;
}
