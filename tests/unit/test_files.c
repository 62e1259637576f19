/* Unit tests of the files provider: the line parsers against glibc's
 * fgetpwent/fgetgrent on the same bytes, snapshots, the inotify watch, and
 * refreshes applied to a real cache. */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "providers/files/files.h"

/* ==== differential: one line against glibc ========================================== */

static FILE *open_line(const char *line, size_t len, char **mem)
{
	*mem = malloc(len + 1);
	assert_non_null(*mem);
	memcpy(*mem, line, len);
	(*mem)[len] = '\n';
	FILE *f = fmemopen(*mem, len + 1, "r");
	assert_non_null(f);
	return f;
}

static char *copy_line(const char *line, size_t len)
{
	char *c = malloc(len + 1);
	assert_non_null(c);
	memcpy(c, line, len);
	c[len] = '\0';
	return c;
}

static bool nis_name(const char *n)
{
	return n[0] == '+' || n[0] == '-';
}

/* glibc and we agree on line[0..len): same record, or both no record. */
static void check_pw(const char *line, size_t len)
{
	char *mem;
	FILE *f = open_line(line, len, &mem);
	struct passwd *pw = fgetpwent(f);
	char *copy = copy_line(line, len);
	struct files_pwent e;
	const char *why = NULL;
	enum files_line r = files_parse_pwline(copy, len, &e, &why);
	bool ours_only = memchr(line, '\0', len);
	if (ours_only || !pw || nis_name(pw->pw_name)) {
		if (r == FILES_LINE_RECORD)
			fail_msg("accepted a line glibc does not yield: '%.*s'", (int)len, line);
	} else {
		if (r != FILES_LINE_RECORD)
			fail_msg("refused '%.*s' (%s)", (int)len, line, why ? why : "-");
		assert_string_equal(e.name, pw->pw_name);
		assert_string_equal(e.passwd, pw->pw_passwd);
		assert_int_equal(e.uid, pw->pw_uid);
		assert_int_equal(e.gid, pw->pw_gid);
		assert_string_equal(e.gecos, pw->pw_gecos);
		assert_string_equal(e.dir, pw->pw_dir);
		assert_string_equal(e.shell, pw->pw_shell);
	}
	fclose(f);
	free(mem);
	free(copy);
}

static void check_gr(const char *line, size_t len)
{
	char *mem;
	FILE *f = open_line(line, len, &mem);
	struct group *gr = fgetgrent(f);
	char *copy = copy_line(line, len);
	struct files_grent e;
	const char *why = NULL;
	enum files_line r = files_parse_grline(copy, len, &e, &why);
	bool ours_only = memchr(line, '\0', len);
	if (ours_only || !gr || nis_name(gr->gr_name)) {
		if (r == FILES_LINE_RECORD)
			fail_msg("accepted a line glibc does not yield: '%.*s'", (int)len, line);
	} else {
		if (r != FILES_LINE_RECORD)
			fail_msg("refused '%.*s' (%s)", (int)len, line, why ? why : "-");
		assert_string_equal(e.name, gr->gr_name);
		assert_string_equal(e.passwd, gr->gr_passwd);
		assert_int_equal(e.gid, gr->gr_gid);
		char *cur = e.members;
		size_t i = 0;
		const char *m;
		while ((m = files_next_member(&cur)) != NULL) {
			assert_non_null(gr->gr_mem[i]);
			assert_string_equal(m, gr->gr_mem[i]);
			i++;
		}
		assert_null(gr->gr_mem[i]);
	}
	fclose(f);
	free(mem);
	free(copy);
}

static const char *const pw_lines[] = {
    "alice:x:1000:1000:Alice A:/home/alice:/bin/bash",
    "alice:x:1000:1000:::",
    "alice:x:1000:1000::/home/alice:",
    "alice:x:1000:1000",
    "alice:x:1000:1000:",
    "alice:x:1000",
    "alice:x:1000:",
    "alice:x::1000:::",
    "alice:x:0001000:007:::",
    "alice:x: 1000:\t1000:::",
    "alice:x:1000 :1000:::",
    "alice:x:+5:+6:::",
    "alice:x:-0:-0:::",
    "alice:x:-1:1:::",
    "alice:x:-5:1:::",
    "alice:x:4294967295:4294967294:::",
    "alice:x:4294967296:1:::",
    "alice:x:99999999999999999999999:1:::",
    "alice:x:18446744073709551615:1:::",
    "alice:x:-18446744073709551615:1:::",
    "alice:x:-18446744069414584321:1:::",
    "alice:x:1a:1:::",
    "alice:x:0x10:1:::",
    "alice:x:- 1:1:::",
    "alice:x:1:2:g:d:s:extra:fields",
    "alice:x:1:2:g:d:s::",
    "alice::1:2:::",
    "alice:x:1:2:::\r",
    "alice:x:1:2:g:/h:/bin/sh\r",
    ":x:1:2:::",
    "alice",
    "alice:",
    "alice:x",
    "+",
    "+alice",
    "+alice:x:1:2:::",
    "-alice",
    "-alice:::::",
    "+@netgroup:::::",
    "#alice:x:1:2:::",
    "   #alice:x:1:2:::",
    "",
    "   ",
    "\t\r\v\f",
    "  alice:x:1:2:::",
    "\talice:x:1:2:::",
    " +alice:x:1:2:::",
    "alice bob:x:1:2:::",
    "alice:x:\v1:2:::",
    "alice:x:1:2: leading space gecos: /dir : shell ",
    "al#ice:x:1:2:::",
    "\xc3\xa9t\xc3\xa9:x:1:2:\xff:\x80:\x01",
};

static const char *const gr_lines[] = {
    "wheel:x:10:alice,bob",
    "wheel:x:10:",
    "wheel:x:10",
    "wheel:x:",
    "wheel:x::alice",
    "wheel::10:alice",
    "wheel:x:010:alice",
    "wheel:x: 10:alice",
    "wheel:x:10 :alice",
    "wheel:x:-0:alice",
    "wheel:x:-1:alice",
    "wheel:x:4294967296:alice",
    "wheel:x:10:a,,b",
    "wheel:x:10:a,b,",
    "wheel:x:10:,",
    "wheel:x:10:,,,a",
    "wheel:x:10: a , b ",
    "wheel:x:10:a, ,b",
    "wheel:x:10:a:b,c",
    "wheel:x:10:a\t,\tb",
    "wheel:x:10:a,b\r",
    "wheel:x:10\r",
    "wheel:x:10:\r",
    "wheel",
    "+",
    "+wheel:x:10:a",
    "-wheel",
    "#wheel:x:10:a",
    "",
    "  wheel:x:10:a",
    ":x:10:a",
    "wheel:x:10:a\v,b\f",
};

static void test_pw_lines(void **state)
{
	(void)state;
	for (size_t i = 0; i < IDC_ARRAY_SIZE(pw_lines); i++)
		check_pw(pw_lines[i], strlen(pw_lines[i]));
	check_pw("alice:x:1\0:2:::", 15);
	check_pw("\0alice:x:1:2:::", 15);
	check_pw("alice:x:1:2:::\0", 15);
}

static void test_gr_lines(void **state)
{
	(void)state;
	for (size_t i = 0; i < IDC_ARRAY_SIZE(gr_lines); i++)
		check_gr(gr_lines[i], strlen(gr_lines[i]));
	check_gr("wheel:x:10:a\0b", 14);
}

/* Random lines from pieces that matter to the grammar. */
static size_t random_line(uint64_t *rng, char *out, size_t cap)
{
	static const char *const piece[] = {
	    "a",          "bob", ":",    ":",    ":", "0",  "007", "-1", "+",  "-",
	    " ",          "\t",  "#",    ",",    ",", "\r", "\v",  "x",  "12", "4294967295",
	    "4294967296", "-0",  "ab:c", "\xff", ".", "/",  "0x1", "",
	};
	size_t n = 0, k = 1 + (*rng >> 59);
	for (size_t i = 0; i < k; i++) {
		*rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
		const char *p = piece[(*rng >> 33) % IDC_ARRAY_SIZE(piece)];
		size_t l = strlen(p);
		if (n + l >= cap)
			break;
		memcpy(out + n, p, l);
		n += l;
	}
	return n;
}

static void test_random_lines(void **state)
{
	(void)state;
	uint64_t rng = 42;
	char line[256];
	for (int i = 0; i < 20000; i++) {
		size_t n = random_line(&rng, line, sizeof(line));
		check_pw(line, n);
		check_gr(line, n);
	}
}

/* glibc has no line limit (a group of 7,000 members is one long line):
 * neither do we. */
static void test_long_line(void **state)
{
	(void)state;
	size_t len = 200 * 1024;
	char *line = malloc(len + 1);
	assert_non_null(line);
	memset(line, 'g', len);
	memcpy(line, "alice:x:1:2:", 12);
	line[len] = '\0';
	struct files_pwent e;
	const char *why = NULL;
	assert_int_equal(files_parse_pwline(line, len, &e, &why), FILES_LINE_RECORD);
	assert_string_equal(e.name, "alice");
	assert_int_equal(strlen(e.gecos), len - 12);
	free(line);
}

/* ==== snapshots ================================================================ */

static struct files_snapshot *pw_snapshot(const char *text)
{
	struct files_snapshot *s = files_snapshot_new();
	assert_non_null(s);
	assert_int_equal(files_snapshot_add_passwd(s, "passwd", 0, text, strlen(text), false), 0);
	return s;
}

static void test_snapshot_rules(void **state)
{
	(void)state;
	struct files_snapshot *s = pw_snapshot("# comment\n"
					       "root:x:0:0:root:/root:/bin/sh\n"
					       "+nis::::::\n"
					       "alice:x:1000:1000::/home/alice:/bin/bash\n"
					       "bad:x:zz:1:::\n"
					       "alice:x:1001:1001:::\n"
					       "ALICE:x:1002:1002:::\n"
					       "a/b:x:5:5:::\n"
					       "dupuid:x:1000:1:::\n"
					       "\n"
					       "last:x:7:7:::");
	assert_int_equal(s->nusers, 4);
	assert_string_equal(s->users[0].name, "root");
	assert_string_equal(s->users[1].name, "alice");
	assert_int_equal(s->users[1].uid, 1000);
	assert_int_equal(s->users[1].line, 4);
	assert_string_equal(s->users[2].name, "dupuid");
	assert_int_equal(s->users[2].uid, 1000);
	assert_string_equal(s->users[3].name, "last");
	assert_int_equal(s->users[3].line, 11);
	/* the later alice and ALICE are extra records, after alice */
	assert_int_equal(s->nxusers, 2);
	assert_string_equal(s->xusers[0].name, "alice");
	assert_int_equal(s->xusers[0].uid, 1001);
	assert_int_equal(s->xusers[0].prev, 2);
	assert_string_equal(s->xusers[1].name, "ALICE");
	assert_int_equal(s->xusers[1].uid, 1002);
	assert_int_equal(s->malformed, 2);  /* bad uid, a/b */
	assert_int_equal(s->duplicates, 1); /* alice: found by id only */
	assert_int_equal(files_snapshot_user(s, "alice"), 1);
	assert_int_equal(files_snapshot_user(s, "ALICE"), -1);
	assert_int_equal(files_snapshot_user(s, "nobody"), -1);
	files_snapshot_free(s);
}

/* Names the cache would hold as one entry (CACHE_NAMES_STORED, Unicode
 * case folding and NFKC included) are one stored name to the snapshot: the
 * later spellings are extra records (served by id and in enumeration, as
 * glibc does), not repeats of the name. */
static void test_snapshot_folds_as_the_cache(void **state)
{
	(void)state;
	struct files_snapshot *s = pw_snapshot("\u00E9mile:x:1000:1000:::\n"
					       "\u00C9MILE:x:1001:1001:::\n"
					       "E\u0301mile:x:1002:1002:::\n"
					       "emile:x:1003:1003:::\n");
	assert_int_equal(s->nusers, 2);
	assert_int_equal(s->nxusers, 2);
	assert_int_equal(s->duplicates, 0);
	assert_int_equal(files_snapshot_user(s, "\u00E9mile"), 0);
	assert_int_equal(files_snapshot_user(s, "\u00C9MILE"), -1);
	assert_int_equal(files_snapshot_user(s, "emile"), 1);
	files_snapshot_free(s);
}

static void test_snapshot_groups(void **state)
{
	(void)state;
	const char *text = "wheel:x:10:alice,,bob,\n"
			   "empty:x:11:\n"
			   "dups:x:12:a,b,a,+bad,c\r\n"
			   "wheel:x:13:zed\n";
	struct files_snapshot *s = files_snapshot_new();
	assert_int_equal(files_snapshot_add_group(s, "group", 0, text, strlen(text), false), 0);
	assert_int_equal(s->ngroups, 3);
	const struct files_group *g = &s->groups[0];
	assert_int_equal(g->nmembers, 2);
	assert_string_equal(s->mem[g->mem_first], "alice");
	assert_string_equal(s->mem[g->mem_first + 1], "bob");
	assert_int_equal(s->groups[1].nmembers, 0);
	g = &s->groups[2];
	/* a, b once; "+bad" and "c\r" are names the cache refuses */
	assert_int_equal(g->nmembers, 2);
	assert_int_equal(s->duplicates, 1);
	files_snapshot_free(s);
}

static void test_snapshot_files_in_order(void **state)
{
	(void)state;
	struct files_snapshot *s = files_snapshot_new();
	const char *a = "x:x:1:1:::\ny:x:2:2:::\n", *b = "y:x:3:3:::\nz:x:4:4:::\n";
	assert_int_equal(files_snapshot_add_passwd(s, "a", 0, a, strlen(a), false), 0);
	assert_int_equal(files_snapshot_add_passwd(s, "b", 1, b, strlen(b), false), 0);
	assert_int_equal(s->nusers, 3);
	assert_int_equal(s->users[1].uid, 2);
	assert_int_equal(s->users[2].file, 1);
	assert_int_equal(s->users[2].line, 2);
	files_snapshot_free(s);
}

/* ==== temp dirs ======================================================================== */

static char *tmpdir(void)
{
	char *t = strdup("/tmp/idc-files-XXXXXX");
	assert_non_null(t);
	assert_non_null(mkdtemp(t));
	return t;
}

static void rmrf(const char *dir)
{
	char cmd[512];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	assert_int_equal(system(cmd), 0);
}

static void write_file(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
}

/* Replace path by rename, the way useradd and vipw do. */
static void replace_file(const char *path, const char *text)
{
	char tmp[512];
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	write_file(tmp, text);
	assert_int_equal(rename(tmp, path), 0);
}

static char *path_in(const char *dir, const char *name)
{
	char *p = malloc(strlen(dir) + strlen(name) + 2);
	assert_non_null(p);
	sprintf(p, "%s/%s", dir, name);
	return p;
}

/* ==== watch ======================================================================= */

static unsigned drain(struct files_watch *w)
{
	unsigned ev = 0;
	assert_int_equal(files_watch_drain(w, &ev), 0);
	return ev;
}

static void test_watch(void **state)
{
	(void)state;
	char *dir = tmpdir(), *pw = path_in(dir, "passwd"), *other = path_in(dir, "shadow");
	char *target = path_in(dir, "real"), *lnk = path_in(dir, "passwd.lnk");
	write_file(pw, "a:x:1:1:::\n");
	struct files_watch *w;
	const char *paths[] = {pw};
	assert_int_equal(files_watch_open(paths, 1, &w, NULL), 0);
	assert_int_equal(files_watch_missing(w), 0);
	assert_int_equal(drain(w), 0);

	write_file(pw, "a:x:1:1:::\nb:x:2:2:::\n"); /* in place */
	assert_true(drain(w) & FILES_EV_CHANGED);
	replace_file(pw, "c:x:3:3:::\n"); /* rename over */
	assert_true(drain(w) & FILES_EV_CHANGED);
	assert_int_equal(unlink(pw), 0); /* delete */
	assert_true(drain(w) & FILES_EV_CHANGED);
	write_file(pw, "d:x:4:4:::\n"); /* re-create */
	assert_true(drain(w) & FILES_EV_CHANGED);
	write_file(target, "e:x:5:5:::\n"); /* a symlink swapped in */
	assert_int_equal(drain(w), 0);
	assert_int_equal(symlink(target, lnk), 0);
	assert_int_equal(drain(w), 0);
	assert_int_equal(rename(lnk, pw), 0);
	assert_true(drain(w) & FILES_EV_CHANGED);
	write_file(other, "secret\n"); /* unrelated file */
	replace_file(other, "secret2\n");
	assert_int_equal(drain(w), 0);

	files_watch_close(w);
	rmrf(dir);
	free(dir);
	free(pw);
	free(other);
	free(target);
	free(lnk);
}

/* A write to the file through a name in another directory (what a bind
 * mount over the path amounts to: the kernel tells that directory, not
 * ours) is seen by the file's own watch, also after the path was replaced
 * by a rename. */
static void test_watch_write_elsewhere(void **state)
{
	(void)state;
	char *dir = tmpdir(), *pw = path_in(dir, "passwd"), *other = tmpdir();
	char *alias = path_in(other, "alias");
	write_file(pw, "a:x:1:1:::\n");
	struct files_watch *w;
	const char *paths[] = {pw};
	assert_int_equal(files_watch_open(paths, 1, &w, NULL), 0);
	for (int round = 0; round < 2; round++) {
		assert_int_equal(link(pw, alias), 0);
		assert_int_equal(drain(w) & FILES_EV_CHANGED, FILES_EV_CHANGED); /* nlink */
		write_file(alias, "a:x:1:1:::\nb:x:2:2:::\n");
		assert_true(drain(w) & FILES_EV_CHANGED);
		assert_int_equal(unlink(alias), 0);
		replace_file(pw, "c:x:3:3:::\n"); /* the watch follows the new inode */
		assert_true(drain(w) & FILES_EV_CHANGED);
	}
	files_watch_close(w);
	rmrf(dir);
	rmrf(other);
	free(dir);
	free(pw);
	free(other);
	free(alias);
}

static void test_watch_missing_dir(void **state)
{
	(void)state;
	char *dir = tmpdir(), *sub = path_in(dir, "etc"), *pw = path_in(sub, "passwd");
	struct files_watch *w;
	const char *paths[] = {pw};
	assert_int_equal(files_watch_open(paths, 1, &w, NULL), 0);
	assert_int_equal(files_watch_missing(w), 1);
	unsigned ev;
	assert_int_equal(files_watch_retry(w, &ev), 1);
	assert_int_equal(ev, 0);
	assert_int_equal(mkdir(sub, 0755), 0);
	assert_int_equal(files_watch_retry(w, &ev), 0);
	assert_true(ev & FILES_EV_RESCAN);
	write_file(pw, "a:x:1:1:::\n");
	assert_true(drain(w) & FILES_EV_CHANGED);
	rmrf(sub); /* the directory goes away */
	assert_true(drain(w) & FILES_EV_RESCAN);
	assert_int_equal(files_watch_missing(w), 1);
	files_watch_close(w);
	rmrf(dir);
	free(dir);
	free(sub);
	free(pw);
}

/* ==== apply to a real cache ============================================================ */

struct fixture {
	char *dir, *pw, *gr;
	struct cache *c;
	struct files_domain *fd;
};

static void fixture_domain(struct fixture *f)
{
	const char *pws[] = {f->pw}, *grs[] = {f->gr};
	struct files_domain_config cfg = {"files", pws, 1, grs, 1, 0};
	assert_int_equal(files_domain_new(&cfg, &f->fd), 0);
}

static int fixture_setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	assert_non_null(f);
	f->dir = tmpdir();
	f->pw = path_in(f->dir, "passwd");
	f->gr = path_in(f->dir, "group");
	struct cache_options o = {.nosync = true};
	struct idc_diag d = {""};
	if (cache_open(f->dir, &o, &f->c, &d) != 0)
		fail_msg("cache_open: %s", d.msg);
	fixture_domain(f);
	*state = f;
	return 0;
}

static int fixture_teardown(void **state)
{
	struct fixture *f = *state;
	files_domain_free(f->fd);
	cache_close(f->c);
	rmrf(f->dir);
	free(f->dir);
	free(f->pw);
	free(f->gr);
	free(f);
	return 0;
}

static void refresh(struct fixture *f, struct files_refresh_stats *st)
{
	struct idc_diag d = {""};
	int rc = files_domain_refresh(f->fd, f->c, st, &d);
	if (rc)
		fail_msg("refresh: %s (%s)", idc_strerror(rc), d.msg);
}

static const char *const dom[] = {"files"};

/* The user's shell, or NULL when absent; copied into buf. */
static const char *shell_of(struct fixture *f, const char *name, char *buf, size_t cap)
{
	struct cache_reader *r;
	assert_int_equal(cache_reader_begin(f->c, &r), 0);
	struct cache_user u;
	int rc = cache_user_by_name(r, dom, 1, name, true, &u, NULL);
	if (rc == 0)
		snprintf(buf, cap, "%s", u.shell);
	cache_reader_end(r);
	return rc == 0 ? buf : NULL;
}

static void assert_uid_owner(struct fixture *f, uint32_t uid, const char *name)
{
	struct cache_reader *r;
	assert_int_equal(cache_reader_begin(f->c, &r), 0);
	struct cache_user u;
	assert_int_equal(cache_user_by_uid(r, dom, 1, uid, &u, NULL), 0);
	assert_string_equal(u.name, name);
	cache_reader_end(r);
}

/* Members of a group joined by ',' into buf. */
static const char *members_of(struct fixture *f, const char *name, char *buf, size_t cap)
{
	struct cache_reader *r;
	assert_int_equal(cache_reader_begin(f->c, &r), 0);
	struct cache_group g;
	assert_int_equal(cache_group_by_name(r, dom, 1, name, true, &g, NULL), 0);
	buf[0] = '\0';
	for (size_t i = 0; i < g.nmembers; i++)
		snprintf(buf + strlen(buf), cap - strlen(buf), "%s%s", i ? "," : "", g.members[i]);
	cache_reader_end(r);
	return buf;
}

static const char *base_pw = "root:x:0:0:root:/root:/bin/sh\n"
			     "alice:x:1000:1000:Alice:/home/alice:/bin/bash\n"
			     "bob:x:1001:1001::/home/bob:/bin/sh\n"
			     "twin:x:1001:1001::/:/bin/false\n";
static const char *base_gr = "root:x:0:\nstaff:x:50:alice,bob\n";

static void test_apply_changes(void **state)
{
	struct fixture *f = *state;
	char buf[256];
	struct files_refresh_stats st;
	write_file(f->pw, base_pw);
	write_file(f->gr, base_gr);
	refresh(f, &st);
	assert_int_equal(st.users.added, 4);
	assert_int_equal(st.groups.added, 2);
	assert_true(st.committed);
	assert_string_equal(shell_of(f, "alice", buf, sizeof(buf)), "/bin/bash");
	assert_uid_owner(f, 1001, "bob"); /* duplicate uid: the earlier line */

	uint64_t commits = cache_durable_commits(f->c);
	refresh(f, &st); /* nothing changed */
	assert_true(st.skipped);
	assert_int_equal(cache_durable_commits(f->c), commits);
	replace_file(f->pw, base_pw); /* same bytes, new inode */
	refresh(f, &st);
	assert_int_equal(cache_durable_commits(f->c), commits);

	char text[1024];
	snprintf(text, sizeof(text), "%scarol:x:1002:1002::/home/carol:/bin/zsh\n", base_pw);
	replace_file(f->pw, text); /* add one */
	refresh(f, &st);
	assert_int_equal(st.users.added, 1);
	assert_int_equal(st.users.changed, 0);
	assert_int_equal(st.users.unchanged, 4);
	assert_string_equal(shell_of(f, "carol", buf, sizeof(buf)), "/bin/zsh");

	snprintf(text, sizeof(text),
		 "root:x:0:0:root:/root:/bin/sh\n"
		 "alice:x:1000:1000:Alice:/home/alice:/bin/zsh\n" /* shell changed */
		 "twin:x:1001:1001::/:/bin/false\n"               /* bob removed */
		 "carol:x:1002:1002::/home/carol:/bin/zsh\n");
	replace_file(f->pw, text);
	write_file(f->gr, "root:x:0:\nstaff:x:50:alice,carol\n"); /* member renamed */
	refresh(f, &st);
	assert_int_equal(st.users.changed, 1);
	assert_int_equal(st.users.removed, 1);
	assert_int_equal(st.users.added, 0);
	assert_int_equal(st.groups.changed, 1);
	assert_int_equal(st.groups.unchanged, 1);
	assert_string_equal(shell_of(f, "alice", buf, sizeof(buf)), "/bin/zsh");
	assert_null(shell_of(f, "bob", buf, sizeof(buf)));
	assert_uid_owner(f, 1001, "twin");
	assert_string_equal(members_of(f, "staff", buf, sizeof(buf)), "alice,carol");
}

static void test_apply_insert_keeps_others(void **state)
{
	struct fixture *f = *state;
	struct files_refresh_stats st;
	write_file(f->pw, base_pw);
	write_file(f->gr, base_gr);
	refresh(f, &st);
	/* a line inserted at the top: only it is written */
	char text[1024];
	snprintf(text, sizeof(text), "first:x:1:1:::\n%s", base_pw);
	replace_file(f->pw, text);
	refresh(f, &st);
	assert_int_equal(st.users.added, 1);
	assert_int_equal(st.users.changed, 0);
	assert_int_equal(st.users.unchanged, 4);
	/* and one removed from the middle */
	replace_file(f->pw, "first:x:1:1:::\nroot:x:0:0:root:/root:/bin/sh\n"
			    "bob:x:1001:1001::/home/bob:/bin/sh\n"
			    "twin:x:1001:1001::/:/bin/false\n");
	refresh(f, &st);
	assert_int_equal(st.users.removed, 1);
	assert_int_equal(st.users.changed + st.users.added, 0);
	assert_uid_owner(f, 1001, "bob");
}

static void test_apply_restart(void **state)
{
	struct fixture *f = *state;
	char buf[256];
	struct files_refresh_stats st;
	write_file(f->pw, base_pw);
	write_file(f->gr, base_gr);
	refresh(f, &st);
	/* the daemon restarts: a new domain object over the same cache */
	files_domain_free(f->fd);
	fixture_domain(f);
	write_file(f->pw, "alice:x:1000:1000:Alice:/home/alice:/bin/bash\n"
			  "dave:x:1003:1003:::\n");
	refresh(f, &st);
	assert_int_equal(st.users.added, 1);
	assert_int_equal(st.users.removed, 3);
	assert_null(shell_of(f, "root", buf, sizeof(buf)));
	assert_non_null(shell_of(f, "dave", buf, sizeof(buf)));
	/* same files again, from scratch: nothing durable written */
	uint64_t commits = cache_durable_commits(f->c);
	files_domain_invalidate(f->fd);
	refresh(f, &st);
	assert_int_equal(cache_durable_commits(f->c), commits);
}

/* A user by uid: its name and shell into buf as "name:shell:passwd", or
 * NULL. */
static const char *by_uid(struct fixture *f, uint32_t uid, char *buf, size_t cap)
{
	struct cache_reader *r;
	assert_int_equal(cache_reader_begin(f->c, &r), 0);
	struct cache_user u;
	int rc = cache_user_by_uid(r, dom, 1, uid, &u, NULL);
	if (rc == 0)
		snprintf(buf, cap, "%s:%s:%s", u.name, u.shell, u.passwd ? u.passwd : "(x)");
	cache_reader_end(r);
	return rc == 0 ? buf : NULL;
}

/* The uid (gid) the user (group) named exactly name has, or -1. */
static long id_of(struct fixture *f, bool group, const char *name)
{
	struct cache_reader *r;
	assert_int_equal(cache_reader_begin(f->c, &r), 0);
	struct cache_user u;
	struct cache_group g;
	int rc = group ? cache_group_by_name(r, dom, 1, name, true, &g, NULL)
		       : cache_user_by_name(r, dom, 1, name, true, &u, NULL);
	cache_reader_end(r);
	return rc ? -1 : group ? (long)g.gid : (long)u.uid;
}

#define uid_of(f, name) id_of(f, false, name)
#define gid_of(f, name) id_of(f, true, name)

static long group_gid_owner(struct fixture *f, uint32_t gid, char *buf, size_t cap)
{
	struct cache_reader *r;
	assert_int_equal(cache_reader_begin(f->c, &r), 0);
	struct cache_group g;
	int rc = cache_group_by_gid(r, dom, 1, gid, &g, NULL);
	if (rc == 0)
		snprintf(buf, cap, "%s", g.name);
	cache_reader_end(r);
	return rc;
}

/* As glibc: the first line of a name answers by name, every line by its
 * id; a name in another case is a name of its own; "*", "!" and "" pass,
 * a hash never does. Checked after the first refresh, after an edit and
 * after a restart (the records read back from the cache). */
static void check_repeated(struct fixture *f)
{
	char buf[256];
	assert_int_equal(uid_of(f, "dupname"), 2013);
	assert_string_equal(by_uid(f, 2013, buf, sizeof(buf)), "dupname:/bin/one:(x)");
	assert_string_equal(by_uid(f, 2014, buf, sizeof(buf)), "dupname:/bin/two:*");
	assert_int_equal(uid_of(f, "alice"), 3000);
	assert_int_equal(uid_of(f, "Alice"), 3001);
	assert_int_equal(uid_of(f, "ALICE"), -1);
	/* uid 3000 is alice's: the later line holding it loses */
	assert_string_equal(by_uid(f, 3000, buf, sizeof(buf)), "alice:/bin/sh:!");
	assert_string_equal(by_uid(f, 3001, buf, sizeof(buf)), "Alice:/bin/sh:");
	assert_string_equal(by_uid(f, 3002, buf, sizeof(buf)), "hashed:/bin/sh:(x)");
	assert_int_equal(gid_of(f, "dupgrp"), 500);
	assert_int_equal(group_gid_owner(f, 501, buf, sizeof(buf)), 0);
	assert_string_equal(buf, "dupgrp");
	assert_int_equal(gid_of(f, "Staff"), 601);
	assert_int_equal(gid_of(f, "staff"), 600);
}

static const char repeated_pw[] = "dupname:x:2013:100::/:/bin/one\n"
				  "alice:!:3000:100::/:/bin/sh\n"
				  "dupname:*:2014:100::/:/bin/two\n"
				  "Alice::3001:100::/:/bin/sh\n"
				  "alice:x:3000:100::/:/bin/late\n"
				  "hashed:$6$salt$abc:3002:100::/:/bin/sh\n";
static const char repeated_gr[] = "dupgrp:x:500:alice\n"
				  "staff:x:600:\n"
				  "dupgrp:!:501:Alice\n"
				  "Staff:x:601:Alice\n";

static void test_apply_repeated_names(void **state)
{
	struct fixture *f = *state;
	char buf[256];
	struct files_refresh_stats st;
	write_file(f->pw, repeated_pw);
	write_file(f->gr, repeated_gr);
	refresh(f, &st);
	assert_int_equal(st.duplicates, 3); /* dupname, alice, dupgrp */
	check_repeated(f);
	/* an edit before the extra records moves them; one goes */
	write_file(f->pw, "first:x:1:1:::\n"
			  "dupname:x:2013:100::/:/bin/one\n"
			  "alice:!:3000:100::/:/bin/sh\n"
			  "dupname:*:2014:100::/:/bin/two\n"
			  "Alice::3001:100::/:/bin/sh\n"
			  "hashed:$6$salt$abc:3002:100::/:/bin/sh\n");
	refresh(f, &st);
	check_repeated(f);
	/* the first dupname goes: the second answers by name now */
	write_file(f->pw, "dupname:*:2014:100::/:/bin/two\n");
	refresh(f, &st);
	assert_int_equal(uid_of(f, "dupname"), 2014);
	assert_null(by_uid(f, 2013, buf, sizeof(buf)));
	assert_null(by_uid(f, 3001, buf, sizeof(buf)));
	/* back, then a restart reads the extra records from the cache */
	write_file(f->pw, repeated_pw);
	refresh(f, &st);
	files_domain_free(f->fd);
	fixture_domain(f);
	uint64_t commits = cache_durable_commits(f->c);
	refresh(f, &st);
	assert_int_equal(cache_durable_commits(f->c), commits);
	check_repeated(f);
}

/* A line of any length is a record: a group of 7,000 members. */
static void test_apply_huge_group(void **state)
{
	struct fixture *f = *state;
	struct files_refresh_stats st;
	struct idc_buf b = IDC_BUF_INIT;
	assert_int_equal(idc_buf_printf(&b, "huge:x:4000:"), 0);
	for (int i = 0; i < 7000; i++)
		assert_int_equal(idc_buf_printf(&b, "%smember%04d", i ? "," : "", i), 0);
	assert_int_equal(idc_buf_printf(&b, "\nafter:x:4001:member6999\n"), 0);
	assert_true(b.len > 64 * 1024);
	write_file(f->pw, "member6999:x:1:4000:::\n");
	write_file(f->gr, b.data);
	refresh(f, &st);
	assert_int_equal(st.malformed, 0);
	assert_int_equal(gid_of(f, "huge"), 4000);
	struct cache_reader *r;
	assert_int_equal(cache_reader_begin(f->c, &r), 0);
	struct cache_group g;
	assert_int_equal(cache_group_by_name(r, dom, 1, "huge", true, &g, NULL), 0);
	assert_int_equal(g.nmembers, 7000);
	uint32_t gids[8];
	size_t n;
	const struct cache_nesting flat = {0, NULL, NULL}; /* files domains nest nothing */
	assert_int_equal(cache_initgroups(r, dom, 1, "member6999", true, &flat, gids, 8, &n), 0);
	assert_int_equal(n, 2);
	cache_reader_end(r);
	idc_buf_free(&b);
}

static void test_apply_failure_keeps_old(void **state)
{
	struct fixture *f = *state;
	char buf[256];
	struct files_refresh_stats st;
	write_file(f->pw, base_pw);
	write_file(f->gr, base_gr);
	refresh(f, &st);
	/* unreadable (here: not a regular file): refused, old data kept */
	assert_int_equal(unlink(f->pw), 0);
	assert_int_equal(mkdir(f->pw, 0755), 0);
	struct idc_diag d = {""};
	assert_int_equal(files_domain_refresh(f->fd, f->c, &st, &d), -EINVAL);
	assert_non_null(strstr(d.msg, f->pw));
	assert_string_equal(shell_of(f, "alice", buf, sizeof(buf)), "/bin/bash");
	/* absent: empty */
	assert_int_equal(rmdir(f->pw), 0);
	refresh(f, &st);
	assert_int_equal(st.users.removed, 4);
	assert_null(shell_of(f, "alice", buf, sizeof(buf)));
	/* back again */
	write_file(f->pw, base_pw);
	refresh(f, &st);
	assert_int_equal(st.users.added, 4);
	assert_string_equal(shell_of(f, "alice", buf, sizeof(buf)), "/bin/bash");
}

/* ==== size ========================================================================= */

static void test_big_file(void **state)
{
	struct fixture *f = *state;
	size_t n = 100000;
	struct idc_buf b = IDC_BUF_INIT;
	/* a name given twice: the later user0 line is an extra record, which
	 * must not keep an append from the partial path */
	assert_int_equal(idc_buf_printf(&b, "user0:x:1:1:::\n"), 0);
	for (size_t i = 0; i < n; i++)
		assert_int_equal(
		    idc_buf_printf(&b, "user%zu:x:%zu:%zu:User %zu:/home/user%zu:/bin/sh\n", i,
				   10000 + i, 10000 + i, i, i),
		    0);
	write_file(f->pw, b.data);
	write_file(f->gr, base_gr);
	struct files_refresh_stats st;
	refresh(f, &st);
	assert_int_equal(st.users.added, n);
	assert_int_equal(st.duplicates, 1);
	assert_int_equal(idc_buf_printf(&b, "newbie:x:9:9:::\n"), 0);
	replace_file(f->pw, b.data);
	uint64_t t0 = idc_now_ns();
	refresh(f, &st);
	uint64_t t1 = idc_now_ns();
	assert_int_equal(st.users.added, 1);
	assert_int_equal(st.users.unchanged, n);
	assert_true(st.partial);
	assert_uid_owner(f, 10000, "user0");
	printf("100,000-line passwd, one user added: refresh %.1f ms (parse %.1f, diff %.1f, "
	       "apply %.1f)\n",
	       (double)(t1 - t0) / 1e6, (double)st.parse_ns / 1e6, (double)st.diff_ns / 1e6,
	       (double)st.apply_ns / 1e6);
	idc_buf_free(&b);
}

/* ==== differential: partial refresh against a full one ============================
 * Two domains over the same file contents, each with its own cache: one
 * refreshes as the daemon does (parsing only changed lines when it can),
 * the other always parses everything. After every random edit both must
 * report the same stats and hook calls, keep the same snapshot (lines and
 * offsets included) and hold the same cache content. */

#define DIFF_FILES 4 /* passwd 0, passwd 1, group 0, group 1 */
#define DIFF_LINES 160

struct side {
	char *dir, *path[DIFF_FILES];
	struct cache *c;
	struct files_domain *fd;
	struct idc_buf hook; /* what the hook heard, as text */
};

struct model {
	char *line[DIFF_FILES][DIFF_LINES]; /* without '\n' */
	size_t n[DIFF_FILES];
	bool absent[DIFF_FILES];
	bool no_final_nl[DIFF_FILES];
};

static void hook_text(const struct cache_change *ch, void *arg)
{
	struct idc_buf *b = arg;
	assert_int_equal(idc_buf_printf(b, "%c %s>%s %u>%u m%d [", ch->group ? 'g' : 'u',
					ch->old_name ? ch->old_name : "-",
					ch->new_name ? ch->new_name : "-", ch->old_id, ch->new_id,
					ch->moved),
			 0);
	for (size_t i = 0; i < ch->nold_mem; i++)
		assert_int_equal(idc_buf_printf(b, "%s,", ch->old_mem[i]), 0);
	assert_int_equal(idc_buf_printf(b, "] ["), 0);
	for (size_t i = 0; i < ch->nnew_mem; i++)
		assert_int_equal(idc_buf_printf(b, "%s,", ch->new_mem[i]), 0);
	assert_int_equal(idc_buf_printf(b, "]\n"), 0);
}

static void side_open(struct side *sd, bool partial)
{
	static const char *const names[DIFF_FILES] = {"passwd", "passwd2", "group", "group2"};
	sd->dir = tmpdir();
	for (int i = 0; i < DIFF_FILES; i++)
		sd->path[i] = path_in(sd->dir, names[i]);
	struct cache_options o = {.nosync = true};
	struct idc_diag d = {""};
	if (cache_open(sd->dir, &o, &sd->c, &d) != 0)
		fail_msg("cache_open: %s", d.msg);
	const char *pws[] = {sd->path[0], sd->path[1]}, *grs[] = {sd->path[2], sd->path[3]};
	struct files_domain_config cfg = {"files", pws, 2, grs, 2, 0};
	assert_int_equal(files_domain_new(&cfg, &sd->fd), 0);
	files_domain_set_partial(sd->fd, partial);
	files_domain_set_hook(sd->fd, hook_text, &sd->hook);
}

static void side_close(struct side *sd)
{
	files_domain_free(sd->fd);
	cache_close(sd->c);
	rmrf(sd->dir);
	free(sd->dir);
	for (int i = 0; i < DIFF_FILES; i++)
		free(sd->path[i]);
	idc_buf_free(&sd->hook);
}

static uint64_t next_rand(uint64_t *rng)
{
	*rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
	return *rng >> 33;
}

/* Name suffixes per name: few make most files repeat names (extra
 * records, which turn the partial path off), many make repeats rare. */
static unsigned diff_suffixes = 6;

/* A line that is often a repeat of a name (also in another case), and
 * sometimes malformed, a comment, blank, NIS or CRLF-terminated. */
static char *diff_line(uint64_t *rng, bool group)
{
	static const char *const names[] = {"alice", "bob", "Bob",  "carol", "dave", "eve",
					    "frank", "g h", "G  h", "ivan",  "judy", "mallory"};
	char buf[256];
	const char *nm = names[next_rand(rng) % IDC_ARRAY_SIZE(names)];
	unsigned v = (unsigned)(next_rand(rng) % 8);
	unsigned sfx = (unsigned)(next_rand(rng) % diff_suffixes);
	switch (next_rand(rng) % 16) {
	case 0:
		snprintf(buf, sizeof(buf), "# comment %u", v);
		break;
	case 1:
		buf[0] = '\0';
		break;
	case 2:
		snprintf(buf, sizeof(buf), "%s%u:x:notanumber:1:::", nm, sfx);
		break;
	case 3:
		snprintf(buf, sizeof(buf), "+%s%u", nm, sfx);
		break;
	case 4:
		snprintf(buf, sizeof(buf), "a/b%u:x:1:1:::", v); /* a name the cache refuses */
		break;
	default:
		if (group)
			snprintf(buf, sizeof(buf), "%s%u:x:%u:%s%u,bob,%s", nm, sfx, 100 + v,
				 names[v % IDC_ARRAY_SIZE(names)], v, v & 1 ? "eve" : "");
		else
			snprintf(buf, sizeof(buf), "%s%u:x:%u:%u:G %u:/home/%s:/bin/sh", nm, sfx,
				 1000 + v, 100 + v % 3, v, nm);
		if (next_rand(rng) % 8 == 0)
			strcat(buf, "\r");
		if (next_rand(rng) % 10 == 0) {
			memmove(buf + 2, buf, strlen(buf) + 1);
			buf[0] = ' ';
			buf[1] = '\t';
		}
	}
	char *l = strdup(buf);
	assert_non_null(l);
	return l;
}

static void model_insert(struct model *m, int f, size_t at, char *l)
{
	if (m->n[f] == DIFF_LINES) {
		free(l);
		return;
	}
	memmove(&m->line[f][at + 1], &m->line[f][at], (m->n[f] - at) * sizeof(char *));
	m->line[f][at] = l;
	m->n[f]++;
}

static void model_delete(struct model *m, int f, size_t at)
{
	free(m->line[f][at]);
	memmove(&m->line[f][at], &m->line[f][at + 1], (m->n[f] - at - 1) * sizeof(char *));
	m->n[f]--;
}

static void model_clear(struct model *m, int f)
{
	while (m->n[f])
		model_delete(m, f, m->n[f] - 1);
}

static void model_fill(struct model *m, int f, uint64_t *rng, size_t n)
{
	for (size_t i = 0; i < n; i++)
		model_insert(m, f, m->n[f], diff_line(rng, f >= 2));
}

/* One random edit of file f. */
static void model_edit(struct model *m, int f, uint64_t *rng)
{
	size_t n = m->n[f], at = n ? next_rand(rng) % n : 0;
	bool group = f >= 2;
	switch (next_rand(rng) % 13) {
	case 0: /* append, as useradd does */
	case 1:
		model_fill(m, f, rng, 1 + next_rand(rng) % 3);
		break;
	case 2: /* insert in the middle */
		model_insert(m, f, n ? next_rand(rng) % (n + 1) : 0, diff_line(rng, group));
		break;
	case 3: /* delete lines */
		for (size_t k = 1 + next_rand(rng) % 3; k && m->n[f]; k--)
			model_delete(m, f, next_rand(rng) % m->n[f]);
		break;
	case 4: /* change a line */
		if (n) {
			free(m->line[f][at]);
			m->line[f][at] = diff_line(rng, group);
		}
		break;
	case 5: { /* copy a line of another file of the kind (a name from elsewhere) */
		int g = group ? 2 + (int)(next_rand(rng) % 2) : (int)(next_rand(rng) % 2);
		if (m->n[g]) {
			char *l = strdup(m->line[g][next_rand(rng) % m->n[g]]);
			assert_non_null(l);
			model_insert(m, f, n ? next_rand(rng) % (n + 1) : 0, l);
		}
		break;
	}
	case 6: /* toggle CR at the end of a line */
		if (n) {
			char *l = m->line[f][at];
			size_t len = strlen(l);
			if (len && l[len - 1] == '\r') {
				l[len - 1] = '\0';
			} else {
				char *x = malloc(len + 2);
				assert_non_null(x);
				memcpy(x, l, len);
				memcpy(x + len, "\r", 2);
				free(l);
				m->line[f][at] = x;
			}
		}
		break;
	case 7: /* shrink */
		while (m->n[f] > at)
			model_delete(m, f, m->n[f] - 1);
		break;
	case 8: /* replaced by unrelated content */
		model_clear(m, f);
		model_fill(m, f, rng, next_rand(rng) % 40);
		break;
	case 9: /* removed, or back */
		m->absent[f] = !m->absent[f];
		break;
	case 10: /* the last line loses or gains its newline */
		m->no_final_nl[f] = !m->no_final_nl[f];
		break;
	case 11: /* one byte of a line changed */
		if (n && *m->line[f][at]) {
			char *l = m->line[f][at];
			l[next_rand(rng) % strlen(l)] = "x:0,9 #\tA"[next_rand(rng) % 9];
		}
		break;
	default: /* move a line */
		if (n > 1) {
			char *l = m->line[f][at];
			memmove(&m->line[f][at], &m->line[f][at + 1],
				(n - at - 1) * sizeof(char *));
			m->n[f]--;
			model_insert(m, f, next_rand(rng) % m->n[f], l);
		}
	}
}

static void model_write(const struct model *m, struct side *sd, int f)
{
	if (m->absent[f]) {
		if (unlink(sd->path[f]) != 0)
			assert_int_equal(errno, ENOENT);
		return;
	}
	struct idc_buf b = IDC_BUF_INIT;
	assert_int_equal(idc_buf_printf(&b, "%s", ""), 0); /* a NUL-terminated empty text */
	for (size_t i = 0; i < m->n[f]; i++) {
		bool nl = i + 1 < m->n[f] || !m->no_final_nl[f];
		assert_int_equal(idc_buf_printf(&b, "%s%s", m->line[f][i], nl ? "\n" : ""), 0);
	}
	replace_file(sd->path[f], b.data);
	idc_buf_free(&b);
}

static int dump_user(const struct cache_user *u, void *arg)
{
	return idc_buf_printf(arg, "U %s %u %u %s %s %s %llu\n", u->name, u->uid, u->gid, u->gecos,
			      u->dir, u->shell, (unsigned long long)u->order);
}

static int dump_group(const struct cache_group *g, void *arg)
{
	int rc = idc_buf_printf(arg, "G %s %u %llu", g->name, g->gid, (unsigned long long)g->order);
	for (size_t i = 0; rc == 0 && i < g->nmembers; i++)
		rc = idc_buf_printf(arg, " %s", g->members[i]);
	return rc ? rc : idc_buf_putc(arg, '\n');
}

/* Everything the side holds, as text: the kept snapshot and the cache. */
static void side_dump(struct side *sd, struct idc_buf *b)
{
	idc_buf_reset(b);
	const struct files_snapshot *s = files_domain_snapshot(sd->fd);
	assert_non_null(s);
	assert_int_equal(
	    idc_buf_printf(b, "malformed %zu duplicates %zu\n", s->malformed, s->duplicates), 0);
	for (size_t i = 0; i < s->nusers; i++) {
		const struct files_user *u = &s->users[i];
		assert_int_equal(idc_buf_printf(b, "u %s %u %u %s|%s|%s f%u l%u o%u %llu %llx\n",
						u->name, u->uid, u->gid, u->gecos, u->dir, u->shell,
						u->file, u->line, u->off,
						(unsigned long long)u->order,
						(unsigned long long)u->hash),
				 0);
		assert_int_equal(files_snapshot_user(s, u->name), (long)i);
	}
	for (size_t i = 0; i < s->ngroups; i++) {
		const struct files_group *g = &s->groups[i];
		assert_int_equal(idc_buf_printf(b, "g %s %u f%u l%u o%u %llu %llx", g->name, g->gid,
						g->file, g->line, g->off,
						(unsigned long long)g->order,
						(unsigned long long)g->hash),
				 0);
		const char *const *mem = files_snapshot_members(s, g->mem_first);
		for (size_t j = 0; j < g->nmembers; j++)
			assert_int_equal(idc_buf_printf(b, " %s", mem[j]), 0);
		assert_int_equal(idc_buf_putc(b, '\n'), 0);
		assert_int_equal(files_snapshot_group(s, g->name), (long)i);
	}
	struct cache_reader *r;
	assert_int_equal(cache_reader_begin(sd->c, &r), 0);
	int rc = cache_enum_users(r, "files", dump_user, b);
	assert_true(rc == 0 || rc == -ENOENT);
	rc = cache_enum_groups(r, "files", dump_group, b);
	assert_true(rc == 0 || rc == -ENOENT);
	cache_reader_end(r);
}

static void stats_text(const struct files_refresh_stats *st, char *buf, size_t cap)
{
	const struct files_kind_stats *u = &st->users, *g = &st->groups;
	snprintf(buf, cap, "u %zu+%zu~%zu-%zu=%zu g %zu+%zu~%zu-%zu=%zu bad %zu dup %zu s%d c%d",
		 u->total, u->added, u->changed, u->removed, u->unchanged, g->total, g->added,
		 g->changed, g->removed, g->unchanged, st->malformed, st->duplicates, st->skipped,
		 st->committed);
}

static void side_refresh(struct side *sd, struct files_refresh_stats *st)
{
	struct idc_diag d = {""};
	int rc = files_domain_refresh(sd->fd, sd->c, st, &d);
	if (rc)
		fail_msg("refresh: %s (%s)", idc_strerror(rc), d.msg);
}

static void run_differential(uint64_t seed, int rounds, size_t *npartial)
{
	struct side a = {0}, b = {0};
	side_open(&a, true);
	side_open(&b, false);
	struct model m = {0};
	uint64_t rng = seed;
	for (int f = 0; f < DIFF_FILES; f++) {
		model_fill(&m, f, &rng, f % 2 ? next_rand(&rng) % 10 : 20 + next_rand(&rng) % 40);
		m.absent[f] = f % 2 && next_rand(&rng) % 2;
	}
	struct idc_buf da = IDC_BUF_INIT, db = IDC_BUF_INIT;
	for (int round = 0; round < rounds; round++) {
		/* mostly one file, sometimes two or three at once */
		int nedit = next_rand(&rng) % 5 ? 1 : 2 + (int)(next_rand(&rng) % 2);
		for (int e = 0; round > 0 && e < nedit; e++) {
			int f = (int)(next_rand(&rng) % 10);
			f = f < 5 ? 0 : f < 7 ? 2 : f < 9 ? 1 : 3; /* the first files most */
			for (int k = 1 + (int)(next_rand(&rng) % 2); k; k--)
				model_edit(&m, f, &rng);
		}
		for (int f = 0; f < DIFF_FILES; f++) {
			model_write(&m, &a, f);
			model_write(&m, &b, f);
		}
		idc_buf_reset(&a.hook);
		idc_buf_reset(&b.hook);
		struct files_refresh_stats sa, sb;
		side_refresh(&a, &sa);
		side_refresh(&b, &sb);
		assert_false(sb.partial);
		*npartial += sa.partial;
		char ta[256], tb[256];
		stats_text(&sa, ta, sizeof(ta));
		stats_text(&sb, tb, sizeof(tb));
		if (strcmp(ta, tb) != 0)
			fail_msg("seed %llu round %d: stats differ:\n partial %s\n full    %s",
				 (unsigned long long)seed, round, ta, tb);
		if (strcmp(a.hook.data ? a.hook.data : "", b.hook.data ? b.hook.data : "") != 0)
			fail_msg(
			    "seed %llu round %d: hook reports differ:\n--- partial\n%s--- full\n%s",
			    (unsigned long long)seed, round, a.hook.data ? a.hook.data : "",
			    b.hook.data ? b.hook.data : "");
		side_dump(&a, &da);
		side_dump(&b, &db);
		if (strcmp(da.data, db.data) != 0)
			fail_msg(
			    "seed %llu round %d: content differs:\n--- partial\n%s--- full\n%s",
			    (unsigned long long)seed, round, da.data, db.data);
	}
	for (int f = 0; f < DIFF_FILES; f++)
		model_clear(&m, f);
	idc_buf_free(&da);
	idc_buf_free(&db);
	side_close(&a);
	side_close(&b);
}

static void test_partial_differential(void **state)
{
	(void)state;
	size_t partial = 0, rounds = 0;
	/* names repeated often: extra records in most rounds */
	for (uint64_t seed = 1; seed <= 8; seed++)
		run_differential(seed, 150, &partial);
	printf("partial refreshes, names often repeated: %zu of 1200\n", partial);
	diff_suffixes = 1000;
	partial = 0;
	for (uint64_t seed = 9; seed <= 16; seed++) {
		run_differential(seed, 150, &partial);
		rounds += 150;
	}
	diff_suffixes = 6;
	printf("partial refreshes, names rarely repeated: %zu of %zu\n", partial, rounds);
	/* most edits must take the partial path, or it is not being tested */
	assert_true(partial * 3 > rounds);
}

int main(void)
{
	idc_log_init("test_files", true, IDC_LOG_ERR);
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_pw_lines),
	    cmocka_unit_test(test_gr_lines),
	    cmocka_unit_test(test_random_lines),
	    cmocka_unit_test(test_long_line),
	    cmocka_unit_test(test_snapshot_rules),
	    cmocka_unit_test(test_snapshot_folds_as_the_cache),
	    cmocka_unit_test(test_snapshot_groups),
	    cmocka_unit_test(test_snapshot_files_in_order),
	    cmocka_unit_test(test_watch),
	    cmocka_unit_test(test_watch_write_elsewhere),
	    cmocka_unit_test(test_watch_missing_dir),
	    cmocka_unit_test_setup_teardown(test_apply_changes, fixture_setup, fixture_teardown),
	    cmocka_unit_test_setup_teardown(test_apply_insert_keeps_others, fixture_setup,
					    fixture_teardown),
	    cmocka_unit_test_setup_teardown(test_apply_restart, fixture_setup, fixture_teardown),
	    cmocka_unit_test_setup_teardown(test_apply_repeated_names, fixture_setup,
					    fixture_teardown),
	    cmocka_unit_test_setup_teardown(test_apply_huge_group, fixture_setup, fixture_teardown),
	    cmocka_unit_test_setup_teardown(test_apply_failure_keeps_old, fixture_setup,
					    fixture_teardown),
	    cmocka_unit_test_setup_teardown(test_big_file, fixture_setup, fixture_teardown),
	    cmocka_unit_test(test_partial_differential),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
