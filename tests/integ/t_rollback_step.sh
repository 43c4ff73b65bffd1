# A job's steps only go up (issue 11, F4; README.md "Rolling back
# (steps only go up)"): with keep_last 3, after 10, 11, 12 and a restore of
# 10, a save of 3 is refused up front naming both steps (it used to be
# reported COMMITTED and then pruned at once: an acknowledged checkpoint
# lost), a save of 11 is refused as already committed and says how to roll
# back; nothing changes on disk.  Rolling back as README says (the
# operator removes 11 and 12) lets 11 be saved again, and LATEST is 11.
. "$(dirname "$0")/lib.sh"
start_ckptd '"keep_last": 3'
trainer save -j jkp --mib 1 --steps 10:12 -q || fail "saves 10..12"
trainer restore -j jkp --mib 1 --step 10 --expect 10 > /dev/null || fail "restore 10"
before=$(ls "$ROOT/jkp" | tr '\n' ' ')
out=$(trainer save -j jkp --mib 1 --steps 3 2>&1) && fail "step 3 after 12 was accepted: $out; on disk: $(ls $ROOT/jkp)"
echo "$out" | grep -q "step 3 is older than step 12, the newest checkpoint of job 'jkp': a job's steps only go up" ||
	fail "step 3: unclear refusal: $out"
log "step 3: $out"
out=$(trainer save -j jkp --mib 1 --steps 11 2>&1) && fail "step 11 was saved twice"
echo "$out" | grep -q "step 11 is already committed (to roll back and save it again, remove the newer checkpoints first" ||
	fail "step 11: unclear refusal: $out"
[ "$(ls "$ROOT/jkp" | tr '\n' ' ')" = "$before" ] || fail "the refusals changed the job: $(ls $ROOT/jkp)"
trainer restore -j jkp --mib 1 --expect 12 > /dev/null || fail "LATEST is no longer 12"
grep -q "pruned iter_000000003" $LOG && fail "step 3 was pruned"

# rolling back: the operator removes the newer checkpoints
rm -r "$ROOT/jkp/iter_000000011" "$ROOT/jkp/iter_000000012"
trainer save -j jkp --mib 1 --steps 11 -q || fail "step 11 after the rollback"
trainer restore -j jkp --mib 1 --expect 11 > /dev/null || fail "LATEST after the rollback"
[ "$(latest_of jkp)" = iter_000000011 ] || fail "latest: $(latest_of jkp)"
stop_ckptd || fail "ckptd did not stop cleanly"
pass
