#!/usr/bin/python3
"""Kill a training run, resume it, and end with exactly the weights and the
loss curve of a run that was never interrupted.

A small MLP learns an MNIST-like task (synthetic 28x28 "images", 10
classes) on the CPU.  Every source of randomness a real trainer has is in
play: dropout (torch's RNG), a named generator for input noise, Python's
`random` and NumPy's RNG for augmentation, a per-epoch shuffled order with a
data-loader position, AdamW moments and an LR schedule.  ckpt.torch saves
all of it every few steps.

    train_mnist_like.py                 # the demo (starts a private ckptd)
    train_mnist_like.py --socket S      # the demo against a running ckptd
    train_mnist_like.py worker ...      # one training process (used by it)

The demo trains run A without interruption and run B, which it kills with
SIGKILL at step --kill-at and starts again; B resumes from its newest
committed checkpoint.  Both loss curves and the final weight hashes are
printed side by side; the exit status is 0 only if they are identical.
"""
import argparse
import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
if os.path.isdir(os.path.join(HERE, "..", "ckpt")):     # the source tree
    sys.path.insert(0, os.path.normpath(os.path.join(HERE, "..")))

N_TRAIN = 4096
BATCH = 64
DIM = 28 * 28
CLASSES = 10


# --- one training process ---------------------------------------------------

def make_data(torch):
    g = torch.Generator().manual_seed(1234)
    protos = torch.randn(CLASSES, DIM, generator=g)
    y = torch.randint(0, CLASSES, (N_TRAIN,), generator=g)
    x = 0.12 * protos[y] + torch.randn(N_TRAIN, DIM, generator=g)
    return x, y


def weight_hash(model):
    h = hashlib.sha256()
    for name, t in model.state_dict().items():
        h.update(name.encode())
        h.update(t.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def worker(a):
    import numpy as np
    import torch
    import torch.nn.functional as F
    import ckpt.torch

    torch.set_num_threads(1)            # the same kernels in every run
    random.seed(1)
    np.random.seed(2)
    torch.manual_seed(3)
    X, Y = make_data(torch)

    model = torch.nn.Sequential(
        torch.nn.Linear(DIM, 128), torch.nn.ReLU(), torch.nn.Dropout(0.2),
        torch.nn.Linear(128, 64), torch.nn.ReLU(),
        torch.nn.Linear(64, CLASSES))
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=60, gamma=0.5)
    noise = torch.Generator().manual_seed(99)
    progress = {"step": 0, "epoch": 0, "batch": 0}

    ck = ckpt.torch.Checkpointer(
        a.job, model=model, optimizer=opt, scheduler=sched,
        progress=progress, generators={"noise": noise}, socket=a.socket,
        check_finite=True)
    res = ck.restore()
    print("restored %s" % (res.step if res else "none"), flush=True)

    per_epoch = N_TRAIN // BATCH
    perm_epoch, perm = None, None
    model.train()
    while progress["step"] < a.steps:
        epoch, b = progress["epoch"], progress["batch"]
        if perm_epoch != epoch:         # the loader's order for this epoch
            perm = torch.randperm(
                N_TRAIN, generator=torch.Generator().manual_seed(1000 + epoch))
            perm_epoch = epoch
        idx = perm[b * BATCH:(b + 1) * BATCH]
        x = X[idx] + 0.3 * torch.randn(BATCH, DIM, generator=noise)
        x = torch.roll(x, random.randrange(3) - 1, dims=1)
        x = x * float(np.random.uniform(0.9, 1.1))
        loss = F.cross_entropy(model(x), Y[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()

        b += 1
        if b == per_epoch:
            epoch, b = epoch + 1, 0
        progress.update(step=progress["step"] + 1, epoch=epoch, batch=b)
        step = progress["step"]
        print("loss %d %s" % (step, loss.item().hex()), flush=True)
        if step % a.every == 0:
            ck.save(step)               # returns once staged
            print("saved %d" % step, flush=True)
        if step == a.pause_at:
            print("paused %d" % step, flush=True)
            time.sleep(3600)            # waits for SIGKILL

    ck.close()                          # waits for the last commit
    if a.dump:
        state = {"python": random.getstate(),
                 "numpy": np.random.get_state(),
                 "torch": torch.get_rng_state(),
                 "noise": noise.get_state()}
        draws = {"python": random.random(),
                 "numpy": float(np.random.rand()),
                 "torch": torch.rand(4),
                 "noise": torch.rand(4, generator=noise)}
        torch.save({"model": model.state_dict(), "optim": opt.state_dict(),
                    "sched": sched.state_dict(), "progress": dict(progress),
                    "rng_state": state, "rng_draws": draws}, a.dump)
    print("final %s" % weight_hash(model), flush=True)


# --- the demo -------------------------------------------------------------

def find_ckptd(explicit):
    for c in (explicit, os.environ.get("CKPTD"),
              os.path.join(HERE, "..", "..", "..", "ckptd"),
              shutil.which("ckptd")):
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return os.path.normpath(c)
    sys.exit("no ckptd found: build the tree (make), pass --ckptd, or "
             "--socket of a running one")


def start_ckptd(path, tmp):
    sock = os.path.join(tmp, "ckptd.sock")
    conf = os.path.join(tmp, "ckptd.json")
    with open(conf, "w") as f:
        json.dump({"socket": sock, "root": os.path.join(tmp, "root"),
                   "staging_bytes": "64MiB", "chunk_bytes": "1MiB",
                   "keep_last": 0}, f)
    log = open(os.path.join(tmp, "ckptd.log"), "w")
    p = subprocess.Popen([path, "-c", conf], stdout=log,
                         stderr=subprocess.STDOUT)
    for _ in range(200):
        if os.path.exists(sock) and "ready:" in open(log.name).read():
            return p, sock
        if p.poll() is not None:
            break
        time.sleep(0.05)
    p.kill()
    sys.exit("ckptd did not start:\n" + open(log.name).read())


def spawn(a, job, sock, steps, pause_at=0, dump=None):
    cmd = [sys.executable, os.path.abspath(__file__), "worker",
           "--socket", sock, "--job", job, "--steps", str(steps),
           "--every", str(a.every)]
    if pause_at:
        cmd += ["--pause-at", str(pause_at)]
    if dump:
        cmd += ["--dump", dump]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)


def parse(lines):
    out = {"loss": {}, "saved": [], "restored": None, "final": None}
    for ln in lines:
        w = ln.split()
        if not w:
            continue
        if w[0] == "loss":
            out["loss"][int(w[1])] = float.fromhex(w[2])
        elif w[0] == "saved":
            out["saved"].append(int(w[1]))
        elif w[0] == "restored":
            out["restored"] = None if w[1] == "none" else int(w[1])
        elif w[0] == "final":
            out["final"] = w[1]
    return out


def demo(a):
    tmp = tempfile.mkdtemp(prefix="ckpt-mnist.")
    daemon = None
    try:
        sock = a.socket
        if not sock:
            daemon, sock = start_ckptd(find_ckptd(a.ckptd), tmp)
        out = a.out or tmp
        os.makedirs(out, exist_ok=True)
        tag = "%d-%d" % (os.getpid(), int(time.time()))
        ja, jb = "mnist-a-" + tag, "mnist-b-" + tag
        t0 = time.time()

        pa = spawn(a, ja, sock, a.steps, dump=os.path.join(out, "a.pt"))
        pb = spawn(a, jb, sock, a.steps, pause_at=a.kill_at)
        first = []
        for ln in pb.stdout:            # run B until it reaches --kill-at
            first.append(ln)
            if ln.startswith("paused"):
                break
        os.kill(pb.pid, signal.SIGKILL)
        pb.wait()
        b1 = parse(first)
        pb2 = spawn(a, jb, sock, a.steps, dump=os.path.join(out, "b.pt"))
        b2 = parse(pb2.stdout.readlines())
        ra = parse(pa.stdout.readlines())
        if pa.wait() or pb2.wait():
            sys.exit("a training process failed")
        secs = time.time() - t0
    finally:
        if daemon is not None:
            daemon.terminate()
            daemon.wait()
        if not a.keep:
            shutil.rmtree(tmp, ignore_errors=True)

    kill, resumed = a.kill_at, b2["restored"]
    print("run A: uninterrupted.  run B: SIGKILL after step %d (last save "
          "step %s), resumed from step %s.\n" %
          (kill, b1["saved"][-1] if b1["saved"] else "-", resumed))
    print("%6s  %-22s  %-22s  %s" % ("step", "A loss", "B loss", ""))
    same = True
    for s in range(1, a.steps + 1):
        la = ra["loss"].get(s)
        if resumed is not None and s > resumed:
            lb = b2["loss"].get(s)
        else:
            lb = b1["loss"].get(s)
        eq = la is not None and la == lb
        # a step B ran twice: before the kill and again after the resume
        if resumed is not None and resumed < s <= kill:
            eq = eq and b1["loss"].get(s) == la
        same = same and eq
        note = "" if eq else "DIFFERENT"
        if resumed is not None and resumed < s <= kill:
            note += " (B ran this step twice)" if eq else ""
        if s == kill:
            note += "  <- B killed"
        if s == resumed:
            note += "  <- B's checkpoint"
        if s % a.print_every == 0 or s in (1, kill, resumed, a.steps) or \
                not eq or (resumed is not None and s == resumed + 1):
            print("%6d  %-22.17g  %-22.17g  %s" % (
                s, la if la is not None else float("nan"),
                lb if lb is not None else float("nan"), note))
    print("\nfinal weights sha256\n  A %s\n  B %s" % (ra["final"],
                                                      b2["final"]))
    same = same and ra["final"] == b2["final"] and resumed is not None
    print("\n%s (%.1f s)" % ("IDENTICAL: every loss and every weight bit"
                             if same else "RUNS DIFFER", secs))
    return 0 if same else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd")
    w = sub.add_parser("worker", help="one training process")
    w.add_argument("--socket", required=True)
    w.add_argument("--job", required=True)
    w.add_argument("--steps", type=int, default=200)
    w.add_argument("--every", type=int, default=10)
    w.add_argument("--pause-at", type=int, default=0)
    w.add_argument("--dump", default=None)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--every", type=int, default=10)
    ap.add_argument("--kill-at", type=int, default=125)
    ap.add_argument("--socket", help="a running ckptd (else start one)")
    ap.add_argument("--ckptd", help="the ckptd binary to start")
    ap.add_argument("--out", help="keep a.pt and b.pt (final states) here")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir")
    ap.add_argument("--print-every", type=int, default=10)
    a = ap.parse_args()
    if a.cmd == "worker":
        worker(a)
        return 0
    if not 0 < a.kill_at < a.steps:
        ap.error("--kill-at must be between 0 and --steps")
    return demo(a)


if __name__ == "__main__":
    sys.exit(main())
