"""The chunk-shape arithmetic of a rewrite: whole rows per chunk, about ``chunk_bytes`` each.

A chunk always holds whole rows (it spans every axis but the first), so a sample is one
contiguous piece of one chunk, and holds as many rows as fit in ``chunk_bytes`` (at least one,
at most the dataset's length). HDF5 caps a chunk at 4 GiB; a row larger than that cannot be
chunked this way.
"""

from __future__ import annotations

import math

__all__ = ["MAX_CHUNK_BYTES", "SEQUENTIAL_BYTES", "chunk_rows", "chunk_shape"]

#: HDF5's limit on the size of one chunk (a 32-bit length).
MAX_CHUNK_BYTES = 2**32 - 1

#: Decoded bytes read at a time when rows are read in order: small, so that the pool
#: compresses one slab while the next is read (the first slab's read and the last's
#: compression are the only parts that do not overlap).
SEQUENTIAL_BYTES = 4 * 1024**2


def chunk_rows(n_rows: int, row_bytes: int, chunk_bytes: int) -> int:
    """Rows per chunk: as many whole rows as fit in ``chunk_bytes``, in ``[1, max(n_rows, 1)]``.

    Raises:
        ValueError: one row is larger than HDF5's 4 GiB chunk limit.
    """
    if row_bytes > MAX_CHUNK_BYTES:
        raise ValueError(
            f"one row is {row_bytes} bytes, more than HDF5's chunk limit of {MAX_CHUNK_BYTES}"
        )
    fit = chunk_bytes // max(row_bytes, 1)
    fit = min(fit, MAX_CHUNK_BYTES // max(row_bytes, 1))
    return max(1, min(fit, n_rows))


def chunk_shape(shape: tuple[int, ...], itemsize: int, chunk_bytes: int) -> tuple[int, ...]:
    """The chunk shape of a dataset of ``shape``: ``(chunk_rows, *shape[1:])``."""
    row_bytes = itemsize * math.prod(shape[1:])
    return (chunk_rows(shape[0], row_bytes, chunk_bytes), *shape[1:])
