/*
 * nss internals: shared by the entry-point files of libnss_idcache.so.2.
 * Nothing here is exported (libnss_idcache.sym keeps only _nss_idcache_*).
 *
 * Connection policy: a lookup opens its own connection (HELLO pipelined with
 * the request, so one round trip) and closes it before returning. That makes
 * lookups thread-safe without a lock and fork-safe by construction — no
 * descriptor is shared between threads or inherited into a child half-used —
 * and a restarted daemon is picked up on the next call. The cost (a connect
 * per miss) is paid only when the shared-memory cache, which will sit in
 * front of this path, misses. Enumeration needs the server's per-connection
 * cursor, so it keeps one connection per map under a mutex, owned by the pid
 * that opened it; a child after fork() starts a fresh one.
 */
#ifndef IDC_NSS_INT_H
#define IDC_NSS_INT_H

#include <nss.h>
#include <pthread.h>
#include <sys/types.h>

#include "mc/mc.h"
#include "proto/proto.h"

/* Defined (and exported) by idcached alone: loaded there, for the host
 * lookups of its nscd socket, the module answers UNAVAIL at once instead
 * of asking the daemon, which would be asking itself. A weak reference:
 * NULL everywhere else, one load to test. */
extern const int idc_nss_daemon_self __attribute__((weak));
static inline bool idc_nss_in_daemon(void)
{
	return &idc_nss_daemon_self != NULL;
}

/* Receive area on the stack for replies that do not fit the caller's buffer:
 * enough for any ordinary record, so a short buffer gets an exact ERANGE. */
#define IDC_NSS_STACK_REPLY 2048

/* The errno/status bookkeeping every entry point ends with: restore the
 * caller's errno, then set *errnop only when err is non-zero (glibc may pass
 * &errno as errnop, so the order matters). */
enum nss_status idc_nss_done(enum nss_status st, int err, int saved_errno, int *errnop);

/* Fill *out from a name NSS was asked about; false if the name is malformed
 * (NULL, empty, longer than PROTO_NAME_MAX, a control character or ':'),
 * which the caller answers with NOTFOUND without asking the daemon. */
bool idc_nss_name_ok(const char *name, struct proto_str *out);

/* Connect to nss.sock in $IDCACHE_RUNDIR (read with secure_getenv) or the
 * default run dir; -EAGAIN without trying while the daemon is being left
 * alone after a timeout (see idc_nss_close). */
int idc_nss_connect(struct proto_client *c);
/* Close c; if one of its calls reached its deadline, leave the daemon
 * alone for a while (nss_common.c). */
void idc_nss_close(struct proto_client *c);

/* The shared-memory cache reader for kind (MC_PASSWD, MC_GROUP,
 * MC_INITGROUPS), set up on first use from $IDCACHE_RUNDIR/mc; NULL when
 * disabled by IDCACHE_MEMCACHE=no (both read with secure_getenv). A lookup
 * asks it first and goes to the socket on a miss. */
struct mc_reader *idc_nss_mc(uint32_t kind);
/* Finish an entry point on an mc answer (rc 0: hit; -ERANGE: short buffer,
 * TRYAGAIN/ERANGE). */
enum nss_status idc_nss_mc_done(int rc, int saved_errno, int *errnop);

/* Map a reply status (not OK) to an NSS status and the errno to report. */
enum nss_status idc_nss_status(uint32_t st, int *err);

/* One lookup on a fresh connection: send req, receive an OK reply's payload
 * into buf when it fits (the caller then unpacks in place) or into stack.
 * On SUCCESS, payload and n describe it. Otherwise returns the status to give
 * glibc with *err the errno to report (0: keep). */
enum nss_status idc_nss_fetch(const struct proto_req *req, char *buf, size_t buflen, uint8_t *stack,
			      size_t stacklen, const uint8_t **payload, size_t *n, int *err);

/* Enumeration state of one map (passwd or group). */
struct idc_ent {
	pthread_mutex_t lock;
	uint32_t set_cmd, get_cmd;
	pid_t pid;             /* owner of c; another pid is a forked child */
	struct proto_client c; /* fd -1 when closed */
	bool done;             /* the server reported the end */
	uint8_t *buf;          /* mmap'd batch buffer, cap bytes */
	size_t cap;
	struct proto_batch batch; /* records in buf */
	size_t off;               /* next record in batch */
	uint32_t left;            /* records not yet handed out */
};

#define IDC_ENT_INIT(set, get)                                                                     \
	{                                                                                          \
		PTHREAD_MUTEX_INITIALIZER, (set), (get), 0, {.fd = -1}, false, NULL, 0, {0}, 0, 0  \
	}

enum nss_status idc_ent_set(struct idc_ent *e);
enum nss_status idc_ent_end(struct idc_ent *e);
/* Hand out the next record packed into result/buf (a struct passwd or
 * struct group, by e->get_cmd). A short buffer gives TRYAGAIN/ERANGE and
 * keeps the record for the next call. */
enum nss_status idc_ent_get(struct idc_ent *e, void *result, char *buf, size_t buflen, int *errnop);

#endif
