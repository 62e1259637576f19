"""Bad input never stops the daemon or disturbs other clients: garbage on
the NSS socket, slow and non-reading clients, malformed and odd passwd/group
content, missing and unreadable files, a symlink swapped in, a bad config."""
import os
import random
import re
import signal
import socket
import struct
import subprocess
import threading
import time

import pytest

import nsenv

pytestmark = pytest.mark.usefixtures("as_root")

HDR = "=IIII"
HELLO = struct.pack("=IIIII", 20, 1, 0, 0, 1)


def frame(cmd, payload=b""):
    return struct.pack(HDR, 16 + len(payload), cmd, 0, 0) + payload


def pstr(s):
    b = s.encode()
    return struct.pack("=I", len(b)) + b + b"\0"


def connect(d):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(5)
    s.connect(str(d.run_dir / "nss.sock"))
    return s


def closed_by_peer(s, within=3.0):
    """True if the daemon closes s within `within` seconds (after whatever
    reply it sends)."""
    s.settimeout(within)
    t0 = time.monotonic()
    try:
        while time.monotonic() - t0 < within:
            if s.recv(65536) == b"":
                return True
    except (socket.timeout, TimeoutError):
        return False
    except ConnectionResetError:
        return True
    return False


def users_text(n, start=0):
    return "".join(f"user{i}:x:{20000 + i}:100:U {i}:/home/user{i}:/bin/sh\n"
                   for i in range(start, start + n))


# ==== garbage on the socket ==========================================================

def test_garbage_clients_do_not_disturb_getent(daemons):
    d = daemons.start(users_text(2000), "g:x:100:user1,user2\n")
    rng = random.Random(3)
    stop = threading.Event()
    errors = []
    held = []

    def random_bytes():
        for _ in range(20):
            s = connect(d)
            try:
                s.sendall(bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 70000))))
            except (BrokenPipeError, ConnectionResetError):
                pass  # closed on us: fine
            s.close()

    def byte_by_byte():
        # A valid exchange, one byte every 20 ms: it must not block others.
        s = connect(d)
        held.append(s)
        data = HELLO + frame(2, pstr("user5"))
        for b in data:
            if stop.is_set():
                return
            s.sendall(bytes([b]))
            time.sleep(0.02)

    def never_reads():
        # Thousands of pipelined requests whose replies are never read.
        s = connect(d)
        held.append(s)
        reqs = HELLO + b"".join(frame(2, pstr(f"user{i % 2000}")) for i in range(6000))
        s.setblocking(False)
        sent = 0
        while sent < len(reqs) and not stop.is_set():
            try:
                sent += s.send(reqs[sent:])
            except BlockingIOError:
                time.sleep(0.01)
            except (BrokenPipeError, ConnectionResetError):
                return

    def idle():
        for _ in range(50):
            held.append(connect(d))

    workers = [threading.Thread(target=f, daemon=True)
               for f in (random_bytes, byte_by_byte, never_reads, idle)]
    for w in workers:
        w.start()
    lat = []
    try:
        for i in range(15):
            t0 = time.monotonic()
            r = d.ns.run(["getent", "passwd", f"user{i * 100}"], timeout=30)
            lat.append(time.monotonic() - t0)
            if r.rc != 0:
                errors.append(r)
    finally:
        stop.set()
        for w in workers:
            w.join(timeout=30)
        for s in held:
            s.close()
    print(f"getent beside garbage clients: max {max(lat) * 1000:.0f} ms, "
          f"median {sorted(lat)[len(lat) // 2] * 1000:.0f} ms")
    d.check_alive()
    assert not errors, errors
    # Generous: the module's own timeout is 5 s; anything near it is a stall.
    assert max(lat) < 4, f"a getent took {max(lat):.1f}s next to garbage clients"
    assert d.ns.run(["getent", "passwd", "user1999"]).rc == 0


@pytest.mark.parametrize("name,data", [
    ("huge_length", struct.pack(HDR, 0xFFFFFFFF, 2, 0, 0)),
    ("length_below_header", struct.pack(HDR, 8, 2, 0, 0)),
    ("request_over_4k", struct.pack(HDR, 4097, 2, 0, 0) + b"x" * 4081),
    ("nonzero_reserved", struct.pack("=IIIII", 20, 1, 0, 7, 1)),
    ("hello_wrong_version", struct.pack("=IIIII", 20, 1, 0, 0, 99)),
    ("request_before_hello", frame(2, pstr("user1"))),
    ("unknown_command", HELLO + frame(77)),
    ("truncated_payload", HELLO + frame(2, struct.pack("=I", 100) + b"abc")),
    ("string_without_nul", HELLO + frame(2, struct.pack("=I", 5) + b"user1x")),
    ("trailing_bytes", HELLO + frame(2, pstr("user1") + b"zz")),
])
def test_bad_frames_get_closed_or_refused(daemons, name, data):
    d = _shared(daemons)
    s = connect(d)
    s.sendall(data)
    # Either a refusal reply then close, or a close; never an OK record, never
    # a daemon that waits forever on a frame it should have rejected.
    got = b""
    s.settimeout(3)
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
    except (socket.timeout, TimeoutError):
        pytest.fail(f"{name}: connection still open after 3 s (got {got[:64]!r})")
    except ConnectionResetError:
        pass
    finally:
        s.close()
    frames = []
    while len(got) >= 16:
        length, cmd, st, _ = struct.unpack(HDR, got[:16])
        frames.append((cmd, st))
        got = got[max(length, 16):]
    oks = [f for f in frames if f[1] == 0 and f[0] != 1]
    assert not oks, f"{name}: got OK replies {frames}"
    d.check_alive()
    assert d.ns.run(["getent", "passwd", "user1"]).rc == 0


def _shared(daemons):
    """A small daemon for one case (a start costs well under a second)."""
    return daemons.start(users_text(10), "g:x:100:user1\n")


# ==== bad file content =================================================================

def test_malformed_lines_skipped_rest_loads(daemons):
    lines = [
        "good0:x:21000:100::/:",
        "bad uid:x:notanumber:100::/:",                 # line 2
        "good1:x:21001:100::/:",
        "bad3:x:21003",                                 # line 4: too few fields
        "good2:x:21002:100:" + "G" * 70000 + ":/:",     # line 5: over 64 KiB
        "good3:x:21004:100::/:",
        "nul\0name:x:21005:100::/:",                    # line 7: NUL byte
        "good4:x:21006:100::/:",
        "caf\xe9:x:21007:100::/:",                      # line 9: not UTF-8 (latin-1)
        "good5:x:21008:100::/:",
        "bad/slash:x:21009:100::/:",                    # line 11: '/' in a name
        "good6:x:21010:100::/:",
    ]
    raw = "\n".join(lines).encode("latin-1") + b"\n"
    d = daemons.start(None, "grp:x:100:good0,good6\n", start=False)
    nsenv.write_atomic(d.passwd, raw)
    d.start()
    goods = [f"good{i}" for i in range(7) if i != 2]
    r = d.ns.run(["getent", "passwd"] + goods)
    assert r.rc == 0 and r.out.count("\n") == len(goods), r
    log = d.log()
    for line in (2, 4):
        assert re.search(rf"{re.escape(str(d.passwd))}:{line}\b", log), \
            f"log should name {d.passwd}:{line}:\n{log[-3000:]}"
    # once: a later reload of the same file does not repeat every message
    d.check_alive()


def test_missing_group_file_then_created(daemons):
    d = daemons.start(users_text(5), None)
    r = d.ns.run_many([["getent", "group"], ["getent", "passwd", "user1"], ["id", "user1"]])
    assert r[0].out == "", r[0]
    assert r[1].rc == 0, r[1]
    assert r[2].rc == 0, r[2]
    assert str(d.group) in d.log(), "the missing group file should be logged"
    nsenv.write_atomic(d.group, "late:x:500:user1\n")
    ok, waited = nsenv.wait_for(lambda: d.ns.run(["getent", "group", "late"]).rc == 0, 5)
    print(f"group file created -> visible after {waited:.3f}s")
    assert ok, "group file created after start not loaded within 5 s"
    assert "500(late)" in d.ns.run(["id", "user1"]).out


def test_missing_passwd_file_then_created(daemons):
    d = daemons.start(None, "g:x:100:\n")
    assert d.ns.run(["getent", "passwd"]).out == ""
    nsenv.write_atomic(d.passwd, users_text(3))
    ok, _ = nsenv.wait_for(lambda: d.ns.run(["getent", "passwd", "user2"]).rc == 0, 5)
    assert ok, "passwd created after start not loaded within 5 s"


def test_unreadable_file_keeps_daemon_running(daemons):
    d = daemons.start(users_text(5), "g:x:100:\n")
    nsenv.write_atomic(d.passwd, users_text(6), mode=0o600)  # the daemon's user can't read
    time.sleep(1)
    d.check_alive()
    r = d.ns.run(["getent", "passwd", "user0"])
    print(f"after an unreadable replacement, user0: rc={r.rc}")
    assert str(d.passwd) in d.log(), "the unreadable file should be logged"
    nsenv.write_atomic(d.passwd, users_text(7))
    ok, _ = nsenv.wait_for(lambda: d.ns.run(["getent", "passwd", "user6"]).rc == 0, 5)
    assert ok, "recovery after the file became readable not seen within 5 s"


def test_a_miss_is_not_authoritative_while_the_files_cannot_be_read(daemons):
    """A files domain whose files could not be read since the start (or at
    the last refresh) does not know that a name is absent: its miss must be
    UNAVAIL, so NSS asks the next source even with [NOTFOUND=return] (the
    setup the daemon's own log recommends), not NOTFOUND, which would hide
    every local user, root included, while the daemon cannot read them."""
    d = daemons.start(users_text(3), "g:x:100:\n", start=False)
    os.chmod(d.passwd, 0o600)  # the daemon's user cannot read it
    os.chmod(d.group, 0o600)
    d.start()
    host = d.base / "host.passwd"
    host.write_text(users_text(3))
    host.chmod(0o644)
    hostg = d.base / "host.group"
    hostg.write_text("g:x:100:\n")
    hostg.chmod(0o644)
    sources = "idcache [NOTFOUND=return] files"

    def lookups():
        return [(r.rc, r.out.strip()) for r in d.ns.run_many(
            [["getent", "passwd", "user1"], ["getent", "passwd", "20001"],
             ["getent", "group", "g"], ["id", "-G", "user1"]],
            sources=sources, passwd=host, group=hostg)]

    got = lookups()
    assert got == [(0, users_text(1, 1).strip()), (0, users_text(1, 1).strip()),
                   (0, "g:x:100:"), (0, "100")], (got, d.log()[-2000:])
    # Readable: the domain answers, and its misses are authoritative again.
    os.chmod(d.passwd, 0o644)
    os.chmod(d.group, 0o644)
    nsenv.write_atomic(d.passwd, users_text(2))
    ok, _ = nsenv.wait_for(lambda: "loaded domain local" in d.log(), 5)
    assert ok, d.log()[-2000:]
    r = d.ns.run(["getent", "passwd", "user2"], sources=sources, passwd=host, group=hostg)
    assert r.rc == 2, r
    # A later refresh that fails: what it holds is still served, a miss
    # goes to the next source again.
    nsenv.write_atomic(d.passwd, users_text(4), mode=0o600)
    ok, _ = nsenv.wait_for(lambda: d.log().count("refresh failed") >= 2, 5)
    assert ok, d.log()[-2000:]
    got = [(r.rc, r.out.strip()) for r in d.ns.run_many(
        [["getent", "passwd", "user0"], ["getent", "passwd", "user2"]],
        sources=sources, passwd=host, group=hostg)]
    assert got == [(0, users_text(1).strip()), (0, users_text(1, 2).strip())], got
    d.check_alive()


@pytest.mark.parametrize("which", ["passwd", "config"])
def test_fifo_swapped_in_does_not_freeze_the_loop(daemons, which):
    """A FIFO in place of a passwd file (or of the configuration, then
    SIGHUP): opening one for reading blocks until a writer comes, which
    would freeze the loop. It must be refused as not a regular file while
    others are served, and the real file taken when it is back."""
    d = daemons.start(users_text(3), "g:x:100:\n")
    target = d.passwd if which == "passwd" else d.conf
    keep = target.read_text()
    fifo = d.base / ".fifo"
    os.mkfifo(fifo, 0o644)
    os.rename(fifo, target)
    if which == "config":
        d.signal(signal.SIGHUP)
    time.sleep(1.0)
    s = connect(d)
    try:
        s.sendall(HELLO + frame(2, pstr("user0")))  # GETPWNAM, answered at once
        assert s.recv(4096), "no reply"
    except socket.timeout:
        pytest.fail(f"the daemon stopped answering with a FIFO as its {which}")
    finally:
        s.close()
    assert str(target) in d.log(), d.log()[-2000:]
    nsenv.write_atomic(target, keep if which == "config" else users_text(4))
    if which == "passwd":
        ok, _ = nsenv.wait_for(lambda: d.ns.run(["getent", "passwd", "user3"]).rc == 0, 5)
        assert ok, d.log()[-2000:]
    d.check_alive()


def test_symlink_swapped_in(daemons):
    d = daemons.start(users_text(3), "g:x:100:\n")
    target = d.base / "passwd.real"
    target.write_text(users_text(4))
    link = d.base / ".passwd.link"
    os.symlink(target, link)
    os.rename(link, d.passwd)
    ok, waited = nsenv.wait_for(lambda: d.ns.run(["getent", "passwd", "user3"]).rc == 0, 3)
    print(f"symlink swapped in: new content {'seen' if ok else 'not seen'} "
          f"after {waited:.3f}s")
    d.check_alive()
    assert d.ns.run(["getent", "passwd", "user0"]).rc == 0


def test_duplicate_ids_and_odd_lines_do_not_crash(daemons):
    text = ("a:x:1:1::/:\nb:x:1:1::/:\n" + "c:x:2:2:" + "é" * 1000 + ":/:\n"
            + "\n\n\n# c\n" + "d:x:3:3::/:" + "\\" * 10 + "\n" + ":x:4:4::/:\n" + ":::::::\n")
    d = daemons.start(text, "g:x:1:a,b,a,,,\ng2:x:1:\n:x:5:\n")
    r = d.ns.run_many([["getent", "passwd", "1"], ["getent", "group", "1"]])
    assert r[0].out.startswith("a:"), r[0]
    assert r[1].out.startswith("g:"), r[1]
    d.check_alive()


# ==== bad config ========================================================================

@pytest.mark.parametrize("extra,needle", [
    ("no_such_key = 1\n", "no_such_key"),
    ("entry_cache_timeout = soon\n", "entry_cache_timeout"),
    # against a default: the line of the key that was given
    ("[idcache]\nmax_connections = 16\n", "max_connections_per_uid (128)"),
    # a refused value is not checked against the others as well
    ("[idcache]\nmax_connections = 0\n", "'0' is not a number"),
])
def test_bad_config_is_refused_with_file_line(idcached_bin, tmp_path, extra, needle):
    conf = tmp_path / "bad.conf"
    run = nsenv.make_private_dir()
    try:
        top = extra.removeprefix("[idcache]\n") if extra.startswith("[idcache]\n") else ""
        conf.write_text(f"[idcache]\nrun_dir = {run}/run\nstate_dir = {run}/state\n{top}"
                        f"[domain/local]\nid_provider = files\npasswd_files = /etc/passwd\n"
                        f"{'' if top else extra}")
        lineno = 4 if top else len(conf.read_text().splitlines())
        # without -i the daemon logs to syslog, which may not exist (a
        # container): an error that stops the start goes to stderr too
        for argv in ([idcached_bin, "-c", conf, "-i"], [idcached_bin, "-c", conf],
                     [idcached_bin, "--check-config", "-c", conf]):
            p = subprocess.run([str(a) for a in argv], capture_output=True, text=True,
                               timeout=10)
            assert p.returncode != 0, p
            assert f"{conf}:{lineno}" in p.stderr and needle in p.stderr, p.stderr
            assert all(f"{conf}:{lineno}:" in ln for ln in p.stderr.splitlines()
                       if "error" in ln or argv[1] == "--check-config"), p.stderr
    finally:
        nsenv.remove_tree(run)
