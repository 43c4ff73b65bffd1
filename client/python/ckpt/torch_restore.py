"""ckpt.torch_restore - a Checkpointer with global tensors (DDP, FSDP2,
DTensor) restores through ckptd, in any world size: ckptd chooses the step,
fills every registered piece from the saved chunks that overlap it (each
checked against its CRC32C) and falls back to its memory and remote tiers
as for any restore.  When torch.distributed runs the job's ranks, they
agree on the outcome: a rank that finds a damaged chunk makes every rank
restore again (ckptd then passes over that step for all of them), and a
rank that fails makes every rank fail, so the ranks never hold two steps.

Blobs (optimizer param groups, scheduler, progress, RNG) come from the same
rank of a run of the same world size (ckptd), or else from rank (rank %
saved world size)'s blob files of the restored step, read under ckptd's
root (root= or $CKPT_ROOT).
"""
import errno
import os

import torch

from . import CkptError, NoCheckpoint, RestoreMismatch
from . import ondisk
from . import torch as _ct
from . import torch_dist as _td

# outcomes of one rank's attempt, ordered: the worst one decides
_OK, _NONE, _AGAIN, _FAILED = 0, 1, 2, 3
_ATTEMPTS = 8


def _dist_group(world_size):
    """Whether torch.distributed runs exactly the job's ranks."""
    dist = torch.distributed
    return (world_size > 1 and dist.is_available() and dist.is_initialized()
            and dist.get_world_size() == world_size)


def _agree(outcome, step, world_size):
    """(worst outcome, lowest and highest step restored) over the ranks."""
    if not _dist_group(world_size):
        return outcome, step, step
    dist = torch.distributed
    ok = outcome == _OK
    dev = "cuda" if dist.get_backend() == "nccl" else "cpu"
    t = torch.tensor([outcome, int(ok), -step if ok else -(1 << 62),
                      step if ok else -1], dtype=torch.int64, device=dev)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    worst, any_ok, lo, hi = (int(x) for x in t.tolist())
    if worst == _NONE and any_ok:   # some ranks see a step, others none
        worst = _AGAIN
    return worst, -lo, hi


def _one(client, step, partial, latest, alone):
    """One rank's attempt: (outcome, result or None, error or None)."""
    try:
        return _OK, client.restore(step, partial), None
    except NoCheckpoint as e:
        return (_NONE if latest else _FAILED), None, e
    except CkptError as e:
        # a damaged chunk: ckptd passes over that step next time, for every
        # rank; another try is only right if every rank takes it
        if e.errno == errno.EBADMSG and latest and alone:
            return _AGAIN, None, e
        return _FAILED, None, e


def _unexpected(recs, job_dir, step):
    """Global tensors of iter `step` in the groups registered here that no
    registration names ("group/name"), from its manifest; None when the
    manifest cannot be read here."""
    try:
        m = _ct.read_manifest(os.path.join(job_dir, "iter_%09d" % step))
    except (OSError, ValueError):
        return None
    groups = {k[0] for k in recs}
    return ["%s/%s" % (g["group"], g["name"]) for g in m.get("globals", [])
            if g["group"] in groups and (g["group"], g["name"]) not in recs]


def _candidate(job_dir, step):
    """The step a restore will most likely take (to check it before)."""
    if step not in (None, "latest"):
        return int(step)
    try:
        with open(os.path.join(job_dir, "latest_checkpoint.txt")) as f:
            return int(f.read().strip()[len("iter_"):])
    except (OSError, ValueError):
        return None


def _refuse_unexpected(extra, step, after):
    if extra:
        raise RestoreMismatch(
            errno.EINVAL, "iter_%09d holds global tensors this model does "
            "not register: %s (partial=True restores the rest)%s" %
            (step, ", ".join(extra), "; the registered tensors hold its "
             "values now" if after else ""), "restore")


def through_daemon(ckp, step, partial):
    """Checkpointer.restore() for a run with global tensors."""
    client = ckp.client
    job_dir = os.path.join(ckp.root or ondisk.default_root(), client.job)
    latest = step in (None, "latest")
    alone = client.world_size == 1 or _dist_group(client.world_size)
    checked = None if partial else _candidate(job_dir, step)
    if checked is not None:             # before anything is written
        _refuse_unexpected(_unexpected(ckp._recs, job_dir, checked),
                           checked, False)
    for _ in range(_ATTEMPTS):
        outcome, res, err = _one(client, step, partial, latest, alone)
        worst, lo, hi = _agree(outcome, res.step if res else -1,
                               client.world_size)
        if worst == _OK and lo == hi:
            break
        if worst == _NONE:
            return None
        if worst == _FAILED:
            if err is not None:
                raise err
            raise CkptError(errno.ECANCELED, "the restore failed on another "
                            "rank of the job (its error says why); no rank "
                            "keeps what it restored", "restore")
    else:
        raise CkptError(errno.EIO, "the job's ranks restored different steps "
                        "%d times in a row (%d..%d)" % (_ATTEMPTS, lo, hi),
                        "restore")
    if res.step != checked:
        extra = _unexpected(ckp._recs, job_dir, res.step) or []
        if not partial:
            _refuse_unexpected(extra, res.step, True)
        res.unexpected += extra
    with torch.no_grad():
        for rec in ckp._recs.values():
            if rec.copy and rec.view is not None:
                _td.local_of(rec.obj).copy_(rec.view)
    ckp._apply_blobs(_blob_source(client, job_dir, res.step), res, partial)
    return res


def _blob_source(client, job_dir, step):
    """get_blob(name) for the restored step: ckptd's, or another rank's
    blob files when the run had another world size."""
    probe = client.get_blob(_ct.B_META)
    if probe is not None:
        return client.get_blob
    try:
        ck = ondisk.Checkpoint(job_dir, step)
    except (OSError, ValueError) as e:
        raise RestoreMismatch(errno.ENOENT, "iter_%09d: its blobs (optimizer "
                              "param groups, progress, RNG) are read from "
                              "its files when the world size changed, and "
                              "%s cannot be read here: %s (pass root=, or "
                              "set $CKPT_ROOT to ckptd's root)" %
                              (step, job_dir, e), "restore") from e
    if ck.world_size == client.world_size:
        return client.get_blob      # the same world: ckptd had them all
    src = client.rank % ck.world_size
    return lambda name: ck.blob(src, name)
