"""The shared-memory cache end to end: repeated lookups are served from the
maps without asking the daemon, a change drops exactly the records it
affects, `idcache expire` drops a user's by-id record too, answers are the
same with the memory cache off (IDCACHE_MEMCACHE=no), and readers never
miss while maps are recycled and resized under them.

Whether a lookup reached the daemon is read from its request counters in
`idcache status`: a hit in the map makes no request. Nothing here asserts a
timing (budgets belong to bench/nss).
"""
import json
import os
import subprocess

import pytest

import gen_nss_data
import nsenv

pytestmark = pytest.mark.usefixtures("as_root")

PASSWD = """\
root:x:0:0:root:/root:/bin/bash
alice:x:2001:2001:Alice:/home/alice:/bin/bash
bob:x:2002:2002:Bob:/home/bob:/bin/sh
carol:x:2003:2003:Carol:/home/carol:/bin/sh
dave:x:2004:2004:Dave:/home/dave:/bin/sh
"""

GROUP = """\
root:x:0:
alice:x:2001:
bob:x:2002:
carol:x:2003:
dave:x:2004:
dev:x:3001:alice,carol
ops:x:3002:carol
misc:x:3003:bob
"""


# ==== helpers =======================================================================

def status(idcache, d):
    """`idcache status` as a dict of its key=value lines."""
    p = subprocess.run([str(idcache), "status", "--run-dir", str(d.run_dir)],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    out = {}
    for line in p.stdout.splitlines():
        k, sep, v = line.strip().partition("=")
        if sep:
            out[k.strip()] = v.strip()
    return out


NSS_REQUESTS = ("requests.get", "requests.set", "requests.end", "requests.initgroups")


def requests(st):
    """The NSS request counters (not HELLO, nor the admin commands)."""
    return {k: int(v) for k, v in st.items() if k.startswith(NSS_REQUESTS)}


def grown(before, after):
    """The request counters that grew, with by how much."""
    a, b = requests(before), requests(after)
    return {k: b[k] - a.get(k, 0) for k in b if b[k] != a.get(k, 0)}


# Lookups in one process: each (call, key) repeated n times; prints the
# last answer of each as JSON.
LOOKUPS = r'''
import grp, json, os, pwd, sys
n = int(sys.argv[1])
out = {}
for spec in json.loads(sys.argv[2]):
    call, key = spec
    for _ in range(n):
        try:
            if call == "getpwnam":
                r = list(pwd.getpwnam(key))
            elif call == "getpwuid":
                r = list(pwd.getpwuid(int(key)))
            elif call == "getgrnam":
                g = grp.getgrnam(key); r = [g.gr_name, g.gr_gid, list(g.gr_mem)]
            elif call == "getgrgid":
                g = grp.getgrgid(int(key)); r = [g.gr_name, g.gr_gid, list(g.gr_mem)]
            else:
                r = os.getgrouplist(key, 4242)
        except KeyError:
            r = "KeyError"
    out[f"{call} {key}"] = r
print(json.dumps(out))
'''


def lookups(d, specs, n=1, env=None):
    return d.ns.run_py(LOOKUPS, [n, json.dumps(specs)], env=env)


def wait_visible(d, argv, expect, timeout=5.0):
    """Poll argv through NSS until its output contains expect."""
    last = None

    def probe():
        nonlocal last
        last = d.ns.run(argv)
        return expect in last.out

    ok, waited = nsenv.wait_for(probe, timeout=timeout)
    assert ok, f"{' '.join(argv)} still says {last.out!r} {timeout}s after the change"
    return waited


# ==== hits make no request ===========================================================

def test_repeated_lookups_are_served_from_the_maps(idcache, daemons):
    d = daemons.start(PASSWD, GROUP)
    specs = [["getpwnam", "alice"], ["getpwuid", "2002"], ["getgrnam", "dev"],
             ["getgrgid", "3002"], ["getgrouplist", "carol"]]
    first = lookups(d, specs)  # misses: the daemon answers and stores
    s0 = status(idcache, d)
    again = lookups(d, specs, n=500)
    s1 = status(idcache, d)
    assert again == first
    assert first["getgrouplist carol"] == [4242, 3001, 3002]
    assert grown(s0, s1) == {}, f"2,500 repeated lookups reached the daemon: {grown(s0, s1)}"
    for m in ("passwd", "group", "initgroups"):
        assert int(s1[f"memcache_{m}_records"]) >= 1, s1


# A client process that stays: one lookup per line of stdin, one JSON answer
# per line of stdout ("pid" answers its pid).
CLIENT = r'''
import grp, json, os, pwd, sys
for line in sys.stdin:
    call, _, key = line.strip().partition(" ")
    if call == "pid":
        r = os.getpid()
    elif call == "getgrnam":
        try:
            r = grp.getgrnam(key).gr_gid
        except KeyError:
            r = "KeyError"
    elif call == "getgrouplist":
        r = os.getgrouplist(key, 4242)
    else:
        try:
            r = list(pwd.getpwnam(key))
        except KeyError:
            r = "KeyError"
    print(json.dumps(r), flush=True)
'''


def ask(p, line):
    p.stdin.write((line + "\n").encode())
    p.stdin.flush()
    out = p.stdout.readline()
    assert out, f"client gone: {p.stderr.read().decode(errors='replace')}"
    return json.loads(out)


def test_maps_resist_truncation_and_a_clean_stop_withdraws_them(idcache, daemons):
    """The maps a client has mapped are sealed memfds: root opening them
    read-write through /proc/PID/map_files cannot truncate, grow or write
    them (EPERM), and the client keeps answering from them without asking
    the daemon. There is no map file under run_dir to delete or replace.
    A daemon stopping on SIGTERM withdraws its maps: the same client then
    gets no answer (nsswitch has only idcache), as with a dead daemon.
    The client got all three maps with one MCMAP request."""
    d = daemons.start(PASSWD, GROUP)
    p = d.ns.popen([nsenv.sys_python(), "-c", CLIENT])
    try:
        s0 = status(idcache, d)
        assert ask(p, "getpwnam alice")[:3] == ["alice", "x", 2001]
        assert ask(p, "getpwnam alice")[0] == "alice"
        assert ask(p, "getgrnam dev") == 3001
        assert ask(p, "getgrouplist carol") == [4242, 3001, 3002]
        assert int(status(idcache, d)["requests.mcmap"]) - int(s0["requests.mcmap"]) == 1
        pid = ask(p, "pid")
        with open(f"/proc/{pid}/maps") as f:
            names = {ln.split()[-2] for ln in f if "/memfd:idcache-" in ln}
        assert names == {"/memfd:idcache-passwd", "/memfd:idcache-group",
                         "/memfd:idcache-initgroups"}, names
        with open(f"/proc/{pid}/maps") as f:
            ranges = [ln.split()[0] for ln in f if "/memfd:idcache-passwd" in ln]
        assert ranges, "the client did not map the passwd map"
        assert not (d.run_dir / "mc").exists()
        before = status(idcache, d)
        for rng in ranges:
            fd = os.open(f"/proc/{pid}/map_files/{rng}", os.O_RDWR)
            try:
                for attempt in (lambda: os.ftruncate(fd, 0),
                                lambda: os.ftruncate(fd, 1 << 30),
                                lambda: os.pwrite(fd, b"\0" * 64, 0)):
                    with pytest.raises(PermissionError):
                        attempt()
            finally:
                os.close(fd)
        for _ in range(20):
            assert ask(p, "getpwnam alice")[:3] == ["alice", "x", 2001]
        assert grown(before, status(idcache, d)) == {}
        assert d.stop() == 0
        assert ask(p, "getpwnam alice") == "KeyError"
    finally:
        p.stdin.close()
        p.wait(timeout=30)
    r = d.ns.run(["getent", "passwd", "alice"])
    assert r.rc == 2 and r.out == "", r


# ==== a change drops exactly what it affects ========================================

def test_shell_change_drops_only_that_user(idcache, daemons):
    d = daemons.start(PASSWD, GROUP)
    warm = [["getpwnam", "alice"], ["getpwuid", "2001"], ["getpwnam", "bob"],
            ["getpwuid", "2002"], ["getgrouplist", "bob"], ["getgrnam", "misc"]]
    lookups(d, warm)
    s0 = status(idcache, d)
    nsenv.write_atomic(d.passwd, PASSWD.replace("/home/alice:/bin/bash",
                                                "/home/alice:/bin/zsh"))
    wait_visible(d, ["getent", "passwd", "alice"], "/bin/zsh")
    assert d.ns.run(["getent", "passwd", "2001"]).out.endswith(":/bin/zsh\n")
    s1 = status(idcache, d)
    # No map was reset; alice's two records went and came back by the socket.
    for m in ("passwd", "group", "initgroups"):
        assert s1[f"memcache_{m}_generation"] == s0[f"memcache_{m}_generation"], (m, s0, s1)
    g = grown(s0, s1)
    assert g.get("requests.getpwnam", 0) >= 1 and g.get("requests.getpwuid", 0) == 1, g
    # bob's records, his group list and an unrelated group survived.
    again = lookups(d, [["getpwnam", "bob"], ["getpwuid", "2002"], ["getgrouplist", "bob"],
                        ["getgrnam", "misc"]], n=20)
    s2 = status(idcache, d)
    assert grown(s1, s2) == {}, f"unrelated records were dropped: {grown(s1, s2)}"
    assert again["getpwnam bob"][6] == "/bin/sh"


def test_membership_change_reaches_id(idcache, daemons):
    d = daemons.start(PASSWD, GROUP)
    for u in ("alice", "bob", "carol", "dave"):
        assert d.ns.run(["id", u]).rc == 0
    before = d.ns.run(["id", "alice"]).out
    assert "3001(dev)" in before and "ops" not in before
    s0 = status(idcache, d)
    # alice leaves dev and joins ops; carol stays in both.
    group = GROUP.replace("dev:x:3001:alice,carol", "dev:x:3001:carol") \
                 .replace("ops:x:3002:carol", "ops:x:3002:carol,alice")
    nsenv.write_atomic(d.group, group)
    wait_visible(d, ["id", "alice"], "3002(ops)")
    after = d.ns.run(["id", "alice"]).out
    assert "dev" not in after, after
    oracle = d.ns.run(["id", "alice"], sources="files", passwd=d.passwd, group=d.group)
    assert after == oracle.out
    s1 = status(idcache, d)
    assert s1["memcache_initgroups_generation"] == s0["memcache_initgroups_generation"]
    # bob's and dave's group lists were not touched: no initgroups request.
    lookups(d, [["getgrouplist", "bob"], ["getgrouplist", "dave"]], n=10)
    s2 = status(idcache, d)
    assert grown(s1, s2).get("requests.initgroups", 0) == 0, grown(s1, s2)
    # carol's membership did not change: her list is still a hit (her
    # answer is the same either way; what matters is that it is correct).
    assert lookups(d, [["getgrouplist", "carol"]])["getgrouplist carol"] == [4242, 3001, 3002]

    # A group renumbered: every member's list changes.
    group2 = group.replace("misc:x:3003:bob", "misc:x:3033:bob")
    nsenv.write_atomic(d.group, group2)
    wait_visible(d, ["id", "bob"], "3033(misc)")
    assert d.ns.run(["getent", "group", "3003"]).rc == 2
    oracle = d.ns.run(["id", "bob"], sources="files", passwd=d.passwd, group=d.group)
    assert d.ns.run(["id", "bob"]).out == oracle.out

    # A group removed: its members lose it; a user removed: gone by name and id.
    nsenv.write_atomic(d.group, group2.replace("misc:x:3033:bob\n", ""))
    wait_visible(d, ["id", "bob"], "groups=2002(bob)\n")
    nsenv.write_atomic(d.passwd, PASSWD.replace("dave:x:2004:2004:Dave:/home/dave:/bin/sh\n",
                                                ""))
    nsenv.wait_for(lambda: d.ns.run(["getent", "passwd", "dave"]).rc == 2)
    assert d.ns.run(["getent", "passwd", "dave"]).rc == 2
    assert d.ns.run(["getent", "passwd", "2004"]).rc == 2


# ==== expire ===========================================================================

def test_expire_user_drops_its_by_id_record(idcache, daemons):
    d = daemons.start(PASSWD, GROUP, domain_conf="case_sensitive = false\n")
    lookups(d, [["getpwuid", "2001"], ["getpwnam", "alice"], ["getpwuid", "2002"]])
    s0 = status(idcache, d)
    lookups(d, [["getpwuid", "2001"], ["getpwuid", "2002"]], n=5)
    assert grown(s0, status(idcache, d)) == {}
    # Another spelling of the name: the daemon finds alice's uid itself.
    r = subprocess.run([str(idcache), "expire", "--run-dir", str(d.run_dir), "--user",
                        "ALICE"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    s1 = status(idcache, d)
    lookups(d, [["getpwuid", "2001"]])
    s2 = status(idcache, d)
    assert grown(s1, s2).get("requests.getpwuid") == 1, grown(s1, s2)
    lookups(d, [["getpwuid", "2002"]], n=3)  # bob's stayed
    assert grown(s2, status(idcache, d)) == {}


# ==== same answers with the memory cache off ========================================

def test_same_answers_with_and_without_memcache(idcache, daemons):
    data = gen_nss_data.generate(n_users=400, n_groups=220)
    d = daemons.start(data.passwd_text(), data.group_text())
    names = [u[0] for u in data.users]
    sample = ["biguser", "lastuser", "root"] + names[5:25] + names[::37]
    sample = [n for i, n in enumerate(sample) if n in names and n not in sample[:i]]
    argvs = [["getent", "passwd"], ["getent", "group"]] + [["id", u] for u in sample] + \
            [["getent", "passwd", str(u[1])] for u in data.users[::11]] + \
            [["getent", "group", str(g[1])] for g in data.groups[::7]] + \
            [["getent", "initgroups"] + sample]
    kw = dict(passwd=d.passwd, group=d.group)
    cold = d.ns.run_many(argvs, **kw)          # fills the maps
    s0 = status(idcache, d)
    warm = d.ns.run_many(argvs, **kw)          # served from them
    s1 = status(idcache, d)
    off = d.ns.run_many(argvs, env={"IDCACHE_MEMCACHE": "no"}, **kw)
    s2 = status(idcache, d)
    files = d.ns.run_many(argvs, sources="files", **kw)
    for c, w, o, f in zip(cold, warm, off, files):
        what = " ".join(c.argv)[:80]
        assert (w.rc, w.out) == (c.rc, c.out), f"{what}: warm differs from cold"
        assert (o.rc, o.out) == (c.rc, c.out), f"{what}: IDCACHE_MEMCACHE=no differs"
        assert (f.rc, f.out) == (c.rc, c.out), f"{what}: files differs"
    # The warm run asked the daemon only for enumeration; the off run asked
    # it for every lookup.
    # Not-found answers are not cached: `id` of a user whose primary group
    # does not exist asks for that gid each time (once or twice).
    gw, go = grown(s0, s1), grown(s1, s2)
    gids = {g[1] for g in data.groups}
    by_name = {u[0]: u for u in data.users}
    orphans = sum(1 for n in sample if by_name[n][2] not in gids)
    for k in ("requests.getpwnam", "requests.getpwuid", "requests.initgroups"):
        assert gw.get(k, 0) == 0, (k, gw)
    assert gw.get("requests.getgrgid", 0) <= 2 * orphans, (orphans, gw)
    assert go.get("requests.initgroups", 0) >= len(sample), go
    assert go.get("requests.getpwuid", 0) >= len(data.users[::11]), go


# ==== recycling and resizing under load ================================================

READER = r'''
import grp, json, os, pwd, sys
users, groups = json.loads(sys.argv[1]), json.loads(sys.argv[2])
stop, started = sys.argv[3], sys.argv[4]
rounds = lookups = 0
bad = []
while not os.path.exists(stop):
    for name, uid in users:
        try:
            a, b = pwd.getpwnam(name), pwd.getpwuid(uid)
            if (a.pw_name, a.pw_uid, b.pw_name) != (name, uid, name):
                bad.append(["wrong", name, a.pw_name, b.pw_name])
        except KeyError:
            bad.append(["missing", name])
        lookups += 2
    for name, gid in groups:
        try:
            if grp.getgrnam(name).gr_gid != gid:
                bad.append(["wrong group", name])
        except KeyError:
            bad.append(["missing group", name])
        lookups += 1
    os.getgrouplist(users[0][0], 4242)
    rounds += 1
    if rounds == 1:
        open(started, "w").close()
print(json.dumps({"rounds": rounds, "lookups": lookups, "bad": bad[:20], "nbad": len(bad)}))
'''


def test_readers_never_miss_while_maps_recycle_and_resize(idcache, daemons):
    data = gen_nss_data.generate(n_users=300, n_groups=80, in_many=40, huge=100, malformed=False)
    d = daemons.start(data.passwd_text(), data.group_text(),
                      idcache_conf="memcache_size_passwd = 1\n")
    seen = set()
    users = [(u[0], u[1]) for u in data.users if u[1] not in seen and not seen.add(u[1])][:60]
    seen = set()
    groups = [(g[0], g[1]) for g in data.groups if g[1] not in seen and not seen.add(g[1])][:30]
    stop, started = d.base / "reader.stop", d.base / "reader.started"
    procs = [d.ns.popen([nsenv.sys_python(), "-c", READER, json.dumps(users),
                         json.dumps(groups), stop, f"{started}{i}"]) for i in range(3)]
    ok, _ = nsenv.wait_for(lambda: all((d.base / f"reader.started{i}").exists()
                                       for i in range(3)), timeout=30)
    assert ok, "readers did not start"
    gen0 = int(status(idcache, d)["memcache_passwd_generation"])
    conf = d.conf.read_text()
    for k in range(12):
        if k % 2:
            size = 1 + k % 3
            d.conf.write_text(conf.replace("memcache_size_passwd = 1",
                                           f"memcache_size_passwd = {size}"))
            argv = ["reload"]
        else:
            argv = ["expire", "--all"]
        r = subprocess.run([str(idcache), argv[0], "--run-dir", str(d.run_dir)] + argv[1:],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, (argv, r.stderr)
        nsenv.wait_for(lambda: False, timeout=0.15)
    stop.touch()
    results = []
    for p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err.decode()[-3000:]
        results.append(json.loads(out))
    d.check_alive()
    gen1 = int(status(idcache, d)["memcache_passwd_generation"])
    print(f"maps recycled {gen1 - gen0} times under "
          f"{sum(r['lookups'] for r in results)} lookups")
    assert gen1 - gen0 >= 6
    for r in results:
        assert r["nbad"] == 0, r


def test_maps_hold_no_password_hash(idcache, daemons):
    """A password hash in the passwd file never reaches a client: the
    socket answers "x", and the bytes of every map the client has mapped
    (read by root through /proc/PID/map_files) hold no trace of it."""
    secret = "$6$Zq9saltsalt$" + "Hh7" * 28
    d = daemons.start(PASSWD + f"eve:{secret}:2005:2005:Eve:/home/eve:/bin/sh\n", GROUP)
    p = d.ns.popen([nsenv.sys_python(), "-c", CLIENT])
    try:
        assert ask(p, "getpwnam eve")[:3] == ["eve", "x", 2005]
        assert ask(p, "getpwnam eve")[:3] == ["eve", "x", 2005]
        pid = ask(p, "pid")
        with open(f"/proc/{pid}/maps") as f:
            ranges = [ln.split()[0] for ln in f if "/memfd:idcache-" in ln]
        assert len(ranges) == 3, ranges
        seen = b""
        for rng in ranges:
            with open(f"/proc/{pid}/map_files/{rng}", "rb") as m:
                data = m.read()
            assert secret.encode() not in data and b"$6$" not in data, rng
            seen += data
        assert b"/home/eve" in seen, "eve's record is not in the maps read"

    finally:
        p.stdin.close()
        p.wait(timeout=30)
    assert "$6$" not in d.ns.run(["getent", "passwd", "eve"]).out


def test_unread_mcmap_replies_hold_no_descriptors(idcache, daemons):
    """200 clients ask for every map (MCMAP) and never read: the daemon
    holds their sockets and nothing more (the maps' descriptors are taken
    from the writers only as a reply goes out), and it keeps answering. A
    second MCMAP on one connection is refused (BADREQ): descriptors in
    flight count against the daemon's open-file limit."""
    import socket
    import struct
    d = daemons.start(PASSWD, GROUP)
    pid = int(status(idcache, d)["pid"])
    base = len(os.listdir(f"/proc/{pid}/fd"))
    hello = struct.pack("=IIIII", 20, 1, 0, 0, 1)
    mcmap = struct.pack("=IIIII", 20, 13, 0, 0, 0)
    socks = []
    try:
        for _ in range(200):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(str(d.run_dir / "nss.sock"))
            s.sendall(hello + mcmap * 2)
            socks.append(s)
        r = d.ns.run(["getent", "passwd", "alice"])
        assert r.rc == 0 and r.out.startswith("alice:"), r
        held = len(os.listdir(f"/proc/{pid}/fd")) - base
        assert held <= 200 + 5, f"{held} descriptors for 200 connections"
        # One of them reads: one reply, three descriptors, in order.
        s = socks[0]
        want = 20 + 16 + 4 * 4
        data, fds = b"", []
        while len(data) < want:
            chunk, anc, _, _ = s.recvmsg(want - len(data), socket.CMSG_SPACE(8 * 4))
            assert chunk, "connection closed"
            data += chunk
            for level, typ, raw in anc:
                if level == socket.SOL_SOCKET and typ == socket.SCM_RIGHTS:
                    fds += struct.unpack(f"={len(raw) // 4}i", raw[:len(raw) // 4 * 4])
        ln, cmd, st, _, n = struct.unpack_from("=IIIII", data, 20)
        assert (cmd, st, n) == (13, 0, 3)
        assert struct.unpack_from("=III", data, 40) == (1, 2, 3)
        second = s.recv(16)
        assert len(second) == 16
        ln2, cmd2, st2, _ = struct.unpack("=IIII", second)
        assert (cmd2, st2) == (13, 5), (cmd2, st2)  # BADREQ
        try:
            names = sorted(os.readlink(f"/proc/self/fd/{f}") for f in fds)
            assert [n.split(" ")[0] for n in names] == [
                "/memfd:idcache-group", "/memfd:idcache-initgroups", "/memfd:idcache-passwd"], names
        finally:
            for f in fds:
                os.close(f)
    finally:
        for s in socks:
            s.close()
