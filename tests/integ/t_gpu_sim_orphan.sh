# ckptd SIGKILLed (a crash, the OOM killer) while a trainer's stream save
# is armed, on the CUDA driver simulator (see t_gpu_sim.sh): the trainer's
# stream has not reached the save yet, so ckptd has staged nothing; when it
# gets there, the stream must run on (libckpt's watcher saw the connection
# end and opened the save's gate itself) and the save must report the
# loss.  Before the gate page, the stream waited on ckptd's "done" event
# for ever (the trainer's simulator watchdog aborts it).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/gpu_sim_lib.sh"
start_ckptd
CKPT_CUDASIM_STRICT_SYNC=0 CKPT_CUDASIM_HANG_MS=8000 GPU_TRAINER_MIB=2 \
	"$TOP/build/tests/gpu_trainer" "$SOCK" orph orphan "$T/go" > "$T/orph.out" 2>&1 &
tr=$!
wait_until 30 grep -q armed "$T/orph.out" || fail "the armed save: $(cat "$T/orph.out")"
kill_ckptd
touch "$T/go"
wait $tr || fail "the trainer after ckptd died: $(cat "$T/orph.out")"
cat "$T/orph.out" | sed 's/^/  trainer: /'
grep -q "ok ckptd died" "$T/orph.out" || fail "no verdict: $(cat "$T/orph.out")"
pass
