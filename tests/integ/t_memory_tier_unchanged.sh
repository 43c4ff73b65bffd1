# The memory tier keeps one copy of a file found unchanged as it is
# written (no CKPT_FROZEN flag: a frozen group's file, hard-linked on disk
# by t_incremental's comparison): the capture holds back its copy until
# the file is known to be the same as in the step the tier holds, then
# shares that step's bytes and gives its own room back.  Checked: the
# links, what the tier holds (one copy of the unchanged bytes, not one per
# step), restores from memory bit-exact, a changed group still copied,
# and restarts under systemd (the fd store, with
# tests/integ/fdstore_standin.py as a test double for systemd): the steps
# are taken back, the newer one sharing the older one's bytes.
. "$(dirname "$0")/lib.sh"
start_standin '"memory_tier_bytes": "64MiB"' '"incremental_max_shared": 0'
# 9/10 of 8 MiB in group base, never changed; lora changes every step
U=(-j U --mib 8 --groups base,base,base,base,base,base,base,base,base,lora --frozen base -q)

base_linked() {   # STEP: its base file is the previous step's (one inode)
	local a b
	a=$(stat -c %i "$ROOT/U/$(printf iter_%09d "$1")/base/rank_00000.safetensors") &&
	b=$(stat -c %i "$ROOT/U/$(printf iter_%09d $(( $1 - 1 )))/base/rank_00000.safetensors") &&
	[ "$a" = "$b" ]
}

wait_ready 1
trainer save "${U[@]}" --steps 1:4 || fail "save 1..4"
whole=$(kept_bytes U 1)
[ -n "$whole" ] || fail "step 1 was not kept in memory"
for s in 2 3 4; do
	base_linked $s || fail "step $s's base file was written, not linked"
	b=$(kept_bytes U $s)
	# its own copy: lora (a tenth) and the header pages, not base
	[ -n "$b" ] && [ "$b" -lt $(( whole / 5 )) ] ||
		fail "step $s keeps ${b:-nothing} bytes of its own in memory (step 1: $whole)"
done
h=$(held_mib)
[ "$h" -ge 8 ] && [ "$h" -lt 10 ] || fail "the tier holds $h MiB for one 8 MiB step"
restore_from_memory 4 "${U[@]}"
verify_latest U

# systemctl restart, then a crash: step 4 comes back with step 1 it shares
kill -HUP $SP
wait_ready 2
grep -q "job U: iter_000000004 (rank 0, [0-9]* bytes) is back in memory" $LOG ||
	fail "step 4 was not taken back: $(grep 'fd store' $LOG)"
restore_from_memory 4 "${U[@]}"
kill -USR1 $SP
wait_ready 3
restore_from_memory 4 "${U[@]}"
h=$(held_mib)
[ "$h" -ge 8 ] && [ "$h" -lt 10 ] || fail "the tier holds $h MiB after the restarts"

# a new trainer: its first save is written whole (not compared: t_incremental),
# its second shares the bytes of the first
trainer save "${U[@]}" --steps 5:6 || fail "save 5..6"
base_linked 6 || fail "step 6's base file was written, not linked"
b=$(kept_bytes U 6)
[ -n "$b" ] && [ "$b" -lt $(( whole / 5 )) ] ||
	fail "step 6 keeps ${b:-nothing} bytes of its own in memory (step 1: $whole)"
restore_from_memory 6 "${U[@]}"
h=$(held_mib)
[ "$h" -ge 8 ] && [ "$h" -lt 10 ] || fail "the tier holds $h MiB for one 8 MiB step after step 6"

# every group changing: every byte copied again
trainer save -j U --mib 8 --groups base,base,base,base,base,base,base,base,base,lora -q \
	--steps 7:7 || fail "save 7"
b=$(kept_bytes U 7)
[ -n "$b" ] && [ "$b" -ge $(( whole - 65536 )) ] ||
	fail "step 7 (all changed) keeps ${b:-nothing} bytes in memory (step 1: $whole)"
restore_from_memory 7 -j U --mib 8 --groups base,base,base,base,base,base,base,base,base,lora
for s in 4 6 7; do
	ckptctl verify "$ROOT/U/$(printf iter_%09d $s)" > $T/v.out 2>&1 || fail "verify $s: $(cat $T/v.out)"
done
kill -TERM $SP
wait $SP
pass
