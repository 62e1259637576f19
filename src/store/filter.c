/*
 * filter.c: RFC 4515 search filters — parsing into the tree of store_int.h,
 * three-valued evaluation (RFC 4511 4.5.1.7) and the canonical string form.
 *
 * Memory: a whole tree lives in one arena. The root node is the first member
 * of a hidden struct filter_root that also holds the arena, so
 * store_filter_free takes only the root pointer and releases everything at
 * once; a failed parse frees its arena and leaks nothing.
 *
 * Choices the RFC leaves open, made here:
 *  - Leniency: the filter may lack its outer parentheses ("uid=alice", as
 *    ldapsearch accepts), whitespace may surround it and separate the
 *    members of '&', '|' and '!', and RFC 1960 single-character escapes
 *    (\* \( \) \\) are accepted next to \XX. An unescaped NUL in a value
 *    is refused, as RFC 4515 requires.
 *  - Without outer parentheses the text ends the value, so trailing
 *    whitespace there is dropped; inside parentheses every byte counts.
 *  - Substring parts of caseIgnore/caseExact (and DN) attributes are
 *    prepared one by one as RFC 4518 says (store_prep): runs of spaces fold
 *    to one, the initial part loses its leading spaces and the final part
 *    its trailing ones (the normalized value has none there), inner edges
 *    keep one space; caseIgnore and DN parts are case folded (DN substrings
 *    are thus an approximation: DN values of caseExact attributes keep
 *    their case).
 *    Parts of integer and octet attributes stay raw and are matched on the
 *    value as stored. Empty "any" parts ("a**b") are dropped.
 *  - Format escapes * ( ) \ NUL, controls (< 0x20) and DEL as \XX
 *    (lowercase hex); bytes >= 0x80 are left raw so UTF-8 stays readable.
 *    It appends to the caller's buffer, like the other store formatters.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_int.h"

#define FILTER_MAX_DEPTH 256
#define FILTER_MAX_TEXT  (1u << 20)

struct filter_root {
	struct store_filter node; /* first: a root pointer is a filter_root pointer */
	struct idc_arena arena;
};

/* ==== parser state and errors ============================================== */

struct parser {
	const char *s;
	size_t len; /* end of the meaningful text (trailing whitespace cut) */
	size_t pos;
	struct idc_arena arena;
	struct idc_buf tmp;  /* a decoded value */
	struct idc_buf norm; /* its normalized form */
	struct idc_diag *d;
};

static int syntax(struct parser *p, size_t pos, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int syntax(struct parser *p, size_t pos, const char *fmt, ...)
{
	char why[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	return idc_diag_set(p->d, IDC_ESYNTAX, "filter: position %zu: %s", pos, why);
}

/* Bytes quoted in messages are capped so a huge token cannot crowd out the
 * position. */
static int quoted_len(size_t n)
{
	return n > 64 ? 64 : (int)n;
}

static bool is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static void skip_space(struct parser *p)
{
	while (p->pos < p->len && is_space(p->s[p->pos]))
		p->pos++;
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

static void *palloc(struct parser *p, size_t size)
{
	void *m = idc_arena_alloc(&p->arena, size);
	if (m)
		memset(m, 0, size);
	return m;
}

/* Copy b into the arena as a value; an empty b gives {"", 0} so ptr is never
 * NULL for a value that was given. */
static int keep(struct parser *p, const struct idc_buf *b, struct store_val *out)
{
	char *m = idc_arena_strndup(&p->arena, b->len ? b->data : "", b->len);
	if (!m)
		return -ENOMEM;
	out->ptr = m;
	out->len = b->len;
	return 0;
}

/* ==== values ================================================================ */

/* Length of the escape at s[i] (a '\'): 3 for \XX, 2 for a single-character
 * escape, 0 when invalid. */
static size_t escape_len(const struct parser *p, size_t i)
{
	if (i + 2 < p->len && hexval(p->s[i + 1]) >= 0 && hexval(p->s[i + 2]) >= 0)
		return 3;
	if (i + 1 < p->len) {
		switch (p->s[i + 1]) {
		case '*':
		case '(':
		case ')':
		case '\\':
			return 2;
		}
	}
	return 0;
}

/* Check the value starting at p->pos and leave p->pos on its end (a ')' or
 * the end of the text). Counts unescaped '*' in *nstars, refusing them
 * unless allow_star. */
static int scan_value(struct parser *p, bool allow_star, size_t *nstars)
{
	*nstars = 0;
	while (p->pos < p->len) {
		char c = p->s[p->pos];
		size_t n = 1;
		if (c == ')')
			return 0;
		if (c == '(')
			return syntax(p, p->pos, "unescaped '(' in value");
		if (c == '\0')
			return syntax(p, p->pos, "unescaped NUL in value");
		if (c == '*' && !allow_star)
			return syntax(p, p->pos, "unescaped '*' in value");
		if (c == '*')
			(*nstars)++;
		if (c == '\\') {
			n = escape_len(p, p->pos);
			if (n == 0)
				return syntax(p, p->pos,
					      "invalid escape (want \\ and two hex digits)");
		}
		p->pos += n;
	}
	return 0;
}

/* Undo the escapes of s[from..to), already checked by scan_value, into
 * p->tmp. */
static size_t decode_to(const struct parser *p, size_t from, size_t to, char *out)
{
	char *o = out;
	for (size_t i = from; i < to;) {
		if (p->s[i] != '\\') {
			*o++ = p->s[i++];
		} else if (escape_len(p, i) == 3) {
			*o++ = (char)(hexval(p->s[i + 1]) << 4 | hexval(p->s[i + 2]));
			i += 3;
		} else {
			*o++ = p->s[i + 1];
			i += 2;
		}
	}
	*o = '\0';
	return (size_t)(o - out);
}

static int decode(struct parser *p, size_t from, size_t to)
{
	idc_buf_reset(&p->tmp);
	int rc = idc_buf_reserve(&p->tmp, to - from);
	if (rc)
		return rc;
	p->tmp.len = decode_to(p, from, to, p->tmp.data);
	return 0;
}

/* Text rules normalize straight into the tree when the result is no
 * longer than the value (always so for ASCII): a parse then allocates only
 * its arena. 1 when done, 0 to take the general path, or -ENOMEM. */
static int set_text_norm(struct parser *p, struct store_filter *f)
{
	if (f->rule != STORE_RULE_CASE_IGNORE && f->rule != STORE_RULE_CASE_EXACT)
		return 0;
	char *norm = idc_arena_alloc(&p->arena, f->raw.len + 1);
	if (!norm)
		return -ENOMEM;
	size_t n;
	int rc = store_normalize_text(f->rule == STORE_RULE_CASE_IGNORE, f->raw.ptr, f->raw.len,
				      norm, f->raw.len + 1, &n);
	if (rc == -E2BIG)
		return 0;
	if (rc)
		return rc;
	f->valid = true;
	f->norm = (struct store_val){norm, n};
	return 1;
}

/* Fill f->raw and f->norm from the value s[from..to) under f->rule. A value
 * outside the rule's syntax makes the assertion Undefined, not the filter
 * malformed. */
static int set_value(struct parser *p, struct store_filter *f, size_t from, size_t to)
{
	char *raw = idc_arena_alloc(&p->arena, to - from + 1);
	if (!raw)
		return -ENOMEM;
	f->raw = (struct store_val){raw, decode_to(p, from, to, raw)};
	int rc = set_text_norm(p, f);
	if (rc)
		return rc < 0 ? rc : 0;
	idc_buf_reset(&p->norm);
	rc = store_normalize(f->rule, f->raw.ptr, f->raw.len, &p->norm, NULL);
	if (rc == -ENOMEM)
		return rc;
	f->valid = rc == 0;
	if (!f->valid)
		idc_buf_reset(&p->norm);
	return keep(p, &p->norm, &f->norm);
}

/* ==== substrings ============================================================ */

/* Decode and normalize part s[from..to) into *out; an empty part stays
 * {NULL, 0}. */
static int set_part(struct parser *p, const struct store_filter *f, size_t from, size_t to,
		    enum store_prep_part kind, struct store_val *out)
{
	int rc = decode(p, from, to);
	if (rc)
		return rc;
	const struct idc_buf *src = &p->tmp;
	if (f->rule != STORE_RULE_INTEGER && f->rule != STORE_RULE_OCTET) {
		idc_buf_reset(&p->norm);
		rc = store_prep(p->tmp.data, p->tmp.len, f->rule != STORE_RULE_CASE_EXACT, kind,
				&p->norm);
		if (rc)
			return rc;
		src = &p->norm;
	}
	if (src->len == 0) {
		out->ptr = NULL;
		out->len = 0;
		return 0;
	}
	return keep(p, src, out);
}

/* Split the checked value s[from..to) with nstars unescaped '*' into the
 * parts of f. */
static int set_substrings(struct parser *p, struct store_filter *f, size_t from, size_t to,
			  size_t nstars)
{
	f->any = palloc(p, (nstars - 1) * sizeof(*f->any) + 1);
	if (!f->any)
		return -ENOMEM;
	size_t seg = from, k = 0;
	for (size_t i = from; i <= to;) {
		if (i < to && p->s[i] == '\\') {
			i += escape_len(p, i);
			continue;
		}
		if (i < to && p->s[i] != '*') {
			i++;
			continue;
		}
		struct store_val part = {NULL, 0};
		enum store_prep_part kind = k == 0    ? STORE_PREP_INITIAL
					    : i == to ? STORE_PREP_FINAL
						      : STORE_PREP_ANY;
		int rc = set_part(p, f, seg, i, kind, &part);
		if (rc)
			return rc;
		if (kind == STORE_PREP_INITIAL)
			f->initial = part;
		else if (kind == STORE_PREP_FINAL)
			f->final = part;
		else if (part.len)
			f->any[f->nany++] = part;
		k++;
		seg = ++i;
	}
	return 0;
}

/* ==== filter items ========================================================== */

static bool is_attr_stop(char c)
{
	switch (c) {
	case '=':
	case '~':
	case '<':
	case '>':
	case ':':
	case '(':
	case ')':
	case '*':
	case '\\':
		return true;
	default:
		return false;
	}
}

static bool is_rule_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '-' || c == '.';
}

/* Canonical attribute name of s[start..start+n) into f->attr. */
static int set_attr(struct parser *p, struct store_filter *f, size_t start, size_t n)
{
	char canon[STORE_ATTR_MAX];
	size_t clen = n <= STORE_ATTR_MAX ? store_attr_canon(p->s + start, n, canon) : 0;
	if (clen == 0 || clen > STORE_ATTR_MAX)
		return syntax(p, start, "invalid attribute description '%.*s'", quoted_len(n),
			      p->s + start);
	f->attr = idc_arena_strndup(&p->arena, canon, clen);
	if (!f->attr)
		return -ENOMEM;
	f->attr_len = clen;
	f->rule = store_attr_rule(f->attr, clen);
	return 0;
}

/* After "attr=": equality, presence or substrings. */
static int parse_eq_value(struct parser *p, struct store_filter *f)
{
	size_t from = p->pos, nstars;
	int rc = scan_value(p, true, &nstars);
	if (rc)
		return rc;
	size_t to = p->pos;
	if (nstars == 0) {
		f->type = SF_EQ;
		return set_value(p, f, from, to);
	}
	f->valid = true;
	if (nstars == 1 && to - from == 1) {
		f->type = SF_PRESENT;
		return 0;
	}
	f->type = SF_SUBSTR;
	return set_substrings(p, f, from, to, nstars);
}

/* A value that admits no '*': ~=, >=, <= and extensible. */
static int parse_plain_value(struct parser *p, struct store_filter *f)
{
	size_t from = p->pos, nstars;
	int rc = scan_value(p, false, &nstars);
	if (rc)
		return rc;
	return set_value(p, f, from, p->pos);
}

/* The ":dn", ":rule" and ":=" after the (possibly empty) attribute of an
 * extensible match; p->pos is on the first ':'. */
static int parse_ext(struct parser *p, struct store_filter *f)
{
	size_t colon = p->pos;
	f->type = SF_EXT;
	for (;;) {
		if (p->pos + 1 < p->len && p->s[p->pos + 1] == '=') {
			p->pos += 2;
			break;
		}
		size_t start = ++p->pos;
		while (p->pos < p->len && is_rule_char(p->s[p->pos]))
			p->pos++;
		size_t n = p->pos - start;
		if (n == 0)
			return syntax(p, start, "expected 'dn', a matching rule or '='");
		if (!f->dn_attrs && !f->has_rule && idc_memcaseeq(p->s + start, n, "dn", 2)) {
			f->dn_attrs = true;
		} else if (!f->has_rule) {
			if (store_rule_by_name(p->s + start, n, &f->rule) < 0)
				return syntax(p, start, "unknown matching rule '%.*s'",
					      quoted_len(n), p->s + start);
			f->has_rule = true;
		} else {
			return syntax(p, start, "unexpected '%.*s' after the matching rule",
				      quoted_len(n), p->s + start);
		}
		if (p->pos >= p->len || p->s[p->pos] != ':')
			return syntax(p, p->pos, "expected ':'");
	}
	if (!f->attr && !f->has_rule)
		return syntax(p, colon, "extensible match needs an attribute or a matching rule");
	return parse_plain_value(p, f);
}

/* attr op value, p->pos on the attribute. */
static int parse_item(struct parser *p, struct store_filter *f)
{
	size_t start = p->pos;
	while (p->pos < p->len && !is_attr_stop(p->s[p->pos]))
		p->pos++;
	size_t n = p->pos - start;
	if (n == 0 && (p->pos == p->len || p->s[p->pos] != ':'))
		return syntax(p, start, "expected an attribute description, '&', '|' or '!'");
	if (n > 0) {
		int rc = set_attr(p, f, start, n);
		if (rc)
			return rc;
	}
	if (p->pos == p->len)
		return syntax(p, p->pos, "expected '=', '~=', '>=', '<=' or ':'");
	char c = p->s[p->pos];
	if (c == ':')
		return parse_ext(p, f);
	if (c == '=') {
		p->pos++;
		return parse_eq_value(p, f);
	}
	if ((c == '~' || c == '>' || c == '<') && p->pos + 1 < p->len && p->s[p->pos + 1] == '=') {
		f->type = c == '~' ? SF_APPROX : c == '>' ? SF_GE : SF_LE;
		p->pos += 2;
		return parse_plain_value(p, f);
	}
	return syntax(p, p->pos, "expected '=', '~=', '>=', '<=' or ':'");
}

/* ==== filters, lists ======================================================== */

static int parse_paren(struct parser *p, struct store_filter *f, unsigned depth);

/* Members of '&' or '|' until something other than '('. kids grows by
 * doubling inside the arena: at most twice the final size is spent. */
static int parse_list(struct parser *p, struct store_filter *f, unsigned depth)
{
	size_t cap = 0;
	for (;;) {
		skip_space(p);
		if (p->pos >= p->len || p->s[p->pos] != '(')
			return 0;
		if (f->nkids == cap) {
			size_t ncap = cap ? cap * 2 : 4;
			struct store_filter **k = palloc(p, ncap * sizeof(*k));
			if (!k)
				return -ENOMEM;
			if (cap)
				memcpy(k, f->kids, cap * sizeof(*k));
			f->kids = k;
			cap = ncap;
		}
		struct store_filter *kid = palloc(p, sizeof(*kid));
		if (!kid)
			return -ENOMEM;
		f->kids[f->nkids++] = kid;
		int rc = parse_paren(p, kid, depth + 1);
		if (rc)
			return rc;
	}
}

static int parse_not(struct parser *p, struct store_filter *f, unsigned depth)
{
	skip_space(p);
	if (p->pos >= p->len || p->s[p->pos] != '(')
		return syntax(p, p->pos, "expected '(' after '!'");
	f->kids = palloc(p, sizeof(*f->kids));
	struct store_filter *kid = palloc(p, sizeof(*kid));
	if (!f->kids || !kid)
		return -ENOMEM;
	f->kids[0] = kid;
	f->nkids = 1;
	return parse_paren(p, kid, depth + 1);
}

/* The inside of a filter: '&', '|', '!' or an item. */
static int parse_comp(struct parser *p, struct store_filter *f, unsigned depth)
{
	if (depth > FILTER_MAX_DEPTH)
		return idc_diag_set(p->d, -E2BIG, "filter: position %zu: nested deeper than %d",
				    p->pos, FILTER_MAX_DEPTH);
	char c = p->pos < p->len ? p->s[p->pos] : '\0';
	if (c == '&' || c == '|') {
		f->type = c == '&' ? SF_AND : SF_OR;
		p->pos++;
		return parse_list(p, f, depth);
	}
	if (c == '!') {
		f->type = SF_NOT;
		p->pos++;
		return parse_not(p, f, depth);
	}
	return parse_item(p, f);
}

/* "(" comp ")", p->pos on the '('. */
static int parse_paren(struct parser *p, struct store_filter *f, unsigned depth)
{
	p->pos++;
	int rc = parse_comp(p, f, depth);
	if (rc)
		return rc;
	if (p->pos >= p->len)
		return syntax(p, p->pos, "missing ')'");
	if (p->s[p->pos] != ')')
		return syntax(p, p->pos, "expected ')'");
	p->pos++;
	return 0;
}

static int parse_top(struct parser *p, struct store_filter *root)
{
	while (p->len > 0 && is_space(p->s[p->len - 1]))
		p->len--;
	skip_space(p);
	if (p->pos == p->len)
		return syntax(p, p->pos, "empty filter");
	int rc = p->s[p->pos] == '(' ? parse_paren(p, root, 1) : parse_comp(p, root, 1);
	if (rc)
		return rc;
	unsigned char c = p->pos < p->len ? (unsigned char)p->s[p->pos] : 0;
	if (p->pos != p->len && c > ' ' && c < 0x7f)
		return syntax(p, p->pos, "unexpected '%c' after the filter", c);
	if (p->pos != p->len)
		return syntax(p, p->pos, "unexpected byte 0x%02x after the filter", c);
	return 0;
}

int store_filter_parse(const char *text, size_t len, struct store_filter **out, struct idc_diag *d)
{
	*out = NULL;
	if (len > FILTER_MAX_TEXT)
		return idc_diag_set(d, -E2BIG, "filter: longer than %u bytes", FILTER_MAX_TEXT);
	if (!text && len)
		return idc_diag_set(d, -EINVAL, "filter: no text");
	struct parser p = {.s = text ? text : "", .len = len, .d = d};
	struct filter_root *root = palloc(&p, sizeof(*root));
	int rc = root ? parse_top(&p, &root->node) : -ENOMEM;
	idc_buf_free(&p.tmp);
	idc_buf_free(&p.norm);
	if (rc) {
		if (rc == -ENOMEM)
			idc_diag_set(d, rc, "filter: out of memory");
		idc_arena_free(&p.arena);
		return rc;
	}
	root->arena = p.arena; /* the last allocation is done: the root owns it now */
	*out = &root->node;
	return 0;
}

void store_filter_free(struct store_filter *f)
{
	if (!f)
		return;
	struct idc_arena a = ((struct filter_root *)f)->arena;
	idc_arena_free(&a);
}

/* ==== evaluation ============================================================ */

/* Order of two byte strings, memcmp first, then the shorter first. */
static int bytes_cmp(const char *a, size_t alen, const char *b, size_t blen)
{
	size_t n = alen < blen ? alen : blen;
	int c = n ? memcmp(a, b, n) : 0;
	if (c)
		return c < 0 ? -1 : 1;
	return alen < blen ? -1 : alen > blen;
}

/* Whether v[from..n) is printable ASCII, for which store_prep is a plain
 * byte loop. */
static bool ascii_rest(const char *v, size_t from, size_t n)
{
	for (size_t i = from; i < n; i++)
		if ((unsigned char)v[i] < 0x20 || (unsigned char)v[i] > 0x7e)
			return false;
	return true;
}

/* Order of v's caseIgnore/caseExact normal form against norm without
 * building it, when v is printable ASCII: the hot path of every equality
 * test on a string attribute. Must agree with store_prep on such text
 * (leading/trailing spaces dropped, inner runs folded to one, lowercased
 * when ci). *order set and 0, or 1 when v needs store_prep: a byte later in
 * v can change earlier ones (e + U+0301 composes to one character). */
static int fold_cmp(const char *v, size_t n, const char *norm, size_t m, bool ci, int *order)
{
	size_t i = 0, j = 0;
	bool space = false;
	while (i < n && v[i] == ' ')
		i++;
	for (; i < n; i++) {
		unsigned char c = (unsigned char)v[i];
		if (c < 0x20 || c > 0x7e)
			return 1;
		if (c == ' ') {
			space = true;
			continue;
		}
		if (space) {
			if (j == m || (unsigned char)norm[j] != ' ') {
				*order = j == m ? 1 : ' ' < (unsigned char)norm[j] ? -1 : 1;
				return ascii_rest(v, i, n) ? 0 : 1;
			}
			j++;
			space = false;
		}
		if (ci)
			c = (unsigned char)idc_tolower((char)c);
		if (j == m || c != (unsigned char)norm[j]) {
			*order = j == m ? 1 : c < (unsigned char)norm[j] ? -1 : 1;
			return ascii_rest(v, i, n) ? 0 : 1;
		}
		j++;
	}
	*order = j < m ? -1 : 0;
	return 0;
}

/* Order of value v under rule r against the normalized assertion norm in
 * *order. 0, or negative when v does not normalize (it then matches
 * nothing; -ENOMEM makes the caller answer Undefined). */
static int value_order(enum store_rule r, const char *v, size_t n, const struct store_val *norm,
		       struct idc_buf *scratch, int *order)
{
	bool text = r == STORE_RULE_CASE_IGNORE || r == STORE_RULE_CASE_EXACT;
	if (text && fold_cmp(v, n, norm->ptr, norm->len, r == STORE_RULE_CASE_IGNORE, order) == 0)
		return 0;
	if (r == STORE_RULE_OCTET) {
		*order = bytes_cmp(v, n, norm->ptr, norm->len);
		return 0;
	}
	idc_buf_reset(scratch);
	int rc = store_normalize(r, v, n, scratch, NULL);
	if (rc)
		return rc;
	*order = bytes_cmp(scratch->data ? scratch->data : "", scratch->len, norm->ptr, norm->len);
	return 0;
}

static bool order_matches(enum store_filter_type t, int order)
{
	if (t == SF_GE)
		return order >= 0;
	if (t == SF_LE)
		return order <= 0;
	return order == 0;
}

/* Whether some value of a satisfies f under f->rule: SF_TRUE, SF_FALSE, or
 * SF_UNDEF when memory ran out on the way. */
static int attr_matches(const struct store_filter *f, const struct store_attr *a,
			struct idc_buf *scratch)
{
	int res = SF_FALSE;
	for (size_t i = 0; i < a->nvals; i++) {
		int order;
		int rc =
		    value_order(f->rule, a->vals[i].ptr, a->vals[i].len, &f->norm, scratch, &order);
		if (rc == -ENOMEM)
			res = SF_UNDEF;
		else if (rc == 0 && order_matches(f->type, order))
			return SF_TRUE;
	}
	return res;
}

/* =, ~=, >=, <= */
static int eval_compare(const struct store_filter *f, const struct store_entry *e,
			struct idc_buf *scratch)
{
	if (!f->valid)
		return SF_UNDEF;
	const struct store_attr *a = store_entry_attr(e, f->attr, f->attr_len);
	return a ? attr_matches(f, a, scratch) : SF_FALSE;
}

/* Parts of f in order in v[0..n): initial at the start, final at the end,
 * the any parts left to right between them without overlapping. */
static bool substr_in(const struct store_filter *f, const char *v, size_t n)
{
	size_t lo = f->initial.len, hi;
	if (lo + f->final.len > n)
		return false;
	if (!v)
		v = ""; /* n == 0 here; keeps the pointer arithmetic defined */
	hi = n - f->final.len;
	if (lo && memcmp(v, f->initial.ptr, lo) != 0)
		return false;
	if (f->final.len && memcmp(v + hi, f->final.ptr, f->final.len) != 0)
		return false;
	for (size_t i = 0; i < f->nany; i++) {
		const char *hit = memmem(v + lo, hi - lo, f->any[i].ptr, f->any[i].len);
		if (!hit)
			return false;
		lo = (size_t)(hit - v) + f->any[i].len;
	}
	return true;
}

static int eval_substr(const struct store_filter *f, const struct store_entry *e,
		       struct idc_buf *scratch)
{
	const struct store_attr *a = store_entry_attr(e, f->attr, f->attr_len);
	if (!a)
		return SF_FALSE;
	bool raw = f->rule == STORE_RULE_INTEGER || f->rule == STORE_RULE_OCTET;
	int res = SF_FALSE;
	for (size_t i = 0; i < a->nvals; i++) {
		const struct store_val *v = &a->vals[i];
		if (raw) {
			if (substr_in(f, v->ptr, v->len))
				return SF_TRUE;
			continue;
		}
		idc_buf_reset(scratch);
		int rc = store_normalize(f->rule, v->ptr, v->len, scratch, NULL);
		if (rc == -ENOMEM)
			res = SF_UNDEF;
		else if (rc == 0 && substr_in(f, scratch->data ? scratch->data : "", scratch->len))
			return SF_TRUE;
	}
	return res;
}

struct ava_match {
	const struct store_filter *f;
	struct idc_buf *scratch;
	bool oom;
};

/* store_dn_foreach_ava callback: 1 (stop) on an AVA that matches. */
static int ava_matches(struct store_val type, struct store_val value, size_t rdn, void *arg)
{
	struct ava_match *m = arg;
	char canon[STORE_ATTR_MAX];
	(void)rdn;
	size_t clen = type.len <= STORE_ATTR_MAX ? store_attr_canon(type.ptr, type.len, canon) : 0;
	if (clen == 0 || clen > STORE_ATTR_MAX)
		return 0;
	if (m->f->attr && (clen != m->f->attr_len || memcmp(canon, m->f->attr, clen) != 0))
		return 0;
	int order;
	int rc = value_order(m->f->rule, value.ptr, value.len, &m->f->norm, m->scratch, &order);
	if (rc == -ENOMEM)
		m->oom = true;
	return rc == 0 && order == 0;
}

/* [attr][:dn][:rule]:=value (RFC 4511 4.5.1.7.7). */
static int eval_ext(const struct store_filter *f, const struct store_entry *e,
		    struct idc_buf *scratch)
{
	if (!f->valid)
		return SF_UNDEF;
	int res = SF_FALSE;
	if (f->attr) {
		const struct store_attr *a = store_entry_attr(e, f->attr, f->attr_len);
		res = a ? attr_matches(f, a, scratch) : SF_FALSE;
	} else {
		for (size_t i = 0; i < e->nattrs && res != SF_TRUE; i++) {
			int r = attr_matches(f, &e->attrs[i], scratch);
			if (r != SF_FALSE)
				res = r;
		}
	}
	if (res == SF_TRUE || !f->dn_attrs || !e->dn.ptr)
		return res;
	struct ava_match m = {f, scratch, false};
	if (store_dn_foreach_ava(e->dn.ptr, e->dn.len, ava_matches, &m, NULL) == 1)
		return SF_TRUE;
	return m.oom ? SF_UNDEF : res;
}

/* AND and OR: `decisive` (FALSE for AND, TRUE for OR) ends the walk, any
 * Undefined otherwise wins over the neutral value. */
static int eval_list(const struct store_filter *f, const struct store_entry *e,
		     struct idc_buf *scratch, int decisive)
{
	int res = decisive == SF_FALSE ? SF_TRUE : SF_FALSE;
	for (size_t i = 0; i < f->nkids; i++) {
		int r = store_filter_eval(f->kids[i], e, scratch);
		if (r == decisive)
			return r;
		if (r == SF_UNDEF)
			res = SF_UNDEF;
	}
	return res;
}

int store_filter_eval(const struct store_filter *f, const struct store_entry *e,
		      struct idc_buf *scratch)
{
	int r;
	switch (f->type) {
	case SF_AND:
		return eval_list(f, e, scratch, SF_FALSE);
	case SF_OR:
		return eval_list(f, e, scratch, SF_TRUE);
	case SF_NOT:
		if (f->nkids != 1)
			return SF_UNDEF;
		r = store_filter_eval(f->kids[0], e, scratch);
		return r == SF_UNDEF ? r : r == SF_TRUE ? SF_FALSE : SF_TRUE;
	case SF_EQ:
	case SF_APPROX:
	case SF_GE:
	case SF_LE:
		return eval_compare(f, e, scratch);
	case SF_PRESENT: {
		const struct store_attr *a = store_entry_attr(e, f->attr, f->attr_len);
		return a && a->nvals ? SF_TRUE : SF_FALSE;
	}
	case SF_SUBSTR:
		return eval_substr(f, e, scratch);
	case SF_EXT:
		return eval_ext(f, e, scratch);
	}
	return SF_UNDEF;
}

int store_filter_match(const struct store_filter *f, const struct store_entry *e,
		       struct idc_buf *scratch)
{
	return store_filter_eval(f, e, scratch) == SF_TRUE;
}

/* ==== format ================================================================ */

static bool needs_escape(unsigned char c)
{
	return c == '*' || c == '(' || c == ')' || c == '\\' || c < 0x20 || c == 0x7f;
}

static int put_value(struct idc_buf *out, const struct store_val *v)
{
	size_t run = 0;
	if (v->len == 0)
		return 0;
	for (size_t i = 0; i < v->len; i++) {
		unsigned char c = (unsigned char)v->ptr[i];
		if (!needs_escape(c))
			continue;
		int rc = idc_buf_append(out, v->ptr + run, i - run);
		if (!rc)
			rc = idc_buf_printf(out, "\\%02x", c);
		if (rc)
			return rc;
		run = i + 1;
	}
	return idc_buf_append(out, v->ptr + run, v->len - run);
}

static const char *const rule_names[] = {
    [STORE_RULE_CASE_IGNORE] = "caseIgnoreMatch", [STORE_RULE_CASE_EXACT] = "caseExactMatch",
    [STORE_RULE_INTEGER] = "integerMatch",        [STORE_RULE_DN] = "distinguishedNameMatch",
    [STORE_RULE_OCTET] = "octetStringMatch",
};

static int put_substr(struct idc_buf *out, const struct store_filter *f)
{
	int rc = put_value(out, &f->initial);
	for (size_t i = 0; i < f->nany && !rc; i++) {
		rc = idc_buf_putc(out, '*');
		if (!rc)
			rc = put_value(out, &f->any[i]);
	}
	if (!rc)
		rc = idc_buf_putc(out, '*');
	return rc ? rc : put_value(out, &f->final);
}

static int put_ext(struct idc_buf *out, const struct store_filter *f)
{
	int rc = 0;
	if (f->dn_attrs)
		rc = idc_buf_append(out, ":dn", 3);
	if (!rc && f->has_rule) {
		if ((size_t)f->rule >= IDC_ARRAY_SIZE(rule_names))
			return -EINVAL;
		rc = idc_buf_printf(out, ":%s", rule_names[f->rule]);
	}
	if (!rc)
		rc = idc_buf_append(out, ":=", 2);
	return rc ? rc : put_value(out, &f->raw);
}

/* The part after the attribute name of an item. */
static int put_assertion(struct idc_buf *out, const struct store_filter *f)
{
	static const char *const ops[] = {
	    [SF_EQ] = "=",
	    [SF_APPROX] = "~=",
	    [SF_GE] = ">=",
	    [SF_LE] = "<=",
	};
	switch (f->type) {
	case SF_PRESENT:
		return idc_buf_append(out, "=*", 2);
	case SF_SUBSTR: {
		int rc = idc_buf_putc(out, '=');
		return rc ? rc : put_substr(out, f);
	}
	case SF_EXT:
		return put_ext(out, f);
	case SF_EQ:
	case SF_APPROX:
	case SF_GE:
	case SF_LE: {
		int rc = idc_buf_printf(out, "%s", ops[f->type]);
		return rc ? rc : put_value(out, &f->raw);
	}
	default:
		return -EINVAL;
	}
}

int store_filter_format(const struct store_filter *f, struct idc_buf *out)
{
	int rc = idc_buf_putc(out, '(');
	if (!rc && (f->type == SF_AND || f->type == SF_OR || f->type == SF_NOT)) {
		rc = idc_buf_putc(out, f->type == SF_AND ? '&' : f->type == SF_OR ? '|' : '!');
		for (size_t i = 0; i < f->nkids && !rc; i++)
			rc = store_filter_format(f->kids[i], out);
	} else if (!rc) {
		if (f->attr)
			rc = idc_buf_append(out, f->attr, f->attr_len);
		if (!rc)
			rc = put_assertion(out, f);
	}
	return rc ? rc : idc_buf_putc(out, ')');
}
