# The memory tier (memory_tier_bytes): a trainer that dies while ckptd
# lives on restores the newest committed step from ckptd's RAM, bit-exact,
# without ckptd opening a shard file (strace; the same check sees the shard
# files opened when the restore comes from disk).  Older steps, a memory
# copy that changed (a byte flipped through /proc/PID/mem: the checksum
# catches it), a restarted daemon and a budget too small all restore from
# disk, with the reason in the log.
. "$(dirname "$0")/lib.sh"
command -v strace > /dev/null || skip "strace is not installed"
start_ckptd '"memory_tier_bytes": "64MiB"'
grep -q 'ready:.*memory tier 64 MiB' $LOG || fail "the ready line does not show the tier"
J=(-j mt -w 2 --mib 4)

save_both() {   # STEPS [extra trainer args]
	trainer save "${J[@]}" -r 0 --steps "$@" -q > $T/s0.out 2>&1 &
	local p=$!
	trainer save "${J[@]}" -r 1 --steps "$@" -q > $T/s1.out 2>&1 || fail "rank 1 save $1: $(cat $T/s1.out)"
	wait $p || fail "rank 0 save $1: $(cat $T/s0.out)"
}

# Run a restore while strace records the files ckptd opens.
traced_restore() {   # OUT ARGS...
	local out=$1; shift
	: > $T/strace.out
	strace -f -qq -e trace=openat,open -o $T/strace.out -p "$CKPTD_PID" 2> $T/strace.err &
	local sp=$!
	wait_until 10 eval 'grep -q "^TracerPid:[[:space:]]*[1-9]" /proc/$CKPTD_PID/status' ||
		fail "strace did not attach: $(cat $T/strace.err)"
	trainer restore "$@" > "$out" 2>&1
	local rc=$?
	kill -INT $sp 2>/dev/null
	wait $sp 2>/dev/null
	return $rc
}
shard_opens() { grep -c 'safetensors' $T/strace.out; }

# two steps; rank 0 dies right after STAGED of the second (the daemon
# finishes it); every trainer process is gone before the restores
save_both 10:10
trainer save "${J[@]}" -r 0 --steps 20 --die-after-staged > $T/d0.out 2>&1
grep -q 'staged; dying now' $T/d0.out || fail "rank 0 did not reach STAGED: $(cat $T/d0.out)"
trainer save "${J[@]}" -r 1 --steps 20 -q || fail "rank 1 save 20"
wait_until 20 eval '[ "$(latest_of mt)" = iter_000000020 ]' || fail "20 never committed"
verify_latest mt

for r in 0 1; do
	traced_restore $T/r$r.out "${J[@]}" -r $r --expect 20 || fail "rank $r restore: $(cat $T/r$r.out)"
	grep -q 'restored step 20 bit-exact from memory' $T/r$r.out ||
		fail "rank $r did not restore from memory: $(cat $T/r$r.out)"
	[ "$(shard_opens)" = 0 ] || fail "rank $r: ckptd opened shard files: $(grep safetensors $T/strace.out)"
	grep -q 'checkpoint_manifest.json' $T/strace.out ||
		fail "rank $r: strace saw no open of the manifest (is the check blind?)"
done

# status shows what the tier holds: one step of 2 ranks x ~4 MiB (step
# 10's memory, kept for the job's next save, went when its ranks left)
ckptctl status > $T/status.out || fail "ckptctl status"
grep -Eq '^  memory: .* 8\.[0-9] MiB / 64\.0 MiB, 1 steps kept' $T/status.out ||
	fail "status does not show the memory tier: $(cat $T/status.out)"

# an older step is not held: from disk, said why, and strace sees it
traced_restore $T/old.out "${J[@]}" -r 0 --step 10 --expect 10 || fail "restore of 10: $(cat $T/old.out)"
grep -q 'bit-exact from disk' $T/old.out || fail "step 10 not from disk: $(cat $T/old.out)"
[ "$(shard_opens)" -ge 1 ] || fail "strace saw no shard file opened by a restore from disk"
grep -q 'rank 0 restores iter_000000010 from disk: not in memory' $LOG ||
	fail "no reason logged for restoring 10 from disk"

# a byte of the memory copy changes: the checksum catches it, disk serves
python3 - "$CKPTD_PID" <<'PY' || fail "cannot change the memory copy"
import sys
pid = sys.argv[1]
maps = [l.split() for l in open(f"/proc/{pid}/maps") if "ckpt-memt" in l]
assert maps, "no memory tier mapping in ckptd"
lo, hi = (int(x, 16) for x in maps[0][0].split("-"))
with open(f"/proc/{pid}/mem", "r+b", buffering=0) as m:
    m.seek(lo + 4096 + 100)       # past the first shard's header
    b = m.read(1)
    m.seek(lo + 4096 + 100)
    m.write(bytes([b[0] ^ 0xFF]))
PY
for r in 0 1; do
	trainer restore "${J[@]}" -r $r --expect 20 > $T/c$r.out 2>&1 || fail "rank $r after the flip: $(cat $T/c$r.out)"
done
grep -q 'bit-exact from disk' $T/c0.out $T/c1.out || fail "no rank fell back to disk: $(cat $T/c0.out $T/c1.out)"
grep -q 'restores iter_000000020 from disk: the memory copy of .* changed' $LOG ||
	fail "the changed memory copy was not logged"
# and it is not used again
trainer restore "${J[@]}" -r 0 --expect 20 > $T/c2.out 2>&1 || fail "rank 0 again: $(cat $T/c2.out)"
grep -q 'bit-exact from disk' $T/c2.out || fail "the distrusted copy was used: $(cat $T/c2.out)"
grep -q 'rank 0 restores iter_000000020 from disk: not kept in memory: its memory copy failed its checksum' $LOG ||
	fail "no reason logged for not using the distrusted copy"

# a restarted ckptd holds nothing: disk, bit-exact
stop_ckptd || fail "ckptd did not stop cleanly"
restart_ckptd_n
trainer restore "${J[@]}" -r 1 --expect 20 > $T/rs.out 2>&1 || fail "restore after restart: $(cat $T/rs.out)"
grep -q 'bit-exact from disk' $T/rs.out || fail "not from disk after a restart: $(cat $T/rs.out)"

# a budget smaller than a rank's share: saved to disk only, reason logged
stop_ckptd || fail "ckptd did not stop cleanly"
start_ckptd '"memory_tier_bytes": "3MiB"'
save_both 30:30
grep -q "job mt: step 30 is not kept in memory: rank [01]'s 4.0 MiB do not fit memory_tier_bytes (3.0 MiB" $LOG ||
	fail "no reason logged for the budget"
trainer restore "${J[@]}" -r 0 --expect 30 > $T/b.out 2>&1 || fail "restore of 30: $(cat $T/b.out)"
grep -q 'bit-exact from disk' $T/b.out || fail "30 not from disk: $(cat $T/b.out)"
grep -q "rank 0 restores iter_000000030 from disk: not kept in memory: rank [01]'s" $LOG ||
	fail "the restore did not log why it came from disk"
assert_no_leftovers
pass
