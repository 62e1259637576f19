"""The nscd socket (nscd_socket): glibc's own nscd client and musl's
resolve through idcached.

Clients run with `passwd: files` / `group: files` in nsswitch.conf and
without the test users in their /etc/passwd, and the daemon's socket
directory bind-mounted on /run/nscd (where glibc's and musl's clients look:
/var/run is /run) in their private namespace: an answer naming the cached
user can only have come through the socket. The daemon runs in a namespace
of its own whose /etc/passwd and /etc/group also hold entries no domain
serves: those must resolve through the socket too (the daemon asks its
host's sources), as nscd would.
"""
import os
import shutil
import signal
import socket
import struct
import subprocess
import time
from pathlib import Path

import pytest

import nsenv

pytestmark = pytest.mark.usefixtures("as_root")

DOMAIN_PASSWD = ("cacheonly:x:7000:7000:from idcache:/home/c:/bin/sh\n"
                 "member:x:7001:7100:member:/home/m:/bin/sh\n")
DOMAIN_GROUP = "cachegrp:x:7100:cacheonly,member\ncachegrp2:x:7101:cacheonly\n"
# In the daemon's /etc/passwd and /etc/group only (no domain reads them).
HOST_PASSWD = "filesonly:x:7200:7200:host files:/home/f:/bin/sh\n"
HOST_GROUP = "filesgrp:x:7300:filesonly,cacheonly\n"

NSCD_VERSION = 2
GETPWBYNAME, GETPWBYUID, GETGRBYNAME, GETGRBYGID = 0, 1, 2, 3
GETHOSTBYNAME, SHUTDOWN, GETSTAT, INVALIDATE, GETFDPW = 4, 8, 9, 10, 11
GETAI, INITGROUPS, GETSERVBYNAME, GETNETGRENT, INNETGR = 14, 15, 16, 19, 20

HERE = Path(__file__).resolve().parent
MUSL_CLIENT = HERE / "musl_nscd_client.c"
SLOW_MODULE = HERE / "nss_slow.c"


class NscdDaemon:
    """An idcached serving the nscd socket in base/nscd, and a runner of
    clients that see that directory as /run/nscd."""

    def __init__(self, pool, idcache_conf="", daemon_sources="files", valgrind=False,
                 domain_conf="", passwd_text=DOMAIN_PASSWD, group_text=DOMAIN_GROUP):
        base = nsenv.make_private_dir("idc-nscd-")
        self.sockdir = base / "nscd"
        self.sock = self.sockdir / "socket"
        ns = nsenv.NsEnv(pool.module_dir, base / "run", base / "ns")
        self.sys_passwd, self.sys_group = nsenv.daemon_sys_files(base / "sys")
        with open(self.sys_passwd, "a") as f:
            f.write(HOST_PASSWD)
        with open(self.sys_group, "a") as f:
            f.write(HOST_GROUP)
        wrap = ns.argv([], sources=daemon_sources, passwd=self.sys_passwd,
                       group=self.sys_group)
        if valgrind:
            wrap, self.vglog = nsenv.valgrind_wrap(ns, base, (self.sys_passwd, self.sys_group))
        self.d = nsenv.Daemon(pool.binary, base, passwd_text, group_text,
                              f"nscd_socket = {self.sock}\n{idcache_conf}", domain_conf,
                              wrap=wrap)
        self.d.ns = ns
        pool.daemons.append(self.d)
        self.ns = ns

    def start(self, timeout=10.0):
        self.d.start(timeout)
        return self

    def client_argv(self, argv, as_uid=None):
        """argv in a namespace whose /run/nscd is the daemon's directory
        (as uid as_uid, after the mount)."""
        drop = [] if as_uid is None else ["setpriv", f"--reuid={as_uid}", f"--regid={as_uid}",
                                          "--clear-groups", "--"]
        # A host without nscd has no /run/nscd to mount on: a private
        # tmpfs on /run gives the namespace one (nothing else there is used).
        mnt = ("{ [ -d /run/nscd ] || { mount -t tmpfs -o mode=755 idc_nscd_run /run"
               " && mkdir /run/nscd; }; } && "
               f"mount --bind {self.sockdir} /run/nscd")
        return ["sh", "-c", mnt + ' && exec "$@"', "nscd"] + \
            drop + [str(a) for a in argv]

    def run(self, argv, as_uid=None, **kw):
        return self.ns.run(self.client_argv(argv, as_uid), sources="files", **kw)

    def run_many(self, argvs, **kw):
        return self.ns.run_many([self.client_argv(a) for a in argvs], sources="files", **kw)


@pytest.fixture
def nscd(daemons):
    return NscdDaemon(daemons).start()


# ==== raw protocol ==================================================================

def request(kind, key):
    k = key.encode() + b"\0" if isinstance(key, str) else key
    return struct.pack("=iii", NSCD_VERSION, kind, len(k)) + k


def ask(path, data, timeout=2.0, half_close=False):
    """Send data (then shut our side, if half_close: the end of a partial
    request), read until the daemon closes (bounded); the bytes."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.connect(str(path))
    s.sendall(data)
    if half_close:
        s.shutdown(socket.SHUT_WR)
    out = b""
    while True:
        b = s.recv(65536)
        if not b:
            break
        out += b
    s.close()
    return out


def pw_reply(b):
    f = struct.unpack_from("=9i", b)
    if f[1] != 1:
        return f[1], None
    strs, off = [], 36
    for n in (f[2], f[3], f[6], f[7], f[8]):
        strs.append(b[off:off + n - 1].decode())
        off += n
    assert off == len(b), b
    return 1, (strs[0], strs[1], f[4], f[5], strs[2], strs[3], strs[4])


# ==== glibc's client ==============================================================

def test_glibc_resolves_cached_users_through_the_socket(nscd):
    r = nscd.run_many([["getent", "passwd", "cacheonly"], ["getent", "passwd", "7000"],
                       ["getent", "group", "cachegrp"], ["getent", "group", "7101"],
                       ["id", "cacheonly"], ["getent", "initgroups", "member"]])
    assert r[0].out == "cacheonly:x:7000:7000:from idcache:/home/c:/bin/sh\n", r[0]
    assert r[1].out == r[0].out, r[1]
    assert r[2].out == "cachegrp:x:7100:cacheonly,member\n", r[2]
    assert r[3].out == "cachegrp2:x:7101:cacheonly\n", r[3]
    # initgroups: the domain's groups and the daemon host's /etc/group's
    assert r[4].rc == 0, r[4]
    for g in ("7100(cachegrp)", "7101(cachegrp2)", "7300(filesgrp)"):
        assert g in r[4].out, r[4]
    assert r[5].out.split()[1:] == ["7100"], r[5]


def test_daemon_down_falls_back_to_nss(nscd):
    """Without the daemon glibc reads its own files: the cached user is
    gone, root is still there. The socket left in the root-owned directory
    is replaced at the next start."""
    nscd.d.stop()
    r = nscd.run_many([["getent", "passwd", "cacheonly"], ["getent", "passwd", "root"]])
    assert r[0].rc == 2, r[0]
    assert r[1].rc == 0 and r[1].out.startswith("root:"), r[1]
    assert os.stat(nscd.sockdir).st_uid == 0  # never chowned
    nscd.d.start()
    assert nscd.run(["getent", "passwd", "cacheonly"]).rc == 0


def test_host_sources_answer_what_no_domain_holds(nscd):
    """Authoritative: a user only the daemon host's files know is found,
    not "not found" (glibc would not ask NSS after that)."""
    r = nscd.run_many([["getent", "passwd", "filesonly"], ["getent", "passwd", "7200"],
                       ["getent", "group", "filesgrp"], ["getent", "group", "7300"],
                       ["id", "filesonly"], ["getent", "passwd", "nosuchuser"],
                       ["getent", "group", "nosuchgroup"], ["getent", "passwd", "4000123"]])
    assert r[0].out == "filesonly:x:7200:7200:host files:/home/f:/bin/sh\n", r[0]
    assert r[1].out == r[0].out, r[1]
    assert r[2].out == "filesgrp:x:7300:filesonly,cacheonly\n", r[2]
    assert r[3].out == r[2].out, r[3]
    assert r[4].rc == 0 and "7300(filesgrp)" in r[4].out, r[4]
    assert [x.rc for x in r[5:]] == [2, 2, 2], r[5:]


def test_negative_answers_expire(daemons):
    """A name no source holds is "not found" for nscd_negative_ttl seconds
    without asking again; then the host's new user is found."""
    n = NscdDaemon(daemons, "nscd_negative_ttl = 2\n").start()
    assert n.run(["getent", "passwd", "latecomer"]).rc == 2
    with open(n.sys_passwd, "a") as f:  # in place: the daemon's bind mount sees it
        f.write("latecomer:x:7400:7400::/:/bin/sh\n")
    assert n.run(["getent", "passwd", "latecomer"]).rc == 2  # remembered
    found, waited = nsenv.wait_for(
        lambda: n.run(["getent", "passwd", "latecomer"]).rc == 0, timeout=8, interval=0.5)
    assert found, "the negative answer never expired"
    assert waited >= 1.0, waited


def test_expire_and_reload_forget_negative_answers(daemons):
    n = NscdDaemon(daemons, "nscd_negative_ttl = 3600\n").start()
    assert n.run(["getent", "passwd", "latecomer"]).rc == 2
    with open(n.sys_passwd, "a") as f:
        f.write("latecomer:x:7400:7400::/:/bin/sh\n")
    assert n.run(["getent", "passwd", "latecomer"]).rc == 2
    idcache = Path(n.d.binary).parents[1] / "cli" / "idcache"
    subprocess.run([str(idcache), "expire", "--all", "--run-dir", str(n.d.run_dir)], check=True,
                   timeout=30, capture_output=True)
    assert n.run(["getent", "passwd", "latecomer"]).rc == 0
    assert n.run(["getent", "group", "lategroup"]).rc == 2
    with open(n.sys_group, "a") as f:
        f.write("lategroup:x:7401:\n")
    n.d.signal(signal.SIGHUP)
    found, _ = nsenv.wait_for(lambda: n.run(["getent", "group", "lategroup"]).rc == 0,
                              timeout=10, interval=0.3)
    assert found, n.d.log()
    assert int(status(n.d)["nscd.negative_answers"]) >= 1


@pytest.mark.skipif(not os.access("/usr/sbin/nscd", os.X_OK), reason="nscd not installed")
def test_nscd_invalidate_forgets_negative_answers(daemons):
    """useradd runs `nscd -i passwd` after writing /etc/passwd: as root, the
    remembered "not found" goes; from anyone else it is ignored."""
    n = NscdDaemon(daemons, "nscd_negative_ttl = 3600\n").start()
    assert n.run(["getent", "passwd", "newuser"]).rc == 2
    with open(n.sys_passwd, "a") as f:
        f.write("newuser:x:7500:7500::/:/bin/sh\n")
    r = n.run(["/usr/sbin/nscd", "-i", "passwd"], as_uid=65534)
    assert n.run(["getent", "passwd", "newuser"]).rc == 2, r  # not root: ignored
    r = n.run(["/usr/sbin/nscd", "-i", "passwd"])
    assert r.rc == 0, r
    assert n.run(["getent", "passwd", "newuser"]).rc == 0


def test_other_databases_are_left_to_nss(nscd):
    """hosts, services, netgroups: "not served" headers (found -1), so the
    client asks NSS at once; admin requests from a client that may not make
    them: a close. Each within the timeout. (GETFD hands a map:
    test_e2e_nscd_maps.py.)"""
    for kind, size in ((GETHOSTBYNAME, 32), (GETAI, 24), (GETSERVBYNAME, 24),
                       (GETNETGRENT, 16), (INNETGR, 12)):
        b = ask(nscd.sock, request(kind, "localhost"))
        assert len(b) == size, (kind, b)
        assert struct.unpack_from("=ii", b) == (NSCD_VERSION, -1), (kind, b)
    for kind in (SHUTDOWN, GETSTAT):
        assert ask(nscd.sock, request(kind, "passwd")) == b"", kind
    # INVALIDATE: from root (this test) answered as nscd does
    assert ask(nscd.sock, request(INVALIDATE, "passwd")) == struct.pack("=i", 0)
    assert ask(nscd.sock, request(INVALIDATE, "nosuchdb")) == struct.pack("=i", 22)
    r = nscd.run(["getent", "hosts", "localhost"])
    assert r.rc == 0 and "127.0.0.1" in r.out, r
    assert nscd.d.alive()


def test_raw_answers(nscd):
    got = pw_reply(ask(nscd.sock, request(GETPWBYNAME, "cacheonly")))
    assert got == (1, ("cacheonly", "x", 7000, 7000, "from idcache", "/home/c", "/bin/sh"))
    assert pw_reply(ask(nscd.sock, request(GETPWBYUID, "7200")))[1][0] == "filesonly"
    assert pw_reply(ask(nscd.sock, request(GETPWBYNAME, "nosuch"))) == (0, None)
    b = ask(nscd.sock, request(INITGROUPS, "cacheonly"))
    ver, found, n = struct.unpack_from("=iii", b)
    assert (ver, found) == (2, 1) and len(b) == 12 + 4 * n, b
    assert sorted(struct.unpack_from(f"={n}i", b, 12)) == [7100, 7101, 7300]


def test_corpus_same_through_socket_and_module(daemons):
    """The generated corpus with glibc's odd lines (repeated names, case,
    UTF-8, uid 4294967294, a 7,000-member group line past 64 KiB, a user
    in 200 groups): every user and group by name and id, and id, through
    the socket and through the module, line for line."""
    import gen_nss_data
    data = gen_nss_data.generate(n_users=600, n_groups=250, parity=True)
    n = NscdDaemon(daemons, passwd_text=data.passwd_text(), group_text=data.group_text())
    n.start()
    keys_pw, keys_gr = data.user_keys(), data.group_keys()
    argvs = [["getent", "passwd"] + keys_pw[i:i + 300] for i in range(0, len(keys_pw), 300)]
    argvs += [["getent", "group"] + keys_gr[i:i + 100] for i in range(0, len(keys_gr), 100)]
    users = [u[0] for u in data.users[:40]] + [data.big_user]
    argvs += [["id", u] for u in users] + [["getent", "group", data.huge_line_group]]
    via_socket = n.run_many(argvs, timeout=600)
    # the module as glibc would use it without the socket: idcache, then the
    # files the daemon's host has (the socket asks those for what no domain holds)
    via_module = n.ns.run_many(argvs, sources="idcache files", passwd=n.sys_passwd,
                               group=n.sys_group, timeout=600)
    assert len(via_socket[-1].out) > 65536, via_socket[-1]
    for s_, m in zip(via_socket, via_module):
        assert (s_.rc, s_.out) == (m.rc, m.out) or "id" in s_.argv, (s_.argv[:4], s_, m)
        if "id" in s_.argv:
            head, _, groups = s_.out.partition(" groups=")
            mhead, _, mgroups = m.out.partition(" groups=")
            assert head == mhead and \
                sorted(groups.strip().split(",")) == sorted(mgroups.strip().split(",")), (s_, m)


# ==== a directory ==================================================================

@pytest.fixture
def slapd():
    import test_e2e_ldap as L
    if not (os.access(L.SLAPD, os.X_OK) and shutil.which("ldapadd")):
        pytest.skip("needs Debian's slapd and ldap-utils")
    yield from L.private_slapd("idc-nscd-ldap-", "s")


def test_directory_users_same_through_socket_and_module(daemons, slapd):
    """An LDAP domain's users and groups (nested, rfc2307bis), asked first
    through the socket (the directory is asked while the client waits),
    then through the module: the same answers."""
    import test_e2e_ldap as L
    n = NscdDaemon(daemons, "domains = local, dir\n", domain_conf=L.ldap_domain(slapd.uri))
    n.start()
    argvs = ([["getent", "passwd", u] for u in L.USERS] +
             [["getent", "group", g] for g in L.GROUPS] +
             [["id", u] for u in L.USERS] + [["getent", "passwd", "nosuchldapuser"]])
    via_socket = n.run_many(argvs)
    via_module = n.ns.run_many(argvs, sources="idcache")
    assert via_socket[0].rc == 0 and via_socket[0].out.startswith("alice:"), via_socket[0]
    for s_, m in zip(via_socket, via_module):
        assert s_.rc == m.rc, (s_, m)
        if "id" in s_.argv:  # the same ids and groups, perhaps in another order
            head, _, groups = s_.out.partition(" groups=")
            mhead, _, mgroups = m.out.partition(" groups=")
            assert head == mhead and \
                sorted(groups.strip().split(",")) == sorted(mgroups.strip().split(",")), \
                (s_, m)
        else:
            assert s_.out == m.out, (s_, m)
    assert via_socket[-1].rc == 2


# ==== hostile clients =============================================================

def test_hostile_clients_cannot_crash_or_freeze_it(nscd):
    bad = [b"\x00" * 12, b"garbage" * 100, struct.pack("=iii", 2, 0, 0x7fffffff),
           struct.pack("=iii", 2, 0, -5), struct.pack("=iii", 2, 999, 2) + b"a\0",
           struct.pack("=iii", 3, 0, 2) + b"a\0", request(GETPWBYUID, "12x"),
           request(GETPWBYNAME, b"ab\0cd\0"), request(GETPWBYNAME, b"noterm"),
           struct.pack("=iii", 2, 0, 1024) + b"x" * 1024]
    for data in bad:
        assert ask(nscd.sock, data) == b"", data[:16]
    # a descriptor passed with the request: refused by the kernel (6.16+)
    # or the connection dropped unanswered
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(2)
    s.connect(str(nscd.sock))
    r, w = os.pipe()
    try:
        s.sendmsg([request(GETPWBYNAME, "cacheonly")],
                  [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("=i", r))])
        assert s.recv(4096) == b""
    except PermissionError:
        pass
    finally:
        s.close()
        os.close(r)
        os.close(w)
    # slowloris: many connections each holding half a request
    held = []
    for _ in range(50):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(str(nscd.sock))
        s.send(struct.pack("=ii", 2, 0))
        held.append(s)
    t0 = time.monotonic()
    got = pw_reply(ask(nscd.sock, request(GETPWBYNAME, "cacheonly"), timeout=1.0))
    assert got[0] == 1 and time.monotonic() - t0 < 1.0
    for s in held:
        s.close()
    r = nscd.run(["getent", "passwd", "cacheonly"])
    assert r.rc == 0, r
    assert nscd.d.alive()


def status(d):
    """`idcache status` as a dict of its key=value lines."""
    p = subprocess.run([str(Path(d.binary).parents[1] / "cli" / "idcache"), "status",
                        "--run-dir", str(d.run_dir)], capture_output=True, text=True,
                       timeout=30)
    assert p.returncode == 0, p.stderr
    return dict(x.strip().split("=", 1) for x in p.stdout.splitlines() if "=" in x)


def test_unprivileged_flood_leaves_others_served(nscd):
    """One uid holding half-sent requests on every connection it may have
    (max_connections_per_uid): others' lookups are still answered at once."""
    attack = (
        "import socket, struct, sys, time\n"
        "held = []\n"
        "for i in range(400):\n"
        "    try:\n"
        "        s = socket.socket(socket.AF_UNIX); s.settimeout(1)\n"
        f"        s.connect({str(nscd.sock)!r}); s.send(struct.pack('=ii', 2, 0))\n"
        "        held.append(s)\n"
        "    except OSError:\n"
        "        pass\n"
        "print(len(held), flush=True)\n"
        "time.sleep(30)\n")
    p = subprocess.Popen(["setpriv", "--reuid=4242", "--regid=4242", "--clear-groups", "--",
                          nsenv.sys_python(), "-c", attack], stdout=subprocess.PIPE, text=True)
    try:
        held = int(p.stdout.readline())
        assert held >= 100, held
        t0 = time.monotonic()
        r = nscd.run(["getent", "passwd", "cacheonly"], as_uid=65534)
        assert r.rc == 0, r
        assert time.monotonic() - t0 < 5
        st = status(nscd.d)
        assert int(st["refused_connections_uid_limit"]) > 0, st
    finally:
        p.kill()
        p.wait(timeout=10)
    assert nscd.d.alive()


def test_a_slow_source_does_not_freeze_the_loop(daemons):
    """A host source that hangs holds a worker, never the loop: cached users
    are answered meanwhile, and the slow lookup ends as NSS would end it."""
    n = NscdDaemon(daemons, daemon_sources="files slow")
    libdir = n.d.base / "lib"  # where the daemon's user can read it
    libdir.mkdir(mode=0o755)
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(libdir / "libnss_slow.so.2"),
                    str(SLOW_MODULE)], check=True, timeout=60)
    n.d.env["LD_LIBRARY_PATH"] = str(libdir)
    n.start()
    t0 = time.monotonic()
    assert n.run(["getent", "passwd", "slowcheck"]).rc == 2
    assert time.monotonic() - t0 >= 2.5, "the slow source was not asked"
    # a user only that other source knows: found through the socket too
    r = n.run_many([["getent", "passwd", "othersrc"], ["getent", "passwd", "7600"]])
    want = "othersrc:x:7600:7600:other source:/home/o:/bin/sh\n"
    assert r[0].out == want and r[1].out == want, r
    slow = [subprocess.Popen(n.ns.argv(n.client_argv(["getent", "passwd", f"slow{i}"]),
                                       sources="files"),
                             env=n.ns.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            for i in range(6)]
    try:
        time.sleep(0.3)
        t0 = time.monotonic()
        r = n.run(["getent", "passwd", "cacheonly"])
        assert r.rc == 0, r
        assert time.monotonic() - t0 < 2.0, "a cached lookup waited for the slow source"
    finally:
        rcs = [p.wait(timeout=30) for p in slow]
    assert rcs == [2] * 6, rcs
    assert time.monotonic() - t0 >= 2.5  # (each one took the source's time)
    assert n.d.alive()
    # stopped while a worker waits on the source: the stop does not wait for it
    late = subprocess.Popen(n.ns.argv(n.client_argv(["getent", "passwd", "slowlate"]),
                                      sources="files"), env=n.ns.env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    time.sleep(0.5)
    t0 = time.monotonic()
    assert n.d.stop() == 0
    assert time.monotonic() - t0 < 2.5
    assert late.wait(timeout=30) == 2


def test_module_inside_the_daemon_does_not_ask_it(daemons):
    """With `passwd: files idcache` on the daemon's host, the module loaded
    into the daemon for its host lookups answers UNAVAIL at once: no
    lookup reaches nss.sock, and a missing name is not found quickly."""
    n = NscdDaemon(daemons, daemon_sources="files idcache")
    n.d.env["LD_LIBRARY_PATH"] = str(n.ns.module_dir)
    n.d.env["IDCACHE_RUNDIR"] = str(n.d.run_dir)
    n.start()
    t0 = time.monotonic()
    r = n.run_many([["getent", "passwd", "nosuchuser"], ["getent", "group", "nosuchgroup"],
                    ["getent", "passwd", "filesonly"], ["id", "cacheonly"]])
    assert [x.rc for x in r] == [2, 2, 0, 0], r
    assert time.monotonic() - t0 < 10
    st = status(n.d)
    assert int(st["nscd.host_lookups"]) >= 3, st
    for k in ("requests.getpwnam", "requests.getgrnam", "requests.initgroups", "requests.mcmap"):
        assert st[k] == "0", (k, st)


@pytest.mark.skipif(nsenv.VALGRIND is None, reason="valgrind not installed")
def test_socket_under_valgrind(daemons):
    """Every kind of request, host lookups, clients that hang up before
    their answer, hostile ones: no memory error, nothing leaked at stop."""
    n = NscdDaemon(daemons, valgrind=True).start(timeout=120)
    r = n.run_many([["getent", "passwd", "cacheonly"], ["getent", "passwd", "7200"],
                    ["getent", "group", "cachegrp"], ["getent", "group", "7300"],
                    ["id", "cacheonly"], ["getent", "passwd", "nosuch"],
                    ["getent", "hosts", "localhost"]], timeout=240)
    assert [x.rc for x in r] == [0, 0, 0, 0, 0, 2, 0], r
    for kind in (GETHOSTBYNAME, GETSTAT, GETFDPW, INITGROUPS):
        ask(n.sock, request(kind, "cacheonly"), timeout=60)
    for key in ("filesonly", "nosuch2", "cacheonly"):  # hang up at once
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(str(n.sock))
        s.sendall(request(GETPWBYNAME, key))
        s.close()
    for data in (b"garbage" * 50, struct.pack("=iii", 2, 0, 0x7fffffff), b"\x02\0\0"):
        assert ask(n.sock, data, timeout=60, half_close=True) == b""
    assert pw_reply(ask(n.sock, request(GETPWBYNAME, "cacheonly"), timeout=60))[0] == 1
    nsenv.stop_checked_by_valgrind(n.d, n.vglog)


def test_refuses_a_socket_another_process_serves(daemons):
    """nscd (or nsncd) serving the path: a clear error, not a takeover."""
    n = NscdDaemon(daemons)
    n.sockdir.mkdir(parents=True)
    other = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    other.bind(str(n.sock))
    other.listen(1)
    try:
        p = subprocess.run(n.d.wrap + [str(n.d.binary), "-c", str(n.d.conf), "-i"],
                           capture_output=True, text=True, timeout=20)
    finally:
        other.close()
    assert p.returncode == 1, p
    assert f"nscd_socket: another process (nscd, nsncd, unscd?) serves {n.sock}" in p.stderr, p
    assert n.sock.is_socket()  # left alone


# ==== musl ========================================================================

@pytest.fixture(scope="module")
def musl_client(tmp_path_factory):
    cc = shutil.which("musl-gcc")
    if not cc:
        pytest.skip("musl-gcc not installed (Debian: musl-tools)")
    out = tmp_path_factory.mktemp("musl") / "musl_nscd_client"
    subprocess.run([cc, "-static", "-O1", "-o", str(out), str(MUSL_CLIENT)], check=True,
                   timeout=120)
    os.chmod(out.parent, 0o755)
    return out


def test_musl_resolves_through_the_socket(nscd, musl_client):
    r = nscd.run([musl_client, "cacheonly", "7000", "cachegrp", "7101", "filesonly"])
    assert r.rc == 0, r
    lines = r.out.splitlines()
    assert lines[0] == "pwnam cacheonly 7000 7000 from idcache /home/c /bin/sh", r.out
    assert lines[1] == "pwuid 7000 cacheonly", r.out
    assert lines[2] == "grnam cachegrp 7100 cacheonly,member", r.out
    assert lines[3] == "grgid 7101 cachegrp2 cacheonly", r.out
    groups = set(lines[4].split()[2:])
    assert lines[4].startswith("grouplist cacheonly") and \
        {"7000", "7100", "7101", "7300"} <= groups, r.out
    assert lines[5] == "pwnam filesonly 7200 7200 host files /home/f /bin/sh", r.out


def test_musl_without_the_daemon_reads_its_files(nscd, musl_client):
    nscd.d.stop()
    r = nscd.run([musl_client, "root", "0", "root", "0", "root"])
    assert r.rc == 0 and r.out.startswith("pwnam root 0 0"), r
    r = nscd.run([musl_client, "cacheonly", "7000", "cachegrp", "7101", "x"])
    assert r.rc == 1 and "pwnam cacheonly: not found" in r.out, r
