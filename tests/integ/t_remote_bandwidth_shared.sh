# remote_max_bytes_per_s is one budget shared by the connections, not
# divided among them (attack on issue 18, F6): a step of one 12 MiB file,
# uploaded by one of 8 connections, goes at the whole 4 MiB/s, not 1/8 of
# it (before: 0.5 MiB/s, 24 s).  The bound is generous and relative: the
# throttled upload may take at most 2x its budgeted 3 s more than the same
# upload unthrottled took just before, in the same run.
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
python3 - "$(took 1)" "$(took 2)" <<'PY' || fail "the limit is not shared: $(grep ' uploaded (' "$LOG")"
import sys
free, limited = float(sys.argv[1]), float(sys.argv[2])
print("# 12 MiB: %.2f s unthrottled, %.2f s at 4 MiB/s over 8 connections" % (free, limited))
# at least what the budget allows (a lower bound, which noise cannot fail)...
assert limited >= 2.0, "faster than the limit"
# ...and not the 24 s of 1/8 of it
assert limited <= free + 6.0, "slower than the whole budget allows"
PY
s3 check "$S3_PREFIX/A" > "$T/check.out" || fail "remote copy differs: $(cat "$T/check.out")"
pass
