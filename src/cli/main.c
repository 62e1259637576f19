/*
 * idcache: entry point of the command-line tool. Parses the global options
 * and hands the rest of the command line to one subcommand from the table
 * below; adding a subcommand is one line here plus its own file.
 */
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#ifndef IDC_VERSION
#define IDC_VERSION "unknown"
#endif

struct cli_command {
	const char *name;
	int (*main)(int argc, char **argv);
	const char *summary;
};

static const struct cli_command commands[] = {
    {"db", cli_db_main, "manage a directory store: init, import, search, export, check"},
    {"status", cli_status_main, "show the running daemon's domains, counts and requests"},
    {"expire", cli_expire_main, "mark cached users or groups expired and refresh them"},
    {"reload", cli_reload_main, "make the daemon re-read its configuration"},
    {"user", cli_user_main, "show what the cache holds for a user"},
    {"group", cli_group_main, "show what the cache holds for a group"},
    {"ssh-authorized-keys", cli_ssh_keys_main, "print a user's SSH keys for sshd"},
    {"perf", cli_perf_main, "measure the store beside Samba ldb and OpenLDAP (idcache-perf)"},
};

/* ==== global options ============================================================= */

static void main_help(FILE *out)
{
	fputs("Usage: idcache [--verbose] COMMAND [ARGS...]\n"
	      "       idcache --help | --version\n"
	      "\n"
	      "Administer idcache, the identity cache behind the idcache NSS module.\n"
	      "\n"
	      "Commands:\n",
	      out);
	for (size_t i = 0; i < IDC_ARRAY_SIZE(commands); i++)
		fprintf(out, "  %-19s %s\n", commands[i].name, commands[i].summary);
	fputs("\n"
	      "Options:\n"
	      "  -h, --help      show this help and exit\n"
	      "  -V, --version   show the version and exit\n"
	      "  -v, --verbose   log what the store does (repeat for debug detail)\n"
	      "\n"
	      "Run 'idcache COMMAND --help' for a command's options; see idcache(1).\n"
	      "\n"
	      "Exit status: 0 success, 1 the operation failed, 2 wrong command line.\n",
	      out);
}

static const struct cli_command *find_command(const char *name)
{
	for (size_t i = 0; i < IDC_ARRAY_SIZE(commands); i++)
		if (strcmp(commands[i].name, name) == 0)
			return &commands[i];
	return NULL;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
	    {"help", no_argument, NULL, 'h'},
	    {"version", no_argument, NULL, 'V'},
	    {"verbose", no_argument, NULL, 'v'},
	    {NULL, 0, NULL, 0},
	};
	int level = IDC_LOG_WARN;
	int opt;
	/* '+': stop at the command name; its options are its own */
	while ((opt = getopt_long(argc, argv, "+hVv", longopts, NULL)) != -1) {
		switch (opt) {
		case 'h':
			main_help(stdout);
			return CLI_OK;
		case 'V':
			printf("idcache %s\n", IDC_VERSION);
			return CLI_OK;
		case 'v':
			level = level < IDC_LOG_DEBUG ? level + 1 : level;
			break;
		default:
			return cli_usage("idcache [--verbose] COMMAND [ARGS...]", "idcache");
		}
	}
	idc_log_init("idcache", true, level);
	if (optind >= argc)
		return cli_usage("idcache [--verbose] COMMAND [ARGS...]", "idcache");
	const struct cli_command *cmd = find_command(argv[optind]);
	if (!cmd) {
		fprintf(stderr, "idcache: unknown command '%s'\n", argv[optind]);
		return cli_usage("idcache [--verbose] COMMAND [ARGS...]", "idcache");
	}
	argv += optind;
	argc -= optind;
	optind = 0; /* glibc: full re-initialization for the next getopt user */
	return cmd->main(argc, argv);
}
