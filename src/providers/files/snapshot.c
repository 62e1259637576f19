/*
 * files provider: snapshots: whole files parsed line by line (parse.c)
 * into records with their content hashes and folded-name tables, a
 * re-parsed window spliced into an old snapshot, and records taken from
 * the cache.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "files_int.h"

#define NAME_SEED 0x66696c65736e6d31ull /* folded-name table */

/* ==== hashes ==================================================================== */

/* A kept password field, or none (served as "x"): they hash apart. */
static uint64_t passwd_hash(const char *passwd, uint64_t h)
{
	return passwd ? idc_hash64(passwd, strlen(passwd) + 1, h) : h ^ 0x78;
}

uint64_t files_user_hash(const struct files_user *u)
{
	/* each string with its NUL, so field boundaries count */
	uint64_t h = idc_hash64(u->name, strlen(u->name) + 1, ((uint64_t)u->uid << 32) | u->gid);
	h = idc_hash64(u->gecos, strlen(u->gecos) + 1, h);
	h = idc_hash64(u->dir, strlen(u->dir) + 1, h);
	h = idc_hash64(u->shell, strlen(u->shell) + 1, h);
	return passwd_hash(u->passwd, h);
}

uint64_t files_group_hash(const struct files_group *g, const char *const *mem)
{
	uint64_t h = idc_hash64(g->name, strlen(g->name) + 1, g->gid);
	for (size_t i = 0; i < g->nmembers; i++)
		h = idc_hash64(mem[i], strlen(mem[i]) + 1, h);
	return passwd_hash(g->passwd, h ^ g->nmembers);
}

/* The password field as kept: only what says nothing secret. */
static const char *public_passwd(const char *p)
{
	return cache_passwd_public(p) ? p : NULL;
}

/* ==== folded-name table ===========================================================
 * Two names equal under the rule the cache keys entries by
 * (CACHE_NAMES_STORED) cannot both be stored; the table finds the earlier
 * one. */

enum kind { USERS, GROUPS };

static const char *name_of(const struct files_snapshot *s, enum kind k, size_t i)
{
	return k == USERS ? s->users[i].name : s->groups[i].name;
}

static uint64_t key_of(const struct files_snapshot *s, enum kind k, size_t i)
{
	return k == USERS ? s->users[i].key : s->groups[i].key;
}

static struct files_name_table *table_of(struct files_snapshot *s, enum kind k)
{
	return k == USERS ? &s->user_names : &s->group_names;
}

static uint64_t name_key(const char *name)
{
	char folded[CACHE_NAME_MAX + 1];
	size_t n = cache_name_fold(CACHE_NAMES_STORED, name, folded);
	return idc_hash64(folded, n, NAME_SEED);
}

static bool fold_equal(const char *a, const char *b)
{
	return cache_name_equal(CACHE_NAMES_STORED, a, b);
}

/* Slot holding a name that folds like name (whose key is key), or the
 * empty slot to use. The slot keeps half the key, so a probe rarely has to
 * look at the record. */
static uint64_t *table_slot(const struct files_snapshot *s, enum kind k,
			    const struct files_name_table *t, const char *name, uint64_t key)
{
	uint64_t tag = key >> 32 << 32;
	for (size_t i = (size_t)key & t->mask;; i = (i + 1) & t->mask) {
		uint64_t v = t->slot[i];
		if (v == 0)
			return &t->slot[i];
		if ((v & ~0xffffffffull) == tag &&
		    fold_equal(name, name_of(s, k, (v & 0xffffffffu) - 1)))
			return &t->slot[i];
	}
}

static int table_grow(struct files_snapshot *s, enum kind k)
{
	struct files_name_table *t = table_of(s, k), old = *t;
	size_t n = old.mask ? (old.mask + 1) * 2 : 1024;
	t->slot = calloc(n, sizeof(*t->slot));
	if (!t->slot) {
		*t = old;
		return -ENOMEM;
	}
	t->mask = n - 1;
	/* every name is there once: only an empty slot is needed */
	for (size_t i = 0; old.mask && i <= old.mask; i++) {
		if (!old.slot[i])
			continue;
		size_t j = (size_t)key_of(s, k, (old.slot[i] & 0xffffffffu) - 1) & t->mask;
		while (t->slot[j])
			j = (j + 1) & t->mask;
		t->slot[j] = old.slot[i];
	}
	free(old.slot);
	return 0;
}

/* Index of the record whose name folds like name, or -1. */
static long table_find(const struct files_snapshot *s, enum kind k, const char *name, uint64_t key)
{
	const struct files_name_table *t = k == USERS ? &s->user_names : &s->group_names;
	if (!t->mask)
		return -1;
	uint64_t v = *table_slot(s, k, t, name, key);
	return v ? (long)(v & 0xffffffffu) - 1 : -1;
}

/* Record index i (just appended, key set) under its name; the name is not
 * there yet. */
static int table_add(struct files_snapshot *s, enum kind k, size_t i)
{
	struct files_name_table *t = table_of(s, k);
	if (i >= UINT32_MAX - 1)
		return -EFBIG;
	if ((t->used + 1) * 2 > (t->mask ? t->mask + 1 : 0)) {
		int rc = table_grow(s, k);
		if (rc)
			return rc;
	}
	uint64_t key = key_of(s, k, i);
	*table_slot(s, k, t, name_of(s, k, i), key) = (key >> 32 << 32) | ((uint64_t)i + 1);
	t->used++;
	return 0;
}

long files_snapshot_find_user(const struct files_snapshot *s, const char *name, uint64_t key)
{
	long i = table_find(s, USERS, name, key);
	return i >= 0 && strcmp(s->users[i].name, name) == 0 ? i : -1;
}

long files_snapshot_find_group(const struct files_snapshot *s, const char *name, uint64_t key)
{
	long i = table_find(s, GROUPS, name, key);
	return i >= 0 && strcmp(s->groups[i].name, name) == 0 ? i : -1;
}

long files_snapshot_user(const struct files_snapshot *s, const char *name)
{
	return files_snapshot_find_user(s, name, name_key(name));
}

long files_snapshot_group(const struct files_snapshot *s, const char *name)
{
	return files_snapshot_find_group(s, name, name_key(name));
}

/* ==== snapshot ================================================================== */

struct files_snapshot *files_snapshot_new(void)
{
	return calloc(1, sizeof(struct files_snapshot));
}

void files_snapshot_free(struct files_snapshot *s)
{
	if (!s)
		return;
	for (size_t i = s->nborrowed; i < s->nbufs; i++)
		free(s->bufs[i]);
	free(s->uskip.v);
	free(s->gskip.v);
	free(s->bufs);
	free(s->users);
	free(s->groups);
	free(s->xusers);
	free(s->xgroups);
	free(s->mem);
	free(s->user_names.slot);
	free(s->group_names.slot);
	idc_arena_free(&s->arena);
	free(s);
}

/* Room for one more element of size sz in *arr (count n, capacity *cap). */
static int grow(void **arr, size_t n, size_t *cap, size_t sz)
{
	if (n < *cap)
		return 0;
	size_t nc = *cap ? *cap * 2 : 256;
	if (nc > SIZE_MAX / sz)
		return -ENOMEM;
	void *p = realloc(*arr, nc * sz);
	if (!p)
		return -ENOMEM;
	*arr = p;
	*cap = nc;
	return 0;
}

static int keep_buf(struct files_snapshot *s, char *buf)
{
	char **p = realloc(s->bufs, (s->nbufs + 1) * sizeof(*p));
	if (!p)
		return -ENOMEM;
	s->bufs = p;
	s->bufs[s->nbufs++] = buf;
	return 0;
}

struct line_ctx {
	struct files_snapshot *s;
	enum kind k;
	const char *label;
	uint32_t file, line;
	uint32_t off; /* of the current line in its file */
	bool log_bad;
	struct files_outer *outer; /* NULL unless parsing a window */
};

static struct files_skips *skips_of(struct files_snapshot *s, enum kind k)
{
	return k == USERS ? &s->uskip : &s->gskip;
}

/* Remember a skipped line. Out of room (or memory) the list is marked
 * incomplete, which only turns partial refreshes off: not an error. */
static void note_skip(struct line_ctx *c, bool dup, uint64_t key)
{
	struct files_skips *sk = skips_of(c->s, c->k);
	if (dup) {
		sk->duplicates++;
		c->s->duplicates++;
	} else {
		sk->malformed++;
		c->s->malformed++;
	}
	if (sk->overflow)
		return;
	if (sk->n >= FILES_SKIP_MAX || grow((void **)&sk->v, sk->n, &sk->cap, sizeof(*sk->v))) {
		sk->overflow = true;
		return;
	}
	sk->v[sk->n++] = (struct files_skip){c->file, c->line, c->off, dup, key};
}

static void note_bad(struct line_ctx *c, const char *why)
{
	note_skip(c, false, 0);
	if (c->log_bad)
		idc_log(IDC_LOG_WARN, "%s:%u: %s; line skipped", c->label, c->line, why);
}

static const char *kind_text(enum kind k)
{
	return k == USERS ? "user" : "group";
}

/* How a line's record is kept: as the record of its name, as an extra
 * record (an earlier line holds the name, folded), or not at all. */
enum name_use { NAME_NEW, NAME_EXTRA, NAME_SKIP };

/* A name an earlier line holds: the line is an extra record (never within
 * a window: the caller then parses everything, see files_outer). */
static enum name_use repeated(struct line_ctx *c, enum kind k, const char *name, const char *old,
			      uint64_t key)
{
	bool exact = strcmp(old, name) == 0;
	if (exact)
		note_skip(c, true, key); /* not answered by name */
	if (c->log_bad)
		idc_log(IDC_LOG_DEBUG, "%s:%u: %s '%s' %s '%s' seen before; %s", c->label, c->line,
			kind_text(k), name,
			exact ? "repeats" : "differs only in case or spaces from", old,
			exact ? "answered by id only" : "kept apart");
	if (!c->outer)
		return NAME_EXTRA;
	c->outer->collide = true;
	return NAME_SKIP;
}

/* Whether the record named name may be added, and how. */
static enum name_use name_use(struct line_ctx *c, enum kind k, const char *name, uint64_t *key)
{
	if (!cache_name_valid(name, strlen(name))) {
		note_bad(c, k == USERS ? "invalid user name" : "invalid group name");
		return NAME_SKIP;
	}
	*key = name_key(name);
	long prev = table_find(c->s, k, name, *key);
	const char *old = prev >= 0 ? name_of(c->s, k, (size_t)prev) : NULL;
	if (!old && c->outer) {
		/* A window's lines follow the old records [0, before): a name
		 * seen there is a repeat. One that only a record after the window
		 * has would take that record's place: the caller gives up. */
		const struct files_outer *o = c->outer;
		long j = table_find(o->old, k, name, *key);
		if (j >= 0 && (size_t)j < o->before[k])
			old = name_of(o->old, k, (size_t)j);
		else if (j >= 0 && (size_t)j >= o->after[k])
			c->outer->collide = true;
	}
	return old ? repeated(c, k, name, old, *key) : NAME_NEW;
}

/* Room for one more user (extra or not) in s; its slot. */
static struct files_user *user_slot(struct files_snapshot *s, bool extra)
{
	int rc = extra ? grow((void **)&s->xusers, s->nxusers, &s->xusers_cap, sizeof(*s->xusers))
		       : grow((void **)&s->users, s->nusers, &s->users_cap, sizeof(*s->users));
	return rc ? NULL : extra ? &s->xusers[s->nxusers] : &s->users[s->nusers];
}

static struct files_group *group_slot(struct files_snapshot *s, bool extra)
{
	int rc = extra
		     ? grow((void **)&s->xgroups, s->nxgroups, &s->xgroups_cap, sizeof(*s->xgroups))
		     : grow((void **)&s->groups, s->ngroups, &s->groups_cap, sizeof(*s->groups));
	return rc ? NULL : extra ? &s->xgroups[s->nxgroups] : &s->groups[s->ngroups];
}

/* The record just filled in its slot is s's now: an extra is only
 * counted, a named one goes into the name table too. */
static int user_added(struct files_snapshot *s, bool extra)
{
	if (extra) {
		s->nxusers++;
		return 0;
	}
	int rc = table_add(s, USERS, s->nusers);
	if (rc == 0)
		s->nusers++;
	return rc;
}

static int group_added(struct files_snapshot *s, bool extra)
{
	if (extra) {
		s->nxgroups++;
		return 0;
	}
	int rc = table_add(s, GROUPS, s->ngroups);
	if (rc == 0)
		s->ngroups++;
	return rc;
}

static int add_user(struct line_ctx *c, const struct files_pwent *e)
{
	struct files_snapshot *s = c->s;
	uint64_t key;
	enum name_use use = name_use(c, USERS, e->name, &key);
	if (use == NAME_SKIP)
		return 0;
	struct files_user *u = user_slot(s, use == NAME_EXTRA);
	if (!u)
		return -ENOMEM;
	*u = (struct files_user){.name = e->name,
				 .passwd = public_passwd(e->passwd),
				 .gecos = e->gecos,
				 .dir = e->dir,
				 .shell = e->shell,
				 .uid = e->uid,
				 .gid = e->gid,
				 .file = c->file,
				 .line = c->line,
				 .off = c->off,
				 .key = key,
				 .prev = s->nusers};
	u->hash = files_user_hash(u);
	return user_added(s, use == NAME_EXTRA);
}

const char *const *files_snapshot_members(const struct files_snapshot *s, size_t first)
{
	return s->mem ? s->mem + first : NULL; /* no members anywhere yet */
}

static int push_member(struct files_snapshot *s, const char *m)
{
	int rc = grow((void **)&s->mem, s->nmem, &s->mem_cap, sizeof(*s->mem));
	if (rc == 0)
		s->mem[s->nmem++] = m;
	return rc;
}

/* Whether m is among the members pushed since first. Quadratic, so the
 * caller checks only the first 4096 members of a group; later repeats go
 * to the cache, which keeps memberUid as a set anyway. */
static bool member_seen(const struct files_snapshot *s, size_t first, const char *m)
{
	for (size_t i = first; i < s->nmem; i++)
		if (strcmp(s->mem[i], m) == 0)
			return true;
	return false;
}

/* Members of e into s->mem; invalid names are dropped with a message, a
 * repeated name silently (the cache keeps a set). */
static int add_members(struct line_ctx *c, char *cursor)
{
	struct files_snapshot *s = c->s;
	size_t first = s->nmem;
	const char *m;
	while ((m = files_next_member(&cursor)) != NULL) {
		if (!cache_name_valid(m, strlen(m))) {
			if (c->log_bad)
				idc_log(IDC_LOG_WARN, "%s:%u: invalid member name '%.64s' skipped",
					c->label, c->line, m);
			continue;
		}
		if (s->nmem - first < 4096 ? member_seen(s, first, m) : false)
			continue;
		int rc = push_member(s, m);
		if (rc)
			return rc;
	}
	return 0;
}

static int add_group(struct line_ctx *c, struct files_grent *e)
{
	struct files_snapshot *s = c->s;
	uint64_t key;
	enum name_use use = name_use(c, GROUPS, e->name, &key);
	if (use == NAME_SKIP)
		return 0;
	struct files_group *g = group_slot(s, use == NAME_EXTRA);
	if (!g)
		return -ENOMEM;
	size_t first = s->nmem;
	int rc = add_members(c, e->members);
	if (rc)
		return rc;
	*g = (struct files_group){.name = e->name,
				  .passwd = public_passwd(e->passwd),
				  .gid = e->gid,
				  .file = c->file,
				  .line = c->line,
				  .off = c->off,
				  .mem_first = first,
				  .nmembers = s->nmem - first,
				  .key = key,
				  .prev = s->ngroups};
	g->hash = files_group_hash(g, files_snapshot_members(s, first));
	return group_added(s, use == NAME_EXTRA);
}

static int parse_line(struct line_ctx *c, enum kind k, char *line, size_t len)
{
	const char *why = NULL;
	enum files_line r;
	if (k == USERS) {
		struct files_pwent e;
		r = files_parse_pwline(line, len, &e, &why);
		if (r == FILES_LINE_RECORD)
			return add_user(c, &e);
	} else {
		struct files_grent e;
		r = files_parse_grline(line, len, &e, &why);
		if (r == FILES_LINE_RECORD)
			return add_group(c, &e);
	}
	if (r == FILES_LINE_BAD)
		note_bad(c, why);
	return 0;
}

/* Split buf[0..len) (buf[len] writable) into lines and parse each; buf
 * starts at byte c->off of its file, on line c->line + 1. */
static int parse_buf(struct line_ctx *c, char *buf, size_t len)
{
	char *p = buf, *end = buf + len;
	uint32_t base = c->off;
	while (p < end) {
		char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t l = nl ? (size_t)(nl - p) : (size_t)(end - p);
		p[l] = '\0';
		c->line++;
		c->off = base + (uint32_t)(p - buf);
		int rc = parse_line(c, c->k, p, l);
		if (rc)
			return rc;
		p += l + 1;
	}
	return 0;
}

static int take(struct line_ctx *c, char *buf, size_t len)
{
	struct files_snapshot *s = c->s;
	int rc = keep_buf(s, buf);
	if (rc) {
		if (s->nbufs == 0 || s->bufs[s->nbufs - 1] != buf)
			free(buf);
		return rc;
	}
	s->buf_bytes += len;
	return parse_buf(c, buf, len);
}

int files_snapshot_take_passwd(struct files_snapshot *s, const char *label, uint32_t file,
			       char *buf, size_t len, bool log_bad)
{
	struct line_ctx c = {s, USERS, label, file, 0, 0, log_bad, NULL};
	return take(&c, buf, len);
}

int files_snapshot_take_group(struct files_snapshot *s, const char *label, uint32_t file, char *buf,
			      size_t len, bool log_bad)
{
	struct line_ctx c = {s, GROUPS, label, file, 0, 0, log_bad, NULL};
	return take(&c, buf, len);
}

int files_snapshot_take_window(struct files_snapshot *s, bool group, const char *label,
			       uint32_t file, uint32_t line, uint32_t off, char *buf, size_t len,
			       bool log_bad, struct files_outer *outer)
{
	struct line_ctx c = {s, group ? GROUPS : USERS, label, file, line, off, log_bad, outer};
	return take(&c, buf, len);
}

static int copy_in(const void *data, size_t len, char **out)
{
	if (len > FILES_SIZE_MAX)
		return -EFBIG;
	char *buf = malloc(len + 1);
	if (!buf)
		return -ENOMEM;
	if (len)
		memcpy(buf, data, len);
	buf[len] = '\0';
	*out = buf;
	return 0;
}

int files_snapshot_add_passwd(struct files_snapshot *s, const char *label, uint32_t file,
			      const void *data, size_t len, bool log_bad)
{
	char *buf;
	int rc = copy_in(data, len, &buf);
	return rc ? rc : files_snapshot_take_passwd(s, label, file, buf, len, log_bad);
}

int files_snapshot_add_group(struct files_snapshot *s, const char *label, uint32_t file,
			     const void *data, size_t len, bool log_bad)
{
	char *buf;
	int rc = copy_in(data, len, &buf);
	return rc ? rc : files_snapshot_take_group(s, label, file, buf, len, log_bad);
}

/* ==== splicing a window into a snapshot ============================================ */

/* Name table of kind k for records [0, n) of s, built from scratch: the
 * names are known distinct (they come from snapshots that kept only first
 * occurrences, and the window was checked against both sides), so each
 * only needs an empty slot. Sized as table_add would have grown it. */
static int table_rebuild(struct files_snapshot *s, enum kind k, size_t n)
{
	struct files_name_table *t = table_of(s, k);
	*t = (struct files_name_table){0};
	if (n == 0)
		return 0;
	if (n >= UINT32_MAX - 1)
		return -EFBIG;
	size_t size = 1024;
	while ((n + 1) * 2 > size)
		size *= 2;
	t->slot = calloc(size, sizeof(*t->slot));
	if (!t->slot)
		return -ENOMEM;
	t->mask = size - 1;
	for (size_t i = 0; i < n; i++) {
		uint64_t key = key_of(s, k, i);
		size_t j = (size_t)key & t->mask;
		while (t->slot[j])
			j = (j + 1) & t->mask;
		t->slot[j] = (key >> 32 << 32) | ((uint64_t)i + 1);
	}
	t->used = n;
	return 0;
}

static bool in_window(const struct files_window *w, uint32_t file, uint32_t off)
{
	return file == w->file && off >= w->pre && off < w->old_end;
}

static bool after_window(const struct files_window *w, uint32_t file, uint32_t off)
{
	return file > w->file || (file == w->file && off >= w->old_end);
}

/* The skipped lines: old's before the window, the window's (win), old's
 * after it (shifted when in the same file). With an active window neither
 * list is incomplete (the caller checked), so the counts follow from the
 * lists. */
static int splice_skips(struct files_skips *out, const struct files_skips *old,
			const struct files_window *w, const struct files_skips *win)
{
	*out = (struct files_skips){0};
	size_t cap = old->n + (win ? win->n : 0);
	if (cap && !(out->v = malloc(cap * sizeof(*out->v))))
		return -ENOMEM;
	out->cap = cap;
	if (!w->active) {
		if (old->n)
			memcpy(out->v, old->v, old->n * sizeof(*out->v));
		out->n = old->n;
		out->overflow = old->overflow;
		out->malformed = old->malformed;
		out->duplicates = old->duplicates;
		return 0;
	}
	size_t i = 0;
	for (; i < old->n && !in_window(w, old->v[i].file, old->v[i].off) &&
	       !after_window(w, old->v[i].file, old->v[i].off);
	     i++)
		out->v[out->n++] = old->v[i];
	for (size_t j = 0; j < win->n; j++)
		out->v[out->n++] = win->v[j];
	for (; i < old->n; i++) {
		struct files_skip e = old->v[i];
		if (in_window(w, e.file, e.off))
			continue;
		if (e.file == w->file) {
			e.line = (uint32_t)((int64_t)e.line + w->dline);
			e.off = (uint32_t)((int64_t)e.off + w->doff);
		}
		out->v[out->n++] = e;
	}
	for (size_t j = 0; j < out->n; j++) {
		out->malformed += !out->v[j].dup;
		out->duplicates += out->v[j].dup;
	}
	return 0;
}

/* Move a record of old after the window to its new place in the file. */
#define SHIFT(r, w)                                                                                \
	do {                                                                                       \
		if ((w)->active && (r).file == (w)->file) {                                        \
			(r).line = (uint32_t)((int64_t)(r).line + (w)->dline);                     \
			(r).off = (uint32_t)((int64_t)(r).off + (w)->doff);                        \
		}                                                                                  \
	} while (0)

static int splice_users(struct files_snapshot *ns, const struct files_snapshot *old,
			const struct files_window *w)
{
	size_t before = w->active ? w->before : old->nusers;
	size_t after = w->active ? w->after : old->nusers;
	size_t nwin = w->active ? w->win->nusers : 0;
	size_t n = before + nwin + (old->nusers - after);
	if (n && !(ns->users = malloc(n * sizeof(*ns->users))))
		return -ENOMEM;
	ns->users_cap = n;
	if (before)
		memcpy(ns->users, old->users, before * sizeof(*ns->users));
	if (nwin)
		memcpy(ns->users + before, w->win->users, nwin * sizeof(*ns->users));
	struct files_user *dst = ns->users + before + nwin;
	for (size_t i = after; i < old->nusers; i++) {
		*dst = old->users[i];
		SHIFT(*dst, w);
		dst++;
	}
	ns->nusers = n;
	return table_rebuild(ns, USERS, n);
}

/* Groups likewise; their member lists are contiguous in group order, so
 * the members of the groups before, in and after the window are three
 * runs of mem. */
static int splice_groups(struct files_snapshot *ns, const struct files_snapshot *old,
			 const struct files_window *w)
{
	size_t before = w->active ? w->before : old->ngroups;
	size_t after = w->active ? w->after : old->ngroups;
	const struct files_snapshot *win = w->active ? w->win : NULL;
	size_t nwin = win ? win->ngroups : 0;
	size_t n = before + nwin + (old->ngroups - after);
	/* Untouched, the member list is taken whole: extra groups' members
	 * lie between the groups' (an active window has no extras around). */
	size_t mem_before =
	    !w->active ? old->nmem
	    : before   ? old->groups[before - 1].mem_first + old->groups[before - 1].nmembers
		       : 0;
	size_t mem_after = after < old->ngroups ? old->groups[after].mem_first : old->nmem;
	size_t nwin_mem = win ? win->nmem : 0;
	size_t nmem = mem_before + nwin_mem + (old->nmem - mem_after);
	if (n && !(ns->groups = malloc(n * sizeof(*ns->groups))))
		return -ENOMEM;
	ns->groups_cap = n;
	if (nmem && !(ns->mem = malloc(nmem * sizeof(*ns->mem))))
		return -ENOMEM;
	ns->mem_cap = nmem;
	if (mem_before)
		memcpy(ns->mem, old->mem, mem_before * sizeof(*ns->mem));
	if (nwin_mem)
		memcpy(ns->mem + mem_before, win->mem, nwin_mem * sizeof(*ns->mem));
	if (old->nmem > mem_after)
		memcpy(ns->mem + mem_before + nwin_mem, old->mem + mem_after,
		       (old->nmem - mem_after) * sizeof(*ns->mem));
	ns->nmem = nmem;
	if (before)
		memcpy(ns->groups, old->groups, before * sizeof(*ns->groups));
	struct files_group *dst = ns->groups + before;
	for (size_t i = 0; i < nwin; i++, dst++) {
		*dst = win->groups[i];
		dst->mem_first += mem_before;
	}
	for (size_t i = after; i < old->ngroups; i++, dst++) {
		*dst = old->groups[i];
		dst->mem_first = dst->mem_first - mem_after + mem_before + nwin_mem;
		SHIFT(*dst, w);
	}
	ns->ngroups = n;
	return table_rebuild(ns, GROUPS, n);
}

/* Buffers: old's, borrowed, then the windows', taken. */
static int splice_bufs(struct files_snapshot *ns, const struct files_snapshot *old,
		       struct files_window w[2])
{
	size_t n = old->nbufs;
	for (int k = 0; k < 2; k++)
		n += w[k].active ? w[k].win->nbufs : 0;
	if (n && !(ns->bufs = malloc(n * sizeof(*ns->bufs))))
		return -ENOMEM;
	if (old->nbufs)
		memcpy(ns->bufs, old->bufs, old->nbufs * sizeof(*ns->bufs));
	ns->nbufs = ns->nborrowed = old->nbufs;
	ns->buf_bytes = old->buf_bytes;
	for (int k = 0; k < 2; k++) {
		if (!w[k].active)
			continue;
		struct files_snapshot *win = w[k].win;
		for (size_t i = 0; i < win->nbufs; i++)
			ns->bufs[ns->nbufs++] = win->bufs[i];
		ns->buf_bytes += win->buf_bytes;
		win->nbufs = 0; /* ns frees them now */
	}
	return 0;
}

/* Extra records, all before any active window (the caller checked): taken
 * as they are; their strings are in the borrowed buffers. */
static int splice_extras(struct files_snapshot *ns, const struct files_snapshot *old)
{
	if (old->nxusers && !(ns->xusers = malloc(old->nxusers * sizeof(*ns->xusers))))
		return -ENOMEM;
	if (old->nxgroups && !(ns->xgroups = malloc(old->nxgroups * sizeof(*ns->xgroups))))
		return -ENOMEM;
	if (old->nxusers)
		memcpy(ns->xusers, old->xusers, old->nxusers * sizeof(*ns->xusers));
	if (old->nxgroups)
		memcpy(ns->xgroups, old->xgroups, old->nxgroups * sizeof(*ns->xgroups));
	ns->nxusers = ns->xusers_cap = old->nxusers;
	ns->nxgroups = ns->xgroups_cap = old->nxgroups;
	return 0;
}

int files_snapshot_splice(const struct files_snapshot *old, struct files_window w[2],
			  struct files_snapshot **out)
{
	struct files_snapshot *ns = files_snapshot_new();
	if (!ns)
		return -ENOMEM;
	int rc = splice_bufs(ns, old, w);
	if (rc == 0)
		rc = splice_extras(ns, old);
	if (rc == 0)
		rc = splice_users(ns, old, &w[0]);
	if (rc == 0)
		rc = splice_groups(ns, old, &w[1]);
	if (rc == 0)
		rc = splice_skips(&ns->uskip, &old->uskip, &w[0],
				  w[0].active ? &w[0].win->uskip : NULL);
	if (rc == 0)
		rc = splice_skips(&ns->gskip, &old->gskip, &w[1],
				  w[1].active ? &w[1].win->gskip : NULL);
	if (rc) {
		files_snapshot_free(ns);
		return rc;
	}
	ns->malformed = ns->uskip.malformed + ns->gskip.malformed;
	ns->duplicates = ns->uskip.duplicates + ns->gskip.duplicates;
	*out = ns;
	return 0;
}

/* ==== records from the cache ===================================================== */

static const char *arena_str(struct files_snapshot *s, const char *p)
{
	return idc_arena_strndup(&s->arena, p ? p : "", p ? strlen(p) : 0);
}

int files_snapshot_push_user(struct files_snapshot *s, const struct cache_user *cu)
{
	struct files_user *u = user_slot(s, cu->extra);
	if (!u)
		return -ENOMEM;
	*u = (struct files_user){.name = arena_str(s, cu->name),
				 .passwd = cu->passwd ? arena_str(s, cu->passwd) : NULL,
				 .gecos = arena_str(s, cu->gecos),
				 .dir = arena_str(s, cu->dir),
				 .shell = arena_str(s, cu->shell),
				 .uid = cu->uid,
				 .gid = cu->gid,
				 .order = cu->order,
				 .prev = s->nusers};
	if (!u->name || !u->gecos || !u->dir || !u->shell || (cu->passwd && !u->passwd))
		return -ENOMEM;
	u->hash = files_user_hash(u);
	u->key = name_key(u->name);
	if (!cu->extra && table_find(s, USERS, u->name, u->key) >= 0)
		return 0; /* cannot happen in a consistent cache; keep the first */
	return user_added(s, cu->extra);
}

int files_snapshot_push_group(struct files_snapshot *s, const struct cache_group *cg)
{
	struct files_group *g = group_slot(s, cg->extra);
	if (!g)
		return -ENOMEM;
	int rc = 0;
	size_t first = s->nmem;
	for (size_t i = 0; i < cg->nmembers && rc == 0; i++) {
		const char *m = arena_str(s, cg->members[i]);
		rc = m ? push_member(s, m) : -ENOMEM;
	}
	const char *name = arena_str(s, cg->name);
	const char *passwd = cg->passwd ? arena_str(s, cg->passwd) : NULL;
	if (rc || !name || (cg->passwd && !passwd))
		return rc ? rc : -ENOMEM;
	*g = (struct files_group){.name = name,
				  .passwd = passwd,
				  .gid = cg->gid,
				  .mem_first = first,
				  .nmembers = s->nmem - first,
				  .order = cg->order,
				  .key = name_key(name),
				  .prev = s->ngroups};
	g->hash = files_group_hash(g, files_snapshot_members(s, first));
	if (!cg->extra && table_find(s, GROUPS, g->name, g->key) >= 0)
		return 0;
	return group_added(s, cg->extra);
}
