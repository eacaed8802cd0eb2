"""Rows of a CSC matrix read straight from the columns (``csc="direct"``): no copy, slow.

A row's entries are spread over every column, so each batch scans the whole ``indices``
dataset (in slabs, through ``RowReader``: parallel inflate) for the requested rows, then reads
only the ``data`` chunks that hold hits. The cost of a batch is one pass over ``indices``
whatever its size: fine for small matrices or a single pass (evaluation), far slower than the
CSR sidecar for training (docs/sparse.md compares them).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..._io import H5Source, IndexArray, RowReader, SparseLayout, check_indptr
from .rows import Entries

__all__ = ["ColumnScanRows"]

_SLAB_ENTRIES = 4 * 1024**2


class ColumnScanRows:
    """Reads rows of a CSC matrix by scanning its columns (see the module docstring).

    Args:
        source: The file.
        layout: A ``csc_matrix`` layout.
    """

    reads_any_order = False  # ``read`` takes sorted, unique rows

    def __init__(self, source: H5Source, layout: SparseLayout) -> None:
        self.source, self.group = source, layout.group
        self.n_rows, self.n_cols = layout.n_rows, layout.n_cols
        self.data = RowReader(source, layout.data_key, arg="group")
        self.indices = RowReader(source, layout.indices_key, arg="group")
        where = f"{source.path!r}, group {layout.group!r}"
        raw = np.asarray(source.dataset(layout.indptr_key, arg="group")[()])
        self.col_ptr = check_indptr(raw, self.n_cols, self.data.length, where)

    @property
    def nnz(self) -> int:
        """Stored entries."""
        return self.data.length

    @property
    def chunk_entries(self) -> int | None:
        """None: every batch costs the same, so there are no blocks to shuffle by."""
        return None

    def block_starts(self) -> IndexArray | None:
        """None (see ``chunk_entries``)."""
        return None

    def window_cache_nbytes(self, block_rows: int | None, blocks: int) -> int:
        """0: a chunk cache does not help a full scan."""
        return 0

    def plan_window(self, block_rows: int | None, blocks: int) -> None:
        """Nothing: a full scan keeps no window."""

    def clear_cache(self) -> None:
        """Drop this process's decoded chunks."""
        self.data.clear_cache()
        self.indices.clear_cache()

    def read(self, rows: IndexArray) -> Entries:
        """Return the entries of ``rows`` (sorted, unique), row after row, columns increasing."""
        slot = np.full(self.n_rows, -1, dtype=np.int64)
        slot[rows] = np.arange(rows.size)
        found_pos, found_row = [], []
        step = self.indices.chunk_rows or _SLAB_ENTRIES
        step = max(step, _SLAB_ENTRIES // step * step)
        for a in range(0, self.nnz, step):
            stored = self.indices.read_range(a, min(self.nnz, a + step))
            self._check_rows(stored, a)
            mine = slot[stored]
            hit = np.flatnonzero(mine >= 0)
            found_pos.append(a + hit)
            found_row.append(mine[hit])
        pos = np.concatenate(found_pos) if found_pos else np.empty(0, np.int64)
        row = np.concatenate(found_row) if found_row else np.empty(0, np.int64)
        order = np.argsort(row, kind="stable")  # positions rise with the column
        pos = pos[order]
        cols = np.searchsorted(self.col_ptr, pos, side="right") - 1
        lengths = np.bincount(row, minlength=rows.size).astype(np.int64)
        return Entries(lengths, cols, self.data.read(pos))

    def _check_rows(self, stored: np.ndarray[Any, Any], first: int) -> None:
        if stored.size == 0:
            return
        if int(stored.min()) >= 0 and int(stored.max()) < self.n_rows:
            return
        bad = int(np.flatnonzero((stored < 0) | (stored >= self.n_rows))[0])
        raise ValueError(
            f"{self.source.path!r}, group {self.group!r}: entry {first + bad} stores row index "
            f"{int(stored[bad])}, outside [0, {self.n_rows}); the file is corrupt or its shape "
            "attribute is wrong"
        )
