# remote_max_bytes_per_s bounds the upload, and a throttled upload does not
# hold local saves back: a second step commits locally while the first is
# still being uploaded.  (The time bound is a lower one: a slow machine
# cannot make an upload faster, so noise cannot fail it.)
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/s3_lib.sh"
s3_start
start_ckptd "$(remote_conf '"part_size": "5MiB"')" '"remote_max_bytes_per_s": "2MiB"'

t0=$(date +%s.%N)
trainer save -j A --mib 24 --steps 1:1 -q || fail "save 1"
trainer save -j A --mib 24 --steps 2:2 -q || fail "save 2"
[ "$(latest_of A)" = iter_000000002 ] || fail "step 2 not committed locally"
ckptctl status --json > "$T/status.json" || fail "ckptctl status"
python3 - "$T/status.json" <<'PY' || fail "step 1 was not still uploading when step 2 committed: $(cat "$T/status.json")"
import json, sys
r = json.load(open(sys.argv[1]))["remote"]
assert r.get("uploading", {}).get("step") == 1 and r["steps_uploaded"] == 0, r
PY
wait_until 120 remote_uploaded 2 || fail "2 steps not uploaded in 120 s"
t1=$(date +%s.%N)
python3 - "$t0" "$t1" <<'PY' || fail "48 MiB at 2 MiB/s took less than 18 s"
import sys
took = float(sys.argv[2]) - float(sys.argv[1])
print("# 48 MiB uploaded in %.1f s (limit 2 MiB/s: at least 24 s)" % took)
sys.exit(0 if took >= 18 else 1)
PY
s3 check "$S3_PREFIX/A" > "$T/check.out" || fail "remote copy differs: $(cat "$T/check.out")"
pass
