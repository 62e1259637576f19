"""What the admin tools say and return in the corners: expire matches names
as lookups do and its exit status follows its help; --check-config
refuses a user that does not exist; a socket left by a killed daemon and a
domain whose source changed on reload are named for what they are.
"""
import subprocess

import pytest

import nsenv

pytestmark = pytest.mark.usefixtures("as_root")


def cli(idcache, d, *args):
    argv = [str(idcache), args[0], "--run-dir", str(d.run_dir)] + list(args[1:])
    p = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    return nsenv.Result(p.returncode, p.stdout, p.stderr, 0, argv)


def test_expire_matches_names_as_lookups_do(idcache, daemons):
    d = daemons.start("alice:x:2600:100::/:/bin/sh\n", "staff:x:100:alice\n")
    r = cli(idcache, d, "expire", "--user", "ALICE")  # files domains are case-sensitive
    assert r.rc == 1 and "0 entries expired" in r.out, r
    assert "no cached user is named 'ALICE'" in r.err, r
    r = cli(idcache, d, "expire", "--user", "alice")
    assert r.rc == 0 and "1 entries expired" in r.out, r
    r = cli(idcache, d, "expire", "--group", "nosuch")
    assert r.rc == 1, r
    r = cli(idcache, d, "expire", "--all")
    assert r.rc == 0, r


def test_check_config_refuses_a_missing_user(idcached_bin, tmp_path):
    run = nsenv.make_private_dir()
    try:
        conf = tmp_path / "idcache.conf"
        base = (f"[idcache]\nrun_dir = {run}/run\nstate_dir = {run}/state\n"
                "user = {user}\n[domain/local]\nid_provider = files\n")
        conf.write_text(base.format(user="nosuchuser-idc"))
        p = subprocess.run([str(idcached_bin), "--check-config", "-c", str(conf)],
                           capture_output=True, text=True, timeout=10)
        assert p.returncode == 1, p
        assert "user = nosuchuser-idc: no such user" in p.stderr, p.stderr
        conf.write_text(base.format(user="root"))
        p = subprocess.run([str(idcached_bin), "--check-config", "-c", str(conf)],
                           capture_output=True, text=True, timeout=10)
        assert p.returncode == 0 and "config OK" in p.stdout, p
    finally:
        nsenv.remove_tree(run)


def test_socket_left_by_a_killed_daemon_is_named(idcache, daemons):
    d = daemons.start("u:x:2601:100::/:/bin/sh\n", "g:x:100:\n")
    d.kill()
    assert (d.run_dir / "admin.sock").exists()
    r = cli(idcache, d, "status")
    assert r.rc == 1 and "nothing listens on it" in r.err, r
    d.start()
    assert cli(idcache, d, "status").rc == 0


def test_reload_says_a_changed_domain_is_loaded_anew(idcache, daemons):
    d = daemons.start("u:x:2602:100::/:/bin/sh\n", "g:x:100:\n")
    other = d.base / "passwd2"
    nsenv.write_atomic(other, "v:x:2603:100::/:/bin/sh\n")
    d.conf.write_text(d.conf.read_text().replace(f"passwd_files = {d.passwd}\n",
                                                 f"passwd_files = {d.passwd},{other}\n"))
    r = cli(idcache, d, "reload")
    assert r.rc == 0, r
    ok, _ = nsenv.wait_for(lambda: d.ns.run(["getent", "passwd", "v"]).rc == 0, 5)
    assert ok
    log = d.log()
    assert "domain local: its source changed; loading it anew" in log, log
    assert "no longer served" not in log, log


def test_warns_when_no_files_domain_reads_the_host_files(daemons):
    """With the recommended "idcache [NOTFOUND=return] files" a miss is
    final while the daemon runs: a configuration without a files domain for
    /etc/passwd and /etc/group says so at start, and one with it does not."""
    d = daemons.start("alice:x:2600:100::/:/bin/sh\n", "staff:x:100:alice\n")
    for f, db in (("/etc/passwd", "passwd"), ("/etc/group", "group")):
        assert (f"no files domain reads {f}: with \"{db}: idcache [NOTFOUND=return] files\""
                in d.log()), d.log()[-2000:]
    d.stop()
    host = daemons.start("", "", domain_conf=(
        "\n[domain/host]\nid_provider = files\npasswd_files = /etc/passwd\n"
        "group_files = /etc/group\n"), idcache_conf="domains = host, local\n")
    assert "no files domain reads" not in host.log(), host.log()[-2000:]
