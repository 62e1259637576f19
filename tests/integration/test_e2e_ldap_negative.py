"""The LDAP provider's negative cache against entries that appear: a
"not found" remembered for one key of an entry (its id, or its name) must
not outlive the entry's arrival in the cache by its other key. Before,
getpwuid(30001) found nothing, the entry was added to the directory and
found by getpwnam, and once the cached entry expired getpwuid(30001) was
still answered "not found" by the negative cache until
entry_negative_timeout passed: the directory was not asked, so the
expired entry was served as it was and the directory's change to it never
came. Groups alike (getgrgid, then getgrnam), and a miss for a name in
another case than the directory's. An initgroups miss did worse: the user
found by getpwnam then had no supplementary group at all."""
import subprocess
import time
import pytest

from test_e2e_ldap import (BASE, LOCAL_GROUP, LOCAL_PASSWD, ldap_domain, private_slapd,
                           pytestmark)

assert pytestmark

# long enough that only the fix, not expiry, can make the second lookups answer
NEGATIVE = "entry_negative_timeout = 600\n"
LIFE = 2  # entry_cache_timeout: the entries expire within the test


@pytest.fixture
def server():
    yield from private_slapd("idc-neg-", "s")


def ldap_add(server, ldif):
    p = subprocess.run(["ldapadd", "-x", "-H", server.uri, "-D", f"cn=admin,{BASE}", "-w",
                        "secret"], input=ldif, capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr


def user_ldif(name, uid):
    return (f"dn: uid={name},ou=people,{BASE}\nobjectClass: account\n"
            f"objectClass: posixAccount\nuid: {name}\ncn: {name}\nuidNumber: {uid}\n"
            f"gidNumber: {uid}\nhomeDirectory: /home/{name}\nloginShell: /bin/sh\n\n")


def group_ldif(name, gid):
    return (f"dn: cn={name},ou=groups,{BASE}\nobjectClass: posixGroup\n"
            f"cn: {name}\ngidNumber: {gid}\n\n")


def start(daemons, server):
    dom = ldap_domain(server.uri).replace("entry_negative_timeout = 1\n",
                                          NEGATIVE + f"entry_cache_timeout = {LIFE}\n")
    assert NEGATIVE in dom  # with ldap_domain's 1 s the misses would just expire
    return daemons.start(LOCAL_PASSWD, LOCAL_GROUP, idcache_conf="domains = local, dir\n",
                         domain_conf=dom)


def change(server, user, group, shell):
    """user's login shell becomes shell, group gets user as a member."""
    ldap_add(server, f"dn: uid={user},ou=people,{BASE}\nchangetype: modify\n"
             f"replace: loginShell\nloginShell: {shell}\n\n"
             f"dn: cn={group},ou=groups,{BASE}\nchangetype: modify\n"
             f"add: memberUid\nmemberUid: {user}\n\n")


def lines(d, argvs, env):
    return [(r.rc, r.out.strip()) for r in d.ns.run_many(argvs, env=env)]


@pytest.mark.parametrize("maps", ["maps", "socket"])
def test_an_entry_found_by_one_key_is_asked_for_by_the_other(daemons, server, maps):
    """By id first (nothing there); the entries are added, found by name,
    changed in the directory; once expired, by id they show the change.
    Then the other way round, by a name in another case than the
    directory's first, found by id, asked for again by that name."""
    d = start(daemons, server)
    env = None if maps == "maps" else {"IDCACHE_MEMCACHE": "no"}
    for first, then, user, group, uid, gid in (
            ("id", "name", "negu", "negg", 30001, 30011),
            ("name", "id", "negv", "negh", 30002, 30012)):
        keys = {"id": [["getent", "passwd", str(uid)], ["getent", "group", str(gid)]],
                "name": [["getent", "passwd", user.upper()], ["getent", "group", group.upper()]]}
        assert lines(d, keys[first], env) == [(2, ""), (2, "")], d.log()[-3000:]
        ldap_add(server, user_ldif(user, uid) + group_ldif(group, gid))
        was = [(0, f"{user}:x:{uid}:{uid}::/home/{user}:/bin/sh"), (0, f"{group}:x:{gid}:")]
        assert lines(d, keys[then], env) == was, d.log()[-3000:]
        change(server, user, group, "/bin/bash")
        time.sleep(LIFE + 1)
        now = [(0, f"{user}:x:{uid}:{uid}::/home/{user}:/bin/bash"),
               (0, f"{group}:x:{gid}:{user}")]
        assert lines(d, keys[first], env) == now, (first, d.log()[-3000:])





@pytest.mark.parametrize("maps", ["maps", "socket"])
def test_initgroups_after_the_user_is_found(daemons, server, maps):
    """initgroups of a user the directory lacks; the user and a group of
    theirs are added and the user found by getpwnam: initgroups (and `id`)
    list the group at once. Before, the miss remembered for the name
    answered it, and the fresh user had no supplementary group until
    entry_negative_timeout."""
    d = start(daemons, server)
    env = None if maps == "maps" else {"IDCACHE_MEMCACHE": "no"}
    assert lines(d, [["getent", "initgroups", "negi"]], env) == [(0, "negi")], d.log()[-3000:]
    ldap_add(server, user_ldif("negi", 30003) + group_ldif("negj", 30013).replace(
        "gidNumber: 30013\n", "gidNumber: 30013\nmemberUid: negi\n"))
    assert lines(d, [["getent", "passwd", "negi"]], env) == [
        (0, "negi:x:30003:30003::/home/negi:/bin/sh")], d.log()[-3000:]
    got = lines(d, [["getent", "initgroups", "negi"], ["id", "-G", "negi"]], env)
    assert [(rc, out.split()) for rc, out in got] == [
        (0, ["negi", "30013"]), (0, ["30003", "30013"])], d.log()[-3000:]
