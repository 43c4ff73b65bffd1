# Stream saves that used to hang, on the CUDA driver simulator (see
# t_gpu_sim.sh): 16 ckpt_save_stream calls queued back to back on one
# stream (each save's "ready" sits behind the previous save's "done": a
# stager must not wait on a save the stream has not reached); more than 8
# saves in one session (ring slots reused: ckptd's streams must not share a
# hardware queue with a gate); ckpt_close with saves in flight (every gate
# must open, so the trainer's stream drains); a restore while another
# trainer's save waits for its stream (ckptd's gate is armed: pinning the
# restore buffers then would synchronise with it, which ckptd's
# CKPT_CUDASIM_STRICT_SYNC=1 turns into an abort).  A hang aborts the hung
# process through the simulator's watchdog.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/gpu_sim_lib.sh"
start_ckptd
GPU_TRAINER_MIB=2 gtrainer ovl overlap 16 || fail "16 overlapping stream saves"
GPU_TRAINER_MIB=2 gtrainer seq sequential 12 || fail "12 stream saves in a row"
GPU_TRAINER_MIB=2 gtrainer cls close 6 || fail "ckpt_close with stream saves in flight"
GPU_TRAINER_MIB=2 gtrainer after roundtrip || fail "a trainer after the others"
GPU_TRAINER_MIB=2 gtrainer rst sequential 1 || fail "a save to restore"
GPU_TRAINER_MIB=2 CKPT_CUDASIM_STRICT_SYNC=0 "$TOP/build/tests/gpu_trainer" "$SOCK" held hold "$T/go" > "$T/held.out" 2>&1 &
held=$!
wait_until 30 grep -q armed "$T/held.out" || fail "the held save: $(cat "$T/held.out")"
GPU_TRAINER_MIB=2 gtrainer rst restore 1 || fail "a restore while another save's gate waits"
touch "$T/go"
wait $held || fail "the held save: $(cat "$T/held.out")"
assert_alive
pass
