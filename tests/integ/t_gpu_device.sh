# The GPU end-to-end check (tests/gpu/run.sh) when this machine has a GPU;
# skipped with the reason otherwise (CI has none).
TOP=$(cd "$(dirname "$0")/../.." && pwd)
if ! nvidia-smi -L >/dev/null 2>&1; then
	echo "SKIP: no GPU (nvidia-smi does not work here)"
	exit 77
fi
[ -x "$TOP/build/gpu-bundle/ckptd" ] || make -s -C "$TOP" gpu-bundle ||
	{ echo "FAIL: make gpu-bundle"; exit 1; }
exec "$TOP/tests/gpu/run.sh"
