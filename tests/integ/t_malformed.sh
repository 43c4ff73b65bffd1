# Malformed messages from a raw-socket client (tests/integ/malformed.py):
# bad magic, bad lengths, unknown types, oversized, reserved/flags set,
# garbage JSON, JSON that is not an object, requests before HELLO, stray
# fds, bad fds for regions, bad tensor geometry, half messages.  Each gets
# an error reply with a reason; a connection that stalls mid-message is
# dropped; a trainer saves meanwhile, saves and restores afterwards, and the
# daemon is alive at the end.
. "$(dirname "$0")/lib.sh"
start_ckptd '"msg_timeout_ms": 1000'

trainer save -j good --mib 2 --steps 1:30 -q > $T/during.out 2>&1 &
pt=$!
python3 "$TOP/tests/integ/malformed.py" "$SOCK" > $T/mal.out 2>&1
rc=$?
sed 's/^/  /' $T/mal.out | grep -v '^  ok ' | head -40
[ $rc = 0 ] || fail "malformed-message cases misbehaved (above)"
log "$(grep -c '^ok ' $T/mal.out) cases got their error reply"
wait $pt || fail "the trainer saving alongside failed: $(cat $T/during.out)"
assert_alive

# a connection that stops in the middle of a message is dropped after
# msg_timeout_ms, and one that never says HELLO as well
python3 - "$TOP/tests/integ" "$SOCK" <<'PY' || fail "stalled connections were not dropped"
import struct, sys, time
sys.path.insert(0, sys.argv[1])
from rawproto import *
t0 = time.time()
half = Conn(sys.argv[2], timeout=10)
assert hello_ctl(half).status == 0
half.s.sendall(struct.pack("<IHH", MAGIC, 1, STATUS))   # 8 of 40 bytes
silent = Conn(sys.argv[2], timeout=10)
for c in (half, silent):
    if not c.eof():
        sys.exit("still open")
print("both dropped after %.1f s" % (time.time() - t0))
PY
grep -q 'message not completed in time' $LOG || fail "no log line for the stalled message"
grep -q 'no HELLO in time' $LOG || fail "no log line for the silent connection"

# the daemon still serves trainers
trainer save -j good --mib 2 --steps 31 -q || fail "save after the abuse"
trainer restore -j good --mib 2 --expect 31 > /dev/null || fail "restore after the abuse"
out=$(ckptctl status) || fail "ckptctl status after the abuse"
assert_alive
pass
