# remote_keep_last never deletes the step the remote's latest names (issue
# 24): when latest cannot be read (the server fails that GET), ckptd's
# start-up check fails and is tried again instead of taking it as "no
# latest" and deleting that step; once latest reads, retention keeps it.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/s3_lib.sh"
s3_start
start_ckptd "$(remote_conf)"
trainer save -j A --mib 1 --steps 1:3 -q || fail "save 1..3"
wait_until 60 s3_steps_is A "iter_000000001 iter_000000002 iter_000000003" ||
	fail "remote: '$(s3_steps A)'"
wait_until 30 remote_uploaded 3 || fail "uploads not counted"
stop_ckptd || fail "stop"
# latest names an older step (another node's rollback, say)
echo iter_000000001 > "$T/latest"
s3 put "$S3_PREFIX/A/latest_checkpoint.txt" "$T/latest"

fault_proxy deny:latest_checkpoint.txt
write_conf "$(remote_conf '"retries": 0')" '"remote_keep_last": 1'
restart_ckptd_n
wait_until 30 grep -Eq "start-up check of the bucket failed|deleted iter_" "$LOG" ||
	fail "the start-up check neither failed nor deleted"
grep -q "FAULT deny GET" "$T/proxy.log" || fail "latest was never asked for: $(cat "$T/proxy.log")"
s3_steps_is A "iter_000000001 iter_000000002 iter_000000003" ||
	fail "deleted while latest was unread: '$(s3_steps A)'"
grep -q "start-up check of the bucket failed.*latest_checkpoint.txt.*500" "$LOG" ||
	fail "the failed start-up check does not name latest"
stop_ckptd || fail "stop"

s3_stop_proxy
write_conf "$(remote_conf)" '"remote_keep_last": 1'
restart_ckptd_n
wait_until 60 s3_steps_is A "iter_000000001 iter_000000003" || fail "remote: '$(s3_steps A)'"
pass
