"""The files provider answers every line as glibc's files module does.

Repeated names, names differing only in case, non-secret password fields
and lines of any length, through the socket and through the memory maps,
compared with glibc's own answers over the same files; what `idcache
status` and `idcache user|group NAME` say about lines that are not served.
"""
import os
import subprocess

import pytest

import nsenv

pytestmark = pytest.mark.usefixtures("as_root")

PASSWD = ("dupname:x:2013:100:first:/home/dup:/bin/sh\n"
          "locked:!:2020:100::/:/bin/sh\n"
          "dupname:*:2014:100:second:/home/dup2:/bin/sh\n"
          "nopass::2021:100::/:/bin/sh\n"
          "star:*:2022:100::/:/bin/sh\n"
          "Alice:x:2030:100:upper::/bin/sh\n"
          "alice:x:2031:100:lower::/bin/sh\n"
          "hashed:$6$rounds=5000$salt$0123456789abcdef:2040:100::/:/bin/sh\n"
          "lockedhash:!$6$salt$0123456789abcdef:2041:100::/:/bin/sh\n"
          "broken:x:12a:100::/:/bin/sh\n")
GROUP = ("dupgrp:x:3013:alice\n"
         "dupgrp:!:3014:Alice\n"
         "Staff:*:3020:Alice\n"
         "staff::3021:alice\n"
         "shadowed:$6$salt$0123:3022:alice\n")

LOOKUPS = [["getent", "passwd", k] for k in
           ("dupname", "2013", "2014", "locked", "nopass", "star", "Alice", "alice", "ALICE",
            "2030", "2031", "hashed", "lockedhash")] + \
          [["getent", "group", k] for k in ("dupgrp", "3013", "3014", "Staff", "staff", "3021")] + \
          [["id", "alice"], ["id", "Alice"], ["id", "dupname"], ["getent", "passwd"],
           ["getent", "group"]]

# One process asks by id first, then by name: the by-id answer must not
# take the name's place in the maps.
ID_THEN_NAME = r'''
import grp, json, pwd
out = []
for _ in range(3):
    out.append(list(pwd.getpwuid(2014)))
    out.append(list(pwd.getpwnam("dupname")))
    out.append(list(grp.getgrgid(3014))[:3])
    out.append(list(grp.getgrnam("dupgrp"))[:3])
print(json.dumps(out))
'''


def hashes_hidden(text):
    """What files prints with the hashes replaced by "x", as idcache serves
    them."""
    return (text.replace("$6$rounds=5000$salt$0123456789abcdef", "x")
            .replace("!$6$salt$0123456789abcdef", "x").replace("$6$salt$0123", "x"))


def compare(d, argvs):
    kw = dict(passwd=d.passwd, group=d.group)
    got = d.ns.run_many(argvs, sources="idcache", **kw)
    want = d.ns.run_many(argvs, sources="files", **kw)
    for g, w in zip(got, want):
        what = " ".join(g.argv)
        assert (g.rc, g.out) == (w.rc, hashes_hidden(w.out)), f"{what}: {g!r} != {w!r}"


def cli(idcache, d, *args):
    argv = [str(idcache), args[0], "--run-dir", str(d.run_dir)] + list(args[1:])
    p = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    return nsenv.Result(p.returncode, p.stdout, p.stderr, 0, argv)


def test_lines_answer_as_files(daemons):
    d = daemons.start(PASSWD, GROUP)
    compare(d, LOOKUPS)
    compare(d, LOOKUPS)  # the second run is answered from the maps


def test_by_id_answer_does_not_take_the_name(daemons):
    d = daemons.start(PASSWD, GROUP)
    kw = dict(passwd=d.passwd, group=d.group)
    got = d.ns.run_py(ID_THEN_NAME, sources="idcache", **kw)
    want = d.ns.run_py(ID_THEN_NAME, sources="files", **kw)
    assert got == want
    assert got[1][2] == 2013 and got[0][2] == 2014


def test_no_line_limit(daemons):
    members = [f"member{i:04d}" for i in range(7000)]
    group = "huge:x:4000:" + ",".join(members) + "\nafter:x:4001:member6999\n"
    assert len(group) > 64 * 1024
    d = daemons.start("member6999:x:4100:4000::/:/bin/sh\nbig:x:4101:100:" + "G" * 70000 +
                      ":/:/bin/sh\n", group)
    compare(d, [["getent", "group", "huge"], ["getent", "group", "4000"],
                ["id", "member6999"], ["getent", "passwd", "big"], ["getent", "group"]])


def test_status_and_info_say_what_is_not_served(idcache, daemons):
    d = daemons.start(PASSWD, GROUP)
    st = cli(idcache, d, "status")
    assert st.rc == 0, st
    assert "domain.local.malformed_lines=1\n" in st.out, st.out
    assert "domain.local.repeated_name_lines=2\n" in st.out, st.out  # dupname, dupgrp
    r = cli(idcache, d, "user", "broken")
    assert r.rc != 0
    assert f"{d.passwd}:10: missing or invalid uid" in r.err, r
    r = cli(idcache, d, "user", "ALICE")
    assert r.rc != 0 and "case-sensitive" in r.err, r
    r = cli(idcache, d, "user", "Alice")
    assert r.rc == 0 and "uid=2030\n" in r.out, r


def test_in_place_write_to_bind_mounted_file(daemons):
    """Containers bind-mount /etc/passwd: an edit is a write in place to
    another directory's file, which a watch on our directory never hears
    of. The file's own watch does."""
    d = daemons.start("before:x:2100:100::/:/bin/sh\n", "g:x:100:\n", start=False)
    real = d.base / "real"
    real.mkdir()
    os.chmod(real, 0o755)
    src = real / "passwd"
    src.write_text("before:x:2100:100::/:/bin/sh\n")
    os.chmod(src, 0o644)
    d.wrap = ["unshare", "-m", "--propagation", "private", "--", "sh", "-c",
              'mount --bind "$1" "$2" || exit 125; shift 2; exec "$@"', "bind",
              str(src), str(d.passwd)] + d.wrap
    d.start()
    assert d.ns.run(["getent", "passwd", "before"]).rc == 0
    for k in range(3):
        with open(src, "r+") as f:  # in place, as an editor in the container does
            f.write(f"before:x:2100:100::/:/bin/sh\nadded{k}:x:{2101 + k}:100::/:/bin/sh\n")
            f.truncate()
        ok, waited = nsenv.wait_for(
            lambda: d.ns.run(["getent", "passwd", f"added{k}"]).rc == 0, 5)
        print(f"in-place write {k} visible after {waited:.3f}s")
        assert ok, f"an in-place write to the bind-mounted file was not noticed:\n{d.log()}"
    assert d.ns.run(["getent", "passwd", "added0"]).rc == 2


def test_daemon_starts_under_idcache_alone(daemons):
    """With "passwd: idcache" and "group: idcache" alone, the daemon's own
    user can only come from the files themselves: through NSS the lookup
    would ask the daemon that is starting."""
    d = daemons.start("u:x:2200:100::/:/bin/sh\n", "g:x:100:u\n", start=False)
    sys_passwd, sys_group = nsenv.daemon_sys_files(d.base / "sys-idcache")
    env = ["env", f"LD_LIBRARY_PATH={d.ns.module_dir}", f"IDCACHE_RUNDIR={d.run_dir}"]
    d.wrap = env + d.ns.argv([], sources="idcache", passwd=sys_passwd, group=sys_group)
    d.start()
    assert f"running as {nsenv.DAEMON_USER} (uid {nsenv.DAEMON_UID})" in d.log(), d.log()
    assert d.ns.run(["getent", "passwd", "u"]).rc == 0
    d.check_alive()


RECOMMENDED = "idcache [NOTFOUND=return] files"  # README, post-install, libnss_idcache(8)


def test_recommended_nsswitch_line_enumerates_once(daemons):
    """The line the docs give lists every user and group once, with the
    daemon up and down, and answers as files does; both plain orders list
    every local user twice, which is why the docs do not give them."""
    d = daemons.start(PASSWD, GROUP)
    kw = dict(passwd=d.passwd, group=d.group)
    argvs = [["getent", "passwd"], ["getent", "group"], ["getent", "passwd", "dupname"],
             ["getent", "passwd", "nosuch"], ["id", "alice"]]
    want = [hashes_hidden(r.out) for r in d.ns.run_many(argvs, sources="files", **kw)]
    up = d.ns.run_many(argvs, sources=RECOMMENDED, **kw)
    assert [r.out for r in up] == want
    for order in ("files idcache", "idcache files"):
        twice = d.ns.run_many(argvs[:1], sources=order, **kw)[0]
        assert len(twice.out.splitlines()) == 2 * len(want[0].splitlines()), (order, twice)
    d.stop()
    down = d.ns.run_many(argvs, sources=RECOMMENDED, **kw)
    assert [r.out for r in down] == [r.out for r in d.ns.run_many(argvs, sources="files", **kw)]
