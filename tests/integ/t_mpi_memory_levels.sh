# The memory levels across 4 nodes (memory_replicas 1, persist_every 5):
# each node sends its ranks' saves to its partner (node n -> n+1), so a
# save goes STAGED, REPLICATED, DURABLE, COMMITTED (raw events, in that
# order); a step that is not a multiple of 5 commits in memory only:
# STAGED, REPLICATED, COMMITTED, no directory, no staging leftover on disk.
# The newest step (7, memory level) restores on every rank from its own
# node's memory, bit-exact; through a node that does not hold it, from a
# peer's memory (CKPT_FROM_PEER).  Step 5 is on disk as usual.
. "$(dirname "$0")/mpi_lib.sh"
job=mlv
start_cluster '"memory_tier_bytes": "96MiB"' '"memory_replicas": 1' '"persist_every": 5'

# the order of the phases, as ckptd sends them (4 ranks, one per node)
for step in 5 6; do
	for r in 0 1 2 3; do
		python3 "$TOP/tests/integ/phase_events.py" "$(node_sock "$r")" ord "$r" 4 "$step" \
			> "$T/ph.$r" 2>&1 &
		pids[$r]=$!
	done
	want=staged,replicated,durable,committed
	[ "$step" = 6 ] && want=staged,replicated,committed
	for r in 0 1 2 3; do
		wait "${pids[$r]}" || fail "step $step, rank $r: $(cat "$T/ph.$r")"
		[ "$(cat "$T/ph.$r")" = "$want" ] ||
			fail "step $step, rank $r: phases $(cat "$T/ph.$r"), want $want"
	done
	log "step $step: $want on every rank"
done
[ -d "$ROOT/ord/iter_000000005" ] || fail "step 5 is not on disk"
[ ! -e "$ROOT/ord/iter_000000006" ] || fail "step 6 (memory level) is on disk"

# 8 ranks (2 per node), steps 1..7: 5 on disk, the others in memory only
save_all $job 1:7
all_rc 0 || { show_rc; fail "a save failed"; }
grep -q "rank 0 step 7 ok" "$T/out.0" || fail "rank 0: $(cat "$T/out.0")"
# a memory-level step has no DURABLE: its time says so (0)
grep -q "rank 0 step 7 ok: .* durable 0.0 ms committed [1-9]" "$T/out.0" ||
	fail "rank 0, step 7: a durable time for a step never on disk: $(cat "$T/out.0")"
grep -q "rank 0 step 5 ok: .* durable [1-9]" "$T/out.0" || fail "rank 0, step 5: $(cat "$T/out.0")"
[ "$(ls "$ROOT/$job" | grep -c '^iter_')" = 1 ] || fail "on disk: $(ls "$ROOT/$job")"
[ "$(latest_of $job)" = iter_000000005 ] || fail "latest on disk is $(latest_of $job)"
assert_no_leftovers
grep -q "step 7 committed in memory (8 ranks)" "$LOG" || fail "no memory-level commit logged"

# every rank through its own node: step 7, from memory
restore_all $job 7
for r in $(seq 0 7); do
	grep -q 'restored step 7 bit-exact from memory' "$T/restore.$r" ||
		fail "rank $r: $(cat "$T/restore.$r")"
done
# rank 0 (saved on node 0, copy on node 1) through node 2: from a peer;
# rank 2 (saved on node 1, copy on node 2) through node 2: from memory
"$TRAINER" restore -s "$(node_sock 2)" -j $job -r 0 -w 8 --mib 2 --expect 7 > "$T/x0.out" 2>&1 ||
	fail "rank 0 via node 2: $(cat "$T/x0.out")"
grep -q 'restored step 7 bit-exact from peer' "$T/x0.out" || fail "rank 0 via node 2: $(cat "$T/x0.out")"
"$TRAINER" restore -s "$(node_sock 2)" -j $job -r 2 -w 8 --mib 2 --expect 7 > "$T/x2.out" 2>&1 ||
	fail "rank 2 via node 2: $(cat "$T/x2.out")"
grep -q 'restored step 7 bit-exact from memory' "$T/x2.out" || fail "rank 2 via node 2: $(cat "$T/x2.out")"
# the disk step restores as before; an older memory-level step is gone
"$TRAINER" restore -s "$(node_sock 3)" -j $job -r 6 -w 8 --mib 2 --step 5 --expect 5 > "$T/x6.out" 2>&1 ||
	fail "rank 6, step 5: $(cat "$T/x6.out")"
"$TRAINER" restore -s "$(node_sock 3)" -j $job -r 6 -w 8 --mib 2 --step 6 > "$T/x6.out" 2>&1 &&
	fail "rank 6, step 6 (an older memory-level step) restored: $(cat "$T/x6.out")"
grep -q "step 6 is not on disk, and memory holds only the job's newest memory-level step (7)" "$T/x6.out" ||
	fail "rank 6, step 6: $(cat "$T/x6.out")"
out=$("$TOP/ckptctl" -s "$(node_sock 1)" status) || fail "status: $out"
echo "$out" | grep -q "memory: .*1 partner node(s) .*every 5; in memory only: .*$job step 7" ||
	fail "status does not show the memory levels: $out"
stop_cluster

# a memory tier too small for a node's share: the memory-level step fails
# with the reason; the disk step still commits (not replicated, logged)
start_cluster '"memory_tier_bytes": "4MiB"' '"memory_replicas": 1' '"persist_every": 5'
save_all small 5:6
grep -q "rank 0 step 5 ok" "$T/out.0" || fail "small tier: step 5: $(cat "$T/out.0")"
grep -q "kept in memory only.*memory_tier_bytes" "$T/out.1" "$T/out.0" ||
	fail "small tier: step 6: $(cat "$T/out.0" "$T/out.1")"
[ "$(latest_of small)" = iter_000000005 ] || fail "small tier: latest is $(latest_of small)"
grep -q "is not replicated (it is on disk)" "$LOG" || fail "small tier: no reason logged"
assert_no_leftovers
stop_cluster

# nodes that disagree on memory_replicas: every save of a step fails, saying so
start_cluster '"memory_tier_bytes": "96MiB"' '"memory_replicas": 1'
stop_cluster
python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); c["memory_replicas"]=0; json.dump(c, open(sys.argv[2], "w"))' "$CONF" "$T/k0.json"
CKPT_NODE_CONF="1=$T/k0.json" start_cluster '"memory_tier_bytes": "96MiB"' '"memory_replicas": 1'
save_all mix 5
none_ok || { show_rc; fail "mixed memory_replicas: a save succeeded"; }
grep -q "memory_replicas must be the same on every node" "$T/out.0" ||
	fail "mixed memory_replicas: $(cat "$T/out.0")"
stop_cluster
pass
