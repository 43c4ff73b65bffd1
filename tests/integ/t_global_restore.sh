# Global tensors saved by 4 ranks (replicated, rows, columns, 2x2 blocks,
# rows 3,3,2,2) restore into worlds of 4, 2, 3 and 1 ranks with other
# layouts, bit-exact against the global reference (gtrainer checks every
# element).  A resharding restore reads only the chunks that hold the bytes
# it needs.  Strict: a registered global tensor the checkpoint lacks is an
# error naming it; CKPT_PARTIAL restores the rest and reports it.
# Rank-local tensors stay per rank: in another world size they are missing.
. "$(dirname "$0")/lib.sh"
G=$TOP/build/tests/gtrainer
start_ckptd '"staging_bytes": "128MiB"'
run_world gs 4 save --step 10 || fail "save"
for w in 4 2 3 1; do
	run_world gs $w restore --alt || fail "restore into $w ranks"
	run_world gs $w restore || fail "restore into $w ranks, save-like layout"
	grep -h "restored step 10 bit-exact" "$T"/out.$w.* | head -1
	[ "$(cat "$T"/out.$w.* | grep -c 'bit-exact')" = "$w" ] || fail "world $w: $(cat "$T"/out.$w.*)"
done
grep "global piece" "$LOG" | tail -3
# Bytes read (1 MiB checked chunks): no restore reads a chunk twice (never
# more than the checkpoint's 24 MiB, however many rows a column shard
# spans), and with the saved layout (world 4, second round) a rank reads
# its own pieces and the replicated ones, not everything.
python3 - "$LOG" <<'PY' || fail "bytes read"
import re, sys
reads = [(int(m.group(1)), int(m.group(2)), int(m.group(3)), int(m.group(4))) for m in
         (re.search(r"rank (\d+) of (\d+).*read (\d+) bytes in \d+ checked chunks for (\d+)", l)
          for l in open(sys.argv[1])) if m]
assert len(reads) == 2 * (4 + 2 + 3 + 1), reads
total = 24 * 2**20 + 40000
for rank, world, nread, got in reads:
    assert got <= nread <= total, (rank, world, nread, got)
same = [n for r, w, n, g in reads[4:8]]
assert max(same) < total * 0.5, same
print("world 4, saved layout: bytes read per rank", same, "of", total)
PY
# empty pieces: 2 rows over 4 ranks as torch.chunk splits them (ranks 2
# and 3 each hold an empty piece at row 2, each replica 0 of 1), then
# worlds of 3, 2 and 1 (world 3: rank 2's piece is empty)
run_world gt 4 save --step 3 --tail || fail "save with two empty pieces at one offset"
for w in 4 3 2 1; do
	run_world gt $w restore --tail || fail "restore of empty pieces into $w ranks"
done
# strict: a global tensor the checkpoint does not have is named
"$G" restore -s "$SOCK" -j gs -r 0 -w 1 --absent > "$T/absent.out" 2>&1 && fail "strict restore passed"
grep -q "model/absent" "$T/absent.out" || fail "strict: $(cat "$T/absent.out")"
"$G" restore -s "$SOCK" -j gs -r 0 -w 1 --absent --partial > "$T/partial.out" 2>&1 ||
	fail "partial: $(cat "$T/partial.out")"
grep -q "bit-exact.*missing model/absent" "$T/partial.out" || fail "partial: $(cat "$T/partial.out")"
# another global shape is an error, partial or not
for p in "" --partial; do
	"$G" restore -s "$SOCK" -j gs -r 0 -w 1 --bad shape $p > "$T/shape.out" 2>&1 &&
		fail "restore with another global shape passed ($p)"
	grep -q "dtype or global shape differs for global tensor model/row" "$T/shape.out" ||
		fail "shape: $(cat "$T/shape.out")"
done
# rank-local tensors (ckpt_register) of a 2-rank job do not restore into a
# world of 1: not "no checkpoint" (ENOENT) but EINVAL, naming the step and
# the world size that saved it (issue 24)
trainer save -j lw -r 0 -w 2 --mib 0.1 --steps 5 > /dev/null &
p=$!
trainer save -j lw -r 1 -w 2 --mib 0.1 --steps 5 > /dev/null || fail "rank-local save"
wait $p || fail "rank-local save"
trainer restore -j lw -r 0 -w 1 --mib 0.1 > "$T/lw.out" 2>&1 && fail "rank-local restore into 1 rank passed"
grep -q "invalid argument: no checkpoint of job 'lw' can be restored by 1 rank: iter_000000005 saved by 2 ranks, with rank-local tensors" "$T/lw.out" ||
	fail "rank-local: $(cat "$T/lw.out")"
trainer restore -j lw -r 0 -w 1 --mib 0.1 --step 5 > "$T/lw.out" 2>&1 && fail "rank-local restore of step 5 into 1 rank passed"
grep -q "invalid argument: iter_000000005 cannot be restored here: saved by 2 ranks" "$T/lw.out" ||
	fail "rank-local, step 5: $(cat "$T/lw.out")"
pass
