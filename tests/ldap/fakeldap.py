#!/usr/bin/python3
"""A hostile LDAPv3 server on loopback, for tests: just enough BER to answer
binds and searches the way a malicious or impersonated directory would.

    fakeldap.py MODE PORTFILE [COUNT]

listens on a free 127.0.0.1 port, writes it to PORTFILE, and serves until
killed. Every mode answers the rootDSE (the daemon's probe) and binds
normally, and holds one honest user, `alice`. MODE says what else it does:

  flood   a search for a user or a group by name or id is answered with
          COUNT entries (default 600000) before the result: the first is the
          name asked for, the rest invented; abandon requests are ignored
  giant   every search is answered with one message declaring a length of
          1.5 GB, followed by COUNT MiB (default 256) of filler
  nest    rfc2307bis groups generated on demand: `up0`'s ancestors
          (cn=upN has cn=up(N+1) as parent) and `down0`'s members
          (cn=downN has cn=down(N+1) as member) never end; user `deep` is a
          member of up0
  wide    getgrnam `wide0`: every group cn=wN has COUNT (default 20) member
          groups, named on demand, so each level of nesting is COUNT times
          larger than the one above
  fat     initgroups `fat`: the search for its groups is answered with
          groups without end, each with COUNT (default 2000) memberUid
          values
  fatdn   the same, each group with COUNT member DNs outside the base (they
          never resolve) besides memberUid `fat`
  endless an enumeration (objectClass filters only) gets entries without
          end, COUNT per page (default 1000), each page with a cookie that
          asks for the next one
  sync    content synchronization (RFC 4533) that refuses cookies: the
          rootDSE lists the Sync Request control; the first sync search
          gets alice, bob and group `staff` (both members), then the end
          of the refresh with cookie "c1", and stays open; a search with a
          cookie is answered e-syncRefreshRequired (4096); a later search
          without one gets alice and `staff` (alice alone): bob is gone
  syncids content synchronization answering cookies with syncIdSet: with
          no cookie, alice, bob, carol and `staff` (all three), refresh
          done with cookie "c1"; with "c1", a syncIdSet deleting bob
          (refreshDeletes TRUE), then refreshDelete done, "c2"; with "c2",
          a syncIdSet naming alice and staff present (refreshDeletes
          FALSE), then refreshPresent done, "c3": carol is gone
  syncbad the same rootDSE; a sync search gets entries whose Sync State
          control is malformed (COUNT selects how: 0 a 15-byte UUID, 1 a
          length past the end, 2 no control at all)

The base is dc=example,dc=com; users under ou=people, groups under
ou=groups. The number of searches answered is appended, one line each, to
PORTFILE.searches (for tests that count them).
"""
import socket
import sys
import threading

BASE = "dc=example,dc=com"
PEOPLE = "ou=people," + BASE
GROUPS = "ou=groups," + BASE
PAGED_OID = b"1.2.840.113556.1.4.319"
SYNC_OID = b"1.3.6.1.4.1.4203.1.9.1.1"
SYNC_STATE_OID = b"1.3.6.1.4.1.4203.1.9.1.2"
SYNC_INFO_OID = b"1.3.6.1.4.1.4203.1.9.1.4"


# ==== BER ==========================================================================

def length(n):
    if n < 0x80:
        return bytes([n])
    b = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes([0x80 | len(b)]) + b


def tlv(tag, content):
    return bytes([tag]) + length(len(content)) + content


def integer(n, tag=0x02):
    b = n.to_bytes(max(1, (n.bit_length() + 8) // 8), "big", signed=True)
    return tlv(tag, b)


def octets(s, tag=0x04):
    return tlv(tag, s if isinstance(s, bytes) else s.encode())


def seq(*parts, tag=0x30):
    return tlv(tag, b"".join(parts))


def read_tlv(buf, pos):
    """(tag, content start, content end) of the element at pos."""
    tag = buf[pos]
    n = buf[pos + 1]
    pos += 2
    if n & 0x80:
        k = n & 0x7F
        n = int.from_bytes(buf[pos:pos + k], "big")
        pos += k
    return tag, pos, pos + n


def children(buf, start, end):
    out = []
    while start < end:
        tag, s, e = read_tlv(buf, start)
        out.append((tag, s, e))
        start = e
    return out


def element_start(buf, start, index):
    """Where the index-th element from start begins."""
    for _ in range(index):
        start = read_tlv(buf, start)[2]
    return start


def parse_filter(buf, pos):
    """The filter at pos as ('and'|'or', [subs]), ('eq', attr, value) or
    ('present', attr), other kinds as ('other',); and where it ends."""
    tag, s, e = read_tlv(buf, pos)
    if tag in (0xA0, 0xA1):
        subs = []
        while s < e:
            sub, s = parse_filter(buf, s)
            subs.append(sub)
        return ("and" if tag == 0xA0 else "or", subs), e
    if tag == 0xA3:
        (_, a1, a2), (_, v1, v2) = children(buf, s, e)
        return ("eq", buf[a1:a2].decode().lower(), buf[v1:v2].decode()), e
    if tag == 0x87:
        return ("present", buf[s:e].decode().lower()), e
    return ("other",), e


def eq_values(f, attr):
    """Values the filter asks attr to equal, anywhere in it."""
    if f[0] == "eq":
        return [f[2]] if f[1] == attr else []
    if f[0] in ("and", "or"):
        return [v for sub in f[1] for v in eq_values(sub, attr)]
    return []


def classes(f):
    return [v.lower() for v in eq_values(f, "objectclass")]


# ==== replies ======================================================================

def message(msgid, op, controls=b""):
    return seq(integer(msgid), op, controls)


def result(msgid, tag, code=0, controls=b""):
    return message(msgid, seq(integer(code, 0x0A), octets(""), octets(""), tag=tag), controls)


def entry(msgid, dn, attrs):
    parts = [seq(octets(a), seq(*[octets(str(v)) for v in vals], tag=0x31))
             for a, vals in attrs.items()]
    return message(msgid, seq(octets(dn), seq(*parts), tag=0x64))


def entry_op(name, uid):
    """A user's searchResultEntry protocol op (no message around it)."""
    attrs = {"objectClass": ["posixAccount"], "uid": [name], "uidNumber": [uid],
             "gidNumber": [uid], "homeDirectory": [f"/home/{name}"], "loginShell": ["/bin/sh"]}
    parts = [seq(octets(a), seq(*[octets(str(v)) for v in vals], tag=0x31))
             for a, vals in attrs.items()]
    return seq(octets(f"uid={name},{PEOPLE}"), seq(*parts), tag=0x64)


def user(msgid, name, uid):
    return entry(msgid, f"uid={name},{PEOPLE}",
                 {"objectClass": ["posixAccount"], "uid": [name], "uidNumber": [uid],
                  "gidNumber": [uid], "homeDirectory": [f"/home/{name}"],
                  "loginShell": ["/bin/sh"]})


def group(msgid, name, gid, members=(), member_uids=()):
    attrs = {"objectClass": ["posixGroup"], "cn": [name], "gidNumber": [gid]}
    if members:
        attrs["member"] = list(members)
    if member_uids:
        attrs["memberUid"] = list(member_uids)
    return entry(msgid, f"cn={name},{GROUPS}", attrs)


def paged_control(cookie):
    value = seq(integer(0), octets(cookie))
    return tlv(0xA0, seq(octets(PAGED_OID), octets(value)))


def sync_state(state, uuid, cookie=None):
    value = seq(integer(state, 0x0A), octets(uuid), *([octets(cookie)] if cookie else []))
    return tlv(0xA0, seq(octets(SYNC_STATE_OID), octets(value)))


def intermediate(msgid, value):
    return message(msgid, tlv(0x79, tlv(0x80, SYNC_INFO_OID) + tlv(0x81, value)))


def sync_cookie(msg, ctrls):
    """The cookie of the Sync Request control in ctrls (None: none)."""
    _, s, e = ctrls
    for _, cs, ce in children(msg, s, e):
        parts = children(msg, cs, ce)
        if msg[parts[0][1]:parts[0][2]] != SYNC_OID:
            continue
        _, vs, ve = parts[-1]
        _, qs, qe = read_tlv(msg, vs)
        inner = children(msg, qs, qe)
        if len(inner) > 1 and inner[1][0] == 0x04:
            return msg[inner[1][1]:inner[1][2]].decode()
    return None


SYNC_GEN = [0]


def gdn(name):
    return f"cn={name},{GROUPS}"


def level(name, prefix):
    """N of PREFIXN, or None."""
    if name.startswith(prefix) and name[len(prefix):].isdigit():
        return int(name[len(prefix):])
    return None


# ==== the server ===================================================================

class Conn:
    def __init__(self, sock, mode, count, log):
        self.sock = sock
        self.mode = mode
        self.count = count
        self.log = log

    def send(self, data):
        self.sock.sendall(data)

    def serve(self):
        buf = b""
        while True:
            data = self.sock.recv(65536)
            if not data:
                return
            buf += data
            while len(buf) >= 2:
                try:
                    _, s, e = read_tlv(buf, 0)
                except IndexError:
                    break
                if e > len(buf):
                    break
                if not self.request(buf[:e]):
                    return
                buf = buf[e:]

    def request(self, msg):
        _, s, e = read_tlv(msg, 0)
        parts = children(msg, s, e)
        (_, i1, i2), (optag, o1, o2) = parts[0], parts[1]
        msgid = int.from_bytes(msg[i1:i2], "big", signed=True)
        if optag == 0x60:  # bind
            self.send(result(msgid, 0x61))
        elif optag == 0x42:  # unbind
            return False
        elif optag == 0x63:  # search
            ctrls = parts[2] if len(parts) > 2 else None
            self.search(msg, msgid, o1, o2, ctrls)
        return True

    def search(self, msg, msgid, s, e, ctrls):
        fields = children(msg, s, e)
        base = msg[fields[0][1]:fields[0][2]].decode()
        f, _ = parse_filter(msg, element_start(msg, s, 6))
        with open(self.log, "a") as out:
            out.write("search\n")
        if base == "":
            attrs = {"objectClass": ["top"]}
            if self.mode.startswith("sync"):
                attrs["supportedControl"] = [SYNC_OID.decode()]
            self.send(entry(msgid, "", attrs))
            self.send(result(msgid, 0x65))
            return
        if self.mode.startswith("sync"):
            return self.search_sync(msg, msgid, ctrls)
        getattr(self, "search_" + self.mode)(msgid, f, ctrls is not None)

    def search_sync(self, msg, msgid, ctrls):
        cookie = sync_cookie(msg, ctrls) if ctrls else None
        if self.mode == "syncbad":
            how = self.count % 3
            ctl = {0: sync_state(1, b"u" * 15), 1: tlv(0xA0, seq(octets(SYNC_STATE_OID),
                   octets(b"\x30\x84\x7f\xff\xff\xff"))), 2: b""}[how]
            self.send(message(msgid, entry_op("alice", 10001), ctl))
            return
        if self.mode == "syncids":
            return self.search_syncids(msgid, cookie)
        if cookie is not None:
            self.send(result(msgid, 0x65, 4096))
            return
        SYNC_GEN[0] += 1
        gen = SYNC_GEN[0]
        names = ["alice", "bob"] if gen == 1 else ["alice"]
        for i, name in enumerate(names):
            self.send(message(msgid, entry_op(name, 10001 + i),
                              sync_state(1, bytes([i + 1]) * 16)))
        attrs = {"objectClass": ["posixGroup"], "cn": ["staff"], "gidNumber": [30000],
                 "memberUid": names}
        parts = [seq(octets(a), seq(*[octets(str(v)) for v in vals], tag=0x31))
                 for a, vals in attrs.items()]
        self.send(message(msgid, seq(octets(gdn("staff")), seq(*parts), tag=0x64),
                          sync_state(1, b"\x99" * 16)))
        self.send(intermediate(msgid, tlv(0xA2, octets(f"c{gen}"))))

    def search_syncids(self, msgid, cookie):
        uuid = {n: bytes([i + 1]) * 16 for i, n in enumerate(["alice", "bob", "carol"])}
        staff = b"\x99" * 16
        if cookie is None:
            names = ["alice", "bob", "carol"]
            for i, name in enumerate(names):
                self.send(message(msgid, entry_op(name, 10001 + i), sync_state(1, uuid[name])))
            attrs = {"objectClass": ["posixGroup"], "cn": ["staff"], "gidNumber": [30000],
                     "memberUid": names}
            parts = [seq(octets(a), seq(*[octets(str(v)) for v in vals], tag=0x31))
                     for a, vals in attrs.items()]
            self.send(message(msgid, seq(octets(gdn("staff")), seq(*parts), tag=0x64),
                              sync_state(1, staff)))
            self.send(intermediate(msgid, tlv(0xA2, octets("c1"))))
        elif cookie == "c1":
            ids = seq(octets(uuid["bob"]), tag=0x31)
            self.send(intermediate(msgid, tlv(0xA3, tlv(0x01, b"\xff") + ids)))
            self.send(intermediate(msgid, tlv(0xA1, octets("c2"))))
        else:
            ids = seq(octets(uuid["alice"]), octets(staff), tag=0x31)
            self.send(intermediate(msgid, tlv(0xA3, ids)))
            self.send(intermediate(msgid, tlv(0xA2, octets("c3"))))

    def honest(self, msgid, f):
        """alice, for whoever asks for her."""
        if "alice" in eq_values(f, "uid") or "10001" in eq_values(f, "uidnumber"):
            self.send(user(msgid, "alice", 10001))
        self.send(result(msgid, 0x65))

    # ---- modes ----

    def search_flood(self, msgid, f, paged):
        names = eq_values(f, "uid") + eq_values(f, "cn")
        ids = eq_values(f, "uidnumber") + eq_values(f, "gidnumber")
        if "alice" in names or not (names or ids):
            return self.honest(msgid, f)
        is_group = "posixgroup" in classes(f) and "posixaccount" not in classes(f)
        first = names[0] if names else "victim"
        uid = int(ids[0]) if ids else 20000
        make = (lambda n, i: group(msgid, n, i)) if is_group else (lambda n, i: user(msgid, n, i))
        self.send(make(first, uid))
        batch = []
        for k in range(1, self.count):
            batch.append(make(f"f{k}", uid if ids else 30000 + k))
            if len(batch) == 512:
                self.send(b"".join(batch))
                batch = []
        self.send(b"".join(batch) + result(msgid, 0x65))

    def search_giant(self, msgid, f, paged):
        declared = 1500 * 1000 * 1000
        self.send(b"\x30\x84" + declared.to_bytes(4, "big") + integer(msgid))
        filler = b"\0" * (1 << 20)
        for _ in range(self.count):
            self.send(filler)

    def search_nest(self, msgid, f, paged):
        out = []
        if "deep" in eq_values(f, "uid"):
            out.append(user(msgid, "deep", 10002))
        # groups-of: (member=uid=deep,...) answers up0
        for v in eq_values(f, "member"):
            v = v.lower()
            if v == f"uid=deep,{PEOPLE}":
                out.append(group(msgid, "up0", 50000, [v]))
            n = level(v.split(",")[0][3:], "up") if v.startswith("cn=up") else None
            if n is not None:
                out.append(group(msgid, f"up{n + 1}", 50001 + n, [gdn(f"up{n}")]))
        for v in eq_values(f, "cn"):
            n = level(v, "down")
            if n is not None:
                out.append(group(msgid, f"down{n}", 60000 + n, [gdn(f"down{n + 1}")],
                                 [f"m{n}"]))
            n = level(v, "up")
            if n is not None:
                out.append(group(msgid, f"up{n}", 50000 + n, [gdn(f"up{n - 1}")]
                                 if n else [f"uid=deep,{PEOPLE}"]))
        if "alice" in eq_values(f, "uid"):
            out.append(user(msgid, "alice", 10001))
        self.send(b"".join(out) + result(msgid, 0x65))

    def search_wide(self, msgid, f, paged):
        out = []
        for v in eq_values(f, "cn"):
            if v.startswith("w") and all(p.isdigit() for p in v[1:].split("_") if p):
                kids = [gdn(f"{v}_{k}") for k in range(self.count)]
                out.append(group(msgid, v, 70000 + (hash(v) % 100000), kids))
        if "alice" in eq_values(f, "uid"):
            out.append(user(msgid, "alice", 10001))
        self.send(b"".join(out) + result(msgid, 0x65))

    def search_fat(self, msgid, f, paged):
        if "fat" in eq_values(f, "uid"):
            self.send(user(msgid, "fat", 10003) + result(msgid, 0x65))
            return
        if "fat" not in eq_values(f, "memberuid"):
            return self.honest(msgid, f)
        members = ["fat"] + [f"m{k}" for k in range(1, self.count)]
        # fatdn: the members are DNs outside the search base, never resolved
        dns = [f"uid=m{k},dc=elsewhere" for k in range(self.count)]
        for k in range(10 ** 9):
            if self.mode == "fatdn":
                self.send(group(msgid, f"fat{k}", 80000 + k, dns, ["fat"]))
            else:
                self.send(group(msgid, f"fat{k}", 80000 + k, member_uids=members))

    search_fatdn = search_fat

    def search_endless(self, msgid, f, paged):
        if eq_values(f, "uid") or eq_values(f, "cn") or eq_values(f, "uidnumber") or \
                eq_values(f, "gidnumber") or eq_values(f, "member") or \
                eq_values(f, "memberuid"):
            return self.honest(msgid, f)
        is_group = "posixgroup" in classes(f) and "posixaccount" not in classes(f)
        self.page = getattr(self, "page", 0) + 1
        start = self.page * self.count
        out = []
        for k in range(start, start + self.count):
            out.append(group(msgid, f"e{k}", 100000 + k) if is_group
                       else user(msgid, f"e{k}", 100000 + k))
        ctl = paged_control(b"more%d" % self.page) if paged else b""
        self.send(b"".join(out) + result(msgid, 0x65, controls=ctl))


def main():
    mode, portfile = sys.argv[1], sys.argv[2]
    count = int(sys.argv[3]) if len(sys.argv) > 3 else {"flood": 600000, "giant": 256,
                                                        "wide": 20, "endless": 1000,
                                                        "fat": 2000, "fatdn": 2000}.get(mode, 0)
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    with open(portfile + ".tmp", "w") as out:
        out.write(str(srv.getsockname()[1]))
    import os
    os.rename(portfile + ".tmp", portfile)
    while True:
        sock, _ = srv.accept()
        conn = Conn(sock, mode, count, portfile + ".searches")
        threading.Thread(target=guarded, args=(conn,), daemon=True).start()


def guarded(conn):
    try:
        conn.serve()
    except (OSError, IndexError, ValueError):
        pass  # the daemon hung up (as it should on some of these)
    finally:
        conn.sock.close()


if __name__ == "__main__":
    main()
