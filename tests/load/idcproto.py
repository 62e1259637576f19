"""A minimal client for idcached's socket protocol (src/proto/proto.h),
written from the spec at the top of that header: 16-byte frames
(u32 length, command, status, reserved; host byte order), strings as
u32 len + bytes + NUL. Used by the load generator (nssload.py) and the
hardening tests (tests/integration/test_hard_*.py).

Blocking calls here; nssload.py drives the same frames non-blocking.
"""
import socket
import struct

HDR = struct.Struct("=IIII")
U32 = struct.Struct("=I")

VERSION = 1
HELLO, GETPWNAM, GETPWUID, GETGRNAM, GETGRGID, INITGROUPS = 1, 2, 3, 4, 5, 6
SETPWENT, GETPWENT, ENDPWENT, SETGRENT, GETGRENT, ENDGRENT = 7, 8, 9, 10, 11, 12
MCMAP, SSHKEYS, SUBIDS, SUBID_OWNERS = 13, 20, 21, 22
STATUS, EXPIRE, RELOAD = 32, 33, 34

OK, NOTFOUND, UNAVAIL, TRYAGAIN, ERROR, BADREQ, BADVERSION = range(7)


def pstr(s):
    b = s.encode("utf-8", "surrogateescape") if isinstance(s, str) else s
    return U32.pack(len(b)) + b + b"\0"


def frame(cmd, payload=b""):
    return HDR.pack(HDR.size + len(payload), cmd, 0, 0) + payload


def hello_frame():
    return frame(HELLO, U32.pack(VERSION))


def request_frame(op, key):
    """The frame for one lookup: op is a command number, key a name or id."""
    if op in (GETPWUID, GETGRGID):
        return frame(op, U32.pack(key))
    return frame(op, pstr(key))


class Reader:
    """Splits a byte stream into (cmd, status, payload) frames."""

    def __init__(self):
        self.buf = bytearray()

    def feed(self, data):
        self.buf += data
        out = []
        while len(self.buf) >= HDR.size:
            length, cmd, st, _ = HDR.unpack_from(self.buf)
            if length < HDR.size:
                raise ValueError(f"bad frame length {length}")
            if len(self.buf) < length:
                break
            out.append((cmd, st, bytes(self.buf[HDR.size:length])))
            del self.buf[:length]
        return out


# ==== payload decoding ================================================================

class _Cur:
    def __init__(self, b):
        self.b, self.i = b, 0

    def u32(self):
        v = U32.unpack_from(self.b, self.i)[0]
        self.i += 4
        return v

    def str(self):
        n = self.u32()
        s = self.b[self.i:self.i + n].decode("utf-8", "surrogateescape")
        if self.b[self.i + n] != 0:
            raise ValueError("string without NUL")
        self.i += n + 1
        return s


def _passwd(c):
    return (c.str(), c.str(), c.u32(), c.u32(), c.str(), c.str(), c.str())


def _group(c):
    name, pw, gid, n = c.str(), c.str(), c.u32(), c.u32()
    return (name, pw, gid, [c.str() for _ in range(n)])


def decode_passwd(p):
    """(name, passwd, uid, gid, gecos, dir, shell)"""
    return _passwd(_Cur(p))


def decode_group(p):
    """(name, passwd, gid, [members])"""
    return _group(_Cur(p))


def decode_gids(p):
    c = _Cur(p)
    return [c.u32() for _ in range(c.u32())]


def decode_batch(p, users):
    c = _Cur(p)
    n = c.u32()
    return [_passwd(c) if users else _group(c) for _ in range(n)]


# ==== blocking client ====================================================================

class Client:
    """One connection: connect, HELLO, then call()."""

    def __init__(self, path, timeout=10.0):
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.s.settimeout(timeout)
        self.s.connect(str(path))
        self.rd = Reader()
        self.pending = []
        cmd, st, _ = self.call_raw(hello_frame())
        if (cmd, st) != (HELLO, OK):
            raise RuntimeError(f"HELLO refused: cmd {cmd} status {st}")

    def call_raw(self, data):
        self.s.sendall(data)
        while not self.pending:
            chunk = self.s.recv(1 << 20)
            if not chunk:
                raise ConnectionError("daemon closed the connection")
            self.pending += self.rd.feed(chunk)
        return self.pending.pop(0)

    def call(self, op, key=None):
        """(status, payload) of one request."""
        data = frame(op) if key is None else request_frame(op, key)
        _, st, payload = self.call_raw(data)
        return st, payload

    def getpwnam(self, name):
        st, p = self.call(GETPWNAM, name)
        return decode_passwd(p) if st == OK else st

    def enumerate(self, users=True):
        """Every record of the passwd (users=True) or group map."""
        out = []
        self.call(SETPWENT if users else SETGRENT)
        while True:
            st, p = self.call_raw(frame(GETPWENT if users else GETGRENT,
                                        U32.pack(0) + U32.pack(1 << 20)))[1:]
            if st == NOTFOUND:
                break
            if st != OK:
                raise RuntimeError(f"enumeration failed with status {st}")
            out += decode_batch(p, users)
        self.call(ENDPWENT if users else ENDGRENT)
        return out

    def close(self):
        self.s.close()
