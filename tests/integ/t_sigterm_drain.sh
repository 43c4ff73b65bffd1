# SIGTERM drains: a step in flight when the signal arrives (rank 0 saved,
# rank 1 not yet) still commits once rank 1 saves; new trainers are refused
# while draining; ckptd exits 0.  Then the bound: with a short
# drain_timeout_ms a step that cannot finish is aborted and ckptd exits 1,
# leaving the previous checkpoint as the latest.
. "$(dirname "$0")/lib.sh"
HOLD=$TOP/build/tests/holdsave
[ -x "$HOLD" ] || fail "build/tests/holdsave is missing (make test-bins)"

wait_for() {   # file text [tries of 0.05 s]
	for _ in $(seq "${3:-200}"); do
		grep -q "$2" "$1" 2>/dev/null && return 0
		sleep 0.05
	done
	fail "no '$2' in $1: $(cat "$1" 2>/dev/null)"
}

start_ckptd
"$HOLD" -s "$SOCK" -j drain -r 0 -w 2 -m 8 -t 5 > "$T/r0.out" 2>&1 &
p0=$!
"$HOLD" -s "$SOCK" -j drain -r 1 -w 2 -m 8 -t 5 -g "$T/go" > "$T/r1.out" 2>&1 &
p1=$!
wait_for "$T/r0.out" accepted
wait_for "$T/r1.out" connected
ckptctl status --json > "$T/st.json" || fail "status"
python3 - "$T/st.json" <<'PY' || fail "step 5 is not in flight with one rank saved"
import json, sys
st = json.load(open(sys.argv[1]))
fl = [s for j in st["jobs"] if j["name"] == "drain" for s in j["in_flight"]]
assert len(fl) == 1 and fl[0]["step"] == 5 and fl[0]["ranks_saved"] == 1, fl
PY

kill -TERM "$CKPTD_PID"
wait_for "$LOG" "finishing accepted saves"
kill -0 "$CKPTD_PID" 2>/dev/null || fail "ckptd exited with a save in flight"

# a new trainer is refused while draining ...
if "$HOLD" -s "$SOCK" -j latecomer -r 0 -w 1 -t 1 > "$T/late.out" 2>&1; then
	fail "a new trainer was accepted while draining"
fi
grep -qi "shut" "$T/late.out" || fail "refusal does not say why: $(cat "$T/late.out")"
# ... ckptctl still works and says so
ckptctl status > "$T/st.txt" || fail "status while draining"
grep -q DRAINING "$T/st.txt" || fail "status does not show DRAINING: $(head -1 "$T/st.txt")"
ckptctl status --json | grep -q '"draining": true' || fail "status --json lacks draining"

# rank 1 joins the accepted step: it commits, then ckptd exits 0
touch "$T/go"
wait $p1 || fail "rank 1: $(cat "$T/r1.out")"
wait $p0 || fail "rank 0: $(cat "$T/r0.out")"
grep -q committed "$T/r0.out" || fail "rank 0 not told committed"
for _ in $(seq 100); do kill -0 "$CKPTD_PID" 2>/dev/null || break; sleep 0.05; done
stop_ckptd; rc=$?
[ $rc -eq 0 ] || fail "ckptd exited $rc after draining"
grep -q "drained: every accepted save is finished" "$LOG" || fail "no drained line"
[ "$(latest_of drain)" = "iter_000000005" ] || fail "latest is '$(latest_of drain)'"
ckptctl verify "$ROOT/drain/iter_000000005" > /dev/null || fail "step 5 does not verify"
log "drain with a step in flight: committed, exit 0"

# --- the bound: drain_timeout_ms -----------------------------------------
start_ckptd '"drain_timeout_ms": 1000'
: > "$T/r0.out"; : > "$T/r1.out"; rm -f "$T/go"
"$HOLD" -s "$SOCK" -j drain -r 0 -w 2 -m 1 -t 6 > "$T/r0.out" 2>&1 &
p0=$!
"$HOLD" -s "$SOCK" -j drain -r 1 -w 2 -m 1 -t 6 -g "$T/go" > "$T/r1.out" 2>&1 &
p1=$!
wait_for "$T/r0.out" accepted
wait_for "$T/r1.out" connected
t0=$(date +%s%N)
stop_ckptd; rc=$?
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
[ $rc -eq 1 ] || fail "ckptd exited $rc after the drain timeout (want 1)"
[ $ms -lt 10000 ] || fail "drain took $ms ms with drain_timeout_ms 1000"
grep -q "drain timeout" "$LOG" || fail "no drain timeout line"
wait $p0 && fail "rank 0 saw its aborted save succeed"
grep -qi "shut\|stopped\|cancel\|abort" "$T/r0.out" || fail "rank 0 not told why: $(cat "$T/r0.out")"
kill $p1 2>/dev/null; wait $p1 2>/dev/null
[ "$(latest_of drain)" = "iter_000000005" ] || fail "latest moved to '$(latest_of drain)'"
[ ! -e "$ROOT/drain/iter_000000006" ] || fail "aborted step 6 was published"
log "drain timeout: aborted in ${ms} ms, exit 1, step 5 still latest"
pass
