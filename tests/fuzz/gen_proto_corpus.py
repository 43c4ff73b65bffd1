#!/usr/bin/env python3
"""Write the seed corpus for fuzz_proto into tests/fuzz/corpus/proto/.

Each input is three control bytes (see fuzz_proto.c: fds to attach, chunk
size, reader max_payload / 16) followed by the byte stream a peer sends.
Standard library only; run from anywhere: python3 tests/fuzz/gen_proto_corpus.py
The files named by a SHA-1 are inputs libFuzzer found that reach code the
seeds do not (kept with `fuzz_proto -merge=1 -use_counters=0`); this script
leaves them alone.
"""
import os
import struct

MAGIC = 0x54504B43
REPLY = 0x8000
T = dict(HELLO=1, REGION_ADD=2, REGION_DEL=3, TENSOR_REG=4, TENSOR_DEL=5,
         BLOB_PUT=6, SAVE=7, RESTORE=8, STATUS=9, FLUSH=10, LIST=11,
         EVENT=12, PRUNE=13, ERROR=14)


def msg(typ, req_id=1, json=b"{}", binary=b"", status=0, nfds=0, magic=MAGIC,
        version=1, flags=0, reserved=0, length=None, jlen=None):
    length = len(json) + len(binary) if length is None else length
    jlen = len(json) if jlen is None else jlen
    hdr = struct.pack("<IHHIIIiQII", magic, version, typ, flags, length,
                      jlen, status, req_id, nfds, reserved)
    assert len(hdr) == 40
    return hdr + json + binary


def ctl(fds=0, every=False, chunk=0, max16=0):
    return bytes([fds | (16 if every else 0), chunk, max16])


HELLO = (b'{"version":1,"features":7,"role":"trainer","job":"llama",'
         b'"rank":0,"world_size":8,"pid":4242}')

SEEDS = {
    "hello": ctl() + msg(T["HELLO"], 1, HELLO),
    "hello_reply": ctl() + msg(T["HELLO"] | REPLY, 1,
                               b'{"version":1,"features":5,"daemon":"ckptd 0.1.0",'
                               b'"session":3,"gpu":false}'),
    "save_bytewise": ctl(chunk=1) + msg(T["SAVE"], 7, b'{"step":500}'),
    "region_add_fd": ctl(fds=1) + msg(T["REGION_ADD"], 2,
                                      b'{"region":1,"size":1048576}', nfds=1),
    "region_add_two_fds_for_one": ctl(fds=2) + msg(T["REGION_ADD"], 2,
                                                  b'{"region":1}', nfds=1)
    + msg(T["REGION_ADD"], 3, b'{"region":2}', nfds=1),
    "region_add_missing_fd": ctl() + msg(T["REGION_ADD"], 2, b'{"region":1}',
                                         nfds=1),
    "session": ctl(chunk=7) + msg(T["HELLO"], 1, HELLO)
    + msg(T["TENSOR_REG"], 2, b'{"group":"model","name":"w","dtype":"F32",'
          b'"shape":[4,4],"region":1,"offset":0}')
    + msg(T["SAVE"], 3, b'{"step":1}') + msg(T["STATUS"], 4)
    + msg(T["LIST"], 5, b'{"job":"llama"}') + msg(T["PRUNE"], 6,
                                                  b'{"job":"llama","keep":2}'),
    "blob_put": ctl() + msg(T["BLOB_PUT"], 9, b'{"name":"rng"}',
                            bytes(range(256)) + b"\0\0\0"),
    "restore_reply": ctl(chunk=50) + msg(T["RESTORE"] | REPLY, 8,
                                         b'{"step":500,"restored":["w"],"missing":[],'
                                         b'"unexpected":[],"blobs":[{"name":"rng","len":4}]}',
                                         b"\x01\x02\x03\x04"),
    "event_empty_payload": ctl() + msg(T["EVENT"], 0, b""),
    "error_reply": ctl() + msg(T["ERROR"] | REPLY, 5, b'{"error":"bad"}',
                               status=-71),
    "truncated_header": ctl() + msg(T["SAVE"], 1, b'{"step":1}')[:23],
    "truncated_payload": ctl() + msg(T["SAVE"], 1, b'{"step":12345}')[:47],
    "bad_magic": ctl() + msg(T["SAVE"], 1, magic=0x54504B44),
    "bad_version": ctl() + msg(T["SAVE"], 1, version=2),
    "flags_set": ctl() + msg(T["SAVE"], 1, flags=1),
    "reserved_set": ctl() + msg(T["SAVE"], 1, reserved=0x100),
    "jlen_over_len": ctl() + msg(T["SAVE"], 1, b'{"step":1}', jlen=11),
    "huge_len": ctl() + msg(T["BLOB_PUT"], 1, length=0xFFFFFFFF, jlen=2),
    "over_small_max": ctl(max16=4) + msg(T["BLOB_PUT"], 1, b'{"name":"x"}',
                                         b"x" * 60),
    "unknown_type": ctl() + msg(0x4001, 1) + msg(T["TENSOR_DEL"] | 0x10, 2),
    "too_many_fds": ctl(fds=9) + msg(T["REGION_ADD"], 1, nfds=9),
    "nul_in_json": ctl() + msg(T["SAVE"], 1, b'{"step"\0:1}'),
    "fd_flood": ctl(fds=8, every=True, chunk=16)
    + msg(T["REGION_ADD"], 1, b'{"region":1}', nfds=8) * 6,
}


def main():
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                       "corpus", "proto")
    os.makedirs(out, exist_ok=True)
    for name, data in sorted(SEEDS.items()):
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
    print("wrote %d seeds to %s" % (len(SEEDS), out))


if __name__ == "__main__":
    main()
