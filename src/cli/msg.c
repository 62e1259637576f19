/* cli messages (msg.h): the one voice of idcache and idcache-perf. */
#include "cli/msg.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cli_err(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("idcache: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	return CLI_FAIL;
}

int cli_fail(int rc, const struct idc_diag *d, const char *fmt, ...)
{
	struct idc_diag full = {{0}};
	if (d)
		memcpy(full.msg, d->msg, sizeof(full.msg));
	idc_diag_complete(&full, rc);
	va_list ap;
	va_start(ap, fmt);
	fputs("idcache: ", stderr);
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, ": %s\n", full.msg);
	va_end(ap);
	return CLI_FAIL;
}

int cli_usage(const char *usage_line, const char *help_cmd)
{
	fprintf(stderr, "usage: %s\nTry '%s --help' for more information.\n", usage_line, help_cmd);
	return CLI_USAGE;
}

int cli_parse_size(const char *s, size_t *out)
{
	if (!s || *s < '0' || *s > '9')
		return -EINVAL;
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || *end || v > SIZE_MAX)
		return -EINVAL;
	*out = (size_t)v;
	return 0;
}
