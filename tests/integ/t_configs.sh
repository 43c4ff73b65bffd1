# Every file in configs/ passes `ckptd -n`; configs/ckptd.json documents
# every key with its built-in default; bad files are rejected with a
# message that names the key.
. "$(dirname "$0")/lib.sh"
CKPTD=$TOP/ckptd
n=0
for f in "$TOP"/configs/*.json; do
	out=$("$CKPTD" -n -c "$f" 2>&1)
	# a node with more memory than this machine: that refusal, and the
	# rest of the file valid with a pool that fits here
	if echo "$out" | grep -q -E "(staging|memory_tier)_bytes: .* is more than this machine's memory"; then
		log "$(basename "$f"): $out"
		python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); c["staging_bytes"]="1GiB"; c["memory_tier_bytes"]="2GiB" if c.get("memory_tier_bytes") else 0; json.dump(c, open(sys.argv[2], "w"))' "$f" "$T/fits.json"
		out=$("$CKPTD" -n -c "$T/fits.json" 2>&1)
	fi
	[ $? = 0 ] || fail "$(basename "$f"): $out"
	echo "$out" | grep -q "is valid" || fail "$(basename "$f"): $out"
	n=$((n + 1))
done
[ $n -ge 5 ] || fail "only $n files in configs/"
for f in ckptd single-node small-machine multi-node-mpi gpu-node; do
	[ -f "$TOP/configs/$f.json" ] || fail "configs/$f.json is missing"
done
log "$n configs pass ckptd -n"

# the documented default: every key, each at its built-in default, each
# with a "_key" comment
"$CKPTD" --help-config > "$T/keys.txt" || fail "--help-config"
python3 - "$T/keys.txt" "$TOP/configs/ckptd.json" <<'PY' || fail "configs/ckptd.json differs from the defaults"
import json, sys
keys = {}
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) >= 3 and f[1] == "default":
        keys[f[0]] = f[2]
doc = json.load(open(sys.argv[2]))
bad = []
for k, d in keys.items():
    if k not in doc:
        bad.append("missing " + k); continue
    v = doc[k]
    s = ("true" if v else "false") if isinstance(v, bool) else \
        "null" if v is None else str(v)
    if s != d:
        bad.append("%s is %s, default %s" % (k, s, d))
    if "_" + k not in doc:
        bad.append("no _%s comment" % k)
extra = [k for k in doc if not k.startswith("_") and k not in keys]
bad += ["unknown " + k for k in extra]
if bad:
    print("\n".join(bad)); sys.exit(1)
PY

# rejected, naming the key
reject() {   # json key-that-must-be-named
	printf '%s\n' "$1" > "$T/bad.json"
	if out=$("$CKPTD" -n -c "$T/bad.json" 2>&1); then
		fail "accepted: $1"
	fi
	echo "$out" | grep -q -- "$2" || fail "'$1': message does not name $2: $out"
}
reject '{"no_such_key": 1}' 'no_such_key'
reject '{"keep_last": "many"}' 'keep_last'
reject '{"keep_last": -1}' 'keep_last'
reject '{"io_backend": "spdk"}' 'io_backend'
reject '{"log_level": "loud"}' 'log_level'
reject '{"staging_bytes": "1KiB"}' 'staging_bytes'
reject '{"staging_bytes": "12 parsecs"}' 'staging_bytes'
reject '{"chunk_bytes": 100000}' 'chunk_bytes'
reject '{"socket_mode": "999"}' 'socket_mode'
reject '{"root": "relative/dir"}' 'root'
reject '{"metrics_port": 70000}' 'metrics_port'
reject '{"direct_io": "yes"}' 'direct_io'
reject '{"keep_last": 1, "keep_last": 2}' 'keep_last'
reject '{"keep_last": 1,' 'line [0-9]* column'
reject '[1, 2]' 'JSON object'
# "_" keys are comments, whatever their value
printf '{"_c": [1, {"x": 2}], "_keep_last": "why", "keep_last": 2}\n' > "$T/ok.json"
"$CKPTD" -n -c "$T/ok.json" > /dev/null 2>&1 || fail "_ keys not ignored"
# a missing file is an error too
"$CKPTD" -n -c "$T/nope.json" > "$T/out" 2>&1 && fail "missing file accepted"
grep -q "cannot open" "$T/out" || fail "missing file: $(cat "$T/out")"
pass
