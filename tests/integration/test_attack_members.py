"""A directory's group naming the host's own users as members.

The directory's alice is withheld (the host's files hold alice), so the
name alice means the host's alice. A directory group listing memberUid
alice (or ALICE, or FULLWIDTH ａｌｉｃｅ, which the directory and the cache
both equate with alice) would make the host's alice a member of it by
gr_mem (sudo's %group, polkit, userdb memberships), while her group list
(initgroups) rightly lacks it: two paths, two answers. The member is left
out, as a withheld user is left out everywhere; with allow_local_overlap
the domain may name local users on purpose."""
import pytest

import nsenv

from test_e2e_precedence import (LOCAL_GROUP, LOCAL_PASSWD, _group, _user, dir_domain,
                                 slapd_holding)
from test_e2e_mc import grown, status

pytestmark = pytest.mark.usefixtures("as_root")

FW_ALICE = "\uff41\uff4c\uff49\uff43\uff45"  # ａｌｉｃｅ

DIRECTORY = ("dn: dc=example,dc=com\nobjectClass: dcObject\nobjectClass: organization\n"
             "o: Example\ndc: example\n\n"
             "dn: ou=people,dc=example,dc=com\nobjectClass: organizationalUnit\nou: people\n\n"
             "dn: ou=groups,dc=example,dc=com\nobjectClass: organizationalUnit\nou: groups\n\n"
             + _user("alice", 10001) + _user("ldapuser", 10002)
             + _group("devs2", 20005, ["alice", "ldapuser", "newbie"])
             + _group("devs3", 20006, ["ALICE", FW_ALICE, "ldapuser"]))


@pytest.fixture(scope="module")
def directory():
    yield from slapd_holding("idc-members-ldap-", "m", DIRECTORY)


PROBES = [["getent", "group", "devs2"], ["getent", "group", "20006"], ["id", "-G", "alice"]]


def answers(d, env=None):
    return [(r.rc, r.out) for r in d.ns.run_many(PROBES, env=env)]


@pytest.mark.parametrize("order", ["local, dir", "dir, local"])
def test_directory_group_cannot_list_a_local_user(daemons, directory, order):
    d = daemons.start(LOCAL_PASSWD, LOCAL_GROUP, idcache_conf=f"domains = {order}\n",
                      domain_conf=dir_domain(directory.uri))
    want = [(0, "devs2:x:20005:ldapuser,newbie\n"), (0, "devs3:x:20006:ldapuser\n"),
            (0, "1000 27\n")]
    for env in ({"IDCACHE_MEMCACHE": "no"}, None, None):  # the socket, then the maps
        assert answers(d, env) == want, d.log()[-2000:]


def test_overlap_allowed_keeps_the_members(daemons, directory):
    d = daemons.start(LOCAL_PASSWD, LOCAL_GROUP, idcache_conf="domains = local, dir\n",
                      domain_conf=dir_domain(directory.uri, "allow_local_overlap = true\n"))
    got = answers(d)
    assert got[0] == (0, "devs2:x:20005:alice,ldapuser,newbie\n"), got


def test_a_new_local_user_leaves_the_lists_the_maps_hold(idcache, daemons, directory):
    """newbie, listed by devs2, becomes a local user: the socket and the
    maps (which held devs2 with newbie) leave it out at once."""
    d = daemons.start(LOCAL_PASSWD, LOCAL_GROUP, idcache_conf="domains = local, dir\n",
                      domain_conf=dir_domain(directory.uri))
    probe = [["getent", "group", "devs2"], ["getent", "group", "20005"]]
    for _ in range(2):
        assert [r.out for r in d.ns.run_many(probe)] == ["devs2:x:20005:ldapuser,newbie\n"] * 2
    s0 = status(idcache, d)
    assert [r.out for r in d.ns.run_many(probe)] == ["devs2:x:20005:ldapuser,newbie\n"] * 2
    assert grown(s0, status(idcache, d)) == {}  # the maps answer it
    nsenv.write_atomic(d.passwd, LOCAL_PASSWD + "newbie:x:3000:3000::/home/n:/bin/sh\n")
    ok, _ = nsenv.wait_for(lambda: d.ns.run(["getent", "passwd", "newbie"]).rc == 0)
    assert ok, d.log()[-2000:]
    want = ["devs2:x:20005:ldapuser\n"] * 2
    assert [r.out for r in d.ns.run_many(probe)] == want  # the maps first: no answer put yet
    assert [r.out for r in d.ns.run_many(probe, env={"IDCACHE_MEMCACHE": "no"})] == want
    s1 = status(idcache, d)
    # dropped record by record: the map did not start over
    assert s1["memcache_group_generation"] == s0["memcache_group_generation"], (s0, s1)


def test_directory_commits_leave_the_local_index_standing(idcache, daemons, directory):
    """The index of the files domains' names and ids that a directory
    group's members are checked against is built from the files domains
    alone: the directory's commits (each entry fetched for a lookup) do
    not make the next group lookup read every local entry again (tens of
    milliseconds on the loop for a big files domain), and a change of the
    host's files does."""
    d = daemons.start(LOCAL_PASSWD, LOCAL_GROUP, idcache_conf="domains = local, dir\n",
                      domain_conf=dir_domain(directory.uri))
    sock = {"IDCACHE_MEMCACHE": "no"}
    devs2 = ["getent", "group", "devs2"]
    assert d.ns.run(devs2, env=sock).out == "devs2:x:20005:ldapuser,newbie\n"
    s0 = status(idcache, d)
    assert int(s0["checks.local_index_built"]) >= 1, s0
    for fetch in (["getent", "passwd", "ldapuser"], ["getent", "group", "devs3"],
                  ["id", "-G", "ldapuser"]):
        assert d.ns.run(fetch, env=sock).rc == 0, fetch
        assert d.ns.run(devs2, env=sock).out == "devs2:x:20005:ldapuser,newbie\n"
    s1 = status(idcache, d)
    assert int(s1["cache_durable_commits"]) > int(s0["cache_durable_commits"]), (s0, s1)
    assert s1["checks.local_index_built"] == s0["checks.local_index_built"], (s0, s1)
    nsenv.write_atomic(d.passwd, LOCAL_PASSWD + "newbie:x:3000:3000::/home/n:/bin/sh\n")
    ok, _ = nsenv.wait_for(lambda: d.ns.run(["getent", "passwd", "newbie"], env=sock).rc == 0)
    assert ok, d.log()[-2000:]
    assert d.ns.run(devs2, env=sock).out == "devs2:x:20005:ldapuser\n"
    s2 = status(idcache, d)
    assert int(s2["checks.local_index_built"]) > int(s1["checks.local_index_built"]), (s1, s2)
