"""Start the ranks of a multi-process test (dist_worker.py, gloo on
127.0.0.1 at a free port), wait for all of them with a deadline, and load
what each wrote."""
import os
import socket
import subprocess
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "dist_worker.py")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(scenario, world, daemon, job, outdir, *extra, env=None,
           timeout=240):
    """Run world ranks of scenario; returns [rank 0's output, ...].  Any rank
    failing or passing the deadline kills the others and fails."""
    port = free_port()
    e = dict(os.environ, OMP_NUM_THREADS="1")
    e.update(env or {})
    procs = []
    for r in range(world):
        log = open(os.path.join(outdir, "%s.%d.log" % (scenario, r)), "w")
        procs.append((subprocess.Popen(
            [sys.executable, WORKER, scenario, str(r), str(world), str(port),
             daemon.socket, job, outdir] + [str(x) for x in extra],
            stdout=log, stderr=subprocess.STDOUT, env=e), log))
    failed = []
    try:
        for r, (p, log) in enumerate(procs):
            try:
                rc = p.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                rc = "timeout"
            if rc != 0:
                failed.append((r, rc))
                break
    finally:
        for p, log in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
            log.close()
    if failed:
        r, rc = failed[0]
        with open(os.path.join(outdir, "%s.%d.log" % (scenario, r))) as f:
            text = f.read()[-4000:]
        raise AssertionError("%s rank %d of %d: %s\n%s" %
                             (scenario, r, world, rc, text))
    return [torch.load(os.path.join(outdir, "%s.%d.pt" % (scenario, r)),
                       weights_only=False) for r in range(world)]
