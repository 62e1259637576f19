/*
 * idcache perf: the benchmark is a program of its own (idcache-perf, built
 * from perf/), so the admin tool links neither Samba's ldb nor libldap.
 * This command only finds that program and hands it the command line.
 */
#include "cli.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef IDC_PERF_PATH
#define IDC_PERF_PATH "/usr/local/libexec/idcache/idcache-perf"
#endif

/* IDCACHE_PERF names another build of the program (a build tree's
 * perf/idcache-perf); secure_getenv, so a setuid caller cannot be pointed
 * at a program of someone else's choosing. */
static const char *perf_path(void)
{
	const char *env = secure_getenv("IDCACHE_PERF");
	return env && *env ? env : IDC_PERF_PATH;
}

int cli_perf_main(int argc, char **argv)
{
	const char *path = perf_path();
	char **args = calloc((size_t)argc + 1, sizeof(*args));
	if (!args)
		return cli_err("perf: %s", strerror(ENOMEM));
	args[0] = (char *)"idcache-perf";
	for (int i = 1; i < argc; i++)
		args[i] = argv[i];
	execv(path, args);
	int err = errno;
	free(args);
	if (err == ENOENT)
		return cli_err("perf: %s is not installed (configure with -Dperf=true, or set "
			       "IDCACHE_PERF to a build's perf/idcache-perf)",
			       path);
	return cli_err("perf: %s: %s", path, strerror(err));
}
