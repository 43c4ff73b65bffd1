# Multi-node: a root that is not really shared between the nodes (node 2
# has a directory of its own at the configured path, as a node whose shared
# file system is not mounted would) is found at start-up, before anything
# is saved: node 2 says plainly that its root is not the coordinator's and
# the world ends.  Before, it served, and each step failed on every rank as
# "node 2 saves another run of job ...".
. "$(dirname "$0")/mpi_lib.sh"
start_cluster
stop_cluster
sed "s|\"root\": \"$ROOT\"|\"root\": \"$T/root-node2\"|" "$CONF" > "$T/conf.node2"
grep -q root-node2 "$T/conf.node2" || fail "no config for node 2"
CKPT_NODE_CONF="2=$T/conf.node2" launch_cluster
wait_cluster_exit 60 || fail "the cluster still runs with a root that is not shared"
grep -q "the root '$T/root-node2' is not shared with the coordinator (node 0)" "$LOG" ||
	fail "no plain message about the root"
[ "$(grep -c 'is not shared with the coordinator' "$LOG")" = 1 ] || fail "another node complained"
# the shared root works again for the whole world
start_cluster
save_all mpr 10
all_rc 0 || { show_rc; fail "step 10 failed"; }
stop_cluster
pass
