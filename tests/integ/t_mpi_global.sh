# Global tensors across 4 ckptd under mpirun (one node each, shared root):
# 4 ranks, one per node, save replicated, row, column, 2x2 block and 3,3,2,2
# tensors; each replicated tensor is written once, by 4 different ranks on
# 4 nodes; the coordinator's manifest tiles every tensor; worlds of 4
# (other layouts), 2, 3 and 1 restore bit-exact through various nodes; a
# gap in one node's piece fails the save on every rank, naming the tensor.
NODES=4 WORLD=4
. "$(dirname "$0")/mpi_lib.sh"
G=$TOP/build/tests/gtrainer
start_cluster '"staging_bytes": "32MiB"'
world_sock() { node_sock $(( ($1 + 1) % 4 )); }   # rank r through node r+1
run_world mg 4 save --step 10 || fail "save"
[ "$(latest_of mg)" = iter_000000010 ] || fail "latest is $(latest_of mg)"
"$TOP/ckptctl" verify "$ROOT/mg/iter_000000010" > "$T/v.out" 2>&1 || fail "verify: $(cat "$T/v.out")"
python3 - "$ROOT/mg/iter_000000010/checkpoint_manifest.json" <<'PY' || fail "manifest"
import json, sys
m = json.load(open(sys.argv[1]))
g = {x["name"]: x for x in m["globals"]}
assert sorted(g["rep%d" % i]["pieces"][0]["rank"] for i in range(4)) == [0, 1, 2, 3]
assert all(len(g["rep%d" % i]["pieces"]) == 1 for i in range(4))
assert len(g["blk"]["pieces"]) == 4 and len(g["uneven"]["pieces"]) == 4
PY
run_world mg 4 restore --alt || fail "restore into 4 ranks, other layouts"
for w in 2 3 1; do
	run_world mg $w restore --alt || fail "restore into $w ranks"
	[ "$(cat "$T"/out.$w.* | grep -c 'restored step 10 bit-exact')" = "$w" ] ||
		fail "world $w: $(cat "$T"/out.$w.*)"
done
run_world mg 4 save --step 20 --bad gap && fail "a save with a gap succeeded"
for r in 0 1 2 3; do
	grep -q "global tensor model/row: its pieces leave a gap" "$T/out.4.$r" ||
		fail "rank $r: $(cat "$T/out.4.$r")"
done
[ "$(latest_of mg)" = iter_000000010 ] || fail "latest is $(latest_of mg)"
assert_no_leftovers
stop_cluster
pass
