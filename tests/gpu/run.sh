#!/bin/bash
# tests/gpu/run.sh - the GPU end-to-end check, for a machine with an NVIDIA
# GPU (CI has none: `make test` runs this only when nvidia-smi works).
#
# Uses the binaries from `make gpu-bundle` (build/gpu-bundle: ckptd with
# liburing/libcrypto/jansson linked statically and libuv.so.1 beside it,
# libckpt.a, libjansson.a, ckpt.h), because the GPU machine has no -dev
# packages; builds tests/gpu/gpu_trainer.cu there with nvcc.  Runs a
# private ckptd and:
#   1. gpu_trainer (>= 1 GiB of cudaMalloc + VMM tensors): floor copies,
#      save on an idle GPU, save under load, restore into zeroed tensors,
#      bit-exact checks; prints the RESULT lines;
#   2. a trainer that SIGKILLs itself mid-copy: ckptd must survive;
#   3. a small trainer afterwards: ckptd still serves.
# Exit 0 pass, 1 fail, 2 something needed is missing, 77 no GPU.
# STRICT_TARGETS=1 also fails when staging or restore is < 0.85x the floor.
# Finishes in well under 5 minutes (each step has a timeout).
set -u
cd "$(dirname "$0")/../.." || exit 2
BUN=${GPU_BUNDLE:-build/gpu-bundle}
CUDA=${CUDA_HOME:-/usr/local/cuda}
OUTDIR=${OUT:-}

# --- what this needs, said plainly ---------------------------------------------
if ! nvidia-smi -L >/dev/null 2>&1; then
	echo "SKIP: no GPU (nvidia-smi does not work here)"
	exit 77
fi
missing=()
have_libcuda=0
ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1 ' && have_libcuda=1
for f in /usr/lib/x86_64-linux-gnu/libcuda.so.1 /usr/lib64/libcuda.so.1 \
	 /usr/local/nvidia/lib64/libcuda.so.1; do
	[ -e "$f" ] && have_libcuda=1
done
[ $have_libcuda = 1 ] || missing+=("libcuda.so.1 (the NVIDIA driver's library)")
for f in ckptd libuv.so.1 libckpt.a libjansson.a ckpt.h; do
	[ -e "$BUN/$f" ] || missing+=("$BUN/$f: run 'make gpu-bundle' on the build machine and carry build/gpu-bundle")
done
NVCC=$(command -v nvcc || echo "$CUDA/bin/nvcc")
[ -x "$NVCC" ] && [ -z "${CUDA_HOME:-}" ] && CUDA=$(cd "$(dirname "$NVCC")/.." && pwd)
CUDART_DIR=
for d in "$CUDA/lib64" "$CUDA/targets/x86_64-linux/lib" /usr/lib/x86_64-linux-gnu; do
	ls "$d"/libcudart.so* >/dev/null 2>&1 && { CUDART_DIR=$d; break; }
done
[ -n "$CUDART_DIR" ] || missing+=("libcudart.so (the CUDA runtime) in $CUDA/lib64")
if [ -e "$BUN/ckptd" ] && ! out=$("$BUN/ckptd" --version 2>&1); then
	missing+=("a runnable $BUN/ckptd: $out")
fi
if [ ! -x "$NVCC" ] && [ ! -x "$BUN/gpu_trainer" ]; then
	missing+=("nvcc ($CUDA/bin/nvcc) or a prebuilt $BUN/gpu_trainer")
fi
if [ ${#missing[@]} -gt 0 ]; then
	echo "MISSING (nothing was run):"
	printf '  - %s\n' "${missing[@]}"
	exit 2
fi
export LD_LIBRARY_PATH="$CUDART_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
nvidia-smi --query-gpu=name,uuid,driver_version,memory.total --format=csv,noheader
echo "nvcc: $("$NVCC" --version 2>/dev/null | tail -1)"

T=$(mktemp -d /tmp/ckpt-gpu.XXXXXX)
CKPTD_PID=
finish() {
	[ -n "$CKPTD_PID" ] && kill -9 "$CKPTD_PID" 2>/dev/null
	if [ -n "$OUTDIR" ]; then
		cp "$T"/*.log "$T"/*.out "$OUTDIR"/ 2>/dev/null
	fi
	rm -rf "$T"
}
trap finish EXIT
fail() { echo "FAIL: $*"; echo "--- ckptd log (last 30 lines):"; tail -30 "$T/ckptd.log"; exit 1; }

# --- build the trainer ---------------------------------------------------------------
TR=$T/gpu_trainer
if [ -x "$NVCC" ]; then
	# -cudart shared: libckpt then finds the trainer's own libcudart
	build() {
		timeout 120 "$NVCC" -O2 "$1" -cudart shared -I"$BUN" -o "$TR" tests/gpu/gpu_trainer.cu \
			"$BUN/libckpt.a" "$BUN/libjansson.a" -L"$CUDA/lib64/stubs" -L"$CUDA/lib64" \
			-lcuda -ldl -lpthread >> "$T/nvcc.out" 2>&1
	}
	build -arch=native || build -arch=sm_90 ||
		{ cat "$T/nvcc.out"; fail "nvcc could not build gpu_trainer"; }
else
	echo "note: no nvcc here, using the prebuilt $BUN/gpu_trainer"
	cp "$BUN/gpu_trainer" "$TR"
fi

# --- a private ckptd -----------------------------------------------------------------------
SOCK=$T/ckptd.sock
cat > "$T/ckptd.json" <<JSON
{"socket": "$SOCK", "root": "$T/root", "staging_bytes": "4GiB", "chunk_bytes": "16MiB",
 "stage_threads": 4, "write_threads": 4, "keep_last": 0, "log_level": "info",
 "gpu": "auto"}
JSON
"$BUN/ckptd" -c "$T/ckptd.json" > "$T/ckptd.log" 2>&1 &
CKPTD_PID=$!
for _ in $(seq 200); do
	grep -q 'ready:' "$T/ckptd.log" && break
	kill -0 $CKPTD_PID 2>/dev/null || fail "ckptd exited at start"
	sleep 0.1
done
grep -q 'ready:' "$T/ckptd.log" || fail "ckptd did not become ready"
grep -m1 'CUDA:\|no GPU' "$T/ckptd.log"
grep -q 'CUDA: .*device' "$T/ckptd.log" || fail "ckptd found no usable GPU (its log says why above)"
grep -i 'cannot pin' "$T/ckptd.log" && echo "WARNING: the staging pool is not pinned"

# --- 1. the main run ---------------------------------------------------------------------------
echo "== gpu_trainer: $((${GPU_MIB:-1280})) MiB of tensors"
timeout 200 "$TR" "$SOCK" "${GPU_MIB:-1280}" 2>&1 | tee "$T/trainer.out"
rc=${PIPESTATUS[0]}
[ $rc -eq 0 ] || fail "gpu_trainer exited $rc"
kill -0 $CKPTD_PID 2>/dev/null || fail "ckptd died"

# --- 2. a trainer dies mid-copy; 3. ckptd still serves -----------------------------------------
echo "== a trainer killed with a save in flight"
timeout 60 "$TR" "$SOCK" 512 die > "$T/die.out" 2>&1
sleep 2
kill -0 $CKPTD_PID 2>/dev/null || fail "ckptd died when a trainer was killed mid-copy"
echo "ckptd alive"
timeout 60 "$TR" "$SOCK" 64 > "$T/after.out" 2>&1 || { cat "$T/after.out"; fail "ckptd stopped serving after a trainer died"; }
echo "a new trainer saved and restored afterwards"
kill -TERM $CKPTD_PID
wait $CKPTD_PID 2>/dev/null
CKPTD_PID=

# --- summary -------------------------------------------------------------------------------------
val() { awk -v k="$1" '$1 == "RESULT" && $2 == k {print $3}' "$T/trainer.out"; }
echo "== summary"
printf '  %-34s %s\n' "plain pinned D2H (floor)" "$(val floor_d2h_GBps) GB/s" \
	"plain pinned H2D" "$(val floor_h2d_GBps) GB/s" \
	"ckptd staging" "$(val staging_GBps) GB/s ($(val staging_vs_floor)x floor, target >= 0.85)" \
	"trainer stall (CPU in save_stream)" "$(val trainer_stall_ms) ms (idle), $(val trainer_stall_under_load_ms) ms (under load)" \
	"training-stream delay" "$(val stream_delay_ms) ms" \
	"restore" "$(val restore_step2_GBps) GB/s ($(val restore_vs_h2d_floor)x H2D, target >= 0.85)"
miss=0
awk -v a="$(val staging_vs_floor)" 'BEGIN { exit !(a >= 0.85) }' || { echo "  TARGET MISSED: staging"; miss=1; }
awk -v a="$(val restore_vs_h2d_floor)" 'BEGIN { exit !(a >= 0.85) }' || { echo "  TARGET MISSED: restore"; miss=1; }
[ "${STRICT_TARGETS:-0}" = 1 ] && [ $miss = 1 ] && exit 1
echo "PASS tests/gpu/run.sh"
exit 0
