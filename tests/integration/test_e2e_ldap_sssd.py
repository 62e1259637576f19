"""SSSD's intg test_ldap.py scenarios against a real slapd, through glibc's
getent and id (each a new process, so every answer comes from the daemon or
the memory cache): a user whose primary group the directory lacks, a group
without members, memberUid values naming no user (served as names, as
SSSD's "ghost" members), names that differ only in case (ldap domains
ignore case by default; `case_sensitive = true` wants the exact name),
uid aliases (a second `uid` value never answers for another name), names
holding LDAP filter characters, attribute maps (`ldap_user_uid_number`),
nested rfc2307bis groups, and a server that stops answering mid-search.

The directory is loaded with slapadd (tests/ldap/slapd.sh SLAPD_LOAD).
"""
import os
import signal
import threading

import pytest

import nsenv
from test_e2e_ldap import (BASE, GROUPS_OU, PEOPLE, group_entry, ldif_entry, private_slapd,
                           pytestmark, start_daemon, status, user_entry)

assert pytestmark  # the same requirements (slapd, ldap-utils, openssl)


FOLDED_APART = [("straße", "1201"), ("strasse", "1202"), ("ab\u200b", "1203"), ("ab", "1204")]


def member_dns(*dns):
    return [("member", dn) for dn in dns]


def bis_group(name, gid, *pairs):
    return ldif_entry(f"cn={name},{GROUPS_OU}", ("objectClass", "posixGroup"),
                      ("objectClass", "extensibleObject"), ("cn", name), ("gidNumber", gid),
                      *pairs)


def write_ldif(path):
    u = [f"uid=user1,{PEOPLE}", f"uid=user2,{PEOPLE}"]
    out = [ldif_entry(BASE, ("objectClass", "dcObject"), ("objectClass", "organization"),
                      ("o", "Example"), ("dc", "example")),
           ldif_entry(PEOPLE, ("objectClass", "organizationalUnit"), ("ou", "people")),
           ldif_entry(GROUPS_OU, ("objectClass", "organizationalUnit"), ("ou", "groups")),
           user_entry(u[0], "user1", "1001", "2001"),
           user_entry(u[1], "user2", "1002", "2002"),
           user_entry(f"uid=nopg,{PEOPLE}", "nopg", "1003", "2999"),  # no group 2999
           user_entry(f"uid=MixedCase,{PEOPLE}", "MixedCase", "1004", "2001"),
           user_entry(f"uid=star*,{PEOPLE}", "star*", "1005", "2001"),
           # a second uid value: an alias SSSD would serve; never another's name here
           user_entry(f"uid=mal,{PEOPLE}", "mal", "1006", "2001", ("uid", "victim")),
           user_entry(f"uid=ovr,{PEOPLE}", "ovr", "1007", "2001", ("employeeNumber", "1107"),
                      ("departmentNumber", "2002")),
           group_entry(f"cn=group1,{GROUPS_OU}", "group1", "2001", "user1", "ghost1"),
           group_entry(f"cn=empty_group,{GROUPS_OU}", "empty_group", "2010"),
           # rfc2307bis, SSSD's sanity_rfc2307_bis shapes
           bis_group("two_user_group", "2012", *member_dns(*u)),
           bis_group("one_user_group1", "2015", *member_dns(u[0])),
           bis_group("one_user_group2", "2016", *member_dns(u[1])),
           bis_group("group_one_user_group", "2017",
                     *member_dns(f"cn=one_user_group1,{GROUPS_OU}")),
           bis_group("group_two_one_user_groups", "2019",
                     *member_dns(f"cn=one_user_group1,{GROUPS_OU}",
                                 f"cn=one_user_group2,{GROUPS_OU}"))]
    # names the store's caseIgnore folds together (RFC 4518: full case
    # folding, ZERO WIDTH SPACE mapped to nothing) but slapd's does not:
    # to the directory they are two users
    out += [user_entry(f"cn=fold{i},{PEOPLE}", name, uid, "2001")
            for i, (name, uid) in enumerate(FOLDED_APART)]
    path.write_text("\n".join(out))


@pytest.fixture(scope="module")
def server():
    yield from private_slapd("idc-ldap-sssd-", "s", write_ldif=write_ldif)


def answers(d, *argvs):
    """(rc, stdout) of each argv, each in a new process."""
    return [(r.rc, r.out) for r in d.ns.run_many([list(a) for a in argvs])]


def test_primary_group_missing_empty_group_and_ghost_members(server, module_daemons):
    d = start_daemon(module_daemons, server.uri)
    got = answers(d, ["getent", "passwd", "nopg"], ["id", "nopg"],
                  ["getent", "group", "empty_group"], ["getent", "group", "group1"],
                  ["getent", "group", "2999"], ["getent", "passwd", "ghost1"])
    assert got == [(0, "nopg:x:1003:2999::/home/x:/bin/sh\n"),
                   (0, "uid=1003(nopg) gid=2999 groups=2999\n"),
                   (0, "empty_group:x:2010:\n"),
                   (0, "group1:x:2001:user1,ghost1\n"),
                   (2, ""), (2, "")], got


def test_names_differing_in_case(server, module_daemons):
    """Ignoring case (the default for ldap): another spelling answers with
    the directory's name. case_sensitive = true: only the exact name."""
    d = start_daemon(module_daemons, server.uri)
    line = "MixedCase:x:1004:2001::/home/x:/bin/sh\n"
    got = answers(d, ["getent", "passwd", "mixedcase"], ["getent", "passwd", "MIXEDCASE"],
                  ["getent", "passwd", "MixedCase"])
    assert got == [(0, line)] * 3, got
    d = start_daemon(module_daemons, server.uri, "case_sensitive = true\n")
    got = answers(d, ["getent", "passwd", "mixedcase"], ["getent", "passwd", "MixedCase"],
                  ["getent", "passwd", "mixedcase"], ["getent", "group", "GROUP1"],
                  ["id", "USER1"])
    assert [g[0] for g in got] == [2, 0, 2, 2, 1], got
    assert got[1] == (0, line), got


def test_filter_characters_and_aliases(server, module_daemons):
    """'*', '(' and ')' in a name are escaped in the filter: "star*" is one
    user, "*" and "user*" match nobody, an injected clause matches nobody.
    A uid alias is not a name of its own: "victim" is not found (no entry
    is served under a name it was not asked by)."""
    d = start_daemon(module_daemons, server.uri)
    got = answers(d, ["getent", "passwd", "star*"], ["getent", "passwd", "*"],
                  ["getent", "passwd", "user*"], ["getent", "passwd", "x)(uid=*"],
                  ["getent", "passwd", "*)(|(uid=*"], ["getent", "passwd", "victim"],
                  ["getent", "passwd", "mal"])
    assert got[0] == (0, "star*:x:1005:2001::/home/x:/bin/sh\n"), got
    assert [g[0] for g in got[1:6]] == [2] * 5, got
    assert got[6] == (0, "mal:x:1006:2001::/home/x:/bin/sh\n"), got


def test_id_attributes_mapped(server, module_daemons):
    """ldap_user_uid_number / ldap_user_gid_number name other attributes:
    the lookups by id search them and the answers carry them."""
    d = start_daemon(module_daemons, server.uri,
                     "ldap_user_uid_number = employeeNumber\n"
                     "ldap_user_gid_number = departmentNumber\n")
    got = answers(d, ["getent", "passwd", "ovr"], ["getent", "passwd", "1107"],
                  ["getent", "passwd", "1007"], ["getent", "passwd", "user1"])
    line = "ovr:x:1107:2002::/home/x:/bin/sh\n"
    assert got == [(0, line), (0, line), (2, ""), (2, "")], got


def test_nested_groups_initgroups(server, module_daemons):
    """id follows nesting: user1 is in group_one_user_group through
    one_user_group1."""
    d = start_daemon(module_daemons, server.uri)
    got = answers(d, ["id", "-G", "user1"], ["id", "-G", "user2"])
    assert sorted(int(x) for x in got[0][1].split()) == [2001, 2012, 2015, 2017, 2019], got
    assert sorted(int(x) for x in got[1][1].split()) == [2002, 2012, 2016, 2019], got


def test_nested_group_lists_the_users_of_its_member_groups(server, module_daemons):
    d = start_daemon(module_daemons, server.uri)
    got = answers(d, ["getent", "group", "group_one_user_group"],
                  ["getent", "group", "group_two_one_user_groups"],
                  ["getent", "group", "two_user_group"])
    assert got[2] == (0, "two_user_group:x:2012:user1,user2\n"), got
    assert got[0] == (0, "group_one_user_group:x:2017:user1\n"), got
    assert got[1][0] == 0, got
    assert sorted(got[1][1].strip().split(":")[3].split(",")) == ["user1", "user2"], got


def test_server_stopped_mid_search_serves_the_cache(server, module_daemons, idcache):
    """slapd stopped (SIGSTOP: the connection stays, nothing answers) while
    a cold lookup waits for it: users and group lists already cached are
    answered meanwhile, through the socket and through the maps, before
    the cold lookup gives up; the domain goes offline naming the server, and
    once slapd runs again a new lookup is answered from it."""
    d = start_daemon(module_daemons, server.uri)
    warm = [["getent", "passwd", "user1"], ["id", "-G", "user1"], ["getent", "group", "group1"]]
    before = answers(d, *warm)
    assert all(rc == 0 for rc, _ in before), before
    cold = {}

    def ask_cold():
        cold["r"] = d.ns.run(["getent", "passwd", "user2"])

    nsenv.stop_process(server.pid)
    try:
        t = threading.Thread(target=ask_cold)
        t.start()
        ok, _ = nsenv.wait_for(lambda: int(status(idcache, d)["domain.dir.ldap_in_flight"]) > 0,
                               timeout=10, interval=0.02)
        assert ok, d.log()[-2000:]
        during = answers(d, *warm)
        during_socket = [(r.rc, r.out) for r in d.ns.run_many(warm, env={"IDCACHE_MEMCACHE": "no"})]
        still_waiting = t.is_alive()
        t.join(60)
        st = status(idcache, d)
    finally:
        os.kill(server.pid, signal.SIGCONT)
    assert during == before and during_socket == before, (during, during_socket)
    assert still_waiting  # answered while the directory was silent
    assert cold["r"].rc == 2, cold["r"]  # offline: not found, as sssd
    assert st["domain.dir.state"] == "offline", st
    assert st["domain.dir.last_error"].startswith(server.uri), st
    d.signal(signal.SIGUSR2)  # probe the offline domain now
    ok, _ = nsenv.wait_for(lambda: d.ns.run(["getent", "passwd", "user2"]).rc == 0, timeout=30,
                           interval=0.2)
    assert ok, d.log()[-2000:]


def test_names_the_directory_keeps_apart_are_not_confused(server, module_daemons):
    """slapd says straße and strasse are two users, and ab + ZERO WIDTH
    SPACE and ab: each name must be answered with its own entry, whichever
    was asked first, through the socket and the maps (getent, id); other
    spellings the directory takes for the same name
    (case, NFD, runs of spaces) still answer from the cache."""
    names = [n for n, _ in FOLDED_APART]
    want = [u for _, u in FOLDED_APART]
    for order in (names, list(reversed(names))):
        d = start_daemon(module_daemons, server.uri)
        for env in ({}, {"IDCACHE_MEMCACHE": "no"}, {}):
            got = d.ns.run_many([["getent", "passwd", n] for n in order] +
                                [["id", "-u", n] for n in order], env=env)
            uids = [r.out.split(":")[2] if r.rc == 0 else None for r in got[:len(order)]]
            ids = [r.out.strip() if r.rc == 0 else None for r in got[len(order):]]
            expect = [want[names.index(n)] for n in order]
            assert uids == expect and ids == expect, (env, got)
    got = answers(d, ["getent", "passwd", "STRASSE"], ["getent", "passwd", "Stra\u00dfe"],
                  ["getent", "passwd", "STRAẞE"])
    assert [g[1].split(":")[2] if g[0] == 0 else None for g in got] == ["1202", "1201", "1201"]
