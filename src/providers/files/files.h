/*
 * files provider: passwd and group files turned into cache entries
 * (docs/DESIGN.md §6).
 *
 * Owns: snapshots — passwd/group lines parsed (parse.c) into records, their
 * name tables and the splicing of a re-parsed window into an old snapshot
 * (snapshot.c) —, an inotify watch on the configured files and the
 * directories holding them (watch.c), and per domain the last applied
 * snapshot plus the diff that turns a new parse into one cache transaction
 * (apply.c), or, when a few lines of one file per kind changed, the
 * re-parse and diff of those lines alone (partial.c).
 * May call: util, cache, libc.
 *
 * Parsing follows glibc's line parser (the one fgetpwent(3) and
 * libnss_files share), so a line means here what it means to getpwnam:
 *   - leading white space (isspace, C locale) is skipped; then an empty line
 *     or one starting with '#' is no record;
 *   - a name starting with '+' or '-' (NIS compat) is ignored;
 *   - passwd: name:passwd:uid:gid[:gecos[:dir[:shell]]], the shell being the
 *     rest of the line (colons included); group: name:passwd:gid[:members];
 *   - numbers as strtoul reads them (leading white space, a sign), rejected
 *     when empty, followed by anything but ':' or the end, or above
 *     4294967295 once strtoul has wrapped a negative value;
 *   - members: split at ',', leading white space of each dropped, empty
 *     items dropped, everything else (':' and trailing white space) kept.
 * As glibc, the first line of a name answers for the name (across all
 * files of a domain), and every line answers for its id and in
 * enumeration: a later line of a name is kept as an extra record. Names
 * are case-sensitive: "Alice" after "alice" is a name of its own.
 * The password field is kept when cache_passwd_public() allows ("", "*",
 * "!"), else served as "x".
 * Our additions: a line with a NUL byte is malformed; a name
 * cache_name_valid() refuses is skipped; member names cache_name_valid()
 * refuses are dropped. Every skip is logged with file:line and the
 * reason.
 */
#ifndef IDC_FILES_H
#define IDC_FILES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cache/cache.h"
#include "util/util.h"

#define FILES_SIZE_MAX (256u * 1024u * 1024u) /* larger files are refused */

/* ==== one line ===============================================================
 * The line parsers work in place: line[0..len) without its '\n', writable,
 * with line[len] == '\0'. Fields point into line. They do not check name
 * validity or duplicates (the snapshot does). */
enum files_line {
	FILES_LINE_RECORD = 0, /* *out holds a record */
	FILES_LINE_NONE,       /* blank, comment or NIS line: nothing, no message */
	FILES_LINE_BAD,        /* malformed; *why says why (static text) */
};

struct files_pwent {
	const char *name, *passwd, *gecos, *dir, *shell;
	uint32_t uid, gid;
};

struct files_grent {
	const char *name, *passwd;
	uint32_t gid;
	char *members; /* the member list text, for files_next_member */
};

enum files_line files_parse_pwline(char *line, size_t len, struct files_pwent *out,
				   const char **why);
enum files_line files_parse_grline(char *line, size_t len, struct files_grent *out,
				   const char **why);
/* Next member from *cursor (which starts as files_grent.members), NUL-
 * terminated in place, or NULL at the end. */
const char *files_next_member(char **cursor);

/* ==== snapshot ===============================================================
 * All users and groups of one domain as parsed from its files, in file
 * order. Strings live in buffers the snapshot owns; pointers stay valid
 * until files_snapshot_free. */
struct files_user {
	const char *name, *gecos, *dir, *shell;
	const char *passwd; /* cache_passwd_public() or NULL */
	uint32_t uid, gid;
	uint32_t file; /* index in the domain's file list */
	uint32_t line; /* 1-based; 0 for a record read back from the cache */
	uint32_t off;  /* byte offset of the line in its file */
	uint64_t order;
	uint64_t hash; /* of everything stored except order */
	uint64_t key;  /* hash of the folded name */
	size_t prev;   /* extras: records of the main list before this one */
};

struct files_group {
	const char *name;
	const char *passwd; /* as files_user.passwd */
	uint32_t gid;
	uint32_t file, line;
	uint32_t off;     /* byte offset of the line in its file */
	size_t mem_first; /* members are snapshot->mem[mem_first..+nmembers) */
	size_t nmembers;
	uint64_t order;
	uint64_t hash;
	uint64_t key;
	size_t prev;
};

struct files_name_table {
	uint64_t *slot; /* key's top 32 bits << 32 | record index + 1; 0 = empty */
	size_t mask;    /* slots - 1; 0 when no table */
	size_t used;
};

/* A line that yielded no record although it is not blank, a comment or NIS:
 * malformed, or a repeated name. Kept so that a refresh re-parsing only
 * the changed lines of a file can keep the counts exact and see which
 * names an edit could uncover. */
struct files_skip {
	uint32_t file, line, off;
	bool dup;
	uint64_t key; /* dup: the folded name's key */
};

#define FILES_SKIP_MAX 65536u /* kept per kind; beyond, refreshes parse everything */

struct files_skips {
	struct files_skip *v; /* in file order */
	size_t n, cap;
	bool overflow;                /* v is incomplete: counts below still exact */
	size_t malformed, duplicates; /* of this kind */
};

struct files_snapshot {
	struct files_user *users;
	size_t nusers, users_cap;
	struct files_group *groups;
	size_t ngroups, groups_cap;
	/* Extra records: lines whose name (folded) an earlier line holds,
	 * in file order; glibc answers them by id, by enumeration and, for
	 * another spelling, by name (cache.h, "Extra records"). */
	struct files_user *xusers;
	size_t nxusers, xusers_cap;
	struct files_group *xgroups;
	size_t nxgroups, xgroups_cap;
	const char **mem; /* member names of all groups */
	size_t nmem, mem_cap;
	struct files_name_table user_names, group_names; /* folded name -> index */
	char **bufs;                                     /* file contents the strings point into */
	size_t nbufs;
	size_t nborrowed; /* bufs[0..nborrowed) belong to another snapshot */
	size_t buf_bytes; /* sum of the bufs' lengths */
	struct files_skips uskip, gskip;
	struct idc_arena arena; /* strings copied from the cache */
	size_t malformed;       /* lines skipped as malformed (bad syntax, name) */
	size_t duplicates;      /* lines whose exact name an earlier line holds:
				 * found by id only */
};

struct files_snapshot *files_snapshot_new(void);
void files_snapshot_free(struct files_snapshot *s);

/* Parse len bytes of a passwd (group) file into s, after what s already
 * holds; the bytes are copied. label names the file in messages; file is
 * its index in the domain's list. Malformed lines are counted, and logged
 * (WARN, file:line: reason) when log_bad. 0 or -ENOMEM/-EFBIG. */
int files_snapshot_add_passwd(struct files_snapshot *s, const char *label, uint32_t file,
			      const void *data, size_t len, bool log_bad);
int files_snapshot_add_group(struct files_snapshot *s, const char *label, uint32_t file,
			     const void *data, size_t len, bool log_bad);

/* Read a whole file (at most FILES_SIZE_MAX bytes) into a malloc'd buffer
 * the caller frees. 0, -ENOENT when absent, -EFBIG, or another -errno. */
int files_read(const char *path, char **data, size_t *len);

/* The members of a group start here: s->mem + g->mem_first (NULL when no
 * group has members). */
const char *const *files_snapshot_members(const struct files_snapshot *s, size_t first);

/* Index of the user/group named exactly name, or -1. */
long files_snapshot_user(const struct files_snapshot *s, const char *name);
long files_snapshot_group(const struct files_snapshot *s, const char *name);

/* ==== watch ==================================================================
 * inotify on the parent directories of the configured files and on the
 * files themselves, so writes in place (also to a file bind-mounted over
 * the path), replace-by-rename (useradd, vipw, sed -i), deletion,
 * re-creation and a symlink renamed into place are all seen.
 *
 * Wiring into an epoll loop:
 *   files_watch_open(paths) -> add files_watch_fd(w) for EPOLLIN;
 *   on EPOLLIN: files_watch_drain(w, &ev); if ev has FILES_EV_CHANGED or
 *     FILES_EV_RESCAN, arm a one-shot timer for FILES_DEBOUNCE_MS unless one
 *     is armed; if only FILES_EV_WRITING (a write in progress), arm it for
 *     FILES_SETTLE_MS unless one is armed (a CLOSE_WRITE shortens it);
 *   on the timer: files_domain_refresh();
 *   when files_watch_missing(w) > 0, call files_watch_retry(w) every
 *     FILES_WATCH_RETRY_MS; a return with FILES_EV_RESCAN means a directory
 *     just got its watch: refresh (the file may have appeared meanwhile). */
#define FILES_DEBOUNCE_MS                                                                          \
	5                         /* first event to refresh: coalesces the files one               \
				   * tool writes together (useradd: passwd, group,                 \
				   * shadow within a millisecond); budget is 50 ms */
#define FILES_SETTLE_MS      200  /* after IN_MODIFY without a close yet */
#define FILES_WATCH_RETRY_MS 1000 /* retry a directory that does not exist */

enum {
	FILES_EV_CHANGED = 1u, /* a watched file was replaced, closed after writing, removed... */
	FILES_EV_WRITING = 2u, /* a watched file was modified and may still be open */
	FILES_EV_RESCAN = 4u,  /* events were lost or a directory changed: refresh */
};

struct files_watch;

/* Watch paths[0..n) and their directories. A directory that does not exist
 * yet is not an error: it is counted by files_watch_missing. 0 or -errno
 * (inotify_init1 failed, a path without a file name...). */
int files_watch_open(const char *const *paths, size_t n, struct files_watch **out,
		     struct idc_diag *d);
void files_watch_close(struct files_watch *w);
/* Non-blocking, close-on-exec inotify descriptor for epoll. */
int files_watch_fd(const struct files_watch *w);
/* Read all pending events; *ev gets FILES_EV_* bits for events that
 * concern the watched files. 0 or -errno. */
int files_watch_drain(struct files_watch *w, unsigned *ev);
/* Directories without a watch (missing, or removed since). */
size_t files_watch_missing(const struct files_watch *w);
/* Try to watch the missing directories; *ev gets FILES_EV_RESCAN if one
 * was added. Returns how many are still missing, or -errno. */
int files_watch_retry(struct files_watch *w, unsigned *ev);

/* ==== domain ================================================================= */

struct files_domain_config {
	const char *name; /* cache domain */
	const char *const *passwd_files;
	size_t npasswd;
	const char *const *group_files;
	size_t ngroup;
	uint32_t ttl; /* cache_domain_ensure's ttl; 0 = never expires */
};

/* What one refresh did, for the daemon's log and `idcache status`. */
struct files_kind_stats {
	size_t total; /* records in the new snapshot */
	size_t added, changed, removed, unchanged;
};

struct files_refresh_stats {
	struct files_kind_stats users, groups;
	size_t malformed;  /* lines skipped as malformed, all files */
	size_t duplicates; /* lines skipped as a repeated name */
	bool skipped;      /* files unchanged since the last refresh: nothing done */
	bool committed;    /* a cache transaction was committed */
	bool partial;      /* only the changed lines were parsed */
	uint64_t parse_ns, diff_ns, apply_ns;
};

struct files_domain;

/* Copies cfg. 0, -EINVAL (no name, no files) or -ENOMEM. */
int files_domain_new(const struct files_domain_config *cfg, struct files_domain **out);
void files_domain_free(struct files_domain *fd);

/* Every configured path, passwd files then group files (for the watch). */
size_t files_domain_paths(const struct files_domain *fd, const char *const **paths);

/* Read and parse all files and bring the cache domain to match, in one
 * cache transaction. Files whose bytes did not change since the last
 * successful refresh are not re-parsed and nothing is written. A file that
 * does not exist counts as empty; one that cannot be read (EACCES, EIO)
 * fails the refresh. On any failure the cache and the kept snapshot are
 * unchanged and d says why. st may be NULL. */
int files_domain_refresh(struct files_domain *fd, struct cache *c, struct files_refresh_stats *st,
			 struct idc_diag *d);

/* ---- change hook ----------------------------------------------------------------
 * After a refresh commits, the hook hears (struct cache_change,
 * nested_changed always false) of every user and group whose stored record
 * changed: added (old_name NULL), removed (new_name NULL), or changed in
 * place (both set, and equal: records are matched by exact name, so a
 * rename is a removal and an addition). Content and position both count:
 * a record that moved against its neighbours (moved) changes which entry
 * answers a shared id and the order of a user's groups. Never ch NULL. Strings and
 * member lists are valid during the call only. Nothing is reported for a
 * refresh that fails, finds the files unchanged, or re-stores records
 * whose content is what the cache held (files_domain_invalidate).
 * Report the changes of later refreshes to fn(ch, arg); fn NULL: stop. */
void files_domain_set_hook(struct files_domain *fd, cache_change_fn fn, void *arg);

/* Whether a refresh may parse only the changed lines of a file (on by
 * default; the result is the same either way, which the tests check by
 * turning it off). */
void files_domain_set_partial(struct files_domain *fd, bool on);

/* Forget the kept snapshot: the next refresh re-reads what the cache holds
 * and stores every record again (after `idcache cache expire`, or when the
 * cache was replaced). */
void files_domain_invalidate(struct files_domain *fd);

/* The last applied snapshot, or NULL before the first refresh. */
const struct files_snapshot *files_domain_snapshot(const struct files_domain *fd);

/* Why no record of the domain is named name (a user, or a group when
 * group): the first line of the kept snapshot's files that has this name
 * and was skipped as malformed, as "FILE:LINE: reason" in out. 1 when one
 * was found, else 0 (out untouched). */
int files_domain_why(const struct files_domain *fd, bool group, const char *name, char *out,
		     size_t cap);

#endif
