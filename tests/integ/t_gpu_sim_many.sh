# Many small CUDA tensors (issue 25 item 6), on the CUDA driver simulator
# (see t_gpu_sim.sh): 4,000 tensors packed back to back in one allocation
# stage as one copy per chunk, not one copy and host round trip each, and
# restore bit for bit; 300 tensors with gaps between them (copied one by
# one, one wait per chunk) too.  The bound is loose (before: ~100x one plain
# copy of the same bytes; tests/bench/gpu_many.sh measures 16,000).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/gpu_sim_lib.sh"
start_ckptd '"chunk_bytes": "8MiB"'
out=$(gtrainer many many 4000) || fail "4000 packed tensors: $out"

ratio=$(echo "$out" | awk '$3 == "staged_over_floor" {print $4}')
[ -n "$ratio" ] && awk -v r="$ratio" 'BEGIN { exit !(r < 20) }' ||
	fail "4000 packed tensors staged in $ratio x one copy of their bytes"
GPU_TRAINER_TENSOR_BYTES=4000 GPU_TRAINER_GAP=96 gtrainer gaps many 300 ||
	fail "300 tensors with gaps"
assert_alive
pass
