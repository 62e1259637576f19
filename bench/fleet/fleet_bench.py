#!/usr/bin/env python3
"""Fleet benchmark: N idcached instances ("hosts") against one slapd, poll
mode and syncrepl side by side.

    bench/fleet/fleet_bench.py [--build DIR] [--out DIR] [--quick]
                               [--hosts 10,100,300] [--modes poll,poll-incr,syncrepl]
                               [--changes 20] [--steady SECS]
    bench/fleet/fleet_bench.py --report OUT/fleet_bench.json  (the table again)
    bench/fleet/fleet_bench.py --selftest FIXTURE_DIR   (the unit test)

Needs root. One slapd on loopback (Debian's, back-mdb, the syncprov overlay
and the monitor backend loaded as modules, stats logging) holds 10,000 users
and 1,000 groups made by idcache-gen-ldif (rfc2307bis: member DNs and
memberUid). For each mode and each N, on a freshly loaded directory:

  cold start   all N started together with empty state directories; time
               until every host holds every user and group (idcache status)
               and answers the last user and group through NSS; what slapd
               sent meanwhile; slapd's peak CPU and RSS.
  steady       one window with nothing changing: searches (stats log),
               entries and bytes sent (cn=Monitor), slapd CPU, per host per
               hour. Poll mode re-reads the directory every 300 s, so the
               full run's window is 300 s centred on that pass.
  changes      --changes of each kind (add a user to a group, remove it,
               delete a user, rename a group), one at a time: the time from
               handing the change to a bound ldapmodify until fleet_probe
               sees it through NSS on each host (--trace: where the time
               went, from each host's log). Poll mode is bounded by design
               instead of waited out (see poll_bound()).
  restart      all N stopped and started together on their state (the sync
               cookie with syncrepl): what slapd sent until every host was
               serving and slapd fell quiet, against the cold start.

Every host has its own configuration, run and state directory under --out
(short paths: sockets must fit sun_path). NSS lookups run in fleet_probe,
inside a private mount namespace whose /etc/nsswitch.conf names idcache;
the host's own files are never touched. Results: a table on stdout and in
OUT/fleet_bench.txt, raw figures in OUT/fleet_bench.json. Targets are
printed beside the figures, never enforced.
"""
import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BASE = "dc=example,dc=com"
ADMIN = f"cn=admin,{BASE}"
USERS, GROUPS = 10000, 1000
ENUM_PERIOD_S = 300  # the LDAP provider's enumeration refresh (poll mode)
TTL_S = 300
# The hosts run below slapd's priority: on a real fleet each host has its
# own CPU, and here all of them share this machine's with the directory.
NICE = 10
# poll-incr: passes of what changed (entryCSN) every POLL_S, a full pass
# (which removes what is gone) every POLL_FULL_S, each varied by a quarter.
POLL_S, POLL_FULL_S, POLL_JITTER = 300, 3600, 0.25
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def uid(i):
    """Name of generated user i (idcache-gen-ldif's rule)."""
    return f"u{10000 + i:010d}"


def user_dn(i):
    return f"uid={uid(i)},ou=people,{BASE}"


def group_dn(name):
    return f"cn={name},ou=groups,{BASE}"


# ==== parsing and summary (pure: the selftest runs these on a fixture) ===========

_SRCH = re.compile(r' conn=(\d+) op=\d+ SRCH base="([^"]*)"')
_RESULT = re.compile(r' conn=(\d+) op=\d+ SEARCH RESULT .*?nentries=(\d+)')


def parse_stats(text):
    """Searches and entries in slapd stats log text (-d 256), leaving out
    the connections that searched cn=Monitor (the harness's own). Entries
    count only finished searches; a persistent search's are in cn=Monitor."""
    own = {c for c, base in _SRCH.findall(text) if base.lower().endswith("cn=monitor")}
    searches = sum(1 for c, _ in _SRCH.findall(text) if c not in own)
    entries = sum(int(n) for c, n in _RESULT.findall(text) if c not in own)
    conns = {c for c, _ in _SRCH.findall(text) if c not in own}
    return {"searches": searches, "entries_done": entries, "conns": len(conns)}


def parse_status(text):
    """`idcache status` output into a dict."""
    out = {}
    for line in text.splitlines():
        k, sep, v = line.partition("=")
        if sep:
            out[k.strip()] = v.strip()
    return out


def host_loaded(st, users, groups):
    """Whether one host's status says it holds the whole directory: counts
    as expected, nothing in flight, and the feed live where it reports one."""
    try:
        ok = (int(st.get("domain.dir.users", -1)) == users
              and int(st.get("domain.dir.groups", -1)) == groups
              and int(st.get("domain.dir.ldap_in_flight", 1)) == 0)
    except ValueError:
        return False
    sync = st.get("domain.dir.sync")  # poll: no feed; else live, refreshing or down
    return ok and (sync is None or sync.split()[0] in ("live", "poll"))


def parse_probe(lines):
    """fleet_probe's answers (up to "done") into {host: (status, t)}."""
    out = {}
    for line in lines:
        parts = line.split()
        if parts == ["done"]:
            break
        if len(parts) == 3:
            out[int(parts[0])] = (parts[1], float(parts[2]))
    return out


_TRACE = re.compile(r"sync: (\d+) changes stored: read at ([\d.]+), closed \+([\d.]+) ms, "
                    r"written \+([\d.]+) ms, committed \+([\d.]+) ms, reported \+([\d.]+) ms")
STAGES = ("notice", "closed", "written", "committed", "reported", "seen")
STAGE_TITLE = {"notice": "change sent -> notice read by the host",
               "closed": "notice read -> batch closed",
               "written": "batch closed -> data written",
               "committed": "data written -> txn committed",
               "reported": "committed -> maps' records dropped",
               "seen": "records dropped -> NSS answer changed"}


def parse_trace(text):
    """A host's trace lines (debug_level 6: lp_sync_commit) as a list of
    (read, closed, written, committed, reported) in CLOCK_MONOTONIC
    seconds, batches that stored a change only."""
    out = []
    for m in _TRACE.finditer(text):
        if int(m.group(1)) == 0:
            continue
        t = float(m.group(2))
        out.append((t,) + tuple(t + float(m.group(i)) / 1000 for i in range(3, 7)))
    return out


def trace_breakdown(changes, traces):
    """changes: as run_changes returns them (in order); traces: per host
    parse_trace's list. Per (change, host): the first batch read after
    the change was sent and before the next was, split into STAGES;
    returns {stage: [seconds...]} over every pair found."""
    out = {k: [] for k in STAGES}
    for i, c in enumerate(changes):
        end = changes[i + 1]["t0"] if i + 1 < len(changes) else float("inf")
        for h, (st, seen) in c["seen"].items():
            if st != "ok" or h >= len(traces):
                continue
            b = next((b for b in traces[h] if c["t0"] <= b[0] < end), None)
            if b is None or seen < b[4]:
                continue
            marks = (c["t0"],) + b + (seen,)
            for k, a, z in zip(STAGES, marks, marks[1:]):
                out[k].append(z - a)
    return out


def trace_summary(parts):
    """trace_breakdown's lists as p50 / p99 / max per stage."""
    return {k: {"n": len(v), "p50": pct(v, 50), "p99": pct(v, 99),
                "max": max(v) if v else None} for k, v in parts.items()}


def pct(values, p):
    """Nearest-rank percentile (p in 0..100) of values; None when empty."""
    v = sorted(values)
    if not v:
        return None
    k = max(0, min(len(v) - 1, -(-len(v) * p // 100) - 1))
    return v[int(k)]


def latency_summary(changes):
    """changes: list of {"kind", "t0", "seen": {host: (status, t)}} ->
    per kind: per change the time until every host saw it (its p50, p99,
    max), the same over every (change, host), and timeouts."""
    out = {}
    for c in changes:
        k = out.setdefault(c["kind"], {"every": [], "each": [], "timeouts": 0, "n": 0})
        k["n"] += 1
        lat = [t - c["t0"] for st, t in c["seen"].values() if st == "ok"]
        k["timeouts"] += sum(1 for st, _ in c["seen"].values() if st != "ok")
        k["each"] += lat
        if lat and len(lat) == len(c["seen"]):
            k["every"].append(max(lat))
    for k in out.values():
        every, each = k.pop("every"), k.pop("each")
        k.update({"every_p50": pct(every, 50), "every_p99": pct(every, 99),
                  "every_max": max(every) if every else None,
                  "each_p50": pct(each, 50), "each_p99": pct(each, 99)})
    return out


def load_delta(a, b):
    """What slapd did between two snapshots (see Slapd.snapshot)."""
    st = parse_stats(b["log_tail"])
    secs = b["t"] - a["t"]
    return {"secs": secs, "searches": st["searches"], "conns": st["conns"],
            "entries": b["entries"] - a["entries"], "bytes": b["bytes"] - a["bytes"],
            "cpu_s": b["cpu_s"] - a["cpu_s"]}


def per_host_hour(d, hosts):
    """A steady window's load per host per hour."""
    f = 3600.0 / d["secs"] / hosts
    return {"searches": d["searches"] * f, "entries": d["entries"] * f,
            "bytes": d["bytes"] * f, "cpu_s": d["cpu_s"] * f,
            "cpu_pct": 100.0 * d["cpu_s"] / d["secs"]}


def poll_bound(enum_s, mode="poll"):
    """Change -> visible in poll mode, by design, per kind. enumerate = true
    re-reads every entry every ENUM_PERIOD_S: a membership change made at a
    uniformly random moment shows after the rest of the period plus one
    pass (hosts started together pass together). A pass adds and changes
    but removes nothing: a deleted user or the old name of a renamed group
    stays until its entry expires (entry_cache_timeout = TTL_S after it was
    last stored) and a lookup refreshes it, i.e. within TTL_S of the change
    plus one lookup, and never on a host that does not ask for it."""
    period = {"every_p50": ENUM_PERIOD_S * 0.50 + enum_s, "every_p99": ENUM_PERIOD_S * 0.99 + enum_s,
              "every_max": ENUM_PERIOD_S + enum_s}
    ttl = {"every_p50": TTL_S * 0.50, "every_p99": TTL_S * 0.99, "every_max": float(TTL_S),
           "only_looked_up": True}
    if mode == "poll-incr":
        # passes of what changed every POLL_S +- a quarter, hosts out of step
        hi = POLL_S * (1 + POLL_JITTER)
        period = {"every_p50": POLL_S * 0.5 + enum_s, "every_p99": hi * 0.99 + enum_s,
                  "every_max": hi + enum_s}
    return {"add": period, "remove": period, "delete": ttl, "rename": ttl}


def run_latency(run):
    """A run's latency figures, poll mode's by design computed afresh from
    its cold start (so a saved run reports with the current rule)."""
    lat = dict(run.get("latency", {}))
    if "cold" in run:
        bound = poll_bound(run["cold"]["ready_s"], run["mode"])
        for k, v in lat.items():
            if v.get("by_design"):
                lat[k] = {**bound[k], "by_design": True}
    return lat


def fmt_s(v):
    if v is None:
        return "-"
    return f"{v * 1000:.0f} ms" if v < 1 else f"{v:.1f} s"


def fmt_fine(v):
    """A stage of the trace: sub-millisecond figures kept."""
    if v is None or v >= 0.1:
        return fmt_s(v)
    return f"{v * 1000:.2f} ms"


def fmt_n(v):
    if v is None:
        return "-"
    for unit, div in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(v) >= div:
            return f"{v / div:.2f}{unit}"
    return f"{v:.1f}" if v != int(v) else f"{int(v)}"


MODE_ORDER = {"poll": 0, "poll-incr": 1, "syncrepl": 2}
KINDS = ("add", "remove", "delete", "rename")
KIND_TITLE = {"add": "add user to group", "remove": "remove from group",
              "delete": "delete user", "rename": "rename group"}


def summarize(res):
    """The results table (text) from the JSON-able results document."""
    out = list(res.get("header", []))
    for run in res["runs"]:
        mode, n = run["mode"], run["hosts"]
        out.append("")
        out.append(f"== {mode}, N = {n} hosts ==")
        if run.get("not_measured"):
            out.append(f"  not measured: {run['not_measured']}")
            continue
        if run.get("failed"):
            out.append(f"  FAILED: {run['failed'].splitlines()[0][:300]}")
            continue
        c = run["cold"]
        out.append(f"  cold start, all {n} at once: every host holding everything, nothing in flight, "
                   f"after {fmt_s(c['ready_s'])} (slowest host); slapd peak CPU {c['peak_cpu_pct']:.0f}%, "
                   f"peak RSS {c['peak_rss_kib'] / 1024:.0f} MiB")
        out.append(f"    slapd sent: {c['load']['searches']} searches, {fmt_n(c['load']['entries'])} "
                   f"entries, {fmt_n(c['load']['bytes'])}B ({fmt_n(c['load']['bytes'] / n)}B per host) "
                   f"in {c['load']['cpu_s']:.1f} CPU-s; the hosts used {c.get('hosts_cpu_s', 0):.0f} CPU-s"
                   + (f"; {c['offline_hosts']} hosts went offline" if c.get("offline_hosts") else ""))
        s = run["steady"]
        ph = per_host_hour(s, n)
        out.append(f"  steady state ({s['secs']:.0f} s window, nothing changing), per host per hour: "
                   f"{ph['searches']:.1f} searches, {fmt_n(ph['entries'])} entries, "
                   f"{fmt_n(ph['bytes'])}B; slapd CPU {ph['cpu_pct']:.1f}% of one core")
        if run.get("steady_by_design"):
            b = run["steady_by_design"]
            out.append(f"    by design ({b.get('why', 'see poll_bound')}): "
                       f"{b['searches']:.1f} searches, {fmt_n(b['entries'])} entries, "
                       f"{fmt_n(b['bytes'])}B per host per hour")
        out.append("  change -> visible through NSS on every host (p50 / p99 / max over changes;"
                   " per host p50 / p99):")
        lat = run_latency(run)
        for k in KINDS:
            v = lat.get(k)
            if v is None:
                continue
            if v.get("by_design"):
                w = run.get("poll_waited", {}).get(k)
                seen = (f"; waited out once: every host after {fmt_s(w['every_max'])}"
                        + (f", TIMEOUTS {w['timeouts']}" if w["timeouts"] else "")) if w else ""
                how = " + one refresh (on a lookup)" if v.get("only_looked_up") else ""
                out.append(f"    {KIND_TITLE[k]:<20} by design: {fmt_s(v['every_p50'])} / "
                           f"{fmt_s(v['every_p99'])} / <= {fmt_s(v['every_max'])}{how}{seen}")
                continue
            to = f"  TIMEOUTS {v['timeouts']}" if v["timeouts"] else ""
            to += f"  (looked every {run['probe_interval_ms']} ms)" if "probe_interval_ms" in run else ""
            out.append(f"    {KIND_TITLE[k]:<20} {fmt_s(v['every_p50'])} / {fmt_s(v['every_p99'])} / "
                       f"{fmt_s(v['every_max'])}   per host {fmt_s(v['each_p50'])} / "
                       f"{fmt_s(v['each_p99'])}   ({v['n']} changes){to}")
        if "host_cpu_ms_per_change" in run:
            out.append(f"  each host's CPU per change: {run['host_cpu_ms_per_change']:.2f} ms "
                       "(schedstat over the changes, lookups included)")
        tr = run.get("trace")
        if tr:
            out.append("  where the time went, per (change, host), p50 / p99 / max (sync trace):")
            for k in STAGES:
                v = tr.get(k)
                if v and v["n"]:
                    out.append(f"    {STAGE_TITLE[k]:<40} {fmt_fine(v['p50'])} / "
                               f"{fmt_fine(v['p99'])} / {fmt_fine(v['max'])}   ({v['n']})")
        r = run.get("restart")
        if r:
            cb = max(c["load"]["bytes"], 1)
            out.append(f"  restart of all {n} on their state: every host loaded, nothing in flight, after "
                       f"{fmt_s(r['ready_s'])}; "
                       f"slapd sent {r['load']['searches']} searches, {fmt_n(r['load']['entries'])} "
                       f"entries, {fmt_n(r['load']['bytes'])}B = "
                       f"{100.0 * r['load']['bytes'] / cb:.2f}% of the cold start's bytes")
    out += extrapolate(res)
    out += targets(res)
    return "\n".join(out) + "\n"


FLEET, SERVERS = 10000, 2


def extrapolate(res):
    """On paper: FLEET hosts against SERVERS replicas sharing them evenly,
    from each mode's largest measured N (load is per host: it scales)."""
    out = ["", f"extrapolated to {FLEET:,} hosts on a replicated pair (each server takes half; "
                "from the largest N measured per mode):"]
    for mode in ("poll", "poll-incr", "syncrepl"):
        runs = [r for r in res["runs"] if r["mode"] == mode and "cold" in r]
        if not runs:
            out.append(f"  {mode}: not measured")
            continue
        r = max(runs, key=lambda x: x["hosts"])
        n, half = r["hosts"], FLEET / SERVERS
        ph = r.get("steady_by_design") or per_host_hour(r["steady"], n)
        cold = r["cold"]["load"]
        cpu_per_host_cold = cold["cpu_s"] / n
        out.append(f"  {mode} (from N={n}): per server, steady: {ph['searches'] * half / 3600:.2f} "
                   f"searches/s, {fmt_n(ph['entries'] * half / 3600)} entries/s, "
                   f"{fmt_n(ph['bytes'] * half / 3600)}B/s, "
                   f"{ph['cpu_s'] * half / 3600:.2f} cores of this machine's"
                   + (f"; {half:,.0f} persistent searches open" if mode == "syncrepl" else ""))
        out.append(f"    all {FLEET:,} starting at once: {fmt_n(cold['bytes'] / n * half)}B and "
                   f"{cpu_per_host_cold * half:,.0f} CPU-seconds per server "
                   f"({cpu_per_host_cold * half / 60:,.1f} min of one core)")
        rs = r.get("restart")
        if rs:
            out.append(f"    all {FLEET:,} restarting on their state: "
                       f"{fmt_n(rs['load']['bytes'] / n * half)}B and "
                       f"{rs['load']['cpu_s'] / n * half:,.0f} CPU-seconds per server")
    return out


def targets(res):
    """The issue's targets against the figures (printed, never enforced)."""
    out = ["", "targets (syncrepl):"]
    for run in res["runs"]:
        if run["mode"] != "syncrepl" or run.get("not_measured"):
            continue
        n = run["hosts"]
        p99 = max((v["every_p99"] for v in run["latency"].values()
                   if v.get("every_p99") is not None), default=None)
        ph = per_host_hour(run["steady"], n)
        r = run.get("restart")
        share = 100.0 * r["load"]["bytes"] / max(run["cold"]["load"]["bytes"], 1) if r else None
        out.append(f"  N={n}: p99 change -> visible {fmt_s(p99)} (<= 1 s: "
                   f"{'met' if p99 is not None and p99 <= 1 else 'NOT met'}); "
                   f"{ph['searches']:.2f} searches/host/h (<= 1: "
                   f"{'met' if ph['searches'] <= 1 else 'NOT met'}); cookie restart "
                   + (f"{share:.2f}% of cold bytes (<= 1%: {'met' if share <= 1 else 'NOT met'})"
                      if share is not None else "not run"))
    if len(out) == 2:
        out.append("  none measured")
    return out


def markdown(res):
    """The results as a Markdown table: one column per measured run."""
    runs = sorted((r for r in res["runs"] if "cold" in r),
                  key=lambda r: (MODE_ORDER.get(r["mode"], 9), r["hosts"]))
    cols = [f"{r['mode']} N={r['hosts']}" for r in runs]

    def lat(r, k):
        v = run_latency(r).get(k)
        if v is None:
            return "-"
        if v.get("by_design"):
            w = r.get("poll_waited", {}).get(k)
            how = " + a refresh, on a lookup" if v.get("only_looked_up") else ""
            return (f"by design {fmt_s(v['every_p50'])} / {fmt_s(v['every_p99'])} / "
                    f"≤ {fmt_s(v['every_max'])}{how}" + (f"; waited out: {fmt_s(w['every_max'])}"
                                                          if w else ""))
        to = f", {v['timeouts']} timeouts" if v["timeouts"] else ""
        return f"{fmt_s(v['every_p50'])} / {fmt_s(v['every_p99'])} / {fmt_s(v['every_max'])}{to}"

    def cold(r):
        c, n = r["cold"], r["hosts"]
        return (f"{c['load']['searches'] / n:.0f} searches, {fmt_n(c['load']['entries'] / n)} "
                f"entries, {fmt_n(c['load']['bytes'] / n)}B")

    def steady(r):
        ph = per_host_hour(r["steady"], r["hosts"])
        text = f"{ph['searches']:.1f} searches, {fmt_n(ph['entries'])} entries, {fmt_n(ph['bytes'])}B"
        b = r.get("steady_by_design")
        if b:
            text += (f" (by design, {b.get('why', '')}: {b['searches']:.1f} searches, "
                     f"{fmt_n(b['entries'])} entries, {fmt_n(b['bytes'])}B)")
        return text

    def restart(r):
        x = r.get("restart")
        if not x:
            return "-"
        share = 100.0 * x["load"]["bytes"] / max(r["cold"]["load"]["bytes"], 1)
        return (f"{x['load']['searches'] / r['hosts']:.0f} searches, "
                f"{fmt_n(x['load']['bytes'] / r['hosts'])}B per host = {share:.2f}% of cold")

    rows = [
        ("cold start: every host holding everything", lambda r: fmt_s(r["cold"]["ready_s"])),
        ("cold start: slapd sent per host", cold),
        ("cold start: slapd CPU-s, peak CPU, peak RSS",
         lambda r: f"{r['cold']['load']['cpu_s']:.1f} s, {r['cold']['peak_cpu_pct']:.0f}%, "
                   f"{r['cold']['peak_rss_kib'] / 1024:.0f} MiB"),
        ("steady, per host per hour", steady),
        ("steady: slapd CPU (one core)",
         lambda r: f"{per_host_hour(r['steady'], r['hosts'])['cpu_pct']:.2f}%"),
    ] + [(f"{KIND_TITLE[k]} → visible on every host, p50 / p99 / max",
          (lambda k: lambda r: lat(r, k))(k)) for k in KINDS] + [
        ("restart of all on their state (cookies)", restart)]
    out = ["| | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
    for title, f in rows:
        out.append(f"| {title} | " + " | ".join(f(r) for r in runs) + " |")
    for r in res["runs"]:
        if "cold" not in r:
            why = r.get("not_measured") or "failed: " + r.get("failed", "?").splitlines()[0]
            out.append(f"\n{r['mode']} N={r['hosts']}: not measured: {why}" if r.get("not_measured")
                       else f"\n{r['mode']} N={r['hosts']}: {why}")
    return "\n".join(out) + "\n"


def selftest(fixture):
    """The parser and summary on fixture files: fixture/slapd.log (a stats
    log excerpt) and fixture/results.json (a results document)."""
    fixture = Path(fixture)
    st = parse_stats((fixture / "slapd.log").read_text())
    assert st == {"searches": 3, "entries_done": 1002, "conns": 2}, st
    status = parse_status("domain.dir.users=10000\ndomain.dir.groups=1000\n"
                          "domain.dir.ldap_in_flight=0\n")
    assert host_loaded(status, 10000, 1000)
    assert not host_loaded(status, 9980, 1000)
    assert not host_loaded({**status, "domain.dir.sync": "refreshing"}, 10000, 1000)
    assert host_loaded({**status, "domain.dir.sync": "live"}, 10000, 1000)
    assert host_loaded({**status, "domain.dir.sync": "poll"}, 10000, 1000)
    assert parse_probe(["0 ok 5.5", "1 timeout 7.25", "done", "2 ok 1"]) == {
        0: ("ok", 5.5), 1: ("timeout", 7.25)}
    assert pct([3, 1, 2], 50) == 2 and pct(list(range(1, 101)), 99) == 99 and pct([], 50) is None
    tr = parse_trace("x ldap domain dir: sync: 0 changes stored: read at 9.000000, closed +0.000 ms, "
                     "written +1.000 ms, committed +2.000 ms, reported +3.000 ms\n"
                     "x ldap domain dir: sync: 1 changes stored: read at 10.000000, closed +1.000 ms, "
                     "written +2.000 ms, committed +6.000 ms, reported +7.000 ms\n")
    assert len(tr) == 1 and tr[0][0] == 10.0 and abs(tr[0][3] - 10.006) < 1e-9, tr
    parts = trace_breakdown([{"t0": 9.99, "seen": {0: ("ok", 10.017), 1: ("timeout", 40.0)}}], [tr, tr])
    assert [round(parts[k][0] * 1000) for k in STAGES] == [10, 1, 1, 4, 1, 10], parts
    res = json.loads((fixture / "results.json").read_text())
    for run in res["runs"]:
        if "changes" in run:
            run["latency"] = latency_summary(run.pop("changes"))
    lat = res["runs"][1]["latency"]
    assert lat["add"]["every_p50"] == 0.5 and lat["add"]["every_max"] == 0.75, lat
    assert lat["delete"]["timeouts"] == 1 and lat["delete"]["n"] == 1, lat
    md = markdown(res)
    assert "| | poll N=10 | syncrepl N=10 |" in md and "syncrepl N=100: not measured" in md, md
    text = summarize(res)
    for want in ("== poll, N = 10 hosts ==", "by design", "== syncrepl, N = 10 hosts ==",
                 "500 ms / 750 ms / 750 ms", "TIMEOUTS 1", "not measured: no ldap_sync",
                 "0.10% of the cold start's bytes", "N=10: p99 change -> visible",
                 "extrapolated to 10,000 hosts", "5,000 persistent searches open"):
        assert want in text, f"{want!r} missing from:\n{text}"
    print(text, end="")
    print("fleet_bench selftest: ok")


# ==== slapd ======================================================================

class Slapd:
    """One slapd in dir: back-mdb with syncprov, cn=Monitor, stats log."""

    def __init__(self, d, port, ldif):
        self.d, self.port, self.ldif = Path(d), port, ldif
        self.uri = f"ldap://127.0.0.1:{port}"
        self.proc = None
        self.mod = None  # the bound ldapmodify (modify)
        self.log = self.d / "slapd.log"
        self.monitor_cost = {"bytes": 0, "entries": 0}

    def conf(self):
        schemas = "".join(f"include /etc/ldap/schema/{s}.schema\n"
                          for s in ("core", "cosine", "nis", "inetorgperson"))
        return (f"{schemas}modulepath /usr/lib/ldap\nmoduleload back_mdb\nmoduleload syncprov\n"
                f"moduleload back_monitor\nsizelimit unlimited\npidfile {self.d}/slapd.pid\n"
                f"database mdb\nmaxsize 1073741824\nsuffix \"{BASE}\"\nrootdn \"{ADMIN}\"\n"
                f"rootpw secret\ndirectory {self.d}/db\nindex objectClass eq\n"
                "index uid,cn eq\nindex uidNumber,gidNumber,memberUid,member eq\n"
                "index entryCSN,entryUUID eq\n"
                # the session log lets a cookie resume send only what changed
                "overlay syncprov\nsyncprov-checkpoint 100 10\nsyncprov-sessionlog 10000\n"
                "database monitor\n"
                f"access to dn.subtree=\"cn=Monitor\" by dn.exact=\"{ADMIN}\" read by * none\n")

    def start(self):
        """A fresh database loaded with slapadd, then slapd."""
        self.stop()
        shutil.rmtree(self.d, ignore_errors=True)
        (self.d / "db").mkdir(parents=True)
        (self.d / "slapd.conf").write_text(self.conf())
        subprocess.run(["/usr/sbin/slapadd", "-q", "-f", str(self.d / "slapd.conf"),
                        "-l", str(self.ldif)], check=True, capture_output=True)
        logf = open(self.log, "wb")
        self.proc = subprocess.Popen(["/usr/sbin/slapd", "-f", str(self.d / "slapd.conf"),
                                      "-h", self.uri + "/", "-d", "256"],
                                     stdin=subprocess.DEVNULL, stdout=logf, stderr=logf)
        logf.close()
        for _ in range(200):
            if subprocess.run(["ldapsearch", "-x", "-H", self.uri, "-b", "", "-s", "base"],
                              capture_output=True).returncode == 0:
                break
            time.sleep(0.05)
        else:
            raise RuntimeError(f"slapd did not come up: {self.log.read_text()[-2000:]}")
        a = self.monitor()
        b = self.monitor()
        self.monitor_cost = {k: b[k] - a[k] for k in ("bytes", "entries")}

    def stop(self):
        if self.mod is not None:
            self.mod.kill()
            self.mod.wait()
            self.mod = None
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None

    def monitor(self):
        """cn=Monitor's bytes and entries sent, since slapd started."""
        p = subprocess.run(["ldapsearch", "-x", "-H", self.uri, "-D", ADMIN, "-w", "secret",
                            "-b", "cn=Statistics,cn=Monitor", "-LLL", "(objectClass=*)",
                            "monitorCounter"], capture_output=True, text=True, check=True)
        vals = {}
        for block in p.stdout.split("\n\n"):
            m = re.search(r"dn: cn=(\w+),cn=Statistics.*?monitorCounter: (\d+)", block, re.S)
            if m:
                vals[m.group(1).lower()] = int(m.group(2))
        return {"bytes": vals["bytes"], "entries": vals["entries"]}

    def cpu_s(self):
        f = open(f"/proc/{self.proc.pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(f[11]) + int(f[12])) / CLK_TCK

    def rss_kib(self, field="VmRSS"):
        for line in open(f"/proc/{self.proc.pid}/status"):
            if line.startswith(field + ":"):
                return int(line.split()[1])
        return 0

    def reset_peak_rss(self):
        with open(f"/proc/{self.proc.pid}/clear_refs", "w") as f:
            f.write("5")

    def snapshot(self, since=None):
        """Counters now; with since (an earlier snapshot), the stats log
        written after it as log_tail. The harness's own monitor reads are
        taken out of the bytes and entries."""
        m = self.monitor()
        size = self.log.stat().st_size
        snap = {"t": time.monotonic(), "cpu_s": self.cpu_s(), "log_off": size,
                "reads": (since["reads"] + 1) if since else 1}
        own = snap["reads"]
        snap["bytes"] = m["bytes"] - own * self.monitor_cost["bytes"]
        snap["entries"] = m["entries"] - own * self.monitor_cost["entries"]
        if since is not None:
            with open(self.log, "rb") as f:
                f.seek(since["log_off"])
                snap["log_tail"] = f.read(size - since["log_off"]).decode("utf-8", "replace")
        return snap

    def modify(self, ldif, modrdn=False):
        """Apply one change as the rootdn; returns when slapd answered.
        One ldapmodify stays bound and takes the changes on its stdin, so
        that starting a client is not counted as the change's latency.
        modrdn: ldif is "DN\nNEWRDN\n" (ldapmodrdn's input, the old RDN
        deleted)."""
        if modrdn:
            dn, rdn = ldif.split("\n")[:2]
            ldif = f"dn: {dn}\nchangetype: modrdn\nnewrdn: {rdn}\ndeleteoldrdn: 1\n"
        if self.mod is None or self.mod.poll() is not None:
            # line-buffered output: its blank line after each record
            # comes when slapd answered
            self.mod = subprocess.Popen(
                ["stdbuf", "-oL", "ldapmodify", "-x", "-H", self.uri, "-D", ADMIN, "-w", "secret"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.mod.stdin.write(ldif.rstrip("\n") + "\n\n")
        self.mod.stdin.flush()
        said = []
        for line in self.mod.stdout:
            if not line.strip():
                return
            said.append(line.strip())
            if not line.startswith(("modifying ", "deleting ", "adding ", "replacing ")):
                break
        self.mod.kill()
        self.mod.wait()
        self.mod = None
        raise RuntimeError(f"ldapmodify failed: {' / '.join(said)[:500]}")


class Sampler(threading.Thread):
    """slapd's CPU (percent of one core, per 0.25 s) and RSS, sampled."""

    def __init__(self, slapd):
        super().__init__(daemon=True)
        self.slapd, self.stop_ev = slapd, threading.Event()
        self.peak_cpu, self.peak_rss = 0.0, 0

    def run(self):
        last_t, last_c = time.monotonic(), self.slapd.cpu_s()
        while not self.stop_ev.wait(0.25):
            t, c = time.monotonic(), self.slapd.cpu_s()
            self.peak_cpu = max(self.peak_cpu, 100.0 * (c - last_c) / (t - last_t))
            self.peak_rss = max(self.peak_rss, self.slapd.rss_kib())
            last_t, last_c = t, c

    def finish(self):
        self.stop_ev.set()
        self.join()
        return self.peak_cpu, max(self.peak_rss, self.slapd.rss_kib("VmHWM"))


# ==== the fleet ==================================================================

class Fleet:
    """N idcached, each with its own configuration, run and state dir."""

    def __init__(self, build, root, n, mode, slapd, has_sync, trace=False):
        self.build, self.root, self.n, self.mode = Path(build), Path(root), n, mode
        self.procs = [None] * n
        self.dirs = [self.root / f"h{i:03d}" for i in range(n)]
        domain = (f"id_provider = ldap\nldap_uri = {slapd.uri}\nldap_search_base = {BASE}\n"
                  "ldap_schema = rfc2307bis\n"
                  # N hosts share this machine's cores: a starved daemon must
                  # not take its own late reading for a silent server
                  "ldap_network_timeout = 30\nldap_search_timeout = 60\n")
        if mode == "poll":
            domain += f"enumerate = true\nentry_cache_timeout = {TTL_S}\n"
            if has_sync:
                domain += "ldap_sync = poll\n"
        elif mode == "poll-incr":
            domain += (f"ldap_sync = poll\nldap_poll_interval = {POLL_S}\n"
                       f"ldap_poll_full_interval = {POLL_FULL_S}\nentry_cache_timeout = {TTL_S}\n")
        else:
            domain += "ldap_sync = syncrepl\n"
        if trace:
            domain += "debug_level = 6\n"  # the sync feed's trace lines
        shutil.rmtree(self.root, ignore_errors=True)
        for d in self.dirs:
            for sub in ("run", "state"):
                (d / sub).mkdir(parents=True)
            os.chmod(d / "run", 0o755)
            (d / "idcache.conf").write_text(
                f"[idcache]\nrun_dir = {d}/run\nstate_dir = {d}/state\nuser = root\n"
                f"domains = dir\n\n[domain/dir]\n{domain}")

    def start_all(self):
        for i, d in enumerate(self.dirs):
            logf = open(d / "idcached.log", "ab")
            self.procs[i] = subprocess.Popen(
                [str(self.build / "src/daemon/idcached"), "-c", str(d / "idcache.conf"), "-i"],
                stdin=subprocess.DEVNULL, stdout=logf, stderr=logf, cwd=d,
                preexec_fn=lambda: os.nice(NICE))
            logf.close()

    def run_ns(self):
        """CPU time the running hosts have used, in ns (schedstat: exact,
        where stat counts clock ticks)."""
        total = 0
        for p in self.procs:
            try:
                total += int(open(f"/proc/{p.pid}/schedstat").read().split()[0])
            except (AttributeError, OSError, ValueError, IndexError):
                pass
        return total

    def traces(self):
        """Each host's trace lines (parse_trace)."""
        return [parse_trace((d / "idcached.log").read_text(errors="replace")) for d in self.dirs]

    def cpu_s(self):
        """CPU time the running hosts have used."""
        total = 0.0
        for p in self.procs:
            try:
                f = open(f"/proc/{p.pid}/stat").read().rsplit(")", 1)[1].split()
                total += (int(f[11]) + int(f[12])) / CLK_TCK
            except (AttributeError, OSError):
                pass
        return total

    def went_offline(self):
        """Hosts whose log says the domain went offline."""
        return sum(1 for d in self.dirs
                   if "offline" in (d / "idcached.log").read_text(errors="replace"))

    def stop_all(self):
        for p in self.procs:
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for i, p in enumerate(self.procs):
            if p is None:
                continue
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            self.procs[i] = None

    def status(self, i):
        if self.procs[i] is not None and self.procs[i].poll() is not None:
            raise RuntimeError(f"host {i} died: "
                               f"{(self.dirs[i] / 'idcached.log').read_text()[-2000:]}")
        p = subprocess.run([str(self.build / "src/cli/idcache"), "status", "--run-dir",
                            str(self.dirs[i] / "run")], capture_output=True, text=True)
        return parse_status(p.stdout) if p.returncode == 0 else {}

    def wait_loaded(self, t0, users, groups, timeout):
        """Seconds from t0 until every host's status said it holds the
        directory (each host's own time; the slowest is returned)."""
        pending, ready = set(range(self.n)), {}
        deadline = time.monotonic() + timeout
        with ThreadPoolExecutor(max_workers=8) as pool:
            while pending and time.monotonic() < deadline:
                for i, st in zip(list(pending), pool.map(self.status, list(pending))):
                    if host_loaded(st, users, groups):
                        ready[i] = time.monotonic() - t0
                        pending.discard(i)
                if pending:
                    time.sleep(0.2)
        if pending:
            raise RuntimeError(f"{len(pending)} hosts not loaded after {timeout} s, e.g. host "
                               f"{min(pending)}: {self.status(min(pending))}")
        return max(ready.values())


def probe_interval_ms(n):
    """How often each probe child looks: 5 ms, longer past 50 hosts so
    that all of them together look about 10,000 times a second."""
    return max(5, n // 10)


class Probe:
    """fleet_probe over every host, in a private mount namespace."""

    def __init__(self, build, work, fleet, sentinel):
        nss = Path(work) / "nsswitch.conf"
        nss.write_text("passwd: idcache\ngroup: idcache\nshadow: files\nhosts: files\n")
        wrapper = 'mount --bind "$0" /etc/nsswitch.conf && exec "$@"'
        # N children look every poll_ms: 300 of them at 5 ms would take the
        # cores from the hosts they time; like the hosts, below slapd
        self.poll_ms = probe_interval_ms(fleet.n)
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C.UTF-8",
               "LD_LIBRARY_PATH": str(Path(build) / "src/nss")}
        self.p = subprocess.Popen(
            ["unshare", "-m", "--propagation", "private", "--", "sh", "-c", wrapper, str(nss),
             str(Path(build) / "bench/fleet/fleet_probe"), "-i", str(self.poll_ms), "-s", sentinel]
            + [str(d / "run") for d in fleet.dirs],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
            preexec_fn=lambda: os.nice(NICE))
        line = self.p.stdout.readline()
        if not line.startswith("ready"):
            raise RuntimeError(f"fleet_probe did not start: {line!r}")

    def send(self, cmd):
        self.p.stdin.write(cmd + "\n")
        self.p.stdin.flush()

    def answers(self):
        lines = []
        for line in self.p.stdout:
            lines.append(line)
            if line.strip() == "done":
                return parse_probe(lines)
        raise RuntimeError("fleet_probe went away")

    def ask(self, cmd):
        self.send(cmd)
        return self.answers()

    def close(self):
        self.p.stdin.close()
        self.p.wait(timeout=30)


# ==== phases =====================================================================

def ldif_groups(path):
    """{group name: set of member uids} from the LDIF."""
    groups, cur = {}, None
    for line in open(path):
        if line.startswith("dn: cn="):
            cur = line[7:].split(",", 1)[0]
            groups[cur] = set()
        elif line.startswith("dn:"):
            cur = None
        elif cur is not None and line.startswith("memberUid: "):
            groups[cur].add(line[11:].strip())
    return groups


def plan_changes(groups, count):
    """count changes of each kind, as (kind, ldif or modrdn text, modrdn?,
    probe command before, probe command after). Users 9000.. are deleted,
    groups 900.. renamed; the sentinel (the last user) is never touched."""
    plan = []
    adds = []
    for k in range(count):
        g = f"group{100 + k}"
        u = next(uid(i) for i in range(5000 + 37 * k, USERS) if uid(i) not in groups[g])
        ui = int(u[1:]) - 10000
        adds.append((g, u, ui))
        plan.append(("add", f"dn: {group_dn(g)}\nchangetype: modify\nadd: member\n"
                     f"member: {user_dn(ui)}\n-\nadd: memberUid\nmemberUid: {u}\n", False,
                     f"notmember {g} {u}", f"member {g} {u}"))
    for g, u, ui in adds:
        plan.append(("remove", f"dn: {group_dn(g)}\nchangetype: modify\ndelete: member\n"
                     f"member: {user_dn(ui)}\n-\ndelete: memberUid\nmemberUid: {u}\n", False,
                     f"member {g} {u}", f"notmember {g} {u}"))
    for k in range(count):
        i = 9000 + k
        plan.append(("delete", f"dn: {user_dn(i)}\nchangetype: delete\n", False,
                     f"user {uid(i)}", f"nouser {uid(i)}"))
    for k in range(count):
        old, new = f"group{900 + k}", f"renamed{900 + k}"
        plan.append(("rename", f"{group_dn(old)}\ncn={new}\n", True,
                     f"group {old}", f"renamed {old} {new}"))
    return plan


def run_changes(slapd, probe, plan, timeout):
    """Each change in turn: check the state before on every host, start
    every host looking for the state after, apply the change (t0 is taken
    just before the change is written to the bound ldapmodify: slapd's
    own time counts in the latency, starting a client does not)."""
    changes = []
    for kind, text, modrdn, before, after in plan:
        pre = probe.ask(f"{before} 10")
        if any(st != "ok" for st, _ in pre.values()):
            raise RuntimeError(f"before {kind}: not every host shows '{before}': {pre}")
        probe.send(f"{after} {timeout}")
        time.sleep(0.01)  # every child looking
        t0 = time.monotonic()
        slapd.modify(text, modrdn)
        changes.append({"kind": kind, "t0": t0, "seen": probe.answers()})
    return changes


def plan_batch(groups, plan):
    """One change of each kind that can be made together: the plan's first
    add, delete and rename, and the removal of a member group60 had from
    the start (not one the add puts in)."""
    first = {}
    for c in plan:
        first.setdefault(c[0], c)
    g = "group60"
    u = min(groups[g])
    ui = int(u[1:]) - 10000
    rm = ("remove", f"dn: {group_dn(g)}\nchangetype: modify\ndelete: member\n"
          f"member: {user_dn(ui)}\n-\ndelete: memberUid\nmemberUid: {u}\n", False,
          f"member {g} {u}", f"notmember {g} {u}")
    return [first["add"], rm, first["delete"], first["rename"]]


def run_batch(slapd, probe, plan, timeout):
    """Apply every change of plan at once, then wait for each to show on
    every host (poll mode: until the next pass)."""
    t0s = []
    for kind, text, modrdn, before, after in plan:
        pre = probe.ask(f"{before} 10")
        if any(st != "ok" for st, _ in pre.values()):
            raise RuntimeError(f"before {kind}: not every host shows '{before}': {pre}")
    for kind, text, modrdn, before, after in plan:
        t0s.append(time.monotonic())
        slapd.modify(text, modrdn)
    return [{"kind": kind, "t0": t0, "seen": probe.ask(f"{after} {timeout}")}
            for (kind, _, _, _, after), t0 in zip(plan, t0s)]


def wait_quiet(slapd, fleet, quiet_s=2.0, timeout=120):
    """Until slapd sent nothing for quiet_s and no host has a request in
    flight (a restart's or a pass's tail)."""
    deadline = time.monotonic() + timeout
    last = slapd.monitor()["bytes"]
    still = time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.5)
        b = slapd.monitor()["bytes"]
        if b - last > 4 * slapd.monitor_cost["bytes"]:
            last, still = b, time.monotonic()
        elif time.monotonic() - still >= quiet_s:
            busy = [i for i in range(fleet.n)
                    if int(fleet.status(i).get("domain.dir.ldap_in_flight", 0))]
            if not busy:
                return
            still = time.monotonic()
        last = b


def start_measured(slapd, fleet, users, groups, timeout):
    """Start every host at once; the time until all serve everything, what
    slapd sent until it fell quiet, its peak CPU and RSS."""
    slapd.reset_peak_rss()
    a = slapd.snapshot()
    sampler = Sampler(slapd)
    sampler.start()
    t0 = time.monotonic()
    try:
        fleet.start_all()
        ready = fleet.wait_loaded(t0, users, groups, timeout)
        wait_quiet(slapd, fleet)
    finally:
        peak_cpu, peak_rss = sampler.finish()
    b = slapd.snapshot(a)
    return {"ready_s": ready, "peak_cpu_pct": peak_cpu, "peak_rss_kib": peak_rss,
            "load": load_delta(a, b), "t_start": t0, "hosts_cpu_s": fleet.cpu_s(),
            "offline_hosts": fleet.went_offline()}


def run_one(args, mode, n, slapd, groups, has_sync):
    run = {"mode": mode, "hosts": n}
    if mode in ("syncrepl", "poll-incr") and not has_sync:
        run["not_measured"] = ("no ldap_sync option in this idcached "
                               "(syncrepl has not landed in this build)")
        return run
    slapd.start()
    fleet = Fleet(args.build, args.out / "hosts", n, mode, slapd, has_sync, args.trace)
    probe = None
    deleted = 0
    timeout = 120 + n * 2
    try:
        run["cold"] = start_measured(slapd, fleet, USERS, GROUPS, timeout)
        log(f"{mode} N={n}: cold start {run['cold']['ready_s']:.1f} s")
        probe = Probe(args.build, args.out, fleet, uid(USERS - 1))
        run["probe_interval_ms"] = probe.poll_ms
        for cmd in (f"user {uid(USERS - 1)} 30", f"group group{GROUPS - 1} 30"):
            bad = [i for i, (st, _) in probe.ask(cmd).items() if st != "ok"]
            if bad:
                raise RuntimeError(f"'{cmd}' failed through NSS on hosts {bad[:10]}")
        run["steady"] = steady(args, slapd, fleet, run)
        log(f"{mode} N={n}: steady window done")
        plan = plan_changes(groups, args.changes)
        if mode.startswith("poll"):
            bound = poll_bound(run["cold"]["ready_s"], mode)
            run["latency"] = {k: {**bound[k], "by_design": True} for k in KINDS}
            if args.poll_wait:
                deleted = 1
                try:
                    changes = run_batch(slapd, probe, plan_batch(groups, plan),
                                        ENUM_PERIOD_S * 2)
                    run["changes_raw"] = changes
                    run["poll_waited"] = latency_summary(changes)
                    log(f"{mode} N={n}: one change of each kind waited out")
                except RuntimeError as e:
                    log(f"{mode} N={n}: waiting changes out failed: {e}")
        else:
            ns0 = fleet.run_ns()
            changes = run_changes(slapd, probe, plan, 30)
            run["host_cpu_ms_per_change"] = (fleet.run_ns() - ns0) / 1e6 / n / len(changes)
            run["changes_raw"] = changes
            run["latency"] = latency_summary(changes)
            if args.trace:
                run["trace"] = trace_summary(trace_breakdown(changes, fleet.traces()))
            log(f"{mode} N={n}: {len(changes)} changes measured")
        probe.close()
        probe = None
        fleet.stop_all()
        users_now = USERS - (args.changes if not mode.startswith("poll") else deleted)
        run["restart"] = start_measured(slapd, fleet, users_now, GROUPS, timeout)
        log(f"{mode} N={n}: restart {run['restart']['ready_s']:.1f} s")
    finally:
        if probe is not None:
            probe.p.kill()
        fleet.stop_all()
        slapd.stop()
    return run


def steady(args, slapd, fleet, run):
    """A window with nothing changing. Poll mode passes every ENUM_PERIOD_S
    from each host's start; a window of that length centred on the next
    pass holds one pass per host."""
    secs = args.steady
    if secs >= ENUM_PERIOD_S:
        begin = run["cold"]["t_start"] + ENUM_PERIOD_S / 2
        time.sleep(max(0.0, begin - time.monotonic()))
    a = slapd.snapshot()
    time.sleep(secs)
    d = load_delta(a, slapd.snapshot(a))
    if fleet.mode == "poll" and secs < ENUM_PERIOD_S:
        c = run["cold"]["load"]
        f = 3600.0 / ENUM_PERIOD_S / fleet.n
        run["steady_by_design"] = {"searches": c["searches"] * f, "entries": c["entries"] * f,
                                   "bytes": c["bytes"] * f, "cpu_s": c["cpu_s"] * f,
                                   "why": f"the window is shorter than the {ENUM_PERIOD_S} s pass"}
    if fleet.mode == "poll-incr":
        # the hourly full pass is outside any short window: one cold
        # start's load per host per POLL_FULL_S, added to what was measured
        # outside a window shorter than POLL_S too: the passes of what
        # changed, two searches each (users, groups) answering nothing
        c, ph = run["cold"]["load"], per_host_hour(d, fleet.n)
        f = 3600.0 / POLL_FULL_S / fleet.n
        run["steady_by_design"] = {k: ph[k] + c[k] * f for k in ("searches", "entries", "bytes",
                                                                 "cpu_s")}
        why = f"the window plus one full pass per {POLL_FULL_S} s at the cold start's cost"
        if secs < POLL_S:
            run["steady_by_design"]["searches"] += 2 * 3600.0 / POLL_S
            why += f" and two searches per {POLL_S} s pass"
        run["steady_by_design"]["why"] = why
    return d


def log(msg):
    print(f"fleet_bench: {msg}", file=sys.stderr, flush=True)


def make_ldif(build, out):
    """idcache-gen-ldif's directory, as slapd's stock schema takes it: no
    version line, posixGroup with extensibleObject (allows member) instead
    of groupOfNames (two structural classes)."""
    path = out / "data.ldif"
    p = subprocess.run([str(build / "bench/idcache-gen-ldif"), "--users", str(USERS),
                        "--groups", str(GROUPS)], capture_output=True, text=True, check=True)
    text = p.stdout.replace("objectClass: groupOfNames\n", "objectClass: extensibleObject\n")
    text = re.sub(r"\Aversion: 1\n\n", "", text)
    path.write_text(text)
    return path


def has_ldap_sync(build, out):
    """Whether this idcached knows ldap_sync (its --check-config accepts it)."""
    conf = out / "check.conf"
    conf.write_text("[idcache]\nuser = root\n\n[domain/dir]\nid_provider = ldap\n"
                    f"ldap_uri = ldap://127.0.0.1:1\nldap_search_base = {BASE}\n"
                    "ldap_sync = syncrepl\n")
    p = subprocess.run([str(build / "src/daemon/idcached"), "--check-config", "-c", str(conf)],
                       capture_output=True, text=True)
    return p.returncode == 0


def header(args):
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                if line.startswith("model name")), "?")
    slapd_v = subprocess.run(["/usr/sbin/slapd", "-VV"], capture_output=True,
                             text=True).stderr.splitlines()[:1]
    load = open("/proc/loadavg").read().split()[:3]
    return [f"# {cpu}; nproc={os.cpu_count()}; load average at start {' '.join(load)}",
            f"# {slapd_v[0].strip() if slapd_v else 'slapd ?'}; {USERS} users, {GROUPS} groups "
            f"(rfc2307bis), poll: enumerate=true, entry_cache_timeout={TTL_S}",
            f"# build {args.build}; hosts {args.hosts}; {args.changes} changes of each kind; "
            f"steady window {args.steady:.0f} s"
            + ("; poll mode: one change of each kind waited out" if args.poll_wait else "")]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", type=Path, default=REPO / "build")
    ap.add_argument("--out", type=Path, default=Path("/tmp/idc-fleet"))
    ap.add_argument("--quick", action="store_true", help="N=10, short windows")
    ap.add_argument("--hosts", default="10,100,300")
    ap.add_argument("--modes", default="poll,poll-incr,syncrepl")
    ap.add_argument("--changes", type=int, default=20)
    ap.add_argument("--steady", type=float, default=None)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--poll-wait", action="store_true",
                    help="poll mode: also wait one change of each kind out (up to a pass)")
    ap.add_argument("--trace", action="store_true",
                    help="syncrepl: hosts log each batch's times (debug_level 6); print where "
                         "the time went between a change and its NSS answer")
    ap.add_argument("--selftest", type=Path)
    ap.add_argument("--report", type=Path, help="print the table of a fleet_bench.json again")
    ap.add_argument("--markdown", action="store_true", help="with --report: as Markdown")
    args = ap.parse_args()
    # Stopped by a signal: the finally clauses stop every host and slapd.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if args.selftest:
        selftest(args.selftest)
        return 0
    if args.report:
        res = json.loads(args.report.read_text())
        print(markdown(res) if args.markdown else summarize(res), end="")
        return 0
    if os.geteuid() != 0:
        log("needs root (mount namespaces); skipped")
        return 0
    if args.quick:
        args.hosts = "10"
    if args.steady is None:
        args.steady = 60.0 if args.quick else float(ENUM_PERIOD_S)
    args.build = args.build.resolve()
    for rel in ("src/daemon/idcached", "src/cli/idcache", "src/nss/libnss_idcache.so.2",
                "bench/fleet/fleet_probe", "bench/idcache-gen-ldif"):
        if not (args.build / rel).exists():
            log(f"{args.build / rel} is missing (ninja -C {args.build})")
            return 1
    args.out.mkdir(parents=True, exist_ok=True)
    os.chmod(args.out, 0o755)
    ldif = make_ldif(args.build, args.out)
    groups = ldif_groups(ldif)
    sync = has_ldap_sync(args.build, args.out)
    port = args.port or 20000 + os.getpid() % 20000
    slapd = Slapd(args.out / "slapd", port, ldif)
    res = {"header": header(args), "runs": []}
    t_all = time.monotonic()
    for n in [int(x) for x in args.hosts.split(",")]:
        for mode in args.modes.split(","):
            try:
                res["runs"].append(run_one(args, mode, n, slapd, groups, sync))
            except (RuntimeError, subprocess.SubprocessError, OSError) as e:
                log(f"{mode} N={n} failed: {e}")
                res["runs"].append({"mode": mode, "hosts": n, "failed": str(e)[:2000]})
            (args.out / "fleet_bench.json").write_text(json.dumps(res, indent=1))
    res["header"].append(f"# whole run {time.monotonic() - t_all:.0f} s")
    (args.out / "fleet_bench.json").write_text(json.dumps(res, indent=1))
    text = summarize(res)
    (args.out / "fleet_bench.txt").write_text(text)
    print(text, end="")
    log(f"results in {args.out}/fleet_bench.txt and .json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
