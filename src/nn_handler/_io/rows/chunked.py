"""ChunkedRows: rows served from whole decoded blocks of chunks (``decode`` / ``chunks``).

The chunk engine (``chunks/engine.py``) keeps a window of decoded blocks and fills the missing
ones from its ``BlockFiller``: raw chunks decoded by us in the decode pool (``decode``), or
blocks h5py decodes (``chunks``). HDF5's own chunk cache is off for these datasets (the window
is the cache): the engine's h5py handle is opened with ``chunk_cache=False``
(``chunks/h5py_rows.py``). Every read opens the file in this process first, as h5py reads do,
so the reader's check that the file is unchanged looks at it even when no chunk needs h5py.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..chunks.engine import ChunkEngine
from ..file.source import H5Source
from ..indices import IndexArray
from .strategy import BaseRows, DatasetRows, StrategyName

__all__ = ["ChunkedRows"]


class ChunkedRows(BaseRows):
    """Rows of ``rows`` through ``engine`` (see the module docstring).

    Args:
        rows: The dataset's rows.
        source: The file (each process opens it before reading).
        engine: The dataset's chunk engine.
    """

    def __init__(self, rows: DatasetRows, source: H5Source, engine: ChunkEngine) -> None:
        self.rows, self.source, self.engine = rows, source, engine

    @property
    def strategy(self) -> StrategyName:
        """``"decode"`` when we decode raw chunks, ``"chunks"`` when h5py does."""
        return "decode" if self.engine.decodes else "chunks"

    @property
    def releases_gil(self) -> bool:
        """True when blocks are read and decoded outside the GIL and h5py's lock."""
        return self.engine.releases_gil

    @property
    def readahead_rows(self) -> int:
        """One planned window of rows (0 when none was planned)."""
        return self.engine.readahead_rows

    @property
    def decodes_heads(self) -> bool:
        """True when a head of a block not held is decoded only as far as asked."""
        return self.engine.decodes_heads

    def read(
        self, idx: IndexArray, out: np.ndarray[Any, Any] | None, checked: bool
    ) -> np.ndarray[Any, Any]:
        """See ``RowStrategy.read``: through the window."""
        out = self.rows.empty(idx.size) if out is None else out
        self._open()
        return self.engine.read(idx, out)

    def read_range(self, start: int, stop: int, out: np.ndarray[Any, Any], checked: bool) -> None:
        """See ``RowStrategy.read_range``: whole blocks straight into ``out``."""
        self._open()
        self.engine.read_range(start, stop, out)

    def read_runs(
        self,
        starts: IndexArray,
        stops: IndexArray,
        dst: IndexArray,
        out: np.ndarray[Any, Any],
        checked: bool,
    ) -> None:
        """See ``RowStrategy.read_runs``: copied out of the window, each block decoded once."""
        keep = stops > starts
        starts, stops, dst = starts[keep], stops[keep], dst[keep]
        if starts.size == 0:
            return
        self._open()
        if self.engine.read_runs(starts, stops, dst, out):
            return
        # no window serves them: one batch read of every row, each block decoded once
        runs = list(zip(starts.tolist(), stops.tolist(), dst.tolist(), strict=True))
        got = self.read(np.concatenate([np.arange(s, e) for s, e, _ in runs]), None, checked)
        out[np.concatenate([np.arange(t, t + e - s) for s, e, t in runs])] = got

    def read_chunks(self, chunks: list[int], checked: bool) -> list[np.ndarray[Any, Any]]:
        """See ``RowStrategy.read_chunks``: each chunk decoded once, in parallel, and kept."""
        bounds = np.array([self._bounds(c) for c in chunks], dtype=np.int64).reshape(-1, 2)
        lengths = bounds[:, 1] - bounds[:, 0]
        dst = np.cumsum(lengths) - lengths
        whole = self.rows.empty(int(lengths.sum()))
        self.read_runs(bounds[:, 0], bounds[:, 1], dst, whole, checked)
        return list(np.split(whole, np.cumsum(lengths)[:-1])) if chunks else []

    def read_heads(
        self, wanted: list[tuple[int, int]], checked: bool
    ) -> list[np.ndarray[Any, Any]]:
        """See ``RowStrategy.read_heads``: chunks not held decoded only as far as they must be."""
        self._open()
        return self.engine.heads(wanted)

    def read_ahead(self, idx: IndexArray) -> None:
        """Start decoding the blocks rows ``idx`` need, in the pool (when reads release the GIL)."""
        self._open()
        self.engine.read_ahead(idx)

    def plan_window(self, block_rows: int, blocks: int) -> None:
        """See ``RowStrategy.plan_window``: the window's size in blocks, and its runs."""
        engine, own = self.engine, self.rows.chunk_rows or 1
        chunks = self.window_cache_nbytes(block_rows, blocks) // engine.block_nbytes
        run = block_rows // own if block_rows % own == 0 else 1
        engine.plan_window(max(1, chunks), run)

    def clear(self) -> None:
        """Drop this process's decoded blocks (and those shared with its workers)."""
        self.engine.clear()

    def random_order_cost(self) -> str | None:
        """See ``ChunkEngine.random_order_cost``."""
        return self.engine.random_order_cost()

    def _open(self) -> None:
        # the handle the engine's h5py reads use (HDF5's cache off: the window is the cache)
        self.source.dataset(self.rows.key, chunk_cache=False)
