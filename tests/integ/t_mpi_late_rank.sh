# Multi-node: a rank that arrives after the coordinator aborted its step
# at coord_deadline_ms is refused at once with the abort's reason (the
# coordinator remembers an aborted step for 10 minutes), instead of opening
# a new round that waits a whole new deadline and ends with another error.
. "$(dirname "$0")/mpi_lib.sh"
start_cluster '"coord_deadline_ms": 3000'
pids=()
for r in 0 1 2 3 4 5 6; do
	"$TRAINER" save -s "$(node_sock "$(node_of $r)")" -j mpl -r $r -w 8 --mib 1 \
		--steps 10 > "$T/out.$r" 2>&1 &
	pids[$r]=$!
done
for r in 0 1 2 3 4 5 6; do
	wait "${pids[$r]}" && fail "rank $r: step 10 succeeded without rank 7"
	grep -q "rank(s) 7 not durable" "$T/out.$r" || fail "rank $r: $(cat "$T/out.$r")"
done
# rank 7 connects only now (after the abort) and saves step 10
"$TRAINER" save -s "$(node_sock 3)" -j mpl -r 7 -w 8 --mib 1 --steps 10 > "$T/out.7" 2>&1 &
p7=$!
# refused at once: well within the 3 s a new round would wait (no timing
# assertion: the trainer must be done before the coordinator could even
# have timed a new round out, which the message below tells apart)
wait $p7 && fail "rank 7: the aborted step 10 succeeded"
grep -q "rank(s) 7 not durable on every node within 3000 ms" "$T/out.7" ||
	fail "rank 7 was not refused with the abort's reason: $(cat "$T/out.7")"
if grep -q "rank(s) 0,1,2,3,4,5,6 not durable" "$T/out.7" $LOG; then
	fail "rank 7 opened a new round of step 10"
fi
[ ! -e "$ROOT/mpl/iter_000000010" ] || fail "step 10 was published"
assert_no_leftovers
save_all mpl 20
all_rc 0 || { show_rc; fail "step 20 failed"; }
stop_cluster
pass
