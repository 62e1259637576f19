/*
 * proto client: one Unix stream connection, blocking calls built on a
 * non-blocking socket and poll so every step honours one deadline. libc only,
 * no allocation, no SIGPIPE (MSG_NOSIGNAL): it runs inside arbitrary
 * processes through the NSS module.
 */
#include "proto/proto.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static uint64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void arm(struct proto_client *c)
{
	c->deadline_ns = mono_ns() + (uint64_t)c->timeout_ms * 1000000u;
}

/* Wait for events on the socket until the deadline. 0, -ETIMEDOUT, -errno. */
static int wait_fd(struct proto_client *c, short events)
{
	for (;;) {
		uint64_t now = mono_ns();
		if (now >= c->deadline_ns) {
			c->timed_out = true;
			return -ETIMEDOUT;
		}
		uint64_t left_ms = (c->deadline_ns - now + 999999u) / 1000000u;
		struct pollfd pfd = {.fd = c->fd, .events = events};
		int n = poll(&pfd, 1, left_ms > 60000 ? 60000 : (int)left_ms);
		if (n > 0)
			return 0; /* readiness or error: the next read/write tells which */
		if (n < 0 && errno != EINTR)
			return -errno;
	}
}

int proto_nss_socket_path(char *out, size_t cap)
{
	const char *dir = secure_getenv("IDCACHE_RUNDIR");
	if (dir == NULL || dir[0] == '\0')
		dir = PROTO_DEFAULT_RUN_DIR;
	int n = snprintf(out, cap, "%s/%s", dir, PROTO_NSS_SOCKET);
	return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : 0;
}

void proto_client_close(struct proto_client *c)
{
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	c->greeted = false;
	c->pending = 0;
}

/* Unix sockets never return EINPROGRESS for a local peer on Linux, but a full
 * listen backlog gives EAGAIN: retry briefly until the deadline instead of
 * failing a lookup because the daemon is momentarily busy. */
static int connect_retry(struct proto_client *c, const struct sockaddr_un *sa, socklen_t salen)
{
	for (;;) {
		if (connect(c->fd, (const struct sockaddr *)sa, salen) == 0)
			return 0;
		int e = errno;
		if (e == EINTR)
			continue;
		if (e == EINPROGRESS) {
			int rc = wait_fd(c, POLLOUT);
			if (rc < 0)
				return rc;
			int soerr = 0;
			socklen_t l = sizeof(soerr);
			if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &soerr, &l) < 0)
				return -errno;
			return soerr ? -soerr : 0;
		}
		if (e != EAGAIN)
			return -e;
		if (mono_ns() >= c->deadline_ns) {
			c->timed_out = true;
			return -ETIMEDOUT;
		}
		poll(NULL, 0, 1);
	}
}

int proto_client_connect(struct proto_client *c, const char *path, int timeout_ms)
{
	memset(c, 0, sizeof(*c));
	c->fd = -1;
	c->timeout_ms = timeout_ms > 0 ? timeout_ms : PROTO_CLIENT_TIMEOUT_MS;
	struct sockaddr_un sa;
	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	size_t plen = strlen(path);
	if (plen == 0 || plen >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	memcpy(sa.sun_path, path, plen + 1);
	c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (c->fd < 0) {
		int e = errno;
		c->fd = -1;
		return -e;
	}
	arm(c);
	int rc =
	    connect_retry(c, &sa, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + plen + 1));
	if (rc < 0)
		proto_client_close(c);
	return rc;
}

/* Send two pieces (the queued HELLO and the request) as one stream write
 * where possible; a partial write continues where it stopped. */
static int send_two(struct proto_client *c, const uint8_t *a, size_t an, const uint8_t *b,
		    size_t bn)
{
	struct iovec iov[2] = {{(void *)a, an}, {(void *)b, bn}};
	int i = an ? 0 : 1;
	while (i < 2) {
		struct msghdr mh = {.msg_iov = iov + i, .msg_iovlen = (size_t)(2 - i)};
		ssize_t w = sendmsg(c->fd, &mh, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			int rc = wait_fd(c, POLLOUT);
			if (rc < 0)
				return rc;
			continue;
		}
		if (w <= 0)
			return w < 0 ? -errno : -EIO;
		size_t done = (size_t)w;
		while (i < 2 && done >= iov[i].iov_len) {
			done -= iov[i].iov_len;
			i++;
		}
		if (i < 2) {
			iov[i].iov_base = (uint8_t *)iov[i].iov_base + done;
			iov[i].iov_len -= done;
		}
	}
	return 0;
}

/* Where descriptors that come with a reply go: fds[0..cap), *n so far. */
struct fdsink {
	int *fds;
	size_t cap, n;
};

/* Descriptors passed with one recvmsg: appended to sink while they fit and
 * came in one message with the first byte read, else every one closed.
 * -EBADMSG when something had to be closed or the control data was cut
 * short. */
static int take_fds(struct msghdr *mh, struct fdsink *sink, bool first)
{
	int rc = (mh->msg_flags & MSG_CTRUNC) ? -EBADMSG : 0;
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(mh); cm != NULL; cm = CMSG_NXTHDR(mh, cm)) {
		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		size_t n = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		bool keep = first && sink->n == 0 && n <= sink->cap && rc == 0;
		for (size_t i = 0; i < n; i++) {
			int got;
			memcpy(&got, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
			if (keep) {
				sink->fds[sink->n++] = got;
				continue;
			}
			close(got);
			rc = -EBADMSG;
		}
	}
	return rc;
}

/* Read exactly n bytes. With sink, descriptors that come with them are
 * received (see take_fds); without, the kernel discards any. */
static int recv_fds(struct proto_client *c, uint8_t *p, size_t n, struct fdsink *sink)
{
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(PROTO_FDS_MAX * sizeof(int))];
	} ctl;
	bool first = true;
	while (n > 0) {
		struct iovec iov = {p, n};
		struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
		if (sink != NULL) {
			mh.msg_control = ctl.buf;
			mh.msg_controllen = sizeof(ctl.buf);
		}
		ssize_t r = recvmsg(c->fd, &mh, sink != NULL ? MSG_CMSG_CLOEXEC : 0);
		if (r > 0) {
			int rc = sink != NULL ? take_fds(&mh, sink, first) : 0;
			if (rc < 0)
				return rc;
			first = false;
			p += r;
			n -= (size_t)r;
			continue;
		}
		if (r == 0)
			return -ECONNRESET; /* the peer closed mid-frame */
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN || errno == EWOULDBLOCK) {
			int rc = wait_fd(c, POLLIN);
			if (rc < 0)
				return rc;
			continue;
		}
		return -errno;
	}
	return 0;
}

static int recv_all(struct proto_client *c, uint8_t *p, size_t n)
{
	return recv_fds(c, p, n, NULL);
}

/* Read a reply header (and descriptors with it, if sink) and check it
 * answers cmd. */
static int recv_hdr(struct proto_client *c, uint32_t cmd, struct proto_hdr *h, struct fdsink *sink)
{
	uint8_t raw[PROTO_HDR_SIZE];
	int rc = recv_fds(c, raw, sizeof(raw), sink);
	if (rc < 0)
		return rc;
	if (proto_decode_hdr(raw, sizeof(raw), PROTO_MAX_REPLY, h) < 0)
		return -EBADMSG;
	if (h->command != cmd)
		return -EPROTO;
	c->pending = h->length - PROTO_HDR_SIZE;
	return 0;
}

/* The HELLO reply: OK with the server's version, or VERSION (refused). */
static int finish_hello(struct proto_client *c)
{
	struct proto_hdr h;
	int rc = recv_hdr(c, PROTO_CMD_HELLO, &h, NULL);
	if (rc < 0)
		return rc;
	uint8_t payload[64];
	if (c->pending > sizeof(payload))
		return -EBADMSG;
	size_t n = c->pending;
	rc = proto_client_read(c, payload, n);
	if (rc < 0)
		return rc;
	uint32_t ver;
	if (h.status != PROTO_ST_OK)
		return -EPROTO;
	if (proto_decode_u32(payload, n, &ver) < 0)
		return -EBADMSG;
	c->greeted = true;
	return 0;
}

static int request(struct proto_client *c, const void *frame, size_t len, struct proto_hdr *h,
		   struct fdsink *sink)
{
	if (c->fd < 0)
		return -ENOTCONN;
	if (c->pending) /* the previous reply was not consumed: framing is lost */
		return -EPROTO;
	if (len < PROTO_HDR_SIZE || len > PROTO_MAX_REQUEST)
		return -EINVAL;
	uint32_t cmd;
	memcpy(&cmd, (const uint8_t *)frame + 4, 4);
	arm(c);
	/* HELLO and the request in one write on a fresh connection: the
	 * handshake costs no extra round trip. */
	uint8_t hello[PROTO_HDR_SIZE + 4];
	size_t hn = 0;
	if (!c->greeted) {
		struct proto_req req = {.cmd = PROTO_CMD_HELLO, .version = PROTO_VERSION};
		int hl = proto_encode_request(hello, sizeof(hello), &req);
		if (hl < 0)
			return hl;
		hn = (size_t)hl;
	}
	int rc = send_two(c, hello, hn, frame, len);
	if (rc == 0 && !c->greeted)
		rc = finish_hello(c);
	if (rc == 0)
		rc = recv_hdr(c, cmd, h, sink);
	if (rc < 0)
		proto_client_close(c);
	return rc;
}

int proto_client_request(struct proto_client *c, const void *frame, size_t len, struct proto_hdr *h)
{
	return request(c, frame, len, h, NULL);
}

int proto_client_request_fds(struct proto_client *c, const void *frame, size_t len,
			     struct proto_hdr *h, int *fds, size_t cap, size_t *n)
{
	struct fdsink sink = {fds, cap < PROTO_FDS_MAX ? cap : PROTO_FDS_MAX, 0};
	int rc = request(c, frame, len, h, &sink);
	if (rc < 0)
		while (sink.n > 0)
			close(fds[--sink.n]);
	*n = sink.n;
	return rc;
}

int proto_client_read(struct proto_client *c, void *buf, size_t n)
{
	if (c->fd < 0)
		return -ENOTCONN;
	if (n > c->pending)
		return -EINVAL;
	int rc = recv_all(c, buf, n);
	if (rc < 0) {
		proto_client_close(c);
		return rc;
	}
	c->pending -= (uint32_t)n;
	return 0;
}

int proto_client_skip(struct proto_client *c)
{
	uint8_t sink[1024];
	while (c->pending) {
		size_t n = c->pending < sizeof(sink) ? c->pending : sizeof(sink);
		int rc = proto_client_read(c, sink, n);
		if (rc < 0)
			return rc;
	}
	return 0;
}

int proto_client_call(struct proto_client *c, const void *frame, size_t len, struct proto_hdr *h,
		      void *buf, size_t cap, size_t *n)
{
	int rc = proto_client_request(c, frame, len, h);
	if (rc < 0)
		return rc;
	*n = c->pending;
	if (*n > cap) {
		rc = proto_client_skip(c);
		return rc < 0 ? rc : -ERANGE;
	}
	return proto_client_read(c, buf, *n);
}
