/*
 * LDIF reader and writer: every record kind and error of the reader with
 * the line it names, the writer's exact text (base64, folding, attribute
 * selection), and write-then-read round trips with random binary values.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "store/store.h"

#define V(s) ((struct store_val){(s), sizeof(s) - 1})

/* A reader over text (len bytes) held in memory. */
struct src {
	FILE *f;
	struct ldif_reader *r;
	struct idc_diag d;
};

static void src_open(struct src *s, const char *text, size_t len)
{
	memset(s, 0, sizeof(*s));
	s->f = fmemopen((void *)text, len, "r");
	assert_non_null(s->f);
	assert_int_equal(ldif_open(s->f, "t.ldif", &s->r), 0);
}

static void src_close(struct src *s)
{
	ldif_close(s->r);
	fclose(s->f);
}

static int next(struct src *s, struct ldif_record *rec)
{
	return ldif_next(s->r, rec, &s->d);
}

static void assert_val(struct store_val v, const char *want, size_t wantlen)
{
	assert_int_equal(v.len, wantlen);
	assert_memory_equal(v.ptr, want, wantlen);
}

#define assert_val_str(v, s) assert_val((v), (s), strlen(s))

static void assert_pair(const struct ldif_record *rec, size_t i, const char *name,
			const char *value)
{
	assert_true(i < rec->npairs);
	assert_val_str(rec->pairs[i].name, name);
	assert_val_str(rec->pairs[i].value, value);
}

/* Parse text expecting an error at name:line with why in the message, after
 * nok records parsed fine. */
static void expect_error(const char *text, size_t nok, int rc, unsigned long line, const char *why)
{
	struct src s;
	struct ldif_record rec;
	src_open(&s, text, strlen(text));
	for (size_t i = 0; i < nok; i++)
		assert_int_equal(next(&s, &rec), 1);
	assert_int_equal(next(&s, &rec), rc);
	char prefix[64];
	snprintf(prefix, sizeof(prefix), "t.ldif:%lu: ", line);
	if (strncmp(s.d.msg, prefix, strlen(prefix)) != 0 || !strstr(s.d.msg, why))
		fail_msg("got '%s', want '%s' ... '%s'", s.d.msg, prefix, why);
	src_close(&s);
}

/* ==== reader ================================================================= */

static void test_attrval_records(void **state)
{
	(void)state;
	const char *t = "dn: uid=alice,ou=people,dc=example,dc=com\n"
			"objectClass: posixAccount\n"
			"uid: alice\n"
			"cn;lang-en: Alice   Smith\n"
			"uidNumber:1000\n"
			"\n\n\n"
			"dn: uid=bob,dc=example,dc=com\n"
			"uid: bob\n";
	struct src s;
	struct ldif_record rec;
	src_open(&s, t, strlen(t));
	assert_int_equal(next(&s, &rec), 1);
	assert_int_equal(rec.change, LDIF_ADD);
	assert_int_equal(rec.line, 1);
	assert_val_str(rec.dn, "uid=alice,ou=people,dc=example,dc=com");
	assert_int_equal(rec.npairs, 4);
	assert_pair(&rec, 0, "objectClass", "posixAccount");
	assert_pair(&rec, 1, "uid", "alice");
	assert_pair(&rec, 2, "cn;lang-en", "Alice   Smith");
	assert_pair(&rec, 3, "uidNumber", "1000");
	/* the canonical names the reader found, for the entry builder */
	const char *canon[] = {"objectclass", "uid", "cn;lang-en", "uidnumber"};
	for (size_t i = 0; i < 4; i++) {
		assert_non_null(rec.canon[i].ptr);
		assert_val_str(rec.canon[i], canon[i]);
	}
	struct idc_arena a = IDC_ARENA_INIT;
	struct store_entry e1, e2;
	assert_int_equal(store_entry_from_pairs(&a, rec.dn, rec.pairs, rec.npairs, &e1, NULL), 0);
	assert_int_equal(
	    store_entry_from_pairs_canon(&a, rec.dn, rec.pairs, rec.canon, rec.npairs, &e2, NULL),
	    0);
	assert_int_equal(e1.nattrs, e2.nattrs);
	for (size_t i = 0; i < e1.nattrs; i++) {
		assert_ptr_equal(e1.attrs[i].norm.ptr, e2.attrs[i].norm.ptr);
		assert_int_equal(e1.attrs[i].nvals, e2.attrs[i].nvals);
	}
	idc_arena_free(&a);
	assert_int_equal(next(&s, &rec), 1);
	assert_int_equal(rec.line, 9);
	assert_val_str(rec.dn, "uid=bob,dc=example,dc=com");
	assert_int_equal(rec.npairs, 1);
	assert_pair(&rec, 0, "uid", "bob");
	assert_int_equal(next(&s, &rec), 0);
	assert_int_equal(next(&s, &rec), 0);
	assert_int_equal(ldif_offset(s.r), strlen(t));
	src_close(&s);
}

static void test_comments(void **state)
{
	(void)state;
	const char *t = "# extended LDIF\n"
			"#\n"
			"# a comment that is\n"
			" folded over a line\n"
			"\n"
			"# only comments here\n"
			"\n"
			"# before the dn\n"
			"dn: cn=a\n"
			"# between values, folded\n"
			" cn: not-a-value\n"
			"cn: a\n"
			"#last\n";
	struct src s;
	struct ldif_record rec;
	src_open(&s, t, strlen(t));
	assert_int_equal(next(&s, &rec), 1);
	assert_int_equal(rec.line, 9);
	assert_val_str(rec.dn, "cn=a");
	assert_int_equal(rec.npairs, 1);
	assert_pair(&rec, 0, "cn", "a");
	assert_int_equal(next(&s, &rec), 0);
	src_close(&s);
}

static void test_folding(void **state)
{
	(void)state;
	/* "dn:: " base64 of "cn=Zoë,dc=example" split mid-quantum. */
	const char *t = "dn: uid=alice,ou=pe\n"
			" ople,dc=example,d\n"
			" c=com\n"
			"description: one\n"
			"  two\n"
			" \n"
			" three\n"
			"\n"
			"dn:: Y249Wm/D\n"
			" qyxkYz1leGFtcGxl\n"
			"cn:: Wm/DqyBT\n"
			" bWl0aA=\n"
			" =\n";
	struct src s;
	struct ldif_record rec;
	src_open(&s, t, strlen(t));
	assert_int_equal(next(&s, &rec), 1);
	assert_val_str(rec.dn, "uid=alice,ou=people,dc=example,dc=com");
	assert_pair(&rec, 0, "description", "one twothree");
	assert_int_equal(next(&s, &rec), 1);
	assert_int_equal(rec.line, 9);
	assert_val_str(rec.dn, "cn=Zo\xc3\xab,dc=example");
	assert_pair(&rec, 0, "cn", "Zo\xc3\xab Smith");
	assert_int_equal(next(&s, &rec), 0);
	src_close(&s);
}

static void test_base64_values(void **state)
{
	(void)state;
	const char *t = "dn: cn=bin\n"
			"objectGUID:: AAEC/wA=\n"
			"cn:: w6nDqA==\n"
			"cn:: YWI\n"    /* padding missing: tolerated */
			"cn:: YQ==  \n" /* trailing spaces after base64 */
			"cn::\n"
			"description:: IGxlYWRpbmcgYW5kIHRyYWlsaW5nIA==\n";
	struct src s;
	struct ldif_record rec;
	src_open(&s, t, strlen(t));
	assert_int_equal(next(&s, &rec), 1);
	assert_int_equal(rec.npairs, 6);
	assert_val(rec.pairs[0].value, "\x00\x01\x02\xff\x00", 5);
	assert_pair(&rec, 1, "cn", "\xc3\xa9\xc3\xa8");
	assert_pair(&rec, 2, "cn", "ab");
	assert_pair(&rec, 3, "cn", "a");
	assert_pair(&rec, 4, "cn", "");
	assert_pair(&rec, 5, "description", " leading and trailing ");
	src_close(&s);
}

static void test_empty_values(void **state)
{
	(void)state;
	const char *t = "dn: cn=e\n"
			"description:\n"
			"description: \n"
			"description:   \n"
			"seeAlso: trailing  \n";
	struct src s;
	struct ldif_record rec;
	src_open(&s, t, strlen(t));
	assert_int_equal(next(&s, &rec), 1);
	assert_int_equal(rec.npairs, 4);
	assert_pair(&rec, 0, "description", "");
	assert_pair(&rec, 1, "description", "");
	assert_pair(&rec, 2, "description", "");
	assert_pair(&rec, 3, "seeAlso", "trailing  ");
	src_close(&s);
}

static void test_crlf(void **state)
{
	(void)state;
	const char *t = "version: 1\r\n"
			"\r\n"
			"dn: cn=a\r\n"
			"cn: a\r\n"
			" b\r\n"
			"\r\n"
			"dn: cn=b\r\n"
			"changetype: modify\r\n"
			"replace: cn\r\n"
			"cn: b\r\n"
			"-\r\n";
	struct src s;
	struct ldif_record rec;
	src_open(&s, t, strlen(t));
	assert_int_equal(next(&s, &rec), 1);
	assert_int_equal(rec.line, 3);
	assert_val_str(rec.dn, "cn=a");
	assert_pair(&rec, 0, "cn", "ab");
	assert_int_equal(next(&s, &rec), 1);
	assert_int_equal(rec.change, LDIF_MODIFY);
	assert_int_equal(rec.nmods, 1);
	assert_val_str(rec.mods[0].attr, "cn");
	assert_int_equal(rec.mods[0].nvals, 1);
	assert_val_str(rec.mods[0].vals[0], "b");
	assert_int_equal(next(&s, &rec), 0);
	src_close(&s);
}

static void test_version(void **state)
{
	(void)state;
	const char *t = "# comment first\nversion: 1\ndn: cn=a\ncn: a\n";
	struct src s;
	struct ldif_record rec;
	src_open(&s, t, strlen(t));
	assert_int_equal(next(&s, &rec), 1);
	assert_int_equal(rec.line, 3);
	assert_val_str(rec.dn, "cn=a");
	assert_int_equal(next(&s, &rec), 0);
	src_close(&s);

	const char *only = "version: 1\n\n";
	src_open(&s, only, strlen(only));
	assert_int_equal(next(&s, &rec), 0);
	src_close(&s);
}

static void test_changetype_add_delete(void **state)
{
	(void)state;
	const char *t = "dn: cn=a\n"
			"changetype: add\n"
			"cn: a\n"
			"sn: b\n"
			"\n"
			"dn: cn=b\n"
			"changetype: delete\n"
			"\n"
			"dn: cn=c\n"
			"changetype: ADD\n";
	struct src s;
	struct ldif_record rec;
	src_open(&s, t, strlen(t));
	assert_int_equal(next(&s, &rec), 1);
	assert_int_equal(rec.change, LDIF_ADD);
	assert_int_equal(rec.npairs, 2);
	assert_pair(&rec, 1, "sn", "b");
	assert_int_equal(next(&s, &rec), 1);
	assert_int_equal(rec.change, LDIF_DELETE);
	assert_int_equal(rec.line, 6);
	assert_val_str(rec.dn, "cn=b");
	assert_int_equal(rec.npairs, 0);
	assert_int_equal(next(&s, &rec), 1);
	assert_int_equal(rec.change, LDIF_ADD);
	assert_int_equal(rec.npairs, 0);
	assert_int_equal(next(&s, &rec), 0);
	src_close(&s);
}

static void test_changetype_modify(void **state)
{
	(void)state;
	const char *t = "dn: uid=a,dc=x\n"
			"changetype: modify\n"
			"add: mail\n"
			"mail: a@x\n"
			"mail:: YkB4\n"
			"-\n"
			"delete: description\n"
			"-\n"
			"delete: cn\n"
			"commonName: old\n"
			"-\n"
			"replace: telephoneNumber\n"
			"-\n"
			"replace: sn;lang-en\n"
			"SN;LANG-EN: new\n"
			"\n"
			"dn: uid=b,dc=x\n"
			"changetype: modify\n"
			"\n"
			"dn: uid=c,dc=x\n"
			"changetype: modify\n"
			"add: cn\n"
			"cn: c\n";
	struct src s;
	struct ldif_record rec;
	src_open(&s, t, strlen(t));
	assert_int_equal(next(&s, &rec), 1);
	assert_int_equal(rec.change, LDIF_MODIFY);
	assert_int_equal(rec.nmods, 5);
	const struct store_mod *m = rec.mods;
	assert_int_equal(m[0].op, STORE_MOD_ADD);
	assert_val_str(m[0].attr, "mail");
	assert_int_equal(m[0].nvals, 2);
	assert_val_str(m[0].vals[0], "a@x");
	assert_val_str(m[0].vals[1], "b@x");
	assert_int_equal(m[1].op, STORE_MOD_DELETE);
	assert_val_str(m[1].attr, "description");
	assert_int_equal(m[1].nvals, 0);
	assert_int_equal(m[2].op, STORE_MOD_DELETE);
	assert_int_equal(m[2].nvals, 1);
	assert_val_str(m[2].vals[0], "old");
	assert_int_equal(m[3].op, STORE_MOD_REPLACE);
	assert_val_str(m[3].attr, "telephoneNumber");
	assert_int_equal(m[3].nvals, 0);
	assert_int_equal(m[4].op, STORE_MOD_REPLACE);
	assert_int_equal(m[4].nvals, 1);
	assert_val_str(m[4].vals[0], "new");
	assert_int_equal(next(&s, &rec), 1);
	assert_int_equal(rec.nmods, 0);
	assert_int_equal(next(&s, &rec), 1); /* the final '-' is missing */
	assert_int_equal(rec.nmods, 1);
	assert_val_str(rec.mods[0].vals[0], "c");
	assert_int_equal(next(&s, &rec), 0);
	src_close(&s);
}

static void test_changetype_modrdn(void **state)
{
	(void)state;
	const char *t = "dn: cn=a,dc=x\n"
			"changetype: modrdn\n"
			"newrdn: cn=b\n"
			"deleteoldrdn: 1\n"
			"\n"
			"dn: cn=b,dc=x\n"
			"changetype: moddn\n"
			"newrdn:: Y249Yw==\n"
			"deleteoldrdn: 0\n"
			"newsuperior: ou=y,dc=x\n";
	struct src s;
	struct ldif_record rec;
	src_open(&s, t, strlen(t));
	assert_int_equal(next(&s, &rec), 1);
	assert_int_equal(rec.change, LDIF_MODRDN);
	assert_val_str(rec.newrdn, "cn=b");
	assert_true(rec.deleteoldrdn);
	assert_false(rec.has_newsuperior);
	assert_int_equal(next(&s, &rec), 1);
	assert_int_equal(rec.change, LDIF_MODRDN);
	assert_val_str(rec.newrdn, "cn=c");
	assert_false(rec.deleteoldrdn);
	assert_true(rec.has_newsuperior);
	assert_val_str(rec.newsuperior, "ou=y,dc=x");
	assert_int_equal(next(&s, &rec), 0);
	src_close(&s);
}

static void test_errors(void **state)
{
	(void)state;
	expect_error("version: 2\n\ndn: cn=a\n", 0, IDC_ESYNTAX, 1, "unsupported LDIF version");
	expect_error("dn: cn=a\n\nversion: 1\n", 1, IDC_ESYNTAX, 3, "missing dn:");
	expect_error("cn: a\n", 0, IDC_ESYNTAX, 1, "missing dn:");
	expect_error("dn: cn=a\ncn: a\n\n# c\n\ncn: b\n", 1, IDC_ESYNTAX, 6, "missing dn:");
	expect_error("dn: cn=a\ncn:: YW=j\n", 0, IDC_ESYNTAX, 2, "bad base64");
	expect_error("dn: cn=a\ncn:: Y\n", 0, IDC_ESYNTAX, 2, "bad base64");
	expect_error("dn: cn=a\ncn:: YQ=\n", 0, IDC_ESYNTAX, 2, "bad base64");
	expect_error("dn: cn=a\ncn:: Y Q==\n", 0, IDC_ESYNTAX, 2, "bad base64");
	expect_error("dn:: %%%%\n", 0, IDC_ESYNTAX, 1, "bad base64");
	expect_error("dn: cn=a\ncn: a\ncn:: YWJj\n ZA=!\n", 0, IDC_ESYNTAX, 3, "bad base64");
	expect_error("dn: cn=a\nchangetype: delete\ncn: a\n", 0, IDC_ESYNTAX, 3,
		     "value line in a delete record");
	expect_error("dn: cn=a\nchangetype: modify\nadd: cn\ncn: x\nsn: y\n-\n", 0, IDC_ESYNTAX, 5,
		     "does not match");
	expect_error("dn: cn=a\nchangetype: modify\nadd: cn\n-\n-\n", 0, IDC_ESYNTAX, 5,
		     "'-' with no modification");
	expect_error("dn: cn=a\nchangetype: modify\nincrement: cn\n", 0, IDC_ESYNTAX, 3,
		     "expected add:, delete: or replace:");
	expect_error("dn: cn=a\nchangetype: modify\nadd: c_n\n", 0, IDC_ESYNTAX, 3,
		     "invalid attribute description 'c_n'");
	expect_error("dn: cn=a\nchangetype: rename\n", 0, IDC_ESYNTAX, 2, "unknown changetype");
	expect_error("dn: cn=a\ncn a\n", 0, IDC_ESYNTAX, 2, "no ':'");
	expect_error("dn: cn=a\n\ndn: cn=b\ncn_x: a\n", 1, IDC_ESYNTAX, 4,
		     "invalid attribute description 'cn_x'");
	expect_error("dn: cn=a\n: a\n", 0, IDC_ESYNTAX, 2, "invalid attribute description");
	expect_error("dn: cn=a\njpegPhoto:< file:///tmp/x\n", 0, IDC_ESYNTAX, 2,
		     "URL values (attr:<) are not supported");
	expect_error("dn: cn=a\ncontrol: 1.2.3 true\nchangetype: delete\n", 0, IDC_ESYNTAX, 2,
		     "controls are not supported");
	expect_error(" cn=a\n", 0, IDC_ESYNTAX, 1, "continuation line");
	expect_error("dn: cn=a\ncn: a\ndn: cn=b\n", 0, IDC_ESYNTAX, 3, "blank line missing");
	expect_error("dn: cn=a\ncn: a\n-\n", 0, IDC_ESYNTAX, 3, "'-' line in an add record");
	expect_error("dn: cn=a\ncn: a\nchangetype: add\n", 0, IDC_ESYNTAX, 3,
		     "changetype: must come right after");
	expect_error("dn: cn=a\nchangetype: modrdn\ndeleteoldrdn: 1\n", 0, IDC_ESYNTAX, 3,
		     "expected newrdn:");
	expect_error("dn: cn=a\nchangetype: modrdn\nnewrdn: cn=b\n", 0, IDC_ESYNTAX, 3,
		     "expected deleteoldrdn:");
	expect_error("dn: cn=a\nchangetype: modrdn\nnewrdn: cn=b\ndeleteoldrdn: yes\n", 0,
		     IDC_ESYNTAX, 4, "deleteoldrdn must be 0 or 1");
	expect_error("dn: cn=a\nchangetype: modrdn\nnewrdn: cn=b\ndeleteoldrdn: 1\ncn: x\n", 0,
		     IDC_ESYNTAX, 5, "unexpected line in a modrdn record");
}

static void test_error_then_continue(void **state)
{
	(void)state;
	/* A bad record is consumed whole, so a caller may report and go on. */
	const char *t = "dn: cn=a\ncn a\n\ndn: cn=b\ncn: b\n";
	struct src s;
	struct ldif_record rec;
	src_open(&s, t, strlen(t));
	assert_int_equal(next(&s, &rec), IDC_ESYNTAX);
	assert_int_equal(next(&s, &rec), 1);
	assert_val_str(rec.dn, "cn=b");
	src_close(&s);
}

static void test_too_long(void **state)
{
	(void)state;
	size_t n = ((size_t)64 << 20) + 100;
	char *t = malloc(n + 64);
	assert_non_null(t);
	size_t len = (size_t)sprintf(t, "dn: cn=a\ncn: a\ndescription: ");
	memset(t + len, 'x', n);
	len += n;
	t[len++] = '\n';
	struct src s;
	struct ldif_record rec;
	src_open(&s, t, len);
	assert_int_equal(next(&s, &rec), -E2BIG);
	assert_non_null(strstr(s.d.msg, "t.ldif:3: "));
	src_close(&s);
	free(t);
}

/* Many records and one big one, so records straddle buffer refills and the
 * buffer grows under a record. */
static void test_big_input(void **state)
{
	(void)state;
	char *t = NULL;
	size_t len = 0;
	FILE *w = open_memstream(&t, &len);
	assert_non_null(w);
	for (int i = 0; i < 50000; i++) {
		fprintf(w, "dn: uid=user%d,ou=people,dc=example,dc=com\nuid: user%d\n", i, i);
		fprintf(w, "description: %0*d\n", 20 + i % 60, i);
		if (i == 30000)
			fprintf(w, "description: %0*d\n", 3 << 20, i);
		fprintf(w, "\n");
	}
	fclose(w);
	struct src s;
	struct ldif_record rec;
	src_open(&s, t, len);
	for (int i = 0; i < 50000; i++) {
		char want[64];
		assert_int_equal(next(&s, &rec), 1);
		snprintf(want, sizeof(want), "uid=user%d,ou=people,dc=example,dc=com", i);
		assert_val_str(rec.dn, want);
		snprintf(want, sizeof(want), "user%d", i);
		assert_pair(&rec, 0, "uid", want);
		assert_int_equal(rec.npairs, i == 30000 ? 3 : 2);
		assert_int_equal(rec.pairs[1].value.len, (size_t)(20 + i % 60));
		if (i == 30000)
			assert_int_equal(rec.pairs[2].value.len, (size_t)3 << 20);
	}
	assert_int_equal(next(&s, &rec), 0);
	assert_int_equal(ldif_offset(s.r), len);
	src_close(&s);
	free(t);
}

/* ==== writer ================================================================= */

/* One attribute with up to 4 values; norm is given canonical. */
struct tattr {
	const char *name, *norm;
	struct store_val vals[4];
	size_t nvals;
};

static void build(struct store_entry *e, struct store_attr *attrs, const char *dn,
		  const struct tattr *t, size_t n)
{
	memset(e, 0, sizeof(*e));
	e->dn = (struct store_val){dn, strlen(dn)};
	for (size_t i = 0; i < n; i++) {
		attrs[i].name = (struct store_val){t[i].name, strlen(t[i].name)};
		attrs[i].norm = (struct store_val){t[i].norm, strlen(t[i].norm)};
		attrs[i].vals = (struct store_val *)t[i].vals;
		attrs[i].nvals = t[i].nvals;
		attrs[i].rank = (uint32_t)i;
	}
	e->attrs = attrs;
	e->nattrs = n;
}

static void expect_text(const struct store_entry *e, const char *const *sel, size_t nsel,
			const char *want)
{
	struct idc_buf out = IDC_BUF_INIT;
	assert_int_equal(idc_buf_append(&out, "x", 1), 0);
	assert_int_equal(ldif_write_entry(&out, e, sel, nsel), 0);
	assert_string_equal(out.data + 1, want);
	idc_buf_free(&out);
}

/* Stored entries keep attributes sorted by name; output follows rank, the
 * order they were given in. */
static void test_write_rank_order(void **state)
{
	(void)state;
	const struct tattr t[] = {
	    {"cn", "cn", {{"a", 1}}, 1},
	    {"objectClass", "objectclass", {{"top", 3}}, 1},
	    {"uid", "uid", {{"u", 1}}, 1},
	};
	struct store_attr a[3];
	struct store_entry e;
	build(&e, a, "uid=u", t, 3);
	a[0].rank = 2; /* cn came last */
	a[1].rank = 0;
	a[2].rank = 1;
	expect_text(&e, NULL, 0, "dn: uid=u\nobjectClass: top\nuid: u\ncn: a\n\n");
}

static void test_write_safe_unsafe(void **state)
{
	(void)state;
	const struct tattr t[] = {
	    {"objectClass", "objectclass", {V("top"), V("person")}, 2},
	    {"cn", "cn", {V("Alice"), V(" lead"), V("trail "), V(":colon")}, 4},
	    {"sn", "sn", {V("<lt"), V("a:b<c"), V("")}, 3},
	    {"description",
	     "description",
	     {V("a\nb"), V("a\rb"), V("nul\0x"), V("caf\xc3\xa9")},
	     4},
	};
	struct store_attr a[4];
	struct store_entry e;
	build(&e, a, "uid=alice,dc=example,dc=com", t, 4);
	expect_text(&e, NULL, 0,
		    "dn: uid=alice,dc=example,dc=com\n"
		    "objectClass: top\n"
		    "objectClass: person\n"
		    "cn: Alice\n"
		    "cn:: IGxlYWQ=\n"
		    "cn:: dHJhaWwg\n"
		    "cn:: OmNvbG9u\n"
		    "sn:: PGx0\n"
		    "sn: a:b<c\n"
		    "sn:\n"
		    "description:: YQpi\n"
		    "description:: YQ1i\n"
		    "description:: bnVsAHg=\n"
		    "description:: Y2Fmw6k=\n"
		    "\n");
	build(&e, a, " cn=x", t, 0);
	expect_text(&e, NULL, 0, "dn:: IGNuPXg=\n\n");
	build(&e, a, "", t, 0);
	expect_text(&e, NULL, 0, "dn:\n\n");
}

static void test_write_folding(void **state)
{
	(void)state;
	/* "cn: " + 72 = 76 columns: not folded; 73: folded after 76; 72 + 75
	 * = 147: exactly one full continuation; 148: two. */
	static const char v72[] = "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyz"
				  "abcdefghijklmnopqrst";
	static const char v73[] = "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyz"
				  "abcdefghijklmnopqrstu";
	static const char v147[] = "0123456789012345678901234567890123456789"
				   "0123456789012345678901234567890123456789"
				   "0123456789012345678901234567890123456789"
				   "012345678901234567890123456";
	static const char v148[] = "0123456789012345678901234567890123456789"
				   "0123456789012345678901234567890123456789"
				   "0123456789012345678901234567890123456789"
				   "0123456789012345678901234567";
	assert_int_equal(strlen(v72), 72);
	assert_int_equal(strlen(v73), 73);
	assert_int_equal(strlen(v147), 147);
	assert_int_equal(strlen(v148), 148);
	const struct tattr t[] = {
	    {"cn", "cn", {V(v72), V(v73), V(v147), V(v148)}, 4},
	};
	struct store_attr a[1];
	struct store_entry e;
	build(&e, a, "cn=f", t, 1);
	expect_text(&e, NULL, 0,
		    "dn: cn=f\n"
		    "cn: abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrst\n"
		    "cn: abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrst\n"
		    " u\n"
		    "cn: 012345678901234567890123456789012345678901234567890123456789012345678901\n"
		    " 234567890123456789012345678901234567890123456789012345678901234567890123456\n"
		    "cn: 012345678901234567890123456789012345678901234567890123456789012345678901\n"
		    " 234567890123456789012345678901234567890123456789012345678901234567890123456\n"
		    " 7\n"
		    "\n");
	/* base64 folds the same way, and so does the dn. */
#define O66 "oooooooooooooooooooooooooooooooooooooooooooooooooooooooooooooooooo"
	static const char bin[57] = {(char)0xff};
	const struct tattr tb[] = {
	    {"userCertificate;binary", "usercertificate;binary", {{bin, sizeof(bin)}}, 1}};
	build(&e, a, "cn=l" O66 "ng", tb, 1);
	expect_text(&e, NULL, 0,
		    "dn: cn=l" O66 "ng\n"
		    "userCertificate;binary:: /wAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\n"
		    " AAAAAAAAAAAAAAAAAAAAAAAAA\n"
		    "\n");
	build(&e, a, "cn=l" O66 "ong", tb, 0);
	expect_text(&e, NULL, 0, "dn: cn=l" O66 "on\n g\n\n");
}

static void test_write_selection(void **state)
{
	(void)state;
	const struct tattr t[] = {
	    {"cn", "cn", {V("a")}, 1},
	    {"cn;lang-en", "cn;lang-en", {V("b")}, 1},
	    {"mail", "mail", {V("m")}, 1},
	    {"uid", "uid", {V("u")}, 1},
	};
	struct store_attr a[4];
	struct store_entry e;
	build(&e, a, "cn=s", t, 4);
	const char *all = "dn: cn=s\ncn: a\ncn;lang-en: b\nmail: m\nuid: u\n\n";
	expect_text(&e, NULL, 0, all);
	const char *star[] = {"*"};
	expect_text(&e, star, 1, all);
	const char *none[] = {"1.1"};
	expect_text(&e, none, 1, "dn: cn=s\n\n");
	const char *cn[] = {"commonName", "UID"};
	expect_text(&e, cn, 2, "dn: cn=s\ncn: a\ncn;lang-en: b\nuid: u\n\n");
	const char *opt[] = {"1.1", "CN;Lang-EN", "nosuch"};
	expect_text(&e, opt, 3, "dn: cn=s\ncn;lang-en: b\n\n");
	const char *many[20];
	for (size_t i = 0; i < 20; i++)
		many[i] = i == 19 ? "mail" : "x-unused";
	expect_text(&e, many, 20, "dn: cn=s\nmail: m\n\n");
}

/* ==== round trips ============================================================= */

static uint64_t rng = 0x9e3779b97f4a7c15u;

static uint32_t rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)rng;
}

/* Random bytes, biased to the ones that matter: spaces, ':', '<', CR, LF,
 * NUL, high bytes, and lengths around the fold. */
static size_t rnd_value(char *p, size_t cap)
{
	static const char special[] = " :<\r\n\0\x80\xff=#-";
	size_t n = rnd() % 4 == 0 ? rnd() % cap : rnd() % 90;
	for (size_t i = 0; i < n; i++) {
		uint32_t k = rnd() % 8;
		p[i] = k == 0   ? special[rnd() % (sizeof(special) - 1)]
		       : k == 1 ? (char)rnd()
				: (char)('a' + rnd() % 26);
	}
	return n;
}

static void test_round_trip(void **state)
{
	(void)state;
	static const char *const names[] = {"cn",    "description", "jpegPhoto;binary",
					    "x-a-1", "2.5.4.3",     "mail"};
	enum { NENT = 300, NATTR = 6, NVAL = 3, VCAP = 600 };
	static char data[NENT][NATTR][NVAL][VCAP];
	static char dns[NENT][VCAP];
	static struct store_val vals[NENT][NATTR][NVAL];
	static struct store_attr attrs[NENT][NATTR];
	static struct store_entry ents[NENT];
	struct idc_buf out = IDC_BUF_INIT;
	for (size_t i = 0; i < NENT; i++) {
		ents[i].dn = (struct store_val){dns[i], rnd_value(dns[i], VCAP)};
		ents[i].attrs = attrs[i];
		ents[i].nattrs = 1 + rnd() % NATTR;
		for (size_t j = 0; j < ents[i].nattrs; j++) {
			attrs[i][j].name = (struct store_val){names[j], strlen(names[j])};
			attrs[i][j].norm = attrs[i][j].name;
			attrs[i][j].vals = vals[i][j];
			attrs[i][j].nvals = 1 + rnd() % NVAL;
			for (size_t k = 0; k < attrs[i][j].nvals; k++)
				vals[i][j][k] = (struct store_val){data[i][j][k],
								   rnd_value(data[i][j][k], VCAP)};
		}
		assert_int_equal(ldif_write_entry(&out, &ents[i], NULL, 0), 0);
	}
	struct src s;
	struct ldif_record rec;
	src_open(&s, out.data, out.len);
	for (size_t i = 0; i < NENT; i++) {
		assert_int_equal(next(&s, &rec), 1);
		assert_int_equal(rec.change, LDIF_ADD);
		assert_val(rec.dn, ents[i].dn.ptr, ents[i].dn.len);
		size_t p = 0;
		for (size_t j = 0; j < ents[i].nattrs; j++)
			for (size_t k = 0; k < attrs[i][j].nvals; k++, p++) {
				assert_true(p < rec.npairs);
				assert_val(rec.pairs[p].name, names[j], strlen(names[j]));
				assert_val(rec.pairs[p].value, vals[i][j][k].ptr,
					   vals[i][j][k].len);
			}
		assert_int_equal(rec.npairs, p);
	}
	assert_int_equal(next(&s, &rec), 0);
	src_close(&s);
	idc_buf_free(&out);
}

/* Every physical line the writer makes fits in 76 columns. */
static void test_write_line_width(void **state)
{
	(void)state;
	char v[400];
	struct idc_buf out = IDC_BUF_INIT;
	for (size_t n = 0; n < sizeof(v); n++) {
		memset(v, 'v', n);
		const struct tattr t[] = {{"description", "description", {{v, n}}, 1}};
		struct store_attr a[1];
		struct store_entry e;
		build(&e, a, "cn=w", t, 1);
		idc_buf_reset(&out);
		assert_int_equal(ldif_write_entry(&out, &e, NULL, 0), 0);
		size_t total = 0;
		for (char *p = out.data; *p;) {
			char *nl = strchr(p, '\n');
			assert_non_null(nl);
			assert_true(nl - p <= 76);
			if (*p == ' ')
				total += (size_t)(nl - p) - 1;
			p = nl + 1;
		}
		assert_true(total <= n);
	}
	idc_buf_free(&out);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_attrval_records),
	    cmocka_unit_test(test_comments),
	    cmocka_unit_test(test_folding),
	    cmocka_unit_test(test_base64_values),
	    cmocka_unit_test(test_empty_values),
	    cmocka_unit_test(test_crlf),
	    cmocka_unit_test(test_version),
	    cmocka_unit_test(test_changetype_add_delete),
	    cmocka_unit_test(test_changetype_modify),
	    cmocka_unit_test(test_changetype_modrdn),
	    cmocka_unit_test(test_errors),
	    cmocka_unit_test(test_error_then_continue),
	    cmocka_unit_test(test_too_long),
	    cmocka_unit_test(test_big_input),
	    cmocka_unit_test(test_write_safe_unsafe),
	    cmocka_unit_test(test_write_folding),
	    cmocka_unit_test(test_write_selection),
	    cmocka_unit_test(test_write_rank_order),
	    cmocka_unit_test(test_round_trip),
	    cmocka_unit_test(test_write_line_width),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
