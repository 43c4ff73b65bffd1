"""ckpt.ondisk - read a committed checkpoint's tensors from its files,
without ckptd: any box of a rank-local tensor or of a saved piece of a
global tensor (reading only the rows it covers), and any rank's blobs.
ckpt.dcp's reader reads DCP's items this way, and a Checkpointer restoring
into another world size its blobs.

Every file read from is first checked against the manifest's size and
digest (SHA-256 or XXH3-128, as the manifest names it; verify=True), once
per Checkpoint object.
"""
import os

import torch

from . import torch as _ct

__all__ = ["Checkpoint", "default_root"]


def default_root():
    """ckptd's root as trainers see it: $CKPT_ROOT, else /var/lib/ckpt."""
    return os.environ.get("CKPT_ROOT") or "/var/lib/ckpt"


class Checkpoint:
    """One committed checkpoint: path is an iter_NNNNNNNNN directory, or a
    job directory with step (None: its latest)."""

    def __init__(self, path, step=None, verify=True):
        if step is not None and not os.path.isfile(
                os.path.join(path, _ct.MANIFEST)):
            path = os.path.join(path, "iter_%09d" % int(step))
        self.m = _ct.read_manifest(path)
        self.dir = self.m["_dir"]
        self.step = self.m["step"]
        self.world_size = self.m["world_size"]
        self.verify = verify
        self._files = {}
        self._local = {(t["group"], t["rank"], t["name"]): t
                       for t in self.m.get("tensors", [])}
        self._globals = {(g["group"], g["name"]): g
                         for g in self.m.get("globals", [])}

    def _file(self, index):
        data = self._files.get(index)
        if data is None:
            data = _ct._read_file(self.m, self.m["files"][index]["path"],
                                  self.verify)
            self._files[index] = data
        return data

    def local(self, group, rank, name):
        """The manifest's entry of a rank-local tensor, or None."""
        return self._local.get((group, rank, name))

    def global_tensor(self, group, name):
        """The manifest's entry of a global tensor (dtype, shape, pieces),
        or None."""
        return self._globals.get((group, name))

    def read(self, entry, offsets=None, lengths=None, dtype=None):
        """The box [offsets, offsets + lengths) (default: all) of a saved
        tensor or piece (a manifest entry: file, shape, begin, and dtype
        unless given), reading only the rows it covers."""
        dt = _ct.FROM_ST[dtype or entry["dtype"]]
        shape = [int(d) for d in entry["shape"]]
        data = self._file(entry["file"])
        if not shape:
            raw = bytearray(data[entry["begin"]:entry["end"]])
            return torch.frombuffer(raw, dtype=dt).reshape(())
        offsets = [0] * len(shape) if offsets is None else \
            [int(o) for o in offsets]
        lengths = shape if lengths is None else [int(n) for n in lengths]
        row = torch.empty((), dtype=dt).element_size()
        for d in shape[1:]:
            row *= d
        b = entry["begin"] + offsets[0] * row
        raw = bytearray(data[b:b + lengths[0] * row])
        if raw:
            box = torch.frombuffer(raw, dtype=dt).reshape([lengths[0]] +
                                                          shape[1:])
        else:
            box = torch.empty([lengths[0]] + shape[1:], dtype=dt)
        for d in range(1, len(shape)):
            box = box.narrow(d, offsets[d], lengths[d])
        return box

    def blob(self, rank, name):
        """A blob's bytes, or None if that rank saved none of that name."""
        rel = "extra/rank_%05d/%s" % (rank, name)
        for i, f in enumerate(self.m["files"]):
            if f["path"] == rel:
                return bytes(self._file(i))
        return None
