# Multi-node crash: node 1's ckptd dies just before it reports its first
# durable rank of step 20.  No hang; after a restart every node agrees that
# step 10 is the latest and step 20 is nowhere.
. "$(dirname "$0")/mpi_lib.sh"
start_cluster
save_all mpk 10
all_rc 0 || { show_rc; fail "step 10"; }
stop_cluster
kill_phase mpk 1 coord.before_report 10 20 10
pass
