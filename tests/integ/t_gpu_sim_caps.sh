# Device capabilities checked at ckptd's probe (issue 25 item 4), on the
# CUDA driver simulator (see t_gpu_sim.sh): a GPU whose driver says 0 for
# IPC_EVENT_SUPPORTED, HOST_REGISTER_SUPPORTED and
# HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED (CKPT_CUDASIM_NO_ATTR) is named
# at start for each; a stream save on it is refused with that reason, so
# are VMM tensors, and the pool is not pinned (status: failed).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/gpu_sim_lib.sh"
CKPT_CUDASIM_NO_ATTR=125,99,103 start_ckptd
for m in "does not support interprocess events (IPC_EVENT_SUPPORTED is 0)" \
	 "cannot pin host memory (HOST_REGISTER_SUPPORTED is 0)" \
	 "cannot share VMM memory as POSIX fds (HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED is 0)"; do
	grep -q "CUDA device 0 $m" "$LOG" || fail "probe did not say: $m"
done
out=$(GPU_TRAINER_MIB=2 GPU_TRAINER_MEM=ipc "$TOP/build/tests/gpu_trainer" "$SOCK" ev roundtrip 2>&1) &&
	fail "a stream save without interprocess events worked"
echo "$out" | grep -q "use ckpt_save() on this GPU, not ckpt_save_stream()" ||
	fail "the stream save was not refused clearly: $out"
out=$(GPU_TRAINER_MIB=2 GPU_TRAINER_MEM=vmm "$TOP/build/tests/gpu_trainer" "$SOCK" vmm roundtrip 2>&1) &&
	fail "VMM memory without POSIX-fd handles worked"
echo "$out" | grep -q "register cudaMalloc memory (no expandable segments) on this GPU" ||
	fail "VMM memory was not refused clearly: $out"
timeout 5 "$TOP/ckptctl" -s "$SOCK" status | grep -q "gpu pin:  failed" ||
	fail "status: $(timeout 5 "$TOP/ckptctl" -s "$SOCK" status)"
assert_alive
pass
