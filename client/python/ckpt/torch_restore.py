"""ckpt.torch_restore - a Checkpointer with global tensors (DDP, FSDP2,
DTensor) restores through ckptd, in any world size: ckptd chooses the step,
fills every registered piece from the saved chunks that overlap it (each
checked against its CRC32C) and falls back to its memory and remote tiers
as for any restore.  When torch.distributed runs the job's ranks, they
agree on the outcome: a rank that finds a damaged chunk or blob file makes
every rank restore the step before, and a rank that fails makes every rank
fail, so the ranks never hold two steps.

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
_OK, _NONE, _AGAIN, _OLDER, _FAILED = 0, 1, 2, 3, 4
_ATTEMPTS = 8


def _agree(outcome, step, world_size):
    """(worst outcome, lowest and highest step tried, -1 if none) over the
    ranks."""
    worst, lo, hi, any_ok = _td.max_over_ranks(
        [outcome, -step if step >= 0 else -(1 << 62), step,
         int(outcome == _OK)], world_size)
    if worst == _NONE and any_ok:   # some ranks see a step, others none
        worst = _AGAIN
    return worst, -lo if hi >= 0 else -1, hi


def _one(ckp, job_dir, want, partial, walking):
    """One rank's attempt at step `want`: (outcome, step tried or -1,
    result, blobs read, error).  Nothing but the registered tensors is
    changed."""
    client = ckp.client
    res = None
    try:
        res = client.restore(want, partial)
        blobs = ckp._read_blobs(_blob_source(client, job_dir, res.step), res,
                                partial)
        return _OK, res.step, res, blobs, None
    except NoCheckpoint as e:
        outcome = _NONE if want == "latest" else \
            _OLDER if walking else _FAILED
        return outcome, -1, None, None, e
    except RestoreMismatch as e:
        return _FAILED, -1, None, None, e
    except CkptError as e:
        if e.errno != errno.EBADMSG or not walking:
            return _FAILED, -1, None, None, e
        # a damaged chunk: ckptd passes over that step from now on, for
        # every rank (some of which may have restored it, or already the
        # step before); a step asked for by number: the one before it
        if want == "latest":
            return _AGAIN, -1, None, None, e
        return _OLDER, want, None, None, e
    except (OSError, ValueError, KeyError) as e:
        # a blob file of the step that does not read back (after a change
        # of world size): the step before, if every rank goes too
        return (_OLDER if walking else _FAILED), \
            res.step if res is not None else -1, None, None, e


def _older(job_dir, step):
    """The newest checkpoint of the job below step, or None."""
    try:
        names = os.listdir(job_dir)
    except OSError:
        return None
    steps = [int(n[5:]) for n in names if _ct._ITER_RE.fullmatch(n)]
    below = [s for s in steps if s < step]
    return max(below) if below else None


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
        return int(os.path.basename(_ct.checkpoint_dir(job_dir))[5:])
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
    want = "latest" if step in (None, "latest") else int(step)
    # walking back is only right when every rank walks (or there is one)
    walking = want == "latest" and (client.world_size == 1 or
                                    _td.job_group(client.world_size))
    checked = None if partial else _candidate(job_dir, step)
    if checked is not None:             # before anything is written
        _refuse_unexpected(_unexpected(ckp._recs, job_dir, checked),
                           checked, False)
    skipped = []
    for _ in range(_ATTEMPTS):
        outcome, tried, res, blobs, err = _one(ckp, job_dir, want, partial,
                                               walking)
        worst, lo, hi = _agree(outcome, tried, client.world_size)
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
        if worst == _OLDER:             # every rank passes over step hi
            skipped.append((hi, str(err) if err is not None else
                            "another rank could not restore it"))
            want = _older(job_dir, hi)
            if want is None:
                raise NoCheckpoint(errno.ENOENT, "no checkpoint of %s below "
                                   "iter_%09d restores: %s" %
                                   (job_dir, hi, "; ".join(
                                       "iter_%09d: %s" % x for x in skipped)),
                                   "restore")
    else:
        raise CkptError(errno.EIO, "the job's ranks restored different steps "
                        "%d times in a row (%d..%d)" % (_ATTEMPTS, lo, hi),
                        "restore")
    res.skipped = skipped + res.skipped
    if res.step != checked:
        extra = _unexpected(ckp._recs, job_dir, res.step) or []
        if not partial:
            _refuse_unexpected(extra, res.step, True)
        res.unexpected += extra
    with torch.no_grad():
        for rec in ckp._recs.values():
            if rec.copy and rec.view is not None:
                _td.local_of(rec.obj).copy_(rec.view)
    ckp._apply_blobs(blobs, res, partial)
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
        raise RestoreMismatch(errno.EINVAL, "iter_%09d: its blobs (optimizer "
                              "param groups, progress, RNG) are read from "
                              "its files when the world size changed, and "
                              "%s cannot be read here: %s (pass root=, or "
                              "set $CKPT_ROOT to ckptd's root)" %
                              (step, job_dir, e), "restore") from e
    if ck.world_size == client.world_size:
        return client.get_blob      # the same world: ckptd had them all
    src = client.rank % ck.world_size
    return lambda name: ck.blob(src, name)
