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
the manifest's SHA-256.
"""
import io
import os
import pickle
import re

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.metadata import Metadata, MetadataIndex
from torch.distributed.checkpoint.planner import (LoadItemType, LoadPlan,
                                                  LoadPlanner, SavePlan,
                                                  SavePlanner, WriteItemType)
from torch.distributed.checkpoint.storage import (StorageReader,
                                                  StorageWriter, WriteResult)
from torch.futures import Future

from . import Client, InvalidArgument
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
    m = _ITER.fullmatch(os.path.basename(os.fspath(checkpoint_id)))
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
        self._bufs = {}             # name -> tensor in ckpt memory
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
        this plan no longer holds."""
        rank = self.client.rank
        count = {}
        for item in plan.items:
            count[item.index.fqn] = count.get(item.index.fqn, 0) + 1
        keep, results = set(), []
        for item in plan.items:
            name = _item_name(item.index, count[item.index.fqn])
            data = planner.resolve_data(item)
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
            self._put(name, src)
            keep.add(name)
            results.append(WriteResult(
                index=item.index, size_in_bytes=_ct._nbytes(src),
                storage_data={"rank": rank, "name": name,
                              "bytes": item.type == WriteItemType.BYTE_IO}))
        for name in [n for n in self._bufs if n not in keep]:
            self.client.unregister(GROUP, name)
            del self._bufs[name]
        return results

    def _put(self, name, src):
        buf = self._bufs.get(name)
        if buf is None or buf.dtype != src.dtype or buf.shape != src.shape:
            n = max(_ct._nbytes(src), 1)
            region = self.client.alloc(n)
            buf = _ct._carve(region.buffer, 0, src.dtype, tuple(src.shape))
            region.free()               # unmapped once buf goes
            self._bufs[name] = buf
            fresh = True
        else:
            fresh = False
        with torch.no_grad():
            buf.copy_(src)
        if fresh:
            self.client.register(GROUP, name, buf)

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

    job: the job; root: ckptd's root directory ($CKPT_ROOT, else
    /var/lib/ckpt), or path= a job or iter_NNNNNNNNN directory.  Which step:
    dcp.load(..., checkpoint_id=step), CkptReader(job, step=N), else the
    latest.  verify: check every file read against the manifest's SHA-256.
    """

    def __init__(self, job=None, *, root=None, path=None, step=None,
                 verify=True):
        super().__init__()
        if path is None:
            if job is None:
                raise TypeError("CkptReader needs job= or path=")
            root = root or os.environ.get("CKPT_ROOT") or "/var/lib/ckpt"
            path = os.path.join(root, job)
        self.path, self.step, self.verify = path, step, verify
        self._step = step
        self._m = None
        self._files = {}
        self._where = {}

    def reset(self, checkpoint_id=None):
        s = step_of(checkpoint_id)
        self._step = s if s is not None else self.step
        self._m = None
        self._files = {}

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id):
        return CkptWriter.validate_checkpoint_id(checkpoint_id)

    def _manifest(self):
        if self._m is None:
            d = self.path
            if self._step is not None and not os.path.isfile(
                    os.path.join(d, _ct.MANIFEST)):
                d = os.path.join(d, "iter_%09d" % self._step)
            self._m = _ct.read_manifest(d)
            self._where = {(t["group"], t["rank"], t["name"]): t
                           for t in self._m.get("tensors", [])}
        return self._m

    def read_metadata(self, *args, **kwargs):
        m = self._manifest()
        raw = _ct.load_blob(m["_dir"], METADATA_BLOB, 0, self.verify,
                            raw=True)
        doc = pickle.loads(raw)         # the job's own checkpoint
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise ValueError("%s: %s is not a ckpt.dcp metadata blob" %
                             (m["_dir"], METADATA_BLOB))
        return doc["metadata"]

    def set_up_storage_reader(self, metadata, is_coordinator, *args,
                              **kwargs):
        self._storage = metadata.storage_data

    def prepare_local_plan(self, plan):
        return plan

    def prepare_global_plan(self, plans):
        return plans

    def _file(self, index):
        data = self._files.get(index)
        if data is None:
            m = self._m
            rel = m["files"][index]["path"]
            data = _ct._read_file(m, rel, self.verify)
            self._files[index] = data
        return data

    def _saved(self, sd):
        """(file bytes, manifest entry) of a saved item."""
        t = self._where.get((GROUP, sd["rank"], sd["name"]))
        if t is None:
            raise KeyError("%s has no tensor %s/%s of rank %d" %
                           (self._m["_dir"], GROUP, sd["name"], sd["rank"]))
        return self._file(t["file"]), t

    def read_data(self, plan, planner):
        self._manifest()
        fut = Future()
        try:
            for req in plan.items:
                sd = self._storage[req.storage_index]
                data, t = self._saved(sd)
                if req.type == LoadItemType.BYTE_IO:
                    planner.load_bytes(req, io.BytesIO(
                        bytes(data[t["begin"]:t["end"]])))
                    continue
                src = _rows(data, t, req.storage_offsets, req.lengths)
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
            self._files = {}
        return fut


def _rows(data, t, offsets, lengths):
    """The box [offsets, offsets + lengths) of a saved tensor, reading only
    the bytes of the rows (first dimension) it covers."""
    dt = _ct.FROM_ST[t["dtype"]]
    shape = [int(d) for d in t["shape"]]
    if not shape:
        raw = data[t["begin"]:t["end"]]
        return torch.frombuffer(bytearray(raw), dtype=dt).reshape(())
    esize = torch.empty((), dtype=dt).element_size()
    row = esize
    for d in shape[1:]:
        row *= d
    o0, n0 = int(offsets[0]), int(lengths[0])
    b = t["begin"] + o0 * row
    raw = bytearray(data[b:b + n0 * row])
    if not raw:
        box = torch.empty([n0] + shape[1:], dtype=dt)
    else:
        box = torch.frombuffer(raw, dtype=dt).reshape([n0] + shape[1:])
    for d in range(1, len(shape)):
        box = box.narrow(d, int(offsets[d]), int(lengths[d]))
    return box
