# CUDA_REGION_ADD on the wire, against ckptd on the CUDA driver simulator
# (see t_gpu_sim.sh).  A raw client sends VMM chunks as the simulator's
# memfds (what its cuMemExportToShareableHandle gives): a region of 10
# chunks in two CUDA_REGION_ADD messages (8 fds + 2 fds), a continuation out
# of order refused, tensors straddling chunk boundaries, a tensor before the
# region is complete and one past its end refused; saves, checks the shard
# bytes, zeroes the memory, restores and checks it bit for bit; REGION_DEL.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/gpu_sim_lib.sh"
start_ckptd

python3 - "$TOP/tests/integ" "$SOCK" "$ROOT" <<'PY' || fail "the CUDA data path misbehaved"
import glob, json, mmap, os, random, struct, sys
sys.path.insert(0, sys.argv[1])
from rawproto import *
CUDA_REGION_ADD = 15
MiB = 1 << 20
c = Conn(sys.argv[2], timeout=30)
h = hello_trainer(c, "gpudbl")
assert h.status == 0 and h.json["gpu"] is True and h.json["features"] & 2, h
uuid = "GPU-c0da5177-0000-4c4b-8000-00000000a000"     # simulated GPU 0
rnd = random.Random(7)
fds, maps = [], []
for i in range(10):
    fd = os.memfd_create("cudasim-vmm-%016x" % (0x77000 + i))
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

# "cuda" SAVEs: the sequence number and the gate page are required, the
# page must be a sealed memfd of one page, a ready event that is not a
# CUDA event is refused; a plain SAVE carries no descriptor
cu = {"gpu": uuid, "slot": 0, "ready": "11" * 64}
m = c.request(SAVE, {"step": 1, "cuda": cu})
assert m.status == -22 and '"seq"' in m.error, m
cu["seq"] = 1
m = c.request(SAVE, {"step": 1, "cuda": cu})
assert m.status == -22 and "gate page" in m.error, m
page = os.memfd_create("gates", os.MFD_ALLOW_SEALING)
os.ftruncate(page, mmap.PAGESIZE)
rid = c.send(SAVE, {"step": 1, "cuda": cu}, fds=[page])
m = c.reply_to(rid); assert m.status < 0 and "not sealed" in m.error, m
import fcntl
fcntl.fcntl(page, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
rid = c.send(SAVE, {"step": 1}, fds=[page])
m = c.reply_to(rid); assert m.status == -22 and "gate page" in m.error, m
rid = c.send(SAVE, {"step": 1, "cuda": cu}, fds=[page])
m = c.reply_to(rid); assert m.status < 0 and "cuIpcOpenEventHandle" in m.error, m
other = os.memfd_create("other", os.MFD_ALLOW_SEALING)
os.ftruncate(other, mmap.PAGESIZE)
fcntl.fcntl(other, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
rid = c.send(SAVE, {"step": 1, "cuda": cu}, fds=[other])
m = c.reply_to(rid); assert m.status == -22 and "one gate page" in m.error, m
os.close(page); os.close(other)
print("ok stream SAVEs without a sequence number or a sound gate page are refused")
m = c.request(SAVE, {"step": 1})
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
