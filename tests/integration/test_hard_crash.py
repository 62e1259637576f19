"""Crash safety (docs/DESIGN.md §10): kill -9 of idcached during a
100,000-user files load and of `idcache db import` during a large LDIF
import, damaged timestamps databases, and a full disk.

Every store a kill leaves must open, pass `idcache db check`, and hold
exactly one data set: the files data sets are built so that a mix is
visible (version A gives every user gecos "A" and a home under /home/A,
version B "B" and /home/B), and an import is all of the LDIF or none.

Kill points are random (a seeded RNG; the seed is printed) over a window
measured on this machine, so both outcomes occur in a run; counts are
printed, never required.
"""
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import nsenv

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "load"))
import idcproto as P  # noqa: E402

pytestmark = pytest.mark.usefixtures("as_root")

N_USERS = 100_000
KILLS = int(os.environ.get("IDCACHE_HARD_KILLS", "12"))
SEED = int(os.environ.get("IDCACHE_HARD_SEED", str(int(time.time()) % 100000)))


def passwd_version(letter, n=N_USERS):
    return "".join(f"u{i:06d}:x:{100000 + i}:{100000 + i % 50}:{letter}:/home/{letter}/u{i:06d}:"
                   "/bin/sh\n" for i in range(n))


def group_text(n=N_USERS):
    return "".join(f"g{k:02d}:x:{100000 + k}:" + ",".join(f"u{i:06d}" for i in range(k, n, 1000))
                   + "\n" for k in range(50))


def db(idcache, store, *args, timeout=120):
    p = subprocess.run([str(idcache), "db", "-d", str(store)] + list(args),
                       capture_output=True, text=True, timeout=timeout)
    return nsenv.Result(p.returncode, p.stdout, p.stderr, 0, ["idcache db"] + list(args))


def store_letters(idcache, store):
    """{letter: count} over every user in the store; raises on a user whose
    gecos and home disagree (a torn entry)."""
    r = db(idcache, store, "search", "(objectClass=user)", "gecos", "homeDirectory")
    assert r.rc == 0, r
    letters = {}
    for block in r.out.split("\n\n"):
        if not block.strip():
            continue
        gecos = re.search(r"^gecos: (.*)$", block, re.M)
        home = re.search(r"^homeDirectory: /home/(.)/", block, re.M)
        assert gecos and home, f"user entry without gecos/home: {block!r}"
        assert gecos.group(1) == home.group(1), f"torn entry: {block!r}"
        letters[gecos.group(1)] = letters.get(gecos.group(1), 0) + 1
    return letters


def sample_served(d, letter, rng, n=200):
    """getpwnam of n random users over the socket: all report letter."""
    c = P.Client(d.run_dir / "nss.sock")
    try:
        for i in rng.sample(range(N_USERS), n):
            rec = c.getpwnam(f"u{i:06d}")
            assert isinstance(rec, tuple), f"u{i:06d}: status {rec}"
            assert rec[4] == letter and rec[5].startswith(f"/home/{letter}/"), rec
    finally:
        c.close()


def wait_log(d, needle, since, timeout=30.0):
    got, _ = nsenv.wait_for(lambda: needle in d.log()[since:], timeout=timeout)
    return got


# ==== kill -9 during a files load ==========================================================

def test_kill9_during_100k_user_files_load(daemons, idcache):
    rng = random.Random(SEED)
    print(f"seed {SEED}, {KILLS} kills")
    d = daemons.start(passwd_version("A"), group_text(), timeout=120)
    store = d.state_dir / "cache.mdb"
    # How long a full A->B change takes to land, to spread the kills over it.
    since = len(d.log())
    t0 = time.monotonic()
    nsenv.write_atomic(d.passwd, passwd_version("B"))
    assert wait_log(d, "domain local: users", since), d.log()[-2000:]
    window = (time.monotonic() - t0) * 1.3
    cur = "B"
    texts = {x: passwd_version(x) for x in "AB"}
    outcomes = {"old": 0, "new": 0}
    for k in range(KILLS):
        new = "A" if cur == "B" else "B"
        since = len(d.log())
        nsenv.write_atomic(d.passwd, texts[new])
        delay = rng.uniform(0, window)
        time.sleep(delay)
        d.kill()
        r = db(idcache, store, "check")
        assert r.rc == 0 and "consistent" in r.out, f"kill {k} after {delay:.3f}s: {r!r}"
        letters = store_letters(idcache, store)
        assert len(letters) == 1, f"kill {k} after {delay:.3f}s: a mix in the store: {letters}"
        (got, count), = letters.items()
        assert count == N_USERS, f"kill {k}: {count} users, want {N_USERS}"
        assert got in (cur, new)
        outcomes["new" if got == new else "old"] += 1
        d.start(timeout=120)
        # Restarted, it serves at once and has applied the file on disk.
        sample_served(d, new, rng)
        cur = new
    print(f"files load killed {KILLS} times over a {window * 1000:.0f} ms window: "
          f"{outcomes['old']} old data set, {outcomes['new']} new data set, never a mix")
    # The whole map, enumerated through the protocol, is one version.
    c = P.Client(d.run_dir / "nss.sock", timeout=60)
    users = [u for u in c.enumerate(users=True) if u[0].startswith("u")]
    c.close()
    assert len(users) == N_USERS
    assert {u[4] for u in users} == {cur}


# ==== kill -9 during an LDIF import ===========================================================

BASE_LDIF = """dn: dc=example,dc=com
objectClass: top
objectClass: dcObject
objectClass: organization
o: example
dc: example

dn: ou=people,dc=example,dc=com
objectClass: top
objectClass: organizationalUnit
ou: people

dn: ou=groups,dc=example,dc=com
objectClass: top
objectClass: organizationalUnit
ou: groups
"""


def entries(idcache, store):
    r = db(idcache, store, "stats")
    assert r.rc == 0, r
    return int(re.search(r"^entries:\s+(\d+)", r.out, re.M).group(1))


def test_kill9_during_ldif_import(idcache, gen_ldif, tmp_path):
    if gen_ldif is None:
        pytest.skip("bench/idcache-gen-ldif not built")
    rng = random.Random(SEED + 1)
    full = subprocess.run([str(gen_ldif), "--users", str(N_USERS)], capture_output=True,
                          check=True).stdout
    # The generator's first records are the three above; import the rest.
    cut = full.index(b"dn: uid=")
    body = tmp_path / "body.ldif"
    body.write_bytes(full[cut:])
    base_store = tmp_path / "base"
    assert db(idcache, base_store, "init").rc == 0
    (tmp_path / "base.ldif").write_text(BASE_LDIF)
    assert db(idcache, base_store, "import", "-q", tmp_path / "base.ldif").rc == 0
    n_base = entries(idcache, base_store)
    assert n_base == 3

    # One complete import, timed: the kill window.
    ref = tmp_path / "ref"
    shutil.copytree(base_store, ref)
    t0 = time.monotonic()
    r = db(idcache, ref, "import", "-q", body)
    window = (time.monotonic() - t0) * 1.2
    assert r.rc == 0, r
    n_all = entries(idcache, ref)
    assert n_all > N_USERS

    outcomes = {"none": 0, "all": 0}
    for k in range(KILLS):
        st = tmp_path / f"s{k}"
        shutil.copytree(base_store, st)
        p = subprocess.Popen([str(idcache), "db", "-d", str(st), "import", "-q", str(body)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        delay = rng.uniform(0, window)
        time.sleep(delay)
        p.send_signal(signal.SIGKILL)
        p.wait()
        r = db(idcache, st, "check")
        assert r.rc == 0 and "consistent" in r.out, f"kill {k} after {delay:.3f}s: {r!r}"
        n = entries(idcache, st)
        assert n in (n_base, n_all), f"kill {k} after {delay:.3f}s: {n} entries, " \
                                     f"want {n_base} or {n_all}"
        outcomes["all" if n == n_all else "none"] += 1
        if n == n_base and k % 4 == 0:
            # The killed writer left its lock file behind: a new import works.
            r = db(idcache, st, "import", "-q", body)
            assert r.rc == 0, r
            assert entries(idcache, st) == n_all
        shutil.rmtree(st)
    print(f"import of {n_all - n_base} entries killed {KILLS} times over a "
          f"{window * 1000:.0f} ms window: {outcomes['none']} none, {outcomes['all']} all")


def test_kill9_import_at_fixed_points_keeps_earlier_data(idcache, gen_ldif, tmp_path):
    """The whole-file import writes the map in place (WRITEMAP): pages of
    the open transaction reach the file before its commit. A kill at fixed
    fractions of the import's time (reading and preparing, writing the
    indexes, the closing sync) into a store already holding a data set
    leaves that set alone or adds all of the file, and the store opens on
    the ordinary path and passes its check."""
    if gen_ldif is None:
        pytest.skip("bench/idcache-gen-ldif not built")
    n_users = 30_000
    gen = [str(gen_ldif), "--users", str(n_users)]
    first, second = tmp_path / "first.ldif", tmp_path / "second.ldif"
    first.write_bytes(subprocess.run(gen, capture_output=True, check=True).stdout)
    # more users beside them: an import into indexes that hold data
    more = subprocess.run(gen + ["--uid-prefix", "v", "--groups", "0"], capture_output=True,
                          check=True).stdout
    second.write_bytes(more[more.index(b"dn: uid="):])
    base = tmp_path / "base"
    assert db(idcache, base, "init").rc == 0
    assert db(idcache, base, "import", "-q", first).rc == 0
    n_base = entries(idcache, base)
    ref = tmp_path / "ref"
    shutil.copytree(base, ref)
    t0 = time.monotonic()
    assert db(idcache, ref, "import", "-q", second).rc == 0
    took = time.monotonic() - t0
    n_all = entries(idcache, ref)
    assert n_all == n_base + n_users
    for frac in (0.05, 0.25, 0.45, 0.6, 0.75, 0.9):
        st = tmp_path / "st"
        shutil.copytree(base, st)
        p = subprocess.Popen([str(idcache), "db", "-d", str(st), "import", "-q", str(second)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(took * frac)
        p.send_signal(signal.SIGKILL)
        p.wait()
        r = db(idcache, st, "check")
        assert r.rc == 0 and "consistent" in r.out, f"kill at {frac:.2f}: {r!r}"
        n = entries(idcache, st)
        assert n in (n_base, n_all), f"kill at {frac:.2f}: {n} entries, want {n_base} or {n_all}"
        r = db(idcache, st, "search", "(uid=u*)", "1.1")
        assert r.rc == 0 and r.out.count("dn: ") == n_users, f"kill at {frac:.2f}: {r!r}"
        # a key holding every user: hundreds of id blocks, the last ones
        # filled and added by this import when it committed
        r = db(idcache, st, "search", "(objectClass=posixAccount)", "1.1")
        want = n_users * (2 if n == n_all else 1)
        assert r.rc == 0 and r.out.count("dn: ") == want, f"kill at {frac:.2f}: {r!r}"
        print(f"kill at {frac:.2f} of {took * 1000:.0f} ms: {'all' if n == n_all else 'none'}")
        shutil.rmtree(st)


# ==== the timestamps database ===================================================================

SMALL = 2000


def small_passwd(letter="A", n=SMALL):
    return "".join(f"s{i:05d}:x:{60000 + i}:{60000 + i % 10}:{letter}:/home/{letter}/s{i}:/bin/sh\n"
                   for i in range(n))


def small_group(n=SMALL):
    return "".join(f"sg{k}:x:{60000 + k}:" + ",".join(f"s{i:05d}" for i in range(k, n, 10))
                   + "\n" for k in range(10))


def check_serving(d, letter, idcache=None):
    c = P.Client(d.run_dir / "nss.sock")
    try:
        for i in (0, 1, SMALL // 2, SMALL - 1):
            rec = c.getpwnam(f"s{i:05d}")
            assert isinstance(rec, tuple) and rec[4] == letter, (i, rec, d.log()[-2000:])
        st, p = c.call(P.INITGROUPS, "s00003")
        assert st == P.OK and 60003 in P.decode_gids(p), (st, p)
    finally:
        c.close()
    if idcache is not None:
        r = subprocess.run([str(idcache), "user", "--run-dir", str(d.run_dir), "s00001"],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 0 and "s00001" in r.stdout, r


def damage(path, how, rng):
    if how == "delete":
        path.unlink()
        Path(str(path) + "-lock").unlink(missing_ok=True)
    elif how == "truncate0":
        os.truncate(path, 0)
    elif how == "truncate_half":
        os.truncate(path, path.stat().st_size // 2)
    elif how == "random_meta":  # the two meta pages
        with open(path, "r+b") as f:
            f.write(rng.randbytes(8192))
    elif how == "random_all":
        size = path.stat().st_size
        with open(path, "r+b") as f:
            f.write(rng.randbytes(size))
    else:
        raise ValueError(how)


@pytest.mark.parametrize("how", ["delete", "truncate0", "truncate_half", "random_meta",
                                 "random_all"])
def test_timestamps_damaged_while_stopped(daemons, idcache, how):
    rng = random.Random(SEED + 2)
    d = daemons.start(small_passwd("A"), small_group())
    ts = d.state_dir / "timestamps.mdb"
    assert ts.exists()
    assert d.stop() == 0
    damage(ts, how, rng)
    d.start()
    check_serving(d, "A", idcache)
    # And it keeps working: a change lands (writing timestamps too).
    since = len(d.log())
    nsenv.write_atomic(d.passwd, small_passwd("B"))
    assert wait_log(d, "domain local: users", since), d.log()[-3000:]
    check_serving(d, "B", idcache)
    if how != "delete":
        print(f"{how}: " + (re.findall(r".*timestamps.*", d.log()) or ["(opened as is)"])[-1])


@pytest.mark.parametrize("how", ["delete", "truncate0", "truncate_half", "random_all"])
def test_timestamps_damaged_while_running(daemons, idcache, how):
    """Damage under a running daemon: it keeps serving, applies the next
    change (rebuilding the timestamps db if it must), and a restart finds
    a sound store."""
    rng = random.Random(SEED + 3)
    d = daemons.start(small_passwd("A"), small_group())
    ts = d.state_dir / "timestamps.mdb"
    damage(ts, how, rng)
    since = len(d.log())
    nsenv.write_atomic(d.passwd, small_passwd("B"))
    landed = wait_log(d, "domain local: users", since, timeout=5)
    if not d.alive():
        d.expected_exit = True  # reported here, not again at teardown
        r = db(idcache, d.state_dir / "cache.mdb", "check")
        assert r.rc == 0, r
        d.start()
        check_serving(d, "B")
        pytest.fail(f"idcached died with {d.proc.returncode} (a restart recovered)")
    check_serving(d, "B" if landed else "A")  # serving, whatever happened
    assert landed, "the change never landed: " + d.log()[since:][-2000:]
    check_serving(d, "B", idcache)
    assert d.stop() == 0
    r = db(idcache, d.state_dir / "cache.mdb", "check")
    assert r.rc == 0, r
    d.start()
    check_serving(d, "B", idcache)


# ==== full disk =====================================================================================

TMPFS_WRAP = r'''
set -e
mount -t tmpfs -o size="$1",mode=0755 idcache-hard "$2"
mount --bind "$3" /etc/passwd
mount --bind "$4" /etc/group
shift 4
exec "$@"
'''


class TmpfsDaemon(nsenv.Daemon):
    """A daemon whose state_dir is a small tmpfs in its own mount namespace;
    in_ns() runs a command in that namespace (nsenter by the daemon's pid)."""

    def in_ns(self, argv, check=True):
        p = subprocess.run(["nsenter", "-t", str(self.proc.pid), "-m", "--"] + list(argv),
                           capture_output=True, text=True, timeout=60)
        if check and p.returncode != 0:
            raise RuntimeError(f"{argv}: {p.returncode} {p.stderr}")
        return p


@pytest.fixture
def tmpfs_daemon(as_root, idcached_bin):
    made = []

    def start(passwd_text, group_txt, size="24m"):
        base = nsenv.make_private_dir("idc-hard-")
        sys_passwd, sys_group = nsenv.daemon_sys_files(base / "sys")
        wrap = ["unshare", "-m", "--propagation", "private", "--", "sh", "-c", TMPFS_WRAP,
                "tmpfs", size, str(base / "state"), str(sys_passwd), str(sys_group)]
        d = TmpfsDaemon(idcached_bin, base, passwd_text, group_txt, wrap=wrap)
        made.append(d)
        d.start(timeout=60)
        return d

    yield start
    for d in made:
        if d.alive():
            d.proc.send_signal(signal.SIGTERM)
            d.proc.wait(timeout=10)
        nsenv.remove_tree(d.base)


def test_full_disk_fails_the_transaction_and_recovers(tmpfs_daemon, idcache):
    n = 20000
    d = tmpfs_daemon(small_passwd("A", n), small_group(n), size="48m")
    state = str(d.state_dir)
    df = d.in_ns(["df", "-k", state]).stdout.splitlines()[-1]
    print(f"state_dir tmpfs before filling: {df}")
    # Fill it: dd stops at ENOSPC (exit status 1, expected).
    d.in_ns(["dd", "if=/dev/zero", f"of={state}/filler", "bs=64k"], check=False)
    print("after filling: " + d.in_ns(["df", "-k", state]).stdout.splitlines()[-1])
    since = len(d.log())
    nsenv.write_atomic(d.passwd, small_passwd("B", n))  # every entry changes: new pages
    assert wait_log(d, "refresh failed", since, timeout=15), d.log()[-3000:]
    failed = [x for x in d.log()[since:].splitlines() if "refresh failed" in x]
    print("logged: " + failed[0])
    assert "local" in failed[0]
    assert d.alive(), d.log()[-3000:]
    check_serving(d, "A", idcache)  # the last good data, whole

    # Space returns; the next change notice (a touch) brings the new data in.
    d.in_ns(["rm", "-f", f"{state}/filler"])
    since = len(d.log())
    os.utime(d.passwd)
    assert wait_log(d, "domain local: users", since, timeout=20), d.log()[-3000:]
    check_serving(d, "B", idcache)
    # The store the failed transactions left behind is sound (checked inside
    # the namespace: the tmpfs exists only there; check only reads).
    r = d.in_ns([str(idcache), "db", "-d", f"{state}/cache.mdb", "check"], check=False)
    assert r.returncode == 0 and "consistent" in r.stdout, (r.stdout, r.stderr)
    assert d.alive()
    d.proc.send_signal(signal.SIGTERM)
    assert d.proc.wait(timeout=10) == 0


def test_disk_filling_during_a_commit_says_no_space(tmpfs_daemon, idcache):
    """Room for part of a commit only: LMDB's write comes back short, which
    it reports as EIO; the log must still say what happened."""
    n = 20000
    d = tmpfs_daemon(small_passwd("A", n), small_group(n), size="48m")
    state = str(d.state_dir)
    avail_kb = int(d.in_ns(["df", "-k", "--output=avail", state]).stdout.split()[-1])
    leave_kb = 96  # less than the commit's first run of pages
    d.in_ns(["dd", "if=/dev/zero", f"of={state}/filler", "bs=4k",
             f"count={(avail_kb - leave_kb) // 4}"])
    print("after filling: " + d.in_ns(["df", "-k", state]).stdout.splitlines()[-1])
    since = len(d.log())
    nsenv.write_atomic(d.passwd, small_passwd("B", n))
    assert wait_log(d, "refresh failed", since, timeout=15), d.log()[-3000:]
    failed = [x for x in d.log()[since:].splitlines() if "refresh failed" in x]
    print("logged: " + failed[0])
    assert "No space left on device" in failed[0], failed[0]
    assert "Input/output error" not in d.log()[since:], d.log()[since:][-3000:]
    check_serving(d, "A", idcache)
    d.in_ns(["rm", "-f", f"{state}/filler"])
    since = len(d.log())
    os.utime(d.passwd)
    assert wait_log(d, "domain local: users", since, timeout=20), d.log()[-3000:]
    check_serving(d, "B", idcache)
    d.proc.send_signal(signal.SIGTERM)
    assert d.proc.wait(timeout=10) == 0


FILL_THEN_EXEC = 'dd if=/dev/zero of="$0/filler" bs=64k 2>/dev/null; exec "$@"'


@pytest.mark.parametrize("earlier_run", [False, True], ids=["fresh", "after-a-run"])
def test_full_disk_at_start_is_refused_not_a_crash(idcached_bin, idcache, earlier_run):
    """A state_dir already full when idcached starts. LMDB grows its lock
    file with ftruncate (a hole) and writes it through a shared map: on a
    full filesystem the first touch of a page that has no block is SIGBUS.
    The daemon must instead reserve the lock file's blocks and, when it
    cannot, stop with the file and the reason; after an earlier run the
    files exist and it starts and serves them."""
    base = nsenv.make_private_dir("idc-hard-")
    sys_passwd, sys_group = nsenv.daemon_sys_files(base / "sys")
    state = base / "state"
    ns = ["unshare", "-m", "--propagation", "private", "--", "sh", "-c", TMPFS_WRAP, "tmpfs",
          "24m", str(state), str(sys_passwd), str(sys_group)]
    d = TmpfsDaemon(idcached_bin, base, small_passwd("A"), small_group(), wrap=ns)
    try:
        if earlier_run:  # the same tmpfs: fill it under the running daemon, then restart
            d.wrap = ns + ["sh", "-c", 'exec "$@"', "run"]
            d.start(timeout=60)
            check_serving(d, "A", idcache)
        d.wrap = ns + ["sh", "-c", FILL_THEN_EXEC, str(state)]
        if earlier_run:  # keep the tmpfs (and what the first run left) for the second
            keep = subprocess.Popen(["nsenter", "-t", str(d.proc.pid), "-m", "--", "sleep", "60"])
            assert d.stop() == 0
            d.wrap = ["nsenter", "-t", str(keep.pid), "-m", "--", "sh", "-c", FILL_THEN_EXEC,
                      str(state)]
        try:
            d.start(timeout=60)
            started = True
        except nsenv.DaemonError:
            started = False
        rc = d.proc.poll() if not started else None
        assert rc is None or rc > 0, f"idcached killed by signal {-rc}:\n{d.log()[-2000:]}"
        if earlier_run:
            assert started, d.log()[-2000:]
            check_serving(d, "A", idcache)
        elif not started:
            last = d.log().strip().splitlines()[-2]
            assert str(state) in last and "No space left on device" in last, d.log()[-2000:]
    finally:
        if d.alive():
            d.proc.send_signal(signal.SIGTERM)
            d.proc.wait(timeout=10)
        if earlier_run:
            keep.kill()
            keep.wait()
        nsenv.remove_tree(base)
