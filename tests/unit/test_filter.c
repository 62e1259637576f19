/*
 * Unit tests for src/store/filter.c: every RFC 4515 form, three-valued
 * evaluation on hand-built entries, the canonical format and its round trip,
 * and malformed filters with the positions their errors name.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "store/store_int.h"

#define V(s)                                                                                       \
	{                                                                                          \
		s, sizeof(s) - 1                                                                   \
	}
#define ATTR(n, vals)                                                                              \
	{                                                                                          \
		V(n), V(n), vals, IDC_ARRAY_SIZE(vals)                                             \
	}

/* ---- entries, attributes sorted by norm --------------------------------------- */

static struct store_val alice_cn[] = {V("Alice  Smith"), V("alice s")};
static struct store_val alice_desc[] = {V("(a*b)\\"), V("x\0y"), V("  Space  Case  ")};
static struct store_val alice_gid[] = {V("100")};
static struct store_val alice_home[] = {V("/home/alice")};
static struct store_val alice_memberof[] = {V("cn=Wheel,ou=Groups,dc=example,dc=com")};
static struct store_val alice_oc[] = {V("top"), V("posixAccount"), V("inetOrgPerson")};
static struct store_val alice_uid[] = {V("alice")};
static struct store_val alice_uidnum[] = {V("1000")};

static struct store_attr alice_attrs[] = {
    ATTR("cn", alice_cn),
    ATTR("description", alice_desc),
    ATTR("gidnumber", alice_gid),
    ATTR("homedirectory", alice_home),
    ATTR("memberof", alice_memberof),
    ATTR("objectclass", alice_oc),
    ATTR("uid", alice_uid),
    ATTR("uidnumber", alice_uidnum),
};

static const struct store_entry alice = {0, V("uid=alice,ou=people,dc=example,dc=com"), alice_attrs,
					 IDC_ARRAY_SIZE(alice_attrs)};

static struct store_val devs_cn[] = {V("devs")};
static struct store_val devs_gid[] = {V("-20")};
static struct store_val devs_memberuid[] = {V("Bob"), V("carol")};
static struct store_val devs_oc[] = {V("posixGroup")};

static struct store_attr devs_attrs[] = {
    ATTR("cn", devs_cn),
    ATTR("gidnumber", devs_gid),
    ATTR("memberuid", devs_memberuid),
    ATTR("objectclass", devs_oc),
};

static const struct store_entry devs = {0, V("cn=devs,ou=groups,dc=example,dc=com"), devs_attrs,
					IDC_ARRAY_SIZE(devs_attrs)};

/* ---- helpers -------------------------------------------------------------------- */

static const char *result_name(int r)
{
	return r == SF_TRUE ? "TRUE" : r == SF_FALSE ? "FALSE" : r == SF_UNDEF ? "UNDEF" : "?";
}

/* format(parse(format(parse(text)))) must equal format(parse(text)). */
static void check_round_trip(const char *text, size_t len)
{
	struct store_filter *f = NULL, *g = NULL;
	struct idc_buf a = IDC_BUF_INIT, b = IDC_BUF_INIT;
	struct idc_diag d = {{0}};
	assert_int_equal(store_filter_parse(text, len, &f, &d), 0);
	assert_int_equal(store_filter_format(f, &a), 0);
	if (store_filter_parse(a.data, a.len, &g, &d) != 0) {
		print_error("re-parse of '%s' (from '%s'): %s\n", a.data, text, d.msg);
		fail();
	}
	assert_int_equal(store_filter_format(g, &b), 0);
	assert_int_equal(a.len, b.len);
	assert_memory_equal(a.data, b.data, a.len);
	store_filter_free(f);
	store_filter_free(g);
	idc_buf_free(&a);
	idc_buf_free(&b);
}

static void expect_eval(const struct store_entry *e, const char *text, int want, int line)
{
	struct store_filter *f = NULL;
	struct idc_diag d = {{0}};
	struct idc_buf scratch = IDC_BUF_INIT;
	int rc = store_filter_parse(text, strlen(text), &f, &d);
	if (rc != 0) {
		print_error("line %d: '%s' does not parse: %s\n", line, text, d.msg);
		fail();
	}
	int got = store_filter_eval(f, e, &scratch);
	if (got != want) {
		print_error("line %d: '%s' on %.*s: got %s, want %s\n", line, text, (int)e->dn.len,
			    e->dn.ptr, result_name(got), result_name(want));
		fail();
	}
	assert_int_equal(store_filter_match(f, e, &scratch), want == SF_TRUE);
	store_filter_free(f);
	idc_buf_free(&scratch);
	check_round_trip(text, strlen(text));
}

#define EXPECT(e, text, want) expect_eval(&(e), text, want, __LINE__)

static void expect_format(const char *text, size_t len, const char *want, int line)
{
	struct store_filter *f = NULL;
	struct idc_diag d = {{0}};
	struct idc_buf out = IDC_BUF_INIT;
	if (store_filter_parse(text, len, &f, &d) != 0) {
		print_error("line %d: '%s' does not parse: %s\n", line, text, d.msg);
		fail();
	}
	assert_int_equal(store_filter_format(f, &out), 0);
	if (strcmp(out.data, want) != 0) {
		print_error("line %d: '%s' formats as '%s', want '%s'\n", line, text, out.data,
			    want);
		fail();
	}
	store_filter_free(f);
	idc_buf_free(&out);
	check_round_trip(text, len);
}

#define FORMAT(text, want) expect_format(text, strlen(text), want, __LINE__)

static void expect_error(const char *text, size_t len, int want_rc, const char *want_msg, int line)
{
	struct store_filter *f = (struct store_filter *)&f; /* must come back NULL */
	struct idc_diag d = {{0}};
	int rc = store_filter_parse(text, len, &f, &d);
	if (rc != want_rc || !strstr(d.msg, want_msg)) {
		print_error("line %d: '%.*s': rc %d '%s', want %d with '%s'\n", line,
			    (int)(len > 80 ? 80 : len), text ? text : "", rc, d.msg, want_rc,
			    want_msg);
		fail();
	}
	assert_null(f);
}

#define ERROR(text, msg) expect_error(text, strlen(text), IDC_ESYNTAX, msg, __LINE__)

/* ---- tests ----------------------------------------------------------------------- */

static void test_entries_sorted(void **state)
{
	(void)state;
	for (size_t i = 1; i < alice.nattrs; i++)
		assert_true(strcmp(alice.attrs[i - 1].norm.ptr, alice.attrs[i].norm.ptr) < 0);
	for (size_t i = 1; i < devs.nattrs; i++)
		assert_true(strcmp(devs.attrs[i - 1].norm.ptr, devs.attrs[i].norm.ptr) < 0);
}

static void test_equality(void **state)
{
	(void)state;
	EXPECT(alice, "(uid=alice)", SF_TRUE);
	EXPECT(alice, "(UID=ALICE)", SF_TRUE);
	EXPECT(alice, "(uid=bob)", SF_FALSE);
	EXPECT(alice, "(cn=alice smith)", SF_TRUE);
	EXPECT(alice, "(cn=  ALICE   SMITH )", SF_TRUE);
	EXPECT(alice, "(cn=alicesmith)", SF_FALSE);
	EXPECT(alice, "(cn=alice)", SF_FALSE);
	EXPECT(alice, "(objectClass=POSIXACCOUNT)", SF_TRUE);
	EXPECT(alice, "(uidNumber=1000)", SF_TRUE);
	EXPECT(alice, "(uidNumber=999)", SF_FALSE);
	EXPECT(alice, "(description=space case)", SF_TRUE);
	EXPECT(alice, "(memberOf=cn=wheel,ou=groups,dc=example,dc=com)", SF_TRUE);
	EXPECT(alice, "(memberOf=cn=other,ou=groups,dc=example,dc=com)", SF_FALSE);
	EXPECT(devs, "(memberUid=Bob)", SF_TRUE);
	EXPECT(devs, "(memberUid=bob)", SF_FALSE); /* caseExact */
	EXPECT(alice, "(uid=)", SF_FALSE);
}

static void test_approx_presence_absent(void **state)
{
	(void)state;
	EXPECT(alice, "(uid~=ALICE)", SF_TRUE);
	EXPECT(alice, "(uid~=bob)", SF_FALSE);
	EXPECT(alice, "(objectClass=*)", SF_TRUE);
	EXPECT(devs, "(objectclass=*)", SF_TRUE);
	EXPECT(alice, "(mail=*)", SF_FALSE);
	EXPECT(alice, "(mail=x)", SF_FALSE);
	EXPECT(alice, "(mail~=x)", SF_FALSE);
	EXPECT(alice, "(mail>=a)", SF_FALSE);
	EXPECT(alice, "(mail<=z)", SF_FALSE);
	EXPECT(alice, "(mail=a*)", SF_FALSE);
	EXPECT(alice, "(!(mail=x))", SF_TRUE);
	EXPECT(devs, "(uid=*)", SF_FALSE);
}

static void test_ordering(void **state)
{
	(void)state;
	EXPECT(alice, "(uidNumber>=999)", SF_TRUE);
	EXPECT(alice, "(uidNumber>=1000)", SF_TRUE);
	EXPECT(alice, "(uidNumber>=1001)", SF_FALSE);
	EXPECT(alice, "(uidNumber>=200)", SF_TRUE); /* numeric, not text order */
	EXPECT(alice, "(uidNumber<=200)", SF_FALSE);
	EXPECT(alice, "(uidNumber<=1000)", SF_TRUE);
	EXPECT(alice, "(uidNumber<=-1)", SF_FALSE);
	EXPECT(alice, "(uidNumber>=-1000000)", SF_TRUE);
	EXPECT(devs, "(gidNumber>=-21)", SF_TRUE);
	EXPECT(devs, "(gidNumber>=-20)", SF_TRUE);
	EXPECT(devs, "(gidNumber>=-19)", SF_FALSE);
	EXPECT(devs, "(gidNumber<=-20)", SF_TRUE);
	EXPECT(devs, "(gidNumber<=-21)", SF_FALSE);
	EXPECT(devs, "(gidNumber<=0)", SF_TRUE);
	EXPECT(devs, "(gidNumber>=0)", SF_FALSE);
	EXPECT(devs, "(gidNumber<=9223372036854775807)", SF_TRUE);
	EXPECT(devs, "(gidNumber>=-9223372036854775808)", SF_TRUE);
	/* strings: memcmp order of the normalized forms */
	EXPECT(alice, "(cn>=alice)", SF_TRUE);
	EXPECT(alice, "(cn<=alice)", SF_FALSE);
	EXPECT(alice, "(cn<=ALICE S)", SF_TRUE);
	EXPECT(alice, "(uid>=alicf)", SF_FALSE);
	EXPECT(alice, "(uid<=b)", SF_TRUE);
}

static void test_undefined(void **state)
{
	(void)state;
	EXPECT(alice, "(uidNumber=abc)", SF_UNDEF);
	EXPECT(alice, "(!(uidNumber=abc))", SF_UNDEF);
	EXPECT(alice, "(uidNumber>=abc)", SF_UNDEF);
	EXPECT(alice, "(!(uidNumber<=1.5))", SF_UNDEF);
	EXPECT(alice, "(uidNumber~=01)", SF_UNDEF);
	EXPECT(alice, "(uidNumber=99999999999999999999)", SF_UNDEF);
	EXPECT(devs, "(uidNumber=abc)", SF_UNDEF); /* invalid even where absent */
	EXPECT(alice, "(|(uidNumber=abc)(uid=alice))", SF_TRUE);
	EXPECT(alice, "(|(uidNumber=abc)(uid=bob))", SF_UNDEF);
	EXPECT(alice, "(&(uidNumber=abc)(uid=bob))", SF_FALSE);
	EXPECT(alice, "(&(uidNumber=abc)(uid=alice))", SF_UNDEF);
	EXPECT(alice, "(!(&(uidNumber=abc)(uid=alice)))", SF_UNDEF);
	EXPECT(alice, "(:integerMatch:=abc)", SF_UNDEF);
	/* substrings on an integer attribute stay raw and are never undefined */
	EXPECT(alice, "(uidNumber=a*)", SF_FALSE);
}

static void test_boolean(void **state)
{
	(void)state;
	EXPECT(alice, "(&)", SF_TRUE);
	EXPECT(alice, "(|)", SF_FALSE);
	EXPECT(alice, "(!(&))", SF_FALSE);
	EXPECT(alice, "(!(|))", SF_TRUE);
	EXPECT(alice, "(&(uid=alice)(objectClass=posixAccount))", SF_TRUE);
	EXPECT(alice, "(&(uid=alice)(objectClass=posixGroup))", SF_FALSE);
	EXPECT(alice, "(|(uid=bob)(uid=carol)(uid=alice))", SF_TRUE);
	EXPECT(alice, "(|(uid=bob)(uid=carol))", SF_FALSE);
	EXPECT(alice, "(!(uid=alice))", SF_FALSE);
	EXPECT(alice, "(!(!(uid=alice)))", SF_TRUE);
	EXPECT(alice, "(&(|(uid=bob)(&(uidNumber>=1000)(!(gidNumber=5))))(objectclass=top))",
	       SF_TRUE);
	EXPECT(devs, "(&(|(uid=bob)(&(uidNumber>=1000)(!(gidNumber=5))))(objectclass=top))",
	       SF_FALSE);
	EXPECT(devs, "(|(&(objectClass=posixGroup)(memberUid=carol))(uid=x))", SF_TRUE);
	/* lenient forms */
	EXPECT(alice, "uid=alice", SF_TRUE);
	EXPECT(alice, "  uid=alice \t\n", SF_TRUE);
	EXPECT(alice, " (uid=alice) ", SF_TRUE);
	EXPECT(alice, "&(uid=alice)(uidNumber=1000)", SF_TRUE);
	EXPECT(alice, "(& (uid=alice) (uidNumber=1000) )", SF_TRUE);
	EXPECT(alice, "(! (uid=bob))", SF_TRUE);
	EXPECT(alice, "!(uid=bob)", SF_TRUE);
}

static void test_substrings(void **state)
{
	(void)state;
	EXPECT(alice, "(cn=ali*)", SF_TRUE);
	EXPECT(alice, "(cn=*SMITH)", SF_TRUE);
	EXPECT(alice, "(cn=*mit*)", SF_TRUE);
	EXPECT(alice, "(cn=a*i*e*s*h)", SF_TRUE);
	EXPECT(alice, "(cn=a*h*i)", SF_FALSE); /* any parts must come in order */
	EXPECT(alice, "(cn=*lice s*)", SF_TRUE);
	EXPECT(alice, "(cn=*lice   s*)", SF_TRUE); /* inner runs fold */
	EXPECT(alice, "(cn=  alice*)", SF_TRUE);   /* leading spaces of initial drop */
	EXPECT(alice, "(cn=*smith  )", SF_TRUE);   /* trailing spaces of final drop */
	EXPECT(alice, "(cn=alice *)", SF_TRUE);
	EXPECT(alice, "(cn=alice*ce s)", SF_FALSE); /* initial and final may not overlap */
	EXPECT(alice, "(cn=alice*s)", SF_TRUE);
	EXPECT(alice, "(cn=*x*)", SF_FALSE);
	EXPECT(alice, "(cn=a**s)", SF_TRUE);
	EXPECT(alice, "(cn=*)", SF_TRUE);
	EXPECT(alice, "(uidNumber=10*)", SF_TRUE);
	EXPECT(alice, "(uidNumber=*00)", SF_TRUE);
	EXPECT(alice, "(uidNumber=*5*)", SF_FALSE);
	EXPECT(devs, "(gidNumber=-*)", SF_TRUE);
	EXPECT(devs, "(memberUid=B*)", SF_TRUE);
	EXPECT(devs, "(memberUid=b*)", SF_FALSE); /* caseExact parts keep case */
	EXPECT(alice, "(memberOf=cn=wheel,*)", SF_TRUE);
}

/* caseIgnore/caseExact under RFC 4518: Unicode case folding and NFKC, for
 * equality, ordering and every kind of substring part. */
static void test_unicode(void **state)
{
	(void)state;
	static struct store_val desc[] = {V("\u00DCN\u00CFCODE  Stra\u00DFe")};
	static struct store_val cn[] = {V("Ce\u0301line \uFB01sh")};
	static struct store_val home[] = {V("/home/\u00C9mile")};
	static struct store_attr attrs[] = {ATTR("cn", cn), ATTR("description", desc),
					    ATTR("homedirectory", home)};
	const struct store_entry e = {0, V("cn=x"), attrs, IDC_ARRAY_SIZE(attrs)};
	EXPECT(e, "(description=\u00FCn\u00EFcode*)", SF_TRUE);
	EXPECT(e, "(description=*STRASSE)", SF_TRUE);
	EXPECT(e, "(description=*code stra*)", SF_TRUE);
	EXPECT(e, "(description=\u00FCn\u00EFcode strasse)", SF_TRUE);
	EXPECT(e, "(description=unicode*)", SF_FALSE);
	EXPECT(e, "(cn=c\u00E9line fish)", SF_TRUE);
	EXPECT(e, "(cn=C\u00C9LINE*)", SF_TRUE);
	EXPECT(e, "(cn=*\uFF46\uFF49sh)", SF_TRUE); /* full-width fi */
	EXPECT(e, "(cn>=c\u00E9line fish)", SF_TRUE);
	EXPECT(e, "(cn<=celine)", SF_FALSE);
	EXPECT(e, "(homeDirectory=/home/E\u0301mile)", SF_TRUE); /* caseExact: NFKC */
	EXPECT(e, "(homeDirectory=/home/\u00E9mile)", SF_FALSE);
	EXPECT(e, "(homeDirectory=/home/\u00C9*)", SF_TRUE);
}

static void test_escapes(void **state)
{
	(void)state;
	EXPECT(alice, "(description=\\28a\\2ab\\29\\5c)", SF_TRUE);
	EXPECT(alice, "(description=\\28A\\2AB\\29\\5C)", SF_TRUE);
	EXPECT(alice, "(description=\\(a\\*b\\)\\\\)", SF_TRUE); /* RFC 1960 */
	EXPECT(alice, "(description=*\\2a*)", SF_TRUE);
	EXPECT(alice, "(description=\\28*)", SF_TRUE);
	EXPECT(alice, "(description=*\\5c)", SF_TRUE);
	EXPECT(alice, "(description=x\\00y)", SF_TRUE);
	EXPECT(alice, "(description=x*y)", SF_TRUE);
	EXPECT(alice, "(description=x\\00z)", SF_FALSE);
	EXPECT(alice, "(uid=\\61lice)", SF_TRUE);
}

static void test_extensible(void **state)
{
	(void)state;
	/* :dn: — alice has no ou attribute, only an ou in her DN */
	EXPECT(alice, "(ou:dn:=people)", SF_TRUE);
	EXPECT(alice, "(ou=people)", SF_FALSE);
	EXPECT(alice, "(ou:=people)", SF_FALSE);
	EXPECT(alice, "(OU:DN:=PEOPLE)", SF_TRUE);
	EXPECT(alice, "(ou:dn:=groups)", SF_FALSE);
	EXPECT(alice, "(dc:dn:=example)", SF_TRUE);
	EXPECT(alice, "(cn:dn:=people)", SF_FALSE);
	EXPECT(alice, "(uid:dn:=alice)", SF_TRUE);
	EXPECT(devs, "(ou:dn:=groups)", SF_TRUE);
	EXPECT(alice, "(:dn:caseExactMatch:=people)", SF_TRUE);
	EXPECT(alice, "(:dn:caseExactMatch:=People)", SF_FALSE);
	EXPECT(alice, "(ou:dn:caseExactMatch:=people)", SF_TRUE);
	EXPECT(alice, "(ou:dn:2.5.13.5:=People)", SF_FALSE);
	EXPECT(alice, "(ou:dn:caseIgnoreMatch:=People)", SF_TRUE);
	/* a rule overrides the attribute's */
	EXPECT(alice, "(uid=Alice)", SF_TRUE);
	EXPECT(alice, "(uid:=Alice)", SF_TRUE);
	EXPECT(alice, "(uid:caseExactMatch:=Alice)", SF_FALSE);
	EXPECT(alice, "(uid:caseExactMatch:=alice)", SF_TRUE);
	EXPECT(alice, "(uid:2.5.13.5:=Alice)", SF_FALSE);
	EXPECT(alice, "(uid:CASEEXACTMATCH:=alice)", SF_TRUE);
	EXPECT(devs, "(memberUid:caseIgnoreMatch:=bob)", SF_TRUE);
	EXPECT(alice, "(uid:integerMatch:=1)", SF_FALSE); /* no uid value is an integer */
	/* no attribute: every attribute whose values fit the rule */
	EXPECT(alice, "(:caseExactMatch:=inetOrgPerson)", SF_TRUE);
	EXPECT(alice, "(:caseExactMatch:=inetorgperson)", SF_FALSE);
	EXPECT(alice, "(:caseIgnoreMatch:=inetorgperson)", SF_TRUE);
	EXPECT(alice, "(:integerMatch:=1000)", SF_TRUE);
	EXPECT(alice, "(:integerMatch:=100)", SF_TRUE);
	EXPECT(alice, "(:integerMatch:=7)", SF_FALSE);
	EXPECT(alice, "(:2.5.13.14:=1000)", SF_TRUE);
	EXPECT(alice, "(:octetStringMatch:=alice s)", SF_TRUE);
	EXPECT(alice, "(:octetStringMatch:=Alice s)", SF_FALSE);
	EXPECT(alice, "(:caseIgnoreMatch:=people)", SF_FALSE);
	EXPECT(alice, "(!(ou:dn:=people))", SF_FALSE);
}

static void test_format(void **state)
{
	(void)state;
	FORMAT("(&(UID=Alice)(objectClass=*))", "(&(uid=Alice)(objectclass=*))");
	FORMAT("  uid=alice  ", "(uid=alice)");
	FORMAT("&(a=1)(b=2)", "(&(a=1)(b=2))");
	FORMAT("(& (a=1) (b=2) )", "(&(a=1)(b=2))");
	FORMAT("(cn=a\\2A\\28\\29\\5C)", "(cn=a\\2a\\28\\29\\5c)");
	FORMAT("(cn=\\(x\\)\\*\\\\)", "(cn=\\28x\\29\\2a\\5c)");
	FORMAT("(cn=a\\00b\\0a\\7f)", "(cn=a\\00b\\0a\\7f)");
	FORMAT("(cn=\\c3\\a9t\\C3\\A9)", "(cn=\xc3\xa9t\xc3\xa9)");
	FORMAT("(cn= keep  spaces )", "(cn= keep  spaces )");
	FORMAT("(CN:DN:2.5.13.5:=x)", "(cn:dn:caseExactMatch:=x)");
	FORMAT("(:DN:integerMatch:=-1)", "(:dn:integerMatch:=-1)");
	FORMAT("(ou:dn:=People)", "(ou:dn:=People)");
	FORMAT("(uid:=x)", "(uid:=x)");
	FORMAT("(:2.5.13.2:=x)", "(:caseIgnoreMatch:=x)");
	FORMAT("(cn=  Foo  *BAR   baz*  *qux  )", "(cn=foo *bar baz* *qux)");
	FORMAT("(memberUid=Ab*C)", "(memberuid=Ab*C)");
	FORMAT("(uidNumber=10*0)", "(uidnumber=10*0)");
	FORMAT("(cn=a**b)", "(cn=a*b)");
	FORMAT("(cn=**)", "(cn=*)");
	FORMAT("(cn=*\\2a*)", "(cn=*\\2a*)");
	FORMAT("(!(|(a=1)(b>=2)(c<=3)(d~=4)))", "(!(|(a=1)(b>=2)(c<=3)(d~=4)))");
	FORMAT("(&)", "(&)");
	FORMAT("(|)", "(|)");
	FORMAT("(uidNumber=abc)", "(uidnumber=abc)");
	FORMAT("(uid=)", "(uid=)");

	/* format appends */
	struct store_filter *f;
	struct idc_buf out = IDC_BUF_INIT;
	assert_int_equal(store_filter_parse("uid=a", 5, &f, NULL), 0);
	assert_int_equal(idc_buf_append(&out, "x", 1), 0);
	assert_int_equal(store_filter_format(f, &out), 0);
	assert_string_equal(out.data, "x(uid=a)");
	store_filter_free(f);
	idc_buf_free(&out);
	store_filter_free(NULL);
}

static void test_tree(void **state)
{
	(void)state;
	struct store_filter *f;
	const char *text = "(&(cn=A*b*c*D)(uidNumber>=-5)(x:dn:caseExactMatch:=Y))";
	assert_int_equal(store_filter_parse(text, strlen(text), &f, NULL), 0);
	assert_int_equal(f->type, SF_AND);
	assert_int_equal(f->nkids, 3);
	const struct store_filter *s = f->kids[0], *ge = f->kids[1], *ext = f->kids[2];
	assert_int_equal(s->type, SF_SUBSTR);
	assert_string_equal(s->attr, "cn");
	assert_int_equal(s->initial.len, 1);
	assert_memory_equal(s->initial.ptr, "a", 1);
	assert_int_equal(s->nany, 2);
	assert_memory_equal(s->any[1].ptr, "c", 1);
	assert_memory_equal(s->final.ptr, "d", 1);
	assert_int_equal(ge->type, SF_GE);
	assert_int_equal(ge->rule, STORE_RULE_INTEGER);
	assert_true(ge->valid);
	assert_int_equal(ge->norm.len, 8);
	assert_int_equal(ge->raw.len, 2);
	assert_int_equal(ext->type, SF_EXT);
	assert_true(ext->has_rule);
	assert_true(ext->dn_attrs);
	assert_int_equal(ext->rule, STORE_RULE_CASE_EXACT);
	assert_memory_equal(ext->norm.ptr, "Y", 1);
	store_filter_free(f);
}

static void test_errors(void **state)
{
	(void)state;
	ERROR("(uid=a", "position 6: missing ')'");
	ERROR("(uid=a))", "position 7: unexpected ')' after the filter");
	ERROR("((uid=a)", "position 1: ");
	ERROR("(&(uid=a)", "position 9: ");
	ERROR("(uid~a)", "position 4: ");
	ERROR("(:=x)", "position 1: ");
	ERROR("(uid:nosuchrule:=x)", "position 5: unknown matching rule 'nosuchrule'");
	ERROR("(uid=a\\zz)", "position 6: ");
	ERROR("", "position 0: ");
	ERROR("   ", "position 0: empty filter");
	ERROR("()", "position 1: ");
	ERROR("(uid=a\\2)", "position 6: ");
	ERROR("(uid=a\\", "position 6: ");
	ERROR("(uid=a\\4", "position 6: ");
	ERROR("(uid=a(b)", "position 6: ");
	ERROR("(uid>=a*)", "position 7: ");
	ERROR("(uid~=*)", "position 6: ");
	ERROR("(uid:=a*)", "position 7: ");
	ERROR("(u_id=a)", "position 1: invalid attribute description 'u_id'");
	ERROR("(uid =a)", "position 1: ");
	ERROR("(uid)", "position 4: ");
	ERROR("(uid", "position 4: ");
	ERROR("(!uid=a)", "position 2: ");
	ERROR("(!(a=1)(b=2))", "position 7: ");
	ERROR("(&(a=1)x)", "position 7: ");
	ERROR("(:dn:=x)", "position 1: ");
	ERROR("(uid::=x)", "position 5: ");
	ERROR("(uid:dn:dn:=x)", "position 8: ");
	ERROR("(uid:caseExactMatch:dn:=x)", "position 20: ");
	ERROR("(uid:dn)", "position 7: ");
	ERROR("(uid=a)(uid=b)", "position 7: ");
	ERROR("uid=a)", "position 5: ");
	ERROR("(*=a)", "position 1: ");
	ERROR("(=a)", "position 1: ");
	expect_error("(uid=a\0b)", 9, IDC_ESYNTAX, "position 6: ", __LINE__);
	expect_error("(uid=a)", 0, IDC_ESYNTAX, "position 0: ", __LINE__);
	expect_error("(a=b)\0", 6, IDC_ESYNTAX, "position 5: unexpected byte 0x00", __LINE__);
	expect_error(NULL, 0, IDC_ESYNTAX, "position 0: empty filter", __LINE__);
}

static void test_limits(void **state)
{
	(void)state;
	struct store_filter *f;
	size_t n = 256, len = 0;
	char *text = malloc(4 * 300 + 16);
	assert_non_null(text);
	/* 256 levels: 255 NOTs around one item */
	for (size_t i = 0; i < n - 1; i++)
		len += (size_t)sprintf(text + len, "(!");
	len += (size_t)sprintf(text + len, "(a=b)");
	for (size_t i = 0; i < n - 1; i++)
		text[len++] = ')';
	assert_int_equal(store_filter_parse(text, len, &f, NULL), 0);
	store_filter_free(f);
	/* 257 levels */
	len = 0;
	for (size_t i = 0; i < n; i++)
		len += (size_t)sprintf(text + len, "(!");
	len += (size_t)sprintf(text + len, "(a=b)");
	for (size_t i = 0; i < n; i++)
		text[len++] = ')';
	expect_error(text, len, -E2BIG, "nested deeper", __LINE__);
	free(text);

	size_t big = (1u << 20) + 1;
	text = malloc(big);
	assert_non_null(text);
	memset(text, 'a', big);
	memcpy(text, "(cn=", 4);
	text[big - 1] = ')';
	expect_error(text, big, -E2BIG, "longer than", __LINE__);
	/* exactly 1 MiB parses */
	text[big - 2] = ')';
	assert_int_equal(store_filter_parse(text, big - 1, &f, NULL), 0);
	store_filter_free(f);
	free(text);
}

static void test_wide_or(void **state)
{
	(void)state;
	/* many members: kids array growth */
	struct idc_buf b = IDC_BUF_INIT;
	assert_int_equal(idc_buf_append(&b, "(|", 2), 0);
	for (int i = 0; i < 5000; i++)
		assert_int_equal(idc_buf_printf(&b, "(uidnumber=%d)", i), 0);
	assert_int_equal(idc_buf_putc(&b, ')'), 0);
	struct store_filter *f;
	assert_int_equal(store_filter_parse(b.data, b.len, &f, NULL), 0);
	assert_int_equal(f->nkids, 5000);
	struct idc_buf scratch = IDC_BUF_INIT;
	assert_int_equal(store_filter_eval(f, &alice, &scratch), SF_TRUE);
	assert_int_equal(store_filter_eval(f, &devs, &scratch), SF_FALSE);
	struct idc_buf out = IDC_BUF_INIT;
	assert_int_equal(store_filter_format(f, &out), 0);
	assert_string_equal(out.data, b.data);
	store_filter_free(f);
	idc_buf_free(&b);
	idc_buf_free(&out);
	idc_buf_free(&scratch);
}

/* The equality fast path folds spaces and case itself; it must agree with
 * store_normalize on every value. */
static void test_fold_agrees_with_normalize(void **state)
{
	(void)state;
	static const char *const vals[] = {
	    "",
	    " ",
	    "  ",
	    "a",
	    " a",
	    "a ",
	    " a ",
	    "a  b",
	    "A B",
	    "  A   b  C ",
	    "\xc3\x89t\xc3\xa9",
	    "a\tb",
	    "a\\b",
	    "MiXeD  CaSe",
	    "z",
	    "cafe\xcc\x81", /* e + U+0301: the ASCII prefix changes */
	    "caf\xc3\xa9",  /* precomposed */
	    "CAF\xc3\x89",
	    "cafe",
	    "\xef\xac\x81", /* the ligature fi */
	    "fi",
	    "FI",
	    "a\xc2\xa0 b", /* no-break space */
	    "a\x7f",
	    "\xff"
	    "A", /* not UTF-8 */
	    "\xff"
	    "a",
	};
	struct idc_buf nv = IDC_BUF_INIT, nf = IDC_BUF_INIT, scratch = IDC_BUF_INIT;
	for (int r = STORE_RULE_CASE_IGNORE; r <= STORE_RULE_CASE_EXACT; r++) {
		for (size_t i = 0; i < IDC_ARRAY_SIZE(vals); i++) {
			struct store_val v = {vals[i], strlen(vals[i])};
			struct store_attr a = {V("x"), V("x"), &v, 1};
			struct store_entry e = {0, V(""), &a, 1};
			for (size_t j = 0; j < IDC_ARRAY_SIZE(vals); j++) {
				idc_buf_reset(&nv);
				idc_buf_reset(&nf);
				int rv = store_normalize(r, vals[i], strlen(vals[i]), &nv, NULL);
				int rf = store_normalize(r, vals[j], strlen(vals[j]), &nf, NULL);
				if (rv || rf)
					continue;
				bool eq = nv.len == nf.len &&
					  (nv.len == 0 || memcmp(nv.data, nf.data, nv.len) == 0);
				struct idc_buf text = IDC_BUF_INIT;
				assert_int_equal(idc_buf_printf(&text, "(x:%s:=",
								r == STORE_RULE_CASE_EXACT
								    ? "caseExactMatch"
								    : "caseIgnoreMatch"),
						 0);
				for (const char *c = vals[j]; *c; c++)
					assert_int_equal(
					    idc_buf_printf(&text, "\\%02x", (unsigned char)*c), 0);
				assert_int_equal(idc_buf_putc(&text, ')'), 0);
				struct store_filter *f;
				assert_int_equal(store_filter_parse(text.data, text.len, &f, NULL),
						 0);
				int got = store_filter_eval(f, &e, &scratch);
				if (got != (eq ? SF_TRUE : SF_FALSE)) {
					print_error("rule %d: '%s' vs '%s': got %s\n", r, vals[i],
						    vals[j], result_name(got));
					fail();
				}
				store_filter_free(f);
				idc_buf_free(&text);
			}
		}
	}
	idc_buf_free(&nv);
	idc_buf_free(&nf);
	idc_buf_free(&scratch);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_entries_sorted),
	    cmocka_unit_test(test_equality),
	    cmocka_unit_test(test_approx_presence_absent),
	    cmocka_unit_test(test_ordering),
	    cmocka_unit_test(test_undefined),
	    cmocka_unit_test(test_boolean),
	    cmocka_unit_test(test_substrings),
	    cmocka_unit_test(test_unicode),
	    cmocka_unit_test(test_escapes),
	    cmocka_unit_test(test_extensible),
	    cmocka_unit_test(test_format),
	    cmocka_unit_test(test_tree),
	    cmocka_unit_test(test_errors),
	    cmocka_unit_test(test_limits),
	    cmocka_unit_test(test_wide_or),
	    cmocka_unit_test(test_fold_agrees_with_normalize),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
