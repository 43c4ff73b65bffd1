# A stream save whose gate comes later (CKPT_GATE_LATER, ckpt_gate_stream:
# what ckpt.torch does on CUDA), on the CUDA driver simulator (see
# t_gpu_sim.sh), with ckptd's only stager held at the failpoint stage.chunk
# before it copies: the "forward pass" queued on the training stream after
# the save runs while the save is not yet staged; the "optimizer step"
# queued after ckpt_gate_stream does not run until it is; the checkpoint
# holds the values from before the step.  The control: the same with the
# gate made at once (ckpt_save_stream) holds the forward pass, and the
# trainer says so.  Then a save whose gate is made after ckptd died: the
# stream runs on (libckpt opens the gates when the connection ends).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/gpu_sim_lib.sh"
HOLD=$T/hold
mkfifo "$HOLD"
export CKPT_FAILPOINT=stage.chunk CKPT_FAILPOINT_HOLD=$HOLD
start_ckptd '"stage_threads": 1'
GPU_TRAINER_MIB=2 gtrainer dfr deferred "$HOLD" || fail "deferred gate"
assert_alive
stop_ckptd || fail "ckptd did not stop cleanly"
rm -f "$HOLD.held"
# the control: gated at once, the forward pass waits for STAGED
start_ckptd '"stage_threads": 1'
out=$(GPU_TRAINER_MIB=2 GPU_TRAINER_GATE=now CKPT_CUDASIM_STRICT_SYNC=0 \
	"$TOP/build/tests/gpu_trainer" "$SOCK" now deferred "$HOLD" 2>&1) &&
	fail "gated at once, the forward pass ran while staging: $out"
printf '%s\n' "$out" | grep -q "did not run while ckptd was staging (gated at once" ||
	fail "the control failed otherwise: $out"
assert_alive
stop_ckptd || fail "ckptd did not stop cleanly"
rm -f "$HOLD.held"
# ckptd dies while the optimizer step waits at a deferred gate
start_ckptd '"stage_threads": 1'
GPU_TRAINER_MIB=2 GPU_TRAINER_ORPHAN=$T/dead CKPT_CUDASIM_STRICT_SYNC=0 \
	"$TOP/build/tests/gpu_trainer" "$SOCK" orph deferred "$HOLD" > "$T/orph.out" 2>&1 &
orph=$!
wait_until 30 grep -q armed "$T/orph.out" || fail "the orphan: $(cat "$T/orph.out")"
kill_ckptd
touch "$T/dead"
wait $orph || fail "the stream stayed gated after ckptd died: $(cat "$T/orph.out")"
grep -q "the stream ran on" "$T/orph.out" || fail "the orphan: $(cat "$T/orph.out")"
pass
