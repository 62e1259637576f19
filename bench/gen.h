/*
 * gen: a deterministic directory of users and groups for benchmarks and
 * `idcache perf`. The same options (seed included) give the same bytes on
 * every run and machine: all randomness comes from splitmix64 seeded by
 * (seed, entry number), so any entry can be made on its own, in any order,
 * without making the ones before it.
 *
 * Entry sequence (gen_entry's n): 0 the base entry, 1 ou=people, 2
 * ou=groups, then users 0..users-1, then groups 0..groups-1.
 * User i: uid=<prefix><10-digit uidNumber>, uidNumber 10000 + i.
 * Group k: cn=group<k>, gidNumber 10000 + k, members a pseudo-random subset
 * of the users; user 0 is in groups 0..big_user_groups-1.
 *
 * May call: util, libc. Uses store.h for its value types only.
 */
#ifndef IDC_BENCH_GEN_H
#define IDC_BENCH_GEN_H

#include <stdint.h>
#include <stdio.h>

#include "store/store.h"
#include "util/util.h"

#define GEN_UID_BASE 10000u /* uidNumber of user 0 */
#define GEN_GID_BASE 10000u /* gidNumber of group 0 */

struct gen_opts {
	uint64_t users;
	uint64_t groups;
	uint64_t seed;
	const char *base;         /* NULL: "dc=example,dc=com"; must start with dc= or o= */
	uint64_t big_user_groups; /* user 0 is in this many groups (groups is raised to it) */
	unsigned members;         /* average members per group; 0: 10 */
	const char *uid_prefix;   /* NULL: "u" (all-digit names confuse tools) */
};

struct gen;

/* Validate o and make a generator (copies what it needs from o). 0,
 * -EINVAL with d saying why, or -ENOMEM. Free with gen_free. */
int gen_new(const struct gen_opts *o, struct gen **out, struct idc_diag *d);
void gen_free(struct gen *g);

/* Entries gen_entry can make: 3 + users + groups. */
uint64_t gen_nentries(const struct gen *g);
uint64_t gen_users(const struct gen *g);
uint64_t gen_groups(const struct gen *g);

/* One generated entry. dn and pairs point into the record's own memory:
 * valid until the next gen_* call that fills the same record or
 * gen_rec_free. Pair names are static strings. Values are all LDIF
 * SAFE-STRINGs (printable ASCII, no leading space, ':' or '<'). */
struct gen_rec {
	struct store_val dn;
	struct store_pair *pairs;
	size_t npairs;

	/* private: reused between calls */
	struct idc_buf text;
	size_t *voff;
	size_t pcap;
	uint64_t *picks;
	size_t kcap;
};

#define GEN_REC_INIT                                                                               \
	{                                                                                          \
		{NULL, 0}, NULL, 0, IDC_BUF_INIT, NULL, 0, NULL, 0                                 \
	}

void gen_rec_free(struct gen_rec *r);

/* Entry n of the sequence above. 0, -ERANGE past the end, -ENOMEM. */
int gen_entry(const struct gen *g, uint64_t n, struct gen_rec *r);
/* User i (0-based) / group k (0-based). 0, -ERANGE, -ENOMEM. */
int gen_user(const struct gen *g, uint64_t i, struct gen_rec *r);
int gen_group(const struct gen *g, uint64_t k, struct gen_rec *r);

/* The uid of user i ("u0000010042") into out (>= 64 bytes); its length. */
size_t gen_user_name(const struct gen *g, uint64_t i, char *out, size_t cap);

/* Append r as an LDIF record (dn line, one line per pair, blank line). */
int gen_rec_ldif(const struct gen_rec *r, struct idc_buf *out);

/* Write "version: 1" and every entry as LDIF to f, buffered in 1 MiB
 * chunks. 0, -EIO (errno of the failed write in d) or -ENOMEM. */
int gen_write_ldif(const struct gen *g, FILE *f, struct idc_diag *d);

#endif
