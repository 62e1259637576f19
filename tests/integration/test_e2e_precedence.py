"""Which domain answers, on every path (socket and memory cache alike).

By name: the first domain in `domains` order that holds the name. By id:
the first domain that holds the id. A record stored for an id never
replaces another domain's record for a name, nor the other way round.

The memory-cache answers are compared with the socket's
(IDCACHE_MEMCACHE=no) for every name and id, after lookups in several
orders, each order starting from empty maps (`idcache expire --all`).
"""
import os
import shutil
import signal
import subprocess
import time

import pytest

import nsenv
from test_e2e_mc import grown, lookups, status

pytestmark = pytest.mark.usefixtures("as_root")

# Domain a (the daemon's `local`), then b, then c.
#   alice  a: 2001   b: 9999            by name a's, 9999 is b's
#   erin            b: 2001             2001 is a's alice
#   bob             b: 7000  c: 7777    by name b's; 7000 is a's zed
#   staff  a: 3001   b: 9001            group by name a's, 9001 b's
#   bobg            b: 6000  c: 6666    6000 is a's zedg
A_PASSWD = """\
root:x:0:0:root:/root:/bin/bash
alice:x:2001:2001:Alice in a:/home/alice:/bin/bash
zed:x:7000:7000:Zed in a:/home/zed:/bin/sh
"""
A_GROUP = """\
root:x:0:
alice:x:2001:
staff:x:3001:alice
zedg:x:6000:zed
"""
B_PASSWD = """\
alice:x:9999:9999:Alice in b:/b/alice:/bin/zsh
erin:x:2001:2001:Erin in b:/b/erin:/bin/sh
bob:x:7000:7000:Bob in b:/b/bob:/bin/sh
"""
B_GROUP = """\
staff:x:9001:alice,bob
bobg:x:6000:bob
"""
C_PASSWD = """\
bob:x:7777:7777:Bob in c:/c/bob:/bin/sh
"""
C_GROUP = """\
bobg:x:6666:bob
"""

USER_NAMES = ["root", "alice", "zed", "erin", "bob"]
UIDS = ["0", "2001", "7000", "9999", "7777"]
GROUP_NAMES = ["root", "alice", "staff", "zedg", "bobg"]
GIDS = ["0", "2001", "3001", "6000", "9001", "6666"]


def files_domain(name, where, passwd, group):
    """A [domain/NAME] files section over where/NAME.passwd and .group."""
    p, g = where / f"{name}.passwd", where / f"{name}.group"
    nsenv.write_atomic(p, passwd)
    nsenv.write_atomic(g, group)
    return f"\n[domain/{name}]\nid_provider = files\npasswd_files = {p}\ngroup_files = {g}\n"


def three_domains(daemons):
    d = daemons.start(A_PASSWD, A_GROUP, idcache_conf="domains = local, b, c\n", start=False)
    with open(d.conf, "a") as f:
        f.write(files_domain("b", d.base, B_PASSWD, B_GROUP) +
                files_domain("c", d.base, C_PASSWD, C_GROUP))
    d.start()
    return d


def expire_all(idcache, d):
    p = subprocess.run([str(idcache), "expire", "--run-dir", str(d.run_dir), "--all"],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr


def every_key():
    return [["getpwnam", n] for n in USER_NAMES] + [["getpwuid", i] for i in UIDS] + \
        [["getgrnam", n] for n in GROUP_NAMES] + [["getgrgid", i] for i in GIDS] + \
        [["getgrouplist", n] for n in USER_NAMES]


def orders():
    """Lookup orders, each a list of specs: ids before names, names before
    ids, each id right before the name it shares a record with, reversed."""
    ids = [["getpwuid", i] for i in UIDS] + [["getgrgid", i] for i in GIDS]
    names = [["getpwnam", n] for n in USER_NAMES] + [["getgrnam", n] for n in GROUP_NAMES]
    inter = []
    for a, b in zip(ids, names):
        inter += [a, b]
    inter += ids[len(names):]
    return {"ids-first": ids + names, "names-first": names + ids, "interleaved": inter,
            "reversed": list(reversed(ids + names))}


def test_socket_answers_follow_domain_order(daemons):
    d = three_domains(daemons)
    got = lookups(d, every_key(), env={"IDCACHE_MEMCACHE": "no"})
    assert got["getpwnam alice"][2] == 2001
    assert got["getpwuid 9999"][:3] == ["alice", "x", 9999]
    assert got["getpwuid 2001"][0] == "alice"
    assert got["getpwnam erin"][2] == 2001
    assert got["getpwnam bob"][2] == 7000
    assert got["getpwuid 7000"][0] == "zed"
    assert got["getpwuid 7777"][:3] == ["bob", "x", 7777]
    assert got["getgrnam staff"][1] == 3001
    assert got["getgrgid 9001"][:2] == ["staff", 9001]
    assert got["getgrgid 6000"][0] == "zedg"
    assert got["getgrnam bobg"][1] == 6000


@pytest.mark.parametrize("order", sorted(orders()))
def test_maps_answer_as_the_socket_does(idcache, daemons, order):
    d = three_domains(daemons)
    truth = lookups(d, every_key(), env={"IDCACHE_MEMCACHE": "no"})
    expire_all(idcache, d)  # empty maps
    first = lookups(d, orders()[order])  # misses: the socket answers, maps store
    warm = lookups(d, every_key())
    s0 = status(idcache, d)
    warm_again = lookups(d, every_key())
    s1 = status(idcache, d)
    for key, want in truth.items():
        assert warm_again[key] == want, \
            f"after {order}: the map answers {key} with {warm_again[key]}, the socket {want}"
    assert warm == warm_again
    assert all(truth[k] == v for k, v in first.items()), "the first pass differs"
    # The last pass came from the maps: it asked the daemon nothing.
    assert grown(s0, s1) == {}, f"warm maps still asked the daemon: {grown(s0, s1)}"


def test_getent_by_id_then_by_name(daemons):
    """The shape first seen: `getent passwd 9999`, then `getent passwd
    alice` in a new process; groups alike."""
    d = three_domains(daemons)
    assert d.ns.run(["getent", "passwd", "9999"]).out.startswith("alice:x:9999:")
    assert d.ns.run(["getent", "passwd", "alice"]).out.startswith("alice:x:2001:")
    assert d.ns.run(["getent", "passwd", "alice"]).out.startswith("alice:x:2001:")
    assert d.ns.run(["getent", "passwd", "9999"]).out.startswith("alice:x:9999:")
    assert d.ns.run(["getent", "group", "9001"]).out.startswith("staff:x:9001:")
    assert d.ns.run(["getent", "group", "staff"]).out == "staff:x:3001:alice\n"
    assert d.ns.run(["getent", "group", "staff"]).out == "staff:x:3001:alice\n"
    assert d.ns.run(["getent", "passwd", "7777"]).out.startswith("bob:x:7777:")
    assert d.ns.run(["getent", "passwd", "bob"]).out.startswith("bob:x:7000:")
    assert d.ns.run(["getent", "passwd", "7000"]).out.startswith("zed:x:7000:")
    assert d.ns.run(["id", "-u", "alice"]).out == "2001\n"


def test_other_spelling_does_not_take_the_name(idcache, daemons):
    """b matches names in any case; what it answered for `ALICE` is not
    the answer for `Alice`, which a holds."""
    d = daemons.start("Alice:x:2001:2001::/home/a:/bin/sh\n", "", start=False,
                      idcache_conf="domains = local, b\n")
    with open(d.conf, "a") as f:
        f.write(files_domain("b", d.base, "Alice:x:9999:9999::/b:/bin/sh\n", "") +
                "case_sensitive = false\n")
    d.start()
    assert lookups(d, [["getpwnam", "ALICE"]])["getpwnam ALICE"][2] == 9999
    got = lookups(d, [["getpwnam", "Alice"], ["getpwnam", "ALICE"]] * 2)
    assert got["getpwnam Alice"][2] == 2001
    assert got["getpwnam ALICE"][2] == 9999


# ==== remote domains and the host's own identities ====================================
# A directory (real slapd on loopback, test_e2e_ldap's helper) that holds,
# beside an ordinary user and group, entries that would shadow or join
# the host's own: a user named root, one with a local uid, one with a
# local name, a group named sudo and one with sudo's gid.

LOCAL_PASSWD = """\
root:x:0:0:root:/root:/bin/bash
alice:x:1000:1000:Alice local:/home/alice:/bin/bash
"""
LOCAL_GROUP = """\
root:x:0:
sudo:x:27:alice
alice:x:1000:
"""


def _user(name, uid):
    return (f"dn: uid={name},ou=people,dc=example,dc=com\nobjectClass: account\n"
            f"objectClass: posixAccount\nuid: {name}\ncn: {name}\nuidNumber: {uid}\n"
            f"gidNumber: {uid}\nhomeDirectory: /dir/{name}\nloginShell: /bin/sh\n\n")


def _group(name, gid, members):
    return (f"dn: cn={name},ou=groups,dc=example,dc=com\nobjectClass: posixGroup\n"
            f"cn: {name}\ngidNumber: {gid}\n" +
            "".join(f"memberUid: {m}\n" for m in members) + "\n")


DIRECTORY = ("dn: dc=example,dc=com\nobjectClass: dcObject\nobjectClass: organization\n"
             "o: Example\ndc: example\n\n"
             "dn: ou=people,dc=example,dc=com\nobjectClass: organizationalUnit\nou: people\n\n"
             "dn: ou=groups,dc=example,dc=com\nobjectClass: organizationalUnit\nou: groups\n\n"
             + _user("root", 5001) + _user("mallory", 1000) + _user("alice", 10001)
             + _user("ldapuser", 10002)
             + _group("sudo", 5027, ["ldapuser"]) + _group("staff2", 27, ["ldapuser"])
             + _group("devs", 20001, ["ldapuser"]) + _group("ops", 20003, ["root", "ldapuser"]))

# (kind, name, DN) of every entry the default policy withholds
WITHHELD = [("user", "root", "uid=root,ou=people,dc=example,dc=com"),
            ("user", "mallory", "uid=mallory,ou=people,dc=example,dc=com"),
            ("user", "alice", "uid=alice,ou=people,dc=example,dc=com"),
            ("group", "sudo", "cn=sudo,ou=groups,dc=example,dc=com"),
            ("group", "staff2", "cn=staff2,ou=groups,dc=example,dc=com")]


def slapd_holding(prefix, name, text):
    """For a fixture to `yield from`: a private slapd holding the LDIF text."""
    tel = pytest.importorskip("test_e2e_ldap")
    if not (os.access(tel.SLAPD, os.X_OK) and shutil.which("ldapadd")):
        pytest.skip("needs Debian's slapd and ldap-utils")
    yield from tel.private_slapd(prefix, name, lambda p: p.write_text(text))


@pytest.fixture(scope="module")
def directory():
    yield from slapd_holding("idc-prec-ldap-", "p", DIRECTORY)


def dir_domain(uri, extra=""):
    return ("\n[domain/dir]\nid_provider = ldap\n"
            f"ldap_uri = {uri}\nldap_search_base = dc=example,dc=com\n"
            "ldap_schema = rfc2307\nldap_network_timeout = 2\nldap_search_timeout = 3\n"
            f"{extra}")


def dir_first(daemons, directory, extra="", idcache_conf=""):
    """The directory ahead of the host's files: the order that lets it
    shadow them if anything can."""
    return daemons.start(LOCAL_PASSWD, LOCAL_GROUP,
                         idcache_conf="domains = dir, local\n" + idcache_conf,
                         domain_conf=dir_domain(directory.uri, extra))


PROBES = [["getent", "passwd", "root"], ["getent", "passwd", "5001"],
          ["getent", "passwd", "mallory"], ["getent", "passwd", "1000"],
          ["getent", "passwd", "alice"], ["getent", "passwd", "10001"],
          ["getent", "passwd", "ldapuser"], ["getent", "group", "sudo"],
          ["getent", "group", "5027"], ["getent", "group", "staff2"],
          ["getent", "group", "27"], ["getent", "group", "devs"], ["getent", "group", "ops"],
          ["id", "-G", "ldapuser"], ["id", "-Gn", "ldapuser"], ["id", "-G", "alice"]]


def answers(d, env=None):
    return {" ".join(a): (r.rc, r.out) for a, r in zip(PROBES, d.ns.run_many(PROBES, env=env))}


def test_directory_cannot_shadow_or_join_local_identity(idcache, daemons, directory):
    d = dir_first(daemons, directory)
    got = answers(d)
    assert got["getent passwd root"] == (0, "root:x:0:0:root:/root:/bin/bash\n")
    assert got["getent passwd 5001"][0] == 2
    assert got["getent passwd mallory"][0] == 2
    assert got["getent passwd 1000"][1].startswith("alice:x:1000:1000:Alice local:")
    assert got["getent passwd alice"][1].startswith("alice:x:1000:1000:Alice local:")
    assert got["getent passwd 10001"][0] == 2
    assert got["getent passwd ldapuser"][1].startswith("ldapuser:x:10002:10002:")
    assert got["getent group sudo"] == (0, "sudo:x:27:alice\n")
    assert got["getent group 5027"][0] == 2
    assert got["getent group staff2"][0] == 2
    assert got["getent group 27"] == (0, "sudo:x:27:alice\n")
    assert got["getent group devs"] == (0, "devs:x:20001:ldapuser\n")
    # filter_users (root) leaves member lists too, as sssd's filter_users_in_groups
    assert got["getent group ops"] == (0, "ops:x:20003:ldapuser\n")
    # ldapuser's groups: its own gid and devs; neither sudo's gid nor the
    # directory's sudo
    assert sorted(got["id -G ldapuser"][1].split()) == ["10002", "20001", "20003"], got
    assert "sudo" not in got["id -Gn ldapuser"][1]
    assert got["id -G alice"][1].split() == ["1000", "27"]
    # the same from the maps (a second round) and from the socket alone
    assert answers(d) == got
    assert answers(d, env={"IDCACHE_MEMCACHE": "no"}) == got
    # enumeration lists none of them either
    pw = d.ns.run(["getent", "passwd"]).out.splitlines()
    gr = d.ns.run(["getent", "group"]).out.splitlines()
    assert sorted(ln.split(":")[0] for ln in pw) == ["alice", "ldapuser", "root"], pw
    assert sorted(ln.split(":")[0] for ln in gr) == ["alice", "devs", "ops", "root", "sudo"], gr
    assert "sudo:x:27:alice" in gr and "ops:x:20003:ldapuser" in gr
    # counted, and logged once each with the DN
    st = status(idcache, d)
    assert st["domain.dir.withheld"] == str(len(WITHHELD)), st
    log = d.log()
    for kind, name, dn in WITHHELD:
        lines = [ln for ln in log.splitlines() if f'{kind} "{name}"' in ln and "not served" in ln]
        assert len(lines) == 1, (name, lines)
        assert dn in lines[0], lines[0]
    print("\n".join(ln for ln in log.splitlines() if "not served" in ln))


def info(idcache, d, kind, name):
    """`idcache user|group NAME` as a dict of its key=value lines."""
    p = subprocess.run([str(idcache), kind, "--run-dir", str(d.run_dir), name],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, (kind, name, p.stdout, p.stderr)
    return dict(ln.partition("=")[::2] for ln in p.stdout.splitlines())


def test_info_says_why_an_entry_is_withheld(idcache, daemons, directory):
    """`idcache user/group` shows the directory's entry with the reason
    lookups pass it by; a served entry has no such line; asking neither
    logs nor counts."""
    d = dir_first(daemons, directory)
    answers(d)  # the directory's entries are in the cache now
    before = status(idcache, d)["domain.dir.withheld"]
    log = d.log()
    expect = {("user", "root"): "filter_users", ("user", "mallory"): "local id",
              ("user", "alice"): "local name", ("group", "sudo"): "local name",
              ("group", "staff2"): "local id", ("user", "ldapuser"): None,
              ("group", "devs"): None, ("group", "ops"): None}
    for (kind, name), why in expect.items():
        got = info(idcache, d, kind, name)
        assert got["domain"] == "dir", (name, got)
        assert got.get("withheld") == why, (name, got)
    assert status(idcache, d)["domain.dir.withheld"] == before
    assert d.log().count("not served") == log.count("not served")


def test_overlap_allowed_deliberately_and_filters(idcache, daemons, directory):
    """allow_local_overlap = true serves what the directory holds in the
    domain order; filter_users / filter_groups still hold root and the
    names they list."""
    d = dir_first(daemons, directory, extra="allow_local_overlap = true\n",
                  idcache_conf="filter_groups = root, staff2\n")
    got = answers(d)
    assert got["getent passwd root"][1].startswith("root:x:0:0:"), got  # filter_users = root
    assert got["getent passwd 5001"][0] == 2
    assert got["getent passwd alice"][1].startswith("alice:x:10001:"), got  # allowed
    assert got["getent passwd 1000"][1].startswith("mallory:x:1000:"), got
    assert got["getent group sudo"][1].startswith("sudo:x:5027:ldapuser"), got
    assert got["getent group staff2"][0] == 2  # filter_groups
    assert got["getent group 27"] == (0, "sudo:x:27:alice\n")
    assert sorted(got["id -G ldapuser"][1].split()) == ["10002", "20001", "20003", "5027"], got
    assert answers(d) == got
    # a domain's own list replaces [idcache]'s
    d2 = dir_first(daemons, directory, extra="allow_local_overlap = true\nfilter_users = \n")
    assert d2.ns.run(["getent", "passwd", "root"]).out.startswith("root:x:5001:"), d2.log()
    assert d2.ns.run(["getent", "group", "ops"]).out == "ops:x:20003:root,ldapuser\n"


def dir_only(daemons, directory, extra=""):
    """A daemon whose one domain is the directory: no files domain."""
    d = daemons.start(None, None, idcache_conf="domains = dir\n", start=False,
                      domain_conf=dir_domain(directory.uri, extra))
    conf = d.conf.read_text()
    head, _, rest = conf.partition("\n[domain/local]\n")
    d.conf.write_text(head + "\n" + rest[rest.index("\n[domain/dir]"):])
    d.start()
    return d


def test_host_files_when_no_files_domain(idcache, daemons, directory):
    """Without a files domain, /etc/passwd and /etc/group as the daemon
    reads them are the host's own (no filter here: root is withheld for
    the host's root)."""
    d = dir_only(daemons, directory, "filter_users =\n")
    host_group = (d.base / "sys" / "group").read_text()
    r = d.ns.run(["getent", "passwd", "root"], sources="idcache")
    assert r.rc == 2, r  # the directory's root is withheld, and idcache has no other
    assert d.ns.run(["getent", "passwd", "ldapuser"]).rc == 0
    if any(ln.startswith("sudo:") for ln in host_group.splitlines()):
        assert d.ns.run(["getent", "group", "sudo"]).rc == 2
    if any(ln.split(":")[2:3] == ["27"] for ln in host_group.splitlines()):
        assert d.ns.run(["getent", "group", "staff2"]).rc == 2
    log = d.log()
    assert 'user "root" (uid 5001, uid=root,ou=people,dc=example,dc=com) not served: ' \
        "the name is held by /etc/passwd" in log, log
    assert info(idcache, d, "user", "root").get("withheld") == "local name"
    assert "withheld" not in info(idcache, d, "user", "ldapuser")
    # the host's group file changes in place (the daemon's /etc/group is a
    # bind mount of it): read again, devs is the host's now
    assert d.ns.run(["getent", "group", "devs"]).rc == 0
    with open(d.base / "sys" / "group", "a") as f:
        f.write("devs:x:4242:\n")
    # the socket sees it within a second; the maps start over at the next
    # sweep (DAEMON_SWEEP_MS, 5 s)
    ok, _ = nsenv.wait_for(lambda: d.ns.run(["getent", "group", "devs"]).rc == 2, timeout=12)
    assert ok, d.log()[-2000:]
    assert "the name is held by /etc/group" in d.log()


def test_local_change_withholds_what_the_maps_hold(idcache, daemons, directory):
    """A user added to the host's files takes the name from the directory's
    entry at once: its record by uid leaves the maps too."""
    d = dir_first(daemons, directory)
    for _ in range(2):
        assert d.ns.run(["getent", "passwd", "10002"]).out.startswith("ldapuser:x:10002:")
    nsenv.write_atomic(d.passwd, LOCAL_PASSWD + "ldapuser:x:3000:3000::/home/l:/bin/sh\n")
    nsenv.wait_for(lambda: d.ns.run(["getent", "passwd", "ldapuser"]).out.startswith(
        "ldapuser:x:3000:"))
    assert d.ns.run(["getent", "passwd", "ldapuser"]).out.startswith("ldapuser:x:3000:")
    assert d.ns.run(["getent", "passwd", "10002"]).rc == 2


@pytest.mark.skipif(not nsenv.VALGRIND, reason="needs valgrind")
def test_withholding_under_valgrind(idcached_bin, nss_module_dir, directory):
    """Both sources of the host's names (a files domain; the daemon's own
    reading of /etc/passwd and /etc/group), withheld entries by name, id,
    group list and enumeration, a host file replaced, a reload, a stop:
    no invalid access, no leak."""
    for with_files in (True, False):
        base = nsenv.make_private_dir("idc-prec-vg-")
        ns = nsenv.NsEnv(nss_module_dir, base / "run", base / "ns")
        wrap, vglog = nsenv.valgrind_wrap(ns, base)
        d = nsenv.Daemon(idcached_bin, base, LOCAL_PASSWD, LOCAL_GROUP,
                         idcache_conf="domains = dir, local\n" if with_files else
                         "domains = dir\n",
                         domain_conf=dir_domain(directory.uri, "filter_users =\n"), wrap=wrap)
        try:
            d.start(timeout=120)
            probes = PROBES + [["getent", "passwd"], ["getent", "group"]]
            r = ns.run_many(probes, timeout=300)
            assert r[0].rc == (0 if with_files else 2), r[0]  # root: the files domain's
            assert r[2].rc == 2, r[2]  # mallory
            # in place: the daemon's /etc/group is a bind mount of this file
            with open(base / "sys" / "group", "a") as f:
                f.write("devs:x:4242:\n")
            time.sleep(1.1)  # the host's files are looked at once a second at most
            r = ns.run_many(probes, env={"IDCACHE_MEMCACHE": "no"}, timeout=300)
            devs = r[PROBES.index(["getent", "group", "devs"])]
            assert devs.rc == (0 if with_files else 2), devs
            d.signal(signal.SIGHUP)
            nsenv.wait_for(lambda: "configuration reloaded" in d.log(), timeout=60)
            ns.run_many(probes[:8], timeout=300)
            nsenv.stop_checked_by_valgrind(d, vglog)
        finally:
            if d.alive():
                d.kill()
        assert "not served" in d.log()
        nsenv.remove_tree(base)


def test_local_group_withholds_what_the_maps_hold(idcache, daemons, directory):
    """A group added to the host's files takes the name from the
    directory's devs: its record by gid and its members' group lists leave
    the maps, nothing else is reset."""
    d = dir_first(daemons, directory)
    warm = [["getent", "group", "20001"], ["id", "-G", "ldapuser"], ["getent", "group", "ops"]]
    for _ in range(2):
        r = d.ns.run_many(warm)
    assert r[0].out.startswith("devs:x:20001:") and "20001" in r[1].out.split(), r
    s0 = status(idcache, d)
    nsenv.write_atomic(d.group, LOCAL_GROUP + "devs:x:4242:alice\n")
    ok, _ = nsenv.wait_for(lambda: d.ns.run(["getent", "group", "devs"]).out.startswith(
        "devs:x:4242:"), timeout=5)
    assert ok
    r = d.ns.run_many(warm)
    assert r[0].rc == 2, r[0]
    assert sorted(r[1].out.split()) == ["10002", "20003"], r[1]
    assert r[2].out == "ops:x:20003:ldapuser\n"
    sock = d.ns.run_many(warm, env={"IDCACHE_MEMCACHE": "no"})
    assert [(x.rc, x.out) for x in r] == [(x.rc, x.out) for x in sock]
    s1 = status(idcache, d)
    for m in ("passwd", "group", "initgroups"):
        assert s1[f"memcache_{m}_generation"] == s0[f"memcache_{m}_generation"], (m, s0, s1)


def test_unreadable_files_domain_does_not_let_the_directory_shadow(daemons, directory):
    """The files domain cannot read its files at start (so the cache holds
    nothing of it): its misses are not authoritative (UNAVAIL: NSS asks the
    next source), and the directory's entries are checked against the
    host's /etc/passwd and /etc/group, as without a files domain, until the
    domain has loaded: a directory user named like a local user, or
    holding a local uid, is never served meanwhile."""
    d = daemons.start(LOCAL_PASSWD, LOCAL_GROUP, start=False,
                      idcache_conf="domains = local, dir\n",
                      domain_conf=dir_domain(directory.uri))
    os.chmod(d.passwd, 0o600)  # the daemon's user cannot read them
    os.chmod(d.group, 0o600)
    with open(d.base / "sys" / "passwd", "a") as f:  # the daemon's /etc/passwd
        f.write("alice:x:1000:1000:Alice local:/home/alice:/bin/bash\n")
    d.start()
    host = d.base / "client.passwd"
    host.write_text(LOCAL_PASSWD)
    hostg = d.base / "client.group"
    hostg.write_text(LOCAL_GROUP)
    for p in (host, hostg):
        p.chmod(0o644)
    probes = [["getent", "passwd", "alice"], ["getent", "passwd", "1000"],
              ["getent", "passwd", "mallory"], ["getent", "passwd", "ldapuser"]]
    got = [(r.rc, r.out) for r in d.ns.run_many(
        probes, sources="idcache [NOTFOUND=return] files", passwd=host, group=hostg)]
    assert got[0] == (0, "alice:x:1000:1000:Alice local:/home/alice:/bin/bash\n"), got
    assert got[1] == got[0], got
    assert got[2][0] == 2, got
    assert got[3][0] == 0 and got[3][1].startswith("ldapuser:x:10002:"), got
    # Readable: the files domain's own data decides again.
    for p in (d.passwd, d.group):
        os.chmod(p, 0o644)
    nsenv.write_atomic(d.passwd, LOCAL_PASSWD)
    ok, _ = nsenv.wait_for(lambda: "loaded domain local" in d.log(), 5)
    assert ok, d.log()[-2000:]
    r = d.ns.run(["getent", "passwd", "alice"])
    assert r.out.startswith("alice:x:1000:1000:Alice local:"), r
