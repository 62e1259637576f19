/*
 * listen: the daemon's Unix stream sockets (nss.sock 0666, admin.sock
 * 0600, the userdb and nscd sockets 0666 when configured) and accepting
 * connections on them, with the connection limits. The userdb and nscd
 * sockets' connections count as nss.sock's: one budget per uid whichever
 * it uses.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "daemon/daemon.h"

#ifndef SO_PASSRIGHTS
#define SO_PASSRIGHTS 83 /* Linux 6.16; older headers lack it */
#endif

/* Whether something answers on path: then another daemon owns it. */
static bool socket_alive(const struct sockaddr_un *sa)
{
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return false;
	bool alive = connect(fd, (const struct sockaddr *)sa, sizeof(*sa)) == 0;
	close(fd);
	return alive;
}

/* Remove a stale socket left by a daemon that died; refuse to remove
 * anything else, or a socket someone still listens on. */
static int clear_path(const struct sockaddr_un *sa, bool nscd)
{
	struct stat st;
	if (lstat(sa->sun_path, &st) < 0)
		return errno == ENOENT ? 0 : -errno;
	if (!S_ISSOCK(st.st_mode)) {
		idc_log(IDC_LOG_ERR, "%s exists and is not a socket; not replacing it",
			sa->sun_path);
		return -EEXIST;
	}
	if (socket_alive(sa) && nscd) {
		idc_log(IDC_LOG_ERR,
			"nscd_socket: another process (nscd, nsncd, unscd?) serves %s: stop it, "
			"or remove nscd_socket from idcache.conf",
			sa->sun_path);
		return -EADDRINUSE;
	}
	if (socket_alive(sa)) {
		idc_log(IDC_LOG_ERR, "another idcached is already serving %s", sa->sun_path);
		return -EADDRINUSE;
	}
	return unlink(sa->sun_path) < 0 ? -errno : 0;
}

static int bind_socket(int fd, const struct sockaddr_un *sa, mode_t mode)
{
	/* bind under a umask that leaves no window with wider permissions,
	 * then set the exact mode */
	mode_t old = umask(0177);
	int rc = bind(fd, (const struct sockaddr *)sa, sizeof(*sa)) < 0 ? -errno : 0;
	umask(old);
	if (rc == 0 && chmod(sa->sun_path, mode) < 0)
		rc = -errno;
	if (rc == 0 && listen(fd, SOMAXCONN) < 0)
		rc = -errno;
	return rc;
}

/* Have the kernel refuse descriptors passed to connections of fd (their
 * sender's sendmsg fails with EPERM; accepted sockets inherit it): a
 * passed descriptor's close can block whoever releases it (reaper.c).
 * false where the kernel cannot (before 6.16), or when
 * IDCACHED_KEEP_PASSRIGHTS is set, which tests the path those kernels take. */
static bool refuse_passed_fds(int fd)
{
	int off = 0;
	const char *keep = getenv("IDCACHED_KEEP_PASSRIGHTS");
	if (keep && *keep)
		return false;
	if (setsockopt(fd, SOL_SOCKET, SO_PASSRIGHTS, &off, sizeof(off)) == 0)
		return true;
	if (errno != ENOPROTOOPT && errno != EINVAL)
		idc_log(IDC_LOG_WARN, "SO_PASSRIGHTS: %s", strerror(errno));
	return false;
}

static int open_socket(struct daemon *dm, struct listener *l, const char *path, mode_t mode,
		       bool admin, bool nscd)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	memset(l, 0, sizeof(*l));
	l->io.fd = -1;
	l->dm = dm;
	l->admin = admin;
	l->nscd = nscd;
	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	snprintf(l->path, sizeof(l->path), "%s", path);
	int rc = clear_path(&sa, nscd);
	if (rc < 0)
		return rc;
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	l->refuses_fds = refuse_passed_fds(fd);
	rc = bind_socket(fd, &sa, mode);
	if (rc < 0) {
		idc_log(IDC_LOG_ERR, "%s: %s", path, idc_strerror(rc));
		close(fd);
		return rc;
	}
	l->io.fd = fd;
	return 0;
}

int listener_open(struct daemon *dm, struct listener *l, const char *path, mode_t mode, bool admin)
{
	return open_socket(dm, l, path, mode, admin, false);
}

int listener_open_nscd(struct daemon *dm, struct listener *l, const char *path)
{
	return open_socket(dm, l, path, 0666, false, true);
}

/* Count a refused connection, logging at most every 10 s. */
static void note_refusal(struct daemon *dm, const char *why)
{
	dm->refused++;
	uint64_t now = idc_now_ns();
	if (now - dm->refused_logged_ns > 10ull * 1000000000ull) {
		idc_log(IDC_LOG_WARN, "%s (%zu connections open): refusing new ones (%llu so far)",
			why, dm->nconns, (unsigned long long)dm->refused);
		dm->refused_logged_ns = now;
	}
}

/* Out of descriptors: give up the spare one to accept and close the
 * waiting client, so it fails fast instead of hanging in the backlog. */
static void shed(struct daemon *dm, int lfd)
{
	if (dm->spare_fd < 0)
		return;
	close(dm->spare_fd);
	int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	if (fd >= 0) {
		reaper_close_socket(dm, fd);
		note_refusal(dm, "out of file descriptors");
	}
	dm->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
}

/* ==== limits ==================================================================== */

/* The oldest connection of this socket (and of peer p, unless NULL) silent
 * for DAEMON_SHED_IDLE_MS with nothing under way; NULL if none. A scan,
 * but only when a limit is reached. */
static struct conn *oldest_idle(struct daemon *dm, bool admin, const struct peer *p)
{
	uint64_t now = idc_now_ns(), quiet = (uint64_t)DAEMON_SHED_IDLE_MS * 1000000u;
	struct conn *best = NULL;
	for (struct conn *c = dm->conns; c; c = c->next) {
		if (c->admin != admin || (p && c->peer != p) || c->io.fd < 0 ||
		    now - c->last_active_ns < quiet || !conn_idle(c))
			continue;
		if (!best || c->last_active_ns < best->last_active_ns)
			best = c;
	}
	return best;
}

/* Close the oldest idle connection to make room; whether there was one. */
static bool shed_idle(struct daemon *dm, bool admin, const struct peer *p)
{
	struct conn *c = oldest_idle(dm, admin, p);
	if (!c)
		return false;
	dm->shed_idle++;
	conn_close(c, "idle, and its slot is wanted");
	return true;
}

enum verdict { ADMIT, FULL, UID_LIMIT };

/* Whether a new connection of uid fits, after closing idle ones for it:
 * admin.sock has a budget of its own; on nss.sock a uid other than root
 * holds at most max_connections_per_uid, and the last root_reserved
 * connections of max_connections are root's. */
static enum verdict admit(struct daemon *dm, bool admin, uid_t uid)
{
	const struct config_limits *lim = &dm->cfg->limits;
	if (admin) {
		while (dm->nadmin >= lim->admin_max_connections)
			if (!shed_idle(dm, true, NULL))
				return FULL;
		return ADMIT;
	}
	struct peer *p = peer_find(dm, uid);
	if (uid != 0 && p && p->conns >= lim->max_connections_per_uid && !shed_idle(dm, false, p))
		return UID_LIMIT;
	size_t cap = lim->max_connections - (uid == 0 ? 0 : lim->root_reserved);
	while (dm->nconns - dm->nadmin >= cap)
		if (!shed_idle(dm, false, NULL))
			return FULL;
	return ADMIT;
}

static void refuse(struct daemon *dm, int fd, enum verdict v, const struct ucred *cred)
{
	reaper_close_socket(dm, fd);
	if (v == UID_LIMIT) {
		dm->refused_uid++;
		struct peer *p = peer_find(dm, cred->uid);
		dm->refused++;
		if (p && peer_warn_due(p))
			idc_log(IDC_LOG_WARN,
				"uid %d holds %u connections (max_connections_per_uid): refusing "
				"more (pid %d)",
				(int)cred->uid, p->conns, (int)cred->pid);
		return;
	}
	dm->refused_full++;
	note_refusal(dm, "connection limit reached");
}

/* The peer as the kernel saw it at connect time; uid and gid -1 when
 * unknown (they then share one account). */
static struct ucred peer_cred(int fd)
{
	struct ucred cred = {.pid = 0, .uid = (uid_t)-1, .gid = (gid_t)-1};
	socklen_t len = sizeof(cred);
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
		cred = (struct ucred){.pid = 0, .uid = (uid_t)-1, .gid = (gid_t)-1};
	return cred;
}

static void on_accept(struct loop_io *io, uint32_t events)
{
	(void)events;
	struct listener *l = loop_owner(io);
	struct daemon *dm = l->dm;
	/* a bounded number per wake-up, so one busy socket cannot starve the
	 * other events */
	for (int i = 0; i < 32; i++) {
		int fd = accept4(io->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EMFILE || errno == ENFILE)
				shed(dm, io->fd);
			else if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
				idc_log(IDC_LOG_WARN, "accept on %s: %s", l->path, strerror(errno));
			return;
		}
		struct ucred cred = peer_cred(fd);
		enum verdict v = admit(dm, l->admin, cred.uid);
		if (v != ADMIT)
			refuse(dm, fd, v, &cred);
		else if (l->userdb)
			userdb_conn_new(dm, fd, &cred);
		else
			conn_new_kind(dm, fd, l->admin, l->nscd, &cred);
	}
}

void listener_fd_budget(const struct config *cfg)
{
	struct rlimit rl;
	/* Per connection its socket and, in flight to a client that has not
	 * read its MCMAP reply, up to three maps' descriptors, which the kernel
	 * counts against this limit too; 256 for everything else. */
	rlim_t want =
	    (rlim_t)(cfg->limits.max_connections + cfg->limits.admin_max_connections) * 4 + 256;
	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur >= want)
		return;
	rl.rlim_cur = rl.rlim_max < want ? rl.rlim_max : want;
	if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
		idc_log(IDC_LOG_WARN, "cannot raise the open-file limit: %s", strerror(errno));
}

int listener_start(struct daemon *dm, struct listener *l)
{
	int fd = l->io.fd;
	int rc = loop_add(&dm->loop, &l->io, fd, EPOLLIN, on_accept, l);
	if (rc < 0)
		idc_log(IDC_LOG_ERR, "%s: cannot watch: %s", l->path, idc_strerror(rc));
	return rc;
}

void listener_close(struct listener *l)
{
	if (l->io.fd < 0)
		return;
	loop_io_close(&l->io);
	if (l->path[0])
		unlink(l->path);
}
