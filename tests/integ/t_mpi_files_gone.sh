# Multi-node: a rank's durable shard vanishes from the shared staging
# directory before the step can be published (another world's recovery or
# an operator removed it).  The coordinator checks every reported file and
# its size before it publishes: the step fails on every rank with an error
# naming the file, nothing is published, latest stays, nothing is left
# behind, and the next step commits.
. "$(dirname "$0")/mpi_lib.sh"
start_cluster '"coord_deadline_ms": 60000'
save_all mpg 10
all_rc 0 || { show_rc; fail "step 10 failed"; }
pids=()
for r in 0 1 2 3 4 5 6; do
	"$TRAINER" save -s "$(node_sock "$(node_of $r)")" -j mpg -r $r -w 8 --mib 1 \
		--steps 20 > "$T/out.$r" 2>&1 &
	pids[$r]=$!
done
# ranks 0-6 durable on the coordinator: only rank 7 is missing
for _ in $(seq 600); do
	"$TOP/ckptctl" -s "$(node_sock 0)" status --json 2>/dev/null | python3 -c 'import json,sys
s=json.load(sys.stdin).get("cluster", {}).get("steps", [])
sys.exit(0 if [x for x in s if x["job"]=="mpg" and x["step"]==20 and x["ranks_durable"]==7] else 1)' && break
	sleep 0.1
done
shard=$(ls "$ROOT"/mpg/.iter_000000020.staging-*/model/rank_00003.safetensors) ||
	fail "no staging shard of rank 3"
rm -f "$shard"
"$TRAINER" save -s "$(node_sock 3)" -j mpg -r 7 -w 8 --mib 1 --steps 20 > "$T/out.7" 2>&1 &
pids[7]=$!
for r in 0 1 2 3 4 5 6 7; do
	wait "${pids[$r]}" && fail "rank $r: step 20 succeeded without rank 3's shard"
	grep -q "publish failed: file model/rank_00003.safetensors of rank 3 is gone" "$T/out.$r" ||
		fail "rank $r: $(cat "$T/out.$r")"
done
[ ! -e "$ROOT/mpg/iter_000000020" ] || fail "step 20 was published without its files"
[ "$(latest_of mpg)" = "iter_000000010" ] || fail "latest is $(latest_of mpg)"
assert_no_leftovers
save_all mpg 30
all_rc 0 || { show_rc; fail "step 30 failed"; }
[ "$(latest_of mpg)" = "iter_000000030" ] || fail "latest is $(latest_of mpg)"
stop_cluster
pass
