# rm -rf <root>/<job> while a 2-rank step is half saved (issue 11, F5):
# rank 1's SAVE is refused (its staging directory is gone) and the step
# fails at once on rank 0 too, with the reason, instead of waiting for
# rank 1 until step_deadline_ms (10 minutes here: the test would time
# out); the next step of both ranks goes into a new <root>/<job>.
. "$(dirname "$0")/lib.sh"
start_ckptd '"step_deadline_ms": 600000'
trainer save -j jrm -r 0 -w 2 --mib 1 --steps 1 > $T/r0.out 2>&1 &
R0=$!
staging() { ls -d "$ROOT"/jrm/.iter_000000001.staging-* > /dev/null 2>&1; }
wait_until 30 staging || fail "rank 0's save did not start: $(cat $T/r0.out)"
rm -rf "$ROOT/jrm"
out=$(trainer save -j jrm -r 1 -w 2 --mib 1 --steps 1 2>&1) && fail "rank 1 saved into a removed directory"
log "rank 1: $out"
echo "$out" | grep -q "cannot create directories for" || fail "rank 1: unclear: $out"
wait $R0 && fail "rank 0's step committed: $(cat $T/r0.out)"
log "rank 0: $(cat $T/r0.out)"
grep -q "rank 1: cannot create directories for" $T/r0.out || fail "rank 0 was not told why: $(cat $T/r0.out)"
grep -q "job jrm: step 1 aborted: rank 1: cannot create directories" $LOG || fail "no abort in the log"
# the next step: a new job directory, both ranks
trainer save -j jrm -r 0 -w 2 --mib 1 --steps 2 -q & R0=$!
trainer save -j jrm -r 1 -w 2 --mib 1 --steps 2 -q || fail "rank 1's next save"
wait $R0 || fail "rank 0's next save"
[ "$(latest_of jrm)" = iter_000000002 ] || fail "latest: $(latest_of jrm)"
assert_no_leftovers
stop_ckptd || fail "ckptd did not stop cleanly"
pass
