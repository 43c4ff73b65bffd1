"""phase_events.py SOCK JOB RANK WORLD STEP - one save of one small tensor
over the raw protocol (rawproto.py), printing the phases ckptd sends for it
in the order they come, comma-separated ("staged,durable,committed"): the
order itself, which libckpt folds away.  Exit 0 when the save ends
committed, 1 otherwise."""
import fcntl
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rawproto import Conn, EVENT, REGION_ADD, SAVE, TENSOR_REG, hello_trainer  # noqa: E402

sock, job, rank, world, step = sys.argv[1], sys.argv[2], int(sys.argv[3]), \
    int(sys.argv[4]), int(sys.argv[5])
c = Conn(sock, timeout=60)
m = hello_trainer(c, job, rank, world)
assert m is not None and m.status == 0, m
size = 1 << 20
fd = os.memfd_create("t", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
os.ftruncate(fd, size)
os.pwrite(fd, bytes([(rank * 31 + step) & 0xff]) * size, 0)
fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
c.send(REGION_ADD, {"region": 1, "size": size}, fds=[fd])
os.close(fd)
m = c.reply_to(c.next_id - 1)
assert m is not None and m.status == 0, m
m = c.request(TENSOR_REG, {"group": "model", "name": "w", "dtype": "U8", "shape": [size],
                           "region": 1, "offset": 0})
assert m is not None and m.status == 0, m
m = c.request(SAVE, {"step": step})
assert m is not None and m.status == 0, m
phases = []
while True:
    ev = c.recv()
    if ev is None:
        break
    if ev.type != EVENT:
        continue
    phases.append(ev.json.get("phase"))
    if phases[-1] in ("committed", "failed"):
        break
print(",".join(phases) + ("" if phases[-1:] != ["failed"] else
                          ": " + str(ev.json.get("message"))))
sys.exit(0 if phases[-1:] == ["committed"] else 1)
