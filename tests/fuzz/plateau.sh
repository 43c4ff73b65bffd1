#!/bin/bash
# plateau.sh - fuzz one target for a while and say whether coverage has
# levelled off: when the last new coverage came, and for how long (and how
# many executions) nothing new turned up since.
#   plateau.sh TARGET SECONDS [BUILD_DIR]
#   plateau.sh -s TARGET [BUILD_DIR]     the summary of the last run's log
# Fuzzes a copy of tests/fuzz/corpus/TARGET (the checked-in corpus changes
# only when someone merges on purpose); crashes go to BUILD/fuzz/artifacts/.
# Last line: "fuzz TARGET: E executions in S s, cov C, ft F, corpus N;
# last new cov at T s, flat for the last P s (X executions); last new ft at U s".
set -u
summary_only=0
[ "${1:-}" = -s ] && { summary_only=1; shift; set -- "$1" 0 "${2:-build}"; }
t=$1 secs=$2 B=${3:-build}
cd "$(dirname "$0")/../.." || exit 1
log=$B/fuzz/$t.log rc=0
if [ $summary_only = 0 ]; then
	bin=$B/fuzz/fuzz_$t
	[ -x "$bin" ] || { echo "plateau: $bin not built (make fuzz-bins)" >&2; exit 2; }
	d=$B/fuzz/corpus_$t
	rm -rf "$d"; mkdir -p "$d" "$B/fuzz/artifacts"
	cp tests/fuzz/corpus/"$t"/* "$d"/
	start=${EPOCHREALTIME/./}
	# stamp every libFuzzer line with the seconds since the start
	"$bin" -max_total_time="$secs" -print_final_stats=1 -timeout=20 -print_funcs=0 \
		-artifact_prefix="$B/fuzz/artifacts/$t-" "$d" 2>&1 |
	while IFS= read -r line; do
		now=${EPOCHREALTIME/./}
		printf '%d.%d %s\n' $(( (now - start) / 1000000 )) $(( (now - start) / 100000 % 10 )) "$line"
	done > "$log"
	rc=${PIPESTATUS[0]}
fi
# "#1234	NEW    cov: 315 ft: 900 corp: 50/2Kb ..." ; "#N DONE cov: ..."
# Plateau = edge coverage (cov) flat; features (ft: edges x hit counts)
# creep up for much longer, so their last gain is shown as well.
awk -v t="$t" -v rc="$rc" '
	$2 ~ /^#[0-9]+$/ && $0 ~ / cov: / {
		n = substr($2, 2) + 0
		for (i = 3; i <= NF; i++) {
			if ($i == "cov:") c = $(i+1) + 0
			if ($i == "ft:")  f = $(i+1) + 0
			if ($i == "corp:") { split($(i+1), a, "/"); corp = a[1] }
		}
		if (c > cov) { covt = $1; covn = n }
		if (f > ft) ftt = $1
		cov = c; ft = f; execs = n; end = $1
	}
	/stat::number_of_executed_units:/ { execs = $NF + 0; end = $1 }
	END {
		if (execs == 0) { print "fuzz " t ": no output (exit " rc ")"; exit 1 }
		printf "fuzz %s: %d executions in %.0f s, cov %d, ft %d, corpus %d; " \
		       "last new cov at %.0f s, flat for the last %.0f s (%d executions); " \
		       "last new ft at %.0f s%s\n",
		       t, execs, end, cov, ft, corp, covt, end - covt, execs - covn, ftt,
		       rc ? " -- FAILED, see the log" : ""
	}' "$log"
[ "$rc" = 0 ] || { grep -m3 -A20 'ERROR\|SUMMARY' "$log" | sed 's/^/  | /' | head -40; exit 1; }
