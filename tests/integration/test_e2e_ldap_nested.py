"""A group's member list holds the users of its nested member groups
(rfc2307bis), as SSSD serves it: by name, by gid and in enumeration, the
daemon's socket and the memory cache alike; and a member added to or
removed from a nested group shows in the groups that nest it, the memory
cache's records of those groups included, after a refresh (polling) or
through the sync feed (syncrepl).

The fixtures (tests/ldap/fixtures.ldif): dev lists alice and bob; all
nests dev and lists carol; top nests all; c1 lists frank and nests c2,
which nests c1 (a cycle).
"""
import nsenv
import pytest

from test_e2e_ldap import LOCAL_GROUP, cli, pytestmark, status
from test_e2e_ldap_fresh import BOTH, GROUPS, gids, server, start  # noqa: F401 (a fixture)

assert pytestmark  # the same requirements (slapd, ldap-utils, openssl)

FLAT = {"dev": "dev:x:20010:alice,bob",
        "all": "all:x:20011:carol,alice,bob",
        "top": "top:x:20014:carol,alice,bob",
        "c1": "c1:x:20012:frank",
        "c2": "c2:x:20013:frank"}
NO_MAPS = {"IDCACHE_MEMCACHE": "no"}


def lines(results):
    return [(r.rc, r.out.strip()) for r in results]


def group_of(d, name, env=None):
    """`getent group name` in a new process: the line, or None."""
    r = d.ns.run(["getent", "group", name], env=env)
    return r.out.strip() if r.rc == 0 else None


@BOTH
def test_nested_members_same_on_every_path(server, module_daemons, idcache):
    """By name and by gid, through the socket and (asked again) through
    the memory cache: the users of member groups follow the group's own,
    level by level, each once; the cycle c1/c2 ends."""
    d = start(module_daemons, server, idcache)
    names = [["getent", "group", g] for g in FLAT]
    gids = [["getent", "group", line.split(":")[2]] for line in FLAT.values()]
    want = [(0, line) for line in FLAT.values()] * 2
    socket = lines(d.ns.run_many(names + gids, env=NO_MAPS))
    assert socket == want, socket
    for _ in range(2):  # the second answer comes from the maps
        maps = lines(d.ns.run_many(names + gids))
        assert maps == want, maps


def test_nested_members_in_enumeration(server, module_daemons, idcache):
    """enumerate = true: getent group (getgrent) lists the same lines,
    once the first enumeration is over (until then the domain fills in
    page by page, as idcache.conf(5) says: the test waits for it)."""
    d = start(module_daemons, server, idcache, "enumerate = true\n")
    done, _ = nsenv.wait_for(
        lambda: (lambda st: int(st["domain.dir.groups"]) > 0
                 and st["domain.dir.ldap_in_flight"] == "0")(status(idcache, d)), timeout=10)
    assert done, d.log()[-2000:]
    r = d.ns.run(["getent", "group"])
    got = {line.split(":")[0]: line for line in r.out.splitlines()}
    assert {g: got.get(g) for g in FLAT} == FLAT, r.out


@BOTH
def test_member_of_a_nested_group_changes_its_parents(server, module_daemons, idcache):
    """frank joins dev and alice leaves it while all and top are in the
    memory cache: once dev is refreshed (only dev expired; polling) or the
    feed brought the change (syncrepl), all and top list frank and not
    alice at once, from the maps too."""
    d = start(module_daemons, server, idcache)
    for _ in range(2):
        assert [group_of(d, g) for g in ("all", "top")] == [FLAT["all"], FLAT["top"]]
    from test_e2e_ldap_fresh import ldap_change, settles
    ldap_change(server, f"dn: cn=dev,{GROUPS}\nchangetype: modify\nadd: member\n"
                        f"member: uid=frank,ou=people,dc=example,dc=com\n-\ndelete: member\n"
                        f"member: uid=alice,ou=people,dc=example,dc=com\n")
    if not server.syncprov:
        cli(idcache, d, "expire", "--group", "dev")
    assert settles(lambda: group_of(d, "dev") == "dev:x:20010:bob,frank"), d.log()[-3000:]
    want = ["all:x:20011:carol,bob,frank", "top:x:20014:carol,bob,frank"]
    assert [group_of(d, g) for g in ("all", "top")] == want  # the maps dropped them
    assert [group_of(d, g, NO_MAPS) for g in ("all", "top")] == want


def test_withheld_member_group_adds_nothing(server, module_daemons, idcache):
    """filter_groups = dev: dev is not served, and neither are its users
    through it: all and top, which nest it, list only carol (socket and
    maps), and alice's groups hold none of dev, all and top (wheel0, gid
    0, is withheld too: the host's files hold gid 0)."""
    d = start(module_daemons, server, idcache, "filter_groups = dev\n")
    assert group_of(d, "dev") is None
    want = ["all:x:20011:carol", "top:x:20014:carol"]
    assert [group_of(d, g, NO_MAPS) for g in ("all", "top")] == want
    for _ in range(2):  # the second answer comes from the maps
        assert [group_of(d, g) for g in ("all", "top")] == want
    assert gids(d, "alice") == [10001, 20001]
    assert gids(d, "carol") == [10003, 20011, 20014], d.log()[-3000:]


def test_member_group_withheld_later_leaves_the_maps(server, module_daemons, idcache):
    """all is in the memory cache with dev's users; then the host's files
    take dev's gid (a local group 20010): dev is withheld from then on, and
    all's record, which held its users, leaves the maps."""
    d = start(module_daemons, server, idcache)
    for _ in range(2):  # the second answer comes from the maps
        assert group_of(d, "all") == FLAT["all"]
    nsenv.write_atomic(d.group, LOCAL_GROUP + "localdev:x:20010:\n")
    ok, _ = nsenv.wait_for(lambda: group_of(d, "20010") == "localdev:x:20010:", timeout=5)
    assert ok, d.log()[-3000:]
    assert group_of(d, "all") == "all:x:20011:carol"
    assert group_of(d, "all", NO_MAPS) == "all:x:20011:carol"


ERANGE_SCRIPT = r"""
import ctypes, errno, json
class Group(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("passwd", ctypes.c_char_p),
                ("gid", ctypes.c_uint), ("mem", ctypes.POINTER(ctypes.c_char_p))]
lib = ctypes.CDLL("libnss_idcache.so.2")
f = lib._nss_idcache_getgrnam_r
f.restype = ctypes.c_int
out = {}
for size in range(1, 256):
    g, err = Group(), ctypes.c_int(0)
    buf = ctypes.create_string_buffer(size)
    st = f(b"top", ctypes.byref(g), buf, size, ctypes.byref(err))
    if st == 1:
        mem, i = [], 0
        while g.mem[i]:
            mem.append(g.mem[i].decode())
            i += 1
        out = {"size": size, "mem": mem}
        break
    if st != -2 or err.value != errno.ERANGE:  # TRYAGAIN with ERANGE: a larger buffer
        out = {"size": size, "status": st, "errno": err.value}
        break
print(json.dumps(out))
"""


@pytest.mark.parametrize("env", [NO_MAPS, None], ids=["socket", "maps"])
def test_short_buffer_is_erange_for_the_longer_list(server, module_daemons, idcache, env):
    """The NSS module's buffer rule holds for the flattened list: every
    buffer too small for top's record is ERANGE (glibc grows it), and the
    first that fits gets every member (from the socket, and from the maps
    after a first answer)."""
    d = start(module_daemons, server, idcache)
    assert group_of(d, "top") == FLAT["top"]
    got = d.ns.run_py(ERANGE_SCRIPT, env=env)
    assert got.get("mem") == ["carol", "alice", "bob"], got
    # the record: three name pointers and a NULL, then the strings
    assert got["size"] > 4 * 8 + len("top") + len("carol") + len("alice") + len("bob"), got


def test_nscd_maps_follow_a_nested_change(server, daemons, idcache):
    """Through glibc's nscd client and its maps (one process throughout):
    top lists the users of the groups it nests, from the socket and then
    from the map; after a member of dev (nested two levels down) changed
    and dev was refreshed, the map's top is gone and the socket answers
    the new list."""
    nscd = pytest.importorskip("test_e2e_nscd", reason="the nscd socket is not in this tree")
    maps = pytest.importorskip("test_e2e_nscd_maps")
    from test_e2e_ldap import ldap_domain
    from test_e2e_ldap_fresh import ldap_change, settles
    n = nscd.NscdDaemon(daemons, "domains = local, dir\n",
                        domain_conf=ldap_domain(server.uri)).start()
    c = maps.Client(n)
    try:
        top = ["top", "x", 20014, ["carol", "alice", "bob"]]
        assert c.ask("gr top") == top
        assert c.ask("gr top") == top
        assert maps.requests(n, "getgrbyname") == 1  # the second from the map
        ldap_change(server, f"dn: cn=dev,{GROUPS}\nchangetype: modify\nadd: member\n"
                            f"member: uid=frank,ou=people,dc=example,dc=com\n")
        cli(idcache, n.d, "expire", "--group", "dev")
        assert settles(lambda: n.ns.run(["getent", "group", "dev"]).out.strip() ==
                       "dev:x:20010:alice,bob,frank"), n.d.log()[-3000:]
        assert c.ask("gr top") == ["top", "x", 20014, ["carol", "alice", "bob", "frank"]]
        assert maps.requests(n, "getgrbyname") == 2
    finally:
        c.close()
