#!/bin/bash
# mpi_overhead.sh - commit overhead of 4 ckptd under mpirun (cluster "mpi",
# two-phase commit through the coordinator) against 1 ckptd (cluster
# "none") for the same bytes: 8 ranks, MIB MiB each, STEPS saves, all ranks
# starting each save together (--barrier).  Not a test: prints numbers.
#   tests/bench/mpi_overhead.sh [MIB_PER_RANK=16] [STEPS=10] [NODES=4]
# Per save: durable = first start -> last rank DURABLE; committed = first
# start -> last rank COMMITTED; commit = committed - durable (the manifest,
# the publish and, with MPI, the reports and the outcome).  Medians.
set -u
TOP=$(cd "$(dirname "$0")/../.." && pwd)
MIB=${1:-16}; STEPS=${2:-10}; NODES=${3:-4}; WORLD=8
T=$(mktemp -d /tmp/ckpt-mpibench.XXXXXX)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none
PID=
trap '[ -n "$PID" ] && { pkill -9 -P $PID 2>/dev/null; kill -9 $PID 2>/dev/null; }; rm -rf "$T"' EXIT
command -v mpirun > /dev/null || { echo "mpirun is not installed"; exit 77; }
POOL=$(( (MIB * WORLD + 64) ))MiB

conf() {   # mode -> $T/$1.json
	echo "{\"socket\": \"$T/$1.{rank}.sock\", \"root\": \"$T/root-$1\", \"cluster\": \"$2\"," \
	     "\"staging_bytes\": \"$POOL\", \"chunk_bytes\": \"4MiB\", \"keep_last\": 2," \
	     "\"coord_deadline_ms\": 60000, \"log_level\": \"warn\"}" > "$T/$1.json"
}

run() {   # name nodes launcher...
	local name=$1 nodes=$2 pids=() r
	shift 2
	"$@" > "$T/$name.log" 2>&1 &
	PID=$!
	for _ in $(seq 200); do
		n=$(ls "$T"/$name.*.sock 2>/dev/null | wc -l)
		[ "$n" -ge "$nodes" ] && break
		sleep 0.05
	done
	mkdir -p "$T/bar-$name"
	for r in $(seq 0 $(( WORLD - 1 ))); do
		"$TOP/build/tests/trainer" save -s "$T/$name.$(( r * nodes / WORLD )).sock" -j bench \
			-r $r -w $WORLD --mib "$MIB" --steps "1:$STEPS" --json \
			--barrier "$T/bar-$name" > "$T/$name.out.$r" 2>&1 &
		pids+=($!)
	done
	for p in "${pids[@]}"; do wait "$p" || echo "a $name rank failed"; done
	kill -TERM $PID; wait $PID 2>/dev/null; PID=
}

conf one none
conf mpi mpi
sed -i "s|one.{rank}.sock|one.0.sock|" "$T/one.json"
echo "# 8 ranks x $MIB MiB, $STEPS saves; 1 ckptd vs $NODES ckptd under mpirun ($(nproc) cores)"
run one 1 "$TOP/ckptd" -c "$T/one.json"
run mpi "$NODES" mpirun --allow-run-as-root --oversubscribe -np "$NODES" "$TOP/ckptd" -c "$T/mpi.json"
python3 - "$T" "$STEPS" <<'PY'
import json, glob, statistics, sys
T, steps = sys.argv[1], int(sys.argv[2])
res = {}
for name in ("one", "mpi"):
    by = {}
    for f in glob.glob(f"{T}/{name}.out.*"):
        for line in open(f):
            if line.startswith("{"):
                o = json.loads(line); by.setdefault(o["step"], []).append(o)
    rows = []
    for s, v in sorted(by.items()):
        if s == 1 or len(v) < 8:       # the first save is cold
            continue
        t0 = min(o["t0"] for o in v)
        dur = max(o["t0"] + o["durable_s"] for o in v) - t0
        com = max(o["t0"] + o["committed_s"] for o in v) - t0
        rows.append((dur, com, com - dur))
    if not rows:
        print(name, "no data"); continue
    med = [statistics.median(x[i] for x in rows) * 1e3 for i in range(3)]
    res[name] = med
    print(f"{'1 ckptd ' if name == 'one' else 'N ckptd '} durable {med[0]:8.1f} ms  committed {med[1]:8.1f} ms  commit {med[2]:7.1f} ms  ({len(rows)} saves)")
if len(res) == 2:
    print(json.dumps({"commit_overhead_ms_1": round(res["one"][2], 2),
                      "commit_overhead_ms_mpi": round(res["mpi"][2], 2),
                      "committed_ratio_mpi_vs_1": round(res["mpi"][1] / res["one"][1], 3)}))
PY
