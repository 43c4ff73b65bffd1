# The object store failing: through a fault-injecting proxy, requests are
# answered 503, connections dropped, replies held past the request time-out
# and PUT bodies damaged on the way (the server then stores other bytes:
# caught by the ETag check).  Every step still arrives complete and
# matching its manifest; retries are counted; a server that keeps failing
# the manifest's PUT leaves no step visible, and local saves go on.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/s3_lib.sh"
s3_start
fault_proxy 5xx:7 drop:11 slow:13:4 corrupt:5
start_ckptd "$(remote_conf '"part_size": "5MiB"' '"retries": 8')" \
	'"metrics_port": 0'

trainer save -j A --mib 12 --steps 1:3 -q || fail "save 1..3"
wait_until 120 s3_steps_is A "iter_000000001 iter_000000002 iter_000000003" ||
	fail "steps on the remote: '$(s3_steps A)'; proxy: $(tail -5 "$T/proxy.log")"
s3 check "$S3_PREFIX/A" > "$T/check.out" || fail "remote copy differs: $(cat "$T/check.out")"
for f in 5xx drop slow corrupt; do
	grep -q "FAULT $f" "$T/proxy.log" || fail "the proxy injected no '$f' fault"
done
wait_until 30 remote_uploaded 3 || fail "ckptd does not count 3 uploads"
ckptctl status --json > "$T/status.json"
python3 - "$T/status.json" <<'PY' || fail "status: $(cat "$T/status.json")"
import json, sys
r = json.load(open(sys.argv[1]))["remote"]
assert r["steps_uploaded"] == 3 and r["failures"] == 0 and r["retries"] >= 4, r
PY
grep -q "stored other bytes" "$LOG" || true     # retried inside a request

# a server that fails every manifest PUT: the step never shows, saves go on
stop_ckptd || fail "ckptd did not stop"
s3_stop_proxy
fault_proxy deny:checkpoint_manifest.json
write_conf "$(remote_conf '"retries": 1')"
restart_ckptd_n
trainer save -j A --mib 1 --steps 4 -q || fail "a local save while the remote fails"
[ "$(latest_of A)" = iter_000000004 ] || fail "local latest: $(latest_of A)"
wait_until 30 grep -q "upload of iter_000000004 failed" "$LOG" || fail "no failure logged"
s3_steps_is A "iter_000000001 iter_000000002 iter_000000003" ||
	fail "a step without its manifest shows: $(s3_steps A)"
s3 ls "$S3_PREFIX/A/iter_000000004/" | grep -q safetensors ||
	fail "the files of step 4 were not sent (the test would prove nothing)"
ckptctl status > "$T/status.txt"
grep -q "last error.*upload of iter_000000004 failed.*500 InternalError" "$T/status.txt" ||
	fail "status does not say why: $(cat "$T/status.txt")"
pass
