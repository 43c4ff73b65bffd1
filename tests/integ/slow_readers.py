"""slow_readers.py SOCK CKPTD_PID N MODE - N clients flood ckptd with STATUS
requests and never read a reply.  MODE "bounded": each client's queue
stays small (ckptd stops reading its requests), the total and ckptd's RSS
stay bounded, another client is served, and after they close the queued
bytes and the RSS come back.  MODE "shed": max_reply_queue_bytes is small;
ckptd drops the clients holding the most and stays under it.
Prints one line of figures; exits 1 with the reason on a failure."""
import os
import select
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rawproto import *   # noqa: E402,F403

sock, pid, n, mode = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
MAX_REQ = 200000           # 200k STATUS replies would be ~100 MiB unread


def rss_kib():
    for line in open("/proc/%d/status" % pid):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])


def status():
    c = Conn(sock)
    hello_ctl(c)
    m = c.request(STATUS, {})
    c.close()
    if m is None or m.status < 0:
        sys.exit("status refused while clients do not read: %r" % m)
    return m.json


def flood(c):
    """Send STATUS requests until ckptd stops taking them (its socket buffer
    and ours are full for 2 s) or MAX_REQ; returns how many were sent."""
    one = HDR.pack(MAGIC, VERSION, STATUS, 0, 2, 2, 0, 0, 0, 0) + b"{}"
    batch = one * 256
    c.s.setblocking(False)
    sent = 0
    pending = b""
    while sent < MAX_REQ * len(one):
        if not pending:
            pending = batch
        try:
            k = c.s.send(pending)
            sent += k
            pending = pending[k:]
        except BlockingIOError:
            if not select.select([], [c.s], [], 2.0)[1]:
                break
        except (BrokenPipeError, ConnectionResetError):
            break
    return sent // len(one)


status()
rss0 = rss_kib()
cs = []
for i in range(n):
    c = Conn(sock)
    hello_ctl(c)
    cs.append(c)
reqs = [flood(c) for c in cs]
st = status()
q = st.get("reply_queue_bytes")
rss1 = rss_kib()
if q is None:
    sys.exit("status has no reply_queue_bytes")
print("%s: %d clients sent %d..%d requests; queued %d KiB; RSS %d -> %d KiB" % (
    mode, n, min(reqs), max(reqs), q >> 10, rss0, rss1), end="")
if mode == "bounded":
    # each client: the pause threshold (1 MiB) plus one reply
    if q > n * (1 << 20) + n * 65536:
        sys.exit("\n%d bytes of replies queued for %d clients" % (q, n))
    if rss1 - rss0 > n * 4096 + 16384:
        sys.exit("\nRSS grew by %d KiB for %d clients that do not read" % (rss1 - rss0, n))
    alive = st.get("clients")
    if alive != n + 1:
        sys.exit("\n%s clients connected, want %d (none dropped)" % (alive, n + 1))
elif mode == "shed":
    limit = int(sys.argv[5])
    if q > limit:
        sys.exit("\n%d bytes queued, above max_reply_queue_bytes %d" % (q, limit))
for c in cs:
    c.close()
for _ in range(200):
    st = status()
    if st.get("reply_queue_bytes") == 0 and st.get("clients") == 1:
        break
    time.sleep(0.05)
else:
    sys.exit("\nafter the clients closed: %r" % st)
rss2 = rss_kib()
print("; after they closed: queued 0, RSS %d KiB" % rss2)
if rss2 - rss0 > 16384:
    sys.exit("RSS %d KiB after the clients closed, %d before they came" % (rss2, rss0))
