"""Process helpers: a freshly forked child's view of ``PerProcess`` slots, a pid nobody holds,
processes that start together."""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import subprocess
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from nn_handler._io import process


def as_if_forked() -> None:
    """Run what ``os.fork`` runs in a child: every per-process value made so far is inherited."""
    process._after_fork_in_child()


def gone_pid(timeout: float = 60) -> int:
    """The pid of a process that has exited (as if a holder of shared state died)."""
    proc = mp.get_context("fork").Process(target=int)
    proc.start()
    proc.join(timeout=timeout)
    assert proc.pid is not None
    return proc.pid


@contextlib.contextmanager
def process_with_pid(pid: int) -> Iterator[subprocess.Popen[bytes]]:
    """A process that runs under ``pid`` while the block runs: a dead holder's pid reused.

    As root, ``ns_last_pid`` hands out the pid; elsewhere the process gets whatever pid comes
    (the test still shows that nothing waits on a bare pid).
    """
    with contextlib.suppress(OSError):
        Path("/proc/sys/kernel/ns_last_pid").write_text(str(pid - 1))
    with subprocess.Popen(["sleep", "120"]) as proc:
        try:
            yield proc
        finally:
            proc.kill()


def together(
    target: Callable[..., None], args: Sequence[tuple[Any, ...]], timeout: float = 60
) -> list[Any]:
    """Fork one process per ``args`` tuple and let them start at once; return what they put.

    Each runs ``target(*its_args, start, results)``: ``start`` is a barrier of all of them
    (``start.wait(...)`` where they should begin together), ``results`` a queue each puts its
    answer on. Answers come back in the order they arrive; every process must exit with 0.
    """
    ctx = mp.get_context("fork")
    start, results = ctx.Barrier(len(args)), ctx.Queue()
    procs = [ctx.Process(target=target, args=(*a, start, results)) for a in args]
    for p in procs:
        p.start()
    out = [results.get(timeout=timeout) for _ in procs]
    for p in procs:
        p.join(timeout)
        assert p.exitcode == 0
    return out
