# A committed memory-level step is the only copy of that step: a later save
# of the job that does not fit the memory tier must fail, not push it out.
# 4 nodes x 1 rank, memory_replicas 1, persist_every 5, a tier of 8 MiB
# (a node's own rank and its partner's copy of one step, and a little
# more).  Steps 5 (disk) and 6 (memory level) commit; step 7 is saved by
# ranks 0..2 only (it fails); every rank still restores step 6, bit-exact,
# and a stop of the cluster writes it.
NODES=4 WORLD=4
. "$(dirname "$0")/mpi_lib.sh"
start_cluster '"memory_tier_bytes": "8MiB"' '"memory_replicas": 1' '"persist_every": 5'
save_all pin 5:6
all_rc 0 || { show_rc; fail "steps 5 and 6"; }
pids=()
for r in 0 1 2; do
	timeout -k 5 45 "$TRAINER" save -s "$(node_sock $r)" -j pin -r $r -w 4 --mib 2 --steps 7 \
		> "$T/s7.$r" 2>&1 &
	pids+=($!)
done
wait "${pids[@]}"
for r in 0 1 2; do
	grep -q "step 7 ok" "$T/s7.$r" && fail "step 7 committed with rank 3 missing: $(cat "$T/s7.$r")"
done
restore_all pin 6
stop_cluster
start_cluster
[ "$(latest_of pin)" = iter_000000006 ] || fail "after a stop: latest is $(latest_of pin)"
stop_cluster
pass
