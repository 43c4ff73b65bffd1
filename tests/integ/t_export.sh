# ckptctl export: the global tensors of a 4-rank checkpoint (replicated,
# row, column, 2x2 block, 3,3,2,2) written whole in the Hugging Face layout,
# shards no larger than --max-shard-size, read back with the PyPI
# safetensors package (build/venv) and compared with the global reference;
# rank-local tensors are listed as skipped; a flipped byte stops the export;
# existing files are not overwritten; bad arguments are usage errors.
. "$(dirname "$0")/lib.sh"
PY=$TOP/build/venv/bin/python
[ -x "$PY" ] && "$PY" -c 'import safetensors, numpy' 2>/dev/null ||
	skip "build/venv with safetensors and numpy is missing (make deps)"
G=$TOP/build/tests/gtrainer
start_ckptd '"staging_bytes": "128MiB"'
pids=
for r in 0 1 2 3; do
	"$G" save -s "$SOCK" -j ex -r $r -w 4 --step 10 --local > "$T/out.$r" 2>&1 &
	pids="$pids $!"
done
for p in $pids; do wait $p || fail "save: $(cat "$T"/out.*)"; done
stop_ckptd
D=$ROOT/ex/iter_000000010
ckptctl export "$D" "$T/hf" --max-shard-size 10MB > "$T/export.out" 2>&1 ||
	fail "export: $(cat "$T/export.out")"
cat "$T/export.out"
[ "$(grep -c '^skipped (rank-local, rank [0-3]): model/local$' "$T/export.out")" = 4 ] ||
	fail "rank-local tensors not listed as skipped"
"$PY" - "$T/hf" <<'PY' || fail "the export does not read back as the global reference"
import json, os, sys
import numpy as np
from safetensors import safe_open
d = sys.argv[1]
idx = json.load(open(os.path.join(d, "model.safetensors.index.json")))
wm = idx["weight_map"]
names = ["rep0", "rep1", "rep2", "rep3", "row", "col", "blk", "uneven"]
shapes = {"rep0": (256, 1024), "rep1": (256, 1024), "rep2": (128, 1024), "rep3": (128, 1024),
          "row": (1024, 2048), "col": (2048, 1024), "blk": (1024, 1024), "uneven": (10, 1000)}
assert sorted(wm) == sorted(names), sorted(wm)
files = sorted(set(wm.values()))
n = len(files)
assert n >= 3 and files == ["model-%05d-of-%05d.safetensors" % (k + 1, n) for k in range(n)], files
assert sorted(os.listdir(d)) == sorted(files + ["model.safetensors.index.json"])
M = np.uint64
def ref(t, count, step=10):
    g = np.arange(count, dtype=M)
    with np.errstate(over="ignore"):
        x = (g + M(1)) * M(0x9e3779b97f4a7c15) ^ (M(t) << M(56)) ^ (M(step) * M(0x51ed27))
        x ^= x >> M(29)
        return ((x * M(0xbf58476d1ce4e5b9)) >> M(32)).astype(np.uint32)
total = 0
for f in files:
    p = os.path.join(d, f)
    with safe_open(p, framework="numpy") as s:
        assert s.metadata() == {"format": "pt"}, s.metadata()
        size = 0
        for k in s.keys():
            assert wm[k] == f, (k, f)
            a = s.get_tensor(k)
            assert a.shape == shapes[k], (k, a.shape)
            assert a.dtype == (np.int32 if k == "uneven" else np.float32), (k, a.dtype)
            want = ref(names.index(k), a.size)
            assert np.array_equal(a.reshape(-1).view(np.uint32), want), k
            size += a.nbytes
        total += size
    assert size <= 10 * 1000 * 1000 or len(list(safe_open(p, "numpy").keys())) == 1, (f, size)
assert idx["metadata"]["total_size"] == total, (idx["metadata"], total)
print("export: %d shards, %d bytes, equal to the global reference" % (n, total))
PY
# never overwrites, and a refused export removes nothing that was there
before=$(cd "$T/hf" && ls -l --time-style=+%s.%N | sha256sum)
ckptctl export "$D" "$T/hf" > "$T/again.out" 2>&1 && fail "a second export into the same directory passed"
grep -q "File exists" "$T/again.out" || fail "second export: $(cat "$T/again.out")"
[ "$(cd "$T/hf" && ls -l --time-style=+%s.%N | sha256sum)" = "$before" ] ||
	fail "a refused export changed what was there: $(ls -l "$T/hf")"
# a flipped byte in a piece stops it, naming the chunk
flip_byte "$D/model/rank_00001.safetensors" 300000
ckptctl export "$D" "$T/hf2" > "$T/bad.out" 2>&1 && fail "export of a damaged checkpoint passed"
grep -q "rank_00001.safetensors: chunk 0 .* does not match its CRC32C" "$T/bad.out" ||
	fail "damaged: $(cat "$T/bad.out")"
# and leaves nothing half-written behind (a header without its data, no index)
[ -z "$(ls -A "$T/hf2" 2>/dev/null)" ] || fail "a failed export left: $(ls "$T/hf2")"
# usage
ckptctl export "$D" > /dev/null 2>&1; [ $? = 2 ] || fail "export without OUT_DIR is not a usage error"
ckptctl export "$D" "$T/x" --max-shard-size lots > /dev/null 2>&1; [ $? = 2 ] || fail "bad size accepted"
ckptctl export "$D" "$T/x" --group optim > /dev/null 2>&1; [ $? = 1 ] || fail "unknown group accepted"
pass
