"""rawproto.py - a raw ckpt wire-protocol client for tests (standard library
only).  It builds headers field by field, so tests can send what a real
client never would: bad magic, lying lengths, unknown types, stray fds.

    c = Conn(sock_path)
    c.send(TYPE, json_bytes_or_obj, bin=b"", fds=(), **header_overrides)
    m = c.recv()        # Msg(type, status, req_id, json, bin) or None at EOF
    m = c.request(TYPE, obj)   # send + recv of the reply to that req_id
"""
import json
import os
import socket
import struct

MAGIC = 0x54504B43
VERSION = 1
HDR = struct.Struct("<IHHIIIiQII")   # magic version type flags len jlen status req_id nfds reserved
assert HDR.size == 40
REPLY = 0x8000

HELLO, REGION_ADD, REGION_DEL, TENSOR_REG, TENSOR_DEL, BLOB_PUT, SAVE, RESTORE, \
    STATUS, FLUSH, LIST, EVENT, PRUNE, ERROR = range(1, 15)


class Msg:
    def __init__(self, hdr, payload):
        (self.magic, self.version, self.type, self.flags, self.len, self.jlen,
         self.status, self.req_id, self.nfds, self.reserved) = hdr
        js = payload[:self.jlen]
        self.bin = payload[self.jlen:]
        try:
            self.json = json.loads(js.decode()) if js else {}
        except ValueError:
            self.json = None
        self.error = (self.json or {}).get("error") if isinstance(self.json, dict) else None

    def __repr__(self):
        return "Msg(type=%#x status=%d req_id=%d json=%r)" % (
            self.type, self.status, self.req_id, self.json)


class Conn:
    def __init__(self, path, timeout=10.0):
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.s.settimeout(timeout)
        self.s.connect(path)
        self.next_id = 1
        self.buf = b""

    def close(self):
        self.s.close()

    def send(self, type_, obj=None, bin=b"", fds=(), **over):
        """Send one message; header fields may be overridden (magic=,
        version=, flags=, len=, jlen=, status=, req_id=, nfds=, reserved=).
        obj: dict/list/... (dumped), bytes (sent as is) or None."""
        if obj is None:
            js = b""
        elif isinstance(obj, (bytes, bytearray)):
            js = bytes(obj)
        else:
            js = json.dumps(obj).encode()
        req_id = over.pop("req_id", None)
        if req_id is None:
            req_id = self.next_id
            self.next_id += 1
        f = dict(magic=MAGIC, version=VERSION, type=type_, flags=0,
                 len=len(js) + len(bin), jlen=len(js), status=0, req_id=req_id,
                 nfds=len(fds), reserved=0)
        f.update(over)
        hdr = HDR.pack(f["magic"], f["version"], f["type"], f["flags"], f["len"],
                       f["jlen"], f["status"], f["req_id"], f["nfds"], f["reserved"])
        data = hdr + js + bin
        if fds:
            socket.send_fds(self.s, [data], list(fds))
        else:
            self.s.sendall(data)
        return req_id

    def _read(self, n):
        while len(self.buf) < n:
            try:
                chunk = self.s.recv(65536)
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                return None
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def recv(self):
        """The next message (EVENTs included), or None at end of file."""
        h = self._read(HDR.size)
        if h is None:
            return None
        hdr = HDR.unpack(h)
        payload = self._read(hdr[4])
        if payload is None:
            return None
        return Msg(hdr, payload)

    def reply_to(self, req_id):
        while True:
            m = self.recv()
            if m is None or m.type == ERROR or (m.req_id == req_id and m.type & REPLY):
                return m

    def request(self, type_, obj=None, **kw):
        return self.reply_to(self.send(type_, obj, **kw))

    def eof(self):
        """True if the daemon closed the connection (after any messages)."""
        while True:
            m = self.recv()
            if m is None:
                return True


def hello_trainer(c, job, rank=0, world=1):
    return c.request(HELLO, {"version": 1, "features": 1, "role": "trainer",
                             "job": job, "rank": rank, "world_size": world,
                             "pid": os.getpid()})


def hello_ctl(c):
    return c.request(HELLO, {"version": 1, "features": 0, "role": "ctl",
                             "pid": os.getpid()})
