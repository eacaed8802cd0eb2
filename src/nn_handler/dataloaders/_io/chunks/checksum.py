"""HDF5's Fletcher-32 checksum, exactly as ``H5_checksum_fletcher32`` computes it.

``imagecodecs.h5checksum_fletcher32`` is HDF5's own C function (the GIL released); without
``imagecodecs`` the same sum is computed with NumPy.
"""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np

__all__ = ["fletcher32", "fletcher32_numpy"]

_MOD = 65535  # Fletcher-32 sums are kept modulo 2**16 - 1


def _library() -> Any:
    try:
        return getattr(importlib.import_module("imagecodecs"), "h5checksum_fletcher32", None)
    except ImportError:
        return None


_h5checksum_fletcher32: Any = _library()


def fletcher32(buf: np.ndarray[Any, Any]) -> int:
    """HDF5's Fletcher-32 checksum of ``buf`` (uint8)."""
    if _h5checksum_fletcher32 is not None and buf.size:
        return int(_h5checksum_fletcher32(buf))
    return fletcher32_numpy(buf)


def fletcher32_numpy(buf: np.ndarray[Any, Any]) -> int:
    """HDF5's Fletcher-32 checksum of ``buf`` (uint8), with NumPy.

    HDF5 sums big-endian 16-bit words (an odd last byte is the high byte of a last word) and
    reduces lazily, so a non-zero sum congruent to 0 is stored as 65535: the result is
    ``1 + (sum - 1) % 65535`` for each positive sum and 0 only for all-zero data.
    """
    data = buf if buf.size % 2 == 0 else np.append(buf, np.uint8(0))
    words = data.view(">u2").astype(np.uint64)
    if words.size == 0 or not words.any():
        return 0
    weights = np.arange(words.size, 0, -1, dtype=np.uint64) % _MOD  # word i counts size-i times
    low = int(words.sum())
    high = int((words * weights).sum(dtype=np.uint64))
    return ((1 + (high - 1) % _MOD) << 16) | (1 + (low - 1) % _MOD)
