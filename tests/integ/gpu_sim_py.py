"""The Python binding's stream saves on the CUDA driver simulator: the
trainer side of t_gpu_sim_python.sh.  CUDA through ctypes on the driver
(build/cudasim/libcuda.so.1 on LD_LIBRARY_PATH), tensors registered by
address, the stream given as an int and as an object with .cuda_stream (as
a torch.cuda.Stream has).  ckptd's only stager is held at the failpoint
stage.chunk (FIFO argv[2]): Client.save_stream(gate=False) lets the
"forward" run while the save stages; after Client.gate_stream the
"optimizer step" waits for STAGED; the checkpoint holds the values from
before it.

    gpu_sim_py.py SOCKET FIFO"""
import ctypes
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..",
                                "client", "python"))
import ckpt  # noqa: E402

NOT_READY = 600
cu = ctypes.CDLL("libcuda.so.1")
P, U, SZ = ctypes.c_void_p, ctypes.c_uint, ctypes.c_size_t


def CU(name, *args):
    r = getattr(cu, name)(*args)
    if r:
        sys.exit("%s: CUDA error %d" % (name, r))


def event_within(ev, ms):
    for _ in range(ms):
        r = cu.cuEventQuery(ev)
        if r == 0:
            return True
        if r != NOT_READY:
            sys.exit("cuEventQuery: CUDA error %d" % r)
        time.sleep(0.001)
    return False


def release(fifo):
    with open(fifo, "w") as f:
        f.write("go\n")


class Stream:
    """Looks like a torch.cuda.Stream to ckpt: .cuda_stream"""
    def __init__(self, handle):
        self.cuda_stream = handle


def main(sock, fifo):
    dev, ctx, st = ctypes.c_int(), P(), P()
    CU("cuInit", U(0))
    CU("cuDeviceGet", ctypes.byref(dev), 0)
    CU("cuDevicePrimaryCtxRetain", ctypes.byref(ctx), dev)
    CU("cuCtxSetCurrent", ctx)
    CU("cuStreamCreate", ctypes.byref(st), U(1))
    n = 256 << 10                                   # words of one tensor
    w, act = ctypes.c_uint64(), ctypes.c_uint64()
    CU("cuMemAlloc_v2", ctypes.byref(w), SZ(4 * n))
    CU("cuMemAlloc_v2", ctypes.byref(act), SZ(4 * n))
    fwd, opt = P(), P()
    CU("cuEventCreate", ctypes.byref(fwd), U(2))
    CU("cuEventCreate", ctypes.byref(opt), U(2))

    def fill(ptr, v):
        CU("cuMemsetD32Async", ctypes.c_uint64(ptr), U(v), SZ(n), st)

    c = ckpt.Client("pysim", socket=sock)
    assert c.has_stream_saves
    c.register("model", "w", w.value, dtype="int32", shape=(n,))
    fill(w.value, 0x11111111)
    CU("cuStreamSynchronize", st)
    t = c.save_stream(1, st.value, gate=False)       # an int handle
    fill(act.value, 0x0f0f0f0f)                      # the forward pass
    CU("cuEventRecord", fwd, st)
    deadline = time.time() + 10
    while not os.path.exists(fifo + ".held"):
        if time.time() > deadline:
            sys.exit("ckptd's stager never reached stage.chunk")
        time.sleep(0.001)
    if not event_within(fwd, 3000):
        release(fifo)
        sys.exit("FAIL: the forward pass did not run while ckptd staged")
    if t.done("staged"):
        release(fifo)
        sys.exit("FAIL: staged while ckptd's stager is held")
    print("ok the forward pass ran while the save was staging")
    c.gate_stream(t, Stream(st.value))               # .cuda_stream
    c.gate_stream(t, st.value)                       # the same stream
    fill(w.value, 0x0bad0bad)                        # the optimizer step
    CU("cuEventRecord", opt, st)
    if event_within(opt, 300):
        release(fifo)
        sys.exit("FAIL: the optimizer step ran before the save was STAGED")
    print("ok the optimizer step waits at the gate")
    release(fifo)
    t.wait("committed", timeout=30)
    if not event_within(opt, 10000):
        sys.exit("FAIL: the gate stayed shut after STAGED")
    c.gate_stream(t, st.value)                       # staged: a no-op
    try:
        c.gate_stream(c.save(2), st.value)
        sys.exit("FAIL: gate_stream took a ticket of save()")
    except ckpt.InvalidArgument as e:
        assert "not a stream save" in str(e), e
    try:
        c.gate_stream(ckpt.Ticket(c, 999999, 3), st.value)
        sys.exit("FAIL: gate_stream took an unknown ticket")
    except ckpt.NotFound:
        pass
    try:
        c.gate_stream(t, "stream")
        sys.exit("FAIL: gate_stream took a str")
    except TypeError:
        pass
    fill(w.value, 0)
    CU("cuStreamSynchronize", st)
    c.restore(1)
    h = (ctypes.c_uint32 * n)()
    CU("cuMemcpyDtoH_v2", h, ctypes.c_uint64(w.value), SZ(4 * n))
    if set(h) != {0x11111111}:
        sys.exit("FAIL: the checkpoint does not hold the values from before "
                 "the optimizer step")
    print("ok the checkpoint holds the values from before the step")
    c.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
