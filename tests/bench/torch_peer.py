#!/usr/bin/python3
"""torch_peer.py - the torch.save / torch.load peer of the ckpt benchmark.

  torch_peer.py save --dir D --rank R --world W --bytes B --saves K [--barrier BD]
  torch_peer.py load --dir D --rank R --world W [--barrier BD]

One process per rank, like the trainers: a state dict of B bytes in the same
dtypes as tests/integ/trainer.c (one tensor each, shape (N, 64)).  A save is
torch.save() into a new file (blocking time), then flush + fsync (time to
durable).  A load is torch.load() of the newest file.  Prints one JSON object
per save / load.  Exit 77 when torch cannot be imported.
"""
import argparse
import json
import os
import sys
import time


def barrier(bd, tag, rank, world):
    if not bd:
        return
    open(os.path.join(bd, "%s.%d" % (tag, rank)), "w").close()
    for r in range(world):
        while not os.path.exists(os.path.join(bd, "%s.%d" % (tag, r))):
            time.sleep(0.0002)


def state_dict(torch, nbytes, step):
    dts = [torch.float32, torch.bfloat16, torch.float16, torch.float64,
           torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8,
           torch.bool]
    sd = {}
    g = torch.Generator().manual_seed(step)
    for i, dt in enumerate(dts):
        esize = torch.tensor([], dtype=dt).element_size()
        n = (nbytes // len(dts)) // esize // 64
        if dt.is_floating_point:
            t = torch.rand((n, 64), generator=g, dtype=torch.float32).to(dt)
        elif dt == torch.bool:
            t = torch.randint(0, 2, (n, 64), generator=g).to(dt)
        else:
            t = torch.randint(0, 100, (n, 64), generator=g).to(dt)
        sd["%s.layer%d" % ("model" if i % 2 == 0 else "optim", i)] = t
    return sd


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cmd", choices=["save", "load"])
    ap.add_argument("--dir", required=True)
    ap.add_argument("--rank", type=int, default=0)
    ap.add_argument("--world", type=int, default=1)
    ap.add_argument("--bytes", type=int, default=1 << 20)
    ap.add_argument("--saves", type=int, default=1)
    ap.add_argument("--barrier")
    a = ap.parse_args()
    try:
        import torch
    except Exception as e:  # noqa: BLE001 - any import failure means "absent"
        print("torch is not importable: %s" % e, file=sys.stderr)
        return 77
    torch.set_num_threads(1)
    if a.cmd == "save":
        sd = state_dict(torch, a.bytes, a.rank)
        nbytes = sum(t.numel() * t.element_size() for t in sd.values())
        for k in range(1, a.saves + 1):
            # the trainer changes its tensors between saves
            for t in sd.values():
                t.view(-1)[:1].fill_(k % 2)
            path = os.path.join(a.dir, "step%d_rank%d.pt" % (k, a.rank))
            barrier(a.barrier, "tsave-%d" % k, a.rank, a.world)
            t0 = time.monotonic()
            with open(path, "wb") as f:
                torch.save(sd, f)
                t1 = time.monotonic()
                f.flush()
                os.fsync(f.fileno())
            t2 = time.monotonic()
            dfd = os.open(a.dir, os.O_RDONLY)
            os.fsync(dfd)
            os.close(dfd)
            old = os.path.join(a.dir, "step%d_rank%d.pt" % (k - 2, a.rank))
            if os.path.exists(old):      # keep the last two, like keep_last
                os.unlink(old)
            print(json.dumps({"rank": a.rank, "step": k, "bytes": nbytes, "t0": t0,
                              "stall_s": t1 - t0, "durable_s": t2 - t0}), flush=True)
    else:
        files = sorted((f for f in os.listdir(a.dir) if f.endswith("_rank%d.pt" % a.rank)),
                       key=lambda f: int(f[4:f.index("_")]))
        path = os.path.join(a.dir, files[-1])
        barrier(a.barrier, "tload", a.rank, a.world)
        t0 = time.monotonic()
        sd = torch.load(path, map_location="cpu")
        t1 = time.monotonic()
        nbytes = sum(t.numel() * t.element_size() for t in sd.values())
        print(json.dumps({"rank": a.rank, "bytes": nbytes, "t0": t0,
                          "restore_s": t1 - t0}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
