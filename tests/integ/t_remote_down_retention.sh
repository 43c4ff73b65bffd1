# While the bucket refuses uploads, local keep_last still prunes (attack on
# issue 18, F5): a newer committed step replaces the older queued ones (not
# the one being uploaded), so with keep_last 1 at most the step in progress
# and the newest stay on disk instead of every step since the bucket went
# away; when it is back, the newest step goes up.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/s3_lib.sh"
steps_of() { (cd "$ROOT/$1" && ls -d iter_* 2>/dev/null | sed 's/iter_0*//' | sort -n | xargs); }
s3_start
start_ckptd "$(remote_conf '"retries": 0')" '"keep_last": 1' '"remote_keep_last": 1'
trainer save -j A --mib 1 --steps 1 -q || fail "save 1"
wait_until 60 s3_steps_is A iter_000000001 || fail "remote: '$(s3_steps A)'"
stop_ckptd

# every upload of a shard fails
fault_proxy deny:rank_
write_conf "$(remote_conf '"retries": 0')" '"keep_last": 1' '"remote_keep_last": 1'
restart_ckptd_n
trainer save -j A --mib 1 --steps 2:8 -q || fail "save 2..8 while the bucket fails"
wait_until 30 grep -q "upload of iter_.* failed" "$LOG" || fail "no upload failed"
local=$(steps_of A)
log "local steps while the bucket fails: $local"
[ "$(echo "$local" | wc -w)" -le 2 ] || fail "keep_last 1 kept '$local' while the bucket fails"
[ "${local##* }" = 8 ] || fail "the newest step is not kept: '$local'"
grep -q "will not be uploaded: iter_.* is newer" "$LOG" || fail "no queued step was replaced"
s3_steps_is A iter_000000001 || fail "remote: '$(s3_steps A)'"

# the bucket is back: the newest goes up
stop_ckptd
s3_stop_proxy
write_conf "$(remote_conf)" '"keep_last": 1' '"remote_keep_last": 1'
restart_ckptd_n
wait_until 60 s3_steps_is A iter_000000008 || fail "remote after recovery: '$(s3_steps A)'"
s3 check "$S3_PREFIX/A" > "$T/check.out" || fail "remote copy differs: $(cat "$T/check.out")"
pass
