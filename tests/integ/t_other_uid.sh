# A job belongs to the uid that created it: another uid (nobody) is refused
# with -EPERM and a message, for saving, restoring and pruning, whether the
# job is active in the daemon or only on disk; `ckptctl list` as nobody does
# not show root's job.  nobody's own job works, and root may use any job.
. "$(dirname "$0")/lib.sh"
need_nobody
start_ckptd '"socket_mode": "0666"'
nb_trainer() { "${AS_NOBODY[@]}" "$TRAINER" "$1" -s "$SOCK" "${@:2}"; }
nb_ctl() { "${AS_NOBODY[@]}" "$TOP/ckptctl" -s "$SOCK" "$@"; }

trainer save -j rootjob --mib 1 --steps 1 -q || fail "root's save"
check_refused() {   # what
	for cmd in "save --steps 2" "restore"; do
		out=$(nb_trainer $cmd -j rootjob --mib 1 2>&1) && fail "$1: nobody could $cmd root's job"
		echo "$out" | grep -q "ckpt_connect: .*not permitted.*job 'rootjob' belongs to another user" ||
			fail "$1: unclear refusal of $cmd: $out"
	done
	log "$1: $out"
	out=$(nb_ctl prune --job rootjob --keep 1 2>&1) && fail "$1: nobody could prune root's job"
	echo "$out" | grep -q "belongs to another user" || fail "$1: prune refusal: $out"
	nb_ctl list > $T/list.out 2>&1 || fail "$1: ckptctl list as nobody: $(cat $T/list.out)"
	grep -q rootjob $T/list.out && fail "$1: nobody's list shows root's job: $(cat $T/list.out)"
	nb_ctl list --json | python3 -c '
import json, sys
cp = json.load(sys.stdin)["checkpoints"]
assert all(c["job"] != "rootjob" for c in cp), cp
' || fail "$1: nobody's list --json shows root's job"
}
check_refused "active job"

# nobody's own job: saves, restores, lists; root sees both jobs
nb_trainer save -j nbjob --mib 1 --steps 3 -q || fail "nobody's own save"
nb_trainer restore -j nbjob --mib 1 --expect 3 > /dev/null || fail "nobody's own restore"
nb_ctl list | grep -q nbjob || fail "nobody's list lacks its own job"
ckptctl list > $T/rootlist.out || fail "root's list"
grep -q rootjob $T/rootlist.out && grep -q nbjob $T/rootlist.out ||
	fail "root's list should show both jobs: $(cat $T/rootlist.out)"
trainer restore -j nbjob --mib 1 --expect 3 > /dev/null || fail "root restoring nobody's job"

# after a restart the job exists only on disk: still refused
stop_ckptd
restart_ckptd_n
check_refused "job on disk only"
[ ! -e "$ROOT/rootjob/iter_000000002" ] || fail "nobody's step 2 was published in root's job"
[ "$(latest_of rootjob)" = iter_000000001 ] || fail "root's latest is $(latest_of rootjob)"
trainer restore -j rootjob --mib 1 --expect 1 > /dev/null || fail "root's own restore"
pass
