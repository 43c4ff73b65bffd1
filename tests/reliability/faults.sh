#!/bin/bash
# faults.sh - I/O fault campaign, the SQLite way.  For each kind of fault
# (write -EIO, write -ENOSPC, short write, fsync -EIO, open -ENOSPC,
# ftruncate -EIO, read -EIO) and N = 1, 2, ... ckptd runs with
# CKPT_FAULT=op:N:action (daemon/io.h) while a 2-rank job saves its next step,
# until a save succeeds without the fault firing.  Each run where it fired:
#   - the save failed with a clear error (EIO / ENOSPC named) on both ranks,
#     or it succeeded and restores bit-exactly (a short write is finished);
#   - nothing was published (latest unchanged, no iter dir) and no staging
#     leftovers remain; the daemon still serves: the same step saved again
#     without a fault commits and restores bit-exactly;
#   - fsync faults run under strace: the object whose fsync failed is never
#     fsynced again (a failed fsync is never retried).
# Read faults hit a restore: it fails with EIO or restores an older step
# bit-exactly, never wrong data.  Then a real full disk (tmpfs, 12 MiB).
#   faults.sh          short: N = 1.. up to 6 per kind
#   faults.sh --long   every N until the save succeeds, plus valgrind
#                      leak checks of ckptd over failing saves
. "$(dirname "$0")/rlib.sh"
# each rank must name the fault, the one whose peer failed first too
export RUN2_TOGETHER=1
runs=0; fired_total=0; failed_clean=0; absorbed=0; unknown=0
MAXN=$([ $LONG = 1 ] && echo 200 || echo 6)
start_ckptd '"keep_last": 0' '"chunk_bytes": "64KiB"' '"staging_bytes": "8MiB"' '"msg_timeout_ms": 20000'
stop_ckptd
lines() { wc -l < "$LOG"; }
since() { tail -n +$(( $1 + 1 )) "$LOG"; }

start_with() {   # CKPT_FAULT [wrapper...]
	local spec=$1; shift
	local want=$(( $(ready_count) + 1 ))
	if [ $# -gt 0 ]; then
		CKPT_FAULT=$spec "$@" "$TOP/ckptd" -c "$CONF" >> "$LOG" 2>&1 &
		WRAP_PID=$!
		# by name: strace forks short-lived probes of itself whose command
		# lines also say ckptd
		wait_until 10 eval 'CKPTD_PID=$(pgrep -x -P $WRAP_PID ckptd); [ -n "$CKPTD_PID" ]' ||
			CKPTD_PID=$WRAP_PID
	else
		CKPT_FAULT=$spec "$TOP/ckptd" -c "$CONF" >> "$LOG" 2>&1 &
		CKPTD_PID=$!; WRAP_PID=
	fi
	wait_until 60 eval '[ $(ready_count) -ge $want ]' || fail "ckptd ($spec) did not start"
}
stop_all() {
	stop_ckptd
	[ -n "${WRAP_PID:-}" ] && { wait $WRAP_PID 2>/dev/null; WRAP_PID=; }
	return 0
}

save_kind() {   # op action
	local op=$1 act=$2 job=f-$1-${2#-} n base step mark fired
	start_with ""
	run2 $job 1 --mib 2 || fail "$job: baseline save"
	stop_all
	base=1
	for n in $(seq 1 $MAXN); do
		step=$((base + 1)); runs=$((runs+1))
		mark=$(lines)
		if [ $op = fsync ]; then
			start_with "$op:$n:$act" strace -f -qq -y -s 400 -e trace=fsync,write -o "$T/strace.$n"
		else
			start_with "$op:$n:$act"
		fi
		run2 $job $step --mib 2; local rc=$?
		fired=$(since $mark | grep -c 'injected fault:')
		fired_total=$((fired_total + fired))
		if [ "$fired" = 0 ]; then
			[ $rc = 0 ] || fail "$job N=$n: save failed without a fault: $(tail -2 $T/r0.$job)"
			log "$op:$act: N=$n not reached; the save commits"
			base=$step
			stop_all
			break
		fi
		if [ $rc = 0 ]; then
			absorbed=$((absorbed+1))
			log "$op:$act N=$n: fault absorbed, save committed"
			base=$step
		else
			failed_clean=$((failed_clean+1))
			for r in 0 1; do
				# each rank names the cause, the late one too (step.c)
				grep -qiE 'Input/output error|No space left|EIO|ENOSPC' "$T/r$r.$job" ||
					fail "$job N=$n: rank $r error is not clear: $(tail -1 $T/r$r.$job)"
			done
			if grep -q "outcome unknown after publish" "$T/r0.$job" "$T/r1.$job"; then
				# a failure after the rename (COMMIT_UNKNOWN, commit.h): the step may be
				# visible; latest is the old or the new step and verifies
				case $(latest_of $job) in
				$(printf 'iter_%09d' $base)|$(printf 'iter_%09d' $step)) ;;
				*) fail "$job N=$n: latest is $(latest_of $job) after 'outcome unknown'" ;;
				esac
				unknown=$((unknown + 1))
				[ -e "$ROOT/$job/$(printf 'iter_%09d' $step)" ] && step=$((step + 1))
			else
				[ "$(latest_of $job)" = "$(printf 'iter_%09d' $base)" ] ||
					fail "$job N=$n: latest moved to $(latest_of $job) after a failed save"
				[ -e "$ROOT/$job/$(printf 'iter_%09d' $step)" ] &&
					fail "$job N=$n: the failed step was published"
			fi
			assert_no_leftovers
			assert_alive
			if [ $op = fsync ]; then
				p=$(since $mark | sed -nE "s/.*injected fsync fault on '(.*)'/\1/p" | head -1)
				[ -n "$p" ] || fail "$job N=$n: fsync fault did not name its object"
				# the fault layer's stderr line is in the trace, in order:
				# no fsync of that object may follow it
				sed -n '/injected fsync fault on/,$p' "$T/strace.$n" | grep -F "<$p>" |
					grep -q 'fsync(' && fail "$job N=$n: $p was fsynced again after its fsync failed"
				grep -q 'injected fsync fault on' "$T/strace.$n" ||
					fail "$job N=$n: the fault is not in the strace output"
			fi
			why=$(grep -m1 -oiE 'Input/output error|No space left on device' $T/r0.$job | head -1)
			# the daemon serves: the same step again, without a fault, commits
			run2 $job $step --mib 2 || fail "$job N=$n: save after the fault: $(tail -1 $T/r0.$job)"
			base=$step
			log "$op:$act N=$n: clean failure ($why), next save commits"
		fi
		s=$(check_invariant $job 0 2) || { echo "$s"; fail "$job N=$n"; }
		stop_all
	done
}

restore_read() {   # read faults during restore of a 2-step job
	local job=f-read n r rc
	start_with ""
	run2 $job 1 --mib 2 && run2 $job 2 --mib 2 || fail "$job: baseline saves"
	stop_all
	for n in $(seq 1 $MAXN); do
		runs=$((runs+1)); local mark=$(lines)
		start_with "read:$n:-5"
		for r in 0 1; do
			trainer restore -j $job -r $r -w 2 --mib 2 > "$T/rr.$r" 2>&1; rc=$?
			[ $rc = 3 ] && fail "$job N=$n: rank $r restored WRONG data"
			[ $rc = 0 ] || grep -qiE 'Input/output error|EIO' "$T/rr.$r" ||
				fail "$job N=$n: unclear restore error: $(cat $T/rr.$r)"
		done
		local fired=$(since $mark | grep -c 'injected fault:')
		fired_total=$((fired_total + fired))
		assert_alive
		[ "$fired" = 0 ] && { stop_all; log "read: N=$n not reached"; break; }
		trainer restore -j $job -r 0 -w 2 --mib 2 --expect 2 > /dev/null ||
			fail "$job N=$n: restore after the fault"
		stop_all
		log "read N=$n: restore failed cleanly or fell back, never wrong data"
	done
}

for k in ${FAULT_KINDS:-write:-5 write:-28 write:short fsync:-5 open:-28 ftruncate:-5}; do
	save_kind ${k%%:*} ${k#*:}
done
restore_read

if [ $LONG = 1 ] && command -v valgrind > /dev/null; then
	mark=$(lines)
	start_with "write:3:-5,fsync:4:-5,open:6:-28" valgrind -q --leak-check=full \
		--errors-for-leak-kinds=definite --error-exitcode=99 --log-file="$T/vg.%p"
	for s in 1 2 3 4 5; do run2 vg $s --mib 1 > /dev/null; done
	kill -TERM $CKPTD_PID; wait $WRAP_PID; vrc=$?
	WRAP_PID=; CKPTD_PID=
	cat $T/vg.* 2>/dev/null | head -40
	[ $vrc = 99 ] && fail "valgrind found leaks or errors in ckptd"
	log "valgrind: ckptd exited $vrc after 5 saves with 3 faults; no definite leaks"
fi

# a real full disk: a 12 MiB tmpfs as the root
mkdir -p "$T/full"
if mount -t tmpfs -o size=12m,mode=0700 tmpfs "$T/full" 2>/dev/null; then
	ROOT_SAVE=$ROOT; ROOT=$T/full
	write_conf '"root": "'$T/full'"' '"keep_last": 0' '"chunk_bytes": "64KiB"' '"staging_bytes": "8MiB"'
	start_with ""
	run2 full 1 --mib 1 || fail "full disk: first save"
	run2 full 2 --mib 16 && fail "full disk: a 32 MiB save fit in 12 MiB"
	grep -qi 'No space left' "$T/r0.full" "$T/r1.full" || fail "full disk: no ENOSPC: $(tail -1 $T/r0.full)"
	[ "$(latest_of full)" = iter_000000001 ] || fail "full disk: latest is $(latest_of full)"
	assert_no_leftovers; assert_alive
	run2 full 3 --mib 1 || fail "full disk: save after ENOSPC"
	check_invariant full 0 1 > /dev/null
	stop_all; runs=$((runs+1))
	log "full disk: ENOSPC reported, nothing published, next save commits"
	ROOT=$ROOT_SAVE
else
	log "cannot mount tmpfs; full-disk part skipped"
fi
echo "fault campaign: $runs runs, $fired_total faults injected, $failed_clean clean failures, $absorbed absorbed ($unknown 'outcome unknown' after the rename), 0 wrongly published, 0 leftovers"
pass
