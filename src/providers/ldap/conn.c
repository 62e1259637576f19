/*
 * conn: the domain's one connection — setup (bounded by
 * ldap_network_timeout), failover along the URI list, failback to the
 * primary, and the offline state with probes on a doubling backoff.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "providers/ldap/ldap_int.h"

const char *lp_server(const struct ldap_domain *ld)
{
	return ld->conn ? ld->cfg.uris[ld->server] : "(no server)";
}

static void set_error(struct ldap_domain *ld, const char *uri, const char *what, int rc)
{
	snprintf(ld->last_error, sizeof(ld->last_error), "%s: %s: %s", uri, what,
		 ldap_err2string(rc));
}

/* libldap options for one handle; certificate checks apply to it alone
 * (NEWCTX builds a TLS context from this handle's settings). */
static int set_options(struct ldap_domain *ld, LDAP *l)
{
	const struct ldap_domain_config *c = &ld->cfg;
	int v3 = LDAP_VERSION3;
	struct timeval tv = {(time_t)(c->network_timeout_ms / 1000),
			     (suseconds_t)(c->network_timeout_ms % 1000) * 1000};
	int req = c->tls_reqcert == LDAP_DOM_REQCERT_NEVER   ? LDAP_OPT_X_TLS_NEVER
		  : c->tls_reqcert == LDAP_DOM_REQCERT_ALLOW ? LDAP_OPT_X_TLS_ALLOW
		  : c->tls_reqcert == LDAP_DOM_REQCERT_TRY   ? LDAP_OPT_X_TLS_TRY
							     : LDAP_OPT_X_TLS_DEMAND;
	int zero = 0;
	int rc = ldap_set_option(l, LDAP_OPT_PROTOCOL_VERSION, &v3);
	/* Referrals are not chased: the provider reads one directory. */
	if (rc == LDAP_SUCCESS)
		rc = ldap_set_option(l, LDAP_OPT_REFERRALS, LDAP_OPT_OFF);
	if (rc == LDAP_SUCCESS)
		rc = ldap_set_option(l, LDAP_OPT_NETWORK_TIMEOUT, &tv);
	/* Bounds the synchronous StartTLS and bind below. */
	if (rc == LDAP_SUCCESS)
		rc = ldap_set_option(l, LDAP_OPT_TIMEOUT, &tv);
	if (rc == LDAP_SUCCESS && c->tls_cacert)
		rc = ldap_set_option(l, LDAP_OPT_X_TLS_CACERTFILE, c->tls_cacert);
	if (rc == LDAP_SUCCESS)
		rc = ldap_set_option(l, LDAP_OPT_X_TLS_REQUIRE_CERT, &req);
	if (rc == LDAP_SUCCESS)
		rc = ldap_set_option(l, LDAP_OPT_X_TLS_NEWCTX, &zero);
	return rc;
}

/* Connect to uris[i]: TCP (+ TLS for ldaps), StartTLS, bind. */
static int open_one(struct ldap_domain *ld, size_t i, LDAP **out)
{
	const char *uri = ld->cfg.uris[i];
	LDAP *l = NULL;
	int rc = ldap_initialize(&l, uri);
	if (rc != LDAP_SUCCESS) {
		set_error(ld, uri, "initialize", rc);
		return rc;
	}
	const char *step = "options";
	rc = set_options(ld, l);
	if (rc == LDAP_SUCCESS) {
		step = "connect";
		rc = ldap_connect(l);
	}
	if (rc == LDAP_SUCCESS && ld->cfg.start_tls && strncasecmp(uri, "ldaps:", 6)) {
		step = "StartTLS";
		rc = ldap_start_tls_s(l, NULL, NULL);
	}
	if (rc == LDAP_SUCCESS && ld->cfg.bind_dn) {
		struct berval pw = {strlen(ld->password), ld->password};
		step = "bind";
		rc = ldap_sasl_bind_s(l, ld->cfg.bind_dn, LDAP_SASL_SIMPLE, &pw, NULL, NULL, NULL);
	}
	if (rc != LDAP_SUCCESS) {
		set_error(ld, uri, step, rc);
		char *diag = NULL;
		if (ldap_get_option(l, LDAP_OPT_DIAGNOSTIC_MESSAGE, &diag) == LDAP_SUCCESS &&
		    diag && *diag) {
			size_t n = strlen(ld->last_error);
			snprintf(ld->last_error + n, sizeof(ld->last_error) - n, " (%s)", diag);
		}
		ldap_memfree(diag);
		ldap_unbind_ext(l, NULL, NULL);
		return rc;
	}
	*out = l;
	return LDAP_SUCCESS;
}

/* Try the servers in order from first, each once. */
static int open_from(struct ldap_domain *ld, size_t first)
{
	for (size_t k = first; k < ld->cfg.nuris; k++) {
		LDAP *l;
		if (open_one(ld, k, &l) != LDAP_SUCCESS) {
			lp_log_once(ld, IDC_LOG_WARN, "ldap domain %s: %s", ld->cfg.name,
				    ld->last_error);
			continue;
		}
		int fd = -1;
		ldap_get_option(l, LDAP_OPT_DESC, &fd);
		ld->conn = l;
		ld->fd = fd;
		ld->server = k;
		ld->failback_ns = k > 0 ? idc_now_ns() + ld->cfg.primary_retry_ms * 1000000ull : 0;
		idc_log(IDC_LOG_INFO, "ldap domain %s: connected to %s", ld->cfg.name,
			ld->cfg.uris[k]);
		return 0;
	}
	return -EHOSTUNREACH;
}

void lp_conn_close(struct ldap_domain *ld)
{
	lp_search_drop_all(ld);
	if (ld->conn)
		ldap_unbind_ext(ld->conn, NULL, NULL);
	ld->conn = NULL;
	ld->fd = -1;
	ld->more = false;
}

int lp_conn_ensure(struct ldap_domain *ld)
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

void lp_go_offline(struct ldap_domain *ld, const char *why)
{
	lp_conn_close(ld);
	if (ld->online) {
		ld->online = false;
		ld->since = (int64_t)time(NULL);
		ld->backoff_ms = ld->cfg.offline_timeout_ms;
		idc_log(IDC_LOG_WARN, "ldap domain %s: offline, serving cached entries (%s)",
			ld->cfg.name, why);
	}
	ld->next_probe_ns = idc_now_ns() + (uint64_t)ld->backoff_ms * 1000000u;
	lp_req_finish_all(ld, LDAP_LOOKUP_OFFLINE);
}

void lp_conn_fail(struct ldap_domain *ld, const char *why)
{
	size_t next = ld->server + 1;
	snprintf(ld->last_error, sizeof(ld->last_error), "%s: %s", lp_server(ld), why);
	idc_log(IDC_LOG_WARN, "ldap domain %s: %s", ld->cfg.name, ld->last_error);
	bool had = ld->conn != NULL;
	lp_conn_close(ld);
	if (!ld->online)
		return;
	/* The next server in order; the primary comes back by failback. */
	if (had && open_from(ld, next) == 0) {
		lp_req_restart_all(ld);
		return;
	}
	lp_go_offline(ld, ld->last_error);
}

/* Offline: probe the servers from the primary. Connected is not enough (a
 * server may accept and never answer): a rootDSE search must come back. */
static void probe(struct ldap_domain *ld, uint64_t now)
{
	uint64_t b = (uint64_t)ld->backoff_ms * 2;
	ld->backoff_ms = b > LP_BACKOFF_MAX_MS ? LP_BACKOFF_MAX_MS : (uint32_t)b;
	ld->next_probe_ns = now + (uint64_t)ld->backoff_ms * 1000000u;
	lp_conn_close(ld);
	if (open_from(ld, 0) != 0)
		return;
	if (lp_search_send(ld, NULL, LP_S_PROBE, "", LDAP_SCOPE_BASE, "(objectClass=*)", false))
		lp_conn_close(ld);
}

void lp_probe_answered(struct ldap_domain *ld)
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
static void check_idle(struct ldap_domain *ld)
{
	if (!ld->conn || ld->searches || ld->fd < 0)
		return;
	struct pollfd p = {.fd = ld->fd, .events = POLLIN};
	if (poll(&p, 1, 0) > 0)
		lp_conn_close(ld);
}

void lp_conn_timers(struct ldap_domain *ld, uint64_t now)
{
	if (!ld->online && !ld->probe && now >= ld->next_probe_ns) {
		probe(ld, now);
		return;
	}
	check_idle(ld);
	/* Failback when nothing is in flight: reconnecting from the primary
	 * falls over again to the secondary if the primary is still down. */
	if (ld->online && ld->conn && ld->failback_ns && now >= ld->failback_ns && !ld->searches) {
		lp_conn_close(ld);
		if (open_from(ld, 0) != 0)
			lp_go_offline(ld, ld->last_error);
	}
}
