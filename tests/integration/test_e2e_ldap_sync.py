"""Content synchronization (RFC 4533) against Debian's slapd with the
syncprov overlay (tests/ldap/slapd.sh, SLAPD_SYNCPROV=1), each test on a
directory of its own: what the directory changes is visible through NSS
(getent, id) within a bounded wait, with no search sent for lookups while
the feed is live; the feed resumes with its cookie after a server or
daemon restart; a server without syncprov is polled."""
import os
import signal
import subprocess
import time

import pytest

import nsenv
from test_e2e_ldap import (BASE, LDAP_DIR, SLAPD, Slapd, cli, free_port, start_daemon,
                           status)

pytestmark = [
    pytest.mark.usefixtures("as_root"),
    pytest.mark.skipif(not (os.access(SLAPD, os.X_OK) and os.path.exists(
        "/usr/lib/ldap/syncprov.so")), reason="needs Debian's slapd with syncprov"),
]

SYNC = "ldap_sync = syncrepl\nentry_cache_timeout = 1\n"
WAIT = 10  # seconds a change may take to show (loopback: milliseconds)


class SyncSlapd(Slapd):
    def start(self):
        old = os.environ.get("SLAPD_SYNCPROV")
        os.environ["SLAPD_SYNCPROV"] = "1"
        try:
            super().start()
        finally:
            if old is None:
                del os.environ["SLAPD_SYNCPROV"]
            else:
                os.environ["SLAPD_SYNCPROV"] = old

    def log_text(self):
        return (self.dir / "slapd.log").read_text(errors="replace")


@pytest.fixture
def sp():
    base = nsenv.make_private_dir("idc-sync-")
    s = SyncSlapd(base, "sp")
    s.start()
    yield s
    if s.pid is not None:
        try:
            os.kill(s.pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
    s.stop()
    nsenv.remove_tree(base)


def ldapmodify(server, ldif):
    p = subprocess.run(["ldapmodify", "-x", "-H", server.uri, "-D", f"cn=admin,{BASE}", "-w",
                        "secret"], input=ldif, capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr


def user_ldif(name, uid, gecos="Test User"):
    return (f"dn: uid={name},ou=people,{BASE}\nchangetype: add\nobjectClass: account\n"
            f"objectClass: posixAccount\nuid: {name}\ncn: {name}\nuidNumber: {uid}\n"
            f"gidNumber: {uid}\nhomeDirectory: /home/{name}\nloginShell: /bin/sh\n"
            f"gecos: {gecos}\n\n")


def wait_live(idcache, d, timeout=WAIT):
    ok, _ = nsenv.wait_for(lambda: status(idcache, d).get("domain.dir.sync") == "live",
                           timeout=timeout, interval=0.05)
    assert ok, (status(idcache, d), d.log()[-3000:])


def visible(d, argv, want, timeout=WAIT):
    """Wait until argv's output (through NSS) satisfies want(result);
    returns the seconds it took."""
    t0 = time.monotonic()
    ok, _ = nsenv.wait_for(lambda: want(d.ns.run(argv)), timeout=timeout, interval=0.02)
    assert ok, (argv, d.ns.run(argv), d.log()[-3000:])
    return time.monotonic() - t0


def searches(idcache, d):
    return int(status(idcache, d)["domain.dir.ldap_searches"])


def test_changes_are_pushed_without_lookup_searches(sp, daemons, idcache):
    d = start_daemon(daemons, sp.uri, SYNC)
    wait_live(idcache, d)
    n0, srch0 = searches(idcache, d), sp.srch_count()
    got = d.ns.run_many([["getent", "passwd", "alice"], ["id", "alice"], ["getent", "group",
                                                                          "dev"],
                         ["getent", "passwd", "nosuchuser"], ["getent", "passwd", "99999"]])
    assert got[0].rc == 0 and got[0].out.startswith("alice:x:10001:"), got[0]
    assert got[1].rc == 0 and "20014(top)" in got[1].out, got[1]
    assert got[2].rc == 0 and got[2].out.startswith("dev:x:20010:"), got[2]
    assert got[3].rc == 2 and got[4].rc == 2
    # add a user
    ldapmodify(sp, user_ldif("newbie", 10050))
    visible(d, ["getent", "passwd", "newbie"], lambda r: r.rc == 0 and ":10050:" in r.out)
    # modify it
    ldapmodify(sp, f"dn: uid=newbie,ou=people,{BASE}\nchangetype: modify\nreplace: gecos\n"
                   "gecos: Changed Gecos\n\n")
    visible(d, ["getent", "passwd", "newbie"], lambda r: "Changed Gecos" in r.out)
    # rename it
    ldapmodify(sp, f"dn: uid=newbie,ou=people,{BASE}\nchangetype: modrdn\nnewrdn: uid=oldie\n"
                   "deleteoldrdn: 1\n\n")
    visible(d, ["getent", "passwd", "oldie"], lambda r: r.rc == 0 and ":10050:" in r.out)
    visible(d, ["getent", "passwd", "newbie"], lambda r: r.rc == 2)
    visible(d, ["getent", "passwd", "10050"], lambda r: r.out.startswith("oldie:"))
    # delete it
    ldapmodify(sp, f"dn: uid=oldie,ou=people,{BASE}\nchangetype: delete\n\n")
    visible(d, ["getent", "passwd", "10050"], lambda r: r.rc == 2)
    visible(d, ["getent", "passwd", "oldie"], lambda r: r.rc == 2)
    assert searches(idcache, d) == n0, "lookups searched while the feed was live"
    assert sp.srch_count() == srch0, "the directory saw a search"
    st = status(idcache, d)
    assert st["domain.dir.sync_full_refreshes"] == "1", st
    assert int(st["domain.dir.sync_changes"]) >= 4, st
