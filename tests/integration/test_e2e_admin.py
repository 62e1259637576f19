"""The admin CLI against a running daemon: status, expire, reload, user and
group info, and refusal for callers that are neither root nor the daemon's
user (admin.sock is 0600 and the daemon checks peer credentials)."""
import socket
import struct
import subprocess

import pytest

import gen_nss_data
import nsenv

pytestmark = pytest.mark.usefixtures("as_root")


@pytest.fixture(scope="module")
def admin_world(module_daemons):
    data = gen_nss_data.generate(n_users=300, n_groups=200)
    d = module_daemons.start(data.passwd_text(), data.group_text())
    return d, data


def cli(idcache, d, cmd, *args, as_uid=None, timeout=30):
    """idcache CMD --run-dir RUN ARGS... (the option belongs to the command)."""
    argv = [str(idcache), cmd, "--run-dir", str(d.run_dir)] + list(args)
    if as_uid is not None:
        argv = ["setpriv", f"--reuid={as_uid}", f"--regid={as_uid}", "--clear-groups"] + argv
    p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    return nsenv.Result(p.returncode, p.stdout, p.stderr, 0, argv)


def test_status_shows_domain_and_counts(idcache, admin_world):
    d, data = admin_world
    r = cli(idcache, d, "status")
    assert r.rc == 0, r
    assert "local" in r.out, r
    assert str(len(data.users)) in r.out, f"user count {len(data.users)} missing: {r!r}"
    assert str(len(data.groups)) in r.out, f"group count {len(data.groups)} missing: {r!r}"
    print(r.out)


def test_status_counts_requests(idcache, admin_world):
    d, _ = admin_world
    before = cli(idcache, d, "status").out
    d.ns.run_many([["getent", "passwd", "biguser"]] * 5)
    after = cli(idcache, d, "status").out
    assert before != after, "status did not change after 5 lookups"


def test_user_and_group_info(idcache, admin_world):
    d, data = admin_world
    r = cli(idcache, d, "user", "biguser")
    assert r.rc == 0, r
    assert "biguser" in r.out and "9999" in r.out, r
    r = cli(idcache, d, "group", "huge")
    assert r.rc == 0, r
    assert "huge" in r.out and "19999" in r.out, r
    for kind, name in (("user", "nosuchuser"), ("group", "nosuchgroup")):
        r = cli(idcache, d, kind, name)
        assert r.rc == 1 and name in r.err, r


def test_expire_all_then_lookups_still_work(idcache, admin_world):
    d, data = admin_world
    r = cli(idcache, d, "expire", "--all")
    assert r.rc == 0, r
    argvs = [["getent", "passwd"], ["getent", "group"], ["id", "biguser"],
             ["getent", "passwd", "biguser", "root", "10005"]]
    got = d.ns.run_many(argvs, passwd=d.passwd, group=d.group)
    want = d.ns.run_many(argvs, sources="files", passwd=d.passwd, group=d.group)
    for g, w in zip(got, want):
        assert (g.rc, g.out) == (w.rc, w.out), f"after expire --all: {g!r} vs files {w!r}"
    r = cli(idcache, d, "user", "biguser")
    assert r.rc == 0, r


def test_expire_one_user_and_group(idcache, admin_world):
    d, _ = admin_world
    assert cli(idcache, d, "expire", "--user", "biguser").rc == 0
    assert cli(idcache, d, "expire", "--group", "huge").rc == 0
    r = d.ns.run_many([["getent", "passwd", "biguser"], ["getent", "group", "huge"]])
    assert r[0].rc == 0 and r[1].rc == 0, r


def test_reload(idcache, admin_world):
    d, _ = admin_world
    r = cli(idcache, d, "reload")
    assert r.rc == 0, r
    r = d.ns.run(["getent", "passwd", "biguser"])
    assert r.rc == 0, r
    d.check_alive()


def test_reload_picks_up_config_change(idcache, daemons):
    d = daemons.start("first:x:8000:8000::/:\n", "g1:x:8100:first\n")
    other = d.base / "passwd2"
    other.write_text("second:x:8001:8001::/:\n")
    text = d.conf.read_text().replace(f"passwd_files = {d.passwd}",
                                      f"passwd_files = {other}")
    nsenv.write_atomic(d.conf, text)
    r = cli(idcache, d, "reload")
    assert r.rc == 0, r
    ok, waited = nsenv.wait_for(lambda: d.ns.run(["getent", "passwd", "second"]).rc == 0, 5)
    assert ok, "user of the newly configured passwd file not visible 5 s after reload"
    assert d.ns.run(["getent", "passwd", "first"]).rc == 2


def test_reload_with_bad_config_keeps_serving(idcache, daemons):
    d = daemons.start("first:x:8000:8000::/:\n", "g1:x:8100:first\n")
    nsenv.write_atomic(d.conf, d.conf.read_text() + "no_such_key = 1\n")
    r = cli(idcache, d, "reload")
    assert r.rc == 1, r
    assert "no_such_key" in r.err, f"the error should name the key: {r!r}"
    d.check_alive()
    assert d.ns.run(["getent", "passwd", "first"]).rc == 0


@pytest.mark.parametrize("cmd", [["status"], ["expire", "--all"], ["reload"],
                                 ["user", "root"]])
def test_non_root_is_refused(idcache, admin_world, cmd):
    d, _ = admin_world
    r = cli(idcache, d, *cmd, as_uid=65534)
    assert r.rc == 1, r
    msg = r.err.lower()
    assert r.err.strip() and any(w in msg for w in
                                 ("permission", "denied", "refused", "not allowed", "root")), \
        f"unclear message: {r!r}"
    assert "Traceback" not in r.err and len(r.err.strip().splitlines()) <= 3, r


def test_daemon_user_is_allowed(idcache, admin_world):
    d, _ = admin_world
    r = cli(idcache, d, "status", as_uid=nsenv.DAEMON_UID)
    assert r.rc == 0, r


def test_admin_commands_refused_on_nss_socket(admin_world):
    """STATUS sent to nss.sock (0666) gets BADREQ, never the status."""
    d, _ = admin_world
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(5)
    s.connect(str(d.run_dir / "nss.sock"))
    hello = struct.pack("=IIIII", 20, 1, 0, 0, 1)
    status = struct.pack("=IIII", 16, 32, 0, 0)
    s.sendall(hello + status)
    replies = read_frames(s, 2)
    s.close()
    assert replies[0][1:3] == (1, 0), replies
    assert replies[1][1] == 32 and replies[1][2] == 5, f"expected BADREQ: {replies}"


def read_frames(s, n):
    buf = b""
    out = []
    while len(out) < n:
        chunk = s.recv(65536)
        if not chunk:
            break
        buf += chunk
        while len(buf) >= 16:
            length, cmd, st, _ = struct.unpack("=IIII", buf[:16])
            if len(buf) < length:
                break
            out.append((length, cmd, st, buf[16:length]))
            buf = buf[length:]
    return out



def test_user_info_groups_are_the_users(idcache, daemons):
    """`idcache user NAME` lists the groups `id -G` gives (less the primary
    gid, which glibc adds). It read the user's name for the groups from the
    reader's memory after the group lookup had started it over: freed
    when the record's strings had spilled into a second block (gecos and
    home of 300 bytes here; MALLOC_PERTURB_, tcache off, makes freed memory
    garbage, and groups= came out empty)."""
    d = daemons.start(f"alice:x:2001:2001:{'G' * 300}:/home/{'h' * 300}:/bin/sh\n",
                      "alice:x:2001:\ndev:x:3001:alice\nops:x:3002:bob,alice\n", start=False)
    d.wrap += ["env", "MALLOC_PERTURB_=165", "GLIBC_TUNABLES=glibc.malloc.tcache_count=0"]
    d.start()
    got = []
    for _ in range(2):
        r = cli(idcache, d, "user", "alice")
        assert r.rc == 0, r
        info = dict(ln.partition("=")[::2] for ln in r.out.splitlines())
        got.append((info["name"], info["groups"]))
    d.check_alive()
    assert got == [("alice", "3001,3002")] * 2, got
    assert sorted(set(d.ns.run(["id", "-G", "alice"]).out.split()) - {"2001"}) == \
        ["3001", "3002"]
