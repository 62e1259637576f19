"""SSH logins with keys kept in the directory: a real sshd (Debian's
openssh-server) on 127.0.0.1 in a private mount namespace, whose
AuthorizedKeysCommand is the built `idcache ssh-authorized-keys`, run as
nobody; the LDAP users reach sshd through libnss_idcache.so.2. The keys are
sshPublicKey values (objectClass ldapPublicKey, tests/ldap/openssh-lpk.schema)
of a private slapd.

  alice  one key: logs in with it; once the key is removed in the directory
         and the change reaches the cache (idcache expire, or the background
         refresh), she is refused
  bob    two values that are no keys and one key: the bad values are
         skipped and logged with bob's DN, the key still logs him in
  carol  no keys
  loc, root  keys, but withheld (a local name; filter_users): none served
"""
import os
import shutil
import signal
import socket
import struct
import subprocess
import threading
import time
from pathlib import Path

import pytest

import nsenv
from test_e2e_ldap import (BASE, REFRESHING, cli, free_port, ldap_domain, private_slapd,
                           start_daemon)

SSHD = "/usr/sbin/sshd"
pytestmark = __import__("test_e2e_ldap").pytestmark + [
    pytest.mark.skipif(not (os.access(SSHD, os.X_OK) and shutil.which("ssh")
                            and shutil.which("ssh-keygen") and shutil.which("ldapmodify")),
                       reason="needs Debian's openssh-server, openssh-client and ldap-utils"),
]

BAD_VALUES = ["not-a-key-type AAAAC3NzaC1lZDI1NTE5AAAAIA== x",
              "ssh-ed25519 this-is-not-base64!"]


def keygen(path, comment):
    """A new ed25519 key pair at path; the public line."""
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f",
                    str(path)], check=True, timeout=30, capture_output=True)
    return Path(f"{path}.pub").read_text().strip()


def user_ldif(name, uid, keys, more=()):
    lines = [f"dn: uid={name},ou=people,{BASE}", "objectClass: account",
             "objectClass: posixAccount", "objectClass: ldapPublicKey", f"uid: {name}",
             f"cn: {name}", f"uidNumber: {uid}", f"gidNumber: {uid}", "homeDirectory: /tmp",
             "loginShell: /bin/sh"]
    return "\n".join(lines + [f"sshPublicKey: {k}" for k in keys] + list(more)) + "\n\n"


class Keys:
    def __init__(self, base):
        self.dir = base / "keys"
        self.dir.mkdir()
        self.alice = keygen(self.dir / "alice", "alice@test")
        self.bob = keygen(self.dir / "bob", "bob@test")
        self.other = keygen(self.dir / "other", "other@test")  # in no entry

    def private(self, name):
        return self.dir / name


@pytest.fixture(scope="module")
def keys():
    base = nsenv.make_private_dir("idc-sshkeys-")
    try:
        yield Keys(base)
    finally:
        nsenv.remove_tree(base)


@pytest.fixture
def server(keys):
    def write(path):
        path.write_text(
            f"dn: {BASE}\nobjectClass: top\nobjectClass: dcObject\nobjectClass: organization\n"
            f"o: example\ndc: example\n\n"
            f"dn: ou=people,{BASE}\nobjectClass: organizationalUnit\nou: people\n\n"
            + user_ldif("alice", 20001, [keys.alice])
            + user_ldif("bob", 20002, BAD_VALUES + [keys.bob])
            + user_ldif("carol", 20003, [], [f"description: {keys.other}"])
            + user_ldif("loc", 20004, [keys.other])  # the host's files hold loc
            + user_ldif("root", 20005, [keys.other]))  # filter_users
    yield from private_slapd("idc-sshkeys-ldap-", "s", write)


def ldap_modify(s, ldif):
    subprocess.run(["ldapmodify", "-x", "-H", s.uri, "-D", f"cn=admin,{BASE}", "-w", "secret"],
                   input=ldif, text=True, check=True, capture_output=True, timeout=30)


def authorized_keys(idcache, d, user, as_uid=65534, run_dir=None):
    """`idcache ssh-authorized-keys USER` as sshd runs it (nobody)."""
    return d.ns.run([idcache, "ssh-authorized-keys", "--run-dir", run_dir or d.run_dir, user],
                    sources="files", as_uid=as_uid)


# ==== sshd ===========================================================================

def safe_for_sshd(path):
    """Whether sshd accepts path as AuthorizedKeysCommand: it and every
    directory above it owned by root and writable by no one else."""
    p = Path(path).resolve()
    for q in [p] + list(p.parents):
        st = q.stat()
        if st.st_uid != 0 or st.st_mode & 0o022:
            return False
    return True


# Inside sshd's namespace: its privilege separation directory on a /run of
# its own (the host's /run is never written), the command where sshd
# accepts it, then sshd in the foreground.
SSHD_SCRIPT = r'''
set -e
mount -t tmpfs -o mode=0755 tmpfs /run
mkdir -m 0755 /run/sshd
if [ "$3" != "$4" ]; then mkdir -m 0755 /run/idcache-test; cp "$3" "$4"; chmod 0755 "$4"; fi
exec /usr/sbin/sshd -D -f "$1" -E "$2"
'''


class Sshd:
    def __init__(self, idcache, d, base):
        self.base = base
        self.port = free_port()
        self.log = base / "sshd.log"
        self.conf = base / "sshd_config"
        hostkey = base / "hostkey"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(hostkey)],
                       check=True, timeout=30, capture_output=True)
        self.built = str(Path(idcache).resolve())
        self.cmd = self.built if safe_for_sshd(self.built) else "/run/idcache-test/idcache"
        self.conf.write_text(
            f"Port {self.port}\nListenAddress 127.0.0.1\nHostKey {hostkey}\n"
            f"PidFile {base}/sshd.pid\nUsePAM no\nStrictModes no\nPermitRootLogin no\n"
            "PubkeyAuthentication yes\nPasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\nAuthorizedKeysFile none\n"
            f"AuthorizedKeysCommand {self.cmd} ssh-authorized-keys --run-dir {d.run_dir} %u %U\n"
            "AuthorizedKeysCommandUser nobody\nLogLevel VERBOSE\n")
        self.proc = d.ns.popen(["sh", "-c", SSHD_SCRIPT, "sshd", self.conf, self.log,
                                self.built, self.cmd], sources="files idcache")
        ok, _ = nsenv.wait_for(self.listening, timeout=15, interval=0.1)
        assert ok, f"sshd did not come up: {self.text()}"

    def listening(self):
        if self.proc.poll() is not None:
            raise AssertionError(f"sshd exited: {self.proc.stderr.read()!r} {self.text()}")
        with socket.socket() as s:
            s.settimeout(1)
            return s.connect_ex(("127.0.0.1", self.port)) == 0

    def text(self):
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def login(self, key, user):
        """ssh with only this key, no prompts: the remote command's output."""
        return subprocess.run(
            ["ssh", "-F", "/dev/null", "-i", str(key), "-p", str(self.port),
             "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
             "-o", "UserKnownHostsFile=/dev/null", "-o", "IdentitiesOnly=yes",
             "-o", "PreferredAuthentications=publickey", "-o", "ConnectTimeout=10",
             f"{user}@127.0.0.1", "echo logged-in as $USER"],
            capture_output=True, text=True, timeout=60)

    def stop(self):
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)


@pytest.fixture
def sshd_for(tmp_path_factory):
    started = []

    def start(idcache, d):
        base = nsenv.make_private_dir("idc-sshd-")
        s = Sshd(idcache, d, base)
        started.append(s)
        return s
    yield start
    for s in started:
        s.stop()
        nsenv.remove_tree(s.base)


def logged_in(res, user):
    return res.returncode == 0 and f"logged-in as {user}" in res.stdout


# ==== the tests ============================================================================

def test_key_login_then_removed_key_refused(idcache, daemons, server, keys, sshd_for):
    d = start_daemon(daemons, server.uri)
    sshd = sshd_for(idcache, d)
    res = sshd.login(keys.private("alice"), "alice")
    assert logged_in(res, "alice"), (res, sshd.text()[-3000:])
    res = sshd.login(keys.private("other"), "alice")
    assert res.returncode != 0 and "logged-in" not in res.stdout, res
    ldap_modify(server, f"dn: uid=alice,ou=people,{BASE}\nchangetype: modify\n"
                        "delete: sshPublicKey\n")
    # The cache still holds the key: the change has not reached it.
    assert authorized_keys(idcache, d, "alice").out.strip() == keys.alice
    cli(idcache, d, "expire", "--user", "alice")
    res = sshd.login(keys.private("alice"), "alice")
    assert res.returncode != 0 and "logged-in" not in res.stdout, (res, sshd.text()[-3000:])
    r = authorized_keys(idcache, d, "alice")
    assert (r.rc, r.out) == (0, ""), r
    d.check_alive()


def test_malformed_value_skipped_and_logged_good_key_works(idcache, daemons, server, keys,
                                                           sshd_for):
    d = start_daemon(daemons, server.uri)
    sshd = sshd_for(idcache, d)
    res = sshd.login(keys.private("bob"), "bob")
    assert logged_in(res, "bob"), (res, sshd.text()[-3000:])
    r = authorized_keys(idcache, d, "bob")
    assert (r.rc, r.out) == (0, keys.bob + "\n"), r
    assert "ssh_keys=1\n" in cli(idcache, d, "user", "bob")
    log = d.log()
    dn = f'entry "uid=bob,ou=people,{BASE}"'
    for i, why in ((1, "no known key type"), (2, "the key data is not base64")):
        lines = [ln for ln in log.splitlines() if f"sshPublicKey value {i} skipped" in ln]
        assert len(lines) == 1 and dn in lines[0] and why in lines[0], log[-3000:]
    # Asked again (a refresh stores the entry again): logged once only.
    cli(idcache, d, "expire", "--user", "bob")
    assert authorized_keys(idcache, d, "bob").out == keys.bob + "\n"
    assert d.log().count("sshPublicKey value 1 skipped") == 1


def test_refresh_brings_key_changes_without_expire(idcache, daemons, server, keys):
    d = start_daemon(daemons, server.uri, REFRESHING)
    assert authorized_keys(idcache, d, "alice").out == keys.alice + "\n"
    ldap_modify(server, f"dn: uid=alice,ou=people,{BASE}\nchangetype: modify\n"
                        f"replace: sshPublicKey\nsshPublicKey: {keys.other}\n")
    ok, _ = nsenv.wait_for(lambda: authorized_keys(idcache, d, "alice").out ==
                           keys.other + "\n", timeout=15, interval=0.3)
    assert ok, (authorized_keys(idcache, d, "alice"), d.log()[-3000:])


def test_what_sshd_gets_besides_keys(idcache, daemons, server, keys, tmp_path):
    d = start_daemon(daemons, server.uri)
    for user in ("carol", "nosuchuser", "loc", "root", "bad:name"):
        r = authorized_keys(idcache, d, user)
        assert (r.rc, r.out, r.err) == (0, "", ""), (user, r)
    # The directory's root and loc were fetched, keys and all, and withheld.
    assert "withheld=filter_users" in cli(idcache, d, "user", "root")
    assert authorized_keys(idcache, d, "loc").out == ""
    # Offline, the cached keys still answer.
    assert authorized_keys(idcache, d, "alice").out == keys.alice + "\n"
    server.stop()
    cli(idcache, d, "expire", "--user", "alice")
    r = authorized_keys(idcache, d, "alice")
    assert (r.rc, r.out) == (0, keys.alice + "\n"), r
    # The daemon is not running: fail closed, say why, print nothing.
    empty = nsenv.make_private_dir("idc-sshkeys-norun-")
    try:
        r = authorized_keys(idcache, d, "alice", run_dir=empty)
    finally:
        nsenv.remove_tree(empty)
    assert r.rc == 1 and r.out == "" and "idcached is not running" in r.err, r
    r = d.ns.run([idcache, "ssh-authorized-keys"], sources="files")
    assert r.rc == 2 and r.out == "", r


def test_key_attribute_is_configurable(idcache, daemons, server, keys):
    d = start_daemon(daemons, server.uri, "ldap_user_ssh_public_key = description\n")
    assert authorized_keys(idcache, d, "carol").out == keys.other + "\n"
    assert authorized_keys(idcache, d, "alice").out == ""


# ==== a daemon that answers badly ===========================================================

def frame(cmd, status, payload=b""):
    return struct.pack("=IIII", 16 + len(payload), cmd, status, 0) + payload


def wire_str(s):
    return struct.pack("=I", len(s)) + s + b"\0"


def fake_daemon(run_dir, reply):
    """One connection on run_dir/nss.sock: HELLO answered, then `reply`
    (bytes) for the SSHKEYS request, or the connection closed when None."""
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(str(run_dir / "nss.sock"))
    srv.listen(1)

    def serve():
        c, _ = srv.accept()
        with c:
            c.settimeout(10)
            got = b""
            while len(got) < 16 or len(got) < struct.unpack_from("=I", got)[0] + 16:
                more = c.recv(4096)
                if not more:
                    return
                got += more
            c.sendall(frame(1, 0, struct.pack("=I", 1)))  # HELLO: version 1
            if reply is not None:
                c.sendall(reply)
    t = threading.Thread(target=serve, daemon=True)
    t.start()
    return srv, t


GOOD = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAICStQcRIvPHZ+wS93xC07bs2rt8U4c+CoK7FmO0VgVue a"


@pytest.mark.parametrize("reply, why", [
    (frame(20, 0, struct.pack("=I", 2) + wire_str(GOOD.encode())
           + wire_str(GOOD.encode() + b"\nssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIA== x")),
     "no authorized_keys line"),
    (frame(20, 0, struct.pack("=I", 3) + wire_str(GOOD.encode())), "malformed reply"),
    (frame(20, 0, struct.pack("=I", 1) + wire_str(b"")), "malformed reply"),
    (frame(20, 4, wire_str(b"cache broken")), "cache broken"),
    (frame(2, 0, b""), "cannot ask idcached"),  # a reply to another command
    (None, "cannot ask idcached"),
])
def test_bad_answers_fail_closed(idcache, tmp_path, reply, why):
    """Whatever the daemon's side of the socket says, a key is printed only
    when every key of a well-formed answer is an authorized_keys line."""
    srv, t = fake_daemon(tmp_path, reply)
    try:
        p = subprocess.run([str(idcache), "ssh-authorized-keys", "--run-dir", str(tmp_path),
                            "alice"], capture_output=True, text=True, timeout=60)
    finally:
        t.join(timeout=10)
        srv.close()
    assert p.returncode == 1 and p.stdout == "" and why in p.stderr, p


def test_uid_given_must_be_the_users(idcache, daemons, server, keys):
    """`ssh-authorized-keys %u %U`: the keys are printed only when the user
    the name answers with is sshd's uid. With domains = dir, local and
    allow_local_overlap, loc is the directory's (uid 20004, a key) and uid
    5000 the host's loc: a session of uid 5000 named loc gets no key."""
    d = daemons.start("loc:x:5000:5000::/home/loc:/bin/sh\n", "loc:x:5000:\n",
                      idcache_conf="domains = dir, local\n",
                      domain_conf=ldap_domain(server.uri, "allow_local_overlap = true\n"))

    def ask(*args):
        return d.ns.run([idcache, "ssh-authorized-keys", "--run-dir", d.run_dir, *args],
                        sources="files", as_uid=65534)
    r = ask("loc", "5000")
    assert (r.rc, r.out) == (0, ""), r
    assert "loc is not uid 5000" in r.err, r
    assert ask("loc", "20004").out == keys.other + "\n"
    assert ask("loc").out == keys.other + "\n"
    assert ask("alice", "20001").out == keys.alice + "\n"
    assert ask("alice", "20002").out == ""
    assert ask("nosuchuser", "20001").out == ""
    for bad in ("x", "-1", "4294967295", ""):
        assert ask("alice", bad).rc == 2, bad
