# Operators change the root under a running daemon; the job directory on
# disk is the truth, checked before each step, while one trainer stays
# connected (the job stays in ckptd's memory):
# - rm -rf <root>/<job>: the next save works (the directory is made again);
# - mv <root>/<job> <root>/<job>-archive: the next saves land in
#   <root>/<job>, not in the archive, and a restore reads <root>/<job>;
# - the newest checkpoints removed by hand (30 and 20 of 10, 20, 30): the
#   next commit (11) points latest at what is there; `ckptctl list` shows
#   it as latest and the job verifies offline.
# And idle jobs leave: 400 short-lived jobs do not grow ckptd's fd count
# and are not in `ckptctl status` once their trainers are gone.  A root
# moved away as a whole refuses saves (clearly) until it is back.
. "$(dirname "$0")/lib.sh"
start_ckptd
export PYTHONPATH=$TOP/client/python CKPT_LIB=$TOP/libckpt.so
PRE=   # a SANITIZE=address build: its runtime must come first in python
ldd "$TOP/libckpt.so" 2>/dev/null | grep -q libasan && PRE=$(gcc -print-file-name=libasan.so)
pyck() { ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0} LD_PRELOAD="$PRE" python3 "$@"; }
pyck - "$SOCK" "$ROOT" > $T/py.out 2>&1 <<'PY' || { cat $T/py.out; fail "operator scenario"; }
import os, shutil, subprocess, sys, json
import ckpt
sock, root = sys.argv[1:]
J = os.path.join(root, "j")
c = ckpt.Client("j", 0, 1, socket=sock)
def save(step):
    c.put_blob("progress", b"step %d" % step)
    c.save(step).wait("committed", timeout=60)
def latest():
    return open(os.path.join(J, "latest_checkpoint.txt")).read().strip()
def restored():
    r = c.restore()
    return r.step, c.get_blob("progress")
for s in (1, 2, 3):
    save(s)
assert restored() == (3, b"step 3"), restored()

# rm -rf the job directory: the next save makes it again
shutil.rmtree(J)
save(4)
assert os.path.isfile(os.path.join(J, "job.json")), os.listdir(J)
assert latest() == "iter_000000004", latest()
assert sorted(x for x in os.listdir(J) if x.startswith("iter_")) == ["iter_000000004"]
print("rm -rf: step 4 saved into a new", J)

# mv it to an archive: later saves go to <root>/j, not to the archive
os.rename(J, J + "-archive")
try:
    restored()
    raise AssertionError("restore read the archive")
except ckpt.NoCheckpoint as e:
    print("restore after mv:", e)
save(5)
save(6)
assert latest() == "iter_000000006", latest()
arch = sorted(os.listdir(J + "-archive"))
assert not any(x in arch for x in ("iter_000000005", "iter_000000006")), arch
assert os.path.isdir(os.path.join(J, "iter_000000005"))
assert restored() == (6, b"step 6"), restored()
print("mv: steps 5, 6 in", J, "; archive holds", arch)

# roll back by hand: remove the newest checkpoints, the next commit fixes latest
shutil.rmtree(J)
for s in (10, 20, 30):
    save(s)
shutil.rmtree(os.path.join(J, "iter_000000030"))
shutil.rmtree(os.path.join(J, "iter_000000020"))
assert latest() == "iter_000000030"
save(11)
assert latest() == "iter_000000011", latest()
assert restored() == (11, b"step 11"), restored()
print("roll back: latest", latest())
c.close()
PY
sed 's/^/# /' $T/py.out
ckptctl list --job j --json > $T/list.json || fail "ckptctl list"
python3 -c '
import json, sys
cp = json.load(open(sys.argv[1]))["checkpoints"]
lat = [c["step"] for c in cp if c["latest"]]
assert lat == [11], cp
' $T/list.json || fail "ckptctl list after the roll back: $(cat $T/list.json)"
verify_latest j
"$TOP/ckptctl" verify "$ROOT/j" > $T/v.out 2>&1 || fail "ckptctl verify of the job: $(cat $T/v.out)"
grep -q "job j: its directory was removed or moved away; made it again" $LOG || fail "no log line"

# idle jobs leave memory, fds and status
fds() { ls /proc/$CKPTD_PID/fd | wc -l; }
pyck - "$SOCK" 5 <<'PY' || fail "warm-up jobs"
import sys, ckpt
for i in range(int(sys.argv[2])):
    c = ckpt.Client("warm%d" % i, 0, 1, socket=sys.argv[1])
    c.put_blob("b", b"x"); c.save(1).wait("committed", timeout=60); c.close()
PY
njobs() { ckptctl status --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["jobs"]))'; }
no_jobs() { [ "$(njobs 2>/dev/null)" = 0 ]; }
wait_until 10 no_jobs || fail "warm-up jobs still in status: $(ckptctl status)"
before=$(fds)
pyck - "$SOCK" 400 <<'PY' || fail "400 short-lived jobs"
import sys, ckpt
for i in range(int(sys.argv[2])):
    c = ckpt.Client("batch%03d" % i, 0, 1, socket=sys.argv[1])
    c.put_blob("b", b"x"); c.save(1).wait("committed", timeout=60); c.close()
PY
wait_until 10 no_jobs
n=$(njobs); after=$(fds)
log "fds before $before, after 400 jobs $after; jobs in status: $n"
[ "$n" = 0 ] || fail "$n idle jobs still in ckptctl status"
[ "$after" -le $((before + 2)) ] || fail "fd count grew from $before to $after over 400 short-lived jobs"
[ -d "$ROOT/batch399/iter_000000001" ] || fail "batch399 was not saved"
trainer save -j batch007 --mib 1 --steps 2 -q || fail "a released job saves again"
# a job whose last work is a prune leaves too, with nothing else going on
write_conf '"keep_last": 1'
kill -HUP $CKPTD_PID
wait_until 10 grep -q "SIGHUP: configuration reloaded" $LOG || fail "no reload"
trainer save -j pruned --mib 1 --steps 1:2 -q || fail "saves with keep_last 1"
wait_until 10 no_jobs || fail "a pruned job stays in status: $(ckptctl status)"

# the whole root moved away: saves are refused, nothing is written elsewhere
mv "$ROOT" "$ROOT.moved"
out=$(trainer save -j batch007 --mib 1 --steps 3 2>&1) && fail "a save with the root moved away"
echo "$out" | grep -q "the checkpoint root '$ROOT' was moved or removed while ckptd ran; restart ckptd" ||
	fail "unclear refusal with the root moved: $out"
[ ! -e "$ROOT" ] && [ ! -e "$ROOT.moved/batch007/iter_000000003" ] || fail "the save was written somewhere"
mv "$ROOT.moved" "$ROOT"
trainer save -j batch007 --mib 1 --steps 3 -q || fail "save after the root came back"
pass
