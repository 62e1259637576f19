/*
 * util: the few helpers every idcache module shares — error codes and their
 * text, error detail for the caller that reports, logging, growable byte
 * buffers, a bump arena, hashing, and the check of an SSH authorized_keys
 * line. Depends on libc (and xxhash, inlined)
 * only, so the NSS module may link it.
 */
#ifndef IDC_UTIL_H
#define IDC_UTIL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define IDC_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* ---- errors ---------------------------------------------------------------
 * Functions return 0 or a negative code: -errno, or one of ours below (a
 * range no errno uses). idc_strerror() decodes both. */
enum {
	IDC_ERR_FIRST = -31020,
	IDC_ESYNTAX = -31019,    /* input does not follow its grammar */
	IDC_ENOPARENT = -31018,  /* parent entry does not exist */
	IDC_ENOTLEAF = -31017,   /* entry has children */
	IDC_EMAPFULL = -31016,   /* store map is full; grow and retry */
	IDC_ECORRUPT = -31015,   /* stored data fails its own checks */
	IDC_ESIZELIMIT = -31014, /* search returned its size limit */
	IDC_EVERSION = -31013,   /* store format version not supported */
	IDC_ENOTSTORE = -31012,  /* directory is not an idcache store */
	IDC_ENAMING = -31011,    /* RDN value missing from the entry */
	IDC_ENOATTR = -31010,    /* modify: attribute or value not present */
	IDC_EVALEXISTS = -31009, /* modify: value already present */
	IDC_ERR_LAST = -31009,
};

/* Text for a code from any idcache function (0, -errno or IDC_E*). Static. */
const char *idc_strerror(int rc);

/* Detail for a failure, written by the function that fails (when the caller
 * passes one) and reported by the caller that decides what to do. */
struct idc_diag {
	char msg[512];
};

/* Set d->msg (printf-style); NULL d is allowed and ignored. Returns rc so a
 * failing function can `return idc_diag_set(d, rc, ...)`. */
int idc_diag_set(struct idc_diag *d, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prefix d->msg with more context ("file:12: " + old message). */
/* Make sure d->msg says something: idc_strerror(rc) when it is empty (or
 * unterminated). */
void idc_diag_complete(struct idc_diag *d, int rc);
void idc_diag_prefix(struct idc_diag *d, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* ---- logging -------------------------------------------------------------- */
enum idc_log_level { IDC_LOG_ERR = 0, IDC_LOG_WARN, IDC_LOG_INFO, IDC_LOG_DEBUG };

/* Route log lines to stderr (to_stderr) or syslog under ident; lines above
 * level are dropped. Before any call: stderr, level INFO. */
void idc_log_init(const char *ident, bool to_stderr, int level);
int idc_log_level(void);
/* While on, errors logged to syslog go to stderr too: a daemon not started
 * yet, whose errors must reach whoever started it even with no syslog. */
void idc_log_errors_to_stderr(bool on);
void idc_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- growable buffer -------------------------------------------------------
 * Owns data (malloc). data is always NUL-terminated after a successful call,
 * so text can be used as a C string; len excludes the NUL. */
struct idc_buf {
	char *data;
	size_t len;
	size_t cap;
};

#define IDC_BUF_INIT                                                                               \
	{                                                                                          \
		NULL, 0, 0                                                                         \
	}

/* Make room for extra more bytes (plus the NUL). 0 or -ENOMEM. */
int idc_buf_reserve(struct idc_buf *b, size_t extra);
int idc_buf_append(struct idc_buf *b, const void *p, size_t n);
int idc_buf_putc(struct idc_buf *b, char c);
int idc_buf_printf(struct idc_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Forget the content, keep the memory. */
static inline void idc_buf_reset(struct idc_buf *b)
{
	b->len = 0;
	if (b->data)
		b->data[0] = '\0';
}
void idc_buf_free(struct idc_buf *b);

/* ---- arena -----------------------------------------------------------------
 * Bump allocator for many small objects with one lifetime (a parsed record,
 * a decoded entry). Memory comes back only by idc_arena_reset or _free. */
struct idc_arena_chunk;
struct idc_arena {
	struct idc_arena_chunk *head;
	size_t used;  /* in head */
	size_t total; /* bytes of all chunks: what the arena holds from malloc */
};

#define IDC_ARENA_INIT                                                                             \
	{                                                                                          \
		NULL, 0, 0                                                                         \
	}

/* size bytes aligned for any object, or NULL on ENOMEM. */
void *idc_arena_alloc(struct idc_arena *a, size_t size);
/* Copy of p[0..n) plus a NUL, or NULL. */
char *idc_arena_strndup(struct idc_arena *a, const char *p, size_t n);
/* Keep the first chunk, drop the rest; everything allocated is invalid. */
void idc_arena_reset(struct idc_arena *a);
void idc_arena_free(struct idc_arena *a);

/* ---- hashing ---------------------------------------------------------------
 * 64-bit keyed hash (XXH3). Not cryptographic; the seed makes flooding a
 * table with chosen collisions hard for someone who cannot read it. */
uint64_t idc_hash64(const void *p, size_t n, uint64_t seed);

/* Open-addressing tables probed linearly, whose slots of slot_size bytes
 * begin with a uint64_t hash, 0 marking an empty slot: *slots (NULL: no
 * table yet, then first_cap slots, a power of two) rehashed into a table
 * twice as large, *mask its size less one. The old table is freed; on
 * -ENOMEM it is left as it was. */
int idc_oa_grow(void **slots, size_t *mask, size_t slot_size, size_t first_cap);

/* The same kind of table, grown a step at a time: a table that doubles
 * all at once rehashes every entry in one call (a million entries, tens
 * of milliseconds of an event loop's turn). When it would be over half
 * full, a table twice as large is taken and each later insertion copies
 * IDC_OAT_STEP slots of the old one into it, so the copy is done before
 * the new one is half full; until then a key is looked for in both (an
 * entry copied is the same bytes in both, and the new table's is found
 * first). Zeroed: empty. Hashes must not be 0. */
#define IDC_OAT_STEP 8u
struct idc_oat {
	unsigned char *slot;    /* (mask + 1) slots, NULL when empty */
	size_t mask, used;      /* used: entries held */
	unsigned char *old;     /* the table before the last growth, or NULL */
	size_t old_mask, moved; /* old's slots [0, moved) are copied */
};
/* The slot holding hash h, or NULL. */
void *idc_oat_find(const struct idc_oat *t, size_t slot_size, uint64_t h);
/* An empty slot for hash h, which must not be held (idc_oat_find), into
 * *out: the caller writes the entry there, h in its first 8 bytes, before
 * the next call. first_cap: the first table's slots (a power of two). 0
 * or -ENOMEM (nothing changed). */
int idc_oat_claim(struct idc_oat *t, size_t slot_size, uint64_t h, size_t first_cap, void **out);
/* Bytes the tables take. */
size_t idc_oat_bytes(const struct idc_oat *t, size_t slot_size);
void idc_oat_free(struct idc_oat *t);

/* ---- strings ---------------------------------------------------------------- */
static inline char idc_tolower(char c)
{
	return (c >= 'A' && c <= 'Z') ? (char)(c + ('a' - 'A')) : c;
}
/* ASCII case-insensitive equality of two byte strings. */
bool idc_memcaseeq(const char *a, size_t alen, const char *b, size_t blen);

/* The value of a base64 digit (RFC 4648, the standard alphabet), or -1
 * for any other byte ('=' included). Inline: key lines and LDIF values are
 * read a byte at a time. */
static inline int idc_b64_value(unsigned char c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	return c == '+' ? 62 : c == '/' ? 63 : -1;
}

/* The one rule for user and group names, applied by the NSS module, the
 * providers and the cache alike: 1..255 bytes, no '/', ':', ',', control
 * characters or DEL, not starting with '-', '+' or space, not "." or "..". */
#define IDC_NAME_MAX 255
bool idc_name_valid(const char *name, size_t len);

/* ---- SSH public keys ---------------------------------------------------------
 * The one check of an authorized_keys line (sshd(8), AUTHORIZED_KEYS FILE
 * FORMAT) for every layer that stores or prints one: [options] keytype
 * base64-blob [comment], where keytype is one OpenSSH knows (or its
 * -cert-v01 form), the blob is padded base64 whose first field names that
 * type, options are sshd's (quoted strings may hold blanks), and no byte
 * is a control character but a tab. Blanks and line breaks around the line
 * are not part of it: *out gives the line without them (start, len), or
 * why it is no key (a static text, for the log). 0 or -EINVAL. */
#define IDC_SSH_KEY_MAX 16384 /* longest line kept (an RSA 16384-bit key is ~2.8 KB) */
struct idc_ssh_key {
	size_t start, len;
	const char *why;
};
int idc_ssh_key_check(const char *s, size_t n, struct idc_ssh_key *out);

/* Read fd until cap bytes or the end, retrying on EINTR: *got bytes in
 * buf. 0 or -errno (what was read before the error is in buf). */
int idc_read_full(int fd, char *buf, size_t cap, size_t *got);

/* Monotonic clock in nanoseconds. */
uint64_t idc_now_ns(void);

/* ---- shared maps -------------------------------------------------------------
 * A memfd named name of size bytes for maps written by one process and read
 * by others: mode 0444, fully allocated (a sparse map on a full tmpfs would
 * fault its writer on a first write), mapped read-write into *base, then
 * sealed against shrinking, growing and any later write access, and
 * reopened read-only into *ro (what is handed out can never write, even
 * where the seals would not stop it). 0 or -errno (nothing left open). */
int idc_memfd_sealed(const char *name, uint64_t size, uint8_t **base, int *ro);

#endif
