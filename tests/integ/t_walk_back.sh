# Restore of the latest checkpoint walks back past a checkpoint with a
# flipped byte in a shard and past one whose manifest is missing, to the
# newest good one; the daemon log says why each was skipped.  Restoring one
# of the broken steps explicitly fails with a clear error.  Also when the
# broken checkpoint had been restored (verified) before it broke.
. "$(dirname "$0")/lib.sh"
start_ckptd
J=(-j wb -w 2 --mib 4)
trainer save "${J[@]}" -r 0 --steps 10:40:10 -q > $T/r0.out &
p0=$!
trainer save "${J[@]}" -r 1 --steps 10:40:10 -q > $T/r1.out || fail "rank 1 save"
wait $p0 || fail "rank 0 save"
[ "$(latest_of wb)" = iter_000000040 ] || fail "latest is $(latest_of wb)"

# restore once while everything is good (the daemon may remember verdicts)
for r in 0 1; do
	trainer restore "${J[@]}" -r $r --expect 40 > /dev/null || fail "rank $r restore of 40"
done

# break 40 (one byte of rank 1's model shard) and 30 (no manifest)
flip_byte "$ROOT/wb/iter_000000040/model/rank_00001.safetensors"
rm "$ROOT/wb/iter_000000030/checkpoint_manifest.json"

for r in 0 1; do
	out=$(trainer restore "${J[@]}" -r $r --expect 20 2>&1) ||
		fail "rank $r: latest restore did not walk back to 20: $out"
	log "rank $r: $out"
done
grep -q 'restore skips iter_000000040: .*model/rank_00001.safetensors' $LOG ||
	fail "no log line saying why iter 40 was skipped"
grep -q 'restore skips iter_000000030: .*checkpoint_manifest.json' $LOG ||
	fail "no log line saying why iter 30 was skipped"

# explicit broken steps fail, naming the problem
out=$(trainer restore "${J[@]}" -r 0 --step 40 2>&1) && fail "restore of broken step 40 succeeded: $out"
echo "$out" | grep -q 'iter_000000040 does not verify: .*model/rank_00001.safetensors' ||
	fail "unclear error for step 40: $out"
log "step 40: $out"
out=$(trainer restore "${J[@]}" -r 1 --step 30 2>&1) && fail "restore of broken step 30 succeeded: $out"
echo "$out" | grep -q 'iter_000000030 does not verify: .*checkpoint_manifest.json' ||
	fail "unclear error for step 30: $out"
log "step 30: $out"
out=$(trainer restore "${J[@]}" -r 1 --step 25 2>&1) && fail "restore of missing step 25 succeeded"
log "step 25: $out"

# the good ones are still there and exact
trainer restore "${J[@]}" -r 0 --step 10 --expect 10 > /dev/null || fail "restore of step 10"
# and nothing walks back to a step that is not there at all
rm -r "$ROOT/wb/iter_000000010" "$ROOT/wb/iter_000000020"
out=$(trainer restore "${J[@]}" -r 0 2>&1) && fail "restore with no good checkpoint succeeded: $out"
log "none good: $out"
assert_alive
pass
