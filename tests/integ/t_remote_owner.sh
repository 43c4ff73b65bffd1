# Ownership through the bucket: ckptd records each job's owner uid next to
# its steps (<job>/owner.json); on a new node another user can neither
# pull nor restore root's job from the bucket (nothing is made for them),
# root's copy never goes into a local job of another user, and root may
# pull anyone's job, which then belongs to its recorded owner, who
# restores it; the owner pulls their own job.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/s3_lib.sh"
s3_start
need_nobody
REMOTE=$(remote_conf)
start_ckptd "$REMOTE" '"socket_mode": "0666"'
nb_trainer() { "${AS_NOBODY[@]}" "$TRAINER" "$1" -s "$SOCK" "${@:2}"; }
nb_ctl() { "${AS_NOBODY[@]}" "$TOP/ckptctl" -s "$SOCK" "$@"; }
NB=$(id -u nobody)

trainer save -j A --mib 1 --steps 1:2 -q || fail "root's save"
nb_trainer save -j B --mib 1 --steps 1 -q || fail "nobody's save"
wait_until 60 s3_steps_is A "iter_000000001 iter_000000002" || fail "A: '$(s3_steps A)'"
wait_until 60 s3_steps_is B "iter_000000001" || fail "B: '$(s3_steps B)'"
wait_until 30 remote_uploaded 3 || fail "ckptd does not count 3 uploads"
s3 get "$S3_PREFIX/A/owner.json" "$T/oa" || fail "no owner.json for A"
grep -q '"owner_uid": 0' "$T/oa" || fail "A's owner: $(cat "$T/oa")"
s3 get "$S3_PREFIX/B/owner.json" "$T/ob" || fail "no owner.json for B"
grep -q "\"owner_uid\": $NB" "$T/ob" || fail "B's owner: $(cat "$T/ob")"

# a new node: nobody cannot take root's job
stop_ckptd || fail "stop"
rm -rf "$ROOT"
start_ckptd "$REMOTE" '"socket_mode": "0666"'
out=$(nb_ctl pull --job A 2>&1) && fail "nobody pulled root's job: $out"
echo "$out" | grep -q "job 'A' on the remote belongs to another user" || fail "pull refusal: $out"
[ -e "$ROOT/A" ] && fail "a job A was made for nobody"
out=$(nb_trainer restore -j A --mib 1 2>&1) && fail "nobody restored root's job: $out"
echo "$out" | grep -q "belongs to another user" || fail "restore refusal: $out"
ls "$ROOT/A" | grep -q iter_ && fail "root's step was downloaded for nobody: $(ls "$ROOT/A")"
# nobody's attach made A theirs here: root's copy does not go into it
out=$(ckptctl pull --job A 2>&1) && fail "root's copy went into nobody's job: $out"
echo "$out" | grep -q "belongs to uid $NB, on the remote to uid 0" || fail "root pull: $out"
ls "$ROOT/A" | grep -q iter_ && fail "root's step was published in nobody's job"

# root pulls nobody's job: it is nobody's, who restores it
out=$(ckptctl pull --job B 2>&1) || fail "root pull of B: $out"
grep -q "\"owner_uid\": $NB" "$ROOT/B/job.json" || fail "B here: $(cat "$ROOT/B/job.json")"
out=$(nb_trainer restore -j B --mib 1 --expect 1 2>&1) || fail "nobody's restore of B: $out"

# the owner pulls their own job on a new node
stop_ckptd || fail "stop"
rm -rf "$ROOT"
start_ckptd "$REMOTE" '"socket_mode": "0666"'
out=$(nb_ctl pull --job B 2>&1) || fail "nobody's pull of B: $out"
grep -q "\"owner_uid\": $NB" "$ROOT/B/job.json" || fail "B here: $(cat "$ROOT/B/job.json")"
out=$(trainer restore -j A --mib 1 --expect 2 2>&1) || fail "root's restore of A: $out"
echo "$out" | grep -q "from remote" || fail "A not from the remote: $out"
assert_no_leftovers
pass
