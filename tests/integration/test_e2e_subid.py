"""Subordinate ids end to end: shadow-utils' own tools (Debian 12's getsubids,
newuidmap and newgidmap, shadow 4.13) through libsubid, which loads
libsubid_idcache.so for `subid: idcache` in nsswitch.conf, which asks
idcached.

Directory (a slapd of the test's own, with tests/ldap/subid.schema):
  lsub    uid 20001  ranges on its entry: uids and gids 4100000000 +65536
  lalloc  uid 20002  no ranges on its entry: the allocation's
  lover   uid 20003  a range reaching into the domain's own ids (min_id..max_id):
                     never served
  lhalf   uid 20004  a first id without a count: no range, logged with its DN
  lmove   uid 20005  a range the test changes in the directory
Files domain `local`:
  floc    uid 5000   the allocation's
  fhigh   uid 40000  above subid_uid_max: none
  fvictim uid 6000   its allocated range holds fsquat's uid: not served until
                     fsquat is gone

The allocation: base 2147483648, size 65536, uids 1000..29999 (block
2147483648..4048027647). So lalloc gets 2147483648 + 19002 * 65536 and
floc 2147483648 + 4000 * 65536.

getsubids runs as root in a private mount namespace with a test
nsswitch.conf and finds the plugin through LD_LIBRARY_PATH. newuidmap and
newgidmap are setuid root: the dynamic loader ignores LD_LIBRARY_PATH and
the plugin (and the NSS module) ignore IDCACHE_RUNDIR for them, so their
namespace gets the two libraries through an overlay over the real library
directory and the daemon's run_dir bound on /run/idcache (over a fresh
tmpfs /run), as test_hard_privs does. The user namespace is made by
`unshare -U` running as the user; newuidmap, run as the same user, must
write the user's own range and refuse one reaching outside it.
"""
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

import nsenv
from test_e2e_ldap import BASE, LDAP_DIR, SLAPD, Slapd
from test_hard_privs import libc_dir

pytestmark = [
    pytest.mark.usefixtures("as_root"),
    pytest.mark.skipif(not (os.access(SLAPD, os.X_OK) and shutil.which("ldapadd")),
                       reason="needs Debian's slapd and ldap-utils"),
    pytest.mark.skipif(shutil.which("getsubids") is None,
                       reason="needs getsubids (Debian's uidmap or passwd 4.13)"),
]

ALLOC_BASE, ALLOC_SIZE, UID_MIN, UID_MAX = 2147483648, 65536, 1000, 29999
DIR_START, DIR_COUNT = 4100000000, 65536
USERS = {"lsub": 20001, "lalloc": 20002, "lover": 20003, "lhalf": 20004, "lmove": 20005}
MOVE_BEFORE, MOVE_AFTER = (4110000000, 1000), (4120000000, 2000)
SQUAT = 2147483648 + (6000 - 1000) * 65536 + 100
FILES_PASSWD = ("floc:x:5000:5000:Files User:/home/floc:/bin/sh\n"
                "fhigh:x:40000:40000:Files High:/home/fhigh:/bin/sh\n"
                "fvictim:x:6000:6000::/home/fvictim:/bin/sh\n")
SQUAT_LINE = f"fsquat:x:{SQUAT}:100::/home/fsquat:/bin/sh\n"
FILES_GROUP = "floc:x:5000:\nfhigh:x:40000:\n"


def alloc_start(uid):
    return ALLOC_BASE + (uid - UID_MIN) * ALLOC_SIZE


def user_ldif(name, uid, extra=""):
    aux = "objectClass: testSubordinateIds\n" if extra else ""
    return (f"dn: uid={name},ou=people,{BASE}\nobjectClass: account\nobjectClass: posixAccount\n"
            f"{aux}uid: {name}\ncn: {name}\nuidNumber: {uid}\ngidNumber: {uid}\n"
            f"homeDirectory: /home/{name}\nloginShell: /bin/sh\n{extra}\n")


def write_ldif(path):
    text = (f"dn: {BASE}\nobjectClass: dcObject\nobjectClass: organization\no: Example\n"
            "dc: example\n\n"
            f"dn: ou=people,{BASE}\nobjectClass: organizationalUnit\nou: people\n\n")
    both = (f"testSubUidNumber: {DIR_START}\ntestSubUidCount: {DIR_COUNT}\n"
            f"testSubGidNumber: {DIR_START}\ntestSubGidCount: {DIR_COUNT}\n")
    text += user_ldif("lsub", USERS["lsub"], both)
    text += user_ldif("lalloc", USERS["lalloc"])
    text += user_ldif("lover", USERS["lover"],
                      "testSubUidNumber: 90000\ntestSubUidCount: 65536\n")
    text += user_ldif("lhalf", USERS["lhalf"], "testSubUidNumber: 4200000000\n")
    text += user_ldif("lmove", USERS["lmove"],
                      f"testSubUidNumber: {MOVE_BEFORE[0]}\ntestSubUidCount: {MOVE_BEFORE[1]}\n")
    path.write_text(text)


@pytest.fixture(scope="module")
def slapd():
    base = nsenv.make_private_dir("idc-subid-ldap-")
    ldif = base / "dir.ldif"
    write_ldif(ldif)
    s = Slapd(base, "s", ldif=ldif)
    old = os.environ.get("SLAPD_SCHEMAS")
    os.environ["SLAPD_SCHEMAS"] = str(LDAP_DIR / "subid.schema")
    try:
        s.start()
        yield s
    finally:
        if old is None:
            os.environ.pop("SLAPD_SCHEMAS", None)
        else:
            os.environ["SLAPD_SCHEMAS"] = old
        s.stop()
        nsenv.remove_tree(base)


@pytest.fixture(scope="module")
def plugin_dir(build_dir):
    path = build_dir / "src" / "subid"
    if not (path / "libsubid_idcache.so").exists():
        pytest.skip(f"{path}/libsubid_idcache.so was not built (no <shadow/subid.h>)")
    return path


@pytest.fixture(scope="module")
def daemon(module_daemons, slapd):
    conf = (f"\n[domain/dir]\nid_provider = ldap\nldap_uri = {slapd.uri}\n"
            f"ldap_search_base = {BASE}\nmax_id = 100000\nsubid_allocate = true\n"
            "ldap_user_subuid_number = testSubUidNumber\n"
            "ldap_user_subuid_count = testSubUidCount\n"
            "ldap_user_subgid_number = testSubGidNumber\n"
            "ldap_user_subgid_count = testSubGidCount\n")
    return module_daemons.start(
        FILES_PASSWD + SQUAT_LINE, FILES_GROUP,
        idcache_conf=(f"domains = local, dir\nsubid_base = {ALLOC_BASE}\n"
                      f"subid_size = {ALLOC_SIZE}\nsubid_uid_min = {UID_MIN}\n"
                      f"subid_uid_max = {UID_MAX}\n"),
        domain_conf=conf)


def nsswitch(work):
    path = Path(work) / "nsswitch.subid.conf"
    nsenv.write_atomic(path, "passwd: files idcache\ngroup: files idcache\nshadow: files\n"
                             "hosts: files\nsubid: idcache\n")
    return path


def getsubids(d, plugin_dir, *args):
    """getsubids ARGS in a namespace whose nsswitch.conf says `subid: idcache`."""
    conf = nsswitch(d.ns.work)
    argv = ["unshare", "-m", "--propagation", "private", "--", "sh", "-c", nsenv._WRAPPER,
            "nsenv", str(conf), "", "", "", "getsubids"] + list(args)
    env = d.ns.env({"LD_LIBRARY_PATH": f"{d.ns.module_dir}:{plugin_dir}"})
    p = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env)
    assert p.returncode != nsenv.HARNESS_FAILED, p.stderr
    return p


def ranges_of(p):
    """getsubids' lines "N: OWNER START COUNT" as [(owner, start, count)]."""
    out = []
    for line in p.stdout.splitlines():
        m = re.fullmatch(r"\d+: (\S+) (\d+) (\d+)", line.strip())
        assert m, f"unexpected getsubids line {line!r}"
        out.append((m.group(1), int(m.group(2)), int(m.group(3))))
    return out


@pytest.mark.parametrize("flag", [[], ["-g"]], ids=["uid", "gid"])
def test_getsubids(daemon, plugin_dir, flag):
    want = {
        "lsub": [("lsub", DIR_START, DIR_COUNT)],
        "lalloc": [("lalloc", alloc_start(USERS["lalloc"]), ALLOC_SIZE)],
        "floc": [("floc", alloc_start(5000), ALLOC_SIZE)],
    }
    for user, ranges in want.items():
        p = getsubids(daemon, plugin_dir, *flag, user)
        assert p.returncode == 0, p
        assert ranges_of(p) == ranges, (user, p.stdout, p.stderr)


def test_no_range_served(daemon, plugin_dir):
    """Users without a range to serve list none; an unknown user is an
    error; the refused and the malformed ranges are logged with the DN."""
    for user in ("fhigh", "lover", "lhalf"):
        p = getsubids(daemon, plugin_dir, user)
        assert ranges_of(p) == [], (user, p.stdout, p.stderr)
    p = getsubids(daemon, plugin_dir, "nosuchuser")
    assert p.returncode != 0 and p.stdout == "", p
    log = daemon.log()
    assert re.search(r"subordinate uid range 90000-155535 of user lover \(uid=lover,ou=people,"
                     r"dc=example,dc=com\) not served: ids in it may belong to dir", log), log
    assert "uid=lhalf,ou=people,dc=example,dc=com" in log and \
        "testSubUidNumber/testSubUidCount is not a subordinate uid range" in log, log


def test_files_id_inside_a_range(daemon, plugin_dir):
    """A files user's uid inside another's allocated range keeps that range
    from being served, until the files no longer hold it."""
    for flag in ([], ["-g"]):
        assert ranges_of(getsubids(daemon, plugin_dir, *flag, "fvictim")) == []
    assert "ids in it may belong to local" in daemon.log()
    nsenv.write_atomic(daemon.passwd, FILES_PASSWD)
    want = [("fvictim", alloc_start(6000), ALLOC_SIZE)]
    got, _ = nsenv.wait_for(lambda: ranges_of(getsubids(daemon, plugin_dir, "fvictim")) == want,
                            timeout=10, interval=0.2)
    assert got, daemon.log()[-2000:]


def test_user_info(daemon, plugin_dir, idcache):
    """`idcache user` says which range is served and why one is not."""
    for user in USERS:
        getsubids(daemon, plugin_dir, user)  # cached
    def info(name):
        p = subprocess.run([str(idcache), "user", "--run-dir", str(daemon.run_dir), name],
                           capture_output=True, text=True, timeout=30, check=True)
        return dict(x.split("=", 1) for x in p.stdout.splitlines() if "=" in x)
    assert info("lsub")["subuid"] == f"{DIR_START} {DIR_COUNT} (directory)"
    assert info("lalloc")["subgid"] == f"{alloc_start(USERS['lalloc'])} {ALLOC_SIZE} (allocation)"
    assert info("floc")["subuid"] == f"{alloc_start(5000)} {ALLOC_SIZE} (allocation)"
    assert info("fhigh")["subuid"] == "none"
    assert info("lover")["subuid"] == \
        "none (directory 90000 65536 refused: ids in it may belong to dir)"
    assert info("lover")["subgid"].startswith(f"{alloc_start(USERS['lover'])} ")
    assert info("lhalf")["subuid"] == "none (the directory's value is no range)"


def test_directory_change_reaches_the_range(daemon, plugin_dir, slapd, idcache):
    """A range changed in the directory is served once the cache has it
    (here: the entry expired, so the next lookup refreshes it)."""
    p = getsubids(daemon, plugin_dir, "lmove")
    assert ranges_of(p) == [("lmove",) + MOVE_BEFORE], p
    mod = (f"dn: uid=lmove,ou=people,{BASE}\nchangetype: modify\n"
           f"replace: testSubUidNumber\ntestSubUidNumber: {MOVE_AFTER[0]}\n-\n"
           f"replace: testSubUidCount\ntestSubUidCount: {MOVE_AFTER[1]}\n")
    subprocess.run(["ldapmodify", "-x", "-H", slapd.uri, "-D", f"cn=admin,{BASE}", "-w", "secret"],
                   input=mod, text=True, check=True, capture_output=True, timeout=30)
    subprocess.run([str(idcache), "expire", "--run-dir", str(daemon.run_dir), "--user", "lmove"],
                   check=True, capture_output=True, timeout=30)
    got, _ = nsenv.wait_for(lambda: ranges_of(getsubids(daemon, plugin_dir, "lmove")) ==
                            [("lmove",) + MOVE_AFTER], timeout=10, interval=0.2)
    assert got, ranges_of(getsubids(daemon, plugin_dir, "lmove"))


def test_daemon_down(daemon, plugin_dir, tmp_path):
    """A daemon that does not answer: getsubids fails cleanly (no crash)."""
    conf = nsswitch(tmp_path)
    argv = ["unshare", "-m", "--propagation", "private", "--", "sh", "-c", nsenv._WRAPPER,
            "nsenv", str(conf), "", "", "", "getsubids", "lsub"]
    env = daemon.ns.env({"LD_LIBRARY_PATH": f"{daemon.ns.module_dir}:{plugin_dir}",
                         "IDCACHE_RUNDIR": str(tmp_path)})
    p = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env)
    assert p.returncode not in (0, nsenv.HARNESS_FAILED) and p.returncode < 128, p
    assert p.stdout == ""


# ==== newuidmap / newgidmap, setuid root ===============================================

# Inside `unshare -m`: $1 work ($1/mod holds the two libraries), $2 real
# library dir, $3 nsswitch.conf, $4 the daemon's run_dir, $5 python3, $6 runner.
_SUID_NS = r'''
fail() { echo "subid-ns: $*" >&2; exit 125; }
work=$1 lib=$2 conf=$3 run=$4
mount -t overlay overlay -o "lowerdir=$work/mod:$lib" "$lib" || fail "overlayfs over $lib failed"
mount --bind "$conf" /etc/nsswitch.conf || fail "cannot bind $conf"
mount -t tmpfs -o mode=0755 tmpfs /run || fail "cannot mount a tmpfs on /run"
mkdir /run/idcache && mount --bind "$run" /run/idcache || fail "cannot bind $run on /run/idcache"
exec "$5" -c "$6"
'''

# For each case: a process of the user in a new user namespace (unshare -U,
# which execs sleep: the pid stays), then the tool run as the same user
# with the mapping asked; the map the kernel then shows.
_RUNNER = r'''
import json, os, subprocess, sys, time
out = []
for c in json.load(sys.stdin):
    who = ["setpriv", f"--reuid={c['uid']}", f"--regid={c['uid']}", "--clear-groups", "--"]
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"}
    child = subprocess.Popen(who + ["unshare", "-U", "sleep", "30"], env=env)
    mine = os.readlink("/proc/self/ns/user")
    for _ in range(500):
        try:
            if os.readlink(f"/proc/{child.pid}/ns/user") != mine:
                break
        except OSError:
            pass
        time.sleep(0.01)
    p = subprocess.run(who + [c["tool"], str(child.pid)] + [str(a) for a in c["map"]],
                       capture_output=True, text=True, timeout=60, env={**env, **c.get("env", {})})
    f = "uid_map" if c["tool"] == "newuidmap" else "gid_map"
    with open(f"/proc/{child.pid}/{f}") as m:
        shown = m.read()
    child.kill()
    child.wait()
    out.append({"name": c["name"], "rc": p.returncode, "err": p.stderr, "map": shown})
json.dump(out, sys.stdout)
'''


def run_map_cases(d, plugin_dir, cases):
    """Run the cases (see _RUNNER) in one namespace; {name: result}. Skips
    with the reason when that namespace cannot be built here."""
    with open("/proc/filesystems") as f:
        if not re.search(r"\boverlay$", f.read(), re.M):
            pytest.skip("overlayfs is not available (modprobe overlay): newuidmap is setuid "
                        "and finds the plugin only in the loader's default directories")
    for tool in ("newuidmap", "newgidmap", "unshare", "setpriv"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (Debian: uidmap, util-linux)")
    work = nsenv.make_private_dir("idc-subid-ns-")
    try:
        (work / "mod").mkdir()
        shutil.copy2(plugin_dir / "libsubid_idcache.so", work / "mod")
        shutil.copy2(d.ns.module_dir / "libnss_idcache.so.2", work / "mod")
        argv = ["unshare", "-m", "--propagation", "private", "--", "sh", "-c", _SUID_NS,
                "subid-ns", str(work), libc_dir(), str(nsswitch(work)), str(d.run_dir),
                nsenv.sys_python(), _RUNNER]
        p = subprocess.run(argv, input=json.dumps(cases), capture_output=True, text=True,
                           timeout=180, env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})
        if p.returncode == nsenv.HARNESS_FAILED and "subid-ns:" in p.stderr:
            pytest.skip(f"private namespace for the setuid tools unavailable: {p.stderr.strip()}")
        assert p.returncode == 0, f"runner failed: rc={p.returncode} {p.stderr}"
        return {r["name"]: r for r in json.loads(p.stdout)}
    finally:
        nsenv.remove_tree(work)


def map_lines(text):
    return [tuple(int(x) for x in line.split()) for line in text.strip().splitlines()]


def test_newuidmap_newgidmap(daemon, plugin_dir):
    lsub, floc = USERS["lsub"], 5000
    fa = alloc_start(floc)
    cases = [
        # The user's own uid, and its whole range from the directory.
        {"name": "ldap-uid", "tool": "newuidmap", "uid": lsub,
         "map": [0, lsub, 1, 1, DIR_START, DIR_COUNT]},
        {"name": "ldap-gid", "tool": "newgidmap", "uid": lsub,
         "map": [0, lsub, 1, 1, DIR_START, DIR_COUNT]},
        # One id below the range, one id past its end, and another's range.
        {"name": "ldap-below", "tool": "newuidmap", "uid": lsub,
         "map": [0, lsub, 1, 1, DIR_START - 1, 2]},
        {"name": "ldap-past", "tool": "newgidmap", "uid": lsub,
         "map": [0, lsub, 1, 1, DIR_START + DIR_COUNT - 1, 2]},
        {"name": "ldap-others", "tool": "newuidmap", "uid": lsub,
         "map": [0, lsub, 1, 1, fa, 10]},
        # An LDAP user with the allocation's range (its domain allocates).
        {"name": "ldap-alloc", "tool": "newuidmap", "uid": USERS["lalloc"],
         "map": [0, USERS["lalloc"], 1, 1, alloc_start(USERS["lalloc"]), ALLOC_SIZE]},
        # A files user with the allocation's range.
        {"name": "files-uid", "tool": "newuidmap", "uid": floc,
         "map": [0, floc, 1, 1, fa, ALLOC_SIZE]},
        {"name": "files-gid", "tool": "newgidmap", "uid": floc,
         "map": [0, floc, 1, 1, fa, ALLOC_SIZE]},
        {"name": "files-past", "tool": "newuidmap", "uid": floc,
         "map": [0, floc, 1, 1, fa + 1, ALLOC_SIZE]},
    ]
    got = run_map_cases(daemon, plugin_dir, cases)
    for name in ("ldap-uid", "ldap-gid"):
        r = got[name]
        assert r["rc"] == 0, r
        assert map_lines(r["map"]) == [(0, lsub, 1), (1, DIR_START, DIR_COUNT)], r
    for name in ("files-uid", "files-gid"):
        r = got[name]
        assert r["rc"] == 0, r
        assert map_lines(r["map"]) == [(0, floc, 1), (1, fa, ALLOC_SIZE)], r
    r = got["ldap-alloc"]
    assert r["rc"] == 0, r
    assert map_lines(r["map"]) == [(0, USERS["lalloc"], 1),
                                   (1, alloc_start(USERS["lalloc"]), ALLOC_SIZE)], r
    for name in ("ldap-below", "ldap-past", "ldap-others", "files-past"):
        r = got[name]
        assert r["rc"] != 0 and "not allowed" in r["err"], r
        assert r["map"].strip() == "", r


# ==== owners (subid_get_uid_owners / _gid_owners), and a hostile daemon ==========

_OWNERS = r'''
import ctypes, json, sys
lib = ctypes.CDLL("libsubid.so.4")
libc = ctypes.CDLL("libc.so.6")
out = {}
for kind in ("uid", "gid"):
    fn = getattr(lib, f"subid_get_{kind}_owners")
    fn.argtypes = [ctypes.c_uint, ctypes.POINTER(ctypes.POINTER(ctypes.c_uint))]
    for i in json.loads(sys.argv[1]):
        p = ctypes.POINTER(ctypes.c_uint)()
        n = fn(i, ctypes.byref(p))
        out[f"{kind} {i}"] = sorted(p[k] for k in range(n)) if n >= 0 else n
        libc.free(p)
json.dump(out, sys.stdout)
'''


def in_subid_ns(d, plugin_dir, argv, env=None):
    conf = nsswitch(d.ns.work)
    full = ["unshare", "-m", "--propagation", "private", "--", "sh", "-c", nsenv._WRAPPER,
            "nsenv", str(conf), "", "", ""] + [str(a) for a in argv]
    e = d.ns.env({"LD_LIBRARY_PATH": f"{d.ns.module_dir}:{plugin_dir}", **(env or {})})
    p = subprocess.run(full, capture_output=True, text=True, timeout=60, env=e)
    assert p.returncode != nsenv.HARNESS_FAILED, p.stderr
    return p


def test_owners(daemon, plugin_dir):
    """Who owns an id: the allocation inverted (the uid's user, when its
    domain allocates and it has no range of its own), and the cached users
    whose directory range holds it."""
    for user in ("lsub", "lalloc"):  # cached, as a lookup leaves them
        assert getsubids(daemon, plugin_dir, user).returncode == 0
    want = {
        DIR_START + 5: [USERS["lsub"]],
        DIR_START + DIR_COUNT: [],
        alloc_start(USERS["lalloc"]) + 7: [USERS["lalloc"]],
        alloc_start(5000): [5000],
        alloc_start(5000) + ALLOC_SIZE - 1: [5000],
        alloc_start(USERS["lsub"]): [],     # its own range replaces the allocation's
        alloc_start(40000): [],             # fhigh: above subid_uid_max, nobody's slot
        90000: [],                          # lover's refused range
        5000: [],
    }
    p = in_subid_ns(daemon, plugin_dir, [nsenv.sys_python(), "-c", _OWNERS,
                                         json.dumps(list(want))])
    assert p.returncode == 0, p
    got = json.loads(p.stdout)
    for kind in ("uid", "gid"):
        for i, owners in want.items():
            assert got[f"{kind} {i}"] == owners, (kind, i, got)


def fake_daemon(path, reply):
    """A server on path answering each connection's HELLO properly and its
    next request with reply(cmd) (raw bytes), then closing. Returns the
    thread's stop function."""
    import socket
    import struct
    import threading
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(str(path))
    os.chmod(path, 0o666)
    srv.listen(16)
    srv.settimeout(0.2)
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            try:
                c, _ = srv.accept()
            except OSError:
                continue
            with c:
                c.settimeout(5)
                try:
                    data = b""
                    while len(data) < 20:
                        data += c.recv(4096)
                    c.sendall(struct.pack("<IIIII", 20, 1, 0, 0, 1))
                    data = data[20:]
                    while len(data) < 16:
                        data += c.recv(4096)
                    cmd = struct.unpack("<I", data[4:8])[0]
                    c.sendall(reply(cmd))
                except OSError:
                    pass
    t = threading.Thread(target=serve, daemon=True)
    t.start()

    def close():
        stop.set()
        t.join(5)
        srv.close()
    return close


def test_hostile_daemon(daemon, plugin_dir, tmp_path):
    """Whatever a daemon answers, getsubids and the owners lookup end with
    a status (no crash, no signal, nothing listed that was not a range)."""
    import struct

    def frame(cmd, status, payload):
        return struct.pack("<IIII", 16 + len(payload), cmd, status, 0) + payload

    replies = {
        "garbage": lambda cmd: b"\xff" * 64,
        "short": lambda cmd: frame(cmd, 0, b"")[:10],
        "empty-ok": lambda cmd: frame(cmd, 0, b""),
        "huge-count": lambda cmd: frame(cmd, 0, struct.pack("<II", 1, 0xffffffff)),
        "wrapping-range": lambda cmd: frame(cmd, 0, struct.pack("<IIII", 1, 1, 0xfffffff0, 64)),
        "zero-count": lambda cmd: frame(cmd, 0, struct.pack("<IIII", 1, 1, 5, 0)),
        "wrong-command": lambda cmd: frame(cmd + 1, 0, struct.pack("<II", 1, 0)),
        "too-big": lambda cmd: frame(cmd, 0, struct.pack("<II", 1, 600) + b"\x01" * 4800),
        "error": lambda cmd: frame(cmd, 4, b""),
        "bad-owners": lambda cmd: frame(cmd, 0, struct.pack("<III", 5, 1, 2)),
    }
    for name, reply in replies.items():
        run = tmp_path / name
        run.mkdir()
        os.chmod(run, 0o755)
        close = fake_daemon(run / "nss.sock", reply)
        try:
            env = {"IDCACHE_RUNDIR": str(run)}
            p = in_subid_ns(daemon, plugin_dir, ["getsubids", "lsub"], env)
            assert 0 < p.returncode < 128 and p.stdout == "", (name, p)
            p = in_subid_ns(daemon, plugin_dir, [nsenv.sys_python(), "-c", _OWNERS, "[7]"], env)
            assert p.returncode == 0, (name, p)
            assert json.loads(p.stdout) == {"uid 7": -1, "gid 7": -1}, (name, p.stdout)
        finally:
            close()


@pytest.mark.skipif(nsenv.VALGRIND is None, reason="valgrind not installed")
def test_daemon_subids_under_valgrind(idcached_bin, nss_module_dir, as_root):
    """The daemon's side under valgrind: ranges, owners, unknown users, a
    kind that is none, a name that is none; no invalid access, no leak."""
    import struct
    import sys as _sys
    _sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "load"))
    import idcproto as P
    base = nsenv.make_private_dir("idc-subid-vg-")
    ns = nsenv.NsEnv(nss_module_dir, base / "run", base / "ns")
    wrap, vglog = nsenv.valgrind_wrap(ns, base)
    d = nsenv.Daemon(idcached_bin, base, FILES_PASSWD, FILES_GROUP, wrap=wrap)
    ok = False
    try:
        d.start(timeout=120)
        c = P.Client(d.run_dir / "nss.sock", timeout=60)
        for kind in (1, 2):
            _, st, p = c.call_raw(P.frame(P.SUBIDS, struct.pack("=I", kind) + P.pstr("floc")))
            assert st == P.OK and struct.unpack("=IIII", p) == \
                (5000, 1, 2147483648 + 4000 * 65536, 65536), p
            _, st, p = c.call_raw(P.frame(P.SUBIDS, struct.pack("=I", kind) + P.pstr("fhigh")))
            assert st == P.OK and struct.unpack("=II", p) == (40000, 0)
            _, st, _ = c.call_raw(P.frame(P.SUBIDS, struct.pack("=I", kind) + P.pstr("nosuch")))
            assert st == P.NOTFOUND
            _, st, p = c.call_raw(P.frame(P.SUBID_OWNERS, struct.pack("=II", kind, 2147483648 + 4000 * 65536)))
            assert st == P.OK and struct.unpack("=II", p) == (1, 5000)
        _, st, _ = c.call_raw(P.frame(P.SUBIDS, struct.pack("=I", 3) + P.pstr("floc")))
        assert st == P.BADREQ
        c.close()
        c = P.Client(d.run_dir / "nss.sock", timeout=60)
        _, st, _ = c.call_raw(P.frame(P.SUBIDS, struct.pack("=I", 1) + P.pstr("bad:name")))
        assert st == P.NOTFOUND
        c.close()
        nsenv.stop_checked_by_valgrind(d, vglog)
        ok = True
    finally:
        nsenv.end_checked_run(d, base, ok)


def test_setuid_tools_ignore_idcache_rundir(daemon, plugin_dir, tmp_path):
    """A user cannot point setuid newuidmap at a daemon of their own: with
    IDCACHE_RUNDIR naming one that grants every id to everyone (getsubids,
    not setuid, shows it), newuidmap still asks /run/idcache and refuses
    to map root."""
    import struct

    def grant_all(cmd):
        body = struct.pack("<IIII", USERS["lsub"], 1, 0, 0xffffffff)
        return struct.pack("<IIII", 16 + len(body), cmd, 0, 0) + body
    run = tmp_path / "evil"
    run.mkdir()
    os.chmod(tmp_path, 0o755)
    os.chmod(run, 0o755)
    close = fake_daemon(run / "nss.sock", grant_all)
    try:
        p = in_subid_ns(daemon, plugin_dir, ["getsubids", "lsub"], {"IDCACHE_RUNDIR": str(run)})
        assert ranges_of(p) == [("lsub", 0, 0xffffffff)], p
        lsub = USERS["lsub"]
        got = run_map_cases(daemon, plugin_dir, [
            {"name": "root", "tool": "newuidmap", "uid": lsub, "map": [0, 0, 1],
             "env": {"IDCACHE_RUNDIR": str(run)}},
            {"name": "own", "tool": "newuidmap", "uid": lsub,
             "map": [0, lsub, 1, 1, DIR_START, DIR_COUNT], "env": {"IDCACHE_RUNDIR": str(run)}},
        ])
    finally:
        close()
    assert got["root"]["rc"] != 0 and "not allowed" in got["root"]["err"], got["root"]
    assert got["root"]["map"].strip() == "", got["root"]
    assert got["own"]["rc"] == 0, got["own"]  # the real daemon answered


# ==== a name two identities answer by =============================================

def test_newuidmap_maps_only_the_callers_own_ranges(daemons, plugin_dir):
    """Two files domains: local's alice is uid 2001, b's alice uid 9999.
    newuidmap run by uid 9999 asks the ranges of its own name, alice, which
    getpwnam answers with uid 2001: 2001's range is not 9999's to map.
    uid 2001 maps its own."""
    d = daemons.start("alice:x:2001:2001::/home/alice:/bin/sh\n", "alice:x:2001:\n",
                      idcache_conf="domains = local, b\n", start=False)
    p, g = d.base / "b.passwd", d.base / "b.group"
    nsenv.write_atomic(p, "alice:x:9999:9999::/b/alice:/bin/sh\n")
    nsenv.write_atomic(g, "balice:x:9999:\n")
    with open(d.conf, "a") as f:
        f.write(f"\n[domain/b]\nid_provider = files\npasswd_files = {p}\ngroup_files = {g}\n")
    d.start()
    a = alloc_start(2001)
    got = run_map_cases(d, plugin_dir, [
        {"name": "other", "tool": "newuidmap", "uid": 9999, "map": [0, 9999, 1, 1, a, 10]},
        {"name": "other-gid", "tool": "newgidmap", "uid": 9999, "map": [0, 9999, 1, 1, a, 10]},
        {"name": "own", "tool": "newuidmap", "uid": 2001, "map": [0, 2001, 1, 1, a, 10]},
    ])
    for name in ("other", "other-gid"):
        r = got[name]
        assert r["rc"] != 0 and "not allowed" in r["err"], r
        assert r["map"].strip() == "", r
    r = got["own"]
    assert r["rc"] == 0, r
    assert map_lines(r["map"]) == [(0, 2001, 1), (1, a, 10)], r
