# A save goes STAGED, then DURABLE, then COMMITTED (event times non-zero and
# in that order), and in a 2-rank job rank 0 is not COMMITTED while rank 1
# has not saved: a COMMITTED wait times out with -EAGAIN, nothing is
# published; once rank 1 saves, both commit.
. "$(dirname "$0")/lib.sh"
start_ckptd

# one rank, a few sizes
step=0
for mib in 0.01 4 16; do
	step=$((step + 1))
	out=$(probe phases -j one -r 0 -w 1 --mib $mib --step $step) ||
		fail "one-rank phases ($mib MiB): $out"
	log "$mib MiB: $out"
	echo "$out" | grep -q '^times staged_us=[1-9]' || fail "no times line: $out"
done

# the trainer's view of the same thing: ok lines with all three phases
trainer save -j tr -r 0 -w 1 --mib 8 --steps 1:3 > $T/tr.out || fail "trainer save"
[ "$(grep -c ' ok: ' $T/tr.out)" = 3 ] || fail "trainer: $(cat $T/tr.out)"

# two ranks: rank 0 is durable but must not be committed before rank 1 saves
probe phases -j two -r 0 -w 2 --mib 4 --step 5 --gate $T/go > $T/r0.out 2>&1 &
p0=$!
wait_until 20 grep -q PENDING $T/r0.out || { cat $T/r0.out; fail "rank 0 never reached PENDING"; }
[ ! -e "$ROOT/two/iter_000000005" ] || fail "step 5 published with one rank of two"
[ ! -e "$ROOT/two/latest_checkpoint.txt" ] || fail "latest written with one rank of two"
out=$(ckptctl status --json) || fail "status"
echo "$out" | python3 -c '
import json, sys
st = json.load(sys.stdin)
j = [j for j in st["jobs"] if j["name"] == "two"][0]
f = j["in_flight"]
assert len(f) == 1 and f[0]["step"] == 5, f
assert f[0]["ranks_saved"] == 1 and f[0]["ranks_durable"] == 1, f
assert j["last_committed_step"] is None, j
' || fail "status does not show step 5 waiting for rank 1: $out"
probe phases -j two -r 1 -w 2 --mib 4 --step 5 > $T/r1.out 2>&1 &
p1=$!
touch $T/go
wait $p1 || fail "rank 1: $(cat $T/r1.out)"
wait $p0 || fail "rank 0: $(cat $T/r0.out)"
log "rank 0: $(tail -1 $T/r0.out)"
log "rank 1: $(tail -1 $T/r1.out)"
[ "$(latest_of two)" = iter_000000005 ] || fail "latest is '$(latest_of two)'"
verify_latest two
assert_no_leftovers
stop_ckptd

# saves that stream through a small pool: the last chunks are staged while
# the first files are being written, and still staged <= durable <= committed
start_ckptd '"staging_bytes": "4MiB"' '"chunk_bytes": "1MiB"'
for i in 1 2 3 4 5 6; do
	out=$(probe phases -j stream -r 0 -w 1 --mib 40 --step $i --groups $((i % 3))) ||
		fail "streaming phases ($((i % 3)) groups): $out"
	log "40 MiB through a 4 MiB pool: $out"
done
# and while the loop thread is kept busy (LIST of a job with hundreds of
# checkpoints reads every manifest), so that it sees the pipeline's notices
# late: the times must still be in order
trainer save -j many --mib 0.01 --steps 1 -q || fail "save of job many"
for i in $(seq 2 400); do cp -r "$ROOT/many/iter_000000001" "$ROOT/many/$(printf iter_%09d $i)"; done
for k in 1 2 3; do ( while [ ! -e $T/stop ] && kill -0 $CKPTD_PID 2>/dev/null; do ckptctl list > /dev/null; done ) & done
for i in 7 8 9 10 11 12; do
	out=$(probe phases -j stream -r 0 -w 1 --mib 40 --step $i --groups $((i % 3)))
	rc=$?
	log "busy loop: $out"
	[ $rc = 0 ] || { touch $T/stop; fail "streaming phases with a busy loop: $out"; }
done
touch $T/stop
pass
