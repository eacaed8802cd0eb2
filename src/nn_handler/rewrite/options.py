"""RewriteOptions: every knob of ``rewrite_file``, checked once, with errors that name the argument.

Sizes accept bytes as an int or text with a binary unit (``"1MiB"``, ``"2GiB"``, ``"512k"``),
as the command line writes them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._validate import (
    check_non_negative_int,
    check_positive_int,
    parse_size,
    usable_cores,
)
from .codecs import check_level, default_codec, record_of

__all__ = ["MEMORY_SHARES", "MIN_MEMORY", "RewriteOptions", "parse_size"]

#: ``memory`` is split in quarters: the input's decoded-chunk cache, the slab of rows read at
#: once, the compression queue (a chunk and its compressed bytes per job) and the rest (the
#: partial output chunk, HDF5's metadata, Python). The queue holds at least two jobs of two
#: chunks' bytes, so ``memory`` must be at least 8 chunks of the largest chunk read or written.
MEMORY_SHARES = 8

#: The smallest ``memory`` accepted: below this the slabs are too small to be worth streaming.
MIN_MEMORY = 16 * 1024**2


@dataclass(frozen=True)
class RewriteOptions:
    """What ``rewrite_file`` writes and how (see its docstring for each argument).

    Attributes:
        keys: Datasets or groups to write (everything under a group); None: the whole file.
        chunk_bytes: Target bytes of one decoded chunk.
        sparse_chunk_bytes: Target bytes of one chunk of a sparse matrix's ``data`` (and as
            many entries of ``indices``): small, because ``H5SparseDataset`` gathers each
            row's run from the chunks around it (docs/performance.md compares chunk
            sizes).
        codec: One of ``codecs.choices()`` (``"zstd"``, ``"lz4"``, ``"gzip"``, ``"none"``: the
            records of ``codec_registry`` with an encoder, and none); None (auto): zstd when
            hdf5plugin is installed (so plain h5py reads the result), else gzip, and no
            compression for a dataset whose sample chunk does not compress.
        level: Compression level (its record's levels: zstd 1-22, gzip 1-9); None: the codec's
            default.
        dtypes: New dtypes per dataset path (numeric datasets only).
        shuffle_rows: Seed of the row permutation, or None to keep the order.
        memory: Bytes the rewrite may hold at once (buffers, caches, compression queue).
        verify: Compare the result with the input after writing.
        verify_rows: Rows per dataset compared (a seeded sample); None: every row.
        workers: Compression threads; None: every core this process may use.
    """

    keys: tuple[str, ...] | None = None
    chunk_bytes: int = 1 << 20
    sparse_chunk_bytes: int = 16 << 10
    codec: str | None = None
    level: int | None = None
    dtypes: Mapping[str, np.dtype[Any]] = field(default_factory=dict)
    shuffle_rows: int | None = None
    memory: int = 2 << 30
    verify: bool = True
    verify_rows: int | None = None
    workers: int = 0

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "keys", _keys(self.keys))
        set_(self, "chunk_bytes", parse_size("chunk_bytes", self.chunk_bytes))
        check_positive_int("chunk_bytes", self.chunk_bytes)
        set_(self, "sparse_chunk_bytes", parse_size("sparse_chunk_bytes", self.sparse_chunk_bytes))
        check_positive_int("sparse_chunk_bytes", self.sparse_chunk_bytes)
        if self.codec is not None:
            _check_readable(self.codec)
        set_(self, "level", check_level(self.codec_name, self.level))
        set_(self, "dtypes", _dtypes(self.dtypes))
        if self.shuffle_rows is not None:
            check_non_negative_int("shuffle_rows", self.shuffle_rows)
        set_(self, "memory", parse_size("memory", self.memory))
        if self.memory < MIN_MEMORY:
            raise ValueError(f"memory must be at least {MIN_MEMORY} bytes (16 MiB), got "
                             f"{self.memory!r}")  # fmt: skip
        if not isinstance(self.verify, bool):
            raise TypeError(f"verify must be True or False, got {self.verify!r}")
        if self.verify_rows is not None:
            check_positive_int("verify_rows", self.verify_rows)
        set_(self, "workers", _workers(self.workers))

    @property
    def codec_name(self) -> str:
        """The codec asked for, or the default one when ``codec`` is None (auto)."""
        return self.codec if self.codec is not None else default_codec()

    def min_memory(self, chunk_nbytes: int) -> int:
        """The ``memory`` that chunks of ``chunk_nbytes`` need (see ``MEMORY_SHARES``)."""
        return MEMORY_SHARES * chunk_nbytes

    @property
    def share(self) -> int:
        """A quarter of ``memory``: the bound of the cache, of the slab and of the queue."""
        return self.memory // 4


def _check_readable(codec: str) -> None:
    """Refuse a codec that is not one of ours, or that plain h5py here could not read back."""
    record = record_of(codec)
    if record is not None and not record.readable_here():
        raise ValueError(f"codec={codec!r} cannot be read back here: {record.source}; "
                         f"codec={default_codec()!r} needs nothing")  # fmt: skip


def _keys(keys: Any) -> tuple[str, ...] | None:
    if keys is None:
        return None
    if isinstance(keys, str) or not isinstance(keys, Sequence):
        raise TypeError(f"keys must be a list of dataset or group paths, got {keys!r}")
    out = []
    for key in keys:
        if not isinstance(key, str) or not key.strip("/"):
            raise ValueError(f"keys must hold non-empty dataset or group paths, got {key!r}")
        out.append(key.strip("/"))
    if not out:
        raise ValueError("keys must name at least one dataset or group (None: the whole file)")
    return tuple(out)


def _dtypes(dtypes: Any) -> dict[str, np.dtype[Any]]:
    if not isinstance(dtypes, Mapping):
        raise TypeError(f"dtypes must be a dict of dataset path -> dtype, got {dtypes!r}")
    out: dict[str, np.dtype[Any]] = {}
    for key, value in dtypes.items():
        try:
            dtype = np.dtype(value)
        except TypeError as exc:
            raise TypeError(f"dtypes[{key!r}] must be a NumPy dtype such as 'float32', got "
                            f"{value!r}") from exc  # fmt: skip
        if dtype.kind not in "biuf":
            raise ValueError(f"dtypes[{key!r}] must be a numeric dtype (bool, int, uint, float), "
                             f"got {dtype}")  # fmt: skip
        out[str(key).strip("/")] = dtype
    return out


def _workers(workers: Any) -> int:
    if workers is None or workers == 0:
        return usable_cores()
    return check_positive_int("workers", workers)
