# Retention on both sides: locally keep_last never removes a step that is
# queued or being uploaded (held here at a failpoint in the middle of its
# upload); on the remote remote_keep_last keeps the newest N complete steps
# and deletes older ones manifest first.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/s3_lib.sh"
steps_of() { (cd "$ROOT/$1" && ls -d iter_* 2>/dev/null | sed 's/iter_0*//' | sort -n | xargs); }
steps_is() { [ "$(steps_of "$1")" = "$2" ]; }
s3_start
mkfifo "$T/hold"
export CKPT_FAILPOINT=remote.file_uploaded:1 CKPT_FAILPOINT_HOLD=$T/hold
start_ckptd "$(remote_conf '"threads": 1')" '"keep_last": 1' '"remote_keep_last": 2'

trainer save -j A --mib 1 --steps 1 -q || fail "save 1"
wait_until 30 test -e "$T/hold.held" || fail "the upload of step 1 did not reach the hold"
trainer save -j A --mib 1 --steps 2:3 -q || fail "save 2..3"
# 1 is being uploaded, 2 and 3 are queued: keep_last 1 removes none of them
sleep 1
steps_is A "1 2 3" || fail "local steps while uploading: $(steps_of A)"
grep -q "pruned iter_" "$LOG" && fail "a step was pruned during its upload"
echo go > "$T/hold"

wait_until 60 s3_steps_is A "iter_000000002 iter_000000003" ||
	fail "remote_keep_last 2: '$(s3_steps A)'"
wait_until 30 grep -q "remote: job A: deleted iter_000000001 (remote_keep_last)" "$LOG" ||
	fail "no deletion logged"
[ -z "$(s3 ls "$S3_PREFIX/A/iter_000000001/")" ] || fail "objects of step 1 left on the remote"
trainer save -j A --mib 1 --steps 4 -q || fail "save 4"
wait_until 30 steps_is A "4" || fail "local steps after step 4: $(steps_of A)"
wait_until 60 s3_steps_is A "iter_000000003 iter_000000004" || fail "remote: '$(s3_steps A)'"
s3 check "$S3_PREFIX/A" > "$T/check.out" || fail "remote copy differs: $(cat "$T/check.out")"
pass
