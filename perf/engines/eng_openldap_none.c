/* engines/openldap, when the build found no libldap: listed as unavailable. */
#include <errno.h>
#include <stdio.h>

#include "engine.h"

static int none_available(char *why, size_t cap)
{
	snprintf(why, cap, "libldap-dev not installed when idcache was built");
	return -ENOENT;
}

const struct eng_ops eng_openldap = {
    .name = "openldap", .durability = "-", .access = "-", .available = none_available};
