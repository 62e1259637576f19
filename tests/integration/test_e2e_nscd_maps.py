"""glibc's nscd maps through idcached's nscd socket: a process's first
lookup fetches the daemon's maps (GETFDPW, GETFDGR) and, after the socket
answered a key once, resolves it in process; a change in the store, an
`idcache expire` and a restart reach a process that holds the maps.

Clients as in test_e2e_nscd.py: `passwd: files` / `group: files`, the test
users in no file of theirs, the daemon's socket directory on /run/nscd. One
long-lived client (nsenv.LOOKUP_CLIENT) runs lookups on request, so one process keeps
one mapping throughout.
"""
import json
import os
import signal
import socket
import struct
import subprocess
import time
from pathlib import Path

import pytest

import nsenv

# The nscd socket's own tests bring the daemon fixture; without them (a tree
# without the nscd socket) there is nothing to hand the maps out.
_nscd = pytest.importorskip("test_e2e_nscd", reason="the nscd socket is not in this tree")
DOMAIN_GROUP, DOMAIN_PASSWD = _nscd.DOMAIN_GROUP, _nscd.DOMAIN_PASSWD
NscdDaemon, status = _nscd.NscdDaemon, _nscd.status

pytestmark = pytest.mark.usefixtures("as_root")


class Client:
    """One process doing lookups through glibc's nscd client on request."""

    def __init__(self, n):
        path = n.d.base / "client.py"
        nsenv.write_atomic(path, nsenv.LOOKUP_CLIENT)
        argv = n.ns.argv(n.client_argv([nsenv.sys_python(), path]), sources="files")
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def ask(self, line):
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()
        out = self.p.stdout.readline()
        assert out, "the client died"
        return json.loads(out)

    def close(self):
        self.p.stdin.close()
        assert self.p.wait(timeout=30) == 0


def requests(n, kind):
    return int(status(n.d)[f"nscd.requests.{kind}"])


def wait_refreshed(n, name, pred):
    """Until the daemon answers name (over nss.sock) as pred wants."""
    def ok():
        r = n.ns.run(["getent", "passwd", name])
        return pred(r)
    assert nsenv.wait_for(ok, timeout=15)[0], f"the daemon did not pick up the change of {name}"


@pytest.fixture
def nscd(daemons):
    return NscdDaemon(daemons).start()


def test_hits_resolve_in_process(nscd):
    c = Client(nscd)
    try:
        first = c.ask("pw cacheonly")
        assert first[:4] == ["cacheonly", "x", 7000, 7000]
        assert c.ask("gr cachegrp") == ["cachegrp", "x", 7100, ["cacheonly", "member"]]
        gl = c.ask("gl cacheonly:7000")
        asked = [requests(nscd, k) for k in ("getpwbyname", "getgrbyname", "initgroups")]
        assert asked == [1, 1, 1]  # each asked the socket once, then went in the map
        assert c.ask("pw cacheonly 300") == first
        assert c.ask("gr cachegrp 300")[0] == "cachegrp"
        assert c.ask("gl cacheonly:7000 300") == gl
        assert [requests(nscd, k) for k in ("getpwbyname", "getgrbyname", "initgroups")] == asked
        assert requests(nscd, "getfdpw") == 1 and requests(nscd, "getfdgr") == 1
        st = status(nscd.d)
        assert int(st["nscdmap_passwd_entries"]) >= 1
        assert int(st["nscdmap_group_entries"]) >= 2
    finally:
        c.close()


def test_a_change_in_the_store_reaches_a_process_holding_the_map(nscd):
    c = Client(nscd)
    try:
        assert c.ask("pw cacheonly")[4] == "from idcache"
        assert c.ask("pw cacheonly 10")[4] == "from idcache"  # from the map now
        nsenv.write_atomic(nscd.d.passwd, DOMAIN_PASSWD.replace("from idcache", "changed"))
        wait_refreshed(nscd, "cacheonly", lambda r: "changed" in r.out)
        assert c.ask("pw cacheonly")[4] == "changed"
        assert c.ask("pwuid 7000")[4] == "changed"
        # a group loses a member: the group and its users' lists follow
        nsenv.write_atomic(nscd.d.group, DOMAIN_GROUP.replace("cacheonly,member", "member"))
        assert nsenv.wait_for(lambda: c.ask("gr cachegrp")[3] == ["member"], timeout=15)[0]
        assert 7100 not in c.ask("gl cacheonly:7000")
        # the user goes
        nsenv.write_atomic(nscd.d.passwd, DOMAIN_PASSWD.split("\n", 1)[1])
        wait_refreshed(nscd, "cacheonly", lambda r: r.rc == 2)
        assert c.ask("pw cacheonly") is None
        assert c.ask("pwuid 7000") is None
    finally:
        c.close()


def test_expire_drops_from_the_map(nscd):
    c = Client(nscd)
    try:
        c.ask("pw cacheonly")
        c.ask("pw cacheonly 10")
        before = requests(nscd, "getpwbyname")
        idcache = Path(nscd.d.binary).parents[1] / "cli" / "idcache"
        subprocess.run([str(idcache), "expire", "--user", "cacheonly", "--run-dir",
                        str(nscd.d.run_dir)], check=True, capture_output=True, timeout=30)
        assert c.ask("pw cacheonly")[0] == "cacheonly"
        assert requests(nscd, "getpwbyname") == before + 1  # asked again
    finally:
        c.close()


def test_a_restart_hands_new_maps(nscd):
    c = Client(nscd)
    try:
        assert c.ask("pw cacheonly 10")[4] == "from idcache"
        nscd.d.stop()
        nsenv.write_atomic(nscd.d.passwd, DOMAIN_PASSWD.replace("from idcache", "after restart"))
        nscd.d.start()
        assert c.ask("pw cacheonly")[4] == "after restart"
        assert requests(nscd, "getfdpw") == 1  # the new daemon's map, fetched
    finally:
        c.close()


def test_invalidate_group_drops_the_host_groups_in_the_lists(nscd):
    """A user's list in glibc's map holds the daemon host's groups too;
    `nscd -i group` (root, after the host's /etc/group changed) drops it."""
    c = Client(nscd)
    try:
        assert 7300 in c.ask("gl cacheonly:7000")
        assert 7300 in c.ask("gl cacheonly:7000 10")  # from the map
        text = open(nscd.sys_group).read()
        assert "filesonly,cacheonly" in text
        with open(nscd.sys_group, "w") as f:  # in place: it is bind-mounted
            f.write(text.replace("filesonly,cacheonly", "filesonly"))
        assert 7300 in c.ask("gl cacheonly:7000")  # the map does not know yet
        reply = _nscd.ask(nscd.sock, _nscd.request(_nscd.INVALIDATE, "group"))
        assert reply == b"\0\0\0\0"
        got = c.ask("gl cacheonly:7000")
        assert 7300 not in got and 7100 in got  # the host's list asked again
    finally:
        c.close()


def test_shared_off_sends_every_lookup_to_the_socket(daemons):
    """nscd_shared = false, as nscd.conf's "shared no": GETFD is refused at
    once, glibc never asks for a map again, and the daemon sees every lookup."""
    n = NscdDaemon(daemons, "nscd_shared = false\n").start()
    c = Client(n)
    try:
        first = c.ask("pw cacheonly")
        assert first[:4] == ["cacheonly", "x", 7000, 7000]
        assert c.ask("pw cacheonly 50") == first
        assert c.ask("pwuid 7000 20") == first
        assert c.ask("gr cachegrp 30")[0] == "cachegrp"
        assert requests(n, "getpwbyname") == 51
        assert requests(n, "getpwbyuid") == 20
        assert requests(n, "getgrbyname") == 30
        assert requests(n, "getfdpw") == 1 and requests(n, "getfdgr") == 1  # refused once
        st = status(n.d)
        assert st["nscdmap_passwd_size"] == "0" and st["nscdmap_group_size"] == "0"  # no maps
    finally:
        c.close()


def test_reload_with_shared_off_retires_the_maps(nscd):
    """A process holding the maps when nscd_shared goes false at a reload is
    told to fetch them again, is refused, and asks the socket from then on."""
    c = Client(nscd)
    try:
        first = c.ask("pw cacheonly 10")
        assert requests(nscd, "getpwbyname") == 1
        text = nscd.d.conf.read_text()
        nscd.d.conf.write_text(text.replace("[idcache]\n", "[idcache]\nnscd_shared = false\n", 1))
        nscd.d.signal(signal.SIGHUP)
        gone = lambda: status(nscd.d)["nscdmap_passwd_size"] == "0"
        assert nsenv.wait_for(gone, timeout=10)[0], nscd.d.log()
        asked = requests(nscd, "getpwbyname")
        assert c.ask("pw cacheonly 10") == first
        assert requests(nscd, "getpwbyname") == asked + 10
        assert requests(nscd, "getfdpw") == 2  # asked once more, refused
    finally:
        c.close()


def map_fd(sock, kind, db):
    """GETFDPW/GETFDGR by hand: the map's descriptor."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(5)
    s.connect(str(sock))
    s.sendall(_nscd.request(kind, db))
    _, anc, _, _ = s.recvmsg(64, socket.CMSG_SPACE(struct.calcsize("=i")))
    s.close()
    return struct.unpack_from("=i", anc[0][2])[0]


def test_a_killed_daemons_maps_are_given_up_within_a_minute(nscd):
    """nscd_certainly_running is never set (glibc would then check no
    timestamp, and the kernel does not clear it for a daemon that dumps
    core): a SIGKILLed daemon's maps are stale to glibc (timestamp + 300 s
    past) at most NSCDDB_STALE_S = 60 s after its death."""
    c = Client(nscd)
    fds = {}
    try:
        assert c.ask("pw cacheonly 5")[0] == "cacheonly"
        fds = {db: map_fd(nscd.sock, k, db) for k, db in ((11, "passwd"), (12, "group"))}
        nscd.d.kill()
        killed = time.time()
        for db, fd in fds.items():
            _, _, _, running, stamp = struct.unpack("=iiiiq", os.pread(fd, 24, 0))
            assert running == 0, db
            # glibc gives the map up once stamp + 300 < now
            assert stamp + 300 - killed <= 60 + 1, (db, stamp, killed)
    finally:
        for fd in fds.values():
            os.close(fd)
        c.close()
