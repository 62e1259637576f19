/*
 * engines/ldb, when the build found no libldb: the two ldb columns still
 * appear, marked unavailable with the reason, so a reader sees they were
 * not silently left out.
 */
#include <errno.h>
#include <stdio.h>

#include "engine.h"

static int none_available(char *why, size_t cap)
{
	snprintf(why, cap, "libldb-dev not installed when idcache was built");
	return -ENOENT;
}

const struct eng_ops eng_ldb_tdb = {
    .name = "ldb-tdb", .durability = "-", .access = "-", .available = none_available};
const struct eng_ops eng_ldb_mdb = {
    .name = "ldb-mdb", .durability = "-", .access = "-", .available = none_available};
