"""Chunks compressed as HDF5's filters store them, for ``nn-handler rewrite`` (``imagecodecs``).

Each function takes one chunk's bytes (after HDF5's byte shuffle, when the dataset shuffles)
and a level, and returns the bytes the filter stores: a chunk so encoded is written as it is
(``write_direct_chunk``) and every HDF5 reader with the filter decodes it. ``imagecodecs``
releases the GIL while it compresses, so a thread pool compresses on every core; a rewrite
checks that it is installed before it encodes a chunk here (without it, HDF5 compresses).
Each is the encode half of its filter's record in ``codec_registry.py``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["deflate", "lz4h5", "zstd"]


def deflate(data: Any, level: int | None) -> bytes:
    """HDF5's deflate (gzip) filter: a zlib stream, compressed by libdeflate."""
    import imagecodecs  # the test and fast extras install it

    return bytes(imagecodecs.deflate_encode(data, level=level))


def zstd(data: Any, level: int | None) -> bytes:
    """hdf5plugin's zstd filter (32015): one zstd frame."""
    import imagecodecs

    return bytes(imagecodecs.zstd_encode(data, level=level))


def lz4h5(data: Any, level: int | None) -> bytes:
    """hdf5plugin's lz4 filter (32004): HDF5's lz4 framing (it takes no level)."""
    import imagecodecs

    return bytes(imagecodecs.lz4h5_encode(data))
