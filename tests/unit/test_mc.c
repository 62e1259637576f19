/*
 * Unit tests for src/mc: writer and reader in one process and across fork —
 * hits, misses, expiry, eviction, invalidation, reset and recycling, the
 * heartbeat, the seals, every buffer size, a torn-read stress test with a
 * writer process and reader processes, and corruption of the maps while
 * readers run.
 *
 * The readers get their maps the way the NSS module does, as a descriptor
 * handed over by whoever holds the writer: here a broker in memory shared
 * across fork names (pid, descriptor) per kind, and the source reopens it
 * through /proc/PID/fd.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "mc/mc.h"

#define SMALL_MAP 16384u
#define BIG_MAP   (1u << 20)

static char dir[64];

struct broker {
	_Atomic int pid[4];
	_Atomic int fd[4];         /* -1: no map (no daemon) */
	_Atomic bool disabled[4];  /* the daemon says the map is disabled */
	_Atomic unsigned asked[4]; /* source calls */
};
static struct broker *broker_mem;

/* Hand out the writer's current map of kind (a NULL writer: none). */
static void publish(struct mc_writer *w, uint32_t kind)
{
	atomic_store(&broker_mem->pid[kind], (int)getpid());
	atomic_store(&broker_mem->fd[kind], w ? mc_writer_fd(w) : -1);
}

/* The same for any descriptor of this process (garbage, an unsealed file). */
static void publish_fd(int fd, uint32_t kind)
{
	atomic_store(&broker_mem->pid[kind], (int)getpid());
	atomic_store(&broker_mem->fd[kind], fd);
}

static int source(void *ctx, uint32_t kind)
{
	(void)ctx;
	atomic_fetch_add(&broker_mem->asked[kind], 1);
	if (atomic_load(&broker_mem->disabled[kind]))
		return -ENODATA;
	int fd = atomic_load(&broker_mem->fd[kind]);
	if (fd < 0)
		return -ECONNREFUSED;
	char p[64];
	snprintf(p, sizeof(p), "/proc/%d/fd/%d", atomic_load(&broker_mem->pid[kind]), fd);
	int ro = open(p, O_RDONLY | O_CLOEXEC);
	return ro < 0 ? -errno : ro;
}

/* Descriptors this process has open. */
static int open_count(void)
{
	int n = 0;
	for (int fd = 0; fd < 1024; fd++)
		n += fcntl(fd, F_GETFD) >= 0;
	return n;
}

static int wopen(uint32_t kind, uint64_t size, struct mc_writer **w)
{
	int rc = mc_writer_open(kind, size, w);
	if (rc == 0)
		publish(*w, kind);
	return rc;
}

static int wreset(struct mc_writer *w, uint32_t kind, uint64_t size)
{
	int rc = mc_writer_reset(w, size);
	if (rc == 0)
		publish(w, kind);
	return rc;
}

static int64_t later(void)
{
	return (int64_t)time(NULL) + 3600;
}

static int setup(void **state)
{
	(void)state;
	if (broker_mem == NULL) {
		broker_mem = mmap(NULL, sizeof(*broker_mem), PROT_READ | PROT_WRITE,
				  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
		if (broker_mem == MAP_FAILED)
			return -1;
	}
	for (int k = 0; k < 4; k++) {
		atomic_store(&broker_mem->fd[k], -1);
		atomic_store(&broker_mem->disabled[k], false);
		atomic_store(&broker_mem->asked[k], 0);
	}
	strcpy(dir, "/tmp/test_mc.XXXXXX");
	return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	return system(cmd) == 0 ? 0 : -1;
}

static struct proto_str S(const char *s) {
	struct proto_str r = {s, (uint32_t)strlen(s)};
	return r;
}

/* Both keys: the record answers by name and by id. */
#define BOTH (MC_KEY_NAME | MC_KEY_ID)

static int
put_pw(struct mc_writer *w, const char *name, uint32_t uid, const char *gecos, int64_t expire,
       unsigned keys)
{
	struct proto_passwd pw = {S(name),  S("x"),       uid,         uid + 1,
				  S(gecos), S("/home/x"), S("/bin/sh")};
	return mc_put_passwd(w, &pw, expire, keys);
}

/* A group with C-string members, encoded as the wire list. */
static int put_gr(struct mc_writer *w, const char *name, uint32_t gid, const char *const *mem,
		  uint32_t n, int64_t expire)
{
	struct idc_buf b = IDC_BUF_INIT;
	for (uint32_t i = 0; i < n; i++)
		assert_int_equal(proto_put_cstr(&b, mem[i]), 0);
	struct proto_group gr = {S(name), S("*"), gid, {(const uint8_t *)b.data, b.len, n}};
	int rc = mc_put_group(w, &gr, expire, BOTH);
	idc_buf_free(&b);
	return rc;
}

static void reader(struct mc_reader *r, uint32_t kind)
{
	assert_int_equal(mc_reader_init(r, kind, source, NULL), 0);
}

/* ---- basics ------------------------------------------------------------------ */

static void test_hit_miss(void **state)
{
	(void)state;
	struct mc_writer *w;
	struct mc_reader r;
	struct passwd pw;
	char buf[1024];
	reader(&r, MC_PASSWD);
	/* No file yet: a miss, not an error. */
	assert_int_equal(mc_getpwnam(&r, "alice", 5, &pw, buf, sizeof(buf)), -ENOENT);
	assert_int_equal(wopen(MC_PASSWD, BIG_MAP, &w), 0);
	assert_int_equal(put_pw(w, "alice", 1000, "Alice A", later(), BOTH), 0);
	assert_int_equal(mc_getpwnam(&r, "alice", 5, &pw, buf, sizeof(buf)), 0);
	assert_string_equal(pw.pw_name, "alice");
	assert_string_equal(pw.pw_gecos, "Alice A");
	assert_string_equal(pw.pw_shell, "/bin/sh");
	assert_int_equal(pw.pw_uid, 1000);
	assert_int_equal(pw.pw_gid, 1001);
	memset(&pw, 0, sizeof(pw));
	assert_int_equal(mc_getpwuid(&r, 1000, &pw, buf, sizeof(buf)), 0);
	assert_string_equal(pw.pw_name, "alice");
	assert_int_equal(mc_getpwnam(&r, "alicE", 5, &pw, buf, sizeof(buf)), -ENOENT);
	assert_int_equal(mc_getpwnam(&r, "alic", 4, &pw, buf, sizeof(buf)), -ENOENT);
	assert_int_equal(mc_getpwuid(&r, 1001, &pw, buf, sizeof(buf)), -ENOENT);
	/* A passwd reader never answers from another kind's API. */
	assert_int_equal(mc_getgrgid(&r, 1000, NULL, buf, sizeof(buf)), -ENOENT);

	/* uid 0 is root's; toor is found by name only. */
	assert_int_equal(put_pw(w, "root", 0, "root", later(), BOTH), 0);
	assert_int_equal(put_pw(w, "toor", 0, "toor", later(), MC_KEY_NAME), 0);
	assert_int_equal(mc_getpwuid(&r, 0, &pw, buf, sizeof(buf)), 0);
	assert_string_equal(pw.pw_name, "root");
	assert_int_equal(mc_getpwnam(&r, "toor", 4, &pw, buf, sizeof(buf)), 0);
	/* toor taking the id over. */
	assert_int_equal(put_pw(w, "toor", 0, "toor", later(), BOTH), 0);
	assert_int_equal(mc_getpwuid(&r, 0, &pw, buf, sizeof(buf)), 0);
	assert_string_equal(pw.pw_name, "toor");
	assert_int_equal(mc_getpwnam(&r, "root", 4, &pw, buf, sizeof(buf)), 0);

	struct mc_stats st;
	mc_writer_stats(w, &st);
	assert_int_equal(st.records, 3);
	assert_int_equal(st.size, BIG_MAP);
	mc_writer_close(w);
	mc_reader_close(&r);
}

static void test_expiry_update_invalidate(void **state)
{
	(void)state;
	struct mc_writer *w;
	struct mc_reader r;
	struct passwd pw;
	char buf[1024];
	reader(&r, MC_PASSWD);
	assert_int_equal(wopen(MC_PASSWD, BIG_MAP, &w), 0);
	assert_int_equal(put_pw(w, "old", 5, "g", (int64_t)time(NULL) - 1, BOTH), 0);
	assert_int_equal(mc_getpwnam(&r, "old", 3, &pw, buf, sizeof(buf)), -ENOENT);
	assert_int_equal(mc_getpwuid(&r, 5, &pw, buf, sizeof(buf)), -ENOENT);
	assert_int_equal(put_pw(w, "old", 5, "h", later(), BOTH), 0); /* in place */
	assert_int_equal(mc_getpwnam(&r, "old", 3, &pw, buf, sizeof(buf)), 0);
	assert_string_equal(pw.pw_gecos, "h");
	assert_int_equal(put_pw(w, "old", 5, "a much longer gecos field than before, so it moves",
				later(), MC_KEY_NAME),
			 0);
	assert_int_equal(mc_getpwnam(&r, "old", 3, &pw, buf, sizeof(buf)), 0);
	assert_string_equal(pw.pw_gecos, "a much longer gecos field than before, so it moves");
	/* The same name and id are the same entry: it still answers by id,
	 * with the new data. */
	assert_int_equal(mc_getpwuid(&r, 5, &pw, buf, sizeof(buf)), 0);
	assert_string_equal(pw.pw_gecos, "a much longer gecos field than before, so it moves");
	/* Another id under the name: the name moves to it; uid 5 stays
	 * with the record stored for it until the daemon drops that id. */
	assert_int_equal(put_pw(w, "old", 6, "h", later(), BOTH), 0);
	assert_int_equal(mc_getpwuid(&r, 6, &pw, buf, sizeof(buf)), 0);
	assert_int_equal(mc_getpwnam(&r, "old", 3, &pw, buf, sizeof(buf)), 0);
	assert_int_equal(pw.pw_uid, 6);
	assert_int_equal(mc_getpwuid(&r, 5, &pw, buf, sizeof(buf)), 0);
	assert_int_equal(mc_invalidate_id(w, 5), 1);
	assert_int_equal(mc_getpwuid(&r, 5, &pw, buf, sizeof(buf)), -ENOENT);

	assert_int_equal(put_pw(w, "bob", 7, "b", later(), BOTH), 0);
	assert_int_equal(mc_invalidate_name(w, "bob", 3), 1);
	assert_int_equal(mc_invalidate_name(w, "bob", 3), 0);
	assert_int_equal(mc_getpwnam(&r, "bob", 3, &pw, buf, sizeof(buf)), -ENOENT);
	assert_int_equal(mc_getpwuid(&r, 7, &pw, buf, sizeof(buf)), -ENOENT);
	assert_int_equal(mc_invalidate_id(w, 6), 1);
	assert_int_equal(mc_getpwnam(&r, "old", 3, &pw, buf, sizeof(buf)), -ENOENT);
	assert_int_equal(mc_getpwuid(&r, 6, &pw, buf, sizeof(buf)), -ENOENT);
	mc_writer_close(w);
	mc_reader_close(&r);
}

/* The name and the id keys are independent (docs/DESIGN.md §11): domains a, b, c
 * in that order; alice is 2001 in a and 9999 in b; bob is 7000 in b and
 * 7777 in c, and 7000 is a's zed. What the daemon stores for an id never
 * takes a name from another entry, nor the other way round. */
static void test_keys_independent(void **state)
{
	(void)state;
	struct mc_writer *w;
	struct mc_reader r;
	struct passwd pw;
	char buf[1024];
	struct mc_stats st;
	reader(&r, MC_PASSWD);
	assert_int_equal(wopen(MC_PASSWD, BIG_MAP, &w), 0);
	assert_int_equal(put_pw(w, "alice", 2001, "a", later(), 0), -EINVAL);
	assert_int_equal(put_pw(w, "alice", 2001, "a", later(), 4), -EINVAL);
	assert_int_equal(put_pw(w, "alice", 2001, "a", later(), MC_KEY_NAME), 0);
	assert_int_equal(put_pw(w, "alice", 9999, "b", later(), MC_KEY_ID), 0);
	assert_int_equal(mc_getpwnam(&r, "alice", 5, &pw, buf, sizeof(buf)), 0);
	assert_int_equal(pw.pw_uid, 2001);
	assert_int_equal(mc_getpwuid(&r, 9999, &pw, buf, sizeof(buf)), 0);
	assert_string_equal(pw.pw_gecos, "b");
	/* Not an answer by id: 2001 was never stored for its id. */
	assert_int_equal(mc_getpwuid(&r, 2001, &pw, buf, sizeof(buf)), -ENOENT);
	/* The same entry by id: one record answers both. */
	assert_int_equal(put_pw(w, "alice", 2001, "a", later(), MC_KEY_ID), 0);
	assert_int_equal(mc_getpwuid(&r, 2001, &pw, buf, sizeof(buf)), 0);
	assert_string_equal(pw.pw_gecos, "a");
	mc_writer_stats(w, &st);
	assert_int_equal(st.records, 2);
	/* The name again, by id first: the name stays a's. */
	assert_int_equal(put_pw(w, "alice", 9999, "b", later(), MC_KEY_ID), 0);
	assert_int_equal(mc_getpwnam(&r, "alice", 5, &pw, buf, sizeof(buf)), 0);
	assert_int_equal(pw.pw_uid, 2001);

	/* bob: c's record for 7777 first, then b's by name (7000), whose id
	 * is zed's: the name record must not take 7000 from zed. */
	assert_int_equal(put_pw(w, "zed", 7000, "z", later(), BOTH), 0);
	assert_int_equal(put_pw(w, "bob", 7777, "c", later(), MC_KEY_ID), 0);
	assert_int_equal(put_pw(w, "bob", 7000, "b", later(), MC_KEY_NAME), 0);
	assert_int_equal(mc_getpwuid(&r, 7000, &pw, buf, sizeof(buf)), 0);
	assert_string_equal(pw.pw_name, "zed");
	assert_int_equal(mc_getpwuid(&r, 7777, &pw, buf, sizeof(buf)), 0);
	assert_string_equal(pw.pw_gecos, "c");
	assert_int_equal(mc_getpwnam(&r, "bob", 3, &pw, buf, sizeof(buf)), 0);
	assert_int_equal(pw.pw_uid, 7000);
	/* The same the other way round. */
	assert_int_equal(put_pw(w, "bob", 7777, "c", later(), MC_KEY_ID), 0);
	assert_int_equal(mc_getpwnam(&r, "bob", 3, &pw, buf, sizeof(buf)), 0);
	assert_int_equal(pw.pw_uid, 7000);

	/* Taking a key over leaves the other key of the record alone: zed
	 * loses 7000 to another record, keeps its name. */
	assert_int_equal(put_pw(w, "mallory", 7000, "m", later(), MC_KEY_ID), 0);
	assert_int_equal(mc_getpwuid(&r, 7000, &pw, buf, sizeof(buf)), 0);
	assert_string_equal(pw.pw_name, "mallory");
	assert_int_equal(mc_getpwnam(&r, "zed", 3, &pw, buf, sizeof(buf)), 0);
	/* A record left with no key is gone: mallory by id only, then
	 * replaced by id. */
	mc_writer_stats(w, &st);
	uint32_t before = st.records;
	assert_int_equal(put_pw(w, "trent", 7000, "t", later(), MC_KEY_ID), 0);
	mc_writer_stats(w, &st);
	assert_int_equal(st.records, before);
	assert_int_equal(mc_getpwnam(&r, "mallory", 7, &pw, buf, sizeof(buf)), -ENOENT);

	/* Invalidation by name drops the name's record only: b's alice
	 * still answers 9999. */
	assert_int_equal(mc_invalidate_name(w, "alice", 5), 1);
	assert_int_equal(mc_getpwnam(&r, "alice", 5, &pw, buf, sizeof(buf)), -ENOENT);
	assert_int_equal(mc_getpwuid(&r, 2001, &pw, buf, sizeof(buf)), -ENOENT);
	assert_int_equal(mc_getpwuid(&r, 9999, &pw, buf, sizeof(buf)), 0);
	assert_int_equal(mc_lookup_id(w, "alice", 5, &(uint32_t){0}), -ENOENT);
	mc_writer_close(w);
	mc_reader_close(&r);
}

static void test_eviction(void **state)
{
	(void)state;
	struct mc_writer *w;
	struct mc_reader r;
	struct passwd pw;
	char buf[1024], name[32];
	reader(&r, MC_PASSWD);
	assert_int_equal(wopen(MC_PASSWD, SMALL_MAP, &w), 0);
	for (uint32_t i = 0; i < 2000; i++) {
		snprintf(name, sizeof(name), "user%u", i);
		assert_int_equal(put_pw(w, name, 10000 + i, name, later(), BOTH), 0);
	}
	struct mc_stats st;
	mc_writer_stats(w, &st);
	assert_true(st.evictions > 1000);
	assert_true(st.records > 10 && st.records < 2000);
	assert_true(st.slots_used <= st.slot_count);
	/* The newest are there; whatever answers is the right record. */
	assert_int_equal(mc_getpwnam(&r, "user1999", 8, &pw, buf, sizeof(buf)), 0);
	assert_int_equal(mc_getpwnam(&r, "user0", 5, &pw, buf, sizeof(buf)), -ENOENT);
	uint32_t hits = 0;
	for (uint32_t i = 0; i < 2000; i++) {
		snprintf(name, sizeof(name), "user%u", i);
		if (mc_getpwuid(&r, 10000 + i, &pw, buf, sizeof(buf)) == 0) {
			assert_string_equal(pw.pw_name, name);
			hits++;
		}
	}
	assert_int_equal(hits, st.records);
	/* A record larger than a quarter of the map is refused. */
	char big[8192];
	memset(big, 'g', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	assert_int_equal(put_pw(w, "big", 1, big, later(), BOTH), -E2BIG);
	mc_writer_close(w);
	mc_reader_close(&r);
}

/* Every buffer size from 0 up: ERANGE below the exact need, a correct
 * record from it on. */
static void test_buffer_sizes(void **state)
{
	(void)state;
	struct mc_writer *w, *wg;
	struct mc_reader r, rg;
	reader(&r, MC_PASSWD);
	reader(&rg, MC_GROUP);
	assert_int_equal(wopen(MC_PASSWD, BIG_MAP, &w), 0);
	assert_int_equal(wopen(MC_GROUP, BIG_MAP, &wg), 0);
	char gecos[3000];
	memset(gecos, 'z', sizeof(gecos) - 1);
	gecos[sizeof(gecos) - 1] = '\0';
	assert_int_equal(put_pw(w, "alice", 1, "A", later(), BOTH), 0);
	assert_int_equal(put_pw(w, "large", 2, gecos, later(), BOTH), 0);
	static const char *const mem[] = {"alice", "bob", "carol", "a-rather-long-member-name"};
	assert_int_equal(put_gr(wg, "staff", 50, mem, 4, later()), 0);
	assert_int_equal(put_gr(wg, "empty", 51, NULL, 0, later()), 0);

	static _Alignas(16) char buf[8192];
	const char *names[] = {"alice", "large"};
	for (size_t n = 0; n < 2; n++) {
		size_t need = strlen(names[n]) + 3 + strlen(n ? gecos : "A") + 1 + 8 + 8;
		for (size_t len = 0; len < need + 40; len++) {
			struct passwd pw;
			int rc = mc_getpwnam(&r, names[n], strlen(names[n]), &pw, buf, len);
			assert_int_equal(rc, len < need ? -ERANGE : 0);
			if (rc == 0) {
				assert_string_equal(pw.pw_name, names[n]);
				assert_true(pw.pw_shell + strlen(pw.pw_shell) < buf + len);
			}
		}
	}
	const char *gnames[] = {"staff", "empty"};
	for (size_t n = 0; n < 2; n++) {
		size_t need = 0;
		for (size_t len = 0; len < 400; len++) {
			struct group gr;
			int rc = mc_getgrnam(&rg, gnames[n], 5, &gr, buf, len);
			if (need == 0 && rc == 0)
				need = len;
			assert_int_equal(rc, need == 0 ? -ERANGE : 0);
			if (rc == 0) {
				assert_string_equal(gr.gr_name, gnames[n]);
				uint32_t k = 0;
				while (gr.gr_mem[k] != NULL) {
					assert_string_equal(gr.gr_mem[k], mem[k]);
					k++;
				}
				assert_int_equal(k, n ? 0 : 4);
				assert_true((char *)&gr.gr_mem[k + 1] <= buf + len);
			}
		}
		/* Strings + alignment + the pointer array, exactly. */
		size_t strings = 5 + 1 + 2 + (n ? 0 : 6 + 4 + 6 + 26);
		size_t expect = ((strings + 7) & ~(size_t)7) + (n ? 1 : 5) * sizeof(char *);
		assert_int_equal(need, expect);
	}
	mc_writer_close(w);
	mc_writer_close(wg);
	mc_reader_close(&r);
	mc_reader_close(&rg);
}

static void test_initgroups(void **state)
{
	(void)state;
	struct mc_writer *w;
	struct mc_reader r;
	reader(&r, MC_INITGROUPS);
	assert_int_equal(wopen(MC_INITGROUPS, BIG_MAP, &w), 0);
	/* Stored in the order given (the daemon's, which is the provider's). */
	uint32_t in[] = {30, 10, 20, 5};
	assert_int_equal(mc_put_initgroups(w, "alice", 5, in, 4, later()), 0);
	assert_int_equal(mc_put_initgroups(w, "nobody", 6, NULL, 0, later()), 0);
	uint32_t out[8];
	size_t n = 99;
	assert_int_equal(mc_initgroups(&r, "alice", 5, out, 3, &n), -ERANGE);
	assert_int_equal(n, 4);
	assert_int_equal(mc_initgroups(&r, "alice", 5, out, 4, &n), 0);
	assert_int_equal(n, 4);
	assert_int_equal(out[0], 30);
	assert_int_equal(out[1], 10);
	assert_int_equal(out[2], 20);
	assert_int_equal(out[3], 5);
	assert_int_equal(mc_initgroups(&r, "nobody", 6, out, 0, &n), 0);
	assert_int_equal(n, 0);
	assert_int_equal(mc_initgroups(&r, "bob", 3, out, 8, &n), -ENOENT);
	assert_int_equal(mc_invalidate_name(w, "alice", 5), 1);
	assert_int_equal(mc_initgroups(&r, "alice", 5, out, 8, &n), -ENOENT);
	/* 200 groups, the budget's case. */
	uint32_t many[200];
	for (uint32_t i = 0; i < 200; i++)
		many[i] = 5000 + 199 - i;
	assert_int_equal(mc_put_initgroups(w, "carol", 5, many, 200, later()), 0);
	uint32_t got[200];
	assert_int_equal(mc_initgroups(&r, "carol", 5, got, 200, &n), 0);
	assert_int_equal(n, 200);
	for (uint32_t i = 0; i < 200; i++)
		assert_int_equal(got[i], many[i]);
	mc_writer_close(w);
	mc_reader_close(&r);
}

/* Exact invalidation: the id a record carries, found by name, drops the
 * record answering for that id under another name too; nothing else goes. */
static void test_lookup_id_exact_invalidation(void **state)
{
	(void)state;
	struct mc_writer *w, *wg, *wi;
	struct mc_reader r, rg;
	struct passwd pw;
	struct group gr;
	char buf[1024];
	uint32_t id = 0;
	reader(&r, MC_PASSWD);
	reader(&rg, MC_GROUP);
	assert_int_equal(wopen(MC_PASSWD, BIG_MAP, &w), 0);
	assert_int_equal(wopen(MC_GROUP, BIG_MAP, &wg), 0);
	assert_int_equal(wopen(MC_INITGROUPS, BIG_MAP, &wi), 0);
	assert_int_equal(mc_lookup_id(w, "alice", 5, &id), -ENOENT);
	assert_int_equal(mc_lookup_id(NULL, "alice", 5, &id), -ENOENT);
	assert_int_equal(mc_lookup_id(w, "", 0, &id), -ENOENT);
	/* "alice" by name; uid 1000 answered by "Alice" (another spelling
	 * the daemon once answered with), "bob" unrelated. */
	assert_int_equal(put_pw(w, "alice", 1000, "a", later(), MC_KEY_NAME), 0);
	assert_int_equal(put_pw(w, "Alice", 1000, "A", later(), BOTH), 0);
	assert_int_equal(put_pw(w, "bob", 1001, "b", later(), BOTH), 0);
	assert_int_equal(mc_lookup_id(w, "alice", 5, &id), 0);
	assert_int_equal(id, 1000);
	assert_int_equal(mc_lookup_id(w, "alicE", 5, &id), -ENOENT);
	/* What the daemon does for `expire --user alice`. */
	assert_int_equal(mc_invalidate_id(w, id), 1);
	assert_int_equal(mc_invalidate_name(w, "alice", 5), 1);
	assert_int_equal(mc_getpwuid(&r, 1000, &pw, buf, sizeof(buf)), -ENOENT);
	assert_int_equal(mc_getpwnam(&r, "alice", 5, &pw, buf, sizeof(buf)), -ENOENT);
	assert_int_equal(mc_getpwnam(&r, "Alice", 5, &pw, buf, sizeof(buf)), -ENOENT);
	assert_int_equal(mc_getpwnam(&r, "bob", 3, &pw, buf, sizeof(buf)), 0);
	assert_int_equal(mc_getpwuid(&r, 1001, &pw, buf, sizeof(buf)), 0);
	/* A record found by name only still reports its id. */
	assert_int_equal(put_pw(w, "toor", 0, "t", later(), MC_KEY_NAME), 0);
	assert_int_equal(mc_lookup_id(w, "toor", 4, &id), 0);
	assert_int_equal(id, 0);
	struct mc_stats st;
	mc_writer_stats(w, &st);
	assert_int_equal(st.records, 2);

	/* Groups: the same by gid. */
	const char *mem[] = {"alice", "bob"};
	assert_int_equal(put_gr(wg, "staff", 50, mem, 2, later()), 0);
	assert_int_equal(put_gr(wg, "wheel", 10, mem, 1, later()), 0);
	assert_int_equal(mc_lookup_id(wg, "staff", 5, &id), 0);
	assert_int_equal(id, 50);
	assert_int_equal(mc_invalidate_id(wg, id), 1);
	assert_int_equal(mc_getgrgid(&rg, 50, &gr, buf, sizeof(buf)), -ENOENT);
	assert_int_equal(mc_getgrnam(&rg, "wheel", 5, &gr, buf, sizeof(buf)), 0);
	assert_int_equal(mc_getgrgid(&rg, 10, &gr, buf, sizeof(buf)), 0);

	/* initgroups records carry no id: never found, never dropped by id. */
	uint32_t gids[] = {10, 50};
	assert_int_equal(mc_put_initgroups(wi, "alice", 5, gids, 2, later()), 0);
	assert_int_equal(mc_lookup_id(wi, "alice", 5, &id), -ENOENT);
	assert_int_equal(mc_invalidate_id(wi, 0), 0);
	mc_writer_stats(wi, &st);
	assert_int_equal(st.records, 1);
	mc_writer_close(w);
	mc_writer_close(wg);
	mc_writer_close(wi);
	mc_reader_close(&r);
	mc_reader_close(&rg);
}

/* ---- reset, recycling, disabling ------------------------------------------------ */

static void test_reset_recycle(void **state)
{
	(void)state;
	struct mc_writer *w;
	struct mc_reader r;
	struct passwd pw;
	char buf[1024];
	reader(&r, MC_PASSWD);
	assert_int_equal(wopen(MC_PASSWD, BIG_MAP, &w), 0);
	assert_int_equal(put_pw(w, "alice", 1000, "A", later(), BOTH), 0);
	assert_int_equal(mc_getpwnam(&r, "alice", 5, &pw, buf, sizeof(buf)), 0);
	/* Reset: empty, new file; the reader notices from its mapping. */
	for (int i = 0; i < 10; i++) {
		assert_int_equal(wreset(w, MC_PASSWD, i % 2 ? BIG_MAP : SMALL_MAP), 0);
		assert_int_equal(mc_getpwnam(&r, "alice", 5, &pw, buf, sizeof(buf)), -ENOENT);
		assert_int_equal(put_pw(w, "alice", 1000, "B", later(), BOTH), 0);
		assert_int_equal(mc_getpwnam(&r, "alice", 5, &pw, buf, sizeof(buf)), 0);
		assert_string_equal(pw.pw_gecos, "B");
	}
	struct mc_stats st;
	mc_writer_stats(w, &st);
	assert_int_equal(st.generation, 11);
	assert_int_equal(st.size, BIG_MAP);
	/* A daemon killed: its map keeps answering until its beat is stale,
	 * then the reader asks again and gets nothing (no daemon). */
	uint32_t now = mc_clock_ms(NULL);
	mc_writer_beat(w, now - MC_STALE_MS + 200);
	assert_int_equal(mc_getpwnam(&r, "alice", 5, &pw, buf, sizeof(buf)), 0);
	mc_writer_beat(w, now - MC_STALE_MS - 10);
	publish(NULL, MC_PASSWD);
	unsigned asked = atomic_load(&broker_mem->asked[MC_PASSWD]);
	assert_int_equal(mc_getpwnam(&r, "alice", 5, &pw, buf, sizeof(buf)), -ENOENT);
	assert_int_equal(atomic_load(&broker_mem->asked[MC_PASSWD]), asked + 1);
	/* A clock set back makes a beat look ahead of now: still fresh. */
	mc_writer_beat(w, now + 3600 * 1000);
	publish(w, MC_PASSWD);
	assert_int_equal(mc_getpwnam(&r, "alice", 5, &pw, buf, sizeof(buf)), 0);
	/* A new daemon after a killed one: the reader follows once the old
	 * beat is stale, not before. */
	struct mc_writer *w2;
	mc_writer_beat(w, now);
	assert_int_equal(wopen(MC_PASSWD, SMALL_MAP, &w2), 0);
	assert_int_equal(put_pw(w2, "alice", 1000, "C", later(), BOTH), 0);
	assert_int_equal(mc_getpwnam(&r, "alice", 5, &pw, buf, sizeof(buf)), 0);
	assert_string_equal(pw.pw_gecos, "B");
	mc_writer_beat(w, now - MC_STALE_MS - 10);
	mc_writer_close(w);
	assert_int_equal(mc_getpwnam(&r, "alice", 5, &pw, buf, sizeof(buf)), 0);
	assert_string_equal(pw.pw_gecos, "C");
	/* A clean stop withdraws the map at once. */
	mc_writer_retire(w2);
	mc_writer_close(w2);
	publish(NULL, MC_PASSWD);
	assert_int_equal(mc_getpwnam(&r, "alice", 5, &pw, buf, sizeof(buf)), -ENOENT);
	/* Disabled: no writer; the daemon says so, and the reader does not ask
	 * again for MC_RETRY_S (every lookup would cost a round trip). */
	assert_int_equal(wopen(MC_PASSWD, 0, &w), 0);
	assert_null(w);
	assert_int_equal(mc_writer_fd(w), -ENODATA);
	atomic_store(&broker_mem->disabled[MC_PASSWD], true);
	asked = atomic_load(&broker_mem->asked[MC_PASSWD]);
	for (int i = 0; i < 5; i++)
		assert_int_equal(mc_getpwnam(&r, "alice", 5, &pw, buf, sizeof(buf)), -ENOENT);
	assert_int_equal(atomic_load(&broker_mem->asked[MC_PASSWD]), asked + 1);
	assert_int_equal(put_pw(w, "alice", 1000, "C", later(), BOTH), 0); /* NULL: no-op */
	mc_reader_close(&r);
}

static void test_fork(void **state)
{
	(void)state;
	struct mc_writer *w;
	struct mc_reader r;
	struct passwd pw;
	char buf[1024];
	reader(&r, MC_PASSWD);
	assert_int_equal(wopen(MC_PASSWD, BIG_MAP, &w), 0);
	assert_int_equal(put_pw(w, "alice", 1000, "A", later(), BOTH), 0);
	assert_int_equal(mc_getpwnam(&r, "alice", 5, &pw, buf, sizeof(buf)), 0);
	int go[2], done[2];
	assert_int_equal(pipe(go), 0);
	assert_int_equal(pipe(done), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		/* The child uses the inherited mapping, sees the parent's
		 * update, then follows a reset. */
		char c;
		int bad = mc_getpwnam(&r, "alice", 5, &pw, buf, sizeof(buf)) != 0;
		bad |= write(done[1], "1", 1) != 1;
		bad |= read(go[0], &c, 1) != 1;
		bad |= mc_getpwnam(&r, "alice", 5, &pw, buf, sizeof(buf)) != 0 ||
		       strcmp(pw.pw_gecos, "updated") != 0;
		bad |= write(done[1], "2", 1) != 1;
		bad |= read(go[0], &c, 1) != 1;
		bad |= mc_getpwnam(&r, "alice", 5, &pw, buf, sizeof(buf)) != 0 ||
		       strcmp(pw.pw_gecos, "after reset") != 0;
		_exit(bad);
	}
	char c;
	assert_int_equal(read(done[0], &c, 1), 1);
	assert_int_equal(put_pw(w, "alice", 1000, "updated", later(), BOTH), 0);
	assert_int_equal(write(go[1], "1", 1), 1);
	assert_int_equal(read(done[0], &c, 1), 1);
	assert_int_equal(wreset(w, MC_PASSWD, 0), 0);
	assert_int_equal(put_pw(w, "alice", 1000, "after reset", later(), BOTH), 0);
	assert_int_equal(write(go[1], "1", 1), 1);
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	close(go[0]);
	close(go[1]);
	close(done[0]);
	close(done[1]);
	mc_writer_close(w);
	mc_reader_close(&r);
}

/* ---- torn reads ------------------------------------------------------------------ */

#define STRESS_USERS   40
#define STRESS_READERS 4
#define STRESS_SECONDS 2

static uint32_t fnv(uint32_t h, const char *s)
{
	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 16777619u;
	return h;
}

/* The gecos carries a checksum of every other field and of its own body. */
static uint32_t record_sum(const char *name, uint32_t uid, uint32_t gid, const char *dir_,
			   const char *body)
{
	char ids[32];
	snprintf(ids, sizeof(ids), "%u/%u", uid, gid);
	return fnv(fnv(fnv(fnv(2166136261u, name), ids), dir_), body);
}

/* Record v of user i. The keys vary so that records take a name or an id
 * over from one another (detaching one key, keeping the other): u<i> by
 * uid 20000+i, both keys or the name only, u<i> under uid 30000+i by name
 * only, and w<i> by uid 20000+i only. */
static void stress_put(struct mc_writer *w, uint32_t i, uint32_t v)
{
	static const unsigned keys[4] = {BOTH, MC_KEY_NAME, MC_KEY_NAME, MC_KEY_ID};
	char name[16], home[64], body[128], gecos[160];
	snprintf(name, sizeof(name), "%c%u", v % 4 == 3 ? 'w' : 'u', i);
	uint32_t uid = (v % 4 == 2 ? 30000 : 20000) + i;
	snprintf(home, sizeof(home), "/home/%s/%u", name, v);
	/* The length varies, so records move between slots and the ring
	 * reuses slots (reuse_gen) as well as rewriting in place. */
	snprintf(body, sizeof(body), "v%u-%.*s", v, (int)(v % 60),
		 "............................................................");
	snprintf(gecos, sizeof(gecos), "%s:%08x", body, record_sum(name, uid, v, home, body));
	struct proto_passwd pw = {S(name), S("x"), uid, v, S(gecos), S(home), S("/bin/sh")};
	if (mc_put_passwd(w, &pw, later(), keys[v % 4]) < 0)
		_exit(3);
}

/* A whole record that may answer for user i: by name u<i> under either
 * uid, by uid 20000+i as u<i> or w<i>. */
static bool stress_check(const struct passwd *pw, uint32_t i, bool by_name)
{
	char u[16], w[16];
	snprintf(u, sizeof(u), "u%u", i);
	snprintf(w, sizeof(w), "w%u", i);
	const char *colon = strrchr(pw->pw_gecos, ':');
	bool ok = by_name ? strcmp(pw->pw_name, u) == 0 &&
				(pw->pw_uid == 20000 + i || pw->pw_uid == 30000 + i)
			  : pw->pw_uid == 20000 + i &&
				(strcmp(pw->pw_name, u) == 0 || strcmp(pw->pw_name, w) == 0);
	if (!ok || colon == NULL)
		return false;
	char body[128];
	snprintf(body, sizeof(body), "%.*s", (int)(colon - pw->pw_gecos), pw->pw_gecos);
	char want[16];
	snprintf(want, sizeof(want), "%08x",
		 record_sum(pw->pw_name, pw->pw_uid, pw->pw_gid, pw->pw_dir, body));
	return strcmp(colon + 1, want) == 0;
}

static void stress_writer(uint64_t until)
{
	struct mc_writer *w;
	if (wopen(MC_PASSWD, SMALL_MAP, &w) < 0)
		_exit(4);
	for (uint32_t v = 1; idc_now_ns() < until; v++) {
		stress_put(w, v % STRESS_USERS, v);
		if (v % 5000 == 0 &&
		    wreset(w, MC_PASSWD, v % 10000 ? SMALL_MAP : 2 * SMALL_MAP) < 0)
			_exit(5);
		if (v % 777 == 0)
			mc_invalidate_id(w, 20000 + (v / 777) % STRESS_USERS);
	}
	mc_writer_close(w);
	_exit(0);
}

static void stress_reader(uint64_t until, uint64_t *hits)
{
	struct mc_reader r;
	if (mc_reader_init(&r, MC_PASSWD, source, NULL) < 0)
		_exit(4);
	char buf[512];
	uint64_t n = 0;
	for (uint32_t k = 0; idc_now_ns() < until; k++) {
		struct passwd pw;
		uint32_t i = k % STRESS_USERS;
		char name[16];
		snprintf(name, sizeof(name), "u%u", i);
		int rc = k % 2 ? mc_getpwuid(&r, 20000 + i, &pw, buf, sizeof(buf))
			       : mc_getpwnam(&r, name, strlen(name), &pw, buf, sizeof(buf));
		if (rc == 0 && !stress_check(&pw, i, k % 2 == 0))
			_exit(2); /* a torn or foreign record got through */
		if (rc != 0 && rc != -ENOENT)
			_exit(6);
		n += rc == 0;
	}
	*hits = n;
	_exit(0);
}

static void test_torn_reads(void **state)
{
	(void)state;
	uint64_t *hits =
	    mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	assert_true(hits != MAP_FAILED);
	/* Readers miss until the writer process has published its map. */
	uint64_t until = idc_now_ns() + STRESS_SECONDS * 1000000000ull;
	pid_t pids[1 + STRESS_READERS];
	for (int i = 0; i <= STRESS_READERS; i++) {
		pids[i] = fork();
		assert_true(pids[i] >= 0);
		if (pids[i] == 0) {
			if (i == 0)
				stress_writer(until);
			stress_reader(until, &hits[i]);
		}
	}
	uint64_t total = 0;
	for (int i = 0; i <= STRESS_READERS; i++) {
		int status;
		assert_int_equal(waitpid(pids[i], &status, 0), pids[i]);
		assert_true(WIFEXITED(status));
		assert_int_equal(WEXITSTATUS(status), 0);
		total += i ? hits[i] : 0;
	}
	print_message("torn-read stress: %llu verified hits\n", (unsigned long long)total);
	assert_true(total > 1000);
	munmap(hits, 4096);
}

/* ---- threads ---------------------------------------------------------------------- */

struct thr {
	struct mc_reader *r;
	uint64_t until, hits;
	int bad;
};

static void *thr_main(void *arg)
{
	struct thr *t = arg;
	char buf[512];
	for (uint32_t k = 0; idc_now_ns() < t->until; k++) {
		struct passwd pw;
		uint32_t i = k % STRESS_USERS;
		char name[16];
		snprintf(name, sizeof(name), "u%u", i);
		int rc = k % 2 ? mc_getpwuid(t->r, 20000 + i, &pw, buf, sizeof(buf))
			       : mc_getpwnam(t->r, name, strlen(name), &pw, buf, sizeof(buf));
		if ((rc == 0 && !stress_check(&pw, i, k % 2 == 0)) || (rc != 0 && rc != -ENOENT))
			t->bad++;
		t->hits += rc == 0;
	}
	return NULL;
}

/* Threads of one process share a reader while the maps are rewritten,
 * reset, resized and withdrawn under them: every hit is a whole record, and
 * the reader keeps following (remaps race, retired mappings stay until no
 * thread holds them). */
static void test_threads(void **state)
{
	(void)state;
	struct mc_writer *w;
	struct mc_reader r;
	reader(&r, MC_PASSWD);
	assert_int_equal(wopen(MC_PASSWD, SMALL_MAP, &w), 0);
	struct thr t[4];
	pthread_t tid[4];
	uint64_t until = idc_now_ns() + 1500000000ull;
	for (int i = 0; i < 4; i++) {
		t[i] = (struct thr){&r, until, 0, 0};
		assert_int_equal(pthread_create(&tid[i], NULL, thr_main, &t[i]), 0);
	}
	unsigned resets = 0;
	for (uint32_t v = 1; idc_now_ns() < until; v++) {
		stress_put(w, v % STRESS_USERS, v);
		if (v % 3000 == 0) {
			if (v % 9000 == 0)
				mc_writer_retire(w);
			assert_int_equal(wreset(w, MC_PASSWD, v % 6000 ? SMALL_MAP : 2 * SMALL_MAP),
					 0);
			resets++;
		}
	}
	uint64_t hits = 0;
	for (int i = 0; i < 4; i++) {
		assert_int_equal(pthread_join(tid[i], NULL), 0);
		assert_int_equal(t[i].bad, 0);
		hits += t[i].hits;
	}
	print_message("threads: %llu verified hits across %u resets\n", (unsigned long long)hits,
		      resets);
	assert_true(resets > 3);
	assert_true(hits > 1000);
	/* After the storm: the reader is on the current map. */
	struct passwd pw;
	char buf[512];
	stress_put(w, 1, 8); /* both keys */
	assert_int_equal(mc_getpwnam(&r, "u1", 2, &pw, buf, sizeof(buf)), 0);
	assert_true(stress_check(&pw, 1, true));
	mc_writer_close(w);
	mc_reader_close(&r);
}

/* ---- corruption ------------------------------------------------------------------ */

static uint64_t rng = 88172645463325252ull;

static uint64_t rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

/* Look up everything a reader can be asked, with assorted buffer sizes;
 * results are not checked (the file is garbage), only survival. */
static void hammer(uint64_t until)
{
	struct mc_reader rp, rg, ri;
	if (mc_reader_init(&rp, MC_PASSWD, source, NULL) < 0 ||
	    mc_reader_init(&rg, MC_GROUP, source, NULL) < 0 ||
	    mc_reader_init(&ri, MC_INITGROUPS, source, NULL) < 0)
		_exit(4);
	static char buf[4096];
	uint32_t gids[64];
	size_t n;
	for (uint32_t k = 0; idc_now_ns() < until; k++) {
		struct passwd pw;
		struct group gr;
		char name[16];
		snprintf(name, sizeof(name), "u%u", k % 50);
		size_t len = (k * 37) % sizeof(buf);
		mc_getpwnam(&rp, name, strlen(name), &pw, buf, len);
		mc_getpwuid(&rp, 20000 + k % 50, &pw, buf, len);
		mc_getgrnam(&rg, name, strlen(name), &gr, buf, len);
		mc_getgrgid(&rg, 20000 + k % 50, &gr, buf, len);
		mc_initgroups(&ri, name, strlen(name), gids, k % 65, &n);
	}
	_exit(0);
}

static void fill_maps(struct mc_writer **w)
{
	uint32_t kinds[] = {MC_PASSWD, MC_GROUP, MC_INITGROUPS};
	static const char *const mem[] = {"u1", "u2", "u3"};
	uint32_t gids[] = {1, 2, 3, 4};
	for (int k = 0; k < 3; k++)
		assert_int_equal(wopen(kinds[k], SMALL_MAP, &w[k]), 0);
	for (uint32_t i = 0; i < 50; i++) {
		char name[16];
		snprintf(name, sizeof(name), "u%u", i);
		put_pw(w[0], name, 20000 + i, "gecos", later(), BOTH);
		put_gr(w[1], name, 20000 + i, mem, i % 4, later());
		mc_put_initgroups(w[2], name, strlen(name), gids, i % 5, later());
	}
}

/* The writer's own read-write mapping of map name in this process, found in
 * /proc/self/maps: the seals leave no other way to write to a live map. */
static uint8_t *writable_map(const char *name, size_t *len)
{
	char want[64], line[512];
	snprintf(want, sizeof(want), "/memfd:idcache-%s ", name);
	FILE *f = fopen("/proc/self/maps", "r");
	assert_non_null(f);
	uint8_t *at = NULL;
	while (at == NULL && fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;
		char perms[8];
		if (strstr(line, want) && sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) == 3 &&
		    strcmp(perms, "rw-s") == 0) {
			at = (uint8_t *)lo;
			*len = hi - lo;
		}
	}
	fclose(f);
	assert_non_null(at);
	return at;
}

/* Scribble over a live map through the writer's mapping. */
static void scribble(const char *name, uint64_t until)
{
	size_t len;
	uint8_t *m = writable_map(name, &len);
	while (idc_now_ns() < until) {
		size_t at = rnd() % len;
		/* Mostly the slots and tables; sometimes the header. */
		if (rnd() % 8 == 0)
			at %= MC_HDR_SIZE;
		m[at] = (uint8_t)rnd();
	}
}

/* A descriptor holding bytes p[0..len): a memfd sealed against shrinking
 * (what a reader accepts), or with sealed false a plain file in dir. */
static int garbage_fd(const uint8_t *p, size_t len, bool sealed)
{
	int fd;
	if (sealed) {
		fd = memfd_create("garbage", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	} else {
		char path[128];
		snprintf(path, sizeof(path), "%s/plain.XXXXXX", dir);
		fd = mkstemp(path);
		if (fd >= 0)
			unlink(path);
	}
	assert_true(fd >= 0);
	assert_int_equal(write(fd, p, len), (ssize_t)len);
	if (sealed)
		assert_int_equal(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
	return fd;
}

/* Hand readers garbage in place of the live map of kind: random bytes over
 * a copy, a truncated copy, an empty memfd. The live one is withdrawn so
 * they come for it. Returns the descriptor to close later. */
static int replace_garbage(struct mc_writer *w, uint32_t kind, int how)
{
	static uint8_t data[SMALL_MAP];
	ssize_t n = pread(mc_writer_fd(w), data, sizeof(data), 0);
	assert_int_equal(n, (ssize_t)sizeof(data));
	size_t len = how == 0 ? sizeof(data) : how == 1 ? sizeof(data) / 2 : 0;
	if (how == 0)
		for (size_t i = 0; i < 64; i++)
			data[rnd() % sizeof(data)] = (uint8_t)rnd();
	int fd = garbage_fd(data, len, true);
	publish_fd(fd, kind);
	mc_writer_retire(w);
	return fd;
}

static void run_readers_during(void (*attack)(uint64_t until), double seconds)
{
	uint64_t until = idc_now_ns() + (uint64_t)(seconds * 1e9);
	pid_t pids[3];
	for (int i = 0; i < 3; i++) {
		pids[i] = fork();
		assert_true(pids[i] >= 0);
		if (pids[i] == 0)
			hammer(until);
	}
	attack(until);
	for (int i = 0; i < 3; i++) {
		int status;
		assert_int_equal(waitpid(pids[i], &status, 0), pids[i]);
		if (!WIFEXITED(status))
			fail_msg("reader died: signal %d", WTERMSIG(status));
		assert_int_equal(WEXITSTATUS(status), 0);
	}
}

static void attack_scribble(uint64_t until)
{
	while (idc_now_ns() < until) {
		uint64_t slice = idc_now_ns() + 50000000ull;
		scribble("passwd", slice);
		scribble("group", slice + 10000000ull);
		scribble("initgroups", slice + 20000000ull);
	}
}

static void attack_replace(uint64_t until)
{
	struct mc_writer *w[3];
	int fds[3];
	for (int round = 0; idc_now_ns() < until; round++) {
		fill_maps(w);
		usleep(20000);
		for (int k = 0; k < 3; k++)
			fds[k] = replace_garbage(w[k], MC_PASSWD + (uint32_t)k, (round + k) % 3);
		usleep(20000);
		for (int k = 0; k < 3; k++) {
			mc_writer_close(w[k]);
			close(fds[k]);
		}
	}
}

/* Nobody can shrink, grow or write a live map but through the writer's
 * mapping, root included, and the descriptor clients get is read-only:
 * readers keep hitting through every attempt. */
static void test_seals(void **state)
{
	(void)state;
	struct mc_writer *w;
	struct mc_reader r;
	struct passwd pw;
	char buf[1024];
	reader(&r, MC_PASSWD);
	assert_int_equal(wopen(MC_PASSWD, SMALL_MAP, &w), 0);
	assert_int_equal(put_pw(w, "alice", 1000, "A", later(), BOTH), 0);
	assert_int_equal(mc_getpwnam(&r, "alice", 5, &pw, buf, sizeof(buf)), 0);
	int fd = mc_writer_fd(w);
	assert_int_equal(fcntl(fd, F_GETFL) & O_ACCMODE, O_RDONLY);
	int seals = fcntl(fd, F_GET_SEALS);
	assert_true(seals & F_SEAL_SHRINK);
	assert_true(seals & F_SEAL_GROW);
	assert_true(seals & F_SEAL_SEAL);
	assert_int_equal(fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE), -1); /* sealed for good */
	assert_int_equal(ftruncate(fd, 0), -1);
	assert_true(mmap(NULL, SMALL_MAP, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) == MAP_FAILED);
	/* Reopened for writing through /proc: refused by mode 0444, or, for
	 * root, every way of changing the map refused by the seals. */
	char p[64];
	snprintf(p, sizeof(p), "/proc/self/fd/%d", fd);
	int rw = open(p, O_RDWR | O_CLOEXEC);
	if (rw < 0) {
		assert_int_equal(errno, EACCES);
	} else {
		assert_int_equal(ftruncate(rw, 0), -1);
		assert_int_equal(errno, EPERM);
		assert_int_equal(ftruncate(rw, 2 * SMALL_MAP), -1);
		assert_int_equal(pwrite(rw, "x", 1, 0), -1);
		assert_int_equal(errno, EPERM);
		assert_true(mmap(NULL, SMALL_MAP, PROT_READ | PROT_WRITE, MAP_SHARED, rw, 0) ==
			    MAP_FAILED);
		assert_int_equal(
		    fallocate(rw, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, SMALL_MAP), -1);
		/* A read-only mapping cannot be made writable later. */
		void *ro = mmap(NULL, SMALL_MAP, PROT_READ, MAP_SHARED, rw, 0);
		assert_true(ro != MAP_FAILED);
		assert_int_equal(mprotect(ro, SMALL_MAP, PROT_READ | PROT_WRITE), -1);
		munmap(ro, SMALL_MAP);
		close(rw);
	}
	struct stat st;
	assert_int_equal(fstat(fd, &st), 0);
	assert_int_equal(st.st_size, SMALL_MAP);
	assert_int_equal(mc_getpwnam(&r, "alice", 5, &pw, buf, sizeof(buf)), 0);
	assert_string_equal(pw.pw_gecos, "A");
	mc_writer_close(w);
	mc_reader_close(&r);
}

/* A map offered to a reader that did not ask (the NSS module gets every
 * map with one request) is used without a call to the source; one offered
 * to a reader that has a usable map, or one failing the checks, is only
 * closed. */
static void test_offer(void **state)
{
	(void)state;
	struct mc_writer *w, *w2;
	struct mc_reader r;
	struct passwd pw;
	char buf[1024];
	reader(&r, MC_PASSWD);
	assert_int_equal(mc_writer_open(MC_PASSWD, SMALL_MAP, &w), 0);
	assert_int_equal(put_pw(w, "alice", 1000, "A", later(), BOTH), 0);
	int before = open_count();
	assert_int_equal(mc_reader_offer(&r, fcntl(mc_writer_fd(w), F_DUPFD_CLOEXEC, 0)), 0);
	assert_int_equal(open_count(), before);
	assert_int_equal(mc_getpwnam(&r, "alice", 5, &pw, buf, sizeof(buf)), 0);
	assert_int_equal(atomic_load(&broker_mem->asked[MC_PASSWD]), 0);
	assert_int_equal(mc_writer_open(MC_PASSWD, SMALL_MAP, &w2), 0);
	before = open_count();
	assert_int_equal(mc_reader_offer(&r, fcntl(mc_writer_fd(w2), F_DUPFD_CLOEXEC, 0)), -EEXIST);
	assert_int_equal(open_count(), before);
	assert_int_equal(mc_getpwnam(&r, "alice", 5, &pw, buf, sizeof(buf)), 0);
	/* Withdrawn: an unsealed copy is refused, the sealed new map taken. */
	static uint8_t data[SMALL_MAP];
	assert_int_equal(pread(mc_writer_fd(w), data, sizeof(data), 0), (ssize_t)sizeof(data));
	mc_writer_retire(w);
	assert_int_equal(mc_reader_offer(&r, garbage_fd(data, sizeof(data), false)), -EBADMSG);
	assert_int_equal(open_count(), before);
	assert_int_equal(mc_reader_offer(&r, fcntl(mc_writer_fd(w2), F_DUPFD_CLOEXEC, 0)), 0);
	assert_int_equal(mc_getpwnam(&r, "alice", 5, &pw, buf, sizeof(buf)), -ENOENT);
	assert_int_equal(atomic_load(&broker_mem->asked[MC_PASSWD]), 0);
	mc_writer_close(w);
	mc_writer_close(w2);
	mc_reader_close(&r);
}

static void test_corruption(void **state)
{
	(void)state;
	struct mc_writer *w[3];
	fill_maps(w);
	run_readers_during(attack_scribble, 1.5);
	for (int k = 0; k < 3; k++)
		mc_writer_close(w[k]);
	run_readers_during(attack_replace, 1.5);
	/* A descriptor that is not sealed (a plain file: someone could
	 * truncate it under us) is refused, however valid its bytes; the same
	 * bytes in a sealed memfd are taken. A map whose size disagrees with
	 * its header is refused too. */
	fill_maps(w);
	static uint8_t data[SMALL_MAP];
	assert_int_equal(pread(mc_writer_fd(w[0]), data, sizeof(data), 0), (ssize_t)sizeof(data));
	struct mc_reader r;
	reader(&r, MC_PASSWD);
	struct passwd pw;
	char buf[1024];
	int plain = garbage_fd(data, sizeof(data), false);
	publish_fd(plain, MC_PASSWD);
	assert_int_equal(mc_getpwnam(&r, "u1", 2, &pw, buf, sizeof(buf)), -ENOENT);
	int half = garbage_fd(data, sizeof(data) - 4096, true);
	publish_fd(half, MC_PASSWD);
	assert_int_equal(mc_getpwnam(&r, "u1", 2, &pw, buf, sizeof(buf)), -ENOENT);
	int sealed = garbage_fd(data, sizeof(data), true);
	publish_fd(sealed, MC_PASSWD);
	assert_int_equal(mc_getpwnam(&r, "u1", 2, &pw, buf, sizeof(buf)), 0);
	close(plain);
	close(half);
	close(sealed);
	for (int k = 0; k < 3; k++)
		mc_writer_close(w[k]);
	mc_reader_close(&r);
}

/* ---- the writer's invariants ------------------------------------------------------ */

/* The live passwd map of w as its writer sees it (layout.h), through the
 * writer's own mapping, to break it on purpose. */
struct wmap {
	struct mc_header *h;
	_Atomic uint32_t *by_name, *by_id;
	uint8_t *slots;
};

static struct wmap wmap_of(struct mc_writer *w)
{
	size_t len;
	uint8_t *base = writable_map("passwd", &len);
	struct mc_header *h = (struct mc_header *)(void *)base, want;
	/* The mapping of this writer's map, not of another one still open. */
	assert_int_equal(pread(mc_writer_fd(w), &want, sizeof(want), 0), (ssize_t)sizeof(want));
	assert_true(h->seed == want.seed && h->generation == want.generation);
	struct wmap m = {h, (_Atomic uint32_t *)(void *)(base + h->table_off), NULL,
			 base + h->slot_off};
	m.by_id = m.by_name + h->nbuckets;
	return m;
}

static struct mc_rec *wrec(const struct wmap *m, uint32_t slot)
{
	return (struct mc_rec *)(void *)(m->slots + (size_t)slot * m->h->slot_size);
}

static _Atomic uint32_t *name_head(const struct wmap *m, const char *name)
{
	uint64_t h = idc_hash64(name, strlen(name), m->h->seed);
	return &m->by_name[mc_bucket(h, m->h->nbuckets)];
}

static _Atomic uint32_t *id_head(const struct wmap *m, uint32_t id)
{
	return &m->by_id[mc_bucket(idc_hash64(&id, sizeof(id), m->h->seed), m->h->nbuckets)];
}

/* The word on name's chain that points at the record named name. */
static _Atomic uint32_t *name_link(const struct wmap *m, const char *name)
{
	_Atomic uint32_t *pp = name_head(m, name);
	for (int steps = 0; steps < 64 && *pp != MC_NONE; steps++) {
		struct mc_rec *rec = wrec(m, *pp);
		uint32_t n;
		memcpy(&n, rec + 1, 4);
		if (n == strlen(name) && memcmp((char *)(rec + 1) + 4, name, n) == 0)
			return pp;
		pp = &rec->next_name;
	}
	fail_msg("%s is not on its name chain", name);
	return NULL;
}

static uint32_t slot_of(const struct wmap *m, const char *name)
{
	return *name_link(m, name);
}

/* Each way of breaking the map: what is changed, the writer call that
 * must notice, and the words it must say. */
static void break_cycle(struct wmap *m)
{
	wrec(m, slot_of(m, "alice"))->next_name = slot_of(m, "alice");
}

static void break_seq(struct wmap *m)
{
	wrec(m, slot_of(m, "alice"))->seq |= 1u; /* removed, yet linked */
}

static void break_lost(struct wmap *m)
{
	_Atomic uint32_t *pp = name_link(m, "alice");
	*pp = wrec(m, *pp)->next_name; /* alice holds its name, off the chain */
}

static void break_dangling(struct wmap *m)
{
	for (uint32_t b = 0; b < m->h->nbuckets; b++)
		if (m->by_name[b] == MC_NONE) {
			m->by_name[b] = m->h->slot_count - 1; /* never held a record */
			return;
		}
	fail_msg("no empty bucket");
}

static void break_key_not_held(struct wmap *m)
{
	/* toor answers by name only; put it on uid 0's chain before root. */
	uint32_t toor = slot_of(m, "toor");
	wrec(m, toor)->next_id = *id_head(m, 0);
	*id_head(m, 0) = toor;
}

static void break_counter(struct wmap *m)
{
	m->h->evictions += 7;
}

static void break_fresh_slot(struct wmap *m)
{
	/* The ring's next slot, after the last record put, never written:
	 * a byte there is a write the writer did not account for. */
	uint32_t end = 0;
	static const char *const names[] = {"alice", "bob", "root", "toor"};
	for (int i = 0; i < 4; i++) {
		uint32_t s = slot_of(m, names[i]);
		if (s + wrec(m, s)->nslots > end)
			end = s + wrec(m, s)->nslots;
	}
	m->slots[(size_t)end * m->h->slot_size + 20] = 0x5a;
}

static void touch_alice(struct mc_writer *w)
{
	_exit(put_pw(w, "alice", 1000, "Alice B", later(), BOTH) ? 10 : 0); /* in place */
}

static void touch_root(struct mc_writer *w)
{
	_exit(put_pw(w, "root", 0, "root", later(), BOTH) ? 10 : 0);
}

static void touch_carol(struct mc_writer *w)
{
	_exit(put_pw(w, "carol", 1002, "Carol", later(), BOTH) ? 10 : 0);
}

static void touch_uid_1000(struct mc_writer *w)
{
	_exit(mc_invalidate_id(w, 1000) == 1 ? 0 : 10);
}

static void touch_reset(struct mc_writer *w)
{
	_exit(mc_writer_reset(w, 0) ? 10 : 0);
}

/* Changes that touch nothing broken (no such uid): only the periodic
 * whole-map walk can notice. Bounded: it comes within slot_count changes. */
static void touch_elsewhere(struct mc_writer *w)
{
	for (int i = 0; i < 100000; i++)
		if (mc_invalidate_id(w, 4242) != 0)
			_exit(10);
	_exit(0);
}

/* Every call above, on an unbroken map. */
static void touch_all(struct mc_writer *w)
{
	for (int i = 0; i < 1000; i++)
		if (mc_invalidate_id(w, 4242) != 0)
			_exit(10);
	if (put_pw(w, "alice", 1000, "Alice B", later(), BOTH) ||
	    put_pw(w, "root", 0, "root", later(), BOTH) ||
	    put_pw(w, "carol", 1002, "Carol", later(), BOTH) || mc_invalidate_id(w, 1000) != 1 ||
	    mc_writer_reset(w, 0))
		_exit(10);
	_exit(0);
}

struct breakage {
	const char *what;
	void (*corrupt)(struct wmap *m);
	void (*touch)(struct mc_writer *w);
	const char *says;
};

/* Run touch in a child on a map corrupt broke; its stderr in out. */
static int run_broken(const struct breakage *b, char *out, size_t outlen)
{
	struct mc_writer *w;
	assert_int_equal(wopen(MC_PASSWD, SMALL_MAP, &w), 0);
	assert_int_equal(put_pw(w, "alice", 1000, "Alice A", later(), BOTH), 0);
	assert_int_equal(put_pw(w, "bob", 1001, "Bob", later(), BOTH), 0);
	assert_int_equal(put_pw(w, "root", 0, "root", later(), BOTH), 0);
	assert_int_equal(put_pw(w, "toor", 0, "toor", later(), MC_KEY_NAME), 0);
	if (b->corrupt) {
		struct wmap m = wmap_of(w);
		b->corrupt(&m);
	}
	int p[2];
	assert_int_equal(pipe(p), 0);
	fflush(stderr);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct rlimit no_core = {0, 0};
		setrlimit(RLIMIT_CORE, &no_core);
		dup2(p[1], 2);
		b->touch(w);
	}
	close(p[1]);
	size_t n = 0;
	ssize_t got;
	while (n + 1 < outlen && (got = read(p[0], out + n, outlen - 1 - n)) > 0)
		n += (size_t)got;
	out[n] = '\0';
	close(p[0]);
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	mc_writer_close(w); /* closing does not check: the map is dropped whole */
	return status;
}

/* A map broken in each way the invariants (writer_int.h) rule out makes
 * the writer abort, naming what broke, on the next call that touches it —
 * in a debug build. A release build carries on (its walks stay bounded);
 * the readers never assert either way (test_corruption). */
static void test_invariants_checked(void **state)
{
	(void)state;
	static const struct breakage cases[] = {
	    {"none", NULL, touch_all, NULL},
	    {"a cycle", break_cycle, touch_alice, "(a cycle)"},
	    {"a linked record with an odd seq", break_seq, touch_reset, "odd seq"},
	    {"the same, left alone", break_seq, touch_elsewhere, "odd seq"},
	    {"a key holder off its chain", break_lost, touch_uid_1000, "is not on name chain"},
	    {"a link to a free slot", break_dangling, touch_reset, "starts no live record"},
	    {"a chain holding a record for a key it lacks", break_key_not_held, touch_root,
	     "does not hold the id key"},
	    {"a header counter", break_counter, touch_carol, "evictions"},
	    {"a fresh slot written", break_fresh_slot, touch_carol, "without a reuse_gen bump"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char err[1024];
		int status = run_broken(&cases[i], err, sizeof(err));
#ifdef NDEBUG
		bool checked = false;
#else
		bool checked = cases[i].says != NULL;
#endif
		if (checked) {
			if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGABRT)
				fail_msg("%s: not caught (status %#x)", cases[i].what, status);
			if (strstr(err, "invariant broken") == NULL ||
			    strstr(err, cases[i].says) == NULL)
				fail_msg("%s: caught as \"%s\"", cases[i].what, err);
		} else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || err[0] != '\0') {
			fail_msg("%s: status %#x, \"%s\"", cases[i].what, status, err);
		}
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_hit_miss, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_expiry_update_invalidate, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_keys_independent, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_eviction, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_buffer_sizes, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_initgroups, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_lookup_id_exact_invalidation, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_reset_recycle, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_fork, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_torn_reads, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_threads, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_seals, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_offer, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_corruption, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_invariants_checked, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
