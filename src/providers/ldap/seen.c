/*
 * seen: the users an enumeration (or a poll pass) committed and let go of.
 * A million users parsed into the request's arena held the whole answer
 * until its end; what the rest of the request still asks of them is
 * small: whether a DN was seen (a second copy is skipped), the name of a
 * member DN that is not named by its RDN, and whether a name was answered
 * (the same name from a second entry is refused; a complete full pass
 * removes the cached names it did not answer). So a stored page's users
 * leave the request, and only a hash of each normalized DN (with the
 * name) and of each folded name stay: about 60 bytes a user.
 *
 * The hashes are 64 bits, seeded per domain (a directory cannot pick two
 * DNs that collide); two entries colliding by chance (about 3 in 10^8 at
 * a million users) would be taken for one.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "providers/ldap/lprov_int.h"

struct lp_seen_slot {
	uint64_t h;   /* 0: empty */
	uint32_t off; /* the name, at names + off */
};

static uint64_t nonzero(uint64_t h)
{
	return h ? h : 1;
}

uint64_t lp_seen_hash(const struct lprov_domain *ld, const char *s)
{
	return nonzero(idc_hash64(s, strlen(s), ld->hash_seed));
}

static int names_put(struct lp_seen *s, const char *name, uint32_t *off)
{
	size_t len = strlen(name) + 1;
	if (s->nlen + len > UINT32_MAX)
		return -ENOMEM;
	if (s->nlen + len > s->ncap) {
		size_t cap = s->ncap ? s->ncap * 2 : 16384;
		while (cap < s->nlen + len)
			cap *= 2;
		char *p = realloc(s->names, cap);
		if (!p)
			return -ENOMEM;
		s->names = p;
		s->ncap = cap;
	}
	memcpy(s->names + s->nlen, name, len);
	*off = (uint32_t)s->nlen;
	s->nlen += len;
	return 0;
}

int lp_seen_add(struct lp_seen *s, uint64_t dn_h, const char *name, uint64_t name_h)
{
	int rc = lp_hset_add(&s->names_h, name_h, SIZE_MAX);
	if (rc < 0)
		return rc;
	if (idc_oat_find(&s->dn, sizeof(struct lp_seen_slot), dn_h))
		return 1;
	uint32_t off;
	if (names_put(s, name, &off))
		return -ENOMEM;
	void *slot;
	if (idc_oat_claim(&s->dn, sizeof(struct lp_seen_slot), dn_h, 1024, &slot))
		return -ENOMEM; /* the name stays unused in names: harmless */
	*(struct lp_seen_slot *)slot = (struct lp_seen_slot){dn_h, off};
	return 0;
}

const char *lp_seen_name(const struct lp_seen *s, uint64_t dn_h)
{
	const struct lp_seen_slot *slot = idc_oat_find(&s->dn, sizeof(*slot), dn_h);
	return slot ? s->names + slot->off : NULL;
}

bool lp_seen_has_name(const struct lp_seen *s, uint64_t name_h)
{
	return lp_hset_has(&s->names_h, name_h);
}

size_t lp_seen_bytes(const struct lp_seen *s)
{
	return idc_oat_bytes(&s->dn, sizeof(struct lp_seen_slot)) +
	       idc_oat_bytes(&s->names_h.t, sizeof(uint64_t)) + s->ncap;
}

void lp_seen_free(struct lp_seen *s)
{
	idc_oat_free(&s->dn);
	free(s->names);
	lp_hset_free(&s->names_h);
	memset(s, 0, sizeof(*s));
}
