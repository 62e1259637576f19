/*
 * Fuzz target for RFC 4518 string preparation (caseIgnore, caseExact): any
 * bytes prepare without error; preparing the result again changes nothing;
 * and an equality filter asserting the bytes matches a value holding them,
 * whichever path (the ASCII byte loop or libunistring) the value takes.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/store_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_rule(enum store_rule r, const char *v, size_t n)
{
	struct idc_buf a = IDC_BUF_INIT, b = IDC_BUF_INIT, text = IDC_BUF_INIT;
	if (store_normalize(r, v, n, &a, NULL) != 0)
		abort();
	if (store_normalize(r, a.data, a.len, &b, NULL) != 0 || a.len != b.len ||
	    (a.len && memcmp(a.data, b.data, a.len) != 0))
		abort(); /* not a fixed point */
	const char *rule = r == STORE_RULE_CASE_IGNORE ? "caseIgnoreMatch" : "caseExactMatch";
	int rc = idc_buf_printf(&text, "(cn:%s:=", rule);
	for (size_t i = 0; i < n && !rc; i++)
		rc = idc_buf_printf(&text, "\\%02x", (unsigned char)v[i]);
	if (!rc)
		rc = idc_buf_putc(&text, ')');
	struct store_filter *f = NULL;
	if (!rc && n > 0 && a.len > 0 && store_filter_parse(text.data, text.len, &f, NULL) == 0) {
		struct store_val val = {v, n};
		struct store_attr attr = {{"cn", 2}, {"cn", 2}, &val, 1, 0};
		struct store_entry e = {0, {"cn=x", 4}, &attr, 1};
		struct idc_buf scratch = IDC_BUF_INIT;
		if (store_filter_eval(f, &e, &scratch) != SF_TRUE)
			abort();
		idc_buf_free(&scratch);
		store_filter_free(f);
	}
	idc_buf_free(&a);
	idc_buf_free(&b);
	idc_buf_free(&text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > 4096)
		return 0;
	check_rule(STORE_RULE_CASE_IGNORE, (const char *)data, size);
	check_rule(STORE_RULE_CASE_EXACT, (const char *)data, size);
	return 0;
}
