"""tests/gpu/torch_overlap.py SOCKET JOB - a small real PyTorch training
loop on a GPU that measures the trainer's added time per save of
ckpt.torch.Checkpointer (issue 25 item 5), next to the copy floor (pinned
device-to-host copies of the same bytes) and the training step's time.

Modes, each on its own job (JOB_<mode>), each a fresh Checkpointer:
  deferred  the default: save() on the current stream, the stream gated in
            the optimizer step pre-hook (forward/backward overlap the copy)
  now       gate="now": the stream gated at save() (nothing overlaps)
  blocking  the path before: torch.cuda.synchronize(), ckpt_save(), wait
            for STAGED on the CPU
Each mode runs WINDOWS windows of STEPS training steps with a save at the
start, and as many without a save; the added time per save is the
difference of the medians.  Then a correctness check of the deferred path
on the GPU: the weights saved are those from before the optimizer step
after the save (restored, compared with a copy taken at the save).

Prints "RESULT key value" lines and "ok"/"FAIL" lines; exit 0 unless a
check failed (1), 2 when libckpt cannot be loaded, 77 without PyTorch or
CUDA.  Environment: TORCH_OVERLAP_MIB (parameter MiB, default 256; Adam's
state doubles it again), TORCH_OVERLAP_BATCH (default 8192),
TORCH_OVERLAP_WINDOWS (default 5), TORCH_OVERLAP_STEPS (default 3),
TORCH_OVERLAP_DEVICE=cpu rehearses the script where there is no GPU (its
figures mean nothing: every mode takes the host path).  libckpt: $CKPT_LIB,
else the tree's ./libckpt.so."""
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(TOP, "client", "python"))

try:
    import torch
except ImportError:
    print("SKIP: no PyTorch here (import torch failed)")
    sys.exit(77)
DEV = os.environ.get("TORCH_OVERLAP_DEVICE", "cuda")
if DEV == "cuda" and not torch.cuda.is_available():
    print("SKIP: PyTorch has no usable CUDA device here")
    sys.exit(77)
try:
    import ckpt
    import ckpt.torch
    ckpt._get_lib()
except ImportError as e:
    print("MISSING: %s" % e)
    sys.exit(2)

MIB = int(os.environ.get("TORCH_OVERLAP_MIB", "256"))
BATCH = int(os.environ.get("TORCH_OVERLAP_BATCH", "8192"))
WINDOWS = int(os.environ.get("TORCH_OVERLAP_WINDOWS", "5"))
STEPS = int(os.environ.get("TORCH_OVERLAP_STEPS", "3"))
WIDTH = 4096 if DEV == "cuda" else 256


def sync():
    if DEV == "cuda":
        torch.cuda.synchronize()


def build():
    torch.manual_seed(0)
    per_layer = WIDTH * WIDTH * 4
    n = max(1, (MIB << 20) // per_layer)
    layers = []
    for _ in range(n):
        layers += [torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers).to(DEV)
    # fused: Adam's state, "step" included, stays on the GPU, so the gate
    # is the stream's alone (CPU counters would make the step pre-hook
    # wait for STAGED on the CPU)
    opt = torch.optim.Adam(model.parameters(), lr=1e-5,
                           fused=DEV == "cuda")
    x = torch.randn(BATCH, WIDTH, device=DEV)
    return model, opt, x


def train_step(model, opt, x):
    opt.zero_grad(set_to_none=False)
    model(x).square().mean().backward()
    opt.step()


class _Blocking(ckpt.torch.Checkpointer):
    """The path before stream saves: synchronise, save, wait for STAGED."""

    def _stream_device(self):
        return None


def windows(model, opt, x, ck, step0):
    """Seconds per window of STEPS steps, with a save at the start (ck)
    or without (ck None)."""
    out = []
    for w in range(WINDOWS):
        sync()
        t0 = time.perf_counter()
        if ck is not None:
            ck.save(step0 + w)
        for _ in range(STEPS):
            train_step(model, opt, x)
        sync()
        out.append(time.perf_counter() - t0)
    return out


def state_bytes(ck):
    return sum(t.numel() * t.element_size()
               for t in ck.registered().values())


def copy_floor(ck):
    """Seconds for plain pinned device-to-host copies of the registered
    tensors (best of 3)."""
    ts = [t for t in ck.registered().values() if t.device.type == DEV]
    if DEV != "cuda":
        return 0.0
    host = [torch.empty(t.shape, dtype=t.dtype, pin_memory=True) for t in ts]
    best = None
    for _ in range(3):
        sync()
        t0 = time.perf_counter()
        for h, t in zip(host, ts):
            h.copy_(t, non_blocking=True)
        sync()
        d = time.perf_counter() - t0
        best = d if best is None else min(best, d)
    return best


def main(sock, job):
    model, opt, x = build()
    for _ in range(3):
        train_step(model, opt, x)
    sync()
    ms = lambda s: "%.3f" % (s * 1e3)                   # noqa: E731
    results = {}
    floor = nbytes = None
    step0 = 1
    for mode in ("deferred", "now", "blocking"):
        cls = _Blocking if mode == "blocking" else ckpt.torch.Checkpointer
        ck = cls("%s_%s" % (job, mode), socket=sock, model=model,
                 optimizer=opt, gate="now" if mode == "now" else "auto")
        if floor is None:
            nbytes = state_bytes(ck)
            floor = copy_floor(ck)
        ck.save(step0)                  # the first save pays for setup
        ck.wait("committed")
        step0 += 1
        base = windows(model, opt, x, None, 0)
        with_save = windows(model, opt, x, ck, step0)
        step0 += WINDOWS
        ck.wait("committed")
        results[mode] = (statistics.median(with_save) -
                         statistics.median(base))
        step_s = statistics.median(base) / STEPS
        ck.close()
    print("RESULT torch_state_bytes %d" % nbytes)
    print("RESULT torch_step_ms %s" % ms(step_s))
    print("RESULT torch_copy_floor_ms %s" % ms(floor))
    for mode, added in results.items():
        print("RESULT torch_added_ms_per_save_%s %s" % (mode, ms(added)))

    # the deferred gate on the GPU: the checkpoint holds the weights from
    # before the optimizer step that follows the save
    ck = ckpt.torch.Checkpointer("%s_check" % job, socket=sock, model=model,
                                 optimizer=opt)
    ck.save(1)
    snap = [p.detach().clone() for p in model.parameters()]
    for _ in range(STEPS):
        train_step(model, opt, x)
    ck.wait("committed")
    sync()
    if all(torch.equal(a, p) for a, p in zip(snap, model.parameters())):
        print("FAIL: the optimizer steps changed nothing (the check proves "
              "nothing)")
        return 1
    ck.restore(1)
    sync()
    bad = [i for i, (a, p) in enumerate(zip(snap, model.parameters()))
           if not torch.equal(a, p)]
    ck.close()
    if bad:
        print("FAIL: the checkpoint does not hold the weights from before "
              "the optimizer step (parameters %s differ): the gate let the "
              "step run before STAGED" % bad[:8])
        return 1
    print("ok the checkpoint holds the weights from before the optimizer "
          "step (deferred gate)")
    if DEV == "cuda" and step_s >= floor and \
            results["deferred"] > 0.25 * floor:
        print("NOTE: deferred save added %s ms with a step of %s ms and a "
              "copy floor of %s ms: the copy was not hidden" %
              (ms(results["deferred"]), ms(step_s), ms(floor)))
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: torch_overlap.py SOCKET JOB")
    sys.exit(main(sys.argv[1], sys.argv[2]))
