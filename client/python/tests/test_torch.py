"""ckpt.torch: registration, async saves, replaced tensors, finite checks,
strict/partial restore, offline loading, and kill-and-resume."""
import os
import random
import re
import signal
import subprocess
import sys

import pytest

torch = pytest.importorskip(
    "torch", reason="PyTorch is not installed (make deps: build/venv)")
np = pytest.importorskip("numpy", reason="numpy is not installed")

import ckpt  # noqa: E402
import ckpt.torch as ct  # noqa: E402
from conftest import flip_last_byte  # noqa: E402

EXAMPLE = os.path.join(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))), "examples", "train_mnist_like.py")


class Net(torch.nn.Module):
    def __init__(self, extra=False):
        super().__init__()
        self.fc1 = torch.nn.Linear(16, 32)
        self.bn = torch.nn.BatchNorm1d(32)
        self.drop = torch.nn.Dropout(0.25)
        self.fc2 = torch.nn.Linear(32, 4)
        self.register_buffer("scale", torch.ones(4, dtype=torch.bfloat16))
        if extra:
            self.fc3 = torch.nn.Linear(4, 4)

    def forward(self, x):
        h = self.drop(torch.relu(self.bn(self.fc1(x))))
        return self.fc2(h) * self.scale.float()


def make(seed=0, extra=False, lr=1e-2):
    torch.manual_seed(seed)
    m = Net(extra)
    opt = torch.optim.Adam(m.parameters(), lr=lr, weight_decay=1e-3)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)
    return m, opt, sched


def train(m, opt, sched, steps, data_seed=1):
    g = torch.Generator().manual_seed(data_seed)
    losses = []
    for _ in range(steps):
        x = torch.randn(8, 16, generator=g)
        loss = m(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.item())
    return losses


def assert_state_equal(a, b):
    assert list(a) == list(b)
    for k in a:
        assert a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]), k


def test_registering_does_not_change_training(ckptd, job):
    """Moving every tensor into ckpt memory (and creating Adam's state up
    front) trains bit for bit like plain PyTorch."""
    m0, o0, s0 = make()
    ref = train(m0, o0, s0, 6)
    m1, o1, s1 = make()
    with ct.Checkpointer(job, model=m1, optimizer=o1, scheduler=s1,
                         socket=ckptd.socket) as ck:
        names = {n for _, n in ck.registered()}
        assert {"fc1.weight", "bn.running_mean", "bn.num_batches_tracked",
                "scale", "state.0.exp_avg", "state.0.exp_avg_sq",
                "state.0.step"} <= names
        for t in list(m1.state_dict().values()):
            assert ck.client.owns(t.data_ptr(), t.numel() *
                                  t.element_size())
            assert t.data_ptr() % ct.ALIGN == 0
        del t
        got = train(m1, o1, s1, 6)
        ck.save(6)
    assert got == ref
    assert_state_equal(m0.state_dict(), m1.state_dict())
    for p0, p1 in zip(m0.parameters(), m1.parameters()):
        for k in ("exp_avg", "exp_avg_sq", "step"):
            assert torch.equal(o0.state[p0][k], o1.state[p1][k])
    # after close the tensors live in ordinary memory again
    assert all(not ck.client.owns(t.data_ptr())
               for t in m1.state_dict().values())


def test_async_save_then_mutation(ckptd, job):
    m, opt, sched = make()
    with ct.Checkpointer(job, model=m, optimizer=opt, scheduler=sched,
                         socket=ckptd.socket) as ck:
        train(m, opt, sched, 2)
        want_m = {k: v.clone() for k, v in m.state_dict().items()}
        want_o = {k: v.clone() for k, v in opt.state[m.fc1.weight].items()}
        t = ck.save(2)                     # returns at STAGED
        assert t.times["staged"] is not None
        train(m, opt, sched, 3)            # mutate at once, in place
        with torch.no_grad():
            m.fc1.weight.fill_(123.0)
        t.wait("committed", timeout=30)
    path = os.path.join(ckptd.root, job, "iter_000000002")
    assert_state_equal(ct.load_state_dict(path), want_m)
    osd = ct.load_optimizer_state_dict(path)
    for k, v in want_o.items():
        assert torch.equal(osd["state"][0][k], v), k


def test_replaced_tensors_are_not_saved_stale(ckptd, job):
    m, opt, sched = make()
    # optimizer state made lazily by the first step, after registering
    ck = ct.Checkpointer(job, model=m, optimizer=opt, socket=ckptd.socket,
                         init_optimizer=False)
    try:
        assert not any(g == ct.OPTIM for g, _ in ck.registered())
        train(m, opt, sched, 1)
        new = torch.full_like(m.fc2.weight, 0.5)
        m.fc2.weight.data = new.clone()                 # a new param.data
        m.bn.running_var = torch.full((32,), 7.0)       # a new buffer
        ck.save(1)
        assert (ct.MODEL, "fc2.weight") in ck.replaced
        assert ck.client.owns(m.fc2.weight.data_ptr())
        assert (ct.OPTIM, "state.0.exp_avg") in ck.registered()
        ck.wait()
        sd = ct.load_state_dict(os.path.join(ckptd.root, job))
        assert torch.equal(sd["fc2.weight"], new)
        assert torch.equal(sd["bn.running_var"], torch.full((32,), 7.0))
        osd = ct.load_optimizer_state_dict(os.path.join(ckptd.root, job))
        assert torch.equal(osd["state"][0]["exp_avg"],
                           opt.state[m.fc1.weight]["exp_avg"])

        # optimizer.load_state_dict() replaces every state tensor
        opt.load_state_dict(opt.state_dict())
        with torch.no_grad():
            opt.state[m.fc1.weight]["exp_avg"].fill_(0.25)
        ck.save(2)
        ck.wait()
        osd = ct.load_optimizer_state_dict(os.path.join(ckptd.root, job))
        assert torch.equal(osd["state"][0]["exp_avg"],
                           torch.full_like(m.fc1.weight, 0.25))
    finally:
        ck.close()

    m, opt, sched = make()
    with ct.Checkpointer(job + ".r", model=m, optimizer=opt,
                         socket=ckptd.socket, on_replaced="raise") as ck:
        m.fc1.weight.data = m.fc1.weight.data.clone()
        with pytest.raises(ct.TensorReplacedError, match="fc1.weight"):
            ck.save(1)


def test_check_finite_refuses_nan(ckptd, job):
    m, opt, sched = make()
    with ct.Checkpointer(job, model=m, optimizer=opt, socket=ckptd.socket,
                         check_finite=True) as ck:
        ck.save(1).wait("committed", timeout=30)
        with torch.no_grad():
            m.fc2.bias[1] = float("nan")
            m.fc2.bias[3] = float("inf")
        with pytest.raises(ct.NonFiniteError,
                           match=r"step 2: model/fc2.bias has 2 "
                                 r"non-finite value\(s\) \(first at flat "
                                 r"index 1: nan\)"):
            ck.save(2)
        assert ckptd.latest(job) == "iter_000000001"
        with torch.no_grad():
            m.fc2.bias.zero_()
            opt.state[m.fc1.bias]["exp_avg_sq"][0] = float("-inf")
        with pytest.raises(ct.NonFiniteError, match="optim/state.1.exp_avg"):
            ck.save(2)
        opt.state[m.fc1.bias]["exp_avg_sq"].zero_()
        ck.save(2)
    assert ckptd.latest(job) == "iter_000000002"


def test_strict_and_partial_restore(ckptd, job):
    m, opt, sched = make()
    progress = {"epoch": 2, "seen": [1, 2, 3], "tag": ("a", 1)}
    with ct.Checkpointer(job, model=m, optimizer=opt, scheduler=sched,
                         progress=progress, socket=ckptd.socket) as ck:
        train(m, opt, sched, 4)
        ck.save(4)
    saved = {k: v.clone() for k, v in m.state_dict().items()}

    # a bigger model: strict restore names what is missing, changes nothing
    m2, opt2, sched2 = make(seed=9, extra=True)
    before = {k: v.clone() for k, v in m2.state_dict().items()}
    p2 = {}
    with ct.Checkpointer(job, model=m2, optimizer=opt2, scheduler=sched2,
                         progress=p2, socket=ckptd.socket) as ck2:
        with pytest.raises(ckpt.RestoreMismatch) as ei:
            ck2.restore()
        assert "model/fc3.weight" in str(ei.value)
        assert "optim/state.6.exp_avg" in str(ei.value)
        assert_state_equal(m2.state_dict(), before)
        res = ck2.restore(partial=True)
        assert res.step == 4
        assert set(res.missing) == {
            "model/fc3.weight", "model/fc3.bias",
            "optim/state.6.exp_avg", "optim/state.6.exp_avg_sq",
            "optim/state.6.step", "optim/state.7.exp_avg",
            "optim/state.7.exp_avg_sq", "optim/state.7.step"}
        assert res.unexpected == [] and not res.complete
    for k, v in saved.items():
        assert torch.equal(m2.state_dict()[k], v), k
    assert torch.equal(m2.fc3.weight, before["fc3.weight"])
    assert p2 == {"epoch": 2, "seen": [1, 2, 3], "tag": ("a", 1)}

    # state the checkpoint lacks: a scheduler it never saved
    m3, opt3, sched3 = make()
    with ct.Checkpointer(job + ".n", model=m3, socket=ckptd.socket) as ck3:
        ck3.save(1)
    with ct.Checkpointer(job + ".n", model=m3, scheduler=sched3,
                         socket=ckptd.socket) as ck3:
        with pytest.raises(ckpt.RestoreMismatch, match="torch.sched"):
            ck3.restore()
        res = ck3.restore(partial=True)
        assert res.missing_blobs == ["torch.sched"] and not res.complete

    # nothing saved yet: a fresh start
    m4, opt4, _ = make()
    with ct.Checkpointer(job + ".fresh", model=m4, optimizer=opt4,
                         socket=ckptd.socket) as ck4:
        assert ck4.restore() is None
        with pytest.raises(ckpt.NoCheckpoint):
            ck4.restore(step=3)

    # checkpoints that no longer verify are not a fresh start
    with ct.Checkpointer(job + ".bad", model=m4, socket=ckptd.socket) as ck5:
        ck5.save(1)
        ck5.save(2)
    for step in (1, 2):
        os.remove(os.path.join(ckptd.job_dir(job + ".bad"), "iter_%09d" % step,
                               "checkpoint_manifest.json"))
    with ct.Checkpointer(job + ".bad", model=m4, socket=ckptd.socket) as ck5:
        with pytest.raises(ckpt.CheckpointDamaged,
                           match="none verifies.*iter_000000002.*iter_000000001"):
            ck5.restore()


def test_restore_brings_back_everything(ckptd, job):
    m, opt, sched = make()
    gen = torch.Generator().manual_seed(5)
    progress = {"step": 0}
    with ct.Checkpointer(job, model=m, optimizer=opt, scheduler=sched,
                         progress=progress, generators={"g": gen},
                         socket=ckptd.socket) as ck:
        train(m, opt, sched, 3)
        progress["step"] = 3
        random.seed(11)
        np.random.seed(12)
        torch.manual_seed(13)
        torch.rand(3, generator=gen)
        ck.save(3)
        draws = (random.random(), np.random.rand(), torch.rand(2),
                 torch.rand(2, generator=gen))
        state = {k: v.clone() for k, v in m.state_dict().items()}
        ost = opt.state_dict()
        sst = sched.state_dict()
        train(m, opt, sched, 2)             # diverge, then go back
        opt.param_groups[0]["lr"] = 0.123
        progress["step"] = 5
        random.random()
        res = ck.restore()
        assert res.step == 3 and res.complete
        assert progress == {"step": 3}
        assert draws[0] == random.random() and draws[1] == np.random.rand()
        assert torch.equal(draws[2], torch.rand(2))
        assert torch.equal(draws[3], torch.rand(2, generator=gen))
        assert_state_equal(m.state_dict(), state)
        assert sched.state_dict() == sst
        now = opt.state_dict()
        assert now["param_groups"] == ost["param_groups"]
        for i, st in ost["state"].items():
            for k, v in st.items():
                assert torch.equal(now["state"][i][k], v), (i, k)


def test_offline_load_matches(ckptd, job):
    m, opt, sched = make()
    m.scale.data = torch.tensor([1.5, -2.0, 0.25, 3.0], dtype=torch.bfloat16)
    with ct.Checkpointer(job, model=m, optimizer=opt, scheduler=sched,
                         socket=ckptd.socket) as ck:
        train(m, opt, sched, 3)
        ck.save(3)
        ck.wait()
        want = {k: v.clone() for k, v in m.state_dict().items()}
        want_opt = opt.state_dict()
    for path in (os.path.join(ckptd.root, job),
                 os.path.join(ckptd.root, job, "iter_000000003")):
        sd = ct.load_state_dict(path)
        assert_state_equal(sd, want)
        assert sd["scale"].dtype == torch.bfloat16
    fresh, fopt, _ = make(seed=3)
    fresh.load_state_dict(ct.load_state_dict(os.path.join(ckptd.root, job)))
    assert_state_equal(fresh.state_dict(), want)
    fopt.load_state_dict(ct.load_optimizer_state_dict(
        os.path.join(ckptd.root, job)))
    got = fopt.state_dict()
    assert got["param_groups"] == want_opt["param_groups"]
    for i, st in want_opt["state"].items():
        for k, v in st.items():
            assert torch.equal(got["state"][i][k], v)
    assert ct.load_blob(os.path.join(ckptd.root, job),
                        "torch.meta")["step"] == 3

    # a flipped byte is caught by the manifest's digest (XXH3-128 by default)
    shard = os.path.join(ckptd.root, job, "iter_000000003", "model",
                         "rank_00000.safetensors")
    flip_last_byte(shard)
    with pytest.raises(ValueError, match="xxh3_128"):
        ct.load_state_dict(os.path.join(ckptd.root, job))
    with pytest.raises(KeyError, match="rank_00003"):
        ct.load_state_dict(os.path.join(ckptd.root, job), rank=3,
                           verify=False)


def sorted_sd(sd):
    """A state dict by name: offline, frozen tensors come after the rest of
    their group."""
    return {k: sd[k] for k in sorted(sd)}


class Tuned(torch.nn.Module):
    """A fine-tune's shape: a 2 MiB base (frozen by the test), a head."""
    def __init__(self):
        super().__init__()
        self.base = torch.nn.Linear(512, 1024)
        self.head = torch.nn.Linear(1024, 4)

    def forward(self, x):
        return self.head(torch.relu(self.base(x)))


def make_tuned(seed=0, freeze=True):
    torch.manual_seed(seed)
    m = Tuned()
    for p in m.base.parameters():
        p.requires_grad_(not freeze)
    return m, torch.optim.Adam(m.parameters(), lr=1e-2)


def train_tuned(m, opt, steps):
    g = torch.Generator().manual_seed(1)
    for _ in range(steps):
        loss = m(torch.randn(8, 512, generator=g)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


def test_frozen_parameters_are_linked(ckptd, job):
    """A fine-tune: the base frozen (requires_grad=False).  Its parameters
    go in model/rank_00000.frozen.safetensors, which the second save links
    to the first's (the same inode: not written again); what trains stays
    in model/rank_00000.safetensors.  Both steps load offline and restore
    bit-exact; unfreezing moves the base back at the next save;
    frozen=False keeps one file."""
    m, opt = make_tuned()
    root = os.path.join(ckptd.root, job)
    frozen = "model/rank_00000.frozen.safetensors"
    with ct.Checkpointer(job, model=m, optimizer=opt, socket=ckptd.socket) as ck:
        train_tuned(m, opt, 2)
        ck.save(1)
        ck.wait()
        train_tuned(m, opt, 2)
        ck.save(2)
        ck.wait()
        want = {k: v.clone() for k, v in m.state_dict().items()}
        st = [os.stat(os.path.join(root, "iter_%09d" % s, frozen)) for s in (1, 2)]
        assert st[0].st_ino == st[1].st_ino and st[1].st_nlink == 2
        m2 = ct.read_manifest(os.path.join(root, "iter_000000002"))
        assert m2["format_version"] == 4
        in_frozen = sorted(t["name"] for t in m2["tensors"]
                           if m2["files"][t["file"]]["path"] == frozen)
        assert in_frozen == ["base.bias", "base.weight"]
        assert m2["bytes_written"] < sum(f["size"] for f in m2["files"]) / 2
        assert_state_equal(sorted_sd(ct.load_state_dict(root)), sorted_sd(want))

        for p in m.base.parameters():
            p.requires_grad_(True)
        ck.save(3)
        ck.wait()
        m3 = ct.read_manifest(os.path.join(root, "iter_000000003"))
        assert all(f["path"] != frozen for f in m3["files"])
        assert_state_equal(sorted_sd(ct.load_state_dict(root)), sorted_sd(want))

    fresh, fopt = make_tuned(seed=5)           # frozen as it was at step 2
    with ct.Checkpointer(job, model=fresh, optimizer=fopt,
                         socket=ckptd.socket) as ck:
        assert ck.restore(2).step == 2
        assert_state_equal(sorted_sd(fresh.state_dict()), sorted_sd(want))

    m, opt = make_tuned()
    with ct.Checkpointer(job + "-one", model=m, optimizer=opt,
                         socket=ckptd.socket, frozen=False) as ck:
        ck.save(1)
        ck.wait()
        mo = ct.read_manifest(os.path.join(ckptd.root, job + "-one"))
        assert [f["path"] for f in mo["files"] if "frozen" in f["path"]] == []


def test_offline_load_checks_headers(ckptd, job):
    """A manifest that says another dtype than the file's header (same
    bytes: F32 and I32) is refused offline, not loaded under either."""
    import json
    m, opt, sched = make()
    with ct.Checkpointer(job, model=m, optimizer=opt, socket=ckptd.socket) as ck:
        ck.save(1)
        ck.wait()
    d = os.path.join(ckptd.root, job, "iter_000000001")
    path = os.path.join(d, "checkpoint_manifest.json")
    man = json.load(open(path))
    t = next(t for t in man["tensors"] if t["name"] == "fc1.weight")
    assert t["dtype"] == "F32"
    t["dtype"] = "I32"
    os.chmod(path, 0o600)
    with open(path, "w") as f:
        json.dump(man, f)
    with pytest.raises(ValueError, match="fc1.weight is I32 .* in the manifest, F32"):
        ct.load_state_dict(d, verify=False)


def test_file_digests_offline(tmp_path):
    """The offline reader checks each file with the digest its manifest
    entry names: XXH3-128 (known values) or SHA-256 (a format-2 fixture
    written before XXH3-128 existed); one with no known digest is refused."""
    import json
    import shutil
    assert ct.DIGESTS["xxh3_128"](b"") == "99aa06d3014798d86001c324468d497f"
    assert ct.DIGESTS["xxh3_128"](bytearray(b"abc")) == \
        "06b05ab6733a618578af5f94892f3950"
    top = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                       "..", "..")
    jd = str(tmp_path / "fix2")
    shutil.copytree(os.path.join(top, "tests", "fixtures", "ckpt_v2", "fix2"),
                    jd)
    sd = ct.load_state_dict(jd, group="model", rank=1)
    assert sd and all(t.numel() for t in sd.values())
    shard = os.path.join(jd, "iter_000000007", "model",
                         "rank_00001.safetensors")
    flip_last_byte(shard)
    with pytest.raises(ValueError, match="sha256 [0-9a-f]{64} does not match"):
        ct.load_state_dict(jd, group="model", rank=1)
    mp = os.path.join(jd, "iter_000000007", "checkpoint_manifest.json")
    m = json.load(open(mp))
    for f in m["files"]:
        f["blake3"] = f.pop("sha256")
    os.chmod(mp, 0o644)
    json.dump(m, open(mp, "w"))
    with pytest.raises(ValueError, match="no digest"):
        ct.load_state_dict(jd, group="optim", rank=0)


def test_blob_codec_roundtrip():
    v = {"a": (1, 2.5, None), 3: [b"x", float("nan")],
         "__ckpt_x": torch.arange(4, dtype=torch.bfloat16),
         "n": np.arange(3, dtype=np.uint32), "s": np.float32(1.5),
         "e": torch.empty(0, 3)}
    got = ct.decode_blob(ct.encode_blob(v))
    assert got["a"] == (1, 2.5, None) and got[3][0] == b"x"
    assert got[3][1] != got[3][1]
    assert torch.equal(got["__ckpt_x"], v["__ckpt_x"])
    assert got["n"].dtype == np.uint32 and list(got["n"]) == [0, 1, 2]
    assert got["s"] == np.float32(1.5) and got["s"].dtype == np.float32
    assert got["e"].shape == (0, 3)
    # what JSON cannot carry falls back to pickle, refused offline
    blob = ct.encode_blob({"f": Net})
    with pytest.raises(ValueError, match="allow_pickle"):
        ct.decode_blob(blob)
    assert ct.decode_blob(blob, allow_pickle=True)["f"] is Net


def _worker(ckptd, job, steps, every, pause_at=0, dump=None):
    cmd = [sys.executable, EXAMPLE, "worker", "--socket", ckptd.socket,
           "--job", job, "--steps", str(steps), "--every", str(every)]
    if pause_at:
        cmd += ["--pause-at", str(pause_at)]
    if dump:
        cmd += ["--dump", dump]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)


def _parse(lines):
    out = {"loss": {}, "saved": [], "restored": None, "final": None}
    for ln in lines:
        w = ln.split()
        if w and w[0] == "loss":
            out["loss"][int(w[1])] = w[2]
        elif w and w[0] == "saved":
            out["saved"].append(int(w[1]))
        elif w and w[0] == "restored":
            out["restored"] = None if w[1] == "none" else int(w[1])
        elif w and w[0] == "final":
            out["final"] = w[1]
    return out


def test_kill_and_resume_is_bit_identical(ckptd, job, tmp_path):
    """The example's trainer, SIGKILLed after some checkpoints and started
    again, ends exactly like an uninterrupted run: loss at every step,
    weights, AdamW moments and step, scheduler, progress, every RNG."""
    steps, every, kill = 90, 10, 67     # the LR halves at step 60
    pa = _worker(ckptd, job + ".a", steps, every, dump=str(tmp_path / "a.pt"))
    pb = _worker(ckptd, job + ".b", steps, every, pause_at=kill)
    first = []
    for ln in pb.stdout:
        first.append(ln)
        if ln.startswith("paused"):
            break
    assert first and first[-1].startswith("paused"), "".join(first)
    os.kill(pb.pid, signal.SIGKILL)
    assert pb.wait() == -signal.SIGKILL
    pb.stdout.close()
    b1 = _parse(first)
    assert b1["restored"] is None and b1["saved"] == [10, 20, 30, 40, 50, 60]

    pb = _worker(ckptd, job + ".b", steps, every, dump=str(tmp_path / "b.pt"))
    b2 = _parse(pb.stdout.readlines())
    a = _parse(pa.stdout.readlines())
    assert pb.wait() == 0 and pa.wait() == 0
    for p in (pa, pb):
        p.stdout.close()

    # B resumed from its newest committed checkpoint, before the kill
    assert b2["restored"] in (50, 60), b2["restored"]
    r = b2["restored"]
    assert sorted(b2["loss"]) == list(range(r + 1, steps + 1))
    for s in range(1, steps + 1):
        assert a["loss"][s] == (b2["loss"][s] if s > r
                                else b1["loss"][s]), "loss at step %d" % s
    for s in range(r + 1, kill + 1):        # steps B ran twice
        assert b1["loss"][s] == b2["loss"][s]
    assert a["final"] == b2["final"]

    sa = torch.load(str(tmp_path / "a.pt"), weights_only=False)
    sb = torch.load(str(tmp_path / "b.pt"), weights_only=False)
    assert_state_equal(sa["model"], sb["model"])
    oa, ob = sa["optim"], sb["optim"]
    assert oa["param_groups"] == ob["param_groups"]
    assert oa["state"].keys() == ob["state"].keys()
    for i in oa["state"]:
        for k in ("exp_avg", "exp_avg_sq", "step"):
            assert torch.equal(oa["state"][i][k], ob["state"][i][k]), (i, k)
    assert float(oa["state"][0]["step"]) == steps
    assert sa["sched"] == sb["sched"] and sa["progress"] == sb["progress"]
    assert sa["rng_state"]["python"] == sb["rng_state"]["python"]
    na, nb = sa["rng_state"]["numpy"], sb["rng_state"]["numpy"]
    assert na[0] == nb[0] and np.array_equal(na[1], nb[1]) and \
        na[2:] == nb[2:]
    assert torch.equal(sa["rng_state"]["torch"], sb["rng_state"]["torch"])
    assert torch.equal(sa["rng_state"]["noise"], sb["rng_state"]["noise"])
    da, db = sa["rng_draws"], sb["rng_draws"]
    assert da["python"] == db["python"] and da["numpy"] == db["numpy"]
    assert torch.equal(da["torch"], db["torch"])
    assert torch.equal(da["noise"], db["noise"])


def test_example_demo(ckptd):
    """The example end to end (its own kill and resume), as a user runs it;
    the test above checks the same claim independently."""
    p = subprocess.run([sys.executable, EXAMPLE, "--socket", ckptd.socket,
                        "--steps", "60", "--every", "10", "--kill-at", "35"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stdout
    assert "IDENTICAL" in p.stdout
    assert re.search(r"resumed from step (20|30)\.", p.stdout), p.stdout
    a, b = [ln.split()[1] for ln in p.stdout.splitlines()
            if ln.strip().startswith(("A ", "B "))]
    assert a == b and len(a) == 64


class WithExtra(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(2, 2)
        self.vocab = {"a": 1}

    def get_extra_state(self):
        return {"vocab": dict(self.vocab)}

    def set_extra_state(self, state):
        self.vocab = dict(state["vocab"])


def test_model_extra_state_and_stateful(ckptd, job):
    class Counter:
        def __init__(self):
            self.n = 0

        def state_dict(self):
            return {"n": self.n}

        def load_state_dict(self, sd):
            self.n = sd["n"]

    m, cnt = WithExtra(), Counter()
    with ct.Checkpointer(job, model=m, stateful={"counter": cnt},
                         socket=ckptd.socket) as ck:
        m.vocab["b"] = 2
        cnt.n = 41
        ck.save(1)
        m.vocab.clear()
        cnt.n = 0
        assert ck.restore().step == 1
    assert m.vocab == {"a": 1, "b": 2} and cnt.n == 41


@pytest.mark.parametrize("name", ["SGD", "Adam", "AdamW", "NAdam", "RAdam",
                                  "Adamax", "Adadelta", "Adagrad", "RMSprop",
                                  "Rprop"])
def test_init_optimizer_state_acts_fresh(name):
    """State made up front (so that restore has somewhere to write) leaves
    the optimizer behaving exactly as a fresh one."""
    cls = getattr(torch.optim, name)
    kw = {"momentum": 0.9} if name == "SGD" else {}
    if "weight_decay" in cls.__init__.__code__.co_varnames:
        kw["weight_decay"] = 0.1
    runs = []
    for init in (False, True):
        torch.manual_seed(0)
        m = torch.nn.Linear(3, 2)
        opt = cls(m.parameters(), lr=0.1, **kw)
        if init:
            made = ct.init_optimizer_state(opt)
            assert made == (name != "Adagrad")  # Adagrad makes it at once
            assert all(opt.state[p] for p in m.parameters())
            assert all(p.grad is None for p in m.parameters())
            assert opt.param_groups[0].get("weight_decay") == \
                kw.get("weight_decay", opt.defaults.get("weight_decay"))
        x = torch.randn(4, 3, generator=torch.Generator().manual_seed(1))
        for _ in range(3):
            opt.zero_grad()
            m(x).pow(2).sum().backward()
            opt.step()
        runs.append(m.weight.detach().clone())
    assert torch.equal(runs[0], runs[1])


class _AB(torch.nn.Module):
    def __init__(self, layers):
        super().__init__()
        for name in layers:
            setattr(self, name, torch.nn.Linear(2, 2))


def test_partial_restore_drops_optimizer_state_of_moved_parameters(ckptd,
                                                                   job):
    """Optimizer state is saved by position: restored into a model without
    layer a, position 0 holds b's parameter, whose saved state was a's.
    partial=True drops it (b's exp_avg came back with a's values before);
    strict refuses."""
    net = _AB("ab")
    opt = torch.optim.Adam(net.parameters())
    with ct.Checkpointer(job, socket=ckptd.socket, model=net,
                         optimizer=opt) as ck:
        for i, p in enumerate(_opt_params_of(opt)):
            opt.state[p]["exp_avg"].fill_(i + 1)
        ck.save(1, wait="committed")
    few = _AB("b")
    opt2 = torch.optim.Adam(few.parameters())
    with ct.Checkpointer(job, socket=ckptd.socket, model=few,
                         optimizer=opt2) as ck:
        res = ck.restore(partial=True)
        assert res.step == 1
        moved = [m for m in res.missing_blobs if "saved for a.weight" in m]
        assert moved, res.missing_blobs
        for p in few.parameters():
            st = opt2.state.get(p, {})
            # whatever is left is b's own (3, 4), never a's (1, 2)
            if "exp_avg" in st:
                assert float(st["exp_avg"].flatten()[0]) in (3.0, 4.0), st


def _opt_params_of(opt):
    return [p for g in opt.param_groups for p in g["params"]]
