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
        "one": torch.randn(1, 4, generator=g),               # empty shards
    }


def dcp_state(mesh):
    ref = reference()
    return {
        "rep": ref["rep"].clone(),
        "rows": distribute_tensor(ref["rows"], mesh, [Shard(0)]),
        "cols": distribute_tensor(ref["cols"], mesh, [Shard(1)]),
        "ints": distribute_tensor(ref["ints"], mesh, [Shard(0)]),
        "one": distribute_tensor(ref["one"], mesh, [Shard(0)]),
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


# --- Checkpointer on DDP ----------------------------------------------------

def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(),
                               torch.nn.Linear(16, 3))


def _batch(step, rank, world):
    """Rank's share of step's global batch (the same data in any run)."""
    g = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(8, 8, generator=g)
    y = torch.randint(0, 3, (8,), generator=g)
    return x.tensor_split(world)[rank], y.tensor_split(world)[rank]


def _eval_loss(model):
    g = torch.Generator().manual_seed(99)
    x = torch.randn(16, 8, generator=g)
    y = torch.randint(0, 3, (16,), generator=g)
    with torch.no_grad():
        return float(torch.nn.functional.cross_entropy(model(x), y))


def scenario_ddp(rank, world, args):
    """ddp STEPS EVERY [KILL_AT | restore STEP]: train a DDP model, saving
    every EVERY steps; exit abruptly at KILL_AT (after that step's
    training)."""
    from torch.nn.parallel import DistributedDataParallel as DDP
    import ckpt.torch
    steps, every = int(args.extra[0]), int(args.extra[1])
    kill_at = int(args.extra[2]) if len(args.extra) > 2 and \
        args.extra[2] != "restore" else None
    # DDP rebuilds its gradient buckets after its first step, and buckets
    # laid out differently sum in another order: a resumed run's first
    # step would round differently.  Without the rebuild every run uses
    # the same buckets (find_unused_parameters=True keeps them).
    model = DDP(_mlp(), find_unused_parameters=True)
    opt = torch.optim.AdamW(model.parameters(), lr=0.05)
    progress = {"step": 0}
    ck = ckpt.torch.Checkpointer(args.job, rank=rank, world_size=world,
                                 socket=args.socket, model=model,
                                 optimizer=opt, progress=progress,
                                 root=args.root)
    if "restore" in args.extra:       # only restore, in this world size
        res = ck.restore(int(args.extra[-1]))
        out = {"restored": res.step, "eval": _eval_loss(model.module),
               "model": {k: v.clone() for k, v in
                         model.module.state_dict().items()},
               "optim": opt.state_dict()}
        ck.close()
        return out
    res = ck.restore()
    out = {"restored": res.step if res else None, "loss": {}}
    for step in range(progress["step"] + 1, steps + 1):
        x, y = _batch(step, rank, world)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        t = loss.detach().clone()
        dist.all_reduce(t)
        out["loss"][step] = float(t) / world
        progress["step"] = step
        if step % every == 0:
            ck.save(step)
        if step == kill_at:
            torch.save(out, os.path.join(args.outdir, "%s.%d.pt" %
                                         (args.scenario, rank)))
            dist.barrier()
            os._exit(0)             # no close, no commit wait: a kill
    ck.close()
    out.update(eval=_eval_loss(model.module),
               model={k: v.clone() for k, v in
                      model.module.state_dict().items()},
               optim=opt.state_dict())
    return out


# --- Checkpointer on FSDP2 --------------------------------------------------

class _Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = torch.nn.LayerNorm(6)
        self.up = torch.nn.Linear(6, 10)
        self.down = torch.nn.Linear(10, 6)

    def forward(self, x):
        return x + self.down(torch.tanh(self.up(self.ln(x))))


class _Tiny(torch.nn.Module):
    """Transformer-like: embedding, residual blocks, a head; sizes that do
    not divide by 2, 3 or 4, so shards are uneven (and some empty)."""
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.emb = torch.nn.Embedding(11, 6)
        self.blocks = torch.nn.ModuleList([_Block(), _Block()])
        self.head = torch.nn.Linear(6, 5)

    def forward(self, tokens):
        x = self.emb(tokens)
        for b in self.blocks:
            x = b(x)
        return self.head(x).mean(1)


def _fsdp(world, hsdp):
    from torch.distributed.fsdp import fully_shard
    mesh = init_device_mesh("cpu", (2, world // 2), mesh_dim_names=(
        "replicate", "shard")) if hsdp else init_device_mesh("cpu", (world,))
    model = _Tiny()
    for b in model.blocks:
        fully_shard(b, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def _full(model, opt):
    """Every tensor of the model and the optimizer, whole (collectives)."""
    out = {}
    for k, v in model.state_dict().items():
        out["model." + k] = v.full_tensor() if isinstance(v, DTensor) \
            else v.clone()
    for i, p in enumerate(model.parameters()):
        for k, v in opt.state[p].items():
            out["optim.%d.%s" % (i, k)] = v.full_tensor() \
                if isinstance(v, DTensor) else v.clone()
    return out


def scenario_fsdp(rank, world, args):
    """fsdp save | fsdp load: train 2 steps with FSDP2 (HSDP 2 x 2 with 4
    ranks) and save; or restore the latest into this world size."""
    import ckpt.torch
    model = _fsdp(world, args.extra[0] == "save" and world == 4)
    opt = torch.optim.AdamW(model.parameters(), lr=0.05)
    ck = ckpt.torch.Checkpointer(args.job, rank=rank, world_size=world,
                                 socket=args.socket, model=model,
                                 optimizer=opt, root=args.root)
    if args.extra[0] == "save":
        for step in (1, 2):
            g = torch.Generator().manual_seed(step * 10 + rank)
            tokens = torch.randint(0, 11, (2, 4), generator=g)
            loss = (model(tokens) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        ck.save(2)
    else:
        res = ck.restore()
        assert res.step == 2, res
    ck.close()
    return {"full": _full(model, opt),
            "local": {k: v.to_local().clone()
                      for k, v in model.state_dict().items()
                      if isinstance(v, DTensor)}}


def _save_or_restore(ck, args, steps, state):
    """"save": state(step), then save and wait, for each of steps ({});
    else restore the latest ({"step", "skipped"})."""
    if args.extra[0] == "save":
        for step in steps:
            state(step)
            ck.save(step)
            ck.wait()
        return {}
    res = ck.restore()
    return {"step": res.step, "skipped": res.skipped}


def scenario_shards(rank, world, args):
    """shards save | shards load: a (world, 256 Ki) float32 parameter split
    by rows (Shard(0)), each rank's row (step * 10 + rank) saved at steps 1
    and 2 (one file per rank); or the latest restored into zeros."""
    import ckpt.torch
    mesh = init_device_mesh("cpu", (world,))
    model = torch.nn.Module()
    model.w = torch.nn.Parameter(distribute_tensor(
        torch.zeros(world, 1 << 18), mesh, [Shard(0)]))
    ck = ckpt.torch.Checkpointer(args.job, rank=rank, world_size=world,
                                 socket=args.socket, model=model,
                                 root=args.root)
    def state(step):
        with torch.no_grad():
            model.w.to_local().fill_(step * 10 + rank)
    out = _save_or_restore(ck, args, (1, 2), state)
    ck.close()
    out["local"] = model.w.to_local().detach().clone()
    return out


def scenario_mesh2d(rank, world, args):
    """mesh2d save | mesh2d load: 4 ranks on a (2, 2) mesh, tensors
    replicated over different mesh dims (v: [Replicate(), Shard(0)], u:
    [Shard(1), Replicate()]) with Adam state, saved at step 1; or restored
    (latest) into a 1-D mesh of this world size."""
    import ckpt.torch
    g = torch.Generator().manual_seed(3)
    v, u = torch.randn(3, generator=g), torch.randn(2, 9, generator=g)
    if args.extra[0] == "save":
        mesh = init_device_mesh("cpu", (2, 2))
        pv, pu = [Replicate(), Shard(0)], [Shard(1), Replicate()]
    else:
        mesh = init_device_mesh("cpu", (world,))
        pv, pu = [Shard(0)], [Shard(1)]
        v, u = torch.zeros_like(v), torch.zeros_like(u)
    model = torch.nn.Module()
    model.v = torch.nn.Parameter(distribute_tensor(v, mesh, pv))
    model.u = torch.nn.Parameter(distribute_tensor(u.half(), mesh, pu))
    opt = torch.optim.Adam(model.parameters())
    ck = ckpt.torch.Checkpointer(args.job, rank=rank, world_size=world,
                                 socket=args.socket, model=model,
                                 optimizer=opt, root=args.root)
    if args.extra[0] == "save":
        ck.save(1)
        ck.wait()
    else:
        assert ck.restore().step == 1
    ck.close()
    return {"v": model.v.full_tensor(), "u": model.u.full_tensor()}


def scenario_blobs(rank, world, args):
    """blobs save | blobs load: a replicated (DDP-like) model whose weight
    is the step, with progress {"step": step}, saved at steps 2 and 4; or
    the latest restored (into any world size)."""
    import ckpt.torch
    model = torch.nn.Linear(3, 2)
    progress = {"step": 0}
    ck = ckpt.torch.Checkpointer(args.job, rank=rank, world_size=world,
                                 socket=args.socket, model=model,
                                 progress=progress, replicated=True,
                                 root=args.root)
    def state(step):
        with torch.no_grad():
            model.weight.fill_(step)
        progress["step"] = step
    out = _save_or_restore(ck, args, (2, 4), state)
    ck.close()
    out.update(weight=model.weight.detach().clone(), progress=dict(progress))
    return out


def scenario_nan(rank, world, args):
    """nan: check_finite=True and a NaN in rank 1's piece only: every rank's
    save(1) refuses (NonFiniteError); then, fixed, save(2) commits."""
    import ckpt.torch
    mesh = init_device_mesh("cpu", (world,))
    model = torch.nn.Module()
    model.w = torch.nn.Parameter(distribute_tensor(torch.zeros(world, 4),
                                                   mesh, [Shard(0)]))
    ck = ckpt.torch.Checkpointer(args.job, rank=rank, world_size=world,
                                 socket=args.socket, model=model,
                                 check_finite=True, root=args.root)
    if rank == 1:
        with torch.no_grad():
            model.w.to_local()[0, 2] = float("nan")
    try:
        ck.save(1)
        refused = None
    except ckpt.torch.NonFiniteError as e:
        refused = str(e)
    with torch.no_grad():
        model.w.to_local().zero_()
    ck.save(2)
    ck.wait(timeout=60)
    ck.close()
    return {"refused": refused}


class Args:
    def __init__(self, argv):
        (self.scenario, rank, world, port, self.socket, self.job,
         self.outdir) = argv[:7]
        self.rank, self.world, self.port = int(rank), int(world), int(port)
        self.extra = argv[7:]
        self.path = os.environ.get("CKPT_TEST_PATH")
        self.root = os.environ.get("CKPT_ROOT")


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
    # gloo's worker threads may still be freeing finished work (which holds
    # Python tensors) when the interpreter finalizes: PyTorch then aborts
    # ("terminate called without an active exception"), about one run in
    # 15 with torch 2.15.  Everything is written; leave without finalizing.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
