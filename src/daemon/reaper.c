/*
 * reaper: closing descriptors that must not be closed on the loop thread.
 *
 * A descriptor a client passes us (SCM_RIGHTS) is the client's choice of
 * object, and its last close runs that object's release: a TCP socket with
 * SO_LINGER and unsent data behind a zero window blocks it for the linger
 * time, a FUSE file for as long as its server likes. Where the kernel lets
 * us refuse passed descriptors (SO_PASSRIGHTS, listen.c) none ever arrive.
 * Elsewhere the loop reads through reaper_recv, which never takes a message
 * carrying descriptors, and every client socket is closed here, where what
 * is still queued in it is received and closed first.
 *
 * Owns: one thread and a ring of descriptors waiting to be closed.
 * Threads: reaper_close is called by the loop thread only; the ring is
 * shared under a mutex. The thread touches nothing else of the daemon.
 *
 * The ring holds as many entries as the open-file limit allows descriptors:
 * every entry is an open descriptor of ours, so it cannot overflow.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "daemon/daemon.h"

#define REAPER_DRAIN_MAX 4096 /* recvmsg calls spent on one client socket */

struct reaper_item {
	int fd;
	bool drain; /* a client socket: take what is queued in it first */
};

struct reaper {
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct reaper_item *ring;
	size_t cap, head, n;
	bool stop;
};

/* The descriptors in the control messages of mh into fds (room for cap);
 * their number. SCM_PIDFD is taken too: we never ask for it, but a
 * descriptor must not stay open unseen. */
static size_t take_fds(struct msghdr *mh, int *fds, size_t cap)
{
	size_t n = 0;
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(mh); cm; cm = CMSG_NXTHDR(mh, cm)) {
		if (cm->cmsg_level != SOL_SOCKET ||
		    (cm->cmsg_type != SCM_RIGHTS && cm->cmsg_type != DAEMON_SCM_PIDFD) ||
		    cm->cmsg_len < CMSG_LEN(0))
			continue;
		size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < k && n < cap; i++)
			memcpy(&fds[n++], CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
	}
	return n;
}

/* recvmsg into buf with room for cap descriptors in fds (*nfds of them
 * came, close-on-exec); flags as recvmsg's. recvmsg's result; *ctrunc:
 * some did not fit. */
static ssize_t recv_fds(int fd, void *buf, size_t len, int flags, int *fds, size_t cap,
			size_t *nfds, bool *ctrunc)
{
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(DAEMON_PASSED_FDS_MAX * sizeof(int))];
	} ctl;
	struct iovec iov = {buf, len};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
	mh.msg_control = ctl.buf;
	mh.msg_controllen = CMSG_SPACE(cap * sizeof(int));
	ssize_t n = recvmsg(fd, &mh, flags | MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	*nfds = n >= 0 && mh.msg_controllen > 0 ? take_fds(&mh, fds, cap) : 0;
	*ctrunc = n >= 0 && (mh.msg_flags & MSG_CTRUNC);
	return n;
}

#define REAPER_NEST_MAX 5 /* the kernel passes sockets in sockets 4 deep at most */

static void drain(int fd, int depth);

/* Make a passed descriptor's close quick where it can be: a socket's close
 * waits for its linger time, so lingering is turned off (the kernel still
 * sends what it can); a Unix socket's close releases what is queued in it,
 * so that is drained first. */
static void disarm(int fd, int depth)
{
	struct stat st;
	struct linger off = {0, 0};
	int domain = 0;
	socklen_t len = sizeof(domain);
	if (fstat(fd, &st) < 0 || !S_ISSOCK(st.st_mode))
		return;
	(void)setsockopt(fd, SOL_SOCKET, SO_LINGER, &off, sizeof(off));
	if (depth < REAPER_NEST_MAX && getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) == 0 &&
	    domain == AF_UNIX)
		drain(fd, depth + 1);
}

static void close_passed(const int *fds, size_t n, int depth)
{
	for (size_t i = 0; i < n; i++) {
		disarm(fds[i], depth);
		close(fds[i]);
	}
}

/* Receive what a socket still holds and close the descriptors in it, so
 * that closing the socket releases none of them. Bounded: nothing more can
 * be sent to it once both directions are shut. */
static void drain(int fd, int depth)
{
	char data[4096];
	int fds[DAEMON_PASSED_FDS_MAX];
	(void)shutdown(fd, SHUT_RDWR);
	for (int i = 0; i < REAPER_DRAIN_MAX; i++) {
		size_t n = 0;
		bool ctrunc;
		ssize_t got =
		    recv_fds(fd, data, sizeof(data), 0, fds, DAEMON_PASSED_FDS_MAX, &n, &ctrunc);
		close_passed(fds, n, depth);
		if (got == 0 || (got < 0 && errno != EINTR))
			return;
	}
}

/* The loop's receive. A consuming read releases the descriptors that come
 * with the bytes in the reader's thread when they do not fit its control
 * buffer, or when there is none (plain recv). So the loop peeks first, with
 * room for one: a peek installs copies of the descriptors (the queued
 * message keeps its own references, so dropping the copies that did not fit
 * releases nothing), and only bytes shown to carry none are then consumed. */
ssize_t reaper_recv(struct daemon *dm, int fd, void *buf, size_t len, bool *passed)
{
	int got;
	size_t n = 0;
	bool ctrunc = false;
	*passed = false;
	if (dm->kernel_refuses_fds)
		return recv(fd, buf, len, MSG_DONTWAIT);
	ssize_t peeked = recv_fds(fd, buf, len, MSG_PEEK, &got, 1, &n, &ctrunc);
	if (n > 0)
		reaper_close(dm, got, false);
	if (n > 0 || ctrunc) {
		*passed = true; /* the message stays queued: the reaper drains it */
		return 0;
	}
	return peeked > 0 ? recv(fd, buf, (size_t)peeked, MSG_DONTWAIT) : peeked;
}

static void *reaper_main(void *arg)
{
	struct reaper *r = arg;
	pthread_mutex_lock(&r->mu);
	for (;;) {
		while (r->n == 0 && !r->stop)
			pthread_cond_wait(&r->cv, &r->mu);
		if (r->n == 0)
			break;
		struct reaper_item it = r->ring[r->head];
		r->head = (r->head + 1) % r->cap;
		r->n--;
		pthread_mutex_unlock(&r->mu);
		if (it.drain)
			drain(it.fd, 0);
		else
			disarm(it.fd, 0);
		close(it.fd);
		pthread_mutex_lock(&r->mu);
	}
	pthread_mutex_unlock(&r->mu);
	return NULL;
}

int reaper_start(struct daemon *dm)
{
	struct rlimit rl;
	struct reaper *r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->cap =
	    getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < 1u << 20 ? rl.rlim_cur : 1u << 20;
	r->ring = calloc(r->cap, sizeof(*r->ring));
	pthread_mutex_init(&r->mu, NULL);
	pthread_cond_init(&r->cv, NULL);
	int rc = r->ring ? -pthread_create(&r->thread, NULL, reaper_main, r) : -ENOMEM;
	if (rc < 0) {
		idc_log(IDC_LOG_ERR, "cannot start the closing thread: %s", idc_strerror(rc));
		free(r->ring);
		free(r);
		return rc;
	}
	dm->reaper = r;
	return 0;
}

void reaper_close(struct daemon *dm, int fd, bool drain_first)
{
	struct reaper *r = dm->reaper;
	if (fd < 0)
		return;
	if (!r) { /* not started: the kernel refuses passed descriptors to us */
		close(fd);
		return;
	}
	pthread_mutex_lock(&r->mu);
	if (r->n < r->cap) {
		r->ring[(r->head + r->n) % r->cap] = (struct reaper_item){fd, drain_first};
		r->n++;
		pthread_cond_signal(&r->cv);
	} else {
		/* cannot happen (see the top): leaking beats blocking the loop */
		idc_log(IDC_LOG_ERR, "closing thread backlog full: leaking descriptor %d", fd);
	}
	pthread_mutex_unlock(&r->mu);
}

/* At stop: let the thread finish what is queued, waiting a bounded time; a
 * close that still blocks is left to the process exit. */
void reaper_stop(struct daemon *dm)
{
	struct reaper *r = dm->reaper;
	if (!r)
		return;
	pthread_mutex_lock(&r->mu);
	r->stop = true;
	pthread_cond_signal(&r->cv);
	pthread_mutex_unlock(&r->mu);
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 2;
	if (pthread_timedjoin_np(r->thread, NULL, &until) != 0) {
		idc_log(IDC_LOG_WARN, "a passed descriptor is still closing at stop");
		pthread_detach(r->thread);
		dm->reaper = NULL;
		return; /* the thread still uses r */
	}
	pthread_mutex_destroy(&r->mu);
	pthread_cond_destroy(&r->cv);
	free(r->ring);
	free(r);
	dm->reaper = NULL;
}

void reaper_close_socket(struct daemon *dm, int fd)
{
	if (dm->kernel_refuses_fds)
		close(fd);
	else
		reaper_close(dm, fd, true);
}

void reaper_close_client(struct daemon *dm, struct loop_io *io)
{
	int fd = io->fd;
	if (fd < 0)
		return;
	loop_io_forget(io);
	reaper_close_socket(dm, fd);
}
