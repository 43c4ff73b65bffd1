"""ckpt.Client against a real ckptd: errors, saves, restores, memory."""
import errno
import gc
import json
import os
import shutil
import struct
import threading
import time
import warnings

import pytest

np = pytest.importorskip("numpy", reason="numpy is not installed")

import ckpt  # noqa: E402

# Arrays that outlive a `with Client()` block are the point of deferred close.
pytestmark = pytest.mark.filterwarnings(
    "ignore:ckpt. Client closed while:ResourceWarning")


def read_shard(path):
    """{name: numpy array} from a safetensors file, parsed here."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack_from("<Q", data)
    header = json.loads(data[8:8 + n])
    dt = {"F32": np.float32, "F64": np.float64, "I64": np.int64,
          "U8": np.uint8}
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        out[name] = np.frombuffer(data[8 + n + b:8 + n + e],
                                  dt[info["dtype"]]).reshape(info["shape"])
    return out


def test_connect_errors(ckptd, tmp_path):
    missing = str(tmp_path / "nope.sock")
    with pytest.raises(ckpt.ConnectError) as ei:
        ckpt.Client("j", socket=missing)
    assert missing in str(ei.value) and "is ckptd running" in str(ei.value)
    assert ei.value.errno == errno.ENOENT

    with pytest.raises(ckpt.InvalidArgument, match="job name 'bad/job'"):
        ckpt.Client("bad/job", socket=ckptd.socket)
    with pytest.raises(ckpt.InvalidArgument, match="rank 2 is outside"):
        ckpt.Client("j", rank=2, world_size=2, socket=ckptd.socket)


def test_daemon_messages_become_exceptions(ckptd, job):
    with ckpt.Client(job, 0, 1, socket=ckptd.socket) as c:
        # refused by ckptd itself, with its reasons
        with pytest.raises(ckpt.InvalidArgument,
                           match="running with world_size 1, not 2"):
            ckpt.Client(job, 0, 2, socket=ckptd.socket)
        with pytest.raises(ckpt.ConnectError, match="already connected") \
                as ei:
            ckpt.Client(job, 0, 1, socket=ckptd.socket)
        assert ei.value.errno == errno.EEXIST
        with pytest.raises(ckpt.NoCheckpoint,
                           match="no checkpoint of job '%s'" % job):
            c.restore()
        with pytest.raises(ckpt.CkptError, match="nothing to save") as ei:
            c.save(1)
        assert ei.value.errno == errno.ENODATA and ei.value.op == "save"
        with pytest.raises(ckpt.CkptError, match="max_blob_bytes") as ei:
            c.put_blob("big", b"x" * (5 << 20))
        assert ei.value.errno == errno.EFBIG

        # refused by libckpt before anything is sent
        with pytest.raises(ckpt.InvalidArgument,
                           match="not inside memory from ckpt_alloc"):
            c.register("model", "w", 4096, dtype="F32", shape=[4])
        with pytest.raises(ckpt.InvalidArgument, match="may only contain"):
            c.put_blob("no/slash", b"")
        with pytest.raises(ckpt.InvalidArgument, match="dtype complex64"):
            c.register("model", "w", np.zeros(2, np.complex64))
        r = c.alloc(4096)
        a = np.frombuffer(r.buffer, np.float32, 4)
        with pytest.raises(ckpt.InvalidArgument, match="reserved"):
            c.register("model", "__metadata__", a)
        assert "reserved" in c.last_error

        c.register("model", "a", a)
        c.save(3).wait("committed", timeout=30)
        with pytest.raises(ckpt.NoCheckpoint, match="iter_000000099"):
            c.restore(step=99)
        with pytest.raises(ckpt.NotFound, match="no save with ticket"):
            ckpt.Ticket(c, 12345, 1).wait()
        with pytest.raises(ValueError):
            c.save(4).wait("written")
    with pytest.raises(ValueError, match="closed"):
        c.save(5)


def test_what_c_would_misread_is_refused(ckptd, job):
    """A NUL in a name, a step past CKPT_MAX_STEP and a dtype=/shape= view
    of more bytes than the tensor has: C would cut the name (and replace
    another tensor), wrap the step, and save and restore the neighbour."""
    with ckpt.Client(job, socket=ckptd.socket) as c:
        r = c.alloc(8192)
        mem = np.frombuffer(r.buffer, np.float32)
        w, other = mem[0:4], mem[4:8]
        w[:] = 1
        other[:] = 42
        c.register("model", "w", w)
        for bad in ("w\0b", "\0"):
            with pytest.raises(ckpt.InvalidArgument, match="NUL"):
                c.register("model", bad, other)
            with pytest.raises(ckpt.InvalidArgument, match="NUL"):
                c.put_blob(bad, b"x")
        with pytest.raises(ckpt.InvalidArgument, match="NUL"):
            c.register("mo\0del", "w", other)
        with pytest.raises(ckpt.InvalidArgument, match="F64 \\[4\\] is 32 "
                           "bytes, but the tensor has 16"):
            c.register("model", "v", w, dtype="F64")
        with pytest.raises(ckpt.InvalidArgument, match="has 16"):
            c.register("model", "v", w, shape=(8,))
        with pytest.raises(ckpt.InvalidArgument, match="its 16384 bytes at "
                           "offset 0 run past the end of its ckpt_alloc\\(\\) "
                           "memory \\(8192 bytes\\)"):
            c.register("model", "long", r.address, dtype="F32", shape=[4096])
        c.register("model", "raw", w, dtype="U8", shape=(16,))  # a view
        c.unregister("model", "raw")
        for step in (2 ** 64 + 7, 10 ** 9, -1):
            with pytest.raises(ckpt.InvalidArgument, match="out of range"):
                c.save(step)
            with pytest.raises(ckpt.InvalidArgument, match="out of range"):
                c.restore(step=step)
        c.save(7).wait("committed", timeout=30)
        w[:] = 0
        other[:] = 0
        res = c.restore()
        assert res.step == 7
        assert (w == 1).all() and (other == 0).all()


def test_restore_says_how_registrations_differ(ckptd, job):
    """Another dtype or shape, a rank-local tensor registered as a global
    one and the other way round: each named with what differs."""
    with ckpt.Client(job, socket=ckptd.socket) as c:
        r = c.alloc(4096)
        c.register("m", "w", np.frombuffer(r.buffer, np.float32, 16))
        c.register_global("m", "g", np.frombuffer(r.buffer, np.float32, 4,
                                                  1024), (4,))
        c.save(1).wait("committed", timeout=30)
        del r       # the client closes once nothing views its memory
    gc.collect()
    cases = [
        (lambda c, b: c.register("m", "w", np.frombuffer(b, np.int32, 16)),
         r"m/w \(checkpoint F32 \[16\], registered I32 \[16\]\)"),
        (lambda c, b: c.register("m", "w", np.frombuffer(b, np.float32, 8)),
         r"checkpoint F32 \[16\], registered F32 \[8\]"),
        (lambda c, b: c.register_global("m", "w", np.frombuffer(
            b, np.float32, 16), (16,)),
         "m/w \\(rank-local in the checkpoint, registered as a global"),
        (lambda c, b: c.register("m", "g", np.frombuffer(b, np.float32, 4)),
         "m/g \\(a global tensor in the checkpoint, registered rank-local"),
    ]
    for reg, want in cases:
        with ckpt.Client(job, socket=ckptd.socket) as c:
            b = c.alloc(4096).buffer
            reg(c, b)
            with pytest.raises(ckpt.RestoreMismatch, match=want):
                c.restore()
            del b
        gc.collect()
    with ckpt.Client(job + "-new", socket=ckptd.socket) as c:
        c.register("m", "w", np.frombuffer(c.alloc(4096).buffer, np.float32))
        with pytest.raises(ckpt.NoCheckpoint, match="none was saved"):
            c.restore()


def test_save_restore_and_blobs(ckptd, job):
    with ckpt.Client(job, socket=ckptd.socket) as c:
        r = c.alloc(1 << 16)
        w = np.frombuffer(r.buffer, np.float32, 1000)
        s = np.frombuffer(r.buffer, np.int64, 3, offset=4096)
        w[:] = np.arange(1000, dtype=np.float32)
        s[:] = [7, 8, 9]
        c.register("model", "w", w)
        c.register("optim", "s", s)
        c.put_blob("progress", b'{"epoch": 3}')
        t = c.save(10)
        assert isinstance(t, ckpt.Ticket) and t.step == 10
        t.wait("committed", timeout=30)
        tm = t.times
        assert 0 < tm["staged"] <= tm["durable"] <= tm["committed"]
        assert tm["bytes"] >= 4000 + 24
        assert t.done("committed")
        assert ckptd.latest(job) == "iter_000000010"

        w[:] = -1
        s[:] = 0
        assert c.get_blob("progress") is None       # no restore yet
        res = c.restore()
        assert res.step == 10 and res.complete and not res.report
        assert np.array_equal(w, np.arange(1000, dtype=np.float32))
        assert list(s) == [7, 8, 9]
        assert c.get_blob("progress") == b'{"epoch": 3}'
        assert c.get_blob("nope", b"default") == b"default"


def test_mutation_after_staged_does_not_corrupt(ckptd, job):
    """16 MiB through a 1 MiB-chunk pool: everything is copied by STAGED,
    so overwriting the tensor right then cannot reach the saved step."""
    n = 4 << 20
    with ckpt.Client(job, socket=ckptd.socket) as c:
        r = c.alloc(n * 4)
        a = np.frombuffer(r.buffer, np.float32, n)
        rng = np.random.default_rng(5)
        a[:] = rng.standard_normal(n, dtype=np.float32)
        want = a.copy()
        c.register("model", "a", a)
        for step in (1, 2, 3):
            t = c.save(step)
            t.wait("staged", timeout=60)
            a *= -2.0                       # the next "optimizer step"
            a += 1.0
            t.wait("committed", timeout=60)
            got = read_shard(os.path.join(ckptd.root, job,
                                          "iter_%09d" % step, "model",
                                          "rank_00000.safetensors"))["a"]
            assert np.array_equal(got, want), "step %d corrupted" % step
            want = a.copy()
        a[:] = 0
        assert c.restore(step=2).step == 2
        assert np.array_equal(a, read_shard(os.path.join(
            ckptd.root, job, "iter_000000002", "model",
            "rank_00000.safetensors"))["a"])


def test_strict_and_partial_restore(ckptd, job):
    with ckpt.Client(job, socket=ckptd.socket) as c:
        r = c.alloc(4096)
        a = np.frombuffer(r.buffer, np.float32, 4)
        b = np.frombuffer(r.buffer, np.float32, 4, offset=64)
        a[:] = 1
        b[:] = 2
        c.register("model", "a", a)
        c.register("model", "b", b)
        c.save(1).wait(timeout=30)
        c.unregister("model", "b")
        x = np.frombuffer(r.buffer, np.float32, 4, offset=128)
        c.register("model", "x", x)
        a[:] = 0
        with pytest.raises(ckpt.RestoreMismatch) as ei:
            c.restore()
        msg = str(ei.value)
        # EINVAL, not ENOENT: a C trainer takes ENOENT as "no checkpoint"
        assert ei.value.errno == errno.EINVAL
        assert not isinstance(ei.value, ckpt.NotFound)
        assert 'missing from the checkpoint ["model/x"]' in msg
        assert 'not registered ["model/b"]' in msg
        assert list(a) == [0, 0, 0, 0]      # strict: nothing written
        res = c.restore(partial=True)
        assert list(a) == [1, 1, 1, 1]
        assert res.missing == ["model/x"] and res.unexpected == ["model/b"]
        assert not res.complete and "partial restore" in res.report
        # a later complete restore does not repeat the old report
        c.unregister("model", "x")
        c.register("model", "b", b)
        res = c.restore()
        assert res.complete and res.report == ""

        # shape differs: refused by name, even with partial
        c.register("model", "b", np.frombuffer(r.buffer, np.float32, 2,
                                               offset=64))
        with pytest.raises(ckpt.RestoreMismatch, match="model/b"):
            c.restore(partial=True)


def test_restore_report_is_structured(ckptd, job):
    """The report comes from libckpt's restore info, not from parsing
    text: every name (long ones, odd characters too), where the bytes came
    from, and the newer steps passed over."""
    long_name = "w-" + "é" * 300 + '"quoted", and; semicolons'
    with ckpt.Client(job, socket=ckptd.socket) as c:
        r = c.alloc(1 << 16)
        views = [np.frombuffer(r.buffer, np.float32, 4, offset=64 * i)
                 for i in range(40)]
        for i, v in enumerate(views):
            v[:] = i
            c.register("model", "%s%d" % (long_name, i), v)
        c.put_blob("rng", b"state")
        c.save(1).wait(timeout=30)
        c.save(2).wait(timeout=30)
        shard = os.path.join(ckptd.root, job, "iter_000000002", "model",
                             "rank_00000.safetensors")
        with open(shard, "r+b") as f:          # step 2 no longer verifies
            f.seek(-4, os.SEEK_END)
            last = f.read(1)
            f.seek(-4, os.SEEK_END)
            f.write(bytes([last[0] ^ 0xFF]))
        for i in range(30, 40):
            c.unregister("model", "%s%d" % (long_name, i))
        extra = np.frombuffer(r.buffer, np.float32, 4, offset=8192)
        c.register("optim", "new;one, too", extra)
        for v in views:
            v[:] = -1
        res = c.restore(partial=True)
        assert res.step == 1 and res.source == "disk"
        assert res.bytes == 30 * 16 + len(b"state") and res.micros > 0
        assert res.missing == ["optim/new;one, too"]
        assert sorted(res.unexpected) == sorted(
            "model/%s%d" % (long_name, i) for i in range(30, 40))
        assert [s for s, _ in res.skipped] == [2]
        assert "rank_00000.safetensors" in res.skipped[0][1]
        assert not res.complete and res.report.startswith("partial restore:")
        assert "skipped step 2: " in res.report
        assert all(list(v) == [i] * 4 for i, v in enumerate(views[:30]))
        assert c.last_error == ""              # success leaves no text
        assert c.get_blob("rng") == b"state"


def test_restore_from_the_memory_tier(fresh_ckptd, job):
    """With memory_tier_bytes, the newest committed step comes back from
    ckptd's memory (source "memory"), a partial restore too; an older step
    from disk."""
    d = fresh_ckptd(memory_tier_bytes="16MiB")
    with ckpt.Client(job, socket=d.socket) as c:
        r = c.alloc(1 << 20)
        a = np.frombuffer(r.buffer, np.float32, 1000)
        b = np.frombuffer(r.buffer, np.float32, 1000, offset=8192)
        c.register("model", "a", a)
        c.register("optim", "b", b)
        for step in (1, 2):
            a[:] = step
            b[:] = -step
            c.put_blob("rng", b"state %d" % step)
            c.save(step).wait(timeout=30)
        a[:] = 0
        b[:] = 0
        res = c.restore()
        assert (res.step, res.source) == (2, "memory")
        assert (a == 2).all() and (b == -2).all()
        assert c.get_blob("rng") == b"state 2"
        assert res.bytes == 8000 + len(b"state 2")
        res = c.restore(step=1)
        assert (res.step, res.source) == (1, "disk") and (a == 1).all()
        c.unregister("optim", "b")
        b[:] = 0
        res = c.restore(partial=True)
        assert (res.step, res.source) == (2, "memory") and (a == 2).all()
        assert res.unexpected == ["optim/b"] and (b == 0).all()


def test_restore_report_replaced_by_the_next_restore(ckptd, job):
    with ckpt.Client(job, socket=ckptd.socket) as c:
        r = c.alloc(4096)
        a = np.frombuffer(r.buffer, np.float32, 4)
        c.register("model", "a", a)
        c.save(1).wait(timeout=30)
        x = np.frombuffer(r.buffer, np.float32, 4, offset=64)
        c.register("model", "x", x)
        assert c.restore(partial=True).missing == ["model/x"]
        with pytest.raises(ckpt.NoCheckpoint):
            c.restore(step=5)
        c.unregister("model", "x")
        res = c.restore()
        assert res.complete and res.missing == [] and res.skipped == []


def test_freed_memory_lives_while_viewed(ckptd, job):
    c = ckpt.Client(job, socket=ckptd.socket)
    r = c.alloc(4096)
    a = np.frombuffer(r.buffer, np.float32, 4)
    a[:] = 5
    c.register("model", "a", a)
    addr = a.ctypes.data
    r.free()
    with pytest.raises(ValueError, match="freed"):
        r.buffer
    assert c.owns(addr, 16)
    a += 1                                  # still mapped, still registered
    c.save(1).wait(timeout=30)
    assert list(read_shard(os.path.join(
        ckptd.root, job, "iter_000000001", "model",
        "rank_00000.safetensors"))["a"]) == [6, 6, 6, 6]
    del a
    gc.collect()
    assert not c.owns(addr, 16)             # the last view went: unmapped
    c.put_blob("b", b"1")
    c.save(2).wait(timeout=30)              # its tensor left with it
    assert not os.path.exists(os.path.join(ckptd.root, job,
                                           "iter_000000002", "model"))

    # close with a live view: deferred, the view stays usable
    v = np.frombuffer(c.alloc(4096).buffer, np.uint8, 16)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        c.close()
    assert any(issubclass(x.category, ResourceWarning) for x in w)
    v[:] = 3
    assert v.sum() == 48
    del v
    gc.collect()
    c.close()                               # idempotent


def test_save_failure_reaches_the_ticket(ckptd, job):
    """World of 2, only rank 0 saves: the step misses the deadline (2 s in
    this daemon's config) and rank 0 learns it as SaveFailed."""
    c0 = ckpt.Client(job, 0, 2, socket=ckptd.socket)
    c1 = ckpt.Client(job, 1, 2, socket=ckptd.socket)
    try:
        r = c0.alloc(4096)
        a = np.frombuffer(r.buffer, np.float32, 4)
        c0.register("model", "a", a)
        t = c0.save(7)
        with pytest.raises(ckpt.Timeout):
            t.wait("committed", timeout=0.1)
        with pytest.raises(ckpt.SaveFailed) as ei:
            t.wait("committed", timeout=30)
        assert ei.value.errno in (errno.ETIMEDOUT, errno.ECANCELED)
        assert ei.value.step == 7 and ei.value.strerror
        assert ckptd.latest(job) is None
    finally:
        del a
        c0.close()
        c1.close()


def test_threads_share_a_client(ckptd, job):
    with ckpt.Client(job, socket=ckptd.socket) as c:
        r = c.alloc(4096)
        a = np.frombuffer(r.buffer, np.float32, 4)
        c.register("model", "a", a)
        tickets = [c.save(s) for s in (1, 2, 3)]
        errs = []

        def waiter(t):
            try:
                t.wait("committed", timeout=30)
            except Exception as e:      # pragma: no cover
                errs.append(e)
        th = [threading.Thread(target=waiter, args=(t,)) for t in tickets]
        for x in th:
            x.start()
        for x in th:
            x.join()
        assert not errs
        assert ckptd.latest(job) == "iter_000000003"
        del a


def test_register_global_checks_its_layout(ckptd, job):
    np = pytest.importorskip("numpy")
    with ckpt.Client(job, socket=ckptd.socket) as c:
        region = c.alloc(64)
        a = np.frombuffer(region.buffer, np.float32, 4)
        with pytest.raises(ckpt.InvalidArgument, match="dimensions disagree"):
            c.register_global("model", "w", a, (2, 4), (0, 0))
        if not ckpt.has_global_tensors():
            with pytest.raises(ckpt.NotSupported,
                               match="no ckpt_register_global"):
                c.register_global("model", "w", a, (8,), (4,))
            return
        c.register_global("model", "w", a, (4,), replica_index=0,
                          replica_count=1)
        c.save(1).wait()
        del a


def _world(ckptd, job, world):
    """A client for every rank of a world of `world`, each with one
    registered rank-local tensor: [(client, tensor)].  A rank that just
    left may still be attached until ckptd has read its close: retried."""
    out = []
    for rank in range(world):
        for tries in range(100, 0, -1):
            try:
                c = ckpt.Client(job, rank, world, socket=ckptd.socket)
                break
            except ckpt.ConnectError as e:
                if e.errno != errno.EEXIST or tries == 1:
                    raise
                time.sleep(0.05)
        v = np.frombuffer(c.alloc(4096).buffer, np.float32, 4)
        c.register("model", "w", v)
        out.append((c, v))
    return out


def _save_world(ckptd, job, world, step):
    """Every rank of a world of `world` saves `step` (rank-local tensors of
    value step * 10 + rank) and closes; returns once committed."""
    clients = _world(ckptd, job, world)
    for c, v in clients:
        v[:] = step * 10 + c.rank
    tickets = [c.save(step) for c, _ in clients]
    for t in tickets:
        t.wait("committed", timeout=30)
    for c, _ in clients:
        c.close()


def test_restore_after_a_world_size_change(ckptd, job):
    """Issue 24: 2 ranks save step 10, 1 rank step 30 (an elastic job that
    shrank).  A 2-rank restore of the latest step passes over step 30 (its
    rank-local tensors belong to a world of 1) to step 10 and says so; with
    no step of its world left it fails as a mismatch, never as "no
    checkpoint" (ENOENT), which would make a trainer start from scratch."""
    _save_world(ckptd, job, 2, 10)
    _save_world(ckptd, job, 1, 30)

    def restore_two(step="latest"):
        """Both ranks of a world of 2 restore: [result or error]."""
        out = []
        clients = _world(ckptd, job, 2)
        for c, v in clients:
            try:
                res = c.restore(step)
                assert list(v) == [res.step * 10 + c.rank] * 4
                out.append(res)
            except ckpt.CkptError as e:
                # without its traceback, which holds this frame and so
                # the tensors' memory: the close would wait for them
                out.append(e.with_traceback(None))
        for c, _ in clients:
            c.close()
        return out

    for res in restore_two():
        assert isinstance(res, ckpt.RestoreResult), res
        assert res.step == 10
        assert [s for s, _ in res.skipped] == [30]
        assert "saved by 1 rank" in res.skipped[0][1]

    for e in restore_two(30):               # asked for by number
        assert isinstance(e, ckpt.RestoreMismatch), e
        assert e.errno == errno.EINVAL and "saved by 1 rank" in str(e)

    shutil.rmtree(os.path.join(ckptd.root, job, "iter_000000010"))
    for e in restore_two():
        assert isinstance(e, ckpt.RestoreMismatch), e
        assert not isinstance(e, ckpt.NotFound)
        assert e.errno == errno.EINVAL
        assert "can be restored by 2 ranks" in str(e)
        assert "iter_000000030 saved by 1 rank" in str(e)

    [(c, v)] = _world(ckptd, job, 1)        # its own world restores it
    assert c.restore().step == 30 and list(v) == [300] * 4
    c.close()


def test_gpu_failure_has_its_own_class():
    """Issue 24: ENXIO (the GPU or its driver failed) is a DeviceError, and
    a save that failed so is both a SaveFailed and a DeviceError."""
    e = ckpt._make_error(-errno.ENXIO, "", "register")
    assert type(e) is ckpt.DeviceError and e.errno == errno.ENXIO
    assert "GPU" in e.strerror

    class FakeLib:
        @staticmethod
        def ckpt_wait(ptr, tid, phase, ms):
            return -errno.ENXIO

        @staticmethod
        def ckpt_last_error(ptr):
            return b"cuMemcpyDtoHAsync: CUDA_ERROR_ILLEGAL_ADDRESS"

    class FakeHandle:
        lib, ptr, lock = FakeLib, None, threading.RLock()

    c = ckpt.Client.__new__(ckpt.Client)
    c._enter = lambda: FakeHandle
    with pytest.raises(ckpt.DeviceSaveFailed) as ei:
        c._wait(ckpt.Ticket(c, 1, 5), 1, 0)
    assert isinstance(ei.value, ckpt.SaveFailed)
    assert isinstance(ei.value, ckpt.DeviceError)
    assert ei.value.step == 5 and "ILLEGAL_ADDRESS" in str(ei.value)
