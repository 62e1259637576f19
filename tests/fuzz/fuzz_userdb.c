/*
 * Fuzz target for src/userdb. Input layout: byte 0 picks a chunk size for
 * the Varlink reader, the rest is a byte stream fed in chunks; every
 * message it yields goes through the call decoder, and a decoded call's
 * names are built into a reply and an error, written out. Nothing may
 * crash, hang or read out of bounds; a message handed out is never longer
 * than UDB_MSG_MAX and never holds a NUL.
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "userdb/userdb.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void try_call(const char *msg, size_t len, struct idc_buf *out)
{
	struct udb_call c;
	struct udb_error e;
	int rc = udb_call_parse(msg, len, &c, &e);
	if (rc == 1) {
		udb_error_write(&e, out);
		return;
	}
	if (rc < 0)
		return;
	const char *members[] = {c.user, c.group, c.service};
	struct udb_user u = {
	    .name = c.user, .uid = c.id, .gecos = c.group, .member_of = members, .nmember_of = 3};
	struct udb_group g = {.name = c.group, .gid = c.id, .members = members, .nmembers = 3};
	struct udb_reply *r;
	if (udb_reply_user(&u, &r) == 0)
		udb_reply_write(r, c.more, out);
	udb_reply_free(r);
	if (udb_reply_group(&g, &r) == 0)
		udb_reply_write(r, c.oneway, out);
	udb_reply_free(r);
	if (udb_reply_membership(c.user, c.group, &r) == 0)
		udb_reply_write(r, false, out);
	udb_reply_free(r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	size_t chunk = data[0] ? data[0] : 4096;
	struct udb_reader r;
	struct idc_buf out = IDC_BUF_INIT;
	udb_reader_init(&r);
	for (size_t at = 1; at < size;) {
		size_t n = size - at < chunk ? size - at : chunk;
		if (udb_reader_feed(&r, data + at, n) < 0)
			break;
		at += n;
		const char *msg;
		size_t len;
		int got;
		while ((got = udb_reader_next(&r, &msg, &len)) == 1) {
			if (len >= UDB_MSG_MAX || memchr(msg, '\0', len))
				__builtin_trap();
			try_call(msg, len, &out);
			idc_buf_reset(&out);
		}
		if (got < 0)
			break;
	}
	udb_reader_free(&r);
	idc_buf_free(&out);
	return 0;
}
