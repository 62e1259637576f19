"""Polling without a feed (ldap_sync = poll, ldap_poll_interval): each pass
asks only for entries whose change mark (entryCSN on slapd; entryUSN or
modifyTimestamp elsewhere) is not older than the newest the last pass saw;
a full pass every ldap_poll_full_interval removes what the directory no
longer has, and the mark survives a restart. Checked against slapd's own
log of the searches and of how many entries each returned."""
import re
import subprocess

import pytest

import nsenv
from test_e2e_ldap import BASE, cache_holds, private_slapd, pytestmark, start_daemon

assert pytestmark  # the same requirements (slapd, ldap-utils)

POLL = ("ldap_sync = poll\nentry_cache_timeout = 3600\nldap_poll_interval = 0.5\n"
        "ldap_poll_full_interval = 4\n")
SRCH = re.compile(r'conn=(\d+) op=(\d+) SRCH base="[^"]*" scope=\d deref=\d filter="([^"]*)"')
RESULT = re.compile(r"conn=(\d+) op=(\d+) SEARCH RESULT .*nentries=(\d+)")


@pytest.fixture
def server():
    yield from private_slapd("idc-ldap-poll-", "p")


def passes(server):
    """(filter, entries returned) of each poll search slapd logged."""
    log = (server.dir / "slapd.log").read_text(errors="replace")
    filters = {(m[1], m[2]): m[3] for m in SRCH.finditer(log)}
    out = []
    for m in RESULT.finditer(log):
        f = filters.get((m[1], m[2]), "")
        if f in ("(objectClass=posixAccount)", "(objectClass=posixGroup)") or ">=" in f:
            out.append((f, int(m[3])))
    return out


def change(server, ldif):
    subprocess.run(["ldapmodify", "-x", "-H", server.uri, "-D", f"cn=admin,{BASE}", "-w",
                    "secret"], input=ldif, text=True, check=True, capture_output=True,
                   timeout=30)


def test_incremental_passes_and_a_full_one_for_deletions(server, daemons, idcache):
    d = start_daemon(daemons, server.uri, POLL)
    assert d.ns.run(["getent", "passwd", "bob"]).rc == 0
    ok, _ = nsenv.wait_for(lambda: any(">=" in f for f, _ in passes(server)),
                           timeout=10, interval=0.1)
    assert ok, (passes(server), d.log()[-2000:])
    full = [n for f, n in passes(server) if ">=" not in f]
    assert full and full[0] >= 4, passes(server)  # the first pass fetched everything
    # a change is fetched by the next pass, not by a lookup (nothing expires)
    change(server, f"dn: uid=alice,ou=people,{BASE}\nchangetype: modify\nreplace: gecos\n"
                   "gecos: Polled Gecos\n\n")
    ok, _ = nsenv.wait_for(lambda: "Polled Gecos" in d.ns.run(["getent", "passwd",
                                                                "alice"]).out, timeout=10)
    assert ok, d.log()[-2000:]
    incremental = [n for f, n in passes(server) if ">=" in f]
    assert max(incremental) <= 2, passes(server)  # the changed entry, not the directory
    # a deletion: only a full pass can tell
    change(server, f"dn: uid=bob,ou=people,{BASE}\nchangetype: delete\n\n")
    ok, _ = nsenv.wait_for(lambda: cache_holds(idcache, d, "user", "bob") is None,
                           timeout=15, interval=0.2)
    assert ok, (passes(server), d.log()[-2000:])
    assert d.ns.run(["getent", "passwd", "10002"]).rc == 2
    # a restart goes on from the stored mark: its first pass is incremental
    d.stop()
    before = len(passes(server))
    d.start()
    ok, _ = nsenv.wait_for(lambda: len(passes(server)) > before, timeout=10, interval=0.1)
    assert ok
    assert ">=" in passes(server)[before][0], passes(server)[before:]


def test_first_pass_without_a_mark_fills_the_cache_at_once(server, daemons, idcache):
    """An empty cache (no stored mark) is filled by a full pass at start,
    not at the first jittered interval (here 300 s, past the bounded
    wait): the users are in the cache without a lookup asking for them."""
    d = start_daemon(daemons, server.uri, "ldap_sync = poll\nentry_cache_timeout = 3600\n"
                     "ldap_poll_interval = 300\n")
    ok, _ = nsenv.wait_for(lambda: cache_holds(idcache, d, "user", "bob") is not None,
                           timeout=30, interval=0.2)
    assert ok, (passes(server), d.log()[-2000:])
    full = [n for f, n in passes(server) if ">=" not in f]
    assert full and full[0] >= 4, passes(server)
