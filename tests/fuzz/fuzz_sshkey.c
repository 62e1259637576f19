/*
 * Fuzz target for idc_ssh_key_check (src/util/sshkey.c), which reads every
 * sshPublicKey value a directory sends. The input is one value. The line
 * it reports must lie inside the input, and a line it accepts must be
 * accepted again as it is (trimmed, nothing around it), as the cache and
 * `idcache ssh-authorized-keys` check it again. Nothing may crash or read
 * out of bounds.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* An exact-size copy so a read past the value is caught. */
	char *v = malloc(size ? size : 1);
	if (!v)
		return 0;
	memcpy(v, data, size);
	struct idc_ssh_key k;
	int rc = idc_ssh_key_check(v, size, &k);
	if (k.start > size || k.len > size - k.start || (rc == 0) != (k.why == NULL))
		__builtin_trap();
	if (rc == 0) {
		struct idc_ssh_key again;
		if (idc_ssh_key_check(v + k.start, k.len, &again) != 0 || again.start != 0 ||
		    again.len != k.len || memchr(v + k.start, '\n', k.len))
			__builtin_trap();
	}
	free(v);
	return 0;
}
