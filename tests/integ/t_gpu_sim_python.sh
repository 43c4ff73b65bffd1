# The Python binding's Client.save_stream(gate=False) and gate_stream on
# the CUDA driver simulator (see t_gpu_sim.sh, t_gpu_sim_deferred.sh), with
# ckptd's only stager held at the failpoint stage.chunk: the forward pass
# runs while the save stages, the optimizer step queued after gate_stream
# waits for STAGED, the checkpoint holds the values from before it; the
# ctypes declarations, stream handles (int, .cuda_stream) and errors
# (a save() ticket, an unknown one, a bad stream) on the way.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/gpu_sim_lib.sh"
# under make tsan the simulator and libckpt are TSan-built, which a Python
# process cannot dlopen (libtsan needs static TLS); t_gpu_sim_deferred
# runs the same gates from C there
[ -n "${CKPT_TSAN_TREE:-}" ] && skip "Python cannot load the ThreadSanitizer build (make tsan)"
PY=$TOP/build/venv/bin/python
[ -x "$PY" ] || PY=python3
HOLD=$T/hold
mkfifo "$HOLD"
export CKPT_FAILPOINT=stage.chunk CKPT_FAILPOINT_HOLD=$HOLD
start_ckptd '"stage_threads": 1'
out=$(CKPT_LIB=$TOP/libckpt.so CKPT_CUDASIM_STRICT_SYNC=0 "$PY" "$TOP/tests/integ/gpu_sim_py.py" "$SOCK" "$HOLD" 2>&1) ||
	fail "the Python stream save: $out"
printf '%s\n' "$out" | sed 's/^/  trainer: /'
assert_alive
pass
