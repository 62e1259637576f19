/*
 * nscddb: maps in the layout of glibc's nscd persistent databases, which
 * glibc's own nscd client (GETFDPW, GETFDGR) maps read-only and searches in
 * process, before any NSS module is asked: a hit costs no system call.
 *
 * Owns:      one map per database (passwd; group, which also holds the
 *            INITGROUPS records glibc looks up there): a sealed memfd, its
 *            writable mapping, the read-only descriptor handed out.
 * May call:  libc, and util for the sealed memfd (idc_memfd_sealed).
 * Conventions: 0 or -errno; a NULL map is a disabled one, and every writer
 *            function accepts it and does nothing. Only what NSS returns is
 *            stored (the caller passes "x" for a password it may not show).
 * Threads:   one writer per map at a time (the daemon's loop). Readers are
 *            other processes; they get nothing from us but the descriptor.
 *
 * ==== The layout glibc 2.36 reads (nscd-client.h) ==========================
 * The file is a header, a hash table and a data area:
 *   struct database_pers_head (120 bytes, below): version 2, header_size
 *     120, gc_cycle, nscd_certainly_running, timestamp, module (buckets),
 *     data_size, first_free, counters;
 *   module refs (uint32_t offsets into the data area; ENDREF = all ones),
 *     the table padded to a multiple of 16 bytes;
 *   data_size bytes of data: struct hashentry (32 bytes, 8-aligned) and
 *     records, each a struct datahead (24 bytes) followed by the response
 *     glibc would have read from the socket, then the keys.
 * A lookup hashes its key (the name, or the id in decimal, with its NUL)
 * with sdbm (h = h * 65599 + byte), takes it modulo module, and walks the
 * bucket's chain for an entry of the request type, key length and key
 * bytes whose record is usable and lies inside data_size. glibc checks no
 * expiry: what is in the map is answered, so a record removed or expired
 * here must leave the chains at once.
 *
 * glibc takes a map (__nscd_get_mapping) only when version, header_size and
 * module are right and, unless nscd_certainly_running, timestamp is no more
 * than MAPPING_TIMEOUT (300 s) old; it asks for a new one when that goes
 * stale or when data_size grows past what it mapped. A process refused a
 * map uses the socket for the rest of its life.
 *
 * ==== How readers stay consistent (why this design) ==========================
 * Records are appended and never overwritten while the map is handed out:
 * an added entry is written in free space and then linked at the head of
 * its chain (one 32-bit store), a removed one is unlinked (one store) and
 * its bytes stay as they were. Every change that unlinks runs with gc_cycle
 * odd (glibc's protocol): a reader that started before it and finishes
 * after sees gc_cycle moved and looks again, so nothing removed is answered
 * once the call removing it has returned, and no half-written record is
 * ever copied. When the data area is full the live records are copied into
 * a new map, which becomes the one handed out (rebuild and swap), and the
 * old one is marked: gc_cycle left odd (readers inside it look again) and
 * data_size raised, so each client asks for the new map at its next lookup.
 * The new map doubles while more than half is live, up to a bound; one
 * full at the bound and mostly live starts over empty instead.
 * Compacting in place instead, as nscd does, would leave gc_cycle odd for
 * the whole copy, and every lookup of every client meanwhile would be a
 * socket round trip; a swap costs each client one.
 *
 * Staleness: nscd_certainly_running stays 0 and nscddb_beat writes
 * timestamp NSCDDB_STALE_S short of glibc's MAPPING_TIMEOUT, so a map whose
 * writer stopped beating (a daemon killed) is dropped by its clients within
 * NSCDDB_STALE_S, not 300 s. The bound is no shorter because a client that
 * finds its map stale asks for a new one, and one refused (a writer
 * stalled past the bound hands out a map that is stale too, or does not
 * answer within glibc's 5 s) leaves that process without maps for good; a
 * killed daemon's records answered a minute longer are the smaller harm. A
 * writer closing marks its map as a swap does.
 *
 * Why nscd_certainly_running is never set, though glibc then reads the
 * clock at every lookup: with it set glibc checks no timestamp at all, so
 * the flag must go to 0 whenever the writer dies. nscd points one thread's
 * clear-child-tid address at it (set_tid_address) and lets the kernel
 * write the 0 when that thread leaves the address space. The kernel
 * writes it only while another thread still uses that address space and
 * never when the process dumps core (SIGSEGV, SIGABRT, SIGBUS: kept for
 * the debugger). So a daemon that crashes, or whose flagged thread is
 * the last to leave at a SIGKILL, leaves every client holding its map
 * trusting it, and every record in it, for that process's life: no bound
 * at all, where the timestamp bounds a dead writer's records to
 * NSCDDB_STALE_S. A watcher process clearing the flag at the writer's
 * death is killed with it by a cgroup kill or an OOM kill of the unit. On
 * top of that a thread holds one such address, so the two maps and each
 * swap's new map would need threads that pthread can never join. The
 * clock read is a vDSO call: a build that set the flag measured no
 * difference beyond the noise (docs/DESIGN.md §7).
 */
#ifndef IDC_NSCDDB_H
#define IDC_NSCDDB_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* ==== glibc's numbers and structures =========================================== */

#define NSCDDB_VERSION         2   /* DB_VERSION */
#define NSCDDB_PROTO_VERSION   2   /* NSCD_VERSION, in every response header */
#define NSCDDB_MAPPING_TIMEOUT 300 /* glibc's MAPPING_TIMEOUT, seconds */
#define NSCDDB_ALIGN           16  /* the table is padded to this */
#define NSCDDB_ENDREF          UINT32_MAX
#define NSCDDB_STALE_S         60   /* a map not beaten this long is dropped */
#define NSCDDB_KEY_MAX         1024 /* glibc's MAXKEYLEN */

/* Databases, numbered as glibc's nscd numbers them (pwddb, grpdb). */
enum nscddb_db { NSCDDB_PASSWD = 0, NSCDDB_GROUP = 1 };

/* glibc's request_type values used as entry types. */
enum nscddb_type {
	NSCDDB_GETPWBYNAME = 0,
	NSCDDB_GETPWBYUID = 1,
	NSCDDB_GETGRBYNAME = 2,
	NSCDDB_GETGRBYGID = 3,
	NSCDDB_GETFDPW = 11,
	NSCDDB_GETFDGR = 12,
	NSCDDB_INITGROUPS = 15,
};

struct nscddb_head {
	int32_t version;
	int32_t header_size;
	_Atomic int32_t gc_cycle;
	_Atomic int32_t nscd_certainly_running;
	_Atomic uint64_t timestamp;
	uint32_t extra_data[4];
	int32_t module;
	_Atomic int32_t data_size;
	int32_t first_free;
	int32_t nentries;
	int32_t maxnentries;
	int32_t maxnsearched;
	uint64_t poshit, neghit, posmiss, negmiss;
	uint64_t rdlockdelayed, wrlockdelayed;
	uint64_t addfailed;
	/* followed by uint32_t array[module] */
};

struct nscddb_hashentry {
	uint8_t type; /* glibc: request_type type:8 */
	uint8_t first;
	uint8_t pad[2];
	int32_t len;  /* key length, its NUL included */
	uint32_t key; /* data-area offset of the key bytes */
	int32_t owner;
	_Atomic uint32_t next;
	uint32_t packet; /* data-area offset of the struct datahead */
	uint64_t dellist;
};

struct nscddb_datahead {
	int32_t allocsize; /* bytes from the datahead to the record's end */
	int32_t recsize;   /* bytes of the response, from data */
	uint64_t timeout;
	uint8_t notfound;
	uint8_t nreloads;
	uint8_t usable;
	uint8_t unused;
	uint32_t ttl;
	/* followed by the response: pw_/gr_/initgr_response_header, payload */
};

/* The response headers: int32 fields, lengths counting the NUL. */
struct nscddb_pw_resp {
	int32_t version, found;
	int32_t name_len, passwd_len;
	uint32_t uid, gid;
	int32_t gecos_len, dir_len, shell_len;
}; /* then name, passwd, gecos, dir, shell */
struct nscddb_gr_resp {
	int32_t version, found;
	int32_t name_len, passwd_len;
	uint32_t gid;
	int32_t mem_cnt;
}; /* then mem_cnt uint32 lengths, name, passwd, the members */
struct nscddb_initgr_resp {
	int32_t version, found;
	int32_t ngrps;
}; /* then ngrps gids */

#define NSCDDB_HEAD_SIZE 120
#define NSCDDB_HE_SIZE   32
#define NSCDDB_DH_SIZE   24
/* glibc's MINIMUM_HASHENTRY_SIZE: what a lookup needs of an entry. */
#define NSCDDB_HE_MIN 28

/* Offset of the data area in a map of module buckets. */
static inline uint64_t nscddb_data_off(uint32_t module)
{
	return NSCDDB_HEAD_SIZE +
	       (((uint64_t)module * 4 + NSCDDB_ALIGN - 1) & ~(uint64_t)(NSCDDB_ALIGN - 1));
}

/* glibc's __nss_hash (sdbm) over len bytes. */
uint32_t nscddb_hash(const void *key, size_t len);

/* ==== writer ==================================================================== */

struct nscddb;

/* A user or group as NSS returns it (strings NUL-terminated, none NULL). */
struct nscddb_passwd {
	const char *name, *passwd, *gecos, *dir, *shell;
	uint32_t uid, gid;
};
struct nscddb_group {
	const char *name, *passwd;
	uint32_t gid;
	const char *const *members;
	size_t nmembers;
};

/* The lookups a stored record answers. */
enum nscddb_key { NSCDDB_KEY_NAME = 1u, NSCDDB_KEY_ID = 2u };

/* Create a map of database db whose data area starts at data_size bytes
 * (at least NSCDDB_DATA_MIN; it grows by swaps up to NSCDDB_DATA_MAX).
 * 0, -EINVAL (db, size) or -errno of the memfd. */
#define NSCDDB_DATA_MIN (64u * 1024u)
#define NSCDDB_DATA_MAX (128u * 1024u * 1024u)
int nscddb_open(int db, uint32_t data_size, struct nscddb **out);
/* Mark the map so its clients leave it at their next lookup, unmap, free. */
void nscddb_close(struct nscddb *m);

/* The read-only descriptor of the current map and its size in bytes (what
 * glibc maps): owned by m, valid until the next swap (dup it to keep it).
 * -ENODATA for a NULL map. */
int nscddb_fd(const struct nscddb *m, uint64_t *size);

/* Store a record answering the lookups in keys (enum nscddb_key; the
 * initgroups record answers its user name), valid until expire (unix
 * seconds): it takes each key over from the record answering it, whose
 * other key is left alone. now: the current time, for its ttl. A full map
 * is swapped for a bigger or compacted one, one full at its bound (mostly
 * live) for an empty one. 0, -EINVAL (bad record or keys, a key longer
 * than glibc sends), -E2BIG (over a quarter of the bound), -ENOMEM, -errno
 * of a swap. */
int nscddb_put_passwd(struct nscddb *m, const struct nscddb_passwd *pw, unsigned keys,
		      int64_t expire, int64_t now);
int nscddb_put_group(struct nscddb *m, const struct nscddb_group *gr, unsigned keys, int64_t expire,
		     int64_t now);
int nscddb_put_initgroups(struct nscddb *m, const char *user, const uint32_t *gids, size_t n,
			  int64_t expire, int64_t now);

/* Remove the record answering type's lookup for name / for id (type: a
 * GET*BYNAME, GET*BYUID/GID or INITGROUPS of m's database) from every key
 * it answers. The number of records removed (0 or 1). */
int nscddb_drop_name(struct nscddb *m, int type, const char *name);
int nscddb_drop_id(struct nscddb *m, int type, uint32_t id);
/* The id (uid, gid) of the record answering type's lookup for name: 0, or
 * -ENOENT (none; an INITGROUPS record has no id). */
int nscddb_id_of(struct nscddb *m, int type, const char *name, uint32_t *id);
/* Remove every entry of type (-1: all). The number removed. */
int nscddb_drop_type(struct nscddb *m, int type);

/* Every second or so: timestamp renewed, records whose expire is past
 * (expire <= now) removed. The number removed. */
int nscddb_beat(struct nscddb *m, int64_t now);
/* The staleness bound, 1..MAPPING_TIMEOUT seconds (tests: a short one). */
void nscddb_set_stale(struct nscddb *m, int stale_s);
/* The data area's bound, from its current size to NSCDDB_DATA_MAX bytes
 * (tests: a small one). */
void nscddb_set_max(struct nscddb *m, uint32_t max);

struct nscddb_stats {
	uint64_t size;      /* bytes of the map handed out */
	uint32_t data_size; /* of which data area */
	uint32_t used;      /* first_free */
	uint32_t entries;   /* hash entries linked */
	uint64_t swaps;     /* maps replaced by a bigger or compacted one */
	uint64_t resets;    /* of which started over empty (full at the bound) */
};
void nscddb_stats(const struct nscddb *m, struct nscddb_stats *st);

/* ==== reading ======================================================================
 * glibc's lookup over a map of len bytes at base, with glibc's checks: the
 * datahead of the record answering type/key (keylen with its NUL), or NULL.
 * Bounded by the map's size whatever it holds. For tests and tools. */
const struct nscddb_datahead *nscddb_find(const void *base, size_t len, int type, const char *key,
					  size_t keylen);
/* The writer's own mapping of its current map (tests only: corrupting it). */
void *nscddb_base(const struct nscddb *m, size_t *len);

#endif
