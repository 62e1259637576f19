/*
 * loop: epoll dispatch, timerfd timers and deferred frees (see loop.h).
 */
#include "daemon/loop.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "util/util.h"

#define LOOP_BATCH 64

int loop_init(struct loop *l)
{
	memset(l, 0, sizeof(*l));
	l->epfd = epoll_create1(EPOLL_CLOEXEC);
	return l->epfd < 0 ? -errno : 0;
}

static void run_deferred(struct loop *l)
{
	/* a deferred free may defer more (a domain freeing its timers) */
	for (size_t i = 0; i < l->ndeferred; i++)
		l->deferred[i].fn(l->deferred[i].p);
	l->ndeferred = 0;
}

void loop_fini(struct loop *l)
{
	run_deferred(l);
	free(l->deferred);
	l->deferred = NULL;
	l->deferred_cap = 0;
	if (l->epfd >= 0)
		close(l->epfd);
	l->epfd = -1;
}

int loop_add(struct loop *l, struct loop_io *io, int fd, uint32_t events, loop_fn fn, void *owner)
{
	struct epoll_event ev = {.events = events, .data.ptr = io};
	io->fd = fd;
	io->fn = fn;
	io->owner = owner;
	io->loop = l;
	io->events = events;
	return epoll_ctl(l->epfd, EPOLL_CTL_ADD, fd, &ev) < 0 ? -errno : 0;
}

int loop_set(struct loop_io *io, uint32_t events)
{
	if (io->fd < 0 || io->events == events)
		return 0;
	struct epoll_event ev = {.events = events, .data.ptr = io};
	if (epoll_ctl(io->loop->epfd, EPOLL_CTL_MOD, io->fd, &ev) < 0)
		return -errno;
	io->events = events;
	return 0;
}

void loop_io_close(struct loop_io *io)
{
	if (io->fd < 0)
		return;
	if (io->loop)
		epoll_ctl(io->loop->epfd, EPOLL_CTL_DEL, io->fd, NULL);
	close(io->fd);
	io->fd = -1;
}

void loop_io_forget(struct loop_io *io)
{
	if (io->fd < 0)
		return;
	if (io->loop)
		epoll_ctl(io->loop->epfd, EPOLL_CTL_DEL, io->fd, NULL);
	io->fd = -1;
}

int loop_defer(struct loop *l, void (*fn)(void *), void *p)
{
	if (l->ndeferred == l->deferred_cap) {
		size_t cap = l->deferred_cap ? l->deferred_cap * 2 : 16;
		struct loop_deferred *grown = realloc(l->deferred, cap * sizeof(*grown));
		if (!grown) {
			/* freeing now is safe unless an event of this batch still
			 * points at p; losing the memory is the lesser harm */
			idc_log(IDC_LOG_ERR, "out of memory: leaking a closed object");
			return -ENOMEM;
		}
		l->deferred = grown;
		l->deferred_cap = cap;
	}
	l->deferred[l->ndeferred++] = (struct loop_deferred){fn, p};
	return 0;
}

int loop_run(struct loop *l)
{
	struct epoll_event evs[LOOP_BATCH];
	while (!l->stop) {
		int n = epoll_wait(l->epfd, evs, LOOP_BATCH, -1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		for (int i = 0; i < n && !l->stop; i++) {
			struct loop_io *io = evs[i].data.ptr;
			if (io->fd >= 0) /* closed earlier in this batch: skip */
				io->fn(io, evs[i].events);
		}
		run_deferred(l);
	}
	return 0;
}

/* ---- timers ----------------------------------------------------------------------- */

/* The timerfd's own callback: acknowledge, note whether a one-shot is spent,
 * then call the owner. A read that finds nothing means the timer was re-armed
 * or disarmed after the event was queued: nothing is due. */
static void timer_fired(struct loop_io *io, uint32_t events)
{
	(void)events;
	struct loop_timer *t = loop_owner(io);
	uint64_t expirations;
	if (read(io->fd, &expirations, sizeof(expirations)) != sizeof(expirations))
		return;
	if (t->interval_ms == 0)
		t->armed = false;
	t->fn(t);
}

int loop_timer_init(struct loop *l, struct loop_timer *t, loop_timer_fn fn, void *owner)
{
	memset(t, 0, sizeof(*t));
	t->io.fd = -1;
	t->fn = fn;
	t->owner = owner;
	int fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	if (fd < 0)
		return -errno;
	int rc = loop_add(l, &t->io, fd, EPOLLIN, timer_fired, t);
	if (rc < 0) {
		close(fd);
		t->io.fd = -1;
	}
	return rc;
}

int loop_timer_arm(struct loop_timer *t, uint64_t delay_ms, uint64_t interval_ms)
{
	struct itimerspec its = {
	    .it_value = {(time_t)(delay_ms / 1000), (long)(delay_ms % 1000) * 1000000L},
	    .it_interval = {(time_t)(interval_ms / 1000), (long)(interval_ms % 1000) * 1000000L},
	};
	if (delay_ms == 0)
		its.it_value.tv_nsec = 1; /* zero would disarm */
	if (t->io.fd < 0 || timerfd_settime(t->io.fd, 0, &its, NULL) < 0)
		return t->io.fd < 0 ? -EBADF : -errno;
	t->armed = true;
	t->delay_ms = delay_ms;
	t->interval_ms = interval_ms;
	return 0;
}

void loop_timer_disarm(struct loop_timer *t)
{
	struct itimerspec its = {{0, 0}, {0, 0}};
	if (t->io.fd >= 0)
		timerfd_settime(t->io.fd, 0, &its, NULL);
	t->armed = false;
}

void loop_timer_close(struct loop_timer *t)
{
	loop_io_close(&t->io);
	t->armed = false;
}
