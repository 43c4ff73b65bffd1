"""abuse.py SOCKET PID [--long] - connection-level abuse of a running ckptd
(socket_mode 0666, max_clients 1024, msg_timeout_ms 2000).  Standard library
only; builds messages with tests/integ/rawproto.py.  Checks after each case
that another client is still served, and at the end that ckptd's fd count
and RSS are back near where they started.  Exit 0 when all behaved."""
import errno
import fcntl
import os
import resource
import socket
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integ"))
from rawproto import *   # noqa: E402,F403

SOCK, PID = sys.argv[1], int(sys.argv[2])
LONG = "--long" in sys.argv
problems = []
counts = {}


class BConn(Conn):
    """A Conn whose connect blocks (a full listen backlog waits, no EAGAIN)."""
    def __init__(self, path, timeout=10.0):
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.s.connect(path)
        self.s.settimeout(timeout)
        self.next_id = 1
        self.buf = b""


def nfds():
    return len(os.listdir("/proc/%d/fd" % PID))


def rss_kib():
    with open("/proc/%d/status" % PID) as f:
        for line in f:
            if line.startswith("VmRSS"):
                return int(line.split()[1])


def served(after):
    try:
        c = Conn(SOCK, timeout=5)
        m = hello_ctl(c)
        ok = m is not None and m.status == 0
        if ok:
            m = c.request(STATUS, {})
            ok = m is not None and m.status == 0
        c.close()
    except OSError as e:
        ok, m = False, e
    if not ok:
        problems.append("after %s: a fresh client is not served: %r" % (after, m))
    counts[after] = counts.get(after, 0) + 1


def memfd(size, seal=True):
    fd = os.memfd_create("t", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, size)
    if seal:
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW |
                    fcntl.F_SEAL_SEAL)
    return fd


def trainer_conn(job="abuse"):
    c = Conn(SOCK)
    m = hello_trainer(c, job)
    assert m is not None and m.status == 0, m
    return c


def refused(what, m, closed_ok=True):
    if m is None:
        if not closed_ok:
            problems.append("%s: closed without an error reply" % what)
        return
    if m.status >= 0:
        problems.append("%s: accepted (%r)" % (what, m))
    elif not m.error:
        problems.append("%s: error %d without a message" % (what, m.status))


resource.setrlimit(resource.RLIMIT_NOFILE, (8192, 8192))
served("start")
fd0, rss0 = nfds(), rss_kib()
print("start: ckptd %d fds, RSS %d KiB" % (fd0, rss0))
rounds = 5 if LONG else 1

for rnd in range(rounds):
    # 1. 1,100 connections at once: beyond max_clients each gets an error
    conns, refusals = [], 0
    for i in range(1100):
        try:
            conns.append(BConn(SOCK, timeout=10))
        except OSError as e:
            problems.append("connection %d: %s" % (i, e))
            break
    for c in conns[1024:]:
        c.s.settimeout(5)
        m = c.recv()
        if m is not None and m.status < 0 and "max_clients" in (m.error or ""):
            refusals += 1
    for c in conns:
        c.close()
    if refusals < 1100 - 1024 - 2:   # one slot may still be held by served()
        problems.append("1100 connections: only %d refused with a max_clients error" % refusals)
    time.sleep(0.3)
    served("1100 connections")
    print("1100 connections: %d refused beyond max_clients" % refusals)

    # 2. headers announcing 4 GiB, many times: error, close, no allocation
    for i in range(200):
        c = Conn(SOCK)
        c.send(HELLO, b"", len=0xFFFFFFFF, jlen=0)
        m = c.recv()
        if m is None or m.status != -errno.EMSGSIZE:
            problems.append("4 GiB header: %r" % m)
            break
        c.close()
    served("4 GiB headers")

    # 3. one byte per second (msg_timeout_ms 2000): dropped, others unaffected
    slow = []
    data = HDR.pack(MAGIC, VERSION, HELLO, 0, 30, 30, 0, 1, 0, 0) + b"{" * 30
    for i in range(20 if LONG else 5):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(SOCK)
        slow.append(s)
    t0 = time.time()
    dropped = set()
    k = 0
    while time.time() - t0 < 8 and len(dropped) < len(slow):
        for i, s in enumerate(slow):
            if i in dropped:
                continue
            try:
                s.send(data[k:k + 1])
            except OSError:
                dropped.add(i)
        k += 1
        served("slow client (others served)")
        time.sleep(1.0)
    for i, s in enumerate(slow):
        if i not in dropped:
            s.settimeout(0.5)
            try:
                if s.recv(4096) == b"":
                    dropped.add(i)
                else:   # an error reply, then EOF
                    dropped.add(i) if s.recv(4096) == b"" else None
            except (OSError, socket.timeout):
                pass
        s.close()
    el = time.time() - t0
    if len(dropped) != len(slow):
        problems.append("one byte per second: %d of %d connections still open after %.1f s"
                        % (len(slow) - len(dropped), len(slow), el))
    print("slow clients: %d of %d dropped within %.1f s" % (len(dropped), len(slow), el))

    # 4. too many fds in one message (250 memfds), announced and not
    for announced in (250, 1):
        c = trainer_conn()
        fds = [memfd(4096) for _ in range(250)]
        try:
            c.send(REGION_ADD, {"region": 7, "size": 4096}, fds=fds, nfds=announced)
            refused("250 fds, %d announced" % announced, c.reply_to(c.next_id - 1))
        except OSError as e:
            problems.append("250 fds: %s" % e)
        for fd in fds:
            os.close(fd)
        c.close()
    served("too many fds")

    # 5. wrong fd types and bad memfds, each refused
    def region(what, fd, size=8192):
        c = trainer_conn()
        try:
            c.send(REGION_ADD, {"region": 1, "size": size}, fds=[fd])
            refused(what, c.reply_to(c.next_id - 1), closed_ok=False)
        finally:
            os.close(fd)
            c.close()
    r, w = os.pipe(); os.close(w); region("pipe", r)
    a, b = socket.socketpair(); b.close(); region("socket", a.detach())
    p = "/tmp/abuse-reg.%d" % os.getpid()
    with open(p, "wb") as f:
        f.write(b"\0" * 8192)
    region("regular file", os.open(p, os.O_RDWR)); os.unlink(p)
    region("directory", os.open("/tmp", os.O_RDONLY | os.O_DIRECTORY))
    region("eventfd", os.eventfd(0))
    region("unsealed memfd", memfd(8192, seal=False))
    region("truncated memfd (smaller than announced)", memfd(4096), 8192)
    region("memfd of size 0", memfd(0), 4096)
    served("wrong fd types")
    time.sleep(0.5)

fd1, rss1 = nfds(), rss_kib()
print("end: ckptd %d fds (start %d), RSS %d KiB (start %d)" % (fd1, fd0, rss1, rss0))
if fd1 > fd0 + 2:
    problems.append("ckptd fd count grew from %d to %d" % (fd0, fd1))
if rss1 > rss0 + 32 * 1024:
    problems.append("ckptd RSS grew from %d to %d KiB" % (rss0, rss1))
for p in problems:
    print("PROBLEM:", p)
print("abuse: %d rounds, %d problems" % (rounds, len(problems)))
sys.exit(1 if problems else 0)
