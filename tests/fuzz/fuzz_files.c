/*
 * Fuzz target for the files provider's parser: the input is read as a
 * passwd file and as a group file. Each line is compared with what glibc's
 * fgetpwent/fgetgrent make of the same bytes (a record we accept must be
 * the record glibc yields), and the whole input goes through the snapshot
 * path, which must never crash or read out of bounds.
 */
#include <grp.h>
#include <pwd.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "providers/files/files.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(c)                                                                                   \
	do {                                                                                       \
		if (!(c))                                                                          \
			abort();                                                                   \
	} while (0)

static void same_str(const char *a, const char *b)
{
	CHECK(a && b && strcmp(a, b) == 0);
}

static bool nis(const char *name)
{
	return name[0] == '+' || name[0] == '-';
}

static void pw_line(char *line, char *glibc_copy, size_t len)
{
	FILE *f = fmemopen(glibc_copy, len + 1, "r");
	struct passwd *pw = f ? fgetpwent(f) : NULL;
	struct files_pwent e;
	const char *why;
	/* before parsing, which writes NULs into line */
	bool ours_only = memchr(line, '\0', len) != NULL;
	enum files_line r = files_parse_pwline(line, len, &e, &why);
	if (f && (ours_only || !pw || nis(pw->pw_name))) {
		CHECK(r != FILES_LINE_RECORD);
	} else if (f) {
		CHECK(r == FILES_LINE_RECORD);
		same_str(e.name, pw->pw_name);
		same_str(e.passwd, pw->pw_passwd);
		CHECK(e.uid == pw->pw_uid && e.gid == pw->pw_gid);
		same_str(e.gecos, pw->pw_gecos);
		same_str(e.dir, pw->pw_dir);
		same_str(e.shell, pw->pw_shell);
	}
	if (f)
		fclose(f);
}

static void gr_line(char *line, char *glibc_copy, size_t len)
{
	FILE *f = fmemopen(glibc_copy, len + 1, "r");
	struct group *gr = f ? fgetgrent(f) : NULL;
	struct files_grent e;
	const char *why;
	bool ours_only = memchr(line, '\0', len) != NULL;
	enum files_line r = files_parse_grline(line, len, &e, &why);
	if (f && (ours_only || !gr || nis(gr->gr_name))) {
		CHECK(r != FILES_LINE_RECORD);
	} else if (f) {
		CHECK(r == FILES_LINE_RECORD);
		same_str(e.name, gr->gr_name);
		same_str(e.passwd, gr->gr_passwd);
		CHECK(e.gid == gr->gr_gid);
		size_t i = 0;
		const char *m;
		while ((m = files_next_member(&e.members)) != NULL)
			same_str(m, gr->gr_mem[i++]);
		CHECK(gr->gr_mem[i] == NULL);
	}
	if (f)
		fclose(f);
}

/* Each line of data, parsed by us and by glibc from separate copies. */
static void each_line(const uint8_t *data, size_t size, bool group)
{
	const uint8_t *p = data, *end = data + size;
	while (p < end) {
		const uint8_t *nl = memchr(p, '\n', (size_t)(end - p));
		size_t len = nl ? (size_t)(nl - p) : (size_t)(end - p);
		char *ours = malloc(len + 1), *theirs = malloc(len + 1);
		if (ours && theirs) {
			memcpy(ours, p, len);
			ours[len] = '\0';
			memcpy(theirs, p, len);
			theirs[len] = '\n';
			if (group)
				gr_line(ours, theirs, len);
			else
				pw_line(ours, theirs, len);
		}
		free(ours);
		free(theirs);
		p += len + 1;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	each_line(data, size, false);
	each_line(data, size, true);
	struct files_snapshot *s = files_snapshot_new();
	if (s) {
		files_snapshot_add_passwd(s, "fuzz-passwd", 0, data, size, false);
		files_snapshot_add_group(s, "fuzz-group", 0, data, size, false);
		for (size_t i = 0; i < s->nusers; i++)
			CHECK(files_snapshot_user(s, s->users[i].name) == (long)i);
		for (size_t i = 0; i < s->ngroups; i++)
			CHECK(files_snapshot_group(s, s->groups[i].name) == (long)i);
		files_snapshot_free(s);
	}
	return 0;
}
