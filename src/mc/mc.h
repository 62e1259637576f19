/*
 * mc: the shared-memory cache — the writer idcached updates and the reader
 * the NSS module consults before it asks the daemon over the socket.
 * Map format, sealing and concurrency protocol: mc/layout.h.
 *
 * Writer (daemon side, may allocate, single-threaded: one writer per map at
 * a time). Reader (client side): libc only, never allocates, no system call
 * on a hit, thread-safe, fork-safe; it gets its maps from a source callback
 * (the NSS module's asks the daemon) and may call only that and libc.
 */
#ifndef IDC_MC_H
#define IDC_MC_H

#include <grp.h>
#include <pwd.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mc/layout.h"
#include "proto/proto.h"

/* ==== writer ================================================================ */

struct mc_writer;

struct mc_stats {
	uint64_t size;       /* file bytes; 0: map disabled */
	uint64_t generation; /* files created (resets + 1) */
	uint32_t slot_count, slots_used;
	uint32_t records;
	uint64_t evictions; /* live records dropped to make room */
};

/* Create a fresh map of kind: a sealed memfd of size bytes (rounded down
 * to 8; at least MC_MIN_FILE) with a new seed. size 0 disables the map:
 * *out is NULL, and every writer function accepts a NULL writer and does
 * nothing. 0 or -errno (-EINVAL: bad kind or size). */
int mc_writer_open(uint32_t kind, uint64_t size, struct mc_writer **out);

/* Unmap and free. The map stays ALIVE for the clients that have it mapped
 * until its beat goes stale (MC_STALE_MS); mc_writer_retire first to stop
 * them at once. */
void mc_writer_close(struct mc_writer *w);
/* Mark the map RECYCLED, so readers stop answering from it (a daemon
 * stopping cleanly, or a map being disabled: its clients then ask the
 * socket). Always 0. */
int mc_writer_retire(struct mc_writer *w);

/* Drop every record: a new map (new seed) replaces the current one, which
 * is marked RECYCLED. size: the new size, or 0 to keep the current one. 0
 * or -errno (the old map stays in use). */
int mc_writer_reset(struct mc_writer *w, uint64_t size);

/* The read-only descriptor of the current map, which the daemon hands to
 * clients (dup it: it is closed by the next reset). Owned by the writer.
 * -ENODATA for a NULL writer. */
int mc_writer_fd(const struct mc_writer *w);

/* Record that the writer is alive at now_ms (mc_clock_ms); the daemon
 * calls it every MC_BEAT_MS (layout.h). */
void mc_writer_beat(struct mc_writer *w, uint32_t now_ms);

/* The lookups a stored record answers (mc_put_*: keys, a nonzero mask). */
enum mc_key {
	MC_KEY_NAME = 1u, /* lookups by its name */
	MC_KEY_ID = 2u,   /* lookups by its id (uid, gid) */
};

/* Store a record valid until expire (unix seconds), answering the lookups
 * in keys. The daemon names a key only when this record is what the
 * socket answers for it (the first domain holding the name, the first
 * holding the id: uid 0 is root, not toor), so the two keys are
 * independent: the record takes over its name from the record answering
 * that name, and its id from every record answering that id, and leaves
 * the other key of those records alone. A stored record with the same
 * name and the same id is the same entry: it is replaced on every key it
 * answered. 0, -E2BIG (the record would take more than a quarter of the
 * map: not cached), -EINVAL (bad record or keys), -ENOMEM. */
int mc_put_passwd(struct mc_writer *w, const struct proto_passwd *pw, int64_t expire,
		  unsigned keys);
int mc_put_group(struct mc_writer *w, const struct proto_group *gr, int64_t expire, unsigned keys);
/* gids in the order the daemon answers them (each once): stored as given. */
int mc_put_initgroups(struct mc_writer *w, const char *user, size_t len, const uint32_t *gids,
		      size_t n, int64_t expire);

/* Remove the record answering name lookups for name / every record
 * answering id lookups for id (initgroups: by user name), from all its
 * keys. Returns the number removed (0 or 1 / 0..n). */
int mc_invalidate_name(struct mc_writer *w, const char *name, size_t len);
int mc_invalidate_id(struct mc_writer *w, uint32_t id);

/* The id (uid or gid) carried by the record answering name lookups for
 * name, from the writer's own view of the map: 0, or -ENOENT when there is
 * no such record (NULL writer, initgroups map: always -ENOENT). Lets the daemon drop the id a
 * record answers for before the record itself. */
int mc_lookup_id(const struct mc_writer *w, const char *name, size_t len, uint32_t *id);

/* Counters for `idcache status`; all zero for a NULL (disabled) writer. */
void mc_writer_stats(const struct mc_writer *w, struct mc_stats *st);

/* ==== reader ================================================================
 * One struct mc_reader per map, usually static. Lookups return 0 on a hit
 * (the record packed into the caller's struct and buffer), -ENOENT on a
 * miss of any kind (absent, expired, no file, a file that fails a check, a
 * record changing under us), -ERANGE when buflen is too small for the hit.
 * A miss means "ask the daemon", never "no such entry". */

/* Mappings one reader keeps at a time: the current one and those retired
 * by a reset but possibly still being read by another thread. */
#define MC_READER_MAPS 4
/* After the daemon said it has no such map, ask again no sooner than this. */
#define MC_RETRY_S 5

/* Where a reader gets a map: a descriptor it then owns (and closes once
 * mapped), or -errno: -ENODATA when the daemon serves no such map
 * (disabled), anything else when it cannot be asked. The NSS module asks the
 * daemon over nss.sock (MCMAP). Called with the reader's remap lock held, at
 * most once per lookup. */
typedef int (*mc_source_fn)(void *ctx, uint32_t kind);

/* Private to reader.c. */
struct mc_mapping {
	_Atomic uint32_t refs; /* threads inside a lookup on this mapping */
	const uint8_t *base;   /* NULL: slot unused */
	size_t len;
	/* Geometry, copied out of the header and validated against len when
	 * mapped: a writer (or anyone) changing the header later cannot move
	 * an access outside the mapping. */
	uint64_t seed;
	uint64_t table_off, slot_off;
	uint32_t nbuckets, slot_count, slot_size;
};

struct mc_reader {
	mc_source_fn source;
	void *source_ctx;
	uint32_t kind;
	_Atomic int current;       /* index into maps, -1: nothing mapped */
	_Atomic int lock_pid;      /* pid remapping, 0: free (see reader.c) */
	_Atomic uint32_t retry_at; /* unix seconds (low 32 bits); 0: any time */
	struct mc_mapping maps[MC_READER_MAPS];
};

/* Set up r for the map of kind, obtained from source. Not thread-safe:
 * call once before r is shared (pthread_once in the NSS module). Nothing is
 * asked for until the first lookup. -EINVAL for a bad kind or no source. */
int mc_reader_init(struct mc_reader *r, uint32_t kind, mc_source_fn source, void *ctx);

/* Give r a descriptor of its map that it did not ask for (the NSS module
 * gets every map with one request): mapped if r has no usable mapping and
 * the map passes the checks, closed in every case. 0, -EEXIST (r had one),
 * -EBUSY (r is remapping), or why the map was refused. */
int mc_reader_offer(struct mc_reader *r, int fd);

/* Unmap everything. Only when no other thread can be using r (tests, the
 * fuzzer); the NSS module never calls it. */
void mc_reader_close(struct mc_reader *r);

int mc_getpwnam(struct mc_reader *r, const char *name, size_t len, struct passwd *pw, char *buf,
		size_t buflen);
int mc_getpwuid(struct mc_reader *r, uint32_t uid, struct passwd *pw, char *buf, size_t buflen);
int mc_getgrnam(struct mc_reader *r, const char *name, size_t len, struct group *gr, char *buf,
		size_t buflen);
int mc_getgrgid(struct mc_reader *r, uint32_t gid, struct group *gr, char *buf, size_t buflen);

/* The groups of user (in stored order) into gids[0..cap).
 * *count gets their number on a hit and on -ERANGE (then nothing useful is
 * in gids: grow to *count and call again). */
int mc_initgroups(struct mc_reader *r, const char *user, size_t len, uint32_t *gids, size_t cap,
		  size_t *count);

#endif
