/*
 * domains: the provider state of each served domain — for files domains
 * the files provider's domain, its inotify watch, a refresh timer (debounce
 * after a change, retry after a failure, periodic poll when inotify is not
 * available) and a timer that retries watching directories that are
 * missing. A refresh is one cache transaction (the files provider's
 * contract): readers see the old data or the new, never a gap.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>

#include "daemon/daemon.h"

/* ==== refresh ==================================================================== */

static void log_refresh(struct domain *d, const struct files_refresh_stats *st, uint64_t ms)
{
	const char *name = d->cfg->name;
	if (!d->loaded) {
		idc_log(IDC_LOG_INFO, "loaded domain %s: %zu users, %zu groups in %llu ms", name,
			st->users.total, st->groups.total, (unsigned long long)ms);
	} else if (st->committed) {
		idc_log(IDC_LOG_INFO,
			"domain %s: users +%zu ~%zu -%zu, groups +%zu ~%zu -%zu in %llu ms", name,
			st->users.added, st->users.changed, st->users.removed, st->groups.added,
			st->groups.changed, st->groups.removed, (unsigned long long)ms);
	} else {
		idc_log(IDC_LOG_DEBUG, "domain %s: files unchanged", name);
	}
	if (st->malformed || st->duplicates)
		idc_log(IDC_LOG_DEBUG, "domain %s: %zu malformed and %zu duplicate lines skipped",
			name, st->malformed, st->duplicates);
}

int domain_refresh(struct domain *d)
{
	if (d->ldap) /* ldap entries are refreshed one lookup at a time (ldapdom.c) */
		return 0;
	struct files_refresh_stats st;
	struct idc_diag diag = {{0}};
	uint64_t t0 = idc_now_ns();
	if (d->invalidate)
		files_domain_invalidate(d->files);
	memset(&st, 0, sizeof(st));
	/* Each committed change drops exactly the mc records it affects. */
	files_domain_set_hook(d->files, daemon_mc_change, d->dm);
	int rc = files_domain_refresh(d->files, d->dm->cache, &st, &diag);
	d->dm->files_gen++; /* it may have stored changes, even when it failed */
	uint64_t ms = (idc_now_ns() - t0) / 1000000u;
	d->attempted = true;
	if (rc < 0) {
		d->refresh_failed++;
		snprintf(d->last_error, sizeof(d->last_error), "%.500s",
			 diag.msg[0] ? diag.msg : idc_strerror(rc));
		idc_log(IDC_LOG_ERR, "domain %s: refresh failed, serving the last good data: %s",
			d->cfg->name, d->last_error);
		domain_schedule(d, DAEMON_RETRY_MS, d->invalidate);
		daemon_check_ready(d->dm);
		return rc;
	}
	log_refresh(d, &st, d->start_ns ? (idc_now_ns() - d->start_ns) / 1000000u : ms);
	d->start_ns = 0;
	d->invalidate = false;
	d->loaded = true;
	d->refresh_ok++;
	d->last = st;
	d->last_refresh = (int64_t)time(NULL);
	d->last_refresh_ms = ms;
	d->last_error[0] = '\0';
	daemon_check_ready(d->dm);
	return 0;
}

bool domain_current(const struct domain *d)
{
	return d->ldap || (d->loaded && !d->last_error[0]);
}

static void on_refresh_timer(struct loop_timer *t)
{
	struct domain *d = t->owner;
	domain_refresh(d);
	if (!d->watch) /* no inotify: poll */
		domain_schedule(d, DAEMON_POLL_MS, false);
}

void domain_schedule(struct domain *d, uint64_t delay_ms, bool invalidate)
{
	/* ldap: nothing to load up front; lookups go to the directory */
	if (d->ldap) {
		if (invalidate) /* expire: group lists are fetched again when asked */
			ldapdom_expire(d->ldap);
		daemon_check_ready(d->dm);
		return;
	}
	d->invalidate |= invalidate;
	/* an earlier deadline wins; a later request is covered by it */
	if (d->refresh.armed && d->refresh.delay_ms <= delay_ms)
		return;
	if (loop_timer_arm(&d->refresh, delay_ms, 0) < 0)
		idc_log(IDC_LOG_ERR, "domain %s: cannot arm the refresh timer", d->cfg->name);
}

/* ==== watch ======================================================================== */

static void watch_events(struct domain *d, unsigned ev)
{
	if (ev & (FILES_EV_CHANGED | FILES_EV_RESCAN))
		domain_schedule(d, FILES_DEBOUNCE_MS, false);
	else if (ev & FILES_EV_WRITING)
		domain_schedule(d, FILES_SETTLE_MS, false);
}

static void arm_retry(struct domain *d)
{
	if (files_watch_missing(d->watch) > 0 && !d->retry.armed)
		loop_timer_arm(&d->retry, FILES_WATCH_RETRY_MS, FILES_WATCH_RETRY_MS);
	else if (files_watch_missing(d->watch) == 0 && d->retry.armed)
		loop_timer_disarm(&d->retry);
}

static void on_watch(struct loop_io *io, uint32_t events)
{
	(void)events;
	struct domain *d = loop_owner(io);
	unsigned ev = 0;
	int rc = files_watch_drain(d->watch, &ev);
	if (rc < 0) {
		idc_log(IDC_LOG_WARN, "domain %s: reading inotify events: %s", d->cfg->name,
			idc_strerror(rc));
		ev = FILES_EV_RESCAN;
	}
	watch_events(d, ev);
	arm_retry(d); /* a watched directory may have gone */
}

static void on_retry_timer(struct loop_timer *t)
{
	struct domain *d = t->owner;
	unsigned ev = 0;
	int rc = files_watch_retry(d->watch, &ev);
	if (rc < 0)
		idc_log(IDC_LOG_WARN, "domain %s: watching again: %s", d->cfg->name,
			idc_strerror(rc));
	watch_events(d, ev);
	arm_retry(d);
}

/* Watch the files' directories; without inotify the domain still works,
 * polled every DAEMON_POLL_MS. */
static void start_watch(struct domain *d)
{
	const char *const *paths;
	size_t n = files_domain_paths(d->files, &paths);
	struct idc_diag diag = {{0}};
	int rc = files_watch_open(paths, n, &d->watch, &diag);
	if (rc == 0)
		rc = loop_add(&d->dm->loop, &d->watch_io, files_watch_fd(d->watch), EPOLLIN,
			      on_watch, d);
	if (rc < 0) {
		idc_log(IDC_LOG_WARN, "domain %s: no change notification (%s); polling every %u s",
			d->cfg->name, diag.msg[0] ? diag.msg : idc_strerror(rc),
			DAEMON_POLL_MS / 1000);
		files_watch_close(d->watch);
		d->watch = NULL;
		d->watch_io.fd = -1;
		return;
	}
	arm_retry(d);
}

/* ==== life cycle ======================================================================== */

static int files_new(const struct config_domain *cfg, struct files_domain **out)
{
	struct files_domain_config fc = {
	    .name = cfg->name,
	    .passwd_files = (const char *const *)cfg->passwd_files,
	    .npasswd = cfg->npasswd,
	    .group_files = (const char *const *)cfg->group_files,
	    .ngroup = cfg->ngroup,
	    .ttl = cfg->entry_cache_timeout,
	};
	return files_domain_new(&fc, out);
}

/* An ldap domain: the provider, no files, no watch; "attempted" at once
 * (there is no first load to wait for). */
static int start_ldap_domain(struct domain *d, struct domain **out)
{
	int rc = ldapdom_new(d);
	if (rc < 0) {
		domain_free(d);
		return rc;
	}
	d->attempted = d->loaded = true;
	d->start_ns = 0;
	*out = d;
	return 0;
}

int domain_new(struct daemon *dm, const struct config_domain *cfg, struct domain **out)
{
	struct domain *d = calloc(1, sizeof(*d));
	if (!d)
		return -ENOMEM;
	d->dm = dm;
	d->cfg = cfg;
	d->watch_io.fd = -1;
	d->refresh.io.fd = d->retry.io.fd = -1;
	d->start_ns = idc_now_ns();
	if (cfg->provider == CONFIG_PROVIDER_LDAP)
		return start_ldap_domain(d, out);
	int rc = files_new(cfg, &d->files);
	if (rc == 0)
		rc = loop_timer_init(&dm->loop, &d->refresh, on_refresh_timer, d);
	if (rc == 0)
		rc = loop_timer_init(&dm->loop, &d->retry, on_retry_timer, d);
	if (rc < 0) {
		idc_log(IDC_LOG_ERR, "domain %s: %s", cfg->name, idc_strerror(rc));
		domain_free(d);
		return rc;
	}
	start_watch(d);
	*out = d;
	return 0;
}

void domain_free(struct domain *d)
{
	if (!d)
		return;
	ldapdom_free(d->ldap);
	loop_io_forget(&d->watch_io); /* the watch closes its fd */
	files_watch_close(d->watch);
	loop_timer_close(&d->refresh);
	loop_timer_close(&d->retry);
	files_domain_free(d->files);
	free(d);
}

static void domain_free_deferred(void *p)
{
	struct domain *d = p;
	ldapdom_free(d->ldap);
	files_watch_close(d->watch);
	files_domain_free(d->files);
	free(d);
}

void domain_retire(struct domain *d)
{
	/* events of this batch may still point at its ios: close them now
	 * (the loop skips closed ios) and free the memory after the batch */
	ldapdom_close_io(d->ldap);
	loop_io_forget(&d->watch_io); /* the watch closes its fd */
	loop_timer_close(&d->refresh);
	loop_timer_close(&d->retry);
	if (loop_defer(&d->dm->loop, domain_free_deferred, d) < 0)
		return; /* leaked: freeing under a pending event would be worse */
}

static bool same_list(char *const *a, size_t na, char *const *b, size_t nb)
{
	if (na != nb)
		return false;
	for (size_t i = 0; i < na; i++)
		if (strcmp(a[i], b[i]) != 0)
			return false;
	return true;
}

bool domain_same_source(const struct config_domain *a, const struct config_domain *b)
{
	/* An ldap domain starts over on every reload (a new connection with
	 * the options in force; its cached entries stay). */
	if (a->provider == CONFIG_PROVIDER_LDAP || b->provider == CONFIG_PROVIDER_LDAP)
		return false;
	return strcmp(a->name, b->name) == 0 && a->provider == b->provider &&
	       a->entry_cache_timeout == b->entry_cache_timeout &&
	       same_list(a->passwd_files, a->npasswd, b->passwd_files, b->npasswd) &&
	       same_list(a->group_files, a->ngroup, b->group_files, b->ngroup);
}

struct domain *daemon_domain(struct daemon *dm, const char *name)
{
	for (size_t i = 0; i < dm->ndomains; i++)
		if (strcmp(dm->domains[i]->cfg->name, name) == 0)
			return dm->domains[i];
	return NULL;
}
