"""Helpers for the end-to-end tests: a private mount namespace per client
command, and a running idcached.

Namespace: every client command runs under `unshare -m` (private mount
propagation, so nothing leaks to the host) after bind-mounting a test
nsswitch.conf over /etc/nsswitch.conf and, when asked, test copies of
passwd/group over /etc/passwd and /etc/group (the `files` oracle). The real
/etc files are never written. glibc finds libnss_idcache.so.2 through
LD_LIBRARY_PATH: NSS modules are dlopen()ed by soname, and dlopen honours
LD_LIBRARY_PATH for every program that is not setuid/setgid (getent, id,
ls, python3 all qualify). The module finds the daemon through
IDCACHE_RUNDIR.

Daemon: `idcached -c CONF -i` in a private directory under /tmp (short
paths: a socket path must fit sun_path's 108 bytes), stderr to a log file
(never a pipe that could fill and block it), "ready" awaited with a bounded
wait, SIGTERM at the end.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# Exit status the namespace wrapper uses for its own failures.
HARNESS_FAILED = 125

# Runs inside the namespace: mounts, optional privilege drop, then exec.
# $1 nsswitch.conf, $2 passwd or "", $3 group or "", $4 setpriv user or "".
_WRAPPER = r'''
fail() { echo "nsenv: $*" >&2; exit 125; }
mount --bind "$1" /etc/nsswitch.conf || fail "cannot bind $1 over /etc/nsswitch.conf"
if [ -n "$2" ]; then mount --bind "$2" /etc/passwd || fail "cannot bind $2 over /etc/passwd"; fi
if [ -n "$3" ]; then mount --bind "$3" /etc/group || fail "cannot bind $3 over /etc/group"; fi
as="$4"
shift 4
if [ -n "$as" ]; then
    exec setpriv --reuid="$as" --regid="$as" --clear-groups -- "$@"
fi
exec "$@"
'''

# Runs inside the namespace for run_many(): one namespace, many commands.
_MANY = r'''
import json, subprocess, sys
out = []
for argv in json.load(sys.stdin):
    p = subprocess.run(argv, capture_output=True, timeout=120)
    out.append([p.returncode,
                p.stdout.decode("utf-8", "backslashreplace"),
                p.stderr.decode("utf-8", "backslashreplace")])
json.dump(out, sys.stdout)
'''


# A process doing lookups through glibc on request, for tests that need one
# process to keep what it mapped (glibc's nscd maps) across changes. Each
# stdin line "OP ARG [N]" runs the lookup N times (default 1) and prints its
# last answer as JSON (null: not found): pw NAME, pwuid UID, gr NAME, grgid
# GID ([name, passwd, gid, members]), gl NAME:GID (getgrouplist, sorted);
# tally NAME N: N getpwnam, the count of each distinct answer.
LOOKUP_CLIENT = r'''
import grp, json, os, pwd, sys
def gr(g): return [g[0], g[1], g[2], list(g[3])]
for line in sys.stdin:
    op, arg, *n = line.split()
    res = None
    for _ in range(int(n[0]) if n else 1):
        try:
            if op == "pw": res = list(pwd.getpwnam(arg))
            elif op == "pwuid": res = list(pwd.getpwuid(int(arg)))
            elif op == "gr": res = gr(grp.getgrnam(arg))
            elif op == "grgid": res = gr(grp.getgrgid(int(arg)))
            elif op == "gl":
                user, gid = arg.split(":")
                res = sorted(os.getgrouplist(user, int(gid)))
            elif op == "tally":
                res = {}
                for _ in range(int(n[0])):
                    try:
                        k = json.dumps(list(pwd.getpwnam(arg)))
                    except KeyError:
                        k = "null"
                    res[k] = res.get(k, 0) + 1
                break
        except KeyError:
            res = None
    print(json.dumps(res), flush=True)
'''


class Result:
    """What one command did: exit status, stdout and stderr as text, and
    the wall-clock seconds it took (including namespace setup)."""

    def __init__(self, rc, out, err, elapsed=0.0, argv=None):
        self.rc = rc
        self.out = out
        self.err = err
        self.elapsed = elapsed
        self.argv = argv

    def __repr__(self):
        return (f"<{' '.join(map(str, self.argv or []))[:200]}: rc={self.rc} "
                f"out={self.out[:400]!r} err={self.err[:400]!r}>")


class NsEnv:
    """Runs client commands in private mount namespaces.

    module_dir: directory holding libnss_idcache.so.2 (put on
    LD_LIBRARY_PATH); run_dir: the daemon's run_dir (IDCACHE_RUNDIR);
    work: a directory for the generated nsswitch.conf files."""

    def __init__(self, module_dir, run_dir, work):
        self.module_dir = Path(module_dir)
        self.run_dir = Path(run_dir) if run_dir else None
        self.work = Path(work)
        self.work.mkdir(parents=True, exist_ok=True)
        os.chmod(self.work, 0o755)

    def nsswitch(self, passwd="idcache", group=None):
        """Path of an nsswitch.conf with these sources (group defaults to
        the passwd sources)."""
        group = group or passwd
        path = self.work / f"nsswitch.{passwd}.{group}.conf".replace(" ", "+")
        text = f"passwd: {passwd}\ngroup: {group}\nshadow: files\nhosts: files\n"
        # Written once: a namespace may have it bind-mounted right now.
        if not path.exists() or path.read_text() != text:
            write_atomic(path, text)
        return path

    def env(self, extra=None):
        """The environment clients get: nothing inherited that could change
        what they print or which code they load."""
        env = {
            "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
            "LC_ALL": "C.UTF-8",
            "TZ": "UTC",
            "LD_LIBRARY_PATH": str(self.module_dir),
        }
        if self.run_dir is not None:
            env["IDCACHE_RUNDIR"] = str(self.run_dir)
        env.update(extra or {})
        return env

    def argv(self, argv, sources="idcache", passwd=None, group=None, as_uid=None,
             group_sources=None):
        """The full command line that runs argv in a fresh namespace."""
        conf = self.nsswitch(sources, group_sources)
        return ["unshare", "-m", "--propagation", "private", "--",
                "sh", "-c", _WRAPPER, "nsenv", str(conf),
                str(passwd or ""), str(group or ""),
                "" if as_uid is None else str(as_uid)] + [str(a) for a in argv]

    def run(self, argv, sources="idcache", passwd=None, group=None, env=None, input=None,
            timeout=60, as_uid=None, group_sources=None, check_harness=True):
        """Run argv in a fresh namespace; return a Result. Never raises on a
        non-zero exit of argv itself; raises if the namespace could not be
        set up (so a harness failure never passes for a lookup failure)."""
        full = self.argv(argv, sources, passwd, group, as_uid, group_sources)
        t0 = time.monotonic()
        proc = subprocess.run(full, input=input.encode() if isinstance(input, str) else input,
                              capture_output=True, env=self.env(env), timeout=timeout)
        res = Result(proc.returncode, proc.stdout.decode("utf-8", "backslashreplace"),
                     proc.stderr.decode("utf-8", "backslashreplace"),
                     time.monotonic() - t0, argv)
        if check_harness and res.rc == HARNESS_FAILED and "nsenv:" in res.err:
            raise RuntimeError(f"namespace setup failed: {res.err.strip()}")
        return res

    def run_many(self, argvs, timeout=300, **kw):
        """Run every argv of the list, one after another, in ONE namespace.
        Returns a list of Results in the same order."""
        res = self.run([sys_python(), "-c", _MANY], input=json.dumps(argvs), timeout=timeout,
                       **kw)
        if res.rc != 0:
            raise RuntimeError(f"run_many failed: {res!r}")
        return [Result(rc, out, err, 0.0, argv)
                for (rc, out, err), argv in zip(json.loads(res.out), argvs)]

    def run_py(self, script, args=(), timeout=120, **kw):
        """Run a Python script inside a namespace; it must print one JSON
        document on stdout, which is returned decoded."""
        res = self.run([sys_python(), "-c", script] + [str(a) for a in args],
                       timeout=timeout, **kw)
        if res.rc != 0:
            raise RuntimeError(f"script failed: {res!r}")
        return json.loads(res.out)

    def popen(self, argv, sources="idcache", passwd=None, group=None, env=None,
              as_uid=None):
        """Start argv in a namespace without waiting (stdin/stdout/stderr
        are pipes)."""
        full = self.argv(argv, sources, passwd, group, as_uid)
        return subprocess.Popen(full, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=self.env(env))


def sys_python():
    """The distribution's python3 (the one whose pwd/grp use glibc NSS)."""
    return "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable


# ==== files ======================================================================

def write_atomic(path, text, mode=0o644):
    """Replace path by rename, as useradd and vipw do (a new inode)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    data = text.encode("utf-8", "surrogateescape") if isinstance(text, str) else text
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.chmod(tmp, mode)
    os.rename(tmp, path)


def make_private_dir(prefix="idc-e2e-"):
    """A fresh directory under /tmp, traversable by everyone (0755), so that
    a non-root client meets the daemon's own permission checks and not
    ours."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    os.chmod(path, 0o755)
    return path


# ==== the daemon =================================================================

# The daemon, started as root, drops to its user, which must exist; the real
# /etc/passwd is never edited, so the daemon runs in a namespace of its own
# whose /etc/passwd and /etc/group are copies of the real ones plus this user.
DAEMON_USER = "idcache"
DAEMON_UID = 64123


VALGRIND = shutil.which("valgrind")


def valgrind_wrap(ns, base, sys_files=None):
    """The wrapper that runs a daemon under valgrind inside a namespace of
    ns (system passwd/group from daemon_sys_files, under base/sys, unless
    sys_files gives their paths), its report in base/valgrind.log. Returns
    (argv prefix, report path)."""
    sys_passwd, sys_group = sys_files or daemon_sys_files(Path(base) / "sys")
    vglog = Path(base) / "valgrind.log"
    return ns.argv([], sources="files", passwd=sys_passwd, group=sys_group) + [
        VALGRIND, "--vgdb=no", "--leak-check=full", "--errors-for-leak-kinds=definite",
        "--error-exitcode=99", "--track-fds=no", f"--log-file={vglog}"], vglog


def stop_checked_by_valgrind(d, vglog, timeout=120):
    """SIGTERM a daemon started with valgrind_wrap: it must exit 0 and
    valgrind report no error. Returns the report."""
    rc = d.stop(timeout=timeout)
    report = vglog.read_text() if vglog.exists() else ""
    assert rc == 0, f"valgrind found errors (exit {rc}):\n{report}\n{d.log()[-3000:]}"
    assert "ERROR SUMMARY: 0 errors" in report, report
    return report


def end_checked_run(d, base, ok):
    """The finally of a test that ran a daemon under valgrind in base: a
    daemon still running is killed; base is kept for a look unless the
    test passed (ok)."""
    if d.alive():
        d.proc.kill()
        d.proc.wait()
    if ok:
        remove_tree(base)


def daemon_sys_files(where):
    """Write where/passwd and where/group: the host's files plus the daemon's
    user and group. Returns their paths."""
    where = Path(where)
    where.mkdir(parents=True, exist_ok=True)
    out = []
    for name, line in (("passwd", f"{DAEMON_USER}:x:{DAEMON_UID}:{DAEMON_UID}:"
                                  "idcache test daemon:/nonexistent:/usr/sbin/nologin"),
                       ("group", f"{DAEMON_USER}:x:{DAEMON_UID}:")):
        with open(f"/etc/{name}", encoding="utf-8", errors="surrogateescape") as f:
            lines = [x for x in f.read().splitlines()
                     if not x.startswith(DAEMON_USER + ":")]
        path = where / name
        write_atomic(path, "\n".join(lines + [line]) + "\n")
        out.append(path)
    return out


class DaemonError(Exception):
    pass


class Daemon:
    """One idcached in its own directory.

    base/passwd and base/group are the files of domain `local`; group=None
    leaves the group file absent. Extra lines for the [idcache] and
    [domain/local] sections come from idcache_conf and domain_conf."""

    def __init__(self, binary, base, passwd_text, group_text, idcache_conf="",
                 domain_conf="", wrap=()):
        self.binary = Path(binary)
        self.wrap = list(wrap)  # argv prefix, e.g. a namespace for the daemon
        self.base = Path(base)
        self.run_dir = self.base / "run"
        self.state_dir = self.base / "state"
        self.passwd = self.base / "passwd"
        self.group = self.base / "group"
        self.conf = self.base / "idcache.conf"
        self.log_path = self.base / "idcached.log"
        self.proc = None
        self.expected_exit = False  # set when the test kills it on purpose
        self.runs = 0
        self.env = {}  # added to the daemon's environment
        for d in (self.run_dir, self.state_dir):
            d.mkdir(parents=True, exist_ok=True)
            os.chmod(d, 0o755)
        if passwd_text is not None:
            write_atomic(self.passwd, passwd_text)
        if group_text is not None:
            write_atomic(self.group, group_text)
        self.conf.write_text(
            "[idcache]\n"
            f"run_dir = {self.run_dir}\n"
            f"state_dir = {self.state_dir}\n"
            f"user = {DAEMON_USER}\n"
            f"{idcache_conf}"
            "\n[domain/local]\n"
            "id_provider = files\n"
            f"passwd_files = {self.passwd}\n"
            f"group_files = {self.group}\n"
            f"{domain_conf}")

    def log(self):
        try:
            return self.log_path.read_text(errors="backslashreplace")
        except FileNotFoundError:
            return ""

    def start(self, timeout=10.0):
        """Start it and wait until it logs "ready". Returns the seconds that
        took. Raises DaemonError (with the log) if it exits or stays silent."""
        self.expected_exit = False
        self.runs += 1
        logf = open(self.log_path, "ab")
        logf.write(f"---- start #{self.runs} ----\n".encode())
        logf.flush()
        start_off = logf.tell()
        t0 = time.monotonic()
        self.proc = subprocess.Popen(self.wrap + [str(self.binary), "-c", str(self.conf), "-i"],
                                     stdin=subprocess.DEVNULL, stdout=logf, stderr=logf,
                                     cwd=self.base, env={**os.environ, **self.env})
        logf.close()
        while True:
            with open(self.log_path, "rb") as f:
                f.seek(start_off)
                text = f.read().decode("utf-8", "backslashreplace")
            if "ready" in text:
                return time.monotonic() - t0
            rc = self.proc.poll()
            if rc is not None:
                raise DaemonError(f"idcached exited with {rc} before ready; log:\n{self.log()}")
            if time.monotonic() - t0 > timeout:
                self.proc.kill()
                self.proc.wait()
                raise DaemonError(f"idcached not ready after {timeout}s; log:\n{self.log()}")
            time.sleep(0.02)

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def check_alive(self):
        """Raise DaemonError with the log if it died."""
        if self.proc is not None and self.proc.poll() is not None and not self.expected_exit:
            raise DaemonError(f"idcached died with status {self.proc.returncode}; log:\n"
                              f"{self.log()}")

    def signal(self, sig):
        if sig == signal.SIGSTOP:
            stop_process(self.proc.pid)
        else:
            self.proc.send_signal(sig)

    def kill(self):
        """SIGKILL, on purpose."""
        self.expected_exit = True
        self.proc.kill()
        self.proc.wait()

    def stop(self, timeout=10.0):
        """SIGTERM and wait. Returns the exit status; raises DaemonError if
        it had already died on its own or does not stop in time."""
        if self.proc is None or self.expected_exit:
            return None
        if self.proc.poll() is not None:
            self.check_alive()
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise DaemonError(f"idcached ignored SIGTERM for {timeout}s; log:\n{self.log()}")
        self.expected_exit = True
        return rc


def wait_for(pred, timeout=5.0, interval=0.02):
    """Poll pred() until it returns a true value or timeout passes. Returns
    (value, seconds waited)."""
    t0 = time.monotonic()
    while True:
        v = pred()
        if v:
            return v, time.monotonic() - t0
        if time.monotonic() - t0 > timeout:
            return v, time.monotonic() - t0
        time.sleep(interval)


def stop_process(pid, timeout=10.0):
    """SIGSTOP pid and wait until every thread of it is stopped: kill
    returns before a thread running on another CPU has stopped, and on a
    loaded machine it may still answer a request sent just after."""
    os.kill(pid, signal.SIGSTOP)

    def stopped():
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except FileNotFoundError:
            return True
        for t in tids:
            try:
                stat = Path(f"/proc/{pid}/task/{t}/stat").read_text()
            except FileNotFoundError:
                continue
            if stat[stat.rindex(")") + 2] != "T":
                return False
        return True
    done, _ = wait_for(stopped, timeout=timeout, interval=0.005)
    if not done:
        raise RuntimeError(f"pid {pid} not stopped after {timeout} s")


def remove_tree(path):
    shutil.rmtree(path, ignore_errors=True)
