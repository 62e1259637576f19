/*
 * idcache status | expire | reload | user | group: admin requests to a
 * running idcached over run_dir/admin.sock (docs/DESIGN.md §2, the protocol in
 * proto.h). The daemon answers only root and its own user; it checks the
 * peer's credentials, we only turn its answers into clear messages.
 *
 * The run directory comes from --run-dir, else $IDCACHE_RUNDIR (read with
 * secure_getenv), else /run/idcache.
 */
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "proto/proto.h"

struct admin_cmd {
	const char *name;
	const char *synopsis;
	const char *help; /* the body of --help */
};

static const struct admin_cmd admin_cmds[] = {
    {"status", "idcache status [--run-dir DIR]",
     "Show the state of the running idcached as key=value lines: version, pid,\n"
     "uptime, resident memory, open connections, and per domain the users and\n"
     "groups cached, the newest update, the last refresh (time, duration, count,\n"
     "failures, last error); then requests served per command since start.\n"},
    {"expire", "idcache expire [--run-dir DIR] --user NAME | --group NAME | --all",
     "Mark cache entries expired: one user, one group, or everything. Expired\n"
     "entries are still served; the daemon refreshes them from their provider\n"
     "at once (files domains re-read their files and store every entry again).\n"
     "Prints how many entries were marked.\n"
     "\n"
     "  -u, --user NAME    expire the user NAME (in every served domain)\n"
     "  -g, --group NAME   expire the group NAME\n"
     "  -a, --all          expire every user and group\n"
     "\n"
     "NAME matches as lookups match it: exactly in a case-sensitive domain\n"
     "(files), in any case otherwise. No entry of that name: exit status 1.\n"},
    {"reload", "idcache reload [--run-dir DIR]",
     "Make idcached re-read its configuration, as SIGHUP does. Domains whose\n"
     "source did not change keep their state; new ones are loaded at once. If\n"
     "the configuration has errors they are printed (FILE:LINE: message) and the\n"
     "daemon keeps the configuration it has.\n"},
    {"user", "idcache user [--run-dir DIR] NAME",
     "Show what the cache holds for the user NAME: its passwd fields, how many\n"
     "SSH public keys (ssh_keys=), domain, last update and expiry times,\n"
     "whether it is expired, and the ids of the groups that list it, directly\n"
     "or through nested groups, in provider order (what initgroups adds to the\n"
     "user's primary group). A withheld= line says\n"
     "why lookups pass the entry by (filter_users, local name, earlier domain\n"
     "id, ...; idcache.conf(5), LOCAL IDENTITIES).\n"},
    {"group", "idcache group [--run-dir DIR] NAME",
     "Show what the cache holds for the group NAME: gid, members, nested member\n"
     "groups, domain, last update and expiry times, and a withheld= line when\n"
     "lookups pass the entry by.\n"},
};

/* ==== help ======================================================================= */

static const struct admin_cmd *find(const char *name)
{
	for (size_t i = 0; i < IDC_ARRAY_SIZE(admin_cmds); i++)
		if (strcmp(admin_cmds[i].name, name) == 0)
			return &admin_cmds[i];
	return &admin_cmds[0];
}

static void help(const struct admin_cmd *cmd)
{
	printf("Usage: %s\n\n%s\n", cmd->synopsis, cmd->help);
	fputs("Options:\n"
	      "      --run-dir DIR  the daemon's run directory (default: $IDCACHE_RUNDIR,\n"
	      "                     else " PROTO_DEFAULT_RUN_DIR ")\n"
	      "  -h, --help         show this help and exit\n"
	      "\n"
	      "Admin commands need root or the daemon's user (default idcache).\n"
	      "Exit status: 0 success, 1 the daemon refused or failed (or is not\n"
	      "running, or the name is not cached), 2 wrong command line (a NAME\n"
	      "that is not a valid user or group name included).\n"
	      "See idcache(1) and idcached(8).\n",
	      stdout);
}

static int usage(const struct admin_cmd *cmd)
{
	char help_cmd[64];
	snprintf(help_cmd, sizeof(help_cmd), "idcache %s", cmd->name);
	return cli_usage(cmd->synopsis, help_cmd);
}

/* ==== names ========================================================================= */

/* Length of the well-formed UTF-8 sequence at s (at most n bytes) that is
 * neither a C1 control (U+0080..U+009F, which some terminals obey) nor an
 * overlong or surrogate form; 0 when there is none. */
static size_t utf8_printable(const unsigned char *s, size_t n)
{
	size_t len = s[0] >= 0xf0 ? 4 : s[0] >= 0xe0 ? 3 : s[0] >= 0xc2 ? 2 : 0;
	if (len == 0 || s[0] > 0xf4 || len > n)
		return 0;
	uint32_t cp = s[0] & (0x7f >> len);
	for (size_t i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = (cp << 6) | (s[i] & 0x3f);
	}
	if (cp <= 0x9f || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
	    (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
		return 0;
	return len;
}

#define SHOWN_MAX (4 * IDC_NAME_MAX + 4) /* every byte as \xHH, "..." and a NUL */

/* name as it may be shown on a terminal, at most IDC_NAME_MAX bytes of it:
 * control characters, DEL, '\\' and bytes that are not printable UTF-8 as
 * \xHH. */
static const char *shown(const char *name, char out[SHOWN_MAX])
{
	const unsigned char *s = (const unsigned char *)name;
	size_t n = strnlen(name, IDC_NAME_MAX), o = 0;
	for (size_t i = 0; i < n;) {
		size_t u = s[i] >= 0x80 ? utf8_printable(s + i, n - i) : 0;
		if (u) {
			memcpy(out + o, s + i, u);
			o += u;
			i += u;
		} else if (s[i] < 0x20 || s[i] >= 0x7f || s[i] == '\\') {
			o += (size_t)snprintf(out + o, 5, "\\x%02x", s[i++]);
		} else {
			out[o++] = (char)s[i++];
		}
	}
	if (name[n] != '\0')
		memcpy(out + o, "...", 4);
	else
		out[o] = '\0';
	return out;
}

/* A NAME argument: valid by the daemon's own rule (util's idc_name_valid),
 * else a usage error that shows the name escaped. */
static bool name_arg_ok(const struct admin_cmd *cmd, const char *name)
{
	char esc[SHOWN_MAX];
	if (idc_name_valid(name, strlen(name)))
		return true;
	cli_err("%s: invalid name '%s'", cmd->name, shown(name, esc));
	return false;
}

/* ==== talking to the daemon ========================================================= */

const char *cli_run_dir(const char *opt)
{
	const char *env = secure_getenv("IDCACHE_RUNDIR");
	return opt ? opt : env && *env ? env : PROTO_DEFAULT_RUN_DIR;
}

static int connect_fail(int rc, const char *path)
{
	if (rc == -ECONNREFUSED)
		return cli_err("idcached is not running (%s exists but nothing listens on it: "
			       "left by a daemon that was killed)",
			       path);
	if (rc == -ENOENT || rc == -ENOTDIR)
		return cli_err("idcached is not running (no socket at %s)", path);
	if (rc == -EACCES || rc == -EPERM)
		return cli_err("permission denied: admin commands need root or the idcache user "
			       "(%s)",
			       path);
	return cli_fail(rc, NULL, "cannot connect to %s", path);
}

/* What a non-OK reply says, printed once. */
static int refused(const struct proto_hdr *h, const char *payload, size_t n, const char *what)
{
	struct proto_str msg = {"", 0};
	if (proto_decode_text(payload, n, &msg) < 0 || msg.len == 0)
		msg.p = h->status == PROTO_ST_NOTFOUND ? "not found" : "request failed";
	if (h->status == PROTO_ST_NOTFOUND)
		return cli_err("%s: not in the cache (%s)", what, msg.p);
	return cli_err("%s: %s", what, msg.p);
}

/* Send req, and on OK leave the payload in *buf (malloc'd, NUL-terminated). */
static int call(const char *dir, const struct proto_req *req, const char *what, char **buf,
		size_t *n)
{
	char path[4096];
	uint8_t frame[PROTO_MAX_REQUEST];
	struct proto_client c;
	struct proto_hdr h;
	snprintf(path, sizeof(path), "%s/admin.sock", dir);
	int len = proto_encode_request(frame, sizeof(frame), req);
	if (len < 0)
		return cli_err("%s: invalid name", what);
	int rc = proto_client_connect(&c, path, PROTO_CLIENT_TIMEOUT_MS);
	if (rc < 0)
		return connect_fail(rc, path);
	size_t cap = 64 * 1024;
	*buf = NULL;
	do {
		char *grown = realloc(*buf, cap + 1);
		if (!grown) {
			rc = -ENOMEM;
			break;
		}
		*buf = grown;
		rc = proto_client_call(&c, frame, (size_t)len, &h, *buf, cap, n);
		cap = *n;
	} while (rc == -ERANGE);
	proto_client_close(&c);
	if (rc < 0)
		return cli_fail(rc, NULL, "%s: no answer from idcached", what);
	(*buf)[*n] = '\0';
	return h.status == PROTO_ST_OK ? CLI_OK : refused(&h, *buf, *n, what);
}

/* ==== subcommands ===================================================================== */

static int print_text(const char *dir, const struct proto_req *req, const char *what)
{
	char *buf = NULL;
	size_t n = 0;
	int rc = call(dir, req, what, &buf, &n);
	struct proto_str text;
	if (rc == CLI_OK && proto_decode_text(buf, n, &text) < 0)
		rc = cli_err("%s: malformed reply from idcached", what);
	if (rc == CLI_OK && req->cmd == PROTO_CMD_RELOAD)
		printf("idcached reloaded its configuration\n");
	else if (rc == CLI_OK)
		fputs(text.p, stdout);
	free(buf);
	return rc;
}

static int expire(const char *dir, const struct proto_req *req)
{
	char *buf = NULL;
	size_t n = 0;
	uint32_t count = 0;
	int rc = call(dir, req, "expire", &buf, &n);
	if (rc == CLI_OK && proto_decode_u32(buf, n, &count) < 0)
		rc = cli_err("expire: malformed reply from idcached");
	if (rc == CLI_OK)
		printf("%u entries expired\n", count);
	/* as the help says: a name no domain holds is an error */
	char esc[4 * 255 + 4];
	if (rc == CLI_OK && count == 0 && req->what != PROTO_EXPIRE_ALL)
		rc = cli_err("expire: no cached %s is named '%s'",
			     req->what == PROTO_EXPIRE_USER ? "user" : "group",
			     shown(req->name.p, esc));
	free(buf);
	return rc;
}

/* Options of one admin subcommand into req; -1 to go on, else exit status. */
static int parse(const struct admin_cmd *cmd, int argc, char **argv, const char **dir,
		 struct proto_req *req)
{
	static const struct option longopts[] = {
	    {"run-dir", required_argument, NULL, 'r'}, {"help", no_argument, NULL, 'h'},
	    {"user", required_argument, NULL, 'u'},    {"group", required_argument, NULL, 'g'},
	    {"all", no_argument, NULL, 'a'},           {NULL, 0, NULL, 0},
	};
	bool is_expire = req->cmd == PROTO_CMD_EXPIRE;
	int opt;
	while ((opt = getopt_long(argc, argv, is_expire ? "hu:g:a" : "h", longopts, NULL)) != -1) {
		if (opt == 'h')
			return help(cmd), CLI_OK;
		if (opt == 'r') {
			*dir = optarg;
			continue;
		}
		if (!is_expire || opt == '?')
			return usage(cmd);
		if (req->what) {
			cli_err("expire: give only one of --user, --group, --all");
			return usage(cmd);
		}
		req->what = opt == 'u'   ? PROTO_EXPIRE_USER
			    : opt == 'g' ? PROTO_EXPIRE_GROUP
					 : PROTO_EXPIRE_ALL;
		if (opt != 'a')
			req->name = (struct proto_str){optarg, (uint32_t)strlen(optarg)};
	}
	return -1;
}

static int admin_main(const char *name, uint32_t proto_cmd, int argc, char **argv)
{
	const struct admin_cmd *cmd = find(name);
	struct proto_req req = {.cmd = proto_cmd, .name = {"", 0}};
	const char *dir_opt = NULL;
	int rc = parse(cmd, argc, argv, &dir_opt, &req);
	if (rc >= 0)
		return rc;
	bool wants_name = proto_cmd == PROTO_CMD_USERINFO || proto_cmd == PROTO_CMD_GROUPINFO;
	if (argc - optind != (wants_name ? 1 : 0))
		return usage(cmd);
	if (proto_cmd == PROTO_CMD_EXPIRE && !req.what) {
		cli_err("expire: give one of --user NAME, --group NAME, --all");
		return usage(cmd);
	}
	if (wants_name)
		req.name = (struct proto_str){argv[optind], (uint32_t)strlen(argv[optind])};
	bool named = wants_name || (proto_cmd == PROTO_CMD_EXPIRE && req.what != PROTO_EXPIRE_ALL);
	if (named && !name_arg_ok(cmd, req.name.p))
		return usage(cmd);
	const char *dir = cli_run_dir(dir_opt);
	if (proto_cmd == PROTO_CMD_EXPIRE)
		return expire(dir, &req);
	char what[SHOWN_MAX + 60], esc[SHOWN_MAX];
	snprintf(what, sizeof(what), "%s%s%s", name, wants_name ? " " : "",
		 wants_name ? shown(argv[optind], esc) : "");
	return print_text(dir, &req, what);
}

int cli_status_main(int argc, char **argv)
{
	return admin_main("status", PROTO_CMD_STATUS, argc, argv);
}

int cli_expire_main(int argc, char **argv)
{
	return admin_main("expire", PROTO_CMD_EXPIRE, argc, argv);
}

int cli_reload_main(int argc, char **argv)
{
	return admin_main("reload", PROTO_CMD_RELOAD, argc, argv);
}

int cli_user_main(int argc, char **argv)
{
	return admin_main("user", PROTO_CMD_USERINFO, argc, argv);
}

int cli_group_main(int argc, char **argv)
{
	return admin_main("group", PROTO_CMD_GROUPINFO, argc, argv);
}
