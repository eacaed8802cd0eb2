"""Rows of a compressed dataset whose chunks hold whole rows: decoded chunks, one gather.

What the profile of ``ChunkBlocks`` showed (W3, 2000 float32 per row, chunks of 256 rows):
inflate 31 %, the per-block copy loop that assembles a batch 20 %, copying each inflated
``bytearray`` into its block 15 %, and waiting on h5py's lock for raw chunks. This reader:

* reads raw chunks with ``pread`` from the chunk table (``_raw_chunks``): no h5py, no lock;
* decodes them (``codecs``: gzip, shuffle, Fletcher-32, blosc, lz4, bitshuffle, zstd,
  blosc2) in the decode pool straight into a *slot* of one preallocated array, the window;
* serves a batch with a single ``np.take`` from that array (row ``r`` of the chunk in slot
  ``s`` is row ``s * chunk_rows + r``), instead of one copy per chunk;
* with one row per chunk (large images), decodes straight into the batch and keeps nothing.

Slots are reused least recently used first. Their number is the cache budget (``rdcc_nbytes``)
divided by a chunk's size, or, when a sampler announced its shuffle window (``plan_window``),
two windows and a margin: a window of 64 chunks of 786 KB then holds ~100 MB, not the full
budget. Memory is only touched as slots fill.

Several threads may read at once (``batched_loader(worker_mode="thread")``): a batch pins its
slots while it decodes and gathers; a chunk another thread is decoding is waited for, not
decoded twice. A chunk that does not decode here (a bad checksum, a corrupt stream) is read
through h5py instead, which returns its bytes or raises HDF5's own error.
"""

from __future__ import annotations

import functools
import math
import threading
from typing import Any

import h5py
import numpy as np

from ..errors import CorruptFileError
from ..file.source import H5Source
from ..indices import IndexArray
from ..process import PerProcess
from .codecs import DEFLATE, ChunkDecodeError, ChunkPipeline, UnsupportedChunkError, pipeline_for
from .pool import decode_threads, run_parallel, submit
from .table import ChunkTable, read_direct_chunk

__all__ = ["WindowBlocks", "window_reader"]

_GROUP_BYTES = 64 * 1024**2  # decoded chunks held at once by one batch without a cache
_FREE, _LOADING, _READY = 0, 1, 2
_AHEAD = 1 << 40  # recency bonus of chunks decoded ahead of their first read


class _Slots:
    """The window's bookkeeping: which chunk is in which slot, pins, recency, readiness."""

    def __init__(self, capacity: int, blocks: int) -> None:
        self.capacity = capacity
        self.slot_of = np.full(blocks, -1, dtype=np.int64)
        self.block_in = np.full(capacity, -1, dtype=np.int64)
        self.pins = np.zeros(capacity, dtype=np.int64)
        self.used = np.zeros(capacity, dtype=np.int64)  # tick of the last use (LRU)
        self.state = np.zeros(capacity, dtype=np.int8)
        self.tick = 0

    def claim(
        self, ids: np.ndarray[Any, Any], touch: bool = True
    ) -> tuple[np.ndarray[Any, Any], list[int], list[int]]:
        """Pin a slot for each chunk ``ids``: (slots, chunks to decode now, chunks to await).

        A slot of -1 means no slot was free: the caller decodes that chunk outside the window.
        ``touch=False`` (readahead) leaves the recency of chunks already held as it is.
        """
        self.tick += 1
        slots = self.slot_of[ids].copy()
        held = slots >= 0
        self.pins[slots[held]] += 1
        if touch:
            self.used[slots[held]] = self.tick
        awaited = ids[held][self.state[slots[held]] == _LOADING].tolist()
        missing = np.flatnonzero(~held)
        free = np.flatnonzero(self.pins == 0)
        free = free[np.argsort(self.used[free], kind="stable")][: missing.size]
        for pos, slot in zip(missing.tolist(), free.tolist(), strict=False):
            old = int(self.block_in[slot])
            if old >= 0:
                self.slot_of[old] = -1
            block = int(ids[pos])
            self.block_in[slot], self.slot_of[block] = block, slot
            self.pins[slot], self.used[slot], self.state[slot] = 1, self.tick, _LOADING
            slots[pos] = slot
        fresh = ids[missing[: free.size]].tolist()
        return slots, fresh, awaited

    def release(self, slots: np.ndarray[Any, Any]) -> None:
        held = slots[slots >= 0]
        np.subtract.at(self.pins, held, 1)

    def forget(self, block: int) -> None:
        slot = int(self.slot_of[block])
        if slot >= 0:
            self.slot_of[block], self.block_in[slot], self.state[slot] = -1, -1, _FREE

    @property
    def filled(self) -> int:
        return int(np.count_nonzero(self.state == _READY))


class _WindowCache:
    """The per-process window of decoded chunks (``len`` / ``nbytes`` / ``clear`` like a cache)."""

    def __init__(self, block_nbytes: int) -> None:
        self.block_nbytes = block_nbytes
        self.lock = threading.Condition()
        self.slots: _Slots | None = None
        self.arena: np.ndarray[Any, Any] | None = None

    def __len__(self) -> int:
        return 0 if self.slots is None else self.slots.filled

    @property
    def nbytes(self) -> int:
        """Bytes of decoded chunks held now."""
        return len(self) * self.block_nbytes

    def clear(self) -> None:
        with self.lock:
            self.slots, self.arena = None, None


class WindowBlocks:
    """Serves rows of one chunked, filtered dataset from a window of decoded chunks.

    Args:
        source: The file (its ``rdcc_nbytes`` bounds the window).
        shape: The dataset's shape.
        dtype: The dataset's dtype.
        table: Where each chunk's raw bytes are.
        pipeline: How to decode them.
    """

    def __init__(
        self,
        source: H5Source,
        shape: tuple[int, ...],
        dtype: np.dtype[Any],
        table: ChunkTable,
        pipeline: ChunkPipeline,
    ) -> None:
        self.source = source
        self.codec = pipeline
        self.table = table
        self.dtype = dtype
        self.length = shape[0]
        self.row_shape = shape[1:]
        self.block_rows = int(
            pipeline.chunk_nbytes // max(1, dtype.itemsize * math.prod(shape[1:]))
        )
        self.block_nbytes = pipeline.chunk_nbytes
        self.num_blocks = -(-self.length // self.block_rows)
        self.window_blocks: int | None = None
        # the window (its lock, slots and arena) belongs to one process: see _io/process.py
        self._cache: PerProcess[_WindowCache] = PerProcess(
            functools.partial(_WindowCache, self.block_nbytes)
        )

    @property
    def cache(self) -> _WindowCache:
        """This process's window of decoded chunks."""
        return self._cache.get()

    def plan_window(self, blocks: int) -> None:
        """Hold about two windows of ``blocks`` chunks (a sampler's shuffle window), not more."""
        self.window_blocks = max(1, int(blocks))
        self.cache.clear()

    @property
    def readahead_rows(self) -> int:
        """Rows worth decoding ahead of need: one planned window (0 when none was planned)."""
        if self.window_blocks is None or self.block_rows == 1:
            return 0
        if self._capacity() < 2 * self.window_blocks + 2:
            return 0  # the next window would evict chunks this one still needs
        return self.window_blocks * self.block_rows

    def prefetch(self, idx: IndexArray) -> None:
        """Start decoding, in the pool, the chunks rows ``idx`` need that are not decoded yet.

        Returns at once; a later ``read`` of these rows waits for them instead of decoding
        them again. Nothing happens without a decode pool, a window, or free slots.
        """
        if self.block_rows == 1 or self._capacity() == 0 or idx.size == 0 or decode_threads() < 2:
            return
        ids = np.unique(idx // self.block_rows)
        with self.cache.lock:
            arena, state = self._arena()
            if np.count_nonzero(state.pins == 0) < ids.size + ids.size // 2:
                return  # the window is busy: do not evict what running batches need
            slots, fresh, _ = state.claim(ids, touch=False)
            state.release(slots[~np.isin(ids, fresh)])  # only chunks being decoded stay pinned
            # decoded ahead, not read yet: evict these last (a read resets their recency)
            state.used[slots[np.isin(ids, fresh)]] = state.tick + _AHEAD
        for block in fresh:
            slot = int(state.slot_of[block])
            if submit(self._prefetch_one, (block, slot, arena, state)) is None:
                self._prefetch_one((block, slot, arena, state))

    def _prefetch_one(self, task: tuple[int, int, np.ndarray[Any, Any], _Slots]) -> None:
        block, slot, arena, state = task
        try:
            ok = self._decode_task((block, arena[slot]))
        except BaseException:
            ok = False
        with self.cache.lock:
            if state.block_in[slot] == block:
                if ok:
                    state.state[slot] = _READY
                else:  # a later read decodes it again and reports what is wrong
                    state.forget(block)
            state.pins[slot] -= 1
            self.cache.lock.notify_all()

    # -- batches ----------------------------------------------------------------------------

    def head(self, dset: h5py.Dataset, block: int, rows: int) -> np.ndarray[Any, Any]:
        """The first ``rows`` rows of ``block`` (read-only).

        For plain deflate chunks, inflated only that far and not kept in the window: a sparse
        row that spills into the next chunk must not make that chunk decode twice (once for the
        head, once for its own rows later). Other pipelines read the rows through the window.
        """
        raw, mask = (None, 1) if not self._plain_deflate else self.table.read(block)
        if raw is not None and mask == 0:
            try:
                head = self.codec.decode_head(raw, rows * (self.block_nbytes // self.block_rows))
            except ChunkDecodeError:
                head = None  # corrupt: the window path decodes it whole and names the chunk
            if head is not None:
                return head.view(self.dtype).reshape(rows, *self.row_shape)
        first = block * self.block_rows
        idx = np.arange(first, first + rows, dtype=np.int64)
        return self.read(dset, idx, np.empty((rows, *self.row_shape), self.dtype))

    @property
    def _plain_deflate(self) -> bool:
        return tuple(step.code for step in self.codec.steps) == (DEFLATE,)

    def read(
        self, dset: h5py.Dataset, idx: IndexArray, out: np.ndarray[Any, Any]
    ) -> np.ndarray[Any, Any]:
        """Fill ``out`` with rows ``idx`` (any order, duplicates allowed)."""
        if not out.flags.c_contiguous:
            out[...] = self.read(dset, idx, np.empty_like(out, order="C"))
            return out
        blocks = idx // self.block_rows
        capacity = self._capacity()
        if self.block_rows == 1 or capacity == 0:
            return self._read_uncached(dset, idx, blocks, out)
        uniq = np.unique(blocks)
        if uniq.size <= capacity:
            self._read_group(dset, uniq, idx, blocks, out, None)
            return out
        for g in range(0, uniq.size, capacity):  # a batch wider than the window: in parts
            group = uniq[g : g + capacity]
            pos = np.flatnonzero(np.isin(blocks, group))
            self._read_group(dset, group, idx[pos], blocks[pos], out, pos)
        return out

    def _read_group(
        self,
        dset: h5py.Dataset,
        ids: np.ndarray[Any, Any],
        idx: IndexArray,
        blocks: np.ndarray[Any, Any],
        out: np.ndarray[Any, Any],
        pos: np.ndarray[Any, Any] | None,
    ) -> None:
        cache = self.cache
        with cache.lock:
            arena, slots_state = self._arena()
            slots, fresh, awaited = slots_state.claim(ids)
        retry = False
        try:
            extra = self._fill(dset, arena, slots, ids, fresh)
            if awaited and not self._await(slots_state, slots[np.isin(ids, awaited)]):
                retry = True  # another thread's decode failed: claim and decode them here
                return
            where = np.searchsorted(ids, blocks)
            rows = slots[where] * self.block_rows + (idx - blocks * self.block_rows)
            flat = arena.reshape(-1, *self.row_shape)
            outside = slots[where] < 0
            if pos is None and not outside.any():
                np.take(flat, rows, axis=0, out=out, mode="clip")  # "raise" would copy twice
            else:
                self._gather_mixed(flat, rows, outside, idx, blocks, extra, out, pos)
        finally:
            with cache.lock:
                slots_state.release(slots)
            if retry:
                self._read_group(dset, ids, idx, blocks, out, pos)

    def _fill(
        self,
        dset: h5py.Dataset,
        arena: np.ndarray[Any, Any],
        slots: np.ndarray[Any, Any],
        ids: np.ndarray[Any, Any],
        fresh: list[int],
    ) -> dict[int, np.ndarray[Any, Any]]:
        """Decode ``fresh`` chunks into their slots, others (no slot free) into new arrays."""
        slot_of = dict(zip(ids.tolist(), slots.tolist(), strict=True))
        extra = {
            int(b): np.empty((self.block_rows, *self.row_shape), self.dtype)
            for b, s in slot_of.items()
            if s < 0
        }
        tasks = [(b, arena[slot_of[b]]) for b in fresh] + list(extra.items())
        failed: list[int] = []
        try:
            for block, ok in zip(
                (b for b, _ in tasks), run_parallel(self._decode_task, tasks), strict=True
            ):
                if not ok:
                    failed.append(block)
            for block in failed:
                dest = extra[block] if block in extra else arena[slot_of[block]]
                self._read_h5py(dset, block, dest)
        except BaseException:
            with self.cache.lock:
                for block in fresh:
                    assert self.cache.slots is not None
                    self.cache.slots.forget(block)
                self.cache.lock.notify_all()
            raise
        with self.cache.lock:
            state = self.cache.slots
            if state is not None:
                for block in fresh:
                    slot = slot_of[block]
                    if state.block_in[slot] == block:
                        state.state[slot] = _READY
            self.cache.lock.notify_all()
        return extra

    def _await(self, state: _Slots, slots: np.ndarray[Any, Any]) -> bool:
        """Wait for chunks other threads are decoding; False when one of them failed."""
        with self.cache.lock:
            while np.any(state.state[slots] == _LOADING):
                self.cache.lock.wait(timeout=1.0)
            return bool(np.all(state.state[slots] == _READY))

    def _gather_mixed(
        self,
        flat: np.ndarray[Any, Any],
        rows: np.ndarray[Any, Any],
        outside: np.ndarray[Any, Any],
        idx: IndexArray,
        blocks: np.ndarray[Any, Any],
        extra: dict[int, np.ndarray[Any, Any]],
        out: np.ndarray[Any, Any],
        pos: np.ndarray[Any, Any] | None,
    ) -> None:
        where = np.arange(idx.size) if pos is None else pos
        inside = ~outside
        out[where[inside]] = flat[rows[inside]]
        for k in np.flatnonzero(outside).tolist():
            block = int(blocks[k])
            out[where[k]] = extra[block][int(idx[k]) - block * self.block_rows]

    def _read_uncached(
        self,
        dset: h5py.Dataset,
        idx: IndexArray,
        blocks: np.ndarray[Any, Any],
        out: np.ndarray[Any, Any],
    ) -> np.ndarray[Any, Any]:
        """No window (one row per chunk, or no budget): decode into the batch or scratch."""
        if self.block_rows == 1:
            uniq, first = np.unique(idx, return_index=True)
            tasks = [(int(b), out[int(p) : int(p) + 1]) for b, p in zip(uniq, first, strict=True)]
            self._decode_all(dset, tasks)
            if uniq.size < idx.size:  # duplicates: copy from the first occurrence
                src = first[np.searchsorted(uniq, idx)]
                out[...] = out[src]
            return out
        per_group = max(1, _GROUP_BYTES // max(1, self.block_nbytes))
        uniq = np.unique(blocks)
        for g in range(0, uniq.size, per_group):
            group = uniq[g : g + per_group]
            arrays = {
                int(b): np.empty((self.block_rows, *self.row_shape), self.dtype) for b in group
            }
            self._decode_all(dset, list(arrays.items()))
            for b, arr in arrays.items():
                pos = np.flatnonzero(blocks == b)
                out[pos] = arr[idx[pos] - b * self.block_rows]
        return out

    # -- ranges -----------------------------------------------------------------------------

    def read_range(
        self, dset: h5py.Dataset, start: int, stop: int, out: np.ndarray[Any, Any]
    ) -> np.ndarray[Any, Any]:
        """Fill ``out`` with rows ``[start, stop)``: whole chunks decode straight into it."""
        if not out.flags.c_contiguous:
            out[...] = self.read_range(dset, start, stop, np.empty_like(out, order="C"))
            return out
        rows = self.block_rows
        first, last = -(-start // rows), stop // rows  # chunks wholly inside [start, stop)
        whole = range(first, last) if first < last else range(0)
        self._decode_all(dset, [(b, out[b * rows - start : (b + 1) * rows - start]) for b in whole])
        spans = [(start, stop)] if not whole else [(start, first * rows), (last * rows, stop)]
        edge = np.concatenate([np.arange(lo, hi, dtype=np.int64) for lo, hi in spans])
        if edge.size:
            part = np.empty((edge.size, *self.row_shape), self.dtype)
            out[edge - start] = self.read(dset, edge, part)
        return out

    # -- decoding ---------------------------------------------------------------------------

    def _decode_task(self, task: tuple[int, np.ndarray[Any, Any]]) -> bool:
        block, dest = task
        raw, mask = self.table.read(block)
        try:
            self.codec.decode_into(raw, mask, dest.reshape(-1).view(np.uint8))
        except UnsupportedChunkError:
            return False  # a filter variant we do not decode: h5py reads it
        except ChunkDecodeError as exc:
            # never handed to HDF5 as well: its filters may return uninitialised memory
            at = (block * self.block_rows, *(0 for _ in self.row_shape))
            raise CorruptFileError(
                f"dataset {self.table.key!r} of {self.table.path!r}: the chunk at {at} is "
                f"corrupt ({exc}); the file is damaged",
                self.table.path,
            ) from exc
        return True

    def _decode_all(
        self, dset: h5py.Dataset, tasks: list[tuple[int, np.ndarray[Any, Any]]]
    ) -> None:
        results = run_parallel(self._decode_task, tasks)
        for (block, dest), ok in zip(tasks, results, strict=True):
            if not ok:
                self._read_h5py(dset, block, dest)

    def _read_h5py(self, dset: h5py.Dataset, block: int, dest: np.ndarray[Any, Any]) -> None:
        lo = block * self.block_rows
        hi = min(lo + self.block_rows, self.length)
        dset.read_direct(dest, np.s_[lo:hi], np.s_[: hi - lo])

    def _capacity(self) -> int:
        budget = self.source.options.rdcc_nbytes // max(1, self.block_nbytes)
        if self.window_blocks is not None:
            budget = min(budget, 2 * self.window_blocks + 2)
        return int(min(budget, self.num_blocks))

    def _arena(self) -> tuple[np.ndarray[Any, Any], _Slots]:
        """This process's window, (re)built when missing, inherited, or resized."""
        cache, capacity = self.cache, self._capacity()
        if cache.slots is None or cache.slots.capacity != capacity:
            cache.slots = _Slots(capacity, self.num_blocks)
            cache.arena = np.empty((capacity, self.block_rows, *self.row_shape), self.dtype)
        assert cache.arena is not None
        return cache.arena, cache.slots


def window_reader(dset: h5py.Dataset, source: H5Source) -> WindowBlocks | None:
    """A ``WindowBlocks`` for ``dset``, or None (the caller keeps its other readers).

    Needs chunks that hold whole rows, in a file on disk, with filters ``codecs`` decodes.
    """
    if not source.is_path or dset.file.driver != "sec2" or dset.chunks is None:
        return None
    if dset.is_virtual or dset.dtype.hasobject or dset.shape[0] == 0:
        return None
    if dset.dtype.itemsize * math.prod(dset.shape[1:]) == 0:
        return None
    pipeline = pipeline_for(dset)
    if pipeline is None:
        return None
    table = ChunkTable.build(dset, source.path)
    if table is None or not _hdf5_agrees(dset, table):
        return None
    shape = tuple(int(s) for s in dset.shape)
    return WindowBlocks(source, shape, dset.dtype, table, pipeline)


def _hdf5_agrees(dset: h5py.Dataset, table: ChunkTable) -> bool:
    """True when HDF5 serves the last chunk of the file with the bytes we would read.

    ``pread`` reads whatever the table says; HDF5 also checks addresses against the end of the
    file its superblock records. A damaged superblock makes HDF5 refuse chunks that we would
    happily serve, so, as the memory map is checked against h5py, the chunk that lies furthest
    into the file is read both ways once; on any disagreement the other readers (HDF5's reads,
    with HDF5's errors) take over.
    """
    block = int(np.argmax(table.offsets + table.sizes))
    coords = (block * int(dset.chunks[0]), *(0 for _ in dset.shape[1:]))
    try:
        mask, raw = read_direct_chunk(dset.id, coords)
        ours, our_mask = table.read(block)
        return bool(mask == our_mask and ours.tobytes() == bytes(raw))
    except (OSError, RuntimeError, ValueError):
        return False
    finally:
        table.close()  # construction leaves no descriptor open: the reading process opens one
