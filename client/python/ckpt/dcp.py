"""ckpt.dcp - torch.distributed.checkpoint storage through ckptd.

    import torch.distributed.checkpoint as dcp
    from ckpt.dcp import CkptWriter, CkptReader

    dcp.save(state_dict, storage_writer=CkptWriter("myjob"), checkpoint_id=step)
    dcp.async_save(state_dict, storage_writer=CkptWriter("myjob"),
                   checkpoint_id=step)
    dcp.load(state_dict, storage_reader=CkptReader("myjob"))   # latest

A DCP save is a ckpt checkpoint of step checkpoint_id (an int, "123" or
"iter_000000123"; or CkptWriter(job, step=N), counted up after each save):
every rank registers the items DCP's planner gave it (tensor chunks, and
byte items as U8 tensors) in group "dcp" and saves; the coordinator saves
last, from finish(), with DCP's Metadata as the blob "dcp.metadata".  A save
returns once STAGED on every rank (ckptd writes on); writer.wait() waits
for the commit, and the next save raises an earlier save's failure.

CkptReader reads a committed checkpoint's DCP metadata and lets DCP's own
planner decide what each rank needs, in any world size: each read item is a
byte range of a saved chunk, read from the checkpoint's safetensors files
(only the rows it covers) after the files it touches were checked against
the manifest's digest.
"""
import io
import os
import pickle
import re

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.planner import LoadItemType, WriteItemType
from torch.distributed.checkpoint.storage import (StorageReader,
                                                  StorageWriter, WriteResult)
from torch.futures import Future

from . import Client
from . import ondisk
from . import torch as _ct

__all__ = ["CkptWriter", "CkptReader", "GROUP", "METADATA_BLOB"]

GROUP = "dcp"
METADATA_BLOB = "dcp.metadata"
FORMAT = "ckpt.dcp"
_ITER = re.compile(r"(?:iter_)?([0-9]+)")


def step_of(checkpoint_id):
    """The ckpt step a DCP checkpoint_id names: an int, "123" or
    "iter_000000123"; None for None."""
    if checkpoint_id is None:
        return None
    if isinstance(checkpoint_id, int) and checkpoint_id >= 0:
        return checkpoint_id
    m = None if isinstance(checkpoint_id, (int, float)) else \
        _ITER.fullmatch(os.path.basename(os.fspath(checkpoint_id)))
    if m is None:
        raise ValueError("checkpoint_id %r is not a step (an int, '123' or "
                         "'iter_000000123')" % (checkpoint_id,))
    return int(m.group(1))


def _rank_world(group):
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(group), dist.get_world_size(group)
    return 0, 1


def _item_name(index, nchunks):
    """The tensor name of a saved item: its fqn, with the chunk's offsets
    when the rank saves more than one chunk of it."""
    if nchunks <= 1 or index.offset is None:
        return index.fqn
    return "%s@%s" % (index.fqn, ",".join(str(int(o)) for o in index.offset))


class CkptWriter(StorageWriter):
    """DCP StorageWriter that hands the state to ckptd.

    job/socket: as for ckpt.Client; rank and world size come from the
    default process group (or process_group=).  step: the step of the next
    save when dcp.save gets no checkpoint_id (counted up after each)."""

    def __init__(self, job, *, step=None, socket=None, process_group=None,
                 wait="staged"):
        super().__init__()
        self.job, self.socket, self.step = job, socket, step
        self.process_group = process_group
        self.wait_phase = wait
        self.client = None
        self.tickets = []
        self._bufs = {}             # name -> (ckpt memory, piece or None)
        self._step = None
        self._coordinator = False

    # -- DCP's sequence: reset, set up, plans, write_data, finish --

    def reset(self, checkpoint_id=None):
        self._step = step_of(checkpoint_id)

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id):
        try:
            return step_of(checkpoint_id) is not None
        except ValueError:
            return False

    def set_up_storage_writer(self, is_coordinator, *args, **kwargs):
        if self._step is None:
            self._step = self.step
        if self._step is None:
            raise ValueError("CkptWriter needs a step: dcp.save(..., "
                             "checkpoint_id=step) or CkptWriter(job, "
                             "step=N)")
        self._coordinator = is_coordinator
        if self.client is None:
            rank, world = _rank_world(self.process_group)
            self.client = Client(self.job, rank, world, self.socket)
        self._raise_failed()

    def prepare_local_plan(self, plan):
        return plan

    def prepare_global_plan(self, plans):
        return plans

    def write_data(self, plan, planner):
        fut = Future()
        try:
            results = self._stage(plan, planner)
            if not self._coordinator:
                self._save()
            fut.set_result(results)
        except BaseException as e:          # DCP gathers it to every rank
            fut.set_exception(e)
        return fut

    def finish(self, metadata, results):
        storage = {}
        for rank_results in results:
            for wr in rank_results:
                storage[wr.index] = wr.storage_data
        metadata.storage_data = storage
        self.client.put_blob(METADATA_BLOB, pickle.dumps(
            {"format": FORMAT, "version": 1, "metadata": metadata},
            protocol=4))
        self._save()

    # -- ours --

    def _stage(self, plan, planner):
        """Copy each item into ckpt memory and register it; unregister what
        this plan no longer holds.  A tensor chunk is a piece of the global
        tensor fqn where libckpt has global tensors (DCP already chose one
        rank per replicated chunk), else a rank-local tensor; byte items are
        rank-local U8 tensors."""
        rank = self.client.rank
        count = {}
        for item in plan.items:
            count[item.index.fqn] = count.get(item.index.fqn, 0) + 1
        keep, results = set(), []
        for item in plan.items:
            data = planner.resolve_data(item)
            piece = None
            if item.type == WriteItemType.BYTE_IO:
                raw = data.getvalue() if isinstance(data, io.BytesIO) \
                    else bytes(data)
                src = torch.frombuffer(bytearray(raw), dtype=torch.uint8) \
                    if raw else torch.empty(0, dtype=torch.uint8)
            else:
                src = data.detach()
                if src.dtype not in _ct.TO_ST:
                    raise TypeError("%s: dtype %s cannot be stored by ckpt "
                                    "(%s)" % (item.index.fqn, src.dtype,
                                              ", ".join(map(str,
                                                            _ct.TO_ST))))
                # (an empty chunk, a rank holding no rows: rank-local)
                if self.client.has_global and count[item.index.fqn] == 1 \
                        and src.numel():
                    piece = ([int(d) for d in item.tensor_data.size],
                             [int(o) for o in
                              item.tensor_data.chunk.offsets])
            name = item.index.fqn if piece else \
                _item_name(item.index, count[item.index.fqn])
            self._put(name, src, piece)
            keep.add(name)
            sd = {"rank": rank, "name": name}
            if item.type == WriteItemType.BYTE_IO:
                sd["bytes"] = True
            if piece:
                sd["offset"] = piece[1]
            results.append(WriteResult(index=item.index,
                                       size_in_bytes=_ct._nbytes(src),
                                       storage_data=sd))
        for name in [n for n in self._bufs if n not in keep]:
            self.client.unregister(GROUP, name)
            del self._bufs[name]
        return results

    def _put(self, name, src, piece):
        """Copy src into this name's ckpt memory, registered as a rank-local
        tensor or (piece = (global shape, offset)) a global tensor's piece."""
        buf, was = self._bufs.get(name, (None, False))
        if buf is None or buf.dtype != src.dtype or buf.shape != src.shape:
            n = max(_ct._nbytes(src), src.element_size())
            region = self.client.alloc(n)
            buf = _ct._carve(region.buffer, 0, src.dtype, tuple(src.shape))
            region.free()               # unmapped once buf goes
            was = False                 # not registered yet
        with torch.no_grad():
            buf.copy_(src)
        if was != piece:
            if piece:
                self.client.register_global(GROUP, name, buf, piece[0],
                                            piece[1])
            else:
                self.client.register(GROUP, name, buf)
        self._bufs[name] = (buf, piece)

    def _save(self):
        t = self.client.save(self._step)
        self.tickets.append(t)
        if self.step is not None and self._step >= self.step:
            self.step = self._step + 1
        self._step = None
        if self.wait_phase:
            t.wait(self.wait_phase)

    def _raise_failed(self):
        """Raise the failure of an earlier save (SaveFailed), once."""
        keep = []
        for t in self.tickets:
            if t.done("committed"):
                continue                # raises SaveFailed if it failed
            keep.append(t)
        self.tickets = keep

    def wait(self, phase="committed", timeout=None):
        """Wait until this writer's saves reached phase (SaveFailed if one
        failed)."""
        for t in self.tickets:
            t.wait(phase, timeout)
        if phase == "committed":
            self.tickets = []

    def close(self, wait="committed"):
        if self.client is None:
            return
        try:
            if wait:
                self.wait(wait)
        finally:
            self._bufs.clear()
            self.client.close()
            self.client = None

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *rest):
        self.close(wait="committed" if exc_type is None else None)


class CkptReader(StorageReader):
    """DCP StorageReader of a checkpoint ckptd committed.

    job: the job, under root (ckptd's root: $CKPT_ROOT, else
    /var/lib/ckpt); or path= a job or iter_NNNNNNNNN directory.  Which step:
    dcp.load(..., checkpoint_id=step), CkptReader(job, step=N), else the
    latest.  verify: check every file read against the manifest's digest.
    """

    def __init__(self, job=None, *, root=None, path=None, step=None,
                 verify=True):
        super().__init__()
        if path is None:
            if job is None:
                raise TypeError("CkptReader needs job= or path=")
            path = os.path.join(root or ondisk.default_root(), job)
        self.path, self.step, self.verify = path, step, verify
        self._step = step
        self._ck = None

    def reset(self, checkpoint_id=None):
        s = step_of(checkpoint_id)
        self._step = s if s is not None else self.step
        self._ck = None

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id):
        return CkptWriter.validate_checkpoint_id(checkpoint_id)

    def _checkpoint(self):
        if self._ck is None:
            if self._step is not None and not os.path.isdir(os.path.join(
                    self.path, "iter_%09d" % self._step)) and \
                    not os.path.isfile(os.path.join(self.path, _ct.MANIFEST)):
                raise FileNotFoundError(
                    "%s has no checkpoint iter_%09d (never saved, or pruned: "
                    "`ckptctl list --job` shows what there is)" %
                    (self.path, self._step))
            self._ck = ondisk.Checkpoint(self.path, self._step, self.verify)
        return self._ck

    def read_metadata(self, *args, **kwargs):
        ck = self._checkpoint()
        raw = ck.blob(0, METADATA_BLOB)
        doc = pickle.loads(raw) if raw else None   # the job's own checkpoint
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise ValueError("%s: no ckpt.dcp metadata (blob %s of rank 0); "
                             "not saved through ckpt.dcp.CkptWriter" %
                             (ck.dir, METADATA_BLOB))
        return doc["metadata"]

    def set_up_storage_reader(self, metadata, is_coordinator, *args,
                              **kwargs):
        self._storage = metadata.storage_data

    def prepare_local_plan(self, plan):
        return plan

    def prepare_global_plan(self, plans):
        return plans

    def _entry(self, ck, sd):
        """The manifest's entry of a saved item: a global tensor's piece,
        or a rank-local tensor."""
        if "offset" in sd:
            g = ck.global_tensor(GROUP, sd["name"])
            p = None if g is None else next(
                (p for p in g["pieces"] if p["offset"] == sd["offset"]),
                None)
            if p is None:
                raise KeyError("%s has no piece at %s of the global tensor "
                               "%s/%s" % (ck.dir, sd["offset"], GROUP,
                                          sd["name"]))
            return dict(p, dtype=g["dtype"])
        t = ck.local(GROUP, sd["rank"], sd["name"])
        if t is None:
            raise KeyError("%s has no tensor %s/%s of rank %d" %
                           (ck.dir, GROUP, sd["name"], sd["rank"]))
        return t

    def read_data(self, plan, planner):
        fut = Future()
        try:
            ck = self._checkpoint()
            for req in plan.items:
                t = self._entry(ck, self._storage[req.storage_index])
                if req.type == LoadItemType.BYTE_IO:
                    planner.load_bytes(req, io.BytesIO(
                        ck.read(t).numpy().tobytes()))
                    continue
                src = ck.read(t, req.storage_offsets, req.lengths)
                dst = planner.resolve_tensor(req).detach()
                if tuple(dst.shape) != tuple(src.shape):
                    raise ValueError("%s: read %s, DCP wants %s" %
                                     (req.storage_index.fqn,
                                      tuple(src.shape), tuple(dst.shape)))
                dst.copy_(src)
                planner.commit_tensor(req, dst)
            fut.set_result(None)
        except BaseException as e:
            fut.set_exception(e)
        finally:
            self._ck = None         # unmaps the files
        return fut
