/*
 * Fuzz target for what a server sends a content synchronization feed:
 * the Sync State and Sync Done controls, Sync Info messages (the first
 * byte picks the parser, the rest is the value) and the entryUUID records
 * read back from the cache. Beyond "does not crash": a cookie lies inside
 * the input, a syncIdSet holds no more UUIDs than the input has room for,
 * and a Sync Request built from the input's bytes as a cookie is one
 * well-formed element of the length it says.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "providers/ldap/lprov_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_msg(const struct lp_sync_msg *m, const uint8_t *v, size_t n)
{
	if (m->has_cookie && (m->cookie < v || m->cookie + m->cookie_len > v + n))
		abort();
	if (m->nuuids * (2 + LP_UUID_LEN) > n)
		abort();
}

static void records(const uint8_t *v, size_t n)
{
	char *s = malloc(n + 1);
	if (!s)
		return;
	memcpy(s, v, n);
	s[n] = '\0';
	char *value = strchr(s, '=');
	if (value)
		*value++ = '\0';
	struct lp_smap m = {0};
	if (lp_smap_load(&m, s, value ? value : "") == 0 && m.n != 1)
		abort();
	lp_smap_free(&m);
	free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	const uint8_t *v = data + 1;
	size_t n = size - 1;
	struct lp_sync_msg m;
	int rc;
	switch (data[0] % 5) {
	case 0:
		rc = lp_sync_parse_state(v, n, &m);
		break;
	case 1:
		rc = lp_sync_parse_done(v, n, &m);
		break;
	case 2:
		rc = lp_sync_parse_info(v, n, &m);
		break;
	case 3:
		records(v, n);
		return 0;
	default: {
		struct idc_buf b = IDC_BUF_INIT;
		if (lp_sync_request(LP_SYNC_REFRESH_AND_PERSIST, v, n, &b) == 0) {
			/* SEQUENCE, its length, and exactly that much after it */
			size_t hl = (unsigned char)b.data[1] < 0x80 ? 2 : 4;
			size_t len = hl == 2 ? (unsigned char)b.data[1]
					     : (size_t)(unsigned char)b.data[2] << 8 |
						   (unsigned char)b.data[3];
			if ((unsigned char)b.data[0] != 0x30 || hl + len != b.len)
				abort();
		} else if (n <= LP_COOKIE_MAX) {
			abort();
		}
		idc_buf_free(&b);
		return 0;
	}
	}
	if (rc == 0)
		check_msg(&m, v, n);
	lp_sync_msg_free(&m);
	return 0;
}
