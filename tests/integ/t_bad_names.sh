# Job, group and blob names become path components: "..", "/", empty, too
# long, a leading dot, a NUL inside (raw protocol), unicode lookalikes and
# other characters outside [A-Za-z0-9_.-] are each refused with a clear
# error (tests/integ/bad_names.py over the raw protocol; the C library and
# ckptctl as well), the longest allowed names work, and nothing is created
# outside the root or under a bad name inside it.
. "$(dirname "$0")/lib.sh"
start_ckptd
TOK=bnesc$$x$RANDOM
W=$T/w; mkdir $W       # our own output files
snapshot() { (cd "$T" && find . \( -path ./root -o -path ./w \) -prune -o -print | grep -v '^./ckptd' | sort); }
before=$(snapshot)
ls -a "$(dirname "$T")" > $W/tmp.before

python3 "$TOP/tests/integ/bad_names.py" "$SOCK" "$TOK" > $W/bn.out 2>&1
rc=$?
grep -v '^refused' $W/bn.out | sed 's/^/  /'
[ $rc = 0 ] || fail "bad names were not all refused (above)"
log "$(grep -c '^refused' $W/bn.out) bad names refused over the raw protocol"

# through the library and the tools
for j in .. "../$TOK" "a/b" "" ".hidden" "$(printf 'a%.0s' $(seq 65))" "j$(printf '\xd0\xbe')b"; do
	out=$(trainer save -j "$j" --mib 0.1 --steps 1 2>&1) && fail "trainer accepted job '$j'"
	echo "$out" | grep -qi 'name\|invalid' || fail "unclear error for job '$j': $out"
done
out=$(trainer save -j bn2 --groups "../$TOK" --mib 0.1 --steps 1 2>&1) && fail "group '../$TOK' accepted"
log "group '../$TOK': $out"
out=$(ckptctl prune --job "../$TOK" --keep 1 2>&1) && fail "ckptctl prune of a bad job name"
log "prune: $out"

# nothing anywhere under a bad name
after=$(snapshot)
[ "$before" = "$after" ] || fail "files appeared outside the root: $(diff <(echo "$before") <(echo "$after"))"
ls -a "$(dirname "$T")" | grep -q "$TOK" && fail "something named $TOK appeared next to the test dir"
[ -z "$(find "$T" / -maxdepth 1 -name "*$TOK*" 2>/dev/null)" ] || fail "a $TOK file exists"
[ -z "$(find "$T" -name "*$TOK*")" ] || fail "a $TOK file exists: $(find "$T" -name "*$TOK*")"
# (the root's marker and lock are ckptd's own)
bad=$(cd "$ROOT" && find . -mindepth 1 | grep -v -E '^\./(bn|bn2|j{64})(/|$)|^\./\.ckpt-root$|^\./\.ckptd\.lock$' | head)
[ -z "$bad" ] || fail "unexpected entries in the root: $bad"
# the allowed long names made a checkpoint that verifies
verify_latest bn
[ -f "$ROOT/bn/iter_000000001/$(printf 'g%.0s' $(seq 64))/rank_00000.safetensors" ] || fail "64-char group shard missing"
[ -f "$ROOT/bn/iter_000000001/extra/rank_00000/$(printf 'b%.0s' $(seq 128))" ] || fail "128-char blob missing"
assert_alive
pass
