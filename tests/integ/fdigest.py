"""fdigest.py - a file's digest as a checkpoint manifest names it, computed
by the tests on their own (hashlib; libxxhash through ctypes, ckptd's own
dependency, where Python's xxhash is not installed).

  fdigest.py KEY FILE      the hex digest of FILE (KEY: sha256 or xxh3_128)
  fdigest.py entry FILE    the digest key of FILE's manifest entry is given
                           on stdin as JSON; prints "key hex"

As a module: hexdigest(key, data), key_of(entry).
"""
import ctypes
import ctypes.util
import hashlib
import json
import sys

KEYS = ("sha256", "xxh3_128")


class _H128(ctypes.Structure):
    _fields_ = [("low64", ctypes.c_uint64), ("high64", ctypes.c_uint64)]


def _xxh3_128(data):
    try:
        import xxhash
        return xxhash.xxh3_128_hexdigest(data)
    except ImportError:
        pass
    lib = ctypes.CDLL(ctypes.util.find_library("xxhash") or "libxxhash.so.0")
    lib.XXH3_128bits.restype = _H128
    lib.XXH3_128bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    h = lib.XXH3_128bits(bytes(data), len(data))
    return "%016x%016x" % (h.high64, h.low64)     # canonical: big-endian


def hexdigest(key, data):
    if key == "sha256":
        return hashlib.sha256(data).hexdigest()
    if key == "xxh3_128":
        return _xxh3_128(data)
    raise ValueError("unknown digest key %r" % key)


def key_of(entry):
    """The one digest key a manifest file entry has."""
    keys = [k for k in KEYS if k in entry]
    if len(keys) != 1:
        raise ValueError("%s: digest keys %r" % (entry.get("path"), keys))
    return keys[0]


if __name__ == "__main__":
    with open(sys.argv[2], "rb") as f:
        data = f.read()
    if sys.argv[1] == "entry":
        k = key_of(json.load(sys.stdin))
        print(k, hexdigest(k, data))
    else:
        print(hexdigest(sys.argv[1], data))
