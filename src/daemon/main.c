/*
 * idcached: command line, start-up and shutdown.
 *
 * Start-up order, and why:
 *   1. read the configuration (as the invoking user: root can read a
 *      root-only file);
 *   2. look up the run-time user in /etc/passwd itself (through NSS,
 *      "passwd: idcache" alone would ask our own module: us, not serving);
 *   3. create run_dir (0755) and state_dir (0700, its files 0600, existing
 *      ones made so), owned by that user, under umask 077;
 *   4. create nss.sock and admin.sock (owned by that user, so it can take
 *      admin requests of its own uid and remove the sockets at stop), and
 *      nscd_socket when configured;
 *   5. drop privileges (setgroups, setresgid, setresuid; failure fatal);
 *   6. open the cache as that user, so every file it creates is its own
 *      (cache.mdb is verified first, a damaged one moved aside: cache.h);
 *   7. start the providers and the loop. Requests are accepted at once and
 *      answered from the cache, which persists across restarts; each
 *      domain's first load runs in the loop's first round. "ready" is
 *      logged when every domain had its first load.
 * No fork: under systemd this is Type=simple; `-i` only changes where the
 * log goes.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "daemon/daemon.h"

#ifndef IDC_VERSION
#define IDC_VERSION "unknown"
#endif

struct options {
	const char *config;
	bool foreground;
	bool check;
};

/* ==== command line ============================================================== */

static void help(FILE *out)
{
	fputs("Usage: idcached [-c FILE] [-i]\n"
	      "       idcached --check-config [-c FILE]\n"
	      "       idcached --help | --version\n"
	      "\n"
	      "The idcache daemon: keeps users and groups from its providers (passwd and\n"
	      "group files) in a local cache and answers the libnss_idcache.so.2 NSS module\n"
	      "and the `idcache` admin commands over Unix sockets in run_dir.\n"
	      "\n"
	      "Options:\n"
	      "  -c, --config FILE   configuration file (default " CONFIG_DEFAULT_PATH ")\n"
	      "  -i, --interactive   stay in the foreground and log to stderr, not syslog\n"
	      "      --check-config  check the configuration (and that its user exists),\n"
	      "                      print \"config OK\" or every error as FILE:LINE:\n"
	      "                      message, and exit\n"
	      "  -h, --help          show this help and exit\n"
	      "  -V, --version       show the version and exit\n"
	      "\n"
	      "The daemon never forks (systemd: Type=simple). Started as root it drops to\n"
	      "the configured user (default idcache) after creating its sockets.\n"
	      "Signals: SIGTERM, SIGINT stop cleanly; SIGHUP re-reads the configuration;\n"
	      "SIGUSR2 makes offline LDAP domains probe their servers now.\n"
	      "\n"
	      "Exit status: 0 clean stop or config OK, 1 failure or config errors,\n"
	      "2 wrong command line. See idcached(8) and idcache.conf(5).\n",
	      out);
}

static int usage(void)
{
	fputs("usage: idcached [-c FILE] [-i] [--check-config]\n"
	      "Try 'idcached --help' for more information.\n",
	      stderr);
	return 2;
}

/* -1: go on; otherwise the exit status. */
static int parse_args(int argc, char **argv, struct options *o)
{
	static const struct option longopts[] = {
	    {"config", required_argument, NULL, 'c'}, {"interactive", no_argument, NULL, 'i'},
	    {"check-config", no_argument, NULL, 'C'}, {"help", no_argument, NULL, 'h'},
	    {"version", no_argument, NULL, 'V'},      {NULL, 0, NULL, 0},
	};
	int opt;
	while ((opt = getopt_long(argc, argv, "c:ihV", longopts, NULL)) != -1) {
		switch (opt) {
		case 'c':
			o->config = optarg;
			break;
		case 'i':
			o->foreground = true;
			break;
		case 'C':
			o->check = true;
			break;
		case 'h':
			help(stdout);
			return 0;
		case 'V':
			printf("idcached %s\n", IDC_VERSION);
			return 0;
		default:
			return usage();
		}
	}
	return optind < argc ? usage() : -1;
}

static int check_config(const char *path)
{
	struct config *cfg = NULL;
	struct idc_buf errors = IDC_BUF_INIT;
	int rc = config_load(path, &cfg, &errors);
	uid_t uid;
	gid_t gid;
	bool in_files;
	if (rc == 0 && privs_find_user(cfg->user, &uid, &gid, &in_files) < 0) {
		/* what the daemon would stop at, started as root */
		fprintf(stderr, "%s: user = %s: no such user (create it: useradd --system %s)\n",
			path, cfg->user, cfg->user);
		rc = -ENOENT;
	}
	if (rc == 0)
		printf("config OK\n");
	else
		fputs(errors.data ? errors.data : idc_strerror(rc), stderr);
	config_free(cfg);
	idc_buf_free(&errors);
	return rc == 0 ? 0 : 1;
}

/* ==== events ============================================================================= */

static void on_signal(struct loop_io *io, uint32_t events)
{
	(void)events;
	struct daemon *dm = loop_owner(io);
	struct signalfd_siginfo si;
	while (read(io->fd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
		if (si.ssi_signo == SIGHUP) {
			struct idc_buf errors = IDC_BUF_INIT;
			idc_log(IDC_LOG_INFO, "SIGHUP: reloading %s", dm->config_path);
			daemon_reload(dm, &errors);
			idc_buf_free(&errors);
		} else if (si.ssi_signo == SIGUSR2) {
			idc_log(IDC_LOG_INFO, "SIGUSR2: offline domains probe their servers now");
			daemon_retry_offline(dm);
		} else {
			idc_log(IDC_LOG_INFO, "signal %u: stopping", si.ssi_signo);
			dm->loop.stop = true;
		}
	}
}

static void on_sweep(struct loop_timer *t)
{
	conn_sweep(t->owner);
	peers_sweep(t->owner);
	daemon_host_check(t->owner);
}

/* Its own timer, every MC_BEAT_MS: a client takes a map whose beat stops
 * for MC_STALE_MS for a dead daemon's (mc/layout.h). */
static void on_beat(struct loop_timer *t)
{
	daemon_mc_beat(t->owner);
}

void daemon_check_ready(struct daemon *dm)
{
	if (dm->ready)
		return;
	for (size_t i = 0; i < dm->ndomains; i++)
		if (!dm->domains[i]->attempted)
			return;
	dm->ready = true;
	/* tests and scripts wait for this line: print it whatever the level */
	if (idc_log_level() < IDC_LOG_INFO && dm->foreground)
		fprintf(stderr, "idcached: info: ready: serving %zu domains on %s\n", dm->ndomains,
			dm->nss.path);
	idc_log(IDC_LOG_INFO, "ready: serving %zu domains on %s", dm->ndomains, dm->nss.path);
	idc_log_errors_to_stderr(false);
}

/* ==== start-up ============================================================================== */

static int block_signals(struct daemon *dm)
{
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP);
	sigaddset(&set, SIGUSR2);
	signal(SIGPIPE, SIG_IGN);
	if (sigprocmask(SIG_BLOCK, &set, NULL) < 0)
		return -errno;
	int fd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
	if (fd < 0)
		return -errno;
	int rc = loop_add(&dm->loop, &dm->sig, fd, EPOLLIN, on_signal, dm);
	if (rc < 0)
		close(fd);
	return rc;
}

static int make_sockets(struct daemon *dm, const struct privs *p)
{
	char path[sizeof(dm->nss.path)];
	snprintf(path, sizeof(path), "%s/nss.sock", dm->run_dir);
	int rc = listener_open(dm, &dm->nss, path, 0666, false);
	snprintf(path, sizeof(path), "%s/admin.sock", dm->run_dir);
	if (rc == 0)
		rc = listener_open(dm, &dm->admin, path, 0600, true);
	if (rc == 0)
		rc = privs_chown_path(p, dm->nss.path);
	if (rc == 0)
		rc = privs_chown_path(p, dm->admin.path);
	return rc ? rc : daemon_nscd_open(dm, p);
}

/* Everything that needs root, then the drop. */
static int setup_privileged(struct daemon *dm, const struct config *cfg)
{
	struct privs p;
	int rc = privs_prepare(dm->user, &p);
	if (rc == 0)
		rc = privs_make_dir(&p, dm->run_dir, false);
	if (rc == 0)
		rc = privs_make_dir(&p, dm->state_dir, true);
	if (rc == 0)
		rc = make_sockets(dm, &p);
	if (rc == 0)
		rc = userdb_open(dm, cfg); /* in a directory of root's */
	if (rc == 0)
		rc = privs_drop(&p);
	if (rc == 0 && p.drop)
		idc_log(IDC_LOG_INFO, "running as %s (uid %u)", dm->user, (unsigned)p.uid);
	privs_free(&p);
	dm->uid = geteuid();
	return rc;
}

/* The map size is read at start only: a reload keeps the open cache. */
static int open_cache(struct daemon *dm, const struct config *cfg)
{
	struct idc_diag d = {{0}};
	struct cache_options o = {.map_size = (size_t)cfg->cache_map_size << 20};
	int rc = cache_open(dm->state_dir, &o, &dm->cache, &d);
	if (rc < 0)
		idc_log(IDC_LOG_ERR, "cannot open the cache in %s: %s", dm->state_dir,
			d.msg[0] ? d.msg : idc_strerror(rc));
	return rc;
}

/* Where the kernel cannot refuse descriptors passed to us, received ones
 * are closed by a thread of their own (reaper.c). */
static int guard_passed_fds(struct daemon *dm)
{
	dm->kernel_refuses_fds = dm->nss.refuses_fds && dm->admin.refuses_fds &&
				 (dm->userdb.io.fd < 0 || dm->userdb.refuses_fds) &&
				 (!dm->nscd_path || dm->nscd.refuses_fds);
	if (dm->kernel_refuses_fds)
		return 0;
	idc_log(IDC_LOG_INFO, "the kernel cannot refuse descriptors passed to our sockets "
			      "(SO_PASSRIGHTS): closing any received off the event loop");
	return reaper_start(dm);
}

static int start(struct daemon *dm, struct config *cfg)
{
	/* Whatever the daemon creates is its own alone unless it says
	 * otherwise (run_dir 0755 and nss.sock 0666 are set explicitly). */
	umask(077);
	listener_fd_budget(cfg); /* before the reaper sizes its queue */
	int rc = loop_init(&dm->loop);
	rc = rc ? rc : block_signals(dm);
	rc = rc ? rc : setup_privileged(dm, cfg);
	rc = rc ? rc : guard_passed_fds(dm);
	rc = rc ? rc : open_cache(dm, cfg);
	dm->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	rc = rc ? rc : loop_timer_init(&dm->loop, &dm->sweep, on_sweep, dm);
	rc = rc ? rc : loop_timer_arm(&dm->sweep, DAEMON_SWEEP_MS, DAEMON_SWEEP_MS);
	rc = rc ? rc : loop_timer_init(&dm->loop, &dm->held_timer, responder_held_timer, dm);
	rc = rc ? rc : loop_timer_init(&dm->loop, &dm->snap_timer, responder_snap_timer, dm);
	rc = rc ? rc : loop_timer_init(&dm->loop, &dm->beat, on_beat, dm);
	rc = rc ? rc : loop_timer_arm(&dm->beat, MC_BEAT_MS, MC_BEAT_MS);
	rc = rc ? rc : listener_start(dm, &dm->nss);
	rc = rc ? rc : listener_start(dm, &dm->admin);
	rc = rc ? rc : userdb_start(dm);
	rc = rc ? rc : daemon_nscd_start(dm);
	rc = rc ? rc : daemon_apply_config(dm, cfg);
	return rc;
}

static void stop(struct daemon *dm)
{
	listener_close(&dm->nss);
	listener_close(&dm->admin);
	userdb_close(dm);
	daemon_nscd_stop(dm);
	while (dm->conns)
		conn_close(dm->conns, "stopping");
	responder_builds_stop(dm);
	daemon_nscd_fini(dm);
	/* A store in flight tells its changes to the maps, which look at
	 * every domain (precedence): all are finished while all are alive,
	 * and the list holds only live domains while they are freed. */
	for (size_t i = 0; i < dm->ndomains; i++)
		ldapdom_drain(dm->domains[i]->ldap);
	while (dm->ndomains)
		domain_free(dm->domains[--dm->ndomains]);
	free(dm->domains);
	free(dm->names);
	daemon_reader_end(dm);
	loop_io_close(&dm->sig);
	loop_timer_close(&dm->sweep);
	loop_timer_close(&dm->held_timer);
	loop_timer_close(&dm->snap_timer);
	loop_timer_close(&dm->beat);
	loop_fini(&dm->loop); /* frees the closed connections */
	budget_sweep(dm, true);
	peers_free(dm); /* closes its kept sockets through the reaper */
	reaper_stop(dm);
	enum_snaps_release(dm);
	responder_forget_replies(dm);
	daemon_mc_close(dm);
	daemon_host_free(dm);
	subid_free(dm);
	cache_close(dm->cache);
	config_free(dm->cfg);
	free(dm->gids);
	if (dm->spare_fd >= 0)
		close(dm->spare_fd);
}

static int run(const struct options *o, struct config *cfg)
{
	struct daemon dm = {.config_path = o->config, .foreground = o->foreground};
	dm.nss.io.fd = dm.admin.io.fd = dm.userdb.io.fd = dm.sig.fd = dm.sweep.io.fd =
	    dm.beat.io.fd = -1;
	dm.spare_fd = -1;
	dm.held_timer.io.fd = -1;
	dm.snap_timer.io.fd = -1;
	dm.loop.epfd = -1;
	dm.start_ns = idc_now_ns();
	dm.start_time = (int64_t)time(NULL);
	/* the fixed settings outlive the first config */
	dm.run_dir = strdup(cfg->run_dir);
	dm.state_dir = strdup(cfg->state_dir);
	dm.user = strdup(cfg->user);
	dm.nscd.io.fd = -1;
	dm.nscd_path = cfg->nscd_socket ? strdup(cfg->nscd_socket) : NULL;
	bool fixed = dm.run_dir && dm.state_dir && dm.user && (dm.nscd_path || !cfg->nscd_socket);
	int rc = fixed ? start(&dm, cfg) : -ENOMEM;
	if (rc == 0)
		rc = loop_run(&dm.loop);
	else if (!dm.cfg)
		config_free(cfg);
	stop(&dm);
	free(dm.run_dir);
	free(dm.state_dir);
	free(dm.user);
	if (rc < 0)
		idc_log(IDC_LOG_ERR, "stopped: %s", idc_strerror(rc));
	else
		idc_log(IDC_LOG_INFO, "stopped");
	return rc < 0 ? 1 : 0;
}

int main(int argc, char **argv)
{
	struct options o = {.config = CONFIG_DEFAULT_PATH};
	int rc = parse_args(argc, argv, &o);
	if (rc >= 0)
		return rc;
	if (o.check)
		return check_config(o.config);
	idc_log_init("idcached", o.foreground, IDC_LOG_INFO);
	idc_log_errors_to_stderr(!o.foreground); /* until ready */
	struct config *cfg = NULL;
	struct idc_buf errors = IDC_BUF_INIT;
	if (config_load(o.config, &cfg, &errors) < 0) {
		for (char *line = errors.data ? strtok(errors.data, "\n") : NULL; line;
		     line = strtok(NULL, "\n"))
			idc_log(IDC_LOG_ERR, "%s", line);
		idc_buf_free(&errors);
		return 1;
	}
	idc_buf_free(&errors);
	idc_log_init("idcached", o.foreground, config_effective_log_level(cfg));
	idc_log(IDC_LOG_INFO, "idcached %s starting with %s", IDC_VERSION, o.config);
	return run(&o, cfg);
}
