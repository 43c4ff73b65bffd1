# Clients that never read their replies cannot make ckptd hold much memory:
# at 1 MiB of unread replies ckptd reads no more of a client's requests, all
# clients together hold at most max_reply_queue_bytes (above it the one
# holding the most is dropped), other clients are still served, and the
# memory comes back when they close.
. "$(dirname "$0")/lib.sh"
start_ckptd
python3 "$TOP/tests/integ/slow_readers.py" "$SOCK" "$CKPTD_PID" 8 bounded ||
	fail "8 clients that do not read"
assert_alive
trainer save -j A --mib 1 --steps 1 -q || fail "save after the slow readers"
stop_ckptd || fail "ckptd did not stop cleanly"

# a small total: the clients holding the most are dropped, ckptd stays under it
start_ckptd '"max_reply_queue_bytes": "2MiB"'
python3 "$TOP/tests/integ/slow_readers.py" "$SOCK" "$CKPTD_PID" 6 shed $((2 << 20)) ||
	fail "6 clients that do not read, 2 MiB in all"
grep -q "does not read its replies.*max_reply_queue_bytes" "$LOG" ||
	fail "no log line for a dropped client"
assert_alive
trainer save -j A --mib 1 --steps 2 -q || fail "save after the slow readers"
stop_ckptd || fail "ckptd did not stop cleanly"
pass
