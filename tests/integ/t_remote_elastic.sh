# The object store and a change of world size (attack on issue 24, F2):
# the bucket holds step 1 (saved by 1 rank) and step 2 (2 ranks, rank-
# local tensors).  On an empty root a 1-rank restore passes over step 2
# and downloads step 1 (before: it downloaded step 2 only and failed "does
# not verify"); a 3-rank restore fails with EINVAL naming both steps,
# never ENOENT ("no checkpoint"); nothing that does not fit is published.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/s3_lib.sh"
s3_start
REMOTE=$(remote_conf '"retries": 0')
start_ckptd "$REMOTE"
trainer save -j E -r 0 -w 1 --mib 1 --steps 1 -q || fail "save 1 (1 rank)"
trainer save -j E -r 0 -w 2 --mib 1 --steps 2 -q > $T/s0.out 2>&1 &
p=$!
trainer save -j E -r 1 -w 2 --mib 1 --steps 2 -q || fail "save 2, rank 1"
wait $p || fail "save 2, rank 0: $(cat $T/s0.out)"
wait_until 60 s3_steps_is E "iter_000000001 iter_000000002" || fail "remote: '$(s3_steps E)'"
fresh() { stop_ckptd || fail "stop"; rm -rf "$ROOT"; start_ckptd "$REMOTE"; }

fresh
trainer restore -j E -r 0 -w 1 --mib 1 --expect 1 > $T/r1.out 2>&1 ||
	fail "1 rank did not restore step 1 from the remote: $(cat $T/r1.out)"
grep -q 'bit-exact from remote' $T/r1.out || fail "not from the remote: $(cat $T/r1.out)"
grep -q 'iter_000000002 on the remote is passed over: saved by 2 ranks' $LOG ||
	fail "the journal does not say why step 2 was passed over"
[ ! -e "$ROOT/E/iter_000000002" ] || fail "step 2, which does not fit, was published"

fresh
for r in 0 1 2; do
	trainer restore -j E -r $r -w 3 --mib 1 > $T/w3.$r.out 2>&1 &
	eval "p$r=\$!"
done
for r in 0 1 2; do
	eval "wait \$p$r" && fail "rank $r of 3 restored: $(cat $T/w3.$r.out)"
	grep -q "invalid argument: .*iter_000000002: saved by 2 ranks.*iter_000000001: saved by 1 rank" $T/w3.$r.out ||
		fail "rank $r of 3: $(cat $T/w3.$r.out)"
done
pass
