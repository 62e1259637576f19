/*
 * config: idcache.conf, the daemon's INI configuration (sssd.conf-like),
 * parsed with libinih into a struct config, with every error reported as
 * "file:line: what".
 *
 * Owns: the config file format (documented in idcache.conf(5)).
 * May call: util, cache (name rules), libinih, libc.
 *
 * Sections: [idcache] (daemon-wide keys) and [domain/NAME] (one domain
 * each). Unknown sections and keys, repeated keys and bad values are
 * errors; parsing goes on after one so every error is reported at once.
 */
#ifndef IDC_DAEMON_CONFIG_H
#define IDC_DAEMON_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/proto.h"
#include "providers/ldap/lprov.h" /* struct lprov_config (no libldap needed) */
#include "subid/subid.h"
#include "util/util.h"

#define CONFIG_DEFAULT_PATH         "/etc/idcache/idcache.conf"
#define CONFIG_DEFAULT_RUN_DIR      PROTO_DEFAULT_RUN_DIR
#define CONFIG_DEFAULT_STATE_DIR    "/var/lib/idcache"
#define CONFIG_DEFAULT_USER         "idcache"
#define CONFIG_DEFAULT_TTL          5400u
#define CONFIG_DEFAULT_MEMCACHE_MB  8u               /* per map */
#define CONFIG_DEFAULT_CACHE_MAP_MB 1024u            /* cache.mdb's first map */
#define CONFIG_CACHE_MAP_MAX_MB     (1024u * 1024u)  /* 1 TiB */
#define CONFIG_DOMAIN_MAX           CACHE_DOMAIN_MAX /* longest domain name */
#define CONFIG_FILE_MAX             (1024u * 1024u)  /* larger config files are refused */
#define CONFIG_LINE_MAX             4096u            /* longer lines are errors */

/* Connection limits (idcache.conf(5), "CONNECTION LIMITS") */
#define CONFIG_DEFAULT_MAX_CONNS     1024u
#define CONFIG_DEFAULT_MAX_CONNS_UID 128u
#define CONFIG_DEFAULT_ROOT_RESERVED 32u
#define CONFIG_DEFAULT_ADMIN_CONNS   16u
#define CONFIG_DEFAULT_UNREAD_MAPS   16u
#define CONFIG_MAX_CONNS_LIMIT       65536u

/* nscd_socket (idcache.conf(5), "NSCD SOCKET") */
#define CONFIG_DEFAULT_NSCD_NEG_TTL 20u /* seconds, as nscd's passwd default */
#define CONFIG_NSCD_NEG_TTL_MAX     3600u

struct config_limits {
	uint32_t max_connections;         /* nss.sock, everyone together */
	uint32_t max_connections_per_uid; /* nss.sock, one uid other than root */
	uint32_t root_reserved;           /* of max_connections, only root's */
	uint32_t admin_max_connections;   /* admin.sock, a budget of its own */
	uint32_t max_unread_maps_per_uid; /* MCMAP replies with unread descriptors */
	unsigned seen;                    /* keys given (bit per key) */
	unsigned line[5];                 /* where each was given */
};

/* systemd's user database socket (idcache.conf(5), "SYSTEMD USER
 * DATABASE"): off unless userdb_socket names one. */
#define CONFIG_USERDB_DIR "/run/systemd/userdb"
struct config_userdb {
	char *socket;   /* absolute path; NULL: not served */
	bool enumerate; /* enumeration answered (default), else EnumerationNotSupported */
	unsigned seen;  /* keys given (bit per key) */
};

enum config_provider { CONFIG_PROVIDER_FILES = 1, CONFIG_PROVIDER_LDAP };

/* filter_users / filter_groups: names, each valid (cache_name_valid). */
struct config_names {
	char **v;
	size_t n;
	bool set; /* given in this section (an empty value is an empty list) */
};

struct config_domain {
	char *name;
	unsigned line; /* of the section header */
	enum config_provider provider;
	char **passwd_files; /* absolute paths; default /etc/passwd */
	size_t npasswd;
	char **group_files; /* default /etc/group */
	size_t ngroup;
	uint32_t entry_cache_timeout; /* seconds; 0 = never expires */
	bool case_sensitive;
	int debug_level; /* 0-9, -1 when not set */
	/* Names this domain never serves (sssd's filter_users/filter_groups):
	 * the section's own lists, else for a remote domain [idcache]'s (by
	 * default root), else none. Resolved at parse time. */
	struct config_names filter_users, filter_groups;
	/* A remote domain serves users and groups whose name or id the host's
	 * files or an earlier domain hold (docs/DESIGN.md §11: not by default). */
	bool allow_local_overlap;
	unsigned seen; /* keys given (bit per key), to refuse repeats */
	/* id_provider = ldap: every ldap_* option (and the provider's other
	 * keys), checked by the provider's own lprov_config_set/_check;
	 * entry_cache_timeout is copied in. NULL for other providers. */
	struct lprov_config *ldap;
	unsigned ldap_line; /* first provider-specific key, for errors */
	uint64_t ldap_seen; /* provider keys given (bit per key) */
	/* subid_allocate: users without ranges of their own get the
	 * allocation's (config.subid). Default: files domains yes, ldap no. */
	bool subid_allocate;
};

/* [idcache] subid_base, subid_size, subid_uid_min, subid_uid_max: the
 * subordinate id allocation (subid/subid.h), checked whole; uid_max
 * defaults to the most that fit. */
struct config_subid {
	struct subid_alloc alloc;
	unsigned seen;    /* keys given (bit per key) */
	unsigned line[4]; /* where each was given */
};

struct config {
	char *run_dir, *state_dir, *user;
	int debug_level; /* 0-9, -1 when not set */
	/* MiB per shared-memory map (daemon_mc_configure); 0 disables it */
	uint32_t memcache_size_passwd;
	uint32_t memcache_size_group;
	uint32_t memcache_size_initgroups;
	/* [idcache] filter_users / filter_groups: the remote domains'
	 * default (root and root when not given). */
	struct config_names filter_users, filter_groups;
	/* Served domains in serving order (the `domains` list, else file
	 * order). */
	struct config_domain *domains;
	size_t ndomains;
	unsigned seen;
	struct config_limits limits;
	struct config_userdb userdb;
	struct config_subid subid;
	/* The nscd protocol's socket (daemon/nscd.c); NULL: not served. */
	char *nscd_socket;
	/* How long a name or id no source holds is answered "not found"
	 * through it without asking the host's sources again (seconds). */
	uint32_t nscd_negative_ttl;
	/* GETFDPW/GETFDGR answered with glibc's maps (daemon/nscdmaps.c);
	 * false: refused, so glibc asks the socket for every lookup. */
	bool nscd_shared;
	/* MiB of cache.mdb's map when the daemon opens it (the file's size
	 * when that is larger); a full map is doubled (docs/DESIGN.md §5). */
	uint32_t cache_map_size;
};

/* Parse text[0..len) (need not be NUL-terminated; may hold anything) named
 * label in messages. On success *out is a config the caller frees with
 * config_free. On failure returns IDC_ESYNTAX (or -ENOMEM) and, when
 * errors is not NULL, appends one "label:line: message\n" per error. */
int config_parse(const char *label, const char *text, size_t len, struct config **out,
		 struct idc_buf *errors);

/* Read and parse path. Refused before parsing: not a regular file, larger
 * than CONFIG_FILE_MAX, or writable by group or others (the config decides
 * which files the daemon trusts for identities). After parsing, each
 * ldap_default_authtok_file is read (its first line, kept in the domain's
 * ldap options as the password, wiped when freed; the provider never opens
 * the file): refused when it is a symbolic link, not a regular file,
 * readable or writable by group or others, owned by someone other than
 * root, the invoking user or the configured `user`, or empty — checked with
 * fstat on the descriptor that is read. Errors as config_parse, or the
 * -errno of open/read with a message in errors. */
int config_load(const char *path, struct config **out, struct idc_buf *errors);
/* config_load for a reload: a password file that cannot be opened any more
 * (EACCES: root-only, and the daemon has dropped root) keeps the password
 * prev read from the same path. */
int config_reload(const char *path, const struct config *prev, struct config **out,
		  struct idc_buf *errors);

void config_free(struct config *c);

/* Whether list holds name: exactly when case_sensitive, else a listed name
 * that a lookup of name ignoring case is answered by (cache_name_answers). */
bool config_names_has(const struct config_names *list, const char *name, bool case_sensitive);

/* The domain called name, or NULL. */
const struct config_domain *config_domain(const struct config *c, const char *name);

/* idc_log level for a debug_level (0-9, sssd's scale; -1: default INFO). */
int config_log_level(int debug_level);

/* The highest debug_level of the daemon and its domains, as a log level
 * (one process, one log level). */
int config_effective_log_level(const struct config *c);

#endif
