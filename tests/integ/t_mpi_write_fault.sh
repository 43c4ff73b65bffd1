# Multi-node: one rank's write fails on one node (CKPT_FAULT only in node 2's
# environment).  The step is published nowhere, every client on every node
# gets the error, the staging directory goes away, and the next step commits.
. "$(dirname "$0")/mpi_lib.sh"
# the job exists first: the node that creates it writes job.json, which the
# counted fault could hit instead of a shard (its rank's HELLO then fails,
# and the step waits for the deadline instead of failing on the write)
start_cluster
"$PROBE" idle -s "$(node_sock 0)" -j mpf -r 0 -w 8 --secs 0 < /dev/null \
	> "$T/probe.out" 2>&1 || fail "creating the job: $(cat "$T/probe.out")"
stop_cluster
CKPT_NODE_FAULT="2=write:2:-5" start_cluster
save_all mpf 10
none_ok || { show_rc; fail "a rank's save of step 10 succeeded"; }
grep -q "Input/output error\|I/O error\|EIO" "$T/out.0" || fail "rank 0 (node 0) did not learn why: $(cat "$T/out.0")"
[ ! -e "$ROOT/mpf/iter_000000010" ] || fail "step 10 was published"
[ -z "$(latest_of mpf)" ] || fail "latest is $(latest_of mpf)"
assert_no_leftovers
save_all mpf 20
all_rc 0 || { show_rc; fail "step 20 failed"; }
[ "$(latest_of mpf)" = "iter_000000020" ] || fail "latest is $(latest_of mpf)"
restore_all mpf 20
stop_cluster
pass
