"""Loading libckpt.so and declaring its C prototypes (ctypes).

Search order: $CKPT_LIB (a path, and nothing else), the source tree's
./libckpt.so (the repository root, three directories above this file), the
installed libckpt.so.0 through the dynamic linker, then <prefix>/lib/
libckpt.so.0 next to the installed package.
"""
import ctypes
import os

_HERE = os.path.dirname(os.path.abspath(__file__))
# The source tree: client/python/ckpt -> the repository root.
_TREE_LIB = os.path.normpath(os.path.join(_HERE, "..", "..", "..",
                                          "libckpt.so"))
# Installed: <prefix>/lib/python3*/dist-packages/ckpt -> <prefix>/lib.
_PREFIX_LIB = os.path.normpath(os.path.join(_HERE, "..", "..", "..",
                                            "libckpt.so.0"))

# enum ckpt_dtype, in order (client/ckpt.h)
DTYPES = ("F64", "F32", "F16", "BF16", "I64", "I32", "I16", "I8", "U8",
          "BOOL")
DTYPE_CODE = {name: i for i, name in enumerate(DTYPES)}
DTYPE_SIZE = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4,
              "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}

PHASES = {"staged": 1, "replicated": 4, "durable": 2, "committed": 3}
LATEST = -1
MAX_STEP = 999999999       # CKPT_MAX_STEP: iter_<9 digits>
PARTIAL = 0x1
GATE_LATER = 0x1            # CKPT_GATE_LATER
FROZEN = 0x1                # CKPT_FROZEN (ckpt_register_flags)
UNORDERED = 1               # CKPT_UNORDERED
MAX_NDIM = 8


class Times(ctypes.Structure):
    _fields_ = [("staged_us", ctypes.c_uint64),
                ("durable_us", ctypes.c_uint64),
                ("committed_us", ctypes.c_uint64),
                ("bytes", ctypes.c_uint64)]


class Layout(ctypes.Structure):
    """struct ckpt_layout: where a rank's piece of a global tensor sits."""
    _fields_ = [("global_shape", ctypes.c_int64 * MAX_NDIM),
                ("offset", ctypes.c_int64 * MAX_NDIM),
                ("replica_index", ctypes.c_int),
                ("replica_count", ctypes.c_int)]


# enum ckpt_source (client/ckpt.h)
SOURCES = {1: "disk", 2: "memory", 3: "peer", 4: "remote"}


class RestoreInfo(ctypes.Structure):
    _fields_ = [("step", ctypes.c_uint64),
                ("bytes", ctypes.c_uint64),
                ("micros", ctypes.c_uint64),
                ("source", ctypes.c_int),
                ("n_missing", ctypes.c_int),
                ("n_unexpected", ctypes.c_int)]


def _candidates():
    env = os.environ.get("CKPT_LIB")
    if env:
        return [env]            # explicit: nothing else is tried
    out = []
    if os.path.exists(_TREE_LIB):
        out.append(_TREE_LIB)
    out.append("libckpt.so.0")
    if os.path.exists(_PREFIX_LIB):     # before ldconfig ran, or off its path
        out.append(_PREFIX_LIB)
    return out


def _declare(lib):
    P, I, U64, SZ = ctypes.c_void_p, ctypes.c_int, ctypes.c_uint64, \
        ctypes.c_size_t
    S = ctypes.c_char_p
    sig = {
        "ckpt_connect": (I, [S, S, I, I, ctypes.POINTER(P)]),
        "ckpt_close": (None, [P]),
        "ckpt_alloc": (P, [P, SZ]),
        "ckpt_free": (I, [P, P]),
        "ckpt_register": (I, [P, S, S, P, I, I,
                              ctypes.POINTER(ctypes.c_int64)]),
        "ckpt_unregister": (I, [P, S, S]),
        "ckpt_put_blob": (I, [P, S, P, SZ]),
        "ckpt_save": (I, [P, U64, ctypes.POINTER(U64)]),
        "ckpt_wait": (I, [P, U64, I, I]),
        "ckpt_times": (I, [P, U64, ctypes.POINTER(Times)]),
        "ckpt_restore": (I, [P, ctypes.c_int64, ctypes.c_uint,
                             ctypes.POINTER(U64)]),
        "ckpt_get_blob": (I, [P, S, P, SZ, ctypes.POINTER(SZ)]),
        "ckpt_restore_info": (I, [P, ctypes.POINTER(RestoreInfo)]),
        "ckpt_restore_missing": (I, [P, I, ctypes.POINTER(S),
                                     ctypes.POINTER(S)]),
        "ckpt_restore_unexpected": (I, [P, I, ctypes.POINTER(S),
                                        ctypes.POINTER(S)]),
        "ckpt_restore_skipped": (I, [P, I, ctypes.POINTER(U64),
                                     ctypes.POINTER(S)]),
        "ckpt_strerror": (S, [I]),
        "ckpt_last_error": (S, [P]),
    }
    # newer than the rest: a libckpt without it still loads, and
    # Client.register_global / register(frozen=True) say what is missing
    optional = {
        "ckpt_register_global": (I, [P, S, S, P, I, I,
                                     ctypes.POINTER(ctypes.c_int64),
                                     ctypes.POINTER(Layout)]),
        "ckpt_save_stream_flags": (I, [P, U64, P, ctypes.c_uint,
                                       ctypes.POINTER(U64)]),
        "ckpt_gate_stream": (I, [P, U64, P]),
        "ckpt_register_flags": (I, [P, S, S, P, I, I,
                                    ctypes.POINTER(ctypes.c_int64),
                                    ctypes.POINTER(Layout), ctypes.c_uint]),
    }
    for name, (res, args) in sig.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args
    for name, (res, args) in optional.items():
        fn = getattr(lib, name, None)
        if fn is not None:
            fn.restype = res
            fn.argtypes = args
    return lib


def load():
    errors = []
    for path in _candidates():
        try:
            return _declare(ctypes.CDLL(path)), path
        except OSError as e:
            errors.append("%s: %s" % (path, e))
        except AttributeError as e:
            errors.append("%s: not libckpt (%s)" % (path, e))
    raise ImportError("cannot load libckpt (set $CKPT_LIB, build the source "
                      "tree with `make`, or install it): " +
                      "; ".join(errors))
