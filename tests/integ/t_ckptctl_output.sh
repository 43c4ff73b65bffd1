# ckptctl against a running daemon: human tables (aligned columns, the
# expected rows) and --json (the expected structure and values) for status,
# list, prune, verify, flush and top; help and usage errors.  Timings,
# sizes of headers and ages are not compared.
. "$(dirname "$0")/lib.sh"
HOLD=$TOP/build/tests/holdsave
ME=$(id -un)

start_ckptd
trainer save -j alpha --mib 2 --steps 1:3 -q || fail "alpha saves"
trainer save -j beta --mib 1 --steps 7 -q || fail "beta save"
# gamma: a two-rank step in flight, rank 1 held back until the end
"$HOLD" -s "$SOCK" -j gamma -r 0 -w 2 -m 4 -t 5 > "$T/g0" 2>&1 &
g0=$!
"$HOLD" -s "$SOCK" -j gamma -r 1 -w 2 -m 4 -t 5 -g "$T/go" > "$T/g1" 2>&1 &
g1=$!
for _ in $(seq 200); do grep -q accepted "$T/g0" && grep -q connected "$T/g1" && break; sleep 0.05; done
grep -q accepted "$T/g0" || fail "gamma rank 0 did not save"

cat > "$T/check.py" <<'PY'
import json, re, sys

def fail(msg):
    print("MISMATCH:", msg); sys.exit(1)

def table(lines, cols):
    """lines[0] is the header; cols: names, '>' = right-aligned.  Checks
    every cell sits in its column; returns rows as lists of cells."""
    head = lines[0]
    spans, pos = [], 0
    for c in cols:
        right = c.startswith(">")
        name = c.lstrip(">")
        i = head.find(name, pos)
        if i < 0: fail("column %s not in header %r" % (name, head))
        spans.append((i, i + len(name), right))
        pos = i + len(name)
    if head != head.rstrip(): fail("trailing blanks in header")
    rows = []
    for ln in lines[1:]:
        cells = []
        for k, (a, b, right) in enumerate(spans):
            if right:
                if ln[b - 1:b] in ("", " ") or ln[b:b + 1] not in ("", " "):
                    fail("column %s not right-aligned in %r" % (cols[k], ln))
                start = ln.rfind("  ", 0, b)
                cells.append(ln[start + 2 if start >= 0 else 0:b])
            elif ln[a:a + 1] in ("", " "):
                if ln[a:a + 2].strip():
                    fail("column %s not left-aligned in %r" % (cols[k], ln))
                cells.append("")
            else:
                if a and ln[a - 1] != " ":
                    fail("column %s not left-aligned in %r" % (cols[k], ln))
                end = ln.find("  ", a)
                cells.append(ln[a:end if end >= 0 else len(ln)])
        if ln != ln.rstrip(): fail("trailing blanks in %r" % ln)
        rows.append(cells)
    return rows

def types(obj, schema, where):
    for k, t in schema.items():
        if k not in obj: fail("%s: no key %s" % (where, k))
        v = obj[k]
        ok = {"s": isinstance(v, str), "i": isinstance(v, int) and not isinstance(v, bool),
              "b": isinstance(v, bool), "n": isinstance(v, (int, float)) and not isinstance(v, bool),
              "i?": v is None or (isinstance(v, int) and not isinstance(v, bool)),
              "o": isinstance(v, dict), "a": isinstance(v, list)}[t]
        if not ok: fail("%s.%s: %r is not %s" % (where, k, v, t))

what, path = sys.argv[1], sys.argv[2]
me = sys.argv[3] if len(sys.argv) > 3 else ""
txt = open(path).read()
L = txt.split("\n")

if what == "status":
    pats = [r"ckptd \d+\.\d+\.\d+, pid \d+, up \d+s",
            r"  io:       (io_uring|pwrite), direct I/O (on|off), GPU (yes|no)",
            r"  pool:     \[[#.]{20}\] +\d+%  \S+ \S+ / 64\.0 MiB, \d+ waits, (locked|not locked)",
            r"  clients:  3",
            r"  written:  \S+ \S+, now \S+ \S+/s",
            r"  saves:    4 committed, 0 failed", r""]
    for i, p in enumerate(pats):
        if not re.fullmatch(p, L[i]): fail("line %d %r !~ %r" % (i, L[i], p))
    # alpha and beta have no trainer left: idle jobs are not in status
    jobs = table(L[7:9], ["JOB", "OWNER", ">WORLD", ">RANKS", ">LAST STEP", "AGE", ">IN FLIGHT"])
    got = sorted(jobs)
    want = sorted([["gamma", me, "2", "2", "-", "-", "1"]])
    if got != want: fail("jobs %r != %r" % (got, want))
    if L[9:11] != ["", "in flight:"]: fail("in flight heading: %r" % L[9:11])
    fl = table(L[11:13], ["JOB", ">STEP", "PHASE", ">SAVED", ">STAGED", ">DURABLE", ">SIZE", "PROGRESS"])
    want = [["gamma", "5", "waiting for ranks", "1/2", "1/2", "1/2", "8.0 MiB", "[#####.....] 50%"]]
    if fl != want: fail("in flight %r != %r" % (fl, want))
    if L[13:] != [""]: fail("trailing lines %r" % L[13:])

elif what == "status-json":
    st = json.loads(txt)
    types(st, {"daemon": "s", "pid": "i", "uptime_s": "i", "io_backend": "s", "direct_io": "b",
               "gpu": "b", "pool": "o", "clients": "i", "bytes_written": "i",
               "write_rate_bps": "n", "saves_committed": "i", "saves_failed": "i",
               "jobs": "a", "draining": "b"}, "status")
    types(st["pool"], {"used": "i", "total": "i", "chunk": "i", "waits": "i", "locked": "b"}, "pool")
    if (st["saves_committed"], st["saves_failed"], st["clients"], st["draining"]) != (4, 0, 3, False):
        fail("counters %r" % st)
    if st["pool"]["total"] != 64 << 20: fail("pool total")
    jobs = {j["name"]: j for j in st["jobs"]}
    if sorted(jobs) != ["gamma"]: fail("jobs %r" % sorted(jobs))   # idle jobs leave
    for j in st["jobs"]:
        types(j, {"name": "s", "owner_uid": "i", "world_size": "i", "ranks_connected": "i",
                  "last_committed_step": "i?", "last_committed_unix": "i?", "in_flight": "a"}, j["name"])
    if [jobs[n]["last_committed_step"] for n in ("gamma",)] != [None]:
        fail("last steps")
    g = jobs["gamma"]["in_flight"]
    if len(g) != 1: fail("gamma in flight %r" % g)
    types(g[0], {"step": "i", "txid": "s", "phase": "s", "ranks_saved": "i", "ranks_staged": "i",
                 "ranks_durable": "i", "bytes_total": "i", "bytes_staged": "i",
                 "bytes_written": "i"}, "in_flight")
    if not re.fullmatch(r"[0-9a-f]{32}", g[0]["txid"]): fail("txid")
    if (g[0]["step"], g[0]["ranks_saved"], g[0]["ranks_durable"]) != (5, 1, 1): fail("gamma %r" % g)

elif what == "list":
    rows = table(L[:5], ["JOB", ">STEP", "LATEST", ">FILES", ">SIZE", ">WRITTEN", "CREATED", "AGE"])
    got = sorted(r[:6] for r in rows)
    want = sorted([["alpha", "3", "*", "3", "2.0 MiB", "2.0 MiB"], ["alpha", "2", "", "3", "2.0 MiB", "2.0 MiB"],
                   ["alpha", "1", "", "3", "2.0 MiB", "2.0 MiB"], ["beta", "7", "*", "3", "1.0 MiB", "1.0 MiB"]])
    if got != want: fail("list %r != %r" % (got, want))
    for r in rows:
        if not re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", r[6]): fail("created %r" % r[6])
    if L[5] != "4 checkpoints, 7.0 MiB" or L[6:] != [""]: fail("list total %r" % L[5:])

elif what == "list-json":
    cps = json.loads(txt)["checkpoints"]
    for c in cps:
        types(c, {"job": "s", "step": "i", "latest": "b", "files": "i", "bytes": "i",
                  "bytes_written": "i", "created_unix": "i"}, "checkpoint")
    got = sorted((c["job"], c["step"], c["latest"], c["files"]) for c in cps)
    want = [("alpha", 1, False, 3), ("alpha", 2, False, 3), ("alpha", 3, True, 3), ("beta", 7, True, 3)]
    if got != want: fail("list --json %r" % got)

elif what == "verify":
    if not L[0].endswith("/alpha"): fail("verify title %r" % L[0])
    rows = table(L[1:4], [">STEP", "LATEST", "RESULT", ">FILES", ">SIZE"])
    if rows != [["3", "*", "verified", "3", "2.0 MiB"], ["2", "", "verified", "3", "2.0 MiB"]]:
        fail("verify rows %r" % rows)
    if L[4:] != ["2 of 2 checkpoints verified; newest good: step 3", ""]: fail("verify %r" % L[4:])

elif what == "verify-json":
    v = json.loads(txt)
    if [(x["ok"], x["step"], x["files"]) for x in v] != [(True, 3, 3), (True, 2, 3)]:
        fail("verify --json %r" % v)

elif what == "top":
    blocks = [b for b in txt.split("--- ")[1:]]
    if len(blocks) != 2: fail("%d blocks" % len(blocks))
    for b in blocks:
        if not re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\nckptd ", b): fail("block %r" % b[:60])
        if "in flight:" not in b: fail("block without in flight")

elif what == "top-json":
    objs = [json.loads(l) for l in L if l]
    if len(objs) != 2 or any("jobs" not in o for o in objs): fail("top --json")
print("ok", what)
PY
check() {   # what file
	python3 "$T/check.py" "$1" "$2" "$ME" || { echo "--- $2:"; cat "$2"; fail "$1 output"; }
}

# rank 0 of gamma must be durable before the snapshot (no timing race)
for _ in $(seq 200); do
	ckptctl status --json | python3 -c 'import json,sys
j=[x for x in json.load(sys.stdin)["jobs"] if x["name"]=="gamma"]
sys.exit(0 if j and j[0]["in_flight"] and j[0]["in_flight"][0]["ranks_durable"]==1 else 1)' && break
	sleep 0.05
done
ckptctl status > "$T/status" || fail "status"
check status "$T/status"
ckptctl status --json > "$T/status.json" || fail "status --json"
check status-json "$T/status.json"
ckptctl list > "$T/list" || fail "list"
check list "$T/list"
ckptctl list --json > "$T/list.json" || fail "list --json"
check list-json "$T/list.json"
ckptctl list --job beta --json | python3 -c 'import json,sys; c=json.load(sys.stdin)["checkpoints"]; assert [x["step"] for x in c]==[7], c' ||
	fail "list --job beta"
ckptctl list --job nosuch > "$T/none" || fail "list of no job"
grep -qx "no checkpoints of job nosuch" "$T/none" || fail "empty list: $(cat "$T/none")"

ckptctl prune --job alpha --keep 2 --json > "$T/prune.json" || fail "prune --json"
python3 -c 'import json,sys; o=json.load(open(sys.argv[1])); assert o=={"removed":[1]}, o' "$T/prune.json" ||
	fail "prune --json: $(cat "$T/prune.json")"
out=$(ckptctl prune --job alpha --keep 2) || fail "prune"
[ "$out" = "nothing to remove: alpha has at most 2 checkpoints" ] || fail "prune: $out"

"$TOP/ckptctl" verify "$ROOT/alpha" > "$T/verify" 2> "$T/verify.err" || fail "verify: $(cat "$T/verify.err")"
check verify "$T/verify"
"$TOP/ckptctl" verify --json "$ROOT/alpha" > "$T/verify.json" || fail "verify --json"
check verify-json "$T/verify.json"
# a checkpoint copied under another step's name does not verify: its
# manifest names another step (it would restore as the wrong one)
last=$(latest_of alpha)
cp -a "$ROOT/alpha/$last" "$T/iter_000000099"
"$TOP/ckptctl" verify "$T/iter_000000099/" > /dev/null 2> "$T/err" && fail "a renamed checkpoint verified"
grep -q "its manifest says step $((10#${last#iter_})), its directory step 99" "$T/err" ||
	fail "renamed: $(cat "$T/err")"
"$TOP/ckptctl" verify "$ROOT/alpha/$last" > /dev/null || fail "the original no longer verifies"

ckptctl top --count 2 --interval 0.2 > "$T/top" || fail "top"
check top "$T/top"
ckptctl status --watch --json --count 2 --interval 0.2 > "$T/top.json" || fail "status --watch --json"
check top-json "$T/top.json"

ckptctl flush --job beta --json > "$T/flush.json" || fail "flush --json"
python3 -c 'import json,sys; o=json.load(open(sys.argv[1])); assert o=={"committed":0,"failed":0,"ok":True}, o' "$T/flush.json" ||
	fail "flush --json: $(cat "$T/flush.json")"

# help and usage errors
for c in status top flush list prune verify help; do
	"$TOP/ckptctl" help $c > "$T/help" || fail "help $c"
	head -1 "$T/help" | grep -q "^usage: ckptctl $c" || fail "help $c: $(head -1 "$T/help")"
	"$TOP/ckptctl" $c --help > /dev/null || fail "$c --help"
done
"$TOP/ckptctl" --help | grep -q "exit status" || fail "--help lacks exit status"
"$TOP/ckptctl" -s "$SOCK" frobnicate > /dev/null 2>&1; [ $? = 2 ] || fail "unknown command not 2"
"$TOP/ckptctl" -s "$SOCK" status --bogus > /dev/null 2>&1; [ $? = 2 ] || fail "unknown option not 2"
"$TOP/ckptctl" -s "$T/nosock" status > /dev/null 2> "$T/err"; [ $? = 2 ] || fail "no daemon not 2"
grep -q "is ckptd running" "$T/err" || fail "no daemon: $(cat "$T/err")"
"$TOP/ckptctl" -s "$SOCK" prune --job alpha > /dev/null 2>&1; [ $? = 2 ] || fail "prune without --keep not 2"
for j in ../x "" "a/b"; do   # a job name ckptd would refuse is a usage error
	"$TOP/ckptctl" -s "$SOCK" prune --job "$j" --keep 1 > /dev/null 2> "$T/err"; rc=$?
	[ $rc = 2 ] && grep -q "prune: --job: job name" "$T/err" || fail "job '$j': rc $rc: $(cat "$T/err")"
done

touch "$T/go"
wait $g0 || fail "gamma rank 0"
wait $g1 || fail "gamma rank 1"
stop_ckptd || fail "ckptd exit"
pass
