"""ckpt.torch's stream saves (CUDA) without a GPU: where the Checkpointer
gates the training stream.  The client is a test double (FakeClient) that
logs the calls ckpt.torch makes, and _FakeCudaCheckpointer takes the CUDA
path on CPU tensors (it answers the three questions the Checkpointer asks
of the device: which CUDA device, which stream, host tensors or not).
What the gate does on a device is tested in C on the CUDA driver
simulator (tests/integ/t_gpu_sim_deferred.sh)."""
import errno

import pytest
import torch

import ckpt
import ckpt.torch

FAKE_STREAM = 0x5eed


class FakeTicket:
    def __init__(self, client, tid, step):
        self.client, self.id, self.step = client, tid, step
        self.failed = None              # a SaveFailed to raise, or None

    def wait(self, phase="committed", timeout=None):
        self.client.log.append(("wait", self.step, phase))
        if self.failed:
            raise self.failed
        return self

    def done(self, phase="committed"):
        if self.failed:
            raise self.failed
        return False


class FakeRegion:
    def __init__(self, n):
        self.buffer = bytearray(n)

    def free(self):
        pass


class FakeClient:
    """Stands for ckpt.Client: registration is accepted and forgotten,
    saves are logged; no ckptd, no libckpt."""
    rank, world_size = 0, 1
    has_global = False
    has_stream_saves = True

    def __init__(self, gpu=True):
        self.gpu = gpu                  # False: ckptd has no GPU
        self.log = []
        self.tickets = []
        self.gate_fails = None

    def alloc(self, n):
        return FakeRegion(n)

    def owns(self, addr, n=0):
        return False

    def register(self, group, name, t):
        pass

    def unregister(self, group, name):
        pass

    def put_blob(self, name, data):
        pass

    def _ticket(self, step):
        t = FakeTicket(self, len(self.tickets) + 1, step)
        self.tickets.append(t)
        return t

    def save(self, step):
        self.log.append(("save", step))
        return self._ticket(step)

    def save_stream(self, step, stream, gate=True):
        if not self.gpu:
            self.log.append(("save_stream refused", step))
            raise ckpt.NotSupported(errno.EOPNOTSUPP, "ckptd has no GPU",
                                    "save_stream")
        self.log.append(("save_stream", step, stream, gate))
        return self._ticket(step)

    def gate_stream(self, ticket, stream):
        self.log.append(("gate", ticket.step, stream))
        if self.gate_fails:
            raise self.gate_fails


class _FakeCudaCheckpointer(ckpt.torch.Checkpointer):
    """Takes the CUDA path with CPU tensors (a test double, no GPU)."""
    host = False

    def _stream_device(self):
        return "fake-cuda:0" if self._streams else None

    def _current_stream(self, device):
        assert device == "fake-cuda:0"
        return FAKE_STREAM

    def _host_tensors(self):
        return self.host


def make(norm=False):
    torch.manual_seed(0)
    layers = [torch.nn.Linear(4, 8)]
    if norm:
        layers.append(torch.nn.BatchNorm1d(8))
    layers += [torch.nn.ReLU(), torch.nn.Linear(8, 2)]
    m = torch.nn.Sequential(*layers)
    return m, torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)


def step(m, opt, log, x=None):
    """One training step, its phases logged; returns the first weight's
    value just before optimizer.step() and the log index of the step."""
    x = torch.randn(16, 4) if x is None else x
    opt.zero_grad()
    log.append(("forward",))
    loss = m(x).square().mean()
    log.append(("backward",))
    loss.backward()
    before = m[0].weight.detach().clone()
    log.append(("step",))
    opt.step()
    log.append(("stepped",))
    return before


def gates(log):
    return [e for e in log if e[0] == "gate"]


def test_gate_is_armed_at_the_optimizer_step():
    m, opt = make()
    c = FakeClient()
    ck = _FakeCudaCheckpointer(client=c, model=m, optimizer=opt, rng=False)
    seen = {}
    real_gate = c.gate_stream

    def gate_stream(t, stream):     # what the weights were at the gate
        seen[t.step] = m[0].weight.detach().clone()
        real_gate(t, stream)
    c.gate_stream = gate_stream

    step(m, opt, c.log)
    t = ck.save(1)
    # queued on the current stream, not gated, not waited for
    assert c.log[-1] == ("save_stream", 1, FAKE_STREAM, False)
    assert not gates(c.log) and ("wait", 1, "staged") not in c.log
    assert t is c.tickets[0]
    before = step(m, opt, c.log)
    i = c.log.index(("save_stream", 1, FAKE_STREAM, False))
    assert [e[0] for e in c.log[i + 1:]] == ["forward", "backward", "step",
                                             "gate", "stepped"]
    assert gates(c.log) == [("gate", 1, FAKE_STREAM)]
    # before the step changed the tensors
    assert torch.equal(seen[1], before)
    assert not torch.equal(m[0].weight, before)
    # once per save: later steps do not gate again
    step(m, opt, c.log)
    step(m, opt, c.log)
    assert len(gates(c.log)) == 1
    ck.save(2)
    step(m, opt, c.log)
    assert gates(c.log) == [("gate", 1, FAKE_STREAM), ("gate", 2, FAKE_STREAM)]
    # never a wait for STAGED on the CPU
    assert not [e for e in c.log if e[0] == "wait" and e[2] == "staged"]
    ck.close()
    assert not opt._optimizer_step_pre_hooks    # hooks removed


def test_fallbacks():
    # no optimizer: gated at once
    m, opt = make()
    c = FakeClient()
    ck = _FakeCudaCheckpointer(client=c, model=m, rng=False)
    ck.save(1)
    assert c.log[-1] == ("save_stream", 1, FAKE_STREAM, True)
    ck.close()

    # asked for: gated at once, no hooks
    c = FakeClient()
    ck = _FakeCudaCheckpointer(client=c, model=m, optimizer=opt, rng=False,
                               gate="now")
    ck.save(1)
    step(m, opt, c.log)
    assert c.log[0] == ("save_stream", 1, FAKE_STREAM, True)
    assert not gates(c.log) and not opt._optimizer_step_pre_hooks
    ck.close()

    # ckptd without a GPU: the old path, save() then wait for STAGED; the
    # stream is not tried again
    c = FakeClient(gpu=False)
    ck = _FakeCudaCheckpointer(client=c, model=m, optimizer=opt, rng=False)
    ck.save(1)
    ck.save(2)
    step(m, opt, c.log)
    assert c.log == [("save_stream refused", 1), ("save", 1),
                     ("wait", 1, "staged"), ("save", 2),
                     ("wait", 2, "staged"), ("forward",), ("backward",),
                     ("step",), ("stepped",)]
    ck.close()

    # wait= still waits
    c = FakeClient()
    ck = _FakeCudaCheckpointer(client=c, model=m, optimizer=opt, rng=False)
    ck.save(1, wait="staged")
    assert c.log[-1] == ("wait", 1, "staged")
    ck.close()


def test_host_tensors_wait_on_the_cpu_at_the_step():
    m, opt = make()
    c = FakeClient()
    ck = _FakeCudaCheckpointer(client=c, model=m, optimizer=opt, rng=False)
    ck.host = True
    ck.save(1)
    assert ("wait", 1, "staged") not in c.log
    step(m, opt, c.log)
    i = c.log.index(("step",))
    assert c.log[i + 1:i + 4] == [("gate", 1, FAKE_STREAM),
                                  ("wait", 1, "staged"), ("stepped",)]
    ck.close()
    # without an optimizer nothing holds the CPU later: the old path
    c = FakeClient()
    ck = _FakeCudaCheckpointer(client=c, model=m, rng=False)
    ck.host = True
    ck.save(1)
    assert c.log == [("save", 1), ("wait", 1, "staged")]
    ck.close()


def test_running_stats_gate_before_forward():
    m, opt = make(norm=True)
    c = FakeClient()
    ck = _FakeCudaCheckpointer(client=c, model=m, optimizer=opt, rng=False)
    seen = []
    real_gate = c.gate_stream

    def gate_stream(t, stream):
        seen.append(m[1].running_mean.clone())
        real_gate(t, stream)
    c.gate_stream = gate_stream
    step(m, opt, c.log)
    ck.save(1)
    stats = m[1].running_mean.clone()
    step(m, opt, c.log)
    i = c.log.index(("save_stream", 1, FAKE_STREAM, False))
    assert [e[0] for e in c.log[i + 1:]] == ["forward", "gate", "backward",
                                             "step", "stepped"]
    assert torch.equal(seen[0], stats)          # before forward changed it
    assert not torch.equal(m[1].running_mean, stats)
    ck.close()
    # "step" asked for explicitly: the user says forward changes nothing
    c = FakeClient()
    ck = _FakeCudaCheckpointer(client=c, model=m, optimizer=opt, rng=False,
                               gate="step")
    ck.save(1)
    step(m, opt, c.log)
    assert [e[0] for e in c.log[1:]] == ["forward", "backward", "step",
                                         "gate", "stepped"]
    ck.close()


def test_next_save_and_user_gate_first():
    m, opt = make()
    c = FakeClient()
    ck = _FakeCudaCheckpointer(client=c, model=m, optimizer=opt, rng=False)
    ck.save(1)
    ck.save(2)          # no step in between: save 1 is gated first
    assert c.log == [("save_stream", 1, FAKE_STREAM, False),
                     ("gate", 1, FAKE_STREAM),
                     ("save_stream", 2, FAKE_STREAM, False)]
    ck.gate()           # the user changes tensors in place
    ck.gate()
    step(m, opt, c.log)
    assert gates(c.log) == [("gate", 1, FAKE_STREAM), ("gate", 2, FAKE_STREAM)]
    ck.close()


def test_a_failed_save_does_not_stop_the_step():
    m, opt = make()
    c = FakeClient()
    ck = _FakeCudaCheckpointer(client=c, model=m, optimizer=opt, rng=False)
    t = ck.save(1)
    err = ckpt.SaveFailed(errno.EIO, "disk on fire", "gate_stream")
    t.failed = c.gate_fails = err
    before = step(m, opt, c.log)
    assert not torch.equal(m[0].weight, before)     # the step ran
    with pytest.raises(ckpt.SaveFailed, match="disk on fire"):
        ck.save(2)
    # a stream that cannot wait: the CPU waits instead
    c.gate_fails = ckpt.DeviceError(errno.ENXIO, "cuStreamWaitValue32",
                                    "gate_stream")
    ck.save(3)
    step(m, opt, c.log)
    i = c.log.index(("gate", 3, FAKE_STREAM))
    assert c.log[i + 1] == ("wait", 3, "staged")
    ck.close()
