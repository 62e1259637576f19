#!/usr/bin/env python3
# ldap_scale_probe.py OUT NAMES_FILE RATE: another client of idcached while
# it loads a large directory. Until SIGTERM, about RATE times a second it
# calls getpwnam (glibc, so whatever nsswitch.conf says: idcache) on a name
# drawn at random from NAMES_FILE (one a line) and appends one line per call
# to OUT: "t_ms latency_us first found why", t_ms since the probe started,
# first 1 when this name was not asked before (a cache miss the daemon may
# have to send to the directory), found 1 when the user was returned, why
# "-" then, else "notfound" (getpwnam_r returned 0 and no entry) or the
# errno it returned (EAGAIN: the module said TRYAGAIN; a timeout or an
# unreachable daemon is UNAVAIL, which glibc may report as either).
# IDCACHE_MEMCACHE=no in the environment makes every call ask the daemon's
# socket (the shared-memory cache skipped): the daemon loop's latency.
# With IDC_PROBE_LOOP=PID (idcached's pid: its event loop runs on the main
# thread) each line also has, from the kernel's schedstat over the call:
# "probe_wait_us loop_wait_us loop_cpu_us", the time this probe was
# runnable but not running, the time the loop thread was, and the loop
# thread's CPU time (answering the call and whatever it did before it).
import ctypes, errno, os, random, signal, sys, threading, time

out, names_file, rate = sys.argv[1], sys.argv[2], float(sys.argv[3])
names = [l.strip() for l in open(names_file) if l.strip()]
rnd = random.Random(os.getpid())
stop = False


def on_term(*_):
    global stop
    stop = True


signal.signal(signal.SIGTERM, on_term)
libc = ctypes.CDLL(None, use_errno=True)


class Passwd(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("passwd", ctypes.c_char_p), ("uid", ctypes.c_uint),
                ("gid", ctypes.c_uint), ("gecos", ctypes.c_char_p), ("dir", ctypes.c_char_p),
                ("shell", ctypes.c_char_p)]


def getpwnam(name):
    """'-' when found, else why not (see the head of this file)."""
    ent, buf, res = Passwd(), ctypes.create_string_buffer(16384), ctypes.POINTER(Passwd)()
    rc = libc.getpwnam_r(name.encode(), ctypes.byref(ent), buf, 16384, ctypes.byref(res))
    if rc == 0:
        return "-" if res else "notfound"
    return errno.errorcode.get(rc, str(rc))


def schedstat(path):
    """(cpu ns, run-queue wait ns) of a task, or (0, 0)."""
    try:
        with open(path) as f:
            v = f.read().split()
        return int(v[0]), int(v[1])
    except (OSError, ValueError, IndexError):
        return 0, 0


loop = os.environ.get("IDC_PROBE_LOOP")
loop_path = f"/proc/{loop}/task/{loop}/schedstat" if loop else None
self_path = f"/proc/self/task/{threading.get_native_id()}/schedstat"
asked = set()
t0 = time.monotonic_ns()
period = 1.0 / rate
with open(out, "w", buffering=1) as f:
    while not stop:
        name = rnd.choice(names)
        first = 0 if name in asked else 1
        asked.add(name)
        if loop_path:
            p0, l0 = schedstat(self_path), schedstat(loop_path)
        a = time.monotonic_ns()
        why = getpwnam(name)
        b = time.monotonic_ns()
        extra = ""
        if loop_path:
            p1, l1 = schedstat(self_path), schedstat(loop_path)
            extra = f" {(p1[1] - p0[1]) // 1000} {(l1[1] - l0[1]) // 1000} {(l1[0] - l0[0]) // 1000}"
        f.write(f"{(a - t0) // 1000000} {(b - a) // 1000} {first} {int(why == '-')} {why}{extra}\n")
        left = period - (b - a) / 1e9
        if left > 0:
            time.sleep(left)
