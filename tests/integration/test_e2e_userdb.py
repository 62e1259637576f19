"""systemd's user database (io.systemd.UserDatabase over Varlink) from
idcached's userdb socket, asked by Debian 12's own userdbctl (systemd 252).

Each client runs in a private mount namespace where a tmpfs hides the
host's /run/systemd and /run/systemd/userdb is the daemon's socket
directory (bind-mounted), so idcached's socket is the only service there;
userdbctl is told to use neither NSS, drop-ins nor the multiplexer. Its
answers are compared with glibc's (getent through libnss_idcache.so.2 in
the same namespace) for files users, several domains (the precedence rule)
and LDAP users, and with `idcache ssh-authorized-keys` for their SSH keys
(given to root and the user only). Raw Varlink calls check the API's errors, and hostile
clients (garbage, no NUL, a huge message, many connections) must leave
the daemon serving.
"""
import json
import signal
import socket
import subprocess
import time

import pytest

import nsenv
from test_e2e_ldap import GROUPS, USERS, Blackhole, ldap_domain, private_slapd
from test_e2e_precedence import B_GROUP, B_PASSWD, files_domain

pytestmark = pytest.mark.usefixtures("as_root")

SERVICE = "io.idcache.test"

PASSWD = """\
root:x:0:0:root:/root:/bin/bash
alice:x:2001:2001:Alice A,,,:/home/alice:/bin/bash
bob:x:2002:2002::/home/bob:/bin/sh
carol:x:2003:3001:Carol C:/home/carol:/bin/zsh
"""
GROUP = """\
root:x:0:
alice:x:2001:
staff:x:3001:alice,bob
empty:x:3002:
wheel:x:10:carol,alice
"""

# Inside the client's namespace: hide the host's /run/systemd, show the
# daemon's socket directory as /run/systemd/userdb, then run the commands
# given as JSON on stdin; print [rc, out, err] for each.
_CLIENT = r'''
import json, subprocess, sys
udb = sys.argv[1]
for cmd in (["mount", "-t", "tmpfs", "tmpfs", "/run/systemd"],
            ["mkdir", "/run/systemd/userdb"],
            ["mount", "--bind", udb, "/run/systemd/userdb"]):
    subprocess.run(cmd, check=True)
out = []
for argv in json.load(sys.stdin):
    p = subprocess.run(argv, capture_output=True, timeout=60)
    out.append([p.returncode, p.stdout.decode("utf-8", "backslashreplace"),
                p.stderr.decode("utf-8", "backslashreplace")])
json.dump(out, sys.stdout)
'''

UDBCTL = ["userdbctl", "-N", "--with-dropin=no", "--multiplexer=no", "--no-pager"]


def udb_conf(d_base):
    return f"userdb_socket = {d_base}/udb/{SERVICE}\n"


def start(daemons, passwd=PASSWD, group=GROUP, extra="", domain_conf="", start=True):
    d = daemons.start(passwd, group, start=False, domain_conf=domain_conf)
    text = d.conf.read_text().replace("[idcache]\n", "[idcache]\n" + udb_conf(d.base) + extra, 1)
    d.conf.write_text(text)
    if start:
        d.start()
    return d


def in_ns(d, argvs):
    """Run the argv lists in one client namespace; [(rc, out, err)]."""
    res = d.ns.run([nsenv.sys_python(), "-c", _CLIENT, str(d.base / "udb")],
                   input=json.dumps(argvs), timeout=300)
    assert res.rc == 0, res
    return [tuple(r) for r in json.loads(res.out)]


def udbctl(*args):
    return UDBCTL + list(args)


def user_json(out):
    return json.loads(out) if out.strip() else None


def passwd_of(rec):
    """A userdb user record as the passwd line NSS gives for it."""
    return ":".join([rec["userName"], "x", str(rec["uid"]), str(rec["gid"]),
                     rec.get("realName", ""), rec.get("homeDirectory", ""),
                     rec.get("shell", "")])


def members_of(line):
    m = line.split(":")[3]
    return m.split(",") if m else []


# ==== files users =====================================================================

@pytest.fixture
def files_daemon(daemons):
    return start(daemons)


def test_users_equal_nss(files_daemon):
    d = files_daemon
    names = ["root", "alice", "bob", "carol"]
    argvs = [["getent", "passwd"]]
    for n in names:
        argvs += [udbctl("-j", "user", n)]
    uids = ["0", "2001", "2002", "2003"]
    for u in uids:
        argvs += [udbctl("-j", "user", u)]
    res = in_ns(d, argvs)
    getent = res[0][1].splitlines()
    assert len(getent) == 4
    by_name = [user_json(r[1]) for r in res[1:1 + len(names)]]
    by_uid = [user_json(r[1]) for r in res[1 + len(names):]]
    for line, rec, rec_uid in zip(getent, by_name, by_uid):
        assert passwd_of(rec) == line
        assert rec == rec_uid
        assert rec["service"] == SERVICE
    assert by_name[0]["disposition"] == "intrinsic"
    assert by_name[1]["disposition"] == "regular"
    assert "realName" not in by_name[2]  # an empty gecos: no realName
    assert by_name[1]["memberOf"] == ["staff", "wheel"] or \
        sorted(by_name[1]["memberOf"]) == ["staff", "wheel"]
    assert "memberOf" not in by_name[3] or by_name[3]["memberOf"] == ["wheel"]


def test_enumeration_and_groups_equal_nss(files_daemon):
    d = files_daemon
    res = in_ns(d, [["getent", "passwd"], udbctl("--output=classic", "user"),
                    ["getent", "group"], udbctl("--output=classic", "group")]
                + [udbctl("-j", "group", g) for g in ("root", "staff", "empty", "wheel", "10")])
    # classic output fills an empty gecos with the name (userdbctl's own rule)
    want = [line.replace("::/home/bob", ":bob:/home/bob") for line in res[0][1].splitlines()]
    assert res[1][0] == 0, res[1]
    assert res[1][1].splitlines() == want
    assert res[3][0] == 0, res[3]
    assert res[3][1].splitlines() == res[2][1].splitlines()
    lines = {l.split(":")[0]: l for l in res[2][1].splitlines()}
    for g, (rc, out, err) in zip(("root", "staff", "empty", "wheel", "wheel"), res[4:]):
        assert rc == 0, err
        rec = json.loads(out)
        line = lines[g]
        assert rec["groupName"] == g
        assert rec["gid"] == int(line.split(":")[2])
        assert rec.get("members", []) == members_of(line)
        assert rec["service"] == SERVICE


def test_memberships_equal_nss(files_daemon):
    d = files_daemon
    groups = ["root", "alice", "staff", "empty", "wheel"]
    users = ["root", "alice", "bob", "carol"]
    res = in_ns(d, [["getent", "group"]]
                + [udbctl("--no-legend", "users-in-group", g) for g in groups]
                + [udbctl("--no-legend", "groups-of-user", u) for u in users])
    members = {l.split(":")[0]: members_of(l) for l in res[0][1].splitlines()}
    for g, (rc, out, err) in zip(groups, res[1:1 + len(groups)]):
        assert rc == 0, err
        got = sorted(tuple(line.split()) for line in out.splitlines() if line.strip())
        assert got == sorted((u, g) for u in members[g]), (g, out)
    for u, (rc, out, err) in zip(users, res[1 + len(groups):]):
        assert rc == 0, err
        got = sorted(tuple(line.split()) for line in out.splitlines() if line.strip())
        assert got == sorted((u, g) for g, m in members.items() if u in m), (u, out)


def test_unknown_names_are_errors(files_daemon):
    res = in_ns(files_daemon, [udbctl("user", "nosuch"), udbctl("group", "nosuch"),
                               udbctl("user", "77777"), ["getent", "passwd", "nosuch"]])
    for rc, out, err in res[:3]:
        assert rc != 0
        assert "does not exist" in err or "not found" in err.lower(), err
    assert res[3][0] == 2


def test_ssh_authorized_keys_without_keys(files_daemon):
    """A files user has no keys: no output and success, as sshd's
    AuthorizedKeysCommand expects; an unknown user is an error."""
    res = in_ns(files_daemon, [udbctl("ssh-authorized-keys", "alice"),
                               udbctl("ssh-authorized-keys", "nosuch")])
    assert res[0][:2] == (0, "")
    assert res[1][0] != 0 and "does not exist" in res[1][2]


def test_service_option_names_our_socket(files_daemon):
    res = in_ns(files_daemon, [udbctl("-s", SERVICE, "-j", "user", "alice"),
                               udbctl("services")])
    assert res[0][0] == 0, res[0]
    assert json.loads(res[0][1])["uid"] == 2001
    assert SERVICE in res[1][1]


# ==== several domains: the responder's precedence ======================================

def test_precedence_equal_nss(daemons):
    d = start(daemons, extra="domains = local, b\n", start=False)
    with open(d.conf, "a") as f:
        f.write(files_domain("b", d.base, B_PASSWD, B_GROUP))
    d.start()
    names = ["alice", "erin", "bob", "root"]
    ids = ["2001", "9999", "7000"]
    res = in_ns(d, [["getent", "passwd", n] for n in names + ids]
                + [udbctl("-j", "user", n) for n in names + ids]
                + [["getent", "group", g] for g in ("staff", "bobg", "9001")]
                + [udbctl("-j", "group", g) for g in ("staff", "bobg", "9001")])
    k = len(names) + len(ids)
    for (grc, gout, _), (urc, uout, uerr) in zip(res[:k], res[k:2 * k]):
        if grc != 0:
            assert urc != 0, uout
            continue
        assert urc == 0, uerr
        rec = json.loads(uout)
        assert passwd_of(rec) == gout.strip()
    for (grc, gout, _), (urc, uout, uerr) in zip(res[2 * k:2 * k + 3], res[2 * k + 3:]):
        assert (grc == 0) == (urc == 0), (gout, uout, uerr)
        if grc == 0:
            rec = json.loads(uout)
            assert rec["gid"] == int(gout.split(":")[2])
            assert rec.get("members", []) == members_of(gout.strip())


# ==== LDAP users ===================================================================================

@pytest.fixture(scope="module")
def slapd():
    yield from private_slapd("idc-udb-ldap-", "s")


def test_ldap_users_equal_nss(slapd, daemons):
    d = start(daemons, passwd="loc:x:5000:5000:Local User:/home/loc:/bin/sh\n",
              group="locg:x:5000:loc\n", extra="domains = local, dir\n",
              domain_conf=ldap_domain(slapd.uri))
    # the first lookups wait for the directory: the userdb call waits with them
    res = in_ns(d, [udbctl("-j", "user", u) for u in USERS]
                + [["getent", "passwd", u] for u in USERS]
                + [udbctl("-j", "group", g) for g in GROUPS]
                + [["getent", "group", g] for g in GROUPS]
                + [udbctl("--no-legend", "groups-of-user", u) for u in USERS]
                + [["id", "-G", u] for u in USERS])
    n, m = len(USERS), len(GROUPS)
    for (urc, uout, uerr), (grc, gout, gerr) in zip(res[:n], res[n:2 * n]):
        assert grc == 0, gerr
        assert urc == 0, uerr
        assert passwd_of(json.loads(uout)) == gout.strip()
    for (urc, uout, uerr), (grc, gout, gerr) in zip(res[2 * n:2 * n + m],
                                                    res[2 * n + m:2 * n + 2 * m]):
        assert (urc == 0) == (grc == 0), (uout, uerr, gout)
        if grc == 0:
            rec = json.loads(uout)
            assert rec["gid"] == int(gout.split(":")[2])
            assert rec.get("members", []) == members_of(gout.strip())
    # groups-of-user is what `id -G` lists but the primary group (no membership)
    names = set()
    for rc, out, err in res[2 * n + 2 * m:2 * n + 2 * m + n]:
        assert rc == 0, err
        names |= {line.split()[1] for line in out.splitlines() if line.strip()}
    names = sorted(names)
    gids = {g: int(r[1].split(":")[2]) for g, r in
            zip(names, in_ns(d, [["getent", "group", g] for g in names]))}
    for i, u in enumerate(USERS):
        primary = json.loads(res[i][1])["gid"]
        out = res[2 * n + 2 * m + i][1]
        irc, iout, ierr = res[2 * n + 2 * m + n + i]
        assert irc == 0, ierr
        got = {gids[line.split()[1]] for line in out.splitlines() if line.strip()}
        want = {int(x) for x in iout.split()}
        assert got <= want and want - got <= {primary}, (u, got, want)
    # another spelling, in a domain that ignores case: the names the domain has
    res2 = in_ns(d, [udbctl("--no-legend", "groups-of-user", USERS[0].upper()),
                     udbctl("-j", "user", USERS[0].upper())])
    assert res2[0][0] == 0, res2[0]
    assert res2[0][1] == res[2 * n + 2 * m][1]
    assert json.loads(res2[1][1])["userName"] == USERS[0]


# ==== the API: raw Varlink calls ===================================================================

class Varlink:
    """A raw client of the socket: send a message, read replies."""

    def __init__(self, path, timeout=5.0):
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.s.settimeout(timeout)
        self.s.connect(str(path))
        self.buf = b""

    def send(self, obj):
        self.s.sendall(json.dumps(obj).encode() + b"\0")

    def reply(self):
        while b"\0" not in self.buf:
            data = self.s.recv(65536)
            if not data:
                return None
            self.buf += data
        msg, _, self.buf = self.buf.partition(b"\0")
        return json.loads(msg)

    def call(self, method, params=None, **flags):
        self.send(dict({"method": method, "parameters": params or {}}, **flags))
        out = [self.reply()]
        while out[-1] is not None and out[-1].get("continues"):
            out.append(self.reply())
        return out

    def closed(self):
        try:
            return self.s.recv(1) == b""
        except (ConnectionResetError, BrokenPipeError):
            return True

    def close(self):
        self.s.close()


UDB = "io.systemd.UserDatabase."


def sock(d):
    return d.base / "udb" / SERVICE


def test_api_errors(files_daemon):
    v = Varlink(sock(files_daemon))
    svc = {"service": SERVICE}

    def err(method, params, **flags):
        r = v.call(method, params, **flags)
        assert len(r) == 1 and r[0] is not None, r
        return r[0].get("error"), r[0].get("parameters")

    assert err(UDB + "GetUserRecord", {"userName": "alice"}) == (UDB + "BadService", {})
    assert err(UDB + "GetUserRecord", {"userName": "alice", "service": "x"})[0] == \
        UDB + "BadService"
    assert err(UDB + "GetUserRecord", dict(svc, userName="nosuch"))[0] == UDB + "NoRecordFound"
    assert err(UDB + "GetUserRecord", dict(svc, userName="x" * 300))[0] == UDB + "NoRecordFound"
    assert err(UDB + "GetUserRecord", dict(svc, userName="alice", uid=2002))[0] == \
        UDB + "ConflictingRecordFound"
    assert err(UDB + "GetGroupRecord", dict(svc, groupName="staff", gid=1))[0] == \
        UDB + "ConflictingRecordFound"
    assert err(UDB + "GetUserRecord", svc)[0] == "org.varlink.service.ExpectedMore"
    assert err(UDB + "GetMemberships", dict(svc, userName="alice"))[0] == \
        "org.varlink.service.ExpectedMore"
    assert err(UDB + "GetUserRecord", dict(svc, uid="0")) == \
        ("org.varlink.service.InvalidParameter", {"parameter": "uid"})
    assert err(UDB + "GetUserRecord", dict(svc, fuzzyNames=["a"])) == \
        ("org.varlink.service.InvalidParameter", {"parameter": "fuzzyNames"})
    assert err(UDB + "Frobnicate", svc) == \
        ("org.varlink.service.MethodNotFound", {"method": UDB + "Frobnicate"})
    assert err("com.example.X", svc) == \
        ("org.varlink.service.InterfaceNotFound", {"interface": "com.example"})
    # matching both keys is one record
    r = v.call(UDB + "GetUserRecord", dict(svc, userName="alice", uid=2001))
    assert r[0]["parameters"]["record"]["userName"] == "alice"
    assert r[0]["parameters"]["incomplete"] is False
    # a membership asked for both names
    r = v.call(UDB + "GetMemberships", dict(svc, userName="bob", groupName="staff"))
    assert r == [{"parameters": {"userName": "bob", "groupName": "staff"}}]
    assert err(UDB + "GetMemberships", dict(svc, userName="bob", groupName="wheel"))[0] == \
        UDB + "NoRecordFound"
    # streaming: every reply but the last continues
    r = v.call(UDB + "GetGroupRecord", svc, more=True)
    assert [x["parameters"]["record"]["groupName"] for x in r] == \
        ["root", "alice", "staff", "empty", "wheel"]
    assert all(x.get("continues") for x in r[:-1]) and "continues" not in r[-1]
    r = v.call(UDB + "GetMemberships", svc, more=True)
    assert sorted((x["parameters"]["userName"], x["parameters"]["groupName"]) for x in r) == \
        sorted([("alice", "staff"), ("bob", "staff"), ("carol", "wheel"), ("alice", "wheel")])
    # oneway: no reply; the next call is answered
    v.send({"method": UDB + "GetUserRecord", "parameters": dict(svc, userName="alice"),
            "oneway": True})
    info = v.call("org.varlink.service.GetInfo")[0]["parameters"]
    assert info["product"] == "idcached"
    assert "io.systemd.UserDatabase" in info["interfaces"]
    v.close()


def test_enumeration_can_be_refused(daemons):
    d = start(daemons, extra="userdb_enumerate = false\n")
    v = Varlink(sock(d))
    svc = {"service": SERVICE}
    for method in ("GetUserRecord", "GetGroupRecord", "GetMemberships"):
        r = v.call(UDB + method, svc, more=True)
        assert r[0]["error"] == UDB + "EnumerationNotSupported"
    r = v.call(UDB + "GetUserRecord", dict(svc, userName="alice"))
    assert r[0]["parameters"]["record"]["uid"] == 2001
    v.close()


def test_default_is_off(daemons):
    d = daemons.start(PASSWD, GROUP)
    assert not (d.base / "udb").exists()
    assert "user database" not in d.log()


# ==== hostile clients =========================================================================

def status(idcache, d):
    p = subprocess.run([str(idcache), "status", "--run-dir", str(d.run_dir)],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    return dict(line.partition("=")[::2] for line in p.stdout.splitlines())


def still_serves(d):
    v = Varlink(sock(d), timeout=5.0)
    t0 = time.monotonic()
    r = v.call(UDB + "GetUserRecord", {"userName": "alice", "service": SERVICE})
    v.close()
    assert r[0]["parameters"]["record"]["uid"] == 2001
    assert time.monotonic() - t0 < 2.0
    d.check_alive()


def test_garbage_closes_only_that_connection(files_daemon):
    d = files_daemon
    for junk in (b"garbage\0", b"\xff\xfe\0", b"[1,2,3]\0", b'{"method":1}\0',
                 b"\0\0\0"):
        v = Varlink(sock(d))
        v.s.sendall(junk)
        assert v.closed(), junk
        v.close()
    still_serves(d)


def test_message_without_nul_is_bounded(files_daemon, idcache):
    d = files_daemon
    v = Varlink(sock(d))
    sent = 0
    try:
        while sent < 1 << 20:
            v.s.sendall(b"{" * 4096)
            sent += 4096
    except (BrokenPipeError, ConnectionResetError, socket.timeout):
        pass
    assert sent < 1 << 20  # cut off long before a megabyte
    assert v.closed()
    v.close()
    still_serves(d)
    st = status(idcache, d)
    assert st["userdb_socket"] == str(sock(d))
    assert int(st["userdb.malformed"]) == 1
    assert int(st["userdb.calls"]) >= 1


def test_many_connections_are_limited(daemons):
    d = start(daemons, extra="max_connections_per_uid = 8\n")
    # as a uid other than root (root is not limited per uid)
    script = (
        "import socket, sys, time\n"
        "path = sys.argv[1]\n"
        "socks, alive = [], 0\n"
        "for _ in range(32):\n"
        "    s = socket.socket(socket.AF_UNIX); s.settimeout(2)\n"
        "    s.connect(path); socks.append(s)\n"
        "time.sleep(0.5)\n"
        "for s in socks:\n"
        "    s.setblocking(False)\n"
        "    try:\n"
        "        alive += s.recv(1) != b''\n"
        "    except BlockingIOError:\n"
        "        alive += 1\n"
        "    except OSError:\n"
        "        pass\n"
        "print(alive)\n")
    p = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                        nsenv.sys_python(), "-c", script, str(sock(d))],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert int(p.stdout) <= 8
    still_serves(d)


# 4,000 users whose records together are several times the daemon's
# backlog high mark, for the streaming tests.
STREAMED_USERS = "".join(f"u{i:05d}:x:{10000 + i}:100:User number {i} with a longer gecos field,"
                         f"room 12,,:/home/u{i:05d}:/bin/sh\n" for i in range(4000))


def test_streamed_enumeration_survives_back_pressure_and_half_close(daemons):
    """A client that asks for every user, closes its sending side and reads
    slowly gets every record: the call goes on while its replies drain."""
    d = start(daemons, passwd=PASSWD + STREAMED_USERS)
    v = Varlink(sock(d), timeout=10.0)
    v.send({"method": UDB + "GetUserRecord", "parameters": {"service": SERVICE}, "more": True})
    v.s.shutdown(socket.SHUT_WR)
    time.sleep(0.5)  # the daemon fills the socket and waits for it to drain
    got = []
    while True:
        r = v.reply()
        assert r is not None, f"closed after {len(got)} replies"
        got.append(r["parameters"]["record"]["userName"])
        if not r.get("continues"):
            break
    v.close()
    assert len(got) == 4 + 4000
    assert got[:4] == ["root", "alice", "bob", "carol"]


def test_streamed_enumeration_to_a_fast_reader_never_stalls(daemons):
    """A client reading every user as fast as the replies come, its socket
    left open: the daemon stops answering at its backlog's high mark, the
    client drains the backlog at once, and no read or close of the client
    is there to wake the connection: sending the backlog must. Many
    rounds, as the client has to win the race to drain it."""
    d = start(daemons, passwd=PASSWD + STREAMED_USERS)
    for rnd in range(60):
        v = Varlink(sock(d), timeout=10.0)
        v.send({"method": UDB + "GetUserRecord", "parameters": {"service": SERVICE},
                "more": True})
        n = 0
        while True:
            try:
                r = v.reply()
            except TimeoutError:
                raise AssertionError(f"round {rnd}: no reply for 10 s after {n} records")
            assert r is not None, f"round {rnd}: closed after {n} replies"
            n += 1
            if not r.get("continues"):
                break
        v.close()
        assert n == 4 + 4000


def test_call_waiting_for_a_directory_does_not_stall_others(daemons):
    """A call whose answer waits for a server that never answers waits for
    ldap_search_timeout, then finds nothing; meanwhile other calls are
    answered at once."""
    bh = Blackhole()
    try:
        d = start(daemons, passwd="loc:x:5000:5000:Local User:/home/loc:/bin/sh\n",
                  group="locg:x:5000:loc\n", extra="domains = local, dir\n",
                  domain_conf=ldap_domain(bh.uri))
        slow = Varlink(sock(d), timeout=15.0)
        slow.send({"method": UDB + "GetUserRecord",
                   "parameters": {"userName": "alice", "service": SERVICE}})
        t0 = time.monotonic()
        fast = Varlink(sock(d))
        r = fast.call(UDB + "GetUserRecord", {"userName": "loc", "service": SERVICE})
        assert r[0]["parameters"]["record"]["uid"] == 5000
        assert time.monotonic() - t0 < 1.0
        fast.close()
        r = slow.reply()
        waited = time.monotonic() - t0
        assert r == {"error": UDB + "NoRecordFound", "parameters": {}}
        assert 2.0 < waited < 8.0, waited  # ldap_search_timeout = 3
        slow.close()
    finally:
        bh.close()


def test_streaming_clients_that_do_not_read_cost_others_nothing(daemons, idcache):
    """Clients of one uid that ask for every user and never read: their
    calls pause (back-pressure, the uid's budget) and the daemon answers
    everyone else at once; their output stays bounded."""
    users = "".join(f"u{i:05d}:x:{10000 + i}:100:User {i}:/home/u{i:05d}:/bin/sh\n"
                    for i in range(4000))
    d = start(daemons, passwd=PASSWD + users)
    script = (
        "import json, socket, sys, time\n"
        "m = json.dumps({'method': 'io.systemd.UserDatabase.GetUserRecord',\n"
        "                'parameters': {'service': sys.argv[2]}, 'more': True}).encode() + b'\\0'\n"
        "socks = []\n"
        "for _ in range(32):\n"
        "    s = socket.socket(socket.AF_UNIX)\n"
        "    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)\n"
        "    s.connect(sys.argv[1]); s.sendall(m * 4); socks.append(s)\n"
        "print('ready', flush=True)\n"
        "time.sleep(30)\n")
    p = subprocess.Popen(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                          nsenv.sys_python(), "-c", script, str(sock(d)), SERVICE],
                         stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        time.sleep(1.0)
        for _ in range(5):
            still_serves(d)
        st = status(idcache, d)
        print("budget.bytes", st["budget.bytes"], "rss_kib", st["rss_kib"])
        # each paused connection holds at most about DAEMON_OUT_HIGH plus a batch
        assert int(st["budget.bytes"]) < 32 * 1024 * 1024, st["budget.bytes"]
    finally:
        p.kill()
        p.wait(timeout=10)
    still_serves(d)


# ==== SSH keys from the directory ==================================================

from test_e2e_sshkeys import keys, server  # noqa: E402,F401  (their fixtures)


def test_ssh_keys_equal_idcache_ssh_authorized_keys(server, keys, daemons, idcache):
    """sshAuthorizedKeys and `userdbctl ssh-authorized-keys` give the keys
    `idcache ssh-authorized-keys` gives sshd: alice one, bob one (his values
    that are no keys skipped), carol none."""
    d = start(daemons, passwd="loc:x:5000:5000:Local User:/home/loc:/bin/sh\n",
              group="locg:x:5000:loc\n", extra="domains = local, dir\n",
              domain_conf=ldap_domain(server.uri))
    names = ["alice", "bob", "carol", "loc"]
    res = in_ns(d, [udbctl("ssh-authorized-keys", u) for u in names]
                + [udbctl("-j", "user", u) for u in names]
                + [[str(idcache), "ssh-authorized-keys", "--run-dir", str(d.run_dir), u]
                   for u in names])
    n = len(names)
    for i, u in enumerate(names):
        (urc, uout, uerr), (jrc, jout, jerr), (irc, iout, ierr) = res[i], res[n + i], res[2 * n + i]
        assert urc == 0 and jrc == 0 and irc == 0, (u, uerr, jerr, ierr)
        assert uout == iout, u
        rec = json.loads(jout)
        assert rec.get("privileged", {}).get("sshAuthorizedKeys", []) == iout.splitlines(), u
    assert res[0][1].strip() == keys.alice
    assert res[1][1].strip() == keys.bob
    assert res[2][1] == res[3][1] == ""


def as_uid(uid, argv):
    return ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups"] + argv


def test_ssh_keys_only_to_root_and_the_user(server, keys, daemons):
    """The keys are the record's privileged section: the API gives it to
    root and to the user itself; anyone else gets the record without it,
    marked incomplete."""
    d = start(daemons, passwd="loc:x:5000:5000:Local User:/home/loc:/bin/sh\n",
              group="locg:x:5000:loc\n", extra="domains = local, dir\n",
              domain_conf=ldap_domain(server.uri))
    res = in_ns(d, [as_uid(20001, udbctl("ssh-authorized-keys", "alice")),
                    as_uid(20002, udbctl("ssh-authorized-keys", "alice")),
                    as_uid(65534, udbctl("-j", "user", "alice"))])
    assert res[0][:2] == (0, keys.alice + "\n")
    assert res[1][1] == ""
    assert "privileged" not in json.loads(res[2][1])
    script = (
        "import json, socket, sys\n"
        "s = socket.socket(socket.AF_UNIX); s.settimeout(10); s.connect(sys.argv[1])\n"
        "s.sendall(json.dumps({'method': 'io.systemd.UserDatabase.GetUserRecord',\n"
        "    'parameters': {'userName': 'alice', 'service': sys.argv[2]}}).encode() + b'\\0')\n"
        "buf = b''\n"
        "while not buf.endswith(b'\\0'):\n"
        "    buf += s.recv(65536)\n"
        "print(buf[:-1].decode())\n")
    p = subprocess.run(as_uid(65534, [nsenv.sys_python(), "-c", script, str(sock(d)), SERVICE]),
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    params = json.loads(p.stdout)["parameters"]
    assert params["incomplete"] is True
    assert "privileged" not in params["record"]


def test_reload_keeps_the_socket_and_applies_userdb_enumerate(daemons):
    """A reload that moves userdb_socket warns and keeps serving where it
    was; userdb_enumerate takes effect at once."""
    d = start(daemons)
    text = d.conf.read_text()
    d.conf.write_text(text.replace(udb_conf(d.base), f"userdb_socket = {d.base}/elsewhere\n"
                                   "userdb_enumerate = false\n"))
    d.signal(signal.SIGHUP)
    _, waited = nsenv.wait_for(lambda: "userdb_socket changed" in d.log())
    assert "userdb_socket changed: takes effect after a restart" in d.log()
    v = Varlink(sock(d))
    r = v.call(UDB + "GetUserRecord", {"service": SERVICE}, more=True)
    assert r[0]["error"] == UDB + "EnumerationNotSupported"
    v.close()
    assert not (d.base / "elsewhere").exists()
    still_serves(d)


def test_connections_count_with_nss_sock(daemons, idcache):
    """One uid's connections to both sockets share its
    max_connections_per_uid: with its userdb connections at the limit (and
    none idle long enough to make room), its next nss.sock connection is
    refused."""
    d = start(daemons, extra="max_connections_per_uid = 4\n")
    script = (
        "import socket, sys\n"
        "held = []\n"
        "for _ in range(4):\n"
        "    s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); held.append(s)\n"
        "n = socket.socket(socket.AF_UNIX); n.settimeout(3); n.connect(sys.argv[2])\n"
        "try:\n"
        "    print('refused' if n.recv(1) == b'' else 'served')\n"
        "except socket.timeout:\n"
        "    print('open')\n"
        "except OSError:\n"
        "    print('refused')\n")
    p = subprocess.run(as_uid(65534, [nsenv.sys_python(), "-c", script, str(sock(d)),
                                      str(d.run_dir / "nss.sock")]),
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "refused"
    assert int(status(idcache, d)["refused_connections_uid_limit"]) >= 1
    still_serves(d)


# ==== a record by uid is one identity ==============================================

def test_record_by_uid_has_that_users_groups(daemons):
    """Domain b's bob (uid 7000) is answered by uid; the name bob is
    local's (uid 2002, in staff 3001). The record of uid 7000 lists b's
    bobg, not local's bob's staff; the record by name is local's bob with
    local's groups. b's alice (9999) is in b's staff (9001), whose name
    getgrnam answers with local's 3001: it is left out."""
    d = start(daemons, extra="domains = local, b\n", start=False)
    with open(d.conf, "a") as f:
        f.write(files_domain("b", d.base, B_PASSWD, B_GROUP))
    d.start()
    res = in_ns(d, [udbctl("-j", "user", "7000"), udbctl("-j", "user", "bob"),
                    udbctl("-j", "user", "9999")])
    assert [r[0] for r in res] == [0, 0, 0], res
    by_uid, by_name, alice = (json.loads(r[1]) for r in res)
    assert (by_uid["userName"], by_uid["uid"]) == ("bob", 7000)
    assert by_uid.get("memberOf", []) == ["bobg"], by_uid
    assert by_name["uid"] == 2002
    assert by_name.get("memberOf", []) == ["staff"], by_name
    assert (alice["uid"], alice.get("memberOf", [])) == (9999, []), alice


def test_group_names_a_client_resolves_are_the_users(daemons):
    """b's dave is in b's wheel (gid 9010) and davesg. A userdb client
    (nss-systemd's initgroups) takes memberOf and memberships back to gids
    by name, and getgrnam(wheel) is the host's wheel (gid 10): b's wheel
    is left out of both, davesg stays; NSS's own list has 9010."""
    d = start(daemons, extra="domains = local, b\n", start=False)
    with open(d.conf, "a") as f:
        f.write(files_domain("b", d.base, "dave:x:8001:8001::/b/dave:/bin/sh\n",
                             "wheel:x:9010:dave\ndavesg:x:9011:dave\n"))
    d.start()
    res = in_ns(d, [udbctl("-j", "user", "dave"),
                    udbctl("--no-legend", "groups-of-user", "dave"),
                    ["id", "-G", "dave"], ["getent", "group", "wheel"]])
    assert [r[0] for r in res] == [0, 0, 0, 0], res
    assert json.loads(res[0][1]).get("memberOf", []) == ["davesg"], res[0]
    assert [line.split()[1] for line in res[1][1].splitlines() if line.strip()] == \
        ["davesg"], res[1]
    assert set(res[2][1].split()) == {"8001", "9010", "9011"}, res[2]
    assert res[3][1].split(":")[2] == "10", res[3]


def test_record_by_uid_has_that_users_keys(server, keys, daemons):
    """domains = dir, local with allow_local_overlap: the name loc is the
    directory's (uid 20004, a key), uid 5000 the host's loc (no key). The
    record of uid 5000 carries no key; the directory's loc's record, and
    `idcache ssh-authorized-keys loc` (getpwnam's user), carry its key."""
    d = start(daemons, passwd="loc:x:5000:5000:Local User:/home/loc:/bin/sh\n",
              group="locg:x:5000:loc\n", extra="domains = dir, local\n",
              domain_conf=ldap_domain(server.uri, "allow_local_overlap = true\n"))
    res = in_ns(d, [udbctl("-j", "user", "5000"), udbctl("-j", "user", "20004"),
                    udbctl("-j", "user", "loc")])
    assert [r[0] for r in res] == [0, 0, 0], res
    local, remote, named = (json.loads(r[1]) for r in res)
    assert (local["userName"], local["uid"]) == ("loc", 5000)
    assert "privileged" not in local, local
    assert local.get("memberOf", []) == ["locg"], local
    assert remote["privileged"]["sshAuthorizedKeys"] == [keys.other]
    assert named["uid"] == 20004
    assert named["privileged"]["sshAuthorizedKeys"] == [keys.other]
