#!/bin/bash
# The memory tier keeps one copy of the unchanged chunks of a changed file
# (daemon/memt_splice.c): one file of 32 tensors, 1 in 8 of them changing
# at every step, chunks of 64 KiB.  Checked: what each step keeps of its
# own (its changed chunks), what the tier holds (about one step, not one
# per step), restores from memory bit-exact, restarts under systemd (the
# fd store, with tests/integ/fdstore_standin.py as a test double for
# systemd) and a crash, a new trainer, a model where every tensor changes
# (every chunk copied again), and a restart with two ranks of a job.
. "$(dirname "$0")/lib.sh"
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
start_standin '"memory_tier_bytes": "64MiB"' '"chunk_bytes": "64KiB"' "\"metrics_port\": $PORT"

C=(-j C --mib 8 --tensors 32 --frozen-every 8 -q)

tier_stat() {   # KEY of ckptctl status's memory_tier
	ckptctl status --json | python3 -c 'import json, sys
print(json.load(sys.stdin)["memory_tier"][sys.argv[1]])' "$1"
}
held_is_one_step() {   # WHEN
	local h
	h=$(held_mib)
	[ "$h" -ge 8 ] && [ "$h" -lt 10 ] || fail "the tier holds $h MiB for one 8 MiB step $1"
}

wait_ready 1
trainer save "${C[@]}" --steps 1:4 || fail "save 1..4"
whole=$(kept_bytes C 1)
[ -n "$whole" ] && [ "$whole" -ge $((8 << 20)) ] || fail "step 1 kept ${whole:-nothing} bytes"
for s in 2 3 4; do
	# its changed chunks: 4 tensors of 256 KiB over 5 chunks each, and the header's
	b=$(kept_bytes C $s)
	[ -n "$b" ] && [ "$b" -lt $(( whole / 4 )) ] ||
		fail "step $s keeps ${b:-nothing} bytes of its own in memory (step 1: $whole)"
done
held_is_one_step "after step 4"
# counted: saves 2..4 shared most of their bytes, step 1 copied whole
copied=$(tier_stat copied) shared=$(tier_stat shared)
[ "$shared" -gt $(( 2 * whole )) ] && [ "$copied" -lt $(( whole + whole )) ] ||
	fail "copied $copied and shared $shared bytes in four saves of $whole"
python3 -c 'import sys, urllib.request
t = urllib.request.urlopen("http://127.0.0.1:%s/metrics" % sys.argv[1], timeout=5).read().decode()
assert "\nckptd_memory_tier_shared_bytes_total %s\n" % sys.argv[2] in t, t' "$PORT" "$shared" > $T/m.out 2>&1 ||
	fail "the metrics do not count the bytes shared: $(grep memory_tier $T/m.out)"
restore_from_memory 4 "${C[@]}"
verify_latest C

# systemctl restart, then a crash: step 4 comes back with its chunks
kill -HUP $SP
wait_ready 2
grep -q "job C: iter_000000004 (rank 0, [0-9]* bytes) is back in memory" $LOG ||
	fail "step 4 was not taken back: $(grep 'fd store' $LOG)"
grep -q "fd store: C.*dropped\|memt.C.*is dropped" $LOG && fail "a step was dropped: $(grep 'fd store' $LOG)"
restore_from_memory 4 "${C[@]}"
kill -USR1 $SP
wait_ready 3
restore_from_memory 4 "${C[@]}"
held_is_one_step "after the restarts"

# a new trainer: its saves splice from the steps taken back
trainer save "${C[@]}" --steps 5:6 || fail "save 5..6"
for s in 5 6; do
	b=$(kept_bytes C $s)
	[ -n "$b" ] && [ "$b" -lt $(( whole / 4 )) ] ||
		fail "step $s keeps ${b:-nothing} bytes of its own in memory (step 1: $whole)"
done
restore_from_memory 6 "${C[@]}"
held_is_one_step "after step 6"

# every tensor changing: every chunk copied again, the older steps freed
trainer save -j C --mib 8 --tensors 32 -q --steps 7:7 || fail "save 7"
b=$(kept_bytes C 7)
[ -n "$b" ] && [ "$b" -ge $(( whole - 65536 )) ] ||
	fail "step 7 (all changed) keeps ${b:-nothing} bytes in memory (step 1: $whole)"
restore_from_memory 7 -j C --mib 8 --tensors 32
held_is_one_step "after step 7"
for s in 4 6 7; do
	ckptctl verify "$ROOT/C/$(printf iter_%09d $s)" > $T/v.out 2>&1 || fail "verify $s: $(cat $T/v.out)"
done

# two ranks of a job on the node: a restart brings both ranks' copies back
# (each finds what it shares in the steps before, not in the other rank's
# copy of its step; those stay until both copies are taken back)
K=(-j K --mib 8 --tensors 32 --frozen-every 8 -w 2 -q)
for s in 1 2 3 4; do
	trainer save "${K[@]}" -r 0 --steps $s & p=$!
	trainer save "${K[@]}" -r 1 --steps $s || fail "save $s rank 1"
	wait $p || fail "save $s rank 0"
done
kill -HUP $SP
wait_ready 4
for r in 0 1; do
	restore_from_memory 4 "${K[@]}" -r $r
done
kill -TERM $SP
wait $SP
grep -q "^exit $CKPTD_PID 0$" "$SL" || fail "ckptd did not exit cleanly: $(tail -3 $SL)"
pass
