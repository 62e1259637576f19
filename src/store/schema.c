/*
 * schema: the built-in attribute schema (canonical names, aliases, matching
 * rules) and value normalization under each rule (docs/DESIGN.md §4).
 *
 * Lookups run on the add and search paths, so the tables are static, sorted
 * by memcmp order and searched by bisection: no allocation, no hashing, no
 * initialization at startup.
 */
#include "store_int.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

/* ==== tables =============================================================== */

struct schema_name {
	const char *name; /* canonical (or alias) name, lowercase */
	unsigned char len;
	unsigned char rule; /* enum store_rule, for the rule table */
	const char *target; /* canonical name, for the alias table */
};

#define CI  STORE_RULE_CASE_IGNORE
#define CE  STORE_RULE_CASE_EXACT
#define INT STORE_RULE_INTEGER
#define DN  STORE_RULE_DN
#define OCT STORE_RULE_OCTET

#define RULE(n, r)                                                                                 \
	{                                                                                          \
		n, sizeof(n) - 1, r, NULL                                                          \
	}
#define ALIAS(n, t)                                                                                \
	{                                                                                          \
		n, sizeof(n) - 1, 0, t                                                             \
	}

/* Sorted by length, then memcmp (see name_cmp). Attributes listed as CI
 * would get caseIgnore anyway; they are here to say so on purpose. */
static const struct schema_name rule_table[] = {
    RULE("c", CI),
    RULE("l", CI),
    RULE("o", CI),
    RULE("cn", CI),
    RULE("dc", CI),
    RULE("ou", CI),
    RULE("sn", CI),
    RULE("st", CI),
    RULE("uid", CI),
    RULE("mail", CI),
    RULE("name", CI),
    RULE("gecos", CI),
    RULE("owner", DN),
    RULE("member", DN),
    RULE("manager", DN),
    RULE("seealso", DN),
    RULE("memberof", DN),
    RULE("entryuuid", CI),
    RULE("gidnumber", INT),
    RULE("givenname", CI),
    RULE("jpegphoto", OCT),
    RULE("memberuid", CE),
    RULE("namealias", CI),
    RULE("shadowmax", INT),
    RULE("shadowmin", INT),
    RULE("uidnumber", INT),
    RULE("lastupdate", INT),
    RULE("loginshell", CE),
    RULE("originaldn", DN),
    RULE("shadowflag", INT),
    RULE("userpkcs12", OCT),
    RULE("cacheexpire", INT),
    RULE("description", CI),
    RULE("displayname", CI),
    RULE("objectclass", CI),
    RULE("shadowexpire", INT),
    RULE("sshpublickey", OCT),
    RULE("uniquemember", DN),
    RULE("userpassword", OCT),
    RULE("cacertificate", OCT),
    RULE("homedirectory", CE),
    RULE("shadowwarning", INT),
    RULE("shadowinactive", INT),
    RULE("createtimestamp", CI),
    RULE("modifytimestamp", CI),
    RULE("usercertificate", OCT),
    RULE("shadowlastchange", INT),
    RULE("aliasedobjectname", DN),
    RULE("distinguishedname", DN),
    RULE("unixhomedirectory", CE),
    RULE("dataexpiretimestamp", INT),
    RULE("usersmimecertificate", OCT),
    RULE("authorityrevocationlist", OCT),
    RULE("originalmodifytimestamp", CI),
    RULE("certificaterevocationlist", OCT),
};

/* Long names and the numeric OIDs of the attributes above, so that
 * "2.5.4.3=x" and "commonName=x" name the same thing as "cn=x". Sorted like
 * rule_table. */
static const struct schema_name alias_table[] = {
    ALIAS("gn", "givenname"),
    ALIAS("userid", "uid"),
    ALIAS("2.5.4.0", "objectclass"),
    ALIAS("2.5.4.1", "aliasedobjectname"),
    ALIAS("2.5.4.3", "cn"),
    ALIAS("2.5.4.4", "sn"),
    ALIAS("2.5.4.6", "c"),
    ALIAS("2.5.4.7", "l"),
    ALIAS("2.5.4.8", "st"),
    ALIAS("surname", "sn"),
    ALIAS("2.5.18.1", "createtimestamp"),
    ALIAS("2.5.18.2", "modifytimestamp"),
    ALIAS("2.5.4.10", "o"),
    ALIAS("2.5.4.11", "ou"),
    ALIAS("2.5.4.13", "description"),
    ALIAS("2.5.4.31", "member"),
    ALIAS("2.5.4.32", "owner"),
    ALIAS("2.5.4.34", "seealso"),
    ALIAS("2.5.4.35", "userpassword"),
    ALIAS("2.5.4.36", "usercertificate"),
    ALIAS("2.5.4.41", "name"),
    ALIAS("2.5.4.42", "givenname"),
    ALIAS("2.5.4.49", "distinguishedname"),
    ALIAS("2.5.4.50", "uniquemember"),
    ALIAS("commonname", "cn"),
    ALIAS("countryname", "c"),
    ALIAS("localityname", "l"),
    ALIAS("rfc822mailbox", "mail"),
    ALIAS("1.3.6.1.1.16.4", "entryuuid"),
    ALIAS("1.3.6.1.1.1.1.0", "uidnumber"),
    ALIAS("1.3.6.1.1.1.1.1", "gidnumber"),
    ALIAS("1.3.6.1.1.1.1.2", "gecos"),
    ALIAS("1.3.6.1.1.1.1.3", "homedirectory"),
    ALIAS("1.3.6.1.1.1.1.4", "loginshell"),
    ALIAS("1.3.6.1.1.1.1.5", "shadowlastchange"),
    ALIAS("1.3.6.1.1.1.1.6", "shadowmin"),
    ALIAS("1.3.6.1.1.1.1.7", "shadowmax"),
    ALIAS("1.3.6.1.1.1.1.8", "shadowwarning"),
    ALIAS("1.3.6.1.1.1.1.9", "shadowinactive"),
    ALIAS("domaincomponent", "dc"),
    ALIAS("1.3.6.1.1.1.1.10", "shadowexpire"),
    ALIAS("1.3.6.1.1.1.1.11", "shadowflag"),
    ALIAS("1.3.6.1.1.1.1.12", "memberuid"),
    ALIAS("organizationname", "o"),
    ALIAS("stateorprovincename", "st"),
    ALIAS("1.2.840.113556.1.2.102", "memberof"),
    ALIAS("organizationalunitname", "ou"),
    ALIAS("0.9.2342.19200300.100.1.1", "uid"),
    ALIAS("0.9.2342.19200300.100.1.3", "mail"),
    ALIAS("2.16.840.1.113730.3.1.241", "displayname"),
    ALIAS("0.9.2342.19200300.100.1.10", "manager"),
    ALIAS("0.9.2342.19200300.100.1.25", "dc"),
    ALIAS("0.9.2342.19200300.100.1.60", "jpegphoto"),
};

#undef RULE
#undef ALIAS

static const struct {
	const char *name;
	const char *oid;
	enum store_rule rule;
} rule_names[] = {
    {"caseIgnoreMatch", "2.5.13.2", CI},
    {"caseExactMatch", "2.5.13.5", CE},
    {"integerMatch", "2.5.13.14", INT},
    {"distinguishedNameMatch", "2.5.13.1", DN},
    {"octetStringMatch", "2.5.13.17", OCT},
    /* IA5 variants compare the same way on the bytes we keep */
    {"caseIgnoreIA5Match", "1.3.6.1.4.1.1466.109.114.2", CI},
    {"caseExactIA5Match", "1.3.6.1.4.1.1466.109.114.1", CE},
};

#undef CI
#undef CE
#undef INT
#undef DN
#undef OCT

/* The order the tables are written in: by length, then bytes. Comparing the
 * lengths first settles most steps of a search without touching the text. */
static int name_cmp(const char *a, size_t alen, const char *b, size_t blen)
{
	if (alen != blen)
		return alen < blen ? -1 : 1;
	for (size_t i = 0; i < alen; i++)
		if (a[i] != b[i])
			return (unsigned char)a[i] < (unsigned char)b[i] ? -1 : 1;
	return 0;
}

/* The entry of t[0..n) named key, or NULL. */
static const struct schema_name *table_find(const struct schema_name *t, size_t n, const char *key,
					    size_t len)
{
	size_t lo = 0, hi = n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = name_cmp(key, len, t[mid].name, t[mid].len);
		if (c == 0)
			return &t[mid];
		if (c < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	return NULL;
}

/* ==== attribute descriptions =============================================== */

static bool is_alpha(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

static bool is_digit(char c)
{
	return c >= '0' && c <= '9';
}

static bool is_keychar(char c)
{
	return is_alpha(c) || is_digit(c) || c == '-';
}

/* Length of the descr at s (ALPHA *keychar), 0 if there is none. */
static size_t scan_descr(const char *s, size_t len)
{
	if (len == 0 || !is_alpha(s[0]))
		return 0;
	size_t i = 1;
	while (i < len && is_keychar(s[i]))
		i++;
	return i;
}

/* Length of the numeric OID at s (number 1*("." number), no leading zeros in
 * a number), 0 if there is none. */
static size_t scan_oid(const char *s, size_t len)
{
	size_t i = 0, parts = 0;
	for (;;) {
		size_t start = i;
		while (i < len && is_digit(s[i]))
			i++;
		if (i == start || (s[start] == '0' && i - start > 1))
			return 0;
		parts++;
		if (i == len || s[i] != '.')
			break;
		i++;
	}
	return parts >= 2 ? i : 0;
}

/* The options part (";opt;opt"), if valid: each 1*keychar. */
static bool options_valid(const char *s, size_t len)
{
	size_t i = 0;
	while (i < len) {
		if (s[i] != ';' || i + 1 == len || !is_keychar(s[i + 1]))
			return false;
		i += 2;
		while (i < len && is_keychar(s[i]))
			i++;
	}
	return true;
}

static size_t attr_canon(const char *name, size_t len, char out[STORE_ATTR_MAX])
{
	/* one byte is kept for the NUL, so out is always a C string */
	if (!name || len == 0 || len >= STORE_ATTR_MAX)
		return 0;
	size_t base = is_digit(name[0]) ? scan_oid(name, len) : scan_descr(name, len);
	if (base == 0 || !options_valid(name + base, len - base))
		return 0;
	for (size_t i = 0; i < len; i++)
		out[i] = idc_tolower(name[i]);
	out[len] = '\0';
	const struct schema_name *a =
	    table_find(alias_table, IDC_ARRAY_SIZE(alias_table), out, base);
	if (!a)
		return len;
	size_t tlen = strlen(a->target); /* "gn" -> "givenname" grows */
	if (tlen + len - base >= STORE_ATTR_MAX)
		return 0;
	memmove(out + tlen, out + base, len - base + 1);
	memcpy(out, a->target, tlen);
	return tlen + len - base;
}

/* Recent results of store_attr_canon, per thread: an import asks for the
 * same dozen names with every entry (twice: LDIF reader, entry builder), and
 * a hit costs a hash and two short copies instead of a scan, a lowercase
 * pass and a table search. Names that are too long are simply not kept. */
#define MEMO_SLOTS 64
#define MEMO_NAME  32 /* <= STORE_ATTR_MAX */

struct canon_memo {
	unsigned char len; /* 0: empty slot */
	unsigned char clen;
	char name[MEMO_NAME];
	char canon[MEMO_NAME];
};

static _Thread_local struct canon_memo canon_memo[MEMO_SLOTS];

static size_t name_hash(const char *name, size_t len)
{
	/* the length and three bytes tell the usual names apart */
	return len * 31u + (unsigned char)name[0] * 7u + (unsigned char)name[len / 2] * 13u +
	       (unsigned char)name[len - 1];
}

static size_t memo_slot(const char *name, size_t len)
{
	return name_hash(name, len) % MEMO_SLOTS;
}

size_t store_attr_canon(const char *name, size_t len, char out[STORE_ATTR_MAX])
{
	if (!name || len == 0 || len >= MEMO_NAME)
		return attr_canon(name, len, out);
	struct canon_memo *m = &canon_memo[memo_slot(name, len)];
	if (m->len == len && memcmp(m->name, name, len) == 0) {
		/* out has STORE_ATTR_MAX bytes: a fixed-size copy is two vector
		 * moves, where a length-sized one became a slow "rep movs" */
		memcpy(out, m->canon, MEMO_NAME);
		return m->clen;
	}
	size_t n = attr_canon(name, len, out);
	if (n > 0 && n < MEMO_NAME) {
		m->len = (unsigned char)len;
		m->clen = (unsigned char)n;
		memcpy(m->name, name, len);
		memcpy(m->canon, out, n + 1);
		memset(m->canon + n + 1, 0, MEMO_NAME - n - 1);
	}
	return n;
}

/* Canonical names shared by all threads, each slot written once by the
 * first thread that claims it and read-only after: entries can point at
 * them, where copying the name into every entry's arena cost a tenth of
 * preparing it. */
enum { INTERN_EMPTY, INTERN_BUSY, INTERN_READY };

static enum store_rule attr_rule(const char *norm, size_t len);

struct canon_intern {
	_Atomic unsigned char state;
	unsigned char len, clen;
	unsigned char rule; /* attr_rule of canon: store_attr_rule knows these pointers */
	char name[MEMO_NAME];
	char canon[MEMO_NAME];
};

#define INTERN_SLOTS 256 /* slots are never reused: room against collisions */
#define INTERN_PROBE 8   /* slots a name may take, from its hash on */

static struct canon_intern canon_interned[INTERN_SLOTS];

/* The slot a name's probe starts at: its length and four of its bytes,
 * multiplied so each moves every bit of the slot number. Names of one
 * schema mostly start apart; those that do not take the next free slot. */
static size_t intern_hash(const char *name, size_t len)
{
	const unsigned char *u = (const unsigned char *)name;
	uint64_t w = (uint64_t)u[0] | (uint64_t)u[len / 4] << 8 | (uint64_t)u[len / 2] << 16 |
		     (uint64_t)u[len - 1] << 24 | (uint64_t)len << 32;
	return (size_t)((w * 0x9e3779b97f4a7c15ULL) >> 56);
}

/* The miss of store_attr_canon_ref: the name canonicalized, and kept in
 * slot in (*canon then pointing there) when the probe ended at an empty
 * one (st). */
static __attribute__((noinline)) size_t canon_ref_miss(const char *name, size_t len, char *buf,
						       const char **canon, struct canon_intern *in,
						       unsigned char st)
{
	size_t n = store_attr_canon(name, len, buf);
	unsigned char empty = INTERN_EMPTY;
	if (st == INTERN_EMPTY && n > 0 && n < MEMO_NAME &&
	    atomic_compare_exchange_strong(&in->state, &empty, INTERN_BUSY)) {
		in->len = (unsigned char)len;
		in->clen = (unsigned char)n;
		memcpy(in->name, name, len);
		memcpy(in->canon, buf, n + 1);
		in->rule = (unsigned char)attr_rule(in->canon, n);
		atomic_store_explicit(&in->state, INTERN_READY, memory_order_release);
		*canon = in->canon;
	}
	return n;
}

size_t store_attr_canon_ref(const char *name, size_t len, char buf[STORE_ATTR_MAX],
			    const char **canon)
{
	*canon = buf;
	if (!name || len == 0 || len >= MEMO_NAME)
		return attr_canon(name, len, buf);
	size_t h = intern_hash(name, len);
	struct canon_intern *in = NULL;
	unsigned char st = INTERN_BUSY;
	for (size_t k = 0; k < INTERN_PROBE; k++) {
		in = &canon_interned[(h + k) % INTERN_SLOTS];
		st = atomic_load_explicit(&in->state, memory_order_acquire);
		if (st == INTERN_READY && in->len == len && store_short_eq(in->name, name, len)) {
			*canon = in->canon;
			return in->clen;
		}
		if (st == INTERN_EMPTY)
			break;
	}
	return canon_ref_miss(name, len, buf, canon, in, st);
}

/* Whether the options of a canonical description include ";binary", which
 * says the values are BER: they only compare as bytes. */
static bool has_binary_option(const char *opts, size_t len)
{
	static const char binary[] = ";binary";
	const size_t blen = sizeof(binary) - 1;
	for (size_t i = 0; i + blen <= len; i++) {
		if (opts[i] == ';' && memcmp(opts + i, binary, blen) == 0 &&
		    (i + blen == len || opts[i + blen] == ';'))
			return true;
	}
	return false;
}

static enum store_rule attr_rule(const char *norm, size_t len)
{
	if (!norm)
		return STORE_RULE_CASE_IGNORE;
	const char *semi = memchr(norm, ';', len);
	size_t base = semi ? (size_t)(semi - norm) : len;
	if (semi && has_binary_option(semi, len - base))
		return STORE_RULE_OCTET;
	const struct schema_name *r =
	    table_find(rule_table, IDC_ARRAY_SIZE(rule_table), norm, base);
	return r ? (enum store_rule)r->rule : STORE_RULE_CASE_IGNORE;
}

/* Recent results of store_attr_rule, per thread (every value check asks). */
struct rule_memo {
	unsigned char len; /* 0: empty slot */
	unsigned char rule;
	char name[MEMO_NAME];
};

static _Thread_local struct rule_memo rule_memo[MEMO_SLOTS];

/* store_attr_rule of a name not interned, through this thread's memo; out
 * of line, so the interned case is a leaf. */
static __attribute__((noinline)) enum store_rule rule_memo_find(const char *norm, size_t len)
{
	if (!norm || len == 0 || len >= MEMO_NAME)
		return attr_rule(norm, len);
	struct rule_memo *m = &rule_memo[memo_slot(norm, len)];
	if (m->len == len && memcmp(m->name, norm, len) == 0)
		return (enum store_rule)m->rule;
	enum store_rule r = attr_rule(norm, len);
	m->len = (unsigned char)len;
	m->rule = (unsigned char)r;
	memcpy(m->name, norm, len);
	return r;
}

enum store_rule store_attr_rule(const char *norm, size_t len)
{
	/* a name store_attr_canon_ref handed out: its slot knows the rule */
	uintptr_t at = (uintptr_t)norm - (uintptr_t)canon_interned;
	if (norm && at < sizeof(canon_interned)) {
		const struct canon_intern *in = &canon_interned[at / sizeof(*in)];
		if (norm == in->canon && len == in->clen && len)
			return (enum store_rule)in->rule;
	}
	return rule_memo_find(norm, len);
}

int store_rule_by_name(const char *name, size_t len, enum store_rule *out)
{
	if (!name)
		return -ENOENT;
	for (size_t i = 0; i < IDC_ARRAY_SIZE(rule_names); i++) {
		const char *n = rule_names[i].name, *o = rule_names[i].oid;
		if (idc_memcaseeq(name, len, n, strlen(n)) ||
		    (len == strlen(o) && memcmp(name, o, len) == 0)) {
			*out = rule_names[i].rule;
			return 0;
		}
	}
	return -ENOENT;
}

/* ==== normalization ========================================================= */

#define SHOW_MAX 64 /* bytes of a bad value quoted in a message */

static int integer_error(const char *v, size_t len, struct idc_diag *d, const char *why)
{
	return idc_diag_set(d, IDC_ESYNTAX, "integer '%.*s%s': %s",
			    (int)(len > SHOW_MAX ? SHOW_MAX : len), v, len > SHOW_MAX ? "..." : "",
			    why);
}

/* Parse v strictly (RFC 4517 Integer: "0", or an optional '-' and digits
 * without a leading zero) into *out. 0 or IDC_ESYNTAX. */
static int parse_int64(const char *v, size_t len, int64_t *out, struct idc_diag *d)
{
	bool neg = len > 0 && v[0] == '-';
	size_t i = neg ? 1 : 0;
	if (i == len)
		return integer_error(v, len, d, "no digits");
	if (v[i] == '0' && (neg || len - i > 1))
		return integer_error(v, len, d, neg ? "negative zero" : "leading zero");
	/* the magnitude of INT64_MIN is one more than INT64_MAX */
	uint64_t limit = (uint64_t)INT64_MAX + (neg ? 1u : 0u);
	uint64_t mag = 0;
	for (; i < len; i++) {
		if (!is_digit(v[i]))
			return integer_error(v, len, d, "not a digit");
		unsigned dig = (unsigned)(v[i] - '0');
		if (mag > (limit - dig) / 10)
			return integer_error(v, len, d, "out of the 64-bit range");
		mag = mag * 10 + dig;
	}
	/* unsigned negation then conversion: the two's complement bits */
	*out = neg ? (int64_t)(0 - mag) : (int64_t)mag;
	return 0;
}

static int norm_integer(const char *v, size_t len, struct idc_buf *out, struct idc_diag *d)
{
	int64_t n = 0;
	int rc = parse_int64(v, len, &n, d);
	if (rc)
		return rc;
	/* flipping the sign bit makes unsigned big-endian order numeric order */
	uint64_t u = (uint64_t)n ^ (UINT64_C(1) << 63);
	char be[8];
	for (int i = 7; i >= 0; i--) {
		be[i] = (char)(u & 0xff);
		u >>= 8;
	}
	return idc_buf_append(out, be, sizeof(be));
}

int store_normalize(enum store_rule r, const char *v, size_t len, struct idc_buf *out,
		    struct idc_diag *d)
{
	if (!v && len)
		return -EINVAL;
	switch (r) {
	case STORE_RULE_CASE_IGNORE:
		return store_prep(v, len, true, STORE_PREP_VALUE, out);
	case STORE_RULE_CASE_EXACT:
		return store_prep(v, len, false, STORE_PREP_VALUE, out);
	case STORE_RULE_INTEGER:
		return norm_integer(v, len, out, d);
	case STORE_RULE_DN:
		return store_dn_normalize_append(v, len, out, d);
	case STORE_RULE_OCTET:
		return idc_buf_append(out, v, len);
	}
	return -EINVAL;
}
