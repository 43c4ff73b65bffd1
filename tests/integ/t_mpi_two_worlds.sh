# Two MPI worlds (or a world and a single-node ckptd) on one shared root:
# the root's lock, taken by the coordinator before its start-up recovery,
# refuses the second one before it touches anything, so world A's saves in
# flight (a staging directory here) survive and A goes on saving.
NODES=2 WORLD=2
. "$(dirname "$0")/mpi_lib.sh"
start_cluster
save_all tw 1
all_rc 0 || { show_rc; fail "world A's first save"; }
STAGING=.iter_000000009.staging-0123456789abcdef0123456789abcdef
mkdir -p "$ROOT/tw/$STAGING/model"
echo data > "$ROOT/tw/$STAGING/model/rank_00000.safetensors"

# world B: same root, its own sockets
sed "s|$T/ckptd.{rank}.sock|$T/b.{rank}.sock|" "$CONF" > $T/b.json
mkdir $T/b
CKPT_NODE_DIR=$T/b timeout 60 mpirun --allow-run-as-root --oversubscribe -np 2 -x CKPT_NODE_DIR \
	"$TOP/tests/integ/mpi_node.sh" "$TOP/ckptd" -c $T/b.json > $T/b.log 2>&1 &
bpid=$!
wait_until 50 grep -q "is in use by another ckptd" $T/b.log || fail "world B was not refused: $(cat $T/b.log)"
log "world B: $(grep -m1 'in use' $T/b.log)"
wait $bpid && fail "world B's mpirun exited 0"
[ -d "$ROOT/tw/$STAGING/model" ] || fail "world B removed world A's staging directory"
grep -q "removed unpublished leftover" $T/b.log && fail "world B's recovery ran: $(cat $T/b.log)"
for f in $T/b/node.*.pid; do kill -9 "$(cat $f)" 2>/dev/null; done

# a single-node ckptd on the same root
sed "s|$T/ckptd.{rank}.sock|$T/single.sock|; s|\"cluster\": \"mpi\"|\"cluster\": \"none\"|" "$CONF" > $T/s.json
timeout 30 "$TOP/ckptd" -c $T/s.json > $T/s.log 2>&1 && fail "a single-node ckptd started on the cluster's root"
grep -q "is in use by another ckptd" $T/s.log || fail "single-node ckptd: $(cat $T/s.log)"
[ -d "$ROOT/tw/$STAGING/model" ] || fail "the single-node ckptd removed world A's staging directory"

save_all tw 2
all_rc 0 || { show_rc; fail "world A's save after the refusals"; }
[ "$(latest_of tw)" = iter_000000002 ] || fail "latest is $(latest_of tw)"
pass
