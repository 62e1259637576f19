/*
 * reload: switch the daemon to a configuration — at start and on SIGHUP or
 * RELOAD. The new domain list is built aside and swapped in whole; on any
 * failure the old configuration stays in force. A domain whose source is
 * unchanged keeps its provider state (no reload of its files); a new or
 * changed one starts fresh and is refreshed at once. Directories and the
 * user are fixed at start: changing them needs a restart.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/daemon.h"

static struct domain *take_old(struct daemon *dm, const struct config_domain *cfg)
{
	for (size_t i = 0; i < dm->ndomains; i++) {
		struct domain *d = dm->domains[i];
		if (d && domain_same_source(d->cfg, cfg)) {
			dm->domains[i] = NULL; /* taken: not retired below */
			return d;
		}
	}
	return NULL;
}

/* Put the taken domains back where they came from (the attempt failed). */
static void give_back(struct daemon *dm, struct domain **doms, size_t n, const bool *fresh)
{
	for (size_t i = 0; i < n; i++) {
		if (!doms[i])
			continue;
		if (fresh[i]) {
			domain_retire(doms[i]);
			continue;
		}
		for (size_t k = 0; k < dm->ndomains; k++)
			if (!dm->domains[k]) {
				dm->domains[k] = doms[i];
				break;
			}
	}
}

/* The domains for cfg: kept or new. 0 or -errno (dm unchanged). */
static int build(struct daemon *dm, const struct config *cfg, struct domain **doms, bool *fresh)
{
	for (size_t i = 0; i < cfg->ndomains; i++) {
		doms[i] = take_old(dm, &cfg->domains[i]);
		if (doms[i])
			continue;
		int rc = domain_new(dm, &cfg->domains[i], &doms[i]);
		if (rc < 0) {
			give_back(dm, doms, i, fresh);
			return rc;
		}
		fresh[i] = true;
	}
	return 0;
}

static bool configured(const struct config *cfg, const char *name)
{
	for (size_t i = 0; i < cfg->ndomains; i++)
		if (strcmp(cfg->domains[i].name, name) == 0)
			return true;
	return false;
}

static void swap_in(struct daemon *dm, struct config *cfg, struct domain **doms, const char **names)
{
	for (size_t i = 0; i < dm->ndomains; i++)
		if (dm->domains[i]) {
			const char *name = dm->domains[i]->cfg->name;
			if (configured(cfg, name) && dm->domains[i]->ldap)
				idc_log(IDC_LOG_INFO,
					"domain %s: connecting anew with the options in force",
					name);
			else if (configured(cfg, name))
				idc_log(IDC_LOG_INFO,
					"domain %s: its source changed; loading it anew", name);
			else
				idc_log(IDC_LOG_INFO, "domain %s: no longer served", name);
			domain_retire(dm->domains[i]);
		}
	for (size_t i = 0; i < cfg->ndomains; i++) {
		doms[i]->cfg = &cfg->domains[i];
		names[i] = cfg->domains[i].name;
	}
	free(dm->domains);
	free(dm->names);
	config_free(dm->cfg);
	dm->domains = doms;
	dm->names = names;
	dm->ndomains = cfg->ndomains;
	dm->cfg = cfg;
}

static int apply(struct daemon *dm, struct config *cfg)
{
	/* An ldap domain starts over (retired, freed after the batch): a store
	 * of its in flight tells its changes to the maps, which look at the
	 * domain's configuration and at every domain. Finished here, while the
	 * list and the configuration in force are whole (as stop does). */
	for (size_t i = 0; i < dm->ndomains; i++)
		ldapdom_drain(dm->domains[i]->ldap);
	size_t n = cfg->ndomains ? cfg->ndomains : 1;
	struct domain **doms = calloc(n, sizeof(*doms));
	const char **names = calloc(n, sizeof(*names));
	bool *fresh = calloc(n, sizeof(*fresh));
	int rc = doms && names && fresh ? build(dm, cfg, doms, fresh) : -ENOMEM;
	if (rc < 0) {
		free(doms);
		free(names);
		free(fresh);
		return rc;
	}
	swap_in(dm, cfg, doms, names);
	for (size_t i = 0; i < cfg->ndomains; i++)
		if (fresh[i])
			domain_schedule(doms[i], 0, false);
	free(fresh);
	return 0;
}

static void warn_fixed(const struct daemon *dm, const struct config *cfg)
{
	if (strcmp(cfg->run_dir, dm->run_dir) != 0)
		idc_log(IDC_LOG_WARN, "run_dir changed: takes effect after a restart");
	if (strcmp(cfg->state_dir, dm->state_dir) != 0)
		idc_log(IDC_LOG_WARN, "state_dir changed: takes effect after a restart");
	if (strcmp(cfg->user, dm->user) != 0)
		idc_log(IDC_LOG_WARN, "user changed: takes effect after a restart");
	const char *udb = dm->userdb.io.fd >= 0 ? dm->userdb.path : "";
	if (strcmp(cfg->userdb.socket ? cfg->userdb.socket : "", udb) != 0)
		idc_log(IDC_LOG_WARN, "userdb_socket changed: takes effect after a restart");
	const char *nscd = cfg->nscd_socket ? cfg->nscd_socket : "";
	if (strcmp(nscd, dm->nscd_path ? dm->nscd_path : "") != 0)
		idc_log(IDC_LOG_WARN, "nscd_socket changed: takes effect after a restart");
}

static void log_errors(const struct idc_buf *errors)
{
	const char *s = errors->data ? errors->data : "";
	while (*s) {
		const char *nl = strchr(s, '\n');
		int len = nl ? (int)(nl - s) : (int)strlen(s);
		idc_log(IDC_LOG_ERR, "%.*s", len, s);
		s += len + (nl ? 1 : 0);
	}
}

/* Whether a files domain of cfg reads path (a group file when group). */
static bool files_domain_reads(const struct config *cfg, const char *path, bool group)
{
	for (size_t i = 0; i < cfg->ndomains; i++) {
		const struct config_domain *d = &cfg->domains[i];
		char *const *v = group ? d->group_files : d->passwd_files;
		size_t n = group ? d->ngroup : d->npasswd;
		for (size_t j = 0; d->provider == CONFIG_PROVIDER_FILES && j < n; j++)
			if (strcmp(v[j], path) == 0)
				return true;
	}
	return false;
}

/* The recommended nsswitch.conf line, "idcache [NOTFOUND=return] files",
 * makes the daemon's "not found" final while it runs: the host's own users
 * are found only when a files domain serves their file. A warning for the
 * daemon the host's NSS module finds (the default run_dir); information
 * for another (a test, the demo), which clients reach only when pointed at
 * it. */
static void warn_host_files(const struct config *cfg)
{
	static const char *const files[2] = {"/etc/passwd", "/etc/group"};
	int level = strcmp(cfg->run_dir, PROTO_DEFAULT_RUN_DIR) == 0 ? IDC_LOG_WARN : IDC_LOG_INFO;
	for (int g = 0; g < 2; g++)
		if (!files_domain_reads(cfg, files[g], g))
			idc_log(level,
				"no files domain reads %s: with \"%s: idcache [NOTFOUND=return] "
				"files\" in nsswitch.conf its entries are not found while idcached "
				"runs (add one; see libnss_idcache(8))",
				files[g], g ? "group" : "passwd");
}

int daemon_apply_config(struct daemon *dm, struct config *cfg)
{
	bool reload = dm->mc_opened;
	int rc = apply(dm, cfg);
	if (rc < 0)
		return rc;
	/* The domain order, the filters and the overlap rules decide which
	 * domain answers (docs/DESIGN.md §11): the maps' answers may be another's. */
	for (int k = 0; reload && k < 3; k++)
		daemon_mc_reset(dm, k);
	daemon_mc_configure(dm, cfg); /* failures are logged; lookups go to the socket */
	if (!cfg->nscd_shared)
		nscdmaps_close(dm); /* marked: clients ask again, are refused, use the socket */
	listener_fd_budget(cfg);
	dm->config_gen++; /* enumeration snapshots may list other domains now */
	idc_log_init("idcached", dm->foreground, config_effective_log_level(cfg));
	warn_host_files(cfg);
	return 0;
}

int daemon_reload(struct daemon *dm, struct idc_buf *errors)
{
	struct config *cfg = NULL;
	int rc = config_reload(dm->config_path, dm->cfg, &cfg, errors);
	if (rc == 0) {
		warn_fixed(dm, cfg);
		rc = daemon_apply_config(dm, cfg);
		if (rc == 0)
			nscd_neg_clear(dm); /* the negative TTL, or the sources, may change */
		if (rc < 0) {
			idc_buf_printf(errors, "cannot apply the configuration: %s\n",
				       idc_strerror(rc));
			config_free(cfg);
		}
	}
	if (rc < 0) {
		log_errors(errors);
		idc_log(IDC_LOG_ERR, "reload failed: the current configuration stays in force");
		return rc;
	}
	idc_log(IDC_LOG_INFO, "configuration reloaded: %zu domains", dm->ndomains);
	return 0;
}

void daemon_retry_offline(struct daemon *dm)
{
	for (size_t i = 0; i < dm->ndomains; i++)
		ldapdom_retry_now(dm->domains[i]);
}
