# Multi-node: rank 7 (node 3) never saves step 10.  After coord_deadline_ms
# the coordinator aborts the step on every node: each of the 7 ranks that
# saved gets a timeout error naming rank 7, nothing is published, nothing
# is left behind, and the cluster goes on serving.
. "$(dirname "$0")/mpi_lib.sh"
start_cluster '"coord_deadline_ms": 3000'
pids=()
for r in 0 1 2 3 4 5 6; do
	"$TRAINER" save -s "$(node_sock "$(node_of $r)")" -j mpd -r $r -w 8 --mib 1 \
		--steps 10 > "$T/out.$r" 2>&1 &
	pids[$r]=$!
done
t0=$(date +%s)
for r in 0 1 2 3 4 5 6; do
	wait "${pids[$r]}" && fail "rank $r: step 10 succeeded without rank 7"
	grep -q "rank(s) 7 not durable" "$T/out.$r" || fail "rank $r: $(cat "$T/out.$r")"
done
el=$(( $(date +%s) - t0 ))
[ $el -le 10 ] || fail "the abort took $el s"
[ ! -e "$ROOT/mpd/iter_000000010" ] || fail "step 10 was published"
assert_no_leftovers
save_all mpd 20
all_rc 0 || { show_rc; fail "step 20 failed"; }
[ "$(latest_of mpd)" = "iter_000000020" ] || fail "latest is $(latest_of mpd)"
stop_cluster
pass
