"""Read-ahead: the blocks of coming rows filled in the decode pool before a read needs them.

When blocks are read outside the GIL (``BlockFiller.releases_gil``), ``ReadAhead.start`` has
the kernel read the raw bytes of the next rows' blocks (one coalesced request per span) and
fills them into the window's free slots in the pool ahead of need; a read of them waits instead
of decoding them twice. From an object store, one task asks for every block at once
(concurrent requests), and a sampler's runs of adjacent blocks come whole (``whole_runs``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..indices import IndexArray
from .block_fillers import BlockFiller
from .decoded_pass import DecodedPass
from .pool import decode_threads, submit
from .serving import WindowServing
from .window import Claim

__all__ = ["ReadAhead", "whole_runs"]


class ReadAhead:
    """Fills the blocks of coming rows ahead of need (see the module docstring).

    Args:
        serving: The window the blocks are filled into.
        source: Fills one block.
        decoded: The dataset's decoded pass: while reads go through it, nothing is read ahead.
    """

    def __init__(self, serving: WindowServing, source: BlockFiller, decoded: DecodedPass) -> None:
        self.serving, self.source, self.decoded = serving, source, decoded

    @property
    def rows(self) -> int:
        """Rows worth filling ahead of need: one planned window (0 when none was planned)."""
        serving = self.serving
        rows, blocks = serving.geometry.block_rows, serving.window_blocks
        if blocks is None or rows == 1 or not self.source.releases_gil:
            return 0
        if serving.capacity() < 2 * blocks + 2:
            return 0  # the next window would evict blocks this one still needs
        return blocks * rows

    def start(self, idx: IndexArray) -> None:
        """Start filling, in the pool, the blocks rows ``idx`` need that are not held yet.

        Returns at once; a later read of these rows waits for them instead of filling them
        again. Nothing happens unless blocks are read outside the GIL, with a decode pool, a
        window, and free slots.
        """
        serving, geometry = self.serving, self.serving.geometry
        capacity = serving.capacity()
        if not self.source.releases_gil or geometry.block_rows == 1 or capacity == 0:
            return
        if idx.size == 0 or decode_threads() < 2 or self.decoded.in_use():
            return
        ids = np.unique(idx // geometry.block_rows)
        remote = self.source.batches_reads
        if remote and serving.run_blocks > 1:  # the rest of each run comes with it: no more trips
            ids = whole_runs(ids, serving.run_blocks, geometry.count)
        claim = serving.cache.claim_ahead(ids, capacity)
        if claim is None:
            return  # the window is busy
        self.source.advise(claim.fresh)  # the kernel reads them while the pool decodes others
        if remote:
            # an object store: one task asks for every chunk at once (concurrent requests)
            many = (claim, list(claim.fresh))
            if submit(self._fill_many, many) is None:
                self._fill_many(many)
            return
        for block in claim.fresh:
            task = (claim, block)
            if submit(self._fill, task) is None:
                self._fill(task)

    def _fill(self, task: tuple[Claim, int]) -> None:
        claim, block = task
        try:
            self.source.fill(block, claim.arena[claim.slot(block)])
            ok = True
        except BaseException:
            ok = False  # a later read fills it again and reports what is wrong
        self.serving.cache.settle_ahead(claim, block, ok)

    def _fill_many(self, task: tuple[Claim, list[int]]) -> None:
        claim, blocks = task
        fills = [(block, claim.arena[claim.slot(block)]) for block in blocks]
        try:  # decoded in this (pool) thread: waiting on the pool from inside it could deadlock
            errors = self.source.fill_many(fills, parallel=False)
        except BaseException:
            errors = [RuntimeError("read failed")] * len(blocks)  # a later read reports it
        for block, error in zip(blocks, errors, strict=True):
            self.serving.cache.settle_ahead(claim, block, error is None)


def whole_runs(ids: np.ndarray[Any, Any], run: int, count: int) -> np.ndarray[Any, Any]:
    """Every block of the runs of ``run`` blocks (aligned at multiples of it) that ``ids`` touch."""
    starts = np.unique(ids // run) * run
    every = (starts[:, None] + np.arange(run)).ravel()
    return every[every < count]
