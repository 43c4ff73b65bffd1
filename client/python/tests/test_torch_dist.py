"""ckpt.torch.Checkpointer on distributed PyTorch 2 (processes, gloo, CPU):
DDP as replicated global tensors (one copy on disk), killed and resumed,
restored into another world size; FSDP2 (fully_shard, DTensor pieces)
saved by 4 ranks and restored into 2 and 3."""
import errno
import os

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed "
                            "(make deps: build/venv)")
pytest.importorskip("torch.distributed.tensor")

import ckpt                                   # noqa: E402
import ckpt.torch                             # noqa: E402
from conftest import flip_last_byte          # noqa: E402
from distrun import launch                    # noqa: E402

pytestmark = pytest.mark.skipif(
    not ckpt.has_global_tensors(),
    reason="libckpt has no global tensors (ckpt_register_global, issue 13)")


def _same_state(a, b, what):
    """(a function: no view of ckpt memory outlives it in a local)"""
    assert a.keys() == b.keys(), what
    for k in a:
        assert torch.equal(a[k], b[k]), "%s: %s" % (what, k)


def _same_optim(a, b):
    assert a["param_groups"] == b["param_groups"]
    assert a["state"].keys() == b["state"].keys()
    for i in a["state"]:
        _same_state(a["state"][i], b["state"][i], "optimizer state %d" % i)


def _group_bytes(jd, step, group):
    m = ckpt.torch.read_manifest(os.path.join(jd, "iter_%09d" % step))
    return sum(f["size"] for f in m["files"]
               if f["path"].startswith(group + "/"))


def test_ddp_killed_resumed_and_restored_into_2(ckptd, job, tmp_path):
    out = str(tmp_path)
    env = {"CKPT_ROOT": ckptd.root}
    steps, every, kill = 12, 4, 10
    # the uninterrupted run, and one killed at step 10 (after saving at 8)
    os.mkdir(out + "/u")
    u = launch("ddp", 4, ckptd, job + ".u", out + "/u", steps, every,
               env=env)
    k = launch("ddp", 4, ckptd, job, out, steps, every, kill, env=env)
    assert k[0]["restored"] is None and sorted(k[0]["loss"]) == \
        list(range(1, kill + 1))
    # resumed with 4 ranks from step 8: the same losses and final state
    os.mkdir(out + "/r")
    r = launch("ddp", 4, ckptd, job, out + "/r", steps, every, env=env)
    assert r[0]["restored"] == 8
    for s in range(1, steps + 1):
        want = u[0]["loss"][s]
        got = k[0]["loss"][s] if s <= 8 else r[0]["loss"][s]
        assert got == want, "loss at step %d" % s
    for rank in range(4):
        _same_state(r[rank]["model"], u[rank]["model"], "model")
        _same_optim(r[rank]["optim"], u[rank]["optim"])
    assert r[0]["eval"] == u[0]["eval"]

    # one copy on disk, not four: the model group holds one model's bytes
    one = sum(v.numel() * v.element_size() for v in u[0]["model"].values())
    jd = ckptd.job_dir(job)
    assert one <= _group_bytes(jd, 12, "model") <= one + 4 * 4096

    # restored into 2 ranks: weights, optimizer state and loss as saved
    os.mkdir(out + "/two")
    two = launch("ddp", 2, ckptd, job, out + "/two", steps, every,
                 "restore", 12, env=env)
    for rank in range(2):
        assert two[rank]["restored"] == 12
        _same_state(two[rank]["model"], u[0]["model"], "model in 2")
        _same_optim(two[rank]["optim"], u[0]["optim"])
        assert two[rank]["eval"] == u[0]["eval"]


def test_fsdp2_saved_by_4_restored_into_2_and_3(ckptd, job, tmp_path):
    out = str(tmp_path)
    env = {"CKPT_ROOT": ckptd.root}
    saved = launch("fsdp", 4, ckptd, job, out, "save", env=env)
    full = saved[0]["full"]
    assert any(k.startswith("optim.") and k.endswith("exp_avg")
               for k in full)
    m = ckpt.torch.read_manifest(ckptd.job_dir(job))
    assert m["world_size"] == 4 and m["globals"]
    for world in (2, 3):
        os.mkdir("%s/%d" % (out, world))
        got = launch("fsdp", world, ckptd, job, "%s/%d" % (out, world),
                     "load", env=env)
        for rank in range(world):
            g = got[rank]["full"]
            assert g.keys() == full.keys()
            for k in full:
                assert torch.equal(g[k], full[k]), (world, rank, k)
            # each rank's own piece: its dim-0 chunk of the saved value
            for k, loc in got[rank]["local"].items():
                want = full["model." + k].chunk(world)
                want = want[rank] if rank < len(want) else \
                    full["model." + k][:0]
                assert torch.equal(loc, want), (world, rank, k)


def test_damaged_blob_after_a_world_size_change(ckptd, job, tmp_path):
    """Saved by 2 ranks, restored by 3: rank 1's RNG blob of the newest
    step is damaged (rank 1 reads it from the files: ckptd serves blobs
    only within one world size).  Every rank restores the step before,
    weights and progress together (rank 1 raised alone, the others hung
    until it exited)."""
    out, env = str(tmp_path), {"CKPT_ROOT": ckptd.root}
    launch("blobs", 2, ckptd, job, out, "save", env=env)
    flip_last_byte(os.path.join(ckptd.job_dir(job), "iter_000000004",
                                "extra", "rank_00001", "torch.rng"))
    os.mkdir(out + "/3")
    got = launch("blobs", 3, ckptd, job, out + "/3", "load", env=env)
    for rank in range(3):
        g = got[rank]
        assert g["step"] == 2 and g["progress"] == {"step": 2}, (rank, g)
        assert bool((g["weight"] == 2).all()), rank
        assert g["skipped"] and g["skipped"][0][0] == 4, g["skipped"]


def test_nan_on_one_rank_refused_on_all(ckptd, job, tmp_path):
    """check_finite with a NaN in one rank's piece: every rank's save is
    refused, then the next step commits (the other ranks' saves used to be
    accepted and wait for rank 1 until the step's deadline)."""
    got = launch("nan", 2, ckptd, job, str(tmp_path), env={
        "CKPT_ROOT": ckptd.root})
    assert "w has 1 non-finite" in got[1]["refused"], got[1]
    assert "another rank holds non-finite" in got[0]["refused"], got[0]
    assert ckpt.torch.read_manifest(ckptd.job_dir(job))["step"] == 2


def test_2d_mesh_replicated_over_different_dims(ckptd, job, tmp_path):
    """Tensors replicated over different dims of a (2, 2) mesh: each piece
    is written by one of its replicas (a rank's writers once depended on
    what else it held, and the save was refused: "none of ranks wrote
    it"); restored into 2 ranks as saved."""
    out, env = str(tmp_path), {"CKPT_ROOT": ckptd.root}
    saved = launch("mesh2d", 4, ckptd, job, out, "save", env=env)
    os.mkdir(out + "/2")
    got = launch("mesh2d", 2, ckptd, job, out + "/2", "load", env=env)
    for rank in range(2):
        for k in ("v", "u"):
            assert torch.equal(got[rank][k], saved[0][k]), (rank, k)


def _net(extra=False):
    torch.manual_seed(0)
    layers = [torch.nn.Linear(4, 3), torch.nn.Linear(3, 2)]
    if extra:
        layers.append(torch.nn.Linear(2, 2))
    return torch.nn.Sequential(*layers)


def test_global_restore_strict_partial_and_walk_back(ckptd, job):
    """One process, replicated=True: the global-tensor restore's rules."""
    net = _net()
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    with ckpt.torch.Checkpointer(job, socket=ckptd.socket, model=net,
                                 optimizer=opt, replicated=True,
                                 root=ckptd.root) as ck:
        ck.save(1)
        first = {k: v.clone() for k, v in net.state_dict().items()}
        with torch.no_grad():
            for p in net.parameters():
                p.add_(1)
        ck.save(2)
    m = ckpt.torch.read_manifest(ckptd.job_dir(job))
    assert {g["name"] for g in m["globals"]} >= {"0.weight", "1.bias"}
    want = {k: v.clone() for k, v in net.state_dict().items()}

    # strict: a model with a layer more is refused, and nothing changes
    big = _net(extra=True)
    before = {k: v.clone() for k, v in big.state_dict().items()}
    with ckpt.torch.Checkpointer(job, socket=ckptd.socket, model=big,
                                 replicated=True, root=ckptd.root) as ck:
        with pytest.raises(ckpt.RestoreMismatch,
                           match="model/2.weight.*not in it"):
            ck.restore()
        _same_state(big.state_dict(), before, "after a refused restore")
        res = ck.restore(partial=True)
        assert res.step == 2 and "model/2.weight" in res.missing
        _same_state({k: big.state_dict()[k] for k in want}, want, "partial")

    # a damaged newest checkpoint: the one before it is restored
    victim = os.path.join(ckptd.job_dir(job), "iter_000000002", "model",
                          "rank_00000.safetensors")
    flip_last_byte(victim)
    small = _net()
    with torch.no_grad():
        for p in small.parameters():
            p.zero_()
    with ckpt.torch.Checkpointer(job, socket=ckptd.socket, model=small,
                                 replicated=True, root=ckptd.root) as ck:
        res = ck.restore(partial=True)
        assert res.step == 1 and res.skipped and res.skipped[0][0] == 2
        assert "does not match its CRC32C" in res.skipped[0][1]
        _same_state(small.state_dict(), first, "step 1")
        with pytest.raises(ckpt.CkptError, match="CRC32C") as e:
            ck.restore(step=2)
        assert e.value.errno == errno.EBADMSG

    # a model with a layer less: strict refuses before writing anything,
    # partial restores the rest and lists what the model lacks
    few = torch.nn.Sequential(torch.nn.Linear(4, 3))
    with torch.no_grad():
        few[0].weight.zero_()
    with ckpt.torch.Checkpointer(job, socket=ckptd.socket, model=few,
                                 replicated=True, root=ckptd.root) as ck:
        with pytest.raises(ckpt.RestoreMismatch,
                           match="does not register: model/1.bias"):
            ck.restore(step=1)
        assert not few[0].weight.any()
        res = ck.restore(step=1, partial=True)
        assert sorted(res.unexpected) == ["model/1.bias", "model/1.weight"]
        assert torch.equal(few[0].weight, first["0.weight"])


def test_ranks_walk_back_together(ckptd, job, tmp_path):
    """Rank 1's piece of the newest step is damaged; rank 0's is not.  Both
    ranks restore the step before it, never one step each."""
    out, env = str(tmp_path), {"CKPT_ROOT": ckptd.root}
    launch("shards", 2, ckptd, job, out, "save", env=env)
    flip_last_byte(os.path.join(ckptd.job_dir(job), "iter_000000002",
                                "model", "rank_00001.safetensors"))
    got = launch("shards", 2, ckptd, job, out, "load", env=env)
    for rank in range(2):
        assert got[rank]["step"] == 1, (rank, got[rank]["skipped"])
        assert bool((got[rank]["local"] == 10 + rank).all()), rank
