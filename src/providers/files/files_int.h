/* Internals shared by the files provider's snapshot.c, apply.c and
 * partial.c. */
#ifndef IDC_FILES_INT_H
#define IDC_FILES_INT_H

#include "files.h"

/* Record content hashes; equal records hash equal whether they come from a
 * parse or from the cache. */
uint64_t files_user_hash(const struct files_user *u);
uint64_t files_group_hash(const struct files_group *g, const char *const *mem);

/* Take buf (len bytes, buf[len] writable) into s and parse it in place. On
 * error buf is freed too. */
int files_snapshot_take_passwd(struct files_snapshot *s, const char *label, uint32_t file,
			       char *buf, size_t len, bool log_bad);
int files_snapshot_take_group(struct files_snapshot *s, const char *label, uint32_t file, char *buf,
			      size_t len, bool log_bad);

/* ==== partial re-parse =========================================================
 * When one file of a kind changed between two refreshes, only its changed
 * lines (the window) are parsed; the records before and after the window
 * are taken over from the old snapshot. Index 0 is users, 1 groups. */
struct files_outer {
	const struct files_snapshot *old;
	size_t before[2]; /* old records [0, before) precede the window */
	size_t after[2];  /* old records [after, n) follow it */
	bool collide;     /* out: a window record has the name of one after it */
};

/* Parse buf (len bytes, buf[len] writable), the window starting at byte off
 * of the file, after line number line, into s (a fresh snapshot). Names
 * the old records before the window hold count as repeats; a name one after
 * the window holds sets outer->collide. On error buf is freed too. */
int files_snapshot_take_window(struct files_snapshot *s, bool group, const char *label,
			       uint32_t file, uint32_t line, uint32_t off, char *buf, size_t len,
			       bool log_bad, struct files_outer *outer);

struct files_window {
	bool active;                /* else the kind is taken over unchanged */
	uint32_t file;              /* index within the kind's files */
	uint32_t pre, old_end;      /* the window was bytes [pre, old_end) of the old file */
	int64_t dline, doff;        /* shift of the lines after it in the same file */
	size_t before, after;       /* old record indexes, as in files_outer */
	struct files_snapshot *win; /* the window parsed; its buffers move to the result */
};

/* A new snapshot: old with each active window's records replaced. Its
 * first nborrowed buffers are old's (orders are not set for window
 * records). old's extra records are kept as they are: the caller makes
 * sure none is in or after an active window. 0 or -ENOMEM. */
int files_snapshot_splice(const struct files_snapshot *old, struct files_window w[2],
			  struct files_snapshot **out);

/* Append a record already validated (from the cache); strings are copied
 * into s's arena. 0 or -ENOMEM. */
int files_snapshot_push_user(struct files_snapshot *s, const struct cache_user *u);
int files_snapshot_push_group(struct files_snapshot *s, const struct cache_group *g);

/* files_snapshot_user/group with the name's key (files_user.key) known. */
long files_snapshot_find_user(const struct files_snapshot *s, const char *name, uint64_t key);
long files_snapshot_find_group(const struct files_snapshot *s, const char *name, uint64_t key);

/* ==== the domain, shared by apply.c and partial.c ============================== */

struct files_domain {
	char *name;
	char **paths; /* passwd files, then group files */
	size_t npasswd, ngroup;
	uint32_t ttl;
	struct files_snapshot *snap; /* last applied; NULL before the first */
	uint64_t *applied;           /* per path: content hash in snap */
	uint64_t *logged;            /* per path: content hash last parsed (and logged) */
	char **raw;                  /* per path: the bytes snap was parsed from (NULL: none) */
	size_t *rawlen;
	cache_change_fn hook; /* told of each committed change; may be NULL */
	bool no_partial;      /* files_domain_set_partial(false) */
	void *hook_arg;
};

/* The domain's files as read by one refresh. */
struct files_loaded {
	char **buf; /* per path; NULL when absent */
	size_t *len;
	uint64_t *hash;
};

/* What one refresh writes: record indexes of the new snapshot to put, of
 * the old one to delete. */
struct files_plan {
	size_t *put_u, nput_u, *del_u, ndel_u;
	size_t *put_g, nput_g, *del_g, ndel_g;
	bool extras[2]; /* users, groups: replace every extra record */
};

/* apply.c */
/* order[i] holds the old order of record i or 0; keep the old orders that
 * still increase and give the others orders between their neighbours.
 * Returns true when there was no room and everything was renumbered. */
bool files_assign_orders(uint64_t *order, size_t n);
void files_plan_free(struct files_plan *p);
bool files_plan_empty(const struct files_plan *p);
int files_apply_plan(struct files_domain *fd, struct cache *c, const struct files_snapshot *old,
		     const struct files_snapshot *ns, const struct files_plan *p,
		     struct idc_diag *d);
/* Tell the hook what the committed plan changed: removals first, as they
 * were applied. */
void files_report_plan(const struct files_domain *fd, const struct files_snapshot *old,
		       const struct files_snapshot *ns, const struct files_plan *p);
/* Take the loaded bytes as what the kept snapshot was parsed from. */
void files_keep_raw(struct files_domain *fd, struct files_loaded *l);

/* partial.c */
/* The refresh through windows. 1 when it does not apply (nothing was
 * done: the caller parses everything), else the refresh's result. */
int files_partial_refresh(struct files_domain *fd, struct cache *c, struct files_loaded *l,
			  struct files_refresh_stats *st, struct idc_diag *d);

#endif
