"""pytest fixtures: a private ckptd (the source tree's ./ckptd) on a temporary
socket and root, shared by the session; a unique job name per test."""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PYDIR = os.path.dirname(HERE)
TOP = os.path.normpath(os.path.join(PYDIR, "..", ".."))
EXAMPLE = os.path.join(PYDIR, "examples", "train_mnist_like.py")
sys.path.insert(0, PYDIR)        # the package of this tree, not an installed one


class Daemon:
    """ckptd on a private socket and root; .log() is its output so far."""

    def __init__(self, tmp, **extra):
        self.tmp = tmp
        self.socket = os.path.join(tmp, "ckptd.sock")
        self.root = os.path.join(tmp, "root")
        self.conf = os.path.join(tmp, "ckptd.json")
        self.logpath = os.path.join(tmp, "ckptd.log")
        self.proc = None
        cfg = {"socket": self.socket, "root": self.root,
               "staging_bytes": "64MiB", "chunk_bytes": "1MiB",
               "keep_last": 0, "step_deadline_ms": 2000,
               "log_level": "debug"}
        cfg.update(extra)
        with open(self.conf, "w") as f:
            json.dump(cfg, f)

    def log(self):
        try:
            with open(self.logpath) as f:
                return f.read()
        except OSError:
            return ""

    def start(self):
        binary = os.path.join(TOP, "ckptd")
        if not os.access(binary, os.X_OK):
            pytest.fail("%s is not built: run `make` in %s first" %
                        (binary, TOP), pytrace=False)
        ready = self.log().count("ready:")
        logf = open(self.logpath, "a")
        self.proc = subprocess.Popen([binary, "-c", self.conf], stdout=logf,
                                     stderr=subprocess.STDOUT)
        logf.close()
        deadline = time.time() + 15
        while time.time() < deadline:
            if os.path.exists(self.socket) and \
                    self.log().count("ready:") > ready:
                return self
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        self.stop(signal.SIGKILL)
        pytest.fail("ckptd did not become ready:\n" + self.log()[-3000:],
                    pytrace=False)

    def stop(self, sig=signal.SIGTERM):
        p, self.proc = self.proc, None
        if p is None:
            return
        if p.poll() is None:
            p.send_signal(sig)
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def job_dir(self, job):
        return os.path.join(self.root, job)

    def latest(self, job):
        try:
            with open(os.path.join(self.root, job,
                                   "latest_checkpoint.txt")) as f:
                return f.read().strip()
        except OSError:
            return None


def flip_last_byte(path):
    """Damage a file the way a bad sector would: its last byte, xor 1."""
    with open(path, "r+b") as f:
        f.seek(-1, os.SEEK_END)
        b = f.read(1)
        f.seek(-1, os.SEEK_END)
        f.write(bytes([b[0] ^ 1]))


def _libckpt_present():
    return os.environ.get("CKPT_LIB") or \
        os.path.exists(os.path.join(TOP, "libckpt.so"))


@pytest.fixture(scope="session")
def ckptd():
    if not _libckpt_present():
        pytest.fail("%s/libckpt.so is not built: run `make` first" % TOP,
                    pytrace=False)
    tmp = tempfile.mkdtemp(prefix="ckpt-py.")
    d = Daemon(tmp).start()
    yield d
    d.stop()
    if not os.environ.get("KEEP"):
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture
def fresh_ckptd():
    """A daemon of its own, for tests that need a config or kill it."""
    made = []

    def make(**extra):
        tmp = tempfile.mkdtemp(prefix="ckpt-py.")
        d = Daemon(tmp, **extra).start()
        made.append(d)
        return d
    yield make
    for d in made:
        d.stop(signal.SIGKILL)
        shutil.rmtree(d.tmp, ignore_errors=True)


_jobs = set()


@pytest.fixture
def job(request):
    """A job name unique in this session, derived from the test's name."""
    base = re.sub(r"[^A-Za-z0-9_.-]", "_", request.node.name)[:50]
    name, n = base, 1
    while name in _jobs:
        n += 1
        name = "%s.%d" % (base, n)
    _jobs.add(name)
    return name
