"""Rows of a contiguous dataset in an object store, read by byte ranges instead of h5py.

h5py would read a store-held file through its file object one slab at a time, one round trip
after another. Here the rows a batch needs are turned into byte ranges (consecutive rows into
one range) and read with one ``ByteSource.read_ranges`` call: merged where near, concurrent
otherwise. A dataset of at most ``WHOLE_BYTES`` (labels, small tables) is read whole, once per
process, on its first use: one batch of concurrent requests instead of one round trip per batch.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..indices import IndexArray
from ..process import PerProcess
from ..storage.byte_source import ByteSource
from .strategy import BaseRows, DatasetRows, StrategyName

__all__ = ["WHOLE_BYTES", "RangedRows"]

#: Contiguous datasets up to this size are read whole, once per process.
WHOLE_BYTES = 64 * 1024**2


class RangedRows(BaseRows):
    """The rows of ``rows``, stored contiguously at ``offset`` of ``file`` (the ``ranges`` way).

    Args:
        rows: The dataset's rows (stored as their values: the layout check said so).
        file: The bytes (a ``RemoteFile`` or ``CachedFile``).
        offset: Where the first row starts.
    """

    strategy: StrategyName = "ranges"

    def __init__(self, rows: DatasetRows, file: ByteSource, offset: int) -> None:
        self.rows, self.file, self.offset = rows, file, offset
        self.row_nbytes = rows.row_nbytes
        self.whole = self.row_nbytes * rows.length <= WHOLE_BYTES
        self._all: PerProcess[np.ndarray[Any, Any]] = PerProcess()

    def read(
        self, idx: IndexArray, out: np.ndarray[Any, Any] | None, checked: bool
    ) -> np.ndarray[Any, Any]:
        """Rows ``idx`` (any order, repeats allowed) into ``out`` (see ``RowStrategy.read``)."""
        out = self.rows.empty(idx.size) if out is None else out
        if self.whole:
            np.take(self._every_row(), idx, axis=0, out=out)
            return out
        uniq, inverse = np.unique(idx, return_inverse=True)
        rows = self._read_sorted(uniq)
        np.take(rows, inverse.reshape(-1), axis=0, out=out)
        return out

    def read_range(self, start: int, stop: int, out: np.ndarray[Any, Any], checked: bool) -> None:
        """Rows ``[start, stop)`` into ``out`` (see ``RowStrategy.read_range``)."""
        if self.whole or not out.flags.c_contiguous:
            out[...] = self._every_row()[start:stop] if self.whole else self._load(start, stop)
            return
        self.file.read_ranges([self._span(start, stop)], [_flat(out)])

    def _every_row(self) -> np.ndarray[Any, Any]:
        rows = self._all.peek()
        if rows is None:  # (not get_or_make: reading may make PerProcess values itself)
            rows = self._all.set(self._load(0, self.rows.length))
        return rows

    def _load(self, start: int, stop: int) -> np.ndarray[Any, Any]:
        rows = self.rows.empty(stop - start)
        if rows.size:
            self.file.read_ranges([self._span(start, stop)], [_flat(rows)])
        return rows

    def _read_sorted(self, uniq: IndexArray) -> np.ndarray[Any, Any]:
        """Rows ``uniq`` (increasing): each run of consecutive rows one range, all in one call."""
        rows = self.rows.empty(uniq.size)
        if rows.size == 0:
            return rows
        breaks = np.flatnonzero(np.diff(uniq) != 1) + 1
        firsts = np.concatenate([[0], breaks])
        lasts = np.concatenate([breaks, [uniq.size]])
        flat = _flat(rows)
        ranges, buffers = [], []
        for lo, hi in zip(firsts.tolist(), lasts.tolist(), strict=True):
            ranges.append(self._span(int(uniq[lo]), int(uniq[lo]) + hi - lo))
            buffers.append(flat[lo * self.row_nbytes : hi * self.row_nbytes])
        self.file.read_ranges(ranges, buffers)
        return rows

    def _span(self, start: int, stop: int) -> tuple[int, int]:
        return self.offset + start * self.row_nbytes, (stop - start) * self.row_nbytes


def _flat(arr: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    return arr.reshape(-1).view(np.uint8)
