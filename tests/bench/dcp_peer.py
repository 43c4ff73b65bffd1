#!/usr/bin/env python3
"""dcp_peer.py - the torch.distributed.checkpoint peer of the ckpt benchmark.

  dcp_peer.py save|async --dir D --rank R --world W --port P --bytes B --saves K

One process per rank (gloo on 127.0.0.1:P), the same state dict as
torch_peer.py.  save: dcp.save() with DCP's FileSystemWriter (it fsyncs its
files: the call's time is both the blocking time and the time to durable).
async: dcp.async_save(); the blocking time is until it returns (DCP's copy
of the state), durable when its upload completes.  All ranks start each save
together.  Prints one JSON object per save.  Exit 77 when torch or DCP
cannot be imported.
"""
import argparse
import datetime
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cmd", choices=["save", "async"])
    ap.add_argument("--dir", required=True)
    ap.add_argument("--rank", type=int, default=0)
    ap.add_argument("--world", type=int, default=1)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--bytes", type=int, default=1 << 20)
    ap.add_argument("--saves", type=int, default=2)
    a = ap.parse_args()
    try:
        import torch
        import torch.distributed as dist
        import torch.distributed.checkpoint as dcp
    except Exception as e:  # noqa: BLE001 - any import failure means "absent"
        print("torch.distributed.checkpoint is not importable: %s" % e,
              file=sys.stderr)
        return 77
    from torch_peer import state_dict
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % a.port,
                            rank=a.rank, world_size=a.world,
                            timeout=datetime.timedelta(seconds=300))
    # each rank's own tensors (different names), as torch_peer saves them
    sd = {"r%d.%s" % (a.rank, k): v
          for k, v in state_dict(torch, a.bytes, a.rank).items()}
    nbytes = sum(t.numel() * t.element_size() for t in sd.values())
    for k in range(1, a.saves + 1):
        for t in sd.values():            # the trainer changes its tensors
            t.view(-1)[:1].fill_(k % 2)
        path = os.path.join(a.dir, "%s-step%d" % (a.cmd, k))
        dist.barrier()
        t0 = time.monotonic()
        if a.cmd == "save":
            dcp.save(sd, checkpoint_id=path)
            t1 = t2 = time.monotonic()
        else:
            r = dcp.async_save(sd, checkpoint_id=path)
            t1 = time.monotonic()
            getattr(r, "upload_completion", r).result()
            t2 = time.monotonic()
        print(json.dumps({"rank": a.rank, "step": k, "bytes": nbytes,
                          "t0": t0, "stall_s": t1 - t0,
                          "durable_s": t2 - t0}), flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    rc = main()
    # as in client/python/tests/dist_worker.py: no interpreter finalization
    # while gloo's threads may still free work holding Python tensors
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)
