/*
 * peers: what each client uid holds — its nss.sock connections and its
 * MCMAP replies whose descriptors may still be unread — so that one local
 * user cannot take what everyone needs (connection slots, the descriptors
 * the kernel lets us have in flight).
 *
 * Owns: a small hash table of struct peer, one per uid holding anything
 * (an entry goes when it holds nothing), and the sockets of closed
 * connections whose map descriptors are still unread (lingerers).
 * Threads: the loop thread only.
 *
 * Unread map descriptors: the kernel lets a sender have at most its
 * open-file limit of descriptors in flight, counted per user, and those
 * of an MCMAP reply stay in flight until the client reads it, even after
 * we close our end. Whether it has is what SIOCOUTQ tells: the bytes we
 * sent that the peer has not consumed. A connection closed before that
 * keeps its socket here, shut both ways, until the count drops (the peer
 * read or closed); so a uid's unread replies stay counted however long it
 * holds them, and past max_unread_maps_per_uid it gets no more.
 */
#include <linux/sockios.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include "daemon/daemon.h"

struct lingerer {
	int fd;
	struct peer *peer;
	struct lingerer *next;
};

#define PEERS_BUCKETS 256u

struct peers {
	struct peer *bucket[PEERS_BUCKETS];
	struct lingerer *lingerers;
	size_t unread;       /* unread MCMAP replies, every uid */
	size_t unread_max;   /* of those, at most (from the open-file limit) */
	uint64_t checked_ns; /* last full check at the global limit */
	uint64_t warned_ns;  /* last warning about the global limit */
};

static struct peers *peers_of(struct daemon *dm)
{
	if (!dm->peers)
		dm->peers = calloc(1, sizeof(*dm->peers));
	return dm->peers;
}

/* Unread replies allowed, all uids together: three descriptors each, and
 * half of the open-file limit (which a reload may raise) kept for the rest. */
static size_t unread_max(void)
{
	struct rlimit rl;
	rlim_t lim = getrlimit(RLIMIT_NOFILE, &rl) == 0 ? rl.rlim_cur : 1024;
	return lim / 6 > 0 ? (size_t)(lim / 6) : 1;
}

static unsigned slot(uid_t uid)
{
	return ((uint32_t)uid * 2654435761u) >> 24; /* Fibonacci hashing: 8 bits */
}

struct peer *peer_find(struct daemon *dm, uid_t uid)
{
	if (!dm->peers)
		return NULL;
	for (struct peer *p = dm->peers->bucket[slot(uid)]; p; p = p->next)
		if (p->uid == uid)
			return p;
	return NULL;
}

struct peer *peer_get(struct daemon *dm, uid_t uid)
{
	struct peer *p = peer_find(dm, uid);
	if (p)
		return p;
	if (!peers_of(dm))
		return NULL;
	if (!(p = calloc(1, sizeof(*p))))
		return NULL;
	p->uid = uid;
	p->next = dm->peers->bucket[slot(uid)];
	dm->peers->bucket[slot(uid)] = p;
	return p;
}

void peer_put(struct daemon *dm, struct peer *p)
{
	if (!p || p->conns || p->unread_maps)
		return;
	for (struct peer **pp = &dm->peers->bucket[slot(p->uid)]; *pp; pp = &(*pp)->next)
		if (*pp == p) {
			*pp = p->next;
			free(p);
			return;
		}
}

static bool due(uint64_t *last_ns, uint64_t every_ms)
{
	uint64_t now = idc_now_ns();
	if (*last_ns && now - *last_ns < every_ms * 1000000u)
		return false;
	*last_ns = now;
	return true;
}

bool peer_warn_due(struct peer *p)
{
	return due(&p->warned_ns, DAEMON_WARN_MS);
}

/* ==== unread map descriptors ====================================================== */

/* Whether the peer consumed everything we sent (on doubt: no). */
static bool all_read(int fd)
{
	int queued = 0;
	return ioctl(fd, SIOCOUTQ, &queued) == 0 && queued == 0;
}

static void unread_done(struct daemon *dm, struct peer *p)
{
	p->unread_maps--;
	dm->peers->unread--;
}

void peer_maps_sent(struct conn *c)
{
	if (!c->peer || c->maps_unread)
		return;
	c->maps_unread = true;
	c->peer->unread_maps++;
	c->dm->peers->unread++;
}

/* Update c's unread reply. Whether it is still unread. */
static bool conn_check(struct conn *c)
{
	if (c->maps_unread && c->io.fd >= 0 && all_read(c->io.fd)) {
		c->maps_unread = false;
		unread_done(c->dm, c->peer);
	}
	return c->maps_unread;
}

/* Close the lingerers that are done, of peer p only unless NULL. */
static void lingerers_check(struct daemon *dm, const struct peer *p)
{
	for (struct lingerer **lp = &dm->peers->lingerers, *l; (l = *lp);) {
		if ((p && l->peer != p) || !all_read(l->fd)) {
			lp = &l->next;
			continue;
		}
		*lp = l->next;
		reaper_close_socket(dm, l->fd);
		unread_done(dm, l->peer);
		peer_put(dm, l->peer);
		free(l);
	}
}

/* Re-check what p (NULL: everyone) holds unread. */
static void unread_check(struct daemon *dm, const struct peer *p)
{
	for (struct conn *c = dm->conns; c; c = c->next)
		if (c->maps_unread && (!p || c->peer == p))
			conn_check(c);
	lingerers_check(dm, p);
}

size_t peers_unread(const struct daemon *dm)
{
	return dm->peers ? dm->peers->unread : 0;
}

void peers_sweep(struct daemon *dm)
{
	if (dm->peers && dm->peers->unread)
		unread_check(dm, NULL);
}

bool peer_linger(struct conn *c)
{
	if (!c->peer || !conn_check(c))
		return false;
	struct lingerer *l = calloc(1, sizeof(*l));
	if (!l) { /* counted as read: the kernel's own limit still holds */
		c->maps_unread = false;
		unread_done(c->dm, c->peer);
		return false;
	}
	(void)shutdown(c->io.fd, SHUT_RDWR);
	l->fd = c->io.fd;
	l->peer = c->peer;
	l->peer->conns--; /* no longer a connection; the account stays (unread_maps) */
	c->peer = NULL;
	loop_io_forget(&c->io);
	l->next = c->dm->peers->lingerers;
	c->dm->peers->lingerers = l;
	return true;
}

/* A refusal: counted, and logged once per interval (per uid, or for the
 * global limit). */
static bool refuse_map(struct conn *c, bool global)
{
	struct daemon *dm = c->dm;
	dm->mcmap_refused++;
	if (global && due(&dm->peers->warned_ns, DAEMON_WARN_MS))
		idc_log(IDC_LOG_WARN,
			"%zu memory-cache replies are unread, the most the open-file limit allows: "
			"refusing the maps to uid %d and others",
			dm->peers->unread, (int)c->peer_uid);
	else if (!global && due(&c->peer->warned_maps_ns, DAEMON_WARN_MS))
		idc_log(IDC_LOG_WARN,
			"uid %d holds %u unread memory-cache replies (max_unread_maps_per_uid): "
			"refusing it the maps (pid %d)",
			(int)c->peer_uid, c->peer->unread_maps, (int)c->peer_pid);
	return false;
}

void peer_maps_failed(struct conn *c)
{
	struct daemon *dm = c->dm;
	dm->mcmap_failed++;
	if (peers_of(dm) && due(&dm->peers->warned_ns, DAEMON_WARN_MS))
		idc_log(
		    IDC_LOG_WARN,
		    "cannot pass the memory-cache maps to uid %d: too many descriptors in flight "
		    "(%llu such failures)",
		    (int)c->peer_uid, (unsigned long long)dm->mcmap_failed);
}

bool peer_may_map(struct conn *c)
{
	struct daemon *dm = c->dm;
	if (!c->peer)
		return false;
	if (c->peer->unread_maps >= dm->cfg->limits.max_unread_maps_per_uid)
		unread_check(dm, c->peer);
	if (c->peer->unread_maps >= dm->cfg->limits.max_unread_maps_per_uid)
		return refuse_map(c, false);
	/* a full check costs an ioctl per holder: at most once a second */
	size_t max = unread_max();
	if (dm->peers->unread >= max && due(&dm->peers->checked_ns, 1000))
		unread_check(dm, NULL);
	if (dm->peers->unread >= max)
		return refuse_map(c, true);
	return true;
}

void peers_free(struct daemon *dm)
{
	if (!dm->peers)
		return;
	for (struct lingerer *l = dm->peers->lingerers, *next; l; l = next) {
		next = l->next;
		reaper_close_socket(dm, l->fd);
		free(l);
	}
	for (unsigned i = 0; i < PEERS_BUCKETS; i++)
		for (struct peer *p = dm->peers->bucket[i], *next; p; p = next) {
			next = p->next;
			free(p);
		}
	free(dm->peers);
	dm->peers = NULL;
}
