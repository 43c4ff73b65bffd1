#!/bin/bash
# mpi_overhead.sh - the cost of the two-phase commit across nodes: N ckptd
# under mpirun on this machine (cluster "mpi", the coordinator on MPI rank
# 0) for each N in NODES, against 1 ckptd (cluster "none") for the same
# saves.  Not a test: prints numbers and one JSON line per N.
#   tests/bench/mpi_overhead.sh [MIB_PER_RANK=1] [STEPS=10] [NODES="2 4 8 16"]
# max(8, N) trainer ranks spread over the N daemons, MIB MiB each, STEPS
# saves, all ranks starting each save together (--barrier).  Per save:
# durable = first start -> last rank DURABLE; committed = first start ->
# last rank COMMITTED; commit = committed - durable (the reports, the
# manifest, the publish, the outcome).  Medians over saves 2..STEPS.
# Coordinator cost: messages and bytes rank 0 sent and received (Open MPI's
# pml monitoring, read at MPI_Finalize), less those of an idle run of the
# same length (heartbeats), per step; CPU: rank 0's CPU seconds less the
# mean of the other daemons', per step.
set -u
TOP=$(cd "$(dirname "$0")/../.." && pwd)
MIB=${1:-1}; STEPS=${2:-10}; NODES=${3:-"2 4 8 16"}
T=$(mktemp -d /tmp/ckpt-mpibench.XXXXXX)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none
PID=
trap '[ -n "$PID" ] && kill -9 $PID 2>/dev/null; [ -n "${KEEP:-}" ] || rm -rf "$T"' EXIT
command -v mpirun > /dev/null || { echo "mpirun is not installed"; exit 77; }

conf() {   # name cluster world -> $T/name.json
	echo "{\"socket\": \"$T/$1.{rank}.sock\", \"root\": \"$T/root-$1\", \"cluster\": \"$2\"," \
	     "\"staging_bytes\": \"$(( MIB * $3 + 64 ))MiB\", \"chunk_bytes\": \"4MiB\"," \
	     "\"keep_last\": 2, \"coord_deadline_ms\": 120000, \"log_level\": \"warn\"}" > "$T/$1.json"
}

cpu_of() {   # pid -> utime+stime ticks
	awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0
}

# run NAME NODES WORLD STEPS LAUNCHER...: STEPS=0 is an idle run of $IDLE_S
run() {
	local name=$1 nodes=$2 world=$3 steps=$4 pids=() r n t0
	shift 4
	"$@" > "$T/$name.log" 2>&1 &
	PID=$!
	for _ in $(seq 600); do
		n=$(ls "$T"/$name.*.sock 2>/dev/null | wc -l)
		[ "$n" -ge "$nodes" ] && break
		sleep 0.05
	done
	t0=$(date +%s.%N)
	if [ "$steps" -gt 0 ]; then
		mkdir -p "$T/bar-$name"
		for r in $(seq 0 $(( world - 1 ))); do
			"$TOP/build/tests/trainer" save -s "$T/$name.$(( r * nodes / world )).sock" \
				-j bench -r $r -w $world --mib "$MIB" --steps "1:$steps" --json \
				--barrier "$T/bar-$name" > "$T/$name.out.$r" 2>&1 &
			pids+=($!)
			# rank 0's daemon makes the job first, so no measured save
			# includes the others' first connects racing on the shared
			# root (builds before 3453031 refused the job there)
			[ "$r" = 0 ] && for _ in $(seq 200); do
				[ -e "$T/root-$name/bench/job.json" ] && break
				sleep 0.05
			done
		done
		for p in "${pids[@]}"; do wait "$p" || echo "a $name rank failed"; done
	else
		sleep "$IDLE_S"
	fi
	awk -v a="$(date +%s.%N)" -v b="$t0" 'BEGIN { print a - b }' > "$T/$name.wall"
	# each daemon's CPU, by its MPI rank (its environment says which)
	: > "$T/$name.cpu"
	for p in $(pgrep -P $PID -x ckptd) $( [ "$nodes" = 1 ] && echo $PID); do
		r=$(tr '\0' '\n' < /proc/$p/environ 2>/dev/null | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')
		echo "${r:-0} $(cpu_of $p)" >> "$T/$name.cpu"
	done
	kill -TERM $PID; wait $PID 2>/dev/null; PID=
}

conf one none 8
sed -i "s|one.{rank}.sock|one.0.sock|" "$T/one.json"
echo "# $MIB MiB per rank, $STEPS saves; 1 ckptd, then N ckptd under mpirun for N in $NODES ($(nproc) cores)"
run one 1 8 "$STEPS" "$TOP/ckptd" -c "$T/one.json"
for N in $NODES; do
	W=$(( N > 8 ? N : 8 ))
	conf "mpi$N" mpi "$W"
	MON=(--mca pml_monitoring_enable 1 --mca pml_monitoring_enable_output 3
	     --mca pml_monitoring_filename "$T/mon$N")
	run "mpi$N" "$N" "$W" "$STEPS" mpirun --allow-run-as-root --oversubscribe -np "$N" \
		"${MON[@]}" "$TOP/ckptd" -c "$T/mpi$N.json"
	# the same daemons, idle as long: what heartbeats cost
	IDLE_S=$(cat "$T/mpi$N.wall")
	conf "idle$N" mpi "$W"
	MON=(--mca pml_monitoring_enable 1 --mca pml_monitoring_enable_output 3
	     --mca pml_monitoring_filename "$T/monidle$N")
	run "idle$N" "$N" "$W" 0 mpirun --allow-run-as-root --oversubscribe -np "$N" \
		"${MON[@]}" "$TOP/ckptd" -c "$T/idle$N.json"
done
python3 - "$T" "$STEPS" $NODES <<'PY'
import glob, json, os, re, statistics, sys
T, steps, nodes = sys.argv[1], int(sys.argv[2]), [int(x) for x in sys.argv[3:]]
TICK = os.sysconf("SC_CLK_TCK")

def saves(name, world):
    by = {}
    for f in glob.glob(f"{T}/{name}.out.*"):
        for line in open(f):
            if line.startswith("{"):
                o = json.loads(line); by.setdefault(o["step"], []).append(o)
    rows = []
    for s, v in sorted(by.items()):
        if s == 1 or len(v) < world:       # the first save is cold
            continue
        t0 = min(o["t0"] for o in v)
        dur = max(o["t0"] + o["durable_s"] for o in v) - t0
        com = max(o["t0"] + o["committed_s"] for o in v) - t0
        rows.append((dur, com, com - dur))
    return [statistics.median(x[i] for x in rows) * 1e3 for i in range(3)] if rows else None

def rank0_traffic(prefix):
    """Messages and bytes rank 0 sent to, and received from, the others
    (pml monitoring: 'E' lines are point-to-point sends, by sender)."""
    msgs = byts = 0
    for f in glob.glob(f"{prefix}.*.prof"):
        for line in open(f):
            m = re.match(r"E\s+(\d+)\s+(\d+)\s+(\d+) bytes\s+(\d+) msgs", line)
            if m and (m.group(1) == "0" or m.group(2) == "0"):
                byts += int(m.group(3)); msgs += int(m.group(4))
    return msgs, byts

def cpu(name):
    c = {}
    for line in open(f"{T}/{name}.cpu"):
        r, t = line.split(); c[int(r)] = int(t) / TICK
    return c

one = saves("one", 8)
print(f"1 ckptd        durable {one[0]:8.1f} ms  committed {one[1]:8.1f} ms  commit {one[2]:7.1f} ms")
for n in nodes:
    w = max(n, 8)
    r = saves(f"mpi{n}", w)
    if not r:
        print(f"{n} ckptd: no data"); continue
    m, b = rank0_traffic(f"{T}/mon{n}")
    mi, bi = rank0_traffic(f"{T}/monidle{n}")
    c, ci = cpu(f"mpi{n}"), cpu(f"idle{n}")
    others = [v for k, v in c.items() if k != 0]
    others_i = [v for k, v in ci.items() if k != 0]
    # rank 0 beyond a plain node, per step, less the same for the idle run
    c0 = ((c.get(0, 0) - (statistics.mean(others) if others else 0)) -
          (ci.get(0, 0) - (statistics.mean(others_i) if others_i else 0))) / steps
    out = {"nodes": n, "ranks": w, "durable_ms": round(r[0], 1), "committed_ms": round(r[1], 1),
           "commit_ms": round(r[2], 1), "commit_ms_1_ckptd": round(one[2], 1),
           "rank0_msgs_per_step": round((m - mi) / steps, 1) if m else None,
           "rank0_bytes_per_step": round((b - bi) / steps) if b else None,
           "rank0_heartbeat_msgs_per_s": round(mi / float(open(f"{T}/idle{n}.wall").read()), 1) if mi else None,
           "rank0_extra_cpu_ms_per_step": round(c0 * 1e3, 2)}
    print(f"{n:2d} ckptd ({w} ranks) durable {r[0]:8.1f} ms  committed {r[1]:8.1f} ms  "
          f"commit {r[2]:7.1f} ms")
    print(json.dumps(out))
PY
