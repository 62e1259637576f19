/*
 * idcache-perf: the program behind `idcache perf list|run|compare|plot` —
 * the command line. Parsing and dispatch only; the run is perf_run.c, the output perf_report.c and
 * perf_svg.c.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/msg.h"
#include "engines/engine.h"
#include "perf.h"

#define USAGE_RUN                                                                                  \
	"idcache perf run [--tests T,...] [--users N,...] [--threads N,...] [--engines E,...]\n"   \
	"                        [--samples N] [--seconds S] [--budget S] [--cold|--hot]\n"        \
	"                        [--seed N] [--dir DIR] [--out results.json]"

static void perf_help(FILE *out)
{
	fputs("Usage: idcache perf list\n"
	      "       " USAGE_RUN "\n"
	      "       idcache perf compare A.json B.json [--html report.html]\n"
	      "       idcache perf plot results.json --out plot.svg [--html page.html]\n"
	      "\n"
	      "Measure idcache's store beside Samba ldb and OpenLDAP on the same generated\n"
	      "data: import, export, searches, modify and add; and glibc's getpwnam_r,\n"
	      "getpwuid_r and getgrouplist answered by idcached's memory cache, its socket,\n"
	      "its nscd socket's maps (glibc's nscd client) and glibc's files (as root:\n"
	      "private mount namespace); each ratio in words.\n"
	      "\n"
	      "run options:\n"
	      "  --tests     tests to run (default: all; see `idcache perf list`)\n"
	      "  --users     directory sizes (default 100,1000,10000)\n"
	      "  --threads   workers for searches and modify, processes for the NSS\n"
	      "              lookups (default 1,4,8)\n"
	      "  --engines   engines to measure (default: all)\n"
	      "  --samples   samples per figure after one warm-up (default 5)\n"
	      "  --seconds   length of a sample of a time-bound test (default 0.5)\n"
	      "  --budget    skip an import/export predicted to take longer (default 300 s)\n"
	      "  --cold      drop the page cache before each sample (root); --hot (default)\n"
	      "  --seed      data generator seed (default 1)\n"
	      "  --dir       scratch directory (default $TMPDIR or /var/tmp)\n"
	      "  --out       result file (JSON; a CSV is written beside it)\n"
	      "\n"
	      "Progress goes to stderr; Ctrl-C stops after the current measurement and\n"
	      "keeps what finished in the result file.\n",
	      out);
}

/* ==== list parsing ============================================================= */

/* Split a comma list in place into out (at most cap items). */
static int split(char *s, const char **out, size_t cap, size_t *n)
{
	*n = 0;
	for (char *save = NULL, *tok = strtok_r(s, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		if (*n == cap)
			return -E2BIG;
		out[(*n)++] = tok;
	}
	return *n ? 0 : -EINVAL;
}

static int parse_u64s(char *s, uint64_t *out, size_t cap, size_t *n)
{
	const char *items[32];
	size_t k;
	int rc = split(s, items, cap < 32 ? cap : 32, &k);
	for (size_t i = 0; rc == 0 && i < k; i++) {
		size_t v;
		rc = cli_parse_size(items[i], &v);
		out[i] = v;
		rc = rc == 0 && v == 0 ? -EINVAL : rc;
	}
	*n = rc == 0 ? k : 0;
	return rc;
}

static int parse_names(char *s, const char **out, size_t cap, size_t *n, bool tests)
{
	int rc = split(s, out, cap, n);
	for (size_t i = 0; rc == 0 && i < *n; i++) {
		bool known = false;
		for (size_t k = 0; !tests && k < eng_count; k++)
			known |= strcmp(eng_all[k]->name, out[i]) == 0;
		for (size_t k = 0; !tests && k < nss_eng_count; k++)
			known |= strcmp(nss_eng_all[k]->name, out[i]) == 0;
		if (tests)
			known = perf_test_find(out[i]) != NULL;
		if (!known)
			return cli_err("perf: unknown %s '%s' (see `idcache perf list`)",
				       tests ? "test" : "engine", out[i]),
			       -EINVAL;
	}
	return rc;
}

/* ==== subcommands =============================================================== */

static int cmd_list(void)
{
	char why[256];
	const char *nss = perf_nss_unavailable(why, sizeof(why));
	puts("tests:");
	for (size_t i = 0; i < perf_ntests; i++)
		printf("  %-17s %-11s %s%s%s\n", perf_tests[i].name, perf_tests[i].unit,
		       perf_tests[i].what, perf_tests[i].nss && nss ? " — unavailable: " : "",
		       perf_tests[i].nss && nss ? nss : "");
	puts("engines:");
	for (size_t i = 0; i < eng_count; i++) {
		int rc = eng_all[i]->available(why, sizeof(why));
		printf(
		    "  %-17s %s%s\n", eng_all[i]->name,
		    rc == 0 ? "available: " : "unavailable: ", rc == 0 ? eng_all[i]->access : why);
	}
	puts("NSS engines (getpwnam, getpwuid, initgroups):");
	for (size_t i = 0; i < nss_eng_count; i++) {
		int rc = perf_nss_available(nss_eng_all[i], why, sizeof(why));
		printf("  %-17s %s%s\n", nss_eng_all[i]->name,
		       rc == 0 ? "available: " : "unavailable: ",
		       rc == 0 ? nss_eng_all[i]->access : why);
	}
	return CLI_OK;
}

static void on_sigint(int sig)
{
	(void)sig;
	perf_stop = 1;
}

static void defaults(struct perf_opts *o)
{
	static const uint64_t users[] = {100, 1000, 10000};
	static const unsigned threads[] = {1, 4, 8};
	const char *tmp = getenv("TMPDIR");
	*o = (struct perf_opts){.samples = 5,
				.seconds = 0.5,
				.budget = 300,
				.seed = 1,
				.dir = tmp && tmp[0] ? tmp : "/var/tmp"};
	for (size_t i = 0; i < perf_ntests; i++)
		o->tests[o->ntests++] = perf_tests[i].name;
	memcpy(o->users, users, sizeof(users));
	o->nusers = IDC_ARRAY_SIZE(users);
	memcpy(o->threads, threads, sizeof(threads));
	o->nthreads = IDC_ARRAY_SIZE(threads);
	for (size_t i = 0; i < eng_count; i++)
		o->engines[o->nengines++] = eng_all[i]->name;
	for (size_t i = 0; i < nss_eng_count && o->nengines < PERF_MAX_ENGINES; i++)
		o->engines[o->nengines++] = nss_eng_all[i]->name;
}

static int parse_run(int argc, char **argv, struct perf_opts *o)
{
	static const struct option longopts[] = {
	    {"tests", required_argument, NULL, 'T'},   {"users", required_argument, NULL, 'u'},
	    {"threads", required_argument, NULL, 't'}, {"engines", required_argument, NULL, 'e'},
	    {"samples", required_argument, NULL, 'n'}, {"seconds", required_argument, NULL, 's'},
	    {"budget", required_argument, NULL, 'b'},  {"cold", no_argument, NULL, 'C'},
	    {"hot", no_argument, NULL, 'H'},           {"seed", required_argument, NULL, 'S'},
	    {"dir", required_argument, NULL, 'd'},     {"out", required_argument, NULL, 'o'},
	    {"help", no_argument, NULL, 'h'},          {NULL, 0, NULL, 0},
	};
	int opt, rc = 0;
	uint64_t th[8];
	size_t v, n;
	while (rc == 0 && (opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (opt) {
		case 'T':
			rc = parse_names(optarg, o->tests, 16, &o->ntests, true);
			break;
		case 'u':
			rc = parse_u64s(optarg, o->users, 16, &o->nusers);
			break;
		case 't':
			rc = parse_u64s(optarg, th, 8, &n);
			for (size_t i = 0; rc == 0 && i < n; i++)
				rc = th[i] > 64 ? -EINVAL : 0, o->threads[i] = (unsigned)th[i];
			o->nthreads = rc == 0 ? n : 0;
			break;
		case 'e':
			rc = parse_names(optarg, o->engines, PERF_MAX_ENGINES, &o->nengines, false);
			break;
		case 'n':
			rc = cli_parse_size(optarg, &v);
			rc = rc == 0 && (v < 1 || v > PERF_MAX_SAMPLES) ? -EINVAL : rc;
			o->samples = (unsigned)v;
			break;
		case 's':
			o->seconds = strtod(optarg, NULL);
			rc = o->seconds > 0 ? 0 : -EINVAL;
			break;
		case 'b':
			o->budget = strtod(optarg, NULL);
			rc = o->budget > 0 ? 0 : -EINVAL;
			break;
		case 'C':
			o->cold = true;
			break;
		case 'H':
			o->cold = false;
			break;
		case 'S':
			rc = cli_parse_size(optarg, &v);
			o->seed = v;
			break;
		case 'd':
			o->dir = optarg;
			break;
		case 'o':
			o->out = optarg;
			break;
		case 'h':
			perf_help(stdout);
			return 1;
		default:
			rc = -EINVAL;
		}
	}
	return rc < 0 || optind != argc ? -EINVAL : 0;
}

static int write_results(const struct perf_results *res, const char *out)
{
	struct idc_diag d = {{0}};
	char csv[PATH_MAX];
	size_t len = strlen(out);
	snprintf(csv, sizeof(csv), "%.*s.csv",
		 (int)(len > 5 && strcmp(out + len - 5, ".json") == 0 ? len - 5 : len), out);
	int rc = perf_json_write(res, out, &d);
	rc = rc < 0 ? rc : perf_csv_write(res, csv, &d);
	if (rc < 0)
		return cli_fail(rc, &d, "perf: writing results");
	fprintf(stderr, "idcache: perf: results in %s and %s\n", out, csv);
	return CLI_OK;
}

static int cmd_run(int argc, char **argv)
{
	struct perf_opts o;
	defaults(&o);
	int rc = parse_run(argc, argv, &o);
	if (rc)
		return rc > 0 ? CLI_OK : cli_usage(USAGE_RUN, "idcache perf");
	struct sigaction sa = {.sa_handler = on_sigint};
	sigaction(SIGINT, &sa, NULL);
	struct perf_results res = {0};
	rc = perf_run(&o, &res);
	if (rc < 0) {
		perf_results_free(&res);
		return cli_fail(rc, NULL, "perf: scratch directory in %s", o.dir);
	}
	perf_report_table(stdout, &res, perf_want_color(stdout));
	int st = o.out ? write_results(&res, o.out) : CLI_OK;
	bool interrupted = res.interrupted;
	if (interrupted)
		fprintf(stderr, "idcache: perf: interrupted; the results hold what finished\n");
	perf_results_free(&res);
	return interrupted ? 130 : st;
}

/* `--out` and `--html` after the file names: options anywhere. */
static int file_opts(int argc, char **argv, const char **files, size_t nfiles, const char **out,
		     const char **html)
{
	size_t n = 0;
	for (int i = 1; i < argc; i++) {
		if ((strcmp(argv[i], "--out") == 0 || strcmp(argv[i], "-o") == 0) && i + 1 < argc)
			*out = argv[++i];
		else if (strcmp(argv[i], "--html") == 0 && i + 1 < argc)
			*html = argv[++i];
		else if (argv[i][0] == '-' || n == nfiles)
			return -EINVAL;
		else
			files[n++] = argv[i];
	}
	return n == nfiles ? 0 : -EINVAL;
}

/* Write to path with fn; CLI_OK or CLI_FAIL. */
static int write_file(const char *path, void (*fn)(FILE *, void *), void *arg)
{
	FILE *f = fopen(path, "w");
	if (!f)
		return cli_err("perf: %s: %s", path, strerror(errno));
	fn(f, arg);
	if (fclose(f) != 0)
		return cli_err("perf: %s: %s", path, strerror(errno));
	return CLI_OK;
}

struct pair {
	const struct perf_results *a, *b;
	const char *na, *nb;
};

static void put_html(FILE *f, void *arg)
{
	struct pair *p = arg;
	perf_html_write(f, p->a, p->na, p->b, p->nb);
}

static void put_svg(FILE *f, void *arg)
{
	perf_svg_write(f, arg, true);
}

static const char *base_name(const char *p)
{
	const char *s = strrchr(p, '/');
	return s ? s + 1 : p;
}

static int cmd_compare_or_plot(int argc, char **argv, bool compare)
{
	const char *files[2], *out = NULL, *html = NULL;
	struct perf_results a = {0}, b = {0};
	struct idc_diag d = {{0}};
	if (file_opts(argc, argv, files, compare ? 2 : 1, &out, &html) < 0 ||
	    (!compare && !out && !html))
		return cli_usage(compare ? "idcache perf compare A.json B.json [--html report.html]"
					 : "idcache perf plot results.json --out plot.svg",
				 "idcache perf");
	int rc = perf_json_read(files[0], &a, &d);
	rc = rc < 0 || !compare ? rc : perf_json_read(files[1], &b, &d);
	int st = rc < 0 ? cli_fail(rc, &d, "perf") : CLI_OK;
	struct pair p = {&a, compare ? &b : NULL, base_name(files[0]),
			 compare ? base_name(files[1]) : NULL};
	if (st == CLI_OK && compare)
		perf_report_compare(stdout, &a, p.na, &b, p.nb, perf_want_color(stdout));
	if (st == CLI_OK && out)
		st = write_file(out, put_svg, &a);
	if (st == CLI_OK && html)
		st = write_file(html, put_html, &p);
	perf_results_free(&a);
	perf_results_free(&b);
	return st;
}

int main(int argc, char **argv)
{
	idc_log_init("idcache", true, IDC_LOG_WARN);
	if (argc < 2)
		return cli_usage("idcache perf list|run|compare|plot ...", "idcache perf");
	const char *sub = argv[1];
	if (strcmp(sub, "--help") == 0 || strcmp(sub, "-h") == 0) {
		perf_help(stdout);
		return CLI_OK;
	}
	argv++, argc--;
	optind = 0;
	if (strcmp(sub, "list") == 0)
		return argc == 1 ? cmd_list() : cli_usage("idcache perf list", "idcache perf");
	if (strcmp(sub, "run") == 0)
		return cmd_run(argc, argv);
	if (strcmp(sub, "compare") == 0)
		return cmd_compare_or_plot(argc, argv, true);
	if (strcmp(sub, "plot") == 0)
		return cmd_compare_or_plot(argc, argv, false);
	if (strcmp(sub, "_nss-child") == 0) /* internal: perf_nss.c execs it */
		return perf_nss_child_main(argc, argv);
	fprintf(stderr, "idcache: perf: unknown subcommand '%s'\n", sub);
	return cli_usage("idcache perf list|run|compare|plot ...", "idcache perf");
}
