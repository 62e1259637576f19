/*
 * fleet_probe: looks through NSS at many idcached instances at once, one
 * child process per instance, for bench/fleet/fleet_bench.py.
 *
 *   fleet_probe [-i POLL_MS] -s SENTINEL RUN_DIR...
 *
 * Each child sets IDCACHE_RUNDIR to its run directory before its first
 * lookup (the NSS module reads it once per process, so one process can
 * only ever look at one instance) and then waits for commands. A command
 * is one line on stdin, given to every child at once:
 *
 *   member GROUP USER SECS     GROUP lists USER
 *   notmember GROUP USER SECS  GROUP is found and does not list USER
 *   nouser USER SECS           USER is not found
 *   renamed OLD NEW SECS       OLD is not found and NEW is
 *   user USER SECS             USER is found
 *   group GROUP SECS           GROUP is found
 *
 * Each child looks every POLL_MS (default 5) until the condition holds or
 * SECS pass, and answers "INDEX ok|timeout MONOTONIC_SECONDS" (the time it
 * saw the condition hold, CLOCK_MONOTONIC as Python's time.monotonic);
 * once every child answered, "done" follows. "Not found" counts only while
 * SENTINEL is found: a daemon that does not answer is not a deletion.
 * Run it in a mount namespace whose /etc/nsswitch.conf names idcache.
 */
#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { MAX_HOSTS = 4096, PROBE_LINE = 512 };

struct cmd {
	char kind[16];
	char a[128];
	char b[128];
	double secs;
};

static const char *sentinel;

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int user_found(const char *name)
{
	return getpwnam(name) != NULL;
}

/* 1 found and lists user, 0 found without it, -1 not found. */
static int group_lists(const char *group, const char *user)
{
	struct group *gr = getgrnam(group);
	if (gr == NULL)
		return -1;
	for (char **m = gr->gr_mem; m != NULL && *m != NULL; m++)
		if (strcmp(*m, user) == 0)
			return 1;
	return 0;
}

/* Not found, and the instance answering (the sentinel is found). */
static int absent_user(const char *name)
{
	return !user_found(name) && user_found(sentinel);
}

static int absent_group(const char *name)
{
	return getgrnam(name) == NULL && user_found(sentinel);
}

/* Whether c holds now; -1 for a command this program does not know. */
static int holds(const struct cmd *c)
{
	if (strcmp(c->kind, "member") == 0)
		return group_lists(c->a, c->b) == 1;
	if (strcmp(c->kind, "notmember") == 0)
		return group_lists(c->a, c->b) == 0;
	if (strcmp(c->kind, "nouser") == 0)
		return absent_user(c->a);
	if (strcmp(c->kind, "renamed") == 0)
		return absent_group(c->a) && getgrnam(c->b) != NULL;
	if (strcmp(c->kind, "user") == 0)
		return user_found(c->a);
	if (strcmp(c->kind, "group") == 0)
		return getgrnam(c->a) != NULL;
	return -1;
}

/* One command line into c: 0, or -EINVAL. */
static int parse_cmd(const char *line, struct cmd *c)
{
	memset(c, 0, sizeof(*c));
	int n = sscanf(line, "%15s %127s %127s %lf", c->kind, c->a, c->b, &c->secs);
	if (n == 3) { /* one name: the number came third */
		char *end;
		c->secs = strtod(c->b, &end);
		if (*end != '\0')
			return -EINVAL;
		c->b[0] = '\0';
	} else if (n != 4) {
		return -EINVAL;
	}
	return c->secs > 0 && c->secs <= 3600 ? 0 : -EINVAL;
}

/* A child: one instance, commands from in, answers to out. */
static void child_loop(int idx, const char *run_dir, int in, int out, long poll_ms)
{
	FILE *f = fdopen(in, "r");
	char line[PROBE_LINE];
	struct timespec nap = {poll_ms / 1000, (poll_ms % 1000) * 1000000L};
	setenv("IDCACHE_RUNDIR", run_dir, 1);
	while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
		struct cmd c;
		int ok = -1;
		double t = now_s();
		if (parse_cmd(line, &c) == 0) {
			double end = t + c.secs;
			while ((ok = holds(&c)) == 0 && (t = now_s()) < end)
				nanosleep(&nap, NULL);
			t = now_s();
		}
		char buf[96];
		int len = snprintf(buf, sizeof(buf), "%d %s %.6f\n", idx,
				   ok == 1   ? "ok"
				   : ok == 0 ? "timeout"
					     : "bad",
				   t);
		/* shorter than PIPE_BUF: answers of children never interleave */
		if (write(out, buf, (size_t)len) != len)
			_exit(1);
	}
	_exit(0);
}

struct fleet {
	int cmd_fd[MAX_HOSTS];
	pid_t pid[MAX_HOSTS];
	int n;
	FILE *answers;
};

/* Fork one child per run dir; answers come back on one shared pipe. */
static int spawn(struct fleet *fl, char **dirs, int n, long poll_ms)
{
	int ans[2];
	if (pipe(ans) < 0)
		return -errno;
	for (int i = 0; i < n; i++) {
		int p[2];
		if (pipe(p) < 0)
			return -errno;
		pid_t pid = fork();
		if (pid < 0)
			return -errno;
		if (pid == 0) {
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			for (int k = 0; k < i; k++)
				close(fl->cmd_fd[k]);
			close(p[1]);
			close(ans[0]);
			child_loop(i, dirs[i], p[0], ans[1], poll_ms);
		}
		close(p[0]);
		fl->cmd_fd[i] = p[1];
		fl->pid[i] = pid;
		fl->n = i + 1;
	}
	close(ans[1]);
	fl->answers = fdopen(ans[0], "r");
	return fl->answers != NULL ? 0 : -errno;
}

/* Give line to every child, print their n answers and "done". */
static int broadcast(struct fleet *fl, const char *line)
{
	size_t len = strlen(line);
	char buf[PROBE_LINE];
	for (int i = 0; i < fl->n; i++)
		if (write(fl->cmd_fd[i], line, len) != (ssize_t)len)
			return -EIO;
	for (int got = 0; got < fl->n; got++) {
		if (fgets(buf, sizeof(buf), fl->answers) == NULL)
			return -EIO;
		fputs(buf, stdout);
	}
	fputs("done\n", stdout);
	fflush(stdout);
	return 0;
}

static void stop(struct fleet *fl)
{
	for (int i = 0; i < fl->n; i++)
		close(fl->cmd_fd[i]);
	for (int i = 0; i < fl->n; i++)
		waitpid(fl->pid[i], NULL, 0);
}

int main(int argc, char **argv)
{
	long poll_ms = 5;
	int opt;
	while ((opt = getopt(argc, argv, "i:s:")) != -1) {
		if (opt == 'i')
			poll_ms = strtol(optarg, NULL, 10);
		else if (opt == 's')
			sentinel = optarg;
		else
			return 2;
	}
	int n = argc - optind;
	if (sentinel == NULL || n < 1 || n > MAX_HOSTS || poll_ms < 1 || poll_ms > 10000) {
		fprintf(stderr, "usage: fleet_probe [-i POLL_MS] -s SENTINEL RUN_DIR... (1..%d)\n",
			MAX_HOSTS);
		return 2;
	}
	static struct fleet fl;
	int rc = spawn(&fl, argv + optind, n, poll_ms);
	if (rc < 0) {
		fprintf(stderr, "fleet_probe: cannot start children: %s\n", strerror(-rc));
		stop(&fl);
		return 1;
	}
	printf("ready %d\n", n);
	fflush(stdout);
	char line[PROBE_LINE];
	while (rc == 0 && fgets(line, sizeof(line), stdin) != NULL)
		rc = broadcast(&fl, line);
	stop(&fl);
	return rc == 0 ? 0 : 1;
}
