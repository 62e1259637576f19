/*
 * files provider: inotify on the directories that hold the configured
 * files, and on the files themselves. Watching the directory is what makes
 * a replace-by-rename (useradd, vipw, sed -i) visible: a watch on the file
 * stays on the old inode. Watching the file is what makes a write in place
 * to a file bind-mounted over the path visible (containers mount
 * /etc/passwd so; renaming over it is impossible): the kernel reports such
 * a write to the directory the file really lives in, not to ours. After
 * every change the file watches are set again, so they follow the inode
 * the path names now. Directory events are filtered by file name.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <unistd.h>

#include "files.h"

#define DIR_MASK                                                                                   \
	(IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_ATTRIB |        \
	 IN_MODIFY | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR)
#define FILE_MASK (IN_CLOSE_WRITE | IN_MODIFY | IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF)

struct watch_dir {
	char *path; /* directory */
	int wd;     /* -1 while missing */
	char **names;
	size_t nnames;
};

struct watch_file {
	char *path;
	int wd; /* -1 while the path names nothing */
};

struct files_watch {
	int fd;
	struct watch_dir *dirs;
	size_t ndirs;
	struct watch_file *files;
	size_t nfiles;
};

/* ==== setup ===================================================================== */

/* Split path into a malloc'd directory and a pointer to its base name. */
static int split_path(const char *path, char **dir, const char **base)
{
	const char *slash = strrchr(path, '/');
	*base = slash ? slash + 1 : path;
	if (!**base)
		return -EINVAL; /* "dir/": no file name */
	if (!slash)
		*dir = strdup(".");
	else if (slash == path)
		*dir = strdup("/");
	else
		*dir = strndup(path, (size_t)(slash - path));
	return *dir ? 0 : -ENOMEM;
}

static struct watch_dir *find_dir(struct files_watch *w, const char *dir)
{
	for (size_t i = 0; i < w->ndirs; i++)
		if (strcmp(w->dirs[i].path, dir) == 0)
			return &w->dirs[i];
	return NULL;
}

static int add_name(struct watch_dir *wd, const char *base)
{
	for (size_t i = 0; i < wd->nnames; i++)
		if (strcmp(wd->names[i], base) == 0)
			return 0;
	char **p = realloc(wd->names, (wd->nnames + 1) * sizeof(*p));
	if (!p)
		return -ENOMEM;
	wd->names = p;
	if (!(p[wd->nnames] = strdup(base)))
		return -ENOMEM;
	wd->nnames++;
	return 0;
}

static int add_file(struct files_watch *w, const char *path)
{
	for (size_t i = 0; i < w->nfiles; i++)
		if (strcmp(w->files[i].path, path) == 0)
			return 0;
	struct watch_file *p = realloc(w->files, (w->nfiles + 1) * sizeof(*p));
	if (!p)
		return -ENOMEM;
	w->files = p;
	if (!(p[w->nfiles].path = strdup(path)))
		return -ENOMEM;
	p[w->nfiles++].wd = -1;
	return 0;
}

static int add_path(struct files_watch *w, const char *path)
{
	char *dir;
	const char *base;
	int rc = add_file(w, path);
	if (!rc)
		rc = split_path(path, &dir, &base);
	if (rc)
		return rc;
	struct watch_dir *wd = find_dir(w, dir);
	if (wd) {
		free(dir);
		return add_name(wd, base);
	}
	struct watch_dir *p = realloc(w->dirs, (w->ndirs + 1) * sizeof(*p));
	if (!p) {
		free(dir);
		return -ENOMEM;
	}
	w->dirs = p;
	wd = &w->dirs[w->ndirs++];
	*wd = (struct watch_dir){dir, -1, NULL, 0};
	return add_name(wd, base);
}

/* Try to watch a directory; a missing one stays at wd -1 without error. */
static int arm_dir(struct files_watch *w, struct watch_dir *wd)
{
	int r = inotify_add_watch(w->fd, wd->path, DIR_MASK);
	if (r >= 0) {
		wd->wd = r;
		return 0;
	}
	if (errno == ENOENT || errno == ENOTDIR)
		return 0;
	return -errno;
}

/* Watch each file's current inode; a watch left on an inode the path no
 * longer names is removed. A file that does not exist is no error. */
static int arm_files(struct files_watch *w)
{
	for (size_t i = 0; i < w->nfiles; i++) {
		struct watch_file *f = &w->files[i];
		int r = inotify_add_watch(w->fd, f->path, FILE_MASK);
		if (r < 0 && errno != ENOENT && errno != ENOTDIR && errno != EACCES)
			return -errno;
		if (f->wd >= 0 && f->wd != r)
			inotify_rm_watch(w->fd, f->wd);
		f->wd = r < 0 ? -1 : r;
	}
	return 0;
}

int files_watch_open(const char *const *paths, size_t n, struct files_watch **out,
		     struct idc_diag *d)
{
	struct files_watch *w = calloc(1, sizeof(*w));
	if (!w)
		return idc_diag_set(d, -ENOMEM, "files watch: out of memory");
	w->fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	int rc = w->fd < 0 ? -errno : 0;
	if (rc)
		idc_diag_set(d, rc, "inotify_init1: %s", idc_strerror(rc));
	for (size_t i = 0; rc == 0 && i < n; i++)
		if ((rc = add_path(w, paths[i])) != 0)
			idc_diag_set(d, rc, "files watch: %s: %s", paths[i], idc_strerror(rc));
	for (size_t i = 0; rc == 0 && i < w->ndirs; i++)
		if ((rc = arm_dir(w, &w->dirs[i])) != 0)
			idc_diag_set(d, rc, "inotify_add_watch %s: %s", w->dirs[i].path,
				     idc_strerror(rc));
	if (rc == 0 && (rc = arm_files(w)) != 0)
		idc_diag_set(d, rc, "inotify_add_watch: %s", idc_strerror(rc));
	if (rc) {
		files_watch_close(w);
		return rc;
	}
	*out = w;
	return 0;
}

void files_watch_close(struct files_watch *w)
{
	if (!w)
		return;
	if (w->fd >= 0)
		close(w->fd);
	for (size_t i = 0; i < w->ndirs; i++) {
		for (size_t j = 0; j < w->dirs[i].nnames; j++)
			free(w->dirs[i].names[j]);
		free(w->dirs[i].names);
		free(w->dirs[i].path);
	}
	free(w->dirs);
	for (size_t i = 0; i < w->nfiles; i++)
		free(w->files[i].path);
	free(w->files);
	free(w);
}

int files_watch_fd(const struct files_watch *w)
{
	return w->fd;
}

size_t files_watch_missing(const struct files_watch *w)
{
	size_t n = 0;
	for (size_t i = 0; i < w->ndirs; i++)
		n += w->dirs[i].wd < 0;
	return n;
}

int files_watch_retry(struct files_watch *w, unsigned *ev)
{
	*ev = 0;
	for (size_t i = 0; i < w->ndirs; i++) {
		if (w->dirs[i].wd >= 0)
			continue;
		int rc = arm_dir(w, &w->dirs[i]);
		if (rc)
			return rc;
		if (w->dirs[i].wd >= 0)
			*ev |= FILES_EV_RESCAN;
	}
	int rc = *ev ? arm_files(w) : 0;
	return rc ? rc : (int)files_watch_missing(w);
}

/* ==== events ====================================================================== */

static struct watch_dir *dir_by_wd(struct files_watch *w, int wd)
{
	for (size_t i = 0; i < w->ndirs; i++)
		if (w->dirs[i].wd == wd)
			return &w->dirs[i];
	return NULL;
}

static bool name_watched(const struct watch_dir *wd, const char *name)
{
	for (size_t i = 0; i < wd->nnames; i++)
		if (strcmp(wd->names[i], name) == 0)
			return true;
	return false;
}

static struct watch_file *file_by_wd(struct files_watch *w, int wd)
{
	for (size_t i = 0; i < w->nfiles; i++)
		if (w->files[i].wd == wd)
			return &w->files[i];
	return NULL;
}

/* An event on a watched file itself. */
static unsigned classify_file(struct watch_file *f, const struct inotify_event *e)
{
	if (e->mask & IN_IGNORED)
		f->wd = -1; /* its inode is gone: set again after this drain */
	if (e->mask == IN_MODIFY)
		return FILES_EV_WRITING;
	return FILES_EV_CHANGED;
}

/* FILES_EV_* bits for one event. */
static unsigned classify(struct files_watch *w, const struct inotify_event *e)
{
	if (e->mask & IN_Q_OVERFLOW)
		return FILES_EV_RESCAN;
	struct watch_file *f = file_by_wd(w, e->wd);
	if (f)
		return classify_file(f, e);
	struct watch_dir *wd = dir_by_wd(w, e->wd);
	if (!wd)
		return 0;
	if (e->mask & (IN_IGNORED | IN_DELETE_SELF | IN_MOVE_SELF)) {
		/* the directory went away: its files are gone too */
		if (!(e->mask & IN_IGNORED))
			inotify_rm_watch(w->fd, wd->wd);
		wd->wd = -1; /* files_watch_retry watches it again once it is back */
		return FILES_EV_RESCAN;
	}
	if (!e->len || !name_watched(wd, e->name))
		return 0;
	if (e->mask == IN_MODIFY)
		return FILES_EV_WRITING;
	return FILES_EV_CHANGED;
}

int files_watch_drain(struct files_watch *w, unsigned *ev)
{
	char buf[16 * (sizeof(struct inotify_event) + NAME_MAX + 1)]
	    __attribute__((aligned(__alignof__(struct inotify_event))));
	*ev = 0;
	for (;;) {
		ssize_t n = read(w->fd, buf, sizeof(buf));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return *ev & (FILES_EV_CHANGED | FILES_EV_RESCAN) ? arm_files(w) : 0;
		if (n < 0)
			return -errno;
		for (ssize_t off = 0; off + (ssize_t)sizeof(struct inotify_event) <= n;) {
			const struct inotify_event *e = (const void *)(buf + off);
			if (off + (ssize_t)(sizeof(*e) + e->len) > n)
				break; /* cannot happen: the kernel returns whole events */
			*ev |= classify(w, e);
			off += (ssize_t)(sizeof(*e) + e->len);
		}
		if (n == 0)
			return *ev & (FILES_EV_CHANGED | FILES_EV_RESCAN) ? arm_files(w) : 0;
	}
}
