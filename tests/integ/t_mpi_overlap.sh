# Multi-node: steps overlap (each rank only waits for STAGED), two jobs at
# once; every step commits on every node, flush on each node returns once
# the coordinator's outcomes are in, latest is the newest step everywhere.
. "$(dirname "$0")/mpi_lib.sh"
start_cluster
save_all mpo 10:60:10 --wait staged &
sa=$!
WORLD=4 OUTP=j2. save_all mpo2 1:3
for r in 0 1 2 3; do [ "$(cat "$T/j2.rc.$r")" = 0 ] || fail "mpo2 rank $r: $(cat "$T/j2.out.$r")"; done
wait $sa
for r in $(seq 0 7); do [ "$(cat "$T/rc.$r")" = 0 ] || fail "rank $r: $(cat "$T/out.$r")"; done
for n in 0 1 2 3; do
	timeout 30 "$TOP/ckptctl" -s "$(node_sock $n)" flush --timeout 20 > "$T/fl.$n" 2>&1 ||
		fail "flush on node $n: $(cat "$T/fl.$n")"
done
for s in 10 20 30 40 50 60; do
	[ -e "$ROOT/mpo/$(printf 'iter_%09d' $s)" ] || fail "step $s of mpo is missing"
done
[ "$(latest_of mpo)" = "iter_000000060" ] || fail "latest of mpo is $(latest_of mpo)"
[ "$(latest_of mpo2)" = "iter_000000003" ] || fail "latest of mpo2 is $(latest_of mpo2)"
restore_all mpo 60
assert_no_leftovers
stop_cluster
pass
