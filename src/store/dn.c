/*
 * dn: distinguished names (RFC 4514) — parsing, normalization, RDN-reversed
 * keys and a walk over the attribute value assertions.
 *
 * Leniency, as OpenLDAP: spaces around ',', '+', '=' and at both ends are
 * ignored, and ';' separates RDNs as ',' does (RFC 1779). Values must escape
 * '"', '<', '>' and NUL (no RFC 1779 quoting). A '#' value is hex: its
 * decoded bytes are taken as the raw value, not decoded further as BER, so
 * "cn=#4142" names the same entry as "cn=AB"; no stored DN uses BER values
 * and decoding them would add a second syntax for no one.
 *
 * Runs on every add and search base: no allocation beyond the output
 * buffer's growth. Values with escapes are undone into a stack buffer (a
 * value is never longer than its DN, which is at most STORE_DN_MAX bytes).
 */
#include "store_int.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Most AVAs in one RDN. The header documents no such limit; it bounds the
 * stack array the AVAs are sorted in. */
#define DN_MAX_AVAS STORE_DN_MAX_RDNS

#define DN_SHOW_MAX 200 /* bytes of a bad DN quoted in a message */

/* ==== byte classes ========================================================== */

enum {
	DN_END = 1 << 0,  /* ends a value: , + ; */
	DN_ESC = 1 << 1,  /* starts an escape: \ */
	DN_BAD = 1 << 2,  /* must be escaped in input: " < > NUL */
	DN_MUST = 1 << 3, /* escaped anywhere in canonical output */
	DN_PAIR = 1 << 4, /* may follow '\' as itself */
};

static const unsigned char dn_class[256] = {
    [','] = DN_END | DN_MUST | DN_PAIR,
    ['+'] = DN_END | DN_MUST | DN_PAIR,
    [';'] = DN_END | DN_MUST | DN_PAIR,
    ['\\'] = DN_ESC | DN_MUST | DN_PAIR,
    ['"'] = DN_BAD | DN_MUST | DN_PAIR,
    ['<'] = DN_BAD | DN_MUST | DN_PAIR,
    ['>'] = DN_BAD | DN_MUST | DN_PAIR,
    ['='] = DN_MUST | DN_PAIR,
    ['#'] = DN_PAIR,
    [' '] = DN_PAIR,
    [0] = DN_BAD,
};

/* descr and numeric OID characters; store_attr_canon checks the form */
static bool is_type_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '-' || c == '.';
}

static int hex_val(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* ==== parser ================================================================= */

struct dn_parser {
	const char *dn;
	size_t len;
	size_t pos;
	char *scratch; /* STORE_DN_MAX bytes */
	struct idc_diag *d;
};

/* One AVA as parsed. value points into the DN or into the scratch buffer
 * (valid until the next AVA is parsed). */
struct dn_ava {
	struct store_val type; /* as written */
	size_t type_pos;
	struct store_val value; /* escapes undone */
	size_t value_pos;
	const char *canon; /* interned (store_attr_canon_ref) or canon_buf */
	size_t canon_len;
	char canon_buf[STORE_ATTR_MAX];
	char sep;   /* what followed: ',' (also for ';'), '+', or 0 at the end */
	bool in_dn; /* value is a slice of the DN (no escapes, not hex) */
};

/* How much of the DN a message quotes, and the mark that it was cut. */
static int show_len(const struct dn_parser *p)
{
	return (int)(p->len > DN_SHOW_MAX ? DN_SHOW_MAX : p->len);
}

static const char *show_cut(const struct dn_parser *p)
{
	return p->len > DN_SHOW_MAX ? "..." : "";
}

static int dn_fail(const struct dn_parser *p, int rc, size_t pos, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Fail with rc and "DN '...': position N: why" in the diag. */
static int dn_fail(const struct dn_parser *p, int rc, size_t pos, const char *fmt, ...)
{
	char why[160];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	return idc_diag_set(p->d, rc, "DN '%.*s%s': position %zu: %s", show_len(p), p->dn,
			    show_cut(p), pos, why);
}

#define dn_err(p, pos, ...) dn_fail(p, IDC_ESYNTAX, pos, __VA_ARGS__)

static void skip_spaces(struct dn_parser *p)
{
	while (p->pos < p->len && p->dn[p->pos] == ' ')
		p->pos++;
}

/* Why there is no attribute type at p->pos. */
static int dn_err_no_type(const struct dn_parser *p)
{
	if (p->pos == p->len)
		return dn_err(p, p->pos, "empty RDN at the end");
	unsigned char c = (unsigned char)p->dn[p->pos];
	if (c == ',' || c == ';')
		return dn_err(p, p->pos, "empty RDN");
	if (c == '+')
		return dn_err(p, p->pos, "empty attribute value assertion");
	if (c == '=')
		return dn_err(p, p->pos, "missing attribute type");
	if (c < 0x20 || c >= 0x7f)
		return dn_err(p, p->pos, "byte 0x%02x in an attribute type", c);
	return dn_err(p, p->pos, "'%c' in an attribute type", c);
}

/* Attribute type and the '=' after it. */
static int dn_parse_type(struct dn_parser *p, struct dn_ava *a)
{
	skip_spaces(p);
	size_t start = p->pos;
	while (p->pos < p->len && is_type_char(p->dn[p->pos]))
		p->pos++;
	if (p->pos == start)
		return dn_err_no_type(p);
	a->type = (struct store_val){p->dn + start, p->pos - start};
	a->type_pos = start;
	a->canon_len = store_attr_canon_ref(a->type.ptr, a->type.len, a->canon_buf, &a->canon);
	if (a->canon_len == 0)
		return dn_err(p, start, "invalid attribute type '%.*s'",
			      (int)(a->type.len > 64 ? 64 : a->type.len), a->type.ptr);
	skip_spaces(p);
	if (p->pos == p->len || p->dn[p->pos] != '=')
		return dn_err(p, p->pos, "expected '=' after the attribute type");
	p->pos++;
	return 0;
}

/* The escape at p->pos ('\' then a special character or two hex digits)
 * into *out; advances past it. */
static int dn_escape(struct dn_parser *p, char *out)
{
	size_t at = p->pos;
	if (at + 1 == p->len)
		return dn_err(p, at, "'\\' at the end of the DN");
	char c = p->dn[at + 1];
	int hi = hex_val(c);
	int lo = at + 2 < p->len ? hex_val(p->dn[at + 2]) : -1;
	if (hi >= 0 && lo >= 0) {
		*out = (char)(hi << 4 | lo);
		p->pos += 3;
		return 0;
	}
	if (hi < 0 && (dn_class[(unsigned char)c] & DN_PAIR)) {
		*out = c;
		p->pos += 2;
		return 0;
	}
	if ((unsigned char)c < 0x20 || (unsigned char)c >= 0x7f)
		return dn_err(p, at, "invalid escape: '\\' before byte 0x%02x", (unsigned char)c);
	return dn_err(p, at, "invalid escape '\\%c'", c);
}

/* The rest of a string value that has an escape, undone into scratch.
 * The value started at start; p->pos is at its first '\'. */
static int dn_unescape(struct dn_parser *p, struct dn_ava *a, size_t start)
{
	char *w = p->scratch;
	size_t n = p->pos - start;
	memcpy(w, p->dn + start, n);
	size_t keep = n; /* up to the last byte that is not an unescaped space */
	while (p->pos < p->len) {
		char c = p->dn[p->pos];
		unsigned cls = dn_class[(unsigned char)c];
		if (cls & DN_END)
			break;
		if (cls & DN_BAD)
			return dn_err(p, p->pos, "unescaped %s in a value",
				      c ? (c == '"'   ? "'\"'"
					   : c == '<' ? "'<'"
						      : "'>'")
					: "NUL");
		if (cls & DN_ESC) {
			int rc = dn_escape(p, &c);
			if (rc)
				return rc;
			w[n++] = c;
			keep = n;
			continue;
		}
		w[n++] = c;
		p->pos++;
		if (c != ' ')
			keep = n;
	}
	a->value = (struct store_val){w, keep};
	a->in_dn = false;
	return 0;
}

/* A string value: a slice of the DN unless it has escapes. */
static int dn_parse_string(struct dn_parser *p, struct dn_ava *a)
{
	size_t start = p->pos;
	while (p->pos < p->len) {
		char c = p->dn[p->pos];
		unsigned cls = dn_class[(unsigned char)c];
		if (cls & DN_END)
			break;
		if (cls & (DN_ESC | DN_BAD))
			return dn_unescape(p, a, start);
		p->pos++;
	}
	size_t end = p->pos;
	while (end > start && p->dn[end - 1] == ' ')
		end--;
	a->value = (struct store_val){p->dn + start, end - start};
	a->in_dn = true;
	return 0;
}

/* '#' and hex pairs, decoded into scratch. */
static int dn_parse_hex(struct dn_parser *p, struct dn_ava *a)
{
	size_t n = 0;
	p->pos++;
	while (p->pos + 1 < p->len) {
		int hi = hex_val(p->dn[p->pos]), lo = hex_val(p->dn[p->pos + 1]);
		if (hi < 0 || lo < 0)
			break;
		p->scratch[n++] = (char)(hi << 4 | lo);
		p->pos += 2;
	}
	if (p->pos < p->len && hex_val(p->dn[p->pos]) >= 0)
		return dn_err(p, p->pos, "odd number of hex digits after '#'");
	if (n == 0)
		return dn_err(p, p->pos, "expected hex pairs after '#'");
	a->value = (struct store_val){p->scratch, n};
	a->in_dn = false;
	return 0;
}

/* What follows a value: the end, ',', ';' or '+'. */
static int dn_parse_sep(struct dn_parser *p, struct dn_ava *a)
{
	skip_spaces(p);
	if (p->pos == p->len) {
		a->sep = 0;
		return 0;
	}
	char c = p->dn[p->pos];
	if (c != ',' && c != ';' && c != '+')
		return dn_err(p, p->pos, "expected ',' or '+' after the value");
	a->sep = c == '+' ? '+' : ',';
	p->pos++;
	return 0;
}

static int dn_next_ava(struct dn_parser *p, struct dn_ava *a)
{
	int rc = dn_parse_type(p, a);
	if (rc)
		return rc;
	skip_spaces(p);
	a->value_pos = p->pos;
	if (p->pos < p->len && p->dn[p->pos] == '#')
		rc = dn_parse_hex(p, a);
	else
		rc = dn_parse_string(p, a);
	return rc ? rc : dn_parse_sep(p, a);
}

/* Set up p over dn; leading spaces skipped. */
static int dn_start(struct dn_parser *p, const char *dn, size_t len, char *scratch,
		    struct idc_diag *d)
{
	*p = (struct dn_parser){dn, len, 0, scratch, d};
	if (!dn && len)
		return -EINVAL;
	if (len > STORE_DN_MAX)
		return idc_diag_set(d, -E2BIG, "DN of %zu bytes: the limit is %d", len,
				    STORE_DN_MAX);
	skip_spaces(p);
	return 0;
}

static int dn_too_many(const struct dn_parser *p, const char *what)
{
	return dn_fail(p, -E2BIG, p->pos, "more than %d %s", STORE_DN_MAX_RDNS, what);
}

/* ==== canonical output ======================================================== */

/* idc_buf_putc, with the room checked here: a DN puts one or two. */
static int put_char(struct idc_buf *b, char c)
{
	if (b->cap - b->len <= 1 && idc_buf_reserve(b, 1))
		return -ENOMEM;
	b->data[b->len++] = c;
	b->data[b->len] = '\0';
	return 0;
}

/* 0: literal, 1: '\' and the byte, 2: '\' and two hex digits. */
static inline int escape_kind(unsigned char c, size_t i, size_t n)
{
	/* the common case first: printable, not special (bytes >= 0x80 too) */
	if (c > ' ' && c != 0x7f && !(dn_class[c] & DN_MUST))
		return i == 0 && c == '#';
	if (c < 0x20 || c == 0x7f)
		return 2;
	if (c == ' ')
		return i == 0 || i + 1 == n;
	return 1;
}

/* Escape, in place, the value that occupies b from at to its end. Works
 * backwards so every byte is read before anything is written over it. */
static int escape_tail(struct idc_buf *b, size_t at)
{
	static const char hex[] = "0123456789abcdef";
	size_t n = b->len - at, m = n;
	/* the common case first: no byte that needs an escape anywhere (a
	 * space, fine inside, takes the counting loop below) */
	const unsigned char *u = (const unsigned char *)b->data + at;
	size_t plain = 0;
	while (plain < n && u[plain] > ' ' && u[plain] != 0x7f && !(dn_class[u[plain]] & DN_MUST))
		plain++;
	if (plain == n && (n == 0 || u[0] != '#'))
		return 0;
	for (size_t i = 0; i < n; i++)
		m += (size_t)escape_kind((unsigned char)b->data[at + i], i, n);
	if (m == n)
		return 0;
	int rc = idc_buf_reserve(b, m - n);
	if (rc)
		return rc;
	char *v = b->data + at;
	size_t w = m;
	for (size_t i = n; i-- > 0;) {
		unsigned char c = (unsigned char)v[i];
		int k = escape_kind(c, i, n);
		if (k == 2) {
			v[--w] = hex[c & 15];
			c = (unsigned char)hex[c >> 4];
		}
		v[--w] = (char)c;
		if (k)
			v[--w] = '\\';
	}
	b->len = at + m;
	b->data[b->len] = '\0';
	return 0;
}

/* The value of a, normalized under its attribute's rule and escaped. */
static int put_value(const struct dn_parser *p, const struct dn_ava *a, struct idc_buf *out)
{
	enum store_rule r = store_attr_rule(a->canon, a->canon_len);
	/* a DN inside a DN would recurse; as text it compares well enough */
	if (r == STORE_RULE_DN)
		r = STORE_RULE_CASE_IGNORE;
	size_t at = out->len;
	int rc = store_normalize(r, a->value.ptr, a->value.len, out, p->d);
	if (rc == IDC_ESYNTAX && p->d)
		idc_diag_prefix(p->d, "DN '%.*s%s': position %zu: ", show_len(p), p->dn,
				show_cut(p), a->value_pos);
	if (rc)
		return rc;
	if (r == STORE_RULE_INTEGER) {
		/* The 8-byte key is binary; the strict syntax just checked
		 * makes the decimal text canonical already. */
		out->len = at;
		rc = idc_buf_append(out, a->value.ptr, a->value.len);
		if (rc)
			return rc;
	}
	return escape_tail(out, at);
}

static int put_ava(const struct dn_parser *p, const struct dn_ava *a, struct idc_buf *out)
{
	int rc = idc_buf_reserve(out, a->canon_len + 1);
	if (rc)
		return rc;
	memcpy(out->data + out->len, a->canon, a->canon_len);
	out->len += a->canon_len;
	out->data[out->len++] = '=';
	out->data[out->len] = '\0';
	return put_value(p, a, out);
}

/* ==== multi-valued RDNs ========================================================= */

struct dn_span {
	size_t off, len; /* of "type=value" in the output */
	size_t pos;      /* of the AVA in the input */
};

static int span_cmp(const char *base, const struct dn_span *a, const struct dn_span *b)
{
	int c = memcmp(base + a->off, base + b->off, a->len < b->len ? a->len : b->len);
	return c ? c : (a->len > b->len) - (a->len < b->len);
}

/* Insertion sort (an RDN has a handful of AVAs); true when anything moved. */
static bool sort_spans(const char *base, struct dn_span *s, size_t n)
{
	bool moved = false;
	for (size_t i = 1; i < n; i++) {
		struct dn_span x = s[i];
		size_t j = i;
		while (j > 0 && span_cmp(base, &s[j - 1], &x) > 0) {
			s[j] = s[j - 1];
			j--;
		}
		s[j] = x;
		moved |= j != i;
	}
	return moved;
}

/* Put the AVAs of the RDN that starts at start in sorted order; the same
 * AVA twice is an error (RFC 4512 2.3.1). */
static int sort_rdn(const struct dn_parser *p, struct idc_buf *out, size_t start, struct dn_span *s,
		    size_t n)
{
	bool moved = sort_spans(out->data, s, n);
	for (size_t i = 1; i < n; i++)
		if (span_cmp(out->data, &s[i - 1], &s[i]) == 0)
			return dn_err(p, s[i].pos > s[i - 1].pos ? s[i].pos : s[i - 1].pos,
				      "the same attribute value assertion twice in one RDN");
	if (!moved)
		return 0;
	/* rebuilt in the buffer's spare room, then copied back over */
	size_t len = out->len - start;
	int rc = idc_buf_reserve(out, len);
	if (rc)
		return rc;
	char *tmp = out->data + out->len;
	size_t w = 0;
	for (size_t i = 0; i < n; i++) {
		if (i)
			tmp[w++] = '+';
		memcpy(tmp + w, out->data + s[i].off, s[i].len);
		w += s[i].len;
	}
	memcpy(out->data + start, tmp, len);
	out->data[out->len] = '\0';
	return 0;
}

/* Keep a (the AVA n of RDN 0) in keep, or make keep say it has none. */
static void keep_ava0(const struct dn_parser *p, const struct dn_ava *a, size_t n,
		      struct store_ndn *keep)
{
	if (!a->in_dn || n >= STORE_NDN_RDN0_AVAS || keep->nava0 != n) {
		keep->nava0 = 0;
		return;
	}
	/* offsets within a DN of at most STORE_DN_MAX bytes */
	keep->ava0[n] =
	    (struct store_ndn_ava){(uint32_t)(a->type.ptr - p->dn), (uint32_t)a->type.len,
				   (uint32_t)(a->value.ptr - p->dn), (uint32_t)a->value.len};
	keep->nava0 = n + 1;
}

/* One RDN, normalized, appended to out; *sep says what followed it. With
 * keep, its AVAs are kept there (keep_ava0). */
static int norm_rdn(struct dn_parser *p, struct idc_buf *out, char *sep, struct store_ndn *keep)
{
	struct dn_span s[DN_MAX_AVAS];
	size_t n = 0, start = out->len;
	struct dn_ava a;
	do {
		if (n == DN_MAX_AVAS)
			return dn_too_many(p, "AVAs in one RDN");
		if (n && put_char(out, '+'))
			return -ENOMEM;
		int rc = dn_next_ava(p, &a);
		if (rc)
			return rc;
		if (keep)
			keep_ava0(p, &a, n, keep);
		s[n].off = out->len;
		s[n].pos = a.type_pos;
		rc = put_ava(p, &a, out);
		if (rc)
			return rc;
		s[n].len = out->len - s[n].off;
		n++;
	} while (a.sep == '+');
	*sep = a.sep;
	return n > 1 ? sort_rdn(p, out, start, s, n) : 0;
}

/* ==== DN normalization ============================================================ */

/* The DNs of an import, and the member values of its groups, mostly share
 * their parent (",ou=people,dc=example,dc=com"). Per thread, the last two
 * tails (the text after a DN's first RDN) that normalized are kept with
 * their result, so such a DN costs its first RDN and a compare. A tail's
 * normal form depends on its bytes alone, so what is appended is what
 * parsing it would append; a tail that fails to parse is never kept. */
#define TAIL_RAW_MAX  256
#define TAIL_NORM_MAX 512
#define TAIL_RDNS     16

struct dn_tail {
	size_t raw_len, norm_len;
	size_t nrdn;               /* 0: empty slot */
	size_t off[TAIL_RDNS + 1]; /* RDN starts in norm, then norm_len */
	char raw[TAIL_RAW_MAX];
	char norm[TAIL_NORM_MAX];
};

static _Thread_local struct dn_tail dn_tails[2];
static _Thread_local unsigned dn_tail_victim; /* the slot to replace next */

/* Append the kept result for the tail p is at, with its RDN offsets in
 * off[*rdn..] (relative to base) and *rdn counted on: 1 when done, 0 when
 * no slot holds this tail, or -ENOMEM. */
static int tail_use(const struct dn_parser *p, struct idc_buf *out, size_t base, size_t *off,
		    size_t *rdn)
{
	size_t n = p->len - p->pos;
	for (unsigned i = 0; i < 2; i++) {
		const struct dn_tail *t = &dn_tails[i];
		if (!t->nrdn || t->raw_len != n || memcmp(t->raw, p->dn + p->pos, n) != 0 ||
		    *rdn + t->nrdn > STORE_DN_MAX_RDNS)
			continue;
		size_t at = out->len;
		if (out->cap - out->len <= t->norm_len && idc_buf_reserve(out, t->norm_len))
			return -ENOMEM;
		memcpy(out->data + out->len, t->norm, t->norm_len);
		out->len += t->norm_len;
		out->data[out->len] = '\0';
		for (size_t k = 0; k < t->nrdn; k++)
			off[*rdn + k] = at - base + t->off[k];
		*rdn += t->nrdn;
		dn_tail_victim = i ^ 1;
		return 1;
	}
	return 0;
}

/* Keep raw (a tail that normalized to norm, its nrdn RDNs starting at
 * off[0..nrdn) relative to norm) when it fits a slot. */
static void tail_keep(const char *raw, size_t raw_len, const char *norm, size_t norm_len,
		      const size_t *off, size_t nrdn)
{
	if (raw_len > TAIL_RAW_MAX || norm_len > TAIL_NORM_MAX || nrdn == 0 || nrdn > TAIL_RDNS)
		return;
	struct dn_tail *t = &dn_tails[dn_tail_victim];
	dn_tail_victim ^= 1;
	t->raw_len = raw_len;
	t->norm_len = norm_len;
	t->nrdn = nrdn;
	memcpy(t->raw, raw, raw_len);
	memcpy(t->norm, norm, norm_len);
	memcpy(t->off, off, nrdn * sizeof(*off));
	t->off[nrdn] = norm_len;
}

/* Normalize dn, appending to out; off (may be NULL) gets each RDN's start
 * relative to where out ended, keep (may be NULL) the AVAs of RDN 0. On
 * error out keeps its old content. */
static int norm_dn(const char *dn, size_t len, struct idc_buf *out, size_t *off, size_t *nrdn,
		   struct store_ndn *keep, struct idc_diag *d)
{
	char scratch[STORE_DN_MAX];
	size_t lo[STORE_DN_MAX_RDNS + 1]; /* RDN starts, relative to base */
	struct dn_parser p;
	size_t base = out->len, rdn = 0, tail_at = 0, tail_pos = 0;
	int rc = dn_start(&p, dn, len, scratch, d);
	if (rc == 0)
		rc = idc_buf_reserve(out, len);
	char sep = p.pos < p.len ? ',' : 0;
	while (rc == 0 && sep) {
		if (rdn == 1 && tail_pos == 0) { /* the first RDN done: a known tail? */
			rc = tail_use(&p, out, base, lo, &rdn);
			if (rc) {
				rc = rc < 0 ? rc : 0;
				break;
			}
			tail_at = out->len;
			tail_pos = p.pos;
		}
		if (rdn == STORE_DN_MAX_RDNS) {
			rc = dn_too_many(&p, "RDNs");
			break;
		}
		lo[rdn] = out->len - base;
		rc = norm_rdn(&p, out, &sep, rdn == 0 ? keep : NULL);
		rdn++;
		if (rc == 0 && sep)
			rc = put_char(out, ',');
	}
	/* the normalized text must parse again, so it obeys the same limit */
	if (rc == 0 && out->len - base > STORE_DN_MAX)
		rc = idc_diag_set(d, -E2BIG, "DN normalizes to %zu bytes: the limit is %d",
				  out->len - base, STORE_DN_MAX);
	if (rc) {
		out->len = base;
		if (out->data)
			out->data[base] = '\0';
		return rc;
	}
	lo[rdn] = out->len - base;
	if (tail_pos) {
		size_t rel[TAIL_RDNS];
		for (size_t k = 1; k < rdn && k <= TAIL_RDNS; k++)
			rel[k - 1] = lo[k] - (tail_at - base);
		tail_keep(dn + tail_pos, len - tail_pos, out->data + tail_at, out->len - tail_at,
			  rel, rdn - 1);
	}
	if (off)
		memcpy(off, lo, (rdn + 1) * sizeof(*off));
	*nrdn = rdn;
	return 0;
}

int store_dn_normalize(const char *dn, size_t len, struct store_ndn *out, struct idc_diag *d)
{
	idc_buf_reset(&out->text);
	out->nrdn = 0;
	out->off[0] = 0;
	int rc = idc_buf_reserve(&out->text, 0); /* text.data is a C string even for the root */
	if (rc)
		return rc;
	out->text.data[0] = '\0';
	out->nava0 = 0;
	rc = norm_dn(dn, len, &out->text, out->off, &out->nrdn, out, d);
	if (rc) {
		out->nrdn = 0;
		out->off[0] = 0;
		out->nava0 = 0;
	}
	return rc;
}

int store_dn_normalize_append(const char *dn, size_t len, struct idc_buf *out, struct idc_diag *d)
{
	size_t nrdn;
	int rc = idc_buf_reserve(out, 0);
	if (rc)
		return rc;
	out->data[out->len] = '\0';
	return norm_dn(dn, len, out, NULL, &nrdn, NULL, d);
}

void store_ndn_free(struct store_ndn *n)
{
	idc_buf_free(&n->text);
	n->nrdn = 0;
	n->off[0] = 0;
	n->nava0 = 0;
}

/* Whether n's offsets describe its text (it may come from anywhere). */
static bool ndn_valid(const struct store_ndn *n)
{
	if (n->nrdn > STORE_DN_MAX_RDNS || n->off[n->nrdn] != n->text.len)
		return false;
	for (size_t i = 0; i < n->nrdn; i++)
		if (n->off[i] >= n->off[i + 1])
			return false;
	return true;
}

int store_ndn_rkey(const struct store_ndn *n, size_t skip, struct idc_buf *out)
{
	if (!ndn_valid(n))
		return -EINVAL;
	idc_buf_reset(out);
	int rc = idc_buf_reserve(out, n->text.len);
	if (rc)
		return rc;
	for (size_t i = n->nrdn; i-- > skip;) {
		/* RDN i ends before the ',' that starts RDN i+1 (none for the last) */
		size_t end = i + 1 < n->nrdn ? n->off[i + 1] - 1 : n->text.len;
		if (out->len)
			out->data[out->len++] = ',';
		memcpy(out->data + out->len, n->text.data + n->off[i], end - n->off[i]);
		out->len += end - n->off[i];
	}
	out->data[out->len] = '\0';
	return 0;
}

/* Whether the byte at s[i] is escaped (an odd run of '\\' before it). */
static bool escaped(const char *s, size_t i)
{
	size_t k = 0;
	while (i > k && s[i - k - 1] == '\\')
		k++;
	return k & 1;
}

static bool has_separator(const char *s, size_t len)
{
	for (const char *p = s, *end = s + len; (p = memchr(p, ',', (size_t)(end - p))); p++)
		if (!escaped(s, (size_t)(p - s)))
			return true;
	return false;
}

int store_ndn_below(struct store_val e, struct store_val b)
{
	size_t sep = e.len - b.len - 1; /* where e's ',' before b would be */
	if (b.len == 0)
		return e.len == 0 ? 0 : has_separator(e.ptr, e.len) ? 2 : 1;
	if (e.len < b.len + 2 || memcmp(e.ptr + sep + 1, b.ptr, b.len) != 0 || e.ptr[sep] != ',' ||
	    escaped(e.ptr, sep))
		return 0;
	return has_separator(e.ptr, sep) ? 2 : 1;
}

/* ==== AVA walk ===================================================================== */

/* Parse every AVA of dn, calling cb (when not NULL) for each. */
static int walk_avas(const char *dn, size_t len, store_ava_cb cb, void *arg, struct idc_diag *d)
{
	char scratch[STORE_DN_MAX];
	struct dn_parser p;
	int rc = dn_start(&p, dn, len, scratch, d);
	if (rc || p.pos == p.len)
		return rc;
	size_t rdn = 0, navas = 0;
	struct dn_ava a;
	do {
		if (navas == DN_MAX_AVAS)
			return dn_too_many(&p, "AVAs in one RDN");
		rc = dn_next_ava(&p, &a);
		if (rc == 0 && cb)
			rc = cb(a.type, a.value, rdn, arg);
		if (rc)
			return rc;
		navas++;
		if (a.sep == ',') {
			if (++rdn == STORE_DN_MAX_RDNS)
				return dn_too_many(&p, "RDNs");
			navas = 0;
		}
	} while (a.sep);
	return 0;
}

/* walk_avas's callback for store_dn_rdn0_avas: the caller's, up to the
 * first AVA past RDN 0. */
struct rdn0_walk {
	store_ava_cb cb;
	void *arg;
	bool past;
};

static int rdn0_ava(struct store_val type, struct store_val value, size_t rdn, void *arg)
{
	struct rdn0_walk *w = arg;
	if (rdn == 0)
		return w->cb(type, value, 0, w->arg);
	w->past = true;
	return 1;
}

int store_dn_rdn0_avas(const struct store_ndn *n, const char *dn, size_t len, store_ava_cb cb,
		       void *arg, struct idc_diag *d)
{
	size_t kept = n ? n->nava0 : 0;
	for (size_t i = 0; i < kept; i++) {
		const struct store_ndn_ava *a = &n->ava0[i];
		int rc = cb((struct store_val){dn + a->type_off, a->type_len},
			    (struct store_val){dn + a->val_off, a->val_len}, 0, arg);
		if (rc)
			return rc;
	}
	if (kept)
		return 0;
	/* the DN parsed before: no checking pass first */
	struct rdn0_walk w = {cb, arg, false};
	int rc = walk_avas(dn, len, rdn0_ava, &w, d);
	return w.past ? 0 : rc;
}

int store_dn_foreach_ava(const char *dn, size_t len, store_ava_cb cb, void *arg, struct idc_diag *d)
{
	/* check it all first, so cb never sees part of a DN that is then refused */
	int rc = walk_avas(dn, len, NULL, NULL, d);
	return rc ? rc : walk_avas(dn, len, cb, arg, d);
}
