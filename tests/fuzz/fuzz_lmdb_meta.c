/*
 * Fuzz target for the LMDB meta-page check that decides whether a state
 * file may be opened. Beyond "reads nothing outside the input" (the
 * sanitizers): an accepted input has sane fields, and the answer depends
 * only on the bytes of the two meta pages, so more bytes after them change
 * nothing.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/store.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what)
{
	fprintf(stderr, "fuzz_lmdb_meta: %s\n", what);
	abort();
}

static void check_fields(const struct store_lmdb_meta *m)
{
	if (m->psize < 512 || m->psize > 65536 || (m->psize & (m->psize - 1)))
		fail("accepted a bad page size");
	if (m->last_pg < 1 || m->last_pg >= (UINT64_C(1) << 48) || m->mapsize == 0)
		fail("accepted a bad last page or map size");
	for (int i = 0; i < 2; i++)
		if (m->root[i] != UINT64_MAX && (m->root[i] < 2 || m->root[i] > m->last_pg))
			fail("accepted a root outside the file's pages");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct store_lmdb_meta m, m2;
	struct idc_diag d = {{0}};
	int rc = store_lmdb_meta_parse(data, size, &m, &d);
	if (rc != 0 && (rc != IDC_ECORRUPT || !d.msg[0]))
		fail("an error without a reason");
	if (rc != 0)
		return 0;
	check_fields(&m);
	/* the same meta pages followed by more bytes: the same answer */
	uint8_t *more = malloc(size + 64);
	if (!more)
		return 0;
	memcpy(more, data, size);
	memset(more + size, 0xa5, 64);
	if (store_lmdb_meta_parse(more, size + 64, &m2, NULL) != 0 ||
	    memcmp(&m, &m2, sizeof(m)) != 0)
		fail("trailing bytes changed the answer");
	free(more);
	return 0;
}
