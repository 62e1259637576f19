/*
 * nscdmaps: glibc's nscd maps (src/nscddb) for the nscd socket's GETFDPW
 * and GETFDGR replies, kept as the memory cache's maps are kept.
 *
 * What goes in: the records the daemon answers with, at the moment it
 * answers (memcache.c passes every record it writes to the mc maps here
 * too, with the same keys and expiry; a user's group list is the nscd
 * socket's answer, the host's groups merged), so the maps hold exactly
 * what the socket said, after every rule of precedence.c. Loading whole domains
 * instead would have to repeat those rules outside the answer path; a
 * record answered costs one socket round trip per key and map, and the
 * maps stay as small as what clients use.
 *
 * A map exists from the first GETFD request for it (no nscd socket, no
 * maps and no cost); with nscd_shared = false none is made and GETFD is
 * refused, as nscd refuses it for a database not "shared": glibc then
 * asks the socket for every lookup of that process's life. What a change in the store drops from
 * the mc maps it drops here, in the same call (memcache.c); records leave at their expiry
 * (nscdmaps_beat: glibc checks none); a stopping daemon marks its maps so
 * clients ask the next one for new maps, and a killed one's go stale
 * within NSCDDB_STALE_S (nscddb.h).
 */
#include <errno.h>
#include <inttypes.h>
#include <string.h>
#include <time.h>

#include "daemon/daemon.h"
#include "nscddb/nscddb.h"

/* Each map's data area at first; swaps grow it as records come. */
#define NSCDMAPS_START_SIZE (1u << 20)

/* The nscd database holding mc kind k's records (initgroups: the group map). */
static struct nscddb *map_of(const struct daemon *dm, int k)
{
	return dm->nscd_maps[k == 0 ? NSCDDB_PASSWD : NSCDDB_GROUP];
}

/* glibc's entry type for name lookups of mc kind k. */
static int name_type(int k)
{
	return k == 0 ? NSCDDB_GETPWBYNAME : k == 1 ? NSCDDB_GETGRBYNAME : NSCDDB_INITGROUPS;
}

int nscdmaps_fd(struct daemon *dm, int db, uint64_t *size)
{
	*size = 0;
	if (db != NSCDDB_PASSWD && db != NSCDDB_GROUP)
		return -EINVAL;
	if (!dm->cfg->nscd_shared)
		return -ENOTSUP;
	if (dm->nscd_maps[db] == NULL) {
		static bool logged[2]; /* once: every GETFD would log it again */
		int rc = nscddb_open(db, NSCDMAPS_START_SIZE, &dm->nscd_maps[db]);
		if (rc < 0 && !logged[db]) {
			logged[db] = true;
			idc_log(IDC_LOG_ERR, "nscd %s map: %s (glibc's clients use the socket)",
				db ? "group" : "passwd", idc_strerror(rc));
		}
		if (rc < 0)
			return rc;
	}
	/* Fresh when handed out, even after a stalled loop: glibc refuses a
	 * stale map, and a process refused one never asks again. */
	nscddb_beat(dm->nscd_maps[db], time(NULL));
	return nscddb_fd(dm->nscd_maps[db], size);
}

bool nscdmaps_on(const struct daemon *dm)
{
	return dm->nscd_maps[0] != NULL || dm->nscd_maps[1] != NULL;
}

void nscdmaps_close(struct daemon *dm)
{
	for (int db = 0; db < 2; db++) {
		nscddb_close(dm->nscd_maps[db]);
		dm->nscd_maps[db] = NULL;
	}
}

void nscdmaps_beat(struct daemon *dm)
{
	int64_t now = time(NULL);
	for (int db = 0; db < 2; db++)
		nscddb_beat(dm->nscd_maps[db], now);
}

/* Failures only cost a socket round trip: logged at debug level. */
static void note(const char *what, int rc)
{
	if (rc < 0 && rc != -E2BIG)
		idc_log(IDC_LOG_DEBUG, "nscd map: cannot store %s: %s", what, idc_strerror(rc));
}

/* The strings of a record the responder built from C strings (to_proto). */
static bool cstr(struct proto_str s)
{
	return s.p != NULL && s.p[s.len] == '\0' && memchr(s.p, '\0', s.len) == NULL;
}

void nscdmaps_put_passwd(struct daemon *dm, const struct proto_passwd *pw, unsigned keys,
			 int64_t expire)
{
	struct nscddb *m = dm->nscd_maps[NSCDDB_PASSWD];
	if (m == NULL || keys == 0)
		return;
	if (!cstr(pw->name) || !cstr(pw->passwd) || !cstr(pw->gecos) || !cstr(pw->dir) ||
	    !cstr(pw->shell))
		return;
	struct nscddb_passwd r = {pw->name.p,  pw->passwd.p, pw->gecos.p, pw->dir.p,
				  pw->shell.p, pw->uid,      pw->gid};
	note("a user", nscddb_put_passwd(m, &r, keys, expire, time(NULL)));
}

void nscdmaps_put_group(struct daemon *dm, const struct cache_group *g, unsigned keys,
			int64_t expire)
{
	struct nscddb *m = dm->nscd_maps[NSCDDB_GROUP];
	if (m == NULL || keys == 0)
		return;
	struct nscddb_group r = {g->name, daemon_passwd_field(g->passwd), g->gid, g->members,
				 g->nmembers};
	note("a group", nscddb_put_group(m, &r, keys, expire, time(NULL)));
}

void nscdmaps_put_initgroups(struct daemon *dm, const char *user, const uint32_t *gids, size_t n,
			     int64_t expire)
{
	note("a group list",
	     nscddb_put_initgroups(dm->nscd_maps[NSCDDB_GROUP], user, gids, n, expire, time(NULL)));
}

void nscdmaps_drop_name(struct daemon *dm, int k, const char *name)
{
	nscddb_drop_name(map_of(dm, k), name_type(k), name);
}

void nscdmaps_drop_id(struct daemon *dm, int k, uint32_t id)
{
	if (k != 2)
		nscddb_drop_id(map_of(dm, k), k == 0 ? NSCDDB_GETPWBYUID : NSCDDB_GETGRBYGID, id);
}

int nscdmaps_id_of(struct daemon *dm, int k, const char *name, uint32_t *id)
{
	return k == 2 ? -ENOENT : nscddb_id_of(map_of(dm, k), name_type(k), name, id);
}

void nscdmaps_reset(struct daemon *dm, int k)
{
	struct nscddb *m = map_of(dm, k);
	if (k == 0 || k == 2) {
		nscddb_drop_type(m, k == 0 ? -1 : NSCDDB_INITGROUPS);
		return;
	}
	nscddb_drop_type(m, NSCDDB_GETGRBYNAME);
	nscddb_drop_type(m, NSCDDB_GETGRBYGID);
}

void nscdmaps_status(const struct daemon *dm, struct idc_buf *b)
{
	for (int db = 0; db < 2; db++) {
		struct nscddb_stats st;
		const char *name = db ? "group" : "passwd";
		nscddb_stats(dm->nscd_maps[db], &st);
		idc_buf_printf(b,
			       "nscdmap_%s_size=%" PRIu64 "\nnscdmap_%s_entries=%u\n"
			       "nscdmap_%s_used=%u/%u\nnscdmap_%s_swaps=%" PRIu64
			       "\nnscdmap_%s_resets=%" PRIu64 "\n",
			       name, st.size, name, st.entries, name, st.used, st.data_size, name,
			       st.swaps, name, st.resets);
	}
}
