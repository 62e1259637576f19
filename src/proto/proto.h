/*
 * proto: the socket protocol between clients (the NSS module, the CLI) and
 * idcached — framing, encode/decode of every request and reply, the NSS
 * record packing helpers, a blocking client with timeouts, and the server's
 * incremental frame reader and reply builders.
 *
 * Owns: the wire format below. May call: libc; the server half (reader,
 * builders, files server.c) also uses util's idc_buf. The codec and client
 * halves (proto.c, client.c) are libc only and never allocate, because the
 * NSS module links them into every process on the machine.
 *
 * ==== Wire format, version 1 ==============================================
 *
 * Stream socket (AF_UNIX, SOCK_STREAM); all integers are u32 in host byte
 * order (both ends are on one machine). Every message is a frame:
 *
 *   header (16 bytes): u32 length    whole frame, header included
 *                      u32 command   PROTO_CMD_*
 *                      u32 status    requests: 0; replies: PROTO_ST_*
 *                      u32 reserved  0 (a non-zero value is rejected)
 *   payload (length - 16 bytes)
 *
 * Limits, enforced by both sides: a request frame is at most
 * PROTO_MAX_REQUEST (4 KiB), a reply frame at most PROTO_MAX_REPLY (16 MiB).
 * A header with length < 16 or above the limit is a protocol error: the
 * receiver drops the connection without reading further.
 *
 * Payload types:
 *   u32       4 bytes
 *   str       u32 len, len bytes, one NUL byte. The bytes contain no NUL.
 *             (The NUL is on the wire so a decoded string can be used in
 *             place and copied straight into an NSS buffer.)
 *   passwd    str name, str passwd, u32 uid, u32 gid, str gecos, str dir,
 *             str shell
 *   group     str name, str passwd, u32 gid, u32 nmem, nmem × str member
 *
 * A payload must be consumed exactly: trailing bytes are an error.
 *
 * Replies carry the command of the request they answer. Status codes:
 *   OK        the payload described below
 *   NOTFOUND  no such entry / end of enumeration
 *   UNAVAIL   the daemon cannot answer (no backend, shutting down)
 *   TRYAGAIN  temporary, the client may retry later
 *   ERROR     internal failure
 *   BADREQ    the request failed validation (or came before HELLO, or an
 *             admin command on the NSS socket)
 *   VERSION   HELLO with an unsupported protocol version
 * Any reply whose status is not OK has an empty payload or exactly one str
 * (a human-readable message, for the CLI and the logs).
 *
 * Commands (request payload -> OK reply payload):
 *   1  HELLO        u32 version                  -> u32 server version
 *      First frame on every connection. Status VERSION (payload: u32 server
 *      version) if unsupported; the server closes after replying. Any other
 *      first frame gets BADREQ and the connection is closed. A client may
 *      pipeline HELLO and its first request in one write.
 *   2  GETPWNAM     str name                     -> passwd
 *   3  GETPWUID     u32 uid                      -> passwd
 *   4  GETGRNAM     str name                     -> group
 *   5  GETGRGID     u32 gid                      -> group
 *   6  INITGROUPS   str user                     -> u32 n, n × u32 gid
 *      All groups the user is a member of, primary group included; the
 *      client filters out the one glibc already has. NOTFOUND: unknown user.
 *   7  SETPWENT     (empty)                      -> (empty)
 *   8  GETPWENT     u32 max_count, u32 max_bytes -> u32 n, n × passwd
 *   9  ENDPWENT     (empty)                      -> (empty)
 *  10  SETGRENT     (empty)                      -> (empty)
 *  11  GETGRENT     u32 max_count, u32 max_bytes -> u32 n, n × group
 *  12  ENDGRENT     (empty)                      -> (empty)
 *      Enumeration keeps one cursor per connection and map. SET(re)starts
 *      it; GET without SET starts it implicitly. A GET reply holds 1..n
 *      records, n <= max_count (0: server's choice), and the whole frame is
 *      <= max_bytes (0: only PROTO_MAX_REPLY) unless it holds exactly one
 *      record — a record is never split or skipped. End: status NOTFOUND.
 *  13  MCMAP        u32 kind (mc/layout.h)       -> u32 n, n × u32 kind
 *      The shared-memory map of kind, or with kind 0 every map the daemon
 *      serves (a client maps them all with one round trip): the OK reply's
 *      first byte carries n read-only descriptors (SCM_RIGHTS), one per
 *      kind listed, in that order. UNAVAIL: no such map (disabled);
 *      BADREQ: not a map kind, or a second MCMAP on the connection.
 *      nss.sock only.
 *  20  SSHKEYS      str user                     -> u32 n, n × str key
 *      The SSH public keys of the user GETPWNAM would answer with (the
 *      same domain, docs/DESIGN.md §11), one authorized_keys line each, in
 *      the order the provider gave them; n may be 0 (a files user, or none
 *      kept). An expired entry of a directory is asked for again before
 *      the reply (the answer decides a login); offline, the cache answers.
 *      NOTFOUND: no such user. nss.sock only, for any peer (sshd's
 *      AuthorizedKeysCommandUser).
 *  21  SUBIDS       u32 kind, str user           -> u32 uid, u32 n,
 *                                                   n × (u32 start, u32 count)
 *      The subordinate uid (kind PROTO_SUBID_UID) or gid (PROTO_SUBID_GID)
 *      ranges of user, and the user's uid. n may be 0 (a user without
 *      ranges). Every range has count >= 1 and start + count <= 2^32 - 1
 *      (no range reaches (uid_t)-1). NOTFOUND: unknown user.
 *  22  SUBID_OWNERS u32 kind, u32 id             -> u32 n, n × u32 uid
 *      The uids of the users whose ranges of kind hold id (n may be 0).
 *      Read with proto_decode_gids (the same shape).
 *  32  STATUS       (empty)                      -> str text
 *      text: "key=value\n" lines (e.g. "version=0.1.0\nusers=1234\n").
 *  33  EXPIRE       u32 what, str name           -> u32 count
 *      what: PROTO_EXPIRE_USER / _GROUP (name non-empty) / _ALL (name
 *      empty). count: entries marked expired.
 *  34  RELOAD       (empty)                      -> (empty)
 *      Re-read the configuration and restart the providers.
 *  35  USERINFO     str name                     -> str text
 *  36  GROUPINFO    str name                     -> str text
 *      What the cache holds for one user / group, with its timestamps, as
 *      "key=value\n" lines. NOTFOUND: no served domain holds it.
 * Commands 32-36 are admin-only: served on admin.sock, BADREQ on nss.sock.
 * =========================================================================
 */
#ifndef IDC_PROTO_H
#define IDC_PROTO_H

#include <grp.h>
#include <pwd.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/util.h"

#define PROTO_VERSION     1u
#define PROTO_HDR_SIZE    16u
#define PROTO_MAX_REQUEST 4096u
#define PROTO_MAX_REPLY   (16u * 1024u * 1024u)
/* Longest user or group name a request may carry. */
#define PROTO_NAME_MAX ((unsigned)IDC_NAME_MAX)
/* Where clients look for the daemon's sockets unless told otherwise
 * (IDCACHE_RUNDIR, --run-dir), and the daemon's run_dir by default. */
#define PROTO_DEFAULT_RUN_DIR "/run/idcache"

enum proto_cmd {
	PROTO_CMD_HELLO = 1,
	PROTO_CMD_GETPWNAM = 2,
	PROTO_CMD_GETPWUID = 3,
	PROTO_CMD_GETGRNAM = 4,
	PROTO_CMD_GETGRGID = 5,
	PROTO_CMD_INITGROUPS = 6,
	PROTO_CMD_SETPWENT = 7,
	PROTO_CMD_GETPWENT = 8,
	PROTO_CMD_ENDPWENT = 9,
	PROTO_CMD_SETGRENT = 10,
	PROTO_CMD_GETGRENT = 11,
	PROTO_CMD_ENDGRENT = 12,
	PROTO_CMD_MCMAP = 13,
	PROTO_CMD_SSHKEYS = 20,
	PROTO_CMD_SUBIDS = 21,
	PROTO_CMD_SUBID_OWNERS = 22,
	PROTO_CMD_STATUS = 32,
	PROTO_CMD_EXPIRE = 33,
	PROTO_CMD_RELOAD = 34,
	PROTO_CMD_USERINFO = 35,
	PROTO_CMD_GROUPINFO = 36,
};

enum proto_status {
	PROTO_ST_OK = 0,
	PROTO_ST_NOTFOUND = 1,
	PROTO_ST_UNAVAIL = 2,
	PROTO_ST_TRYAGAIN = 3,
	PROTO_ST_ERROR = 4,
	PROTO_ST_BADREQ = 5,
	PROTO_ST_VERSION = 6,
};

/* SUBIDS / SUBID_OWNERS kind: libsubid's ID_TYPE_UID / ID_TYPE_GID. */
enum proto_subid_kind {
	PROTO_SUBID_UID = 1,
	PROTO_SUBID_GID = 2,
};

enum proto_expire_what {
	PROTO_EXPIRE_USER = 1,
	PROTO_EXPIRE_GROUP = 2,
	PROTO_EXPIRE_ALL = 3,
};

struct proto_hdr {
	uint32_t length; /* whole frame */
	uint32_t command;
	uint32_t status;
	uint32_t reserved;
};

/* True for a command this version defines; name for logs ("?" if not). */
bool proto_cmd_known(uint32_t cmd);
const char *proto_cmd_name(uint32_t cmd);
bool proto_cmd_is_admin(uint32_t cmd);

/* ---- views ------------------------------------------------------------------
 * Decoders never copy: a view points into the buffer that was decoded and is
 * valid as long as that buffer is. */

/* A string: p[len] == '\0' and p[0..len) has no NUL, so p is a C string. */
struct proto_str {
	const char *p;
	uint32_t len;
};

/* count strings in wire encoding (u32 len, bytes, NUL) filling p[0..size)
 * exactly. Built only by a decoder or proto_strlist_init, which validate. */
struct proto_strlist {
	const uint8_t *p;
	size_t size;
	uint32_t count;
};

/* count gids, u32 each, unaligned: read with proto_gids_get. */
struct proto_gids {
	const uint8_t *p;
	uint32_t count;
};

struct proto_passwd {
	struct proto_str name, passwd;
	uint32_t uid, gid;
	struct proto_str gecos, dir, shell;
};

struct proto_group {
	struct proto_str name, passwd;
	uint32_t gid;
	struct proto_strlist mem;
};

/* n records of kind cmd (GETPWENT or GETGRENT) back to back in p[0..size),
 * all already validated. Walk with proto_batch_next_*. */
struct proto_batch {
	const uint8_t *p;
	size_t size;
	uint32_t count;
	uint32_t cmd;
};

/* Validate p[0..size) as exactly count wire strings; 0 or -EBADMSG. For the
 * shared-memory reader, which stores group members in this encoding. */
int proto_strlist_init(struct proto_strlist *l, const void *p, size_t size, uint32_t count);
/* Next string at *off (start with 0): 1 and *out set, 0 at the end. */
int proto_strlist_next(const struct proto_strlist *l, size_t *off, struct proto_str *out);
uint32_t proto_gids_get(const struct proto_gids *g, uint32_t i);

/* ---- requests ---------------------------------------------------------------- */

/* One request, decoded or to encode. Which fields are used depends on cmd:
 * name (GETPWNAM, GETGRNAM, INITGROUPS, SSHKEYS, EXPIRE, USERINFO, GROUPINFO, SUBIDS), id
 * (GETPWUID, GETGRGID, MCMAP: the kind, SUBID_OWNERS), version (HELLO), max_count/max_bytes
 * (GET*ENT), what (EXPIRE; SUBIDS and SUBID_OWNERS: the proto_subid_kind). */
struct proto_req {
	uint32_t cmd;
	struct proto_str name;
	uint32_t id;
	uint32_t version;
	uint32_t max_count, max_bytes;
	uint32_t what;
};

/* Write req as one frame into buf[0..cap). Returns the frame length, or
 * -EINVAL (unknown command, name invalid for the command: empty where one is
 * needed, longer than PROTO_NAME_MAX, embedded NUL) or -EMSGSIZE (cap too
 * small). name.p need not be NUL-terminated here. */
int proto_encode_request(void *buf, size_t cap, const struct proto_req *req);

/* Check a frame header read from the wire: length within [16, max_frame],
 * reserved 0. Does not look at command or status. 0 or -EBADMSG. */
int proto_decode_hdr(const void *p, size_t n, uint32_t max_frame, struct proto_hdr *h);

/* Decode a request: h as returned by proto_decode_hdr, payload of
 * h->length - 16 bytes. Checks status 0, known command, exact payload shape,
 * names 1..PROTO_NAME_MAX bytes (EXPIRE ALL: empty). Views point into
 * payload. 0 or -EBADMSG. */
int proto_decode_request(const struct proto_hdr *h, const void *payload, size_t n,
			 struct proto_req *req);

/* ---- replies (client side) ---------------------------------------------------
 * Each takes the payload of an OK reply (n bytes) and validates all of it
 * before returning 0; -EBADMSG otherwise. Views point into payload. */
int proto_decode_u32(const void *payload, size_t n, uint32_t *v); /* HELLO, EXPIRE */
int proto_decode_passwd(const void *payload, size_t n, struct proto_passwd *pw);
int proto_decode_group(const void *payload, size_t n, struct proto_group *gr);
int proto_decode_gids(const void *payload, size_t n, struct proto_gids *g);
/* A SUBIDS reply: the user's uid and count ranges (8 bytes each), read
 * with proto_subids_get. Checks every range as the wire format says
 * (subid_range_ok, subid/subid.h). */
struct proto_subids {
	uint32_t uid;
	const uint8_t *p;
	uint32_t count;
};
int proto_decode_subids(const void *payload, size_t n, struct proto_subids *s);
/* Range i (< count): *start, *count. */
void proto_subids_get(const struct proto_subids *s, uint32_t i, uint32_t *start, uint32_t *count);
/* cmd is PROTO_CMD_GETPWENT or PROTO_CMD_GETGRENT; n >= 1 records. */
int proto_decode_batch(uint32_t cmd, const void *payload, size_t n, struct proto_batch *b);
/* Next record at *off (start with 0): 1 and *out set, 0 at the end. */
int proto_batch_next_passwd(const struct proto_batch *b, size_t *off, struct proto_passwd *out);
int proto_batch_next_group(const struct proto_batch *b, size_t *off, struct proto_group *out);
/* An SSHKEYS reply: keys gets its n strings (each non-empty). */
int proto_decode_sshkeys(const void *payload, size_t n, struct proto_strlist *keys);
/* A STATUS text, or the optional message of a non-OK reply: empty payload
 * gives an empty string (p = ""). */
int proto_decode_text(const void *payload, size_t n, struct proto_str *s);

/* ---- packing into NSS buffers -------------------------------------------------
 * Copy a record into the caller's struct and buf[0..buflen), as NSS entry
 * points must: the needed size is computed first and nothing is written when
 * buflen is short (-ERANGE). 0 on success. The views may point anywhere —
 * including into buf itself, as the NSS module does when it receives a reply
 * in place: strings are moved front to back and the encoded form is larger
 * than the packed one, so a string is never overwritten before it is read.
 * Used by the socket path and the shared-memory path alike. */
size_t proto_passwd_size(const struct proto_passwd *pw);
int proto_pack_passwd(const struct proto_passwd *pw, struct passwd *out, char *buf, size_t buflen);
/* Needed bytes depend on buf's alignment (the member pointer array). */
size_t proto_group_size(const struct proto_group *gr, const char *buf);
int proto_pack_group(const struct proto_group *gr, struct group *out, char *buf, size_t buflen);

/* ---- client ---------------------------------------------------------------------
 * Blocking calls over a non-blocking socket with a deadline: every call after
 * proto_client_begin must finish before it or fail with -ETIMEDOUT. One
 * client is one connection, used by one thread at a time. Never allocates,
 * never raises SIGPIPE. After any error but -ERANGE from proto_client_call
 * the connection is closed (fd -1; later calls give -ENOTCONN), because the
 * framing can no longer be trusted. */
struct proto_client {
	int fd;
	bool greeted;     /* HELLO answered */
	uint32_t pending; /* payload bytes of the current reply not yet read */
	int timeout_ms;
	uint64_t deadline_ns; /* CLOCK_MONOTONIC */
	bool timed_out;       /* a call reached its deadline (kept after close) */
};

#define PROTO_CLIENT_TIMEOUT_MS 5000
#define PROTO_NSS_SOCKET        "nss.sock"

/* The path of nss.sock for a client inside someone else's process (the
 * NSS module, the subid plugin): in $IDCACHE_RUNDIR, read with
 * secure_getenv — a setuid program is never pointed at a socket of its
 * caller's choosing — else in PROTO_DEFAULT_RUN_DIR. 0, or -ENAMETOOLONG
 * when it does not fit out[0..cap). */
int proto_nss_socket_path(char *out, size_t cap);

/* Connect to the Unix socket at path (CLOEXEC, non-blocking) within
 * timeout_ms, which also becomes the per-request timeout. Returns 0, or
 * -errno from socket/connect (-ENOENT, -ECONNREFUSED: daemon not running),
 * -ENAMETOOLONG, -ETIMEDOUT. On failure c->fd is -1. */
int proto_client_connect(struct proto_client *c, const char *path, int timeout_ms);
void proto_client_close(struct proto_client *c);

/* Send one request frame (from proto_encode_request) and read the reply's
 * header into *h. On the connection's first request the HELLO is sent in the
 * same write and its reply consumed here. Checks that the reply answers
 * this command and fits PROTO_MAX_REPLY. Afterwards h->length - 16 payload
 * bytes are pending: read them with proto_client_read, or drop them with
 * proto_client_skip. Errors: -ETIMEDOUT, -ECONNRESET (EOF), -EBADMSG (bad
 * frame), -EPROTO (version refused, or a reply out of order), -errno. */
int proto_client_request(struct proto_client *c, const void *frame, size_t len,
			 struct proto_hdr *h);
/* proto_client_request for a reply that may carry descriptors (MCMAP):
 * fds[0..*n) get those that came with the reply's header (CLOEXEC), in
 * order; the caller owns them. More than cap, descriptors anywhere else
 * in the header, or control data cut short (MSG_CTRUNC) are a protocol
 * error (-EBADMSG) and every descriptor that came is closed. */
#define PROTO_FDS_MAX 4
int proto_client_request_fds(struct proto_client *c, const void *frame, size_t len,
			     struct proto_hdr *h, int *fds, size_t cap, size_t *n);
/* The payload of an OK MCMAP reply: n kinds, n <= cap. 0 or -EBADMSG. */
int proto_decode_mcmap(const void *payload, size_t len, uint32_t *kinds, size_t cap, size_t *n);
/* Read exactly n (<= pending) payload bytes into buf. */
int proto_client_read(struct proto_client *c, void *buf, size_t n);
/* Read and discard what is pending so the connection can be reused. */
int proto_client_skip(struct proto_client *c);
/* Convenience: request, then the whole payload into buf[0..cap). *n gets the
 * payload size. If it does not fit, the payload is drained, the connection
 * stays usable and -ERANGE is returned with *h and *n set, so the caller
 * knows how much room to make. */
int proto_client_call(struct proto_client *c, const void *frame, size_t len, struct proto_hdr *h,
		      void *buf, size_t cap, size_t *n);

/* ---- server -----------------------------------------------------------------------
 * Incremental frame reader: feed bytes as they arrive, take complete frames.
 * A bad header is an error as soon as its 16 bytes are in; the error is
 * sticky (the connection should be closed). */
struct proto_reader {
	struct idc_buf in;
	size_t off;         /* start of the first unconsumed frame in in.data */
	uint32_t max_frame; /* PROTO_MAX_REQUEST on the daemon */
	int err;
};

struct proto_frame {
	struct proto_hdr hdr;
	const uint8_t *payload; /* valid until the next feed/free */
	size_t len;             /* hdr.length - 16 */
};

void proto_reader_init(struct proto_reader *r, uint32_t max_frame);
/* Append n bytes. 0, -ENOMEM, or -EBADMSG (header invalid). */
int proto_reader_feed(struct proto_reader *r, const void *p, size_t n);
/* 1 and *f set if a complete frame is available, 0 if more bytes are
 * needed, <0 the sticky error. */
int proto_reader_next(struct proto_reader *r, struct proto_frame *f);
/* Bytes buffered but not yet returned as frames. */
size_t proto_reader_buffered(const struct proto_reader *r);
void proto_reader_free(struct proto_reader *r);

/* Reply builders: append to b (which may already hold earlier replies).
 * begin returns the frame's offset in b (>= 0) or -ENOMEM; end patches the
 * length and returns 0, or -EMSGSIZE if the frame exceeds PROTO_MAX_REPLY —
 * then the frame is removed from b and the caller should send an ERROR. */
int proto_reply_begin(struct idc_buf *b, uint32_t cmd, uint32_t status, size_t *start);
int proto_reply_end(struct idc_buf *b, size_t start);
int proto_put_u32(struct idc_buf *b, uint32_t v);
/* s[0..len) must not contain a NUL (-EINVAL). */
int proto_put_str(struct idc_buf *b, const char *s, size_t len);
int proto_put_cstr(struct idc_buf *b, const char *s);
/* Overwrite a u32 written earlier at offset at (a batch count). */
void proto_patch_u32(struct idc_buf *b, size_t at, uint32_t v);
int proto_put_passwd(struct idc_buf *b, const struct proto_passwd *pw);
/* Members are taken from gr->mem (wire encoding) */
int proto_put_group(struct idc_buf *b, const struct proto_group *gr);
/* Members given as C strings. */
int proto_put_group_cstr(struct idc_buf *b, const char *name, const char *passwd, uint32_t gid,
			 const char *const *mem, uint32_t nmem);
/* A whole reply with no payload, or with one message string (msg may be
 * NULL). */
int proto_reply_status(struct idc_buf *b, uint32_t cmd, uint32_t status, const char *msg);

#endif
