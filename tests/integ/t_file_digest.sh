# "file_digest" picks each file's whole-content digest; the manifest names
# it per file and every check follows the manifest.  With the default
# (xxh3-128) and with "sha256" (applied by a reload): the manifest has the
# one key of its algorithm on every file (format 3 / 2), the hex is what
# an independent implementation computes (tests/integ/fdigest.py), the
# step verifies and restores (from the memory tier and from disk, and
# with its chunk CRC32Cs taken out of the manifest, from the digest alone);
# a byte flipped in a shard is then refused by `ckptctl verify` naming the
# algorithm, and by a restore.  A checkpoint written before format 3
# (tests/fixtures/ckpt_v2: SHA-256, format 2, by ckpt at 91b0225) verifies
# and restores under the new default.
. "$(dirname "$0")/lib.sh"
HERE=$(cd "$(dirname "$0")" && pwd)
TIER='"memory_tier_bytes": "64MiB"'
start_ckptd "$TIER"
J=(-w 1 --mib 4)

# check_manifest DIR KEY VERSION: format VERSION, and every file carries
# KEY (and no other digest) with the value computed from its bytes
check_manifest() {
	python3 - "$1" "$2" "$3" "$HERE" <<'PY' || fail "manifest of $1 (want $2, format $3)"
import json, sys
d, key, ver = sys.argv[1], sys.argv[2], int(sys.argv[3])
sys.path.insert(0, sys.argv[4])
import fdigest
m = json.load(open(d + "/checkpoint_manifest.json"))
assert m["format_version"] == ver, m["format_version"]
for f in m["files"]:
    assert fdigest.key_of(f) == key, f
    want = fdigest.hexdigest(key, open(d + "/" + f["path"], "rb").read())
    assert f[key] == want, (f["path"], f[key], want)
PY
}

# strip_crcs DIR: the manifest without chunk checksums, so a restore checks
# the files by their digest (fcheck.c), as it does format 1
strip_crcs() {
	chmod u+w "$1/checkpoint_manifest.json"
	python3 - "$1" <<'PY' || fail "strip chunk checksums of $1"
import json, sys
p = sys.argv[1] + "/checkpoint_manifest.json"
m = json.load(open(p))
for f in m["files"]:
    f.pop("crc32c", None); f.pop("chunk_size", None)
json.dump(m, open(p, "w"))
PY
}

# one_algorithm JOB KEY VERSION: save, check, restore, damage, refuse
one_algorithm() {
	local job=$1 key=$2 ver=$3 out D
	trainer save -j "$job" "${J[@]}" -r 0 --steps 5:6 -q > /dev/null || fail "$key: save"
	for s in 5 6; do
		D=$ROOT/$job/iter_00000000$s
		check_manifest "$D" "$key" "$ver"
		ckptctl verify "$D" > "$T/v.out" 2>&1 || fail "$key: verify of $s: $(cat "$T/v.out")"
	done
	out=$(trainer restore -j "$job" "${J[@]}" -r 0 --step 6 2>&1) || fail "$key: restore: $out"
	grep -q "restored step 6 bit-exact from memory" <<< "$out" ||
		fail "$key: the memory tier did not serve step 6: $out"
	out=$(trainer restore -j "$job" "${J[@]}" -r 0 --step 5 2>&1) || fail "$key: restore: $out"
	grep -q "restored step 5 bit-exact from disk" <<< "$out" || fail "$key: restore of 5: $out"
	# by the digest alone: intact, then damaged
	D=$ROOT/$job/iter_000000005
	strip_crcs "$D"
	ckptctl verify "$D" > "$T/v.out" 2>&1 || fail "$key: verify without crcs: $(cat "$T/v.out")"
	out=$(trainer restore -j "$job" "${J[@]}" -r 0 --step 5 2>&1) ||
		fail "$key: restore by the digest alone: $out"
	flip_byte "$D/model/rank_00000.safetensors"
	out=$(ckptctl verify "$D" 2>&1) && fail "$key: verify passed a flipped byte: $out"
	grep -q "model/rank_00000.safetensors: $key mismatch" <<< "$out" ||
		fail "$key: verify said: $out"
	out=$(trainer restore -j "$job" "${J[@]}" -r 0 --step 5 2>&1) &&
		fail "$key: restore of a flipped byte succeeded: $out"
	grep -q "model/rank_00000.safetensors: $key mismatch" <<< "$out" ||
		fail "$key: restore said: $out"
	# and with its chunk checksums, a flipped byte in step 6's shard (on
	# disk; the memory copy is the previous, intact one: from disk here)
	D=$ROOT/$job/iter_000000006
	flip_byte "$D/optim/rank_00000.safetensors"
	out=$(ckptctl verify "$D" 2>&1) && fail "$key: verify passed a flipped byte in 6"
	grep -q "optim/rank_00000.safetensors: $key mismatch" <<< "$out" ||
		fail "$key: verify of 6 said: $out"
	log "$key: ok ($(head -c 120 "$D/checkpoint_manifest.json")...)"
}

one_algorithm dx xxh3_128 3

# "sha256" by a reload (the next save uses it)
write_conf "$TIER" '"file_digest": "sha256"'
kill -HUP "$CKPTD_PID"
wait_until 5 grep -q "SIGHUP: configuration reloaded.*file_digest xxh3-128 -> sha256" "$LOG" ||
	fail "no reload of file_digest: $(grep SIGHUP "$LOG")"
one_algorithm ds sha256 2

# a value outside the two is refused by `ckptd -n`, naming the key
echo '{"file_digest": "md5"}' > "$T/bad.json"
out=$("$TOP/ckptd" -n -c "$T/bad.json" 2>&1) && fail "ckptd -n accepted md5"
grep -q 'file_digest: "md5" is not one of xxh3-128|sha256' <<< "$out" || fail "ckptd -n said: $out"

# the old SHA-256 checkpoint (format 2) under the default again
write_conf "$TIER"
kill -HUP "$CKPTD_PID"
wait_until 5 grep -q "SIGHUP: configuration reloaded.*file_digest sha256 -> xxh3-128" "$LOG" ||
	fail "no reload back to xxh3-128"
cp -r "$TOP/tests/fixtures/ckpt_v2/fix2" "$ROOT/fix2"
echo "{\"owner_uid\": $(id -u), \"run_id\": \"82f9c070282415cdbd631a9c46d911dc\"}" > "$ROOT/fix2/job.json"
check_manifest "$ROOT/fix2/iter_000000007" sha256 2
ckptctl verify "$ROOT/fix2/iter_000000007" > "$T/v.out" 2>&1 || fail "fixture v2: $(cat "$T/v.out")"
for r in 0 1; do
	trainer restore -j fix2 -r $r -w 2 --mib 0.02 --expect 7 > /dev/null || fail "fixture rank $r"
done
flip_byte "$ROOT/fix2/iter_000000007/extra/rank_00001/rng"
out=$(ckptctl verify "$ROOT/fix2/iter_000000007" 2>&1) && fail "fixture verify passed a flip"
grep -q "extra/rank_00001/rng: sha256 mismatch" <<< "$out" || fail "fixture verify said: $out"
assert_alive
pass
