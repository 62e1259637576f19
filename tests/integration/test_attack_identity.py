"""Merged identity under attack: a directory whose entries would answer
for the host's own names in another spelling, one the directory's
matching rule (caseIgnoreMatch: Unicode compatibility forms, case)
equates with them although the bytes differ: FULLWIDTH ｒｏｏｔ for root.
Such an entry answers a lookup of `root` (the cache serves it for that
spelling: same lower-case NFKC form), so it must be withheld as the
directory's `root` is, whatever the domain order."""
import pytest

import nsenv

from test_e2e_precedence import (LOCAL_GROUP, LOCAL_PASSWD, _group, _user, dir_domain, dir_only,
                                 slapd_holding)

pytestmark = pytest.mark.usefixtures("as_root")

FW_ROOT = "\uff52\uff4f\uff4f\uff54"     # ｒｏｏｔ
FW_ALICE = "\uff41\uff4c\uff49\uff43\uff45"  # ａｌｉｃｅ
FW_SUDO = "\uff53\uff55\uff44\uff4f"     # ｓｕｄｏ
FW_DAVE = "\uff44\uff41\uff56\uff45"     # ｄａｖｅ

DIRECTORY = ("dn: dc=example,dc=com\nobjectClass: dcObject\nobjectClass: organization\n"
             "o: Example\ndc: example\n\n"
             "dn: ou=people,dc=example,dc=com\nobjectClass: organizationalUnit\nou: people\n\n"
             "dn: ou=groups,dc=example,dc=com\nobjectClass: organizationalUnit\nou: groups\n\n"
             + _user(FW_ROOT, 5001) + _user(FW_ALICE, 10001) + _user("ldapuser", 10002)
             + _user("Carol", 10003) + _user(FW_DAVE, 10004) + _group("Ops", 20003, ["Carol"])
             + _group(FW_SUDO, 5027, ["ldapuser"]))


@pytest.fixture(scope="module")
def directory():
    yield from slapd_holding("idc-ident-ldap-", "i", DIRECTORY)


PROBES = [["getent", "passwd", "root"], ["getent", "passwd", "alice"],
          ["getent", "group", "sudo"], ["getent", "passwd", "ldapuser"]]


def answers(d, env=None):
    return {" ".join(a[1:]): (r.rc, r.out) for a, r in zip(PROBES, d.ns.run_many(PROBES, env=env))}


WANT = {"passwd root": (0, "root:x:0:0:root:/root:/bin/bash\n"),
        "passwd alice": (0, "alice:x:1000:1000:Alice local:/home/alice:/bin/bash\n"),
        "group sudo": (0, "sudo:x:27:alice\n")}


def test_other_unicode_form_of_a_local_name_is_withheld(idcache, daemons, directory):
    """domains = dir, local: getpwnam("root") asks the directory first,
    which answers with ｒｏｏｔ; that entry is withheld (the name is the
    files domain's root under the directory's rule), so local root is
    the answer, from the socket and the maps alike."""
    d = daemons.start(LOCAL_PASSWD, LOCAL_GROUP, idcache_conf="domains = dir, local\n",
                      domain_conf=dir_domain(directory.uri))
    for env in ({"IDCACHE_MEMCACHE": "no"}, None, None):
        got = answers(d, env)
        assert {k: got[k] for k in WANT} == WANT, (got, d.log()[-3000:])
        assert got["passwd ldapuser"][1].startswith("ldapuser:x:10002:")


def test_other_unicode_form_of_a_host_name_is_withheld(idcache, daemons, directory):
    """No files domain: the host's /etc/passwd holds root; the directory's
    ｒｏｏｔ answers a lookup of root and is withheld for it."""
    d = dir_only(daemons, directory, "filter_users =\n")
    r = d.ns.run(["getent", "passwd", "root"], sources="idcache")
    assert r.rc == 2, (r.out, d.log()[-3000:])


def test_filter_lists_take_other_unicode_forms(idcache, daemons, directory):
    """allow_local_overlap = true leaves only filter_users (root by
    default) and filter_groups between the directory and the host's
    names: they take ｒｏｏｔ and ｓｕｄｏ, which a lookup of root and sudo
    is answered with, as they take root and sudo."""
    d = daemons.start(LOCAL_PASSWD, LOCAL_GROUP, idcache_conf="domains = dir, local\n",
                      domain_conf=dir_domain(directory.uri, "allow_local_overlap = true\n"
                                             "filter_groups = sudo\n"))
    for env in ({"IDCACHE_MEMCACHE": "no"}, None, None):
        got = answers(d, env)
        assert got["passwd root"] == WANT["passwd root"], (got, d.log()[-3000:])
        assert got["group sudo"] == WANT["group sudo"], (got, d.log()[-3000:])
    assert d.ns.run(["getent", "passwd", "alice"]).out.startswith(FW_ALICE + ":x:10001:")


def test_local_name_in_another_spelling_drops_the_map_records(idcache, daemons, directory):
    """The directory's Carol, ｄａｖｅ and group Ops are in the maps (asked
    for by name); then the host's files add carol, dave and ops (other
    ids): all three are
    withheld from then on, and their records leave the maps at once (the
    maps keyed them by the directory's spelling, not the new name's)."""
    d = daemons.start(LOCAL_PASSWD, LOCAL_GROUP, idcache_conf="domains = local, dir\n",
                      domain_conf=dir_domain(directory.uri))
    probes = [["getent", "passwd", "Carol"], ["getent", "passwd", FW_DAVE],
              ["getent", "group", "Ops"]]
    for _ in range(2):  # the second answer comes from the maps
        got = [r.out for r in d.ns.run_many(probes)]
        assert got[0].startswith("Carol:x:10003:") and got[1].startswith(FW_DAVE + ":x:10004:")
        assert got[2] == "Ops:x:20003:Carol\n", got
    nsenv.write_atomic(d.passwd, LOCAL_PASSWD + "carol:x:3000:3000::/home/c:/bin/sh\n"
                       "dave:x:3001:3001::/home/d:/bin/sh\n")
    nsenv.write_atomic(d.group, LOCAL_GROUP + "ops:x:3100:\n")
    for key in ("3001", "3100"):
        ok, _ = nsenv.wait_for(lambda: d.ns.run(["getent", "passwd" if key == "3001" else "group",
                                                 key]).rc == 0, timeout=5)
        assert ok, d.log()[-3000:]
    socket = [(r.rc, r.out) for r in d.ns.run_many(probes, env={"IDCACHE_MEMCACHE": "no"})]
    assert socket == [(2, "")] * 3, socket
    maps = [(r.rc, r.out) for r in d.ns.run_many(probes)]
    assert maps == socket, d.log()[-3000:]
