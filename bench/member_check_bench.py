#!/usr/bin/env python3
"""member_check_bench.py BUILD_DIR [BUILD_DIR...] [--members N] [--rounds R]

What the member rule (precedence.c, member_held) costs a getgrnam of a
large directory group: idcached serves a second directory's groups of N
memberUid names (default 20,000; none of them a user anywhere), once
behind a first directory (`domains = local, dir, dir2`: every member is
looked up in dir's cache) and once without it (`domains = local, dir2`,
the anchor), both daemons of each build running at once. Each round asks
every daemon for its five groups in turn through the socket (the daemon
keeps four large answers, so each is built again) and reads the build
time it counts (`big_groups.build_ms` over `big_groups.built` in `idcache
status`). Printed per build and configuration: the median (min-max) of
the rounds' mean build time in ms.

Needs root (a mount namespace, as the integration tests), Debian's slapd
and ldap-utils; uses tests/integration's harness and tests/load/idcproto.py.
Quote the load (/proc/loadavg) with the figures.
"""
import argparse
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "integration"))
sys.path.insert(0, str(ROOT / "tests" / "load"))
import idcproto as P  # noqa: E402
import nsenv  # noqa: E402
from test_e2e_ldap import LOCAL_GROUP, LOCAL_PASSWD, Slapd, ldap_domain  # noqa: E402
from test_e2e_precedence import DIRECTORY, _group  # noqa: E402

GROUPS = 5


def status(build, d):
    out = subprocess.run([str(Path(build) / "src" / "cli" / "idcache"), "status", "--run-dir",
                          str(d.run_dir)], capture_output=True, text=True, check=True,
                         timeout=60).stdout
    return dict(line.partition("=")[::2] for line in out.splitlines())


class Run:
    def __init__(self, build, dir1, dir2, earlier):
        self.build, self.earlier = build, earlier
        self.base = nsenv.make_private_dir("idc-memberbench-")
        ns = nsenv.NsEnv(Path(build) / "src" / "nss", self.base / "run", self.base / "ns")
        sys_passwd, sys_group = nsenv.daemon_sys_files(self.base / "sys")
        wrap = ns.argv([], sources="files", passwd=sys_passwd, group=sys_group)
        conf = ldap_domain(dir2.uri).replace("[domain/dir]", "[domain/dir2]")
        if earlier:
            conf = ldap_domain(dir1.uri) + conf
        self.d = nsenv.Daemon(Path(build) / "src" / "daemon" / "idcached", self.base / "d",
                              LOCAL_PASSWD, LOCAL_GROUP, idcache_conf=(
                                  "domains = local, dir, dir2\n" if earlier
                                  else "domains = local, dir2\n"),
                              domain_conf=conf, wrap=wrap)
        self.d.start(120)
        self.sock = self.d.run_dir / "nss.sock"
        self.ms = []
        self.ask()  # fetched from the directory: not a build from the cache

    def ask(self):
        c = P.Client(self.sock, timeout=120)
        for g in range(GROUPS):
            st, _ = c.call(P.GETGRNAM, f"big{g}")
            assert st == P.OK, st
        c.close()

    def round(self):
        before = status(self.build, self.d)
        self.ask()
        after = status(self.build, self.d)
        n = int(after["big_groups.built"]) - int(before["big_groups.built"])
        ms = int(after["big_groups.build_ms"]) - int(before["big_groups.build_ms"])
        if n:
            self.ms.append(ms / n)

    def stop(self):
        self.d.stop()
        nsenv.remove_tree(self.base)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("builds", nargs="+")
    ap.add_argument("--members", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=10)
    a = ap.parse_args()
    text = (DIRECTORY.split("dn: uid=root")[0]
            + "".join(_group(f"big{g}", 30500 + g, [f"m{i:07d}" for i in range(a.members)])
                      for g in range(GROUPS)))
    base = nsenv.make_private_dir("idc-memberbench-ldap-")
    (base / "dir2.ldif").write_text(text)
    dir1, dir2 = Slapd(base, "d1"), Slapd(base, "d2", ldif=base / "dir2.ldif")
    runs = []
    try:
        dir1.start()
        dir2.start()
        runs = [Run(b, dir1, dir2, e) for b in a.builds for e in (False, True)]
        for _ in range(a.rounds):
            for r in runs:  # taking turns, round after round
                r.round()
        print(f"load {Path('/proc/loadavg').read_text().split()[:3]}; "
              f"{GROUPS} groups of {a.members} members, {a.rounds} rounds")
        for r in runs:
            cfg = "dir, dir2 (checked)" if r.earlier else "dir2 alone (anchor)"
            print(f"{r.build}: {cfg}: build {statistics.median(r.ms):.1f} ms "
                  f"({min(r.ms):.1f}-{max(r.ms):.1f})")
    finally:
        for r in runs:
            r.stop()
        dir1.stop()
        dir2.stop()
        nsenv.remove_tree(base)


if __name__ == "__main__":
    main()
