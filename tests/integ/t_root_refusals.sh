# What start-up and `ckptd -n` refuse before anything is created (issue
# 11, F8):
# - a socket another ckptd listens on: "in use", and the new root is
#   neither created nor marked;
# - a root inside another ckptd's root (a marker above it);
# - staging_bytes larger than the machine's memory;
# - a marker that is not ckptd's (empty: an older ckptd's failed write);
# - a step above CKPT_MAX_STEP, with the limit in the error.
. "$(dirname "$0")/lib.sh"
start_ckptd
trainer save -j job1 --mib 1 --steps 1 -q || fail "first save"
FIRST=$CONF
CONF=$T/second.json

# (a) the socket of a running ckptd, a new root
write_conf "\"root\": \"$T/root2\""
out=$("$TOP/ckptd" -n -c "$CONF" 2>&1) && fail "ckptd -n accepted a live socket: $out"
echo "$out" | grep -q "socket '$SOCK' is in use: another ckptd listens on it" || fail "-n live socket: $out"
timeout 20 "$TOP/ckptd" -c "$CONF" > $T/a.log 2>&1 && fail "a second ckptd started on a live socket"
grep -q "socket '$SOCK' is in use: another ckptd listens on it" $T/a.log || fail "live socket: $(cat $T/a.log)"
log "live socket: $(grep 'in use' $T/a.log)"
[ ! -e $T/root2 ] || fail "the refused ckptd created its root: $(ls -A $T/root2)"
assert_alive

# (c) a root inside the running one's, a pool larger than the machine
for r in "$ROOT/sub" "$ROOT/job1/deeper/" "$ROOT/nested/a/b"; do
	write_conf "\"root\": \"$r\"" "\"socket\": \"$T/other.sock\""
	out=$("$TOP/ckptd" -n -c "$CONF" 2>&1) && fail "ckptd -n accepted $r inside a ckpt root: $out"
	echo "$out" | grep -q "is inside the ckpt root '$ROOT' (it has the .ckpt-root marker)" ||
		fail "-n nested $r: unclear: $out"
done
log "nested: $out"
timeout 20 "$TOP/ckptd" -c "$CONF" > $T/c.log 2>&1 && fail "ckptd started on a nested root"
grep -q "is inside the ckpt root" $T/c.log || fail "nested start: $(cat $T/c.log)"
[ ! -e "$ROOT/nested" ] || fail "the refused ckptd created its nested root"
write_conf "\"root\": \"$T/root3\"" "\"socket\": \"$T/other.sock\"" '"staging_bytes": "64TiB"'
out=$("$TOP/ckptd" -n -c "$CONF" 2>&1) && fail "ckptd -n accepted a 64 TiB pool: $out"
echo "$out" | grep -q "staging_bytes: 67108864 MiB is more than this machine's memory" ||
	fail "-n 64 TiB: unclear: $out"
log "64 TiB: $out"
write_conf "\"root\": \"$T/root3\"" "\"socket\": \"$T/other.sock\"" '"memory_tier_bytes": "64TiB"'
out=$("$TOP/ckptd" -n -c "$CONF" 2>&1) && fail "ckptd -n accepted a 64 TiB memory tier: $out"
echo "$out" | grep -q "memory_tier_bytes: 67108864 MiB is more than this machine's memory" ||
	fail "-n 64 TiB tier: unclear: $out"

# (b) a step beyond the layout's nine digits: the limit is named
out=$(trainer save -j job1 --mib 1 --steps 1000000000 2>&1) && fail "step 1e9 was accepted"
echo "$out" | grep -q "step 1000000000 is out of range (at most CKPT_MAX_STEP, 999999999)" ||
	fail "step 1e9: unclear: $out"
log "step 1e9: $out"
trainer save -j job1 --mib 1 --steps 999999999 -q || fail "the largest step"
stop_ckptd

# a damaged (empty) marker is not taken for ckptd's (a full disk at the
# marker's write leaves none: t_root_own)
write_conf "\"root\": \"$T/root4\""
mkdir -m 0700 $T/root4
: > $T/root4/.ckpt-root
out=$("$TOP/ckptd" -n -c "$CONF" 2>&1) && fail "ckptd -n accepted an empty marker: $out"
echo "$out" | grep -q "'$T/root4/.ckpt-root' is not ckptd's marker (empty)" || fail "empty marker: $out"
log "empty marker: $out"
rm $T/root4/.ckpt-root
LOG=$T/root4.log
start_ckptd "\"root\": \"$T/root4\""
[ "$(cat $T/root4/.ckpt-root)" = "ckpt root" ] || fail "marker: $(cat $T/root4/.ckpt-root)"
trainer save -j job1 --mib 1 --steps 1 -q || fail "a save into root4"
stop_ckptd || fail "ckptd did not stop cleanly"
pass
