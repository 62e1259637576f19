/*
 * mc writer checks: the invariants of writer_int.h, verified in debug builds
 * (without NDEBUG) and fatal there. The map is the writer's own memory —
 * sealed, written only through its mapping — so a broken invariant is a bug
 * in the writer, not bad input: it is reported with where it broke, and the
 * process aborts. Under NDEBUG this file defines nothing and writer_int.h
 * turns the calls into nothing. Never linked into the reader.
 */
#include "mc/writer_int.h"

#ifndef NDEBUG

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

static _Noreturn __attribute__((format(printf, 2, 3))) void broken(const struct mc_writer *w,
								   const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "mc writer (%s map): invariant broken: ", mc_kind_name(w->kind));
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	abort();
}

#define CHECK(w, cond, ...)                                                                        \
	do {                                                                                       \
		if (!(cond))                                                                       \
			broken(w, __VA_ARGS__);                                                    \
	} while (0)

static const char *key_name(uint8_t link)
{
	return link == LINK_NAME ? "name" : "id";
}

static bool even(const struct mc_rec *rec)
{
	return (atomic_load_explicit(&rec->seq, memory_order_relaxed) & 1u) == 0;
}

/* Whether two records answer the same key link (C4). */
static bool same_key(const struct mc_rec *a, const struct mc_rec *b, uint8_t link)
{
	if (link == LINK_ID)
		return a->id == b->id;
	const char *na, *nb;
	uint32_t la, lb;
	return a->name_hash == b->name_hash && rec_name(a, &na, &la) && rec_name(b, &nb, &lb) &&
	       la == lb && memcmp(na, nb, la) == 0;
}

/* One step of a chain walk: cur must be a linked record of chain b (C2). */
static void check_link(const struct mc_writer *w, uint8_t link, uint32_t b, uint32_t cur)
{
	CHECK(w, cur < w->slot_count && w->owner[cur] == cur,
	      "%s chain %u: slot %u starts no live record", key_name(link), b, cur);
	const struct mc_rec *rec = rec_at(w, cur);
	CHECK(w, w->links[cur] & link, "%s chain %u: record at %u does not hold the %s key",
	      key_name(link), b, cur, key_name(link));
	CHECK(w, key_bucket(w, rec, link) == b, "%s chain %u: record at %u belongs in bucket %u",
	      key_name(link), b, cur, key_bucket(w, rec, link));
	CHECK(w, even(rec), "%s chain %u: record at %u is linked with an odd seq", key_name(link),
	      b, cur);
}

/* Walk chain b of link (C1, C2); slot, unless MC_NONE, must be on it once
 * (on: and no other record with its key, C4) or not at all. Its length. */
static uint32_t walk_chain(const struct mc_writer *w, uint8_t link, uint32_t b, uint32_t slot,
			   bool on)
{
	uint32_t steps = 0, seen = 0;
	uint32_t cur = atomic_load_explicit(chain_head(w, link, b), memory_order_relaxed);
	for (; cur != MC_NONE; steps++) {
		CHECK(w, steps < w->records, "%s chain %u: longer than the %u records (a cycle)",
		      key_name(link), b, w->records);
		check_link(w, link, b, cur);
		struct mc_rec *rec = rec_at(w, cur);
		if (cur == slot)
			seen++;
		else if (on)
			CHECK(w, !same_key(rec, rec_at(w, slot), link),
			      "%s chain %u: records at %u and %u answer the same %s",
			      key_name(link), b, cur, slot, key_name(link));
		cur = atomic_load_explicit(rec_next(rec, link), memory_order_relaxed);
	}
	if (slot != MC_NONE)
		CHECK(w, seen == (on ? 1u : 0u),
		      "%s chain %u: record at %u is on it %u times, not %u", key_name(link), b,
		      slot, seen, on ? 1u : 0u);
	return steps;
}

void mc_check_link(const struct mc_writer *w, uint8_t link, uint32_t b, uint32_t slot)
{
	walk_chain(w, link, b, slot, true);
}

void mc_check_unlink(const struct mc_writer *w, uint8_t link, uint32_t b, uint32_t slot, bool found)
{
	CHECK(w, found, "record at %u holds the %s key but is not on %s chain %u", slot,
	      key_name(link), key_name(link), b);
	walk_chain(w, link, b, slot, false);
}

void mc_check_unlinked(const struct mc_writer *w, uint32_t slot, uint8_t held)
{
	const struct mc_rec *rec = rec_at(w, slot);
	CHECK(w, w->links[slot] == 0, "record at %u removed while it holds keys %u", slot,
	      w->links[slot]);
	for (uint8_t link = LINK_NAME; link <= LINK_ID; link++)
		if (!(held & link))
			walk_chain(w, link, key_bucket(w, rec, link), slot, false);
}

/* A live record at f on its own (S1, S2, R1, R2): its size, slots, name,
 * seq and keys. O(nslots). */
static void check_record(const struct mc_writer *w, uint32_t f)
{
	CHECK(w, f < w->slot_count && w->owner[f] == f, "slot %u starts no live record", f);
	const struct mc_rec *rec = rec_at(w, f);
	uint32_t n = rec->nslots;
	CHECK(w, n >= 1 && n <= w->slot_count / 4 && n <= w->hwm && f <= w->hwm - n,
	      "record at %u: %u slots, past the ring's high-water mark %u", f, n, w->hwm);
	uint64_t bytes = sizeof(*rec) + (uint64_t)rec->len;
	CHECK(w, (bytes + w->slot_size - 1) / w->slot_size == n,
	      "record at %u: %u payload bytes in %u slots", f, rec->len, n);
	for (uint32_t i = f; i < f + n; i++)
		CHECK(w, w->owner[i] == f && (i == f || w->links[i] == 0),
		      "record at %u: slot %u has owner %u, keys %u", f, i, w->owner[i],
		      w->links[i]);
	CHECK(w, even(rec), "record at %u: live with an odd seq", f);
	const char *name;
	uint32_t len;
	CHECK(w, rec_name(rec, &name, &len) && rec->name_hash == hash_name(w, name, len),
	      "record at %u: no name, or not the name its hash is of", f);
	uint8_t l = w->links[f];
	bool ig = w->kind == MC_INITGROUPS;
	CHECK(w,
	      l != 0 && (l & ~(LINK_NAME | LINK_ID)) == 0 && (!ig || (l == LINK_NAME && !rec->id)),
	      "record at %u: keys %u, id %u", f, l, rec->id);
}

void mc_check_stored(const struct mc_writer *w, uint32_t slot)
{
	check_record(w, slot);
	const struct mc_rec *rec = rec_at(w, slot);
	for (uint8_t link = LINK_NAME; link <= LINK_ID; link++) {
		bool on = (w->links[slot] & link) != 0;
		walk_chain(w, link, key_bucket(w, rec, link), slot, on);
	}
}

void mc_check_take(const struct mc_writer *w, uint32_t start, uint32_t n, bool bumped)
{
	if (bumped)
		return;
	const uint8_t *p = (const uint8_t *)rec_at(w, start);
	size_t len = (size_t)n * w->slot_size;
	/* All zero: the first byte is, and every byte equals the next. */
	CHECK(w, p[0] == 0 && memcmp(p, p + 1, len - 1) == 0,
	      "slots %u-%u written before, reused without a reuse_gen bump", start, start + n - 1);
}

/* The header against the writer's view (S3's header half, S4, S5). */
static void check_header(const struct mc_writer *w)
{
	const struct mc_header *h = w->hdr;
	CHECK(w,
	      h->magic == MC_MAGIC && h->version == MC_VERSION && h->kind == w->kind &&
		  h->hdr_size == MC_HDR_SIZE && h->file_size == w->len,
	      "header: magic, version, kind or size changed");
	CHECK(w,
	      h->nbuckets == w->nbuckets && h->slot_count == w->slot_count &&
		  h->slot_size == w->slot_size && w->base + h->table_off == (void *)w->tab_name &&
		  w->base + h->slot_off == w->slots,
	      "header: geometry changed");
	CHECK(w, atomic_load_explicit(&h->status, memory_order_relaxed) != MC_UNINIT,
	      "header: status UNINIT on a map in use");
	CHECK(w, h->records == w->records && h->evictions == w->evictions,
	      "header: %u records, %llu evictions; the writer counts %u, %llu", h->records,
	      (unsigned long long)h->evictions, w->records, (unsigned long long)w->evictions);
	CHECK(w,
	      w->head <= w->hwm && w->hwm <= w->slot_count && w->records <= w->used &&
		  w->used <= w->slot_count,
	      "ring: head %u, high-water mark %u, %u records in %u used slots of %u", w->head,
	      w->hwm, w->records, w->used, w->slot_count);
}

/* Every chain of link: C1, C2, C4 (each record against the rest of its
 * chain: chains are short, see layout.h). The number of records on them. */
static uint64_t walk_table(const struct mc_writer *w, uint8_t link)
{
	uint64_t total = 0;
	for (uint32_t b = 0; b < w->nbuckets; b++) {
		uint32_t len = walk_chain(w, link, b, MC_NONE, false);
		total += len;
		uint32_t cur = atomic_load_explicit(chain_head(w, link, b), memory_order_relaxed);
		for (uint32_t i = 0; i < len && len > 1; i++) {
			walk_chain(w, link, b, cur, true);
			cur = atomic_load_explicit(rec_next(rec_at(w, cur), link),
						   memory_order_relaxed);
		}
	}
	return total;
}

void mc_check_map(const struct mc_writer *w)
{
	check_header(w);
	uint32_t used = 0, records = 0;
	uint64_t keyed[2] = {0, 0};
	for (uint32_t s = 0; s < w->slot_count;) {
		if (w->owner[s] == MC_NONE) {
			CHECK(w, w->links[s] == 0, "free slot %u holds keys %u", s, w->links[s]);
			s++;
			continue;
		}
		check_record(w, s);
		keyed[0] += (w->links[s] & LINK_NAME) != 0;
		keyed[1] += (w->links[s] & LINK_ID) != 0;
		records++;
		used += rec_at(w, s)->nslots;
		s += rec_at(w, s)->nslots;
	}
	CHECK(w, used == w->used && records == w->records,
	      "slots: %u records in %u slots; the writer counts %u in %u", records, used,
	      w->records, w->used);
	/* With C1 and C2, equal counts mean every record holding a key is on
	 * its chain exactly once (C3). */
	uint64_t names = walk_table(w, LINK_NAME), ids = walk_table(w, LINK_ID);
	CHECK(w, names == keyed[0] && ids == keyed[1],
	      "chains: %llu names and %llu ids linked; %llu and %llu records hold them",
	      (unsigned long long)names, (unsigned long long)ids, (unsigned long long)keyed[0],
	      (unsigned long long)keyed[1]);
}

/* The whole map is walked every slot_count changes. A walk costs 60-110 ns
 * a slot (mostly cache misses: chains jump about the map), about a tenth
 * of a put; so the walks add about a tenth of a put to every change in a
 * map of any size, while the small maps of the unit tests are walked every
 * few hundred changes. (Every 1024 changes would cost 30 puts a change in
 * a map of 100,000 records.) */
void mc_check_changed(struct mc_writer *w)
{
	check_header(w);
	if (++w->changes >= w->slot_count) {
		w->changes = 0;
		mc_check_map(w);
	}
}

#endif
