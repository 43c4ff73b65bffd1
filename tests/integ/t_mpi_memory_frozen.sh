# Partner nodes keep one copy of a frozen shard across steps too (2 nodes,
# memory_replicas 1, one rank each): a save that links its CKPT_FROZEN
# shards unstaged sends its partner only the rest, and the partner shares
# the shards with its copy of the step it holds.  Checked: the links on
# both nodes, every save replicated, each node's memory copy of a step
# without the frozen bytes, and each rank restored bit-exact from the
# memory of the other node (its partner copy).  A partner that holds no
# such step (a new cluster: nothing in memory) refuses the copy, the
# step is still committed (on disk), and the next save is sent whole.
NODES=2 WORLD=2
. "$(dirname "$0")/mpi_lib.sh"
F=(--frozen-every 10 --flag-frozen -q)

linked() {   # RANK STEP
	grep -q "job F rank $1 step $2: [0-9]* bytes of frozen shards linked to iter_0*$(( $2 - 1 )), not copied" "$LOG"
}

start_cluster '"memory_tier_bytes": "64MiB"' '"memory_replicas": 1' \
	'"incremental_max_shared": 0'
replicated_saves F 1:4 "${F[@]}"
for s in 2 3 4; do
	for r in 0 1; do
		linked $r $s || fail "rank $r step $s: the frozen shards were copied"
	done
done
# one rank's own bytes and its partner's, without the frozen shards
# (about half of them here): less than step 1's whole copies, by them
[ "$(kept_bytes F 4 2 | wc -l)" = 2 ] || fail "step 4 is not kept on both nodes: $(kept_bytes F 4 2)"
whole=$(kept_bytes F 1 2 | head -1)
frozen=$(sed -n 's/.*job F rank 0 step 2: \([0-9]*\) bytes of frozen shards linked.*/\1/p' "$LOG")
for b in $(kept_bytes F 4 2); do
	[ "$b" -le $(( whole - 2 * frozen )) ] ||
		fail "a node keeps $b bytes for step 4 ($whole for step 1): the frozen shards were copied"
done
cross_restore F 4 "${F[@]}"
verify_latest F
stop_cluster

# a new cluster: nobody holds step 4 in memory.  Step 5 (a new trainer)
# copies its frozen shards and is sent whole; 6 shares them
start_cluster '"memory_tier_bytes": "64MiB"' '"memory_replicas": 1' \
	'"incremental_max_shared": 0'
replicated_saves F 5:6 "${F[@]}"
linked 0 6 && linked 1 6 || fail "step 6's frozen shards were copied"
cross_restore F 6 "${F[@]}"
stop_cluster
pass
