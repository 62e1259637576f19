/*
 * util sshkey: whether a text is one line of sshd's authorized_keys format
 * ([options] keytype base64-blob [comment]), the one check for every layer
 * that stores or prints SSH public keys. libc only, allocation-free.
 */
#include <errno.h>
#include <string.h>

#include "util/util.h"

/* The key types OpenSSH accepts in authorized_keys (sshkey.c's table),
 * plain; each may also appear as its certificate type. */
static const char *const key_types[] = {
    "ssh-ed25519",
    "ssh-rsa",
    "ssh-dss",
    "ecdsa-sha2-nistp256",
    "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521",
    "sk-ssh-ed25519@openssh.com",
    "sk-ecdsa-sha2-nistp256@openssh.com",
    "ssh-xmss@openssh.com",
};

#define CERT_SUFFIX "-cert-v01@openssh.com"

static bool is_space(char c)
{
	return c == ' ' || c == '\t';
}

static bool plain_type(const char *p, size_t n)
{
	for (size_t i = 0; i < IDC_ARRAY_SIZE(key_types); i++)
		if (strlen(key_types[i]) == n && memcmp(key_types[i], p, n) == 0)
			return true;
	return false;
}

/* Whether p[0..n) names a key type; "x@openssh.com" certificates are
 * "x-cert-v01@openssh.com" without the plain type's own "@openssh.com". */
static bool known_type(const char *p, size_t n)
{
	static const char at[] = "@openssh.com";
	size_t sl = sizeof(CERT_SUFFIX) - 1;
	if (plain_type(p, n))
		return true;
	if (n <= sl || memcmp(p + n - sl, CERT_SUFFIX, sl) != 0)
		return false;
	if (plain_type(p, n - sl))
		return true;
	char full[64];
	if (n - sl + sizeof(at) > sizeof(full))
		return false;
	memcpy(full, p, n - sl);
	memcpy(full + n - sl, at, sizeof(at));
	return plain_type(full, n - sl + sizeof(at) - 1);
}

/* End of the token starting at i (the first blank or n). */
static size_t token_end(const char *s, size_t i, size_t n)
{
	while (i < n && !is_space(s[i]))
		i++;
	return i;
}

/* End of an options field starting at i, as sshd reads one: blanks end it
 * outside double quotes; inside them \" is a quote. n when a quote is
 * left open. */
static size_t options_end(const char *s, size_t i, size_t n, bool *open)
{
	bool quoted = false;
	for (; i < n && (quoted || !is_space(s[i])); i++) {
		if (quoted && s[i] == '\\' && i + 1 < n && s[i + 1] == '"')
			i++;
		else if (s[i] == '"')
			quoted = !quoted;
	}
	*open = quoted;
	return i;
}

/* Whether p[0..n) is base64 (RFC 4648, padded); the first bytes it decodes
 * to go to out[0..cap), *got how many. */
static bool b64_decode_head(const char *p, size_t n, unsigned char *out, size_t cap, size_t *got)
{
	size_t pad = n >= 1 && p[n - 1] == '=' ? (n >= 2 && p[n - 2] == '=' ? 2 : 1) : 0;
	*got = 0;
	if (n == 0 || n % 4 != 0)
		return false;
	unsigned acc = 0;
	for (size_t i = 0; i < n - pad; i++) {
		int v = idc_b64_value((unsigned char)p[i]);
		if (v < 0)
			return false;
		acc = (acc << 6) | (unsigned)v;
		if (i % 4 != 0 && *got < cap)
			out[(*got)++] = (unsigned char)(acc >> (2 * (3 - i % 4)));
	}
	return true;
}

/* Whether the blob p[0..n) is base64 of a key of type t[0..tn): its first
 * field (u32 length, big-endian, then the bytes) names the type, as sshd
 * checks. */
static const char *check_blob(const char *p, size_t n, const char *t, size_t tn)
{
	unsigned char head[4 + 64];
	size_t got;
	if (!b64_decode_head(p, n, head, sizeof(head), &got))
		return "the key data is not base64";
	size_t len = (size_t)head[0] << 24 | (size_t)head[1] << 16 | (size_t)head[2] << 8 | head[3];
	if (got < 4 + tn || len != tn || memcmp(head + 4, t, tn) != 0)
		return "the key data is not a key of the type the line names";
	return NULL;
}

static const char *check_chars(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if ((c < 0x20 && c != '\t') || c == 0x7f)
			return "a line break or another control character";
	}
	return NULL;
}

/* The fields of the trimmed line s[0..n). */
static const char *check_line(const char *s, size_t n)
{
	const char *why = check_chars(s, n);
	if (why)
		return why;
	size_t t = 0, te = token_end(s, 0, n);
	if (!known_type(s, te)) { /* options first */
		bool open;
		size_t oe = options_end(s, 0, n, &open);
		if (open)
			return "an option's quotes are not closed";
		for (t = oe; t < n && is_space(s[t]); t++)
			;
		te = token_end(s, t, n);
		if (!known_type(s + t, te - t))
			return "no known key type (ssh-ed25519, ssh-rsa, ecdsa-sha2-nistp256, ...)";
	}
	size_t b = te;
	while (b < n && is_space(s[b]))
		b++;
	size_t be = token_end(s, b, n);
	if (be == b)
		return "no key data after the key type";
	return check_blob(s + b, be - b, s + t, te - t);
}

int idc_ssh_key_check(const char *s, size_t n, struct idc_ssh_key *out)
{
	size_t a = 0, e = n;
	while (a < e && (is_space(s[a]) || s[a] == '\n' || s[a] == '\r'))
		a++;
	while (e > a && (is_space(s[e - 1]) || s[e - 1] == '\n' || s[e - 1] == '\r'))
		e--;
	out->start = a;
	out->len = e - a;
	out->why = NULL;
	if (e == a)
		out->why = "empty";
	else if (e - a > IDC_SSH_KEY_MAX)
		out->why = "longer than 16384 bytes";
	else if (memchr(s + a, '\0', e - a))
		out->why = "a NUL byte";
	else
		out->why = check_line(s + a, e - a);
	return out->why ? -EINVAL : 0;
}
