# The systemd units pass `systemd-analyze verify` (man pages included) and
# `systemd-analyze security --offline=true` with an exposure of 2.5 or
# lower; they say what the issue asks (Type=notify, user ckpt, runtime
# directory, LimitMEMLOCK, NVIDIA devices, a syscall filter keeping
# io_uring); the sysusers and tmpfiles snippets apply to an empty root.
. "$(dirname "$0")/lib.sh"
command -v systemd-analyze > /dev/null || skip "systemd-analyze is not installed (apt-get install systemd)"
U=$TOP/systemd
MAX=2.5

# the units as `make install` writes them, pointing at this tree's ckptd
mkdir -p "$T/units" "$T/etc/ckpt" "$T/man/man1" "$T/man/man5" "$T/man/man8"
for u in ckptd.service ckptd@.service; do
	[ -f "$U/$u" ] || fail "systemd/$u is missing"
	sed -e "s|/usr/bin/ckptd|$TOP/ckptd|g" -e "s|/etc/ckpt|$T/etc/ckpt|g" "$U/$u" > "$T/units/$u"
done
cp "$T/units/ckptd@.service" "$T/units/ckptd@node0.service"
cp "$TOP/configs/ckptd.json" "$T/etc/ckpt/ckptd.json"
cp "$TOP/client/man/ckptctl.1" "$T/man/man1/"
cp "$TOP/daemon/man/ckptd.json.5" "$T/man/man5/"
cp "$TOP/daemon/man/ckptd.8" "$T/man/man8/"
export MANPATH=$T/man

for u in ckptd.service ckptd@node0.service; do
	out=$(cd "$T/units" && systemd-analyze verify "./$u" 2>&1); rc=$?
	[ $rc -eq 0 ] || fail "verify $u (rc $rc): $out"
	[ -z "$out" ] || fail "verify $u warns: $out"
	out=$(cd "$T/units" && systemd-analyze security --offline=true "./$u" 2>&1)
	score=$(printf '%s\n' "$out" | sed -nE 's/.*[Oo]verall exposure level for [^:]+: ([0-9]+(\.[0-9]+)?).*/\1/p' | tail -1)
	[ -n "$score" ] || fail "no exposure score for $u: $(printf '%s\n' "$out" | tail -3)"
	awk -v s="$score" -v m="$MAX" 'BEGIN { exit !(s + 0 <= m + 0) }' ||
		fail "$u: exposure $score > $MAX: $(printf '%s\n' "$out" | grep '✗')"
	log "$u: verify clean, exposure $score"
done

# what the unit must say (the instance template says the same)
for u in ckptd.service ckptd@.service; do
	f=$U/$u
	for want in '^Type=notify$' '^User=ckpt$' '^Group=ckpt$' '^RuntimeDirectory=ckpt' \
		    '^LimitMEMLOCK=' '^DeviceAllow=char-nvidia\* rw$' '^DevicePolicy=closed$' \
		    '^NoNewPrivileges=yes$' '^CapabilityBoundingSet=$' '^ProtectSystem=strict$' \
		    '^ExecReload=.*-HUP' '^SystemCallFilter=@system-service.* io_uring_setup' \
		    '^SystemCallFilter=.*io_uring_enter' '^SystemCallFilter=.*io_uring_register' \
		    '^IPAddressDeny=any$' '^RestrictAddressFamilies=' '^ExecStartPre=.* -n ' \
		    '^FileDescriptorStoreMax=[1-9]'; do
		grep -qE "$want" "$f" || fail "$u lacks $want"
	done
done
# io_uring is not in @system-service (so naming it is needed), and nothing
# in the unit's deny list takes it away again
systemd-analyze syscall-filter @privileged @resources 2>/dev/null | grep -q io_uring &&
	fail "a denied group contains io_uring"
# the socket the unit's directory holds is group-accessible
grep -q '"socket_mode": "0660"' "$TOP/configs/ckptd.json" || fail "default socket_mode is not 0660"
grep -q '"socket": "/run/ckpt/ckptd.sock"' "$TOP/configs/ckptd.json" || fail "default socket not in /run/ckpt"

# sysusers.d and tmpfiles.d, applied to an empty root
if command -v systemd-sysusers > /dev/null && command -v systemd-tmpfiles > /dev/null; then
	R=$T/sysroot
	mkdir -p "$R/etc"
	systemd-sysusers --root="$R" "$U/ckpt.sysusers" > "$T/su.out" 2>&1 || fail "sysusers: $(cat "$T/su.out")"
	grep -q '^ckpt:x:[0-9]*:[0-9]*:.*:/var/lib/ckpt:/usr/sbin/nologin$' "$R/etc/passwd" || fail "no user ckpt: $(cat "$R/etc/passwd")"
	grep -q '^ckpt:x:' "$R/etc/group" || fail "no group ckpt"
	systemd-tmpfiles --root="$R" --create "$U/ckpt.tmpfiles" > "$T/tf.out" 2>&1 || fail "tmpfiles: $(cat "$T/tf.out")"
	# the root: trainers reach their own job, list nothing (job ACLs do the rest)
	for dm in run/ckpt:750 var/lib/ckpt:711; do
		d=${dm%:*}
		[ "$(stat -c %a "$R/$d")" = "${dm#*:}" ] || fail "$d mode $(stat -c %a "$R/$d")"
	done
	uid=$(awk -F: '$1 == "ckpt" { print $3 }' "$R/etc/passwd")
	[ "$(stat -c %u "$R/run/ckpt")" = "$uid" ] || fail "/run/ckpt not owned by ckpt"
else
	log "systemd-sysusers/-tmpfiles absent: snippets not applied"
fi
pass
