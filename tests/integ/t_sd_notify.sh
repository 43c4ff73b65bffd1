# The systemd notify protocol as Type=notify sees it, without systemd: with
# $NOTIFY_SOCKET ckptd sends READY=1 once it serves, STATUS= after each
# commit, STOPPING=1 on SIGTERM; under systemd its log lines carry <N>
# syslog priority prefixes.
. "$(dirname "$0")/lib.sh"
NS=$T/notify.sock
python3 - "$NS" "$T/notify.out" <<'PY' &
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1])
s.settimeout(30)
with open(sys.argv[2], "a") as f:
    try:
        while True:
            m = s.recv(4096).decode()
            f.write(m.replace("\n", "|") + "\n"); f.flush()
            if "STOPPING=1" in m:
                break
    except socket.timeout:
        pass
PY
lp=$!
for _ in $(seq 100); do [ -S "$NS" ] && break; sleep 0.05; done
[ -S "$NS" ] || fail "notify listener did not start"

NOTIFY_SOCKET=$NS JOURNAL_STREAM=8:1234 start_ckptd
for _ in $(seq 100); do grep -q READY=1 "$T/notify.out" 2>/dev/null && break; sleep 0.05; done
grep -q '^READY=1|STATUS=serving ' "$T/notify.out" || fail "no READY=1: $(cat "$T/notify.out")"
trainer save -j nfy --mib 1 --steps 1:2 -q || fail "saves"
for _ in $(seq 100); do grep -q "iter_000000002" "$T/notify.out" && break; sleep 0.05; done
grep -qx 'STATUS=serving; 2 committed, 0 failed; last nfy iter_000000002' "$T/notify.out" ||
	fail "no STATUS after the commit: $(cat "$T/notify.out")"
stop_ckptd || fail "ckptd exit"
wait $lp
grep -q '^STOPPING=1' "$T/notify.out" || fail "no STOPPING=1: $(cat "$T/notify.out")"
grep -q '^<6>ckptd: ready: ' "$LOG" || fail "no <6> prefix on info lines: $(head -3 "$LOG")"
grep -q '^<7>ckptd: ' "$LOG" || fail "no <7> prefix on debug lines"
grep -v '^<[0-7]>' "$LOG" | grep -q . && fail "unprefixed lines: $(grep -v '^<[0-7]>' "$LOG" | head -3)"
pass
