# The memory tier across restarts of ckptd under systemd, with
# tests/integ/fdstore_standin.py standing in for systemd's service manager
# (a test double: these machines have no PID-1 systemd).  Committed memory
# copies go to the fd store; `systemctl restart` (SIGTERM, start) and a
# crash (SIGKILL, Restart=on-failure) both give them back, and the
# restores come from memory, bit-exact; a newer step takes the older one's
# place in the store; a ckptd started without the tier drops them from
# the store.  Without systemd a restart loses them (t_memory_tier).
. "$(dirname "$0")/lib.sh"
start_standin '"memory_tier_bytes": "64MiB"'
J=(-j mt -w 2 --mib 4)

save_both() {   # STEP
	trainer save "${J[@]}" -r 0 --steps "$1" -q > $T/s0.out 2>&1 &
	local p=$!
	trainer save "${J[@]}" -r 1 --steps "$1" -q > $T/s1.out 2>&1 || fail "rank 1 save $1: $(cat $T/s1.out)"
	wait $p || fail "rank 0 save $1: $(cat $T/s0.out)"
}
restore_both() {   # STEP SOURCE
	for r in 0 1; do
		trainer restore "${J[@]}" -r $r --expect "$1" > $T/r$r.out 2>&1 ||
			fail "rank $r restore of $1: $(cat $T/r$r.out)"
		grep -q "restored step $1 bit-exact from $2" $T/r$r.out ||
			fail "rank $r: step $1 not from $2: $(cat $T/r$r.out)"
	done
}
stored() { grep -c "^store $1\$" "$SL"; }

wait_ready 1
save_both 10
wait_until 10 eval '[ "$(stored memt.mt.10.0)" = 1 ] && [ "$(stored memt.mt.10.1)" = 1 ]' ||
	fail "the memory copies of step 10 were not stored: $(cat $SL)"

# systemctl restart: the copies come back, restores are from memory
kill -HUP $SP
wait_ready 2
grep -Eq "^start [0-9]+ memt\.mt\.10\.[01]:memt\.mt\.10\.[01]$" "$SL" ||
	fail "the restart did not get the stored fds: $(cat $SL)"
[ "$(grep -c "job mt: iter_000000010 (rank [01], .* bytes) is back in memory from systemd's fd store" $LOG)" = 2 ] ||
	fail "ckptd did not take both copies back"
restore_both 10 memory

# a newer step replaces the older in the store
save_both 20
wait_until 10 eval '[ "$(stored memt.mt.20.0)" = 1 ] && [ "$(stored memt.mt.20.1)" = 1 ]' ||
	fail "step 20 was not stored: $(cat $SL)"
grep -q '^remove memt.mt.10.0$' "$SL" && grep -q '^remove memt.mt.10.1$' "$SL" ||
	fail "step 10 was not taken out of the store: $(cat $SL)"

# a crash (SIGKILL), restarted: step 20 comes back, and only it
kill -USR1 $SP
wait_ready 3
tail -1 "$SL" | grep -Eq "^start [0-9]+ memt\.mt\.20\.[01]:memt\.mt\.20\.[01]$" ||
	grep -Eq "^start [0-9]+ memt\.mt\.20\.[01]:memt\.mt\.20\.[01]$" "$SL" ||
	fail "the crashed ckptd's successor did not get step 20 alone: $(cat $SL)"
restore_both 20 memory
verify_latest mt

# the tier turned off: ckptd drops what the store holds, restores from disk
write_conf '"memory_tier_bytes": 0'
kill -HUP $SP
wait_ready 4
grep -q "fd store: memt.mt.20.0 is dropped: the memory tier is off" $LOG ||
	fail "no reason logged for dropping the stored copies"
wait_until 10 eval 'grep -q "^remove memt.mt.20.0$" "$SL" && grep -q "^remove memt.mt.20.1$" "$SL"' ||
	fail "the stored copies were not removed from the store: $(cat $SL)"
restore_both 20 disk
kill -TERM $SP
wait $SP
grep -q "^exit $CKPTD_PID 0$" "$SL" || fail "ckptd did not exit cleanly: $(tail -3 $SL)"
pass
