# Consecutive steps saved back to back, overlapping in flight, commit in
# any order without latest ever moving backwards: a watcher samples
# latest_checkpoint.txt every millisecond.  (1) two trainers wait only for
# STAGED before changing their tensors and saving the next step; (2) two
# clients fire 20 saves each without waiting at all, rank 1 in reverse
# step order, so steps become complete out of order.
. "$(dirname "$0")/lib.sh"
start_ckptd '"staging_bytes": "16MiB"'
watch_latest() {   # job stopfile -> prints the distinct values seen, fails if one goes back
	python3 - "$ROOT/$1/latest_checkpoint.txt" "$2" <<'PY'
import os, sys, time
path, stop = sys.argv[1], sys.argv[2]
seen, last = [], -1
open(stop + ".ready", "w").close()
while True:
    done = os.path.exists(stop)
    try:
        with open(path) as f:
            v = f.read()
    except FileNotFoundError:
        v = None
    if v:
        if not v.startswith("iter_") or not v.endswith("\n"):
            sys.exit("torn or bad latest pointer: %r" % v)
        s = int(v[5:].strip())
        if s < last:
            sys.exit("latest moved backwards: %d after %d (seen %s)" % (s, last, seen))
        if s != last:
            seen.append(s)
        last = s
    if done:
        break
    time.sleep(0.001)
print("latest went through", seen)
PY
}

mkdir -p "$ROOT/ov"
watch_latest ov $T/stop1 > $T/w1.out 2>&1 &
pw=$!
wait_until 10 test -e $T/stop1.ready || fail "watcher did not start"
trainer save -j ov -r 0 -w 2 --mib 6 --steps 1:20 --wait staged -q > $T/r0.out 2>&1 &
p0=$!
trainer save -j ov -r 1 -w 2 --mib 6 --steps 1:20 --wait staged -q > $T/r1.out 2>&1 || fail "rank 1: $(cat $T/r1.out)"
wait $p0 || fail "rank 0: $(cat $T/r0.out)"
out=$(ckptctl flush --job ov --timeout 30) || fail "flush: $out"
touch $T/stop1
wait $pw || fail "watcher: $(cat $T/w1.out)"
log "staged-only trainers: $(cat $T/w1.out); $out"
[ "$(latest_of ov)" = iter_000000020 ] || fail "latest is $(latest_of ov)"
[ "$(ls -d "$ROOT"/ov/iter_* | wc -l)" = 20 ] || fail "not all 20 steps committed: $(ls $ROOT/ov)"
for r in 0 1; do
	trainer restore -j ov -r $r -w 2 --mib 6 --expect 20 > /dev/null || fail "rank $r restore of 20"
	trainer restore -j ov -r $r -w 2 --mib 6 --step 13 --expect 13 > /dev/null || fail "rank $r restore of 13"
done

mkdir -p "$ROOT/burst"
watch_latest burst $T/stop2 > $T/w2.out 2>&1 &
pw=$!
wait_until 10 test -e $T/stop2.ready || fail "watcher did not start"
probe burst -j burst -r 0 -w 2 --mib 3 --steps 1:20 > $T/b0.out 2>&1 &
p0=$!
probe burst -j burst -r 1 -w 2 --mib 3 --steps 1:20 --reverse > $T/b1.out 2>&1 || fail "burst rank 1: $(cat $T/b1.out)"
wait $p0 || fail "burst rank 0: $(cat $T/b0.out)"
touch $T/stop2
wait $pw || fail "watcher: $(cat $T/w2.out)"
log "burst, rank 1 reversed: $(cat $T/w2.out)"
log "commit order: $(sed -n 's/.*job burst: committed iter_0*\([0-9]*\).*/\1/p' $LOG | xargs)"
[ "$(latest_of burst)" = iter_000000020 ] || fail "burst: latest is $(latest_of burst)"
[ "$(ls -d "$ROOT"/burst/iter_* | wc -l)" = 20 ] || fail "burst: not all 20 steps committed"
for s in 1 7 20; do
	"$TOP/ckptctl" verify "$ROOT/burst/$(printf iter_%09d $s)" > /dev/null || fail "burst: step $s does not verify"
done
assert_no_leftovers
pass
