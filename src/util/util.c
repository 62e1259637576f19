/* util: errors, diagnostics, logging, buffers, arena, hashing. */
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

/* ---- errors ---------------------------------------------------------------- */

static const char *const idc_errtext[] = {
    [IDC_ESYNTAX - IDC_ERR_FIRST] = "invalid syntax",
    [IDC_ENOPARENT - IDC_ERR_FIRST] = "parent entry does not exist",
    [IDC_ENOTLEAF - IDC_ERR_FIRST] = "entry has children",
    [IDC_EMAPFULL - IDC_ERR_FIRST] = "store map is full",
    [IDC_ECORRUPT - IDC_ERR_FIRST] = "store data is corrupted",
    [IDC_ESIZELIMIT - IDC_ERR_FIRST] = "size limit exceeded",
    [IDC_EVERSION - IDC_ERR_FIRST] = "unsupported store format version",
    [IDC_ENOTSTORE - IDC_ERR_FIRST] = "not an idcache store",
    [IDC_ENAMING - IDC_ERR_FIRST] = "RDN value is not present in the entry",
    [IDC_ENOATTR - IDC_ERR_FIRST] = "no such attribute or value",
    [IDC_EVALEXISTS - IDC_ERR_FIRST] = "attribute value already exists",
};

const char *idc_strerror(int rc)
{
	if (rc == 0)
		return "success";
	if (rc > IDC_ERR_FIRST && rc <= IDC_ERR_LAST) {
		const char *s = idc_errtext[rc - IDC_ERR_FIRST];
		return s ? s : "unknown idcache error";
	}
	if (rc < 0 && rc > -4096)
		return strerror(-rc);
	return "unknown error";
}

int idc_diag_set(struct idc_diag *d, int rc, const char *fmt, ...)
{
	if (d) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(d->msg, sizeof(d->msg), fmt, ap);
		va_end(ap);
	}
	return rc;
}

void idc_diag_complete(struct idc_diag *d, int rc)
{
	/* the store's messages say what and why; the code's text is for
	 * failures that came without one */
	size_t len = strnlen(d->msg, sizeof(d->msg));
	if (len == 0 || len == sizeof(d->msg))
		snprintf(d->msg, sizeof(d->msg), "%s", idc_strerror(rc));
}

void idc_diag_prefix(struct idc_diag *d, const char *fmt, ...)
{
	if (!d)
		return;
	char pre[256];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(pre, sizeof(pre), fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	size_t plen = (size_t)n < sizeof(pre) ? (size_t)n : sizeof(pre) - 1;
	size_t mlen = strnlen(d->msg, sizeof(d->msg) - 1);
	if (plen + mlen > sizeof(d->msg) - 1)
		mlen = sizeof(d->msg) - 1 - plen; /* the tail of the old text goes */
	memmove(d->msg + plen, d->msg, mlen);
	memcpy(d->msg, pre, plen);
	d->msg[plen + mlen] = '\0';
}

/* ---- logging ---------------------------------------------------------------- */

static bool log_stderr = true;
static int log_max = IDC_LOG_INFO;
static const char *log_ident = "idcache";

void idc_log_init(const char *ident, bool to_stderr, int level)
{
	log_ident = ident;
	log_stderr = to_stderr;
	log_max = level;
	if (!to_stderr)
		openlog(ident, LOG_PID | LOG_NDELAY, LOG_DAEMON);
}

int idc_log_level(void)
{
	return log_max;
}

static bool log_errors_stderr;

void idc_log_errors_to_stderr(bool on)
{
	log_errors_stderr = on;
}

/* Control characters become \xNN: a value from a file, a client or a
 * directory must not be able to forge log lines (a newline) or drive the
 * admin's terminal (an escape sequence). */
static void log_escape(const char *in, char *out, size_t cap)
{
	static const char hex[] = "0123456789abcdef";
	size_t o = 0;
	for (const unsigned char *p = (const unsigned char *)in; *p && o + 5 < cap; p++) {
		if (*p < 0x20 || *p == 0x7f) {
			out[o++] = '\\';
			out[o++] = 'x';
			out[o++] = hex[*p >> 4];
			out[o++] = hex[*p & 15];
		} else {
			out[o++] = (char)*p;
		}
	}
	out[o] = '\0';
}

void idc_log(int level, const char *fmt, ...)
{
	static const int prio[] = {LOG_ERR, LOG_WARNING, LOG_INFO, LOG_DEBUG};
	static const char *const name[] = {"error", "warning", "info", "debug"};
	if (level > log_max || level < 0)
		return;
	char line[2048], safe[4 * sizeof(line)];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	log_escape(line, safe, sizeof(safe));
	if (log_stderr || (log_errors_stderr && level == IDC_LOG_ERR))
		fprintf(stderr, "%s: %s: %s\n", log_ident, name[level], safe);
	if (!log_stderr)
		syslog(prio[level], "%s", safe);
}

/* ---- buffers ---------------------------------------------------------------- */

int idc_buf_reserve(struct idc_buf *b, size_t extra)
{
	if (extra > SIZE_MAX / 2 - b->len)
		return -ENOMEM;
	size_t need = b->len + extra + 1;
	if (need <= b->cap)
		return 0;
	size_t cap = b->cap ? b->cap : 64;
	while (cap < need)
		cap *= 2;
	char *p = realloc(b->data, cap);
	if (!p)
		return -ENOMEM;
	b->data = p;
	b->cap = cap;
	return 0;
}

int idc_buf_append(struct idc_buf *b, const void *p, size_t n)
{
	int rc = idc_buf_reserve(b, n);
	if (rc)
		return rc;
	if (n)
		memcpy(b->data + b->len, p, n);
	b->len += n;
	b->data[b->len] = '\0';
	return 0;
}

int idc_buf_putc(struct idc_buf *b, char c)
{
	return idc_buf_append(b, &c, 1);
}

int idc_buf_printf(struct idc_buf *b, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0)
		return -EINVAL;
	int rc = idc_buf_reserve(b, (size_t)n);
	if (rc)
		return rc;
	va_start(ap, fmt);
	vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
	return 0;
}

void idc_buf_free(struct idc_buf *b)
{
	free(b->data);
	b->data = NULL;
	b->len = b->cap = 0;
}

/* ---- arena ------------------------------------------------------------------ */

struct idc_arena_chunk {
	struct idc_arena_chunk *next;
	size_t size;
	max_align_t data[];
};

/* Chunks start small (a parsed filter needs a few hundred bytes) and double
 * up to ARENA_CHUNK, so short-lived arenas stay cheap and big ones make few
 * allocations. */
#define ARENA_FIRST 512
#define ARENA_CHUNK (64 * 1024)
#define ARENA_ALIGN (_Alignof(max_align_t))

void *idc_arena_alloc(struct idc_arena *a, size_t size)
{
	size_t need = (size + ARENA_ALIGN - 1) & ~(ARENA_ALIGN - 1);
	if (need < size)
		return NULL;
	if (!a->head || a->head->size - a->used < need) {
		size_t csize = a->head ? a->head->size * 2 : ARENA_FIRST;
		if (csize > ARENA_CHUNK)
			csize = ARENA_CHUNK;
		if (csize < need)
			csize = need;
		struct idc_arena_chunk *c = malloc(sizeof(*c) + csize);
		if (!c)
			return NULL;
		c->size = csize;
		a->total += sizeof(*c) + csize;
		/* A big one-off allocation goes behind the current chunk so the
		 * space left in the head is not wasted. */
		if (a->head && need > a->head->size) {
			c->next = a->head->next;
			a->head->next = c;
			return c->data;
		}
		c->next = a->head;
		a->head = c;
		a->used = 0;
	}
	void *p = (char *)a->head->data + a->used;
	a->used += need;
	return p;
}

char *idc_arena_strndup(struct idc_arena *a, const char *p, size_t n)
{
	char *s = idc_arena_alloc(a, n + 1);
	if (!s)
		return NULL;
	if (n)
		memcpy(s, p, n);
	s[n] = '\0';
	return s;
}

void idc_arena_reset(struct idc_arena *a)
{
	if (!a->head)
		return;
	struct idc_arena_chunk *keep = a->head, *c = keep->next;
	while (c) {
		struct idc_arena_chunk *n = c->next;
		free(c);
		c = n;
	}
	keep->next = NULL;
	a->used = 0;
	a->total = sizeof(*keep) + keep->size;
}

void idc_arena_free(struct idc_arena *a)
{
	struct idc_arena_chunk *c = a->head;
	while (c) {
		struct idc_arena_chunk *n = c->next;
		free(c);
		c = n;
	}
	a->head = NULL;
	a->used = 0;
	a->total = 0;
}

/* ---- hashing and strings ------------------------------------------------------ */

uint64_t idc_hash64(const void *p, size_t n, uint64_t seed)
{
	return XXH3_64bits_withSeed(p, n, seed);
}

static uint64_t oa_hash(const unsigned char *slot)
{
	uint64_t h;
	memcpy(&h, slot, sizeof(h));
	return h;
}

/* The first empty slot from h's home on (the table is never full). */
static unsigned char *oa_empty(unsigned char *slots, size_t mask, size_t slot_size, uint64_t h)
{
	size_t j = h & mask;
	while (oa_hash(slots + j * slot_size))
		j = (j + 1) & mask;
	return slots + j * slot_size;
}

/* Copy the occupied slots among from's [i, end) into to. */
static void oa_copy(unsigned char *to, size_t mask, const unsigned char *from, size_t i, size_t end,
		    size_t slot_size)
{
	for (; i < end; i++) {
		const unsigned char *s = from + i * slot_size;
		uint64_t h = oa_hash(s);
		if (h)
			memcpy(oa_empty(to, mask, slot_size, h), s, slot_size);
	}
}

int idc_oa_grow(void **slots, size_t *mask, size_t slot_size, size_t first_cap)
{
	size_t n = *slots ? (*mask + 1) * 2 : first_cap;
	unsigned char *to = calloc(n, slot_size);
	if (!to)
		return -ENOMEM;
	if (*slots)
		oa_copy(to, n - 1, *slots, 0, *mask + 1, slot_size);
	free(*slots);
	*slots = to;
	*mask = n - 1;
	return 0;
}

static unsigned char *oa_find(unsigned char *slots, size_t mask, size_t slot_size, uint64_t h)
{
	for (size_t j = h & mask;; j = (j + 1) & mask) {
		unsigned char *s = slots + j * slot_size;
		uint64_t at = oa_hash(s);
		if (at == h)
			return s;
		if (!at)
			return NULL;
	}
}

void *idc_oat_find(const struct idc_oat *t, size_t slot_size, uint64_t h)
{
	unsigned char *s = t->slot ? oa_find(t->slot, t->mask, slot_size, h) : NULL;
	/* not copied yet (or copied, then found above first) */
	return s || !t->old ? s : oa_find(t->old, t->old_mask, slot_size, h);
}

/* Copy up to n more of the old table's slots; freed once all are. */
static void oat_move(struct idc_oat *t, size_t slot_size, size_t n)
{
	if (!t->old)
		return;
	size_t end = t->old_mask + 1 - t->moved > n ? t->moved + n : t->old_mask + 1;
	oa_copy(t->slot, t->mask, t->old, t->moved, end, slot_size);
	t->moved = end;
	if (end == t->old_mask + 1) {
		free(t->old);
		t->old = NULL;
		t->old_mask = t->moved = 0;
	}
}

int idc_oat_claim(struct idc_oat *t, size_t slot_size, uint64_t h, size_t first_cap, void **out)
{
	if (!t->slot || (t->used + 1) * 2 > t->mask + 1) {
		size_t n = t->slot ? (t->mask + 1) * 2 : first_cap;
		unsigned char *to = calloc(n, slot_size);
		if (!to)
			return -ENOMEM;
		/* IDC_OAT_STEP >= 2 ends a copy before the table it fills is
		 * half full; a smaller one would end here, all at once. */
		oat_move(t, slot_size, SIZE_MAX);
		t->old = t->slot;
		t->old_mask = t->slot ? t->mask : 0;
		t->moved = 0;
		t->slot = to;
		t->mask = n - 1;
	}
	oat_move(t, slot_size, IDC_OAT_STEP);
	*out = oa_empty(t->slot, t->mask, slot_size, h);
	t->used++;
	return 0;
}

size_t idc_oat_bytes(const struct idc_oat *t, size_t slot_size)
{
	size_t n = t->slot ? t->mask + 1 : 0;
	return (n + (t->old ? t->old_mask + 1 : 0)) * slot_size;
}

void idc_oat_free(struct idc_oat *t)
{
	free(t->slot);
	free(t->old);
	memset(t, 0, sizeof(*t));
}

bool idc_memcaseeq(const char *a, size_t alen, const char *b, size_t blen)
{
	if (alen != blen)
		return false;
	for (size_t i = 0; i < alen; i++)
		if (idc_tolower(a[i]) != idc_tolower(b[i]))
			return false;
	return true;
}

bool idc_name_valid(const char *name, size_t len)
{
	if (len == 0 || len > IDC_NAME_MAX)
		return false;
	if (name[0] == '-' || name[0] == '+' || name[0] == ' ')
		return false;
	if ((len == 1 && name[0] == '.') || (len == 2 && name[0] == '.' && name[1] == '.'))
		return false;
	for (size_t i = 0; i < len; i++) {
		unsigned char ch = (unsigned char)name[i];
		if (ch < 0x20 || ch == 0x7f || ch == '/' || ch == ':' || ch == ',')
			return false;
	}
	return true;
}

uint64_t idc_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int idc_read_full(int fd, char *buf, size_t cap, size_t *got)
{
	size_t n = 0;
	while (n < cap) {
		ssize_t r = read(fd, buf + n, cap - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			*got = n;
			return -errno;
		}
		if (r == 0)
			break;
		n += (size_t)r;
	}
	*got = n;
	return 0;
}

/* ---- shared maps -------------------------------------------------------------- */

/* Seal bits glibc 2.36 may not name yet (Linux 5.1+). */
#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010
#endif
#define MAP_SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE | F_SEAL_SEAL)

/* Reopened through /proc: a descriptor that cannot write. */
static int reopen_ro(int fd)
{
	char p[64];
	snprintf(p, sizeof(p), "/proc/self/fd/%d", fd);
	int ro = open(p, O_RDONLY | O_CLOEXEC);
	return ro < 0 ? -errno : ro;
}

int idc_memfd_sealed(const char *name, uint64_t size, uint8_t **base, int *ro)
{
	int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return -errno;
	/* 0444: a client reopening its descriptor through /proc gets no write
	 * access either (root aside, whom the seals stop). */
	int rc = fchmod(fd, 0444) < 0 ? -errno : -posix_fallocate(fd, 0, (off_t)size);
	void *p = MAP_FAILED;
	if (rc == 0) {
		p = mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		if (p == MAP_FAILED)
			rc = -errno;
	}
	if (rc == 0 && fcntl(fd, F_ADD_SEALS, MAP_SEALS) < 0)
		rc = -errno;
	*ro = rc == 0 ? reopen_ro(fd) : -1;
	if (rc == 0 && *ro < 0)
		rc = *ro;
	close(fd);
	if (rc < 0) {
		if (p != MAP_FAILED)
			munmap(p, (size_t)size);
		return rc;
	}
	*base = p;
	return 0;
}
