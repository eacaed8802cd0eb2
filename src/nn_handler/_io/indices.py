"""Index math for batched row reads: validation, slabs of sorted rows, runs cut at blocks.

Pure numpy, no h5py: property-tested on its own.
"""

from __future__ import annotations

import operator
from collections.abc import Iterator
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = [
    "IndexArray",
    "as_index_array",
    "consecutive_runs",
    "is_bool_like",
    "is_scalar_index",
    "normalize_index",
    "plan_pieces",
    "plan_slabs",
]

IndexArray = npt.NDArray[np.int64]


def is_bool_like(value: Any) -> bool:
    """True for a bool of any kind: Python, NumPy, or a 0-d bool array or tensor."""
    if isinstance(value, (bool, np.bool_)):
        return True
    return str(getattr(value, "dtype", "")) in ("bool", "torch.bool")


def is_scalar_index(index: Any) -> bool:
    """True for one integer-like index (int, NumPy integer, 0-d array or tensor)."""
    return hasattr(index, "__index__") and getattr(index, "ndim", 0) == 0


def normalize_index(index: Any, length: int) -> int:
    """Return ``index`` as a non-negative int below ``length`` (negatives count from the end).

    Raises:
        TypeError: ``index`` is not an integer.
        IndexError: ``index`` is outside ``[-length, length)``.
    """
    if is_bool_like(index):
        raise TypeError(f"index must be an integer, got a bool {index!r}")
    try:
        # operator.index, not int(): int() truncates 1.7, and 0-d float arrays / tensors too
        value = operator.index(index)
    except TypeError:
        raise TypeError(f"index must be an integer, got {type(index).__name__} {index!r}") from None
    if value < -length or value >= length:
        raise IndexError(f"index {value} is out of range for a dataset of length {length}")
    return value + length if value < 0 else value


def as_index_array(indices: Any, length: int) -> IndexArray:
    """Return ``indices`` as a 1-d int64 array of valid rows (negatives wrapped).

    Accepts a sequence of ints, a 1-d integer NumPy array or torch tensor, or a slice.

    Raises:
        TypeError: the indices are not integers.
        IndexError: an index is outside ``[-length, length)``; the message names it.
    """
    if isinstance(indices, slice):
        return np.arange(*indices.indices(length), dtype=np.int64)
    if hasattr(indices, "numpy") and hasattr(indices, "detach"):  # torch.Tensor
        indices = indices.detach().cpu().numpy()
    arr = np.asarray(indices)
    if arr.ndim == 0:
        raise TypeError(
            "index must be an integer, or indices a 1-d sequence of integers; "
            f"got {type(indices).__name__} {indices!r}"
        )
    if arr.size == 0:
        return np.empty(0, dtype=np.int64)
    if arr.ndim != 1:
        raise TypeError(f"indices must be one-dimensional, got shape {arr.shape}")
    if arr.dtype.kind not in "iu":
        raise TypeError(f"indices must be integers, got dtype {arr.dtype} ({_preview(arr)})")
    if arr.dtype.kind == "u" and arr.dtype.itemsize >= 8 and int(arr.max()) >= length:
        # past int64: the cast below would wrap 2**64 - 1 to -1, the last row
        first = int(arr[np.argmax(arr >= length)])
        raise IndexError(f"index {first} is out of range for a dataset of length {length}")
    out = arr.astype(np.int64, copy=True)
    if out.min() >= 0 and out.max() < length:  # the common case, in two reductions
        return out
    bad = (out < -length) | (out >= length)
    if bad.any():
        first = int(out[np.argmax(bad)])
        raise IndexError(f"index {first} is out of range for a dataset of length {length}")
    out[out < 0] += length
    return out


def plan_slabs(
    rows: IndexArray, block: int, max_gap_blocks: int, max_rows: int, length: int
) -> Iterator[tuple[int, int, int, int]]:
    """Group sorted, unique rows into slabs that whole-block reads can serve.

    A slab covers whole blocks (HDF5 chunks along axis 0; 1 row for unchunked data), so no
    block is read twice. Two needed blocks join one slab when at most ``max_gap_blocks``
    unneeded blocks lie between them and the slab stays within ``max_rows`` rows.

    Args:
        rows: Sorted, unique row numbers.
        block: Rows per block (``>= 1``).
        max_gap_blocks: Unneeded blocks a slab may span to save a read call.
        max_rows: Upper bound on rows per slab, rounded down to whole blocks (one block is
            always allowed).
        length: Rows in the dataset (the last block may be short).

    Yields:
        ``(start, stop, lo, hi)``: read rows ``[start, stop)``; they serve ``rows[lo:hi]``.
    """
    if rows.size == 0:
        return
    blocks = rows // block
    breaks = np.flatnonzero(np.diff(blocks) > max_gap_blocks + 1) + 1
    bounds = np.concatenate(([0], breaks, [rows.size]))
    for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        yield from _split_run(rows, blocks, lo, hi, block, max_rows, length)


def plan_pieces(
    starts: IndexArray, stops: IndexArray, dst: IndexArray, block: int
) -> tuple[IndexArray, IndexArray, IndexArray, IndexArray, np.ndarray[Any, Any]]:
    """Cut non-empty runs of rows ``[starts[i], stops[i])``, bound for ``dst[i]``, at blocks.

    Returns:
        ``(block_id, lo, hi, to, spill)`` per piece: rows ``[lo, hi)`` lie in block
        ``block_id`` and go to ``out[to : to + hi - lo]``; ``spill`` is True when the piece
        continues a run that began in an earlier block. Pieces come in run order, so for sorted
        runs block ids never drop.
    """
    first, last = starts // block, (stops - 1) // block
    count = last - first + 1
    owner = np.repeat(np.arange(starts.size), count)
    step = np.arange(owner.size) - np.repeat(np.cumsum(count) - count, count)
    block_id = first[owner] + step
    lo = np.maximum(starts[owner], block_id * block)
    hi = np.minimum(stops[owner], (block_id + 1) * block)
    return block_id, lo, hi, dst[owner] + lo - starts[owner], step > 0


def _split_run(
    rows: IndexArray, blocks: IndexArray, lo: int, hi: int, block: int, max_rows: int, length: int
) -> Iterator[tuple[int, int, int, int]]:
    span = max(1, max_rows // block)  # whole blocks per slab, at least one
    while lo < hi:
        first = int(blocks[lo])
        start = first * block
        # every needed row whose block lies within the span: a block is never split
        end = int(np.searchsorted(blocks[lo:hi], first + span, side="left")) + lo
        stop = min((int(blocks[end - 1]) + 1) * block, length)
        yield start, stop, lo, end
        lo = end


def _preview(arr: np.ndarray[Any, Any]) -> str:
    flat = arr.ravel()[:5].tolist()
    return ", ".join(repr(v) for v in flat) + (", …" if arr.size > 5 else "")


def consecutive_runs(ids: npt.NDArray[Any]) -> list[tuple[int, int]]:
    """``(first, count)`` of each run of consecutive values in ``ids`` (sorted, unique)."""
    if ids.size == 0:
        return []
    cuts = np.flatnonzero(np.diff(ids) != 1) + 1
    starts = np.concatenate([[0], cuts]).tolist()
    ends = np.concatenate([cuts, [ids.size]]).tolist()
    return [(int(ids[a]), b - a) for a, b in zip(starts, ends, strict=True)]
