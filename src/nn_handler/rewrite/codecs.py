"""The codecs a rewrite writes: one chunk's bytes in, the bytes HDF5's filter pipeline expects out.

Chunks are compressed outside HDF5 (imagecodecs releases the GIL, so a thread pool compresses on
every core) and written with ``write_direct_chunk``. Each codec's bytes are exactly what the HDF5
filter stores: gzip is HDF5's built-in deflate filter (a zlib stream, readable everywhere); zstd
(filter 32015) and lz4 (filter 32004, HDF5's lz4 framing) are the filters hdf5plugin registers,
so plain h5py reads the result once ``import hdf5plugin`` has run. Numeric data of more than one
byte per value goes through HDF5's byte shuffle first (filter 2), as h5py's ``shuffle=True``.
"""

from __future__ import annotations

import importlib.util
import time
from dataclasses import dataclass
from typing import Any

import h5py
import numpy as np

from nn_handler._io import LZ4, ZSTD

__all__ = [
    "CODECS",
    "Codec",
    "check_level",
    "default_codec",
    "have_imagecodecs",
    "plugin_available",
]

CODECS = ("zstd", "lz4", "gzip", "none")
_FILTER_IDS = {"zstd": ZSTD, "lz4": LZ4}  # (gzip is HDF5's own deflate: set_deflate)
_LEVELS = {"zstd": (1, 22, 3), "gzip": (1, 9, 4)}
_SHUFFLED_KINDS = "iufc"


def plugin_available() -> bool:
    """True when hdf5plugin is installed (HDF5 then reads zstd and lz4 chunks)."""
    return importlib.util.find_spec("hdf5plugin") is not None


def have_imagecodecs() -> bool:
    """True when imagecodecs is installed (chunks are then compressed in a thread pool)."""
    return importlib.util.find_spec("imagecodecs") is not None


def default_codec() -> str:
    """The default codec: zstd with hdf5plugin installed (so h5py reads it), else gzip."""
    return "zstd" if plugin_available() else "gzip"


def check_level(codec: str, level: Any) -> int | None:
    """Return the level to use for ``codec`` (its default when ``level`` is None)."""
    if codec not in _LEVELS:
        if level is not None:
            raise ValueError(f"level is for zstd (1-22) and gzip (1-9); codec {codec!r} takes "
                             f"none, got level={level!r}")  # fmt: skip
        return None
    low, high, default = _LEVELS[codec]
    if level is None:
        return default
    if isinstance(level, bool) or not isinstance(level, int) or not low <= level <= high:
        raise ValueError(f"level for {codec} must be an integer in [{low}, {high}], got {level!r}")
    return level


@dataclass(frozen=True)
class Codec:
    """One dataset's filter pipeline: byte shuffle (or not) and a compressor at a level.

    Attributes:
        name: ``"zstd"``, ``"lz4"``, ``"gzip"`` or ``"none"``.
        level: Compression level (None for lz4 and none).
        itemsize: Bytes per value of the byte shuffle; 0: no shuffle.
    """

    name: str
    level: int | None
    itemsize: int = 0

    @classmethod
    def for_dtype(cls, name: str, level: int | None, dtype: np.dtype[Any]) -> Codec:
        """The codec ``name`` for values of ``dtype`` (shuffled when numeric and wider than 1)."""
        shuffle = name != "none" and dtype.kind in _SHUFFLED_KINDS and dtype.itemsize > 1
        return cls(name, level, dtype.itemsize if shuffle else 0)

    @property
    def label(self) -> str:
        """How ``inspect`` names the pipeline (``"shuffle+zstd(level=3)"``)."""
        name = self.name if self.level is None else f"{self.name}(level={self.level})"
        return f"shuffle+{name}" if self.itemsize else name

    def set_filters(self, dcpl: h5py.h5p.PropDCID) -> None:
        """Add this pipeline to a dataset-creation property list (shuffle first)."""
        if self.itemsize:
            dcpl.set_shuffle()
        if self.name == "gzip":
            dcpl.set_deflate(self.level)
        elif self.name in _FILTER_IDS:
            opts = (self.level,) if self.level is not None else (0,)
            dcpl.set_filter(_FILTER_IDS[self.name], h5py.h5z.FLAG_OPTIONAL, opts)

    def encode(self, chunk: np.ndarray[Any, Any]) -> bytes:
        """Return the stored bytes of one chunk (C-contiguous, padded to the full chunk)."""
        raw = chunk.view(np.uint8).reshape(-1)
        if self.itemsize:
            raw = np.ascontiguousarray(raw.reshape(-1, self.itemsize).T).reshape(-1)
        return _compress(self.name, self.level, raw)

    def decode_seconds(self, encoded: bytes, nbytes: int, repeats: int = 3) -> float:
        """Best of ``repeats`` timings of decoding ``encoded`` on one thread (for estimates)."""
        import imagecodecs

        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            if self.name == "zstd":
                data = imagecodecs.zstd_decode(encoded)
            elif self.name == "lz4":
                data = imagecodecs.lz4h5_decode(encoded)
            elif self.name == "gzip":
                data = imagecodecs.zlib_decode(encoded, out=nbytes)
            else:
                data = bytes(encoded)
            if self.itemsize:
                np.frombuffer(data, np.uint8).reshape(self.itemsize, -1).T.copy()
            best = min(best, time.perf_counter() - start)
        return best


def _compress(name: str, level: int | None, raw: np.ndarray[Any, Any]) -> bytes:
    if name == "none":
        return raw.tobytes()
    data: Any = raw  # any buffer: imagecodecs' stubs name only bytes
    import imagecodecs  # the test and fast extras install it; checked when a plan is made

    if name == "zstd":
        return bytes(imagecodecs.zstd_encode(data, level=level))
    if name == "lz4":
        return bytes(imagecodecs.lz4h5_encode(data))
    return bytes(imagecodecs.deflate_encode(data, level=level))
