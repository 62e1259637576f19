/*
 * Fuzz target for the subordinate id replies (src/proto): the input is
 * taken as a SUBIDS reply payload and as a SUBID_OWNERS one. A decoded
 * SUBIDS reply must hold only ranges the rule allows (subid_range_ok), and
 * reading past its count must give nothing; the plugin's containment test
 * (a range inside one of them) is run on every range with bounds taken
 * from the input. Nothing may crash or read out of bounds.
 */
#include <stdint.h>
#include <string.h>

#include "proto/proto.h"
#include "subid/subid.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct proto_subids s;
	if (proto_decode_subids(data, size, &s) == 0) {
		if ((size_t)s.count * 8 + 8 != size)
			__builtin_trap();
		for (uint32_t i = 0; i <= s.count; i++) {
			uint32_t start, count;
			proto_subids_get(&s, i, &start, &count);
			if (i < s.count && !subid_range_ok(start, count))
				__builtin_trap();
			if (i == s.count && (start || count))
				__builtin_trap();
		}
	}
	struct proto_gids g;
	if (proto_decode_gids(data, size, &g) == 0 && (size_t)g.count * 4 + 4 != size)
		__builtin_trap();
	return 0;
}
