/* nscddb: the maps glibc's nscd client reads, checked the way glibc reads
 * them (nscddb_find, then the checks nscd_getpw_r.c / nscd_getgr_r.c /
 * nscd_initgroups.c make on a hit). */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "nscddb/nscddb.h"

#define NOW    1700000000
#define EXPIRE (NOW + 300)

static const struct nscddb_head *head(const struct nscddb *m)
{
	size_t len;
	return nscddb_base(m, &len);
}

/* The record answering type/key in m, as glibc finds it. */
static const struct nscddb_datahead *find(const struct nscddb *m, int type, const char *key)
{
	size_t len;
	const void *base = nscddb_base(m, &len);
	return nscddb_find(base, len, type, key, strlen(key) + 1);
}

static const struct nscddb_datahead *find_uid(const struct nscddb *m, int type, uint32_t id)
{
	char buf[16];
	snprintf(buf, sizeof(buf), "%u", id);
	return find(m, type, buf);
}

/* glibc's checks on a passwd hit: the strings inside recsize, each ending
 * in its NUL. The fields into out[5]. */
static int pw_decode(const struct nscddb_datahead *dh, struct nscddb_pw_resp *r, const char *out[5])
{
	memcpy(r, dh + 1, sizeof(*r));
	const char *p = (const char *)(dh + 1) + sizeof(*r);
	const char *end = (const char *)(dh + 1) + dh->recsize;
	int32_t lens[5] = {r->name_len, r->passwd_len, r->gecos_len, r->dir_len, r->shell_len};
	for (int i = 0; i < 5; i++) {
		if (lens[i] < 1 || p + lens[i] > end || p[lens[i] - 1] != '\0')
			return -1;
		out[i] = p;
		p += lens[i];
	}
	return r->version == 2 && r->found == 1 ? 0 : -1;
}

static const struct nscddb_passwd alice = {"alice",   "x",  "Alice A", "/home/alice",
					   "/bin/sh", 5001, 5001};

static void test_layout_and_lookup(void **state)
{
	(void)state;
	struct nscddb *m;
	assert_int_equal(nscddb_open(NSCDDB_PASSWD, NSCDDB_DATA_MIN, &m), 0);
	const struct nscddb_head *h = head(m);
	assert_int_equal(h->version, 2);
	assert_int_equal(h->header_size, 120);
	assert_true(h->module > 0);
	assert_int_equal(h->gc_cycle, 0);
	assert_int_equal(h->nscd_certainly_running, 0);
	uint64_t size;
	assert_true(nscddb_fd(m, &size) >= 0);
	assert_int_equal(size, nscddb_data_off((uint32_t)h->module) + (uint64_t)h->data_size);

	assert_int_equal(nscddb_put_passwd(m, &alice, NSCDDB_KEY_NAME | NSCDDB_KEY_ID, EXPIRE, NOW),
			 0);
	const struct nscddb_datahead *byname = find(m, NSCDDB_GETPWBYNAME, "alice");
	const struct nscddb_datahead *byuid = find_uid(m, NSCDDB_GETPWBYUID, 5001);
	assert_non_null(byname);
	assert_ptr_equal(byname, byuid);
	assert_int_equal(byname->usable, 1);
	assert_int_equal(byname->notfound, 0);
	assert_int_equal(byname->timeout, EXPIRE);
	assert_int_equal((uintptr_t)byname % 8, 0);
	struct nscddb_pw_resp r;
	const char *f[5];
	assert_int_equal(pw_decode(byname, &r, f), 0);
	assert_string_equal(f[0], "alice");
	assert_string_equal(f[1], "x");
	assert_string_equal(f[2], "Alice A");
	assert_string_equal(f[3], "/home/alice");
	assert_string_equal(f[4], "/bin/sh");
	assert_int_equal(r.uid, 5001);
	assert_int_equal(r.gid, 5001);
	/* other types, lengths and spellings miss */
	assert_null(find(m, NSCDDB_GETPWBYNAME, "alic"));
	assert_null(find(m, NSCDDB_GETPWBYNAME, "Alice"));
	assert_null(find(m, NSCDDB_GETGRBYNAME, "alice"));
	assert_null(find_uid(m, NSCDDB_GETPWBYUID, 5002));
	assert_int_equal(head(m)->gc_cycle % 2, 0);
	nscddb_close(m);
}

/* The descriptor handed out is sealed and read-only. */
static void test_sealed_fd(void **state)
{
	(void)state;
	struct nscddb *m;
	assert_int_equal(nscddb_open(NSCDDB_GROUP, NSCDDB_DATA_MIN, &m), 0);
	uint64_t size;
	int fd = nscddb_fd(m, &size);
	int seals = fcntl(fd, F_GET_SEALS);
	assert_true(seals & F_SEAL_SHRINK);
	assert_true(seals & F_SEAL_GROW);
	assert_true(seals & F_SEAL_SEAL);
	assert_true(write(fd, "x", 1) < 0);
	assert_ptr_equal(mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0), MAP_FAILED);
	void *p = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
	assert_ptr_not_equal(p, MAP_FAILED);
	munmap(p, size);
	nscddb_close(m);
}

/* A name and an id are taken over independently; the same entry (same
 * name and id) is replaced on both. */
static void test_keys(void **state)
{
	(void)state;
	struct nscddb *m;
	assert_int_equal(nscddb_open(NSCDDB_PASSWD, NSCDDB_DATA_MIN, &m), 0);
	assert_int_equal(nscddb_put_passwd(m, &alice, 3, EXPIRE, NOW), 0);
	struct nscddb_passwd a2 = alice;
	a2.gecos = "Alice B";
	assert_int_equal(nscddb_put_passwd(m, &a2, NSCDDB_KEY_NAME, EXPIRE, NOW), 0);
	struct nscddb_pw_resp r;
	const char *f[5];
	assert_int_equal(pw_decode(find_uid(m, NSCDDB_GETPWBYUID, 5001), &r, f), 0);
	assert_string_equal(f[2], "Alice B"); /* same entry: both keys */
	/* toor takes uid 0's name key only; root keeps the id */
	struct nscddb_passwd root = {"root", "x", "root", "/root", "/bin/sh", 0, 0};
	struct nscddb_passwd toor = {"toor", "x", "toor", "/root", "/bin/sh", 0, 0};
	assert_int_equal(nscddb_put_passwd(m, &root, 3, EXPIRE, NOW), 0);
	assert_int_equal(nscddb_put_passwd(m, &toor, NSCDDB_KEY_NAME, EXPIRE, NOW), 0);
	assert_int_equal(pw_decode(find_uid(m, NSCDDB_GETPWBYUID, 0), &r, f), 0);
	assert_string_equal(f[0], "root");
	assert_non_null(find(m, NSCDDB_GETPWBYNAME, "toor"));
	/* a renamed uid: the new name takes the id, the old name stays */
	struct nscddb_passwd bob = {"bob", "x", "", "/home/bob", "/bin/sh", 5001, 5001};
	assert_int_equal(nscddb_put_passwd(m, &bob, NSCDDB_KEY_ID, EXPIRE, NOW), 0);
	assert_int_equal(pw_decode(find_uid(m, NSCDDB_GETPWBYUID, 5001), &r, f), 0);
	assert_string_equal(f[0], "bob");
	assert_non_null(find(m, NSCDDB_GETPWBYNAME, "alice"));
	assert_null(find(m, NSCDDB_GETPWBYNAME, "bob"));
	nscddb_close(m);
}

static void test_drop(void **state)
{
	(void)state;
	struct nscddb *m;
	assert_int_equal(nscddb_open(NSCDDB_PASSWD, NSCDDB_DATA_MIN, &m), 0);
	assert_int_equal(nscddb_put_passwd(m, &alice, 3, EXPIRE, NOW), 0);
	int32_t gc = head(m)->gc_cycle;
	assert_int_equal(nscddb_drop_name(m, NSCDDB_GETPWBYNAME, "alice"), 1);
	assert_null(find(m, NSCDDB_GETPWBYNAME, "alice"));
	assert_null(find_uid(m, NSCDDB_GETPWBYUID, 5001)); /* every key of it */
	assert_true(head(m)->gc_cycle > gc);               /* readers look again */
	assert_int_equal(head(m)->gc_cycle % 2, 0);
	assert_int_equal(nscddb_drop_name(m, NSCDDB_GETPWBYNAME, "alice"), 0);

	assert_int_equal(nscddb_put_passwd(m, &alice, 3, EXPIRE, NOW), 0);
	assert_int_equal(nscddb_drop_id(m, NSCDDB_GETPWBYUID, 5001), 1);
	assert_null(find(m, NSCDDB_GETPWBYNAME, "alice"));
	assert_null(find_uid(m, NSCDDB_GETPWBYUID, 5001));
	/* a type of the other database drops nothing */
	assert_int_equal(nscddb_drop_name(m, NSCDDB_GETGRBYNAME, "alice"), 0);
	nscddb_close(m);
}

static const char *const members[] = {"alice", "bob", "carol"};

static void test_group_and_initgroups(void **state)
{
	(void)state;
	struct nscddb *m;
	assert_int_equal(nscddb_open(NSCDDB_GROUP, NSCDDB_DATA_MIN, &m), 0);
	struct nscddb_group g = {"staff", "x", 6000, members, 3};
	assert_int_equal(nscddb_put_group(m, &g, 3, EXPIRE, NOW), 0);
	uint32_t gids[] = {6000, 6001, 100};
	assert_int_equal(nscddb_put_initgroups(m, "alice", gids, 3, EXPIRE, NOW), 0);

	const struct nscddb_datahead *dh = find_uid(m, NSCDDB_GETGRBYGID, 6000);
	assert_non_null(dh);
	assert_ptr_equal(dh, find(m, NSCDDB_GETGRBYNAME, "staff"));
	struct nscddb_gr_resp r;
	memcpy(&r, dh + 1, sizeof(r));
	assert_int_equal(r.mem_cnt, 3);
	assert_int_equal(r.gid, 6000);
	const uint32_t *len = (const uint32_t *)(const void *)((const char *)(dh + 1) + sizeof(r));
	assert_int_equal((uintptr_t)len % 4, 0); /* glibc asserts it */
	const char *p = (const char *)(len + r.mem_cnt);
	const char *end = (const char *)(dh + 1) + dh->recsize;
	assert_string_equal(p, "staff");
	p += r.name_len;
	assert_string_equal(p, "x");
	p += r.passwd_len;
	for (int i = 0; i < 3; i++) {
		assert_int_equal(len[i], strlen(members[i]) + 1);
		assert_string_equal(p, members[i]);
		p += len[i];
	}
	assert_ptr_equal(p, end);

	dh = find(m, NSCDDB_INITGROUPS, "alice");
	assert_non_null(dh);
	struct nscddb_initgr_resp ir;
	memcpy(&ir, dh + 1, sizeof(ir));
	assert_int_equal(ir.ngrps, 3);
	assert_int_equal(dh->recsize, sizeof(ir) + 3 * 4);
	assert_memory_equal((const char *)(dh + 1) + sizeof(ir), gids, sizeof(gids));
	/* the user's name is no group */
	assert_null(find(m, NSCDDB_GETGRBYNAME, "alice"));
	assert_int_equal(nscddb_drop_name(m, NSCDDB_INITGROUPS, "alice"), 1);
	assert_null(find(m, NSCDDB_INITGROUPS, "alice"));
	assert_non_null(find(m, NSCDDB_GETGRBYNAME, "staff"));
	assert_int_equal(nscddb_put_initgroups(m, "alice", gids, 0, EXPIRE, NOW), 0);
	assert_int_equal(nscddb_drop_type(m, NSCDDB_INITGROUPS), 1);
	assert_non_null(find(m, NSCDDB_GETGRBYNAME, "staff"));
	nscddb_close(m);
}

/* glibc checks no expiry: the beat takes expired records out. */
static void test_expiry_and_timestamp(void **state)
{
	(void)state;
	struct nscddb *m;
	assert_int_equal(nscddb_open(NSCDDB_PASSWD, NSCDDB_DATA_MIN, &m), 0);
	assert_int_equal(nscddb_put_passwd(m, &alice, 3, NOW + 10, NOW), 0);
	struct nscddb_passwd bob = {"bob", "x", "", "/home/bob", "/bin/sh", 5002, 5002};
	assert_int_equal(nscddb_put_passwd(m, &bob, 3, NOW + 100, NOW), 0);
	assert_int_equal(nscddb_beat(m, NOW + 9), 0);
	assert_non_null(find(m, NSCDDB_GETPWBYNAME, "alice"));
	assert_int_equal(nscddb_beat(m, NOW + 10), 2); /* both of alice's keys */
	assert_null(find(m, NSCDDB_GETPWBYNAME, "alice"));
	assert_null(find_uid(m, NSCDDB_GETPWBYUID, 5001));
	assert_non_null(find(m, NSCDDB_GETPWBYNAME, "bob"));
	/* glibc drops a map whose timestamp + MAPPING_TIMEOUT is past: ours
	 * goes stale NSCDDB_STALE_S after the last beat */
	uint64_t ts = head(m)->timestamp;
	assert_int_equal(ts + NSCDDB_MAPPING_TIMEOUT, NOW + 10 + NSCDDB_STALE_S);
	nscddb_close(m);
}

/* A full data area: the live records move to a new map, the old one is
 * marked so its clients ask again (gc_cycle odd, data_size past theirs). */
static void test_swap_when_full(void **state)
{
	(void)state;
	struct nscddb *m;
	assert_int_equal(nscddb_open(NSCDDB_PASSWD, NSCDDB_DATA_MIN, &m), 0);
	uint64_t size;
	int fd = dup(nscddb_fd(m, &size));
	const struct nscddb_head *old = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
	assert_ptr_not_equal(old, MAP_FAILED);
	int32_t old_ds = old->data_size;
	char name[32];
	for (uint32_t i = 0; i < 2000; i++) {
		snprintf(name, sizeof(name), "user%u", i);
		struct nscddb_passwd u = {name, "x", "", "/home/u", "/bin/sh", 10000 + i, 100};
		assert_int_equal(nscddb_put_passwd(m, &u, 3, EXPIRE, NOW), 0);
		if (i % 2) /* half of them go again: garbage to compact */
			assert_int_equal(nscddb_drop_id(m, NSCDDB_GETPWBYUID, 10000 + i), 1);
	}
	struct nscddb_stats st;
	nscddb_stats(m, &st);
	assert_true(st.swaps > 0);
	assert_int_equal(st.entries, 2000);
	assert_int_equal(old->gc_cycle % 2, 1);
	assert_true(old->data_size > old_ds);
	assert_null(nscddb_find(old, size, NSCDDB_GETPWBYNAME, "user0", 6));
	for (uint32_t i = 0; i < 2000; i++) {
		snprintf(name, sizeof(name), "user%u", i);
		if (i % 2)
			assert_null(find(m, NSCDDB_GETPWBYNAME, name));
		else
			assert_non_null(find_uid(m, NSCDDB_GETPWBYUID, 10000 + i));
	}
	munmap((void *)(uintptr_t)old, size);
	close(fd);
	nscddb_close(m);
}

/* Full at its bound with everything live: the map starts over empty and
 * the record goes in (the socket answers the others again). */
static void test_full_at_the_bound(void **state)
{
	(void)state;
	struct nscddb *m;
	assert_int_equal(nscddb_open(NSCDDB_PASSWD, NSCDDB_DATA_MIN, &m), 0);
	nscddb_set_max(m, 2 * NSCDDB_DATA_MIN);
	char name[32];
	for (uint32_t i = 0; i < 3000; i++) {
		snprintf(name, sizeof(name), "user%u", i);
		struct nscddb_passwd u = {name, "x", "", "/home/u", "/bin/sh", 10000 + i, 100};
		assert_int_equal(nscddb_put_passwd(m, &u, 3, EXPIRE, NOW), 0);
		assert_non_null(find(m, NSCDDB_GETPWBYNAME, name));
	}
	struct nscddb_stats st;
	nscddb_stats(m, &st);
	assert_true(st.resets > 0);
	assert_true(st.data_size <= 2 * NSCDDB_DATA_MIN);
	assert_true(st.entries < 2 * 3000);
	nscddb_close(m);
}

/* A record past a quarter of the biggest map is refused, not stored. */
static void test_bounds(void **state)
{
	(void)state;
	struct nscddb *m;
	assert_int_equal(nscddb_open(NSCDDB_GROUP, NSCDDB_DATA_MIN, &m), 0);
	size_t n = NSCDDB_DATA_MAX / 4 / 8 + 1; /* gids: n * 2 * 4 bytes */
	uint32_t *gids = calloc(n, 4);
	assert_non_null(gids);
	assert_int_equal(nscddb_put_initgroups(m, "big", gids, n * 2, EXPIRE, NOW), -E2BIG);
	free(gids);
	struct nscddb_group g = {"g", "x", 1, members, 3};
	assert_int_equal(nscddb_put_group(m, &g, 0, EXPIRE, NOW), -EINVAL);
	assert_int_equal(nscddb_put_passwd(m, &alice, 3, EXPIRE, NOW), -EINVAL); /* wrong db */
	nscddb_close(m);
	assert_int_equal(nscddb_open(7, NSCDDB_DATA_MIN, &m), -EINVAL);
	nscddb_close(NULL);
	assert_int_equal(nscddb_put_passwd(NULL, &alice, 3, EXPIRE, NOW), 0);
}

/* Someone scribbles over the map: the writer and the lookup stay inside
 * it and terminate, whatever they then find. */
static void test_hostile_map(void **state)
{
	(void)state;
	srand(7);
	for (int round = 0; round < 50; round++) {
		struct nscddb *m;
		assert_int_equal(nscddb_open(NSCDDB_GROUP, NSCDDB_DATA_MIN, &m), 0);
		char name[32];
		for (uint32_t i = 0; i < 100; i++) {
			snprintf(name, sizeof(name), "g%u", i);
			struct nscddb_group g = {name, "x", 7000 + i, members, 3};
			assert_int_equal(nscddb_put_group(m, &g, 3, EXPIRE, NOW), 0);
		}
		size_t len;
		uint8_t *base = nscddb_base(m, &len);
		size_t used = nscddb_data_off((uint32_t)head(m)->module) + 100 * 200;
		for (int k = 0; k < 200; k++) /* words of the table and data */
			base[NSCDDB_HEAD_SIZE + (size_t)rand() % (used - NSCDDB_HEAD_SIZE)] =
			    (uint8_t)rand();
		for (uint32_t i = 0; i < 100; i++) {
			snprintf(name, sizeof(name), "g%u", i);
			(void)find(m, NSCDDB_GETGRBYNAME, name);
			struct nscddb_group g = {name, "y", 7000 + i, members, 2};
			(void)nscddb_put_group(m, &g, (i % 3) + 1, EXPIRE, NOW);
			(void)nscddb_drop_id(m, NSCDDB_GETGRBYGID, 7000 + (i * 7) % 100);
		}
		(void)nscddb_beat(m, EXPIRE + 1);
		nscddb_close(m);
	}
	/* a buffer of noise read as a map */
	uint8_t *noise = malloc(65536);
	assert_non_null(noise);
	for (int round = 0; round < 200; round++) {
		for (size_t i = 0; i < 65536; i++)
			noise[i] = (uint8_t)rand();
		struct nscddb_head *h = (struct nscddb_head *)(void *)noise;
		h->version = 2;
		h->header_size = 120;
		h->module = 1 + rand() % 100;
		h->data_size = rand() % 60000;
		(void)nscddb_find(noise, 65536, rand() % 16, "g1", 3);
	}
	free(noise);
}

static void test_hash(void **state)
{
	(void)state;
	/* sdbm: h = byte + 65599 * h, over the key and its NUL */
	assert_int_equal(nscddb_hash("", 1), 0);
	assert_int_equal(nscddb_hash("a", 1), 97);
	assert_int_equal(nscddb_hash("a", 2), 97u * 65599u);
	assert_int_equal(nscddb_hash("ab", 2), 98u + 97u * 65599u);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_hash),
	    cmocka_unit_test(test_layout_and_lookup),
	    cmocka_unit_test(test_sealed_fd),
	    cmocka_unit_test(test_keys),
	    cmocka_unit_test(test_drop),
	    cmocka_unit_test(test_group_and_initgroups),
	    cmocka_unit_test(test_expiry_and_timestamp),
	    cmocka_unit_test(test_swap_when_full),
	    cmocka_unit_test(test_full_at_the_bound),
	    cmocka_unit_test(test_bounds),
	    cmocka_unit_test(test_hostile_map),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
