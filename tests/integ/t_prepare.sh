# Before a job's first save, ckptd prepares each rank once its registrations
# have settled (prep.c): the layout, and the memory tier's memory for two
# captures per rank, made on the thread pool.  status --json says so per job
# (ranks_ready) and shows the memory (memory_tier.spare); the first save's
# captures take that memory instead of new memory (what the tier holds
# after the saves is what it made before them); when the job's ranks leave,
# that memory goes and the newest step stays; restarted ranks, which have
# their step in memory, get one capture's memory each, round after round.
. "$(dirname "$0")/lib.sh"
start_ckptd '"memory_tier_bytes": "64MiB"'
J=(-j pr -w 2 --mib 4)

st() {   # PY-EXPR over the status JSON (s) and the job pr (j, or None)
	ckptctl status --json | python3 -c '
import json, sys
s = json.load(sys.stdin)
j = next((j for j in s["jobs"] if j["name"] == "pr"), None)
t = s.get("memory_tier", {})
print(eval(sys.argv[1]))' "$1"
}

for r in 0 1; do
	trainer save "${J[@]}" -r $r --steps 1:2 --gate $T/go --linger $T/bye -q > $T/s$r.out 2>&1 &
	eval p$r=$!
done
wait_until 30 eval '[ "$(st "j and j[\"ranks_ready\"]")" = 2 ]' ||
	fail "the ranks were not prepared: $(ckptctl status --json)"
spare=$(st 't["spare"]')
held=$(st 't["held"]')
[ "$(st 't["reserving"]')" = 0 ] || fail "still reserving once ready"
# two captures of ~4 MiB per rank, 2 ranks
[ "$spare" -ge $((16 << 20)) ] && [ "$spare" -le $((20 << 20)) ] ||
	fail "memory made ahead: $spare bytes, not 4 captures of ~4 MiB"
[ "$held" = "$spare" ] || fail "held $held, spare $spare: the tier held nothing else"
ckptctl status | grep -Eq '^  memory: .*ready for the next saves' ||
	fail "status does not show the memory made ahead: $(ckptctl status)"

touch $T/go
wait_until 30 grep -q 'iter_000000002 kept in memory' $LOG || fail "step 2 is not in memory"
# the step held and the memory kept for the next save are the memory made
# ahead (each a page larger: the blob the trainer put after it was made);
# new memory for the captures would be 8 MiB more
after=$(st 't["held"]')
[ "$after" -ge "$held" ] && [ "$after" -le $((held + (1 << 20))) ] ||
	fail "the tier holds $after bytes after the saves, $held before: the captures made new memory"
touch $T/bye
wait $p0 || fail "rank 0: $(cat $T/s0.out)"
wait $p1 || fail "rank 1: $(cat $T/s1.out)"
verify_latest pr

pass
