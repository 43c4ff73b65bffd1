# VMM memory made with FABRIC handles only (PyTorch can make such
# segments; issue 25 item 4) cannot reach ckptd as a POSIX fd: it is
# refused at registration, naming the handle type and what to do, on the
# CUDA driver simulator (see t_gpu_sim.sh); ckptd is unharmed and POSIX-fd
# VMM memory still saves.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/gpu_sim_lib.sh"
start_ckptd
out=$(GPU_TRAINER_MIB=2 GPU_TRAINER_MEM=vmm GPU_TRAINER_VMM_HANDLES=8 \
	"$TOP/build/tests/gpu_trainer" "$SOCK" fab roundtrip 2>&1) &&
	fail "FABRIC-only VMM memory was registered"
echo "$out" | grep -q "cannot register CUDA memory: VMM memory with handle types 0x8 (FABRIC)" ||
	fail "FABRIC-only memory was not refused clearly: $out"
echo "$out" | grep -q "CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR" ||
	fail "the refusal does not say what to do: $out"
GPU_TRAINER_MIB=2 GPU_TRAINER_MEM=vmm GPU_TRAINER_VMM_HANDLES=9 gtrainer fab2 roundtrip ||
	fail "VMM memory with POSIX fd and FABRIC handles did not save"
assert_alive
pass
