"""`make install` asks only for the build's packages; the tests' stay out.

scripts/install-deps runs with a stand-in dpkg-query that says nothing is
installed and a stand-in id that says we are not root, so it names every
package it would install and stops before apt-get.
"""
import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TEST_ONLY = {"slapd", "valgrind", "clang", "chromium", "libcmocka-dev", "python3-pytest",
             "libldb-dev", "ldb-tools", "clang-format"}


def wanted(tmp_path, *args):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, body in (("dpkg-query", "exit 1"), ("id", "echo 1000")):
        p = bin_dir / name
        p.write_text(f"#!/bin/sh\n{body}\n")
        p.chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}:/usr/bin:/bin")
    r = subprocess.run(["sh", str(REPO / "scripts/install-deps"), *args], capture_output=True,
                       text=True, env=env, timeout=30)
    assert r.returncode == 1 and "need root to install:" in r.stderr, r
    return set(r.stderr.split("need root to install:")[1].split())


def test_build_deps_hold_no_test_package(tmp_path):
    build = wanted(tmp_path, "build")
    assert {"gcc", "meson", "ninja-build", "liblmdb-dev"} <= build
    assert not build & TEST_ONLY, build & TEST_ONLY
    assert TEST_ONLY <= wanted(tmp_path, "test")
    assert wanted(tmp_path) == wanted(tmp_path, "test")


def make_dry_run(target, tmp_path):
    r = subprocess.run(["make", "-n", "-C", str(REPO), target, f"BUILD={tmp_path}/b"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r
    return r.stdout


def test_make_install_runs_only_the_build_deps(tmp_path):
    out = make_dry_run("install", tmp_path)
    assert "install-deps build" in out, out
    assert "install-deps test" not in out, out
    assert "install-deps test" in make_dry_run("check", tmp_path)
