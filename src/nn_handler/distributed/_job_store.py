"""The job's key-value store for remote metadata: the default ``torch.distributed`` group's.

Registered with the I/O layer at import (``_io/storage/remote/job_blocks.py``, which knows no
torch): where this process started (or joined) a process group, ranks hand each other the
metadata blocks of a stored object instead of each fetching them.

A forked child (a DataLoader worker) inherits the group's Python objects but shares its
parent's store connection: a request from it would interleave with the parent's on one socket.
So a process forked while a group was up never uses the store (its parent already fetched the
metadata for it); nor does one whose torch build has no store to give.
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING

import torch.distributed as dist

from .._io import JobStore, around_fork, process_generation, set_job_store

if TYPE_CHECKING:  # (torch's stubs name the class only where it is defined)
    from torch._C._distributed_c10d import Store

__all__: list[str] = []

# the process generation (``_io/process.py``) that had the group when this process first forked
_group_at_fork: int | None = None


class _GroupStore:
    """``JobStore`` over a ``torch.distributed`` store (non-collective calls only)."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def claim(self, key: str) -> bool:
        return int(self._store.add(key + "/claimed", 1)) == 1

    def publish(self, key: str, value: bytes) -> None:
        self._store.set(key, value)  # type: ignore[arg-type]  # (bytes are taken as they are)

    def wait_for(self, key: str, timeout_s: float) -> bytes | None:
        try:
            self._store.wait([key], datetime.timedelta(seconds=max(timeout_s, 0.001)))
            return bytes(self._store.get(key))
        except RuntimeError:  # not published in time, or the store went away: fetch it
            return None


def _group_store() -> JobStore | None:
    """This process's default group's store; None without one, or in a forked child of it."""
    if not (dist.is_available() and dist.is_initialized()):
        return None
    if _group_at_fork not in (None, process_generation()):  # the group came with the fork
        return None
    try:
        from torch.distributed.distributed_c10d import _get_default_store
    except ImportError:  # (a private function: a torch without it shares nothing)
        return None
    try:
        return _GroupStore(_get_default_store())
    except (RuntimeError, ValueError):
        return None


def _before_fork() -> None:
    """Remember which process had the group when one is up (its forked children do not)."""
    global _group_at_fork
    if dist.is_available() and dist.is_initialized() and _group_at_fork is None:
        _group_at_fork = process_generation()


around_fork(_before_fork, lambda: None)
set_job_store(_group_store)
