# Small CUDA tensors with gaps between them, as PyTorch's caching allocator
# lays them out (issue 25 item 6), on the CUDA driver simulator: random
# sizes, 512-byte blocks, now and then a free block, some tensors across a
# chunk boundary (64 KiB chunks).  The daemon copies across small gaps and
# lays the pieces out from its scratch; every gap byte is a poison pattern
# that must never reach the checkpoint, and the restore is bit for bit.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/gpu_sim_lib.sh"
start_ckptd '"chunk_bytes": "64KiB"'
for seed in 1 2; do
	GPU_TRAINER_SEED=$seed GPU_TRAINER_TENSOR_BYTES=1024 GPU_TRAINER_GAP=torch \
		gtrainer gaps$seed many 1500 || fail "1500 gapped tensors (seed $seed)"
done
for f in $(find "$ROOT" -name '*.safetensors'); do
	python3 -c 'import sys; d = open(sys.argv[1], "rb").read(); sys.exit(b"\xef\xbe\xad\xde" * 2 in d)' "$f" ||
		fail "gap bytes (poison) in $f"
done
[ -n "$(find "$ROOT" -name '*.safetensors')" ] || fail "no shard written"
assert_alive
pass
