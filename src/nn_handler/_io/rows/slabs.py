"""SlabRows: rows read by h5py in slabs of nearby rows (the ``slabs`` strategy).

For everything the other ways do not serve: compact, virtual, external and variable-length data,
file objects, data whose stored bytes are not its values, contiguous data never written (HDF5
serves the fill value). Sorted, unique rows are grouped into runs of nearby rows
(``plan_slabs``); each run is read with one h5py call; rows are then put back in request order.
"""

from __future__ import annotations

from typing import Any

import h5py
import numpy as np

from ..file.source import H5Source
from ..indices import IndexArray, plan_slabs
from .strategy import BaseRows, DatasetRows, StrategyName

__all__ = ["SlabRows"]

_MAX_SLAB_BYTES = 64 * 1024**2
_GAP_BYTES = 64 * 1024  # below this, reading the unneeded rows between two runs beats a call


class SlabRows(BaseRows):
    """Rows of ``rows`` read by h5py through ``source`` (see the module docstring)."""

    strategy: StrategyName = "slabs"

    def __init__(self, rows: DatasetRows, source: H5Source) -> None:
        self.rows, self.source = rows, source

    def read(
        self, idx: IndexArray, out: np.ndarray[Any, Any] | None, checked: bool
    ) -> np.ndarray[Any, Any]:
        """See ``RowStrategy.read``: unique rows in sorted slabs, then put in request order."""
        out = self.rows.empty(idx.size) if out is None else out
        if _is_strictly_increasing(idx):
            return self._read_sorted(idx, out)
        uniq, inverse = np.unique(idx, return_inverse=True)
        rows = self._read_sorted(uniq, self.rows.empty(len(uniq)))
        np.take(rows, inverse, axis=0, out=out)
        return out

    def read_range(self, start: int, stop: int, out: np.ndarray[Any, Any], checked: bool) -> None:
        """See ``RowStrategy.read_range``: one h5py call."""
        self._read_slab(self._dataset(), start, stop, out)

    def read_row(self, i: int, checked: bool) -> np.ndarray[Any, Any]:
        """See ``RowStrategy.read_row``: one h5py call, copied."""
        return np.array(self._dataset()[i], dtype=self.rows.dtype, copy=True)

    def _dataset(self) -> h5py.Dataset:
        return self.source.dataset(self.rows.key)

    def _read_sorted(self, rows: IndexArray, out: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        dset, chunk_rows = self._dataset(), self.rows.chunk_rows
        block = chunk_rows or 1
        row_bytes = max(self.rows.row_nbytes, 1)
        gap = 0 if chunk_rows else _GAP_BYTES // row_bytes
        max_rows = max(block, (_MAX_SLAB_BYTES // row_bytes) // block * block)
        for start, stop, lo, hi in plan_slabs(rows, block, gap, max_rows, self.rows.length):
            if stop - start == hi - lo:  # every row of the slab is wanted: read in place
                self._read_slab(dset, start, stop, out[lo:hi])
            else:
                slab = self._read_slab(dset, start, stop, self.rows.empty(stop - start))
                np.take(slab, rows[lo:hi] - start, axis=0, out=out[lo:hi])
        return out

    def _read_slab(
        self, dset: h5py.Dataset, start: int, stop: int, buf: np.ndarray[Any, Any]
    ) -> np.ndarray[Any, Any]:
        if self.rows.dtype.hasobject or not buf.flags.c_contiguous:  # read_direct refuses
            buf[...] = dset[start:stop]
        elif buf.size:  # rows of no elements hold nothing (h5py < 3.11 divides by zero there)
            dset.read_direct(buf, np.s_[start:stop])
        return buf


def _is_strictly_increasing(idx: IndexArray) -> bool:
    return bool(idx.size < 2 or np.all(idx[1:] > idx[:-1]))
