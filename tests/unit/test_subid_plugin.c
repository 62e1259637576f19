/*
 * The built libsubid_idcache.so, dlopen()ed as libsubid does, against a
 * server of the test's own on a private run dir: has_range at the edges of
 * one range and across two (a range is inside one or it is not), the
 * 64-bit arguments past 2^32, the arrays list_owner_ranges and
 * find_subid_owners hand out (freed with shadow_subid_free), unknown users,
 * NULL arguments, errno kept, and a daemon that is not there.
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmocka.h>
#include <shadow/subid.h>

#include "proto/proto.h"

/* alice (the test's own uid; 1000 for root): uids 100000+65536 and
 * 300000+10; gids 5000+1. mallory has alice's ranges under another uid:
 * a name getpwnam answers with someone else (has_range gives a caller
 * other than root only its own). */
static const uint32_t alice_uids[][2] = {{100000, 65536}, {300000, 10}};
static const uint32_t alice_gids[][2] = {{5000, 1}};

static char rundir[64], sockpath[128];
static int listen_fd = -1;
static pthread_t server;

static uint32_t alice_uid(void)
{
	return getuid() == 0 ? 1000 : (uint32_t)getuid();
}

static void put_ranges(struct idc_buf *b, const struct proto_req *r, uint32_t owner)
{
	bool uid = r->what == PROTO_SUBID_UID;
	uint32_t n = uid ? 2 : 1;
	size_t at;
	proto_reply_begin(b, r->cmd, PROTO_ST_OK, &at);
	proto_put_u32(b, owner);
	proto_put_u32(b, n);
	for (uint32_t i = 0; i < n; i++) {
		proto_put_u32(b, uid ? alice_uids[i][0] : alice_gids[i][0]);
		proto_put_u32(b, uid ? alice_uids[i][1] : alice_gids[i][1]);
	}
	proto_reply_end(b, at);
}

static void answer(struct idc_buf *b, const struct proto_req *r)
{
	size_t at;
	if (r->cmd == PROTO_CMD_HELLO) {
		proto_reply_begin(b, r->cmd, PROTO_ST_OK, &at);
		proto_put_u32(b, PROTO_VERSION);
		proto_reply_end(b, at);
	} else if (r->cmd == PROTO_CMD_SUBIDS && strcmp(r->name.p, "alice") == 0) {
		put_ranges(b, r, alice_uid());
	} else if (r->cmd == PROTO_CMD_SUBIDS && strcmp(r->name.p, "mallory") == 0) {
		put_ranges(b, r, alice_uid() + 1);
	} else if (r->cmd == PROTO_CMD_SUBID_OWNERS && r->id >= 100000 && r->id < 165536) {
		proto_reply_begin(b, r->cmd, PROTO_ST_OK, &at);
		proto_put_u32(b, 2);
		proto_put_u32(b, 1000);
		proto_put_u32(b, 1001);
		proto_reply_end(b, at);
	} else if (r->cmd == PROTO_CMD_SUBID_OWNERS) {
		proto_reply_begin(b, r->cmd, PROTO_ST_OK, &at);
		proto_put_u32(b, 0);
		proto_reply_end(b, at);
	} else {
		proto_reply_status(b, r->cmd, PROTO_ST_NOTFOUND, NULL);
	}
}

/* One connection: frames until the client closes. */
static void serve(int fd)
{
	struct proto_reader rd;
	struct idc_buf out = IDC_BUF_INIT;
	uint8_t buf[4096];
	ssize_t got;
	proto_reader_init(&rd, PROTO_MAX_REQUEST);
	while ((got = read(fd, buf, sizeof(buf))) > 0 &&
	       proto_reader_feed(&rd, buf, (size_t)got) == 0) {
		struct proto_frame f;
		struct proto_req r;
		while (proto_reader_next(&rd, &f) == 1) {
			idc_buf_reset(&out);
			if (proto_decode_request(&f.hdr, f.payload, f.len, &r) == 0)
				answer(&out, &r);
			if (out.len && write(fd, out.data, out.len) != (ssize_t)out.len)
				break;
		}
	}
	proto_reader_free(&rd);
	idc_buf_free(&out);
}

static void *server_main(void *arg)
{
	(void)arg;
	int fd;
	while ((fd = accept(listen_fd, NULL, NULL)) >= 0) {
		serve(fd);
		close(fd);
	}
	return NULL;
}

typedef enum subid_status has_range_fn(const char *, unsigned long, unsigned long, enum subid_type,
				       bool *);
typedef enum subid_status list_fn(const char *, enum subid_type, struct subid_range **, int *);
typedef enum subid_status owners_fn(unsigned long, enum subid_type, uid_t **, int *);
typedef void free_fn(void *);

static void *plugin;
static has_range_fn *has_range;
static list_fn *list_ranges;
static owners_fn *find_owners;
static free_fn *subid_free;

static int setup(void **state)
{
	(void)state;
	const char *path = getenv("IDC_SUBID_PLUGIN");
	if (!path || !(plugin = dlopen(path, RTLD_NOW | RTLD_LOCAL)))
		return -1;
	has_range = (has_range_fn *)dlsym(plugin, "shadow_subid_has_range");
	list_ranges = (list_fn *)dlsym(plugin, "shadow_subid_list_owner_ranges");
	find_owners = (owners_fn *)dlsym(plugin, "shadow_subid_find_subid_owners");
	subid_free = (free_fn *)dlsym(plugin, "shadow_subid_free");
	if (!has_range || !list_ranges || !find_owners || !subid_free)
		return -1;
	snprintf(rundir, sizeof(rundir), "/tmp/idc-subid-XXXXXX");
	if (!mkdtemp(rundir))
		return -1;
	snprintf(sockpath, sizeof(sockpath), "%s/nss.sock", rundir);
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	memcpy(sa.sun_path, sockpath, strlen(sockpath) + 1);
	listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (listen_fd < 0 || bind(listen_fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    listen(listen_fd, 16) < 0)
		return -1;
	setenv("IDCACHE_RUNDIR", rundir, 1);
	return pthread_create(&server, NULL, server_main, NULL);
}

static int teardown(void **state)
{
	(void)state;
	shutdown(listen_fd, SHUT_RDWR);
	pthread_join(server, NULL);
	close(listen_fd);
	unlink(sockpath);
	rmdir(rundir);
	return 0;
}

static bool has(unsigned long start, unsigned long count, enum subid_type t)
{
	bool result = true;
	errno = 4242;
	assert_int_equal(has_range("alice", start, count, t, &result), SUBID_STATUS_SUCCESS);
	assert_int_equal(errno, 4242);
	return result;
}

static void test_has_range(void **state)
{
	(void)state;
	assert_true(has(100000, 65536, ID_TYPE_UID)); /* the whole range */
	assert_true(has(100000, 1, ID_TYPE_UID));
	assert_true(has(165535, 1, ID_TYPE_UID)); /* its last id */
	assert_false(has(165535, 2, ID_TYPE_UID));
	assert_false(has(99999, 2, ID_TYPE_UID));
	assert_false(has(100000, 65537, ID_TYPE_UID));
	assert_true(has(300000, 10, ID_TYPE_UID));                   /* the second range */
	assert_false(has(165530, 300000 - 165530 + 1, ID_TYPE_UID)); /* across both: no */
	assert_false(has(100000, 0, ID_TYPE_UID));                   /* no range at all */
	assert_false(has(100000 + (1ul << 32), 1, ID_TYPE_UID));     /* past 2^32: no alias */
	assert_false(has(~0ul, 2, ID_TYPE_UID));                     /* start + count wraps */
	assert_false(has(100000, ~0ul, ID_TYPE_UID));
	assert_true(has(5000, 1, ID_TYPE_GID));
	assert_false(has(100000, 1, ID_TYPE_GID)); /* the kinds are apart */
	bool result = false;
	assert_int_equal(has_range("mallory", 100000, 1, ID_TYPE_UID, &result),
			 SUBID_STATUS_SUCCESS);
	assert_int_equal(result, getuid() == 0); /* another uid's: root's to map alone */
	result = true;
	assert_int_equal(has_range("bob", 100000, 1, ID_TYPE_UID, &result),
			 SUBID_STATUS_UNKNOWN_USER);
	assert_false(result);
	assert_int_equal(has_range(NULL, 1, 1, ID_TYPE_UID, &result), SUBID_STATUS_ERROR);
	assert_int_equal(has_range("alice", 1, 1, ID_TYPE_UID, NULL), SUBID_STATUS_ERROR);
	assert_int_equal(has_range("alice", 1, 1, (enum subid_type)7, &result), SUBID_STATUS_ERROR);
}

static void test_lists(void **state)
{
	(void)state;
	struct subid_range *r = NULL;
	int n = -1;
	assert_int_equal(list_ranges("alice", ID_TYPE_UID, &r, &n), SUBID_STATUS_SUCCESS);
	assert_int_equal(n, 2);
	assert_int_equal(r[0].start, 100000);
	assert_int_equal(r[0].count, 65536);
	assert_int_equal(r[1].start, 300000);
	assert_int_equal(r[1].count, 10);
	subid_free(r);
	assert_int_equal(list_ranges("nobody-here", ID_TYPE_GID, &r, &n),
			 SUBID_STATUS_UNKNOWN_USER);
	assert_null(r);
	assert_int_equal(n, 0);
	assert_int_equal(list_ranges("alice", ID_TYPE_UID, NULL, &n), SUBID_STATUS_ERROR);

	uid_t *u = NULL;
	assert_int_equal(find_owners(100001, ID_TYPE_UID, &u, &n), SUBID_STATUS_SUCCESS);
	assert_int_equal(n, 2);
	assert_int_equal(u[0], 1000);
	assert_int_equal(u[1], 1001);
	free(u); /* shadow 4.13 frees with free() */
	assert_int_equal(find_owners(7, ID_TYPE_GID, &u, &n), SUBID_STATUS_SUCCESS);
	assert_int_equal(n, 0);
	assert_null(u);
	assert_int_equal(find_owners(1ul << 32, ID_TYPE_UID, &u, &n), SUBID_STATUS_SUCCESS);
	assert_int_equal(n, 0);
	assert_int_equal(find_owners(1, ID_TYPE_UID, NULL, &n), SUBID_STATUS_ERROR);
}

/* Last: no daemon at the run dir. */
static void test_daemon_absent(void **state)
{
	(void)state;
	setenv("IDCACHE_RUNDIR", "/nonexistent-idcache-run", 1);
	bool result = true;
	struct subid_range *r = NULL;
	int n = -1;
	assert_int_equal(has_range("alice", 100000, 1, ID_TYPE_UID, &result),
			 SUBID_STATUS_ERROR_CONN);
	assert_false(result);
	assert_int_equal(list_ranges("alice", ID_TYPE_UID, &r, &n), SUBID_STATUS_ERROR_CONN);
	assert_null(r);
	setenv("IDCACHE_RUNDIR", rundir, 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_has_range),
	    cmocka_unit_test(test_lists),
	    cmocka_unit_test(test_daemon_absent),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
