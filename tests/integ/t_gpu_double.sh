# The daemon's CUDA data path without a GPU, through the GPU test double
# (daemon/gpu_double.c, CKPTD_GPU_TEST_DOUBLE=1: "device memory" is memfd
# chunks, copies are memcpy, events and gates are no-ops).  A raw client
# registers a VMM-style region of 10 chunks in two CUDA_REGION_ADD messages
# (8 fds + 2 fds), tensors straddling chunk boundaries, saves with a "cuda"
# SAVE (ckpt_save_stream's message), checks the shard bytes, zeroes its
# memory, restores and checks it bit for bit.  What this does not prove:
# anything about CUDA itself (tests/gpu/run.sh does, on a GPU machine).
. "$(dirname "$0")/lib.sh"
export CKPTD_GPU_TEST_DOUBLE=1
start_ckptd
grep -q 'SIMULATED' "$LOG" || fail "ckptd did not warn about the test double"

python3 - "$TOP/tests/integ" "$SOCK" "$ROOT" <<'PY' || fail "the CUDA data path misbehaved"
import glob, json, mmap, os, random, struct, sys
sys.path.insert(0, sys.argv[1])
from rawproto import *
CUDA_REGION_ADD = 15
MiB = 1 << 20
c = Conn(sys.argv[2], timeout=30)
h = hello_trainer(c, "gpudbl")
assert h.status == 0 and h.json["gpu"] is True and h.json["features"] & 2, h
uuid = "GPU-00000000-1111-2222-3333-444444444444"
rnd = random.Random(7)
fds, maps = [], []
for i in range(10):
    fd = os.memfd_create("chunk%d" % i)
    os.ftruncate(fd, MiB)
    m = mmap.mmap(fd, MiB)
    m[:] = rnd.randbytes(MiB)
    fds.append(fd); maps.append(m)
orig = b"".join(bytes(m) for m in maps)
base = 0x7f1200000000
reg = {"region": 1, "size": 10 * MiB, "gpu": uuid, "base": base, "kind": "vmm",
       "key": "%016x" % 0xabc + "00" * 56}
rid = c.send(CUDA_REGION_ADD, dict(reg, at=0, chunks=[MiB] * 8), fds=fds[:8])
m = c.reply_to(rid); assert m.status == 0, m
t1 = {"group": "model", "name": "w", "dtype": "F32", "shape": [3 * MiB // 4],
      "region": 1, "offset": 4096}
m = c.request(TENSOR_REG, t1)
assert m.status == -22 and "missing VMM chunks" in m.error, m
# out of order continuation is refused
rid = c.send(CUDA_REGION_ADD, dict(reg, at=9 * MiB, chunks=[MiB]), fds=fds[9:])
m = c.reply_to(rid); assert m.status == -22, m
rid = c.send(CUDA_REGION_ADD, dict(reg, at=8 * MiB, chunks=[MiB] * 2), fds=fds[8:])
m = c.reply_to(rid); assert m.status == 0, m
for fd in fds:
    os.close(fd)
tensors = [t1,
           {"group": "model", "name": "b", "dtype": "BF16", "shape": [2 * MiB // 2 + 512],
            "region": 1, "offset": 7 * MiB - 1024},
           {"group": "optim", "name": "m", "dtype": "U8", "shape": [123457],
            "region": 1, "offset": 10 * MiB - 123457}]
for t in tensors:
    m = c.request(TENSOR_REG, t); assert m.status == 0, m
m = c.request(TENSOR_REG, dict(t1, name="too_far", offset=10 * MiB - 8))
assert m.status == -34, m       # ERANGE

def wait_phase(ticket, want):
    while True:
        ev = c.recv()
        assert ev is not None, "connection closed"
        if ev.type == EVENT and ev.json.get("ticket") == ticket:
            assert ev.json["phase"] != "failed", ev
            if ev.json["phase"] == want:
                return ev

rid = c.send(SAVE, {"step": 1, "cuda": {"gpu": uuid, "slot": 0, "ready": "11" * 64}})
rep = c.recv()
while rep.type == EVENT:
    rep = c.recv()
assert rep.req_id == rid and rep.status == 0, rep
assert len(rep.json["done"]) == 128, rep.json
wait_phase(rep.json["ticket"], "committed")
# the slot is free again once staged
m = c.request(SAVE, {"step": 2, "cuda": {"gpu": uuid, "slot": 0, "ready": "11" * 64}})
assert m.status == 0, m
wait_phase(m.json["ticket"], "committed")

# shard bytes == memory bytes
root = sys.argv[3]
n = 0
for path in glob.glob(root + "/gpudbl/iter_000000001/**/*.safetensors", recursive=True):
    data = open(path, "rb").read()
    (hl,) = struct.unpack("<Q", data[:8])
    hdr = json.loads(data[8:8 + hl])
    for name, e in hdr.items():
        if name == "__metadata__":
            continue
        t = [t for t in tensors if t["name"] == name][0]
        b0, b1 = e["data_offsets"]
        assert data[8 + hl + b0:8 + hl + b1] == orig[t["offset"]:t["offset"] + b1 - b0], name
        n += 1
assert n == 3, n
print("ok shard bytes equal the simulated device memory (%d tensors)" % n)

for mm in maps:
    mm[:] = bytes(MiB)
m = c.request(RESTORE, {"step": 1})
assert m.status == 0, m
now = b"".join(bytes(mm) for mm in maps)
for t in tensors:
    nb = {"F32": 4, "BF16": 2, "U8": 1}[t["dtype"]] * t["shape"][0]
    assert now[t["offset"]:t["offset"] + nb] == orig[t["offset"]:t["offset"] + nb], t["name"]
print("ok restore wrote every tensor back bit-exact")
# REGION_DEL drops the region and its tensors
m = c.request(REGION_DEL, {"region": 1}); assert m.status == 0, m
m = c.request(SAVE, {"step": 3}); assert m.status == -61, m   # ENODATA: nothing left
c.close()
PY
assert_alive
pass
