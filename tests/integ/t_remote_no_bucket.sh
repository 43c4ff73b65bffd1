# A bucket that fails is a failure to retry, never "nothing there" (issue
# 24): with the bucket missing (404 NoSuchBucket) a committed step stays
# queued, the error is in `ckptctl status` and the metrics, and once the
# bucket exists the step goes up; a step removed here by hand meanwhile
# leaves the queue, saying so.  A restore on an empty root with the bucket
# missing, or refused (403 AccessDenied), fails as such: not "no such
# checkpoint", which tells a trainer to start from scratch.  A 403 on
# uploads is retried and shown the same way.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/s3_lib.sh"
s3_start
s3 rmbucket ckpt-test || fail "cannot remove the test bucket"
MP=$(free_port)
start_ckptd "$(remote_conf '"retries": 0')" "\"metrics_port\": $MP"

# poll for up to SECS of wall time (each try runs ckptctl and python)
within() {
	local end=$((SECONDS + $1)); shift
	until "$@"; do [ $SECONDS -lt $end ] || return 1; sleep 0.2; done
}
# $1: a python expression over r (status' "remote") that must hold
remote_is() {
	ckptctl status --json 2>/dev/null | python3 -c '
import json, sys
r = json.load(sys.stdin).get("remote", {})
sys.exit(0 if eval(sys.argv[1]) else 1)' "$1"
}
metric() {
	python3 - "$MP" "$1" <<'PY'
import sys, urllib.request
body = urllib.request.urlopen("http://127.0.0.1:%s/metrics" % sys.argv[1], timeout=5).read()
for line in body.decode().splitlines():
    if line.split(" ")[0] == sys.argv[2]:
        print(line.split(" ")[1])
PY
}
failed_uploads() { grep -c "upload of iter_000000001 failed.*NoSuchBucket" "$LOG"; }

trainer save -j A --mib 1 --steps 1 -q || fail "save A 1"
trainer save -j G --mib 1 --steps 1 -q || fail "save G 1"
wait_until 30 grep -q "NoSuchBucket" "$LOG" || fail "no bucket error logged"
within 30 remote_is 'r["queued"] == 2 and "NoSuchBucket" in r["last_error"]' ||
	fail "not queued with the error: $(ckptctl status --json)"
ckptctl status > "$T/status.txt"
grep -q "0 steps (.*) uploaded, 2 queued" "$T/status.txt" &&
	grep -q "last error.*NoSuchBucket" "$T/status.txt" || fail "status: $(cat "$T/status.txt")"
[ "$(metric ckptd_remote_queued_steps)" = 2 ] || fail "metrics: queued $(metric ckptd_remote_queued_steps)"
[ "$(metric ckptd_remote_failures_total)" -ge 1 ] || fail "metrics: no failure counted"
# tried again (with backoff), still queued
wait_until 30 eval '[ "$(failed_uploads)" -ge 3 ]' || fail "not retried: $(failed_uploads) failure(s)"
remote_is 'r["queued"] >= 1 and r["lag_seconds"] >= 0' || fail "left the queue: $(ckptctl status --json)"

# a queued step removed here by hand leaves the queue, and the log says so
rm -rf "$ROOT/G/iter_000000001"
wait_until 30 grep -q "remote: job G: iter_000000001 is gone here, not uploaded" "$LOG" ||
	fail "no log of the vanished step"
within 30 remote_is 'r["queued"] + ("uploading" in r) == 1' || fail "G still queued: $(ckptctl status --json)"

# the bucket is made: the step goes up
s3 mkbucket ckpt-test || fail "cannot make the bucket"
within 60 s3_steps_is A iter_000000001 || fail "remote: '$(s3_steps A)'"
within 30 remote_uploaded 1 || fail "ckptd does not count the upload"
s3 check "$S3_PREFIX/A" > "$T/check.out" || fail "remote copy differs: $(cat "$T/check.out")"
remote_is 'r["queued"] == 0 and r["lag_seconds"] == 0' || fail "status after: $(ckptctl status --json)"
stop_ckptd || fail "stop"

# a new node, its bucket missing: the restore fails, not "no checkpoint"
rm -rf "$ROOT"
start_ckptd "$(remote_conf '"retries": 0' | sed 's#s3://ckpt-test/#s3://ckpt-gone/#')"
out=$(trainer restore -j A --mib 1 2>&1) && fail "a restore with no bucket: $out"
echo "$out" | grep -q "NoSuchBucket" || fail "restore error: $out"
echo "$out" | grep -q "no such checkpoint" && fail "a missing bucket reads as no checkpoint: $out"
out=$(ckptctl pull --job A 2>&1) && fail "a pull with no bucket: $out"
echo "$out" | grep -q "NoSuchBucket" || fail "pull error: $out"
stop_ckptd || fail "stop"

# 403: a restore is refused as such; uploads are retried until allowed
rm -rf "$ROOT"
touch "$T/forbid"
fault_proxy "forbid:$T/forbid"
start_ckptd "$(remote_conf '"retries": 0')"
out=$(trainer restore -j A --mib 1 2>&1) && fail "a restore with access denied: $out"
echo "$out" | grep -q "AccessDenied" || fail "restore error: $out"
echo "$out" | grep -q "no such checkpoint" && fail "access denied reads as no checkpoint: $out"
trainer save -j B --mib 1 --steps 1 -q || fail "save B 1"
within 30 remote_is 'r["queued"] == 1 and "AccessDenied" in r["last_error"]' ||
	fail "not queued with the error: $(ckptctl status --json)"
rm "$T/forbid"
within 60 s3_steps_is B iter_000000001 || fail "remote: '$(s3_steps B)'"
within 30 remote_uploaded 1 || fail "ckptd does not count the upload"
pass
