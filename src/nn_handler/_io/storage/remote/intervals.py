"""Sets of byte ranges as sorted, disjoint ``[start, end)`` rows of an ``(n, 2)`` int64 array.

The cache records which parts of an object it holds as such a set: ``missing`` says which
bytes of a request still have to be fetched, ``union`` adds what was fetched (touching or
overlapping intervals merge, so a cache that fills up ends as the single row ``[0, size)``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["Intervals", "covered", "empty", "missing", "union"]

Intervals = np.ndarray[Any, np.dtype[np.int64]]


def empty() -> Intervals:
    """The empty set."""
    return np.zeros((0, 2), np.int64)


def union(held: Intervals, added: Sequence[tuple[int, int]]) -> Intervals:
    """``held`` with the ``[start, end)`` intervals ``added`` (empty ones ignored), merged."""
    rows = np.concatenate([held, np.asarray(added, np.int64).reshape(-1, 2)])
    rows = rows[rows[:, 1] > rows[:, 0]]
    if rows.shape[0] == 0:
        return empty()
    rows = rows[np.argsort(rows[:, 0], kind="stable")]
    ends = np.maximum.accumulate(rows[:, 1])
    # a new interval starts where a start lies past every end before it
    new = np.ones(rows.shape[0], bool)
    new[1:] = rows[1:, 0] > ends[:-1]
    firsts = np.flatnonzero(new)
    lasts = np.append(firsts[1:] - 1, rows.shape[0] - 1)
    return np.stack([rows[firsts, 0], ends[lasts]], axis=1).astype(np.int64)


def missing(held: Intervals, ranges: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """The parts of the ``(offset, length)`` ranges not in ``held``, as merged ``[start, end)``."""
    wanted = union(empty(), [(o, o + n) for o, n in ranges])
    gaps: list[tuple[int, int]] = []
    starts, ends = held[:, 0], held[:, 1]
    for start, end in wanted.tolist():
        k = int(np.searchsorted(ends, start, side="right"))  # first held interval ending past start
        pos = start
        while pos < end:
            if k >= len(starts) or starts[k] >= end:
                gaps.append((pos, end))
                break
            if starts[k] > pos:
                gaps.append((pos, int(starts[k])))
            pos = max(pos, int(ends[k]))
            k += 1
    return gaps


def covered(held: Intervals) -> int:
    """Bytes in the set."""
    return int((held[:, 1] - held[:, 0]).sum())
