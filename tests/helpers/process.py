"""Process helpers: a freshly forked child's view of ``PerProcess`` slots, a pid nobody holds."""

from __future__ import annotations

import multiprocessing as mp

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
