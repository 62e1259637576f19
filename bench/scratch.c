/* scratch (scratch.h): removing a benchmark's scratch directory. */
#include "scratch.h"

#include <ftw.h>
#include <stdio.h>

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb, (void)flag, (void)ftw;
	remove(path);
	return 0; /* go on: remove what can be removed */
}

void scratch_rm_tree(const char *path)
{
	if (path && path[0])
		nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}
