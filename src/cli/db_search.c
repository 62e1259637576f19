/*
 * `idcache db search` and `idcache db export`: both walk the store with
 * store_search in one read transaction of a read-only handle and print LDIF
 * (ldif_write_entry), so search output diffs against `ldapsearch -LLL` and
 * export output re-imports.
 */
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ==== LDIF output ============================================================ */

#define SINK_FLUSH_AT (64u << 10)

/* Entries formatted into buf and written to f in large pieces. */
struct ldif_sink {
	FILE *f;
	struct idc_buf buf;
	const char *const *attrs; /* NULL: all */
	size_t nattrs;
	size_t count;
};

static int sink_flush(struct ldif_sink *s)
{
	if (s->buf.len && fwrite(s->buf.data, 1, s->buf.len, s->f) != s->buf.len)
		return errno ? -errno : -EIO;
	idc_buf_reset(&s->buf);
	return 0;
}

/* store_entry_cb: format one entry. */
static int sink_entry(const struct store_entry *e, void *arg)
{
	struct ldif_sink *s = arg;
	int rc = ldif_write_entry(&s->buf, e, s->attrs, s->nattrs);
	if (rc != 0)
		return rc;
	s->count++;
	return s->buf.len >= SINK_FLUSH_AT ? sink_flush(s) : 0;
}

/* ==== output file ============================================================= */

/* Export to a file goes to a temporary name beside it and is renamed over
 * it at the end, so a failed export never leaves a truncated file behind. */
struct out_file {
	FILE *f;
	const char *path; /* NULL: stdout */
	char *tmp;
};

static int out_open(struct out_file *o, const char *path)
{
	*o = (struct out_file){stdout, NULL, NULL};
	if (!path || strcmp(path, "-") == 0)
		return 0;
	o->path = path;
	if (asprintf(&o->tmp, "%s.XXXXXX", path) < 0)
		return -ENOMEM;
	int fd = mkstemp(o->tmp);
	if (fd < 0) {
		int rc = -errno;
		free(o->tmp);
		o->tmp = NULL;
		return rc;
	}
	mode_t mask = umask(0);
	umask(mask);
	(void)fchmod(fd, 0666 & ~mask); /* as if created by open(2) */
	o->f = fdopen(fd, "w");
	if (!o->f) {
		int rc = -errno;
		close(fd);
		unlink(o->tmp);
		free(o->tmp);
		return rc;
	}
	return 0;
}

/* Finish the output: on ok, make it durable and put it in place. Returns
 * 0 or -errno (the temporary file is removed on any failure). */
static int out_close(struct out_file *o, bool ok)
{
	if (!o->path)
		return fflush(stdout) == 0 ? 0 : -errno;
	int rc = 0;
	if (fflush(o->f) != 0 || fsync(fileno(o->f)) != 0)
		rc = -errno;
	if (fclose(o->f) != 0 && rc == 0)
		rc = -errno;
	if (ok && rc == 0 && rename(o->tmp, o->path) != 0)
		rc = -errno;
	if (!ok || rc != 0)
		unlink(o->tmp);
	free(o->tmp);
	return rc;
}

/* ==== shared pieces ============================================================= */

/* A syntax error in -b is reported here, with the position, rather than as
 * a failed search. */
static int check_base(const char *cmd, const char *base)
{
	struct store_ndn ndn = STORE_NDN_INIT;
	struct idc_diag d = {{0}};
	int rc = store_dn_normalize(base, strlen(base), &ndn, &d);
	store_ndn_free(&ndn);
	if (rc != 0)
		return cli_fail(rc, &d, "%s: -b '%s'", cmd, base);
	return CLI_OK;
}

static int begin_read(struct db_ctx *ctx, struct store_txn **t)
{
	struct idc_diag d = {{0}};
	int rc = store_txn_begin(ctx->store, NULL, STORE_TXN_RDONLY, t, &d);
	if (rc != 0)
		return cli_fail(rc, &d, "%s: %s", ctx->name, ctx->dir);
	return CLI_OK;
}

/* Map store_search's result to an exit status and message. */
static int search_result(struct db_ctx *ctx, int rc, const struct store_search *q,
			 const struct idc_diag *d)
{
	if (rc == 0)
		return CLI_OK;
	if (rc == -ENOENT && q->base.len)
		return cli_err("%s: base '%.*s' does not exist", ctx->name, (int)q->base.len,
			       q->base.ptr);
	return cli_fail(rc, d, "%s", ctx->name);
}

/* ==== search ======================================================================= */

struct search_args {
	const char *base;
	enum store_scope scope;
	size_t sizelimit;
	bool explain;
	const char *filter;
	const char **attrs;
	size_t nattrs;
};

static int parse_scope(const char *s, enum store_scope *out)
{
	static const char *const names[] = {"base", "one", "sub"};
	static const enum store_scope scopes[] = {STORE_SCOPE_BASE, STORE_SCOPE_ONE,
						  STORE_SCOPE_SUB};
	for (size_t i = 0; i < IDC_ARRAY_SIZE(names); i++) {
		if (strcmp(s, names[i]) == 0) {
			*out = scopes[i];
			return 0;
		}
	}
	return -EINVAL;
}

/* Requested attributes in the canonical form ldif_write_entry compares
 * with; "*", "1.1" and "+" pass through. The copies live in arena. */
static int canon_attrs(struct search_args *a, char **argv, int n, struct idc_arena *arena)
{
	a->attrs = idc_arena_alloc(arena, sizeof(*a->attrs) * (size_t)(n ? n : 1));
	if (!a->attrs)
		return cli_err("search: out of memory");
	for (int i = 0; i < n; i++) {
		const char *s = argv[i];
		char canon[STORE_ATTR_MAX];
		size_t len = strlen(s);
		if (strcmp(s, "*") && strcmp(s, "1.1") && strcmp(s, "+")) {
			len = store_attr_canon(s, len, canon);
			if (len == 0)
				return cli_err("search: '%s' is not an attribute name", s);
			s = canon;
		}
		if (!(a->attrs[i] = idc_arena_strndup(arena, s, len)))
			return cli_err("search: out of memory");
	}
	a->nattrs = (size_t)n;
	return CLI_OK;
}

/* -1 to go on, or the exit status to return now. */
static int search_parse(struct db_ctx *ctx, int argc, char **argv, struct search_args *a,
			struct idc_arena *arena)
{
	static const struct option longopts[] = {
	    {"dir", required_argument, NULL, 'd'},
	    {"help", no_argument, NULL, 'h'},
	    {"base", required_argument, NULL, 'b'},
	    {"scope", required_argument, NULL, 's'},
	    {"sizelimit", required_argument, NULL, 'z'},
	    {"explain", no_argument, NULL, 'E'},
	    {NULL, 0, NULL, 0},
	};
	int opt, rc;
	while ((opt = getopt_long(argc, argv, "d:hb:s:z:", longopts, NULL)) != -1) {
		if (opt == 'b') {
			a->base = optarg;
		} else if (opt == 's') {
			if (parse_scope(optarg, &a->scope) != 0) {
				fprintf(stderr,
					"idcache: search: -s: '%s' is not base, one or sub\n",
					optarg);
				return db_usage(ctx);
			}
		} else if (opt == 'z') {
			if (cli_parse_size(optarg, &a->sizelimit) != 0) {
				fprintf(stderr, "idcache: search: -z: '%s' is not a number\n",
					optarg);
				return db_usage(ctx);
			}
		} else if (opt == 'E') {
			a->explain = true;
		} else if ((rc = db_other_opt(ctx, opt)) >= 0) {
			return rc;
		}
	}
	if (optind < argc)
		a->filter = argv[optind++];
	rc = canon_attrs(a, argv + optind, argc - optind, arena);
	return rc == CLI_OK ? -1 : rc;
}

static int search_run(struct db_ctx *ctx, const struct search_args *a, struct store_search *q)
{
	struct store_txn *t;
	int rc = begin_read(ctx, &t);
	if (rc != CLI_OK)
		return rc;
	struct idc_diag d = {{0}};
	if (a->explain) {
		struct idc_buf plan = IDC_BUF_INIT;
		rc = store_search_plan(t, q, &plan);
		if (rc == 0)
			printf("%s\n", plan.data ? plan.data : "");
		idc_buf_free(&plan);
		store_txn_abort(t);
		return rc == 0 ? CLI_OK : search_result(ctx, rc, q, &d);
	}
	struct ldif_sink sink = {stdout, IDC_BUF_INIT, a->attrs, a->nattrs, 0};
	rc = store_search(t, q, sink_entry, &sink, &d);
	int wrc = sink_flush(&sink);
	idc_buf_free(&sink.buf);
	store_txn_abort(t);
	if (wrc != 0)
		return cli_fail(wrc, NULL, "search: writing output");
	if (rc == IDC_ESIZELIMIT) {
		/* the entries asked for were all printed: a warning, not a failure */
		cli_err("size limit exceeded (%zu %s)", sink.count,
			sink.count == 1 ? "entry" : "entries");
		return CLI_OK;
	}
	return search_result(ctx, rc, q, &d);
}

int db_cmd_search(struct db_ctx *ctx, int argc, char **argv)
{
	struct search_args a = {.base = "", .scope = STORE_SCOPE_SUB, .filter = "(objectClass=*)"};
	struct idc_arena arena = IDC_ARENA_INIT;
	struct store_filter *filter = NULL;
	int rc = search_parse(ctx, argc, argv, &a, &arena);
	if (rc >= 0 || (rc = check_base("search", a.base)) != CLI_OK)
		goto out;
	struct idc_diag d = {{0}};
	int prc = store_filter_parse(a.filter, strlen(a.filter), &filter, &d);
	if (prc != 0) {
		rc = cli_fail(prc, &d, "search: '%s'", a.filter);
		goto out;
	}
	if ((rc = db_open(ctx, STORE_RDONLY)) != CLI_OK)
		goto out;
	struct store_search q = {{a.base, strlen(a.base)}, a.scope, filter, a.sizelimit};
	rc = search_run(ctx, &a, &q);
out:
	store_filter_free(filter);
	idc_arena_free(&arena);
	return rc;
}

/* ==== export ======================================================================== */

static int export_run(struct db_ctx *ctx, const char *base, struct out_file *o)
{
	struct store_txn *t;
	int rc = begin_read(ctx, &t);
	if (rc != CLI_OK)
		return rc;
	/* a subtree walk returns entries in dn2id order: parents first */
	struct store_search q = {{base, strlen(base)}, STORE_SCOPE_SUB, NULL, 0};
	struct ldif_sink sink = {o->f, IDC_BUF_INIT, NULL, 0, 0};
	struct idc_diag d = {{0}};
	rc = store_search(t, &q, sink_entry, &sink, &d);
	int wrc = sink_flush(&sink);
	idc_buf_free(&sink.buf);
	store_txn_abort(t);
	if (rc != 0)
		return search_result(ctx, rc, &q, &d);
	if (wrc != 0)
		return cli_fail(wrc, NULL, "export: writing %s", o->path ? o->path : "output");
	return CLI_OK;
}

int db_cmd_export(struct db_ctx *ctx, int argc, char **argv)
{
	static const struct option longopts[] = {
	    {"dir", required_argument, NULL, 'd'},
	    {"help", no_argument, NULL, 'h'},
	    {"base", required_argument, NULL, 'b'},
	    {NULL, 0, NULL, 0},
	};
	const char *base = "";
	int opt, rc;
	while ((opt = getopt_long(argc, argv, "d:hb:", longopts, NULL)) != -1) {
		if (opt == 'b')
			base = optarg;
		else if ((rc = db_other_opt(ctx, opt)) >= 0)
			return rc;
	}
	if (argc - optind > 1)
		return db_usage(ctx);
	const char *path = optind < argc ? argv[optind] : NULL;
	if ((rc = check_base("export", base)) != CLI_OK || (rc = db_open(ctx, STORE_RDONLY)))
		return rc;
	struct out_file o;
	int orc = out_open(&o, path);
	if (orc != 0)
		return cli_fail(orc, NULL, "export: cannot create %s", path);
	rc = export_run(ctx, base, &o);
	orc = out_close(&o, rc == CLI_OK);
	if (orc != 0 && rc == CLI_OK)
		rc = cli_fail(orc, NULL, "export: writing %s", path ? path : "output");
	return rc;
}
