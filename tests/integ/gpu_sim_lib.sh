# Helpers for the tests that run ckptd and the test trainer on the CUDA
# driver simulator.  Source after lib.sh, before start_ckptd.
[ -e "$TOP/build/cudasim/libcuda.so.1" ] && [ -x "$TOP/build/tests/gpu_trainer" ] ||
	fail "make cudasim first"
export LD_LIBRARY_PATH="$TOP/build/cudasim${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export CKPT_CUDASIM_HANG_MS=${CKPT_CUDASIM_HANG_MS:-20000}
export CKPT_CUDASIM_STRICT_SYNC=1
# gtrainer JOB MODE [ARG]: run the test trainer, its output in the log
gtrainer() {
	local out rc
	out=$(CKPT_CUDASIM_STRICT_SYNC=0 "$TOP/build/tests/gpu_trainer" "$SOCK" "$@" 2>&1); rc=$?
	printf '%s\n' "$out" | sed 's/^/  trainer: /'
	[ $rc -eq 0 ] || grep -h 'cudasim' "$LOG" | tail -20 | sed 's/^/  ckptd: /'
	return $rc
}
