/*
 * search: asynchronous searches by msgid — send (with the paged results
 * control when asked), read replies without blocking, follow pages,
 * enforce ldap_search_timeout and what a request may cost: entries a
 * search may return (a lookup by name wants one), ldap_max_entries and
 * ldap_max_searches per request, ldap_max_memory for the requests in
 * flight, and a bounded slice of work per call.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "providers/ldap/lprov_int.h"

void lp_search_free(struct lp_search *s)
{
	if (!s)
		return;
	free(s->base);
	free(s->filter);
	free(s->cookie.bv_val);
	free(s);
}

static void unlink_search(struct lprov_domain *ld, struct lp_search *s)
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
static int send_one(struct lprov_domain *ld, struct lp_search *s)
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
	/* One more than expected, so an extra entry is seen and logged. */
	int limit = s->expect ? (int)s->expect + 1 : LDAP_NO_LIMIT;
	const char **attrs = s->req && s->req->kind == LP_POLL ? ld->poll_attrs : ld->attrs;
	int rc = ldap_search_ext(ld->conn, s->base, s->scope, s->filter, (char **)attrs, 0,
				 s->paged ? ctrls : NULL, NULL, &tv, limit, &s->msgid);
	if (page)
		ldap_control_free(page);
	if (rc == LDAP_SUCCESS) {
		ld->nsearches++;
		s->deadline_ns = idc_now_ns() + (uint64_t)ms * 1000000u;
	}
	return rc;
}

void lp_req_describe(const struct lp_req *r, char *buf, size_t n)
{
	static const char *const what[] = {
	    [LPROV_LOOKUP_PWNAM] = "getpwnam",        [LPROV_LOOKUP_PWUID] = "getpwuid",
	    [LPROV_LOOKUP_GRNAM] = "getgrnam",        [LPROV_LOOKUP_GRGID] = "getgrgid",
	    [LPROV_LOOKUP_INITGROUPS] = "initgroups", [LPROV_LOOKUP_ENUMERATE] = "enumeration",
	};
	if (r->kind == LP_REFRESH)
		snprintf(buf, n, "refresh of expired entries");
	else if (r->kind == LP_POLL)
		snprintf(buf, n, "%s", r->id ? "full poll" : "poll of changed entries");
	else if (r->kind == LPROV_LOOKUP_ENUMERATE)
		snprintf(buf, n, "%s", what[r->kind]);
	else if (r->name)
		snprintf(buf, n, "%s %.64s", what[r->kind], r->name);
	else
		snprintf(buf, n, "%s %u", what[r->kind], (unsigned)r->id);
}

/* Entries a search may return: a lookup by name expects one, by id a few
 * (an id two entries share is kept for both); the rootDSE is one entry.
 * 0: no number of its own (ldap_max_entries bounds the request). */
static size_t expect_for(const struct lp_req *r, enum lp_purpose purpose)
{
	if (purpose == LP_S_PROBE)
		return 1;
	if (!r || purpose != LP_S_FIND)
		return 0;
	switch (r->kind) {
	case LPROV_LOOKUP_PWNAM:
	case LPROV_LOOKUP_GRNAM:
	case LPROV_LOOKUP_INITGROUPS:
		return 1;
	case LPROV_LOOKUP_PWUID:
	case LPROV_LOOKUP_GRGID:
		return LP_SHARED_ID_MAX;
	default:
		return 0;
	}
}

/* ldap_max_searches: whether req may send one more search. When not, the
 * request is cut (it ends with what came) and that is logged once. */
static bool budget_left(struct lprov_domain *ld, struct lp_req *req)
{
	if (!req || req->nsent < ld->cfg.max_searches) {
		if (req)
			req->nsent++;
		return true;
	}
	char what[96];
	lp_req_describe(req, what, sizeof(what));
	lp_log_once(ld, IDC_LOG_WARN,
		    "ldap domain %s: %s: %s: ldap_max_searches = %u searches sent; the answer is "
		    "what came so far",
		    ld->cfg.name, lp_server(ld), what, (unsigned)ld->cfg.max_searches);
	req->cut = req->partial = true;
	return false;
}

int lp_search_send(struct lprov_domain *ld, struct lp_req *req, enum lp_purpose purpose,
		   const char *base, int scope, const char *filter, bool paged)
{
	if (!ld->conn || ld->hs)
		return -ENOTCONN;
	if (!budget_left(ld, req))
		return -E2BIG;
	struct lp_search *s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->req = req;
	s->purpose = purpose;
	s->expect = expect_for(req, purpose);
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

void lp_search_drop_all(struct lprov_domain *ld)
{
	while (ld->searches) {
		struct lp_search *s = ld->searches;
		ld->searches = s->next;
		lp_search_free(s);
	}
	ld->probe = NULL;
}

static struct lp_search *find(struct lprov_domain *ld, int msgid)
{
	for (struct lp_search *s = ld->searches; s; s = s->next)
		if (s->msgid == msgid)
			return s;
	return NULL;
}

/* The cookie of the paged results response; empty when this was the last
 * page. 0, or -EPROTO when a paged search came back without one. */
static int next_cookie(struct lprov_domain *ld, struct lp_search *s, LDAPControl **ctrls)
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

/* s is over: unlink and free it; its request goes on when it was the
 * last of its wave. */
static void search_done(struct lprov_domain *ld, struct lp_search *s)
{
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

/* The search is over (or needs its next page): finish it. */
static void on_result(struct lprov_domain *ld, struct lp_search *s, LDAPMessage *msg)
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
	if (benign(err) && s->req &&
	    (s->req->kind == LPROV_LOOKUP_ENUMERATE || s->req->kind == LP_POLL))
		lp_req_page(s->req);
	if (again)
		return;
	if (!benign(err)) {
		/* busy, unavailable, time limit, protocol error: this server
		 * cannot answer now; another may. */
		lp_conn_fail(ld, ldap_err2string(err));
		return;
	}
	search_done(ld, s);
}

/* s returned more entries than it may: abandon it (libldap drops what
 * still comes for it) and end it with what came. */
static void search_cut(struct lprov_domain *ld, struct lp_search *s)
{
	ldap_abandon_ext(ld->conn, s->msgid, NULL, NULL);
	if (s->req)
		s->req->partial = true;
	search_done(ld, s);
}

/* ldap_max_memory: whether the requests in flight hold more than it for
 * what they read (their arenas: entries, values, DNs). Checked before
 * each entry, so the bound is passed by at most one message. */
static bool over_memory(const struct lprov_domain *ld)
{
	size_t held = 0;
	for (const struct lp_req *r = ld->reqs; r; r = r->next)
		held += lp_req_bytes(r);
	return held > ld->cfg.max_memory;
}

/* A limit of the request cut it: logged once with the search it cut. */
static void log_cut(struct lprov_domain *ld, const struct lp_search *s, const char *limit,
		    uint32_t value, const char *unit)
{
	char what[96];
	lp_req_describe(s->req, what, sizeof(what));
	lp_log_once(ld, IDC_LOG_WARN,
		    "ldap domain %s: %s: %s: %s = %u %s; the rest of the answer is dropped "
		    "(search base=\"%.200s\" filter=\"%.120s\")",
		    ld->cfg.name, lp_server(ld), what, limit, (unsigned)value, unit, s->base,
		    s->filter);
	s->req->cut = true;
}

/* Whether the entry msg is one more than s or its request may take
 * (logged once, with the DN for a search that expected fewer). */
static bool entry_over(struct lprov_domain *ld, struct lp_search *s, LDAPMessage *msg)
{
	struct lp_req *r = s->req;
	if (s->expect && ++s->nentries > s->expect) {
		char what[96] = "rootDSE", *dn = ldap_get_dn(ld->conn, msg);
		if (r)
			lp_req_describe(r, what, sizeof(what));
		lp_log_once(ld, IDC_LOG_WARN,
			    "ldap domain %s: %s: %s: more than %zu entries for filter \"%.120s\"; "
			    "entry \"%.300s\" and any after it discarded",
			    ld->cfg.name, lp_server(ld), what, s->expect, s->filter, dn ? dn : "?");
		ldap_memfree(dn);
		return true;
	}
	if (!r)
		return false;
	if (!r->cut && over_memory(ld))
		log_cut(ld, s, "ldap_max_memory", ld->cfg.max_memory,
			"bytes held by the domain's requests");
	if (!r->cut && ++r->nentries > ld->cfg.max_entries)
		log_cut(ld, s, "ldap_max_entries", ld->cfg.max_entries, "entries taken");
	return r->cut; /* once cut, every search of the request ends at its next entry */
}

static void on_entry(struct lprov_domain *ld, struct lp_search *s, LDAPMessage *msg)
{
	if (entry_over(ld, s, msg)) {
		search_cut(ld, s);
		return;
	}
	if (s->req && s->req->kind == LP_POLL)
		lp_poll_entry(s->req, msg);
	lp_entry(ld, s, msg);
	/* A large answer is committed as it comes (as an enumeration's pages
	 * are), so no transaction is large. */
	struct lp_req *r = s->req;
	if (r && (++r->unstored >= LP_COMMIT_EVERY ||
		  lp_req_bytes(r) - r->paged_bytes >= LP_COMMIT_BYTES)) {
		lp_req_page(r);
		r->paged_bytes = lp_req_bytes(r);
	}
}

static void on_message(struct lprov_domain *ld, LDAPMessage *msg)
{
	if (lp_sync_owns(ld, ldap_msgid(msg))) {
		lp_sync_message(ld, msg);
		return;
	}
	struct lp_search *s = find(ld, ldap_msgid(msg));
	if (!s)
		return; /* a search already given up */
	switch (ldap_msgtype(msg)) {
	case LDAP_RES_SEARCH_ENTRY:
		on_entry(ld, s, msg);
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

/* ldap_result failed (errno as it left it): the connection is gone. */
static void read_failed(struct lprov_domain *ld, int saved_errno)
{
	int err = LDAP_SERVER_DOWN;
	ldap_get_option(ld->conn, LDAP_OPT_RESULT_CODE, &err);
	char why[160];
	/* liblber refuses a message longer than the sockbuf's maximum
	 * (set_max_incoming, conn.c) with ERANGE, before allocating it */
	if (saved_errno == ERANGE)
		snprintf(why, sizeof(why),
			 "a message larger than ldap_max_reply_size (%u bytes); connection dropped",
			 (unsigned)ld->cfg.max_reply_bytes);
	else
		snprintf(why, sizeof(why), "%s", ldap_err2string(err));
	if (ld->searches || lp_sync_active(ld) || saved_errno == ERANGE)
		lp_conn_fail(ld, why);
	else
		lp_conn_close(ld);
}

void lp_read(struct lprov_domain *ld)
{
	ld->more = false;
	uint64_t t0 = idc_now_ns();
	uint64_t turn_ns = (lp_sync_active(ld) ? LP_TURN_SYNC_MS : LP_TURN_MS) * 1000000ull;
	for (size_t i = 0; ld->conn; i++) {
		/* a slice of work, then the loop serves others and comes back */
		if (i == LP_TURN_MSGS || (i % 4 == 3 && idc_now_ns() - t0 >= turn_ns))
			break;
		struct timeval zero = {0, 0};
		LDAPMessage *msg = NULL;
		errno = 0;
		int rc = ldap_result(ld->conn, LDAP_RES_ANY, LDAP_MSG_ONE, &zero, &msg);
		int saved_errno = errno;
		if (rc == 0)
			return;
		if (rc < 0) {
			ldap_msgfree(msg);
			read_failed(ld, saved_errno);
			return;
		}
		on_message(ld, msg);
		ldap_msgfree(msg);
		if (ld->yield) {
			ld->yield = false;
			break;
		}
	}
	ld->more = ld->conn != NULL; /* stopped at the slice or a page: come back at once */
}

void lp_search_deadlines(struct lprov_domain *ld, uint64_t now)
{
	for (struct lp_search *s = ld->searches; s; s = s->next)
		if (now >= s->deadline_ns) {
			lp_conn_fail(ld, "no answer within ldap_search_timeout");
			return; /* the list is gone */
		}
}

void lp_search_postpone(struct lprov_domain *ld, uint64_t ns)
{
	for (struct lp_search *s = ld->searches; s; s = s->next)
		s->deadline_ns += ns;
}
