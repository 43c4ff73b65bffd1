# What one client may take from everyone (issue 11, attack findings F2, F3):
#  - a memfd region the trainer never wrote costs ckptd no memory, neither
#    when it is added nor when a save reads it (its holes are saved as
#    zeros, unread); the written part of a region is saved as written, in
#    one large tensor and in many small ones;
#  - blobs are bounded in bytes per client (max_client_blob_bytes) and for
#    all clients together (max_total_blob_bytes), with errors naming the
#    key; a replaced blob counts once; a client that leaves gives its
#    bytes back;
#  - one uid holds at most max_clients_per_uid connections (root exempt),
#    so it cannot take every max_clients slot from other users;
#  - an idle ckptctl connection is closed after ctl_idle_timeout_ms.
. "$(dirname "$0")/lib.sh"
need_nobody
start_ckptd '"socket_mode": "0666"' '"max_client_blob_bytes": "8MiB"' \
	'"max_total_blob_bytes": "12MiB"' '"max_clients": 64' '"max_clients_per_uid": 4' \
	'"ctl_idle_timeout_ms": 1500' '"staging_bytes": "16MiB"'

shmem() { awk '/^RssShmem:/ {print $2 * 1024}' /proc/$CKPTD_PID/status; }
export CKPTD_PID

TOP=$TOP /usr/bin/python3 - "$SOCK" <<'PY' || fail "sparse region"
import fcntl, os, sys
sys.path.insert(0, os.path.join(os.environ["TOP"], "tests", "integ"))
from rawproto import *
GiB = 1 << 30
def shmem():
    for l in open("/proc/%s/status" % os.environ["CKPTD_PID"]):
        if l.startswith("RssShmem:"):
            return int(l.split()[1]) * 1024
c = Conn(sys.argv[1], timeout=120)
assert hello_trainer(c, "sparse").status == 0
fd = os.memfd_create("sparse", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
os.ftruncate(fd, GiB)
os.pwrite(fd, b"\x5a" * 4096, 512 << 20)      # one page written, in the middle
fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
before = shmem()
m = c.request(REGION_ADD, {"region": 1, "size": GiB}, fds=[fd])
assert m.status == 0, m
added = shmem() - before
print("RssShmem after adding a 1 GiB region with one page written: +%d KiB" % (added >> 10))
assert added < 64 << 20, "ckptd faulted in the region's holes: +%d bytes" % added
m = c.request(TENSOR_REG, {"group": "model", "name": "w", "dtype": "U8", "shape": [GiB],
                           "region": 1, "offset": 0})
assert m.status == 0, m
m = c.request(SAVE, {"step": 1})
assert m.status == 0, m
while True:                      # events until committed
    e = c.recv()
    assert e is not None, "connection closed during the save"
    if e.type == EVENT and e.json.get("phase") == "committed":
        break
    assert not (e.type == EVENT and e.json.get("phase") == "failed"), e
saved = shmem() - before
print("RssShmem after saving it: +%d KiB" % (saved >> 10))
assert saved < 64 << 20, "a save read the region's holes: +%d bytes" % saved
PY
f=$(ls "$ROOT"/sparse/iter_000000001/model/rank_00000.safetensors) || fail "no shard"
/usr/bin/python3 - "$f" <<'PY' || fail "the sparse region's shard is not what the trainer wrote"
import json, struct, sys
with open(sys.argv[1], "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    h = json.loads(f.read(n))
    start = 8 + n + h["w"]["data_offsets"][0]
    f.seek(start + (512 << 20) - 4096); a = f.read(3 * 4096)
    f.seek(start); z = f.read(1 << 20)
assert a == bytes(4096) + b"\x5a" * 4096 + bytes(4096), "the written page"
assert z == bytes(1 << 20), "a hole"
PY
ckptctl verify "$ROOT/sparse/iter_000000001" > /dev/null || fail "ckptctl verify of the sparse save"

# the same over many small tensors (one chunk holds many: ckptd asks the
# kernel where the data is once per MiB, not once per tensor)
TOP=$TOP /usr/bin/python3 - "$SOCK" <<'PY' || fail "sparse region of small tensors"
import fcntl, os, sys
sys.path.insert(0, os.path.join(os.environ["TOP"], "tests", "integ"))
from rawproto import *
MiB = 1 << 20
def shmem():
    for l in open("/proc/%s/status" % os.environ["CKPTD_PID"]):
        if l.startswith("RssShmem:"):
            return int(l.split()[1]) * 1024
c = Conn(sys.argv[1], timeout=120)
assert hello_trainer(c, "sparse2").status == 0
fd = os.memfd_create("sparse2", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
os.ftruncate(fd, 256 * MiB)
written = {37: b"\x11", 700: b"\x22", 701: b"\x33"}   # tensors of 24 KiB + 64
size = 24 * 1024
for i, v in written.items():
    os.pwrite(fd, v * size, i * (size + 64))
fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
before = shmem()
assert c.request(REGION_ADD, {"region": 1, "size": 256 * MiB}, fds=[fd]).status == 0
for i in range(1024):
    m = c.request(TENSOR_REG, {"group": "g%d" % (i % 2), "name": "t%04d" % i, "dtype": "U8",
                               "shape": [size], "region": 1, "offset": i * (size + 64)})
    assert m.status == 0, m
assert c.request(SAVE, {"step": 1}).status == 0
while True:
    e = c.recv()
    assert e is not None, "connection closed during the save"
    if e.type == EVENT and e.json.get("phase") == "committed":
        break
    assert not (e.type == EVENT and e.json.get("phase") == "failed"), e
saved = shmem() - before
print("RssShmem after saving 1024 tensors, 3 written: +%d KiB" % (saved >> 10))
assert saved < 8 * MiB, "a save read the region's holes: +%d bytes" % saved
PY
/usr/bin/python3 - "$ROOT/sparse2/iter_000000001" <<'PY' || fail "the small tensors' shards are not what the trainer wrote"
import json, struct, sys
size = 24 * 1024
written = {37: b"\x11", 700: b"\x22", 701: b"\x33"}
for g in (0, 1):
    with open("%s/g%d/rank_00000.safetensors" % (sys.argv[1], g), "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
        for i in range(g, 1024, 2):
            b, e = h["t%04d" % i]["data_offsets"]
            f.seek(8 + n + b)
            got = f.read(e - b)
            assert got == written.get(i, b"\0") * size, "t%04d" % i
PY
ckptctl verify "$ROOT/sparse2/iter_000000001" > /dev/null || fail "ckptctl verify of the small tensors' save"

TOP=$TOP /usr/bin/python3 - "$SOCK" <<'PY' || fail "blob bounds"
import os, sys
sys.path.insert(0, os.path.join(os.environ["TOP"], "tests", "integ"))
from rawproto import *
MiB = 1 << 20
a, b = Conn(sys.argv[1]), Conn(sys.argv[1])
assert hello_trainer(a, "ba").status == 0 and hello_trainer(b, "bb").status == 0
put = lambda c, name: c.request(BLOB_PUT, {"name": name}, bin=bytes(4 * MiB))
assert put(a, "x").status == 0 and put(a, "y").status == 0
assert put(a, "y").status == 0, "replacing a blob counts once"
m = put(a, "z")
assert m.status == -28 and "max_client_blob_bytes 8388608" in m.error, m
print("per client:", m.error)
assert put(b, "x").status == 0
m = put(b, "y")
assert m.status == -28 and "max_total_blob_bytes 12582912" in m.error, m
print("in total:", m.error)
a.close()
for _ in range(100):             # a's bytes come back once ckptd saw it go
    m = put(b, "y")
    if m.status == 0:
        break
    import time; time.sleep(0.05)
assert m.status == 0, m
PY

# one uid's connections: the fifth of nobody's is refused; root's are not
TOP=$TOP "${AS_NOBODY[@]}" /usr/bin/python3 - "$SOCK" <<'PY' || fail "per-uid limit"
import os, sys
sys.path.insert(0, os.path.join(os.environ["TOP"], "tests", "integ"))
from rawproto import *
cs = [Conn(sys.argv[1]) for _ in range(4)]
assert all(hello_ctl(c).status == 0 for c in cs)
c = Conn(sys.argv[1])
m = c.recv()
assert m is not None and m.status == -16 and "max_clients_per_uid 4" in m.error, m
print("fifth:", m.error)
PY
ckptctl status > /dev/null || fail "root refused after nobody's connections"

# an idle ckptctl connection goes; one that keeps asking stays
TOP=$TOP /usr/bin/python3 - "$SOCK" <<'PY' || fail "ctl idle timeout"
import os, sys, time
sys.path.insert(0, os.path.join(os.environ["TOP"], "tests", "integ"))
from rawproto import *
idle, busy = Conn(sys.argv[1], timeout=20), Conn(sys.argv[1], timeout=20)
assert hello_ctl(idle).status == 0 and hello_ctl(busy).status == 0
for _ in range(8):
    time.sleep(0.5)
    assert busy.request(STATUS, {}).status == 0
assert idle.eof(), "the idle connection is still open"
PY
grep -q "ckptctl connection idle" "$LOG" || fail "no log line for the idle close"
pass
