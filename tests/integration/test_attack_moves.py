"""Identities that move in the directory (SSSD's test_ldap rename and
modify scenarios): a uid given to another user, a name given to another
uid, a group's gid changed. After the change has reached the daemon (an
`idcache expire --all` when polling, the feed when following it), every
question gets the directory's new answer, through the socket and through
the memory maps alike; no old answer is served by name or by id."""
import pytest

import time

from test_e2e_ldap import REFRESHING, cli, private_slapd, pytestmark
from test_e2e_ldap_fresh import GROUPS, PEOPLE, ldap_change, let_a_second_pass, lookups, settles
from test_e2e_ldap_fresh import start as start_on

assert pytestmark

MODES = {"expire": "", "expiry": "entry_cache_timeout = 2\n", "refresh": REFRESHING,
         "feed": ""}


@pytest.fixture(params=list(MODES))
def server(request):
    """The fixtures on a slapd of this test's own; how the change reaches
    the daemon: `idcache expire --all`, the entries' expiry, the background
    refresh of expired entries, or the content synchronization feed."""
    for s in private_slapd("idc-moves-", "s", syncprov=request.param == "feed"):
        s.mode = request.param
        yield s


def start(daemons, server, idcache):
    return start_on(daemons, server, idcache, MODES[server.mode])

MAPS = pytest.mark.parametrize("maps", ["maps", "socket"])


def answers(d, maps, argvs):
    """(rc, first line) of each argv in a new process."""
    return [(r.rc, r.out.strip()) for r in lookups(d, maps, argvs)]


def sorted_out(got, k, skip=0):
    """got with answer k's words sorted (a group list's order is none),
    the first `skip` words dropped."""
    rc, out = got[k]
    got[k] = (rc, " ".join(sorted(out.split()[skip:])))
    return got


def moved(daemons, server, idcache, maps, q, ldif, want, norm=lambda got: got):
    """q answered (warm: twice, the second time from the maps), the
    directory changed by ldif, the change brought to the daemon as
    server.mode says: q's answers (through norm) become want and stay so."""
    d = start(daemons, server, idcache)
    for _ in range(2):
        answers(d, maps, q)
    let_a_second_pass()
    ldap_change(server, ldif)
    if server.mode == "expire":
        cli(idcache, d, "expire", "--all")
    elif server.mode == "expiry":
        time.sleep(2.5)

    def now():
        return norm(answers(d, maps, q))
    assert settles(lambda: now() == want), (now(), d.log()[-3000:])
    assert now() == want


@MAPS
def test_uid_moved_to_another_user(server, module_daemons, idcache, maps):
    carol = "carol:x:10002:10003:Carol Test:/home/carol:/bin/bash"
    moved(module_daemons, server, idcache, maps,
          [["getent", "passwd", "10002"], ["getent", "passwd", "10003"],
           ["getent", "passwd", "bob"], ["getent", "passwd", "carol"]],
          f"dn: uid=bob,{PEOPLE}\nchangetype: modify\nreplace: uidNumber\nuidNumber: 10099\n\n"
          f"dn: uid=carol,{PEOPLE}\nchangetype: modify\nreplace: uidNumber\n"
          f"uidNumber: 10002\n",
          [(0, carol), (2, ""), (0, "bob:x:10099:10002:Bob Test:/home/bob:/bin/bash"),
           (0, carol)])


@MAPS
def test_name_moved_to_another_uid(server, module_daemons, idcache, maps):
    line = "bob:x:10003:10003:Carol Test:/home/carol:/bin/bash"
    moved(module_daemons, server, idcache, maps,
          [["getent", "passwd", "bob"], ["getent", "passwd", "10002"],
           ["getent", "passwd", "carol"], ["getent", "passwd", "10003"]],
          f"dn: uid=bob,{PEOPLE}\nchangetype: delete\n\n"
          f"dn: uid=carol,{PEOPLE}\nchangetype: modrdn\nnewrdn: uid=bob\ndeleteoldrdn: 1\n",
          [(0, line), (2, ""), (2, ""), (0, line)])


@MAPS
def test_group_gid_changed(server, module_daemons, idcache, maps):
    moved(module_daemons, server, idcache, maps,
          [["getent", "group", "20001"], ["getent", "group", "ops"], ["id", "-G", "alice"],
           ["getent", "group", "20099"]],
          f"dn: cn=ops,{GROUPS}\nchangetype: modify\nreplace: gidNumber\ngidNumber: 20099\n",
          [(2, ""), (0, "ops:x:20099:alice,bob"), (0, "10001 20010 20011 20014 20099"),
           (0, "ops:x:20099:alice,bob")], lambda got: sorted_out(got, 2))


@MAPS
def test_renamed_user_old_name_answers_nothing(server, module_daemons, idcache, maps):
    """(getent initgroups of a name no user has prints the name alone.)"""
    line = "bobby:x:10002:10002:Bob Test:/home/bob:/bin/bash"
    moved(module_daemons, server, idcache, maps,
          [["getent", "passwd", "bob"], ["getent", "initgroups", "bob"],
           ["getent", "passwd", "bobby"], ["getent", "passwd", "10002"]],
          f"dn: uid=bob,{PEOPLE}\nchangetype: modrdn\nnewrdn: uid=bobby\ndeleteoldrdn: 1\n",
          [(2, ""), (0, "bob"), (0, line), (0, line)])


@MAPS
def test_name_case_changed(server, module_daemons, idcache, maps):
    line = "Bob:x:10002:10002:Bob Test:/home/bob:/bin/bash"
    moved(module_daemons, server, idcache, maps,
          [["getent", "passwd", "bob"], ["getent", "passwd", "Bob"],
           ["getent", "passwd", "10002"]],
          f"dn: uid=bob,{PEOPLE}\nchangetype: modrdn\nnewrdn: uid=Bob\ndeleteoldrdn: 1\n",
          [(0, line), (0, line), (0, line)])


@MAPS
def test_primary_gid_changed(server, module_daemons, idcache, maps):
    line = "bob:x:10002:20010:Bob Test:/home/bob:/bin/bash"
    moved(module_daemons, server, idcache, maps,
          [["getent", "passwd", "bob"], ["getent", "passwd", "10002"], ["id", "-g", "bob"],
           ["getent", "initgroups", "bob"]],
          f"dn: uid=bob,{PEOPLE}\nchangetype: modify\nreplace: gidNumber\ngidNumber: 20010\n",
          [(0, line), (0, line), (0, "20010"), (0, "20001 20010 20011 20014")],
          lambda got: sorted_out(got, 3, 1))
