/*
 * Fuzz target for src/proto. Input layout: byte 0 picks a chunk size for the
 * server-side frame reader, the rest is a byte stream. The stream goes
 * through the reader in chunks and every frame it yields through the
 * request decoder (a decoded request must re-encode to the same bytes);
 * every frame is also tried as a reply of each kind, through the reply
 * decoders (MCMAP's kind list and SSHKEYS' key list included) and, on success, the NSS packers with
 * a buffer size taken from the input. Nothing may crash, hang or read out of bounds.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proto/proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char packbuf[1 << 16];

static void try_request(const struct proto_frame *f)
{
	struct proto_req req;
	if (proto_decode_request(&f->hdr, f->payload, f->len, &req) < 0)
		return;
	uint8_t out[PROTO_MAX_REQUEST];
	int n = proto_encode_request(out, sizeof(out), &req);
	/* A request the decoder accepted is one the encoder can write back. */
	if (n != (int)f->hdr.length || memcmp(out + PROTO_HDR_SIZE, f->payload, f->len) != 0)
		__builtin_trap();
}

static void try_pack_passwd(const struct proto_passwd *pw, size_t buflen)
{
	struct passwd out;
	int rc = proto_pack_passwd(pw, &out, packbuf, buflen);
	if ((rc == 0) != (proto_passwd_size(pw) <= buflen))
		__builtin_trap();
	if (rc == 0 && strcmp(out.pw_name, pw->name.p) != 0)
		__builtin_trap();
}

static void try_pack_group(const struct proto_group *gr, size_t buflen)
{
	struct group out;
	int rc = proto_pack_group(gr, &out, packbuf, buflen);
	if ((rc == 0) != (proto_group_size(gr, packbuf) <= buflen))
		__builtin_trap();
	if (rc == 0) {
		uint32_t n = 0;
		while (out.gr_mem[n])
			n++;
		if (n != gr->mem.count)
			__builtin_trap();
	}
}

static void try_batch(uint32_t cmd, const uint8_t *p, size_t n, size_t buflen)
{
	struct proto_batch b;
	if (proto_decode_batch(cmd, p, n, &b) < 0)
		return;
	size_t off = 0;
	uint32_t seen = 0;
	struct proto_passwd pw;
	struct proto_group gr;
	while (cmd == PROTO_CMD_GETPWENT ? proto_batch_next_passwd(&b, &off, &pw)
					 : proto_batch_next_group(&b, &off, &gr)) {
		if (cmd == PROTO_CMD_GETPWENT)
			try_pack_passwd(&pw, buflen);
		else
			try_pack_group(&gr, buflen);
		seen++;
	}
	if (seen != b.count)
		__builtin_trap();
}

static void try_replies(const uint8_t *p, size_t n, size_t buflen)
{
	struct proto_passwd pw;
	struct proto_group gr;
	struct proto_gids g;
	struct proto_str s;
	uint32_t v;
	if (proto_decode_passwd(p, n, &pw) == 0)
		try_pack_passwd(&pw, buflen);
	if (proto_decode_group(p, n, &gr) == 0)
		try_pack_group(&gr, buflen);
	if (proto_decode_gids(p, n, &g) == 0 && g.count)
		(void)proto_gids_get(&g, g.count - 1);
	(void)proto_decode_text(p, n, &s);
	(void)proto_decode_u32(p, n, &v);
	uint32_t kinds[PROTO_FDS_MAX];
	size_t nk = 0;
	if (proto_decode_mcmap(p, n, kinds, PROTO_FDS_MAX, &nk) == 0 &&
	    (nk == 0 || nk > PROTO_FDS_MAX || (size_t)n != 4 + 4 * nk))
		__builtin_trap(); /* exactly the listed kinds, within the cap */
	struct proto_strlist keys;
	if (proto_decode_sshkeys(p, n, &keys) == 0) {
		size_t off = 0;
		uint32_t seen = 0;
		struct proto_str k;
		while (proto_strlist_next(&keys, &off, &k) == 1 && k.len > 0)
			seen++;
		if (seen != keys.count) /* every key listed, none empty */
			__builtin_trap();
	}
	try_batch(PROTO_CMD_GETPWENT, p, n, buflen);
	try_batch(PROTO_CMD_GETGRENT, p, n, buflen);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	size_t chunk = (size_t)data[0] % 64 + 1;
	size_t buflen = (size_t)data[0] * 97 % sizeof(packbuf);
	data++;
	size--;

	struct proto_reader r;
	proto_reader_init(&r, PROTO_MAX_REPLY);
	for (size_t off = 0; off < size; off += chunk) {
		size_t k = size - off < chunk ? size - off : chunk;
		if (proto_reader_feed(&r, data + off, k) < 0)
			break;
		struct proto_frame f;
		while (proto_reader_next(&r, &f) == 1) {
			try_request(&f);
			/* An exact-size copy so a read past the payload is caught. */
			uint8_t *copy = malloc(f.len ? f.len : 1);
			if (!copy)
				break;
			memcpy(copy, f.payload, f.len);
			try_replies(copy, f.len, buflen);
			free(copy);
		}
	}
	proto_reader_free(&r);
	/* The raw bytes as a payload too, without any framing. */
	try_replies(data, size, buflen);
	return 0;
}
