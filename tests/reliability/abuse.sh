#!/bin/bash
# abuse.sh - abuse and isolation campaign.
#   1. two real users (useradd -M ckptA, ckptB; removed at the end): B cannot
#      save, restore, list or prune A's job, A's data unchanged;
#   2. names with .., /, NUL, overlong, unicode lookalikes refused (raw
#      protocol, tests/integ/bad_names.py), nothing created outside the root;
#   3. symlinks planted in the root (a job dir -> elsewhere), in a job dir
#      (iter_*, latest tmp, latest) and inside staging dirs while saving are
#      never followed: nothing is written outside the root;
#   4. abuse.py: 1,100 connections, 4 GiB headers, one byte per second, 250
#      fds in a message, wrong fd types, unsealed / truncated memfds: each
#      refused, others served, fds and RSS back near their start;
#   5. a low fd limit (ulimit -n 128) with 300 connections: accept fails
#      with EMFILE; ckptd must not spin, and serves again afterwards.
#   abuse.sh [--long]   (--long: 5 rounds of abuse.py)
. "$(dirname "$0")/rlib.sh"
[ "$(id -u)" = 0 ] || skip "needs root (useradd, setpriv)"
command -v useradd > /dev/null && command -v setpriv > /dev/null || skip "no useradd/setpriv"
USERS=()
ELSE=
rel_cleanup() {
	for u in "${USERS[@]}"; do userdel "$u" 2>/dev/null; done
	[ -n "$ELSE" ] && rm -rf "$ELSE"
	cleanup
}
trap rel_cleanup EXIT
for u in ckptA ckptB; do
	id $u > /dev/null 2>&1 || { useradd -M -s /usr/sbin/nologin $u || skip "useradd $u failed"; USERS+=($u); }
done
chmod 755 "$T"
ELSE=$(mktemp -d /tmp/ckpt-elsewhere.XXXXXX)
chmod 777 "$ELSE"
as() { local u=$1; shift; setpriv --reuid=$u --regid=$u --clear-groups "$@"; }
start_ckptd '"socket_mode": "0666"' '"msg_timeout_ms": 2000' '"keep_last": 0' '"log_level": "info"'

# 1. two users
as ckptA "$TRAINER" save -s "$SOCK" -j ajob --mib 1 --steps 1 -q || fail "A's save"
for cmd in "save --steps 2" restore; do
	out=$(as ckptB "$TRAINER" $cmd -s "$SOCK" -j ajob --mib 1 2>&1) && fail "B could $cmd A's job"
	echo "$out" | grep -qi "not permitted\|belongs to another user" || fail "B $cmd: unclear refusal: $out"
done
out=$(as ckptB "$TOP/ckptctl" -s "$SOCK" prune --job ajob --keep 1 2>&1) && fail "B could prune A's job"
as ckptB "$TOP/ckptctl" -s "$SOCK" list 2>&1 | grep -q ajob && fail "B's list shows A's job"
as ckptB "$TOP/ckptctl" -s "$SOCK" list --job ajob 2>&1 | grep -q iter_ && fail "B's list --job shows A's job"
as ckptB "$TRAINER" save -s "$SOCK" -j bjob --mib 1 --steps 1 -q || fail "B's own save"
as ckptA "$TRAINER" restore -s "$SOCK" -j bjob --mib 1 > /dev/null 2>&1 && fail "A could restore B's job"
as ckptA "$TRAINER" restore -s "$SOCK" -j ajob --mib 1 --expect 1 > /dev/null || fail "A's restore"
[ "$(latest_of ajob)" = iter_000000001 ] || fail "A's latest is $(latest_of ajob)"
log "users: B refused save/restore/prune/list of A's job and vice versa"

# 2. names
TOK=relTOK$$
python3 "$TOP/tests/integ/bad_names.py" "$SOCK" "$TOK" > "$T/names.out" 2>&1
probs=$(grep '^PROBLEM' "$T/names.out")
[ -z "$probs" ] || fail "bad names: $(echo "$probs" | tail -5)"
n=$(grep -c '^refused' "$T/names.out")
found=$(find /tmp "$T" / -maxdepth 3 -name "*$TOK*" -not -path "/proc/*" 2>/dev/null | head -3)
[ -z "$found" ] || fail "a bad name created $found"
log "names: $n bad job/group/blob names refused, nothing created"

# 3. symlinks
ln -s "$ELSE" "$ROOT/evil"
trainer save -j evil --mib 1 --steps 1 -q > "$T/sl.out" 2>&1 && fail "a save into a symlinked job dir succeeded"
trainer restore -j evil --mib 1 > /dev/null 2>&1 && fail "a restore through a symlinked job dir succeeded"
trainer save -j sj --mib 1 --steps 1 -q || fail "sj: first save"
mkdir -p "$ELSE/iter_000000009"
ln -s "$ELSE/iter_000000009" "$ROOT/sj/iter_000000009"
ln -s "$ELSE/owned" "$ROOT/sj/latest_checkpoint.txt.tmp"
trainer restore -j sj --mib 1 --step 9 > /dev/null 2>&1 && fail "restore followed a symlinked iter dir"
trainer save -j sj --mib 1 --steps 9 -q > "$T/sl9.out" 2>&1 && log "sj step 9 saved despite the planted iter_9 symlink?"
# the latest temp name is ckptd's: a symlink planted there is removed
trainer save -j sj --mib 1 --steps 2 -q > "$T/sl2.out" 2>&1 ||
	fail "sj: step 2 with a planted latest tmp symlink: $(tail -1 $T/sl2.out)"
[ -e "$ELSE/owned" ] && fail "latest was written through the planted symlink"
[ "$(latest_of sj)" = iter_000000002 ] || fail "sj: latest is $(latest_of sj) after step 2"
rm -f "$ROOT/sj/iter_000000009"
assert_alive
# inside staging dirs, while saving: a watcher plants symlinks to $ELSE
python3 - "$ROOT/sj" "$ELSE" > "$T/plant.out" <<'PY' &
import os, sys, time
d, else_ = sys.argv[1], sys.argv[2]
end, n = time.time() + 15, 0
while time.time() < end and not os.path.exists(d + "/../../stop"):
    try:
        names = [x for x in os.listdir(d) if x.startswith(".iter_") and ".staging-" in x]
    except FileNotFoundError:
        names = []
    for s in names:
        for sub in ("model", "optim", "extra", "extra/rank_00000", "model/rank_00000.safetensors",
                    "optim/rank_00000.safetensors", "extra/rank_00000/rng",
                    "checkpoint_manifest.json", "checkpoint_manifest.json.tmp"):
            try:
                os.symlink(else_ + "/" + sub.replace("/", "_"), os.path.join(d, s, sub)); n += 1
            except OSError:
                pass
    time.sleep(0.0002)
print(n)
PY
pw=$!
for s in 3 4 5 6 7 8; do trainer save -j sj --mib 2 --steps $s -q >> "$T/slst.out" 2>&1; done
touch "$T/stop"; wait $pw
outside=$(find "$ELSE" -type f -newer "$CONF" 2>/dev/null; find "$ELSE" -maxdepth 1 -type f)
[ -z "$outside" ] || fail "files written outside the root: $outside"
[ -z "$(ls -A "$ELSE/iter_000000009")" ] || fail "something written into the symlinked iter dir"
verify_latest sj
assert_alive
# a symlink planted just before the rename travels into the published dir
# (anyone who can write into staging can do that); ckptd never creates
# symlinks, so remove those before looking for ckptd's own leftovers
carried=$(find "$ROOT/sj" -mindepth 2 -type l -path "$ROOT/sj/iter_*" -print -delete | wc -l)
# a save whose staging dir someone keeps writing into cannot remove it
# ("Directory not empty", logged); the next start-up recovery does
grep -q "cannot remove '.iter_" "$LOG" && { stop_ckptd; restart_ckptd_n; }
assert_no_leftovers
trainer restore -j sj --mib 2 > /dev/null 2>&1 || trainer restore -j sj --mib 1 > /dev/null ||
	fail "sj: restore after the symlink games"
planted=$(cat $T/plant.out 2>/dev/null)
log "symlinks: ${planted:-0} planted in staging dirs, $(grep -c . $T/slst.out) of 6 saves failed, ${carried} carried into published dirs, nothing written outside the root"

# 4. connection-level abuse
python3 "$(dirname "$0")/abuse.py" "$SOCK" "$CKPTD_PID" $([ $LONG = 1 ] && echo --long) ||
	fail "abuse.py found problems"
stop_ckptd

# 5. EMFILE: a low fd limit, more connections than it allows
(ulimit -n 128; exec "$TOP/ckptd" -c "$CONF" >> "$LOG" 2>&1) &
CKPTD_PID=$!
wait_until 10 eval '[ $(ready_count) -ge 2 ]' || fail "ckptd (ulimit 128) did not start"
python3 - "$SOCK" "$CKPTD_PID" <<'PY' > "$T/emfile.out" 2>&1 || fail "EMFILE: $(cat $T/emfile.out)"
import os, socket, sys, time, resource
sock, pid = sys.argv[1], int(sys.argv[2])
resource.setrlimit(resource.RLIMIT_NOFILE, (4096, 4096))
def cpu():
    with open("/proc/%d/stat" % pid) as f:
        v = f.read().rsplit(")", 1)[1].split()
    return (int(v[11]) + int(v[12])) / os.sysconf("SC_CLK_TCK")
cs = []
for i in range(300):
    s = socket.socket(socket.AF_UNIX); s.settimeout(2)
    try:
        s.connect(sock)
    except OSError:
        s.close(); break
    cs.append(s)
c0 = cpu(); time.sleep(2); c1 = cpu()
print("held %d connections; ckptd used %.2f s CPU in 2 s" % (len(cs), c1 - c0))
for s in cs: s.close()
if c1 - c0 > 1.0:
    print("ckptd spins at EMFILE"); sys.exit(1)
PY
log "EMFILE: $(head -1 $T/emfile.out)"
sleep 0.5
ckptctl status > /dev/null || fail "ckptd does not serve after EMFILE"
trainer save -j after-emfile --mib 1 --steps 1 -q || fail "save after EMFILE"
stop_ckptd
rm -rf "$ELSE"
echo "abuse campaign: users, $n names, symlinks, connection abuse, EMFILE: all refused cleanly"
pass
