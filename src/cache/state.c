/*
 * state: records a provider keeps beside a domain's entries (cache.h,
 * "provider state"), at key=<key>,cn=state,cn=<domain>,cn=idcache, written
 * in the caller's transaction so they commit with the entries they
 * describe.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cache/cache_int.h"

#define STATE_ATTR_VALUE "statevalue" /* canonical (lower case) */

/* A key is a DN value needing no escape and no case folding to compare. */
static bool key_valid(const char *key)
{
	size_t n = strlen(key);
	if (n == 0 || n > CACHE_STATE_KEY_MAX)
		return false;
	for (const char *p = key; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '.' ||
		      *p == '-' || *p == '_'))
			return false;
	return true;
}

static int dn_state(struct idc_buf *out, const char *domain, const char *key)
{
	idc_buf_reset(out);
	if (key)
		return idc_buf_printf(out, "statekey=%s,cn=state,cn=%s,cn=idcache", key, domain);
	return idc_buf_printf(out, "cn=state,cn=%s,cn=idcache", domain);
}

static int check(const char *domain, const char *key, struct idc_diag *d)
{
	if (!cache_domain_name_valid(domain, strlen(domain)))
		return idc_diag_set(d, -EINVAL, "invalid domain name '%s'", domain);
	if (key && !key_valid(key))
		return idc_diag_set(d, -EINVAL, "invalid state key '%.80s'", key);
	return 0;
}

/* cn=state below the domain (which cache_domain_ensure made). */
static int ensure_container(struct cache_txn *t, const char *domain, struct idc_diag *d)
{
	int rc = dn_state(&t->dn, domain, NULL);
	return rc ? rc : cache_ensure_entry(t, t->dn.data, "state", d);
}

int cache_state_put(struct cache_txn *t, const char *domain, const char *key, const char *value,
		    struct idc_diag *d)
{
	int rc = check(domain, key, d);
	if (!rc && strlen(value) > CACHE_STATE_VALUE_MAX)
		rc = idc_diag_set(d, -E2BIG, "state value of '%s' too long", key);
	idc_arena_reset(&t->arena);
	if (!rc)
		rc = ensure_container(t, domain, d);
	if (!rc)
		rc = dn_state(&t->dn, domain, key);
	struct store_pair p[] = {{{"objectClass", 11}, {"providerState", 13}},
				 {{"stateKey", 8}, {key, strlen(key)}},
				 {{"stateValue", 10}, {value, strlen(value)}}};
	struct store_entry e;
	/* an empty value is stored without the attribute (values are never empty) */
	if (!rc)
		rc = store_entry_from_pairs(&t->arena, (struct store_val){t->dn.data, t->dn.len}, p,
					    *value ? 3 : 2, &e, d);
	return rc ? rc : cache_put_entry(t, &e, NULL, NULL, d);
}

int cache_state_del(struct cache_txn *t, const char *domain, const char *key, struct idc_diag *d)
{
	int rc = check(domain, key, d);
	if (!rc)
		rc = dn_state(&t->dn, domain, key);
	if (!rc)
		rc = store_delete(t->st, (struct store_val){t->dn.data, t->dn.len}, false, d);
	if (!rc)
		t->dirty = true;
	return rc;
}

/* The key and value of a state entry, NUL-terminated in scratch; 0 or
 * -EINVAL for an entry that is not one (skipped). */
static int entry_kv(const struct store_entry *e, struct idc_buf *scratch, const char **key,
		    const char **value)
{
	const struct store_attr *k = store_entry_attr(e, "statekey", 8);
	const struct store_attr *v = store_entry_attr(e, STATE_ATTR_VALUE, 10);
	if (!k || k->nvals != 1 || (v && v->nvals != 1))
		return -EINVAL;
	idc_buf_reset(scratch);
	int rc = idc_buf_append(scratch, k->vals[0].ptr, k->vals[0].len);
	rc = rc ? rc : idc_buf_putc(scratch, '\0');
	size_t at = scratch->len;
	if (!rc && v)
		rc = idc_buf_append(scratch, v->vals[0].ptr, v->vals[0].len);
	rc = rc ? rc : idc_buf_putc(scratch, '\0');
	if (rc)
		return rc;
	*key = scratch->data;
	*value = scratch->data + at;
	return memchr(*value, '\0', scratch->len - at - 1) ? -EINVAL : 0;
}

int cache_state_get(struct cache_reader *r, const char *domain, const char *key, char **out)
{
	*out = NULL;
	int rc = check(domain, key, NULL);
	if (!rc)
		rc = dn_state(&r->dn, domain, key);
	struct store_entry e;
	if (!rc)
		rc = store_get(r->st, (struct store_val){r->dn.data, r->dn.len}, &e, NULL);
	const char *k, *v;
	if (!rc)
		rc = entry_kv(&e, &r->tmp, &k, &v) ? -ENOENT : 0;
	if (!rc && !(*out = strdup(v)))
		rc = -ENOMEM;
	return rc;
}

struct state_walk {
	struct idc_buf scratch;
	cache_state_cb cb;
	void *arg;
};

static int walk_cb(const struct store_entry *e, void *arg)
{
	struct state_walk *w = arg;
	const char *k, *v;
	int rc = entry_kv(e, &w->scratch, &k, &v);
	if (rc == -EINVAL)
		return 0;
	return rc ? rc : w->cb(k, v, w->arg);
}

int cache_state_enum(struct cache_reader *r, const char *domain, cache_state_cb cb, void *arg)
{
	int rc = check(domain, NULL, NULL);
	if (!rc)
		rc = dn_state(&r->dn, domain, NULL);
	if (rc)
		return rc;
	struct state_walk w = {IDC_BUF_INIT, cb, arg};
	struct store_search q = {{r->dn.data, r->dn.len}, STORE_SCOPE_ONE, NULL, 0};
	rc = store_search(r->st, &q, walk_cb, &w, NULL);
	idc_buf_free(&w.scratch);
	return rc == -ENOENT ? 0 : rc;
}
