"""Run a function on N local processes joined by a ``gloo`` process group (for DDP tests).

Each process gets the torchrun environment (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``MASTER_ADDR``, ``MASTER_PORT``) and calls ``fn(*args)``; its return value comes back through
a file. Processes are started with ``spawn``, joined with a deadline, and killed when late.
Each rank leads its own process group, so a late rank is killed together with the DataLoader
workers it forked (killed alone, its workers would outlive the test); before that, a late rank
is asked for its threads' stacks (``faulthandler`` on ``SIGUSR1``), which the failure shows.

Teardown waits on a barrier, never on another rank's process. This process hosts the group's
TCP store, as torchrun's agent does (``TORCHELASTIC_USE_AGENT_STORE``): with rank 0 as its host,
a rank 0 that left first took the store from under ranks still destroying their group, and
they waited on it for minutes. When ``fn`` returns with the group still up, every rank passes a
barrier (``monitored_barrier`` on gloo, bounded by the run's deadline) before any rank destroys
it; a rank that never comes is named in an error before the deadline instead of showing as late.
"""

from __future__ import annotations

import contextlib
import datetime
import faulthandler
import gc
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
from typing import IO, Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

# The teardown barrier ends this long before the run's deadline: a rank that never comes is
# reported by the ranks that waited for it (their error), before the parent kills anyone.
BARRIER_MARGIN_S = 20.0
# ... but a barrier always gets this much (a run whose fn used up its deadline still tears down)
BARRIER_MIN_S = 5.0
# How long a late rank gets to write its threads' stacks before it is killed.
STACKS_WAIT_S = 5.0
# How long a killed (or terminated) process gets to be reaped: every wait has a bound.
REAP_S = 10.0


def gloo_threads(settle_s: float = 0.0) -> list[str]:
    """Names of this process's threads that torch's gloo backend started (Linux: ``/proc``).

    A gloo group's worker threads live as long as the group, and one still releasing work when
    Python shuts down can abort the process (docs/training.md, "Ending a distributed script"):
    a script that ended its group as the docs say has none left. A thread that has exited but
    is not yet reaped (``pthread_join`` returns before the kernel drops its ``/proc`` entry)
    is not counted; ``settle_s``: how long threads still running get to end (polled; what a
    check right after ``destroy_process_group`` uses, for a loop thread finishing its turn).
    """
    deadline = time.monotonic() + settle_s
    while True:
        names = _live_threads("gloo")
        if not names or time.monotonic() >= deadline:
            return names
        time.sleep(0.02)


def _live_threads(part: str) -> list[str]:
    """Sorted names of this process's running threads whose name contains ``part``."""
    names = []
    for task in Path("/proc/self/task").iterdir():
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):  # ended meanwhile
            name = (task / "comm").read_text().strip()
            # the state follows the name in parentheses: Z (zombie) / X (dead) have exited
            state = (task / "stat").read_text().rpartition(")")[2].split()[0]
            if part in name and state not in ("Z", "X"):
                names.append(name)
    return sorted(names)


# How long a check that a group's threads are gone gives them to end after the group is destroyed.
GLOO_SETTLE_S = 2.0


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
    deadline = time.monotonic() + timeout
    try:
        outputs = [
            node.communicate(timeout=max(deadline - time.monotonic(), 0.1))[0] for node in nodes
        ]
    finally:
        for node in nodes:
            _stop_agent(node)
    assert [node.returncode for node in nodes] == [0, 0], outputs
    return outputs, port


def _stop_agent(agent: subprocess.Popen[str]) -> None:
    """End a torchrun agent that is still running, and reap it (each wait bounded).

    torchrun starts its workers in sessions of their own: killed outright, the agent would
    leave them running. SIGTERM first, which the agent passes on to its workers.
    """
    if agent.poll() is not None:
        return
    agent.terminate()
    try:
        agent.wait(REAP_S)
    except subprocess.TimeoutExpired:
        agent.kill()
        agent.wait(REAP_S)


def run_ddp(
    fn: Callable[..., Any], world_size: int, out: Path, *args: Any, timeout: float = 180
) -> list[Any]:
    """``[fn(*args) on rank r for r in range(world_size)]``; fails on error or timeout."""
    out.mkdir(parents=True, exist_ok=True)
    ctx = mp.get_context("spawn")
    started = time.monotonic()
    # CLOCK_MONOTONIC is one clock for every process of this host: the ranks get the deadline
    deadline = started + timeout
    store = dist.TCPStore(  # lives until every rank is gone (module docstring)
        "127.0.0.1",
        0,  # a port of its own choosing: no other process can take it before the store binds
        is_master=True,
        wait_for_workers=False,
        timeout=datetime.timedelta(seconds=timeout),
    )
    procs = [
        ctx.Process(
            target=_entry, args=(fn, rank, world_size, store.port, str(out), deadline, args)
        )
        for rank in range(world_size)
    ]
    try:
        for proc in procs:
            proc.start()
        _wait(procs, deadline)
        waited = time.monotonic() - started
        failed = [rank for rank, proc in enumerate(procs) if proc.exitcode not in (0, None)]
        late = [rank for rank, proc in enumerate(procs) if proc.is_alive()]
        stacks = _stacks(procs, late, out)
    finally:
        for proc in procs:
            if proc.is_alive():
                _kill_group(proc.pid)
                proc.kill()  # in case it had not made its group yet
            if proc.pid is not None:
                proc.join(REAP_S)
        del store
    errors = [_error(out, rank) for rank in range(world_size)]
    why = f"rank(s) {failed} failed" if failed else f"the {timeout:.0f} s deadline passed"
    assert not late, (
        f"ranks {late} still running after {waited:.0f} s ({why}); exit codes "
        f"{[proc.exitcode for proc in procs]}; errors: {errors}; stacks of the late ranks: "
        f"{stacks}"
    )
    codes = [proc.exitcode for proc in procs]
    assert codes == [0] * world_size, f"exit codes {codes}; errors: {errors}"
    return [torch.load(out / f"rank{rank}.pt", weights_only=False) for rank in range(world_size)]


def _wait(procs: list[Any], deadline: float) -> None:
    """Wait for all processes until ``deadline``, but stop early when one fails (the others
    would hang)."""
    running = list(procs)
    while running and time.monotonic() < deadline:
        wait([proc.sentinel for proc in running], timeout=max(deadline - time.monotonic(), 0))
        running = [proc for proc in running if proc.is_alive()]
        if any(proc.exitcode not in (0, None) for proc in procs):
            return


def _stacks(procs: list[Any], late: list[int], out: Path) -> dict[int, str]:
    """The threads' stacks of each late rank (asked for with SIGUSR1, see ``_entry``)."""
    if not late:
        return {}
    for rank in late:
        with contextlib.suppress(ProcessLookupError):
            os.kill(procs[rank].pid, signal.SIGUSR1)
    paths = {rank: out / f"rank{rank}.stacks" for rank in late}
    until = time.monotonic() + STACKS_WAIT_S
    # faulthandler writes with the signal: a file still empty after a moment gets no more
    while time.monotonic() < until and not all(
        p.exists() and p.stat().st_size for p in paths.values()
    ):
        time.sleep(0.1)
    time.sleep(0.2)  # let the last lines land
    return {rank: p.read_text() if p.exists() else "" for rank, p in paths.items()}


def _kill_group(pid: int) -> None:
    """Kill the process group ``pid`` leads: the rank and every worker it started."""
    # no such group (yet): the caller kills the rank itself
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


def _error(out: Path, rank: int) -> str:
    path = out / f"rank{rank}.err"
    return path.read_text() if path.exists() else ""


def _teardown_barrier(deadline: float) -> None:
    """Return once every rank is here, done with its work, or raise before ``deadline``.

    gloo gets ``monitored_barrier``: rank 0 names every rank that did not come within the time
    left. Other backends have no such barrier: theirs waits for the group's own timeout (the
    parent's deadline still ends the run).
    """
    if dist.get_backend() != "gloo":
        dist.barrier()
        return
    left = max(deadline - time.monotonic() - BARRIER_MARGIN_S, BARRIER_MIN_S)
    dist.monitored_barrier(timeout=datetime.timedelta(seconds=left), wait_all_ranks=True)


_stacks_file: IO[str] | None = None  # open for the rank's life: faulthandler writes to it


def _entry(
    fn: Callable[..., Any],
    rank: int,
    world_size: int,
    port: int,
    out: str,
    deadline: float,
    args: tuple[Any, ...],
) -> None:
    global _stacks_file
    os.environ.update(
        RANK=str(rank),
        WORLD_SIZE=str(world_size),
        LOCAL_RANK=str(rank),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        TORCHELASTIC_USE_AGENT_STORE="True",  # the store is the parent's: every rank a client
    )
    os.setpgid(0, 0)  # lead a process group: see _kill_group
    _stacks_file = (Path(out) / f"rank{rank}.stacks").open("w")
    faulthandler.register(signal.SIGUSR1, file=_stacks_file, all_threads=True)
    # a spawned child inherits "spawn" as its default start method; under torchrun a rank's
    # DataLoader workers use the platform's default (fork on Linux): do as torchrun does
    multiprocessing.set_start_method(None, force=True)
    torch.set_num_threads(1)
    try:
        torch.save(fn(*args), Path(out) / f"rank{rank}.pt")
        if dist.is_initialized():
            # tear down together (module docstring): no rank destroys the group while another
            # may still use it (a group that fn destroyed itself is gone already)
            _teardown_barrier(deadline)
    except BaseException:
        (Path(out) / f"rank{rank}.err").write_text(traceback.format_exc())
        raise
    finally:
        if dist.is_initialized():
            # a DDP wrapper fn left behind goes first (it holds the group, from a reference
            # cycle): freed after the group, it would free the group itself, holding the GIL
            # while gloo's threads stop, and torch can hang there (docs/training.md, the end)
            gc.collect()
            dist.destroy_process_group()
