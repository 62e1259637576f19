/* cache sshkeys: a user's SSH public keys, in a record of their own beside
 * the user (cache.h, "SSH public keys"). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "cache_int.h"

#define KEYS_ATTR "sshPublicKey"

/* Whether domain has a keys container, asked of the store once per
 * transaction (and told by cache_put_user_keys when it makes one). */
static int has_container(struct cache_txn *t, const char *domain, bool *yes)
{
	if (strcmp(t->keys_domain, domain) == 0) {
		*yes = t->keys_container;
		return 0;
	}
	struct store_entry e;
	int rc = cache_dn_container(&t->tmp, KIND_KEYS, domain);
	if (!rc)
		rc = store_get(t->st, (struct store_val){t->tmp.data, t->tmp.len}, &e, NULL);
	if (rc && rc != -ENOENT)
		return rc;
	snprintf(t->keys_domain, sizeof(t->keys_domain), "%s", domain);
	*yes = t->keys_container = rc == 0;
	return 0;
}

/* A store_delete of an absent entry would still flush the transaction's
 * pending index writes (one flush per user instead of one per
 * transaction): look first, and not at all in a domain without keys. */
int cache_keys_drop(struct cache_txn *t, const char *domain, const char *name, bool *changed,
		    struct idc_diag *d)
{
	bool any = false;
	struct store_entry e;
	if (changed)
		*changed = false;
	int rc = has_container(t, domain, &any);
	if (rc || !any)
		return rc;
	rc = cache_dn_entry(&t->tmp, KIND_KEYS, domain, name);
	if (!rc)
		rc = store_get(t->st, (struct store_val){t->tmp.data, t->tmp.len}, &e, NULL);
	if (!rc)
		rc = store_delete(t->st, (struct store_val){t->tmp.data, t->tmp.len}, false, d);
	if (changed)
		*changed = rc == 0;
	if (rc == 0)
		t->dirty = true;
	return rc == -ENOENT ? 0 : rc;
}

/* Whether keys[i] is a key line as stored (checked and trimmed) and not
 * one of keys[0..i) (the values of an attribute are a set). */
static int key_ok(const char *const *keys, size_t i, struct idc_diag *d)
{
	struct idc_ssh_key k;
	size_t n = strlen(keys[i]);
	if (idc_ssh_key_check(keys[i], n, &k) < 0 || k.start != 0 || k.len != n)
		return idc_diag_set(d, -EINVAL, "SSH key %zu: %s", i + 1,
				    k.why ? k.why : "blanks around the line");
	for (size_t j = 0; j < i; j++)
		if (strcmp(keys[j], keys[i]) == 0)
			return 0;
	return 1;
}

/* The keys entry of name built from keys (each once) in t's arena. */
static int keys_entry(struct cache_txn *t, const char *domain, const char *name,
		      const char *const *keys, size_t nkeys, struct store_entry *e,
		      struct idc_diag *d)
{
	struct store_pair *p = idc_arena_alloc(&t->arena, (nkeys + 2) * sizeof(*p));
	if (!p)
		return -ENOMEM;
	p[0] = (struct store_pair){{"objectClass", 11}, {"sshKeys", 7}};
	p[1] = (struct store_pair){{CACHE_ATTR_KEYS_OF, strlen(CACHE_ATTR_KEYS_OF)},
				   {name, strlen(name)}};
	size_t n = 2;
	for (size_t i = 0; i < nkeys; i++) {
		int ok = key_ok(keys, i, d);
		if (ok < 0)
			return ok;
		if (ok)
			p[n++] = (struct store_pair){{KEYS_ATTR, sizeof(KEYS_ATTR) - 1},
						     {keys[i], strlen(keys[i])}};
	}
	int rc = cache_dn_entry(&t->dn, KIND_KEYS, domain, name);
	return rc ? rc
		  : store_entry_from_pairs(&t->arena, (struct store_val){t->dn.data, t->dn.len}, p,
					   n, e, d);
}

int cache_put_user_keys(struct cache_txn *t, const char *domain, const char *name,
			const char *const *keys, size_t nkeys, bool *changed, struct idc_diag *d)
{
	if (changed)
		*changed = false;
	if (!cache_domain_name_valid(domain, strlen(domain)) || !name ||
	    !cache_name_valid(name, strlen(name)))
		return idc_diag_set(d, -EINVAL, "invalid domain or user name");
	if (nkeys > CACHE_SSH_KEYS_MAX)
		return idc_diag_set(d, -EINVAL, "more than %u SSH keys", CACHE_SSH_KEYS_MAX);
	if (nkeys == 0)
		return cache_keys_drop(t, domain, name, changed, d);
	idc_arena_reset(&t->arena);
	bool have = false;
	int rc = has_container(t, domain, &have);
	if (!rc && !have)
		rc = cache_dn_container(&t->dn, KIND_KEYS, domain);
	if (!rc && !have)
		rc = cache_ensure_entry(t, t->dn.data, "sshkeys", d);
	if (!rc)
		t->keys_container = true; /* has_container named the domain */
	struct store_entry e;
	if (!rc)
		rc = keys_entry(t, domain, name, keys, nkeys, &e, d);
	return rc ? rc : cache_put_entry(t, &e, changed, NULL, d);
}

int cache_user_keys(struct cache_reader *r, const char *domain, const char *name,
		    const char *const **keys, size_t *nkeys)
{
	*keys = NULL;
	*nkeys = 0;
	if (!cache_domain_name_valid(domain, strlen(domain)) ||
	    !cache_name_valid(name, strlen(name)))
		return 0;
	struct store_entry e;
	int rc = cache_dn_entry(&r->dn, KIND_KEYS, domain, name);
	if (!rc)
		rc = store_get(r->st, (struct store_val){r->dn.data, r->dn.len}, &e, NULL);
	if (rc)
		return rc == -ENOENT ? 0 : rc;
	const struct store_attr *a = store_entry_attr(&e, "sshpublickey", 12);
	if (!a || a->nvals == 0)
		return 0;
	const char **v = idc_arena_alloc(&r->arena, a->nvals * sizeof(*v));
	if (!v)
		return -ENOMEM;
	for (size_t i = 0; i < a->nvals; i++)
		if (!(v[i] = idc_arena_strndup(&r->arena, a->vals[i].ptr, a->vals[i].len)))
			return -ENOMEM;
	*keys = v;
	*nkeys = a->nvals;
	return 0;
}
