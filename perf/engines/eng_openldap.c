/*
 * engines/openldap: OpenLDAP as its users run it. Import and export are the
 * offline tools (slapadd -q, slapcat) on back-mdb; search, modify and add
 * go over LDAP (libldap) to a slapd this engine starts on 127.0.0.1 at a
 * free port and stops in destroy. Its column includes the protocol round
 * trip, so it is shown apart from the in-process engines.
 *
 * The generated groups are both posixGroup and groupOfNames, as RFC 2307bis
 * directories hold them. Debian ships only RFC 2307's nis.schema, where
 * posixGroup is STRUCTURAL and such a group breaks the structural chain,
 * so the engine loads a copy of nis.schema with posixGroup AUXILIARY (its
 * RFC 2307bis definition); schema checking stays on everywhere.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <ldap.h>

#include "engine.h"

#define SLAPD     "/usr/sbin/slapd"
#define SLAPADD   "/usr/sbin/slapadd"
#define SLAPCAT   "/usr/sbin/slapcat"
#define SCHEMA    "/etc/ldap/schema"
#define ROOTDN_PW "secret"

struct eng {
	char dir[4096];
	char conf[4200];
	char log[4200];
	char url[64];
	char rootdn[1100];
	pid_t slapd; /* 0: not running */
	LDAP *ld;    /* the harness's own connection, for adds */
};

struct eng_worker {
	LDAP *ld;
};

static int ol_available(char *why, size_t cap)
{
	static const char *const need[] = {SLAPD, SLAPADD, SLAPCAT};
	for (size_t i = 0; i < IDC_ARRAY_SIZE(need); i++) {
		if (access(need[i], X_OK) < 0) {
			snprintf(why, cap, "%s not found (Debian package slapd)", need[i]);
			return -ENOENT;
		}
	}
	if (access(SCHEMA "/nis.schema", R_OK) < 0) {
		snprintf(why, cap, "%s/nis.schema not found (package slapd)", SCHEMA);
		return -ENOENT;
	}
	return 0;
}

/* nis.schema with posixGroup AUXILIARY (RFC 2307bis), into dir. */
static int write_schema(const char *dir, struct idc_diag *d)
{
	char path[4200], line[1024];
	snprintf(path, sizeof(path), "%s/nis-2307bis.schema", dir);
	FILE *in = fopen(SCHEMA "/nis.schema", "r"), *out = fopen(path, "w");
	bool in_group = false;
	while (in && out && fgets(line, sizeof(line), in)) {
		if (strncmp(line, "objectclass", 11) == 0 ||
		    strncmp(line, "attributetype", 13) == 0)
			in_group = strstr(line, "'posixGroup'") != NULL;
		char *st = in_group ? strstr(line, "STRUCTURAL") : NULL;
		if (st)
			fprintf(out, "%.*sAUXILIARY%s", (int)(st - line), line, st + 10);
		else
			fputs(line, out);
	}
	int rc = in && out ? 0 : -errno;
	if (in)
		fclose(in);
	if (out && fclose(out) != 0 && rc == 0)
		rc = -EIO;
	return rc < 0 ? idc_diag_set(d, rc, "%s: cannot write", path) : 0;
}

/* slapd.conf: back-mdb, the run's indexes as eq, durable (no dbnosync). */
static int write_conf(struct eng *e, const struct eng_cfg *cfg, struct idc_diag *d)
{
	FILE *f = fopen(e->conf, "w");
	if (!f)
		return idc_diag_set(d, -errno, "%s: %s", e->conf, strerror(errno));
	fprintf(f,
		"include %s/core.schema\ninclude %s/cosine.schema\n"
		"include %s/nis-2307bis.schema\ninclude %s/inetorgperson.schema\n"
		"modulepath /usr/lib/ldap\nmoduleload back_mdb\n"
		"pidfile %s/slapd.pid\nsizelimit unlimited\n"
		"database mdb\nmaxsize 17179869184\nsuffix \"%s\"\nrootdn \"%s\"\n"
		"rootpw %s\ndirectory %s/db\n",
		SCHEMA, SCHEMA, e->dir, SCHEMA, e->dir, cfg->base, e->rootdn, ROOTDN_PW, e->dir);
	for (size_t i = 0; i < cfg->nindexes; i++)
		fprintf(f, "index %s eq\n", cfg->indexes[i]);
	return fclose(f) == 0 ? 0 : idc_diag_set(d, -EIO, "%s: write failed", e->conf);
}

static int ol_create(const struct eng_cfg *cfg, struct eng **out, struct idc_diag *d)
{
	struct eng *e = calloc(1, sizeof(*e));
	if (!e)
		return -ENOMEM;
	snprintf(e->dir, sizeof(e->dir), "%s", cfg->dir);
	snprintf(e->conf, sizeof(e->conf), "%s/slapd.conf", cfg->dir);
	snprintf(e->log, sizeof(e->log), "%s/tools.log", cfg->dir);
	snprintf(e->rootdn, sizeof(e->rootdn), "cn=admin,%s", cfg->base);
	char db[4200];
	snprintf(db, sizeof(db), "%s/db", cfg->dir);
	int rc = mkdir(db, 0700) < 0 ? idc_diag_set(d, -errno, "%s: %s", db, strerror(errno)) : 0;
	rc = rc < 0 ? rc : write_schema(cfg->dir, d);
	rc = rc < 0 ? rc : write_conf(e, cfg, d);
	if (rc < 0) {
		free(e);
		return rc;
	}
	*out = e;
	return 0;
}

/* ==== offline tools ============================================================== */

static int ol_import(struct eng *e, const char *ldif, uint64_t *count, struct idc_diag *d)
{
	char *argv[] = {SLAPADD, "-q", "-f", e->conf, "-l", (char *)ldif, NULL};
	*count = 0;
	int rc = eng_spawn_wait(argv, e->log, d);
	if (rc < 0)
		return rc;
	/* slapadd reports no count: take the LDIF's records, as it added all or failed */
	FILE *f = fopen(ldif, "r");
	char line[512];
	while (f && fgets(line, sizeof(line), f))
		*count += strncmp(line, "dn: ", 4) == 0;
	if (f)
		fclose(f);
	return 0;
}

static int ol_export(struct eng *e, const char *path, uint64_t *count, struct idc_diag *d)
{
	unlink(path); /* slapcat -l appends */
	char *argv[] = {SLAPCAT, "-f", e->conf, "-l", (char *)path, NULL};
	*count = 0;
	int rc = eng_spawn_wait(argv, e->log, d);
	FILE *f = rc < 0 ? NULL : fopen(path, "r");
	char line[512];
	while (f && fgets(line, sizeof(line), f))
		*count += strncmp(line, "dn: ", 4) == 0;
	if (f)
		fclose(f);
	return rc;
}

/* ==== slapd ===================================================================== */

/* A loopback port nobody listens on now (slapd binds it a moment later). */
static int free_port(void)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(a);
	int port = -errno;
	if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
	    getsockname(fd, (struct sockaddr *)&a, &len) == 0)
		port = ntohs(a.sin_port);
	if (fd >= 0)
		close(fd);
	return port;
}

static int ol_open_bind(const char *url, const char *rootdn, LDAP **out, struct idc_diag *d)
{
	LDAP *ld = NULL;
	int version = LDAP_VERSION3;
	struct berval pw = {sizeof(ROOTDN_PW) - 1, (char *)ROOTDN_PW};
	int lrc = ldap_initialize(&ld, url);
	if (lrc == LDAP_SUCCESS) {
		ldap_set_option(ld, LDAP_OPT_PROTOCOL_VERSION, &version);
		lrc = ldap_sasl_bind_s(ld, rootdn, LDAP_SASL_SIMPLE, &pw, NULL, NULL, NULL);
	}
	if (lrc != LDAP_SUCCESS) {
		if (ld)
			ldap_unbind_ext_s(ld, NULL, NULL);
		return idc_diag_set(d, -ECONNREFUSED, "LDAP bind to %s: %s", url,
				    ldap_err2string(lrc));
	}
	*out = ld;
	return 0;
}

static pid_t start_slapd(struct eng *e)
{
	pid_t pid = fork();
	if (pid != 0)
		return pid;
	/* own session: a Ctrl-C meant for the harness must not stop slapd
	 * mid-measurement; the harness stops it */
	setsid();
	int fd = open(e->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	if (fd >= 0) {
		dup2(fd, 1);
		dup2(fd, 2);
	}
	char listen[80];
	snprintf(listen, sizeof(listen), "%s/", e->url);
	/* -d 0: stay in the foreground (our child, our pid) without debug output */
	execl(SLAPD, SLAPD, "-f", e->conf, "-h", listen, "-d", "0", (char *)NULL);
	_exit(127);
}

static void stop_slapd(struct eng *e)
{
	if (e->ld)
		ldap_unbind_ext_s(e->ld, NULL, NULL);
	e->ld = NULL;
	if (e->slapd <= 0)
		return;
	kill(e->slapd, SIGTERM);
	for (int i = 0; i < 200; i++) { /* up to 10 s for a clean mdb shutdown */
		if (waitpid(e->slapd, NULL, WNOHANG) == e->slapd) {
			e->slapd = 0;
			return;
		}
		nanosleep(&(struct timespec){0, 50000000}, NULL);
	}
	kill(e->slapd, SIGKILL);
	waitpid(e->slapd, NULL, 0);
	e->slapd = 0;
}

/* Start slapd and wait until it answers a bind (up to 15 s). */
static int ol_serve(struct eng *e, struct idc_diag *d)
{
	if (e->slapd > 0)
		return 0;
	int port = free_port();
	if (port < 0)
		return idc_diag_set(d, port, "no free loopback port: %s", strerror(-port));
	snprintf(e->url, sizeof(e->url), "ldap://127.0.0.1:%d", port);
	e->slapd = start_slapd(e);
	if (e->slapd < 0)
		return idc_diag_set(d, -errno, "fork: %s", strerror(errno));
	int rc = -ECONNREFUSED;
	for (int i = 0; i < 300 && rc < 0; i++) {
		if (waitpid(e->slapd, NULL, WNOHANG) == e->slapd) {
			e->slapd = 0;
			return idc_diag_set(d, -EIO, "slapd exited at start; see %s", e->log);
		}
		nanosleep(&(struct timespec){0, 50000000}, NULL);
		rc = ol_open_bind(e->url, e->rootdn, &e->ld, d);
	}
	if (rc < 0)
		stop_slapd(e);
	return rc;
}

/* ==== operations over LDAP ======================================================== */

/* One LDAPMod per run of equal names (gen emits an attribute's values together). */
static int ol_add(struct eng *e, const struct gen_rec *r, struct idc_diag *d)
{
	int rc = ol_serve(e, d);
	if (rc < 0)
		return rc;
	LDAPMod *mods = calloc(r->npairs, sizeof(*mods));
	LDAPMod **list = calloc(r->npairs + 1, sizeof(*list));
	/* strs: the values; then vals: each mod's values and a NULL, <= 2n+1 */
	char **strs = calloc(3 * r->npairs + 1, sizeof(*strs));
	char **vals = strs ? strs + r->npairs : NULL;
	size_t nm = 0, nv = 0;
	for (size_t i = 0; mods && list && strs && i < r->npairs; i++) {
		strs[i] = strndup(r->pairs[i].value.ptr, r->pairs[i].value.len);
		bool same = nm &&
			    strncmp(mods[nm - 1].mod_type, r->pairs[i].name.ptr,
				    r->pairs[i].name.len) == 0 &&
			    mods[nm - 1].mod_type[r->pairs[i].name.len] == '\0';
		if (!same) {
			if (nm)
				vals[nv++] = NULL;
			mods[nm] = (LDAPMod){
			    .mod_op = LDAP_MOD_ADD,
			    .mod_type = strndup(r->pairs[i].name.ptr, r->pairs[i].name.len),
			    .mod_values = &vals[nv]};
			list[nm] = &mods[nm];
			nm++;
		}
		vals[nv++] = strs[i];
	}
	int lrc = LDAP_NO_MEMORY;
	if (mods && list && strs) {
		vals[nv] = NULL;
		char *dn = strndup(r->dn.ptr, r->dn.len);
		lrc = dn ? ldap_add_ext_s(e->ld, dn, list, NULL, NULL) : LDAP_NO_MEMORY;
		free(dn);
	}
	for (size_t i = 0; strs && i < r->npairs; i++)
		free(strs[i]);
	for (size_t i = 0; mods && i < nm; i++)
		free(mods[i].mod_type);
	free(strs), free(list), free(mods);
	return lrc == LDAP_SUCCESS ? 0
				   : idc_diag_set(d, -EIO, "LDAP add: %s", ldap_err2string(lrc));
}

static int ol_worker_open(struct eng *e, struct eng_worker **out, struct idc_diag *d)
{
	int rc = ol_serve(e, d);
	struct eng_worker *w = rc < 0 ? NULL : calloc(1, sizeof(*w));
	if (rc < 0 || !w)
		return rc < 0 ? rc : -ENOMEM;
	rc = ol_open_bind(e->url, e->rootdn, &w->ld, d);
	if (rc < 0) {
		free(w);
		return rc;
	}
	*out = w;
	return 0;
}

static int ol_search(struct eng_worker *w, const char *base, const char *filter, uint64_t *found,
		     struct idc_diag *d)
{
	LDAPMessage *res = NULL;
	int lrc = ldap_search_ext_s(w->ld, base, LDAP_SCOPE_SUBTREE, filter, NULL, 0, NULL, NULL,
				    NULL, 0, &res);
	*found = lrc == LDAP_SUCCESS ? (uint64_t)ldap_count_entries(w->ld, res) : 0;
	if (res)
		ldap_msgfree(res);
	return lrc == LDAP_SUCCESS
		   ? 0
		   : idc_diag_set(d, -EIO, "LDAP search %s: %s", filter, ldap_err2string(lrc));
}

static int ol_modify(struct eng_worker *w, const char *dn, const char *attr, const char *value,
		     struct idc_diag *d)
{
	char *vals[] = {(char *)value, NULL};
	LDAPMod mod = {.mod_op = LDAP_MOD_REPLACE, .mod_type = (char *)attr, .mod_values = vals};
	LDAPMod *list[] = {&mod, NULL};
	int lrc = ldap_modify_ext_s(w->ld, dn, list, NULL, NULL);
	return lrc == LDAP_SUCCESS
		   ? 0
		   : idc_diag_set(d, -EIO, "LDAP modify %s: %s", dn, ldap_err2string(lrc));
}

static void ol_worker_close(struct eng_worker *w)
{
	ldap_unbind_ext_s(w->ld, NULL, NULL);
	free(w);
}

static int64_t ol_disk_bytes(struct eng *e)
{
	char db[4200];
	snprintf(db, sizeof(db), "%s/db", e->dir);
	return eng_du(db);
}

static void ol_destroy(struct eng *e)
{
	if (!e)
		return;
	stop_slapd(e);
	free(e);
}

const struct eng_ops eng_openldap = {
    .name = "openldap",
    .durability = "durable: back-mdb without dbnosync (slapadd -q: its own quick mode)",
    .access = "slapadd -q / slapcat; slapd back-mdb over LDAP on 127.0.0.1",
    .fork_workers = false,
    .available = ol_available,
    .create = ol_create,
    .import = ol_import,
    .export = ol_export,
    .add = ol_add,
    .serve = ol_serve,
    .worker_open = ol_worker_open,
    .search = ol_search,
    .modify = ol_modify,
    .worker_close = ol_worker_close,
    .disk_bytes = ol_disk_bytes,
    .destroy = ol_destroy,
};
