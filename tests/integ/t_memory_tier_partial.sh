# A step the memory tier holds only in part (rank 1's save did not fit the
# budget, rank 0's did) whose rank-1 file is damaged on disk: both ranks
# pass over it to the step before.  Before, rank 0 restored the damaged step
# from memory while rank 1 walked back: one job, two steps (attack on
# issue 24, F1).
. "$(dirname "$0")/lib.sh"
start_ckptd '"memory_tier_bytes": "4MiB"'
save() {   # STEP: rank 0 saves 1 MiB, rank 1 6 MiB
	trainer save -j pt -w 2 -r 0 --mib 1 --steps "$1" -q > $T/s0.out 2>&1 &
	local p=$!
	trainer save -j pt -w 2 -r 1 --mib 6 --steps "$1" -q > $T/s1.out 2>&1 || fail "rank 1 save $1: $(cat $T/s1.out)"
	wait $p || fail "rank 0 save $1: $(cat $T/s0.out)"
}
save 1
save 2
# the tier takes a step in after its commit, which the save does not wait for
wait_until 10 grep -q 'iter_000000002 kept in memory' $LOG || fail "rank 0's part of step 2 is not in memory (the case under test)"
f=$(ls $ROOT/pt/iter_000000002/*/rank_00001.safetensors | head -1)
[ -f "$f" ] || fail "no rank 1 shard of step 2"
flip_byte "$f"
for order in "0 1" "1 0"; do
	for r in $order; do
		trainer restore -j pt -w 2 -r $r --mib $([ $r = 0 ] && echo 1 || echo 6) --expect 1 \
			> $T/r$r.out 2>&1 || fail "rank $r (order $order) did not restore step 1: $(cat $T/r$r.out)"
	done
done
grep -q 'memory holds only part of the step' $LOG || fail "the reason for the disk is not logged"
pass
