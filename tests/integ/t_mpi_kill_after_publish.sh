# Multi-node crash of the coordinator mid-publish: (1) after the rename of
# step 20, before latest and before telling anyone; (2) after the whole
# publish of step 40, before telling the other nodes.  No hang; a restart
# rolls the complete publish forward and every node agrees on it.
. "$(dirname "$0")/mpi_lib.sh"
start_cluster
save_all mpk 10
all_rc 0 || { show_rc; fail "step 10"; }
stop_cluster
kill_phase mpk 0 publish.after_rename 10 20 20
kill_phase mpk 0 coord.after_publish 30 40 40
pass
