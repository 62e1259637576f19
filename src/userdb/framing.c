/*
 * framing: Varlink messages on a stream socket — JSON texts each ended by
 * one NUL byte. A request longer than UDB_MSG_MAX is an error, not a
 * wait: without its NUL the stream cannot be resynchronised.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "userdb/userdb.h"

void udb_reader_init(struct udb_reader *r)
{
	memset(r, 0, sizeof(*r));
}

/* Move what is not handed out yet to the front of the buffer. */
static void compact(struct udb_reader *r)
{
	if (r->off == 0)
		return;
	memmove(r->b.data, r->b.data + r->off, r->b.len - r->off);
	r->b.len -= r->off;
	r->off = 0;
}

int udb_reader_feed(struct udb_reader *r, const void *p, size_t n)
{
	compact(r);
	return idc_buf_append(&r->b, p, n);
}

int udb_reader_next(struct udb_reader *r, const char **msg, size_t *len)
{
	size_t avail = r->b.len - r->off;
	size_t lim = avail < UDB_MSG_MAX ? avail : UDB_MSG_MAX;
	const char *start = r->b.data + r->off;
	const char *nul = lim > r->scan ? memchr(start + r->scan, '\0', lim - r->scan) : NULL;
	if (!nul) {
		r->scan = lim;
		return avail >= UDB_MSG_MAX ? -EMSGSIZE : 0;
	}
	*msg = start;
	*len = (size_t)(nul - start);
	r->off += *len + 1;
	r->scan = 0;
	return 1;
}

size_t udb_reader_buffered(const struct udb_reader *r)
{
	return r->b.len - r->off;
}

void udb_reader_free(struct udb_reader *r)
{
	idc_buf_free(&r->b);
	udb_reader_init(r);
}
