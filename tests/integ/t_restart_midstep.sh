# A rank dies after staging a step the other rank has not saved yet.  When it
# restarts, that half-saved step is dropped (it mixes two incarnations), the
# restarted job restores the last committed step and can save the same step
# number again, which then commits.  A restore also waits for a step that
# every rank already saved, so an acknowledged save is never skipped.
. "$(dirname "$0")/lib.sh"
start_ckptd
trainer save -j rs -r 0 -w 2 --mib 4 --steps 1 > /dev/null & p=$!
trainer save -j rs -r 1 -w 2 --mib 4 --steps 1 > /dev/null || fail "step 1"
wait $p || fail "step 1 rank 0"
trainer save -j rs -r 1 -w 2 --mib 4 --steps 2 --die-after-staged || fail "die-after-staged"
sleep 0.3
[ "$(latest_of rs)" = iter_000000001 ] || fail "half-saved step 2 was published"
# the restarted rank 1 comes back: step 2 must be aborted at once
trainer restore -j rs -r 1 -w 2 --mib 4 --expect 1 || fail "restore after restart"
grep -q "rank 1 restarted before every rank saved step 2" "$LOG" || fail "no abort logged"
assert_no_leftovers
# both ranks redo step 2: it commits
trainer save -j rs -r 0 -w 2 --mib 4 --steps 2 > /dev/null & p=$!
trainer save -j rs -r 1 -w 2 --mib 4 --steps 2 > /dev/null || fail "redo step 2 rank 1"
wait $p || fail "redo step 2 rank 0"
[ "$(latest_of rs)" = iter_000000002 ] || fail "latest is $(latest_of rs)"
trainer restore -j rs -r 0 -w 2 --mib 4 --expect 2 || fail "restore 2"
pass
