"""Shared fixtures for the integration tests.

The tests run the built artifacts, never a copy: the build tree comes from
the IDCACHE_BUILD environment variable (default /work/main/build), as the
Makefile's `check` target sets it. Later daemon tests add their fixtures
(idcached, run dir, slapd) here.
"""
import os
import subprocess
from pathlib import Path

import pytest

DEFAULT_BUILD = "/work/main/build"


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
