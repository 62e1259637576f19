/*
 * userdb: systemd's user database (io.systemd.UserDatabase over Varlink,
 * src/userdb) on a socket of its own — by default off; `userdb_socket`
 * names it, and its file name is the service clients must name.
 *
 * A connection of the socket is an ordinary connection (conn.c): counted
 * against its uid with nss.sock's, bounded input, back-pressure, idle
 * timeout. Only its framing differs: Varlink messages in, JSON replies
 * out. Each call is answered by asking the responder the NSS requests it
 * amounts to (getpwnam, initgroups, getgrgid, sshkeys, get*ent) into a buffer
 * of the connection's own and turning each binary reply into JSON: one
 * walk over the domains, one precedence rule, and a directory's wait or a
 * held build parks the call like an NSS request — the loop never blocks.
 * A user's groups and keys are asked by its name pinned to its uid
 * (responder_handle_user): another domain's user of that name, which
 * getpwnam may answer, is never mixed into the record.
 *
 * A call is a small state machine (struct udb_conn): the request of the
 * current step is asked once; its reply, at once or after a wait, moves
 * the call on. Replies of a call that streams ("more") are written one
 * behind, so the last goes out without "continues". A user's SSH keys are
 * its record's privileged section: only root and the user itself see
 * them (the API's rule); others get the record marked incomplete.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/daemon.h"
#include "userdb/userdb.h"

#define ENUM_BATCH 64u /* records per get*ent asked for an enumeration */

enum step {
	ST_LOOKUP = 1,  /* getpw* / getgr* for the record or the group asked */
	ST_INITGROUPS,  /* the user's groups (memberOf; memberships by user) */
	ST_GROUP_OF,    /* getgrgid of gids[gi] */
	ST_GROUP_NAMED, /* getgrnam of its name: is that name gids[gi]? */
	ST_KEYS,        /* the user's SSH keys (sshAuthorizedKeys) */
	ST_ENUM_SET,    /* set*ent */
	ST_ENUM_GET,    /* get*ent until NOTFOUND */
};

struct udb_conn {
	struct udb_reader rd;
	struct idc_buf inner; /* the responder's reply to the request asked last */
	bool active;          /* a call under way */
	bool asked;           /* its step's request was made */
	struct udb_call call;
	enum step step;
	struct udb_reply *held; /* built, written once the next is known */
	size_t replies;         /* built for this call */
	/* the user answered: its strings (name, gecos, dir, shell, NUL each) */
	struct idc_buf user;
	uint32_t uid, gid;
	uint32_t *gids;
	size_t ngids, gi;
	struct idc_buf names; /* memberOf: group names, NUL each */
	size_t named_at;      /* names[named_at..): the name ST_GROUP_NAMED checks */
	struct idc_buf keys;  /* sshAuthorizedKeys: one line each, NUL each */
	const char **ptrs;    /* string lists handed to src/userdb */
	size_t ptrs_cap;
};

/* ==== the socket ======================================================================= */

int userdb_open(struct daemon *dm, const struct config *cfg)
{
	const char *path = cfg->userdb.socket;
	dm->userdb.io.fd = -1;
	if (!path)
		return 0;
	char dir[sizeof(dm->userdb.path)];
	snprintf(dir, sizeof(dir), "%.*s", (int)(strrchr(path, '/') - path), path);
	struct privs none = {0}; /* the directory is root's, as systemd makes it */
	int rc = dir[0] ? privs_make_dir(&none, dir, false) : 0;
	rc = rc ? rc : listener_open(dm, &dm->userdb, path, 0666, false);
	if (rc < 0) {
		idc_log(IDC_LOG_ERR, "userdb_socket %s: %s", path, idc_strerror(rc));
		return rc;
	}
	dm->userdb.userdb = true;
	dm->udb_service = strrchr(dm->userdb.path, '/') + 1;
	return 0;
}

int userdb_start(struct daemon *dm)
{
	if (dm->userdb.io.fd < 0)
		return 0;
	int rc = listener_start(dm, &dm->userdb);
	if (rc == 0)
		idc_log(IDC_LOG_INFO, "serving systemd's user database as %s on %s",
			dm->udb_service, dm->userdb.path);
	return rc;
}

void userdb_status(struct daemon *dm, struct idc_buf *b)
{
	idc_buf_printf(b, "userdb_socket=%s\n", dm->userdb.io.fd >= 0 ? dm->userdb.path : "");
	idc_buf_printf(b, "userdb.calls=%llu\nuserdb.errors=%llu\nuserdb.malformed=%llu\n",
		       (unsigned long long)dm->udb_calls, (unsigned long long)dm->udb_errors,
		       (unsigned long long)dm->udb_malformed);
}

void userdb_close(struct daemon *dm)
{
	listener_close(&dm->userdb);
}

/* ==== connections ======================================================================= */

int userdb_conn_new(struct daemon *dm, int fd, const struct ucred *cred)
{
	struct udb_conn *u = calloc(1, sizeof(*u));
	if (!u) {
		reaper_close_socket(dm, fd);
		return -ENOMEM;
	}
	struct conn *c = conn_create(dm, fd, false, cred);
	if (!c) {
		free(u);
		return -ENOMEM;
	}
	udb_reader_init(&u->rd);
	c->udb = u;
	return 0;
}

/* Empty b; a large one (a batch of large groups, say) is given back, so
 * an idle connection keeps no more than DAEMON_OUT_KEEP of it. */
static void trim(struct idc_buf *b)
{
	idc_buf_reset(b);
	if (b->cap > DAEMON_OUT_KEEP)
		idc_buf_free(b);
}

/* Forget the call under way (its cursors included). */
static void call_reset(struct conn *c)
{
	struct udb_conn *u = c->udb;
	udb_reply_free(u->held);
	u->held = NULL;
	u->active = u->asked = false;
	u->replies = u->ngids = u->gi = 0;
	trim(&u->inner);
	trim(&u->user);
	trim(&u->names);
	trim(&u->keys);
	free(u->gids);
	u->gids = NULL;
	if (u->ptrs_cap * sizeof(*u->ptrs) > DAEMON_OUT_KEEP) {
		free(u->ptrs);
		u->ptrs = NULL;
		u->ptrs_cap = 0;
	}
	enum_cursor_free(c->dm, &c->pw);
	enum_cursor_free(c->dm, &c->gr);
}

void userdb_conn_free(struct conn *c)
{
	struct udb_conn *u = c->udb;
	if (!u)
		return;
	call_reset(c);
	udb_reader_free(&u->rd);
	idc_buf_free(&u->inner);
	idc_buf_free(&u->user);
	idc_buf_free(&u->names);
	idc_buf_free(&u->keys);
	free(u->ptrs);
	free(u);
	c->udb = NULL;
}

int userdb_feed(struct conn *c, const void *p, size_t n)
{
	return udb_reader_feed(&c->udb->rd, p, n);
}

size_t userdb_buffered(const struct conn *c)
{
	return udb_reader_buffered(&c->udb->rd);
}

bool userdb_active(const struct conn *c)
{
	return c->udb->active;
}

struct idc_buf *userdb_reply_buf(struct conn *c)
{
	return &c->udb->inner;
}

/* ==== replies ============================================================================= */

static int write_error(struct conn *c, const struct udb_error *e)
{
	c->dm->udb_errors++;
	return c->udb->call.oneway ? 0 : udb_error_write(e, &c->out);
}

static int send_error(struct conn *c, const char *name)
{
	struct udb_error e;
	udb_error_set(&e, name, NULL, NULL);
	return write_error(c, &e);
}

/* Take r (NULL: out of memory) as the call's next reply; the one before
 * it goes out, followed. */
static int emit(struct conn *c, struct udb_reply *r)
{
	struct udb_conn *u = c->udb;
	if (!r)
		return -ENOMEM;
	int rc = u->held && !u->call.oneway ? udb_reply_write(u->held, true, &c->out) : 0;
	udb_reply_free(u->held);
	u->held = r;
	u->replies++;
	return rc;
}

/* Emit *r, which the builder that returned rc made (-EILSEQ: a name JSON
 * cannot carry, skipped). A pointer: rc is computed before it is read. */
static int emit_built(struct conn *c, int rc, struct udb_reply **r)
{
	if (rc == -EILSEQ) {
		idc_log(IDC_LOG_DEBUG, "userdb: a record whose name is not UTF-8 left out");
		return 0;
	}
	return rc < 0 ? rc : emit(c, *r);
}

/* The call is answered: its last reply, or NoRecordFound when none. */
static int finish(struct conn *c)
{
	struct udb_conn *u = c->udb;
	int rc = 0;
	if (!u->held)
		rc = send_error(c, UDB_ERR_NOT_FOUND);
	else if (!u->call.oneway)
		rc = udb_reply_write(u->held, false, &c->out);
	call_reset(c);
	return rc;
}

/* Answer the call with error name at once. */
static int fail(struct conn *c, const char *name)
{
	int rc = send_error(c, name);
	call_reset(c);
	return rc;
}

/* Point ptrs[at..) at the strings of list (NUL each); *n: how many. */
static int list_ptrs(struct udb_conn *u, const struct idc_buf *list, size_t at, size_t *n)
{
	*n = 0;
	for (size_t off = 0; off < list->len; off += strlen(list->data + off) + 1) {
		if (at + *n == u->ptrs_cap) {
			size_t cap = u->ptrs_cap ? u->ptrs_cap * 2 : 64;
			const char **grown = realloc(u->ptrs, cap * sizeof(*grown));
			if (!grown)
				return -ENOMEM;
			u->ptrs = grown;
			u->ptrs_cap = cap;
		}
		u->ptrs[at + (*n)++] = list->data + off;
	}
	return 0;
}

/* Whether c may see the privileged section of uid's record: root, or
 * the user itself (the API's rule), as the kernel saw the peer. */
static bool sees_privileged(const struct conn *c, uint32_t uid)
{
	return c->peer_uid == 0 || c->peer_uid == (uid_t)uid;
}

/* A user record; full: with the groups and keys the call gathered (a
 * lookup), else without (an enumeration). Keys the peer may not see are
 * left out and the record marked incomplete. */
static int emit_user(struct conn *c, const struct proto_passwd *pw, bool full)
{
	struct udb_conn *u = c->udb;
	struct udb_user rec = {pw->name.p, pw->uid, pw->gid, pw->gecos.p, pw->dir.p, pw->shell.p};
	rec.service = c->dm->udb_service;
	bool keys = full && u->keys.len > 0;
	rec.incomplete = keys && !sees_privileged(c, pw->uid);
	int rc = full ? list_ptrs(u, &u->names, 0, &rec.nmember_of) : 0;
	if (rc == 0 && keys && !rec.incomplete)
		rc = list_ptrs(u, &u->keys, rec.nmember_of, &rec.nkeys);
	if (rc < 0)
		return rc;
	rec.member_of = rec.nmember_of ? u->ptrs : NULL;
	rec.keys = rec.nkeys ? u->ptrs + rec.nmember_of : NULL;
	struct udb_reply *r = NULL;
	return emit_built(c, udb_reply_user(&rec, &r), &r);
}

/* The group's members as src/userdb takes them (ptrs, valid until the next call). */
static int member_ptrs(struct conn *c, const struct proto_group *gr, const char *const **out)
{
	struct udb_conn *u = c->udb;
	if (gr->mem.count > u->ptrs_cap) {
		const char **grown = realloc(u->ptrs, gr->mem.count * sizeof(*grown));
		if (!grown)
			return -ENOMEM;
		u->ptrs = grown;
		u->ptrs_cap = gr->mem.count;
	}
	size_t off = 0, i = 0;
	struct proto_str m;
	while (i < gr->mem.count && proto_strlist_next(&gr->mem, &off, &m) == 1)
		u->ptrs[i++] = m.p;
	*out = u->ptrs;
	return (int)i;
}

static int emit_group(struct conn *c, const struct proto_group *gr)
{
	const char *const *members;
	int n = member_ptrs(c, gr, &members);
	if (n < 0)
		return n;
	struct udb_group rec = {gr->name.p, gr->gid, members, (size_t)n, c->dm->udb_service};
	struct udb_reply *r = NULL;
	return emit_built(c, udb_reply_group(&rec, &r), &r);
}

/* The memberships of group gr the call asks for: every member, or the
 * user asked. */
static int emit_members(struct conn *c, const struct proto_group *gr)
{
	const struct udb_call *call = &c->udb->call;
	size_t off = 0;
	struct proto_str m;
	int rc = 0;
	while (rc == 0 && proto_strlist_next(&gr->mem, &off, &m) == 1) {
		if (call->has_user && strcmp(m.p, call->user) != 0)
			continue;
		struct udb_reply *r = NULL;
		rc = emit_built(c, udb_reply_membership(m.p, gr->name.p, &r), &r);
	}
	return rc;
}

/* ==== asking the responder ================================================================= */

static struct proto_req request(uint32_t cmd, const char *name, uint32_t id)
{
	struct proto_req req = {.cmd = cmd, .id = id, .max_count = ENUM_BATCH};
	if (name)
		req.name = (struct proto_str){name, (uint32_t)strlen(name)};
	return req;
}

/* Ask the responder for cmd (name or id) into the connection's reply
 * buffer. */
static int ask_req(struct conn *c, uint32_t cmd, const char *name, uint32_t id)
{
	struct proto_req req = request(cmd, name, id);
	c->udb->asked = true;
	return responder_handle(c, &req, &c->udb->inner);
}

/* Ask cmd about the user answered (its groups, its keys): by its name,
 * from the domain whose user of that name is this uid, so the record is
 * one identity when another domain holds the name with another. */
static int ask_about_user(struct conn *c, uint32_t cmd)
{
	struct udb_conn *u = c->udb;
	struct proto_req req = request(cmd, u->user.data, 0);
	u->asked = true;
	return responder_handle_user(c, &req, u->uid, &u->inner);
}

/* The first lookup of a call: the record asked; for memberships the
 * group, or the user (its groups are then asked by the name it has). */
static uint32_t lookup_cmd(const struct udb_call *call)
{
	if (call->method == UDB_GET_USER)
		return call->has_user ? PROTO_CMD_GETPWNAM : PROTO_CMD_GETPWUID;
	if (call->method == UDB_GET_MEMBERSHIPS && !call->has_group)
		return PROTO_CMD_GETPWNAM;
	return call->has_group ? PROTO_CMD_GETGRNAM : PROTO_CMD_GETGRGID;
}

static int ask(struct conn *c)
{
	struct udb_conn *u = c->udb;
	const struct udb_call *call = &u->call;
	bool users = call->method == UDB_GET_USER;
	switch (u->step) {
	case ST_LOOKUP: {
		uint32_t cmd = lookup_cmd(call);
		const char *name = cmd == PROTO_CMD_GETPWNAM ? call->user : call->group;
		return ask_req(c, cmd, name, call->id);
	}
	case ST_INITGROUPS:
		return ask_about_user(c, PROTO_CMD_INITGROUPS);
	case ST_GROUP_OF:
		return ask_req(c, PROTO_CMD_GETGRGID, NULL, u->gids[u->gi]);
	case ST_GROUP_NAMED:
		return ask_req(c, PROTO_CMD_GETGRNAM, u->names.data + u->named_at, 0);
	case ST_KEYS:
		return ask_about_user(c, PROTO_CMD_SSHKEYS);
	case ST_ENUM_SET:
		return ask_req(c, users ? PROTO_CMD_SETPWENT : PROTO_CMD_SETGRENT, NULL, 0);
	default:
		return ask_req(c, users ? PROTO_CMD_GETPWENT : PROTO_CMD_GETGRENT, NULL, 0);
	}
}

/* ==== the responder's replies ================================================================ */

/* The reply in inner: its header (*h) and payload. -EBADMSG when it is
 * not one whole frame (a bug, or out of memory on the way). */
static int inner_reply(struct udb_conn *u, struct proto_hdr *h, const char **payload, size_t *n)
{
	if (proto_decode_hdr(u->inner.data, u->inner.len, PROTO_MAX_REPLY, h) < 0 ||
	    h->length != u->inner.len)
		return -EBADMSG;
	*payload = u->inner.data + PROTO_HDR_SIZE;
	*n = h->length - PROTO_HDR_SIZE;
	return 0;
}

/* Keep the user's strings (the reply buffer is reused) for its record. */
static int keep_user(struct udb_conn *u, const struct proto_passwd *pw)
{
	const struct proto_str *s[] = {&pw->name, &pw->gecos, &pw->dir, &pw->shell};
	idc_buf_reset(&u->user);
	int rc = 0;
	for (size_t i = 0; rc == 0 && i < IDC_ARRAY_SIZE(s); i++)
		rc = idc_buf_append(&u->user, s[i]->p, s[i]->len + 1);
	u->uid = pw->uid;
	u->gid = pw->gid;
	return rc;
}

/* The kept user as a proto_passwd view. */
static struct proto_passwd kept_user(const struct udb_conn *u)
{
	struct proto_str s[4];
	const char *p = u->user.data;
	for (size_t i = 0; i < 4; i++) {
		s[i] = (struct proto_str){p, (uint32_t)strlen(p)};
		p += s[i].len + 1;
	}
	return (struct proto_passwd){s[0], {"", 0}, u->uid, u->gid, s[1], s[2], s[3]};
}

static int on_user(struct conn *c, const char *payload, size_t n)
{
	struct udb_conn *u = c->udb;
	struct proto_passwd pw;
	if (proto_decode_passwd(payload, n, &pw) < 0)
		return -EBADMSG;
	if (u->call.has_user && u->call.has_id && pw.uid != u->call.id)
		return fail(c, UDB_ERR_CONFLICT);
	int rc = keep_user(u, &pw);
	u->step = ST_INITGROUPS;
	return rc;
}

static int on_group(struct conn *c, const char *payload, size_t n)
{
	const struct udb_call *call = &c->udb->call;
	struct proto_group gr;
	if (proto_decode_group(payload, n, &gr) < 0)
		return -EBADMSG;
	if (call->method == UDB_GET_MEMBERSHIPS) {
		int rc = emit_members(c, &gr);
		return rc ? rc : finish(c);
	}
	if (call->has_group && call->has_id && gr.gid != call->id)
		return fail(c, UDB_ERR_CONFLICT);
	int rc = emit_group(c, &gr);
	return rc ? rc : finish(c);
}

/* The user's gids (none when the lookup failed: the record goes without). */
static int on_initgroups(struct conn *c, const struct proto_hdr *h, const char *payload, size_t n)
{
	struct udb_conn *u = c->udb;
	struct proto_gids g = {0};
	if (h->status == PROTO_ST_OK && proto_decode_gids(payload, n, &g) < 0)
		return -EBADMSG;
	if (g.count > 0) {
		uint32_t *grown = realloc(u->gids, g.count * sizeof(*grown));
		if (!grown)
			return -ENOMEM;
		u->gids = grown;
	}
	for (uint32_t i = 0; i < g.count; i++)
		u->gids[i] = proto_gids_get(&g, i);
	u->ngids = g.count;
	u->gi = 0;
	u->step = ST_GROUP_OF;
	return 0;
}

/* After the user's groups: its keys next, or the memberships are done. */
static int groups_done(struct conn *c)
{
	struct udb_conn *u = c->udb;
	if (u->call.method == UDB_GET_MEMBERSHIPS)
		return finish(c);
	u->step = ST_KEYS;
	return 0;
}

/* On to the user's next group, or past the last. */
static int next_group(struct conn *c)
{
	struct udb_conn *u = c->udb;
	u->gi++;
	u->step = ST_GROUP_OF;
	return u->gi < u->ngids ? 0 : groups_done(c);
}

/* The user's keys (none when the provider keeps none or the lookup
 * failed: the record goes without), then the record. */
static int on_keys(struct conn *c, const struct proto_hdr *h, const char *payload, size_t n)
{
	struct udb_conn *u = c->udb;
	struct proto_strlist keys = {0};
	if (h->status == PROTO_ST_OK && proto_decode_sshkeys(payload, n, &keys) < 0)
		return -EBADMSG;
	size_t off = 0;
	struct proto_str k;
	int rc = 0;
	while (rc == 0 && proto_strlist_next(&keys, &off, &k) == 1)
		rc = idc_buf_append(&u->keys, k.p, k.len + 1);
	struct proto_passwd pw = kept_user(u);
	rc = rc ? rc : emit_user(c, &pw, true);
	return rc ? rc : finish(c);
}

/* The name of group gids[gi] (none when the lookup failed: left out),
 * checked next. */
static int on_group_of(struct conn *c, const struct proto_hdr *h, const char *payload, size_t n)
{
	struct udb_conn *u = c->udb;
	struct proto_group gr;
	if (h->status != PROTO_ST_OK)
		return next_group(c);
	if (proto_decode_group(payload, n, &gr) < 0)
		return -EBADMSG;
	u->named_at = u->names.len;
	u->step = ST_GROUP_NAMED;
	return idc_buf_append(&u->names, gr.name.p, gr.name.len + 1);
}

/* A user's group goes by its name (memberOf, memberships), and a client
 * takes the name back to a gid with getgrnam: only a name that answers
 * gids[gi] itself is given. Another domain's group of that name (two
 * files domains, allow_local_overlap) would hand the user that group's
 * gid: the directory's wheel made the host's. */
static int on_group_named(struct conn *c, const struct proto_hdr *h, const char *payload, size_t n)
{
	struct udb_conn *u = c->udb;
	struct proto_group gr;
	bool same = false;
	if (h->status == PROTO_ST_OK) {
		if (proto_decode_group(payload, n, &gr) < 0)
			return -EBADMSG;
		same = gr.gid == u->gids[u->gi];
	}
	int rc = 0;
	if (!same) {
		idc_log(IDC_LOG_DEBUG, "userdb: group %u of %s left out: its name %s is another's",
			(unsigned)u->gids[u->gi], u->user.data, u->names.data + u->named_at);
		u->names.len = u->named_at;
	} else if (u->call.method != UDB_GET_USER) {
		struct udb_reply *r = NULL;
		const char *name = u->names.data + u->named_at;
		rc = emit_built(c, udb_reply_membership(u->user.data, name, &r), &r);
		u->names.len = u->named_at;
	}
	return rc ? rc : next_group(c);
}

/* One get*ent batch: each record as the call wants it. */
static int on_batch(struct conn *c, const struct proto_hdr *h, const char *payload, size_t n)
{
	const struct udb_call *call = &c->udb->call;
	struct proto_batch b;
	if (proto_decode_batch(h->command, payload, n, &b) < 0)
		return -EBADMSG;
	size_t off = 0;
	int rc = 0;
	struct proto_passwd pw;
	struct proto_group gr;
	if (call->method == UDB_GET_USER)
		while (rc == 0 && proto_batch_next_passwd(&b, &off, &pw) == 1)
			rc = emit_user(c, &pw, false);
	else
		while (rc == 0 && proto_batch_next_group(&b, &off, &gr) == 1)
			rc = call->method == UDB_GET_GROUP ? emit_group(c, &gr)
							   : emit_members(c, &gr);
	return rc;
}

/* Move the call on by the reply to its step's request. */
static int take(struct conn *c)
{
	struct udb_conn *u = c->udb;
	struct proto_hdr h;
	const char *payload;
	size_t n;
	int rc = inner_reply(u, &h, &payload, &n);
	if (rc < 0)
		return rc;
	bool ok = h.status == PROTO_ST_OK;
	switch (u->step) {
	case ST_LOOKUP:
		if (!ok)
			return fail(c, h.status == PROTO_ST_NOTFOUND ? UDB_ERR_NOT_FOUND
								     : UDB_ERR_UNAVAIL);
		return lookup_cmd(&u->call) <= PROTO_CMD_GETPWUID ? on_user(c, payload, n)
								  : on_group(c, payload, n);
	case ST_INITGROUPS:
		rc = on_initgroups(c, &h, payload, n);
		return rc || u->ngids ? rc : groups_done(c);
	case ST_GROUP_OF:
		return on_group_of(c, &h, payload, n);
	case ST_GROUP_NAMED:
		return on_group_named(c, &h, payload, n);
	case ST_KEYS:
		return on_keys(c, &h, payload, n);
	case ST_ENUM_SET:
		u->step = ST_ENUM_GET;
		return ok ? 0 : fail(c, UDB_ERR_UNAVAIL);
	default:
		if (h.status == PROTO_ST_NOTFOUND)
			return finish(c);
		return ok ? on_batch(c, &h, payload, n) : fail(c, UDB_ERR_UNAVAIL);
	}
}

/* One move of the call: ask its step's request, or take its reply. */
static int advance(struct conn *c)
{
	struct udb_conn *u = c->udb;
	if (!u->asked)
		return ask(c);
	if (u->inner.len == 0) /* asked, answered nothing, waits for nothing */
		return -EBADMSG;
	int rc = take(c);
	if (u->active) {
		u->asked = false;
		trim(&u->inner);
	}
	return rc;
}

/* ==== calls ========================================================================= */

/* Whether the call asks for more than one record. */
static bool enumerates(const struct udb_call *call)
{
	switch (call->method) {
	case UDB_GET_USER:
		return !call->has_user && !call->has_id;
	case UDB_GET_GROUP:
		return !call->has_group && !call->has_id;
	default:
		return !call->has_user || !call->has_group;
	}
}

/* The first step of a call, or its answer when it needs none. */
static int begin(struct conn *c)
{
	struct udb_conn *u = c->udb;
	const struct udb_call *call = &u->call;
	if (call->method == UDB_GET_INFO) {
		struct udb_reply *r = NULL;
		int rc = udb_reply_info(IDC_VERSION, &r);
		return rc ? rc : emit(c, r) ? -ENOMEM : finish(c);
	}
	if (!call->has_service || strcmp(call->service, c->dm->udb_service) != 0)
		return fail(c, UDB_ERR_BAD_SVC);
	if (call->bad_user || call->bad_group)
		return fail(c, UDB_ERR_NOT_FOUND);
	if (enumerates(call) && !call->more)
		return fail(c, UDB_ERR_MORE);
	bool all = call->method == UDB_GET_MEMBERSHIPS ? !call->has_user && !call->has_group
						       : enumerates(call);
	if (all && !c->dm->cfg->userdb.enumerate)
		return fail(c, UDB_ERR_NO_ENUM);
	u->step = all ? ST_ENUM_SET : ST_LOOKUP;
	return 0;
}

/* Decode the next message and start its call. */
static int start_call(struct conn *c, const char *msg, size_t len)
{
	struct udb_conn *u = c->udb;
	struct udb_error e;
	int rc = udb_call_parse(msg, len, &u->call, &e);
	if (rc < 0) {
		c->dm->udb_malformed += rc == -EBADMSG;
		idc_log(IDC_LOG_DEBUG, "userdb: uid %d sent something not Varlink: closing",
			(int)c->peer_uid);
		return rc;
	}
	c->dm->udb_calls++;
	if (rc == 1)
		return write_error(c, &e);
	u->active = true;
	return begin(c);
}

int userdb_process(struct conn *c)
{
	struct udb_conn *u = c->udb;
	int rc = 0;
	while (rc == 0 && conn_may_take(c)) {
		if (u->active) {
			rc = advance(c);
			continue;
		}
		const char *msg;
		size_t len;
		int got = udb_reader_next(&u->rd, &msg, &len);
		c->dm->udb_malformed += got == -EMSGSIZE;
		if (got <= 0) {
			rc = got == -EMSGSIZE ? -EBADMSG : got;
			break;
		}
		rc = start_call(c, msg, len);
	}
	return rc;
}
