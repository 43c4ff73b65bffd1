# tests/run selects groups exactly (unit, fuzz, integ, python) and other
# words by substring; it removes its log directory when everything passed
# and keeps it (and names it) when something failed.  tests/deps.sh on a
# machine that has every package installs nothing.  Runs the runner on a
# fake tree of tests.
. "$(dirname "$0")/lib.sh"
F=$T/tree
mkdir -p "$F/tests/integ" "$F/build/tests" "$F/logs"
cp "$TOP/tests/run" "$F/tests/run"
for u in test_alpha test_unitish; do
	printf '#!/bin/sh\necho "PASS x"; echo "1 passed, 0 failed, 0 skipped"\n' > "$F/build/tests/$u"
	chmod +x "$F/build/tests/$u"
done
echo 'echo ok' > "$F/tests/integ/t_systemd_unit.sh"
echo 'echo ok' > "$F/tests/integ/t_other.sh"
run() { TMPDIR=$F/logs "$F/tests/run" "$@" > $T/out 2>&1; }
ran() { grep -Eq "^(PASS|FAIL) $1\$|^unit $1:" $T/out; }

run unit || fail "tests/run unit: $(cat $T/out)"
ran test_alpha && ran test_unitish || fail "unit: unit tests not run: $(cat $T/out)"
ran t_systemd_unit && fail "unit: an integration test whose name contains 'unit' ran"
ran t_other && fail "unit: an integration test ran"
run integ || fail "tests/run integ: $(cat $T/out)"
ran t_systemd_unit && ran t_other || fail "integ: $(cat $T/out)"
ran test_alpha && fail "integ: a unit test ran"
run sys || fail "tests/run sys"
ran t_systemd_unit || fail "pattern sys: $(cat $T/out)"
ran t_other && fail "pattern sys selected t_other"
ran test_alpha && fail "pattern sys selected a unit test"
run unitish || fail "tests/run unitish"
ran test_unitish && ! ran test_alpha || fail "pattern unitish: $(cat $T/out)"
run || fail "tests/run: $(cat $T/out)"
grep -q '^4 passed, 0 failed, 0 skipped' $T/out || fail "all: $(cat $T/out)"
[ -z "$(ls "$F/logs")" ] || fail "log directory left after a passing run: $(ls "$F/logs")"

# a failure keeps the logs and says where
printf 'echo "the reason"; exit 1\n' > "$F/tests/integ/t_broken.sh"
run integ && fail "a failing test passed"
grep -q "failed: t_broken (logs in $F/logs/ckpt-tests\." $T/out || fail "no log path: $(cat $T/out)"
grep -q "the reason" "$F"/logs/ckpt-tests.*/t_broken.log || fail "the failed test's log is gone"

# deps: nothing to install here, so nothing is run
mkdir -p "$T/bin"
printf '#!/bin/sh\necho "$0 $*" >> %s/called; exit 1\n' "$T" > "$T/bin/apt-get"
cp "$T/bin/apt-get" "$T/bin/sudo"; chmod +x "$T/bin/apt-get" "$T/bin/sudo"
if PATH=$T/bin:$PATH sh "$TOP/tests/deps.sh" > $T/deps.out 2>&1; then
	[ ! -e "$T/called" ] || fail "deps ran $(cat "$T/called") with every package installed"
	[ ! -s $T/deps.out ] || fail "deps printed: $(cat $T/deps.out)"
else
	grep -q "installing" $T/deps.out && skip "this machine lacks packages: $(cat $T/deps.out)"
	fail "deps: $(cat $T/deps.out)"
fi
pass
