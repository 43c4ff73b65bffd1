# ckptctl against a running daemon: status (text and --json), list (text
# and --json, --job), flush (0 once saves are committed; non-zero when a
# step in flight aborts or does not finish in time), verify of a good
# checkpoint (0), a corrupted one (1 with the reason), a job directory, and
# a missing path; the socket from $CKPT_SOCKET.
. "$(dirname "$0")/lib.sh"
start_ckptd '"step_deadline_ms": 1500'
py() { python3 -c "$1" || fail "${2:-python check}"; }

trainer save -j c1 --mib 2 --steps 1:3 -q || fail "save c1"
trainer save -j c2 -r 0 -w 2 --mib 1 --steps 5 -q > /dev/null &
p=$!
trainer save -j c2 -r 1 -w 2 --mib 1 --steps 5 -q || fail "save c2 rank 1"
wait $p || fail "save c2 rank 0"

# status: jobs with a trainer connected (idle jobs leave status)
hold() {   # job rank world: a connection that stays until the test ends
	sleep 120 2>/dev/null | "$PROBE" idle -s "$SOCK" -j "$1" -r "$2" -w "$3" --secs 120 > $T/hold.$1 2>&1 &
	HOLDERS="${HOLDERS:-} $!"
	wait_until 10 grep -q CONNECTED $T/hold.$1 || fail "probe idle $1: $(cat $T/hold.$1)"
}
hold c1 0 1
hold c2 0 2
out=$(ckptctl status) || fail "status exit $?"
for want in "ckptd 0.1.0" "pid $CKPTD_PID" "pool:" "saves:    4 committed, 0 failed" c1 c2; do
	grep -qF "$want" <<< "$out" || fail "status lacks '$want': $out"
done
ckptctl status --json > $T/st.json || fail "status --json"
python3 -m json.tool $T/st.json > /dev/null || fail "status --json is not JSON"
py "
import json
st = json.load(open('$T/st.json'))
assert st['daemon'] == 'ckptd 0.1.0' and st['pid'] == $CKPTD_PID, st
assert st['pool']['total'] == 64 << 20 and st['pool']['used'] == 0, st['pool']
assert st['saves_committed'] == 4 and st['saves_failed'] == 0, st
assert st['bytes_written'] > 6 << 20, st
jobs = {j['name']: j for j in st['jobs']}
assert jobs['c1']['last_committed_step'] == 3 and jobs['c1']['world_size'] == 1, jobs
assert jobs['c2']['last_committed_step'] == 5 and jobs['c2']['world_size'] == 2, jobs
assert jobs['c1']['owner_uid'] == 0 and not jobs['c1']['in_flight'], jobs
" "status --json contents: $(cat $T/st.json)"
kill $HOLDERS
held_gone() { ckptctl status --json | python3 -c 'import json,sys; sys.exit(any(j["name"]=="c1" for j in json.load(sys.stdin)["jobs"]))'; }
wait_until 10 held_gone || fail "c1 still in status after its trainer left: $(ckptctl status)"

# list
out=$(ckptctl list) || fail "list"
[ "$(grep -c '^c1 ' <<< "$out")" = 3 ] && [ "$(grep -c '^c2 ' <<< "$out")" = 1 ] || fail "list: $out"
grep -E '^c1 +3 +\*' <<< "$out" > /dev/null || fail "list does not mark c1's latest: $out"
ckptctl list --json > $T/list.json || fail "list --json"
py "
import json
cp = json.load(open('$T/list.json'))['checkpoints']
got = sorted((c['job'], c['step'], c['latest']) for c in cp)
assert got == [('c1', 1, False), ('c1', 2, False), ('c1', 3, True), ('c2', 5, True)], got
assert all(c['files'] > 0 and c['bytes'] > 0 for c in cp), cp
" "list --json: $(cat $T/list.json)"
ckptctl list --job c2 --json > $T/list2.json || fail "list --job"
py "
import json
cp = json.load(open('$T/list2.json'))['checkpoints']
assert [c['step'] for c in cp] == [5] and cp[0]['job'] == 'c2', cp
" "list --job c2: $(cat $T/list2.json)"
CKPT_SOCKET=$SOCK "$TOP/ckptctl" list --job c1 > /dev/null || fail "ckptctl with \$CKPT_SOCKET"

# flush: everything committed -> 0
out=$(ckptctl flush 2>&1) || fail "flush with nothing in flight: $out"
trainer save -j c1 --mib 8 --steps 4 --wait staged -q || fail "save 4"
out=$(ckptctl flush --job c1 2>&1) || fail "flush of an accepted save: $out"
[ -d "$ROOT/c1/iter_000000004" ] || fail "flush returned before step 4 was committed"
# a step in flight that aborts (rank 1 never saves; deadline 1.5 s) -> non-zero
trainer save -j c2 -r 0 -w 2 --mib 1 --steps 6 --wait staged -q || fail "c2 step 6 rank 0"
out=$(ckptctl flush --job c2 --timeout 20 2>&1) && fail "flush succeeded although step 6 aborted: $out"
log "flush with an aborted step: $out"
grep -q 'flush: a save failed (committed 0, failed 1)' <<< "$out" || fail "flush does not say a save failed: $out"
# a step that does not finish before the flush timeout -> non-zero
stop_ckptd
start_ckptd '"step_deadline_ms": 20000'
trainer save -j c2 -r 0 -w 2 --mib 1 --steps 7 --wait staged -q || fail "c2 step 7 rank 0"
out=$(ckptctl flush --timeout 1 2>&1) && fail "flush succeeded with step 7 incomplete: $out"
log "flush timing out: $out"
grep -qi 'timed out' <<< "$out" || fail "flush does not say it timed out: $out"

# verify (offline)
ckptctl verify "$ROOT/c1/iter_000000003" > $T/v.out || fail "verify of a good checkpoint: $(cat $T/v.out)"
flip_byte "$ROOT/c1/iter_000000003/optim/rank_00000.safetensors"
out=$(ckptctl verify "$ROOT/c1/iter_000000003" 2>&1)
rc=$?
[ $rc = 1 ] || fail "verify of a corrupted checkpoint exited $rc: $out"
grep -q 'optim/rank_00000.safetensors: xxh3_128 mismatch' <<< "$out" || fail "verify gives no reason: $out"
out=$(ckptctl verify "$ROOT/c1" 2>&1) && fail "verify of a job with a bad checkpoint exited 0: $out"
grep -q 'newest good: step 4' <<< "$out" || fail "job verify: $out"
rm "$ROOT/c2/iter_000000005/checkpoint_manifest.json"
out=$(ckptctl verify "$ROOT/c2/iter_000000005" 2>&1) && fail "verify without a manifest exited 0"
grep -q 'checkpoint_manifest.json' <<< "$out" || fail "verify without a manifest: $out"
out=$(ckptctl verify "$T/nonexistent" 2>&1) && fail "verify of a missing directory exited 0"
"$TOP/ckptctl" verify --json "$ROOT/c1/iter_000000002" | python3 -m json.tool > /dev/null ||
	fail "verify --json"
pass
