# The object-store tier end to end against a local S3 server (moto, which
# checks every request's SigV4 signature): each committed step is uploaded
# (a shard larger than the part size as a multipart upload), the bucket's
# copy matches the manifest file by file, latest follows, status and the
# metrics count it; then a new ckptd on an empty root restores from the
# bucket alone and says so (CKPT_FROM_REMOTE).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/s3_lib.sh"
s3_start
REMOTE=$(remote_conf '"part_size": "5MiB"')
start_ckptd "$REMOTE" '"metrics_port": 0'

trainer save -j A --mib 16 --steps 1:3 -q || fail "save 1..3"
wait_until 60 s3_steps_is A "iter_000000001 iter_000000002 iter_000000003" ||
	fail "steps on the remote: '$(s3_steps A)'"
s3 check "$S3_PREFIX/A" > "$T/check.out" || fail "remote copy differs: $(cat "$T/check.out")"
s3 ls "$S3_PREFIX/A/iter_000000003/" > "$T/ls.out"
grep -Eq ' [0-9a-f]{32}-[0-9]+$' "$T/ls.out" || fail "no multipart object: $(cat "$T/ls.out")"
s3 get "$S3_PREFIX/A/latest_checkpoint.txt" "$T/latest" || fail "no latest on the remote"
[ "$(cat "$T/latest")" = iter_000000003 ] || fail "remote latest: $(cat "$T/latest")"
grep -q "remote: job A: iter_000000003 uploaded" "$LOG" || fail "no upload line in the log"

wait_until 30 remote_uploaded 3 || fail "ckptd does not count 3 uploads"
ckptctl status --json > "$T/status.json" || fail "ckptctl status"
python3 - "$T/status.json" <<'PY' || fail "status: $(cat "$T/status.json")"
import json, sys
r = json.load(open(sys.argv[1]))["remote"]
assert r["steps_uploaded"] == 3, r
assert r["bytes_uploaded"] >= 3 * 16 << 20, r
assert r["failures"] == 0 and r["queued"] == 0 and r["lag_seconds"] == 0, r
assert "secret" not in json.dumps(r).lower(), r
PY
ckptctl status > "$T/status.txt"
grep -q "remote.*s3://ckpt-test/$S3_PREFIX" "$T/status.txt" || fail "status text: $(cat "$T/status.txt")"

# a new cluster: an empty root, the bucket alone
stop_ckptd || fail "ckptd did not stop"
rm -rf "$ROOT"
start_ckptd "$REMOTE"
out=$(trainer restore -j A --mib 16 --expect 3 2>&1) || fail "restore from the remote: $out"
echo "$out" | grep -q "bit-exact from remote" || fail "not from the remote: $out"
grep -q "remote: job A: iter_000000003 downloaded and verified" "$LOG" || fail "no download line"
verify_latest A
out=$(trainer restore -j A --mib 16 --expect 3 2>&1) || fail "second restore: $out"
echo "$out" | grep -q "from remote" && fail "the second restore went to the remote again"
assert_no_leftovers
pass
