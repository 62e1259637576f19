"""Freshness against a directory that changes (SSSD's test_ldap,
test_memory_cache and test_ts_cache scenarios): a real slapd of each test's
own on loopback (tests/ldap/slapd.sh with tests/ldap/fixtures.ldif),
idcached with an `id_provider = ldap` domain, glibc's getent and id through
libnss_idcache.so.2 in private mount namespaces. Every `id` or `getent` is
a new process, so what it prints comes from the daemon or the memory cache
as they are after the change, never from a client's own memory.

The fixtures: alice is in ops (memberUid) and dev (member DN); dev is a
member group of all, all of top. The scenarios marked BOTH run twice: with
lookups and expiry (poll), and with the daemon following the directory's
content synchronization feed (syncrepl), where the change arrives pushed.
"""
import os
import signal
import subprocess
import time

import pytest

import nsenv
from test_e2e_ldap import (BASE, REFRESHING, cache_holds, cli, private_slapd, pytestmark,
                           start_daemon, status)

assert pytestmark  # the same requirements (slapd, ldap-utils, openssl)

PEOPLE = f"ou=people,{BASE}"
GROUPS = f"ou=groups,{BASE}"


@pytest.fixture
def server(request):
    """The fixtures on a slapd of this test's own, which it changes; with
    the parameter "syncrepl" (indirect), the server offers content
    synchronization and the daemons follow it (start())."""
    sync = getattr(request, "param", "poll") == "syncrepl"
    yield from private_slapd("idc-ldap-fresh-", "s", syncprov=sync)


BOTH = pytest.mark.parametrize("server", ["poll", "syncrepl"], indirect=True)


def start(daemons, server, idcache, extra=""):
    """A daemon on server; with syncprov it follows the feed (ldap_sync =
    syncrepl), and is returned once the feed is live."""
    if not server.syncprov:
        return start_daemon(daemons, server.uri, extra)
    d = start_daemon(daemons, server.uri, extra + "ldap_sync = syncrepl\n")
    ok, _ = nsenv.wait_for(lambda: status(idcache, d).get("domain.dir.sync") == "live",
                           timeout=10, interval=0.05)
    assert ok, d.log()[-3000:]
    return d


def ldap_change(server, ldif):
    """Apply ldif (changetype records) as the directory's admin."""
    subprocess.run(["ldapmodify", "-x", "-H", server.uri, "-D", f"cn=admin,{BASE}", "-w",
                    "secret"], input=ldif, text=True, check=True, capture_output=True,
                   timeout=30)


def gids(d, user):
    """`id -G user` in a new process: its gids, or None when it fails."""
    r = d.ns.run_many([["id", "-G", user]])[0]
    return sorted(int(x) for x in r.out.split()) if r.rc == 0 else None


def let_a_second_pass():
    """What the cache holds was stored in an earlier second than what a
    lookup verifies from now on: an entry stored in the second a lookup's
    searches went out is never removed on that lookup's word (another
    lookup may have stored it meanwhile; timestamps have a one-second
    grain)."""
    now = int(time.time())
    while int(time.time()) <= now:
        time.sleep(0.05)


def settles(pred, timeout=10):
    ok, _ = nsenv.wait_for(pred, timeout=timeout, interval=0.2)
    return ok


@BOTH
def test_removed_memberships_leave_getgrouplist(server, module_daemons, idcache):
    """alice leaves ops (memberUid) and dev leaves all (so alice is no longer
    in all nor, through it, in top). After `idcache expire --all`, new
    processes no longer see ops, all and top, although none of those groups
    is looked up: polling, from the first `id` on (the expired list is
    fetched before the answer); following the feed, once it has caught up."""
    d = start(module_daemons, server, idcache)
    assert gids(d, "alice") == [10001, 20001, 20010, 20011, 20014]
    ldap_change(server, f"dn: cn=ops,{GROUPS}\nchangetype: modify\ndelete: memberUid\n"
                        f"memberUid: alice\n\ndn: cn=all,{GROUPS}\nchangetype: modify\n"
                        f"delete: member\nmember: cn=dev,{GROUPS}\n")
    cli(idcache, d, "expire", "--all")
    if not server.syncprov:
        assert gids(d, "alice") == [10001, 20010], d.log()[-3000:]
    assert settles(lambda: gids(d, "alice") == [10001, 20010]), (gids(d, "alice"),
                                                                  d.log()[-3000:])
    assert gids(d, "alice") == [10001, 20010]  # and it stays so
    assert cache_holds(idcache, d, "group", "ops")["members"] == "bob"
    assert cache_holds(idcache, d, "group", "all")["member_groups"] == ""


@BOTH
def test_removed_nesting_leaves_the_memory_cache(server, module_daemons, idcache):
    """dev leaves all while alice's group list is in the memory cache: once
    the background refresh stored all without dev (`idcache group all` shows
    its member groups), new processes no longer see all and top."""
    d = start(module_daemons, server, idcache, REFRESHING)
    for _ in range(2):  # the second answer comes from the memory cache
        assert gids(d, "alice") == [10001, 20001, 20010, 20011, 20014]
    assert d.ns.run_many([["getent", "group", "all"]])[0].rc == 0
    assert cache_holds(idcache, d, "group", "all")["member_groups"] == "dev"
    ldap_change(server, f"dn: cn=all,{GROUPS}\nchangetype: modify\ndelete: member\n"
                        f"member: cn=dev,{GROUPS}\n")
    assert settles(lambda: cache_holds(idcache, d, "group", "all")["member_groups"] == "")
    assert gids(d, "alice") == [10001, 20001, 20010], d.log()[-3000:]


@BOTH
def test_renamed_group_answers_by_gid_under_its_new_name(server, module_daemons, idcache):
    """ops and dev get new DNs (cn=opsnew, cn=devnew; the name attribute
    alone is in test_ldap_refresh): by gid, both answer under the new name
    once refreshed, and the old names are gone from the cache without being
    looked up."""
    d = start(module_daemons, server, idcache)
    got = d.ns.run_many([["getent", "group", "20001"], ["getent", "group", "20010"]])
    assert got[0].out.startswith("ops:") and got[1].out.startswith("dev:"), got
    let_a_second_pass()
    for old, new in (("ops", "opsnew"), ("dev", "devnew")):
        ldap_change(server, f"dn: cn={old},{GROUPS}\nchangetype: modrdn\nnewrdn: cn={new}\n"
                            f"deleteoldrdn: 1\n")
    cli(idcache, d, "expire", "--all")

    def renamed():
        got = d.ns.run_many([["getent", "group", "20001"], ["getent", "group", "20010"]])
        return got[0].out.startswith("opsnew:") and got[1].out.startswith("devnew:")
    assert settles(renamed), d.log()[-3000:]
    assert cache_holds(idcache, d, "group", "ops") is None
    assert cache_holds(idcache, d, "group", "dev") is None
    # all still names cn=dev (slapd keeps no referential integrity)
    assert gids(d, "alice") == [10001, 20001, 20010]


@BOTH
def test_renamed_user_answers_by_uid_under_its_new_name(server, module_daemons, idcache):
    """bob gets a new DN and name (uid=bobby): by uid he answers under the
    new name once refreshed, and the old name is gone from the cache
    without being looked up."""
    d = start(module_daemons, server, idcache)
    assert d.ns.run_many([["getent", "passwd", "10002"]])[0].out.startswith("bob:")
    let_a_second_pass()
    ldap_change(server, f"dn: uid=bob,{PEOPLE}\nchangetype: modrdn\nnewrdn: uid=bobby\n"
                        f"deleteoldrdn: 1\n")
    cli(idcache, d, "expire", "--all")
    assert settles(lambda: d.ns.run_many([["getent", "passwd", "10002"]])[0].out
                   .startswith("bobby:")), d.log()[-3000:]
    assert cache_holds(idcache, d, "user", "bob") is None


def test_member_dn_in_another_case(server, module_daemons, idcache):
    """`member: uid=ALICE,...` names alice (uid is caseIgnore): the group
    lists alice, and her group list holds it."""
    ldap_change(server, f"dn: cn=upper,{GROUPS}\nchangetype: add\nobjectClass: posixGroup\n"
                        f"objectClass: extensibleObject\ncn: upper\ngidNumber: 20090\n"
                        f"member: uid=ALICE,{PEOPLE}\n")
    d = start_daemon(module_daemons, server.uri)
    assert 20090 in gids(d, "alice")
    got = d.ns.run_many([["getent", "group", "upper"]])[0]
    assert got.rc == 0 and got.out.strip() == "upper:x:20090:alice", got


def test_modify_timestamp_alone_writes_no_durable_commit(server, module_daemons, idcache):
    """A change the cache does not keep (a description) moves only
    modifyTimestamp: refreshing alice and ops renews their timestamps and
    makes no durable commit to cache.mdb."""
    d = start_daemon(module_daemons, server.uri)
    got = d.ns.run_many([["getent", "passwd", "alice"], ["getent", "group", "ops"]])
    assert all(r.rc == 0 for r in got), got
    let_a_second_pass()  # modifyTimestamp has a one-second grain too
    ldap_change(server, f"dn: uid=alice,{PEOPLE}\nchangetype: modify\nreplace: description\n"
                        f"description: touched\n\ndn: cn=ops,{GROUPS}\nchangetype: modify\n"
                        f"replace: description\ndescription: touched\n")
    cli(idcache, d, "expire", "--all")
    s0 = status(idcache, d)
    d.ns.run_many([["getent", "passwd", "alice"], ["getent", "group", "ops"]])  # fetched again
    assert settles(lambda: cache_holds(idcache, d, "user", "alice")["expired"] == "no"
                   and cache_holds(idcache, d, "group", "ops")["expired"] == "no"), \
        d.log()[-3000:]
    s1 = status(idcache, d)
    assert int(s1["domain.dir.ldap_searches"]) > int(s0["domain.dir.ldap_searches"])
    assert s1["cache_durable_commits"] == s0["cache_durable_commits"], (s0, s1)


# ==== expired entries are asked for again (SSSD's entry_cache_nowait_percentage) ====

ALICE_LEAVES_OPS = (f"dn: cn=ops,{GROUPS}\nchangetype: modify\ndelete: memberUid\n"
                    f"memberUid: alice\n\ndn: uid=alice,{PEOPLE}\nchangetype: modify\n"
                    f"replace: gecos\ngecos: Alice Renamed\n")

MAPS = pytest.mark.parametrize("maps", ["maps", "socket"])


def lookups(d, maps, argvs):
    """argvs in new processes, through the memory maps or the socket only."""
    env = None if maps == "maps" else {"IDCACHE_MEMCACHE": "no"}
    return d.ns.run_many(argvs, env=env)


def alice_now(d, maps):
    got = lookups(d, maps, [["id", "-G", "alice"], ["getent", "passwd", "alice"]])
    assert all(r.rc == 0 for r in got), got
    return sorted(int(x) for x in got[0].out.split()), got[1].out.split(":")[4]


@MAPS
def test_first_lookup_after_expire_shows_the_directory(server, module_daemons, idcache, maps):
    """alice leaves ops and gets a new gecos; after `idcache expire --all`
    the FIRST `id` and `getent passwd` show the new state: an expired
    entry is fetched and the lookup waits for it (no stale answer once)."""
    d = start_daemon(module_daemons, server.uri)
    for _ in range(2):  # the second from the memory maps, when on
        assert alice_now(d, maps) == ([10001, 20001, 20010, 20011, 20014], "Alice Test")
    let_a_second_pass()
    ldap_change(server, ALICE_LEAVES_OPS)
    cli(idcache, d, "expire", "--all")
    assert alice_now(d, maps) == ([10001, 20010, 20011, 20014], "Alice Renamed"), \
        d.log()[-3000:]
    assert cache_holds(idcache, d, "user", "alice")["expired"] == "no"


@MAPS
def test_expired_entries_are_served_when_the_directory_stops(server, module_daemons, idcache,
                                                             maps):
    """The directory stops answering (SIGSTOP) after the expire: the first
    lookup waits for it until the search times out, then the cached entry
    is served (never "not found"); the domain is offline then, and the
    next lookups answer from the cache without asking it again."""
    d = start_daemon(module_daemons, server.uri)  # ldap_search_timeout = 3
    want = ([10001, 20001, 20010, 20011, 20014], "Alice Test")
    assert alice_now(d, maps) == want
    cli(idcache, d, "expire", "--all")
    nsenv.stop_process(server.pid)
    try:
        assert alice_now(d, maps) == want, d.log()[-3000:]
        assert status(idcache, d)["domain.dir.state"] == "offline", d.log()[-3000:]
        s0 = status(idcache, d)["domain.dir.ldap_searches"]
        assert alice_now(d, maps) == want
        got = lookups(d, maps, [["getent", "group", "ops"], ["getent", "group", "20010"]])
        assert [r.rc for r in got] == [0, 0], got
        assert status(idcache, d)["domain.dir.ldap_searches"] == s0  # not asked again
    finally:
        os.kill(server.pid, signal.SIGCONT)


@MAPS
def test_entry_in_its_refresh_window_is_served_and_refreshed_behind(server, module_daemons,
                                                                    idcache, maps):
    """entry_cache_timeout = 20 with entry_cache_nowait_percentage = 50: a
    lookup 10 s or more after the entry was stored (and before it expires)
    is answered from the cache at once — the old gecos — and the entry is
    refreshed behind: the cache then holds the new one, without any further
    lookup (`idcache user` asks nobody)."""
    d = start_daemon(module_daemons, server.uri,
                     "entry_cache_timeout = 20\nentry_cache_nowait_percentage = 50\n")
    assert alice_now(d, maps)[1] == "Alice Test"
    stored = int(cache_holds(idcache, d, "user", "alice")["last_update"].split()[0])
    let_a_second_pass()
    ldap_change(server, f"dn: uid=alice,{PEOPLE}\nchangetype: modify\nreplace: gecos\n"
                        f"gecos: Alice Renamed\n")
    t_window = stored + 10
    while time.time() < t_window + 1:  # into the window (no timing asserted)
        time.sleep(0.2)
    assert cache_holds(idcache, d, "user", "alice")["expired"] == "no"
    r = lookups(d, maps, [["getent", "passwd", "alice"]])[0]
    assert r.rc == 0 and r.out.split(":")[4] == "Alice Test", r  # served from the cache
    assert settles(lambda: cache_holds(idcache, d, "user", "alice")["gecos"] ==
                   "Alice Renamed", timeout=30), d.log()[-3000:]
    assert lookups(d, maps, [["getent", "passwd", "alice"]])[0].out.split(":")[4] == \
        "Alice Renamed"

