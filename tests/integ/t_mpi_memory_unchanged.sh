# Partner nodes keep one copy of a file found unchanged as it is written
# (no CKPT_FROZEN flag: t_memory_tier_unchanged) too: 2 nodes,
# memory_replicas 1, one rank each.  The capture shares the unchanged
# file with the step its node holds, and its copy goes to the partner
# without those bytes (its other files sent run by run around the hole);
# the partner shares them with its copy of that step.  Checked: every
# save replicated, each node's memory copy of a step without the
# unchanged bytes, each rank restored bit-exact from the other node's
# memory; a new cluster (nothing in memory) copies and sends the first
# save that finds the file unchanged whole, and shares from the next.
NODES=2 WORLD=2
. "$(dirname "$0")/mpi_lib.sh"
U=(--groups base,base,base,lora --frozen base -q)


start_cluster '"memory_tier_bytes": "64MiB"' '"memory_replicas": 1' \
	'"incremental_max_shared": 0'
replicated_saves U 1:4 "${U[@]}"
whole=$(kept_bytes U 1 2 | head -1)
[ -n "$whole" ] || fail "step 1 was not kept in memory"
for s in 3 4; do
	kept_small U $s "$(( whole / 2 ))"
done
cross_restore U 4 "${U[@]}"
verify_latest U
stop_cluster

# a new cluster: nobody holds step 4 in memory.  Step 5 is copied and
# sent whole (a new trainer's first save is not compared); 6 and 7 share
# its bytes
start_cluster '"memory_tier_bytes": "64MiB"' '"memory_replicas": 1' \
	'"incremental_max_shared": 0'
replicated_saves U 5:7 "${U[@]}"
kept_small U 6 "$(( whole / 2 ))"
kept_small U 7 "$(( whole / 2 ))"
cross_restore U 7 "${U[@]}"
stop_cluster
pass
