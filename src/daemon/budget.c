/*
 * budget: the memory and loop work each peer uid may cause, so one local
 * user cannot take the daemon's memory or time from the others.
 *
 * Every connection belongs to the uid the kernel reported at accept time
 * (SO_PEERCRED). A uid is charged for the output its connections queue
 * (the buffers' capacity: what the heap really holds) and for each
 * distinct enumeration snapshot its cursors keep alive (responder.c).
 * With output over DAEMON_UID_MEM, or over its share of DAEMON_MEM_TOTAL
 * when all output together is past that, the uid's connections take no
 * further requests until its queues drain (conn.c). Snapshots do not
 * drain by waiting, so they are bounded where they are taken: a new one
 * is refused (TRYAGAIN) while the uid's output and snapshots would pass
 * DAEMON_UID_MEM (or everyone's DAEMON_MEM_TOTAL), unless the uid holds
 * none, so every uid can always enumerate. Builds of snapshots are spaced per
 * uid (budget_build_wait): others are not charged for one uid's churn.
 *
 * The table lives as long as the daemon; an entry as long as a connection
 * of its uid, or a build spacing, still needs it (budget_sweep).
 */
#include <errno.h>
#include <stdlib.h>

#include "daemon/daemon.h"

struct budget_uid {
	struct budget_uid *next;
	uid_t uid;
	unsigned conns;      /* connections (and cursors) referring to it */
	size_t out, snaps;   /* bytes charged: output queues, snapshots */
	uint64_t next_build; /* idc_now_ns() before which it may not build */
};

struct budget_uid *budget_get(struct daemon *dm, uid_t uid)
{
	struct budget_uid *u = dm->budgets;
	while (u && u->uid != uid)
		u = u->next;
	if (!u) {
		u = calloc(1, sizeof(*u));
		if (!u)
			return NULL;
		u->uid = uid;
		u->next = dm->budgets;
		dm->budgets = u;
	}
	u->conns++;
	return u;
}

void budget_put(struct daemon *dm, struct budget_uid *u)
{
	(void)dm;
	if (u && u->conns > 0)
		u->conns--; /* freed by budget_sweep, after its build spacing */
}

static bool idle_entry(const struct budget_uid *u, uint64_t now)
{
	return u->conns == 0 && u->out == 0 && u->snaps == 0 && now >= u->next_build;
}

void budget_sweep(struct daemon *dm, bool all)
{
	uint64_t now = idc_now_ns();
	for (struct budget_uid **p = &dm->budgets; *p;) {
		struct budget_uid *u = *p;
		if (all || idle_entry(u, now)) {
			*p = u->next;
			free(u);
		} else {
			p = &u->next;
		}
	}
}

static size_t used(const struct budget_uid *u)
{
	return u->out + u->snaps;
}

/* Uids with output queued: the divisor of the fair share. */
static size_t queuing_uids(const struct daemon *dm)
{
	size_t n = 0;
	for (const struct budget_uid *u = dm->budgets; u; u = u->next)
		n += u->out > 0;
	return n ? n : 1;
}

bool budget_over(const struct daemon *dm, const struct budget_uid *u)
{
	if (!u)
		return false;
	if (u->out > DAEMON_UID_MEM)
		return true;
	return dm->budget_out > DAEMON_MEM_TOTAL && u->out > DAEMON_MEM_TOTAL / queuing_uids(dm);
}

/* A charge went down: connections waiting for memory may go on (conn.c
 * looks, after the current batch). */
static void released(struct daemon *dm)
{
	if (dm->budget_waiting)
		conn_wake_later(dm);
}

void budget_charge_out(struct daemon *dm, struct budget_uid *u, size_t old, size_t now)
{
	if (!u || old == now)
		return;
	u->out = u->out - old + now;
	dm->budget_out = dm->budget_out - old + now;
	dm->budget_total = dm->budget_total - old + now;
	if (now < old)
		released(dm);
}

bool budget_snap_admit(const struct daemon *dm, const struct budget_uid *u, size_t size)
{
	if (!u || u->snaps == 0)
		return true; /* one snapshot is always allowed: everyone can enumerate */
	return used(u) + size <= DAEMON_UID_MEM && dm->budget_total + size <= DAEMON_MEM_TOTAL;
}

void budget_charge_snap(struct daemon *dm, struct budget_uid *u, size_t size, bool add)
{
	if (!u)
		return;
	if (add) {
		u->snaps += size;
		dm->budget_total += size;
		return;
	}
	u->snaps -= size;
	dm->budget_total -= size;
	released(dm);
}

uint64_t budget_build_wait(const struct budget_uid *u, uint64_t now)
{
	return u && u->next_build > now ? u->next_build - now : 0;
}

void budget_built(struct budget_uid *u, uint64_t now, uint64_t took_ns)
{
	uint64_t gap = took_ns * DAEMON_SNAP_SPACING;
	uint64_t max = (uint64_t)DAEMON_SNAP_WAIT_MAX_MS * 1000000u;
	if (u)
		u->next_build = now + (gap < max ? gap : max);
}
