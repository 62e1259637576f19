/*
 * commit: the stores of background requests (an enumeration's pages and
 * its end, a poll pass, a refresh of expired entries) on one worker thread
 * per domain. Writing and syncing a page of a thousand users takes tens of
 * milliseconds, seconds on a busy disk; on the loop's thread every other
 * client waited for it.
 *
 * Hand-over: lp_req_page and finish (request.c) only mark the request
 * (store_due, finish_due); lp_commit_kick, at the end of a process call,
 * gives the first marked one to the worker. From then until
 * lp_commit_reap sees the worker done, the domain is frozen: process reads
 * nothing, times nothing out and starts nothing (the loop watches the
 * worker's eventfd instead of the connection), so the request, its arena
 * and maps belong to the worker alone. Lookups of other clients are
 * answered from the cache meanwhile; a lookup that needs the directory is
 * sent and its answer read once the store is over. What the worker shares
 * with the loop: the cache (one write transaction at a time, cache.h),
 * the domain's "logged once" set (its own mutex), and this struct (mu).
 *
 * The rest of a store happens on the loop's thread when it is reaped: a
 * map found full is grown there (no read transaction of the loop is open
 * during lprov_domain_process) and the store runs again; the hook hears
 * what changed; the request goes on or completes.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#define LP_COMMIT_NICE 10

#include "providers/ldap/lprov_int.h"

struct lp_commit {
	pthread_t th;
	int efd; /* readable once the worker ran the job */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool stop;   /* mu: the worker ends */
	bool queued; /* mu: job handed over, not run yet */
	bool ran;    /* mu: job run, not reaped yet */
	bool busy;   /* loop only: handed over and not reaped */
	bool told;   /* loop only: run; its changes being told the hook */
	struct lp_store_job job;
	uint64_t t0; /* when it was handed over */
	size_t nu;   /* users of the page, for the log */
};

bool lp_commit_background(const struct lp_req *r)
{
	/* a sync feed's batch stores within its message handling (syncstore.c) */
	return r->kind != LP_SYNC;
}

static void *worker(void *arg)
{
	struct lp_commit *c = arg;
	/* Below the loop's thread (Linux: nice is per thread): on a busy
	 * machine the scheduler runs the loop, which answers clients, first. */
	if (setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), LP_COMMIT_NICE) < 0)
		idc_log(IDC_LOG_DEBUG, "ldap: committer priority not lowered: %s", strerror(errno));
	pthread_mutex_lock(&c->mu);
	for (;;) {
		while (!c->queued && !c->stop)
			pthread_cond_wait(&c->cv, &c->mu);
		if (!c->queued)
			break; /* stop, and nothing handed over */
		c->queued = false;
		pthread_mutex_unlock(&c->mu);
		lp_store_run(&c->job);
		/* A page's store read the cache's pages it changed (and the
		 * records before, for the hook): over an enumeration, all of
		 * cache.mdb, counted in the daemon's resident set until let go
		 * of. Here, off the loop, with no transaction open. */
		if (c->job.wrote)
			cache_map_release(c->job.r->ld->cache, true);
		pthread_mutex_lock(&c->mu);
		c->ran = true;
		pthread_cond_broadcast(&c->cv);
		uint64_t one = 1;
		/* A write lost to a signal would leave the loop waiting for
		 * the job, and every lookup the domain holds with it. */
		ssize_t w;
		while ((w = write(c->efd, &one, sizeof(one))) < 0 && errno == EINTR)
			;
		if (w != sizeof(one))
			idc_log(IDC_LOG_DEBUG, "ldap: committer eventfd write failed");
	}
	pthread_mutex_unlock(&c->mu);
	return NULL;
}

/* The worker, started at the first background store. */
static int commit_start(struct lprov_domain *ld)
{
	if (ld->commit)
		return 0;
	struct lp_commit *c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (c->efd < 0) {
		int rc = -errno;
		free(c);
		return rc;
	}
	pthread_mutex_init(&c->mu, NULL);
	pthread_cond_init(&c->cv, NULL);
	int rc = pthread_create(&c->th, NULL, worker, c);
	if (rc) {
		pthread_cond_destroy(&c->cv);
		pthread_mutex_destroy(&c->mu);
		close(c->efd);
		free(c);
		return -rc;
	}
	ld->commit = c;
	return 0;
}

bool lp_commit_busy(const struct lprov_domain *ld)
{
	return ld->commit && ld->commit->busy;
}

int lp_commit_fd(const struct lprov_domain *ld)
{
	return ld->commit ? ld->commit->efd : -1;
}

bool lp_commit_due(const struct lprov_domain *ld)
{
	for (const struct lp_req *r = ld->reqs; r; r = r->next)
		if (r->store_due || r->finish_due)
			return true;
	return false;
}

static void hand_over(struct lp_commit *c)
{
	pthread_mutex_lock(&c->mu);
	c->queued = true;
	pthread_cond_signal(&c->cv);
	pthread_mutex_unlock(&c->mu);
}

int lp_commit_kick(struct lprov_domain *ld)
{
	if (lp_commit_busy(ld))
		return 0;
	struct lp_req *r = ld->reqs;
	while (r && !r->store_due && !r->finish_due)
		r = r->next;
	if (!r)
		return 0;
	bool page = !r->finish_due; /* the final store takes the page's entries too */
	enum lprov_lookup_result res = page ? LPROV_LOOKUP_FOUND : r->finish_res;
	r->store_due = r->finish_due = false;
	size_t nu = r->users.n - r->users_stored;
	uint64_t t0 = idc_now_ns();
	int rc = commit_start(ld);
	if (rc) {
		idc_log(IDC_LOG_WARN, "ldap domain %s: no committer thread (%s); storing here",
			ld->cfg.name, idc_strerror(rc));
		struct idc_diag d = {{0}};
		int src = lp_store(r, res, page, &d);
		lp_req_stored(r, page, res, src, &d, nu, t0);
		return rc;
	}
	struct lp_commit *c = ld->commit;
	lp_store_init(&c->job, r, res, page);
	c->nu = nu;
	c->t0 = t0;
	c->busy = true;
	hand_over(c);
	return 0;
}

/* Whether the worker ran the job handed over (then its eventfd is read). */
static bool job_ran(struct lp_commit *c, bool wait)
{
	pthread_mutex_lock(&c->mu);
	while (wait && !c->ran)
		pthread_cond_wait(&c->cv, &c->mu);
	bool ran = c->ran;
	c->ran = false;
	pthread_mutex_unlock(&c->mu);
	uint64_t n;
	ssize_t r = 0;
	while (ran && (r = read(c->efd, &n, sizeof(n))) < 0 && errno == EINTR)
		; /* else it stays readable, and the loop spins on it */
	if (r < 0 && errno != EAGAIN)
		idc_log(IDC_LOG_DEBUG, "ldap: committer eventfd read failed");
	return ran;
}

bool lp_commit_reporting(const struct lprov_domain *ld)
{
	return ld->commit && ld->commit->busy && ld->commit->told;
}

static bool reap(struct lprov_domain *ld, bool wait)
{
	struct lp_commit *c = ld->commit;
	if (!c || !c->busy)
		return true;
	struct lp_store_job *j = &c->job;
	if (!c->told) {
		if (!job_ran(c, wait))
			return false;
		/* A full map is grown here, where no transaction of this
		 * process is open, and the store runs again (as lp_store does). */
		if (j->rc == IDC_EMAPFULL && j->tries < LP_GROW_TRIES &&
		    cache_grow(ld->cache, &j->d) == 0) {
			j->tries++;
			hand_over(c);
			return wait ? reap(ld, wait) : false;
		}
		c->told = true;
	}
	/* The hook (the daemon's maps) hears of a page's thousand changes
	 * in slices of LP_REPORT_SLICE_NS, the loop serving others between
	 * them; the domain stays frozen until all are told. */
	if (!lp_store_report(j, wait ? UINT64_MAX : idc_now_ns() + LP_REPORT_SLICE_NS))
		return false;
	c->told = false;
	c->busy = false;
	/* the replies waited in the socket, not on the server */
	lp_search_postpone(ld, idc_now_ns() - c->t0);
	int rc = lp_store_done(j);
	lp_req_stored(j->r, j->page, j->res, rc, &j->d, c->nu, c->t0);
	/* stopped at the page: read on at once */
	ld->more = ld->conn != NULL;
	return true;
}

bool lp_commit_reap(struct lprov_domain *ld)
{
	return reap(ld, false);
}

void lp_commit_drain(struct lprov_domain *ld)
{
	reap(ld, true);
}

void lp_commit_free(struct lprov_domain *ld)
{
	struct lp_commit *c = ld->commit;
	if (!c)
		return;
	lp_commit_drain(ld);
	pthread_mutex_lock(&c->mu);
	c->stop = true;
	pthread_cond_signal(&c->cv);
	pthread_mutex_unlock(&c->mu);
	pthread_join(c->th, NULL);
	pthread_cond_destroy(&c->cv);
	pthread_mutex_destroy(&c->mu);
	close(c->efd);
	free(c);
	ld->commit = NULL;
}
