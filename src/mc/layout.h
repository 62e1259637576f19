/*
 * mc layout: the format of a shared-memory cache file, shared by the writer
 * (idcached) and the reader (the NSS module). Nothing here allocates or makes
 * a system call; the reader treats every byte of a mapped file as hostile.
 *
 * ==== Map format, version 2 ================================================
 *
 * One map per kind (passwd, group, initgroups), host byte order: a sealed
 * memfd written only by idcached and handed to clients over nss.sock
 * (MCMAP, proto/proto.h) as a read-only descriptor, which they map
 * MAP_SHARED and close. The seals (shrink, grow, future writes) mean no one
 * — a client, root, the daemon itself — can truncate a map under a reader
 * (no SIGBUS) or write to it but through the daemon's own mapping; a reader
 * refuses a descriptor without F_SEAL_SHRINK. There is no file to delete,
 * truncate or replace.
 *
 *   [0, MC_HDR_SIZE)          header (struct mc_header)
 *   [table_off, +8*nbuckets)  two tables of nbuckets u32 slot indexes: by
 *                             name, then by id (unused by initgroups)
 *   [slot_off, +slot_count*slot_size)  the slots
 *
 * A record starts at a slot and spans nslots consecutive slots. It begins
 * with struct mc_rec and carries its payload in the proto wire encoding
 * (proto/proto.h), so the reader decodes and packs it with the same helpers
 * the socket path uses:
 *   passwd      a passwd record
 *   group       a group record (members as a wire string list)
 *   initgroups  str user, u32 n, n × u32 gid (in the order the daemon answered)
 * The name (first str of the payload) is the name chain's key, rec->id the
 * id chain's key (uid or gid). A record is on one chain or both: the keys
 * it answers, which the writer keeps independent (two domains may answer
 * a name and that entry's id).
 *
 * Concurrency (one writer process, any number of readers):
 * - rec->seq is a sequence word: odd while the record is being written or
 *   after it was removed, even and unchanged while it is stable. A reader
 *   reads seq (acquire), copies, fences (acquire) and reads seq again; any
 *   change is a miss.
 * - A record is linked into its chains (bucket heads and next words, atomic
 *   u32 stores with release) only after it is complete; it is unlinked
 *   before its seq is made odd for good. A removed record keeps its next
 *   words, so a reader that is standing on it can still walk on.
 * - hdr->reuse_gen counts reuses of slots that held a record before. The
 *   writer bumps it before it writes into such slots, so a reader holding a
 *   stale index (one that now points into the middle of another record)
 *   always notices: it reads reuse_gen before the walk and after the copy,
 *   and a change is a miss. Without it, payload bytes of a new record could
 *   pose as a record header to a reader that followed an old link.
 * - status: UNINIT while a map is built, ALIVE when served, RECYCLED once
 *   the daemon has replaced it (a reset) or withdrawn it (a clean stop). A
 *   reader checks status on each lookup (it is in the header it already has
 *   mapped: no system call) and asks the daemon for the current map on
 *   RECYCLED.
 * - beat: the writer stores the time (mc_clock_ms: unix milliseconds, low
 *   32 bits) every MC_BEAT_MS. A map whose beat is more than MC_STALE_MS
 *   old belongs to a daemon that died or hangs: a reader treats it like
 *   RECYCLED, so a killed daemon's records stop answering within
 *   MC_STALE_MS, and a restarted daemon's new maps replace them then (a
 *   running process takes them over on its next lookup). The reader reads
 *   the clock once per lookup through the vDSO: no system call.
 * - The writer never resizes a live map; a reset builds a new one.
 *
 * Only u32 fields are accessed atomically: a 64-bit atomic load may be a
 * cmpxchg on some 32-bit targets, which faults on a read-only mapping.
 * =========================================================================
 */
#ifndef IDC_MC_LAYOUT_H
#define IDC_MC_LAYOUT_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#define MC_MAGIC   UINT64_C(0x3143434d43444900) /* "\0IDCMCC1" little-endian */
#define MC_VERSION 3u                           /* 3: beat in milliseconds */

#define MC_HDR_SIZE 128u
/* Slot size: a typical passwd record (40-byte header, ~100 bytes payload)
 * takes 3 slots; smaller slots waste less but lengthen the copy loop of
 * nothing, since a record is copied as one range anyway. */
#define MC_SLOT_SIZE 64u
/* "No record": an empty bucket, the end of a chain. */
#define MC_NONE UINT32_MAX
/* A reader gives up after this many chain steps (a corrupted file may hold a
 * cycle). Buckets are about as many as records, so real chains are short. */
#define MC_MAX_CHAIN 64u
/* Bounds a reader accepts for a file, far beyond any configured size: they
 * keep the geometry arithmetic well inside 64 bits. */
#define MC_MAX_FILE   (UINT64_C(1) << 32)
#define MC_MIN_FILE   4096u
#define MC_MAX_RECORD (1u << 20) /* payload bytes */
/* Heartbeat: the writer's period and the age at which a reader gives a map
 * up. A restarted daemon's maps are taken over within MC_STALE_MS of the
 * old daemon's death; a daemon busy with one step longer than that only
 * sends its clients to the socket meanwhile (which answers once the step
 * is done), never a wrong answer. */
#define MC_BEAT_MS  500u
#define MC_STALE_MS 1500

enum mc_kind {
	MC_PASSWD = 1,
	MC_GROUP = 2,
	MC_INITGROUPS = 3,
};

enum mc_status {
	MC_UNINIT = 0,
	MC_ALIVE = 1,
	MC_RECYCLED = 2,
};

struct mc_header {
	uint64_t magic;
	uint32_t version;
	uint32_t kind;
	_Atomic uint32_t status;
	_Atomic uint32_t reuse_gen;
	uint64_t seed;       /* hash seed, from getrandom; new for every file */
	uint64_t generation; /* counts the files the writer has created */
	uint64_t file_size;
	uint32_t hdr_size;
	uint32_t nbuckets; /* power of two */
	uint64_t table_off;
	uint64_t slot_off;
	uint32_t slot_count;
	uint32_t slot_size;
	/* Informational, written by the writer only (idcache status). */
	uint32_t records;
	_Atomic uint32_t beat; /* unix seconds, low 32 bits (see above) */
	uint64_t evictions;
};

struct mc_rec {
	_Atomic uint32_t seq;
	_Atomic uint32_t next_name;
	_Atomic uint32_t next_id;
	uint32_t nslots;
	int64_t expire; /* unix seconds; at or after it the record is a miss */
	uint32_t id;
	uint32_t len; /* payload bytes after the header */
	uint64_t name_hash;
	uint64_t reserved;
};

_Static_assert(sizeof(struct mc_header) <= MC_HDR_SIZE, "header too large");
_Static_assert(sizeof(struct mc_rec) == 48, "record header size is part of the format");
_Static_assert(MC_SLOT_SIZE % 8 == 0 && MC_SLOT_SIZE >= sizeof(struct mc_rec), "slot size");

/* Name of a map (logs, the memfd's name); NULL for an unknown kind. */
static inline const char *mc_kind_name(uint32_t kind)
{
	switch (kind) {
	case MC_PASSWD:
		return "passwd";
	case MC_GROUP:
		return "group";
	case MC_INITGROUPS:
		return "initgroups";
	default:
		return NULL;
	}
}

/* The beat clock: unix milliseconds, low 32 bits (ages are computed as a
 * signed 32-bit difference, so the wrap is harmless). CLOCK_REALTIME_COARSE
 * is read through the vDSO, without a system call, and is the same in
 * every process (a time namespace shifts only the monotonic clocks). sec,
 * when not NULL, gets the same reading's unix seconds. */
static inline uint32_t mc_clock_ms(int64_t *sec)
{
	struct timespec ts = {0, 0};
	clock_gettime(CLOCK_REALTIME_COARSE, &ts);
	if (sec)
		*sec = (int64_t)ts.tv_sec;
	return (uint32_t)((uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u);
}

/* Bucket of a hash in a table of nbuckets (a power of two). */
static inline uint32_t mc_bucket(uint64_t hash, uint32_t nbuckets)
{
	return (uint32_t)(hash & (uint64_t)(nbuckets - 1));
}

#endif
