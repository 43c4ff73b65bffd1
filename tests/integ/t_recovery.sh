# Start-up recovery: leftovers (a staging directory that was never
# published, an interrupted prune, latest_checkpoint.txt.tmp, job.json.tmp)
# are removed; a latest pointer that names a broken checkpoint (a truncated
# shard, a missing manifest), a missing one, a garbage one and one naming a
# step that does not exist are each repaired to the newest checkpoint that
# verifies, and the daemon log says so.
. "$(dirname "$0")/lib.sh"
latest_is() { [ "$(latest_of "$1")" = "$2" ]; }
start_ckptd
for j in rec gone junk ahead none; do
	trainer save -j $j --mib 1 --steps 1:3 -q || fail "save $j"
done
stop_ckptd || fail "ckptd did not stop cleanly"

# leftovers
mkdir -p "$ROOT/rec/.iter_000000099.staging-abcdef0123456789abcdef0123456789/model"
echo junk > "$ROOT/rec/.iter_000000099.staging-abcdef0123456789abcdef0123456789/model/rank_00000.safetensors"
cp -r "$ROOT/rec/iter_000000001" "$ROOT/rec/.iter_000000001.staging-pruned"
echo iter_000000002 > "$ROOT/rec/latest_checkpoint.txt.tmp"
echo '{"owner_uid": 0' > "$ROOT/rec/job.json.tmp"
mkdir "$ROOT/junk/.iter_000000004.staging-0123456789abcdef0123456789abcdef"
# broken latest pointers
truncate -s -100 "$ROOT/rec/iter_000000003/optim/rank_00000.safetensors"   # rec: latest 3 truncated
rm "$ROOT/gone/iter_000000003/checkpoint_manifest.json"                   # gone: latest 3 has no manifest
echo "hello world" > "$ROOT/junk/latest_checkpoint.txt"                   # junk: garbage pointer
echo iter_000000007 > "$ROOT/ahead/latest_checkpoint.txt"                 # ahead: names a missing step
rm "$ROOT/none/latest_checkpoint.txt"                                     # none: no pointer at all

restart_ckptd_n
assert_no_leftovers
[ -e "$ROOT/rec/job.json" ] || fail "job.json was removed"
for f in .iter_000000099.staging-abcdef0123456789abcdef0123456789 .iter_000000001.staging-pruned latest_checkpoint.txt.tmp job.json.tmp; do
	grep -q "rec: removed unpublished leftover '$f'" $LOG || fail "no log line for removing $f"
done
latest_is rec iter_000000002 || fail "rec: latest is $(latest_of rec)"
latest_is gone iter_000000002 || fail "gone: latest is $(latest_of gone)"
latest_is junk iter_000000003 || fail "junk: latest is $(latest_of junk)"
latest_is ahead iter_000000003 || fail "ahead: latest is $(latest_of ahead)"
latest_is none iter_000000003 || fail "none: latest is $(latest_of none)"
grep -q "rec: checkpoint iter_000000003 does not verify, skipped: .*optim/rank_00000.safetensors" $LOG ||
	fail "no log line saying why rec's iter 3 was skipped"
grep -q "gone: checkpoint iter_000000003 does not verify, skipped: .*checkpoint_manifest.json" $LOG ||
	fail "no log line saying why gone's iter 3 was skipped"
for j in rec gone junk ahead none; do
	grep -q "$j: latest checkpoint repaired" $LOG || fail "$j: no log line for the repair"
	verify_latest $j
	s=$(latest_of $j); s=$((10#${s#iter_}))
	trainer restore -j $j --mib 1 --expect $s > /dev/null || fail "$j: restore of step $s"
done
grep -h 'latest checkpoint repaired\|latest now\|does not verify' $LOG | sed 's/^/# /'

# a job where nothing verifies any more loses its pointer, not its data
rm "$ROOT/rec/iter_000000001/checkpoint_manifest.json" "$ROOT/rec/iter_000000002/checkpoint_manifest.json"
stop_ckptd
restart_ckptd_n
[ ! -e "$ROOT/rec/latest_checkpoint.txt" ] || fail "rec: latest survives with nothing verifying: $(latest_of rec)"
grep -q "rec: no checkpoint verifies; removed latest_checkpoint.txt" $LOG || fail "no log line for rec"
[ -d "$ROOT/rec/iter_000000001" ] || fail "recovery deleted an unverifiable checkpoint"
# and a restore does not take them for "no checkpoint" (a fresh start):
# EUCLEAN, naming each
out=$(trainer restore -j rec --mib 1 2>&1) && fail "rec: a restore with nothing verifying: $out"
grep -q "job 'rec' has checkpoints, but none verifies" <<< "$out" || fail "rec: $out"
for s in 1 2 3; do
	grep -q "iter_00000000$s " <<< "$out" || fail "rec: iter_$s not named: $out"
done
# the only step this world size could restore is damaged (the others were
# saved by 2 ranks): EUCLEAN too, not "saved by another world size"
trainer save -j mix -r 0 -w 2 --mib 1 --steps 1:2 -q > "$T/mix.0" 2>&1 &
p0=$!
trainer save -j mix -r 1 -w 2 --mib 1 --steps 1:2 -q || fail "mix: rank 1's saves"
wait $p0 || fail "mix: rank 0's saves: $(cat "$T/mix.0")"
trainer save -j mix --mib 1 --steps 3 -q || fail "mix: the 1-rank save"
flip_byte "$ROOT/mix/iter_000000003/model/rank_00000.safetensors"
out=$(trainer restore -j mix --mib 1 2>&1) && fail "mix: a restore of a damaged step: $out"
grep -q "job 'mix' has checkpoints, but none verifies" <<< "$out" || fail "mix: $out"
# and the job carries on
trainer save -j rec --mib 1 --steps 4 -q || fail "save after recovery"
latest_is rec iter_000000004 || fail "rec: latest is $(latest_of rec)"
pass
