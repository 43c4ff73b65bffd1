# A trainer that goes on saving with ckpt_save_stream on the same
# connection across a reset of ckptd's faulted context (issue 25 item 4),
# on the CUDA driver simulator: the first copy faults (see
# t_gpu_sim_sticky.sh), that save fails with ENXIO and is retried, and then
# more saves than there are event slots, so that every slot whose
# trainer's "ready" event ckptd opened before the reset is used again.  The
# reset destroyed those events (the simulator makes them stale as the
# driver does): ckptd must open them anew, not wait on dead handles.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/gpu_sim_lib.sh"
CKPT_CUDASIM_STICKY_COPY=1 CKPT_CUDASIM_STICKY_DEV=0 start_ckptd
out=$(CKPT_CUDASIM_STRICT_SYNC=0 GPU_TRAINER_RETRY=1 GPU_TRAINER_MIB=2 GPU_TRAINER_MEM=ipc \
	"$TOP/build/tests/gpu_trainer" "$SOCK" again sequential 12 2>&1) ||
	fail "saves after the reset failed: $out"
echo "$out" | grep -q "retrying step 1: .*context of CUDA device 0 is faulted" ||
	fail "the first save did not fail on the fault: $out"
grep -q "CUDA device 0: context reset after" "$LOG" || fail "no reset logged"
# a fault after the ring went round once: the save right after it comes
# while the context is still faulted, in a slot opened before the fault
stop_ckptd
CKPT_CUDASIM_STICKY_COPY=21 CKPT_CUDASIM_STICKY_DEV=0 start_ckptd
out=$(CKPT_CUDASIM_STRICT_SYNC=0 GPU_TRAINER_RETRY=1 GPU_TRAINER_MIB=2 GPU_TRAINER_MEM=ipc \
	"$TOP/build/tests/gpu_trainer" "$SOCK" late sequential 20 2>&1) ||
	fail "saves after a late reset failed: $out"
echo "$out" | grep "retrying step"
assert_alive
pass
