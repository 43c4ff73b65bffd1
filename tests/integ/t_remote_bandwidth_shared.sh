# remote_max_bytes_per_s with 8 connections, reloaded by SIGHUP: the
# throttled upload keeps to the limit, end to end through curl's read
# callback (a lower time bound, which noise cannot fail).  That the
# connections share one budget rather than 1/8 each (attack on issue 18,
# F6: one 12 MiB file went at 0.5 MiB/s, 24 s) is test_rate's to show,
# without timing; the times are printed here for the reader.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/s3_lib.sh"
s3_start
REMOTE=$(remote_conf '"threads": 8' '"part_size": "5MiB"')
start_ckptd "$REMOTE" '"remote_max_bytes_per_s": 0'
took() {   # step: seconds its upload took, from ckptd's log
	sed -n "s/.*iter_00000000$1 uploaded ([0-9.]* MiB in \([0-9.]*\) s).*/\1/p" "$LOG" | tail -1
}
trainer save -j A --mib 12 --steps 1 --groups model -q || fail "save 1"
wait_until 60 grep -q "iter_000000001 uploaded" "$LOG" || fail "step 1 not uploaded"
write_conf "$REMOTE" '"remote_max_bytes_per_s": "4MiB"'
kill -HUP "$CKPTD_PID"
wait_until 10 grep -q 'SIGHUP: configuration reloaded' "$LOG" || fail "SIGHUP reload"
trainer save -j A --mib 12 --steps 2 --groups model -q || fail "save 2"
wait_until 120 grep -q "iter_000000002 uploaded" "$LOG" || fail "step 2 not uploaded"
python3 - "$(took 1)" "$(took 2)" <<'PY' || fail "faster than the limit: $(grep ' uploaded (' "$LOG")"
import sys
free, limited = float(sys.argv[1]), float(sys.argv[2])
print("# 12 MiB: %.2f s unthrottled, %.2f s at 4 MiB/s over 8 connections" % (free, limited))
assert limited >= 2.0, "faster than the limit"
PY
s3 check "$S3_PREFIX/A" > "$T/check.out" || fail "remote copy differs: $(cat "$T/check.out")"
pass
