"""Two directories that both hold a name or an id (SSSD's multi-domain
scenarios): `domains = local, dir, dir2`. dir (the fixtures) has alice
uid 10001, bob uid 10002 and group ops gid 20001; dir2 has another alice
(uid 30001), yves (uid 10002, bob's), group ops (gid 30010) and group
g2 (gid 20001, dir's ops'). An earlier domain holding an entry's name or
id withholds it (DESIGN §11), and that must not depend on what the
earlier domain's cache happens to hold: asked first by the other key,
dir2's entries answered before, and then getpwnam or getpwuid gave
another identity for the same name or id."""
import sys
from pathlib import Path

import pytest

import nsenv
from test_e2e_ldap import LOCAL_GROUP, LOCAL_PASSWD, ldap_domain, private_slapd, pytestmark
from test_e2e_precedence import DIRECTORY, _group, _user

assert pytestmark

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "load"))
import idcproto as P  # noqa: E402

SECOND = (DIRECTORY.split("dn: uid=root")[0] + _user("alice", 30001) + _user("yves", 10002)
          + _user("zed", 30002) + _group("ops", 30010, ["zed"]) + _group("g2", 20001, ["zed"]))


@pytest.fixture(scope="module")
def dir1():
    yield from private_slapd("idc-two-1-", "s")


@pytest.fixture(scope="module")
def dir2():
    yield from private_slapd("idc-two-2-", "s", lambda p: p.write_text(SECOND))


def start(daemons, dir1, dir2):
    conf = ldap_domain(dir1.uri) + ldap_domain(dir2.uri).replace("[domain/dir]",
                                                                  "[domain/dir2]")
    return daemons.start(LOCAL_PASSWD, LOCAL_GROUP, idcache_conf="domains = local, dir, dir2\n",
                         domain_conf=conf)


def heads(d, argvs, env=None):
    return [(r.rc, ":".join(r.out.strip().split(":")[:3])) for r in d.ns.run_many(argvs, env=env)]


@pytest.mark.parametrize("maps", ["maps", "socket"])
def test_later_directory_does_not_answer_for_what_an_earlier_one_holds(daemons, dir1, dir2,
                                                                       maps):
    """Each question asked first by the key dir's cache has not seen:
    before, getpwuid(30001) answered dir2's `alice`, getpwnam(yves) uid
    10002, getgrgid(30010) `ops` and getgrnam(g2) gid 20001; then
    getpwnam(alice), getpwuid(10002), getgrnam(ops) and getgrgid(20001)
    answered dir's entries, so one name or id meant two identities."""
    d = start(daemons, dir1, dir2)
    env = None if maps == "maps" else {"IDCACHE_MEMCACHE": "no"}
    first = [["getent", "passwd", "30001"], ["getent", "passwd", "yves"],
             ["getent", "group", "30010"], ["getent", "group", "g2"],
             ["getent", "passwd", "zed"]]
    then = [["getent", "passwd", "alice"], ["getent", "passwd", "10002"],
            ["getent", "group", "ops"], ["getent", "group", "20001"]]
    want_first = [(2, ""), (2, ""), (2, ""), (2, ""), (0, "zed:x:30002")]
    want_then = [(0, "alice:x:10001"), (0, "bob:x:10002"), (0, "ops:x:20001"),
                 (0, "ops:x:20001")]
    assert heads(d, first, env) == want_first, d.log()[-3000:]
    assert heads(d, then, env) == want_then
    for _ in range(2):  # and so it stays (the second time from the maps)
        assert heads(d, first + then, env) == want_first + want_then


@pytest.mark.parametrize("maps", ["maps", "socket"])
def test_later_directory_does_not_give_its_users_an_earlier_ones_gid(daemons, dir1, dir2, maps):
    """zed (dir2) is in dir2's g2, gid 20001, which is dir's ops. Before,
    the first `id -G zed` (dir's ops not cached) listed 20001: a login of
    zed got dir's group as a supplementary group. (dir2's ops, 30010, is
    withheld too once dir's ops is known: dir holds the name.)"""
    d = start(daemons, dir1, dir2)
    env = None if maps == "maps" else {"IDCACHE_MEMCACHE": "no"}
    q = [["id", "-G", "zed"], ["getent", "group", "20001"]]
    for _ in range(3):
        got = heads(d, q, env)
        assert got == [(0, "30002"), (0, "ops:x:20001")], d.log()[-3000:]


@pytest.mark.skipif(nsenv.VALGRIND is None, reason="valgrind not installed")
def test_checks_under_valgrind(idcached_bin, nss_module_dir, dir1, dir2):
    """The checks of both kinds (deferred, answered at once from the
    negative cache, a client gone while its checks are out) make no
    invalid access and leak nothing."""
    base = nsenv.make_private_dir("idc-two-vg-")
    ns = nsenv.NsEnv(nss_module_dir, base / "run", base / "ns")
    wrap, vglog = nsenv.valgrind_wrap(ns, base)
    conf = ldap_domain(dir1.uri) + ldap_domain(dir2.uri).replace("[domain/dir]",
                                                                  "[domain/dir2]")
    d = nsenv.Daemon(idcached_bin, base, LOCAL_PASSWD, LOCAL_GROUP,
                     idcache_conf="domains = local, dir, dir2\n", domain_conf=conf, wrap=wrap)
    ok = False
    try:
        d.start(timeout=120)
        c = P.Client(d.run_dir / "nss.sock", timeout=60)
        c.s.sendall(P.request_frame(P.GETPWUID, 30002))  # closed while its check is out
        c.close()
        env = {"IDCACHE_MEMCACHE": "no"}
        q = [["id", "-G", "zed"], ["getent", "passwd", "30001"], ["getent", "group", "g2"],
             ["getent", "passwd", "zed"], ["getent", "passwd", "yves"]]
        for _ in range(2):  # the second round: negative cache and cached entries
            got = [(r.rc, r.out.strip().split(":")[0]) for r in ns.run_many(q, env=env,
                                                                            timeout=120)]
            assert got == [(0, "30002"), (2, ""), (2, ""), (0, "zed"), (2, "")], got
        nsenv.stop_checked_by_valgrind(d, vglog)
        ok = True
    finally:
        nsenv.end_checked_run(d, base, ok)
