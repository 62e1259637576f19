"""Differential test: glibc through libnss_idcache.so.2 answers exactly what
glibc's own `files` module answers for the same passwd/group files.

Each client runs twice in a private mount namespace over bind-mounted copies
of the generated files: once with `passwd: idcache` / `group: idcache` (the
module asks idcached, which loaded the same files), once with `files`. The
outputs of getent, id, ls -l and Python's pwd/grp must be identical, order of
enumeration included (files enumerate in file order; idcache keeps provider
order). What the generator leaves out, and why, is in gen_nss_data.py; those
cases have their own tests at the end of this file.
"""
import difflib
import json
import os

import pytest

import gen_nss_data

pytestmark = pytest.mark.usefixtures("as_root")


class World:
    """One daemon over the generated data, and the oracle runner."""

    def __init__(self, daemon, data):
        self.d = daemon
        self.data = data
        self.ns = daemon.ns

    def both(self, argvs):
        """Run the argv list through idcache and through files; return
        (idcache results, files results)."""
        kw = dict(passwd=self.d.passwd, group=self.d.group)
        got = self.ns.run_many(argvs, sources="idcache", **kw)
        want = self.ns.run_many(argvs, sources="files", **kw)
        return got, want


@pytest.fixture(scope="module")
def world(module_daemons):
    data = gen_nss_data.generate(n_users=2000, n_groups=300, parity=True)
    d = module_daemons.start(data.passwd_text(), data.group_text())
    print(f"idcached ready after {d.ready_seconds:.3f}s with {len(data.users)} users, "
          f"{len(data.groups)} groups")
    return World(d, data)


def assert_same(got, want, what):
    """Compare two Results field by field with a readable diff."""
    for field in ("rc", "out", "err"):
        g, w = getattr(got, field), getattr(want, field)
        if g == w:
            continue
        if field == "rc":
            pytest.fail(f"{what}: exit status idcache={g} files={w}\n"
                        f"idcache: {got!r}\nfiles: {want!r}")
        diff = list(difflib.unified_diff(w.splitlines(), g.splitlines(), "files", "idcache",
                                         lineterm="", n=1))
        more = f"\n... {len(diff) - 60} more diff lines" if len(diff) > 60 else ""
        pytest.fail(f"{what}: {field} differs (- files, + idcache):\n"
                    + "\n".join(diff[:60]) + more)


def chunks(seq, n):
    return [seq[i:i + n] for i in range(0, len(seq), n)]


# ==== getent ======================================================================

def test_enumeration_matches_files(world):
    got, want = world.both([["getent", "passwd"], ["getent", "group"]])
    # Guard against an oracle that is empty for a harness reason.
    assert len(want[0].out.splitlines()) == len(world.data.users)
    assert len(want[1].out.splitlines()) == len(world.data.groups)
    assert_same(got[0], want[0], "getent passwd")
    assert_same(got[1], want[1], "getent group")


def test_every_user_by_name_and_uid(world):
    keys = world.data.user_keys()
    argvs = [["getent", "passwd"] + c for c in chunks(keys, 400)]
    got, want = world.both(argvs)
    for g, w in zip(got, want):
        assert_same(g, w, f"getent passwd {' '.join(g.argv[2:5])} ...")


def test_every_group_by_name_and_gid(world):
    keys = world.data.group_keys()
    argvs = [["getent", "group"] + c for c in chunks(keys, 200)]
    got, want = world.both(argvs)
    for g, w in zip(got, want):
        assert_same(g, w, f"getent group {' '.join(g.argv[2:5])} ...")


def test_one_process_per_lookup(world):
    """A few lookups each in a fresh process (a fresh connection, no state
    left from earlier calls in the same process)."""
    keys = ["biguser", "josé", "a.b_c-d$", "0", "4294967294", "lastuser", "host8$",
            "nosuchuser"]
    argvs = [["getent", "passwd", k] for k in keys] + \
            [["getent", "group", k] for k in ("huge", "équipe", "smb4$", "19999", "nogroup")]
    got, want = world.both(argvs)
    for g, w in zip(got, want):
        assert_same(g, w, " ".join(g.argv))


# ==== id, initgroups, ls =============================================================

def sample_users(data):
    """Users for id/initgroups: the 200-group user, odd names, users whose
    primary group is missing, users with a duplicate uid, and every 40th."""
    names = [u[0] for u in data.users]
    picked = ["biguser", "josé", "a.b_c-d$", "root", "nobody", "nfsnobody", "lastuser",
              "3com", "Mixed9Case", "host8$", "first.last5"]
    picked += names[10:40] + names[::40]
    picked += [u[0] for u in data.users if u[2] >= 50000][:10]
    seen = set()
    return [n for n in picked if not (n in seen or seen.add(n))]


def test_id_matches_files(world):
    users = sample_users(world.data)
    got, want = world.both([["id", u] for u in users] + [["id", "nosuchuser"]])
    for g, w in zip(got, want):
        if g.out != w.out and g.rc == w.rc == 0:
            gs = sorted(g.out.split("groups=")[1].split(","))
            ws = sorted(w.out.split("groups=")[1].split(","))
            if gs == ws:
                pytest.fail(f"{' '.join(g.argv)}: same groups, different order\n"
                            f"files:   {w.out}idcache: {g.out}")
        assert_same(g, w, " ".join(g.argv))
    big = next(w for w in want if w.argv == ["id", "biguser"])
    assert big.out.count(",") >= 199  # the oracle really has the big user


def test_initgroups_matches_files(world):
    users = sample_users(world.data)
    got, want = world.both([["getent", "initgroups"] + users])
    assert_same(got[0], want[0], "getent initgroups <sample>")


def test_ls_shows_the_same_owners(world):
    top = world.d.base / "ls"
    top.mkdir(exist_ok=True)
    os.chmod(top, 0o755)
    pairs = [(u[1], u[2]) for u in world.data.users]
    pairs += [(0, g[1]) for g in world.data.groups]
    pairs += [(77777, 88888), (4294967294, 4294967294), (9999, 9998)]
    for n, (uid, gid) in enumerate(pairs):
        p = top / f"f{n:05d}"
        p.touch()
        os.chown(p, uid, gid)
        os.utime(p, (0, 0))
    argv = ["ls", "-l", "--time-style=+%s", str(top)]
    got, want = world.both([argv, ["ls", "-ln", "--time-style=+%s", str(top)]])
    assert len(want[0].out.splitlines()) == len(pairs) + 1
    assert_same(got[0], want[0], "ls -l")
    assert_same(got[1], want[1], "ls -ln")  # numeric: the harness itself


# ==== Python's pwd and grp ============================================================

PY_PROBE = r'''
import grp, json, os, pwd, sys
users, groups, sample = json.load(open(sys.argv[1]))
def pw(e): return list(e)
def gr(e): return [e.gr_name, e.gr_passwd, e.gr_gid, list(e.gr_mem)]
def catch(f, k):
    try:
        return f(k)
    except KeyError:
        return "KeyError"
    except Exception as e:
        return f"{type(e).__name__}: {e}"
out = {
    "getpwall": [pw(e) for e in pwd.getpwall()],
    "getgrall": [gr(e) for e in grp.getgrall()],
    "getpwnam": {n: catch(lambda k: pw(pwd.getpwnam(k)), n) for n in users[0]},
    "getpwuid": {str(u): catch(lambda k: pw(pwd.getpwuid(k)), u) for u in users[1]},
    "getgrnam": {n: catch(lambda k: gr(grp.getgrnam(k)), n) for n in groups[0]},
    "getgrgid": {str(g): catch(lambda k: gr(grp.getgrgid(k)), g) for g in groups[1]},
    "getgrouplist": {n: catch(lambda k: os.getgrouplist(k, 4242), n) for n in sample},
}
json.dump(out, sys.stdout)
'''


@pytest.fixture(scope="module")
def py_answers(world):
    """Python's pwd/grp/getgrouplist answers through idcache and through
    files: (idcache, files), each {call: result}."""
    data = world.data
    names = [u[0] for u in data.users] + ["nosuchuser", "USER00001", ""]
    uids = sorted({u[1] for u in data.users}) + [55555, 4294967295]
    gnames = [g[0] for g in data.groups] + ["nosuchgroup", "GRP000"]
    gids = sorted({g[1] for g in data.groups}) + [44444]
    spec = world.d.base / "pyprobe.json"
    spec.write_text(json.dumps([[names, uids], [gnames, gids], sample_users(data)]))
    kw = dict(passwd=world.d.passwd, group=world.d.group, timeout=180)
    got = world.ns.run_py(PY_PROBE, [spec], sources="idcache", **kw)
    want = world.ns.run_py(PY_PROBE, [spec], sources="files", **kw)
    assert len(want["getpwall"]) == len(data.users)
    return got, want


def py_differences(got, want):
    """Readable differences between two answers of one call."""
    bad = []
    if isinstance(want, dict):
        for k in want:
            if got.get(k) != want[k]:
                bad.append(f"({k!r}): files={want[k]!r:.300} idcache={got.get(k)!r:.300}")
    else:
        for i, (g, w) in enumerate(zip(got, want)):
            if g != w:
                bad.append(f"[{i}]: files={w!r:.300} idcache={g!r:.300}")
                break
        if len(got) != len(want):
            bad.append(f"files has {len(want)} entries, idcache {len(got)}")
    return bad


# getgrouplist(user, 4242): the gid passed is not the user's primary one, as
# with `sg`, `sudo -g` or initgroups(user, other_gid); glibc's files module
# then reports exactly the groups that list the user, in file order.
@pytest.mark.parametrize("call", ["getpwall", "getgrall", "getpwnam", "getpwuid", "getgrnam",
                                  "getgrgid", "getgrouplist"])
def test_python_pwd_grp_match_files(py_answers, call):
    got, want = py_answers
    bad = py_differences(got[call], want[call])
    assert not bad, f"{call}: {len(bad)} differences:\n" + \
        "\n".join(call + b for b in bad[:20])


# ==== non-root clients =================================================================

def test_unprivileged_client_resolves(world):
    """nss.sock is 0666: a process running as nobody resolves through it."""
    argvs = [["getent", "passwd", "biguser", "10001"], ["getent", "group", "huge"],
             ["id", "biguser"]]
    kw = dict(passwd=world.d.passwd, group=world.d.group, as_uid=65534)
    got = world.ns.run_many(argvs, sources="idcache", **kw)
    want = world.ns.run_many(argvs, sources="files", **kw)
    for g, w in zip(got, want):
        assert_same(g, w, f"as nobody: {' '.join(g.argv)}")


# ==== what the generated data leaves out ==============================================

# glibc's line parser has corners; the files provider promises to follow it
# (src/providers/files/files.h). Each line here was checked against glibc
# 2.36's files module; lookups by these keys must agree, one result per key.
# Not here: a member containing ':' ("g:x:1:a:b" gives glibc the member
# "a:b"), which the provider drops by design (no user can be named so).
QUIRK_PASSWD = """\
root:x:0:0:root:/root:/bin/bash
  lead:x:1010:1010:leading blanks:/home/lead:/bin/sh
\tleadtab:x:1011:1011:leading tab:/home/leadtab:/bin/sh
short:x:1012:1012
short2:x:1013:1013:only gecos
extra:x:1014:1014:g:/home/extra:/bin/sh:more:fields
plus:x:+1015:1015::/:
space:x: 1016: 1016::/:
neg:x:-1:1017::/:
wrap:x:4294967296:1018::/:
trail:x:1019:1019:trailing blanks  :/home/trail  :/bin/sh  
max:x:4294967294:4294967294::/:
crlf:x:1020:1020::/:/bin/sh\r
last:x:1021:1021:last:/home/last:/bin/sh
"""

QUIRK_GROUP = """\
root:x:0:
empties:x:2000:a,,b,
blanks:x:2001: a, b ,c
nomem:x:2002
comma:x:2005:,
space:x: 2006:a
plusgid:x:+2007:a
lastg:x:2008:last
"""

QUIRK_USERS = ["lead", "leadtab", "short", "short2", "extra", "plus", "space", "neg",
               "wrap", "trail", "max", "crlf", "last", "1010", "1011", "1012", "1013", "1014",
               "1015", "1016", "1017", "1018", "1019", "4294967294", "1020", "1021"]
QUIRK_GROUPS = ["empties", "blanks", "nomem", "comma", "space", "plusgid",
                "lastg", "2000", "2001", "2002", "2005", "2006", "2007", "2008"]


@pytest.fixture(scope="module")
def quirks(module_daemons):
    """idcache's and files' answers for every quirk key, computed once:
    {(call, key): (idcache answer, files answer)}."""
    d = module_daemons.start(QUIRK_PASSWD, QUIRK_GROUP)
    argvs = [["getent", "passwd", k] for k in QUIRK_USERS] + \
            [["getent", "group", k] for k in QUIRK_GROUPS] + \
            [["getent", "passwd"], ["getent", "group"]]
    kw = dict(passwd=d.passwd, group=d.group)
    got = d.ns.run_many(argvs, sources="idcache", **kw)
    want = d.ns.run_many(argvs, sources="files", **kw)
    out = {}
    for g, w in zip(got, want):
        out[("getent", " ".join(g.argv[1:]))] = ((g.rc, g.out), (w.rc, w.out))
    # getent prints through putpwent/putgrent, which refuse a field holding
    # ':' (the "extra" line prints nothing, status 0); Python shows what
    # glibc really returned.
    users = [k for k in QUIRK_USERS if not k.isdigit()]
    uids = [int(k) for k in QUIRK_USERS if k.isdigit()]
    groups = [k for k in QUIRK_GROUPS if not k.isdigit()]
    gids = [int(k) for k in QUIRK_GROUPS if k.isdigit()]
    spec = d.base / "pyprobe.json"
    spec.write_text(json.dumps([[users, uids], [groups, gids], []]))
    pg = d.ns.run_py(PY_PROBE, [spec], sources="idcache", **kw)
    pw = d.ns.run_py(PY_PROBE, [spec], sources="files", **kw)
    for call in ("getpwnam", "getpwuid", "getgrnam", "getgrgid"):
        for k in pw[call]:
            out[("python", f"{call}({k})")] = (pg[call].get(k), pw[call][k])
    return out


QUIRK_CASES = [("getent", f"passwd {k}") for k in QUIRK_USERS] + \
              [("getent", f"group {k}") for k in QUIRK_GROUPS] + \
              [("getent", "passwd"), ("getent", "group")] + \
              [("python", f"getpwnam({k})") for k in QUIRK_USERS if not k.isdigit()] + \
              [("python", f"getpwuid({k})") for k in QUIRK_USERS if k.isdigit()] + \
              [("python", f"getgrnam({k})") for k in QUIRK_GROUPS if not k.isdigit()] + \
              [("python", f"getgrgid({k})") for k in QUIRK_GROUPS if k.isdigit()]


@pytest.mark.parametrize("case", QUIRK_CASES, ids=[f"{a}:{b}" for a, b in QUIRK_CASES])
def test_glibc_line_parser_corners(quirks, case):
    got, want = quirks[case]
    assert got == want, f"{case[0]} {case[1]}: files={want!r} idcache={got!r}"


def test_repeated_member_listed_once(daemons):
    """Documented divergence (cache.h): group members are a set, as in LDAP,
    so "a,a,b" is served as "a,b"; glibc's files module repeats "a"."""
    d = daemons.start("a:x:1:1::/:\n", "dupmem:x:2003:a,a,b\n")
    r = d.ns.run_many([["getent", "group", "dupmem"], ["id", "-G", "a"]])
    assert r[0].out == "dupmem:x:2003:a,b\n", r[0]
    assert r[1].out.split() == ["1", "2003"], r[1]


def test_member_with_colon_is_dropped(daemons):
    """Documented divergence (files.h): glibc keeps the member "a:b", the
    provider drops a member name the cache refuses; the group itself stays."""
    d = daemons.start("a:x:1:1::/:\n", "colon:x:2004:a:b\nnext:x:2005:a\n")
    r = d.ns.run_many([["getent", "group", "colon"], ["getent", "group", "next"]])
    assert r[0].out == "colon:x:2004:\n", r[0]
    assert r[1].out == "next:x:2005:a\n", r[1]


def test_duplicate_names_as_files(daemons):
    """A name given twice: the first line answers by name, every line by its
    id and in enumeration, as files does."""
    passwd = ("dup:x:3000:3000:first:/home/dup:/bin/sh\n"
              "other:x:3001:3001::/:\n"
              "dup:x:3002:3002:second:/home/dup2:/bin/sh\n")
    group = "gdup:x:4000:dup\ngdup:x:4001:other\n"
    d = daemons.start(passwd, group)
    argvs = [["getent", "passwd", "dup"], ["getent", "passwd", "3000"],
             ["getent", "passwd", "3002"], ["getent", "group", "gdup"],
             ["getent", "group", "4000"], ["getent", "group", "4001"], ["id", "dup"],
             ["getent", "passwd"], ["getent", "group"]]
    kw = dict(passwd=d.passwd, group=d.group)
    got = d.ns.run_many(argvs, sources="idcache", **kw)
    want = d.ns.run_many(argvs, sources="files", **kw)
    for g, w in zip(got, want):
        assert_same(g, w, " ".join(g.argv))


def test_nis_compat_lines_ignored(daemons):
    """+/- lines are no entries for idcache (files enumerates them)."""
    passwd = ("root:x:0:0:root:/root:/bin/bash\n+\n+@admins\n-baduser\n+::::::\n"
              "-bad2:x:5:5::/:\nafter:x:3100:3100::/:\n")
    group = "root:x:0:\n+\n-g\n+:::\nafterg:x:3200:after\n"
    d = daemons.start(passwd, group)
    r = d.ns.run_many([["getent", "passwd"], ["getent", "group"],
                       ["getent", "passwd", "--", "+", "-baduser", "after"]])
    assert r[0].out == "root:x:0:0:root:/root:/bin/bash\nafter:x:3100:3100::/:\n", r[0]
    assert r[1].out == "root:x:0:\nafterg:x:3200:after\n", r[1]
    assert r[2].rc == 2 and r[2].out == "after:x:3100:3100::/:\n", r[2]


def test_case_variants_are_distinct_lookups(daemons):
    """files is case-sensitive; a lookup with the wrong case finds nothing."""
    d = daemons.start("Alice:x:3300:3300::/:\nbob:x:3301:3301::/:\n", "Wheel:x:3400:Alice\n")
    argvs = [["getent", "passwd", k] for k in ("Alice", "alice", "ALICE", "bob", "Bob")] + \
            [["getent", "group", k] for k in ("Wheel", "wheel")] + [["id", "Alice"]]
    kw = dict(passwd=d.passwd, group=d.group)
    got = d.ns.run_many(argvs, sources="idcache", **kw)
    want = d.ns.run_many(argvs, sources="files", **kw)
    for g, w in zip(got, want):
        assert_same(g, w, " ".join(g.argv))


def test_names_differing_in_case_are_distinct(daemons):
    """files holds both "Alice" and "alice"; so does idcache."""
    d = daemons.start("Alice:x:3500:3500::/:\nalice:x:3501:3501::/:\nbob:x:3502:3502::/:\n",
                      "g:x:3600:Alice,alice\nG:x:3601:alice\n")
    argvs = [["getent", "passwd", k] for k in ("Alice", "alice", "ALICE", "3500", "3501")] + \
            [["getent", "group", k] for k in ("g", "G", "3601")] + \
            [["id", "Alice"], ["id", "alice"], ["getent", "passwd"], ["getent", "group"]]
    kw = dict(passwd=d.passwd, group=d.group)
    got = d.ns.run_many(argvs, sources="idcache", **kw)
    want = d.ns.run_many(argvs, sources="files", **kw)
    for g, w in zip(got, want):
        assert_same(g, w, " ".join(g.argv))

