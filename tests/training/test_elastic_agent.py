"""torchrun's elastic agent: two agents share a c10d rendezvous, one is killed mid-epoch.

The survivor's workers fail (their peer is gone), the agent restarts them with the smaller
world, and the script resumes from the last periodic checkpoint (``checkpoint_every_steps``):
over both runs every sample of the epoch is trained exactly once, counting in the first run
only the batches the checkpoint covered.
"""

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers.ddp import free_port
from helpers.handler import write_blobs

WORKER = Path(__file__).resolve().parents[1] / "helpers" / "elastic_worker.py"
N = 96  # 12 steps of 4 per rank on 2 processes


def _agent(port, is_host, args, log):
    command = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1:2"]
    command += ["--nproc_per_node", "1", "--max-restarts", "2", "--rdzv_backend", "c10d"]
    command += ["--rdzv_endpoint", f"127.0.0.1:{port}", "--rdzv_id", f"elastic{port}"]
    command += ["--rdzv_conf", f"is_host={int(is_host)},last_call_timeout=1"]
    command += ["--monitor_interval", "0.2", str(WORKER), *map(str, args)]
    return subprocess.Popen(
        command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=os.environ
    )


def _lines(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _kill_workers(logs):
    """Workers left behind by a failed run (torchrun starts them in sessions of their own)."""
    for path in logs.glob("*.jsonl"):
        lines = _lines(path)
        alive = lines and "done_step" not in lines[-1]
        if alive and "pid" in lines[0]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(lines[0]["pid"], signal.SIGKILL)


def _wait_for(condition, deadline, what):
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_survivor_finishes_the_epoch_on_a_smaller_world(tmp_path):
    data = write_blobs(tmp_path / "train.h5", N)
    logs = tmp_path / "logs"
    logs.mkdir()
    checkpoint = tmp_path / "ck.pt"
    port = free_port()
    args = (data, checkpoint, logs, 0.4)
    with (tmp_path / "a.log").open("w") as a_log, (tmp_path / "b.log").open("w") as b_log:
        host = _agent(port, True, args, a_log)
        other = _agent(port, False, args, b_log)
        try:
            # mid-epoch: both ranks of the first run have trained past a few checkpoints
            deadline = time.monotonic() + 180
            first = [logs / f"restart0_world2_rank{r}.jsonl" for r in range(2)]

            def past_step_3():
                return all(p.exists() and len(_lines(p)) > 4 for p in first)

            _wait_for(past_step_3, deadline, "the first run to train a few steps")
            # the node goes: its agent and its worker (torchrun gives workers their own session)
            starts = [_lines(path)[0] for path in first]
            os.killpg(other.pid, signal.SIGKILL)
            for start in starts:
                if start["agent"] == other.pid:
                    os.kill(start["pid"], signal.SIGKILL)
            other.wait(30)
            host.wait(240)
        finally:
            for proc in (host, other):
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(30)
            _kill_workers(logs)
    output = (tmp_path / "a.log").read_text()
    assert host.returncode == 0, output
    resumed = sorted(logs.glob("restart*_world1_rank0.jsonl"))
    assert len(resumed) == 1, (sorted(p.name for p in logs.iterdir()), output)
    lines = _lines(resumed[0])
    start = lines[0]["start_step"]
    assert 0 < start < 12 and "done_step" in lines[-1]
    # the first run's batches that the checkpoint the survivor loaded had covered
    covered = [
        row
        for path in first
        for line in _lines(path)
        if "rows" in line and line["before_step"] < start
        for row in line["rows"]
    ]
    rest = [row for line in lines if "rows" in line for row in line["rows"]]
    assert sorted(covered + rest) == list(range(N))  # every sample once, on 2 then 1 process
