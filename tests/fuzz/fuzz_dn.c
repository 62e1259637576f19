/*
 * Fuzz target for DN parsing and value normalization. Beyond "does not
 * crash": a normalized DN must normalize to itself (one canonical form),
 * its RDN offsets, reversed keys and depth below each ancestor
 * (store_ndn_below) must agree with its text, and a DN that
 * normalizes must also walk (foreach_ava) without error.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/store.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what, const char *detail)
{
	fprintf(stderr, "fuzz_dn: %s: %s\n", what, detail);
	abort();
}

static int count_ava(struct store_val type, struct store_val value, size_t rdn, void *arg)
{
	size_t *last = arg;
	(void)value;
	if (type.len == 0 || rdn < *last)
		fail("foreach_ava", "empty type or RDN index going back");
	*last = rdn;
	return 0;
}

/* Each reversed key is the RDNs from the end, so the one with skip k+1 is
 * a prefix of the one with skip k. */
static void check_rkeys(const struct store_ndn *n)
{
	struct idc_buf prev = IDC_BUF_INIT, key = IDC_BUF_INIT;
	for (size_t skip = n->nrdn + 1; skip-- > 0;) {
		if (store_ndn_rkey(n, skip, &key) != 0)
			fail("rkey", n->text.data);
		if (prev.len > key.len || (prev.len && memcmp(prev.data, key.data, prev.len) != 0))
			fail("rkey not extending its parent's", n->text.data);
		idc_buf_reset(&prev);
		if (idc_buf_append(&prev, key.data, key.len) != 0)
			fail("rkey", "ENOMEM");
	}
	if (key.len != n->text.len)
		fail("rkey of the whole DN has another length", n->text.data);
	idc_buf_free(&prev);
	idc_buf_free(&key);
}

/* The text of every ancestor (and of the root) is where an RDN starts;
 * store_ndn_below must see n at the depth the RDN offsets give, and never
 * an ancestor below n. */
static void check_below(const struct store_ndn *n)
{
	struct store_val e = {n->text.data, n->text.len};
	for (size_t k = 0; k <= n->nrdn; k++) {
		size_t at = k == n->nrdn ? n->text.len : n->off[k];
		struct store_val b = {n->text.data + at, n->text.len - at};
		int want = k == 0 ? 0 : k == 1 ? 1 : 2;
		if (store_ndn_below(e, b) != want)
			fail("store_ndn_below disagrees with the RDN offsets", n->text.data);
		if (k > 0 && store_ndn_below(b, e) != 0)
			fail("store_ndn_below puts an ancestor below", n->text.data);
	}
}

static void check_fixed_point(const struct store_ndn *a)
{
	struct store_ndn b = STORE_NDN_INIT;
	struct idc_diag d = {{0}};
	if (store_dn_normalize(a->text.data, a->text.len, &b, &d) != 0)
		fail("normalized DN does not parse", d.msg);
	if (b.text.len != a->text.len || memcmp(b.text.data, a->text.data, a->text.len) != 0)
		fail("normalization is not a fixed point", a->text.data);
	if (b.nrdn != a->nrdn || memcmp(b.off, a->off, (a->nrdn + 1) * sizeof(a->off[0])) != 0)
		fail("RDN offsets differ on the second pass", a->text.data);
	store_ndn_free(&b);
}

static void fuzz_values(const char *s, size_t size)
{
	struct idc_buf out = IDC_BUF_INIT;
	char canon[STORE_ATTR_MAX];
	for (int r = STORE_RULE_CASE_IGNORE; r <= STORE_RULE_OCTET; r++) {
		idc_buf_reset(&out);
		int rc = store_normalize((enum store_rule)r, s, size, &out, NULL);
		if (rc != 0 && rc != IDC_ESYNTAX && rc != -E2BIG)
			fail("store_normalize", idc_strerror(rc));
	}
	size_t n = store_attr_canon(s, size, canon);
	if (n >= STORE_ATTR_MAX || (n && canon[n] != '\0'))
		fail("store_attr_canon", "length or termination");
	idc_buf_free(&out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *s = (const char *)data;
	struct store_ndn n = STORE_NDN_INIT;
	struct idc_diag d = {{0}};
	int rc = store_dn_normalize(s, size, &n, &d);
	if (rc == 0) {
		check_fixed_point(&n);
		check_rkeys(&n);
		check_below(&n);
		size_t last = 0;
		if (store_dn_foreach_ava(s, size, count_ava, &last, &d) != 0)
			fail("foreach_ava refuses a DN that normalizes", d.msg);
		if (n.nrdn && last + 1 != n.nrdn)
			fail("foreach_ava saw another number of RDNs", n.text.data);
	} else if (rc != IDC_ESYNTAX && rc != -E2BIG) {
		fail("store_dn_normalize", idc_strerror(rc));
	}
	store_ndn_free(&n);
	fuzz_values(s, size);
	return 0;
}
