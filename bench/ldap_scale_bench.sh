#!/bin/bash
# ldap_scale_bench.sh [--users N] [--groups G] [--members M] [--build DIR]
#                     [--sync poll|syncrepl] [--set key=value]...
# idcached holding a large directory: N users (default 1,000,000) and G
# groups (100,000) of on average M members (20: uniform in 1..2M-1, given
# both as memberUid and member DN; idcache-gen-ldif), loaded with slapadd -q
# into a private slapd (back-mdb, tests/ldap/slapd.sh: uid, cn, uidNumber,
# gidNumber, memberUid, member and objectClass indexed) on loopback, and
# idcached with one LDAP domain (rfc2307bis, `enumerate = true`,
# `ldap_sync = poll` unless --sync says otherwise; with --sync syncrepl
# slapd loads syncprov and the first refresh comes through the feed).
# --set adds a line to the domain's section (a limit, say); IDC_GLOBAL in
# the environment, lines to [idcache] (cache_map_size = 64, say).
#
# The clock starts when idcached is started with an empty cache. Measured:
#   - when `getent passwd | wc -l` (nsswitch "passwd: idcache") first
#     returns every user and `getent group | wc -l` every group (polled
#     every POLL seconds, default 5: the figure is the end of the first
#     complete poll). A full listing of a million users is itself a heavy
#     client, so it runs only once `idcache status` shows no LDAP request
#     in flight (the enumeration done; a miss of the probes below may
#     hold it back by a lookup's time);
#   - idcached's memory every second (VmRSS, VmHWM, RssAnon, RssFile and
#     the resident part of the mapped cache.mdb from /proc/PID/smaps): the
#     peak, and "steady" SETTLE seconds (default 20) after all is served;
#   - how long the LDAP domain held the event loop: its process calls,
#     the longest in the loop thread's CPU time (what a busy machine's
#     scheduler adds is not in it) and how many took over 10 ms of it
#     (`idcache status`, once all is served);
#   - how long each of the polls' `idcache status` took, the command's
#     whole run (its start-up included);
#   - other clients' lookups while this runs: two probes (ldap_scale_probe.py)
#     call getpwnam RATE times a second (default 50) on names drawn from
#     1,000 random users, one through the NSS module as installed (shared-
#     memory cache first) and one with IDCACHE_MEMCACHE=no (every call asks
#     the daemon's socket: the event loop's latency). Repeated names are
#     "cached" lookups (p50/p99/max printed); a name's first lookup may be
#     a miss sent to the directory and is reported on its own.
# Runs in a private mount namespace (unshare -m) with a bind-mounted
# nsswitch.conf; the real /etc files are not touched. Bounded by
# SCALE_TIMEOUT seconds (default 3600). Needs root, slapd, ldap-utils.
# Work files under LDAP_BENCH_DIR (default /tmp/idc-ldap-scale); the LDIF
# is kept and reused.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
if [ "${_IDC_SCALE_NS:-}" != 1 ]; then
	[ "$(id -u)" = 0 ] || { echo "needs root (unshare -m, bind mounts)" >&2; exit 1; }
	exec env _IDC_SCALE_NS=1 unshare -m --propagation private -- "$0" "$@"
fi
NU=1000000 NG=100000 NM=20 BUILD=$HERE/../build SYNC=poll EXTRA=
while [ $# -gt 0 ]; do
	case $1 in
	--users) NU=$2 ;;
	--groups) NG=$2 ;;
	--members) NM=$2 ;;
	--build) BUILD=$2 ;;
	--sync) SYNC=$2 ;;
	--set) EXTRA="$EXTRA$2"$'\n' ;;
	*) echo "usage: see the head of $0" >&2; exit 2 ;;
	esac
	shift 2
done
BUILD=$(cd "$BUILD" && pwd)
POLL=${POLL:-5} TMO=${SCALE_TIMEOUT:-3600} SETTLE=${SETTLE:-20} RATE=${RATE:-50}
IDCACHED=$BUILD/src/daemon/idcached IDCACHE=$BUILD/src/cli/idcache GEN=$BUILD/bench/idcache-gen-ldif
for f in "$IDCACHED" "$IDCACHE" "$GEN" "$BUILD/src/nss/libnss_idcache.so.2"; do
	[ -e "$f" ] || { echo "no $f: build first" >&2; exit 1; }
done
W=${LDAP_BENCH_DIR:-/tmp/idc-ldap-scale}
mkdir -p "$W"
chmod 755 "$W"
DATA=$W/data-$NU-$NG-$NM.ldif
# Without the leading "version: 1" record, which slapadd takes for an entry
# without a DN; the groups' groupOfNames (structural, like posixGroup in the
# RFC 2307 nis.schema slapd.sh loads) becomes extensibleObject, which
# allows their member values.
if [ ! -s "$DATA" ]; then
	"$GEN" --users "$NU" --groups "$NG" --members "$NM" |
		sed -e '1{/^version: 1$/{N;d}}' -e 's/^objectClass: groupOfNames$/objectClass: extensibleObject/' >"$DATA.tmp" &&
		mv "$DATA.tmp" "$DATA" || exit 1
fi
# Users and groups whose id /etc/passwd or /etc/group already holds are
# not served (logged): not expected in the counts.
XU=$(awk -F: -v a=10000 -v b=$((10000 + NU)) '$3 >= a && $3 < b' /etc/passwd | wc -l)
XG=$(awk -F: -v a=10000 -v b=$((10000 + NG)) '$3 >= a && $3 < b' /etc/group | wc -l)
PORT=${LDAP_BENCH_PORT:-$((20000 + RANDOM % 20000))}
DPID= PROBES= MPID=
cleanup() {
	for p in $PROBES $MPID; do kill "$p" 2>/dev/null; done
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
mib() { echo "$(($1 / 1024)) MiB"; } # kB -> MiB

echo "# $(date -u +%FT%TZ) $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $(nproc) cpus, load $(cut -d' ' -f1-3 /proc/loadavg); idcache from $BUILD"
echo "# LDIF $DATA: $(du -m --apparent-size "$DATA" | cut -f1) MiB, $(grep -c '^dn:' "$DATA") entries"
"$HERE/../tests/ldap/slapd.sh" stop "$W/slapd"
rm -rf "$W/slapd"
[ "$SYNC" = syncrepl ] && export SLAPD_SYNCPROV=1
t0=$(now_ns)
SLAPD_MAXSIZE=$((16 << 30)) SLAPD_LOAD=slapadd "$HERE/../tests/ldap/slapd.sh" start "$W/slapd" "$PORT" "$DATA" >/dev/null || exit 1
echo "# slapadd -q + slapd start on 127.0.0.1:$PORT: $(ms_since "$t0") ms"

rm -rf "$W/run" "$W/state" "$W/status.txt"
mkdir -p "$W/run" "$W/state"
cat >"$W/idcache.conf" <<C
[idcache]
run_dir = $W/run
state_dir = $W/state
user = root
${IDC_GLOBAL:-}

[domain/bench]
id_provider = ldap
ldap_uri = ldap://127.0.0.1:$PORT
ldap_search_base = dc=example,dc=com
ldap_schema = rfc2307bis
enumerate = true
ldap_sync = $SYNC
$EXTRA
C
chmod 600 "$W/idcache.conf"
printf 'passwd: files\ngroup: files\nshadow: files\nhosts: files\n' >"$W/nsswitch.boot"
printf 'passwd: idcache\ngroup: idcache\nshadow: files\nhosts: files\n' >"$W/nsswitch.test"
mount --bind "$W/nsswitch.boot" /etc/nsswitch.conf
export LD_LIBRARY_PATH=$BUILD/src/nss IDCACHE_RUNDIR=$W/run
python3 -c "
import random, sys
r = random.Random(7)
for i in r.sample(range($NU), min(1000, $NU)):
    print('u%010d' % (10000 + i))" >"$W/names"

# One line a second: t_ms VmRSS VmHWM RssAnon RssFile RssShmem cache.mdb-Rss (kB).
sample_mem() {
	local t0=$1 pid=$2
	while kill -0 "$pid" 2>/dev/null; do
		local st m
		st=$(awk '{v[$1] = $2} END {printf "%d %d %d %d %d ", v["VmRSS:"], v["VmHWM:"], v["RssAnon:"], v["RssFile:"], v["RssShmem:"]}' "/proc/$pid/status" 2>/dev/null)
		m=$(awk '/cache\.mdb\/data\.mdb$/ {f = 1; next} /^[0-9a-f]+-[0-9a-f]+ / {f = 0} f && /^Rss:/ {s += $2} END {print s + 0}' "/proc/$pid/smaps" 2>/dev/null)
		echo "$((($(now_ns) - t0) / 1000000)) $st$m"
		sleep 1
	done
}

t0=$(now_ns)
"$IDCACHED" -c "$W/idcache.conf" -i >"$W/idcached.log" 2>&1 &
DPID=$!
for _ in $(seq 2400); do grep -q ready "$W/idcached.log" && break; sleep 0.05; done
grep -q ready "$W/idcached.log" || { echo "idcached did not start:" >&2; cat "$W/idcached.log" >&2; exit 1; }
echo "# idcached pid $DPID ready after $(ms_since "$t0") ms"
sample_mem "$t0" "$DPID" >"$W/mem.txt" &
MPID=$!
mount --bind "$W/nsswitch.test" /etc/nsswitch.conf
python3 "$HERE/ldap_scale_probe.py" "$W/probe-mc.txt" "$W/names" "$RATE" &
PROBES=$!
IDC_PROBE_LOOP=$DPID IDCACHE_MEMCACHE=no python3 "$HERE/ldap_scale_probe.py" "$W/probe-sock.txt" "$W/names" "$RATE" &
PROBES="$PROBES $!"

tu= tg= np=0 ng=0
while :; do
	[ "$(ms_since "$t0")" -gt $((TMO * 1000)) ] && { echo "# TIMEOUT after $TMO s: passwd=$np group=$ng"; break; }
	kill -0 "$DPID" 2>/dev/null || { echo "# idcached DIED:"; tail -20 "$W/idcached.log"; break; }
	s0=$(now_ns)
	st=$("$IDCACHE" status --run-dir "$W/run" 2>/dev/null)
	echo "$(ms_since "$t0") $((($(now_ns) - s0) / 1000))" >>"$W/status.txt"
	if ! echo "$st" | grep -qx 'domain.bench.ldap_in_flight=0' ||
		echo "$st" | grep -qx 'domain.bench.ldap_searches=0'; then
		echo "# $(ms_since "$t0") ms: enumeration in flight; $(tail -1 "$W/mem.txt" | awk '{printf "VmRSS %d MiB", $2 / 1024}')"
		sleep "$POLL"
		continue
	fi
	if [ -z "$tu" ]; then
		a=$(ms_since "$t0")
		np=$(timeout 300 getent passwd | wc -l)
		b=$(ms_since "$t0")
		echo "# poll ${a}-${b} ms: getent passwd -> $np lines; $(tail -1 "$W/mem.txt" | awk '{printf "VmRSS %d MiB", $2 / 1024}')"
		[ "$np" -ge $((NU - XU)) ] && tu=$b
	fi
	if [ -z "$tg" ]; then
		a=$(ms_since "$t0")
		ng=$(timeout 300 getent group | wc -l)
		b=$(ms_since "$t0")
		echo "# poll ${a}-${b} ms: getent group  -> $ng lines"
		[ "$ng" -ge $((NG - XG)) ] && tg=$b
	fi
	[ -n "$tu" ] && [ -n "$tg" ] && break
	# the daemon gave up on the rest (a limit): no use waiting
	if [ "$np" = "${np_last:-}" ] && [ "$ng" = "${ng_last:-}" ]; then
		echo "# no LDAP request in flight and no progress: stopped"
		break
	fi
	np_last=$np ng_last=$ng
	sleep "$POLL"
done
turns=$("$IDCACHE" status --run-dir "$W/run" 2>/dev/null | awk -F= '
	/ldap_turns=/ {n = $2} /ldap_turn_cpu_max_us=/ {m = $2} /ldap_turns_over_10ms=/ {o = $2}
	END {printf "%s calls, longest %.1f ms, %s over 10 ms", n, m / 1000, o}')
sleep "$SETTLE"
for p in $PROBES; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
PROBES=
steady=$(tail -1 "$W/mem.txt")
kill "$MPID" 2>/dev/null
wait "$MPID" 2>/dev/null
MPID=
# Percentiles of column 2 (latency, us) of the lines a filter selects.
pct() {
	awk "$2"' {print $2}' "$1" | sort -n | awk '{v[NR] = $1} END {
		if (!NR) { print "none"; exit }
		printf "n=%d p50=%.2f ms p99=%.2f ms max=%.2f ms", NR, v[int(NR * 0.5) + (NR * 0.5 > int(NR * 0.5))] / 1000,
			v[int(NR * 0.99) + (NR * 0.99 > int(NR * 0.99))] / 1000, v[NR] / 1000 }'
}
busy="\$1 <= ${tu:-999999999}"
# The socket probe's slowest 1% of cached lookups during the load, each
# call's time taken apart (ldap_scale_probe.py, schedstat): medians of
# the probe waiting for a CPU, the loop thread waiting for one, the loop
# thread's CPU time during the call, and what is left (the kernel's
# socket and wake-up paths, the probe's own CPU).
tail_parts() {
	awk "$busy"' && $3 == 0 && NF >= 8 {print $2, $6, $7, $8}' "$1" | sort -n | awk '
		{v[NR] = $0} END {
		if (NR < 100) { print "too few samples"; exit }
		k = 0
		for (i = int(NR * 0.99) + 1; i <= NR; i++) { split(v[i], f, " "); k++
			lat[k] = f[1]; pw[k] = f[2]; lw[k] = f[3]; lc[k] = f[4]; r[k] = f[1] - f[2] - f[3] - f[4] }
		printf "n=%d: latency %.1f, probe waiting %.1f, loop waiting %.1f, loop CPU %.1f, rest %.1f ms (medians)",
			k, med(lat, k), med(pw, k), med(lw, k), med(lc, k), med(r, k) }
		function med(a, n,   i, j, t, b) { for (i = 1; i <= n; i++) b[i] = a[i]
			for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (b[j] < b[i]) { t = b[i]; b[i] = b[j]; b[j] = t }
			return b[int((n + 1) / 2)] / 1000 }'
}
peak=$(sort -n -k3 "$W/mem.txt" | tail -1)
peakmdb=$(sort -n -k7 "$W/mem.txt" | tail -1)
ldif_kb=$(($(stat -c %s "$DATA") / 1024))
echo
printf '%-56s %s\n' \
	"users / groups / mean members in slapd" "$NU / $NG / $NM ($XU / $XG with an id /etc holds)" \
	"LDIF size" "$(mib "$ldif_kb")" \
	"getent passwd | wc -l returns all users" "${tu:-not reached} ms after daemon start ($np lines)" \
	"getent group | wc -l returns all groups" "${tg:-not reached} ms ($ng lines)" \
	"peak VmHWM (at $(echo "$peak" | cut -d' ' -f1) ms)" "$(mib "$(echo "$peak" | cut -d' ' -f3)") = $(awk -v h="$(echo "$peak" | cut -d' ' -f3)" -v l="$ldif_kb" 'BEGIN {printf "%.2f", h / l}') x LDIF" \
	"  at the peak sample: RssAnon / RssFile / cache.mdb Rss" "$(echo "$peak" | awk '{printf "%d / %d / %d MiB", $4 / 1024, $5 / 1024, $7 / 1024}')" \
	"  largest cache.mdb Rss seen" "$(echo "$peakmdb" | awk '{printf "%d MiB at %d ms", $7 / 1024, $1}')" \
	"steady (${SETTLE}s after): VmRSS / RssAnon / cache.mdb Rss" "$(echo "$steady" | awk '{printf "%d / %d / %d MiB", $2 / 1024, $4 / 1024, $7 / 1024}') ($(awk -v h="$(echo "$steady" | cut -d' ' -f2)" -v l="$ldif_kb" 'BEGIN {printf "%.2f", h / l}') x LDIF)" \
	"cache.mdb size" "$(du -m --apparent-size "$W/state/cache.mdb" 2>/dev/null | cut -f1) MiB (apparent), $(du -m "$W/state/cache.mdb" 2>/dev/null | cut -f1) MiB (allocated)" \
	"getpwnam via NSS (mc first), cached, during load" "$(pct "$W/probe-mc.txt" "$busy && \$3 == 0")" \
	"getpwnam via socket (IDCACHE_MEMCACHE=no), cached, load" "$(pct "$W/probe-sock.txt" "$busy && \$3 == 0")" \
	"  its slowest 1% taken apart (schedstat)" "$(tail_parts "$W/probe-sock.txt")" \
	"getpwnam via socket, first lookup of a name, load" "$(pct "$W/probe-sock.txt" "$busy && \$3 == 1")" \
	"getpwnam via NSS, first lookup of a name, load" "$(pct "$W/probe-mc.txt" "$busy && \$3 == 1")" \
	"lookups not found (mc / socket)" "$(awk '$4 == 0' "$W/probe-mc.txt" | wc -l) / $(awk '$4 == 0' "$W/probe-sock.txt" | wc -l)" \
	"  of which: why (mc / socket)" "$(awk '$4 == 0 {n[$5]++} END {for (k in n) printf "%s %d ", k, n[k]}' "$W/probe-mc.txt")/ $(awk '$4 == 0 {n[$5]++} END {for (k in n) printf "%s %d ", k, n[k]}' "$W/probe-sock.txt")" \
	"LDAP domain's loop turns (loop thread CPU time)" "$turns" \
	"the polls' \`idcache status\`, whole command, during load" "$(pct "$W/status.txt" "$busy")" \
	"load average at the end" "$(cut -d' ' -f1-3 /proc/loadavg)"
grep -E 'WARN|ERR|ldap_max' "$W/idcached.log" | head -5
umount /etc/nsswitch.conf
