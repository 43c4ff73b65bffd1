# One trainer's stuck save must not hold up other trainers, on the CUDA
# driver simulator (see t_gpu_sim.sh).  Trainer A queues a stream save
# behind a wait that does not end (think of a hung collective) and stays
# connected; trainers of other jobs on the same GPU then save and restore,
# their streams waiting for their own saves only.  ckptd runs with
# CUDA_DEVICE_MAX_CONNECTIONS set but empty (as some launchers leave it):
# when ckptd kept gate streams, that gave it a single one, and every other
# trainer's stream waited behind A's gate with no time limit (the trainers'
# simulator watchdog aborts them).  ckptd now makes no stream wait at all.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/gpu_sim_lib.sh"
CUDA_DEVICE_MAX_CONNECTIONS= start_ckptd
grep -q 'CUDA_DEVICE_MAX_CONNECTIONS' "$LOG" && fail "ckptd warned about CUDA_DEVICE_MAX_CONNECTIONS"
CKPT_CUDASIM_STRICT_SYNC=0 CKPT_CUDASIM_HANG_MS=600000 GPU_TRAINER_MIB=1 \
	"$TOP/build/tests/gpu_trainer" "$SOCK" stuck hold "$T/go" > "$T/stuck.out" 2>&1 &
stuck=$!
wait_until 30 grep -q armed "$T/stuck.out" || fail "the stuck save: $(cat "$T/stuck.out")"
for b in 1 2; do
	CKPT_CUDASIM_HANG_MS=8000 GPU_TRAINER_MIB=1 gtrainer "other$b" sequential 2 ||
		fail "trainer $b waited for another job's stuck save"
done
touch "$T/go"
wait $stuck || fail "the stuck save once its stream went on: $(cat "$T/stuck.out")"
assert_alive
pass
