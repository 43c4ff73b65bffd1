# `ckptctl flush` shows progress while it waits: a bar redrawn in place on a
# terminal (run under script(1) for a pty), plain lines when stderr is not
# a terminal, nothing with --json.  The flush waits for a two-rank step
# whose second rank the test releases.
. "$(dirname "$0")/lib.sh"
HOLD=$TOP/build/tests/holdsave
command -v script > /dev/null || skip "script(1) (util-linux) is not installed"

wait_for() {   # file text
	for _ in $(seq 200); do
		grep -q "$2" "$1" 2>/dev/null && return 0
		sleep 0.05
	done
	fail "no '$2' in $1: $(cat "$1" 2>/dev/null)"
}
hold_step() {   # step: rank 0 saves it, rank 1 waits for $T/go.STEP
	"$HOLD" -s "$SOCK" -j fp -r 0 -w 2 -m 8 -t "$1" > "$T/r0.$1" 2>&1 &
	P0=$!
	"$HOLD" -s "$SOCK" -j fp -r 1 -w 2 -m 8 -t "$1" -g "$T/go.$1" > "$T/r1.$1" 2>&1 &
	P1=$!
	wait_for "$T/r0.$1" accepted
	wait_for "$T/r1.$1" connected
}
release() {   # step
	touch "$T/go.$1"
	wait $P0 || fail "rank 0 step $1: $(cat "$T/r0.$1")"
	wait $P1 || fail "rank 1 step $1: $(cat "$T/r1.$1")"
}

start_ckptd

# --- on a terminal -------------------------------------------------------
hold_step 1
script -qfec "TERM=xterm $TOP/ckptctl -s $SOCK flush --timeout 30" "$T/tty.out" > /dev/null 2>&1 < /dev/null &
sp=$!
sleep 1.5      # several STATUS polls with rank 0 written, rank 1 missing
kill -0 $sp 2>/dev/null || fail "flush returned with a step in flight: $(cat "$T/tty.out")"
release 1
wait $sp || fail "flush on a tty failed: $(cat "$T/tty.out")"
python3 - "$T/tty.out" <<'PY' || fail "no progress bar on the terminal: $(cat -v "$T/tty.out")"
import re, sys
raw = open(sys.argv[1], "rb").read().decode("utf-8", "replace")
frames = [f for f in re.split(r"[\r\n]", raw) if f.startswith("flush [")]
assert len(frames) >= 3, "frames: %r" % frames
assert "\r" in raw and "\x1b[K" in raw, "not redrawn in place"
bar = re.compile(r"^flush \[([#.]{30})\]\s+(\d+)%\s+\S+ \S+ / \S+ \S+\s+(\d+)/(\d+) saves")
vals = []
for f in frames:
    m = bar.match(f)
    assert m, "malformed frame %r" % f
    vals.append((int(m.group(2)), int(m.group(3)), int(m.group(4))))
# half the step (rank 0 of 2) is written while rank 1 is held back
assert any(p == 50 and d == 0 and n == 1 for p, d, n in vals), vals
assert vals[-1] == (100, 1, 1), vals[-1]
assert "flushed: 1 committed, 0 failed" in raw
PY
log "tty: bar redrawn in place, 50% while held, 100% at the end"

# --- not a terminal ------------------------------------------------------
hold_step 2
"$TOP/ckptctl" -s "$SOCK" flush --timeout 30 > "$T/out" 2> "$T/err" &
fp=$!
sleep 1.5
release 2
wait $fp || fail "flush failed: $(cat "$T/err")"
grep -q $'\r' "$T/err" && fail "carriage returns without a terminal"
grep -q $'\033' "$T/err" && fail "escape sequences without a terminal"
grep -qx "flush: waiting for 1 save in flight" "$T/err" || fail "no start line: $(cat "$T/err")"
grep -qE '^flush: 50% \(8\.0 MiB of 16\.0 MiB written\), 0 of 1 saves finished$' "$T/err" ||
	fail "no 50% line: $(cat "$T/err")"
tail -1 "$T/err" | grep -qE '^flush: 100% .*1 of 1 saves finished$' || fail "no final line: $(cat "$T/err")"
[ "$(cat "$T/out")" = "flushed: 1 committed, 0 failed" ] || fail "stdout: $(cat "$T/out")"
n=$(wc -l < "$T/err")
[ "$n" -le 6 ] || fail "$n progress lines in ~2 s (want at most one a second)"
log "plain: $n lines"

# --- --json: no progress, one object -------------------------------------
hold_step 3
"$TOP/ckptctl" -s "$SOCK" flush --json --timeout 30 > "$T/out" 2> "$T/err" &
fp=$!
sleep 0.5
release 3
wait $fp || fail "flush --json failed"
[ -s "$T/err" ] && fail "progress with --json: $(cat "$T/err")"
python3 -c 'import json,sys; o=json.load(open(sys.argv[1])); assert o=={"committed":1,"failed":0,"ok":True}, o' "$T/out" ||
	fail "flush --json: $(cat "$T/out")"

# nothing in flight: no progress, returns at once
"$TOP/ckptctl" -s "$SOCK" flush > "$T/out" 2> "$T/err" || fail "idle flush"
[ -s "$T/err" ] && fail "progress for an idle flush: $(cat "$T/err")"
[ "$(cat "$T/out")" = "flushed: 0 committed, 0 failed" ] || fail "idle flush: $(cat "$T/out")"
stop_ckptd || fail "ckptd exit"
pass
