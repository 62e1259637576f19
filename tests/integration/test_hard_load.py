"""Load: 500 concurrent connections doing mixed lookups over the
NSS socket, with and without misbehaving clients; memory and descriptors
stay bounded; past the connection cap a clear, logged refusal.

Latencies come from tests/load/nssload.py (one Python process driving
every socket, so they include its own scheduling). They are printed for
the report (run with -s) and asserted only against sane bounds.
"""
import os
import resource
import socket
import sys
import time
from pathlib import Path

import pytest

import nsenv

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "load"))
import idcproto as P  # noqa: E402
import nssload  # noqa: E402

pytestmark = pytest.mark.usefixtures("as_root")

N_USERS = 20000
N_GROUPS = 200
CLIENTS = 500
PER_CLIENT = 60
DAEMON_MAX_CONNS = 1024  # max_connections, default (idcache.conf(5)); root holds them all


def passwd_text():
    return "".join(f"l{i:05d}:x:{200000 + i}:{200000 + i % N_GROUPS}:Load {i}:/home/l{i}:/bin/sh\n"
                   for i in range(N_USERS))


def group_text():
    return "".join(f"lg{k:03d}:x:{200000 + k}:" +
                   ",".join(f"l{i:05d}" for i in range(k, N_USERS, N_GROUPS)) + "\n"
                   for k in range(N_GROUPS))


@pytest.fixture(scope="module")
def loaded(module_daemons):
    d = module_daemons.start(passwd_text(), group_text(), timeout=60)
    users, groups = nssload.keys_from_files(d.passwd, d.group)
    return d, users, groups


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def nfds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def settle(pid, base_fds, timeout=10.0):
    """Wait until the daemon's descriptors are back to base_fds (the
    connections we closed are gone). Returns the count."""
    got, _ = nsenv.wait_for(lambda: nfds(pid) <= base_fds, timeout=timeout)
    return nfds(pid)


def show(label, r):
    print(f"{label}: {r['requests']} requests in {r['elapsed_s']} s ({r['rps']}/s), "
          f"p50 {r['p50_ms']} ms, p99 {r['p99_ms']} ms, max {r['max_ms']} ms; bad: {r['bad']}")


def check(r):
    assert r["nwrong"] == 0, r["wrong"]
    assert r["unfinished_clients"] == 0, r
    assert r["good_closed_by_daemon"] == 0, r
    assert r["requests"] == CLIENTS * PER_CLIENT, r
    assert r["p99_ms"] < 1000, r  # a sane bound, not a budget


def test_500_clients_with_and_without_bad_ones(loaded):
    d, users, groups = loaded
    pid = d.proc.pid
    sock = d.run_dir / "nss.sock"
    fds_idle = nfds(pid)
    nssload.run(sock, users, groups, seed=9, clients=50, per_client=10)  # warm up
    settle(pid, fds_idle)
    rss0, fds0 = rss_kb(pid), nfds(pid)
    clean = nssload.run(sock, users, groups, seed=1, clients=CLIENTS, per_client=PER_CLIENT)
    show("500 good clients", clean)
    check(clean)
    rss1 = rss_kb(pid)
    noisy = nssload.run(sock, users, groups, seed=2, clients=CLIENTS, per_client=PER_CLIENT,
                        slow=25, noread=25)
    show("500 good + 25 byte-by-byte + 25 never-reading", noisy)
    check(noisy)
    assert noisy["bad"]["noread"]["bytes_sent"] > 0
    rss_peak = rss_kb(pid)
    again = nssload.run(sock, users, groups, seed=3, clients=CLIENTS, per_client=PER_CLIENT)
    show("500 good clients, after", again)
    check(again)
    fds2 = settle(pid, fds0)
    rss2 = rss_kb(pid)
    print(f"daemon RSS: {rss0} kB before, {rss1} kB after clean load, {rss_peak} kB after "
          f"bad clients, {rss2} kB at the end; descriptors {fds0} -> {fds2}")
    assert fds2 <= fds0, "descriptors of closed connections were not released"
    # Bounded: a few output queues of DAEMON_OUT_HIGH each, not a copy per request.
    assert rss2 < rss0 + 64 * 1024, f"RSS grew from {rss0} to {rss2} kB"
    d.check_alive()


def test_enumerating_clients_memory(loaded):
    """Each connection's SETPWENT/SETGRENT takes a snapshot of the whole map
    (src/daemon/responder.c, collect()); clients that never read hold them.
    Measured and printed; freed when they disconnect."""
    d, users, groups = loaded
    pid = d.proc.pid
    sock = d.run_dir / "nss.sock"
    fds0, rss0 = nfds(pid), rss_kb(pid)
    r = nssload.run(sock, users, groups, seed=4, clients=CLIENTS, per_client=PER_CLIENT,
                    enum=40)
    rss_peak = rss_kb(pid)
    show("500 good + 40 enumerating, never reading", r)
    check(r)
    settle(pid, fds0)
    time.sleep(0.2)
    rss1 = rss_kb(pid)
    print(f"RSS with 40 enumeration snapshots of {N_USERS} users: {rss0} -> {rss_peak} kB "
          f"(+{(rss_peak - rss0) // 40} kB per client), {rss1} kB after they left")
    assert rss1 < rss0 + 64 * 1024


def test_connection_cap_refusal_is_logged(loaded):
    d, users, groups = loaded
    pid = d.proc.pid
    sock = str(d.run_dir / "nss.sock")
    extra = 60
    nssload.raise_nofile(DAEMON_MAX_CONNS + extra + 256)
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft < DAEMON_MAX_CONNS + extra + 64:
        pytest.skip(f"RLIMIT_NOFILE {soft} too low to pass the daemon's cap")
    since = len(d.log())
    fds0 = nfds(pid)
    held = []
    try:
        for _ in range(DAEMON_MAX_CONNS + extra):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(sock)
            held.append(s)
        # Every connection did HELLO: the first DAEMON_MAX_CONNS get an answer,
        # the rest are closed unanswered (accepted and closed at once).
        gone = set()
        for i, s in enumerate(held):
            try:
                s.sendall(P.hello_frame())
            except (BrokenPipeError, ConnectionResetError):
                gone.add(i)  # already closed by the daemon
        answered = refused = 0
        for i, s in enumerate(held):
            s.settimeout(5)
            try:
                data = b"" if i in gone else s.recv(64)
            except ConnectionResetError:
                data = b""
            if data:
                answered += 1
            else:
                refused += 1
        print(f"{len(held)} connections: {answered} answered, {refused} refused; "
              f"daemon fds {fds0} -> {nfds(pid)}")
        assert answered == DAEMON_MAX_CONNS, (answered, refused)
        assert refused == extra
        logged = [x for x in d.log()[since:].splitlines() if "refusing new ones" in x]
        assert logged, d.log()[since:][-2000:]
        print("logged: " + logged[0])
    finally:
        for s in held:
            s.close()
    settle(pid, fds0)
    # Lookups work again once the crowd has gone.
    c = P.Client(sock)
    assert isinstance(c.getpwnam("l00042"), tuple)
    c.close()
    d.check_alive()
