/*
 * Fuzz target for src/daemon/config.c: the input is a whole idcache.conf.
 * It goes through config_parse (our line reader feeding libinih's
 * ini_parse_stream, the handler, the final checks). Nothing may crash,
 * leak or read out of bounds; an accepted config must satisfy the
 * invariants the daemon relies on.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "daemon/config.h"
#include "providers/ldap/lprov.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(const struct config *c)
{
	if (!c->run_dir || c->run_dir[0] != '/' || !c->state_dir || !c->user || c->ndomains == 0)
		__builtin_trap();
	/* userdb_socket: an absolute path naming a file, fitting sun_path */
	const char *u = c->userdb.socket;
	if (u && (u[0] != '/' || strlen(u) > 107 || !strrchr(u, '/')[1]))
		__builtin_trap();
	for (size_t i = 0; i < c->ndomains; i++) {
		const struct config_domain *d = &c->domains[i];
		if (!d->name || !*d->name || strlen(d->name) > CONFIG_DOMAIN_MAX ||
		    config_domain(c, d->name) != d)
			__builtin_trap();
		if (d->provider == CONFIG_PROVIDER_LDAP) {
			/* The provider's own check ran: servers, a base, a range. */
			const struct lprov_config *l = d->ldap;
			if (!l || l->nuris == 0 || !l->search_base ||
			    (l->max_id && l->min_id > l->max_id))
				__builtin_trap();
			for (size_t k = 0; k < l->nuris; k++)
				if (strncasecmp(l->uris[k], "ldap://", 7) &&
				    strncasecmp(l->uris[k], "ldaps://", 8)) /* schemes: any case */
					__builtin_trap();
			continue;
		}
		if (d->provider != CONFIG_PROVIDER_FILES || d->ldap || d->npasswd == 0 ||
		    d->ngroup == 0)
			__builtin_trap();
		for (size_t k = 0; k < d->npasswd; k++)
			if (d->passwd_files[k][0] != '/')
				__builtin_trap();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct config *c = NULL;
	struct idc_buf errors = IDC_BUF_INIT;
	int rc = config_parse("fuzz.conf", (const char *)data, size, &c, &errors);
	if (rc == 0)
		check(c);
	else if (rc != -12 && (!errors.data || errors.len == 0))
		__builtin_trap(); /* a refusal always says why */
	config_free(c);
	idc_buf_free(&errors);
	return 0;
}
