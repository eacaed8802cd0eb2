"""RowStrategy: one way of reading a dataset's rows; ``RowReader`` holds one and asks it.

Four sources, one per strategy, picked once per dataset by ``choice.py``:

* ``MappedRows`` (``"memmap"``, ``mapped.py``): a memory map of the file, gathered by offset.
* ``RangedRows`` (``"ranges"``, ``ranged.py``): byte ranges of an object in a store.
* ``ChunkedRows`` (``"decode"`` / ``"chunks"``, ``chunked.py``): whole blocks of chunks,
  decoded once and served from the chunk engine's window.
* ``SlabRows`` (``"slabs"``, ``slabs.py``): h5py reads of runs of nearby rows.

``RowReader`` checks indices, ``out`` and the file (``H5Source.check_unchanged``) before it asks:
a source reads rows known to exist. ``checked`` says whether that check just looked at HDF5's
own descriptor (the memory map then skips its own ``stat``). What a source does not do better it
gets from ``BaseRows``: single rows, runs and chunks read as ranges, no window, no readahead.
"""

from __future__ import annotations

import abc
import math
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import numpy as np

from ..indices import IndexArray

__all__ = ["BaseRows", "DatasetRows", "RowStrategy", "StrategyName"]

StrategyName = Literal["memmap", "ranges", "decode", "chunks", "slabs"]


@dataclass(frozen=True)
class DatasetRows:
    """The rows of one dataset along axis 0: how many, their shape and dtype, rows per chunk."""

    key: str  # the dataset's path in its file
    length: int
    row_shape: tuple[int, ...]
    dtype: np.dtype[Any]
    chunk_rows: int | None  # None: the dataset is not chunked

    @property
    def row_nbytes(self) -> int:
        """Bytes of one row."""
        return self.dtype.itemsize * math.prod(self.row_shape)

    def empty(self, n: int) -> np.ndarray[Any, Any]:
        """A new array for ``n`` rows."""
        return np.empty((n, *self.row_shape), dtype=self.dtype)


class RowStrategy(Protocol):
    """Reads rows of one dataset that ``RowReader`` has checked (see the module docstring)."""

    @property
    def strategy(self) -> StrategyName:
        """Which of the four ways (see the module docstring)."""

    @property
    def releases_gil(self) -> bool:
        """True when batch reads run outside the GIL and h5py's lock (threads read in parallel)."""

    @property
    def readahead_rows(self) -> int:
        """Rows worth announcing ahead of reads (``read_ahead``): a planned window, else 0."""

    @property
    def decodes_heads(self) -> bool:
        """True when ``head`` decodes a chunk only as far as asked."""

    def read(
        self, idx: IndexArray, out: np.ndarray[Any, Any] | None, checked: bool
    ) -> np.ndarray[Any, Any]:
        """Rows ``idx`` (any order, repeats allowed, at least one) into ``out``, or a new array."""

    def read_row(self, i: int, checked: bool) -> np.ndarray[Any, Any]:
        """Row ``i`` as an array of ``row_shape`` the caller owns."""

    def read_range(self, start: int, stop: int, out: np.ndarray[Any, Any], checked: bool) -> None:
        """Rows ``[start, stop)`` (at least one) into ``out``."""

    def read_runs(
        self,
        starts: IndexArray,
        stops: IndexArray,
        dst: IndexArray,
        out: np.ndarray[Any, Any],
        checked: bool,
    ) -> None:
        """Rows ``[starts[i], stops[i])`` into ``out[dst[i]:]`` for every ``i``."""

    def read_chunks(self, chunks: list[int], checked: bool) -> list[np.ndarray[Any, Any]]:
        """Whole chunks along axis 0 (``chunk_rows`` rows each; the last may be short)."""

    def read_heads(
        self, wanted: list[tuple[int, int]], checked: bool
    ) -> list[np.ndarray[Any, Any]]:
        """The first ``rows`` rows of chunk ``chunk``, for each ``(chunk, rows)`` (read-only)."""

    def read_ahead(self, idx: IndexArray) -> None:
        """Start reading what rows ``idx`` need, in the background, or do nothing."""

    def plan_window(self, block_rows: int, blocks: int) -> None:
        """Keep decoded about two windows of ``blocks`` row blocks of ``block_rows`` rows."""

    def window_cache_nbytes(self, block_rows: int, blocks: int) -> int:
        """Chunk-cache bytes that keep every chunk of ``blocks`` row blocks decoded at once."""

    def clear(self) -> None:
        """Drop what this process keeps decoded (and what it shares with its workers)."""

    def random_order_cost(self) -> str | None:
        """What a random order costs beyond a chunk-by-chunk one, and the fixes; None: nothing."""


class BaseRows(abc.ABC):
    """What a source gets unless it does better (see the module docstring)."""

    rows: DatasetRows

    @property
    @abc.abstractmethod
    def strategy(self) -> StrategyName:
        """See ``RowStrategy.strategy``."""

    @property
    def releases_gil(self) -> bool:
        """False: reads hold the GIL or h5py's lock."""
        return False

    @property
    def readahead_rows(self) -> int:
        """0: nothing is read ahead."""
        return 0

    @property
    def decodes_heads(self) -> bool:
        """False: a head is read as rows."""
        return False

    @abc.abstractmethod
    def read(
        self, idx: IndexArray, out: np.ndarray[Any, Any] | None, checked: bool
    ) -> np.ndarray[Any, Any]:
        """See ``RowStrategy.read``."""

    @abc.abstractmethod
    def read_range(self, start: int, stop: int, out: np.ndarray[Any, Any], checked: bool) -> None:
        """See ``RowStrategy.read_range``."""

    def read_row(self, i: int, checked: bool) -> np.ndarray[Any, Any]:
        """See ``RowStrategy.read_row``: a batch of one."""
        one = np.array([i], dtype=np.int64)
        return self.read(one, None, checked).reshape(self.rows.row_shape)

    def read_runs(
        self,
        starts: IndexArray,
        stops: IndexArray,
        dst: IndexArray,
        out: np.ndarray[Any, Any],
        checked: bool,
    ) -> None:
        """See ``RowStrategy.read_runs``: a range each."""
        for s, e, t in zip(starts.tolist(), stops.tolist(), dst.tolist(), strict=True):
            if e > s:
                self.read_range(s, e, out[t : t + e - s], checked)

    def read_chunks(self, chunks: list[int], checked: bool) -> list[np.ndarray[Any, Any]]:
        """See ``RowStrategy.read_chunks``: a range each."""
        return [self._range(*self._bounds(c), checked) for c in chunks]

    def read_heads(
        self, wanted: list[tuple[int, int]], checked: bool
    ) -> list[np.ndarray[Any, Any]]:
        """See ``RowStrategy.read_heads``: a range each."""
        firsts = [(self._bounds(chunk)[0], rows) for chunk, rows in wanted]
        return [self._range(first, first + rows, checked) for first, rows in firsts]

    def read_ahead(self, idx: IndexArray) -> None:
        """Nothing: reads are not decoded ahead (``ChunkedRows`` does)."""
        return None  # a default, not an abstract method: only the chunk engine reads ahead

    def plan_window(self, block_rows: int, blocks: int) -> None:
        """Nothing: no window of decoded chunks (``ChunkedRows`` keeps one)."""
        return None

    def window_cache_nbytes(self, block_rows: int, blocks: int) -> int:
        """See ``RowStrategy.window_cache_nbytes`` (zero for data that is not chunked)."""
        chunk = self.rows.chunk_rows
        if chunk is None:
            return 0
        if block_rows % chunk == 0:
            per_block = block_rows // chunk
        elif chunk % block_rows == 0:
            per_block = 1
        else:  # blocks straddle chunk boundaries
            per_block = -(-(block_rows - 1) // chunk) + 1
        return blocks * per_block * chunk * self.rows.row_nbytes

    def clear(self) -> None:
        """Nothing: nothing is kept decoded (``ChunkedRows`` keeps a window)."""
        return None

    def random_order_cost(self) -> str | None:
        """None: a row costs the same read in any order (``ChunkedRows`` may decode a chunk)."""
        return None

    def _bounds(self, chunk: int) -> tuple[int, int]:
        rows = self.rows.chunk_rows
        assert rows is not None  # RowReader asks for chunks of chunked data only
        return chunk * rows, min((chunk + 1) * rows, self.rows.length)

    def _range(self, start: int, stop: int, checked: bool) -> np.ndarray[Any, Any]:
        out = self.rows.empty(stop - start)
        self.read_range(start, stop, out, checked)
        return out
