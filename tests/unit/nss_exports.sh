#!/bin/sh
# nss_exports.sh MODULE: the NSS module exports its entry points and
# nothing else (src/nss/libnss_idcache.sym).
set -eu
syms=$(nm -D --defined-only "$1" | awk '{print $NF}')
echo "$syms" | grep -q '^_nss_idcache_getpwnam_r$' || { echo "entry points missing"; exit 1; }
bad=$(echo "$syms" | grep -v '^_nss_idcache_' || true)
[ -z "$bad" ] || { echo "unexpected exports: $bad"; exit 1; }
echo "$syms"
