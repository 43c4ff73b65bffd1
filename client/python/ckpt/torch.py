"""ckpt.torch - checkpoint a PyTorch training run through ckptd.

    ck = ckpt.torch.Checkpointer("myjob", model=model, optimizer=opt,
                                 scheduler=sched, progress=progress)
    ck.restore()                      # None on a fresh start
    for step in range(progress.get("step", 0) + 1, steps + 1):
        ...train...
        progress["step"] = step
        if step % 100 == 0:
            ck.save(step)             # CPU: returns once STAGED; CUDA: at
                                      # once, gated at optimizer.step()
    ck.close()                        # waits for the last save to commit

What it keeps, and where:
  * group "model": the model's state_dict() tensors (parameters, persistent
    buffers) under their state_dict names;
  * group "optim": the optimizer's tensor state as "state.<i>.<key>", i the
    parameter's index as in optimizer.state_dict();
  * blobs (JSON; pickle only for what JSON cannot carry): "torch.meta",
    "torch.optim" (param_groups and non-tensor state), "torch.sched",
    "torch.rng" (Python, NumPy, torch CPU and CUDA, named generators),
    "torch.progress", "torch.model_extra" (non-tensor state_dict entries
    such as get_extra_state()), "torch.state.<name>" for other stateful
    objects.

CPU tensors are moved into ckptd-shared memory (one region per batch,
64-byte aligned, copied once, then `tensor.data = view`), so the model
trains unchanged and a save copies straight from the live tensors.  CUDA
tensors are registered where they are.  Before each save the tensors are
collected again: new optimizer state is registered, a tensor whose memory
was replaced (a new `param.data`, optimizer.load_state_dict()) is copied
into ckpt memory and re-registered -- or refused with on_replaced="raise"
-- and never saved stale.

CUDA tensors, where ckptd has a GPU, are saved from the current stream
without stalling (see Checkpointer.save and gate=): no
torch.cuda.synchronize(), no wait for STAGED; the stream is made to wait
(on the GPU) only where the tensors next change, before optimizer.step(),
so the next forward and backward pass overlap ckptd's copy.

load_state_dict(path) reads a committed checkpoint with nothing but the
safetensors format and the JSON manifest: no daemon, no libckpt.
"""
import base64
import collections
import ctypes
import ctypes.util
import errno as _errno
import hashlib
import json
import mmap
import os
import pickle
import random
import re
import struct

import torch

from . import (CkptError, Client, NoCheckpoint, NotSupported,
               RestoreMismatch, SaveFailed)
from . import _lib as _L
from . import torch_dist as _td

try:
    import numpy as _np
except ImportError:          # pragma: no cover - numpy comes with torch
    _np = None

__all__ = ["Checkpointer", "NonFiniteError", "TensorReplacedError",
           "init_optimizer_state", "load_state_dict",
           "load_optimizer_state_dict", "load_blob", "read_manifest",
           "checkpoint_dir", "MODEL", "OPTIM"]

MODEL = "model"
OPTIM = "optim"
ALIGN = 64
FORMAT = "ckpt.torch"
FORMAT_VERSION = 1

B_META = "torch.meta"
B_OPTIM = "torch.optim"
B_SCHED = "torch.sched"
B_RNG = "torch.rng"
B_PROGRESS = "torch.progress"
B_STATE = "torch.state."
B_MODEL_EXTRA = "torch.model_extra"

TO_ST = {
    torch.float64: "F64", torch.float32: "F32", torch.float16: "F16",
    torch.bfloat16: "BF16", torch.int64: "I64", torch.int32: "I32",
    torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8",
    torch.bool: "BOOL",
}
FROM_ST = {v: k for k, v in TO_ST.items()}


class NonFiniteError(ValueError):
    """check_finite=True: a tensor holds NaN or Inf; nothing was saved."""


class TensorReplacedError(RuntimeError):
    """on_replaced="raise": a registered tensor's memory was replaced."""


# --- blobs: tagged JSON, pickle only as a fallback ------------------------

_TAG = "__ckpt_"


def _b64(b):
    return base64.b64encode(bytes(b)).decode("ascii")


def _tensor_bytes(t):
    t = t.detach().cpu().contiguous()
    n = t.numel() * t.element_size()
    return ctypes.string_at(t.data_ptr(), n) if n else b""


def _enc(x):
    if x is None or isinstance(x, (bool, str)):
        return x
    if isinstance(x, int):
        return x
    if isinstance(x, float):
        if x != x or x in (float("inf"), float("-inf")):
            return {_TAG + "float__": repr(x)}
        return x
    if isinstance(x, list):
        return [_enc(v) for v in x]
    if isinstance(x, tuple):
        return {_TAG + "tuple__": [_enc(v) for v in x]}
    if isinstance(x, dict):
        if all(isinstance(k, str) and not k.startswith(_TAG) for k in x):
            return {k: _enc(v) for k, v in x.items()}
        return {_TAG + "dict__": [[_enc(k), _enc(v)] for k, v in x.items()]}
    if isinstance(x, (bytes, bytearray)):
        return {_TAG + "bytes__": _b64(x)}
    if isinstance(x, torch.Tensor):
        if x.dtype not in TO_ST or x.is_sparse:
            raise TypeError("tensor of dtype %s" % x.dtype)
        return {_TAG + "tensor__": {"dtype": TO_ST[x.dtype],
                                    "shape": list(x.shape),
                                    "data": _b64(_tensor_bytes(x))}}
    if _np is not None and isinstance(x, (_np.ndarray, _np.generic)):
        a = _np.asarray(x)
        if a.dtype.hasobject:
            raise TypeError("numpy array of objects")
        return {_TAG + ("ndarray__" if isinstance(x, _np.ndarray)
                        else "npscalar__"):
                {"dtype": a.dtype.str, "shape": list(a.shape),
                 "data": _b64(_np.ascontiguousarray(a).tobytes())}}
    raise TypeError("%s" % type(x).__name__)


def _dec(x):
    if isinstance(x, list):
        return [_dec(v) for v in x]
    if not isinstance(x, dict):
        return x
    if len(x) == 1:
        (k, v), = x.items()
        if k.startswith(_TAG):
            if k == _TAG + "tuple__":
                return tuple(_dec(e) for e in v)
            if k == _TAG + "dict__":
                return {_dec(a): _dec(b) for a, b in v}
            if k == _TAG + "float__":
                return float(v)
            if k == _TAG + "bytes__":
                return base64.b64decode(v)
            if k == _TAG + "tensor__":
                data = bytearray(base64.b64decode(v["data"]))
                dt = FROM_ST[v["dtype"]]
                shape = tuple(v["shape"])
                if not data:
                    return torch.empty(shape, dtype=dt)
                return torch.frombuffer(data, dtype=dt).reshape(shape)
            if k in (_TAG + "ndarray__", _TAG + "npscalar__"):
                if _np is None:
                    raise ValueError("numpy is needed to read this blob")
                a = _np.frombuffer(base64.b64decode(v["data"]),
                                   dtype=_np.dtype(v["dtype"]))
                a = a.reshape(v["shape"]).copy()
                return a if k == _TAG + "ndarray__" else a[()]
            raise ValueError("unknown tag %s in blob" % k)
    return {k: _dec(v) for k, v in x.items()}


def encode_blob(obj):
    """bytes for a blob: JSON when every value is a plain type, a tuple,
    bytes, a tensor or a numpy array; pickle otherwise."""
    try:
        tree = _enc(obj)
    except TypeError:
        return pickle.dumps(obj, protocol=4)
    return json.dumps({"ckpt.torch.blob": 1, "value": tree},
                      separators=(",", ":")).encode()


def decode_blob(data, allow_pickle=False, what="blob"):
    if data[:1] == b"{":
        doc = json.loads(data.decode("utf-8"))
        if doc.get("ckpt.torch.blob") != 1:
            raise ValueError("%s: not a ckpt.torch blob" % what)
        return _dec(doc["value"])
    if data[:1] == b"\x80":
        if not allow_pickle:
            raise ValueError("%s is pickled; pass allow_pickle=True only "
                             "for checkpoints you trust" % what)
        return pickle.loads(data)
    raise ValueError("%s: unknown encoding" % what)


# --- RNG ------------------------------------------------------------------

def _rng_get(generators):
    st = {"python": random.getstate(),
          "torch": torch.get_rng_state()}
    if _np is not None:
        st["numpy"] = _np.random.get_state()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        st["cuda"] = [s for s in torch.cuda.get_rng_state_all()]
    st["generators"] = {k: g.get_state() for k, g in generators.items()}
    return st


def _rng_set(st, generators):
    random.setstate(st["python"])
    torch.set_rng_state(st["torch"])
    if "numpy" in st and _np is not None:
        _np.random.set_state(st["numpy"])
    if "cuda" in st:
        torch.cuda.set_rng_state_all(st["cuda"])
    for k, g in generators.items():
        g.set_state(st["generators"][k])


def _rng_restore(st, generators, partial, missing):
    """Apply a saved RNG state; check first what can be checked, and undo
    everything if a setter refuses (the seeds validate the same way)."""
    st = dict(st)
    problems = []
    if "cuda" in st:
        have = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if have != len(st["cuda"]):
            problems.append("CUDA RNG state is for %d device(s), this "
                            "process has %d" % (len(st["cuda"]), have))
            missing.append(B_RNG + ":cuda")
            del st["cuda"]
    saved = set(st.get("generators", {}))
    if saved != set(generators):
        problems.append("generators differ: checkpoint has %s, registered "
                        "%s" % (sorted(saved), sorted(generators)))
        missing.extend(B_RNG + ":generator." + k
                       for k in sorted(set(generators) - saved))
        generators = {k: g for k, g in generators.items() if k in saved}
    if problems and not partial:
        raise RestoreMismatch(_errno.EINVAL, "RNG state: " +
                              "; ".join(problems), "restore")
    before = _rng_get(generators)
    before.pop("cuda", None)
    try:
        _rng_set(st, generators)
    except Exception as e:
        _rng_set(before, generators)
        raise RestoreMismatch(_errno.EINVAL, "RNG state in the checkpoint "
                              "is not usable: %s" % e, "restore") from e


# --- optimizer ------------------------------------------------------------

def _opt_params(optimizer):
    for g in optimizer.param_groups:
        for p in g["params"]:
            yield p


# Counters the dummy step advanced, and their value in a fresh optimizer.
_FRESH_COUNTERS = {"step": 0, "mu_product": 1}


def init_optimizer_state(optimizer):
    """Create an optimizer's lazily made state so that it can be registered
    and restored into before the first step, the way checkpointing trainers
    do: one step() with zero gradients and no weight decay, then parameters,
    gradients, hyper-parameters and step counters put back.  Afterwards the
    optimizer behaves as a fresh one (checked for Adam, AdamW, NAdam, RAdam,
    Adamax, Adadelta, Adagrad, RMSprop, Rprop, SGD; not ASGD, and LBFGS
    needs init_optimizer=False).
    Returns False if the state already existed."""
    params = [p for p in _opt_params(optimizer) if p.requires_grad]
    if not params or all(optimizer.state.get(p) for p in params):
        return False
    saved_groups = [{k: v for k, v in g.items() if k != "params"}
                    for g in optimizer.param_groups]
    with torch.no_grad():
        keep = [(p, p.detach().clone(), p.grad) for p in params]
        for p in params:
            p.grad = torch.zeros_like(p)
        for g in optimizer.param_groups:
            if "weight_decay" in g:
                g["weight_decay"] = 0.0
        try:
            optimizer.step()
        except Exception as e:
            raise RuntimeError(
                "cannot create the state of %s before training (%s); pass "
                "init_optimizer=False and restore after its first step" %
                (type(optimizer).__name__, e)) from e
        finally:
            for g, s in zip(optimizer.param_groups, saved_groups):
                g.update(s)
            for p, val, grad in keep:
                p.copy_(val)
                p.grad = grad
    for p in params:
        st = optimizer.state.get(p, {})
        for key, fresh in _FRESH_COUNTERS.items():
            v = st.get(key)
            if isinstance(v, torch.Tensor):
                v.fill_(fresh)
            elif isinstance(v, (int, float)):
                st[key] = type(v)(fresh)
    return True


# --- carving tensors out of ckpt memory -----------------------------------

def _carve(buf, off, dtype, shape):
    n = 1
    for d in shape:
        n *= d
    if n == 0:
        return torch.frombuffer(buf, dtype=dtype, count=1,
                                offset=off)[:0].reshape(shape)
    return torch.frombuffer(buf, dtype=dtype, count=n,
                            offset=off).view(shape)


def _unwrapped(model):
    """The module whose names are saved: a DistributedDataParallel (or
    DataParallel) model's .module, so that its checkpoint has the plain
    names ("fc.weight", not "module.fc.weight") and restores into the bare
    model, FSDP2 or another wrapper alike."""
    par = torch.nn.parallel
    if isinstance(model, (par.DistributedDataParallel, par.DataParallel)):
        return model.module
    return model


def _nbytes(t):
    return t.numel() * t.element_size()


_DEFAULT = object()         # save(wait=): "staged" on the host path, None
                            # for stream saves


def _tracks_running_stats(model):
    """Whether a forward pass of model changes saved buffers in place:
    BatchNorm / InstanceNorm with track_running_stats."""
    norm = torch.nn.modules.batchnorm._NormBase
    return any(isinstance(m, norm) and m.track_running_stats
               for m in model.modules())


class _Rec:
    """A registered tensor: the object trainers use, our view of its ckpt
    memory (None for CUDA), and what it looked like when registered.
    piece: where it sits in its global tensor (None: rank-local).  copy:
    view is a copy of a DTensor's local piece, refreshed before each save
    (FSDP2 owns that memory, so it is not moved)."""
    __slots__ = ("obj", "view", "ptr", "shape", "dtype", "device", "piece",
                 "copy", "frozen")

    def __init__(self, obj, view, piece=None, copy=False, frozen=False):
        loc = _td.local_of(obj)
        self.obj = obj
        self.view = view
        self.ptr = loc.data_ptr()
        self.shape = tuple(loc.shape)
        self.dtype = loc.dtype
        self.device = loc.device
        self.piece = piece
        self.copy = copy
        self.frozen = frozen

    def matches(self, t, piece):
        loc = _td.local_of(t)
        if (piece is None) != (self.piece is None) or \
                (piece is not None and piece.key() != self.piece.key()):
            return False
        return (loc.data_ptr() == self.ptr and loc.dtype == self.dtype and
                tuple(loc.shape) == self.shape and
                loc.device == self.device and
                (self.copy or loc.is_contiguous()))


class Checkpointer:
    """Registers a model, optimizer, scheduler, RNG streams and a progress
    dict with ckptd in one call; save() is asynchronous; restore() brings it
    all back so training continues bit for bit.

    job/rank/world_size/socket: as for ckpt.Client (or pass client=).
    progress: a dict (updated in place on restore) or an object with
      state_dict()/load_state_dict(), e.g. a stateful data loader.
    generators: {"name": torch.Generator} saved with the RNG state.
    stateful: {"name": obj with state_dict()/load_state_dict()}.
    rng: save and restore the Python, NumPy and torch (CPU, CUDA) RNGs.
    check_finite: refuse (NonFiniteError) to save NaN/Inf in any floating
      tensor, the way the seeds' checkpointers can be told to; every rank
      refuses if one does, when torch.distributed runs the job's ranks.
    on_replaced: "reregister" (default) or "raise" when a registered tensor
      was replaced by a new one.
    frozen: True (default): model parameters with requires_grad=False (a
      fine-tune's frozen base) are registered with CKPT_FROZEN: ckptd keeps
      them in a file of their own (model/rank_NNNNN.frozen.safetensors)
      that a save links to the previous checkpoint's instead of writing it
      again while they do not change (README, Incremental saves).  A
      parameter unfrozen later moves back at the next save.  False: every
      parameter in the group's one file.
    replicated: the model and optimizer state are the same on every rank
      (DDP): saved as replicated global tensors, one copy written.  None
      (default): True for a DistributedDataParallel model or one with
      DTensor parameters (FSDP2).  DTensors are always saved as their
      pieces of the global tensor.  Such a run restores into any world
      size; blobs of a run with another world size are read from the
      checkpoint's files under root (ckptd's root: $CKPT_ROOT, else
      /var/lib/ckpt).
    gate: where a save of CUDA tensors (ckptd with a GPU) makes the
      training stream wait until the save is STAGED.  The save itself is
      queued on torch.cuda.current_stream() and returns at once.
      "step": in an optimizer step pre-hook, before optimizer.step()
        changes the tensors; the forward and backward pass in between
        overlap the copy.
      "forward": in a forward pre-hook of the model, for models whose
        forward pass changes saved tensors in place (BatchNorm running
        statistics, EMA buffers); the optimizer step is gated too.
      "now": at save(), as ckpt_save_stream() does (nothing overlaps).
      "auto" (default): "forward" if the model has norm layers that track
      running statistics, else "step" with an optimizer, else "now".
      Registered host (CPU) tensors, e.g. Adam's "step" counters, are
      changed by the CPU, which no stream gate holds: the optimizer step
      pre-hook then also waits on the CPU for STAGED (fused=True or
      capturable=True keeps Adam's state on the GPU).  Anything else that
      changes the saved tensors in place before the next optimizer.step()
      must call gate() first.
    """

    def __init__(self, job=None, *, model=None, optimizer=None,
                 scheduler=None, progress=None, generators=None,
                 stateful=None, client=None, rank=0, world_size=1,
                 socket=None, rng=True, check_finite=False,
                 on_replaced="reregister", init_optimizer=True,
                 replicated=None, root=None, gate="auto", frozen=True):
        if on_replaced not in ("reregister", "raise"):
            raise ValueError("on_replaced must be 'reregister' or 'raise'")
        if gate not in ("auto", "step", "forward", "now"):
            raise ValueError("gate must be 'auto', 'step', 'forward' or "
                             "'now'")
        if client is None:
            if job is None:
                raise TypeError("Checkpointer needs job= or client=")
            client = Client(job, rank, world_size, socket)
            self._own = True
        else:
            self._own = False
        self.client = client
        self.model = model
        self.optimizer = optimizer
        self.scheduler = scheduler
        self.progress = progress
        self.generators = dict(generators or {})
        self.stateful = dict(stateful or {})
        self.rng = rng
        if replicated is None:      # DDP / FSDP2: global tensors if we can
            replicated = _td.is_replicated_run(model) and \
                self.client.has_global
        self.replicated = bool(replicated)
        self.root = root
        self.check_finite = check_finite
        self.on_replaced = on_replaced
        self.frozen = bool(frozen) and getattr(self.client, "has_frozen", False)
        self.replaced = []          # keys re-registered by the last sync
        self.failures = []          # SaveFailed of earlier saves, unraised
        self._recs = collections.OrderedDict()
        self._model_extra = {}
        self._tickets = []
        self._blob_cache = {}
        self._closed = False
        self.gate_mode = gate
        self._streams = True        # until ckptd says it has no GPU
        self._ungated = []          # stream saves no stream waits for yet
        self._host_pending = []     # ... whose host tensors the CPU may
                                    # not change before STAGED
        self._gate_dev = None       # their CUDA device
        self._hooks = []
        for name in self.stateful:
            if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name):
                raise ValueError("stateful name %r: use [A-Za-z0-9_.-]" %
                                 name)
        try:
            if optimizer is not None and init_optimizer:
                init_optimizer_state(optimizer)
            self.sync()
        except BaseException:
            self.close(wait=None)
            raise

    # -- collecting and registering --

    def _collect(self):
        out = collections.OrderedDict()
        self._model_extra = {}
        if self.model is not None:
            for name, t in _unwrapped(self.model).state_dict(
                    keep_vars=True).items():
                if isinstance(t, torch.Tensor):
                    out[(MODEL, name)] = t
                else:                   # get_extra_state() and the like
                    self._model_extra[name] = t
        if self.optimizer is not None:
            for i, p in enumerate(_opt_params(self.optimizer)):
                for k, v in self.optimizer.state.get(p, {}).items():
                    if isinstance(v, torch.Tensor):
                        out[(OPTIM, "state.%d.%s" % (i, k))] = v
        return out

    def sync(self):
        """Bring the registration up to date with the live tensors (done by
        save() and restore()).  Returns the keys (group, name) that were
        re-registered because their tensor had been replaced."""
        self._check_open()
        want = self._collect()
        fresh, replaced = [], []
        for key, t in want.items():
            piece = _td.piece_of("%s/%s" % key, t, self.replicated,
                                 self.client.rank, self.client.world_size)
            rec = self._recs.get(key)
            if rec is not None and rec.matches(t, piece):
                rec.obj = t
                if rec.frozen != self._frozen(t):
                    fresh.append((key, t, piece))   # (un)frozen: registered
                continue                            # again where it is
            if rec is not None:
                if self.on_replaced == "raise":
                    raise TensorReplacedError(
                        "%s/%s was replaced after it was registered (now %s "
                        "%s at 0x%x on %s, registered %s %s at 0x%x); saving "
                        "would write stale data.  Update it in place, or use "
                        "on_replaced='reregister'" %
                        (key[0], key[1], t.dtype, tuple(t.shape),
                         t.data_ptr(), t.device, rec.dtype, rec.shape,
                         rec.ptr))
                replaced.append(key)
            fresh.append((key, t, piece))
        for key in [k for k in self._recs if k not in want]:
            rec = self._recs.pop(key)
            if rec.piece is None or rec.view is None or rec.view.numel():
                self.client.unregister(*key)
        if fresh:
            self._place(fresh)
        self.replaced = replaced
        return replaced

    def _frozen(self, obj):
        """A parameter training does not change (CKPT_FROZEN)."""
        return self.frozen and isinstance(obj, torch.nn.Parameter) and \
            not obj.requires_grad

    def _register(self, group, name, obj, reg, piece):
        """Register reg as (group, name); the flag it got."""
        frozen = self._frozen(obj)
        args = (group, name, reg) if piece is None else \
            (group, name, reg, piece.global_shape, piece.offset,
             piece.replica_index, piece.replica_count)
        fn = self.client.register if piece is None else \
            self.client.register_global
        if frozen:
            try:
                fn(*args, frozen=True)
                return True
            except NotSupported:        # a ckptd without CKPT_FROZEN
                self.frozen = False
        fn(*args)
        return False

    def _place(self, fresh):
        need, seen, copies = [], set(), set()
        # a DTensor's local piece, taken once (to_local() may make a new
        # object each time; ids below must stay the same)
        fresh = [(key, obj, piece, _td.local_of(obj))
                 for key, obj, piece in fresh]
        for (group, name), obj, piece, t in fresh:
            if piece is not None and not self.client.has_global:
                raise NotSupported(
                    _errno.EOPNOTSUPP, "%s/%s: a %s run is saved as global tensors, which "
                    "this libckpt lacks (ckpt_register_global)" %
                    (group, name, "DTensor" if _td.is_dtensor(obj)
                     else "replicated"), "register_global")
            if _td.is_dtensor(obj):
                copies.add(id(t))
            if t.dtype not in TO_ST:
                raise TypeError("%s/%s: dtype %s cannot be checkpointed "
                                "(ckpt stores %s)" % (group, name, t.dtype,
                                                      ", ".join(
                                                          map(str, TO_ST))))
            if t.layout != torch.strided:
                raise TypeError("%s/%s: %s tensors cannot be checkpointed"
                                % (group, name, t.layout))
            if t.device.type == "cuda" and id(t) not in copies:
                if not t.is_contiguous():
                    raise ValueError("%s/%s: CUDA tensor is not contiguous; "
                                     "it is registered in place" %
                                     (group, name))
                continue
            if t.device.type not in ("cpu", "cuda"):
                raise TypeError("%s/%s: tensors on %s cannot be "
                                "checkpointed" % (group, name, t.device))
            if id(t) in seen:
                continue
            seen.add(id(t))
            if id(t) not in copies and t.is_contiguous() and \
                    self.client.owns(t.data_ptr(), _nbytes(t)):
                continue        # already in ckpt memory (a tied tensor)
            need.append(t)
        views = {}
        if need:
            offs, total = [], 0
            for t in need:
                offs.append(total)
                total += (max(_nbytes(t), 1) + ALIGN - 1) // ALIGN * ALIGN
            region = self.client.alloc(total)
            buf = region.buffer
            with torch.no_grad():
                for t, off in zip(need, offs):
                    view = _carve(buf, off, t.dtype, tuple(t.shape))
                    view.copy_(t.detach())
                    if id(t) not in copies:
                        t.data = view
                    views[id(t)] = view
            del buf
            region.free()       # unmapped once no tensor views it
        for (group, name), obj, piece, t in fresh:
            copy = id(t) in copies
            reg = views[id(t)] if copy else t
            frozen = self._frozen(obj)    # an empty piece: nothing to save
            try:
                if piece is None or reg.numel():
                    frozen = self._register(group, name, obj, reg, piece)
            except CkptError as e:
                if t.device.type == "cuda":
                    e.strerror = "%s/%s on %s: %s" % (group, name, t.device,
                                                      e.strerror)
                raise
            view = views.get(id(t))
            if view is None and t.device.type == "cpu":
                view = t.detach()       # keeps its ckpt memory mapped
            self._recs[(group, name)] = _Rec(obj, view, piece, copy, frozen)

    def registered(self):
        """{(group, name): tensor} as registered now."""
        return collections.OrderedDict((k, r.obj)
                                       for k, r in self._recs.items())

    # -- saving --

    def _check_open(self):
        if self._closed:
            raise ValueError("Checkpointer is closed")

    def _check_finite(self, step):
        for (group, name), rec in self._recs.items():
            t = _td.local_of(rec.obj).detach()
            if not (t.is_floating_point() or t.is_complex()):
                continue
            flat = t.reshape(-1)
            for i, chunk in enumerate(flat.split(1 << 20)):
                ok = torch.isfinite(chunk)
                if bool(ok.all()):
                    continue
                bad = int((~torch.isfinite(flat)).sum())
                first = int((~ok).nonzero()[0]) + i * (1 << 20)
                raise NonFiniteError(
                    "refusing to save step %d: %s/%s has %d non-finite "
                    "value(s) (first at flat index %d: %s)" %
                    (step, group, name, bad, first, float(flat[first])))

    def _check_finite_everywhere(self, step):
        """_check_finite on every rank: when torch.distributed runs the
        job, all refuse if one does (a rank that saved alone waited for
        the others until the step's deadline)."""
        try:
            self._check_finite(step)
            bad = None
        except NonFiniteError as e:
            bad = e
        world = self.client.world_size
        if _td.max_over_ranks([int(bad is not None)], world)[0] and \
                bad is None:
            raise NonFiniteError("refusing to save step %d: another rank "
                                 "holds non-finite values (its "
                                 "NonFiniteError says where)" % step)
        if bad is not None:
            raise bad

    def _optim_blob(self):
        opt = self.optimizer
        state = {}
        for i, p in enumerate(_opt_params(opt)):
            other = {k: v for k, v in opt.state.get(p, {}).items()
                     if not isinstance(v, torch.Tensor)}
            if other:
                state[i] = other
        return {"param_groups": [{k: v for k, v in g.items()
                                  if k != "params"}
                                 for g in opt.param_groups],
                "group_sizes": [len(g["params"])
                                for g in opt.param_groups],
                "param_names": self._param_names(),
                "state": state}

    def _param_names(self):
        """The model's name of each optimizer parameter, in order (None
        where it has none, or without a model)."""
        names = {}
        if self.model is not None:
            for n, p in _unwrapped(self.model).named_parameters():
                names.setdefault(id(p), n)
        return [names.get(id(p)) for p in _opt_params(self.optimizer)]

    def _blobs(self, step):
        out = {B_META: {"format": FORMAT, "version": FORMAT_VERSION,
                        "step": step, "torch": torch.__version__,
                        "rank": self.client.rank,
                        "world_size": self.client.world_size,
                        "model": self.model is not None,
                        "optimizer": self.optimizer is not None}}
        if self._model_extra:
            out[B_MODEL_EXTRA] = self._model_extra
        if self.optimizer is not None:
            out[B_OPTIM] = self._optim_blob()
        if self.scheduler is not None:
            out[B_SCHED] = self.scheduler.state_dict()
        if self.rng:
            out[B_RNG] = _rng_get(self.generators)
        if self.progress is not None:
            out[B_PROGRESS] = (dict(self.progress)
                               if isinstance(self.progress, dict)
                               else self.progress.state_dict())
        for name, obj in self.stateful.items():
            out[B_STATE + name] = obj.state_dict()
        return out

    def _put_blobs(self, step):
        for name, obj in self._blobs(step).items():
            try:
                data = encode_blob(obj)
            except Exception as e:
                raise TypeError("cannot serialise blob %s: %s" %
                                (name, e)) from e
            digest = hashlib.sha256(data).digest()
            if self._blob_cache.get(name) == digest:
                continue            # ckptd keeps the last one
            self.client.put_blob(name, data)
            self._blob_cache[name] = digest

    def _settle(self, phase="committed", timeout=None, poll=True):
        """Poll or wait (up to timeout seconds, None: for ever) for the
        outstanding saves; finished ones are forgotten, failed ones kept in
        self.failures until raised."""
        keep, tickets = [], self._tickets
        for i, t in enumerate(tickets):
            try:
                if poll:
                    if not t.done(phase):
                        keep.append(t)
                        continue
                else:
                    t.wait(phase, timeout)
                if phase != "committed":
                    keep.append(t)
            except SaveFailed as e:
                self.failures.append(e)
            except CkptError:         # a timeout, a lost connection
                self._tickets = keep + tickets[i:]
                raise
        self._tickets = keep

    def _raise_failures(self):
        if not self.failures:
            return
        e, rest = self.failures[0], self.failures[1:]
        self.failures = []
        if rest:
            e.strerror += " (and %d later save(s) failed too)" % len(rest)
        raise e

    def save(self, step, wait=_DEFAULT, timeout=None):
        """Checkpoint everything at step.  Returns the Ticket once the save
        reached `wait` (None: only accepted).  A failure of an earlier save
        is raised here (SaveFailed), as an asynchronous checkpointer's next
        save does.
        Host tensors (the default wait is "staged": the tensors may change
        again when it returns).  CUDA tensors where ckptd has a GPU: saved
        from torch.cuda.current_stream() without synchronising, returned
        at once (default wait None), the stream gated where gate= says;
        until then nothing may change the tensors (gate() first).  Where
        ckptd has no GPU: synchronise, save, wait for "staged" as for
        host tensors."""
        self._check_open()
        self._settle()
        self._raise_failures()
        self.gate()                 # earlier saves first: copies change
        self.sync()
        if self.check_finite:
            self._check_finite_everywhere(step)
        self._put_blobs(step)
        with torch.no_grad():
            for rec in self._recs.values():
                if rec.copy:
                    rec.view.copy_(_td.local_of(rec.obj))
        dev = self._stream_device()
        t = self._save_stream(step, dev) if dev is not None else None
        if t is None:
            if any(r.device.type == "cuda" for r in self._recs.values()):
                torch.cuda.synchronize()
            t = self.client.save(step)
            self._tickets.append(t)
            if wait is _DEFAULT:
                wait = "staged"
        elif wait is _DEFAULT:
            wait = None
        if wait:
            t.wait(wait, timeout)
        return t

    # -- stream saves (CUDA) --

    def _stream_device(self):
        """The CUDA device to save from with a stream, or None (host
        tensors only, several devices, or ckptd without a GPU).  Tests
        replace it."""
        if not self._streams or not self.client.has_stream_saves:
            return None
        devs = {r.device for r in self._recs.values()
                if r.device.type == "cuda" and r.view is None}
        return devs.pop() if len(devs) == 1 else None

    def _current_stream(self, device):
        """The stream the trainer queues work on now.  Tests replace it."""
        return torch.cuda.current_stream(device)

    def _host_tensors(self):
        """Whether the save holds host memory the CPU changes (CPU
        tensors, copies of DTensor pieces).  Tests replace it."""
        return any(r.view is not None and r.view.numel()
                   for r in self._recs.values())

    def _gate_where(self):
        mode = self.gate_mode
        if mode == "auto":
            if self.model is not None and _tracks_running_stats(self.model):
                mode = "forward"
            else:
                mode = "step"
        if mode == "step" and self.optimizer is None:
            mode = "now"
        if mode == "forward" and self.model is None:
            mode = "now"
        return mode

    def _save_stream(self, step, dev):
        """A stream save on the current stream of dev; None if ckptd has
        no GPU (nothing was saved: the caller saves the other way)."""
        where = self._gate_where()
        host = self._host_tensors()
        if host and self.optimizer is None:
            return None     # no place to hold the CPU: save the old way
        if (where != "now" or host) and not self._arm(where):
            if host:
                return None
            where = "now"
        try:
            t = self.client.save_stream(step, self._current_stream(dev),
                                        gate=where == "now")
        except NotSupported:
            self._streams = False
            return None
        self._tickets.append(t)
        self._gate_dev = dev
        if where != "now":
            self._ungated.append(t)
        if host:
            self._host_pending.append(t)
        return t

    def _arm(self, where):
        """Register the hooks that gate (once; they do nothing while no
        save is outstanding).  False if this PyTorch cannot."""
        if self._hooks:
            return True
        try:
            if self.optimizer is not None:
                self._hooks.append(self.optimizer.register_step_pre_hook(
                    lambda opt, args, kwargs: self._before_step()))
            if where == "forward":
                self._hooks.append(self.model.register_forward_pre_hook(
                    lambda mod, args: self._gate_streams()))
        except AttributeError:          # PyTorch 1: no step pre-hooks
            self._disarm()
            return False
        return True

    def _disarm(self):
        for h in self._hooks:
            h.remove()
        self._hooks = []

    def _before_step(self):
        if self._ungated or self._host_pending:
            self.gate()

    def _gate_streams(self):
        """The current stream waits (on the GPU) for every save not gated
        yet.  A save that failed needs no gate (its failure is raised by
        the next save()); one whose stream cannot wait is waited for
        here, on the CPU."""
        pending, self._ungated = self._ungated, []
        if not pending:
            return
        stream = self._current_stream(self._gate_dev)
        for t in pending:
            try:
                self.client.gate_stream(t, stream)
            except SaveFailed:
                pass
            except CkptError:
                try:
                    t.wait("staged")
                except SaveFailed:
                    pass

    def gate(self):
        """Before changing saved tensors in place anywhere but in
        optimizer.step() (which is gated for you): make the current stream
        wait, on the GPU, until the outstanding saves are STAGED (the CPU
        does not block), and, if the saves hold host tensors, wait for
        that on the CPU.  A no-op without outstanding stream saves."""
        self._gate_streams()
        pending, self._host_pending = self._host_pending, []
        for t in pending:
            try:
                t.wait("staged")
            except SaveFailed:
                pass

    def wait(self, phase="committed", timeout=None):
        """Wait until every outstanding save reached phase; raises the
        first failure (SaveFailed) not raised yet."""
        self._settle(phase, timeout, poll=False)
        self._raise_failures()

    # -- restoring --

    def restore(self, step="latest", partial=False):
        """Restore the newest checkpoint that verifies (or step) into the
        model, optimizer, scheduler, RNG streams and progress.  Returns a
        ckpt.RestoreResult, or None if the job has no checkpoint (a fresh
        start); raises ckpt.CheckpointDamaged when it has checkpoints but
        none verifies (never a fresh start over them).  Strict by default: anything missing on either side raises
        RestoreMismatch; partial=True restores what matches and lists the
        rest in result.missing / .unexpected / .missing_blobs."""
        self._check_open()
        self._settle(poll=False)    # "latest" includes our own last save
        self._ungated, self._host_pending = [], []    # all committed
        self.sync()
        # ckptd writes CUDA tensors from its own streams: the trainer's
        # work on them must be done first (ckpt.h, ckpt_restore)
        if any(r.device.type == "cuda" for r in self._recs.values()):
            torch.cuda.synchronize()
        if any(r.piece is not None for r in self._recs.values()):
            from . import torch_restore
            return torch_restore.through_daemon(self, step, partial)
        try:
            res = self.client.restore(step, partial)
        except NoCheckpoint:
            if step in (None, "latest"):
                return None
            raise
        self._apply_blobs(self._read_blobs(self.client.get_blob, res,
                                           partial), res, partial)
        return res

    def _read_blobs(self, get_blob, res, partial):
        """Fetch (get_blob(name): bytes or None) and decode the blobs this
        Checkpointer restores; changes nothing."""
        missing = res.missing_blobs
        blobs = {}
        want = [B_META]
        if self._model_extra:
            want.append(B_MODEL_EXTRA)
        if self.optimizer is not None:
            want.append(B_OPTIM)
        if self.scheduler is not None:
            want.append(B_SCHED)
        if self.rng:
            want.append(B_RNG)
        if self.progress is not None:
            want.append(B_PROGRESS)
        want += [B_STATE + n for n in self.stateful]
        for name in want:
            data = get_blob(name)
            if data is None:
                missing.append(name)
                continue
            blobs[name] = decode_blob(data, allow_pickle=True, what=name)
        if missing and not partial:
            raise RestoreMismatch(_errno.EINVAL, "iter_%09d has no %s "
                                  "(partial=True restores without them)" %
                                  (res.step, ", ".join(missing)), "restore")
        meta = blobs.get(B_META)
        if meta is not None and meta.get("format") != FORMAT:
            raise RestoreMismatch(_errno.EINVAL, "iter_%09d was not written "
                                  "by ckpt.torch" % res.step, "restore")
        return blobs

    def _apply_blobs(self, blobs, res, partial):
        """Apply read blobs: model extra state, optimizer, scheduler, RNG,
        progress, stateful."""
        missing = res.missing_blobs
        if B_MODEL_EXTRA in blobs:
            # only the extra-state keys: the tensors are already in place
            _unwrapped(self.model).load_state_dict(blobs[B_MODEL_EXTRA],
                                                   strict=False)
        if B_OPTIM in blobs:
            self._restore_optim(blobs[B_OPTIM], res.step, partial, missing)
        if B_SCHED in blobs:
            self.scheduler.load_state_dict(blobs[B_SCHED])
        if B_RNG in blobs:
            _rng_restore(blobs[B_RNG], self.generators, partial, missing)
        if B_PROGRESS in blobs:
            if isinstance(self.progress, dict):
                self.progress.clear()
                self.progress.update(blobs[B_PROGRESS])
            else:
                self.progress.load_state_dict(blobs[B_PROGRESS])
        for name, obj in self.stateful.items():
            if B_STATE + name in blobs:
                obj.load_state_dict(blobs[B_STATE + name])
        self._blob_cache.clear()

    def _restore_optim(self, saved, step, partial, missing):
        opt = self.optimizer
        sizes = [len(g["params"]) for g in opt.param_groups]
        if saved["group_sizes"] != sizes:
            if not partial:
                raise RestoreMismatch(_errno.EINVAL, "iter_%09d: optimizer "
                                      "parameter groups have %s parameters, "
                                      "this optimizer %s" %
                                      (step, saved["group_sizes"], sizes),
                                      "restore")
            missing.append(B_OPTIM + ":group_sizes")
        for g, s in zip(opt.param_groups, saved["param_groups"]):
            g.update(s)
        params = list(_opt_params(opt))
        for i, st in saved["state"].items():
            if int(i) < len(params):
                opt.state[params[int(i)]].update(st)
        # optimizer state is saved by position: where a position now holds
        # another parameter (a partial restore into a changed model), what
        # was restored there belongs to another parameter; drop it
        saved_names = saved.get("param_names")
        if saved_names is None:
            return
        for i, (was, now) in enumerate(zip(saved_names, self._param_names())):
            if was != now and params[i] in opt.state:
                if not partial:
                    raise RestoreMismatch(
                        _errno.EINVAL, "iter_%09d: optimizer parameter %d "
                        "was %s, is %s now (partial=True drops its state)" %
                        (step, i, was, now), "restore")
                del opt.state[params[i]]
                missing.append("%s:state.%d (saved for %s, now %s)" %
                               (B_OPTIM, i, was, now))

    # -- lifecycle --

    def _detach(self):
        """Move every tensor back to ordinary memory (copies)."""
        with torch.no_grad():
            for rec in self._recs.values():
                t = rec.obj
                if rec.view is not None and not rec.copy and \
                        t.data_ptr() == rec.ptr:
                    t.data = t.data.clone()
                rec.view = None
        self._recs.clear()

    def close(self, wait="committed", timeout=None):
        """Wait for outstanding saves (wait=None: don't; ckptd completes
        staged saves anyway), move the tensors back to ordinary memory and
        close the client if this Checkpointer made it.  Raises a failure of
        an outstanding save after closing."""
        if self._closed:
            return
        err = None
        if wait:
            try:
                self.wait(wait, timeout)
            except CkptError as e:
                err = e
        self._closed = True
        self._disarm()
        self._ungated, self._host_pending = [], []
        self._detach()
        self._tickets = []
        if self._own:
            self.client.close()
        if err is not None:
            raise err

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        self.close(wait="committed" if exc_type is None else None)


# --- reading checkpoints offline ------------------------------------------

MANIFEST = "checkpoint_manifest.json"
_ITER_RE = re.compile(r"iter_[0-9]{9}")


def checkpoint_dir(path):
    """The checkpoint directory for path: path itself if it holds a
    manifest, else the one its latest_checkpoint.txt names (a job dir)."""
    if os.path.isfile(os.path.join(path, MANIFEST)):
        return path
    latest = os.path.join(path, "latest_checkpoint.txt")
    if os.path.isfile(latest):
        with open(latest) as f:
            name = f.read().strip()
        if not _ITER_RE.fullmatch(name):
            raise ValueError("%s names %r, not iter_NNNNNNNNN" %
                             (latest, name))
        return os.path.join(path, name)
    raise FileNotFoundError("%s is neither a checkpoint (no %s) nor a job "
                            "directory (no latest_checkpoint.txt)" %
                            (path, MANIFEST))


def read_manifest(path):
    """The parsed checkpoint_manifest.json of a committed checkpoint."""
    d = checkpoint_dir(path)
    with open(os.path.join(d, MANIFEST), "rb") as f:
        m = json.loads(f.read().decode("utf-8"))
    if m.get("format") != "ckpt-manifest":
        raise ValueError("%s: not a ckpt manifest" % d)
    if not isinstance(m.get("format_version"), int) or \
            m["format_version"] > 4:
        raise ValueError("%s: manifest format_version %r is newer than this "
                         "reader" % (d, m.get("format_version")))
    if m.get("status") != "committed":
        raise ValueError("%s: checkpoint status is %r, not committed" %
                         (d, m.get("status")))
    m["_dir"] = d
    return m


class _XXH128(ctypes.Structure):
    _fields_ = [("low64", ctypes.c_uint64), ("high64", ctypes.c_uint64)]


_xxh_lib = None


def _xxh3_128_hex(data):
    """XXH3-128 of data in its canonical hex (what ckptd writes): Python's
    xxhash when it is installed, else libxxhash (ckptd's own dependency)."""
    global _xxh_lib
    try:
        import xxhash
        return xxhash.xxh3_128_hexdigest(data)
    except ImportError:
        pass
    if _xxh_lib is None:
        lib = ctypes.CDLL(ctypes.util.find_library("xxhash") or
                          "libxxhash.so.0")
        lib.XXH3_128bits.restype = _XXH128
        lib.XXH3_128bits.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        _xxh_lib = lib
    n = len(data)
    if n and isinstance(data, bytes):
        h = _xxh_lib.XXH3_128bits(data, n)
    else:
        buf = (ctypes.c_char * n).from_buffer(data) if n else None
        h = _xxh_lib.XXH3_128bits(buf, n)
        del buf            # a live export would keep an mmap from closing
    return "%016x%016x" % (h.high64, h.low64)


# A file's digest by its manifest key: each entry has one of them (format
# 3: "xxh3_128" or "sha256"; formats 1 and 2: "sha256").
DIGESTS = {
    "sha256": lambda data: hashlib.sha256(data).hexdigest(),
    "xxh3_128": _xxh3_128_hex,
}


def file_digest(entry, data):
    """(key, expected, got): the digest the manifest entry names, and that
    of data.  ValueError when the entry names none this reader knows."""
    keys = [k for k in DIGESTS if k in entry]
    if len(keys) != 1:
        raise ValueError("%s: the manifest entry has %s digest (one of %s "
                         "expected)" % (entry.get("path"),
                                        "more than one" if keys else "no",
                                        ", ".join(DIGESTS)))
    k = keys[0]
    return k, entry[k], DIGESTS[k](data)


def _read_file(m, rel, verify):
    """The file's bytes as a private copy-on-write mapping (pages come from
    the page cache as tensors are read), checked against the manifest."""
    entry = next((f for f in m["files"] if f["path"] == rel), None)
    if entry is None:
        have = sorted(f["path"] for f in m["files"])
        raise KeyError("%s has no %s (files: %s)" % (m["_dir"], rel,
                                                     ", ".join(have)))
    path = os.path.join(m["_dir"], *rel.split("/"))
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size != entry["size"]:
            raise ValueError("%s is %d bytes; the manifest says %d" %
                             (path, size, entry["size"]))
        data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY) \
            if size else bytearray()
    if verify:
        key, want, got = file_digest(entry, data)
        if got != want:
            raise ValueError("%s: %s %s does not match the manifest's "
                             "%s" % (path, key, got, want))
    return data


def load_safetensors(data, what="safetensors"):
    """{name: tensor} from the bytes of a safetensors file: zero-copy views
    of data (a bytearray or mmap; other bytes are copied) where aligned."""
    if not isinstance(data, (bytearray, mmap.mmap)):
        data = bytearray(data)
    if len(data) < 8:
        raise ValueError("%s: too short" % what)
    (n,) = struct.unpack_from("<Q", data, 0)
    if n > len(data) - 8:
        raise ValueError("%s: header length %d exceeds the file" % (what, n))
    header = json.loads(bytes(data[8:8 + n]).decode("utf-8"))
    base = 8 + n
    room = len(data) - base
    addr = torch.frombuffer(data, dtype=torch.uint8).data_ptr() \
        if len(data) else 0
    out = collections.OrderedDict()
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dt = FROM_ST.get(info["dtype"])
        if dt is None:
            raise ValueError("%s: %s has dtype %s" % (what, name,
                                                      info["dtype"]))
        shape = tuple(int(d) for d in info["shape"])
        b, e = (int(x) for x in info["data_offsets"])
        numel = 1
        for d in shape:
            numel *= d
        esize = torch.empty((), dtype=dt).element_size()
        if not (0 <= b <= e <= room) or e - b != numel * esize:
            raise ValueError("%s: %s has bad data_offsets [%d, %d]" %
                             (what, name, b, e))
        if numel == 0:
            out[name] = torch.empty(shape, dtype=dt)
            continue
        t = torch.frombuffer(data, dtype=torch.uint8, count=e - b,
                             offset=base + b)
        if (addr + base + b) % esize:
            t = t.clone()
        out[name] = t.view(dt).reshape(shape)
    return out


def load_state_dict(path, group=MODEL, rank=0, verify=True):
    """A state_dict (OrderedDict name -> CPU tensor) of one group of one
    rank of a committed checkpoint, read offline: path is an iter_NNNNNNNNN
    directory or a job directory (its latest checkpoint).  In the order
    they were registered, the group's frozen tensors (CKPT_FROZEN: frozen
    parameters) after the others.  Files are checked
    against the manifest's sizes and digests (SHA-256 or XXH3-128, as it
    names them) unless verify=False.

        model.load_state_dict(ckpt.torch.load_state_dict(path))"""
    m = read_manifest(path)
    rel = "%s/rank_%05d.safetensors" % (group, rank)
    # the group's shard and its frozen shard (format 4), those it has
    rels = [r for r in (rel, rel[:-len(".safetensors")] + ".frozen.safetensors")
            if any(f["path"] == r for f in m["files"])] or [rel]
    tensors = {}
    for r in rels:
        tensors.update(load_safetensors(_read_file(m, r, verify),
                                        os.path.join(m["_dir"], r)))
    listed = [t for t in m.get("tensors", [])
              if t.get("group") == group and t.get("rank") == rank]
    for t in listed:       # the files' headers say what the manifest says
        got = tensors.get(t["name"])
        if got is None or TO_ST.get(got.dtype) != t["dtype"] or \
                list(got.shape) != list(t["shape"]):
            raise ValueError("%s: %s/%s is %s in the manifest, %s in its file" % (
                m["_dir"], group, t["name"], "%s %s" % (t["dtype"], t["shape"]),
                "absent" if got is None else "%s %s" % (TO_ST.get(got.dtype),
                                                        list(got.shape))))
    order = [t["name"] for t in listed]
    out = collections.OrderedDict()
    for name in order:
        if name in tensors:
            out[name] = tensors[name]
    for name, t in tensors.items():
        out.setdefault(name, t)
    return out


def load_blob(path, name, rank=0, verify=True, allow_pickle=False,
              raw=False):
    """A blob of a committed checkpoint, decoded (raw=True: its bytes).
    Pickled blobs are refused unless allow_pickle=True (trusted files)."""
    m = read_manifest(path)
    data = _read_file(m, "extra/rank_%05d/%s" % (rank, name), verify)
    data = bytes(data)
    return data if raw else decode_blob(data, allow_pickle, name)


def load_optimizer_state_dict(path, rank=0, verify=True, allow_pickle=False):
    """The optimizer.state_dict() saved by ckpt.torch, offline: feed it to
    optimizer.load_state_dict()."""
    saved = load_blob(path, B_OPTIM, rank, verify, allow_pickle)
    tensors = load_state_dict(path, OPTIM, rank, verify)
    state = {}
    for key, t in tensors.items():
        m = re.fullmatch(r"state\.([0-9]+)\.(.+)", key)
        if m:
            state.setdefault(int(m.group(1)), {})[m.group(2)] = t
    for i, st in saved["state"].items():
        state.setdefault(int(i), {}).update(st)
    groups, start = [], 0
    for g, n in zip(saved["param_groups"], saved["group_sizes"]):
        g = dict(g)
        g["params"] = list(range(start, start + n))
        start += n
        groups.append(g)
    return {"state": state, "param_groups": groups}
