/*
 * perf: timed workers. Every worker opens its own handle, then runs its
 * operation through consecutive phases on one shared monotonic timeline
 * (CLOCK_MONOTONIC is system-wide, so forked workers share it too): an
 * operation counts in the phase where it completes. Opening handles
 * happens before the first phase starts and is never timed.
 *
 * Threads share the engine handle; for engines whose handles must not
 * cross threads (fork_workers), workers are processes reporting their
 * counts through a pipe.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "engines/engine.h"
#include "perf.h"

#define START_SLACK_NS 300000000ull /* time for every worker to open its handle */
#define MAX_WORKERS    64

struct worker {
	const struct perf_work *w;
	unsigned idx;
	uint64_t t0; /* start of phase 0 */
	uint64_t counts[PERF_MAX_SAMPLES + 1];
	int rc;
	struct idc_diag d;
	pthread_t tid;
};

static uint64_t rng_next(uint64_t *s)
{
	*s = *s * 6364136223846793005ULL + 1442695040888963407ULL; /* LCG: spread enough */
	return *s >> 17;
}

static void sleep_until(uint64_t t)
{
	uint64_t now = idc_now_ns();
	if (now < t)
		nanosleep(&(struct timespec){(time_t)((t - now) / 1000000000u),
					     (long)((t - now) % 1000000000u)},
			  NULL);
}

/* One operation on a random existing user. */
static int one_op(struct worker *k, struct eng_worker *h, uint64_t *rng, uint64_t *serial)
{
	const struct perf_work *w = k->w;
	char name[64], text[256];
	uint64_t found = 0;
	size_t len = gen_user_name(w->g, rng_next(rng) % gen_users(w->g), name, sizeof(name));
	switch (w->op) {
	case PERF_OP_SEARCH_UID:
		snprintf(text, sizeof(text), "(uid=%s)", name);
		break;
	case PERF_OP_SEARCH_UID_IN_DN:
		snprintf(text, sizeof(text), "(uid:dn:=%s)", name);
		break;
	case PERF_OP_SEARCH_SUB:
		/* a final substring: no engine here has a substring index */
		snprintf(text, sizeof(text), "(uid=*%s)", name + (len > 7 ? len - 7 : 0));
		break;
	case PERF_OP_MODIFY_SN: {
		char value[64];
		snprintf(text, sizeof(text), "uid=%s,%s", name, w->people);
		snprintf(value, sizeof(value), "Mod%u x%llu", k->idx,
			 (unsigned long long)++*serial);
		return w->ops->modify(h, text, "sn", value, &k->d);
	}
	}
	int rc = w->ops->search(h, w->people, text, &found, &k->d);
	if (rc == 0 && found != 1)
		rc = idc_diag_set(&k->d, -EPROTO, "%s found %llu entries, expected 1", text,
				  (unsigned long long)found);
	return rc;
}

static void run_worker(struct worker *k)
{
	const struct perf_work *w = k->w;
	struct eng_worker *h = NULL;
	uint64_t rng = w->seed * 1000003u + k->idx, serial = 0;
	uint64_t phase_ns = (uint64_t)(w->seconds * 1e9);
	k->rc = w->ops->worker_open(w->e, &h, &k->d);
	sleep_until(k->t0);
	for (unsigned p = 0; k->rc == 0 && p < w->phases && !perf_stop; p++) {
		uint64_t end = k->t0 + (p + 1) * phase_ns;
		while (k->rc == 0 && !perf_stop && idc_now_ns() < end) {
			k->rc = one_op(k, h, &rng, &serial);
			uint64_t now = idc_now_ns();
			/* an op finishing past this phase counts in the one it ends in */
			unsigned q = (unsigned)((now - k->t0) / phase_ns);
			if (k->rc == 0 && q < w->phases)
				k->counts[q]++;
		}
	}
	if (h)
		w->ops->worker_close(h);
}

static void *thread_main(void *arg)
{
	run_worker(arg);
	return NULL;
}

/* ==== processes ================================================================= */

struct report {
	int rc;
	char msg[sizeof(((struct idc_diag *)0)->msg)];
	uint64_t counts[PERF_MAX_SAMPLES + 1];
};

static pid_t fork_worker(struct worker *k, int *rfd)
{
	int p[2];
	if (pipe(p) < 0)
		return -1;
	fflush(NULL); /* nothing buffered may be written twice */
	pid_t pid = fork();
	if (pid == 0) {
		close(p[0]);
		run_worker(k);
		struct report r = {.rc = k->rc};
		memcpy(r.msg, k->d.msg, sizeof(r.msg));
		memcpy(r.counts, k->counts, sizeof(r.counts));
		ssize_t n = write(p[1], &r, sizeof(r));
		_exit(n == (ssize_t)sizeof(r) ? 0 : 1);
	}
	close(p[1]);
	*rfd = p[0];
	if (pid < 0)
		close(p[0]);
	return pid;
}

static void collect(struct worker *k, pid_t pid, int fd)
{
	struct report r;
	size_t got = 0;
	while (got < sizeof(r)) {
		ssize_t n = read(fd, (char *)&r + got, sizeof(r) - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	close(fd);
	while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
		;
	if (got != sizeof(r)) {
		k->rc =
		    idc_diag_set(&k->d, -EIO, "worker process %d died without a report", (int)pid);
		return;
	}
	k->rc = r.rc;
	memcpy(k->d.msg, r.msg, sizeof(r.msg));
	memcpy(k->counts, r.counts, sizeof(r.counts));
}

/* ==== the run ===================================================================== */

static int start_all(struct worker *ks, unsigned n, bool fork_workers, pid_t *pids, int *fds)
{
	for (unsigned i = 0; i < n; i++) {
		if (fork_workers) {
			pids[i] = fork_worker(&ks[i], &fds[i]);
			if (pids[i] < 0)
				return -errno;
		} else if (pthread_create(&ks[i].tid, NULL, thread_main, &ks[i]) != 0) {
			return -EAGAIN;
		}
	}
	return 0;
}

int perf_work_run(const struct perf_work *w, double *rates, struct idc_diag *d)
{
	if (w->workers == 0 || w->workers > MAX_WORKERS || w->phases == 0 ||
	    w->phases > PERF_MAX_SAMPLES + 1)
		return idc_diag_set(d, -EINVAL, "workers 1..%d, phases 1..%d", MAX_WORKERS,
				    PERF_MAX_SAMPLES + 1);
	struct worker *ks = calloc(w->workers, sizeof(*ks));
	pid_t pids[MAX_WORKERS];
	int fds[MAX_WORKERS];
	if (!ks)
		return -ENOMEM;
	if (w->ops->fork_workers && w->ops->release)
		w->ops->release(w->e);
	uint64_t t0 = idc_now_ns() + START_SLACK_NS * (w->ops->fork_workers ? 2 : 1);
	for (unsigned i = 0; i < w->workers; i++)
		ks[i] = (struct worker){.w = w, .idx = i, .t0 = t0};
	int rc = start_all(ks, w->workers, w->ops->fork_workers, pids, fds);
	unsigned started = 0;
	for (unsigned i = 0; i < w->workers; i++) {
		if (w->ops->fork_workers ? pids[i] <= 0 : ks[i].tid == 0)
			break;
		started++;
	}
	for (unsigned i = 0; i < started; i++) {
		if (w->ops->fork_workers)
			collect(&ks[i], pids[i], fds[i]);
		else
			pthread_join(ks[i].tid, NULL);
	}
	for (unsigned p = 0; p < w->phases; p++) {
		uint64_t sum = 0;
		for (unsigned i = 0; i < w->workers; i++)
			sum += ks[i].counts[p];
		rates[p] = (double)sum / w->seconds;
	}
	for (unsigned i = 0; rc == 0 && i < w->workers; i++)
		if (ks[i].rc < 0) {
			rc = ks[i].rc;
			memcpy(d->msg, ks[i].d.msg, sizeof(d->msg));
		}
	free(ks);
	return rc;
}
