#!/bin/bash
# gpu_many.sh - issue 25 item 6: many small CUDA tensors staged against one
# plain copy of the same bytes, on the CUDA driver simulator (or a real GPU
# when build/cudasim is not put on LD_LIBRARY_PATH: GPU_MANY_REAL=1).
#   tests/bench/gpu_many.sh [N [TENSOR_BYTES [GAP]]]   default 16000 4096 0
# Prints the trainer's RESULT lines: staged_ms against floor_one_copy_ms.
# GAP may be "torch": PyTorch caching-allocator layout (see gpu_trainer.c).
# The simulator charges every queued copy CKPT_CUDASIM_OP_US (200 us) plus
# its bytes at CKPT_CUDASIM_MBPS, and each host wait its polling.
. "$(dirname "$0")/../integ/lib.sh"
[ -n "${GPU_MANY_REAL:-}" ] || . "$(dirname "$0")/../integ/gpu_sim_lib.sh"
export CKPT_CUDASIM_HANG_MS=${CKPT_CUDASIM_HANG_MS:-60000}
start_ckptd '"staging_bytes": "256MiB"' '"chunk_bytes": "8MiB"' '"log_level": "info"'
GPU_TRAINER_TENSOR_BYTES=${2:-4096} GPU_TRAINER_GAP=${3:-0} \
	CKPT_CUDASIM_STRICT_SYNC=0 "$TOP/build/tests/gpu_trainer" "$SOCK" many many "${1:-16000}" ||
	fail "the many-tensor save"
