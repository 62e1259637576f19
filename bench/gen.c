/* gen: deterministic users and groups (see gen.h). */
#include "gen.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define GEN_NAME_MAX 64
#define GEN_BASE_MAX 1024

/* Streams of randomness per kind of entry, so user i and group i differ. */
enum { TAG_USER = 0x75, TAG_GROUP = 0x67 };

struct gen {
	uint64_t users;
	uint64_t groups;
	uint64_t seed;
	uint64_t big;
	unsigned members;
	char base[GEN_BASE_MAX];
	size_t base_len;
	char rdn_attr[8]; /* "dc" or "o": attribute of the base entry's RDN */
	char rdn_val[GEN_BASE_MAX];
	char domain[GEN_BASE_MAX]; /* mail domain from the dc= parts */
	char prefix[GEN_NAME_MAX];
};

/* ==== randomness ============================================================ */

/* splitmix64: one multiply-xorshift step per output, any seed is fine. */
static uint64_t sm64(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* A stream for (seed, tag, n): mixing twice keeps neighbouring n apart. */
static uint64_t stream(const struct gen *g, uint64_t tag, uint64_t n)
{
	uint64_t s = g->seed ^ (tag << 56);
	s = sm64(&s) ^ n;
	return sm64(&s);
}

/* Uniform-enough value in [0, n) for n far below 2^64 (benchmark data). */
static uint64_t below(uint64_t *s, uint64_t n)
{
	return n ? sm64(s) % n : 0;
}

/* ==== options ================================================================ */

/* Take the base entry's RDN and the mail domain from the base DN. */
static int parse_base(struct gen *g, struct idc_diag *d)
{
	const char *b = g->base;
	const char *eq = strchr(b, '=');
	const char *comma = strchr(b, ',');
	size_t alen = eq ? (size_t)(eq - b) : 0;
	if (!eq || (comma && comma < eq) || alen == 0 || alen >= sizeof(g->rdn_attr))
		return idc_diag_set(d, -EINVAL, "base '%s': must start with dc= or o=", b);
	memcpy(g->rdn_attr, b, alen);
	for (size_t i = 0; i < alen; i++)
		g->rdn_attr[i] = idc_tolower(g->rdn_attr[i]);
	if (strcmp(g->rdn_attr, "dc") != 0 && strcmp(g->rdn_attr, "o") != 0)
		return idc_diag_set(d, -EINVAL, "base '%s': must start with dc= or o=", b);
	size_t vlen = comma ? (size_t)(comma - eq - 1) : strlen(eq + 1);
	if (vlen == 0 || strpbrk(b, "\\+\"") != NULL)
		return idc_diag_set(d, -EINVAL, "base '%s': empty value or escapes", b);
	memcpy(g->rdn_val, eq + 1, vlen);
	g->rdn_val[vlen] = '\0';
	return 0;
}

/* "dc=example,dc=com" -> "example.com"; no dc= parts -> "example.com". */
static void make_domain(struct gen *g)
{
	size_t n = 0;
	for (const char *p = g->base; *p;) {
		const char *end = strchr(p, ',');
		size_t len = end ? (size_t)(end - p) : strlen(p);
		if (len > 3 && idc_memcaseeq(p, 3, "dc=", 3)) {
			if (n)
				g->domain[n++] = '.';
			memcpy(g->domain + n, p + 3, len - 3);
			n += len - 3;
		}
		p += len + (end ? 1 : 0);
	}
	if (n == 0) {
		strcpy(g->domain, "example.com");
		return;
	}
	g->domain[n] = '\0';
}

int gen_new(const struct gen_opts *o, struct gen **out, struct idc_diag *d)
{
	const char *base = o->base ? o->base : "dc=example,dc=com";
	const char *prefix = o->uid_prefix ? o->uid_prefix : "u";
	if (strlen(base) >= GEN_BASE_MAX / 2)
		return idc_diag_set(d, -EINVAL, "base DN longer than %d bytes", GEN_BASE_MAX / 2);
	if (strlen(prefix) >= GEN_NAME_MAX - 24 || strpbrk(prefix, ",=+<>#;\\\" :"))
		return idc_diag_set(d, -EINVAL, "uid prefix '%s': too long or special", prefix);
	if (o->users > 9999999999ULL - GEN_UID_BASE)
		return idc_diag_set(d, -EINVAL, "at most %llu users", 9999999999ULL - GEN_UID_BASE);
	if (o->big_user_groups && o->users == 0)
		return idc_diag_set(d, -EINVAL, "big-user-groups needs at least one user");
	struct gen *g = calloc(1, sizeof(*g));
	if (!g)
		return -ENOMEM;
	g->users = o->users;
	g->groups = o->groups < o->big_user_groups ? o->big_user_groups : o->groups;
	g->seed = o->seed;
	g->big = o->big_user_groups;
	g->members = o->members ? o->members : 10;
	strcpy(g->base, base);
	g->base_len = strlen(base);
	strcpy(g->prefix, prefix);
	int rc = parse_base(g, d);
	if (rc < 0) {
		free(g);
		return rc;
	}
	make_domain(g);
	*out = g;
	return 0;
}

void gen_free(struct gen *g)
{
	free(g);
}

uint64_t gen_nentries(const struct gen *g)
{
	return 3 + g->users + g->groups;
}

uint64_t gen_users(const struct gen *g)
{
	return g->users;
}

uint64_t gen_groups(const struct gen *g)
{
	return g->groups;
}

/* ==== record building ===========================================================
 * Values are appended to r->text; their offsets wait in r->voff until
 * rec_finish turns them into pointers (the buffer may move while growing). */

void gen_rec_free(struct gen_rec *r)
{
	idc_buf_free(&r->text);
	free(r->pairs);
	free(r->voff);
	free(r->picks);
	*r = (struct gen_rec)GEN_REC_INIT;
}

static void rec_start(struct gen_rec *r)
{
	idc_buf_reset(&r->text);
	r->npairs = 0;
}

static int rec_grow_pairs(struct gen_rec *r)
{
	size_t cap = r->pcap ? r->pcap * 2 : 32;
	struct store_pair *p = realloc(r->pairs, cap * sizeof(*p));
	if (!p)
		return -ENOMEM;
	r->pairs = p;
	size_t *v = realloc(r->voff, cap * sizeof(*v));
	if (!v)
		return -ENOMEM;
	r->voff = v;
	r->pcap = cap;
	return 0;
}

/* Open a new value of attribute name (a static string); its bytes follow. */
static int rec_value(struct gen_rec *r, const char *name)
{
	if (r->npairs == r->pcap && rec_grow_pairs(r) < 0)
		return -ENOMEM;
	struct store_pair *p = &r->pairs[r->npairs];
	p->name.ptr = name;
	p->name.len = strlen(name);
	r->voff[r->npairs++] = r->text.len;
	return 0;
}

static int put(struct gen_rec *r, const char *s, size_t n)
{
	return idc_buf_append(&r->text, s, n);
}

static int puts_(struct gen_rec *r, const char *s)
{
	return put(r, s, strlen(s));
}

/* Decimal of v, zero-padded to width (0: no padding). */
static int putu(struct gen_rec *r, uint64_t v, int width)
{
	char tmp[24];
	size_t i = sizeof(tmp); /* digits fill tmp[i..] from the end */
	do {
		tmp[--i] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	while (i > 0 && sizeof(tmp) - i < (size_t)(width > 0 ? width : 0))
		tmp[--i] = '0';
	return put(r, tmp + i, sizeof(tmp) - i);
}

/* A whole value made of one string. */
static int val_str(struct gen_rec *r, const char *name, const char *s)
{
	int rc = rec_value(r, name);
	return rc < 0 ? rc : puts_(r, s);
}

static int val_u(struct gen_rec *r, const char *name, uint64_t v)
{
	int rc = rec_value(r, name);
	return rc < 0 ? rc : putu(r, v, 0);
}

/* The DN goes first in the text as value number "-1": it is kept in voff
 * like a value but not counted in npairs. */
static int rec_finish(struct gen_rec *r, size_t dn_len)
{
	int rc = idc_buf_reserve(&r->text, 0); /* data non-NULL even when empty */
	if (rc < 0)
		return rc;
	r->dn.ptr = r->text.data;
	r->dn.len = dn_len;
	for (size_t i = 0; i < r->npairs; i++) {
		size_t end = i + 1 < r->npairs ? r->voff[i + 1] : r->text.len;
		r->pairs[i].value.ptr = r->text.data + r->voff[i];
		r->pairs[i].value.len = end - r->voff[i];
	}
	return 0;
}

/* ==== names ==================================================================== */

static const char *const syllables[] = {
    "ka",  "lo",  "mi", "ren", "sa",  "tor", "vin", "el",  "da",  "ber", "qui",
    "zan", "ol",  "fa", "ger", "hil", "ja",  "mar", "nor", "pe",  "ros", "ta",
    "ul",  "wen", "xi", "yo",  "bri", "cal", "dor", "fen", "gus", "lin",
};

/* A capitalized name of 2..4 syllables into out (>= 16 bytes). */
static void make_name(uint64_t *s, char *out)
{
	size_t n = 0;
	uint64_t k = 2 + below(s, 3);
	for (uint64_t i = 0; i < k; i++) {
		const char *syl = syllables[below(s, IDC_ARRAY_SIZE(syllables))];
		size_t len = strlen(syl);
		memcpy(out + n, syl, len);
		n += len;
	}
	out[n] = '\0';
	out[0] = (char)(out[0] - 'a' + 'A');
}

size_t gen_user_name(const struct gen *g, uint64_t i, char *out, size_t cap)
{
	size_t plen = strlen(g->prefix);
	if (cap < plen + 11)
		return 0;
	memcpy(out, g->prefix, plen);
	uint64_t v = GEN_UID_BASE + i; /* < 10^10: gen_new checked users */
	for (int k = 9; k >= 0; k--, v /= 10)
		out[plen + (size_t)k] = (char)('0' + v % 10);
	out[plen + 10] = '\0';
	return plen + 10;
}

/* ",ou=people,<base>" after the RDN of a user. */
static int put_user_dn(struct gen_rec *r, const struct gen *g, uint64_t i)
{
	char name[GEN_NAME_MAX];
	size_t n = gen_user_name(g, i, name, sizeof(name));
	int rc = puts_(r, "uid=");
	rc = rc < 0 ? rc : put(r, name, n);
	rc = rc < 0 ? rc : puts_(r, ",ou=people,");
	return rc < 0 ? rc : put(r, g->base, g->base_len);
}

/* ==== entries ==================================================================== */

static int base_entry(const struct gen *g, struct gen_rec *r)
{
	int rc = put(r, g->base, g->base_len);
	bool dc = strcmp(g->rdn_attr, "dc") == 0;
	rc = rc < 0 ? rc : val_str(r, "objectClass", "top");
	if (dc)
		rc = rc < 0 ? rc : val_str(r, "objectClass", "dcObject");
	rc = rc < 0 ? rc : val_str(r, "objectClass", "organization");
	rc = rc < 0 ? rc : val_str(r, "o", g->rdn_val);
	if (dc)
		rc = rc < 0 ? rc : val_str(r, "dc", g->rdn_val);
	return rc < 0 ? rc : rec_finish(r, g->base_len);
}

static int ou_entry(const struct gen *g, const char *ou, struct gen_rec *r)
{
	int rc = puts_(r, "ou=");
	rc = rc < 0 ? rc : puts_(r, ou);
	rc = rc < 0 ? rc : puts_(r, ",");
	rc = rc < 0 ? rc : put(r, g->base, g->base_len);
	size_t dn_len = r->text.len;
	rc = rc < 0 ? rc : val_str(r, "objectClass", "top");
	rc = rc < 0 ? rc : val_str(r, "objectClass", "organizationalUnit");
	rc = rc < 0 ? rc : val_str(r, "ou", ou);
	return rc < 0 ? rc : rec_finish(r, dn_len);
}

/* The posixAccount part of user i: numbers, home, shell. */
static int user_posix(const struct gen *g, uint64_t i, const char *name, uint64_t *s,
		      struct gen_rec *r)
{
	uint64_t gid = g->groups ? GEN_GID_BASE + below(s, g->groups) : 100;
	int rc = val_u(r, "uidNumber", GEN_UID_BASE + i);
	rc = rc < 0 ? rc : val_u(r, "gidNumber", gid);
	rc = rc < 0 ? rc : rec_value(r, "homeDirectory");
	rc = rc < 0 ? rc : puts_(r, "/home/");
	rc = rc < 0 ? rc : puts_(r, name);
	return rc < 0 ? rc : val_str(r, "loginShell", "/bin/bash");
}

static const char *const user_classes[] = {
    "top", "person", "organizationalPerson", "inetOrgPerson", "posixAccount",
};

int gen_user(const struct gen *g, uint64_t i, struct gen_rec *r)
{
	if (i >= g->users)
		return -ERANGE;
	uint64_t s = stream(g, TAG_USER, i);
	char name[GEN_NAME_MAX], given[16], sn[16], cn[40];
	gen_user_name(g, i, name, sizeof(name));
	make_name(&s, given);
	make_name(&s, sn);
	snprintf(cn, sizeof(cn), "%s %s", given, sn);
	rec_start(r);
	int rc = put_user_dn(r, g, i);
	size_t dn_len = r->text.len;
	for (size_t k = 0; rc == 0 && k < IDC_ARRAY_SIZE(user_classes); k++)
		rc = val_str(r, "objectClass", user_classes[k]);
	rc = rc < 0 ? rc : val_str(r, "uid", name);
	rc = rc < 0 ? rc : val_str(r, "cn", cn);
	rc = rc < 0 ? rc : val_str(r, "sn", sn);
	rc = rc < 0 ? rc : val_str(r, "givenName", given);
	rc = rc < 0 ? rc : user_posix(g, i, name, &s, r);
	rc = rc < 0 ? rc : val_str(r, "gecos", cn);
	rc = rc < 0 ? rc : rec_value(r, "mail");
	rc = rc < 0 ? rc : puts_(r, name);
	rc = rc < 0 ? rc : puts_(r, "@");
	rc = rc < 0 ? rc : puts_(r, g->domain);
	return rc < 0 ? rc : rec_finish(r, dn_len);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return (x > y) - (x < y); /* not x - y: wrong sign past 2^31 */
}

/* Members of group k into r->picks, sorted and distinct; returns how many
 * (< 0 on ENOMEM). Size is uniform in [1, 2*members-1]: mean `members`. */
static long pick_members(const struct gen *g, uint64_t k, struct gen_rec *r)
{
	if (g->users == 0)
		return 0;
	uint64_t s = stream(g, TAG_GROUP, k);
	uint64_t m = 1 + below(&s, 2 * (uint64_t)g->members - 1);
	if (m > g->users)
		m = g->users;
	if (m + 1 > r->kcap) {
		uint64_t *p = realloc(r->picks, (m + 1) * sizeof(*p));
		if (!p)
			return -ENOMEM;
		r->picks = p;
		r->kcap = m + 1;
	}
	for (uint64_t j = 0; j < m; j++)
		r->picks[j] = below(&s, g->users);
	if (k < g->big)
		r->picks[m++] = 0; /* the big user; sorted to the front below */
	qsort(r->picks, m, sizeof(*r->picks), cmp_u64);
	size_t n = 0;
	for (uint64_t j = 0; j < m; j++)
		if (n == 0 || r->picks[n - 1] != r->picks[j])
			r->picks[n++] = r->picks[j];
	return (long)n;
}

int gen_group(const struct gen *g, uint64_t k, struct gen_rec *r)
{
	if (k >= g->groups)
		return -ERANGE;
	long n = pick_members(g, k, r);
	if (n < 0)
		return (int)n;
	rec_start(r);
	int rc = puts_(r, "cn=group");
	rc = rc < 0 ? rc : putu(r, k, 0);
	rc = rc < 0 ? rc : puts_(r, ",ou=groups,");
	rc = rc < 0 ? rc : put(r, g->base, g->base_len);
	size_t dn_len = r->text.len;
	rc = rc < 0 ? rc : val_str(r, "objectClass", "top");
	rc = rc < 0 ? rc : val_str(r, "objectClass", "posixGroup");
	rc = rc < 0 ? rc : val_str(r, "objectClass", "groupOfNames");
	rc = rc < 0 ? rc : rec_value(r, "cn");
	rc = rc < 0 ? rc : puts_(r, "group");
	rc = rc < 0 ? rc : putu(r, k, 0);
	rc = rc < 0 ? rc : val_u(r, "gidNumber", GEN_GID_BASE + k);
	for (long j = 0; rc == 0 && j < n; j++) {
		char name[GEN_NAME_MAX];
		size_t len = gen_user_name(g, r->picks[j], name, sizeof(name));
		rc = rec_value(r, "memberUid");
		rc = rc < 0 ? rc : put(r, name, len);
	}
	for (long j = 0; rc == 0 && j < n; j++) {
		rc = rec_value(r, "member");
		rc = rc < 0 ? rc : put_user_dn(r, g, r->picks[j]);
	}
	return rc < 0 ? rc : rec_finish(r, dn_len);
}

int gen_entry(const struct gen *g, uint64_t n, struct gen_rec *r)
{
	if (n == 0) {
		rec_start(r);
		return base_entry(g, r);
	}
	if (n == 1 || n == 2) {
		rec_start(r);
		return ou_entry(g, n == 1 ? "people" : "groups", r);
	}
	n -= 3;
	if (n < g->users)
		return gen_user(g, n, r);
	return gen_group(g, n - g->users, r);
}

/* ==== LDIF ====================================================================== */

int gen_rec_ldif(const struct gen_rec *r, struct idc_buf *out)
{
	int rc = idc_buf_append(out, "dn: ", 4);
	rc = rc < 0 ? rc : idc_buf_append(out, r->dn.ptr, r->dn.len);
	rc = rc < 0 ? rc : idc_buf_putc(out, '\n');
	for (size_t i = 0; rc == 0 && i < r->npairs; i++) {
		const struct store_pair *p = &r->pairs[i];
		rc = idc_buf_reserve(out, p->name.len + p->value.len + 3);
		if (rc < 0)
			break;
		/* reserve made room: copy without a check per piece */
		char *w = out->data + out->len;
		memcpy(w, p->name.ptr, p->name.len);
		w += p->name.len;
		*w++ = ':';
		*w++ = ' ';
		memcpy(w, p->value.ptr, p->value.len);
		w += p->value.len;
		*w++ = '\n';
		out->len = (size_t)(w - out->data);
		out->data[out->len] = '\0';
	}
	return rc < 0 ? rc : idc_buf_putc(out, '\n');
}

static int flush(struct idc_buf *b, FILE *f, struct idc_diag *d)
{
	if (b->len && fwrite(b->data, 1, b->len, f) != b->len)
		return idc_diag_set(d, -EIO, "write: %s", strerror(errno));
	idc_buf_reset(b);
	return 0;
}

int gen_write_ldif(const struct gen *g, FILE *f, struct idc_diag *d)
{
	struct idc_buf b = IDC_BUF_INIT;
	struct gen_rec r = GEN_REC_INIT;
	int rc = idc_buf_append(&b, "version: 1\n\n", 12);
	uint64_t n = gen_nentries(g);
	for (uint64_t i = 0; rc == 0 && i < n; i++) {
		rc = gen_entry(g, i, &r);
		rc = rc < 0 ? rc : gen_rec_ldif(&r, &b);
		if (rc == 0 && b.len >= (1u << 20))
			rc = flush(&b, f, d);
	}
	rc = rc < 0 ? rc : flush(&b, f, d);
	if (rc == 0 && fflush(f) != 0)
		rc = idc_diag_set(d, -EIO, "write: %s", strerror(errno));
	gen_rec_free(&r);
	idc_buf_free(&b);
	return rc;
}
