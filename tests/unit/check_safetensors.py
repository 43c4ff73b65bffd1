#!/usr/bin/env python3
"""check_safetensors.py - an independent, strict reader of the public
safetensors format (https://github.com/huggingface/safetensors), written
from the spec with only the standard library, to check that ckpt's shards
load elsewhere.

    check_safetensors.py FILE...

For each tensor prints: name dtype shape sha256-of-its-bytes.  When torch
is importable, also checks that torch.frombuffer() of those bytes with the
matching dtype reshapes to the declared shape.  Exit 0 if every file is
valid, 1 if one is not, 2 on usage errors.
"""
import hashlib
import json
import struct
import sys

MAX_HEADER = 100 * 1024 * 1024          # the reference reader's limit

# The public dtype table, element sizes in bytes.
DTYPES = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1,
    "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
    "I32": 4, "U32": 4, "F32": 4,
    "I64": 8, "U64": 8, "F64": 8,
}


class Invalid(Exception):
    pass


def no_duplicates(pairs):
    seen = {}
    for k, v in pairs:
        if k in seen:
            raise Invalid("duplicate key %r" % k)
        seen[k] = v
    return seen


def is_uint(v):
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def parse(data):
    """Return (data_start, [(name, dtype, shape, begin, end)]) or raise."""
    if len(data) < 8:
        raise Invalid("file shorter than 8 bytes")
    (n,) = struct.unpack("<Q", data[:8])
    if n > MAX_HEADER:
        raise Invalid("header length %d over the %d limit" % (n, MAX_HEADER))
    if 8 + n > len(data):
        raise Invalid("header length %d runs past end of file" % n)
    raw = data[8:8 + n]
    if not raw.startswith(b"{"):
        raise Invalid("header does not start with '{'")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise Invalid("header is not UTF-8: %s" % e)
    body = text.rstrip(" ")             # padding may only be 0x20
    try:
        hdr = json.loads(body, object_pairs_hook=no_duplicates)
    except ValueError as e:
        raise Invalid("header is not JSON: %s" % e)
    if not isinstance(hdr, dict):
        raise Invalid("header is not a JSON object")
    if not body.endswith("}"):
        raise Invalid("header has trailing bytes other than spaces")

    meta = hdr.pop("__metadata__", None)
    if meta is not None:
        if not isinstance(meta, dict) or not all(
                isinstance(v, str) for v in meta.values()):
            raise Invalid("__metadata__ must map strings to strings")

    data_len = len(data) - 8 - n
    tensors = []
    for name, info in hdr.items():
        if not isinstance(info, dict):
            raise Invalid("%r: not an object" % name)
        dtype = info.get("dtype")
        shape = info.get("shape")
        offs = info.get("data_offsets")
        if dtype not in DTYPES:
            raise Invalid("%r: unknown dtype %r" % (name, dtype))
        if not isinstance(shape, list) or not all(is_uint(d) for d in shape):
            raise Invalid("%r: bad shape %r" % (name, shape))
        if (not isinstance(offs, list) or len(offs) != 2
                or not all(is_uint(o) for o in offs) or offs[0] > offs[1]):
            raise Invalid("%r: bad data_offsets %r" % (name, offs))
        numel = 1
        for d in shape:
            numel *= d
        if numel * DTYPES[dtype] != offs[1] - offs[0]:
            raise Invalid("%r: %d bytes for %s%r" %
                          (name, offs[1] - offs[0], dtype, shape))
        tensors.append((name, dtype, shape, offs[0], offs[1]))

    # Contiguous, without holes or overlaps, covering the whole data
    # section: the reference reader's validate() rule.
    tensors.sort(key=lambda t: (t[3], t[4]))
    pos = 0
    for name, _, _, b, e in tensors:
        if b != pos:
            raise Invalid("%r starts at %d, expected %d" % (name, b, pos))
        pos = e
    if pos != data_len:
        raise Invalid("tensors cover %d bytes, data section is %d" %
                      (pos, data_len))
    return 8 + n, tensors


def torch_check(name, dtype, shape, buf):
    import torch
    tdt = {
        "BOOL": torch.bool, "U8": torch.uint8, "I8": torch.int8,
        "I16": torch.int16, "F16": torch.float16, "BF16": torch.bfloat16,
        "I32": torch.int32, "F32": torch.float32,
        "I64": torch.int64, "F64": torch.float64,
    }.get(dtype)
    if tdt is None or len(buf) == 0:
        return                       # no such dtype here / frombuffer refuses empty
    t = torch.frombuffer(bytearray(buf), dtype=tdt)
    if tuple(t.reshape(shape).shape) != tuple(shape):
        raise Invalid("%r: torch gives shape %r" % (name, tuple(t.shape)))


def main(argv):
    if len(argv) < 2:
        sys.stderr.write(__doc__)
        return 2
    try:
        import torch  # noqa: F401
        have_torch = True
    except ImportError:
        have_torch = False
    rc = 0
    for path in argv[1:]:
        try:
            with open(path, "rb") as f:
                data = f.read()
            start, tensors = parse(data)
            for name, dtype, shape, b, e in tensors:
                buf = data[start + b:start + e]
                if have_torch:
                    torch_check(name, dtype, shape, buf)
                print("%s %s %s %s" % (name, dtype, list(shape),
                                       hashlib.sha256(buf).hexdigest()))
            print("%s: ok, %d tensors%s" % (path, len(tensors),
                  ", torch ok" if have_torch else ""), file=sys.stderr)
        except (OSError, Invalid) as e:
            print("%s: invalid: %s" % (path, e), file=sys.stderr)
            rc = 1
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv))
