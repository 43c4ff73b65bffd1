# Two simulated GPUs: restores of global tensors into GPU 1 (the
# resharding reader pins its scratch buffers, cuMemHostRegister) while
# GPU 0 comes up for the first time (its context made, the staging pool's
# pinning looked at).  Both take the device lock and pin_lock of
# daemon/gpu.c; taken in opposite orders they deadlock (issue 25 item 2).
# The hang needs the two to meet, but ThreadSanitizer (`make tsan`) reports
# the inversion whenever both paths ran: under TSan this test fails on any
# build that takes the locks in opposite orders.  Without TSan it checks
# that neither side hangs (every trainer under a timeout).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/gpu_sim_lib.sh"
export CKPT_CUDASIM_GPUS=2
start_ckptd
grep -q 'CUDA: 2 of 2 device(s) usable' "$LOG" || fail "ckptd did not find 2 simulated GPUs"
gt() {   # LOGNAME JOB MODE [ARG]: the test trainer, under a timeout
	local name=$1; shift
	CKPT_CUDASIM_STRICT_SYNC=0 timeout 60 "$TOP/build/tests/gpu_trainer" "$SOCK" "$@" \
		> "$T/$name.out" 2>&1
}
# GPU 1 up first, global tensors saved from it
GPU_TRAINER_DEVICE=1 GPU_TRAINER_GLOBAL=1 GPU_TRAINER_MIB=2 gt save1 lo1 sequential 1 ||
	{ cat "$T/save1.out"; fail "save on GPU 1"; }
# restores into GPU 1, pinning scratch, while GPU 0 comes up
( for i in 1 2 3 4; do
	GPU_TRAINER_DEVICE=1 GPU_TRAINER_GLOBAL=1 GPU_TRAINER_MIB=2 gt rest$i lo1 restore 1 ||
		{ echo "restore $i failed"; exit 1; }
  done ) > "$T/restores.out" 2>&1 &
restores=$!
GPU_TRAINER_DEVICE=0 GPU_TRAINER_MIB=2 gt up0 lo0 roundtrip ||
	{ cat "$T/up0.out"; fail "GPU 0 coming up (a hang here is the lock-order deadlock)"; }
wait $restores || { cat "$T/restores.out" "$T"/rest*.out; fail "restores into GPU 1"; }
grep 'cannot set up CUDA device' "$LOG" && fail "a GPU did not come up"
grep -q 'job lo1: rank 0 of 1: .* global piece' "$LOG" || fail "not restored as global tensors"
assert_alive
pass
