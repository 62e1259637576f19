/*
 * Unit tests for src/daemon/nscdmaps.c (and memcache.c's calls into it):
 * the maps exist from the first
 * GETFD request, the descriptor is sealed and read-only, records come and
 * go as memcache.c passes them on, expired ones leave at the beat, and a
 * stopping daemon's maps tell their clients to ask again. The maps are
 * read through the descriptor, as glibc maps them.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "daemon/daemon.h"
#include "nscddb/nscddb.h"

/* responder.c's: no password is public here. */
const char *daemon_passwd_field(const char *kept)
{
	(void)kept;
	return "x";
}

/* responder.c's: no batch reader (the expire paths then drop by name). */
struct cache_reader *daemon_reader(struct daemon *dm)
{
	(void)dm;
	return NULL;
}

/* peers.c's and conn.c's, for MCMAP, which these tests do not ask. */
bool peer_may_map(struct conn *c)
{
	(void)c;
	return false;
}

void conn_pass_maps(struct conn *c, uint32_t mask, size_t at)
{
	(void)c, (void)mask, (void)at;
}

struct client_map {
	const uint8_t *base;
	size_t len;
};

/* What glibc does with a GETFD reply: map the descriptor read-only. */
static struct client_map client_map(struct daemon *dm, int db)
{
	uint64_t size;
	int fd = nscdmaps_fd(dm, db, &size);
	assert_true(fd >= 0);
	assert_true(fcntl(fd, F_GET_SEALS) & F_SEAL_SHRINK);
	assert_int_equal(fcntl(fd, F_GETFL) & O_ACCMODE, O_RDONLY);
	void *p = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
	assert_ptr_not_equal(p, MAP_FAILED);
	return (struct client_map){p, size};
}

static const struct nscddb_datahead *lookup(struct client_map m, int type, const char *key)
{
	return nscddb_find(m.base, m.len, type, key, strlen(key) + 1);
}

static struct proto_str ps(const char *s)
{
	return (struct proto_str){s, (uint32_t)strlen(s)};
}

/* The configuration a daemon with maps has (nscd_shared's default). */
static struct config shared_cfg = {.nscd_shared = true};

static void put_alice(struct daemon *dm, int64_t expire)
{
	struct proto_passwd pw = {ps("alice"), ps("x"),       5001,         5001,
				  ps("Alice"), ps("/home/a"), ps("/bin/sh")};
	nscdmaps_put_passwd(dm, &pw, MC_KEY_NAME | MC_KEY_ID, expire);
}

static void test_maps_follow(void **state)
{
	(void)state;
	struct daemon dm = {.cfg = &shared_cfg};
	assert_false(nscdmaps_on(&dm));
	put_alice(&dm, time(NULL) + 300); /* no map yet: nothing kept */
	uint64_t size;
	assert_int_equal(nscdmaps_fd(&dm, 2, &size), -EINVAL);
	struct client_map pw = client_map(&dm, 0), gr = client_map(&dm, 1);
	assert_true(nscdmaps_on(&dm));
	assert_null(lookup(pw, NSCDDB_GETPWBYNAME, "alice"));

	put_alice(&dm, time(NULL) + 300);
	assert_non_null(lookup(pw, NSCDDB_GETPWBYNAME, "alice"));
	assert_non_null(lookup(pw, NSCDDB_GETPWBYUID, "5001"));
	uint32_t id;
	assert_int_equal(nscdmaps_id_of(&dm, 0, "alice", &id), 0);
	assert_int_equal(id, 5001);
	nscdmaps_drop_id(&dm, 0, 5001);
	assert_null(lookup(pw, NSCDDB_GETPWBYNAME, "alice"));

	const char *mem[] = {"alice"};
	struct cache_group g = {.name = "staff", .gid = 6000, .members = mem, .nmembers = 1};
	nscdmaps_put_group(&dm, &g, MC_KEY_NAME | MC_KEY_ID, time(NULL) + 300);
	uint32_t gids[] = {6000};
	nscdmaps_put_initgroups(&dm, "alice", gids, 1, time(NULL) + 300);
	assert_non_null(lookup(gr, NSCDDB_GETGRBYGID, "6000"));
	assert_non_null(lookup(gr, NSCDDB_INITGROUPS, "alice"));
	nscdmaps_reset(&dm, 2); /* group lists only */
	assert_null(lookup(gr, NSCDDB_INITGROUPS, "alice"));
	assert_non_null(lookup(gr, NSCDDB_GETGRBYNAME, "staff"));
	nscdmaps_drop_name(&dm, 1, "staff");
	assert_null(lookup(gr, NSCDDB_GETGRBYGID, "6000"));

	/* expired: gone at the next beat (glibc would answer it forever) */
	put_alice(&dm, time(NULL) - 1);
	assert_non_null(lookup(pw, NSCDDB_GETPWBYNAME, "alice"));
	nscdmaps_beat(&dm);
	assert_null(lookup(pw, NSCDDB_GETPWBYNAME, "alice"));

	/* a GETFD reply hands a fresh map even when the beat was late */
	size_t len;
	struct nscddb_head *wh = nscddb_base(dm.nscd_maps[0], &len);
	wh->timestamp = 1;
	struct client_map again = client_map(&dm, 0);
	assert_true((int64_t)wh->timestamp + NSCDDB_MAPPING_TIMEOUT > time(NULL));
	munmap((void *)(uintptr_t)again.base, again.len);

	struct idc_buf b = IDC_BUF_INIT;
	nscdmaps_status(&dm, &b);
	assert_non_null(strstr(b.data, "nscdmap_passwd_size="));
	idc_buf_free(&b);

	/* stopping: clients holding the maps are told to ask again */
	put_alice(&dm, time(NULL) + 300);
	nscdmaps_close(&dm);
	const struct nscddb_head *h = (const void *)pw.base;
	assert_int_equal(h->gc_cycle % 2, 1);
	assert_int_equal(h->data_size, INT32_MAX);
	assert_null(lookup(pw, NSCDDB_GETPWBYNAME, "alice"));
	assert_false(nscdmaps_on(&dm));
	munmap((void *)(uintptr_t)pw.base, pw.len);
	munmap((void *)(uintptr_t)gr.base, gr.len);
}

/* nscd_shared = false: no map is made, GETFD is refused, puts keep nothing. */
static void test_shared_off(void **state)
{
	(void)state;
	struct config cfg = {.nscd_shared = false};
	struct daemon dm = {.cfg = &cfg};
	uint64_t size = 1;
	assert_int_equal(nscdmaps_fd(&dm, 0, &size), -ENOTSUP);
	assert_int_equal(nscdmaps_fd(&dm, 1, &size), -ENOTSUP);
	assert_int_equal(size, 0);
	put_alice(&dm, time(NULL) + 300);
	assert_false(nscdmaps_on(&dm));
	nscdmaps_beat(&dm);
	nscdmaps_close(&dm);
}

/* memcache.c's entry points carry every change to glibc's maps, with the
 * mc maps disabled (NULL writers) as with them. */
static void test_memcache_hooks(void **state)
{
	(void)state;
	struct daemon dm = {.cfg = &shared_cfg};
	struct client_map pw = client_map(&dm, 0), gr = client_map(&dm, 1);
	struct proto_passwd alice = {ps("alice"), ps("x"),       5001,         5001,
				     ps("Alice"), ps("/home/a"), ps("/bin/sh")};
	daemon_mc_put_passwd(&dm, &alice, MC_KEY_NAME | MC_KEY_ID, 0);
	assert_non_null(lookup(pw, NSCDDB_GETPWBYUID, "5001"));
	/* a change of the user in the store: both keys go */
	struct cache_change ch = {
	    .old_name = "alice", .new_name = "alice", .old_id = 5001, .new_id = 5001};
	daemon_mc_change(&ch, &dm);
	assert_null(lookup(pw, NSCDDB_GETPWBYNAME, "alice"));
	assert_null(lookup(pw, NSCDDB_GETPWBYUID, "5001"));

	/* a group: its record, and the group lists of members that move */
	const char *mem[] = {"alice", "bob"};
	struct cache_group g = {.name = "staff", .gid = 6000, .members = mem, .nmembers = 2};
	struct config_domain files_cfg = {.name = "local", .case_sensitive = true};
	struct domain files = {.cfg = &files_cfg};
	daemon_mc_put_group(&dm, &files, &g, MC_KEY_NAME | MC_KEY_ID, 0);
	uint32_t gids[] = {6000, 100};
	uint64_t epoch = daemon_mc_ig_epoch(&dm);
	daemon_mc_put_nscd_initgroups(&dm, "alice", gids, 2, epoch, 0);
	/* a directory's list ends where its cache entry's answer does */
	int64_t until = (int64_t)time(NULL) + 20;
	daemon_mc_put_nscd_initgroups(&dm, "bob", gids, 2, epoch, until);
	const struct nscddb_datahead *bob = lookup(gr, NSCDDB_INITGROUPS, "bob");
	assert_non_null(bob);
	assert_true((int64_t)bob->timeout <= until);
	const char *after[] = {"alice"};
	struct cache_change gc = {.group = true,
				  .old_name = "staff",
				  .new_name = "staff",
				  .old_id = 6000,
				  .new_id = 6000,
				  .old_mem = mem,
				  .nold_mem = 2,
				  .new_mem = after,
				  .nnew_mem = 1};
	daemon_mc_change(&gc, &dm);
	assert_null(lookup(gr, NSCDDB_GETGRBYNAME, "staff"));
	assert_null(lookup(gr, NSCDDB_INITGROUPS, "bob"));       /* left the group */
	assert_non_null(lookup(gr, NSCDDB_INITGROUPS, "alice")); /* did not */

	/* a list read before a drop is not kept */
	daemon_mc_put_nscd_initgroups(&dm, "bob", gids, 2, epoch, 0);
	assert_null(lookup(gr, NSCDDB_INITGROUPS, "bob"));
	/* expire --user, and everything */
	daemon_mc_put_passwd(&dm, &alice, MC_KEY_NAME | MC_KEY_ID, 0);
	daemon_mc_expire(&dm, PROTO_EXPIRE_USER, "alice");
	assert_null(lookup(pw, NSCDDB_GETPWBYUID, "5001"));
	assert_null(lookup(gr, NSCDDB_INITGROUPS, "alice"));
	daemon_mc_put_passwd(&dm, &alice, MC_KEY_NAME | MC_KEY_ID, 0);
	daemon_mc_change(NULL, &dm); /* an ldap commit not described */
	assert_null(lookup(pw, NSCDDB_GETPWBYNAME, "alice"));

	daemon_mc_close(&dm); /* stopping: clients told to ask again */
	assert_int_equal(((const struct nscddb_head *)(const void *)gr.base)->data_size, INT32_MAX);
	munmap((void *)(uintptr_t)pw.base, pw.len);
	munmap((void *)(uintptr_t)gr.base, gr.len);
}

/* A remote group's list naming a member in a spelling other than its
 * folded one (ALICE) is not kept while names are compared ignoring case:
 * the invalidation that drops it when an earlier domain's alice appears
 * searches the member index by alice only. */
static void test_members_findable(void **state)
{
	(void)state;
	struct config_domain dir_cfg = {.name = "dir", .case_sensitive = false};
	char opaque;
	struct domain dir = {.cfg = &dir_cfg, .ldap = (struct ldapdom *)(void *)&opaque};
	struct domain *domains[] = {&dir};
	struct daemon dm = {.cfg = &shared_cfg, .domains = domains, .ndomains = 1};
	struct client_map gr = client_map(&dm, 1);
	const char *folded[] = {"alice", "bob"}, *other[] = {"ALICE", "bob"};
	struct cache_group g = {.name = "g3", .gid = 30020, .members = folded, .nmembers = 2};
	daemon_mc_put_group(&dm, &dir, &g, MC_KEY_NAME | MC_KEY_ID, 0);
	assert_non_null(lookup(gr, NSCDDB_GETGRBYNAME, "g3"));
	struct cache_group h = {.name = "g4", .gid = 30021, .members = other, .nmembers = 2};
	daemon_mc_put_group(&dm, &dir, &h, MC_KEY_NAME | MC_KEY_ID, 0);
	assert_null(lookup(gr, NSCDDB_GETGRBYNAME, "g4"));
	assert_null(lookup(gr, NSCDDB_GETGRBYGID, "30021"));
	dir_cfg.allow_local_overlap = true; /* its lists lose no member */
	daemon_mc_put_group(&dm, &dir, &h, MC_KEY_NAME | MC_KEY_ID, 0);
	assert_non_null(lookup(gr, NSCDDB_GETGRBYNAME, "g4"));
	daemon_mc_close(&dm);
	munmap((void *)(uintptr_t)gr.base, gr.len);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_maps_follow),
	    cmocka_unit_test(test_memcache_hooks),
	    cmocka_unit_test(test_shared_off),
	    cmocka_unit_test(test_members_findable),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
