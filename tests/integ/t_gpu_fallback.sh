# A host-only ckptd (no GPU or no driver: this CI) refuses CUDA memory with
# a clear error and keeps serving: CUDA_REGION_ADD (IPC and VMM with an fd),
# SAVE with a "cuda" object (ckpt_save_stream) and the old TENSOR_REG
# "cuda" key all get -EOPNOTSUPP with the reason; descriptors that came
# with a refused message are not leaked; a host-memory trainer saves and
# restores on the same daemon afterwards.
. "$(dirname "$0")/lib.sh"
start_ckptd
grep -q 'no GPU (.*): host memory only' "$LOG" || {
	grep -q 'CUDA: .* device(s) usable' "$LOG" && skip "this machine has a GPU"
	fail "ckptd did not say why it has no GPU"
}
log "$(grep -o 'no GPU (.*' "$LOG" | head -1)"
ckptctl status > /dev/null      # the first connection opens ckptd's spare fd
fds_before=$(ls -l /proc/$CKPTD_PID/fd | grep -vc "$ROOT")   # a job keeps its directory open
ls -l /proc/$CKPTD_PID/fd > $T/fd.before

python3 - "$TOP/tests/integ" "$SOCK" <<'PY' || fail "CUDA messages were not refused cleanly"
import os, sys
sys.path.insert(0, sys.argv[1])
from rawproto import *
CUDA_REGION_ADD = 15
EOPNOTSUPP = 95
c = Conn(sys.argv[2])
h = hello_trainer(c, "gpufb")
assert h.status == 0 and h.json["gpu"] is False, h
assert not (h.json["features"] & 2), "CUDA_IPC feature announced without a GPU"
uuid = "GPU-5e1a2b3c-4d5e-6f70-8192-a3b4c5d6e7f8"
ipc = {"region": 1, "size": 1 << 20, "gpu": uuid, "base": 0x7f0000000000,
       "kind": "ipc", "key": "ab" * 64}
m = c.request(CUDA_REGION_ADD, ipc)
assert m.status == -EOPNOTSUPP, m
assert "no GPU" in m.error and "ckpt_alloc" in m.error, m.error
print("ok ipc:", m.error)
fd = os.memfd_create("fake-vmm-chunk")
os.ftruncate(fd, 2 << 20)
vmm = dict(ipc, region=2, kind="vmm", at=0, chunks=[1 << 20])
rid = c.send(CUDA_REGION_ADD, vmm, fds=[fd])
os.close(fd)
m = c.recv()
assert m.req_id == rid and m.status == -EOPNOTSUPP, m
print("ok vmm:", m.error)
m = c.request(SAVE, {"step": 1, "cuda": {"gpu": uuid, "slot": 0, "ready": "00" * 64}})
assert m.status == -EOPNOTSUPP and "no GPU" in m.error, m
print("ok save_stream:", m.error)
m = c.request(TENSOR_REG, {"group": "g", "name": "t", "dtype": "F32", "shape": [4],
                           "cuda": {"gpu": uuid}})
assert m.status == -EOPNOTSUPP, m
print("ok tensor_reg:", m.error)
# the region never came into being
m = c.request(TENSOR_REG, {"group": "g", "name": "t", "dtype": "F32", "shape": [4],
                           "region": 1, "offset": 0})
assert m.status == -2, m      # ENOENT
c.close()
PY
# the connection's own fd goes when ckptd has seen it close: give it time
for _ in $(seq 50); do
	fds_after=$(ls -l /proc/$CKPTD_PID/fd | grep -vc "$ROOT")
	[ "$fds_after" -le "$fds_before" ] && break
	sleep 0.1
done
[ "$fds_after" -le "$fds_before" ] || { ls -l /proc/$CKPTD_PID/fd | diff $T/fd.before -; fail "ckptd leaked descriptors ($fds_before -> $fds_after)"; }
assert_alive

trainer save -j host --mib 4 --steps 1 -q || fail "a host trainer could not save afterwards"
trainer restore -j host --mib 4 -q || fail "a host trainer could not restore afterwards"
ckptctl status | grep -q '"gpu": *false' || ckptctl status | grep -qi 'gpu.*\(no\|false\|off\)' ||
	fail "ckptctl status does not say there is no GPU"
assert_alive
pass
