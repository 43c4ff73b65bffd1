# Multi-node: 4 ckptd under mpirun (one socket each = one node), one shared
# root, 8 client ranks spread two per node.  Every save commits everywhere,
# every rank restores bit-exact through its own node and through another,
# the checkpoint lists every node's files, status shows the cluster; a job
# with no rank on the coordinator's node commits too.
. "$(dirname "$0")/mpi_lib.sh"
start_cluster
save_all mpj 10:30:10
all_rc 0 || { show_rc; fail "a rank's save failed"; }
[ "$(latest_of mpj)" = "iter_000000030" ] || fail "latest is $(latest_of mpj)"
restore_all mpj 30
# any node serves any rank from the shared root
"$TRAINER" restore -s "$(node_sock 3)" -j mpj -r 0 -w 8 --mib 2 --step 20 --expect 20 \
	> "$T/x.out" 2>&1 || fail "rank 0 via node 3: $(cat "$T/x.out")"
"$TOP/ckptctl" verify "$ROOT/mpj/iter_000000030" > "$T/v.out" 2>&1 || fail "verify: $(cat "$T/v.out")"
python3 - "$ROOT/mpj/iter_000000030/checkpoint_manifest.json" <<'PY' || fail "manifest"
import json, sys
m = json.load(open(sys.argv[1]))
assert m["world_size"] == 8, m["world_size"]
ranks = {t["rank"] for t in m["tensors"]}
assert ranks == set(range(8)), ranks
PY
for n in 0 1 2 3; do
	"$TOP/ckptctl" -s "$(node_sock $n)" status --json > "$T/st.$n" || fail "status of node $n"
done
python3 - "$T" <<'PY' || fail "cluster status"
import json, sys
for n in range(4):
    c = json.load(open(f"{sys.argv[1]}/st.{n}"))["cluster"]
    assert c["rank"] == n and c["size"] == 4 and c["coordinator"] == 0, c
    assert c["peer_lost"] is False, c
    want = [0, 1, 2, 3] if n == 0 else sorted({0, n})
    assert c["peers_seen"] == want, (n, c["peers_seen"])
PY
# a job none of whose ranks is on the coordinator: node 0 still publishes
for r in 0 1 2; do
	"$TRAINER" save -s "$(node_sock $(( r + 1 )))" -j mpu -r $r -w 3 --mib 1 --steps 5:6 \
		> "$T/u.$r" 2>&1 &
	eval "u$r=\$!"
done
for r in 0 1 2; do eval "wait \$u$r" || fail "mpu rank $r: $(cat "$T/u.$r")"; done
[ "$(latest_of mpu)" = "iter_000000006" ] || fail "latest of mpu is $(latest_of mpu)"
"$TRAINER" restore -s "$(node_sock 0)" -j mpu -r 2 -w 3 --mib 1 --expect 6 > "$T/u.x" 2>&1 ||
	fail "mpu rank 2 via node 0: $(cat "$T/u.x")"
assert_no_leftovers
stop_cluster
pass
