# ckptctl and the object-store tier: remote_every uploads every Nth commit;
# `list --remote` shows the complete steps and the remote's latest; `push`
# uploads a step on demand (a missing one is refused); `pull` downloads,
# verifies and publishes a step (the latest by default, into an empty root
# too), and refuses a damaged copy without publishing anything or leaving
# anything behind; without a remote the commands say so.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/s3_lib.sh"
s3_start
REMOTE=$(remote_conf)
start_ckptd "$REMOTE" '"remote_every": 2'

trainer save -j A --mib 1 --steps 1:4 -q || fail "save 1..4"
wait_until 60 s3_steps_is A "iter_000000001 iter_000000003" ||
	fail "remote_every 2: steps on the remote: '$(s3_steps A)'"
wait_until 30 remote_uploaded 2 || fail "ckptd does not count 2 uploads"
out=$(ckptctl list --remote --job A) || fail "list --remote: $out"
echo "$out" | grep -Eq '^A +3 +\*' || fail "list --remote: $out"
echo "$out" | grep -Eq '^A +1 ' || fail "list --remote: $out"
ckptctl list --remote --json | python3 -c '
import json, sys
c = json.load(sys.stdin)["checkpoints"]
assert sorted(x["step"] for x in c) == [1, 3], c
assert [x["step"] for x in c if x["latest"]] == [3], c' || fail "list --remote --json"

out=$(ckptctl push --job A --step 4) || fail "push: $out"
wait_until 60 s3_steps_is A "iter_000000001 iter_000000003 iter_000000004" ||
	fail "after push: '$(s3_steps A)'"
out=$(ckptctl push --job A --step 9 2>&1) && fail "push of a missing step: $out"
echo "$out" | grep -q "no step 9" || fail "push of a missing step: $out"

# pull a step the root lost
rm -rf "$ROOT/A/iter_000000003"
out=$(ckptctl pull --job A --step 3) || fail "pull --step 3: $out"
"$TOP/ckptctl" verify "$ROOT/A/iter_000000003" > /dev/null || fail "pulled step 3 does not verify"

# a damaged copy in the bucket is refused; nothing published, nothing left
rm -rf "$ROOT/A/iter_000000001"
head -c 1000 /dev/urandom > "$T/junk"
s3 put "$S3_PREFIX/A/iter_000000001/model/rank_00000.safetensors" "$T/junk"
out=$(ckptctl pull --job A --step 1 2>&1) && fail "a damaged step was pulled: $out"
echo "$out" | grep -q "does not match its manifest" || fail "pull of a damaged step: $out"
[ -e "$ROOT/A/iter_000000001" ] && fail "a damaged step was published"
assert_no_leftovers

# a new root: pull the latest
stop_ckptd || fail "stop"
rm -rf "$ROOT"
start_ckptd "$REMOTE"
out=$(ckptctl pull --job A) || fail "pull of the latest: $out"
echo "$out" | grep -q "step 4 downloaded" || fail "pull: $out"
[ "$(latest_of A)" = iter_000000004 ] || fail "local latest after pull: $(latest_of A)"
out=$(trainer restore -j A --mib 1 --expect 4 2>&1) || fail "restore after pull: $out"
echo "$out" | grep -q "from remote" && fail "restore went to the remote after a pull"
stop_ckptd || fail "stop"

start_ckptd
out=$(ckptctl list --remote 2>&1) && fail "list --remote without a remote: $out"
echo "$out" | grep -q "no remote is configured" || fail "without a remote: $out"
pass
