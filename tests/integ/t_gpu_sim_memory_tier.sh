# The memory tier into CUDA memory, on the CUDA driver simulator
# (build/cudasim, a test double of the NVIDIA driver): cudaMalloc (IPC)
# and VMM tensors saved, then restored bit for bit from ckptd's memory
# (each chunk checked, then copied host-to-device), not from disk.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/gpu_sim_lib.sh"
start_ckptd '"memory_tier_bytes": "256MiB"'
grep -q 'CUDA: 2 of 2 device(s) usable' "$LOG" || fail "ckptd did not find the simulated GPUs"
GPU_TRAINER_MEM=ipc gtrainer gmt_ipc roundtrip || fail "roundtrip (cudaMalloc / IPC)"
GPU_TRAINER_MEM=vmm gtrainer gmt_vmm roundtrip || fail "roundtrip (VMM fds)"
for j in gmt_ipc gmt_vmm; do
	grep -q "job $j: rank 0 restored iter_[0-9]* from memory" "$LOG" ||
		fail "$j: not restored from memory: $(grep "job $j" "$LOG" | tail -5)"
done
grep -q "from disk" "$LOG" && fail "a restore came from disk: $(grep 'from disk' "$LOG")"
assert_alive
pass
