"""Row sinks: where a rewrite appends rows, in order, one dataset at a time.

``ChunkStream`` cuts the rows into whole chunks, compresses them in a thread pool (the codecs
release the GIL, so every core compresses) and writes them in order with
``write_direct_chunk``: HDF5 only stores bytes. At most ``queue_bytes`` of chunks and their
compressed bytes are in flight. ``H5pyRows`` writes rows through h5py, which runs the filter
pipeline itself on one core: for variable-length data, whose chunks hold heap references.
"""

from __future__ import annotations

from collections import deque
from concurrent.futures import Executor, Future
from typing import Any, Protocol

import h5py
import numpy as np

from .codecs import Codec

__all__ = ["ChunkStream", "H5pyRows", "RowSink", "create_dataset"]


class RowSink(Protocol):
    """Takes rows along axis 0, in order, until ``close``."""

    def append(self, rows: np.ndarray[Any, Any]) -> None:
        """Write ``rows`` after the rows written so far."""

    def close(self) -> None:
        """Write what is buffered and wait for it."""


def create_dataset(
    group: h5py.Group,
    name: str,
    shape: tuple[int, ...],
    tid: h5py.h5t.TypeID,
    chunks: tuple[int, ...],
    codec: Codec,
    fill: np.ndarray[Any, Any] | None = None,
) -> h5py.Dataset:
    """Create a chunked dataset with the HDF5 type ``tid`` (exactly the input's, or a new one).

    Axis 0 is extendible when the dataset has no rows (HDF5 wants a chunk no longer than a
    fixed dimension).
    """
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_chunk(chunks)
    codec.set_filters(dcpl)
    if fill is not None:
        dcpl.set_fill_value(fill)
    maxshape = (None if shape[0] == 0 else shape[0], *shape[1:])
    space = h5py.h5s.create_simple(shape, maxshape)
    lcpl = h5py.h5p.create(h5py.h5p.LINK_CREATE)
    lcpl.set_char_encoding(h5py.h5t.CSET_UTF8)
    dsid = h5py.h5d.create(group.id, name.encode(), tid, space, dcpl=dcpl, lcpl=lcpl)
    return h5py.Dataset(dsid)


class ChunkStream:
    """Appends rows to a chunked dataset whose chunks hold whole rows; see the module doc.

    Args:
        dset: The output dataset (its chunks span every axis but the first).
        codec: The dataset's filter pipeline.
        pool: Threads that compress.
        queue_bytes: Bytes of chunks (raw and compressed) in flight at most.
    """

    def __init__(self, dset: h5py.Dataset, codec: Codec, pool: Executor, queue_bytes: int):
        assert dset.chunks is not None
        self._dset = dset
        self._codec = codec
        self._pool = pool
        self._rows = int(dset.chunks[0])
        self._row_shape = tuple(int(s) for s in dset.shape[1:])
        self._buffer = self._new_buffer()
        self._filled = 0
        self._next = 0
        self._pending: deque[tuple[int, Future[bytes]]] = deque()
        self._max_pending = max(2, queue_bytes // max(2 * self._buffer.nbytes, 1))
        self._tail = (0,) * len(self._row_shape)

    def _new_buffer(self) -> np.ndarray[Any, Any]:
        return np.empty((self._rows, *self._row_shape), dtype=self._dset.dtype)

    def append(self, rows: np.ndarray[Any, Any]) -> None:
        """Write ``rows`` after the rows written so far (a whole chunk at a time)."""
        pos, n = 0, len(rows)
        while pos < n:
            if self._filled == 0 and n - pos >= self._rows:  # a whole chunk: no copy
                self._submit(np.ascontiguousarray(rows[pos : pos + self._rows]))
                pos += self._rows
                continue
            take = min(self._rows - self._filled, n - pos)
            self._buffer[self._filled : self._filled + take] = rows[pos : pos + take]
            self._filled += take
            pos += take
            if self._filled == self._rows:
                self._submit(self._buffer)
                self._buffer, self._filled = self._new_buffer(), 0

    def close(self) -> None:
        """Pad and write the last (edge) chunk, then wait for every chunk to be written."""
        if self._filled:
            self._buffer[self._filled :] = np.zeros((), dtype=self._buffer.dtype)
            self._submit(self._buffer)
            self._filled = 0
        while self._pending:
            self._write_one()

    def abandon(self) -> None:
        """Cancel what is queued (after an error elsewhere)."""
        for _, future in self._pending:
            future.cancel()
        self._pending.clear()

    def _submit(self, chunk: np.ndarray[Any, Any]) -> None:
        while len(self._pending) >= self._max_pending:
            self._write_one()
        self._pending.append((self._next, self._pool.submit(self._codec.encode, chunk)))
        self._next += 1

    def _write_one(self) -> None:
        index, future = self._pending.popleft()
        self._dset.id.write_direct_chunk((index * self._rows, *self._tail), future.result())


class H5pyRows:
    """Appends rows to a dataset through h5py (HDF5 runs the filters)."""

    def __init__(self, dset: h5py.Dataset) -> None:
        self._dset = dset
        self._at = 0

    def append(self, rows: np.ndarray[Any, Any]) -> None:
        """Write ``rows`` after the rows written so far."""
        if len(rows):
            self._dset[self._at : self._at + len(rows)] = rows
            self._at += len(rows)

    def close(self) -> None:
        """Nothing is buffered."""
