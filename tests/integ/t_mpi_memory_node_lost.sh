# A node SIGKILLed after a memory-level step committed (4 nodes,
# persist_every 5; the launcher keeps the others running: --enable-recovery).
# The survivors notice the loss, write what they hold of step 6 -- their
# own ranks and the copies they keep for their partners -- to the shared
# root and leave; the next world's recovery publishes step 6, which every
# rank restores bit-exact.  With memory_replicas 1 the lost node's ranks
# are on its partner; with 0 (the negative control) nobody holds them, so
# step 6 is not published and step 5 is the latest.  A stop of the whole
# cluster writes the memory-level step too.
. "$(dirname "$0")/mpi_lib.sh"
export MPIRUN_ARGS=--enable-recovery

round() {   # job replicas want
	local job=$1 k=$2 want=$3
	start_cluster '"memory_tier_bytes": "96MiB"' "\"memory_replicas\": $k" \
		'"persist_every": 5' '"coord_peer_timeout_ms": 1500'
	save_all "$job" 5:6
	all_rc 0 || { show_rc; fail "K=$k: a save failed"; }
	grep -q "rank 0 step 6 ok" "$T/out.0" || fail "K=$k: step 6 not acknowledged"
	[ ! -e "$ROOT/$job/iter_000000006" ] || fail "K=$k: step 6 is on disk before the loss"
	kill -9 "$(node_pid 2)"
	wait_cluster_exit 30 || fail "K=$k: the survivors did not leave after node 2 was lost"
	# a flush cut short leaves a temp file: not part of the checkpoint
	st=$(ls -d "$ROOT/$job"/.iter_000000006.staging-*) || fail "K=$k: nothing was written"
	echo partial > "$st/model/rank_00000.safetensors.flush-3.tmp"
	start_cluster
	[ ! -e "$ROOT/$job/iter_000000006/model/rank_00000.safetensors.flush-3.tmp" ] ||
		fail "K=$k: a flush's temp file was published with the step"
	[ "$(latest_of "$job")" = "iter_$(printf %09d "$want")" ] ||
		fail "K=$k: latest is '$(latest_of "$job")', want step $want"
	verify_latest "$job"
	assert_no_leftovers
	restore_all "$job" "$want"
	stop_cluster
}

round mnl 1 6
grep -q "memory-level step 6: wrote .* files" "$LOG" || fail "no survivor wrote step 6"
grep -q "memory-level step 6 published" "$LOG" || fail "recovery did not say it published step 6"
round mnz 0 5
grep -q "memory-level step in '.iter_000000006.staging-.*' not published: .*" "$LOG" ||
	fail "K=0: recovery did not say why step 6 is not published"

# node 1 dies while it sends its copy of step 7 to node 2 (a failpoint
# after its 5th piece: two ranks for steps 5 and 6, then step 7's first):
# node 2 must not wait for the rest for ever; the world ends and step 6,
# committed in memory, is published by the next world
export MPIRUN_ARGS=--enable-recovery
CKPT_NODE_FAILPOINT="1=repl.piece:5" start_cluster '"memory_tier_bytes": "96MiB"' \
	'"memory_replicas": 1' '"persist_every": 5' '"coord_peer_timeout_ms": 1500'
save_all mid 5:6
all_rc 0 || { show_rc; fail "mid-copy: steps 5 and 6"; }
save_all mid 7
none_ok || { show_rc; fail "mid-copy: step 7 committed with node 1 dead"; }
wait_cluster_exit 30 || fail "mid-copy: the survivors did not leave after node 1 died mid-copy"
start_cluster
[ "$(latest_of mid)" = iter_000000006 ] || fail "mid-copy: latest is '$(latest_of mid)'"
restore_all mid 6
stop_cluster

# an operator stops the whole cluster: every node writes what it holds
# before it leaves, so the memory-level step is published at the next start
start_cluster '"memory_tier_bytes": "96MiB"' '"memory_replicas": 1' '"persist_every": 5'
save_all mst 5:7
all_rc 0 || { show_rc; fail "stop: a save failed"; }
stop_cluster
start_cluster
[ "$(latest_of mst)" = iter_000000007 ] || fail "after a stop: latest is '$(latest_of mst)'"
restore_all mst 7
stop_cluster
pass
