/*
 * nscd: the wire protocol of the name service cache daemon's socket, as
 * glibc's client (nscd/nscd_get*_r.c, nscd_helper.c) and musl's
 * (src/passwd/nscd_query.c) speak it: protocol version 2, host byte order,
 * one request per connection.
 *
 * Owns: the request header and the reply layouts — request_header
 * {int32 version, int32 type, int32 key_len} then key_len key bytes (a
 * NUL-terminated name, or an id in decimal); pw_response_header {version,
 * found, name_len, passwd_len, uid, gid, gecos_len, dir_len, shell_len}
 * then the five strings, each with its NUL (the lengths count it);
 * gr_response_header {version, found, name_len, passwd_len, gid, mem_cnt}
 * then mem_cnt member lengths (int32 each), name, passwd, members;
 * initgr_response_header {version, found, ngrps} then ngrps gids; the
 * headers of the other databases, for the "not served here" answer; and
 * the GETFD reply (the key, then the map's size as a uint64, the map's
 * descriptor riding with it).
 * May call: libc only (built into the daemon, its tests and a static test
 * client).
 * Conventions: encoders write into the caller's buffer and return the
 * bytes written, or -EMSGSIZE with nothing usable written when cap is
 * short; the *_size functions say how much they need. Decoders check
 * every length against what was received before reading a field and
 * return -EBADMSG on any inconsistency, -EAGAIN when more bytes are
 * needed; their views point into the decoded buffer.
 * found: 1 found, 0 not found (glibc then does not ask NSS: the answer is
 * final), -1 the database is not served here (glibc asks NSS, and stops
 * asking us about that database for a while).
 * Threads: no state; any thread.
 */
#ifndef IDC_NSCD_H
#define IDC_NSCD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define NSCD_VERSION     2
#define NSCD_SOCKET_PATH "/var/run/nscd/socket"
#define NSCD_KEY_MAX     1024u /* glibc's MAXKEYLEN: nscd refuses longer keys */
#define NSCD_REQ_HDR     12u   /* three int32 */

/* glibc's request_type numbering. */
enum nscd_type {
	NSCD_GETPWBYNAME = 0,
	NSCD_GETPWBYUID = 1,
	NSCD_GETGRBYNAME = 2,
	NSCD_GETGRBYGID = 3,
	NSCD_GETHOSTBYNAME = 4,
	NSCD_GETHOSTBYNAMEv6 = 5,
	NSCD_GETHOSTBYADDR = 6,
	NSCD_GETHOSTBYADDRv6 = 7,
	NSCD_SHUTDOWN = 8,
	NSCD_GETSTAT = 9,
	NSCD_INVALIDATE = 10,
	NSCD_GETFDPW = 11,
	NSCD_GETFDGR = 12,
	NSCD_GETFDHST = 13,
	NSCD_GETAI = 14,
	NSCD_INITGROUPS = 15,
	NSCD_GETSERVBYNAME = 16,
	NSCD_GETSERVBYPORT = 17,
	NSCD_GETFDSERV = 18,
	NSCD_GETNETGRENT = 19,
	NSCD_INNETGR = 20,
	NSCD_GETFDNETGR = 21,
	NSCD_TYPE_COUNT
};

/* Reply header sizes (int32 fields). */
#define NSCD_PW_HDR     36u
#define NSCD_GR_HDR     24u
#define NSCD_INITGR_HDR 12u

/* ---- requests ----------------------------------------------------------------- */

struct nscd_req {
	int32_t type;     /* < NSCD_TYPE_COUNT */
	const char *key;  /* key_len bytes in the decoded buffer */
	uint32_t key_len; /* <= NSCD_KEY_MAX */
};

/* The request at the start of p[0..n): 0 and *req (it took NSCD_REQ_HDR +
 * key_len bytes), -EAGAIN when n is too short to tell, -EBADMSG when it
 * can never be one (another version, an unknown type, a negative or too
 * large key_len) — nscd then closes the connection. */
int nscd_decode_request(const void *p, size_t n, struct nscd_req *req);
/* The key as a C string: key_len >= 1, its last byte NUL and no other;
 * NULL otherwise (a lookup with such a key is malformed). */
const char *nscd_key_name(const struct nscd_req *req);
/* The key as an id: decimal digits (no sign, no spaces) of a value up to
 * UINT32_MAX, NUL-terminated. 0 or -EBADMSG. */
int nscd_key_id(const struct nscd_req *req, uint32_t *id);
/* Write a request for type and key (a C string of at most NSCD_KEY_MAX - 1
 * bytes) into buf: bytes written, -EINVAL or -EMSGSIZE. For clients. */
int nscd_encode_request(void *buf, size_t cap, int32_t type, const char *key);
/* Whether type is one of the five lookups answered from the cache. */
bool nscd_type_is_lookup(int32_t type);

/* ---- replies -------------------------------------------------------------------- */

struct nscd_passwd {
	const char *name, *passwd;
	uint32_t uid, gid;
	const char *gecos, *dir, *shell;
};

struct nscd_group {
	const char *name, *passwd;
	uint32_t gid;
	const char *const *mem; /* nmem C strings */
	uint32_t nmem;
};

size_t nscd_passwd_size(const struct nscd_passwd *pw);
int nscd_encode_passwd(void *buf, size_t cap, const struct nscd_passwd *pw);
size_t nscd_group_size(const struct nscd_group *gr);
int nscd_encode_group(void *buf, size_t cap, const struct nscd_group *gr);
size_t nscd_initgroups_size(uint32_t n);
int nscd_encode_initgroups(void *buf, size_t cap, const uint32_t *gids, uint32_t n);
/* The bare header of type's reply with found (0: not found, -1: not
 * served), every other field 0; 0 bytes for a type whose client expects
 * no such header (SHUTDOWN, GETSTAT, INVALIDATE, the GETFD requests):
 * those are answered by closing. Bytes written, or -EMSGSIZE. */
size_t nscd_status_size(int32_t type);
int nscd_encode_status(void *buf, size_t cap, int32_t type, int32_t found);
/* INVALIDATE's reply: an int32, 0 or an errno value (4 bytes). */
int nscd_encode_invalidate(void *buf, size_t cap, int32_t err);
/* The GETFD reply: key (key_len bytes, its NUL included, as received)
 * then mapsize. The descriptor goes with its first byte. */
int nscd_encode_fd_reply(void *buf, size_t cap, const char *key, uint32_t key_len,
			 uint64_t mapsize);

/* ---- decoding replies (clients, tests) ---------------------------------------------
 * found is the header's; on found == 1 the record is validated whole:
 * every string within n and NUL-terminated where its length says.
 * Member names are read with nscd_group_member. Returns the bytes the
 * reply took, -EAGAIN (n too short) or -EBADMSG. */
struct nscd_passwd_view {
	int32_t found;
	struct nscd_passwd pw;
};
struct nscd_group_view {
	int32_t found;
	const char *name, *passwd;
	uint32_t gid, nmem;
	const uint8_t *lens; /* nmem int32 lengths, unaligned */
	const char *mem;     /* the members, back to back */
};
struct nscd_initgroups_view {
	int32_t found;
	uint32_t n;
	const uint8_t *gids; /* n int32, unaligned: nscd_gid */
};

int nscd_decode_passwd(const void *p, size_t n, struct nscd_passwd_view *v);
int nscd_decode_group(const void *p, size_t n, struct nscd_group_view *v);
int nscd_decode_initgroups(const void *p, size_t n, struct nscd_initgroups_view *v);
/* Member i of a validated view (walks from the start: i < v->nmem). */
const char *nscd_group_member(const struct nscd_group_view *v, uint32_t i);
uint32_t nscd_gid(const struct nscd_initgroups_view *v, uint32_t i);

#endif
