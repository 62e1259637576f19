"""Content synchronization (RFC 4533) against Debian's slapd with the
syncprov overlay (tests/ldap/slapd.sh, SLAPD_SYNCPROV=1), each test on a
directory of its own: what the directory changes is visible through NSS
(getent, id) within a bounded wait, with no search sent for lookups while
the feed is live; the feed resumes with its cookie after a server or
daemon restart; a server without syncprov is polled."""
import os
import signal
import socket
import subprocess
import threading
import time

import pytest

import nsenv
from test_attack_ldap import fakes  # noqa: F401 (a fixture: tests/ldap/fakeldap.py)
from test_e2e_ldap import (BASE, LOCAL_GROUP, LOCAL_PASSWD, SLAPD, Slapd, cache_holds, cli,
                           ldap_domain, start_daemon, status)

pytestmark = [
    pytest.mark.usefixtures("as_root"),
    pytest.mark.skipif(not (os.access(SLAPD, os.X_OK) and os.path.exists(
        "/usr/lib/ldap/syncprov.so")), reason="needs Debian's slapd with syncprov"),
]

SYNC = "ldap_sync = syncrepl\nentry_cache_timeout = 1\n"
AUTO = "entry_cache_timeout = 1\n"  # ldap_sync = auto, the default
WAIT = 10  # seconds a change may take to show (loopback: milliseconds)


@pytest.fixture
def sp():
    base = nsenv.make_private_dir("idc-sync-")
    s = Slapd(base, "sp", syncprov=True)
    s.start()
    yield s
    if s.pid is not None:
        try:
            os.kill(s.pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
    s.stop()
    nsenv.remove_tree(base)


def ldapmodify(server, ldif):
    p = subprocess.run(["ldapmodify", "-x", "-H", server.uri, "-D", f"cn=admin,{BASE}", "-w",
                        "secret"], input=ldif, capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr


def user_ldif(name, uid, gecos="Test User"):
    return (f"dn: uid={name},ou=people,{BASE}\nchangetype: add\nobjectClass: account\n"
            f"objectClass: posixAccount\nuid: {name}\ncn: {name}\nuidNumber: {uid}\n"
            f"gidNumber: {uid}\nhomeDirectory: /home/{name}\nloginShell: /bin/sh\n"
            f"gecos: {gecos}\n\n")


def wait_live(idcache, d, timeout=WAIT):
    ok, _ = nsenv.wait_for(lambda: status(idcache, d).get("domain.dir.sync") == "live",
                           timeout=timeout, interval=0.05)
    assert ok, (status(idcache, d), d.log()[-3000:])


def visible(d, argv, want, timeout=WAIT):
    """Wait until argv's output (through NSS) satisfies want(result);
    returns the seconds it took."""
    t0 = time.monotonic()
    ok, _ = nsenv.wait_for(lambda: want(d.ns.run(argv)), timeout=timeout, interval=0.02)
    assert ok, (argv, d.ns.run(argv), d.log()[-3000:])
    return time.monotonic() - t0


def searches(idcache, d):
    return int(status(idcache, d)["domain.dir.ldap_searches"])


def test_changes_are_pushed_without_lookup_searches(sp, daemons, idcache):
    """ldap_sync = auto (the default) against syncprov: adds, modifies,
    renames and deletes of users reach getent by uid and by name, and no
    lookup sends a search (the daemon's counter and slapd's log agree)."""
    d = start_daemon(daemons, sp.uri, AUTO)
    wait_live(idcache, d)
    n0, srch0 = searches(idcache, d), sp.srch_count()
    s0 = status(idcache, d)
    got = d.ns.run_many([["getent", "passwd", "alice"], ["id", "alice"], ["getent", "group",
                                                                          "dev"],
                         ["getent", "passwd", "nosuchuser"], ["getent", "passwd", "99999"]])
    assert got[0].rc == 0 and got[0].out.startswith("alice:x:10001:"), got[0]
    assert got[1].rc == 0 and "20014(top)" in got[1].out, got[1]
    assert got[2].rc == 0 and got[2].out.startswith("dev:x:20010:"), got[2]
    assert got[3].rc == 2 and got[4].rc == 2
    # add a user
    ldapmodify(sp, user_ldif("newbie", 10050))
    visible(d, ["getent", "passwd", "newbie"], lambda r: r.rc == 0 and ":10050:" in r.out)
    # modify it
    ldapmodify(sp, f"dn: uid=newbie,ou=people,{BASE}\nchangetype: modify\nreplace: gecos\n"
                   "gecos: Changed Gecos\n\n")
    visible(d, ["getent", "passwd", "newbie"], lambda r: "Changed Gecos" in r.out)
    # rename it
    ldapmodify(sp, f"dn: uid=newbie,ou=people,{BASE}\nchangetype: modrdn\nnewrdn: uid=oldie\n"
                   "deleteoldrdn: 1\n\n")
    visible(d, ["getent", "passwd", "oldie"], lambda r: r.rc == 0 and ":10050:" in r.out)
    visible(d, ["getent", "passwd", "newbie"], lambda r: r.rc == 2)
    visible(d, ["getent", "passwd", "10050"], lambda r: r.out.startswith("oldie:"))
    # delete it
    ldapmodify(sp, f"dn: uid=oldie,ou=people,{BASE}\nchangetype: delete\n\n")
    visible(d, ["getent", "passwd", "10050"], lambda r: r.rc == 2)
    visible(d, ["getent", "passwd", "oldie"], lambda r: r.rc == 2)
    assert searches(idcache, d) == n0, "lookups searched while the feed was live"
    assert sp.srch_count() == srch0, "the directory saw a search"
    st = status(idcache, d)
    assert st["domain.dir.sync_full_refreshes"] == "1", st
    assert int(st["domain.dir.sync_changes"]) >= 4, st
    # told record by record: the maps were not reset
    for m in ("passwd", "group"):
        assert st[f"memcache_{m}_generation"] == s0[f"memcache_{m}_generation"], (m, s0, st)


def test_ssh_keys_follow_the_feed(sp, daemons, idcache, tmp_path):
    """A key added to, replaced in and removed from a user's entry while the
    feed is live reaches `idcache ssh-authorized-keys` (as sshd runs it),
    with no search: keys are stored with the user by the same path."""
    from test_e2e_sshkeys import authorized_keys, keygen
    d = start_daemon(daemons, sp.uri, AUTO)
    wait_live(idcache, d)
    n0 = searches(idcache, d)
    ka, kb = keygen(tmp_path / "ka", "ka"), keygen(tmp_path / "kb", "kb")
    dn = f"dn: uid=alice,ou=people,{BASE}\nchangetype: modify\n"
    ldapmodify(sp, dn + "add: objectClass\nobjectClass: ldapPublicKey\n-\n"
                        f"add: sshPublicKey\nsshPublicKey: {ka}\n\n")
    visible(d, ["true"], lambda r: authorized_keys(idcache, d, "alice").out.split("\n")[:1]
            == [ka])
    ldapmodify(sp, dn + f"replace: sshPublicKey\nsshPublicKey: {kb}\n\n")
    visible(d, ["true"], lambda r: authorized_keys(idcache, d, "alice").out.strip() == kb)
    ldapmodify(sp, dn + "delete: sshPublicKey\n\n")
    visible(d, ["true"], lambda r: (lambda a: a.rc == 0 and a.out == "")(
        authorized_keys(idcache, d, "alice")))
    assert searches(idcache, d) == n0, "asking for keys searched while the feed was live"


def gids(d, name):
    r = d.ns.run(["id", "-Gn", name])  # rc 1: the primary group has no name
    assert r.out, (r, d.log()[-1500:])
    return set(r.out.split())


def test_two_bases_two_feeds(sp, daemons, idcache):
    """Separate user and group bases: a feed each (users' first), member
    DNs named from the users' records (ldap_member_names_from_rdn =
    false), changes on both, and both resume after a restart."""
    d = start_daemon(daemons, sp.uri, SYNC + f"ldap_user_search_base = ou=people,{BASE}\n"
                     f"ldap_group_search_base = ou=groups,{BASE}\n"
                     "ldap_member_names_from_rdn = false\n")
    wait_live(idcache, d)
    assert len(feed_log(d)) == 2, feed_log(d)
    assert {"dev", "all", "top"} <= gids(d, "alice")
    n0 = searches(idcache, d)
    ldapmodify(sp, user_ldif("twofeed", 10070) +
               f"dn: cn=dev,ou=groups,{BASE}\nchangetype: modify\nadd: member\n"
               f"member: uid=twofeed,ou=people,{BASE}\n\n")
    visible(d, ["id", "-Gn", "twofeed"], lambda r: {"dev", "all", "top"} <= set(r.out.split()))
    assert searches(idcache, d) == n0
    d.stop()
    ldapmodify(sp, f"dn: uid=twofeed,ou=people,{BASE}\nchangetype: delete\n\n"
                   f"dn: cn=c1,ou=groups,{BASE}\nchangetype: delete\n\n")
    d.start()
    wait_live(idcache, d)
    assert [k for k, _, _ in feed_log(d)[-2:]] == ["resumed", "resumed"], feed_log(d)
    visible(d, ["getent", "passwd", "twofeed"], lambda r: r.rc == 2)
    visible(d, ["getent", "group", "c1"], lambda r: r.rc == 2)


def test_memberships_direct_nested_and_group_renames(sp, daemons, idcache):
    """Membership changes, direct (memberUid, member DN) and nested, and a
    group rename and delete, reach `id` and `getent group` with no search."""
    d = start_daemon(daemons, sp.uri, SYNC)
    wait_live(idcache, d)
    assert {"dev", "all", "top"} <= gids(d, "alice")
    assert {"all", "top"} <= gids(d, "carol") and "dev" not in gids(d, "carol")
    n0 = searches(idcache, d)
    g = f"ou=groups,{BASE}"
    # member DN added: carol joins dev
    ldapmodify(sp, f"dn: cn=dev,{g}\nchangetype: modify\nadd: member\n"
                   f"member: uid=carol,ou=people,{BASE}\n\n")
    visible(d, ["id", "-Gn", "carol"], lambda r: "dev" in r.out.split())
    # memberUid added and removed
    ldapmodify(sp, f"dn: cn=ops,{g}\nchangetype: modify\nadd: memberUid\nmemberUid: frank\n\n")
    visible(d, ["id", "-Gn", "frank"], lambda r: "ops" in r.out.split())
    ldapmodify(sp, f"dn: cn=ops,{g}\nchangetype: modify\ndelete: memberUid\nmemberUid: bob\n\n")
    visible(d, ["id", "-Gn", "bob"], lambda r: r.out and "ops" not in r.out.split())
    visible(d, ["getent", "group", "ops"], lambda r: r.out.strip().endswith(":alice,frank"))
    # nesting removed: dev leaves all, so alice and bob leave all and top
    ldapmodify(sp, f"dn: cn=all,{g}\nchangetype: modify\ndelete: member\n"
                   f"member: cn=dev,{g}\n\n")
    visible(d, ["id", "-Gn", "alice"],
            lambda r: r.out and not {"all", "top"} & set(r.out.split()))
    assert {"all", "top"} <= gids(d, "carol")  # still a direct member of all
    # nesting added back through a new group
    ldapmodify(sp, f"dn: cn=mid,{g}\nchangetype: add\nobjectClass: posixGroup\n"
                   f"objectClass: extensibleObject\ncn: mid\ngidNumber: 20099\nmember: cn=dev,{g}\n\n"
                   f"dn: cn=top,{g}\nchangetype: modify\nadd: member\nmember: cn=mid,{g}\n\n")
    visible(d, ["id", "-Gn", "bob"], lambda r: {"mid", "top"} <= set(r.out.split()))
    # a group renamed: the new name answers, the old one does not
    ldapmodify(sp, f"dn: cn=mid,{g}\nchangetype: modrdn\nnewrdn: cn=middle\n"
                   "deleteoldrdn: 1\n\n")
    visible(d, ["getent", "group", "middle"], lambda r: r.out.startswith("middle:x:20099:"))
    visible(d, ["getent", "group", "mid"], lambda r: r.rc == 2)
    visible(d, ["getent", "group", "20099"], lambda r: r.out.startswith("middle:"))
    visible(d, ["id", "-Gn", "alice"], lambda r: "middle" in r.out.split())
    # a group deleted
    ldapmodify(sp, f"dn: cn=c2,{g}\nchangetype: delete\n\n")
    visible(d, ["getent", "group", "c2"], lambda r: r.rc == 2)
    visible(d, ["getent", "group", "20013"], lambda r: r.rc == 2)
    assert searches(idcache, d) == n0, "lookups searched while the feed was live"


def feed_log(d):
    """The "live" lines the daemon logged, as (kind, named, changed)."""
    out = []
    for line in d.log().splitlines():
        if "sync feed of" in line and " live: " in line:
            tail = line.split(" live: ")[1]
            kind = tail.split(",")[0]
            named = int(tail.split(", ")[1].split()[0])
            changed = int(tail.split(", ")[2].split()[0])
            out.append((kind, named, changed))
    return out


def test_restart_resumes_with_the_cookie(sp, daemons, idcache):
    """A daemon restart sends the stored cookie and receives only what
    changed meanwhile (an add and a delete), not the directory; a server
    restart likewise."""
    d = start_daemon(daemons, sp.uri, SYNC)
    wait_live(idcache, d)
    assert feed_log(d)[-1][0] == "full refresh"
    full_named = feed_log(d)[-1][1]
    assert d.ns.run(["id", "bob"]).rc == 0
    d.stop()
    print(subprocess.run([str(idcache), "db", "-d", str(d.state_dir / "cache.mdb"), "search",
                          "-b", "cn=state,cn=dir,cn=idcache", "(stateKey=cookie*)"],
                         capture_output=True, text=True).stdout)
    ldapmodify(sp, user_ldif("late", 10060))
    ldapmodify(sp, f"dn: uid=bob,ou=people,{BASE}\nchangetype: delete\n\n")
    d.start()
    wait_live(idcache, d)
    kind, named, changed = feed_log(d)[-1]
    assert kind == "resumed", feed_log(d)
    assert named <= 2 < full_named, feed_log(d)  # the two changes, not every entry
    st = status(idcache, d)
    assert st["domain.dir.sync_full_refreshes"] == "0", st
    assert int(st["domain.dir.sync_cookie_age"]) >= 0, st
    visible(d, ["getent", "passwd", "late"], lambda r: r.rc == 0)
    visible(d, ["getent", "passwd", "bob"], lambda r: r.rc == 2)
    visible(d, ["getent", "passwd", "10002"], lambda r: r.rc == 2)
    # the server restarts: the feed comes back by itself, resumed
    sp.stop()
    ok, _ = nsenv.wait_for(lambda: status(idcache, d)["domain.dir.sync"] != "live", timeout=WAIT)
    assert ok
    assert d.ns.run(["getent", "passwd", "alice"]).rc == 0  # served from the cache
    sp.start()
    wait_live(idcache, d, timeout=20)
    ldapmodify(sp, user_ldif("after", 10061))
    visible(d, ["getent", "passwd", "after"], lambda r: r.rc == 0)
    assert status(idcache, d)["domain.dir.sync_full_refreshes"] == "0"
    assert feed_log(d)[-1][0] == "resumed", feed_log(d)


def test_network_cut_then_changes(sp, daemons, idcache):
    """The server stops answering (SIGSTOP): the keepalive finds the feed
    dead, the cache keeps answering; changes made as it comes back
    (SIGCONT) arrive with the resumed feed."""
    d = start_daemon(daemons, sp.uri, SYNC + "ldap_sync_keepalive = 1\n")
    wait_live(idcache, d)
    nsenv.stop_process(sp.pid)
    try:
        ok, _ = nsenv.wait_for(lambda: status(idcache, d)["domain.dir.sync"] == "down",
                               timeout=WAIT, interval=0.1)
        assert ok, (status(idcache, d), d.log()[-2000:])
        r = d.ns.run(["id", "alice"], timeout=5)
        assert r.rc == 0 and "20014(top)" in r.out, r
    finally:
        os.kill(sp.pid, signal.SIGCONT)
    ldapmodify(sp, user_ldif("cutover", 10062))
    ldapmodify(sp, f"dn: uid=carol,ou=people,{BASE}\nchangetype: delete\n\n")
    wait_live(idcache, d, timeout=30)
    visible(d, ["getent", "passwd", "cutover"], lambda r: r.rc == 0)
    visible(d, ["getent", "passwd", "carol"], lambda r: r.rc == 2)
    assert status(idcache, d)["domain.dir.sync_full_refreshes"] == "1"


class Cut:
    """A TCP relay to server on a port of its own; while cut, it relays
    nothing in either direction and closes nothing (a network gone
    silent), for new connections too."""

    def __init__(self, server):
        self.target = ("127.0.0.1", server.port)
        self.lsock = socket.socket()
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(16)
        self.uri = f"ldap://127.0.0.1:{self.lsock.getsockname()[1]}"
        self.open = threading.Event()
        self.open.set()
        self.done = False
        self.socks = []
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while not self.done:
            try:
                c, _ = self.lsock.accept()
            except OSError:
                return
            u = socket.create_connection(self.target)
            self.socks += [c, u]
            for a, b in ((c, u), (u, c)):
                threading.Thread(target=self.pump, args=(a, b), daemon=True).start()

    def pump(self, a, b):
        try:
            while True:
                data = a.recv(65536)
                if not data:
                    break
                self.open.wait()
                b.sendall(data)
        except OSError:
            pass
        for x in (a, b):
            try:
                x.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self):
        self.done = True
        self.open.set()
        self.lsock.close()
        for x in self.socks:
            x.close()


def test_network_cut_with_changes_made_meanwhile(sp, daemons, idcache):
    """The network between the daemon and a running server goes silent:
    the keepalive finds the feed dead, the cache keeps answering, changes
    are made at the server meanwhile; when the network is back the feed
    resumes with its cookie and brings exactly those changes."""
    cut = Cut(sp)
    try:
        d = start_daemon(daemons, cut.uri, SYNC + "ldap_sync_keepalive = 0.5\n")
        wait_live(idcache, d)
        cut.open.clear()
        ok, _ = nsenv.wait_for(lambda: status(idcache, d)["domain.dir.sync"] == "down",
                               timeout=WAIT, interval=0.1)
        assert ok, (status(idcache, d), d.log()[-2000:])
        ldapmodify(sp, user_ldif("meanwhile", 10063))
        ldapmodify(sp, f"dn: uid=frank,ou=people,{BASE}\nchangetype: delete\n\n")
        r = d.ns.run(["id", "alice"], timeout=5)
        assert r.rc == 0 and "20014(top)" in r.out, r
        assert d.ns.run(["getent", "passwd", "meanwhile"]).rc == 2  # not yet
        cut.open.set()
        wait_live(idcache, d, timeout=90)
        visible(d, ["getent", "passwd", "meanwhile"], lambda r: r.rc == 0)
        visible(d, ["getent", "passwd", "frank"], lambda r: r.rc == 2)
        kind, named, _ = feed_log(d)[-1]
        assert kind == "resumed" and named <= 2, feed_log(d)
    finally:
        cut.close()


def test_feed_down_too_long_falls_back_to_expiry(sp, daemons, idcache):
    """Down longer than ldap_sync_fallback_timeout: every entry expires
    (served still, refreshed by lookups as when polling); once the feed is
    live again, entries it stores no longer expire."""
    d = start_daemon(daemons, sp.uri, SYNC + "ldap_sync_keepalive = 0.5\n"
                     "ldap_sync_fallback_timeout = 1\n")
    wait_live(idcache, d)
    assert cache_holds(idcache, d, "user", "alice")["expired"] == "no"
    nsenv.stop_process(sp.pid)
    try:
        ok, _ = nsenv.wait_for(lambda: "lookups search again" in d.log(), timeout=WAIT)
        assert ok, d.log()[-2000:]
        assert cache_holds(idcache, d, "user", "alice")["expired"] == "yes"
        assert d.ns.run(["getent", "passwd", "alice"], timeout=10).rc == 0
    finally:
        os.kill(sp.pid, signal.SIGCONT)
    wait_live(idcache, d, timeout=30)
    ldapmodify(sp, f"dn: uid=alice,ou=people,{BASE}\nchangetype: modify\nreplace: gecos\n"
                   "gecos: Back Again\n\n")
    visible(d, ["getent", "passwd", "alice"], lambda r: "Back Again" in r.out)
    assert cache_holds(idcache, d, "user", "alice")["expired"] == "no"


def test_expire_while_live_refreshes_in_full(sp, daemons, idcache):
    """`idcache expire --all` on a live domain: the feed refreshes in full
    (without its cookie), after which no entry is expired; still no search
    for lookups."""
    d = start_daemon(daemons, sp.uri, SYNC)
    wait_live(idcache, d)
    n0 = searches(idcache, d)
    cli(idcache, d, "expire", "--all")
    ok, _ = nsenv.wait_for(lambda: status(idcache, d)["domain.dir.sync_full_refreshes"] == "2"
                           and status(idcache, d)["domain.dir.sync"] == "live", timeout=WAIT)
    assert ok, (status(idcache, d), d.log()[-2000:])
    assert cache_holds(idcache, d, "user", "alice")["expired"] == "no"
    assert d.ns.run(["id", "alice"]).rc == 0
    assert searches(idcache, d) == n0 + 1  # the feed's new search, no lookup's


def test_feed_larger_than_max_entries_is_given_up(sp, daemons, idcache):
    """A directory with more entries than ldap_max_entries (here 10 of the
    fixtures' 44, or a server adding without end) is not followed: the
    feed is given up with a warning, lookups search as when polling."""
    d = start_daemon(daemons, sp.uri, SYNC + "ldap_max_entries = 10\n")
    ok, _ = nsenv.wait_for(lambda: "more entries than ldap_max_entries" in d.log(),
                           timeout=WAIT)
    assert ok, d.log()[-2000:]
    ok, _ = nsenv.wait_for(lambda: status(idcache, d)["domain.dir.sync"] == "poll", timeout=WAIT)
    assert ok, status(idcache, d)
    n0 = searches(idcache, d)
    assert d.ns.run(["getent", "passwd", "alice"]).rc == 0
    assert searches(idcache, d) > n0


def test_server_without_syncprov_is_polled(daemons, idcache):
    """auto against a server that does not list the control: polling, as
    before (lookups search); syncrepl against it: refused, polled too."""
    base = nsenv.make_private_dir("idc-nosync-")
    s = Slapd(base, "plain")
    s.start()
    try:
        for mode in ("auto", "syncrepl"):
            d = start_daemon(daemons, s.uri, f"ldap_sync = {mode}\n")
            r = d.ns.run(["getent", "passwd", "alice"])
            assert r.rc == 0, r
            ok, _ = nsenv.wait_for(lambda: status(idcache, d)["domain.dir.sync"] == "poll",
                                   timeout=WAIT)
            assert ok, (mode, status(idcache, d))
            assert "polling instead" in d.log()
            n0 = searches(idcache, d)
            assert d.ns.run(["getent", "passwd", "bob"]).rc == 0
            assert searches(idcache, d) > n0, "a poll-mode miss did not search"
            d.stop()
    finally:
        s.stop()
        nsenv.remove_tree(base)


# ==== a server that refuses the cookie, and hostile ones (tests/ldap/fakeldap.py) ====

def test_refused_cookie_means_a_full_refresh_swapped_in(fakes, daemons, idcache):
    """The server answers the stored cookie with e-syncRefreshRequired: the
    daemon refreshes in full without the cookie, and what the new refresh
    lacks (bob, and bob's membership of staff) is gone once it is swapped
    in; until then the old content is served."""
    f = fakes("sync")
    d = start_daemon(daemons, f.uri, "ldap_sync = auto\n")
    wait_live(idcache, d)
    assert d.ns.run(["getent", "passwd", "bob"]).rc == 0
    assert d.ns.run(["getent", "group", "staff"]).out.strip() == "staff:x:30000:alice,bob"
    d.stop()
    d.start()
    wait_live(idcache, d)
    assert "refused the sync cookie" in d.log()
    visible(d, ["getent", "passwd", "bob"], lambda r: r.rc == 2)
    visible(d, ["getent", "group", "staff"], lambda r: r.out.strip() == "staff:x:30000:alice")
    st = status(idcache, d)
    assert st["domain.dir.sync_full_refreshes"] == "1", st


def test_sync_id_sets_delete_and_name_present(fakes, daemons, idcache):
    """A resume answered with syncIdSet messages: refreshDeletes TRUE
    deletes the UUIDs it lists (bob); FALSE names what is present, and
    after the present phase what it left out is gone (carol)."""
    f = fakes("syncids")
    d = start_daemon(daemons, f.uri, "ldap_sync = syncrepl\n")
    wait_live(idcache, d)
    for name in ("alice", "bob", "carol"):
        assert d.ns.run(["getent", "passwd", name]).rc == 0, name
    for expect_gone in ("bob", "carol"):
        d.stop()
        d.start()
        wait_live(idcache, d)
        visible(d, ["getent", "passwd", expect_gone], lambda r: r.rc == 2)
        assert d.ns.run(["getent", "passwd", "alice"]).rc == 0
    assert d.ns.run(["getent", "group", "staff"]).rc == 0
    st = status(idcache, d)
    assert st["domain.dir.sync_full_refreshes"] == "0" and st["domain.dir.sync_entries"] == "2", st


@pytest.mark.parametrize("how", [0, 1, 2])
def test_malformed_sync_state_drops_the_connection(fakes, daemons, idcache, how):
    """An entry whose Sync State control is malformed (a 15-byte UUID, a
    length past the end, none at all): logged, the connection dropped,
    nothing stored from it; the daemon keeps answering."""
    f = fakes("syncbad", how)
    d = start_daemon(daemons, f.uri, "ldap_sync = syncrepl\n")
    ok, _ = nsenv.wait_for(lambda: "sync feed: an entry without a valid Sync State" in d.log(),
                           timeout=WAIT)
    assert ok, d.log()[-2000:]
    assert d.ns.run(["getent", "passwd", "loc"]).rc == 0
    assert status(idcache, d)["domain.dir.sync"] != "live"
    assert "alice" not in d.ns.run(["getent", "passwd"]).out


# ==== kill -9 ================================================================================

def db_check(idcache, d):
    r = subprocess.run([str(idcache), "db", "-d", str(d.state_dir / "cache.mdb"), "check"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, (r.stdout, r.stderr)


@pytest.fixture
def big_sp():
    from test_e2e_ldap import big_ldif
    base = nsenv.make_private_dir("idc-sync-big-")
    ldif = base / "big.ldif"
    big_ldif(ldif, 20000, 500)
    s = Slapd(base, "big", ldif=ldif, syncprov=True)
    s.start()
    yield s
    s.stop()
    nsenv.remove_tree(base)


def count_users(d, prefix):
    return sum(1 for u in d.ns.run(["getent", "passwd"]).out.splitlines()
               if u.startswith(prefix))


def test_kill9_during_refresh_and_persist(big_sp, daemons, idcache):
    """kill -9 while the first refresh is read (nothing of it committed),
    then while notices are applied: each time the store passes `idcache db
    check` and the next start resumes — from nothing the first time (a
    full refresh), with the cookie the second (only what changed)."""
    s = big_sp
    d = start_daemon(daemons, s.uri, SYNC)
    ok, _ = nsenv.wait_for(lambda: status(idcache, d)["domain.dir.sync"] == "refreshing",
                           timeout=WAIT, interval=0.005)
    assert ok, status(idcache, d)
    d.kill()
    db_check(idcache, d)
    d.start()
    wait_live(idcache, d, timeout=60)
    assert count_users(d, "e") == 20000
    # notices: 300 users added by one client while the daemon dies
    adds = "".join(user_ldif(f"n{i}", 400000 + i) for i in range(300))
    p = subprocess.Popen(["ldapmodify", "-x", "-H", s.uri, "-D", f"cn=admin,{BASE}", "-w",
                          "secret"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True)
    p.stdin.write(adds)
    p.stdin.close()
    ok, _ = nsenv.wait_for(lambda: d.ns.run(["getent", "passwd", "n20"]).rc == 0,
                           timeout=WAIT, interval=0.01)
    assert ok
    d.kill()
    assert p.wait(timeout=60) == 0
    db_check(idcache, d)
    d.start()
    wait_live(idcache, d, timeout=60)
    visible(d, ["getent", "passwd", "n299"], lambda r: r.rc == 0)
    assert count_users(d, "n") == 300
    assert feed_log(d)[-1][0] == "resumed", feed_log(d)
    assert feed_log(d)[-1][1] < 1000, feed_log(d)  # the adds it missed, not 20,000


def order_ldif(n):
    """A user and a group, then n rounds of changes to both (the user's
    gecos set to its round, its membership added and removed in turn), then
    the group renamed and a new group taking its old name: only the changes
    applied in the order made leave the last round's state."""
    g = f"ou=groups,{BASE}"
    out = [user_ldif("ord", 30500),
           f"dn: cn=ordg,{g}\nchangetype: add\nobjectClass: posixGroup\ncn: ordg\n"
           "gidNumber: 30501\n\n"]
    for i in range(n):
        out.append(f"dn: uid=ord,ou=people,{BASE}\nchangetype: modify\nreplace: gecos\n"
                   f"gecos: round {i}\n\n")
        op = "add" if i % 2 == 0 else "delete"
        out.append(f"dn: cn=ordg,{g}\nchangetype: modify\n{op}: memberUid\nmemberUid: ord\n\n")
    out.append(f"dn: cn=ordg,{g}\nchangetype: modrdn\nnewrdn: cn=ordh\ndeleteoldrdn: 1\n\n")
    out.append(f"dn: cn=ordg,{g}\nchangetype: add\nobjectClass: posixGroup\ncn: ordg\n"
               "gidNumber: 30502\n\n")
    return "".join(out)


@pytest.mark.parametrize("kill", [False, True], ids=["live", "kill9"])
def test_feed_applies_changes_in_order(sp, daemons, idcache, kill):
    """Hundreds of changes to the same two entries from one client, each
    batch committed with a single flush (DESIGN §6.1): the cache ends in
    the directory's last state. live: the daemon is stopped (SIGSTOP)
    while they are made, so that its slices read many notices for the same
    entries at once (a batch holding an entry is stored before the next
    notice for it). kill9: the daemon is killed (SIGKILL) halfway through;
    the store passes `idcache db check`, the next start resumes with the
    cookie and reaches the same state."""
    n = 301  # odd: the last round adds the member
    d = start_daemon(daemons, sp.uri, SYNC)
    wait_live(idcache, d)
    if not kill:
        d.signal(signal.SIGSTOP)
    p = subprocess.Popen(["ldapmodify", "-x", "-H", sp.uri, "-D", f"cn=admin,{BASE}", "-w",
                          "secret"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True)
    p.stdin.write(order_ldif(n))
    p.stdin.close()

    def rnd():
        r = d.ns.run(["getent", "passwd", "ord"])
        f = r.out.split(":")
        return int(f[4].split()[1]) if r.rc == 0 and len(f) > 4 and f[4].startswith("round ") \
            else -1
    if kill:
        ok, _ = nsenv.wait_for(lambda: rnd() >= 20, timeout=WAIT, interval=0.01)
        assert ok, d.log()[-3000:]
        d.kill()
    assert p.wait(timeout=120) == 0, p.stderr.read()
    if not kill:
        d.signal(signal.SIGCONT)
    if kill:
        db_check(idcache, d)
        d.start()
        wait_live(idcache, d)
        assert feed_log(d)[-1][0] == "resumed", feed_log(d)
    visible(d, ["getent", "group", "ordh"], lambda r: r.out.strip() == "ordh:x:30501:ord")
    visible(d, ["getent", "group", "ordg"], lambda r: r.out.strip() == "ordg:x:30502:")
    assert rnd() == n - 1
    visible(d, ["id", "-Gn", "ord"], lambda r: "ordh" in r.out.split()
            and "ordg" not in r.out.split())
    d.stop()
    db_check(idcache, d)


LATENCY = r'''
import json, pwd, grp, subprocess, sys, time
uri, n = sys.argv[1], int(sys.argv[2])
base = "dc=example,dc=com"
def modify(ldif):
    subprocess.run(["ldapmodify", "-x", "-H", uri, "-D", "cn=admin," + base, "-w", "secret"],
                   input=ldif, text=True, check=True, capture_output=True)
def until(pred):
    t0 = time.monotonic()
    while time.monotonic() - t0 < 10:
        if pred():
            return time.monotonic() - t0
        time.sleep(0.0005)
    raise SystemExit("not visible within 10 s")
def has_user(name):
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False
out = {"add": [], "member": [], "delete": []}
for i in range(n):
    name = "lat%d" % i
    modify("dn: uid=%s,ou=people,%s\nchangetype: add\nobjectClass: account\n"
           "objectClass: posixAccount\nuid: %s\ncn: %s\nuidNumber: %d\ngidNumber: %d\n"
           "homeDirectory: /h\n\n" % (name, base, name, name, 60000 + i, 60000 + i))
    out["add"].append(until(lambda: has_user(name)))
    modify("dn: cn=ops,ou=groups,%s\nchangetype: modify\nadd: memberUid\nmemberUid: %s\n\n"
           % (base, name))
    out["member"].append(until(lambda: name in grp.getgrnam("ops").gr_mem))
    modify("dn: uid=%s,ou=people,%s\nchangetype: delete\n\n" % (name, base))
    out["delete"].append(until(lambda: not has_user(name)))
print(json.dumps(out))
'''


def test_change_to_visible_latency(sp, daemons, idcache):
    """What one change takes from the server's answer to ldapmodify to a
    new answer through NSS (pwd/grp in one process, polling every 0.5 ms):
    printed, not asserted beyond the bounded wait (`pytest -s -k latency`)."""
    d = start_daemon(daemons, sp.uri, SYNC)
    wait_live(idcache, d)
    got = d.ns.run_py(LATENCY, args=(sp.uri, "20"), timeout=300)
    for kind, v in got.items():
        v = sorted(v)
        print(f"\nsync change -> visible through NSS, {kind}: n={len(v)} "
              f"p50={v[len(v) // 2] * 1000:.1f} ms max={v[-1] * 1000:.1f} ms")
    assert status(idcache, d)["domain.dir.sync"] == "live"


@pytest.mark.skipif(not nsenv.VALGRIND, reason="needs valgrind")
def test_sync_daemon_under_valgrind(sp, idcached_bin, nss_module_dir, idcache):
    """The feed's paths under valgrind: a full refresh, notices (add,
    modify, rename, delete, membership), the server restarting (the
    connection lost, the feed resumed), a daemon restart resuming with the
    cookie, and a stop: no invalid access, no leak."""
    base = nsenv.make_private_dir("idc-sync-vg-")
    ns = nsenv.NsEnv(nss_module_dir, base / "run", base / "ns")
    wrap, vglog = nsenv.valgrind_wrap(ns, base)
    d = nsenv.Daemon(idcached_bin, base, LOCAL_PASSWD, LOCAL_GROUP,
                     idcache_conf="domains = local, dir\n",
                     domain_conf=ldap_domain(sp.uri, SYNC), wrap=wrap)
    d.ns = ns
    ok = False
    try:
        for run in range(2):
            d.start(timeout=120)
            wait_live(idcache, d, timeout=120)
            ldapmodify(sp, user_ldif(f"vg{run}", 10080 + run))
            ldapmodify(sp, f"dn: cn=ops,ou=groups,{BASE}\nchangetype: modify\nadd: memberUid\n"
                           f"memberUid: vg{run}\n\n"
                           f"dn: uid=vg{run},ou=people,{BASE}\nchangetype: modrdn\n"
                           f"newrdn: uid=vgr{run}\ndeleteoldrdn: 1\n\n")
            visible(d, ["getent", "passwd", f"vgr{run}"], lambda r: r.rc == 0, timeout=60)
            if run == 0:
                sp.stop()
                sp.start()
                wait_live(idcache, d, timeout=120)
                ldapmodify(sp, f"dn: uid=vgr0,ou=people,{BASE}\nchangetype: delete\n\n")
                visible(d, ["getent", "passwd", "vgr0"], lambda r: r.rc == 2, timeout=60)
            nsenv.stop_checked_by_valgrind(d, vglog)
        ok = True
    finally:
        nsenv.end_checked_run(d, base, ok)
