/*
 * subid plugin: libsubid_idcache.so, what shadow-utils' libsubid dlopens
 * for `subid: idcache` in /etc/nsswitch.conf ("libsubid_<name>.so",
 * through the dynamic loader's search path) and reaches through four
 * symbols: shadow_subid_has_range, shadow_subid_list_owner_ranges,
 * shadow_subid_find_subid_owners and shadow_subid_free.
 *
 * Each call asks idcached over nss.sock on a connection of its own
 * (SUBIDS, SUBID_OWNERS) into a reply buffer on the stack. The only
 * allocations are the arrays the API hands to its caller: malloc'd here,
 * released by the caller with free() (shadow 4.13) or shadow_subid_free
 * (later releases look it up), which is free() too.
 *
 * It runs inside setuid newuidmap/newgidmap: the socket is found with
 * secure_getenv (proto_nss_socket_path), nothing is printed, no signal
 * is raised (the client sends with MSG_NOSIGNAL), errno is restored, and
 * every failure is a status, never a crash: a daemon that is down or
 * answers nonsense gives SUBID_STATUS_ERROR_CONN / SUBID_STATUS_ERROR,
 * which newuidmap takes as "no range".
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include <shadow/subid.h>

#include "proto/proto.h"

/* Replies up to this size are received; larger ones (500 ranges) are an
 * error rather than an allocation. */
#define SUBID_REPLY_MAX 4096u

enum subid_status shadow_subid_has_range(const char *owner, unsigned long start,
					 unsigned long count, enum subid_type idtype, bool *result);
enum subid_status shadow_subid_list_owner_ranges(const char *owner, enum subid_type id_type,
						 struct subid_range **ranges, int *count);
enum subid_status shadow_subid_find_subid_owners(unsigned long id, enum subid_type id_type,
						 uid_t **uids, int *count);
void shadow_subid_free(void *ptr);

static bool kind_of(enum subid_type t, uint32_t *kind)
{
	if (t != ID_TYPE_UID && t != ID_TYPE_GID)
		return false;
	*kind = t == ID_TYPE_UID ? PROTO_SUBID_UID : PROTO_SUBID_GID;
	return true;
}

/* One request and its OK payload into buf[0..SUBID_REPLY_MAX); *n its size. */
static enum subid_status ask(const struct proto_req *req, uint8_t *buf, size_t *n)
{
	uint8_t frame[PROTO_HDR_SIZE + 8 + PROTO_NAME_MAX + 1];
	char path[128];
	struct proto_client c;
	struct proto_hdr h;
	int len = proto_encode_request(frame, sizeof(frame), req);
	if (len < 0)
		return SUBID_STATUS_ERROR;
	if (proto_nss_socket_path(path, sizeof(path)) < 0 ||
	    proto_client_connect(&c, path, PROTO_CLIENT_TIMEOUT_MS) < 0)
		return SUBID_STATUS_ERROR_CONN;
	int rc = proto_client_call(&c, frame, (size_t)len, &h, buf, SUBID_REPLY_MAX, n);
	proto_client_close(&c);
	if (rc < 0)
		return rc == -ERANGE ? SUBID_STATUS_ERROR : SUBID_STATUS_ERROR_CONN;
	if (h.status == PROTO_ST_NOTFOUND)
		return SUBID_STATUS_UNKNOWN_USER;
	return h.status == PROTO_ST_OK ? SUBID_STATUS_SUCCESS : SUBID_STATUS_ERROR;
}

/* The owner's ranges of kind, decoded into *s (views into buf). */
static enum subid_status owner_ranges(const char *owner, enum subid_type t, uint8_t *buf,
				      struct proto_subids *s)
{
	struct proto_req req = {.cmd = PROTO_CMD_SUBIDS};
	size_t n = 0;
	if (owner == NULL || !kind_of(t, &req.what))
		return SUBID_STATUS_ERROR;
	size_t len = strnlen(owner, PROTO_NAME_MAX + 1);
	if (len == 0 || len > PROTO_NAME_MAX)
		return SUBID_STATUS_UNKNOWN_USER;
	req.name.p = owner;
	req.name.len = (uint32_t)len;
	enum subid_status st = ask(&req, buf, &n);
	if (st == SUBID_STATUS_SUCCESS && proto_decode_subids(buf, n, s) < 0)
		st = SUBID_STATUS_ERROR;
	return st;
}

enum subid_status shadow_subid_has_range(const char *owner, unsigned long start,
					 unsigned long count, enum subid_type idtype, bool *result)
{
	int saved = errno;
	uint8_t buf[SUBID_REPLY_MAX];
	struct proto_subids s;
	if (result == NULL)
		return SUBID_STATUS_ERROR;
	*result = false;
	enum subid_status st = owner_ranges(owner, idtype, buf, &s);
	/* newuidmap/newgidmap ask with the name of their caller's real uid
	 * (getpwuid). When getpwnam of that name is another uid (two domains
	 * hold the name), the ranges are that other identity's, not the
	 * caller's to map. Root may map anything anyway. */
	bool own = getuid() == 0 || (st == SUBID_STATUS_SUCCESS && s.uid == (uint32_t)getuid());
	/* A range wholly inside one of the owner's: newuidmap asks once per
	 * mapping line. count 0 is no range at all. */
	for (uint32_t i = 0; own && st == SUBID_STATUS_SUCCESS && i < s.count && !*result; i++) {
		uint32_t rs, rc;
		proto_subids_get(&s, i, &rs, &rc);
		*result = count >= 1 && start >= rs && count <= rc && start - rs <= rc - count;
	}
	errno = saved;
	return st;
}

enum subid_status shadow_subid_list_owner_ranges(const char *owner, enum subid_type id_type,
						 struct subid_range **ranges, int *count)
{
	int saved = errno;
	uint8_t buf[SUBID_REPLY_MAX];
	struct proto_subids s;
	if (ranges == NULL || count == NULL)
		return SUBID_STATUS_ERROR;
	*ranges = NULL;
	*count = 0;
	enum subid_status st = owner_ranges(owner, id_type, buf, &s);
	if (st == SUBID_STATUS_SUCCESS && s.count > 0 &&
	    (*ranges = malloc((size_t)s.count * sizeof(**ranges))) == NULL)
		st = SUBID_STATUS_ERROR;
	for (uint32_t i = 0; st == SUBID_STATUS_SUCCESS && i < s.count; i++) {
		uint32_t rs, rc;
		proto_subids_get(&s, i, &rs, &rc);
		(*ranges)[i] = (struct subid_range){.start = rs, .count = rc};
	}
	if (st == SUBID_STATUS_SUCCESS)
		*count = (int)s.count;
	errno = saved;
	return st;
}

enum subid_status shadow_subid_find_subid_owners(unsigned long id, enum subid_type id_type,
						 uid_t **uids, int *count)
{
	int saved = errno;
	uint8_t buf[SUBID_REPLY_MAX];
	struct proto_req req = {.cmd = PROTO_CMD_SUBID_OWNERS, .id = (uint32_t)id};
	struct proto_gids g = {0};
	size_t n = 0;
	if (uids == NULL || count == NULL)
		return SUBID_STATUS_ERROR;
	*uids = NULL;
	*count = 0;
	if (id >= UINT32_MAX) /* no range holds it: nobody owns it */
		return SUBID_STATUS_SUCCESS;
	enum subid_status st =
	    kind_of(id_type, &req.what) ? ask(&req, buf, &n) : SUBID_STATUS_ERROR;
	if (st == SUBID_STATUS_SUCCESS && proto_decode_gids(buf, n, &g) < 0)
		st = SUBID_STATUS_ERROR;
	if (st == SUBID_STATUS_SUCCESS && g.count > 0 &&
	    (*uids = malloc((size_t)g.count * sizeof(**uids))) == NULL)
		st = SUBID_STATUS_ERROR;
	for (uint32_t i = 0; st == SUBID_STATUS_SUCCESS && i < g.count; i++) {
		uint32_t uid = proto_gids_get(&g, i);
		(*uids)[i] = (uid_t)uid;
		if (uid == UINT32_MAX) /* (uid_t)-1 is nobody's: the reply is wrong */
			st = SUBID_STATUS_ERROR;
	}
	if (st != SUBID_STATUS_SUCCESS) {
		free(*uids);
		*uids = NULL;
	}
	if (st == SUBID_STATUS_SUCCESS)
		*count = (int)g.count;
	errno = saved;
	return st;
}

void shadow_subid_free(void *ptr)
{
	free(ptr);
}
