"""glibc's own nscd client reading the maps src/nscddb writes.

Each test runs in a private mount namespace with a tmpfs over /run, an
nsswitch.conf saying `passwd: files` and `group: files`, and /etc/passwd and
/etc/group holding root only. bench/nss/nscd_mapserve (a stand-in nscd
socket, built with src/nscddb) listens on /run/nscd/socket and hands out
maps of users and groups that are in no file of the namespace, so whatever
resolves them came through the nscd path; its request counters tell a map
hit (no request) from a socket round trip. Misses are answered "not
served" (found = -1), so glibc asks NSS (the files) for them.
"""
import json
import os
import shutil
import subprocess
import sys

import pytest

import nsenv

PASSWD = """alice:x:5001:5001:Alice A:/home/alice:/bin/sh
bob:x:5002:5002:Bob B:/home/bob:/bin/bash
"""
GROUP = """alice:x:5001:
staff:x:6000:alice,bob
devs:x:6001:alice
"""

# Inside the namespace: mounts, the server, then the steps; JSON out.
DRIVER = r'''
import json, os, subprocess, sys
spec = json.load(open(sys.argv[1]))
d = spec["dir"]
def sh(*a):
    subprocess.run(a, check=True)
sh("mount", "-t", "tmpfs", "-o", "mode=755", "idc_nscd_maps", "/run")
os.mkdir("/run/nscd")
sh("mount", "--bind", d + "/nsswitch.conf", "/etc/nsswitch.conf")
sh("mount", "--bind", d + "/host_passwd", "/etc/passwd")
sh("mount", "--bind", d + "/host_group", "/etc/group")
srv = subprocess.Popen([spec["server"], "/run/nscd/socket", d + "/passwd", d + "/group"]
                       + [str(x) for x in spec["stale"]],
                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
assert srv.stdout.readline().strip() == "ready"
def ask(cmd):
    srv.stdin.write(cmd + "\n"); srv.stdin.flush()
    lines = []
    while True:
        l = srv.stdout.readline().strip()
        lines.append(l)
        if l in ("ok", "error") or not l:
            return lines
client = None
out = []
for step in spec["steps"]:
    kind, arg = step
    if kind == "srv":
        out.append(ask(arg))
    elif kind == "sleep":
        import time; time.sleep(arg); out.append(None)
    elif kind == "cmd":
        p = subprocess.run(arg, capture_output=True, text=True, timeout=60)
        out.append([p.returncode, p.stdout, p.stderr])
    elif kind == "client":  # one long-lived process doing lookups
        if client is None:
            client = subprocess.Popen([sys.executable, d + "/client.py"], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, text=True)
        client.stdin.write(arg + "\n"); client.stdin.flush()
        out.append(json.loads(client.stdout.readline()))
if client:
    client.stdin.close(); out.append(["client-exit", client.wait(timeout=60)])
srv.stdin.close()
srv.wait(timeout=10)
json.dump(out, sys.stdout)
'''


@pytest.fixture(scope="module")
def env(build_dir):
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare (private mount namespaces)")
    server = build_dir / "bench" / "nss" / "nscd_mapserve"
    if not os.access(server, os.X_OK):
        pytest.fail(f"{server} is missing: build it first (ninja -C {build_dir})")
    d = nsenv.make_private_dir("idc-nscdmaps-")
    files = {"passwd": PASSWD, "group": GROUP, "client.py": nsenv.LOOKUP_CLIENT, "driver.py": DRIVER,
             "host_passwd": "root:x:0:0:root:/root:/bin/bash\n", "host_group": "root:x:0:\n",
             "nsswitch.conf": "passwd: files\ngroup: files\nshadow: files\n"}
    for name, text in files.items():
        nsenv.write_atomic(d / name, text)
    yield {"dir": d, "server": server}
    nsenv.remove_tree(d)


def run_ns(env, steps, stale=()):
    """The steps' results, in order (client-exit last when a client ran).
    stale: (seconds,), the server's staleness bound (default NSCDDB_STALE_S)."""
    spec = env["dir"] / "spec.json"
    nsenv.write_atomic(spec, json.dumps({"dir": str(env["dir"]), "server": str(env["server"]),
                                         "steps": steps, "stale": list(stale)}))
    p = subprocess.run(["unshare", "-m", "--propagation", "private", nsenv.sys_python(),
                        str(env["dir"] / "driver.py"), str(spec)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def requests(line):
    """{request type: count} from the server's stats line."""
    return {int(k): int(v) for k, v in (f.split("=") for f in line[0].split()[1:])}


GETPWBYNAME, GETPWBYUID, GETGRBYNAME, GETGRBYGID, GETFDPW, GETFDGR, INITGROUPS = 0, 1, 2, 3, 11, 12, 15


def test_getent_and_id_resolve_from_the_maps(env):
    r = run_ns(env, [
        ["cmd", ["getent", "-s", "files", "passwd", "alice"]],
        ["cmd", ["getent", "passwd", "alice"]],
        ["cmd", ["getent", "passwd", "5002"]],
        ["cmd", ["getent", "group", "staff"]],
        ["cmd", ["getent", "group", "6001"]],
        ["cmd", ["id", "alice"]],
        ["cmd", ["getent", "initgroups", "alice"]],
        ["cmd", ["getent", "passwd", "root"]],
        ["srv", "stats"],
    ])
    assert r[0][0] == 2, "alice must be in no file of the namespace"
    assert r[1][:2] == [0, "alice:x:5001:5001:Alice A:/home/alice:/bin/sh\n"]
    assert r[2][:2] == [0, "bob:x:5002:5002:Bob B:/home/bob:/bin/bash\n"]
    assert r[3][:2] == [0, "staff:x:6000:alice,bob\n"]
    assert r[4][:2] == [0, "devs:x:6001:alice\n"]
    assert r[5][0] == 0
    assert "uid=5001(alice) gid=5001(alice)" in r[5][1]
    assert "6000(staff)" in r[5][1] and "6001(devs)" in r[5][1]
    assert r[6][0] == 0 and {"6000", "6001"} <= set(r[6][1].split()[1:])
    assert r[7][0] == 0  # root: a map miss, asked over the socket, then files
    req = requests(r[8])
    # the hits asked nothing but the maps themselves; only root's miss went
    # over the socket
    assert req.get(GETPWBYNAME, 0) == 1
    assert req.get(GETPWBYUID, 0) == 0
    assert req.get(GETGRBYNAME, 0) == 0 and req.get(GETGRBYGID, 0) == 0
    assert req.get(INITGROUPS, 0) == 0


def test_hits_need_no_round_trip(env):
    r = run_ns(env, [
        ["client", "pw alice 500"],
        ["client", "pwuid 5002 500"],
        ["client", "gr staff 500"],
        ["client", "grgid 6001 500"],
        ["client", "gl alice:5001 500"],
        ["srv", "stats"],
    ])
    assert r[0][0] == "alice" and r[0][2] == 5001
    assert r[1][0] == "bob"
    assert r[2] == ["staff", "x", 6000, ["alice", "bob"]]
    assert r[3] == ["devs", "x", 6001, ["alice"]]
    assert r[4] == [5001, 6000, 6001]
    # 2500 lookups, one process: one GETFD per map, no lookup request
    assert requests(r[5]) == {GETFDPW: 1, GETFDGR: 1}
    assert r[6] == ["client-exit", 0]


def test_removed_record_leaves_a_client_that_holds_the_map(env):
    # Misses answered "not found", as idcached's socket answers a name no
    # source holds: "not served" would turn glibc off nscd for 100 lookups.
    r = run_ns(env, [
        ["srv", "miss notfound"],
        ["client", "pw alice"],
        ["client", "gr staff"],
        ["srv", "drop-user alice"],
        ["srv", "drop-group staff"],
        ["client", "pw alice"],
        ["client", "pwuid 5001"],
        ["client", "gr staff"],
        ["client", "pw bob"],
        ["srv", "stats"],
    ])
    r = r[1:]
    assert r[0][0] == "alice" and r[1][0] == "staff"
    assert r[2] == ["ok"] and r[3] == ["ok"]
    assert r[4] is None and r[5] is None and r[6] is None  # gone from both keys
    assert r[7][0] == "bob"
    req = requests(r[8])
    assert req[GETFDPW] == 1 and req[GETFDGR] == 1  # the same maps throughout
    assert req.get(GETPWBYNAME, 0) >= 1  # the misses asked the socket


@pytest.mark.parametrize("field", ["version", "header", "module", "datasize", "stale"])
def test_a_broken_map_makes_glibc_fall_back(env, field):
    r = run_ns(env, [
        ["srv", f"corrupt {field}"],
        ["cmd", ["getent", "passwd", "alice"]],
        ["cmd", ["getent", "passwd", "root"]],
        ["cmd", ["getent", "group", "staff"]],
        ["cmd", ["id", "alice"]],
        ["client", "pw alice 50"],
        ["client", "gl alice:5001 50"],
        ["srv", "stats"],
    ])
    assert r[0] == ["ok"]
    assert r[1][0] == 2  # refused map: the socket says "not served", files lack alice
    assert r[2][0] == 0 and r[2][1].startswith("root:")
    assert r[3][0] == 2
    assert r[4][0] == 1  # no such user, no crash
    assert r[5] is None and r[6] == [5001]
    assert requests(r[7]).get(GETPWBYNAME, 0) >= 1  # glibc asked the socket instead
    assert r[8] == ["client-exit", 0]


def test_a_record_failing_glibcs_checks_is_not_answered(env):
    r = run_ns(env, [
        ["srv", "nonul alice"],
        ["cmd", ["getent", "passwd", "alice"]],
        ["cmd", ["getent", "passwd", "bob"]],
    ])
    assert r[0] == ["ok"]
    assert r[1][0] == 2 and r[1][1] == ""
    assert r[2][0] == 0 and r[2][1].startswith("bob:")


def test_a_map_no_one_beats_is_dropped_within_the_stale_bound(env):
    """A writer that stops (a daemon killed) leaves a map whose timestamp
    glibc finds stale the writer's bound later (NSCDDB_STALE_S, 60 s; 5 s
    here), not after glibc's own 300 s."""
    r = run_ns(env, [
        ["client", "pw alice"],
        ["srv", "pause"],
        ["client", "pw alice"],
        ["sleep", 7],
        ["client", "pw alice"],
        ["cmd", ["getent", "passwd", "alice"]],
    ], stale=(5,))
    assert r[0][0] == "alice" and r[1] == ["ok"] and r[2][0] == "alice"
    assert r[4] is None  # the process holding the map let it go
    assert r[5][0] == 2  # and a new one refuses it


def test_readers_see_whole_records_while_the_map_churns_and_swaps(env):
    """The server stores the users again and again (gc_cycle moving, the
    map filling and swapped for a compacted one) while a process looks one
    up 20,000 times: every answer is the whole record."""
    r = run_ns(env, [
        ["srv", "miss notfound"],
        ["client", "pw alice"],
        ["srv", "churn 20000"],
        ["client", "tally alice 20000"],
        ["client", "tally alice 20000"],
        ["srv", "swaps"],
    ])
    whole = json.dumps(r[1])
    seen = {}
    for t in (r[3], r[4]):
        for k, v in t.items():
            seen[k] = seen.get(k, 0) + v
    assert set(seen) == {whole}, seen  # no torn record, no miss
    assert int(r[5][0].split()[1]) >= 1, r[5]  # the map was swapped meanwhile
    assert r[6] == ["client-exit", 0]
