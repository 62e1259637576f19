/*
 * ldap_harness: what the cmocka tests that run the LDAP provider against a
 * real slapd (test_ldap_slapd.c, test_ldap_refresh.c) share — a shell
 * command, a free loopback port, stopping the server, and a user's groups
 * as the cache answers them. Test code only; it uses cmocka's assertions.
 */
#ifndef IDC_TEST_LDAP_HARNESS_H
#define IDC_TEST_LDAP_HARNESS_H

#include <stddef.h>

#include "cache/cache.h"

/* system() of the formatted command line; its status. */
int lh_sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A loopback TCP port free a moment ago (bound to port 0, then released),
 * or -1. */
int lh_free_port(void);

/* SIGSTOP pid and wait (at most 10 s) until every thread of it is
 * stopped: kill returns before a thread running on another CPU has
 * stopped, and on a loaded machine one may still answer a request sent
 * after it. 0, or -1 (not stopped in time, or no such process). */
int lh_stop(int pid);

/* The gids initgroups gives user in domain from cache c, sorted, as
 * "a,b,c" in out[0..n). Fails the test when the cache cannot answer. */
void lh_gids_of(struct cache *c, const char *domain, const char *user, char *out, size_t n);

#endif
