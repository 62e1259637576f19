#!/usr/bin/python3
"""Load generator for idcached's NSS socket: many concurrent connections
doing mixed lookups, optionally beside misbehaving clients, with bounded
counts and a deadline. Speaks the protocol directly (idcproto.py), one
process, one thread, non-blocking sockets under `selectors`.

Good clients: each connects, pipelines HELLO with its first request, then
runs `per_client` requests one at a time (getpwnam, getpwuid, getgrnam,
initgroups on existing keys, plus ~5% getpwnam of names that do not
exist). Latency is the time from our send() to the reply's last byte as
this loop sees it, so it includes this generator's own scheduling over
every socket: compare runs against each other, not against a budget.

Bad clients (all stay connected until the good clients finish):
  slow     send a valid HELLO and request one byte per tick (5 ms), read
           the reply, start over;
  noread   pipeline getpwnam requests as fast as the socket takes them and
           never read a reply;
  enum     SETPWENT + GETPWENT + SETGRENT + GETGRENT (no size limits),
           never read.

Usage: nssload.py --socket PATH --passwd FILE --group FILE
                  [--clients 500] [--per-client 40] [--slow 0] [--noread 0]
                  [--enum 0] [--seed 1] [--deadline 60]
prints one JSON object.
"""
import argparse
import json
import os
import random
import resource
import selectors
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import idcproto as P  # noqa: E402

TICK = 0.005


def keys_from_files(passwd, group):
    """(users [(name, uid)], groups [name]) from passwd/group text files."""
    users, groups = [], []
    with open(passwd, encoding="utf-8", errors="surrogateescape") as f:
        for line in f:
            parts = line.rstrip("\n").split(":")
            if len(parts) >= 7 and parts[2].isdigit():
                users.append((parts[0], int(parts[2])))
    with open(group, encoding="utf-8", errors="surrogateescape") as f:
        for line in f:
            parts = line.rstrip("\n").split(":")
            if len(parts) >= 4 and parts[2].isdigit():
                groups.append(parts[0])
    return users, groups


def raise_nofile(want):
    """Raise our soft RLIMIT_NOFILE to want (bounded by the hard limit)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < want:
        new = want if hard == resource.RLIM_INFINITY else min(want, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))


def percentile(sorted_vals, q):
    if not sorted_vals:
        return None
    i = min(len(sorted_vals) - 1, max(0, int(round(q * (len(sorted_vals) - 1)))))
    return sorted_vals[i]


class Conn:
    def __init__(self, path, kind):
        self.kind = kind
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.s.settimeout(10)
        self.s.connect(str(path))
        self.s.setblocking(False)
        self.rd = P.Reader()
        self.out = b""
        self.closed = False
        self.remaining = 0
        self.t_send = 0.0
        self.expect = None
        self.drip = b""  # slow client: bytes still to drip
        self.sent_bytes = 0

    def send_some(self):
        """Send what the socket takes of self.out. False when the peer closed."""
        while self.out:
            try:
                n = self.s.send(self.out)
            except (BlockingIOError, InterruptedError):
                return True
            except (BrokenPipeError, ConnectionResetError):
                self.closed = True
                return False
            self.sent_bytes += n
            self.out = self.out[n:]
        return True


class Load:
    def __init__(self, path, users, groups, seed=1):
        self.path = path
        self.users = users
        self.groups = groups
        self.rng = random.Random(seed)
        self.sel = selectors.DefaultSelector()
        self.lat = []
        self.wrong = []
        self.status = {}
        self.closed_good = 0
        self.slow_done = 0

    # ---- requests ------------------------------------------------------------------
    def pick(self):
        """(frame, expected status) of one mixed lookup."""
        r = self.rng.random()
        name, uid = self.rng.choice(self.users)
        if r < 0.05:
            return P.request_frame(P.GETPWNAM, f"nosuch{self.rng.randrange(10**6)}"), P.NOTFOUND
        if r < 0.35:
            return P.request_frame(P.GETPWNAM, name), P.OK
        if r < 0.60:
            return P.request_frame(P.GETPWUID, uid), P.OK
        if r < 0.80 and self.groups:
            return P.request_frame(P.GETGRNAM, self.rng.choice(self.groups)), P.OK
        return P.request_frame(P.INITGROUPS, name), P.OK

    def send_next(self, c, first=False):
        data, c.expect = self.pick()
        c.out += (P.hello_frame() + data) if first else data
        c.t_send = time.perf_counter()
        c.send_some()

    # ---- good clients ----------------------------------------------------------------
    def on_good(self, c):
        try:
            data = c.s.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except ConnectionResetError:
            data = b""
        if not data:
            self.drop(c)
            self.closed_good += 1
            return
        for cmd, st, _ in c.rd.feed(data):
            if cmd == P.HELLO:
                if st != P.OK:
                    self.wrong.append(("hello", st))
                continue
            self.lat.append(time.perf_counter() - c.t_send)
            self.status[st] = self.status.get(st, 0) + 1
            if st != c.expect:
                self.wrong.append((cmd, st, c.expect))
            c.remaining -= 1
            if c.remaining > 0:
                self.send_next(c)
            else:
                self.drop(c)

    def drop(self, c):
        if not c.closed:
            c.closed = True
            self.sel.unregister(c.s)
            c.s.close()

    # ---- bad clients ------------------------------------------------------------------
    def start_slow(self, c):
        c.drip = P.hello_frame() + P.request_frame(P.GETPWNAM, self.rng.choice(self.users)[0])
        c.rd = P.Reader()

    def tick_slow(self, c):
        if c.closed:
            return
        if c.drip:
            try:
                c.sent_bytes += c.s.send(c.drip[:1])
                c.drip = c.drip[1:]
            except (BlockingIOError, InterruptedError):
                pass
            except (BrokenPipeError, ConnectionResetError):
                c.closed = True
            return
        try:
            data = c.s.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except ConnectionResetError:
            data = b""
        if not data:
            c.closed = True  # the daemon gave up on it: allowed
            return
        if any(cmd != P.HELLO for cmd, _, _ in c.rd.feed(data)):
            self.slow_done += 1  # one exchange completed: start over
            c.s.close()
            c.__init__(self.path, "slow")
            self.start_slow(c)

    def fill_noread(self, c):
        if c.closed:
            return
        if not c.out:
            c.out = b"".join(P.request_frame(P.GETPWNAM, self.rng.choice(self.users)[0])
                             for _ in range(256))
        c.send_some()

    # ---- the run ----------------------------------------------------------------------
    def run(self, clients=500, per_client=40, slow=0, noread=0, enum=0, deadline=60.0):
        raise_nofile(clients + slow + noread + enum + 256)
        bad = []
        for _ in range(slow):
            c = Conn(self.path, "slow")
            self.start_slow(c)
            bad.append(c)
        for _ in range(noread):
            c = Conn(self.path, "noread")
            c.out = P.hello_frame()
            bad.append(c)
        for _ in range(enum):
            c = Conn(self.path, "enum")
            big = P.U32.pack(0) + P.U32.pack(0)
            c.out = (P.hello_frame() + P.frame(P.SETPWENT) + P.frame(P.GETPWENT, big) +
                     P.frame(P.SETGRENT) + P.frame(P.GETGRENT, big))
            c.send_some()
            bad.append(c)
        good = []
        t_connect = time.perf_counter()
        for _ in range(clients):
            c = Conn(self.path, "good")
            c.remaining = per_client
            good.append(c)
        t_connect = time.perf_counter() - t_connect
        t0 = time.perf_counter()
        for c in good:
            self.sel.register(c.s, selectors.EVENT_READ, c)
            self.send_next(c, first=True)
        next_tick = t0
        live = lambda: sum(1 for c in good if not c.closed)  # noqa: E731
        while live() and time.perf_counter() - t0 < deadline:
            for key, _ in self.sel.select(timeout=TICK):
                c = key.data
                if c.out:
                    c.send_some()
                self.on_good(c)
            if time.perf_counter() >= next_tick:
                next_tick += TICK
                for c in bad:
                    if c.kind == "slow":
                        self.tick_slow(c)
                    elif c.kind == "noread":
                        self.fill_noread(c)
                    elif c.out:
                        c.send_some()
        elapsed = time.perf_counter() - t0
        unfinished = live()
        for c in good:
            self.drop(c)
        result = self.summary(elapsed, t_connect, unfinished, bad)
        for c in bad:
            c.s.close()
        return result

    def summary(self, elapsed, t_connect, unfinished, bad):
        lat = sorted(self.lat)
        ms = lambda v: None if v is None else round(v * 1000, 3)  # noqa: E731
        kinds = {}
        for c in bad:
            k = kinds.setdefault(c.kind, {"n": 0, "closed_by_daemon": 0, "bytes_sent": 0})
            k["n"] += 1
            k["closed_by_daemon"] += int(c.closed)
            k["bytes_sent"] += c.sent_bytes
        if "slow" in kinds:
            kinds["slow"]["exchanges_completed"] = self.slow_done
        return {
            "requests": len(lat),
            "elapsed_s": round(elapsed, 3),
            "rps": round(len(lat) / elapsed, 1) if elapsed > 0 else None,
            "connect_s": round(t_connect, 3),
            "p50_ms": ms(percentile(lat, 0.50)),
            "p99_ms": ms(percentile(lat, 0.99)),
            "max_ms": ms(lat[-1] if lat else None),
            "status": {str(k): v for k, v in sorted(self.status.items())},
            "wrong": self.wrong[:20],
            "nwrong": len(self.wrong),
            "good_closed_by_daemon": self.closed_good,
            "unfinished_clients": unfinished,
            "bad": kinds,
        }


def run(path, users, groups, seed=1, **kw):
    """One load run; returns the summary dict (see Load.summary)."""
    return Load(path, users, groups, seed).run(**kw)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--socket", required=True)
    ap.add_argument("--passwd", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--clients", type=int, default=500)
    ap.add_argument("--per-client", type=int, default=40)
    ap.add_argument("--slow", type=int, default=0)
    ap.add_argument("--noread", type=int, default=0)
    ap.add_argument("--enum", type=int, default=0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--deadline", type=float, default=60.0)
    a = ap.parse_args()
    users, groups = keys_from_files(a.passwd, a.group)
    if not users:
        print("no users in " + a.passwd, file=sys.stderr)
        return 2
    res = run(a.socket, users, groups, a.seed, clients=a.clients, per_client=a.per_client,
              slow=a.slow, noread=a.noread, enum=a.enum, deadline=a.deadline)
    json.dump(res, sys.stdout, indent=1)
    print()
    return 0 if res["nwrong"] == 0 and res["unfinished_clients"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
