"""Attacks on the daemon's memory and loop time by an unprivileged local
user, each reproduced (bounded in count and time) while another uid's
clients run lookups beside it: the daemon's RSS stays under a stated bound
and the others are answered within 1 s (p99; printed with p50 and max, run
with -s).

The attacker runs tests/load/memattack.py as ATTACKER, the others
tests/load/nssload.py as OTHER, both through setpriv, so the daemon sees
their real uids (SO_PEERCRED). Cache commits, which an attacker gets from
its own lookups of new LDAP names, come here from a small second files
domain that the test rewrites: each rewrite is one cheap commit that makes
every enumeration snapshot stale.
"""
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import nsenv

LOAD = Path(__file__).resolve().parents[1] / "load"
sys.path.insert(0, str(LOAD))
import idcproto as P  # noqa: E402

pytestmark = pytest.mark.usefixtures("as_root")

ATTACKER = 4242
OTHER = 65534
N_USERS = 100000
MIB = 1024 * 1024
UID_MEM = 64 * MIB  # DAEMON_UID_MEM, src/daemon/daemon.h
SNAP_SPACING = 10  # DAEMON_SNAP_SPACING
SNAP_WAIT_MAX_MS = 2000  # DAEMON_SNAP_WAIT_MAX_MS


def passwd_text():
    # ~130 bytes a record: a snapshot of the map is ~13 MB, as with real gecos fields.
    return "".join(f"a{i:06d}:x:{300000 + i}:{300000 + i % 100}:Attack test user number {i} "
                   f"of the memory suite:/home/attack/a{i:06d}:/bin/bash\n"
                   for i in range(N_USERS))


def group_text():
    return "".join(f"ag{k:02d}:x:{300000 + k}:a{k:06d}\n" for k in range(100))


@pytest.fixture(scope="module")
def big(module_daemons):
    base = nsenv.make_private_dir("idc-attack-")
    tiny = Tiny(base)
    # test_lookups_never_read needs more connections of one uid than the
    # default per-uid share (128) to pass the uid's memory budget.
    d = module_daemons.start(passwd_text(), group_text(), timeout=120,
                             idcache_conf="max_connections_per_uid = 256\n", domain_conf=(
        f"\n[domain/tiny]\nid_provider = files\npasswd_files = {tiny.passwd}\n"
        f"group_files = {tiny.group}\n"))
    d.tiny = tiny
    yield d
    nsenv.remove_tree(base)


class Tiny:
    """The small domain: commit() adds one user and waits until it is served."""

    def __init__(self, base):
        self.passwd, self.group = base / "passwd", base / "group"
        self.n = 0
        nsenv.write_atomic(self.passwd, "t0:x:500000:500000::/:/bin/sh\n")
        nsenv.write_atomic(self.group, "tg:x:500000:\n")

    def commit(self, sock):
        self.n += 1
        nsenv.write_atomic(self.passwd, "".join(f"t{i}:x:{500000 + i}:500000::/:/bin/sh\n"
                                                for i in range(self.n + 1)))
        c = P.Client(sock)
        try:
            ok, _ = nsenv.wait_for(lambda: isinstance(c.getpwnam(f"t{self.n}"), tuple),
                                   timeout=10)
        finally:
            c.close()
        assert ok, f"commit {self.n} of the tiny domain not served"


def rss_kb(pid):
    """The daemon's anonymous resident memory: what it allocated, without
    the pages of cache.mdb it has mapped (page cache, shared, reclaimable)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1])
    raise RuntimeError("no RssAnon")


class Peak:
    """The daemon's highest anonymous RSS (kB) while the block runs, sampled every 20 ms."""

    def __init__(self, pid):
        self.pid, self.kb, self.stop = pid, rss_kb(pid), threading.Event()

    def __enter__(self):
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()
        return self

    def run(self):
        while not self.stop.wait(0.02):
            self.kb = max(self.kb, rss_kb(self.pid))

    def __exit__(self, *exc):
        self.stop.set()
        self.t.join()


def as_uid(uid, script, *args):
    return ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--",
            sys.executable, str(LOAD / script), *map(str, args)]


def attacker(d, mode, arg, *extra):
    """memattack.py as ATTACKER; talk to it over its stdin and stdout."""
    return subprocess.Popen(as_uid(ATTACKER, "memattack.py", "--socket", d.run_dir / "nss.sock",
                                   "--deadline", 120, *extra, mode, arg),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def finish(proc):
    """Close the attacker's stdin; its remaining output."""
    out, _ = proc.communicate(timeout=60)
    return out


def others(d, clients=20, per_client=150):
    """Lookups as OTHER beside the attack: nssload.py's summary."""
    p = subprocess.run(as_uid(OTHER, "nssload.py", "--socket", d.run_dir / "nss.sock",
                              "--passwd", d.passwd, "--group", d.group, "--clients", clients,
                              "--per-client", per_client, "--deadline", 60),
                       capture_output=True, text=True, timeout=120)
    assert p.stdout, p.stderr
    return json.loads(p.stdout)


def check_others(label, r, clients=20, per_client=150):
    print(f"{label}: other uid's {r['requests']} lookups: p50 {r['p50_ms']} ms, "
          f"p99 {r['p99_ms']} ms, max {r['max_ms']} ms")
    assert r["nwrong"] == 0, r["wrong"]
    assert r["unfinished_clients"] == 0 and r["good_closed_by_daemon"] == 0, r
    assert r["requests"] == clients * per_client, r
    # answered within 1 s: availability, not a budget. p99 as in
    # test_hard_load.py: the generator's own scheduling on a loaded machine
    # shows in the single worst request (seen up to 1.6 s at load 7 on 2 cores).
    assert r["p99_ms"] < 1000, r


def status(d):
    c = P.Client(d.run_dir / "admin.sock")
    try:
        st, payload = c.call(P.STATUS)
    finally:
        c.close()
    assert st == P.OK
    text = payload[4:-1].decode()
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def spaced_builds(took_ms, builds, build_ms):
    """How many builds one uid can make in took_ms: after each, it waits
    min(SPACING x that build's time, WAIT_MAX) before the next. Counted
    with the average build, plus one for builds of uneven length. Without
    the spacing every commit costs one."""
    avg = build_ms / max(builds, 1)
    return 2 + took_ms / (avg + min(SNAP_SPACING * avg, SNAP_WAIT_MAX_MS))


def test_unread_whole_map_replies(big):
    """40 connections each ask for the whole passwd map in one reply and
    never read it. Before: a copy of the map per connection (~13 MB each,
    520 MB). Now the replies go out from the one shared snapshot."""
    d = big
    pid = d.proc.pid
    rss0 = rss_kb(pid)
    atk = attacker(d, "unread", 40)
    assert atk.stdout.readline().strip() == "ready"
    time.sleep(1.0)  # the daemon answers them all (or would have copied)
    with Peak(pid) as peak:
        r = others(d)
    finish(atk)
    print(f"RSS {rss0} kB before, peak {peak.kb} kB with 40 unread whole-map replies")
    assert peak.kb < rss0 + 64 * 1024, f"RSS went from {rss0} to {peak.kb} kB"
    check_others("unread whole-map replies", r)
    d.check_alive()


def test_cursors_across_commits(big):
    """16 enumeration cursors, each opened after a cache commit, so each
    would hold a snapshot of its own. Before: 16 snapshots (~210 MB). Now
    the attacker's uid holds what DAEMON_UID_MEM allows and is refused
    (TRYAGAIN) beyond; another uid still enumerates the whole map."""
    d = big
    pid = d.proc.pid
    sock = d.run_dir / "nss.sock"
    rss0 = rss_kb(pid)
    atk = attacker(d, "pin", 16)
    got = []
    with Peak(pid) as peak:
        for _ in range(16):
            d.tiny.commit(sock)
            atk.stdin.write("open\n")
            atk.stdin.flush()
            got.append(int(atk.stdout.readline().split()[1]))
        r = others(d)
        walk = subprocess.run(as_uid(OTHER, "memattack.py", "--socket", sock, "walk"),
                              capture_output=True, text=True, timeout=60)
    finish(atk)
    print(f"RSS {rss0} kB before, peak {peak.kb} kB with 16 cursors across commits; "
          f"statuses {got}; budget bytes now {status(d).get('budget.bytes')}")
    assert peak.kb < rss0 + 100 * 1024, f"RSS went from {rss0} to {peak.kb} kB"
    assert got[0] == P.OK and P.TRYAGAIN in got, got
    assert got.count(P.OK) * 13 * MIB < UID_MEM + 20 * MIB, got
    assert walk.stdout.split() == ["records", str(N_USERS + d.tiny.n + 1)], walk
    check_others("cursors across commits", r)
    d.check_alive()


def test_snapshot_churn(big):
    """SETPWENT after every commit rebuilds the 100,000-user snapshot in the
    loop. One uid may now build again only after ten times its last build's
    time (at most 2 s); meanwhile its request waits."""
    d = big
    sock = d.run_dir / "nss.sock"
    seconds = 8.0
    st0 = status(d)
    stop = threading.Event()

    def commits():
        while not stop.is_set():
            d.tiny.commit(sock)
            time.sleep(0.2)

    t = threading.Thread(target=commits, daemon=True)
    t.start()
    t0 = time.monotonic()
    atk = attacker(d, "churn", seconds)
    r = others(d)
    out = finish(atk)
    took_ms = (time.monotonic() - t0) * 1000
    stop.set()
    t.join()
    st1 = status(d)
    builds = int(st1["enum.snapshots_built"]) - int(st0["enum.snapshots_built"])
    build_ms = int(st1["enum.build_ms"]) - int(st0["enum.build_ms"])
    print(f"churn for {took_ms:.0f} ms: attacker {out.strip()}; {builds} snapshot builds "
          f"taking {build_ms} ms of loop time; {d.tiny.n} commits")
    check_others("snapshot churn", r)
    assert builds <= spaced_builds(took_ms, builds, build_ms), (builds, build_ms, d.tiny.n)
    d.check_alive()


# ==== a directory with a large group ====================================================

LDAP_DIR = Path(__file__).resolve().parents[1] / "ldap"
BASE = "dc=example,dc=com"
BIG_MEMBERS = 300000
N_LDAP_USERS = 3000


def ldap_ldif(path):
    people, groups = f"ou=people,{BASE}", f"ou=groups,{BASE}"
    out = [f"dn: {BASE}\nobjectClass: dcObject\nobjectClass: organization\no: Example\n"
           "dc: example\n",
           f"dn: {people}\nobjectClass: organizationalUnit\nou: people\n",
           f"dn: {groups}\nobjectClass: organizationalUnit\nou: groups\n"]
    out += [f"dn: uid=d{i:04d},{people}\nobjectClass: account\nobjectClass: posixAccount\n"
            f"uid: d{i:04d}\ncn: x\nuidNumber: {60000 + i}\ngidNumber: 60000\n"
            "homeDirectory: /home/x\nloginShell: /bin/sh\n" for i in range(N_LDAP_USERS)]
    out.append(f"dn: cn=big,{groups}\nobjectClass: posixGroup\ncn: big\ngidNumber: 61000\n" +
               "".join(f"memberUid: m{i:06d}\n" for i in range(BIG_MEMBERS)))
    Path(path).write_text("\n".join(out))


@pytest.fixture(scope="module")
def directory():
    if not (Path("/usr/sbin/slapd").exists() and (LDAP_DIR / "slapd.sh").exists()):
        pytest.skip("needs Debian's slapd (apt-get install slapd ldap-utils)")
    base = nsenv.make_private_dir("idc-attack-ldap-")
    ldif = base / "big.ldif"
    ldap_ldif(ldif)
    with __import__("socket").socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    p = subprocess.run([str(LDAP_DIR / "slapd.sh"), "start", str(base / "s"), str(port),
                        str(ldif)], capture_output=True, text=True, timeout=300,
                       env=dict(__import__("os").environ, SLAPD_LOAD="slapadd"))
    if p.returncode != 0:
        pytest.fail(f"slapd did not start: {p.stderr}")
    try:
        yield f"ldap://127.0.0.1:{port}"
    finally:
        subprocess.run([str(LDAP_DIR / "slapd.sh"), "stop", str(base / "s")], timeout=30)
        nsenv.remove_tree(base)


def big_group_attack(d, seconds, users):
    """memattack.py group as ATTACKER beside the others: (status before,
    after, attacker's output, others' summary, ms taken)."""
    st0 = status(d)
    t0 = time.monotonic()
    atk = subprocess.Popen(as_uid(ATTACKER, "memattack.py", "--socket", d.run_dir / "nss.sock",
                                  "--group", "big", "--users", ",".join(users), "group", seconds),
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    r = others(d)
    out = finish(atk).strip()
    took_ms = (time.monotonic() - t0) * 1000
    return st0, status(d), out, r, took_ms


def delta(st0, st1, key):
    return int(st1[key]) - int(st0[key])


def test_large_group(directory, module_daemons):
    """GETGRNAM of a 300,000-member directory group again and again; then
    alternating with a lookup of a user not seen before (stored: a
    commit). Before, every GETGRNAM read and packed the whole group in the
    loop. Now the packed reply is kept per cache generation; reading it
    again after a commit is one of the uid's spaced builds, and meanwhile
    its request waits while others are answered."""
    d = module_daemons.start(
        "loc:x:5000:5000:Local:/home/loc:/bin/sh\n", "locg:x:5000:loc\n",
        idcache_conf="domains = local, dir\n",
        domain_conf=(f"\n[domain/dir]\nid_provider = ldap\nldap_uri = {directory}\n"
                     f"ldap_search_base = {BASE}\nldap_schema = rfc2307\n"
                     "ldap_network_timeout = 5\nldap_search_timeout = 10\n"))
    c = P.Client(d.run_dir / "nss.sock", timeout=60)
    st, payload = c.call(P.GETGRNAM, "big")  # cold: from the directory
    c.close()
    assert st == P.OK and len(P.decode_group(payload)[3]) == BIG_MEMBERS

    st0, st1, out, r, took_ms = big_group_attack(d, 6.0, [])
    built, reused = delta(st0, st1, "big_groups.built"), delta(st0, st1, "big_groups.reused")
    print(f"large group asked for {took_ms:.0f} ms: attacker {out}; read {built} times, "
          f"sent from the kept reply {reused} times")
    check_others("large group asked again and again", r)
    assert built <= 1 and reused >= int(out.split()[1]) - 1, (built, reused, out)

    users = [f"d{i:04d}" for i in range(N_LDAP_USERS)]
    st0, st1, out, r, took_ms = big_group_attack(d, 8.0, users)
    built, build_ms = delta(st0, st1, "big_groups.built"), delta(st0, st1, "big_groups.build_ms")
    commits = delta(st0, st1, "cache_durable_commits")
    print(f"large group after every commit for {took_ms:.0f} ms: attacker {out}, {commits} "
          f"commits; read {built} times taking {build_ms} ms, "
          f"{delta(st0, st1, 'requests_delayed')} requests delayed")
    check_others("large group after every commit", r)
    assert commits > 3, (out, commits)
    assert built <= spaced_builds(took_ms, built, build_ms), (built, build_ms, commits)
    d.check_alive()


def test_lookups_never_read(big):
    """160 connections of one uid pipeline lookups and never read, each
    backlog up to the per-connection limit: together past DAEMON_UID_MEM.
    The uid's connections then wait (budget.waits) while another uid is
    answered; once it reads, every request it sent is answered."""
    d = big
    pid = d.proc.pid
    st0, rss0 = status(d), rss_kb(pid)
    atk = attacker(d, "flood", 160, "--users", "a000042")
    with Peak(pid) as peak:
        sent = int(atk.stdout.readline().split()[1])
        r = others(d)
        st1 = status(d)
    atk.stdin.write("drain\n")
    atk.stdin.flush()
    out = finish(atk).split()
    print(f"160 connections never reading: {sent} requests; charged {st1['budget.bytes']} "
          f"bytes, {int(st1['budget.waits']) - int(st0['budget.waits'])} waits; RSS {rss0} -> "
          f"{peak.kb} kB; after reading: {out}")
    check_others("lookups never read", r)
    assert int(st1["budget.waits"]) > int(st0["budget.waits"])
    assert int(st1["budget.bytes"]) <= UID_MEM + 4 * MIB, st1["budget.bytes"]
    assert out[:4] == ["drained", str(sent), "closed", "0"], (out, sent)
    d.check_alive()
