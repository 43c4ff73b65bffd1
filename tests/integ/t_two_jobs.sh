# Two jobs (two ranks each, different sizes and steps) save at the same
# time; each restores exactly its own data, and each manifest names its job.
. "$(dirname "$0")/lib.sh"
start_ckptd '"staging_bytes": "16MiB"'
pids=()
for r in 0 1; do
	trainer save -j jobA -r $r -w 2 --mib 6 --steps 1:6 -q > $T/A$r.out 2>&1 & pids+=($!)
	trainer save -j jobB -r $r -w 2 --mib 9 --steps 101:106 -q > $T/B$r.out 2>&1 & pids+=($!)
done
for p in "${pids[@]}"; do wait $p || fail "a save failed: $(cat $T/[AB]?.out)"; done
[ "$(latest_of jobA)" = iter_000000006 ] || fail "jobA latest is $(latest_of jobA)"
[ "$(latest_of jobB)" = iter_000000106 ] || fail "jobB latest is $(latest_of jobB)"
for r in 0 1; do
	trainer restore -j jobA -r $r -w 2 --mib 6 --expect 6 > /dev/null || fail "jobA rank $r restore"
	trainer restore -j jobB -r $r -w 2 --mib 9 --expect 106 > /dev/null || fail "jobB rank $r restore"
	trainer restore -j jobA -r $r -w 2 --mib 6 --step 3 --expect 3 > /dev/null || fail "jobA rank $r step 3"
	trainer restore -j jobB -r $r -w 2 --mib 9 --step 104 --expect 104 > /dev/null || fail "jobB rank $r step 104"
done
# a job's steps are not the other's: B's sizes do not fit A's tensors
out=$(trainer restore -j jobA -r 0 -w 2 --mib 9 2>&1) && fail "jobA restored with jobB's sizes: $out"
[ -z "$(ls "$ROOT/jobA" | grep 'iter_0000001')" ] || fail "jobB's steps in jobA's directory"
[ -z "$(ls "$ROOT/jobB" | grep -E 'iter_00000000[0-9]$')" ] || fail "jobA's steps in jobB's directory"
python3 - "$ROOT" <<'PY' || fail "a manifest names the wrong job"
import glob, json, os, sys
for job in ("jobA", "jobB"):
    runs = set()
    for m in glob.glob(os.path.join(sys.argv[1], job, "iter_*", "checkpoint_manifest.json")):
        d = json.load(open(m))
        assert d.get("job") == job, (m, d.get("job"))
        runs.add(d.get("run_id"))
    assert len(runs) == 1, runs
PY
for j in jobA jobB; do verify_latest $j; done
out=$(ckptctl list --json) || fail "list"
echo "$out" | python3 -c '
import json, sys
cp = json.load(sys.stdin)["checkpoints"]
a = sorted(c["step"] for c in cp if c["job"] == "jobA")
b = sorted(c["step"] for c in cp if c["job"] == "jobB")
assert a == list(range(1, 7)) and b == list(range(101, 107)), (a, b)
' || fail "ckptctl list: $out"
assert_no_leftovers
pass
