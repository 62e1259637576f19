/*
 * ldap_lookup: drive the LDAP provider from the command line, the way the
 * daemon will — an epoll loop, lookups on a cache miss or expired entry,
 * answers read from the cache. For the benchmark and for poking at a
 * directory by hand.
 *
 *   ldap_lookup -d STATEDIR [-o key=value]... OP [ARG] [OP [ARG]]...
 *   OPs: pwnam NAME | pwuid UID | grnam NAME | grgid GID | initgroups NAME
 *        (always ask the directory), id NAME (initgroups only on a miss or
 *        expired entry, like `id`), enumerate, expire (all entries),
 *        status, sleep MS
 * Each op prints one line: what, result, milliseconds, LDAP searches sent
 * and durable cache commits during it, then the answer.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "providers/ldap/lprov.h"

static const char *const res_names[] = {"PENDING", "FOUND", "NOTFOUND", "OFFLINE", "FAILED"};

struct wait {
	bool done;
	enum lprov_lookup_result res;
};

static void on_done(enum lprov_lookup_result res, void *arg)
{
	struct wait *w = arg;
	w->done = true;
	w->res = res;
}

/* Run the provider's part of an event loop until w is done (bounded). */
static void run(struct lprov_domain *ld, struct wait *w)
{
	int ep = epoll_create1(EPOLL_CLOEXEC);
	int cur = -1;
	for (int guard = 0; !w->done && guard < 1000000; guard++) {
		int fd = -1;
		if (lprov_domain_fds(ld, &fd, 1) == 0)
			fd = -1;
		if (fd != cur) {
			if (cur >= 0)
				epoll_ctl(ep, EPOLL_CTL_DEL, cur, NULL);
			struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd};
			if (fd >= 0 && epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) != 0)
				fd = -1;
			cur = fd;
		}
		int64_t t = lprov_domain_next_timeout(ld);
		struct epoll_event ev;
		epoll_wait(ep, &ev, 1, t < 0 ? 1000 : (int)t);
		lprov_domain_process(ld);
	}
	close(ep);
}

static enum lprov_lookup_result ask(struct lprov_domain *ld, enum lprov_lookup_kind k,
				    const char *name, uint32_t id)
{
	struct wait w = {false, LPROV_LOOKUP_PENDING};
	enum lprov_lookup_result r = lprov_domain_lookup(ld, k, name, id, on_done, &w);
	if (r != LPROV_LOOKUP_PENDING)
		return r;
	run(ld, &w);
	return w.res;
}

/* How the answers printed follow nesting: as the provider fetched it
 * (ldap_group_nesting_level, set from the configuration). */
static struct cache_nesting nesting;

static void print_answer(struct cache *c, const char *dom, const char *op, const char *arg)
{
	struct cache_reader *r;
	if (cache_reader_begin(c, &r))
		return;
	const char *doms[] = {dom};
	struct cache_user u;
	struct cache_group g;
	uint32_t id = (uint32_t)strtoul(arg ? arg : "0", NULL, 10);
	int rc = -ENOENT;
	if (!strcmp(op, "pwnam") || !strcmp(op, "pwuid")) {
		rc = op[2] == 'n' ? cache_user_by_name(r, doms, 1, arg, false, &u, NULL)
				  : cache_user_by_uid(r, doms, 1, id, &u, NULL);
		if (!rc)
			printf("%s:%u:%u:%s:%s:%s\n", u.name, u.uid, u.gid, u.gecos, u.dir,
			       u.shell);
	} else if (!strcmp(op, "grnam") || !strcmp(op, "grgid")) {
		rc = op[2] == 'n' ? cache_group_by_name(r, doms, 1, arg, false, &g, NULL)
				  : cache_group_by_gid(r, doms, 1, id, &g, NULL);
		if (!rc) {
			printf("%s:%u:", g.name, g.gid);
			for (size_t i = 0; i < g.nmembers; i++)
				printf("%s%s", i ? "," : "", g.members[i]);
			printf(":");
			for (size_t i = 0; i < g.nmember_groups; i++)
				printf("%s%s", i ? "," : "", g.member_groups[i]);
			printf("\n");
		}
	} else if (!strcmp(op, "initgroups") || !strcmp(op, "id")) {
		static uint32_t gids[65536];
		size_t n = 0;
		rc = cache_initgroups(r, doms, 1, arg, false, &nesting, gids, IDC_ARRAY_SIZE(gids),
				      &n);
		if (!rc) {
			printf("groups=%zu:", n);
			for (size_t i = 0; i < n; i++)
				printf("%s%u", i ? "," : "", gids[i]);
			printf("\n");
		}
	}
	if (rc && rc != -ENOENT)
		printf("cache read: %s\n", idc_strerror(rc));
	cache_reader_end(r);
}

/* `id NAME`: the cache answers when it holds a fresh entry. */
static enum lprov_lookup_result id_like(struct lprov_domain *ld, struct cache *c, const char *dom,
					const char *name, bool *from_cache)
{
	struct cache_reader *r;
	struct cache_meta meta;
	struct cache_user u;
	const char *doms[] = {dom};
	*from_cache = false;
	if (cache_reader_begin(c, &r) == 0) {
		int rc = cache_user_by_name(r, doms, 1, name, false, &u, &meta);
		cache_reader_end(r);
		if (rc == 0 && !meta.expired) {
			*from_cache = true;
			return LPROV_LOOKUP_FOUND;
		}
	}
	return ask(ld, LPROV_LOOKUP_INITGROUPS, name, 0);
}

static int usage(void)
{
	fprintf(stderr, "usage: ldap_lookup -d STATEDIR [-o key=value]... OP [ARG]...\n");
	return 2;
}

static int do_op(struct lprov_domain *ld, struct cache *c, const char *dom, const char *op,
		 const char *arg)
{
	struct lprov_domain_status s0, s1;
	lprov_domain_get_status(ld, &s0);
	uint64_t commits0 = cache_durable_commits(c);
	uint64_t t0 = idc_now_ns();
	enum lprov_lookup_result res = LPROV_LOOKUP_FOUND;
	bool cached = false;
	uint32_t id = (uint32_t)strtoul(arg ? arg : "0", NULL, 10);
	if (!strcmp(op, "pwnam"))
		res = ask(ld, LPROV_LOOKUP_PWNAM, arg, 0);
	else if (!strcmp(op, "pwuid"))
		res = ask(ld, LPROV_LOOKUP_PWUID, NULL, id);
	else if (!strcmp(op, "grnam"))
		res = ask(ld, LPROV_LOOKUP_GRNAM, arg, 0);
	else if (!strcmp(op, "grgid"))
		res = ask(ld, LPROV_LOOKUP_GRGID, NULL, id);
	else if (!strcmp(op, "initgroups"))
		res = ask(ld, LPROV_LOOKUP_INITGROUPS, arg, 0);
	else if (!strcmp(op, "id"))
		res = id_like(ld, c, dom, arg, &cached);
	else if (!strcmp(op, "enumerate"))
		res = ask(ld, LPROV_LOOKUP_ENUMERATE, NULL, 0);
	else if (!strcmp(op, "expire")) {
		size_t n = 0;
		struct idc_diag d = {{0}};
		int rc = cache_expire(c, dom, CACHE_ANY, NULL, &n, &d);
		printf("expired %zu entries%s%s\n", n, rc ? ": " : "", rc ? d.msg : "");
	} else if (!strcmp(op, "sleep")) {
		usleep((useconds_t)id * 1000u);
	} else if (strcmp(op, "status")) {
		return usage();
	}
	double ms = (double)(idc_now_ns() - t0) / 1e6;
	lprov_domain_get_status(ld, &s1);
	printf("%s %s: %s%s ms=%.3f searches=%llu commits=%llu online=%d server=%s\n", op,
	       arg ? arg : "-", res_names[res], cached ? " (cache)" : "", ms,
	       (unsigned long long)(s1.searches - s0.searches),
	       (unsigned long long)(cache_durable_commits(c) - commits0), s1.online,
	       s1.server ? s1.server : "-");
	print_answer(c, dom, op, arg);
	fflush(stdout);
	return 0;
}

static bool takes_arg(const char *op)
{
	return strcmp(op, "enumerate") && strcmp(op, "expire") && strcmp(op, "status");
}

int main(int argc, char **argv)
{
	struct lprov_config cfg;
	const char *dir = NULL;
	struct idc_diag d = {{0}};
	idc_log_init("ldap_lookup", true,
		     getenv("LDAP_LOOKUP_DEBUG") ? IDC_LOG_DEBUG : IDC_LOG_WARN);
	if (lprov_config_init(&cfg, "ldap"))
		return 1;
	int opt;
	while ((opt = getopt(argc, argv, "d:o:")) != -1) {
		char *eq = opt == 'o' ? strchr(optarg, '=') : NULL;
		if (opt == 'd') {
			dir = optarg;
		} else if (eq) {
			*eq = '\0';
			if (lprov_config_set(&cfg, optarg, eq + 1, &d)) {
				fprintf(stderr, "%s\n", d.msg);
				return 2;
			}
		} else {
			return usage();
		}
	}
	if (!dir)
		return usage();
	struct cache *c;
	struct cache_options co = {.nosync = getenv("LDAP_LOOKUP_NOSYNC") != NULL};
	struct lprov_domain *ld;
	if (cache_open(dir, &co, &c, &d) || lprov_domain_new(&cfg, c, &ld, &d)) {
		fprintf(stderr, "ldap_lookup: %s\n", d.msg);
		return 1;
	}
	int rc = 0;
	nesting.depth = cfg.nesting_level;
	for (int i = optind; i < argc && !rc; i++) {
		const char *op = argv[i];
		const char *arg = takes_arg(op) && i + 1 < argc ? argv[++i] : NULL;
		rc = do_op(ld, c, cfg.name, op, arg);
	}
	lprov_domain_free(ld);
	cache_close(c);
	lprov_config_free(&cfg);
	return rc;
}
