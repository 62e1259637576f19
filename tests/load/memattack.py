#!/usr/bin/python3
"""Memory and loop-time attacks on idcached's NSS socket, as an unprivileged
local user would run them (tests/integration/test_attack_mem.py runs this
under setpriv). Speaks the protocol directly (idcproto.py). Every mode is
bounded in count and time; it prints one line per step on stdout and exits
when stdin closes or its deadline passes.

Modes:
  unread N   N connections, each asking for the whole passwd map in one
             reply (SETPWENT, GETPWENT with no size limit), never reading;
             prints "ready" once every request is sent.
  pin N      for each "open" line on stdin: a connection that starts a
             passwd enumeration (SETPWENT, one record) and keeps it open;
             prints "opened STATUS" (the GETPWENT reply's status). At most
             N connections.
  churn S    for S seconds: SETPWENT and one record, again and again on one
             connection; prints "rounds R statuses {...}" at the end.
  group S    for S seconds, one connection: GETGRNAM of the group named by
             --group, again and again; with --users NAME0,NAME1,... each
             followed by GETPWNAM of the next user not asked before (a
             directory's user: the daemon stores it and commits); prints
             "rounds R".
  flood N    N connections pipelining GETPWNAM of --users' first name as
             fast as the sockets take them for 3 s, never reading; prints
             "flooded R" (requests sent). Then, on a "drain" line, reads
             every connection until all R are answered (bounded by the
             deadline) and prints "drained A".
  walk       one whole passwd enumeration in pages, as getent does; prints
             "records N".

Usage: memattack.py --socket PATH MODE ARG [--deadline 120]
"""
import argparse
import os
import select
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import idcproto as P  # noqa: E402

WHOLE = P.U32.pack(0) + P.U32.pack(0)  # max_count 0, max_bytes 0: no limit
ONE = P.U32.pack(1) + P.U32.pack(0)


def connect(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(path)
    return s


def say(line):
    print(line, flush=True)


def lines(deadline):
    """Lines from stdin until EOF or the deadline."""
    while time.monotonic() < deadline:
        r, _, _ = select.select([sys.stdin], [], [], 0.1)
        if r:
            line = sys.stdin.readline()
            if not line:
                return
            yield line.strip()


def unread(path, n, deadline):
    held = []
    for _ in range(n):
        s = connect(path)
        s.sendall(P.hello_frame() + P.frame(P.SETPWENT) + P.frame(P.GETPWENT, WHOLE))
        held.append(s)
    say("ready")
    for _ in lines(deadline):
        pass


def start_enum(c):
    """SETPWENT and one record on client c: the GETPWENT reply's status."""
    c.call(P.SETPWENT)
    st, _ = c.call_raw(P.frame(P.GETPWENT, ONE))[1:]
    return st


def pin(path, n, deadline):
    held = []
    for line in lines(deadline):
        if line != "open" or len(held) >= n:
            continue
        c = P.Client(path)
        held.append(c)
        say(f"opened {start_enum(c)}")


def churn(path, seconds, deadline):
    c = P.Client(path)
    end = min(deadline, time.monotonic() + seconds)
    rounds, statuses = 0, {}
    while time.monotonic() < end:
        st = start_enum(c)
        statuses[st] = statuses.get(st, 0) + 1
        rounds += 1
    say(f"rounds {rounds} statuses {statuses}")


def group(path, seconds, name, users, deadline):
    c = P.Client(path)
    end = min(deadline, time.monotonic() + seconds)
    rounds = 0
    while time.monotonic() < end and (not users or rounds < len(users)):
        c.call(P.GETGRNAM, name)
        if users:
            c.call(P.GETPWNAM, users[rounds])
        rounds += 1
    say(f"rounds {rounds}")


def drain(s, rest, want, deadline):
    """Send rest while reading s until want replies came: their number."""
    rd, got = P.Reader(), 0
    try:
        while got < want and time.monotonic() < deadline:
            w = [s] if rest else []
            readable, writable, _ = select.select([s], w, [], 0.5)
            if writable:
                rest = rest[s.send(rest):]
            if readable:
                data = s.recv(1 << 20)
                if not data:
                    break
                got += len(rd.feed(data))
    except OSError:
        pass
    return got


def flood(path, n, name, deadline):
    hello, one = P.hello_frame(), P.request_frame(P.GETPWNAM, name)
    conns = []  # [socket, bytes sent, bytes queued]
    for _ in range(n):
        s = connect(path)
        s.setblocking(False)
        conns.append([s, 0, hello])
    end = min(deadline, time.monotonic() + 3.0)
    while time.monotonic() < end:
        for c in conns:
            try:
                while True:
                    c[2] = c[2] or one * 64
                    sent = c[0].send(c[2])
                    c[1] += sent
                    c[2] = c[2][sent:]
            except (BlockingIOError, InterruptedError):
                pass
        time.sleep(0.01)
    # a request cut short is finished at the drain: count it
    want = [(c[1] + len(c[2]) - len(hello)) // len(one) for c in conns]
    say(f"flooded {sum(want)}")
    for line in lines(deadline):
        if line == "drain":
            break
    answered, closed, t0 = 0, 0, time.monotonic()
    for (s, _, rest), w in zip(conns, want):
        got = drain(s, rest, w + 1, deadline)  # HELLO's reply too
        closed += got < w + 1
        answered += max(0, got - 1)
    say(f"drained {answered} closed {closed} in {time.monotonic() - t0:.1f} s")


def walk(path):
    c = P.Client(path)
    say(f"records {len(c.enumerate(users=True))}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--socket", required=True)
    ap.add_argument("--deadline", type=float, default=120.0)
    ap.add_argument("--group", default="")
    ap.add_argument("--users", default="")
    ap.add_argument("mode", choices=["unread", "pin", "churn", "group", "flood", "walk"])
    ap.add_argument("arg", nargs="?", default="0")
    a = ap.parse_args()
    deadline = time.monotonic() + a.deadline
    if a.mode == "unread":
        unread(a.socket, int(a.arg), deadline)
    elif a.mode == "pin":
        pin(a.socket, int(a.arg), deadline)
    elif a.mode == "churn":
        churn(a.socket, float(a.arg), deadline)
    elif a.mode == "flood":
        flood(a.socket, int(a.arg), a.users.split(",")[0], deadline)
    elif a.mode == "group":
        group(a.socket, float(a.arg), a.group, [u for u in a.users.split(",") if u], deadline)
    else:
        walk(a.socket)
    return 0


if __name__ == "__main__":
    sys.exit(main())
