/*
 * The import pipeline (ldif_import_fn): the same store and the same
 * messages as applying the records one by one (ldif_apply_all), with
 * enough records to go round the ring of chunks several times, change
 * records among the adds, and failures late in the file from the
 * preparing threads, the writer and the reader.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "store/store.h"

#define NUSERS 5000 /* past the ring (8 chunks of 256 records) twice */

static const char *const indexes[] = {"objectClass", "uid", "cn", "uidNumber", "member"};

struct st {
	char dir[64];
	struct store *s;
};

static void st_open(struct st *x)
{
	strcpy(x->dir, "/tmp/idc-import-XXXXXX");
	assert_non_null(mkdtemp(x->dir));
	struct store_options o = {STORE_CREATE | STORE_NOSYNC, 0, indexes, IDC_ARRAY_SIZE(indexes),
				  0};
	struct idc_diag d = {{0}};
	assert_int_equal(store_open(x->dir, &o, &x->s, &d), 0);
}

static void st_close(struct st *x)
{
	store_close(x->s);
	char p[128];
	const char *files[] = {"data.mdb", "lock.mdb", "write.lock"};
	for (size_t i = 0; i < 3; i++) {
		snprintf(p, sizeof(p), "%s/%s", x->dir, files[i]);
		unlink(p);
	}
	rmdir(x->dir);
}

/* An LDIF of NUSERS users and a group, with change records among them;
 * record `bad` (1-based; 0: none) replaced by what kind says. */
enum bad_kind { BAD_NONE, BAD_VALUE, BAD_DUP, BAD_SYNTAX };

static char *gen_ldif(size_t bad, enum bad_kind kind, size_t *len)
{
	struct idc_buf b = IDC_BUF_INIT;
	char tmp[512];
	const char *head = "dn: dc=example\nobjectClass: domain\ndc: example\n\n";
	const char *tail = "dn: cn=g,dc=example\nobjectClass: groupOfNames\ncn: g\n"
			   "member: uid=u1,dc=example\n\n";
	idc_buf_append(&b, head, strlen(head));
	for (size_t i = 1; i <= NUSERS; i++) {
		int n;
		if (i == bad && kind == BAD_VALUE)
			n = snprintf(tmp, sizeof(tmp),
				     "dn: uid=u%zu,dc=example\nobjectClass: account\nuid: u%zu\n"
				     "uidNumber: twelve\n\n",
				     i, i);
		else if (i == bad && kind == BAD_DUP)
			n = snprintf(tmp, sizeof(tmp),
				     "dn: uid=u1,dc=example\nobjectClass: account\nuid: u1\n\n");
		else if (i == bad && kind == BAD_SYNTAX)
			n = snprintf(tmp, sizeof(tmp), "dn: uid=u%zu,dc=example\nno colon here\n\n",
				     i);
		else if (i % 1000 == 0)
			n = snprintf(tmp, sizeof(tmp),
				     "dn: uid=u%zu,dc=example\nchangetype: modify\nreplace: cn\n"
				     "cn: renamed %zu\n-\n\ndn: uid=u%zu,dc=example\nchangetype: "
				     "delete\n\n",
				     i - 1, i, i - 2);
		else
			n = snprintf(tmp, sizeof(tmp),
				     "dn: uid=u%zu,dc=example\nobjectClass: account\nuid: u%zu\n"
				     "cn: User %zu\nuidNumber: %zu\n\n",
				     i, i, i, 1000 + i);
		idc_buf_append(&b, tmp, (size_t)n);
	}
	idc_buf_append(&b, tail, strlen(tail));
	*len = b.len;
	return b.data;
}

static int serial_fn(struct store_txn *t, void *arg, struct idc_diag *d)
{
	struct ldif_import *im = arg;
	struct ldif_reader *r;
	rewind(im->f);
	int rc = ldif_open(im->f, im->name, &r);
	if (!rc)
		rc = ldif_apply_all(t, r, im->name, NULL, &im->records, d);
	ldif_close(r);
	return rc;
}

static int export_cb(const struct store_entry *e, void *arg)
{
	return ldif_write_entry(arg, e, NULL, 0);
}

/* Every entry as LDIF, and the consistency check's fault count. */
static void st_dump(struct st *x, struct idc_buf *out, long *faults)
{
	struct store_txn *t;
	assert_int_equal(store_txn_begin(x->s, NULL, STORE_TXN_RDONLY, &t, NULL), 0);
	struct store_search q = {{"", 0}, STORE_SCOPE_SUB, NULL, 0};
	assert_int_equal(store_search(t, &q, export_cb, out, NULL), 0);
	*faults = store_check(t, NULL, NULL);
	store_txn_abort(t);
}

struct outcome {
	int rc;
	struct idc_diag d;
	uint64_t records;
	struct idc_buf dump;
	long faults;
};

static void run(const char *text, size_t len, bool pipeline, unsigned workers, struct outcome *o)
{
	struct st x;
	st_open(&x);
	FILE *f = len ? fmemopen((void *)text, len, "r") : fopen("/dev/null", "r");
	assert_non_null(f);
	struct ldif_import im = {f, "in.ldif", NULL, 0, workers};
	memset(o, 0, sizeof(*o));
	o->rc = store_write(x.s, STORE_TXN_BULK, pipeline ? ldif_import_fn : serial_fn, &im, &o->d);
	o->records = im.records;
	st_dump(&x, &o->dump, &o->faults);
	fclose(f);
	st_close(&x);
}

static void assert_same(const struct outcome *a, const struct outcome *b)
{
	assert_int_equal(a->rc, b->rc);
	assert_string_equal(a->d.msg, b->d.msg);
	assert_int_equal(a->dump.len, b->dump.len);
	assert_memory_equal(a->dump.data, b->dump.data, a->dump.len);
	assert_int_equal(a->faults, 0);
	assert_int_equal(b->faults, 0);
}

static void compare(size_t bad, enum bad_kind kind, int want_rc, const char *want_msg)
{
	size_t len;
	char *text = gen_ldif(bad, kind, &len);
	struct outcome serial, piped;
	run(text, len, false, 0, &serial);
	for (unsigned w = 1; w <= 3; w++) {
		run(text, len, true, w, &piped);
		assert_same(&serial, &piped);
		if (want_rc == 0)
			assert_int_equal(piped.records, serial.records);
		idc_buf_free(&piped.dump);
	}
	assert_int_equal(serial.rc, want_rc);
	if (want_msg)
		assert_non_null(strstr(serial.d.msg, want_msg));
	if (want_rc != 0)
		assert_int_equal(serial.dump.len, 0); /* all or nothing */
	idc_buf_free(&serial.dump);
	free(text);
}

static void test_same_store(void **state)
{
	(void)state;
	compare(0, BAD_NONE, 0, NULL);
}

static void test_bad_value_late(void **state)
{
	(void)state;
	compare(4321, BAD_VALUE, IDC_ESYNTAX, "add 'uid=u4321,dc=example'");
}

static void test_duplicate_late(void **state)
{
	(void)state;
	compare(3001, BAD_DUP, -EEXIST, "already exists");
}

static void test_reader_error_late(void **state)
{
	(void)state;
	compare(2600, BAD_SYNTAX, IDC_ESYNTAX, "in.ldif:");
}

/* The progress callbacks: a tick per record applied, in order, and one
 * note when the indexes are written. */
struct prog_count {
	uint64_t ticks, last, notes;
	bool ordered;
};

static void prog_tick(void *arg, uint64_t records, uint64_t offset)
{
	struct prog_count *c = arg;
	(void)offset;
	c->ordered &= records == c->last + 1;
	c->last = records;
	c->ticks++;
}

static void prog_note(void *arg, const char *what)
{
	struct prog_count *c = arg;
	assert_string_equal(what, "writing indexes");
	c->notes++;
}

static void test_progress(void **state)
{
	(void)state;
	size_t len;
	char *text = gen_ldif(0, BAD_NONE, &len);
	struct st x;
	st_open(&x);
	FILE *f = fmemopen(text, len, "r");
	assert_non_null(f);
	struct prog_count c = {.ordered = true};
	struct ldif_progress p = {prog_tick, &c, prog_note};
	struct ldif_import im = {f, "in.ldif", &p, 0, 2};
	assert_int_equal(store_write(x.s, STORE_TXN_BULK, ldif_import_fn, &im, NULL), 0);
	assert_true(c.ordered);
	assert_int_equal(c.ticks, im.records);
	assert_int_equal(c.notes, 1);
	fclose(f);
	st_close(&x);
	free(text);
}

static void test_empty_input(void **state)
{
	(void)state;
	struct outcome serial, piped;
	run("", 0, false, 0, &serial);
	run("", 0, true, 2, &piped);
	assert_same(&serial, &piped);
	idc_buf_free(&serial.dump);
	idc_buf_free(&piped.dump);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_same_store),     cmocka_unit_test(test_bad_value_late),
	    cmocka_unit_test(test_duplicate_late), cmocka_unit_test(test_reader_error_late),
	    cmocka_unit_test(test_empty_input),    cmocka_unit_test(test_progress),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
