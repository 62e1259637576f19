/* Unit tests of a failed write (store.h, "A failed write"): a commit whose
 * LMDB meta page cannot be written leaves the environment refusing every
 * transaction (MDB_PANIC); the store reopens it at its last commit once no
 * transaction of the process is open, and the cache above it serves that
 * commit, the lost transaction's entries and timestamps gone with it.
 *
 * The failure is made here: this program defines pwrite, which liblmdb's
 * calls reach before the C library's, and fails the writes of the meta
 * pages (the first two pages, less than a page long) of a file named
 * meta_file (data.mdb; timestamps.mdb) while meta_faults says so. */
/* pwrite by its own name, not redirected to pwrite64 (liblmdb calls pwrite) */
#undef _FILE_OFFSET_BITS
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "cache/cache.h"
#include "store/store_int.h"

#define META_SPAN 8192 /* both meta pages at LMDB's 4 KiB page size */

static _Atomic int meta_faults; /* meta writes still to fail; INT_MAX: all */
static _Atomic int meta_failed; /* meta writes failed */
static const char *meta_file = "/data.mdb";

static bool is_meta_file(int fd)
{
	char link[64], path[4096];
	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	ssize_t n = readlink(link, path, sizeof(path) - 1);
	if (n <= 0)
		return false;
	path[n] = '\0';
	size_t len = strlen(meta_file);
	return (size_t)n >= len && strcmp(path + n - len, meta_file) == 0;
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off)
{
	static ssize_t (*real)(int, const void *, size_t, off_t);
	if (!real)
		*(void **)&real = dlsym(RTLD_NEXT, "pwrite");
	if (atomic_load(&meta_faults) > 0 && off < META_SPAN && n < 4096 && is_meta_file(fd)) {
		if (atomic_load(&meta_faults) != INT_MAX)
			atomic_fetch_sub(&meta_faults, 1);
		atomic_fetch_add(&meta_failed, 1);
		errno = EIO;
		return -1;
	}
	return real(fd, buf, n, off);
}

/* ---- the store ------------------------------------------------------------------ */

struct fx {
	char dir[64];
	struct store *s;
	struct idc_arena arena;
};

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));
	*state = f;
	strcpy(f->dir, "/tmp/idc-fatal-XXXXXX");
	if (!mkdtemp(f->dir))
		return -1;
	static const char *const idx[] = {"objectClass", "cn"};
	struct store_options o = {STORE_CREATE, 0, idx, 2, 0};
	f->arena = (struct idc_arena)IDC_ARENA_INIT;
	atomic_store(&meta_faults, 0);
	atomic_store(&meta_failed, 0);
	return store_open(f->dir, &o, &f->s, NULL);
}

static int teardown(void **state)
{
	struct fx *f = *state;
	atomic_store(&meta_faults, 0);
	store_close(f->s);
	idc_arena_free(&f->arena);
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", f->dir);
	if (system(cmd) != 0)
		fprintf(stderr, "cannot remove %s\n", f->dir);
	free(f);
	return 0;
}

static int add(struct store_txn *t, struct fx *f, const char *dn, const char *cn)
{
	struct store_pair p[] = {{{"objectClass", 11}, {"person", 6}},
				 {{"cn", 2}, {cn, strlen(cn)}}};
	struct store_entry e;
	int rc =
	    store_entry_from_pairs(&f->arena, (struct store_val){dn, strlen(dn)}, p, 2, &e, NULL);
	return rc ? rc : store_add(t, &e, NULL, NULL);
}

/* A write transaction adding the base and n entries named prefix-i. */
static int write_entries(struct fx *f, bool base, const char *prefix, int n)
{
	struct store_txn *t;
	int rc = store_txn_begin(f->s, NULL, 0, &t, NULL);
	if (rc)
		return rc;
	if (base)
		rc = add(t, f, "cn=base", "base");
	char dn[128], cn[64];
	for (int i = 0; i < n && !rc; i++) {
		snprintf(cn, sizeof(cn), "%s-%d", prefix, i);
		snprintf(dn, sizeof(dn), "cn=%s,cn=base", cn);
		rc = add(t, f, dn, cn);
	}
	if (rc) {
		store_txn_abort(t);
		return rc;
	}
	return store_txn_commit(t, NULL);
}

static int get_in(struct store_txn *t, const char *dn)
{
	struct store_entry e;
	return store_get(t, (struct store_val){dn, strlen(dn)}, &e, NULL);
}

/* Whether dn is there, in a read transaction of its own (-EIO: none). */
static int lookup(struct fx *f, const char *dn)
{
	struct store_txn *t;
	int rc = store_txn_begin(f->s, NULL, STORE_TXN_RDONLY, &t, NULL);
	if (rc)
		return rc;
	rc = get_in(t, dn);
	store_txn_abort(t);
	return rc;
}

static void meta_pages_sound(struct fx *f)
{
	char path[128];
	snprintf(path, sizeof(path), "%s/data.mdb", f->dir);
	struct store_lmdb_meta m;
	struct idc_diag d = {{0}};
	int rc = store_lmdb_file_check(path, &m, &d);
	if (rc)
		fprintf(stderr, "%s\n", d.msg);
	assert_int_equal(rc, 0);
}

/* The commit that fails is lost; the next read reopens the environment
 * and sees the commit before it; writing goes on; both meta pages are
 * sound (LMDB wrote the older one back with the lost roots) and the store
 * passes its full check. */
static void test_failed_meta_write_reopens(void **state)
{
	struct fx *f = *state;
	assert_int_equal(write_entries(f, true, "kept", 3), 0);
	atomic_store(&meta_faults, 1);
	/* enough entries that the lost commit takes pages past the file's end */
	assert_int_equal(write_entries(f, false, "lost", 300), -EIO);
	assert_int_equal(atomic_load(&meta_failed), 1);
	struct store_health h;
	store_health(f->s, &h);
	assert_true(h.down);
	assert_int_equal(h.failures, 1);
	assert_int_equal(h.reopens, 0);
	assert_non_null(strstr(h.why, "commit failed"));

	assert_int_equal(lookup(f, "cn=kept-2,cn=base"), 0);
	assert_int_equal(lookup(f, "cn=lost-0,cn=base"), -ENOENT);
	store_health(f->s, &h);
	assert_false(h.down);
	assert_int_equal(h.reopens, 1);
	meta_pages_sound(f);

	assert_int_equal(write_entries(f, false, "later", 2), 0);
	assert_int_equal(lookup(f, "cn=later-1,cn=base"), 0);
	assert_int_equal(lookup(f, "cn=lost-299,cn=base"), -ENOENT);
	assert_int_equal(store_verify(f->dir, STORE_VERIFY_FULL, NULL, NULL, NULL), 0);
	store_health(f->s, &h);
	assert_int_equal(h.failures, 1);
}

/* A read transaction open when the commit fails keeps reading its
 * snapshot; no other begins while it is open (the environment cannot be
 * closed under it); once it ends, the next begin reopens. */
static void test_reopen_waits_for_open_transactions(void **state)
{
	struct fx *f = *state;
	assert_int_equal(write_entries(f, true, "kept", 1), 0);
	struct store_txn *r;
	assert_int_equal(store_txn_begin(f->s, NULL, STORE_TXN_RDONLY, &r, NULL), 0);
	atomic_store(&meta_faults, 1);
	assert_int_equal(write_entries(f, false, "lost", 1), -EIO);

	struct store_txn *t;
	struct idc_diag d = {{0}};
	assert_int_equal(store_txn_begin(f->s, NULL, STORE_TXN_RDONLY, &t, &d), -EIO);
	assert_non_null(strstr(d.msg, "no transaction of this process is open"));
	assert_int_equal(store_grow(f->s), -EBUSY); /* never under this thread's r */
	assert_int_equal(get_in(r, "cn=kept-0,cn=base"), 0);
	store_txn_abort(r);

	assert_int_equal(lookup(f, "cn=kept-0,cn=base"), 0);
	assert_int_equal(lookup(f, "cn=lost-0,cn=base"), -ENOENT);
	assert_int_equal(store_grow(f->s), 0);
	assert_int_equal(write_entries(f, false, "later", 1), 0);
}

/* A disk whose meta writes keep failing: the reopen's own commit fails,
 * the store stays down and says why, and tries again only after a wait;
 * once writes work, it is back. */
static void test_failed_reopen_waits_and_retries(void **state)
{
	struct fx *f = *state;
	assert_int_equal(write_entries(f, true, "kept", 1), 0);
	atomic_store(&meta_faults, INT_MAX);
	assert_int_equal(write_entries(f, false, "lost", 1), -EIO);
	struct idc_diag d = {{0}};
	struct store_txn *t;
	assert_int_equal(store_txn_begin(f->s, NULL, STORE_TXN_RDONLY, &t, &d), -EIO);
	assert_non_null(strstr(d.msg, "cannot reopen"));
	struct store_health h;
	store_health(f->s, &h);
	assert_true(h.down);
	assert_int_equal(h.reopens, 0);

	atomic_store(&meta_faults, 0);
	int failed = atomic_load(&meta_failed);
	assert_int_equal(store_txn_begin(f->s, NULL, STORE_TXN_RDONLY, &t, &d), -EIO);
	assert_non_null(strstr(d.msg, "again in"));
	assert_int_equal(atomic_load(&meta_failed), failed); /* no reopen tried */

	struct timespec wait = {1, 200000000};
	nanosleep(&wait, NULL);
	assert_int_equal(lookup(f, "cn=kept-0,cn=base"), 0);
	store_health(f->s, &h);
	assert_false(h.down);
	assert_int_equal(h.reopens, 1);
	assert_int_equal(h.failures, 1);
	assert_int_equal(write_entries(f, false, "later", 1), 0);
	meta_pages_sound(f);
}

/* A reader on another thread while the map is grown: the grow waits for
 * it to end (LMDB would remap under the entries it holds); a second
 * begin of that thread meanwhile fails at once (-EAGAIN) rather than wait
 * for a grow that waits for it; begins of threads holding none wait for
 * the grow and then see the bigger map. */
struct reader_arg {
	struct fx *f;
	_Atomic int step; /* 1: reading; 2: about to end it */
	int nested_rc, get_rc;
};

static void *reader_thread(void *p)
{
	struct reader_arg *a = p;
	struct store_txn *r, *r2;
	if (store_txn_begin(a->f->s, NULL, STORE_TXN_RDONLY, &r, NULL))
		return NULL;
	atomic_store(&a->step, 1);
	while (!atomic_load(&a->f->s->hold)) /* the grow is waiting for r */
		sched_yield();
	a->nested_rc = store_txn_begin(a->f->s, NULL, STORE_TXN_RDONLY, &r2, NULL);
	if (a->nested_rc == 0)
		store_txn_abort(r2);
	a->get_rc = get_in(r, "cn=kept-0,cn=base");
	atomic_store(&a->step, 2); /* before r ends, so before the remap */
	store_txn_abort(r);
	return NULL;
}

static void test_grow_waits_for_readers_of_other_threads(void **state)
{
	struct fx *f = *state;
	assert_int_equal(write_entries(f, true, "kept", 1), 0);
	size_t before = store_map_size(f->s);
	struct reader_arg a = {.f = f};
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, reader_thread, &a), 0);
	while (atomic_load(&a.step) != 1)
		sched_yield();
	assert_int_equal(store_grow(f->s), 0);
	assert_int_equal(atomic_load(&a.step), 2); /* it ended before the remap */
	pthread_join(th, NULL);
	assert_int_equal(a.nested_rc, -EAGAIN);
	assert_int_equal(a.get_rc, 0);
	assert_int_equal(store_map_size(f->s), 2 * before);
	assert_int_equal(lookup(f, "cn=kept-0,cn=base"), 0);
	assert_int_equal(write_entries(f, false, "later", 1), 0);
}

/* ---- the cache ------------------------------------------------------------------ */

static int put_user(struct cache *c, const char *name, uint32_t uid, const char *shell)
{
	struct cache_txn *t;
	int rc = cache_txn_begin(c, &t, NULL);
	if (rc)
		return rc;
	struct cache_user u = {.name = name,
			       .uid = uid,
			       .gid = uid,
			       .gecos = "",
			       .dir = "/",
			       .shell = shell,
			       .order = uid};
	bool changed;
	rc = cache_domain_ensure(t, "dom", 3600, NULL);
	if (!rc)
		rc = cache_put_user(t, "dom", &u, &changed, NULL);
	if (rc) {
		cache_txn_abort(t);
		return rc;
	}
	return cache_txn_commit(t, NULL);
}

/* A new cache in a new directory (dir, 64 bytes) holding alice. */
static struct cache *cache_with_alice(char *dir)
{
	strcpy(dir, "/tmp/idc-fatal-cache-XXXXXX");
	assert_non_null(mkdtemp(dir));
	struct cache *c;
	struct cache_options o = {.nosync = true};
	atomic_store(&meta_failed, 0);
	assert_int_equal(cache_open(dir, &o, &c, NULL), 0);
	assert_int_equal(put_user(c, "alice", 1000, "/bin/sh"), 0);
	return c;
}

/* The lost transaction took its timestamps with it: an entry it stored
 * again after it was marked expired is still expired (no stale entry is
 * made fresh by a commit that did not land), and what it added is not
 * there; the reader after it is served without a restart. */
static void test_cache_serves_the_last_commit(void **state)
{
	(void)state;
	char dir[64];
	struct cache *c = cache_with_alice(dir);
	size_t n = 0;
	assert_int_equal(cache_expire(c, "dom", CACHE_USER, "alice", &n, NULL), 0);
	assert_int_equal(n, 1);

	atomic_store(&meta_faults, 1);
	assert_int_equal(put_user(c, "alice", 1000, "/bin/bash"), -EIO);
	assert_int_equal(put_user(c, "bob", 1001, "/bin/sh"), 0); /* reopened at its begin */
	assert_int_equal(atomic_load(&meta_failed), 1);

	struct cache_reader *r;
	assert_int_equal(cache_reader_begin(c, &r), 0);
	const char *doms[] = {"dom"};
	struct cache_user u;
	struct cache_meta m;
	assert_int_equal(cache_user_by_name(r, doms, 1, "alice", true, &u, &m), 0);
	assert_string_equal(u.shell, "/bin/sh");
	assert_true(m.expired);
	assert_int_equal(cache_user_by_name(r, doms, 1, "bob", true, &u, &m), 0);
	assert_false(m.expired);
	cache_reader_end(r);

	struct cache_health h;
	cache_health(c, &h);
	assert_int_equal(h.failures, 1);
	assert_int_equal(h.reopens, 1);
	assert_false(h.down);
	assert_true(h.failed_at > 0);
	cache_close(c);

	char data[128];
	snprintf(data, sizeof(data), "%s/cache.mdb", dir);
	assert_int_equal(store_verify(data, STORE_VERIFY_FULL, NULL, NULL, NULL), 0);
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	assert_int_equal(system(cmd), 0);
}

/* timestamps.mdb refusing transactions after a failed meta write of its
 * own: its entries count as expired, and the next write transaction
 * rebuilds it, but never under a reader open on it (here this thread's:
 * the rebuild waits, then fails that transaction, and the reader reads
 * on); once the reader ended, it is rebuilt. */
static void test_timestamps_rebuilt_once_readers_end(void **state)
{
	(void)state;
	char dir[64];
	struct cache *c = cache_with_alice(dir);
	struct cache_reader *r;
	assert_int_equal(cache_reader_begin(c, &r), 0);

	meta_file = "/timestamps.mdb";
	atomic_store(&meta_failed, 0);
	atomic_store(&meta_faults, 1);
	assert_int_equal(put_user(c, "bob", 1001, "/bin/sh"), 0); /* cache.mdb committed */
	assert_int_equal(atomic_load(&meta_failed), 1);
	meta_file = "/data.mdb";
	struct idc_diag d = {{0}};
	struct cache_txn *t;
	assert_int_equal(cache_txn_begin(c, &t, &d), -EBUSY);
	assert_non_null(strstr(d.msg, "another thread still reads it"));
	const char *doms[] = {"dom"};
	struct cache_user u;
	struct cache_meta m;
	assert_int_equal(cache_user_by_name(r, doms, 1, "alice", true, &u, &m), 0);
	assert_false(m.expired);
	cache_reader_end(r);

	assert_int_equal(put_user(c, "carol", 1002, "/bin/sh"), 0);
	assert_int_equal(cache_reader_begin(c, &r), 0);
	assert_int_equal(cache_user_by_name(r, doms, 1, "alice", true, &u, &m), 0);
	assert_true(m.expired); /* its timestamp went with the rebuilt db */
	assert_int_equal(cache_user_by_name(r, doms, 1, "bob", true, &u, &m), 0);
	assert_true(m.expired);
	assert_int_equal(cache_user_by_name(r, doms, 1, "carol", true, &u, &m), 0);
	assert_false(m.expired);
	cache_reader_end(r);
	cache_close(c);
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	assert_int_equal(system(cmd), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_failed_meta_write_reopens, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_reopen_waits_for_open_transactions, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_failed_reopen_waits_and_retries, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_grow_waits_for_readers_of_other_threads, setup,
					    teardown),
	    cmocka_unit_test(test_cache_serves_the_last_commit),
	    cmocka_unit_test(test_timestamps_rebuilt_once_readers_end),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
