#!/bin/bash
# slapd.sh: a throw-away slapd (Debian's, back-mdb) on loopback for tests
# and benchmarks. Suffix dc=example,dc=com, rootdn cn=admin,dc=example,dc=com
# with password "secret"; everything lives in DIR. Besides Debian's schemas it
# loads openssh-lpk.schema (ldapPublicKey, sshPublicKey) from beside itself.
#
#   slapd.sh start DIR PORT [LDIF] [TLSDIR [LDAPS_PORT] [CERTNAME]]
#       Writes DIR/slapd.conf, starts slapd logging stats (-d 256, to count
#       SRCH operations) to DIR/slapd.log, waits until it answers, loads
#       LDIF with ldapadd when the database is empty. With TLSDIR (made by
#       mkcerts.sh) it offers StartTLS with TLSDIR/CERTNAME.pem (default
#       "server") and, with LDAPS_PORT, ldaps:// too.
#       With SLAPD_LOAD=slapadd in the environment, LDIF goes in with
#       slapadd -q before slapd starts (large benchmark data).
#       SLAPD_SCHEMAS: more schema files to include (absolute paths).
#       SLAPD_MAXSIZE: back-mdb's maxsize in bytes (default 1 GiB).
#       With SLAPD_SYNCPROV=1 the database offers content synchronization
#       (RFC 4533: Debian's syncprov module, a session log of 100 changes,
#       entryCSN and entryUUID indexed).
#   slapd.sh stop DIR        stops it and waits until it is gone
set -eu
cmd=$1 D=$2
stop() {
	[ -s "$D/slapd.pid" ] || return 0
	local p; p=$(cat "$D/slapd.pid")
	kill "$p" 2>/dev/null || true
	for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.05; done
	kill -9 "$p" 2>/dev/null || true
	rm -f "$D/slapd.pid"
}
if [ "$cmd" = stop ]; then stop; exit 0; fi
P=$3 L=${4:-} T=${5:-} SP=${6:-} CN=${7:-server}
mkdir -p "$D/db"
stop
{
	for s in core cosine nis inetorgperson; do echo "include /etc/ldap/schema/$s.schema"; done
	echo "include $(cd "$(dirname "$0")" && pwd)/openssh-lpk.schema"
	for s in ${SLAPD_SCHEMAS:-}; do echo "include $s"; done
	cat <<C
modulepath /usr/lib/ldap
moduleload back_mdb
C
	[ "${SLAPD_SYNCPROV:-}" = 1 ] && echo "moduleload syncprov"
	cat <<C
sizelimit unlimited
pidfile $D/slapd.pid
argsfile $D/slapd.args
C
	if [ -n "$T" ]; then
		cat <<C
TLSCACertificateFile $T/ca.pem
TLSCertificateFile $T/$CN.pem
TLSCertificateKeyFile $T/$CN.key
C
	fi
	cat <<C
database mdb
maxsize ${SLAPD_MAXSIZE:-1073741824}
suffix "dc=example,dc=com"
rootdn "cn=admin,dc=example,dc=com"
rootpw secret
directory $D/db
index objectClass eq
index uid,cn eq
index uidNumber,gidNumber,memberUid,member eq
C
	if [ "${SLAPD_SYNCPROV:-}" = 1 ]; then
		cat <<C
index entryCSN,entryUUID eq
overlay syncprov
syncprov-checkpoint 1 1
syncprov-sessionlog 100
C
	fi
} > "$D/slapd.conf"
if [ -n "$L" ] && [ "${SLAPD_LOAD:-}" = slapadd ] && [ ! -s "$D/db/data.mdb" ]; then
	/usr/sbin/slapadd -q -f "$D/slapd.conf" -l "$L" >"$D/slapadd.log" 2>&1
fi
urls="ldap://127.0.0.1:$P/"
[ -n "$SP" ] && urls="$urls ldaps://127.0.0.1:$SP/"
nohup /usr/sbin/slapd -f "$D/slapd.conf" -h "$urls" -d 256 >"$D/slapd.log" 2>&1 &
for _ in $(seq 200); do
	ldapsearch -x -H "ldap://127.0.0.1:$P" -b '' -s base >/dev/null 2>&1 && break
	sleep 0.05
done
ldapsearch -x -H "ldap://127.0.0.1:$P" -b '' -s base >/dev/null 2>&1 ||
	{ echo "slapd.sh: slapd on port $P did not come up:" >&2; tail -5 "$D/slapd.log" >&2; exit 1; }
if [ -n "$L" ] && ! ldapsearch -x -H "ldap://127.0.0.1:$P" -b dc=example,dc=com -s base >/dev/null 2>&1; then
	ldapadd -x -c -H "ldap://127.0.0.1:$P" -D cn=admin,dc=example,dc=com -w secret -f "$L" >"$D/ldapadd.log" 2>&1 || true
fi
cat "$D/slapd.pid"
