"""End to end with a directory: real slapd instances on loopback, idcached
with an `id_provider = ldap` domain, and glibc's getent/id through
libnss_idcache.so.2 in private mount namespaces.

Servers (tests/ldap/slapd.sh, fixtures tests/ldap/fixtures.ldif, test CA
from tests/ldap/mkcerts.sh), each on a free loopback port, stopped at the
end by the pid slapd.sh recorded:
  A  StartTLS with a certificate for 127.0.0.1 (must verify)
  B  plain: the failover target
  F  plain: stopped half-way (failover, offline)
  W  StartTLS with a certificate for wrong.example (must be refused)

The differential idea: what getent and id print through idcache is
computed independently from the directory's own content (ldapsearch of the
same server): passwd lines, group members, and the transitive group list of
each user (rfc2307 memberUid and rfc2307bis member DNs, nested, with a
cycle).
"""
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import nsenv

LDAP_DIR = Path(__file__).resolve().parents[1] / "ldap"
SLAPD = "/usr/sbin/slapd"
BASE = "dc=example,dc=com"

pytestmark = [
    pytest.mark.usefixtures("as_root"),
    pytest.mark.skipif(not (os.access(SLAPD, os.X_OK) and shutil.which("ldapadd")
                            and shutil.which("openssl")),
                       reason="needs Debian's slapd, ldap-utils and openssl "
                              "(apt-get install slapd ldap-utils openssl)"),
]

# Users the fixtures hold with valid numbers (dave has no uidNumber, eve an
# out-of-range one, dup is two entries with one uid: all left out; root0
# and gid0 have uid or gid 0, below the default min_id = 1; colon, newline
# and escape hold ':', a newline or ESC in a passwd field: ignored too).
USERS = ["alice", "bob", "carol", "frank"]
IGNORED_USERS = ["root0", "gid0", "colon", "newline", "escape"]
MIN_ID = 1  # the default
GROUPS = ["ops", "dev", "all", "top", "c1", "c2"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Slapd:
    """One slapd.sh instance in base/name."""

    def __init__(self, base, name, certs=None, cert="server", ldif=None, syncprov=False):
        self.dir = Path(base) / name
        self.syncprov = syncprov  # content synchronization (the syncprov overlay)
        self.port = free_port()
        self.certs = certs
        self.cert = cert
        self.ldif = ldif  # None: the fixtures (ldapadd); else loaded with slapadd
        self.pid = None

    @property
    def uri(self):
        return f"ldap://127.0.0.1:{self.port}"

    def start(self):
        argv = [LDAP_DIR / "slapd.sh", "start", self.dir, self.port,
                self.ldif or LDAP_DIR / "fixtures.ldif"]
        if self.certs:
            argv += [self.certs, "", self.cert]
        environ = dict(os.environ, SLAPD_LOAD="slapadd") if self.ldif else dict(os.environ)
        if self.syncprov:
            environ["SLAPD_SYNCPROV"] = "1"
        p = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=120,
                           env=environ)
        if p.returncode != 0:
            pytest.fail(f"slapd {self.dir.name} did not start: {p.stderr}")
        self.pid = int(p.stdout.split()[-1])

    def stop(self):
        if self.pid is not None:
            subprocess.run([str(LDAP_DIR / "slapd.sh"), "stop", str(self.dir)], timeout=30)
            self.pid = None

    def srch_count(self):
        """SRCH operations slapd logged so far."""
        log = (self.dir / "slapd.log").read_text(errors="replace")
        return log.count(" SRCH base=")


def private_slapd(prefix, name, write_ldif=None, syncprov=False):
    """A slapd of a test's own in a fresh private directory, for a fixture
    to `yield from`: the fixtures' entries, or what write_ldif(path) writes,
    loaded with slapadd; with syncprov, offering content synchronization.
    Stopped and its directory removed afterwards."""
    base = nsenv.make_private_dir(prefix)
    ldif = None
    if write_ldif is not None:
        ldif = base / "dir.ldif"
        write_ldif(ldif)
    s = Slapd(base, name, ldif=ldif, syncprov=syncprov)
    try:
        s.start()
        yield s
    finally:
        s.stop()
        nsenv.remove_tree(base)


class Env:
    def __init__(self, base):
        self.base = base
        self.certs = base / "certs"
        self.servers = {}


@pytest.fixture(scope="module")
def env():
    base = nsenv.make_private_dir("idc-ldap-e2e-")
    e = Env(base)
    subprocess.run([str(LDAP_DIR / "mkcerts.sh"), str(e.certs)], check=True, timeout=60)
    os.chmod(e.certs, 0o755)
    try:
        for name, certs, cert in (("a", e.certs, "server"), ("b", None, "server"),
                                  ("f", None, "server"), ("w", e.certs, "wrong")):
            e.servers[name] = Slapd(base, name, certs, cert)
            e.servers[name].start()
        yield e
    finally:
        for s in e.servers.values():
            s.stop()
        nsenv.remove_tree(base)


def ldap_domain(uris, extra=""):
    """A [domain/dir] section (appended after [domain/local])."""
    return ("\n[domain/dir]\n"
            "id_provider = ldap\n"
            f"ldap_uri = {uris}\n"
            f"ldap_search_base = {BASE}\n"
            "ldap_schema = rfc2307bis\n"
            "ldap_network_timeout = 2\n"
            "ldap_search_timeout = 3\n"
            "entry_negative_timeout = 1\n"
            f"{extra}")


LOCAL_PASSWD = "loc:x:5000:5000:Local User:/home/loc:/bin/sh\n"
LOCAL_GROUP = "locg:x:5000:loc\n"


def start_daemon(daemons, uris, extra=""):
    return daemons.start(LOCAL_PASSWD, LOCAL_GROUP, idcache_conf="domains = local, dir\n",
                         domain_conf=ldap_domain(uris, extra))


def cli(idcache, d, cmd, *args):
    p = subprocess.run([str(idcache), cmd, "--run-dir", str(d.run_dir)] + list(args),
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    return p.stdout


def status(idcache, d):
    out = {}
    for line in cli(idcache, d, "status").splitlines():
        k, _, v = line.partition("=")
        out[k] = v
    return out


# ==== the directory's own answer ===================================================

def ldapsearch(uri, filt):
    """Entries as {dn: {attr_lower: [values]}} (ldapsearch -LLL, unwrapped)."""
    p = subprocess.run(["ldapsearch", "-x", "-LLL", "-o", "ldif-wrap=no", "-H", uri, "-b", BASE,
                        filt], capture_output=True, text=True, timeout=30, check=True)
    entries = {}
    for block in p.stdout.strip().split("\n\n"):
        attrs, dn = {}, None
        for line in block.splitlines():
            k, _, v = line.partition(": ")
            if k == "dn":
                dn = v.lower()
            else:
                attrs.setdefault(k.lower(), []).append(v)
        if dn:
            entries[dn] = attrs
    return entries


class Directory:
    """Expected NSS answers computed from the directory's content."""

    def __init__(self, uri):
        self.users = {}
        for dn, a in ldapsearch(uri, "(objectClass=posixAccount)").items():
            if a["uid"][0] in USERS:
                self.users[a["uid"][0]] = (dn, a)
        self.groups = {}
        for dn, a in ldapsearch(uri, "(objectClass=posixGroup)").items():
            if int(a["gidnumber"][0]) >= MIN_ID:  # wheel0 (gid 0) is ignored
                self.groups[dn] = a

    def passwd_line(self, name):
        dn, a = self.users[name]
        return ":".join([name, "x", a["uidnumber"][0], a["gidnumber"][0], a.get("gecos", [""])[0],
                         a["homedirectory"][0], a.get("loginshell", [""])[0]])

    def group_by_name(self, cn):
        for dn, a in self.groups.items():
            if a["cn"][0] == cn:
                return dn, a
        raise KeyError(cn)

    def direct_user_members(self, cn):
        _, a = self.group_by_name(cn)
        names = list(a.get("memberuid", []))
        for m in a.get("member", []):
            rdn = m.split(",")[0]
            if rdn.lower().startswith("uid="):
                names.append(rdn[4:])
        return sorted(set(names))

    def user_members(self, cn):
        """What getent group lists: the direct user members and those of
        the member groups, nesting followed (cycles end)."""
        by_dn = {dn.lower(): a for dn, a in self.groups.items()}
        names, seen, todo = set(), set(), [self.group_by_name(cn)[0].lower()]
        while todo:
            gdn = todo.pop()
            if gdn in seen or gdn not in by_dn:
                continue
            seen.add(gdn)
            names |= set(self.direct_user_members(by_dn[gdn]["cn"][0]))
            todo += [m.lower() for m in by_dn[gdn].get("member", [])]
        return sorted(names)

    def groups_of(self, name):
        """gid numbers of every group name is in, nesting followed."""
        dn, _ = self.users[name]
        found, todo = set(), []
        for gdn, a in self.groups.items():
            if name in a.get("memberuid", []) or dn in [m.lower() for m in a.get("member", [])]:
                todo.append(gdn)
        while todo:
            gdn = todo.pop()
            if gdn in found:
                continue
            found.add(gdn)
            for pdn, a in self.groups.items():
                if gdn in [m.lower() for m in a.get("member", [])]:
                    todo.append(pdn)
        return sorted(int(self.groups[g]["gidnumber"][0]) for g in found)


def id_groups(out):
    """The gid numbers of `id`'s groups= list."""
    part = out.split("groups=")[1].strip()
    return sorted(int(x.split("(")[0]) for x in part.split(","))


# ==== tests ==============================================================================

@pytest.fixture(scope="module")
def tls_daemon(env, module_daemons):
    """Against A over StartTLS, the certificate checked against the test CA."""
    a = env.servers["a"]
    return start_daemon(module_daemons, a.uri,
                        "ldap_id_use_start_tls = true\n"
                        f"ldap_tls_cacert = {env.certs}/ca.pem\n"
                        "ldap_tls_reqcert = demand\n")


def test_getent_and_id_match_the_directory(env, tls_daemon, idcache):
    d = tls_daemon
    want = Directory(env.servers["a"].uri)
    argvs = []
    for u in USERS:
        argvs += [["getent", "passwd", u], ["getent", "passwd", want.users[u][1]["uidnumber"][0]],
                  ["id", u]]
    for g in GROUPS:
        argvs += [["getent", "group", g],
                  ["getent", "group", want.group_by_name(g)[1]["gidnumber"][0]]]
    got = d.ns.run_many(argvs)
    i = 0
    for u in USERS:
        line = want.passwd_line(u)
        assert got[i].rc == 0 and got[i].out.strip() == line, got[i]
        assert got[i + 1].rc == 0 and got[i + 1].out.strip() == line, got[i + 1]
        idr = got[i + 2]
        assert idr.rc == 0, idr
        uid, gid = want.users[u][1]["uidnumber"][0], want.users[u][1]["gidnumber"][0]
        assert idr.out.startswith(f"uid={uid}({u}) gid={gid}"), idr
        assert id_groups(idr.out) == sorted(set(want.groups_of(u)) | {int(gid)}), idr
        i += 3
    for g in GROUPS:
        gdn, a = want.group_by_name(g)
        for r in got[i:i + 2]:
            assert r.rc == 0, r
            name, pw, gid, members = r.out.strip().split(":")
            assert (name, pw, gid) == (g, "x", a["gidnumber"][0]), r
            assert sorted(filter(None, members.split(","))) == want.user_members(g), r
        i += 2
    st = status(idcache, d)
    assert st["domain.dir.provider"] == "ldap"
    assert st["domain.dir.state"] == "online"
    assert st["domain.dir.server"] == env.servers["a"].uri
    assert int(st["domain.dir.ldap_searches"]) > 0


def test_unknown_bad_and_local_names(tls_daemon):
    d = tls_daemon
    got = d.ns.run_many([["getent", "passwd", "nosuchuser"], ["getent", "group", "nosuchgroup"],
                         ["getent", "passwd", "dave"], ["getent", "passwd", "424242"],
                         ["getent", "passwd", "loc"], ["id", "-G", "loc"],
                         ["getent", "passwd", "ALICE"]])
    assert [r.rc for r in got[:4]] == [2, 2, 2, 2], got
    assert got[4].out.startswith("loc:x:5000:5000:"), got[4]  # the files domain first
    assert got[5].out.split() == ["5000"], got[5]
    assert got[6].rc == 0 and got[6].out.startswith("alice:"), got[6]  # caseIgnore


def test_warm_lookups_stay_local_and_expired_are_asked_again(env, tls_daemon, idcache):
    d = tls_daemon
    a = env.servers["a"]
    d.ns.run(["id", "alice"])
    before = a.srch_count()
    r = d.ns.run_many([["id", "alice"]] * 5)
    assert all(x.rc == 0 for x in r)
    assert a.srch_count() == before, "warm lookups went to the directory"
    # expired: the directory is asked before the answer (SSSD's rule), so
    # the searches are counted by the time `id` has printed
    cli(idcache, d, "expire", "--all")
    r = d.ns.run(["id", "alice"])
    assert r.rc == 0 and "20014(top)" in r.out, r
    assert a.srch_count() > before, "the expired entry was answered without asking"


def user_info(idcache, d, name):
    out = {}
    for line in cli(idcache, d, "user", name).splitlines():
        k, _, v = line.partition("=")
        out[k.strip()] = v.strip()
    return out


def test_refresh_expired_interval_keeps_entries_warm(env, module_daemons, idcache):
    """refresh_expired_interval: expired entries (and those about to
    expire) are refreshed in the background without any client lookup, in
    batched searches; the directory did not change, so nothing durable is
    written."""
    b = env.servers["b"]
    d = start_daemon(module_daemons, b.uri,
                     "entry_cache_timeout = 2\nrefresh_expired_interval = 1\n")
    for n in ("alice", "bob", "carol"):
        r = d.ns.run(["getent", "passwd", n])
        assert r.rc == 0, r
    assert user_info(idcache, d, "alice")["expired"] == "no"
    commits0 = int(status(idcache, d)["cache_durable_commits"])
    before = b.srch_count()
    cli(idcache, d, "expire", "--all")
    assert user_info(idcache, d, "alice")["expired"] == "yes"
    # no lookup from here: only the background refresh can make it fresh
    ok, _ = nsenv.wait_for(
        lambda: all(user_info(idcache, d, n)["expired"] == "no" for n in ("alice", "bob", "carol")),
        timeout=5, interval=0.1)
    assert ok, d.log()[-2000:]
    refresh_searches = b.srch_count() - before
    # and it stays warm past entry_cache_timeout (refreshed before expiry)
    time.sleep(3)
    assert all(user_info(idcache, d, n)["expired"] == "no" for n in ("alice", "bob", "carol"))
    commits1 = int(status(idcache, d)["cache_durable_commits"])
    print(f"\nrefresh: {refresh_searches} searches for the first run, durable commits "
          f"{commits0} -> {commits1}")
    assert refresh_searches <= 3, refresh_searches  # one batch, not one per entry
    assert commits1 == commits0, "an unchanged refresh wrote to cache.mdb"
    # Its refreshes would go on searching server b, which later tests of
    # this module count searches on.
    assert d.stop() == 0


def cache_holds(idcache, d, kind, name):
    """`idcache user|group NAME`: what the cache holds (no lookup), as a
    dict, or None when no domain holds the name."""
    p = subprocess.run([str(idcache), kind, "--run-dir", str(d.run_dir), name],
                       capture_output=True, text=True, timeout=30)
    if p.returncode != 0:
        assert "no served domain holds this name" in p.stderr, p.stderr
        return None
    return dict(line.partition("=")[::2] for line in p.stdout.splitlines())


@pytest.fixture
def server_r(env):
    """Server R: the fixtures on a server of this test's own, which it may
    change or stop."""
    s = Slapd(env.base, f"r{free_port()}")
    s.start()
    yield s
    if s.pid is not None:
        try:
            os.kill(s.pid, signal.SIGCONT)  # in case the test stopped it
        except ProcessLookupError:
            pass
    s.stop()
    shutil.rmtree(s.dir, ignore_errors=True)


def ldap_delete(server, *dns):
    subprocess.run(["ldapdelete", "-x", "-H", server.uri, "-D", f"cn=admin,{BASE}", "-w",
                    "secret", *dns], check=True, capture_output=True, timeout=30)


REFRESHING = "entry_cache_timeout = 2\nrefresh_expired_interval = 1\n"
# bob, and dev: alice's group, through which she is in all and top
GONE_WARM = [["getent", "passwd", "bob"], ["getent", "passwd", "10002"],
             ["getent", "group", "dev"], ["getent", "group", "20010"], ["id", "alice"],
             ["id", "bob"], ["getent", "passwd", "alice"]]


def warm_gone(d):
    for _ in range(2):  # the second round answers from the memory cache
        got = d.ns.run_many(GONE_WARM)
        assert all(r.rc == 0 for r in got), got
    assert {"20010(dev)", "20011(all)", "20014(top)"} <= set(got[4].out.split("groups=")[1]
                                                             .strip().split(",")), got[4]


def test_refresh_removes_entries_deleted_from_the_directory(server_r, module_daemons, idcache):
    """refresh_expired_interval: a user and a group deleted from the
    directory are removed from the cache by the background refresh alone
    (neither is looked up by name again), with their memberships: by uid
    and gid they no longer answer (the memory cache included), and alice,
    who was in dev (and through it in all and top), no longer lists them."""
    r = server_r
    d = start_daemon(module_daemons, r.uri, REFRESHING)
    warm_gone(d)
    assert cache_holds(idcache, d, "user", "bob") and cache_holds(idcache, d, "group", "dev")
    s0 = status(idcache, d)
    ldap_delete(r, f"uid=bob,ou=people,{BASE}", f"cn=dev,ou=groups,{BASE}")
    ok, _ = nsenv.wait_for(lambda: cache_holds(idcache, d, "user", "bob") is None
                           and cache_holds(idcache, d, "group", "dev") is None,
                           timeout=10, interval=0.2)
    assert ok, d.log()[-3000:]
    alice = cache_holds(idcache, d, "user", "alice")
    assert alice and alice["groups"] == "20001", alice  # ops only: dev, all, top gone
    assert cache_holds(idcache, d, "group", "all") and cache_holds(idcache, d, "group", "ops")
    got = d.ns.run_many([["getent", "passwd", "10002"], ["getent", "group", "20010"],
                         ["id", "-G", "alice"], ["getent", "passwd", "alice"],
                         ["getent", "group", "ops"]])
    assert got[0].rc == 2 and got[0].out == "", got[0]
    assert got[1].rc == 2 and got[1].out == "", got[1]
    assert got[2].rc == 0 and sorted(got[2].out.split()) == ["10001", "20001"], got[2]
    assert got[3].rc == 0 and got[3].out.startswith("alice:x:10001:"), got[3]
    assert got[4].rc == 0 and got[4].out.startswith("ops:x:20001:"), got[4]
    assert "refresh: 1 users and 1 groups no longer in the directory removed" in d.log()
    s1 = status(idcache, d)
    # told record by record: the passwd and group maps were not reset
    for m in ("passwd", "group"):
        assert s1[f"memcache_{m}_generation"] == s0[f"memcache_{m}_generation"], (m, s0, s1)


def test_refresh_deletes_nothing_when_the_server_stops(server_r, module_daemons, idcache):
    """The server stops answering in the middle of the refreshes (SIGSTOP:
    searches time out), then goes away: the domain goes offline and every
    cached entry stays, served as before."""
    r = server_r
    d = start_daemon(module_daemons, r.uri, REFRESHING)
    warm_gone(d)
    nsenv.stop_process(r.pid)
    ok, _ = nsenv.wait_for(lambda: status(idcache, d)["domain.dir.state"] == "offline",
                           timeout=15, interval=0.2)
    assert ok, d.log()[-3000:]
    os.kill(r.pid, signal.SIGCONT)
    r.stop()
    time.sleep(3)  # refresh intervals pass while the server is down
    for kind, name in (("user", "bob"), ("user", "alice"), ("group", "dev"), ("group", "top")):
        assert cache_holds(idcache, d, kind, name), (kind, name, d.log()[-3000:])
    got = d.ns.run_many(GONE_WARM)
    assert all(x.rc == 0 for x in got), got
    assert "20010(dev)" in got[4].out, got[4]
    assert "no longer in the directory" not in d.log()


def test_concurrent_clients_share_the_directory(env, module_daemons, idcache):
    """Many clients at once, each asking names the cache does not hold yet:
    every one gets its answer (deferred replies, in order per connection)."""
    d = start_daemon(module_daemons, env.servers["b"].uri)
    script = r'''
import json, pwd, grp, threading
res = {}
def one(i):
    out = []
    for n in ("alice", "bob", "nosuch%d" % i, "carol", "frank"):
        try:
            out.append(pwd.getpwnam(n).pw_uid)
        except KeyError:
            out.append(None)
    # top nests all, which lists carol and nests dev (alice, bob)
    out.append(sorted(grp.getgrnam("top").gr_mem) == ["alice", "bob", "carol"])
    res[i] = out
ts = [threading.Thread(target=one, args=(i,)) for i in range(16)]
[t.start() for t in ts]
[t.join() for t in ts]
print(json.dumps(res))
'''
    res = d.ns.run_py(script)
    assert len(res) == 16
    for out in res.values():
        assert out == [10001, 10002, None, 10003, 10006, True], res
    st = status(idcache, d)
    assert int(st["domain.dir.ldap_lookups"]) < 16 * 5, st  # identical lookups shared


def test_enumerate_loads_the_directory(env, module_daemons, idcache):
    """enumerate = true: the whole directory is loaded (paged) without a
    lookup, and enumeration lists it after the files domain."""
    d = start_daemon(module_daemons, env.servers["b"].uri,
                     "enumerate = true\nldap_page_size = 5\n")
    want = Directory(env.servers["b"].uri)
    got, _ = nsenv.wait_for(lambda: len(d.ns.run(["getent", "group"]).out.splitlines()) > 30,
                            timeout=10)
    assert got, d.log()[-2000:]
    users = d.ns.run(["getent", "passwd"]).out.splitlines()
    assert users[0].startswith("loc:")  # configured order
    for u in USERS:
        assert want.passwd_line(u) in users
    groups = [x.split(":")[0] for x in d.ns.run(["getent", "group"]).out.splitlines()]
    assert set(GROUPS) | {"p01", "p25"} <= set(groups)
    assert d.stop() == 0  # no enumeration of b behind later tests' search counts


def cpu_seconds(pid):
    """User plus system CPU time a process has used so far."""
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def test_idle_after_enumeration(env, module_daemons, idcache):
    """Once the enumeration's last page is stored and nothing is in flight,
    the daemon sleeps until its next timer: it does not spin on a zero
    timeout (a page that yields the loop used to leave "messages waiting"
    set with no search left to read them, and the timer fired at once
    forever). A spinning daemon burns a whole core; an idle one next to
    nothing, so 3 s of idling must cost well under 1 s of CPU."""
    d = start_daemon(module_daemons, env.servers["b"].uri,
                     "enumerate = true\nldap_page_size = 5\n")
    done, _ = nsenv.wait_for(
        lambda: (lambda st: int(st["domain.dir.groups"]) > 0
                 and st["domain.dir.ldap_in_flight"] == "0")(status(idcache, d)), timeout=10)
    assert done, d.log()[-2000:]
    pid = int(status(idcache, d)["pid"])
    c0 = cpu_seconds(pid)
    time.sleep(3)
    used = cpu_seconds(pid) - c0
    assert used < 0.5, f"idcached used {used:.2f} s of CPU in 3 s idle"
    assert d.stop() == 0


def big_ldif(path, nusers, ngroups, members=10):
    """A directory of nusers users (e0..) and ngroups rfc2307bis groups
    (g0..) of `members` member DNs each."""
    out = [f"dn: {BASE}\nobjectClass: dcObject\nobjectClass: organization\no: Example\n"
           "dc: example\n",
           f"dn: ou=people,{BASE}\nobjectClass: organizationalUnit\nou: people\n",
           f"dn: ou=groups,{BASE}\nobjectClass: organizationalUnit\nou: groups\n"]
    for i in range(nusers):
        out.append(f"dn: uid=e{i},ou=people,{BASE}\nobjectClass: account\n"
                   f"objectClass: posixAccount\nuid: e{i}\ncn: E {i}\n"
                   f"uidNumber: {200000 + i}\ngidNumber: {300000 + i % ngroups}\n"
                   f"homeDirectory: /home/e{i}\nloginShell: /bin/sh\n")
    for j in range(ngroups):
        mem = "".join(f"member: uid=e{(j * members + k) % nusers},ou=people,{BASE}\n"
                      for k in range(members))
        out.append(f"dn: cn=g{j},ou=groups,{BASE}\nobjectClass: posixGroup\n"
                   f"objectClass: extensibleObject\ncn: g{j}\ngidNumber: {300000 + j}\n{mem}")
    Path(path).write_text("\n".join(out))


def test_enumeration_commits_by_page_and_keeps_serving(env, module_daemons, idcache):
    """enumerate = true over 10,000 users and 1,000 groups: the provider
    commits page by page and returns to the event loop between pages, so a
    files-domain user (through the socket: memory cache off) and `idcache
    status` keep answering quickly while it runs, and the domain fills in
    progressively (several commits observed while the enumeration is in
    flight). Latencies are printed."""
    nusers, ngroups, page = 10000, 1000, 250
    ldif = env.base / "big.ldif"
    big_ldif(ldif, nusers, ngroups)
    s = Slapd(env.base, "big", ldif=ldif)
    env.servers["big"] = s  # stopped by the env fixture too
    s.start()
    try:
        d = module_daemons.start(
            LOCAL_PASSWD, LOCAL_GROUP, idcache_conf="domains = local, dir\n",
            domain_conf=ldap_domain(s.uri, f"enumerate = true\nldap_page_size = {page}\n"),
            start=False)
        probe = r'''
import json, pwd, sys, time
lat, t_end = [], None
deadline = time.monotonic() + 30
while time.monotonic() < deadline:
    t0 = time.monotonic()
    try:
        ok = pwd.getpwnam("loc").pw_uid == 5000
    except KeyError:
        ok = False
    dt = time.monotonic() - t0
    if ok:
        lat.append(dt)
        if t_end is None:
            t_end = time.monotonic() + float(sys.argv[1])
    if t_end is not None and time.monotonic() > t_end:
        break
    time.sleep(0.005)
print(json.dumps(lat))
'''
        box = {}

        def run_probe():
            box["lat"] = d.ns.run_py(probe, args=("4",), env={"IDCACHE_MEMCACHE": "no"})

        th = threading.Thread(target=run_probe)
        th.start()
        try:
            d.start(timeout=20)
            status_lat, commits_in_flight = [], set()
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                t0 = time.monotonic()
                st = status(idcache, d)
                status_lat.append(time.monotonic() - t0)
                c, busy = int(st["domain.dir.ldap_commits"]), int(st["domain.dir.ldap_in_flight"])
                if busy:
                    commits_in_flight.add(c)
                elif c:
                    break
                time.sleep(0.01)
        finally:
            th.join(timeout=60)
        lat = box.get("lat")
        assert lat, "the files-domain probe never got an answer"
        print(f"\nenumeration of {nusers} users / {ngroups} groups, page {page}: "
              f"ldap_commits={c}, getpwnam(loc) via socket n={len(lat)} "
              f"max={max(lat) * 1000:.1f} ms, idcache status n={len(status_lat)} "
              f"max={max(status_lat) * 1000:.1f} ms, commits seen while in flight: "
              f"{len(commits_in_flight)}")
        assert not busy, "the enumeration did not finish within 60 s"
        assert max(lat) < 1.0, f"a files-domain lookup took {max(lat):.3f} s"
        assert max(status_lat) < 1.0, f"idcache status took {max(status_lat):.3f} s"
        assert c >= nusers // page, f"expected a commit per page, got {c}"
        assert len(commits_in_flight) > 1, "no progressive fill observed"
        users = d.ns.run(["getent", "passwd"]).out.splitlines()
        assert sum(1 for u in users if u.startswith("e")) == nusers
        groups = d.ns.run(["getent", "group", "g7"]).out.strip()
        assert groups.startswith("g7:x:300007:") and "e70" in groups, groups
    finally:
        s.stop()


def test_enumeration_off_the_loop_answers_others_correctly(env, module_daemons, idcache):
    """While an enumeration of 3,000 users and 300 groups runs in pages of
    100 (each stored on the committer thread, its users then let go of),
    other clients asking through the socket (memory cache off) get correct
    answers: files-domain users, directory users already stored and ones not
    yet reached (a lookup of its own). Member DNs are resolved by DN
    (ldap_member_names_from_rdn = false), so a group stored after its
    members' pages were let go of finds them by their DNs' hashes. The only
    time bound is "did not hang" (30 s a call)."""
    nusers, ngroups, page = 3000, 300, 100
    ldif = env.base / "letgo.ldif"
    big_ldif(ldif, nusers, ngroups)
    # a group in the last page nesting g0, whose page was let go of by then
    with open(ldif, "a") as f:
        f.write(f"\ndn: cn=gnest,ou=groups,{BASE}\nobjectClass: posixGroup\n"
                f"objectClass: extensibleObject\ncn: gnest\ngidNumber: 399999\n"
                f"member: cn=g0,ou=groups,{BASE}\n")
    s = Slapd(env.base, "letgo", ldif=ldif)
    env.servers["letgo"] = s
    s.start()
    try:
        d = module_daemons.start(
            LOCAL_PASSWD, LOCAL_GROUP, idcache_conf="domains = local, dir\n",
            domain_conf=ldap_domain(s.uri, f"enumerate = true\nldap_page_size = {page}\n"
                                    "ldap_member_names_from_rdn = false\n"),
            start=False)
        probe = r'''
import json, pwd, random, sys, time
n = int(sys.argv[1])
rnd = random.Random(17)
out, deadline = [], time.monotonic() + 40
while time.monotonic() < deadline and len(out) < 400:
    i = rnd.randrange(-1, n)
    name, want = ("loc", 5000) if i < 0 else (f"e{i}", 200000 + i)
    t0 = time.monotonic()
    try:
        got = pwd.getpwnam(name).pw_uid
    except KeyError:
        got = None
    out.append([name, want, got, time.monotonic() - t0])
    time.sleep(0.01)
print(json.dumps(out))
'''
        box = {}

        def run_probe():
            box["out"] = d.ns.run_py(probe, args=(str(nusers),), env={"IDCACHE_MEMCACHE": "no"})

        th = threading.Thread(target=run_probe)
        try:
            # the probe only once the socket is up: a lookup before it is
            # glibc's next source answering (no such user there), not ours
            d.start(timeout=20)
            th.start()
            in_flight_seen, deadline = 0, time.monotonic() + 120
            while time.monotonic() < deadline:
                st = status(idcache, d)
                busy = int(st["domain.dir.ldap_in_flight"])
                if busy:
                    in_flight_seen += 1
                elif int(st["domain.dir.ldap_commits"]):
                    break
                time.sleep(0.05)
        finally:
            if th.ident is not None:  # started
                th.join(timeout=120)
        assert not busy, "the enumeration did not finish within 120 s"
        out = box.get("out")
        assert out, "the probe never got an answer"
        wrong = [(n, w, g) for n, w, g, _ in out if g != w]
        slowest = max(t for *_, t in out)
        print(f"\n{len(out)} lookups during an enumeration of {nusers} users in pages of "
              f"{page}: slowest {slowest * 1000:.1f} ms; status polls while in flight: "
              f"{in_flight_seen}")
        assert not wrong, f"wrong or missing answers: {wrong[:5]}"
        assert slowest < 30, f"a lookup took {slowest:.1f} s"
        assert in_flight_seen > 0, "the enumeration was over before it could be watched"
        users = d.ns.run(["getent", "passwd"]).out.splitlines()
        assert sum(1 for u in users if u.startswith("e")) == nusers
        # g7's member DNs name e70..e79: resolved by DN after their pages went
        g7 = d.ns.run(["getent", "group", "g7"]).out.strip().split(":")
        assert g7[2] == "300007", g7
        assert sorted(g7[3].split(",")) == sorted(f"e{70 + k}" for k in range(10)), g7
        # e0 is in g0, so in gnest: g0 found by its DN's hash when gnest was stored
        ids = d.ns.run(["id", "-Gn", "e0"]).out.split()
        assert "g0" in ids and "gnest" in ids, ids
    finally:
        s.stop()


# Server B is plain ldap://: a bind password there needs the override.
INSECURE = "ldap_auth_disable_tls_never_use_in_production = true\n"


def test_bind_over_plain_ldap_refused(env, module_daemons, idcache):
    """A bind password over plain ldap:// without StartTLS is refused at
    start, naming the domain; over StartTLS it binds. ldap_tls_reqcert =
    allow is accepted with a warning."""
    a, b = env.servers["a"], env.servers["b"]
    pwdir = nsenv.make_private_dir("idc-ldap-pw-")
    pw = pwdir / "bind.pw"
    pw.write_text("secret\n")
    os.chown(pw, nsenv.DAEMON_UID, nsenv.DAEMON_UID)
    os.chmod(pw, 0o600)
    extra = f"ldap_default_bind_dn = cn=admin,{BASE}\nldap_default_authtok_file = {pw}\n"
    try:
        d = module_daemons.start(
            LOCAL_PASSWD, LOCAL_GROUP, idcache_conf="domains = local, dir\n",
            domain_conf=ldap_domain(b.uri, extra), start=False)
        with pytest.raises(nsenv.DaemonError) as e:
            d.start(timeout=10)
        assert "[domain/dir]: a bind password over plain " + b.uri in str(e.value), e.value
        assert "ldap_auth_disable_tls_never_use_in_production = true" in str(e.value)
        d.expected_exit = True
        before = a.srch_count()
        d = start_daemon(module_daemons, a.uri,
                         extra + "ldap_id_use_start_tls = true\n"
                         f"ldap_tls_cacert = {env.certs}/ca.pem\n"
                         "ldap_tls_reqcert = allow\n")
        r = d.ns.run(["getent", "passwd", "carol"])
        assert r.rc == 0 and r.out.startswith("carol:x:10003:"), (r, d.log()[-2000:])
        assert a.srch_count() > before
        assert "ldap_tls_reqcert = allow: the server's certificate is not verified" in d.log()
        assert "in clear" not in d.log()
    finally:
        nsenv.remove_tree(pwdir)


def test_simple_bind_and_password_file_rules(env, module_daemons, idcache):
    """A bind password file the daemon's user owns, mode 0600, works; one
    group can read is refused at start, naming the file."""
    b = env.servers["b"]
    pwdir = nsenv.make_private_dir("idc-ldap-pw-")
    pw = pwdir / "bind.pw"
    pw.write_text("secret\n")
    os.chown(pw, nsenv.DAEMON_UID, nsenv.DAEMON_UID)
    os.chmod(pw, 0o600)
    extra = (f"ldap_default_bind_dn = cn=admin,{BASE}\nldap_default_authtok_file = {pw}\n"
             f"{INSECURE}")
    try:
        d = start_daemon(module_daemons, b.uri, extra)
        r = d.ns.run(["getent", "passwd", "carol"])
        assert r.rc == 0 and r.out.startswith("carol:x:10003:"), r
        assert status(idcache, d)["domain.dir.state"] == "online"
        assert "the bind password crosses plain ldap:// in clear" in d.log()
        os.chmod(pw, 0o640)
        d2 = module_daemons.start(
            LOCAL_PASSWD, LOCAL_GROUP, idcache_conf="domains = local, dir\n",
            domain_conf=ldap_domain(b.uri, extra), start=False)
        with pytest.raises(nsenv.DaemonError) as e:
            d2.start(timeout=10)
        assert f"{pw}: ldap_default_authtok_file: readable or writable by group" in str(e.value)
        d2.expected_exit = True
    finally:
        nsenv.remove_tree(pwdir)


def test_root_only_password_file_and_symlink(env, module_daemons, idcache):
    """The password file is read at start while still root, on the
    descriptor it checks: a root-owned 0600 file works although the daemon
    runs as its own user (and keeps working across a reload, which can no
    longer open it); a symbolic link to a good file is refused at start."""
    b = env.servers["b"]
    pwdir = nsenv.make_private_dir("idc-ldap-pw-")
    os.chmod(pwdir, 0o755)
    pw = pwdir / "bind.pw"
    pw.write_text("secret\n")
    os.chown(pw, 0, 0)
    os.chmod(pw, 0o600)
    extra = (f"ldap_default_bind_dn = cn=admin,{BASE}\nldap_default_authtok_file = {pw}\n"
             f"{INSECURE}")
    try:
        d = start_daemon(module_daemons, b.uri, extra)
        pid = d.proc.pid
        uids = [ln for ln in Path(f"/proc/{pid}/status").read_text().splitlines()
                if ln.startswith("Uid:")]
        # the wrapper's namespace may sit between: check the daemon's own
        # process or its only child
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        for c in children:
            uids = [ln for ln in Path(f"/proc/{c}/status").read_text().splitlines()
                    if ln.startswith("Uid:")]
        assert uids and all(int(x) == nsenv.DAEMON_UID for x in uids[0].split()[1:]), uids
        r = d.ns.run(["getent", "passwd", "carol"])
        assert r.rc == 0 and r.out.startswith("carol:x:10003:"), (r, d.log()[-2000:])
        assert status(idcache, d)["domain.dir.state"] == "online"
        assert "Invalid credentials" not in d.log()
        # reload as the daemon's user: the file cannot be opened now; the
        # password read at start is kept and binds again
        cli(idcache, d, "reload")
        r = d.ns.run(["getent", "passwd", "bob"])
        assert r.rc == 0 and r.out.startswith("bob:x:10002:"), (r, d.log()[-2000:])
        assert "keeping the password read from it at start" in d.log()
        assert status(idcache, d)["domain.dir.state"] == "online"

        link = pwdir / "bind.lnk"
        link.symlink_to(pw)
        extra2 = (f"ldap_default_bind_dn = cn=admin,{BASE}\n"
                  f"ldap_default_authtok_file = {link}\n{INSECURE}")
        d2 = module_daemons.start(
            LOCAL_PASSWD, LOCAL_GROUP, idcache_conf="domains = local, dir\n",
            domain_conf=ldap_domain(b.uri, extra2), start=False)
        with pytest.raises(nsenv.DaemonError) as e:
            d2.start(timeout=10)
        assert f"{link}: ldap_default_authtok_file: a symbolic link; refusing it" in str(e.value)
        d2.expected_exit = True
    finally:
        nsenv.remove_tree(pwdir)


def test_uid0_and_bad_fields_are_ignored(env, module_daemons, idcache):
    """Entries with uidNumber or gidNumber 0 (below the default min_id = 1)
    and passwd fields with ':', a newline or ESC are ignored and logged
    once with their DN; lookups by an id below min_id never reach the
    directory; alice's membership of wheel0 (gid 0) is not reported."""
    b = env.servers["b"]
    d = start_daemon(module_daemons, b.uri)
    argvs = [["getent", "passwd", u] for u in IGNORED_USERS]
    argvs += [["getent", "group", "wheel0"], ["id", "-G", "alice"]]
    got = d.ns.run_many(argvs)
    for r in got[:len(IGNORED_USERS) + 1]:
        assert r.rc == 2 and r.out == "", r
    assert "0" not in got[-1].out.split(), got[-1]
    log = d.log()
    for u in IGNORED_USERS:
        assert log.count(f'entry "uid={u},ou=people,{BASE}"') == 1, (u, log[-3000:])
    assert f'"cn=wheel0,ou=groups,{BASE}": gidNumber 0 outside min_id 1.. (no max_id)' in log
    assert "uidNumber 0 or gidNumber 0 outside min_id 1" in log
    assert "gecos is too long or holds a NUL, ':' or a control character" in log
    assert "homeDirectory is too long" in log and "loginShell is too long" in log
    # by id: below min_id, answered without a search
    before = b.srch_count()
    got = d.ns.run_many([["getent", "passwd", "0"], ["getent", "group", "0"]])
    assert [r.rc for r in got] == [2, 2], got
    assert b.srch_count() == before
    # asked again: logged once only
    d.ns.run(["getent", "passwd", "root0"])
    assert d.log().count(f'entry "uid=root0,ou=people,{BASE}"') == 1


def test_narrowed_id_range_drops_what_the_cache_held(env, module_daemons, idcache):
    """Entries a wider id range let into the cache (here min_id = 0: uid 0
    and gid 0 allowed) are dropped when the domain restarts with the range
    narrowed (the default min_id = 1), before any lookup is answered: not
    served from the cache or the memory cache, logged once."""
    b = env.servers["b"]
    d = start_daemon(module_daemons, b.uri, "min_id = 0\n")
    got = d.ns.run_many([["getent", "passwd", "root0"], ["getent", "group", "wheel0"],
                         ["getent", "passwd", "alice"]])
    assert [r.rc for r in got] == [0, 0, 0], got
    assert got[0].out.split(":")[2] == "0", got[0]
    conf = d.conf.read_text()
    assert "min_id = 0\n" in conf
    d.conf.write_text(conf.replace("min_id = 0\n", ""))
    cli(idcache, d, "reload")
    assert "1 users and 1 groups cached outside min_id 1.. (no max_id) removed" in d.log(), \
        d.log()[-2000:]
    got = d.ns.run_many([["getent", "passwd", "root0"], ["getent", "passwd", "0"],
                         ["getent", "group", "wheel0"], ["getent", "passwd", "alice"]])
    assert [r.rc for r in got] == [2, 2, 2, 0], got
    cli(idcache, d, "reload")  # nothing left to drop: not logged again
    assert d.log().count("cached outside min_id") == 1


NSS_REQUESTS = ("requests.get", "requests.set", "requests.end", "requests.initgroups")


def nss_requests(st):
    return {k: int(v) for k, v in st.items() if k.startswith(NSS_REQUESTS)}


def requests_grown(before, after):
    """The NSS request counters that grew between two status dicts."""
    a, b = nss_requests(before), nss_requests(after)
    return {k: v - a.get(k, 0) for k, v in b.items() if v != a.get(k, 0)}


def test_cold_lookup_keeps_memory_cache(env, module_daemons, idcache):
    """A directory lookup that stores one user drops only that user's
    records from the memory cache: no map is reset, and the records of
    other users (LDAP and local) and of groups still answer without a
    request to the daemon."""
    b = env.servers["b"]
    d = start_daemon(module_daemons, b.uri)
    warm = [["getent", "passwd", "alice"], ["getent", "passwd", "10002"],
            ["getent", "passwd", "loc"], ["getent", "group", "ops"], ["id", "alice"]]
    for argv in warm:  # twice: the second run answers from the maps
        assert d.ns.run(argv).rc == 0, argv
    s0 = status(idcache, d)
    got = d.ns.run_many(warm)
    assert all(r.rc == 0 for r in got), got
    s1 = status(idcache, d)
    # what a warm round still asks (`id` looks up its primary gid, which
    # names no group: misses are not kept in the maps)
    warm_asks = requests_grown(s0, s1)
    assert warm_asks.get("requests.getpwnam", 0) == 0, warm_asks
    assert warm_asks.get("requests.initgroups", 0) == 0, warm_asks
    # a cold lookup: carol comes from the directory and is stored
    r = d.ns.run(["getent", "passwd", "carol"])
    assert r.rc == 0 and r.out.startswith("carol:x:10003:"), r
    s2 = status(idcache, d)
    assert int(s2["domain.dir.ldap_commits"]) > int(s1["domain.dir.ldap_commits"]), s2
    for m in ("passwd", "group", "initgroups"):
        assert s2[f"memcache_{m}_generation"] == s1[f"memcache_{m}_generation"], (m, s1, s2)
    # the others' records are still hits: no request grows
    got = d.ns.run_many(warm)
    assert all(r.rc == 0 for r in got), got
    s3 = status(idcache, d)
    grown = requests_grown(s2, s3)
    assert grown == warm_asks, f"records of other users were dropped: {grown} vs {warm_asks}"
    # carol's own record is now cached and served from the map too
    d.ns.run(["getent", "passwd", "carol"])
    s4 = status(idcache, d)
    d.ns.run(["getent", "passwd", "carol"])
    assert nss_requests(status(idcache, d)) == nss_requests(s4)


def test_wrong_hostname_certificate_is_refused(env, module_daemons, idcache):
    w = env.servers["w"]
    before = w.srch_count()  # slapd.sh's own start-up probes
    d = start_daemon(module_daemons, w.uri,
                     "ldap_id_use_start_tls = true\n"
                     f"ldap_tls_cacert = {env.certs}/ca.pem\n")
    r = d.ns.run(["getent", "passwd", "alice"])
    assert r.rc == 2, r
    st = status(idcache, d)
    assert st["domain.dir.state"] == "offline", st
    assert "StartTLS" in st["domain.dir.last_error"], st
    assert "StartTLS" in d.log() and "offline" in d.log()
    assert w.srch_count() == before  # nothing was asked over the refused channel


@pytest.mark.parametrize("cacert", ["missing", "unreadable", "directory", "not-pem"])
def test_unusable_ca_file_is_named_with_the_uri(env, module_daemons, idcache, cacert):
    """An ldap_tls_cacert that does not exist, that the daemon's user
    cannot read, that is a directory or holds no certificate: the
    connection fails before anything is sent, and the error (status and
    log) names the URI, the option, the file and why, not a network
    failure ("Can't contact LDAP server")."""
    a = env.servers["a"]
    path = env.base / f"ca-{cacert}.pem"
    if cacert == "unreadable":
        shutil.copy(env.certs / "ca.pem", path)
        os.chmod(path, 0o600)  # root's: the daemon runs as idcache
    elif cacert == "directory":
        path.mkdir()
    elif cacert == "not-pem":
        path.write_text("no certificate here\n")
        os.chmod(path, 0o644)
    before = a.srch_count()
    d = start_daemon(module_daemons, a.uri,
                     f"ldap_id_use_start_tls = true\nldap_tls_cacert = {path}\n")
    r = d.ns.run(["getent", "passwd", "alice"])
    assert r.rc == 2, r
    st = status(idcache, d)
    err = st["domain.dir.last_error"]
    why = {"missing": "No such file or directory", "unreadable": "Permission denied",
           "directory": "Is a directory",
           "not-pem": "no CA certificate could be read from it"}[cacert]
    assert err.startswith(f"{a.uri}: ldap_tls_cacert {path}: {why}"), err
    assert "Can't contact" not in err, err
    assert f"ldap domain dir: {err}" in d.log(), d.log()[-2000:]
    assert a.srch_count() == before


def test_failover_and_offline(env, module_daemons, idcache):
    f, b = env.servers["f"], env.servers["b"]
    dead = f"ldap://127.0.0.1:{free_port()}"
    only_f = start_daemon(module_daemons, f.uri, "offline_timeout = 30\n")
    f_then_b = start_daemon(module_daemons, f"{dead}, {f.uri}, {b.uri}")
    for d in (only_f, f_then_b):
        r = d.ns.run(["id", "alice"])
        assert r.rc == 0 and "20014(top)" in r.out, r
    assert status(idcache, f_then_b)["domain.dir.server"] == f.uri  # the dead one skipped
    f.stop()

    # failover: the next server in the list answers
    r = f_then_b.ns.run(["getent", "passwd", "bob"])
    assert r.rc == 0 and r.out.startswith("bob:x:10002:"), r
    assert status(idcache, f_then_b)["domain.dir.server"] == b.uri

    # offline: cached entries are served, even expired; unknown names fail fast
    d = only_f
    cli(idcache, d, "expire", "--all")
    t0 = time.monotonic()
    got = d.ns.run_many([["getent", "passwd", "alice"], ["id", "alice"],
                         ["getent", "group", "top"], ["getent", "passwd", "bob"],
                         ["getent", "passwd", "nosuchuser"]])
    elapsed = time.monotonic() - t0
    assert got[0].rc == 0 and got[0].out.startswith("alice:x:10001:"), got[0]
    assert got[1].rc == 0 and "20014(top)" in got[1].out, got[1]
    assert got[2].rc == 0, got[2]
    assert got[3].rc == 2 and got[4].rc == 2, got
    assert elapsed < 3, f"offline lookups took {elapsed:.2f}s"
    st = status(idcache, d)
    assert st["domain.dir.state"] == "offline", st
    assert st["domain.dir.last_error"], st
    assert "offline" in d.log()


# ==== the socket protocol: deferred replies ==================================================

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "load"))
import idcproto as P  # noqa: E402


def read_replies(sock, n, timeout=20):
    """n reply frames from sock, in arrival order."""
    rd, out = P.Reader(), []
    sock.settimeout(timeout)
    while len(out) < n:
        chunk = sock.recv(1 << 20)
        if not chunk:
            break
        out += rd.feed(chunk)
    return out


def test_pipelined_replies_keep_their_order(env, module_daemons):
    """One connection sends lookups back to back, some answered by the
    files domain at once, some waiting for the directory, then stops
    sending: every reply comes, in request order."""
    d = start_daemon(module_daemons, env.servers["b"].uri)
    c = P.Client(d.run_dir / "nss.sock")
    reqs = [(P.GETPWNAM, "loc"), (P.GETPWNAM, "alice"), (P.GETGRGID, 5000),
            (P.GETPWNAM, "nosuchuser"), (P.INITGROUPS, "bob"), (P.GETPWUID, 10003),
            (P.GETGRNAM, "top")]
    c.s.sendall(b"".join(P.request_frame(op, key) for op, key in reqs))
    c.s.shutdown(socket.SHUT_WR)  # done sending: answer, then close
    got = read_replies(c.s, len(reqs))
    assert [cmd for cmd, _, _ in got] == [op for op, _ in reqs]
    st = [s for _, s, _ in got]
    assert st == [P.OK, P.OK, P.OK, P.NOTFOUND, P.OK, P.OK, P.OK], got
    assert P.decode_passwd(got[0][2])[0] == "loc"
    assert P.decode_passwd(got[1][2])[:4] == ("alice", "x", 10001, 10001)
    assert P.decode_group(got[2][2])[0] == "locg"
    assert sorted(P.decode_gids(got[4][2])) == [20001, 20010, 20011, 20014]
    assert P.decode_passwd(got[5][2])[0] == "carol"
    assert P.decode_group(got[6][2])[:3] == ("top", "x", 20014)
    assert c.s.recv(1) == b""  # closed after the last reply
    c.close()


class Blackhole:
    """A TCP port that takes connections (the kernel's backlog) and never
    answers: a server that accepts and then says nothing."""

    def __init__(self):
        self.s = socket.socket()
        self.s.bind(("127.0.0.1", 0))
        self.s.listen(16)
        self.uri = f"ldap://127.0.0.1:{self.s.getsockname()[1]}"

    def close(self):
        self.s.close()


def test_silent_server_does_not_stall_others(module_daemons):
    """A lookup waiting on a server that never answers waits for
    ldap_search_timeout, then is not found (offline); meanwhile other
    connections are answered at once."""
    bh = Blackhole()
    try:
        d = start_daemon(module_daemons, bh.uri)
        slow = P.Client(d.run_dir / "nss.sock")
        slow.s.sendall(P.request_frame(P.GETPWNAM, "alice"))
        t0 = time.monotonic()
        fast = P.Client(d.run_dir / "nss.sock")
        assert fast.getpwnam("loc")[0] == "loc"
        assert time.monotonic() - t0 < 1.0
        fast.close()
        (cmd, st, _), = read_replies(slow.s, 1)
        waited = time.monotonic() - t0
        assert (cmd, st) == (P.GETPWNAM, P.NOTFOUND)
        assert 2.0 < waited < 8.0, waited  # ldap_search_timeout = 3
        slow.close()
        assert "offline" in d.log()
    finally:
        bh.close()



def test_stalled_bind_does_not_freeze_the_daemon(module_daemons):
    """A server that accepts the connection and never answers the bind:
    the setup runs from the event loop (bind by message id, its deadline a
    timer), so a files-domain lookup keeps answering at once while the
    handshake waits; after ldap_network_timeout the domain goes offline."""
    bh = Blackhole()
    pwdir = nsenv.make_private_dir("idc-ldap-stall-")
    pw = pwdir / "bind.pw"
    pw.write_text("secret\n")
    os.chown(pw, nsenv.DAEMON_UID, nsenv.DAEMON_UID)
    os.chmod(pw, 0o600)
    try:
        d = start_daemon(module_daemons, bh.uri,
                         f"ldap_default_bind_dn = cn=admin,{BASE}\n"
                         f"ldap_default_authtok_file = {pw}\n"
                         "ldap_auth_disable_tls_never_use_in_production = true\n")
        slow = P.Client(d.run_dir / "nss.sock")
        t0 = time.monotonic()
        slow.s.sendall(P.request_frame(P.GETPWNAM, "alice"))  # connect + bind: stalls
        lat = []
        fast = P.Client(d.run_dir / "nss.sock")
        while True:
            t = time.monotonic()
            assert fast.getpwnam("loc")[0] == "loc"
            lat.append(time.monotonic() - t)
            if time.monotonic() - t0 > 1.5:  # inside the 2 s handshake deadline
                break
            time.sleep(0.1)
        fast.close()
        print(f"files lookups while the bind stalls: {len(lat)}, "
              f"max {max(lat) * 1000:.1f} ms, mean {sum(lat) / len(lat) * 1000:.1f} ms")
        assert len(lat) >= 5 and max(lat) < 1.0, lat
        (cmd, st, _), = read_replies(slow.s, 1)
        waited = time.monotonic() - t0
        print(f"the stalled lookup was answered after {waited:.2f} s")
        assert (cmd, st) == (P.GETPWNAM, P.NOTFOUND)
        assert 1.5 < waited < 8.0, waited  # ldap_network_timeout = 2
        slow.close()
        assert "bind: Timed out" in d.log(), d.log()[-2000:]
        assert "offline" in d.log()
    finally:
        bh.close()
        nsenv.remove_tree(pwdir)


VALGRIND = nsenv.VALGRIND


@pytest.mark.skipif(VALGRIND is None, reason="valgrind not installed")
def test_ldap_daemon_under_valgrind(env, idcached_bin, nss_module_dir, idcache):
    """Lookups, deferred replies, status and expire, a reload and a stop
    while a lookup waits on a silent server: no invalid access, no leak.
    The silent domain polls, so it connects at its first lookup."""
    import signal
    base = nsenv.make_private_dir("idc-ldap-vg-")
    ns = nsenv.NsEnv(nss_module_dir, base / "run", base / "ns")
    wrap, vglog = nsenv.valgrind_wrap(ns, base)
    bh = Blackhole()
    b = env.servers["b"]
    d = nsenv.Daemon(idcached_bin, base, LOCAL_PASSWD, LOCAL_GROUP,
                     idcache_conf="domains = local, dir, silent\n",
                     domain_conf=ldap_domain(b.uri) + ldap_domain(
                         bh.uri, "ldap_sync = poll\n").replace("[domain/dir]", "[domain/silent]"),
                     wrap=wrap)
    ok = False
    try:
        d.start(timeout=120)
        # waits on the silent server (dir does not know the name): reload meanwhile
        c = P.Client(d.run_dir / "nss.sock", timeout=60)
        c.s.sendall(P.request_frame(P.GETPWNAM, "nobody-here"))
        nsenv.wait_for(lambda: "silent: connected" in d.log(), timeout=30)
        d.signal(signal.SIGHUP)
        (cmd, st, _), = read_replies(c.s, 1, timeout=60)
        # the lookup the reload interrupted is asked again of the domain in
        # force, as silent: "not found" once that one is offline (the reload
        # itself answers nothing: test_attack_reload.py)
        assert cmd == P.GETPWNAM and st == P.NOTFOUND
        assert "configuration reloaded" in d.log()
        assert "silent: offline" in d.log()
        r = ns.run_many([["id", "alice"], ["getent", "group", "top"], ["getent", "passwd", "carol"]],
                        timeout=120)
        assert all(x.rc == 0 for x in r), r
        cli(idcache, d, "status")
        cli(idcache, d, "expire", "--all")
        assert ns.run(["id", "alice"], timeout=120).rc == 0
        cli(idcache, d, "reload")  # the silent domain starts over, online
        # and stop while one waits
        c.s.sendall(P.request_frame(P.GETPWNAM, "nobody-else"))
        time.sleep(0.5)
        nsenv.stop_checked_by_valgrind(d, vglog)
        c.close()
        ok = True
    finally:
        bh.close()
        nsenv.end_checked_run(d, base, ok)


# ==== hostile values a real slapd serves =====================================================
# slapd refuses some of these over ldapadd (uidNumber is INTEGER syntax:
# "007", "+1", "abc" and "0x10" are "invalid per syntax"), but slapadd -q
# (tests/ldap/slapd.sh with SLAPD_LOAD=slapadd) stores values without
# checking their syntax, and slapd then serves them as they are. "-5",
# "4294967296" and names with '/', a leading '-' or control characters are
# accepted by ldapadd too.

PEOPLE, GROUPS_OU = f"ou=people,{BASE}", f"ou=groups,{BASE}"
HUGE_MEMBERS = 100000

# user (uid) -> (uidNumber, gidNumber) as stored: each refused
BAD_IDS = {
    "h_neg": ("-5", "40000"),
    "h_plus": ("+40002", "40000"),
    "h_big": ("4294967296", "40000"),
    "h_nouid": ("4294967295", "40000"),  # libc's "no id"
    "h_huge": ("99999999999999999999", "40000"),
    "h_alpha": ("abc", "40000"),
    "h_hex": ("0x10", "40000"),
    "h_space": (" 40003", "40000"),
    "h_gidneg": ("40004", "-1"),
}
# names a directory can hold that the cache refuses: (DN, uidNumber)
BAD_NAMES = {
    "a/b": 41000, "-lead": 41001, "ctl\x01x": 41002, "esc\x1b[31mx": 41003, "+plus": 41004,
    " lead": 41005, "co:lon": 41006, "com,ma": 41007, "tab\tx": 41008, "del\x7fx": 41009,
}


def ldif_attr(k, v):
    """One LDIF line; base64 for anything that is not plain."""
    import base64
    if v and v.isascii() and v.isprintable() and v[0] not in " :<" and v[-1] != " ":
        return f"{k}: {v}\n"
    return f"{k}:: {base64.b64encode(v.encode()).decode()}\n"


def ldif_entry(dn, *pairs):
    return ldif_attr("dn", dn) + "".join(ldif_attr(k, v) for k, v in pairs)


def user_entry(dn, name, uid, gid, *extra):
    return ldif_entry(dn, ("objectClass", "account"), ("objectClass", "posixAccount"),
                      ("objectClass", "extensibleObject"), ("uid", name), ("cn", "x"),
                      ("uidNumber", uid), ("gidNumber", gid), ("homeDirectory", "/home/x"),
                      ("loginShell", "/bin/sh"), *extra)


def group_entry(dn, name, gid, *members):
    return ldif_entry(dn, ("objectClass", "posixGroup"), ("objectClass", "extensibleObject"),
                      ("cn", name), ("gidNumber", gid), *[("memberUid", m) for m in members])


def hostile_ldif(path):
    out = [ldif_entry(BASE, ("objectClass", "dcObject"), ("objectClass", "organization"),
                      ("o", "Example"), ("dc", "example")),
           ldif_entry(PEOPLE, ("objectClass", "organizationalUnit"), ("ou", "people")),
           ldif_entry(GROUPS_OU, ("objectClass", "organizationalUnit"), ("ou", "groups")),
           user_entry(f"uid=h_ok,{PEOPLE}", "h_ok", "40010", "40010"),
           user_entry(f"uid=h_other,{PEOPLE}", "h_other", "40011", "40010"),
           # leading zeros: decimal digits, at most 10 of them: uid 40001
           user_entry(f"uid=h_zero,{PEOPLE}", "h_zero", "0040001", "40010")]
    out += [user_entry(f"uid={n},{PEOPLE}", n, u, g) for n, (u, g) in BAD_IDS.items()]
    # two names, one uid; two groups, one gid
    out += [user_entry(f"uid=twin1,{PEOPLE}", "twin1", "40020", "40010"),
            user_entry(f"uid=twin2,{PEOPLE}", "twin2", "40020", "40010"),
            group_entry(f"cn=gtwin1,{GROUPS_OU}", "gtwin1", "40030", "h_ok"),
            group_entry(f"cn=gtwin2,{GROUPS_OU}", "gtwin2", "40030", "h_ok")]
    out += [user_entry(f"cn=n{u},{PEOPLE}", n, str(u), "40010") for n, u in BAD_NAMES.items()]
    # a bad alias beside the RDN's valid name: the valid one is kept
    out.append(user_entry(f"uid=h_alias,{PEOPLE}", "h_alias", "40040", "40010",
                          ("uid", "bad/alias")))
    # the DN itself carries the bad name (a newline that would forge a log line)
    out.append(user_entry(f"uid=evil\nwarning: forged,{PEOPLE}", "evil\nwarning: forged",
                          "41100", "40010"))
    out += [group_entry(f"cn=bad/group,{GROUPS_OU}", "bad/group", "42000", "h_ok"),
            group_entry(f"cn=-dash,{GROUPS_OU}", "-dash", "42001", "h_ok"),
            group_entry(f"cn=hg_neg,{GROUPS_OU}", "hg_neg", "-7", "h_ok"),
            group_entry(f"cn=hg_alpha,{GROUPS_OU}", "hg_alpha", "x1", "h_ok"),
            group_entry(f"cn=mixed,{GROUPS_OU}", "mixed", "42010", "h_ok", "a/b", "-x",
                        "ctl\x01", "h_other"),
            group_entry(f"cn=huge,{GROUPS_OU}", "huge", "42100", "h_ok",
                        *[f"m{i:05d}" for i in range(HUGE_MEMBERS)])]
    # a referral object inside the search base: every subtree search that
    # covers it returns a search reference
    out.append(ldif_entry(f"ou=elsewhere,{PEOPLE}", ("objectClass", "referral"),
                          ("objectClass", "extensibleObject"), ("ou", "elsewhere"),
                          ("ref", "ldap://127.0.0.1:9/ou=people,dc=elsewhere,dc=com")))
    Path(path).write_text("\n".join(out))


@pytest.fixture(scope="module")
def hostile(env):
    """Server H: the hostile values above, loaded with slapadd -q."""
    ldif = env.base / "hostile.ldif"
    hostile_ldif(ldif)
    s = Slapd(env.base, "h", ldif=ldif)
    env.servers["h"] = s  # stopped by the env fixture
    s.start()
    got = ldapsearch(s.uri, "(uid=h_alpha)")
    assert got[f"uid=h_alpha,{PEOPLE}".lower()]["uidnumber"] == ["abc"], got
    return s


def skipped_line(dn, why):
    return f'entry "{dn}": {why}; skipped'


def assert_logged_once(log, wanted, server):
    """Each wanted message is in the log, with the server, and (over two
    rounds of lookups) exactly once (lp_log_once remembers every distinct
    message up to LP_LOGGED_MAX, entries.c)."""
    counts = {w: log.count(w) for w in wanted}
    assert all(c == 1 for c in counts.values()), {w: c for w, c in counts.items() if c != 1}
    for w in wanted:
        assert server in next(x for x in log.splitlines() if w in x), w


def warm_and_check_kept(d, idcache):
    """h_ok cached first; returns a check that it is still in the cache
    (expired or not) and served after the hostile lookups."""
    r = d.ns.run(["getent", "passwd", "h_ok"])
    assert r.rc == 0 and r.out.startswith("h_ok:x:40010:40010:"), (r, d.log()[-2000:])

    def check():
        assert user_info(idcache, d, "h_ok").get("uid") == "40010", user_info(idcache, d, "h_ok")
        r = d.ns.run(["getent", "passwd", "h_ok"])
        assert r.rc == 0 and r.out.startswith("h_ok:x:40010:40010:"), r
    return check


def test_hostile_ids_are_refused(hostile, module_daemons, idcache):
    """Signed, overflowing, non-numeric, hex and space-led uidNumber or
    gidNumber values (stored by slapadd, served by slapd) make the entry
    unusable: not found, logged once with the server and the DN, the rest
    keeps working. Leading zeros are decimal digits: accepted."""
    d = start_daemon(module_daemons, hostile.uri)
    kept = warm_and_check_kept(d, idcache)
    names = list(BAD_IDS)
    argvs = [["getent", "passwd", n] for n in names]
    argvs += [["getent", "group", "hg_neg"], ["getent", "group", "hg_alpha"],
              ["getent", "passwd", "h_zero"], ["getent", "passwd", "h_other"]]
    for round_ in range(2):
        before = hostile.srch_count()
        got = d.ns.run_many(argvs)
        for r in got[:len(names) + 2]:
            assert r.rc == 2 and r.out == "", r
        assert got[-2].rc == 0 and got[-2].out.startswith("h_zero:x:40001:40010:"), got[-2]
        assert got[-1].rc == 0 and got[-1].out.startswith("h_other:x:40011:40010:"), got[-1]
        assert hostile.srch_count() > before  # asked the directory each round
        time.sleep(1.2)  # past entry_negative_timeout: the next round searches again
    log = d.log()
    lines = [skipped_line(f"uid={n},{PEOPLE}", "uidNumber or gidNumber missing or not a number")
             for n in names]
    lines += [skipped_line(f"cn={g},{GROUPS_OU}", "gidNumber missing or not a number")
              for g in ("hg_neg", "hg_alpha")]
    assert_logged_once(log, lines, hostile.uri)
    kept()


def test_same_uid_or_gid_on_two_names(hostile, module_daemons, idcache):
    """Two users with one uidNumber and two groups with one gidNumber: not
    refused (glibc's files module allows it too), the shared uid and the
    shared gid each logged once with the DN. Each resolves by its
    name; by number one of them answers, the same one every time (the
    cache's lowest entry order; LDAP entries have no order of their own);
    `id` lists the shared gid once."""
    d = start_daemon(module_daemons, hostile.uri)
    kept = warm_and_check_kept(d, idcache)
    got = d.ns.run_many([["getent", "passwd", "40020"], ["getent", "group", "40030"],
                         ["getent", "passwd", "twin1"], ["getent", "passwd", "twin2"],
                         ["getent", "group", "gtwin1"], ["getent", "group", "gtwin2"],
                         ["id", "-G", "h_ok"]])
    assert all(r.rc == 0 for r in got), got
    by_uid, by_gid = got[0].out.split(":")[0], got[1].out.split(":")[0]
    assert by_uid in ("twin1", "twin2"), got[0]
    assert by_gid in ("gtwin1", "gtwin2"), got[1]
    assert got[2].out.startswith("twin1:x:40020:"), got[2]
    assert got[3].out.startswith("twin2:x:40020:"), got[3]
    assert got[4].out.startswith("gtwin1:x:40030:h_ok"), got[4]
    assert got[5].out.startswith("gtwin2:x:40030:h_ok"), got[5]
    assert got[6].out.split().count("40030") == 1, got[6]
    # stable: asked again (from the cache, then after an expiry from the
    # directory) the same name answers
    for _ in range(2):
        again = d.ns.run_many([["getent", "passwd", "40020"], ["getent", "group", "40030"]])
        assert [r.out.split(":")[0] for r in again] == [by_uid, by_gid], again
        cli(idcache, d, "expire", "--all")
    # kept for both, but the shared uidNumber is logged, once, with the DN
    shared = [x for x in d.log().splitlines() if "uidNumber 40020 is also held by" in x]
    assert len(shared) == 1 and "twin" in shared[0], shared
    # and the gidNumber two groups share, likewise
    shared = [x for x in d.log().splitlines() if "gidNumber 40030 is also held by" in x]
    assert len(shared) == 1, shared
    assert 'entry "cn=gtwin' in shared[0] and hostile.uri in shared[0], shared
    assert "also held by gtwin" in shared[0], shared
    kept()


def test_hostile_names_are_refused(hostile, module_daemons, idcache):
    """Names with '/', a leading '-', '+' or space, ':', ',' or a control
    character (the cache's name rule) sent by the directory: the entry is
    skipped (asked by number, it is not found) and logged once with its DN;
    a bad alias beside a valid RDN name is ignored; invalid memberUid values
    are dropped from a group, which keeps its valid members."""
    d = start_daemon(module_daemons, hostile.uri)
    kept = warm_and_check_kept(d, idcache)
    argvs = [["getent", "passwd", str(u)] for u in BAD_NAMES.values()]
    argvs += [["getent", "group", "42000"], ["getent", "group", "42001"],
              ["getent", "passwd", "h_alias"], ["getent", "passwd", "40040"],
              ["getent", "group", "mixed"]]
    for _ in range(2):
        got = d.ns.run_many(argvs)
        n = len(BAD_NAMES)
        for r in got[:n + 2]:
            assert r.rc == 2 and r.out == "", r
        assert got[n + 2].rc == 0 and got[n + 2].out.startswith("h_alias:x:40040:"), got[n + 2]
        assert got[n + 3].out == got[n + 2].out, got[n + 3]
        assert got[n + 4].rc == 0, got[n + 4]
        assert got[n + 4].out.strip() == "mixed:x:42010:h_ok,h_other", got[n + 4]
        time.sleep(1.2)
    log = d.log()
    lines = [skipped_line(f"cn=n{u},{PEOPLE}", "no valid uid") for u in BAD_NAMES.values()]
    lines += [skipped_line(f"cn=bad/group,{GROUPS_OU}", "no valid cn"),
              skipped_line(f"cn=-dash,{GROUPS_OU}", "no valid cn"),
              f'group "cn=mixed,{GROUPS_OU}": invalid member name dropped']
    assert_logged_once(log, lines, hostile.uri)
    assert "h_alias" not in log  # nothing to say about it
    # the enumeration of what is cached holds none of them
    users = d.ns.run(["getent", "passwd"]).out
    assert "a/b" not in users and "-lead" not in users and "\x01" not in users, users
    kept()


def test_control_characters_in_a_dn_do_not_forge_log_lines(hostile, module_daemons):
    """An entry whose DN holds a newline (and whose name is therefore
    invalid too) is skipped and logged once, without the newline reaching
    the log as a line break (idc_log writes control characters as \\xNN)."""
    d = start_daemon(module_daemons, hostile.uri)
    r = d.ns.run(["getent", "passwd", "41100"])
    assert r.rc == 2, r
    lines = d.log().splitlines()
    assert any("no valid uid; skipped" in x and "evil" in x for x in lines), lines[-20:]
    assert not any(x.startswith("warning: forged") for x in lines), lines[-20:]


def test_search_reference_is_logged_once(hostile, module_daemons, idcache):
    """slapd returns a search reference for the referral object under
    ou=people with every subtree search covering it: it is not followed,
    logged once, and the answers keep every entry the search did return."""
    d = start_daemon(module_daemons, hostile.uri)
    kept = warm_and_check_kept(d, idcache)
    p = subprocess.run(["ldapsearch", "-x", "-LLL", "-H", hostile.uri, "-b", BASE,
                        "(uid=h_ok)", "dn"], capture_output=True, text=True, timeout=30)
    assert "ldap://127.0.0.1:9/ou=people,dc=elsewhere" in p.stdout, p.stdout  # slapd sends it
    for _ in range(2):
        got = d.ns.run_many([["getent", "passwd", "h_other"], ["getent", "passwd", "40020"],
                             ["getent", "group", "gtwin1"], ["id", "h_ok"],
                             ["getent", "passwd", "nosuchuser"]])
        assert [r.rc for r in got] == [0, 0, 0, 0, 2], got
        assert "42010(mixed)" in got[3].out, got[3]
        cli(idcache, d, "expire", "--all")
        time.sleep(1.2)
    refs = [x for x in d.log().splitlines() if "referral under" in x]
    assert refs, d.log()[-3000:]
    assert len(refs) == len(set(refs)), refs  # each once
    assert all(f'referral under "{BASE}" not followed' in x and hostile.uri in x
               for x in refs), refs
    st = status(idcache, d)
    assert st["domain.dir.state"] == "online", st
    kept()


def test_referral_search_base_ends_with_what_came(hostile, module_daemons, idcache):
    """A user search base that is itself a referral object: slapd answers
    with a referral result; the search ends (not found), logged once, the
    domain stays online and group lookups keep working."""
    d = start_daemon(module_daemons, hostile.uri,
                     f"ldap_user_search_base = ou=elsewhere,{PEOPLE}\n"
                     f"ldap_group_search_base = {GROUPS_OU}\n")
    for _ in range(2):
        got = d.ns.run_many([["getent", "passwd", "h_ok"], ["getent", "group", "gtwin1"]])
        assert got[0].rc == 2, got[0]
        assert got[1].rc == 0 and got[1].out.startswith("gtwin1:x:40030:"), got[1]
        time.sleep(1.2)
    log = d.log()
    lines = [x for x in log.splitlines() if f'base="ou=elsewhere,{PEOPLE}"' in x]
    assert lines and len(lines) == len(set(lines)), log[-3000:]
    assert any("Referral" in x for x in lines), lines
    assert status(idcache, d)["domain.dir.state"] == "online"


def test_group_with_100000_members(hostile, module_daemons, idcache):
    """A group of 100,001 memberUid values resolves completely, by name and by gid, and `id` of a member lists it; warm,
    it is served from the cache without a search."""
    d = start_daemon(module_daemons, hostile.uri)
    kept = warm_and_check_kept(d, idcache)
    s0 = hostile.srch_count()
    t0 = time.monotonic()
    r = r_huge = d.ns.run(["getent", "group", "huge"])
    cold = time.monotonic() - t0
    assert hostile.srch_count() > s0  # cold: from the directory
    assert r.rc == 0, (r, d.log()[-2000:])
    name, pw, gid, members = r.out.strip().split(":")
    assert (name, pw, gid) == ("huge", "x", "42100")
    mem = members.split(",")
    assert len(mem) == HUGE_MEMBERS + 1 and len(set(mem)) == len(mem)
    assert mem[0] == "h_ok" and "m00000" in mem and "m99999" in mem
    r = d.ns.run(["id", "-G", "h_ok"])  # initgroups: from the directory
    assert r.rc == 0 and "42100" in r.out.split(), r
    before = hostile.srch_count()
    t0 = time.monotonic()
    got = d.ns.run_many([["getent", "group", "42100"], ["id", "-G", "h_ok"]])
    warm = time.monotonic() - t0
    assert got[0].out == r_huge.out, got[0].out[:200]
    assert got[1].out == r.out, got[1]
    assert hostile.srch_count() == before  # cached: no search
    # expired: a refresh of the unchanged group still answers at once
    cli(idcache, d, "expire", "--group", "huge")
    t0 = time.monotonic()
    r2 = d.ns.run(["getent", "group", "huge"])
    expired = time.monotonic() - t0
    assert r2.out == r_huge.out
    print(f"\ngroup of {HUGE_MEMBERS + 1} members: cold {cold:.3f} s, warm (2 lookups) "
          f"{warm:.3f} s, expired {expired:.3f} s")
    assert "kept; the rest dropped" not in d.log()  # under LP_MEMBERS_MAX: nothing cut
    kept()
