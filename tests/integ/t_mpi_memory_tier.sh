# Multi-node with the memory tier on: each daemon keeps its own ranks'
# files of the newest committed step.  Every rank restores it through its
# own node from memory, bit-exact; through another node (which holds
# other ranks' files) from that node's memory (a peer); an older step from
# disk, with the reason in the log.
NODES=2 WORLD=4
. "$(dirname "$0")/mpi_lib.sh"
start_cluster '"memory_tier_bytes": "64MiB"'
save_all mtc 10:20:10
all_rc 0 || { show_rc; fail "a rank's save failed"; }
[ "$(latest_of mtc)" = "iter_000000020" ] || fail "latest is $(latest_of mtc)"
restore_all mtc 20
for r in 0 1 2 3; do
	grep -q 'restored step 20 bit-exact from memory' "$T/restore.$r" ||
		fail "rank $r on its node: not from memory: $(cat "$T/restore.$r")"
done
# rank 0 through node 1: its files are not in node 1's memory, so they
# come from node 0's (CKPT_FROM_PEER); rank 3 through node 0, step 10 (not
# the newest, so in no memory): from disk, the reason in node 0's log
"$TRAINER" restore -s "$(node_sock 1)" -j mtc -r 0 -w 4 --mib 2 --expect 20 > "$T/x0.out" 2>&1 ||
	fail "rank 0 via node 1: $(cat "$T/x0.out")"
grep -q 'bit-exact from peer' "$T/x0.out" || fail "rank 0 via node 1 not from a peer: $(cat "$T/x0.out")"
"$TRAINER" restore -s "$(node_sock 0)" -j mtc -r 3 -w 4 --mib 2 --step 10 --expect 10 > "$T/x3.out" 2>&1 ||
	fail "rank 3 via node 0, step 10: $(cat "$T/x3.out")"
grep -q 'bit-exact from disk' "$T/x3.out" || fail "step 10 not from disk: $(cat "$T/x3.out")"
grep -q 'rank 3 restores iter_000000010 from disk: ' $LOG || fail "no reason logged for step 10"
assert_no_leftovers
stop_cluster
pass
