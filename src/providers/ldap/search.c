/*
 * search: asynchronous searches by msgid — send (with the paged results
 * control when asked), read replies without blocking, follow pages,
 * enforce ldap_search_timeout.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "providers/ldap/ldap_int.h"

void lp_search_free(struct lp_search *s)
{
	if (!s)
		return;
	free(s->base);
	free(s->filter);
	free(s->cookie.bv_val);
	free(s);
}

static void unlink_search(struct ldap_domain *ld, struct lp_search *s)
{
	for (struct lp_search **p = &ld->searches; *p; p = &(*p)->next)
		if (*p == s) {
			*p = s->next;
			break;
		}
	if (ld->probe == s)
		ld->probe = NULL;
}

/* Send s (again, for the next page). LDAP error code. */
static int send_one(struct ldap_domain *ld, struct lp_search *s)
{
	LDAPControl *page = NULL, *ctrls[2] = {NULL, NULL};
	if (s->paged) {
		int rc = ldap_create_page_control(ld->conn, (ber_int_t)ld->cfg.page_size,
						  s->cookie.bv_len ? &s->cookie : NULL, 0, &page);
		if (rc != LDAP_SUCCESS)
			return rc;
		ctrls[0] = page;
	}
	uint32_t ms = ld->cfg.search_timeout_ms;
	/* The server's time limit too, so it stops working when we stop waiting. */
	struct timeval tv = {(time_t)((ms + 999) / 1000), 0};
	int rc = ldap_search_ext(ld->conn, s->base, s->scope, s->filter, (char **)ld->attrs, 0,
				 s->paged ? ctrls : NULL, NULL, &tv, LDAP_NO_LIMIT, &s->msgid);
	if (page)
		ldap_control_free(page);
	if (rc == LDAP_SUCCESS) {
		ld->nsearches++;
		s->deadline_ns = idc_now_ns() + (uint64_t)ms * 1000000u;
	}
	return rc;
}

int lp_search_send(struct ldap_domain *ld, struct lp_req *req, enum lp_purpose purpose,
		   const char *base, int scope, const char *filter, bool paged)
{
	if (!ld->conn || ld->hs)
		return -ENOTCONN;
	struct lp_search *s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->req = req;
	s->purpose = purpose;
	s->scope = scope;
	s->paged = paged;
	s->base = strdup(base);
	s->filter = strdup(filter);
	if (!s->base || !s->filter) {
		lp_search_free(s);
		return -ENOMEM;
	}
	int rc = send_one(ld, s);
	if (rc != LDAP_SUCCESS) {
		lp_search_free(s);
		lp_log_once(ld, IDC_LOG_WARN, "ldap domain %s: %s: search %.200s: %s", ld->cfg.name,
			    lp_server(ld), filter, ldap_err2string(rc));
		return rc == LDAP_FILTER_ERROR ? -EINVAL : -EIO;
	}
	s->next = ld->searches;
	ld->searches = s;
	if (purpose == LP_S_PROBE)
		ld->probe = s;
	if (req)
		req->pending++;
	return 0;
}

void lp_search_drop_all(struct ldap_domain *ld)
{
	while (ld->searches) {
		struct lp_search *s = ld->searches;
		ld->searches = s->next;
		lp_search_free(s);
	}
	ld->probe = NULL;
}

static struct lp_search *find(struct ldap_domain *ld, int msgid)
{
	for (struct lp_search *s = ld->searches; s; s = s->next)
		if (s->msgid == msgid)
			return s;
	return NULL;
}

/* The cookie of the paged results response; empty when this was the last
 * page. 0, or -EPROTO when a paged search came back without one. */
static int next_cookie(struct ldap_domain *ld, struct lp_search *s, LDAPControl **ctrls)
{
	free(s->cookie.bv_val);
	s->cookie = (struct berval){0, NULL};
	LDAPControl *c = ldap_control_find(LDAP_CONTROL_PAGEDRESULTS, ctrls, NULL);
	if (!c)
		return -EPROTO;
	ber_int_t count = 0;
	struct berval ck = {0, NULL};
	if (ldap_parse_pageresponse_control(ld->conn, c, &count, &ck) != LDAP_SUCCESS)
		return -EPROTO;
	if (ck.bv_len) {
		s->cookie.bv_val = malloc(ck.bv_len);
		if (!s->cookie.bv_val) {
			ber_memfree(ck.bv_val);
			return -ENOMEM;
		}
		memcpy(s->cookie.bv_val, ck.bv_val, ck.bv_len);
		s->cookie.bv_len = ck.bv_len;
	}
	ber_memfree(ck.bv_val);
	return 0;
}

/* Result codes after which the answer is simply "what came so far". */
static bool benign(int err)
{
	return err == LDAP_SUCCESS || err == LDAP_NO_SUCH_OBJECT || err == LDAP_REFERRAL ||
	       err == LDAP_SIZELIMIT_EXCEEDED || err == LDAP_ADMINLIMIT_EXCEEDED ||
	       err == LDAP_INSUFFICIENT_ACCESS;
}

/* The search is over (or needs its next page): finish it. */
static void on_result(struct ldap_domain *ld, struct lp_search *s, LDAPMessage *msg)
{
	int err = LDAP_OTHER;
	char *text = NULL;
	LDAPControl **ctrls = NULL;
	int rc = ldap_parse_result(ld->conn, msg, &err, NULL, &text, NULL, &ctrls, 0);
	if (rc != LDAP_SUCCESS)
		err = rc;
	if (err != LDAP_SUCCESS && err != LDAP_NO_SUCH_OBJECT)
		lp_log_once(ld, benign(err) ? IDC_LOG_WARN : IDC_LOG_ERR,
			    "ldap domain %s: %s: search base=\"%.200s\" filter=\"%.120s\": %s%s%s",
			    ld->cfg.name, lp_server(ld), s->base, s->filter, ldap_err2string(err),
			    text && *text ? ": " : "", text ? text : "");
	bool again = false, cut = err != LDAP_SUCCESS;
	if (err == LDAP_SUCCESS && s->paged) {
		int ck = next_cookie(ld, s, ctrls);
		if (ck == 0 && s->cookie.bv_len)
			again = send_one(ld, s) == LDAP_SUCCESS;
		/* no cookie to go on with, or the next page not sent: the
		 * pages still to come are missing */
		cut = ck != 0 || (s->cookie.bv_len && !again);
	}
	/* What came is kept, but it may not be all the directory holds:
	 * nothing may be concluded from an entry's absence (a refresh deletes
	 * nothing; lp_req.partial). */
	if (cut && s->req)
		s->req->partial = true;
	ldap_memfree(text);
	ldap_controls_free(ctrls);
	/* An enumeration commits page by page and lets the loop serve others
	 * before the next page is read (never completes the request). */
	if (benign(err) && s->req && s->req->kind == LDAP_LOOKUP_ENUMERATE)
		lp_req_page(s->req);
	if (again)
		return;
	if (!benign(err)) {
		/* busy, unavailable, time limit, protocol error: this server
		 * cannot answer now; another may. */
		lp_conn_fail(ld, ldap_err2string(err));
		return;
	}
	unlink_search(ld, s);
	struct lp_req *r = s->req;
	enum lp_purpose p = s->purpose;
	lp_search_free(s);
	if (p == LP_S_PROBE)
		lp_probe_answered(ld);
	if (r) {
		r->pending--;
		if (r->pending == 0)
			lp_req_searched(r);
	}
}

static void on_message(struct ldap_domain *ld, LDAPMessage *msg)
{
	struct lp_search *s = find(ld, ldap_msgid(msg));
	if (!s)
		return; /* a search already given up */
	switch (ldap_msgtype(msg)) {
	case LDAP_RES_SEARCH_ENTRY:
		lp_entry(ld, s, msg);
		break;
	case LDAP_RES_SEARCH_REFERENCE:
		lp_log_once(ld, IDC_LOG_WARN,
			    "ldap domain %s: %s: referral under \"%.200s\" not followed",
			    ld->cfg.name, lp_server(ld), s->base);
		break;
	case LDAP_RES_SEARCH_RESULT:
		on_result(ld, s, msg);
		break;
	default:
		break;
	}
}

void lp_read(struct ldap_domain *ld)
{
	ld->more = false;
	for (size_t i = 0; ld->conn && i < LP_READ_MAX; i++) {
		struct timeval zero = {0, 0};
		LDAPMessage *msg = NULL;
		int rc = ldap_result(ld->conn, LDAP_RES_ANY, LDAP_MSG_ONE, &zero, &msg);
		if (rc == 0)
			return;
		if (rc < 0) {
			int err = LDAP_SERVER_DOWN;
			ldap_get_option(ld->conn, LDAP_OPT_RESULT_CODE, &err);
			ldap_msgfree(msg);
			if (ld->searches)
				lp_conn_fail(ld, ldap_err2string(err));
			else
				lp_conn_close(ld);
			return;
		}
		on_message(ld, msg);
		ldap_msgfree(msg);
		if (ld->yield) {
			ld->yield = false;
			break;
		}
	}
	ld->more = ld->conn != NULL; /* stopped at the bound or a page: come back at once */
}

void lp_search_deadlines(struct ldap_domain *ld, uint64_t now)
{
	for (struct lp_search *s = ld->searches; s; s = s->next)
		if (now >= s->deadline_ns) {
			lp_conn_fail(ld, "no answer within ldap_search_timeout");
			return; /* the list is gone */
		}
}
