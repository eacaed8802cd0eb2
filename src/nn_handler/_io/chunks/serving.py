"""Window serving: rows gathered from a window of decoded blocks, each block decoded once.

Every random sample of a compressed dataset costs its whole chunk, so a chunk is decoded once
and all its rows are served from it while it stays in the window (``window.py``): a batch
claims the blocks it needs, the missing ones are filled in parallel in the decode pool
(``fills.py``), and the batch is gathered with one ``np.take`` from the window's arena.

The window holds as many blocks as the file's ``rdcc_nbytes`` allows (HDF5's own chunk cache is
switched off for these datasets, so memory stays within that budget), or, when a sampler
announced its shuffle window (``plan``), two windows and a margin: a window of 64 chunks of
786 KB then holds ~100 MB, not the full budget. A batch wider than the window is served in
parts. Without a window (no budget), or with one row per chunk (large images), blocks are
filled straight into the batch or into scratch and nothing is kept. The window belongs to one
process (``PerProcess``): a forked or spawned worker builds its own.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from ..file.source import H5Source
from ..indices import IndexArray
from ..process import PerProcess
from .fills import BlockFills
from .window import Claim, Window

__all__ = ["Pieces", "WindowServing"]

_GROUP_BYTES = 64 * 1024**2  # decoded blocks held at once by one batch without a window

#: Row pieces of a batch, sorted by block: (block, first row, end row, place in the batch).
Pieces = tuple[IndexArray, IndexArray, IndexArray, IndexArray]


class WindowServing:
    """Rows of one dataset served through this process's window (see the module docstring).

    Args:
        file: The file (its ``rdcc_nbytes`` bounds the window).
        fills: Fills the dataset's blocks.
    """

    def __init__(self, file: H5Source, fills: BlockFills) -> None:
        self.file, self.fills = file, fills
        self.geometry = fills.geometry
        self.window_blocks: int | None = None
        #: adjacent blocks a sampler shuffles together (its block in chunks): fetched as one run
        self.run_blocks = 1
        self._window: PerProcess[Window] = PerProcess(functools.partial(Window, self.geometry))

    @property
    def cache(self) -> Window:
        """This process's window of decoded blocks."""
        return self._window.get()

    def plan(self, blocks: int, run: int) -> None:
        """Hold about two windows of ``blocks`` blocks, fetched in runs of ``run`` blocks."""
        self.window_blocks = max(1, int(blocks))
        self.run_blocks = max(1, int(run))
        self.cache.clear()

    def capacity(self) -> int:
        """Blocks the window holds (0: no window)."""
        budget = self.file.options.rdcc_nbytes // max(1, self.geometry.block_nbytes)
        if self.window_blocks is not None:
            budget = min(budget, 2 * self.window_blocks + 2)
        return int(min(budget, self.geometry.count))

    def read(
        self,
        idx: IndexArray,
        blocks: np.ndarray[Any, Any],
        uniq: np.ndarray[Any, Any],
        out: np.ndarray[Any, Any],
    ) -> int:
        """Fill ``out`` with rows ``idx`` (of ``blocks``, ``uniq`` of them); blocks it filled."""
        capacity = self.capacity()
        if self.geometry.block_rows == 1 or capacity == 0:
            return self._read_uncached(idx, blocks, out)
        if uniq.size <= capacity:
            return self._read_group(uniq, idx, blocks, out, None)
        filled = 0
        for g in range(0, uniq.size, capacity):  # a batch wider than the window: in parts
            group = uniq[g : g + capacity]
            pos = np.flatnonzero(np.isin(blocks, group))
            filled += self._read_group(group, idx[pos], blocks[pos], out, pos)
        return filled

    def copy_pieces(
        self, ids: np.ndarray[Any, Any], pieces: Pieces, out: np.ndarray[Any, Any]
    ) -> bool:
        """Copy row ``pieces`` of blocks ``ids`` out of the window, in groups it holds.

        False where the window does not serve them (no window, one row per block) or another
        thread's fill failed: the caller reads them otherwise (nothing, or part, copied).
        """
        capacity = self.capacity()
        if self.geometry.block_rows == 1 or capacity == 0:
            return False
        block = pieces[0]
        per_group = max(1, min(capacity, _GROUP_BYTES // max(1, self.geometry.block_nbytes)))
        for g in range(0, ids.size, per_group):
            group = ids[g : g + per_group]
            a, b = np.searchsorted(block, [group[0], group[-1] + 1])
            part = (pieces[0][a:b], pieces[1][a:b], pieces[2][a:b], pieces[3][a:b])
            if not self._copy_group(group, capacity, part, out):
                return False
        return True

    def _copy_group(
        self, group: np.ndarray[Any, Any], capacity: int, pieces: Pieces, out: np.ndarray[Any, Any]
    ) -> bool:
        """Claim blocks ``group``, fill the missing ones, copy ``pieces`` out; False: not filled."""
        window = self.cache
        claim = window.claim(group, capacity)
        try:
            extra = self._fill_claim(window, claim)
            if claim.awaited and not window.wait(claim):
                return False
            slots = dict(zip(claim.ids.tolist(), claim.slots.tolist(), strict=True))
            rows = self.geometry.block_rows
            for c, p, q, t in zip(*(x.tolist() for x in pieces), strict=True):
                s = slots[c]
                src = extra[c] if s < 0 else claim.arena[s]
                out[t : t + q - p] = src[p - c * rows : q - c * rows]
            return True
        finally:
            window.release(claim)

    def _read_group(
        self,
        ids: np.ndarray[Any, Any],
        idx: IndexArray,
        blocks: np.ndarray[Any, Any],
        out: np.ndarray[Any, Any],
        pos: np.ndarray[Any, Any] | None,
    ) -> int:
        """Gather rows ``idx`` of blocks ``ids`` through the window; how many blocks it filled."""
        window = self.cache
        claim = window.claim(ids, self.capacity())
        retry, filled = False, 0
        try:
            extra = self._fill_claim(window, claim)
            filled = len(claim.fresh) + len(extra)
            if claim.awaited and not window.wait(claim):
                retry = True  # another thread's fill failed: claim and fill them here
                return filled
            rows = self.geometry.block_rows
            where = np.searchsorted(ids, blocks)
            flat = claim.arena.reshape(-1, *self.geometry.row_shape)
            at = claim.slots[where] * rows + (idx - blocks * rows)
            outside = claim.slots[where] < 0
            if pos is None and not outside.any():
                np.take(flat, at, axis=0, out=out, mode="clip")  # "raise" would copy twice
            else:
                self._gather_mixed(flat, at, outside, (idx, blocks), extra, out, pos)
        finally:
            window.release(claim)
            if retry:
                filled += self._read_group(ids, idx, blocks, out, pos)
        return filled

    def _fill_claim(self, window: Window, claim: Claim) -> dict[int, np.ndarray[Any, Any]]:
        """Fill the claim's fresh blocks into their slots, others (no slot free) into scratch."""
        extra = {
            int(b): self.geometry.empty_block()
            for b, s in zip(claim.ids.tolist(), claim.slots.tolist(), strict=True)
            if s < 0
        }
        tasks = [(b, claim.arena[claim.slot(b)]) for b in claim.fresh] + list(extra.items())
        try:
            self.fills.fill(tasks)
        except BaseException:
            window.settle(claim, ok=False)
            raise
        window.settle(claim, ok=True)
        return extra

    def _gather_mixed(
        self,
        flat: np.ndarray[Any, Any],
        at: np.ndarray[Any, Any],
        outside: np.ndarray[Any, Any],
        rows_of: tuple[IndexArray, np.ndarray[Any, Any]],
        extra: dict[int, np.ndarray[Any, Any]],
        out: np.ndarray[Any, Any],
        pos: np.ndarray[Any, Any] | None,
    ) -> None:
        """Rows from the window's slots and, where no slot was free, from scratch blocks."""
        idx, blocks = rows_of
        where = np.arange(idx.size) if pos is None else pos
        inside = ~outside
        out[where[inside]] = flat[at[inside]]
        for k in np.flatnonzero(outside).tolist():
            block = int(blocks[k])
            out[where[k]] = extra[block][int(idx[k]) - block * self.geometry.block_rows]

    def _read_uncached(
        self, idx: IndexArray, blocks: np.ndarray[Any, Any], out: np.ndarray[Any, Any]
    ) -> int:
        """No window (one row per block, or no budget): fill into the batch or scratch.

        Returns how many blocks it filled (every one it needed).
        """
        rows = self.geometry.block_rows
        if rows == 1:
            uniq, first = np.unique(idx, return_index=True)
            tasks = [(int(b), out[int(p) : int(p) + 1]) for b, p in zip(uniq, first, strict=True)]
            self.fills.fill(tasks)
            if uniq.size < idx.size:  # duplicates: copy from the first occurrence
                out[...] = out[first[np.searchsorted(uniq, idx)]]
            return int(uniq.size)
        per_group = max(1, _GROUP_BYTES // max(1, self.geometry.block_nbytes))
        uniq = np.unique(blocks)
        for g in range(0, uniq.size, per_group):
            arrays = {int(b): self.geometry.empty_block() for b in uniq[g : g + per_group]}
            self.fills.fill(list(arrays.items()))
            for b, arr in arrays.items():
                pos = np.flatnonzero(blocks == b)
                out[pos] = arr[idx[pos] - b * rows]
        return int(uniq.size)
