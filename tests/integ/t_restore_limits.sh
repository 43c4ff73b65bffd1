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
assert_alive
pass
