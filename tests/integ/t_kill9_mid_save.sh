# kill -9 of ckptd in the middle of a save, then a restart: the previous
# checkpoint is intact and restorable, no staging leftovers remain, and
# latest names a checkpoint that verifies.  The same at every failpoint of
# the publish sequence (and of pruning): after the restart latest is the old
# or the new step, fully verifying.
. "$(dirname "$0")/lib.sh"
latest_step() { local l; l=$(latest_of "$1"); echo $((10#${l#iter_})); }

start_ckptd '"staging_bytes": "8MiB"'

# 1. in flight, deterministically: rank 0 of 2 is durable, rank 1 never saves
trainer save -j mid -w 1 --mib 4 --steps 1 -q || fail "save 1 (world 1)"
trainer save -j mid2 -r 0 -w 2 --mib 4 --steps 1 -q > /dev/null &
trainer save -j mid2 -r 1 -w 2 --mib 4 --steps 1 -q || fail "save 1 (world 2)"
wait $! || fail "rank 0 save 1"
trainer save -j mid2 -r 0 -w 2 --mib 24 --steps 2 --wait durable -q > $T/r0.out 2>&1 ||
	fail "rank 0 save 2 did not become durable: $(cat $T/r0.out)"
ls -d "$ROOT"/mid2/.iter_000000002.staging-* > /dev/null 2>&1 || fail "no staging dir for step 2"
# 2. and at whatever point a big save has reached when the kill comes
#    (a watcher kills ckptd as soon as step 2's directory appears)
python3 - "$ROOT/mid" "$CKPTD_PID" > $T/watch.out <<'PY' &
import os, signal, sys, time
d, pid = sys.argv[1], int(sys.argv[2])
end = time.time() + 20
while time.time() < end:
    try:
        names = os.listdir(d)
    except FileNotFoundError:
        names = []
    # the published name too: under load the whole save can fall between
    # two looks, and a kill just after the publish is one more point
    if any(n.startswith((".iter_000000002.staging-", "iter_000000002")) for n in names):
        time.sleep(0.01); os.kill(pid, signal.SIGKILL); print("killed"); break
    time.sleep(0.0005)
PY
pw=$!
sleep 0.2
trainer save -j mid -w 1 --mib 32 --steps 2 -q > $T/big.out 2>&1 &
pb=$!
wait $pw
grep -q killed $T/watch.out || fail "the watcher never saw step 2's directory"
wait $pb && log "the big save finished before the kill" || log "big save: $(tail -1 $T/big.out)"
kill_ckptd
restart_ckptd_n
assert_no_leftovers
[ "$(latest_of mid2)" = iter_000000001 ] || fail "mid2: latest is $(latest_of mid2)"
verify_latest mid2
verify_latest mid
log "mid: latest after the kill is $(latest_of mid)"
for r in 0 1; do
	trainer restore -j mid2 -r $r -w 2 --mib 4 --expect 1 > /dev/null || fail "mid2 rank $r restore"
done
s=$(latest_step mid)
trainer restore -j mid --mib $([ $s = 1 ] && echo 4 || echo 32) --expect $s > /dev/null ||
	fail "mid: restore of step $s"
# the daemon serves the step it lost again
trainer save -j mid2 -r 0 -w 2 --mib 4 --steps 2 -q > /dev/null &
trainer save -j mid2 -r 1 -w 2 --mib 4 --steps 2 -q || fail "mid2: save 2 again (rank 1)"
wait $! || fail "mid2: save 2 again (rank 0)"
stop_ckptd

# 3. every failpoint of the publish sequence, on its second pass (the first
#    save of the job commits, the second dies there)
for fp in publish.before_manifest publish.after_manifest publish.after_rename \
	  publish.after_latest prune.renamed; do
	job=fp-${fp//./-}
	if [ $fp = prune.renamed ]; then    # the prune after step 2 dies
		write_conf '"keep_last": 1'
		CKPT_FAILPOINT=$fp:1 restart_ckptd_n
	else
		CKPT_FAILPOINT=$fp:2 restart_ckptd_n
	fi
	trainer save -j $job -r 0 -w 2 --mib 3 --steps 1:2 > $T/fp0.out 2>&1 &
	p0=$!
	trainer save -j $job -r 1 -w 2 --mib 3 --steps 1:2 > $T/fp1.out 2>&1
	wait $p0
	wait_until 10 eval '! kill -0 $CKPTD_PID 2>/dev/null' || fail "$fp: ckptd did not die"
	kill_ckptd
	restart_ckptd_n
	assert_no_leftovers
	verify_latest $job
	s=$(latest_step $job)
	case $fp in
	publish.before_manifest|publish.after_manifest) want="1" ;;
	publish.after_rename|publish.after_latest) want="1 2" ;;
	prune.renamed) want="2" ;;
	esac
	[[ " $want " == *" $s "* ]] || fail "$fp: latest is step $s, want one of: $want"
	case $fp in publish.after_*) [ -d "$ROOT/$job/iter_000000002" ] && [ $s != 2 ] &&
		fail "$fp: iter 2 is on disk but latest is $s" ;; esac
	for r in 0 1; do
		trainer restore -j $job -r $r -w 2 --mib 3 --expect $s > /dev/null ||
			fail "$fp: rank $r restore of step $s"
	done
	log "$fp: latest after restart is step $s"
	stop_ckptd
done
grep -q 'removed unpublished leftover' $LOG || fail "recovery never logged a removed leftover"
pass
