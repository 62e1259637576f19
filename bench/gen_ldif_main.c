/*
 * idcache-gen-ldif: write a deterministic LDIF directory of users and
 * groups to stdout (see gen.h for what the entries look like).
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gen.h"

static void usage(FILE *f)
{
	fprintf(f, "usage: idcache-gen-ldif --users N [--groups G] [--seed S]\n"
		   "                        [--base DN] [--big-user-groups K] [--members M]\n"
		   "                        [--uid-prefix P]\n"
		   "Writes LDIF to stdout; the same options give the same bytes.\n"
		   "  --users N            users uid=<P><10-digit uidNumber>,ou=people,<base>\n"
		   "  --groups G           groups cn=group<k>,ou=groups,<base> (default N/10)\n"
		   "  --seed S             randomness (default 1)\n"
		   "  --base DN            starts with dc= or o= (default dc=example,dc=com)\n"
		   "  --big-user-groups K  the first user is a member of K groups\n"
		   "  --members M          average members per group (default 10)\n"
		   "  --uid-prefix P       prefix of user names (default u)\n");
}

/* Whole decimal number (no sign, no junk) or -EINVAL. */
static int parse_u64(const char *opt, const char *s, uint64_t *out)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || end == s || *end || s[0] == '-') {
		fprintf(stderr, "idcache-gen-ldif: %s: '%s' is not a number\n", opt, s);
		return -EINVAL;
	}
	*out = v;
	return 0;
}

enum { OPT_USERS = 1, OPT_GROUPS, OPT_SEED, OPT_BASE, OPT_BIG, OPT_MEMBERS, OPT_PREFIX };

static const struct option longopts[] = {
    {"users", required_argument, NULL, OPT_USERS},
    {"groups", required_argument, NULL, OPT_GROUPS},
    {"seed", required_argument, NULL, OPT_SEED},
    {"base", required_argument, NULL, OPT_BASE},
    {"big-user-groups", required_argument, NULL, OPT_BIG},
    {"members", required_argument, NULL, OPT_MEMBERS},
    {"uid-prefix", required_argument, NULL, OPT_PREFIX},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

/* One option into o. 0, 1 for --help, -EINVAL. */
static int take_opt(int c, const char *arg, struct gen_opts *o, int *have_users, int *have_groups)
{
	uint64_t v = 0;
	int rc = 0;
	switch (c) {
	case OPT_USERS:
		*have_users = 1;
		return parse_u64("--users", arg, &o->users);
	case OPT_GROUPS:
		*have_groups = 1;
		return parse_u64("--groups", arg, &o->groups);
	case OPT_SEED:
		return parse_u64("--seed", arg, &o->seed);
	case OPT_BASE:
		o->base = arg;
		return 0;
	case OPT_BIG:
		return parse_u64("--big-user-groups", arg, &o->big_user_groups);
	case OPT_MEMBERS:
		rc = parse_u64("--members", arg, &v);
		if (rc == 0 && (v == 0 || v > 1000000)) {
			fprintf(stderr, "idcache-gen-ldif: --members: 1..1000000\n");
			return -EINVAL;
		}
		o->members = (unsigned)v;
		return rc;
	case OPT_PREFIX:
		o->uid_prefix = arg;
		return 0;
	case 'h':
		return 1;
	default:
		return -EINVAL;
	}
}

int main(int argc, char **argv)
{
	struct gen_opts o = {.seed = 1};
	int have_users = 0, have_groups = 0, c;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		int rc = take_opt(c, optarg, &o, &have_users, &have_groups);
		if (rc != 0) {
			usage(rc > 0 ? stdout : stderr);
			return rc > 0 ? 0 : 2;
		}
	}
	if (!have_users || optind != argc) {
		usage(stderr);
		return 2;
	}
	if (!have_groups)
		o.groups = o.users / 10;
	struct idc_diag d = {{0}};
	struct gen *g;
	int rc = gen_new(&o, &g, &d);
	if (rc == 0) {
		static char obuf[1 << 20]; /* stdio adds no copy of our 1 MiB chunks */
		setvbuf(stdout, obuf, _IOFBF, sizeof(obuf));
		rc = gen_write_ldif(g, stdout, &d);
		gen_free(g);
	}
	if (rc < 0) {
		fprintf(stderr, "idcache-gen-ldif: %s\n", d.msg[0] ? d.msg : idc_strerror(rc));
		return 1;
	}
	return 0;
}
