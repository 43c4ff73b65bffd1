# keep_last pruning: only the newest N checkpoints of the job's run remain,
# the one latest names is never pruned, and checkpoints of another run
# (an earlier incarnation of the job directory) are never touched.
. "$(dirname "$0")/lib.sh"
steps_of() { (cd "$ROOT/$1" && ls -d iter_* 2>/dev/null | sed 's/iter_0*//; s/^$/0/' | sort -n | xargs); }
# pruning runs after the clients are told COMMITTED: give it a moment
steps_is() { [ "$(steps_of "$1")" = "$2" ]; }
steps_are() { wait_until 10 steps_is "$1" "$2"; }

# an earlier run of job A left steps 1 and 2
start_ckptd
trainer save -j A --mib 1 --steps 1:2 -q || fail "run 1 save"
stop_ckptd || fail "ckptd did not stop cleanly"
old_run=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["run_id"])' "$ROOT/A/job.json")
rm "$ROOT/A/job.json"          # the job directory starts a new run

start_ckptd '"keep_last": 2'
trainer save -j A --mib 1 --steps 3:6 -q || fail "run 2 save"
new_run=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["run_id"])' "$ROOT/A/job.json")
[ "$old_run" != "$new_run" ] || fail "the job kept its run id"
steps_are A "1 2 5 6" || fail "after steps 3..6 with keep_last 2: $(steps_of A)"
[ "$(latest_of A)" = iter_000000006 ] || fail "latest is $(latest_of A)"
grep -q 'job A: pruned iter_000000003' $LOG || fail "no log line for pruning step 3"
grep -q 'job A: pruned iter_000000004' $LOG || fail "no log line for pruning step 4"
# a deletion an earlier prune could not finish (its removal failed) is
# finished by the next prune, not left until a restart
mkdir -p "$ROOT/A/.iter_000000004.staging-pruned/model"
echo x > "$ROOT/A/.iter_000000004.staging-pruned/model/rank_00000.safetensors"
trainer save -j A --mib 1 --steps 7:8 -q || fail "save 7..8"
steps_are A "1 2 7 8" || fail "after steps 7..8: $(steps_of A)"
assert_no_leftovers

# latest is never pruned, even when it is not among the newest: an operator
# rolled latest back to 7, and keep_last becomes 1
echo iter_000000007 > "$ROOT/A/latest_checkpoint.txt"
write_conf '"keep_last": 1'
kill -HUP "$CKPTD_PID"
wait_until 10 grep -q 'SIGHUP: configuration reloaded' $LOG || fail "SIGHUP reload"
# a step below latest is refused (it would be pruned by its own commit:
# t_rollback_step); the next save prunes 8 down to keep_last 1 with 7 kept
out=$(trainer save -j A --mib 1 --steps 0 2>&1) && fail "step 0 below latest 7 was accepted"
echo "$out" | grep -q "step 0 is older than step 7" || fail "step 0: unclear refusal: $out"
[ "$(latest_of A)" = iter_000000007 ] || fail "latest moved to $(latest_of A)"
steps_are A "1 2 7 8" || fail "keep_last 1 with latest 7: $(steps_of A)"
out=$(ckptctl prune --job A --keep 1) || fail "ckptctl prune: $out"
[ "$(steps_of A)" = "1 2 7 8" ] || fail "ckptctl prune --keep 1 with latest 7: $(steps_of A)"
trainer save -j A --mib 1 --steps 9 -q || fail "save of step 9"
[ "$(latest_of A)" = iter_000000009 ] || fail "latest is $(latest_of A)"
steps_are A "1 2 9" || fail "keep_last 1 after step 9: $(steps_of A)"

# what remains verifies and restores; the old run's checkpoints are intact
for s in 1 2 9; do
	"$TOP/ckptctl" verify "$ROOT/A/$(printf iter_%09d $s)" > /dev/null || fail "step $s does not verify"
done
trainer restore -j A --mib 1 --expect 9 > /dev/null || fail "restore latest"
trainer restore -j A --mib 1 --step 2 --expect 2 > /dev/null || fail "restore old run's step 2"
assert_no_leftovers
pass
