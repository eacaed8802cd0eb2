"""Turn the stored entries of a batch's rows into its output: a dense array or a CSR tensor.

Rows are read once each, sorted (``np.unique`` of the request); ``inverse`` maps every requested
position to its row, so unsorted and repeated requests cost one read. Entries are scattered
straight into the output (``out[row, col] = value``). Files whose rows are not strictly sorted by
column (allowed by the format; scipy sums repeated entries) take a slower path that sums them too,
so every batch equals ``scipy.sparse``'s ``toarray()``.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..._io import IndexArray, decode_threads, run_parallel
from .columns import ColumnMap
from .rows import Entries

__all__ = [
    "RowEntries",
    "concat_entries",
    "csr_index_dtype",
    "positions_of",
    "select_columns",
    "strictly_increasing_rows",
    "to_csr_tensor",
    "to_dense",
]

_CACHED_BYTES = 256 * 1024  # output rows zeroed and filled together (a core's L2 holds them)


@dataclass(frozen=True)
class RowEntries:
    """Entries of some rows in output columns, row after row.

    Attributes:
        lengths: Entries per row.
        cols: Output column of each entry (an integer dtype that casts safely to int64).
        data: Stored value of each entry.
        sorted: Columns strictly increase within every row (no repeats either).
        unique: No row holds a column twice.
    """

    lengths: IndexArray
    cols: np.ndarray[Any, Any]
    data: np.ndarray[Any, Any]
    sorted: bool
    unique: bool


def select_columns(entries: Entries, cmap: ColumnMap) -> RowEntries:
    """Map stored columns to output columns, dropping the unselected ones."""
    canonical = strictly_increasing_rows(entries.indices, entries.lengths)
    if cmap.positions is None:
        # the file's int32 columns stay int32 unless they would not fit: a widening copy of a
        # 4,096-cell batch's columns costs a tenth of reading it
        cols = entries.indices
        if not np.can_cast(cols.dtype, np.int64):
            cols = cols.astype(np.int64)
        return RowEntries(entries.lengths, cols, entries.data, canonical, canonical)
    mapped = cmap.positions[entries.indices]
    keep = mapped >= 0
    row_of = np.repeat(np.arange(entries.lengths.size), entries.lengths)
    lengths = np.bincount(row_of[keep], minlength=entries.lengths.size).astype(np.int64)
    return RowEntries(
        lengths, mapped[keep], entries.data[keep], canonical and cmap.increasing, canonical
    )


def concat_entries(parts: list[RowEntries]) -> RowEntries:
    """Join the entries of consecutive groups of rows (one group per file)."""
    if len(parts) == 1:
        return parts[0]
    return RowEntries(
        np.concatenate([p.lengths for p in parts]),
        np.concatenate([p.cols for p in parts]),
        np.concatenate([p.data for p in parts]),
        all(p.sorted for p in parts),
        all(p.unique for p in parts),
    )


def to_dense(
    rows: RowEntries,
    inverse: IndexArray | None,
    n_out: int,
    dtype: np.dtype[Any],
    out: np.ndarray[Any, Any] | None = None,
) -> np.ndarray[Any, Any]:
    """Return the ``(len(request), n_out)`` array of the request ``inverse`` indexes into rows.

    ``inverse=None`` means the request is exactly ``rows``, in order. ``out``, when given (a
    ring slot in a worker process), receives a request without repeated rows; it is returned.
    """
    n_rows = rows.lengths.size
    repeats = inverse is not None and inverse.size != n_rows
    target_in_order = inverse is None or repeats
    if inverse is None or repeats:
        target = np.arange(n_rows, dtype=np.int64)
    else:
        target = positions_of(inverse)
    fresh = out is None or repeats
    # np.zeros: pages the kernel zeroes as they are first met, so nothing to zero here
    dense = np.zeros((n_rows, n_out), dtype=dtype) if fresh or out is None else out
    fill = _Fill(rows, target, np.concatenate(([0], np.cumsum(rows.lengths))), dense)
    # a part of the rows per decode thread: a dense single-cell batch (328 MB for 4,096 cells
    # x 20,000 genes) is memory-bound work NumPy does without the GIL
    parts = _row_blocks(n_rows, n_out * dense.itemsize)
    run_parallel(lambda part: fill.rows(part, zero=not fresh, in_order=target_in_order), parts)
    if repeats:
        assert inverse is not None
        return np.take(dense, inverse, axis=0)
    return dense


def _row_blocks(n_rows: int, row_nbytes: int) -> list[tuple[int, int]]:
    """Rows cut into one block per decode thread, none under ~8 MB (a thread's start costs)."""
    threads = decode_threads()
    per = max(1, -(-n_rows // threads), (8 << 20) // max(1, row_nbytes))
    return [(a, min(n_rows, a + per)) for a in range(0, n_rows, per)]


@dataclass(frozen=True)
class _Fill:
    """Writes the entries ``rows`` into rows ``target`` of ``out``; ``first``: each row's start."""

    entries: RowEntries
    target: IndexArray
    first: IndexArray
    out: np.ndarray[Any, Any]

    def rows(self, part: tuple[int, int], *, zero: bool, in_order: bool) -> None:
        """Zero (if ``zero``) and fill the output rows of entry rows ``part``, a few at a time.

        A few rows (about 256 KiB of output) are zeroed and then filled while they are still in
        the CPU's cache: zeroing the whole batch first and filling it after moved every byte to
        memory and back (30 % more time for 4,096 x 20,000 float32). ``in_order``: row ``i``
        goes to output row ``i``.
        """
        out = self.out
        step = max(1, _CACHED_BYTES // max(1, out.shape[1] * out.itemsize))
        for a in range(part[0], part[1], step):
            b = min(part[1], a + step)
            if zero and in_order:
                out[a:b] = 0
            elif zero:
                out[self.target[a:b]] = 0
            self._scatter(a, b)

    def _scatter(self, a: int, b: int) -> None:
        rows, out = self.entries, self.out
        lo, hi = int(self.first[a]), int(self.first[b])
        flat = np.repeat(self.target[a:b] * out.shape[1], rows.lengths[a:b])
        flat += rows.cols[lo:hi]
        if rows.unique:
            out.reshape(-1)[flat] = rows.data[lo:hi]
        else:  # rows of other parts land in other output rows: no two threads add to one place
            np.add.at(out.reshape(-1), flat, rows.data[lo:hi].astype(out.dtype))


def csr_index_dtype(n_cols: int, nnz: int) -> np.dtype[Any]:
    """The index dtype of a CSR batch: int32 while columns and entries fit it, else int64.

    SciPy's rule (``get_index_dtype``): half the index bytes to write, send and hold, and
    every torch op on CSR tensors takes either. A single-cell batch's column copy cast to int64
    cost a third of its time.
    """
    small = max(n_cols, nnz) <= np.iinfo(np.int32).max
    return np.dtype(np.int32) if small else np.dtype(np.int64)


def to_csr_tensor(
    rows: RowEntries, inverse: IndexArray | None, n_out: int, dtype: np.dtype[Any]
) -> torch.Tensor:
    """Return the request as a ``torch.sparse_csr_tensor`` of shape ``(len(request), n_out)``.

    Its indices are ``csr_index_dtype``'s.
    """
    lengths, cols, data = rows.lengths, rows.cols, rows.data
    if inverse is not None:
        lengths, cols, data = _in_request_order(lengths, cols, data, inverse)
    if not rows.sorted:
        lengths, cols, data = _coalesce(lengths, cols, data, n_out)
    index = csr_index_dtype(n_out, int(cols.size))
    crow = np.zeros(lengths.size + 1, dtype=index)
    np.cumsum(lengths, out=crow[1:])
    with warnings.catch_warnings():  # torch says once per process that sparse CSR is "beta"
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
        return torch.sparse_csr_tensor(
            torch.from_numpy(crow),
            torch.from_numpy(np.ascontiguousarray(cols, dtype=index)),
            torch.from_numpy(np.ascontiguousarray(data, dtype=dtype)),
            size=(int(lengths.size), n_out),
            check_invariants=False,  # built valid here; checking costs a pass over the batch
        )


def _in_request_order(
    lengths: IndexArray, cols: np.ndarray[Any, Any], data: np.ndarray[Any, Any], inverse: IndexArray
) -> tuple[IndexArray, np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """The entries of rows read in sorted order, rearranged row by row into request order.

    A slice copy per row: an index array over every entry (``np.repeat`` + ``np.arange`` and
    two fancy gathers) took 60 % of a 4,096-cell CSR batch, ten times these copies.
    """
    first = np.cumsum(lengths) - lengths
    chosen = lengths[inverse]
    to = np.cumsum(chosen) - chosen
    out_cols = np.empty(int(chosen.sum()), dtype=cols.dtype)
    out_data = np.empty(out_cols.size, dtype=data.dtype)
    for s, n, t in zip(first[inverse].tolist(), chosen.tolist(), to.tolist(), strict=True):
        out_cols[t : t + n] = cols[s : s + n]
        out_data[t : t + n] = data[s : s + n]
    return chosen, out_cols, out_data


def _coalesce(
    lengths: IndexArray, cols: np.ndarray[Any, Any], data: np.ndarray[Any, Any], n_out: int
) -> tuple[IndexArray, np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """Sort every row by column and sum repeated columns (as scipy's ``sum_duplicates``)."""
    row_of = np.repeat(np.arange(lengths.size, dtype=np.int64), lengths)
    key = row_of * max(n_out, 1) + cols
    order = np.argsort(key, kind="stable")
    key = key[order]
    first = np.flatnonzero(np.concatenate(([True], key[1:] != key[:-1]))) if key.size else key
    summed = np.add.reduceat(data[order], first) if key.size else data[:0]
    kept = key[first]
    new_lengths = np.bincount(kept // max(n_out, 1), minlength=lengths.size).astype(np.int64)
    return new_lengths, kept % max(n_out, 1), summed


def positions_of(inverse: IndexArray) -> IndexArray:
    """For a request without repeats: the request position of each sorted row."""
    target = np.empty_like(inverse)
    target[inverse] = np.arange(inverse.size)
    return target


def strictly_increasing_rows(indices: np.ndarray[Any, Any], lengths: IndexArray) -> bool:
    """True when the columns of every row (``lengths`` entries each, in turn) strictly increase."""
    if indices.size < 2:
        return True
    rising = indices[1:] > indices[:-1]
    ends = np.cumsum(lengths)[:-1]
    rising[ends[(ends > 0) & (ends < indices.size)] - 1] = True  # a new row may start lower
    return bool(rising.all())
