/*
 * Fuzz target for RFC 4515 filters: any input must parse or fail cleanly;
 * a filter that parses must format to text that parses again and formats
 * identically, and evaluate the same way on a fixed entry both times.
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "store/store_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define V(s)                                                                                       \
	{                                                                                          \
		s, sizeof(s) - 1                                                                   \
	}
#define ATTR(n, vals)                                                                              \
	{                                                                                          \
		V(n), V(n), vals, sizeof(vals) / sizeof(vals[0])                                   \
	}

static struct store_val cn[] = {V("Alice  Smith"), V("a*b(c)\\")};
static struct store_val gid[] = {V("-20")};
static struct store_val member[] = {V("cn=Wheel,ou=Groups,dc=example,dc=com")};
static struct store_val memberuid[] = {V("Bob"), V("x\0y")};
static struct store_val oc[] = {V("top"), V("posixAccount")};
static struct store_val uid[] = {V("alice")};
static struct store_val uidnum[] = {V("1000")};

/* sorted by norm */
static struct store_attr attrs[] = {
    ATTR("cn", cn),
    ATTR("gidnumber", gid),
    ATTR("member", member),
    ATTR("memberuid", memberuid),
    ATTR("objectclass", oc),
    ATTR("uid", uid),
    ATTR("uidnumber", uidnum),
};

static const struct store_entry entry = {0, V("uid=alice+cn=A\\2cB,ou=people,dc=example,dc=com"),
					 attrs, sizeof(attrs) / sizeof(attrs[0])};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct store_filter *f = NULL, *g = NULL;
	struct idc_buf a = IDC_BUF_INIT, b = IDC_BUF_INIT, scratch = IDC_BUF_INIT;
	if (store_filter_parse((const char *)data, size, &f, NULL) != 0)
		return 0;
	if (store_filter_format(f, &a) != 0)
		goto out; /* out of memory only */
	struct idc_diag d;
	int rc = store_filter_parse(a.data, a.len, &g, &d);
	if (rc == -ENOMEM)
		goto out;
	if (rc != 0)
		abort(); /* the formatted text of a filter must parse */
	if (store_filter_format(g, &b) != 0)
		goto out;
	if (a.len != b.len || memcmp(a.data, b.data, a.len) != 0)
		abort(); /* format is not a fixed point */
	int r1 = store_filter_eval(f, &entry, &scratch);
	int r2 = store_filter_eval(g, &entry, &scratch);
	if (r1 != r2 || r1 < SF_FALSE || r1 > SF_UNDEF)
		abort();
	if (store_filter_match(f, &entry, &scratch) != (r1 == SF_TRUE))
		abort();
out:
	store_filter_free(f);
	store_filter_free(g);
	idc_buf_free(&a);
	idc_buf_free(&b);
	idc_buf_free(&scratch);
	return 0;
}
