"""An offline LDAP domain comes back when the admin says so: SIGUSR2 makes
it probe its servers at once instead of after offline_timeout (60 s by
default), and `idcache reload` (or SIGHUP) starts it over, which connects
at once too (and says so, not that the domain is no longer served)."""
import os
import signal
import time

import pytest

import nsenv
from test_e2e_ldap import cli, private_slapd, start_daemon, status

pytestmark = [pytest.mark.usefixtures("as_root")] + \
    __import__("test_e2e_ldap").pytestmark[1:]


@pytest.fixture
def server(tmp_path_factory):
    for s in private_slapd("idc-ldap-online-", "s"):
        yield s
        try:  # a test may leave it stopped (SIGSTOP)
            os.kill(s.pid, signal.SIGCONT)
        except (ProcessLookupError, TypeError):
            pass


def go_offline(idcache, d, s):
    nsenv.stop_process(s.pid)  # the server stops answering
    cli(idcache, d, "expire", "--all")
    d.ns.run(["getent", "passwd", "alice"])  # the search times out: offline
    ok, _ = nsenv.wait_for(lambda: status(idcache, d)["domain.dir.state"] == "offline", 15)
    assert ok, status(idcache, d)
    os.kill(s.pid, signal.SIGCONT)  # back, but the probe is 60 s away


@pytest.mark.parametrize("how", ["reload", "SIGUSR2"])
def test_offline_domain_probes_when_told(idcache, daemons, server, how):
    d = start_daemon(daemons, server.uri, "offline_timeout = 60\n")
    assert d.ns.run(["id", "alice"]).rc == 0
    go_offline(idcache, d, server)
    t0 = time.monotonic()
    if how == "reload":
        cli(idcache, d, "reload")
    else:
        d.signal(signal.SIGUSR2)
    ok, waited = nsenv.wait_for(lambda: status(idcache, d)["domain.dir.state"] == "online", 10)
    print(f"{how}: online again after {time.monotonic() - t0:.3f}s")
    assert ok, status(idcache, d)
    assert waited < 10
    if how == "reload":
        assert "domain dir: connecting anew with the options in force" in d.log()
        assert "no longer served" not in d.log()
    d.check_alive()
