"""Two directories that both hold a name or an id (SSSD's multi-domain
scenarios): `domains = local, dir, dir2`. dir (the fixtures) has alice
uid 10001, bob uid 10002 and group ops gid 20001; dir2 has another alice
(uid 30001), yves (uid 10002, bob's), group ops (gid 30010) and group
g2 (gid 20001, dir's ops'). An earlier domain holding an entry's name or
id withholds it (DESIGN §11), and that must not depend on what the
earlier domain's cache happens to hold: asked first by the other key,
dir2's entries answered before, and then getpwnam or getpwuid gave
another identity for the same name or id. dir2's groups g3 (gid 30020)
and g4 (30021) list dir2's wes and the names alice, ALICE, bob and Bob,
which mean dir's users (and LOC, the host's loc): a domain's group
counts only its own domain's users, as SSSD's do."""
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
          + _user("zed", 30002) + _group("ops", 30010, ["zed"]) + _group("g2", 20001, ["zed"])
          + _user("wes", 30003) + _group("g3", 30020, ["alice", "wes", "bob"])
          + _group("g4", 30021, ["ALICE", "LOC", "wes", "Bob"]))


@pytest.fixture(scope="module")
def dir1():
    yield from private_slapd("idc-two-1-", "s")


@pytest.fixture(scope="module")
def dir2():
    yield from private_slapd("idc-two-2-", "s", lambda p: p.write_text(SECOND))


def start(daemons, dir1, dir2, extra1="", extra2=""):
    conf = ldap_domain(dir1.uri, extra1) + ldap_domain(dir2.uri, extra2).replace(
        "[domain/dir]", "[domain/dir2]")
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


def members(r):
    return (r.rc, r.out.strip().split(":")[3].split(",") if r.rc == 0 else None)


def gids(d, user, env=None):
    r = d.ns.run(["id", "-G", user], env=env)
    assert r.rc == 0, r.err
    return set(int(x) for x in r.out.split())


@pytest.mark.parametrize("maps", ["maps", "socket"])
def test_later_directory_group_does_not_list_an_earlier_ones_user(daemons, dir1, dir2, maps):
    """Before, g3 listed alice and bob and g4 ALICE and Bob, dir's users
    once getpwnam had answered them: sudo's %g3 and polkit read the
    members, so dir2 made dir's alice a member of its group while her
    group list (initgroups, from dir alone) rightly lacked it. Asked in
    either order, the members are dir2's own users."""
    d = start(daemons, dir1, dir2)
    env = None if maps == "maps" else {"IDCACHE_MEMCACHE": "no"}
    q = [["getent", "group", "g3"], ["getent", "group", "30021"]]
    early = [members(r) for r in d.ns.run_many(q, env=env)]  # dir's alice, bob not cached
    assert early[0][0] == 0 and early[1][0] == 0, d.log()[-3000:]
    assert heads(d, [["getent", "passwd", "alice"], ["getent", "passwd", "bob"]], env) == [
        (0, "alice:x:10001"), (0, "bob:x:10002")]
    for _ in range(2):  # the second time from the maps
        got = [members(r) for r in d.ns.run_many(q, env=env)]
        assert got == [(0, ["wes"]), (0, ["wes"])], (early, d.log()[-3000:])
    assert not {30020, 30021} & gids(d, "alice", env)
    assert not {30020, 30021} & gids(d, "bob", env)
    assert not {30020, 30021} & gids(d, "loc", env)
    assert {30020, 30021} <= gids(d, "wes", env)


def test_later_directory_initgroups_counts_its_own_users_only(daemons, dir1, dir2):
    """`id alice` is dir's alice's group list, from dir's groups alone, even
    when dir2's groups naming alice were cached first: dir2's
    enumeration loads g3 and g4 (and its own alice, withheld)."""
    d = start(daemons, dir1, dir2, extra2="enumerate = true\n")
    ok, _ = nsenv.wait_for(lambda: d.ns.run(["getent", "group", "g4"]).rc == 0, timeout=20)
    assert ok, d.log()[-3000:]
    for env in (None, {"IDCACHE_MEMCACHE": "no"}):
        assert not {30020, 30021} & gids(d, "alice", env)
        assert not {30020, 30021} & gids(d, "ALICE", env)
        assert 20001 in gids(d, "alice", env)  # dir's ops lists her


def listing(d, kind):
    rows = [x.split(":") for x in d.ns.run(["getent", kind]).out.splitlines()]
    return [(r[0], int(r[2])) + ((tuple(r[3].split(",")),) if kind == "group" else ())
            for r in rows]


def test_enumeration_lists_the_earlier_identity_once(daemons, dir1, dir2):
    """Both directories enumerate: once dir's pages are in, getent passwd
    and getent group list alice, uid 10002 and ops once each, as dir's,
    and neither dir2's alice (30001), yves (10002), ops (30010) nor g2
    (gid 20001), and g3 and g4 list wes alone."""
    d = start(daemons, dir1, dir2, "enumerate = true\n", "enumerate = true\n")

    def loaded():
        groups = {g[0] for g in listing(d, "group")}
        return {"top", "p01", "g3", "g4"} <= groups
    ok, _ = nsenv.wait_for(loaded, timeout=30)
    assert ok, d.log()[-3000:]
    users = listing(d, "passwd")
    names = [u[0] for u in users]
    assert len(names) == len(set(names)), users
    uids = [u[1] for u in users]
    assert len(uids) == len(set(uids)), users
    assert ("alice", 10001) in users and ("bob", 10002) in users and ("wes", 30003) in users
    assert ("alice", 30001) not in users and "yves" not in names
    groups = listing(d, "group")
    gnames = [g[0] for g in groups]
    assert len(gnames) == len(set(gnames)), groups
    assert [g[1] for g in groups if g[0] == "ops"] == [20001]
    assert "g2" not in gnames
    assert [g[2] for g in groups if g[0] in ("g3", "g4")] == [("wes",), ("wes",)]


def test_enumeration_counts_with_the_earlier_cache(daemons, dir1, dir2):
    """dir does not enumerate: enumeration lists what the caches hold
    (idcache.conf(5) LOCAL IDENTITIES). dir2's alice (30001) and yves
    (10002) are listed while dir's alice and bob are not cached, and g3
    lists alice; once getpwnam has answered dir's users, a new listing
    has dir's alice and bob in their place, once, and g3 lists wes alone."""
    d = start(daemons, dir1, dir2, "", "enumerate = true\n")
    ok, _ = nsenv.wait_for(lambda: "g4" in {g[0] for g in listing(d, "group")}, timeout=30)
    assert ok, d.log()[-3000:]
    users = listing(d, "passwd")
    assert ("alice", 30001) in users and ("yves", 10002) in users, users
    g3 = [g[2] for g in listing(d, "group") if g[0] == "g3"]
    assert g3 == [("alice", "wes", "bob")], g3
    assert heads(d, [["getent", "passwd", "alice"], ["getent", "passwd", "10002"]]) == [
        (0, "alice:x:10001"), (0, "bob:x:10002")]
    users = listing(d, "passwd")
    assert ("alice", 10001) in users and ("bob", 10002) in users, users
    assert ("alice", 30001) not in users and "yves" not in [u[0] for u in users]
    g3 = [g[2] for g in listing(d, "group") if g[0] == "g3"]
    assert g3 == [("wes",)], g3


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
