# Global tensors restore from the memory tier: 4 ranks save (replicated,
# rows, columns, blocks, uneven rows), then worlds of 4 and 2 ranks restore
# the newest step with other layouts, bit-exact (gtrainer checks every
# element), every chunk from ckptd's RAM and no shard file opened (strace;
# the same check sees them opened for the older step, which only the disk
# holds).  A chunk damaged in memory is caught and the disk serves instead.
. "$(dirname "$0")/lib.sh"
command -v strace > /dev/null || skip "strace is not installed"
start_ckptd '"staging_bytes": "128MiB"' '"memory_tier_bytes": "96MiB"'
run_world gm 4 save --step 10 || fail "save 10"
run_world gm 4 save --step 20 || fail "save 20"

# run_world while strace records the files ckptd opens
traced_world() {   # WORLD ARGS...
	: > $T/strace.out
	strace -f -qq -e trace=openat,open -o $T/strace.out -p "$CKPTD_PID" 2> $T/strace.err &
	local sp=$!
	wait_until 10 eval 'grep -q "^TracerPid:[[:space:]]*[1-9]" /proc/$CKPTD_PID/status' ||
		fail "strace did not attach: $(cat $T/strace.err)"
	run_world gm "$@"
	local rc=$?
	kill -INT $sp 2>/dev/null
	wait $sp 2>/dev/null
	return $rc
}
shard_opens() { grep -c 'safetensors' $T/strace.out; }
from_memory() {   # N: the last N restores' log lines say every chunk came from memory
	grep "global piece" "$LOG" | tail -"$1" | python3 -c '
import re, sys
lines = sys.stdin.read().splitlines()
for l in lines:
    m = re.search(r"read (\d+) bytes in (\d+) checked chunks .* \((\d+) chunks from memory\)", l)
    assert m and m.group(1) == "0" and m.group(2) == m.group(3) != "0", l
sys.exit(0 if len(lines) == int(sys.argv[1]) else 1)' "$1"
}

for w in 4 2; do
	traced_world $w restore --step 20 --alt || fail "restore into $w ranks: $(cat "$T"/out.$w.*)"
	[ "$(cat "$T"/out.$w.* | grep -c 'restored step 20 bit-exact')" = "$w" ] ||
		fail "world $w: $(cat "$T"/out.$w.*)"
	[ "$(shard_opens)" = 0 ] || fail "world $w: ckptd opened shard files: $(grep safetensors $T/strace.out)"
	grep -q 'checkpoint_manifest.json' $T/strace.out || fail "strace saw no open at all (blind?)"
	from_memory $w || fail "world $w: not every chunk from memory: $(grep 'global piece' "$LOG" | tail -$w)"
done
# the older step is only on disk: its shard files are read
traced_world 2 restore --step 10 || fail "restore of step 10: $(cat "$T"/out.2.*)"
[ "$(shard_opens)" -gt 0 ] || fail "step 10 restored without opening a shard file"

# a chunk damaged in ckptd's memory: caught, the disk serves it, bit-exact
# (a byte past the shard header of every rank's copy)
python3 - "$CKPTD_PID" <<'PY' || fail "cannot change the memory copy"
import sys
pid = sys.argv[1]
maps = [l.split() for l in open(f"/proc/{pid}/maps") if "ckpt-memt" in l]
assert maps, "no memory tier mapping in ckptd"
with open(f"/proc/{pid}/mem", "r+b", buffering=0) as m:
    for e in maps:
        at = int(e[0].split("-")[0], 16) + 4096 + 100
        m.seek(at)
        b = m.read(1)
        m.seek(at)
        m.write(bytes([b[0] ^ 0xFF]))
PY
run_world gm 2 restore --step 20 --alt || fail "restore after the memory copy changed: $(cat "$T"/out.2.*)"
[ "$(cat "$T"/out.2.* | grep -c 'restored step 20 bit-exact')" = 2 ] || fail "after the flip: $(cat "$T"/out.2.*)"
grep -q "restores iter_000000020 from disk: the memory copy of .* changed" "$LOG" ||
	fail "no fallback to disk logged: $(grep 'from disk' "$LOG" | tail -3)"
pass
