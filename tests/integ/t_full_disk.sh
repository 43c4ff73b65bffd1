# A full disk: the root on a 24 MiB tmpfs.  A small save commits; a save
# too big for the space left fails cleanly with -ENOSPC reported to the
# client, nothing is published, no staging leftovers, the previous
# checkpoint is still latest and restorable, and the daemon keeps serving.
# Then injected faults (CKPT_FAULT), SQLite style: the Nth write fails with
# -EIO / -ENOSPC, the Nth fsync fails, for N = 1, 2, ... until the save
# succeeds (the manifest and latest writes included: they go through the
# I/O table); every failure gives the client a clear error and publishes
# nothing (a failure after the rename is "outcome unknown", and then the
# checkpoint on disk must verify).  A write that comes back short is
# completed (POSIX short-write semantics): those saves succeed and restore
# bit for bit.
. "$(dirname "$0")/lib.sh"
mkdir -p "$ROOT"
mount -t tmpfs -o size=24m,mode=0700 ckpt-test "$ROOT" 2> /dev/null || skip "cannot mount a tmpfs here"
start_ckptd '"staging_bytes": "8MiB"'

trainer save -j fd --mib 4 --steps 1 -q || fail "small save"
[ "$(latest_of fd)" = iter_000000001 ] || fail "latest is $(latest_of fd)"
out=$(trainer save -j fd --mib 32 --steps 2 2>&1) && fail "a 32 MiB save fit in 24 MiB"
log "big save: $out"
echo "$out" | grep -q 'no space left for the checkpoint' || fail "not -ENOSPC: $out"
assert_no_leftovers
[ ! -e "$ROOT/fd/iter_000000002" ] || fail "step 2 was published"
[ "$(latest_of fd)" = iter_000000001 ] || fail "latest is $(latest_of fd)"
verify_latest fd
trainer restore -j fd --mib 4 --expect 1 > /dev/null || fail "restore of step 1"
df -k "$ROOT" | tail -1 | awk '{ if ($4 < 12 * 1024) exit 1 }' || fail "the failed save left its space used: $(df -k $ROOT | tail -1)"
trainer save -j fd --mib 4 --steps 3 -q || fail "a small save after the full disk"
assert_alive
stop_ckptd

# injected faults: the job exists (no job.json is written during the runs);
# keep_last 2 so that the successful saves do not fill the small disk
write_conf '"staging_bytes": "8MiB"' '"keep_last": 2'
inject() {   # spec step -> 0 failed cleanly, 1 succeeded
	local spec=$1 step=$2 before out
	CKPT_FAULT=$spec restart_ckptd_n
	# after start-up recovery, which decides an earlier "outcome unknown"
	before=$(latest_of fd)
	out=$(trainer save -j fd --mib 3 --steps $step 2>&1)
	local rc=$?
	stop_ckptd
	if [ $rc = 0 ]; then
		grep -q "ok:" <<< "$out" || fail "$spec: $out"
		[ "$(latest_of fd)" = "$(printf iter_%09d $step)" ] || fail "$spec: saved but latest is $(latest_of fd)"
		return 1
	fi
	echo "$out" | grep -q 'trainer\[0\]: save: .*: .\{12,\}' || fail "$spec: unclear error: $out"
	echo "# $spec: $out" >> $T/faults.log
	assert_no_leftovers
	if echo "$out" | grep -q 'outcome unknown'; then
		# renamed but not fully synced: it must verify; recovery decides latest
		[ -d "$ROOT/fd/$(printf iter_%09d $step)" ] || fail "$spec: outcome unknown, nothing there"
		"$TOP/ckptctl" verify "$ROOT/fd/$(printf iter_%09d $step)" > /dev/null || fail "$spec: does not verify"
	else
		[ ! -e "$ROOT/fd/$(printf iter_%09d $step)" ] || fail "$spec: step $step was published"
		[ "$(latest_of fd)" = "$before" ] || fail "$spec: latest moved from $before to $(latest_of fd): $out"
	fi
	return 0
}
step=10
for kind in write:%d:-5 write:%d:-28 fsync:%d:-5; do
	n=1
	while :; do
		[ $n -le 40 ] || fail "$kind: still failing at N=40"
		spec=$(printf "$kind" $n)
		step=$((step + 1))
		inject "$spec" $step || break
		n=$((n + 1))
	done
	log "${kind//%d/N}: the save failed cleanly for N = 1..$((n - 1)), then succeeded"
	[ $n -gt 1 ] || fail "$kind: no fault ever hit the save"
done
# short writes: the daemon writes the rest; the checkpoint must be exact
for n in 1 2 3 4 5; do
	step=$((step + 1))
	CKPT_FAULT=write:$n:short restart_ckptd_n
	out=$(trainer save -j fd --mib 3 --steps $step 2>&1) || fail "write:$n:short: $out"
	trainer restore -j fd --mib 3 --expect $step > /dev/null || fail "write:$n:short: restore"
	stop_ckptd
	verify_latest fd
done
grep -- '-28' $T/faults.log | grep -qv 'no space left' && fail "an -ENOSPC write was not reported as such: $(grep -- -28 $T/faults.log)"
grep 'write:[0-9]*:-5' $T/faults.log | grep -qv 'I/O error' && fail "an -EIO write was not reported as such"
# the manifest and latest pointer are written through the I/O table too:
# injected write and fsync faults reach them (the first fails the publish,
# the second comes after the rename: outcome unknown)
for f in checkpoint_manifest.json latest_checkpoint.txt; do
	grep 'write:[0-9]*:-5' $T/faults.log | grep -q "$f" ||
		fail "no injected write fault reached $f"
	grep 'fsync:[0-9]*:-5' $T/faults.log | grep -q "$f" ||
		fail "no injected fsync fault reached $f"
done
cat $T/faults.log
restart_ckptd_n
verify_latest fd
trainer restore -j fd --mib 3 --expect $((10#$(latest_of fd | sed 's/iter_//'))) > /dev/null || fail "final restore"
pass
