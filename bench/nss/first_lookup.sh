#!/usr/bin/env bash
# What a fresh process pays for its first lookups (getpwnam, getgrgid,
# getgrouplist) through libnss_idcache.so.2: with the memory cache (the
# maps come from idcached over the socket, one MCMAP round trip for all
# three) and with IDCACHE_MEMCACHE=no (every lookup asks the daemon), in
# alternating batches of fresh processes; medians and 90th percentiles, and
# the warm repeat inside the same process.
#
#   bench/nss/first_lookup.sh BUILD_DIR [OUT_DIR]      (needs root: the
#   clients run in a private mount namespace with a test nsswitch.conf)
#
# N (300 processes per mode and batch) and BATCHES (3) tune it.
set -euo pipefail
BUILD=$(cd "${1:?usage: first_lookup.sh BUILD_DIR [OUT_DIR]}" && pwd)
OUT=${2:-$BUILD/bench-out/first_lookup}
N=${N:-300}
BATCHES=${BATCHES:-3}
[ "$(id -u)" = 0 ] || { echo "first_lookup: needs root (unshare -m)" >&2; exit 1; }
rm -rf "$OUT" && mkdir -p "$OUT/etc"
for u in $(seq 0 99); do
	echo "user$u:x:$((20000 + u)):$((30000 + u % 10)):User $u:/home/user$u:/bin/sh"
done > "$OUT/etc/passwd"
for g in $(seq 0 9); do
	echo "group$g:x:$((30000 + g)):user1,user2,user$((g + 10))"
done > "$OUT/etc/group"
cat > "$OUT/idcache.conf" <<CONF
[idcache]
run_dir = $OUT/run
state_dir = $OUT/state
user = root
[domain/local]
id_provider = files
passwd_files = $OUT/etc/passwd
group_files = $OUT/etc/group
CONF
printf 'passwd: idcache\ngroup: idcache\n' > "$OUT/nsswitch.conf"
"$BUILD/src/daemon/idcached" -c "$OUT/idcache.conf" -i 2>"$OUT/idcached.log" &
DAEMON=$!
trap 'kill $DAEMON 2>/dev/null; wait $DAEMON 2>/dev/null || true' EXIT
for _ in $(seq 200); do
	grep -q ready "$OUT/idcached.log" && break
	sleep 0.05
done
grep -q ready "$OUT/idcached.log" || { cat "$OUT/idcached.log" >&2; exit 1; }

# One batch of N fresh processes in one namespace; MEMCACHE yes or no.
batch() {
	unshare -m sh -c 'mount --bind "$1" /etc/nsswitch.conf && shift &&
		for i in $(seq "$1"); do
			IDCACHE_RUNDIR="$2" IDCACHE_MEMCACHE="$3" LD_LIBRARY_PATH="$4" "$5" user1
		done' sh "$OUT/nsswitch.conf" "$N" "$OUT/run" "$1" "$BUILD/src/nss" \
		"$BUILD/bench/nss/nss_first"
}
batch yes >/dev/null # the maps filled, the page cache warm
: > "$OUT/mc.txt"
: > "$OUT/socket.txt"
for _ in $(seq "$BATCHES"); do
	batch yes >> "$OUT/mc.txt"
	batch no >> "$OUT/socket.txt"
done
python3 - "$OUT" <<'PY' | tee "$OUT/first_lookup.txt"
import statistics, sys
out = sys.argv[1]
print("first three lookups of a fresh process (getpwnam, getgrgid, getgrouplist), us")
print(f"{'':24}{'median':>10}{'p90':>10}{'warm median':>14}{'processes':>11}")
for mode, label in (("mc", "memory cache"), ("socket", "socket only")):
    rows = [l.split() for l in open(f"{out}/{mode}.txt")]
    if not all(r[2] == "1" for r in rows):
        sys.exit(f"first_lookup: a {label} process missed an answer")
    first = sorted(float(r[0]) for r in rows)
    warm = [float(r[1]) for r in rows]
    print(f"{label:24}{statistics.median(first):>10.1f}"
          f"{first[int(0.9 * (len(first) - 1))]:>10.1f}"
          f"{statistics.median(warm):>14.2f}{len(rows):>11}")
PY
