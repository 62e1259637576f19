#!/bin/bash
# ldap_nss_bench.sh [BUILD_DIR] [REPS] — the SSSD performance scenario of
# ldap_bench.sh (same data: 10,000 users, target in 200 groups x 300 member
# DNs, rfc2307bis, some nesting) but THROUGH idcached and the NSS module:
# `id target` run by glibc in a private mount namespace whose
# nsswitch.conf says `passwd: idcache` / `group: idcache`.
# Per rep, with a fresh cache and daemon:
#   cold     empty cache: the lookups go to slapd (deferred replies);
#   expired  after `idcache expire --all`: served from the cache at once,
#            refreshed in the background ("refresh" line: how long until
#            nothing was in flight, its searches and durable commits);
#   warm     fresh entries: shared-memory cache / cache reads;
#   inproc   the same lookups inside one process (no process start).
# Columns: wall time of `id target` (process start included; a do-nothing
# `id -u` run the same way is printed first as the floor), SRCH lines slapd
# logged, durable cache.mdb commits (`idcache status`), groups printed.
# Needs root (mount namespace); the daemon runs as root (user = root).
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
BUILD=$(cd "${1:-$HERE/../build}" && pwd)
REPS=${2:-3}
W=${LDAP_BENCH_DIR:-/tmp/idc-ldap-nss-bench}
IDCACHED=$BUILD/src/daemon/idcached
IDCACHE=$BUILD/src/cli/idcache
NSSDIR=$BUILD/src/nss
for f in "$IDCACHED" "$IDCACHE" "$NSSDIR/libnss_idcache.so.2"; do
	[ -e "$f" ] || { echo "no $f: build first" >&2; exit 1; }
done
[ "$(id -u)" = 0 ] || { echo "needs root (unshare -m, bind mounts)" >&2; exit 1; }
mkdir -p "$W"
chmod 755 "$W"
[ -s "$W/data.ldif" ] || python3 "$HERE/ldap_bench_ldif.py" "$W/data.ldif"
PORT=${LDAP_BENCH_PORT:-$((20000 + RANDOM % 20000))}
DPID=
cleanup() {
	[ -n "$DPID" ] && kill "$DPID" 2>/dev/null && wait "$DPID" 2>/dev/null
	"$HERE/../tests/ldap/slapd.sh" stop "$W/slapd"
}
trap cleanup EXIT
"$HERE/../tests/ldap/slapd.sh" stop "$W/slapd"
rm -rf "$W/slapd"
SLAPD_LOAD=slapadd "$HERE/../tests/ldap/slapd.sh" start "$W/slapd" "$PORT" "$W/data.ldif" >/dev/null
SLOG=$W/slapd/slapd.log
nsrch() { grep -c ' SRCH base=' "$SLOG" || true; }
t0=$(date +%s.%N)
ldapsearch -x -H "ldap://127.0.0.1:$PORT" -b dc=example,dc=com -LLL '(|(objectClass=posixAccount)(objectClass=posixGroup))' >/dev/null
echo "# slapd on 127.0.0.1:$PORT; one ldapsearch of every user and group: $(echo "$(date +%s.%N) - $t0" | bc) s"

printf 'passwd: idcache\ngroup: idcache\nshadow: files\nhosts: files\n' >"$W/nsswitch.conf"
cat >"$W/idcache.conf" <<C
[idcache]
run_dir = $W/run
state_dir = $W/state
user = root

[domain/bench]
id_provider = ldap
ldap_uri = ldap://127.0.0.1:$PORT
ldap_search_base = dc=example,dc=com
ldap_schema = rfc2307bis
C
chmod 600 "$W/idcache.conf"

# ns CMD...: run CMD with glibc asking idcache (private mount namespace).
ns() {
	env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LC_ALL=C.UTF-8 LD_LIBRARY_PATH="$NSSDIR" \
		IDCACHE_RUNDIR="$W/run" unshare -m --propagation private -- \
		sh -c 'mount --bind "$0" /etc/nsswitch.conf && exec "$@"' "$W/nsswitch.conf" "$@"
}
# timed CMD...: wall milliseconds of CMD inside the namespace (the mount
# is done before the clock starts).
timed() {
	ns python3 -c '
import subprocess, sys, time
t = time.perf_counter()
p = subprocess.run(sys.argv[1:], capture_output=True, text=True)
ms = (time.perf_counter() - t) * 1e3
print("%.3f %d %s" % (ms, p.returncode, p.stdout.count(",") + 1 if "groups=" in p.stdout else 0))
' "$@"
}
stat_get() { "$IDCACHE" status --run-dir "$W/run" | sed -n "s/^$1=//p"; }

start_daemon() {
	rm -rf "$W/state" "$W/run"
	mkdir -p "$W/state" "$W/run"
	local log=$W/idcached.$r.log # one per rep, kept
	"$IDCACHED" -c "$W/idcache.conf" -i >"$log" 2>&1 &
	DPID=$!
	for _ in $(seq 200); do grep -q ready "$log" && return 0; sleep 0.02; done
	echo "idcached did not start:" >&2
	cat "$log" >&2
	exit 1
}
stop_daemon() { kill "$DPID"; wait "$DPID" || true; DPID=; }

run() { # LABEL
	local s0 c0 out
	s0=$(nsrch)
	c0=$(stat_get cache_durable_commits)
	read -r ms rc groups < <(timed id target)
	printf "%-8s rep=%d  id_ms=%9.3f  slapd_SRCH=%-4d durable_commits=%-3d groups=%s rc=%s\n" \
		"$1" "$r" "$ms" $(($(nsrch) - s0)) $(($(stat_get cache_durable_commits) - c0)) "$groups" "$rc"
}

# What `id target` asks (getpwnam, getgrouplist, getgrgid of each group) in
# one process, averaged over many rounds: the lookups without process start.
inproc() {
	ns python3 -c '
import ctypes, os, pwd, time
libc = ctypes.CDLL("libc.so.6")
buf = ctypes.create_string_buffer(1 << 20)
gr = ctypes.create_string_buffer(64)  # struct group
res = ctypes.c_void_p()
def ids():
    p = pwd.getpwnam("target")
    return p, os.getgrouplist("target", p.pw_gid)
def full():  # getgrgid_r through ctypes: no Python list of 300 members per group
    p, gl = ids()
    for g in gl:
        libc.getgrgid_r(g, gr, buf, len(buf), ctypes.byref(res))
full()
for label, fn in (("user+initgroups", ids), ("user+initgroups+200 getgrgid", full)):
    n, t = 200, time.perf_counter()
    for _ in range(n):
        fn()
    print("%-8s rep=%s  %s: %.1f us per round" % ("inproc", "'"$r"'", label, (time.perf_counter() - t) * 1e6 / n))
'
}

# The background refresh after an expire: wait until nothing is in flight.
refresh() {
	local s0=$1 c0=$2 t0=$3
	for _ in $(seq 500); do
		[ "$(stat_get domain.bench.ldap_in_flight)" = 0 ] && break
		sleep 0.01
	done
	printf "%-8s rep=%d  done_ms=%7.1f  slapd_SRCH=%-4d durable_commits=%d\n" refresh "$r" \
		"$(echo "($(date +%s.%N) - $t0) * 1000" | bc)" $(($(nsrch) - s0)) \
		$(($(stat_get cache_durable_commits) - c0))
}

r=0
start_daemon
read -r floor _ < <(timed id -u)
stop_daemon
echo "# floor: \`id -u\` (no lookup) run the same way: $floor ms"
for r in $(seq "$REPS"); do
	start_daemon
	run cold
	"$IDCACHE" expire --run-dir "$W/run" --all >/dev/null
	s0=$(nsrch) c0=$(stat_get cache_durable_commits) t0=$(date +%s.%N)
	run expired
	refresh "$s0" "$c0" "$t0"
	run warm
	run warm
	g0=$(stat_get requests.getgrgid)
	inproc
	echo "# getgrgid requests that reached the daemon during inproc: $(($(stat_get requests.getgrgid) - g0))"
	echo "# status: $(stat_get domain.bench.state), ldap_searches=$(stat_get domain.bench.ldap_searches)," \
		"ldap_lookups=$(stat_get domain.bench.ldap_lookups), ldap_commits=$(stat_get domain.bench.ldap_commits)"
	stop_daemon
done
