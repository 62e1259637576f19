/*
 * ldap_harness: see ldap_harness.h.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "ldap_harness.h"

int lh_sh(const char *fmt, ...)
{
	char cmd[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	return system(cmd);
}

int lh_free_port(void)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(a);
	int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int port = -1;
	if (s >= 0 && bind(s, (struct sockaddr *)&a, sizeof(a)) == 0 &&
	    getsockname(s, (struct sockaddr *)&a, &len) == 0)
		port = ntohs(a.sin_port);
	if (s >= 0)
		close(s);
	return port;
}

/* Whether /proc/PID/task/TID/stat says the thread is stopped ('T'). */
static bool thread_stopped(int pid, const char *tid)
{
	char path[320], buf[512];
	snprintf(path, sizeof(path), "/proc/%d/task/%s/stat", pid, tid);
	FILE *f = fopen(path, "r");
	if (!f)
		return true; /* gone: it answers nothing */
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	const char *end = strrchr(buf, ')'); /* the command name may hold anything */
	return end && end[1] == ' ' && end[2] == 'T';
}

static bool all_stopped(int pid)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/task", pid);
	DIR *d = opendir(path);
	if (!d)
		return false;
	bool all = true;
	for (struct dirent *e; all && (e = readdir(d));)
		if (e->d_name[0] != '.')
			all = thread_stopped(pid, e->d_name);
	closedir(d);
	return all;
}

int lh_stop(int pid)
{
	if (kill(pid, SIGSTOP) != 0)
		return -1;
	for (int i = 0; i < 1000; i++) {
		if (all_stopped(pid))
			return 0;
		usleep(10000);
	}
	return -1;
}

void lh_gids_of(struct cache *c, const char *domain, const char *user, char *out, size_t n)
{
	const char *doms[] = {domain};
	struct cache_reader *r;
	uint32_t g[64];
	size_t cnt = 0;
	assert_int_equal(cache_reader_begin(c, &r), 0);
	const struct cache_nesting nest = {32, NULL, NULL}; /* the provider's default */
	assert_int_equal(cache_initgroups(r, doms, 1, user, false, &nest, g, 64, &cnt), 0);
	cache_reader_end(r);
	for (size_t i = 1; i < cnt; i++) /* a handful: insertion sort */
		for (size_t j = i; j > 0 && g[j - 1] > g[j]; j--) {
			uint32_t t = g[j];
			g[j] = g[j - 1];
			g[j - 1] = t;
		}
	size_t off = 0;
	out[0] = '\0';
	for (size_t i = 0; i < cnt && off < n; i++)
		off += (size_t)snprintf(out + off, n - off, "%s%u", i ? "," : "", g[i]);
}
