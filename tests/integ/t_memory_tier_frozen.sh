# The memory tier keeps one copy of a frozen shard across steps: a save
# that links its CKPT_FROZEN shards unstaged (t_incremental) does so with
# the tier on too, and its memory copy shares the shards' bytes with the
# step the tier held (which stays, an orphan, while shared).  Checked: the
# links, what the tier holds (one copy of the frozen bytes, not one per
# step), restores of the newest step from memory bit-exact, the frozen
# check every 4th save, and restarts under systemd (the fd store, with
# tests/integ/fdstore_standin.py as a test double for systemd): the shared
# step's memfd is stored while shared, taken back first, and removed from
# the store once no step shares it.
. "$(dirname "$0")/lib.sh"
start_standin '"memory_tier_bytes": "64MiB"' '"incremental_max_shared": 0'
F=(-j F --mib 8 --frozen-every 10 --flag-frozen -q)
MiB=1048576

linked() { grep -q "job F rank 0 step $1: [0-9]* bytes of frozen shards linked to iter_0*$2, not copied" $LOG; }
stored() { grep -c "^store $1\$" "$SL"; }
removed() { grep -q "^remove $1\$" "$SL"; }

wait_ready 1
# steps 2..4 link the frozen shards and share them in memory; step 5 is
# the 4th save since the copy, so it copies and compares them
trainer save "${F[@]}" --steps 1:4 || fail "save 1..4"
for s in 2 3 4; do
	linked $s $((s - 1)) || fail "step $s's frozen shards were copied (the tier is on)"
done
grep -q "job F: iter_000000004 kept in memory" $LOG || fail "step 4 was not kept in memory"
restore_from_memory 4 "${F[@]}"
# 8 MiB a step, 9/10 frozen: about 8 MiB held, not 16 (two steps' copies)
h=$(held_mib)
[ "$h" -ge 8 ] && [ "$h" -lt 10 ] || fail "the tier holds $h MiB for one 8 MiB step"
verify_latest F

# the fd store: step 4's memfd and step 1's (whose frozen bytes it shares)
wait_until 10 eval '[ "$(stored memt.F.4.0)" = 1 ] && [ "$(stored memt.F.1.0)" = 1 ]' ||
	fail "steps 4 and 1 are not both in the fd store: $(cat $SL)"
removed memt.F.2.0 && removed memt.F.3.0 || fail "steps 2 and 3 stayed in the store: $(cat $SL)"
removed memt.F.1.0 && fail "step 1 left the store while step 4 shares it"
kill -HUP $SP           # systemctl restart
wait_ready 2
grep -q "job F: iter_000000004 (rank 0, [0-9]* bytes) is back in memory" $LOG ||
	fail "step 4 was not taken back: $(grep 'fd store' $LOG)"
restore_from_memory 4 "${F[@]}"
kill -USR1 $SP          # a crash, restarted
wait_ready 3
restore_from_memory 4 "${F[@]}"

# a new trainer: step 5 is compared (after a restart, from disk) and
# written, step 6 shares it; step 4 then leaves the store.  Step 5's
# memory copy holds its frozen shards' chunks once: spliced from step 1,
# which stays in the store for them
trainer save "${F[@]}" --steps 5:6 || fail "save 5..6"
linked 5 4 && fail "step 5 linked without a comparison after the restart"
linked 6 5 || fail "step 6's frozen shards were copied"
restore_from_memory 6 "${F[@]}"
wait_until 10 removed memt.F.4.0 || fail "step 4 stayed in the store: $(cat $SL)"
removed memt.F.1.0 && fail "step 1 left the store while step 6 holds its chunks"
h=$(held_mib)
[ "$h" -ge 8 ] && [ "$h" -lt 10 ] || fail "the tier holds $h MiB for one 8 MiB step"

# the frozen check: a new trainer copies them (7), links them in 8..10,
# and the 4th save since the copy (11) copies and compares them again;
# found the same as they were written, its memory copy shares them too
# (it holds the changing tenth of its own, under 1 MiB)
trainer save "${F[@]}" --steps 7:11 || fail "save 7..11"
linked 7 6 && fail "a new trainer's first save linked its frozen shards unchecked"
for s in 8 9 10; do
	linked $s $((s - 1)) || fail "step $s's frozen shards were copied"
done
linked 11 10 && fail "step 11 (the 4th save since the copy) did not compare its frozen shards"
grep -q "job F: iter_000000011 kept in memory ([0-9]\{6\} bytes)" $LOG ||
	fail "step 11's memory copy holds its frozen shards again: $(grep 'iter_000000011 kept' $LOG)"
restore_from_memory 11 "${F[@]}"
h=$(held_mib)
[ "$h" -ge 8 ] && [ "$h" -lt 10 ] || fail "the tier holds $h MiB for one 8 MiB step after step 11"
for s in 8 9 10 11; do
	ckptctl verify "$ROOT/F/$(printf iter_%09d $s)" > $T/v.out 2>&1 || fail "verify $s: $(cat $T/v.out)"
done
kill -TERM $SP
wait $SP
grep -q "^exit $CKPTD_PID 0$" "$SL" || fail "ckptd did not exit cleanly: $(tail -3 $SL)"
pass
