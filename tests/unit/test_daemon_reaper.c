/*
 * Unit tests for src/daemon/reaper.c: the loop's receive never takes a
 * message that carries descriptors (it stays queued), takes clean bytes
 * exactly, and the closing thread empties a client socket (nested Unix
 * sockets included) and closes a lingering TCP socket without waiting.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "daemon/daemon.h"

static void pass_fd(int sock, int fd, const char *data)
{
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(sizeof(int))];
	} ctl;
	struct iovec iov = {(void *)data, strlen(data)};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
	memset(&ctl, 0, sizeof(ctl));
	mh.msg_control = ctl.buf;
	mh.msg_controllen = sizeof(ctl.buf);
	struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &fd, sizeof(int));
	assert_int_equal(sendmsg(sock, &mh, 0), (ssize_t)strlen(data));
}

/* Whether fd's other end is closed (reading it gives EOF at once). */
static bool peer_closed(int fd)
{
	char c;
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
	return read(fd, &c, 1) == 0;
}

static void wait_closed(int fd)
{
	for (int i = 0; i < 500 && !peer_closed(fd); i++)
		usleep(10000);
	assert_true(peer_closed(fd));
}

static void test_recv_takes_clean_bytes(void **state)
{
	(void)state;
	struct daemon dm = {.kernel_refuses_fds = false};
	int sp[2];
	char buf[64];
	bool passed = true;
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sp), 0);
	assert_int_equal(write(sp[1], "hello", 5), 5);
	assert_int_equal(reaper_recv(&dm, sp[0], buf, sizeof(buf), &passed), 5);
	assert_false(passed);
	assert_memory_equal(buf, "hello", 5);
	assert_int_equal(reaper_recv(&dm, sp[0], buf, sizeof(buf), &passed), -1);
	assert_int_equal(errno, EAGAIN);
	close(sp[1]);
	assert_int_equal(reaper_recv(&dm, sp[0], buf, sizeof(buf), &passed), 0);
	assert_false(passed);
	close(sp[0]);
}

static void test_recv_leaves_passed_descriptors_queued(void **state)
{
	(void)state;
	struct daemon dm = {.kernel_refuses_fds = false};
	int sp[2], pipefd[2];
	char buf[64];
	bool passed = false;
	assert_int_equal(reaper_start(&dm), 0);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sp), 0);
	assert_int_equal(pipe(pipefd), 0);
	assert_int_equal(write(sp[1], "clean", 5), 5);
	pass_fd(sp[1], pipefd[1], "dirty");
	close(pipefd[1]); /* the message holds the pipe's write end now */
	/* the peek covers both messages: nothing is taken */
	assert_int_equal(reaper_recv(&dm, sp[0], buf, sizeof(buf), &passed), 0);
	assert_true(passed);
	/* the closing thread empties the socket: the pipe's last writer goes */
	reaper_close(&dm, sp[0], true);
	wait_closed(pipefd[0]);
	wait_closed(sp[1]);
	reaper_stop(&dm);
	close(pipefd[0]);
	close(sp[1]);
}

/* A TCP socket whose close would wait 30 s: unsent data behind a zero
 * window (its loopback peer, *peer, never reads) and SO_LINGER {1, 30}. */
static int lingering_socket(int *peer, int *lfd)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(sa);
	int small = 2048;
	static char chunk[65536];
	*lfd = socket(AF_INET, SOCK_STREAM, 0);
	assert_int_equal(setsockopt(*lfd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small)), 0);
	assert_int_equal(bind(*lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(*lfd, 1), 0);
	assert_int_equal(getsockname(*lfd, (struct sockaddr *)&sa, &len), 0);
	int c = socket(AF_INET, SOCK_STREAM, 0);
	assert_int_equal(connect(c, (struct sockaddr *)&sa, sizeof(sa)), 0);
	*peer = accept(*lfd, NULL, NULL);
	fcntl(c, F_SETFL, O_NONBLOCK);
	for (int i = 0; i < 1000 && send(c, chunk, sizeof(chunk), 0) > 0; i++)
		;
	struct linger lg = {1, 30};
	assert_int_equal(setsockopt(c, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)), 0);
	return c;
}

/* Hand fd to a fresh reaper and stop it: the stop must not have had to
 * give up on a close (it waits at most 2 s). */
static void close_quickly(int fd, bool drain_first)
{
	struct daemon dm = {.kernel_refuses_fds = false};
	assert_int_equal(reaper_start(&dm), 0);
	uint64_t t0 = idc_now_ns();
	reaper_close(&dm, fd, drain_first);
	reaper_stop(&dm);
	assert_true(idc_now_ns() - t0 < 2000000000ull);
}

static void test_lingering_socket_closes_at_once(void **state)
{
	(void)state;
	int peer, lfd;
	close_quickly(lingering_socket(&peer, &lfd), false);
	close(peer);
	close(lfd);
}

/* The same socket passed inside a socket passed inside the client's
 * socket: emptied level by level, lingering turned off at the bottom. */
static void test_drain_nested(void **state)
{
	(void)state;
	int peer, lfd, outer[2], inner[2];
	int c = lingering_socket(&peer, &lfd);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, outer), 0);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, inner), 0);
	pass_fd(inner[1], c, "t");
	close(c);
	pass_fd(outer[1], inner[0], "i");
	close(inner[0]);
	close(inner[1]);
	close_quickly(outer[0], true);
	close(outer[1]);
	close(peer);
	close(lfd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_recv_takes_clean_bytes),
	    cmocka_unit_test(test_recv_leaves_passed_descriptors_queued),
	    cmocka_unit_test(test_lingering_socket_closes_at_once),
	    cmocka_unit_test(test_drain_nested),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
