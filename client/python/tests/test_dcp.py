"""ckpt.dcp: torch.distributed.checkpoint through ckptd (4 processes save,
2 load, gloo on CPU), async_save, verification, and the errors."""
import os
import pickle
import subprocess

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed "
                            "(make deps: build/venv)")
pytest.importorskip("torch.distributed.checkpoint")

import ckpt                                   # noqa: E402
import ckpt.dcp                               # noqa: E402
import ckpt.torch                             # noqa: E402
from conftest import TOP, flip_last_byte     # noqa: E402
from dist_worker import reference             # noqa: E402
from distrun import launch                    # noqa: E402
from torch.distributed.checkpoint.api import CheckpointException  # noqa



def test_save4_async_load2(ckptd, job, tmp_path):
    out = str(tmp_path)
    saved = launch("dcp_save", 4, ckptd, job, out, "async")
    ref = reference()
    assert torch.equal(saved[3]["rows"], ref["rows"][9:])    # 3,3,3,1 rows
    jd = ckptd.job_dir(job)
    assert ckptd.latest(job) == "iter_000000020"
    for step in (10, 20):
        d = os.path.join(jd, "iter_%09d" % step)
        r = subprocess.run([os.path.join(TOP, "ckptctl"), "verify", d],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr
        m = ckpt.torch.read_manifest(d)
        # rank-local tensors, or pieces of global ones where libckpt has
        # them (then list/verify/prune/export see whole tensors)
        names = [t["name"] for t in m["tensors"] if t["group"] == "dcp"]
        for g in m.get("globals", []):
            names += [g["name"]] * len(g["pieces"])
        assert ("globals" in m) == ckpt.has_global_tensors()
        assert names.count("rep") == 1          # replicated: written once
        assert names.count("rows") == 4 and names.count("cols") == 4
        assert [b["rank"] for b in m["blobs"]
                if b["name"] == ckpt.dcp.METADATA_BLOB] == [0]

    # DCP's resharding through CkptReader: 2 ranks read the latest (the
    # async save, where "rep" was changed) out of 4 ranks' chunks
    got = launch("dcp_load", 2, ckptd, job, out,
                 env={"CKPT_TEST_PATH": jd})
    for r, g in enumerate(got):
        assert torch.equal(g["rep"], ref["rep"] + 1)
        assert torch.equal(g["rows"], ref["rows"].tensor_split(2)[r])
        assert torch.equal(g["cols"], ref["cols"].tensor_split(2, 1)[r])
        assert torch.equal(g["ints"], ref["ints"].chunk(2)[r])
        assert torch.equal(g["one"], ref["one"].tensor_split(2)[r])
        assert g["extra"] == {"epoch": 3, "name": "run-a",
                              "lr": [0.1, 0.01]}

    if ckpt.has_global_tensors():
        # an ordinary checkpoint: ckptctl export writes whole tensors in the
        # Hugging Face layout, read back by the safetensors package
        st = pytest.importorskip("safetensors.torch")
        hf = os.path.join(out, "hf")
        r = subprocess.run([os.path.join(TOP, "ckptctl"), "export",
                            os.path.join(jd, "iter_000000020"), hf,
                            "--group", "dcp"],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        whole = {}
        for f in sorted(os.listdir(hf)):
            if f.endswith(".safetensors"):
                whole.update(st.load_file(os.path.join(hf, f)))
        assert torch.equal(whole["rep"], ref["rep"] + 1)
        for k in ("rows", "cols", "ints", "one"):
            assert torch.equal(whole[k], ref[k]), k

    # in this process, without torch.distributed: the whole tensors (4 -> 1)
    import torch.distributed.checkpoint as dcp
    whole = {"rep": torch.zeros(5, 3), "rows": torch.zeros(10, 4),
             "cols": torch.zeros(3, 7, dtype=torch.bfloat16),
             "ints": torch.zeros(11, dtype=torch.int64), "extra": {}}
    dcp.load(whole, storage_reader=ckpt.dcp.CkptReader(path=jd),
             checkpoint_id=10, no_dist=True)
    for k in ("rep", "rows", "cols", "ints"):
        assert torch.equal(whole[k], ref[k]), k

    # a flipped byte in a file the load reads is refused, naming the file
    victim = os.path.join(jd, "iter_000000010", "dcp",
                          "rank_00002.safetensors")
    flip_last_byte(victim)
    with pytest.raises(CheckpointException, match="rank_00002.safetensors: xxh3_128"):
        dcp.load(whole, storage_reader=ckpt.dcp.CkptReader(path=jd),
                 checkpoint_id=10, no_dist=True)


def test_writer_needs_a_step(ckptd, job):
    import torch.distributed.checkpoint as dcp
    w = ckpt.dcp.CkptWriter(job, socket=ckptd.socket)
    with pytest.raises(CheckpointException, match="needs a step"):
        dcp.save({"a": torch.zeros(2)}, storage_writer=w, no_dist=True)
    for bad in ("/tmp/x", 1.5):
        with pytest.raises(ValueError, match="not a step"):
            dcp.save({"a": torch.zeros(2)}, storage_writer=w, no_dist=True,
                     checkpoint_id=bad)
    w.close()
    # a step that is not there (never saved, or pruned) is named as such
    with pytest.raises(CheckpointException, match="no checkpoint iter_000000007"):
        dcp.load({"a": torch.zeros(2)}, storage_reader=ckpt.dcp.CkptReader(
            job, root=ckptd.root), checkpoint_id=7, no_dist=True)


def test_single_process_round_trip(ckptd, job):
    import torch.distributed.checkpoint as dcp
    sd = {"w": torch.arange(6.).reshape(2, 3), "n": 5,
          "h": torch.ones(3, dtype=torch.float16)}
    with ckpt.dcp.CkptWriter(job, socket=ckptd.socket, step=1) as w:
        dcp.save(sd, storage_writer=w, no_dist=True)
        sd["w"].add_(1)
        dcp.save(sd, storage_writer=w, no_dist=True)    # step 2
    assert ckptd.latest(job) == "iter_000000002"
    back = {"w": torch.zeros(2, 3), "n": 0,
            "h": torch.zeros(3, dtype=torch.float16)}
    dcp.load(back, storage_reader=ckpt.dcp.CkptReader(
        job, root=ckptd.root), no_dist=True)
    assert torch.equal(back["w"], sd["w"]) and back["n"] == 5
    assert torch.equal(back["h"], sd["h"])
    dcp.load(back, storage_reader=ckpt.dcp.CkptReader(
        job, root=ckptd.root), checkpoint_id=1, no_dist=True)
    assert torch.equal(back["w"], sd["w"] - 1)


def test_reader_errors(ckptd, job, tmp_path):
    import torch.distributed.checkpoint as dcp
    with pytest.raises(CheckpointException, match="latest_checkpoint"):
        dcp.load({"w": torch.zeros(1)}, no_dist=True,
                 storage_reader=ckpt.dcp.CkptReader(job, root=ckptd.root))
    # a checkpoint not written through DCP
    with ckpt.Client(job, socket=ckptd.socket) as c:
        region = c.alloc(64)
        w = torch.frombuffer(region.buffer, dtype=torch.float32, count=4)
        c.register("model", "w", w)
        c.put_blob(ckpt.dcp.METADATA_BLOB, pickle.dumps({"x": 1}))
        c.save(3).wait()
        del w
    with pytest.raises(CheckpointException, match="no ckpt.dcp metadata"):
        dcp.load({"w": torch.zeros(1)}, no_dist=True,
                 storage_reader=ckpt.dcp.CkptReader(job, root=ckptd.root))
