/*
 * engines/nss: the ways of answering glibc's getpwnam_r, getpwuid_r and
 * getgrouplist that `idcache perf` measures side by side (engine.h). Each
 * is a description: the harness (src/cli/perf_nss.c) builds the
 * namespace, the nsswitch.conf and the daemon from it.
 *
 * idcache-nscd is glibc's own nscd client on idcached's nscd_socket (the
 * harness binds its directory over /run/nscd): after the first lookup of a
 * key, glibc answers it from idcached's nscd maps, before NSS dispatch.
 *
 * sssd and nscd are listed so that a reader sees them: they are measured
 * only when a private instance over the generated files can be run, which
 * this version does not set up; when not installed they say so.
 */
#include <errno.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine.h"

static int always(char *why, size_t cap)
{
	(void)why, (void)cap;
	return 0;
}

/* glibc looks for its modules under these (multiarch first). */
static bool have_lib(const char *soname)
{
	static const char *const dirs[] = {"/lib/x86_64-linux-gnu",
					   "/lib/aarch64-linux-gnu",
					   "/usr/lib/x86_64-linux-gnu",
					   "/usr/lib64",
					   "/lib64",
					   "/usr/lib",
					   "/lib"};
	char path[256];
	for (size_t i = 0; i < IDC_ARRAY_SIZE(dirs); i++) {
		snprintf(path, sizeof(path), "%s/%s", dirs[i], soname);
		if (access(path, R_OK) == 0)
			return true;
	}
	return false;
}

static int sssd_available(char *why, size_t cap)
{
	if (access("/usr/sbin/sssd", X_OK) < 0 || !have_lib("libnss_sss.so.2")) {
		snprintf(why, cap, "sssd not installed (Debian packages sssd, libnss-sss)");
		return -ENOENT;
	}
	snprintf(why, cap,
		 "sssd is installed, but this version does not run a private sssd over the "
		 "generated files, and the system's instance serves other data");
	return -ENOTSUP;
}

static int nscd_available(char *why, size_t cap)
{
	if (access("/usr/sbin/nscd", X_OK) < 0) {
		snprintf(why, cap, "nscd not installed (Debian package nscd)");
		return -ENOENT;
	}
	snprintf(why, cap,
		 "nscd is installed, but this version does not run a private nscd over the "
		 "generated files, and the system's instance serves other data");
	return -ENOTSUP;
}

const struct nss_eng_ops nss_eng_idcache_mc = {
    .name = "idcache-mc",
    .access = "libnss_idcache answering from idcached's shared-memory cache (a miss asks "
	      "idcached over its socket)",
    .source = "idcache",
    .daemon = true,
    .memcache = true,
    .bind_files = false,
    .prefill = true,
    .available = always,
};

const struct nss_eng_ops nss_eng_idcache_socket = {
    .name = "idcache-socket",
    .access = "libnss_idcache with IDCACHE_MEMCACHE=no: every lookup asks idcached over its "
	      "Unix socket",
    .source = "idcache",
    .daemon = true,
    .memcache = false,
    .bind_files = false,
    .prefill = false,
    .available = always,
};

/* The namespace binds the daemon's socket directory over /run/nscd, which
 * must exist (glibc's clients look at /var/run/nscd, /var/run being /run). */
static int nscd_dir_available(char *why, size_t cap)
{
	struct stat st;
	if (stat("/run/nscd", &st) < 0 || !S_ISDIR(st.st_mode)) {
		snprintf(why, cap, "no /run/nscd directory to bind idcached's nscd socket over");
		return -ENOENT;
	}
	return 0;
}

const struct nss_eng_ops nss_eng_idcache_nscd = {
    .name = "idcache-nscd",
    .access = "glibc's nscd client reading idcached's nscd maps (nscd_socket, `passwd: files`; a "
	      "key the maps lack asks idcached's nscd socket)",
    .source = "files",
    .daemon = true,
    .memcache = true,
    .bind_files = false,
    .prefill = true,
    .nscd = true,
    .available = nscd_dir_available,
};

const struct nss_eng_ops nss_eng_files = {
    .name = "files",
    .access = "glibc's own files source reading the generated passwd and group (bind-mounted "
	      "over /etc in the namespace)",
    .source = "files",
    .daemon = false,
    .memcache = false,
    .bind_files = true,
    .prefill = false,
    .available = always,
};

const struct nss_eng_ops nss_eng_sssd = {
    .name = "sssd",
    .access = "libnss_sss and sssd",
    .source = "sss",
    .daemon = false,
    .memcache = false,
    .bind_files = false,
    .prefill = false,
    .available = sssd_available,
};

const struct nss_eng_ops nss_eng_nscd = {
    .name = "nscd",
    .access = "glibc's nscd client and nscd over files",
    .source = "files",
    .daemon = false,
    .memcache = false,
    .bind_files = true,
    .prefill = false,
    .available = nscd_available,
};

const struct nss_eng_ops *const nss_eng_all[] = {
    &nss_eng_idcache_mc, &nss_eng_idcache_socket, &nss_eng_idcache_nscd,
    &nss_eng_files,      &nss_eng_sssd,           &nss_eng_nscd,
};
const size_t nss_eng_count = IDC_ARRAY_SIZE(nss_eng_all);
