"""One rank of a multi-process test (gloo on 127.0.0.1, CPU tensors):
python dist_worker.py SCENARIO RANK WORLD PORT SOCKET JOB OUTDIR [ARG...].
Each scenario writes what the test compares to OUTDIR/<scenario>.<rank>.pt."""
import datetime
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))     # this tree's ckpt package

import torch                                                  # noqa: E402
import torch.distributed as dist                              # noqa: E402
from torch.distributed.device_mesh import init_device_mesh    # noqa: E402
from torch.distributed.tensor import (DTensor, Replicate,     # noqa: E402
                                      Shard, distribute_tensor)


def reference():
    """The global state every DCP scenario saves: values depend only on the
    name, so any world size can compute what it should read back."""
    g = torch.Generator().manual_seed(7)
    return {
        "rep": torch.randn(5, 3, generator=g),               # replicated
        "rows": torch.randn(10, 4, generator=g),             # Shard(0), uneven
        "cols": torch.randn(3, 7, generator=g).to(torch.bfloat16),  # Shard(1)
        "ints": torch.arange(11, dtype=torch.int64),         # Shard(0), uneven
    }


def dcp_state(mesh):
    ref = reference()
    return {
        "rep": ref["rep"].clone(),
        "rows": distribute_tensor(ref["rows"], mesh, [Shard(0)]),
        "cols": distribute_tensor(ref["cols"], mesh, [Shard(1)]),
        "ints": distribute_tensor(ref["ints"], mesh, [Shard(0)]),
        "extra": {"epoch": 3, "name": "run-a", "lr": [0.1, 0.01]},
    }


def zeroed(sd):
    out = {}
    for k, v in sd.items():
        if isinstance(v, DTensor):
            out[k] = DTensor.from_local(torch.zeros_like(v.to_local()),
                                        v.device_mesh, v.placements,
                                        shape=v.shape, stride=v.stride())
        elif isinstance(v, torch.Tensor):
            out[k] = torch.zeros_like(v)
        else:
            out[k] = {"epoch": 0, "name": "", "lr": []}
    return out


def local_view(sd):
    """What this rank holds: local pieces of DTensors, with their offsets."""
    out = {}
    for k, v in sd.items():
        if isinstance(v, DTensor):
            out[k] = v.to_local().clone()
        elif isinstance(v, torch.Tensor):
            out[k] = v.clone()
        else:
            out[k] = v
    return out


def scenario_dcp_save(rank, world, args):
    import torch.distributed.checkpoint as dcp
    from ckpt.dcp import CkptWriter
    mesh = init_device_mesh("cpu", (world,))
    sd = dcp_state(mesh)
    w = CkptWriter(args.job, socket=args.socket)
    dcp.save(sd, storage_writer=w, checkpoint_id=10)
    if "async" in args.extra:
        sd["rep"].add_(1)           # saved at step 20 below
        resp = dcp.async_save(sd, storage_writer=w, checkpoint_id=20)
        fut = getattr(resp, "upload_completion", resp)
        fut.result(timeout=60)
    w.close()                       # waits for the commits
    return local_view(sd)


def scenario_dcp_load(rank, world, args):
    import torch.distributed.checkpoint as dcp
    from ckpt.dcp import CkptReader
    mesh = init_device_mesh("cpu", (world,))
    sd = zeroed(dcp_state(mesh))
    step = int(args.extra[0]) if args.extra else None
    dcp.load(sd, storage_reader=CkptReader(path=args.path, step=step))
    return local_view(sd)


class Args:
    def __init__(self, argv):
        (self.scenario, rank, world, port, self.socket, self.job,
         self.outdir) = argv[:7]
        self.rank, self.world, self.port = int(rank), int(world), int(port)
        self.extra = argv[7:]
        self.path = os.environ.get("CKPT_TEST_PATH")


def main():
    args = Args(sys.argv[1:])
    dist.init_process_group(
        "gloo", init_method="tcp://127.0.0.1:%d" % args.port,
        rank=args.rank, world_size=args.world,
        timeout=datetime.timedelta(seconds=60))
    try:
        out = globals()["scenario_" + args.scenario](args.rank, args.world,
                                                     args)
        torch.save(out, os.path.join(args.outdir, "%s.%d.pt" %
                                     (args.scenario, args.rank)))
        dist.barrier()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
