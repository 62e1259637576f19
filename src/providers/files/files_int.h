/* Internals shared by the files provider's parse.c and apply.c. */
#ifndef IDC_FILES_INT_H
#define IDC_FILES_INT_H

#include "files.h"

/* Record content hashes; equal records hash equal whether they come from a
 * parse or from the cache. */
uint64_t files_user_hash(const char *name, uint32_t uid, uint32_t gid, const char *gecos,
			 const char *dir, const char *shell);
uint64_t files_group_hash(const char *name, uint32_t gid, const char *const *mem, size_t n);

/* Take buf (len bytes, buf[len] writable) into s and parse it in place. On
 * error buf is freed too. */
int files_snapshot_take_passwd(struct files_snapshot *s, const char *label, uint32_t file,
			       char *buf, size_t len, bool log_bad);
int files_snapshot_take_group(struct files_snapshot *s, const char *label, uint32_t file, char *buf,
			      size_t len, bool log_bad);

/* Append a record already validated (from the cache); strings are copied
 * into s's arena. 0 or -ENOMEM. */
int files_snapshot_push_user(struct files_snapshot *s, const struct cache_user *u);
int files_snapshot_push_group(struct files_snapshot *s, const struct cache_group *g);

/* files_snapshot_user/group with the name's key (files_user.key) known. */
long files_snapshot_find_user(const struct files_snapshot *s, const char *name, uint64_t key);
long files_snapshot_find_group(const struct files_snapshot *s, const char *name, uint64_t key);

#endif
