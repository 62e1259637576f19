"""Privileges and trust boundaries of the NSS module and the daemon
(docs/SECURITY.md, sections 3 and 7).

1. secure_getenv in a real setuid program: with AT_SECURE set, the module
   ignores IDCACHE_RUNDIR and IDCACHE_MEMCACHE. LD_LIBRARY_PATH does not
   reach a setuid program, so inside a private mount namespace an overlay
   (lower layers: a directory holding the built module, then the real
   library directory) is mounted over the real library directory; the host
   never sees it. /run is a fresh tmpfs there, so the default
   /run/idcache is either empty or a bind mount of a test daemon's run_dir.
2. No descriptor the module opens survives exec (socket and memory-cache
   files alike), even with enumerations left open.
3. The daemon's privilege drop, read from /proc/PID/status, and the owners
   and modes of what it creates.
4. Name rules through the NSS module, the files provider and the admin CLI.

The helper programs (tests/hard/*.c) are compiled here with the system cc.
Everything needs root (namespaces, setuid, chown); each test skips with the
reason when a tool or overlayfs is missing.
"""
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

import nsenv

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "load"))
import idcproto as P  # noqa: E402

pytestmark = pytest.mark.usefixtures("as_root")

HARD = Path(__file__).resolve().parents[1] / "hard"
NOBODY = 65534

# Test identities: names and ids no real system file uses.
DEFAULT_USER, DEFAULT_UID = "idcprivdefault", 70001   # served at the default run_dir
OVERRIDE_USER, OVERRIDE_UID = "idcprivoverride", 70002  # served only at IDCACHE_RUNDIR


def need_tools(*tools):
    for t in tools:
        if shutil.which(t) is None:
            pytest.skip(f"{t} is not installed")


@pytest.fixture(scope="module")
def probes():
    """Compiled helpers in a 0755 directory under /tmp: {name: path}."""
    need_tools("cc")
    out = nsenv.make_private_dir("idc-privs-bin-")
    bins = {}
    try:
        for name in ("nss_probe", "fd_probe"):
            exe = out / name
            p = subprocess.run(["cc", "-std=c11", "-O2", "-Wall", "-Wextra", "-Werror",
                                "-o", str(exe), str(HARD / f"{name}.c")],
                               capture_output=True, text=True, timeout=120)
            if p.returncode != 0:
                pytest.fail(f"cc {name}.c failed:\n{p.stderr}")
            os.chmod(exe, 0o755)
            bins[name] = exe
        yield bins
    finally:
        nsenv.remove_tree(out)


def status(idcache, d):
    """`idcache status` of daemon d as a {key: value} dict."""
    p = subprocess.run([str(idcache), "status", "--run-dir", str(d.run_dir)],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    return dict(line.split("=", 1) for line in p.stdout.splitlines() if "=" in line)


# Request counters of lookups (what an NSS client can cost the daemon).
LOOKUP_REQUESTS = ("getpwnam", "getpwuid", "getgrnam", "getgrgid", "initgroups", "setpwent",
                   "getpwent", "endpwent", "setgrent", "getgrent", "endgrent")


def requests(idcache, d):
    return {k[len("requests."):]: int(v) for k, v in status(idcache, d).items()
            if k.startswith("requests.")}


# ==== 1. secure_getenv in a setuid program ========================================

def libc_dir():
    """The real directory this system's libc.so.6 was loaded from: one of
    the default directories the dynamic loader searches for a setuid
    program."""
    with open("/proc/self/maps") as f:
        for line in f:
            path = line.split()[-1]
            if re.search(r"/libc\.so\.6$", path) or re.search(r"/libc-[\d.]+\.so$", path):
                return os.path.dirname(os.path.realpath(path))
    pytest.skip("cannot find the directory of libc.so.6 in /proc/self/maps")


# Runs inside `unshare -m`: mounts, then a Python runner executes the cases
# given as JSON on stdin and prints their results as JSON.
#   $1 work dir ($1/mod holds libnss_idcache.so.2, $1/nss_probe the helper)
#   $2 real library dir   $3 nsswitch.conf   $4 run_dir to show as /run/idcache or ""
#   $5 python3   $6 the runner script
_SUID_NS = r'''
fail() { echo "privs-ns: $*" >&2; exit 125; }
work=$1 lib=$2 conf=$3 default_run=$4
mount -t overlay overlay -o "lowerdir=$work/mod:$lib" "$lib" \
    || fail "overlayfs over $lib failed"
mount --bind "$conf" /etc/nsswitch.conf || fail "cannot bind $conf"
mount -t tmpfs -o mode=0755 tmpfs /run || fail "cannot mount a tmpfs on /run"
if [ -n "$default_run" ]; then
    mkdir /run/idcache && mount --bind "$default_run" /run/idcache \
        || fail "cannot bind $default_run on /run/idcache"
fi
# A tmpfs of our own: never nosuid, whatever /tmp is mounted with.
mkdir -p "$work/bin" && mount -t tmpfs -o mode=0755 tmpfs "$work/bin" \
    || fail "cannot mount a tmpfs on $work/bin"
cp "$work/nss_probe" "$work/bin/suid" && chown 0:0 "$work/bin/suid" \
    && chmod 4755 "$work/bin/suid" || fail "cannot install the setuid copy"
cp "$work/nss_probe" "$work/bin/plain" && chmod 0755 "$work/bin/plain" \
    || fail "cannot install the plain copy"
exec "$5" -c "$6"
'''

_SUID_RUNNER = r'''
import json, subprocess, sys, time
out = []
for case in json.load(sys.stdin):
    # setpriv resolves its arguments through NSS: it gets no IDCACHE_*
    # variable; env(1), run as nobody, hands them to the probe.
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"}
    argv = (["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--",
             "/usr/bin/env", "-i"] + [f"{k}={v}" for k, v in env.items()]
            + [f"{k}={v}" for k, v in case["env"].items()] + [case["prog"]] + case["names"])
    t0 = time.monotonic()
    p = subprocess.run(argv, capture_output=True, env=env, timeout=60)
    out.append({"name": case["name"], "rc": p.returncode,
                "out": p.stdout.decode("utf-8", "backslashreplace"),
                "err": p.stderr.decode("utf-8", "backslashreplace"),
                "seconds": time.monotonic() - t0})
json.dump(out, sys.stdout)
'''


def parse_probe(text):
    """nss_probe's output as a dict: secure, ruid, euid, env_rundir,
    env_memcache, users {name: ("found", uid) | ("missing",)}, mc_maps, mc
    (mapped paths)."""
    r = {"users": {}, "mc": []}
    for line in text.splitlines():
        if line.startswith("secure="):
            for kv in line.split():
                k, v = kv.split("=")
                r[k] = int(v)
        elif line.startswith("env_"):
            k, v = line.split("=", 1)
            r[k] = v
        elif line.startswith("user "):
            f = line.split(" ")
            r["users"][f[1]] = ("found", int(f[3])) if f[2] == "found" else ("missing",)
        elif line.startswith("mc_maps="):
            r["mc_maps"] = int(line.split("=")[1])
        elif line.startswith("mc_map "):
            r["mc"].append(line[len("mc_map "):])
    return r


def run_suid_cases(probes, nss_module_dir, ns, default_run, cases):
    """Run the cases in one private namespace (see _SUID_NS); returns
    {case name: parsed probe output}. Skips when the namespace cannot be
    built (overlayfs, tmpfs or unshare refused)."""
    need_tools("unshare", "setpriv", "mount")
    with open("/proc/filesystems") as f:
        if not re.search(r"\boverlay$", f.read(), re.M):
            pytest.skip("overlayfs is not available (modprobe overlay)")
    lib = libc_dir()
    work = nsenv.make_private_dir("idc-privs-ns-")
    try:
        (work / "mod").mkdir()
        shutil.copy2(nss_module_dir / "libnss_idcache.so.2", work / "mod")
        shutil.copy2(probes["nss_probe"], work / "nss_probe")
        conf = ns.nsswitch("idcache files")
        argv = ["unshare", "-m", "--propagation", "private", "--", "sh", "-c", _SUID_NS,
                "privs-ns", str(work), lib, str(conf), str(default_run or ""),
                nsenv.sys_python(), _SUID_RUNNER]
        for c in cases:
            c["prog"] = str(work / "bin" / c["prog"])
        p = subprocess.run(argv, input=json.dumps(cases), capture_output=True, text=True,
                           timeout=120, env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})
        if p.returncode == nsenv.HARNESS_FAILED and "privs-ns:" in p.stderr:
            pytest.skip(f"private namespace for the setuid test unavailable: {p.stderr.strip()}")
        assert p.returncode == 0, f"namespace runner failed: rc={p.returncode} {p.stderr}"
        res = {}
        for r in json.loads(p.stdout):
            assert r["rc"] == 0, f"case {r['name']}: {r}"
            parsed = parse_probe(r["out"])
            parsed["seconds"] = r["seconds"]
            parsed["raw"] = r["out"]
            res[r["name"]] = parsed
        return res
    finally:
        nsenv.remove_tree(work)


def one_user(name, uid):
    return f"{name}:x:{uid}:{uid}:{name} gecos:/home/{name}:/bin/sh\n"


def test_setuid_ignores_rundir_and_memcache_overrides(probes, daemons, nss_module_dir):
    """A setuid-root program run by nobody (AT_SECURE=1) with
    IDCACHE_RUNDIR pointing at daemon B: it answers from the default
    /run/idcache (daemon A bound there), never from B; IDCACHE_MEMCACHE=no
    is ignored (the memory cache still gets mapped). The same program
    without the setuid bit (AT_SECURE=0) follows both variables."""
    a = daemons.start(one_user(DEFAULT_USER, DEFAULT_UID), "")
    b = daemons.start(one_user(OVERRIDE_USER, OVERRIDE_UID), "")
    names = [OVERRIDE_USER, DEFAULT_USER]
    over = {"IDCACHE_RUNDIR": str(b.run_dir)}
    cases = [
        {"name": "suid_override", "prog": "suid", "env": over, "names": names},
        {"name": "plain_override", "prog": "plain", "env": over, "names": names},
        {"name": "suid_mc_no", "prog": "suid", "env": {"IDCACHE_MEMCACHE": "no"},
         "names": [DEFAULT_USER]},
        {"name": "plain_mc_no", "prog": "plain", "env": {"IDCACHE_MEMCACHE": "no"},
         "names": [DEFAULT_USER]},
        {"name": "plain_mc_default", "prog": "plain", "env": {}, "names": [DEFAULT_USER]},
    ]
    res = run_suid_cases(probes, nss_module_dir, a.ns, a.run_dir, cases)
    for name, r in res.items():
        print(f"--- {name} ({r['seconds']:.3f}s)\n{r['raw']}")

    s = res["suid_override"]
    assert (s["secure"], s["ruid"], s["euid"]) == (1, NOBODY, 0), \
        f"the setuid copy did not run with AT_SECURE=1 as nobody→root: {s['raw']}"
    assert s["env_rundir"] == str(b.run_dir), \
        f"IDCACHE_RUNDIR was not even in the environment: {s['raw']}"
    assert s["users"][DEFAULT_USER] == ("found", DEFAULT_UID), \
        f"setuid program did not reach the default /run/idcache daemon: {s['raw']}"
    assert s["users"][OVERRIDE_USER] == ("missing",), \
        f"setuid program followed IDCACHE_RUNDIR: {s['raw']}"
    # The maps come over the socket too (MCMAP), so they are daemon A's.
    assert s["mc_maps"] >= 1 and all(p.startswith("/memfd:idcache-") for p in s["mc"]), \
        s["raw"]

    p = res["plain_override"]
    assert (p["secure"], p["ruid"], p["euid"]) == (0, NOBODY, NOBODY), p["raw"]
    assert p["users"][OVERRIDE_USER] == ("found", OVERRIDE_UID), \
        f"plain program did not follow IDCACHE_RUNDIR (test harness broken?): {p['raw']}"
    assert p["users"][DEFAULT_USER] == ("missing",), p["raw"]

    # IDCACHE_MEMCACHE=no: honoured without AT_SECURE, ignored with it.
    ctl = res["plain_mc_default"]
    assert ctl["users"][DEFAULT_USER] == ("found", DEFAULT_UID), ctl["raw"]
    assert ctl["mc_maps"] >= 1, \
        f"memory cache not mapped even by default, the IDCACHE_MEMCACHE checks prove nothing: " \
        f"{ctl['raw']}"
    no = res["plain_mc_no"]
    assert no["secure"] == 0 and no["users"][DEFAULT_USER] == ("found", DEFAULT_UID), no["raw"]
    assert no["mc_maps"] == 0, f"IDCACHE_MEMCACHE=no not honoured: {no['raw']}"
    sno = res["suid_mc_no"]
    assert sno["secure"] == 1 and sno["users"][DEFAULT_USER] == ("found", DEFAULT_UID), \
        sno["raw"]
    assert sno["mc_maps"] >= 1, \
        f"setuid program honoured IDCACHE_MEMCACHE=no (getenv, not secure_getenv): {sno['raw']}"


def test_setuid_with_no_default_daemon_falls_back_to_files(probes, daemons, nss_module_dir,
                                                          idcache):
    """No daemon at the default run_dir (/run/idcache absent): the setuid
    program, pointed at a live daemon through IDCACHE_RUNDIR, gets UNAVAIL
    from the module quickly and its answer from `files`; the plain one
    reaches the daemon."""
    b = daemons.start(one_user(OVERRIDE_USER, OVERRIDE_UID), "")
    over = {"IDCACHE_RUNDIR": str(b.run_dir)}
    names = [OVERRIDE_USER, "root"]
    before = requests_total(idcache, b)
    res = run_suid_cases(probes, nss_module_dir, b.ns, None, [
        {"name": "suid", "prog": "suid", "env": over, "names": names},
    ])
    after_suid = requests_total(idcache, b)
    res.update(run_suid_cases(probes, nss_module_dir, b.ns, None, [
        {"name": "plain", "prog": "plain", "env": dict(over, IDCACHE_MEMCACHE="no"),
         "names": names},
    ]))
    after_plain = requests_total(idcache, b)
    for name, r in res.items():
        print(f"--- {name} ({r['seconds']:.3f}s)\n{r['raw']}")
    s = res["suid"]
    assert s["secure"] == 1 and s["euid"] == 0 and s["ruid"] == NOBODY, s["raw"]
    assert s["users"][OVERRIDE_USER] == ("missing",), s["raw"]
    assert s["users"]["root"] == ("found", 0), f"files fallback did not answer: {s['raw']}"
    assert s["mc_maps"] == 0, s["raw"]
    assert s["seconds"] < 5, f"setuid lookups took {s['seconds']:.1f}s with no daemon"
    assert after_suid == before, \
        f"daemon B was asked by the setuid program: requests {before} -> {after_suid}"
    p = res["plain"]
    assert p["secure"] == 0 and p["users"][OVERRIDE_USER] == ("found", OVERRIDE_UID), p["raw"]
    assert after_plain > after_suid, "the plain program's lookups did not reach daemon B"


def requests_total(idcache, d):
    """Sum of the NSS lookup request counters of daemon d (admin requests,
    STATUS itself included, are not counted)."""
    return sum(v for k, v in requests(idcache, d).items() if k in LOOKUP_REQUESTS)


# ==== 2. no descriptor survives exec ==============================================

FD_USERS = "".join(one_user(f"fdu{i}", 71000 + i) for i in range(40))
FD_GROUPS = "".join(f"fdg{k}:x:{72000 + k}:" + ",".join(f"fdu{i}" for i in range(k, 40, 3))
                    + "\n" for k in range(12))


def parse_fd_probe(text):
    r = {"start": {}, "before": {}, "after": {}, "lookups": {}, "end": False}
    for line in text.splitlines():
        f = line.split(" ", 2)
        if f[0] in ("start", "before", "after") and len(f) == 3:
            r[f[0]][int(f[1])] = f[2]
        elif f[0] == "lookups":
            r["lookups"] = dict(kv.split("=") for kv in line.split()[1:])
        elif line.startswith("mc_maps="):
            r["mc_maps"] = int(line.split("=")[1])
        elif line == "end":
            r["end"] = True
    return r


@pytest.mark.parametrize("as_uid", [None, NOBODY], ids=["root", "nobody"])
def test_no_descriptor_survives_exec(probes, daemons, as_uid):
    """Lookups of every kind plus two enumerations left open, then exec: the
    new image holds no descriptor it did not inherit (no socket, no
    memory-cache file)."""
    d = daemons.start(FD_USERS, FD_GROUPS)
    r = d.ns.run([probes["fd_probe"], "fdu4", "fdg1"], as_uid=as_uid, timeout=60)
    print(r.out, r.err)
    assert r.rc == 0, r
    p = parse_fd_probe(r.out)
    assert p["end"], f"the exec'd image did not finish: {r!r}"
    failed = {k: v for k, v in p["lookups"].items() if v == "FAILED"}
    assert not failed and p["lookups"], f"lookups failed, nothing was tested: {r.out}"
    sockets = [t for t in p["before"].values() if t.startswith("socket:")]
    assert len(sockets) >= 2, \
        f"the open enumerations should hold two sockets before exec: {p['before']}"
    assert p["mc_maps"] >= 1, f"memory cache not mapped, mc descriptors untested: {r.out}"
    leaked = {fd: t for fd, t in p["after"].items() if fd not in p["start"]}
    assert not leaked, f"descriptors survived exec (not CLOEXEC): {leaked}; " \
                       f"held before exec: {p['before']}"


# ==== 3. the daemon's privilege drop ==============================================

def proc_status(pid):
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            out[k] = v.split()
    return out


def daemon_groups(d):
    """Supplementary groups the daemon's user should have: its primary gid
    plus every group of the daemon's namespace copy of /etc/group listing
    it as a member."""
    gids = {nsenv.DAEMON_UID}
    for line in (d.base / "sys" / "group").read_text(errors="replace").splitlines():
        f = line.split(":")
        if len(f) >= 4 and nsenv.DAEMON_USER in f[3].split(","):
            gids.add(int(f[2]))
    return gids


def test_privilege_drop(daemons):
    d = daemons.start(one_user("privuser", 73001), "privgrp:x:73001:privuser\n")
    pid = d.proc.pid
    assert os.path.basename(os.readlink(f"/proc/{pid}/exe")) == "idcached", \
        "the fixture's pid is not idcached itself"
    st = proc_status(pid)
    print({k: st[k] for k in ("Uid", "Gid", "Groups", "CapInh", "CapPrm", "CapEff", "CapAmb",
                              "NoNewPrivs") if k in st})
    uid = nsenv.DAEMON_UID
    assert st["Uid"] == [str(uid)] * 4, f"Uid (real, effective, saved, fs): {st['Uid']}"
    assert st["Gid"] == [str(uid)] * 4, f"Gid (real, effective, saved, fs): {st['Gid']}"
    groups = {int(g) for g in st["Groups"]}
    assert 0 not in groups, f"root's group kept: {st['Groups']}"
    assert groups == daemon_groups(d), f"Groups: {st['Groups']}"
    for cap in ("CapEff", "CapPrm", "CapAmb"):
        if cap in st:
            assert int(st[cap][0], 16) == 0, f"{cap} = {st[cap][0]}"

    def owned(path, mode=None, kind=None):
        s = os.lstat(path)
        assert s.st_uid == uid and s.st_gid == uid, \
            f"{path} owned by {s.st_uid}:{s.st_gid}, not idcache"
        if kind is not None:
            assert kind(s.st_mode), f"{path}: wrong file type {oct(s.st_mode)}"
        if mode is not None:
            assert stat.S_IMODE(s.st_mode) == mode, \
                f"{path}: mode {oct(stat.S_IMODE(s.st_mode))}, want {oct(mode)}"
        return s

    owned(d.run_dir, 0o755, stat.S_ISDIR)
    owned(d.state_dir, 0o700, stat.S_ISDIR)  # state is the daemon's alone
    owned(d.run_dir / "nss.sock", 0o666, stat.S_ISSOCK)
    owned(d.run_dir / "admin.sock", 0o600, stat.S_ISSOCK)
    state_files = [Path(root) / n for root, dirs, files in os.walk(d.state_dir)
                   for n in dirs + files]
    assert any(p.name == "cache.mdb" for p in state_files), state_files
    for p in state_files:
        owned(p, 0o700 if p.is_dir() else 0o600)
    # The memory-cache maps are sealed memfds handed over the socket: no
    # file under run_dir for anyone to write, truncate or replace.
    assert not (d.run_dir / "mc").exists(), sorted(os.listdir(d.run_dir))
    # And the process really cannot get root back: it answers, as idcache.
    r = d.ns.run(["getent", "passwd", "privuser"])
    assert r.rc == 0 and r.out.startswith("privuser:"), r


# ==== 4. name rules ===============================================================

LONG = "n" * 256
# Refused by the module's own pre-check (idc_nss_name_ok): never sent.
MODULE_REFUSED = ["", "a\nb", "a\tb", "a\x01b", "a\x1bb", "a\x7fb", LONG, "a:b", "bob:x"]
# Passed by the module, refused by the daemon (cache_name_valid): NOTFOUND.
# '+'/'-' first: names glibc's files module never matches by name.
DAEMON_REFUSED = ["a/b", "bob/", "/bob", "+bob", "-bob", "a,b", ".", "..", " bob"]

NAME_USERS = one_user("bob", 74001) + one_user("alice", 74002)
NAME_GROUPS = "bobs:x:74100:bob,alice\n"


def _visible(name):
    return repr(name) if len(name) < 40 else f"'{name[:8]}...' ({len(name)} bytes)"


def test_nss_module_refuses_bad_names(daemons, idcache):
    """getent passwd/group and getgrouplist with every bad name: not found
    (exit 2), quickly; names the module pre-checks never reach the daemon.
    The rest are refused by the daemon's cache_name_valid."""
    d = daemons.start(NAME_USERS, NAME_GROUPS)
    calls = []
    for n in MODULE_REFUSED + DAEMON_REFUSED:
        calls += [["getent", "passwd", "--", n], ["getent", "group", "--", n]]
    groupl = ("import os, sys, json\n"
              "print(json.dumps([os.getgrouplist(n, 4242) for n in json.loads(sys.argv[1])]))")

    before = requests(idcache, d)
    t0 = time.monotonic()
    res = d.ns.run_many(calls[:len(MODULE_REFUSED) * 2])
    gl = d.ns.run([nsenv.sys_python(), "-c", groupl, json.dumps(MODULE_REFUSED)])
    seconds = time.monotonic() - t0
    mid = requests(idcache, d)
    res += d.ns.run_many(calls[len(MODULE_REFUSED) * 2:])
    gl2 = d.ns.run([nsenv.sys_python(), "-c", groupl, json.dumps(DAEMON_REFUSED)])
    after = requests(idcache, d)

    bad = [(r.argv[1], _visible(r.argv[3]), r.rc, r.out) for r in res
           if r.rc != 2 or r.out]
    assert not bad, f"bad names answered (want exit 2, no output): {bad}"
    for r in (gl, gl2):
        assert r.rc == 0, r
        assert all(x == [4242] for x in json.loads(r.out)), \
            f"getgrouplist of a bad name returned groups: {r.out}"
    assert seconds < 20, f"{len(MODULE_REFUSED) * 3} refused lookups took {seconds:.1f}s"
    grew = {k: (before[k], mid[k]) for k in before
            if k in ("getpwnam", "getgrnam", "initgroups") and mid[k] != before[k]}
    assert not grew, f"names the module refuses reached the daemon: {grew}"
    # Informational: which of the daemon-refused names cost a round trip.
    print("daemon-refused names, request counters:",
          {k: (mid[k], after[k]) for k in ("getpwnam", "getgrnam", "initgroups")})
    # The names that do exist still resolve (the checks refuse only bad ones).
    r = d.ns.run(["getent", "passwd", "bob"])
    assert r.rc == 0 and r.out.startswith("bob:x:74001:"), r


def test_files_provider_skips_bad_names_with_file_line(daemons):
    """Bad names in passwd and group files: each line skipped and logged
    with FILE:LINE; the good lines around them served; bad members
    dropped from a group, also logged."""
    bad_users = [("a/b", 75002), ("ctl\x01x", 75003), (LONG, 75004), ("", 75005),
                 (".", 75006), ("..", 75007), ("a,b", 75008), ("del\x7fx", 75009),
                 ("esc\x1bx", 75010)]
    lines = [one_user("good1", 75001).rstrip("\n")]
    lines += [f"{n}:x:{u}:{u}::/home/x:/bin/sh" for n, u in bad_users]
    nis = [("+nisuser", 75020), ("-nisuser", 75021)]
    lines += [f"{n}:x:{u}:{u}::/home/x:/bin/sh" for n, u in nis]
    lines.append(one_user("good2", 75030).rstrip("\n"))
    groups = ["grp/x:x:76001:good1",
              "okgrp:x:76002:good1,bad/member,ctl\x01m,good2",
              f"{LONG}:x:76003:good1",
              "okgrp2:x:76004:good2"]
    d = daemons.start("\n".join(lines) + "\n", "\n".join(groups) + "\n")
    d.ns.run(["getent", "passwd", "good2"])  # served once the load is done
    log = d.log()
    for i, (name, uid) in enumerate(bad_users):
        want = f"{d.passwd}:{i + 2}: invalid user name; line skipped"
        assert want in log, f"no '{want}' for {_visible(name)}; log:\n{log[-3000:]}"
    for ln in (1, 3):
        want = f"{d.group}:{ln}: invalid group name; line skipped"
        assert want in log, f"no '{want}'; log:\n{log[-3000:]}"
    for m in ("bad/member", "ctl\x01m"):
        assert re.search(re.escape(f"{d.group}:2: invalid member name '") + ".*skipped", log), \
            f"bad member {m!r} not logged; log:\n{log[-3000:]}"

    calls = [["getent", "passwd", str(u)] for _, u in bad_users + nis]
    calls += [["getent", "group", "76001"], ["getent", "group", "76003"],
              ["getent", "passwd", "good1"], ["getent", "passwd", "good2"],
              ["getent", "group", "okgrp"], ["getent", "group", "okgrp2"]]
    res = d.ns.run_many(calls)
    served = [(r.argv[2], r.out) for r in res[:len(bad_users) + len(nis) + 2] if r.rc != 2]
    assert not served, f"lines with bad names were served: {served}"
    good = res[len(bad_users) + len(nis) + 2:]
    assert [r.rc for r in good] == [0] * 4, good
    assert good[2].out.strip() == "okgrp:x:76002:good1,good2", good[2]
    assert good[3].out.strip() == "okgrp2:x:76004:good2", good[3]


def _raw_controls(b):
    """Control bytes (other than the newline ending a message) and DEL in b."""
    return sorted({c for c in b if (c < 0x20 and c != 0x0a) or c == 0x7f})


@pytest.mark.parametrize("cmd", ["user", "group"])
def test_admin_cli_refuses_bad_names(daemons, idcache, cmd):
    """`idcache user|group NAME` with a name idc_name_valid refuses: a
    usage error (exit 2) "CMD: invalid name '...'" from the CLI itself,
    nothing on stdout, no request sent, and the name shown escaped (\\xHH),
    never its raw control bytes. A valid name still works."""
    d = daemons.start(NAME_USERS, NAME_GROUPS)
    before = requests(idcache, d)
    messages = {}
    for n in MODULE_REFUSED + DAEMON_REFUSED:
        p = subprocess.run([str(idcache), cmd, "--run-dir", str(d.run_dir), "--", n],
                           capture_output=True, timeout=30)
        err = p.stderr.decode("utf-8", "backslashreplace")
        messages[_visible(n)] = (p.returncode, err.strip())
        assert p.returncode == 2, f"{cmd} {_visible(n)}: rc {p.returncode}, {err!r}"
        assert p.stdout == b"", f"{cmd} {_visible(n)} printed {p.stdout!r}"
        assert err.startswith(f"idcache: {cmd}: invalid name '"), err
        assert not _raw_controls(p.stderr), f"{cmd} {_visible(n)}: raw bytes in {p.stderr!r}"
        for c in n[:255]:
            if ord(c) < 0x20 or ord(c) == 0x7f:
                assert f"\\x{ord(c):02x}" in err, (n, err)
    for k, v in messages.items():
        print(f"{cmd} {k}: rc={v[0]} {v[1]!r}")
    after = requests(idcache, d)
    sent = {k: (before[k], after[k]) for k in before
            if k not in ("status", "hello") and after[k] != before[k]}
    assert not sent, f"bad names reached the daemon: {sent}"
    p = subprocess.run([str(idcache), cmd, "--run-dir", str(d.run_dir),
                        "bob" if cmd == "user" else "bobs"], capture_output=True, timeout=30)
    assert p.returncode == 0, p
    d.check_alive()


EXPIRE_BAD = ["a/b", "+bob", " bob", "..", "a,b", "a\nb", "a\x1b[2Jb", "a\x7f", LONG, ""]


def test_admin_expire_refuses_bad_names(daemons, idcache):
    """`idcache expire --user/--group NAME` with a bad name: a usage error
    (exit 2, "invalid name", escaped) from the CLI; and the daemon refuses
    the same names sent straight to admin.sock (BADREQ "invalid name"),
    expiring nothing and scheduling no refresh."""
    d = daemons.start(NAME_USERS, NAME_GROUPS)
    for opt in ("--user", "--group"):
        for n in EXPIRE_BAD:
            p = subprocess.run([str(idcache), "expire", "--run-dir", str(d.run_dir), f"{opt}={n}"],
                               capture_output=True, timeout=30)
            e = p.stderr.decode(errors="backslashreplace")
            assert p.returncode == 2, (opt, _visible(n), p.stdout, e)
            assert p.stdout == b"", (opt, _visible(n), p.stdout)
            assert e.startswith("idcache: expire: invalid name '"), e
            assert not _raw_controls(p.stderr), (opt, _visible(n), p.stderr)

    # The daemon's own check (do_expire): every name the protocol can carry.
    log_before = d.log()
    c = P.Client(d.run_dir / "admin.sock")
    try:
        for what in (1, 2):  # PROTO_EXPIRE_USER, PROTO_EXPIRE_GROUP
            for n in EXPIRE_BAD[:-2]:
                st, payload = c.call_raw(P.frame(P.EXPIRE, P.U32.pack(what) + P.pstr(n)))[1:]
                assert st == P.BADREQ, (what, _visible(n), st, payload)
                assert b"invalid name" in payload, (what, _visible(n), payload)
    finally:
        c.close()
    new_log = d.log()[len(log_before):]
    assert "expire refused: invalid user name" in new_log, new_log
    assert "expire refused: invalid group name" in new_log, new_log
    assert "entries on request" not in new_log, new_log  # nothing expired, nothing scheduled
    d.check_alive()
    p = subprocess.run([str(idcache), "user", "--run-dir", str(d.run_dir), "bob"],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 0 and "expired=no" in p.stdout, p
    r = d.ns.run(["getent", "passwd", "bob"])
    assert r.rc == 0, r
