# A trainer killed right after its save is STAGED: the daemon owns the data,
# so the rank still becomes durable and the step commits once the other
# ranks complete, and it restores bit for bit.
. "$(dirname "$0")/lib.sh"
start_ckptd '"staging_bytes": "16MiB"'
J=(-j das -w 2)

trainer save "${J[@]}" -r 0 --mib 4 --steps 1 -q > /dev/null &
p=$!
trainer save "${J[@]}" -r 1 --mib 4 --steps 1 -q || fail "step 1 rank 1"
wait $p || fail "step 1 rank 0"

# rank 0 dies right after STAGED (a big save: its files are still being
# written when it is gone); rank 1 saves a little later
out=$(trainer save "${J[@]}" -r 0 --mib 4 --steps 2 --die-after-staged 2>&1)
echo "$out" | grep -q 'staged; dying now' || fail "rank 0 did not reach STAGED: $out"
trainer save "${J[@]}" -r 1 --mib 4 --steps 2 > $T/r1.out 2>&1 ||
	fail "rank 1: step 2 did not commit after rank 0 died: $(cat $T/r1.out)"
[ "$(latest_of das)" = iter_000000002 ] || fail "latest is $(latest_of das)"
verify_latest das
for r in 0 1; do
	trainer restore "${J[@]}" -r $r --mib 4 --expect 2 > /dev/null || fail "rank $r restore of 2"
done

# one rank alone: dies after STAGED with a save much bigger than the pool,
# the daemon finishes it and commits on its own
out=$(trainer save -j solo --mib 48 --steps 7 --die-after-staged 2>&1)
echo "$out" | grep -q 'staged; dying now' || fail "solo did not reach STAGED: $out"
wait_until 30 eval '[ "$(latest_of solo)" = iter_000000007 ]' || fail "solo: step 7 never committed"
verify_latest solo
trainer restore -j solo --mib 48 --expect 7 > /dev/null || fail "solo restore"
assert_no_leftovers
grep -q 'aborted' $LOG && fail "a step was aborted"
pass
