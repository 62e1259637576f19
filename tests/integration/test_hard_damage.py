"""Damaged state files (docs/DESIGN.md §10): LMDB trusts its files, so idcached
decides before trusting them.

timestamps.mdb (written without fsync, disposable) is reused only when the
last run closed it cleanly and its meta pages hold up; cache.mdb (durable)
has its meta pages checked at every start and every page read in a child
process after an unclean stop, and a damaged one is moved aside and
rebuilt from the providers. In every case below the daemon starts, serves
the right data, says what it did, and keeps doing so at the next starts
(no crash loop); `idcache db check` on a damaged store says "damaged" and
exits 1 instead of dying.
"""
import os
import random
import re
import stat
import subprocess
from pathlib import Path

import pytest

import nsenv
from test_hard_crash import check_serving, small_group, small_passwd, wait_log

pytestmark = pytest.mark.usefixtures("as_root")

SEEDS = [1, 2, 3, 4, 5]
STARTS = 3  # a crash loop shows by the second


def scatter(path, rng, n=200, skip=2 * 4096):
    """n random bytes at random offsets past the two meta pages."""
    size = path.stat().st_size
    with open(path, "r+b") as f:
        for _ in range(n):
            f.seek(rng.randrange(skip, size))
            f.write(bytes([rng.randrange(256)]))


def damage(path, how, rng):
    st = path.stat()
    if how == "scatter":
        scatter(path, rng)
    elif how == "scatter_hidden":  # the marker cannot see it: same size and mtime
        scatter(path, rng)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    elif how == "truncate_half":
        os.truncate(path, st.st_size // 2)
    elif how == "zero":
        os.truncate(path, 0)
    elif how == "garbage":
        path.write_bytes(rng.randbytes(st.st_size))
    else:
        raise ValueError(how)


def stop(d, how):
    if how == "kill9":
        d.kill()
    else:
        assert d.stop() == 0


def starts_and_serves(d, letter, idcache, since_runs=STARTS):
    """Start it STARTS times; each time it is ready, serves letter and
    applies a change (which writes both databases), then stops cleanly."""
    for k in range(since_runs):
        d.start(timeout=60)
        check_serving(d, letter, idcache)
        since = len(d.log())
        letter = "B" if letter == "A" else "A"
        nsenv.write_atomic(d.passwd, small_passwd(letter))
        assert wait_log(d, "domain local: users", since), d.log()[-3000:]
        check_serving(d, letter)
        assert d.stop() == 0, d.log()[-3000:]
    return letter


def db_check(idcache, store):
    p = subprocess.run([str(idcache), "db", "-d", str(store), "check"], capture_output=True,
                       text=True, timeout=300)
    return nsenv.Result(p.returncode, p.stdout, p.stderr, 0, ["idcache db check"])


# ==== timestamps.mdb ==========================================================================

@pytest.mark.parametrize("stopped", ["sigterm", "kill9"])
@pytest.mark.parametrize("seed", SEEDS)
def test_timestamps_random_bytes(daemons, idcache, seed, stopped):
    rng = random.Random(seed)
    d = daemons.start(small_passwd("A"), small_group())
    ts = d.state_dir / "timestamps.mdb"
    stop(d, stopped)
    damage(ts, "scatter", rng)
    since = len(d.log())
    starts_and_serves(d, "A", idcache)
    log = d.log()[since:]
    assert re.search(r"timestamps\.mdb.*recreating it", log), log[-3000:]
    print(f"seed {seed}, {stopped}: " + re.findall(r".*timestamps\.mdb.*recreating.*", log)[0])


def test_timestamps_damage_the_marker_cannot_see(daemons, idcache):
    """Bytes changed behind a clean marker's back (same size, same mtime):
    the file is trusted, so a start may die on it, but the next start finds
    no marker (a run that dies leaves none) and recreates it: one failed
    start at most, never a loop."""
    rng = random.Random(7)
    d = daemons.start(small_passwd("A"), small_group())
    ts = d.state_dir / "timestamps.mdb"
    assert d.stop() == 0
    assert Path(str(ts) + ".clean").exists(), "no clean marker after a clean stop"
    damage(ts, "scatter_hidden", rng)
    failed = 0
    for _ in range(STARTS):
        try:
            d.start(timeout=60)
            check_serving(d, "A", idcache)
            since = len(d.log())
            nsenv.write_atomic(d.passwd, small_passwd("A") + "extra:x:61999:61999::/:/bin/sh\n")
            wait_log(d, "domain local: users", since)
            if not d.alive():
                raise nsenv.DaemonError("died applying a change")
            assert d.stop() == 0
        except nsenv.DaemonError as e:
            failed += 1
            d.expected_exit = True
            print(f"a start failed: {str(e)[:200]}")
    print(f"{failed} of {STARTS} starts failed")
    assert failed <= 1, d.log()[-4000:]
    assert d.alive() is False


# ==== cache.mdb ===================================================================================

@pytest.mark.parametrize("how", ["truncate_half", "zero", "garbage"])
@pytest.mark.parametrize("stopped", ["sigterm", "kill9"])
def test_cache_damaged(daemons, idcache, how, stopped):
    rng = random.Random(hash(how) & 0xffff)
    d = daemons.start(small_passwd("A"), small_group())
    data = d.state_dir / "cache.mdb" / "data.mdb"
    stop(d, stopped)
    damage(data, how, rng)
    since = len(d.log())
    d.start(timeout=60)
    log = d.log()[since:]
    m = re.search(r"cache\.mdb is damaged \((.*)\): moved aside to (\S+);", log)
    assert m, log[-3000:]
    print(f"{how}, {stopped}: {m.group(0)}")
    aside = Path(m.group(2))
    assert aside.is_dir() and aside.name.startswith("cache.mdb.damaged-"), aside
    check_serving(d, "A", idcache)
    assert d.stop() == 0
    # Later starts find a sound store and say nothing of damage.
    since = len(d.log())
    starts_and_serves(d, "A", idcache, 2)
    assert "damaged" not in d.log()[since:], d.log()[since:][-3000:]
    # The copy kept aside is what `db check` calls damaged, and it survives it.
    r = db_check(idcache, aside)
    assert r.rc == 1 and "damaged: " in r.err, r
    print("db check: " + r.err.strip())


@pytest.mark.parametrize("seed", SEEDS)
def test_cache_random_bytes_after_a_crash(daemons, idcache, seed):
    """Scattered bytes after kill -9: every page is read in a child first;
    whatever they hit, the daemon serves the files' data and keeps
    starting."""
    rng = random.Random(seed)
    d = daemons.start(small_passwd("A"), small_group())
    data = d.state_dir / "cache.mdb" / "data.mdb"
    d.kill()
    damage(data, "scatter", rng)
    since = len(d.log())
    starts_and_serves(d, "A", idcache)
    log = d.log()[since:]
    assert "was not closed cleanly: reading all of it first" in log, log[-3000:]
    found = re.findall(r".*cache\.mdb (?:is damaged|is sound).*", log)
    print(f"seed {seed}: {found[0] if found else '(no verdict logged)'}")
    assert found, log[-3000:]


def test_clean_stop_skips_the_page_walk(daemons, idcache):
    d = daemons.start(small_passwd("A"), small_group())
    assert d.stop() == 0
    since = len(d.log())
    d.start()
    assert "not closed cleanly" not in d.log()[since:], d.log()[since:]
    d.kill()
    since = len(d.log())
    d.start()
    log = d.log()[since:]
    assert "cache.mdb was not closed cleanly" in log and "cache.mdb is sound" in log, log
    assert "timestamps.mdb was not closed cleanly" in log, log


# ==== idcache db check ====================================================================================

@pytest.mark.parametrize("how", ["truncate_half", "zero", "garbage", "scatter"])
def test_db_check_on_a_damaged_store(daemons, idcache, how, tmp_path):
    d = daemons.start(small_passwd("A"), small_group())
    assert d.stop() == 0
    verdicts = []
    for seed in SEEDS if how == "scatter" else SEEDS[:1]:
        store = tmp_path / f"{how}-{seed}"
        store.mkdir()
        data = d.state_dir / "cache.mdb" / "data.mdb"
        (store / "data.mdb").write_bytes(data.read_bytes())
        damage(store / "data.mdb", how, random.Random(seed))
        r = db_check(idcache, store)
        assert r.rc >= 0, f"db check killed by signal {-r.rc}"
        verdicts.append((seed, r.rc, (r.err or r.out).strip().splitlines()[-1]))
        if how != "scatter":
            assert r.rc == 1 and "damaged: " in r.err, r
    for v in verdicts:
        print(v)
    if how == "scatter":  # bytes may fall on free pages; most seeds hit something
        assert sum(rc == 1 for _, rc, _ in verdicts) >= len(SEEDS) - 1, verdicts


# ==== file modes ============================================================================================

def test_state_files_private_even_when_they_were_not(daemons):
    d = daemons.start(small_passwd("A"), small_group())
    assert d.stop() == 0
    for root, dirs, files in os.walk(d.state_dir):
        for n in dirs:
            os.chmod(Path(root) / n, 0o755)
        for n in files:
            os.chmod(Path(root) / n, 0o644)
    os.chmod(d.state_dir, 0o755)
    d.start()
    assert stat.S_IMODE(d.state_dir.stat().st_mode) == 0o700
    for root, dirs, files in os.walk(d.state_dir):
        for n in dirs + files:
            mode = stat.S_IMODE(os.lstat(Path(root) / n).st_mode)
            want = 0o700 if n in dirs else 0o600
            assert mode == want, f"{Path(root) / n}: {oct(mode)}, want {oct(want)}"
