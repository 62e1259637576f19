/*
 * nscdmaps: glibc's persistent-database maps for the nscd socket's GETFD
 * replies. Not built yet: there is no map, so glibc reads through the
 * socket.
 */
#include <errno.h>

#include "daemon/daemon.h"

int nscdmaps_fd(struct daemon *dm, int db, uint64_t *size)
{
	(void)dm;
	(void)db;
	*size = 0;
	return -ENOSYS;
}
