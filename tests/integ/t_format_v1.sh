# A checkpoint written by ckpt before manifest format 2 (no chunk
# checksums, no global tensors; tests/fixtures/ckpt_v1, 2 ranks, step 7 of
# `trainer save --mib 0.02`) still verifies and restores bit for bit.
. "$(dirname "$0")/lib.sh"
start_ckptd
cp -r "$TOP/tests/fixtures/ckpt_v1/fix" "$ROOT/fix"
echo "{\"owner_uid\": $(id -u), \"run_id\": \"ac4621efebd2c972d39bf356d38579ac\"}" > "$ROOT/fix/job.json"
grep -q '"format_version":1,' "$ROOT/fix/iter_000000007/checkpoint_manifest.json" ||
	fail "the fixture is not format 1"
ckptctl verify "$ROOT/fix/iter_000000007" > /dev/null || fail "verify"
for r in 0 1; do
	trainer restore -j fix -r $r -w 2 --mib 0.02 --expect 7 || fail "rank $r restore"
done
pass
