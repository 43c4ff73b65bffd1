# A single bit flipped in the middle of a large shard (32 MiB) is refused
# by a restore, which checks the chunk CRC32Cs recorded when the shard was
# written: in the shard the rank reads into its tensors (checked as it is
# read) and in a shard of a rank that is not restoring (checked for the
# verdict).  The error names the file, the chunk and its bytes; a restore of
# the latest step walks back to the newest good one, and `ckptctl verify`
# (the file digests, XXH3-128 by default, and CRC32Cs) refuses the damaged
# steps too.
. "$(dirname "$0")/lib.sh"
start_ckptd
J=(-j fb -w 2 --mib 64)
trainer save "${J[@]}" -r 0 --steps 10:30:10 -q > /dev/null &
p0=$!
trainer save "${J[@]}" -r 1 --steps 10:30:10 -q > /dev/null || fail "rank 1 save"
wait $p0 || fail "rank 0 save"
[ "$(latest_of fb)" = iter_000000030 ] || fail "latest is $(latest_of fb)"

# flip_bit FILE: xor bit 0 of the middle byte; prints "chunk (bytes lo..hi)"
flip_bit() {
	python3 - "$1" <<'PY' || fail "cannot flip a bit in $1"
import json, os, sys
p = sys.argv[1]
off = os.path.getsize(p) // 2
with open(p, "r+b") as f:
    f.seek(off); b = f.read(1); f.seek(off); f.write(bytes([b[0] ^ 1]))
d, rel = p.rsplit("/", 2)[0], "/".join(p.rsplit("/", 2)[1:])
e = [x for x in json.load(open(d + "/checkpoint_manifest.json"))["files"] if x["path"] == rel][0]
cs = e["chunk_size"]
k = off // cs
print("%d (bytes %d..%d)" % (k, k * cs, min((k + 1) * cs, e["size"]) - 1))
PY
}
S30=$ROOT/fb/iter_000000030/model/rank_00000.safetensors
S20=$ROOT/fb/iter_000000020/optim/rank_00001.safetensors
[ "$(stat -c %s "$S30")" -gt $((30 << 20)) ] || fail "the shard is small: $(stat -c %s "$S30")"
C30=$(flip_bit "$S30")
C20=$(flip_bit "$S20")
log "flipped: 30 chunk $C30, 20 chunk $C20"

# rank 0 reads its own damaged shard of 30, and checks rank 1's of 20
out=$(trainer restore "${J[@]}" -r 0 --step 30 2>&1) && fail "restore of step 30 succeeded: $out"
echo "$out" | grep -qF "iter_000000030 does not verify: model/rank_00000.safetensors: crc32c of chunk $C30 does not match the manifest" ||
	fail "unclear error for step 30: $out"
log "step 30: $out"
out=$(trainer restore "${J[@]}" -r 0 --step 20 2>&1) && fail "restore of step 20 succeeded: $out"
echo "$out" | grep -qF "iter_000000020 does not verify: optim/rank_00001.safetensors: crc32c of chunk $C20 does not match the manifest" ||
	fail "unclear error for step 20: $out"
log "step 20: $out"

# the latest restore of both ranks walks back to 10, saying why
for r in 0 1; do
	out=$(trainer restore "${J[@]}" -r $r --expect 10 2>&1) ||
		fail "rank $r: latest restore did not walk back to 10: $out"
done
grep -qF "restore skips iter_000000030: model/rank_00000.safetensors: crc32c of chunk $C30" $LOG ||
	fail "no log line saying why iter 30 was skipped"
grep -qF "restore skips iter_000000020: optim/rank_00001.safetensors: crc32c of chunk $C20" $LOG ||
	fail "no log line saying why iter 20 was skipped"

# the offline audit refuses both too
for s in 30 20; do
	out=$(ckptctl verify "$ROOT/fb/iter_0000000$s" 2>&1) && fail "verify of $s passed: $out"
	echo "$out" | grep -q "xxh3_128 mismatch" || fail "verify of $s said: $out"
done
ckptctl verify "$ROOT/fb/iter_000000010" > /dev/null || fail "verify of 10"
assert_alive
pass
