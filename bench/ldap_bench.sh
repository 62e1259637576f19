#!/bin/bash
# ldap_bench.sh [BUILD_DIR] [REPS] — `id target` through the idcache LDAP
# provider against a local slapd (back-mdb, stats log), the SSSD
# performance scenario: 10,000 users, target in 200 groups x 300 member DNs,
# rfc2307bis, every 10th group nesting the previous one.
# The cache is opened with fsync on (as the daemon will), so commits are
# durable ones. Per rep: cold (empty cache, new process: includes connecting), after
# expiring every entry, warm (fresh entries: answered by the cache). Prints
# wall time of the lookup, LDAP searches sent (ours, and SRCH lines slapd
# logged), durable cache commits, and the group count.
# Compare: SSSD 2.8.2 cold 18.7 s / 60,007 searches, expired 16.4 s; nslcd
# 0.19 s / 232 searches every time (measured on this kind of machine).
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
BUILD=${1:-$HERE/../build}
REPS=${2:-3}
W=${LDAP_BENCH_DIR:-/tmp/idc-ldap-bench}
LOOKUP=$BUILD/bench/ldap_lookup
[ -x "$LOOKUP" ] || { echo "no $LOOKUP: build first" >&2; exit 1; }
mkdir -p "$W"
[ -s "$W/data.ldif" ] || python3 "$HERE/ldap_bench_ldif.py" "$W/data.ldif"
PORT=${LDAP_BENCH_PORT:-$((20000 + RANDOM % 20000))}
trap '"$HERE/../tests/ldap/slapd.sh" stop "$W/slapd"' EXIT
"$HERE/../tests/ldap/slapd.sh" stop "$W/slapd"
rm -rf "$W/slapd"
t0=$(date +%s.%N)
SLAPD_LOAD=slapadd "$HERE/../tests/ldap/slapd.sh" start "$W/slapd" "$PORT" "$W/data.ldif" >/dev/null
echo "# slapd $(/usr/sbin/slapd -VV 2>&1 | head -1 | sed 's/.*slapd \([^ ]*\).*/\1/') on 127.0.0.1:$PORT, loaded $(grep -c '^dn:' "$W/data.ldif") entries in $(echo "$(date +%s.%N) - $t0" | bc) s"
SLOG=$W/slapd/slapd.log
nsrch() { grep -c ' SRCH base=' "$SLOG" || true; }
t0=$(date +%s.%N)
ldapsearch -x -H "ldap://127.0.0.1:$PORT" -b dc=example,dc=com -LLL '(|(objectClass=posixAccount)(objectClass=posixGroup))' >/dev/null
echo "# one ldapsearch of every user and group: $(echo "$(date +%s.%N) - $t0" | bc) s"
OPTS=(-o "ldap_uri=ldap://127.0.0.1:$PORT" -o ldap_search_base=dc=example,dc=com -o ldap_schema=rfc2307bis
      -o ldap_tls_reqcert=never)
run() { # LABEL OPS...
	local label=$1; shift
	local s0; s0=$(nsrch)
	out=$("$LOOKUP" -d "$W/state" "${OPTS[@]}" "$@" 2>&1)
	local s1; s1=$(nsrch)
	local line; line=$(echo "$out" | grep '^id target')
	local ms; ms=$(echo "$line" | sed 's/.*ms=\([0-9.]*\).*/\1/')
	printf "%-8s rep=%d  id_ms=%9.3f  searches=%-4s slapd_SRCH=%-4d commits=%s  groups=%s\n" "$label" "$r" "$ms" \
		"$(echo "$line" | sed 's/.*searches=\([0-9]*\).*/\1/')" $((s1 - s0)) \
		"$(echo "$line" | sed 's/.*commits=\([0-9]*\).*/\1/')" \
		"$(echo "$out" | grep -o 'groups=[0-9]*:' | head -1 | tr -dc 0-9)"
}
# Two ways of naming member users: from the member DN's RDN (default), and
# by fetching every member entry in batches (every member user cached).
for mode in true false; do
	echo "# ldap_member_names_from_rdn=$mode"
	OPTS+=(-o "ldap_member_names_from_rdn=$mode")
	for r in $(seq "$REPS"); do
		rm -rf "$W/state"; mkdir -p "$W/state"
		run cold id target
		run expired expire id target
		run warm id target
	done
done
