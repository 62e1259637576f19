#!/usr/bin/env python3
# ldap_scale_probe.py OUT NAMES_FILE RATE: another client of idcached while
# it loads a large directory. Until SIGTERM, about RATE times a second it
# calls getpwnam (glibc, so whatever nsswitch.conf says: idcache) on a name
# drawn at random from NAMES_FILE (one a line) and appends one line per call
# to OUT: "t_ms latency_us first found", t_ms since the probe started,
# first 1 when this name was not asked before (a cache miss the daemon may
# have to send to the directory), found 1 when the user was returned.
# IDCACHE_MEMCACHE=no in the environment makes every call ask the daemon's
# socket (the shared-memory cache skipped): the daemon loop's latency.
import os, pwd, random, signal, sys, time

out, names_file, rate = sys.argv[1], sys.argv[2], float(sys.argv[3])
names = [l.strip() for l in open(names_file) if l.strip()]
rnd = random.Random(os.getpid())
stop = False


def on_term(*_):
    global stop
    stop = True


signal.signal(signal.SIGTERM, on_term)
asked = set()
t0 = time.monotonic_ns()
period = 1.0 / rate
with open(out, "w", buffering=1) as f:
    while not stop:
        name = rnd.choice(names)
        first = 0 if name in asked else 1
        asked.add(name)
        a = time.monotonic_ns()
        try:
            pwd.getpwnam(name)
            found = 1
        except KeyError:
            found = 0
        b = time.monotonic_ns()
        f.write(f"{(a - t0) // 1000000} {(b - a) // 1000} {first} {found}\n")
        left = period - (b - a) / 1e9
        if left > 0:
            time.sleep(left)
