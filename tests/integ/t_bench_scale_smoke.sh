# `tests/bench/scale --smoke` (tiny sizes: 4-256 MiB, at most 4 ranks, up
# to 5,000 tensors, a 32 MiB pool the larger saves stream through) runs end
# to end: every case saves, restores bit-exact, measures its floors, prints
# the growth table and ends with one JSON line whose ratios are finite and
# positive; the work directory is gone afterwards.  No timing is judged.
. "$(dirname "$0")/lib.sh"
command -v fio > /dev/null || skip "fio is not installed (make deps)"
[ -x /usr/bin/python3 ] || skip "/usr/bin/python3 is missing"
mkdir -p "$T/work"
"$TOP/tests/bench/scale" --smoke --dir "$T/work" --out "$T/out" > "$T/scale.out" 2>&1 ||
	{ tail -30 "$T/scale.out"; fail "tests/bench/scale --smoke failed"; }
tail -1 "$T/scale.out" | /usr/bin/python3 -c '
import json, math, sys
r = json.loads(sys.stdin.read())
cases = ["r1", "r4", "r16", "g4", "g8", "g16", "t100", "t20k", "t10k", "t100k"]
keys = ["stall_vs_floor", "durable_vs_fio", "restore_vs_fio", "cpu_s_per_gb_saved",
        "register_us_per_tensor", "rss_over_pool"]
for c in cases:
    for k in keys:
        v = r.get(c + "." + k)
        assert isinstance(v, (int, float)) and math.isfinite(v), (c, k, v)
        # CPU seconds of a tiny save may round to no clock tick at all
        assert v > 0 or (k.startswith("cpu_") and v == 0), (c, k, v)
print("ratio line ok")
' || { tail -5 "$T/scale.out"; fail "the last line is not the ratio JSON"; }
/usr/bin/python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
c = {x["name"]: x for x in d["cases"]}
assert c["g16"]["streams"] and not c["r1"]["streams"], "streaming cases"
assert c["t20k"]["tensors_per_rank"] == 1000, c["t20k"]["tensors_per_rank"]
assert all(x["vm_hwm_bytes"] > 0 for x in c.values())
' "$T/out/results.json" || fail "results.json: $(head -c 300 "$T/out/results.json")"
grep -q "^how each cost grows" "$T/scale.out" || fail "no growth table"
grep -q "^g8.stall_vs_floor" "$T/scale.out" || fail "no target table"
[ -z "$(ls "$T/work")" ] || fail "work directory left behind: $(ls "$T/work")"

# a bad case name is refused, naming the cases
"$TOP/tests/bench/scale" --smoke --only nosuch --dir "$T/work" > "$T/bad.out" 2>&1 &&
	fail "--only nosuch succeeded"
grep -q "no case nosuch (there are r1" "$T/bad.out" || fail "unclear error: $(cat "$T/bad.out")"
pass
