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

#include "daemon/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(const struct config *c)
{
	if (!c->run_dir || c->run_dir[0] != '/' || !c->state_dir || !c->user || c->ndomains == 0)
		__builtin_trap();
	for (size_t i = 0; i < c->ndomains; i++) {
		const struct config_domain *d = &c->domains[i];
		if (!d->name || !*d->name || strlen(d->name) > CONFIG_DOMAIN_MAX ||
		    d->provider != CONFIG_PROVIDER_FILES || d->npasswd == 0 || d->ngroup == 0 ||
		    config_domain(c, d->name) != d)
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
