# "lock_pool": false keeps the staging pool out of locked memory: the
# ready line does not say "(locked)" and ckptd's VmLck stays 0 (the pool
# used to be mlocked whatever the setting said).
. "$(dirname "$0")/lib.sh"
start_ckptd '"lock_pool": false' '"gpu": "off"'
grep 'ready:' "$LOG" | grep -q '(locked)' && fail "the ready line says the pool is locked"
lck=$(awk '/^VmLck:/ {print $2}' "/proc/$CKPTD_PID/status")
[ "$lck" = 0 ] || fail "VmLck is $lck kB with lock_pool false"
assert_alive
pass
