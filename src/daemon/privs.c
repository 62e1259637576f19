/*
 * privs: the daemon's directories and giving up root.
 *
 * Started as root, idcached looks its user up first, creates and chowns
 * its directories, creates its sockets, then drops to the user in
 * OpenBSD's order: setgroups, setresgid, setresuid — each failure fatal —
 * and checks that root cannot be regained.
 *
 * The user and its groups are read from /etc/passwd and /etc/group
 * themselves (fgetpwent, fgetgrent): through NSS, "passwd: idcache" alone
 * would ask our own module, whose daemon is this process, not serving yet,
 * and the lookup would fail. Only a user the files do not hold is asked of
 * NSS (before our sockets exist, so our module falls through at once).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/daemon.h"

#define PRIVS_MAX_GROUPS 256
#define PRIVS_PASSWD     "/etc/passwd"
#define PRIVS_GROUP      "/etc/group"

/* user's uid and gid from the passwd file itself; -ENOENT when it has no
 * such line (or cannot be read). */
static int file_user(const char *user, uid_t *uid, gid_t *gid)
{
	FILE *f = fopen(PRIVS_PASSWD, "re");
	if (!f)
		return -ENOENT;
	struct passwd *pw;
	int rc = -ENOENT;
	while (rc && (pw = fgetpwent(f)) != NULL) {
		if (strcmp(pw->pw_name, user) != 0)
			continue;
		*uid = pw->pw_uid;
		*gid = pw->pw_gid;
		rc = 0;
	}
	fclose(f);
	return rc;
}

static bool listed(char *const *mem, const char *user)
{
	for (; mem && *mem; mem++)
		if (strcmp(*mem, user) == 0)
			return true;
	return false;
}

/* The primary gid, then the gids of the group file's groups that list
 * user (each once), as initgroups would give them from files. */
static int file_groups(const char *user, struct privs *p)
{
	p->groups = calloc(PRIVS_MAX_GROUPS, sizeof(*p->groups));
	if (!p->groups)
		return -ENOMEM;
	p->groups[0] = p->gid;
	p->ngroups = 1;
	FILE *f = fopen(PRIVS_GROUP, "re");
	struct group *gr;
	while (f && p->ngroups < PRIVS_MAX_GROUPS && (gr = fgetgrent(f)) != NULL) {
		bool seen = false;
		for (int i = 0; i < p->ngroups && !seen; i++)
			seen = p->groups[i] == gr->gr_gid;
		if (!seen && listed(gr->gr_mem, user))
			p->groups[p->ngroups++] = gr->gr_gid;
	}
	if (f)
		fclose(f);
	return 0;
}

static int lookup_groups(const char *user, struct privs *p)
{
	int n = PRIVS_MAX_GROUPS;
	p->groups = calloc((size_t)n, sizeof(*p->groups));
	if (!p->groups)
		return -ENOMEM;
	if (getgrouplist(user, p->gid, p->groups, &n) < 0) {
		/* more groups than we care to carry: the primary one suffices
		 * for reading world-readable files */
		p->groups[0] = p->gid;
		n = 1;
	}
	p->ngroups = n;
	return 0;
}

int privs_find_user(const char *user, uid_t *uid, gid_t *gid, bool *in_files)
{
	*in_files = file_user(user, uid, gid) == 0;
	if (*in_files)
		return 0;
	errno = 0;
	struct passwd *pw = getpwnam(user);
	if (!pw)
		return errno ? -errno : -ENOENT;
	*uid = pw->pw_uid;
	*gid = pw->pw_gid;
	return 0;
}

int privs_prepare(const char *user, struct privs *p)
{
	memset(p, 0, sizeof(*p));
	if (geteuid() != 0)
		return 0;
	bool in_files;
	int rc = privs_find_user(user, &p->uid, &p->gid, &in_files);
	if (rc) {
		idc_log(IDC_LOG_ERR,
			"user '%s' does not exist in " PRIVS_PASSWD
			" (create it: useradd --system %s)",
			user, user);
		return rc;
	}
	if (p->uid == 0) {
		/* an explicit choice (tests in a private directory); say so */
		idc_log(IDC_LOG_WARN, "user = %s: keeping root privileges", user);
		return 0;
	}
	p->drop = true;
	return in_files ? file_groups(user, p) : lookup_groups(user, p);
}

void privs_free(struct privs *p)
{
	free(p->groups);
	p->groups = NULL;
}

/* mkdir -p path: parents 0755, path itself mode. Modes are set exactly:
 * the daemon runs under umask 077. */
static int make_dirs(const char *path, mode_t mode)
{
	char buf[PATH_MAX];
	if (snprintf(buf, sizeof(buf), "%s", path) >= (int)sizeof(buf))
		return -ENAMETOOLONG;
	for (char *s = buf + 1;; s++) {
		if (*s != '/' && *s != '\0')
			continue;
		char saved = *s;
		*s = '\0';
		if (mkdir(buf, 0755) == 0) {
			if (chmod(buf, saved ? 0755 : mode) < 0)
				return -errno;
		} else if (errno != EEXIST) {
			return -errno;
		}
		*s = saved;
		if (!saved)
			break;
	}
	struct stat st;
	if (stat(path, &st) < 0)
		return -errno;
	return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
}

int privs_chown_path(const struct privs *p, const char *path)
{
	/* lchown: a symlink planted in our directory must not hand some
	 * other file to the daemon's user */
	if (p->drop && lchown(path, p->uid, p->gid) < 0)
		return -errno;
	return 0;
}

/* Own (when dropping) and make private (0700 or 0600) the directory or
 * file open at fd. */
static int secure_fd(const struct privs *p, int fd, bool dir)
{
	if (p->drop && fchown(fd, p->uid, p->gid) < 0)
		return -errno;
	return fchmod(fd, dir ? 0700 : 0600) < 0 ? -errno : 0;
}

/* A non-directory entry: opened without following a symlink and without
 * blocking on a FIFO, and only a regular file is changed. */
static int secure_file_at(const struct privs *p, int dfd, const char *name)
{
	int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT || errno == ELOOP ? 0 : -errno;
	struct stat st;
	int rc = fstat(fd, &st) < 0 ? -errno : S_ISREG(st.st_mode) ? secure_fd(p, fd, false) : 0;
	close(fd);
	return rc;
}

/* Secure the directory open at dfd and its entries, subdirectories down
 * to depth. Everything below the top goes through the directory fd with
 * O_NOFOLLOW: an entry the daemon's user swaps for a symlink between
 * readdir and chown cannot redirect root's chown or chmod. */
static int secure_at(const struct privs *p, int dfd, int depth)
{
	int rc = secure_fd(p, dfd, true);
	if (rc || depth == 0)
		return rc;
	int lfd = dup(dfd);
	DIR *d = lfd >= 0 ? fdopendir(lfd) : NULL;
	if (!d) {
		rc = -errno;
		if (lfd >= 0)
			close(lfd);
		return rc;
	}
	struct dirent *e;
	while (rc == 0 && (e = readdir(d))) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		int sub = openat(dfd, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (sub >= 0) {
			rc = secure_at(p, sub, depth - 1);
			close(sub);
		} else {
			rc = secure_file_at(p, dfd, e->d_name);
		}
	}
	closedir(d);
	return rc;
}

static int secure_tree(const struct privs *p, const char *dir, int depth)
{
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return -errno;
	int rc = secure_at(p, dfd, depth);
	close(dfd);
	return rc;
}

int privs_make_shared_dir(const char *path)
{
	int rc = make_dirs(path, 0755);
	if (rc < 0)
		idc_log(IDC_LOG_ERR, "%s: %s", path, idc_strerror(rc));
	return rc;
}

int privs_make_dir(const struct privs *p, const char *path, bool private_tree)
{
	int rc = make_dirs(path, private_tree ? 0700 : 0755);
	if (rc == 0 && private_tree)
		rc = secure_tree(p, path, 2);
	else if (rc == 0)
		rc = privs_chown_path(p, path);
	if (rc < 0)
		idc_log(IDC_LOG_ERR, "%s: %s", path, idc_strerror(rc));
	return rc;
}

int privs_drop(const struct privs *p)
{
	if (!p->drop)
		return 0;
	if (setgroups((size_t)p->ngroups, p->groups) < 0 || setresgid(p->gid, p->gid, p->gid) < 0 ||
	    setresuid(p->uid, p->uid, p->uid) < 0) {
		int rc = -errno;
		idc_log(IDC_LOG_ERR, "cannot drop privileges to uid %u: %s", (unsigned)p->uid,
			idc_strerror(rc));
		return rc;
	}
	if (setuid(0) == 0 || geteuid() == 0 || getegid() != p->gid) {
		idc_log(IDC_LOG_ERR, "privileges could be regained after dropping them");
		return -EPERM;
	}
	return 0;
}
