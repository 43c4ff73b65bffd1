# The real CUDA code of ckptd and libckpt on the CUDA driver simulator
# (build/cudasim/libcuda.so.1, a test double of the NVIDIA driver; see
# tests/cudasim): cudaMalloc (IPC) and VMM tensors saved with
# ckpt_save_stream, the training stream really held until STAGED (the
# optimizer step queued right after must not reach the checkpoint), and
# restore into device memory bit for bit; both memory kinds alone too, and
# as global tensors; managed memory refused with a message that names it;
# zero-element CUDA tensors (NULL, the end of an allocation) registered like
# any other.
# ckptd runs with CKPT_CUDASIM_STRICT_SYNC=1: an implicitly synchronising
# call while a stream waits aborts it.  A hang aborts the hung process
# (watchdog, CKPT_CUDASIM_HANG_MS).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/gpu_sim_lib.sh"
start_ckptd
grep -q 'CUDA: 2 of 2 device(s) usable' "$LOG" || fail "ckptd did not find the simulated GPUs"
gtrainer gsim roundtrip || fail "roundtrip (both memory kinds)"
GPU_TRAINER_MEM=ipc gtrainer gsim_ipc roundtrip || fail "roundtrip (cudaMalloc / IPC)"
GPU_TRAINER_MEM=vmm gtrainer gsim_vmm roundtrip || fail "roundtrip (VMM fds)"
GPU_TRAINER_MIB=2 gtrainer gsim_managed managed || fail "managed memory"
GPU_TRAINER_MIB=2 gtrainer gsim_empty empty || fail "zero-element CUDA tensors"
# global tensors in device memory: saved from it, restored into it by the
# resharding reader (chunk by chunk through its CUDA copies)
GPU_TRAINER_GLOBAL=1 gtrainer gsim_global roundtrip || fail "roundtrip of global tensors"
grep -q "job gsim_global: rank 0 of 1: 4 global piece(s)" "$LOG" || fail "not restored as global tensors"
assert_alive
pass
