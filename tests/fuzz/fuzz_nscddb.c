/*
 * Fuzz target for glibc's lookup over an nscd map (nscddb_find): the input
 * is a map. Names and ids those in the corpus hold, and a few more, are
 * looked up with every entry type; nothing may crash, hang or read outside
 * the input, and a hit must be a usable record inside it whose response
 * header fits.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nscddb/nscddb.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const keys[] = {"alice", "bob", "root", "staff", "0", "5001", "6000", "x", ""};
static const int types[] = {NSCDDB_GETPWBYNAME, NSCDDB_GETPWBYUID, NSCDDB_GETGRBYNAME,
			    NSCDDB_GETGRBYGID, NSCDDB_INITGROUPS};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* a private, 8-aligned copy: exactly size bytes, so ASan sees any
	 * read past the end */
	uint8_t *map = malloc(size ? size : 1);
	if (map == NULL)
		return 0;
	memcpy(map, data, size);
	for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++)
		for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++) {
			const struct nscddb_datahead *dh =
			    nscddb_find(map, size, types[t], keys[k], strlen(keys[k]) + 1);
			if (dh == NULL)
				continue;
			const uint8_t *p = (const uint8_t *)dh;
			if (p < map || p + NSCDDB_DH_SIZE + 12 > map + size || !dh->usable ||
			    dh->allocsize < 0 || p + dh->allocsize > map + size)
				__builtin_trap();
		}
	free(map);
	return 0;
}
