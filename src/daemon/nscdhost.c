/*
 * nscdhost: answers for the nscd socket from the host's other NSS sources
 * — what glibc would have found had it not asked us — and the short-lived
 * "not found" answers that spare asking them again.
 *
 * Why: a glibc client takes the nscd socket's "not found" as final and
 * never asks NSS itself, so a name or id no configured domain holds must
 * be looked up in nsswitch.conf's sources here, as nscd does: in this
 * process, with glibc's private switch __nss_disable_nscd thrown (our own
 * socket is never asked) and idcache's own module answering UNAVAIL at
 * once (it sees idc_nss_daemon_self, which only idcached defines).
 * INITGROUPS always asks them too: a directory user may also be a member
 * of groups in the host's /etc/group.
 *
 * Owns: NSCD_HOST_THREADS threads, a bounded queue of jobs, an eventfd
 * that wakes the loop when answers are ready, and the negative table.
 * Threads: the workers run only the NSS calls and nscd encoders on a job
 * they took; the queues are shared under one mutex. Everything else
 * (the job's connection, the table) is the loop thread's. A source that
 * never answers holds one worker, never the loop; at stop, workers still
 * stuck are left behind.
 */
#include <dlfcn.h>
#include <errno.h>
#include <grp.h>
#include <pthread.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "daemon/daemon.h"

/* The NSS module loaded into this process looks for it (nss_int.h). */
__attribute__((visibility("default"))) const int idc_nss_daemon_self = 1;

#define NSCD_HOST_THREADS 4
#define NSCD_HOST_QUEUE   1024u      /* jobs waiting; past it a client is answered by a close */
#define NSCD_BUF_MAX      (1u << 20) /* largest record buffer a worker tries */
#define NSCD_GIDS_MAX     65536u
#define NSCD_NEG_SLOTS    4096u
#define NSCD_NEG_KEY      128u /* longer keys are not remembered */

struct neg_slot {
	uint64_t expires_ns; /* 0: empty */
	int32_t type;
	char key[NSCD_NEG_KEY];
};

struct nscd_host {
	pthread_t threads[NSCD_HOST_THREADS];
	size_t nthreads;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct nscd_job *todo, **todo_tail, *done;
	size_t queued;
	bool stop;
	struct loop_io ev; /* written by the workers under mu */
	struct neg_slot *neg;
	uint64_t seed;
};

/* ==== lookups (worker threads) ====================================================== */

/* Whether rc, errno-style from a get*_r call whose result is NULL, means
 * "no such entry" (getpwnam_r(3)) rather than a failure. */
static bool absent(int rc)
{
	return rc == 0 || rc == ENOENT || rc == ESRCH || rc == EBADF || rc == EPERM;
}

static void set_reply(struct nscd_job *j, size_t size)
{
	j->reply = malloc(size ? size : 1);
	j->reply_len = j->reply ? size : 0;
}

static void reply_notfound(struct nscd_job *j)
{
	j->notfound = true;
	set_reply(j, nscd_status_size(j->type));
	if (j->reply)
		nscd_encode_status(j->reply, j->reply_len, j->type, 0);
}

static void reply_passwd(struct nscd_job *j, const struct passwd *p)
{
	struct nscd_passwd pw = {p->pw_name,
				 daemon_passwd_field(p->pw_passwd),
				 p->pw_uid,
				 p->pw_gid,
				 p->pw_gecos ? p->pw_gecos : "",
				 p->pw_dir ? p->pw_dir : "",
				 p->pw_shell ? p->pw_shell : ""};
	set_reply(j, nscd_passwd_size(&pw));
	if (j->reply && nscd_encode_passwd(j->reply, j->reply_len, &pw) < 0) {
		free(j->reply);
		j->reply = NULL;
	}
}

static void reply_group(struct nscd_job *j, const struct group *g)
{
	uint32_t n = 0;
	while (g->gr_mem && g->gr_mem[n])
		n++;
	struct nscd_group gr = {g->gr_name, daemon_passwd_field(g->gr_passwd), g->gr_gid,
				(const char *const *)g->gr_mem, n};
	set_reply(j, nscd_group_size(&gr));
	if (j->reply && nscd_encode_group(j->reply, j->reply_len, &gr) < 0) {
		free(j->reply);
		j->reply = NULL;
	}
}

/* One get*_r call with a buffer grown on ERANGE: 0 with *found set, or
 * the call's error. */
static int call_r(struct nscd_job *j, char **buf)
{
	size_t size = 1024;
	for (;;) {
		char *grown = realloc(*buf, size);
		if (!grown)
			return ENOMEM;
		*buf = grown;
		struct passwd pwd, *pr = NULL;
		struct group grp, *gr = NULL;
		int rc;
		errno = 0;
		switch (j->type) {
		case NSCD_GETPWBYNAME:
			rc = getpwnam_r(j->key, &pwd, *buf, size, &pr);
			break;
		case NSCD_GETPWBYUID:
			rc = getpwuid_r(j->id, &pwd, *buf, size, &pr);
			break;
		case NSCD_GETGRBYNAME:
			rc = getgrnam_r(j->key, &grp, *buf, size, &gr);
			break;
		default:
			rc = getgrgid_r(j->id, &grp, *buf, size, &gr);
		}
		if (rc == ERANGE && size < NSCD_BUF_MAX) {
			size *= 2;
			continue;
		}
		if (pr)
			reply_passwd(j, pr);
		else if (gr)
			reply_group(j, gr);
		else if (absent(rc))
			reply_notfound(j);
		return pr || gr || absent(rc) ? 0 : rc;
	}
}

static bool has_gid(const uint32_t *v, size_t n, uint32_t gid)
{
	for (size_t i = 0; i < n; i++)
		if (v[i] == gid)
			return true;
	return false;
}

/* The cache's groups of the user, then the host's it lacks (getgrouplist
 * with no primary group: (gid_t)-1, dropped). */
static void host_initgroups(struct nscd_job *j)
{
	int ng = 64;
	gid_t *host = NULL;
	for (;;) {
		gid_t *grown = realloc(host, (size_t)ng * sizeof(*host));
		if (!grown)
			goto out;
		host = grown;
		int want = ng;
		if (getgrouplist(j->key, (gid_t)-1, host, &want) >= 0) {
			ng = want;
			break;
		}
		if (want <= ng || want > (int)NSCD_GIDS_MAX)
			goto out;
		ng = want;
	}
	uint32_t *all = realloc(j->gids, (j->ngids + (size_t)ng + 1) * sizeof(*all));
	if (!all)
		goto out;
	j->gids = all;
	size_t from_cache = j->ngids;
	for (int i = 0; i < ng; i++)
		if (host[i] != (gid_t)-1 && !has_gid(all, j->ngids, host[i]))
			all[j->ngids++] = host[i];
	bool found = j->cache_found || j->ngids > from_cache;
	if (!found) {
		reply_notfound(j);
		goto out;
	}
	set_reply(j, nscd_initgroups_size((uint32_t)j->ngids));
	if (j->reply)
		nscd_encode_initgroups(j->reply, j->reply_len, j->gids, (uint32_t)j->ngids);
out:
	free(host);
}

static void run_job(struct nscd_job *j)
{
	if (j->type == NSCD_INITGROUPS) {
		host_initgroups(j);
		return;
	}
	char *buf = NULL;
	call_r(j, &buf);
	free(buf);
}

static void *worker(void *arg)
{
	struct nscd_host *h = arg;
	pthread_mutex_lock(&h->mu);
	for (;;) {
		while (!h->todo && !h->stop)
			pthread_cond_wait(&h->cv, &h->mu);
		if (h->stop)
			break;
		struct nscd_job *j = h->todo;
		h->todo = j->next;
		if (!h->todo)
			h->todo_tail = &h->todo;
		pthread_mutex_unlock(&h->mu);
		run_job(j);
		pthread_mutex_lock(&h->mu);
		j->next = h->done;
		h->done = j;
		uint64_t one = 1;
		if (write(h->ev.fd, &one, sizeof(one)) < 0) {
			/* the counter is full: the loop has a wake-up pending anyway */
		}
	}
	pthread_mutex_unlock(&h->mu);
	return NULL;
}

/* ==== the loop's side ======================================================================== */

void nscd_job_free(struct nscd_job *j)
{
	if (!j)
		return;
	free(j->gids);
	free(j->reply);
	free(j);
}

static void on_done(struct loop_io *io, uint32_t events)
{
	(void)events;
	struct daemon *dm = loop_owner(io);
	struct nscd_host *h = dm->nscd_host;
	uint64_t n;
	if (read(io->fd, &n, sizeof(n)) < 0 && errno != EAGAIN)
		idc_log(IDC_LOG_DEBUG, "nscd eventfd: %s", strerror(errno));
	pthread_mutex_lock(&h->mu);
	struct nscd_job *done = h->done;
	h->done = NULL;
	pthread_mutex_unlock(&h->mu);
	while (done) {
		struct nscd_job *j = done;
		done = j->next;
		h->queued--;
		if (j->notfound)
			nscd_neg_put(dm, j->type, j->key);
		daemon_nscd_answered(j); /* frees j */
	}
}

int nscd_host_submit(struct daemon *dm, struct nscd_job *j)
{
	struct nscd_host *h = dm->nscd_host;
	if (!h || h->queued >= NSCD_HOST_QUEUE)
		return -EAGAIN;
	j->next = NULL;
	pthread_mutex_lock(&h->mu);
	*h->todo_tail = j;
	h->todo_tail = &j->next;
	pthread_cond_signal(&h->cv);
	pthread_mutex_unlock(&h->mu);
	h->queued++;
	return 0;
}

/* glibc's private switch: NSS in this process never asks an nscd socket
 * (ours). Its callback is handed each file nscd would watch, to keep: some
 * are allocated for it (a module's init), some are glibc's own static
 * ones. We watch nothing, but keep them as nscd does (never freed). */
static void *volatile traced_files[32]; /* volatile: kept, though never read */

static void traced_file_cb(size_t db, void *file)
{
	static size_t n;
	(void)db;
	if (n < IDC_ARRAY_SIZE(traced_files))
		traced_files[n++] = file;
}

static void disable_glibc_nscd(void)
{
	void (*fn)(void (*)(size_t, void *));
	*(void **)&fn = dlsym(RTLD_DEFAULT, "__nss_disable_nscd");
	if (fn)
		fn(traced_file_cb);
	else
		idc_log(IDC_LOG_INFO, "nscd: this libc has no __nss_disable_nscd; relying on the "
				      "socket refusing our own uid's lookups");
}

static int start_threads(struct nscd_host *h)
{
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, 1024 * 1024); /* NSS modules' needs are unknown */
	int rc = 0;
	for (size_t i = 0; rc == 0 && i < NSCD_HOST_THREADS; i++) {
		rc = -pthread_create(&h->threads[i], &attr, worker, h);
		if (rc == 0)
			h->nthreads++;
	}
	pthread_attr_destroy(&attr);
	return h->nthreads ? 0 : rc;
}

int nscd_host_start(struct daemon *dm)
{
	struct nscd_host *h = calloc(1, sizeof(*h));
	if (!h || !(h->neg = calloc(NSCD_NEG_SLOTS, sizeof(*h->neg)))) {
		free(h);
		return -ENOMEM;
	}
	pthread_mutex_init(&h->mu, NULL);
	pthread_cond_init(&h->cv, NULL);
	h->todo_tail = &h->todo;
	h->seed = idc_now_ns();
	h->ev.fd = -1;
	dm->nscd_host = h;
	disable_glibc_nscd();
	int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	int rc = fd < 0 ? -errno : loop_add(&dm->loop, &h->ev, fd, EPOLLIN, on_done, dm);
	if (rc < 0 && fd >= 0)
		close(fd);
	if (rc == 0)
		rc = start_threads(h);
	if (rc < 0)
		idc_log(IDC_LOG_ERR, "nscd: cannot start the host lookups: %s", idc_strerror(rc));
	return rc;
}

/* Wait up to a second for the workers; one stuck in a source is left
 * (with the state it uses) to the process's exit. */
void nscd_host_stop(struct daemon *dm)
{
	struct nscd_host *h = dm->nscd_host;
	if (!h)
		return;
	pthread_mutex_lock(&h->mu);
	h->stop = true;
	pthread_cond_broadcast(&h->cv);
	pthread_mutex_unlock(&h->mu);
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 1;
	bool all = true;
	for (size_t i = 0; i < h->nthreads; i++)
		all &= pthread_timedjoin_np(h->threads[i], NULL, &until) == 0;
	pthread_mutex_lock(&h->mu); /* a worker left behind may still write to it */
	loop_io_close(&h->ev);
	pthread_mutex_unlock(&h->mu);
	dm->nscd_host = NULL;
	if (!all)
		return;
	for (struct nscd_job *j = h->todo, *next; j; j = next) {
		next = j->next;
		nscd_job_free(j);
	}
	for (struct nscd_job *j = h->done, *next; j; j = next) {
		next = j->next;
		nscd_job_free(j);
	}
	free(h->neg);
	free(h);
}

/* ==== negative answers =========================================================================
 * A name or id no source held is answered "not found" for
 * nscd_negative_ttl seconds without asking the sources again, as nscd's
 * negative-time-to-live: a table of NSCD_NEG_SLOTS, a colliding key
 * replacing the older. */

static struct neg_slot *neg_slot(struct nscd_host *h, int32_t type, const char *key)
{
	size_t n = strlen(key);
	uint64_t k = idc_hash64(key, n, h->seed + (uint64_t)type);
	return n < NSCD_NEG_KEY ? &h->neg[k % NSCD_NEG_SLOTS] : NULL;
}

bool nscd_neg_has(struct daemon *dm, int32_t type, const char *key)
{
	struct nscd_host *h = dm->nscd_host;
	struct neg_slot *s = h ? neg_slot(h, type, key) : NULL;
	return s && s->expires_ns > idc_now_ns() && s->type == type && strcmp(s->key, key) == 0;
}

void nscd_neg_put(struct daemon *dm, int32_t type, const char *key)
{
	struct nscd_host *h = dm->nscd_host;
	uint32_t ttl = dm->cfg ? dm->cfg->nscd_negative_ttl : 0;
	struct neg_slot *s = h && ttl && type != NSCD_INITGROUPS ? neg_slot(h, type, key) : NULL;
	if (!s)
		return;
	s->expires_ns = idc_now_ns() + (uint64_t)ttl * 1000000000u;
	s->type = type;
	snprintf(s->key, sizeof(s->key), "%s", key);
}

void nscd_neg_clear(struct daemon *dm)
{
	if (dm->nscd_host)
		memset(dm->nscd_host->neg, 0, NSCD_NEG_SLOTS * sizeof(struct neg_slot));
}
