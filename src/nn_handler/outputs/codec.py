"""One chunk's stored bytes: HDF5's byte shuffle then deflate (gzip) level 1, done in NumPy/zlib.

The bytes are exactly what HDF5's shuffle and deflate filters store for the chunk (a chunk is
always full: the rows past the end of the last chunk are zeros, HDF5's fill value), so a chunk
encoded here is written into the file as it is (``write_direct_chunk``) and any HDF5 reader
decodes it. The encoding is a pure function of the rows, so a chunk encoded by any writer
process, or by the assembly, is the same bytes: the file cannot depend on who encoded what.
Level 1 with shuffle: most of gzip's ratio on numbers at several times level 6's speed, and every
HDF5 build reads it (no plugin).
"""

from __future__ import annotations

import zlib

import numpy as np

from .layout import OutputSpec

__all__ = ["GZIP_LEVEL", "decode_chunk", "encode_chunk"]

GZIP_LEVEL = 1


def encode_chunk(rows: np.ndarray, chunk_rows: int) -> bytes:
    """The stored bytes of a chunk whose first ``len(rows)`` rows are ``rows`` (the rest zeros).

    zlib releases the GIL while it compresses, so chunks encode in parallel in threads.
    """
    if rows.shape[0] < chunk_rows:
        full = np.zeros((chunk_rows, *rows.shape[1:]), dtype=rows.dtype)
        full[: rows.shape[0]] = rows
        rows = full
    flat = np.ascontiguousarray(rows).reshape(-1)
    return zlib.compress(_shuffle(flat.view(np.uint8), flat.dtype.itemsize, flat.size), GZIP_LEVEL)


def decode_chunk(data: bytes, spec: OutputSpec, chunk_rows: int) -> np.ndarray:
    """The ``chunk_rows`` rows ``encode_chunk`` encoded into ``data``."""
    dtype = spec.numpy_dtype
    count = chunk_rows * int(np.prod(spec.shape, dtype=np.int64))
    raw = np.frombuffer(zlib.decompress(data), dtype=np.uint8)
    if dtype.itemsize > 1 and count > 1:
        raw = np.ascontiguousarray(raw.reshape(dtype.itemsize, count).T)
    return raw.view(dtype).reshape(chunk_rows, *spec.shape)


def _shuffle(data: np.ndarray, itemsize: int, count: int) -> bytes:
    """HDF5's shuffle: byte 0 of every element, then byte 1, ... (none for one-byte types)."""
    if itemsize == 1 or count <= 1:  # HDF5 leaves these as they are
        return data.tobytes()
    return data.reshape(count, itemsize).T.tobytes()
