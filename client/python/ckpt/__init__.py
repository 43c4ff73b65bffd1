"""ckpt - checkpoint through the node's ckptd from Python.

A thin, Pythonic layer over libckpt (ctypes; no compiled extension):

    with ckpt.Client("myjob", rank=0, world_size=1) as c:
        region = c.alloc(1 << 20)                  # shared with ckptd
        w = numpy.frombuffer(region.buffer, numpy.float32, 1024)
        c.register("model", "w", w)
        c.put_blob("progress", b"...")
        t = c.save(step=100)                       # returns when accepted
        t.wait("staged")                           # now w may change again
        t.wait("committed", timeout=60)
        r = c.restore()                            # newest that verifies

Every failure is raised as a CkptError (an OSError: .errno, and .strerror
holding the daemon's or the library's explanation).  PyTorch trainers use
ckpt.torch, which does all of this for a model, optimizer, scheduler, RNG
streams and training progress.

libckpt is looked up in $CKPT_LIB, then the source tree's ./libckpt.so,
then the installed libckpt.so.0 -- only when a Client is created, so the
offline reader ckpt.torch.load_state_dict() works without it.
"""
import ctypes
import errno as _errno
import threading
import warnings
import weakref

from . import _lib as _L

__all__ = [
    "Client", "Region", "Ticket", "RestoreResult",
    "CkptError", "ConnectError", "ConnectionLost", "InvalidArgument",
    "NotFound", "NoCheckpoint", "CheckpointDamaged", "RestoreMismatch",
    "SaveFailed", "Timeout",
    "NotSupported", "PermissionDenied", "DeviceError", "DeviceSaveFailed",
    "DTYPES", "PHASES",
    "has_global_tensors",
]
__version__ = "0.1.0"

DTYPES = _L.DTYPES
PHASES = tuple(_L.PHASES)

_lib = None
_lib_path = None
_lib_lock = threading.Lock()


def _get_lib():
    global _lib, _lib_path
    with _lib_lock:
        if _lib is None:
            _lib, _lib_path = _L.load()
        return _lib


def has_global_tensors():
    """Whether the loaded libckpt has global tensors (ckpt_register_global,
    issue 13); ckptd must have them too."""
    return hasattr(_get_lib(), "ckpt_register_global")


def library_path():
    """The path of the libckpt that was (or would be) loaded."""
    _get_lib()
    return _lib_path


# --- errors ---------------------------------------------------------------

class CkptError(OSError):
    """A libckpt call failed.  .errno is the error number, .strerror the
    daemon's (or the library's) explanation, .op the call that failed."""

    def __init__(self, err, message, op=None):
        super().__init__(err, message)
        self.op = op

    def __str__(self):
        name = _errno.errorcode.get(self.errno, str(self.errno))
        return "%s [%s]" % (self.strerror, name)

    def __reduce__(self):
        return (type(self), (self.errno, self.strerror, self.op))


class ConnectError(CkptError, ConnectionError):
    """Could not connect to ckptd (not running, wrong socket, refused)."""


class ConnectionLost(CkptError, ConnectionError):
    """The connection to ckptd broke; make a new Client."""


class InvalidArgument(CkptError, ValueError):
    """A bad name, dtype, shape, pointer, step or flag (EINVAL)."""


class NotFound(CkptError, FileNotFoundError):
    """No such checkpoint, ticket, blob or name (ENOENT)."""


class NoCheckpoint(NotFound):
    """restore(): no checkpoint of the job (or not the asked step) verifies."""


class CheckpointDamaged(CkptError):
    """The job has checkpoints, but none verifies (EUCLEAN): a trainer must
    not start from scratch over them; the message names each and why."""


class RestoreMismatch(CkptError):
    """Strict restore: the checkpoint's tensors (or state) differ from what
    is registered; nothing was written into the registered tensors."""


class SaveFailed(CkptError):
    """A save failed after it was accepted (I/O error, no space, another
    rank failed, deadline missed).  The previous checkpoint stays latest."""

    step = None


class Timeout(CkptError, TimeoutError):
    """Ticket.wait(): the timeout passed before the phase was reached."""


class NotSupported(CkptError):
    """Not supported here, e.g. CUDA memory without a GPU-enabled ckptd."""


class PermissionDenied(CkptError, PermissionError):
    """The job belongs to another user, or the object store refused the
    request (EACCES: wrong credentials, a bucket policy)."""


class DeviceError(CkptError):
    """The GPU or its driver failed (ENXIO); .strerror has the CUDA error.
    Not a missing checkpoint nor bad input: the device needs attention."""


class DeviceSaveFailed(SaveFailed, DeviceError):
    """A save failed after it was accepted because the GPU or its driver
    failed: both a SaveFailed and a DeviceError."""


_BY_ERRNO = {
    _errno.EINVAL: InvalidArgument,
    _errno.ENOENT: NotFound,
    _errno.EUCLEAN: CheckpointDamaged,
    _errno.EAGAIN: Timeout,
    _errno.ECONNRESET: ConnectionLost,
    _errno.EPIPE: ConnectionLost,
    _errno.ENOTCONN: ConnectionLost,
    _errno.EOPNOTSUPP: NotSupported,
    _errno.EPERM: PermissionDenied,
    _errno.EACCES: PermissionDenied,
    _errno.ENXIO: DeviceError,
}


def _text(b):
    return b.decode("utf-8", "replace") if b else ""


def _make_error(err, message, op, cls=None):
    err = -err if err < 0 else err
    if not message:
        message = _text(_get_lib().ckpt_strerror(-err))
    if cls is None:
        cls = _BY_ERRNO.get(err, CkptError)
    return cls(err, message, op)


def _name(s, what):
    if not isinstance(s, str):
        raise TypeError("%s must be a str, not %s" % (what,
                                                      type(s).__name__))
    if "\0" in s:
        # C would end the name there: another tensor's or blob's name
        raise InvalidArgument(_errno.EINVAL, "%s %r contains a NUL "
                              "character" % (what, s), "name")
    return s.encode("utf-8")


def _step(step, op):
    """step as an int in 0..MAX_STEP (ctypes would wrap a larger one)."""
    step = int(step)
    if not 0 <= step <= _L.MAX_STEP:
        raise InvalidArgument(_errno.EINVAL, "step %d is out of range (0 to "
                              "%d)" % (step, _L.MAX_STEP), op)
    return step


# --- dtypes ---------------------------------------------------------------

_DTYPE_ALIASES = {
    "float64": "F64", "double": "F64", "f8": "F64",
    "float32": "F32", "float": "F32", "f4": "F32",
    "float16": "F16", "half": "F16", "f2": "F16",
    "bfloat16": "BF16",
    "int64": "I64", "long": "I64", "i8": "I64",
    "int32": "I32", "int": "I32", "i4": "I32",
    "int16": "I16", "short": "I16", "i2": "I16",
    "int8": "I8", "i1": "I8",
    "uint8": "U8", "u1": "U8",
    "bool": "BOOL", "b1": "BOOL",
}


def dtype_name(dtype):
    """The safetensors dtype name ("F32", ...) of a str, numpy dtype or
    torch dtype; ValueError if ckpt cannot store it."""
    s = str(dtype)
    if s.startswith("torch."):
        s = s[len("torch."):]
    if s.upper() in _L.DTYPE_CODE:
        return s.upper()
    key = s.lstrip("<>=|").lower()
    if key in _DTYPE_ALIASES:
        return _DTYPE_ALIASES[key]
    raise InvalidArgument(_errno.EINVAL, "dtype %s cannot be checkpointed "
                          "(ckpt stores %s)" % (s, " ".join(DTYPES)),
                          "register")


def _same_bytes(nbytes, dt, shape):
    """dtype= and shape= may view a tensor's bytes another way, not more or
    fewer of them: ckptd would save and restore the memory next to it."""
    want = _L.DTYPE_SIZE[dt]
    for d in shape:
        want *= d
    if want != nbytes or any(d < 0 for d in shape):
        raise InvalidArgument(_errno.EINVAL, "%s %s is %d bytes, but the "
                              "tensor has %d" % (dt, list(shape), want,
                                                 nbytes), "register")


def _describe(data, dtype, shape):
    """(address, dtype name, shape tuple) of what register() was given."""
    if isinstance(data, int):
        if dtype is None or shape is None:
            raise TypeError("register(address) needs dtype= and shape=")
        return data, dtype_name(dtype), tuple(int(d) for d in shape)
    if hasattr(data, "data_ptr") and hasattr(data, "is_contiguous"):
        if not data.is_contiguous():
            raise InvalidArgument(_errno.EINVAL, "tensor is not contiguous",
                                  "register")
        dt = dtype_name(data.dtype if dtype is None else dtype)
        shp = tuple(int(d) for d in (data.shape if shape is None else shape))
        _same_bytes(data.numel() * data.element_size(), dt, shp)
        return data.data_ptr(), dt, shp
    ai = getattr(data, "__array_interface__", None)
    if ai is not None:
        if ai.get("strides") is not None and \
                not data.flags["C_CONTIGUOUS"]:
            raise InvalidArgument(_errno.EINVAL, "array is not "
                                  "C-contiguous", "register")
        dt = dtype_name(data.dtype if dtype is None else dtype)
        shp = tuple(int(d) for d in (ai["shape"] if shape is None
                                     else shape))
        _same_bytes(data.nbytes, dt, shp)
        return ai["data"][0], dt, shp
    raise TypeError("register() takes a torch tensor, a numpy array or an "
                    "address (int) with dtype= and shape=, not %s"
                    % type(data).__name__)


# --- the handle shared with finalizers ------------------------------------

class _Handle:
    """The C handle plus what outlives a Client object: the memory.

    ckpt_alloc() memory is unmapped by ckpt_free()/ckpt_close(), and a numpy
    array or torch tensor still viewing it would then crash the process.
    So memory is given back only once nothing views it: every region's
    ctypes buffer carries a finalizer, Region.free() and Client.close() only
    drop our own reference, and the C calls happen when the last view dies
    (frees at the next call; a deferred close at once)."""

    def __init__(self, lib, ptr):
        self.lib = lib
        self.ptr = ptr
        self.lock = threading.RLock()
        self.bufs = {}          # address -> buffer, not yet freed
        self.live = {}          # address -> finalizer, buffer alive
        self.sizes = {}         # address -> size, buffer alive
        self.dead = []          # addresses to ckpt_free()
        self.closed = False     # by the user; C handle may still be open
        self.gone = False       # ckpt_close() done

    def add_region(self, addr, size):
        buf = (ctypes.c_char * size).from_address(addr)
        fin = weakref.finalize(buf, _Handle._buf_died, self, addr)
        fin.atexit = False
        self.bufs[addr] = buf
        self.live[addr] = fin
        self.sizes[addr] = size
        return buf

    def _buf_died(self, addr):
        with self.lock:
            self.live.pop(addr, None)
            self.sizes.pop(addr, None)
            if self.gone:
                return
            if self.closed:
                if not self.live:
                    self._close_now()
            else:
                self.dead.append(addr)

    def reap(self):
        """ckpt_free() the regions nothing views any more."""
        while self.dead and not self.gone:
            addr = self.dead.pop()
            r = self.lib.ckpt_free(self.ptr, addr)
            if r < 0:
                warnings.warn("ckpt: cannot free a region: %s" %
                              _text(self.lib.ckpt_last_error(self.ptr)),
                              ResourceWarning, stacklevel=3)

    def close(self):
        with self.lock:
            if self.closed:
                return
            self.closed = True
            bufs, self.bufs = self.bufs, {}
            del bufs            # buffers with no views die here
            if not self.live:
                self._close_now()
                return
        warnings.warn("ckpt: Client closed while %d region(s) are still "
                      "viewed by arrays or tensors; the connection and the "
                      "memory are released when the last view goes"
                      % len(self.live), ResourceWarning, stacklevel=3)

    def _close_now(self):
        if self.gone:
            return
        self.gone = True
        for fin in list(self.live.values()):
            fin.detach()
        self.live.clear()
        self.sizes.clear()
        self.dead.clear()
        self.lib.ckpt_close(self.ptr)


# --- public classes -------------------------------------------------------

class Region:
    """Memory from Client.alloc(): page aligned, zero-filled, shared with
    ckptd (a sealed memfd).  .buffer is a writable ctypes char array to make
    numpy arrays (numpy.frombuffer) or torch tensors (torch.frombuffer) from;
    .address and .size describe it."""

    __slots__ = ("_client", "address", "size", "__weakref__")

    def __init__(self, client, address, size):
        self._client = client
        self.address = address
        self.size = size

    @property
    def buffer(self):
        h = self._client._h
        buf = h.bufs.get(self.address) if h is not None else None
        if buf is None:
            raise ValueError("region was freed or its client closed")
        return buf

    def contains(self, address, nbytes=0):
        return self.address <= address and \
            address + nbytes <= self.address + self.size

    def free(self):
        """Give the memory back once nothing views it: arrays and tensors
        made from .buffer stay valid.  When the last one goes, the region
        is unmapped and its tensors are unregistered."""
        self._client._free(self)

    def __repr__(self):
        return "<ckpt.Region 0x%x size %d>" % (self.address, self.size)


class RestoreResult:
    """What restore() did: .step restored; .source ("disk", "memory"; later
    "peer", "remote"), .bytes delivered and .micros ckptd took; for a
    partial restore .missing (registered, not in the checkpoint) and
    .unexpected (in the checkpoint, not registered), as "group/name";
    .skipped: newer checkpoints passed over as (step, reason); .report: a
    one-line text of all that ("" when there is nothing to say)."""

    def __init__(self, step, partial, source="disk", nbytes=0, micros=0,
                 missing=(), unexpected=(), skipped=()):
        self.step = step
        self.partial = partial
        self.source = source
        self.bytes = nbytes
        self.micros = micros
        self.missing = list(missing)
        self.unexpected = list(unexpected)
        self.skipped = list(skipped)
        self.missing_blobs = []     # filled in by ckpt.torch

    @property
    def complete(self):
        return not (self.missing or self.unexpected or self.missing_blobs)

    @property
    def report(self):
        parts = []
        if self.missing or self.unexpected:
            lists = []
            if self.missing:
                lists.append("missing " + ", ".join(self.missing))
            if self.unexpected:
                lists.append("unexpected " + ", ".join(self.unexpected))
            parts.append("partial restore: " + "; ".join(lists))
        parts += ["skipped step %d: %s" % s for s in self.skipped]
        return "; ".join(parts)

    def __repr__(self):
        return ("<ckpt.RestoreResult step %d%s>" %
                (self.step, "" if self.complete else
                 " partial: missing %s, unexpected %s" %
                 (self.missing + self.missing_blobs, self.unexpected)))


class Ticket:
    """One save.  wait(phase, timeout) blocks until the save is "staged"
    (the tensors may change again), "replicated" (in RAM on this node and
    its partner nodes: memory_replicas), "durable" (this rank's files are on
    disk) or "committed" (the checkpoint is published), and raises
    SaveFailed if it failed, Timeout if the timeout passed first."""

    __slots__ = ("_client", "id", "step", "__weakref__")

    def __init__(self, client, tid, step):
        self._client = client
        self.id = tid
        self.step = step

    def wait(self, phase="committed", timeout=None):
        if phase not in _L.PHASES:
            raise ValueError("phase must be one of %s, not %r" %
                             (", ".join(_L.PHASES), phase))
        if timeout is None:
            ms = -1
        else:
            ms = max(0, min(int(timeout * 1000 + 0.999), 2**31 - 1))
        self._client._wait(self, _L.PHASES[phase], ms)
        return self

    def done(self, phase="committed"):
        """True once phase is reached, False before; raises if it failed."""
        try:
            self.wait(phase, timeout=0)
        except Timeout:
            return False
        return True

    @property
    def times(self):
        """{"staged", "durable", "committed"} in seconds since the save was
        accepted (None if not reached yet) and "bytes"."""
        t = self._client._times(self)
        f = lambda us: us / 1e6 if us else None   # noqa: E731
        return {"staged": f(t.staged_us), "durable": f(t.durable_us),
                "committed": f(t.committed_us), "bytes": t.bytes}

    def __repr__(self):
        return "<ckpt.Ticket %d step %d>" % (self.id, self.step)


class Client:
    """A connection to the node's ckptd for one rank of a job.

    socket None means $CKPT_SOCKET, else /run/ckpt/ckptd.sock.  Use as a
    context manager, or call close().  One thread at a time uses the C
    handle; calls from several threads are serialised here."""

    def __init__(self, job, rank=0, world_size=1, socket=None):
        lib = _get_lib()
        self.job, self.rank, self.world_size = job, rank, world_size
        self._h = None
        ptr = ctypes.c_void_p()
        r = lib.ckpt_connect(_name(socket, "socket") if socket else None,
                             _name(job, "job"), int(rank), int(world_size),
                             ctypes.byref(ptr))
        if r < 0:
            raise _make_error(r, _text(lib.ckpt_last_error(None)),
                              "connect",
                              InvalidArgument if r == -_errno.EINVAL
                              else ConnectError)
        self._h = _Handle(lib, ptr)

    # -- plumbing --

    def _enter(self):
        h = self._h
        if h is None or h.closed:
            raise ValueError("ckpt.Client is closed")
        return h

    def _call(self, op, fname, *args, cls=None):
        h = self._enter()
        with h.lock:
            h.reap()
            r = getattr(h.lib, fname)(h.ptr, *args)
            if r < 0:
                raise _make_error(r, _text(h.lib.ckpt_last_error(h.ptr)),
                                  op, cls)
            return r

    @property
    def closed(self):
        return self._h is None or self._h.closed

    @property
    def last_error(self):
        """libckpt's message for the last failed call ("" if none)."""
        h = self._h
        if h is None or h.gone:
            return ""
        with h.lock:
            return _text(h.lib.ckpt_last_error(h.ptr))

    # -- memory and tensors --

    def alloc(self, nbytes):
        """A new Region of at least nbytes shared with ckptd."""
        nbytes = int(nbytes)
        if nbytes <= 0:
            raise ValueError("alloc: nbytes must be positive")
        h = self._enter()
        with h.lock:
            h.reap()
            addr = h.lib.ckpt_alloc(h.ptr, nbytes)
            if not addr:
                msg = _text(h.lib.ckpt_last_error(h.ptr))
                raise CkptError(_errno.ENOMEM, msg or "ckpt_alloc failed",
                                "alloc")
            h.add_region(addr, nbytes)
            return Region(self, addr, nbytes)

    def _free(self, region):
        h = self._h
        if h is None or h.closed:
            return
        with h.lock:
            h.bufs.pop(region.address, None)    # views keep it alive
            h.reap()

    def owns(self, address, nbytes=0):
        """Whether [address, address + nbytes) lies in memory from alloc()
        that is still mapped (freed regions count while views remain)."""
        h = self._h
        if h is None:
            return False
        for addr, size in list(h.sizes.items()):
            if addr <= address and address + nbytes <= addr + size:
                return True
        return False

    def register(self, group, name, data, dtype=None, shape=None,
                 frozen=False):
        """Register (or re-register) a tensor to be saved and restored.
        data: a contiguous numpy array or torch tensor inside memory from
        alloc() (or a CUDA tensor where ckptd has a GPU), or an address
        (int) with dtype= and shape=.  The memory is borrowed.
        frozen=True (CKPT_FROZEN): training does not change it; ckptd keeps
        the group's frozen tensors in a file of their own, linked to the
        previous checkpoint's when unchanged (README, Incremental saves)."""
        addr, dt, shp = _describe(data, dtype, shape)
        if len(shp) > _L.MAX_NDIM:
            raise InvalidArgument(_errno.EINVAL, "tensor %s/%s has %d "
                                  "dimensions; at most %d" %
                                  (group, name, len(shp), _L.MAX_NDIM),
                                  "register")
        arr = (ctypes.c_int64 * max(1, len(shp)))(*shp)
        if frozen:
            self._need("ckpt_register_flags", "register(frozen=True)")
            self._call("register", "ckpt_register_flags",
                       _name(group, "group"), _name(name, "name"), addr,
                       _L.DTYPE_CODE[dt], len(shp), arr, None, _L.FROZEN)
            return
        self._call("register", "ckpt_register",
                   _name(group, "group"), _name(name, "name"), addr,
                   _L.DTYPE_CODE[dt], len(shp), arr)

    @property
    def has_frozen(self):
        """Whether this libckpt has ckpt_register_flags (CKPT_FROZEN)."""
        return hasattr(_get_lib(), "ckpt_register_flags")

    def _need(self, fn, what):
        if not hasattr(_get_lib(), fn):
            raise NotSupported(_errno.EOPNOTSUPP, "%s has no %s; rebuild "
                               "libckpt" % (library_path(), fn), what)

    @property
    def has_global(self):
        """Whether this libckpt has ckpt_register_global (global tensors)."""
        return has_global_tensors()

    def register_global(self, group, name, data, global_shape, offset=None,
                        replica_index=0, replica_count=1, frozen=False):
        """Register this rank's piece of a global tensor: data (as for
        register()) is the dense box of global_shape that starts at offset
        (default all 0).  replica_count ranks hold this same piece
        (replica_index: which of them this rank is); ckptd writes it once.
        DDP: register_global(g, n, t, t.shape, replica_index=rank,
        replica_count=world)."""
        addr, dt, shp = _describe(data, None, None)
        gshape = tuple(int(d) for d in global_shape)
        off = tuple(int(o) for o in offset) if offset is not None \
            else (0,) * len(gshape)
        if not (len(shp) == len(gshape) == len(off)) or \
                len(shp) > _L.MAX_NDIM:
            raise InvalidArgument(_errno.EINVAL, "tensor %s/%s: piece %s at "
                                  "%s of %s: dimensions disagree (at most "
                                  "%d)" % (group, name, shp, off, gshape,
                                           _L.MAX_NDIM), "register_global")
        if not self.has_global:
            raise NotSupported(_errno.EOPNOTSUPP, "%s has no "
                               "ckpt_register_global (global tensors); "
                               "rebuild libckpt" % library_path(),
                               "register_global")
        lay = _L.Layout()
        for i, (g, o) in enumerate(zip(gshape, off)):
            lay.global_shape[i] = g
            lay.offset[i] = o
        lay.replica_index = int(replica_index)
        lay.replica_count = int(replica_count)
        arr = (ctypes.c_int64 * max(1, len(shp)))(*shp)
        if frozen:
            self._need("ckpt_register_flags", "register_global(frozen=True)")
            self._call("register_global", "ckpt_register_flags",
                       _name(group, "group"), _name(name, "name"), addr,
                       _L.DTYPE_CODE[dt], len(shp), arr, ctypes.byref(lay),
                       _L.FROZEN)
            return
        self._call("register_global", "ckpt_register_global",
                   _name(group, "group"), _name(name, "name"), addr,
                   _L.DTYPE_CODE[dt], len(shp), arr, ctypes.byref(lay))

    def unregister(self, group, name):
        self._call("unregister", "ckpt_unregister",
                   _name(group, "group"), _name(name, "name"))

    # -- blobs --

    def put_blob(self, name, data):
        """A small per-rank blob (bytes-like), copied now, saved with every
        later save().  Replaces a blob of that name."""
        b = bytes(data)
        self._call("put_blob", "ckpt_put_blob",
                   _name(name, "blob"), b, len(b))

    def get_blob(self, name, default=None):
        """A blob from the last restore(), or default if it had none."""
        h = self._enter()
        n = ctypes.c_size_t()
        bname = _name(name, "blob")
        with h.lock:
            r = h.lib.ckpt_get_blob(h.ptr, bname, None, 0, ctypes.byref(n))
            if r == -_errno.ENOENT:
                return default
            if r < 0:
                raise _make_error(r, _text(h.lib.ckpt_last_error(h.ptr)),
                                  "get_blob")
            buf = ctypes.create_string_buffer(max(1, n.value))
            r = h.lib.ckpt_get_blob(h.ptr, bname, buf, n.value,
                                    ctypes.byref(n))
            if r < 0:
                raise _make_error(r, _text(h.lib.ckpt_last_error(h.ptr)),
                                  "get_blob")
            return buf.raw[:n.value]

    # -- saves --

    def save(self, step):
        """Ask for a checkpoint of everything registered (and every blob)
        at step.  Returns a Ticket once ckptd accepted it; the tensors must
        not change until ticket.wait("staged") returns."""
        step = _step(step, "save")
        tid = ctypes.c_uint64()
        self._call("save", "ckpt_save", step, ctypes.byref(tid))
        return Ticket(self, tid.value, step)

    @property
    def has_stream_saves(self):
        """Whether this libckpt has deferred stream gates
        (ckpt_save_stream_flags, ckpt_gate_stream); ckptd must have a GPU
        too, which save_stream() finds out (NotSupported)."""
        return hasattr(self._enter().lib, "ckpt_gate_stream")

    def save_stream(self, step, stream, gate=True):
        """Save CUDA tensors without blocking the CPU (ckpt_save_stream):
        ckptd copies them once the work queued on stream so far is done.
        stream: a torch.cuda.Stream (its .cuda_stream) or a cudaStream_t
        as an int; call with its device current.  gate=True: work queued
        on stream after this call waits (on the GPU) until the save is
        STAGED.  gate=False: nothing waits, so the next forward/backward
        overlaps the copy; before anything changes the tensors call
        gate_stream(ticket, stream) or ticket.wait("staged").
        Returns a Ticket; raises NotSupported when ckptd has no GPU (no
        save was accepted: use save())."""
        step = _step(step, "save_stream")
        h = self._enter()
        if not hasattr(h.lib, "ckpt_save_stream_flags"):
            raise NotSupported(_errno.EOPNOTSUPP, "%s has no "
                               "ckpt_save_stream_flags; rebuild libckpt" %
                               library_path(), "save_stream")
        tid = ctypes.c_uint64()
        r = self._call("save_stream", "ckpt_save_stream_flags", step,
                       _stream_handle(stream),
                       0 if gate else _L.GATE_LATER, ctypes.byref(tid))
        t = Ticket(self, tid.value, step)
        if r == _L.UNORDERED:
            # accepted, but the stream could not be made to wait: the CPU
            # waits instead, before anything can change the tensors
            t.wait("staged")
        return t

    def gate_stream(self, ticket, stream):
        """Make stream (as for save_stream) wait, on the GPU, until the
        stream save ticket is STAGED; the CPU does not block.  A no-op for
        a save already staged or already gated on that stream.  Raises
        SaveFailed if the save failed (nothing is queued then: a failed
        save needs no ordering), NotFound for an unknown ticket,
        InvalidArgument for a ticket of save(), and DeviceError (or
        InvalidArgument) when the stream cannot wait: then
        ticket.wait("staged") before the tensors change."""
        if ticket._client is not self:
            raise ValueError("ticket belongs to another client")
        h = self._enter()
        if not hasattr(h.lib, "ckpt_gate_stream"):
            raise NotSupported(_errno.EOPNOTSUPP, "%s has no ckpt_gate_stream;"
                               " rebuild libckpt" % library_path(),
                               "gate_stream")
        handle = _stream_handle(stream)
        with h.lock:
            r = h.lib.ckpt_gate_stream(h.ptr, ticket.id, handle)
            if r >= 0:
                return
            msg = _text(h.lib.ckpt_last_error(h.ptr))
            # the save's own error, or the stream's? ckpt_wait tells
            failed = r not in (-_errno.ENOENT, -_errno.EINVAL) and \
                h.lib.ckpt_wait(h.ptr, ticket.id, _L.PHASES["staged"], 0) \
                not in (0, -_errno.EAGAIN)
        if failed:
            e = _make_error(r, msg, "gate_stream",
                            DeviceSaveFailed if r == -_errno.ENXIO
                            else SaveFailed)
            e.step = ticket.step
            raise e
        raise _make_error(r, msg, "gate_stream")

    def _wait(self, ticket, phase, ms):
        if ticket._client is not self:
            raise ValueError("ticket belongs to another client")
        h = self._enter()
        with h.lock:
            r = h.lib.ckpt_wait(h.ptr, ticket.id, phase, ms)
            if r >= 0:
                return
            msg = _text(h.lib.ckpt_last_error(h.ptr))
        if r == -_errno.EAGAIN:
            cls = Timeout
        elif r in (-_errno.ECONNRESET, -_errno.EPIPE, -_errno.ENOTCONN):
            cls = ConnectionLost
        elif r in (-_errno.ENOENT, -_errno.EINVAL, -_errno.ECHILD):
            cls = None
        elif r == -_errno.ENXIO:
            cls = DeviceSaveFailed
        else:
            cls = SaveFailed
        e = _make_error(r, msg, "wait", cls)
        e.step = ticket.step
        raise e

    def _times(self, ticket):
        t = _L.Times()
        self._call("times", "ckpt_times", ticket.id,
                   ctypes.byref(t))
        return t

    # -- restore --

    def restore(self, step="latest", partial=False):
        """Restore the newest checkpoint that verifies (or the given step)
        into the registered tensors, and fetch its blobs (get_blob()).
        Strict by default: any tensor missing on either side raises
        RestoreMismatch and nothing is written; partial=True restores the
        intersection and reports the rest in the result.  Raises
        NoCheckpoint when there is nothing to restore."""
        if step is None or step == "latest":
            cstep = _L.LATEST
        else:
            cstep = _step(step, "restore")
        got = ctypes.c_uint64()
        h = self._enter()
        with h.lock:
            h.reap()
            r = h.lib.ckpt_restore(h.ptr, cstep,
                                   _L.PARTIAL if partial else 0,
                                   ctypes.byref(got))
            if r < 0:
                msg = _text(h.lib.ckpt_last_error(h.ptr)).replace(
                    "CKPT_PARTIAL", "partial=True")
                raise _make_error(r, msg, "restore",
                                  _restore_error_class(r, msg))
            return _restore_result(h, bool(partial))

    # -- lifecycle --

    def close(self):
        """Close the connection.  Saves already staged are still completed
        by ckptd.  Memory still viewed by arrays/tensors stays mapped (and
        the connection open) until the last view goes."""
        h, self._h = self._h, None
        if h is not None:
            h.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self):
        return "<ckpt.Client job %r rank %d/%d%s>" % (
            self.job, self.rank, self.world_size,
            " closed" if self.closed else "")


def _stream_handle(stream):
    """A cudaStream_t (ctypes void pointer) from a torch.cuda.Stream (or
    anything with .cuda_stream) or an int; None is the default stream."""
    if stream is None:
        return None
    handle = getattr(stream, "cuda_stream", stream)
    if isinstance(handle, bool) or not isinstance(handle, int):
        raise TypeError("stream must be a torch.cuda.Stream or an int "
                        "cudaStream_t, not %s" % type(stream).__name__)
    return ctypes.c_void_p(handle) if handle else None


def _restore_names(h, fn, n):
    g, name = ctypes.c_char_p(), ctypes.c_char_p()
    out = []
    for i in range(n):
        r = fn(h.ptr, i, ctypes.byref(g), ctypes.byref(name))
        if r < 0:
            raise _make_error(r, _text(h.lib.ckpt_last_error(h.ptr)),
                              "restore")
        out.append(_text(g.value) + "/" + _text(name.value))
    return out


def _restore_result(h, partial):
    """The last restore's structured report (libckpt's restore info)."""
    info = _L.RestoreInfo()
    r = h.lib.ckpt_restore_info(h.ptr, ctypes.byref(info))
    if r < 0:
        raise _make_error(r, _text(h.lib.ckpt_last_error(h.ptr)), "restore")
    skipped = []
    step, why = ctypes.c_uint64(), ctypes.c_char_p()
    while h.lib.ckpt_restore_skipped(h.ptr, len(skipped), ctypes.byref(step),
                                     ctypes.byref(why)) == 0:
        skipped.append((step.value, _text(why.value).replace(
            "CKPT_PARTIAL", "partial=True")))
    return RestoreResult(
        info.step, partial, _L.SOURCES.get(info.source, "unknown"),
        info.bytes, info.micros,
        _restore_names(h, h.lib.ckpt_restore_missing, info.n_missing),
        _restore_names(h, h.lib.ckpt_restore_unexpected, info.n_unexpected),
        skipped)


def _restore_error_class(r, msg):
    if r == -_errno.ENOENT:
        return NoCheckpoint
    if r == -_errno.EINVAL and ("differs for" in msg or
                                "registered unlike in the checkpoint" in msg or
                                "was written by" in msg or
                                "does not match the registered tensors" in msg or
                                "restore only into a job of that world" in msg):
        return RestoreMismatch
    return None
