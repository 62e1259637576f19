/*
 * Fuzz target for the shared-memory cache reader: the input is a map.
 * Byte 0 picks the map kind, byte 1 a buffer size; the rest is written to a
 * sealed memfd (its beat set to now, as a live daemon keeps it, when the
 * input is long enough to hold one) that a fresh reader maps and looks up
 * names and ids in (those the corpus files hold, and a few more), with
 * every API of that kind. Nothing
 * may crash, hang, read out of bounds or hand back a record that breaks the
 * API's promises (a hit is packed inside the buffer and is the one asked).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "mc/mc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static _Alignas(16) char buf[1 << 16];

static const char *const names[] = {"alice", "bob", "root", "u1", "staff", "wheel", "x"};

static bool inside(const char *p)
{
	return p >= buf && p < buf + sizeof(buf);
}

static void try_passwd(struct mc_reader *r, size_t buflen)
{
	struct passwd pw;
	for (size_t i = 0; i < IDC_ARRAY_SIZE(names); i++) {
		if (mc_getpwnam(r, names[i], strlen(names[i]), &pw, buf, buflen) == 0 &&
		    (strcmp(pw.pw_name, names[i]) != 0 || !inside(pw.pw_shell)))
			__builtin_trap();
		if (mc_getpwuid(r, (uint32_t)i, &pw, buf, buflen) == 0 &&
		    (pw.pw_uid != i || !inside(pw.pw_shell)))
			__builtin_trap();
	}
}

static void try_group(struct mc_reader *r, size_t buflen)
{
	struct group gr;
	for (size_t i = 0; i < IDC_ARRAY_SIZE(names); i++) {
		if (mc_getgrnam(r, names[i], strlen(names[i]), &gr, buf, buflen) == 0 &&
		    strcmp(gr.gr_name, names[i]) != 0)
			__builtin_trap();
		if (mc_getgrgid(r, (uint32_t)i, &gr, buf, buflen) == 0) {
			size_t k = 0;
			while (gr.gr_mem[k] != NULL)
				if (!inside(gr.gr_mem[k++]))
					__builtin_trap();
			if (gr.gr_gid != i)
				__builtin_trap();
		}
	}
}

static void try_initgroups(struct mc_reader *r, size_t cap)
{
	uint32_t gids[256];
	if (cap > IDC_ARRAY_SIZE(gids))
		cap = IDC_ARRAY_SIZE(gids);
	for (size_t i = 0; i < IDC_ARRAY_SIZE(names); i++) {
		size_t n = 0;
		int rc = mc_initgroups(r, names[i], strlen(names[i]), gids, cap, &n);
		/* What the reader promises: a hit fits, a short array is told
		 * how many there are. The gids come in stored order, which a
		 * hostile map may make anything (the daemon's are each once). */
		if ((rc == 0 && n > cap) || (rc == -ERANGE && n <= cap))
			__builtin_trap();
	}
}

/* The reader's source: a descriptor of the input's memfd. */
static int source(void *ctx, uint32_t kind)
{
	(void)kind;
	int fd = fcntl(*(const int *)ctx, F_DUPFD_CLOEXEC, 0);
	return fd < 0 ? -errno : fd;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 2)
		return 0;
	uint32_t kind = 1 + data[0] % 3;
	size_t buflen = data[1] == 255 ? sizeof(buf) : (size_t)data[1] * 16;
	int fd = memfd_create("fuzz_mc", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0 || write(fd, data + 2, size - 2) != (ssize_t)(size - 2))
		abort();
	size_t beat = offsetof(struct mc_header, beat);
	uint32_t now = mc_clock_ms(NULL);
	if (size - 2 >= beat + sizeof(now) &&
	    pwrite(fd, &now, sizeof(now), (off_t)beat) != (ssize_t)sizeof(now))
		abort();
	if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) < 0)
		abort();
	struct mc_reader r;
	if (mc_reader_init(&r, kind, source, &fd) < 0)
		abort();
	if (kind == MC_PASSWD)
		try_passwd(&r, buflen);
	else if (kind == MC_GROUP)
		try_group(&r, buflen);
	else
		try_initgroups(&r, data[1]);
	mc_reader_close(&r);
	close(fd);
	return 0;
}
