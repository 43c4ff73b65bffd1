# A save several times larger than the staging pool (8 MiB pool, 1 MiB
# chunks, 48 MiB save) streams through it: it completes, restores bit for
# bit, the pool reports waits (backpressure), and the daemon's own memory
# stays below pool + 40 MiB while saving and restoring, and grows by far
# less than the save.  "Own memory" is VmRSS less RssShmem: the trainer's
# tensors are shared memory the daemon maps (its pages count in VmRSS once
# read), but they are the trainer's allocation, not the daemon's.
. "$(dirname "$0")/lib.sh"
start_ckptd '"staging_bytes": "8MiB"' '"chunk_bytes": "1MiB"'
asan=0
grep -q __asan_init "$TOP/ckptd" 2> /dev/null && asan=1   # shadow memory inflates RSS

python3 - "$CKPTD_PID" "$T/stop" > $T/rss.out <<'PY' &
import os, sys, time
pid, stop = sys.argv[1], sys.argv[2]
peak = {}
try:
    while True:
        with open("/proc/%s/status" % pid) as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in ("VmRSS", "RssAnon", "RssShmem", "RssFile"):
                    peak[k] = max(peak.get(k, 0), int(v.split()[0]))
        time.sleep(0.002)
        if os.path.exists(stop):
            break
except (FileNotFoundError, ProcessLookupError):
    pass
print(" ".join("%s=%d" % kv for kv in sorted(peak.items())))
PY
ps=$!
base=$(awk '/^RssAnon/ {print $2}' /proc/$CKPTD_PID/status)
trainer save -j big --mib 48 --steps 1:2 > $T/save.out 2>&1 || fail "48 MiB save: $(cat $T/save.out)"
log "$(cat $T/save.out)"
trainer restore -j big --mib 48 --expect 2 > $T/restore.out 2>&1 || fail "restore: $(cat $T/restore.out)"
touch $T/stop
wait $ps
log "daemon memory (KiB): baseline RssAnon=$base, peaks: $(cat $T/rss.out)"
peak_anon=$(sed -n 's/.*RssAnon=\([0-9]*\).*/\1/p' $T/rss.out)
[ -n "$peak_anon" ] || fail "no memory samples"
verify_latest big
out=$(ckptctl status --json) || fail "status"
waits=$(echo "$out" | python3 -c 'import json,sys; p=json.load(sys.stdin)["pool"]; assert p["total"] == 8<<20, p; print(p["waits"])') ||
	fail "pool total is not 8 MiB: $out"
[ "$waits" -gt 0 ] || fail "the pool never had to wait: the save cannot have streamed through it"
log "pool waits: $waits"
growth=$((peak_anon - base))
[ $growth -lt $((32 * 1024)) ] || fail "RssAnon grew by $growth KiB during a 48 MiB save"
if [ $asan = 0 ]; then
	peak_file=$(sed -n 's/.*RssFile=\([0-9]*\).*/\1/p' $T/rss.out)
	[ $((peak_anon + peak_file)) -lt $(((8 + 40) * 1024)) ] ||
		fail "RssAnon + RssFile peaked at $((peak_anon + peak_file)) KiB > pool + 40 MiB"
else
	log "ASan build: the absolute bound is not checked (shadow memory)"
fi
pass
