/*
 * prep.c: RFC 4518 string preparation for the caseIgnore and caseExact
 * matching rules, on libunistring.
 *
 * The steps, in the RFC's order:
 *  1. Transcode: values are UTF-8 already; u8_check validates them.
 *  2. Map: the code points RFC 4518 2.2 lists as mapped to nothing (soft
 *     hyphen, joiners, variation selectors, controls without a meaning in
 *     text, U+FFFC, ZERO WIDTH SPACE) go; tab, line breaks and every
 *     separator (Zs, Zl, Zp) become SPACE. caseIgnore also case folds.
 *  3. Normalize: NFKC. Case folding and NFKC are one libunistring call
 *     (u8_casefold with UNINORM_NFKC: NFKC(fold(NFKD(s))), the Unicode
 *     "compatibility caseless" form that RFC 3454's table B.2 was built
 *     for), so ß matches "ss", the ligature ﬁ matches "fi", full-width
 *     letters match ASCII, and precomposed é matches e + U+0301.
 *  4. Prohibit: unassigned and private-use code points, noncharacters and
 *     U+FFFD.
 *  5. Insignificant space: leading and trailing spaces dropped, each inner
 *     run one SPACE (a SPACE followed by a combining mark is a character,
 *     not a space). That is the RFC's rule in a shorter spelling (it keeps
 *     one space at each end and two inside): the two compare the same.
 *     Substring parts keep one space where they touch the rest of the
 *     value (store_int.h, enum store_prep_part).
 *
 * A value that is not UTF-8, or holds a prohibited code point, cannot be
 * prepared. RFC 4518 would make every comparison with it Undefined; here it
 * compares as its bytes with ASCII letters folded (the rule before Unicode
 * came in), so a directory or a passwd file holding Latin-1 text still has
 * its entries stored and found by the exact same bytes. Such a form never
 * equals a prepared one: it is not UTF-8, or it holds a code point that
 * preparation never outputs.
 *
 * Speed: text of printable ASCII (0x20..0x7e) is prepared by a byte loop:
 * there NFKC and case folding are the identity and ASCII lower case.
 * libunistring runs only for text with other bytes.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unicase.h>
#include <unictype.h>
#include <uninorm.h>
#include <unistr.h>

#include "store_int.h"

/* ==== insignificant space ================================================= */

/* What squeeze_to does besides the spaces. */
enum squeeze_mode {
	SQ_ASCII,   /* printable ASCII only: give up on any other byte */
	SQ_UNICODE, /* prepared UTF-8: a SPACE before a combining mark stays */
	SQ_BYTES,   /* text that cannot be prepared: bytes as they are */
};

#define SQ_GAVE_UP SIZE_MAX

/* Whether the SPACE at s[i] is followed by a combining mark. */
static bool space_marked(const uint8_t *s, size_t n, size_t i)
{
	if (i + 1 >= n || s[i + 1] < 0x80)
		return false;
	ucs4_t c;
	u8_mbtouc(&c, s + i + 1, n - i - 1);
	return uc_is_general_category(c, UC_CATEGORY_M);
}

#define ONES UINT64_C(0x0101010101010101)
#define HIGH UINT64_C(0x8080808080808080)

/* Whether all 8 bytes of x are in 0x21..0x7e (printable ASCII but space):
 * each byte is below 0x80, so adding to it carries into no other. */
static inline bool word_plain(uint64_t x)
{
	return (x & HIGH) == 0 && ((x + (0x80 - 0x21) * ONES) & HIGH) == HIGH &&
	       ((x + ONES) & HIGH) == 0;
}

/* x (bytes of word_plain) with ASCII capitals lowercased. */
static inline uint64_t word_lower(uint64_t x)
{
	uint64_t ge_a = (x + (0x80 - 'A') * ONES) & HIGH;
	uint64_t gt_z = (x + (0x80 - 'Z' - 1) * ONES) & HIGH;
	return x | (ge_a & ~gt_z) >> 2; /* 0x80 >> 2 is the case bit */
}

/* s[0..n) with the space handling of part into w (room for n + 1 bytes,
 * NUL-terminated), ASCII letters lowercased when lower. The length
 * written, or SQ_GAVE_UP in SQ_ASCII mode at a byte outside 0x20..0x7e
 * (checked on the way: one pass over the common case). Always inlined, so
 * each caller's constant mode and case give a loop of their own. */
static inline __attribute__((always_inline)) size_t squeeze_to(const char *s, size_t n,
							       enum store_prep_part part,
							       bool lower, enum squeeze_mode mode,
							       char *w)
{
	bool trim_lead = part == STORE_PREP_VALUE || part == STORE_PREP_INITIAL;
	bool trim_trail = part == STORE_PREP_VALUE || part == STORE_PREP_FINAL;
	size_t k = 0, i = 0;
	bool pend = false;
	/* The run before the first space or other byte (most values are all
	 * of one such run): no space is pending, so k keeps step with i. */
	if (mode != SQ_UNICODE) {
		/* eight bytes at a time while all are of the run */
		for (; i + 8 <= n; i += 8, k += 8) {
			uint64_t x;
			memcpy(&x, s + i, 8);
			if (!word_plain(x))
				break;
			x = lower ? word_lower(x) : x;
			memcpy(w + k, &x, 8);
		}
		for (; i < n && (unsigned char)(s[i] - 0x21) <= 0x5d; i++, k++)
			w[k] = lower ? idc_tolower(s[i]) : s[i];
	}
	for (; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (mode == SQ_ASCII && (unsigned char)(c - 0x20) > 0x5e)
			return SQ_GAVE_UP;
		if (c == ' ' && !(mode == SQ_UNICODE && space_marked((const uint8_t *)s, n, i))) {
			pend = true;
			continue;
		}
		if (pend && (k > 0 || !trim_lead))
			w[k++] = ' ';
		pend = false;
		w[k++] = lower ? idc_tolower((char)c) : (char)c;
	}
	if (pend && !trim_trail && (k > 0 || !trim_lead))
		w[k++] = ' ';
	w[k] = '\0';
	return k;
}

/* squeeze_to appending to out: 0, 1 when SQ_ASCII gave up (out as it
 * was), or -ENOMEM. */
static int squeeze(const char *s, size_t n, enum store_prep_part part, bool lower,
		   enum squeeze_mode mode, struct idc_buf *out)
{
	/* room checked here first: a call per value showed up */
	int rc = out->cap - out->len > n + 1 ? 0 : idc_buf_reserve(out, n + 1);
	if (rc)
		return rc;
	char *w = out->data + out->len;
	size_t k = mode == SQ_ASCII     ? (lower ? squeeze_to(s, n, part, true, SQ_ASCII, w)
						 : squeeze_to(s, n, part, false, SQ_ASCII, w))
		   : mode == SQ_UNICODE ? squeeze_to(s, n, part, false, SQ_UNICODE, w)
					: squeeze_to(s, n, part, lower, SQ_BYTES, w);
	if (k == SQ_GAVE_UP) {
		out->data[out->len] = '\0';
		return 1;
	}
	out->len += k;
	return 0;
}

/* ==== map and prohibit ===================================================== */

enum { MAP_KEEP, MAP_NOTHING, MAP_SPACE };

/* RFC 4518 2.2 for one code point. */
static int map_class(ucs4_t c)
{
	if (c == 0x09 || c == 0x0a || c == 0x0b || c == 0x0c || c == 0x0d || c == 0x85)
		return MAP_SPACE;
	if (c < 0x20 || (c >= 0x7f && c <= 0x9f))
		return MAP_NOTHING;
	if (c < 0xa0)
		return MAP_KEEP;
	if (c == 0xad || c == 0x34f || c == 0x6dd || c == 0x70f || c == 0x180e || c == 0x1806 ||
	    (c >= 0x180b && c <= 0x180d) || c == 0x200b || (c >= 0x200c && c <= 0x200f) ||
	    (c >= 0x202a && c <= 0x202e) || (c >= 0x2060 && c <= 0x2063) ||
	    (c >= 0x206a && c <= 0x206f) || (c >= 0xfe00 && c <= 0xfe0f) || c == 0xfeff ||
	    (c >= 0xfff9 && c <= 0xfffc) || (c >= 0x1d173 && c <= 0x1d17a) || c == 0xe0001 ||
	    (c >= 0xe0020 && c <= 0xe007f))
		return MAP_NOTHING;
	if (uc_is_general_category(c, UC_CATEGORY_Z))
		return MAP_SPACE;
	return MAP_KEEP;
}

static bool prohibited(ucs4_t c)
{
	return c == 0xfffd || (c >= 0xfdd0 && c <= 0xfdef) || (c & 0xfffe) == 0xfffe ||
	       uc_is_general_category(c, UC_CATEGORY_Cn) ||
	       uc_is_general_category(c, UC_CATEGORY_Co);
}

/* The mapped text of valid UTF-8 s[0..n) into m (at most n bytes). */
static size_t map_text(const uint8_t *s, size_t n, uint8_t *m)
{
	size_t k = 0;
	for (size_t i = 0; i < n;) {
		ucs4_t c;
		int l = u8_mbtouc(&c, s + i, n - i);
		int cls = map_class(c);
		if (cls == MAP_SPACE) {
			m[k++] = ' ';
		} else if (cls == MAP_KEEP) {
			memcpy(m + k, s + i, (size_t)l);
			k += (size_t)l;
		}
		i += (size_t)l;
	}
	return k;
}

static bool any_prohibited(const uint8_t *s, size_t n)
{
	for (size_t i = 0; i < n;) {
		ucs4_t c;
		i += (size_t)u8_mbtouc(&c, s + i, n - i);
		if (prohibited(c))
			return true;
	}
	return false;
}

/* ==== preparation =========================================================== */

#define PREP_STACK 512 /* bytes prepared without malloc */

/* Case fold (fold) and NFKC-normalize m[0..n) into buf or a new allocation;
 * NULL with errno on failure. */
static uint8_t *fold_nfkc(const uint8_t *m, size_t n, bool fold, uint8_t *buf, size_t *len)
{
	*len = PREP_STACK;
	if (fold)
		return u8_casefold(m, n, NULL, UNINORM_NFKC, buf, len);
	return u8_normalize(UNINORM_NFKC, m, n, buf, len);
}

/* Steps 2-5 for valid UTF-8 v[0..len) with a byte outside printable ASCII.
 * 1 when a prohibited code point turns up (nothing appended). */
static int prep_unicode(const char *v, size_t len, bool fold, enum store_prep_part part,
			struct idc_buf *out)
{
	uint8_t mbuf[PREP_STACK], fbuf[PREP_STACK];
	uint8_t *m = len <= sizeof(mbuf) ? mbuf : malloc(len);
	if (!m)
		return -ENOMEM;
	size_t mlen = map_text((const uint8_t *)v, len, m), flen = 0;
	uint8_t *f = mlen ? fold_nfkc(m, mlen, fold, fbuf, &flen) : fbuf;
	int rc = f ? 0 : -ENOMEM; /* input is valid UTF-8: only memory fails */
	if (!rc && any_prohibited(f, flen))
		rc = 1;
	if (!rc)
		rc = squeeze((const char *)f, flen, part, false, SQ_UNICODE, out);
	if (f && f != fbuf)
		free(f);
	if (m != mbuf)
		free(m);
	return rc;
}

int store_prep(const char *v, size_t len, bool fold, enum store_prep_part part, struct idc_buf *out)
{
	int rc = squeeze(v, len, part, fold, SQ_ASCII, out);
	if (rc <= 0)
		return rc;
	if (u8_check((const uint8_t *)v, len) == NULL) {
		rc = prep_unicode(v, len, fold, part, out);
		if (rc <= 0)
			return rc;
	}
	return squeeze(v, len, part, fold, SQ_BYTES, out); /* see the top of the file */
}

/* ==== case ignored code point by code point ================================== */

/* v lowercased by Unicode's lowercase mapping (one code point at a time in
 * effect: ß stays ß), then NFKC, insignificant spaces squeezed; nothing is
 * mapped away. Text that is not UTF-8: bytes with ASCII letters folded. */
int store_text_lower(const char *v, size_t len, struct idc_buf *out)
{
	int rc = squeeze(v, len, STORE_PREP_VALUE, true, SQ_ASCII, out);
	if (rc <= 0)
		return rc;
	if (u8_check((const uint8_t *)v, len) != NULL)
		return squeeze(v, len, STORE_PREP_VALUE, true, SQ_BYTES, out);
	uint8_t buf[PREP_STACK];
	size_t n = sizeof(buf);
	uint8_t *f = u8_tolower((const uint8_t *)v, len, NULL, UNINORM_NFKC, buf, &n);
	if (!f)
		return -ENOMEM;
	rc = squeeze((const char *)f, n, STORE_PREP_VALUE, false, SQ_UNICODE, out);
	if (f != buf)
		free(f);
	return rc;
}

bool store_text_same_lower(const char *a, size_t alen, const char *b, size_t blen)
{
	if (alen == blen && memcmp(a, b, alen) == 0)
		return true;
	struct idc_buf fa = IDC_BUF_INIT, fb = IDC_BUF_INIT;
	bool same = store_text_lower(a, alen, &fa) == 0 && store_text_lower(b, blen, &fb) == 0 &&
		    fa.len == fb.len && memcmp(fa.data, fb.data, fa.len) == 0;
	idc_buf_free(&fa);
	idc_buf_free(&fb);
	return same;
}

int store_normalize_text(bool fold, const char *v, size_t len, char *out, size_t cap,
			 size_t *outlen)
{
	size_t k = len < cap ? squeeze_to(v, len, STORE_PREP_VALUE, fold, SQ_ASCII, out) : 0;
	if (len < cap && k != SQ_GAVE_UP) {
		*outlen = k;
		return 0;
	}
	struct idc_buf b = IDC_BUF_INIT;
	int rc = store_prep(v, len, fold, STORE_PREP_VALUE, &b);
	if (!rc && b.len >= cap)
		rc = -E2BIG;
	if (!rc) {
		memcpy(out, b.data, b.len + 1);
		*outlen = b.len;
	}
	idc_buf_free(&b);
	return rc;
}
