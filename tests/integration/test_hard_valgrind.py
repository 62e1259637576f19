"""One short integration run of idcached under valgrind: start,
lookups of every kind (including enumeration and initgroups, over the
socket and through the NSS module), admin status/expire, a files change,
a reload by SIGHUP and by the admin command, SIGTERM. No invalid reads or
writes, no definite leaks: valgrind's exit status 99 says otherwise, and
its log is attached to the failure.
"""
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import nsenv

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "load"))
import idcproto as P  # noqa: E402

pytestmark = pytest.mark.usefixtures("as_root")

VALGRIND = nsenv.VALGRIND


def passwd(letter):
    return "".join(f"v{i:03d}:x:{70000 + i}:{70000 + i % 5}:{letter} {i}:/home/v{i}:/bin/sh\n"
                   for i in range(300))


def group():
    return "".join(f"vg{k}:x:{70000 + k}:" + ",".join(f"v{i:03d}" for i in range(k, 300, 5)) + "\n"
                   for k in range(5)) + "vnest:x:70010:v001,ghost\n"


def cli(idcache, d, *args):
    p = subprocess.run([str(idcache)] + [args[0], "--run-dir", str(d.run_dir)] + list(args[1:]),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, (args, p.stdout, p.stderr)
    return p.stdout


def wait_log(d, needle, since, timeout):
    got, _ = nsenv.wait_for(lambda: needle in d.log()[since:], timeout=timeout, interval=0.1)
    return got


@pytest.mark.skipif(VALGRIND is None, reason="valgrind not installed")
def test_daemon_under_valgrind(idcached_bin, nss_module_dir, idcache, as_root):
    base = nsenv.make_private_dir("idc-hard-vg-")
    ns = nsenv.NsEnv(nss_module_dir, base / "run", base / "ns")
    wrap, vglog = nsenv.valgrind_wrap(ns, base)
    d = nsenv.Daemon(idcached_bin, base, passwd("A"), group(), wrap=wrap)
    ok = False
    try:
        d.start(timeout=120)
        c = P.Client(d.run_dir / "nss.sock", timeout=60)
        assert c.getpwnam("v007")[4] == "A 7"
        assert c.getpwnam("nosuch") == P.NOTFOUND
        assert c.call(P.GETPWUID, 70008)[0] == P.OK
        assert c.call(P.GETGRNAM, "vg1")[0] == P.OK
        assert c.call(P.GETGRGID, 70010)[0] == P.OK
        st, p = c.call(P.INITGROUPS, "v001")
        assert st == P.OK and {70001, 70010} <= set(P.decode_gids(p))
        assert len(c.enumerate(users=True)) == 300
        assert len(c.enumerate(users=False)) == 6
        c.call(P.SETPWENT)  # left open: freed when the connection goes
        c.close()
        r = ns.run_many([["getent", "passwd", "v010"], ["getent", "group", "vg2"],
                         ["id", "v003"], ["getent", "passwd"]], timeout=120)
        assert all(x.rc == 0 for x in r), r
        cli(idcache, d, "status")
        cli(idcache, d, "user", "v001")
        cli(idcache, d, "expire", "--all")
        cli(idcache, d, "expire", "--user", "v002")
        since = len(d.log())
        nsenv.write_atomic(d.passwd, passwd("B"))
        assert wait_log(d, "domain local: users", since, 60), d.log()[-2000:]
        since = len(d.log())
        d.signal(signal.SIGHUP)
        assert wait_log(d, "SIGHUP", since, 60), d.log()[-2000:]
        cli(idcache, d, "reload")
        c = P.Client(d.run_dir / "nss.sock", timeout=60)
        assert c.getpwnam("v007")[4] == "B 7"
        c.close()
        report = nsenv.stop_checked_by_valgrind(d, vglog)
        summary = [x.split("== ", 1)[-1] for x in report.splitlines()
                   if "Command:" in x or "ERROR SUMMARY" in x or "lost:" in x or "heap blocks were freed" in x
                   or "in use at exit" in x]
        print("valgrind: " + "; ".join(summary))
        assert "definitely lost" not in report or "definitely lost: 0 bytes" in report, report
        ok = True
    finally:
        nsenv.end_checked_run(d, base, ok)
