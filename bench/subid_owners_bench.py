#!/usr/bin/env python3
"""subid_owners_bench.py BUILD_DIR [BUILD_DIR...] [--users N] [--runs R]

What SUBID_OWNERS costs the event loop with a big cached directory: a
private slapd (slapadd) holds N users (default 100,000), each with a
subordinate uid and gid range on its entry (tests/ldap/subid.schema);
idcached (one per build directory given, all on the same slapd) has one
ldap domain reading them, with `enumerate = true`, so every user is
cached before the runs start. Each run, the builds taking turns:
  - steady: 20 SUBID_OWNERS requests with no commit between them;
  - after a commit: 10 times, one user expired and looked up again (the
    daemon fetches it and commits: any uid may cause this), then one
    SUBID_OWNERS request.
Printed per build: the medians (min-max) of the requests' round trips
over all runs, and, when the build's `idcache status` has them, the
served set's full builds and their time (subid.served_built,
subid.served_build_ms) and its updates by a change.

Needs root (a mount namespace, as the integration tests); uses
tests/integration's daemon and slapd harness and tests/load/idcproto.py.
Quote the load (/proc/loadavg) with the figures.
"""
import argparse
import os
import statistics
import struct
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "integration"))
sys.path.insert(0, str(ROOT / "tests" / "load"))
import idcproto as P  # noqa: E402
import nsenv  # noqa: E402
from test_e2e_ldap import BASE, LDAP_DIR, Slapd  # noqa: E402

FIRST_UID, RANGE_BASE, RANGE_SIZE = 20000, 300000000, 1000


def ldif(n):
    out = [f"dn: {BASE}\nobjectClass: dcObject\nobjectClass: organization\no: Example\n"
           f"dc: example\n\ndn: ou=people,{BASE}\nobjectClass: organizationalUnit\n"
           "ou: people\n\n"]
    for i in range(n):
        uid, start = FIRST_UID + i, RANGE_BASE + i * RANGE_SIZE
        out.append(f"dn: uid=u{i:07d},ou=people,{BASE}\nobjectClass: account\n"
                   f"objectClass: posixAccount\nobjectClass: testSubordinateIds\n"
                   f"uid: u{i:07d}\ncn: u{i:07d}\nuidNumber: {uid}\ngidNumber: {uid}\n"
                   f"homeDirectory: /home/u{i:07d}\nloginShell: /bin/sh\n"
                   f"testSubUidNumber: {start}\ntestSubUidCount: {RANGE_SIZE}\n"
                   f"testSubGidNumber: {start}\ntestSubGidCount: {RANGE_SIZE}\n\n")
    return "".join(out)


def status(d):
    c = P.Client(d.run_dir / "admin.sock", timeout=60)
    st, payload = c.call(P.STATUS)
    c.close()
    text = payload[4:].split(b"\0", 1)[0].decode()
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def owners(c, kind, i):
    _, st, p = c.call_raw(P.frame(P.SUBID_OWNERS, struct.pack("=II", kind, i)))
    assert st == P.OK, st
    n = struct.unpack_from("=I", p)[0]
    return list(struct.unpack_from(f"={n}I", p, 4))


class Bench:
    def __init__(self, build, base, uri, users):
        self.build, self.users = Path(build), users
        self.base = base
        ns = nsenv.NsEnv(self.build / "src" / "nss", base / "run", base / "ns")
        sys_passwd, sys_group = nsenv.daemon_sys_files(base / "sys")
        wrap = ns.argv([], sources="files", passwd=sys_passwd, group=sys_group)
        conf = (f"\n[domain/dir]\nid_provider = ldap\nldap_uri = {uri}\n"
                f"ldap_search_base = {BASE}\nmin_id = 1000\nmax_id = 200000000\n"
                "enumerate = true\n"
                "ldap_user_subuid_number = testSubUidNumber\n"
                "ldap_user_subuid_count = testSubUidCount\n"
                "ldap_user_subgid_number = testSubGidNumber\n"
                "ldap_user_subgid_count = testSubGidCount\n")
        self.d = nsenv.Daemon(self.build / "src" / "daemon" / "idcached", base / "d",
                              "floc:x:5000:5000::/:/bin/sh\n", "floc:x:5000:\n",
                              idcache_conf="domains = local, dir\n", domain_conf=conf,
                              wrap=wrap)
        self.d.start(60)
        self.sock = self.d.run_dir / "nss.sock"
        self.steady, self.after = [], []
        self.k = 0

    def wait_cached(self):
        c = P.Client(self.sock, timeout=600)
        ok, _ = nsenv.wait_for(lambda: len(c.enumerate(True)) >= self.users + 1,
                               timeout=1800, interval=5)
        c.close()
        assert ok, self.d.log()[-3000:]

    def commit(self, c):
        self.k = (self.k + 7919) % self.users
        name = f"u{self.k:07d}"
        subprocess.run([str(self.build / "src" / "cli" / "idcache"), "expire", "--run-dir",
                        str(self.d.run_dir), "--user", name], check=True,
                       capture_output=True, timeout=60)
        assert isinstance(c.getpwnam(name), tuple)

    def run(self):
        c = P.Client(self.sock, timeout=120)
        probe = RANGE_BASE + (self.users // 2) * RANGE_SIZE + 5
        want = [FIRST_UID + self.users // 2]
        assert owners(c, 1, probe) == want  # built (if it was not) before timing
        for _ in range(20):
            t = time.monotonic()
            assert owners(c, 1, probe) == want
            self.steady.append((time.monotonic() - t) * 1000)
        for _ in range(10):
            self.commit(c)
            t = time.monotonic()
            assert owners(c, 1, probe) == want
            self.after.append((time.monotonic() - t) * 1000)
        c.close()

    def close(self):
        self.d.stop(60)


def med(v):
    return f"{statistics.median(v):.2f} ms ({min(v):.2f}-{max(v):.2f})"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("builds", nargs="+")
    ap.add_argument("--users", type=int, default=100000)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    base = nsenv.make_private_dir("idc-subidbench-")
    (base / "dir.ldif").write_text(ldif(a.users))
    os.environ["SLAPD_SCHEMAS"] = str(LDAP_DIR / "subid.schema")
    s = Slapd(base, "s", ldif=base / "dir.ldif")
    s.start()
    benches = []
    try:
        for k, b in enumerate(a.builds):
            (base / f"b{k}").mkdir()
            benches.append(Bench(b, base / f"b{k}", s.uri, a.users))
        for b in benches:
            t = time.monotonic()
            b.wait_cached()
            print(f"{b.build}: {a.users} users cached in {time.monotonic() - t:.0f} s",
                  flush=True)
        for r in range(a.runs):
            for b in benches:
                b.run()
        print(f"load {open('/proc/loadavg').read().strip()}")
        for b in benches:
            st = status(b.d)
            extra = ", ".join(f"{k}={st[k]}" for k in ("subid.served_built",
                                                       "subid.served_build_ms",
                                                       "subid.served_updates") if k in st)
            print(f"{b.build}: steady {med(b.steady)}; after a commit {med(b.after)}"
                  f"{'; ' + extra if extra else ''}")
    finally:
        for b in benches:
            b.close()
        s.stop()
        nsenv.remove_tree(base)


if __name__ == "__main__":
    main()
