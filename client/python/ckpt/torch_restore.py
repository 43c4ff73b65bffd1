"""ckpt.torch_restore - a Checkpointer with global tensors (DDP, FSDP2,
DTensor) restores from the checkpoint's files, in any world size: each
registered piece is put together from the saved pieces that overlap it
(ckpt.ondisk), the newest checkpoint that reads and verifies is taken, and
nothing is changed unless everything asked for was read.

Blobs (optimizer param groups, scheduler, progress, RNG) come from the same
rank of the saved run, or from rank (rank % saved world size) when the run
had fewer ranks.
"""
import errno
import os
import re
import time

import torch

from . import NoCheckpoint, RestoreMismatch, RestoreResult
from . import ondisk
from . import torch as _ct
from . import torch_dist as _td

_ITER = re.compile(r"iter_([0-9]{9})")


def _steps(job_dir):
    """The job's checkpoints, newest first."""
    try:
        names = os.listdir(job_dir)
    except FileNotFoundError:
        return []
    return sorted((int(m.group(1)) for m in map(_ITER.fullmatch, names)
                   if m), reverse=True)


def _read(ck, recs, rank, same_world):
    """{key: tensor read} for every registered tensor the checkpoint has,
    and the lists of missing and unexpected "group/name"."""
    got, missing = {}, []
    for key, rec in recs.items():
        group, name = key
        want = _ct.TO_ST[rec.dtype]
        if rec.piece is None:
            e = ck.local(group, rank, name) if same_world else None
            if e is None or e["dtype"] != want or \
                    tuple(e["shape"]) != rec.shape:
                missing.append("%s/%s" % key)
                continue
            got[key] = ck.read(e)
            continue
        g = ck.global_tensor(group, name)
        if g is None or g["dtype"] != want or \
                tuple(g["shape"]) != rec.piece.global_shape:
            missing.append("%s/%s" % key)
            continue
        out = torch.empty(rec.shape, dtype=rec.dtype)
        if out.numel():
            ck.read_global_into(group, name, out, rec.piece.offset)
        got[key] = out
    groups = {k[0] for k in recs}
    unexpected = ["%s/%s" % (g["group"], g["name"])
                  for g in ck.globals() if g["group"] in groups and
                  (g["group"], g["name"]) not in recs]
    return got, missing, unexpected


def from_files(ckp, step, partial):
    """Checkpointer.restore() for a run with global tensors."""
    client = ckp.client
    job_dir = os.path.join(ckp.root or ondisk.default_root(), client.job)
    latest = step in (None, "latest")
    steps = _steps(job_dir) if latest else [int(step)]
    t0 = time.monotonic()
    skipped = []
    for s in steps:
        try:
            ck = ondisk.Checkpoint(job_dir, s)
            same = ck.world_size == client.world_size
            got, missing, unexpected = _read(ck, ckp._recs, client.rank,
                                             same)
        except (OSError, ValueError, KeyError) as e:
            if not latest:
                raise RestoreMismatch(errno.EIO, "iter_%09d: %s" % (s, e),
                                      "restore") from e
            skipped.append((s, str(e)))
            continue
        break
    else:
        if latest:
            if skipped:
                raise NoCheckpoint(errno.ENOENT, "no checkpoint of %s "
                                   "reads back: %s" % (job_dir, "; ".join(
                                       "iter_%09d: %s" % x for x in
                                       skipped)), "restore")
            return None
        raise NoCheckpoint(errno.ENOENT, "%s has no iter_%09d" %
                           (job_dir, int(step)), "restore")
    if (missing or unexpected) and not partial:
        raise RestoreMismatch(errno.EINVAL, "iter_%09d (world size %d) does "
                              "not match: missing %s; unexpected %s "
                              "(partial=True restores the rest)" %
                              (ck.step, ck.world_size,
                               ", ".join(missing) or "none",
                               ", ".join(unexpected) or "none"), "restore")
    src = client.rank if client.rank < ck.world_size \
        else client.rank % ck.world_size
    nbytes = 0
    with torch.no_grad():
        for key, t in got.items():
            rec = ckp._recs[key]
            _td.local_of(rec.obj).copy_(t)
            if rec.copy:
                rec.view.copy_(t)
            nbytes += t.numel() * t.element_size()
    res = RestoreResult(ck.step, bool(partial), "disk", nbytes,
                        int((time.monotonic() - t0) * 1e6), missing,
                        unexpected, skipped)
    ckp._apply_blobs(lambda name: ck.blob(src, name), res, partial)
    return res
