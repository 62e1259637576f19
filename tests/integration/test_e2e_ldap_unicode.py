"""LDAP names beyond ASCII, through the daemon and the NSS module.

uid and cn are caseIgnore in the directory and in the cache: a user stored
as "Émile" is the same user asked as "émile" or "ÉMILE", answered from the
cache without asking the directory again, and its groups follow it. One
slapd (tests/ldap/slapd.sh, loaded with slapadd) on a free loopback port.
"""
import os
import shutil
from pathlib import Path

import pytest

from test_e2e_ldap import BASE, ldif_entry, private_slapd, start_daemon, user_entry

PEOPLE = f"ou=people,{BASE}"
GROUPS_OU = f"ou=groups,{BASE}"

pytestmark = [
    pytest.mark.usefixtures("as_root"),
    pytest.mark.skipif(not (os.access("/usr/sbin/slapd", os.X_OK) and shutil.which("ldapsearch")),
                       reason="needs Debian's slapd and ldap-utils "
                              "(apt-get install slapd ldap-utils)"),
]


def unicode_ldif(path, extra=()):
    out = [ldif_entry(BASE, ("objectClass", "dcObject"), ("objectClass", "organization"),
                      ("o", "Example"), ("dc", "example")),
           ldif_entry(PEOPLE, ("objectClass", "organizationalUnit"), ("ou", "people")),
           ldif_entry(GROUPS_OU, ("objectClass", "organizationalUnit"), ("ou", "groups")),
           user_entry(f"uid=Émile,{PEOPLE}", "Émile", "43001", "43100"),
           user_entry(f"uid=Ünal,{PEOPLE}", "Ünal", "43002", "43100"),
           ldif_entry(f"cn=Gäste,{GROUPS_OU}", ("objectClass", "posixGroup"),
                      ("cn", "Gäste"), ("gidNumber", "43100"), ("memberUid", "Émile"),
                      ("memberUid", "Ünal"))]
    Path(path).write_text("\n".join(out + list(extra)))


def run_slapd(name, extra=()):
    return private_slapd("idc-ldap-unicode-", name, lambda p: unicode_ldif(p, extra))


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    yield from run_slapd("u")


@pytest.fixture(scope="module")
def member_server(tmp_path_factory):
    """The same directory and an rfc2307bis group whose member DNs spell
    the uids in other cases than the entries' DNs."""
    yield from run_slapd("m", [ldif_entry(
        f"cn=leser,{GROUPS_OU}", ("objectClass", "posixGroup"),
        ("objectClass", "extensibleObject"), ("cn", "leser"), ("gidNumber", "43200"),
        ("member", f"uid=éMILE,{PEOPLE}"), ("member", f"uid=ünal,{PEOPLE}"))])


def test_other_spellings_are_the_same_user(server, module_daemons):
    d = start_daemon(module_daemons, server.uri)
    first = d.ns.run(["getent", "passwd", "Émile"])
    assert first.rc == 0 and first.out.startswith("Émile:x:43001:43100:"), (first, d.log()[-2000:])
    searches = server.srch_count()
    got = d.ns.run_many([["getent", "passwd", "émile"], ["getent", "passwd", "ÉMILE"],
                         ["getent", "passwd", "E\u0301mile"], ["id", "-G", "émile"]])
    for r in got[:3]:
        assert r.rc == 0 and r.out == first.out, (r, d.log()[-2000:])
    assert "43100" in got[3].out.split(), got[3]
    # the cache answered every spelling; the directory was not asked again
    # for the user (the group list may have needed one search)
    assert server.srch_count() - searches <= 2, d.log()[-2000:]


def test_group_by_another_spelling(server, module_daemons):
    d = start_daemon(module_daemons, server.uri)
    got = d.ns.run_many([["getent", "group", "Gäste"], ["getent", "group", "GÄSTE"],
                         ["getent", "group", "ga\u0308ste"]])
    for r in got:
        assert r.rc == 0 and r.out.strip() == "Gäste:x:43100:Émile,Ünal", (r, d.log()[-2000:])


def test_cold_lookup_in_another_spelling(server, module_daemons):
    """Nothing cached yet: the directory answers (uid=émile) with Émile, and
    that answer is taken for the name asked (user, initgroups, group)."""
    d = start_daemon(module_daemons, server.uri)
    r = d.ns.run(["getent", "passwd", "émile"])
    assert r.rc == 0 and r.out.startswith("Émile:x:43001:43100:"), (r, d.log()[-2000:])
    d = start_daemon(module_daemons, server.uri)
    r = d.ns.run(["id", "-G", "ÜNAL"])
    assert r.rc == 0 and "43100" in r.out.split(), (r, d.log()[-2000:])
    d = start_daemon(module_daemons, server.uri)
    r = d.ns.run(["getent", "group", "gäste"])
    assert r.rc == 0 and r.out.startswith("Gäste:x:43100:"), (r, d.log()[-2000:])


def test_member_dn_in_another_spelling(member_server, module_daemons):
    """rfc2307bis member DNs compare as the store compares them: uid=éMILE
    and uid=ünal are the entries uid=Émile and uid=Ünal."""
    server = member_server
    d = start_daemon(module_daemons, server.uri)
    r = d.ns.run(["getent", "group", "leser"])
    assert r.rc == 0 and r.out.strip() == "leser:x:43200:Émile,Ünal", (r, d.log()[-2000:])
    d = start_daemon(module_daemons, server.uri)
    got = d.ns.run_many([["id", "-G", "Émile"], ["id", "-G", "ünal"]])
    for g in got:
        assert g.rc == 0 and "43200" in g.out.split(), (g, d.log()[-2000:])
