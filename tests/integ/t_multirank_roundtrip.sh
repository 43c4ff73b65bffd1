# Two ranks save several steps with every dtype; both restore the latest
# bit for bit, the checkpoint verifies offline, shards are valid safetensors.
. "$(dirname "$0")/lib.sh"
start_ckptd
trainer save -j mr -r 0 -w 2 --mib 6 --steps 10:30:10 > $T/r0.out &
p0=$!
trainer save -j mr -r 1 -w 2 --mib 6 --steps 10:30:10 > $T/r1.out || fail "rank 1 save"
wait $p0 || fail "rank 0 save"
[ "$(latest_of mr)" = "iter_000000030" ] || fail "latest is $(latest_of mr)"
for r in 0 1; do
	trainer restore -j mr -r $r -w 2 --mib 6 --expect 30 || fail "rank $r restore"
done
trainer restore -j mr -r 1 -w 2 --mib 6 --step 20 --expect 20 || fail "restore of step 20"
ckptctl verify "$ROOT/mr/iter_000000030" || fail "offline verify"
for f in "$ROOT"/mr/iter_000000030/*/rank_*.safetensors; do
	python3 "$TOP/tests/unit/check_safetensors.py" "$f" > /dev/null || fail "not safetensors: $f"
done
n=$(find "$ROOT/mr/iter_000000030" -name '*.safetensors' | wc -l)
[ "$n" = 4 ] || fail "expected 4 shards, found $n"
pass
