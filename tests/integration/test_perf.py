"""`idcache perf`: a small end-to-end run, its JSON, the SVG plot and the
HTML page. The run uses every engine; one this machine lacks must show up
as "unavailable: <reason>", never be missing. `idcache perf` hands its
command line to the idcache-perf program (IDCACHE_PERF names the build's);
the admin tool itself links no benchmark engine."""
import json
import os
import shutil
import struct
import subprocess
import xml.etree.ElementTree as ET
import zlib
from pathlib import Path

import pytest

ENGINES = {"idcache", "idcache-nosync", "ldb-tdb", "ldb-mdb", "openldap"}
TESTS = {"import", "export", "search_uid", "search_uid_in_dn", "search_sub",
         "modify_sn", "add"}
# glibc lookups; their engines are ways of answering them
NSS_ENGINES = {"idcache-mc", "idcache-socket", "idcache-nscd", "files", "sssd", "nscd"}
NSS_TESTS = {"getpwnam", "getpwuid", "initgroups"}
# measured whenever this machine allows a private mount namespace (root)
NSS_ALWAYS = {"idcache-mc", "idcache-socket", "files"}
CHROMIUM = "/usr/bin/chromium"


@pytest.fixture(scope="module", autouse=True)
def perf_program(build_dir):
    """Point `idcache perf` at this build's idcache-perf for the module."""
    path = build_dir / "perf" / "idcache-perf"
    assert os.access(path, os.X_OK), f"{path} is missing: build it first"
    old = os.environ.get("IDCACHE_PERF")
    os.environ["IDCACHE_PERF"] = str(path)
    yield path
    if old is None:
        del os.environ["IDCACHE_PERF"]
    else:
        os.environ["IDCACHE_PERF"] = old


def test_admin_tool_links_no_benchmark_engine(idcache):
    libs = subprocess.run(["ldd", str(idcache)], capture_output=True, text=True,
                          check=True).stdout
    for lib in ("libldb", "libtalloc", "libtevent", "libldap", "liblber"):
        assert lib not in libs, libs


def test_perf_without_the_program_says_how_to_get_it(idcache, tmp_path):
    env = dict(os.environ, IDCACHE_PERF=str(tmp_path / "absent"))
    p = subprocess.run([str(idcache), "perf", "list"], capture_output=True, text=True,
                       env=env, timeout=30)
    assert p.returncode == 1
    assert "is not installed" in p.stderr and "-Dperf=true" in p.stderr, p.stderr


def test_perf_list_through_the_admin_tool(idcache):
    p = subprocess.run([str(idcache), "perf", "list"], capture_output=True, text=True,
                       timeout=30)
    assert p.returncode == 0, p.stderr
    assert "search_uid" in p.stdout


@pytest.fixture(scope="module")
def result(idcache, tmp_path_factory):
    """One run shared by the tests: 100 users, 3 samples, threads 1 and 2."""
    work = tmp_path_factory.mktemp("perf")
    out = work / "r.json"
    proc = subprocess.run(
        [str(idcache), "perf", "run", "--users", "100", "--samples", "3",
         "--seconds", "0.1", "--threads", "1,2", "--dir", str(work),
         "--out", str(out)],
        capture_output=True, text=True, timeout=120,
        env=dict(os.environ, NO_COLOR="1"))
    assert proc.returncode == 0, proc.stderr
    return work, out, proc


def test_json_structure(result):
    _, out, proc = result
    data = json.loads(out.read_text())
    assert data["format"] == "idcache-perf/1"
    assert data["interrupted"] is False
    for key in ("cpu", "cpus_online", "kernel", "outlier_rule", "seed"):
        assert data["machine"][key], key
    assert data["indexes"]
    names = {e["name"] for e in data["engines"]}
    assert names == ENGINES | NSS_ENGINES
    for e in data["engines"]:
        assert e["status"] == "available" or e["status"].startswith("unavailable: ")
        assert e["durability"]
    rows = data["rows"]
    assert {r["test"] for r in rows} >= TESTS | NSS_TESTS
    for r in rows:
        if r["status"] == "ok":
            assert r["median"] > 0 and r["min"] <= r["median"] <= r["max"], r
            assert len(r["samples"]) == 3 and r["cache"]
        else:
            assert r["status"] in ("unavailable", "skipped", "failed", "unsupported")
            assert r["why"], r
    # every engine either has figures or says why for every test
    for eng in ENGINES | NSS_ENGINES:
        mine = [r for r in rows if r["engine"] == eng]
        assert {r["test"] for r in mine} == (TESTS if eng in ENGINES else NSS_TESTS), eng
        avail = next(e for e in data["engines"] if e["name"] == eng)["status"]
        if avail == "available":
            assert any(r["status"] == "ok" for r in mine), eng
    # idcache itself must have every figure
    for r in rows:
        if r["engine"] == "idcache" and r["test"] in TESTS:
            assert r["status"] == "ok", r
    assert data["sizes"] and all(s["disk_bytes"] > 0 for s in data["sizes"])
    # the CSV beside it
    csv = out.with_suffix(".csv").read_text().splitlines()
    assert csv[0].startswith("test,engine,users,threads,status")
    assert len(csv) == len(rows) + 1


def test_table_words(result):
    _, _, proc = result
    assert "faster than" in proc.stdout or "slower than" in proc.stdout
    assert "\x1b[" not in proc.stdout  # not a terminal: no colour
    assert "Tukey" in proc.stdout


def _nss_possible():
    """Whether the NSS rows must have figures here: root, and a private
    mount namespace can be made."""
    if os.geteuid() != 0:
        return False
    return subprocess.run(["unshare", "-m", "--propagation", "private", "true"],
                          capture_output=True).returncode == 0


def test_nss_rows(result):
    """getpwnam, getpwuid and initgroups through glibc: as root with unshare,
    the memory cache, the socket and glibc's files all have figures (one
    per thread count = process count), with µs per lookup; otherwise every
    row says why."""
    _, out, proc = result
    data = json.loads(out.read_text())
    rows = [r for r in data["rows"] if r["test"] in NSS_TESTS]
    engines = {e["name"]: e["status"] for e in data["engines"]}
    for r in rows:
        assert r["unit"] == "lookups/s"
        assert r["threads"] in (1, 2), r
    if not _nss_possible():
        for r in rows:
            assert r["status"] == "unavailable" and r["why"], r
        return
    for eng in NSS_ALWAYS:
        assert engines[eng] == "available", engines
        for test in NSS_TESTS:
            mine = [r for r in rows if r["engine"] == eng and r["test"] == test]
            assert len(mine) == 2, (eng, test, mine)
            for r in mine:
                assert r["status"] == "ok", r
                assert r["median"] > 0 and r["count"] > 0, r
                assert r["us_per_lookup"] > 0, r
                expect = r["threads"] * 1e6 / r["median"]
                assert abs(r["us_per_lookup"] - expect) < 1e-3 * expect, r
    for eng in NSS_ENGINES - NSS_ALWAYS:  # idcache-nscd, sssd, nscd: measured or saying why
        for r in rows:
            if r["engine"] == eng and r["status"] != "ok":
                assert r["status"] == "unavailable" and r["why"], r
    # the ratios are the memory cache's, in words
    assert "idcache-mc " in proc.stdout and " than files" in proc.stdout
    assert "µs per lookup" in proc.stdout
    # the tool stopped the idcached it started
    left = subprocess.run(["pgrep", "-f", f"idcached -c {out.parent}"],
                          capture_output=True, text=True).stdout.split()
    assert not left, f"idcached still running: {left}"


def _svg(idcache, out, work):
    svg = work / "plot.svg"
    subprocess.run([str(idcache), "perf", "plot", str(out), "--out", str(svg)],
                   check=True, timeout=30)
    return svg


def test_svg_is_xml(idcache, result):
    work, out, _ = result
    root = ET.parse(_svg(idcache, out, work)).getroot()
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    lines = root.findall(".//{http://www.w3.org/2000/svg}polyline")
    assert lines, "no engine line drawn"


def test_compare_and_html(idcache, result, run):
    work, out, _ = result
    html = work / "cmp.html"
    r = run([idcache, "perf", "compare", out, out, "--html", html])
    assert r.rc == 0, r
    assert "about as fast as" in r.out
    page = html.read_text()
    assert page.startswith("<!DOCTYPE html>") and "<svg" in page
    assert "http://" not in page.replace("http://www.w3.org/2000/svg", "")  # self-contained


def _png_pixels(data):
    """Decode an 8-bit RGB/RGBA PNG (what Chromium writes) into rows of bytes."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, ihdr = 8, b"", None
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    w, h, depth, ctype = ihdr[0], ihdr[1], ihdr[2], ihdr[3]
    assert depth == 8 and ctype in (2, 6), ihdr
    bpp = 3 if ctype == 2 else 4
    raw, stride, rows, prev = zlib.decompress(idat), w * bpp, [], bytearray(w * bpp)
    for y in range(h):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return rows, bpp


def test_svg_renders_in_chromium(idcache, result):
    if not os.access(CHROMIUM, os.X_OK):
        pytest.skip(f"{CHROMIUM} not installed: the render check needs headless Chromium")
    work, out, _ = result
    svg = _svg(idcache, out, work)
    shot = work / "shot.png"
    subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
                    f"--screenshot={shot}", "--window-size=900,1000",
                    svg.as_uri()], capture_output=True, timeout=60)
    assert shot.exists(), "chromium wrote no screenshot"
    rows, bpp = _png_pixels(shot.read_bytes())
    colours = set()
    for row in rows[::7]:
        for x in range(0, len(row), bpp * 5):
            colours.add(row[x:x + 3])
    assert len(colours) > 5, f"screenshot looks blank: {len(colours)} colours"
