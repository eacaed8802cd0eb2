"""Rows of one compressed-sparse matrix whose ``indptr`` runs over rows (CSR, 10x).

``indptr`` lives in RAM as a NumPy array (forked workers share it; pickled to spawned workers
when small, re-read there when large). A request of sorted, unique rows becomes sorted, disjoint
ranges of ``data`` / ``indices``, read through two ``RowReader``s (chunk-grouped, parallel
inflate, decoded-chunk cache; see ``_sparse_gather``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..._io import H5Source, IndexArray, RowReader, check_indptr
from .gather import gather_ranges

__all__ = ["CompressedRows", "Entries"]

_PICKLE_INDPTR_BYTES = 16 * 1024**2  # larger: spawned workers re-read indptr from the file


@dataclass(frozen=True)
class Entries:
    """Stored entries of some rows, row after row.

    Attributes:
        lengths: Entries per row (int64).
        indices: Column of each entry (the file's integer dtype).
        data: Value of each entry (the file's dtype).
    """

    lengths: IndexArray
    indices: np.ndarray[Any, Any]
    data: np.ndarray[Any, Any]


class CompressedRows:
    """Reads rows of a CSR-like matrix: ``data`` / ``indices`` / ``indptr`` in one file.

    Args:
        source: The file.
        group: Group path (for messages).
        keys: Paths of ``data``, ``indices`` and ``indptr``.
        n_rows: Rows of the matrix (``indptr`` has ``n_rows + 1`` entries).
        n_cols: Columns (every stored column index is below it).

    Raises:
        ValueError: the datasets do not form a valid matrix (the message names file and group).
    """

    def __init__(
        self, source: H5Source, group: str, keys: tuple[str, str, str], n_rows: int, n_cols: int
    ) -> None:
        self.source, self.group = source, group
        self.n_rows, self.n_cols = n_rows, n_cols
        self._indptr_key = keys[2]
        self.data = RowReader(source, keys[0], arg="group")
        self.indices = RowReader(source, keys[1], arg="group")
        self._check_parts()
        self._indptr: IndexArray | None = self._load_indptr()

    @property
    def nnz(self) -> int:
        """Stored entries."""
        return self.data.length

    @property
    def indptr(self) -> np.ndarray[Any, Any]:
        """Row offsets into ``data`` / ``indices`` (read again in a process that lacks them)."""
        if self._indptr is None:
            self._indptr = self._load_indptr()
        return self._indptr

    @property
    def reads_any_order(self) -> bool:
        """Whether ``read`` takes rows in any order, repeats too (memory-mapped entries)."""
        return self.data.strategy == "memmap" and self.indices.strategy == "memmap"

    def lengths(self, rows: IndexArray) -> IndexArray:
        """Stored entries of each of ``rows`` (in range)."""
        indptr = self.indptr
        lengths: IndexArray = (indptr[rows + 1] - indptr[rows]).astype(np.int64)
        return lengths

    def read(self, rows: IndexArray) -> Entries:
        """Return the entries of ``rows`` (in range), row after row.

        Rows must be sorted and unique unless ``reads_any_order``.
        """
        lengths = self.lengths(rows)
        indices = np.empty(int(lengths.sum()), self.indices.dtype)
        data = np.empty(indices.size, self.data.dtype)
        self.read_into(rows, np.cumsum(lengths) - lengths, indices, data)
        return Entries(lengths, indices, data)

    def read_into(
        self,
        rows: IndexArray,
        dst: IndexArray,
        indices: np.ndarray[Any, Any],
        data: np.ndarray[Any, Any],
    ) -> None:
        """Write the entries of each of ``rows`` to ``indices[dst[i]:]`` and ``data[dst[i]:]``.

        Rows must be sorted and unique unless ``reads_any_order``; the outputs may have other
        dtypes than the file's (the copies cast). The columns written are checked against
        ``n_cols``.
        """
        indptr = self.indptr
        starts = indptr[rows].astype(np.int64)
        stops = indptr[rows + 1].astype(np.int64)
        gather_ranges(self.indices, starts, stops, dst, indices)
        gather_ranges(self.data, starts, stops, dst, data)
        self._check_columns(indices, rows, dst, stops - starts)

    def block_starts(self) -> IndexArray | None:
        """First row of each row block whose entries start in one chunk (None: not chunked)."""
        chunk = self.chunk_entries
        if chunk is None or self.n_rows == 0:
            return None
        borders = np.arange(0, max(self.nnz, 1), chunk, dtype=np.int64)
        starts = np.searchsorted(self.indptr[:-1], borders, side="left")
        starts = np.unique(np.concatenate(([0], starts)))
        return starts[starts < self.n_rows].astype(np.int64)

    @property
    def chunk_entries(self) -> int | None:
        """Entries per chunk of ``data`` / ``indices`` (the smaller one), or None."""
        sizes = [r.chunk_rows for r in (self.data, self.indices) if r.strategy != "memmap"]
        known = [s for s in sizes if s is not None]
        return min(known) if known else None

    def window_cache_nbytes(self, block_rows: int | None, blocks: int) -> int:
        """Decoded-chunk bytes per dataset that keep ``blocks`` row blocks in the cache.

        ``block_rows=None`` means this matrix's own blocks (``block_starts``), which start one
        chunk each; a row block of ``block_rows`` rows spans about ``block_rows`` times the mean
        row length in entries. One extra chunk per block covers rows that cross a border.
        """
        need = 0
        for reader in self._decoded_readers():
            chunk = self._window_chunks(reader, block_rows, blocks) * (reader.chunk_rows or 0)
            need = max(need, chunk * reader.dtype.itemsize)
        return need

    def plan_window(self, block_rows: int | None, blocks: int) -> None:
        """Size each reader's window of decoded chunks for ``blocks`` row blocks at a time.

        Without it a window holds as many chunks as the chunk-cache budget allows (256 MiB of
        each array by default): memory the decode threads then first touch, and a cache the
        window's chunks do not stay in, for no more reuse.
        """
        for reader in self._decoded_readers():
            assert reader.chunk_rows is not None
            reader.plan_window(reader.chunk_rows, self._window_chunks(reader, block_rows, blocks))

    def _decoded_readers(self) -> list[RowReader]:
        return [
            r
            for r in (self.data, self.indices)
            if r.chunk_rows is not None and r.strategy != "memmap"
        ]

    def _window_chunks(self, reader: RowReader, block_rows: int | None, blocks: int) -> int:
        chunk = reader.chunk_rows
        assert chunk is not None
        mean_row = self.nnz / max(1, self.n_rows)
        per_block = 2 if block_rows is None else -(-int(block_rows * mean_row) // chunk) + 1
        return blocks * per_block

    def clear_cache(self) -> None:
        """Drop this process's decoded chunks."""
        self.data.clear_cache()
        self.indices.clear_cache()

    def _check_parts(self) -> None:
        where = f"{self.source.path!r}, group {self.group!r}"
        for reader in (self.data, self.indices):
            if reader.row_shape != ():
                raise ValueError(
                    f"{where}: {reader.key!r} must be 1-d, got rows {reader.row_shape}"
                )
        if self.indices.dtype.kind not in "iu":
            raise ValueError(f"{where}: indices must be integers, got dtype {self.indices.dtype}")
        if self.data.length != self.indices.length:
            raise ValueError(
                f"{where}: data has {self.data.length} entries but indices has "
                f"{self.indices.length}; both hold one entry per stored value"
            )

    def _load_indptr(self) -> IndexArray:
        dset = self.source.dataset(self._indptr_key, arg="group")
        indptr = np.asarray(dset[()])
        return check_indptr(indptr, self.n_rows, self.nnz, f"{self.source.path!r}, {self.group!r}")

    def _check_columns(
        self, indices: np.ndarray[Any, Any], rows: IndexArray, dst: IndexArray, lengths: IndexArray
    ) -> None:
        if indices.size == 0:
            return
        low, high = int(indices.min()), int(indices.max())
        if low >= 0 and high < self.n_cols:
            return
        bad = int(np.flatnonzero((indices < 0) | (indices >= self.n_cols))[0])
        row = int(rows[np.flatnonzero((dst <= bad) & (bad < dst + lengths))[0]])
        raise ValueError(
            f"{self.source.path!r}, group {self.group!r}: row {row} stores column index "
            f"{int(indices[bad])}, outside [0, {self.n_cols}); the file is corrupt or its shape "
            "attribute is wrong"
        )

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        if self._indptr is not None and self._indptr.nbytes > _PICKLE_INDPTR_BYTES:
            state["_indptr"] = None  # cheaper to read again than to pickle to every worker
        return state
