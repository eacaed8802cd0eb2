"""Preload: copy a strided range of rows from a ``RowReader`` into one final buffer.

The rows ``range(start, stop, step)`` cover both shard layouts: a contiguous shard is
``step == 1``, an interleaved one is ``range(rank, total, world_size)``. The source rows are cut
into windows of about ``BLOCK_BYTES`` whose edges fall on chunk boundaries, so every HDF5 chunk
is decoded exactly once and memory beyond the final buffer stays bounded by one window:

* ``step == 1``, no cast: ``read_range`` straight into the final buffer.
* ``step == 1``, cast: ``read_range`` into a reusable window buffer, then cast into place.
* ``step > 1``, chunks of at least ``step`` rows that must be decoded (compressed or split
  rows): every chunk holds wanted rows, so ``read_range`` the window into the window buffer
  and keep every ``step``-th row.
* ``step > 1`` otherwise (memory-mapped layouts, unchunked data, chunks shorter than
  ``step``): let the reader gather only the wanted rows of each window.

Every read goes through ``RowReader``, so improvements to its decoding reach the preload.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from ..._io import Reader

__all__ = ["BLOCK_BYTES", "preload_rows", "windows"]

# Small enough that a window's temporary stays in the CPU cache and the allocator reuses it
# (no fresh page faults per window): memory-mapped layouts then read about as fast as a plain
# read_direct, where windows of tens of MiB fall well behind it; gzip is not affected.
BLOCK_BYTES = 2 * 1024**2


def windows(rows: range, block_rows: int) -> Iterator[tuple[int, int, int, int]]:
    """Cut ``rows`` into windows of source rows aligned to multiples of ``block_rows``.

    Yields:
        ``(first, last, lo, hi)``: positions ``rows[lo:hi]`` are the wanted rows of the window;
        ``first`` and ``last`` are the first and last of them (``last`` inclusive). Windows
        holding no wanted row are skipped.
    """
    if len(rows) == 0:
        return
    start, step, n = rows.start, rows.step, len(rows)
    edge = start // block_rows * block_rows
    while edge < rows[-1] + 1:
        nxt = edge + block_rows
        lo = max(0, -(-(edge - start) // step))
        hi = min(n, -(-(nxt - start) // step))
        if lo < hi:
            yield rows[lo], rows[hi - 1], lo, hi
        edge = nxt


def window_rows(reader: Reader) -> int:
    """Source rows per window: about ``BLOCK_BYTES``, a whole number of chunks, at least one."""
    chunk = reader.chunk_rows or 1
    fit = BLOCK_BYTES // max(reader.row_nbytes, 1)
    return max(chunk, fit // chunk * chunk)


def _gathers(reader: Reader, step: int) -> bool:
    """True when reading only the wanted rows beats decoding whole windows."""
    return step > 1 and (reader.strategy == "memmap" or (reader.chunk_rows or 1) < step)


def preload_rows(
    reader: Reader,
    rows: range,
    out: np.ndarray[Any, Any],
    progress: Callable[[int], None] | None = None,
) -> np.ndarray[Any, Any]:
    """Fill ``out`` with rows ``rows`` of ``reader``, cast to ``out.dtype``.

    Args:
        reader: The dataset to read.
        rows: The rows wanted, in order (``step >= 1``).
        out: The final buffer, shape ``(len(rows), *reader.row_shape)``, any numeric dtype.
        progress: Called with the bytes of ``out`` filled after each window.

    Returns:
        ``out``.
    """
    shape = (len(rows), *reader.row_shape)
    if out.shape != shape:
        raise ValueError(f"out must have shape {shape}, got {out.shape}")
    gather = _gathers(reader, rows.step)
    # a gather buffers only the wanted rows, so its window may span step times more rows
    block = window_rows(reader) * (rows.step if gather else 1)
    tmp = _window_buffer(reader, rows, out.dtype, block, gather)
    for first, last, lo, hi in windows(rows, block):
        dest = out[lo:hi]
        if rows.step == 1:
            src = dest if tmp is None else tmp[: hi - lo]
            reader.read_range(first, last + 1, out=src)
        elif gather:
            src = dest if tmp is None else tmp[: hi - lo]
            reader.read(np.arange(first, last + 1, rows.step, dtype=np.int64), out=src)
        else:
            assert tmp is not None
            src = reader.read_range(first, last + 1, out=tmp[: last + 1 - first])[:: rows.step]
        if src is not dest:
            np.copyto(dest, src, casting="unsafe")
        if progress is not None:
            progress(dest.nbytes)
    return out


def _window_buffer(
    reader: Reader, rows: range, dtype: np.dtype[Any], block: int, gather: bool
) -> np.ndarray[Any, Any] | None:
    """The reusable buffer a window is read into, or None when reads go straight to ``out``."""
    strided = rows.step > 1 and not gather
    if len(rows) == 0 or (dtype == reader.dtype and not strided):
        return None
    if strided:
        count = min(block, rows[-1] + 1 - rows.start)  # the whole window, wanted or not
    else:
        count = min(-(-block // rows.step), len(rows))  # the wanted rows of one window
    return np.empty((count, *reader.row_shape), dtype=reader.dtype)
