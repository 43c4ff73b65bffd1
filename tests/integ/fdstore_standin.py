#!/usr/bin/python3
"""fdstore_standin.py - a TEST DOUBLE of systemd's service manager (not
systemd): the test machines have no PID-1 systemd, and the memory tier's
restart test needs the one thing it does for ckptd here, the file
descriptor store.  It speaks the sd_notify protocol as sd_notify(3) and
systemd.exec(5) describe it:

  - runs COMMAND with $NOTIFY_SOCKET (a datagram socket it listens on);
  - "FDSTORE=1" with SCM_RIGHTS fds and "FDNAME=name" stores them under
    that name (at most --max fds, as FileDescriptorStoreMax=);
    "FDSTOREREMOVE=1" + "FDNAME=name" closes and forgets them;
  - at every (re)start, gives the stored fds to the new process as fds
    3, 4, ... with $LISTEN_FDS, $LISTEN_PID and $LISTEN_FDNAMES;
  - SIGHUP: restart as `systemctl restart` (SIGTERM, wait, start);
    SIGUSR1: a crash with Restart=on-failure (SIGKILL, wait, start);
    while it waits it goes on handling messages, and those still queued
    when the process is gone, as systemd does;
    SIGTERM: stop the service and exit (the store goes with it).

  fdstore_standin.py [--max N] DIR -- COMMAND...
DIR/standin.log gets one line per event: "ready PID", "store NAME",
"remove NAME", "refuse NAME", "start PID NAMES", "exit PID STATUS".
"""
import os
import select
import signal
import socket
import sys

args = sys.argv[1:]
MAX = 1024
if args[:1] == ["--max"]:
    MAX, args = int(args[1]), args[2:]
DIR, CMD = args[0], args[args.index("--") + 1:]
SOCK = os.path.join(DIR, "notify.sock")
LOG = open(os.path.join(DIR, "standin.log"), "a", buffering=1)
store = []                       # [(name, fd)], in the order stored
want = []                        # signals to act on


def log(*a):
    LOG.write(" ".join(str(x) for x in a) + "\n")


def start():
    names = ":".join(n for n, _ in store)
    pid = os.fork()
    if pid == 0:
        try:
            # move the stored fds out of the way, then to 3, 4, ...
            for i, (_, fd) in enumerate(store):
                os.dup2(fd, 1000 + i)
            for i in range(len(store)):
                os.dup2(1000 + i, 3 + i)
            os.closerange(3 + len(store), 65536)
            env = dict(os.environ, NOTIFY_SOCKET=SOCK)
            if store:
                env.update(LISTEN_FDS=str(len(store)), LISTEN_PID=str(os.getpid()),
                           LISTEN_FDNAMES=names)
            os.execve(CMD[0], CMD, env)
        finally:
            os._exit(127)
    log("start", pid, names or "-")
    return pid


def stop(s, pid, sig):
    """Signal the service and wait for it, handling its messages meanwhile
    and those still queued when it is gone (what it stored or removed while
    it drained goes to the next start, as with systemd)."""
    os.kill(pid, sig)
    while True:
        receive(s, 0.05)
        done, st = os.waitpid(pid, os.WNOHANG)
        if done:
            break
    while receive(s, 0):
        pass
    log("exit", pid, st)


def on_message(data, fds):
    fields = dict(line.split("=", 1) for line in data.decode().split("\n") if "=" in line)
    name = fields.get("FDNAME", "stored")
    if fields.get("READY") == "1":
        log("ready")
    if fields.get("FDSTOREREMOVE") == "1":
        for n, fd in [x for x in store if x[0] == name]:
            os.close(fd)
            store.remove((n, fd))
        log("remove", name)
    if fields.get("FDSTORE") == "1":
        for fd in fds:
            if len(store) >= MAX:
                os.close(fd)
                log("refuse", name)
            else:
                store.append((name, fd))
                log("store", name)
    elif fds:
        for fd in fds:
            os.close(fd)


def receive(s, timeout):
    """Handle one message if one comes within timeout seconds: True if so."""
    try:
        r, _, _ = select.select([s], [], [], timeout)
    except InterruptedError:
        return False
    if not r:
        return False
    data, anc, _, _ = s.recvmsg(65536, socket.CMSG_SPACE(253 * 4))
    fds = []
    for level, kind, cdata in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds += list(memoryview(cdata).cast("i")[:len(cdata) // 4])
    on_message(data, fds)
    return True


def main():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind(SOCK)
    for sig in (signal.SIGHUP, signal.SIGUSR1, signal.SIGTERM):
        signal.signal(sig, lambda n, f: want.append(n))
    pid = start()
    while True:
        if receive(s, 0.1):
            continue
        while want:
            sig = want.pop(0)
            if sig == signal.SIGTERM:
                stop(s, pid, signal.SIGTERM)
                return 0
            stop(s, pid, signal.SIGTERM if sig == signal.SIGHUP else signal.SIGKILL)
            pid = start()
        done, st = os.waitpid(pid, os.WNOHANG)
        if done:
            log("exit", pid, st)
            return 1


sys.exit(main())
