/*
 * userdb unit tests: the Varlink reader (split and joined messages, the
 * size bound), call decoding (every method, the error each mistake gets,
 * what closes the connection) and the replies' JSON, read back with json-c.
 */
#include <errno.h>
#include <json-c/json.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "userdb/userdb.h"

/* ---- framing ---------------------------------------------------------------- */

static void reader_splits_and_joins(void **state)
{
	(void)state;
	struct udb_reader r;
	udb_reader_init(&r);
	const char *msg;
	size_t len;
	static const char stream[] = "{\"a\":1}\0{\"b\":2}\0{\"c\"";
	/* byte by byte: each message comes out whole, once */
	int got = 0;
	for (size_t i = 0; i < sizeof(stream) - 1; i++) {
		assert_int_equal(udb_reader_feed(&r, stream + i, 1), 0);
		int rc;
		while ((rc = udb_reader_next(&r, &msg, &len)) == 1) {
			assert_int_equal(len, 7);
			assert_memory_equal(msg, got == 0 ? "{\"a\":1}" : "{\"b\":2}", 7);
			got++;
		}
		assert_int_equal(rc, 0);
	}
	assert_int_equal(got, 2);
	assert_int_equal(udb_reader_buffered(&r), 4);
	udb_reader_free(&r);
}

static void reader_bounds_a_message(void **state)
{
	(void)state;
	struct udb_reader r;
	udb_reader_init(&r);
	const char *msg;
	size_t len;
	char *big = malloc(UDB_MSG_MAX);
	assert_non_null(big);
	memset(big, ' ', UDB_MSG_MAX);
	assert_int_equal(udb_reader_feed(&r, big, UDB_MSG_MAX - 1), 0);
	assert_int_equal(udb_reader_next(&r, &msg, &len), 0); /* may still end */
	assert_int_equal(udb_reader_feed(&r, big, 1), 0);
	assert_int_equal(udb_reader_next(&r, &msg, &len), -EMSGSIZE);
	udb_reader_free(&r);
	/* exactly UDB_MSG_MAX with its NUL passes */
	udb_reader_init(&r);
	big[UDB_MSG_MAX - 1] = '\0';
	assert_int_equal(udb_reader_feed(&r, big, UDB_MSG_MAX), 0);
	assert_int_equal(udb_reader_next(&r, &msg, &len), 1);
	assert_int_equal(len, UDB_MSG_MAX - 1);
	udb_reader_free(&r);
	free(big);
}

/* ---- calls ---------------------------------------------------------------------- */

static int parse(const char *s, struct udb_call *c, struct udb_error *e)
{
	return udb_call_parse(s, strlen(s), c, e);
}

static void call_user_by_name(void **state)
{
	(void)state;
	struct udb_call c;
	struct udb_error e;
	assert_int_equal(
	    parse("{\"method\":\"io.systemd.UserDatabase.GetUserRecord\","
		  "\"parameters\":{\"userName\":\"alice\",\"service\":\"io.idcache\"}}",
		  &c, &e),
	    0);
	assert_int_equal(c.method, UDB_GET_USER);
	assert_true(c.has_user);
	assert_false(c.bad_user);
	assert_string_equal(c.user, "alice");
	assert_false(c.has_id);
	assert_true(c.has_service);
	assert_string_equal(c.service, "io.idcache");
	assert_false(c.more);
}

static void call_ids_and_flags(void **state)
{
	(void)state;
	struct udb_call c;
	struct udb_error e;
	assert_int_equal(parse("{\"method\":\"io.systemd.UserDatabase.GetGroupRecord\","
			       "\"parameters\":{\"gid\":4294967294,\"groupName\":null,"
			       "\"service\":\"x\"},\"more\":true,\"oneway\":false}",
			       &c, &e),
			 0);
	assert_int_equal(c.method, UDB_GET_GROUP);
	assert_true(c.has_id);
	assert_int_equal(c.id, 4294967294u);
	assert_false(c.has_group);
	assert_true(c.more);
	assert_int_equal(parse("{\"method\":\"io.systemd.UserDatabase.GetMemberships\","
			       "\"parameters\":{\"userName\":\"a\",\"groupName\":\"g\"}}",
			       &c, &e),
			 0);
	assert_int_equal(c.method, UDB_GET_MEMBERSHIPS);
	assert_string_equal(c.user, "a");
	assert_string_equal(c.group, "g");
	assert_false(c.has_service);
	assert_int_equal(parse("{\"method\":\"org.varlink.service.GetInfo\"}", &c, &e), 0);
	assert_int_equal(c.method, UDB_GET_INFO);
}

static void call_bad_names_are_kept_bad(void **state)
{
	(void)state;
	struct udb_call c;
	struct udb_error e;
	char msg[1024];
	char longname[300];
	memset(longname, 'a', sizeof(longname) - 1);
	longname[sizeof(longname) - 1] = '\0';
	snprintf(msg, sizeof(msg),
		 "{\"method\":\"io.systemd.UserDatabase.GetUserRecord\","
		 "\"parameters\":{\"userName\":\"%s\"}}",
		 longname);
	assert_int_equal(parse(msg, &c, &e), 0);
	assert_true(c.has_user);
	assert_true(c.bad_user);
	assert_int_equal(parse("{\"method\":\"io.systemd.UserDatabase.GetUserRecord\","
			       "\"parameters\":{\"userName\":\"a\\u0000b\"}}",
			       &c, &e),
			 0);
	assert_true(c.bad_user);
}

static void expect_error(const char *msg, const char *name, const char *key, const char *value)
{
	struct udb_call c;
	struct udb_error e;
	assert_int_equal(parse(msg, &c, &e), 1);
	assert_string_equal(e.name, name);
	assert_string_equal(e.key, key);
	assert_string_equal(e.value, value);
}

static void call_errors(void **state)
{
	(void)state;
	expect_error("{\"method\":\"io.systemd.UserDatabase.Nope\"}", UDB_ERR_NO_METHOD, "method",
		     "io.systemd.UserDatabase.Nope");
	expect_error("{\"method\":\"com.example.Frob\"}", UDB_ERR_NO_IFACE, "interface",
		     "com.example");
	expect_error("{\"method\":\"io.systemd.UserDatabase.GetUserRecord\","
		     "\"parameters\":{\"uid\":-1}}",
		     UDB_ERR_BAD_PARAM, "parameter", "uid");
	expect_error("{\"method\":\"io.systemd.UserDatabase.GetUserRecord\","
		     "\"parameters\":{\"uid\":\"0\"}}",
		     UDB_ERR_BAD_PARAM, "parameter", "uid");
	expect_error("{\"method\":\"io.systemd.UserDatabase.GetUserRecord\","
		     "\"parameters\":{\"gid\":0}}",
		     UDB_ERR_BAD_PARAM, "parameter", "gid");
	expect_error("{\"method\":\"io.systemd.UserDatabase.GetUserRecord\","
		     "\"parameters\":{\"fuzzyNames\":[\"a\"]}}",
		     UDB_ERR_BAD_PARAM, "parameter", "fuzzyNames");
	expect_error("{\"method\":\"io.systemd.UserDatabase.GetUserRecord\",\"parameters\":[]}",
		     UDB_ERR_BAD_PARAM, "parameter", "parameters");
}

static void call_not_varlink(void **state)
{
	(void)state;
	static const char *const bad[] = {
	    "",
	    "garbage",
	    "[1,2]",
	    "{\"parameters\":{}}",
	    "{\"method\":1}",
	    "{\"method\":\"org.varlink.service.GetInfo\",\"more\":\"yes\"}",
	    "{\"method\":\"org.varlink.service.GetInfo\"} trailing",
	    "{\"method\":\"org.varlink.service.GetInfo\",}",
	    ("{\"method\":\"io.systemd.UserDatabase.GetUserRecord\",\"parameters\":{\"userName\":"
	     "\"\xff\"}}"),
	    "{\"a\":[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]}",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct udb_call c;
		struct udb_error e;
		assert_int_equal(parse(bad[i], &c, &e), -EBADMSG);
	}
}

/* ---- replies ---------------------------------------------------------------------- */

/* The one message in b (its NUL at the end), parsed. */
static json_object *message(const struct idc_buf *b)
{
	assert_true(b->len > 0);
	assert_int_equal(b->data[b->len - 1], '\0');
	assert_null(memchr(b->data, '\0', b->len - 1));
	json_object *v = json_tokener_parse(b->data);
	assert_non_null(v);
	return v;
}

static json_object *at(json_object *o, const char *key)
{
	json_object *v = NULL;
	assert_true(json_object_object_get_ex(o, key, &v));
	return v;
}

static void reply_user_record(void **state)
{
	(void)state;
	const char *groups[] = {"wheel", "users"};
	const char *keys[] = {"ssh-ed25519 AAAA alice@x"};
	struct udb_user u = {.name = "alice",
			     .uid = 1000,
			     .gid = 100,
			     .gecos = "Alice \xc3\x84",
			     .dir = "/home/alice",
			     .shell = "/bin/sh",
			     .member_of = groups,
			     .nmember_of = 2,
			     .keys = keys,
			     .nkeys = 1,
			     .service = "io.idcache"};
	struct udb_reply *r;
	struct idc_buf b = IDC_BUF_INIT;
	assert_int_equal(udb_reply_user(&u, &r), 0);
	assert_int_equal(udb_reply_write(r, true, &b), 0);
	json_object *m = message(&b);
	assert_true(json_object_get_boolean(at(m, "continues")));
	json_object *p = at(m, "parameters");
	assert_false(json_object_get_boolean(at(p, "incomplete")));
	json_object *rec = at(p, "record");
	assert_string_equal(json_object_get_string(at(rec, "userName")), "alice");
	assert_int_equal(json_object_get_int64(at(rec, "uid")), 1000);
	assert_int_equal(json_object_get_int64(at(rec, "gid")), 100);
	assert_string_equal(json_object_get_string(at(rec, "realName")), "Alice \xc3\x84");
	assert_string_equal(json_object_get_string(at(rec, "homeDirectory")), "/home/alice");
	assert_string_equal(json_object_get_string(at(rec, "shell")), "/bin/sh");
	assert_string_equal(json_object_get_string(at(rec, "disposition")), "regular");
	assert_string_equal(json_object_get_string(at(rec, "service")), "io.idcache");
	assert_int_equal(json_object_array_length(at(rec, "memberOf")), 2);
	assert_string_equal(
	    json_object_get_string(json_object_array_get_idx(at(rec, "sshAuthorizedKeys"), 0)),
	    keys[0]);
	json_object_put(m);
	udb_reply_free(r);
	idc_buf_free(&b);
}

static void reply_leaves_out_what_is_not_text(void **state)
{
	(void)state;
	struct udb_user u = {.name = "root", .uid = 0, .gecos = "caf\xe9", .dir = ""};
	struct udb_reply *r;
	struct idc_buf b = IDC_BUF_INIT;
	assert_int_equal(udb_reply_user(&u, &r), 0);
	assert_int_equal(udb_reply_write(r, false, &b), 0);
	json_object *m = message(&b);
	json_object *rec = at(at(m, "parameters"), "record"), *v;
	assert_false(json_object_object_get_ex(rec, "realName", &v));
	assert_false(json_object_object_get_ex(rec, "homeDirectory", &v));
	assert_false(json_object_object_get_ex(rec, "memberOf", &v));
	assert_false(json_object_object_get_ex(m, "continues", &v));
	assert_string_equal(json_object_get_string(at(rec, "disposition")), "intrinsic");
	json_object_put(m);
	udb_reply_free(r);
	idc_buf_free(&b);
	struct udb_user bad = {.name = "\xc0\xaf"}; /* an overlong '/' */
	assert_int_equal(udb_reply_user(&bad, &r), -EILSEQ);
	struct udb_group g = {.name = "a\x01"};
	assert_int_equal(udb_reply_group(&g, &r), -EILSEQ);
}

static void reply_group_membership_error(void **state)
{
	(void)state;
	const char *members[] = {"alice", "bob"};
	struct udb_group g = {"staff", 50, members, 2};
	struct udb_reply *r;
	struct idc_buf b = IDC_BUF_INIT;
	assert_int_equal(udb_reply_group(&g, &r), 0);
	assert_int_equal(udb_reply_write(r, false, &b), 0);
	udb_reply_free(r);
	json_object *m = message(&b);
	json_object *rec = at(at(m, "parameters"), "record");
	assert_string_equal(json_object_get_string(at(rec, "groupName")), "staff");
	assert_string_equal(json_object_get_string(at(rec, "disposition")), "system");
	assert_int_equal(json_object_array_length(at(rec, "members")), 2);
	json_object_put(m);
	idc_buf_reset(&b);
	assert_int_equal(udb_reply_membership("alice", "staff", &r), 0);
	assert_int_equal(udb_reply_write(r, false, &b), 0);
	udb_reply_free(r);
	m = message(&b);
	assert_string_equal(json_object_get_string(at(at(m, "parameters"), "groupName")), "staff");
	json_object_put(m);
	idc_buf_reset(&b);
	struct udb_error e;
	udb_error_set(&e, UDB_ERR_BAD_PARAM, "parameter", "uid");
	assert_int_equal(udb_error_write(&e, &b), 0);
	m = message(&b);
	assert_string_equal(json_object_get_string(at(m, "error")), UDB_ERR_BAD_PARAM);
	assert_string_equal(json_object_get_string(at(at(m, "parameters"), "parameter")), "uid");
	json_object_put(m);
	idc_buf_reset(&b);
	udb_error_set(&e, UDB_ERR_NOT_FOUND, NULL, NULL);
	assert_int_equal(udb_error_write(&e, &b), 0);
	m = message(&b);
	assert_int_equal(json_object_object_length(at(m, "parameters")), 0);
	json_object_put(m);
	idc_buf_free(&b);
}

static void reply_info(void **state)
{
	(void)state;
	struct udb_reply *r;
	struct idc_buf b = IDC_BUF_INIT;
	assert_int_equal(udb_reply_info("1.0", &r), 0);
	assert_int_equal(udb_reply_write(r, false, &b), 0);
	udb_reply_free(r);
	json_object *m = message(&b);
	json_object *p = at(m, "parameters");
	assert_string_equal(json_object_get_string(at(p, "version")), "1.0");
	assert_int_equal(json_object_array_length(at(p, "interfaces")), 2);
	json_object_put(m);
	idc_buf_free(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(reader_splits_and_joins),
	    cmocka_unit_test(reader_bounds_a_message),
	    cmocka_unit_test(call_user_by_name),
	    cmocka_unit_test(call_ids_and_flags),
	    cmocka_unit_test(call_bad_names_are_kept_bad),
	    cmocka_unit_test(call_errors),
	    cmocka_unit_test(call_not_varlink),
	    cmocka_unit_test(reply_user_record),
	    cmocka_unit_test(reply_leaves_out_what_is_not_text),
	    cmocka_unit_test(reply_group_membership_error),
	    cmocka_unit_test(reply_info),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
