#!/bin/bash
# tests/gpu/run.sh - the GPU end-to-end check, made for a lent GPU machine:
# one command, bounded as a whole (GPU_RUN_LIMIT, default 420 s) and per
# scenario (GPU_STEP_LIMIT, default 60 s), every result appended to the
# output folder as it happens ($OUT, else build/gpu-run): a run cut short
# still leaves what it found.  CI has no GPU: `make test` runs this only
# when nvidia-smi works, and the same scenarios on the CUDA driver
# simulator (t_gpu_sim*).
#
# Needs build/gpu-bundle (`make gpu-bundle` on the build machine; carry
# it): ckptd, gpu_trainer (the CUDA driver API only) and libckpt.so, with
# the shared libraries a bare box lacks inside (rpath $ORIGIN; see its
# MANIFEST).  On the GPU machine: bash, coreutils, awk, glibc >= the
# MANIFEST's, and the NVIDIA driver.  No CUDA toolkit, no -dev packages.
#
# In the order run (the figures first, ckptd's death last):
#   env         the GPU, driver, PCIe link (nvidia-smi and /sys), the bundle
#   roundtrip   GPU_MIB MiB (default 2048) of cudaMalloc + VMM tensors:
#               pinned D2H/H2D copies of the same sizes (the floors), then
#               ckpt_save_stream with the optimizer step queued right after
#               (the checkpoint must hold the old values), restore into
#               zeroed tensors, bit-exact; PCIe sampled meanwhile
#   global      the same as global tensors (restored by the resharding
#               reader, through its pinned scratch buffers)
#   overlap     16 overlapping ckpt_save_stream calls on one stream
#   sequential  12 stream saves in a row (ring slots reused)
#   close       ckpt_close with 6 stream saves in flight: the stream drains
#   die, after  a trainer that SIGKILLs itself mid-copy, then a new one
#   stuck       a trainer whose stream never reaches its save while another
#               job saves twice: the other job must not wait for it
#   orphan      ckptd SIGKILLed while a stream save is armed: the trainer's
#               stream must run on and the save must fail
# A failed scenario is recorded and the next one runs (ckptd is restarted
# if it died).  Files in the output folder: run.log (all of the output),
# results.txt (PASS/FAIL lines and "RESULT key value" figures), ckptd.log,
# <scenario>.out, pcie.csv.
#   run.sh --sim (or CKPT_GPU_SIM=1)  the same on the CUDA driver simulator
#                (build/cudasim), to rehearse it here; its figures are not
#                a GPU's
# Exit 0 pass, 1 a scenario failed (or the bound was reached), 2 something
# needed is missing (nothing was run), 77 no GPU.
# STRICT_TARGETS=1 also fails when staging or restore is < 0.85x its floor.
set -u
SELF=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
cd "$(dirname "$0")/../.." || exit 2
SIM=${CKPT_GPU_SIM:-0}
[ "${1:-}" = --sim ] && SIM=1
LIMIT=${GPU_RUN_LIMIT:-420}
STEP_LIMIT=${GPU_STEP_LIMIT:-60}

# --- the one global bound: this script again, under timeout -----------------
# The output folder's run.log is written by the tee out here, which the
# timeout does not kill, so the last line says where the time ran out.
if [ -z "${CKPT_GPU_RUN_INNER:-}" ]; then
	if [ -n "${OUT:-}" ]; then
		OUTDIR=$OUT
	else
		OUTDIR=$PWD/build/gpu-run
		rm -rf "$OUTDIR"
	fi
	mkdir -p "$OUTDIR" || exit 2
	export OUTDIR CKPT_GPU_RUN_INNER=1 CKPT_GPU_SIM=$SIM
	start=$(date +%s)
	timeout -k 10 "$LIMIT" "$SELF" "$@" 2>&1 | tee -a "$OUTDIR/run.log"
	rc=${PIPESTATUS[0]}
	if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
		last=$(sed -n 's/^START //p' "$OUTDIR/results.txt" 2>/dev/null | tail -1)
		line="TIMEOUT: the global bound (GPU_RUN_LIMIT=$LIMIT s) ended the run during '$last'"
		echo "$line" | tee -a "$OUTDIR/run.log"
		echo "$line" >> "$OUTDIR/results.txt"
		rc=1
	fi
	echo "run.sh: exit $rc after $(($(date +%s) - start)) s; results in $OUTDIR" |
		tee -a "$OUTDIR/run.log"
	exit "$rc"
fi

BUN=${GPU_BUNDLE:-build/gpu-bundle}
RES=$OUTDIR/results.txt
TR=$BUN/gpu_trainer
res() { echo "$*" >> "$RES"; }                 # a line of results.txt, now
result() { res "RESULT $1 $2"; }
say() { echo "$*"; }

# --- what this needs, said plainly; nothing runs without it -----------------------
if [ "$SIM" = 1 ]; then
	[ -e build/cudasim/libcuda.so.1 ] || { echo "MISSING: build/cudasim (make cudasim)"; exit 2; }
	export LD_LIBRARY_PATH="$PWD/build/cudasim${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
	say "NOTE: on the CUDA driver SIMULATOR (a test double): figures are not a GPU's"
elif ! nvidia-smi -L >/dev/null 2>&1; then
	say "SKIP: no GPU (nvidia-smi does not work here)"
	res "SKIP no GPU"
	exit 77
fi
missing=()
if [ "$SIM" = 0 ]; then
	have_libcuda=0
	ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1 ' && have_libcuda=1
	for f in /usr/lib/x86_64-linux-gnu/libcuda.so.1 /usr/lib64/libcuda.so.1 \
		 /usr/local/nvidia/lib64/libcuda.so.1 /usr/lib/wsl/lib/libcuda.so.1; do
		[ -e "$f" ] && have_libcuda=1
	done
	[ $have_libcuda = 1 ] || missing+=("libcuda.so.1 (the NVIDIA driver's library)")
fi
for f in ckptd gpu_trainer libckpt.so; do
	if [ ! -e "$BUN/$f" ]; then
		missing+=("$BUN/$f: run 'make gpu-bundle' on the build machine and carry build/gpu-bundle")
	elif command -v ldd >/dev/null && ldd "$BUN/$f" 2>&1 | grep -q 'not found'; then
		missing+=("$BUN/$f cannot load here: $(ldd "$BUN/$f" 2>&1 | grep 'not found' | tr -s ' \t\n' ' ')")
	fi
done
if [ -e "$BUN/ckptd" ] && ! out=$("$BUN/ckptd" --version 2>&1); then
	missing+=("a runnable $BUN/ckptd: $out")
fi
if [ ${#missing[@]} -gt 0 ]; then
	say "MISSING (nothing was run):"
	printf '  - %s\n' "${missing[@]}"
	res "MISSING ${missing[*]}"
	exit 2
fi

# --- a private ckptd ---------------------------------------------------------------
T=$(mktemp -d "${GPU_TMP:-${TMPDIR:-/tmp}}/ckpt-gpu.XXXXXX") || exit 2
SOCK=$T/ckptd.sock
LOG=$OUTDIR/ckptd.log
CKPTD_PID=
BG=()
finish() {
	for p in "${BG[@]}" $CKPTD_PID; do kill -9 "$p" 2>/dev/null; done
	rm -rf "$T"
}
trap finish EXIT
trap 'say "TERM: stopping"; exit 1' TERM INT
POOL=${GPU_POOL:-4GiB}
[ "$SIM" = 1 ] && POOL=${GPU_POOL:-256MiB}
cat > "$T/ckptd.json" <<JSON
{"socket": "$SOCK", "root": "$T/root", "staging_bytes": "$POOL", "chunk_bytes": "16MiB",
 "stage_threads": 4, "write_threads": 4, "keep_last": 0, "log_level": "info",
 "gpu": "auto"}
JSON
nstart=0
start_ckptd() {
	nstart=$((nstart + 1))
	echo "--- ckptd start $nstart" >> "$LOG"
	"$BUN/ckptd" -c "$T/ckptd.json" >> "$LOG" 2>&1 &
	CKPTD_PID=$!
	for _ in $(seq 300); do
		[ "$(grep -c 'ready:' "$LOG")" -ge $nstart ] && return 0
		kill -0 $CKPTD_PID 2>/dev/null || break
		sleep 0.1
	done
	say "ckptd did not become ready; its log:"
	tail -20 "$LOG"
	CKPTD_PID=
	return 1
}
alive() { [ -n "$CKPTD_PID" ] && kill -0 "$CKPTD_PID" 2>/dev/null; }

# --- scenarios -------------------------------------------------------------------
FAILS=()
cur=
t_cur=0
begin() { cur=$1; t_cur=$(date +%s); say "== $1"; res "START $1"; }
pass() { res "PASS $cur ($(($(date +%s) - t_cur)) s)"; say "PASS $cur"; }
failed() {
	res "FAIL $cur: $* ($(($(date +%s) - t_cur)) s)"
	say "FAIL $cur: $*"
	FAILS+=("$cur")
	[ -e "$OUTDIR/$cur.out" ] && tail -15 "$OUTDIR/$cur.out" | sed 's/^/  | /'
	alive || { say "  ckptd is gone; its log ends:"; tail -15 "$LOG" | sed 's/^/  | /'
		   CKPTD_PID=; }
}
# NAME [ENV=V...] -- ARGS: the trainer on our socket, bounded, output in NAME.out
trainer() {
	local name=$1 env=(); shift
	while [ "$1" != -- ]; do env+=("$1"); shift; done
	shift
	# --foreground: in our process group, which the global bound's timeout kills
	env "${env[@]}" timeout --foreground -k 5 "$STEP_LIMIT" "$TR" "$SOCK" "$name" "$@" \
		> "$OUTDIR/$name.out" 2>&1
}
show() { grep '^ok\|^FAIL\|HANG\|^RESULT' "$OUTDIR/$1.out" | sed 's/^/  /'; }
need_ckptd() { alive || start_ckptd; }
# SCENARIO [ENV=V...] -- ARGS: begin, run the trainer, pass or fail
simple() {
	local name=$1; shift
	begin "$name"
	need_ckptd || { failed "ckptd would not start"; return 1; }
	trainer "$name" "$@"
	local rc=$?
	show "$name"
	if [ $rc -ne 0 ]; then
		failed "gpu_trainer exited $rc$([ $rc = 124 ] && echo " (over GPU_STEP_LIMIT=$STEP_LIMIT s)")"
		return 1
	fi
	alive || { failed "ckptd died"; return 1; }
	pass
}
armed() {   # pid file: wait until the backgrounded trainer says "armed"
	for _ in $(seq $((STEP_LIMIT * 10))); do
		grep -q armed "$2" && return 0
		kill -0 "$1" 2>/dev/null || return 1
		sleep 0.1
	done
	return 1
}

# --- env -------------------------------------------------------------------------
begin env
say "  bundle: $(head -2 "$BUN/MANIFEST" 2>/dev/null | tr '\n' ' ')"
os=$(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME")
say "  this machine: ${os:-an unnamed OS}, kernel $(uname -r)," \
	"glibc $(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}'), $(nproc) CPUs," \
	"$(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo) RAM"
say "  ckptd root: $T/root ($(stat -f -c %T "$T" 2>/dev/null))"
PCIE="n/a (simulator)"
if [ "$SIM" = 0 ]; then
	nvidia-smi --query-gpu=index,name,uuid,driver_version,memory.total,compute_mode,persistence_mode \
		--format=csv,noheader | sed 's/^/  GPU /'
	q=pcie.link.gen.current,pcie.link.width.current,pcie.link.gen.max,pcie.link.width.max
	link=$(nvidia-smi -i "${GPU_TRAINER_DEVICE:-0}" --query-gpu=$q --format=csv,noheader 2>&1)
	say "  PCIe (nvidia-smi, idle; links slow down when idle): gen,width now / max: $link"
	result pcie_idle "$(echo "$link" | tr -d ' ')"
	bus=$(nvidia-smi -i "${GPU_TRAINER_DEVICE:-0}" --query-gpu=pci.bus_id --format=csv,noheader |
	      tr 'A-F' 'a-f' | tr -d ' ')
	sys=/sys/bus/pci/devices/${bus: -12}
	if [ -r "$sys/current_link_speed" ]; then
		say "  PCIe (sysfs $sys): now $(cat "$sys/current_link_speed") x$(cat "$sys/current_link_width")," \
			"max $(cat "$sys/max_link_speed") x$(cat "$sys/max_link_width")"
		result pcie_sysfs "$(cat "$sys/max_link_speed" | tr -d ' ')x$(cat "$sys/max_link_width")"
	else
		say "  PCIe (sysfs): $sys not readable"
	fi
	PCIE=$link
fi
if start_ckptd; then
	grep 'CUDA:\|no GPU' "$LOG" | sed 's/^/  /'
	if grep -q 'CUDA: .*usable' "$LOG"; then
		pass
	else
		failed "ckptd found no usable GPU (its log says why above)"
	fi
else
	failed "ckptd would not start"
fi

# --- roundtrip: the figures ----------------------------------------------------------------
MIB=${GPU_MIB:-2048}
[ "$SIM" = 1 ] && MIB=${GPU_MIB:-64}
sampler=
if [ "$SIM" = 0 ]; then   # the link under load (it trains down when idle)
	nvidia-smi -i "${GPU_TRAINER_DEVICE:-0}" --query-gpu=timestamp,pcie.link.gen.current,pcie.link.width.current \
		--format=csv,noheader -lms 100 > "$OUTDIR/pcie.csv" 2>&1 &
	sampler=$!
	BG+=("$sampler")
fi
simple roundtrip GPU_TRAINER_MIB="$MIB" -- roundtrip
[ -n "$sampler" ] && kill "$sampler" 2>/dev/null
val() { awk -v k="$1" '$1 == "RESULT" && $2 == k {print $3}' "$OUTDIR/roundtrip.out"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a != "" && b > 0) printf "%.2f", a / b; else print "?" }'; }
for k in bytes floor_d2h_GBps floor_h2d_GBps staging_GBps restore_GBps trainer_stall_ms stream_held_ms; do
	[ -n "$(val $k)" ] && result "$k" "$(val $k)"
done
pin=$(sed -n 's/.*staging pool pinned (\([0-9]*\) MiB) in \([0-9]*\) ms.*/\1 \2/p' "$LOG" | head -1)
[ -n "$pin" ] && result pool_pin_ms "${pin#* }"
if [ "$SIM" = 0 ] && [ -s "$OUTDIR/pcie.csv" ]; then
	PCIE="$(awk -F', *' 'NF >= 3 { print "gen " $2 " x" $3 }' "$OUTDIR/pcie.csv" | sort | uniq -c |
		sort -rn | head -2 | awk '{ $1 = $1 " samples:"; print }' | paste -sd ';' -) (under load)"
	result pcie_load "$(echo "$PCIE" | tr ' ' '_')"
fi

# --- the other scenarios ---------------------------------------------------------------------
simple global GPU_TRAINER_GLOBAL=1 GPU_TRAINER_MIB=$((MIB < 256 ? MIB : 256)) -- roundtrip
simple overlap GPU_TRAINER_MIB=64 -- overlap 16
simple sequential GPU_TRAINER_MIB=64 -- sequential 12
simple close GPU_TRAINER_MIB=64 -- close 6

# PyTorch's added time per save with deferred gates (needs a CUDA PyTorch:
# TORCH_PYTHON; exit 77 without one)
begin torch_overlap
if need_ckptd; then
	CKPT_LIB="$BUN/libckpt.so" timeout --foreground -k 5 "$STEP_LIMIT" \
		"${TORCH_PYTHON:-python3}" tests/gpu/torch_overlap.py "$SOCK" torch_overlap \
		> "$OUTDIR/torch_overlap.out" 2>&1
	rc=$?
	show torch_overlap
	grep '^RESULT' "$OUTDIR/torch_overlap.out" >> "$RES"
	case $rc in
	0)  pass ;;
	77) say "  $(head -1 "$OUTDIR/torch_overlap.out")"; res "SKIP torch_overlap" ;;
	*)  failed "torch_overlap.py exited $rc" ;;
	esac
else
	failed "ckptd would not start"
fi

begin die
if need_ckptd; then
	(trainer die GPU_TRAINER_MIB=$((MIB / 2)) -- die) 2>/dev/null   # no "Killed" line
	say "  the trainer ended with status $? (137: it killed itself)"
	sleep 2
	alive && pass || failed "ckptd died when a trainer was killed mid-copy"
else
	failed "ckptd would not start"
fi
simple after GPU_TRAINER_MIB=64 -- roundtrip

begin stuck
if need_ckptd; then
	rm -f "$T/go"
	trainer stuck GPU_TRAINER_MIB=64 -- hold "$T/go" &
	held=$!
	BG+=("$held")
	if ! armed $held "$OUTDIR/stuck.out"; then
		failed "the held save never armed"
	else
		trainer other GPU_TRAINER_MIB=64 -- sequential 2
		orc=$?
		touch "$T/go"
		wait $held
		hrc=$?
		show other
		show stuck
		if [ $orc -ne 0 ]; then
			failed "another job's saves waited for the stuck one (exit $orc)"
		elif [ $hrc -ne 0 ]; then
			failed "the stuck save, once its stream went on (exit $hrc)"
		else
			pass
		fi
	fi
else
	failed "ckptd would not start"
fi

begin orphan
if need_ckptd; then
	rm -f "$T/go2"
	trainer orphan GPU_TRAINER_MIB=64 -- orphan "$T/go2" &
	held=$!
	BG+=("$held")
	if ! armed $held "$OUTDIR/orphan.out"; then
		failed "the held save never armed"
	else
		kill -KILL "$CKPTD_PID"
		wait "$CKPTD_PID" 2>/dev/null
		CKPTD_PID=
		touch "$T/go2"
		wait $held
		hrc=$?
		show orphan
		[ $hrc -eq 0 ] && pass || failed "the trainer after ckptd died (exit $hrc)"
	fi
else
	failed "ckptd would not start"
fi

# --- summary ----------------------------------------------------------------------------
st=$(ratio "$(val staging_GBps)" "$(val floor_d2h_GBps)")
rs=$(ratio "$(val restore_GBps)" "$(val floor_h2d_GBps)")
pin_txt="?"
[ -n "$pin" ] && pin_txt="${pin% *} MiB in ${pin#* } ms ($(awk -v m="${pin% *}" -v t="${pin#* }" \
	'BEGIN { if (t > 0) printf "%.1f GB/s", m * 1048576 / t / 1e6; else print "under 1 ms" }'))"
say "== summary ($MIB MiB roundtrip; pool $POOL)"
printf '  %-36s %s\n' "PCIe link" "$PCIE" \
	"staging pool pinned (off the loop)" "$pin_txt" \
	"pinned D2H copies (floor)" "$(val floor_d2h_GBps) GB/s" \
	"ckptd staging (GPU -> pool)" "$(val staging_GBps) GB/s (${st}x floor, target >= 0.85)" \
	"pinned H2D copies (floor)" "$(val floor_h2d_GBps) GB/s" \
	"ckptd restore (file -> GPU, checked)" "$(val restore_GBps) GB/s (${rs}x H2D floor, target >= 0.85)" \
	"trainer stall (CPU in save_stream)" "$(val trainer_stall_ms) ms" \
	"training-stream delay" "$(val stream_held_ms) ms (save_stream to the next kernel done)"
miss=0
awk -v a="$st" 'BEGIN { exit !(a >= 0.85) }' || { say "  TARGET MISSED: staging"; miss=1; }
awk -v a="$rs" 'BEGIN { exit !(a >= 0.85) }' || { say "  TARGET MISSED: restore"; miss=1; }
[ "${STRICT_TARGETS:-0}" = 1 ] && [ $miss = 1 ] && FAILS+=(targets)
if [ ${#FAILS[@]} -gt 0 ]; then
	res "FAILED ${FAILS[*]}"
	say "FAIL tests/gpu/run.sh: ${FAILS[*]}"
	exit 1
fi
res "PASSED all"
say "PASS tests/gpu/run.sh"
exit 0
