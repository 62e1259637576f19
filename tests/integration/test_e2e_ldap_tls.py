"""End to end: servers that stall the TLS handshake must not freeze idcached.

A stall server completes the TCP connect and then stalls the TLS handshake:
as an ldaps:// URI it never answers the ClientHello; as a StartTLS server it
accepts the StartTLS extended request (a hand-built ExtendedResponse,
resultCode 0) and then never answers the ClientHello. The provider runs the
handshake on a helper thread, so while it stalls a files domain of the same
daemon keeps answering at once; after ldap_network_timeout (2 s here) the
attempt is given up and the lookup fails over to the next URI (a real slapd
from test_e2e_ldap's `env`), and stopping or reloading the daemon during a
stall neither waits for the timeout nor leaks (valgrind).
"""
import signal
import socket
import threading
import time

import pytest

import nsenv
from test_e2e_ldap import (LOCAL_GROUP, LOCAL_PASSWD, P, env, ldap_domain,  # noqa: F401
                           pytestmark, read_replies, start_daemon)

STARTTLS_OID = b"1.3.6.1.4.1.1466.20037"


def starttls_reply(req):
    """The success reply to the StartTLS request req: an LDAPMessage with
    req's messageID and an ExtendedResponse (RFC 4511 4.12, 4.14.2):
    resultCode success, empty matchedDN and diagnosticMessage,
    responseName 1.3.6.1.4.1.1466.20037. None when req is not a request
    with a short messageID."""
    if len(req) < 2 or req[0] != 0x30:
        return None
    at = 2 + (req[1] & 0x7F if req[1] & 0x80 else 0)
    if len(req) < at + 2 or req[at] != 0x02 or req[at + 1] > 4:
        return None
    msgid = req[at:at + 2 + req[at + 1]]
    body = (b"\x0a\x01\x00"  # resultCode: success
            b"\x04\x00\x04\x00"  # matchedDN, diagnosticMessage
            + b"\x8a" + bytes([len(STARTTLS_OID)]) + STARTTLS_OID)  # [10] responseName
    op = b"\x78" + bytes([len(body)]) + body  # [APPLICATION 24] ExtendedResponse
    return b"\x30" + bytes([len(msgid) + len(op)]) + msgid + op


class TlsStaller:
    """A loopback port whose connections stall the TLS handshake. "mute":
    the kernel's backlog takes them and nobody reads (ldaps://). "starttls":
    a thread answers the first request (StartTLS) with success and keeps
    the connection open and silent."""

    def __init__(self, mode):
        self.s = socket.socket()
        self.s.bind(("127.0.0.1", 0))
        self.s.listen(16)
        self.port = self.s.getsockname()[1]
        self.conns = []
        self.stopping = False
        self.thread = None
        if mode == "starttls":
            self.s.settimeout(0.2)
            self.thread = threading.Thread(target=self._serve, daemon=True)
            self.thread.start()

    def uri(self, scheme):
        return f"{scheme}://127.0.0.1:{self.port}"

    def _serve(self):
        while not self.stopping:
            try:
                c, _ = self.s.accept()
            except OSError:  # timeout, or closed
                continue
            self.conns.append(c)
            c.settimeout(5)
            try:
                reply = starttls_reply(c.recv(4096))
                if reply:
                    c.sendall(reply)
            except OSError:
                pass

    def close(self):
        self.stopping = True
        if self.thread:
            self.thread.join()
        self.s.close()
        for c in self.conns:
            c.close()


def test_starttls_reply_encoding():
    """The hand-built reply against a request libldap sends (ldap_start_tls
    as message 1): what a BER decoder would read."""
    req = bytes.fromhex("301d02010177188016") + STARTTLS_OID
    assert starttls_reply(req) == (bytes.fromhex("3024020101781f0a0100040004008a16")
                                   + STARTTLS_OID)


def files_lookups_while(d, stall_for, slow_request):
    """Send slow_request (it waits on the stalled handshake), then time a
    files-domain lookup every 0.1 s for stall_for seconds. (latencies,
    the slow client, its send time)."""
    slow = P.Client(d.run_dir / "nss.sock")
    fast = P.Client(d.run_dir / "nss.sock")
    t0 = time.monotonic()
    slow.s.sendall(slow_request)
    lat = []
    while time.monotonic() - t0 < stall_for:
        t = time.monotonic()
        assert fast.getpwnam("loc")[0] == "loc"
        lat.append(time.monotonic() - t)
        time.sleep(0.1)
    fast.close()
    return lat, slow, t0


def check_failover(d, slow, t0, lat, what):
    print(f"files lookups while the {what} stalls: {len(lat)}, "
          f"max {max(lat) * 1000:.1f} ms, mean {sum(lat) / len(lat) * 1000:.1f} ms")
    assert len(lat) >= 10 and max(lat) < 0.5, lat
    (cmd, st, payload), = read_replies(slow.s, 1)
    waited = time.monotonic() - t0
    print(f"the stalled lookup was answered by the next server after {waited:.2f} s")
    assert (cmd, st) == (P.GETPWNAM, P.OK)
    assert P.decode_passwd(payload)[:4] == ("alice", "x", 10001, 10001)
    assert 1.8 < waited < 8.0, waited  # ldap_network_timeout = 2
    slow.close()


def test_stalled_ldaps_handshake_does_not_freeze_the_daemon(env, module_daemons):  # noqa: F811
    """ldaps:// to a server that never answers the ClientHello, then a real
    server: files lookups stay fast during the stall, and after
    ldap_network_timeout the lookup is answered by the second URI."""
    st = TlsStaller("mute")
    b = env.servers["b"]
    try:
        d = start_daemon(module_daemons, f"{st.uri('ldaps')}, {b.uri}",
                         f"ldap_tls_cacert = {env.certs}/ca.pem\n")
        lat, slow, t0 = files_lookups_while(d, 1.6, P.request_frame(P.GETPWNAM, "alice"))
        check_failover(d, slow, t0, lat, "ldaps:// handshake")
        log = d.log()
        assert f"{st.uri('ldaps')}: TLS handshake: Timed out" in log, log[-2000:]
        assert f"connected to {b.uri}" in log
    finally:
        st.close()


def test_stalled_starttls_handshake_does_not_freeze_the_daemon(env, module_daemons):  # noqa: F811
    """A server that accepts StartTLS and then never answers the
    ClientHello, then a real StartTLS server: the same."""
    st = TlsStaller("starttls")
    a = env.servers["a"]
    try:
        d = start_daemon(module_daemons, f"{st.uri('ldap')}, {a.uri}",
                         "ldap_id_use_start_tls = true\n"
                         f"ldap_tls_cacert = {env.certs}/ca.pem\n")
        lat, slow, t0 = files_lookups_while(d, 1.6, P.request_frame(P.GETPWNAM, "alice"))
        check_failover(d, slow, t0, lat, "handshake after StartTLS")
        log = d.log()
        assert f"{st.uri('ldap')}: TLS handshake after StartTLS: Timed out" in log, log[-2000:]
        assert f"connected to {a.uri}" in log
        assert st.conns, "the StartTLS server saw no connection"
    finally:
        st.close()


def slow_domain(uris, extra=""):
    """ldap_domain with ldap_network_timeout = 30: a stall outlasts the test."""
    text = ldap_domain(uris, extra)
    assert "ldap_network_timeout = 2\n" in text
    return text.replace("ldap_network_timeout = 2\n", "ldap_network_timeout = 30\n")


def test_stop_during_stalled_tls_handshake(module_daemons):
    """SIGTERM while a handshake stalls (ldap_network_timeout = 30 s): the
    helper thread is ended and joined at once, the daemon exits 0."""
    st = TlsStaller("mute")
    try:
        d = module_daemons.start(LOCAL_PASSWD, LOCAL_GROUP, idcache_conf="domains = local, dir\n",
                                 domain_conf=slow_domain(st.uri("ldaps")))
        slow = P.Client(d.run_dir / "nss.sock")
        fast = P.Client(d.run_dir / "nss.sock")
        slow.s.sendall(P.request_frame(P.GETPWNAM, "alice"))
        time.sleep(0.5)  # the helper waits for the ServerHello
        t = time.monotonic()
        assert fast.getpwnam("loc")[0] == "loc"
        assert time.monotonic() - t < 0.5
        fast.close()
        t0 = time.monotonic()
        rc = d.stop(timeout=20)
        took = time.monotonic() - t0
        print(f"stopped during a stalled TLS handshake in {took * 1000:.0f} ms")
        assert rc == 0, d.log()[-2000:]
        assert took < 2.0, took
        slow.close()
    finally:
        st.close()


VALGRIND = nsenv.VALGRIND


@pytest.mark.skipif(VALGRIND is None, reason="valgrind not installed")
def test_stalled_tls_under_valgrind(env, idcached_bin, nss_module_dir):  # noqa: F811
    """Under valgrind: a StartTLS handshake that stalls until its deadline
    and fails over, a reload and a stop each while an ldaps:// handshake
    stalls on its helper thread: no invalid access, no leak."""
    base = nsenv.make_private_dir("idc-ldap-tls-vg-")
    ns = nsenv.NsEnv(nss_module_dir, base / "run", base / "ns")
    wrap, vglog = nsenv.valgrind_wrap(ns, base)
    starttls, mute = TlsStaller("starttls"), TlsStaller("mute")
    a = env.servers["a"]
    ca = f"ldap_tls_cacert = {env.certs}/ca.pem\n"
    d = nsenv.Daemon(idcached_bin, base, LOCAL_PASSWD, LOCAL_GROUP,
                     idcache_conf="domains = local, dir, stall\n",
                     domain_conf=ldap_domain(f"{starttls.uri('ldap')}, {a.uri}",
                                             "ldap_id_use_start_tls = true\n" + ca)
                     + slow_domain(mute.uri("ldaps"), ca).replace("[domain/dir]",
                                                                  "[domain/stall]"),
                     wrap=wrap)
    ok = False
    try:
        d.start(timeout=120)
        c = P.Client(d.run_dir / "nss.sock", timeout=60)
        # dir: StartTLS stalls for 2 s, then a answers
        c.s.sendall(P.request_frame(P.GETPWNAM, "alice"))
        (cmd, st, payload), = read_replies(c.s, 1, timeout=60)
        assert (cmd, st) == (P.GETPWNAM, P.OK)
        assert "TLS handshake after StartTLS: Timed out" in d.log()
        # stall: waits on its ldaps:// handshake (30 s); reload meanwhile
        c.s.sendall(P.request_frame(P.GETPWNAM, "nobody-here"))
        time.sleep(2)
        d.signal(signal.SIGHUP)
        nsenv.wait_for(lambda: "configuration reloaded" in d.log(), timeout=30)
        assert "configuration reloaded" in d.log()
        # the lookup the reload interrupted is asked again of the domain in
        # force, whose handshake stalls too: it still waits; stop meanwhile
        time.sleep(2)
        c.s.setblocking(False)
        with pytest.raises(BlockingIOError):
            c.s.recv(1)
        c.s.setblocking(True)
        t0 = time.monotonic()
        nsenv.stop_checked_by_valgrind(d, vglog)
        print(f"stopped under valgrind in {time.monotonic() - t0:.1f} s")
        c.close()
        ok = True
    finally:
        starttls.close()
        mute.close()
        nsenv.end_checked_run(d, base, ok)
