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
(``equal_steps="pad"`` repeats a few samples, ``"drop"`` leaves a few out), then each rank
shuffles its part within windows with its own generator. The order is a pure function of
``(seed, epoch, rank, world_size, data_len, block_size, window_chunks)``. The block order does
not depend on the world: a state loaded on another world size (or another ``batch_size`` /
``num_workers``) resumes elastically, the new ranks taking contiguous parts of what the saving
world left, in block order (see ``samplers/elastic.py``). Under accelerate's
``prepare()`` (which splits batches across processes itself) the sampler orders the whole file as
for one process and accelerate deals its batches out (see ``samplers/frameworks.py``).

Files at a URL: every request costs a round trip, so by default a block there is a run of
adjacent chunks (the dataset's ``adjacent_chunks``: up to 8, about 1 MB decoded), fetched by
one request; a local file keeps one chunk per block. An explicit ``block_size`` /
``block_starts`` always wins.

Blocks of different lengths: a dataset whose chunks do not map to a fixed number of rows (sparse
rows: a chunk of the 1-d ``data`` array holds a varying number of rows) passes ``block_starts``,
the first row of every block. The sampler then shuffles those blocks and cuts windows of
``window_chunks`` whole blocks; everything else is as above. A dataset that has a
``block_starts`` attribute (``H5SparseDataset``) is read that way without asking.
"""

from __future__ import annotations

import itertools
from collections.abc import Sized
from typing import Any

import numpy as np
import numpy.typing as npt

from ..._validate import check_count, check_parallel
from .._contracts.protocols import AdjacentChunks, ChunkAware, Refreshes, VariableBlocks
from .epoch import DistributedEpochSampler
from .shards import EvenMode, steps_per_rank, wrap

__all__ = ["ChunkShuffleSampler"]

MIN_WINDOW_CHUNKS = 8
MAX_WINDOW_CHUNKS = 64


class ChunkShuffleSampler(DistributedEpochSampler):
    """Chunk-aware shuffle: block order shuffled, then samples shuffled within block windows.

    Args:
        dataset: The dataset to sample (its ``len`` and ``chunk_rows`` are used; every dataset
            of this library has them), or its length as an int together with ``block_size``.
            A dataset that can ``refresh()`` is followed: each epoch takes its length at its
            start (see ``DistributedEpochSampler``), unless blocks vary (``block_starts``).
        seed: Base seed, the same on every rank.
        window_chunks: Blocks per shuffle window. Larger mixes better and needs a larger chunk
            cache. Default: half of what the dataset's chunk cache holds (so the next window
            can be decoded ahead while this one is served), between 8 and 64.
        block_size: Rows per block (default: the dataset's ``chunk_rows``, times its
            ``adjacent_chunks`` for a URL (a run of up to 8 neighbouring chunks, fetched by one
            request; see ``docs/remote.md``); 1 when the data is not chunked, which makes this
            a plain full shuffle). ``block_size=ds.chunk_rows`` turns the runs off.
        block_starts: Blocks of varying length instead: the first row of every block, strictly
            increasing from 0 (a 1-d integer array). Default: the dataset's ``block_starts``
            attribute when it has one that is not None. Exclusive with ``block_size``.
        rank: This rank (detected with ``World.detect`` when None).
        world_size: Number of ranks (detected when None).
        shuffle: False yields the data in file order (still split across ranks).
        equal_steps: ``"pad"`` (every sample at least once; ``num_padded`` repeats) or
            ``"drop"`` (no repeats; ``num_dropped`` samples left out) to give every rank the
            same count.
        batch_size: The loader's batch size; needed with ``num_workers > 1``.
        num_workers: The loader's ``num_workers``: with 2 or more, batches are dealt so each
            worker reads its own chunks (see the module docstring).
        size_cache: Ask the loader to grow the dataset's chunk cache when a window of chunks
            would not fit in it (``batched_loader`` does, and logs the new size). The sampler
            itself only reads numbers from the dataset; it never touches its file.
        even: The old name of ``equal_steps`` (still accepted; a ``DeprecationWarning``).

    Raises:
        TypeError: ``dataset`` has no length, or no ``chunk_rows`` and no ``block_size`` given.
        ValueError: an argument is out of range, ``block_starts`` is not strictly increasing
            from 0 within the data, or both ``block_size`` and ``block_starts`` are given.

    Example:
        >>> sampler = ChunkShuffleSampler(ds, seed=0)
        >>> loader = batched_loader(ds, 256, sampler=sampler, num_workers=4)
        >>> for epoch in range(epochs):
        ...     sampler.set_epoch(epoch)
    """

    _state_sizes: tuple[str, ...] = ("data_len", "block_size", "window_chunks")
    _state_split: tuple[str, ...] = ("world_size", "batch_size", "num_workers")

    def __init__(
        self,
        dataset: Any,
        *,
        seed: int = 0,
        window_chunks: int | None = None,
        block_size: int | None = None,
        block_starts: Any = None,
        rank: int | None = None,
        world_size: int | None = None,
        shuffle: bool = True,
        equal_steps: EvenMode = "pad",
        batch_size: int | None = None,
        num_workers: int = 0,
        size_cache: bool = True,
        even: EvenMode | None = None,
    ) -> None:
        super().__init__(
            _length(dataset),
            seed=seed,
            shuffle=shuffle,
            rank=rank,
            world_size=world_size,
            equal_steps=equal_steps,
            even=even,
        )
        starts, own = _block_starts(dataset, block_size, block_starts, self.data_len)
        if starts is None and isinstance(dataset, Refreshes):
            # fixed blocks follow a growing file (varying ones are the dataset's, fixed once)
            self.followed = dataset
        #: first row of every block when blocks vary in length (``block_starts``), else None
        self.block_starts: npt.NDArray[np.int64] | None = starts
        #: rows per block; None when blocks vary in length
        self.block_size: int | None = None
        cache_rows: int | None
        if starts is None:
            self.block_size = cache_rows = _block_size(dataset, block_size)
        else:
            self._state_sizes = (*type(self)._state_sizes, "num_blocks")
            # the cache a window needs: the dataset knows its own blocks (None); for others,
            # the longest block in rows is an upper bound
            lengths = np.diff(np.append(starts, self.data_len))
            cache_rows = None if own else int(lengths.max(initial=1))
        self.window_chunks = (
            _default_window(dataset, cache_rows)
            if window_chunks is None
            else check_count("window_chunks", window_chunks, minimum=1)
        )
        self.batch_size = (
            None if batch_size is None else check_count("batch_size", batch_size, minimum=1)
        )
        self.num_workers = check_parallel("num_workers", num_workers, minimum=0)
        if self.num_workers > 1 and self.batch_size is None:
            raise ValueError(
                f"num_workers={num_workers!r} needs batch_size=<the loader's batch size> so "
                "that each worker gets batches of its own chunks"
            )
        if not isinstance(size_cache, bool):
            raise TypeError(f"size_cache must be True or False, got {size_cache!r}")
        self.size_cache = size_cache
        #: rows per block the loader sizes the chunk cache for; None: the dataset's own blocks
        self.cache_block_rows = cache_rows

    @property
    def num_blocks(self) -> int:
        """Blocks in the whole dataset (the last one may be short)."""
        if self.block_starts is not None:
            return int(self.block_starts.size)
        assert self.block_size is not None
        return -(-self.data_len // self.block_size)

    def _base_order(self) -> npt.NDArray[np.int64]:
        """Every row, block by block, blocks shuffled (stream 0): the same on every world."""
        blocks = self._block_permutation()
        if self.block_starts is not None:
            return starts_order(self.block_starts, self._block_lengths(), blocks)
        assert self.block_size is not None
        return block_order(self.data_len, self.block_size, blocks)

    def _positions(
        self,
        order: npt.NDArray[np.int64],
        phase: int,
        world_size: int,
        rank: int,
        options: tuple[int, ...],
    ) -> npt.NDArray[np.int64]:
        """Rank's positions in ``order`` for one phase: one contiguous part, window-shuffled.

        Every rank takes the same count (``equal_steps`` pads by wrapping to the start of ``order``,
        or drops the tail), so each reads its own run of chunks; the part is then shuffled
        within windows of ``window_chunks`` blocks and, with workers, dealt in batches.
        """
        count = steps_per_rank(len(order), world_size, self.equal_steps)
        lo = rank * count
        mine = np.arange(lo, lo + count, dtype=np.int64)
        if self.shuffle and count:
            rng = self._rng(1 + rank, phase)
            if self.block_starts is None:
                # windows of a fixed number of rows stay aligned with batches after a resume
                # too (a window then spans at most two more blocks than window_chunks)
                assert self.block_size is not None
                mine = window_shuffle(mine, self.window_chunks * self.block_size, rng)
            else:
                mine = window_shuffle_at(mine, self._window_cuts(order, phase, lo, count), rng)
        batch, workers = options
        if workers > 1 and batch:
            mine = deal_batches(mine, batch, workers)
        return mine

    def _window_cuts(
        self, order: npt.NDArray[np.int64], phase: int, lo: int, count: int
    ) -> npt.NDArray[np.int64]:
        """Positions within a part that end every ``window_chunks``-th block of it."""
        if phase == 0:  # block ends of the base order, counted in the (cyclic) pad
            assert self.block_starts is not None
            ends = np.cumsum(self._block_lengths()[self._block_permutation()])
            cycles = -(-(lo + count) // max(1, self.data_len))
            ends = (ends + self.data_len * np.arange(cycles)[:, None]).ravel()
            inside = ends[(ends > lo) & (ends < lo + count)] - lo
        else:  # a remaining order: a new block wherever the block of the row changes
            blocks = self._block_of(order[wrap(np.arange(lo, lo + count), len(order))])
            inside = np.flatnonzero(blocks[1:] != blocks[:-1]) + 1
        return inside[self.window_chunks - 1 :: self.window_chunks]

    def _block_lengths(self) -> npt.NDArray[np.int64]:
        assert self.block_starts is not None
        return np.diff(np.append(self.block_starts, self.data_len))

    def _block_permutation(self) -> npt.NDArray[np.int64]:
        blocks = np.arange(self.num_blocks, dtype=np.int64)
        return self._rng(0).permutation(blocks) if self.shuffle else blocks

    def _block_of(self, rows: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        if self.block_starts is not None:
            return np.searchsorted(self.block_starts, rows, side="right") - 1
        assert self.block_size is not None
        return rows // self.block_size

    def _phase_options(self, split: dict[str, Any]) -> tuple[int, ...]:
        return (split["batch_size"] or 0, split["num_workers"])

    def _rng(self, stream: int, phase: int = 0) -> np.random.Generator:
        # stream 0: the block order shared by all ranks; 1 + rank: that rank's window shuffle
        # (in later phases of an elastic epoch, one stream per phase)
        mask = 0xFFFFFFFFFFFFFFFF
        key = [self.seed & mask, self.epoch & mask, stream, 0x43485346]
        return np.random.default_rng([*key, phase] if phase else key)

    def __repr__(self) -> str:
        blocks = (
            f"block_size={self.block_size}"
            if self.block_starts is None
            else f"num_blocks={self.num_blocks} (varying)"
        )
        return (
            f"ChunkShuffleSampler(data_len={self.data_len}, {blocks}, "
            f"window_chunks={self.window_chunks}, rank={self.rank}, "
            f"world_size={self.world_size}, seed={self.seed}, shuffle={self.shuffle}, "
            f"epoch={self.epoch}, equal_steps={self.equal_steps!r}, per_rank={self._per_rank}, "
            f"batch_size={self.batch_size}, num_workers={self.num_workers})"
        )


def block_order(n: int, block: int, blocks: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """Return the rows of ``range(n)`` block by block, blocks in the given order."""
    starts = blocks * block
    lengths = np.minimum(block, n - starts)
    first_position = np.cumsum(lengths) - lengths
    return np.repeat(starts - first_position, lengths) + np.arange(n, dtype=np.int64)


def starts_order(
    starts: npt.NDArray[np.int64], lengths: npt.NDArray[np.int64], blocks: npt.NDArray[np.int64]
) -> npt.NDArray[np.int64]:
    """Return every row block by block, blocks (given by first row and length) in that order."""
    chosen = lengths[blocks]
    first_position = np.cumsum(chosen) - chosen
    return np.repeat(starts[blocks] - first_position, chosen) + np.arange(
        int(chosen.sum()), dtype=np.int64
    )


def window_shuffle_at(
    order: npt.NDArray[np.int64], cuts: npt.NDArray[np.int64], rng: np.random.Generator
) -> npt.NDArray[np.int64]:
    """Shuffle ``order`` within the windows that positions ``cuts`` (increasing) separate."""
    out = np.empty_like(order)
    bounds = np.concatenate(([0], cuts, [order.size])).tolist()
    for lo, hi in itertools.pairwise(bounds):  # O(n); windows are few
        out[lo:hi] = rng.permutation(order[lo:hi])
    return out


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
        return check_count("dataset", dataset)
    if not isinstance(dataset, Sized):
        raise TypeError(
            f"dataset must be a dataset with a length or an int, got {type(dataset).__name__}"
        )
    return len(dataset)


def _block_size(dataset: Any, block_size: int | None) -> int:
    if block_size is not None:
        return check_count("block_size", block_size, minimum=1)
    if not isinstance(dataset, ChunkAware):
        raise TypeError(
            f"{type(dataset).__name__} has no chunk_rows: pass block_size=<rows per chunk>"
        )
    rows = dataset.chunk_rows
    if rows is None:
        return 1
    rows = check_count("chunk_rows", rows, minimum=1)
    if isinstance(dataset, AdjacentChunks):  # a URL: runs of neighbours, one request each
        return rows * check_count("adjacent_chunks", dataset.adjacent_chunks, minimum=1)
    return rows


def _block_starts(
    dataset: Any, block_size: int | None, block_starts: Any, data_len: int
) -> tuple[npt.NDArray[np.int64] | None, bool]:
    """Return ``(starts, from_the_dataset)``; starts None means fixed-size blocks."""
    own = block_starts is None and block_size is None
    if own and isinstance(dataset, VariableBlocks):
        block_starts = dataset.block_starts
    if block_starts is None:
        return None, False
    if block_size is not None:
        raise ValueError(
            f"block_size={block_size!r} and block_starts are exclusive: pass one of them"
        )
    return _check_starts(block_starts, data_len), own


def _check_starts(block_starts: Any, data_len: int) -> npt.NDArray[np.int64]:
    arr = np.asarray(block_starts)
    if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
        raise TypeError(
            f"block_starts must be a 1-d array of integers, got shape {arr.shape} "
            f"and dtype {arr.dtype}"
        )
    starts = arr.astype(np.int64)
    if data_len == 0:
        if starts.size:
            raise ValueError(f"block_starts must be empty for an empty dataset, got {starts.size}")
        return starts
    if starts.size == 0 or starts[0] != 0 or np.any(np.diff(starts) <= 0):
        raise ValueError(
            "block_starts must be strictly increasing and start at 0, got "
            f"{starts[:6].tolist()}{' …' if starts.size > 6 else ''}"
        )
    if starts[-1] >= data_len:
        raise ValueError(
            f"block_starts holds {int(starts[-1])}, outside a dataset of length {data_len}"
        )
    return starts


def _default_window(dataset: Any, block: int | None) -> int:
    if not isinstance(dataset, ChunkAware):
        return 32
    per_block = int(dataset.window_cache_nbytes(block, 1))
    if per_block == 0:  # no chunk cache involved (contiguous or memory-mapped reads)
        return MAX_WINDOW_CHUNKS
    budget = dataset.chunk_cache_nbytes
    # half of what the cache holds: the reader decodes the next window while this one is served
    return min(MAX_WINDOW_CHUNKS, max(MIN_WINDOW_CHUNKS, (budget // per_block - 2) // 2))
