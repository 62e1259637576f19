"""An LDAP domain's answers into a cache that fills up: every full map
grows (cache.mdb's and timestamps.mdb's, however small they start), so an
enumeration stores every user and group; and when writes fail for good (a
full filesystem), what the cache holds is still served, what it lacks is
"try again" (never "not found"), and the failure is logged once with its
reason and shown by `idcache status`."""
import re
import subprocess
import time

import pytest

import nsenv
from test_e2e_ldap import LOCAL_GROUP, LOCAL_PASSWD, ldap_domain, private_slapd, pytestmark
from test_e2e_ldap import status

assert pytestmark  # the same requirements (slapd, ldap-utils)

NUSERS, NGROUPS = 3000, 600
ENUM = "enumerate = true\nldap_sync = poll\nentry_cache_timeout = 3600\n"

# getpwnam_r through glibc: "found", "notfound" (0 and no entry) or the
# error it returned (EAGAIN: the module said TRYAGAIN), one line per name.
PROBE = r"""
import ctypes, errno, sys
libc = ctypes.CDLL(None, use_errno=True)
class pw(ctypes.Structure):
    _fields_ = [("n", ctypes.c_char_p), ("p", ctypes.c_char_p), ("u", ctypes.c_uint),
                ("g", ctypes.c_uint), ("c", ctypes.c_char_p), ("d", ctypes.c_char_p),
                ("s", ctypes.c_char_p)]
for name in sys.argv[1:]:
    ent, buf, res = pw(), ctypes.create_string_buffer(65536), ctypes.POINTER(pw)()
    rc = libc.getpwnam_r(name.encode(), ctypes.byref(ent), buf, 65536, ctypes.byref(res))
    print(name, "found" if rc == 0 and res else "notfound" if rc == 0 else
          errno.errorcode.get(rc, str(rc)))
"""


def host_ids(path):
    """The ids of the host's passwd or group file: entries holding one are
    not served (the host's files come first)."""
    with open(path, encoding="utf-8", errors="replace") as f:
        return {int(x.split(":")[2]) for x in f if x.count(":") >= 3 and
                x.split(":")[2].isdigit()}


def directory(gen_ldif, path):
    """NUSERS users in NGROUPS rfc2307bis groups of 20 members on average
    (idcache-gen-ldif, made loadable by slapadd as bench/ldap_scale_bench.sh
    does). Returns the user and group names the daemon serves."""
    out = subprocess.run([str(gen_ldif), "--users", str(NUSERS), "--groups", str(NGROUPS),
                          "--members", "20"], capture_output=True, text=True, check=True,
                         timeout=60).stdout
    out = re.sub(r"\Aversion: 1\n\n", "", out)
    path.write_text(out.replace("objectClass: groupOfNames", "objectClass: extensibleObject"))
    uids, gids = host_ids("/etc/passwd"), host_ids("/etc/group")
    users, groups = [], []
    for block in out.split("\n\n"):
        attrs = dict(line.partition(": ")[::2] for line in block.splitlines())
        if "uidNumber" in attrs and int(attrs["uidNumber"]) not in uids:
            users.append(attrs["uid"])
        elif "uidNumber" not in attrs and "gidNumber" in attrs and \
                int(attrs["gidNumber"]) not in gids:
            groups.append(attrs["cn"])
    assert len(users) > NUSERS * 0.9 and len(groups) > NGROUPS * 0.9, (len(users), len(groups))
    return users, groups


@pytest.fixture(scope="module")
def names():
    return {}


@pytest.fixture
def server(gen_ldif, names):
    if gen_ldif is None:
        pytest.skip("bench/idcache-gen-ldif was not built")

    def write(path):
        names["users"], names["groups"] = directory(gen_ldif, path)
    yield from private_slapd("idc-ldap-store-", "s", write)


def start(daemons, uri, idcache_conf="", wrap=lambda d: []):
    """The daemon with domain dir enumerating uri; wrap(d) is put before
    its command line (inside its namespace)."""
    d = daemons.start(LOCAL_PASSWD, LOCAL_GROUP, idcache_conf="domains = local, dir\n" +
                      idcache_conf, domain_conf=ldap_domain(uri, ENUM), start=False)
    d.wrap += wrap(d)
    d.start()
    return d


def listed(d, db):
    r = d.ns.run(["getent", db])
    return {line.split(":")[0] for line in r.out.splitlines()}


def test_tiny_maps_grow_and_every_entry_is_stored(server, daemons, idcache, names):
    """cache.mdb from a 1 MiB map, timestamps.mdb from 256 KiB: both fill
    many times over. A full map met first by the search for another
    holder of a group's gid (it flushes the pending index writes) once
    failed every later page as "store data is corrupted", never grown."""
    d = start(daemons, server.uri, "cache_map_size = 1\n")
    users, groups = set(names["users"]), set(names["groups"])
    ok, _ = nsenv.wait_for(lambda: users <= listed(d, "passwd") and groups <= listed(d, "group"),
                           timeout=120, interval=1)
    assert ok, d.log()[-3000:]
    st = status(idcache, d)
    assert st["domain.dir.store_failures"] == "0", st
    assert st["domain.dir.store_error"] == "", st
    log = d.log()
    assert "cache.mdb: map full, grown" in log, log[-3000:]
    assert "timestamps.mdb: map full, grown" in log, log[-3000:]
    assert "refused" not in log and "corrupt" not in log, log[-3000:]


def test_failed_writes_never_say_not_found(server, daemons, idcache, names):
    """The state directory on a 1.25 MiB tmpfs (the daemon's own mount
    namespace): the enumeration's pages fail once it is full. (The first
    page's transaction takes ~0.9 MiB of cache.mdb: 1 MiB left it no room
    once the counts were kept on the containers, 16 KiB more.) Every user
    the cache holds is found; one it does not hold is found or "try
    again" (the directory has it, its answer could not be stored), never
    "not found"."""
    mount = 'mount -t tmpfs -o size=1280k,mode=0755 idc-full "$0" && exec "$@"'
    d = start(daemons, server.uri, wrap=lambda d: ["sh", "-c", mount, str(d.state_dir)])
    ok, _ = nsenv.wait_for(lambda: int(status(idcache, d)["domain.dir.store_failures"]) > 0,
                           timeout=60, interval=0.5)
    assert ok, d.log()[-3000:]
    # the enumeration is over (its last transaction failed too)
    ok, _ = nsenv.wait_for(lambda: status(idcache, d)["domain.dir.ldap_in_flight"] == "0",
                           timeout=60, interval=0.5)
    assert ok, d.log()[-3000:]
    st = status(idcache, d)
    assert "No space left on device" in st["domain.dir.store_error"], st
    cached = listed(d, "passwd")
    held = [n for n in names["users"] if n in cached]
    missing = [n for n in names["users"] if n not in cached]
    assert held and missing, (len(held), len(missing))  # the disk filled midway
    sample = held[::max(1, len(held) // 25)] + missing[::max(1, len(missing) // 25)]
    r = d.ns.run([nsenv.sys_python(), "-c", PROBE] + sample)
    assert r.rc == 0, r.err
    answers = dict(line.split() for line in r.out.splitlines())
    for n in held:
        if n in answers:
            assert answers[n] == "found", (n, answers[n], d.log()[-3000:])
    wrong = {n: a for n, a in answers.items() if a not in ("found", "EAGAIN")}
    assert not wrong, (wrong, d.log()[-3000:])
    assert any(answers[n] == "EAGAIN" for n in missing if n in answers), answers
    # one line per reason, however many pages and lookups failed
    refused = [x for x in d.log().splitlines() if "the cache refused" in x]
    assert refused and len(refused) == len(set(refused)) <= 4, refused


def test_stop_while_pages_are_stored(server, daemons, idcache, names):
    """SIGTERM at moments spread over the enumeration, the committer thread
    storing a page or its changes being told to the maps: the daemon exits
    0 each time. A page finished at stop told its changes to the maps,
    which look at every domain, after the files domain before it had been
    freed (a crash on SIGTERM); the cache is whole on the next start."""
    d = start(daemons, server.uri)
    rcs = []
    for delay in (0.0, 0.1, 0.3, 0.6, 1.0):
        time.sleep(delay)
        rcs.append(d.stop())
        d.start()
    assert rcs == [0] * len(rcs), (rcs, d.log()[-3000:])
    users = set(names["users"])
    ok, _ = nsenv.wait_for(lambda: users <= listed(d, "passwd"), timeout=120, interval=1)
    assert ok, d.log()[-3000:]
    st = status(idcache, d)
    assert st["domain.dir.store_failures"] == "0", st
