# A step number uploaded again with other content after a local rollback
# (README "Rolling back") (attack on issue 18, F2): the remote's old
# checkpoint under that number is made invisible (manifest deleted) before
# any file of the new one replaces its files, so a kill in the middle never
# shows a step whose files do not match its manifest; the remote's latest
# follows the job's latest back, so a new node restores the step the job
# went on from, not the abandoned one.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/s3_lib.sh"
s3_start
start_ckptd "$(remote_conf '"threads": 1')"
trainer save -j A --mib 1 --steps 1:2 -q || fail "save 1..2"
wait_until 60 s3_steps_is A "iter_000000001 iter_000000002" || fail "remote: '$(s3_steps A)'"
wait_until 30 remote_uploaded 2 || fail "uploads not counted"
stop_ckptd

# roll back to 1; step 2 again, other content; killed after its first file
rm -rf "$ROOT/A/iter_000000002"
CKPT_FAILPOINT=remote.file_uploaded:1 restart_ckptd_n
trainer save -j A --mib 2 --steps 2 -q || fail "save 2 again"
wait_until 60 bash -c "! kill -0 $CKPTD_PID 2>/dev/null" || fail "the failpoint was not reached"
kill_ckptd
s3 check "$S3_PREFIX/A" > "$T/check.out" ||
	fail "a visible step's files do not match its manifest: $(cat "$T/check.out")"
s3_steps_is A iter_000000001 || fail "remote steps after the kill: '$(s3_steps A)'"

# restarted: the new step 2 goes up whole
restart_ckptd_n
wait_until 60 s3_steps_is A "iter_000000001 iter_000000002" || fail "remote: '$(s3_steps A)'"
wait_until 30 grep -q "iter_000000002 uploaded" "$LOG" || fail "step 2 not uploaded"
s3 check "$S3_PREFIX/A" > "$T/check.out" || fail "remote copy differs: $(cat "$T/check.out")"

# 3 goes up; roll back to 1 again and go on with 2: latest follows
trainer save -j A --mib 2 --steps 3 --groups g1,g2 -q || fail "save 3"
wait_until 60 s3_steps_is A "iter_000000001 iter_000000002 iter_000000003" ||
	fail "remote: '$(s3_steps A)'"
wait_until 30 grep -q "iter_000000003 uploaded" "$LOG" || fail "step 3 not uploaded"
rm -rf "$ROOT/A/iter_000000002" "$ROOT/A/iter_000000003"
trainer save -j A --mib 1 --steps 2 -q || fail "save 2 after the rollback"
wait_until 60 bash -c "grep -c 'iter_000000002 uploaded' '$LOG' | grep -qx 2" ||
	fail "step 2 not uploaded again"
s3 get "$S3_PREFIX/A/latest_checkpoint.txt" "$T/latest"
[ "$(cat "$T/latest")" = iter_000000002 ] || fail "remote latest is $(cat "$T/latest")"
s3 check "$S3_PREFIX/A" > "$T/check.out" || fail "remote copy differs: $(cat "$T/check.out")"
# a new node (empty root) restores the step the job went on from
stop_ckptd
rm -rf "$ROOT"
start_ckptd "$(remote_conf '"threads": 1')"
trainer restore -j A --mib 1 --expect 2 -q || fail "the new node did not restore the new step 2"
pass
