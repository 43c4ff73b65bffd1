# ckpt_save_stream()'s contract around acceptance (tests/integ/
# stream_accept.c, against ckptd on the CUDA driver simulator, CUDA's two
# stream calls wrapped by stand-ins that fail on demand): a save ckptd accepted always hands back its
# ticket -- CKPT_UNORDERED when the stream cannot be made to wait, and the
# save commits -- while a failure before sending returns -errno, leaves the
# ticket alone and gives the ring slot back.  Every checkpoint it made
# verifies, and the refused ones made none.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/gpu_sim_lib.sh"
start_ckptd

out=$("$TOP/build/tests/stream_accept" "$SOCK" streamjob 2>&1) || fail "$out"
log "$out"
# steps 1..10 failed to record (no save); 11 ordered, 12..29 unordered
last=$(echo "$out" | sed -n 's/^ok: last step //p')
[ "$last" = 29 ] || fail "unexpected last step: $out"
for s in $(seq 1 10); do
	[ ! -e "$ROOT/streamjob/$(printf 'iter_%09d' "$s")" ] ||
		fail "step $s was saved although its record failed"
done
for s in 11 12 29; do
	"$TOP/ckptctl" verify "$ROOT/streamjob/$(printf 'iter_%09d' "$s")" > "$T/v" 2>&1 ||
		fail "step $s does not verify: $(cat "$T/v")"
done
verify_latest streamjob
[ "$(latest_of streamjob)" = iter_000000029 ] || fail "latest is $(latest_of streamjob)"
assert_alive
pass
