"""ckpt.torch_dist - where each tensor of a distributed PyTorch run sits in
its global tensor, for ckpt.torch.Checkpointer: DTensors (FSDP2's
fully_shard, tensor parallelism) by their placements on the device mesh,
plain tensors of a replicated run (DDP) as replicas over the job's ranks.
"""
import torch

try:
    from torch.distributed.tensor import DTensor, Replicate, Shard
    from torch.distributed.tensor._utils import \
        compute_local_shape_and_global_offset
except ImportError:             # PyTorch 1.x: no DTensor
    DTensor = None

__all__ = ["Piece", "is_dtensor", "piece_of", "local_of", "is_replicated_run",
           "job_group", "max_over_ranks"]


class Piece:
    """A rank's piece of a global tensor: its global shape, the offset of
    the piece, and which of replica_count identical copies this rank holds."""
    __slots__ = ("global_shape", "offset", "replica_index", "replica_count")

    def __init__(self, global_shape, offset, replica_index, replica_count):
        self.global_shape = tuple(int(d) for d in global_shape)
        self.offset = tuple(int(o) for o in offset)
        self.replica_index = int(replica_index)
        self.replica_count = int(replica_count)

    def key(self):
        return (self.global_shape, self.offset, self.replica_index,
                self.replica_count)

    def __repr__(self):
        return "<Piece at %s of %s, replica %d of %d>" % (
            self.offset, self.global_shape, self.replica_index,
            self.replica_count)


def is_dtensor(t):
    return DTensor is not None and isinstance(t, DTensor)


def local_of(t):
    """The tensor this rank holds: a DTensor's local piece, else t."""
    return t.to_local() if is_dtensor(t) else t


def _dtensor_piece(name, t):
    mesh, placements = t.device_mesh, t.placements
    for p in placements:
        if not isinstance(p, (Shard, Replicate)):
            raise TypeError("%s: DTensor placement %s cannot be checkpointed "
                            "as a piece (Shard and Replicate can; reduce a "
                            "Partial first)" % (name, p))
    shape, offset = compute_local_shape_and_global_offset(
        t.shape, mesh, placements)
    coord = mesh.get_coordinate()
    if coord is None:
        raise ValueError("%s: this rank is not in the DTensor's mesh" % name)
    index, count = 0, 1
    for d, p in enumerate(placements):
        if isinstance(p, Replicate):
            index = index * mesh.size(d) + coord[d]
            count *= mesh.size(d)
    if tuple(shape) != tuple(t.to_local().shape):
        raise ValueError("%s: local shape %s is not the %s its placements "
                         "give" % (name, tuple(t.to_local().shape),
                                   tuple(shape)))
    return Piece(t.shape, offset, index, count)


def piece_of(name, t, replicated, rank, world_size):
    """The Piece of tensor t: by its placements for a DTensor, a replica of
    the whole for a plain tensor of a replicated run, None (rank-local)
    otherwise."""
    if is_dtensor(t):
        return _dtensor_piece(name, t)
    if replicated:
        return Piece(t.shape, (0,) * t.dim(), rank, world_size)
    return None


def is_replicated_run(model):
    """Whether model's tensors are the same on every rank of the job: a
    DistributedDataParallel module, or a model with DTensor parameters
    (FSDP2 / tensor parallel: the plain tensors beside them, such as
    buffers and the optimizer's step, are replicated)."""
    if model is None:
        return False
    if isinstance(model, torch.nn.parallel.DistributedDataParallel):
        return True
    return any(is_dtensor(p) for p in model.parameters())


def job_group(world_size):
    """Whether torch.distributed runs exactly the job's ranks (then they
    can agree on an outcome)."""
    dist = torch.distributed
    return (world_size > 1 and dist.is_available() and dist.is_initialized()
            and dist.get_world_size() == world_size)


def max_over_ranks(values, world_size):
    """The element-wise maximum of a list of ints over the job's ranks (a
    collective: every rank calls it), or values as they are without one."""
    if not job_group(world_size):
        return list(values)
    dist = torch.distributed
    dev = "cuda" if dist.get_backend() == "nccl" else "cpu"
    t = torch.tensor(values, dtype=torch.int64, device=dev)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return [int(x) for x in t.tolist()]
