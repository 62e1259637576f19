/*
 * conn: the domain's one connection — setup step by step from the event
 * loop (TCP connect in progress, StartTLS and bind by message id, the TLS
 * handshake on a helper thread the loop hears from through an eventfd;
 * each step given ldap_network_timeout by the provider's timer), failover
 * along the URI list, failback to the primary, and the offline state with
 * probes on a doubling backoff.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "providers/ldap/lprov_int.h"

const char *lp_server(const struct lprov_domain *ld)
{
	return ld->conn ? ld->cfg.uris[ld->server] : "(no server)";
}

uint64_t lp_jitter_ms(struct lprov_domain *ld, uint64_t ms)
{
	/* xorshift64*: spreading timers needs no stronger randomness */
	uint64_t x = ld->rng ? ld->rng : (ld->hash_seed | 1);
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	ld->rng = x;
	uint64_t r = (x * 0x2545F4914F6CDD1Dull) >> 54; /* 0..1023 */
	return ms * (768 + r / 2) / 1024;
}

static void set_error(struct lprov_domain *ld, const char *uri, const char *what, int rc)
{
	snprintf(ld->last_error, sizeof(ld->last_error), "%s: %s: %s", uri, what,
		 ldap_err2string(rc));
}

/* ldap_max_reply_size: liblber reads a message's length before the
 * message and allocates that much; beyond max it refuses (ERANGE) and the
 * connection fails (lp_read), so a server cannot make the daemon allocate
 * what it declares. The handle's sockbuf serves its one connection. */
static int set_max_incoming(LDAP *l, uint32_t max)
{
	Sockbuf *sb = NULL;
	ber_len_t len = max;
	if (ldap_get_option(l, LDAP_OPT_SOCKBUF, &sb) != LDAP_SUCCESS || !sb)
		return LDAP_LOCAL_ERROR;
	return ber_sockbuf_ctrl(sb, LBER_SB_OPT_SET_MAX_INCOMING, &len) == 1 ? LDAP_SUCCESS
									     : LDAP_LOCAL_ERROR;
}

/* libldap options for one handle; certificate checks apply to it alone
 * (NEWCTX builds a TLS context from this handle's settings). *tls is set
 * when building that context is what failed. */
static int set_options(struct lprov_domain *ld, LDAP *l, bool *tls)
{
	const struct lprov_config *c = &ld->cfg;
	int v3 = LDAP_VERSION3;
	struct timeval tv = {(time_t)(c->network_timeout_ms / 1000),
			     (suseconds_t)(c->network_timeout_ms % 1000) * 1000};
	int req = c->tls_reqcert == LPROV_REQCERT_NEVER   ? LDAP_OPT_X_TLS_NEVER
		  : c->tls_reqcert == LPROV_REQCERT_ALLOW ? LDAP_OPT_X_TLS_ALLOW
		  : c->tls_reqcert == LPROV_REQCERT_TRY   ? LDAP_OPT_X_TLS_TRY
							  : LDAP_OPT_X_TLS_DEMAND;
	int zero = 0;
	int rc = ldap_set_option(l, LDAP_OPT_PROTOCOL_VERSION, &v3);
	/* Referrals are not chased: the provider reads one directory. */
	if (rc == LDAP_SUCCESS)
		rc = ldap_set_option(l, LDAP_OPT_REFERRALS, LDAP_OPT_OFF);
	/* libldap's own bound on the TLS handshake on the helper thread. Not
	 * the one relied on: past its first successful poll libldap reads and
	 * writes in blocking mode without a bound; the provider's deadline
	 * ends a stalled handshake (tls_stop). */
	if (rc == LDAP_SUCCESS)
		rc = ldap_set_option(l, LDAP_OPT_NETWORK_TIMEOUT, &tv);
	if (rc == LDAP_SUCCESS)
		rc = ldap_set_option(l, LDAP_OPT_TIMEOUT, &tv);
	/* ldap_connect returns with the TCP connect in progress (ldaps:// as
	 * well: see plain_uri). */
	if (rc == LDAP_SUCCESS)
		rc = ldap_set_option(l, LDAP_OPT_CONNECT_ASYNC, LDAP_OPT_ON);
	if (rc == LDAP_SUCCESS && c->tls_cacert)
		rc = ldap_set_option(l, LDAP_OPT_X_TLS_CACERTFILE, c->tls_cacert);
	if (rc == LDAP_SUCCESS)
		rc = ldap_set_option(l, LDAP_OPT_X_TLS_REQUIRE_CERT, &req);
	if (rc == LDAP_SUCCESS) {
		rc = ldap_set_option(l, LDAP_OPT_X_TLS_NEWCTX, &zero);
		*tls = rc != LDAP_SUCCESS;
	}
	if (rc == LDAP_SUCCESS)
		rc = set_max_incoming(l, c->max_reply_bytes);
	return rc;
}

static bool is_ldaps(const char *uri)
{
	return !strncasecmp(uri, "ldaps:", 6);
}

/* The name of a setup step in messages (last_error, the log). */
static const char *hs_step(const struct lprov_domain *ld, int hs)
{
	switch (hs) {
	case LP_HS_CONNECT:
		return "connect";
	case LP_HS_STARTTLS:
		return "StartTLS";
	case LP_HS_TLS:
		return is_ldaps(ld->cfg.uris[ld->server]) ? "TLS handshake"
							  : "TLS handshake after StartTLS";
	default:
		return "bind";
	}
}

/* ==== the TLS handshake on a helper thread ================================= */

/* libldap has no TLS handshake that returns when the socket would block:
 * ldap_install_tls polls inside, and past its first successful poll reads
 * and writes in blocking mode without a bound. So it runs on a thread of
 * its own, one per attempt, which owns the handle until it is joined:
 * meanwhile the loop watches `done` (ld->fd) instead of the socket and
 * touches neither conn nor its socket, but to shut the socket down when
 * the attempt is given up (tls_stop). */
struct lp_tls {
	pthread_t thread;
	LDAP *l;
	int sock; /* l's socket */
	int done; /* eventfd, written once ldap_install_tls returned */
	int rc;   /* what it returned: read after the join */
};

static void *tls_main(void *arg)
{
	struct lp_tls *t = arg;
	t->rc = ldap_install_tls(t->l);
	uint64_t one = 1;
	while (write(t->done, &one, sizeof(one)) < 0 && errno == EINTR)
		;
	return NULL;
}

/* LP_HS_TLS: hand conn to a new helper thread. LDAP error code. */
static int tls_start(struct lprov_domain *ld)
{
	struct lp_tls *t = calloc(1, sizeof(*t));
	if (!t)
		return LDAP_NO_MEMORY;
	t->l = ld->conn;
	t->sock = ld->fd;
	t->done = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	/* Signals stay with the loop's thread: the daemon's handlers must not
	 * run on the helper, and a SIGPIPE the helper raises (writing to a
	 * socket the server reset or tls_stop shut down) stays pending on it
	 * and goes away with it. */
	sigset_t all, old;
	sigfillset(&all);
	/* libldap's tls_init bumps two unlocked counters on every handshake
	 * and every LDAP_OPT_X_TLS_NEWCTX, so this thread and the helper may
	 * race on them (helgrind says so). Harmless: they are only compared
	 * with zero, and set_options made them non-zero on this thread before
	 * any helper existed. */
	int rc = t->done < 0 ? errno : pthread_sigmask(SIG_SETMASK, &all, &old);
	if (!rc) {
		rc = pthread_create(&t->thread, NULL, tls_main, t);
		pthread_sigmask(SIG_SETMASK, &old, NULL);
	}
	if (rc) {
		idc_log(IDC_LOG_ERR, "ldap domain %s: cannot start the TLS handshake: %s",
			ld->cfg.name, strerror(rc));
		if (t->done >= 0)
			close(t->done);
		free(t);
		return LDAP_LOCAL_ERROR;
	}
	ld->tls = t;
	ld->fd = t->done;
	return LDAP_SUCCESS;
}

/* Whether the helper thread has finished (it wrote its eventfd). */
static bool tls_finished(struct lprov_domain *ld)
{
	uint64_t n;
	return read(ld->tls->done, &n, sizeof(n)) == (ssize_t)sizeof(n);
}

/* Join the helper thread (finished, or about to), take conn back, and
 * return what ldap_install_tls returned. */
static int tls_join(struct lprov_domain *ld)
{
	struct lp_tls *t = ld->tls;
	pthread_join(t->thread, NULL);
	int rc = t->rc;
	ld->fd = t->sock;
	close(t->done);
	free(t);
	ld->tls = NULL;
	return rc;
}

/* End a handshake in progress (its deadline passed, the connection is
 * dropped): shutting the socket down makes whatever the thread waits in
 * (libldap's poll, a blocking read or write inside the TLS library) return
 * at once, so the join is short. The socket itself stays open, conn's,
 * until conn is unbound. */
static void tls_stop(struct lprov_domain *ld)
{
	if (!ld->tls)
		return;
	uint64_t t0 = idc_now_ns();
	shutdown(ld->tls->sock, SHUT_RDWR);
	tls_join(ld);
	uint64_t ms = (idc_now_ns() - t0) / 1000000u;
	if (ms >= 100) /* not expected: the join is what bounds this */
		idc_log(IDC_LOG_WARN, "ldap domain %s: ending a TLS handshake took %llu ms",
			ld->cfg.name, (unsigned long long)ms);
}

/* ==== setup ================================================================== */

/* The setup of the current server failed at step: say why (with the
 * server's diagnostic when there is one) and drop the handle. */
static void hs_error(struct lprov_domain *ld, const char *step, int rc)
{
	const char *uri = ld->cfg.uris[ld->server];
	tls_stop(ld); /* conn is the helper's until joined */
	set_error(ld, uri, step, rc);
	char *diag = NULL;
	/* After a timeout the diagnostic would only tell of tls_stop's
	 * shutdown. */
	if (ld->conn && rc != LDAP_TIMEOUT &&
	    ldap_get_option(ld->conn, LDAP_OPT_DIAGNOSTIC_MESSAGE, &diag) == LDAP_SUCCESS && diag &&
	    *diag) {
		size_t n = strlen(ld->last_error);
		snprintf(ld->last_error + n, sizeof(ld->last_error) - n, " (%s)", diag);
	}
	ldap_memfree(diag);
	lp_log_once(ld, IDC_LOG_WARN, "ldap domain %s: %s", ld->cfg.name, ld->last_error);
	lp_conn_close(ld);
}

/* The connection is ready. Offline, it is a probe: a rootDSE search must
 * come back (a server may accept and never answer). Online, what waited
 * for it goes out. */
static void connected(struct lprov_domain *ld)
{
	size_t k = ld->server;
	ld->hs = LP_HS_NONE;
	ld->failback_ns = k > 0 ? idc_now_ns() + ld->cfg.primary_retry_ms * 1000000ull : 0;
	idc_log(IDC_LOG_INFO, "ldap domain %s: connected to %s", ld->cfg.name, ld->cfg.uris[k]);
	if (!ld->online) {
		if (lp_search_send(ld, NULL, LP_S_PROBE, "", LDAP_SCOPE_BASE, "(objectClass=*)",
				   false))
			lp_conn_close(ld);
		return;
	}
	if (ld->reqs)
		lp_req_restart_all(ld);
}

/* Send the next step of the setup after `done`, or finish it. LDAP error
 * code (the caller fails the server). */
static int hs_next(struct lprov_domain *ld, int done)
{
	bool ldaps = is_ldaps(ld->cfg.uris[ld->server]);
	ld->hs_deadline_ns = idc_now_ns() + (uint64_t)ld->cfg.network_timeout_ms * 1000000u;
	if (done < LP_HS_STARTTLS && ld->cfg.start_tls && !ldaps) {
		ld->hs = LP_HS_STARTTLS;
		return ldap_start_tls(ld->conn, NULL, NULL, &ld->hs_msgid);
	}
	if (done < LP_HS_TLS && (ldaps || ld->cfg.start_tls)) {
		ld->hs = LP_HS_TLS;
		return tls_start(ld);
	}
	if (done < LP_HS_BIND && ld->cfg.bind_dn) {
		struct berval pw = {strlen(ld->password), ld->password};
		ld->hs = LP_HS_BIND;
		return ldap_sasl_bind(ld->conn, ld->cfg.bind_dn, LDAP_SASL_SIMPLE, &pw, NULL, NULL,
				      &ld->hs_msgid);
	}
	connected(ld);
	return LDAP_SUCCESS;
}

/* LP_HS_CONNECT: 1 connected, 0 still in progress, else an LDAP error. */
static int tcp_connected(struct lprov_domain *ld)
{
	struct pollfd p = {.fd = ld->fd, .events = POLLOUT};
	int n = poll(&p, 1, 0);
	if (n == 0)
		return 0;
	int err = 0;
	socklen_t len = sizeof(err);
	if (n < 0 || getsockopt(ld->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0 || err)
		return LDAP_SERVER_DOWN; /* refused, unreachable */
	return (p.revents & POLLOUT) ? 1 : 0;
}

/* ldaps://host[:port] as ldap://host:port, for ldap_initialize: libldap
 * then starts the TCP connect in progress as for any ldap:// URI, and the
 * handshake follows on the helper thread (ldap_install_tls checks the
 * certificate against the same host). NULL when uri does not parse or
 * memory ran out; else free with ldap_memfree. */
static char *plain_uri(const char *uri)
{
	static char scheme[] = "ldap";
	LDAPURLDesc *u = NULL;
	if (ldap_url_parse(uri, &u) != LDAP_URL_SUCCESS)
		return NULL;
	char *own = u->lud_scheme;
	u->lud_scheme = scheme;
	/* ldap_url_parse fills in 636; ldap:// alone would mean 389 */
	if (!u->lud_port)
		u->lud_port = LDAPS_PORT;
	char *s = ldap_url_desc2str(u);
	u->lud_scheme = own;
	ldap_free_urldesc(u);
	return s;
}

/* Start the setup of uris[i]: TCP connect (in progress), then StartTLS by
 * message id, the TLS handshake (helper thread) and the bind by message
 * id. 0 started (or ready), else failed. */
/* Why ldap_tls_cacert cannot serve (written to why), or false when it
 * can: libldap reads it (PEM only, with OpenSSL and GnuTLS alike) when it
 * builds the handle's TLS context or starts the handshake, and says only
 * "Can't contact LDAP server" or "Connect error" when it cannot. At most
 * LP_CACERT_SCAN bytes are searched for a certificate. */
#define LP_CACERT_SCAN (8u << 20)
static bool cacert_unusable(const char *f, char *why, size_t cap)
{
	int fd = open(f, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0) {
		snprintf(why, cap, "%s", strerror(errno));
		if (fd >= 0)
			close(fd);
		return true;
	}
	if (!S_ISREG(st.st_mode)) {
		snprintf(why, cap, "%s",
			 S_ISDIR(st.st_mode) ? strerror(EISDIR) : "not a regular file");
		close(fd);
		return true;
	}
	size_t n = st.st_size > (off_t)LP_CACERT_SCAN ? LP_CACERT_SCAN : (size_t)st.st_size;
	char *buf = malloc(n + 1);
	ssize_t got = buf ? pread(fd, buf, n, 0) : -1;
	int err = errno;
	close(fd);
	bool found = false;
	if (got >= 0) {
		const char *b = memmem(buf, (size_t)got, "-----BEGIN ", 11);
		found = b && memmem(b, (size_t)got - (size_t)(b - buf), "CERTIFICATE-----", 16);
		snprintf(why, cap, "no CA certificate could be read from it (PEM expected)");
	} else {
		snprintf(why, cap, "%s", strerror(buf ? err : ENOMEM));
	}
	free(buf);
	return !found;
}

/* A connection that will use TLS and whose CA file cannot serve fails
 * here, before anything is sent, naming the URI, the option, the file and
 * the reason. true when it did (logged; nothing to close yet). */
static bool tls_cacert_error(struct lprov_domain *ld, const char *uri)
{
	const char *f = ld->cfg.tls_cacert;
	char why[160];
	if (!f || !(is_ldaps(uri) || ld->cfg.start_tls) || !cacert_unusable(f, why, sizeof(why)))
		return false;
	snprintf(ld->last_error, sizeof(ld->last_error), "%s: ldap_tls_cacert %s: %s", uri, f, why);
	lp_log_once(ld, IDC_LOG_WARN, "ldap domain %s: %s", ld->cfg.name, ld->last_error);
	return true;
}

static int open_one(struct lprov_domain *ld, size_t i)
{
	const char *uri = ld->cfg.uris[i];
	LDAP *l = NULL;
	char *plain = NULL;
	int rc = LDAP_SUCCESS;
	if (tls_cacert_error(ld, uri))
		return -1;
	if (is_ldaps(uri) && !(plain = plain_uri(uri)))
		rc = LDAP_PARAM_ERROR;
	if (rc == LDAP_SUCCESS)
		rc = ldap_initialize(&l, plain ? plain : uri);
	ldap_memfree(plain);
	if (rc != LDAP_SUCCESS) {
		set_error(ld, uri, "initialize", rc);
		lp_log_once(ld, IDC_LOG_WARN, "ldap domain %s: %s", ld->cfg.name, ld->last_error);
		return -1;
	}
	ld->conn = l;
	ld->server = i;
	ld->hs = LP_HS_CONNECT;
	ld->hs_deadline_ns = idc_now_ns() + (uint64_t)ld->cfg.network_timeout_ms * 1000000u;
	bool tls = false;
	rc = set_options(ld, l, &tls);
	if (rc != LDAP_SUCCESS) {
		hs_error(ld, tls ? "TLS settings" : "options", rc);
		return -1;
	}
	rc = ldap_connect(l);
	int fd = -1;
	if (rc == LDAP_SUCCESS &&
	    (ldap_get_option(l, LDAP_OPT_DESC, &fd) != LDAP_SUCCESS || fd < 0))
		rc = LDAP_CONNECT_ERROR;
	if (rc != LDAP_SUCCESS) {
		hs_error(ld, "connect", rc);
		return -1;
	}
	ld->fd = fd;
	/* On loopback and a near network, the connect is already done. */
	rc = tcp_connected(ld);
	if (rc == 1)
		rc = hs_next(ld, LP_HS_CONNECT);
	if (rc != LDAP_SUCCESS) {
		hs_error(ld, hs_step(ld, ld->hs), rc);
		return -1;
	}
	return 0;
}

/* Start with the servers in order from first, each once, until one starts
 * its setup. -EHOSTUNREACH when none is left. */
static int open_from(struct lprov_domain *ld, size_t first)
{
	for (size_t k = first; k < ld->cfg.nuris; k++)
		if (open_one(ld, k) == 0)
			return 0;
	return -EHOSTUNREACH;
}

/* The setup of the current server failed: the next one, or (none left)
 * offline; a probe that failed waits for the next one. */
static void hs_fail(struct lprov_domain *ld, const char *step, int rc)
{
	size_t next = ld->server + 1;
	hs_error(ld, step, rc);
	if (open_from(ld, next) == 0)
		return;
	if (ld->online)
		lp_go_offline(ld, ld->last_error);
}

/* LP_HS_STARTTLS, LP_HS_BIND: read the step's reply if it came. Whether
 * the step is over (the next one started, or the server failed). */
static bool hs_reply(struct lprov_domain *ld, int step)
{
	struct timeval zero = {0, 0};
	LDAPMessage *msg = NULL;
	int n = ldap_result(ld->conn, ld->hs_msgid, LDAP_MSG_ALL, &zero, &msg);
	if (n < 0) {
		int err = LDAP_SERVER_DOWN;
		ldap_get_option(ld->conn, LDAP_OPT_RESULT_CODE, &err);
		ldap_msgfree(msg);
		hs_fail(ld, hs_step(ld, step), err);
		return true;
	}
	if (n == 0)
		return false;
	int err = LDAP_OTHER;
	int rc = ldap_parse_result(ld->conn, msg, &err, NULL, NULL, NULL, NULL, 1);
	if (rc != LDAP_SUCCESS)
		err = rc;
	if (err == LDAP_SUCCESS)
		err = hs_next(ld, step); /* after StartTLS: the handshake */
	if (err != LDAP_SUCCESS)
		hs_fail(ld, hs_step(ld, ld->hs), err);
	return true;
}

/* LP_HS_TLS: whether the helper thread finished (and the next step
 * started, or the server failed). */
static bool hs_tls(struct lprov_domain *ld)
{
	if (!tls_finished(ld))
		return false;
	int rc = tls_join(ld);
	if (rc == LDAP_SUCCESS)
		rc = hs_next(ld, LP_HS_TLS);
	if (rc != LDAP_SUCCESS)
		hs_fail(ld, hs_step(ld, ld->hs), rc);
	return true;
}

void lp_conn_handshake(struct lprov_domain *ld, uint64_t now)
{
	if (!ld->conn || ld->hs == LP_HS_NONE)
		return;
	int step = ld->hs;
	if (step == LP_HS_CONNECT) {
		int rc = tcp_connected(ld);
		if (rc == 1) {
			rc = hs_next(ld, LP_HS_CONNECT);
			if (rc != LDAP_SUCCESS)
				hs_fail(ld, hs_step(ld, ld->hs), rc);
			return;
		}
		if (rc) {
			hs_fail(ld, "connect", rc);
			return;
		}
	} else if (step == LP_HS_TLS ? hs_tls(ld) : hs_reply(ld, step)) {
		return;
	}
	if (now >= ld->hs_deadline_ns)
		hs_fail(ld, hs_step(ld, step), LDAP_TIMEOUT);
}

/* ldap_unbind_ext writes an unbind request: on a socket whose connect
 * failed (refused while in progress) or that the server reset, that write
 * raises SIGPIPE, which a program using the provider may not ignore. Block
 * it around the call and take back one it raised. */
static void unbind_quietly(LDAP *l)
{
	sigset_t pipe, old, pending;
	sigemptyset(&pipe);
	sigaddset(&pipe, SIGPIPE);
	sigemptyset(&pending);
	bool was_pending = false;
	if (pthread_sigmask(SIG_BLOCK, &pipe, &old) == 0) {
		if (sigpending(&pending) == 0)
			was_pending = sigismember(&pending, SIGPIPE) == 1;
	} else {
		ldap_unbind_ext(l, NULL, NULL);
		return;
	}
	ldap_unbind_ext(l, NULL, NULL);
	sigemptyset(&pending);
	if (!was_pending && sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1) {
		struct timespec zero = {0, 0};
		while (sigtimedwait(&pipe, NULL, &zero) < 0 && errno == EINTR)
			;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
}

void lp_conn_close(struct lprov_domain *ld)
{
	lp_sync_lost(ld);
	tls_stop(ld);
	lp_search_drop_all(ld);
	ld->hs = LP_HS_NONE;
	if (ld->conn)
		unbind_quietly(ld->conn);
	ld->conn = NULL;
	ld->fd = -1;
	ld->more = false;
}

int lp_conn_ensure(struct lprov_domain *ld)
{
	if (!ld->online)
		return -ENOTCONN;
	if (ld->conn)
		return 0;
	if (open_from(ld, 0) == 0)
		return 0;
	lp_go_offline(ld, ld->last_error);
	return -ENOTCONN;
}

void lp_go_offline(struct lprov_domain *ld, const char *why)
{
	lp_conn_close(ld);
	if (ld->online) {
		ld->online = false;
		ld->since = (int64_t)time(NULL);
		ld->backoff_ms = ld->cfg.offline_timeout_ms;
		/* a sync feed comes back sooner: it is what keeps the cache true */
		if (lp_sync_wanted(ld) && ld->backoff_ms > LP_SYNC_PROBE_MS)
			ld->backoff_ms = LP_SYNC_PROBE_MS;
		idc_log(IDC_LOG_WARN, "ldap domain %s: offline, serving cached entries (%s)",
			ld->cfg.name, why);
	}
	ld->next_probe_ns = idc_now_ns() + lp_jitter_ms(ld, ld->backoff_ms) * 1000000u;
	lp_req_finish_all(ld, LPROV_LOOKUP_OFFLINE);
}

void lp_conn_fail(struct lprov_domain *ld, const char *why)
{
	size_t next = ld->server + 1;
	snprintf(ld->last_error, sizeof(ld->last_error), "%s: %s", lp_server(ld), why);
	idc_log(IDC_LOG_WARN, "ldap domain %s: %s", ld->cfg.name, ld->last_error);
	bool had = ld->conn != NULL;
	lp_conn_close(ld);
	if (!ld->online)
		return;
	/* The next server in order (the primary comes back by failback);
	 * requests restart when it is ready (connected). */
	if (had && open_from(ld, next) == 0)
		return;
	lp_go_offline(ld, ld->last_error);
}

/* Offline: probe the servers from the primary (see connected). */
static void probe(struct lprov_domain *ld, uint64_t now)
{
	uint64_t b = (uint64_t)ld->backoff_ms * 2;
	uint64_t max = lp_sync_wanted(ld) ? LP_SYNC_PROBE_MAX_MS : LP_BACKOFF_MAX_MS;
	ld->backoff_ms = b > max ? (uint32_t)max : (uint32_t)b;
	ld->next_probe_ns = now + lp_jitter_ms(ld, ld->backoff_ms) * 1000000u;
	lp_conn_close(ld);
	open_from(ld, 0); /* connected() sends the rootDSE search */
}

void lprov_domain_retry_now(struct lprov_domain *ld)
{
	if (ld->online)
		return;
	ld->backoff_ms = ld->cfg.offline_timeout_ms / 2; /* probe() doubles it */
	ld->next_probe_ns = idc_now_ns();
}

void lp_probe_answered(struct lprov_domain *ld)
{
	if (ld->online)
		return;
	ld->online = true;
	ld->since = (int64_t)time(NULL);
	ld->last_error[0] = '\0';
	idc_log(IDC_LOG_INFO, "ldap domain %s: online again (%s)", ld->cfg.name, lp_server(ld));
}

/* Close idle connections the server ended, so a dead socket does not keep
 * epoll busy (libldap only notices when it reads for a request). */
static void check_idle(struct lprov_domain *ld)
{
	if (!ld->conn || ld->hs || ld->searches || ld->fd < 0 || lp_sync_active(ld))
		return;
	struct pollfd p = {.fd = ld->fd, .events = POLLIN};
	if (poll(&p, 1, 0) > 0)
		lp_conn_close(ld);
}

void lp_conn_timers(struct lprov_domain *ld, uint64_t now)
{
	if (!ld->online && !ld->probe && !ld->hs && now >= ld->next_probe_ns) {
		probe(ld, now);
		return;
	}
	check_idle(ld);
	/* Failback when nothing is in flight: reconnecting from the primary
	 * falls over again to the secondary if the primary is still down. */
	if (ld->online && ld->conn && !ld->hs && ld->failback_ns && now >= ld->failback_ns &&
	    !ld->searches) {
		lp_conn_close(ld);
		if (open_from(ld, 0) != 0)
			lp_go_offline(ld, ld->last_error);
	}
}
