# Incremental saves: a rank's file whose bytes did not change since its
# newest committed step is a hard link to that step's file, and every step
# is still a complete checkpoint that verifies (ckptctl, the safetensors
# package) and restores bit-exact.  A fine-tune's layout: "base" (3/4 of
# the bytes) is frozen, "lora" and the rng blob change every step.  Links
# hold across trainer and ckptd restarts (the newest checkpoint's manifest
# is read before the first save, and a file it would link is read back
# first: bit rot that kept the mtime is caught).  Then what must make ckptd write instead
# of link: a failed link (EXDEV, EMLINK, ENOSPC, EOPNOTSUPP injected), a
# predecessor an operator rewrote or replaced, a newest checkpoint an
# operator removed, "incremental": false, and incremental_max_shared;
# keep_last pruning leaves linked files alive.  Then tensors registered
# with CKPT_FROZEN inside a group that also trains: their own shard
# (<group>/rank_NNNNN.frozen.safetensors, manifest format 4) is linked.
# (A file that changed in its last byte only, and the small files that
# are always written: test_pipe link_unchanged.)
. "$(dirname "$0")/lib.sh"
P=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
J=(-j A --mib 8 --groups base,base,base,lora --frozen base -q)
BASE=base/rank_00000.safetensors
LORA=lora/rank_00000.safetensors
ino() { stat -c %i "$ROOT/A/$(printf iter_%09d "$1")/$2" || echo "missing-$1"; }
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
# gated_save STEPS [TRAINER ARGS]: a trainer that saves once ckptd has
# prepared it (ranks_ready: its files' predecessors read), as a real job
# trains a while before its first save
gated_save() {
	local steps=$1 pid go=$T/go.$RANDOM
	shift
	trainer save "${J[@]}" --steps "$steps" --gate "$go" "$@" > "$T/save.out" 2>&1 &
	pid=$!
	wait_until 30 eval '[ "$(ranks_ready)" = 1 ] || ! kill -0 $pid 2>/dev/null' ||
		fail "rank 0 was not prepared: $(ckptctl status --json)"
	kill -0 $pid 2>/dev/null || { wait $pid; fail "the trainer of $steps ended before its gate (exit $?): $(cat "$T/save.out")"; }
	touch "$go"
	wait $pid || fail "save $steps: $(cat "$T/save.out")"
}
same() { [ "$(ino "$1" "$3")" = "$(ino "$2" "$3")" ]; }
restore_step() {
	local out
	out=$(trainer restore "${J[@]}" --step "$1" 2>&1) || fail "restore of $1: $out"
	grep -q "restored step $1 bit-exact" <<< "$out" || fail "restore of $1: $out"
}

# --- linked, verified, restored ------------------------------------------
NOLIMIT='"incremental_max_shared": 0'
start_ckptd "\"metrics_port\": $P" "$NOLIMIT"
grep -q "incremental saves: the checkpoints kept (keep_last 0) may all share one copy" $LOG ||
	fail "no word that the kept checkpoints may share one copy"
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
# the real safetensors package (build/venv, make deps) reads a linked step
# as the step it links to
PY=$TOP/build/venv/bin/python
[ -x "$PY" ] || fail "build/venv is missing (make deps)"
"$PY" - "$ROOT/A" <<'PY' || fail "the safetensors package disagrees on a linked step"
import sys
import torch
from safetensors.torch import load_file
a = load_file(sys.argv[1] + "/iter_000000001/base/rank_00000.safetensors")
b = load_file(sys.argv[1] + "/iter_000000003/base/rank_00000.safetensors")
assert a.keys() == b.keys() and len(a) > 1
assert all(torch.equal(a[k].flatten().view(torch.uint8), b[k].flatten().view(torch.uint8)) for k in a)
PY
out=$(ckptctl list -j A) || fail "list"
grep -q "WRITTEN" <<< "$out" || fail "list has no WRITTEN column: $out"
# 3 steps of 8 MiB: one frozen shard (6 MiB) shared, three lora shards
on_disk=$(ckptctl list -j A --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["bytes_on_disk"])')
want=$(( $(size_of 1 $BASE) + $(size_of 1 $LORA) + $(size_of 2 $LORA) + $(size_of 3 $LORA) +
	 3 * $(size_of 1 extra/rank_00000/rng) ))
[ "$on_disk" = "$want" ] || fail "bytes_on_disk $on_disk, want $want"
grep -q "on disk: files they share counted once)" <<< "$out" ||
	fail "list total does not say what is on disk: $out"
m=$(curl -s "http://127.0.0.1:$P/metrics") || fail "metrics"
linked=$(awk '/^ckptd_bytes_linked_total/ {print $2}' <<< "$m")
[ "$(printf '%.0f' "${linked:-0}")" = $((2 * $(size_of 3 $BASE))) ] ||
	fail "ckptd_bytes_linked_total $linked, want two frozen shards"

# --- across restarts: the newest checkpoint's manifest says what it holds -
gated_save 4
same 3 4 $BASE || fail "a new trainer did not link step 4's frozen shard"
stop_ckptd
start_ckptd "$NOLIMIT"
gated_save 5
same 4 5 $BASE || fail "after a ckptd restart, step 5's frozen shard was not linked"
grep -q "rank 0: 2 files of iter_000000004 to link" $LOG || fail "step 4's files were not read"
verify_step 5
restore_step 5
stop_ckptd

# --- a link that fails is a write ------------------------------------------
# EXDEV, EMLINK, ENOSPC, EOPNOTSUPP on the 1st..4th link; the 5th links
CKPT_FAULT=link:1:-18,link:2:-31,link:3:-28,link:4:-95 start_ckptd "$NOLIMIT"
gated_save 6:10
for s in 6 7 8 9; do
	same $((s - 1)) $s $BASE && fail "step $s linked through an injected link failure"
	verify_step $s
done
same 9 10 $BASE || fail "step 10 did not link once links worked again"
[ "$(grep -c "unchanged, but not linked to" $LOG)" = 4 ] || fail "the failed links were not logged"
grep -q "not linked to iter_000000005's (Invalid cross-device link): written" $LOG ||
	fail "no EXDEV in the log"
restore_step 8
stop_ckptd

# --- an operator rewrote, replaced or removed the predecessor ---------------
# (each a new trainer: what ckptd read of the newest checkpoint decides; a
# predecessor rewritten during one trainer's run: test_pipe link_unchanged)
start_ckptd "$NOLIMIT"
gated_save 11
same 10 11 $BASE || fail "step 11 not linked"
grep -q "rank 0: 2 files of iter_000000010 to link" $LOG || fail "step 10's files were not read"
flip_byte "$ROOT/A/iter_000000011/$BASE"      # damages 6..11's shared copy too
gated_save 12
same 11 12 $BASE && fail "step 12 linked a shard rewritten after its commit"
grep -q "rank 0: 1 files of iter_000000011 to link" $LOG || fail "step 11's rewritten shard was read"
verify_step 12
restore_step 12
gated_save 13
same 12 13 $BASE || fail "step 13 not linked"
rm -rf "$ROOT/A/iter_000000013"
echo iter_000000012 > "$ROOT/A/latest_checkpoint.txt"
gated_save 14
same 12 14 $BASE || fail "step 14 did not link to step 12, latest after 13 was removed"
verify_step 14
restore_step 14
cp "$ROOT/A/iter_000000014/$BASE" "$T/copy"
rm -f "$ROOT/A/iter_000000014/$BASE" && cp "$T/copy" "$ROOT/A/iter_000000014/$BASE"
gated_save 15
same 14 15 $BASE && fail "step 15 linked a shard replaced after its commit"
grep -q "rank 0: 1 files of iter_000000014 to link" $LOG || fail "step 14's replaced shard was read"
verify_step 15

# --- "incremental": false, then incremental_max_shared 2 --------------------
write_conf '"incremental": false' "$NOLIMIT"
kill -HUP "$CKPTD_PID"
wait_until 10 grep -q 'SIGHUP: configuration reloaded' $LOG || fail "reload"
gated_save 16
same 15 16 $BASE && fail "linked with incremental off"
[ "$(written 16)" -gt $((8 << 20)) ] || fail "step 16 says it wrote $(written 16) bytes"
write_conf '"incremental_max_shared": 2'
kill -HUP "$CKPTD_PID"
wait_until 10 eval '[ "$(grep -c "SIGHUP: configuration reloaded" $LOG)" = 2 ]' || fail "reload 2"
gated_save 17:20
same 16 17 $BASE || fail "step 17 not linked"
same 17 18 $BASE && fail "step 18 linked a copy two steps share already"
same 18 19 $BASE || fail "step 19 not linked"
same 19 20 $BASE && fail "step 20 linked a copy two steps share already"

# --- keep_last 2 prunes step 20, whose shard step 21 links: still whole ---
# (and with incremental_max_shared 2 at keep_last 2, ckptd says the kept
# checkpoints may share one copy)
ino20=$(ino 20 $BASE)
n=$(grep -c "may all share one copy" $LOG)
write_conf '"incremental_max_shared": 2' '"keep_last": 2'
kill -HUP "$CKPTD_PID"
wait_until 10 eval '[ "$(grep -c "SIGHUP: configuration reloaded" $LOG)" = 3 ]' || fail "reload 3"
[ "$(grep -c "may all share one copy" $LOG)" = $((n + 1)) ] || fail "no word of the single copy"
gated_save 21:22
wait_until 10 eval '[ "$(ls $ROOT/A | grep iter_ | xargs)" = "iter_000000021 iter_000000022" ]' ||
	fail "kept $(ls $ROOT/A)"
[ "$(ino 21 $BASE)" = "$ino20" ] || fail "step 21 did not link step 20's shard"
[ "$(nlink 21 $BASE)" = 1 ] || fail "step 21's shard has $(nlink 21 $BASE) links, want 1"
same 21 22 $BASE && fail "step 22 linked a copy two steps share already"
for s in 21 22; do verify_step $s; done
restore_step 21

# --- bit rot that keeps the mtime, seen by a restarted ckptd ---------------
# (its first save reads the copy back before it links it)
stop_ckptd
start_ckptd "$NOLIMIT"
f22=$ROOT/A/iter_000000022/$BASE
touch -r "$f22" "$T/ref" && flip_byte "$f22" && touch -r "$T/ref" "$f22"
gated_save 23
same 22 23 $BASE && fail "step 23 linked a shard whose bytes rotted"
grep -q "not linked to iter_000000022's (it does not read back as its manifest says): written" $LOG ||
	fail "the rotten shard was not logged"
verify_step 23
restore_step 23

# --- CKPT_FROZEN: 9 of 10 tensors of each group frozen, in their own shard -
F=(-j F --mib 8 --frozen-every 10 --flag-frozen -q)
trainer save "${F[@]}" --steps 1:2 || fail "save F 1..2"
# linked before the copy: step 2 staged the trained tensors only
grep -q "job F rank 0 step 2: [0-9]* bytes of frozen shards linked to iter_000000001, not copied" $LOG ||
	fail "step 2's frozen shards were copied"
fino() { stat -c %i "$ROOT/F/$(printf iter_%09d "$1")/$2" || echo "missing-$1"; }
for g in model optim; do
	[ "$(fino 1 $g/rank_00000.frozen.safetensors)" = "$(fino 2 $g/rank_00000.frozen.safetensors)" ] ||
		fail "$g's frozen shard was not linked"
done
[ "$(fino 1 model/rank_00000.safetensors)" != "$(fino 2 model/rank_00000.safetensors)" ] ||
	fail "the trained tensors' shard was linked"
python3 - "$ROOT/F/iter_000000002/checkpoint_manifest.json" <<'PY' || fail "manifest of F"
import json, sys
m = json.load(open(sys.argv[1]))
assert m["format_version"] == 4, m["format_version"]
paths = {f["path"] for f in m["files"]}
for t in m["tensors"]:
    i = int(t["name"][5:t["name"].index(".")])      # layer<i>.<dtype>
    want = "%s/rank_00000%s.safetensors" % (t["group"], "" if i % 10 == 0 else ".frozen")
    assert m["files"][t["file"]]["path"] == want, (t, m["files"][t["file"]]["path"])
PY
ckptctl verify "$ROOT/F/iter_000000002" > "$T/v.out" 2>&1 || fail "F 2: $(cat "$T/v.out")"
out=$(trainer restore "${F[@]}" --step 1 2>&1) || fail "restore F 1: $out"
out=$(trainer restore "${F[@]}" --step 2 2>&1) || fail "restore F 2: $out"
# saves that overlap (waiting for STAGED only) link to the same committed
# step: still, no 4 saves in a row leave the frozen shards uncompared, and
# none links to a step older than the last save that copied them (whose
# bytes are newer)
cadence_holds() {   # JOB LAST
	local s to run=0 compared=1
	for s in $(seq 2 "$2"); do
		to=$(sed -n "s/.*job $1 rank 0 step $s: [0-9]* bytes of frozen shards linked to iter_0*\\([0-9]*\\), not copied.*/\\1/p" $LOG)
		if [ -z "$to" ]; then
			run=0 compared=$s
			continue
		fi
		run=$((run + 1))
		[ $run -le 3 ] || fail "$1: step $s is the 4th save in a row that linked the frozen shards"
		[ "$to" -ge $compared ] || fail "$1: step $s linked to step $to, older than step $compared, which copied them"
	done
}
trainer save -j G --mib 8 --frozen-every 10 --flag-frozen --wait staged -q --steps 1:16 ||
	fail "save G 1..16"
cadence_holds G 16
assert_no_leftovers
pass
