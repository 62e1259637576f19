/*
 * Fuzz target: the id2entry decoder over arbitrary bytes (a damaged or
 * hostile data.mdb). A record that decodes must be in canonical form:
 * encoding the decoded entry gives back exactly the same bytes, and every
 * attribute is found by name.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "store/store_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct store_scratch sc = {0};
	struct store_entry e;
	struct store_val ndn;
	if (store_entry_decode(data, size, 1, &sc, &e, &ndn) == 0) {
		struct idc_buf out = IDC_BUF_INIT;
		if (store_entry_encode(&e, ndn, &out) != 0 || out.len != size ||
		    memcmp(out.data, data, size) != 0)
			abort();
		for (size_t i = 0; i < e.nattrs; i++)
			if (store_entry_attr(&e, e.attrs[i].norm.ptr, e.attrs[i].norm.len) !=
			    &e.attrs[i])
				abort();
		idc_buf_free(&out);
	}
	store_scratch_free(&sc);
	return 0;
}
