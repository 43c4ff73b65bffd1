# Prometheus metrics over HTTP on loopback: the exposition parses (every
# sample belongs to a declared family, histograms are cumulative and end in
# +Inf = _count), counters move after saves, a failed step is counted by its
# errno name, SIGHUP moves the listener, and it is off by default.
. "$(dirname "$0")/lib.sh"
HOLD=$TOP/build/tests/holdsave
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
P1=$(free_port); P2=$(free_port)
while [ "$P2" = "$P1" ]; do P2=$(free_port); done

scrape() {   # port file
	python3 - "$1" > "$2" <<'PY'
import sys, urllib.request
r = urllib.request.urlopen("http://127.0.0.1:%s/metrics" % sys.argv[1], timeout=5)
assert r.status == 200, r.status
ct = r.headers["Content-Type"]
assert ct.startswith("text/plain") and "version=0.0.4" in ct, ct
sys.stdout.write(r.read().decode())
PY
}

# Parse the text format and print "name{labels} value" lines, sorted; fail
# on anything malformed.
cat > "$T/parse.py" <<'PY'
import math, re, sys
fam, out = {}, []
line_re = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([^}]*)\})? (\S+)$')
lab_re = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"(,|$)')
for ln in open(sys.argv[1]):
    ln = ln.rstrip("\n")
    if not ln:
        continue
    if ln.startswith("# HELP "):
        continue
    if ln.startswith("# TYPE "):
        _, _, name, typ = ln.split(" ", 3)
        assert typ in ("counter", "gauge", "histogram", "summary", "untyped"), ln
        assert name not in fam, "family declared twice: " + name
        fam[name] = typ
        continue
    assert not ln.startswith("#"), "stray comment: " + ln
    m = line_re.match(ln)
    assert m, "bad sample line: " + ln
    name, labels, value = m.group(1), m.group(3) or "", m.group(4)
    float(value)
    pos = 0
    while pos < len(labels):
        lm = lab_re.match(labels, pos)
        assert lm, "bad labels: " + ln
        pos = lm.end()
    base = re.sub(r'_(bucket|sum|count)$', '', name)
    typ = fam.get(name) or fam.get(base)
    assert typ, "sample without a TYPE: " + ln
    if typ == "counter":
        assert name.endswith("_total"), "counter without _total: " + name
        assert float(value) >= 0
    out.append((name, labels, float(value)))
# histograms: cumulative buckets, +Inf == _count
hist = {}
for name, labels, v in out:
    if name.endswith("_bucket"):
        le = re.search(r'le="([^"]*)"', labels).group(1)
        key = (name[:-7], re.sub(r',?le="[^"]*"', '', labels))
        hist.setdefault(key, []).append((math.inf if le == "+Inf" else float(le), v))
counts = {(n[:-6], l): v for n, l, v in out if n.endswith("_count")}
for key, b in hist.items():
    les = [x[0] for x in b]
    assert les == sorted(les) and les[-1] == math.inf, key
    vals = [x[1] for x in b]
    assert vals == sorted(vals), "buckets not cumulative: %s" % (key,)
    assert counts[key] == vals[-1], "+Inf != _count for %s" % (key,)
for n, l, v in out:
    print("%s{%s} %.17g" % (n, l, v))
PY
val() {   # parsed-file 'name{labels}'  -> value (0 if absent)
	awk -v k="$2" '$1 == k { print $2; f = 1 } END { if (!f) print 0 }' "$1"
}

start_ckptd "\"metrics_port\": $P1"
grep -q "metrics: http://127.0.0.1:$P1/metrics" "$LOG" || fail "no metrics log line"
scrape "$P1" "$T/m0.txt" || fail "scrape 0"
python3 "$T/parse.py" "$T/m0.txt" > "$T/p0" || fail "exposition does not parse"
for fam in ckptd_saves_committed_total ckptd_saves_failed_total ckptd_bytes_written_total \
	   ckptd_save_phase_seconds ckptd_pool_used_bytes ckptd_pool_size_bytes \
	   ckptd_clients ckptd_inflight_steps; do
	grep -q "^# TYPE $fam " "$T/m0.txt" || fail "family $fam missing"
done
[ "$(val "$T/p0" 'ckptd_pool_size_bytes{}')" = 67108864 ] || fail "pool size: $(val "$T/p0" 'ckptd_pool_size_bytes{}')"

# loopback only
grep -qi "$(printf '0100007F:%04X' "$P1")" /proc/net/tcp || fail "not listening on 127.0.0.1:$P1"
python3 - "$P1" <<'PY' || fail "HTTP errors"
import sys, urllib.request, urllib.error
base = "http://127.0.0.1:%s" % sys.argv[1]
for path, code in (("/nope", 404), ("/", 200)):
    try:
        c = urllib.request.urlopen(base + path, timeout=5).status
    except urllib.error.HTTPError as e:
        c = e.code
    assert c == code, (path, c)
try:
    urllib.request.urlopen(urllib.request.Request(base + "/metrics", data=b"x", method="POST"), timeout=5)
    raise SystemExit("POST accepted")
except urllib.error.HTTPError as e:
    assert e.code == 405, e.code
PY

# two saves: counters move
trainer save -j met --mib 4 --steps 1:2 -q || fail "saves"
# per-job series exist while the job has a trainer (idle jobs leave)
sleep 120 2>/dev/null | "$PROBE" idle -s "$SOCK" -j met -r 0 -w 1 --secs 120 > $T/hold 2>&1 &
hp=$!
wait_until 10 grep -q CONNECTED $T/hold || fail "probe idle: $(cat $T/hold)"
scrape "$P1" "$T/m1.txt" || fail "scrape 1"
python3 "$T/parse.py" "$T/m1.txt" > "$T/p1" || fail "exposition 1 does not parse"
c0=$(val "$T/p0" 'ckptd_saves_committed_total{}'); c1=$(val "$T/p1" 'ckptd_saves_committed_total{}')
[ "$c0" = 0 ] && [ "$c1" = 2 ] || fail "saves_committed $c0 -> $c1"
b1=$(val "$T/p1" 'ckptd_bytes_written_total{}')
python3 -c "import sys; sys.exit(0 if float('$b1') >= 8 * 2**20 else 1)" || fail "bytes_written $b1"
[ "$(val "$T/p1" 'ckptd_bytes_committed_total{}')" = "$b1" ] || fail "bytes_committed != bytes_written"
for ph in staged durable committed; do
	[ "$(val "$T/p1" "ckptd_save_phase_seconds_count{phase=\"$ph\"}")" = 2 ] || fail "$ph count"
done
[ "$(val "$T/p1" 'ckptd_job_last_committed_step{job="met"}')" = 2 ] || fail "job last step"
# one snapshot feeds both: ckptctl status says what the metrics say
ckptctl status --json > $T/st.json || fail "status --json"
scrape "$P1" "$T/m1b.txt" && python3 "$T/parse.py" "$T/m1b.txt" > "$T/p1b" || fail "scrape 1b"
python3 - "$T/st.json" "$T/p1b" <<'PY' || fail "status and metrics disagree"
import json, sys
st = json.load(open(sys.argv[1]))
m = {}
for ln in open(sys.argv[2]):
    k, v = ln.rsplit(" ", 1)
    m[k] = float(v)
job = [j for j in st["jobs"] if j["name"] == "met"][0]
pairs = [
    (st["saves_committed"], m["ckptd_saves_committed_total{}"]),
    (st["bytes_written"], m["ckptd_bytes_written_total{}"]),
    (st["pool"]["total"], m["ckptd_pool_size_bytes{}"]),
    (st["pool"]["used"], m["ckptd_pool_used_bytes{}"]),
    (st["pool"]["waits"], m["ckptd_pool_waits_total{}"]),
    (st["reply_queue_bytes"], m["ckptd_reply_queue_bytes{}"]),
    (len(st["jobs"]), m["ckptd_jobs{}"]),
    (job["last_committed_step"], m['ckptd_job_last_committed_step{job="met"}']),
    (job["last_committed_unix"], m.get('ckptd_job_last_commit_timestamp_seconds{job="met"}')),
    (job["ranks_connected"], m['ckptd_job_ranks_connected{job="met"}']),
    (job["world_size"], m['ckptd_job_world_size{job="met"}']),
]
bad = ["%d" % i for i, (a, b) in enumerate(pairs)
       if (a is None) != (b is None) or (a is not None and float(a) != b)]
if bad:
    sys.exit("pairs %s differ: %r" % (bad, pairs))
PY
kill $hp

# a failed step (rank 1 never comes): counted as ETIMEDOUT
stop_ckptd
cat > "$CONF" <<JSON
{"socket": "$SOCK", "root": "$ROOT", "staging_bytes": "64MiB", "chunk_bytes": "1MiB",
 "step_deadline_ms": 300, "metrics_port": $P1}
JSON
restart_ckptd 2
"$HOLD" -s "$SOCK" -j met -r 0 -w 2 -m 1 -t 9 > "$T/h.out" 2>&1 && fail "a half step committed"
scrape "$P1" "$T/m2.txt" || fail "scrape 2"
python3 "$T/parse.py" "$T/m2.txt" > "$T/p2" || fail "exposition 2 does not parse"
[ "$(val "$T/p2" 'ckptd_saves_failed_total{reason="ETIMEDOUT"}')" = 1 ] ||
	fail "failure not counted by reason: $(grep failed_total "$T/m2.txt")"

# SIGHUP moves the listener
sed -i "s/\"metrics_port\": $P1/\"metrics_port\": $P2/" "$CONF"
kill -HUP "$CKPTD_PID"
for _ in $(seq 100); do grep -q "127.0.0.1:$P2/metrics" "$LOG" && break; sleep 0.05; done
scrape "$P2" "$T/m3.txt" || fail "no metrics on the new port"
scrape "$P1" "$T/m4.txt" 2>/dev/null && fail "the old port still answers"
stop_ckptd || fail "ckptd exit"

# default config: no listener
cat > "$CONF" <<JSON
{"socket": "$SOCK", "root": "$ROOT", "staging_bytes": "64MiB", "chunk_bytes": "1MiB"}
JSON
n=$(grep -c "metrics: http" "$LOG")
restart_ckptd 3
[ "$(grep -c "metrics: http" "$LOG")" = "$n" ] || fail "metrics started without metrics_port"
stop_ckptd || fail "ckptd exit"
pass
