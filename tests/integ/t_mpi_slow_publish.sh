# Multi-node: the coordinator's publish (file work: fsyncs, rename, latest,
# prune) may take longer than the heartbeat limit.  It runs on a thread of
# its own, so heartbeats go on: with the publish held for three times
# coord_peer_timeout_ms no node counts a peer as lost, the step commits on
# every rank once the publish finishes, and the cluster goes on serving.
. "$(dirname "$0")/mpi_lib.sh"
HOLD=$T/hold
mkfifo "$HOLD"
export CKPT_FAILPOINT_HOLD=$HOLD
CKPT_NODE_FAILPOINT="0=coord.publish" start_cluster '"coord_peer_timeout_ms": 1000' \
	'"coord_deadline_ms": 120000'
save_all mps 10 &
saver=$!
wait_until 60 test -e "$HOLD.held" || fail "the coordinator never started publishing"
sleep 3     # the publish is held 3 x coord_peer_timeout_ms (not a timing check)
if grep -q "not heard from" "$LOG"; then fail "a peer was lost while the coordinator published"; fi
kill -0 "$MPIRUN_PID" 2>/dev/null || fail "the cluster ended while the coordinator published"
echo go > "$HOLD"
wait $saver
all_rc 0 || { show_rc; fail "step 10 failed"; }
[ "$(latest_of mps)" = "iter_000000010" ] || fail "latest is $(latest_of mps)"
save_all mps 20
all_rc 0 || { show_rc; fail "step 20 failed"; }
[ "$(latest_of mps)" = "iter_000000020" ] || fail "latest is $(latest_of mps)"
grep -q "not heard from" "$LOG" && fail "a peer was lost"
stop_cluster
pass
