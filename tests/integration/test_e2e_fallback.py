"""A dead or stuck daemon leaves clients working through the next source.

With the daemon gone the module must return UNAVAIL at once, so that
`passwd: idcache files` resolves from files and `passwd: idcache` alone
reports "not found" (getent exit status 2), and nothing hangs.
"""
import signal
import subprocess
import time

import pytest

import nsenv

pytestmark = pytest.mark.usefixtures("as_root")

# Users only the daemon knows, and users only the bind-mounted /etc/passwd
# knows, so each answer shows which source gave it.
DAEMON_PASSWD = "cacheonly:x:7000:7000:from idcache:/home/c:/bin/sh\nboth:x:7001:7001:idc:/:\n"
DAEMON_GROUP = "cachegrp:x:7100:cacheonly\n"
FILES_PASSWD = "root:x:0:0:root:/root:/bin/bash\nfilesonly:x:7200:7200:from files:/:\n" \
               "both:x:7001:7001:files:/:\n"
FILES_GROUP = "root:x:0:\nfilesgrp:x:7300:filesonly\n"


@pytest.fixture
def setup(daemons):
    d = daemons.start(DAEMON_PASSWD, DAEMON_GROUP)
    oracle = d.base / "oracle"
    oracle.mkdir()
    (oracle / "passwd").write_text(FILES_PASSWD)
    (oracle / "group").write_text(FILES_GROUP)
    return d, oracle / "passwd", oracle / "group"


def lookups(d, passwd, group, sources, **kw):
    argvs = [["getent", "passwd", "cacheonly"], ["getent", "passwd", "filesonly"],
             ["getent", "passwd", "both"], ["getent", "group", "cachegrp"],
             ["getent", "group", "filesgrp"], ["id", "filesonly"]]
    t0 = time.monotonic()
    r = d.ns.run_many(argvs, sources=sources, passwd=passwd, group=group, timeout=60, **kw)
    return r, time.monotonic() - t0


def test_live_daemon_answers_first(setup):
    d, passwd, group = setup
    r, _ = lookups(d, passwd, group, "idcache files")
    assert r[0].rc == 0 and "from idcache" in r[0].out, r[0]   # proves the module is used
    # NOTFOUND from idcache: glibc goes on to files (no [NOTFOUND=return]).
    assert r[1].rc == 0 and "from files" in r[1].out, r[1]
    assert r[2].out == "both:x:7001:7001:idc:/:\n", r[2]       # idcache first
    assert r[3].rc == 0 and r[4].rc == 0


def test_killed_daemon_falls_through_to_files(setup):
    d, passwd, group = setup
    d.kill()
    r, secs = lookups(d, passwd, group, "idcache files")
    print(f"6 lookups with the daemon dead: {secs:.3f}s")
    assert r[0].rc == 2, r[0]
    assert r[1].out == "filesonly:x:7200:7200:from files:/:\n", r[1]
    assert r[2].out == "both:x:7001:7001:files:/:\n", r[2]
    assert r[3].rc == 2 and r[4].rc == 0, (r[3], r[4])
    assert r[5].rc == 0 and "filesgrp" in r[5].out, r[5]
    assert secs < 10, f"lookups with a dead daemon took {secs:.1f}s"


def test_killed_daemon_idcache_only_is_not_found(setup):
    d, passwd, group = setup
    d.kill()
    t0 = time.monotonic()
    r = d.ns.run_many([["getent", "passwd", "cacheonly"], ["getent", "passwd", "7000"],
                       ["getent", "group", "cachegrp"], ["getent", "passwd"],
                       ["id", "cacheonly"]], sources="idcache", timeout=60)
    secs = time.monotonic() - t0
    print(f"idcache-only lookups with the daemon dead: {secs:.3f}s")
    assert [x.rc for x in r[:3]] == [2, 2, 2], r
    assert r[3].out == "", r[3]          # enumeration: nothing, no hang
    assert r[4].rc == 1, r[4]            # id: no such user
    assert secs < 10


def test_socket_removed(setup):
    """Daemon dead and its run_dir empty: ENOENT is UNAVAIL too."""
    d, passwd, group = setup
    d.kill()
    for p in d.run_dir.glob("*.sock"):
        p.unlink()
    r, secs = lookups(d, passwd, group, "idcache files")
    assert r[1].rc == 0 and r[0].rc == 2, r[:2]
    assert secs < 10


STOPPED_LOOKUPS = r'''
import json, pwd, time
out = []
for _ in range(4):
    t0 = time.monotonic()
    try:
        r = pwd.getpwnam("filesonly").pw_gecos
    except KeyError:
        r = "KeyError"
    out.append([r, time.monotonic() - t0])
print(json.dumps(out))
'''


def test_stopped_daemon_times_out(setup):
    """A daemon that accepts nothing (SIGSTOP) must not hang clients: the
    module's timeout (5 s) ends the wait and files answers. The process
    then leaves the daemon alone for a while: its next lookups go to files
    at once instead of waiting out the timeout again (and the first one
    waits once, not once for the memory cache's MCMAP and again for the
    lookup)."""
    d, passwd, group = setup
    d.signal(signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        got = d.ns.run_py(STOPPED_LOOKUPS, sources="idcache files", passwd=passwd,
                          group=group, timeout=60)
        secs = time.monotonic() - t0
    finally:
        d.signal(signal.SIGCONT)
    print(f"4 lookups with a stopped daemon: {secs:.3f}s; each: {got}")
    assert [g[0] for g in got] == ["from files"] * 4, got
    # A hang guard, not a budget: the process (whose start-up already
    # looks up its own uid) waits out one 5 s timeout; asking the daemon
    # again on every lookup would take 5 x 5 s or more.
    assert secs < 12, (secs, got)


def test_restart_after_kill(setup):
    """kill -9, then a new daemon on the same state and run dir serves."""
    d, passwd, group = setup
    d.kill()
    d.start()
    r, _ = lookups(d, passwd, group, "idcache")
    assert r[0].out == "cacheonly:x:7000:7000:from idcache:/home/c:/bin/sh\n", r[0]
    assert r[3].rc == 0, r[3]


ENUM_SLOWLY = r'''
import ctypes, sys, time
libc = ctypes.CDLL(None)
libc.getpwent.restype = ctypes.c_void_p
libc.setpwent()
n = 0
while libc.getpwent():
    n += 1
    if n == 10:
        open(sys.argv[1], "w").close()
        time.sleep(1.0)
libc.endpwent()
print(n)
'''


def test_daemon_killed_during_enumeration(daemons):
    """getpwent in progress when the daemon dies: the client ends (with
    what it had), it does not hang."""
    text = "".join(f"e{i}:x:{30000 + i}:1::/:\n" for i in range(20000))
    d = daemons.start(text, "g:x:1:\n")
    mark = d.base / "enum.started"
    proc = d.ns.popen([nsenv.sys_python(), "-c", ENUM_SLOWLY, mark])
    ok, _ = nsenv.wait_for(lambda: mark.exists() or proc.poll() is not None, 20)
    assert mark.exists(), proc.communicate(timeout=5)
    d.kill()
    t0 = time.monotonic()
    out, err = proc.communicate(timeout=30)
    secs = time.monotonic() - t0
    print(f"enumeration ended {secs:.2f}s after the kill with {out.decode().strip()} entries")
    assert proc.returncode == 0, err.decode()[-2000:]
    assert 10 <= int(out) <= 20000
    assert secs < 12


def test_admin_cli_with_daemon_dead(idcache, setup):
    d, _, _ = setup
    d.kill()
    p = subprocess.run([str(idcache), "status", "--run-dir", str(d.run_dir)],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 1, p
    assert str(d.run_dir) in p.stderr or "running" in p.stderr.lower(), p.stderr
    assert len(p.stderr.strip().splitlines()) <= 3, p.stderr
