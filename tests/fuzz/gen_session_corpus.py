#!/usr/bin/env python3
"""gen_session_corpus.py - write the seed inputs of the session fuzz target
(format: tests/fuzz/fuzz_session.c) into tests/fuzz/corpus/session/: a
trainer's whole life (HELLO, regions, tensors, blobs, SAVE, RESTORE), an
operator's requests, bad fds, malformed bytes, a two-rank job that misses
its deadline.  Files are named by their SHA-1 like libFuzzer's."""
import hashlib
import json
import os
import struct
import sys

HELLO, REGION_ADD, REGION_DEL, TENSOR_REG, TENSOR_DEL, BLOB_PUT, SAVE, RESTORE, \
    STATUS, FLUSH, LIST, EVENT, PRUNE, ERROR, CUDA_REGION_ADD = range(1, 16)
NONE, SEALED, UNSEALED, SHORT, PIPE, DEVNULL, TWO, WITH_SOCKET = range(8)
WAIT = 0x80


def rec(type_, obj=None, bin=None, fds=NONE, wait=True):
    body = obj if isinstance(obj, bytes) else json.dumps(obj or {}).encode()
    if bin is not None:
        body += b"\0" + bin
    return struct.pack("<BH", type_ | fds << 4 | (WAIT if wait else 0), len(body)) + body


def raw(data, fds=NONE):
    return struct.pack("<BH", fds << 4, len(data)) + data


def hello(job="fz", rank=0, world=1, features=5):
    return rec(HELLO, {"version": 1, "features": features, "role": "trainer", "job": job,
                       "rank": rank, "world_size": world, "pid": 1})


CTL = rec(HELLO, {"version": 1, "role": "ctl"})
REGION = rec(REGION_ADD, {"region": 1, "size": 65536}, fds=SEALED)
TENSORS = rec(TENSOR_REG, {"group": "model", "name": "w", "dtype": "F32", "shape": [8192],
                           "region": 1, "offset": 0}) + \
    rec(TENSOR_REG, {"group": "optim", "name": "m", "dtype": "BF16", "shape": [4, 4096],
                     "region": 1, "offset": 32768})
BLOB = rec(BLOB_PUT, {"name": "rng"}, bin=b"\x01\x02\x03state")

seeds = {
    "trainer": hello() + REGION + TENSORS + BLOB + rec(SAVE, {"step": 1}) +
    rec(FLUSH, {"job": "fz", "timeout_ms": 500}) + rec(RESTORE, {"step": -1, "partial": False}),
    "two_steps": hello("fz2") + REGION + TENSORS + rec(SAVE, {"step": 1}) + rec(SAVE, {"step": 2}) +
    rec(TENSOR_DEL, {"group": "optim", "name": "m"}) + rec(SAVE, {"step": 3}) +
    rec(RESTORE, {"step": 2, "partial": True}) + rec(REGION_DEL, {"region": 1}),
    "restore_only": hello("fz") + REGION + TENSORS + rec(RESTORE, {"step": -1, "partial": True}),
    # the reply in parts (feature bit 8): lists, blobs in pieces, then the reply
    "restore_parts": hello("fz5", features=13) + REGION + TENSORS + BLOB +
    rec(BLOB_PUT, {"name": "big"}, bin=bytes(range(256)) * 64) + rec(SAVE, {"step": 1}) +
    rec(FLUSH, {"job": "fz5", "timeout_ms": 500}) +
    rec(TENSOR_DEL, {"group": "optim", "name": "m"}) +
    rec(RESTORE, {"step": -1, "partial": True}) + rec(RESTORE, {"step": 1, "partial": False}),
    "ctl": CTL + rec(STATUS) + rec(LIST) + rec(LIST, {"job": "fz"}) +
    rec(FLUSH, {"timeout_ms": 100}) + rec(PRUNE, {"job": "fz", "keep": 1}),
    "bad_fds": hello("fz3") + rec(REGION_ADD, {"region": 1, "size": 65536}, fds=UNSEALED) +
    rec(REGION_ADD, {"region": 2, "size": 65536}, fds=SHORT) +
    rec(REGION_ADD, {"region": 3, "size": 65536}, fds=PIPE) +
    rec(REGION_ADD, {"region": 4, "size": 65536}, fds=DEVNULL) +
    rec(REGION_ADD, {"region": 5, "size": 65536}, fds=TWO) +
    rec(REGION_ADD, {"region": 6, "size": 65536}, fds=WITH_SOCKET) +
    rec(SAVE, {"step": 1}, fds=SEALED),
    "cuda_off": hello("fz4") + rec(CUDA_REGION_ADD, {"region": 1, "size": 65536, "gpu": 0,
                                                     "base": 0, "kind": "ipc", "key": "x"}),
    "deadline": hello("fz5", 0, 2) + REGION + TENSORS + rec(SAVE, {"step": 7}),
    "no_hello": rec(SAVE, {"step": 1}) + rec(STATUS) + hello() + hello(),
    "bad_json": hello("fz6") + rec(TENSOR_REG, b'{"group":"model","name":') +
    rec(BLOB_PUT, b'[1,2]') + rec(SAVE, {"step": "one"}),
    "bad_header": hello("fz7") + raw(struct.pack("<IHHIIIiQII", 0x54504B43, 1, 7, 0, 4096, 4096,
                                                 0, 9, 0, 0) + b"{}"),
    "bad_magic": raw(b"GET / HTTP/1.0\r\n\r\n"),
    "events_unwaited": hello("fz8") + REGION + TENSORS +
    rec(SAVE, {"step": 1}, wait=False) + rec(SAVE, {"step": 2}, wait=False),
}

out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "corpus", "session")
os.makedirs(out, exist_ok=True)
for name, data in seeds.items():
    with open(os.path.join(out, hashlib.sha1(data).hexdigest()), "wb") as f:
        f.write(data)
print("%d seeds in %s" % (len(seeds), out))
