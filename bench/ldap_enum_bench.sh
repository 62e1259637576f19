#!/bin/bash
# ldap_enum_bench.sh [BUILD_DIR] [USERS] [GROUPS] [MEMBERS] — enumeration of
# a large directory through idcached: USERS users (default 100,000) and
# GROUPS groups (10,000) of MEMBERS member DNs each (20; ldap_bench_ldif.py:
# rfc2307bis, "target" in every group, every 10th group nesting the
# previous one) in a slapd (back-mdb, -d 256 stats log) on loopback, and
# idcached with `enumerate = true` for the LDAP domain.
# Clock starts when idcached is started with an empty cache. Measured:
#   - when `getent passwd | wc -l` (glibc, nsswitch "passwd: idcache")
#     first returns every user, and `getent group | wc -l` every group
#     (polled every POLL seconds, default 0.5; each poll is printed with
#     the interval its getent ran in: the figure is the end of the first
#     complete one);
#   - when the daemon had no LDAP request in flight any more;
#   - the daemon's peak RSS (VmHWM of /proc/PID/status) and RSS at the end,
#     SRCH operations slapd logged, LDAP searches and durable cache commits
#     the daemon counted, size of cache.mdb;
#   - a full `getent passwd` / `getent group` once everything is cached.
# Runs in a private mount namespace (unshare -m) with a bind-mounted test
# nsswitch.conf (the daemon starts under a files-only one); the real /etc
# files are not touched. Bounded by ENUM_TIMEOUT seconds (default 600).
# Needs root, slapd and ldap-utils.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
if [ "${_IDC_ENUM_NS:-}" != 1 ]; then
	[ "$(id -u)" = 0 ] || { echo "needs root (unshare -m, bind mounts)" >&2; exit 1; }
	exec env _IDC_ENUM_NS=1 unshare -m --propagation private -- "$0" "$@"
fi
BUILD=$(cd "${1:-$HERE/../build}" && pwd)
NU=${2:-100000} NG=${3:-10000} NM=${4:-20}
POLL=${POLL:-0.5} TMO=${ENUM_TIMEOUT:-600}
IDCACHED=$BUILD/src/daemon/idcached IDCACHE=$BUILD/src/cli/idcache
for f in "$IDCACHED" "$IDCACHE" "$BUILD/src/nss/libnss_idcache.so.2"; do
	[ -e "$f" ] || { echo "no $f: build first" >&2; exit 1; }
done
W=${LDAP_BENCH_DIR:-/tmp/idc-ldap-enum}
mkdir -p "$W"
chmod 755 "$W"
DATA=$W/data-$NU-$NG-$NM.ldif
[ -s "$DATA" ] || python3 "$HERE/ldap_bench_ldif.py" "$DATA" "$NU" "$NG" "$NM"
NUSERS=$((NU + 1)) # + target
PORT=${LDAP_BENCH_PORT:-$((20000 + RANDOM % 20000))}
SLOG=$W/slapd/slapd.log
DPID=
cleanup() {
	if [ -n "$DPID" ]; then
		kill "$DPID" 2>/dev/null
		for _ in $(seq 100); do kill -0 "$DPID" 2>/dev/null || break; sleep 0.1; done
		kill -9 "$DPID" 2>/dev/null
		wait "$DPID" 2>/dev/null
	fi
	"$HERE/../tests/ldap/slapd.sh" stop "$W/slapd"
}
trap cleanup EXIT
trap 'exit 1' TERM INT
now_ns() { date +%s%N; }
ms_since() { echo $((($(now_ns) - $1) / 1000000)); }
nsrch() { grep -c ' SRCH base=' "$SLOG" || true; }

"$HERE/../tests/ldap/slapd.sh" stop "$W/slapd"
rm -rf "$W/slapd"
t0=$(now_ns)
SLAPD_LOAD=slapadd "$HERE/../tests/ldap/slapd.sh" start "$W/slapd" "$PORT" "$DATA" >/dev/null || exit 1
echo "# slapd on 127.0.0.1:$PORT: $(grep -c '^dn:' "$DATA") entries ($NU users + target, $NG groups x $NM members) loaded in $(ms_since "$t0") ms"
t0=$(now_ns)
n=$(ldapsearch -x -H "ldap://127.0.0.1:$PORT" -b dc=example,dc=com -LLL -E pr=1000/noprompt \
	'(|(objectClass=posixAccount)(objectClass=posixGroup))' | grep -c '^dn:')
echo "# one paged ldapsearch (1000/page) of all $n users and groups: $(ms_since "$t0") ms"
echo "# $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $(nproc) cpus; idcache from $BUILD"

rm -rf "$W/run" "$W/state"
mkdir -p "$W/run" "$W/state"
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
enumerate = true
C
chmod 600 "$W/idcache.conf"
printf 'passwd: files\ngroup: files\nshadow: files\nhosts: files\n' >"$W/nsswitch.boot"
printf 'passwd: idcache\ngroup: idcache\nshadow: files\nhosts: files\n' >"$W/nsswitch.test"
mount --bind "$W/nsswitch.boot" /etc/nsswitch.conf
export LD_LIBRARY_PATH=$BUILD/src/nss IDCACHE_RUNDIR=$W/run
stat_get() { "$IDCACHE" status --run-dir "$W/run" 2>/dev/null | sed -n "s/^$1=//p"; }
hwm() { sed -n "s/^$1:[[:space:]]*//p" "/proc/$DPID/status"; }

s0=$(nsrch)
t0=$(now_ns)
"$IDCACHED" -c "$W/idcache.conf" -i >"$W/idcached.log" 2>&1 &
DPID=$!
for _ in $(seq 600); do grep -q ready "$W/idcached.log" && break; sleep 0.05; done
grep -q ready "$W/idcached.log" || { echo "idcached did not start:" >&2; cat "$W/idcached.log" >&2; exit 1; }
echo "# idcached pid $DPID ready after $(ms_since "$t0") ms"
mount --bind "$W/nsswitch.test" /etc/nsswitch.conf

tu= tg= tq= np=0 ng=0 polls=0
while :; do
	el=$((($(now_ns) - t0) / 1000000))
	[ $el -gt $((TMO * 1000)) ] && { echo "# TIMEOUT after $TMO s: passwd=$np group=$ng" ; break; }
	if [ -z "$tq" ]; then
		a=$(ms_since "$t0")
		st=$("$IDCACHE" status --run-dir "$W/run" 2>/dev/null)
		b=$(ms_since "$t0")
		if echo "$st" | grep -qx 'domain.bench.ldap_in_flight=0' &&
			! echo "$st" | grep -qx 'domain.bench.ldap_searches=0'; then
			tq=$b
			echo "# poll ${a}-${b} ms: idcache status -> no LDAP request in flight; VmHWM $(hwm VmHWM)"
		else
			echo "# poll ${a}-${b} ms: idcache status -> $(echo "$st" | grep -E 'ldap_(in_flight|searches)=' | tr '\n' ' ')"
		fi
	fi
	if [ -z "$tu" ]; then
		a=$(ms_since "$t0")
		np=$(timeout 60 getent passwd | wc -l)
		b=$(ms_since "$t0")
		echo "# poll ${a}-${b} ms: getent passwd -> $np lines"
		[ "$np" -ge "$NUSERS" ] && tu=$b
	fi
	if [ -z "$tg" ]; then
		a=$(ms_since "$t0")
		ng=$(timeout 60 getent group | wc -l)
		b=$(ms_since "$t0")
		echo "# poll ${a}-${b} ms: getent group  -> $ng lines"
		[ "$ng" -ge "$NG" ] && tg=$b
	fi
	polls=$((polls + 1))
	[ -n "$tu" ] && [ -n "$tg" ] && [ -n "$tq" ] && break
	sleep "$POLL"
done
hwm_poll=$(hwm VmHWM)
t1=$(now_ns); np2=$(timeout 60 getent passwd | wc -l); tfp=$(ms_since "$t1")
t1=$(now_ns); ng2=$(timeout 60 getent group | wc -l); tfg=$(ms_since "$t1")
echo
printf '%-52s %s\n' \
	"users in slapd / groups in slapd" "$NUSERS / $NG" \
	"getent passwd | wc -l returns all users" "${tu:-not reached} ms after daemon start ($np lines; $polls polls every ${POLL}s)" \
	"getent group | wc -l returns all groups" "${tg:-not reached} ms ($ng lines)" \
	"daemon: no LDAP request in flight" "${tq:-not reached} ms" \
	"daemon peak RSS (VmHWM), enumeration + polls" "$hwm_poll" \
	"daemon peak RSS (VmHWM) after 2 full getents" "$(hwm VmHWM)" \
	"daemon RSS now: VmRSS (RssAnon + RssFile + RssShmem)" "$(hwm VmRSS) ($(hwm RssAnon) + $(hwm RssFile) + $(hwm RssShmem))" \
	"full getent passwd / getent group, warm" "$tfp ms ($np2 lines) / $tfg ms ($ng2 lines)" \
	"slapd SRCH operations" "$(($(nsrch) - s0))" \
	"daemon: ldap_searches / ldap_commits" "$(stat_get domain.bench.ldap_searches) / $(stat_get domain.bench.ldap_commits)" \
	"daemon: durable cache commits" "$(stat_get cache_durable_commits)" \
	"cache.mdb size" "$(du -h --apparent-size "$W/state/cache.mdb" 2>/dev/null | cut -f1) (apparent), $(du -h "$W/state/cache.mdb" 2>/dev/null | cut -f1) (allocated)"
umount /etc/nsswitch.conf
