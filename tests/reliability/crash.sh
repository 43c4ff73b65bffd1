#!/bin/bash
# crash.sh - crash-point campaign.  For every failpoint of the save, publish
# and prune sequence (daemon/fail.h), and for its Nth pass, a 2-rank job saves
# steps 1..3 (keep_last 2, so step 3 prunes) with CKPT_FAILPOINT=point:N; ckptd
# dies there (SIGKILL), is restarted without the variable, and the invariant
# is checked: latest is the old or the new step and verifies, no staging
# leftovers, every step a client was told COMMITTED is still there (or pruned
# behind newer ones), both ranks restore bit-exactly.  Then the same with
# strace killing ckptd at its Nth fsync / rename syscall.
#   crash.sh          short: one or two chosen passes of each point
#   crash.sh --long   every pass N = 1.. until the point is not reached
#                     (at most CRASH_MAXN, default 400; strace 60)
. "$(dirname "$0")/rlib.sh"
POINTS="wr.after_write wr.after_fsync publish.before_manifest publish.after_manifest
	publish.after_rename atomic.before_rename publish.after_latest prune.renamed prune.removed"
KEEP=2
runs=0; kills=0
start_ckptd "\"keep_last\": $KEEP" '"chunk_bytes": "64KiB"' '"staging_bytes": "8MiB"'
stop_ckptd

one() {   # how N -> 0 if it killed ckptd, 1 if not reached
	local how=$1 n=$2 job=c$runs rc
	runs=$((runs+1))
	: > "$T/acked.$job"
	case $how in
	fp:*) CKPT_FAILPOINT=${how#fp:}:$n restart_ckptd_n ;;
	strace:*)
		strace -f -qq -o /dev/null -e trace="${how#strace:}" \
			-e inject="${how#strace:}":signal=KILL:when="$n" "$TOP/ckptd" -c "$CONF" >> "$LOG" 2>&1 &
		STRACE_PID=$!
		wait_until 5 eval 'CKPTD_PID=$(pgrep -x -P $STRACE_PID ckptd)' ||
			fail "ckptd did not start under strace"
		local want=$(( $(ready_count) + 1 ))
		wait_until 10 eval '[ $(ready_count) -ge $want ] || ! kill -0 $CKPTD_PID 2>/dev/null' ;;
	esac
	if kill -0 "$CKPTD_PID" 2>/dev/null; then
		run2 "$job" 1:3 --mib 3
		wait_dead 5
	fi
	if kill -0 "$CKPTD_PID" 2>/dev/null; then
		stop_ckptd
		[ -n "${STRACE_PID:-}" ] && wait $STRACE_PID 2>/dev/null
		rc=1
	else
		kill_ckptd; kills=$((kills+1)); rc=0
	fi
	[ -n "${STRACE_PID:-}" ] && wait $STRACE_PID 2>/dev/null
	STRACE_PID=
	restart_ckptd_n
	s=$(check_invariant "$job" $KEEP 3) || { echo "$s"; fail "$how pass $n"; }
	log "$how:$n -> $([ $rc = 0 ] && echo killed || echo 'not reached'), latest $s, acked [$(tr '\n' ' ' < $T/acked.$job)]"
	# the daemon serves the job again
	run2 "$job" 4 --mib 3 || fail "$how:$n: save after restart: $(cat $T/r0.$job $T/r1.$job | tail -2)"
	stop_ckptd
	return $rc
}

for p in $POINTS; do
	if [ $LONG = 1 ]; then ns=$(seq 1 ${CRASH_MAXN:-400})
	else case $p in wr.*) ns="1 4" ;; prune.*) ns=1 ;; *) ns=2 ;; esac; fi
	for n in $ns; do one fp:$p $n || break; done
done
# strace: SIGKILL at the Nth fsync / rename* syscall (per thread counts)
if strace -f -qq -o /dev/null -e inject=fsync:error=EIO:when=1000 true 2>/dev/null; then
	for sc in fsync renameat renameat2; do
		if [ $LONG = 1 ]; then ns=$(seq 1 ${CRASH_MAXN:-60}); else ns=2; fi
		for n in $ns; do one strace:$sc $n || break; done
	done
else
	log "strace cannot inject here; strace part skipped"
fi
echo "crash campaign: $runs runs, $kills kills, invariant held in all"
pass
