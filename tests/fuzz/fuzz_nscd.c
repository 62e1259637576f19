/*
 * Fuzz target for src/nscd. The input is tried as a request (a decoded
 * one's key through both key parsers) and as each kind of reply, through
 * the reply decoders; a decoded found record is encoded again and must
 * decode to the same fields. Nothing may crash, hang or read out of
 * bounds.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "nscd/nscd.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint8_t again[1 << 16];

static void try_request(const uint8_t *data, size_t size)
{
	struct nscd_req req;
	uint32_t id;
	if (nscd_decode_request(data, size, &req) != 0)
		return;
	if (req.key_len > NSCD_KEY_MAX || (const uint8_t *)req.key + req.key_len > data + size)
		__builtin_trap();
	const char *name = nscd_key_name(&req);
	if (name && strlen(name) + 1 != req.key_len)
		__builtin_trap();
	if (nscd_key_id(&req, &id) == 0 && !name)
		__builtin_trap();
}

static void try_passwd(const uint8_t *data, size_t size)
{
	struct nscd_passwd_view v, w;
	int n = nscd_decode_passwd(data, size, &v);
	if (n < 0 || v.found != 1)
		return;
	int m = nscd_encode_passwd(again, sizeof(again), &v.pw);
	if (m != n || nscd_decode_passwd(again, (size_t)m, &w) != m || w.pw.uid != v.pw.uid ||
	    strcmp(w.pw.shell, v.pw.shell) != 0)
		__builtin_trap();
}

static void try_group(const uint8_t *data, size_t size)
{
	struct nscd_group_view v;
	int n = nscd_decode_group(data, size, &v);
	if (n < 0 || v.found != 1)
		return;
	const char **mem = calloc(v.nmem + 1u, sizeof(*mem));
	if (!mem)
		return;
	for (uint32_t i = 0; i < v.nmem; i++)
		mem[i] = nscd_group_member(&v, i);
	struct nscd_group g = {v.name, v.passwd, v.gid, mem, v.nmem};
	int m =
	    nscd_group_size(&g) <= sizeof(again) ? nscd_encode_group(again, sizeof(again), &g) : n;
	free(mem);
	if (m != n)
		__builtin_trap();
}

static void try_initgroups(const uint8_t *data, size_t size)
{
	struct nscd_initgroups_view v;
	int n = nscd_decode_initgroups(data, size, &v);
	if (n < 0)
		return;
	uint32_t sum = 0;
	for (uint32_t i = 0; i < v.n; i++)
		sum += nscd_gid(&v, i);
	(void)sum;
	if ((size_t)n > size)
		__builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	try_request(data, size);
	try_passwd(data, size);
	try_group(data, size);
	try_initgroups(data, size);
	return 0;
}
