# A trainer killed while its save is being staged (a save much bigger than
# the staging pool, so staging waits for the writers): the step aborts
# cleanly: the other rank gets an error that says why, no staging leftovers,
# the previous checkpoint is still latest and restores, and the daemon
# goes on serving the job.
. "$(dirname "$0")/lib.sh"
start_ckptd '"staging_bytes": "4MiB"' '"chunk_bytes": "1MiB"'
J=(-j dms -w 2)
in_flight_saved() {   # step, ranks saved
	ckptctl status --json | python3 -c '
import json, sys
st = json.load(sys.stdin)
f = [s for j in st["jobs"] if j["name"] == "dms" for s in j["in_flight"]]
sys.exit(0 if any(s["step"] == int(sys.argv[1]) and s["ranks_saved"] == int(sys.argv[2]) for s in f) else 1)
' "$1" "$2"
}

trainer save "${J[@]}" -r 0 --mib 2 --steps 1 -q > /dev/null &
p=$!
trainer save "${J[@]}" -r 1 --mib 2 --steps 1 -q || fail "step 1 rank 1"
wait $p || fail "step 1 rank 0"

# rank 1 saves step 2 and waits; rank 0 dies in the middle of staging 48 MiB
trainer save "${J[@]}" -r 1 --mib 2 --steps 2 > $T/r1.out 2>&1 &
p1=$!
wait_until 10 in_flight_saved 2 1 || fail "rank 1's save of step 2 never showed up"
trainer save "${J[@]}" -r 0 --mib 48 --steps 2 --die-mid-stage > $T/r0.out 2>&1
wait $p1 && fail "rank 1's save of step 2 succeeded without rank 0: $(cat $T/r1.out)"
log "rank 1: $(cat $T/r1.out)"
grep -q 'rank 0 (pid [0-9]*) disconnected before its data was staged' $T/r1.out ||
	fail "rank 1's error does not say what happened: $(cat $T/r1.out)"
# -ECANCELED (another rank failed), not rank 1's own connection trouble
grep -q 'save aborted because another rank failed' $T/r1.out ||
	fail "rank 1 did not get -ECANCELED: $(cat $T/r1.out)"
grep -q 'job dms: step 2 aborted: rank 0' $LOG || fail "no abort in the daemon log"
assert_no_leftovers
[ ! -e "$ROOT/dms/iter_000000002" ] || fail "step 2 was published"
[ "$(latest_of dms)" = iter_000000001 ] || fail "latest is $(latest_of dms)"
for r in 0 1; do
	trainer restore "${J[@]}" -r $r --mib 2 --expect 1 > /dev/null || fail "rank $r restore of 1"
done

# one rank alone dying mid-stage aborts its step as well
trainer save -j solo --mib 48 --steps 3 --die-mid-stage > /dev/null 2>&1
wait_until 10 grep -q 'job solo: step 3 aborted: rank 0 (pid [0-9]*) disconnected' $LOG ||
	fail "solo: step 3 was not aborted"
assert_no_leftovers
[ ! -e "$ROOT/solo/iter_000000003" ] || fail "solo: step 3 was published"

# the job goes on: the next step commits on both ranks
trainer save "${J[@]}" -r 0 --mib 2 --steps 3 -q > /dev/null &
p=$!
trainer save "${J[@]}" -r 1 --mib 2 --steps 3 -q || fail "step 3 rank 1"
wait $p || fail "step 3 rank 0"
verify_latest dms
[ "$(latest_of dms)" = iter_000000003 ] || fail "latest is $(latest_of dms)"
pass
