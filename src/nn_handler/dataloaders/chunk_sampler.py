"""ChunkShuffleSampler: shuffle by HDF5 chunks, then within windows of chunks.

A fully random order over a compressed, chunked file decodes a whole chunk for nearly every
sample. This sampler shuffles the *order of blocks* (a block = the rows of one chunk along axis
0), then shuffles samples *within windows* of ``window_chunks`` consecutive blocks, so every batch
draws from a few chunks that stay in the chunk cache while the window lasts: each chunk is
decoded once per epoch, and the order is still random at two levels (which blocks come when, and
which samples of a window go together). The price is weaker mixing inside a batch; the README's
"Chunk-aware shuffling" section gives the numbers next to a full shuffle.

DataLoader workers: batch ``i`` goes to worker ``i % num_workers``, so consecutive batches of one
window would make every worker decode the same chunks. Given ``batch_size`` and ``num_workers``,
the sampler cuts its order into ``num_workers`` runs of whole batches and deals them out round
robin: each worker then reads its own run of windows, and each chunk is still decoded once.

Distributed: every rank builds the same block order and takes one contiguous part of it (so each
rank reads its own chunks, with at most two shared at the borders); parts have equal lengths
(``even="pad"`` repeats a few samples, ``"drop"`` leaves a few out), then each rank shuffles its
part within windows with its own generator. The order is a pure function of
``(seed, epoch, rank, world_size, data_len, block_size, window_chunks)``.
"""

from __future__ import annotations

import logging
from collections.abc import Sized
from typing import Any

import numpy as np
import numpy.typing as npt

from ._validate import check_non_negative_int, check_positive_int
from .samplers import DistributedEpochSampler, EvenMode, _fit_length

__all__ = ["ChunkShuffleSampler"]

_LOG = logging.getLogger(__name__)
MIN_WINDOW_CHUNKS = 8
MAX_WINDOW_CHUNKS = 64
_BIG_CACHE = 1024**3  # above this per key and worker, growing the cache deserves a warning


class ChunkShuffleSampler(DistributedEpochSampler):
    """Chunk-aware shuffle: block order shuffled, then samples shuffled within block windows.

    Args:
        dataset: The dataset to sample (its ``len`` and ``chunk_rows`` are used; every dataset
            of this library has them), or its length as an int together with ``block_size``.
        seed: Base seed, the same on every rank.
        window_chunks: Blocks per shuffle window. Larger mixes better and needs a larger chunk
            cache. Default: half of what the dataset's chunk cache holds (so the next window
            can be decoded ahead while this one is served), between 8 and 64.
        block_size: Rows per block (default: the dataset's ``chunk_rows``; 1 when the data is
            not chunked, which makes this a plain full shuffle).
        rank: This rank (detected with ``World.detect`` when None).
        world_size: Number of ranks (detected when None).
        shuffle: False yields the data in file order (still split across ranks).
        even: ``"pad"`` (every sample at least once; ``num_padded`` repeats) or ``"drop"`` (no
            repeats; ``num_dropped`` samples left out) to give every rank the same count.
        batch_size: The loader's batch size; needed with ``num_workers > 1``.
        num_workers: The loader's ``num_workers``: with 2 or more, batches are dealt so each
            worker reads its own chunks (see the module docstring).
        size_cache: Grow the dataset's chunk cache (``set_chunk_cache``) when a window of
            chunks would not fit in it, and log the new size.

    Raises:
        TypeError: ``dataset`` has no length, or no ``chunk_rows`` and no ``block_size`` given.
        ValueError: an argument is out of range.

    Example:
        >>> sampler = ChunkShuffleSampler(ds, seed=0)
        >>> loader = batched_loader(ds, 256, sampler=sampler, num_workers=4)
        >>> for epoch in range(epochs):
        ...     sampler.set_epoch(epoch)
    """

    _state_sizes: tuple[str, ...] = (
        "data_len",
        "block_size",
        "window_chunks",
        "rank",
        "world_size",
        "batch_size",
        "num_workers",
    )

    def __init__(
        self,
        dataset: Any,
        *,
        seed: int = 0,
        window_chunks: int | None = None,
        block_size: int | None = None,
        rank: int | None = None,
        world_size: int | None = None,
        shuffle: bool = True,
        even: EvenMode = "pad",
        batch_size: int | None = None,
        num_workers: int = 0,
        size_cache: bool = True,
    ) -> None:
        super().__init__(
            _length(dataset),
            seed=seed,
            shuffle=shuffle,
            rank=rank,
            world_size=world_size,
            even=even,
        )
        self.block_size = _block_size(dataset, block_size)
        self.window_chunks = (
            _default_window(dataset, self.block_size)
            if window_chunks is None
            else check_positive_int("window_chunks", window_chunks)
        )
        self.batch_size = (
            None if batch_size is None else check_positive_int("batch_size", batch_size)
        )
        self.num_workers = check_non_negative_int("num_workers", num_workers)
        if self.num_workers > 1 and self.batch_size is None:
            raise ValueError(
                f"num_workers={num_workers!r} needs batch_size=<the loader's batch size> so "
                "that each worker gets batches of its own chunks"
            )
        if not isinstance(size_cache, bool):
            raise TypeError(f"size_cache must be True or False, got {size_cache!r}")
        if size_cache:
            _fit_cache(dataset, self.block_size, self.window_chunks + 2)
        plan = getattr(dataset, "plan_window", None)
        if callable(plan):  # the reader keeps about two windows decoded, not its whole budget
            plan(self.block_size, self.window_chunks)

    @property
    def num_blocks(self) -> int:
        """Blocks in the whole dataset (the last one may be short)."""
        return -(-self.data_len // self.block_size)

    def _order(self) -> npt.NDArray[np.int64]:
        blocks = np.arange(self.num_blocks, dtype=np.int64)
        if self.shuffle:
            blocks = self._rng(0).permutation(blocks)
        whole = _fit_length(block_order(self.data_len, self.block_size, blocks), self.total_size)
        mine = whole[self.rank * self._per_rank : (self.rank + 1) * self._per_rank]
        if self.shuffle:
            window = self.window_chunks * self.block_size
            mine = window_shuffle(mine, window, self._rng(1 + self.rank))
        if self.num_workers > 1 and self.batch_size is not None:
            mine = deal_batches(mine, self.batch_size, self.num_workers)
        return mine

    def _rng(self, stream: int) -> np.random.Generator:
        # stream 0: the block order shared by all ranks; 1 + rank: that rank's window shuffle
        mask = 0xFFFFFFFFFFFFFFFF
        return np.random.default_rng([self.seed & mask, self.epoch & mask, stream, 0x43485346])

    def __repr__(self) -> str:
        return (
            f"ChunkShuffleSampler(data_len={self.data_len}, block_size={self.block_size}, "
            f"window_chunks={self.window_chunks}, rank={self.rank}, "
            f"world_size={self.world_size}, seed={self.seed}, shuffle={self.shuffle}, "
            f"epoch={self.epoch}, even={self.even!r}, per_rank={self._per_rank}, "
            f"batch_size={self.batch_size}, num_workers={self.num_workers})"
        )


def block_order(n: int, block: int, blocks: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """Return the rows of ``range(n)`` block by block, blocks in the given order."""
    starts = blocks * block
    lengths = np.minimum(block, n - starts)
    first_position = np.cumsum(lengths) - lengths
    return np.repeat(starts - first_position, lengths) + np.arange(n, dtype=np.int64)


def window_shuffle(
    order: npt.NDArray[np.int64], window: int, rng: np.random.Generator
) -> npt.NDArray[np.int64]:
    """Shuffle ``order`` within consecutive windows of ``window`` entries (the last: the rest)."""
    full = len(order) // window * window
    out = np.empty_like(order)
    if full:
        out[:full] = rng.permuted(order[:full].reshape(-1, window), axis=1).ravel()
    out[full:] = rng.permutation(order[full:])
    return out


def deal_batches(order: npt.NDArray[np.int64], batch: int, workers: int) -> npt.NDArray[np.int64]:
    """Reorder whole batches so that batch ``i`` comes from worker ``i % workers``'s own run.

    ``order``'s full batches are cut into one contiguous run per worker and dealt round robin.
    A last, partial batch stays last (batch boundaries must not move); it goes to worker
    ``full % workers``, so that worker's run is placed at the end, next to it.
    """
    full = len(order) // batch
    if full < 2 or workers < 2:
        return order
    rounds, extra = divmod(full, workers)
    sizes = rounds + (np.arange(workers) < extra)
    layout = np.array([w for w in range(workers) if w != extra] + [extra])
    owner = np.repeat(layout, sizes[layout])  # natural batch j -> worker
    first = np.empty(workers, dtype=np.int64)
    first[layout] = np.cumsum(sizes[layout]) - sizes[layout]
    key = (np.arange(full) - first[owner]) * workers + owner
    dealt = order[: full * batch].reshape(full, batch)[np.argsort(key)]
    return np.concatenate([dealt.ravel(), order[full * batch :]])


def _length(dataset: Any) -> int:
    if isinstance(dataset, bool):
        raise TypeError(f"dataset must be a dataset or its length, got {dataset!r}")
    if isinstance(dataset, (int, np.integer)):
        return check_non_negative_int("dataset", dataset)
    if not isinstance(dataset, Sized):
        raise TypeError(
            f"dataset must be a dataset with a length or an int, got {type(dataset).__name__}"
        )
    return len(dataset)


def _block_size(dataset: Any, block_size: int | None) -> int:
    if block_size is not None:
        return check_positive_int("block_size", block_size)
    if isinstance(dataset, (int, np.integer)) or not hasattr(dataset, "chunk_rows"):
        raise TypeError(
            f"{type(dataset).__name__} has no chunk_rows: pass block_size=<rows per chunk>"
        )
    rows = dataset.chunk_rows
    return 1 if rows is None else check_positive_int("chunk_rows", rows)


def _default_window(dataset: Any, block: int) -> int:
    need = getattr(dataset, "window_cache_nbytes", None)
    budget = getattr(dataset, "chunk_cache_nbytes", None)
    if not callable(need) or not isinstance(budget, int):
        return 32
    per_block = int(need(block, 1))
    if per_block == 0:  # no chunk cache involved (contiguous or memory-mapped reads)
        return MAX_WINDOW_CHUNKS
    # half of what the cache holds: the reader decodes the next window while this one is served
    return min(MAX_WINDOW_CHUNKS, max(MIN_WINDOW_CHUNKS, (budget // per_block - 2) // 2))


def _fit_cache(dataset: Any, block: int, blocks: int) -> None:
    need_fn = getattr(dataset, "window_cache_nbytes", None)
    resize = getattr(dataset, "set_chunk_cache", None)
    budget = getattr(dataset, "chunk_cache_nbytes", None)
    if not callable(need_fn) or not callable(resize) or not isinstance(budget, int):
        return
    need = int(need_fn(block, blocks))
    if need <= budget:
        return
    resize(need)
    log = _LOG.warning if need > _BIG_CACHE else _LOG.info
    log(
        "ChunkShuffleSampler: chunk cache of %r grown from %d to %d bytes per key so a window "
        "of %d blocks of %d rows stays decoded%s",
        dataset,
        budget,
        need,
        blocks,
        block,
        " (per DataLoader worker: pass a smaller window_chunks to use less memory)"
        if need > _BIG_CACHE
        else "",
    )
