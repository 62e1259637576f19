/*
 * perf: the NSS tests — getpwnam_r, getpwuid_r and getgrouplist through
 * glibc, answered by each NSS engine (bench/engines/eng_nss.c) on the same
 * generated passwd and group.
 *
 * Per number of users: a private directory holds the generated files, an
 * nsswitch.conf per source and idcached's config, run and state
 * directories; idcached runs there (own session, so a Ctrl-C meant for the
 * harness does not stop it mid-measurement; stopped by its pid, and by
 * PR_SET_PDEATHSIG should the harness die).
 *
 * A measurement forks a process that enters a private mount namespace
 * (unshare(CLONE_NEWNS), "/" made private, then bind mounts over
 * /etc/nsswitch.conf and, for `files`, /etc/passwd and /etc/group: only
 * that process sees them) and execs this program as `idcache-perf
 * _nss-child` with a clean environment: LD_LIBRARY_PATH naming the built
 * module's directory (glibc dlopens NSS modules at first use, and the
 * loader reads LD_LIBRARY_PATH only at exec), IDCACHE_RUNDIR and
 * IDCACHE_MEMCACHE. That child checks one lookup, optionally looks up every
 * key once, then forks the worker processes, which run the phases on one
 * monotonic timeline and report their counts; it prints one line to its
 * stdout, a pipe the harness reads: "ok C0 C1 ..." (lookups completed in
 * each phase, all processes) or "error MESSAGE".
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "engines/engine.h"
#include "gen.h"
#include "scratch.h"
#include "perf.h"

#define START_SLACK_NS 100000000ull /* the coordinator forks; workers are ready at once */
#define MAX_PROCS      64
#define MAX_GROUPS     4096
#define READY_WAIT_S   600

/* The generator options of the NSS data: the run's users and seed, user 0
 * in PERF_NSS_BIG_GROUPS groups (the initgroups key). Both the harness
 * (writing the files) and the child (choosing keys) use this. */
static struct gen_opts nss_gen_opts(uint64_t users, uint64_t seed)
{
	return (struct gen_opts){.users = users,
				 .groups = users / 100 ? users / 100 : 1,
				 .seed = seed,
				 .big_user_groups = PERF_NSS_BIG_GROUPS};
}

/* ==== where things are ============================================================== */

#ifndef IDC_SBINDIR
#define IDC_SBINDIR "/usr/local/sbin"
#endif
#ifndef IDC_NSSDIR
#define IDC_NSSDIR "/usr/local/lib"
#endif

/* The first of two candidates (a build tree's, then the installed one)
 * that access() allows in mode, resolved into out. */
static bool pick(const char *built, const char *installed, const char *file, int mode, char *out)
{
	const char *dirs[] = {built, installed};
	char path[PATH_MAX + 64];
	for (size_t i = 0; i < IDC_ARRAY_SIZE(dirs); i++) {
		snprintf(path, sizeof(path), "%s/%s", dirs[i], file);
		if (access(path, mode) == 0 && realpath(dirs[i], out))
			return true;
	}
	return false;
}

/* idcached and the module's directory: beside this program in a build
 * tree (perf/idcache-perf, src/daemon/idcached, src/nss/), else where
 * `meson install` put them. */
static int find_artifacts(char *exe, char *idcached, char *moddir, char *why, size_t cap)
{
	char self[PATH_MAX], built[PATH_MAX + 32], dir[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n <= 0) {
		snprintf(why, cap, "/proc/self/exe: %s", strerror(errno));
		return -ENOENT;
	}
	self[n] = '\0';
	snprintf(exe, PATH_MAX, "%s", self);
	char *slash = strrchr(self, '/');
	if (slash)
		*slash = '\0';
	snprintf(built, sizeof(built), "%s/../src/daemon", self);
	if (!pick(built, IDC_SBINDIR, "idcached", X_OK, dir)) {
		snprintf(why, cap, "idcached is neither in %.200s nor in %s", built, IDC_SBINDIR);
		return -ENOENT;
	}
	snprintf(idcached, PATH_MAX, "%.*s/idcached", PATH_MAX - 16, dir);
	snprintf(built, sizeof(built), "%s/../src/nss", self);
	if (!pick(built, IDC_NSSDIR, "libnss_idcache.so.2", R_OK, moddir)) {
		snprintf(why, cap, "libnss_idcache.so.2 is neither in %.200s nor in %s", built,
			 IDC_NSSDIR);
		return -ENOENT;
	}
	return 0;
}

/* Whether this process may make a private mount namespace and bind-mount
 * over /etc/nsswitch.conf there (tried once in a child, remembered). */
static int ns_permitted(char *why, size_t cap)
{
	static int done, rc;
	static char msg[200];
	if (!done) {
		int p[2] = {-1, -1};
		done = 1;
		rc = pipe2(p, O_CLOEXEC) < 0 ? -errno : 0;
		pid_t pid = rc < 0 ? -1 : fork();
		if (pid < 0 && rc == 0)
			rc = -errno;
		if (pid == 0) {
			const char *step = "unshare(CLONE_NEWNS)";
			int ok = unshare(CLONE_NEWNS) == 0;
			if (ok) {
				step = "mount --make-rprivate /";
				ok = mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0;
			}
			if (ok) {
				step = "bind mount over /etc/nsswitch.conf";
				ok = mount("/etc/nsswitch.conf", "/etc/nsswitch.conf", NULL,
					   MS_BIND, NULL) == 0;
			}
			if (!ok)
				dprintf(p[1], "%s: %s", step, strerror(errno));
			_exit(ok ? 0 : 1);
		}
		if (pid > 0) {
			close(p[1]);
			ssize_t n = read(p[0], msg, sizeof(msg) - 1);
			msg[n > 0 ? n : 0] = '\0';
			close(p[0]);
			int st = 0;
			while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
				;
			rc = WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -EPERM;
		} else {
			snprintf(msg, sizeof(msg), "%s: %s", p[0] < 0 ? "pipe" : "fork",
				 strerror(-rc));
			if (p[0] >= 0)
				close(p[0]), close(p[1]);
		}
	}
	if (rc < 0)
		snprintf(why, cap, "no private mount namespace here (%s; needs root)", msg);
	return rc;
}

const char *perf_nss_unavailable(char *buf, size_t cap)
{
	char exe[PATH_MAX], idcached[PATH_MAX], moddir[PATH_MAX];
	if (find_artifacts(exe, idcached, moddir, buf, cap) < 0 || ns_permitted(buf, cap) < 0)
		return buf;
	return NULL;
}

int perf_nss_available(const struct nss_eng_ops *e, char *why, size_t cap)
{
	char exe[PATH_MAX], idcached[PATH_MAX], moddir[PATH_MAX];
	int rc = e->available(why, cap);
	if (rc == 0 && e->daemon)
		rc = find_artifacts(exe, idcached, moddir, why, cap);
	return rc < 0 ? rc : ns_permitted(why, cap);
}

/* ==== the data ======================================================================= */

static const struct store_val *pair_val(const struct gen_rec *r, const char *name, size_t *i)
{
	for (; *i < r->npairs; ++*i) {
		const struct store_pair *p = &r->pairs[*i];
		if (p->name.len == strlen(name) && memcmp(p->name.ptr, name, p->name.len) == 0)
			return &p->value;
	}
	return NULL;
}

static void put_field(FILE *f, const struct gen_rec *r, const char *name, char sep)
{
	size_t i = 0;
	const struct store_val *v = pair_val(r, name, &i);
	if (v)
		fwrite(v->ptr, 1, v->len, f);
	if (sep)
		fputc(sep, f);
}

/* passwd: name:x:uid:gid:gecos:home:shell; group: name:x:gid:member,... */
static int write_files(struct perf_nss *n, struct idc_diag *d)
{
	struct gen_opts go = nss_gen_opts(n->users, n->seed);
	struct gen *g = NULL;
	struct gen_rec rec = GEN_REC_INIT;
	char path[PATH_MAX + 16];
	int rc = gen_new(&go, &g, d);
	snprintf(path, sizeof(path), "%s/passwd", n->dir);
	FILE *f = rc < 0 ? NULL : fopen(path, "w");
	if (rc == 0 && !f)
		rc = idc_diag_set(d, -errno, "%s: %s", path, strerror(errno));
	for (uint64_t i = 0; rc == 0 && i < gen_users(g); i++) {
		rc = gen_user(g, i, &rec);
		if (rc < 0)
			break;
		put_field(f, &rec, "uid", ':');
		fputs("x:", f);
		put_field(f, &rec, "uidNumber", ':');
		put_field(f, &rec, "gidNumber", ':');
		put_field(f, &rec, "gecos", ':');
		put_field(f, &rec, "homeDirectory", ':');
		put_field(f, &rec, "loginShell", '\n');
	}
	if (f && fclose(f) != 0 && rc == 0)
		rc = idc_diag_set(d, -EIO, "%s: %s", path, strerror(errno));
	snprintf(path, sizeof(path), "%s/group", n->dir);
	f = rc < 0 ? NULL : fopen(path, "w");
	if (rc == 0 && !f)
		rc = idc_diag_set(d, -errno, "%s: %s", path, strerror(errno));
	for (uint64_t k = 0; rc == 0 && k < gen_groups(g); k++) {
		rc = gen_group(g, k, &rec);
		if (rc < 0)
			break;
		put_field(f, &rec, "cn", ':');
		fputs("x:", f);
		put_field(f, &rec, "gidNumber", ':');
		size_t i = 0;
		bool first = true;
		for (const struct store_val *v; (v = pair_val(&rec, "memberUid", &i)); i++) {
			if (!first)
				fputc(',', f);
			fwrite(v->ptr, 1, v->len, f);
			first = false;
		}
		fputc('\n', f);
	}
	if (f && fclose(f) != 0 && rc == 0)
		rc = idc_diag_set(d, -EIO, "%s: %s", path, strerror(errno));
	gen_rec_free(&rec);
	gen_free(g);
	return rc;
}

static int write_text(const char *path, const char *text, struct idc_diag *d)
{
	FILE *f = fopen(path, "w");
	if (!f)
		return idc_diag_set(d, -errno, "%s: %s", path, strerror(errno));
	fputs(text, f);
	return fclose(f) == 0 ? 0 : idc_diag_set(d, -EIO, "%s: %s", path, strerror(errno));
}

/* The passwd map sized so that every user fits (about 1 KiB each; the
 * default 8 MiB holds some 30,000), at least the default. */
static unsigned passwd_map_mib(uint64_t users)
{
	uint64_t mib = (users * 1024 + (1u << 20) - 1) >> 20;
	return mib < 8 ? 8 : mib > 4096 ? 4096 : (unsigned)mib;
}

int perf_nss_open(struct perf_nss *n, const char *work, uint64_t users, uint64_t seed,
		  struct idc_diag *d)
{
	char why[300];
	*n = (struct perf_nss){.users = users, .seed = seed};
	if (find_artifacts(n->exe, n->idcached, n->moddir, why, sizeof(why)) < 0)
		return idc_diag_set(d, -ENOENT, "%s", why);
	/* run_dir must fit a socket path (and the module's 128-byte mc path) */
	if (strlen(work) < 60)
		snprintf(n->dir, sizeof(n->dir), "%s/nss-XXXXXX", work);
	else
		snprintf(n->dir, sizeof(n->dir), "/tmp/idcache-perf-nss.XXXXXX");
	if (!mkdtemp(n->dir)) {
		int rc = -errno;
		n->dir[0] = '\0';
		return idc_diag_set(d, rc, "mkdtemp: %s", strerror(-rc));
	}
	char path[PATH_MAX + 32], text[5 * PATH_MAX + 512];
	static const char *const sub[] = {"run", "state"};
	for (size_t i = 0; i < IDC_ARRAY_SIZE(sub); i++) {
		snprintf(path, sizeof(path), "%s/%s", n->dir, sub[i]);
		if (mkdir(path, 0755) < 0)
			return idc_diag_set(d, -errno, "%s: %s", path, strerror(errno));
	}
	static const char *const sources[] = {"idcache", "files", "sss"};
	int rc = 0;
	for (size_t i = 0; rc == 0 && i < IDC_ARRAY_SIZE(sources); i++) {
		snprintf(path, sizeof(path), "%s/nsswitch.%s", n->dir, sources[i]);
		snprintf(text, sizeof(text),
			 "# idcache perf: only the source measured\npasswd: %s\ngroup: %s\n"
			 "shadow: files\nhosts: files\n",
			 sources[i], sources[i]);
		rc = write_text(path, text, d);
	}
	snprintf(path, sizeof(path), "%s/idcache.conf", n->dir);
	snprintf(text, sizeof(text),
		 "# idcache perf: idcached over the generated files\n[idcache]\n"
		 "run_dir = %s/run\nstate_dir = %s/state\nuser = root\n"
		 "memcache_size_passwd = %u\nnscd_socket = %s/nscd/socket\n\n"
		 "[domain/perf]\nid_provider = files\npasswd_files = %s/passwd\n"
		 "group_files = %s/group\n",
		 n->dir, n->dir, passwd_map_mib(users), n->dir, n->dir, n->dir);
	rc = rc < 0 ? rc : write_text(path, text, d);
	return rc < 0 ? rc : write_files(n, d);
}

/* ==== the daemon ======================================================================= */

/* Whether the log holds a line saying "ready" (as a word). */
static bool log_ready(const char *log, char *last, size_t cap)
{
	FILE *f = fopen(log, "r");
	char line[512];
	bool ready = false;
	last[0] = '\0';
	while (f && fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\n")] = '\0';
		if (line[0])
			snprintf(last, cap, "%.250s", line);
		const char *p = strstr(line, "ready");
		ready |= p && (p == line || p[-1] == ' ');
	}
	if (f)
		fclose(f);
	return ready;
}

int perf_nss_start_daemon(struct perf_nss *n, struct idc_diag *d)
{
	char conf[PATH_MAX + 16], log[PATH_MAX + 16], last[300];
	snprintf(conf, sizeof(conf), "%s/idcache.conf", n->dir);
	snprintf(log, sizeof(log), "%s/idcached.log", n->dir);
	pid_t parent = getpid();
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0)
		return idc_diag_set(d, -errno, "fork: %s", strerror(errno));
	if (pid == 0) {
		setsid(); /* not in the terminal's process group: Ctrl-C is the harness's */
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		if (getppid() != parent)
			_exit(1);
		int in = open("/dev/null", O_RDONLY | O_CLOEXEC);
		int out = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
		if (in < 0 || out < 0)
			_exit(127);
		dup2(in, 0);
		dup2(out, 1);
		dup2(out, 2);
		execl(n->idcached, n->idcached, "-c", conf, "-i", (char *)NULL);
		_exit(127);
	}
	n->daemon = pid;
	uint64_t t0 = idc_now_ns();
	for (;;) {
		if (log_ready(log, last, sizeof(last))) {
			n->ready_seconds = (double)(idc_now_ns() - t0) / 1e9;
			return 0;
		}
		int st;
		if (waitpid(pid, &st, WNOHANG) == pid) {
			n->daemon = 0;
			return idc_diag_set(
			    d, -EIO, "idcached exited with status %d before ready: %s",
			    WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st), last);
		}
		if (perf_stop || idc_now_ns() - t0 > READY_WAIT_S * 1000000000ull) {
			perf_nss_stop_daemon(n);
			return idc_diag_set(d, perf_stop ? -EINTR : -ETIMEDOUT,
					    perf_stop ? "interrupted"
						      : "idcached not ready after %d s: %s",
					    READY_WAIT_S, last);
		}
		nanosleep(&(struct timespec){0, 20000000}, NULL);
	}
}

void perf_nss_stop_daemon(struct perf_nss *n)
{
	if (n->daemon <= 0)
		return;
	kill(n->daemon, SIGTERM);
	for (int i = 0; i < 200; i++) { /* up to 10 s for a clean stop */
		if (waitpid(n->daemon, &n->daemon_status, WNOHANG) == n->daemon) {
			n->daemon = 0;
			return;
		}
		nanosleep(&(struct timespec){0, 50000000}, NULL);
	}
	kill(n->daemon, SIGKILL);
	waitpid(n->daemon, &n->daemon_status, 0);
	n->daemon = 0;
}

void perf_nss_close(struct perf_nss *n)
{
	perf_nss_stop_daemon(n);
	if (n->dir[0])
		scratch_rm_tree(n->dir);
	n->dir[0] = '\0';
}

/* ==== one measurement (harness side) ==================================================== */

/* In the forked child: a private mount namespace with e's files over /etc.
 * NULL, or what failed. */
static const char *ns_enter(const struct perf_nss *n, const struct nss_eng_ops *e, char *buf,
			    size_t cap)
{
	char path[PATH_MAX + 32];
	if (unshare(CLONE_NEWNS) < 0)
		return snprintf(buf, cap, "unshare(CLONE_NEWNS): %s", strerror(errno)), buf;
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		return snprintf(buf, cap, "mount --make-rprivate /: %s", strerror(errno)), buf;
	snprintf(path, sizeof(path), "%s/nsswitch.%s", n->dir, e->source);
	if (mount(path, "/etc/nsswitch.conf", NULL, MS_BIND, NULL) < 0)
		return snprintf(buf, cap, "bind %.200s: %s", path, strerror(errno)), buf;
	snprintf(path, sizeof(path), "%s/nscd", n->dir);
	if (e->nscd && mount(path, "/run/nscd", NULL, MS_BIND, NULL) < 0)
		return snprintf(buf, cap, "bind %.200s: %s", path, strerror(errno)), buf;
	static const char *const files[] = {"passwd", "group"};
	for (size_t i = 0; e->bind_files && i < IDC_ARRAY_SIZE(files); i++) {
		char target[32];
		snprintf(path, sizeof(path), "%s/%s", n->dir, files[i]);
		snprintf(target, sizeof(target), "/etc/%s", files[i]);
		if (mount(path, target, NULL, MS_BIND, NULL) < 0)
			return snprintf(buf, cap, "bind %.200s: %s", path, strerror(errno)), buf;
	}
	return NULL;
}

static void exec_child(const struct perf_nss *n, const struct nss_eng_ops *e, const char *test,
		       unsigned procs, unsigned phases, double seconds)
{
	char users[24], seed[24], np[16], nph[16], secs[32], ld[PATH_MAX + 32],
	    rundir[PATH_MAX + 32], why[400];
	const char *err = ns_enter(n, e, why, sizeof(why));
	if (err) {
		dprintf(1, "error %s\n", err);
		_exit(0);
	}
	snprintf(users, sizeof(users), "%llu", (unsigned long long)n->users);
	snprintf(seed, sizeof(seed), "%llu", (unsigned long long)n->seed);
	snprintf(np, sizeof(np), "%u", procs);
	snprintf(nph, sizeof(nph), "%u", phases);
	snprintf(secs, sizeof(secs), "%.6f", seconds);
	snprintf(ld, sizeof(ld), "LD_LIBRARY_PATH=%s", n->moddir);
	snprintf(rundir, sizeof(rundir), "IDCACHE_RUNDIR=%s/run", n->dir);
	char *argv[] = {"idcache-perf", "_nss-child",           (char *)test, users, seed, np, nph,
			secs,           e->prefill ? "1" : "0", NULL};
	char *envp[] = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin",
			"LC_ALL=C",
			ld,
			rundir,
			e->memcache ? "IDCACHE_MEMCACHE=yes" : "IDCACHE_MEMCACHE=no",
			NULL};
	execve(n->exe, argv, envp);
	dprintf(1, "error exec %s: %s\n", n->exe, strerror(errno));
	_exit(0);
}

int perf_nss_measure(struct perf_nss *n, const struct nss_eng_ops *e, const char *test,
		     unsigned procs, unsigned phases, double seconds, double *rates,
		     struct idc_diag *d)
{
	if (procs == 0 || procs > MAX_PROCS || phases == 0 || phases > PERF_MAX_SAMPLES + 1)
		return idc_diag_set(d, -EINVAL, "processes 1..%d, phases 1..%d", MAX_PROCS,
				    PERF_MAX_SAMPLES + 1);
	char log[PATH_MAX + 16], out[8192];
	int p[2];
	snprintf(log, sizeof(log), "%s/child.log", n->dir);
	if (pipe2(p, O_CLOEXEC) < 0)
		return idc_diag_set(d, -errno, "pipe: %s", strerror(errno));
	fflush(NULL);
	pid_t pid = fork();
	if (pid == 0) {
		int lg = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
		dup2(p[1], 1);
		if (lg >= 0)
			dup2(lg, 2);
		exec_child(n, e, test, procs, phases, seconds);
	}
	close(p[1]);
	if (pid < 0) {
		close(p[0]);
		return idc_diag_set(d, -errno, "fork: %s", strerror(errno));
	}
	size_t got = 0;
	for (;;) {
		ssize_t k = read(p[0], out + got, sizeof(out) - 1 - got);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			break;
		got += (size_t)k;
	}
	out[got] = '\0';
	close(p[0]);
	int st = 0;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	out[strcspn(out, "\n")] = '\0';
	if (strncmp(out, "error ", 6) == 0)
		return idc_diag_set(d, -EIO, "%.300s", out + 6);
	if (strncmp(out, "ok", 2) != 0)
		return idc_diag_set(d, -EIO,
				    "measuring process ended (status %d) without a result; see %s",
				    WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st), log);
	char *s = out + 2;
	for (unsigned i = 0; i < phases; i++) {
		char *end;
		unsigned long long c = strtoull(s, &end, 10);
		if (end == s)
			return idc_diag_set(d, -EIO, "short result from the measuring process");
		rates[i] = (double)c / seconds;
		s = end;
	}
	return 0;
}

/* ==== the measuring child (`idcache-perf _nss-child`) ===================================== */

enum nss_op { OP_PWNAM, OP_PWUID, OP_INITGROUPS };

struct child {
	const struct gen *g;
	enum nss_op op;
	char big_name[64]; /* user 0: in PERF_NSS_BIG_GROUPS groups */
	gid_t big_gid;
	int want_groups; /* getgrouplist's count for big_name */
	char err[256];
};

/* One lookup of user i (initgroups: always user 0), checked. */
static int lookup(struct child *c, uint64_t i)
{
	char name[64], buf[2048];
	struct passwd pw, *res = NULL;
	int rc;
	switch (c->op) {
	case OP_PWNAM:
		gen_user_name(c->g, i, name, sizeof(name));
		rc = getpwnam_r(name, &pw, buf, sizeof(buf), &res);
		if (rc != 0 || !res || res->pw_uid != GEN_UID_BASE + i)
			goto fail_pw;
		return 0;
	case OP_PWUID:
		gen_user_name(c->g, i, name, sizeof(name));
		rc = getpwuid_r((uid_t)(GEN_UID_BASE + i), &pw, buf, sizeof(buf), &res);
		if (rc != 0 || !res || strcmp(res->pw_name, name) != 0)
			goto fail_pw;
		return 0;
	case OP_INITGROUPS: {
		gid_t groups[MAX_GROUPS];
		int ng = MAX_GROUPS;
		if (getgrouplist(c->big_name, c->big_gid, groups, &ng) < 0 ||
		    (c->want_groups && ng != c->want_groups)) {
			snprintf(c->err, sizeof(c->err),
				 "getgrouplist(%s) gave %d groups, expected %d", c->big_name, ng,
				 c->want_groups);
			return -EPROTO;
		}
		c->want_groups = ng;
		return 0;
	}
	}
	return -EINVAL;
fail_pw:
	snprintf(c->err, sizeof(c->err), "%s(%s): %s",
		 c->op == OP_PWNAM ? "getpwnam_r" : "getpwuid_r", name,
		 rc    ? strerror(rc)
		 : res ? "answered another user"
		       : "not found (is the source's module loaded and serving?)");
	return -EPROTO;
}

static uint64_t rng_next(uint64_t *s)
{
	*s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
	return *s >> 17;
}

struct report {
	int rc;
	char msg[256];
	uint64_t counts[PERF_MAX_SAMPLES + 1];
};

static void worker(struct child *c, unsigned idx, uint64_t seed, uint64_t t0, unsigned phases,
		   uint64_t phase_ns, struct report *r)
{
	uint64_t rng = seed * 1000003u + idx, users = gen_users(c->g);
	while (idc_now_ns() < t0)
		nanosleep(&(struct timespec){0, 1000000}, NULL);
	uint64_t end = t0 + phases * phase_ns;
	while (r->rc == 0 && !perf_stop) {
		uint64_t now = idc_now_ns();
		if (now >= end)
			break;
		r->rc = lookup(c, rng_next(&rng) % users);
		now = idc_now_ns();
		unsigned q = (unsigned)((now - t0) / phase_ns);
		if (r->rc == 0 && q < phases)
			r->counts[q]++;
	}
	if (r->rc < 0)
		snprintf(r->msg, sizeof(r->msg), "%s", c->err);
}

static void on_sigint(int sig)
{
	(void)sig;
	perf_stop = 1;
}

static int child_fail(const char *fmt, const char *arg)
{
	printf("error ");
	printf(fmt, arg);
	printf("\n");
	return 0;
}

int perf_nss_child_main(int argc, char **argv)
{
	if (argc != 8)
		return child_fail(
		    "usage: _nss-child TEST USERS SEED PROCS PHASES SECONDS PREFILL%s", "");
	struct child c = {.op = strcmp(argv[1], "getpwnam") == 0   ? OP_PWNAM
				: strcmp(argv[1], "getpwuid") == 0 ? OP_PWUID
								   : OP_INITGROUPS};
	uint64_t users = strtoull(argv[2], NULL, 10), seed = strtoull(argv[3], NULL, 10);
	unsigned procs = (unsigned)strtoul(argv[4], NULL, 10);
	unsigned phases = (unsigned)strtoul(argv[5], NULL, 10);
	double seconds = strtod(argv[6], NULL);
	bool prefill = strcmp(argv[7], "1") == 0;
	if (procs == 0 || procs > MAX_PROCS || phases == 0 || phases > PERF_MAX_SAMPLES + 1 ||
	    !(seconds > 0))
		return child_fail("bad arguments%s", "");
	struct sigaction sa = {.sa_handler = on_sigint};
	sigaction(SIGINT, &sa, NULL);
	struct gen_opts go = nss_gen_opts(users, seed);
	struct gen *g = NULL;
	struct gen_rec rec = GEN_REC_INIT;
	struct idc_diag d = {{0}};
	if (gen_new(&go, &g, &d) < 0 || gen_user(g, 0, &rec) < 0)
		return child_fail("generator: %s", d.msg);
	c.g = g;
	gen_user_name(g, 0, c.big_name, sizeof(c.big_name));
	size_t i = 0;
	const struct store_val *gid = pair_val(&rec, "gidNumber", &i);
	c.big_gid = gid ? (gid_t)strtoul(gid->ptr, NULL, 10) : 0;
	gen_rec_free(&rec);
	/* one checked lookup first: a source that does not answer fails here */
	if (lookup(&c, users - 1) < 0)
		return child_fail("%s", c.err);
	if (c.op == OP_INITGROUPS && c.want_groups < (int)PERF_NSS_BIG_GROUPS)
		return child_fail("%s is in fewer groups than generated", c.big_name);
	for (uint64_t k = 0; prefill && c.op != OP_INITGROUPS && k < users && !perf_stop; k++)
		if (lookup(&c, k) < 0)
			return child_fail("%s", c.err);
	pid_t pids[MAX_PROCS];
	int fds[MAX_PROCS];
	char first_err[256] = "";
	uint64_t phase_ns = (uint64_t)(seconds * 1e9), t0 = idc_now_ns() + START_SLACK_NS;
	unsigned started = 0;
	fflush(NULL);
	for (; started < procs; started++) {
		int p[2];
		if (pipe(p) < 0)
			break;
		pid_t pid = fork();
		if (pid == 0) {
			close(p[0]);
			struct report r = {0};
			worker(&c, started, seed, t0, phases, phase_ns, &r);
			ssize_t n = write(p[1], &r, sizeof(r));
			_exit(n == (ssize_t)sizeof(r) ? 0 : 1);
		}
		close(p[1]);
		if (pid < 0) {
			close(p[0]);
			break;
		}
		pids[started] = pid;
		fds[started] = p[0];
	}
	uint64_t sum[PERF_MAX_SAMPLES + 1] = {0};
	const char *err = started < procs ? "fork failed" : NULL;
	for (unsigned k = 0; k < started; k++) {
		struct report r;
		size_t got = 0;
		while (got < sizeof(r)) {
			ssize_t n = read(fds[k], (char *)&r + got, sizeof(r) - got);
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0)
				break;
			got += (size_t)n;
		}
		close(fds[k]);
		while (waitpid(pids[k], NULL, 0) < 0 && errno == EINTR)
			;
		if (got != sizeof(r)) {
			err = err ? err : "a worker process died without a report";
			continue;
		}
		if (r.rc < 0 && !err) {
			snprintf(first_err, sizeof(first_err), "%.*s", (int)sizeof(r.msg) - 1,
				 r.msg);
			err = first_err;
		}
		for (unsigned p = 0; p < phases; p++)
			sum[p] += r.counts[p];
	}
	gen_free(g);
	if (err)
		return child_fail("%s", err);
	printf("ok");
	for (unsigned p = 0; p < phases; p++)
		printf(" %llu", (unsigned long long)sum[p]);
	printf("\n");
	return 0;
}
