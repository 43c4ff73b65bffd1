# Incremental saves: a rank's file whose bytes did not change since its
# newest committed step is a hard link to that step's file, and every step
# is still a complete checkpoint that verifies and restores bit-exact.
# A fine-tune's layout: "base" (3/4 of the bytes) is frozen, "lora" and the
# rng blob change every step.  Then what must make ckptd write instead of
# link: a failed link (EXDEV, EMLINK, ENOSPC, EOPNOTSUPP injected), a
# predecessor an operator rewrote, replaced or removed, a tensor that
# changed in its last byte, "incremental": false, and the
# incremental_max_shared limit; keep_last pruning leaves linked files alive.
. "$(dirname "$0")/lib.sh"
P=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
J=(-j A --mib 8 --groups base,base,base,lora --frozen base -q)
BASE=base/rank_00000.safetensors
LORA=lora/rank_00000.safetensors
ino() { stat -c %i "$ROOT/A/$(printf iter_%09d "$1")/$2"; }
nlink() { stat -c %h "$ROOT/A/$(printf iter_%09d "$1")/$2"; }
written() {
	python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["bytes_written"])' \
		"$ROOT/A/$(printf iter_%09d "$1")/checkpoint_manifest.json"
}
size_of() { stat -c %s "$ROOT/A/$(printf iter_%09d "$1")/$2"; }
verify_step() {
	ckptctl verify "$ROOT/A/$(printf iter_%09d "$1")" > "$T/v.out" 2>&1 ||
		fail "step $1 does not verify: $(cat "$T/v.out")"
}
restore_step() {
	local out
	out=$(trainer restore "${J[@]}" --step "$1" 2>&1) || fail "restore of $1: $out"
	grep -q "restored step $1 bit-exact" <<< "$out" || fail "restore of $1: $out"
}

# --- linked, verified, restored ------------------------------------------
start_ckptd "\"metrics_port\": $P"
trainer save "${J[@]}" --steps 1:3 || fail "save 1..3"
for s in 2 3; do
	[ "$(ino $s $BASE)" = "$(ino 1 $BASE)" ] || fail "step $s: the frozen shard is not step 1's"
	[ "$(ino $s $LORA)" != "$(ino 1 $LORA)" ] || fail "step $s: the changing shard was linked"
done
[ "$(nlink 3 $BASE)" = 3 ] || fail "link count $(nlink 3 $BASE), want 3"
w1=$(written 1); w3=$(written 3)
[ "$w1" -gt $((8 << 20)) ] || fail "step 1 wrote $w1 bytes"
want=$(( $(size_of 3 $LORA) + $(size_of 3 extra/rank_00000/rng) ))
[ "$w3" = "$want" ] || fail "step 3 says it wrote $w3 bytes, its changed files are $want"
for s in 1 2 3; do verify_step $s; restore_step $s; done
python3 - "$ROOT/A/iter_000000003" <<'PY' || fail "the safetensors package cannot read a linked step"
import sys, json
from safetensors.numpy import load_file
d = sys.argv[1]
m = json.load(open(d + "/checkpoint_manifest.json"))
for f in m["files"]:
    if f["path"].endswith(".safetensors"):
        t = load_file(d + "/" + f["path"])
        assert t, f["path"]
PY
out=$(ckptctl list -j A) || fail "list"
grep -q "WRITTEN" <<< "$out" || fail "list has no WRITTEN column: $out"
grep -q "written)" <<< "$out" || fail "list total does not say what was written: $out"
m=$(curl -s "http://127.0.0.1:$P/metrics") || fail "metrics"
linked=$(awk '/^ckptd_bytes_linked_total/ {print $2}' <<< "$m")
[ "$(printf '%.0f' "${linked:-0}")" = $((2 * $(size_of 3 $BASE))) ] ||
	fail "ckptd_bytes_linked_total $linked, want two frozen shards"

# --- a tensor that changed only in its last byte is written ----------------
# (the chunk CRCs all match but the last; the digest decides)
stop_ckptd
