#!/usr/bin/env python3
"""DDP with ckpt: kill a 4-process run, resume it with 4, restore it into 2,
and compare with a run that was never interrupted.

    build/venv/bin/python client/python/examples/train_ddp.py   # the demo

The demo starts a private ckptd and launches the ranks itself, the way
torchrun does (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT; gloo on CPU).
One rank of a real job, under torchrun against a running ckptd:

    torchrun --nproc-per-node 4 train_ddp.py worker --socket S --job J

ckpt.torch.Checkpointer sees a DistributedDataParallel model and saves the
model and optimizer as replicated global tensors: one copy on disk, written
by the ranks in turn, restorable into any number of ranks.  Run A trains
without interruption; run B is killed (SIGKILL, every rank) after step
--kill-at and started again, resuming from its newest checkpoint; then B's
last checkpoint is restored into 2 ranks.  The loss curves, the final
weights and an evaluation loss are printed side by side; the exit status
is 0 only if they are identical.
"""
import argparse
import hashlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
if os.path.isdir(os.path.join(HERE, "..", "ckpt")):     # the source tree
    sys.path.insert(0, os.path.normpath(os.path.join(HERE, "..")))
from train_mnist_like import find_ckptd, start_ckptd      # noqa: E402


# --- one rank ---------------------------------------------------------------

def worker(a):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    import ckpt.torch

    dist.init_process_group("gloo")         # env:// as torchrun sets it
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(),
                              torch.nn.Linear(64, 10))
    # no bucket rebuild after the first step: a resumed run then sums its
    # gradients in the same order as the uninterrupted one (bit-identical)
    model = DDP(net, find_unused_parameters=True)
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    progress = {"step": 0}
    ck = ckpt.torch.Checkpointer(a.job, rank=rank, world_size=world,
                                 socket=a.socket, model=model,
                                 optimizer=opt, progress=progress,
                                 root=a.root)
    res = ck.restore()                      # None on a fresh start
    say = print if rank == 0 else (lambda *x, **k: None)
    say("restored %s" % (res.step if res else "none"), flush=True)
    g = torch.Generator().manual_seed(42)
    test_x, test_y = torch.randn(256, 32, generator=g), \
        torch.randint(0, 10, (256,), generator=g)
    for step in range(progress["step"] + 1, a.steps + 1):
        g = torch.Generator().manual_seed(step)   # the step's global batch
        x = torch.randn(64, 32, generator=g).tensor_split(world)[rank]
        y = torch.randint(0, 10, (64,), generator=g).tensor_split(world)[rank]
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        lsum = loss.detach().clone()
        dist.all_reduce(lsum)
        progress["step"] = step
        say("loss %d %s" % (step, (float(lsum) / world).hex()), flush=True)
        if step % a.every == 0:
            ck.save(step)                   # returns once STAGED
        if step == a.pause_at:
            ck.wait()                       # committed; then wait for the kill
            say("paused", flush=True)
            time.sleep(3600)
    ck.close()
    with torch.no_grad():
        ev = torch.nn.functional.cross_entropy(net(test_x), test_y)
    h = hashlib.sha256()
    for t in net.state_dict().values():
        h.update(t.numpy().tobytes())
    say("eval %s" % float(ev).hex(), flush=True)
    say("final %s" % h.hexdigest(), flush=True)
    dist.destroy_process_group()


# --- the demo ---------------------------------------------------------------

def launch(a, sock, root, job, world, steps, pause_at=0):
    """world ranks as torchrun would start them; returns the processes."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for r in range(world):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(world),
                   LOCAL_RANK=str(r), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), OMP_NUM_THREADS="1",
                   TORCH_CPP_LOG_LEVEL="ERROR")   # DDP's note on the flag
        cmd = [sys.executable, os.path.abspath(__file__), "worker",
               "--socket", sock, "--root", root, "--job", job,
               "--steps", str(steps), "--every", str(a.every),
               "--pause-at", str(pause_at)]
        procs.append(subprocess.Popen(
            cmd, env=env, text=True,
            stdout=subprocess.PIPE if r == 0 else subprocess.DEVNULL))
    return procs


def collect(procs, until=None):
    """Rank 0's report: {"loss": {step: value}, "restored", "eval",
    "final"}; stops reading at a line starting with until."""
    out = {"loss": {}, "restored": None, "eval": None, "final": None}
    for ln in procs[0].stdout:
        w = ln.split()
        if not w:
            continue
        if w[0] == until:
            break
        if w[0] == "loss":
            out["loss"][int(w[1])] = float.fromhex(w[2])
        elif w[0] == "restored":
            out["restored"] = None if w[1] == "none" else int(w[1])
        elif w[0] == "eval":
            out["eval"] = float.fromhex(w[1])
        elif w[0] == "final":
            out["final"] = w[1]
    return out


def finish(procs):
    if any(p.wait(timeout=300) for p in procs):
        sys.exit("a training process failed")


def demo(a):
    tmp = tempfile.mkdtemp(prefix="ckpt-ddp.")
    daemon = None
    try:
        sock, root = a.socket, a.root
        if not sock:
            daemon, sock = start_ckptd(find_ckptd(a.ckptd), tmp)
            root = os.path.join(tmp, "root")
        tag = "%d-%d" % (os.getpid(), int(time.time()))
        ja, jb = "ddp-a-" + tag, "ddp-b-" + tag
        t0 = time.time()
        pa = launch(a, sock, root, ja, 4, a.steps)
        pb = launch(a, sock, root, jb, 4, a.steps, pause_at=a.kill_at)
        b1 = collect(pb, until="paused")
        for p in pb:                         # every rank, at once
            p.send_signal(signal.SIGKILL)
        for p in pb:
            p.wait()
        pb = launch(a, sock, root, jb, 4, a.steps)
        b2 = collect(pb)
        ra = collect(pa)
        finish(pa)
        finish(pb)
        pc = launch(a, sock, root, jb, 2, a.steps)     # restore into 2
        c = collect(pc)
        finish(pc)
        secs = time.time() - t0
    finally:
        if daemon is not None:
            daemon.terminate()
            daemon.wait()
        if not a.keep:
            shutil.rmtree(tmp, ignore_errors=True)

    resumed = b2["restored"]
    print("run A: 4 ranks, uninterrupted.  run B: 4 ranks, SIGKILL after "
          "step %d, resumed from step %s.\n" % (a.kill_at, resumed))
    print("%6s  %-22s  %-22s" % ("step", "A loss", "B loss"))
    same = resumed is not None
    for s in range(1, a.steps + 1):
        la = ra["loss"].get(s)
        lb = b2["loss"].get(s) if resumed is not None and s > resumed \
            else b1["loss"].get(s)
        eq = la is not None and la == lb
        same = same and eq
        note = "" if eq else "DIFFERENT"
        if s == a.kill_at:
            note += "  <- B killed"
        if s == resumed:
            note += "  <- B's checkpoint"
        if s % a.print_every == 0 or s in (1, a.kill_at, resumed) or not eq:
            print("%6d  %-22.17g  %-22.17g  %s" % (
                s, la if la is not None else float("nan"),
                lb if lb is not None else float("nan"), note))
    print("\nfinal weights sha256\n  A        %s\n  B        %s\n"
          "  B in 2   %s (restored step %s)" %
          (ra["final"], b2["final"], c["final"], c["restored"]))
    print("evaluation loss\n  A        %.17g\n  B        %.17g\n"
          "  B in 2   %.17g" % (ra["eval"], b2["eval"], c["eval"]))
    same = same and ra["final"] == b2["final"] == c["final"] and \
        ra["eval"] == b2["eval"] == c["eval"]
    print("\n%s (%.1f s)" % ("IDENTICAL: every loss and every weight bit, "
                             "in 4 ranks and in 2" if same
                             else "RUNS DIFFER", secs))
    return 0 if same else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd")
    w = sub.add_parser("worker", help="one rank (under torchrun)")
    w.add_argument("--socket", default=None)
    w.add_argument("--root", default=None, help="ckptd's root ($CKPT_ROOT)")
    w.add_argument("--job", required=True)
    w.add_argument("--steps", type=int, default=60)
    w.add_argument("--every", type=int, default=10)
    w.add_argument("--pause-at", type=int, default=0)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--every", type=int, default=10)
    ap.add_argument("--kill-at", type=int, default=45)
    ap.add_argument("--socket", help="a running ckptd (else start one)")
    ap.add_argument("--root", help="that ckptd's root")
    ap.add_argument("--ckptd", help="the ckptd binary to start")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir")
    ap.add_argument("--print-every", type=int, default=10)
    a = ap.parse_args()
    if a.cmd == "worker":
        worker(a)
        return 0
    if not 0 < a.kill_at < a.steps:
        ap.error("--kill-at must be between 0 and --steps")
    if a.socket and not a.root:
        ap.error("--socket needs --root (where that ckptd keeps its jobs)")
    return demo(a)


if __name__ == "__main__":
    sys.exit(main())
