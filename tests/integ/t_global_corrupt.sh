# A resharding restore checks what it reads, and only that: a byte flipped
# in a chunk it reads is caught (that restore fails naming the chunk, and
# every rank's next restore walks back past it: ranks never mix two steps),
# one flipped elsewhere does not block it, and `ckptctl verify` still fails
# that checkpoint.
. "$(dirname "$0")/lib.sh"
G=$TOP/build/tests/gtrainer
start_ckptd '"staging_bytes": "128MiB"'
run_world gc 4 save --step 10 || fail "save 10"
run_world gc 4 save --step 20 || fail "save 20"
D=$ROOT/gc/iter_000000020
# a byte of rank 2's "row" piece, in a chunk that holds no replicated bytes
# (rank 0 of a world of 4 with the saved layout reads only those there)
off=$(python3 - "$D" <<'PY'
import json, sys
m = json.load(open(sys.argv[1] + "/checkpoint_manifest.json"))
path = "model/rank_00002.safetensors"
f = [i for i, x in enumerate(m["files"]) if x["path"] == path][0]
cs = m["files"][f]["chunk_size"]
g = {x["name"]: x for x in m["globals"]}
row = [p for p in g["row"]["pieces"] if p["file"] == f][0]
rep = set()
for k, x in g.items():
    for p in x["pieces"]:
        if k.startswith("rep") and p["file"] == f:
            rep |= set(range(p["begin"] // cs, (p["end"] - 1) // cs + 1))
for off in range(row["begin"], row["end"], 4096):
    if off // cs not in rep and (off - 1) // cs not in rep:
        print(off)
        break
PY
)
[ -n "$off" ] || fail "no chunk of row without replicated bytes"
flip_byte "$D/model/rank_00002.safetensors" "$off"
"$G" restore -s "$SOCK" -j gc -r 0 -w 4 > "$T/outside.out" 2>&1 || fail "restore: $(cat "$T/outside.out")"
grep -q "restored step 20 bit-exact" "$T/outside.out" ||
	fail "a byte outside the ranges read blocked the restore: $(cat "$T/outside.out")"
out=$(ckptctl verify "$D" 2>&1) && fail "verify passed with a flipped byte"
echo "$out" | grep -q "rank_00002.safetensors: xxh3_128 mismatch" || fail "verify said: $out"
# world 1 reads every piece: it reads the flipped byte.  Other ranks may
# already hold step 20 (rank 0 of world 4 above), so it does not walk back
# alone: it fails naming the chunk, and from then on every rank skips 20
"$G" restore -s "$SOCK" -j gc -r 0 -w 1 > "$T/inside.out" 2>&1 &&
	fail "a restore that read a damaged chunk succeeded: $(cat "$T/inside.out")"
grep -q "iter_000000020 is damaged (model/rank_00002.safetensors: chunk [0-9]* (bytes .*) does not match its CRC32C).*restore every rank again" "$T/inside.out" ||
	fail "inside: $(cat "$T/inside.out")"
"$G" restore -s "$SOCK" -j gc -r 0 -w 1 > "$T/again.out" 2>&1 || fail "again: $(cat "$T/again.out")"
grep -q "restored step 10 bit-exact" "$T/again.out" || fail "again: $(cat "$T/again.out")"
grep -q "restore skips iter_000000020: model/rank_00002.safetensors: chunk [0-9]* (bytes .*) does not match its CRC32C" "$LOG" ||
	fail "the log does not say why iter_000000020 was skipped"
# the rank whose reads never touch the damage walks back with the others
"$G" restore -s "$SOCK" -j gc -r 0 -w 4 > "$T/rank0.out" 2>&1 || fail "rank 0: $(cat "$T/rank0.out")"
grep -q "restored step 10 bit-exact" "$T/rank0.out" || fail "rank 0 of world 4: $(cat "$T/rank0.out")"
pass
