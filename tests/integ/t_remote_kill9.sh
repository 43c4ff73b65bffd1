# ckptd killed (SIGKILL) in the middle of an upload, at three points: after
# the first file, in the middle of a multipart file, and between the
# manifest and latest.  The remote never shows a step without all its
# files; after a restart the upload resumes (files already there are not
# sent again), the unfinished multipart upload is aborted, latest is rolled
# forward, and every step on the remote matches its manifest.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/s3_lib.sh"
s3_start
REMOTE=$(remote_conf '"part_size": "5MiB"' '"threads": 1')
died() { ! kill -0 "$CKPTD_PID" 2>/dev/null; }
killed_at() {   # failpoint [step]: (save step,) ckptd dies at the failpoint
	CKPT_FAILPOINT=$1 restart_ckptd_n
	[ -n "${2:-}" ] && { trainer save -j A --mib 12 --steps "$2" -q || fail "save $2"; }
	wait_until 60 died || fail "ckptd did not reach $1"
	kill_ckptd
}
start_ckptd "$REMOTE"
stop_ckptd || fail "first stop"

# 1. after the first file of step 1
killed_at remote.file_uploaded:1 1
n=$(s3 ls "$S3_PREFIX/A/iter_000000001/" | wc -l)
[ "$n" -ge 1 ] || fail "no file of step 1 went up before the kill"
[ -z "$(s3_steps A)" ] || fail "a half-uploaded step shows: $(s3_steps A)"

# 2. resumed, then killed in the middle of a multipart file
killed_at remote.part_uploaded:1
grep -q "resuming the upload of iter_000000001" "$LOG" || fail "step 1 not resumed"
grep -q "iter_000000001/.* is there already" "$LOG" || fail "resumed step 1 sent its files again"
s3 uploads "$S3_PREFIX/A/" > "$T/uploads"
[ -s "$T/uploads" ] || fail "no unfinished multipart upload after the kill"
[ -z "$(s3_steps A)" ] || fail "a half-uploaded step shows: $(s3_steps A)"

# 3. between the manifest and latest
killed_at remote.after_manifest:1
grep -q "aborted 1 unfinished multipart upload" "$LOG" || fail "the multipart upload was not aborted"
s3_steps_is A iter_000000001 || fail "steps after the manifest: $(s3_steps A)"
s3 get "$S3_PREFIX/A/latest_checkpoint.txt" "$T/latest" 2>/dev/null &&
	fail "latest went up after the kill point: $(cat "$T/latest")"

# 4. latest is rolled forward; a new step goes up as usual
restart_ckptd_n
wait_until 30 grep -q "latest set to iter_000000001" "$LOG" || fail "latest not rolled forward"
trainer save -j A --mib 12 --steps 2 -q || fail "save 2"
wait_until 60 s3_steps_is A "iter_000000001 iter_000000002" ||
	fail "steps on the remote: '$(s3_steps A)'"
wait_until 30 remote_uploaded 1 || fail "ckptd does not count the upload"
s3 get "$S3_PREFIX/A/latest_checkpoint.txt" "$T/latest"
[ "$(cat "$T/latest")" = iter_000000002 ] || fail "remote latest is $(cat "$T/latest")"
s3 check "$S3_PREFIX/A" > "$T/check.out" || fail "remote copy differs: $(cat "$T/check.out")"
s3 uploads "$S3_PREFIX/A/" > "$T/uploads"
[ -s "$T/uploads" ] && fail "multipart uploads left: $(cat "$T/uploads")"
pass
