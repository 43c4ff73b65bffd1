# A committed memory-level step is the only copy of that step: a later save
# of the job that does not fit the memory tier must fail, not push it out.
# 4 nodes x 1 rank, memory_replicas 1, persist_every 5, a tier of 8 MiB
# (a node's own rank and its partner's copy of one step, and a little
# more).  Steps 5 (disk) and 6 (memory level) commit; step 7 is saved by
# ranks 0..2 only (it fails); every rank still restores step 6, bit-exact,
# and a stop of the cluster writes it.  A burst of saves refused by a
# tight tier gives its memory back.
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

# a burst of saves that do not wait, many of them refused by the tight
# tier and aborted: what they held goes back, and the next memory-level
# step saved alone commits (partners' copies of aborted steps were kept
# for ever, and the tier refused every memory-level step after)
start_cluster '"memory_tier_bytes": "12MiB"' '"memory_replicas": 1' '"persist_every": 5'
save_all burst 5:6
all_rc 0 || { show_rc; fail "burst: steps 5 and 6"; }
save_all burst 7:16 --wait none --keep-going
# (the burst's steps end: committed, or aborted on every node at once)
wait_until 20 sh -c "! '$TOP/ckptctl' -s '$(node_sock 0)' status | grep -q 'burst step .*ranks durable'" ||
	fail "burst: steps still undecided: $("$TOP/ckptctl" -s "$(node_sock 0)" status)"
save_all burst 17
all_rc 0 || { show_rc; fail "burst: step 17 after the burst"; }
restore_all burst 17
stop_cluster
pass
