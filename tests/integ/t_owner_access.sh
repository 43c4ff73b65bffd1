# A job's files are readable by its owner and ckptd only, set up as the
# shipped unit does it: ckptd runs as a service user (primary group G,
# umask 0027), trainers alice and bob are in group G, all real users made
# by this test.  alice lists, reads and verifies her own job offline; bob
# can neither list the root nor list, read or verify alice's job (and the
# other way round), and ckptd shows neither user the other's job in
# `ckptctl status` or `ckptctl list`, and a user's `ckptctl flush` waits
# for their own saves only.  Checkpoints whose job.json was
# removed are taken over by no user.  A job directory an older ckptd left
# group-readable (no ACL, mode 0750) is closed again at start-up.
. "$(dirname "$0")/lib.sh"
[ "$(id -u)" = 0 ] || skip "needs root to create users"
for c in useradd userdel groupadd groupdel setpriv; do
	command -v $c > /dev/null || skip "no $c"
done
sfx=$$
G=ckg$sfx SVC=cks$sfx A=cka$sfx B=ckb$sfx
drop_users() {
	[ -n "${hp:-}" ] && kill $hp 2>/dev/null
	for u in $SVC $A $B; do userdel -f $u 2>/dev/null; done
	groupdel $G 2>/dev/null
}
trap 'cleanup; drop_users' EXIT
groupadd $G || skip "groupadd failed"
useradd -M -N -g $G -s /usr/sbin/nologin $SVC || skip "useradd failed"
useradd -M -N -G $G -s /bin/sh $A && useradd -M -N -G $G -s /bin/sh $B || fail "useradd"
as() { local u=$1; shift; setpriv --reuid=$u --regid="$(id -g $u)" --init-groups "$@"; }
as $A true || skip "setpriv cannot switch users here"

# the unit's directories: StateDirectory (the root) and RuntimeDirectory
chmod 755 "$T"
mkdir -m 0711 "$ROOT" && chown $SVC:$G "$ROOT"
mkdir -m 0750 "$T/run" && chown $SVC:$G "$T/run"
SOCK=$T/run/ckptd.sock
write_conf
start_svc() {
	setpriv --reuid=$SVC --regid=$G --init-groups sh -c "umask 0027; exec '$TOP/ckptd' -c '$CONF'" >> "$LOG" 2>&1 &
	CKPTD_PID=$!
	wait_until 10 grep -q "ready:" "$LOG" || fail "ckptd did not start as $SVC"
	wait_until 5 test -S "$SOCK" || fail "no socket"
}
start_svc
tr_as() { local u=$1; shift; as $u "$TRAINER" "$1" -s "$SOCK" "${@:2}"; }
ctl_as() { local u=$1; shift; as $u "$TOP/ckptctl" -s "$SOCK" "$@"; }

tr_as $A save -j ajob --mib 1 --steps 1:2 -q || fail "alice's save"
tr_as $B save -j bjob --mib 1 --steps 7 -q || fail "bob's save"
IT=iter_000000002
SHARD=$ROOT/ajob/$IT/model/rank_00000.safetensors
[ -f "$SHARD" ] || fail "no shard $SHARD"

# alice: her own job, offline
as $A ls "$ROOT/ajob" > /dev/null || fail "alice cannot list her job"
as $A cat "$SHARD" > /dev/null || fail "alice cannot read her shard"
as $A "$TOP/ckptctl" verify "$ROOT/ajob/$IT" > $T/va.out 2>&1 || fail "alice cannot verify her checkpoint: $(cat $T/va.out)"
as $A "$TOP/ckptctl" verify "$ROOT/ajob" > $T/va.out 2>&1 || fail "alice cannot verify her job: $(cat $T/va.out)"
as $A cat "$ROOT/ajob/latest_checkpoint.txt" > /dev/null || fail "alice cannot read latest"

closed_to() {   # user, job, what
	local u=$1 j=$2 it
	it=$(cat "$ROOT/$j/latest_checkpoint.txt")
	as $u ls "$ROOT/$j" > /dev/null 2>&1 && fail "$3: $u lists $j"
	as $u cat "$ROOT/$j/$it/model/rank_00000.safetensors" > /dev/null 2>&1 && fail "$3: $u reads $j's shard"
	as $u cat "$ROOT/$j/$it/checkpoint_manifest.json" > /dev/null 2>&1 && fail "$3: $u reads $j's manifest"
	as $u "$TOP/ckptctl" verify "$ROOT/$j/$it" > $T/vb.out 2>&1 && fail "$3: $u verifies $j"
	true
}
# a user outside the group: told why, not asked whether ckptd runs
out=$(setpriv --reuid=nobody --regid=nogroup --clear-groups "$TOP/ckptctl" -s "$SOCK" status 2>&1) &&
	fail "nobody (not in group $G) reached ckptd: $out"
echo "$out" | grep -q "Permission denied (the socket is open to ckptd's group only: join it" ||
	fail "nobody: unclear: $out"
closed_to $B ajob "new job"
closed_to $A bjob "new job"
as $B ls "$ROOT" > /dev/null 2>&1 && fail "bob lists the root"
as $B "$TOP/ckptctl" verify "$ROOT/ajob/$IT" 2>&1 | sed 's/^/# bob: /'
as $B ls -l "$ROOT/bjob" > /dev/null || fail "bob cannot list his own job"
log "alice's job: $(ls -ld "$ROOT/ajob" | cut -c1-11) $(stat -c '%U:%G' "$ROOT/ajob"), shard $(stat -c '%A %U:%G' "$SHARD")"

# through ckptd: each user sees only their own jobs; root sees both
sleep 120 2>/dev/null | setpriv --reuid=$A --regid="$(id -g $A)" --init-groups "$PROBE" idle -s "$SOCK" -j ajob -r 0 -w 1 --secs 120 > $T/hold 2>&1 &
hp=$!
wait_until 10 grep -q CONNECTED $T/hold || fail "probe idle as alice: $(cat $T/hold)"
names() { python3 -c 'import json,sys; print(" ".join(sorted(j["name"] for j in json.load(sys.stdin)["jobs"])))'; }
[ "$(ctl_as $B status --json | names)" = "" ] || fail "bob's status shows: $(ctl_as $B status --json | names)"
[ "$(ctl_as $A status --json | names)" = "ajob" ] || fail "alice's status shows: $(ctl_as $A status --json | names)"
[ "$(ckptctl status --json | names)" = "ajob" ] || fail "root's status: $(ckptctl status --json | names)"
ctl_as $B status | grep -q ajob && fail "bob's status text shows ajob"
ctl_as $B list | grep -q ajob && fail "bob's list shows ajob"
ctl_as $B list | grep -q bjob || fail "bob's list lacks bjob"
ckptctl list | grep -q ajob || fail "root's list lacks ajob"
kill $hp; hp=

# checkpoints whose job.json an operator removed have no known owner: no
# user takes them over (bob would read alice's data), only root does
# flush waits for the user's own saves: bob's does not wait for (or
# count) alice's step in flight
as $A "$TOP/build/tests/holdsave" -s "$SOCK" -j aflush -r 0 -w 2 -m 1 -t 1 > $T/h0.out 2>&1 &
h0=$!
wait_until 20 grep -q accepted $T/h0.out || fail "alice's held save: $(cat $T/h0.out)"
out=$(ctl_as $B flush --timeout 10 --json 2>&1) || fail "bob's flush waited for alice's save: $out"
echo "$out" | python3 -c 'import json,sys; o=json.load(sys.stdin); sys.exit(o["committed"] or o["failed"])' ||
	fail "bob's flush counted alice's saves: $out"
ctl_as $A flush --timeout 1 > $T/fa.out 2>&1 && fail "alice's flush did not wait for her step"
as $A "$TOP/build/tests/holdsave" -s "$SOCK" -j aflush -r 1 -w 2 -m 1 -t 1 > $T/h1.out 2>&1 ||
	fail "alice rank 1: $(cat $T/h1.out)"
wait $h0 || fail "alice's held save: $(cat $T/h0.out)"

ajob_idle() { ! ckptctl status --json | names | grep -q ajob; }
wait_until 10 ajob_idle || fail "ajob stays in memory after alice left"
mv "$ROOT/ajob/job.json" $T/ajob.json
for u in $B $A; do
	out=$(tr_as $u save -j ajob --mib 1 --steps 5 2>&1) && fail "$u took over ajob without its job.json"
	echo "$out" | grep -q "not a ckpt job directory" || fail "$u: unclear refusal: $out"
done
[ ! -e "$ROOT/ajob/job.json" ] || fail "a user wrote ajob's job.json"
mv $T/ajob.json "$ROOT/ajob/job.json"

# a job an older ckptd left open to the group is closed at start-up
stop_ckptd
python3 - "$ROOT/ajob" <<'PY' || fail "cannot open ajob up"
import os, sys
for a in ("system.posix_acl_access", "system.posix_acl_default"):
    try: os.removexattr(sys.argv[1], a)
    except OSError: pass
os.chmod(sys.argv[1], 0o750)
PY
as $B ls "$ROOT/ajob" > /dev/null 2>&1 || fail "the old-style job is not open to bob (test set-up)"
start_svc
closed_to $B ajob "after start-up"
as $A "$TOP/ckptctl" verify "$ROOT/ajob/$IT" > $T/va.out 2>&1 || fail "alice after start-up: $(cat $T/va.out)"
tr_as $A restore -j ajob --mib 1 --expect 2 > /dev/null || fail "alice's restore"
pass
