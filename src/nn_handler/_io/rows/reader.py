"""RowReader: read rows along axis 0 of one HDF5 dataset for a whole batch of indices.

The reader checks what a caller asks (indices in range, ``out``'s shape and dtype, the file
unchanged since it was opened: ``H5Source.check_unchanged``) and hands the read to its
``RowStrategy`` (``strategy.py``), the one way of reading this dataset's rows that
``choice.py`` picked when the reader was built: ``memmap``, ``ranges``, ``decode``,
``chunks`` or ``slabs``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..file.source import H5Source
from ..indices import IndexArray, as_index_array, normalize_index
from .choice import choose_rows
from .strategy import DatasetRows, RowStrategy, StrategyName

__all__ = ["RowReader"]


class RowReader:
    """Reads rows of one dataset of an ``H5Source``, in any order, in batches.

    Args:
        source: The file.
        key: Path of the dataset inside the file (nested paths allowed).
        arg: Name of the user-facing argument that gave ``key`` (for error messages).

    Raises:
        KeyError: ``key`` is not in the file.
        ValueError: the dataset is a scalar (0-d) or has no shape.
        MissingFilterError / ExternalDataError / CorruptFileError: the layout check failed
            (``choice.py``).
    """

    def __init__(self, source: H5Source, key: str, *, arg: str = "key") -> None:
        self.source = source
        self.key = key
        dset = source.dataset(key, arg=arg)
        if dset.shape is None or len(dset.shape) == 0:
            raise ValueError(
                f"{arg}={key!r} in {source.path!r} is a scalar (0-d) dataset; samples are read "
                "along axis 0, so it needs at least one dimension"
            )
        chunks = int(dset.chunks[0]) if dset.chunks else None
        shape = tuple(int(s) for s in dset.shape)
        self.rows = DatasetRows(key, shape[0], shape[1:], dset.dtype, chunks)
        self.length: int = self.rows.length
        self.row_shape: tuple[int, ...] = self.rows.row_shape
        self.dtype: np.dtype[Any] = self.rows.dtype
        self.chunk_rows: int | None = chunks
        self.row_nbytes: int = self.rows.row_nbytes
        self._rows: RowStrategy = choose_rows(dset, source, self.rows)
        #: the last ``plan_window`` asked (a reader rebuilt for a grown file keeps it)
        self.window_plan: tuple[int, int] | None = None

    @property
    def strategy(self) -> StrategyName:
        """``"memmap"``, ``"ranges"``, ``"decode"``, ``"chunks"`` or ``"slabs"`` (fixed when built).

        See ``choice.py``; ``"ranges"``: contiguous data of a file in an object store, read by
        byte ranges.
        """
        return self._rows.strategy

    @property
    def readahead_rows(self) -> int:
        """Rows worth announcing ahead of reads (``read_ahead``): a planned window, else 0."""
        return self._rows.readahead_rows

    def read_ahead(self, indices: Any) -> None:
        """Start decoding the chunks rows ``indices`` need, in the background (or do nothing)."""
        self._rows.read_ahead(as_index_array(indices, self.length))

    @property
    def releases_gil(self) -> bool:
        """True when batch reads run outside the GIL and h5py's lock.

        Memory-map gathers, and chunks read by ``pread`` and decoded in the pool: threads then
        read in parallel.
        """
        return self._rows.releases_gil

    @property
    def nbytes(self) -> int:
        """Bytes of the whole dataset once decoded."""
        return self.row_nbytes * self.length

    def read(self, indices: Any, out: np.ndarray[Any, Any] | None = None) -> np.ndarray[Any, Any]:
        """Return rows ``indices`` (any order, duplicates allowed) as one array, in that order.

        Args:
            indices: Row numbers: a sequence of ints, a 1-d integer array or tensor, or a slice.
                Negative numbers count from the end.
            out: Optional preallocated array of shape ``(len(indices), *row_shape)``.

        Raises:
            IndexError: an index is out of range; the message names it and the length.
        """
        idx = as_index_array(indices, self.length)
        if out is not None:
            self._output(len(idx), out)
        checked = self.source.check_unchanged()
        if idx.size == 0:
            return self._output(0, out)
        return self._rows.read(idx, out, checked)

    def read_row(self, index: Any) -> np.ndarray[Any, Any]:
        """Return one row as an array the caller owns (negative indices allowed)."""
        i = normalize_index(index, self.length)
        return self._rows.read_row(i, self.source.check_unchanged())

    def read_range(
        self, start: int, stop: int, out: np.ndarray[Any, Any] | None = None
    ) -> np.ndarray[Any, Any]:
        """Return rows ``[start, stop)`` (sequential read into ``out`` when given)."""
        if not 0 <= start <= stop <= self.length:
            raise IndexError(
                f"row range [{start}, {stop}) is outside a dataset of length {self.length}"
            )
        out = self._output(stop - start, out)
        if stop == start:
            return out
        self._rows.read_range(start, stop, out, self.source.check_unchanged())
        return out

    def read_runs(
        self, starts: IndexArray, stops: IndexArray, dst: IndexArray, out: np.ndarray[Any, Any]
    ) -> None:
        """Copy rows ``[starts[i], stops[i])`` to ``out[dst[i]:]`` for every ``i``.

        The file is checked once for all of them: a sparse batch of random cells is thousands
        of short runs.

        Raises:
            IndexError: a run lies outside the dataset or ends before it starts.
        """
        if starts.size and (
            int(starts.min()) < 0 or int(stops.max()) > self.length or bool((stops < starts).any())
        ):
            raise IndexError(f"row runs outside a dataset of length {self.length}")
        self._rows.read_runs(starts, stops, dst, out, self.source.check_unchanged())

    def read_chunks(self, chunks: list[int]) -> list[np.ndarray[Any, Any]]:
        """Return whole chunks along axis 0: rows ``[c * chunk_rows, (c + 1) * chunk_rows)``.

        For callers that gather pieces of many rows (sparse ``data`` / ``indices``): with the
        ``decode`` and ``chunks`` strategies each chunk is decoded once, in parallel, and kept
        in the decoded-chunk cache, so later calls that touch it again cost no decode. Other
        strategies read the rows with ``read_range``. Treat the arrays as read-only.

        Raises:
            ValueError: the dataset is not chunked.
            IndexError: a chunk number is out of range.
        """
        count = self._chunk_count()
        bad = [c for c in chunks if not 0 <= c < count]
        if bad:
            raise IndexError(f"chunk {bad[0]} is out of range for {count} chunks of {self.key!r}")
        return self._rows.read_chunks(chunks, self.source.check_unchanged())

    @property
    def decodes_heads(self) -> bool:
        """True when ``read_chunk_heads`` decodes a chunk only as far as it must.

        Plain deflate stops early; a byte-shuffle over one compressor puts only the head's
        elements back together. Otherwise a head costs its whole chunk: a caller with many
        heads to read does better to read them whole with the other chunks, in one call.
        """
        return self._rows.decodes_heads

    def read_chunk_head(self, chunk: int, rows: int) -> np.ndarray[Any, Any]:
        """Return the first ``rows`` rows of chunk ``chunk`` (see ``read_chunk_heads``)."""
        return self.read_chunk_heads([(chunk, rows)])[0]

    def read_chunk_heads(self, wanted: list[tuple[int, int]]) -> list[np.ndarray[Any, Any]]:
        """Return the first ``rows`` rows of chunk ``chunk`` for each ``(chunk, rows)`` (read-only).

        A chunk that is not in the decoded-chunk cache is decoded only as far as it must be
        (``decodes_heads``), in parallel, and not cached: for a sparse row that spills over
        into the next chunk, whose own rows are read (and the chunk decoded once) at another
        time.

        Raises:
            ValueError: the dataset is not chunked.
            IndexError: a chunk or a row count is out of range.
        """
        self._chunk_count()
        assert self.chunk_rows is not None
        for chunk, rows in wanted:
            first = chunk * self.chunk_rows
            if not (
                0 <= first < self.length and 0 < rows <= min(self.chunk_rows, self.length - first)
            ):
                raise IndexError(f"rows [0, {rows}) of chunk {chunk} are outside {self.key!r}")
        return self._rows.read_heads(wanted, self.source.check_unchanged())

    def random_order_cost(self) -> str | None:
        """What a random order costs beyond a chunk-by-chunk one, with the fixes; None: nothing.

        Something only for a chunked dataset decoded here that neither fits the decoded budget
        nor a window of every chunk: a random order then decodes a chunk per row.
        """
        return self._rows.random_order_cost()

    def clear_cache(self) -> None:
        """Drop this process's decoded chunks (``decode`` / ``chunks``; a no-op otherwise).

        Also those it shares with the workers it forks, and the window is fitted to the
        current budget again (``ChunkEngine.clear``).
        """
        self._rows.clear()

    def plan_window(self, block_rows: int, blocks: int) -> None:
        """Size the decoded-chunk window for a sampler reading ``blocks`` row blocks at a time."""
        self._rows.plan_window(block_rows, blocks)
        self.window_plan = (block_rows, blocks)

    def window_cache_nbytes(self, block_rows: int, blocks: int) -> int:
        """Chunk-cache bytes that keep every chunk of ``blocks`` row blocks decoded at once.

        A row block is ``block_rows`` rows starting at a multiple of ``block_rows`` (what a
        chunk-aware sampler shuffles). Zero when reads need no chunk cache (``memmap``, or data
        that is not chunked).
        """
        return self._rows.window_cache_nbytes(block_rows, blocks)

    def _chunk_count(self) -> int:
        if self.chunk_rows is None:
            raise ValueError(f"{self.key!r} in {self.source.path!r} is not chunked")
        return -(-self.length // self.chunk_rows)

    def _output(self, n: int, out: np.ndarray[Any, Any] | None) -> np.ndarray[Any, Any]:
        shape = (n, *self.row_shape)
        if out is None:
            return np.empty(shape, dtype=self.dtype)
        if out.shape != shape or out.dtype != self.dtype:
            raise ValueError(
                f"out must have shape {shape} and dtype {self.dtype}, "
                f"got shape {out.shape} and dtype {out.dtype}"
            )
        return out

    def __repr__(self) -> str:
        shape = (self.length, *self.row_shape)
        return (
            f"RowReader({self.source.path!r}, key={self.key!r}, shape={shape}, "
            f"dtype={self.dtype}, strategy={self.strategy!r})"
        )
