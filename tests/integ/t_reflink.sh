# Incremental saves on a file system that clones ranges: XFS with
# reflinks, on an image made and loop-mounted here.  In a file that
# changed, the chunks that did not are cloned from the step before
# (FICLONERANGE: shared blocks, no byte written): the manifest's
# bytes_written and ckptd_bytes_cloned_total say so, the blocks are shared
# (filefrag), and every step verifies and restores bit-exact, also once
# the steps it shares blocks with are removed.  What makes ckptd write the
# whole file instead: a failed clone (injected EOPNOTSUPP, then ENOSPC), a
# predecessor an operator touched since its commit, the first save after
# a restart (no range hashes yet), incremental_max_shared, and after a
# restart, blocks shared with another file (FIEMAP) counted twice.  With 8 MiB
# chunks, a chunk that changed in part has its unchanged MiB cloned.  On a file system without
# reflinks ckptd says it writes changed files whole (t_incremental: links).
. "$(dirname "$0")/lib.sh"
[ "$(id -u)" = 0 ] || skip "needs root to loop-mount an XFS image"
command -v mkfs.xfs > /dev/null || skip "no mkfs.xfs (xfsprogs; make deps installs it)"
command -v filefrag > /dev/null || skip "no filefrag (e2fsprogs)"
truncate -s 512M "$T/xfs.img"
mkfs.xfs -q -m reflink=1 "$T/xfs.img" || fail "mkfs.xfs"
mkdir -p "$ROOT"
mount -o loop "$T/xfs.img" "$ROOT" 2> /dev/null || skip "cannot loop-mount an image here"

P=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
# one file of 16 tensors of 4 MiB; 12 of them never change (3/4 of it)
J=(-j A --mib 64 --tensors 16 --groups model --frozen-every 4 -q)
MODEL=model/rank_00000.safetensors
dir_of() { echo "$ROOT/A/$(printf iter_%09d "$1")"; }
written() {
	python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["bytes_written"])' \
		"$(dir_of "$1")/checkpoint_manifest.json"
}
total() {
	python3 -c 'import json,sys; print(sum(f["size"] for f in json.load(open(sys.argv[1]))["files"]))' \
		"$(dir_of "$1")/checkpoint_manifest.json"
}
cloned_total() {
	curl -s "http://127.0.0.1:$P/metrics" | awk '$1 == "ckptd_bytes_cloned_total" { print $2 }'
}
verify_step() {
	ckptctl verify "$(dir_of "$1")" > "$T/v.out" 2>&1 ||
		fail "step $1 does not verify: $(cat "$T/v.out")"
}
restore_step() {
	local out
	out=$(trainer restore "${J[@]}" --step "$1" 2>&1) || fail "restore of $1: $out"
	grep -q "restored step $1 bit-exact" <<< "$out" || fail "restore of $1: $out"
}
shared_extents() { filefrag -v "$(dir_of "$1")/$MODEL" | grep -c shared; }
SIZE=0
# the model file's bytes written by step $1: more than its changed quarter,
# well under half (the chunks a changed tensor touches), or all of it ($2)
check_written() {
	local w
	w=$(written "$1")
	SIZE=$(stat -c %s "$(dir_of "$1")/$MODEL")
	if [ "$2" = whole ]; then
		[ "$w" -ge "$SIZE" ] || fail "step $1 wrote $w bytes, want the whole file ($SIZE)"
	else
		[ "$w" -ge $((SIZE / 4)) ] && [ "$w" -le $((SIZE * 4 / 10)) ] ||
			fail "step $1 wrote $w bytes of a $SIZE-byte file, 3/4 of it unchanged"
	fi
}

# --- cloned, shared, verified, restored ----------------------------------
KEYS=('"staging_bytes": "256MiB"' '"keep_last": 3' '"incremental_max_shared": 0')
start_ckptd "\"metrics_port\": $P" "${KEYS[@]}"
grep -q "the root's file system clones ranges" "$LOG" || fail "ckptd did not see reflinks"
trainer save "${J[@]}" --steps 1:3 || fail "save 1..3"
check_written 1 whole
check_written 2 part
check_written 3 part
want=$(( $(total 2) - $(written 2) + $(total 3) - $(written 3) ))
[ "$(cloned_total)" = "$want" ] || fail "ckptd_bytes_cloned_total is $(cloned_total), want $want"
[ "$(stat -c %i "$(dir_of 2)/$MODEL")" != "$(stat -c %i "$(dir_of 1)/$MODEL")" ] ||
	fail "a changed file was hard-linked"
[ "$(shared_extents 3)" -ge 1 ] || fail "step 3 shares no block: $(filefrag -v "$(dir_of 3)/$MODEL")"
for s in 1 2 3; do verify_step $s; restore_step $s; done
# the steps it shares blocks with go: step 3 is whole on its own
rm -rf "$(dir_of 1)" "$(dir_of 2)"
verify_step 3
restore_step 3

# --- a clone that fails: the chunks are written -------------------------
# (the first save of a trainer, or after a restart, has no range hashes of
# the step before to compare with: written whole)
stop_ckptd
CKPT_FAULT="clone:1:-95" start_ckptd "\"metrics_port\": $P" "${KEYS[@]}"
trainer save "${J[@]}" --steps 4:6 || fail "save 4..6 after a restart"
check_written 4 whole
check_written 5 whole          # the injected EOPNOTSUPP
check_written 6 part
grep -q "cloning its unchanged chunks from iter_000000004's failed (Operation not supported): written" "$LOG" ||
	fail "the failed clone was not logged"
for s in 4 5 6; do verify_step $s; restore_step $s; done
stop_ckptd
CKPT_FAULT="clone:2:-28" start_ckptd "\"metrics_port\": $P" "${KEYS[@]}"
trainer save "${J[@]}" --steps 7:9 || fail "save 7..9"
# step 8: its first run of unchanged chunks cloned, its second (ENOSPC)
# and those after it written
check_written 9 part
w8=$(written 8); w9=$(written 9)
[ "$w8" -gt "$w9" ] && [ "$w8" -lt "$SIZE" ] ||
	fail "step 8 wrote $w8 bytes with its second clone failing, step 9 $w9, the file is $SIZE"
for s in 7 8 9; do verify_step $s; restore_step $s; done

# --- a predecessor touched since its commit is not cloned from ----------
trainer save "${J[@]}" --steps 10:12 --hold "$T/hold" > "$T/save.out" 2>&1 &
pid=$!
latest_is() { [ "$(latest_of A)" = "$(printf iter_%09d "$1")" ]; }
wait_until 60 latest_is 10 || fail "step 10 did not commit"
touch "$T/hold.11"
wait_until 60 latest_is 11 || fail "step 11 did not commit: $(cat "$T/save.out"; ls $T)"
touch "$(dir_of 11)/$MODEL"
touch "$T/hold.12"
wait $pid || fail "save 10..12: $(cat "$T/save.out")"
check_written 11 part
check_written 12 whole
for s in 11 12; do verify_step $s; restore_step $s; done

# --- incremental_max_shared (2 by default) bounds clones too -------------
# blocks cloned once are in two checkpoints: the save after writes them
stop_ckptd
unset 'KEYS[2]'
start_ckptd "\"metrics_port\": $P" "${KEYS[@]}"
trainer save "${J[@]}" --steps 13:16 || fail "save 13..16"
check_written 14 part
check_written 15 whole
check_written 16 part
for s in 14 15 16; do verify_step $s; restore_step $s; done

# --- chunks of 8 MiB: the unchanged MiB of a chunk that changed in part --
# (each holds a changing 4 MiB tensor and an unchanged one) are cloned,
# the rest of the chunk written
stop_ckptd
start_ckptd "\"metrics_port\": $P" "${KEYS[@]}" '"incremental_max_shared": 0' '"chunk_bytes": "8MiB"'
trainer save "${J[@]}" --steps 17:19 || fail "save 17..19"
check_written 18 part
check_written 19 part
[ "$(shared_extents 19)" -ge 1 ] || fail "step 19 shares no block"
for s in 18 19; do verify_step $s; restore_step $s; done

# --- after a restart: blocks shared with another file count twice --------
# (ckptd no longer knows by how many saves; FIEMAP says they are shared)
stop_ckptd
start_ckptd "\"metrics_port\": $P" "${KEYS[@]}"
trainer save "${J[@]}" --steps 21:22 || fail "save 21..22"
check_written 22 part
stop_ckptd
start_ckptd "\"metrics_port\": $P" "${KEYS[@]}"
# step 23 has step 22's bytes, saved once ckptd read step 22's manifest
trainer save "${J[@]}" --steps 23 --content-step 22 --gate "$T/go" > "$T/save.out" 2>&1 &
pid=$!
wait_until 30 eval '[ "$(ranks_ready)" = 1 ]' || fail "rank 0 was not prepared"
touch "$T/go"
wait $pid || fail "save 23: $(cat "$T/save.out")"
[ "$(stat -c %i "$(dir_of 23)/$MODEL")" != "$(stat -c %i "$(dir_of 22)/$MODEL")" ] ||
	fail "step 23 was linked to step 22's file, whose cloned blocks are in two steps already"
check_written 23 whole
verify_step 23
out=$(trainer restore "${J[@]}" --step 23 --content-step 22 2>&1) &&
	grep -q "restored step 23 bit-exact" <<< "$out" || fail "restore of 23: $out"
pass
