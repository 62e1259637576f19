#!/usr/bin/env bash
# NSS lookups through glibc, side by side in one run (docs/DESIGN.md §9):
#   bench0          libnss_bench0.so.2, a do-nothing module: the dispatch floor
#   idcache mc      libnss_idcache.so.2 answering from the shared-memory cache
#   idcache socket  the same with IDCACHE_MEMCACHE=no: every lookup asks idcached
#   idcache nscd maps  glibc's own nscd client on idcached's nscd_socket
#                   (`passwd: files` over empty files: every answer came from it;
#                   after its first GETFD a process reads idcached's nscd maps,
#                   and a key the socket answered once costs no round trip)
#   idcache nscd socket (no maps)  the same on a second idcached with
#                   nscd_shared = false: GETFD refused, every lookup a round trip
#   files N         glibc's libnss_files over an N-line passwd (last user)
#   nscd shared     Debian's nscd (`shared yes`) in front of libnss_files
#   sssd mc         SSSD's memory cache (libnss_sss, a files domain)
# for getpwnam_r, getpwuid_r, getgrnam_r and getgrouplist (a user in 200
# groups), NPROCS processes at once, the median of REPS rounds. A round
# runs every row once, so a change in machine load meets all rows alike.
#
#   bench/nss/nss_bench.sh BUILD_DIR [OUT_DIR]     (scripts/bench runs it)
#
# Needs root: every client runs in a private mount namespace (unshare -m)
# with a test nsswitch.conf, passwd and group bind-mounted over /etc; the
# real files are never written. idcached runs from BUILD_DIR on the
# generated data (run and state directories under OUT_DIR). Figures go to
# OUT_DIR/nss_bench.txt and .json; budgets are printed, never enforced.
# nscd and sssd run only inside that namespace, on the 530-line passwd, with
# tmpfs over /run, /var/cache/nscd, /var/lib/sss, /etc/sssd and
# /var/log/sssd there; they are stopped by pid. Not installed, their rows
# say so (and which packages to install); they are never left out silently.
# While measured, their rows cannot fall back: nscd's row sees an empty
# /etc/passwd and /etc/group, sssd's row a hidden responder socket, so every
# answer came from nscd's shared map or SSSD's memory cache.
# NPROCS (10), TARGET_S (seconds per run, 0.5) and REPS (5) tune it.
set -euo pipefail

BUILD=$(cd "${1:?usage: nss_bench.sh BUILD_DIR [OUT_DIR]}" && pwd)
REPO=$(cd "$(dirname "$0")/../.." && pwd)
OUTROOT=${2:-$REPO/bench-out}
OUT=$OUTROOT/nss
NPROCS=${NPROCS:-10}
TARGET_S=${TARGET_S:-0.5}
REPS=${REPS:-5}
HARNESS=$BUILD/bench/nss/nss_multi
MODDIRS=$BUILD/bench/nss:$BUILD/src/nss
KEYS=("pwnam last" "pwuid 1999999" "grnam g199" "grouplist grpuser 201")

# ==== inside the namespace: one row per source ===================================
if [ "${_NSS_BENCH_IN_NS:-}" = 1 ]; then
	# This namespace's own /run: no nscd socket of the host's reaches a row,
	# and sssd's pid file stays here. /run/nscd is empty except in nscd's row.
	mount -t tmpfs -o mode=755 nss_bench_run /run
	mkdir -m 755 /run/nscd
	measure() { # label [VAR=value...]: the four keys, one line each
		local label=$1 k line
		shift
		for k in "${KEYS[@]}"; do
			# shellcheck disable=SC2086
			line=$(env LD_LIBRARY_PATH="$MODDIRS" IDCACHE_RUNDIR="$OUT/run" "$@" \
				"$HARNESS" "$NPROCS" "$TARGET_S" 1 $k) || true
			# no line: the key did not resolve at all (counted as failed)
			[ -n "$line" ] || line="mode=${k%% *} key=${k#* } no_result=1 failed_children=$NPROCS"
			echo "row=\"$label\" $line" >>"$OUT/raw.txt"
		done
	}
	row() { # label nsswitch passwd-or-"" memcache(yes|no)
		local label=$1 conf=$2 pw=$3 mc=$4
		mount --bind "$OUT/data/nsswitch.$conf" /etc/nsswitch.conf
		if [ -n "$pw" ]; then
			mount --bind "$OUT/data/$pw" /etc/passwd
			mount --bind "$OUT/data/group" /etc/group
		fi
		measure "$label" IDCACHE_MEMCACHE="$mc"
		if [ -n "$pw" ]; then
			umount /etc/passwd /etc/group
		fi
		umount /etc/nsswitch.conf
	}
	status_requests() {
		"$BUILD/src/cli/idcache" status --run-dir "$OUT/run" |
			awk -F= '/^requests\.(get|initgroups)/ {n += $2} END {print n + 0}'
	}
	warm() { # each key looked up in one process for ~50 ms (the caches fill)
		local k
		for k in "${KEYS[@]}"; do
			# shellcheck disable=SC2086
			"$HARNESS" 1 0.01 1 $k >/dev/null 2>&1 || true
		done
	}

	# -- nscd: Debian's glibc nscd, `shared yes`, libnss_files behind it --------
	NSCD_LABEL="nscd shared, 530 lines"
	NSCD=/usr/sbin/nscd
	nscd_pid="" nscd_state="" nscd_req=0
	start_nscd() {
		if [ ! -x "$NSCD" ] || [ ! -d /var/cache/nscd ]; then
			nscd_state="not installed (apt-get install nscd)"
			return 0
		fi
		# Debian's /etc/nscd.conf for passwd and group (shared, persistent,
		# check-files), but the positive TTL of passwd is 3600 s rather than
		# 600 s so that no entry expires during the run; nothing else cached.
		local db
		for db in passwd group; do
			printf '%-22s %-8s %s\n' enable-cache "$db" yes \
				positive-time-to-live "$db" 3600 negative-time-to-live "$db" 20 \
				suggested-size "$db" 211 check-files "$db" yes persistent "$db" yes \
				shared "$db" yes max-db-size "$db" 33554432 auto-propagate "$db" yes
		done >"$OUT/nscd.conf"
		printf 'debug-level 0\nparanoia no\nenable-cache hosts no\nenable-cache services no\nenable-cache netgroup no\n' \
			>>"$OUT/nscd.conf"
		mount -t tmpfs -o mode=755 nss_bench_nscd_cache /var/cache/nscd
		mount -t tmpfs -o mode=755 nss_bench_nscd_run /run/nscd
		"$NSCD" -F -f "$OUT/nscd.conf" </dev/null >"$OUT/nscd.log" 2>&1 &
		nscd_pid=$!
		for _ in $(seq 1 100); do
			[ -S /run/nscd/socket ] && break
			kill -0 "$nscd_pid" 2>/dev/null || break
			sleep 0.05
		done
		if [ ! -S /run/nscd/socket ]; then
			nscd_state="did not start (see $OUT/nscd.log)"
			stop_pid nscd_pid
		fi
		# hide the socket from every other row
		mount --bind "$OUT/data/emptydir" /run/nscd
	}
	nscd_requests() { # requests nscd answered over its socket (not from the map)
		"$NSCD" -g -f "$OUT/nscd.conf" 2>/dev/null |
			awk '/cache (hits|misses) on (positive|negative) entries/ {n += $1} END {print n + 0}'
	}
	nscd_row() {
		[ -n "$nscd_pid" ] || return 0
		umount /run/nscd # uncover the socket
		mount --bind "$OUT/data/nsswitch.files" /etc/nsswitch.conf
		mount --bind "$OUT/data/passwd.530" /etc/passwd
		mount --bind "$OUT/data/group" /etc/group
		warm
		# Empty files behind nscd while measured: a lookup nscd does not
		# answer finds nothing and fails the row.
		mount --bind "$OUT/data/empty" /etc/passwd
		mount --bind "$OUT/data/empty" /etc/group
		local r0 r1
		r0=$(nscd_requests)
		measure "$NSCD_LABEL"
		r1=$(nscd_requests)
		nscd_req=$((nscd_req + r1 - r0))
		umount /etc/passwd /etc/group
		umount /etc/passwd /etc/group /etc/nsswitch.conf
		mount --bind "$OUT/data/emptydir" /run/nscd
	}

	# -- SSSD: a files domain, libnss_sss answering from its memory cache ------
	SSSD_LABEL="sssd mc, 530 lines"
	SSSD=/usr/sbin/sssd
	sssd_pid="" sssd_kids="" sssd_state="" sssd_ready_s=""
	start_sssd() {
		local d
		# (grep reads all, no -q: under pipefail ldconfig's SIGPIPE would fail it)
		if [ ! -x "$SSSD" ] || ! ldconfig -p | grep 'libnss_sss\.so\.2' >/dev/null ||
			! compgen -G "/usr/lib/*/sssd/libsss_files.so" >/dev/null; then
			sssd_state="not installed (apt-get install sssd-common libnss-sss)"
			return 0
		fi
		for d in /var/lib/sss /etc/sssd /var/log/sssd; do
			if [ ! -d "$d" ]; then
				sssd_state="not installed: no $d (apt-get install sssd-common libnss-sss)"
				return 0
			fi
			mount -t tmpfs -o mode=755 nss_bench_sssd "$d"
		done
		mkdir -p /var/lib/sss/{db,mc,pipes/private,pubconf,gpo_cache,keytabs,secrets,deskprofile} \
			/etc/sssd/conf.d
		chmod 700 /var/lib/sss/pipes/private /var/lib/sss/db /var/lib/sss/secrets
		cat >/etc/sssd/sssd.conf <<-CONF
			[sssd]
			services = nss
			domains = files
			user = root

			[nss]
			memcache_timeout = 3600

			[domain/files]
			id_provider = files
			passwd_files = $OUT/data/passwd.530
			group_files = $OUT/data/group
		CONF
		chmod 600 /etc/sssd/sssd.conf
		local t0=$SECONDS
		"$SSSD" -i --logger=stderr -d 2 </dev/null >"$OUT/sssd.log" 2>&1 &
		sssd_pid=$!
		# ready once the domain answers for the last user and a 200th group
		for _ in $(seq 1 600); do
			if getent -s sss passwd last >/dev/null 2>&1 &&
				getent -s sss group g199 >/dev/null 2>&1 &&
				[ -e /var/lib/sss/mc/passwd ]; then
				sssd_ready_s=$((SECONDS - t0))
				break
			fi
			kill -0 "$sssd_pid" 2>/dev/null || break
			sleep 0.1
		done
		sssd_kids=$(ps -o pid= --ppid "$sssd_pid" | tr '\n' ' ')
		if [ -z "$sssd_ready_s" ]; then
			sssd_state="did not answer within 60 s (see $OUT/sssd.log)"
			stop_pid sssd_pid
		fi
	}
	# -- idcache's nscd socket: glibc's nscd client, files behind it empty ------
	# (only idcached can answer). nscdsock: the daemon handing out maps;
	# nscdsock-nomaps: the one with nscd_shared = false, run_dir run-nomaps.
	idc_nscd_row() { # label socket-directory
		mount --bind "$OUT/$2" /run/nscd
		mount --bind "$OUT/data/nsswitch.files" /etc/nsswitch.conf
		mount --bind "$OUT/data/empty" /etc/passwd
		mount --bind "$OUT/data/empty" /etc/group
		measure "$1"
		umount /etc/passwd /etc/group /etc/nsswitch.conf /run/nscd
	}
	nscd_lookups() { # lookups a daemon (its run_dir) answered on its nscd socket
		"$BUILD/src/cli/idcache" status --run-dir "$OUT/$1" |
			awk -F= '/^nscd\.requests\.(getpwby|getgrby|initgroups)/ {n += $2} END {print n + 0}'
	}
	sssd_row() {
		[ -n "$sssd_pid" ] || return 0
		mount --bind "$OUT/data/nsswitch.sss" /etc/nsswitch.conf
		warm # through the responder: it writes the memory cache
		# The responder's socket out of reach while measured: a memory
		# cache miss fails the lookup instead of asking sssd_nss.
		mount --bind "$OUT/data/emptydir" /var/lib/sss/pipes
		measure "$SSSD_LABEL"
		umount /var/lib/sss/pipes /etc/nsswitch.conf
	}

	stop_pid() { # name of a variable holding a pid we started
		local pid=${!1}
		if [ -n "$pid" ]; then
			kill "$pid" 2>/dev/null || true
			wait "$pid" 2>/dev/null || true
		fi
		printf -v "$1" '%s' ""
	}
	stop_daemons() {
		stop_pid nscd_pid
		stop_pid sssd_pid
		local k
		for k in $sssd_kids; do # sssd_be, sssd_nss: normally gone with the monitor
			if kill -0 "$k" 2>/dev/null; then
				sleep 1
				kill "$k" 2>/dev/null || true
			fi
		done
	}
	trap stop_daemons EXIT
	start_nscd
	start_sssd

	mc_req=0
	sock_req=0
	maps_req=0
	nomaps_req=0
	for round in $(seq 1 "$REPS"); do
		echo "nss_bench: round $round of $REPS" >&2
		row "bench0 (floor)" bench0 "" yes
		r0=$(status_requests)
		row "idcache mc" idcache "" yes
		r1=$(status_requests)
		row "idcache socket" idcache "" no
		r2=$(status_requests)
		mc_req=$((mc_req + r1 - r0))
		sock_req=$((sock_req + r2 - r1))
		for n in 30 530 100000; do
			row "files $n lines" files "passwd.$n" yes
		done
		nscd_row
		r0=$(nscd_lookups run)
		idc_nscd_row "idcache nscd maps" nscdsock
		r1=$(nscd_lookups run-nomaps)
		idc_nscd_row "idcache nscd socket (no maps)" nscdsock-nomaps
		r2=$(nscd_lookups run-nomaps)
		maps_req=$((maps_req + $(nscd_lookups run) - r0))
		nomaps_req=$((nomaps_req + r2 - r1))
		sssd_row
	done
	{
		echo "daemon_requests_mc_row=$mc_req daemon_requests_socket_row=$sock_req"
		[ -z "$nscd_state" ] || echo "row=\"$NSCD_LABEL\" state=\"$nscd_state\""
		[ -z "$sssd_state" ] || echo "row=\"$SSSD_LABEL\" state=\"$sssd_state\""
		[ -n "$nscd_state" ] || echo "nscd_socket_requests_in_row=$nscd_req"
		[ -n "$sssd_state" ] || echo "sssd_ready_s=$sssd_ready_s"
		echo "nscd_maps_row_socket_lookups=$maps_req nscd_nomaps_row_socket_lookups=$nomaps_req"
	} >>"$OUT/raw.txt"
	stop_daemons
	trap - EXIT
	exit 0
fi

# ==== outside: data, daemon, then the namespace ==================================
if [ "$(id -u)" != 0 ]; then
	echo "nss_bench: needs root (unshare -m, bind mounts); skipped" >&2
	exit 0
fi
for f in "$HARNESS" "$BUILD/bench/nss/libnss_bench0.so.2" "$BUILD/src/nss/libnss_idcache.so.2" \
	"$BUILD/src/daemon/idcached" "$BUILD/src/cli/idcache"; do
	[ -e "$f" ] || { echo "nss_bench: $f is missing (ninja -C $BUILD)" >&2; exit 1; }
done
# The namespace puts a tmpfs over /run (see above): nothing of ours may live there.
case "$(realpath -m "$OUT")/ $BUILD/" in
/run/* | *" /run/"*)
	echo "nss_bench: BUILD_DIR and OUT_DIR must not be under /run" >&2
	exit 1
	;;
esac
rm -rf "$OUT"
mkdir -p "$OUT/data/emptydir" "$OUT/run" "$OUT/state" "$OUT/nscdsock" "$OUT/run-nomaps" \
	"$OUT/state-nomaps" "$OUT/nscdsock-nomaps"
chmod 755 "$OUT" "$OUT/data" "$OUT/data/emptydir" "$OUT/run" "$OUT/nscdsock" "$OUT/run-nomaps" \
	"$OUT/nscdsock-nomaps"
umask 022

# passwd.N: root, first, grpuser, ..., last at line N; group: grpuser in
# g0..g199 (254 lines).
/usr/bin/python3 - "$OUT/data" <<'PY'
import sys
d = sys.argv[1]
for n in (30, 530, 100000):
    with open(f"{d}/passwd.{n}", "w") as f:
        f.write("root:x:0:0:root:/root:/bin/bash\n")
        f.write("first:x:2000:2000:First User:/home/first:/bin/bash\n")
        f.write("grpuser:x:2001:2001:Group User:/home/grpuser:/bin/bash\n")
        for i in range(3, n - 1):
            f.write(f"user{i}:x:{10000 + i}:{10000 + i}:User {i}:/home/user{i}:/bin/bash\n")
        f.write("last:x:1999999:1999999:Last User:/home/last:/bin/bash\n")
with open(f"{d}/group", "w") as f:
    f.write("root:x:0:\nfirst:x:2000:\ngrpuser:x:2001:\nlast:x:1999999:\n")
    for i in range(200):
        f.write(f"g{i}:x:{50000 + i}:first,grpuser,last\n")
    for i in range(200, 250):
        f.write(f"g{i}:x:{50000 + i}:first,last\n")
for src in ("bench0", "idcache", "files", "sss"):
    with open(f"{d}/nsswitch.{src}", "w") as f:
        f.write(f"passwd: {src}\ngroup: {src}\nshadow: files\nhosts: files\n")
open(f"{d}/empty", "w").close()
PY

# Two daemons on the same data: one hands glibc its nscd maps, the other
# (nscd_shared = false) answers every lookup on its socket.
start_idcached() { # suffix extra-[idcache]-line; sets DAEMON$suffix
	cat >"$OUT/idcache$1.conf" <<-CONF
		[idcache]
		run_dir = $OUT/run$1
		state_dir = $OUT/state$1
		user = $(id -un)
		nscd_socket = $OUT/nscdsock$1/socket
		$2

		[domain/bench]
		id_provider = files
		passwd_files = $OUT/data/passwd.100000
		group_files = $OUT/data/group
	CONF
	"$BUILD/src/daemon/idcached" -c "$OUT/idcache$1.conf" -i 2>"$OUT/idcached$1.log" &
	printf -v "DAEMON${1//-/_}" '%s' $!
}
wait_ready() { # suffix pid
	for _ in $(seq 1 600); do
		grep -q "ready" "$OUT/idcached$1.log" 2>/dev/null && return 0
		kill -0 "$2" 2>/dev/null || { cat "$OUT/idcached$1.log" >&2; exit 1; }
		sleep 0.05
	done
	echo "nss_bench: idcached$1 not ready" >&2
	exit 1
}
stop_idcached() {
	kill "$DAEMON" "$DAEMON_nomaps" 2>/dev/null || true
	wait "$DAEMON" "$DAEMON_nomaps" 2>/dev/null || true
}
DAEMON="" DAEMON_nomaps=""
trap stop_idcached EXIT
start_idcached "" ""
start_idcached -nomaps "nscd_shared = false"
wait_ready "" "$DAEMON"
wait_ready -nomaps "$DAEMON_nomaps"

{
	echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'); nproc=$(nproc);" \
		"glibc $(ldd --version | head -1 | awk '{print $NF}')"
	echo "# $NPROCS processes at once; us/lookup = wall time / all lookups;" \
		"median of $REPS rounds, each cell one run of ~${TARGET_S}s"
	echo "# nscd: $(dpkg-query -W -f '${Package} ${Version}' nscd 2>/dev/null || echo none);" \
		"sssd: $(dpkg-query -W -f '${Package} ${Version}' sssd-common 2>/dev/null || echo none)," \
		"$(dpkg-query -W -f '${Package} ${Version}' libnss-sss 2>/dev/null || echo 'no libnss-sss')"
} >"$OUT/raw.txt"
env _NSS_BENCH_IN_NS=1 unshare -m --propagation private "$0" "$BUILD" "$OUTROOT"
stop_idcached
trap - EXIT

status=0
/usr/bin/python3 - "$OUT/raw.txt" "$OUTROOT/nss_bench.txt" "$OUTROOT/nss_bench.json" <<'PY' || status=$?
import json, re, sys
raw, txt, js = sys.argv[1:4]
rows, order, extra, header, state = {}, [], {}, [], {}
for line in open(raw):
    if line.startswith("#"):
        header.append(line.rstrip())
        continue
    kv = {k: v.strip('"') for k, v in re.findall(r'(\w+)=("[^"]*"|\S+)', line)}
    if "row" not in kv:
        extra.update({k: int(v) for k, v in kv.items()})
        continue
    row = kv["row"]
    if row not in rows:
        rows[row] = {}
        order.append(row)
    if "state" in kv:  # nscd or sssd not installed, or did not start
        state[row] = kv["state"]
        continue
    cell = rows[row].setdefault(kv["mode"], {"runs": [], "failed": 0})
    if "us_median" in kv and int(kv["failed_children"]) == 0:
        cell["runs"].append(float(kv["us_median"]))
    cell["failed"] += int(kv["failed_children"])
for r in rows.values():
    for cell in r.values():
        runs = sorted(cell["runs"])
        n = len(runs)
        if n == 0:  # every run failed: no figure
            cell["us_median"] = cell["us_min"] = cell["us_max"] = None
            continue
        cell["us_median"] = runs[n // 2] if n % 2 else (runs[n // 2 - 1] + runs[n // 2]) / 2
        cell["us_min"], cell["us_max"] = runs[0], runs[-1]
modes = ["pwnam", "pwuid", "grnam", "grouplist"]
titles = ["getpwnam_r", "getpwuid_r", "getgrnam_r", "getgrouplist(200)"]
floor, mc, sock = rows["bench0 (floor)"], rows["idcache mc"], rows["idcache socket"]
W = 30
def us(r, m):
    return rows[r].get(m, {}).get("us_median")
def cells(r, fmt, f):
    if r in state:
        return "  " + state[r]
    out = ""
    for m in modes:
        v = us(r, m)
        out += fmt.format(f(v, m)) if v is not None else f"{'FAILED':>{len(fmt.format(0.0))}}"
    return out
out = header[:]
out.append("")
out.append(f"{'us per lookup (median)':<{W}}" + "".join(f"{t:>20}" for t in titles))
for r in order:
    out.append(f"{r:<{W}}" + cells(r, "{:>20.3f}", lambda v, m: v))
out.append("")
out.append(f"{'ratio to the floor':<{W}}" + "".join(f"{t:>20}" for t in titles))
for r in order:
    out.append(f"{r:<{W}}" + cells(r, "{:>19.2f}x", lambda v, m: v / floor[m]["us_median"]))
out.append("")
out.append(f"{'lookups/s, all procs':<{W}}" + "".join(f"{t:>20}" for t in titles))
for r in order:
    out.append(f"{r:<{W}}" + cells(r, "{:>20,.0f}", lambda v, m: 1e6 / v))
out.append("")
out.append("ratios (how many times the time of the row on the right):")
def ratio_line(name, a, b, word):
    return f"  {name:<46}" + "".join(
        f"{a[m]['us_median'] / b[m]['us_median']:>12.2f}x"
        if a[m]["us_median"] is not None and b[m]["us_median"] is not None else f"{'FAILED':>13}"
        for m in modes) + f"  {word}"
out.append(f"  {'':<46}" + "".join(f"{m:>13}" for m in modes))
out.append(ratio_line("idcache mc / floor", mc, floor, "(the dispatch floor's time)"))
out.append(ratio_line("idcache socket / idcache mc", sock, mc, "(slower than mc)"))
for r in order:
    if r.startswith("files"):
        out.append(ratio_line(f"{r} / idcache mc", rows[r], mc, "(slower than mc)"))
for r in ("idcache nscd maps", "idcache nscd socket (no maps)"):
    out.append(ratio_line(f"{r} / idcache mc", rows[r], mc, "(the time of mc)"))
for r in order:
    if r.startswith(("nscd", "sssd")) and r not in state:
        out.append(ratio_line(f"{r} / idcache mc", rows[r], mc, "(the time of mc)"))
nscd_row = next((r for r in order if r.startswith("nscd shared") and r not in state), None)
maps_row, nomaps_row = rows["idcache nscd maps"], rows["idcache nscd socket (no maps)"]
out.append(ratio_line("idcache nscd maps / floor", maps_row, floor, "(the floor's time)"))
if nscd_row:
    out.append(ratio_line(f"idcache nscd maps / {nscd_row}", maps_row, rows[nscd_row],
                          "(nscd's time)"))
failed = sum(v["failed"] for r in rows.values() for v in r.values())
out.append("")
out.append(f"daemon requests during the mc row: {extra.get('daemon_requests_mc_row', '?')}; "
           f"during the socket row: {extra.get('daemon_requests_socket_row', '?')}; "
           f"failed children: {failed}")
for r in order:
    if r.startswith("nscd") and r not in state:
        out.append(f"{r}: /etc/passwd and /etc/group empty while measured; requests over nscd's "
                   f"socket during the row: {extra.get('nscd_socket_requests_in_row', '?')} "
                   "(the rest read its shared map)")
    if r == "idcache nscd maps":
        out.append(f"{r}: /etc/passwd and /etc/group empty while measured; lookups over "
                   f"idcached's socket in all rounds: {extra.get('nscd_maps_row_socket_lookups', '?')} "
                   "(a key's first lookup in any process; once answered it is in the maps "
                   "every process reads)")
    if r == "idcache nscd socket (no maps)":
        out.append(f"{r}: nscd_shared = false; lookups over its socket in all rounds: "
                   f"{extra.get('nscd_nomaps_row_socket_lookups', '?')} (every lookup)")
    if r.startswith("sssd") and r not in state:
        out.append(f"{r}: sssd answered after {extra.get('sssd_ready_s', '?')} s; its responder "
                   "socket hidden while measured (every answer from the memory cache)")
for r in order:
    if r in state:
        out.append(f"{r}: {state[r]}")
def ratio(a, b, m):
    x, y = a[m]["us_median"], b[m]["us_median"]
    return x / y if x is not None and y is not None else float("nan")
b1 = ratio(mc, floor, "pwnam")
b1u = ratio(mc, floor, "pwuid")
b2 = ratio(rows["files 530 lines"], mc, "pwnam")
b3 = mc["grouplist"]["us_median"] or float("nan")
def ok(c):
    return "met" if c else "NOT met"
out.append("budgets (docs/DESIGN.md §9):")
out.append(f"  mc getpwnam/getpwuid <= 1.5x floor: {b1:.2f}x / {b1u:.2f}x  {ok(max(b1, b1u) <= 1.5)}")
out.append(f"  mc >= 10x faster than files at 530 lines (getpwnam): {b2:.1f}x  {ok(b2 >= 10)}")
out.append(f"  mc initgroups, user in 200 groups <= 2 us: {b3:.3f} us  {ok(b3 <= 2)}")
if nscd_row:
    b4 = ratio(maps_row, rows[nscd_row], "pwnam")
    b5 = ratio(maps_row, rows[nscd_row], "grouplist")
    out.append(f"  idcached's nscd maps getpwnam/getgrouplist <= 2x nscd shared: {b4:.2f}x / "
               f"{b5:.2f}x  {ok(max(b4, b5) <= 2)}")
b6 = nomaps_row["pwnam"]["us_median"] or float("nan")
out.append(f"  nscd socket getpwnam (no map) <= 15 us: {b6:.3f} us  {ok(b6 <= 15)}")
text = "\n".join(out) + "\n"
print(text, end="")
open(txt, "w").write(text)
json.dump({"header": header, "rows": rows, "order": order, "extra": extra, "state": state},
          open(js, "w"), indent=1)
sys.exit(1 if failed else 0)
PY
echo "nss_bench: results in $OUTROOT/nss_bench.txt and $OUTROOT/nss_bench.json"
exit $status
