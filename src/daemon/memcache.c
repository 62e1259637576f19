/*
 * memcache: the daemon's side of the shared-memory cache (src/mc) — opening
 * the maps in run_dir/mc at the configured sizes, writing the records the
 * responder answers with, dropping what a change or an expire makes stale,
 * and the counters `idcache status` shows.
 *
 * Records written here expire after DAEMON_MC_TTL_S at the latest: the
 * changes we know of drop them sooner, and the bound keeps a client from
 * serving a dead daemon's answers for long.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "daemon/daemon.h"

#define DAEMON_MC_TTL_S 300

static uint64_t map_bytes(const struct config *cfg, int k)
{
	uint32_t mib = k == 0   ? cfg->memcache_size_passwd
		       : k == 1 ? cfg->memcache_size_group
				: cfg->memcache_size_initgroups;
	return (uint64_t)mib << 20;
}

int daemon_mc_configure(struct daemon *dm, const struct config *cfg)
{
	char dir[PATH_MAX];
	snprintf(dir, sizeof(dir), "%s/mc", dm->run_dir);
	for (int k = 0; k < 3; k++) {
		uint64_t want = map_bytes(cfg, k);
		struct mc_stats st;
		mc_writer_stats(dm->mc[k], &st);
		if (dm->mc_opened && st.size == want)
			continue;
		/* A map whose size changes starts over in a new file. */
		int rc;
		if (dm->mc[k] != NULL && want != 0) {
			rc = mc_writer_reset(dm->mc[k], want);
		} else {
			mc_writer_close(dm->mc[k]);
			dm->mc[k] = NULL;
			rc = mc_writer_open(dir, MC_PASSWD + (uint32_t)k, want, &dm->mc[k]);
		}
		if (rc < 0)
			idc_log(IDC_LOG_ERR, "memory cache %s: %s",
				mc_kind_name(MC_PASSWD + (uint32_t)k), idc_strerror(rc));
	}
	dm->mc_opened = true;
	return 0;
}

void daemon_mc_close(struct daemon *dm)
{
	for (int k = 0; k < 3; k++) {
		mc_writer_close(dm->mc[k]);
		dm->mc[k] = NULL;
	}
}

static int64_t expiry(void)
{
	return (int64_t)time(NULL) + DAEMON_MC_TTL_S;
}

/* Failures only cost a later socket round trip: logged at debug level. */
static void note(const char *what, int rc)
{
	if (rc < 0 && rc != -E2BIG)
		idc_log(IDC_LOG_DEBUG, "memory cache: cannot store %s: %s", what, idc_strerror(rc));
}

void daemon_mc_put_passwd(struct daemon *dm, const struct proto_passwd *pw, bool by_id)
{
	note("a user", mc_put_passwd(dm->mc[0], pw, expiry(), by_id));
}

void daemon_mc_put_group(struct daemon *dm, const char *name, uint32_t gid, const char *const *mem,
			 size_t nmem, bool by_id)
{
	if (dm->mc[1] == NULL)
		return;
	struct idc_buf b = IDC_BUF_INIT;
	int rc = 0;
	for (size_t i = 0; rc == 0 && i < nmem; i++)
		rc = proto_put_cstr(&b, mem[i]);
	struct proto_group gr = {{name, (uint32_t)strlen(name)},
				 {"x", 1},
				 gid,
				 {(const uint8_t *)b.data, b.len, (uint32_t)nmem}};
	if (rc == 0)
		rc = mc_put_group(dm->mc[1], &gr, expiry(), by_id);
	note("a group", rc);
	idc_buf_free(&b);
}

void daemon_mc_put_initgroups(struct daemon *dm, const char *user, const uint32_t *gids, size_t n)
{
	note("a group list", mc_put_initgroups(dm->mc[2], user, strlen(user), gids, n, expiry()));
}

void daemon_mc_expire(struct daemon *dm, uint32_t what, const char *name)
{
	size_t len = name ? strlen(name) : 0;
	if (what == PROTO_EXPIRE_USER) {
		mc_invalidate_name(dm->mc[0], name, len);
		mc_invalidate_name(dm->mc[2], name, len);
		return;
	}
	if (what == PROTO_EXPIRE_GROUP) {
		mc_invalidate_name(dm->mc[1], name, len);
		/* Whose group lists hold it is not known here. */
		daemon_mc_reset(dm, 2);
		return;
	}
	for (int k = 0; k < 3; k++)
		daemon_mc_reset(dm, k);
}

void daemon_mc_reset(struct daemon *dm, int k)
{
	int rc = mc_writer_reset(dm->mc[k], 0);
	if (rc < 0)
		idc_log(IDC_LOG_ERR, "memory cache %s: reset failed: %s",
			mc_kind_name(MC_PASSWD + (uint32_t)k), idc_strerror(rc));
}

void daemon_mc_status(struct daemon *dm, struct idc_buf *b)
{
	for (int k = 0; k < 3; k++) {
		struct mc_stats st;
		const char *name = mc_kind_name(MC_PASSWD + (uint32_t)k);
		mc_writer_stats(dm->mc[k], &st);
		idc_buf_printf(b,
			       "memcache_%s_size=%" PRIu64 "\nmemcache_%s_records=%u\n"
			       "memcache_%s_slots_used=%u/%u\nmemcache_%s_evictions=%" PRIu64
			       "\nmemcache_%s_generation=%" PRIu64 "\n",
			       name, st.size, name, st.records, name, st.slots_used, st.slot_count,
			       name, st.evictions, name, st.generation);
	}
}
