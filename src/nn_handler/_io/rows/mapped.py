"""MappedRows: rows gathered from a read-only memory map of the file (the ``memmap`` strategy).

For contiguous, unfiltered data, and for chunked unfiltered data whose chunks hold whole rows.
Rows are gathered straight from the map at the byte offsets HDF5 reports (``get_offset`` / the
chunk index): one numpy call per batch, no h5py call. Row ``i`` starts at
``offsets[i // rows_per_chunk] + (i % rows_per_chunk) * row_nbytes``; contiguous data is one
chunk holding every row.

The map is made by each process through a descriptor of its own (``Mappable.map``). Before each
batch it is checked against the file's size (a page past a truncated end would be SIGBUS) and,
unless HDF5's descriptor was just checked, the path's identity (``MappedFile.check``).

A file read cold faults its rows in one after another (one read in flight), and the kernel reads
around each fault (up to its read-ahead window: megabytes for a row of kilobytes). So while gathers
are slow (``_Temperature``), each batch first asks the kernel for all its rows at once
(``MappedFile.advise``): the disk serves them at its queue depth. Rows that fit in memory (the
decoded budget) keep the read-around, which soon brings the file in whole; a map of more (a file
bigger than the page cache, where the read-around would mostly read bytes evicted before use) reads
only the pages a gather touches (``MappedFile.read_randomly``). A warm gather pays nothing but two
clock reads.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..indices import IndexArray
from ..process import PerProcess
from ..storage.byte_source import Mappable, MappedFile
from .strategy import BaseRows, DatasetRows, StrategyName

__all__ = ["MappedRows"]


class MappedRows(BaseRows):
    """Rows of ``rows`` at ``offsets`` of ``file``'s map (see the module docstring).

    Args:
        rows: The dataset's rows.
        file: The file's bytes, mapped by each process on its first read.
        rows_per_chunk: Rows stored together at each offset (every row, for contiguous data).
        offsets: Byte offset of each chunk's first row.
        whole_fits: The rows' bytes fit in memory (the decoded budget): the map keeps the
            kernel's read-around (see ``_Temperature``).
    """

    strategy: StrategyName = "memmap"

    def __init__(
        self,
        rows: DatasetRows,
        file: Mappable,
        rows_per_chunk: int,
        offsets: IndexArray,
        whole_fits: bool = False,
    ) -> None:
        self.rows, self.file = rows, file
        self.rows_per_chunk, self.offsets = rows_per_chunk, offsets
        n, length = rows.row_nbytes, rows.length
        #: bytes of the file a read may touch (checked against its size before each batch)
        self.end = int(offsets.max()) + min(rows_per_chunk, length) * n
        # spans of rows whose chunks lie end to end: (first rows + length, byte offsets)
        gaps = np.flatnonzero(np.diff(offsets) != rows_per_chunk * n) + 1
        chunks = np.concatenate(([0], gaps)).astype(np.int64)
        self.heads = np.minimum(np.append(chunks * rows_per_chunk, length), length)
        self.firsts = offsets[chunks]
        self._map: PerProcess[_MappedView] = PerProcess()
        self._temperature = _Temperature(n, whole_fits)

    @property
    def releases_gil(self) -> bool:
        """True: a gather from the map runs outside the GIL and h5py's lock."""
        return True

    def read(
        self, idx: IndexArray, out: np.ndarray[Any, Any] | None, checked: bool
    ) -> np.ndarray[Any, Any]:
        """See ``RowStrategy.read``: one gather, into ``out`` when the data is one span."""
        if out is not None and out.flags.c_contiguous and self.firsts.size == 1:
            return self._gather_into(idx, out, checked)  # one copy, into ``out``
        rows = self.gather(idx, checked)
        if out is None:
            return rows
        out[...] = rows
        return out

    def read_range(self, start: int, stop: int, out: np.ndarray[Any, Any], checked: bool) -> None:
        """See ``RowStrategy.read_range``: one copy per chunk."""
        self._copy(self._mapped(checked).file.data, start, stop, out)

    def read_row(self, i: int, checked: bool) -> np.ndarray[Any, Any]:
        """See ``RowStrategy.read_row``."""
        return self.gather(np.array([i], dtype=np.int64), checked).reshape(self.rows.row_shape)

    def read_runs(
        self,
        starts: IndexArray,
        stops: IndexArray,
        dst: IndexArray,
        out: np.ndarray[Any, Any],
        checked: bool,
    ) -> None:
        """See ``RowStrategy.read_runs``: the file is checked once for all of them.

        A sparse batch of random cells is thousands of short runs, and a check per run (an
        ``fstat``) cost a quarter of the batch. Each run is one slice copy out of the span of
        end-to-end chunks it lies in (h5py writes chunks in order, a B-tree node between every
        few dozen); only runs across a gap go chunk by chunk.
        """
        file = self._mapped(checked).file
        raw, heads = file.data, self.heads
        span = np.minimum(np.searchsorted(heads, starts, side="right") - 1, heads.size - 2)
        began = self._temperature.before(
            file, self.firsts[span] + (starts - heads[span]) * self.rows.row_nbytes, stops - starts
        )
        inside = (stops <= heads[span + 1]).tolist()
        views: dict[int, tuple[int, np.ndarray[Any, Any]]] = {}
        runs = zip(starts.tolist(), stops.tolist(), dst.tolist(), strict=True)
        for (s, e, t), k, one in zip(runs, span.tolist(), inside, strict=True):
            if not one:
                self._copy(raw, s, e, out[t : t + e - s])
                continue
            if k not in views:
                views[k] = self._span_rows(raw, k)
            head, rows = views[k]
            out[t : t + e - s] = rows[s - head : e - head]
        self._temperature.after(began, int((stops - starts).sum()), starts.size)

    def window_cache_nbytes(self, block_rows: int, blocks: int) -> int:
        """Zero: a memory map needs no chunk cache."""
        return 0

    def gather(self, idx: IndexArray, checked: bool) -> np.ndarray[Any, Any]:
        """Rows ``idx`` as a new array: one fancy index of the row-sized byte-strided view."""
        n, per = self.rows.row_nbytes, self.rows_per_chunk
        offsets = self.offsets[idx // per] + (idx % per) * n
        mapped = self._mapped(checked)
        began = self._temperature.before(mapped.file, offsets)
        raw: np.ndarray[Any, Any] = mapped.view[offsets]
        self._temperature.after(began, idx.size)
        return raw.view(self.rows.dtype).reshape(len(idx), *self.rows.row_shape)

    def _gather_into(
        self, idx: IndexArray, out: np.ndarray[Any, Any], checked: bool
    ) -> np.ndarray[Any, Any]:
        # one span (contiguous data, or chunks end to end): rows are equally spaced, so the
        # file is a 2-d array of row bytes
        file = self._mapped(checked).file
        start, length, n = int(self.firsts[0]), self.rows.length, self.rows.row_nbytes
        rows = file.data[start : start + length * n].reshape(length, -1)
        began = self._temperature.before(file, start + idx * n)
        # mode="clip": indices are checked already, and "raise" makes numpy take into a copy
        np.take(rows, idx, axis=0, out=out.reshape(len(idx), -1).view(np.uint8), mode="clip")
        self._temperature.after(began, idx.size)
        return out

    def _copy(
        self, raw: np.ndarray[Any, Any], start: int, stop: int, out: np.ndarray[Any, Any]
    ) -> None:
        # rows of one chunk (or of contiguous data) are consecutive bytes: one copy per chunk
        per, n, rows = self.rows_per_chunk, self.rows.row_nbytes, self.rows
        for chunk in range(start // per, (stop - 1) // per + 1):
            first = chunk * per
            lo, hi = max(start, first), min(stop, first + per)
            begin = int(self.offsets[chunk]) + (lo - first) * n
            span = raw[begin : begin + (hi - lo) * n]
            out[lo - start : hi - start] = span.view(rows.dtype).reshape(hi - lo, *rows.row_shape)

    def _span_rows(self, raw: np.ndarray[Any, Any], k: int) -> tuple[int, np.ndarray[Any, Any]]:
        """First row of span ``k`` and its rows, as an array over the mapped bytes."""
        head, stop, begin = int(self.heads[k]), int(self.heads[k + 1]), int(self.firsts[k])
        span = raw[begin : begin + (stop - head) * self.rows.row_nbytes].view(self.rows.dtype)
        return head, span.reshape(stop - head, *self.rows.row_shape)

    def _mapped(self, checked: bool) -> _MappedView:
        mapped = self._map.get_or_make(self._make_map)
        # a page past a truncated end is SIGBUS; the path's identity only when HDF5's
        # descriptor was not just checked
        mapped.file.check(self.end, identity=not checked)
        return mapped

    def _make_map(self) -> _MappedView:
        file, n = self.file.map(), self.rows.row_nbytes
        if not self._temperature.fits:
            file.read_randomly()
        # One byte-strided view of the whole file whose element k is the row-sized record at
        # byte k: gathering any set of row offsets is then a single fancy-index call.
        view: np.ndarray[Any, Any] = np.ndarray(
            shape=(max(file.data.size - n + 1, 0),),
            dtype=np.dtype((np.void, n)),
            buffer=file.data,
            offset=0,
            strides=(1,),
        )
        return _MappedView(file, view)


@dataclass(frozen=True)
class _MappedView:
    """One process's map of the file and its row-sized byte-strided view."""

    file: MappedFile
    view: np.ndarray[Any, Any]


class _Temperature:
    """Whether this file's rows come from memory (warm) or from the disk (cold), by gather time.

    Cold when a gather takes over ``_COLD`` times what copying its rows from memory would;
    warm again below ``_WARM`` times (a gather after ``advise`` is fast only when the rows were
    in memory already). It starts cold: the first batch of a new map is asked for at once.

    Args:
        row_nbytes: Bytes of a row.
        fits: The rows fit in memory: the map keeps the kernel's read-around (a window around
            each row not yet asked for, which soon brings a file in whole). Otherwise the map
            reads only the pages a gather touches (``MappedFile.read_randomly``).
    """

    _COLD, _WARM = 10.0, 2.0
    _ROW_S, _RUN_S, _BYTES_PER_S = 0.3e-6, 1.5e-6, 4e9  # a row gathered, a run copied

    def __init__(self, row_nbytes: int, fits: bool = False) -> None:
        self.row_nbytes = row_nbytes
        self.fits = fits
        self.cold = True

    def before(
        self, file: MappedFile, offsets: IndexArray, rows: IndexArray | None = None
    ) -> float:
        """Ask for the rows at ``offsets`` first when cold; the clock at the gather's start.

        ``rows``: rows in each run that starts there (None: one row each).
        """
        if self.cold:
            file.advise(offsets, offsets + self.row_nbytes * (1 if rows is None else rows))
        return time.perf_counter()

    def after(self, began: float, rows: int, runs: int | None = None) -> None:
        """The gather that began at ``began`` copied ``rows`` rows (in ``runs`` runs)."""
        calls = rows * self._ROW_S if runs is None else runs * self._RUN_S
        expected = calls + rows * self.row_nbytes / self._BYTES_PER_S
        ratio = (time.perf_counter() - began) / max(expected, 1e-9)
        if ratio > self._COLD:
            self.cold = True
        elif ratio < self._WARM:
            self.cold = False
