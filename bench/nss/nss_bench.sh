#!/usr/bin/env bash
# NSS lookups through glibc, side by side in one run (DESIGN §9):
#   bench0          libnss_bench0.so.2, a do-nothing module: the dispatch floor
#   idcache mc      libnss_idcache.so.2 answering from the shared-memory cache
#   idcache socket  the same with IDCACHE_MEMCACHE=no: every lookup asks idcached
#   files N         glibc's libnss_files over an N-line passwd (last user)
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
	row() { # label nsswitch passwd-or-"" memcache(yes|no)
		local label=$1 conf=$2 pw=$3 mc=$4
		mount --bind "$OUT/data/nsswitch.$conf" /etc/nsswitch.conf
		if [ -n "$pw" ]; then
			mount --bind "$OUT/data/$pw" /etc/passwd
			mount --bind "$OUT/data/group" /etc/group
		fi
		for k in "${KEYS[@]}"; do
			# shellcheck disable=SC2086
			line=$(env LD_LIBRARY_PATH="$MODDIRS" IDCACHE_RUNDIR="$OUT/run" \
				IDCACHE_MEMCACHE="$mc" "$HARNESS" "$NPROCS" "$TARGET_S" 1 $k)
			echo "row=\"$label\" $line" >>"$OUT/raw.txt"
		done
		if [ -n "$pw" ]; then
			umount /etc/passwd /etc/group
		fi
		umount /etc/nsswitch.conf
	}
	status_requests() {
		"$BUILD/src/cli/idcache" status --run-dir "$OUT/run" |
			awk -F= '/^requests\.(get|initgroups)/ {n += $2} END {print n + 0}'
	}
	mc_req=0
	sock_req=0
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
	done
	echo "daemon_requests_mc_row=$mc_req daemon_requests_socket_row=$sock_req" >>"$OUT/raw.txt"
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
rm -rf "$OUT"
mkdir -p "$OUT/data" "$OUT/run" "$OUT/state"
chmod 755 "$OUT" "$OUT/data" "$OUT/run"
umask 022

# passwd.N: root, first, grpuser, ..., last at line N; group: grpuser in
# g0..g199 (254 lines). The same shape as ../shared/anchors' data.
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
for src in ("bench0", "idcache", "files"):
    with open(f"{d}/nsswitch.{src}", "w") as f:
        f.write(f"passwd: {src}\ngroup: {src}\nshadow: files\nhosts: files\n")
PY

cat >"$OUT/idcache.conf" <<CONF
[idcache]
run_dir = $OUT/run
state_dir = $OUT/state
user = $(id -un)

[domain/bench]
id_provider = files
passwd_files = $OUT/data/passwd.100000
group_files = $OUT/data/group
CONF
"$BUILD/src/daemon/idcached" -c "$OUT/idcache.conf" -i 2>"$OUT/idcached.log" &
DAEMON=$!
trap 'kill $DAEMON 2>/dev/null || true; wait $DAEMON 2>/dev/null || true' EXIT
for _ in $(seq 1 600); do
	grep -q "ready" "$OUT/idcached.log" 2>/dev/null && break
	kill -0 $DAEMON 2>/dev/null || { cat "$OUT/idcached.log" >&2; exit 1; }
	sleep 0.05
done
grep -q "ready" "$OUT/idcached.log" || { echo "nss_bench: idcached not ready" >&2; exit 1; }

{
	echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'); nproc=$(nproc);" \
		"glibc $(ldd --version | head -1 | awk '{print $NF}')"
	echo "# $NPROCS processes at once; us/lookup = wall time / all lookups (as ../shared/anchors);" \
		"median of $REPS rounds, each cell one run of ~${TARGET_S}s"
} >"$OUT/raw.txt"
env _NSS_BENCH_IN_NS=1 unshare -m --propagation private "$0" "$BUILD" "$OUTROOT"
kill $DAEMON
wait $DAEMON 2>/dev/null || true
trap - EXIT

/usr/bin/python3 - "$OUT/raw.txt" "$OUTROOT/nss_bench.txt" "$OUTROOT/nss_bench.json" <<'PY'
import json, re, sys
raw, txt, js = sys.argv[1:4]
rows, order, extra, header = {}, [], {}, []
for line in open(raw):
    if line.startswith("#"):
        header.append(line.rstrip())
        continue
    kv = dict(re.findall(r'(\w+)=("[^"]*"|\S+)', line))
    if "row" not in kv:
        extra.update({k: int(v) for k, v in kv.items()})
        continue
    row = kv["row"].strip('"')
    if row not in rows:
        rows[row] = {}
        order.append(row)
    cell = rows[row].setdefault(kv["mode"], {"runs": [], "failed": 0})
    cell["runs"].append(float(kv["us_median"]))
    cell["failed"] += int(kv["failed_children"])
for r in rows.values():
    for cell in r.values():
        runs = sorted(cell["runs"])
        n = len(runs)
        cell["us_median"] = runs[n // 2] if n % 2 else (runs[n // 2 - 1] + runs[n // 2]) / 2
        cell["us_min"], cell["us_max"] = runs[0], runs[-1]
modes = ["pwnam", "pwuid", "grnam", "grouplist"]
titles = ["getpwnam_r", "getpwuid_r", "getgrnam_r", "getgrouplist(200)"]
floor, mc, sock = rows["bench0 (floor)"], rows["idcache mc"], rows["idcache socket"]
out = header[:]
out.append("")
out.append(f"{'us per lookup (median)':<22}" + "".join(f"{t:>20}" for t in titles))
for r in order:
    out.append(f"{r:<22}" + "".join(f"{rows[r][m]['us_median']:>20.3f}" for m in modes))
out.append("")
out.append("ratios (how many times the time of the row on the right):")
def ratio_line(name, a, b, word):
    return f"  {name:<34}" + "".join(f"{a[m]['us_median'] / b[m]['us_median']:>12.2f}x" for m in modes) + f"  {word}"
out.append(f"  {'':<34}" + "".join(f"{m:>13}" for m in modes))
out.append(ratio_line("idcache mc / floor", mc, floor, "(the dispatch floor's time)"))
out.append(ratio_line("idcache socket / idcache mc", sock, mc, "(slower than mc)"))
for r in order:
    if r.startswith("files"):
        out.append(ratio_line(f"{r} / idcache mc", rows[r], mc, "(slower than mc)"))
failed = sum(v["failed"] for r in rows.values() for v in r.values())
out.append("")
out.append(f"daemon requests during the mc row: {extra.get('daemon_requests_mc_row', '?')}; "
           f"during the socket row: {extra.get('daemon_requests_socket_row', '?')}; "
           f"failed children: {failed}")
b1 = mc["pwnam"]["us_median"] / floor["pwnam"]["us_median"]
b1u = mc["pwuid"]["us_median"] / floor["pwuid"]["us_median"]
b2 = rows["files 530 lines"]["pwnam"]["us_median"] / mc["pwnam"]["us_median"]
b3 = mc["grouplist"]["us_median"]
def ok(c):
    return "met" if c else "NOT met"
out.append("budgets (DESIGN §9):")
out.append(f"  mc getpwnam/getpwuid <= 1.5x floor: {b1:.2f}x / {b1u:.2f}x  {ok(max(b1, b1u) <= 1.5)}")
out.append(f"  mc >= 10x faster than files at 530 lines (getpwnam): {b2:.1f}x  {ok(b2 >= 10)}")
out.append(f"  mc initgroups, user in 200 groups <= 2 us: {b3:.3f} us  {ok(b3 <= 2)}")
text = "\n".join(out) + "\n"
print(text, end="")
open(txt, "w").write(text)
json.dump({"header": header, "rows": rows, "order": order, "extra": extra}, open(js, "w"),
          indent=1)
PY
echo "nss_bench: results in $OUTROOT/nss_bench.txt and $OUTROOT/nss_bench.json"
