/*
 * poll: the periodic pass of a domain without a live sync feed
 * (ldap_poll_interval): every user and group whose change mark — entryUSN
 * where the server keeps one (389-ds), else entryCSN (OpenLDAP), else
 * modifyTimestamp — is not older than the newest the last pass saw, stored like an enumeration's
 * pages; and every ldap_poll_full_interval a full pass, after which what the directory no longer
 * holds is removed (store.c). The mark goes into the transaction of the pass that saw it (provider
 * state "poll.mark"), so a restart goes on from it. Both timers are jittered, so that a fleet
 * started together does not come back together.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "providers/ldap/lprov_int.h"

#define POLL_MARK_KEY "poll.mark"

/* ==== the mark ===================================================================== */

/* "YYYYMMDDHHMMSS[.f...]Z": generalized time as servers write it, which
 * then orders as text. */
static bool gtime_ok(const char *v, size_t n)
{
	if (n < 15 || n > 30 || v[n - 1] != 'Z')
		return false;
	for (size_t i = 0; i < 14; i++)
		if (v[i] < '0' || v[i] > '9')
			return false;
	if (n > 15 && v[14] != '.')
		return false;
	for (size_t i = 15; i + 1 < n; i++)
		if (v[i] < '0' || v[i] > '9')
			return false;
	return n == 15 || n > 16;
}

/* OpenLDAP's "YYYYMMDDHHMMSS.ffffffZ#cnt#sid#mod" (hex counters). */
static bool csn_ok(const char *v, size_t n)
{
	const char *z = memchr(v, 'Z', n);
	if (!z || !gtime_ok(v, (size_t)(z - v) + 1) ||
	    n >= sizeof(((struct lp_poll_mark *)0)->text))
		return false;
	for (const char *p = z + 1; p < v + n; p++)
		if (!(*p == '#' || (*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
			return false;
	return true;
}

/* Decimal digits, no sign, below 10^18. */
static bool usn_value(const char *v, size_t n, uint64_t *out)
{
	uint64_t x = 0;
	if (n == 0 || n > 18)
		return false;
	for (size_t i = 0; i < n; i++) {
		if (v[i] < '0' || v[i] > '9')
			return false;
		x = x * 10 + (uint64_t)(v[i] - '0');
	}
	*out = x;
	return true;
}

/* Whether (kind, v[0..n)) is a valid mark of that kind; into m when it is
 * newer than m's (a mark of a better kind replaces one of a worse). */
static bool mark_take(struct lp_poll_mark *m, char kind, const char *v, size_t n)
{
	static const char order[] = "tcu"; /* worse to better */
	uint64_t usn = 0;
	bool ok = kind == 'u'   ? usn_value(v, n, &usn)
		  : kind == 'c' ? csn_ok(v, n)
				: gtime_ok(v, n) && n < sizeof(m->text);
	if (!ok)
		return false;
	char text[sizeof(m->text)];
	memcpy(text, v, n);
	text[n] = '\0';
	int have = m->kind ? (int)(strchr(order, m->kind) - order) : -1;
	int want = (int)(strchr(order, kind) - order);
	bool newer = want > have || (kind == 'u' ? usn > m->usn : strcmp(text, m->text) > 0);
	if (want < have || !newer)
		return true;
	m->kind = kind;
	m->usn = usn;
	memcpy(m->text, text, sizeof(text));
	return true;
}

/* Text as stored: "<kind> <value>". */
static bool mark_parse(const char *s, struct lp_poll_mark *m)
{
	memset(m, 0, sizeof(*m));
	size_t n = strlen(s);
	return n > 2 && s[1] == ' ' && (s[0] == 'u' || s[0] == 'c' || s[0] == 't') &&
	       mark_take(m, s[0], s + 2, n - 2);
}

static bool mark_set(const struct lp_poll_mark *m)
{
	return m->kind != 0;
}

void lp_poll_entry(struct lp_req *r, LDAPMessage *msg)
{
	static const struct {
		char kind;
		const char *attr;
	} by[] = {{'u', "entryUSN"}, {'c', "entryCSN"}, {'t', "modifyTimestamp"}};
	for (size_t i = 0; i < IDC_ARRAY_SIZE(by); i++) {
		struct berval **v = ldap_get_values_len(r->ld->conn, msg, by[i].attr);
		bool took =
		    v && v[0] && mark_take(&r->mark, by[i].kind, v[0]->bv_val, v[0]->bv_len);
		ldap_value_free_len(v);
		if (took)
			return; /* the best this entry has */
	}
}

int lp_poll_store_state(struct lp_req *r, struct cache_txn *t, struct idc_diag *d)
{
	const struct lp_poll_mark *m = &r->mark;
	char v[96];
	if (!mark_set(m))
		return 0; /* the pass saw nothing: the last mark stands */
	if (m->kind == 'u')
		snprintf(v, sizeof(v), "u %llu", (unsigned long long)m->usn);
	else
		snprintf(v, sizeof(v), "%c %s", m->kind, m->text);
	return cache_state_put(t, r->ld->cfg.name, POLL_MARK_KEY, v, d);
}

void lp_poll_committed(struct lp_req *r)
{
	if (mark_set(&r->mark))
		r->ld->poll_mark = r->mark;
}

/* ==== the pass ======================================================================= */

int lp_wave_poll(struct lp_req *r, bool groups)
{
	struct lprov_domain *ld = r->ld;
	const struct lp_poll_mark *m = &ld->poll_mark;
	struct idc_buf f = IDC_BUF_INIT;
	bool full = r->id != 0 || !mark_set(m);
	/* a full pass removes what it does not find (store.c, collect_gone);
	 * a cache it cannot read removes nothing this time */
	int rc = full && !groups ? lp_cached_names(r) : 0;
	if (rc && rc != -ENOMEM) {
		lp_vec_free(&r->ru);
		lp_vec_free(&r->rg);
		rc = 0;
	}
	if (!rc && !full)
		rc = idc_buf_printf(&f, "(&");
	if (!rc)
		rc = lp_oc_filter(&f, ld, !groups, groups);
	if (!rc && !full && m->kind == 'u')
		rc = idc_buf_printf(&f, "(entryUSN>=%llu))", (unsigned long long)m->usn);
	else if (!rc && !full)
		rc = idc_buf_printf(&f, "(%s>=%s))",
				    m->kind == 'c' ? "entryCSN" : "modifyTimestamp", m->text);
	if (!rc)
		rc = lp_search_send(ld, r, LP_S_FIND, groups ? ld->gbase : ld->ubase,
				    LDAP_SCOPE_SUBTREE, f.data, true);
	idc_buf_free(&f);
	r->id = full; /* the request is full whatever it was started as */
	return rc;
}

/* The mark the last run stored (none: the first pass is a full one). */
static void load_mark(struct lprov_domain *ld)
{
	struct cache_reader *rd;
	char *v = NULL;
	ld->poll_loaded = true;
	if (cache_reader_begin(ld->cache, &rd))
		return;
	if (cache_state_get(rd, ld->cfg.name, POLL_MARK_KEY, &v) == 0 &&
	    !mark_parse(v, &ld->poll_mark))
		idc_log(IDC_LOG_WARN,
			"ldap domain %s: the stored poll mark is not one; a full "
			"pass follows",
			ld->cfg.name);
	cache_reader_end(rd);
	free(v);
}

bool lp_poll_due(const struct lprov_domain *ld)
{
	return ld->cfg.poll_ms && ld->online && !lp_sync_live(ld) && lp_sync_polls(ld);
}

void lp_poll_tick(struct lprov_domain *ld, uint64_t now)
{
	if (!lp_poll_due(ld))
		return;
	if (!ld->poll_loaded)
		load_mark(ld);
	if (!ld->next_full_ns && ld->cfg.poll_full_ms) /* a restart goes on incrementally */
		ld->next_full_ns = now + lp_jitter_ms(ld, ld->cfg.poll_full_ms) * 1000000u;
	/* Without a mark the cache holds nothing of the directory's yet: the
	 * first (full) pass starts at once, as a feed's first refresh does.
	 * With one, the first pass comes within an interval, jittered, so
	 * that a fleet restarted together does not come back together. */
	if (!ld->next_poll_ns)
		ld->next_poll_ns = mark_set(&ld->poll_mark)
				       ? now + lp_jitter_ms(ld, ld->cfg.poll_ms / 2) * 1000000u
				       : now;
	if (now < ld->next_poll_ns)
		return;
	ld->next_poll_ns = now + lp_jitter_ms(ld, ld->cfg.poll_ms) * 1000000u;
	if (lp_req_find(ld, LP_POLL, NULL, 0) || lp_req_find(ld, LP_POLL, NULL, 1))
		return; /* the last pass is still running */
	bool full = !mark_set(&ld->poll_mark) || (ld->cfg.poll_full_ms && now >= ld->next_full_ns);
	if (full && ld->cfg.poll_full_ms)
		ld->next_full_ns = now + lp_jitter_ms(ld, ld->cfg.poll_full_ms) * 1000000u;
	if (lp_req_start(ld, LP_POLL, NULL, full, NULL, NULL) == LPROV_LOOKUP_OFFLINE)
		idc_log(IDC_LOG_DEBUG, "ldap domain %s: poll postponed (offline)", ld->cfg.name);
}

uint64_t lp_poll_next_ns(const struct lprov_domain *ld)
{
	if (!lp_poll_due(ld))
		return 0;
	return ld->next_poll_ns ? ld->next_poll_ns : idc_now_ns();
}
