"""Readers for any key: a whole dataset (``RowReader``) or one field of a compound dataset.

``open_reader`` is the one entry point the datasets use. It resolves the key (``_keys``),
checks at construction what would otherwise fail at the first read (a type NumPy has no dtype
for, a filter whose plugin is missing), and returns a reader.

A ``FieldReader`` reads whole records of the compound dataset for the whole batch through one
``RowReader`` call, with the strategy that reader picked (a memory-mapped gather for contiguous
or unfiltered data, whole-chunk decodes for compressed chunks), then copies the field out of
them with one NumPy call: never one read per sample. ``benchmarks/bench_fields.py`` measures it
against h5py's own field selection.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..file.filters import check_filters
from ..file.source import H5Source
from .keys import ResolvedKey, resolve_key
from .reader import RowReader
from .sample_kinds import dataset_dtype

__all__ = ["FieldReader", "Reader", "open_reader", "row_reader"]


class FieldReader:
    """Reads one field of a compound dataset along axis 0, in batches (``RowReader``'s reads).

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
        #: reads whole records; chunks, windows, readahead and caches are its (``row_reader``)
        self.records = RowReader(source, resolved.path, arg=arg)
        sub: np.dtype[Any] = self.records.dtype.fields[self.field][0]  # type: ignore[index]
        self.dtype: np.dtype[Any] = sub.base
        self.row_shape: tuple[int, ...] = (*self.records.row_shape, *sub.shape)
        self.length = self.records.length
        self.chunk_rows = self.records.chunk_rows
        self.row_nbytes = self.dtype.itemsize * math.prod(self.row_shape)

    @property
    def strategy(self) -> str:
        """The record reader's strategy (``"memmap"``, ``"decode"``, ``"chunks"``, ``"slabs"``)."""
        return self.records.strategy

    @property
    def nbytes(self) -> int:
        """Bytes of the whole field once read."""
        return self.row_nbytes * self.length

    def read(self, indices: Any, out: np.ndarray[Any, Any] | None = None) -> np.ndarray[Any, Any]:
        """Return the field at rows ``indices`` (any order, duplicates allowed), in that order."""
        return self._extract(self.records.read(indices), out)

    def read_row(self, index: Any) -> np.ndarray[Any, Any]:
        """Return the field of one row as an array the caller owns."""
        record = self.records.read_row(index)
        return np.array(record[self.field], dtype=self.dtype, copy=True)

    def read_range(
        self, start: int, stop: int, out: np.ndarray[Any, Any] | None = None
    ) -> np.ndarray[Any, Any]:
        """Return the field at rows ``[start, stop)``."""
        return self._extract(self.records.read_range(start, stop), out)

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


def row_reader(reader: Reader) -> RowReader:
    """The ``RowReader`` whose chunks ``reader`` reads: itself, or a field's ``records``.

    Window plans, readahead, caches and "reads release the GIL" belong to it.
    """
    return reader if isinstance(reader, RowReader) else reader.records


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
