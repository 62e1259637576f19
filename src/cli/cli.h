/*
 * cli: the `idcache` command-line tool. Internal header of src/cli only.
 *
 * Each top-level subcommand is one entry function in its own file, listed
 * in main.c's command table. Entry functions get argv with argv[0] set to
 * the subcommand's name and return the process exit status (enum below).
 * Messages go to stderr as "idcache: <what>: <why>", one line per failure,
 * printed once by the function that decides the exit status.
 */
#ifndef IDC_CLI_H
#define IDC_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "store/store.h"
#include "util/util.h"

/* Exit statuses shared by every subcommand (documented in idcache(1)). */
enum cli_exit {
	CLI_OK = 0,    /* done */
	CLI_FAIL = 1,  /* the operation failed; nothing half-done was kept */
	CLI_USAGE = 2, /* the command line is wrong */
};

/* ---- top-level subcommands (one file each) ---------------------------------- */
int cli_db_main(int argc, char **argv);
/* admin.c: requests to a running idcached */
int cli_status_main(int argc, char **argv);
int cli_expire_main(int argc, char **argv);
int cli_reload_main(int argc, char **argv);
int cli_user_main(int argc, char **argv);
int cli_group_main(int argc, char **argv);
/* perf_main.c: idcache perf list/run/compare/plot */
int cli_perf_main(int argc, char **argv);

/* ---- messages (main.c) --------------------------------------------------------- */

/* "idcache: " + printf text + "\n" on stderr. Returns CLI_FAIL. */
int cli_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Report a failed call: "idcache: <context>: <why>", where why is d's
 * message, or idc_strerror(rc) when d is empty or NULL. Returns CLI_FAIL. */
int cli_fail(int rc, const struct idc_diag *d, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Make sure d->msg says something: idc_strerror(rc) when it is empty. */
void cli_diag_complete(struct idc_diag *d, int rc);

/* Complete d (as above) and prefix it with "op 'dn': ", or just "op: "
 * when the message already names dn. op may be NULL: no op word. */
void cli_diag_about(struct idc_diag *d, int rc, const char *op, struct store_val dn);

/* Print "usage: <line>" and a pointer to --help on stderr. Returns CLI_USAGE. */
int cli_usage(const char *usage_line, const char *help_cmd);

/* Parse a non-negative decimal integer that fits size_t. 0 or -EINVAL. */
int cli_parse_size(const char *s, size_t *out);

/* ---- db subcommands (db*.c) --------------------------------------------------------- */

/* What a db subcommand needs from the shared front end (db.c). */
struct db_ctx {
	const char *dir;  /* -d DIR, from `idcache db -d DIR` or the subcommand */
	const char *name; /* subcommand name, for messages */
	struct store *store;
};

/* Open the store in ctx->dir (flags: STORE_RDONLY or 0). Returns CLI_OK,
 * CLI_USAGE without -d, or CLI_FAIL with a hint for the usual causes. */
int db_open(struct db_ctx *ctx, unsigned flags);

/* Options every db subcommand takes besides its own: -d DIR, -h/--help;
 * and getopt's '?' for an unknown one. Call from the default: branch of the
 * getopt loop. Returns -1 to keep parsing or the exit status to return now
 * (help printed: CLI_OK; bad option: CLI_USAGE). */
int db_other_opt(struct db_ctx *ctx, int opt);

/* Report a usage error for the current subcommand: CLI_USAGE. */
int db_usage(const struct db_ctx *ctx);

int db_cmd_import(struct db_ctx *ctx, int argc, char **argv);
int db_cmd_modify(struct db_ctx *ctx, int argc, char **argv);
int db_cmd_search(struct db_ctx *ctx, int argc, char **argv);
int db_cmd_export(struct db_ctx *ctx, int argc, char **argv);

/* ---- help texts (db_help.c) ------------------------------------------------------ */

/* Print the --help text of db subcommand name (NULL: of `idcache db`).
 * Returns false for an unknown name. */
bool db_help(FILE *out, const char *name);
/* The synopsis of db subcommand name (without "usage: "), or NULL. */
const char *db_synopsis(const char *name);

#endif
