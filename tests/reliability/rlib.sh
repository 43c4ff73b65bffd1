# rlib.sh - shared helpers of the reliability campaigns (tests/reliability/).
# Sources the integration-test helpers (private socket, root, ckptd) and adds:
#   LONG=1 when the campaign runs with --long
#   run2 JOB STEPS [trainer args]   2-rank save; acked steps -> $T/acked.JOB
#   wait_dead SECS                  ckptd exited (a failpoint fired)
#   check_invariant JOB [KEEP]      latest verifies; every COMMITTED-acked step
#                                   is on disk unless KEEP newer ones are;
#                                   latest not older than the newest ack; no
#                                   leftovers; both ranks restore bit-exactly
#   preload SHIM                    an LD_PRELOAD value for ckptd with SHIM
#                                   (ASan's runtime first on a SANITIZE build)
#   ASAN_RUNTIME                    that runtime's path, empty without ASan
. "$(dirname "${BASH_SOURCE[0]}")/../integ/lib.sh"
LONG=0
for a in "$@"; do [ "$a" = --long ] && LONG=1; done
step_of() { echo $((10#${1#iter_})); }
ASAN_RUNTIME=$(ldd "$TOP/ckptd" 2>/dev/null | awk '/libasan/ { print $3 }')
preload() { echo "${ASAN_RUNTIME:+$ASAN_RUNTIME }$1"; }

run2() {   # JOB STEPS [extra trainer args]; RUN2_TOGETHER=1: both ranks
	  # connected before either saves (a rank that connects after its peer
	  # failed and left can only learn of it by the step deadline)
	local job=$1 steps=$2; shift 2
	if [ "${RUN2_TOGETHER:-0}" = 1 ]; then
		local bar; bar=$(mktemp -d "$T/barrier.XXXXXX")
		set -- --barrier "$bar" "$@"
	fi
	trainer save -j "$job" -r 0 -w 2 --steps "$steps" --keep-going "$@" > "$T/r0.$job" 2>&1 &
	local p0=$!
	trainer save -j "$job" -r 1 -w 2 --steps "$steps" --keep-going "$@" > "$T/r1.$job" 2>&1
	local rc1=$?
	wait $p0; local rc0=$?
	cat "$T/r0.$job" "$T/r1.$job" | sed -nE 's/^rank [0-9]+ step ([0-9]+) ok.*/\1/p' |
		sort -un >> "$T/acked.$job"
	return $(( rc0 | rc1 ))
}

wait_dead() { wait_until "$1" eval '! kill -0 $CKPTD_PID 2>/dev/null'; }

check_invariant() {   # JOB [KEEP] [MIB]
	local job=$1 keep=${2:-0} mib=${3:-3} l s a newer
	assert_no_leftovers
	l=$(latest_of "$job")
	if [ -z "$l" ]; then
		[ -s "$T/acked.$job" ] && fail "$job: no latest, yet steps $(tr '\n' ' ' < $T/acked.$job) were acknowledged"
		return 0
	fi
	verify_latest "$job"
	s=$(step_of "$l")
	for a in $(sort -un "$T/acked.$job" 2>/dev/null); do
		[ "$a" -le "$s" ] || fail "$job: step $a was acknowledged COMMITTED but latest is $s"
		[ -d "$ROOT/$job/$(printf 'iter_%09d' "$a")" ] && continue
		newer=$(ls "$ROOT/$job" | grep -c '^iter_')
		[ "$keep" -gt 0 ] && [ "$newer" -ge "$keep" ] && continue
		fail "$job: acknowledged step $a is gone"
	done
	for r in 0 1; do
		trainer restore -j "$job" -r $r -w 2 --mib "$mib" --expect "$s" > "$T/rest.out" 2>&1 ||
			fail "$job: rank $r restore of step $s: $(cat $T/rest.out)"
	done
	echo "$s"
}
