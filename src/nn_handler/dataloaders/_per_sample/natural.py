"""Natural ("human") order of HDF5 member names: ``trajectory_2`` before ``trajectory_10``.

A name is split into runs of ASCII digits and runs of everything else; runs are compared in
turn, text runs by their bytes (for UTF-8 names that is code-point order) and digit runs by their
value. A name that is a prefix of another in this sense comes first, and names that tie
(``x01`` and ``x1``) are ordered by their plain bytes, so the order is total and does not depend
on the order the names were listed in.

``natural_order`` sorts names of the usual ``<text><number>`` shape with NumPy string
operations (faster than sorting by the Python key) and falls back to ``natural_key`` otherwise.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["natural_key", "natural_order"]

_DIGIT_RUNS = re.compile(rb"([0-9]+)")
_DIGITS = b"0123456789"
# int64 holds every 18-digit number; longer digit runs take the exact Python path
_MAX_FAST_DIGITS = 18

NaturalKey = tuple[tuple[bytes | int, ...], bytes]


def natural_key(name: str | bytes) -> NaturalKey:
    """Return the sort key of ``name`` (``str`` names are compared as their UTF-8 bytes)."""
    raw = name.encode("utf-8", "surrogateescape") if isinstance(name, str) else bytes(name)
    parts: list[bytes | int] = list(_DIGIT_RUNS.split(raw))
    parts[1::2] = [int(p) for p in parts[1::2]]
    return tuple(parts), raw


def natural_order(names: Sequence[bytes]) -> np.ndarray[Any, np.dtype[np.intp]]:
    """Return the indices that put ``names`` in natural order (a stable, total order)."""
    if len(names) == 0:
        return np.zeros(0, dtype=np.intp)
    fast = _fast_order(names)
    if fast is not None:
        return fast
    keys = [natural_key(n) for n in names]
    return np.asarray(sorted(range(len(names)), key=keys.__getitem__), dtype=np.intp)


def _fast_order(names: Sequence[bytes]) -> np.ndarray[Any, np.dtype[np.intp]] | None:
    """Vectorized order for names shaped ``<text without digits><digits or nothing>``.

    Only ``np.char`` and byte arithmetic (NumPy 1.24 has no ``np.strings``): the digit tail of
    each name is read off its bytes as a number.
    """
    width = max(map(len, names))
    if width == 0:
        return None
    full = np.array(names, dtype=f"S{width}")
    stems = np.char.rstrip(full, _DIGITS)
    stem_bytes = np.ascontiguousarray(stems).view(np.uint8)
    if np.any((stem_bytes >= ord("0")) & (stem_bytes <= ord("9"))):
        return None  # a digit run before the end: needs the general key
    stem_len = np.char.str_len(stems).astype(np.int64)
    name_len = np.char.str_len(full).astype(np.int64)
    if int((name_len - stem_len).max()) > _MAX_FAST_DIGITS:
        return None
    values = _tail_values(full.view(np.uint8).reshape(len(names), width), stem_len, name_len)
    # lexsort: last key is primary. No digits (-1) sorts before any number, as in natural_key.
    order: np.ndarray[Any, np.dtype[np.intp]] = np.lexsort((full, values, stems))
    return order


def _tail_values(
    raw: np.ndarray[Any, np.dtype[np.uint8]],
    start: np.ndarray[Any, np.dtype[np.int64]],
    stop: np.ndarray[Any, np.dtype[np.int64]],
) -> np.ndarray[Any, np.dtype[np.int64]]:
    """The number written in bytes ``[start, stop)`` of each row; -1 where that is empty."""
    pos = np.arange(raw.shape[1], dtype=np.int64)
    inside = (pos >= start[:, None]) & (pos < stop[:, None])
    power = np.where(inside, stop[:, None] - 1 - pos, 0)
    digits = np.where(inside, raw.astype(np.int64) - ord("0"), 0)
    values: np.ndarray[Any, np.dtype[np.int64]] = (digits * 10**power).sum(axis=1)
    return np.where(stop > start, values, -1)
