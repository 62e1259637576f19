/*
 * conn: one client connection — non-blocking reads into the incremental
 * frame reader, the HELLO handshake, dispatch of requests in order, a reply
 * queue with back-pressure, and the idle timeout.
 *
 * Back-pressure: a client that does not read its replies must not cost
 * anyone else. Once its unsent output passes DAEMON_OUT_HIGH we stop
 * taking its requests (they wait in the frame reader) and stop reading its
 * socket; we resume when the output drains. A backlog past DAEMON_OUT_MAX
 * (possible only through one huge reply) or no progress for DAEMON_IDLE_MS
 * closes the connection. Each peer uid is charged what its connections'
 * queues hold (budget.c); over its budget they take no requests until
 * the queues drain. An enumeration reply's records go out straight from
 * the shared snapshot (conn_queue_tail): a client that never reads holds
 * a reference, not a copy.
 *
 * A connection of the userdb socket (c->udb) is the same connection with
 * other framing: its bytes go to the Varlink reader and userdb.c takes its
 * calls under the same conditions (conn_may_take).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "daemon/daemon.h"

#define READ_CHUNK 16384

/* ==== life cycle =============================================================== */

static void charge_out(struct conn *c)
{
	budget_charge_out(c->dm, c->uid, c->out_charged, c->out.cap);
	c->out_charged = c->out.cap;
}

void conn_drop_tail(struct conn *c)
{
	enum_snap_put(c->tail);
	c->tail = NULL;
	c->tail_off = c->tail_end = 0;
}

static void conn_free(void *p)
{
	struct conn *c = p;
	proto_reader_free(&c->rd);
	userdb_conn_free(c);
	idc_buf_free(&c->out);
	charge_out(c);
	conn_drop_tail(c);
	enum_cursor_free(c->dm, &c->pw);
	enum_cursor_free(c->dm, &c->gr);
	daemon_nscd_conn_free(c);
	budget_put(c->dm, c->uid);
	free(c);
}

static void on_event(struct loop_io *io, uint32_t events);

/* Counted against its uid (nss.sock) or admin.sock's budget. Admin
 * requests are allowed from root and the daemon's own user, as the kernel
 * saw them at connect time. */
static int set_peer(struct conn *c, const struct ucred *cred)
{
	c->peer_uid = cred->uid;
	c->peer_pid = cred->pid;
	c->peer_ok = c->peer_uid == 0 || c->peer_uid == c->dm->uid;
	if (c->admin) {
		c->dm->nadmin++;
		return 0;
	}
	if (!(c->peer = peer_get(c->dm, cred->uid)))
		return -ENOMEM;
	c->peer->conns++;
	return 0;
}

static void unset_peer(struct conn *c)
{
	if (c->admin) {
		c->dm->nadmin--;
		return;
	}
	if (!c->peer) /* kept by peer_linger, which took it over */
		return;
	c->peer->conns--;
	peer_put(c->dm, c->peer);
	c->peer = NULL;
}

struct conn *conn_create(struct daemon *dm, int fd, bool admin, const struct ucred *cred)
{
	return conn_new_kind(dm, fd, admin, false, cred);
}

struct conn *conn_new_kind(struct daemon *dm, int fd, bool admin, bool nscd,
			   const struct ucred *cred)
{
	struct conn *c = calloc(1, sizeof(*c));
	if (c && nscd && daemon_nscd_conn_init(c) < 0) {
		free(c);
		c = NULL;
	}
	if (!c) {
		reaper_close_socket(dm, fd);
		return NULL;
	}
	c->dm = dm;
	c->admin = admin;
	c->last_active_ns = idc_now_ns();
	proto_reader_init(&c->rd, PROTO_MAX_REQUEST);
	int rc = set_peer(c, cred);
	if (rc == 0 && (rc = loop_add(&dm->loop, &c->io, fd, EPOLLIN, on_event, c)) < 0) {
		idc_log(IDC_LOG_WARN, "cannot watch a new connection: %s", idc_strerror(rc));
		unset_peer(c);
	}
	if (rc < 0) {
		reaper_close_socket(dm, fd);
		daemon_nscd_conn_free(c);
		free(c);
		return NULL;
	}
	c->uid = budget_get(dm, c->peer_uid);
	c->next = dm->conns;
	if (dm->conns)
		dm->conns->prev = c;
	dm->conns = c;
	dm->nconns++;
	return c;
}

int conn_new(struct daemon *dm, int fd, bool admin, const struct ucred *cred)
{
	return conn_create(dm, fd, admin, cred) ? 0 : -ENOMEM;
}

/* Bytes received and not taken as requests yet. */
static size_t buffered(const struct conn *c)
{
	return c->udb ? userdb_buffered(c) : proto_reader_buffered(&c->rd);
}

struct idc_buf *conn_reply_buf(struct conn *c)
{
	return c->udb ? userdb_reply_buf(c) : &c->out;
}

static const char *socket_name(const struct conn *c)
{
	return c->admin ? "admin" : c->udb ? "userdb" : c->nscd ? "nscd" : "nss";
}

void conn_close(struct conn *c, const char *why)
{
	if (c->io.fd < 0)
		return;
	idc_log(IDC_LOG_DEBUG, "closing %s connection: %s", socket_name(c), why);
	responder_detach(c);
	daemon_nscd_detach(c);
	if (c->mem_wait)
		c->dm->budget_waiting--;
	c->mem_wait = false;
	if (!peer_linger(c))
		reaper_close_client(c->dm, &c->io);
	if (c->prev)
		c->prev->next = c->next;
	else
		c->dm->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	c->dm->nconns--;
	unset_peer(c);
	if (loop_defer(&c->dm->loop, conn_free, c) < 0)
		return; /* leaked rather than freed under a pending event */
}

void conn_sweep(struct daemon *dm)
{
	uint64_t now = idc_now_ns();
	for (struct conn *c = dm->conns, *next; c; c = next) {
		next = c->next;
		if (now - c->last_active_ns > (uint64_t)DAEMON_IDLE_MS * 1000000u)
			conn_close(c, "idle");
	}
	budget_sweep(dm, false);
}

bool conn_idle(const struct conn *c)
{
	return !c->wait && !c->pass_maps && c->out.len == c->out_off && buffered(c) == 0 &&
	       !daemon_nscd_busy(c);
}

/* ==== output ====================================================================== */

/* Bytes queued and not sent, the tail included. */
static size_t out_pending(const struct conn *c)
{
	return c->out.len - c->out_off + (c->tail_end - c->tail_off);
}

void conn_queue_tail(struct conn *c, struct enum_snap *s, size_t off, size_t end)
{
	if (c->udb) { /* read back by userdb.c at once: a copy of one batch */
		if (idc_buf_append(userdb_reply_buf(c), s->recs.data + off, end - off) < 0)
			c->closing = true;
		return;
	}
	s->refs++;
	c->tail = s;
	c->tail_off = off;
	c->tail_end = end;
}

void conn_pass_maps(struct conn *c, uint32_t mask, size_t at)
{
	c->pass_maps = mask;
	c->pass_at = at;
}

/* Send out[out_off, end), the first byte with the waiting maps'
 * descriptors when out_off is where they go. The kernel gives the peer its
 * own references; ours stay the writers'. Bytes sent, or -1 with errno. */
static ssize_t send_part(struct conn *c, size_t end)
{
	struct iovec iov = {c->out.data + c->out_off, end - c->out_off};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(4 * sizeof(int))];
	} ctl;
	int fds[4]; /* the three maps, or an nscd GETFD reply's */
	int n =
	    c->pass_maps && c->out_off == c->pass_at ? daemon_mc_fds(c->dm, c->pass_maps, fds) : 0;
	int nscd_fd = daemon_nscd_fd_at(c, c->out_off); /* a GETFD reply's map */
	if (nscd_fd >= 0)
		fds[n++] = nscd_fd;
	/* A map withdrawn since the reply was built leaves the list short:
	 * the client sees the count differ from the reply and asks later. */
	if (n > 0) {
		size_t len = (size_t)n * sizeof(int);
		memset(&ctl, 0, sizeof(ctl));
		mh.msg_control = ctl.buf;
		mh.msg_controllen = CMSG_SPACE(len);
		struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(len);
		memcpy(CMSG_DATA(cm), fds, len);
	}
	ssize_t sent = sendmsg(c->io.fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
	if (sent > 0 && c->out_off == c->pass_at)
		c->pass_maps = 0;
	if (sent > 0 && nscd_fd >= 0)
		daemon_nscd_fd_sent(c);
	if (sent > 0 && n > (nscd_fd >= 0))
		peer_maps_sent(c);
	if (sent < 0 && n > 0 && errno == ETOOMANYREFS)
		peer_maps_failed(c);
	return sent;
}

/* One send of what goes next: out (a reply's waiting descriptors go with
 * its first byte, so the bytes before it are sent on their own and it
 * cannot ride on an earlier reply), then the tail. Bytes sent, or -1. */
static ssize_t send_next(struct conn *c)
{
	ssize_t n;
	if (c->out.len > c->out_off) {
		bool before = c->pass_maps && c->out_off < c->pass_at;
		n = send_part(c, before ? c->pass_at : c->out.len);
		c->out_off += n > 0 ? (size_t)n : 0;
		return n;
	}
	n = send(c->io.fd, c->tail->recs.data + c->tail_off, c->tail_end - c->tail_off,
		 MSG_NOSIGNAL | MSG_DONTWAIT);
	c->tail_off += n > 0 ? (size_t)n : 0;
	return n;
}

/* Forget what was sent: out starts over at the front (a huge buffer is
 * given back, so one large reply does not stay charged), a sent tail's
 * reference goes. */
static void sent(struct conn *c)
{
	if (c->out_off == c->out.len) {
		idc_buf_reset(&c->out);
		c->out_off = 0;
		if (c->out.cap > DAEMON_OUT_KEEP)
			idc_buf_free(&c->out);
		charge_out(c);
	}
	if (c->tail && c->tail_off == c->tail_end)
		conn_drop_tail(c);
}

/* Send what the socket takes. 0 (perhaps with output left) or -errno. */
static int flush(struct conn *c)
{
	int rc = 0;
	while (rc == 0 && out_pending(c) > 0) {
		ssize_t n = send_next(c);
		if (n >= 0)
			c->last_active_ns = idc_now_ns();
		else if (errno == EAGAIN)
			break;
		else if (errno != EINTR)
			rc = -errno;
	}
	sent(c);
	return rc;
}

/* ==== requests ====================================================================== */

static int reply_version(struct idc_buf *out, uint32_t status)
{
	size_t start;
	int rc = proto_reply_begin(out, PROTO_CMD_HELLO, status, &start);
	rc = rc ? rc : proto_put_u32(out, PROTO_VERSION);
	return rc ? rc : proto_reply_end(out, start);
}

static int hello(struct conn *c, const struct proto_req *req)
{
	if (req->version == PROTO_VERSION) {
		c->greeted = true;
		return reply_version(&c->out, PROTO_ST_OK);
	}
	idc_log(IDC_LOG_INFO, "client speaks protocol version %u, not %u: closing", req->version,
		PROTO_VERSION);
	c->closing = true;
	return reply_version(&c->out, PROTO_ST_VERSION);
}

/* Refuse a request the connection is not allowed to make; keep serving. */
static int refuse(struct conn *c, uint32_t cmd, const char *msg)
{
	return proto_reply_status(&c->out, cmd, PROTO_ST_BADREQ, msg);
}

static int route(struct conn *c, const struct proto_req *req)
{
	bool admin_cmd = proto_cmd_is_admin(req->cmd);
	if (admin_cmd && !c->admin)
		return refuse(c, req->cmd, "admin commands are served on admin.sock only");
	if (!admin_cmd && c->admin)
		return refuse(c, req->cmd, "lookups are served on nss.sock");
	if (admin_cmd && !c->peer_ok) {
		idc_log(IDC_LOG_WARN, "admin %s refused: peer uid %d pid %d is not root or ours",
			proto_cmd_name(req->cmd), (int)c->peer_uid, (int)c->peer_pid);
		return refuse(c, req->cmd,
			      "permission denied: admin commands need root or the idcache user");
	}
	return admin_cmd ? admin_handle(c, req, &c->out) : responder_handle(c, req, &c->out);
}

static int dispatch(struct conn *c, const struct proto_frame *f)
{
	struct proto_req req;
	if (proto_decode_request(&f->hdr, f->payload, f->len, &req) < 0) {
		idc_log(IDC_LOG_DEBUG, "malformed %s request: closing",
			proto_cmd_name(f->hdr.command));
		c->closing = true; /* the peer does not speak our protocol */
		return refuse(c, f->hdr.command, "malformed request");
	}
	if (req.cmd < DAEMON_CMD_MAX)
		c->dm->requests[req.cmd]++;
	if (req.cmd == PROTO_CMD_HELLO)
		return hello(c, &req);
	if (!c->greeted) {
		c->closing = true;
		return refuse(c, req.cmd, "HELLO expected first");
	}
	return route(c, &req);
}

/* A request of c waits for a directory or a snapshot build: its reply
 * must go first. */
static bool busy(const struct conn *c)
{
	return c->wait || c->held || daemon_nscd_busy(c);
}

/* Whether a request c sent is still being answered: waiting (busy), or
 * a userdb call still streaming its replies. */
static bool answering(const struct conn *c)
{
	return busy(c) || (c->udb && userdb_active(c));
}

/* Whether c's uid is over budget and c holds output of its own: a
 * connection whose client reads goes on, only those that do not wait. */
static bool over_budget(const struct conn *c)
{
	return c->out.cap > DAEMON_OUT_KEEP && budget_over(c->dm, c->uid);
}

/* over_budget, noted in c->mem_wait (a waiting connection is not read
 * and is woken by wake). */
static bool must_wait(struct conn *c)
{
	bool wait = over_budget(c);
	if (wait != c->mem_wait) {
		c->mem_wait = wait;
		c->dm->mem_waits += wait;
		if (wait)
			c->dm->budget_waiting++;
		else
			c->dm->budget_waiting--;
	}
	return wait;
}

bool conn_may_take(struct conn *c)
{
	charge_out(c); /* what the last request queued counts before the budget is read */
	return !c->closing && !busy(c) && !c->pass_maps && !c->tail &&
	       out_pending(c) < DAEMON_OUT_HIGH && !must_wait(c);
}

/* Answer complete requests in order while the backlog and the uid's
 * budget allow and no request waits. */
static int process(struct conn *c)
{
	struct proto_frame f;
	int rc = 0;
	if (c->udb || c->nscd) { /* framed by userdb.c / as nscd does (nscd.c) */
		if (c->udb)
			rc = userdb_process(c);
		else
			rc = c->closing ? 0 : daemon_nscd_process(c);
		charge_out(c);
	} else {
		while (rc == 0 && proto_reader_buffered(&c->rd) > 0 && conn_may_take(c)) {
			int got = proto_reader_next(&c->rd, &f);
			if (got <= 0) {
				rc = got;
				break;
			}
			rc = dispatch(c, &f);
			charge_out(c);
		}
	}
	daemon_reader_end(c->dm);
	c->backlogged = out_pending(c) >= DAEMON_OUT_HIGH;
	return rc;
}

/* Answer and send, again as long as descriptors or a tail going out let
 * further requests be taken (each round consumes a request or sends what
 * held them up, so this ends). */
static int serve(struct conn *c)
{
	int rc = 0;
	for (;;) {
		rc = process(c);
		bool held = c->pass_maps != 0 || c->tail;
		if (rc == 0)
			rc = flush(c);
		if (rc < 0 || !held || c->pass_maps || c->tail)
			return rc;
	}
}

/* ==== events ============================================================================ */

/* Read what is there (bounded). 1 on EOF, 0, or -errno. No request
 * carries descriptors: a peer that passes some is dropped, and they are
 * closed off the loop (reaper.c). */
static int read_some(struct conn *c)
{
	char buf[READ_CHUNK];
	bool passed;
	ssize_t n = reaper_recv(c->dm, c->io.fd, buf, sizeof(buf), &passed);
	if (passed) {
		c->dm->refused_fds++;
		if (!c->peer || peer_warn_due(c->peer))
			idc_log(IDC_LOG_WARN,
				"uid %d pid %d passed descriptors: dropping its connection",
				(int)c->peer_uid, (int)c->peer_pid);
		return -EPROTO;
	}
	if (n < 0)
		return errno == EAGAIN || errno == EINTR ? 0 : -errno;
	if (n == 0)
		return 1;
	c->last_active_ns = idc_now_ns();
	if (c->udb)
		return userdb_feed(c, buf, (size_t)n);
	if (c->nscd)
		return daemon_nscd_feed(c, buf, (size_t)n);
	return proto_reader_feed(&c->rd, buf, (size_t)n);
}

static void update_interest(struct conn *c)
{
	size_t pending = out_pending(c);
	uint32_t ev = 0;
	if (c->closing && pending == 0 && !busy(c)) {
		conn_close(c, "done");
		return;
	}
	if (pending > DAEMON_OUT_MAX) {
		idc_log(IDC_LOG_WARN, "client backlog of %zu bytes: closing it", pending);
		conn_close(c, "backlog");
		return;
	}
	if (!c->closing && !c->eof && !c->mem_wait && pending < DAEMON_OUT_HIGH &&
	    buffered(c) < DAEMON_IN_MAX)
		ev |= EPOLLIN;
	/* Backlogged with nothing left to send (the peer read it all as it
	 * went out): writable at once, so the next turn answers on. A peer
	 * done sending, or whose requests are all read, sends nothing that
	 * would wake the connection otherwise. */
	if (pending || c->backlogged)
		ev |= EPOLLOUT;
	if (loop_set(&c->io, ev) < 0)
		conn_close(c, "epoll");
}

static void on_event(struct loop_io *io, uint32_t events)
{
	struct conn *c = loop_owner(io);
	bool eof = false;
	int rc = 0;
	if (events & EPOLLERR)
		rc = -EPIPE;
	/* Gone both ways while a request waits: no one to answer, and HUP
	 * would be reported again on every turn until the directory replies. */
	if ((events & EPOLLHUP) && busy(c))
		rc = -EPIPE;
	if (rc == 0 && (events & (EPOLLIN | EPOLLHUP)) && (io->events & EPOLLIN)) {
		rc = read_some(c);
		eof = rc == 1; /* peer done sending: answer what it sent, then close */
		rc = eof ? 0 : rc;
	}
	if (rc == 0)
		rc = flush(c);
	if (rc == 0)
		rc = serve(c);
	if (rc < 0) {
		conn_close(c, rc == -EBADMSG ? "protocol error" : idc_strerror(rc));
		return;
	}
	c->eof |= eof;
	if (c->eof && !answering(c)) /* answered all it sent */
		c->closing = true;
	update_interest(c);
}

void conn_resume(struct conn *c, int rc)
{
	c->last_active_ns = idc_now_ns();
	if (rc == 0)
		rc = serve(c);
	if (rc < 0) {
		conn_close(c, rc == -EBADMSG ? "protocol error" : idc_strerror(rc));
		return;
	}
	if (c->eof && !answering(c))
		c->closing = true;
	update_interest(c);
}

/* Connections whose uid is back under budget take requests again. */
static void wake(void *arg)
{
	struct daemon *dm = arg;
	dm->wake_queued = false;
	for (struct conn *c = dm->conns, *next; c && dm->budget_waiting; c = next) {
		next = c->next;
		if (c->mem_wait && !must_wait(c))
			conn_resume(c, 0);
	}
}

void conn_wake_later(struct daemon *dm)
{
	if (!dm->wake_queued && loop_defer(&dm->loop, wake, dm) == 0)
		dm->wake_queued = true;
}
