# Global tensors (ckpt_register_global), 4 ranks on one ckptd: replicated
# tensors are written once, spread over the replicas; sharded ones (rows,
# columns, 2x2 blocks, rows split 3,3,2,2) once per piece.  Bytes on disk
# are the unique bytes plus headers; the manifest's table of globals tiles
# every tensor; the checkpoint verifies.  Bad layouts (a gap, an overlap,
# a disagreeing global shape) fail the save on every rank with the tensor
# named, and publish nothing.  8 ranks holding 4 replicated tensors: the
# ranks with nothing to write are done at once.
. "$(dirname "$0")/lib.sh"
G=$TOP/build/tests/gtrainer
start_ckptd '"staging_bytes": "128MiB"'
save4() {   # step [extra args]: 4 ranks save; exit statuses in $T/rc.R
	local s=$1 pids=; shift
	for r in 0 1 2 3; do
		( "$G" save -s "$SOCK" -j gs -r $r -w 4 --step "$s" "$@" > "$T/out.$r" 2>&1
		  echo $? > "$T/rc.$r" ) &
		pids="$pids $!"
	done
	wait $pids
}
save4 10
for r in 0 1 2 3; do
	[ "$(cat $T/rc.$r)" = 0 ] || fail "rank $r save: $(cat $T/out.$r)"
done
D=$ROOT/gs/iter_000000010
ckptctl verify "$D" > /dev/null || fail "verify"
python3 - "$D" <<'PY' || fail "manifest / bytes on disk"
import json, os, sys
d = sys.argv[1]
m = json.load(open(d + "/checkpoint_manifest.json"))
assert m["format_version"] == 3 and m["tensors"] == [], (m["format_version"], m["tensors"])   # 3: XXH3-128 digests
g = {x["name"]: x for x in m["globals"]}
assert sorted(g) == ["blk", "col", "rep0", "rep1", "rep2", "rep3", "row", "uneven"], sorted(g)
unique = 0
for x in g.values():
    n = 1
    for s in x["shape"]:
        n *= s
    unique += n * 4
# each replicated tensor once (its writer chosen from the piece alone)
assert all(len(g["rep%d" % i]["pieces"]) == 1 for i in range(4))
assert len(g["row"]["pieces"]) == 4 and len(g["blk"]["pieces"]) == 4
assert sorted(p["shape"][0] for p in g["uneven"]["pieces"]) == [2, 2, 3, 3]
blk = sorted((p["offset"], p["shape"]) for p in g["blk"]["pieces"])
assert blk == [([0, 0], [512, 512]), ([0, 512], [512, 512]),
               ([512, 0], [512, 512]), ([512, 512], [512, 512])], blk
disk = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(d)
           for f in fs if f.endswith(".safetensors"))
hdr = disk - unique
print("unique %d bytes, on disk %d (headers %d); 4 copies of rep* would add %d"
      % (unique, disk, hdr, 3 * sum(x["pieces"][0]["end"] - x["pieces"][0]["begin"]
                                    for k, x in g.items() if k.startswith("rep"))))
assert 0 <= hdr <= 4 * 4 * 4096, hdr
PY
for r in 0 1 2 3; do
	python3 "$TOP/tests/unit/check_safetensors.py" "$D/model/rank_0000$r.safetensors" > /dev/null ||
		fail "rank $r's shard is not safetensors"
done
step=20
for bad in gap overlap shape; do
	save4 $step --bad $bad
	for r in 0 1 2 3; do
		[ "$(cat $T/rc.$r)" != 0 ] || fail "$bad: rank $r's save succeeded"
		grep -q "global tensor model/row" "$T/out.$r" ||
			fail "$bad: rank $r was not told which tensor: $(cat $T/out.$r)"
	done
	log "$bad: $(head -1 $T/out.0)"
	[ ! -e "$ROOT/gs/iter_0000000$step" ] || fail "$bad: step $step was published"
	[ "$(latest_of gs)" = iter_000000010 ] || fail "$bad: latest is $(latest_of gs)"
	step=$((step + 10))
done
# 8 ranks, only the 4 replicated tensors: ranks that write nothing at all
# are durable at once; each tensor is written once, the checkpoint restores
pids=
for r in $(seq 0 7); do
	"$G" save -s "$SOCK" -j g8 -r $r -w 8 --step 5 --rep-only > "$T/o8.$r" 2>&1 &
	pids="$pids $!"
done
for p in $pids; do wait $p || fail "8 ranks: $(cat "$T"/o8.*)"; done
n=$(ls "$ROOT/g8/iter_000000005/model" | wc -l)
[ "$n" = 4 ] || fail "8 ranks, 4 replicated tensors: $n shard files"
"$G" restore -s "$SOCK" -j g8 -r 0 -w 1 --rep-only > "$T/o8.x" 2>&1 || fail "restore: $(cat "$T/o8.x")"
assert_no_leftovers
pass
