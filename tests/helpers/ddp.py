"""Run a function on N local processes joined by a ``gloo`` process group (for DDP tests).

Each process gets the torchrun environment (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``MASTER_ADDR``, ``MASTER_PORT``) and calls ``fn(*args)``; its return value comes back through
a file. Processes are started with ``spawn``, joined with a deadline, and killed when late.
Each rank leads its own process group, so a late rank is killed together with the DataLoader
workers it forked (killed alone, its workers would outlive the test).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import socket
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def free_port() -> int:
    """A TCP port that was free a moment ago (bind to port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def torchrun() -> list[str]:
    """The ``torchrun`` command of this interpreter's environment."""
    script = Path(sys.executable).with_name("torchrun")
    return [str(script)] if script.exists() else [sys.executable, "-m", "torch.distributed.run"]


def run_nodes(
    script: Path, per_node: Callable[[int], list[str]], cwd: Path, *, timeout: float = 240
) -> tuple[list[str], int]:
    """Run ``script`` under ``torchrun --nnodes 2``, one process per "node", on this host.

    ``per_node(node)`` gives the script's arguments on that node. Returns each node's output
    (stdout and stderr) and the rendezvous port; fails unless both exit with 0.
    """
    port = free_port()
    nodes = [
        subprocess.Popen(
            [
                *torchrun(),
                *("--nnodes", "2", "--node_rank", str(node), "--nproc_per_node", "1"),
                *("--master_addr", "127.0.0.1", "--master_port", str(port), str(script)),
                *per_node(node),
            ],
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for node in range(2)
    ]
    try:
        outputs = [node.communicate(timeout=timeout)[0] for node in nodes]
    finally:
        for node in nodes:
            node.kill()  # a no-op for one that ended
    assert [node.returncode for node in nodes] == [0, 0], outputs
    return outputs, port


def run_ddp(
    fn: Callable[..., Any], world_size: int, out: Path, *args: Any, timeout: float = 180
) -> list[Any]:
    """``[fn(*args) on rank r for r in range(world_size)]``; fails on error or timeout."""
    out.mkdir(parents=True, exist_ok=True)
    ctx = mp.get_context("spawn")
    port = free_port()
    procs = [
        ctx.Process(target=_entry, args=(fn, rank, world_size, port, str(out), args))
        for rank in range(world_size)
    ]
    for proc in procs:
        proc.start()
    started = time.monotonic()
    _wait(procs, timeout)
    waited = time.monotonic() - started
    failed = [rank for rank, proc in enumerate(procs) if proc.exitcode not in (0, None)]
    late = [rank for rank, proc in enumerate(procs) if proc.is_alive()]
    for proc in procs:
        if proc.is_alive():
            _kill_group(proc.pid)
            proc.kill()  # in case it had not made its group yet
            proc.join(10)
    errors = [_error(out, rank) for rank in range(world_size)]
    why = f"rank(s) {failed} failed" if failed else f"the {timeout:.0f} s deadline passed"
    assert not late, (
        f"ranks {late} still running after {waited:.0f} s ({why}); exit codes "
        f"{[proc.exitcode for proc in procs]}; errors: {errors}"
    )
    codes = [proc.exitcode for proc in procs]
    assert codes == [0] * world_size, f"exit codes {codes}; errors: {errors}"
    return [torch.load(out / f"rank{rank}.pt", weights_only=False) for rank in range(world_size)]


def _wait(procs: list[Any], timeout: float) -> None:
    """Wait for all processes, but stop early when one fails (the others would hang)."""
    deadline = time.monotonic() + timeout
    running = list(procs)
    while running and time.monotonic() < deadline:
        wait([proc.sentinel for proc in running], timeout=deadline - time.monotonic())
        running = [proc for proc in running if proc.is_alive()]
        if any(proc.exitcode not in (0, None) for proc in procs):
            return


def _kill_group(pid: int) -> None:
    """Kill the process group ``pid`` leads: the rank and every worker it started."""
    # no such group (yet): the caller kills the rank itself
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


def _error(out: Path, rank: int) -> str:
    path = out / f"rank{rank}.err"
    return path.read_text() if path.exists() else ""


def _entry(
    fn: Callable[..., Any], rank: int, world_size: int, port: int, out: str, args: tuple[Any, ...]
) -> None:
    os.environ.update(
        RANK=str(rank),
        WORLD_SIZE=str(world_size),
        LOCAL_RANK=str(rank),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
    )
    os.setpgid(0, 0)  # lead a process group: see _kill_group
    # a spawned child inherits "spawn" as its default start method; under torchrun a rank's
    # DataLoader workers use the platform's default (fork on Linux): do as torchrun does
    multiprocessing.set_start_method(None, force=True)
    torch.set_num_threads(1)
    try:
        torch.save(fn(*args), Path(out) / f"rank{rank}.pt")
        if dist.is_initialized():
            # tear down together: rank 0 hosts the TCP store, and a rank still shutting its
            # process group down after rank 0 has exited can wait on that store for minutes
            # (a collective one rank skipped still hangs both here, and is reported)
            dist.barrier()
    except BaseException:
        (Path(out) / f"rank{rank}.err").write_text(traceback.format_exc())
        raise
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
