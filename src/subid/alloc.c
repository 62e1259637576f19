/* subid alloc: the deterministic per-uid allocation (subid.h). All
 * arithmetic in 64 bits, so nothing wraps. */
#include "subid/subid.h"

#include <errno.h>
#include <stdio.h>

/* Ids available below the end limit 2^32 - 1 (the last usable id is
 * 2^32 - 2). */
#define SUBID_END ((uint64_t)UINT32_MAX)

uint32_t subid_alloc_max_uid(uint32_t base, uint32_t size, uint32_t uid_min, bool *fits)
{
	uint64_t slots = size ? (SUBID_END - base) / size : 0;
	*fits = slots >= 1;
	if (!*fits)
		return 0;
	uint64_t max = (uint64_t)uid_min + slots - 1;
	return max > UINT32_MAX - 1 ? UINT32_MAX - 1 : (uint32_t)max;
}

void subid_alloc_default(struct subid_alloc *a)
{
	bool fits;
	a->base = SUBID_DEFAULT_BASE;
	a->size = SUBID_DEFAULT_SIZE;
	a->uid_min = SUBID_DEFAULT_UID_MIN;
	a->uid_max = subid_alloc_max_uid(a->base, a->size, a->uid_min, &fits);
}

int subid_alloc_check(const struct subid_alloc *a, char *why, size_t cap)
{
	if (a->size == 0) {
		snprintf(why, cap, "subid_size must be at least 1");
		return -EINVAL;
	}
	if (a->uid_min > a->uid_max) {
		snprintf(why, cap, "subid_uid_min %u is above subid_uid_max %u",
			 (unsigned)a->uid_min, (unsigned)a->uid_max);
		return -EINVAL;
	}
	uint64_t end = a->base + ((uint64_t)a->uid_max - a->uid_min + 1) * a->size;
	if (end > SUBID_END) {
		bool fits;
		uint32_t max = subid_alloc_max_uid(a->base, a->size, a->uid_min, &fits);
		if (fits)
			snprintf(why, cap,
				 "subid_base %u + %u ranges of subid_size %u passes 4294967295; "
				 "subid_uid_max can be at most %u",
				 (unsigned)a->base, (unsigned)(a->uid_max - a->uid_min + 1),
				 (unsigned)a->size, (unsigned)max);
		else
			snprintf(why, cap,
				 "not one range of subid_size %u fits above subid_base %u",
				 (unsigned)a->size, (unsigned)a->base);
		return -EINVAL;
	}
	return 0;
}

void subid_alloc_block(const struct subid_alloc *a, uint32_t *first, uint32_t *last)
{
	uint64_t n = ((uint64_t)a->uid_max - a->uid_min + 1) * a->size;
	*first = a->base;
	*last = (uint32_t)(a->base + n - 1);
}

bool subid_alloc_range(const struct subid_alloc *a, uint32_t uid, uint32_t *start, uint32_t *count)
{
	if (uid < a->uid_min || uid > a->uid_max || a->size == 0)
		return false;
	*start = (uint32_t)(a->base + (uint64_t)(uid - a->uid_min) * a->size);
	*count = a->size;
	return true;
}

bool subid_alloc_owner(const struct subid_alloc *a, uint32_t id, uint32_t *uid)
{
	uint32_t first, last;
	if (a->size == 0 || a->uid_min > a->uid_max)
		return false;
	subid_alloc_block(a, &first, &last);
	if (id < first || id > last)
		return false;
	*uid = a->uid_min + (id - a->base) / a->size;
	return true;
}
