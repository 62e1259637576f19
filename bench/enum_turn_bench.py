#!/usr/bin/env python3
"""enum_turn_bench.py BUILD_DIR [BUILD_DIR...] [--users N] [--runs R]

How long one client's `getent passwd` holds the others: idcached (one per
build directory given, all started at once) serves a files domain of N
generated users (default 200,000) and a one-user second domain; each run
commits to the second domain (so the enumeration snapshot is stale),
then lists the passwd map through the socket as the NSS module does
(SETPWENT, GETPWENT batches) while a second connection calls getpwnam
back to back. The builds take turns, run after run. Printed per build:
the medians (min-max) of the probe's longest wait during the listing and
of the listing's time, and, when the build prints its loop turns over
0.5 ms on stderr as "TURN <monotonic s> <ns>" (an instrumented build, not
the shipped code), the longest turn during the listing.

Needs root (a mount namespace, as the integration tests); uses tests/integration's daemon harness and
tests/load/idcproto.py. Quote the load (/proc/loadavg) with the figures.
"""
import argparse
import os
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "integration"))
sys.path.insert(0, str(ROOT / "tests" / "load"))
import idcproto as P  # noqa: E402
import nsenv  # noqa: E402


def passwd_text(n):
    return "".join(f"s{i:06d}:x:{100000 + i}:{100000 + i % 50}:Bench user {i}:"
                   f"/home/s{i:06d}:/bin/sh\n" for i in range(n))


class Bench:
    def __init__(self, build, users):
        self.base = nsenv.make_private_dir("idc-turnbench-")
        self.tiny = self.base / "tiny"
        self.n = 0
        self.write_tiny()
        # the daemon's own /etc/passwd and group (its user) in a namespace,
        # as the integration tests run it (conftest.py DaemonPool)
        ns = nsenv.NsEnv(Path(build) / "src" / "nss", self.base / "run", self.base / "ns")
        sys_passwd, sys_group = nsenv.daemon_sys_files(self.base / "sys")
        wrap = ns.argv([], sources="files", passwd=sys_passwd, group=sys_group)
        self.d = nsenv.Daemon(Path(build) / "src" / "daemon" / "idcached", self.base / "d",
                              passwd_text(users), "bg:x:100000:\n", domain_conf=(
                                  f"\n[domain/tiny]\nid_provider = files\n"
                                  f"passwd_files = {self.tiny}\n"), wrap=wrap)
        self.d.start(300)
        self.sock = self.d.run_dir / "nss.sock"
        self.build = build
        self.probe_max, self.list_s, self.turn_max = [], [], []

    def write_tiny(self):
        nsenv.write_atomic(self.tiny, "".join(f"t{i}:x:{900000 + i}:900000::/:/bin/sh\n"
                                              for i in range(self.n + 1)))

    def commit(self):
        self.n += 1
        self.write_tiny()
        c = P.Client(self.sock)
        ok, _ = nsenv.wait_for(lambda: isinstance(c.getpwnam(f"t{self.n}"), tuple), timeout=30)
        c.close()
        assert ok, "commit not served"

    def run(self):
        self.commit()
        stop, waits = threading.Event(), []
        probe = P.Client(self.sock, timeout=60)

        def probing():
            i = 0
            while not stop.is_set():
                t = time.monotonic()
                assert isinstance(probe.getpwnam(f"s{i % 1000:06d}"), tuple)
                waits.append(time.monotonic() - t)
                i += 1

        th = threading.Thread(target=probing)
        th.start()
        c = P.Client(self.sock, timeout=120)
        t0 = time.monotonic()
        n = len(c.enumerate(True))
        t1 = time.monotonic()
        stop.set()
        th.join()
        c.close()
        probe.close()
        assert n == len(range(USERS)) + self.n + 1, n
        self.probe_max.append(max(waits) * 1000)
        self.list_s.append(t1 - t0)
        turns = [int(ln.split()[2]) for ln in self.d.log().splitlines()
                 if ln.startswith("TURN ") and t0 <= float(ln.split()[1]) <= t1]
        if turns or "TURN " in self.d.log():
            self.turn_max.append(max(turns, default=0) / 1e6)

    def close(self):
        self.d.stop(60)
        nsenv.remove_tree(self.base)


def med(v, unit):
    if not v:
        return "-"
    return f"{statistics.median(v):.1f} {unit} ({min(v):.1f}-{max(v):.1f})"


def main():
    global USERS
    ap = argparse.ArgumentParser()
    ap.add_argument("builds", nargs="+")
    ap.add_argument("--users", type=int, default=200000)
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    USERS = a.users
    print("load at start:", open("/proc/loadavg").read().strip())
    benches = [Bench(b, a.users) for b in a.builds]
    try:
        for _ in range(a.runs):
            for b in benches:
                b.run()
        print("load at end:", open("/proc/loadavg").read().strip())
        for b in benches:
            print(f"{b.build}: {a.users} users, {a.runs} runs: probe's longest wait "
                  f"{med(b.probe_max, 'ms')}; listing {med(b.list_s, 's')}; "
                  f"longest loop turn {med(b.turn_max, 'ms')}")
    finally:
        for b in benches:
            b.close()


USERS = 0
if __name__ == "__main__":
    os.umask(0o022)
    main()
