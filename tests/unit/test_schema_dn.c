/*
 * Unit tests for schema.c (attribute names, matching rules, value
 * normalization) and dn.c (RFC 4514 parsing, canonical form, reversed keys,
 * AVA walk, errors and limits).
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "store/store_int.h"

#define S(lit) lit, sizeof(lit) - 1

/* ==== helpers ================================================================= */

static void check_canon(const char *in, const char *want)
{
	char out[STORE_ATTR_MAX];
	size_t n = store_attr_canon(in, strlen(in), out);
	if (!want) {
		if (n != 0)
			fail_msg("'%s' accepted as '%.*s'", in, (int)n, out);
		return;
	}
	if (n != strlen(want) || memcmp(out, want, n) != 0)
		fail_msg("'%s' -> '%.*s', want '%s'", in, (int)n, out, want);
	assert_int_equal(out[n], '\0');
}

static enum store_rule rule_of(const char *norm)
{
	return store_attr_rule(norm, strlen(norm));
}

/* Normalize v (len bytes) under r into a fresh buffer the caller frees. */
static int norm(enum store_rule r, const char *v, size_t len, struct idc_buf *out)
{
	struct idc_diag d = {{0}};
	idc_buf_reset(out);
	int rc = store_normalize(r, v, len, out, &d);
	if (rc == IDC_ESYNTAX)
		assert_true(d.msg[0] != '\0');
	return rc;
}

static void check_text(enum store_rule r, const char *in, const char *want)
{
	struct idc_buf b = IDC_BUF_INIT;
	assert_int_equal(norm(r, in, strlen(in), &b), 0);
	if (b.len != strlen(want) || memcmp(b.data, want, b.len) != 0)
		fail_msg("'%s' -> '%.*s', want '%s'", in, (int)b.len, b.data, want);
	idc_buf_free(&b);
}

/* The 8-byte key of an integer, as the sign-flipped big-endian value. */
static uint64_t int_key(const char *in)
{
	struct idc_buf b = IDC_BUF_INIT;
	assert_int_equal(norm(STORE_RULE_INTEGER, in, strlen(in), &b), 0);
	assert_int_equal(b.len, 8);
	uint64_t k = 0;
	for (size_t i = 0; i < 8; i++)
		k = k << 8 | (unsigned char)b.data[i];
	idc_buf_free(&b);
	return k;
}

static void check_int_bad(const char *in)
{
	struct idc_buf b = IDC_BUF_INIT;
	if (norm(STORE_RULE_INTEGER, in, strlen(in), &b) != IDC_ESYNTAX)
		fail_msg("integer '%s' accepted", in);
	idc_buf_free(&b);
}

static void check_dn_len(const char *in, size_t len, const char *want)
{
	struct store_ndn n = STORE_NDN_INIT;
	struct idc_diag d = {{0}};
	int rc = store_dn_normalize(in, len, &n, &d);
	if (rc != 0)
		fail_msg("'%.*s': %s (%s)", (int)len, in, idc_strerror(rc), d.msg);
	if (n.text.len != strlen(want) || memcmp(n.text.data, want, n.text.len) != 0)
		fail_msg("'%.*s' -> '%s', want '%s'", (int)len, in, n.text.data, want);
	assert_int_equal(n.off[n.nrdn], n.text.len);
	store_ndn_free(&n);
}

static void check_dn(const char *in, const char *want)
{
	check_dn_len(in, strlen(in), want);
}

/* in fails with rc; for IDC_ESYNTAX the message names position pos. */
static void check_dn_err_len(const char *in, size_t len, int rc, size_t pos)
{
	struct store_ndn n = STORE_NDN_INIT;
	struct idc_diag d = {{0}};
	int got = store_dn_normalize(in, len, &n, &d);
	if (got != rc)
		fail_msg("'%.*s': got %d (%s), want %d", (int)len, in, got, d.msg, rc);
	assert_int_equal(n.nrdn, 0);
	if (rc == IDC_ESYNTAX) {
		char want[64];
		snprintf(want, sizeof(want), "': position %zu: ", pos);
		if (!strstr(d.msg, want))
			fail_msg("'%.*s': message '%s' lacks '%s'", (int)len, in, d.msg, want);
		assert_memory_equal(d.msg, "DN '", 4);
	}
	store_ndn_free(&n);
}

static void check_dn_err(const char *in, int rc, size_t pos)
{
	check_dn_err_len(in, strlen(in), rc, pos);
}

/* ==== attribute names ============================================================ */

static void test_attr_canon(void **state)
{
	(void)state;
	check_canon("cn", "cn");
	check_canon("CN", "cn");
	check_canon("uidNumber", "uidnumber");
	check_canon("x-Custom-9", "x-custom-9");
	check_canon("cn;Lang-EN", "cn;lang-en");
	check_canon("userCertificate;binary", "usercertificate;binary");
	check_canon("1.2.3", "1.2.3");
	check_canon("0.10.200", "0.10.200");
	check_canon("commonName;x", "cn;x");
	check_canon("gn;a-1", "givenname;a-1");
	check_canon("2.5.4.3;lang-de", "cn;lang-de");

	const char *bad[] = {"",     "1cn", "c n", "cn;",    "cn;;x", "-cn",  "01.2", "1",  "1.",
			     "1..2", ".1",  "c_n", "cn;a_b", "1.2a",  "1.02", "cn=",  ";x", "é"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		check_canon(bad[i], NULL);

	char name[STORE_ATTR_MAX + 2];
	memset(name, 'a', sizeof(name));
	char out[STORE_ATTR_MAX];
	assert_int_equal(store_attr_canon(name, STORE_ATTR_MAX - 1, out), STORE_ATTR_MAX - 1);
	assert_int_equal(out[STORE_ATTR_MAX - 1], '\0');
	assert_int_equal(store_attr_canon(name, STORE_ATTR_MAX, out), 0);
	/* an alias that grows must still fit */
	memcpy(name, "gn;", 3);
	assert_int_equal(store_attr_canon(name, STORE_ATTR_MAX - 1, out), 0);
	assert_int_equal(store_attr_canon(name, STORE_ATTR_MAX - 8, out), STORE_ATTR_MAX - 1);
	assert_int_equal(store_attr_canon(NULL, 0, out), 0);
}

static void test_attr_aliases(void **state)
{
	(void)state;
	/* every alias of the table, so a mis-sorted table shows up here */
	static const char *const pairs[][2] = {
	    {"Gn", "givenname"},
	    {"Userid", "uid"},
	    {"2.5.4.0", "objectclass"},
	    {"2.5.4.1", "aliasedobjectname"},
	    {"2.5.4.3", "cn"},
	    {"2.5.4.4", "sn"},
	    {"2.5.4.6", "c"},
	    {"2.5.4.7", "l"},
	    {"2.5.4.8", "st"},
	    {"Surname", "sn"},
	    {"2.5.18.1", "createtimestamp"},
	    {"2.5.18.2", "modifytimestamp"},
	    {"2.5.4.10", "o"},
	    {"2.5.4.11", "ou"},
	    {"2.5.4.13", "description"},
	    {"2.5.4.31", "member"},
	    {"2.5.4.32", "owner"},
	    {"2.5.4.34", "seealso"},
	    {"2.5.4.35", "userpassword"},
	    {"2.5.4.36", "usercertificate"},
	    {"2.5.4.41", "name"},
	    {"2.5.4.42", "givenname"},
	    {"2.5.4.49", "distinguishedname"},
	    {"2.5.4.50", "uniquemember"},
	    {"Commonname", "cn"},
	    {"Countryname", "c"},
	    {"Localityname", "l"},
	    {"Rfc822mailbox", "mail"},
	    {"1.3.6.1.1.16.4", "entryuuid"},
	    {"1.3.6.1.1.1.1.0", "uidnumber"},
	    {"1.3.6.1.1.1.1.1", "gidnumber"},
	    {"1.3.6.1.1.1.1.2", "gecos"},
	    {"1.3.6.1.1.1.1.3", "homedirectory"},
	    {"1.3.6.1.1.1.1.4", "loginshell"},
	    {"1.3.6.1.1.1.1.5", "shadowlastchange"},
	    {"1.3.6.1.1.1.1.6", "shadowmin"},
	    {"1.3.6.1.1.1.1.7", "shadowmax"},
	    {"1.3.6.1.1.1.1.8", "shadowwarning"},
	    {"1.3.6.1.1.1.1.9", "shadowinactive"},
	    {"Domaincomponent", "dc"},
	    {"1.3.6.1.1.1.1.10", "shadowexpire"},
	    {"1.3.6.1.1.1.1.11", "shadowflag"},
	    {"1.3.6.1.1.1.1.12", "memberuid"},
	    {"Organizationname", "o"},
	    {"Stateorprovincename", "st"},
	    {"1.2.840.113556.1.2.102", "memberof"},
	    {"Organizationalunitname", "ou"},
	    {"0.9.2342.19200300.100.1.1", "uid"},
	    {"0.9.2342.19200300.100.1.3", "mail"},
	    {"2.16.840.1.113730.3.1.241", "displayname"},
	    {"0.9.2342.19200300.100.1.10", "manager"},
	    {"0.9.2342.19200300.100.1.25", "dc"},
	    {"0.9.2342.19200300.100.1.60", "jpegphoto"},
	};
	for (size_t i = 0; i < sizeof(pairs) / sizeof(pairs[0]); i++)
		check_canon(pairs[i][0], pairs[i][1]);
	/* not aliases: prefixes and near misses stay as they are */
	check_canon("common", "common");
	check_canon("commonnames", "commonnames");
	check_canon("2.5.4.300", "2.5.4.300");
}

static void test_attr_rule(void **state)
{
	(void)state;
	const char *ci[] = {"uid",
			    "cn",
			    "sn",
			    "givenname",
			    "name",
			    "gecos",
			    "objectclass",
			    "ou",
			    "o",
			    "dc",
			    "c",
			    "l",
			    "st",
			    "mail",
			    "description",
			    "displayname",
			    "namealias",
			    "entryuuid",
			    "createtimestamp",
			    "modifytimestamp",
			    "originalmodifytimestamp",
			    "unknownattr",
			    "1.2.3"};
	const char *ce[] = {"memberuid", "homedirectory", "loginshell", "unixhomedirectory"};
	const char *in[] = {"uidnumber",  "gidnumber",     "shadowlastchange",    "shadowmin",
			    "shadowmax",  "shadowwarning", "shadowinactive",      "shadowexpire",
			    "shadowflag", "lastupdate",    "dataexpiretimestamp", "cacheexpire"};
	const char *dn[] = {"member",     "uniquemember",      "memberof",
			    "owner",      "seealso",           "manager",
			    "originaldn", "distinguishedname", "aliasedobjectname"};
	const char *oc[] = {"userpassword",
			    "jpegphoto",
			    "usercertificate",
			    "cacertificate",
			    "certificaterevocationlist",
			    "authorityrevocationlist",
			    "usersmimecertificate",
			    "userpkcs12",
			    "usercertificate;binary",
			    "cn;binary",
			    "cn;x;binary"};
	for (size_t i = 0; i < sizeof(ci) / sizeof(ci[0]); i++)
		assert_int_equal(rule_of(ci[i]), STORE_RULE_CASE_IGNORE);
	for (size_t i = 0; i < sizeof(ce) / sizeof(ce[0]); i++)
		assert_int_equal(rule_of(ce[i]), STORE_RULE_CASE_EXACT);
	for (size_t i = 0; i < sizeof(in) / sizeof(in[0]); i++)
		assert_int_equal(rule_of(in[i]), STORE_RULE_INTEGER);
	for (size_t i = 0; i < sizeof(dn) / sizeof(dn[0]); i++)
		assert_int_equal(rule_of(dn[i]), STORE_RULE_DN);
	for (size_t i = 0; i < sizeof(oc) / sizeof(oc[0]); i++)
		assert_int_equal(rule_of(oc[i]), STORE_RULE_OCTET);
	/* options other than ;binary keep the base attribute's rule */
	assert_int_equal(rule_of("uidnumber;x-y"), STORE_RULE_INTEGER);
	assert_int_equal(rule_of("cn;binaryx"), STORE_RULE_CASE_IGNORE);
	assert_int_equal(rule_of(""), STORE_RULE_CASE_IGNORE);
	assert_int_equal(store_attr_rule("uidnumber", 3), STORE_RULE_CASE_IGNORE); /* "uid" */
}

static void test_rule_by_name(void **state)
{
	(void)state;
	static const struct {
		const char *name;
		enum store_rule rule;
	} ok[] = {
	    {"caseIgnoreMatch", STORE_RULE_CASE_IGNORE},
	    {"CASEIGNOREMATCH", STORE_RULE_CASE_IGNORE},
	    {"2.5.13.2", STORE_RULE_CASE_IGNORE},
	    {"caseExactMatch", STORE_RULE_CASE_EXACT},
	    {"2.5.13.5", STORE_RULE_CASE_EXACT},
	    {"integerMatch", STORE_RULE_INTEGER},
	    {"2.5.13.14", STORE_RULE_INTEGER},
	    {"distinguishedNameMatch", STORE_RULE_DN},
	    {"2.5.13.1", STORE_RULE_DN},
	    {"octetStringMatch", STORE_RULE_OCTET},
	    {"2.5.13.17", STORE_RULE_OCTET},
	    {"caseIgnoreIA5Match", STORE_RULE_CASE_IGNORE},
	    {"1.3.6.1.4.1.1466.109.114.2", STORE_RULE_CASE_IGNORE},
	    {"caseExactIA5Match", STORE_RULE_CASE_EXACT},
	    {"1.3.6.1.4.1.1466.109.114.1", STORE_RULE_CASE_EXACT},
	};
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		enum store_rule r = STORE_RULE_OCTET + 1;
		assert_int_equal(store_rule_by_name(ok[i].name, strlen(ok[i].name), &r), 0);
		assert_int_equal(r, ok[i].rule);
	}
	const char *bad[] = {"",       "caseIgnore", "caseIgnoreMatchX",
			     "2.5.13", "2.5.13.20",  "2.5.13.2 "};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		enum store_rule r;
		assert_int_equal(store_rule_by_name(bad[i], strlen(bad[i]), &r), -ENOENT);
	}
}

/* ==== value normalization ========================================================= */

/* What preparation makes of printable ASCII, or of text that is not UTF-8
 * (bytes as they are): spaces trimmed at both ends and squeezed inside,
 * ASCII capitals lowered when fold. */
static size_t prep_reference(const char *v, size_t n, bool fold, char *out)
{
	size_t k = 0;
	bool pend = false;
	for (size_t i = 0; i < n; i++) {
		char c = v[i];
		if (c == ' ') {
			pend = true;
			continue;
		}
		if (pend && k > 0)
			out[k++] = ' ';
		pend = false;
		out[k++] = fold && c >= 'A' && c <= 'Z' ? (char)(c + 32) : c;
	}
	return k;
}

/* Runs of plain bytes are copied a word at a time: values must prepare as
 * the byte-by-byte rule says, for bytes at every edge of the runs' range
 * and of the capitals, in printable ASCII and in text that is not UTF-8
 * (0xff), runs starting anywhere. */
static void test_prep_word_run(void **state)
{
	(void)state;
	static const char edge[] = {' ', '!', '~', 'A', 'Z', '@', '[',       'a',
				    'z', '`', '{', '0', ' ', ' ', (char)0xff};
	unsigned seed = 7;
	struct idc_buf a = IDC_BUF_INIT;
	char v[48], want[48];
	for (int round = 0; round < 6000; round++) {
		size_t n = (size_t)(round % 44);
		bool bytes = round % 3 == 0; /* 0xff allowed: not UTF-8 */
		for (size_t i = 0; i < n; i++) {
			seed = seed * 1103515245u + 12345u;
			/* mostly plain letters, so long runs come up */
			unsigned r = (seed >> 16) % 48;
			size_t ne = IDC_ARRAY_SIZE(edge) - (bytes ? 0 : 1);
			v[i] = r < ne ? edge[r] : (char)('A' + r % 58);
		}
		for (int fold = 0; fold < 2; fold++) {
			idc_buf_reset(&a);
			assert_int_equal(store_prep(v, n, fold, STORE_PREP_VALUE, &a), 0);
			size_t k = prep_reference(v, n, fold, want);
			assert_int_equal(a.len, k);
			assert_memory_equal(a.data, want, k);
		}
	}
	idc_buf_free(&a);
}

static void test_norm_text(void **state)
{
	(void)state;
	check_text(STORE_RULE_CASE_IGNORE, "  Hello   World  ", "hello world");
	check_text(STORE_RULE_CASE_IGNORE, "", "");
	check_text(STORE_RULE_CASE_IGNORE, "    ", "");
	check_text(STORE_RULE_CASE_IGNORE, "ABC", "abc");
	check_text(STORE_RULE_CASE_IGNORE, "\xc3\x89t\xc3\xa9", "\xc3\xa9t\xc3\xa9");
	check_text(STORE_RULE_CASE_IGNORE, "a\tB", "a b"); /* tab is a space */
	check_text(STORE_RULE_CASE_EXACT, "  Hello   World  ", "Hello World");
	check_text(STORE_RULE_CASE_EXACT, "/home/Alice", "/home/Alice");
	check_text(STORE_RULE_OCTET, "  Keep  Me ", "  Keep  Me ");

	struct idc_buf b = IDC_BUF_INIT;
	assert_int_equal(norm(STORE_RULE_OCTET, S("a\0b"), &b), 0);
	assert_int_equal(b.len, 3);
	assert_memory_equal(b.data, "a\0b", 3);
	/* appends after what is there */
	assert_int_equal(idc_buf_append(&b, "x:", 2), 0);
	assert_int_equal(store_normalize(STORE_RULE_CASE_IGNORE, S(" Y "), &b, NULL), 0);
	assert_int_equal(b.len, 6);
	assert_memory_equal(b.data + 3, "x:y", 3);
	assert_int_equal(b.data[b.len], '\0');
	idc_buf_free(&b);
}

/* RFC 4518 preparation: case folding, NFKC, mapping, prohibited code
 * points and what happens to text that is not UTF-8. */
static bool same_lower(const char *a, const char *b)
{
	return store_text_same_lower(a, strlen(a), b, strlen(b));
}

static void test_norm_unicode(void **state)
{
	(void)state;
	const enum store_rule ci = STORE_RULE_CASE_IGNORE, ce = STORE_RULE_CASE_EXACT;
	check_text(ci, "\u00DCn\u00EFcode", "\u00FCn\u00EFcode"); /* Ünïcode */
	check_text(ci, "Stra\u00DFe", "strasse");                 /* ß folds to ss */
	check_text(ci, "STRASSE", "strasse");
	check_text(ce, "Stra\u00DFe", "Stra\u00DFe");
	check_text(ci, "\u0130stanbul", "i\u0307stanbul"); /* İ: i + dot above */
	check_text(ci, "\uFB01le", "file");                /* the ligature ﬁ */
	check_text(ce, "\uFB01le", "file");
	check_text(ci, "\uFF21\uFF22", "ab"); /* full-width ＡＢ */
	check_text(ce, "\uFF21\uFF22", "AB");
	check_text(ci, "Ce\u0301", "c\u00E9"); /* e + U+0301 composes */
	check_text(ci, "C\u00C9", "c\u00E9");
	check_text(ci, "\u03A3\u0391\u03A3", "\u03C3\u03B1\u03C3");
	check_text(ci, "\u03C3\u03B1\u03C2", "\u03C3\u03B1\u03C3");
	/* separators are spaces, soft hyphen and zero width space vanish */
	check_text(ci, "\u00A0A\u00A0 \u3000b\u2003", "a b");
	check_text(ci, "co\u00ADop\u200B", "coop");
	check_text(ci, "\u00A0\u200B ", "");
	/* a space before a combining mark is a character */
	check_text(ci, "a \u0301", "a \u0301");
	check_text(ci, "a  \u0301", "a  \u0301");
	/* not UTF-8, or a prohibited code point: bytes, ASCII folded */
	check_text(ci,
		   "\xff"
		   "ABC  d",
		   "\xff"
		   "abc d");
	check_text(ci, "\xc3", "\xc3");
	check_text(ci, "\u00C9\uE000A", "\u00C9\uE000a"); /* U+E000 */
	check_text(ci, "\uFFFD", "\uFFFD");               /* U+FFFD */
	check_text(ci, "\xed\xa0\x80", "\xed\xa0\x80");   /* surrogate */

	/* long text goes past the stack buffers */
	struct idc_buf in = IDC_BUF_INIT, b = IDC_BUF_INIT;
	for (int i = 0; i < 400; i++)
		assert_int_equal(idc_buf_append(&in, "\u00C9", 2), 0);
	assert_int_equal(norm(ci, in.data, in.len, &b), 0);
	assert_int_equal(b.len, 800);
	for (size_t i = 0; i < b.len; i += 2)
		assert_memory_equal(b.data + i, "\u00E9", 2);
	idc_buf_free(&in);
	idc_buf_free(&b);
	/* Case ignored code point by code point (as OpenLDAP's
	 * caseIgnoreMatch): narrower than caseIgnore, never wider. */
	assert_true(same_lower("Alice", "aLICE"));
	assert_true(same_lower("a  b ", "A B"));
	assert_true(same_lower("\u00C9mile", "E\u0301MILE"));  /* NFD, case */
	assert_true(same_lower("\uFB01le", "file"));           /* NFKC */
	assert_true(same_lower("Stra\u00DFe", "STRA\u1E9EE")); /* capital sharp s */
	assert_false(same_lower("Stra\u00DFe", "strasse"));    /* no full folding */
	assert_false(same_lower("ab\u200B", "ab"));            /* nothing mapped away */
	assert_false(same_lower("\u0131i", "ii"));             /* dotless i */
	assert_false(same_lower("alice", "alicf"));
	assert_true(same_lower("caf\xe9", "CAF\xe9")); /* not UTF-8: bytes */
	assert_false(same_lower("caf\xe9", "caf\xc9"));
}

static void test_norm_integer(void **state)
{
	(void)state;
	assert_true(int_key("0") == UINT64_C(0x8000000000000000));
	assert_true(int_key("1") == UINT64_C(0x8000000000000001));
	assert_true(int_key("-1") == UINT64_C(0x7fffffffffffffff));
	assert_true(int_key("1000") == UINT64_C(0x80000000000003e8));
	assert_true(int_key("9223372036854775807") == UINT64_MAX);
	assert_true(int_key("-9223372036854775808") == 0);

	const char *bad[] = {"",
			     "-",
			     "-0",
			     "00",
			     "01",
			     "-01",
			     "+1",
			     " 1",
			     "1 ",
			     "1a",
			     "1.0",
			     "0x10",
			     "--1",
			     "9223372036854775808",
			     "-9223372036854775809",
			     "99999999999999999999",
			     "18446744073709551616",
			     "184467440737095516150"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		check_int_bad(bad[i]);

	struct idc_diag d = {{0}};
	struct idc_buf b = IDC_BUF_INIT;
	assert_int_equal(store_normalize(STORE_RULE_INTEGER, S("007"), &b, &d), IDC_ESYNTAX);
	assert_non_null(strstr(d.msg, "'007'"));
	assert_non_null(strstr(d.msg, "leading zero"));
	idc_buf_free(&b);
}

static void test_norm_integer_order(void **state)
{
	(void)state;
	/* numeric order, so the normalized keys must come out in memcmp order */
	const char *sorted[] = {"-9223372036854775808",
				"-9223372036854775807",
				"-4294967296",
				"-1000",
				"-999",
				"-10",
				"-2",
				"-1",
				"0",
				"1",
				"2",
				"9",
				"10",
				"999",
				"1000",
				"65535",
				"4294967296",
				"9223372036854775806",
				"9223372036854775807"};
	struct idc_buf prev = IDC_BUF_INIT, cur = IDC_BUF_INIT;
	for (size_t i = 0; i < sizeof(sorted) / sizeof(sorted[0]); i++) {
		assert_int_equal(norm(STORE_RULE_INTEGER, sorted[i], strlen(sorted[i]), &cur), 0);
		if (i > 0 && memcmp(prev.data, cur.data, 8) >= 0)
			fail_msg("'%s' does not sort after '%s'", sorted[i], sorted[i - 1]);
		idc_buf_reset(&prev);
		assert_int_equal(idc_buf_append(&prev, cur.data, cur.len), 0);
	}
	idc_buf_free(&prev);
	idc_buf_free(&cur);
}

static void test_norm_dn_rule(void **state)
{
	(void)state;
	check_text(STORE_RULE_DN, "UID=Alice, OU=People ,DC=Example",
		   "uid=alice,ou=people,dc=example");
	check_text(STORE_RULE_DN, "", "");

	struct idc_buf b = IDC_BUF_INIT;
	struct idc_diag d = {{0}};
	assert_int_equal(idc_buf_append(&b, "keep", 4), 0);
	assert_int_equal(store_normalize(STORE_RULE_DN, S("cn=a,,dc=x"), &b, &d), IDC_ESYNTAX);
	assert_int_equal(b.len, 4);
	assert_string_equal(b.data, "keep");
	assert_non_null(strstr(d.msg, "position 5"));
	assert_int_equal(store_normalize(STORE_RULE_DN, S("CN=B"), &b, &d), 0);
	assert_string_equal(b.data, "keepcn=b");
	idc_buf_free(&b);
}

/* ==== DN: canonical form ============================================================ */

static void test_dn_basic(void **state)
{
	(void)state;
	check_dn("uid=alice,ou=people,dc=example,dc=com", "uid=alice,ou=people,dc=example,dc=com");
	check_dn("UID=Alice,OU=People,DC=Example,DC=COM", "uid=alice,ou=people,dc=example,dc=com");
	check_dn("  uid = alice ,  ou=people  ,dc =x  ", "uid=alice,ou=people,dc=x");
	check_dn("cn=a;dc=x", "cn=a,dc=x");
	check_dn("cn=a ; dc=x", "cn=a,dc=x");
	check_dn("cn=Two   Words", "cn=two words");
	check_dn("commonName=X,domainComponent=Y", "cn=x,dc=y");
	check_dn("2.5.4.3=X,0.9.2342.19200300.100.1.25=Com", "cn=x,dc=com");
	check_dn("1.2.3.4=Value", "1.2.3.4=value");
	check_dn("cn=", "cn=");
	check_dn("cn= ,dc=x", "cn=,dc=x");
	check_dn("cn=a=b", "cn=a\\=b");
	check_dn("cn=a#b", "cn=a#b");
	check_dn("cn=\xc3\x89T\xc3\xa9", "cn=\xc3\xa9t\xc3\xa9");
}

static void test_dn_root(void **state)
{
	(void)state;
	const char *roots[] = {"", " ", "    "};
	for (size_t i = 0; i < 3; i++) {
		struct store_ndn n = STORE_NDN_INIT;
		assert_int_equal(store_dn_normalize(roots[i], strlen(roots[i]), &n, NULL), 0);
		assert_int_equal(n.nrdn, 0);
		assert_int_equal(n.text.len, 0);
		assert_non_null(n.text.data);
		assert_string_equal(n.text.data, "");
		assert_int_equal(n.off[0], 0);
		store_ndn_free(&n);
	}
	struct store_ndn n = STORE_NDN_INIT;
	assert_int_equal(store_dn_normalize(NULL, 0, &n, NULL), 0);
	assert_int_equal(n.nrdn, 0);
	store_ndn_free(&n);
}

static void test_dn_escapes(void **state)
{
	(void)state;
	check_dn("CN=Smith\\, John,DC=x", "cn=smith\\, john,dc=x");
	check_dn("cn=a\\2cb", "cn=a\\,b");
	check_dn("cn=a\\2Cb", "cn=a\\,b");
	check_dn("cn=\\+\\\"\\\\\\<\\>\\;\\=", "cn=\\+\\\"\\\\\\<\\>\\;\\=");
	check_dn("cn=\\41\\42c", "cn=abc");
	check_dn("cn=caf\\C3\\A9", "cn=caf\xc3\xa9");
	check_dn("cn=\\e6\\97\\a5", "cn=\xe6\x97\xa5");
	check_dn("cn=\\#a", "cn=\\#a");
	check_dn("cn=\\23a", "cn=\\#a");
	check_dn("cn=a\\#", "cn=a#");
	/* escaped spaces at the ends are part of the value; caseIgnore drops them */
	check_dn("cn=\\ a\\ ", "cn=a");
	check_dn("cn=a\\  ", "cn=a");
	check_dn("userPassword=\\ Secret\\ ", "userpassword=\\ Secret\\ ");
	check_dn("userPassword=\\20\\20x", "userpassword=\\  x");
	check_dn("userPassword=a  b ", "userpassword=a  b");
	/* control bytes and NUL come out as lowercase hex pairs */
	/* controls map to nothing, CR and tab to a space (RFC 4518 2.2) */
	check_dn("cn=a\\00b\\0D\\7F\\1f", "cn=ab");
	check_dn("cn=a\tb", "cn=a b");
	/* an escaped backslash before hex digits is just a backslash */
	check_dn("cn=\\\\41", "cn=\\\\41");
}

static void test_dn_hexstring(void **state)
{
	(void)state;
	check_dn("cn=#414243", "cn=abc");
	check_dn("cn=#4142 ,dc=#78", "cn=ab,dc=x");
	check_dn("cn = #41 + sn=b", "cn=a+sn=b");
	check_dn("userPassword=#0001ff", "userpassword=\\00\\01\xff");
	check_dn("cn=#2341", "cn=\\#a");
	check_dn("uidNumber=#3130", "uidnumber=10");
	check_dn_err("cn=#", IDC_ESYNTAX, 4);
	check_dn_err("cn=#4", IDC_ESYNTAX, 4);
	check_dn_err("cn=#41424", IDC_ESYNTAX, 8);
	check_dn_err("cn=#zz", IDC_ESYNTAX, 4);
	check_dn_err("cn=#41 x", IDC_ESYNTAX, 7);
	check_dn_err("cn=#41x", IDC_ESYNTAX, 6);
}

static void test_dn_multivalued(void **state)
{
	(void)state;
	check_dn("sn=B+cn=A", "cn=a+sn=b");
	check_dn("uid=c + sn=b + cn=a,dc=x", "cn=a+sn=b+uid=c,dc=x");
	check_dn("cn=b+cn=a", "cn=a+cn=b");
	check_dn("cn=ab+cn=a", "cn=a+cn=ab");
	check_dn("dc=y,sn=B+CN=A", "dc=y,cn=a+sn=b");
	check_dn("cn=a\\+b+cn=a", "cn=a+cn=a\\+b");
	/* the same AVA twice, also once normalized */
	check_dn_err("cn=a+cn=a", IDC_ESYNTAX, 5);
	check_dn_err("cn=A+commonName=a ", IDC_ESYNTAX, 5);
	check_dn_err("cn=a+", IDC_ESYNTAX, 5);
	check_dn_err("cn=a++sn=b", IDC_ESYNTAX, 5);

	struct store_ndn n = STORE_NDN_INIT;
	assert_int_equal(store_dn_normalize(S("sn=b+cn=a,dc=x"), &n, NULL), 0);
	assert_int_equal(n.nrdn, 2);
	assert_int_equal(n.off[1], strlen("cn=a+sn=b,"));
	store_ndn_free(&n);
}

static void test_dn_values_by_rule(void **state)
{
	(void)state;
	check_dn("uidNumber=1000,dc=x", "uidnumber=1000,dc=x");
	check_dn("uidNumber= -5 ", "uidnumber=-5");
	check_dn("memberUid=Alice", "memberuid=Alice");
	check_dn("homeDirectory=/Home/A  B", "homedirectory=/Home/A B");
	check_dn("member=CN=X\\,DC=Y,cn=g", "member=cn\\=x\\,dc\\=y,cn=g");
	check_dn("userPassword=AbC", "userpassword=AbC");
	check_dn_err("uidNumber=0010", IDC_ESYNTAX, 10);
	check_dn_err("cn=a,gidNumber= x1", IDC_ESYNTAX, 16);
	check_dn_err("uidNumber=", IDC_ESYNTAX, 10);

	struct store_ndn n = STORE_NDN_INIT;
	struct idc_diag d = {{0}};
	assert_int_equal(store_dn_normalize(S("uidNumber=01"), &n, &d), IDC_ESYNTAX);
	assert_non_null(strstr(d.msg, "leading zero"));
	store_ndn_free(&n);
}

/* ==== DN: errors and limits =============================================== */

static void test_dn_errors(void **state)
{
	(void)state;
	static const struct {
		const char *dn;
		size_t pos;
	} bad[] = {
	    {"uid=a,,dc=x", 6}, {"=a", 0},      {"uid", 3},       {"uid=a\\", 5},
	    {"uid=a\\zz", 5},   {"uid=a,", 6},  {"uid=a, ", 7},   {",uid=a", 0},
	    {"uid=a+", 6},      {"+uid=a", 0},  {"cn=a\"b", 4},   {"cn=a<b", 4},
	    {"cn=b>", 4},       {"c n=a", 2},   {"cn;x=a", 2},    {"1cn=a", 0},
	    {"cn.x=a", 0},      {"cn=a\\4", 4}, {"cn=a\\4g", 4},  {"cn=a\\\x01", 4},
	    {"cn=a,  =b", 7},   {"cn=a,dc", 7}, {"cn=a,dc x", 8}, {"_=a", 0},
	    {"cn=a\\", 4},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		check_dn_err(bad[i].dn, IDC_ESYNTAX, bad[i].pos);
	check_dn_err_len(S("cn=a\0b"), IDC_ESYNTAX, 4);
	check_dn_err_len(S("c\0=a"), IDC_ESYNTAX, 1);

	struct store_ndn n = STORE_NDN_INIT;
	struct idc_diag d = {{0}};
	assert_int_equal(store_dn_normalize(S("uid"), &n, &d), IDC_ESYNTAX);
	assert_string_equal(d.msg, "DN 'uid': position 3: expected '=' after the attribute type");
	/* a failure leaves the ndn as the root, not half a DN */
	assert_int_equal(store_dn_normalize(S("cn=x,dc=y"), &n, NULL), 0);
	assert_int_equal(store_dn_normalize(S("cn=x,,"), &n, NULL), IDC_ESYNTAX);
	assert_int_equal(n.nrdn, 0);
	assert_int_equal(n.text.len, 0);
	store_ndn_free(&n);
}

static void test_dn_limits(void **state)
{
	(void)state;
	static char big[STORE_DN_MAX + 16];
	/* exactly STORE_DN_MAX bytes is fine, one more is not */
	memset(big, 'a', sizeof(big));
	memcpy(big, "cn=", 3);
	struct store_ndn n = STORE_NDN_INIT;
	assert_int_equal(store_dn_normalize(big, STORE_DN_MAX, &n, NULL), 0);
	assert_int_equal(n.text.len, STORE_DN_MAX);
	struct idc_diag d = {{0}};
	assert_int_equal(store_dn_normalize(big, STORE_DN_MAX + 1, &n, &d), -E2BIG);
	assert_non_null(strstr(d.msg, "8193"));

	/* a DN that grows past the limit when escaped */
	memset(big + 3, '=', 4100);
	assert_int_equal(store_dn_normalize(big, 4103, &n, NULL), -E2BIG);

	/* STORE_DN_MAX_RDNS RDNs, then one more */
	struct idc_buf dn = IDC_BUF_INIT;
	for (int i = 0; i < STORE_DN_MAX_RDNS; i++)
		assert_int_equal(idc_buf_printf(&dn, "%sdc=%d", i ? "," : "", i), 0);
	assert_int_equal(store_dn_normalize(dn.data, dn.len, &n, NULL), 0);
	assert_int_equal(n.nrdn, STORE_DN_MAX_RDNS);
	assert_int_equal(store_dn_foreach_ava(dn.data, dn.len, NULL, NULL, NULL), 0);
	assert_int_equal(idc_buf_printf(&dn, ",dc=last"), 0);
	assert_int_equal(store_dn_normalize(dn.data, dn.len, &n, NULL), -E2BIG);
	assert_int_equal(store_dn_foreach_ava(dn.data, dn.len, NULL, NULL, NULL), -E2BIG);

	/* as many AVAs in one RDN */
	idc_buf_reset(&dn);
	for (int i = 0; i < STORE_DN_MAX_RDNS; i++)
		assert_int_equal(idc_buf_printf(&dn, "%scn=%d", i ? "+" : "", i), 0);
	assert_int_equal(store_dn_normalize(dn.data, dn.len, &n, NULL), 0);
	assert_int_equal(n.nrdn, 1);
	assert_int_equal(idc_buf_printf(&dn, "+cn=last"), 0);
	assert_int_equal(store_dn_normalize(dn.data, dn.len, &n, NULL), -E2BIG);
	assert_int_equal(store_dn_foreach_ava(dn.data, dn.len, NULL, NULL, NULL), -E2BIG);
	idc_buf_free(&dn);
	store_ndn_free(&n);
}

/* ==== DN: offsets and reversed keys ========================================== */

static void check_rkey(const struct store_ndn *n, size_t skip, const char *want)
{
	struct idc_buf k = IDC_BUF_INIT;
	assert_int_equal(store_ndn_rkey(n, skip, &k), 0);
	assert_non_null(k.data);
	assert_string_equal(k.data, want);
	assert_int_equal(k.len, strlen(want));
	idc_buf_free(&k);
}

static void test_dn_rkey(void **state)
{
	(void)state;
	struct store_ndn n = STORE_NDN_INIT;
	assert_int_equal(store_dn_normalize(S("UID=A,ou=People,DC=Example,DC=Com"), &n, NULL), 0);
	assert_int_equal(n.nrdn, 4);
	const size_t off[] = {0, 6, 16, 27, 33};
	for (size_t i = 0; i <= 4; i++)
		assert_int_equal(n.off[i], off[i]);
	check_rkey(&n, 0, "dc=com,dc=example,ou=people,uid=a");
	check_rkey(&n, 1, "dc=com,dc=example,ou=people");
	check_rkey(&n, 3, "dc=com");
	check_rkey(&n, 4, "");
	check_rkey(&n, 99, "");

	/* values with escaped separators and multi-valued RDNs move whole */
	assert_int_equal(store_dn_normalize(S("sn=b+cn=a\\,x,o=q\\,r"), &n, NULL), 0);
	check_rkey(&n, 0, "o=q\\,r,cn=a\\,x+sn=b");

	/* the buffer's old content is replaced */
	struct idc_buf k = IDC_BUF_INIT;
	assert_int_equal(idc_buf_append(&k, "old", 3), 0);
	assert_int_equal(store_ndn_rkey(&n, 0, &k), 0);
	assert_string_equal(k.data, "o=q\\,r,cn=a\\,x+sn=b");
	/* an ndn whose offsets do not fit its text is refused, not read */
	n.off[n.nrdn] = n.text.len + 1;
	assert_int_equal(store_ndn_rkey(&n, 0, &k), -EINVAL);
	idc_buf_free(&k);

	assert_int_equal(store_dn_normalize(S(""), &n, NULL), 0);
	check_rkey(&n, 0, "");
	store_ndn_free(&n);
}

static void test_dn_reuse(void **state)
{
	(void)state;
	/* one ndn across many calls of different sizes */
	struct store_ndn n = STORE_NDN_INIT;
	char dn[64];
	for (int i = 0; i < 1000; i++) {
		int len = snprintf(dn, sizeof(dn), "uid=User%d,ou=People,dc=example,dc=com", i);
		assert_int_equal(store_dn_normalize(dn, (size_t)len, &n, NULL), 0);
		assert_int_equal(n.nrdn, 4);
		assert_int_equal(n.text.data[4], 'u');
	}
	assert_int_equal(store_dn_normalize(S("cn=x"), &n, NULL), 0);
	assert_string_equal(n.text.data, "cn=x");
	store_ndn_free(&n);
	store_ndn_free(&n); /* twice is harmless */
}

/* ==== AVA walk =============================================================== */

struct seen {
	char text[8][32];
	size_t n;
	size_t stop_at; /* return 42 at this AVA */
};

static int record_ava(struct store_val type, struct store_val value, size_t rdn, void *arg)
{
	struct seen *s = arg;
	if (s->n >= 8)
		return -1;
	snprintf(s->text[s->n], sizeof(s->text[0]), "%zu:%.*s=%.*s", rdn, (int)type.len, type.ptr,
		 (int)value.len, value.ptr);
	s->n++;
	return s->n == s->stop_at ? 42 : 0;
}

static void test_foreach_ava(void **state)
{
	(void)state;
	struct seen s = {.n = 0, .stop_at = 0};
	const char dn[] = " CN = Smith\\, J\\  , dc=#4142+ou=x ; 2.5.4.3=\\41";
	assert_int_equal(store_dn_foreach_ava(dn, strlen(dn), record_ava, &s, NULL), 0);
	assert_int_equal(s.n, 4);
	assert_string_equal(s.text[0], "0:CN=Smith, J ");
	assert_string_equal(s.text[1], "1:dc=AB");
	assert_string_equal(s.text[2], "1:ou=x");
	assert_string_equal(s.text[3], "2:2.5.4.3=A");

	/* raw values keep what normalization would change or refuse */
	s = (struct seen){.n = 0, .stop_at = 0};
	assert_int_equal(store_dn_foreach_ava(S("uidNumber=007+cn=a\\00b"), record_ava, &s, NULL),
			 0);
	assert_int_equal(s.n, 2);
	assert_string_equal(s.text[0], "0:uidNumber=007");

	/* the callback's value stops the walk */
	s = (struct seen){.n = 0, .stop_at = 2};
	assert_int_equal(store_dn_foreach_ava(dn, strlen(dn), record_ava, &s, NULL), 42);
	assert_int_equal(s.n, 2);

	/* a malformed DN is refused before the callback sees any of it */
	s = (struct seen){.n = 0, .stop_at = 0};
	struct idc_diag d = {{0}};
	assert_int_equal(store_dn_foreach_ava(S("cn=a,dc=b,,"), record_ava, &s, &d), IDC_ESYNTAX);
	assert_int_equal(s.n, 0);
	assert_non_null(strstr(d.msg, "position 10"));

	/* the root has no AVAs */
	assert_int_equal(store_dn_foreach_ava(S("  "), record_ava, &s, NULL), 0);
	assert_int_equal(s.n, 0);
	static char big[STORE_DN_MAX + 1];
	memset(big, 'a', sizeof(big));
	assert_int_equal(store_dn_foreach_ava(big, sizeof(big), record_ava, &s, NULL), -E2BIG);
}

/* store_dn_rdn0_avas gives what store_dn_foreach_ava gives for RDN 0,
 * from the AVAs store_dn_normalize kept or, when it kept none (escapes,
 * hex, more than STORE_NDN_RDN0_AVAS), by parsing again. */
static void test_rdn0_avas(void **state)
{
	(void)state;
	static const struct {
		const char *dn;
		size_t kept;
	} cases[] = {
	    {"uid=u1,ou=people,dc=x", 1},
	    {" cn = a b  +SN=c ,dc=x", 2},
	    {"cn=a+sn=b+uid=c+o=d,dc=x", 4},
	    {"a=1+b=2+c=3+d=4+e=5,dc=x", 0},
	    {" CN = Smith\\, J\\  , dc=#4142", 0},
	    {"dc=#4142,dc=x", 0},
	    {"cn=x+sn=\\41", 0},
	    {"cn=", 1},
	};
	struct store_ndn n = STORE_NDN_INIT;
	for (size_t i = 0; i < IDC_ARRAY_SIZE(cases); i++) {
		const char *dn = cases[i].dn;
		struct seen all = {.n = 0, .stop_at = 0}, got = {.n = 0, .stop_at = 0};
		assert_int_equal(store_dn_normalize(dn, strlen(dn), &n, NULL), 0);
		assert_int_equal(n.nava0, cases[i].kept);
		assert_int_equal(store_dn_foreach_ava(dn, strlen(dn), record_ava, &all, NULL), 0);
		assert_int_equal(store_dn_rdn0_avas(&n, dn, strlen(dn), record_ava, &got, NULL), 0);
		size_t want = 0;
		while (want < all.n && all.text[want][0] == '0')
			want++;
		assert_int_equal(got.n, want);
		for (size_t k = 0; k < want; k++)
			assert_string_equal(got.text[k], all.text[k]);
		/* the callback's value is returned */
		got = (struct seen){.n = 0, .stop_at = 1};
		assert_int_equal(store_dn_rdn0_avas(&n, dn, strlen(dn), record_ava, &got, NULL),
				 42);
	}
	store_ndn_free(&n);
}

/* Normalizing a normalized DN gives it back unchanged. */
static void test_dn_fixed_point(void **state)
{
	(void)state;
	const char *dns[] = {
	    "CN=Smith\\, John+SN=x,OU=Sales;DC=Example",
	    "cn=\\ a\\20b\\  ,userPassword=\\ \\#x\\00\\ ",
	    "cn=#23412c,member=UID=A\\,DC=B",
	    "cn=a\\=\\<\\>\\\"\\;\\+,uidNumber=-42",
	    "cn=\xc3\xa9\\c3\\a9\t",
	    "",
	};
	for (size_t i = 0; i < sizeof(dns) / sizeof(dns[0]); i++) {
		struct store_ndn a = STORE_NDN_INIT, b = STORE_NDN_INIT;
		assert_int_equal(store_dn_normalize(dns[i], strlen(dns[i]), &a, NULL), 0);
		assert_int_equal(store_dn_normalize(a.text.data, a.text.len, &b, NULL), 0);
		assert_int_equal(a.text.len, b.text.len);
		assert_memory_equal(a.text.data, b.text.data, a.text.len);
		assert_int_equal(a.nrdn, b.nrdn);
		store_ndn_free(&a);
		store_ndn_free(&b);
	}
}

/* ---- the kept tails (dn.c): a DN whose tail was seen normalizes exactly
 * as in a thread that never saw it ---------------------------------------------------- */

static const char *const tail_dns[] = {
    "uid=a,ou=people,dc=example,dc=com",
    "uid=b,ou=people,dc=example,dc=com",
    "UID=c, OU=People, DC=Example, DC=Com",
    "uid=d, OU=People, DC=Example, DC=Com",
    "cn=g+gidNumber=7,ou=groups,dc=example,dc=com",
    "uid=e,ou=people,dc=example,dc=com",
    "cn=h,ou=groups,dc=example,dc=com",
    "uid=f,ou=people,dc=example,dc=com",
    "uid=\\ x\\2c,cn=a\\,b+sn=Z,dc=example",
    "uid=y,cn=a\\,b+sn=Z,dc=example",
    "uid=y,cn=a\\,b+sn=Z,dc=example ",
    "uid=z,cn=A\\,B+SN=z,dc=example",
    "uid=bad,ou=people,dc=example,dc=com,",
    "uid=g,ou=people,dc=example,dc=com",
    "uid=bad,=x,dc=example",
    "uid=h,=x,dc=example",
    "dc=com",
    "uid=i,dc=com",
    "uid=j,ou=people,dc=example,dc=com",
};

struct tail_ref {
	const char *dn;
	int rc;
	struct store_ndn n;
	char app[512]; /* store_dn_normalize_append after "x" */
};

static void tail_norm(struct tail_ref *r)
{
	r->n = (struct store_ndn)STORE_NDN_INIT;
	r->rc = store_dn_normalize(r->dn, strlen(r->dn), &r->n, NULL);
	struct idc_buf b = IDC_BUF_INIT;
	assert_int_equal(idc_buf_append(&b, "x", 1), 0);
	int rc = store_dn_normalize_append(r->dn, strlen(r->dn), &b, NULL);
	assert_int_equal(rc, r->rc);
	snprintf(r->app, sizeof(r->app), "%s", b.data);
	idc_buf_free(&b);
}

static void *tail_thread(void *arg)
{
	tail_norm(arg); /* a fresh thread: nothing kept */
	return NULL;
}

static void test_dn_tails(void **state)
{
	(void)state;
	size_t n = sizeof(tail_dns) / sizeof(tail_dns[0]);
	struct tail_ref *ref = calloc(n, sizeof(*ref)), *got = calloc(n, sizeof(*got));
	for (size_t i = 0; i < n; i++) {
		ref[i].dn = got[i].dn = tail_dns[i];
		pthread_t th;
		assert_int_equal(pthread_create(&th, NULL, tail_thread, &ref[i]), 0);
		assert_int_equal(pthread_join(th, NULL), 0);
	}
	for (int round = 0; round < 2; round++) {
		for (size_t i = 0; i < n; i++) {
			tail_norm(&got[i]);
			assert_int_equal(got[i].rc, ref[i].rc);
			assert_string_equal(got[i].app, ref[i].app);
			assert_int_equal(got[i].n.nrdn, ref[i].n.nrdn);
			assert_int_equal(got[i].n.text.len, ref[i].n.text.len);
			if (ref[i].n.text.len)
				assert_memory_equal(got[i].n.text.data, ref[i].n.text.data,
						    ref[i].n.text.len);
			assert_memory_equal(got[i].n.off, ref[i].n.off,
					    (ref[i].n.nrdn + 1) * sizeof(size_t));
			store_ndn_free(&got[i].n);
		}
	}
	for (size_t i = 0; i < n; i++)
		store_ndn_free(&ref[i].n);
	assert_int_equal(ref[12].rc, IDC_ESYNTAX); /* the failing tails stayed failing */
	assert_int_equal(ref[15].rc, IDC_ESYNTAX);
	free(ref);
	free(got);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_attr_canon),
	    cmocka_unit_test(test_attr_aliases),
	    cmocka_unit_test(test_attr_rule),
	    cmocka_unit_test(test_rule_by_name),
	    cmocka_unit_test(test_norm_text),
	    cmocka_unit_test(test_prep_word_run),
	    cmocka_unit_test(test_norm_unicode),
	    cmocka_unit_test(test_norm_integer),
	    cmocka_unit_test(test_norm_integer_order),
	    cmocka_unit_test(test_norm_dn_rule),
	    cmocka_unit_test(test_dn_basic),
	    cmocka_unit_test(test_dn_root),
	    cmocka_unit_test(test_dn_escapes),
	    cmocka_unit_test(test_dn_hexstring),
	    cmocka_unit_test(test_dn_multivalued),
	    cmocka_unit_test(test_dn_values_by_rule),
	    cmocka_unit_test(test_dn_errors),
	    cmocka_unit_test(test_dn_limits),
	    cmocka_unit_test(test_dn_rkey),
	    cmocka_unit_test(test_dn_reuse),
	    cmocka_unit_test(test_foreach_ava),
	    cmocka_unit_test(test_rdn0_avas),
	    cmocka_unit_test(test_dn_fixed_point),
	    cmocka_unit_test(test_dn_tails),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
