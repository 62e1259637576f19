/*
 * `idcache db`: administer a directory store directly through the store API
 * (no daemon involved). This file holds the front end (the -d option, the
 * subcommand table, opening the store) and the small subcommands: init,
 * delete, index, check, stats. import/modify live in db_import.c,
 * search/export in db_search.c, the help texts in db_help.c.
 */
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>

static const char default_indexes[] = "objectClass,uid,cn,uidNumber,gidNumber,member,memberUid";

/* ==== shared front end ======================================================== */

int db_usage(const struct db_ctx *ctx)
{
	char usage[512], help[64];
	const char *syn = db_synopsis(ctx->name);
	snprintf(usage, sizeof(usage), "%s", syn ? syn : db_synopsis(NULL));
	snprintf(help, sizeof(help), "idcache db %s", ctx->name ? ctx->name : "");
	return cli_usage(usage, ctx->name ? help : "idcache db");
}

int db_other_opt(struct db_ctx *ctx, int opt)
{
	switch (opt) {
	case 'd':
		ctx->dir = optarg;
		return -1;
	case 'h':
		db_help(stdout, ctx->name);
		return CLI_OK;
	default: /* getopt already said what was wrong */
		return db_usage(ctx);
	}
}

/* The hint that turns a bare error code into something a person can act on
 * (unless the store's message already gives it). */
static const char *open_hint(int rc, const struct db_ctx *ctx, const char *msg, char *buf, size_t n)
{
	switch (rc) {
	case IDC_ENOTSTORE:
		snprintf(buf, n, " (create one with 'idcache db -d %s init')", ctx->dir);
		return strstr(msg, "init") ? "" : buf;
	case -EACCES:
	case -EROFS:
		return " (writing needs write access to the directory and its files)";
	default:
		return "";
	}
}

static int missing_dir(const struct db_ctx *ctx)
{
	fprintf(stderr, "idcache: db %s: the store directory is missing (-d DIR)\n", ctx->name);
	return db_usage(ctx);
}

int db_open(struct db_ctx *ctx, unsigned flags)
{
	return db_open_sized(ctx, flags, 0);
}

int db_open_sized(struct db_ctx *ctx, unsigned flags, size_t map_size)
{
	if (!ctx->dir)
		return missing_dir(ctx);
	struct store_options opt = {.flags = flags, .map_size = map_size};
	struct idc_diag d = {{0}};
	int rc = store_open(ctx->dir, &opt, &ctx->store, &d);
	if (rc == 0)
		return CLI_OK;
	char hint[PATH_MAX + 64];
	if (!d.msg[0])
		snprintf(d.msg, sizeof(d.msg), "%s", ctx->dir);
	idc_diag_complete(&d, rc);
	return cli_err("%s: %s%s", ctx->name, d.msg, open_hint(rc, ctx, d.msg, hint, sizeof(hint)));
}

/* Report a failed write transaction. */
static int write_failed(const struct db_ctx *ctx, int rc, const struct idc_diag *d)
{
	return cli_fail(rc, d, "%s", ctx->name);
}

/* ==== init ============================================================================ */

/* Split a comma-separated list in place (s is modified). Returns the count
 * or -E2BIG past max. Empty items are skipped. */
static int split_list(char *s, const char **out, size_t max)
{
	size_t n = 0;
	for (char *save = NULL, *tok = strtok_r(s, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		if (n == max)
			return -E2BIG;
		out[n++] = tok;
	}
	return (int)n;
}

/* An existing store must not be re-initialized: its indexes would silently
 * differ from what -i asked for. */
static int init_check_absent(const char *dir)
{
	struct store *s;
	struct store_options ro = {.flags = STORE_RDONLY};
	int rc = store_open(dir, &ro, &s, NULL);
	if (rc == 0) {
		store_close(s);
		return cli_err("init: %s: a store already exists there", dir);
	}
	if (rc == -ENOENT && mkdir(dir, 0777) != 0 && errno != EEXIST)
		return cli_fail(-errno, NULL, "init: cannot create %s", dir);
	return CLI_OK;
}

static int cmd_init(struct db_ctx *ctx, int argc, char **argv)
{
	static const struct option longopts[] = {
	    {"dir", required_argument, NULL, 'd'},
	    {"help", no_argument, NULL, 'h'},
	    {"index", required_argument, NULL, 'i'},
	    {NULL, 0, NULL, 0},
	};
	char list[4096];
	snprintf(list, sizeof(list), "%s", default_indexes);
	int opt, rc;
	while ((opt = getopt_long(argc, argv, "d:hi:", longopts, NULL)) != -1) {
		if (opt == 'i')
			snprintf(list, sizeof(list), "%s", optarg);
		else if ((rc = db_other_opt(ctx, opt)) >= 0)
			return rc;
	}
	if (optind != argc)
		return db_usage(ctx);
	if (!ctx->dir)
		return missing_dir(ctx);
	const char *names[256];
	int n = split_list(list, names, IDC_ARRAY_SIZE(names));
	if (n < 0)
		return cli_err("init: too many indexes (at most %zu)", IDC_ARRAY_SIZE(names));
	for (int i = 0; i < n; i++) {
		char canon[STORE_ATTR_MAX];
		if (store_attr_canon(names[i], strlen(names[i]), canon) == 0)
			return cli_err("init: -i: '%s' is not an attribute name", names[i]);
	}
	if ((rc = init_check_absent(ctx->dir)) != CLI_OK)
		return rc;
	struct store_options sopt = {
	    .flags = STORE_CREATE, .indexes = names, .nindexes = (size_t)n};
	struct idc_diag d = {{0}};
	rc = store_open(ctx->dir, &sopt, &ctx->store, &d);
	if (rc != 0)
		return cli_fail(rc, &d, "init: %s", ctx->dir);
	printf("created store in %s (%d indexes)\n", ctx->dir, n);
	return CLI_OK;
}

/* ==== delete ========================================================================== */

struct delete_job {
	char **dns;
	int ndns;
	bool subtree;
};

static int delete_fn(struct store_txn *t, void *arg, struct idc_diag *d)
{
	const struct delete_job *job = arg;
	for (int i = 0; i < job->ndns; i++) {
		struct store_val dn = {job->dns[i], strlen(job->dns[i])};
		int rc = store_delete(t, dn, job->subtree, d);
		if (rc != 0) {
			store_diag_about(d, rc, NULL, dn);
			if (rc == IDC_ENOTLEAF && strlen(d->msg) + 32 < sizeof(d->msg))
				strcat(d->msg, " (-r deletes the subtree)");
			return rc;
		}
	}
	return 0;
}

static int cmd_delete(struct db_ctx *ctx, int argc, char **argv)
{
	static const struct option longopts[] = {
	    {"dir", required_argument, NULL, 'd'},
	    {"help", no_argument, NULL, 'h'},
	    {"recursive", no_argument, NULL, 'r'},
	    {NULL, 0, NULL, 0},
	};
	struct delete_job job = {0};
	int opt, rc;
	while ((opt = getopt_long(argc, argv, "d:hr", longopts, NULL)) != -1) {
		if (opt == 'r')
			job.subtree = true;
		else if ((rc = db_other_opt(ctx, opt)) >= 0)
			return rc;
	}
	if (optind == argc)
		return db_usage(ctx);
	job.dns = argv + optind;
	job.ndns = argc - optind;
	if ((rc = db_open(ctx, 0)) != CLI_OK)
		return rc;
	struct idc_diag d = {{0}};
	rc = store_write(ctx->store, 0, delete_fn, &job, &d);
	if (rc != 0)
		return write_failed(ctx, rc, &d);
	return CLI_OK;
}

/* ==== index =========================================================================== */

static int index_list(struct db_ctx *ctx)
{
	int rc = db_open(ctx, STORE_RDONLY);
	if (rc != CLI_OK)
		return rc;
	const char *const *names;
	size_t n = store_index_list(ctx->store, &names);
	for (size_t i = 0; i < n; i++)
		printf("%s\n", names[i]);
	return CLI_OK;
}

struct index_job {
	const char *attr;
	bool add;
};

static int index_fn(struct store_txn *t, void *arg, struct idc_diag *d)
{
	const struct index_job *job = arg;
	return job->add ? store_index_add(t, job->attr, d) : store_index_remove(t, job->attr, d);
}

static int index_change(struct db_ctx *ctx, const char *attr, bool add)
{
	char canon[STORE_ATTR_MAX];
	if (store_attr_canon(attr, strlen(attr), canon) == 0)
		return cli_err("index: '%s' is not an attribute name", attr);
	int rc = db_open(ctx, 0);
	if (rc != CLI_OK)
		return rc;
	struct index_job job = {attr, add};
	struct idc_diag d = {{0}};
	rc = store_write(ctx->store, 0, index_fn, &job, &d);
	if (rc == -EEXIST)
		return cli_err("index add: '%s' is already indexed", attr);
	if (rc == -ENOENT && !add)
		return cli_err("index remove: '%s' is not indexed", attr);
	if (rc != 0)
		return write_failed(ctx, rc, &d);
	return CLI_OK;
}

static int cmd_index(struct db_ctx *ctx, int argc, char **argv)
{
	static const struct option longopts[] = {
	    {"dir", required_argument, NULL, 'd'},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	int opt, rc;
	while ((opt = getopt_long(argc, argv, "d:h", longopts, NULL)) != -1)
		if ((rc = db_other_opt(ctx, opt)) >= 0)
			return rc;
	int nargs = argc - optind;
	const char *action = nargs > 0 ? argv[optind] : "";
	if (strcmp(action, "list") == 0 && nargs == 1)
		return index_list(ctx);
	if (strcmp(action, "add") == 0 && nargs == 2)
		return index_change(ctx, argv[optind + 1], true);
	if (strcmp(action, "remove") == 0 && nargs == 2)
		return index_change(ctx, argv[optind + 1], false);
	return db_usage(ctx);
}

/* ==== check, stats ======================================================================== */

static void print_fault(const char *fault, void *arg)
{
	(void)arg;
	printf("%s\n", fault);
}

/* Run fn in a read transaction of a store opened read-only. */
static int with_read_txn(struct db_ctx *ctx, int (*fn)(struct db_ctx *, struct store_txn *))
{
	int rc = db_open(ctx, STORE_RDONLY);
	if (rc != CLI_OK)
		return rc;
	struct store_txn *t;
	struct idc_diag d = {{0}};
	if ((rc = store_txn_begin(ctx->store, NULL, STORE_TXN_RDONLY, &t, &d)) != 0)
		return cli_fail(rc, &d, "%s: %s", ctx->name, ctx->dir);
	rc = fn(ctx, t);
	store_txn_abort(t);
	return rc;
}

static int check_run(struct db_ctx *ctx, struct store_txn *t)
{
	struct store_stats st = {0};
	int rc = store_stats(t, &st);
	if (rc != 0)
		return cli_fail(rc, NULL, "check: %s", ctx->dir);
	printf("store is consistent (%llu entries)\n", (unsigned long long)st.entries);
	return CLI_OK;
}

/* The check runs in a child process (store_verify): a damaged file that
 * faults LMDB ends the child, and this says "damaged" instead of dying. */
static int check_verify(struct db_ctx *ctx)
{
	if (!ctx->dir)
		return missing_dir(ctx);
	struct idc_diag d = {{0}};
	long faults = store_verify(ctx->dir, STORE_VERIFY_FULL, print_fault, NULL, &d);
	if (faults == IDC_ECORRUPT)
		return cli_err("check: damaged: %s", d.msg);
	if (faults == IDC_ENOTSTORE)
		return db_open(ctx, STORE_RDONLY); /* its message and hint */
	if (faults < 0)
		return cli_fail((int)faults, &d, "check: %s", ctx->dir);
	if (faults > 0) {
		printf("%ld fault%s\n", faults, faults == 1 ? "" : "s");
		return CLI_FAIL;
	}
	return with_read_txn(ctx, check_run);
}

/* "1234567 (1.2 MiB)" */
static void print_bytes(const char *label, size_t n)
{
	static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
	double v = (double)n;
	size_t u = 0;
	while (v >= 1024 && u + 1 < IDC_ARRAY_SIZE(unit)) {
		v /= 1024;
		u++;
	}
	printf("%-15s %zu (%.1f %s)\n", label, n, v, unit[u]);
}

static int stats_run(struct db_ctx *ctx, struct store_txn *t)
{
	struct store_stats st = {0};
	int rc = store_stats(t, &st);
	if (rc != 0)
		return cli_fail(rc, NULL, "stats: %s", ctx->dir);
	printf("%-15s %llu\n", "entries:", (unsigned long long)st.entries);
	printf("%-15s %llu\n", "next id:", (unsigned long long)st.next_id);
	print_bytes("map size:", st.map_size);
	print_bytes("used:", st.used_bytes);
	print_bytes("file size:", st.file_bytes);
	printf("%-15s %u\n", "format version:", st.format_version);
	const char *const *names;
	size_t n = store_index_list(ctx->store, &names);
	printf("%-15s", "indexes:");
	for (size_t i = 0; i < n; i++)
		printf(" %s", names[i]);
	printf("\n");
	return CLI_OK;
}

/* check and stats take no arguments besides the common ones; fn NULL:
 * check. */
static int cmd_readonly(struct db_ctx *ctx, int argc, char **argv,
			int (*fn)(struct db_ctx *, struct store_txn *))
{
	static const struct option longopts[] = {
	    {"dir", required_argument, NULL, 'd'},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	int opt, rc;
	while ((opt = getopt_long(argc, argv, "d:h", longopts, NULL)) != -1)
		if ((rc = db_other_opt(ctx, opt)) >= 0)
			return rc;
	if (optind != argc)
		return db_usage(ctx);
	return fn ? with_read_txn(ctx, fn) : check_verify(ctx);
}

static int cmd_check(struct db_ctx *ctx, int argc, char **argv)
{
	return cmd_readonly(ctx, argc, argv, NULL);
}

static int cmd_stats(struct db_ctx *ctx, int argc, char **argv)
{
	return cmd_readonly(ctx, argc, argv, stats_run);
}

/* ==== dispatch ============================================================================= */

struct db_command {
	const char *name;
	int (*run)(struct db_ctx *ctx, int argc, char **argv);
};

static const struct db_command db_commands[] = {
    {"init", cmd_init},        {"import", db_cmd_import}, {"export", db_cmd_export},
    {"search", db_cmd_search}, {"modify", db_cmd_modify}, {"delete", cmd_delete},
    {"index", cmd_index},      {"check", cmd_check},      {"stats", cmd_stats},
};

int cli_db_main(int argc, char **argv)
{
	static const struct option longopts[] = {
	    {"dir", required_argument, NULL, 'd'},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	struct db_ctx ctx = {0};
	int opt, rc;
	/* '+': stop at the subcommand, which parses its own options */
	while ((opt = getopt_long(argc, argv, "+d:h", longopts, NULL)) != -1)
		if ((rc = db_other_opt(&ctx, opt)) >= 0)
			return rc;
	if (optind >= argc)
		return db_usage(&ctx);
	const char *name = argv[optind];
	for (size_t i = 0; i < IDC_ARRAY_SIZE(db_commands); i++) {
		if (strcmp(db_commands[i].name, name) != 0)
			continue;
		ctx.name = name;
		argc -= optind;
		argv += optind;
		optind = 0; /* glibc: re-initialize for the subcommand's options */
		rc = db_commands[i].run(&ctx, argc, argv);
		if (ctx.store)
			store_close(ctx.store);
		if (fflush(stdout) != 0 && rc == CLI_OK)
			rc = cli_err("db %s: writing output: %s", name, strerror(errno));
		return rc;
	}
	fprintf(stderr, "idcache: db: unknown subcommand '%s'\n", name);
	return db_usage(&ctx);
}
