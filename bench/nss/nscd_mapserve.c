/*
 * nscd_mapserve: a stand-in nscd socket for tests and benchmarks of the
 * maps src/nscddb writes, read by glibc's own nscd client.
 *
 *   nscd_mapserve SOCKET PASSWD GROUP [STALE_S]
 *
 * Builds a passwd map and a group map (groups, and every user's group
 * list) from the two files, listens on SOCKET and answers GETFDPW and
 * GETFDGR with the map's descriptor as nscd does, and lookups with the
 * record its map holds (the response nscd would send: the record's data);
 * a lookup the maps miss, and every other request, gets a response header
 * with found = -1 ("not served": glibc asks NSS) or, after `miss
 * notfound`, found = 0. STALE_S: the maps' staleness bound
 * (nscddb_set_stale). Prints "ready" once listening.
 * Commands on stdin, one per line, each answered with "ok" (or "error"):
 *   drop-user NAME    the user leaves the passwd map
 *   drop-group NAME   the group leaves the group map
 *   corrupt FIELD     version | header | module | datasize | stale: the
 *                     header field glibc checks before mapping, broken
 *                     (stale: then as after pause)
 *   nonul NAME        the user's record loses the NUL after its name
 *   miss notfound     answer misses found = 0
 *   lookups off       answer no lookup from the maps (every one a miss)
 *   pause             stop beating the maps and answering lookups from
 *                     them (a daemon killed)
 *   churn N           store every user of PASSWD again, N times, one round
 *                     between requests (the map fills and is swapped while
 *                     clients read it)
 *   swaps             "swaps N": passwd maps replaced so far
 *   stats             "requests T=N ..." by request type
 * Single-threaded, poll loop; beats the maps every second. Not installed.
 */
#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "nscddb/nscddb.h"

#define MAX_FIELDS 4096
#define REQ_TYPES  32

static struct nscddb *maps[2];
static unsigned long requests[REQ_TYPES];
static int miss_found = -1;
static bool beating = true; /* off: as a writer killed (corrupt stale) */
static const char *passwd_path;
static unsigned long churn_left;
static bool lookups = true; /* lookups answered from the maps */

/* Split line at sep into at most max fields (in place); their number. */
static size_t split(char *line, char sep, char **f, size_t max)
{
	size_t n = 0;
	f[n++] = line;
	for (char *p = line; *p && n < max; p++)
		if (*p == sep) {
			*p = '\0';
			f[n++] = p + 1;
		}
	return n;
}

static char *chomp(char *s)
{
	s[strcspn(s, "\n")] = '\0';
	return s;
}

struct group_line {
	char *name;
	uint32_t gid;
	char **members;
	size_t nmembers;
};

static int load_passwd(const char *path, int64_t now)
{
	FILE *f = fopen(path, "r");
	if (f == NULL)
		return -errno;
	char line[4096];
	while (fgets(line, sizeof(line), f)) {
		char *v[8];
		if (split(chomp(line), ':', v, 8) != 7)
			continue;
		struct nscddb_passwd pw = {v[0],
					   "x",
					   v[4],
					   v[5],
					   v[6],
					   (uint32_t)strtoul(v[2], NULL, 10),
					   (uint32_t)strtoul(v[3], NULL, 10)};
		int rc = nscddb_put_passwd(maps[0], &pw, NSCDDB_KEY_NAME | NSCDDB_KEY_ID,
					   now + 3600, now);
		if (rc < 0)
			fprintf(stderr, "nscd_mapserve: %s: %s\n", v[0], strerror(-rc));
	}
	fclose(f);
	return 0;
}

static size_t load_groups(const char *path, struct group_line *g, size_t max)
{
	FILE *f = fopen(path, "r");
	size_t n = 0;
	char line[65536];
	while (f && n < max && fgets(line, sizeof(line), f)) {
		char *v[5];
		if (split(chomp(line), ':', v, 5) != 4)
			continue;
		char **mem = calloc(MAX_FIELDS, sizeof(*mem));
		if (mem == NULL)
			break;
		char *list = strdup(v[3]);
		size_t nm = *list ? split(list, ',', mem, MAX_FIELDS) : 0;
		g[n++] =
		    (struct group_line){strdup(v[0]), (uint32_t)strtoul(v[2], NULL, 10), mem, nm};
	}
	if (f)
		fclose(f);
	return n;
}

/* Groups by name and gid; each member's list of gids (the groups naming it). */
static void put_groups(struct group_line *g, size_t n, int64_t now)
{
	static uint32_t gids[MAX_FIELDS];
	for (size_t i = 0; i < n; i++) {
		struct nscddb_group gr = {g[i].name, "x", g[i].gid,
					  (const char *const *)g[i].members, g[i].nmembers};
		nscddb_put_group(maps[1], &gr, NSCDDB_KEY_NAME | NSCDDB_KEY_ID, now + 3600, now);
	}
	for (size_t i = 0; i < n; i++)
		for (size_t m = 0; m < g[i].nmembers; m++) {
			const char *user = g[i].members[m];
			size_t k = 0;
			for (size_t j = 0; j < n && k < MAX_FIELDS; j++)
				for (size_t q = 0; q < g[j].nmembers; q++)
					if (strcmp(g[j].members[q], user) == 0) {
						gids[k++] = g[j].gid;
						break;
					}
			nscddb_put_initgroups(maps[1], user, gids, k, now + 3600, now);
		}
}

/* ==== the socket ===================================================================== */

static int listen_on(const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	if (strlen(path) >= sizeof(sa.sun_path))
		return -1;
	strcpy(sa.sun_path, path);
	unlink(path);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 64) < 0)
		return -1;
	chmod(path, 0666);
	return fd;
}

static void send_map(int c, int db, const char *key, size_t keylen)
{
	uint64_t size;
	int fd = nscddb_fd(maps[db], &size);
	struct iovec iov[2] = {{(void *)key, keylen}, {&size, sizeof(size)}};
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(sizeof(int))];
	} u;
	struct msghdr msg = {
	    .msg_iov = iov, .msg_iovlen = 2, .msg_control = u.b, .msg_controllen = sizeof(u.b)};
	struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &fd, sizeof(int));
	if (sendmsg(c, &msg, MSG_NOSIGNAL) < 0)
		perror("nscd_mapserve: sendmsg");
}

/* A response header of the request's kind saying found (-1 or 0). */
static void send_miss(int c, int32_t type)
{
	int32_t h[9] = {NSCDDB_PROTO_VERSION, miss_found};
	size_t len = type <= NSCDDB_GETPWBYUID   ? sizeof(struct nscddb_pw_resp)
		     : type <= NSCDDB_GETGRBYGID ? sizeof(struct nscddb_gr_resp)
		     : type == NSCDDB_INITGROUPS ? sizeof(struct nscddb_initgr_resp)
						 : 0;
	if (len && send(c, h, len, MSG_NOSIGNAL) < 0)
		perror("nscd_mapserve: send");
}

/* A lookup answered from the map, as nscd answers it from its cache. */
static bool send_hit(int c, int32_t type, const char *key, size_t keylen)
{
	int db = type <= NSCDDB_GETPWBYUID ? 0 : 1;
	size_t len;
	const void *base = nscddb_base(maps[db], &len);
	const struct nscddb_datahead *dh = nscddb_find(base, len, type, key, keylen);
	return dh != NULL && send(c, dh + 1, (size_t)dh->recsize, MSG_NOSIGNAL) == dh->recsize;
}

static void serve_one(int lfd)
{
	int c = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	if (c < 0)
		return;
	struct timeval tv = {1, 0};
	setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	int32_t h[3];
	char key[NSCDDB_KEY_MAX + 1];
	if (recv(c, h, sizeof(h), MSG_WAITALL) == (ssize_t)sizeof(h) && h[0] == 2 && h[2] > 0 &&
	    h[2] <= NSCDDB_KEY_MAX && recv(c, key, (size_t)h[2], MSG_WAITALL) == h[2]) {
		key[h[2]] = '\0';
		if (h[1] >= 0 && h[1] < REQ_TYPES)
			requests[h[1]]++;
		if (h[1] == NSCDDB_GETFDPW && strcmp(key, "passwd") == 0)
			send_map(c, 0, key, (size_t)h[2]);
		else if (h[1] == NSCDDB_GETFDGR && strcmp(key, "group") == 0)
			send_map(c, 1, key, (size_t)h[2]);
		else if (!(lookups && (h[1] <= NSCDDB_GETGRBYGID || h[1] == NSCDDB_INITGROUPS) &&
			   send_hit(c, h[1], key, (size_t)h[2])))
			send_miss(c, h[1]);
	}
	close(c);
}

/* ==== commands ======================================================================= */

static struct nscddb_head *head_of(int db)
{
	size_t len;
	return nscddb_base(maps[db], &len);
}

static bool corrupt(const char *what)
{
	for (int db = 0; db < 2; db++) {
		struct nscddb_head *h = head_of(db);
		if (strcmp(what, "version") == 0)
			h->version = NSCDDB_VERSION + 1;
		else if (strcmp(what, "header") == 0)
			h->header_size = NSCDDB_HEAD_SIZE + 8;
		else if (strcmp(what, "module") == 0)
			h->module = 0;
		else if (strcmp(what, "datasize") == 0)
			h->data_size = INT32_MAX;
		else if (strcmp(what, "stale") == 0) {
			h->timestamp = 1;
			beating = lookups = false;
		} else
			return false;
	}
	return true;
}

static bool no_nul(const char *name)
{
	size_t len;
	const void *base = nscddb_base(maps[0], &len);
	const struct nscddb_datahead *dh =
	    nscddb_find(base, len, NSCDDB_GETPWBYNAME, name, strlen(name) + 1);
	if (dh == NULL)
		return false;
	char *p = (char *)(uintptr_t)(dh + 1) + sizeof(struct nscddb_pw_resp);
	p[strlen(name)] = 'X';
	return true;
}

static void command(char *line)
{
	char *v[3];
	size_t n = split(chomp(line), ' ', v, 3);
	bool ok = false;
	if (n == 2 && strcmp(v[0], "drop-user") == 0)
		ok = nscddb_drop_name(maps[0], NSCDDB_GETPWBYNAME, v[1]) == 1;
	else if (n == 2 && strcmp(v[0], "drop-group") == 0)
		ok = nscddb_drop_name(maps[1], NSCDDB_GETGRBYNAME, v[1]) == 1;
	else if (n == 2 && strcmp(v[0], "corrupt") == 0)
		ok = corrupt(v[1]);
	else if (n == 2 && strcmp(v[0], "nonul") == 0)
		ok = no_nul(v[1]);
	else if (n == 2 && strcmp(v[0], "lookups") == 0)
		ok = strcmp(v[1], "off") == 0 && !(lookups = false);
	else if (n == 2 && strcmp(v[0], "churn") == 0)
		ok = (churn_left = strtoul(v[1], NULL, 10)) > 0;
	else if (n == 1 && strcmp(v[0], "swaps") == 0) {
		struct nscddb_stats st;
		nscddb_stats(maps[0], &st);
		printf("swaps %llu\n", (unsigned long long)st.swaps);
		ok = true;
	} else if (n == 1 && strcmp(v[0], "pause") == 0)
		ok = !(beating = lookups = false);
	else if (n == 2 && strcmp(v[0], "miss") == 0)
		ok = strcmp(v[1], "notfound") == 0 && (miss_found = 0, true);
	else if (n == 1 && strcmp(v[0], "stats") == 0) {
		printf("requests");
		for (int t = 0; t < REQ_TYPES; t++)
			if (requests[t])
				printf(" %d=%lu", t, requests[t]);
		printf("\n");
		ok = true;
	}
	printf("%s\n", ok ? "ok" : "error");
	fflush(stdout);
}

int main(int argc, char **argv)
{
	if (argc != 4 && argc != 5) {
		fprintf(stderr, "usage: nscd_mapserve SOCKET PASSWD GROUP [STALE_S]\n");
		return 2;
	}
	int64_t now = time(NULL);
	static struct group_line groups[MAX_FIELDS];
	passwd_path = argv[2];
	if (nscddb_open(NSCDDB_PASSWD, 1u << 20, &maps[0]) < 0 ||
	    nscddb_open(NSCDDB_GROUP, 1u << 20, &maps[1]) < 0 || load_passwd(argv[2], now) < 0) {
		fprintf(stderr, "nscd_mapserve: cannot build the maps\n");
		return 1;
	}
	put_groups(groups, load_groups(argv[3], groups, MAX_FIELDS), now);
	for (int db = 0; db < 2 && argc == 5; db++) {
		nscddb_set_stale(maps[db], atoi(argv[4]));
		nscddb_beat(maps[db], now);
	}
	int lfd = listen_on(argv[1]);
	if (lfd < 0) {
		perror("nscd_mapserve: listen");
		return 1;
	}
	printf("ready\n");
	fflush(stdout);
	char line[1024];
	for (;;) {
		struct pollfd p[2] = {{lfd, POLLIN, 0}, {0, POLLIN, 0}};
		if (poll(p, 2, churn_left ? 0 : 1000) < 0 && errno != EINTR)
			return 1;
		if (churn_left && load_passwd(passwd_path, time(NULL)) == 0)
			churn_left--;
		for (int db = 0; db < 2 && beating; db++)
			nscddb_beat(maps[db], time(NULL));
		if (p[0].revents & POLLIN)
			serve_one(lfd);
		if (p[1].revents & (POLLIN | POLLHUP)) {
			if (fgets(line, sizeof(line), stdin) == NULL)
				break;
			command(line);
		}
	}
	nscddb_close(maps[0]);
	nscddb_close(maps[1]);
	unlink(argv[1]);
	return 0;
}
