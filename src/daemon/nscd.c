/*
 * nscd: the nscd protocol's socket (nscd_socket in idcache.conf), for
 * glibc's built-in nscd client and musl's.
 *
 * A connection carries one request (both clients open one per lookup) and
 * is a struct conn like nss.sock's: the same per-uid connection limits,
 * budget, idle timeout and back-pressure (conn.c, listen.c, peers.c).
 * Only the framing differs: the request is read here, bounded by
 * nscd.h's NSCD_KEY_MAX, and a malformed one is answered by a close, as
 * nscd does.
 *
 * The five lookups go through the responder itself (responder_handle),
 * so they follow exactly its domain order and precedence rules
 * (docs/DESIGN.md §11) and wait for a directory as its own requests do;
 * its reply, staged in the connection's output, is rewritten in nscd's
 * layout once complete. What no domain holds (or a cache failure) is
 * asked of the host's other sources off the loop (nscdhost.c): the
 * socket's "not found" is final for glibc, so it must be NSS's. Every
 * other database is answered with its "not served" header (found -1), so
 * the client asks NSS at once; SHUTDOWN, GETSTAT, INVALIDATE and the GETFD
 * requests without a map by a close.
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/daemon.h"

enum nc_state { NC_READ = 0, NC_STAGED, NC_HOST, NC_DONE };

struct nscd_conn {
	enum nc_state state;
	uint8_t in[NSCD_REQ_HDR + NSCD_KEY_MAX];
	size_t len;
	int32_t type;
	char key[NSCD_KEY_MAX + 1];
	uint32_t key_len, id;
	size_t staged_at; /* the responder's reply starts here in c->out */
	struct nscd_job *job;
	int pass_fd; /* a GETFD reply's descriptor (ours), with out byte pass_at */
	size_t pass_at;
};

/* ==== the socket ================================================================== */

int daemon_nscd_open(struct daemon *dm, const struct privs *p)
{
	if (!dm->nscd_path)
		return 0;
	char dir[sizeof(dm->nscd.path)];
	snprintf(dir, sizeof(dir), "%s", dm->nscd_path);
	int rc = privs_make_shared_dir(dirname(dir));
	rc = rc ? rc : listener_open_nscd(dm, &dm->nscd, dm->nscd_path);
	return rc ? rc : privs_chown_path(p, dm->nscd.path);
}

int daemon_nscd_start(struct daemon *dm)
{
	if (!dm->nscd_path)
		return 0;
	int rc = nscd_host_start(dm);
	return rc ? rc : listener_start(dm, &dm->nscd);
}

void daemon_nscd_stop(struct daemon *dm)
{
	listener_close(&dm->nscd);
}

/* After the connections: their jobs are detached. */
void daemon_nscd_fini(struct daemon *dm)
{
	nscd_host_stop(dm);
	free(dm->nscd_path);
	dm->nscd_path = NULL;
}

static const char *const type_names[] = {
    [NSCD_GETPWBYNAME] = "getpwbyname", [NSCD_GETPWBYUID] = "getpwbyuid",
    [NSCD_GETGRBYNAME] = "getgrbyname", [NSCD_GETGRBYGID] = "getgrbygid",
    [NSCD_INITGROUPS] = "initgroups",   [NSCD_GETFDPW] = "getfdpw",
    [NSCD_GETFDGR] = "getfdgr",
};

void daemon_nscd_status(struct daemon *dm, struct idc_buf *b)
{
	idc_buf_printf(b, "nscd_socket=%s\n", dm->nscd_path ? dm->nscd_path : "");
	if (!dm->nscd_path)
		return;
	uint64_t other = 0;
	for (size_t t = 0; t < NSCD_TYPE_COUNT; t++) {
		if (t < IDC_ARRAY_SIZE(type_names) && type_names[t])
			idc_buf_printf(b, "nscd.requests.%s=%llu\n", type_names[t],
				       (unsigned long long)dm->nscd_requests[t]);
		else
			other += dm->nscd_requests[t];
	}
	idc_buf_printf(b, "nscd.requests.other=%llu\n", (unsigned long long)other);
	idc_buf_printf(b, "nscd.host_lookups=%llu\nnscd.host_lookups_refused=%llu\n",
		       (unsigned long long)dm->nscd_host_asked,
		       (unsigned long long)dm->nscd_host_full);
	idc_buf_printf(b, "nscd.negative_answers=%llu\n",
		       (unsigned long long)dm->nscd_negative_hits);
}

/* ==== connection state =========================================================================
 */

int daemon_nscd_conn_init(struct conn *c)
{
	if (!(c->nscd = calloc(1, sizeof(*c->nscd))))
		return -ENOMEM;
	c->nscd->pass_fd = -1;
	return 0;
}

void daemon_nscd_conn_free(struct conn *c)
{
	if (!c->nscd)
		return;
	if (c->nscd->pass_fd >= 0)
		close(c->nscd->pass_fd);
	free(c->nscd);
	c->nscd = NULL;
}

void daemon_nscd_detach(struct conn *c)
{
	if (c->nscd && c->nscd->job)
		c->nscd->job->c = NULL; /* freed when its worker is done */
	if (c->nscd)
		c->nscd->job = NULL;
}

bool daemon_nscd_busy(const struct conn *c)
{
	return c->nscd && c->nscd->state == NC_HOST;
}

/* Bytes past one request are never read: the client sends nothing more. */
int daemon_nscd_feed(struct conn *c, const void *p, size_t n)
{
	struct nscd_conn *nc = c->nscd;
	size_t room = sizeof(nc->in) - nc->len;
	n = n < room ? n : room;
	memcpy(nc->in + nc->len, p, n);
	nc->len += n;
	return 0;
}

int daemon_nscd_fd_at(const struct conn *c, size_t off)
{
	const struct nscd_conn *nc = c->nscd;
	return nc && nc->pass_fd >= 0 && off == nc->pass_at ? nc->pass_fd : -1;
}

void daemon_nscd_fd_sent(struct conn *c)
{
	close(c->nscd->pass_fd);
	c->nscd->pass_fd = -1;
}

/* ==== answers
 * ====================================================================================== */

/* Append size bytes written by the caller at the returned pointer (NULL:
 * out of memory). */
static uint8_t *out_room(struct conn *c, size_t size)
{
	if (idc_buf_reserve(&c->out, size) < 0)
		return NULL;
	uint8_t *p = (uint8_t *)c->out.data + c->out.len;
	c->out.len += size;
	return p;
}

/* The final answer: the client reads it, and the connection closes. */
static void done(struct conn *c)
{
	c->nscd->state = NC_DONE;
	c->closing = true;
}

static int answer_status(struct conn *c, int32_t found)
{
	struct nscd_conn *nc = c->nscd;
	size_t size = nscd_status_size(nc->type);
	uint8_t *p = size ? out_room(c, size) : NULL;
	done(c);
	if (size && !p)
		return -ENOMEM;
	if (p)
		nscd_encode_status(p, size, nc->type, found);
	return 0;
}

/* GETFDPW / GETFDGR: the key back and the map's size, its descriptor (a
 * duplicate of ours, so a map replaced meanwhile does not matter) with
 * the first byte; no map: a close, and glibc reads through the socket. */
static int answer_fd(struct conn *c)
{
	struct nscd_conn *nc = c->nscd;
	uint64_t size = 0;
	int db = nc->type == NSCD_GETFDPW ? 0 : 1;
	int fd = nscd_key_name(&(struct nscd_req){nc->type, nc->key, nc->key_len})
		     ? nscdmaps_fd(c->dm, db, &size)
		     : -EBADMSG;
	int dup = fd >= 0 ? fcntl(fd, F_DUPFD_CLOEXEC, 3) : -1;
	done(c);
	if (dup < 0)
		return 0;
	size_t len = nc->key_len + sizeof(size);
	uint8_t *p = out_room(c, len);
	if (!p) {
		close(dup);
		return -ENOMEM;
	}
	nscd_encode_fd_reply(p, len, nc->key, nc->key_len, size);
	nc->pass_fd = dup;
	nc->pass_at = (size_t)(p - (uint8_t *)c->out.data);
	return 0;
}

/* `nscd -i passwd`, which useradd and friends run after changing the
 * files: from root, the remembered "not found" answers go (the files
 * domains follow the files themselves) and 0 is the answer, as nscd's;
 * anyone else's is ignored with a close, as nscd ignores it. */
static int answer_invalidate(struct conn *c, const struct nscd_req *req)
{
	static const char *const dbs[] = {"passwd", "group", "hosts", "services", "netgroup"};
	const char *db = nscd_key_name(req);
	done(c);
	if (c->peer_uid != 0 || !db)
		return 0;
	int32_t err = EINVAL;
	for (size_t i = 0; i < IDC_ARRAY_SIZE(dbs); i++)
		if (strcmp(db, dbs[i]) == 0)
			err = 0;
	if (err == 0 && (strcmp(db, "passwd") == 0 || strcmp(db, "group") == 0))
		nscd_neg_clear(c->dm);
	/* glibc's map holds group lists with the host's groups merged: the
	 * host's group file changed (useradd runs nscd -i group) */
	if (err == 0 && strcmp(db, "group") == 0)
		daemon_mc_reset(c->dm, 2);
	uint8_t *p = out_room(c, 4);
	if (!p)
		return -ENOMEM;
	nscd_encode_invalidate(p, 4, err);
	return 0;
}

static uint32_t proto_cmd(int32_t type)
{
	switch (type) {
	case NSCD_GETPWBYNAME:
		return PROTO_CMD_GETPWNAM;
	case NSCD_GETPWBYUID:
		return PROTO_CMD_GETPWUID;
	case NSCD_GETGRBYNAME:
		return PROTO_CMD_GETGRNAM;
	case NSCD_GETGRBYGID:
		return PROTO_CMD_GETGRGID;
	default:
		return PROTO_CMD_INITGROUPS;
	}
}

static bool by_id(int32_t type)
{
	return type == NSCD_GETPWBYUID || type == NSCD_GETGRBYGID;
}

/* A lookup: the responder's answer, staged in out. A key that is no name
 * the cache could hold goes straight to the host's sources. */
static int ask_responder(struct conn *c)
{
	struct nscd_conn *nc = c->nscd;
	struct proto_req req = {.cmd = proto_cmd(nc->type)};
	size_t n = strlen(nc->key);
	nc->staged_at = c->out.len;
	nc->state = NC_STAGED;
	if (by_id(nc->type))
		req.id = nc->id;
	else if (n > 0 && n <= PROTO_NAME_MAX)
		req.name = (struct proto_str){nc->key, (uint32_t)n};
	else
		return proto_reply_status(&c->out, req.cmd, PROTO_ST_NOTFOUND, NULL);
	return responder_handle(c, &req, &c->out);
}

static int dispatch(struct conn *c, const struct nscd_req *req)
{
	struct nscd_conn *nc = c->nscd;
	nc->type = req->type;
	nc->key_len = req->key_len;
	memcpy(nc->key, req->key, req->key_len);
	nc->key[req->key_len] = '\0';
	if (req->type < (int32_t)IDC_ARRAY_SIZE(c->dm->nscd_requests))
		c->dm->nscd_requests[req->type]++;
	if (nscd_type_is_lookup(req->type)) {
		bool ok =
		    nscd_key_name(req) && (!by_id(req->type) || nscd_key_id(req, &nc->id) == 0);
		if (!ok) {
			done(c); /* malformed: nscd closes too */
			return 0;
		}
		return ask_responder(c);
	}
	if (req->type == NSCD_GETFDPW || req->type == NSCD_GETFDGR)
		return answer_fd(c);
	if (req->type == NSCD_INVALIDATE)
		return answer_invalidate(c, req);
	return answer_status(c, -1);
}

/* ==== the responder's answer, in nscd's layout
 * ========================================================= */

/* The staged frame (header and payload) in one piece: in out, or, when
 * its record went to the tail (a kept large group), copied into *tmp.
 * The tail is released. NULL when out of memory. */
static const uint8_t *staged(struct conn *c, struct idc_buf *tmp, size_t *n)
{
	struct nscd_conn *nc = c->nscd;
	const uint8_t *p = (const uint8_t *)c->out.data + nc->staged_at;
	*n = c->out.len - nc->staged_at;
	if (!c->tail)
		return p;
	if (idc_buf_append(tmp, p, *n) < 0 ||
	    idc_buf_append(tmp, c->tail->recs.data + c->tail_off, c->tail_end - c->tail_off) < 0)
		return NULL;
	conn_drop_tail(c);
	*n = tmp->len;
	return (const uint8_t *)tmp->data;
}

static int put_passwd(struct conn *c, const struct proto_passwd *pw)
{
	struct nscd_passwd r = {pw->name.p,  pw->passwd.p, pw->uid,    pw->gid,
				pw->gecos.p, pw->dir.p,    pw->shell.p};
	size_t size = nscd_passwd_size(&r);
	uint8_t *p = out_room(c, size);
	if (!p)
		return -ENOMEM;
	return nscd_encode_passwd(p, size, &r) < 0 ? -EMSGSIZE : 0;
}

static int put_group(struct conn *c, const struct proto_group *g)
{
	const char **mem = calloc(g->mem.count + 1u, sizeof(*mem));
	if (!mem)
		return -ENOMEM;
	struct proto_str s;
	size_t off = 0;
	uint32_t n = 0;
	while (n < g->mem.count && proto_strlist_next(&g->mem, &off, &s) == 1)
		mem[n++] = s.p;
	struct nscd_group r = {g->name.p, g->passwd.p, g->gid, mem, n};
	size_t size = nscd_group_size(&r);
	uint8_t *p = out_room(c, size);
	int rc = !p ? -ENOMEM : nscd_encode_group(p, size, &r) < 0 ? -EMSGSIZE : 0;
	free(mem);
	return rc;
}

/* Ask the host's sources (j: the cache's initgroups answer, or NULL). A
 * full queue or no memory: a close, and glibc asks NSS itself. */
static int ask_host(struct conn *c, struct nscd_job *j)
{
	struct nscd_conn *nc = c->nscd;
	if (!j && !(j = calloc(1, sizeof(*j))))
		return -ENOMEM;
	j->c = c;
	j->type = nc->type;
	j->id = nc->id;
	memcpy(j->key, nc->key, nc->key_len + 1u);
	c->dm->nscd_host_asked++;
	if (nscd_host_submit(c->dm, j) < 0) {
		c->dm->nscd_host_full++;
		nscd_job_free(j);
		idc_log(IDC_LOG_DEBUG, "nscd: host lookups are full: closing a client");
		done(c);
		return 0;
	}
	nc->job = j;
	nc->state = NC_HOST;
	return 0;
}

/* INITGROUPS found in the cache: its gids go to the host lookup, merged. */
static int initgroups_job(struct conn *c, const uint8_t *payload, size_t n)
{
	struct proto_gids g;
	struct nscd_job *j = calloc(1, sizeof(*j));
	if (!j)
		return -ENOMEM;
	if (proto_decode_gids(payload, n, &g) == 0 && g.count) {
		if (!(j->gids = calloc(g.count, sizeof(*j->gids)))) {
			free(j);
			return -ENOMEM;
		}
		for (uint32_t i = 0; i < g.count; i++)
			j->gids[i] = proto_gids_get(&g, i);
		j->ngids = g.count;
	}
	j->cache_found = true;
	j->ig_epoch = daemon_mc_ig_epoch(c->dm);
	j->ig_until = c->ig_until; /* of the answer just staged (do_initgroups) */
	return ask_host(c, j);
}

/* The found record of the staged OK reply, in nscd's layout; -EBADMSG:
 * the reply did not decode (then asked of the host, like a failure). */
static int put_found(struct conn *c, const uint8_t *payload, size_t n)
{
	int32_t type = c->nscd->type;
	if (type == NSCD_GETPWBYNAME || type == NSCD_GETPWBYUID) {
		struct proto_passwd pw;
		return proto_decode_passwd(payload, n, &pw) < 0 ? -EBADMSG : put_passwd(c, &pw);
	}
	struct proto_group g;
	return proto_decode_group(payload, n, &g) < 0 ? -EBADMSG : put_group(c, &g);
}

static int transcode(struct conn *c)
{
	struct nscd_conn *nc = c->nscd;
	struct idc_buf tmp = IDC_BUF_INIT;
	struct proto_hdr h;
	size_t n;
	const uint8_t *f = staged(c, &tmp, &n);
	int rc = !f ? -ENOMEM : proto_decode_hdr(f, n, PROTO_MAX_REPLY, &h);
	if (rc == 0 && h.length != n)
		rc = -EBADMSG;
	const uint8_t *payload = f + PROTO_HDR_SIZE;
	size_t plen = n - PROTO_HDR_SIZE;
	if (rc == 0 && f != (const uint8_t *)tmp.data) {
		/* the frame moves aside: its place in out takes the answer */
		rc = idc_buf_append(&tmp, f, n);
		payload = (const uint8_t *)tmp.data + PROTO_HDR_SIZE;
	}
	if (rc == 0) {
		c->out.len = nc->staged_at;
		if (h.status == PROTO_ST_OK && nc->type == NSCD_INITGROUPS)
			rc = initgroups_job(c, payload, plen);
		else if (h.status == PROTO_ST_OK && (rc = put_found(c, payload, plen)) == 0)
			done(c);
		else if (rc != -ENOMEM && nscd_neg_has(c->dm, nc->type, nc->key)) {
			c->dm->nscd_negative_hits++;
			rc = answer_status(c, 0);
		} else if (rc != -ENOMEM)
			rc = ask_host(c, NULL);
	}
	idc_buf_free(&tmp);
	return rc;
}

int daemon_nscd_process(struct conn *c)
{
	struct nscd_conn *nc = c->nscd;
	if (nc->state == NC_READ) {
		struct nscd_req req;
		int rc = nscd_decode_request(nc->in, nc->len, &req);
		if (rc == -EAGAIN)
			return 0;
		if (rc < 0) {
			idc_log(IDC_LOG_DEBUG, "nscd: malformed request from uid %d: closing",
				(int)c->peer_uid);
			done(c);
			return 0;
		}
		if ((rc = dispatch(c, &req)) < 0)
			return rc;
	}
	if (nc->state == NC_STAGED && !c->wait && !c->held)
		return transcode(c);
	return 0;
}

/* A worker's answer (on the loop thread): queue it, or close without one
 * (the client then asks NSS itself); the connection may be gone. */
void daemon_nscd_answered(struct nscd_job *j)
{
	struct conn *c = j->c;
	if (c) {
		c->nscd->job = NULL;
		done(c);
		/* glibc's maps keep the merged list; nss.sock's lacks the host's */
		if (j->cache_found && j->reply && j->type == NSCD_INITGROUPS)
			daemon_mc_put_nscd_initgroups(c->dm, j->key, j->gids, j->ngids, j->ig_epoch,
						      j->ig_until);
		uint8_t *p = j->reply ? out_room(c, j->reply_len) : NULL;
		if (p)
			memcpy(p, j->reply, j->reply_len);
		conn_resume(c, 0);
	}
	nscd_job_free(j);
}
