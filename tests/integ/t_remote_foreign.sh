# Nothing ckptd did not upload is removed from the bucket (attack on issue
# 18, F1): objects an operator put under the prefix -- in a step ckptd never
# uploaded, inside ckptd's own step "directories", beside the jobs -- survive
# remote_keep_last and the start-up clean-up; and a second cluster on the
# same job (the README's "new cluster from the bucket alone" while the old
# one still runs) does not delete, as half-uploaded, the step the old one is
# uploading: when that upload completes, every file of it is there.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/s3_lib.sh"
s3_start
P=$S3_PREFIX
echo "operator's notes" > "$T/note"
FOREIGN="README.txt A/notes.txt A/iter_000000001/operator-extra.txt
	A/iter_000000002/model/mine.bin A/iter_000000500/model/rank_00000.safetensors
	A/iter_000000500/x.bin B/iter_000000007/model/rank_00000.safetensors A/iter_1/x"
for k in $FOREIGN; do s3 put "$P/$k" "$T/note" || fail "put $k"; done
foreign_all_there() {
	s3 ls "$P/" | awk '{print $1}' > "$T/keys"
	for k in $FOREIGN; do
		grep -qx "$P/$k" "$T/keys" || { echo "deleted: $k"; return 1; }
	done
}
REMOTE=$(remote_conf '"threads": 1')
start_ckptd "$REMOTE" '"remote_keep_last": 1'
trainer save -j A --mib 1 --steps 1:4 -q || fail "save 1..4"
wait_until 60 s3_steps_is A iter_000000004 || fail "remote steps: '$(s3_steps A)'"
wait_until 30 grep -q "deleted iter_000000003 (remote_keep_last)" "$LOG" ||
	fail "remote_keep_last 1 did not delete step 3"
foreign_all_there || fail "remote_keep_last deleted a foreign object"
# a start-up with a step gone locally (the clean-up of half-uploads)
stop_ckptd
rm -rf "$ROOT/A/iter_000000002"
CKPT_FAILPOINT=remote.file_uploaded:1 CKPT_FAILPOINT_HOLD=$T/hold restart_ckptd_n
mkfifo "$T/hold"
foreign_all_there || fail "the start-up clean-up deleted a foreign object"

# the old cluster's upload of step 5 (several files) is held after its first file
trainer save -j A --mib 3 --steps 5 --groups g1,g2,g3 -q || fail "save 5"
wait_until 30 test -e "$T/hold.held" || fail "the upload of step 5 did not reach the hold"
[ "$(s3 ls "$P/A/iter_000000005/" | wc -l)" -ge 1 ] || fail "no file of step 5 went up"

# a new cluster: same bucket, empty root; restores 4, saves and uploads 6
T2=$T/c2; mkdir -p "$T2"
sed -e "s|$SOCK|$T2/s.sock|" -e "s|$ROOT|$T2/root|" "$CONF" > "$T2/conf.json"
"$TOP/ckptd" -c "$T2/conf.json" > "$T2/log" 2>&1 & P2=$!
trap 'kill $P2 2>/dev/null; s3_stop; cleanup' EXIT
wait_until 30 grep -q ready: "$T2/log" || fail "the second ckptd did not start: $(tail -5 "$T2/log")"
"$TRAINER" restore -s "$T2/s.sock" -j A --mib 1 --expect 4 -q || fail "restore on the new cluster"
"$TRAINER" save -s "$T2/s.sock" -j A --mib 1 --steps 6 -q || fail "save 6 on the new cluster"
wait_until 60 grep -q "iter_000000006 uploaded" "$T2/log" || fail "step 6 not uploaded: $(tail -5 "$T2/log")"
wait_until 30 grep -q "deleted iter_000000004 (remote_keep_last)" "$T2/log" ||
	fail "the new cluster's retention did not run: $(grep remote: "$T2/log" | tail -5)"
grep "deleted iter_000000005" "$T2/log" && fail "the new cluster deleted the old one's upload"
foreign_all_there || fail "the new cluster deleted a foreign object"

# the old cluster's upload completes: every file of step 5 is there
echo go > "$T/hold"
wait_until 60 grep -q "iter_000000005 uploaded" "$LOG" || fail "step 5 not uploaded"
s3 check "$P/A" > "$T/check.out" || fail "a complete step lacks files: $(cat "$T/check.out")"
grep -q "ok iter_000000005 " "$T/check.out" || fail "step 5: $(cat "$T/check.out")"
kill "$P2"; wait "$P2"
foreign_all_there || fail "a foreign object was deleted"
pass
