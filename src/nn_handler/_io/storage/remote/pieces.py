"""The pieces of an object that a cache entry holds, each with the CRC-32 of its bytes.

An entry's ``data`` file holds the object's bytes at their own offsets; its record,
``pieces.npy``, says which ones: an ``(n, 3)`` int64 array of ``[start, end, crc32]`` rows, one
per piece written, sorted, no row twice. A fetched range is cut into pieces of at most
``MAX_PIECE`` bytes, so checking the pieces under a small read costs at most a few of them.
Pieces may overlap (a metadata range fetched whole over part of another piece): both then hold
the same bytes of the one version the entry belongs to, so both checksums hold.

The record is rewritten whole, aside and then renamed into place (atomic), and loaded with
``allow_pickle=False``. One that does not load, or holds a row no piece of this object can
have, loads as None: its pieces are fetched again.
"""

from __future__ import annotations

import contextlib
import os
import uuid
import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from .intervals import Intervals, empty, union
from .owned import open_file

__all__ = [
    "MAX_PIECE",
    "RECORD",
    "Pieces",
    "Row",
    "cut",
    "holdings",
    "load",
    "no_pieces",
    "removed",
    "save",
    "touching",
    "with_added",
]

#: bytes of the longest piece: checking one costs ~0.4 ms (CRC-32 at ~2.5 GB/s)
MAX_PIECE = 1 << 20
RECORD = "pieces.npy"
Pieces = np.ndarray[Any, np.dtype[np.int64]]
_PAIRS = 1 << 16  # (piece, range) pairs compared by broadcasting; more: by merged ranges
Row = tuple[int, int, int]


def no_pieces() -> Pieces:
    """A record that holds nothing."""
    return np.zeros((0, 3), np.int64)


def cut(offset: int, data: bytes | memoryview) -> list[Row]:
    """The ``[start, end, crc32]`` rows of ``data`` written at ``offset``."""
    view = memoryview(data).cast("B")
    return [
        (offset + k, offset + min(k + MAX_PIECE, view.nbytes), zlib.crc32(view[k : k + MAX_PIECE]))
        for k in range(0, view.nbytes, MAX_PIECE)
    ]


def with_added(held: Pieces, rows: Sequence[Row]) -> Pieces:
    """``held`` and ``rows``, sorted (by start, end, checksum), each row once."""
    both = np.concatenate([held, np.asarray(rows, np.int64).reshape(-1, 3)])
    both = both[np.lexsort((both[:, 2], both[:, 1], both[:, 0]))]
    again = np.zeros(len(both), bool)
    again[1:] = np.all(both[1:] == both[:-1], axis=1)
    merged: Pieces = both[~again]
    return merged


def removed(held: Pieces, rows: Sequence[Row]) -> Pieces:
    """``held`` without ``rows``."""
    gone = set(rows)
    keep = [k for k, row in enumerate(map(tuple, held.tolist())) if row not in gone]
    return held[keep]


def holdings(held: Pieces) -> Intervals:
    """The ``[start, end)`` ranges the pieces cover, merged."""
    return union(np.ascontiguousarray(held[:, :2]), [])  # (any rows: union sorts and merges)


def touching(held: Pieces, ranges: Sequence[tuple[int, int]]) -> Pieces:
    """The pieces that hold at least one byte of the ``(offset, length)`` ranges."""
    spans = np.asarray(ranges, np.int64).reshape(-1, 2)
    spans = spans[spans[:, 1] > 0]
    if not len(held) or not len(spans):
        return held[:0]
    starts, ends = spans[:, 0], spans[:, 0] + spans[:, 1]
    # sorted by start, and no piece is longer than MAX_PIECE: the candidates lie in one slice
    lo = int(np.searchsorted(held[:, 0], starts.min() - MAX_PIECE, side="right"))
    hi = int(np.searchsorted(held[:, 0], ends.max(), side="left"))
    near = held[lo:hi]
    if len(near) * len(spans) <= _PAIRS:  # (the usual case: every pair compared at once)
        hit = ((near[:, :1] < ends) & (near[:, 1:2] > starts)).any(axis=1)
        found: Pieces = near[hit]
        return found
    wanted = union(empty(), list(zip(starts.tolist(), ends.tolist(), strict=True)))
    # the first wanted range that ends past a piece's start meets it if it starts before its end
    k = np.searchsorted(wanted[:, 1], near[:, 0], side="right")
    meets = k < len(wanted)
    meets[meets] = wanted[k[meets], 0] < near[meets, 1]
    found = near[meets]
    return found


def load(fd: int, size: int) -> Pieces | None:
    """The record read from ``fd`` (closed), or None when it is not one of this object's."""
    try:
        with os.fdopen(fd, "rb") as f:
            rows = np.load(f, allow_pickle=False)
    except (OSError, ValueError, EOFError, TypeError):
        return None
    return rows if _valid(rows, size) else None


def save(dir_fd: int, where: str, held: Pieces) -> None:
    """Write ``held`` as the record of the entry ``dir_fd`` (aside, then renamed into place).

    Raises:
        OSError: it could not be written (the record is then as it was).
    """
    spare = f".pieces-{uuid.uuid4().hex}.npy"
    fd = open_file(spare, os.O_WRONLY | os.O_CREAT | os.O_EXCL, dir_fd, f"{where}/{spare}")
    try:
        with os.fdopen(fd, "wb") as f:
            np.save(f, held)
        os.replace(spare, RECORD, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(spare, dir_fd=dir_fd)
        raise


def _valid(rows: Any, size: int) -> bool:
    """Rows that pieces of an object of ``size`` bytes can have, sorted by start."""
    if not isinstance(rows, np.ndarray) or rows.dtype != np.int64 or rows.ndim != 2:
        return False
    if rows.shape[1] != 3:
        return False
    starts, ends, sums = rows[:, 0], rows[:, 1], rows[:, 2]
    return bool(
        np.all(starts >= 0)
        and np.all(ends > starts)
        and np.all(ends <= size)
        and np.all(ends - starts <= MAX_PIECE)
        and np.all((sums >= 0) & (sums < 2**32))
        and np.all(np.diff(starts) >= 0)
    )
