/*
 * Fuzz target for the LDIF reader and writer: read every record of the
 * input until the end or an error; each add record is written back with
 * ldif_write_entry and must read back as the same dn and pairs. A mismatch
 * aborts, so the fuzzer reports it.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/store.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(bool ok)
{
	if (!ok)
		abort();
}

static bool same(struct store_val a, struct store_val b)
{
	return a.len == b.len && (a.len == 0 || memcmp(a.ptr, b.ptr, a.len) == 0);
}

/* Read every byte a record hands out, so out-of-bounds pointers show up
 * under ASan even where nothing compares them. */
static unsigned touch(struct store_val v)
{
	unsigned sum = 0;
	for (size_t i = 0; i < v.len; i++)
		sum += (unsigned char)v.ptr[i];
	return sum;
}

static unsigned touch_record(const struct ldif_record *rec)
{
	unsigned sum = touch(rec->dn) + touch(rec->newrdn) + touch(rec->newsuperior);
	for (size_t i = 0; i < rec->npairs; i++)
		sum += touch(rec->pairs[i].name) + touch(rec->pairs[i].value);
	for (size_t i = 0; i < rec->nmods; i++) {
		sum += touch(rec->mods[i].attr);
		for (size_t j = 0; j < rec->mods[i].nvals; j++)
			sum += touch(rec->mods[i].vals[j]);
	}
	return sum;
}

/* Parse text, which must hold exactly one add record equal to want. */
static void expect_same(const struct idc_buf *text, const struct ldif_record *want, bool with_pairs)
{
	FILE *f = fmemopen(text->data, text->len, "r");
	struct ldif_reader *r = NULL;
	check(f != NULL);
	check(ldif_open(f, "written", &r) == 0);
	struct ldif_record got;
	struct idc_diag d;
	check(ldif_next(r, &got, &d) == 1);
	check(got.change == LDIF_ADD && same(got.dn, want->dn));
	check(got.npairs == (with_pairs ? want->npairs : 0));
	for (size_t i = 0; i < got.npairs; i++)
		check(same(got.pairs[i].name, want->pairs[i].name) &&
		      same(got.pairs[i].value, want->pairs[i].value));
	check(ldif_next(r, &got, &d) == 0);
	ldif_close(r);
	fclose(f);
}

/* Write the record as an entry with one attribute per pair (entry order is
 * kept by the writer, so the pairs come back in order), once whole and once
 * with "1.1" (dn only), and read both back. */
static void round_trip(const struct ldif_record *rec)
{
	struct store_attr *attrs = calloc(rec->npairs + 1, sizeof(*attrs));
	check(attrs != NULL);
	for (size_t i = 0; i < rec->npairs; i++) {
		attrs[i].name = rec->pairs[i].name;
		attrs[i].norm = rec->pairs[i].name;
		attrs[i].vals = (struct store_val *)&rec->pairs[i].value;
		attrs[i].nvals = 1;
	}
	struct store_entry e = {.dn = rec->dn, .attrs = attrs, .nattrs = rec->npairs};
	struct idc_buf out = IDC_BUF_INIT;
	check(ldif_write_entry(&out, &e, NULL, 0) == 0);
	expect_same(&out, rec, true);
	static const char *const dn_only[] = {"1.1"};
	idc_buf_reset(&out);
	check(ldif_write_entry(&out, &e, dn_only, 1) == 0);
	expect_same(&out, rec, false);
	idc_buf_free(&out);
	free(attrs);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size == 0)
		return 0;
	FILE *f = fmemopen((void *)data, size, "r");
	if (!f)
		return 0;
	struct ldif_reader *r;
	if (ldif_open(f, "fuzz", &r) != 0) {
		fclose(f);
		return 0;
	}
	struct ldif_record rec;
	struct idc_diag d;
	unsigned sum = 0;
	int rc;
	while ((rc = ldif_next(r, &rec, &d)) == 1) {
		sum += touch_record(&rec);
		if (rec.change == LDIF_ADD)
			round_trip(&rec);
	}
	check(rc <= 0 && ldif_offset(r) <= size);
	/* Keeps the reads of touch_record from being optimized away. */
	__asm__ volatile("" : : "r"(sum));
	ldif_close(r);
	fclose(f);
	return 0;
}
