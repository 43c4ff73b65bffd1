# s3_lib.sh - an S3-compatible server for the remote-tier tests: moto in
# server mode from the test venv (build/venv, `make deps`), on 127.0.0.1 at
# a free port, with signature checking on (a user and key made first), and
# stopped with the test.  Source after lib.sh.
#   s3_start                 moto up, bucket ckpt-test, $S3_CREDS (0600 file)
#   remote_conf [KEYS...]    the "remote" config key for $S3_URL (+ keys)
#   s3 CMD ARGS...           tests/integ/s3tool.py against the server (boto3)
#   s3_steps JOB             complete steps on the remote ("iter_... iter_...")
#   fault_proxy MODE...      start tests/integ/s3_fault.py before moto; sets
#                            $S3_URL to it (see that file for the modes)
PY=$TOP/build/venv/bin/python
S3_PID=
PROXY_PID=
S3_CREDS=$T/s3-credentials
S3_PREFIX=ckpt/test

s3_stop_proxy() {
	[ -n "$PROXY_PID" ] && kill "$PROXY_PID" 2>/dev/null && wait "$PROXY_PID" 2>/dev/null
	PROXY_PID=
	S3_URL=$S3_ENDPOINT
}

s3_stop() {
	[ -n "$PROXY_PID" ] && kill "$PROXY_PID" 2>/dev/null && wait "$PROXY_PID" 2>/dev/null
	[ -n "$S3_PID" ] && kill "$S3_PID" 2>/dev/null && wait "$S3_PID" 2>/dev/null
	PROXY_PID= S3_PID=
}
trap 's3_stop; cleanup' EXIT

free_port() {
	"$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# wait for a TCP port to accept (no request: moto counts them)
wait_http() {
	for _ in $(seq 200); do
		(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
		sleep 0.1
	done
	return 1
}

s3_start() {
	[ -x "$PY" ] || skip "no test venv at build/venv (make deps)"
	"$PY" -c 'import moto.server, boto3' 2>/dev/null || skip "moto[server] is not in build/venv"
	S3_PORT=$(free_port)
	# the first 4 requests (setup) need no signature, every later one does
	INITIAL_NO_AUTH_ACTION_COUNT=4 "$PY" -m moto.server -H 127.0.0.1 -p "$S3_PORT" \
		> "$T/moto.log" 2>&1 &
	S3_PID=$!
	wait_http "$S3_PORT" || fail "moto did not start: $(tail -5 "$T/moto.log")"
	S3_ENDPOINT=http://127.0.0.1:$S3_PORT
	S3_URL=$S3_ENDPOINT
	"$PY" "$TOP/tests/integ/s3tool.py" "$S3_ENDPOINT" setup "$S3_CREDS" ||
		fail "cannot set the S3 server up"
	export S3TOOL_CREDS=$S3_CREDS
}

fault_proxy() {
	local port
	port=$(free_port)
	"$PY" "$TOP/tests/integ/s3_fault.py" "$port" "$S3_PORT" "$@" > "$T/proxy.log" 2>&1 &
	PROXY_PID=$!
	wait_http "$port" || fail "the fault proxy did not start: $(tail -5 "$T/proxy.log")"
	S3_URL=http://127.0.0.1:$port
}

remote_conf() {   # extra keys of the remote object, e.g. '"part_size": "5MiB"'
	local extra=""
	for kv in "$@"; do extra="$extra, $kv"; done
	echo "\"remote\": {\"url\": \"s3://ckpt-test/$S3_PREFIX\", \"endpoint\": \"$S3_URL\", \"credentials_file\": \"$S3_CREDS\", \"request_timeout_ms\": 3000$extra}"
}

# ckptd's status says N steps uploaded (its thread is done with them)
remote_uploaded() {
	ckptctl status --json 2>/dev/null | python3 -c '
import json, sys
r = json.load(sys.stdin).get("remote", {})
sys.exit(0 if r.get("steps_uploaded", 0) >= int(sys.argv[1]) and "uploading" not in r else 1)' "$1"
}

s3() { "$PY" "$TOP/tests/integ/s3tool.py" "$S3_ENDPOINT" "$@"; }
s3_steps() { s3 steps "$S3_PREFIX/$1"; }
s3_steps_is() { [ "$(s3_steps "$1")" = "$2" ]; }
