# Multi-node: keep_last is reloadable (SIGHUP), and the coordinator, which
# prunes after each publish, uses the reloaded value: with keep_last 0
# every step stays; after the coordinator's configuration says keep_last 1
# and it is sent SIGHUP, the next publish prunes all but the newest step.
# Before, the coordinator kept the keep_last it started with.
. "$(dirname "$0")/mpi_lib.sh"
steps_of() { (cd "$ROOT/$1" && ls -d iter_* 2>/dev/null | xargs); }
steps_are() { [ "$(steps_of "$1")" = "$2" ]; }
start_cluster '"keep_last": 0'
for s in 10 20 30; do
	save_all mpk $s
	all_rc 0 || { show_rc; fail "step $s failed"; }
done
[ "$(steps_of mpk)" = "iter_000000010 iter_000000020 iter_000000030" ] ||
	fail "with keep_last 0: $(steps_of mpk)"
sed -i 's/"keep_last": 0/"keep_last": 1/' "$CONF"
grep -q '"keep_last": 1' "$CONF" || fail "config not changed"
kill -HUP "$(node_pid 0)"
wait_until 20 grep -q 'SIGHUP: configuration reloaded' "$LOG" || fail "no reload on node 0"
save_all mpk 40
all_rc 0 || { show_rc; fail "step 40 failed"; }
# pruning follows the publish (after every node was told)
wait_until 20 steps_are mpk iter_000000040 ||
	fail "after keep_last 1 and step 40: $(steps_of mpk)"
[ "$(latest_of mpk)" = "iter_000000040" ] || fail "latest is $(latest_of mpk)"
restore_all mpk 40
stop_cluster
pass
