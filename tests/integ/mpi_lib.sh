# mpi_lib.sh - helpers for the multi-node tests (t_mpi_*.sh): NODES ckptd
# daemons under one mpirun on this machine, each on its own socket standing
# for a node ($T/ckptd.N.sock, config "socket": ".../ckptd.{rank}.sock"),
# one shared root.  Client rank r of a WORLD-rank job talks to node
# r * NODES / WORLD (8 ranks on 4 nodes: two each).
#   start_cluster [extra JSON keys...]   (env CKPT_NODE_FAULT / _FAILPOINT:
#                                         CKPTD_BIN: another ckptd build;
#                                         MPIRUN_ARGS: launcher options;
#                                         see mpi_node.sh)
#   stop_cluster          SIGTERM mpirun, wait (bounded)
#   wait_cluster_exit S   wait up to S seconds for mpirun to end by itself
#   node_sock N / node_of RANK / node_log N (grep its lines)
#   save_all JOB STEPS [trainer args]    all WORLD ranks save; exit codes
#                                        land in $T/rc.RANK, output $T/out.RANK
#                                        (prefixed with $OUTP when set)
#   restore_all JOB STEP  every rank restores the latest through its node
#                         and must get STEP, bit-exact
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
NODES=${NODES:-4}
WORLD=${WORLD:-8}
MPIRUN_PID=
MPILOG=$T/mpirun.log
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# keep Open MPI quiet and local (no network interfaces needed)
export OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMPI_MCA_rmaps_base_oversubscribe=1

command -v mpirun > /dev/null || skip "mpirun (Open MPI) is not installed"
ldd "${CKPTD_BIN:-$TOP/ckptd}" 2>/dev/null | grep -q libmpi || skip "ckptd was built without MPI (no mpicc)"

cluster_cleanup() {
	if [ -n "$MPIRUN_PID" ]; then
		pkill -9 -P "$MPIRUN_PID" 2>/dev/null
		kill -9 "$MPIRUN_PID" 2>/dev/null
	fi
	for f in "$T"/node.*.pid; do
		[ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null
	done
	cleanup
}
trap cluster_cleanup EXIT

node_sock() { echo "$T/ckptd.$1.sock"; }
node_of()   { echo $(( $1 * NODES / WORLD )); }
node_pid()  { cat "$T/node.$1.pid"; }

# launch_cluster [keys]: start mpirun only (start_cluster also waits until
# every node is ready)
launch_cluster() {
	local kv d keys=()
	for d in "\"socket\": \"$T/ckptd.{rank}.sock\"" '"cluster": "mpi"' \
		 '"coord_deadline_ms": 4000' '"coord_peer_timeout_ms": 4000' \
		 '"staging_bytes": "16MiB"'; do
		for kv in "$@"; do [ "${kv%%:*}" = "${d%%:*}" ] && continue 2; done
		keys+=("$d")
	done
	write_conf "${keys[@]}" "$@"
	rm -f "$T"/node.*.pid
	# shellcheck disable=SC2086  # MPIRUN_ARGS: extra launcher options
	CKPT_NODE_DIR=$T mpirun --allow-run-as-root --oversubscribe ${MPIRUN_ARGS:-} -np "$NODES" \
		-x CKPT_NODE_DIR -x CKPT_NODE_FAULT -x CKPT_NODE_FAILPOINT -x CKPT_FAILPOINT_HOLD \
		-x CKPT_NODE_CONF \
		"$TOP/tests/integ/mpi_node.sh" "${CKPTD_BIN:-$TOP/ckptd}" -c "$CONF" >> "$LOG" 2>&1 &
	MPIRUN_PID=$!
}

start_cluster() {
	local before
	before=$(ready_count)
	launch_cluster "$@"
	for _ in $(seq 300); do
		[ "$(ready_count)" -ge $(( before + NODES )) ] && return 0
		kill -0 "$MPIRUN_PID" 2>/dev/null || fail "mpirun exited at start"
		sleep 0.05
	done
	fail "the cluster did not become ready"
}

wait_cluster_exit() {   # secs: mpirun must end by itself
	local n=$(( $1 * 20 ))
	for _ in $(seq "$n"); do
		kill -0 "$MPIRUN_PID" 2>/dev/null || { wait "$MPIRUN_PID" 2>/dev/null; MPIRUN_PID=; return 0; }
		sleep 0.05
	done
	return 1
}

stop_cluster() {
	[ -n "$MPIRUN_PID" ] || return 0
	kill -TERM "$MPIRUN_PID" 2>/dev/null
	wait_cluster_exit 15 || fail "mpirun did not stop"
}

export CKPT_NODE_FAULT="${CKPT_NODE_FAULT:-}" CKPT_NODE_FAILPOINT="${CKPT_NODE_FAILPOINT:-}"
export CKPT_FAILPOINT_HOLD="${CKPT_FAILPOINT_HOLD:-}"   # see fail.h
export CKPT_NODE_CONF="${CKPT_NODE_CONF:-}"

save_all() {   # job steps [trainer args]
	local job=$1 steps=$2 pids=() r
	shift 2
	for r in $(seq 0 $(( WORLD - 1 ))); do
		timeout -k 5 45 "$TRAINER" save -s "$(node_sock "$(node_of $r)")" -j "$job" -r $r -w "$WORLD" \
			--mib 2 --steps "$steps" "$@" > "$T/${OUTP:-}out.$r" 2>&1 &
		pids[$r]=$!
	done
	for r in $(seq 0 $(( WORLD - 1 ))); do
		wait "${pids[$r]}"
		echo $? > "$T/${OUTP:-}rc.$r"
	done
}
all_rc()  { for r in $(seq 0 $(( WORLD - 1 ))); do [ "$(cat "$T/rc.$r")" = "$1" ] || return 1; done; }
none_ok() { for r in $(seq 0 $(( WORLD - 1 ))); do [ "$(cat "$T/rc.$r")" != 0 ] || return 1; done; }
show_rc() { for r in $(seq 0 $(( WORLD - 1 ))); do echo "rank $r rc $(cat "$T/rc.$r"): $(tail -1 "$T/out.$r")"; done; }

restore_all() {   # job step
	local r
	for r in $(seq 0 $(( WORLD - 1 ))); do
		"$TRAINER" restore -s "$(node_sock "$(node_of $r)")" -j "$1" -r $r -w "$WORLD" \
			--mib 2 --expect "$2" > "$T/restore.$r" 2>&1 ||
			fail "rank $r on node $(node_of $r): $(cat "$T/restore.$r")"
	done
}

# Kill one daemon at a failpoint while step STEP is saved (step PREV is
# committed before), then check: every client ends with an error, mpirun
# ends by itself (no hang), a restarted cluster agrees on latest WANT on
# every node, nothing half-published is visible, and the next step commits.
#   kill_phase JOB NODE FAILPOINT PREV STEP WANT
kill_phase() {
	local job=$1 node=$2 fp=$3 prev=$4 step=$5 want=$6 t0 el
	log "kill node $node at $fp during step $step"
	CKPT_NODE_FAILPOINT="$node=$fp" start_cluster
	t0=$(date +%s)
	save_all "$job" "$step"
	none_ok || { show_rc; fail "$fp: a client was told step $step succeeded"; }
	wait_cluster_exit 30 || fail "$fp: mpirun still runs after node $node died"
	el=$(( $(date +%s) - t0 ))
	[ $el -le 30 ] || fail "$fp: it took $el s"
	start_cluster
	[ "$(latest_of "$job")" = "$(printf 'iter_%09d' "$want")" ] ||
		fail "$fp: latest is $(latest_of "$job"), want step $want"
	verify_latest "$job"
	no_leftovers || fail "$fp: leftovers after restart: $(leftovers)"
	for s in $(seq "$prev" 10 "$step"); do
		if [ "$s" -gt "$want" ] && [ -e "$ROOT/$job/$(printf 'iter_%09d' "$s")" ]; then
			fail "$fp: step $s is visible"
		fi
	done
	restore_all "$job" "$want"
	save_all "$job" $(( step + 10 ))
	all_rc 0 || { show_rc; fail "$fp: step $(( step + 10 )) after restart failed"; }
	stop_cluster
}

# 2 nodes, one rank each (world 2, --mib 2): each rank of JOB's STEP
# restored through the other node, from its memory, bit-exact (the
# trainer's arguments follow).
cross_restore() {   # JOB STEP TRAINER-ARGS...
	local job=$1 step=$2 r out
	shift 2
	for r in 0 1; do
		out=$("$TRAINER" restore -s "$(node_sock $(( 1 - r )))" -j "$job" -r $r -w 2 \
			--mib 2 --expect "$step" "$@" 2>&1) || fail "rank $r via node $(( 1 - r )): $out"
		grep -q "restored step $step bit-exact from memory" <<< "$out" ||
			fail "rank $r via node $(( 1 - r )), step $step: not from its memory: $out"
	done
}

kept_small() {   # JOB STEP MAX: each node's memory copy of it (its rank's
	# and its partner's) holds at most MAX bytes of its own
	local b
	[ "$(kept_bytes "$1" "$2" 2 | wc -l)" = 2 ] ||
		fail "step $2 is not kept on both nodes: $(kept_bytes "$1" "$2" 2)"
	for b in $(kept_bytes "$1" "$2" 2); do
		[ "$b" -le "$3" ] || fail "a node keeps $b bytes of its own for step $2 (at most $3)"
	done
}

# JOB's STEPS saved by every rank (save_all, the trainer's arguments
# following), every save replicated to the partner nodes.
replicated_saves() {   # JOB STEPS TRAINER-ARGS...
	save_all "$@"
	all_rc 0 || { show_rc; fail "a save of $2 failed"; }
	! grep -q "is not replicated" "$LOG" ||
		fail "a save was not replicated: $(grep 'not replicated' "$LOG")"
}
