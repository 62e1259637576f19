/*
 * cli messages: how the `idcache` tools report failure. Shared by idcache
 * (src/cli) and idcache-perf (perf/), so both speak in one voice.
 *
 * Owns: the exit statuses and the "idcache: <what>: <why>" line on stderr.
 * May call: util (idc_strerror, idc_diag).
 * Conventions: each failure is printed once, by the function that decides
 * the exit status; these helpers return the status to return.
 * Threads: stdio only; safe wherever stderr is.
 */
#ifndef IDC_CLI_MSG_H
#define IDC_CLI_MSG_H

#include <stddef.h>

#include "util/util.h"

/* Exit statuses shared by every subcommand (documented in idcache(1)). */
enum cli_exit {
	CLI_OK = 0,    /* done */
	CLI_FAIL = 1,  /* the operation failed; nothing half-done was kept */
	CLI_USAGE = 2, /* the command line is wrong */
};

/* "idcache: " + printf text + "\n" on stderr. Returns CLI_FAIL. */
int cli_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Report a failed call: "idcache: <context>: <why>", where why is d's
 * message, or idc_strerror(rc) when d is empty or NULL. Returns CLI_FAIL. */
int cli_fail(int rc, const struct idc_diag *d, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Print "usage: <line>" and a pointer to --help on stderr. Returns CLI_USAGE. */
int cli_usage(const char *usage_line, const char *help_cmd);

/* Parse a non-negative decimal integer that fits size_t. 0 or -EINVAL. */
int cli_parse_size(const char *s, size_t *out);

#endif
