/*
 * userdb: systemd's user database API (io.systemd.UserDatabase) over
 * Varlink — the framing of a stream socket, the decoding of a method call
 * and the JSON of its replies. No I/O and no cache: the daemon
 * (src/daemon/userdb.c) reads the socket, answers from the cache and sends
 * what is built here.
 *
 * Owns: the Varlink framing (JSON messages each ended by one NUL byte, at
 *   most UDB_MSG_MAX bytes a request), the methods and errors this service
 *   speaks (io.systemd.UserDatabase: GetUserRecord, GetGroupRecord,
 *   GetMemberships; org.varlink.service: GetInfo) and the JSON user and
 *   group records (systemd's USER_RECORD / GROUP_RECORD specifications,
 *   the "regular" section only) — all through json-c, never by hand.
 * May call: util, json-c, libc.
 *
 * Conventions: functions return 0 or -errno (-ENOMEM; -EBADMSG: not
 *   Varlink, the connection must close; -EMSGSIZE: a message too long).
 *   Text handed in (names, gecos, keys) is a C string; a string that is not
 *   valid UTF-8 cannot be JSON and is left out of a record (a name: the
 *   record cannot be built, -EILSEQ). Replies are appended to an idc_buf
 *   with their NUL.
 * Threads: none kept; every object belongs to its caller.
 */
#ifndef IDC_USERDB_H
#define IDC_USERDB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/util.h"

#define UDB_MSG_MAX     16384u /* longest request, its NUL included */
#define UDB_SERVICE_MAX 107u   /* a socket file's name: sun_path less the NUL */
#define UDB_JSON_DEPTH  8      /* deepest nesting a request may have */

#define UDB_IFACE         "io.systemd.UserDatabase"
#define UDB_ERR_NOT_FOUND UDB_IFACE ".NoRecordFound"
#define UDB_ERR_BAD_SVC   UDB_IFACE ".BadService"
#define UDB_ERR_UNAVAIL   UDB_IFACE ".ServiceNotAvailable"
#define UDB_ERR_CONFLICT  UDB_IFACE ".ConflictingRecordFound"
#define UDB_ERR_NO_ENUM   UDB_IFACE ".EnumerationNotSupported"
#define UDB_VL_IFACE      "org.varlink.service"
#define UDB_ERR_NO_IFACE  UDB_VL_IFACE ".InterfaceNotFound"
#define UDB_ERR_NO_METHOD UDB_VL_IFACE ".MethodNotFound"
#define UDB_ERR_BAD_PARAM UDB_VL_IFACE ".InvalidParameter"
#define UDB_ERR_MORE      UDB_VL_IFACE ".ExpectedMore"

/* ---- framing ------------------------------------------------------------------
 * An incremental reader of one stream: bytes in as they come, whole
 * messages out. */
struct udb_reader {
	struct idc_buf b;
	size_t off;  /* start of the first message not yet handed out */
	size_t scan; /* bytes from off already searched for the NUL */
};

void udb_reader_init(struct udb_reader *r);
/* Append p[0..n). 0 or -ENOMEM. */
int udb_reader_feed(struct udb_reader *r, const void *p, size_t n);
/* The next whole message (its NUL excluded) in *msg, *len: valid until the
 * next call on r. 1: a message; 0: none complete yet; -EMSGSIZE: the next
 * message passes UDB_MSG_MAX (the stream cannot be resynchronised). */
int udb_reader_next(struct udb_reader *r, const char **msg, size_t *len);
/* Bytes received and not yet handed out. */
size_t udb_reader_buffered(const struct udb_reader *r);
void udb_reader_free(struct udb_reader *r);

/* ---- method calls ----------------------------------------------------------------- */
enum udb_method {
	UDB_GET_USER = 1,
	UDB_GET_GROUP,
	UDB_GET_MEMBERSHIPS,
	UDB_GET_INFO,
};

/* One decoded call. Keys absent or null are not "has". A name that no
 * cache could hold (too long, an embedded NUL) is kept as bad: no record
 * has it. */
struct udb_call {
	enum udb_method method;
	bool more, oneway;
	bool has_id;
	uint32_t id; /* uid or gid */
	bool has_user, has_group;
	bool bad_user, bad_group;
	char user[IDC_NAME_MAX + 1];  /* userName */
	char group[IDC_NAME_MAX + 1]; /* groupName (GetGroupRecord's name, too) */
	bool has_service;             /* set and at most UDB_SERVICE_MAX bytes */
	char service[UDB_SERVICE_MAX + 1];
};

/* An error reply: name (static) and at most one string parameter. */
struct udb_error {
	const char *name;
	const char *key; /* NULL: no parameter */
	char value[128];
};

/* Decode msg[0..len) (a message from udb_reader_next). 0: *call is set.
 * 1: the call must be answered with *err (unknown interface or method, a
 * parameter missing, of the wrong type or unknown). -EBADMSG: not a
 * Varlink call (not JSON, not an object, no method). -ENOMEM. */
int udb_call_parse(const char *msg, size_t len, struct udb_call *call, struct udb_error *err);

/* ---- replies -------------------------------------------------------------------------
 * A reply's parameters, built whole, written once it is known whether
 * another reply follows it ("continues"). */
struct udb_reply;

/* What a user record holds; NULL or empty strings are left out. */
struct udb_user {
	const char *name;
	uint32_t uid, gid;
	const char *gecos, *dir, *shell;
	const char *const *member_of; /* supplementary groups' names */
	size_t nmember_of;
	const char *const *keys; /* sshAuthorizedKeys */
	size_t nkeys;
	const char *service; /* the service answering: clients refuse a record without */
};

struct udb_group {
	const char *name;
	uint32_t gid;
	const char *const *members;
	size_t nmembers;
	const char *service;
};

/* {"record": USER, "incomplete": false}. 0, -EILSEQ (name not UTF-8) or
 * -ENOMEM. */
int udb_reply_user(const struct udb_user *u, struct udb_reply **out);
int udb_reply_group(const struct udb_group *g, struct udb_reply **out);
/* {"userName": user, "groupName": group}. */
int udb_reply_membership(const char *user, const char *group, struct udb_reply **out);
/* GetInfo's answer: vendor, product, version, url, interfaces. */
int udb_reply_info(const char *version, struct udb_reply **out);
/* Append {"parameters": ..., "continues": true?} and its NUL. 0 or -ENOMEM. */
int udb_reply_write(const struct udb_reply *r, bool continues, struct idc_buf *out);
void udb_reply_free(struct udb_reply *r);
/* Append the error reply e. 0 or -ENOMEM. */
int udb_error_write(const struct udb_error *e, struct idc_buf *out);
/* Fill e with name (static) and, when key is not NULL, its one parameter. */
void udb_error_set(struct udb_error *e, const char *name, const char *key, const char *value);

/* The record's disposition for a uid or gid: "intrinsic" (0 and 65534),
 * "system" (below 1000), "regular" otherwise. Static. */
const char *udb_disposition(uint32_t id);

#endif
