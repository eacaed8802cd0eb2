"""The chunk engine: rows of a chunked dataset served from whole decoded blocks.

A composition of one idea per module, for one dataset:

* ``serving.py``: a window of decoded blocks in this process; a batch claims the blocks it
  needs, the missing ones are filled, and its rows are gathered from the window;
* ``read_ahead.py``: the blocks of coming rows filled in the decode pool ahead of need;
* ``decoded_pass.py``: a dataset whose decoded blocks fit the decoded budget is decoded whole,
  in memory the node shares, and read from that copy;
* ``order_cost.py``: a random order over a dataset too big for both says so once;
* ``fills.py``: how blocks are filled from the dataset's ``BlockFiller`` (``block_fillers.py``:
  ``pread`` + decode, ``read_direct_chunk`` + decode, or h5py), and h5py's one call for a run
  of rows where h5py decodes (``read_with_h5py``, made once with the engine).

Sequential reads (``read_range``) fill whole blocks straight into the caller's buffer and keep
only the blocks at its two edges (when h5py decodes, it reads the whole range in one call).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..file.source import H5Source
from ..indices import IndexArray, plan_pieces
from .block_fillers import BlockFiller, Geometry
from .decoded_pass import DecodedPass, decodes_in_moments
from .fills import BlockFills
from .h5py_rows import ReadWithH5py
from .order_cost import watch_order
from .pool import run_parallel
from .read_ahead import ReadAhead
from .serving import WindowServing
from .window import Window

__all__ = ["ChunkEngine"]


class ChunkEngine:
    """Serves rows of one chunked dataset from whole decoded blocks (see the module docstring).

    Args:
        file: The file (its ``rdcc_nbytes`` bounds the window).
        source: Fills one block (and knows the blocks' geometry).
        read_with_h5py: Reads rows through h5py (``h5py_rows.H5pyDataset``).
    """

    def __init__(self, file: H5Source, source: BlockFiller, read_with_h5py: ReadWithH5py) -> None:
        self.file, self.source = file, source
        self.geometry: Geometry = source.geometry
        self._fills = BlockFills(source, read_with_h5py)
        self.serving = WindowServing(file, self._fills)
        self.decoded = DecodedPass(file, self.geometry, self._fills.fill_ids)
        self.ahead = ReadAhead(self.serving, source, self.decoded)
        watched = self.decoded.blocks is None and not decodes_in_moments(self.geometry)
        self._order = watch_order(file, self.geometry) if watched else None

    @property
    def decodes(self) -> bool:
        """True when raw chunks are decoded here (the ``decode`` strategy), not by h5py."""
        return self.source.decodes

    @property
    def releases_gil(self) -> bool:
        """True when blocks are read and decoded outside the GIL and h5py's lock."""
        return self.source.releases_gil

    @property
    def decodes_heads(self) -> bool:
        """True when ``head`` of a block not held decodes only as far as asked."""
        return self.source.decodes_heads

    @property
    def block_nbytes(self) -> int:
        return self.geometry.block_nbytes

    @property
    def cache(self) -> Window:
        """This process's window of decoded blocks."""
        return self.serving.cache

    @property
    def readahead_rows(self) -> int:
        """Rows worth filling ahead of need: one planned window (0 when none was planned)."""
        return self.ahead.rows

    def plan_window(self, blocks: int, run: int = 1) -> None:
        """Hold about two windows of ``blocks`` blocks (a sampler's shuffle window), not more.

        ``run``: the sampler keeps runs of this many adjacent blocks together; an object
        store's readahead then fetches every run it touches whole (one request per run).
        """
        self.serving.plan(blocks, run)

    def clear(self) -> None:
        """Drop this process's window of decoded blocks (a whole decoded copy stays)."""
        self.cache.clear()

    def random_order_cost(self) -> str | None:
        """What a random order costs beyond a chunk order, and the fixes (None: nothing more).

        Something when a random order decodes a block per row: the dataset is too big for its
        decoded budget and for its window (the case ``RandomOrderCost`` watches).
        """
        return None if self._order is None else self._order.advice()

    def read_ahead(self, idx: IndexArray) -> None:
        """Start filling, in the pool, the blocks rows ``idx`` need (see ``ReadAhead.start``)."""
        self.ahead.start(idx)

    def read(self, idx: IndexArray, out: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """Fill ``out`` with rows ``idx`` (any order, duplicates allowed)."""
        return self._read(idx, out, start_pass=True)

    def _read(
        self, idx: IndexArray, out: np.ndarray[Any, Any], *, start_pass: bool
    ) -> np.ndarray[Any, Any]:
        if not out.flags.c_contiguous:
            out[...] = self._read(idx, np.empty_like(out, order="C"), start_pass=start_pass)
            return out
        whole = self.decoded.ready()
        if whole is not None:  # every epoch after the pass: one gather, nothing else
            return self._gather(whole, idx, out)
        blocks = idx // self.geometry.block_rows
        uniq = np.unique(blocks)
        whole = self.decoded.whole(uniq if start_pass else None)
        if whole is not None:  # the blocks of this batch are decoded in the node's copy
            return self._gather(whole, idx, out)
        filled = self.serving.read(idx, blocks, uniq, out)
        if self._order is not None and start_pass:
            self._order.note(idx.size, filled)
        return out

    def _gather(
        self, whole: np.ndarray[Any, Any], idx: IndexArray, out: np.ndarray[Any, Any]
    ) -> np.ndarray[Any, Any]:
        flat = whole.reshape(-1, *self.geometry.row_shape)
        np.take(flat, idx, axis=0, out=out, mode="clip")  # idx was checked against length
        return out

    def read_runs(
        self, starts: IndexArray, stops: IndexArray, dst: IndexArray, out: np.ndarray[Any, Any]
    ) -> bool:
        """Copy rows ``[starts[i], stops[i])`` (non-empty) to ``out[dst[i]:]`` from whole blocks.

        Each block is decoded once, in parallel, and kept, as ``read`` would; the runs are
        copied out of the window while the blocks are claimed, in groups the window holds
        (a sparse batch: thousands of row pieces out of ~60 chunks, straight to their places in
        the batch, in any order). False where the window does not serve them (no window, one
        row per block, h5py decodes): the caller reads them otherwise (nothing, or part, copied).
        """
        block, lo, hi, to, _ = plan_pieces(starts, stops, dst, self.geometry.block_rows)
        ids = np.unique(block)
        whole = self.decoded.whole(ids) if ids.size else None
        if whole is not None:
            flat = whole.reshape(-1, *self.geometry.row_shape)
            for s, e, t in zip(starts.tolist(), stops.tolist(), dst.tolist(), strict=True):
                out[t : t + e - s] = flat[s:e]
            return True
        if not self.decodes:
            return False
        order = np.argsort(block, kind="stable")  # runs may come in any order
        pieces = (block[order], lo[order], hi[order], to[order])
        return self.serving.copy_pieces(ids, pieces, out)

    def read_range(self, start: int, stop: int, out: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """Fill ``out`` with rows ``[start, stop)``: whole blocks are filled straight into it."""
        if not out.flags.c_contiguous:  # (h5py's read_direct refuses such an array too)
            out[...] = self.read_range(start, stop, np.empty_like(out, order="C"))
            return out
        decoded = self.decoded.ready()
        if decoded is not None:  # (ranges never start the whole pass: a rank's shard, say)
            out[...] = decoded.reshape(-1, *self.geometry.row_shape)[start:stop]
            return out
        if not self.decodes:  # h5py decodes: it reads a range best in one call
            self._fills.read_rows(start, stop, out)
            return out
        rows = self.geometry.block_rows
        first, last = -(-start // rows), stop // rows  # blocks wholly inside [start, stop)
        if first < last:
            self._fills.fill_whole(first, out[first * rows - start : last * rows - start])
        spans = [(start, stop)] if first >= last else [(start, first * rows), (last * rows, stop)]
        edge = np.concatenate([np.arange(lo, hi, dtype=np.int64) for lo, hi in spans])
        if edge.size:
            part = np.empty((edge.size, *self.geometry.row_shape), self.geometry.dtype)
            out[edge - start] = self._read(edge, part, start_pass=False)
        return out

    def heads(self, wanted: list[tuple[int, int]]) -> list[np.ndarray[Any, Any]]:
        """The first ``rows`` rows of each ``(block, rows)`` of ``wanted`` (read-only).

        From the window when it holds the block; else, when the source can (plain deflate, or
        a shuffle over one compressor), decoded no further than the head, in parallel, and not
        kept: a sparse row that spills into the next chunk must not make that chunk decode
        whole twice (once for the head, once for its own rows later). Otherwise the rows are
        read through the window.
        """
        whole = self.decoded.ready()
        if whole is not None:
            return [whole[block, :rows] for block, rows in wanted]
        found: list[np.ndarray[Any, Any] | None] = [None] * len(wanted)
        alone = [k for k, (block, _) in enumerate(wanted) if not self.cache.holds(block)]
        if alone and self.source.decodes_heads:
            source = self.source

            def read(k: int) -> np.ndarray[Any, Any] | None:
                return source.head(*wanted[k])

            # (h5py's reads hold its lock: threads would only queue)
            got = run_parallel(read, alone) if source.releases_gil else [read(k) for k in alone]
            for k, head in zip(alone, got, strict=True):
                found[k] = head
        return [
            self._head_rows(*wanted[k]) if head is None else head for k, head in enumerate(found)
        ]

    def _head_rows(self, block: int, rows: int) -> np.ndarray[Any, Any]:
        first = block * self.geometry.block_rows
        idx = np.arange(first, first + rows, dtype=np.int64)
        return self.read(idx, np.empty((rows, *self.geometry.row_shape), self.geometry.dtype))
