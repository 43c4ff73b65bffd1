#!/bin/bash
# powerloss.sh - power-loss campaign.  ckptd's root is an ext4 loop image
# mounted with commit=60 (the journal is not committed on its own during the
# run).  While a 2-rank job saves continuously, the image is snapshotted at
# random moments (SIGSTOP ckptd, copy the image, SIGCONT): the copy is what a
# power cut would leave.  Each copy is fsck'ed (journal replay) and mounted
# read-only, and the invariant is checked on it: latest verifies, is not
# older than the newest step acknowledged COMMITTED before the snapshot, and
# the acknowledged steps of the keep window are there and verify.  Negative
# control: the same with fsync turned into a no-op (nofsync.so) must be
# caught by at least one snapshot.  Skips (77) without loop devices.
#   powerloss.sh          4 snapshots + 4 for the negative control
#   powerloss.sh --long   25 + 10
. "$(dirname "$0")/rlib.sh"
[ "$(id -u)" = 0 ] || skip "needs root for loop mounts"
for c in mkfs.ext4 e2fsck losetup; do command -v $c > /dev/null || skip "no $c"; done
NSNAP=$([ $LONG = 1 ] && echo 25 || echo 4)
NNEG=$([ $LONG = 1 ] && echo 10 || echo 4)
KEEP=3
cc -shared -fPIC -O1 -o "$T/nofsync.so" "$(dirname "$0")/nofsync.c" || skip "cannot build nofsync.so"

campaign() {   # mode(normal|nofsync) nsnap -> number of snapshots violating the invariant
	local mode=$1 nsnap=$2 img=$T/disk-$1.img mnt=$T/mnt-$1 bad=0 i
	truncate -s 512M "$img" && mkfs.ext4 -q -F "$img" > /dev/null 2>&1 || skip "mkfs.ext4 failed"
	mkdir -p "$mnt" "$T/snapmnt"
	mount -o loop,commit=60 "$img" "$mnt" 2> "$T/mount.err" || skip "cannot loop-mount: $(cat $T/mount.err)"
	ROOT=$mnt/root; mkdir -p "$ROOT"
	write_conf "\"root\": \"$ROOT\"" "\"keep_last\": $KEEP" '"staging_bytes": "16MiB"' \
		'"chunk_bytes": "256KiB"' '"log_level": "info"'
	if [ $mode = nofsync ]; then
		LD_PRELOAD=$(preload "$T/nofsync.so") restart_ckptd_n
	else
		restart_ckptd_n
	fi
	: > "$T/acked.p$mode"; : > "$T/stop"; rm -f "$T/stop"
	( s=0; while [ ! -e "$T/stop" ]; do s=$((s + 1)); run2 p$mode $s --mib 2 > /dev/null 2>&1; done ) &
	local loop=$!
	for i in $(seq 1 $nsnap); do
		sleep 0.$(( RANDOM % 9 + 2 ))
		kill -STOP $CKPTD_PID
		sort -n -u "$T/acked.p$mode" > "$T/acked.snap"
		cp --sparse=always "$img" "$T/snap.img"
		kill -CONT $CKPTD_PID
		e2fsck -fy "$T/snap.img" > "$T/fsck.out" 2>&1
		[ $? -lt 4 ] || { bad=$((bad + 1)); log "$mode snapshot $i: fsck failed"; continue; }
		mount -o ro,loop "$T/snap.img" "$T/snapmnt" || fail "cannot mount the snapshot"
		local why=""
		local l=$(cat "$T/snapmnt/root/p$mode/latest_checkpoint.txt" 2>/dev/null)
		local newest=$(tail -1 "$T/acked.snap")
		if [ -n "$newest" ]; then
			if [ -z "$l" ]; then why="no latest, newest ack $newest"
			elif ! "$TOP/ckptctl" verify "$T/snapmnt/root/p$mode/$l" > /dev/null 2>&1; then why="latest $l does not verify"
			elif [ $(step_of $l) -lt $newest ]; then why="latest $l older than acknowledged $newest"
			else
				for a in $(tail -$KEEP "$T/acked.snap"); do
					local d=$T/snapmnt/root/p$mode/$(printf 'iter_%09d' $a)
					[ $a -gt $(( $(step_of $l) - KEEP )) ] || continue
					"$TOP/ckptctl" verify "$d" > /dev/null 2>&1 || why="acknowledged $a missing or broken"
				done
			fi
		elif [ -n "$l" ] && ! "$TOP/ckptctl" verify "$T/snapmnt/root/p$mode/$l" > /dev/null 2>&1; then
			why="latest $l does not verify"
		fi
		umount "$T/snapmnt"
		[ -n "$why" ] && bad=$((bad + 1))
		log "$mode snapshot $i: acked up to ${newest:-none}, latest ${l:-none}: ${why:-invariant holds}"
	done
	touch "$T/stop"; wait $loop
	stop_ckptd
	umount "$mnt"; rm -f "$img" "$T/snap.img"
	SNAPS=$((SNAPS + nsnap))
	BAD=$bad
}
start_ckptd; stop_ckptd      # lib.sh's config and log
SNAPS=0
campaign normal $NSNAP; bad_normal=$BAD
[ $bad_normal = 0 ] || fail "$bad_normal of $NSNAP power-loss snapshots broke the invariant"
campaign nofsync $NNEG; bad_neg=$BAD
[ $bad_neg -gt 0 ] || fail "negative control: with fsync suppressed no snapshot was caught"
echo "powerloss campaign: $NSNAP snapshots, invariant held in all; negative control (fsync a no-op): $bad_neg of $NNEG snapshots caught"
pass
