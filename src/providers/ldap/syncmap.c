/*
 * syncmap: the directory entries content synchronization delivered, by
 * entryUUID and by normalized DN (lp_smap), and their records in the
 * cache's provider state ("e.<uuid>" -> "<user>\n<group>\n<ndn>"), which
 * the feed writes in the transaction of the change they describe.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "providers/ldap/lprov_int.h"

static size_t h_uuid(const struct lp_smap *m, const unsigned char *uuid)
{
	return (size_t)(idc_hash64(uuid, LP_UUID_LEN, m->seed) & (m->nb - 1));
}

static size_t h_ndn(const struct lp_smap *m, const char *ndn)
{
	return (size_t)(idc_hash64(ndn, strlen(ndn), m->seed ^ 1) & (m->nb - 1));
}

struct lp_sent *lp_smap_uuid(const struct lp_smap *m, const unsigned char *uuid)
{
	if (!m->nb)
		return NULL;
	for (struct lp_sent *e = m->by_uuid[h_uuid(m, uuid)]; e; e = e->next_uuid)
		if (!memcmp(e->uuid, uuid, LP_UUID_LEN))
			return e;
	return NULL;
}

struct lp_sent *lp_smap_ndn(const struct lp_smap *m, const char *ndn)
{
	if (!m->nb)
		return NULL;
	for (struct lp_sent *e = m->by_ndn[h_ndn(m, ndn)]; e; e = e->next_ndn)
		if (!strcmp(e->ndn, ndn))
			return e;
	return NULL;
}

static void link_ndn(struct lp_smap *m, struct lp_sent *e)
{
	size_t b = h_ndn(m, e->ndn);
	e->next_ndn = m->by_ndn[b];
	m->by_ndn[b] = e;
}

static void unlink_ndn(struct lp_smap *m, struct lp_sent *e)
{
	for (struct lp_sent **p = &m->by_ndn[h_ndn(m, e->ndn)]; *p; p = &(*p)->next_ndn)
		if (*p == e) {
			*p = e->next_ndn;
			return;
		}
}

/* Twice the buckets, every entry relinked. */
static int grow(struct lp_smap *m)
{
	size_t nb = m->nb ? m->nb * 2 : 256;
	struct lp_sent **u = calloc(nb, sizeof(*u)), **d = calloc(nb, sizeof(*d));
	if (!u || !d) {
		free(u);
		free(d);
		return -ENOMEM;
	}
	struct lp_sent **old = m->by_uuid;
	size_t onb = m->nb;
	free(m->by_ndn);
	m->by_uuid = u;
	m->by_ndn = d;
	m->nb = nb;
	for (size_t i = 0; i < onb; i++)
		for (struct lp_sent *e = old[i], *next; e; e = next) {
			next = e->next_uuid;
			size_t b = h_uuid(m, e->uuid);
			e->next_uuid = u[b];
			u[b] = e;
			link_ndn(m, e);
		}
	free(old);
	return 0;
}

static void sent_free(struct lp_sent *e)
{
	free(e->uname);
	free(e->gname);
	free(e->ndn);
	free(e);
}

static int dup_or_null(char **dst, const char *s)
{
	*dst = s ? strdup(s) : NULL;
	return s && !*dst ? -ENOMEM : 0;
}

int lp_smap_set(struct lp_smap *m, const unsigned char *uuid, const char *uname, const char *gname,
		const char *ndn, uint32_t seen)
{
	if (m->n >= m->nb && grow(m))
		return -ENOMEM;
	struct lp_sent *n = calloc(1, sizeof(*n));
	if (!n || dup_or_null(&n->uname, uname) || dup_or_null(&n->gname, gname) ||
	    dup_or_null(&n->ndn, ndn)) {
		if (n)
			sent_free(n);
		return -ENOMEM;
	}
	memcpy(n->uuid, uuid, LP_UUID_LEN);
	n->seen = seen;
	lp_smap_del(m, uuid);
	size_t b = h_uuid(m, uuid);
	n->next_uuid = m->by_uuid[b];
	m->by_uuid[b] = n;
	link_ndn(m, n);
	m->n++;
	return 0;
}

void lp_smap_del(struct lp_smap *m, const unsigned char *uuid)
{
	if (!m->nb)
		return;
	for (struct lp_sent **p = &m->by_uuid[h_uuid(m, uuid)]; *p; p = &(*p)->next_uuid) {
		struct lp_sent *e = *p;
		if (memcmp(e->uuid, uuid, LP_UUID_LEN))
			continue;
		*p = e->next_uuid;
		unlink_ndn(m, e);
		sent_free(e);
		m->n--;
		return;
	}
}

void lp_smap_free(struct lp_smap *m)
{
	for (size_t i = 0; i < m->nb; i++)
		for (struct lp_sent *e = m->by_uuid[i], *next; e; e = next) {
			next = e->next_uuid;
			sent_free(e);
		}
	free(m->by_uuid);
	free(m->by_ndn);
	memset(m, 0, sizeof(*m));
}

/* ==== provider-state records ================================================= */

static const char hexd[] = "0123456789abcdef";

int lp_smap_key(const unsigned char *uuid, char out[40])
{
	out[0] = 'e';
	out[1] = '.';
	for (size_t i = 0; i < LP_UUID_LEN; i++) {
		out[2 + 2 * i] = hexd[uuid[i] >> 4];
		out[3 + 2 * i] = hexd[uuid[i] & 15];
	}
	out[2 + 2 * LP_UUID_LEN] = '\0';
	return 0;
}

int lp_smap_value(const struct lp_sent *e, struct idc_buf *out)
{
	idc_buf_reset(out);
	return idc_buf_printf(out, "%s\n%s\n%s", e->uname ? e->uname : "", e->gname ? e->gname : "",
			      e->ndn);
}

int lp_hex_append(struct idc_buf *b, const unsigned char *p, size_t n)
{
	int rc = idc_buf_reserve(b, 2 * n);
	for (size_t i = 0; !rc && i < n; i++) {
		char two[2] = {hexd[p[i] >> 4], hexd[p[i] & 15]};
		rc = idc_buf_append(b, two, 2);
	}
	return rc;
}

int lp_hex_val(char c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* "<uname>\n<gname>\n<ndn>": three fields, names valid or empty, a DN. */
static int split(char *v, char **f)
{
	for (int i = 0; i < 2; i++) {
		f[i] = v;
		char *nl = strchr(v, '\n');
		if (!nl)
			return -EINVAL;
		*nl = '\0';
		v = nl + 1;
	}
	f[2] = v;
	for (int i = 0; i < 2; i++)
		if (*f[i] && !cache_name_valid(f[i], strlen(f[i])))
			return -EINVAL;
	return *f[2] && (*f[0] || *f[1]) ? 0 : -EINVAL;
}

int lp_smap_load(struct lp_smap *m, const char *key, const char *value)
{
	unsigned char uuid[LP_UUID_LEN];
	if (strlen(key) != 2 + 2 * LP_UUID_LEN || strncmp(key, "e.", 2))
		return -EINVAL;
	for (size_t i = 0; i < LP_UUID_LEN; i++) {
		int hi = lp_hex_val(key[2 + 2 * i]), lo = lp_hex_val(key[3 + 2 * i]);
		if (hi < 0 || lo < 0)
			return -EINVAL;
		uuid[i] = (unsigned char)(hi << 4 | lo);
	}
	char *v = strdup(value), *f[3];
	if (!v)
		return -ENOMEM;
	int rc = split(v, f);
	if (!rc)
		rc = lp_smap_set(m, uuid, *f[0] ? f[0] : NULL, *f[1] ? f[1] : NULL, f[2], 0);
	free(v);
	return rc;
}
