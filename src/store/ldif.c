/*
 * LDIF (RFC 2849) reader and writer.
 *
 * The reader owns one buffer filled by large freads. A record (the lines up
 * to a blank line) is kept contiguous in that buffer and parsed in place:
 * folded lines are joined by moving bytes left, base64 is decoded over its
 * own text, and every pointer handed out points into the record. Only the
 * next ldif_next call moves the buffer, which is the lifetime the header
 * promises. The line, pair, mod and value arrays only grow, so a steady
 * import allocates nothing per record.
 *
 * The writer appends straight into the caller's idc_buf: values are
 * base64-encoded in place and long lines are folded by spreading them out
 * from the end, so there is no scratch memory per value.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "store_int.h"

/* Reads start at 64 KiB, so a small file costs little, and grow to 1 MiB
 * once the file proves bigger. */
#define LDIF_FIRST      ((size_t)64 << 10)
#define LDIF_CHUNK      ((size_t)1 << 20)
#define LDIF_RECORD_MAX ((size_t)64 << 20)
/* The largest buffer ever needed: a record at the limit plus one read. */
#define LDIF_BUF_MAX    (LDIF_RECORD_MAX + LDIF_CHUNK + 2)
#define LDIF_FOLD_FIRST 76
#define LDIF_FOLD_NEXT  75

/* A physical line of the current record: offset from the record's start,
 * length without the line end (LF or CRLF). */
struct ldif_pline {
	size_t off;
	size_t len;
};

enum ldif_lkind { LDIF_L_VALUE, LDIF_L_SEP };

/* A logical line: continuations joined, comments gone, value decoded. */
struct ldif_lline {
	enum ldif_lkind kind;
	unsigned long line; /* its first physical line */
	struct store_val name;
	struct store_val value;
};

struct ldif_reader {
	FILE *f;
	char *name;
	char *buf;
	size_t cap;          /* one byte past the data always stays free (NUL) */
	size_t len;          /* bytes of buf holding file data */
	size_t rstart;       /* where the current record starts in buf */
	size_t pos;          /* where scanning continues */
	uint64_t base;       /* file offset of buf[0] */
	unsigned long line;  /* number of the physical line at pos */
	unsigned long rline; /* number of the record's first physical line */
	bool eof;
	bool filled;           /* the last read filled buf: the file is big */
	bool past_first;       /* a record was seen: version: is no longer allowed */
	struct ldif_pline *pl; /* physical lines of the current record */
	size_t npl, plcap;
	struct ldif_lline *ll; /* its logical lines */
	size_t nll, llcap;
	struct store_pair *pairs;
	size_t paircap;
	struct store_val *canon; /* per pair (struct ldif_record) */
	size_t canoncap;
	struct store_mod *mods;
	size_t modcap;
	struct store_val *vals;
	size_t valcap;
};

static int fail(const struct ldif_reader *r, struct idc_diag *d, int rc, unsigned long line,
		const char *fmt, ...) __attribute__((format(printf, 5, 6)));

static int fail(const struct ldif_reader *r, struct idc_diag *d, int rc, unsigned long line,
		const char *fmt, ...)
{
	char why[400];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	return idc_diag_set(d, rc, "%s:%lu: %s", r->name, line, why);
}

/* Make room for need elements in an array of size-byte elements. Returns the
 * (possibly moved) array, never NULL on success even for need 0, or NULL
 * with the old one untouched. */
static void *grow_array(void *p, size_t *cap, size_t need, size_t size)
{
	if (need <= *cap && *cap > 0)
		return p;
	size_t n = *cap ? *cap : 16;
	while (n < need)
		n *= 2;
	if (n > SIZE_MAX / size)
		return NULL;
	void *q = realloc(p, n * size);
	if (q)
		*cap = n;
	return q;
}

/* Shown text of a name or keyword in messages: at most 64 bytes of it. */
static int shown(struct store_val v)
{
	return v.len > 64 ? 64 : (int)v.len;
}

/* Inlined with the length test first: every line of every record is asked
 * about four keywords, and most names differ from them in length. */
static inline bool is_kw(struct store_val v, const char *kw)
{
	size_t n = strlen(kw);
	return v.len == n && idc_memcaseeq(v.ptr, v.len, kw, n);
}

static struct store_val trim_right(struct store_val v)
{
	while (v.len > 0 && v.ptr[v.len - 1] == ' ')
		v.len--;
	return v;
}

/* ==== opening and closing ================================================== */

int ldif_open(FILE *f, const char *name, struct ldif_reader **out)
{
	*out = NULL;
	if (!f)
		return -EINVAL;
	struct ldif_reader *r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->f = f;
	r->name = strdup(name ? name : "(ldif)");
	r->cap = LDIF_FIRST + 1;
	r->buf = malloc(r->cap);
	if (!r->name || !r->buf) {
		ldif_close(r);
		return -ENOMEM;
	}
	r->line = 1;
	*out = r;
	return 0;
}

void ldif_close(struct ldif_reader *r)
{
	if (!r)
		return;
	free(r->name);
	free(r->buf);
	free(r->pl);
	free(r->ll);
	free(r->pairs);
	free(r->canon);
	free(r->mods);
	free(r->vals);
	free(r);
}

uint64_t ldif_offset(const struct ldif_reader *r)
{
	return r->base + r->pos;
}

void ldif_record_span(const struct ldif_reader *r, const char **p, size_t *n)
{
	*p = r->buf + r->rstart;
	*n = r->pos - r->rstart;
}

/* ==== reading physical lines ================================================ */

/* Move the current record to the front of buf, grow buf when the record
 * fills half of it (or while it is below 1 MiB and the file is bigger), and
 * read more. Sets eof at the end of the file.
 * 0, -E2BIG (record too long), -ENOMEM or -EIO. */
static int refill(struct ldif_reader *r, struct idc_diag *d)
{
	if (r->rstart > 0) {
		memmove(r->buf, r->buf + r->rstart, r->len - r->rstart);
		r->base += r->rstart;
		r->len -= r->rstart;
		r->pos -= r->rstart;
		r->rstart = 0;
	}
	if (r->len > LDIF_RECORD_MAX)
		return fail(r, d, -E2BIG, r->line, "line or record longer than 64 MiB");
	bool crowded = r->cap - 1 - r->len < r->cap / 2;
	bool small = r->filled && r->cap <= LDIF_CHUNK;
	if ((crowded || small) && r->cap < LDIF_BUF_MAX) {
		size_t cap = r->cap * 2 < LDIF_BUF_MAX ? r->cap * 2 : LDIF_BUF_MAX;
		char *p = realloc(r->buf, cap);
		if (!p)
			return -ENOMEM;
		r->buf = p;
		r->cap = cap;
	}
	size_t want = r->cap - 1 - r->len;
	size_t n = fread(r->buf + r->len, 1, want, r->f);
	r->len += n;
	r->filled = n == want;
	if (n == 0) {
		if (ferror(r->f))
			return fail(r, d, -EIO, r->line, "read error");
		r->eof = true;
	}
	return 0;
}

static int push_pline(struct ldif_reader *r, size_t len)
{
	if (r->npl == r->plcap) {
		void *p = grow_array(r->pl, &r->plcap, r->npl + 1, sizeof(*r->pl));
		if (!p)
			return -ENOMEM;
		r->pl = p;
	}
	if (r->npl == 0)
		r->rline = r->line;
	r->pl[r->npl].off = r->pos - r->rstart;
	r->pl[r->npl].len = len;
	r->npl++;
	return 0;
}

/* Gather the physical lines of the next record (blank lines before it
 * skipped, the blank line after it consumed) into r->pl. 1 when there are
 * some, 0 at the end of the input, or a negative error. */
static int collect_record(struct ldif_reader *r, struct idc_diag *d)
{
	r->npl = 0;
	r->rstart = r->pos;
	for (;;) {
		char *s = r->buf + r->pos;
		char *nl = memchr(s, '\n', r->len - r->pos);
		size_t n, next;
		if (nl) {
			n = (size_t)(nl - s);
			next = r->pos + n + 1;
		} else if (!r->eof) {
			int rc = refill(r, d);
			if (rc)
				return rc;
			continue;
		} else if (r->pos == r->len) {
			break;
		} else {
			n = r->len - r->pos;
			next = r->len;
		}
		if (n > 0 && s[n - 1] == '\r')
			n--;
		if (n == 0) {
			r->pos = next;
			r->line++;
			if (r->npl)
				break;
			r->rstart = r->pos;
			continue;
		}
		int rc = push_pline(r, n);
		if (rc)
			return rc;
		r->pos = next;
		r->line++;
		if (r->pos - r->rstart > LDIF_RECORD_MAX)
			return fail(r, d, -E2BIG, r->line - 1, "line or record longer than 64 MiB");
	}
	return r->npl > 0;
}

/* ==== logical lines ========================================================== */

/* Decode base64 s[0..n) over itself (the output is never longer than the
 * input read so far). Missing padding is tolerated, misplaced padding is not.
 * Returns NULL with *len the decoded length, or why it is not base64. */
static const char *b64_decode(char *s, size_t n, size_t *len, size_t *at)
{
	size_t pad = 0;
	while (pad < 2 && pad < n && s[n - 1 - pad] == '=')
		pad++;
	*at = n;
	if (pad && n % 4)
		return "padding '=' in a length that is not a multiple of 4";
	size_t m = n - pad, o = 0;
	if (m % 4 == 1)
		return "truncated (length leaves one odd character)";
	uint32_t acc = 0;
	unsigned have = 0;
	for (size_t i = 0; i < m; i++) {
		int v = idc_b64_value((unsigned char)s[i]);
		if (v < 0) {
			*at = i;
			return "invalid character";
		}
		acc = (acc << 6) | (uint32_t)v;
		if (++have == 4) {
			s[o++] = (char)(acc >> 16);
			s[o++] = (char)(acc >> 8);
			s[o++] = (char)acc;
			acc = 0;
			have = 0;
		}
	}
	if (have == 2) {
		s[o++] = (char)(acc >> 4);
	} else if (have == 3) {
		s[o++] = (char)(acc >> 10);
		s[o++] = (char)(acc >> 2);
	}
	*len = o;
	return NULL;
}

static bool is_separator(const char *s, size_t n)
{
	if (n == 0 || s[0] != '-')
		return false;
	for (size_t i = 1; i < n; i++)
		if (s[i] != ' ')
			return false;
	return true;
}

/* Split one logical line s[0..n) into name and value, decoding base64 in
 * place, and append it to r->ll. Name and value are NUL-terminated in the
 * buffer (the byte after each is the old ':' or line end), which spares
 * callers copies when they need C strings. */
static int lex_line(struct ldif_reader *r, char *s, size_t n, unsigned long line,
		    struct idc_diag *d)
{
	struct ldif_lline *l = &r->ll[r->nll];
	memset(l, 0, sizeof(*l));
	l->line = line;
	if (is_separator(s, n)) {
		l->kind = LDIF_L_SEP;
		r->nll++;
		return 0;
	}
	char *colon = memchr(s, ':', n);
	if (!colon)
		return fail(r, d, IDC_ESYNTAX, line,
			    "no ':' in line (expected 'attribute: value')");
	char *v = colon + 1, *end = s + n;
	bool b64 = v < end && *v == ':';
	if (b64)
		v++;
	else if (v < end && *v == '<')
		return fail(r, d, IDC_ESYNTAX, line, "URL values (attr:<) are not supported");
	while (v < end && *v == ' ')
		v++;
	size_t vlen = (size_t)(end - v);
	if (b64) {
		while (vlen > 0 && v[vlen - 1] == ' ')
			vlen--;
		size_t at;
		const char *why = b64_decode(v, vlen, &vlen, &at);
		if (why)
			return fail(r, d, IDC_ESYNTAX, line, "bad base64 value: %s at offset %zu",
				    why, at);
	}
	*colon = '\0';
	v[vlen] = '\0';
	l->name = (struct store_val){s, (size_t)(colon - s)};
	l->value = (struct store_val){v, vlen};
	r->nll++;
	return 0;
}

/* Turn the record's physical lines into logical lines: comments (with their
 * continuations) dropped, folded lines joined in place. */
static int lex_record(struct ldif_reader *r, struct idc_diag *d)
{
	char *rec = r->buf + r->rstart;
	void *p = grow_array(r->ll, &r->llcap, r->npl, sizeof(*r->ll));
	if (!p)
		return -ENOMEM;
	r->ll = p;
	r->nll = 0;
	size_t i = 0;
	while (i < r->npl) {
		unsigned long line = r->rline + i;
		char *s = rec + r->pl[i].off;
		size_t n = r->pl[i].len;
		if (s[0] == ' ')
			return fail(r, d, IDC_ESYNTAX, line,
				    "continuation line (starting with a space) with no line to "
				    "continue");
		bool comment = s[0] == '#';
		for (i++; i < r->npl && rec[r->pl[i].off] == ' '; i++) {
			if (comment)
				continue;
			memmove(s + n, rec + r->pl[i].off + 1, r->pl[i].len - 1);
			n += r->pl[i].len - 1;
		}
		if (comment)
			continue;
		int rc = lex_line(r, s, n, line, d);
		if (rc)
			return rc;
	}
	return 0;
}

/* ==== records ================================================================ */

/* Check that name is a valid attribute description; *canon gets its
 * canonical form (in buf, or kept by store_attr_canon_ref) and the return
 * is its length, or 0 after setting d. */
static size_t check_attr(const struct ldif_reader *r, const struct ldif_lline *l,
			 struct store_val name, char buf[STORE_ATTR_MAX], const char **canon,
			 struct idc_diag *d)
{
	size_t n = store_attr_canon_ref(name.ptr, name.len, buf, canon);
	if (n == 0)
		fail(r, d, IDC_ESYNTAX, l->line, "invalid attribute description '%.*s'",
		     shown(name), name.ptr);
	return n;
}

/* Names that mean something to LDIF itself and so cannot be attributes in
 * an entry: accepting them would make records that write back ambiguously. */
static __attribute__((noinline)) int check_value_kw(const struct ldif_reader *r,
						    const struct ldif_lline *l, const char *what,
						    struct idc_diag *d)
{
	if (l->kind == LDIF_L_SEP)
		return fail(r, d, IDC_ESYNTAX, l->line, "'-' line in %s", what);
	if (is_kw(l->name, "dn"))
		return fail(r, d, IDC_ESYNTAX, l->line,
			    "dn: line inside a record (is a blank line missing before it?)");
	if (is_kw(l->name, "control"))
		return fail(r, d, IDC_ESYNTAX, l->line, "controls are not supported");
	if (is_kw(l->name, "changetype"))
		return fail(r, d, IDC_ESYNTAX, l->line,
			    "changetype: must come right after the dn: line");
	return 0;
}

/* check_value_kw for lines that could be one: every line of every record
 * asks, and most names have none of the keywords' lengths. */
static inline int check_value_line(const struct ldif_reader *r, const struct ldif_lline *l,
				   const char *what, struct idc_diag *d)
{
	size_t n = l->name.len;
	if (l->kind != LDIF_L_SEP && n != 2 && n != 7 && n != 10)
		return 0;
	return check_value_kw(r, l, what, d);
}

static int parse_add(struct ldif_reader *r, size_t i, struct ldif_record *rec, struct idc_diag *d)
{
	void *p = grow_array(r->pairs, &r->paircap, r->nll - i, sizeof(*r->pairs));
	if (!p)
		return -ENOMEM;
	r->pairs = p;
	if (!(p = grow_array(r->canon, &r->canoncap, r->nll - i, sizeof(*r->canon))))
		return -ENOMEM;
	r->canon = p;
	char canon[STORE_ATTR_MAX];
	size_t n = 0;
	for (; i < r->nll; i++) {
		const struct ldif_lline *l = &r->ll[i];
		int rc = check_value_line(r, l, "an add record", d);
		if (rc)
			return rc;
		/* a name spelled as the line before's (objectClass, member) was
		 * checked there */
		bool again = n > 0 && r->pairs[n - 1].name.len == l->name.len &&
			     store_short_eq(r->pairs[n - 1].name.ptr, l->name.ptr, l->name.len);
		const char *ref;
		size_t len = again ? 0 : check_attr(r, l, l->name, canon, &ref, d);
		if (!again && !len)
			return IDC_ESYNTAX;
		if (again)
			r->canon[n] = r->canon[n - 1];
		else
			r->canon[n] = ref != canon ? (struct store_val){ref, len}
						   : (struct store_val){NULL, 0};
		r->pairs[n].name = l->name;
		r->pairs[n].value = l->value;
		n++;
	}
	rec->pairs = r->pairs;
	rec->canon = r->canon;
	rec->npairs = n;
	return 0;
}

/* Start a modification from its "add: attr" (delete:, replace:) line. */
static int begin_mod(struct ldif_reader *r, const struct ldif_lline *l, struct store_mod *m,
		     char canon[STORE_ATTR_MAX], size_t *canonlen, struct idc_diag *d)
{
	if (l->kind == LDIF_L_SEP)
		return fail(r, d, IDC_ESYNTAX, l->line,
			    "'-' with no modification before it (add:, delete: or replace:)");
	if (is_kw(l->name, "add"))
		m->op = STORE_MOD_ADD;
	else if (is_kw(l->name, "delete"))
		m->op = STORE_MOD_DELETE;
	else if (is_kw(l->name, "replace"))
		m->op = STORE_MOD_REPLACE;
	else
		return fail(r, d, IDC_ESYNTAX, l->line,
			    "expected add:, delete: or replace: in a modify record, got '%.*s:'",
			    shown(l->name), l->name.ptr);
	m->attr = trim_right(l->value);
	m->vals = NULL;
	m->nvals = 0;
	const char *ref;
	*canonlen = check_attr(r, l, m->attr, canon, &ref, d);
	if (*canonlen && ref != canon)
		memcpy(canon, ref, *canonlen + 1);
	return *canonlen ? 0 : IDC_ESYNTAX;
}

/* A value line inside a modification: its attribute must be the one the
 * modification named (compared canonically, so cn matches commonName). */
static int mod_value(struct ldif_reader *r, const struct ldif_lline *l, const struct store_mod *m,
		     const char *want, size_t wantlen, struct idc_diag *d)
{
	char buf[STORE_ATTR_MAX];
	const char *canon;
	int rc = check_value_line(r, l, "a modify record", d);
	if (rc)
		return rc;
	size_t n = check_attr(r, l, l->name, buf, &canon, d);
	if (!n)
		return IDC_ESYNTAX;
	if (n != wantlen || memcmp(canon, want, n) != 0)
		return fail(r, d, IDC_ESYNTAX, l->line,
			    "attribute '%.*s' does not match '%.*s' of this modification "
			    "(missing '-' line?)",
			    shown(l->name), l->name.ptr, shown(m->attr), m->attr.ptr);
	return 0;
}

static int grow_mod_arrays(struct ldif_reader *r, size_t n)
{
	void *p = grow_array(r->mods, &r->modcap, n, sizeof(*r->mods));
	if (!p)
		return -ENOMEM;
	r->mods = p;
	p = grow_array(r->vals, &r->valcap, n, sizeof(*r->vals));
	if (!p)
		return -ENOMEM;
	r->vals = p;
	return 0;
}

/* mod-specs: "op: attr", value lines of attr, "-". The final '-' may be
 * missing; RFC 2849 wants it but nothing is ambiguous without it. */
static int parse_modify(struct ldif_reader *r, size_t i, struct ldif_record *rec,
			struct idc_diag *d)
{
	int rc = grow_mod_arrays(r, r->nll - i);
	if (rc)
		return rc;
	char canon[STORE_ATTR_MAX];
	size_t canonlen = 0, nmods = 0, nvals = 0;
	struct store_mod *cur = NULL;
	for (; i < r->nll; i++) {
		const struct ldif_lline *l = &r->ll[i];
		if (!cur) {
			cur = &r->mods[nmods];
			rc = begin_mod(r, l, cur, canon, &canonlen, d);
			if (rc)
				return rc;
			nmods++;
		} else if (l->kind == LDIF_L_SEP) {
			cur = NULL;
		} else {
			rc = mod_value(r, l, cur, canon, canonlen, d);
			if (rc)
				return rc;
			r->vals[nvals++] = l->value;
			cur->nvals++;
		}
	}
	/* Values were collected in order, so each mod's are the next run. */
	size_t at = 0;
	for (size_t k = 0; k < nmods; k++) {
		r->mods[k].vals = r->mods[k].nvals ? &r->vals[at] : NULL;
		at += r->mods[k].nvals;
	}
	rec->mods = r->mods;
	rec->nmods = nmods;
	return 0;
}

/* newrdn:, deleteoldrdn: 0|1, optional newsuperior:, in that order. */
static int parse_modrdn(struct ldif_reader *r, size_t i, struct ldif_record *rec,
			struct idc_diag *d)
{
	const struct ldif_lline *prev = &r->ll[i - 1];
	const struct ldif_lline *l = i < r->nll ? &r->ll[i] : NULL;
	if (!l || l->kind == LDIF_L_SEP || !is_kw(l->name, "newrdn"))
		return fail(r, d, IDC_ESYNTAX, l ? l->line : prev->line,
			    "expected newrdn: in a modrdn record");
	rec->newrdn = l->value;
	prev = l;
	l = ++i < r->nll ? &r->ll[i] : NULL;
	if (!l || l->kind == LDIF_L_SEP || !is_kw(l->name, "deleteoldrdn"))
		return fail(r, d, IDC_ESYNTAX, l ? l->line : prev->line,
			    "expected deleteoldrdn: after newrdn:");
	struct store_val v = trim_right(l->value);
	if (v.len != 1 || (v.ptr[0] != '0' && v.ptr[0] != '1'))
		return fail(r, d, IDC_ESYNTAX, l->line, "deleteoldrdn must be 0 or 1, not '%.*s'",
			    shown(v), v.ptr);
	rec->deleteoldrdn = v.ptr[0] == '1';
	l = ++i < r->nll ? &r->ll[i] : NULL;
	if (l && l->kind != LDIF_L_SEP && is_kw(l->name, "newsuperior")) {
		rec->has_newsuperior = true;
		rec->newsuperior = l->value;
		l = ++i < r->nll ? &r->ll[i] : NULL;
	}
	if (l)
		return fail(r, d, IDC_ESYNTAX, l->line, "unexpected line in a modrdn record");
	return 0;
}

static int parse_changetype(struct ldif_reader *r, const struct ldif_lline *l,
			    enum ldif_change *out, struct idc_diag *d)
{
	struct store_val v = trim_right(l->value);
	if (is_kw(v, "add"))
		*out = LDIF_ADD;
	else if (is_kw(v, "delete"))
		*out = LDIF_DELETE;
	else if (is_kw(v, "modify"))
		*out = LDIF_MODIFY;
	else if (is_kw(v, "modrdn") || is_kw(v, "moddn"))
		*out = LDIF_MODRDN;
	else
		return fail(r, d, IDC_ESYNTAX, l->line, "unknown changetype '%.*s'", shown(v),
			    v.ptr);
	return 0;
}

/* The optional "version: 1" heading the file. Returns the index of the
 * first line after it. */
static int skip_version(struct ldif_reader *r, size_t *i, struct idc_diag *d)
{
	const struct ldif_lline *l = &r->ll[0];
	bool first = !r->past_first;
	r->past_first = true;
	if (!first || l->kind == LDIF_L_SEP || !is_kw(l->name, "version"))
		return 0;
	struct store_val v = trim_right(l->value);
	if (v.len != 1 || v.ptr[0] != '1')
		return fail(r, d, IDC_ESYNTAX, l->line, "unsupported LDIF version '%.*s' (only 1)",
			    shown(v), v.ptr);
	*i = 1;
	return 0;
}

/* Interpret the logical lines of one record. 1 with rec filled, 0 when the
 * block held no record (comments only, or just the version line). */
static int parse_record(struct ldif_reader *r, struct ldif_record *rec, struct idc_diag *d)
{
	size_t i = 0;
	if (r->nll == 0)
		return 0;
	int rc = skip_version(r, &i, d);
	if (rc)
		return rc;
	if (i == r->nll)
		return 0;
	const struct ldif_lline *l = &r->ll[i];
	if (l->kind == LDIF_L_SEP || !is_kw(l->name, "dn"))
		return fail(r, d, IDC_ESYNTAX, l->line,
			    "missing dn: (a record must start with it)");
	memset(rec, 0, sizeof(*rec));
	rec->line = l->line;
	rec->dn = l->value;
	rec->change = LDIF_ADD;
	l = ++i < r->nll ? &r->ll[i] : NULL;
	if (l && l->kind != LDIF_L_SEP && is_kw(l->name, "control"))
		return fail(r, d, IDC_ESYNTAX, l->line, "controls are not supported");
	if (l && l->kind != LDIF_L_SEP && is_kw(l->name, "changetype")) {
		rc = parse_changetype(r, l, &rec->change, d);
		if (rc)
			return rc;
		i++;
	}
	switch (rec->change) {
	case LDIF_ADD:
		rc = parse_add(r, i, rec, d);
		break;
	case LDIF_DELETE:
		rc = i < r->nll
			 ? fail(r, d, IDC_ESYNTAX, r->ll[i].line, "value line in a delete record")
			 : 0;
		break;
	case LDIF_MODIFY:
		rc = parse_modify(r, i, rec, d);
		break;
	case LDIF_MODRDN:
		rc = parse_modrdn(r, i, rec, d);
		break;
	}
	return rc ? rc : 1;
}

int ldif_next(struct ldif_reader *r, struct ldif_record *rec, struct idc_diag *d)
{
	for (;;) {
		int rc = collect_record(r, d);
		if (rc <= 0)
			return rc;
		rc = lex_record(r, d);
		if (rc)
			return rc;
		rc = parse_record(r, rec, d);
		if (rc)
			return rc;
	}
}

/* ==== writer ================================================================= */

static const char b64_alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static size_t b64_len(size_t n)
{
	return (n + 2) / 3 * 4;
}

static void b64_encode(char *dst, const unsigned char *s, size_t n)
{
	size_t i = 0;
	for (; i + 3 <= n; i += 3) {
		uint32_t v = (uint32_t)s[i] << 16 | (uint32_t)s[i + 1] << 8 | s[i + 2];
		*dst++ = b64_alphabet[v >> 18];
		*dst++ = b64_alphabet[(v >> 12) & 63];
		*dst++ = b64_alphabet[(v >> 6) & 63];
		*dst++ = b64_alphabet[v & 63];
	}
	if (i < n) {
		uint32_t v = (uint32_t)s[i] << 16 | (i + 1 < n ? (uint32_t)s[i + 1] << 8 : 0);
		*dst++ = b64_alphabet[v >> 18];
		*dst++ = b64_alphabet[(v >> 12) & 63];
		*dst++ = i + 1 < n ? b64_alphabet[(v >> 6) & 63] : '=';
		*dst++ = '=';
	}
}

/* RFC 2849 SAFE-STRING, also refusing a trailing space (which readers
 * may strip). */
static bool is_safe(const char *p, size_t n)
{
	if (n == 0)
		return true;
	if (p[0] == ' ' || p[0] == ':' || p[0] == '<' || p[n - 1] == ' ')
		return false;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)p[i];
		if (c == 0 || c == '\n' || c == '\r' || c >= 0x80)
			return false;
	}
	return true;
}

static size_t fold_extra(size_t len)
{
	if (len <= LDIF_FOLD_FIRST)
		return 0;
	return 2 * ((len - LDIF_FOLD_FIRST + LDIF_FOLD_NEXT - 1) / LDIF_FOLD_NEXT);
}

/* Fold the line p[0..len) in place into 76 columns then "\n " plus 75,
 * as ldapsearch does; p has room for fold_extra(len) more bytes. Chunks are
 * moved last first, so none is overwritten before it has moved. */
static void fold(char *p, size_t len)
{
	size_t k = fold_extra(len) / 2;
	for (; k > 0; k--) {
		size_t src = LDIF_FOLD_FIRST + (k - 1) * LDIF_FOLD_NEXT;
		size_t n = len - src < LDIF_FOLD_NEXT ? len - src : LDIF_FOLD_NEXT;
		size_t dst = src + 2 * k;
		memmove(p + dst, p + src, n);
		p[dst - 2] = '\n';
		p[dst - 1] = ' ';
	}
}

/* Append "name: value\n" or "name:: base64\n", folded. */
static int put_line(struct idc_buf *out, const char *name, size_t nlen, const char *v, size_t vlen)
{
	bool safe = is_safe(v, vlen);
	size_t body = safe ? vlen : b64_len(vlen);
	size_t len = nlen + 1 + (safe ? 0 : 1) + (vlen ? 1 + body : 0);
	size_t total = len + fold_extra(len) + 1;
	int rc = idc_buf_reserve(out, total);
	if (rc)
		return rc;
	char *p = out->data + out->len, *w = p;
	memcpy(w, name, nlen);
	w += nlen;
	*w++ = ':';
	if (!safe)
		*w++ = ':';
	if (vlen) {
		*w++ = ' ';
		if (safe)
			memcpy(w, v, vlen);
		else
			b64_encode(w, (const unsigned char *)v, vlen);
	}
	if (len > LDIF_FOLD_FIRST)
		fold(p, len);
	p[total - 1] = '\n';
	out->len += total;
	out->data[out->len] = '\0';
	return 0;
}

/* Attribute selection, canonical names prepared once per call. */
#define LDIF_SEL_STACK 16
struct ldif_sel {
	bool all;
	size_t n;
	char (*names)[STORE_ATTR_MAX];
	size_t *lens;
};

static bool sel_match(const struct ldif_sel *s, const struct store_attr *a)
{
	char buf[STORE_ATTR_MAX];
	struct store_val norm = a->norm;
	if (s->all)
		return true;
	if (norm.len == 0) {
		norm.len = store_attr_canon(a->name.ptr, a->name.len, buf);
		norm.ptr = buf;
	}
	/* A request for "cn" also returns "cn;lang-en", as LDAP servers do. */
	for (size_t i = 0; i < s->n; i++) {
		size_t n = s->lens[i];
		if (n <= norm.len && memcmp(norm.ptr, s->names[i], n) == 0 &&
		    (n == norm.len || norm.ptr[n] == ';'))
			return true;
	}
	return false;
}

/* attrs NULL or empty, or holding "*": everything. "1.1" asks for no
 * attribute, so alone it leaves just the dn line. */
static void sel_init(struct ldif_sel *s, const char *const *attrs, size_t nattrs)
{
	s->all = attrs == NULL || nattrs == 0;
	s->n = 0;
	for (size_t i = 0; i < nattrs && !s->all; i++) {
		const char *a = attrs[i];
		if (strcmp(a, "*") == 0) {
			s->all = true;
		} else if (strcmp(a, "1.1") != 0) {
			size_t n = store_attr_canon(a, strlen(a), s->names[s->n]);
			if (n > 0)
				s->lens[s->n++] = n;
		}
	}
}

/* Attributes go out in the order they came in (rank), not the stored
 * order (sorted by name), so output diffs cleanly against the source. */
static size_t next_by_rank(const struct store_entry *e, uint32_t after, bool first)
{
	size_t best = SIZE_MAX;
	for (size_t i = 0; i < e->nattrs; i++) {
		uint32_t r = e->attrs[i].rank;
		if ((first || r > after) && (best == SIZE_MAX || r < e->attrs[best].rank))
			best = i;
	}
	return best;
}

/* Stored order serves when ranks are already increasing, repeat
 * (hand-built entries leave them 0), or there are too many to order. */
static bool stored_order_serves(const struct store_entry *e)
{
	bool sorted = true;
	for (size_t i = 1; i < e->nattrs; i++)
		sorted &= e->attrs[i].rank > e->attrs[i - 1].rank;
	if (sorted || e->nattrs > 256)
		return true;
	for (size_t i = 0; i < e->nattrs; i++)
		for (size_t j = 0; j < i; j++)
			if (e->attrs[i].rank == e->attrs[j].rank)
				return true;
	return false;
}

static int write_attrs(struct idc_buf *out, const struct store_entry *e, const struct ldif_sel *s)
{
	/* Ranks are distinct in stored entries; equal ranks (hand-built
	 * entries) fall back to stored order. */
	bool inorder = stored_order_serves(e);
	size_t i = inorder ? 0 : next_by_rank(e, 0, true);
	for (size_t k = 0; k < e->nattrs && i != SIZE_MAX; k++) {
		const struct store_attr *a = &e->attrs[i];
		i = inorder ? i + 1 : next_by_rank(e, a->rank, false);
		if (i >= e->nattrs)
			i = SIZE_MAX;
		if (!sel_match(s, a))
			continue;
		for (size_t j = 0; j < a->nvals; j++) {
			int rc =
			    put_line(out, a->name.ptr, a->name.len, a->vals[j].ptr, a->vals[j].len);
			if (rc)
				return rc;
		}
	}
	return 0;
}

static void sel_free(struct ldif_sel *s, char (*names)[STORE_ATTR_MAX], size_t *lens)
{
	if (s->names != names)
		free(s->names);
	if (s->lens != lens)
		free(s->lens);
}

int ldif_write_entry(struct idc_buf *out, const struct store_entry *e, const char *const *attrs,
		     size_t nattrs)
{
	char names[LDIF_SEL_STACK][STORE_ATTR_MAX];
	size_t lens[LDIF_SEL_STACK];
	struct ldif_sel s = {.names = names, .lens = lens};
	if (attrs && nattrs > LDIF_SEL_STACK) {
		s.names = malloc(nattrs * sizeof(*s.names));
		s.lens = malloc(nattrs * sizeof(*s.lens));
		if (!s.names || !s.lens) {
			sel_free(&s, names, lens);
			return -ENOMEM;
		}
	}
	sel_init(&s, attrs, nattrs);
	size_t start = out->len;
	int rc = put_line(out, "dn", 2, e->dn.ptr, e->dn.len);
	if (rc == 0)
		rc = write_attrs(out, e, &s);
	if (rc == 0)
		rc = idc_buf_putc(out, '\n');
	/* Never leave half a record behind. */
	if (rc && out->data) {
		out->len = start;
		out->data[start] = '\0';
	}
	sel_free(&s, names, lens);
	return rc;
}
