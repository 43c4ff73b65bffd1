# The root is ckptd's own (README.md "The root, jobs, and who sees what"):
# - a second ckptd on the same root (same config, or another socket, or
#   after the lock file was removed by hand) is refused by the root's lock
#   before it touches anything: the running daemon's in-flight staging
#   directory survives;
# - start-up recovery touches only directories with ckptd's job marker
#   (job.json) and only names ckptd creates: a user's draft.tmp and
#   build.tmp/ tree survive, inside a job and in a directory that is not one;
# - `ckptd -n` and start-up refuse a root that is not dedicated ("/", a
#   non-empty directory without the marker) with a clear error and change
#   nothing; an empty directory and an older ckptd's root are accepted;
# - the marker is written whole or not at all (a full disk: a clear error,
#   no marker; a short write is continued);
# - a regular file at the socket path is an error and is never removed; a
#   stale socket nobody listens on is replaced.
. "$(dirname "$0")/lib.sh"
STAGING=.iter_000000009.staging-0123456789abcdef0123456789abcdef
start_ckptd
trainer save -j job1 --mib 1 --steps 1:2 -q || fail "first save"
[ -f "$ROOT/.ckpt-root" ] || fail "no marker in the root"
[ -f "$ROOT/.ckptd.lock" ] || fail "no lock file in the root"
grep -q "pid $CKPTD_PID" "$ROOT/.ckptd.lock" || fail "lock file: $(cat "$ROOT/.ckptd.lock")"

# a save in flight, as the running daemon would have it on disk
mkdir -p "$ROOT/job1/$STAGING/model"
echo data > "$ROOT/job1/$STAGING/model/rank_00000.safetensors"

# same config
"$TOP/ckptd" -c "$CONF" > $T/second.log 2>&1 && fail "a second ckptd with the same config started"
grep -q "socket '$SOCK' is in use: another ckptd listens on it" $T/second.log ||
	fail "second ckptd: unclear refusal: $(cat $T/second.log)"
log "same config: $(grep 'in use' $T/second.log)"
[ -d "$ROOT/job1/$STAGING/model" ] || fail "the second ckptd removed the first one's staging directory"
# another socket, same root
sed "s|$SOCK|$T/other.sock|" "$CONF" > $T/other.json
"$TOP/ckptd" -c $T/other.json > $T/other.log 2>&1 && fail "a ckptd on another socket started on the same root"
grep -q "is in use by another ckptd" $T/other.log || fail "other socket: unclear refusal: $(cat $T/other.log)"
[ -d "$ROOT/job1/$STAGING/model" ] || fail "the ckptd on another socket removed the staging directory"
[ ! -e $T/other.sock ] || fail "the refused ckptd created its socket"
# the lock file removed by hand: the root directory's own lock still holds
rm "$ROOT/.ckptd.lock"
"$TOP/ckptd" -c $T/other.json > $T/other2.log 2>&1 && fail "a ckptd started after the lock file was removed"
grep -q "is in use by another ckptd" $T/other2.log || fail "removed lock file: $(cat $T/other2.log)"
[ -d "$ROOT/job1/$STAGING/model" ] || fail "staging removed after the lock file was removed"
assert_alive
trainer save -j job1 --mib 1 --steps 3 -q || fail "the first daemon's save after the refusals"
stop_ckptd || fail "ckptd did not stop cleanly"
[ ! -e "$SOCK" ] || fail "socket left after a clean stop"

# users' files: in a job directory and in a directory that is not a job
mkdir -p "$ROOT/job1/build.tmp/sub" "$ROOT/alice/build.tmp/sub"
for d in "$ROOT/job1" "$ROOT/alice"; do
	echo mine > "$d/draft.tmp"; echo mine > "$d/build.tmp/sub/obj.tmp"
done
mkdir "$ROOT/alice/.iter_000000001.staging-abc"
echo iter_000000001 > "$ROOT/alice/latest_checkpoint.txt"
restart_ckptd_n
for d in "$ROOT/job1" "$ROOT/alice"; do
	[ -f "$d/draft.tmp" ] && [ -f "$d/build.tmp/sub/obj.tmp" ] || fail "recovery removed a user's file in $d"
done
[ -d "$ROOT/alice/.iter_000000001.staging-abc" ] || fail "recovery touched a directory without job.json"
[ "$(cat "$ROOT/alice/latest_checkpoint.txt")" = iter_000000001 ] || fail "recovery rewrote alice's latest"
[ ! -e "$ROOT/job1/$STAGING" ] || fail "recovery left the job's staging leftover"
grep -q "'alice' has no valid job.json: not a ckpt job, left alone" $LOG || fail "no log line for alice"
# a trainer cannot turn someone's directory into a job
out=$(trainer save -j alice --mib 1 --steps 1 2>&1) && fail "a save adopted alice's directory"
log "save into alice: $out"
echo "$out" | grep -q "not a ckpt job directory" || fail "unclear refusal: $out"
[ ! -e "$ROOT/alice/job.json" ] || fail "job.json written into alice's directory"
stop_ckptd

# roots that are not dedicated
nondedicated() {   # root, what
	write_conf "\"root\": \"$1\""
	out=$("$TOP/ckptd" -n -c "$CONF" 2>&1) && fail "ckptd -n accepted $2: $out"
	echo "$out" | grep -q "is not empty and not a ckpt root" || fail "-n, $2: unclear: $out"
	log "-n, $2: $out"
	timeout 20 "$TOP/ckptd" -c "$CONF" > $T/nd.log 2>&1 && fail "ckptd started on $2"
	grep -q "is not empty and not a ckpt root" $T/nd.log || fail "start, $2: $(cat $T/nd.log)"
}
nondedicated / "the root of the file system"
[ ! -e /.ckpt-root ] && [ ! -e /.ckptd.lock ] || fail "ckptd wrote into /"
mkdir $T/home; echo hello > $T/home/notes.txt; mkdir $T/home/alice
nondedicated $T/home "a user's directory"
[ "$(ls -A $T/home | tr '\n' ' ')" = "alice notes.txt " ] || fail "ckptd changed $T/home: $(ls -A $T/home)"
# an empty directory, a missing one, an older ckptd's root: accepted
mkdir $T/empty
for r in $T/empty $T/missing/deeper "$ROOT"; do
	write_conf "\"root\": \"$r\""
	"$TOP/ckptd" -n -c "$CONF" > $T/n.out 2>&1 || fail "ckptd -n refused $r: $(cat $T/n.out)"
done
[ ! -e $T/missing ] || fail "ckptd -n created the root"
rm -f "$ROOT/.ckpt-root" "$ROOT/.ckptd.lock"; rm -rf "$ROOT/alice"
write_conf
# the marker goes through the I/O table, whole or not at all: a full disk
# at its write is a clear error and leaves no marker (nor its temp file);
# a short write is continued
CKPT_FAULT=write:1:-28 timeout 20 "$TOP/ckptd" -c "$CONF" > $T/mk.log 2>&1 &&
	fail "ckptd started although the marker could not be written"
grep -q "cannot write the marker '$ROOT/.ckpt-root': No space left on device" $T/mk.log ||
	fail "marker on a full disk: unclear error: $(cat $T/mk.log)"
[ -z "$(ls -A "$ROOT" | grep ckpt-root)" ] || fail "a failed marker write left $(ls -A "$ROOT")"
CKPT_FAULT=write:1:short restart_ckptd_n
[ "$(cat "$ROOT/.ckpt-root")" = "ckpt root" ] || fail "marker after a short write: $(cat "$ROOT/.ckpt-root")"
stop_ckptd
rm -f "$ROOT/.ckpt-root" "$ROOT/.ckptd.lock"
# a crash's leftover temp marker does not make the root someone else's
echo "ckpt r" > "$ROOT/.ckpt-root.0123456789abcdef0123456789abcdef.tmp"
restart_ckptd_n
[ -f "$ROOT/.ckpt-root" ] || fail "an older ckptd's root was not marked"
trainer restore -j job1 --mib 1 --expect 3 > /dev/null || fail "restore from the adopted root"
stop_ckptd

# the socket path: a regular file is an error and stays; a stale socket goes
echo '{"precious": true}' > "$SOCK"
out=$("$TOP/ckptd" -n -c "$CONF" 2>&1) && fail "ckptd -n accepted a regular file at the socket path"
echo "$out" | grep -q "exists and is not a socket" || fail "-n socket: unclear: $out"
timeout 20 "$TOP/ckptd" -c "$CONF" > $T/sock.log 2>&1 && fail "ckptd started over a regular file"
grep -q "socket path '$SOCK' exists and is not a socket; ckptd never removes it" $T/sock.log ||
	fail "socket: unclear error: $(cat $T/sock.log)"
[ "$(cat "$SOCK")" = '{"precious": true}' ] || fail "the file at the socket path was changed"
rm "$SOCK"
python3 -c 'import socket,sys; s=socket.socket(socket.AF_UNIX); s.bind(sys.argv[1])' "$SOCK"
[ -S "$SOCK" ] || fail "no stale socket made"
restart_ckptd_n
trainer restore -j job1 --mib 1 --expect 3 > /dev/null || fail "restore after replacing a stale socket"
pass
