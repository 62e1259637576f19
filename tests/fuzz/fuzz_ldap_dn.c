/*
 * Fuzz target for what the LDAP provider does with member values and DNs
 * a server sends: normalization (fast path and libldap's parser), the
 * first RDN, and filter escaping. Beyond "does not crash": a normalized
 * DN normalizes to itself, and an escaped value contains no filter
 * metacharacters.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "providers/ldap/lprov_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct idc_arena a = IDC_ARENA_INIT;
	const char *in = (const char *)data;
	char *n = lp_dn_normalize(&a, in, size);
	if (n) {
		char *again = lp_dn_normalize(&a, n, strlen(n));
		if (!again || strcmp(again, n)) {
			fprintf(stderr, "fuzz_ldap_dn: '%s' does not normalize to itself\n", n);
			abort();
		}
		char *attr, *value;
		if (lp_dn_first_ava(&a, n, &attr, &value) == 0 && !attr[0])
			abort();
		(void)lp_dn_under(n, "dc=example,dc=com");
	}
	struct idc_buf b = IDC_BUF_INIT;
	if (lp_filter_escape(&b, in, size) == 0 && b.data && strpbrk(b.data, "()*"))
		abort();
	idc_buf_free(&b);
	idc_arena_free(&a);
	return 0;
}
