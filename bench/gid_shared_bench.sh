#!/bin/bash
# gid_shared_bench.sh [-r ROUNDS] [-n USERS] [-l LOOKUPS] BUILD [BUILD...]
# getgrgid of a gid that every user holds as the primary group (Debian's
# 100, AD's 513), through idcached's socket with the shared maps off
# (IDCACHE_MEMCACHE=no): a files domain of USERS users (default 200,000)
# all with gid 5000, one group 5000 and 999 others. For each round, each
# BUILD (a meson build directory) in turn: start idcached on the sample,
# time LOOKUPS getgrgid(5000) and 10 × LOOKUPS getgrgid(5001) (a gid no
# user holds) and print ms per lookup. Root: the client's nsswitch.conf is
# bind-mounted in a private mount namespace (unshare -m).
set -euo pipefail
ROUNDS=3 USERS=200000 LOOKUPS=20
while getopts r:n:l: o; do
	case $o in
	r) ROUNDS=$OPTARG ;;
	n) USERS=$OPTARG ;;
	l) LOOKUPS=$OPTARG ;;
	*) sed -n '2,10p' "$0"; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
[ $# -ge 1 ] || { sed -n '2,10p' "$0"; exit 2; }

W=$(mktemp -d /tmp/idc-gidbench-XXXXXX)
trap 'rm -rf "$W"' EXIT
mkdir -p "$W/etc" "$W/run" "$W/state"
python3 - "$W/etc" "$USERS" <<'PY'
import sys
out, n = sys.argv[1], int(sys.argv[2])
with open(f"{out}/passwd", "w") as f:
    for i in range(n):
        f.write(f"u{i:07d}:x:{10000 + i}:5000:U:/home/u{i}:/bin/sh\n")
with open(f"{out}/group", "w") as f:
    f.write("staff:x:5000:\n")
    for g in range(1, 1000):
        f.write(f"g{g}:x:{5000 + g}:u{g:07d}\n")
PY
cat > "$W/idcache.conf" <<CONF
[idcache]
run_dir = $W/run
state_dir = $W/state
user = $(id -un)

[domain/local]
id_provider = files
passwd_files = $W/etc/passwd
group_files = $W/etc/group
CONF
printf 'passwd: idcache\ngroup: idcache\nshadow: files\nhosts: files\n' > "$W/nsswitch.conf"
cat > "$W/lookup.c" <<'C'
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
int main(int argc, char **argv)
{
	if (argc != 3)
		return 2;
	gid_t gid = (gid_t)strtoul(argv[1], NULL, 10);
	int n = atoi(argv[2]);
	struct timespec a, b;
	clock_gettime(CLOCK_MONOTONIC, &a);
	for (int i = 0; i < n; i++)
		if (!getgrgid(gid))
			return 1;
	clock_gettime(CLOCK_MONOTONIC, &b);
	printf("%.3f", ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / 1e6 / n);
	return 0;
}
C
cc -O2 -o "$W/lookup" "$W/lookup.c"

client() { # BUILD ARGS...
	local b=$1
	shift
	unshare -m sh -c 'mount --bind "$0" /etc/nsswitch.conf && exec "$@"' "$W/nsswitch.conf" \
		env IDCACHE_MEMCACHE=no IDCACHE_RUNDIR="$W/run" LD_LIBRARY_PATH="$b/src/nss" "$@"
}

for r in $(seq "$ROUNDS"); do
	for b in "$@"; do
		rm -rf "$W/state"/* "$W/run"/*
		"$b/src/daemon/idcached" -c "$W/idcache.conf" -i 2> "$W/log" &
		pid=$!
		for _ in $(seq 300); do grep -q ready "$W/log" && break; sleep 0.1; done
		shared=$(client "$b" "$W/lookup" 5000 "$LOOKUPS")
		alone=$(client "$b" "$W/lookup" 5001 $((LOOKUPS * 10)))
		kill "$pid"
		wait "$pid" || true
		echo "round $r $b: getgrgid(shared gid) $shared ms, getgrgid(gid no user holds) $alone ms, load $(cut -d' ' -f1 /proc/loadavg)"
	done
done
