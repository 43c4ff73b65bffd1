# `tests/bench/run --smoke` (tiny sizes) runs end to end: memcpy and fio
# floors, ckptd saves and restore, the loop's round trip under load, the
# torch.save peer when torch is there, the DCP peer when build/venv is,
# the DDP figure (4 ranks: bytes written once as global tensors, 4 times
# as rank-local ones), the memory across nodes (3 daemons under mpirun:
# restores from memory and from a peer), and it ends with one JSON line
# holding every ratio; the incremental figure (a model 9/10 frozen: what
# ckptd sent to the disk per save is the changed bytes, not all of them;
# with the memory tier on too, which then holds one copy of the frozen
# bytes);
# with more ranks and a pool smaller than one save (streaming) too.  No
# timing is judged.
. "$(dirname "$0")/lib.sh"
command -v fio > /dev/null || skip "fio is not installed (make deps)"
[ -x /usr/bin/python3 ] || skip "/usr/bin/python3 is missing"
"$TOP/tests/bench/run" --smoke --dir "$T" --out "$T/out" > "$T/bench.out" 2>&1 ||
	{ tail -30 "$T/bench.out"; fail "tests/bench/run --smoke failed"; }
tail -1 "$T/bench.out" | /usr/bin/python3 -c '
import json, sys
keys = ["stall_vs_memcpy", "first_stall_vs_memcpy", "durable_vs_fio", "restore_vs_fio",
        "cpu_s_per_gb_saved", "cpu_s_per_gb_restored", "torch_stall_over_ckpt_stall",
        "torch_durable_over_ckpt_durable", "rss_over_pool", "loop_rtt_under_load_ms",
        "dcp_async_block_over_ckpt_stall", "ckpt_durable_over_dcp_save",
        "restore_cluster_memory_vs_memcpy", "restore_cluster_memory_vs_disk_read",
        "restore_peer_vs_memcpy", "restore_peer_vs_disk_read",
        "incr_written_over_changed", "incr_durable_vs_fio_changed",
        "incr_tier_written_over_changed", "incr_tier_durable_vs_fio_changed"]
r = json.loads(sys.stdin.read())
missing = [k for k in keys if k not in r]
assert not missing, "missing keys: %s" % missing
for k in keys:     # a number, or null where a peer was skipped (torch absent)
    assert r[k] is None or isinstance(r[k], (int, float)), (k, r[k])
    if (k.startswith("torch") or "dcp" in k or "cluster" in k or "peer" in k) and r[k] is None:
        continue
    # CPU seconds of a tiny restore may round to no clock tick at all
    assert r[k] is not None and (r[k] > 0 or (k.startswith("cpu_") and r[k] == 0)), (k, r[k])
print("ratio line ok:", r)
' || { tail -5 "$T/bench.out"; fail "the last line is not the ratio JSON"; }
[ -s "$T/out/results.json" ] || fail "no results.json"
/usr/bin/python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$T/out/results.json" ||
	fail "results.json is not JSON"
grep -q "^stall_vs_memcpy" "$T/bench.out" || fail "no table"
grep -q "^floor: memcpy memfd->anon, 2 thr" "$T/bench.out" || fail "no memcpy floor line"
grep -q "^ckptd: SAVE round trip under load" "$T/bench.out" || fail "no loop round-trip line"
if [ -x "$TOP/build/venv/bin/python" ]; then
	grep -q "^dcp.async_save (blocking)" "$T/bench.out" || fail "no DCP line"
fi
grep -q "^DDP, 4 ranks holding the same" "$T/bench.out" || fail "no DDP line"
/usr/bin/python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))["ddp"]
# 4 ranks: the rank-local run writes 4 copies, the DDP run one (+ blobs)
assert 3.5 < d["bytes_local_over_ddp"] <= 4.1, d
' "$T/out/results.json" || fail "DDP figure: $(grep DDP "$T/bench.out")"
/usr/bin/python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
for k in "incremental", "incremental_tier":
    d = r[k]
    # bytes, not time: with every file rewritten this would be ~10
    assert 0.9 < d["written_per_save"] / d["changed_bytes"] < 1.5, (k, d)
# the tier on: one copy of the frozen bytes (two whole copies would be 2)
d = r["incremental_tier"]
assert d["tier_held"] / d["bytes_per_save"] < 1.5, d
' "$T/out/results.json" || fail "incremental figure: $(grep -A4 ^Incremental "$T/bench.out")"

# 3 ranks, a 24 MiB pool for 16 MiB saves plus their files' chunks: streams
"$TOP/tests/bench/run" --smoke --no-torch --ranks 3 --pool-mib 24 --dir "$T" \
	--out "$T/out2" > "$T/bench2.out" 2>&1 ||
	{ tail -30 "$T/bench2.out"; fail "tests/bench/run --smoke --pool-mib 24 failed"; }
grep -q "saves stream through it" "$T/bench2.out" || fail "no streaming note"
tail -1 "$T/bench2.out" | grep -q '"stall_vs_memcpy": [0-9]' || fail "no ratio line (streaming)"
pass
