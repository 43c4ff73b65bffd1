# The staging pool is pinned off the loop (issue 25 item 3), on the CUDA
# driver simulator (see t_gpu_sim.sh).  CKPT_CUDASIM_PIN_HOLD holds ckptd's
# cuMemHostRegister of the pool until a file exists (as a 100 GiB pool takes
# a minute at 1-2 GB/s): while it is held, ckptctl status answers and says
# "pinning", the trainer's save waits for it (never copied while the pool
# is being registered); once released the save is staged and restored, and
# status says "pinned".  Before, the first CUDA registration pinned the pool
# on the loop thread and every client waited.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/gpu_sim_lib.sh"
CKPT_CUDASIM_PIN_HOLD=$T/go start_ckptd '"staging_bytes": "64MiB"'
st() { timeout 5 "$TOP/ckptctl" -s "$SOCK" status 2>&1; }
st | grep -q "gpu pin:  waiting for the first GPU context" || fail "status before any GPU use: $(st)"
GPU_TRAINER_MIB=2 CKPT_CUDASIM_STRICT_SYNC=0 "$TOP/build/tests/gpu_trainer" "$SOCK" pin roundtrip \
	> "$T/trainer.out" 2>&1 &
tr=$!
wait_until 30 sh -c "timeout 5 '$TOP/ckptctl' -s '$SOCK' status 2>&1 | grep -q 'gpu pin:  pinning'" ||
	fail "status while the pool is being pinned: $(st)"
# the loop still answers while the pin is held; nothing is staged yet
out=$(st) || fail "ckptctl status while pinning: $out"
echo "$out" | grep -q "pinning, 0 B of 64.0 MiB" || fail "pinning progress: $out"
js=$(timeout 5 "$TOP/ckptctl" -s "$SOCK" status --json) || fail "status --json while pinning"
echo "$js" | python3 -c 'import json,sys; p=json.load(sys.stdin)["gpu_pin"]; sys.exit(not (p["state"] == "pinning" and p["done"] == 0 and p["bytes"] == 64 << 20))' ||
	fail "gpu_pin in status --json: $js"
grep -q "committed iter_000000001" "$LOG" && fail "a save was staged before the pool was pinned"
kill -0 $tr 2>/dev/null || fail "the trainer ended while the pool was held: $(cat "$T/trainer.out")"
touch "$T/go"
wait $tr || fail "the trainer: $(cat "$T/trainer.out")"
st | grep -q "gpu pin:  pinned, 64.0 MiB of 64.0 MiB" || fail "status after pinning: $(st)"
grep -q "CUDA: staging pool pinned (64 MiB) in [0-9]* ms, off the loop" "$LOG" || fail "no pinned line in the log"
assert_alive
pass
