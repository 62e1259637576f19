"""Shared fixtures for the integration tests.

The tests run the built artifacts, never a copy: the build tree comes from
the IDCACHE_BUILD environment variable (default: `build/` at the top of
this repository), as the Makefile's `check` target sets it. Later daemon tests add their fixtures
(idcached, run dir, slapd) here.
"""
import os
import subprocess
from pathlib import Path

import pytest

DEFAULT_BUILD = Path(__file__).resolve().parents[2] / "build"


@pytest.fixture(scope="session")
def build_dir() -> Path:
    """The meson build directory under test."""
    path = Path(os.environ.get("IDCACHE_BUILD", DEFAULT_BUILD)).resolve()
    if not (path / "build.ninja").exists():
        pytest.fail(f"{path} is not a meson build directory (set IDCACHE_BUILD)")
    return path


def _artifact(build_dir: Path, rel: str) -> Path:
    path = build_dir / rel
    if not os.access(path, os.X_OK):
        pytest.fail(f"{path} is missing: build it first (ninja -C {build_dir})")
    return path


@pytest.fixture(scope="session")
def idcache(build_dir: Path) -> Path:
    """Path of the built `idcache` command-line tool."""
    return _artifact(build_dir, "src/cli/idcache")


@pytest.fixture(scope="session")
def gen_ldif(build_dir: Path):
    """Path of bench/idcache-gen-ldif, or None when it was not built."""
    path = build_dir / "bench" / "idcache-gen-ldif"
    return path if os.access(path, os.X_OK) else None


class Result:
    """What a command did: exit status, stdout and stderr as text."""

    def __init__(self, proc: subprocess.CompletedProcess):
        self.rc = proc.returncode
        self.out = proc.stdout
        self.err = proc.stderr

    def __repr__(self):
        return f"<rc={self.rc} out={self.out[:400]!r} err={self.err[:400]!r}>"


@pytest.fixture
def run():
    """run(argv, input=None, env=None, timeout=60) -> Result, never raising on
    a non-zero exit (the tests check the status themselves)."""

    def _run(argv, input=None, env=None, timeout=60):
        full_env = dict(os.environ)
        full_env.update(env or {})
        proc = subprocess.run(
            [str(a) for a in argv],
            input=input,
            capture_output=True,
            text=True,
            env=full_env,
            timeout=timeout,
        )
        return Result(proc)

    return _run


# ==== end-to-end: idcached, the NSS module, private mount namespaces ============
# Helpers live in nsenv.py; the fixtures below hand out running daemons and
# a namespace runner pointed at them, and check at teardown that every
# daemon is still alive and stops cleanly on SIGTERM.
import nsenv  # noqa: E402  (this directory is on sys.path under pytest)

_LIVE_POOLS = []


@pytest.fixture(scope="session")
def idcached_bin(build_dir: Path) -> Path:
    """Path of the built daemon."""
    return _artifact(build_dir, "src/daemon/idcached")


@pytest.fixture(scope="session")
def nss_module_dir(build_dir: Path) -> Path:
    """Directory holding the built libnss_idcache.so.2 (for LD_LIBRARY_PATH)."""
    path = build_dir / "src" / "nss"
    if not (path / "libnss_idcache.so.2").exists():
        pytest.fail(f"{path}/libnss_idcache.so.2 is missing: build it first")
    return path


@pytest.fixture(scope="session")
def as_root():
    """The e2e tests mount in a private namespace and chown to test ids."""
    if os.geteuid() != 0:
        pytest.skip("end-to-end NSS tests need root (unshare -m, bind mounts, chown)")


class DaemonPool:
    """Daemons started by one fixture instance; see start()."""

    def __init__(self, binary, module_dir):
        self.binary = binary
        self.module_dir = module_dir
        self.daemons = []

    def start(self, passwd_text, group_text, idcache_conf="", domain_conf="", start=True,
              timeout=10.0):
        """A daemon over these passwd/group contents (group_text None: no
        group file) in a fresh /tmp directory; d.ns is a namespace runner
        for it, d.ready_seconds how long the start took."""
        base = nsenv.make_private_dir()
        ns = nsenv.NsEnv(self.module_dir, base / "run", base / "ns")
        sys_passwd, sys_group = nsenv.daemon_sys_files(base / "sys")
        wrap = ns.argv([], sources="files", passwd=sys_passwd, group=sys_group)
        d = nsenv.Daemon(self.binary, base, passwd_text, group_text, idcache_conf,
                         domain_conf, wrap=wrap)
        d.ns = ns
        self.daemons.append(d)
        if start:
            try:
                d.ready_seconds = d.start(timeout)
            except nsenv.DaemonError as e:
                pytest.fail(str(e))
        return d

    def close(self):
        """Stop every daemon; fail if one died on its own or stops badly."""
        problems = []
        for d in self.daemons:
            try:
                rc = d.stop()
                if rc not in (None, 0):
                    problems.append(f"idcached exited with {rc} on SIGTERM; log tail:\n"
                                    f"{d.log()[-3000:]}")
            except nsenv.DaemonError as e:
                problems.append(str(e)[-4000:])
            if not problems:
                nsenv.remove_tree(d.base)
        self.daemons = []
        if problems:
            pytest.fail("\n\n".join(problems), pytrace=False)


def _pool(idcached_bin, nss_module_dir):
    pool = DaemonPool(idcached_bin, nss_module_dir)
    _LIVE_POOLS.append(pool)
    yield pool
    _LIVE_POOLS.remove(pool)
    pool.close()


@pytest.fixture
def daemons(as_root, idcached_bin, nss_module_dir):
    """Per-test factory: daemons.start(passwd_text, group_text, ...)."""
    yield from _pool(idcached_bin, nss_module_dir)


@pytest.fixture(scope="module")
def module_daemons(as_root, idcached_bin, nss_module_dir):
    """Like `daemons`, shared by the tests of one module."""
    yield from _pool(idcached_bin, nss_module_dir)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """On a failed e2e test, attach the tail of every live daemon's log."""
    outcome = yield
    rep = outcome.get_result()
    if rep.when == "call" and rep.failed:
        for pool in _LIVE_POOLS:
            for d in pool.daemons:
                rep.sections.append((f"idcached log {d.base}", d.log()[-6000:]))
