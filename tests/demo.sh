#!/bin/bash
# make demo: the whole product on this machine, in about a minute.
# A private ckptd, a 2-rank trainer that changes its tensors every step and
# checkpoints asynchronously, a crash, a restart that restores bit for bit.
set -u
cd "$(dirname "$0")/.." || exit 1
D=$(mktemp -d /tmp/ckpt-demo.XXXXXX)
MIB=${DEMO_MIB:-128}        # per rank
TR=build/tests/trainer
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
die() { echo "demo FAILED: $*"; [ -f "$D/ckptd.log" ] && tail -20 "$D/ckptd.log"; exit 1; }
cleanup() { kill -9 ${PIDS:-} ${CKPTD:-} 2>/dev/null; }
trap cleanup EXIT

cat > "$D/ckptd.json" <<JSON
{"socket": "$D/ckptd.sock", "root": "$D/root", "staging_bytes": "$((MIB * 4))MiB",
 "keep_last": 3, "step_deadline_ms": 60000}
JSON
say "starting ckptd (socket $D/ckptd.sock, checkpoints under $D/root)"
./ckptd -c "$D/ckptd.json" > "$D/ckptd.log" 2>&1 &
CKPTD=$!
for _ in $(seq 200); do grep -q "ready:" "$D/ckptd.log" && break; sleep 0.05; done
grep "ready:" "$D/ckptd.log" | sed 's/^/   /' || die "ckptd did not start"

say "training: 2 ranks x $MIB MiB (f64 f32 bf16 f16 i64 i32 i16 i8 u8 bool), a save every 5 steps"
PIDS=""
for r in 0 1; do
	$TR save -s "$D/ckptd.sock" -j demo -r $r -w 2 --mib "$MIB" --steps 5:1000:5 \
		--wait staged --train-ms 30 > "$D/rank$r.out" 2>&1 &
	PIDS="$PIDS $!"
done
for _ in $(seq 600); do
	l=$(cat "$D/root/demo/latest_checkpoint.txt" 2>/dev/null)
	[ -n "$l" ] && [ "${l#iter_}" -ge 20 ] 2>/dev/null && break
	sleep 0.1
done
tail -3 "$D/rank0.out" | sed 's/^/   /'
[ -n "$l" ] || die "no checkpoint was committed"

say "crash: killing both trainer processes (SIGKILL) mid-run"
kill -9 $PIDS; wait $PIDS 2>/dev/null; PIDS=""
echo "   the trainers are gone; a save every rank had handed over (STAGED) still completes,"
echo "   a step only some ranks had saved is dropped when they come back"

say "restart: both ranks restore the newest checkpoint that verifies and check every byte"
for r in 0 1; do
	$TR restore -s "$D/ckptd.sock" -j demo -r $r -w 2 --mib "$MIB" > "$D/restore$r.out" 2>&1 &
	PIDS="$PIDS $!"
done
wait $PIDS || { cat "$D"/restore*.out; die "a rank did not restore bit for bit"; }; PIDS=""
sed 's/^/   /' "$D/restore0.out" "$D/restore1.out"
step=$(sed -nE 's/.*restored step ([0-9]+).*/\1/p' "$D/restore0.out")
[ "$step" = "$(sed -nE 's/.*restored step ([0-9]+).*/\1/p' "$D/restore1.out")" ] ||
	die "the ranks restored different steps"

say "training resumes from step $step and saves twice more"
for r in 0 1; do
	$TR save -s "$D/ckptd.sock" -j demo -r $r -w 2 --mib "$MIB" \
		--steps $((step + 5)):$((step + 10)):5 --train-ms 30 > "$D/resume$r.out" 2>&1 &
	PIDS="$PIDS $!"
done
wait $PIDS || die "the resumed run failed to save"; PIDS=""
sed 's/^/   /' "$D/resume0.out"

say "ckptctl status"
./ckptctl -s "$D/ckptd.sock" status | sed 's/^/   /'
say "ckptctl list"
./ckptctl -s "$D/ckptd.sock" list | sed 's/^/   /'
say "ckptctl verify (offline, no daemon involved)"
./ckptctl verify "$D/root/demo/$(cat "$D/root/demo/latest_checkpoint.txt")" | sed 's/^/   /' ||
	die "the latest checkpoint does not verify"

say "stopping ckptd (SIGTERM: it finishes accepted saves first)"
kill -TERM $CKPTD; wait $CKPTD; rc=$?; CKPTD=""
[ $rc = 0 ] || die "ckptd exited with $rc"
echo "   ckptd exited cleanly"
say "what happened"
cat <<TXT
   Two trainer ranks checkpointed $MIB MiB each every 5 steps without waiting
   for the disk: each save returned once the daemon had copied the tensors
   (STAGED), then ckptd wrote safetensors shards with SHA-256, fsynced them,
   wrote the manifest and published the checkpoint atomically.  The trainers
   were killed mid-run; on restart both restored step $step, the newest
   checkpoint that verifies, bit for bit, and training went on from there.
   The checkpoints are plain safetensors shards plus a JSON manifest.
TXT
if [ -n "${DEMO_KEEP:-}" ]; then
	echo "   kept in $D/root/demo"
else
	rm -rf "$D"
	echo "   (the demo directory was removed; DEMO_KEEP=1 make demo keeps it)"
fi
