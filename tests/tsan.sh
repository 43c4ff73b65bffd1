#!/bin/bash
# tests/tsan.sh (`make tsan`) - the CUDA code and the save pipeline under
# ThreadSanitizer: ckptd, libckpt, the CUDA driver simulator and the test
# trainer built with -fsanitize=thread, then the GPU unit tests, the
# pipeline's (stagers, writers, links and clones) and the memory tier's
# (captures shared across steps; test_memt_keep: the fd store and
# partners), the t_gpu_sim* integration tests and
# t_memory_tier_frozen, _unchanged and _chunks.  Fails on any TSan report (a data race, a lock-order inversion -
# reported even when the deadlock did not happen), whichever process made it.
#
# The build lives in build/tsan, a tree of links to the sources with its
# own build/ and binaries, so the normal build is never rebuilt or
# overwritten (SANITIZE=thread in place would do both).  Tests run there
# with tests/run, whose paths follow the tree they are started from.
#   tests/tsan.sh [PATTERN...]   default: the GPU tests (see TESTS below)
# Environment: TSAN_OPTIONS (appended: halt_on_error=0 to see every report).
set -u
cd "$(dirname "$0")/.." || exit 2
TOP=$PWD
TREE=build/tsan
TESTS=(test_gpu test_client test_cudasim test_pipe test_memt t_gpu_sim t_gpu_fallback
       t_memory_tier_frozen t_memory_tier_unchanged t_memory_tier_chunks)
[ $# -gt 0 ] && TESTS=("$@")

if ! echo 'int main(void) { return 0; }' |
     "${CC:-cc}" -fsanitize=thread -x c - -o /dev/null 2>/dev/null; then
	echo "SKIP: ${CC:-cc} cannot build with -fsanitize=thread (no libtsan)"
	exit 77
fi
mkdir -p "$TREE"
for e in Makefile client daemon proto shm tests configs systemd; do
	[ -e "$e" ] && ln -sfn "$TOP/$e" "$TREE/$e"
done

# Single-node (no Open MPI: its libraries are not instrumented) and -O1 for
# usable stacks.  Integration programs: every tests/integ/*.c.
bins=(ckptd ckptctl libckpt.a cudasim build/tests/test_gpu build/tests/test_client
	build/tests/test_pipe build/tests/test_memt build/tests/test_memt_keep)
for c in tests/integ/*.c; do bins+=("build/tests/$(basename "$c" .c)"); done
t0=$(date +%s)
${MAKE:-make} --no-print-directory -C "$TREE" SANITIZE=thread MPICC= CFLAGS="-O1 -g" \
	"${bins[@]}" || { echo "tsan: the build failed"; exit 1; }
t1=$(date +%s)

REP=$(mktemp -d "${TMPDIR:-/tmp}/ckpt-tsan.XXXXXX") || exit 2
# Reports go to $REP/tsan.<pid> (every process, trainers and ckptd alike);
# the first one ends that process (exit 66), so its test fails there too.
export TSAN_OPTIONS="halt_on_error=1 exitcode=66 second_deadlock_stack=1 log_path=$REP/tsan ${TSAN_OPTIONS:-}"
# ThreadSanitizer needs its shadow memory where it expects it: with a
# kernel's larger mmap randomisation it stops at once ("unexpected memory
# mapping"); running without address randomisation fixes that.
RUN=()
if ! "$TREE/build/tests/test_cudasim" >/dev/null 2>"$REP/probe.err" &&
   grep -q 'unexpected memory mapping' "$REP/probe.err"; then
	RUN=(setarch "$(uname -m)" -R)
	echo "tsan: running without address randomisation (setarch -R)"
fi
rm -f "$REP"/tsan.* "$REP/probe.err"

CKPT_TSAN_TREE=1 "${RUN[@]}" bash "$TREE/tests/run" "${TESTS[@]}"
rc=$?
t2=$(date +%s)
n=$(find "$REP" -name 'tsan.*' | wc -l)
if [ "$n" -gt 0 ]; then
	echo "tsan: $n process(es) reported (below; the first lines of each):"
	for f in "$REP"/tsan.*; do
		echo "--- $f"
		grep -m1 'WARNING: ThreadSanitizer' "$f"
		grep -m1 -A14 'WARNING: ThreadSanitizer' "$f" | tail -n +2 | sed 's/^/  /'
		grep 'SUMMARY' "$f"
	done
	rc=1
fi
echo "tsan: build $((t1 - t0)) s, tests $((t2 - t1)) s; $n report(s)"
[ "$n" = 0 ] && rm -rf "$REP" || echo "tsan: reports kept in $REP"
exit $rc
