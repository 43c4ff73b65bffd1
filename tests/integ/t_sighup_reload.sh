# SIGHUP reloads the configuration: a good file changes log_level and
# keep_last at once (the log line says what changed); a bad file (unknown
# key, bad value, broken JSON, a restart-only key) is rejected with a log
# line naming the problem, the old configuration stays, ckptd keeps serving;
# so is a FIFO at the config path, without blocking.
. "$(dirname "$0")/lib.sh"

conf() {   # log_level keep_last [extra "key": value text]
	cat > "$CONF" <<JSON
{"socket": "$SOCK", "root": "$ROOT", "staging_bytes": "32MiB",
 "chunk_bytes": "1MiB", "step_deadline_ms": 20000,
 "log_level": "$1", "keep_last": $2 ${3:+, $3}}
JSON
}
hup_and_wait() {   # pattern: the log line the reload must produce
	local n
	n=$(grep -c "SIGHUP" "$LOG")
	kill -HUP "$CKPTD_PID"
	for _ in $(seq 100); do
		[ "$(grep -c "SIGHUP" "$LOG")" -gt "$n" ] && break
		sleep 0.05
	done
	tail -n +1 "$LOG" | grep "SIGHUP" | tail -1 | grep -q "$1" ||
		fail "after SIGHUP expected '$1', got: $(grep SIGHUP "$LOG" | tail -1)"
	kill -0 "$CKPTD_PID" 2>/dev/null || fail "ckptd died on SIGHUP"
}
steps_of() { ls "$ROOT/$1" 2>/dev/null | grep -c '^iter_'; }
wait_steps() {   # job count: pruning runs just after the commit
	for _ in $(seq 100); do
		[ "$(steps_of "$1")" = "$2" ] && return 0
		sleep 0.05
	done
	fail "job $1 has $(steps_of "$1") checkpoints, want $2"
}

conf info 0
restart_ckptd 1
trainer save -j hup --mib 1 --steps 1:3 -q || fail "saves 1..3"
wait_steps hup 3
grep -q "closed: end of file" "$LOG" && fail "debug lines at log_level info"

# good: log_level info -> debug, keep_last 0 -> 1
conf debug 1
hup_and_wait "reloaded"
grep "SIGHUP: configuration reloaded" "$LOG" | tail -1 | grep -q "keep_last 0 -> 1" ||
	fail "reload line does not list keep_last: $(grep SIGHUP "$LOG" | tail -1)"
grep "SIGHUP: configuration reloaded" "$LOG" | tail -1 | grep -q "log_level info -> debug" ||
	fail "reload line does not list log_level"
trainer save -j hup --mib 1 --steps 4 -q || fail "save 4"
wait_steps hup 1
[ "$(latest_of hup)" = "iter_000000004" ] || fail "latest is $(latest_of hup)"
for _ in $(seq 40); do grep -q "closed: end of file" "$LOG" && break; sleep 0.05; done
grep -q "closed: end of file" "$LOG" || fail "no debug lines after log_level debug"

# bad: unknown key, bad value, broken JSON, restart-only key
conf info 5 '"no_such_key": 1'
hup_and_wait 'rejected, keeping the old one: unknown key "no_such_key"'
conf info -1
hup_and_wait "rejected, keeping the old one: keep_last"
printf '{"keep_last": 5,' > "$CONF"
hup_and_wait "rejected, keeping the old one: line"
cat > "$CONF" <<JSON
{"socket": "$SOCK", "root": "$ROOT", "staging_bytes": "64MiB",
 "chunk_bytes": "1MiB", "log_level": "info", "keep_last": 5}
JSON
hup_and_wait "staging_bytes 33554432 -> 67108864: these keys change only on restart; keeping the old configuration"
# io_depth is read when the writers start: restart-only too (marked in the
# configuration table), not silently ignored
conf debug 1 '"io_depth": 8'
hup_and_wait "io_depth 4 -> 8: these keys change only on restart"

# a FIFO at the config path: refused at once (its open used to block the
# loop until something wrote into it), by the reload and by ckptd -n
mv "$CONF" "$CONF.saved"
mkfifo "$CONF"
hup_and_wait "rejected, keeping the old one: '$CONF': not a regular file"
out=$(timeout 10 "$TOP/ckptd" -n -c "$CONF" 2>&1) && fail "ckptd -n accepted a FIFO"
echo "$out" | grep -q "not a regular file" || fail "ckptd -n on a FIFO: $out"
rm "$CONF"
mv "$CONF.saved" "$CONF"

# the old configuration (debug, keep_last 1) is still in force and serves
ckptctl status > /dev/null || fail "status after rejected reloads"
trainer save -j hup --mib 1 --steps 5 -q || fail "save 5 after rejected reloads"
wait_steps hup 1
[ "$(latest_of hup)" = "iter_000000005" ] || fail "latest is $(latest_of hup)"
sleep 0.3
[ "$(steps_of hup)" = 1 ] || fail "keep_last changed by a rejected file"

stop_ckptd || fail "ckptd exited non-zero"
pass
