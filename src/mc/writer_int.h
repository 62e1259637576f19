/*
 * mc writer internals, shared by writer.c (the writer) and writer_check.c
 * (its invariants, checked in debug builds). Nothing outside src/mc/ includes
 * this.
 *
 * ==== Invariants ============================================================
 *
 * They hold whenever no writer function is running (a call that changes the
 * map breaks them only between its first and its last store). f is a live
 * record's first slot, rec(f) the struct mc_rec there.
 *
 * Slots and accounting
 *   S1  owner[s] is MC_NONE or the first slot f of a live record with
 *       f <= s < f + rec(f)->nslots. A live record is exactly a slot f with
 *       owner[f] == f, and it owns all of its nslots slots.
 *   S2  1 <= nslots <= slot_count / 4 and f + nslots <= hwm; nslots is
 *       exactly what sizeof(struct mc_rec) + rec(f)->len bytes take.
 *   S3  used == the sum of the live records' nslots (== the slots whose
 *       owner is not MC_NONE); records == the number of live records ==
 *       hdr->records; hdr->evictions == evictions.
 *   S4  The ring: head <= hwm <= slot_count, and no slot at or above hwm
 *       has ever been written (the memfd's zeros are still there).
 *   S5  The header's magic, version, kind and geometry are those the writer
 *       built the map with; status is not UNINIT.
 * Records
 *   R1  A live record's seq is even. Its payload starts with its name (a
 *       wire str inside len) and name_hash is that name's hash.
 *   R2  links[f] is a nonzero subset of LINK_NAME | LINK_ID (a record left
 *       on no chain is removed); LINK_NAME alone and id 0 in an initgroups
 *       map. links[s] is 0 at every slot that is no live record's first.
 * Chains
 *   C1  Every chain ends in MC_NONE after at most `records` steps: no cycle,
 *       no index outside the slots. (The reader's MC_MAX_CHAIN cut makes a
 *       longer chain a miss; the writer does not keep chains that short.)
 *   C2  A record is on a chain only for a key it holds: every slot on name
 *       chain b is a live record with LINK_NAME whose name_hash falls in b;
 *       every slot on id chain b one with LINK_ID whose id's hash falls in b.
 *   C3  A live record holding LINK_NAME is on the name chain of its bucket
 *       exactly once, one holding LINK_ID on the id chain of its bucket
 *       exactly once. With C1 and C2: the chains' lengths add up to the
 *       number of live records holding each key.
 *   C4  A key has one answer: no two records on the name chains carry the
 *       same name, no two on the id chains the same id.
 * Reuse
 *   U1  reuse_gen is bumped after the last record on a range of slots below
 *       hwm is unlinked and before the first byte of a new record is
 *       written into it. A range at or above hwm (S4: never written) is
 *       written without one.
 *
 * Checked (writer_check.c) in builds without NDEBUG — the default
 * debugoptimized build, which the tests run — and fatal there: a broken
 * invariant prints which and where, and aborts. On every change, what it
 * touched, in O(length of the chains touched + slots taken): each link and
 * unlink walks its chain after (C1, C2; C4 for the record linked, C3 for
 * the one unlinked), a removed record is on no chain of a key it lacked
 * (C2), a stored record and its slots are checked whole (S1, S2, R1, R2,
 * C3), a range written without a reuse_gen bump is still zero (U1, S4), and
 * the header's counters agree (S3, S5). The whole map (all of the above),
 * in O(slots + chain steps), every slot_count changes — about a tenth of
 * a put on each change, whatever the map's size — and before a reset
 * replaces it. Release builds check nothing. The reader never asserts: to
 * it the map is hostile input.
 * =============================================================================
 */
#ifndef IDC_MC_WRITER_INT_H
#define IDC_MC_WRITER_INT_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "mc/mc.h"
#include "util/util.h"

/* The chains a record is on are the keys it answers (enum mc_key). */
#define LINK_NAME MC_KEY_NAME
#define LINK_ID   MC_KEY_ID

struct mc_writer {
	uint32_t kind;
	int ro_fd; /* read-only descriptor of the current map, for clients */
	uint64_t generation;
	uint8_t *base; /* the whole map, read-write */
	size_t len;
	struct mc_header *hdr;
	_Atomic uint32_t *tab_name, *tab_id;
	uint8_t *slots;
	uint32_t nbuckets, slot_count, slot_size;
	uint32_t *owner;  /* per slot: first slot of the record covering it, or MC_NONE */
	uint8_t *links;   /* per first slot: LINK_* chains the record is on */
	uint32_t head;    /* ring: next slot to hand out */
	uint32_t hwm;     /* slots below have held a record: reusing them bumps reuse_gen */
	uint32_t used;    /* slots held by live records */
	uint32_t records; /* live records */
	uint64_t evictions;
	uint32_t changes;       /* since the last whole-map check (debug builds) */
	struct idc_buf scratch; /* payload being encoded */
};

static inline struct mc_rec *rec_at(const struct mc_writer *w, uint32_t slot)
{
	return (struct mc_rec *)(void *)(w->slots + (size_t)slot * w->slot_size);
}

static inline uint64_t hash_name(const struct mc_writer *w, const char *name, size_t len)
{
	return idc_hash64(name, len, w->hdr->seed);
}

static inline uint64_t hash_id(const struct mc_writer *w, uint32_t id)
{
	return idc_hash64(&id, sizeof(id), w->hdr->seed);
}

/* The name a record's payload starts with (a wire str: u32 length, bytes,
 * NUL), in *name and *len; false when the payload holds none. */
static inline bool rec_name(const struct mc_rec *rec, const char **name, uint32_t *len)
{
	const uint8_t *p = (const uint8_t *)(rec + 1);
	uint32_t n;
	if (rec->len < 4)
		return false;
	memcpy(&n, p, 4);
	if ((size_t)rec->len < 4 + (size_t)n + 1)
		return false;
	*name = (const char *)p + 4;
	*len = n;
	return true;
}

/* The head of chain b of the key link, and a record's next word on it. */
static inline _Atomic uint32_t *chain_head(const struct mc_writer *w, uint8_t link, uint32_t b)
{
	return link == LINK_NAME ? &w->tab_name[b] : &w->tab_id[b];
}

static inline _Atomic uint32_t *rec_next(struct mc_rec *rec, uint8_t link)
{
	return link == LINK_NAME ? &rec->next_name : &rec->next_id;
}

/* The bucket a record's key link falls in. */
static inline uint32_t key_bucket(const struct mc_writer *w, const struct mc_rec *rec, uint8_t link)
{
	return mc_bucket(link == LINK_NAME ? rec->name_hash : hash_id(w, rec->id), w->nbuckets);
}

/* ---- checks (writer_check.c); no-ops under NDEBUG --------------------------------------- */

#ifndef NDEBUG
/* Chain b of link after slot was linked into it: C1, C2, slot on it once,
 * C4 for slot's key. */
void mc_check_link(const struct mc_writer *w, uint8_t link, uint32_t b, uint32_t slot);
/* Chain b of link after slot was unlinked from it (found: it was on it,
 * C3): C1, C2, slot no longer on it. */
void mc_check_unlink(const struct mc_writer *w, uint8_t link, uint32_t b, uint32_t slot,
		     bool found);
/* A record being removed, already unlinked from the chains of the keys it
 * held (which unlink_key checked): not on the others' either (C2). */
void mc_check_unlinked(const struct mc_writer *w, uint32_t slot, uint8_t held);
/* The record just stored at slot, whole: S1, S2, R1, R2, C3, C4. */
void mc_check_stored(const struct mc_writer *w, uint32_t slot);
/* Slots [start, start + n) about to be written; bumped: reuse_gen was
 * bumped for them. Unbumped, they must never have been written (U1). */
void mc_check_take(const struct mc_writer *w, uint32_t start, uint32_t n, bool bumped);
/* After every change: the counters, and now and then the whole map. */
void mc_check_changed(struct mc_writer *w);
/* The whole map. */
void mc_check_map(const struct mc_writer *w);
#else
static inline void mc_check_link(const struct mc_writer *w, uint8_t link, uint32_t b, uint32_t slot)
{
	(void)w, (void)link, (void)b, (void)slot;
}
static inline void mc_check_unlink(const struct mc_writer *w, uint8_t link, uint32_t b,
				   uint32_t slot, bool found)
{
	(void)w, (void)link, (void)b, (void)slot, (void)found;
}
static inline void mc_check_unlinked(const struct mc_writer *w, uint32_t slot, uint8_t held)
{
	(void)w, (void)slot, (void)held;
}
static inline void mc_check_stored(const struct mc_writer *w, uint32_t slot)
{
	(void)w, (void)slot;
}
static inline void mc_check_take(const struct mc_writer *w, uint32_t start, uint32_t n, bool bumped)
{
	(void)w, (void)start, (void)n, (void)bumped;
}
static inline void mc_check_changed(struct mc_writer *w)
{
	(void)w;
}
static inline void mc_check_map(const struct mc_writer *w)
{
	(void)w;
}
#endif

#endif
