/*
 * Applying LDIF records to a transaction: the one import loop that
 * `idcache db import`, `idcache db modify`, idcache-perf and the store
 * benchmark all run, so a benchmark times the code an admin runs.
 */
#include <string.h>

#include "store.h"

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
		rc = store_entry_from_pairs(scratch, rec->dn, rec->pairs, rec->npairs, &e, d);
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

int ldif_apply(struct store_txn *t, const struct ldif_record *rec, const char *name,
	       struct idc_arena *scratch, struct idc_diag *d)
{
	if (d)
		d->msg[0] = '\0';
	struct idc_diag local = {{0}};
	struct idc_diag *dd = d ? d : &local;
	int rc = apply_change(t, rec, scratch, dd);
	if (rc != 0) {
		store_diag_about(dd, rc, change_name(rec->change), rec->dn);
		idc_diag_prefix(dd, "%s:%lu: ", name, rec->line);
	}
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

int ldif_import_fn(struct store_txn *t, void *arg, struct idc_diag *d)
{
	struct ldif_import *im = arg;
	struct ldif_reader *r = NULL;
	rewind(im->f);
	im->records = 0;
	int rc = ldif_open(im->f, im->name, &r);
	if (rc != 0)
		return idc_diag_set(d, rc, "%s: %s", im->name, idc_strerror(rc));
	rc = ldif_apply_all(t, r, im->name, im->progress, &im->records, d);
	ldif_close(r);
	return rc;
}
