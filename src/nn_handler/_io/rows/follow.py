"""Readers of datasets that a SWMR writer appends to, taken as the file is now.

A ``RowReader`` is built for one extent of its dataset: its length, its way of reading
(``choice.py``), its memory map or chunk table. When the file has grown (``H5Source.refresh``
refreshed the h5py datasets), ``reader_at`` builds the reader again for the new extent,
choosing and checking its way of reading afresh, and hands it the window plan of the old one.
Rows the file holds beyond the length asked for (a key resized before another, mid-append) are
left for a later refresh, so every key of a dataset serves the same rows.
"""

from __future__ import annotations

from ..errors import FileChangedError
from .fields import FieldReader, Reader, open_reader, row_reader

__all__ = ["current_length", "reader_at"]


def current_length(reader: Reader) -> int:
    """Rows the file holds now in ``reader``'s dataset (its h5py dataset as last refreshed).

    Raises:
        FileChangedError: the dataset has fewer rows than ``reader`` serves, or its rows
            changed shape.
    """
    records = row_reader(reader)
    shape = tuple(int(s) for s in records.source.dataset(records.key).shape)
    where = f"{records.key!r} in {records.source.path!r}"
    if shape[1:] != records.row_shape:
        raise FileChangedError(
            f"{where} has rows of shape {shape[1:]} now, not {records.row_shape}: a file that "
            "grows may only gain rows. Build the dataset again",
            records.source.path,
        )
    if shape[0] < reader.length:
        raise FileChangedError(
            f"{where} has {shape[0]} rows now, fewer than the {reader.length} it had: the file "
            "shrank. Build the dataset again",
            records.source.path,
        )
    return shape[0]


def reader_at(reader: Reader, length: int) -> Reader:
    """``reader``, or a new reader of its key serving the first ``length`` rows of the file now.

    Raises:
        ValueError: ``length`` is below what ``reader`` serves or above what the file holds.
    """
    if length == reader.length:
        return reader
    held = current_length(reader)
    if not reader.length <= length <= held:
        raise ValueError(
            f"length={length!r} must lie in [{reader.length}, {held}] for {reader.key!r}"
        )
    new = open_reader(reader.source, reader.key)
    plan = row_reader(reader).window_plan
    if plan is not None:
        row_reader(new).plan_window(*plan)
    _serve_first(new, length)
    return new


def _serve_first(reader: Reader, length: int) -> None:
    """Make ``reader`` serve rows ``[0, length)`` only (its index checks use ``length``)."""
    reader.length = length
    if isinstance(reader, FieldReader):
        reader.records.length = length
