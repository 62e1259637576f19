/* faultinj: an LD_PRELOAD shim for the fault-injection tests
 * (tests/integration/test_hard_faults.py). It makes chosen calls of the
 * allocator and of chosen system calls fail with a chosen errno, so that
 * the error paths the daemon, the NSS module and the admin tool take on a
 * full memory or a failing kernel are run for real.
 *
 * It is a test helper, never installed; everything it does is chosen by
 * the environment of the process it is loaded into:
 *   FAULTINJ_CTL    a file of at least 64 bytes, mapped shared: the first
 *                   u32 arms (non-zero) or disarms (zero) the injection,
 *                   the u64 at 8 counts the calls seen while armed, the
 *                   u64 at 16 the calls failed, the u64 at 24 the calls
 *                   passed after a failure (the test reads them back, so
 *                   a sweep that injected nothing cannot pass unnoticed).
 *                   Without it the shim only passes calls through.
 *   FAULTINJ_PROG   only a process of this short name is affected (the
 *                   namespace wrappers that exec it carry the shim too).
 *   FAULTINJ_FUNCS  comma-separated names of the calls counted and failed:
 *                   malloc calloc realloc strdup strndup read write writev
 *                   pread pwrite send recv sendmsg recvmsg mmap open openat
 *                   fdatasync fsync accept4 poll epoll_wait socket connect.
 *   FAULTINJ_PATH   only calls on a descriptor whose file's path holds this
 *                   (read write writev pread pwrite fdatasync fsync; e.g.
 *                   cache.mdb/data.mdb) are counted and failed.
 *   FAULTINJ_OFF_BELOW  only pread and pwrite at offsets below this (e.g.
 *                   8192: the meta pages of an LMDB file of 4 KiB pages).
 *   FAULTINJ_NTH    fail call number N (1-based, counted while armed) ...
 *   FAULTINJ_EVERY  ... and, when K > 0, every K-th call after it.
 *   FAULTINJ_ONE_IN instead: each call fails with probability 1/K, from
 *   FAULTINJ_SEED   a fixed seed (a per-process xorshift sequence).
 *   FAULTINJ_LIMIT  at most this many failures (0: no limit).
 *   FAULTINJ_CALLER only calls made from an object whose path holds this
 *                   (e.g. libnss_idcache): the calls the C library makes
 *                   itself, whose failures are its own business, pass.
 *   FAULTINJ_SPARE  calls made from an object whose path holds this pass
 *                   (e.g. liblber, whose failed layer setup asserts).
 *   FAULTINJ_ERRNO  the errno set (a number; default per call: ENOMEM for
 *                   the allocator and mmap, EINTR for poll and epoll_wait,
 *                   EMFILE for open, openat, socket and accept4, EIO for
 *                   the rest).
 * The counters are shared between every affected process and thread. */
/* Both the plain and the 64-bit names are defined here: no redirection. */
#undef _FILE_OFFSET_BITS
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern char *program_invocation_short_name;

enum fi_call {
	FI_MALLOC,
	FI_CALLOC,
	FI_REALLOC,
	FI_STRDUP,
	FI_STRNDUP,
	FI_READ,
	FI_WRITE,
	FI_WRITEV,
	FI_PREAD,
	FI_PWRITE,
	FI_SEND,
	FI_RECV,
	FI_SENDMSG,
	FI_RECVMSG,
	FI_MMAP,
	FI_OPEN,
	FI_OPENAT,
	FI_FDATASYNC,
	FI_FSYNC,
	FI_ACCEPT4,
	FI_POLL,
	FI_EPOLL_WAIT,
	FI_SOCKET,
	FI_CONNECT,
	FI_NCALLS
};

static const char *const fi_names[FI_NCALLS] = {
    "malloc", "calloc",    "realloc", "strdup",  "strndup", "read",       "write",  "writev",
    "pread",  "pwrite",    "send",    "recv",    "sendmsg", "recvmsg",    "mmap",   "open",
    "openat", "fdatasync", "fsync",   "accept4", "poll",    "epoll_wait", "socket", "connect",
};

struct fi_ctl {
	_Atomic uint32_t armed;
	uint32_t pad;
	_Atomic uint64_t calls;
	_Atomic uint64_t failed;
	_Atomic uint64_t after;
};

static struct fi_ctl *fi_ctl;
static unsigned char fi_chosen[FI_NCALLS];
static uint64_t fi_nth, fi_every, fi_one_in, fi_limit;
static _Atomic uint64_t fi_rng;
static int fi_errno;
static const char *fi_caller, *fi_spare, *fi_path;
static uint64_t fi_off_below;
static __thread int fi_busy __attribute__((tls_model("initial-exec")));

static uint64_t fi_num(const char *name)
{
	const char *v = getenv(name);
	return v ? strtoull(v, NULL, 0) : 0;
}

static void fi_choose(const char *list)
{
	while (list && *list) {
		size_t n = strcspn(list, ",");
		for (int i = 0; i < FI_NCALLS; i++)
			if (strlen(fi_names[i]) == n && memcmp(fi_names[i], list, n) == 0)
				fi_chosen[i] = 1;
		list += n + (list[n] == ',');
	}
}

/* Reads the environment and maps the control file, with the shim's own
 * calls passed through (fi_busy). */
__attribute__((constructor)) static void fi_init(void)
{
	fi_busy++;
	const char *prog = getenv("FAULTINJ_PROG");
	const char *ctl = getenv("FAULTINJ_CTL");
	if (ctl && (!prog || strcmp(prog, program_invocation_short_name) == 0)) {
		int fd = (int)syscall(SYS_openat, AT_FDCWD, ctl, O_RDWR | O_CLOEXEC);
		if (fd >= 0) {
			void *p = (void *)syscall(SYS_mmap, NULL, 4096, PROT_READ | PROT_WRITE,
						  MAP_SHARED, fd, 0);
			syscall(SYS_close, fd);
			if ((uintptr_t)p < (uintptr_t)-4096) {
				fi_choose(getenv("FAULTINJ_FUNCS"));
				fi_nth = fi_num("FAULTINJ_NTH");
				fi_every = fi_num("FAULTINJ_EVERY");
				fi_one_in = fi_num("FAULTINJ_ONE_IN");
				fi_limit = fi_num("FAULTINJ_LIMIT");
				fi_errno = (int)fi_num("FAULTINJ_ERRNO");
				fi_caller = getenv("FAULTINJ_CALLER");
				fi_spare = getenv("FAULTINJ_SPARE");
				fi_path = getenv("FAULTINJ_PATH");
				fi_off_below = fi_num("FAULTINJ_OFF_BELOW");
				fi_rng = fi_num("FAULTINJ_SEED") * 2654435761u + 88172645463325252u;
				fi_ctl = p;
			}
		}
	}
	fi_busy--;
}

static uint64_t fi_random(void)
{
	uint64_t x = atomic_load(&fi_rng), y;
	do {
		y = x;
		y ^= y << 13;
		y ^= y >> 7;
		y ^= y << 17;
	} while (!atomic_compare_exchange_weak(&fi_rng, &x, y));
	return y;
}

static int fi_default_errno(enum fi_call c)
{
	switch (c) {
	case FI_MALLOC:
	case FI_CALLOC:
	case FI_REALLOC:
	case FI_STRDUP:
	case FI_STRNDUP:
	case FI_MMAP:
		return ENOMEM;
	case FI_POLL:
	case FI_EPOLL_WAIT:
		return EINTR;
	case FI_OPEN:
	case FI_OPENAT:
	case FI_SOCKET:
	case FI_ACCEPT4:
		return EMFILE;
	default:
		return EIO;
	}
}

/* Whether the call returning to ra comes from an object whose path holds
 * part. */
static int fi_from(void *ra, const char *part)
{
	Dl_info info;
	fi_busy++;
	int ok = dladdr(ra, &info) && info.dli_fname && strstr(info.dli_fname, part);
	fi_busy--;
	return ok;
}

/* Whether this call, returning to ra, fails; if so errno is set. */
static int fi_fail_at(enum fi_call c, void *ra)
{
	struct fi_ctl *ctl = fi_ctl;
	if (!ctl || fi_busy || !fi_chosen[c] || !atomic_load(&ctl->armed))
		return 0;
	if ((fi_caller && !fi_from(ra, fi_caller)) || (fi_spare && fi_from(ra, fi_spare)))
		return 0;
	uint64_t n = atomic_fetch_add(&ctl->calls, 1) + 1;
	int hit;
	if (fi_one_in)
		hit = fi_random() % fi_one_in == 0;
	else
		hit = n == fi_nth || (fi_every && n > fi_nth && (n - fi_nth) % fi_every == 0);
	if (hit && fi_limit && atomic_load(&ctl->failed) >= fi_limit)
		hit = 0;
	if (!hit) {
		if (atomic_load(&ctl->failed))
			atomic_fetch_add(&ctl->after, 1);
		return 0;
	}
	atomic_fetch_add(&ctl->failed, 1);
	errno = fi_errno ? fi_errno : fi_default_errno(c);
	return 1;
}

#define fi_fail(c) fi_fail_at(c, __builtin_return_address(0))

/* Whether a call of c on fd (at offset off; -1: none) is one FAULTINJ_PATH
 * and FAULTINJ_OFF_BELOW let be counted: the others pass uncounted. */
static int fi_fd_chosen(enum fi_call c, int fd, off_t off)
{
	if (!fi_ctl || !fi_chosen[c] || fi_busy)
		return 1; /* fi_fail passes it anyway */
	if (fi_off_below && off >= 0 && (uint64_t)off >= fi_off_below)
		return 0;
	if (!fi_path)
		return 1;
	char link[64], path[4096];
	fi_busy++;
	int n = snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	ssize_t got = n > 0 ? readlink(link, path, sizeof(path) - 1) : -1;
	fi_busy--;
	if (got <= 0)
		return 0;
	path[got] = '\0';
	return strstr(path, fi_path) != NULL;
}

#define fi_fail_fd(c, fd, off) (fi_fd_chosen(c, fd, off) && fi_fail(c))

#define FI_REAL(type, name, args)                                                                  \
	static type(*real_##name) args;                                                            \
	if (!real_##name) {                                                                        \
		fi_busy++;                                                                         \
		*(void **)&real_##name = dlsym(RTLD_NEXT, #name);                                  \
		fi_busy--;                                                                         \
	}

void *malloc(size_t n)
{
	return fi_fail(FI_MALLOC) ? NULL : __libc_malloc(n);
}

void *calloc(size_t n, size_t size)
{
	return fi_fail(FI_CALLOC) ? NULL : __libc_calloc(n, size);
}

void *realloc(void *p, size_t n)
{
	return fi_fail(FI_REALLOC) ? NULL : __libc_realloc(p, n);
}

char *strdup(const char *s)
{
	if (fi_fail(FI_STRDUP))
		return NULL;
	size_t n = strlen(s) + 1;
	char *d = __libc_malloc(n);
	return d ? memcpy(d, s, n) : NULL;
}

char *strndup(const char *s, size_t max)
{
	if (fi_fail(FI_STRNDUP))
		return NULL;
	size_t n = strnlen(s, max);
	char *d = __libc_malloc(n + 1);
	if (d) {
		memcpy(d, s, n);
		d[n] = '\0';
	}
	return d;
}

ssize_t read(int fd, void *buf, size_t n)
{
	FI_REAL(ssize_t, read, (int, void *, size_t));
	return fi_fail_fd(FI_READ, fd, -1) ? -1 : real_read(fd, buf, n);
}

ssize_t write(int fd, const void *buf, size_t n)
{
	FI_REAL(ssize_t, write, (int, const void *, size_t));
	return fi_fail_fd(FI_WRITE, fd, -1) ? -1 : real_write(fd, buf, n);
}

ssize_t writev(int fd, const struct iovec *iov, int n)
{
	FI_REAL(ssize_t, writev, (int, const struct iovec *, int));
	return fi_fail_fd(FI_WRITEV, fd, -1) ? -1 : real_writev(fd, iov, n);
}

ssize_t pread64(int fd, void *buf, size_t n, off_t off)
{
	FI_REAL(ssize_t, pread64, (int, void *, size_t, off_t));
	return fi_fail_fd(FI_PREAD, fd, off) ? -1 : real_pread64(fd, buf, n, off);
}

ssize_t pwrite64(int fd, const void *buf, size_t n, off_t off)
{
	FI_REAL(ssize_t, pwrite64, (int, const void *, size_t, off_t));
	return fi_fail_fd(FI_PWRITE, fd, off) ? -1 : real_pwrite64(fd, buf, n, off);
}

ssize_t pread(int fd, void *buf, size_t n, off_t off)
{
	return pread64(fd, buf, n, off);
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off)
{
	return pwrite64(fd, buf, n, off);
}

ssize_t send(int fd, const void *buf, size_t n, int flags)
{
	FI_REAL(ssize_t, send, (int, const void *, size_t, int));
	return fi_fail(FI_SEND) ? -1 : real_send(fd, buf, n, flags);
}

ssize_t recv(int fd, void *buf, size_t n, int flags)
{
	FI_REAL(ssize_t, recv, (int, void *, size_t, int));
	return fi_fail(FI_RECV) ? -1 : real_recv(fd, buf, n, flags);
}

ssize_t sendmsg(int fd, const struct msghdr *msg, int flags)
{
	FI_REAL(ssize_t, sendmsg, (int, const struct msghdr *, int));
	return fi_fail(FI_SENDMSG) ? -1 : real_sendmsg(fd, msg, flags);
}

ssize_t recvmsg(int fd, struct msghdr *msg, int flags)
{
	FI_REAL(ssize_t, recvmsg, (int, struct msghdr *, int));
	return fi_fail(FI_RECVMSG) ? -1 : real_recvmsg(fd, msg, flags);
}

void *mmap64(void *addr, size_t n, int prot, int flags, int fd, off_t off)
{
	FI_REAL(void *, mmap64, (void *, size_t, int, int, int, off_t));
	return fi_fail(FI_MMAP) ? MAP_FAILED : real_mmap64(addr, n, prot, flags, fd, off);
}

void *mmap(void *addr, size_t n, int prot, int flags, int fd, off_t off)
{
	return mmap64(addr, n, prot, flags, fd, off);
}

/* open's mode is there only with O_CREAT or O_TMPFILE. */
static mode_t fi_mode(int flags, va_list ap)
{
	return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE ? va_arg(ap, mode_t) : 0;
}

int open64(const char *path, int flags, ...)
{
	va_list ap;
	va_start(ap, flags);
	mode_t mode = fi_mode(flags, ap);
	va_end(ap);
	FI_REAL(int, open64, (const char *, int, ...));
	return fi_fail(FI_OPEN) ? -1 : real_open64(path, flags, mode);
}

int open(const char *path, int flags, ...)
{
	va_list ap;
	va_start(ap, flags);
	mode_t mode = fi_mode(flags, ap);
	va_end(ap);
	return open64(path, flags, mode);
}

int openat64(int dir, const char *path, int flags, ...)
{
	va_list ap;
	va_start(ap, flags);
	mode_t mode = fi_mode(flags, ap);
	va_end(ap);
	FI_REAL(int, openat64, (int, const char *, int, ...));
	return fi_fail(FI_OPENAT) ? -1 : real_openat64(dir, path, flags, mode);
}

int openat(int dir, const char *path, int flags, ...)
{
	va_list ap;
	va_start(ap, flags);
	mode_t mode = fi_mode(flags, ap);
	va_end(ap);
	return openat64(dir, path, flags, mode);
}

int fdatasync(int fd)
{
	FI_REAL(int, fdatasync, (int));
	return fi_fail_fd(FI_FDATASYNC, fd, -1) ? -1 : real_fdatasync(fd);
}

int fsync(int fd)
{
	FI_REAL(int, fsync, (int));
	return fi_fail_fd(FI_FSYNC, fd, -1) ? -1 : real_fsync(fd);
}

int accept4(int fd, struct sockaddr *addr, socklen_t *len, int flags)
{
	FI_REAL(int, accept4, (int, struct sockaddr *, socklen_t *, int));
	return fi_fail(FI_ACCEPT4) ? -1 : real_accept4(fd, addr, len, flags);
}

int poll(struct pollfd *fds, nfds_t n, int timeout)
{
	FI_REAL(int, poll, (struct pollfd *, nfds_t, int));
	return fi_fail(FI_POLL) ? -1 : real_poll(fds, n, timeout);
}

int epoll_wait(int fd, struct epoll_event *ev, int n, int timeout)
{
	FI_REAL(int, epoll_wait, (int, struct epoll_event *, int, int));
	return fi_fail(FI_EPOLL_WAIT) ? -1 : real_epoll_wait(fd, ev, n, timeout);
}

int socket(int domain, int type, int proto)
{
	FI_REAL(int, socket, (int, int, int));
	return fi_fail(FI_SOCKET) ? -1 : real_socket(domain, type, proto);
}

int connect(int fd, const struct sockaddr *addr, socklen_t len)
{
	FI_REAL(int, connect, (int, const struct sockaddr *, socklen_t));
	return fi_fail(FI_CONNECT) ? -1 : real_connect(fd, addr, len);
}
