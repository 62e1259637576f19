#!/bin/bash
# ldap_compare.sh [BUILD_DIR] — idcache, SSSD and nslcd side by side on the
# SSSD performance scenario (data from ldap_bench_ldif.py: 10,000 users, user
# "target" in 200 groups x 300 member DNs, rfc2307bis, every 10th group
# nesting the previous one), one slapd (back-mdb, -d 256 stats log) on
# loopback for all three.
#
# Each system runs in its own private mount namespace (unshare -m): its own
# config files, a tmpfs /run for SSSD and nslcd, and a test nsswitch.conf
# bind-mounted over /etc/nsswitch.conf. The daemon starts under a files-only
# nsswitch (SSSD and nslcd resolve their own service user at start-up), then
# the test one ("passwd: sss" / "ldap" / "idcache") is bind-mounted on top.
# Daemons are stopped by the pid recorded at start. Nothing outside the
# namespaces is changed; the real /etc files are not touched.
#
# Per system: `id target` run by glibc,
#   cold     fresh daemon, empty cache;
#   expired  after expiring every entry (`idcache expire --all`,
#            `sss_cache -E`; nslcd has no cache: the same lookup again);
#   warm     at once again.
# Columns: wall ms of `id target` (process start of `id` included; measured
# by a parent that is already running), SRCH operations slapd logged during
# the lookup and until slapd went quiet (background refreshes included),
# durable cache.mdb commits (idcache only), groups printed.
# A system that is not installed gets a row saying so.
#
# Needs root, slapd + ldap-utils; for the incumbents
#   apt-get install sssd-ldap sssd-tools libnss-sss nslcd libnss-ldapd
# (installing libnss-sss edits /etc/nsswitch.conf: keep a copy and put it
# back; the packages' services are not used, this script starts its own).
# Env: LDAP_BENCH_DIR (work dir), LDAP_BENCH_PORT, ID_TIMEOUT (s, per `id`,
# default 120), SYSTEM_TIMEOUT (s, per system, default 400),
# COMPARE_SYSTEMS (default "idcache sssd nslcd").
set -u
HERE=$(cd "$(dirname "$0")" && pwd)

# ---------------------------------------------------------------- common helpers
now_ns() { date +%s%N; }
# tid CMD...: runs CMD (bounded by ID_TIMEOUT), prints "ms rc groups"
tid() {
	python3 - "$@" <<'P'
import subprocess, sys, time, os
to = float(os.environ.get("ID_TIMEOUT", "120"))
t = time.perf_counter()
try:
    p = subprocess.run(sys.argv[1:], capture_output=True, text=True, timeout=to)
    rc, out = p.returncode, p.stdout
except subprocess.TimeoutExpired:
    rc, out = "timeout", ""
ms = (time.perf_counter() - t) * 1e3
print("%.3f %s %d" % (ms, rc, out.count("(g") if "groups=" in out else 0))
P
}
nsrch() { grep -c ' SRCH base=' "$SLOG" || true; }
# quiet: wait until slapd logged no new SRCH for 2 s (at most 60 s)
quiet() {
	local a b i
	a=$(nsrch)
	for i in $(seq 60); do
		sleep 1
		b=$(nsrch)
		if [ "$a" = "$b" ]; then
			sleep 1
			[ "$(nsrch)" = "$b" ] && return 0
		fi
		a=$b
	done
}
# row SYSTEM PHASE MS RC GROUPS SRCH_DURING SRCH_TOTAL COMMITS [NOTE]
row() { printf '%s|%s|%s|%s|%s|%s|%s|%s|%s\n' "$@" >>"$W/rows"; }
measure() { # SYSTEM PHASE COMMITS_CMD
	local s0 s1 c0 ms rc g
	s0=$(nsrch)
	c0=$($3)
	read -r ms rc g < <(tid id target)
	s1=$(nsrch)
	[ "$2" = warm ] || quiet
	row "$1" "$2" "$ms" "$rc" "$g" $((s1 - s0)) $(($(nsrch) - s0)) "$(($($3) - c0))" "${4:-}"
}
none() { echo 0; }
boot_ns() { # NSSWITCH_TEST: files-only nsswitch now, the test one by top_ns
	printf 'passwd: files\ngroup: files\nshadow: files\nhosts: files\n' >"$NSD/nsswitch.boot"
	mount --bind "$NSD/nsswitch.boot" /etc/nsswitch.conf
	TOP=0
}
top_ns() { mount --bind "$NSD/nsswitch.test" /etc/nsswitch.conf; TOP=1; }
pop_ns() { [ "${TOP:-0}" = 1 ] && umount /etc/nsswitch.conf; TOP=0; }
# stop_pid PID: TERM, wait up to 10 s (with its children), then KILL
stop_pid() {
	local p=$1 kids i
	[ -n "$p" ] || return 0
	kids=$(ps -o pid= --ppid "$p" 2>/dev/null)
	kill "$p" 2>/dev/null
	for i in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
	kill -9 "$p" 2>/dev/null
	wait "$p" 2>/dev/null
	for k in $kids; do
		for i in $(seq 50); do kill -0 "$k" 2>/dev/null || break; sleep 0.1; done
		kill -9 "$k" 2>/dev/null
	done
	return 0
}

# ---------------------------------------------------------------- inner parts
# (run in a private mount namespace: $0 --inner SYSTEM)
inner_idcache() {
	NSD=$W/idcache; rm -rf "$NSD"; mkdir -p "$NSD"
	local IDCACHE=$BUILD/src/cli/idcache
	export LD_LIBRARY_PATH=$BUILD/src/nss IDCACHE_RUNDIR=$NSD/run
	cat >"$NSD/idcache.conf" <<C
[idcache]
run_dir = $NSD/run
state_dir = $NSD/state
user = root

[domain/bench]
id_provider = ldap
ldap_uri = ldap://127.0.0.1:$PORT
ldap_search_base = dc=example,dc=com
ldap_schema = rfc2307bis
C
	chmod 600 "$NSD/idcache.conf"
	printf 'passwd: idcache\ngroup: idcache\nshadow: files\nhosts: files\n' >"$NSD/nsswitch.test"
	mkdir -p "$NSD/run" "$NSD/state"
	boot_ns
	"$BUILD/src/daemon/idcached" -c "$NSD/idcache.conf" -i >"$NSD/idcached.log" 2>&1 &
	DPID=$!
	for _ in $(seq 200); do grep -q ready "$NSD/idcached.log" && break; sleep 0.05; done
	grep -q ready "$NSD/idcached.log" || { row idcache cold - "daemon did not start" 0 0 0 0 ""; return; }
	top_ns
	commits() { "$IDCACHE" status --run-dir "$NSD/run" | sed -n 's/^cache_durable_commits=//p'; }
	measure idcache cold commits
	"$IDCACHE" expire --run-dir "$NSD/run" --all >/dev/null
	# the expired lookup is answered from the cache; the refresh runs in the
	# background: wait until nothing is in flight, then count.
	local s0 c0 ms rc g t0 t1
	s0=$(nsrch); c0=$(commits); t0=$(now_ns)
	read -r ms rc g < <(tid id target)
	local s1; s1=$(nsrch)
	for _ in $(seq 600); do
		[ "$("$IDCACHE" status --run-dir "$NSD/run" | sed -n 's/^domain.bench.ldap_in_flight=//p')" = 0 ] && break
		sleep 0.01
	done
	t1=$(now_ns)
	quiet
	row idcache expired "$ms" "$rc" "$g" $((s1 - s0)) $(($(nsrch) - s0)) $(($(commits) - c0)) \
		"background refresh done after $(((t1 - t0) / 1000000)) ms"
	measure idcache warm commits
	stop_pid "$DPID"; DPID=
	pop_ns
}

inner_sssd() {
	NSD=$W/sssd; rm -rf "$NSD"
	mkdir -p "$NSD"/lib/{db,mc,pipes/private,pubconf,gpo_cache,keytabs} "$NSD/log" "$NSD/etc"
	chmod 700 "$NSD/lib/pipes/private"
	cat >"$NSD/etc/sssd.conf" <<C
[sssd]
services = nss
domains = LDAP

[nss]

[domain/LDAP]
id_provider = ldap
ldap_uri = ldap://127.0.0.1:$PORT
ldap_search_base = dc=example,dc=com
ldap_schema = rfc2307bis
ldap_id_use_start_tls = false
ldap_tls_reqcert = never
enumerate = false
cache_credentials = false
C
	chmod 600 "$NSD/etc/sssd.conf"
	printf 'passwd: sss\ngroup: sss\nshadow: files\nhosts: files\n' >"$NSD/nsswitch.test"
	mount -t tmpfs tmpfs /run
	mount --bind "$NSD/lib" /var/lib/sss
	mount --bind "$NSD/log" /var/log/sssd
	mount --bind "$NSD/etc" /etc/sssd
	boot_ns
	sssd -i --logger=stderr -d 0 2>>"$NSD/log/sssd.stderr" &
	DPID=$!
	for _ in $(seq 200); do [ -S /var/lib/sss/pipes/nss ] && break; sleep 0.05; done
	[ -S /var/lib/sss/pipes/nss ] || { row sssd cold - "sssd did not start" 0 0 0 - ""; return; }
	sleep 1 # let the back end connect
	top_ns
	measure sssd cold none
	sss_cache -E
	measure sssd expired none "after sss_cache -E"
	measure sssd warm none
	stop_pid "$DPID"; DPID=
	pop_ns
}

inner_nslcd() {
	NSD=$W/nslcd; rm -rf "$NSD"; mkdir -p "$NSD"
	cat >"$NSD/nslcd.conf" <<C
uid nslcd
gid nslcd
uri ldap://127.0.0.1:$PORT/
base dc=example,dc=com
C
	chmod 640 "$NSD/nslcd.conf"
	chgrp nslcd "$NSD/nslcd.conf"
	printf 'passwd: ldap\ngroup: ldap\nshadow: files\nhosts: files\n' >"$NSD/nsswitch.test"
	mount -t tmpfs tmpfs /run
	mount --bind "$NSD/nslcd.conf" /etc/nslcd.conf
	boot_ns
	mkdir -p /run/nslcd
	chown nslcd:nslcd /run/nslcd
	nslcd -n 2>>"$NSD/nslcd.stderr" &
	DPID=$!
	for _ in $(seq 200); do [ -S /run/nslcd/socket ] && break; sleep 0.05; done
	[ -S /run/nslcd/socket ] || { row nslcd cold - "nslcd did not start" 0 0 0 - ""; return; }
	sleep 0.5
	top_ns
	measure nslcd cold none
	measure nslcd expired none "no cache: the same lookup again"
	measure nslcd warm none
	stop_pid "$DPID"; DPID=
	pop_ns
}

if [ "${1:-}" = --inner ]; then
	DPID=
	trap 'stop_pid "$DPID"' EXIT
	trap 'exit 1' TERM INT
	"inner_$2"
	exit 0
fi

# ---------------------------------------------------------------- main
BUILD=$(cd "${1:-$HERE/../build}" && pwd)
for f in "$BUILD/src/daemon/idcached" "$BUILD/src/cli/idcache" "$BUILD/src/nss/libnss_idcache.so.2"; do
	[ -e "$f" ] || { echo "no $f: build first" >&2; exit 1; }
done
[ "$(id -u)" = 0 ] || { echo "needs root (unshare -m, bind mounts)" >&2; exit 1; }
W=${LDAP_BENCH_DIR:-/tmp/idc-ldap-compare}
mkdir -p "$W"
chmod 755 "$W"
[ -s "$W/data.ldif" ] || python3 "$HERE/ldap_bench_ldif.py" "$W/data.ldif"
PORT=${LDAP_BENCH_PORT:-$((20000 + RANDOM % 20000))}
SLOG=$W/slapd/slapd.log
export W PORT SLOG BUILD ID_TIMEOUT=${ID_TIMEOUT:-120}
trap '"$HERE/../tests/ldap/slapd.sh" stop "$W/slapd"' EXIT
"$HERE/../tests/ldap/slapd.sh" stop "$W/slapd"
rm -rf "$W/slapd" "$W/rows"
SLAPD_LOAD=slapadd "$HERE/../tests/ldap/slapd.sh" start "$W/slapd" "$PORT" "$W/data.ldif" >/dev/null || exit 1
t0=$(now_ns)
nall=$(ldapsearch -x -H "ldap://127.0.0.1:$PORT" -b dc=example,dc=com -LLL \
	'(|(objectClass=posixAccount)(objectClass=posixGroup))' | grep -c '^dn:')
t1=$(now_ns)
echo "# slapd $(/usr/sbin/slapd -VV 2>&1 | sed -n 's/.*slapd \([0-9.]*\).*/\1/p' | head -1) on 127.0.0.1:$PORT," \
	"$(grep -c '^dn:' "$W/data.ldif") entries; one ldapsearch of all $nall users and groups:" \
	"$(((t1 - t0) / 1000000)) ms"
echo "# $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $(nproc) cpus; idcache from $BUILD"

declare -A PKG=([sssd]="sssd-ldap sssd-tools libnss-sss" [nslcd]="nslcd libnss-ldapd")
declare -A VER=([idcache]="idcache $(git -C "$HERE/.." rev-parse --short HEAD 2>/dev/null || echo '?')")
for s in ${COMPARE_SYSTEMS:-idcache sssd nslcd}; do
	if [ "$s" != idcache ]; then
		miss=
		for p in ${PKG[$s]}; do
			dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || miss="$miss $p"
		done
		if [ -n "$miss" ]; then
			row "$s" "-" - - - - - - "not installed (apt-get install${miss})"
			continue
		fi
		VER[$s]="$s $(dpkg-query -W -f='${Version}' "${PKG[$s]%% *}")"
	fi
	timeout -s TERM "${SYSTEM_TIMEOUT:-400}" unshare -m --propagation private -- "$0" --inner "$s" ||
		row "$s" "-" - - - - - - "failed or timed out (rc $?), see $W/$s"
done

echo
printf '%-22s %-8s %11s %6s %10s %10s %9s  %s\n' system phase id_ms groups SRCH_in_id SRCH_total commits note
while IFS='|' read -r s ph ms rc g s1 s2 c note; do
	[ "$rc" = 0 ] || [ "$rc" = - ] || note="rc=$rc $note"
	[ "$s" = idcache ] || c=-
	printf '%-22s %-8s %11s %6s %10s %10s %9s  %s\n' "${VER[$s]:-$s}" "$ph" "$ms" "$g" "$s1" "$s2" "$c" "$note"
done <"$W/rows"
