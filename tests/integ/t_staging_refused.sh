# A save whose staging directory cannot be made fails with the file
# system's own error, not a generic I/O error: here an immutable job
# directory (chattr +i; skipped where the file system or the user cannot
# set it), where mkdir fails with EPERM.  The daemon stays up and saves
# again once the directory is writable.
. "$(dirname "$0")/lib.sh"
start_ckptd
trainer save -j job1 --mib 1 --steps 1 -q || fail "first save"
chattr +i "$ROOT/job1" 2>/dev/null || skip "cannot make a directory immutable here (chattr +i)"
out=$(trainer save -j job1 --mib 1 --steps 2 -q 2>&1)
rc=$?
chattr -i "$ROOT/job1"
[ $rc -ne 0 ] || fail "a save into an immutable job directory succeeded"
log "immutable job directory: $out"
echo "$out" | grep -q "cannot create the staging directory: Operation not permitted" ||
	fail "no reason given: $out"
echo "$out" | grep -q "ckpt_save: not permitted" || fail "not the error EPERM: $out"
assert_alive
trainer save -j job1 --mib 1 --steps 3 -q || fail "save after the directory is writable again"
stop_ckptd
pass
