# lib.sh - helpers for integration tests: each test sources this, gets a
# private directory and socket, and runs the real ckptd there.
#   start_ckptd [extra JSON config keys...]   e.g. start_ckptd '"keep_last": 2'
#   stop_ckptd [SIGNAL]      kill_ckptd      (SIGKILL)
#   trainer ARGS...          the tests/integ/trainer.c program on our socket
#   ckptctl ARGS...          ckptctl on our socket
#   fail MSG / skip MSG / pass
set -u
TOP=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
T=$(mktemp -d /tmp/ckpt-it.XXXXXX)
SOCK=$T/ckptd.sock
ROOT=$T/root
CONF=$T/ckptd.json
LOG=$T/ckptd.log
CKPTD_PID=
TRAINER=$TOP/build/tests/trainer

cleanup() {
	[ -n "$CKPTD_PID" ] && kill -9 "$CKPTD_PID" 2>/dev/null
	for m in $(awk -v t="$T" '$2 ~ "^"t {print $2}' /proc/mounts | sort -r); do
		umount -l "$m" 2>/dev/null
	done
	[ -z "${KEEP:-}" ] && rm -rf "$T"
}
trap cleanup EXIT

fail() { echo "FAIL: $*"; echo "--- ckptd log:"; tail -30 "$LOG" 2>/dev/null; exit 1; }
skip() { echo "SKIP: $*"; exit 77; }

# For tests that need a second real user: sets AS_NOBODY (a command prefix
# that runs as nobody) and opens $T to it, or skips saying why it cannot.
need_nobody() {
	[ "$(id -u)" = 0 ] || skip "needs root to switch to another uid"
	id nobody > /dev/null 2>&1 || skip "no user 'nobody'"
	AS_NOBODY=(setpriv --reuid=nobody --regid=nogroup --clear-groups)
	"${AS_NOBODY[@]}" true 2> /dev/null || skip "setpriv cannot switch uid here"
	chmod 755 "$T"
}
pass() { echo "ok"; exit 0; }
log()  { echo "# $*"; }

write_conf() {   # extra keys; a key given here replaces the default
	local conf="" kv k d
	local defaults=("\"socket\": \"$SOCK\"" "\"root\": \"$ROOT\""
		'"staging_bytes": "64MiB"' '"chunk_bytes": "1MiB"' '"keep_last": 0'
		'"step_deadline_ms": 20000' '"log_level": "debug"')
	for d in "${defaults[@]}"; do
		k=${d%%:*}
		for kv in "$@"; do [ "${kv%%:*}" = "$k" ] && continue 2; done
		conf="$conf${conf:+, }$d"
	done
	for kv in "$@"; do conf="$conf, $kv"; done
	echo "{$conf}" > "$CONF"
}

start_ckptd() {
	write_conf "$@"
	"$TOP/ckptd" -c "$CONF" >> "$LOG" 2>&1 &
	CKPTD_PID=$!
	for _ in $(seq 100); do
		[ -S "$SOCK" ] && grep -q "ready:" "$LOG" && return 0
		kill -0 "$CKPTD_PID" 2>/dev/null || fail "ckptd exited at start"
		sleep 0.05
	done
	fail "ckptd did not become ready"
}

# restart with the same config (after a kill)
restart_ckptd() {
	"$TOP/ckptd" -c "$CONF" >> "$LOG" 2>&1 &
	CKPTD_PID=$!
	for _ in $(seq 100); do
		[ -S "$SOCK" ] && [ "$(grep -c 'ready:' "$LOG")" -ge "${1:-2}" ] && return 0
		sleep 0.05
	done
	fail "ckptd did not restart"
}

stop_ckptd() {
	kill -"${1:-TERM}" "$CKPTD_PID" 2>/dev/null
	wait "$CKPTD_PID" 2>/dev/null
	local rc=$?
	CKPTD_PID=
	return $rc
}

kill_ckptd() {
	kill -9 "$CKPTD_PID" 2>/dev/null
	wait "$CKPTD_PID" 2>/dev/null
	CKPTD_PID=
}

trainer() { "$TRAINER" "$1" -s "$SOCK" "${@:2}"; }
ckptctl() { "$TOP/ckptctl" -s "$SOCK" "$@"; }

latest_of() { cat "$ROOT/$1/latest_checkpoint.txt" 2>/dev/null; }
# ranks ckptd has prepared for their saves, all jobs (status ranks_ready:
# their predecessors read for incremental saves, memory tier room made)
ranks_ready() {
	ckptctl status --json | python3 -c '
import json, sys
print(sum(j["ranks_ready"] for j in json.load(sys.stdin)["jobs"]))'
}
#   run_world JOB WORLD CMD [ARGS...]   every rank of a world runs gtrainer
#   (global tensors) CMD on socket $(world_sock RANK) ($SOCK unless a test
#   redefines it); output in $T/out.WORLD.RANK; 1 (outputs shown) if any fails
world_sock() { echo "$SOCK"; }
run_world() {
	local job=$1 w=$2 pids= r p rc=0; shift 2
	for r in $(seq 0 $((w - 1))); do
		"$TOP/build/tests/gtrainer" "$1" -s "$(world_sock $r)" -j "$job" -r $r -w $w "${@:2}" \
			> "$T/out.$w.$r" 2>&1 &
		pids="$pids $!"
	done
	for p in $pids; do wait $p || rc=1; done
	[ $rc = 0 ] || cat "$T"/out.$w.*
	return $rc
}
rss_kib() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }

# --- more helpers ------------------------------------------------------
#   probe CMD ARGS...        tests/integ/probe.c on our socket
#   wait_until SECS CMD...   poll (every 50 ms) until CMD succeeds
#   ready_count              how many times ckptd said "ready:" in the log
#   restart_ckptd_n          restart and wait for one more "ready:" line
#   assert_no_leftovers      no staging dirs or temp files under the root
#   assert_alive             ckptd is still running
#   verify_latest JOB        latest names a checkpoint that fully verifies
PROBE=$TOP/build/tests/probe
probe() { "$PROBE" "$1" -s "$SOCK" "${@:2}"; }
wait_until() {
	local n=$(( $1 * 20 )); shift
	for _ in $(seq "$n"); do "$@" && return 0; sleep 0.05; done
	return 1
}
ready_count() { local n; n=$(grep -c 'ready:' "$LOG" 2>/dev/null); echo "${n:-0}"; }
restart_ckptd_n() { restart_ckptd $(( $(ready_count) + 1 )); }
leftovers() { find "$ROOT" \( -name '.iter_*' -o -name '*.tmp' \) 2>/dev/null; }
no_leftovers() { [ -z "$(leftovers)" ]; }
assert_no_leftovers() {   # (a prune or an abort in progress may finish first)
	wait_until 5 no_leftovers || fail "leftovers under the root: $(leftovers)"
}
assert_alive() { kill -0 "$CKPTD_PID" 2>/dev/null || fail "ckptd is not running"; }
verify_latest() {
	local l
	l=$(latest_of "$1") || fail "job $1 has no latest pointer"
	[ -n "$l" ] || fail "job $1: empty latest pointer"
	"$TOP/ckptctl" verify "$ROOT/$1/$l" > "$T/verify.out" 2>&1 ||
		fail "latest $l of job $1 does not verify: $(cat "$T/verify.out")"
}
#   flip_byte FILE [OFFSET]  xor one byte (default: the middle of the file)
flip_byte() {
	python3 - "$1" "${2:-}" <<'PY' || fail "cannot flip a byte in $1"
import os, sys
p = sys.argv[1]
off = int(sys.argv[2]) if sys.argv[2] else os.path.getsize(p) // 2
with open(p, "r+b") as f:
    f.seek(off); b = f.read(1); f.seek(off); f.write(bytes([b[0] ^ 0xFF]))
PY
}

# The memory tier's tests: what it holds apart from its spares, in MiB
# (rounded down); and a restore of STEP that must come from memory,
# bit-exact (the trainer's arguments follow).
kept_bytes() {   # JOB STEP [N]: the bytes of its own each of N nodes' memory
	# copy of it holds (default 1; its "kept in memory" lines, logged just
	# after the commit the trainer saw: waited for)
	local pat="job $1: $(printf iter_%09d "$2") kept in memory"
	wait_until 10 eval '[ "$(grep -c "$pat" "$LOG")" -ge '"${3:-1}"' ]'
	sed -n "s/.*$pat (\([0-9]*\) bytes).*/\1/p" "$LOG"
}
held_mib() {
	ckptctl status --json | python3 -c 'import json, sys
t = json.load(sys.stdin)["memory_tier"]
print((t["held"] - t["spare"]) // 1048576)'
}
restore_from_memory() {   # STEP TRAINER-ARGS...
	local step=$1 out
	shift
	out=$(trainer restore "$@" --expect "$step" 2>&1) || fail "restore of $step: $out"
	grep -q "restored step $step bit-exact from memory" <<< "$out" ||
		fail "step $step was not restored from memory: $out"
}

# ckptd under tests/integ/fdstore_standin.py, a test double for systemd's
# fd store (its log $SL; signal $SP: HUP is `systemctl restart`, USR1 a
# crash), with the config keys given as to write_conf; stopped at exit.
# wait_ready N: its Nth start is ready, and $CKPTD_PID is its pid.
start_standin() {
	SL=$T/standin.log
	write_conf "$@"
	python3 "$TOP/tests/integ/fdstore_standin.py" "$T" -- "$TOP/ckptd" -c "$CONF" >> "$LOG" 2>&1 &
	SP=$!
	trap 'kill -TERM $SP 2>/dev/null; wait $SP 2>/dev/null; cleanup' EXIT
}
wait_ready() {   # N
	wait_until 30 eval '[ "$(ready_count)" -ge '"$1"' ]' || fail "ckptd start $1 not ready"
	CKPTD_PID=$(awk '$1 == "start" { p = $2 } END { print p }' "$SL")
}
