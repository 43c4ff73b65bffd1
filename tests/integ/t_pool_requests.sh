# LIST, PRUNE, REGION_ADD's mapping and a large region's release run on the
# pool, not the loop: while one of them is held at a failpoint (it cannot
# finish), other clients are served (a trainer saves and restores, ckptctl
# answers), then it finishes and replies correctly.
. "$(dirname "$0")/lib.sh"
HOLD=$T/hold
mkfifo "$HOLD"
export CKPT_FAILPOINT_HOLD=$HOLD
held() { [ -e "$HOLD.held" ]; }
release() { echo go > "$HOLD"; rm -f "$HOLD.held"; }

# --- LIST held --------------------------------------------------------------
export CKPT_FAILPOINT=ctl.list
start_ckptd
trainer save -j A --mib 1 --steps 1 -q || fail "save of step 1"
ckptctl list > $T/list1.out 2>&1 &
LIST=$!
wait_until 30 held || fail "LIST did not reach its failpoint"
trainer save -j A --mib 1 --steps 2 -q || fail "save while a LIST runs"
trainer restore -j A --mib 1 --expect 2 -q || fail "restore while a LIST runs"
ckptctl status > $T/status.out 2>&1 || fail "status while a LIST runs: $(cat $T/status.out)"
ckptctl list > $T/list2.out 2>&1 || fail "a second LIST while the first runs"
grep -q 'iter_000000002\|  *2 ' $T/list2.out || fail "second LIST: $(cat $T/list2.out)"
kill -0 $LIST 2>/dev/null || fail "the held LIST finished early: $(cat $T/list1.out)"
release
wait $LIST || fail "held LIST: $(cat $T/list1.out)"
grep -q 'A' $T/list1.out || fail "held LIST lists nothing: $(cat $T/list1.out)"
assert_alive
stop_ckptd || fail "ckptd did not stop cleanly"

# --- PRUNE held -------------------------------------------------------------
export CKPT_FAILPOINT=ctl.prune
start_ckptd
ckptctl prune --job A --keep 1 > $T/prune.out 2>&1 &
PRUNE=$!
wait_until 30 held || fail "PRUNE did not reach its failpoint"
trainer save -j B --mib 1 --steps 1 -q || fail "save while a PRUNE runs"
ckptctl status > $T/status.out 2>&1 || fail "status while a PRUNE runs"
kill -0 $PRUNE 2>/dev/null || fail "the held PRUNE finished early: $(cat $T/prune.out)"
[ -d "$ROOT/A/iter_000000001" ] || fail "pruned before the failpoint"
release
wait $PRUNE || fail "held PRUNE: $(cat $T/prune.out)"
[ ! -e "$ROOT/A/iter_000000001" ] || fail "PRUNE --keep 1 left step 1"
[ -d "$ROOT/A/iter_000000002" ] || fail "PRUNE --keep 1 removed step 2"
stop_ckptd || fail "ckptd did not stop cleanly"

# --- REGION_ADD's mapping held ----------------------------------------------
export CKPT_FAILPOINT=cmd.region_add
start_ckptd
trainer save -j C --mib 1 --steps 1 -q > $T/c.out 2>&1 &
C=$!
wait_until 30 held || fail "REGION_ADD did not reach its failpoint"
ckptctl status > $T/status.out 2>&1 || fail "status while a region is mapped"
ckptctl list --job A > $T/list3.out 2>&1 || fail "list while a region is mapped"
kill -0 $C 2>/dev/null || fail "the trainer finished while its region was held: $(cat $T/c.out)"
release
wait $C || fail "the held trainer's save: $(cat $T/c.out)"
trainer restore -j C --mib 1 --expect 1 -q || fail "restore of the held trainer's save"
# a trainer killed while its region is being mapped: the region is
# released when the mapping finishes (no descriptor or mapping kept)
stop_ckptd || fail "ckptd did not stop cleanly"
export CKPT_FAILPOINT=cmd.region_add:2     # the second trainer's region
start_ckptd
nfds() { ls /proc/$CKPTD_PID/fd | wc -l; }
trainer save -j D --mib 1 --steps 1 -q || fail "first save of job D"
ckptctl status > /dev/null || fail "status"
fds0=$(nfds)
"$TRAINER" save -s "$SOCK" -j D --mib 1 --steps 2 -q > $T/d.out 2>&1 &
D=$!
wait_until 30 held || fail "second REGION_ADD did not reach its failpoint"
kill -9 $D; wait $D 2>/dev/null
release
one_client() { ckptctl status 2>/dev/null | grep -Eq 'clients: +1$'; }
wait_until 30 one_client || fail "the dead trainer's session stays: $(ckptctl status)"
same_fds() { [ "$(nfds)" -le "$fds0" ]; }
wait_until 10 same_fds || fail "descriptors: $fds0 before, $(nfds) after: $(ls -l /proc/$CKPTD_PID/fd)"
[ ! -e "$ROOT/D/iter_000000002" ] || fail "the killed trainer's step 2 was saved"
trainer save -j D --mib 1 --steps 3 -q || fail "save after a trainer died mid region add"
assert_alive
stop_ckptd || fail "ckptd did not stop cleanly"

# --- releasing a large region (unmap, last close of its memfd) held ---------
# (~1 s of the loop for 2 GiB when it ran there)
export CKPT_FAILPOINT=region.release
start_ckptd
memfds() { ls -l /proc/$CKPTD_PID/fd | grep -c 'memfd:'; }
m0=$(memfds)
trainer save -j E --mib 32 --steps 1 -q || fail "save of a 32 MiB region"
wait_until 30 held || fail "the region's release did not reach its failpoint"
ckptctl status > $T/status.out 2>&1 || fail "status while a region is released"
trainer save -j F --mib 1 --steps 1 -q || fail "save while a region is released"
[ "$(memfds)" -gt "$m0" ] || fail "the held region's memfd is not open any more"
release
back() { [ "$(memfds)" -le "$m0" ]; }
wait_until 10 back || fail "memfds: $m0 before, $(memfds) after the release"
stop_ckptd || fail "ckptd did not stop cleanly"
pass
