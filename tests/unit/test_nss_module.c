/*
 * NSS module tests against the real artifact: dlopen the built
 * libnss_idcache.so.2 (path in $IDC_NSS_MODULE) and talk to a fake daemon
 * thread serving canned users and groups on nss.sock in a private run dir.
 * The fake server is built on proto's own server half (reader + builders).
 */
#include <dlfcn.h>
#include <errno.h>
#include <grp.h>
#include <nss.h>
#include <pthread.h>
#include <pwd.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "proto/proto.h"

/* ---- canned data ------------------------------------------------------------- */

#define N_EXTRA_USERS 300
#define BIG_NMEM      2000
#define HEAVY_NGIDS   1000

struct user {
	char name[32];
	uint32_t uid, gid;
	const char *gecos;
};
struct grp {
	const char *name;
	uint32_t gid;
	const char *const *mem;
	uint32_t nmem;
};

static struct user users[2 + N_EXTRA_USERS];
static char bigmem_names[BIG_NMEM][16];
static const char *bigmem[BIG_NMEM];
static const char *const wheel_mem[] = {"alice", "bob"};
static struct grp groups[] = {
    {"users", 100, NULL, 0},
    {"wheel", 10, wheel_mem, 2},
    {"big", 5000, bigmem, BIG_NMEM},
    {"empty", 20, NULL, 0},
};

static void data_init(void)
{
	users[0] = (struct user){"alice", 1000, 100, "Alice Liddell,,,"};
	users[1] = (struct user){"bob", 1001, 100, "Bob"};
	for (int i = 0; i < N_EXTRA_USERS; i++) {
		snprintf(users[2 + i].name, sizeof(users[2 + i].name), "user%03d", i);
		users[2 + i].uid = 2000 + (uint32_t)i;
		users[2 + i].gid = 100;
		users[2 + i].gecos = "";
	}
	for (int i = 0; i < BIG_NMEM; i++) {
		snprintf(bigmem_names[i], sizeof(bigmem_names[i]), "bigmember_%04d", i);
		bigmem[i] = bigmem_names[i];
	}
}

static char homes[IDC_ARRAY_SIZE(users)][48];

static struct proto_passwd user_view(size_t i)
{
	const struct user *u = &users[i];
	snprintf(homes[i], sizeof(homes[i]), "/home/%s", u->name);
	struct proto_passwd pw = {
	    .name = {u->name, (uint32_t)strlen(u->name)},
	    .passwd = {"x", 1},
	    .uid = u->uid,
	    .gid = u->gid,
	    .gecos = {u->gecos, (uint32_t)strlen(u->gecos)},
	    .dir = {homes[i], (uint32_t)strlen(homes[i])},
	    .shell = {"/bin/sh", 7},
	};
	return pw;
}

/* ---- fake server ------------------------------------------------------------------- */

enum mode {
	M_NORMAL,
	M_GARBAGE,   /* random bytes instead of a reply */
	M_TRUNCATED, /* header promises more than is sent, then EOF */
	M_OVERSIZED, /* header length above PROTO_MAX_REPLY */
	M_BADSTRING, /* a string without its NUL */
	M_VERSION,   /* HELLO refused */
	M_WRONGCMD,  /* reply to another command */
	M_CLOSE,     /* accept and hang up */
	M_WRONGID,   /* getpwuid/getgrgid answered with another id */
	M_HUGECOUNT, /* initgroups count larger than the frame */
};

static char rundir[64];
static char sockpath[128];
static int listen_fd = -1;
static pthread_t server_thread;
static atomic_int mode = M_NORMAL;
static atomic_int stop_server;
static atomic_int connections;

static int write_all(int fd, const void *p, size_t n)
{
	const uint8_t *b = p;
	while (n > 0) {
		ssize_t w = send(fd, b, n, MSG_NOSIGNAL);
		if (w <= 0)
			return -1;
		b += w;
		n -= (size_t)w;
	}
	return 0;
}

static const struct grp *find_group(const struct proto_req *r)
{
	for (size_t i = 0; i < IDC_ARRAY_SIZE(groups); i++)
		if (r->cmd == PROTO_CMD_GETGRNAM ? strcmp(groups[i].name, r->name.p) == 0
						 : groups[i].gid == r->id)
			return &groups[i];
	return NULL;
}

static long find_user(const struct proto_req *r)
{
	for (size_t i = 0; i < IDC_ARRAY_SIZE(users); i++)
		if (r->cmd == PROTO_CMD_GETPWUID ? users[i].uid == r->id
						 : strcmp(users[i].name, r->name.p) == 0)
			return (long)i;
	return -1;
}

static void put_group(struct idc_buf *b, const struct grp *g)
{
	assert_int_equal(proto_put_group_cstr(b, g->name, "x", g->gid, g->mem, g->nmem), 0);
}

static void reply_initgroups(struct idc_buf *out, const struct proto_req *r)
{
	size_t start;
	static const uint32_t alice_gids[] = {100, 10, 5000, 20};
	if (strcmp(r->name.p, "heavy") && strcmp(r->name.p, "alice")) {
		proto_reply_status(out, r->cmd, PROTO_ST_NOTFOUND, NULL);
		return;
	}
	proto_reply_begin(out, r->cmd, PROTO_ST_OK, &start);
	if (strcmp(r->name.p, "alice") == 0) {
		proto_put_u32(out, 4);
		for (int i = 0; i < 4; i++)
			proto_put_u32(out, alice_gids[i]);
	} else {
		proto_put_u32(out, HEAVY_NGIDS + 1);
		proto_put_u32(out, 100);
		for (uint32_t i = 0; i < HEAVY_NGIDS; i++)
			proto_put_u32(out, 10000 + i);
	}
	proto_reply_end(out, start);
}

/* One batch from *cursor, honouring max_count and max_bytes. */
static void reply_getent(struct idc_buf *out, const struct proto_req *r, size_t *cursor)
{
	bool pw = r->cmd == PROTO_CMD_GETPWENT;
	size_t total = pw ? IDC_ARRAY_SIZE(users) : IDC_ARRAY_SIZE(groups);
	if (*cursor >= total) {
		proto_reply_status(out, r->cmd, PROTO_ST_NOTFOUND, NULL);
		return;
	}
	uint32_t max = r->max_count ? r->max_count : 64;
	size_t start, cnt;
	proto_reply_begin(out, r->cmd, PROTO_ST_OK, &start);
	cnt = out->len;
	proto_put_u32(out, 0);
	uint32_t n = 0;
	while (*cursor < total && n < max) {
		struct idc_buf rec = IDC_BUF_INIT;
		if (pw) {
			struct proto_passwd v = user_view(*cursor);
			proto_put_passwd(&rec, &v);
		} else {
			put_group(&rec, &groups[*cursor]);
		}
		bool fits = r->max_bytes == 0 || out->len - start + rec.len <= r->max_bytes;
		if (n > 0 && !fits) {
			idc_buf_free(&rec);
			break;
		}
		idc_buf_append(out, rec.data, rec.len);
		idc_buf_free(&rec);
		(*cursor)++;
		n++;
	}
	proto_patch_u32(out, cnt, n);
	proto_reply_end(out, start);
}

static void reply_lookup(struct idc_buf *out, const struct proto_req *r)
{
	size_t start;
	int m = atomic_load(&mode);
	if (r->cmd == PROTO_CMD_GETPWNAM || r->cmd == PROTO_CMD_GETPWUID) {
		struct proto_req q = *r;
		if (m == M_WRONGID)
			q.id = r->id + 1;
		long i = find_user(&q);
		if (i < 0) {
			proto_reply_status(out, r->cmd, PROTO_ST_NOTFOUND, NULL);
			return;
		}
		struct proto_passwd v = user_view((size_t)i);
		proto_reply_begin(out, r->cmd, PROTO_ST_OK, &start);
		proto_put_passwd(out, &v);
		proto_reply_end(out, start);
		return;
	}
	struct proto_req q = *r;
	if (m == M_WRONGID)
		q.id = 10;
	const struct grp *g = find_group(&q);
	if (!g) {
		proto_reply_status(out, r->cmd, PROTO_ST_NOTFOUND, NULL);
		return;
	}
	proto_reply_begin(out, r->cmd, PROTO_ST_OK, &start);
	put_group(out, g);
	proto_reply_end(out, start);
}

/* Break the reply just built (for the request r) according to the mode. */
static void sabotage(struct idc_buf *out, size_t start, int m)
{
	uint32_t v;
	switch (m) {
	case M_GARBAGE:
		out->len = start;
		for (int i = 0; i < 64; i++)
			idc_buf_putc(out, (char)(rand() & 0xff));
		break;
	case M_TRUNCATED:
		v = 100 + PROTO_HDR_SIZE;
		memcpy(out->data + start, &v, 4);
		out->len =
		    start + PROTO_HDR_SIZE + 10 < out->len ? start + PROTO_HDR_SIZE + 10 : out->len;
		break;
	case M_OVERSIZED:
		v = PROTO_MAX_REPLY + 1;
		memcpy(out->data + start, &v, 4);
		break;
	case M_BADSTRING:
		if (out->len - start > PROTO_HDR_SIZE + 8)
			out->data[out->len - 1] = 'x'; /* last string loses its NUL */
		break;
	case M_WRONGCMD:
		v = PROTO_CMD_STATUS;
		memcpy(out->data + start + 4, &v, 4);
		break;
	case M_HUGECOUNT:
		if (out->len - start >= PROTO_HDR_SIZE + 4) {
			v = 0x40000000;
			memcpy(out->data + start + PROTO_HDR_SIZE, &v, 4);
		}
		break;
	default:
		break;
	}
}

/* Handle one request; false ends the connection. */
static bool serve_one(struct idc_buf *out, const struct proto_frame *f, bool *greeted,
		      size_t *pwcur, size_t *grcur)
{
	struct proto_req r;
	int m = atomic_load(&mode);
	if (proto_decode_request(&f->hdr, f->payload, f->len, &r) < 0 ||
	    (!*greeted && r.cmd != PROTO_CMD_HELLO)) {
		proto_reply_status(out, f->hdr.command, PROTO_ST_BADREQ, "bad request");
		return false;
	}
	size_t start = out->len;
	switch (r.cmd) {
	case PROTO_CMD_HELLO:
		proto_reply_begin(out, r.cmd, m == M_VERSION ? PROTO_ST_VERSION : PROTO_ST_OK,
				  &start);
		proto_put_u32(out, PROTO_VERSION);
		proto_reply_end(out, start);
		*greeted = true;
		return m != M_VERSION;
	case PROTO_CMD_SETPWENT:
	case PROTO_CMD_SETGRENT:
		*(r.cmd == PROTO_CMD_SETPWENT ? pwcur : grcur) = 0;
		proto_reply_status(out, r.cmd, PROTO_ST_OK, NULL);
		return true;
	case PROTO_CMD_GETPWENT:
	case PROTO_CMD_GETGRENT:
		reply_getent(out, &r, r.cmd == PROTO_CMD_GETPWENT ? pwcur : grcur);
		break;
	case PROTO_CMD_INITGROUPS:
		reply_initgroups(out, &r);
		break;
	case PROTO_CMD_GETPWNAM:
	case PROTO_CMD_GETPWUID:
	case PROTO_CMD_GETGRNAM:
	case PROTO_CMD_GETGRGID:
		reply_lookup(out, &r);
		break;
	default:
		proto_reply_status(out, r.cmd, PROTO_ST_BADREQ, "admin command on nss socket");
		return true;
	}
	sabotage(out, start, m);
	return m == M_NORMAL || m == M_WRONGID || m == M_BADSTRING || m == M_WRONGCMD ||
	       m == M_HUGECOUNT;
}

static void *conn_main(void *arg)
{
	int fd = (int)(intptr_t)arg;
	struct proto_reader rd;
	struct idc_buf out = IDC_BUF_INIT;
	bool greeted = false, open = atomic_load(&mode) != M_CLOSE;
	size_t pwcur = 0, grcur = 0;
	uint8_t buf[4096];
	proto_reader_init(&rd, PROTO_MAX_REQUEST);
	while (open) {
		ssize_t n = recv(fd, buf, sizeof(buf), 0);
		if (n <= 0 || proto_reader_feed(&rd, buf, (size_t)n) < 0)
			break;
		struct proto_frame f;
		idc_buf_reset(&out);
		while (open && proto_reader_next(&rd, &f) == 1)
			open = serve_one(&out, &f, &greeted, &pwcur, &grcur);
		if (out.len && write_all(fd, out.data, out.len) < 0)
			break;
	}
	proto_reader_free(&rd);
	idc_buf_free(&out);
	close(fd);
	return NULL;
}

static void *server_main(void *arg)
{
	(void)arg;
	while (!atomic_load(&stop_server)) {
		int fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0)
			continue; /* the listener has a receive timeout: re-check stop */
		atomic_fetch_add(&connections, 1);
		pthread_t t;
		if (pthread_create(&t, NULL, conn_main, (void *)(intptr_t)fd) == 0)
			pthread_detach(t);
		else
			close(fd);
	}
	return NULL;
}

/* ---- the module ------------------------------------------------------------------------- */

static void *module;
static nss_getpwnam_r *getpwnam_r_fn;
static nss_getpwuid_r *getpwuid_r_fn;
static nss_setpwent *setpwent_fn;
static nss_getpwent_r *getpwent_r_fn;
static nss_endpwent *endpwent_fn;
static nss_getgrnam_r *getgrnam_r_fn;
static nss_getgrgid_r *getgrgid_r_fn;
static nss_setgrent *setgrent_fn;
static nss_getgrent_r *getgrent_r_fn;
static nss_endgrent *endgrent_fn;
static nss_initgroups_dyn *initgroups_dyn_fn;

static void *sym(const char *name)
{
	void *p = dlsym(module, name);
	if (!p)
		fprintf(stderr, "missing %s: %s\n", name, dlerror());
	return p;
}

static int setup_all(void **state)
{
	(void)state;
	data_init();
	snprintf(rundir, sizeof(rundir), "/tmp/idc-nss-test.XXXXXX");
	if (!mkdtemp(rundir))
		return -1;
	snprintf(sockpath, sizeof(sockpath), "%s/nss.sock", rundir);
	/* Before the module's first call: it reads the variable each time, but
	 * this is what a real process would do. */
	setenv("IDCACHE_RUNDIR", rundir, 1);

	listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	if (strlen(sockpath) >= sizeof(sa.sun_path))
		return -1;
	memcpy(sa.sun_path, sockpath, strlen(sockpath) + 1);
	if (bind(listen_fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(listen_fd, 64) < 0)
		return -1;
	struct timeval tv = {0, 50000};
	setsockopt(listen_fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if (pthread_create(&server_thread, NULL, server_main, NULL) != 0)
		return -1;

	const char *path = getenv("IDC_NSS_MODULE");
	module = path ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
	if (!module) {
		fprintf(stderr, "dlopen %s: %s\n", path ? path : "(IDC_NSS_MODULE unset)",
			dlerror());
		return -1;
	}
	getpwnam_r_fn = (nss_getpwnam_r *)sym("_nss_idcache_getpwnam_r");
	getpwuid_r_fn = (nss_getpwuid_r *)sym("_nss_idcache_getpwuid_r");
	setpwent_fn = (nss_setpwent *)sym("_nss_idcache_setpwent");
	getpwent_r_fn = (nss_getpwent_r *)sym("_nss_idcache_getpwent_r");
	endpwent_fn = (nss_endpwent *)sym("_nss_idcache_endpwent");
	getgrnam_r_fn = (nss_getgrnam_r *)sym("_nss_idcache_getgrnam_r");
	getgrgid_r_fn = (nss_getgrgid_r *)sym("_nss_idcache_getgrgid_r");
	setgrent_fn = (nss_setgrent *)sym("_nss_idcache_setgrent");
	getgrent_r_fn = (nss_getgrent_r *)sym("_nss_idcache_getgrent_r");
	endgrent_fn = (nss_endgrent *)sym("_nss_idcache_endgrent");
	initgroups_dyn_fn = (nss_initgroups_dyn *)sym("_nss_idcache_initgroups_dyn");
	return getpwnam_r_fn && getpwuid_r_fn && setpwent_fn && getpwent_r_fn && endpwent_fn &&
		       getgrnam_r_fn && getgrgid_r_fn && setgrent_fn && getgrent_r_fn &&
		       endgrent_fn && initgroups_dyn_fn
		   ? 0
		   : -1;
}

static int teardown_all(void **state)
{
	(void)state;
	atomic_store(&stop_server, 1);
	pthread_join(server_thread, NULL);
	close(listen_fd);
	unlink(sockpath);
	rmdir(rundir);
	if (module)
		dlclose(module);
	return 0;
}

static int reset_mode(void **state)
{
	(void)state;
	atomic_store(&mode, M_NORMAL);
	return 0;
}

/* ---- lookups ------------------------------------------------------------------------------- */

#define SENTINEL 4711 /* an errno value no path of the module produces */

static void check_alice(const struct passwd *pw)
{
	assert_string_equal(pw->pw_name, "alice");
	assert_string_equal(pw->pw_passwd, "x");
	assert_int_equal(pw->pw_uid, 1000);
	assert_int_equal(pw->pw_gid, 100);
	assert_string_equal(pw->pw_gecos, "Alice Liddell,,,");
	assert_string_equal(pw->pw_dir, "/home/alice");
	assert_string_equal(pw->pw_shell, "/bin/sh");
}

static void test_getpw(void **state)
{
	(void)state;
	struct passwd pw;
	char buf[1024];
	int err = 0;
	errno = SENTINEL;
	assert_int_equal(getpwnam_r_fn("alice", &pw, buf, sizeof(buf), &err), NSS_STATUS_SUCCESS);
	assert_int_equal(errno, SENTINEL);
	assert_int_equal(err, 0);
	check_alice(&pw);

	assert_int_equal(getpwuid_r_fn(1000, &pw, buf, sizeof(buf), &err), NSS_STATUS_SUCCESS);
	check_alice(&pw);
	assert_int_equal(getpwuid_r_fn(2299, &pw, buf, sizeof(buf), &err), NSS_STATUS_SUCCESS);
	assert_string_equal(pw.pw_name, "user299");
	assert_int_equal(errno, SENTINEL);

	assert_int_equal(getpwnam_r_fn("nobody-here", &pw, buf, sizeof(buf), &err),
			 NSS_STATUS_NOTFOUND);
	assert_int_equal(err, ENOENT);
	err = 0;
	assert_int_equal(getpwuid_r_fn(4242, &pw, buf, sizeof(buf), &err), NSS_STATUS_NOTFOUND);
	assert_int_equal(err, ENOENT);
	assert_int_equal(errno, SENTINEL);

	/* glibc passes &errno as errnop: success must leave it alone. */
	errno = SENTINEL;
	assert_int_equal(getpwnam_r_fn("bob", &pw, buf, sizeof(buf), &errno), NSS_STATUS_SUCCESS);
	assert_int_equal(errno, SENTINEL);
}

static void test_getpw_sweep(void **state)
{
	(void)state;
	size_t need = strlen("alice") + 1 + 2 + strlen("Alice Liddell,,,") + 1 +
		      strlen("/home/alice") + 1 + strlen("/bin/sh") + 1;
	for (size_t len = 0; len <= need; len++) {
		char *buf = malloc(len ? len : 1); /* exact size: overruns show under ASan */
		struct passwd pw;
		int err = 0;
		errno = SENTINEL;
		enum nss_status st = getpwnam_r_fn("alice", &pw, buf, len, &err);
		if (len < need) {
			assert_int_equal(st, NSS_STATUS_TRYAGAIN);
			assert_int_equal(err, ERANGE);
		} else {
			assert_int_equal(st, NSS_STATUS_SUCCESS);
			check_alice(&pw);
		}
		assert_int_equal(errno, SENTINEL);
		free(buf);
	}
}

static size_t group_need(const struct grp *g, const char *buf)
{
	size_t s = strlen(g->name) + 1 + 2;
	for (uint32_t i = 0; i < g->nmem; i++)
		s += strlen(g->mem[i]) + 1;
	size_t pad = (sizeof(char *) - ((uintptr_t)buf + s) % sizeof(char *)) % sizeof(char *);
	return s + pad + (g->nmem + 1) * sizeof(char *);
}

static void check_group(const struct group *gr, const struct grp *g)
{
	assert_string_equal(gr->gr_name, g->name);
	assert_string_equal(gr->gr_passwd, "x");
	assert_int_equal(gr->gr_gid, g->gid);
	for (uint32_t i = 0; i < g->nmem; i++)
		assert_string_equal(gr->gr_mem[i], g->mem[i]);
	assert_null(gr->gr_mem[g->nmem]);
}

static void test_getgr(void **state)
{
	(void)state;
	struct group gr;
	char buf[1024];
	int err = 0;
	errno = SENTINEL;
	assert_int_equal(getgrnam_r_fn("wheel", &gr, buf, sizeof(buf), &err), NSS_STATUS_SUCCESS);
	check_group(&gr, &groups[1]);
	assert_int_equal(getgrgid_r_fn(20, &gr, buf, sizeof(buf), &err), NSS_STATUS_SUCCESS);
	check_group(&gr, &groups[3]);
	assert_int_equal(getgrgid_r_fn(9999, &gr, buf, sizeof(buf), &err), NSS_STATUS_NOTFOUND);
	assert_int_equal(err, ENOENT);
	assert_int_equal(getgrnam_r_fn("nogroup", &gr, buf, sizeof(buf), &err),
			 NSS_STATUS_NOTFOUND);
	assert_int_equal(errno, SENTINEL);
}

/* The big group: ERANGE until the exact size, then every member right. The
 * sweep takes every size near the interesting points and a stride between. */
static void test_getgr_big_sweep(void **state)
{
	(void)state;
	const struct grp *g = &groups[2];
	/* malloc returns 16-aligned memory: the pad is that of address 0 */
	size_t need = group_need(g, NULL);
	for (size_t len = 0; len <= need + 8; len += (len < 600 || len + 80 > need) ? 1 : 97) {
		char *buf = malloc(len ? len : 1);
		struct group gr;
		int err = 0;
		errno = SENTINEL;
		enum nss_status st = getgrnam_r_fn("big", &gr, buf, len, &err);
		if (len < group_need(g, buf)) {
			assert_int_equal(st, NSS_STATUS_TRYAGAIN);
			assert_int_equal(err, ERANGE);
		} else {
			assert_int_equal(st, NSS_STATUS_SUCCESS);
			check_group(&gr, g);
		}
		assert_int_equal(errno, SENTINEL);
		free(buf);
	}
	/* by gid as well */
	char *buf = malloc(need);
	struct group gr;
	int err = 0;
	assert_int_equal(getgrgid_r_fn(5000, &gr, buf, need, &err), NSS_STATUS_SUCCESS);
	check_group(&gr, g);
	free(buf);
}

static void test_malformed_names(void **state)
{
	(void)state;
	char longname[300];
	memset(longname, 'a', sizeof(longname) - 1);
	longname[sizeof(longname) - 1] = '\0';
	const char *bad[] = {"", longname, "a:b", "a\nb", "tab\there", "del\x7f"};
	struct passwd pw;
	struct group gr;
	char buf[256];
	int before = atomic_load(&connections);
	for (size_t i = 0; i < IDC_ARRAY_SIZE(bad); i++) {
		int err = 0;
		errno = SENTINEL;
		assert_int_equal(getpwnam_r_fn(bad[i], &pw, buf, sizeof(buf), &err),
				 NSS_STATUS_NOTFOUND);
		assert_int_equal(err, ENOENT);
		assert_int_equal(getgrnam_r_fn(bad[i], &gr, buf, sizeof(buf), &err),
				 NSS_STATUS_NOTFOUND);
		long start = 1, size = 4;
		gid_t *gids = malloc(4 * sizeof(gid_t));
		assert_int_equal(initgroups_dyn_fn(bad[i], 100, &start, &size, &gids, 0, &err),
				 NSS_STATUS_NOTFOUND);
		assert_int_equal(start, 1);
		free(gids);
		assert_int_equal(errno, SENTINEL);
	}
	assert_int_equal(atomic_load(&connections), before); /* never asked the daemon */
	assert_int_equal(getpwnam_r_fn(NULL, &pw, buf, sizeof(buf), &errno), NSS_STATUS_NOTFOUND);
}

static void test_unavail_when_down(void **state)
{
	(void)state;
	char missing[160];
	snprintf(missing, sizeof(missing), "%s/does-not-exist", rundir);
	setenv("IDCACHE_RUNDIR", missing, 1);
	struct passwd pw;
	struct group gr;
	char buf[256];
	int err = SENTINEL;
	errno = SENTINEL;
	uint64_t t0 = idc_now_ns();
	assert_int_equal(getpwnam_r_fn("alice", &pw, buf, sizeof(buf), &err), NSS_STATUS_UNAVAIL);
	assert_int_equal(getgrgid_r_fn(10, &gr, buf, sizeof(buf), &err), NSS_STATUS_UNAVAIL);
	long start = 1, size = 4;
	gid_t *gids = malloc(4 * sizeof(gid_t));
	assert_int_equal(initgroups_dyn_fn("alice", 100, &start, &size, &gids, 0, &err),
			 NSS_STATUS_UNAVAIL);
	free(gids);
	assert_int_equal(setpwent_fn(0), NSS_STATUS_UNAVAIL);
	assert_int_equal(getpwent_r_fn(&pw, buf, sizeof(buf), &err), NSS_STATUS_UNAVAIL);
	endpwent_fn();
	uint64_t dt = idc_now_ns() - t0;
	printf("# five calls with the daemon down: %.3f ms\n", (double)dt / 1e6);
	assert_true(dt < 2000000000ull); /* generous: the point is "no timeout wait" */
	assert_int_equal(errno, SENTINEL);
	assert_int_equal(err, SENTINEL); /* UNAVAIL leaves errnop alone */
	setenv("IDCACHE_RUNDIR", rundir, 1);
}

/* ---- enumeration ---------------------------------------------------------------------------- */

static void test_pwent(void **state)
{
	(void)state;
	struct passwd pw;
	char buf[512];
	int err = 0;
	errno = SENTINEL;
	for (int round = 0; round < 2; round++) {
		/* round 1: no setpwent — getpwent_r starts implicitly */
		if (round == 0)
			assert_int_equal(setpwent_fn(1), NSS_STATUS_SUCCESS);
		size_t n = 0;
		enum nss_status st;
		while ((st = getpwent_r_fn(&pw, buf, sizeof(buf), &err)) == NSS_STATUS_SUCCESS) {
			assert_true(n < IDC_ARRAY_SIZE(users));
			assert_string_equal(pw.pw_name, users[n].name);
			assert_int_equal(pw.pw_uid, users[n].uid);
			n++;
		}
		assert_int_equal(st, NSS_STATUS_NOTFOUND);
		assert_int_equal(err, ENOENT);
		assert_int_equal(n, IDC_ARRAY_SIZE(users));
		/* stays at the end until endpwent/setpwent */
		assert_int_equal(getpwent_r_fn(&pw, buf, sizeof(buf), &err), NSS_STATUS_NOTFOUND);
		assert_int_equal(endpwent_fn(), NSS_STATUS_SUCCESS);
	}
	assert_int_equal(errno, SENTINEL);
}

/* Groups, with a short buffer at the big one: ERANGE keeps the record. */
static void test_grent(void **state)
{
	(void)state;
	struct group gr;
	size_t cap = 64 * 1024;
	char *buf = malloc(cap);
	int err = 0;
	assert_int_equal(setgrent_fn(0), NSS_STATUS_SUCCESS);
	for (size_t i = 0; i < IDC_ARRAY_SIZE(groups); i++) {
		if (groups[i].nmem == BIG_NMEM) {
			for (size_t small = 0; small < 4096; small += 1023) {
				assert_int_equal(getgrent_r_fn(&gr, buf, small, &err),
						 NSS_STATUS_TRYAGAIN);
				assert_int_equal(err, ERANGE);
			}
		}
		assert_int_equal(getgrent_r_fn(&gr, buf, cap, &err), NSS_STATUS_SUCCESS);
		check_group(&gr, &groups[i]);
	}
	assert_int_equal(getgrent_r_fn(&gr, buf, cap, &err), NSS_STATUS_NOTFOUND);
	/* setgrent rewinds */
	assert_int_equal(setgrent_fn(0), NSS_STATUS_SUCCESS);
	assert_int_equal(getgrent_r_fn(&gr, buf, cap, &err), NSS_STATUS_SUCCESS);
	check_group(&gr, &groups[0]);
	assert_int_equal(endgrent_fn(), NSS_STATUS_SUCCESS);
	free(buf);
}

/* ---- initgroups --------------------------------------------------------------------------- */

static bool has_gid(const gid_t *g, long n, gid_t want)
{
	for (long i = 0; i < n; i++)
		if (g[i] == want)
			return true;
	return false;
}

static void test_initgroups(void **state)
{
	(void)state;
	int err = 0;
	errno = SENTINEL;
	/* As glibc calls it: the primary group already in slot 0. */
	long start = 1, size = 2;
	gid_t *gids = malloc((size_t)size * sizeof(gid_t));
	gids[0] = 100;
	assert_int_equal(initgroups_dyn_fn("alice", 100, &start, &size, &gids, -1, &err),
			 NSS_STATUS_SUCCESS);
	assert_int_equal(start, 4);
	assert_true(size >= 4);
	assert_int_equal(gids[0], 100);
	assert_true(has_gid(gids, start, 10) && has_gid(gids, start, 5000) &&
		    has_gid(gids, start, 20));
	/* again: nothing is added twice */
	assert_int_equal(initgroups_dyn_fn("alice", 100, &start, &size, &gids, -1, &err),
			 NSS_STATUS_SUCCESS);
	assert_int_equal(start, 4);
	free(gids);

	/* a limit caps both the count and the growth */
	start = 1, size = 1;
	gids = malloc(sizeof(gid_t));
	gids[0] = 100;
	assert_int_equal(initgroups_dyn_fn("alice", 100, &start, &size, &gids, 3, &err),
			 NSS_STATUS_SUCCESS);
	assert_int_equal(start, 3);
	assert_int_equal(size, 3);
	free(gids);

	/* many groups, streamed in chunks, array grown by doubling */
	start = 1, size = 1;
	gids = malloc(sizeof(gid_t));
	gids[0] = 100;
	assert_int_equal(initgroups_dyn_fn("heavy", 100, &start, &size, &gids, 0, &err),
			 NSS_STATUS_SUCCESS);
	assert_int_equal(start, 1 + HEAVY_NGIDS);
	for (long i = 1; i < start; i++)
		assert_int_equal(gids[i], 10000 + (gid_t)(i - 1));
	free(gids);

	start = 0, size = 0;
	gids = NULL;
	err = 0;
	assert_int_equal(initgroups_dyn_fn("ghost", 100, &start, &size, &gids, 0, &err),
			 NSS_STATUS_NOTFOUND);
	assert_int_equal(err, ENOENT);
	assert_int_equal(start, 0);
	assert_int_equal(errno, SENTINEL);
}

/* ---- misbehaving daemons -------------------------------------------------------------------- */

static void test_bad_servers(void **state)
{
	(void)state;
	int modes[] = {M_GARBAGE,  M_TRUNCATED, M_OVERSIZED, M_BADSTRING, M_VERSION,
		       M_WRONGCMD, M_CLOSE,     M_WRONGID,   M_HUGECOUNT};
	char *buf = malloc(65536);
	for (size_t i = 0; i < IDC_ARRAY_SIZE(modes); i++) {
		atomic_store(&mode, modes[i]);
		struct passwd pw;
		struct group gr;
		int err = SENTINEL;
		errno = SENTINEL;
		enum nss_status st = getpwnam_r_fn("alice", &pw, buf, 65536, &err);
		assert_true(st == NSS_STATUS_UNAVAIL ||
			    (modes[i] == M_WRONGID && st == NSS_STATUS_SUCCESS));
		assert_int_equal(getpwuid_r_fn(1000, &pw, buf, 65536, &err), NSS_STATUS_UNAVAIL);
		assert_int_equal(getgrgid_r_fn(5000, &gr, buf, 65536, &err), NSS_STATUS_UNAVAIL);
		st = getgrnam_r_fn("big", &gr, buf, 100, &err); /* short buffer too */
		assert_true(st == NSS_STATUS_UNAVAIL || st == NSS_STATUS_TRYAGAIN ||
			    (modes[i] == M_WRONGID && st == NSS_STATUS_TRYAGAIN));
		long start = 1, size = 2;
		gid_t *gids = malloc(2 * sizeof(gid_t));
		gids[0] = 100;
		st = initgroups_dyn_fn("alice", 100, &start, &size, &gids, 0, &err);
		assert_true(st == NSS_STATUS_UNAVAIL || modes[i] == M_WRONGID ||
			    modes[i] == M_BADSTRING || modes[i] == M_HUGECOUNT);
		if (modes[i] == M_HUGECOUNT)
			assert_int_equal(st, NSS_STATUS_UNAVAIL);
		free(gids);
		st = getpwent_r_fn(&pw, buf, 65536, &err);
		assert_true(st == NSS_STATUS_UNAVAIL || modes[i] == M_WRONGID);
		endpwent_fn();
		assert_int_equal(errno, SENTINEL);
	}
	atomic_store(&mode, M_NORMAL);
	free(buf);
}

/* ---- threads and fork ------------------------------------------------------------------------ */

static void *lookup_thread(void *arg)
{
	intptr_t id = (intptr_t)arg;
	char buf[512];
	for (int i = 0; i < 100; i++) {
		struct passwd pw;
		int err = 0;
		uint32_t uid = 2000 + (uint32_t)((id * 37 + i) % N_EXTRA_USERS);
		if (getpwuid_r_fn(uid, &pw, buf, sizeof(buf), &err) != NSS_STATUS_SUCCESS ||
		    pw.pw_uid != uid)
			return (void *)1;
	}
	return NULL;
}

static void test_threads(void **state)
{
	(void)state;
	pthread_t t[8];
	for (intptr_t i = 0; i < 8; i++)
		assert_int_equal(pthread_create(&t[i], NULL, lookup_thread, (void *)i), 0);
	for (int i = 0; i < 8; i++) {
		void *rv;
		pthread_join(t[i], &rv);
		assert_null(rv);
	}
}

static void test_fork(void **state)
{
	(void)state;
	struct passwd pw;
	char buf[512];
	int err = 0;
	/* The parent is mid-enumeration when it forks. */
	assert_int_equal(setpwent_fn(0), NSS_STATUS_SUCCESS);
	assert_int_equal(getpwent_r_fn(&pw, buf, sizeof(buf), &err), NSS_STATUS_SUCCESS);
	assert_string_equal(pw.pw_name, "alice");
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int ok = getpwnam_r_fn("bob", &pw, buf, sizeof(buf), &err) == NSS_STATUS_SUCCESS &&
			 pw.pw_uid == 1001;
		/* the child's enumeration is its own, from the start */
		ok = ok && getpwent_r_fn(&pw, buf, sizeof(buf), &err) == NSS_STATUS_SUCCESS &&
		     strcmp(pw.pw_name, "alice") == 0;
		endpwent_fn();
		_exit(ok ? 0 : 1);
	}
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	/* ...and the parent's continues where it was. */
	assert_int_equal(getpwent_r_fn(&pw, buf, sizeof(buf), &err), NSS_STATUS_SUCCESS);
	assert_string_equal(pw.pw_name, "bob");
	endpwent_fn();
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup(test_getpw, reset_mode),
	    cmocka_unit_test_setup(test_getpw_sweep, reset_mode),
	    cmocka_unit_test_setup(test_getgr, reset_mode),
	    cmocka_unit_test_setup(test_getgr_big_sweep, reset_mode),
	    cmocka_unit_test_setup(test_malformed_names, reset_mode),
	    cmocka_unit_test_setup(test_unavail_when_down, reset_mode),
	    cmocka_unit_test_setup(test_pwent, reset_mode),
	    cmocka_unit_test_setup(test_grent, reset_mode),
	    cmocka_unit_test_setup(test_initgroups, reset_mode),
	    cmocka_unit_test_setup(test_bad_servers, reset_mode),
	    cmocka_unit_test_setup(test_threads, reset_mode),
	    cmocka_unit_test_setup(test_fork, reset_mode),
	};
	return cmocka_run_group_tests(tests, setup_all, teardown_all);
}
