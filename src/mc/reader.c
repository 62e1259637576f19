/*
 * mc reader: lookups in the shared-memory cache from the NSS module.
 * libc only, never allocates; a hit makes no system call.
 *
 * Every mapped byte is hostile: the geometry is copied out of the header
 * and checked against the mapping once, when mapping, and every index and
 * length read afterwards is checked against that private copy before it is
 * used. A record is copied out of the mapping first, then its sequence word
 * and the file's reuse_gen are checked, and only the private copy is
 * decoded (with the proto decoder) and packed (with the proto packer), so a
 * record that changes under us can cost a miss but never a wrong answer or
 * a read out of bounds.
 *
 * Mappings and threads. A reader has MC_READER_MAPS mapping slots and an
 * index of the current one. A lookup takes a reference on the current slot
 * (increment, then check that it is still current: the seq_cst pair makes
 * the remapper, which stores a new index and then reads the count, see
 * either the reference or the new index), and drops it when done. A remap
 * (first use, or the header says RECYCLED) maps the new file into a free
 * slot, makes it current and unmaps every retired slot with no references.
 * A retired slot still referenced stays mapped until a later remap finds it
 * free; if none is free the remap fails and lookups miss (the socket
 * answers). We chose references over "keep the last few mappings forever"
 * because a reader thread may be descheduled for any length of time while
 * it copies: a count is the only thing that makes the unmap safe, and it
 * costs two uncontended atomic increments per lookup.
 *
 * Fork: the child inherits the mappings and keeps using them. References
 * held by parent threads at fork stay in the child's counts, so those slots
 * are never unmapped there (a bounded leak). The remap lock is a pid, not a
 * mutex: a lock held by a parent thread at fork is recognised as stale in
 * the child and taken over, where a mutex would stay locked for ever.
 *
 * Where maps come from: a source callback (the NSS module asks the daemon
 * over its socket) hands a descriptor. It must be a sealed memfd: a regular
 * file carrying F_SEAL_SHRINK, whose size we map exactly, so no one can
 * truncate it under us and no access can fault (SIGBUS). Anything else is
 * refused. The descriptor is closed once mapped.
 *
 * A mapping is used while its header says ALIVE and its beat is fresh
 * (layout.h); otherwise the next lookup asks the source for the current
 * map.
 */
#include "mc/mc.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "util/util.h"

/* A record that does not fit the caller's buffer is copied here first, so a
 * short buffer can still get an exact ERANGE for ordinary records. */
#define MC_STACK_AREA 2048
/* Lookups retried after a record or the file changed under us. */
#define MC_ATTEMPTS 3

int mc_reader_init(struct mc_reader *r, uint32_t kind, mc_source_fn source, void *ctx)
{
	memset(r, 0, sizeof(*r));
	atomic_init(&r->current, -1);
	atomic_init(&r->lock_pid, 0);
	atomic_init(&r->retry_at, 0);
	for (int i = 0; i < MC_READER_MAPS; i++)
		atomic_init(&r->maps[i].refs, 0);
	if (mc_kind_name(kind) == NULL || source == NULL)
		return -EINVAL;
	r->source = source;
	r->source_ctx = ctx;
	r->kind = kind;
	return 0;
}

void mc_reader_close(struct mc_reader *r)
{
	atomic_store(&r->current, -1);
	for (int i = 0; i < MC_READER_MAPS; i++) {
		if (r->maps[i].base != NULL)
			munmap((void *)(uintptr_t)r->maps[i].base, r->maps[i].len);
		r->maps[i].base = NULL;
	}
}

/* ---- validating a mapping -------------------------------------------------------- */

static const struct mc_header *hdr_of(const struct mc_mapping *m)
{
	return (const struct mc_header *)(const void *)m->base;
}

/* Loads of the shared atomics. The casts drop const only for the sake of
 * older compilers whose atomic_load wants a non-const pointer; nothing is
 * written through them (the mapping is read-only). */
static uint32_t load_acq(const _Atomic uint32_t *p)
{
	return atomic_load_explicit((_Atomic uint32_t *)(uintptr_t)p, memory_order_acquire);
}

static uint32_t load_rlx(const _Atomic uint32_t *p)
{
	return atomic_load_explicit((_Atomic uint32_t *)(uintptr_t)p, memory_order_relaxed);
}

/* Plain fields of a record, read while the writer may be changing them.
 * Each is read exactly once through a volatile pointer: the compiler may
 * otherwise load a length twice — once for the bound check, once for the
 * copy — and a concurrent write in between would defeat the check. An
 * aligned field (every struct mc_rec field, the payload's first word) is
 * one load; anything else is read byte by byte. The values may be torn;
 * the sequence check afterwards says whether to believe them. */
static uint32_t peek32(const void *p)
{
	if (((uintptr_t)p & 3u) == 0)
		return *(const volatile uint32_t *)p;
	const volatile uint8_t *v = p;
	uint8_t b[4] = {v[0], v[1], v[2], v[3]};
	uint32_t x;
	memcpy(&x, b, sizeof(x));
	return x;
}

static uint64_t peek64(const void *p)
{
	if (((uintptr_t)p & 7u) == 0)
		return *(const volatile uint64_t *)p;
	const volatile uint8_t *v = p;
	uint8_t b[8] = {v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]};
	uint64_t x;
	memcpy(&x, b, sizeof(x));
	return x;
}

/* Check the header at base (len bytes, len <= file size) and copy the
 * geometry into m. Every bound below is computed in 64 bits from values
 * already range-checked, so no sum can wrap. */
static int geometry_load(struct mc_mapping *m, const uint8_t *base, size_t len, uint32_t kind)
{
	struct mc_header h;
	if (len < MC_MIN_FILE || (uint64_t)len > MC_MAX_FILE)
		return -EBADMSG;
	memcpy(&h, base, sizeof(h));
	if (h.magic != MC_MAGIC || h.version != MC_VERSION || h.kind != kind ||
	    h.hdr_size != MC_HDR_SIZE || h.file_size != len)
		return -EBADMSG;
	if (h.nbuckets == 0 || (h.nbuckets & (h.nbuckets - 1)) != 0 || h.table_off < MC_HDR_SIZE ||
	    h.table_off % 4 != 0 || h.table_off > len ||
	    (uint64_t)h.nbuckets * 8 > len - h.table_off)
		return -EBADMSG;
	if (h.slot_size < sizeof(struct mc_rec) || h.slot_size % 8 != 0 || h.slot_size > 65536 ||
	    h.slot_off % 8 != 0 || h.slot_off < h.table_off + (uint64_t)h.nbuckets * 8 ||
	    h.slot_off > len || h.slot_count == 0 ||
	    (uint64_t)h.slot_count * h.slot_size > len - h.slot_off)
		return -EBADMSG;
	m->base = base;
	m->len = len;
	m->seed = h.seed;
	m->table_off = h.table_off;
	m->slot_off = h.slot_off;
	m->nbuckets = h.nbuckets;
	m->slot_count = h.slot_count;
	m->slot_size = h.slot_size;
	return 0;
}

/* ---- mapping slots and references ----------------------------------------------- */

/* The current mapping with a reference taken, or NULL. */
static struct mc_mapping *map_enter(struct mc_reader *r)
{
	for (int tries = 0; tries < 3; tries++) {
		int i = atomic_load(&r->current);
		if (i < 0 || i >= MC_READER_MAPS)
			return NULL;
		struct mc_mapping *m = &r->maps[i];
		atomic_fetch_add(&m->refs, 1);
		if (atomic_load(&r->current) == i)
			return m;
		atomic_fetch_sub(&m->refs, 1); /* retired meanwhile: never touched */
	}
	return NULL;
}

static void map_leave(struct mc_mapping *m)
{
	atomic_fetch_sub_explicit(&m->refs, 1, memory_order_release);
}

/* Take the remap lock: free, or held by a pid that is not ours (a thread of
 * the parent at fork time, gone in this child). */
static bool lock_take(struct mc_reader *r, int me)
{
	int cur = 0;
	if (atomic_compare_exchange_strong(&r->lock_pid, &cur, me))
		return true;
	return cur != me && atomic_compare_exchange_strong(&r->lock_pid, &cur, me);
}

/* The time of one lookup: seconds for record expiry, milliseconds for the
 * beat. One vDSO clock read, no system call. */
struct mc_now {
	int64_t s;
	uint32_t ms;
};

static struct mc_now clock_now(void)
{
	struct mc_now n;
	n.ms = mc_clock_ms(&n.s);
	return n;
}

/* Unmap every retired slot nobody references. Clear base before unmapping,
 * so a fork in between can only leak a mapping, never unmap twice. */
static void sweep(struct mc_reader *r, int keep)
{
	for (int i = 0; i < MC_READER_MAPS; i++) {
		struct mc_mapping *m = &r->maps[i];
		if (i == keep || m->base == NULL || atomic_load(&m->refs) != 0)
			continue;
		void *base = (void *)(uintptr_t)m->base;
		m->base = NULL;
		munmap(base, m->len);
	}
}

/* Whether a mapping may answer at now: ALIVE, and its writer beat within
 * MC_STALE_MS. A beat ahead of now (the clock was set back) counts as
 * fresh. */
static bool usable(const struct mc_mapping *m, struct mc_now now)
{
	if (load_acq(&hdr_of(m)->status) != MC_ALIVE)
		return false;
	int32_t age = (int32_t)(now.ms - load_rlx(&hdr_of(m)->beat));
	return age <= MC_STALE_MS;
}

/* A descriptor fit to map: a regular file sealed against shrinking (a
 * memfd), of MC_MIN_FILE..MC_MAX_FILE bytes. Its size, or -EBADMSG. */
static int64_t sealed_size(int fd)
{
	struct stat st;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size < (off_t)MC_MIN_FILE ||
	    (uint64_t)st.st_size > MC_MAX_FILE)
		return -EBADMSG;
	int seals = fcntl(fd, F_GET_SEALS);
	if (seals < 0 || !(seals & F_SEAL_SHRINK))
		return -EBADMSG;
	return (int64_t)st.st_size;
}

/* A free mapping slot (not current, unmapped, unreferenced), or -1. */
static int free_slot(struct mc_reader *r)
{
	int cur = atomic_load(&r->current);
	for (int i = 0; i < MC_READER_MAPS; i++)
		if (i != cur && r->maps[i].base == NULL && atomic_load(&r->maps[i].refs) == 0)
			return i;
	return -1;
}

/* Map the map at fd (closed here whatever happens), validate it, and make
 * it current in a free slot. Lock held. */
static int map_fd(struct mc_reader *r, int fd, struct mc_now now)
{
	int slot = free_slot(r);
	int64_t size = slot < 0 ? -EBUSY : sealed_size(fd);
	int rc = size < 0 ? (int)size : 0;
	void *p = MAP_FAILED;
	if (rc == 0) {
		/* Exactly its size, which the seal keeps: never a page past
		 * the end. */
		p = mmap(NULL, (size_t)size, PROT_READ, MAP_SHARED, fd, 0);
		if (p == MAP_FAILED)
			rc = -errno;
	}
	close(fd);
	if (rc < 0)
		return rc;
	struct mc_mapping *m = &r->maps[slot];
	rc = geometry_load(m, p, (size_t)size, r->kind);
	if (rc == 0 && !usable(m, now))
		rc = -ESTALE;
	if (rc < 0) {
		m->base = NULL;
		munmap(p, (size_t)size);
		return rc;
	}
	atomic_store(&r->current, slot);
	return 0;
}

/* Ask the source for the current map and map it. Lock held. */
static int map_new(struct mc_reader *r, struct mc_now now)
{
	if (free_slot(r) < 0)
		return -EBUSY;
	uint32_t retry = atomic_load(&r->retry_at);
	if (retry != 0 && (int32_t)(retry - (uint32_t)now.s) > 0)
		return -ENODATA;
	int fd = r->source(r->source_ctx, r->kind);
	if (fd == -ENODATA)
		atomic_store(&r->retry_at, (uint32_t)now.s + MC_RETRY_S);
	if (fd < 0)
		return fd;
	atomic_store(&r->retry_at, 0);
	return map_fd(r, fd, now);
}

/* When the current mapping (none, RECYCLED or stale) is not usable, replace
 * it by the map at fd, or with fd < 0 by the source's current map. 0,
 * -EEXIST when it was usable after all (someone remapped while we waited
 * for the lock; fd closed), or why no map was taken. */
static int replace(struct mc_reader *r, struct mc_now now, int fd)
{
	if (!lock_take(r, (int)getpid())) {
		if (fd >= 0)
			close(fd);
		return -EBUSY;
	}
	struct mc_mapping *m = map_enter(r);
	bool ok = m != NULL && usable(m, now);
	if (m != NULL)
		map_leave(m);
	int rc = -EEXIST;
	if (ok && fd >= 0)
		close(fd);
	if (!ok) {
		sweep(r, atomic_load(&r->current));
		rc = fd >= 0 ? map_fd(r, fd, now) : map_new(r, now);
		if (rc < 0 && fd < 0 && m != NULL)
			atomic_store(&r->current, -1); /* stop using a recycled map */
		sweep(r, atomic_load(&r->current));
	}
	atomic_store_explicit(&r->lock_pid, 0, memory_order_release);
	return rc;
}

/* Ask the source for the current map. Another thread already remapping:
 * -EBUSY, the caller misses. */
static int remap(struct mc_reader *r, struct mc_now now)
{
	int rc = replace(r, now, -1);
	return rc == -EEXIST ? 0 : rc;
}

int mc_reader_offer(struct mc_reader *r, int fd)
{
	return replace(r, clock_now(), fd);
}

/* A referenced, usable mapping to look in (remapping if needed), or NULL. */
static struct mc_mapping *map_get(struct mc_reader *r, struct mc_now now)
{
	struct mc_mapping *m = map_enter(r);
	if (m != NULL && usable(m, now))
		return m;
	if (m != NULL)
		map_leave(m);
	if (remap(r, now) < 0)
		return NULL;
	m = map_enter(r);
	if (m != NULL && usable(m, now))
		return m;
	if (m != NULL)
		map_leave(m);
	return NULL;
}

/* ---- finding a record ---------------------------------------------------------------- */

struct key {
	const char *name; /* NULL: by id */
	size_t len;
	uint32_t id;
};

/* A record found stable at seq; payload/len point into the mapping. Its
 * bytes must be copied and then checked with hit_verify. */
struct hit {
	const struct mc_rec *rec;
	const uint8_t *payload;
	uint32_t len;
	uint32_t seq, gen;
};

static const struct mc_rec *rec_at(const struct mc_mapping *m, uint32_t slot)
{
	return (const struct mc_rec *)(const void *)(m->base + m->slot_off +
						     (size_t)slot * m->slot_size);
}

/* Whether the record at slot (stable at seq, read so far) is the one key
 * asks for and holds together: its slots inside the slot area, its payload
 * inside its slots, its name (first wire str) equal to key's. */
static bool rec_matches(const struct mc_mapping *m, uint32_t slot, const struct mc_rec *rec,
			const struct key *k, uint64_t hash, struct hit *h)
{
	if (k->name == NULL ? peek32(&rec->id) != k->id : peek64(&rec->name_hash) != hash)
		return false;
	uint32_t nslots = peek32(&rec->nslots), len = peek32(&rec->len);
	if (nslots == 0 || nslots > m->slot_count - slot || len > MC_MAX_RECORD ||
	    sizeof(struct mc_rec) + (uint64_t)len > (uint64_t)nslots * m->slot_size)
		return false;
	const uint8_t *p = (const uint8_t *)(rec + 1);
	if (k->name != NULL) {
		if (len < 4)
			return false;
		uint32_t n = peek32(p);
		if (n != k->len || (size_t)len < 4 + (size_t)n + 1 ||
		    memcmp(p + 4, k->name, n) != 0)
			return false;
	}
	h->payload = p;
	h->len = len;
	return true;
}

/* Walk key's chain. 0: *h is a live, unexpired record; -ENOENT: none;
 * -EAGAIN: something changed under us (retry). */
static int find(const struct mc_mapping *m, const struct key *k, struct mc_now now, struct hit *h)
{
	const struct mc_header *hdr = hdr_of(m);
	h->gen = load_acq(&hdr->reuse_gen);
	uint64_t hash = k->name ? idc_hash64(k->name, k->len, m->seed)
				: idc_hash64(&k->id, sizeof(k->id), m->seed);
	const _Atomic uint32_t *tab =
	    (const _Atomic uint32_t *)(const void *)(m->base + m->table_off);
	if (k->name == NULL)
		tab += m->nbuckets;
	uint32_t cur = load_acq(&tab[mc_bucket(hash, m->nbuckets)]);
	bool busy = false;
	for (uint32_t steps = 0; cur != MC_NONE && steps < MC_MAX_CHAIN; steps++) {
		if (cur >= m->slot_count)
			return -ENOENT;
		const struct mc_rec *rec = rec_at(m, cur);
		uint32_t seq = load_acq(&rec->seq);
		uint32_t next = load_acq(k->name ? &rec->next_name : &rec->next_id);
		if ((seq & 1u) == 0 && rec_matches(m, cur, rec, k, hash, h)) {
			int64_t expire = (int64_t)peek64(&rec->expire);
			h->rec = rec;
			h->seq = seq;
			if (expire > now.s)
				return 0;
			/* Expired: a miss, unless it was being rewritten. */
			atomic_thread_fence(memory_order_acquire);
			return load_rlx(&rec->seq) == seq ? -ENOENT : -EAGAIN;
		}
		busy = busy || (seq & 1u);
		cur = next;
	}
	atomic_thread_fence(memory_order_acquire);
	if (busy || load_rlx(&hdr->reuse_gen) != h->gen)
		return -EAGAIN;
	return -ENOENT;
}

/* After copying a hit: did the record and the slot area stay as they were
 * while we read? 0 or -EAGAIN. */
static int hit_verify(const struct mc_mapping *m, const struct hit *h)
{
	atomic_thread_fence(memory_order_acquire);
	if (load_rlx(&h->rec->seq) != h->seq || load_rlx(&hdr_of(m)->reuse_gen) != h->gen)
		return -EAGAIN;
	return 0;
}

/* ---- lookups -------------------------------------------------------------------------------- */

/* Copy the record for k out of the mapping into area[0..cap). 0 and *len
 * set, -ERANGE (the record is larger than cap: *len set), -ENOENT. */
static int fetch(struct mc_reader *r, const struct key *k, uint8_t *area, size_t cap, uint32_t *len)
{
	struct mc_now now = clock_now(); /* vDSO: no system call */
	int rc = -ENOENT;
	for (int attempt = 0; attempt < MC_ATTEMPTS; attempt++) {
		struct mc_mapping *m = map_get(r, now);
		if (m == NULL)
			return -ENOENT;
		struct hit h;
		rc = find(m, k, now, &h);
		if (rc == 0) {
			if (h.len <= cap)
				memcpy(area, h.payload, h.len);
			rc = hit_verify(m, &h);
			if (rc == 0 && h.len > cap)
				rc = -ERANGE;
			*len = h.len;
		}
		map_leave(m);
		if (rc != -EAGAIN)
			return rc;
	}
	return -ENOENT;
}

/* Where a record is copied: the caller's buffer if it is the larger area
 * (the packers work in place), else the stack area. */
static uint8_t *area_pick(char *buf, size_t buflen, uint8_t *stack, size_t *cap)
{
	if (buf != NULL && buflen >= MC_STACK_AREA) {
		*cap = buflen;
		return (uint8_t *)buf;
	}
	*cap = MC_STACK_AREA;
	return stack;
}

/* One wire str of a passwd record in the mapping at *off, its length read
 * once; the view stays inside payload[0..len). */
static bool peek_str(const uint8_t *p, uint32_t len, uint32_t *off, struct proto_str *s)
{
	if (len - *off < 5)
		return false;
	uint32_t n = peek32(p + *off);
	if (n > len - *off - 5)
		return false;
	s->p = (const char *)p + *off + 4;
	s->len = n;
	*off += 5 + n;
	return true;
}

static bool peek_passwd(const struct hit *h, struct proto_passwd *pw)
{
	uint32_t off = 0;
	if (!peek_str(h->payload, h->len, &off, &pw->name) ||
	    !peek_str(h->payload, h->len, &off, &pw->passwd) || h->len - off < 8)
		return false;
	pw->uid = peek32(h->payload + off);
	pw->gid = peek32(h->payload + off + 4);
	off += 8;
	return peek_str(h->payload, h->len, &off, &pw->gecos) &&
	       peek_str(h->payload, h->len, &off, &pw->dir) &&
	       peek_str(h->payload, h->len, &off, &pw->shell) && off == h->len;
}

static bool packed_ok(const char *s, uint32_t len)
{
	return strlen(s) == len;
}

/* A passwd record too large for both copy areas, for a buffer that holds
 * its packed form (a window of 28 bytes: the packed form is exactly that
 * much smaller). Packed straight from the mapping: the packer copies by the
 * view lengths, fixed before it runs, so a record changing meanwhile can
 * only fill buf with garbage, which the sequence check then refuses. The
 * NUL bytes the wire form must carry are checked on the packed copy. */
static int passwd_direct(struct mc_reader *r, const struct key *k, struct passwd *pw, char *buf,
			 size_t buflen)
{
	struct mc_now now = clock_now();
	struct mc_mapping *m = map_get(r, now);
	if (m == NULL)
		return -ENOENT;
	struct hit h;
	struct proto_passwd p;
	int rc = find(m, k, now, &h);
	if (rc == 0)
		rc = peek_passwd(&h, &p) ? proto_pack_passwd(&p, pw, buf, buflen) : -ENOENT;
	if (rc == 0 || rc == -ERANGE)
		rc = hit_verify(m, &h) < 0 ? -ENOENT : rc;
	map_leave(m);
	if (rc == 0 &&
	    !(packed_ok(pw->pw_name, p.name.len) && packed_ok(pw->pw_passwd, p.passwd.len) &&
	      packed_ok(pw->pw_gecos, p.gecos.len) && packed_ok(pw->pw_dir, p.dir.len) &&
	      packed_ok(pw->pw_shell, p.shell.len) && pw->pw_uid == p.uid &&
	      (k->name ? p.name.len == k->len && memcmp(pw->pw_name, k->name, k->len) == 0
		       : pw->pw_uid == k->id)))
		rc = -ENOENT;
	return rc;
}

static int passwd_lookup(struct mc_reader *r, const struct key *k, struct passwd *pw, char *buf,
			 size_t buflen)
{
	uint8_t stack[MC_STACK_AREA];
	size_t cap;
	uint8_t *area = area_pick(buf, buflen, stack, &cap);
	uint32_t len = 0;
	int rc = fetch(r, k, area, cap, &len);
	/* Encoded: 5 × (4 + len + 1) + 8; packed: 5 × (len + 1). */
	if (rc == -ERANGE && len >= 28 && len - 28 <= buflen)
		return passwd_direct(r, k, pw, buf, buflen);
	if (rc < 0)
		return rc;
	struct proto_passwd p;
	/* The copy is ours now; a record that does not decode, or is not the
	 * one asked for, is damage: a miss. */
	if (proto_decode_passwd(area, len, &p) < 0 ||
	    (k->name ? p.name.len != k->len || memcmp(p.name.p, k->name, k->len) != 0
		     : p.uid != k->id))
		return -ENOENT;
	return proto_pack_passwd(&p, pw, buf, buflen);
}

static int group_lookup(struct mc_reader *r, const struct key *k, struct group *gr, char *buf,
			size_t buflen)
{
	uint8_t stack[MC_STACK_AREA];
	size_t cap;
	uint8_t *area = area_pick(buf, buflen, stack, &cap);
	uint32_t len = 0;
	int rc = fetch(r, k, area, cap, &len);
	if (rc < 0)
		return rc;
	struct proto_group g;
	if (proto_decode_group(area, len, &g) < 0 ||
	    (k->name ? g.name.len != k->len || memcmp(g.name.p, k->name, k->len) != 0
		     : g.gid != k->id))
		return -ENOENT;
	return proto_pack_group(&g, gr, buf, buflen);
}

static bool name_ok(const char *name, size_t len)
{
	return name != NULL && len > 0 && len <= PROTO_NAME_MAX;
}

int mc_getpwnam(struct mc_reader *r, const char *name, size_t len, struct passwd *pw, char *buf,
		size_t buflen)
{
	if (r->kind != MC_PASSWD || !name_ok(name, len))
		return -ENOENT;
	struct key k = {name, len, 0};
	return passwd_lookup(r, &k, pw, buf, buflen);
}

int mc_getpwuid(struct mc_reader *r, uint32_t uid, struct passwd *pw, char *buf, size_t buflen)
{
	if (r->kind != MC_PASSWD)
		return -ENOENT;
	struct key k = {NULL, 0, uid};
	return passwd_lookup(r, &k, pw, buf, buflen);
}

int mc_getgrnam(struct mc_reader *r, const char *name, size_t len, struct group *gr, char *buf,
		size_t buflen)
{
	if (r->kind != MC_GROUP || !name_ok(name, len))
		return -ENOENT;
	struct key k = {name, len, 0};
	return group_lookup(r, &k, gr, buf, buflen);
}

int mc_getgrgid(struct mc_reader *r, uint32_t gid, struct group *gr, char *buf, size_t buflen)
{
	if (r->kind != MC_GROUP)
		return -ENOENT;
	struct key k = {NULL, 0, gid};
	return group_lookup(r, &k, gr, buf, buflen);
}

/* ---- initgroups -------------------------------------------------------------------------------
 */

/* Copy the gid list of a found record into gids[0..cap). Payload: str
 * user (already matched), u32 n, n × u32. */
static int gids_copy(const struct hit *h, size_t nlen, uint32_t *gids, size_t cap, size_t *count)
{
	size_t off = 4 + nlen + 1;
	if (h->len < off + 4)
		return -ENOENT;
	uint32_t n = peek32(h->payload + off);
	if ((size_t)n != (h->len - off - 4) / 4 || (h->len - off - 4) % 4 != 0)
		return -ENOENT;
	*count = n;
	if (n > cap)
		return -ERANGE;
	memcpy(gids, h->payload + off + 4, (size_t)n * 4);
	return 0;
}

int mc_initgroups(struct mc_reader *r, const char *user, size_t len, uint32_t *gids, size_t cap,
		  size_t *count)
{
	if (r->kind != MC_INITGROUPS || !name_ok(user, len))
		return -ENOENT;
	struct key k = {user, len, 0};
	struct mc_now now = clock_now();
	for (int attempt = 0; attempt < MC_ATTEMPTS; attempt++) {
		struct mc_mapping *m = map_get(r, now);
		if (m == NULL)
			return -ENOENT;
		struct hit h;
		size_t n = 0;
		int rc = find(m, &k, now, &h);
		if (rc == 0) {
			rc = gids_copy(&h, len, gids, cap, &n);
			/* Whatever gids_copy concluded, it read bytes that
			 * may have changed: only a verified result counts. */
			if (hit_verify(m, &h) < 0)
				rc = -EAGAIN;
		}
		map_leave(m);
		if (rc == 0 || rc == -ERANGE)
			*count = n;
		if (rc != -EAGAIN)
			return rc;
	}
	return -ENOENT;
}
