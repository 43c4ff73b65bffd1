#!/bin/sh
# replay.sh - run every built fuzz replay binary over its checked-in corpus
# (part of `make test`; no libFuzzer needed).  Exits non-zero if any replay
# fails, a corpus is missing, or nothing was built.  B is the build dir.
cd "$(dirname "$0")/../.." || exit 1
B=${B:-build}
TIMEOUT=${FUZZ_REPLAY_TIMEOUT:-300}
# the session target checks fds and in-flight steps after every input
export FUZZ_SESSION_CHECK_EVERY=1

run=0
failed=0
for bin in "$B"/fuzz/replay_*; do
	[ -x "$bin" ] || continue
	t=${bin##*/replay_}
	corpus=tests/fuzz/corpus/$t
	run=$((run + 1))
	if [ ! -d "$corpus" ]; then
		echo "FAIL fuzz-replay $t: no corpus in $corpus"
		failed=$((failed + 1))
		continue
	fi
	if command -v timeout >/dev/null 2>&1; then
		out=$(timeout "$TIMEOUT" "$bin" "$corpus" 2>&1)
	else
		out=$("$bin" "$corpus" 2>&1)
	fi
	rc=$?
	if [ "$rc" -eq 0 ]; then
		echo "PASS fuzz-replay $t: ${out##*
}"
	else
		echo "FAIL fuzz-replay $t (exit $rc)"
		printf '%s\n' "$out" | tail -n 20 | sed 's/^/    /'
		failed=$((failed + 1))
	fi
done

if [ "$run" -eq 0 ]; then
	echo "FAIL fuzz-replay: no $B/fuzz/replay_* binaries (build them first)"
	exit 1
fi
[ "$failed" -eq 0 ]
