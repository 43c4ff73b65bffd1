# Multi-node crash: node 2's ckptd dies right after it reported a durable
# rank of step 20 (the coordinator holds its report, other ranks are still
# coming).  No hang; after a restart every node agrees on step 10.
. "$(dirname "$0")/mpi_lib.sh"
start_cluster
save_all mpk 10
all_rc 0 || { show_rc; fail "step 10"; }
stop_cluster
kill_phase mpk 2 coord.after_report 10 20 10
pass
