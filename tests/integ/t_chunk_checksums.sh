# Every file of a checkpoint carries CRC32C checksums of its 1 MiB chunks
# in the manifest (format 2 and on), computed while it was written: the right
# count, `ckptctl verify` checks them, and a byte changed in chunk 1 with
# the file's digest (the one its manifest names) patched to match is still
# caught, by the chunk's CRC.
. "$(dirname "$0")/lib.sh"
start_ckptd
trainer save -j cs -r 0 -w 1 --mib 10 --steps 5 > /dev/null || fail "save"
D=$ROOT/cs/iter_000000005
ckptctl verify "$D" > /dev/null || fail "verify of a fresh checkpoint"
python3 - "$D" <<'PY' || fail "checksum tables"
import json, sys
m = json.load(open(sys.argv[1] + "/checkpoint_manifest.json"))
assert m["format_version"] == 3, m["format_version"]   # XXH3-128 digests (the default)
big = 0
for f in m["files"]:
    cs = f["chunk_size"]
    assert cs == 1 << 20, cs
    assert len(f["crc32c"]) == -(-f["size"] // cs), (f["path"], f["size"], len(f["crc32c"]))
    big += f["size"] > cs
assert big, "no file spans two chunks"
PY
F=$(python3 - "$D" <<'PY'
import json, sys
m = json.load(open(sys.argv[1] + "/checkpoint_manifest.json"))
print(max(m["files"], key=lambda f: f["size"])["path"])
PY
)
flip_byte "$D/$F" $(( (1 << 20) + 100 ))
chmod u+w "$D/checkpoint_manifest.json"
python3 - "$D" "$F" "$(dirname "$0")" <<'PY' || fail "patch the manifest"
import json, sys
d, path = sys.argv[1], sys.argv[2]
sys.path.insert(0, sys.argv[3])
import fdigest
m = json.load(open(d + "/checkpoint_manifest.json"))
for f in m["files"]:
    if f["path"] == path:
        k = fdigest.key_of(f)      # the file digest the manifest names
        f[k] = fdigest.hexdigest(k, open(d + "/" + path, "rb").read())
json.dump(m, open(d + "/checkpoint_manifest.json", "w"))
PY
out=$(ckptctl verify "$D" 2>&1) && fail "verify passed with a changed chunk: $out"
echo "$out" | grep -q "crc32c of chunk 1 does not match" || fail "verify said: $out"
pass
