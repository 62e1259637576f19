"""Attacks on idcached's sockets by an unprivileged local user, each
reproduced for real (loopback only, bounded in time and count), while
clients of another uid keep asking: every one of their lookups must be
answered within 1 s. Their latency percentiles are printed (run with -s);
they come from a Python prober with fresh connections, so compare runs,
not against a budget.

Attacker and prober run under setpriv as uids with no privilege (the
prober as nobody), the daemon as its own user, as in production.
"""
import json
import socket
import sys
import time
from pathlib import Path

import pytest

import nsenv

LOAD_DIR = Path(__file__).resolve().parents[1] / "load"
sys.path.insert(0, str(LOAD_DIR))
import idcproto as P  # noqa: E402

pytestmark = pytest.mark.usefixtures("as_root")

ATTACKER_UID = 4242
PROBE_UID = 65534
ANSWER_S = 1.0  # every other client's lookup is answered within this

PASSWD = "".join(f"u{i:03d}:x:{3000 + i}:{3000 + i}:User {i}:/home/u{i}:/bin/sh\n"
                 for i in range(200))
GROUP = "".join(f"g{i:03d}:x:{3000 + i}:u{i:03d}\n" for i in range(200))

# The prober: for `seconds`, a lookup on a fresh connection every 20 ms (as
# the NSS module does one per call), each bounded by ANSWER_S.
PROBE = r'''
import json, sys, time
sys.path.insert(0, sys.argv[1])
import idcproto as P, nssload
sock, seconds, budget = sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
lat, failures = [], []
end = time.monotonic() + seconds
i = 0
while time.monotonic() < end:
    name = "u%03d" % (i % 200)
    i += 1
    t0 = time.monotonic()
    try:
        c = P.Client(sock, timeout=budget)
        c.s.settimeout(max(0.01, budget - (time.monotonic() - t0)))
        r = c.getpwnam(name)
        c.close()
        if not isinstance(r, tuple) or r[0] != name:
            failures.append("%s: %r" % (name, r))
    except Exception as e:
        failures.append("%s: %r after %.3fs" % (name, e, time.monotonic() - t0))
    lat.append(time.monotonic() - t0)
    time.sleep(0.02)
lat.sort()
ms = lambda v: None if v is None else round(v * 1000, 3)
print(json.dumps({"requests": len(lat), "failures": failures[:10], "nfailures": len(failures),
                  "p50_ms": ms(nssload.percentile(lat, 0.5)),
                  "p99_ms": ms(nssload.percentile(lat, 0.99)),
                  "max_ms": ms(lat[-1] if lat else None)}))
'''


def copy_load_modules(d):
    """The protocol modules where the test uids can read them."""
    dest = d.base / "load"
    dest.mkdir(exist_ok=True)
    for name in ("idcproto.py", "nssload.py"):
        (dest / name).write_bytes((LOAD_DIR / name).read_bytes())
    return dest


def start_probe(d, seconds):
    load = copy_load_modules(d)
    return d.ns.popen([nsenv.sys_python(), "-c", PROBE, load, d.run_dir / "nss.sock",
                       seconds, ANSWER_S], sources="files", as_uid=PROBE_UID)


def probe_result(proc, what, timeout=60):
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err.decode(errors="replace")
    r = json.loads(out)
    print(f"{what}: other uid's lookups during the attack: {r['requests']} requests, "
          f"p50 {r['p50_ms']} ms, p99 {r['p99_ms']} ms, max {r['max_ms']} ms, "
          f"{r['nfailures']} failed")
    return r


def check_answered(r):
    assert r["requests"] > 0
    assert r["nfailures"] == 0, r["failures"]
    assert r["max_ms"] < ANSWER_S * 1000, r


def start_attack(d, script, *args):
    """Run an attacker script as ATTACKER_UID; it prints one JSON line when
    its attack is in place and then holds it."""
    load = copy_load_modules(d)
    proc = d.ns.popen([nsenv.sys_python(), "-c", script, load, d.run_dir / "nss.sock"] +
                      [str(a) for a in args], sources="files", as_uid=ATTACKER_UID)
    line = proc.stdout.readline()
    assert line, proc.stderr.read().decode(errors="replace")
    return proc, json.loads(line)


def stop_attack(proc):
    proc.kill()
    proc.wait(timeout=10)


def status(d):
    c = P.Client(d.run_dir / "admin.sock", timeout=5)
    st, payload = c.call(P.STATUS)
    c.close()
    assert st == P.OK, st
    text = payload[4:].split(b"\0", 1)[0].decode()
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def start_daemon(daemons, nofile=None, keep_passrights=False, idcache_conf=""):
    """A daemon; nofile: under an open-file limit it cannot raise (as a
    container or a unit's LimitNOFILE= may impose), so that limits are
    reached by a bounded attack; keep_passrights: on the path of kernels
    before 6.16."""
    d = daemons.start(PASSWD, GROUP, idcache_conf=idcache_conf, start=False)
    if nofile:
        d.wrap = d.wrap + ["prlimit", f"--nofile={nofile}:{nofile}", "--"]
    d.env = {"IDCACHED_KEEP_PASSRIGHTS": "1"} if keep_passrights else {}
    d.start()
    return d


# ==== descriptors passed to the daemon ====================================================

# TCP sockets whose close blocks for `linger` seconds: unsent data behind a
# zero window (the loopback peer never reads and has a small receive
# buffer) and SO_LINGER {1, linger}. They are passed to the daemon with
# SCM_RIGHTS and our copies closed, so the daemon holds the last reference.
ATTACK_FDS = r'''
import array, errno, json, socket, struct, sys, time
sys.path.insert(0, sys.argv[1])
import idcproto as P, nssload
sock, n, linger, hold = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
conns, per_msg = int(sys.argv[6]), int(sys.argv[7])
nssload.raise_nofile(2 * n + conns + 64)
srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)
srv.bind(("127.0.0.1", 0))
srv.listen(n)
peers, passed = [], []
for _ in range(n):
    c = socket.socket()
    c.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    c.connect(srv.getsockname())
    peers.append(srv.accept()[0])  # never read
    c.setblocking(False)
    for _ in range(1000):
        try:
            c.send(b"x" * 65536)
        except BlockingIOError:
            break
    c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, linger))
    passed.append(c)
us = [socket.socket(socket.AF_UNIX) for _ in range(conns)]
for u in us:
    u.connect(sock)
sent, res = 0, "sent"
# per_msg sockets a message, the connections in turn; after the first
# message a connection is dropped, the rest may still be queued in it
msgs = [passed[i:i + per_msg] for i in range(0, n, per_msg)]
for k, m in enumerate(msgs):
    try:
        us[k % conns].sendmsg([P.hello_frame()], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                                                   array.array("i", [c.fileno() for c in m]))])
        sent += 1
    except OSError as e:
        res = errno.errorcode.get(e.errno, str(e.errno))
for c in passed:
    c.close()
print(json.dumps({"sendmsg": res, "sent": sent}), flush=True)
time.sleep(hold)
'''


def kernel_has_passrights():
    """Whether this kernel can refuse passed descriptors (Linux >= 6.16)."""
    with socket.socket(socket.AF_UNIX) as s:
        try:
            s.setsockopt(socket.SOL_SOCKET, 83, 0)  # SO_PASSRIGHTS
            return True
        except OSError:
            return False


def pass_while_probing(d, what, n, linger, conns, per_msg):
    """ATTACK_FDS (n sockets lingering `linger` s, over conns connections,
    per_msg a message) while another uid probes; checks that uid was
    answered. Returns (probe result, attacker's report)."""
    probe = start_probe(d, 6.0)
    time.sleep(0.5)
    attack, info = start_attack(d, ATTACK_FDS, n, linger, 10, conns, per_msg)
    try:
        r = probe_result(probe, f"{what} ({info})")
    finally:
        stop_attack(attack)
    check_answered(r)
    return r, info


@pytest.mark.parametrize("kernel", ["passrights", "recvmsg"])
def test_passed_descriptors_do_not_freeze_the_loop(daemons, kernel):
    """Three sockets lingering 4 s each froze the loop for 12 s when the daemon
    released them. Now the kernel refuses them (SO_PASSRIGHTS); where it
    cannot ("recvmsg": the path of kernels before 6.16, forced here), they
    are received and closed off the loop, and the connection dropped."""
    if kernel == "passrights" and not kernel_has_passrights():
        pytest.skip("the kernel has no SO_PASSRIGHTS (before 6.16): the recvmsg case covers it")
    d = start_daemon(daemons, keep_passrights=kernel == "recvmsg")
    r, info = pass_while_probing(d, "3 sockets lingering 4 s passed", 3, 4, 1, 1)
    if kernel == "passrights":
        assert info["sent"] == 0 and info["sendmsg"] == "EPERM", info
    else:
        assert info["sent"] >= 1, info
        st = status(d)
        assert int(st["refused_descriptors"]) >= 1, st
        assert st["passed_descriptors_refused_by"] == "daemon", st
        assert "passed descriptors: dropping its connection" in d.log()
    d.check_alive()
    # The closing thread was not held up either: it has nothing left at stop.
    t0 = time.monotonic()
    assert d.stop() == 0
    print(f"stopped in {time.monotonic() - t0:.3f} s")
    assert "still closing" not in d.log(), d.log()[-2000:]


def test_many_passed_descriptors_beyond_the_open_file_limit(daemons):
    """Older kernels' path: 8 connections pass 50 lingering sockets each at
    once to a daemon allowed 128 descriptors. A consuming read releases
    what does not fit, in the reading thread: the loop only peeks, so no
    release happens on it (the closing thread may wait; the loop does not)."""
    d = start_daemon(daemons, nofile=128, keep_passrights=True)
    r, info = pass_while_probing(d, "8 × 50 sockets lingering 2 s passed at once", 400, 2, 8, 50)
    assert info["sent"] >= 1, info
    assert int(status(d)["refused_descriptors"]) >= 1


# ==== one uid holding every connection slot ============================================

# Open up to n connections (HELLO answered on each), report how many were
# kept, then hold them: "silent" sends nothing more (a lookup every 30 s
# would beat the 60 s idle timeout), "busy" makes a lookup on every one
# every 0.3 s so none is ever idle.
ATTACK_SLOTS = r'''
import json, socket, sys, time
sys.path.insert(0, sys.argv[1])
import idcproto as P, nssload
sock, n, mode, hold = sys.argv[2], int(sys.argv[3]), sys.argv[4], float(sys.argv[5])
nssload.raise_nofile(n + 64)
held, refused = [], 0
for _ in range(n):
    try:
        held.append(P.Client(sock, timeout=2).s)
    except (OSError, RuntimeError):
        refused += 1
print(json.dumps({"held": len(held), "refused": refused}), flush=True)
end = time.monotonic() + hold
while time.monotonic() < end:
    if mode == "busy":
        for s in list(held):
            try:
                s.sendall(P.request_frame(P.GETPWNAM, "u001"))
                if not s.recv(4096):
                    raise OSError("closed")
            except OSError:
                held.remove(s)
    time.sleep(0.3)
'''


def timed_status(d):
    t0 = time.monotonic()
    st = status(d)
    return st, time.monotonic() - t0


@pytest.mark.parametrize("mode", ["silent", "busy"])
def test_one_uid_cannot_hold_every_connection(daemons, mode):
    """One uid asked for 1,100 connections (more than the daemon's 1,024)
    and held them, idle or busy: it gets its share (128) and no more, and
    another uid's lookups and root's status are answered meanwhile."""
    d = daemons.start(PASSWD, GROUP)
    attack, info = start_attack(d, ATTACK_SLOTS, 1100, mode, 8)
    try:
        probe = start_probe(d, 4.0)
        st, took = timed_status(d)
        r = probe_result(probe, f"one uid holding {info['held']} connections ({mode})")
    finally:
        stop_attack(attack)
    print(f"root's status answered in {took * 1000:.1f} ms; {info}; "
          f"refused_connections_uid_limit={st['refused_connections_uid_limit']}")
    check_answered(r)
    assert took < ANSWER_S
    assert info["held"] <= 128, info
    assert int(st["refused_connections_uid_limit"]) > 0, st
    d.check_alive()


def test_idle_connections_make_room_when_full(daemons):
    """With every slot but root's taken by one uid's silent connections, a
    newcomer of another uid gets in: the longest-idle connection is closed
    for it."""
    d = daemons.start(PASSWD, GROUP, idcache_conf="max_connections = 20\n"
                      "max_connections_per_uid = 20\nroot_reserved_connections = 2\n")
    attack, info = start_attack(d, ATTACK_SLOTS, 30, "silent", 8)
    try:
        assert info["held"] == 18, info
        time.sleep(1.5)  # they are now idle
        probe = start_probe(d, 3.0)
        r = probe_result(probe, "all 18 slots held by silent connections of one uid")
        st, took = timed_status(d)
    finally:
        stop_attack(attack)
    check_answered(r)
    assert int(st["shed_idle_connections"]) > 0, st
    assert int(st["connections_admin"]) == 1, st
    d.check_alive()


def test_admin_socket_has_its_own_budget(daemons):
    """nss.sock full of busy connections (none idle, so none can make
    room): newcomers there are refused, counted as full, while root's
    status on admin.sock is still answered."""
    d = start_daemon(daemons, idcache_conf="max_connections = 10\n"
                     "max_connections_per_uid = 10\nroot_reserved_connections = 0\n")
    attack, info = start_attack(d, ATTACK_SLOTS, 12, "busy", 4)
    try:
        assert info["held"] == 10, info
        with pytest.raises((ConnectionError, OSError)):
            P.Client(d.run_dir / "nss.sock", timeout=2).getpwnam("u001")
        st, took = timed_status(d)
    finally:
        stop_attack(attack)
    print(f"nss.sock full: root's status answered in {took * 1000:.1f} ms")
    assert took < ANSWER_S
    assert int(st["refused_connections_full"]) >= 1, st
    assert int(st["refused_connections_uid_limit"]) == 2, st


def test_limits_follow_a_reload(daemons):
    """A reload that lowers max_connections_per_uid applies to the next
    connections."""
    d = daemons.start(PASSWD, GROUP)
    text = d.conf.read_text()
    d.conf.write_text(text.replace("[idcache]\n", "[idcache]\nmax_connections_per_uid = 5\n", 1))
    c = P.Client(d.run_dir / "admin.sock", timeout=10)
    assert c.call(P.RELOAD)[0] == P.OK
    c.close()
    attack, info = start_attack(d, ATTACK_SLOTS, 20, "busy", 2)
    try:
        st = status(d)
    finally:
        stop_attack(attack)
    assert info["held"] == 5, info
    assert int(st["refused_connections_uid_limit"]) == 15, st


# ==== memory-cache descriptors left unread ==============================================

# n connections each asking for the maps (HELLO + MCMAP) and reading
# nothing, opened every `pace` seconds; then held.
ATTACK_MAPS = r'''
import json, socket, struct, sys, time
sys.path.insert(0, sys.argv[1])
import idcproto as P, nssload
sock, n, pace, hold = sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
nssload.raise_nofile(n + 64)
held = []
for _ in range(n):
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(sock)
        s.sendall(P.hello_frame() + P.frame(13, struct.pack("=I", 0)))
        held.append(s)
    except OSError:
        s.close()
    time.sleep(pace)
print(json.dumps({"held": len(held)}), flush=True)
time.sleep(hold)
'''

# Ask for the maps as the NSS module does, `tries` times: how many replies
# came with every map's descriptor, and the statuses of the others.
PROBE_MAPS = r'''
import array, json, socket, struct, sys, time
sys.path.insert(0, sys.argv[1])
import idcproto as P
sock, tries = sys.argv[2], int(sys.argv[3])
ok, other = 0, []
for _ in range(tries):
    s = None
    try:
        s = P.Client(sock, timeout=1.0).s
        s.sendall(P.frame(13, struct.pack("=I", 0)))
        data, anc, _, _ = s.recvmsg(4096, socket.CMSG_SPACE(16 * 4))
        fds = array.array("i")
        for lvl, typ, d in anc:
            if lvl == socket.SOL_SOCKET and typ == socket.SCM_RIGHTS:
                fds.frombytes(d[:len(d) - len(d) % 4])
        status = P.HDR.unpack_from(data)[2] if len(data) >= 16 else "closed"
        if status == P.OK and len(fds) == 3:
            ok += 1
        else:
            other.append(status)
        for fd in fds:
            socket.close(fd)
    except (OSError, RuntimeError) as e:
        other.append(repr(e))
    if s is not None:
        s.close()
print(json.dumps({"ok": ok, "other": other[:10]}))
'''


def probe_maps(d, tries=20):
    load = copy_load_modules(d)
    res = d.ns.run([nsenv.sys_python(), "-c", PROBE_MAPS, load, d.run_dir / "nss.sock", tries],
                   sources="files", as_uid=PROBE_UID, timeout=60)
    assert res.rc == 0, res
    return json.loads(res.out)


def test_unread_map_replies_do_not_turn_the_maps_off(daemons):
    """150 connections of one uid asked for the maps and never read the
    replies: with 300 descriptors allowed, the kernel refused every later
    reply's descriptors (ETOOMANYREFS), for every uid. Now that uid gets
    at most max_unread_maps_per_uid (16) such replies; everyone else still
    gets the maps."""
    d = start_daemon(daemons, nofile=300)
    attack, info = start_attack(d, ATTACK_MAPS, 150, 0, 30)
    try:
        time.sleep(0.5)
        probe = start_probe(d, 2.0)
        maps = probe_maps(d)
        r = probe_result(probe, f"{info['held']} unread map replies of one uid")
        st = status(d)
    finally:
        stop_attack(attack)
    print(f"another uid asked for the maps 20 times: {maps}; "
          f"mcmap_refused_unread={st.get('mcmap_refused_unread')}")
    check_answered(r)
    assert maps["ok"] == 20, maps
    assert int(st["mcmap_refused_unread"]) > 0, st
    assert "unread memory-cache replies (max_unread_maps_per_uid)" in d.log()
    d.check_alive()


def test_unread_map_replies_stay_counted_after_close(daemons):
    """Connections closed by the daemon (here: shed when the uid's share is
    full) keep their unread descriptors in flight: they still count, and
    the socket is closed once the client closes its end."""
    d = start_daemon(daemons, nofile=300,
                     idcache_conf="max_connections_per_uid = 4\nmax_unread_maps_per_uid = 3\n")
    # paced so that earlier connections are idle and shed for later ones
    attack, info = start_attack(d, ATTACK_MAPS, 8, 1.2, 30)
    try:
        st = status(d)
        maps = probe_maps(d, 5)
    finally:
        stop_attack(attack)
    print(f"{info}: {st['shed_idle_connections']} shed, "
          f"mcmap_refused_unread={st['mcmap_refused_unread']}, maps for others {maps}")
    assert int(st["shed_idle_connections"]) >= 3, st
    assert int(st["mcmap_refused_unread"]) >= 4, st
    assert int(st["mcmap_unread"]) == 3, st
    assert maps["ok"] == 5, maps
    # The client gone, the kept sockets are closed at the next sweep (5 s).
    left, _ = nsenv.wait_for(lambda: status(d)["mcmap_unread"] == "0", timeout=8, interval=0.5)
    assert left, status(d)
    d.check_alive()


@pytest.mark.skipif(nsenv.VALGRIND is None, reason="valgrind not installed")
def test_attacks_under_valgrind(daemons):
    """The closing thread (descriptors passed on the older kernels' path)
    and the sockets kept for unread map replies, under valgrind: no
    invalid access, nothing leaked at stop."""
    d = daemons.start(PASSWD, GROUP, idcache_conf="max_connections_per_uid = 2\n", start=False)
    d.wrap, vglog = nsenv.valgrind_wrap(d.ns, d.base)
    d.env = {"IDCACHED_KEEP_PASSRIGHTS": "1"}
    d.start(timeout=120)
    fds, info = start_attack(d, ATTACK_FDS, 2, 4, 30, 1, 1)
    maps, _ = start_attack(d, ATTACK_MAPS, 4, 1.2, 30)  # two shed: their sockets kept
    try:
        assert info["sent"] >= 1, info
        st = status(d)
        assert int(st["refused_descriptors"]) >= 1, st
        assert int(st["mcmap_unread"]) >= 3, st
    finally:
        stop_attack(fds)
    nsenv.stop_checked_by_valgrind(d, vglog)
    stop_attack(maps)
