"""Reloads (SIGHUP: logrotate's postrotate, `systemctl reload`) while
lookups wait for a directory. An ldap domain starts over on every reload
(a new connection with the options in force); a lookup that was waiting
for the old one is asked again of the new one, and answered as if no
reload had happened."""
import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

import nsenv
import test_e2e_ldap as tel
from test_e2e_ldap_fresh import server  # noqa: F401 (a fixture)
from test_e2e_ldap_nested import FLAT
from test_e2e_precedence import DIRECTORY, LOCAL_GROUP, LOCAL_PASSWD, dir_domain, slapd_holding

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "load"))
import idcproto as P  # noqa: E402

pytestmark = pytest.mark.usefixtures("as_root")


@pytest.fixture(scope="module")
def directory():
    yield from slapd_holding("idc-reload-ldap-", "r", DIRECTORY)


def test_lookup_waiting_for_the_directory_survives_a_reload(daemons, directory):
    """The directory is stopped (SIGSTOP) while lookups of a user, a group
    and a user's groups, none cached yet, wait for it; the daemon reloads
    (its configuration unchanged); the directory resumes: each is
    answered. Before, each failed (TRYAGAIN: glibc says "no such user")."""
    d = daemons.start(LOCAL_PASSWD, LOCAL_GROUP, idcache_conf="domains = local, dir\n",
                      domain_conf=dir_domain(directory.uri))
    assert P.Client(d.run_dir / "nss.sock", timeout=20).getpwnam("root")[0] == "root"
    got = {}

    def ask(op, name):
        c = P.Client(d.run_dir / "nss.sock", timeout=30)
        got[op] = c.call(op, name)
        c.close()

    nsenv.stop_process(directory.pid)
    try:
        threads = [threading.Thread(target=ask, args=a) for a in
                   ((P.GETPWNAM, "ldapuser"), (P.GETGRNAM, "devs"), (P.INITGROUPS, "ldapuser"))]
        for t in threads:
            t.start()
        time.sleep(0.5)  # the search is out, unanswered
        d.signal(signal.SIGHUP)
        time.sleep(0.5)
    finally:
        os.kill(directory.pid, signal.SIGCONT)
    for t in threads:
        t.join(40)
    assert [got[op][0] for op in (P.GETPWNAM, P.GETGRNAM, P.INITGROUPS)] == [P.OK] * 3, \
        (got, d.log()[-3000:])
    assert P.decode_passwd(got[P.GETPWNAM][1])[0] == "ldapuser"
    assert P.decode_group(got[P.GETGRNAM][1])[0] == "devs"
    d.check_alive()


def test_reload_storm_during_enumeration_and_lookups(daemons, server):  # noqa: F811
    """SIGHUP every 30 ms for 15 s (the configuration changing every other
    time) while the domain enumerates (each reload starts it over, and its
    enumeration with it) and clients look up groups and group lists whose
    entries expire each second: every answer is the directory's, none
    fails, and the daemon keeps running. The retired domain, freed after
    the reload's batch, finished a store in flight there and told the maps
    its changes with its configuration already freed (a use after free:
    MALLOC_PERTURB_ makes freed memory garbage, so it crashed)."""
    d = daemons.start(tel.LOCAL_PASSWD, tel.LOCAL_GROUP, idcache_conf="domains = local, dir\n",
                      domain_conf=tel.ldap_domain(server.uri, "enumerate = true\n"
                                                  "entry_cache_timeout = 1\n"), start=False)
    d.wrap += ["env", "MALLOC_PERTURB_=165"]
    d.start()
    stop = threading.Event()

    def reloads():
        while not stop.is_set():
            conf = d.conf.read_text()
            extra = "ldap_page_size = 7\n"
            d.conf.write_text(conf.replace(extra, "") if extra in conf else conf + extra)
            d.signal(signal.SIGHUP)
            stop.wait(0.03)

    t = threading.Thread(target=reloads)
    t.start()
    wrong, failed, n = [], [], 0
    try:
        t0 = time.monotonic()
        while time.monotonic() - t0 < 15 and d.alive():
            asks = [["getent", "group", g] for g in FLAT] + [["id", "-G", "alice"]]
            for a, r in zip(asks, d.ns.run_many(asks, env={"IDCACHE_MEMCACHE": "no"})):
                n += 1
                if r.rc != 0:
                    failed.append(a)
                elif a[1] == "group" and r.out.strip() != FLAT[a[2]]:
                    wrong.append((a, r.out))
    finally:
        stop.set()
        t.join()
    print(f"{n} lookups during the reload storm: {len(failed)} failed, {len(wrong)} wrong")
    d.check_alive()
    assert not wrong and not failed, (wrong[:3], failed[:3])
