# ckptd's GPU start-up on the CUDA driver simulator (see t_gpu_sim.sh):
# a driver that cannot initialise (CUDA error 803, a CUDA 13 library on an
# older kernel module) makes ckptd host-only with the driver's own message;
# one broken GPU of two leaves the other usable (a trainer on the broken
# one is told it failed the probe); in EXCLUSIVE_PROCESS mode
# ckptd holds no context at start, so the trainer gets its GPU, and ckptd's
# own later context is refused with the driver's message (an -ENXIO: not
# read as a storage error), not a hang.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/gpu_sim_lib.sh"

CKPT_CUDASIM_INIT_ERROR=803 start_ckptd
grep -q 'no GPU (cuInit: system has unsupported display driver / cuda driver combination (CUDA error 803)): host memory only' "$LOG" ||
	fail "ckptd did not say why it has no GPU"
GPU_TRAINER_MIB=2 gtrainer hostonly roundtrip && fail "a stream save worked without a GPU"
stop_ckptd

CKPT_CUDASIM_BAD_GPU=0 restart_ckptd_n
grep -q 'CUDA device 0: uncorrectable ECC error encountered (CUDA error 214): not used' "$LOG" ||
	fail "the broken GPU was not named"
grep -q 'CUDA: 1 of 2 device(s) usable' "$LOG" || fail "one broken GPU disabled the other"
GPU_TRAINER_DEVICE=1 GPU_TRAINER_MIB=2 gtrainer onegood roundtrip ||
	fail "a trainer on the good GPU"
out=$(GPU_TRAINER_DEVICE=0 GPU_TRAINER_MIB=2 "$TOP/build/tests/gpu_trainer" "$SOCK" onebad roundtrip 2>&1) &&
	fail "a trainer on the broken GPU saved"
echo "$out" | grep -q "failed ckptd's start-up probe" ||
	fail "the trainer on the broken GPU was not told it failed the probe: $out"
stop_ckptd

export CKPT_CUDASIM_EXCLUSIVE=1 CKPT_CUDASIM_LOCKDIR=$T
restart_ckptd_n
grep -q 'CUDA device 0 is in EXCLUSIVE_PROCESS mode' "$LOG" || fail "no EXCLUSIVE_PROCESS warning"
out=$(GPU_TRAINER_MIB=2 "$TOP/build/tests/gpu_trainer" "$SOCK" excl roundtrip 2>&1) &&
	fail "ckptd shared an EXCLUSIVE_PROCESS GPU"
echo "$out" | grep -q 'ckpt_register.*busy or unavailable (CUDA error 46)' ||
	fail "the trainer did not get its GPU, or not the driver's reason: $out"
echo "$out" | grep -q 'the GPU or its driver failed' && ! echo "$out" | grep -q 'storage' ||
	fail "a driver error read as a storage error: $out"
log "$(echo "$out" | tail -1)"
assert_alive
pass
