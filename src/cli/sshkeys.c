/*
 * idcache ssh-authorized-keys USER [UID]: the user's SSH public keys, one
 * per line, for sshd's AuthorizedKeysCommand (docs/DESIGN.md §8). It asks
 * nss.sock, which serves any peer: sshd runs it as its
 * AuthorizedKeysCommandUser (nobody), not as root. With UID (sshd's %U),
 * the keys are printed only when getpwnam(USER) through the daemon is that
 * uid: sshd's user came from getpwnam of the name the client typed, which
 * another spelling may answer with another domain's user than USER is.
 *
 * What sshd makes of the outcome decides the exit status: keys on stdout
 * and 0 let it try them; nothing and 0 (unknown user, a user without keys)
 * send it on to AuthorizedKeysFile; a failure must print nothing (fail
 * closed: a key half printed, or a stale daemon's answer, is never a
 * login) and exit non-zero with the reason on stderr.
 */
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "proto/proto.h"

#define SYNOPSIS "idcache ssh-authorized-keys [--run-dir DIR] USER [UID]"
/* Longer than the client's usual 5 s: the daemon may ask a directory for
 * an expired user first (ldap_network_timeout plus ldap_search_timeout). */
#define KEYS_TIMEOUT_MS 20000

static void help(void)
{
	fputs("Usage: " SYNOPSIS "\n"
	      "\n"
	      "Print the SSH public keys idcache holds for USER, one authorized_keys line\n"
	      "each, for sshd_config's AuthorizedKeysCommand:\n"
	      "\n"
	      "  AuthorizedKeysCommand /usr/bin/idcache ssh-authorized-keys %u %U\n"
	      "  AuthorizedKeysCommandUser nobody\n"
	      "\n"
	      "The keys are those of the user getent passwd USER shows (the same domain),\n"
	      "read from the directory's sshPublicKey attribute (ldap_user_ssh_public_key,\n"
	      "idcache.conf(5)). A cached user that has expired is read again from its\n"
	      "directory first; while no server answers, the cached keys are printed.\n"
	      "With UID (sshd's %U), they are printed only when that user is UID: sshd's\n"
	      "user is the one the name the client typed answers with, and another\n"
	      "spelling of it can be another domain's user than USER's.\n"
	      "\n"
	      "Nothing is printed, with exit status 0, for a user idcache does not know\n"
	      "and for a user without keys, which includes every user of a files domain:\n"
	      "sshd then goes on to AuthorizedKeysFile.\n"
	      "\n"
	      "Options:\n"
	      "      --run-dir DIR  the daemon's run directory (default: $IDCACHE_RUNDIR,\n"
	      "                     else " PROTO_DEFAULT_RUN_DIR ")\n"
	      "  -h, --help         show this help and exit\n"
	      "\n"
	      "Any user may run it; it asks idcached over DIR/nss.sock.\n"
	      "Exit status: 0 the keys (or none) printed, 1 idcached is not running or\n"
	      "did not answer (nothing printed: sshd takes no key from it), 2 wrong\n"
	      "command line. See idcache(1).\n",
	      stdout);
}

/* Why the daemon could not be asked, as the reason sshd's log gets. */
static int unreachable(int rc, const char *path)
{
	if (rc == -ENOENT || rc == -ECONNREFUSED || rc == -ENOTDIR)
		return cli_err("ssh-authorized-keys: idcached is not running (%s: %s); no keys "
			       "printed",
			       path, idc_strerror(rc));
	return cli_fail(rc, NULL, "ssh-authorized-keys: cannot ask idcached (%s); no keys printed",
			path);
}

/* Every key of an OK reply, checked before any is printed. */
static int print_keys(const void *payload, size_t n)
{
	struct proto_strlist keys;
	if (proto_decode_sshkeys(payload, n, &keys) < 0)
		return cli_err(
		    "ssh-authorized-keys: malformed reply from idcached; no keys printed");
	size_t off = 0;
	struct proto_str k;
	struct idc_ssh_key chk;
	for (uint32_t i = 1; proto_strlist_next(&keys, &off, &k) == 1; i++)
		if (idc_ssh_key_check(k.p, k.len, &chk) < 0 || chk.len != k.len)
			return cli_err("ssh-authorized-keys: idcached sent key %u that is no "
				       "authorized_keys line (%s); no keys printed",
				       i, chk.why ? chk.why : "blanks around it");
	off = 0;
	while (proto_strlist_next(&keys, &off, &k) == 1)
		printf("%s\n", k.p);
	if (fflush(stdout) != 0 || ferror(stdout))
		return cli_fail(-errno, NULL, "ssh-authorized-keys: cannot write the keys");
	return CLI_OK;
}

/* Whether USER, asked on c, is uid (the keys are that user's): *same, by
 * a GETPWNAM on the same connection (a mismatch is said on stderr). A CLI
 * status: CLI_OK, or the failure to ask. */
static int is_uid(struct proto_client *c, const char *user, uint32_t uid, void *buf, bool *same)
{
	uint8_t frame[PROTO_MAX_REQUEST];
	struct proto_req req = {.cmd = PROTO_CMD_GETPWNAM, .name = {user, (uint32_t)strlen(user)}};
	struct proto_hdr h;
	struct proto_passwd pw;
	size_t n = 0;
	*same = false;
	int len = proto_encode_request(frame, sizeof(frame), &req);
	int rc =
	    len < 0 ? len : proto_client_call(c, frame, (size_t)len, &h, buf, PROTO_MAX_REPLY, &n);
	if (rc < 0)
		return cli_fail(rc, NULL,
				"ssh-authorized-keys: cannot ask idcached; no keys printed");
	*same = h.status == PROTO_ST_OK && proto_decode_passwd(buf, n, &pw) == 0 && pw.uid == uid;
	if (!*same)
		fprintf(stderr,
			"ssh-authorized-keys: %s is not uid %u to idcached; no keys printed\n",
			user, (unsigned)uid);
	return CLI_OK;
}

/* The reply's status: keys, none, or a failure said on stderr. */
static int answer(const struct proto_hdr *h, const void *payload, size_t n)
{
	if (h->status == PROTO_ST_OK)
		return print_keys(payload, n);
	if (h->status == PROTO_ST_NOTFOUND)
		return CLI_OK;
	struct proto_str msg = {"", 0};
	if (proto_decode_text(payload, n, &msg) < 0 || msg.len == 0)
		msg.p =
		    h->status == PROTO_ST_UNAVAIL ? "the cache cannot be read" : "request failed";
	return cli_err("ssh-authorized-keys: idcached: %s; no keys printed", msg.p);
}

static int ask(const char *dir, const char *user, const uint32_t *uid)
{
	char path[4096];
	uint8_t frame[PROTO_MAX_REQUEST];
	struct proto_req req = {.cmd = PROTO_CMD_SSHKEYS, .name = {user, (uint32_t)strlen(user)}};
	int len = proto_encode_request(frame, sizeof(frame), &req);
	if (len < 0)
		return CLI_OK; /* no name the daemon could hold: an unknown user */
	if ((size_t)snprintf(path, sizeof(path), "%s/nss.sock", dir) >= sizeof(path))
		return cli_err("ssh-authorized-keys: --run-dir is too long");
	void *buf = malloc(PROTO_MAX_REPLY); /* untouched pages cost nothing */
	if (!buf)
		return cli_fail(-ENOMEM, NULL, "ssh-authorized-keys");
	struct proto_client c;
	struct proto_hdr h;
	size_t n = 0;
	int rc = proto_client_connect(&c, path, KEYS_TIMEOUT_MS);
	if (rc == 0)
		rc = proto_client_call(&c, frame, (size_t)len, &h, buf, PROTO_MAX_REPLY, &n);
	int st = rc < 0 ? unreachable(rc, path) : -1;
	if (st < 0 && uid && h.status == PROTO_ST_OK) {
		/* the keys are kept aside while the same connection asks who USER is */
		void *keys = malloc(n ? n : 1);
		bool same = false;
		st = keys ? (memcpy(keys, buf, n), is_uid(&c, user, *uid, buf, &same))
			  : cli_fail(-ENOMEM, NULL, "ssh-authorized-keys");
		if (st == CLI_OK && same)
			st = answer(&h, keys, n);
		free(keys);
	}
	if (st < 0)
		st = answer(&h, buf, n);
	proto_client_close(&c);
	free(buf);
	return st;
}

int cli_ssh_keys_main(int argc, char **argv)
{
	static const struct option longopts[] = {
	    {"run-dir", required_argument, NULL, 'r'},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	const char *dir = NULL;
	int opt;
	while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		if (opt == 'h')
			return help(), CLI_OK;
		if (opt != 'r')
			return cli_usage(SYNOPSIS, "idcache ssh-authorized-keys");
		dir = optarg;
	}
	if (argc - optind != 1 && argc - optind != 2)
		return cli_usage(SYNOPSIS, "idcache ssh-authorized-keys");
	const char *user = argv[optind];
	size_t v = 0; /* sshd's %U; (uid_t)-1 is nobody's */
	if (argc - optind == 2 && (cli_parse_size(argv[optind + 1], &v) < 0 || v >= UINT32_MAX))
		return cli_usage(SYNOPSIS, "idcache ssh-authorized-keys");
	uint32_t uid = (uint32_t)v;
	if (!idc_name_valid(user, strlen(user)))
		return CLI_OK; /* sshd asks for any name a client sends */
	return ask(cli_run_dir(dir), user, argc - optind == 2 ? &uid : NULL);
}
