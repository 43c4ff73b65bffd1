#!/bin/bash
# Partner nodes keep one copy of the unchanged chunks of a changed file
# too (t_memory_tier_chunks): 2 nodes, memory_replicas 1, one rank each,
# one file of 16 tensors of which 1 in 8 changes at every step, chunks of
# 64 KiB.  A capture's copy goes to the partner with its own chunks only
# (run by run around the spliced ones); the partner splices the others
# from its copy of the steps they came from.  Checked: every save
# replicated, each node's memory copy of a step small, each rank restored
# bit-exact from the other node's memory; a new cluster (nothing in
# memory) copies and sends its first save whole, and splices from the next.
NODES=2 WORLD=2
. "$(dirname "$0")/mpi_lib.sh"
C=(--tensors 16 --frozen-every 8 -q)


start_cluster '"memory_tier_bytes": "64MiB"' '"memory_replicas": 1' '"chunk_bytes": "64KiB"'
replicated_saves C 1:4 "${C[@]}"
whole=$(kept_bytes C 1 2 | head -1)
[ -n "$whole" ] || fail "step 1 was not kept in memory"
for s in 2 3 4; do
	kept_small C $s "$(( whole / 3 ))"
done
cross_restore C 4 "${C[@]}"
verify_latest C
stop_cluster

# a new cluster: nobody holds step 4 in memory.  Step 5 is copied and
# sent whole; 6 and 7 splice its chunks
start_cluster '"memory_tier_bytes": "64MiB"' '"memory_replicas": 1' '"chunk_bytes": "64KiB"'
replicated_saves C 5:7 "${C[@]}"
b=$(kept_bytes C 5 2 | head -1)
[ -n "$b" ] && [ "$b" -ge $(( whole - 65536 )) ] || fail "step 5 keeps ${b:-nothing} bytes ($whole for step 1)"
kept_small C 6 "$(( whole / 3 ))"
kept_small C 7 "$(( whole / 3 ))"
cross_restore C 7 "${C[@]}"
stop_cluster
pass
