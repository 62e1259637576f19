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

#include "cli/msg.h"
#include "store/store.h"
#include "util/util.h"

/* ---- top-level subcommands (one file each) ---------------------------------- */
int cli_db_main(int argc, char **argv);
/* admin.c: requests to a running idcached */
int cli_status_main(int argc, char **argv);
int cli_expire_main(int argc, char **argv);
int cli_reload_main(int argc, char **argv);
int cli_user_main(int argc, char **argv);
int cli_group_main(int argc, char **argv);
/* The daemon's run directory: opt (--run-dir) when given, else
 * $IDCACHE_RUNDIR (secure_getenv), else PROTO_DEFAULT_RUN_DIR (admin.c). */
const char *cli_run_dir(const char *opt);
/* sshkeys.c: idcache ssh-authorized-keys, for sshd's AuthorizedKeysCommand */
int cli_ssh_keys_main(int argc, char **argv);
/* perf.c: idcache perf, handed to the idcache-perf program */
int cli_perf_main(int argc, char **argv);

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
/* The same with a map of at least map_size bytes (0: the store's default)
 * and any enum store_open_flags. */
int db_open_sized(struct db_ctx *ctx, unsigned flags, size_t map_size);

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
