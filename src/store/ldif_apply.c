/*
 * Applying LDIF records to a transaction: the one import loop that
 * `idcache db import`, `idcache db modify`, idcache-perf and the store
 * benchmark all run, so a benchmark times the code an admin runs.
 */
#include <errno.h>
#include <string.h>

#include "store_int.h"

void store_diag_about(struct idc_diag *d, int rc, const char *op, struct store_val dn)
{
	bool named = dn.len && memmem(d->msg, strnlen(d->msg, sizeof(d->msg)), dn.ptr, dn.len);
	idc_diag_complete(d, rc);
	if (named && op)
		idc_diag_prefix(d, "%s: ", op);
	else if (!named)
		idc_diag_prefix(d, "%s%s'%.*s': ", op ? op : "", op ? " " : "", (int)dn.len,
				dn.ptr);
}

static const char *change_name(enum ldif_change c)
{
	static const char *const names[] = {"add", "delete", "modify", "modrdn"};
	return (size_t)c < IDC_ARRAY_SIZE(names) ? names[c] : "change";
}

static int apply_change(struct store_txn *t, const struct ldif_record *rec,
			struct idc_arena *scratch, struct idc_diag *d)
{
	struct store_entry e;
	int rc;
	switch (rec->change) {
	case LDIF_ADD:
		idc_arena_reset(scratch);
		rc = store_entry_from_pairs_canon(scratch, rec->dn, rec->pairs, rec->canon,
						  rec->npairs, &e, d);
		return rc ? rc : store_add(t, &e, NULL, d);
	case LDIF_DELETE:
		return store_delete(t, rec->dn, false, d);
	case LDIF_MODIFY:
		return store_modify(t, rec->dn, rec->mods, rec->nmods, NULL, d);
	case LDIF_MODRDN:
		return store_modrdn(t, rec->dn, rec->newrdn, rec->deleteoldrdn,
				    rec->has_newsuperior ? &rec->newsuperior : NULL, d);
	}
	return idc_diag_set(d, IDC_ESYNTAX, "unknown change type");
}

void ldif_diag_record(struct idc_diag *d, int rc, const struct ldif_record *rec, const char *name)
{
	store_diag_about(d, rc, change_name(rec->change), rec->dn);
	idc_diag_prefix(d, "%s:%lu: ", name, rec->line);
}

int ldif_apply(struct store_txn *t, const struct ldif_record *rec, const char *name,
	       struct idc_arena *scratch, struct idc_diag *d)
{
	if (d)
		d->msg[0] = '\0';
	struct idc_diag local = {{0}};
	struct idc_diag *dd = d ? d : &local;
	int rc = apply_change(t, rec, scratch, dd);
	if (rc != 0)
		ldif_diag_record(dd, rc, rec, name);
	return rc;
}

int ldif_apply_all(struct store_txn *t, struct ldif_reader *r, const char *name,
		   const struct ldif_progress *p, uint64_t *records, struct idc_diag *d)
{
	struct idc_arena scratch = IDC_ARENA_INIT;
	struct ldif_record rec;
	int rc;
	*records = 0;
	while ((rc = ldif_next(r, &rec, d)) == 1) {
		if ((rc = ldif_apply(t, &rec, name, &scratch, d)) != 0)
			break;
		++*records;
		if (p && p->tick)
			p->tick(p->arg, *records, ldif_offset(r));
	}
	idc_arena_free(&scratch);
	return rc;
}

/* ---- copies of records ----
 * A record's bytes go into the arena as one block, its strings pointing
 * into it: one allocation and one copy per record (an import's reader
 * copies every record). */

/* v, which points into [from, ..), to the same place in the copy at to. */
static void rebase(struct store_val *v, const char *from, char *to)
{
	if (v->ptr)
		v->ptr = to + (v->ptr - from);
}

/* One memcpy of the record's span instead of two per line: copying each
 * string was an eighth of the reader's instructions. The reader parses in
 * place, so every string of the record lies in its span (store.h). */
int ldif_record_copy(struct idc_arena *a, const struct ldif_reader *rd, struct ldif_record *r)
{
	const char *p;
	size_t n;
	ldif_record_span(rd, &p, &n);
	size_t nvals = 0;
	for (size_t i = 0; i < r->nmods; i++)
		nvals += r->mods[i].nvals;
	struct store_pair *pairs = NULL;
	struct store_mod *mods = NULL;
	struct store_val *vals = NULL, *canon = NULL;
	char *at = idc_arena_alloc(a, n + 1);
	if (!at || (r->npairs && !(pairs = idc_arena_alloc(a, r->npairs * sizeof(*pairs)))) ||
	    (r->canon && !(canon = idc_arena_alloc(a, r->npairs * sizeof(*canon)))) ||
	    (r->nmods && !(mods = idc_arena_alloc(a, r->nmods * sizeof(*mods)))) ||
	    (nvals && !(vals = idc_arena_alloc(a, nvals * sizeof(*vals)))))
		return -ENOMEM;
	memcpy(at, p, n + 1);
	for (size_t i = 0; i < r->npairs; i++) {
		pairs[i] = r->pairs[i];
		rebase(&pairs[i].name, p, at);
		rebase(&pairs[i].value, p, at);
	}
	for (size_t i = 0; i < r->nmods; i++) {
		mods[i] = r->mods[i];
		rebase(&mods[i].attr, p, at);
		if (mods[i].nvals)
			memcpy(vals, mods[i].vals, mods[i].nvals * sizeof(*vals));
		mods[i].vals = mods[i].nvals ? vals : NULL;
		for (size_t k = 0; k < mods[i].nvals; k++)
			rebase(&vals[k], p, at);
		vals += mods[i].nvals;
	}
	/* interned names stay where they are: copied as they are */
	if (canon)
		memcpy(canon, r->canon, r->npairs * sizeof(*canon));
	r->pairs = pairs;
	r->canon = canon;
	r->mods = mods;
	rebase(&r->dn, p, at);
	rebase(&r->newrdn, p, at);
	rebase(&r->newsuperior, p, at);
	return 0;
}

int ldif_import_fn(struct store_txn *t, void *arg, struct idc_diag *d)
{
	struct ldif_import *im = arg;
	struct ldif_reader *r = NULL;
	rewind(im->f);
	im->records = 0;
	int rc = ldif_open(im->f, im->name, &r);
	if (rc != 0)
		return idc_diag_set(d, rc, "%s: %s", im->name, idc_strerror(rc));
	rc = ldif_import_run(t, r, im, d);
	ldif_close(r);
	return rc;
}
