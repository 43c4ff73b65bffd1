# The object store uploads a file once (incremental saves): a file whose
# bytes the remote's newest complete step before it has (CKPT_FROZEN
# shards here) is not uploaded again; the step's manifest on the remote
# names that object ("object"), followed to the step that uploaded it.
# Checked against a local S3 server (moto): bytes uploaded; the bucket's
# copy of every step read through its manifest (s3tool check); retention
# deletes a step's manifest and own objects but keeps the objects a kept
# step names, and deletes them once no kept step does; a restore onto an
# empty root takes the referenced objects and publishes a plain local
# checkpoint; an object that is gone is uploaded again; "incremental":
# false uploads every file.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/s3_lib.sh"
s3_start
REMOTE=$(remote_conf)
start_ckptd "$REMOTE" '"remote_keep_last": 2'
F=(-j F --mib 8 --frozen-every 10 --flag-frozen -q)
P=$S3_PREFIX/F
FROZEN=model/rank_00000.frozen.safetensors
referenced() { grep -q "remote: job F: $(printf iter_%09d "$1"): .* MiB unchanged since $(printf iter_%09d "$2"), not uploaded again" "$LOG"; }
uploaded_bytes() {
	ckptctl status --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["remote"]["bytes_uploaded"])'
}
objects_of() { s3 ls "$P/$(printf iter_%09d "$1")/" | awk '{print $1}' | sed "s|^$P/iter_[0-9]*/||" | sort | xargs; }
remote_check() { s3 check "$P" > "$T/check.out" || fail "the remote's copy: $(cat "$T/check.out")"; }

# one upload at a time: each step finds the one before it complete
for s in 1 2 3 4; do
	trainer save "${F[@]}" --steps $s || fail "save $s"
	wait_until 60 remote_uploaded $s || fail "step $s was not uploaded"
done
for s in 2 3 4; do
	referenced $s $((s - 1)) || fail "step $s uploaded its frozen shards again"
done
whole=$(du -bc "$ROOT/F/iter_000000004"/*/* | tail -1 | cut -f1)
up=$(uploaded_bytes)
[ "$up" -lt $(( whole * 2 )) ] || fail "4 steps of $whole bytes uploaded $up bytes"
# remote_keep_last 2: steps 1 and 2 are gone but for the frozen shards
# steps 3 and 4 name (step 1's: 2 named them in turn, no chains)
wait_until 30 s3_steps_is F "iter_000000003 iter_000000004" || fail "remote steps: $(s3_steps F)"
grep -q "\"object\": *\"iter_000000001/$FROZEN\"" <(s3 get "$P/iter_000000004/checkpoint_manifest.json" /dev/stdout) ||
	fail "step 4's manifest does not name step 1's object"
[ "$(objects_of 1)" = "model/rank_00000.frozen.safetensors optim/rank_00000.frozen.safetensors" ] ||
	fail "step 1 on the remote: '$(objects_of 1)', want its frozen shards alone"
[ -z "$(objects_of 2)" ] || fail "step 2 left objects: $(objects_of 2)"
remote_check

# an empty root restores step 4 from the bucket; the local manifest is a
# plain one
stop_ckptd || fail "ckptd did not stop"
rm -rf "$ROOT"
start_ckptd "$REMOTE" '"remote_keep_last": 2'
out=$(trainer restore "${F[@]}" --expect 4 2>&1) || fail "restore from the remote: $out"
grep -q "bit-exact from remote" <<< "$out" || fail "not from the remote: $out"
grep -q '"object"' "$ROOT/F/iter_000000004/checkpoint_manifest.json" &&
	fail "the local manifest names remote objects"
verify_latest F

# an object gone from the bucket (an operator) is uploaded again
s3 rm "$P/iter_000000001/optim/rank_00000.frozen.safetensors" || fail "s3 rm"
trainer save "${F[@]}" --steps 5 || fail "save 5"
wait_until 60 remote_uploaded 1 || fail "step 5 was not uploaded"
referenced 5 4 || fail "step 5 referenced nothing"
[ "$(objects_of 5 | grep -c frozen)" = 1 ] ||
	fail "step 5 should upload the optim frozen shard alone: $(objects_of 5)"

# "incremental": false uploads every file; once no kept step names step
# 1's objects, retention deletes them
write_conf "$REMOTE" '"remote_keep_last": 2' '"incremental": false'
kill -HUP "$CKPTD_PID"
wait_until 10 grep -q "configuration reloaded" "$LOG" || fail "no reload"
for s in 6 7; do
	trainer save "${F[@]}" --steps $s || fail "save $s"
	wait_until 60 remote_uploaded $((s - 4)) || fail "step $s was not uploaded"
	referenced $s $((s - 1)) && fail "step $s referenced objects with incremental off"
done
wait_until 30 s3_steps_is F "iter_000000006 iter_000000007" || fail "remote steps: $(s3_steps F)"
wait_until 30 eval '[ -z "$(objects_of 1)" ]' || fail "step 1's objects outlived every step naming them"
[ -z "$(objects_of 5)" ] || fail "step 5 left objects: $(objects_of 5)"
remote_check

# a rollback (README "Rolling back and the bucket"): job R's step 2 names
# step 1's frozen objects; step 1 goes (remote_keep_last 1); step 2 is
# saved again with other content after a local rollback: the old step 2
# goes, and so do step 1's objects, which nothing names any more
write_conf "$REMOTE" '"remote_keep_last": 1' '"keep_last": 0'
kill -HUP "$CKPTD_PID"
wait_until 10 eval '[ "$(grep -c "configuration reloaded" "$LOG")" = 2 ]' || fail "no reload"
R=(-j R --mib 4 --frozen-every 10 --flag-frozen -q)
PR=$S3_PREFIX/R
for s in 1 2; do
	trainer save "${R[@]}" --steps $s || fail "save R $s"
	wait_until 60 remote_uploaded $((s + 3)) || fail "R step $s was not uploaded"
done
wait_until 30 eval '[ "$(s3 steps "$PR")" = iter_000000002 ]' || fail "R remote: $(s3 steps "$PR")"
s3 ls "$PR/iter_000000001/" | grep -q frozen || fail "R: step 1's named objects are gone"
rm -rf "$ROOT/R/iter_000000002"
trainer save "${R[@]}" --steps 2 --content-step 102 || fail "save R 2 again"
wait_until 60 remote_uploaded 6 || fail "R step 2 was not uploaded again"
[ -z "$(s3 ls "$PR/iter_000000001/")" ] ||
	fail "step 1's objects outlived the old step 2 that named them: $(s3 ls "$PR/iter_000000001/")"
s3 check "$PR" > "$T/check.out" || fail "R on the remote: $(cat "$T/check.out")"

# a rollback under a step that a later one shares files with: job S's
# step 3 names step 2's frozen objects (step 2's manifest went with
# remote_keep_last 1); step 2 saved again (another size) would replace
# them under step 3, so step 3 goes first
S=(-j S --frozen-every 10 --flag-frozen -q)
PS=$S3_PREFIX/S
for s in 1 2 3; do
	trainer save "${S[@]}" --mib $([ $s = 1 ] && echo 4 || echo 8) --steps $s || fail "save S $s"
	wait_until 60 remote_uploaded $((s + 6)) || fail "S step $s was not uploaded"
done
wait_until 30 eval '[ "$(s3 steps "$PS")" = iter_000000003 ]' || fail "S remote: $(s3 steps "$PS")"
s3 ls "$PS/iter_000000002/" | grep -q frozen || fail "S: step 3 names no object of step 2"
rm -rf "$ROOT/S/iter_000000002" "$ROOT/S/iter_000000003"
trainer save "${S[@]}" --mib 6 --steps 2 || fail "save S 2 again"
wait_until 60 remote_uploaded 10 || fail "S step 2 was not uploaded again"
grep -q "iter_000000003 on the remote shares files with the replaced iter_000000002" "$LOG" ||
	fail "S: step 3 was not deleted with the step it shares files with"
[ "$(s3 steps "$PS")" = iter_000000002 ] || fail "S remote: $(s3 steps "$PS")"
s3 check "$PS" > "$T/check.out" || fail "S on the remote: $(cat "$T/check.out")"
assert_no_leftovers
pass
