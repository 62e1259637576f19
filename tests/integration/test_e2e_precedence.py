"""Which domain answers, on every path (socket and memory cache alike).

By name: the first domain in `domains` order that holds the name. By id:
the first domain that holds the id. A record stored for an id never
replaces another domain's record for a name, nor the other way round.

The memory-cache answers are compared with the socket's
(IDCACHE_MEMCACHE=no) for every name and id, after lookups in several
orders, each order starting from empty maps (`idcache expire --all`).
"""
import subprocess

import pytest

import nsenv
from test_e2e_mc import grown, lookups, status

pytestmark = pytest.mark.usefixtures("as_root")

# Domain a (the daemon's `local`), then b, then c.
#   alice  a: 2001   b: 9999            by name a's, 9999 is b's
#   erin            b: 2001             2001 is a's alice
#   bob             b: 7000  c: 7777    by name b's; 7000 is a's zed
#   staff  a: 3001   b: 9001            group by name a's, 9001 b's
#   bobg            b: 6000  c: 6666    6000 is a's zedg
A_PASSWD = """\
root:x:0:0:root:/root:/bin/bash
alice:x:2001:2001:Alice in a:/home/alice:/bin/bash
zed:x:7000:7000:Zed in a:/home/zed:/bin/sh
"""
A_GROUP = """\
root:x:0:
alice:x:2001:
staff:x:3001:alice
zedg:x:6000:zed
"""
B_PASSWD = """\
alice:x:9999:9999:Alice in b:/b/alice:/bin/zsh
erin:x:2001:2001:Erin in b:/b/erin:/bin/sh
bob:x:7000:7000:Bob in b:/b/bob:/bin/sh
"""
B_GROUP = """\
staff:x:9001:alice,bob
bobg:x:6000:bob
"""
C_PASSWD = """\
bob:x:7777:7777:Bob in c:/c/bob:/bin/sh
"""
C_GROUP = """\
bobg:x:6666:bob
"""

USER_NAMES = ["root", "alice", "zed", "erin", "bob"]
UIDS = ["0", "2001", "7000", "9999", "7777"]
GROUP_NAMES = ["root", "alice", "staff", "zedg", "bobg"]
GIDS = ["0", "2001", "3001", "6000", "9001", "6666"]


def files_domain(name, where, passwd, group):
    """A [domain/NAME] files section over where/NAME.passwd and .group."""
    p, g = where / f"{name}.passwd", where / f"{name}.group"
    nsenv.write_atomic(p, passwd)
    nsenv.write_atomic(g, group)
    return f"\n[domain/{name}]\nid_provider = files\npasswd_files = {p}\ngroup_files = {g}\n"


def three_domains(daemons):
    d = daemons.start(A_PASSWD, A_GROUP, idcache_conf="domains = local, b, c\n", start=False)
    with open(d.conf, "a") as f:
        f.write(files_domain("b", d.base, B_PASSWD, B_GROUP) +
                files_domain("c", d.base, C_PASSWD, C_GROUP))
    d.start()
    return d


def expire_all(idcache, d):
    p = subprocess.run([str(idcache), "expire", "--run-dir", str(d.run_dir), "--all"],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr


def every_key():
    return [["getpwnam", n] for n in USER_NAMES] + [["getpwuid", i] for i in UIDS] + \
        [["getgrnam", n] for n in GROUP_NAMES] + [["getgrgid", i] for i in GIDS] + \
        [["getgrouplist", n] for n in USER_NAMES]


def orders():
    """Lookup orders, each a list of specs: ids before names, names before
    ids, each id right before the name it shares a record with, reversed."""
    ids = [["getpwuid", i] for i in UIDS] + [["getgrgid", i] for i in GIDS]
    names = [["getpwnam", n] for n in USER_NAMES] + [["getgrnam", n] for n in GROUP_NAMES]
    inter = []
    for a, b in zip(ids, names):
        inter += [a, b]
    inter += ids[len(names):]
    return {"ids-first": ids + names, "names-first": names + ids, "interleaved": inter,
            "reversed": list(reversed(ids + names))}


def test_socket_answers_follow_domain_order(daemons):
    d = three_domains(daemons)
    got = lookups(d, every_key(), env={"IDCACHE_MEMCACHE": "no"})
    assert got["getpwnam alice"][2] == 2001
    assert got["getpwuid 9999"][:3] == ["alice", "x", 9999]
    assert got["getpwuid 2001"][0] == "alice"
    assert got["getpwnam erin"][2] == 2001
    assert got["getpwnam bob"][2] == 7000
    assert got["getpwuid 7000"][0] == "zed"
    assert got["getpwuid 7777"][:3] == ["bob", "x", 7777]
    assert got["getgrnam staff"][1] == 3001
    assert got["getgrgid 9001"][:2] == ["staff", 9001]
    assert got["getgrgid 6000"][0] == "zedg"
    assert got["getgrnam bobg"][1] == 6000


@pytest.mark.parametrize("order", sorted(orders()))
def test_maps_answer_as_the_socket_does(idcache, daemons, order):
    d = three_domains(daemons)
    truth = lookups(d, every_key(), env={"IDCACHE_MEMCACHE": "no"})
    expire_all(idcache, d)  # empty maps
    first = lookups(d, orders()[order])  # misses: the socket answers, maps store
    warm = lookups(d, every_key())
    s0 = status(idcache, d)
    warm_again = lookups(d, every_key())
    s1 = status(idcache, d)
    for key, want in truth.items():
        assert warm_again[key] == want, \
            f"after {order}: the map answers {key} with {warm_again[key]}, the socket {want}"
    assert warm == warm_again
    assert all(truth[k] == v for k, v in first.items()), "the first pass differs"
    # The last pass came from the maps: it asked the daemon nothing.
    assert grown(s0, s1) == {}, f"warm maps still asked the daemon: {grown(s0, s1)}"


def test_getent_by_id_then_by_name(daemons):
    """The shape first seen: `getent passwd 9999`, then `getent passwd
    alice` in a new process; groups alike."""
    d = three_domains(daemons)
    assert d.ns.run(["getent", "passwd", "9999"]).out.startswith("alice:x:9999:")
    assert d.ns.run(["getent", "passwd", "alice"]).out.startswith("alice:x:2001:")
    assert d.ns.run(["getent", "passwd", "alice"]).out.startswith("alice:x:2001:")
    assert d.ns.run(["getent", "passwd", "9999"]).out.startswith("alice:x:9999:")
    assert d.ns.run(["getent", "group", "9001"]).out.startswith("staff:x:9001:")
    assert d.ns.run(["getent", "group", "staff"]).out == "staff:x:3001:alice\n"
    assert d.ns.run(["getent", "group", "staff"]).out == "staff:x:3001:alice\n"
    assert d.ns.run(["getent", "passwd", "7777"]).out.startswith("bob:x:7777:")
    assert d.ns.run(["getent", "passwd", "bob"]).out.startswith("bob:x:7000:")
    assert d.ns.run(["getent", "passwd", "7000"]).out.startswith("zed:x:7000:")
    assert d.ns.run(["id", "-u", "alice"]).out == "2001\n"


def test_other_spelling_does_not_take_the_name(idcache, daemons):
    """b matches names in any case; what it answered for `ALICE` is not
    the answer for `Alice`, which a holds."""
    d = daemons.start("Alice:x:2001:2001::/home/a:/bin/sh\n", "", start=False,
                      idcache_conf="domains = local, b\n")
    with open(d.conf, "a") as f:
        f.write(files_domain("b", d.base, "Alice:x:9999:9999::/b:/bin/sh\n", "") +
                "case_sensitive = false\n")
    d.start()
    assert lookups(d, [["getpwnam", "ALICE"]])["getpwnam ALICE"][2] == 9999
    got = lookups(d, [["getpwnam", "Alice"], ["getpwnam", "ALICE"]] * 2)
    assert got["getpwnam Alice"][2] == 2001
    assert got["getpwnam ALICE"][2] == 9999
