#!/bin/bash
# import_compare.sh [-r ROUNDS] USERS [IDCACHE...] — `idcache db import` and
# `db export` beside OpenLDAP's `slapadd -q` and `slapcat` (back-mdb) on the
# same LDIF, alternating in each round so both see the same machine.
#
# The LDIF comes from bench/idcache-gen-ldif (USERS users, USERS/10 groups);
# both stores index objectClass, uid, cn, uidNumber and gidNumber for
# equality. Each IDCACHE (default: this build's) is timed in turn, so an
# older build can run beside a newer one. Per round: seconds, entries/s,
# peak anonymous and file-backed resident memory of the import (KiB,
# sampled every 20 ms; the store's map pages are file-backed), CPU seconds
# (user + system, all threads) of each import; at the end medians with
# min-max and each import's ratio to slapadd's in its round, in time and in
# CPU (the latter moves less with the machine's load).
# State in $IMPORT_BENCH_DIR (default /tmp/idc-import-bench).
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
ROUNDS=3
if [ "${1:-}" = "-r" ]; then ROUNDS=$2; shift 2; fi
N=${1:?usage: import_compare.sh [-r ROUNDS] USERS [IDCACHE...]}
shift
BINS=("$@")
[ ${#BINS[@]} -gt 0 ] || BINS=("$HERE/../build/src/cli/idcache")
GEN=$(dirname "${BINS[0]}")/../../bench/idcache-gen-ldif
[ -x "$GEN" ] || GEN=$HERE/../build/bench/idcache-gen-ldif
W=${IMPORT_BENCH_DIR:-/tmp/idc-import-bench}
SCHEMA=/etc/ldap/schema
mkdir -p "$W"
L=$W/users-$N.ldif
# without the leading "version: 1" record, which slapadd takes for an entry without a DN
[ -s "$L" ] || "$GEN" --users "$N" | sed '1{/^version: 1$/{N;d}}' > "$L"
E=$(grep -c '^dn:' "$L")
# the generator's groups are RFC 2307bis (posixGroup AUXILIARY beside
# groupOfNames); Debian ships RFC 2307's nis.schema: a copy with that change
awk '/^(objectclass|attributetype)/ {g = /'"'"'posixGroup'"'"'/} g {sub(/STRUCTURAL/, "AUXILIARY")} {print}' \
	"$SCHEMA/nis.schema" > "$W/nis-2307bis.schema"
cat > "$W/slapd.conf" <<C
include $SCHEMA/core.schema
include $SCHEMA/cosine.schema
include $W/nis-2307bis.schema
include $SCHEMA/inetorgperson.schema
modulepath /usr/lib/ldap
moduleload back_mdb
database mdb
maxsize 68719476736
suffix "dc=example,dc=com"
directory $W/slapd-db
index objectClass,uid,cn,uidNumber,gidNumber eq
C

# peak RssAnon and RssFile (KiB) of a command, sampled; prints "anon file"
peak_rss() {
	"$@" & local p=$! ma=0 mf=0 a f
	while kill -0 $p 2>/dev/null; do
		read -r a f < <(awk '/RssAnon/{a=$2} /RssFile/{f=$2} END{print a+0, f+0}' \
			/proc/$p/status 2>/dev/null || echo "0 0")
		[ "${a:-0}" -gt $ma ] && ma=$a
		[ "${f:-0}" -gt $mf ] && mf=$f
		sleep 0.02
	done
	wait $p
	echo "$ma $mf"
}
now() { date +%s.%N; }
since() { echo "$(now) - $1" | bc; }
# CPU seconds of the children this shell waited for, from `times` output in $1
cpu_of() { awk 'NR == 2 { s = 0; for (i = 1; i <= 2; i++) { split($i, t, "m"); sub("s", "", t[2]); s += t[1] * 60 + t[2] } print s }' "$1"; }

echo "# $E entries, $(stat -c %s "$L") bytes of LDIF; $(nproc) CPUs; load $(cut -d' ' -f1-3 /proc/loadavg)"
R=$W/results
: > "$R"
for r in $(seq "$ROUNDS"); do
	rm -rf "$W/slapd-db"; mkdir -p "$W/slapd-db"; sync
	times > "$W/times"; c0=$(cpu_of "$W/times")
	# sampled like the imports, so both carry the sampler's CPU
	t0=$(now); ms=$(peak_rss /usr/sbin/slapadd -q -f "$W/slapd.conf" -l "$L"); sa=$(since "$t0")
	times > "$W/times"; c1=$(cpu_of "$W/times")
	t0=$(now); /usr/sbin/slapcat -f "$W/slapd.conf" -l "$W/out.ldif"; sc=$(since "$t0")
	echo "slapadd $r $sa $sc $ms $(echo "$c1 - $c0" | bc)" >> "$R"
	for i in "${!BINS[@]}"; do
		b=${BINS[$i]}; S=$W/store
		rm -rf "$S"; "$b" db -d "$S" init -i objectClass,uid,cn,uidNumber,gidNumber > /dev/null
		sync
		times > "$W/times"; c0=$(cpu_of "$W/times")
		t0=$(now); m=$(peak_rss "$b" db -d "$S" import -q "$L"); im=$(since "$t0")
		times > "$W/times"; c1=$(cpu_of "$W/times")
		t0=$(now); "$b" db -d "$S" export "$W/out.ldif"; ex=$(since "$t0")
		echo "idcache$i $r $im $ex $m $(echo "$c1 - $c0" | bc)" >> "$R"
	done
	grep " $r " "$R" | awk -v E="$E" '{printf "round %s %-9s import %7.2f s %9.0f/s cpu %6.2f s  export %6.2f s %9.0f/s  rss anon %s file %s KiB\n", $2, $1, $3, E/$3, $7, $4, E/$4, $5, $6}'
done
rm -f "$W/out.ldif"
echo "# medians (min-max) over $ROUNDS rounds; ratio: slapadd's time / the import's, per round"
python3 - "$R" "$E" <<'P'
import sys, statistics as st
rows = [l.split() for l in open(sys.argv[1])]
E = int(sys.argv[2])
def show(v, f=",.0f"):
    return f"{st.median(v):{f}} ({min(v):{f}}-{max(v):{f}})"
names = sorted({r[0] for r in rows}, key=lambda n: (n != "slapadd", n))
sa = {r[1]: float(r[2]) for r in rows if r[0] == "slapadd"}
sc = {r[1]: float(r[3]) for r in rows if r[0] == "slapadd"}
scpu = {r[1]: float(r[6]) for r in rows if r[0] == "slapadd"}
for n in names:
    rs = [r for r in rows if r[0] == n]
    line = f"{n:9} import {show([E / float(r[2]) for r in rs])}/s  cpu {show([float(r[6]) for r in rs], '.2f')} s" \
           f"  export {show([E / float(r[3]) for r in rs])}/s"
    if n != "slapadd":
        line += f"  ×slapadd {show([sa[r[1]] / float(r[2]) for r in rs], '.2f')}" \
                f"  ×slapcat {show([sc[r[1]] / float(r[3]) for r in rs], '.2f')}" \
                f"  cpu ×slapadd {show([scpu[r[1]] / float(r[6]) for r in rs], '.2f')}"
        line += f"  peak anon {max(int(r[4]) for r in rs) // 1024} MiB"
    print(line)
P
