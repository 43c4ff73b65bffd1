# Manifests in the bucket that lie are refused, naming the step and the
# lie: one that names another job, one that names another step, one that
# is not JSON. None is pulled or published, a restore walks back past
# them, and `list --remote` lists them apart as steps that cannot be
# restored ("valid": false with the reason in --json).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/s3_lib.sh"
s3_start
REMOTE=$(remote_conf)
start_ckptd "$REMOTE"
trainer save -j A --mib 1 --steps 1 -q || fail "save"
wait_until 60 s3_steps_is A "iter_000000001" || fail "remote: '$(s3_steps A)'"
wait_until 30 remote_uploaded 1 || fail "ckptd does not count the upload"
P=$S3_PREFIX/A
s3 get "$P/iter_000000001/checkpoint_manifest.json" "$T/m1.json" || fail "get manifest"
forge() {   # STEP JOB MANIFEST-STEP: step's files copied from step 1
	local it; it=$(printf iter_%09d "$1")
	for f in model/rank_00000.safetensors optim/rank_00000.safetensors extra/rank_00000/rng; do
		s3 get "$P/iter_000000001/$f" "$T/f" && s3 put "$P/$it/$f" "$T/f" || fail "copy $f"
	done
	python3 - "$T/m1.json" "$T/m.json" "$2" "$3" <<'PY'
import json, sys
m = json.load(open(sys.argv[1])); m["job"] = sys.argv[3]; m["step"] = int(sys.argv[4])
json.dump(m, open(sys.argv[2], "w"))
PY
	s3 put "$P/$it/checkpoint_manifest.json" "$T/m.json" || fail "put manifest"
}
forge 30 B 30
forge 20 A 21
forge 40 A 40
echo '{"not": "a manifest"' > "$T/bad.json"
s3 put "$P/iter_000000040/checkpoint_manifest.json" "$T/bad.json"

out=$(ckptctl pull --job A --step 30 2>&1) && fail "another job's manifest was pulled: $out"
echo "$out" | grep -q "iter_000000030: its manifest is not valid: it names job 'B'" ||
	fail "job mismatch: $out"
out=$(ckptctl pull --job A --step 20 2>&1) && fail "another step's manifest was pulled: $out"
echo "$out" | grep -q "iter_000000020: its manifest is not valid: it names step 21" ||
	fail "step mismatch: $out"
out=$(ckptctl pull --job A --step 40 2>&1) && fail "a broken manifest was pulled: $out"
echo "$out" | grep -q "iter_000000040: its manifest is not valid: " || fail "not JSON: $out"
ls "$ROOT/A" | grep -Eq 'iter_0000000[234]0' && fail "published: $(ls "$ROOT/A")"
[ -e "$ROOT/B" ] && fail "a job B was made"
assert_no_leftovers

out=$(ckptctl list --remote --job A) || fail "list --remote: $out"
echo "$out" | grep -Eq '^A +1 ' || fail "list --remote: $out"
echo "$out" | grep -Eq '^A +(20|30|40) ' && fail "a lying step is listed as a checkpoint: $out"
echo "$out" | grep -q "job A step 30 on the remote cannot be restored: its manifest is not valid: it names job 'B'" ||
	fail "list --remote does not say step 30 cannot be restored: $out"
ckptctl list --remote --json --job A | python3 -c '
import json, sys
c = {x["step"]: x for x in json.load(sys.stdin)["checkpoints"]}
assert c[1]["valid"] and not any(c[s]["valid"] for s in (20, 30, 40)), c
assert "names step 21" in c[20]["reason"], c' || fail "list --remote --json"

# a restore on a new node walks back past them to step 1
stop_ckptd || fail "stop"
rm -rf "$ROOT"
start_ckptd "$REMOTE"
out=$(trainer restore -j A --mib 1 --expect 1 2>&1) || fail "restore: $out"
echo "$out" | grep -q "from remote" || fail "not from the remote: $out"
pass
