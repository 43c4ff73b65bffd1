# A damaged newest step in the bucket (one object overwritten behind
# ckptd's back) does not stop a restore from the remote: like a local
# restore, it walks back to the newest remote step that verifies, and the
# journal names the damaged one; `ckptctl pull` does the same, a pull of
# the damaged step itself fails naming it, and when no remote step
# verifies the error names each.  Nothing damaged is published or left.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/s3_lib.sh"
s3_start
REMOTE=$(remote_conf)
start_ckptd "$REMOTE"
trainer save -j A --mib 1 --steps 1:3 -q || fail "save 1..3"
wait_until 60 s3_steps_is A "iter_000000001 iter_000000002 iter_000000003" ||
	fail "steps on the remote: '$(s3_steps A)'"
wait_until 30 remote_uploaded 3 || fail "ckptd does not count 3 uploads"
stop_ckptd || fail "stop"
head -c 1000 /dev/urandom > "$T/junk"
s3 put "$S3_PREFIX/A/iter_000000003/model/rank_00000.safetensors" "$T/junk"

# a new node restores: step 3 is damaged, step 2 comes down
rm -rf "$ROOT"
start_ckptd "$REMOTE"
out=$(trainer restore -j A --mib 1 --expect 2 2>&1) || fail "restore (newest damaged): $out"
echo "$out" | grep -q "from remote" || fail "not from the remote: $out"
grep -q "remote: job A: iter_000000003 on the remote is damaged" "$LOG" ||
	fail "the journal does not name the damaged step"
[ -e "$ROOT/A/iter_000000003" ] && fail "the damaged step was published"
verify_latest A
assert_no_leftovers

# pull: the same walk back; the damaged step asked for by name is refused
stop_ckptd || fail "stop"
rm -rf "$ROOT"
start_ckptd "$REMOTE"
out=$(ckptctl pull --job A 2>&1) || fail "pull (newest damaged): $out"
echo "$out" | grep -q "step 2 downloaded" || fail "pull: $out"
out=$(ckptctl pull --job A --step 3 2>&1) && fail "the damaged step was pulled: $out"
echo "$out" | grep -q "iter_000000003: 'model/rank_00000.safetensors' from the remote does not match" ||
	fail "the error does not name the step: $out"
[ -e "$ROOT/A/iter_000000003" ] && fail "the damaged step was published"
assert_no_leftovers

# nothing verifies: each step is named
s3 put "$S3_PREFIX/A/iter_000000002/model/rank_00000.safetensors" "$T/junk"
s3 put "$S3_PREFIX/A/iter_000000001/model/rank_00000.safetensors" "$T/junk"
stop_ckptd || fail "stop"
rm -rf "$ROOT"
start_ckptd "$REMOTE"
out=$(trainer restore -j A --mib 1 2>&1) && fail "a restore with no good remote step: $out"
for s in 3 2 1; do
	echo "$out" | grep -q "iter_00000000$s: " || fail "iter_$s not named: $out"
done
[ -e "$ROOT/A/iter_000000001" ] && fail "a damaged step was published"
# every manifest gone, latest still there: damaged, not "no checkpoint"
for s in 1 2 3; do
	s3 rm "$S3_PREFIX/A/iter_00000000$s/checkpoint_manifest.json" || fail "s3 rm"
done
out=$(trainer restore -j A --mib 1 2>&1) && fail "a restore with no manifest on the remote: $out"
echo "$out" | grep -q "its latest names iter_000000003, but no step there has its manifest" ||
	fail "manifests gone: $out"
assert_no_leftovers
pass
