#!/bin/bash
# soak.sh - soak campaign: 4 jobs x 2 ranks = 8 clients save (random sizes,
# 1-6 MiB per rank) and restore continuously while ckptd is SIGKILLed and
# restarted at random moments, some restarts with an injected I/O fault
# (CKPT_FAULT).  Clients reconnect and go on.  Afterwards every step a client
# was told COMMITTED that is within the keep window (keep_last 3) restores
# bit-exactly on both ranks, older ones were pruned only behind newer ones;
# ckptd's RSS, fd and thread counts sampled between kills stay flat.
#   soak.sh                 30 s, a kill every 2-5 s
#   soak.sh --long          600 s (SOAK_TIME=seconds to change), kills every 5-30 s
. "$(dirname "$0")/rlib.sh"
DUR=${SOAK_TIME:-$([ $LONG = 1 ] && echo 600 || echo 30)}
KEEP=3
start_ckptd "\"keep_last\": $KEEP" '"staging_bytes": "32MiB"' '"chunk_bytes": "256KiB"' \
	'"step_deadline_ms": 5000' '"log_level": "info"'
END=$(( $(date +%s) + DUR ))
mib_of() { echo $(( ($1 * 7 + $2 * 3) % 6 + 1 )); }   # step jobidx -> MiB per rank

job_loop() {   # jobidx
	local j=soak$1 s=0 m rc0 rc1 n=0 p0
	: > "$T/acked.$j"
	while [ $(date +%s) -lt $END ]; do
		s=$((s + 1)); m=$(mib_of $s $1)
		timeout 60 "$TRAINER" save -s "$SOCK" -j $j -r 0 -w 2 --mib $m --steps $s -q > "$T/o0.$j" 2>&1 &
		p0=$!
		timeout 60 "$TRAINER" save -s "$SOCK" -j $j -r 1 -w 2 --mib $m --steps $s -q > "$T/o1.$j" 2>&1
		rc1=$?; wait $p0; rc0=$?
		echo "save $j $s $m $rc0 $rc1" >> "$T/soak.log"
		if [ $rc0 = 0 ] || [ $rc1 = 0 ]; then    # someone was told COMMITTED
			echo "$s $m" >> "$T/acked.$j"
		fi
		[ $rc0 = 124 ] || [ $rc1 = 124 ] && echo "HANG $j step $s" >> "$T/soak.problems"
		grep -qs "ckpt_connect" "$T/o0.$j" "$T/o1.$j" && sleep 0.2
		n=$((n + 1))
		if [ $((n % 3)) = 0 ] && [ -s "$T/acked.$j" ]; then
			read -r as am < <(tail -1 "$T/acked.$j")
			for r in 0 1; do
				timeout 60 "$TRAINER" restore -s "$SOCK" -j $j -r $r -w 2 --mib $am --step $as \
					--expect $as > "$T/or.$j" 2>&1
				case $? in
				0) echo "restore $j $as ok" >> "$T/soak.log" ;;
				3) echo "WRONG DATA $j step $as rank $r: $(cat $T/or.$j)" >> "$T/soak.problems" ;;
				124) echo "HANG restore $j $as" >> "$T/soak.problems" ;;
				*) echo "restore $j $as failed: $(tail -1 $T/or.$j)" >> "$T/soak.log" ;;
				esac
			done
		fi
	done
}

sample() {   # pid -> "rss_kib fds threads"
	local p=$1
	echo "$(awk '/^VmRSS/ {print $2}' /proc/$p/status 2>/dev/null) $(ls /proc/$p/fd 2>/dev/null | wc -l) $(awk '/^Threads/ {print $2}' /proc/$p/status 2>/dev/null)"
}

: > "$T/soak.log"; : > "$T/samples"
LOOPS=()
for i in 1 2 3 4; do job_loop $i & LOOPS+=($!); done
kills=0; faulted=0
while [ $(date +%s) -lt $END ]; do
	if [ $LONG = 1 ]; then sleep $(( RANDOM % 26 + 5 )); else sleep $(( RANDOM % 4 + 2 )).$(( RANDOM % 10 )); fi
	[ $(date +%s) -lt $END ] || break
	sample $CKPTD_PID >> "$T/samples"
	kill_ckptd; kills=$((kills + 1))
	if [ $((kills % 3)) = 0 ]; then    # every third restart injects a fault
		spec=$(case $((RANDOM % 3)) in 0) echo write;; 1) echo fsync;; 2) echo open;; esac):$((RANDOM % 20 + 1)):-5
		CKPT_FAULT=$spec restart_ckptd_n; faulted=$((faulted + 1))
	else
		restart_ckptd_n
	fi
done
wait "${LOOPS[@]}"   # the job loops end by themselves
sample $CKPTD_PID >> "$T/samples"
kill_ckptd; kills=$((kills + 1))
restart_ckptd_n
assert_no_leftovers

# verification: every acknowledged step in the keep window restores bit-exactly
lost=0; checked=0
for i in 1 2 3 4; do
	j=soak$i
	[ -s "$T/acked.$j" ] || { echo "job $j: nothing committed"; lost=$((lost + 1)); continue; }
	verify_latest $j
	mapfile -t acked < <(sort -n -u "$T/acked.$j")
	total=${#acked[@]}
	for ((k = 0; k < total; k++)); do
		read -r s m <<< "${acked[$k]}"
		newer=$((total - k - 1))
		d=$ROOT/$j/$(printf 'iter_%09d' $s)
		if [ ! -d "$d" ]; then
			[ $newer -ge $KEEP ] && continue        # pruned behind newer ones
			# the keep window counts committed steps, acknowledged or not
			[ "$(ls $ROOT/$j | grep -c '^iter_')" -ge $KEEP ] &&
				[ "$(ls $ROOT/$j | grep '^iter_' | sort | head -1)" \> "$(basename $d)" ] && continue
			echo "LOST: $j step $s (acknowledged COMMITTED, not on disk)"; lost=$((lost + 1)); continue
		fi
		for r in 0 1; do
			checked=$((checked + 1))
			"$TRAINER" restore -s "$SOCK" -j $j -r $r -w 2 --mib $m --step $s --expect $s > "$T/vr" 2>&1 ||
				{ echo "LOST: $j step $s rank $r: $(cat $T/vr)"; lost=$((lost + 1)); }
		done
	done
done
idle=$(sample $CKPTD_PID)
saves=$(grep -c '^save' "$T/soak.log")
ok=$(cat "$T"/acked.soak* | wc -l)
bytes=$(cat "$T"/acked.soak* | awk '{s += $2 * 2} END {print s + 0}')
restores=$(grep -c '^restore .* ok' "$T/soak.log")
faults=$(grep -c 'injected fault:' "$LOG")
read -r rmin rmax fmin fmax tmin tmax < <(awk '$1 {r[NR]=$1; f[NR]=$2; t[NR]=$3}
	END {rn=rx=r[1]; fn=fx=f[1]; tn=tx=t[1]
	     for (i in r) {if (r[i]<rn) rn=r[i]; if (r[i]>rx) rx=r[i]; if (f[i]<fn) fn=f[i]; if (f[i]>fx) fx=f[i]; if (t[i]<tn) tn=t[i]; if (t[i]>tx) tx=t[i]}
	     print rn, rx, fn, fx, tn, tx}' "$T/samples")
echo "soak: ${DUR}s, $saves saves ($ok committed, $bytes MiB), $restores restores during the run, $checked verified after, $kills kills, $faulted restarts with a fault ($faults faults injected), lost = $lost"
echo "ckptd between kills: RSS ${rmin}-${rmax} KiB, fds ${fmin}-${fmax}, threads ${tmin}-${tmax}; idle after: RSS/fds/threads $idle"
[ -s "$T/soak.problems" ] && { cat "$T/soak.problems"; fail "soak problems"; }
[ $lost = 0 ] || fail "lost = $lost"
[ "$ok" -gt 0 ] || fail "no save committed"
# flat = no growth: the later half of the samples peaks no higher than the
# earlier half (a fresh process starts lower, so minima say nothing)
read -r r1 r2 f1 f2 t1 t2 < <(awk '$1 {n++; r[n]=$1; f[n]=$2; t[n]=$3}
	END {h=int((n+1)/2); for (i=1;i<=n;i++) { if (i<=h) {if(r[i]>R1)R1=r[i]; if(f[i]>F1)F1=f[i]; if(t[i]>T1)T1=t[i]}
	     else {if(r[i]>R2)R2=r[i]; if(f[i]>F2)F2=f[i]; if(t[i]>T2)T2=t[i]} }
	     print R1+0, R2+0, F1+0, F2+0, T1+0, T2+0}' "$T/samples")
[ "$r2" -le $((r1 + 32768)) ] || fail "RSS grew: peak $r1 KiB, later $r2 KiB"
[ "$t2" -le $((t1 + 2)) ] || fail "thread count grew: peak $t1, later $t2"
[ "$f2" -le $((f1 + 16)) ] || fail "fd count grew: peak $f1, later $f2"
[ $tmax -le 64 ] && [ $fmax -le 256 ] || fail "threads $tmax / fds $fmax unbounded"
pass
