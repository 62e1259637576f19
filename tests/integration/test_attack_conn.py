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
import struct
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


# ==== descriptors passed to the daemon ====================================================

# TCP sockets whose close blocks for `linger` seconds: unsent data behind a
# zero window (the loopback peer never reads and has a small receive
# buffer) and SO_LINGER {1, linger}. They are passed to the daemon with
# SCM_RIGHTS and our copies closed, so the daemon holds the last reference.
ATTACK_FDS = r'''
import array, errno, json, socket, struct, sys, time
sys.path.insert(0, sys.argv[1])
import idcproto as P
sock, n, linger, hold = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
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
u = socket.socket(socket.AF_UNIX)
u.connect(sock)
try:
    # one message each: the first gets the connection dropped, the rest
    # are still queued in it when the daemon closes it
    for c in passed:
        u.sendmsg([P.hello_frame()], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                                       array.array("i", [c.fileno()]))])
    res = "sent"
except OSError as e:
    res = errno.errorcode.get(e.errno, str(e.errno))
for c in passed:
    c.close()
print(json.dumps({"sendmsg": res}), flush=True)
time.sleep(hold)
'''


@pytest.mark.parametrize("kernel", ["passrights", "recvmsg"])
def test_passed_descriptors_do_not_freeze_the_loop(daemons, kernel):
    """Three sockets lingering 4 s each froze the loop for 12 s when the daemon
    released them. Now the kernel refuses them (SO_PASSRIGHTS); where it
    cannot ("recvmsg": the path of kernels before 6.16, forced here), they
    are received and closed off the loop, and the connection dropped."""
    env = {"IDCACHED_KEEP_PASSRIGHTS": "1"} if kernel == "recvmsg" else {}
    d = daemons.start(PASSWD, GROUP, start=False)
    d.env = env
    d.start()
    probe = start_probe(d, 6.0)
    time.sleep(0.5)
    attack, info = start_attack(d, ATTACK_FDS, 3, 4, 10)
    try:
        r = probe_result(probe, f"3 sockets lingering 4 s passed ({kernel}: {info['sendmsg']})")
    finally:
        stop_attack(attack)
    check_answered(r)
    if kernel == "passrights":
        assert info["sendmsg"] == "EPERM", info
    else:
        assert info["sendmsg"] == "sent", info
        st = status(d)
        assert int(st["refused_descriptors"]) >= 1, st
        assert st["passed_descriptors_refused_by"] == "daemon", st
        assert "passed 1 descriptors: dropping its connection" in d.log()
    d.check_alive()
    # The closing thread was not held up either: it has nothing left at stop.
    t0 = time.monotonic()
    assert d.stop() == 0
    print(f"stopped in {time.monotonic() - t0:.3f} s")
    assert "still closing" not in d.log(), d.log()[-2000:]
