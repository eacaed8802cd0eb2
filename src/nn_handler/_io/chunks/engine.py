"""The chunk engine: rows of a chunked dataset served from whole decoded blocks.

Every random sample of a compressed dataset costs its whole chunk, so a chunk is decoded once
and all its rows are served from it while it stays in the window (``window.py``): a batch
claims the blocks it needs, the missing ones are filled in parallel in the decode pool by the
dataset's ``BlockSource`` (``sources.py``: ``pread`` + decode, ``read_direct_chunk`` + decode,
or h5py), and the batch is gathered with one ``np.take`` from the window's arena.

The window holds as many blocks as the file's ``rdcc_nbytes`` allows (HDF5's own chunk cache is
switched off for these datasets, so memory stays within that budget), or, when a sampler
announced its shuffle window (``plan_window``), two windows and a margin: a window of 64 chunks
of 786 KB then holds ~100 MB, not the full budget. A batch wider than the window is served in
parts. Without a window (no budget), or with one row per chunk (large images), blocks are
filled straight into the batch or into scratch and nothing is kept. Sequential reads
(``read_range``) fill whole blocks straight into the caller's buffer and keep only the blocks
at its two edges (when h5py decodes, it reads the whole range in one call).

When blocks are read outside the GIL (``BlockSource.releases_gil``), ``read_ahead`` has the
kernel read the raw bytes of the next rows' blocks (one coalesced request per span) and fills
them in the pool ahead of need; a read of them waits instead of decoding them twice. The window
belongs to one process (``PerProcess``): a forked or spawned worker builds its own.

A dataset whose decoded blocks fit the decoded budget is decoded whole instead (``decoded.py``):
from its first read that needs more than one block (or its ``_PASS_AFTER``-th block read one at
a time; a peek at a row is not worth a copy), every read decodes into memory the node shares
the blocks it needs that no process has decoded yet, waits for those another process decodes,
and gathers from the copy; once every block is decoded, a read is one gather and nothing else.
"""

from __future__ import annotations

import functools
from typing import Any

import h5py
import numpy as np

from ..file.source import H5Source
from ..indices import IndexArray, consecutive_runs, plan_pieces
from ..process import PerProcess
from .decoded import DecodedBlocks, decoded_budget, plan_decoded, source_facts
from .order_cost import RandomOrderCost, random_order_advice
from .pool import decode_threads, run_parallel, submit
from .sources import BlockSource, Geometry
from .window import Claim, Window

__all__ = ["ChunkEngine", "whole_runs"]

_RUN_BLOCK_BYTES = 64 * 1024  # blocks this small are read in runs by sequential reads
_GROUP_BYTES = 64 * 1024**2  # decoded blocks held at once by one batch without a window
# below this, a dataset decodes in moments: each worker keeps its own window rather than hold a
# region per dataset (many small files would use up the process's maps)
_DECODED_MIN_BYTES = 1024**2
_PASS_AFTER = 32  # single blocks a process reads through its window before the whole pass

_Task = tuple[int, np.ndarray[Any, Any]]  # (block, destination of block_rows rows)


class ChunkEngine:
    """Serves rows of one chunked dataset from a window of decoded blocks.

    Args:
        file: The file (its ``rdcc_nbytes`` bounds the window).
        source: Fills one block (and knows the blocks' geometry).
    """

    def __init__(self, file: H5Source, source: BlockSource) -> None:
        self.file = file
        self.source = source
        self.geometry: Geometry = source.geometry
        self.window_blocks: int | None = None
        #: adjacent blocks a sampler shuffles together (its block in chunks): fetched as one run
        self.run_blocks = 1
        self._window: PerProcess[Window] = PerProcess(functools.partial(Window, self.geometry))
        self._decoded = self._plan_decoded()
        self._seen = 0  # blocks this process asked of its window before the whole pass
        self._order = self._watch_order()

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
        return self._window.get()

    def plan_window(self, blocks: int, run: int = 1) -> None:
        """Hold about two windows of ``blocks`` blocks (a sampler's shuffle window), not more.

        ``run``: the sampler keeps runs of this many adjacent blocks together; an object
        store's readahead then fetches every run it touches whole (one request per run).
        """
        self.window_blocks = max(1, int(blocks))
        self.run_blocks = max(1, int(run))
        self.clear()

    def clear(self) -> None:
        """Drop this process's window of decoded blocks (a whole decoded copy stays)."""
        self.cache.clear()

    def random_order_cost(self) -> str | None:
        """What a random order costs beyond a chunk order, and the fixes (None: nothing more).

        Something when a random order decodes a block per row: the dataset is too big for its
        decoded budget and for its window (the case ``RandomOrderCost`` watches).
        """
        order = self._order
        if order is None:
            return None
        g = self.geometry
        return random_order_advice(
            g.path, g.count * g.block_nbytes, order.budget, g.block_rows, g.row_nbytes
        )

    def _plan_decoded(self) -> DecodedBlocks | None:
        """The whole decoded copy, for a local dataset that fits the budget and does not grow.

        Not for a URL: a pass would fetch the whole object before the first batch; remote
        chunks are kept by the node's ``cache_dir`` instead.
        """
        geometry, file = self.geometry, self.file
        if file.may_grow or file.swmr_mode or file.is_remote:
            return None
        if geometry.count * geometry.block_nbytes < _DECODED_MIN_BYTES:
            return None
        identity, facts = file.identity, None
        if identity is not None:
            filters = [list(f) for f in geometry.filters]
            facts = source_facts(identity.as_record(), file.path, geometry.key, filters)
        where = f"dataset {geometry.key!r} of {file.path!r}"
        return plan_decoded(geometry, facts, file.options.decoded_budget_bytes, where)

    def _watch_order(self) -> RandomOrderCost | None:
        """A watch for random orders, for a dataset read through a window too small for it."""
        geometry, file = self.geometry, self.file
        if self._decoded is not None or geometry.block_rows == 1:
            return None
        size = geometry.count * geometry.block_nbytes
        if size < _DECODED_MIN_BYTES or size <= file.options.rdcc_nbytes:
            return None  # the window holds every block: each is decoded once
        if file.may_grow or file.swmr_mode:
            return None
        budget = None if file.is_remote else decoded_budget(file.options.decoded_budget_bytes)
        return RandomOrderCost(geometry, budget)

    def _ready(self) -> np.ndarray[Any, Any] | None:
        """The whole decoded copy, once this process knows it complete; else None."""
        return self._decoded.ready() if self._decoded is not None else None

    def _decoded_in_use(self) -> bool:
        """True when reads go (or will soon go) through the whole decoded copy."""
        return self._decoded is not None and self._decoded.usable

    def _whole(
        self, dset: h5py.Dataset, ids: np.ndarray[Any, Any] | None
    ) -> np.ndarray[Any, Any] | None:
        """Every block, once this process reads through the decoded copy; else None.

        Blocks ``ids`` are decoded in the copy first (by this process or another).

        ``ids``: the blocks (sorted, unique) the read at hand needs; they count towards
        ``_PASS_AFTER``. None: it must not begin the copy (it reads what is complete only).
        """
        decoded = self._decoded
        if decoded is None or not decoded.usable:
            return None
        ready = decoded.ready()
        if ready is not None or ids is None:
            return ready
        self._seen += ids.size
        peek = ids.size == 1 and self._seen < min(_PASS_AFTER, self.geometry.count)
        if peek and not decoded.begun():
            return None  # one row now and then: not worth a copy of the whole (yet)
        blocks = decoded.serve(ids, lambda todo, dest: self._fill_ids(dset, todo, dest))
        if blocks is None:
            self._decoded = None  # no memory for it (said once): the window serves
        return blocks

    def _fill_ids(
        self, dset: h5py.Dataset, ids: np.ndarray[Any, Any], dest: np.ndarray[Any, Any]
    ) -> None:
        """Fill blocks ``ids`` (sorted, unique) into ``dest[ids]``, runs of them at once.

        The kernel reads their raw bytes first (one request per span of neighbours) while the
        pool decodes what has arrived.
        """
        self.source.advise(ids.tolist())
        singles: list[_Task] = []
        for first, count in consecutive_runs(ids):
            part = dest[first : first + count]
            if not self.decodes:  # h5py decodes: one call for all the rows of a run
                lo, hi = (
                    first * self.geometry.block_rows,
                    self.geometry.bounds(first + count - 1)[1],
                )
                dset.read_direct(
                    part.reshape(-1, *self.geometry.row_shape), np.s_[lo:hi], np.s_[: hi - lo]
                )
            elif self._in_runs(count):
                self.source.fill_run(dset, first, part)
            else:
                singles += zip(range(first, first + count), part, strict=True)
        if singles:
            self._fill(dset, singles)

    @property
    def readahead_rows(self) -> int:
        """Rows worth filling ahead of need: one planned window (0 when none was planned)."""
        rows = self.geometry.block_rows
        if self.window_blocks is None or rows == 1 or not self.releases_gil:
            return 0
        if self._capacity() < 2 * self.window_blocks + 2:
            return 0  # the next window would evict blocks this one still needs
        return self.window_blocks * rows

    def read_ahead(self, dset: h5py.Dataset, idx: IndexArray) -> None:
        """Start filling, in the pool, the blocks rows ``idx`` need that are not held yet.

        Returns at once; a later ``read`` of these rows waits for them instead of filling
        them again. Nothing happens unless blocks are read outside the GIL, with a decode
        pool, a window, and free slots.
        """
        capacity = self._capacity()
        if not self.releases_gil or self.geometry.block_rows == 1 or capacity == 0:
            return
        if idx.size == 0 or decode_threads() < 2 or self._decoded_in_use():
            return
        ids = np.unique(idx // self.geometry.block_rows)
        remote = self.source.batches_reads
        if remote and self.run_blocks > 1:  # the rest of each run comes with it: no more trips
            ids = whole_runs(ids, self.run_blocks, self.geometry.count)
        claim = self.cache.claim_ahead(ids, capacity)
        if claim is None:
            return  # the window is busy
        self.source.advise(claim.fresh)  # the kernel reads them while the pool decodes others
        if remote:
            # an object store: one task asks for every chunk at once (concurrent requests)
            many = (dset, claim, list(claim.fresh))
            if submit(self._fill_ahead_many, many) is None:
                self._fill_ahead_many(many)
            return
        for block in claim.fresh:
            task = (dset, claim, block)
            if submit(self._fill_ahead, task) is None:
                self._fill_ahead(task)

    def _fill_ahead(self, task: tuple[h5py.Dataset, Claim, int]) -> None:
        dset, claim, block = task
        try:
            self.source.fill(dset, block, claim.arena[claim.slot(block)])
            ok = True
        except BaseException:
            ok = False  # a later read fills it again and reports what is wrong
        self.cache.settle_ahead(claim, block, ok)

    def _fill_ahead_many(self, task: tuple[h5py.Dataset, Claim, list[int]]) -> None:
        dset, claim, blocks = task
        fills = [(block, claim.arena[claim.slot(block)]) for block in blocks]
        try:  # decoded in this (pool) thread: waiting on the pool from inside it could deadlock
            errors = self.source.fill_many(dset, fills, parallel=False)
        except BaseException:
            errors = [RuntimeError("read failed")] * len(blocks)  # a later read reports it
        for block, error in zip(blocks, errors, strict=True):
            self.cache.settle_ahead(claim, block, error is None)

    def heads(
        self, dset: h5py.Dataset, wanted: list[tuple[int, int]]
    ) -> list[np.ndarray[Any, Any]]:
        """The first ``rows`` rows of each ``(block, rows)`` of ``wanted`` (read-only).

        From the window when it holds the block; else, when the source can (plain deflate, or
        a shuffle over one compressor), decoded no further than the head, in parallel, and not
        kept: a sparse row that spills into the next chunk must not make that chunk decode
        whole twice (once for the head, once for its own rows later). Otherwise the rows are
        read through the window.
        """
        whole = self._ready()
        if whole is not None:
            return [whole[block, :rows] for block, rows in wanted]
        found: list[np.ndarray[Any, Any] | None] = [None] * len(wanted)
        alone = [k for k, (block, _) in enumerate(wanted) if not self.cache.holds(block)]
        if alone and self.source.decodes_heads:
            source = self.source

            def read(k: int) -> np.ndarray[Any, Any] | None:
                return source.head(dset, *wanted[k])

            # (h5py's reads hold its lock: threads would only queue)
            got = run_parallel(read, alone) if source.releases_gil else [read(k) for k in alone]
            for k, head in zip(alone, got, strict=True):
                found[k] = head
        return [
            self._head_rows(dset, *wanted[k]) if head is None else head
            for k, head in enumerate(found)
        ]

    def _head_rows(self, dset: h5py.Dataset, block: int, rows: int) -> np.ndarray[Any, Any]:
        first = block * self.geometry.block_rows
        idx = np.arange(first, first + rows, dtype=np.int64)
        return self.read(dset, idx, np.empty((rows, *self.geometry.row_shape), self.geometry.dtype))

    def read(
        self, dset: h5py.Dataset, idx: IndexArray, out: np.ndarray[Any, Any]
    ) -> np.ndarray[Any, Any]:
        """Fill ``out`` with rows ``idx`` (any order, duplicates allowed)."""
        return self._read(dset, idx, out, start_pass=True)

    def _read(
        self, dset: h5py.Dataset, idx: IndexArray, out: np.ndarray[Any, Any], *, start_pass: bool
    ) -> np.ndarray[Any, Any]:
        if not out.flags.c_contiguous:
            out[...] = self._read(dset, idx, np.empty_like(out, order="C"), start_pass=start_pass)
            return out
        whole = self._ready()
        if whole is not None:  # every epoch after the pass: one gather, nothing else
            flat = whole.reshape(-1, *self.geometry.row_shape)
            np.take(flat, idx, axis=0, out=out, mode="clip")  # idx was checked against length
            return out
        blocks = idx // self.geometry.block_rows
        uniq = np.unique(blocks)
        whole = self._whole(dset, uniq if start_pass else None)
        if whole is not None:  # the blocks of this batch are decoded in the node's copy
            np.take(whole.reshape(-1, *self.geometry.row_shape), idx, axis=0, out=out, mode="clip")
            return out
        capacity = self._capacity()
        if self.geometry.block_rows == 1 or capacity == 0:
            filled = self._read_uncached(dset, idx, blocks, out)
        elif uniq.size <= capacity:
            filled = self._read_group(dset, uniq, idx, blocks, out, None)
        else:
            filled = 0
            for g in range(0, uniq.size, capacity):  # a batch wider than the window: in parts
                group = uniq[g : g + capacity]
                pos = np.flatnonzero(np.isin(blocks, group))
                filled += self._read_group(dset, group, idx[pos], blocks[pos], out, pos)
        if self._order is not None and start_pass:
            self._order.note(idx.size, filled)
        return out

    def read_runs(
        self,
        dset: h5py.Dataset,
        starts: IndexArray,
        stops: IndexArray,
        dst: IndexArray,
        out: np.ndarray[Any, Any],
    ) -> bool:
        """Copy rows ``[starts[i], stops[i])`` (non-empty) to ``out[dst[i]:]`` from whole blocks.

        Each block is decoded once, in parallel, and kept, as ``read`` would; the runs are
        copied out of the window while the blocks are claimed, in groups the window holds
        (a sparse batch: thousands of row pieces out of ~60 chunks, straight to their places in
        the batch, in any order). False where the window does not serve them (no window, one
        row per block, h5py decodes): the caller reads them otherwise (nothing, or part, copied).
        """
        rows = self.geometry.block_rows
        block, lo, hi, to, _ = plan_pieces(starts, stops, dst, rows)
        ids = np.unique(block)
        whole = self._whole(dset, ids) if ids.size else None
        if whole is not None:
            _copy_runs(whole.reshape(-1, *self.geometry.row_shape), starts, stops, dst, out)
            return True
        capacity = self._capacity()
        if rows == 1 or capacity == 0 or not self.decodes:
            return False
        order = np.argsort(block, kind="stable")  # runs may come in any order
        block, lo, hi, to = block[order], lo[order], hi[order], to[order]
        per_group = max(1, min(capacity, _GROUP_BYTES // max(1, self.block_nbytes)))
        for g in range(0, ids.size, per_group):
            group = ids[g : g + per_group]
            a, b = np.searchsorted(block, [group[0], group[-1] + 1])
            pieces = (block[a:b], lo[a:b], hi[a:b], to[a:b])
            if not self._copy_group(dset, group, capacity, pieces, out):
                return False  # another thread's fill failed: the caller reads them again
        return True

    def _copy_group(
        self,
        dset: h5py.Dataset,
        group: np.ndarray[Any, Any],
        capacity: int,
        pieces: tuple[IndexArray, IndexArray, IndexArray, IndexArray],
        out: np.ndarray[Any, Any],
    ) -> bool:
        """Claim blocks ``group``, fill the missing ones, copy ``pieces`` out; False: not filled."""
        window = self.cache
        claim = window.claim(group, capacity)
        try:
            extra = self._fill_claim(dset, window, claim)
            if claim.awaited and not window.wait(claim):
                return False
            slots = dict(zip(claim.ids.tolist(), claim.slots.tolist(), strict=True))
            rows = self.geometry.block_rows
            for c, p, q, t in zip(*(x.tolist() for x in pieces), strict=True):
                s = slots[c]
                src = extra[c] if s < 0 else claim.arena[s]
                out[t : t + q - p] = src[p - c * rows : q - c * rows]
            return True
        finally:
            window.release(claim)

    def read_range(
        self, dset: h5py.Dataset, start: int, stop: int, out: np.ndarray[Any, Any]
    ) -> np.ndarray[Any, Any]:
        """Fill ``out`` with rows ``[start, stop)``: whole blocks are filled straight into it."""
        if not out.flags.c_contiguous:  # (h5py's read_direct refuses such an array too)
            out[...] = self.read_range(dset, start, stop, np.empty_like(out, order="C"))
            return out
        decoded = self._ready()
        if decoded is not None:  # (ranges never start the whole pass: a rank's shard, say)
            out[...] = decoded.reshape(-1, *self.geometry.row_shape)[start:stop]
            return out
        if not self.decodes:  # h5py decodes: it reads a range best in one call
            dset.read_direct(out, np.s_[start:stop])
            return out
        rows = self.geometry.block_rows
        first, last = -(-start // rows), stop // rows  # blocks wholly inside [start, stop)
        whole = range(first, last) if first < last else range(0)
        if self._in_runs(len(whole)):
            self.source.fill_run(dset, first, out[first * rows - start : last * rows - start])
        else:
            self._fill(dset, [(b, out[b * rows - start : (b + 1) * rows - start]) for b in whole])
        spans = [(start, stop)] if not whole else [(start, first * rows), (last * rows, stop)]
        edge = np.concatenate([np.arange(lo, hi, dtype=np.int64) for lo, hi in spans])
        if edge.size:
            part = np.empty((edge.size, *self.geometry.row_shape), self.geometry.dtype)
            out[edge - start] = self._read(dset, edge, part, start_pass=False)
        return out

    def _in_runs(self, blocks: int) -> bool:
        """True when a sequential read of ``blocks`` whole blocks goes through ``fill_run``.

        Small chunks of a local file: a task, a read and a pipeline walk per chunk would cost
        more than decoding one (large chunks read best one per task, reads in parallel).
        """
        source = self.source
        small = self.block_nbytes <= _RUN_BLOCK_BYTES
        return blocks > 1 and small and source.reads_runs

    def _read_group(
        self,
        dset: h5py.Dataset,
        ids: np.ndarray[Any, Any],
        idx: IndexArray,
        blocks: np.ndarray[Any, Any],
        out: np.ndarray[Any, Any],
        pos: np.ndarray[Any, Any] | None,
    ) -> int:
        """Gather rows ``idx`` of blocks ``ids`` through the window; how many blocks it filled."""
        window = self.cache
        claim = window.claim(ids, self._capacity())
        retry, filled = False, 0
        try:
            extra = self._fill_claim(dset, window, claim)
            filled = len(claim.fresh) + len(extra)
            if claim.awaited and not window.wait(claim):
                retry = True  # another thread's fill failed: claim and fill them here
                return filled
            rows = self.geometry.block_rows
            where = np.searchsorted(ids, blocks)
            flat = claim.arena.reshape(-1, *self.geometry.row_shape)
            at = claim.slots[where] * rows + (idx - blocks * rows)
            outside = claim.slots[where] < 0
            if pos is None and not outside.any():
                np.take(flat, at, axis=0, out=out, mode="clip")  # "raise" would copy twice
            else:
                self._gather_mixed(flat, at, outside, idx, blocks, extra, out, pos)
        finally:
            window.release(claim)
            if retry:
                filled += self._read_group(dset, ids, idx, blocks, out, pos)
        return filled

    def _fill_claim(
        self, dset: h5py.Dataset, window: Window, claim: Claim
    ) -> dict[int, np.ndarray[Any, Any]]:
        """Fill the claim's fresh blocks into their slots, others (no slot free) into scratch."""
        extra = {
            int(b): self.geometry.empty_block()
            for b, s in zip(claim.ids.tolist(), claim.slots.tolist(), strict=True)
            if s < 0
        }
        tasks = [(b, claim.arena[claim.slot(b)]) for b in claim.fresh] + list(extra.items())
        try:
            self._fill(dset, tasks)
        except BaseException:
            window.settle(claim, ok=False)
            raise
        window.settle(claim, ok=True)
        return extra

    def _gather_mixed(
        self,
        flat: np.ndarray[Any, Any],
        at: np.ndarray[Any, Any],
        outside: np.ndarray[Any, Any],
        idx: IndexArray,
        blocks: np.ndarray[Any, Any],
        extra: dict[int, np.ndarray[Any, Any]],
        out: np.ndarray[Any, Any],
        pos: np.ndarray[Any, Any] | None,
    ) -> None:
        where = np.arange(idx.size) if pos is None else pos
        inside = ~outside
        out[where[inside]] = flat[at[inside]]
        for k in np.flatnonzero(outside).tolist():
            block = int(blocks[k])
            out[where[k]] = extra[block][int(idx[k]) - block * self.geometry.block_rows]

    def _read_uncached(
        self,
        dset: h5py.Dataset,
        idx: IndexArray,
        blocks: np.ndarray[Any, Any],
        out: np.ndarray[Any, Any],
    ) -> int:
        """No window (one row per block, or no budget): fill into the batch or scratch.

        Returns how many blocks it filled (every one it needed).
        """
        rows = self.geometry.block_rows
        if rows == 1:
            uniq, first = np.unique(idx, return_index=True)
            tasks = [(int(b), out[int(p) : int(p) + 1]) for b, p in zip(uniq, first, strict=True)]
            self._fill(dset, tasks)
            if uniq.size < idx.size:  # duplicates: copy from the first occurrence
                out[...] = out[first[np.searchsorted(uniq, idx)]]
            return int(uniq.size)
        per_group = max(1, _GROUP_BYTES // max(1, self.block_nbytes))
        uniq = np.unique(blocks)
        for g in range(0, uniq.size, per_group):
            arrays = {int(b): self.geometry.empty_block() for b in uniq[g : g + per_group]}
            self._fill(dset, list(arrays.items()))
            for b, arr in arrays.items():
                pos = np.flatnonzero(blocks == b)
                out[pos] = arr[idx[pos] - b * rows]
        return int(uniq.size)

    def _fill(self, dset: h5py.Dataset, tasks: list[_Task]) -> None:
        """Fill each task's block: in the decode pool when we decode, else in this thread."""
        if not self.source.decodes:  # h5py decodes under its lock: threads would only queue
            for block, dest in tasks:
                self.source.fill(dset, block, dest)
            return
        if self.source.batches_reads and len(tasks) > 1:
            errors = self.source.fill_many(dset, tasks)  # one request batch, then decodes
            first = next((e for e in errors if e is not None), None)
            if first is not None:
                raise first
            return
        fill = self.source.fill
        run_parallel(lambda task: fill(dset, *task), tasks)

    def _capacity(self) -> int:
        budget = self.file.options.rdcc_nbytes // max(1, self.block_nbytes)
        if self.window_blocks is not None:
            budget = min(budget, 2 * self.window_blocks + 2)
        return int(min(budget, self.geometry.count))


def _copy_runs(
    flat: np.ndarray[Any, Any],
    starts: IndexArray,
    stops: IndexArray,
    dst: IndexArray,
    out: np.ndarray[Any, Any],
) -> None:
    for s, e, t in zip(starts.tolist(), stops.tolist(), dst.tolist(), strict=True):
        out[t : t + e - s] = flat[s:e]


def whole_runs(ids: np.ndarray[Any, Any], run: int, count: int) -> np.ndarray[Any, Any]:
    """Every block of the runs of ``run`` blocks (aligned at multiples of it) that ``ids`` touch."""
    starts = np.unique(ids // run) * run
    every = (starts[:, None] + np.arange(run)).ravel()
    return every[every < count]
