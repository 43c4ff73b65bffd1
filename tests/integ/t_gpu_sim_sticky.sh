# A sticky CUDA error mid-copy (a trainer killed mid-copy can leave ckptd's
# context faulted; issue 25 item 4), on the CUDA driver simulator (see
# t_gpu_sim.sh): CKPT_CUDASIM_STICKY_COPY=1 CKPT_CUDASIM_STICKY_DEV=0 makes
# ckptd's first copy from GPU 0 fail with CUDA_ERROR_ILLEGAL_ADDRESS, and
# every later call on that context fail the same way until it is reset.
# Only that save fails, with a clear error; ckptd resets the context and the
# next save on GPU 0 works and restores bit-exact; GPU 1 is unaffected;
# ckptctl status and the metrics say what happened.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/gpu_sim_lib.sh"
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
CKPT_CUDASIM_STICKY_COPY=1 CKPT_CUDASIM_STICKY_DEV=0 start_ckptd "\"metrics_port\": $PORT"
GPU_TRAINER_DEVICE=1 GPU_TRAINER_MIB=2 GPU_TRAINER_MEM=ipc gtrainer other1 roundtrip ||
	fail "a save on GPU 1 failed"
out=$(CKPT_CUDASIM_STRICT_SYNC=0 GPU_TRAINER_MIB=2 GPU_TRAINER_MEM=ipc \
	"$TOP/build/tests/gpu_trainer" "$SOCK" faulted roundtrip 2>&1) &&
	fail "the save whose copy faulted succeeded: $out"
echo "$out" | grep -q "an illegal memory access was encountered (CUDA error 700); the context of CUDA device 0 is faulted: ckptd resets it, retry the save" ||
	fail "the faulted save did not fail clearly: $out"
GPU_TRAINER_MIB=2 GPU_TRAINER_MEM=ipc gtrainer after0 roundtrip ||
	fail "the next save on GPU 0 failed after the reset"
GPU_TRAINER_DEVICE=1 GPU_TRAINER_MIB=2 GPU_TRAINER_MEM=ipc gtrainer other2 roundtrip ||
	fail "a save on GPU 1 failed after GPU 0's reset"
grep -q "CUDA device 0: context reset after an illegal memory access was encountered (CUDA error 700), 1 reset(s)" "$LOG" ||
	fail "no reset logged"
st=$(timeout 5 "$TOP/ckptctl" -s "$SOCK" status)
echo "$st" | grep -Eq "gpu0: +context reset after an illegal memory access was encountered \(CUDA error 700\) at 20[0-9-]+T[0-9:]+Z, 1 reset\(s\)$" ||
	fail "status: $st"
echo "$st" | grep -q "gpu1:" && fail "GPU 1 shown as reset: $st"
timeout 5 "$TOP/ckptctl" -s "$SOCK" status --json | python3 -c '
import json, sys
f = json.load(sys.stdin)["gpu_faults"]
assert [d["device"] for d in f] == [0], f
assert f[0]["resets"] == 1 and f[0]["faulted"] == 0 and f[0]["last_error"] == 700, f
assert f[0]["last_at"] > 1700000000, f' || fail "status --json gpu_faults"
python3 -c 'import sys, urllib.request
t = urllib.request.urlopen("http://127.0.0.1:%s/metrics" % sys.argv[1], timeout=5).read().decode()
assert "\nckptd_gpu_context_resets_total %s\n" % sys.argv[2] in t, t' "$PORT" 1 ||
	fail "metric ckptd_gpu_context_resets_total is not 1"
assert_alive
pass
