/*
 * mc writer: builds and updates the shared-memory cache maps (daemon side).
 *
 * Allocation is a ring over the slots: a new record goes at the ring head,
 * and whatever live record overlaps the range is evicted first (oldest
 * first, counted). Freed slots are reused only when the ring comes round,
 * which keeps the writer simple and makes every reuse an event readers can
 * see (hdr->reuse_gen, see layout.h). A rewrite of a record that keeps its
 * size, name and id happens in place under the record's sequence word.
 *
 * A record is on the name chain, the id chain or both: the keys it was
 * stored for. Taking a key over from another record takes that record off
 * that chain only; a record left on no chain is removed.
 *
 * The writer keeps its own bookkeeping (which record owns each slot, which
 * chains a record is on) in private memory, so it never has to trust the
 * map for anything but the chain words it walks to unlink, and those walks
 * are bounded and bound-checked. Its invariants, and how debug builds check
 * them: writer_int.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "mc/writer_int.h"

static bool rec_name_is(const struct mc_rec *rec, const char *name, size_t len)
{
	const char *n;
	uint32_t nlen;
	return rec_name(rec, &n, &nlen) && nlen == len && memcmp(n, name, len) == 0;
}

static uint64_t seed_new(void)
{
	uint64_t s;
	/* GRND_NONBLOCK: early in boot a weaker seed beats a daemon that does
	 * not start; the seed only spreads chains, it guards no secret. */
	if (getrandom(&s, sizeof(s), GRND_NONBLOCK) == (ssize_t)sizeof(s))
		return s;
	return idc_now_ns() ^ ((uint64_t)getpid() << 32) ^ (uint64_t)time(NULL);
}

/* ---- building a map ----------------------------------------------------------- */

struct geometry {
	uint32_t nbuckets, slot_count;
	uint64_t slot_off;
};

/* About one bucket per two slots (a record takes two or three), the tables
 * right after the header, the slots 64-byte aligned after them. */
static int geometry_for(uint64_t size, struct geometry *g)
{
	if (size < MC_MIN_FILE || size >= MC_MAX_FILE)
		return -EINVAL;
	uint64_t approx = (size - MC_HDR_SIZE) / (MC_SLOT_SIZE + 4);
	uint32_t nb = 1;
	while ((uint64_t)nb * 4 <= approx)
		nb *= 2;
	g->nbuckets = nb;
	g->slot_off = (MC_HDR_SIZE + (uint64_t)nb * 8 + 63) & ~(uint64_t)63;
	g->slot_count = (uint32_t)((size - g->slot_off) / MC_SLOT_SIZE);
	return g->slot_count >= 4 ? 0 : -EINVAL;
}

static void header_init(struct mc_header *h, uint32_t kind, uint64_t size, uint64_t generation,
			const struct geometry *g)
{
	h->magic = MC_MAGIC;
	h->version = MC_VERSION;
	h->kind = kind;
	atomic_store_explicit(&h->status, MC_UNINIT, memory_order_relaxed);
	atomic_store_explicit(&h->reuse_gen, 0, memory_order_relaxed);
	h->seed = seed_new();
	h->generation = generation;
	h->file_size = size;
	h->hdr_size = MC_HDR_SIZE;
	h->nbuckets = g->nbuckets;
	h->table_off = MC_HDR_SIZE;
	h->slot_off = g->slot_off;
	h->slot_count = g->slot_count;
	h->slot_size = MC_SLOT_SIZE;
}

/* Build a map of size bytes (idc_memfd_sealed), with an ALIVE header and
 * empty tables. On success
 * the mapping is in *base and the read-only descriptor in *ro. */
static int map_build(const struct mc_writer *w, uint64_t size, uint8_t **base, int *ro)
{
	struct geometry g;
	int rc = geometry_for(size, &g);
	if (rc < 0)
		return rc;
	char name[32];
	snprintf(name, sizeof(name), "idcache-%s", mc_kind_name(w->kind));
	uint8_t *p;
	rc = idc_memfd_sealed(name, size, &p, ro);
	if (rc < 0)
		return rc;
	struct mc_header *h = (struct mc_header *)(void *)p;
	header_init(h, w->kind, size, w->generation + 1, &g);
	memset(p + MC_HDR_SIZE, 0xff, (size_t)g.nbuckets * 8); /* MC_NONE */
	atomic_store_explicit(&h->beat, mc_clock_ms(NULL), memory_order_relaxed);
	atomic_store_explicit(&h->status, MC_ALIVE, memory_order_release);
	*base = p;
	return 0;
}

/* Point w at the mapping base. */
static int adopt(struct mc_writer *w, uint8_t *base)
{
	struct mc_header *h = (struct mc_header *)(void *)base;
	uint32_t *owner = malloc((size_t)h->slot_count * sizeof(*owner));
	uint8_t *links = calloc(h->slot_count, 1);
	if (owner == NULL || links == NULL) {
		free(owner);
		free(links);
		return -ENOMEM;
	}
	memset(owner, 0xff, (size_t)h->slot_count * sizeof(*owner));
	free(w->owner);
	free(w->links);
	w->owner = owner;
	w->links = links;
	w->base = base;
	w->len = (size_t)h->file_size;
	w->hdr = h;
	w->generation = h->generation;
	w->nbuckets = h->nbuckets;
	w->tab_name = (_Atomic uint32_t *)(void *)(base + h->table_off);
	w->tab_id = w->tab_name + h->nbuckets;
	w->slots = base + h->slot_off;
	w->slot_count = h->slot_count;
	w->slot_size = h->slot_size;
	w->head = w->hwm = w->used = w->records = w->changes = 0;
	w->evictions = 0;
	return 0;
}

static void mark_recycled(uint8_t *base)
{
	atomic_store_explicit(&((struct mc_header *)(void *)base)->status, MC_RECYCLED,
			      memory_order_release);
}

/* Build a new map and make it the one handed out; the old one, if any, is
 * marked RECYCLED (its readers ask for the new one) and let go. */
static int map_replace(struct mc_writer *w, uint64_t size)
{
	if (w->base != NULL)
		mc_check_map(w); /* whole, before it is let go: its last changes too */
	uint8_t *base = NULL;
	int ro = -1;
	int rc = map_build(w, size, &base, &ro);
	if (rc < 0)
		return rc;
	uint64_t len = ((struct mc_header *)(void *)base)->file_size;
	uint8_t *old = w->base;
	size_t old_len = w->len;
	int old_ro = w->ro_fd;
	uint64_t evictions = w->evictions;
	rc = adopt(w, base);
	if (rc < 0) {
		munmap(base, (size_t)len);
		close(ro);
		return rc; /* the old map stays in use */
	}
	w->ro_fd = ro;
	w->evictions = evictions; /* a reset is not a restart: keep counting */
	w->hdr->evictions = evictions;
	if (old != NULL) {
		mark_recycled(old);
		munmap(old, old_len);
	}
	if (old_ro >= 0)
		close(old_ro);
	return 0;
}

/* ---- open, reset, close -------------------------------------------------------------- */

int mc_writer_retire(struct mc_writer *w)
{
	if (w != NULL && w->base != NULL)
		mark_recycled(w->base);
	return 0;
}

void mc_writer_close(struct mc_writer *w)
{
	if (w == NULL)
		return;
	if (w->base)
		munmap(w->base, w->len);
	if (w->ro_fd >= 0)
		close(w->ro_fd);
	free(w->owner);
	free(w->links);
	idc_buf_free(&w->scratch);
	free(w);
}

int mc_writer_open(uint32_t kind, uint64_t size, struct mc_writer **out)
{
	*out = NULL;
	if (mc_kind_name(kind) == NULL ||
	    (size != 0 && geometry_for(size & ~(uint64_t)7, &(struct geometry){0})))
		return -EINVAL;
	if (size == 0)
		return 0;
	struct mc_writer *w = calloc(1, sizeof(*w));
	if (w == NULL)
		return -ENOMEM;
	w->kind = kind;
	w->ro_fd = -1;
	int rc = map_replace(w, size & ~(uint64_t)7);
	if (rc < 0) {
		mc_writer_close(w);
		return rc;
	}
	*out = w;
	return 0;
}

int mc_writer_reset(struct mc_writer *w, uint64_t size)
{
	if (w == NULL)
		return 0;
	return map_replace(w, size ? size & ~(uint64_t)7 : w->len);
}

int mc_writer_fd(const struct mc_writer *w)
{
	return w == NULL ? -ENODATA : w->ro_fd;
}

void mc_writer_beat(struct mc_writer *w, uint32_t now_ms)
{
	if (w != NULL && w->hdr != NULL)
		atomic_store_explicit(&w->hdr->beat, now_ms, memory_order_release);
}

void mc_writer_stats(const struct mc_writer *w, struct mc_stats *st)
{
	memset(st, 0, sizeof(*st));
	if (w == NULL)
		return;
	st->size = w->len;
	st->generation = w->generation;
	st->slot_count = w->slot_count;
	st->slots_used = w->used;
	st->records = w->records;
	st->evictions = w->evictions;
}

/* ---- chains ----------------------------------------------------------------------------- */

/* Take the record at slot off its chain for link. The predecessor's word
 * (or the bucket) is overwritten with one release store: a reader sees the
 * chain with or without the record, and one standing on the record walks
 * on through its unchanged next word. */
static void unlink_key(struct mc_writer *w, uint32_t slot, uint8_t link)
{
	uint32_t b = key_bucket(w, rec_at(w, slot), link);
	_Atomic uint32_t *pp = chain_head(w, link, b);
	bool found = false;
	for (uint32_t steps = 0; !found && steps <= w->slot_count; steps++) {
		uint32_t cur = atomic_load_explicit(pp, memory_order_relaxed);
		if (cur >= w->slot_count)
			break;
		_Atomic uint32_t *next = rec_next(rec_at(w, cur), link);
		found = cur == slot;
		if (found)
			atomic_store_explicit(pp, atomic_load_explicit(next, memory_order_relaxed),
					      memory_order_release);
		pp = next;
	}
	w->links[slot] &= (uint8_t)~link;
	mc_check_unlink(w, link, b, slot, found);
}

/* Put the record at slot at the head of its chain for link. */
static void link_key(struct mc_writer *w, uint32_t slot, uint8_t link)
{
	struct mc_rec *rec = rec_at(w, slot);
	uint32_t b = key_bucket(w, rec, link);
	_Atomic uint32_t *head = chain_head(w, link, b);
	atomic_store_explicit(rec_next(rec, link), atomic_load_explicit(head, memory_order_relaxed),
			      memory_order_relaxed);
	/* Release: a reader that loads the bucket (acquire) sees the whole
	 * record and its next word. */
	atomic_store_explicit(head, slot, memory_order_release);
	w->links[slot] |= link;
	mc_check_link(w, link, b, slot);
}

static void rec_remove(struct mc_writer *w, uint32_t slot);

/* Take a record off the chains in links; one left on none is removed. */
static void detach(struct mc_writer *w, uint32_t slot, uint8_t links)
{
	if ((w->links[slot] & ~links) == 0) {
		rec_remove(w, slot);
		return;
	}
	if (links & LINK_NAME)
		unlink_key(w, slot, LINK_NAME);
	if (links & LINK_ID)
		unlink_key(w, slot, LINK_ID);
}

/* Unlink a record from its chains, make its sequence word odd for good, and
 * give its slots back. Its bytes stay until the ring reuses them. */
static void rec_remove(struct mc_writer *w, uint32_t slot)
{
	struct mc_rec *rec = rec_at(w, slot);
	uint8_t held = w->links[slot];
	if (held & LINK_NAME)
		unlink_key(w, slot, LINK_NAME);
	if (held & LINK_ID)
		unlink_key(w, slot, LINK_ID);
	mc_check_unlinked(w, slot, held);
	w->links[slot] = 0;
	uint32_t seq = atomic_load_explicit(&rec->seq, memory_order_relaxed);
	atomic_store_explicit(&rec->seq, seq | 1u, memory_order_release);
	uint32_t n = rec->nslots;
	for (uint32_t i = 0; i < n && slot + i < w->slot_count; i++)
		w->owner[slot + i] = MC_NONE;
	w->used -= n;
	w->records--;
	w->hdr->records = w->records;
}

/* First slot of the record named name on the name chain, or MC_NONE. */
static uint32_t find_name(const struct mc_writer *w, const char *name, size_t len, uint64_t hash)
{
	uint32_t cur =
	    atomic_load_explicit(&w->tab_name[mc_bucket(hash, w->nbuckets)], memory_order_relaxed);
	for (uint32_t steps = 0; cur < w->slot_count && steps <= w->slot_count; steps++) {
		const struct mc_rec *rec = rec_at(w, cur);
		if (w->owner[cur] == cur && (w->links[cur] & LINK_NAME) && rec->name_hash == hash &&
		    rec_name_is(rec, name, len))
			return cur;
		cur = atomic_load_explicit(&rec->next_name, memory_order_relaxed);
	}
	return MC_NONE;
}

/* The record on the id chain carrying id and named name, or MC_NONE. */
static uint32_t find_id_named(const struct mc_writer *w, uint32_t id, const char *name, size_t len,
			      uint64_t hash)
{
	uint32_t cur = atomic_load_explicit(&w->tab_id[mc_bucket(hash_id(w, id), w->nbuckets)],
					    memory_order_relaxed);
	for (uint32_t steps = 0; cur < w->slot_count && steps <= w->slot_count; steps++) {
		const struct mc_rec *rec = rec_at(w, cur);
		if (w->owner[cur] == cur && (w->links[cur] & LINK_ID) && rec->id == id &&
		    rec->name_hash == hash && rec_name_is(rec, name, len))
			return cur;
		cur = atomic_load_explicit(&rec->next_id, memory_order_relaxed);
	}
	return MC_NONE;
}

/* Every record on the id chain carrying id, except keep: taken off the id
 * chain (remove: altogether). Returns how many. */
static int drop_id(struct mc_writer *w, uint32_t id, uint32_t keep, bool remove)
{
	int count = 0;
	uint32_t cur = atomic_load_explicit(&w->tab_id[mc_bucket(hash_id(w, id), w->nbuckets)],
					    memory_order_relaxed);
	for (uint32_t steps = 0; cur < w->slot_count && steps <= w->slot_count; steps++) {
		struct mc_rec *rec = rec_at(w, cur);
		/* Read before unlinking; the record keeps it anyway. */
		uint32_t next = atomic_load_explicit(&rec->next_id, memory_order_relaxed);
		if (cur != keep && w->owner[cur] == cur && rec->id == id) {
			if (remove)
				rec_remove(w, cur);
			else
				detach(w, cur, LINK_ID);
			count++;
		}
		cur = next;
	}
	return count;
}

/* ---- slots --------------------------------------------------------------------------------- */

/* n consecutive slots at the ring head, evicting what is there. */
static uint32_t slots_take(struct mc_writer *w, uint32_t n)
{
	if (w->head + n > w->slot_count)
		w->head = 0; /* the tail stays as it is until the next round */
	uint32_t start = w->head;
	for (uint32_t i = start; i < start + n; i++) {
		if (w->owner[i] != MC_NONE) {
			rec_remove(w, w->owner[i]);
			w->evictions++;
			w->hdr->evictions = w->evictions;
		}
	}
	bool reused = start < w->hwm;
	if (reused) {
		/* These slots held records a reader may still reach through a
		 * link it read before they were unlinked: make it notice.
		 * The release fence orders the bump before the record writes
		 * that follow (seqlock writer side, see layout.h). */
		uint32_t g = atomic_load_explicit(&w->hdr->reuse_gen, memory_order_relaxed);
		atomic_store_explicit(&w->hdr->reuse_gen, g + 1, memory_order_release);
		atomic_thread_fence(memory_order_release);
	}
	mc_check_take(w, start, n, reused);
	w->head = start + n;
	if (w->head > w->hwm)
		w->hwm = w->head;
	for (uint32_t i = start; i < start + n; i++)
		w->owner[i] = start;
	w->used += n;
	w->records++;
	w->hdr->records = w->records;
	return start;
}

/* Payload and expiry of a record under its sequence word: odd, fence, write,
 * even with release. */
static void rec_write(struct mc_rec *rec, const void *payload, uint32_t len, int64_t expire)
{
	uint32_t seq = atomic_load_explicit(&rec->seq, memory_order_relaxed) | 1u;
	atomic_store_explicit(&rec->seq, seq, memory_order_relaxed);
	atomic_thread_fence(memory_order_release);
	rec->expire = expire;
	rec->len = len;
	memcpy(rec + 1, payload, len);
	atomic_store_explicit(&rec->seq, seq + 1, memory_order_release);
}

/* The record already stored for the same entry (the same name and id),
 * on either chain, or MC_NONE; *links gets the keys it and any duplicate
 * answered, and a duplicate (the entry on both chains as two records) is
 * removed. */
static uint32_t same_entry(struct mc_writer *w, const char *name, size_t nlen, uint64_t hash,
			   uint32_t id, uint8_t *links)
{
	uint32_t named = find_name(w, name, nlen, hash);
	if (named != MC_NONE && rec_at(w, named)->id != id)
		named = MC_NONE;
	uint32_t ided = find_id_named(w, id, name, nlen, hash);
	*links = (named != MC_NONE ? w->links[named] : 0) | (ided != MC_NONE ? w->links[ided] : 0);
	if (named != MC_NONE && ided != MC_NONE && ided != named)
		rec_remove(w, ided);
	return named != MC_NONE ? named : ided;
}

/* Link the record at slot into the chains in links it is not on yet,
 * taking each key over from the records that answered it. */
static void link_keys(struct mc_writer *w, uint32_t slot, const char *name, size_t nlen,
		      uint8_t links)
{
	struct mc_rec *rec = rec_at(w, slot);
	if ((links & LINK_NAME) && !(w->links[slot] & LINK_NAME)) {
		uint32_t other = find_name(w, name, nlen, rec->name_hash);
		if (other != MC_NONE)
			detach(w, other, LINK_NAME);
		link_key(w, slot, LINK_NAME);
	}
	if ((links & LINK_ID) && !(w->links[slot] & LINK_ID)) {
		drop_id(w, rec->id, slot, false);
		link_key(w, slot, LINK_ID);
	}
}

/* Store payload (a wire record starting with the name) for keys: the
 * record's first slot, or -errno. */
static int put(struct mc_writer *w, const char *name, size_t nlen, uint32_t id, uint8_t keys,
	       int64_t expire)
{
	const void *payload = w->scratch.data;
	size_t len = w->scratch.len;
	if (len > MC_MAX_RECORD)
		return -E2BIG;
	uint64_t need = sizeof(struct mc_rec) + len;
	uint32_t n = (uint32_t)((need + w->slot_size - 1) / w->slot_size);
	if (n > w->slot_count / 4)
		return -E2BIG;
	uint64_t hash = hash_name(w, name, nlen);
	uint8_t had = 0;
	uint32_t old = same_entry(w, name, nlen, hash, id, &had);
	if (old != MC_NONE && rec_at(w, old)->nslots == n) {
		rec_write(rec_at(w, old), payload, (uint32_t)len, expire);
		link_keys(w, old, name, nlen, keys);
		return old;
	}
	if (old != MC_NONE)
		rec_remove(w, old);
	uint32_t slot = slots_take(w, n);
	struct mc_rec *rec = rec_at(w, slot);
	/* Not linked yet: nobody reaches it but through a stale index, which
	 * reuse_gen and the odd sequence word turn into a miss. */
	atomic_store_explicit(&rec->seq, atomic_load_explicit(&rec->seq, memory_order_relaxed) | 1u,
			      memory_order_relaxed);
	atomic_thread_fence(memory_order_release);
	rec->nslots = n;
	rec->id = id;
	rec->name_hash = hash;
	rec->reserved = 0;
	atomic_store_explicit(&rec->next_name, MC_NONE, memory_order_relaxed);
	atomic_store_explicit(&rec->next_id, MC_NONE, memory_order_relaxed);
	rec_write(rec, payload, (uint32_t)len, expire);
	w->links[slot] = 0;
	link_keys(w, slot, name, nlen, keys | had);
	return (int)slot;
}

/* put, then the checks of what it stored and changed. */
static int put_checked(struct mc_writer *w, const char *name, size_t nlen, uint32_t id,
		       uint8_t keys, int64_t expire)
{
	int slot = put(w, name, nlen, id, keys, expire);
	if (slot < 0)
		return slot;
	mc_check_stored(w, (uint32_t)slot);
	mc_check_changed(w);
	return 0;
}

/* ---- records -------------------------------------------------------------------------------- */

static bool name_ok(const char *name, size_t len)
{
	return name != NULL && len > 0 && len <= PROTO_NAME_MAX && memchr(name, '\0', len) == NULL;
}

static bool keys_ok(unsigned keys)
{
	return keys != 0 && (keys & ~(unsigned)(MC_KEY_NAME | MC_KEY_ID)) == 0;
}

int mc_put_passwd(struct mc_writer *w, const struct proto_passwd *pw, int64_t expire, unsigned keys)
{
	if (w == NULL)
		return 0;
	if (!name_ok(pw->name.p, pw->name.len) || !keys_ok(keys))
		return -EINVAL;
	idc_buf_reset(&w->scratch);
	int rc = proto_put_passwd(&w->scratch, pw);
	if (rc < 0)
		return rc;
	return put_checked(w, pw->name.p, pw->name.len, pw->uid, (uint8_t)keys, expire);
}

int mc_put_group(struct mc_writer *w, const struct proto_group *gr, int64_t expire, unsigned keys)
{
	if (w == NULL)
		return 0;
	if (!name_ok(gr->name.p, gr->name.len) || !keys_ok(keys))
		return -EINVAL;
	idc_buf_reset(&w->scratch);
	int rc = proto_put_group(&w->scratch, gr);
	if (rc < 0)
		return rc;
	return put_checked(w, gr->name.p, gr->name.len, gr->gid, (uint8_t)keys, expire);
}

int mc_put_initgroups(struct mc_writer *w, const char *user, size_t len, const uint32_t *gids,
		      size_t n, int64_t expire)
{
	if (w == NULL)
		return 0;
	if (!name_ok(user, len))
		return -EINVAL;
	if (n > MC_MAX_RECORD / 4)
		return -E2BIG;
	/* In the order given: glibc hands the groups to setgroups in the
	 * order its source lists them, as files does in file order. The
	 * cache gives each gid once. */
	idc_buf_reset(&w->scratch);
	int rc = proto_put_str(&w->scratch, user, len);
	if (rc == 0)
		rc = proto_put_u32(&w->scratch, (uint32_t)n);
	if (rc == 0 && n)
		rc = idc_buf_append(&w->scratch, gids, n * sizeof(*gids));
	if (rc < 0)
		return rc;
	return put_checked(w, user, len, 0, LINK_NAME, expire);
}

int mc_invalidate_name(struct mc_writer *w, const char *name, size_t len)
{
	if (w == NULL || !name_ok(name, len))
		return 0;
	uint32_t slot = find_name(w, name, len, hash_name(w, name, len));
	if (slot == MC_NONE)
		return 0;
	rec_remove(w, slot);
	mc_check_changed(w);
	return 1;
}

int mc_invalidate_id(struct mc_writer *w, uint32_t id)
{
	if (w == NULL || w->kind == MC_INITGROUPS)
		return 0;
	int n = drop_id(w, id, MC_NONE, true);
	mc_check_changed(w);
	return n;
}

int mc_lookup_id(const struct mc_writer *w, const char *name, size_t len, uint32_t *id)
{
	if (w == NULL || w->kind == MC_INITGROUPS || !name_ok(name, len))
		return -ENOENT;
	uint32_t slot = find_name(w, name, len, hash_name(w, name, len));
	if (slot == MC_NONE)
		return -ENOENT;
	*id = rec_at(w, slot)->id;
	return 0;
}
