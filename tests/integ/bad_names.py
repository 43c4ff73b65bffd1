"""bad_names.py SOCKET TOKEN - names that become path components (job,
group, blob) are whitelisted: each bad one is refused with -EINVAL and a
reason, over the raw protocol (so no client-side check helps).  The
longest allowed names are accepted.  TOKEN goes into every name that would
escape the root, so the caller can look for it on disk afterwards.
Exit 0 when all behaved, 1 otherwise."""
import errno
import fcntl
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rawproto import *   # noqa: E402,F403

SOCK, TOK = sys.argv[1], sys.argv[2]
problems = []

BAD = [
    "..", ".", "", "../" + TOK, "a/b", "/" + TOK, TOK + "/..", "a/../" + TOK,
    "." + TOK, "-" + TOK, "_" + TOK, "a b", "a\\b", "a\nb", "a\tb", "a*", "a:b",
    "a" * 65,
    # unicode lookalikes of '/', '.', letters
    "a\u2215" + TOK, "a\uff0f" + TOK, "\uff0e\uff0e", "\u2024\u2024", "j\u043eb",
    "\uff4a\uff4f\uff42", "a\u200bb", "caf\u00e9",
]
BAD_BLOB = [n for n in BAD if n != "a" * 65] + ["b" * 129]
BAD_GROUP = BAD


def refused(what, name, m):
    if m is None:
        problems.append("%s %r: connection closed without a reply" % (what, name))
    elif m.status != -errno.EINVAL:
        problems.append("%s %r: status %d (%r), want -EINVAL" % (what, name, m.status, m.error))
    elif not m.error or ("name" not in m.error and "JSON" not in m.error):
        problems.append("%s %r: unclear error %r" % (what, name, m.error))
    else:
        print("refused %s %r: %s" % (what, name, m.error))


def hello(c, job):
    return c.request(HELLO, {"version": 1, "features": 1, "role": "trainer", "job": job,
                             "rank": 0, "world_size": 1, "pid": os.getpid()})


for name in BAD:
    c = Conn(SOCK)
    refused("job", name, hello(c, name))
    c.close()

# a NUL inside a name (escaped in the JSON; a raw NUL byte is refused as a
# bad message, see malformed.py)
for field in ("job",):
    c = Conn(SOCK)
    js = ('{"version":1,"role":"trainer","job":"ok\\u0000%s","rank":0,"world_size":1}'
          % TOK).encode()
    refused("job with NUL", "ok\\0" + TOK, c.request(HELLO, js))
    c.close()

# group and blob names, on a trainer connection
c = Conn(SOCK)
m = hello(c, "bn")
assert m.status == 0, m
fd = os.memfd_create("t", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
os.ftruncate(fd, 8192)
fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
c.send(REGION_ADD, {"region": 1, "size": 8192}, fds=[fd])
os.close(fd)
m = c.reply_to(c.next_id - 1)
assert m.status == 0, m
for name in BAD_GROUP:
    refused("group", name, c.request(TENSOR_REG, {"group": name, "name": "w", "dtype": "U8",
                                                  "shape": [16], "region": 1, "offset": 0}))
for name in BAD_BLOB:
    refused("blob", name, c.request(BLOB_PUT, {"name": name}, bin=b"x"))
js = ('{"group":"g\\u0000%s","name":"w","dtype":"U8","shape":[16],"region":1,"offset":0}'
      % TOK).encode()
refused("group with NUL", "g\\0" + TOK, c.request(TENSOR_REG, js))
js = ('{"name":"b\\u0000%s"}' % TOK).encode()
refused("blob with NUL", "b\\0" + TOK, c.request(BLOB_PUT, js, bin=b"x"))
# tensor names are looser (UTF-8, no control characters): they never touch the disk
for name in ("", "a\nb", "a\x7fb", "__metadata__"):
    m = c.request(TENSOR_REG, {"group": "model", "name": name, "dtype": "U8", "shape": [16],
                               "region": 1, "offset": 0})
    if m is None or m.status != -errno.EINVAL:
        problems.append("tensor name %r: %r" % (name, m))

# the longest allowed names work, end to end: register, blob, save
ok = [
    ("group", "g" * 64, c.request(TENSOR_REG, {"group": "g" * 64, "name": "../w/\u00e9",
                                               "dtype": "U8", "shape": [16], "region": 1,
                                               "offset": 0})),
    ("blob", "b" * 128, c.request(BLOB_PUT, {"name": "b" * 128}, bin=b"rng")),
    ("blob", "A-z_0.9", c.request(BLOB_PUT, {"name": "A-z_0.9"}, bin=b"x")),
]
for what, name, m in ok:
    if m is None or m.status != 0:
        problems.append("%s %r (allowed) was refused: %r" % (what, name, m))
m = c.request(SAVE, {"step": 1})
if m is None or m.status != 0:
    problems.append("save with the longest names: %r" % m)
else:
    while True:
        ev = c.recv()
        if ev is None or (ev.type == EVENT and ev.json.get("phase") in ("committed", "failed")):
            break
    if ev is None or ev.json.get("phase") != "committed":
        problems.append("save with the longest names did not commit: %r" % ev)
c.close()
c = Conn(SOCK)
m = hello(c, "j" * 64)
if m is None or m.status != 0:
    problems.append("job of 64 characters was refused: %r" % m)
c.close()

# ctl requests that name a job
c = Conn(SOCK)
hello_ctl(c)
for name in ("..", "../" + TOK, "", "a" * 65):
    refused("prune job", name, c.request(PRUNE, {"job": name, "keep": 1}))
for name in ("..", "../" + TOK, "a" * 65):
    refused("list job", name, c.request(LIST, {"job": name}))
c.close()

if problems:
    print("\n".join("PROBLEM: " + p for p in problems))
    sys.exit(1)
print("all names behaved")
