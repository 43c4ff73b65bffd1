# Multi-node: a node that goes silent (SIGSTOP: alive for the launcher, but
# not answering) is noticed by heartbeat within coord_peer_timeout_ms, apart
# from the durability deadline (coord_deadline_ms, 10 minutes here).
# (1) node 2 stops: the coordinator fails the in-flight step on every node
#     with a clear error and exits non-zero; the launcher ends the rest.
# (2) the coordinator stops: every other node fails its in-flight steps the
#     same way and exits non-zero.
# Neither commits anything; a restarted cluster is consistent.
. "$(dirname "$0")/mpi_lib.sh"
round() {   # node-to-stop step
	local stop=$1 step=$2 r
	start_cluster '"coord_peer_timeout_ms": 1500' '"coord_deadline_ms": 600000'
	kill -STOP "$(node_pid "$stop")"
	save_all mpl "$step"
	none_ok || { show_rc; fail "a save succeeded with node $stop silent"; }
	for r in $(seq 0 7); do
		[ "$(node_of $r)" = "$stop" ] && continue
		grep -q "not heard from" "$T/out.$r" || fail "rank $r: $(cat "$T/out.$r")"
	done
	wait_cluster_exit 20 || fail "mpirun still runs with node $stop stopped"
	grep -q "failing in-flight saves and exiting" "$LOG" || fail "no daemon gave up"
}
round 2 10
round 0 20
start_cluster
[ -z "$(latest_of mpl)" ] || fail "latest is $(latest_of mpl)"
assert_no_leftovers
save_all mpl 30
all_rc 0 || { show_rc; fail "step 30"; }
stop_cluster
pass
