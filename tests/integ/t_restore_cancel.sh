# A trainer killed in the middle of a restore lets its rank go at once
# (issue 11): its restarted process connects as the same rank while the
# dead one's restore is still held mid-read, and that restore is cancelled
# rather than finished.  A shim (shim/readgate.c) holds every shard read
# until the test opens the gate, so nothing depends on timing.
. "$(dirname "$0")/lib.sh"
command -v cc > /dev/null || skip "no C compiler for the read-gate shim"
cc -shared -fPIC -O1 -o "$T/readgate.so" "$(dirname "$0")/shim/readgate.c" -ldl ||
	skip "cannot build readgate.so"
ASAN_RUNTIME=$(ldd "$TOP/ckptd" 2>/dev/null | awk '/libasan/ { print $3 }')
J=(-j rc -w 1 --mib 8)
log "test directory $T"

start_ckptd '"io_backend": "pwrite"'
trainer save "${J[@]}" -r 0 --steps 5 -q > /dev/null || fail "save"
stop_ckptd || fail "ckptd exit status"

GATE=$T/gate
mkdir -p "$GATE"
READGATE_DIR=$GATE LD_PRELOAD="${ASAN_RUNTIME:+$ASAN_RUNTIME }$T/readgate.so" \
	restart_ckptd_n
"$TRAINER" restore -s "$SOCK" "${J[@]}" -r 0 --expect 5 > "$T/dead.out" 2>&1 &
dead=$!
wait_until 30 test -e "$GATE/waiting" || fail "the restore never reached a shard read"
kill -9 $dead
wait $dead 2>/dev/null

# the restarted trainer gets its rank while the old restore is still held
connected() { "$PROBE" idle -s "$SOCK" "${J[@]:0:4}" -r 0 --secs 0 < /dev/null > "$T/idle.out" 2>&1 &&
	grep -q CONNECTED "$T/idle.out"; }
wait_until 20 connected || fail "rank 0 still taken after its trainer died: $(cat "$T/idle.out")"
log "reconnected: $(head -1 "$T/idle.out")"
grep -q "already connected" "$T/idle.out" && fail "refused: $(cat "$T/idle.out")"

touch "$GATE/open"
wait_until 20 grep -q "rank 0 went away: its restore was cancelled" "$LOG" ||
	fail "the dead trainer's restore was not cancelled"
grep -q "rank 0 restored" "$LOG" && fail "the dead trainer's restore ran to the end"
grep -q "hung up during a request" "$LOG" || fail "no log of the hang-up"

# and the new process restores normally, bit-exact
trainer restore "${J[@]}" -r 0 --expect 5 > "$T/new.out" 2>&1 || fail "restore after the cancel: $(cat "$T/new.out")"
log "$(cat "$T/new.out")"
assert_alive
pass
