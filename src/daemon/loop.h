/*
 * loop: the daemon's single-threaded epoll event loop, one-shot and
 * periodic timers on timerfd, and deferred frees.
 *
 * Every watched descriptor is a struct loop_io embedded in its owner; the
 * owner's callback gets the io and recovers itself with loop_owner(). An
 * owner closed while events for it may still be pending in the current
 * batch sets io->fd = -1 (loop_io_close does) and frees itself through
 * loop_defer, which runs after the batch: a stale event is then skipped
 * instead of touching freed memory.
 */
#ifndef IDC_DAEMON_LOOP_H
#define IDC_DAEMON_LOOP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct loop;
struct loop_io;
typedef void (*loop_fn)(struct loop_io *io, uint32_t events);

struct loop_io {
	int fd; /* -1 once closed */
	loop_fn fn;
	void *owner;
	uint32_t events; /* currently registered EPOLL* mask */
	struct loop *loop;
};

struct loop_deferred {
	void (*fn)(void *);
	void *p;
};

struct loop {
	int epfd;
	bool stop;
	struct loop_deferred *deferred;
	size_t ndeferred, deferred_cap;
};

#define loop_owner(io) ((io)->owner)

int loop_init(struct loop *l);
/* Closes the epoll fd and runs what is still deferred. */
void loop_fini(struct loop *l);

/* Watch io->fd (set by the caller) for events. 0 or -errno. */
int loop_add(struct loop *l, struct loop_io *io, int fd, uint32_t events, loop_fn fn, void *owner);
/* Change the event mask (no system call when unchanged). */
int loop_set(struct loop_io *io, uint32_t events);
/* Stop watching and close io->fd; io->fd becomes -1. Safe to repeat. */
void loop_io_close(struct loop_io *io);
/* Stop watching without closing (the fd belongs to someone else). */
void loop_io_forget(struct loop_io *io);

/* Call fn(p) after the current batch of events (or at loop_fini). */
int loop_defer(struct loop *l, void (*fn)(void *), void *p);

/* Dispatch events until loop->stop is set. 0 or -errno of epoll_wait. */
int loop_run(struct loop *l);

/* ---- timers ------------------------------------------------------------------ */

struct loop_timer;
typedef void (*loop_timer_fn)(struct loop_timer *t);

struct loop_timer {
	struct loop_io io;
	loop_timer_fn fn;
	void *owner;
	bool armed;
	uint64_t delay_ms, interval_ms; /* of the current arming */
};

/* fn(t) is called on expiry with the timer already acknowledged (and
 * marked unarmed if it was one-shot); t->owner is the owner given here. */
int loop_timer_init(struct loop *l, struct loop_timer *t, loop_timer_fn fn, void *owner);
/* Arm (or re-arm) to fire after delay_ms (0: as soon as possible), then
 * every interval_ms if non-zero. */
int loop_timer_arm(struct loop_timer *t, uint64_t delay_ms, uint64_t interval_ms);
void loop_timer_disarm(struct loop_timer *t);
void loop_timer_close(struct loop_timer *t);

#endif
