# GPUs by UUID, not ordinal, on the CUDA driver simulator (see
# t_gpu_sim.sh): ckptd sees the 3 simulated GPUs as CUDA_VISIBLE_DEVICES=
# 2,0,1, the trainer uses its device 1 under CUDA_VISIBLE_DEVICES=1,2 (the
# same physical GPU 2 is ckptd's device 0).  Then a trainer killed right
# after ckpt_save_stream while ckptd copies slowly: ckptd stays up and the
# next trainer saves and restores.  ckptd is given CUDA_DEVICE_MAX_CONNECTIONS=1
# (every stream on one hardware queue): ckptd's streams never wait on
# anything, so it needs no more.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/gpu_sim_lib.sh"
export CKPT_CUDASIM_GPUS=3
CUDA_VISIBLE_DEVICES=2,0,1 CKPT_CUDASIM_MBPS=20 CUDA_DEVICE_MAX_CONNECTIONS=1 start_ckptd
grep -q 'CUDA: 3 of 3 device(s) usable' "$LOG" || fail "ckptd did not see 3 GPUs"
CUDA_VISIBLE_DEVICES=1,2 GPU_TRAINER_DEVICE=1 GPU_TRAINER_MIB=2 gtrainer renum roundtrip ||
	fail "a trainer on a renumbered GPU"
CUDA_VISIBLE_DEVICES=1,2 GPU_TRAINER_DEVICE=0 GPU_TRAINER_MIB=4 gtrainer died die
assert_alive
wait_log() { for _ in $(seq 300); do grep -q "$1" "$LOG" && return 0; sleep 0.1; done; return 1; }
wait_log 'session 2 .*closed' || fail "ckptd did not notice the killed trainer"
GPU_TRAINER_MIB=2 gtrainer next roundtrip || fail "a trainer after the killed one"
assert_alive
pass
