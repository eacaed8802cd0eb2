"""Decoded blocks shared by a process and the DataLoader workers it forks.

When a dataset's decoded blocks all fit in its budget (``rdcc_nbytes``), ``num_workers=0``
decodes each block once and then serves every later epoch from its window. Worker processes
each had a window of their own, so a random order (every worker's batches touch every block)
decoded the whole file once per worker, and again every epoch, since workers end with their
epoch (measured: 2 workers, 313 blocks, 626 decodes per epoch against 313 once).

``SharedBlocks`` is one block per slot (slot = block) in anonymous shared memory
(``storage/byte_source.shared_memory``), made by the process that builds the engine, before any
worker forks: each forked worker inherits the very same pages, so a block decoded by one worker
is served to all, in this epoch and the next (new workers inherit it again). Only workers use it
(the building process keeps its own window, with pins and readahead); a pickled engine (spawn,
forkserver) leaves it behind, and its workers use their own windows as before. It is plain
memory, not a handle: nothing in it depends on the process that reads it.

A block's state is EMPTY, LOADING (with the pid that fills it) or READY. States change under one
lock shared by the processes (a semaphore: its acquire and release order the block's bytes
before its READY for every reader). A block another process is filling is decoded privately
(no process ever waits for another, which may be killed); a LOADING block whose filler is gone
is taken over. A failed fill returns the block to EMPTY; the error is raised by the read.
Blocks are never evicted: a file that changes is refused at its next open (the identity check).
"""

from __future__ import annotations

import multiprocessing
import os
from typing import Any

import numpy as np

from ..process import process_alive, process_generation
from ..storage.byte_source import shared_memory
from .sources import Geometry

__all__ = ["SharedBlocks"]

_EMPTY, _LOADING, _READY = 0, 1, 2
_CONTEXT = multiprocessing.get_context("fork")  # its semaphores unlink at once: no tracker


class SharedBlocks:
    """Every block of one dataset, decoded, in memory shared with forked workers.

    Args:
        geometry: The dataset's blocks (all of them get a slot).
    """

    def __init__(self, geometry: Geometry) -> None:
        self.geometry = geometry
        self.born = process_generation()  # changes in every forked child
        count = geometry.count
        owners = -(-count // 8) * 8  # states (1 byte each), then owners (int32), then blocks
        arena = -(-(owners + 4 * count) // 64) * 64
        self._memory = shared_memory(arena + count * geometry.block_nbytes)  # one map
        self.state = np.frombuffer(self._memory, np.uint8, count, 0)
        self.owner = np.frombuffer(self._memory, np.int32, count, owners)
        shape = (count, geometry.block_rows, *geometry.row_shape)
        size = int(np.prod(shape))
        self.arena = np.frombuffer(self._memory, geometry.dtype, size, arena).reshape(shape)
        self.lock = _CONTEXT.Lock()

    @property
    def usable(self) -> bool:
        """True in a process forked from the one that made it (a DataLoader worker)."""
        return process_generation() != self.born

    def __len__(self) -> int:
        return int(np.count_nonzero(self.state == _READY))

    def claim(self, ids: np.ndarray[Any, Any]) -> tuple[list[int], list[int]]:
        """Claim the EMPTY blocks of ``ids`` (sorted, unique) for this process to fill.

        Returns:
            (blocks this process now fills into their slots, blocks another live process is
            filling). The others are READY. A LOADING block whose filler is gone is claimed.
        """
        me = os.getpid()
        with self.lock:
            states = self.state[ids]
            loading = ids[states == _LOADING]
            gone = [int(b) for b in loading.tolist() if not process_alive(int(self.owner[b]))]
            fill = ids[states == _EMPTY].tolist() + gone
            self.state[fill] = _LOADING
            self.owner[fill] = me
        others = sorted(set(loading.tolist()) - set(gone))
        return sorted(fill), others

    def pending(self, blocks: list[int]) -> list[int]:
        """Those of ``blocks`` not READY now."""
        if not blocks:
            return []
        with self.lock:
            ready = self.state[blocks] == _READY
        return [b for b, done in zip(blocks, ready.tolist(), strict=True) if not done]

    def settle(self, blocks: list[int], ok: bool) -> None:
        """Blocks this process claimed are filled (``ok``), or back to EMPTY."""
        if not blocks:
            return
        with self.lock:
            self.state[blocks] = _READY if ok else _EMPTY

    def clear(self) -> None:
        """Forget every block (in every process that shares them)."""
        with self.lock:
            self.state[:] = _EMPTY

    def __reduce__(self) -> Any:
        # shared memory and its lock reach forked workers only: a pickled engine drops them
        return (type(None), ())
