/*
 * entries: turning directory entries into users and groups. Every value
 * is hostile: numbers are checked digit by digit and against min_id and
 * max_id, strings for NUL and length (passwd fields also for ':' and
 * control characters), names by the cache's rules, member DNs by DN
 * syntax. A bad entry
 * is logged once (server and DN) and skipped; the rest of the answer stays.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "providers/ldap/lprov_int.h"
#include "subid/subid.h" /* subid_range_ok */

/* ==== containers ============================================================ */

struct lp_map_slot {
	const char *key;
	uint64_t h;
	void *val;
};

static uint64_t str_hash(const char *k)
{
	return idc_hash64(k, strlen(k), 0x1dcac4e);
}

static int map_grow(struct lp_map *m)
{
	size_t n = m->slot ? (m->mask + 1) * 2 : 64;
	struct lp_map_slot *s = calloc(n, sizeof(*s));
	if (!s)
		return -ENOMEM;
	for (size_t i = 0; m->slot && i <= m->mask; i++) {
		if (!m->slot[i].key)
			continue;
		size_t j = m->slot[i].h & (n - 1);
		while (s[j].key)
			j = (j + 1) & (n - 1);
		s[j] = m->slot[i];
	}
	free(m->slot);
	m->slot = s;
	m->mask = n - 1;
	return 0;
}

int lp_map_put(struct lp_map *m, const char *key, void *val)
{
	if ((!m->slot || (m->used + 1) * 2 > m->mask + 1) && map_grow(m))
		return -ENOMEM;
	uint64_t h = str_hash(key);
	size_t j = h & m->mask;
	for (; m->slot[j].key; j = (j + 1) & m->mask)
		if (m->slot[j].h == h && !strcmp(m->slot[j].key, key))
			return 1;
	m->slot[j] = (struct lp_map_slot){key, h, val};
	m->used++;
	return 0;
}

void *lp_map_get(const struct lp_map *m, const char *key)
{
	if (!m->slot)
		return NULL;
	uint64_t h = str_hash(key);
	for (size_t j = h & m->mask; m->slot[j].key; j = (j + 1) & m->mask)
		if (m->slot[j].h == h && !strcmp(m->slot[j].key, key))
			return m->slot[j].val;
	return NULL;
}

void lp_map_free(struct lp_map *m)
{
	free(m->slot);
	memset(m, 0, sizeof(*m));
}

int lp_vec_push(struct lp_vec *v, void *p)
{
	if (v->n == v->cap) {
		size_t c = v->cap ? v->cap * 2 : 16;
		void **n = realloc(v->v, c * sizeof(*n));
		if (!n)
			return -ENOMEM;
		v->v = n;
		v->cap = c;
	}
	v->v[v->n++] = p;
	return 0;
}

void lp_vec_free(struct lp_vec *v)
{
	free(v->v);
	memset(v, 0, sizeof(*v));
}

/* ==== logging once ============================================================ */

bool lp_hset_has(const struct lp_hset *s, uint64_t h)
{
	return idc_oat_find(&s->t, sizeof(h), h) != NULL;
}

int lp_hset_add(struct lp_hset *s, uint64_t h, size_t max)
{
	if (lp_hset_has(s, h))
		return 1;
	if (s->t.used >= max)
		return -ENOSPC;
	void *slot;
	if (idc_oat_claim(&s->t, sizeof(h), h, 64, &slot))
		return -ENOMEM;
	memcpy(slot, &h, sizeof(h));
	return 0;
}

void lp_hset_free(struct lp_hset *s)
{
	idc_oat_free(&s->t);
}

/* lp_log_once's work; remember: keep the message even when it is above
 * the log level. Whether it is new (not logged before). */
static bool log_once_v(struct lprov_domain *ld, int level, bool remember, const char *fmt,
		       va_list ap)
{
	if (level > idc_log_level() && !remember)
		return true; /* not logged, so not worth a slot */
	char msg[768];
	vsnprintf(msg, sizeof(msg), fmt, ap);
	/* Seeded per domain at start: a directory does not know the seed, so
	 * it cannot pick two messages that collide and silence one. */
	uint64_t h = idc_hash64(msg, strlen(msg), ld->hash_seed);
	/* 0 marks a free slot (not `| 1`: every start bucket would be odd) */
	h = h ? h : 1;
	pthread_mutex_lock(&ld->log_mu); /* the committer's thread logs too */
	int rc = lp_hset_add(&ld->logged, h, LP_LOGGED_MAX);
	bool said_full = ld->logged_full;
	if (rc < 0)
		ld->logged_full = true;
	size_t used = ld->logged.t.used;
	pthread_mutex_unlock(&ld->log_mu);
	if (rc == 1)
		return false;
	if (rc < 0) {
		/* Remembering no more: logging new messages anyway could repeat
		 * each of them without bound, so they are dropped instead. */
		if (!said_full)
			idc_log(IDC_LOG_WARN,
				"ldap domain %s: %zu distinct warnings logged%s; further distinct "
				"warnings suppressed",
				ld->cfg.name, used, rc == -ENOMEM ? " (out of memory)" : "");
		return false;
	}
	idc_log(level, "%s", msg);
	return true;
}

void lp_log_once(struct lprov_domain *ld, int level, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	log_once_v(ld, level, false, fmt, ap);
	va_end(ap);
}

bool lprov_domain_log_once(struct lprov_domain *ld, int level, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	bool fresh = log_once_v(ld, level, true, fmt, ap);
	va_end(ap);
	return fresh;
}

/* ==== DNs and filters =========================================================== */

/* A DN in the form servers usually send (attr=value pairs of plain
 * characters) is already normalized once lower-cased; anything else goes
 * through libldap's parser. */
static bool plain_dn(const char *dn, size_t len)
{
	bool want_attr = true, seen = false;
	for (size_t i = 0; i < len; i++) {
		char c = dn[i];
		bool word = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
			    (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_';
		if (c == '=' && want_attr && seen) {
			want_attr = false;
			seen = false;
		} else if (c == ',' && !want_attr && seen) {
			want_attr = true;
			seen = false;
		} else if (word) {
			seen = true;
		} else {
			return false;
		}
	}
	return !want_attr && seen;
}

/* Whether v holds a byte beyond ASCII. */
static bool beyond_ascii(const char *v, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)v[i] >= 0x80)
			return true;
	return false;
}

/* The string values of parsed beyond ASCII folded as the store compares
 * them (the rule of their attribute: cache_name_fold), so a member DN
 * matches its entry's DN whenever the store calls the two equal. The
 * original values are kept in saved (for undo_fold) since parsed owns them. */
static int fold_values(struct idc_arena *a, LDAPDN parsed, struct berval *saved, size_t cap,
		       size_t *n)
{
	*n = 0;
	for (size_t r = 0; parsed[r]; r++)
		for (size_t i = 0; parsed[r][i]; i++) {
			LDAPAVA *ava = parsed[r][i];
			if (*n == cap)
				return -E2BIG;
			saved[(*n)++] = ava->la_value;
			/* A value with an escaped NUL is no name, one past CACHE_NAME_MAX
			 * none either: they keep their bytes. */
			size_t vl = ava->la_value.bv_len;
			char val[CACHE_NAME_MAX + 1], f[CACHE_NAME_MAX + 1];
			if ((ava->la_flags & LDAP_AVA_BINARY) || vl > CACHE_NAME_MAX ||
			    !beyond_ascii(ava->la_value.bv_val, vl) ||
			    memchr(ava->la_value.bv_val, '\0', vl))
				continue;
			memcpy(val, ava->la_value.bv_val, vl);
			val[vl] = '\0';
			char *attr = idc_arena_strndup(a, ava->la_attr.bv_val, ava->la_attr.bv_len);
			size_t fl =
			    attr ? cache_name_fold(cache_name_rule_of_attr(attr), val, f) : 0;
			char *kept = fl ? idc_arena_strndup(a, f, fl) : NULL;
			if (!attr || (fl && !kept))
				return -ENOMEM;
			if (kept)
				ava->la_value = (struct berval){fl, kept};
		}
	return 0;
}

static void undo_fold(LDAPDN parsed, const struct berval *saved, size_t n)
{
	size_t k = 0;
	for (size_t r = 0; parsed[r]; r++)
		for (size_t i = 0; parsed[r][i] && k < n; i++)
			parsed[r][i]->la_value = saved[k++];
}

/* dn through libldap's parser and back out as an LDAPv3 string, values
 * beyond ASCII folded by the store's rule, lower-cased (in a); NULL when it
 * does not parse. */
static char *parse_norm(struct idc_arena *a, const char *dn, size_t len)
{
	LDAPDN parsed = NULL;
	struct berval bv = {len, (char *)dn};
	struct berval saved[LP_DN_AVAS_MAX];
	size_t nsaved = 0;
	char *s = NULL;
	if (ldap_bv2dn(&bv, &parsed, LDAP_DN_FORMAT_LDAP) != LDAP_SUCCESS)
		return NULL;
	int rc = LDAP_INVALID_DN_SYNTAX;
	if (parsed) {
		/* An ASCII DN stays as it was: lower-casing is its whole rule. */
		if (!beyond_ascii(dn, len) ||
		    fold_values(a, parsed, saved, IDC_ARRAY_SIZE(saved), &nsaved) == 0)
			rc = ldap_dn2str(parsed, &s, LDAP_DN_FORMAT_LDAPV3);
		undo_fold(parsed, saved, nsaved);
	}
	ldap_dnfree(parsed);
	if (rc != LDAP_SUCCESS || !s)
		return NULL;
	char *out = idc_arena_strndup(a, s, strlen(s));
	ldap_memfree(s);
	for (char *p = out; p && *p; p++)
		*p = idc_tolower(*p);
	return out;
}

char *lp_dn_normalize(struct idc_arena *a, const char *dn, size_t len)
{
	if (len == 0 || memchr(dn, '\0', len))
		return NULL;
	if (plain_dn(dn, len)) {
		char *out = idc_arena_strndup(a, dn, len);
		for (char *p = out; p && *p; p++)
			*p = idc_tolower(*p);
		return out;
	}
	/* libldap writes some values back in a form it does not read the same
	 * way ("2=# 2" comes out as "2=#", which does not parse): a DN is
	 * taken only when its normal form is its own normal form, so two
	 * spellings of one DN always compare equal. */
	/* libldap's parser may read past bv_len on some inputs (up to a NUL,
	 * which values from a reply carry): parse a terminated copy. */
	char *z = idc_arena_strndup(a, dn, len);
	char *out = z ? parse_norm(a, z, len) : NULL;
	char *again = out ? parse_norm(a, out, strlen(out)) : NULL;
	return again && strcmp(out, again) == 0 ? out : NULL;
}

int lp_dn_first_ava(struct idc_arena *a, const char *ndn, char **attr, char **value)
{
	/* Fast path: a plain first RDN "attr=value," needs no parser. */
	size_t rdn = strcspn(ndn, ",");
	const char *eq = memchr(ndn, '=', rdn);
	if (eq && eq > ndn && plain_dn(ndn, rdn)) {
		*attr = idc_arena_strndup(a, ndn, (size_t)(eq - ndn));
		*value = idc_arena_strndup(a, eq + 1, rdn - (size_t)(eq - ndn) - 1);
		return *attr && *value ? 0 : -ENOMEM;
	}
	LDAPDN parsed = NULL;
	if (ldap_str2dn(ndn, &parsed, LDAP_DN_FORMAT_LDAPV3) != LDAP_SUCCESS || !parsed ||
	    !parsed[0] || !parsed[0][0]) {
		ldap_dnfree(parsed);
		return -EINVAL;
	}
	LDAPAVA *ava = parsed[0][0];
	*attr = idc_arena_strndup(a, ava->la_attr.bv_val, ava->la_attr.bv_len);
	*value = idc_arena_strndup(a, ava->la_value.bv_val, ava->la_value.bv_len);
	bool bin = ava->la_flags & LDAP_AVA_BINARY;
	ldap_dnfree(parsed);
	if (!*attr || !*value)
		return -ENOMEM;
	return bin ? -EINVAL : 0;
}

bool lp_dn_under(const char *ndn, const char *nbase)
{
	size_t n = strlen(ndn), b = strlen(nbase);
	if (b == 0)
		return true;
	if (n < b || strcmp(ndn + n - b, nbase))
		return false;
	return n == b || ndn[n - b - 1] == ',';
}

int lp_filter_escape(struct idc_buf *b, const char *v, size_t n)
{
	int rc = 0;
	for (size_t i = 0; i < n && !rc; i++) {
		unsigned char c = (unsigned char)v[i];
		if (c == '*' || c == '(' || c == ')' || c == '\\' || c < 0x20 || c == 0x7f)
			rc = idc_buf_printf(b, "\\%02x", c);
		else
			rc = idc_buf_putc(b, (char)c);
	}
	return rc;
}

/* ==== values ========================================================================= */

/* An id: decimal digits only, at most 4294967294 (-1 is "no id" to libc). */
static bool id_value(const struct berval *bv, uint32_t *out)
{
	uint64_t n = 0;
	if (bv->bv_len == 0 || bv->bv_len > 10)
		return false;
	for (size_t i = 0; i < bv->bv_len; i++) {
		char c = bv->bv_val[i];
		if (c < '0' || c > '9')
			return false;
		n = n * 10 + (uint64_t)(c - '0');
	}
	if (n >= UINT32_MAX)
		return false;
	*out = (uint32_t)n;
	return true;
}

struct ent {
	struct lprov_domain *ld;
	LDAPMessage *msg;
	struct idc_arena *a;
	const char *dn, *ndn;
	bool oom; /* part of the entry was lost to memory, not refused */
};

static char *ent_dup(struct ent *e, const char *p, size_t n)
{
	char *s = idc_arena_strndup(e->a, p, n);
	e->oom |= !s;
	return s;
}

/* A string value: no NUL, at most max bytes. NULL when unusable (or out
 * of memory: e->oom). */
static const char *str_value(struct ent *e, const struct berval *bv, size_t max)
{
	if (bv->bv_len > max || memchr(bv->bv_val, '\0', bv->bv_len))
		return NULL;
	return ent_dup(e, bv->bv_val, bv->bv_len);
}

static struct berval **values(struct ent *e, const char *attr)
{
	return ldap_get_values_len(e->ld->conn, e->msg, attr);
}

static void bad(struct ent *e, const char *what)
{
	lp_log_once(e->ld, IDC_LOG_WARN, "ldap domain %s: %s: entry \"%.300s\": %s; skipped",
		    e->ld->cfg.name, lp_server(e->ld), e->dn, what);
}

/* A passwd field (gecos, home, shell): no ':' (the field separator of
 * passwd lines) and no control character (a newline ends the line):
 * consumers that parse getent's output would be misled, and glibc's files
 * module never produces such a field. */
static bool field_ok(const char *s)
{
	for (const unsigned char *p = (const unsigned char *)s; *p; p++)
		if (*p == ':' || *p < 0x20 || *p == 0x7f)
			return false;
	return true;
}

/* First value of a single-valued string attribute, "" if absent. An
 * unusable value (too long, a NUL, or for a passwd field a ':' or a
 * control character) clears *ok and names attr in *bad_attr. */
static const char *get_str(struct ent *e, const char *attr, bool field, bool *ok,
			   const char **bad_attr)
{
	struct berval **v = values(e, attr);
	const char *s = "";
	if (v && v[0]) {
		s = str_value(e, v[0], LP_VALUE_MAX);
		if (!s || (field && !field_ok(s))) {
			if (*ok)
				*bad_attr = attr;
			*ok = false;
			s = "";
		}
	}
	ldap_value_free_len(v);
	return s;
}

static bool get_id(struct ent *e, const char *attr, uint32_t *out)
{
	struct berval **v = values(e, attr);
	bool ok = v && v[0] && id_value(v[0], out);
	ldap_value_free_len(v);
	return ok;
}

/* A subordinate id range from the attribute pair at[first], at[first + 1]
 * (none when not configured or both absent). A half, a value that is no
 * number or a range that passes 2^32 - 1 is logged once with the DN and
 * kept as unusable: the user gets no range of the kind (not the
 * allocation's either: the directory meant one), the rest of the entry is
 * sound. */
static struct cache_subid_range get_range(struct ent *e, size_t first, const char *what)
{
	const char *const *at = e->ld->attr;
	struct cache_subid_range r = {0, 0};
	if (!at[first] || !at[first + 1])
		return r;
	struct berval **sv = values(e, at[first]), **cv = values(e, at[first + 1]);
	bool have_s = sv && sv[0], have_c = cv && cv[0];
	bool ok = have_s && have_c && id_value(sv[0], &r.start) && id_value(cv[0], &r.count) &&
		  subid_range_ok(r.start, r.count);
	ldap_value_free_len(sv);
	ldap_value_free_len(cv);
	if (!ok && (have_s || have_c))
		lp_log_once(e->ld, IDC_LOG_WARN,
			    "ldap domain %s: %s: entry \"%.300s\": %s/%s is not a %s range "
			    "(a first id and a count of at least 1, ending below 4294967295); "
			    "none served",
			    e->ld->cfg.name, lp_server(e->ld), e->dn, at[first], at[first + 1],
			    what);
	if (!ok)
		r = (struct cache_subid_range){have_s || have_c ? CACHE_SUBID_UNUSABLE : 0, 0};
	return r;
}

/* The name: a valid value; with several, the one the RDN holds (the
 * others are aliases), else the first valid one. */
static const char *get_name(struct ent *e, const char *attr)
{
	struct berval **v = values(e, attr);
	const char *name = NULL;
	char *ra = NULL, *rv = NULL;
	bool rdn = v && v[0] && v[1] && lp_dn_first_ava(e->a, e->ndn, &ra, &rv) == 0 &&
		   !strcasecmp(ra, attr);
	for (int pass = rdn ? 0 : 1; pass < 2 && !name; pass++)
		for (size_t i = 0; v && v[i] && !name; i++) {
			if (!cache_name_valid(v[i]->bv_val, v[i]->bv_len))
				continue;
			if (pass == 0 && !idc_memcaseeq(v[i]->bv_val, v[i]->bv_len, rv, strlen(rv)))
				continue;
			name = ent_dup(e, v[i]->bv_val, v[i]->bv_len);
		}
	ldap_value_free_len(v);
	return name;
}

/* ==== users and groups ================================================================== */

/* The user's SSH public keys: every value that is an authorized_keys line
 * (idc_ssh_key_check), trimmed, at most CACHE_SSH_KEYS_MAX; a value that
 * is not is logged once with the DN and left out, the others stay. */
static void get_keys(struct ent *e, const char *attr, struct lp_user *u)
{
	struct berval **v = values(e, attr);
	size_t n = 0;
	while (v && v[n])
		n++;
	u->keys = n ? idc_arena_alloc(e->a, n * sizeof(*u->keys)) : NULL;
	e->oom |= n && !u->keys;
	for (size_t i = 0; u->keys && i < n; i++) {
		struct idc_ssh_key k;
		if (idc_ssh_key_check(v[i]->bv_val, v[i]->bv_len, &k) < 0) {
			lp_log_once(
			    e->ld, IDC_LOG_WARN,
			    "ldap domain %s: %s: entry \"%.300s\": %s value %zu skipped: %s",
			    e->ld->cfg.name, lp_server(e->ld), e->dn, attr, i + 1, k.why);
		} else if (u->nkeys == CACHE_SSH_KEYS_MAX) {
			lp_log_once(e->ld, IDC_LOG_WARN,
				    "ldap domain %s: %s: entry \"%.300s\": more than %u %s values; "
				    "the first %u kept",
				    e->ld->cfg.name, lp_server(e->ld), e->dn, CACHE_SSH_KEYS_MAX,
				    attr, CACHE_SSH_KEYS_MAX);
			break;
		} else if ((u->keys[u->nkeys] = ent_dup(e, v[i]->bv_val + k.start, k.len))) {
			u->nkeys++;
		}
	}
	ldap_value_free_len(v);
}

static void add_user(struct ent *e, struct lp_req *r)
{
	struct lprov_domain *ld = e->ld;
	const char *const *at = ld->attr;
	char why[160];
	if (lp_map_get(&r->udn, e->ndn) ||
	    (r->seen.dn.used && lp_seen_name(&r->seen, lp_seen_hash(ld, e->ndn))))
		return; /* the same entry from another search of this request */
	struct lp_user *u = idc_arena_alloc(e->a, sizeof(*u));
	if (!u) {
		e->oom = true;
		return;
	}
	memset(u, 0, sizeof(*u));
	u->dn = e->dn;
	u->ndn = e->ndn;
	u->name = get_name(e, at[LPROV_MAP_USER_NAME]);
	bool ok = true;
	if (!u->name) {
		snprintf(why, sizeof(why), "no valid %s", at[LPROV_MAP_USER_NAME]);
		return bad(e, why);
	}
	if (!get_id(e, at[LPROV_MAP_USER_UID], &u->uid) ||
	    !get_id(e, at[LPROV_MAP_USER_GID], &u->gid)) {
		snprintf(why, sizeof(why), "%s or %s missing or not a number",
			 at[LPROV_MAP_USER_UID], at[LPROV_MAP_USER_GID]);
		return bad(e, why);
	}
	if (!lp_id_in_range(&ld->cfg, u->uid) || !lp_id_in_range(&ld->cfg, u->gid)) {
		char range[64];
		snprintf(why, sizeof(why), "%s %u or %s %u outside %s", at[LPROV_MAP_USER_UID],
			 (unsigned)u->uid, at[LPROV_MAP_USER_GID], (unsigned)u->gid,
			 lp_range_text(&ld->cfg, range, sizeof(range)));
		return bad(e, why);
	}
	const char *bad_attr = "";
	u->gecos = get_str(e, at[LPROV_MAP_USER_GECOS], true, &ok, &bad_attr);
	u->dir = get_str(e, at[LPROV_MAP_USER_HOME], true, &ok, &bad_attr);
	u->shell = get_str(e, at[LPROV_MAP_USER_SHELL], true, &ok, &bad_attr);
	get_keys(e, at[LPROV_MAP_USER_SSH_KEY], u);
	if (!ok) {
		snprintf(why, sizeof(why),
			 "%.40s is too long or holds a NUL, ':' or a control character", bad_attr);
		return bad(e, why);
	}
	u->subuid = get_range(e, LPROV_MAP_USER_SUBUID_NUMBER, "subordinate uid");
	u->subgid = get_range(e, LPROV_MAP_USER_SUBGID_NUMBER, "subordinate gid");
	char folded[CACHE_NAME_MAX + 1]; /* two names the cache holds as one */
	size_t fn = cache_name_fold(CACHE_NAMES_STORED, u->name, folded);
	char *fold = ent_dup(e, folded, fn);
	struct lp_user *first = fold ? lp_map_get(&r->uname, fold) : NULL;
	if (first) {
		snprintf(why, sizeof(why), "user name '%.64s' also held by \"%.60s\"", u->name,
			 first->dn);
		return bad(e, why);
	}
	if (fold && r->seen.dn.used && lp_seen_has_name(&r->seen, lp_seen_hash(ld, fold))) {
		snprintf(why, sizeof(why), "user name '%.64s' also held by an earlier entry",
			 u->name);
		return bad(e, why);
	}
	/* Out of memory: the entry is missing from this answer (e->oom). */
	if (!fold || lp_map_put(&r->uname, fold, u) < 0 || lp_map_put(&r->udn, u->ndn, u) < 0 ||
	    lp_vec_push(&r->users, u) < 0)
		e->oom = true;
}

/* The user name a member DN gives by itself: "uid=NAME,<under the user
 * base>" with a plain value (ldap_member_names_from_rdn), else NULL and
 * the DN is resolved by a search. */
static const char *rdn_name(struct ent *e, const struct berval *bv)
{
	struct lprov_domain *ld = e->ld;
	const char *attr = ld->attr[LPROV_MAP_USER_NAME], *p = bv->bv_val;
	size_t alen = strlen(attr), len = bv->bv_len;
	if (!ld->cfg.member_names_from_rdn || len <= alen + 1 || strncasecmp(p, attr, alen) ||
	    p[alen] != '=')
		return NULL;
	const char *v = p + alen + 1;
	const char *comma = memchr(v, ',', len - alen - 1);
	if (!comma || comma == v || !plain_dn(p, (size_t)(comma - p)))
		return NULL;
	const char *rest = comma + 1;
	size_t rlen = len - (size_t)(rest - p), blen = strlen(ld->nubase);
	if (!plain_dn(rest, rlen) || rlen < blen ||
	    strncasecmp(rest + rlen - blen, ld->nubase, blen))
		return NULL;
	if (rlen > blen && rest[rlen - blen - 1] != ',')
		return NULL;
	if (!cache_name_valid(v, (size_t)(comma - v)))
		return NULL;
	return ent_dup(e, v, (size_t)(comma - v));
}

/* Members: names from memberUid (names_attr) and DNs from dns_attr
 * (rfc2307bis). Invalid names and values that are not DNs are dropped
 * (logged once); DNs that name a user by their RDN become names. */
static void add_members(struct ent *e, struct lp_group *g, const char *names_attr,
			const char *dns_attr)
{
	struct berval **nv = values(e, names_attr);
	struct berval **dv = dns_attr ? values(e, dns_attr) : NULL;
	size_t nn = (size_t)ldap_count_values_len(nv), nd = (size_t)ldap_count_values_len(dv);
	size_t max = e->ld->members_max;
	size_t *count[] = {&nn, &nd};
	const char *attr[] = {names_attr, dns_attr};
	for (size_t k = 0; k < 2; k++) {
		if (*count[k] <= max)
			continue;
		/* The group is kept with the values that came first: a cut
		 * member list beats losing the group (and the answer). */
		lp_log_once(e->ld, IDC_LOG_WARN,
			    "ldap domain %s: %s: group \"%.300s\": %zu %s values, more than the "
			    "%zu kept; the rest dropped",
			    e->ld->cfg.name, lp_server(e->ld), e->dn, *count[k], attr[k], max);
		*count[k] = max;
	}
	g->uids = nn + nd ? idc_arena_alloc(e->a, (nn + nd) * sizeof(*g->uids)) : NULL;
	g->mdns = nd ? idc_arena_alloc(e->a, nd * sizeof(*g->mdns)) : NULL;
	e->oom |= (nn + nd && !g->uids) || (nd && !g->mdns);
	for (size_t i = 0; g->uids && i < nn; i++) {
		if (!cache_name_valid(nv[i]->bv_val, nv[i]->bv_len)) {
			lp_log_once(e->ld, IDC_LOG_WARN,
				    "ldap domain %s: %s: group \"%.300s\": invalid member name "
				    "dropped",
				    e->ld->cfg.name, lp_server(e->ld), e->dn);
			continue;
		}
		const char *s = ent_dup(e, nv[i]->bv_val, nv[i]->bv_len);
		if (s)
			g->uids[g->nuids++] = s;
	}
	g->nuid_values = g->nuids;
	for (size_t i = 0; g->uids && g->mdns && i < nd; i++) {
		const char *name = rdn_name(e, dv[i]);
		if (name) {
			g->uids[g->nuids++] = name;
			continue;
		}
		const char *s = lp_dn_normalize(e->a, dv[i]->bv_val, dv[i]->bv_len);
		if (!s) {
			lp_log_once(e->ld, IDC_LOG_WARN,
				    "ldap domain %s: %s: group \"%.300s\": %s value \"%.100s\" is "
				    "not a DN; dropped",
				    e->ld->cfg.name, lp_server(e->ld), e->dn, dns_attr,
				    memchr(dv[i]->bv_val, '\0', dv[i]->bv_len) ? "(NUL)"
									       : dv[i]->bv_val);
			continue;
		}
		g->mdns[g->nmdns++] = s;
	}
	ldap_value_free_len(nv);
	ldap_value_free_len(dv);
}

static void add_group(struct ent *e, struct lp_req *r, bool ancestor)
{
	struct lprov_domain *ld = e->ld;
	const char *const *at = ld->attr;
	char why[160];
	struct lp_group *g = lp_map_get(&r->gdn, e->ndn);
	if (!g && r->gseen.dn.used && lp_seen_name(&r->gseen, lp_seen_hash(ld, e->ndn)))
		return; /* stored with an earlier page */
	if (g) {
		/* Seen as a member first, now found as an ancestor: walk up. */
		if (ancestor && !g->ancestor) {
			g->ancestor = true;
			lp_vec_push(&r->parentq, (void *)g->ndn);
		}
		return;
	}
	g = idc_arena_alloc(e->a, sizeof(*g));
	if (!g) {
		e->oom = true;
		return;
	}
	memset(g, 0, sizeof(*g));
	g->dn = e->dn;
	g->ndn = e->ndn;
	g->ancestor = ancestor;
	g->name = get_name(e, at[LPROV_MAP_GROUP_NAME]);
	if (!g->name) {
		snprintf(why, sizeof(why), "no valid %s", at[LPROV_MAP_GROUP_NAME]);
		return bad(e, why);
	}
	if (!get_id(e, at[LPROV_MAP_GROUP_GID], &g->gid)) {
		snprintf(why, sizeof(why), "%s missing or not a number", at[LPROV_MAP_GROUP_GID]);
		return bad(e, why);
	}
	if (!lp_id_in_range(&ld->cfg, g->gid)) {
		char range[64];
		snprintf(why, sizeof(why), "%s %u outside %s", at[LPROV_MAP_GROUP_GID],
			 (unsigned)g->gid, lp_range_text(&ld->cfg, range, sizeof(range)));
		return bad(e, why);
	}
	if (!ld->cfg.ignore_group_members) {
		if (ld->cfg.schema == LPROV_RFC2307)
			add_members(e, g, at[LPROV_MAP_GROUP_MEMBER], NULL);
		else
			add_members(e, g, "memberUid", at[LPROV_MAP_GROUP_MEMBER]);
	}
	int rc = lp_map_put(&r->gdn, g->ndn, g);
	if (rc < 0 || (rc == 0 && lp_vec_push(&r->groups, g) < 0))
		e->oom = true;
}

static bool has_class(struct berval **oc, const char *want)
{
	for (size_t i = 0; oc && oc[i]; i++)
		if (idc_memcaseeq(oc[i]->bv_val, oc[i]->bv_len, want, strlen(want)))
			return true;
	return false;
}

void lp_entry(struct lprov_domain *ld, struct lp_search *s, LDAPMessage *msg)
{
	struct lp_req *r = s->req;
	if (!r || s->purpose == LP_S_PROBE)
		return;
	char *dn = ldap_get_dn(ld->conn, msg);
	if (!dn) {
		r->partial = true; /* out of memory: an entry of the answer is lost */
		return;
	}
	struct ent e = {ld, msg, &r->arena, NULL, NULL, false};
	struct berval **oc = values(&e, "objectClass");
	bool user = has_class(oc, ld->attr[LPROV_MAP_USER_OC]);
	bool group = has_class(oc, ld->attr[LPROV_MAP_GROUP_OC]);
	ldap_value_free_len(oc);
	/* a user alone, a group alone, are let go of once stored
	 * (lp_req_retires) */
	if (user != group && lp_req_retires(r))
		e.a = user ? &r->uarena : &r->garena;
	e.dn = ent_dup(&e, dn, strlen(dn));
	ldap_memfree(dn);
	if (!e.dn) {
		r->partial = true;
		return;
	}
	e.ndn = lp_dn_normalize(e.a, e.dn, strlen(e.dn));
	if (!e.ndn)
		return bad(&e, "DN syntax error");
	if (user)
		add_user(&e, r);
	if (group)
		add_group(&e, r, s->purpose == LP_S_GROUPS_OF || s->purpose == LP_S_PARENTS);
	if (e.oom)
		r->partial = true;
}
