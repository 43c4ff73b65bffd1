# Retention on both sides: locally keep_last never removes a step that is
# being uploaded (held here at a failpoint in the middle of its upload) and
# a newer commit replaces the queued ones keep_last would prune; on the
# remote remote_keep_last keeps the newest N complete steps and deletes
# older ones manifest first.
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
# 1 is being uploaded: keep_last 1 keeps it; 3 took 2's place in the queue
# (keep_last 1: no older step waits), so 2 is pruned
wait_until 10 steps_is A "1 3" || fail "local steps while uploading: $(steps_of A)"
grep -q "pruned iter_000000001" "$LOG" && fail "a step was pruned during its upload"
grep -q "iter_000000002 will not be uploaded: iter_000000003 is newer" "$LOG" ||
	fail "step 2 was not replaced in the queue"
echo go > "$T/hold"

wait_until 60 s3_steps_is A "iter_000000001 iter_000000003" ||
	fail "remote_keep_last 2: '$(s3_steps A)'"
wait_until 30 remote_uploaded 2 || fail "uploads not counted"
trainer save -j A --mib 1 --steps 4 -q || fail "save 4"
wait_until 30 steps_is A "4" || fail "local steps after step 4: $(steps_of A)"
wait_until 60 s3_steps_is A "iter_000000003 iter_000000004" || fail "remote: '$(s3_steps A)'"
wait_until 30 grep -q "remote: job A: deleted iter_000000001 (remote_keep_last)" "$LOG" ||
	fail "no deletion logged"
[ -z "$(s3 ls "$S3_PREFIX/A/iter_000000001/")" ] || fail "objects of step 1 left on the remote"
s3 check "$S3_PREFIX/A" > "$T/check.out" || fail "remote copy differs: $(cat "$T/check.out")"
pass
