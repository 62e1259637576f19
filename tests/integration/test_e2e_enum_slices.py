"""The enumeration snapshot is built in slices across loop turns
(src/daemon/responder.c, docs/DESIGN.md §8 and §12): while one client's
`getent passwd` waits for the snapshot of a 200,000-user files domain,
other clients' lookups are answered. Asserted as an order of events (the
lookups' answers come before the enumeration's first reply), never as a
time. Also: the listing stays whole and in order with commits between
slices, and a client gone, a reload or a stop during a build are safe.
"""
import select
import signal

import pytest

import nsenv
from test_attack_mem import P, Tiny

N_USERS = 200000


def passwd_text():
    return "".join(f"s{i:06d}:x:{100000 + i}:{100000 + i % 50}:Slice test user {i}:"
                   f"/home/s{i:06d}:/bin/sh\n" for i in range(N_USERS))


@pytest.fixture(scope="module")
def big(module_daemons):
    base = nsenv.make_private_dir("idc-slices-")
    tiny = Tiny(base)
    d = module_daemons.start(passwd_text(), "sg:x:100000:s000001\n", timeout=180, domain_conf=(
        f"\n[domain/tiny]\nid_provider = files\npasswd_files = {tiny.passwd}\n"
        f"group_files = {tiny.group}\n"))
    d.tiny = tiny
    yield d
    nsenv.remove_tree(base)


def sock(d):
    return d.run_dir / "nss.sock"


def replied(c):
    """Whether c's socket has a reply waiting."""
    return bool(select.select([c.s], [], [], 0)[0])


def lookups_while_building(d):
    """Ask SETPWENT on one connection (a fresh snapshot needed: a commit
    first), then getpwnam on another, one after the other, until the
    SETPWENT's reply is there: how many lookups were answered before it."""
    d.tiny.commit(sock(d))
    enum, other = P.Client(sock(d), timeout=120), P.Client(sock(d), timeout=120)
    try:
        enum.s.sendall(P.frame(P.SETPWENT))
        answered = 0
        while not replied(enum):
            got = other.getpwnam(f"s{answered % N_USERS:06d}")
            assert isinstance(got, tuple), got
            answered += 1
        _, st, _ = enum.call_raw(b"")
        assert st == P.OK
        return answered
    finally:
        enum.close()
        other.close()


def test_lookups_answered_while_building(big):
    """A build in one turn answered the SETPWENT before the next lookup was
    read (at most one or two before it); in slices, many are."""
    answered = lookups_while_building(big)
    print(f"lookups answered while the snapshot was built: {answered}")
    assert answered >= 5, answered
    big.check_alive()


def names(recs):
    return [r[0] for r in recs]


def test_listing_whole_with_commits_between_slices(big):
    """Commits of the second domain land while the first one's slices are
    read: every user is listed once, in the files' order, the second
    domain's users after them."""
    d = big
    d.tiny.commit(sock(d))
    enum = P.Client(sock(d), timeout=120)
    try:
        enum.s.sendall(P.frame(P.SETPWENT))
        commits = 0
        while not replied(enum) and commits < 3:
            d.tiny.commit(sock(d))
            commits += 1
        _, st, _ = enum.call_raw(b"")
        assert st == P.OK
        recs = []
        while True:
            st, p = enum.call_raw(P.frame(P.GETPWENT, P.U32.pack(0) + P.U32.pack(1 << 20)))[1:]
            if st == P.NOTFOUND:
                break
            assert st == P.OK
            recs += P.decode_batch(p, True)
    finally:
        enum.close()
    got = names(recs)
    assert got[:N_USERS] == [f"s{i:06d}" for i in range(N_USERS)]
    tiny = got[N_USERS:]
    assert len(tiny) == len(set(tiny))
    # the tiny domain is read last: what it held when its slice read it
    assert tiny == [f"t{i}" for i in range(len(tiny))], tiny
    assert len(tiny) >= d.tiny.n + 1 - commits, (len(tiny), d.tiny.n, commits)
    d.check_alive()


def test_first_getpwent_waits_for_the_build(big):
    """A GETPWENT without SETPWENT starts the build too and is answered
    with the map's first records once it is built."""
    d = big
    d.tiny.commit(sock(d))
    c = P.Client(sock(d), timeout=120)
    try:
        _, st, p = c.call_raw(P.frame(P.GETPWENT, P.U32.pack(10) + P.U32.pack(1 << 20)))
        assert st == P.OK
        assert names(P.decode_batch(p, True)) == [f"s{i:06d}" for i in range(10)]
    finally:
        c.close()
    d.check_alive()


def test_client_gone_and_reload_during_build(big):
    """One client leaves while the snapshot it asked for is built, and a
    reload comes during the build: the build starts over, the one still
    waiting gets the whole listing, nothing leaks or crashes."""
    d = big
    d.tiny.commit(sock(d))
    gone = P.Client(sock(d), timeout=120)
    gone.s.sendall(P.frame(P.SETPWENT))
    gone.close()
    waiting = P.Client(sock(d), timeout=120)
    try:
        d.signal(signal.SIGHUP)
        recs = waiting.enumerate(True)
    finally:
        waiting.close()
    assert names(recs)[:N_USERS] == [f"s{i:06d}" for i in range(N_USERS)]
    assert len(recs) == N_USERS + d.tiny.n + 1
    d.check_alive()


def test_stop_during_build(big):
    """SIGTERM while a snapshot is being built: a clean exit (0)."""
    d = big
    d.tiny.commit(sock(d))
    c = P.Client(sock(d), timeout=120)
    c.s.sendall(P.frame(P.SETPWENT))
    assert not replied(c)
    rc = d.stop(timeout=60)
    c.close()
    assert rc == 0, d.log()[-3000:]
    d.expected_exit = True
