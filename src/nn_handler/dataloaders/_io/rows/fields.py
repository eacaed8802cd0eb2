"""Readers for any key: a whole dataset (``RowReader``) or one field of a compound dataset.

``open_reader`` is the one entry point the datasets use. It resolves the key (``_keys``),
checks at construction what would otherwise fail at the first read (a type NumPy has no dtype
for, a filter whose plugin is missing), and returns a reader.

A ``FieldReader`` reads whole records of the compound dataset for the whole batch through one
``RowReader`` call, with the strategy that reader picked (a memory-mapped gather for contiguous
or unfiltered data, whole-chunk decodes for compressed chunks), then copies the field out of
them with one NumPy call: never one read per sample. Measured against h5py's own field
selection in ``benchmarks/fields.py``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..file.filters import check_filters
from ..file.source import H5Source
from .keys import ResolvedKey, resolve_key
from .kinds import dataset_dtype
from .reader import RowReader

__all__ = ["FieldReader", "Reader", "open_reader"]


class FieldReader:
    """Reads one field of a compound dataset along axis 0, in batches (``RowReader``'s API).

    A fixed-size array field (``('<f8', (2,))``) adds its shape to each row:
    ``row_shape == dataset.shape[1:] + field_shape``.

    Args:
        source: The file.
        resolved: The compound dataset's path and the field's name.
        arg: The user-facing argument that gave the key (for error messages).
    """

    def __init__(self, source: H5Source, resolved: ResolvedKey, *, arg: str = "key") -> None:
        if resolved.field is None:
            raise ValueError(f"{arg}={resolved.key!r} names no field")
        self.source = source
        self.key = resolved.key
        self.field = resolved.field
        self._records = RowReader(source, resolved.path, arg=arg)
        sub: np.dtype[Any] = self._records.dtype.fields[self.field][0]  # type: ignore[index]
        self.dtype: np.dtype[Any] = sub.base
        self.row_shape: tuple[int, ...] = (*self._records.row_shape, *sub.shape)
        self.length = self._records.length
        self.chunk_rows = self._records.chunk_rows
        self.row_nbytes = self.dtype.itemsize * math.prod(self.row_shape)

    @property
    def path(self) -> str:
        """Path of the compound dataset in the file."""
        return self._records.key

    @property
    def strategy(self) -> str:
        """The record reader's strategy (``"memmap"``, ``"decode"``, ``"chunks"``, ``"slabs"``)."""
        return self._records.strategy

    @property
    def nbytes(self) -> int:
        """Bytes of the whole field once read."""
        return self.row_nbytes * self.length

    def read(self, indices: Any, out: np.ndarray[Any, Any] | None = None) -> np.ndarray[Any, Any]:
        """Return the field at rows ``indices`` (any order, duplicates allowed), in that order."""
        return self._extract(self._records.read(indices), out)

    def read_row(self, index: Any) -> np.ndarray[Any, Any]:
        """Return the field of one row as an array the caller owns."""
        record = self._records.read_row(index)
        return np.array(record[self.field], dtype=self.dtype, copy=True)

    def read_range(
        self, start: int, stop: int, out: np.ndarray[Any, Any] | None = None
    ) -> np.ndarray[Any, Any]:
        """Return the field at rows ``[start, stop)``."""
        return self._extract(self._records.read_range(start, stop), out)

    def clear_cache(self) -> None:
        """Drop this process's decoded chunks."""
        self._records.clear_cache()

    def window_cache_nbytes(self, block_rows: int, blocks: int) -> int:
        """Chunk-cache bytes that keep ``blocks`` row blocks decoded (whole records are cached)."""
        return self._records.window_cache_nbytes(block_rows, blocks)

    def plan_window(self, block_rows: int, blocks: int) -> None:
        """Size the decoded-chunk window of the records (see ``RowReader.plan_window``)."""
        self._records.plan_window(block_rows, blocks)

    @property
    def readahead_rows(self) -> int:
        """Rows worth announcing ahead of reads (see ``RowReader.readahead_rows``)."""
        return self._records.readahead_rows

    def prefetch(self, indices: Any) -> None:
        """Start decoding the records rows ``indices`` need (see ``RowReader.prefetch``)."""
        self._records.prefetch(indices)

    @property
    def releases_gil(self) -> bool:
        """True when the records are read outside the GIL (see ``RowReader.releases_gil``)."""
        return self._records.releases_gil

    def _extract(
        self, records: np.ndarray[Any, Any], out: np.ndarray[Any, Any] | None
    ) -> np.ndarray[Any, Any]:
        values = records[self.field]
        shape = (len(records), *self.row_shape)
        if out is None:
            return np.array(values, dtype=self.dtype, copy=True, order="C")
        if out.shape != shape or out.dtype != self.dtype:
            raise ValueError(
                f"out must have shape {shape} and dtype {self.dtype}, "
                f"got shape {out.shape} and dtype {out.dtype}"
            )
        out[...] = values
        return out

    def __repr__(self) -> str:
        shape = (self.length, *self.row_shape)
        return (
            f"FieldReader({self.source.path!r}, key={self.key!r}, shape={shape}, "
            f"dtype={self.dtype}, strategy={self.strategy!r})"
        )


Reader = RowReader | FieldReader


def open_reader(source: H5Source, key: str, *, arg: str = "key") -> Reader:
    """Return a reader for ``key`` (a dataset path or ``"<dataset>:<field>"``).

    Raises:
        KeyError: ``key`` is not in the file (the message lists its datasets), or names a field
            the compound dataset lacks (the message lists its fields).
        TypeError: ``key`` names a group, selects a field of a non-compound dataset, or has an
            HDF5 type NumPy cannot represent.
        MissingFilterError: a filter of the dataset cannot be decoded here (the message names
            it and where to get it).
        ValueError: the dataset is a scalar.
    """
    resolved = resolve_key(source.file, key, arg=arg, where=source.path)
    if resolved is None:
        source.dataset(key, arg=arg)  # raises KeyError listing the file's datasets
        raise KeyError(f"{arg}={key!r} not found in {source.path!r}")  # pragma: no cover
    dset = source.dataset(resolved.path, arg=arg)
    dataset_dtype(dset, arg=arg, key=key, where=source.path)
    check_filters(dset, f"{arg}={key!r} in {source.path!r}", source.path)
    if resolved.field is None:
        return RowReader(source, resolved.path, arg=arg)
    return FieldReader(source, resolved, arg=arg)
