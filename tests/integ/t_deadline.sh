# A 2-rank job where rank 1 never saves: with "step_deadline_ms": 1500 rank
# 0's save fails with -ETIMEDOUT and a message naming rank 1; nothing is
# published, nothing is left behind; the job then saves normally.
. "$(dirname "$0")/lib.sh"
start_ckptd '"step_deadline_ms": 1500'
J=(-j dl -w 2 --mib 2)

# rank 1 is connected but does not save
mkfifo $T/hold
probe idle -j dl -r 1 -w 2 --secs 60 < $T/hold > $T/idle.out &
pi=$!
exec 7> $T/hold
wait_until 10 grep -q CONNECTED $T/idle.out || fail "rank 1 did not connect"
trainer save "${J[@]}" -r 0 --steps 5 > $T/r0.out 2>&1 && fail "rank 0's save succeeded alone"
log "rank 0: $(cat $T/r0.out)"
grep -q 'a rank missed the save deadline' $T/r0.out || fail "not -ETIMEDOUT: $(cat $T/r0.out)"
grep -q 'rank(s) 1 did not save step 5 within 1500 ms' $T/r0.out ||
	fail "the message does not name rank 1: $(cat $T/r0.out)"
exec 7>&-
wait $pi

# rank 1 not even connected: the same
probe save -j dl -r 0 -w 2 --mib 2 --step 6 > $T/r0b.out && fail "save of step 6 succeeded alone"
grep -q 'error ETIMEDOUT .*rank(s) 1 did not save step 6' $T/r0b.out ||
	fail "step 6: $(cat $T/r0b.out)"

assert_no_leftovers
[ -z "$(ls "$ROOT/dl" | grep iter_)" ] || fail "something was published: $(ls $ROOT/dl)"
[ ! -e "$ROOT/dl/latest_checkpoint.txt" ] || fail "latest written"
grep -q 'job dl: step 5 aborted: rank(s) 1 did not save' $LOG || fail "no abort in the log"
# a rank that connects after the abort (a restarted trainer) may save step
# 5 again: a new attempt, which times out in turn, now naming rank 0
probe save -j dl -r 1 -w 2 --mib 2 --step 5 > $T/late.out && fail "late save of step 5 committed alone"
grep -q 'error ETIMEDOUT .*rank(s) 0 did not save step 5' $T/late.out || fail "late rank 1: $(cat $T/late.out)"
assert_no_leftovers

# and the next step, saved by both, commits
trainer save "${J[@]}" -r 0 --steps 7 -q > /dev/null &
p=$!
trainer save "${J[@]}" -r 1 --steps 7 -q || fail "step 7 rank 1"
wait $p || fail "step 7 rank 0"
[ "$(latest_of dl)" = iter_000000007 ] || fail "latest is $(latest_of dl)"
pass
