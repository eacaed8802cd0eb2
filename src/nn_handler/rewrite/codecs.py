"""The codecs a rewrite writes: one chunk's bytes in, the bytes HDF5's filter pipeline expects out.

Chunks are compressed outside HDF5 (imagecodecs releases the GIL, so a thread pool compresses on
every core) and written with ``write_direct_chunk``. Each codec is a record of
``nn_handler._io.codec_registry`` with an encoder: its stored bytes are exactly what its HDF5
filter stores (gzip: HDF5's built-in deflate, readable everywhere; zstd and lz4: the filters
hdf5plugin registers, so plain h5py reads them once ``import hdf5plugin`` has run), and its
levels, default and ``cd_values`` come from the record. Numeric data of more than one byte per
value goes through HDF5's byte shuffle first, as h5py's ``shuffle=True``.
"""

from __future__ import annotations

import importlib.util
import time
from dataclasses import dataclass
from typing import Any

import h5py
import numpy as np

from nn_handler._io import CODECS, SHUFFLE, FilterCodec, Step, written

__all__ = [
    "NONE",
    "Codec",
    "check_level",
    "choices",
    "default_codec",
    "have_imagecodecs",
    "levels_help",
    "record_of",
]

NONE = "none"  # no compression: not a filter, so no record
_SHUFFLED_KINDS = "iufc"


def choices() -> tuple[str, ...]:
    """The codecs a rewrite writes (``--codec``): every record with an encoder, then none."""
    return (*(record.name for record in written()), NONE)


def record_of(name: str) -> FilterCodec | None:
    """The registry's record of codec ``name``; None for ``"none"``.

    Raises:
        ValueError: a name that is not one of ``choices()``.
    """
    for record in written():
        if record.name == name:
            return record
    if name != NONE:
        raise ValueError(f"codec must be one of {', '.join(choices())}, got {name!r}")
    return None


def levels_help() -> str:
    """The levels each codec takes, as ``--level``'s help says (``"zstd 1-22 (3), ..."``)."""
    return ", ".join(
        f"{record.name} {record.encoder.levels}"
        for record in written()
        if record.encoder is not None and record.encoder.levels is not None
    )


def have_imagecodecs() -> bool:
    """True when imagecodecs is installed (chunks are then compressed in a thread pool)."""
    return importlib.util.find_spec("imagecodecs") is not None


def default_codec() -> str:
    """The default codec: the first written one plain h5py reads here (zstd with hdf5plugin)."""
    return next(record.name for record in written() if record.readable_here())


def check_level(codec: str, level: Any) -> int | None:
    """Return the level to use for ``codec`` (its default when ``level`` is None)."""
    record = record_of(codec)
    levels = None if record is None or record.encoder is None else record.encoder.levels
    if levels is None:
        if level is not None:
            raise ValueError(f"level is for {levels_help()}; codec {codec!r} takes "
                             f"none, got level={level!r}")  # fmt: skip
        return None
    if level is None:
        return levels.default
    low, high = levels.low, levels.high
    if isinstance(level, bool) or not isinstance(level, int) or not low <= level <= high:
        raise ValueError(f"level for {codec} must be an integer in [{low}, {high}], got {level!r}")
    return level


@dataclass(frozen=True)
class Codec:
    """One dataset's filter pipeline: byte shuffle (or not) and a compressor at a level.

    Attributes:
        name: One of ``choices()`` (``"zstd"``, ``"lz4"``, ``"gzip"``, ``"none"``).
        level: Compression level (None for codecs that take none).
        itemsize: Bytes per value of the byte shuffle; 0: no shuffle.
    """

    name: str
    level: int | None
    itemsize: int = 0

    @classmethod
    def for_dtype(cls, name: str, level: int | None, dtype: np.dtype[Any]) -> Codec:
        """The codec ``name`` for values of ``dtype`` (shuffled when numeric and wider than 1)."""
        shuffle = name != NONE and dtype.kind in _SHUFFLED_KINDS and dtype.itemsize > 1
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
        record = record_of(self.name)
        if record is not None and record.encoder is not None:
            values = record.encoder.values(self.level)
            dcpl.set_filter(record.code, h5py.h5z.FLAG_OPTIONAL, values)

    def encode(self, chunk: np.ndarray[Any, Any]) -> bytes:
        """Return the stored bytes of one chunk (C-contiguous, padded to the full chunk)."""
        raw = chunk.view(np.uint8).reshape(-1)
        if self.itemsize:
            raw = np.ascontiguousarray(raw.reshape(-1, self.itemsize).T).reshape(-1)
        record = record_of(self.name)
        if record is None or record.encoder is None:
            return raw.tobytes()
        return record.encoder.encode(raw, self.level)

    def decode_seconds(self, encoded: bytes, nbytes: int, repeats: int = 3) -> float:
        """Best of ``repeats`` timings of decoding ``encoded`` on one thread (for estimates).

        The chunk is decoded as a read decodes it: by each filter's record's decoder.
        """
        steps = self._steps()
        src = np.frombuffer(encoded, np.uint8)
        buffers = (np.empty(nbytes, np.uint8), np.empty(nbytes, np.uint8))
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            data = src
            for k, (record, step) in enumerate(reversed(steps)):
                if record.decoder is not None:
                    data = record.decoder.undo(step, data, buffers[k % 2])
            if not steps:
                buffers[0][:] = src
            best = min(best, time.perf_counter() - start)
        return best

    def _steps(self) -> list[tuple[FilterCodec, Step]]:
        """The pipeline's filters in write order, each with the step a read undoes."""
        steps = [(CODECS[SHUFFLE], Step(SHUFFLE, (), self.itemsize))] if self.itemsize else []
        record = record_of(self.name)
        if record is not None and record.encoder is not None:
            steps.append((record, Step(record.code, record.encoder.values(self.level), 1)))
        return steps
