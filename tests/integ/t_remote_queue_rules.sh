# One rule for what waits in the upload queue (issue 24, F3 and F4), the
# same when a step commits and when its upload fails: with the bucket
# missing, keep_last 0 (keep all) replaces nothing, so every step goes up
# once the bucket is there; keep_last 2 keeps the newest step and one
# older behind it, and a step `ckptctl push` asked for -- also one already
# queued when pushed -- stays queued, and local keep_last does not prune
# it meanwhile.  An abandoned upload that never wrote an object is not
# called half-uploaded.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/s3_lib.sh"
s3_start

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
# all queued (none uploading) and the bucket's failure seen
settled() { within 30 remote_is "r['queued'] == $1 and 'uploading' not in r and 'NoSuchBucket' in r['last_error']"; }

# keep_last 0: nothing is replaced
s3 rmbucket ckpt-test || fail "cannot remove the test bucket"
start_ckptd "$(remote_conf '"retries": 0')"
for s in 1 2 3; do trainer save -j A --mib 1 --steps $s -q || fail "save A $s"; done
wait_until 30 eval '[ "$(grep -c "job A: upload of iter_000000003 failed.*NoSuchBucket" "$LOG")" -ge 1 ]' ||
	fail "step 3 not tried"
settled 3 || fail "keep_last 0: not all queued: $(ckptctl status --json)"
grep "will not be uploaded" "$LOG" && fail "keep_last 0 replaced a queued step"
s3 mkbucket ckpt-test || fail "cannot make the bucket"
wait_until 90 s3_steps_is A "iter_000000001 iter_000000002 iter_000000003" ||
	fail "keep_last 0: remote: '$(s3_steps A)'"
stop_ckptd || fail "stop"

# keep_last 2, step 1 committed, then pushed, then steps 2..5
rm -rf "$ROOT"
s3_stop; s3_start                   # a fresh server: no bucket to empty
s3 rmbucket ckpt-test || fail "cannot remove the test bucket"
start_ckptd "$(remote_conf '"retries": 0')" '"keep_last": 2'
trainer save -j B --mib 1 --steps 1 -q || fail "save B 1"
wait_until 30 grep -q "job B: upload of iter_000000001 failed.*NoSuchBucket" "$LOG" || fail "step 1 not tried"
ckptctl push --job B --step 1 || fail "push B 1"
for s in 2 3 4 5; do trainer save -j B --mib 1 --steps $s -q || fail "save B $s"; done
wait_until 30 eval '[ "$(grep -c "job B: upload of iter_000000005 failed.*NoSuchBucket" "$LOG")" -ge 1 ]' ||
	fail "step 5 not tried"
settled 3 || fail "keep_last 2: queued: $(ckptctl status --json)"
[ -d "$ROOT/B/iter_000000001" ] || fail "the pushed step 1 was pruned while queued: $(ls "$ROOT/B")"
for s in 1 4 5; do
	grep -q "job B: iter_00000000$s will not be uploaded" "$LOG" && fail "step $s left the queue"
done
s3 mkbucket ckpt-test || fail "cannot make the bucket"
wait_until 90 s3_steps_is B "iter_000000001 iter_000000004 iter_000000005" ||
	fail "keep_last 2: remote: '$(s3_steps B)'"
within 30 remote_is "r['queued'] == 0 and 'uploading' not in r" || fail "status: $(ckptctl status --json)"
grep "half-uploaded" "$LOG" && fail "a step never uploaded called half-uploaded"
stop_ckptd || fail "stop"
pass
