/*
 * files provider: passwd and group lines, and reading a whole file. The
 * line rules are glibc's (see files.h); this is our own code written to
 * behave the same, checked against fgetpwent/fgetgrent by the tests.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "files_int.h"

/* ==== one line ================================================================== */

/* isspace() in the C locale, whatever locale the process runs in. */
static bool is_space(char c)
{
	return c == ' ' || (c >= '\t' && c <= '\r');
}

/* What strtoul(p, &end, 10) does, then glibc's refusal of values above 32
 * bits. Returns the end, or NULL when glibc would refuse the number. */
static char *parse_u32(char *p, uint32_t *out)
{
	while (is_space(*p))
		p++;
	bool neg = *p == '-';
	if (*p == '+' || *p == '-')
		p++;
	if (*p < '0' || *p > '9')
		return NULL; /* no digits: strtoul converts nothing */
	uint64_t v = 0;
	bool over = false;
	for (; *p >= '0' && *p <= '9'; p++) {
		unsigned dig = (unsigned)(*p - '0');
		if (v > (UINT64_MAX - dig) / 10)
			over = true; /* strtoul: ULONG_MAX, which is refused below */
		else
			v = v * 10 + dig;
	}
	if (over)
		return NULL;
	if (neg)
		v = 0 - v; /* strtoul negates in unsigned arithmetic */
	if (v > UINT32_MAX)
		return NULL;
	*out = (uint32_t)v;
	return p;
}

/* A text field up to the next ':' (replaced by NUL) or the end. */
static char *text_field(char **p)
{
	char *s = *p, *c = strchr(s, ':');
	if (c) {
		*c = '\0';
		*p = c + 1;
	} else {
		*p = s + strlen(s);
	}
	return s;
}

/* A number field: must be followed by ':' or the end of the line. */
static bool int_field(char **p, uint32_t *v)
{
	char *e = parse_u32(*p, v);
	if (!e)
		return false;
	if (*e == ':')
		e++;
	else if (*e != '\0')
		return false;
	*p = e;
	return true;
}

static enum files_line bad(const char **why, const char *text)
{
	*why = text;
	return FILES_LINE_BAD;
}

/* Checks common to both kinds; *line moves past leading white space. */
static enum files_line line_start(char **line, size_t len, const char **why)
{
	char *p = *line, *end = p + len;
	while (p < end && is_space(*p))
		p++;
	if (p < end && *p == '#')
		return FILES_LINE_NONE;
	/* glibc would stop at a NUL (and skip a line starting with one); the
	 * bytes after it would silently vanish, so we refuse the line. */
	if (memchr(*line, '\0', len))
		return bad(why, "NUL byte in line");
	if (p == end || *p == '+' || *p == '-')
		return FILES_LINE_NONE; /* blank, or NIS compat */
	*line = p;
	return FILES_LINE_RECORD;
}

enum files_line files_parse_pwline(char *line, size_t len, struct files_pwent *out,
				   const char **why)
{
	enum files_line r = line_start(&line, len, why);
	if (r != FILES_LINE_RECORD)
		return r;
	char *p = line;
	out->name = text_field(&p);
	out->passwd = text_field(&p);
	if (!int_field(&p, &out->uid))
		return bad(why, "missing or invalid uid");
	if (!int_field(&p, &out->gid))
		return bad(why, "missing or invalid gid");
	out->gecos = text_field(&p);
	out->dir = text_field(&p);
	out->shell = p; /* the rest, colons included, as glibc has it */
	return FILES_LINE_RECORD;
}

enum files_line files_parse_grline(char *line, size_t len, struct files_grent *out,
				   const char **why)
{
	enum files_line r = line_start(&line, len, why);
	if (r != FILES_LINE_RECORD)
		return r;
	char *p = line;
	out->name = text_field(&p);
	out->passwd = text_field(&p);
	if (!int_field(&p, &out->gid))
		return bad(why, "missing or invalid gid");
	out->members = p;
	return FILES_LINE_RECORD;
}

const char *files_next_member(char **cursor)
{
	char *p = *cursor;
	for (;;) {
		while (is_space(*p))
			p++;
		char *elt = p;
		while (*p != '\0' && *p != ',')
			p++;
		char *end = p;
		bool more = *p == ',';
		if (more)
			*p++ = '\0';
		if (end > elt || !more) {
			*cursor = p;
			return end > elt ? elt : NULL;
		}
	}
}

/* ==== reading a file ================================================================ */

int files_read(const char *path, char **data, size_t *len)
{
	/* O_NONBLOCK: opening a FIFO put in the file's place would otherwise
	 * wait for a writer, and with it the daemon's loop; fstat refuses it. */
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0)
		return -errno;
	struct stat st;
	int rc = fstat(fd, &st) < 0 ? -errno : 0;
	if (rc == 0 && !S_ISREG(st.st_mode))
		rc = -EINVAL;
	if (rc == 0 && (uint64_t)st.st_size > FILES_SIZE_MAX)
		rc = -EFBIG;
	/* One byte more than fstat said, so a file that grew meanwhile is not
	 * mistaken for complete at exactly the old size; its growth also
	 * raises a watch event and so another refresh. */
	size_t cap = rc == 0 ? (size_t)st.st_size + 1 : 0;
	char *buf = rc == 0 ? malloc(cap + 1) : NULL;
	if (rc == 0 && !buf)
		rc = -ENOMEM;
	size_t got = 0;
	if (rc == 0)
		rc = idc_read_full(fd, buf, cap, &got);
	close(fd);
	if (rc) {
		free(buf);
		return rc;
	}
	buf[got] = '\0';
	*data = buf;
	*len = got;
	return 0;
}
