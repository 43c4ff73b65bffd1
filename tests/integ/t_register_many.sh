# A rank registering 100,000 tensors with 1,024-byte names (issue 11, attack
# findings F6, F7):
#  - registration is not quadratic: it took 670 s, and the test's timeout
#    stops it long before that;
#  - the tensor that would make its group's safetensors header pass the
#    format's limit (100 MiB) is refused at REGISTER, naming the limit;
#    SAVE no longer fails later with "cannot encode the safetensors header";
#  - when that session leaves, ckptd gives its heap back (it sat at ~500 MB
#    with no job before).
. "$(dirname "$0")/lib.sh"
start_ckptd '"staging_bytes": "16MiB"' '"chunk_bytes": "1MiB"'
anon() { awk '/^RssAnon:/ {print $2}' /proc/$CKPTD_PID/status; }
before=$(anon)
out=$("$TOP/build/tests/limits" save -s "$SOCK" -j many --tensors 100000 --name-len 1024 2>&1) &&
	fail "100,000 tensors of 1,024-byte names in one group were all registered"
echo "$out" | grep -q "ckpt_register: .*group model: its safetensors header would pass 104857600 bytes, the format's limit" ||
	fail "unclear refusal: $(echo "$out" | cut -c1-400)"
log "$(echo "$out" | cut -c1-300)"
n=$(echo "$out" | sed -nE 's/.*\(([0-9]+) in the group.*/\1/p')
[ "${n:-0}" -gt 90000 ] || fail "refused too early: after ${n:-?} tensors"
# the session is gone once ckptd logs it; its memory comes back when the
# loop frees and trims it, a moment later on a slow machine: poll, bounded
wait_until 10 grep -q "closed: end of file" "$LOG" || fail "the session never closed"
back() { [ "$(anon)" -lt $((before + 49152)) ]; }
wait_until 30 back
after=$(anon)
log "ckptd RssAnon: ${before} kB before, ${after} kB after the session left"
[ "$after" -lt $((before + 49152)) ] || fail "ckptd kept $((after - before)) kB after the session left"
pass
