/*
 * subid: subordinate uid and gid ranges (subuid(5), subgid(5)) — the
 * deterministic allocation the daemon computes for users without ranges
 * of their own (alloc.c), and libsubid_idcache.so, the plugin shadow-utils'
 * libsubid loads for `subid: idcache` in nsswitch.conf (plugin.c).
 *
 * Owns: the allocation formula below, and the plugin's entry points.
 * May call: libc; the plugin also proto's codec and client (libc only,
 * allocation-free), nothing else: it runs inside setuid newuidmap.
 *
 * Conventions: ids are u32; a range is (start, count) with count >= 1 and
 * start + count <= 2^32 - 1 (subid_range_ok): (uid_t)-1 is never in one.
 *
 * The allocation: users whose uid lies in uid_min..uid_max get
 *
 *     start = base + (uid - uid_min) * size,   count = size
 *
 * for subordinate uids and gids alike. The map is strictly increasing in
 * uid with steps of exactly size, so two uids never get overlapping
 * ranges, and every range lies inside the block
 * [base, base + (uid_max - uid_min + 1) * size), which must end at or
 * below 2^32 - 1 (subid_alloc_check). Whether the block is clear of every
 * id the host's users and groups may hold is the daemon's check
 * (precedence.c), made for every range it serves.
 *
 * Threads: everything here is reentrant.
 */
#ifndef IDC_SUBID_H
#define IDC_SUBID_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The defaults: 65536 ids each (login.defs' SUB_UID_COUNT), from 2^31 —
 * above the id ranges systemd reserves (dynamic users, homed, nspawn's
 * container ranges up to 1879048191) and above SSSD's default id mapping
 * (200000..2000200000) — for uids from 1000 (Debian's first user) up to
 * as many as fit below 2^32 - 1: 1000..33766. */
#define SUBID_DEFAULT_BASE    2147483648u
#define SUBID_DEFAULT_SIZE    65536u
#define SUBID_DEFAULT_UID_MIN 1000u

/* Whether (start, count) is a range idcache stores and serves: count >= 1
 * and start + count <= 2^32 - 1, so the sum cannot wrap and the last id is
 * at most 2^32 - 2, never (uid_t)-1. The one check, for the LDAP provider,
 * the daemon and the protocol's decoder (header only: proto's codec links
 * nothing but libc). */
static inline bool subid_range_ok(uint32_t start, uint32_t count)
{
	return count >= 1 && start <= UINT32_MAX - count;
}

struct subid_alloc {
	uint32_t base;    /* first id of the block */
	uint32_t size;    /* ids per user, >= 1 */
	uint32_t uid_min; /* first uid covered */
	uint32_t uid_max; /* last uid covered, >= uid_min */
};

/* The largest uid_max that fits base, size and uid_min (0 with
 * *fits false when not even one range fits). */
uint32_t subid_alloc_max_uid(uint32_t base, uint32_t size, uint32_t uid_min, bool *fits);

/* Fill a with the defaults. */
void subid_alloc_default(struct subid_alloc *a);

/* Whether a is usable: size >= 1, uid_min <= uid_max, and the block ends
 * at or below 2^32 - 1. 0, or -EINVAL with why[0..cap) saying what is
 * wrong. */
int subid_alloc_check(const struct subid_alloc *a, char *why, size_t cap);

/* The block's first and last id (a checked). */
void subid_alloc_block(const struct subid_alloc *a, uint32_t *first, uint32_t *last);

/* uid's range: true with *start, *count set when a covers uid. */
bool subid_alloc_range(const struct subid_alloc *a, uint32_t uid, uint32_t *start, uint32_t *count);

/* The one uid whose range holds id: true with *uid set when id is in the
 * block. */
bool subid_alloc_owner(const struct subid_alloc *a, uint32_t id, uint32_t *uid);

#endif
