"""A daemon killed with SIGKILL and started again at once: processes that
were running keep mapping the dead daemon's maps, which nothing marks as
withdrawn. They must take the new daemon's maps within 2 s (its heartbeat
stops, mc/layout.h), and a hit must still make no system call of ours.
"""
import json
import time

import pytest

import nsenv

pytestmark = pytest.mark.usefixtures("as_root")

WATCH = r'''
import json, os, pwd, sys, time
stop, ready = sys.argv[1], sys.argv[2]
seen, last, t0 = [], None, time.time()
while not os.path.exists(stop) and time.time() - t0 < 60:
    try:
        g = pwd.getpwnam("u").pw_gecos
    except KeyError:
        g = None
    if g != last:
        seen.append([time.time(), g])
        last = g
        if len(seen) == 1:
            open(ready, "w").close()
    time.sleep(0.005)
print(json.dumps(seen))
'''

# Lookups between two marker calls, traced: the hits must add no system
# call (glibc's own per-call checks are counted with none of ours).
HITS = r'''
import os, pwd, sys
for _ in range(50):
    pwd.getpwnam("u")          # warm: the maps are mapped
os.getppid()
for _ in range(int(sys.argv[1])):
    pwd.getpwnam("u")
os.getppid()
'''


def test_restarted_daemon_takes_over_running_clients(daemons):
    d = daemons.start("u:x:2500:100:old:/:/bin/sh\n", "g:x:100:u\n")
    stop, ready = d.base / "watch.stop", d.base / "watch.ready"
    p = d.ns.popen([nsenv.sys_python(), "-c", WATCH, stop, ready])
    ok, _ = nsenv.wait_for(ready.exists, timeout=30)
    assert ok, "the watcher did not start"
    time.sleep(1.0)  # its lookups are map hits by now
    d.kill()
    nsenv.write_atomic(d.passwd, "u:x:2500:100:new:/:/bin/sh\n")
    d.start()
    up = time.time()
    ok, _ = nsenv.wait_for(lambda: False, timeout=5)
    stop.touch()
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err.decode()[-2000:]
    seen = json.loads(out)
    new = [t for t, g in seen if g == "new"]
    assert new, f"the running process never saw the new daemon's data: {seen}"
    print(f"running process took over {new[0] - up:.3f}s after the restart was ready")
    assert new[0] - up <= 2.0, seen
    assert seen[-1][1] == "new", seen


def test_map_hit_makes_no_system_call(daemons):
    d = daemons.start("u:x:2500:100:old:/:/bin/sh\n", "g:x:100:u\n")
    trace = d.base / "trace"

    def calls(n):
        d.ns.run(["strace", "-f", "-qq", "-o", trace, nsenv.sys_python(), "-c", HITS, n])
        lines = trace.read_text().splitlines()
        marks = [i for i, line in enumerate(lines) if "getppid(" in line]
        assert len(marks) == 2, lines[-40:]
        return ours(lines[marks[0] + 1:marks[1]])

    few, many = calls(10), calls(1010)
    print(f"system calls besides glibc's own: {len(few)} for 10 hits, {len(many)} for 1010")
    assert len(many) - len(few) <= 2, many[:40]


def ours(lines):
    """The calls left once glibc's own are taken out: its check of
    nsswitch.conf (a stat per call) and its nscd probe (socket, connect,
    close, every hundred calls)."""
    keep, skip = [], set()
    for i, line in enumerate(lines):
        if "nscd/socket" in line:
            skip |= {i - 1, i, i + 1}
    for i, line in enumerate(lines):
        if i in skip or "/etc/nsswitch.conf" in line:
            continue
        keep.append(line)
    return keep
