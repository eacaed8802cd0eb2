"""Rows of a chunked dataset, read as whole decoded chunks kept in a per-process LRU.

A *block* is one chunk's worth of rows along axis 0 (every chunk whose first index is
``b * chunk_rows``; more than one when chunks split rows). With a codec (gzip, shuffle,
Fletcher-32), raw chunks come from ``read_direct_chunk`` (h5py holds its lock for the copy only)
and are decoded by ``codecs`` in threads straight into their place: a block array, or the
caller's buffer for sequential reads. Without one (other filters: lzf, blosc, zstd, …), h5py
decodes each block in one call, under its lock.

Decoded blocks are kept in an LRU whose byte budget is the file's ``rdcc_nbytes`` (HDF5's own
chunk cache is switched off for these datasets, so memory stays within that budget): consecutive
batches that touch the same chunk decode it once. A chunk never written is read through h5py
(which serves the fill value). A chunk that does not decode to exactly one chunk of bytes, or
whose Fletcher-32 sum does not match, raises ``CorruptFileError`` naming the file, the dataset
and the chunk: it is never handed to HDF5 as well (whose filters inflate a forged stream a
second time, and return uninitialised memory for a short one).
"""

from __future__ import annotations

import itertools
import math
import threading
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

import h5py
import numpy as np

from ..errors import CorruptFileError
from ..file.source import H5Source
from ..indices import IndexArray
from ..process import PerProcess
from .codecs import ChunkDecodeError, ChunkPipeline, UnsupportedChunkError
from .pool import run_parallel
from .table import chunk_info_at, read_direct_chunk

__all__ = ["BlockCache", "ChunkBlocks"]

_GROUP_BYTES = 64 * 1024**2  # decoded blocks held at once by one batch, cache aside

# (chunk offset, destination view of exactly the chunk's valid region)
_Task = tuple[tuple[int, ...], np.ndarray[Any, Any]]


class _Entries:
    """One process's decoded blocks, least recently used first."""

    def __init__(self) -> None:
        self.blocks: OrderedDict[int, np.ndarray[Any, Any]] = OrderedDict()
        self.nbytes = 0
        self.lock = threading.Lock()


class BlockCache:
    """A per-process LRU of decoded blocks, bounded in bytes by a budget read on each insert."""

    def __init__(self) -> None:
        self._local: PerProcess[_Entries] = PerProcess(_Entries)

    @property
    def nbytes(self) -> int:
        """Bytes held now."""
        return self._local.get().nbytes

    def __len__(self) -> int:
        return len(self._local.get().blocks)

    def get(self, key: int) -> np.ndarray[Any, Any] | None:
        local = self._local.get()
        with local.lock:
            found = local.blocks.get(key)
            if found is not None:
                local.blocks.move_to_end(key)
            return found

    def put(self, key: int, block: np.ndarray[Any, Any], budget: int) -> None:
        if block.nbytes > budget:
            return  # would evict everything and still not fit
        local = self._local.get()
        with local.lock:
            old = local.blocks.pop(key, None)
            local.nbytes -= 0 if old is None else old.nbytes
            while local.blocks and local.nbytes + block.nbytes > budget:
                local.nbytes -= local.blocks.popitem(last=False)[1].nbytes
            local.blocks[key] = block
            local.nbytes += block.nbytes

    def clear(self) -> None:
        self._local.pop()


class ChunkBlocks:
    """Serves rows of one chunked dataset from whole decoded blocks (see module docstring).

    Args:
        source: The file (its ``rdcc_nbytes`` is the LRU budget).
        shape: The dataset's shape.
        dtype: The dataset's dtype.
        chunks: The dataset's chunk shape.
        codec: How to decode one raw chunk in threads, or None to let h5py decode blocks.
        key: The dataset's path, for error messages.
    """

    def __init__(
        self,
        source: H5Source,
        shape: tuple[int, ...],
        dtype: np.dtype[Any],
        chunks: tuple[int, ...],
        codec: ChunkPipeline | None,
        key: str = "",
    ) -> None:
        self.source = source
        self.codec = codec
        self.key = key
        self.dtype = dtype
        self.length = shape[0]
        self.row_shape = shape[1:]
        self.block_rows = chunks[0]
        self.block_nbytes = self.block_rows * math.prod(self.row_shape) * dtype.itemsize
        self.cache = BlockCache()
        self._tiles = _tiles(self.row_shape, chunks[1:])

    def read(
        self, dset: h5py.Dataset, idx: IndexArray, out: np.ndarray[Any, Any]
    ) -> np.ndarray[Any, Any]:
        """Fill ``out`` with rows ``idx`` (any order, duplicates allowed)."""
        blocks = idx // self.block_rows
        order = np.argsort(blocks, kind="stable")
        uniq, starts = np.unique(blocks[order], return_index=True)
        ends = np.append(starts[1:], idx.size)
        per_group = max(1, _GROUP_BYTES // max(1, self.block_nbytes))
        for g in range(0, uniq.size, per_group):
            ids = uniq[g : g + per_group].tolist()
            for j, block in enumerate(self._blocks(dset, ids)):
                pos = order[starts[g + j] : ends[g + j]]
                out[pos] = block[idx[pos] - ids[j] * self.block_rows]
        return out

    def read_range(
        self, dset: h5py.Dataset, start: int, stop: int, out: np.ndarray[Any, Any]
    ) -> np.ndarray[Any, Any]:
        """Fill ``out`` with rows ``[start, stop)``: whole blocks decode straight into it."""
        if self.codec is None:  # HDF5 reads a range best itself
            dset.read_direct(out, np.s_[start:stop])
            return out
        first, last = start // self.block_rows, (stop - 1) // self.block_rows
        inner = [b for b in (first, last) if not self._inside(b, start, stop)]
        whole = (b for b in range(first, last + 1) if b not in inner)
        tasks = (
            task
            for b in whole
            for task in self._tasks(b, out[self._start(b) - start : self._stop(b) - start])
        )
        self._run(dset, tasks)
        edges = sorted(set(inner))
        for b, block in zip(edges, self._blocks(dset, edges), strict=True):
            lo, hi = max(start, self._start(b)), min(stop, self._stop(b))
            out[lo - start : hi - start] = block[lo - self._start(b) : hi - self._start(b)]
        return out

    def blocks(self, dset: h5py.Dataset, ids: list[int]) -> list[np.ndarray[Any, Any]]:
        """Return blocks ``ids`` (cached, or decoded now in parallel and cached); read-only."""
        return self._blocks(dset, ids)

    def head(self, dset: h5py.Dataset, block: int, rows: int) -> np.ndarray[Any, Any]:
        """Return the first ``rows`` rows of ``block`` (read-only).

        From the cache when the block is there; else, when the codec can (plain deflate, one
        chunk per block), inflated only that far and not cached; else the whole block, cached.
        """
        cached = self.cache.get(block)
        if cached is not None:
            return cached[:rows]
        if self.codec is not None and len(self._tiles) == 1:
            offset = (self._start(block), *(0 for _ in self.row_shape))
            row_nbytes = self.block_nbytes // self.block_rows
            try:
                mask, raw = read_direct_chunk(dset.id, offset)
                head = self.codec.decode_head(raw, rows * row_nbytes, mask)
            except (RuntimeError, OSError, ChunkDecodeError):
                head = None  # unwritten or corrupt: h5py reads the block and says why
            if head is not None:
                return head.view(self.dtype).reshape(rows, *self.row_shape)
        return self._blocks(dset, [block])[0][:rows]

    def _blocks(self, dset: h5py.Dataset, ids: list[int]) -> list[np.ndarray[Any, Any]]:
        """Return blocks ``ids``, from the cache or decoded now (in parallel) and cached."""
        found = [self.cache.get(b) for b in ids]
        missing = {
            b: np.empty((self._stop(b) - self._start(b), *self.row_shape), self.dtype)
            for b, block in zip(ids, found, strict=True)
            if block is None
        }
        if self.codec is None:
            for b, arr in missing.items():  # h5py decodes, one call per block
                dset.read_direct(arr, np.s_[self._start(b) : self._stop(b)])
        else:
            self._run(dset, (task for b, arr in missing.items() for task in self._tasks(b, arr)))
        budget = self.source.options.rdcc_nbytes
        for b, arr in missing.items():
            self.cache.put(b, arr, budget)
        return [missing[b] if block is None else block for b, block in zip(ids, found, strict=True)]

    def _tasks(self, block: int, dest: np.ndarray[Any, Any]) -> Iterator[_Task]:
        first_row = block * self.block_rows
        for offset, region in self._tiles:
            index = (slice(None), *region)
            yield (first_row, *offset), dest[index]

    def _run(self, dset: h5py.Dataset, tasks: Iterator[_Task]) -> None:
        dset_id, codec = dset.id, self.codec
        assert codec is not None

        def decode_into(task: _Task) -> _Task | None:
            offset, dest = task
            try:
                mask, raw = read_direct_chunk(dset_id, offset)
            except (RuntimeError, MemoryError, OSError) as exc:
                # never written: h5py serves the fill value (h5py raises MemoryError or
                # OSError when the dataset has no chunk at all)
                if _unwritten(dset_id, offset):
                    return task
                if isinstance(exc, MemoryError):
                    raise
                raise self._corrupt(offset, exc) from exc
            try:
                chunk = codec.decode(raw, mask)
            except UnsupportedChunkError:
                return task  # a filter variant we do not decode: h5py reads it
            except ChunkDecodeError as exc:
                raise self._corrupt(offset, exc) from exc
            dest[...] = chunk[tuple(slice(0, n) for n in dest.shape)]
            return None

        for unwritten in run_parallel(decode_into, tasks):
            if unwritten is not None:
                offset, dest = unwritten
                dest[...] = dset[
                    tuple(slice(o, o + n) for o, n in zip(offset, dest.shape, strict=True))
                ]

    def _corrupt(self, offset: tuple[int, ...], exc: BaseException) -> CorruptFileError:
        return CorruptFileError(
            f"dataset {self.key!r} of {self.source.path!r}: the chunk at {offset} is corrupt "
            f"({exc}); the file is damaged",
            self.source.path,
        )

    def _start(self, block: int) -> int:
        return block * self.block_rows

    def _stop(self, block: int) -> int:
        return min((block + 1) * self.block_rows, self.length)

    def _inside(self, block: int, start: int, stop: int) -> bool:
        return start <= self._start(block) and self._stop(block) <= stop


def _unwritten(dset_id: Any, offset: tuple[int, ...]) -> bool:
    """True when the chunk at ``offset`` was never written (HDF5 serves the fill value)."""
    try:
        return chunk_info_at(dset_id, offset).byte_offset is None
    except (RuntimeError, OSError, ValueError) as exc:
        return "not initialized" in str(exc) or "not allocated" in str(exc)


def _tiles(
    row_shape: tuple[int, ...], chunk_rest: tuple[int, ...]
) -> list[tuple[tuple[int, ...], tuple[slice, ...]]]:
    """Chunk offsets along the non-row axes, each with the slice of a row it fills."""
    axes = [
        [(o, slice(o, min(o + c, d))) for o in range(0, d, c)]
        for d, c in zip(row_shape, chunk_rest, strict=True)
    ]
    return [
        (tuple(o for o, _ in combo), tuple(s for _, s in combo))
        for combo in itertools.product(*axes)
    ]
