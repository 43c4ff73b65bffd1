"""malformed.py SOCKET - send malformed messages to ckptd, one case per
connection; every case must get an error reply (status < 0, an "error"
text), the daemon must close the connection where the stream cannot be
trusted any more and keep it where it can, and a well-behaved connection
opened before the first case must keep working after each one.
Exit 0 when every case behaved, 1 otherwise (each problem printed)."""
import errno
import fcntl
import mmap
import os
import socket
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rawproto import *   # noqa: E402,F403

SOCK = sys.argv[1]
problems = []


def check(name, m, want_err=None, closes=None, conn=None, text=None):
    """m: the reply; want_err: expected -errno (or None: any < 0)."""
    if m is None:
        problems.append("%s: no reply (connection closed without an error)" % name)
        return
    if m.status >= 0:
        problems.append("%s: status %d, want an error: %r" % (name, m.status, m))
        return
    if want_err is not None and m.status != -want_err:
        problems.append("%s: status %d (%s), want -%s" % (
            name, m.status, os.strerror(-m.status), errno.errorcode[want_err]))
    if not m.error:
        problems.append("%s: error reply without an \"error\" text: %r" % (name, m))
    elif text and text not in m.error:
        problems.append("%s: error text %r does not mention %r" % (name, m.error, text))
    if conn is not None and closes is not None:
        if closes:
            conn.s.settimeout(5)
            try:
                if not conn.eof():
                    problems.append("%s: connection left open" % name)
            except socket.timeout:
                problems.append("%s: connection left open after a bad header" % name)
        else:
            # the stream is still in step: a HELLO (or STATUS) still works
            r = conn.request(STATUS, {})
            if r is not None and r.status == -errno.EPROTO and "HELLO" in (r.error or ""):
                r = hello_ctl(conn)
            if r is None or r.status != 0:
                problems.append("%s: connection unusable afterwards: %r" % (name, r))
    print("ok " if not any(p.startswith(name + ":") for p in problems) else "BAD",
          name, "->", m.status, repr(m.error))


good = Conn(SOCK)
assert hello_ctl(good).status == 0


def alive(after):
    m = good.request(STATUS, {})
    if m is None or m.status != 0:
        problems.append("after %s: the other connection's STATUS failed: %r" % (after, m))


def fresh(hello=False, job=None):
    c = Conn(SOCK)
    if hello:
        m = hello_trainer(c, job) if job else hello_ctl(c)
        assert m is not None and m.status == 0, m
    return c


def case(name, fn):
    c = fresh()
    try:
        fn(c, name)
    except Exception as e:   # a test bug or an unexpected daemon reaction
        problems.append("%s: %s: %s" % (name, type(e).__name__, e))
    c.close()
    alive(name)


HELLO_OK = {"version": 1, "features": 0, "role": "ctl"}

# --- bad headers: an ERROR reply, then the connection is closed ----------
case("bad magic", lambda c, n: (c.send(HELLO, HELLO_OK, magic=0xdeadbeef),
     check(n, c.recv(), errno.EPROTO, True, c, "magic")))
case("bad version", lambda c, n: (c.send(HELLO, HELLO_OK, version=7),
     check(n, c.recv(), errno.EPROTONOSUPPORT, True, c, "version")))
case("jlen > len", lambda c, n: (c.send(HELLO, HELLO_OK, jlen=1000),
     check(n, c.recv(), errno.EPROTO, True, c, "length")))
case("unknown type", lambda c, n: (c.send(99, HELLO_OK),
     check(n, c.recv(), errno.EBADMSG, True, c, "type")))
case("reply type sent as request", lambda c, n: (c.send(0x8000 | 77, HELLO_OK),
     check(n, c.recv(), errno.EBADMSG, True, c, "type")))
case("oversized length (4 GiB - 1)", lambda c, n: (c.send(HELLO, b"", len=0xFFFFFFFF, jlen=0),
     check(n, c.recv(), errno.EMSGSIZE, True, c, "too large")))
case("oversized length (16 MiB + 1)", lambda c, n: (c.send(HELLO, b"", len=(16 << 20) + 1, jlen=0),
     check(n, c.recv(), errno.EMSGSIZE, True, c, "too large")))
case("reserved field set", lambda c, n: (c.send(HELLO, HELLO_OK, reserved=1),
     check(n, c.recv(), errno.EPROTO, True, c, "reserved")))
case("flags set", lambda c, n: (c.send(HELLO, HELLO_OK, flags=4),
     check(n, c.recv(), errno.EPROTO, True, c, "flags")))
case("too many fds announced", lambda c, n: (c.send(HELLO, HELLO_OK, nfds=9),
     check(n, c.recv(), errno.EBADMSG, True, c, "fds")))
case("fds announced, none sent", lambda c, n: (c.send(HELLO, HELLO_OK, nfds=1),
     check(n, c.recv(), None, True, c, "fds")))
case("NUL byte inside the JSON", lambda c, n: (c.send(HELLO, b'{"version":1,\x00"role":"ctl"}'),
     check(n, c.recv(), errno.EPROTO, True, c, "NUL")))

# --- bad contents: an error reply, the connection stays usable ------------
case("garbage JSON", lambda c, n: (c.send(HELLO, b"{this is not json"),
     check(n, c.recv(), errno.EINVAL, False, c, "JSON")))
case("binary garbage as JSON", lambda c, n: (c.send(HELLO, bytes(range(1, 256))),
     check(n, c.recv(), None, False, c)))
case("invalid UTF-8 in JSON", lambda c, n: (c.send(HELLO, b'{"role":"\xff\xfe"}'),
     check(n, c.recv(), None, False, c)))
for js in (b"[1,2,3]", b"42", b'"hello"', b"null", b""):
    case("JSON not an object: %r" % js, lambda c, n, js=js: (c.send(HELLO, js),
         check(n, c.recv(), errno.EINVAL, False, c)))
case("duplicate JSON keys", lambda c, n: (c.send(HELLO, b'{"version":1,"version":1,"role":"ctl"}'),
     check(n, c.recv(), errno.EINVAL, False, c)))
case("deeply nested JSON", lambda c, n: (c.send(HELLO, b"[" * 100000 + b"]" * 100000),
     check(n, c.recv(), None, False, c)))
case("request before HELLO", lambda c, n: (c.send(STATUS, {}),
     check(n, c.recv(), errno.EPROTO, None, c, "HELLO")))
case("SAVE before HELLO", lambda c, n: (c.send(SAVE, {"step": 1}),
     check(n, c.recv(), errno.EPROTO, None, c, "HELLO")))
case("EVENT sent to the daemon", lambda c, n: (hello_ctl(c), c.send(EVENT, {}),
     check(n, c.recv(), errno.EBADMSG, False, c)))
case("ERROR sent to the daemon", lambda c, n: (hello_ctl(c), c.send(ERROR, {}),
     check(n, c.recv(), errno.EBADMSG, False, c)))
case("HELLO twice", lambda c, n: (hello_ctl(c),
     check(n, c.request(HELLO, HELLO_OK), errno.EALREADY, False, c)))
case("HELLO with another version", lambda c, n: (
     check(n, c.request(HELLO, {"version": 2, "role": "ctl"}), errno.EPROTONOSUPPORT, None, c)))
case("HELLO without a role", lambda c, n: (
     check(n, c.request(HELLO, {"version": 1}), errno.EINVAL, None, c)))
case("HELLO with an unknown role", lambda c, n: (
     check(n, c.request(HELLO, {"version": 1, "role": "root"}), errno.EINVAL, None, c)))
case("HELLO rank >= world", lambda c, n: (
     check(n, c.request(HELLO, {"version": 1, "role": "trainer", "job": "mal", "rank": 2,
                                "world_size": 2}), errno.EINVAL, None, c)))
case("HELLO with a negative rank", lambda c, n: (
     check(n, c.request(HELLO, {"version": 1, "role": "trainer", "job": "mal", "rank": -1,
                                "world_size": 2}), errno.EINVAL, None, c)))
case("HELLO with a string rank", lambda c, n: (
     check(n, c.request(HELLO, {"version": 1, "role": "trainer", "job": "mal", "rank": "0",
                                "world_size": 1}), errno.EINVAL, None, c)))
case("HELLO with a huge world", lambda c, n: (
     check(n, c.request(HELLO, {"version": 1, "role": "trainer", "job": "mal", "rank": 0,
                                "world_size": 1 << 40}), errno.EINVAL, None, c)))


def stray_fd(c, n):
    hello_ctl(c)
    r, w = os.pipe()
    try:
        c.send(STATUS, {}, fds=[r])
        check(n, c.recv(), errno.EINVAL, False, c, "file descriptor")
    finally:
        os.close(r)
        os.close(w)


case("fd attached to STATUS", stray_fd)


def stray_fds_hello(c, n):
    fds = [os.open("/dev/null", os.O_RDONLY) for _ in range(3)]
    try:
        c.send(HELLO, HELLO_OK, fds=fds)
        check(n, c.recv(), errno.EINVAL, False, c, "file descriptor")
    finally:
        for fd in fds:
            os.close(fd)


case("fds attached to HELLO", stray_fds_hello)


# --- trainer requests with bad arguments ----------------------------------
def trainer_case(name, fn):
    def run(c, n):
        m = hello_trainer(c, "mal")
        assert m.status == 0, m
        fn(c, n)
    case(name, run)


def memfd(size, seal=True, grow=0):
    fd = os.memfd_create("t", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, size)
    if seal:
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW |
                    fcntl.F_SEAL_SEAL)
    return fd


def region_add(c, n, fd, size, want, text=None):
    try:
        c.send(REGION_ADD, {"region": 1, "size": size}, fds=[fd])
        check(n, c.reply_to(c.next_id - 1), want, False, c, text)
    finally:
        os.close(fd)


trainer_case("REGION_ADD without an fd", lambda c, n: check(
    n, c.request(REGION_ADD, {"region": 1, "size": 4096}), errno.EINVAL, False, c))
trainer_case("REGION_ADD with a pipe", lambda c, n: (lambda p: (os.close(p[1]), region_add(
    c, n, p[0], 4096, None, "region refused")))(os.pipe()))
trainer_case("REGION_ADD with /dev/zero", lambda c, n: region_add(
    c, n, os.open("/dev/zero", os.O_RDWR), 4096, None, "region refused"))
trainer_case("REGION_ADD with a regular file", lambda c, n: region_add(
    c, n, os.open(SOCK + ".regfile", os.O_RDWR | os.O_CREAT, 0o600), 4096, None, "region refused"))
trainer_case("REGION_ADD with an unsealed memfd", lambda c, n: region_add(
    c, n, memfd(8192, seal=False), 8192, None, "region refused"))
trainer_case("REGION_ADD larger than the memfd", lambda c, n: region_add(
    c, n, memfd(8192), 1 << 20, None, "region refused"))
trainer_case("REGION_ADD of size 2^63", lambda c, n: region_add(
    c, n, memfd(8192), 1 << 63, None))
trainer_case("REGION_ADD with two fds", lambda c, n: (lambda a, b: (
    c.send(REGION_ADD, {"region": 1, "size": 8192}, fds=[a, b]), os.close(a), os.close(b),
    check(n, c.reply_to(c.next_id - 1), errno.EINVAL, False, c)))(memfd(8192), memfd(8192)))


def tensor_past_region(c, n):
    fd = memfd(8192)
    c.send(REGION_ADD, {"region": 1, "size": 8192}, fds=[fd])
    os.close(fd)
    m = c.reply_to(c.next_id - 1)
    assert m.status == 0, m
    base = {"group": "model", "name": "w", "dtype": "F32", "region": 1}
    check(n + " (end)", c.request(TENSOR_REG, dict(base, shape=[2049], offset=0)), None, False, c)
    check(n + " (offset)", c.request(TENSOR_REG, dict(base, shape=[1], offset=8190)), None, False, c)
    check(n + " (overflow)", c.request(TENSOR_REG, dict(base, shape=[1 << 62, 1 << 62], offset=0)),
          None, False, c)
    check(n + " (huge offset)", c.request(TENSOR_REG, dict(base, shape=[1], offset=(1 << 64) - 1)),
          None, False, c)
    check(n + " (negative dim)", c.request(TENSOR_REG, dict(base, shape=[-1], offset=0)),
          errno.EINVAL, False, c)
    check(n + " (dtype)", c.request(TENSOR_REG, dict(base, dtype="F128", shape=[1], offset=0)),
          errno.EINVAL, False, c)
    check(n + " (ndim 9)", c.request(TENSOR_REG, dict(base, shape=[1] * 9, offset=0)),
          errno.EINVAL, False, c)
    check(n + " (no region)", c.request(TENSOR_REG, dict(base, region=7, shape=[1], offset=0)),
          errno.ENOENT, False, c)


trainer_case("TENSOR_REG outside its region", tensor_past_region)
trainer_case("BLOB_PUT larger than max_blob_bytes", lambda c, n: check(
    n, c.request(BLOB_PUT, {"name": "big"}, bin=b"x" * (5 << 20)), errno.EFBIG, False, c))
trainer_case("SAVE with a negative step", lambda c, n: check(
    n, c.request(SAVE, {"step": -5}), errno.EINVAL, False, c))
trainer_case("SAVE with a step beyond 9 digits", lambda c, n: check(
    n, c.request(SAVE, {"step": 10 ** 9}), errno.ERANGE, False, c))
trainer_case("RESTORE with step -2", lambda c, n: check(
    n, c.request(RESTORE, {"step": -2}), errno.EINVAL, False, c))
case("ctl SAVE", lambda c, n: (hello_ctl(c), check(
     n, c.request(SAVE, {"step": 1}), errno.EPERM, False, c)))
case("ctl REGION_ADD", lambda c, n: (hello_ctl(c), region_add(
     c, n, memfd(8192), 8192, errno.EPERM, "only trainers")))
case("ctl TENSOR_DEL", lambda c, n: (hello_ctl(c), check(
     n, c.request(TENSOR_DEL, {"group": "g", "name": "t"}), errno.EPERM, False, c)))
case("PRUNE keep 0", lambda c, n: (hello_ctl(c), check(
     n, c.request(PRUNE, {"job": "mal", "keep": 0}), errno.EINVAL, False, c)))


# --- half messages: the daemon must neither hang on them nor crash ---------
def half_header(c, n):
    c.s.sendall(struct.pack("<I", MAGIC))   # 4 of 40 bytes, then nothing


case("half a header, then close", half_header)


def half_payload(c, n):
    hello_ctl(c)
    c.send(STATUS, None, len=1000, jlen=1000)   # header only, payload never comes


case("header without its payload, then close", half_payload)

# many connections that go away at once
conns = [fresh() for _ in range(50)]
for i, c in enumerate(conns):
    if i % 2:
        c.send(HELLO, HELLO_OK, magic=1)
    c.close()
alive("50 connections dropped")

if problems:
    print("\n".join("PROBLEM: " + p for p in problems))
    sys.exit(1)
print("all %s" % "cases behaved")
