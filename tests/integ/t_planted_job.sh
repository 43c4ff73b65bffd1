# Nobody but ckptd's user may put things under the root that ckptd then
# treats as its own (issue 11, F1; README.md "The root, jobs, and who sees
# what"):
# - `ckptd -n` and start-up refuse a root owned by another user, or one
#   that others may write into (mode 0777), and create nothing in it;
# - a job directory, or a job.json, that ckptd did not make (another
#   owner, or writable by others) is never adopted: a save into it is
#   refused with a clear error and nothing is written there; start-up
#   recovery leaves it alone;
# - a job whose directory cannot be closed to others (its ACL cannot be
#   set) is an error for that job, not a warning.
# Needs root (chown, chattr); ckptd runs as root here, uid 4242 stands for
# another user.
. "$(dirname "$0")/lib.sh"
[ "$(id -u)" = 0 ] || skip "needs root to chown"
OTHER=4242

refused_root() {   # root dir, expected words, what
	write_conf "\"root\": \"$1\""
	out=$("$TOP/ckptd" -n -c "$CONF" 2>&1) && fail "ckptd -n accepted $3: $out"
	echo "$out" | grep -q "$2" || fail "-n, $3: unclear: $out"
	log "-n, $3: $out"
	timeout 20 "$TOP/ckptd" -c "$CONF" > $T/r.log 2>&1 && fail "ckptd started on $3"
	grep -q "$2" $T/r.log || fail "start, $3: $(cat $T/r.log)"
	[ -z "$(ls -A "$1")" ] || fail "ckptd wrote into $3: $(ls -A "$1")"
	[ ! -e "$SOCK" ] || fail "a socket was made for $3"
}
mkdir -m 0700 $T/bobs && chown $OTHER $T/bobs
refused_root $T/bobs "is owned by uid $OTHER, not ckptd's uid 0: it must be ckptd's own" \
	"a root owned by another user"
mkdir -m 0777 $T/open && chmod 0777 $T/open
refused_root $T/open "is writable by group and others (mode 0777): it must be ckptd's own" \
	"a root everyone may write into"
mkdir -m 0775 $T/grp && chmod 0775 $T/grp
refused_root $T/grp "is writable by its group (mode 0775)" "a group-writable root"

start_ckptd
trainer save -j mine --mib 1 --steps 1 -q || fail "a save into a job of ckptd's own"
plant() {   # job, dir owner, dir mode, job.json owner, job.json mode
	mkdir -m "$3" "$ROOT/$1" && chmod "$3" "$ROOT/$1" && chown "$2" "$ROOT/$1"
	echo "{\"owner_uid\": 0, \"run_id\": \"0123456789abcdef0123456789abcdef\"}" > "$ROOT/$1/job.json"
	chown "$4" "$ROOT/$1/job.json" && chmod "$5" "$ROOT/$1/job.json"
}
planted_refused() {   # job, expected words, what
	out=$(trainer save -j "$1" --mib 1 --steps 1 2>&1) && fail "a save adopted $3"
	echo "$out" | grep -q "'$1' under the root was not made by ckptd ($2): not used" ||
		fail "$3: unclear refusal: $out"
	log "$3: $out"
	[ "$(ls -A "$ROOT/$1")" = job.json ] || fail "ckptd wrote into $3: $(ls -A "$ROOT/$1")"
	! getfacl -p "$ROOT/$1" 2>/dev/null | grep -q "^user:0:" || fail "ckptd set an ACL on $3"
}
plant bobjob $OTHER 0777 $OTHER 0644
planted_refused bobjob "owned by uid $OTHER, not ckptd's uid 0" "another user's directory"
plant openjob 0 0777 0 0644
planted_refused openjob "writable by group and others (mode 0777)" "a directory everyone may write into"
plant fakejson 0 0750 $OTHER 0644
planted_refused fakejson "its job.json is owned by uid $OTHER, not ckptd's uid 0" \
	"a job.json another user wrote"
plant wjson 0 0750 0 0666
planted_refused wjson "its job.json is writable by group and others (mode 0666)" \
	"a job.json everyone may write"
out=$(ckptctl list --job bobjob 2>&1)
echo "$out" | grep -q "iter_" && fail "ckptctl list shows a planted job: $out"

# recovery leaves planted directories alone; the root stays ours
mkdir "$ROOT/bobjob/.iter_000000001.staging-abc"
stop_ckptd
restart_ckptd_n
grep -q "'bobjob' under the root was not made by ckptd (owned by uid $OTHER, not ckptd's uid 0): left alone" $LOG ||
	fail "no log line for the planted job at recovery"
[ -d "$ROOT/bobjob/.iter_000000001.staging-abc" ] || fail "recovery touched a planted directory"
trainer save -j mine --mib 1 --steps 2 -q || fail "a save after the restart"
# names like ckptd's leftovers in its own job: removed only when ckptd's
# uid made them (another user's stay, also when a prune needs the name),
# and only in the exact pattern (".staging-" and a txid or "pruned")
TX=0123456789abcdef0123456789abcdef
mkdir "$ROOT/mine/.iter_000000001.staging-pruned" "$ROOT/mine/.iter_000000009.staging-$TX" \
	"$ROOT/mine/.iter_000000009.staging-mine"
echo precious > "$ROOT/mine/.iter_000000001.staging-pruned/keep"
chown -R $OTHER "$ROOT/mine/.iter_000000001.staging-pruned" "$ROOT/mine/.iter_000000009.staging-$TX"
ckptctl prune --job mine --keep 1 > /dev/null
grep -q "prune: cannot rename iter_000000001: '.iter_000000001.staging-pruned' exists and is not ckptd's" $LOG ||
	fail "no log line for the prune that found another user's name"
[ -d "$ROOT/mine/iter_000000001" ] || fail "the prune lost iter_000000001 without moving it aside"
stop_ckptd
restart_ckptd_n
grep -q "mine: '.iter_000000009.staging-$TX' is named like ckptd's leftovers but owned by uid $OTHER, not ckptd's: left alone" $LOG ||
	fail "no log line for another user's leftover name at recovery"
for d in .iter_000000001.staging-pruned .iter_000000009.staging-$TX .iter_000000009.staging-mine; do
	[ -d "$ROOT/mine/$d" ] || fail "$d was removed"
done
grep -q precious "$ROOT/mine/.iter_000000001.staging-pruned/keep" || fail "another user's file was touched"
rm -rf "$ROOT"/mine/.iter_00000000[19].staging-*
ckptctl prune --job mine --keep 1 > /dev/null
wait_until 5 test ! -e "$ROOT/mine/iter_000000001" || fail "iter_000000001 not pruned once the name was free"
grep -q "job mine: pruned iter_000000001 (ckptctl prune --keep 1, uid 0)" $LOG ||
	fail "no log line for ckptctl's prune"
stop_ckptd
# a root without marker (an older ckptd's) is not accepted for a planted job in it
rm -f "$ROOT/.ckpt-root" "$ROOT/.ckptd.lock"
write_conf
out=$("$TOP/ckptd" -n -c "$CONF" 2>&1) && fail "an unmarked root with a planted job was accepted: $out"
echo "$out" | grep -q "is not empty and not a ckpt root" || fail "unmarked root: unclear: $out"
rm -rf "$ROOT"/bobjob "$ROOT"/openjob "$ROOT"/fakejson "$ROOT"/wjson
restart_ckptd_n

# the job's directory cannot be closed to others: the job is not used
# (its ACL removed by hand, then the directory made immutable)
stop_ckptd
python3 -c 'import os, sys
for a in ("system.posix_acl_access", "system.posix_acl_default"):
    os.removexattr(sys.argv[1], a)' "$ROOT/mine" || fail "cannot remove the ACL of $ROOT/mine"
chmod 0755 "$ROOT/mine"
if command -v chattr > /dev/null && chattr +i "$ROOT/mine" 2>/dev/null; then
	restart_ckptd_n
	out=$(trainer save -j mine --mib 1 --steps 3 2>&1) && { chattr -i "$ROOT/mine"; fail "a save into a job that cannot be protected"; }
	chattr -i "$ROOT/mine"
	echo "$out" | grep -q "cannot restrict access to job 'mine' to its owner: Operation not permitted; not used" ||
		fail "ACL failure: unclear: $out"
	log "ACL failure: $out"
	trainer save -j mine --mib 1 --steps 3 -q || fail "a save once the ACL can be set"
	getfacl -p "$ROOT/mine" 2>/dev/null | grep -q "^other::---" || [ ! -x "$(command -v getfacl)" ] ||
		fail "the job was not closed again: $(getfacl -p "$ROOT/mine")"
else
	log "no chattr +i here: the ACL failure is not tested"
	restart_ckptd_n
fi
stop_ckptd || fail "ckptd did not stop cleanly"
pass
