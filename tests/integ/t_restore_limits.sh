# Anything a save accepts, restore returns (issue 11): a rank saved at the
# configured limits restores bit-exactly.
#  - max_blobs blobs of max_blob_bytes each (64 x 4 MiB, the defaults: the
#    blobs alone are 16 times one message), and 5 such blobs;
#  - max_tensors tensors with names of the longest length (17,000 x 1,024
#    bytes: the restore report alone is larger than one message);
#  - the same with a small max_message_bytes, so every part of the reply
#    (report and blobs) is cut in many pieces.
. "$(dirname "$0")/lib.sh"
L=$TOP/build/tests/limits
limits() { "$L" "$1" -s "$SOCK" "${@:2}"; }

start_ckptd '"max_tensors": 17000' '"staging_bytes": "256MiB"' '"chunk_bytes": "4MiB"'

limits save -j b5 --blobs 5 --blob-bytes 4194304 --tensors 4 --step 3 || fail "save of 5 x 4 MiB blobs"
out=$(limits restore -j b5 --blobs 5 --blob-bytes 4194304 --tensors 4 --expect 3 2>&1) ||
	fail "restore of 5 x 4 MiB blobs: $out"
log "$out"

# the protocol under the library: parts when the client asks for them, one
# reply (or -EMSGSIZE with the reason) when it does not
TOP=$TOP /usr/bin/python3 - "$SOCK" <<'PY' || fail "raw protocol restore"
import os, sys
sys.path.insert(0, os.path.join(os.environ["TOP"], "tests", "integ"))
from rawproto import *
RESTORE_PART = 16
sock = sys.argv[1]

def hello(c, job, features):
    m = c.request(HELLO, {"version": 1, "features": features, "role": "trainer",
                          "job": job, "rank": 0, "world_size": 1, "pid": os.getpid()})
    assert m.status == 0, m
    return m.json["features"]

# without feature bit 8: 5 x 4 MiB of blobs do not fit one reply
c = Conn(sock, timeout=60)
assert hello(c, "b5", 1) & 8, "ckptd does not announce restore parts"
m = c.request(RESTORE, {"step": -1, "partial": True})
assert m.status == -90 and "cannot take it in parts" in m.error, m
print("old client:", m.error)
c.close()

# with it: parts of at most 1 MiB, blobs in order, counts that add up
c = Conn(sock, timeout=60)
hello(c, "b5", 1 | 8)
rid = c.send(RESTORE, {"step": -1, "partial": True})
blobs, lists, nparts = {}, {}, 0
while True:
    m = c.recv()
    assert m is not None and m.req_id == rid, m
    if m.type == RESTORE_PART:
        nparts += 1
        assert m.len <= 1 << 20, "part of %d bytes" % m.len
        if "blob" in m.json:
            b = blobs.setdefault(m.json["blob"], bytearray())
            assert m.json["off"] == len(b), m
            b += m.bin
        else:
            for k, v in m.json.items():
                lists.setdefault(k, []).extend(v)
        continue
    assert m.type == RESTORE | REPLY and m.status == 0, m
    break
r = m.json
assert r["step"] == 3 and r["source"] == "disk" and r["micros"] > 0, r
assert r["counts"] == {"restored": 0, "missing": 0, "unexpected": 4, "skipped": 0,
                       "blobs": 5}, r
assert sorted(blobs) == ["blob%04d" % i for i in range(5)], sorted(blobs)
assert all(len(b) == 4194304 for b in blobs.values())
assert r["bytes"] == 5 * 4194304, r
assert len(lists["unexpected"]) == 4 and nparts > 20, (lists, nparts)
print("parts:", nparts, "counts:", r["counts"])
c.close()
PY

limits save -j b64 --blobs 64 --blob-bytes 4194304 --tensors 4 --step 7 || fail "save of 64 x 4 MiB blobs"
out=$(limits restore -j b64 --blobs 64 --blob-bytes 4194304 --tensors 4 --expect 7 2>&1) ||
	fail "restore of 64 x 4 MiB blobs: $out"
log "$out"

limits save -j t17k --tensors 17000 --name-len 1024 --blobs 1 --blob-bytes 100 --step 9 ||
	fail "save of 17,000 tensors with 1,024-byte names"
out=$(limits restore -j t17k --tensors 17000 --name-len 1024 --blobs 1 --blob-bytes 100 --expect 9 2>&1) ||
	fail "restore of 17,000 tensors with 1,024-byte names: $out"
log "$out"
# a partial restore of it reports every left-out tensor, the longest names too
out=$(limits restore -j t17k --tensors 17000 --name-len 1024 --blobs 1 --blob-bytes 100 \
	--drop 9000 --partial --expect 9 2>&1) || fail "partial restore of 17,000 tensors: $out"
log "$out"
echo "$out" | grep -q "missing 9000 unexpected 9000" || fail "partial restore report: $out"
grep -q "out of memory replying" $LOG && fail "the daemon ran out of memory replying"
assert_alive
stop_ckptd || fail "ckptd exit status"

# every part of a reply in many pieces: messages of at most 64 KiB
rm -f "$SOCK"
start_ckptd '"max_message_bytes": "64KiB"' '"max_blob_bytes": "60KiB"' '"max_blobs": 64' \
	'"max_tensors": 500'
limits save -j small --blobs 64 --blob-bytes 61440 --tensors 500 --name-len 1024 --step 2 ||
	fail "save at the small limits"
out=$(limits restore -j small --blobs 64 --blob-bytes 61440 --tensors 500 --name-len 1024 \
	--expect 2 2>&1) || fail "restore at the small limits: $out"
log "$out"
out=$(limits restore -j small --blobs 64 --blob-bytes 61440 --tensors 500 --name-len 1024 \
	--drop 200 --partial --expect 2 2>&1) || fail "partial restore at the small limits: $out"
echo "$out" | grep -q "missing 200 unexpected 200" || fail "partial restore report: $out"
log "$out"
# an old client still gets a restore that fits one message, all in the reply
limits save -j tiny --blobs 2 --blob-bytes 1000 --tensors 3 --step 4 || fail "save of tiny"
TOP=$TOP /usr/bin/python3 - "$SOCK" <<'PY' || fail "raw protocol restore without parts"
import os, sys
sys.path.insert(0, os.path.join(os.environ["TOP"], "tests", "integ"))
from rawproto import *
c = Conn(sys.argv[1], timeout=60)
m = c.request(HELLO, {"version": 1, "features": 1, "role": "trainer", "job": "tiny",
                      "rank": 0, "world_size": 1, "pid": os.getpid()})
assert m.status == 0, m
m = c.request(RESTORE, {"step": -1, "partial": True})
assert m.status == 0 and m.type == RESTORE | REPLY, m
r = m.json
assert r["step"] == 4 and len(r["unexpected"]) == 3 and r["restored"] == [], r
assert [b["len"] for b in r["blobs"]] == [1000, 1000] and len(m.bin) == 2000, r
print("old client, one reply:", {k: v for k, v in r.items() if k != "unexpected"})
PY
assert_alive
pass
