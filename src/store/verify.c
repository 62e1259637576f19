/* verify: whether an LMDB file may be trusted before LMDB maps it, and the
 * clean-shutdown marker that lets a start skip the slow part.
 *
 * LMDB trusts its files: a page number past the end of the file faults
 * (SIGBUS) the process that follows it, a scrambled page can send it
 * anywhere (SIGSEGV). So the meta pages are parsed here from bytes read with
 * pread, every field bounded; everything beyond them is read by a child
 * process, which may die in our place. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "store_int.h"

/* LMDB 0.9's on-disk layout (a 64-bit build: pgno_t and size_t are 8
 * bytes). A page starts with a 16-byte header: pgno (8), pad (2), flags
 * (2), lower/upper (4). A meta page's body follows it. */
#define LM_PAGEHDR   16
#define LM_P_META    0x08
#define LM_MAGIC     0xBEEFC0DEu
#define LM_VERSION   1u
#define LM_P_INVALID UINT64_MAX
#define LM_PGNO_MAX  ((UINT64_C(1) << 48) - 1) /* nodes keep 48 bits of a pgno */
#define LM_DEPTH_MAX 32                        /* LMDB's cursor stack */
/* offsets in the meta body */
#define LM_M_MAGIC   0
#define LM_M_VERSION 4
#define LM_M_MAPSIZE 16
#define LM_M_DBS     24 /* two MDB_db of 48 bytes: the free list, the main db */
#define LM_M_LASTPG  120
#define LM_M_TXNID   128
#define LM_M_END     136
/* offsets in an MDB_db */
#define LM_D_PAD   0 /* of the free db: the page size */
#define LM_D_DEPTH 6
#define LM_D_PAGES 8 /* branch, leaf, overflow page counts */
#define LM_D_ROOT  40
#define LM_D_SIZE  48

#define LM_META_BYTES (LM_PAGEHDR + LM_M_END) /* what is read of a meta page */

static const char *const lm_db_name[2] = {"free-list", "main"};

static uint16_t get16(const uint8_t *p)
{
	uint16_t v;
	memcpy(&v, p, sizeof(v));
	return v;
}

static uint32_t get32(const uint8_t *p)
{
	uint32_t v;
	memcpy(&v, p, sizeof(v));
	return v;
}

static uint64_t get64(const uint8_t *p)
{
	uint64_t v;
	memcpy(&v, p, sizeof(v));
	return v;
}

/* ==== meta pages ============================================================== */

static int meta_db_check(const uint8_t *db, int i, uint64_t last_pg, uint64_t *root,
			 struct idc_diag *d, int which)
{
	*root = get64(db + LM_D_ROOT);
	unsigned depth = get16(db + LM_D_DEPTH);
	if (*root == LM_P_INVALID)
		return depth == 0 ? 0
				  : idc_diag_set(d, IDC_ECORRUPT,
						 "meta page %d: empty %s database of depth %u",
						 which, lm_db_name[i], depth);
	if (*root < 2 || *root > last_pg)
		return idc_diag_set(
		    d, IDC_ECORRUPT, "meta page %d: %s database root page %llu outside 2..%llu",
		    which, lm_db_name[i], (unsigned long long)*root, (unsigned long long)last_pg);
	if (depth < 1 || depth > LM_DEPTH_MAX)
		return idc_diag_set(d, IDC_ECORRUPT, "meta page %d: %s database depth %u", which,
				    lm_db_name[i], depth);
	for (int k = 0; k < 3; k++)
		if (get64(db + LM_D_PAGES + 8 * k) > last_pg)
			return idc_diag_set(d, IDC_ECORRUPT,
					    "meta page %d: %s database counts more pages than "
					    "the file has",
					    which, lm_db_name[i]);
	return 0;
}

/* One meta page (page number `which`, LM_META_BYTES at p). */
static int meta_parse_one(const uint8_t *p, int which, struct store_lmdb_meta *m,
			  struct idc_diag *d)
{
	const uint8_t *b = p + LM_PAGEHDR;
	if (get64(p) != (uint64_t)which || !(get16(p + 10) & LM_P_META))
		return idc_diag_set(d, IDC_ECORRUPT, "page %d is not a meta page", which);
	if (get32(b + LM_M_MAGIC) != LM_MAGIC)
		return idc_diag_set(d, IDC_ECORRUPT, "meta page %d: no LMDB magic number", which);
	if (get32(b + LM_M_VERSION) != LM_VERSION)
		return idc_diag_set(d, IDC_ECORRUPT, "meta page %d: LMDB data version %u, not %u",
				    which, get32(b + LM_M_VERSION), LM_VERSION);
	m->psize = get32(b + LM_M_DBS + LM_D_PAD);
	if (m->psize < 512 || m->psize > 65536 || (m->psize & (m->psize - 1)))
		return idc_diag_set(d, IDC_ECORRUPT, "meta page %d: page size %u", which, m->psize);
	m->mapsize = get64(b + LM_M_MAPSIZE);
	m->last_pg = get64(b + LM_M_LASTPG);
	m->txnid = get64(b + LM_M_TXNID);
	if (m->mapsize == 0 || m->last_pg < 1 || m->last_pg > LM_PGNO_MAX)
		return idc_diag_set(d, IDC_ECORRUPT, "meta page %d: map size %llu, last page %llu",
				    which, (unsigned long long)m->mapsize,
				    (unsigned long long)m->last_pg);
	for (int i = 0; i < 2; i++) {
		int rc = meta_db_check(b + LM_M_DBS + LM_D_SIZE * i, i, m->last_pg, &m->root[i], d,
				       which);
		if (rc)
			return rc;
	}
	return 0;
}

/* Both meta pages must be sound (LMDB refuses a file otherwise); the one
 * with the higher transaction id is the one LMDB will use. */
static int meta_pick(const struct store_lmdb_meta *m0, const uint8_t *p1,
		     struct store_lmdb_meta *out, struct idc_diag *d)
{
	struct store_lmdb_meta m1 = {0};
	int rc = meta_parse_one(p1, 1, &m1, d);
	if (!rc && m0->psize != m1.psize)
		rc = idc_diag_set(d, IDC_ECORRUPT, "the meta pages disagree on the page size");
	if (!rc)
		*out = m1.txnid > m0->txnid ? m1 : *m0;
	return rc;
}

int store_lmdb_meta_parse(const void *buf, size_t len, struct store_lmdb_meta *out,
			  struct idc_diag *d)
{
	const uint8_t *p = buf;
	struct store_lmdb_meta m0 = {0};
	if (len < LM_META_BYTES)
		return idc_diag_set(d, IDC_ECORRUPT, "%zu bytes: shorter than a meta page", len);
	int rc = meta_parse_one(p, 0, &m0, d);
	if (rc)
		return rc;
	if (m0.psize > len - LM_META_BYTES)
		return idc_diag_set(d, IDC_ECORRUPT, "%zu bytes: the second meta page is missing",
				    len);
	return meta_pick(&m0, p + m0.psize, out, d);
}

/* ==== a file against its meta pages ==================================================== */

static int read_exact(int fd, uint8_t *buf, size_t n, off_t off)
{
	ssize_t got = pread(fd, buf, n, off);
	if (got < 0)
		return -errno;
	return (size_t)got == n ? 0 : IDC_ECORRUPT;
}

int store_lmdb_fd_check(int fd, struct store_lmdb_meta *out, struct idc_diag *d)
{
	struct stat st;
	uint8_t p0[LM_META_BYTES], p1[LM_META_BYTES];
	if (fstat(fd, &st) < 0)
		return idc_diag_set(d, -errno, "%s", strerror(errno));
	if (st.st_size == 0)
		return idc_diag_set(d, IDC_ECORRUPT, "the file is empty");
	int rc = read_exact(fd, p0, sizeof(p0), 0);
	if (rc)
		return idc_diag_set(
		    d, rc, "%s", rc == IDC_ECORRUPT ? "shorter than a meta page" : strerror(-rc));
	struct store_lmdb_meta m0 = {0};
	if ((rc = meta_parse_one(p0, 0, &m0, d)))
		return rc;
	if ((rc = read_exact(fd, p1, sizeof(p1), m0.psize)))
		return idc_diag_set(d, rc, "%s",
				    rc == IDC_ECORRUPT ? "the second meta page is missing"
						       : strerror(-rc));
	if ((rc = meta_pick(&m0, p1, out, d)))
		return rc;
	out->file_size = (uint64_t)st.st_size;
	uint64_t pages = out->file_size / out->psize;
	for (int i = 0; i < 2; i++)
		if (out->root[i] != LM_P_INVALID && out->root[i] >= pages)
			return idc_diag_set(d, IDC_ECORRUPT,
					    "the %s database's root page %llu lies past the end "
					    "of the file (%llu pages): truncated",
					    lm_db_name[i], (unsigned long long)out->root[i],
					    (unsigned long long)pages);
	/* Pages allocated and freed again in one transaction are never
	 * written, so a sound file can end before last_pg: not damage by
	 * itself, but a reason to read every page (store_verify). */
	out->covered = pages > out->last_pg;
	return 0;
}

int store_lmdb_file_check(const char *path, struct store_lmdb_meta *out, struct idc_diag *d)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return idc_diag_set(d, -errno, "%s: %s", path, strerror(errno));
	int rc = store_lmdb_fd_check(fd, out, d);
	close(fd);
	if (rc)
		idc_diag_prefix(d, "%s: ", path);
	return rc;
}

/* ==== reading every page, in a child process ============================================ */

struct walk {
	FILE *out; /* "F fault" and "E code reason" lines to the parent */
	long faults;
	uint64_t budget; /* records left: more than the file can hold is a loop */
	uint64_t last_pg;
	unsigned sum; /* what touching the bytes read; keeps the reads */
	struct store_scratch sc;
};

static void walk_fault(struct walk *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void walk_fault(struct walk *w, const char *fmt, ...)
{
	char line[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	w->faults++;
	fprintf(w->out, "F %s\n", line);
}

static void emit_fault(const char *fault, void *arg)
{
	struct walk *w = arg;
	walk_fault(w, "%s", fault);
}

/* Read one byte per page of v and its last: every page it spans is
 * mapped in, so a missing or unreadable one faults here, in the child. */
static void touch(struct walk *w, MDB_val v)
{
	const volatile uint8_t *p = v.mv_data;
	for (size_t i = 0; i < v.mv_size; i += 4096)
		w->sum += p[i];
	if (v.mv_size)
		w->sum += p[v.mv_size - 1];
}

typedef void (*walk_fn)(struct walk *w, MDB_val k, MDB_val v);

/* A free-list record: a transaction id, then a count and that many page
 * numbers, each one LMDB may hand out again. */
static void walk_free_record(struct walk *w, MDB_val k, MDB_val v)
{
	uint64_t n, pg;
	if (k.mv_size != sizeof(uint64_t) || v.mv_size < sizeof(n) || v.mv_size % sizeof(n)) {
		walk_fault(w, "free list: record of %zu bytes", v.mv_size);
		return;
	}
	memcpy(&n, v.mv_data, sizeof(n));
	if (n > v.mv_size / sizeof(n) - 1) {
		walk_fault(w, "free list: record claims %llu pages", (unsigned long long)n);
		return;
	}
	for (uint64_t i = 1; i <= n; i++) {
		memcpy(&pg, (const uint8_t *)v.mv_data + i * sizeof(pg), sizeof(pg));
		if (pg < 2 || pg > w->last_pg) {
			walk_fault(w, "free list: page %llu outside 2..%llu",
				   (unsigned long long)pg, (unsigned long long)w->last_pg);
			return;
		}
	}
}

static void walk_entry_record(struct walk *w, MDB_val k, MDB_val v)
{
	size_t id;
	struct store_entry e;
	struct store_val ndn;
	if (k.mv_size != sizeof(id)) {
		walk_fault(w, "id2entry: key of %zu bytes", k.mv_size);
		return;
	}
	memcpy(&id, k.mv_data, sizeof(id));
	if (store_entry_decode(v.mv_data, v.mv_size, id, &w->sc, &e, &ndn) != 0)
		walk_fault(w, "entry %zu: record does not decode", id);
}

static void walk_db(struct walk *w, MDB_txn *txn, MDB_dbi dbi, const char *name, walk_fn fn)
{
	MDB_cursor *cur;
	MDB_val k, v;
	int rc = mdb_cursor_open(txn, dbi, &cur);
	if (rc) {
		walk_fault(w, "%s: %s", name, mdb_strerror(rc));
		return;
	}
	for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0;
	     rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
		if (w->budget-- == 0) {
			walk_fault(w, "%s: more records than the file can hold", name);
			rc = MDB_NOTFOUND;
			break;
		}
		touch(w, k);
		touch(w, v);
		if (fn)
			fn(w, k, v);
	}
	if (rc != MDB_NOTFOUND)
		walk_fault(w, "%s: %s", name, mdb_strerror(rc));
	mdb_cursor_close(cur);
}

static void walk_store(struct walk *w, struct store_txn *t)
{
	struct store *s = t->s;
	walk_db(w, t->txn, 0, "free list", walk_free_record); /* LMDB's FREE_DBI */
	walk_db(w, t->txn, 1, "main database", NULL);         /* MAIN_DBI: the db names */
	walk_db(w, t->txn, s->id2entry, "id2entry", walk_entry_record);
	walk_db(w, t->txn, s->dn2id, "dn2id", NULL);
	walk_db(w, t->txn, s->pres, "pres", NULL);
	walk_db(w, t->txn, s->meta, "meta", NULL);
	for (size_t i = 0; i < s->nidx; i++)
		walk_db(w, t->txn, s->idx[i].dbi, s->idx[i].name, NULL);
}

/* Read the file front to back first: the walk then finds its pages in
 * the page cache instead of seeking for each (a cold 690 MB store: 26 s
 * walking alone, 9 s with this). */
static void preload(const char *dir)
{
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/data.mdb", dir);
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return;
	posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
	static char buf[1 << 20];
	while (read(fd, buf, sizeof(buf)) > 0)
		;
	close(fd);
}

/* The child's work; what it finds goes to w->out as lines. */
static void verify_child(const char *dir, enum store_verify_level level, struct walk *w)
{
	struct store *s;
	struct store_txn *t;
	struct store_options o = {.flags = STORE_RDONLY};
	struct idc_diag d = {{0}};
	preload(dir);
	int rc = store_open(dir, &o, &s, &d);
	if (!rc && (rc = store_txn_begin(s, NULL, STORE_TXN_RDONLY, &t, &d)) != 0)
		store_close(s);
	if (rc) {
		fprintf(w->out, "E %d cannot be opened: %s\n", rc,
			d.msg[0] ? d.msg : idc_strerror(rc));
		return;
	}
	walk_store(w, t);
	if (level == STORE_VERIFY_FULL && w->faults == 0) {
		long n = store_check(t, emit_fault, w);
		if (n < 0)
			fprintf(w->out, "E %ld the check could not run: %s\n", n,
				idc_strerror((int)n));
	}
	store_txn_abort(t);
	store_close(s);
	store_scratch_free(&w->sc);
}

static void child_main(const char *dir, enum store_verify_level level,
		       const struct store_lmdb_meta *m, int fd)
{
	/* dying here is expected, and a core dump would copy the whole map;
	 * a handler inherited from the parent must not catch the fault and
	 * carry on as the parent would */
	static const int faults[] = {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL};
	struct rlimit no_core = {0, 0};
	setrlimit(RLIMIT_CORE, &no_core);
	for (size_t i = 0; i < IDC_ARRAY_SIZE(faults); i++)
		signal(faults[i], SIG_DFL);
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	struct walk w = {.out = fdopen(fd, "w"), .last_pg = m->last_pg};
	w.budget = (m->last_pg + 1) * (m->psize / 8) + 64;
	if (w.out) {
		verify_child(dir, level, &w);
		fclose(w.out);
	}
	_exit(0);
}

/* Why the child could not finish: its error code and text. */
struct child_error {
	int rc; /* 0: none */
	char text[1024];
};

/* Read the child's lines: faults to cb, the first error kept. */
static long read_report(FILE *in, store_fault_cb cb, void *arg, struct child_error *e)
{
	char line[1100], *end;
	long faults = 0;
	while (fgets(line, sizeof(line), in)) {
		line[strcspn(line, "\n")] = '\0';
		if (line[0] == 'F' && line[1] == ' ') {
			faults++;
			if (cb)
				cb(line + 2, arg);
		} else if (line[0] == 'E' && line[1] == ' ' && !e->rc) {
			long rc = strtol(line + 2, &end, 10);
			size_t len = strnlen(*end ? end + 1 : end, sizeof(e->text) - 1);
			e->rc = rc < 0 && rc > INT_MIN ? (int)rc : -EIO;
			memcpy(e->text, *end ? end + 1 : end, len);
			e->text[len] = '\0';
		}
	}
	return faults;
}

static int wait_child(pid_t pid, int *status)
{
	while (waitpid(pid, status, 0) < 0)
		if (errno != EINTR)
			return -errno;
	return 0;
}

static long verify_isolated(const char *dir, const char *path, enum store_verify_level level,
			    const struct store_lmdb_meta *m, store_fault_cb cb, void *arg,
			    struct idc_diag *d)
{
	int pfd[2];
	if (pipe2(pfd, O_CLOEXEC) < 0)
		return idc_diag_set(d, -errno, "%s: cannot check it: %s", path, strerror(errno));
	pid_t pid = fork();
	if (pid == 0) {
		close(pfd[0]);
		child_main(dir, level, m, pfd[1]);
	}
	int err = pid < 0 ? errno : 0;
	close(pfd[1]);
	FILE *in = pid > 0 ? fdopen(pfd[0], "r") : NULL;
	struct child_error e = {0};
	long faults = in ? read_report(in, cb, arg, &e) : 0;
	if (in)
		fclose(in);
	else
		close(pfd[0]);
	int status = 0;
	if (pid < 0 || wait_child(pid, &status) < 0)
		return idc_diag_set(d, err ? -err : -ECHILD, "%s: cannot check it: %s", path,
				    strerror(err ? err : ECHILD));
	if (WIFSIGNALED(status))
		return idc_diag_set(d, IDC_ECORRUPT,
				    "%s: reading it killed the checking process (%s)", path,
				    strsignal(WTERMSIG(status)));
	/* a store LMDB or we cannot make sense of is damage; anything else
	 * (no permission, no memory, another format version) is not */
	if (e.rc == IDC_ECORRUPT || e.rc == IDC_ENOTSTORE)
		return idc_diag_set(d, IDC_ECORRUPT, "%s: %s", path, e.text);
	if (e.rc)
		return idc_diag_set(d, e.rc, "%s: %s", path, e.text);
	return faults;
}

long store_verify(const char *dir, enum store_verify_level level, store_fault_cb cb, void *arg,
		  struct idc_diag *d)
{
	char path[PATH_MAX];
	if (snprintf(path, sizeof(path), "%s/data.mdb", dir) >= (int)sizeof(path))
		return idc_diag_set(d, -ENAMETOOLONG, "%s: path too long", dir);
	struct store_lmdb_meta m;
	int rc = store_lmdb_file_check(path, &m, d);
	if (rc == -ENOENT)
		return idc_diag_set(d, IDC_ENOTSTORE, "%s: no store here", dir);
	if (rc)
		return rc;
	if (level == STORE_VERIFY_META && m.covered)
		return 0;
	return verify_isolated(dir, path, level == STORE_VERIFY_META ? STORE_VERIFY_PAGES : level,
			       &m, cb, arg, d);
}

/* ==== the clean-shutdown marker ============================================================ */

/* fsync the directory holding file, so a rename or unlink in it lasts. */
static void sync_parent(const char *file)
{
	char dir[PATH_MAX];
	snprintf(dir, sizeof(dir), "%s", file);
	char *slash = strrchr(dir, '/');
	if (slash == dir)
		slash[1] = '\0';
	else if (slash)
		*slash = '\0';
	else
		snprintf(dir, sizeof(dir), ".");
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd >= 0) {
		fsync(fd);
		close(fd);
	}
}

/* What a marker says of the file open at fd as it is now: where it is,
 * its size and modification time, and its newest transaction. Any write
 * to the file changes one of them. */
static int marker_text(int fd, char *out, size_t n)
{
	struct store_lmdb_meta m;
	struct stat st;
	int rc = store_lmdb_fd_check(fd, &m, NULL);
	if (rc)
		return rc;
	if (fstat(fd, &st) < 0)
		return -errno;
	snprintf(
	    out, n, "idcache clean 1 dev %llu ino %llu size %lld mtime %lld.%09ld txnid %llu\n",
	    (unsigned long long)st.st_dev, (unsigned long long)st.st_ino, (long long)st.st_size,
	    (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec, (unsigned long long)m.txnid);
	return 0;
}

/* A file ending before its last page (pages freed in the transaction that
 * allocated them are never written) is extended with zeros, which LMDB
 * never reads: the next start then needs no page walk for it. */
static int cover_last_page(int fd)
{
	struct store_lmdb_meta m;
	int rc = store_lmdb_fd_check(fd, &m, NULL);
	if (rc)
		return rc;
	if (!m.covered && ftruncate(fd, (off_t)((m.last_pg + 1) * m.psize)) < 0)
		return -errno;
	return 0;
}

static int write_marker(const char *marker, const char *text)
{
	char tmp[PATH_MAX];
	if (snprintf(tmp, sizeof(tmp), "%s.tmp", marker) >= (int)sizeof(tmp))
		return -ENAMETOOLONG;
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	size_t len = strlen(text);
	int rc = write(fd, text, len) == (ssize_t)len && fsync(fd) == 0 ? 0 : -errno;
	close(fd);
	if (!rc && rename(tmp, marker) < 0)
		rc = -errno;
	if (rc)
		unlink(tmp);
	return rc;
}

int store_clean_mark(const char *file)
{
	char marker[PATH_MAX], text[256];
	if (snprintf(marker, sizeof(marker), "%s.clean", file) >= (int)sizeof(marker))
		return -ENAMETOOLONG;
	int fd = open(file, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return -errno;
	int rc = cover_last_page(fd);
	if (!rc && fsync(fd) < 0)
		rc = -errno;
	if (!rc)
		rc = marker_text(fd, text, sizeof(text));
	close(fd);
	if (!rc)
		rc = write_marker(marker, text);
	if (!rc)
		sync_parent(marker);
	return rc;
}

int store_clean_take(const char *file)
{
	char marker[PATH_MAX], was[256] = "", now[256] = "";
	if (snprintf(marker, sizeof(marker), "%s.clean", file) >= (int)sizeof(marker))
		return 0;
	int fd = open(marker, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return 0;
	ssize_t n = read(fd, was, sizeof(was) - 1);
	close(fd);
	was[n > 0 ? n : 0] = '\0';
	/* gone before anything writes: a crash from here on finds no marker */
	if (unlink(marker) < 0)
		return 0;
	sync_parent(marker);
	fd = open(file, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return 0;
	int rc = marker_text(fd, now, sizeof(now));
	close(fd);
	return rc == 0 && n > 0 && strcmp(was, now) == 0 ? 1 : -ESTALE;
}
