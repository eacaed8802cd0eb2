"""Process faults: a killed DataLoader worker, a killed or hung DDP rank, and a resume after a
crash; each ends in an error within bounded time (never an endless hang), and the resumed run
sees every remaining sample exactly once."""

from __future__ import annotations

import json
import os
import re
import signal
import time
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from helpers.damage import run_python
from helpers.ddp import free_port
from helpers.handler import write_blobs

pytestmark = pytest.mark.slow

COLLECTIVE_TIMEOUT = 5  # seconds: what a hung rank costs the others, as passed to gloo
JOIN = 120  # far above any healthy run here; a hang fails the test instead of blocking CI


KILLED_WORKER = """
import os, signal, sys, time
sys.path.insert(0, {tests!r})
from torch.utils.data import DataLoader
from nn_handler.dataloaders import H5LazyDataset

class KillWorkerAt:  # a transform that kills the worker running it at sample `at`
    def __init__(self, at):
        self.at = at
    def __call__(self, x):
        if int(x[0]) == self.at:
            os.kill(os.getpid(), signal.SIGKILL)
        return x

if __name__ == "__main__":
    ds = H5LazyDataset({data!r}, "x", "y", transform=KillWorkerAt(37))
    loader = DataLoader(ds, batch_size=4, num_workers=2, multiprocessing_context={context!r})
    start, seen = time.monotonic(), 0
    try:
        for x, _ in loader:
            seen += len(x)
    except Exception as exc:  # torch's RuntimeError, or the pipe's ConnectionResetError first
        line = f"{{time.monotonic() - start:.1f}} {{seen}} {{type(exc).__name__}} {{exc}}"
        os.write(1, line.encode())  # one call: torch's SIGCHLD handler may raise between two
    os._exit(0)  # the surviving worker's broken pipe is shutdown noise, not the point here
"""


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_killed_dataloader_worker_is_an_error_not_a_hang(tmp_path, context):
    # in a child interpreter: torch's SIGCHLD handler raises again for the other worker later
    data = write_blobs(tmp_path / "b.h5", 64)
    script = tmp_path / "loader.py"  # spawn workers import the main module: a real file
    tests = str(Path(__file__).parent.parent)
    script.write_text(KILLED_WORKER.format(tests=tests, data=str(data), context=context))
    began = time.monotonic()
    done = run_python(f"import runpy; runpy.run_path({str(script)!r}, run_name='__main__')", JOIN)
    assert time.monotonic() - began < JOIN  # run_python's timeout would have raised anyway
    if not done.stdout:  # torch's SIGCHLD handler may raise again while we report: stderr
        assert re.search(r"killed by signal|exited unexpectedly|ConnectionReset", done.stderr)
        return
    seconds, seen, kind, message = done.stdout.split(" ", 3)
    if kind == "RuntimeError":
        assert "DataLoader worker" in message
        assert "killed by signal" in message or "exited unexpectedly" in message
    else:  # spawn: the dead worker's pipe can fail before torch's SIGCHLD check reports it
        assert kind in ("ConnectionResetError", "BrokenPipeError", "EOFError"), kind
    assert float(seconds) < JOIN and int(seen) < 64


def _rank(rank: int, port: int, out: str, fault: str) -> None:
    """Rank 1 dies (or hangs) after one all-reduce; rank 0 reports how its next one ends."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    timeout = timedelta(seconds=COLLECTIVE_TIMEOUT)
    dist.init_process_group("gloo", rank=rank, world_size=2, timeout=timeout)
    tensor = torch.ones(4)
    dist.all_reduce(tensor)
    if rank == 1:
        os.kill(os.getpid(), signal.SIGKILL if fault == "killed" else signal.SIGSTOP)
    start = time.monotonic()
    try:
        dist.all_reduce(tensor)
        outcome = "no error"
    except Exception as exc:  # DistBackendError (a RuntimeError) from gloo
        outcome = f"{type(exc).__name__}: {exc}"
    Path(out).write_text(json.dumps({"seconds": time.monotonic() - start, "error": outcome}))
    os._exit(0)  # the peer is gone: do not wait for it in the process group's shutdown


@pytest.mark.parametrize("fault", ["killed", "hung"])
def test_a_dead_or_hung_gloo_rank_makes_the_others_fail(tmp_path, fault):
    ctx = mp.get_context("spawn")
    port, out = free_port(), tmp_path / "rank0.json"
    procs = [ctx.Process(target=_rank, args=(r, port, str(out), fault)) for r in range(2)]
    for proc in procs:
        proc.start()
    procs[0].join(JOIN)
    alive = procs[0].is_alive()
    for proc in procs:  # SIGKILL works on a stopped process too
        if proc.is_alive():
            proc.kill()
        proc.join(10)
    assert not alive, "rank 0 hung after its peer died"
    result = json.loads(out.read_text())
    assert result["error"] != "no error"
    limit = COLLECTIVE_TIMEOUT + 30 if fault == "hung" else 30
    assert result["seconds"] < limit, result


RUN = """
import os, signal, sys
sys.path.insert(0, {tests!r})
import torch
from torch import nn
from helpers.handler import TinyNet
from nn_handler import NNHandler
from nn_handler.dataloaders import H5LazyDataset

class Record:
    def __init__(self, log, kill_after):
        self.log, self.kill_after, self.count = log, kill_after, 0
    def __call__(self, batch):
        x, y = batch
        with open(self.log, "a") as fh:
            fh.write(" ".join(str(int(i)) for i in x[:, 0]) + "\\n")
        self.count += 1
        if self.count == self.kill_after:
            os.kill(os.getpid(), signal.SIGKILL)  # a crash, mid-epoch, after a checkpoint
        return x[:, 1:], y

torch.manual_seed(0)
handler = NNHandler(TinyNet, batch_fn=Record({log!r}, {kill_after}), progress=False, log_fn=None)
handler.set_optimizer(torch.optim.SGD, lr=0.1)
handler.set_loss_fn(nn.CrossEntropyLoss())
handler.set_train_loader(H5LazyDataset({data!r}, "x", "y"), batch_size=4, shuffle=True)
if {resume}:
    handler.load({ckpt!r})
handler.train(2, checkpoint_path={ckpt!r}, checkpoint_every_steps=3)
"""


def test_resume_after_a_crash_sees_every_remaining_sample_once(tmp_path):
    data = write_blobs(tmp_path / "b.h5", 40)  # 10 steps per epoch
    tests = str(Path(__file__).parent.parent)
    common = {"tests": tests, "data": str(data), "ckpt": str(tmp_path / "c.pt")}
    first = tmp_path / "first.log"
    crashed = run_python(
        RUN.format(log=str(first), kill_after=15, resume=False, **common), timeout=JOIN
    )
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-2000:]
    second = tmp_path / "second.log"
    resumed = run_python(RUN.format(log=str(second), kill_after=0, resume=True, **common), JOIN)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    before = [[int(i) for i in line.split()] for line in first.read_text().splitlines()]
    after = [int(i) for line in second.read_text().splitlines() for i in line.split()]
    # the last checkpoint came after step 12 (epoch 2, step 2): 2 batches of epoch 2 were done
    epoch2_done = [i for batch in before[10:12] for i in batch]
    epoch2_rest = after[: 40 - len(epoch2_done)]
    assert sorted(epoch2_done + epoch2_rest) == list(range(40))  # each sample exactly once
    assert len(after) == 40 - len(epoch2_done)  # and training ended with epoch 2
    assert np.unique(before[10:15]).size == 20  # steps 13-15 ran, were lost, and ran again
