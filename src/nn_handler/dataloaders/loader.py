"""batched_loader: a DataLoader that hands whole batches of indices to the dataset.

``DataLoader(dataset, batch_size=256)`` calls ``dataset.__getitems__`` and then collates the
returned list of samples with ``torch.stack``: splitting a batch into samples and stacking it
again caps throughput even for data already in RAM (see the benchmarks).
``batched_loader`` instead puts the dataset behind a ``BatchedDataset`` view whose
``__getitems__`` reads the whole batch with one ``dataset[indices]`` call and returns it stacked,
so the only copy is the read.

Otherwise the loader is an ordinary ``DataLoader(view, batch_size=..., sampler=...)``: the
sampler is ``loader.sampler`` (wrapped in a ``ReadaheadSampler`` when the dataset decodes ahead),
batches come from torch's ``BatchSampler``, and every framework that rebuilds loaders from their
attributes (Lightning, accelerate, torchdata) sees the structure it expects.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence, Sized
from typing import Any, Literal

import torch
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    Dataset,
    DistributedSampler,
    RandomSampler,
    Sampler,
    SequentialSampler,
)

from .._io import WindowPlan
from .._validate import (
    check_choice,
    check_count,
    check_loader_options,
    check_non_negative_int,
    usable_cores,
)
from ._contracts import sharding
from ._contracts.protocols import (
    ChunkAware,
    ChunkWindowed,
    PlansWindow,
    RankSharded,
    ReadsAhead,
    Refreshes,
    Resumable,
    indexes_batches,
    is_rank_sharded,
    set_epoch_once,
    splits_across_ranks,
)
from ._transport import (
    RING_SLOTS,
    ReadaheadSampler,
    SafeStartDataLoader,
    ThreadedDataLoader,
    in_worker_process,
    pack_batch,
    set_ring_slots,
)
from .samplers import EpochShuffleSampler

__all__ = [
    "BatchedDataset",
    "EpochBatchSampler",
    "SafeStartDataLoader",
    "batched_loader",
    "fit_chunk_cache",
]

_LOG = logging.getLogger(__name__)
_BIG_CACHE = 1024**3  # above this per key and worker, growing the cache deserves a warning

WorkerMode = Literal["process", "thread", "auto"]
_WORKER_MODES: tuple[WorkerMode, ...] = ("process", "thread", "auto")
# DataLoader keywords that only mean something for worker processes
_PROCESS_ONLY = ("worker_init_fn", "multiprocessing_context", "persistent_workers", "timeout")


class BatchedDataset(Dataset[Any]):
    """A view of a batch-indexing dataset whose every DataLoader fetch reads one whole batch.

    ``view[i]`` and ``len(view)`` are the dataset's; ``view.__getitems__(indices)`` returns
    ``[dataset[indices]]`` (one stacked batch), which ``BatchedDataset.collate`` unwraps. Other
    attributes are looked up on the dataset, so ``loader.dataset.close()`` and the like keep
    working.

    In a DataLoader worker process each batch is read into a slot of the worker's batch ring
    and crosses to the main process as a slot number (see ``ring_slots``).

    Args:
        dataset: A dataset whose ``__getitem__`` accepts a list of indices and returns the
            stacked batch (``supports_batch_indexing = True``, as every dataset here does).
        ring_slots: Slots in each batch ring of a worker process: batches a worker can have
            on their way or held by the main process before it sends the next one the slow
            way (a fresh shared-memory segment). ``batched_loader`` uses
            ``prefetch_factor + 3``.

    Raises:
        TypeError: the dataset cannot index batches.
    """

    def __init__(self, dataset: Dataset[Any], ring_slots: int = RING_SLOTS) -> None:
        if not indexes_batches(dataset):
            raise TypeError(
                f"{type(dataset).__name__} does not index whole batches (no "
                "supports_batch_indexing = True); use DataLoader(dataset, batch_size=...) instead"
            )
        self.dataset = dataset
        self.ring_slots = check_count("ring_slots", ring_slots, minimum=2)

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def __getitem__(self, index: Any) -> Any:
        return self.dataset[index]

    def __getitems__(self, indices: Sequence[int]) -> list[Any]:
        """Return ``[dataset[indices]]``: the whole batch, read and stacked in one call."""
        if in_worker_process():
            set_ring_slots(self.ring_slots)
        return [self.dataset[list(indices)]]

    @staticmethod
    def collate(batch: list[Any]) -> Any:
        """``collate_fn`` for a ``BatchedDataset``: the batch its ``__getitems__`` stacked.

        In a DataLoader worker process its tensors are packed into slots of the worker's
        batch ring here (or moved into shared memory where no slot is free): torch would move
        them anyway when sending the batch, but in a thread that drops the batch on error (a
        full ``/dev/shm``), and the main process would wait for it forever.

        Raises:
            MemoryError: in a worker process, ``/dev/shm`` has no room for the batch.
        """
        return pack_batch(batch[0])

    def __getattr__(self, name: str) -> Any:
        if name == "dataset" or name.startswith("__"):  # unpickling, copy: not forwarded
            raise AttributeError(name)
        return getattr(self.dataset, name)

    def __repr__(self) -> str:
        return f"BatchedDataset({self.dataset!r})"


class EpochBatchSampler(BatchSampler):
    """A ``BatchSampler`` that forwards ``set_epoch`` and sampler state to the wrapped sampler.

    Training loops that call ``loader.sampler.set_epoch(epoch)`` keep working when the loader's
    sampler yields batches (``DataLoader(dataset, batch_size=None, sampler=EpochBatchSampler(
    ...))``, and ``worker_mode="thread"`` loaders). Around a ``DistributedSampler`` (every
    sampler of this library is one) the instance is a ``DistributedSampler`` too, so that
    Lightning, which splits the batches of any other sampler across ranks, leaves it alone.
    """

    def __new__(cls, sampler: Any = None, *args: Any, **kwargs: Any) -> EpochBatchSampler:
        """Create the sampler (the distributed flavour around a ``DistributedSampler``)."""
        # One class for users; the distributed flavour only changes what isinstance() says.
        if cls is EpochBatchSampler and isinstance(sampler, DistributedSampler):
            cls = _DistributedEpochBatchSampler
        return super().__new__(cls)

    def set_epoch(self, epoch: int) -> None:
        """Call ``set_epoch(epoch)`` on the wrapped sampler when it has one."""
        set_epoch_once([self.sampler], epoch)

    def state_dict(self) -> dict[str, Any]:
        """Return the wrapped sampler's state (empty when it keeps none)."""
        return dict(self.sampler.state_dict()) if isinstance(self.sampler, Resumable) else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the wrapped sampler's state."""
        if isinstance(self.sampler, Resumable):
            self.sampler.load_state_dict(state)
        elif state:
            raise ValueError(
                f"{type(self.sampler).__name__} keeps no state, but state {state!r} was given"
            )


class _DistributedEpochBatchSampler(EpochBatchSampler, DistributedSampler[list[int]]):
    """An ``EpochBatchSampler`` around a ``DistributedSampler``: distributed itself.

    ``DistributedSampler.__init__`` is not called; its attributes come from the wrapped sampler.
    """

    @property
    def _inner(self) -> Any:
        return self.sampler

    @property
    def rank(self) -> int:  # type: ignore[override]  # read-only: the wrapped sampler's
        """The wrapped sampler's rank."""
        return int(self._inner.rank)

    @property
    def num_replicas(self) -> int:  # type: ignore[override]  # read-only: the wrapped sampler's
        """The wrapped sampler's number of ranks."""
        return int(self._inner.num_replicas)

    @property
    def epoch(self) -> int:  # type: ignore[override]  # read-only: the wrapped sampler's
        """The wrapped sampler's epoch."""
        return int(self._inner.epoch)

    @property
    def shards_indices(self) -> bool:
        """Whether the wrapped sampler gives each rank its own part of the indices."""
        return splits_across_ranks(self.sampler)


def batched_loader(
    dataset: Dataset[Any],
    batch_size: int,
    *,
    shuffle: bool = False,
    sampler: Sampler[int] | None = None,
    drop_last: bool = False,
    generator: torch.Generator | None = None,
    worker_mode: WorkerMode = "process",
    **dataloader_kwargs: Any,
) -> DataLoader[Any]:
    """Return a DataLoader whose dataset reads and stacks each batch in one call.

    The loader is ``DataLoader(BatchedDataset(dataset), batch_size, sampler=...,
    collate_fn=BatchedDataset.collate)``: ``loader.sampler`` is the sampler of single indices
    (in a ``ReadaheadSampler`` when the dataset decodes ahead in this process),
    ``loader.dataset.dataset`` the dataset. ``worker_mode="thread"`` returns a
    ``ThreadedDataLoader`` over an ``EpochBatchSampler`` instead.

    A rank-sharded dataset (``RankMemCachedH5Dataset``) without a ``sampler`` gets its own
    ``make_sampler()``, so every rank runs the same number of steps and Lightning / accelerate
    see a sampler that already handles ranks; a sampler that splits such a dataset across ranks
    again (``DistributedEpochSampler``, ``ChunkShuffleSampler``, torch's ``DistributedSampler``)
    is refused.

    Args:
        dataset: A dataset whose ``__getitem__`` accepts a list of indices and returns the
            stacked batch (``supports_batch_indexing = True``, as every dataset here does).
        batch_size: Samples per batch.
        shuffle: Shuffle (a ``RandomSampler``; for a rank-sharded dataset its
            ``make_sampler(seed)`` with a seed drawn from ``generator`` or torch's RNG).
        sampler: Sampler of single indices (e.g. ``EpochShuffleSampler``); batches are cut
            from its order. A chunk-window sampler (``ChunkShuffleSampler``) gets the
            dataset's chunk cache grown to hold its window, unless it says ``size_cache=False``.
        drop_last: Drop the last incomplete batch.
        generator: Random generator for ``shuffle=True`` and for the workers' base seed (as
            ``DataLoader(generator=...)`` uses it).
        worker_mode: What ``num_workers > 0`` starts: ``"process"`` (DataLoader worker
            processes, the default), ``"thread"`` (that many threads of this process read
            batches; no pickling, no copy between processes: best when reads run outside the
            GIL, as memory-mapped gathers and our chunk decoding do), or ``"auto"`` (threads when
            the dataset says its batch reads release the GIL, ``reads_release_gil``, and no
            process-only keyword such as ``worker_init_fn`` is given; else processes).
        **dataloader_kwargs: Any other ``DataLoader`` keyword (``num_workers``,
            ``pin_memory``, ``persistent_workers``, ``worker_init_fn``, ...).
            ``num_workers="auto"`` starts one worker per usable CPU core (fewer when the
            epoch has fewer batches, none for a single batch) and logs the choice. Pass
            ``persistent_workers=True`` for speed: workers then keep their batch rings from
            one epoch to the next (torch's default restarts them, and draws their seed from
            torch's RNG each epoch, which exact resume tests rely on).

    Raises:
        TypeError: the dataset cannot index batches, or a keyword would conflict; a
            ``batch_size``, ``num_workers``, ``prefetch_factor`` or ``timeout`` of the wrong type
            (a bool or a string included).
        ValueError: ``shuffle=True`` together with a ``sampler``, an unknown ``worker_mode``,
            or a sampler that splits a rank-sharded dataset again; ``num_workers`` above 8 per
            CPU (at least 64), ``prefetch_factor`` outside 1..4,096, or a ``timeout`` that is
            negative, NaN or infinite (0 waits forever).
    """
    check_count("batch_size", batch_size, minimum=1)
    _resolve_auto_workers(dataset, batch_size, dataloader_kwargs)
    check_loader_options(dataloader_kwargs)  # before any worker process or thread starts
    view = BatchedDataset(dataset, (dataloader_kwargs.get("prefetch_factor") or 2) + 3)
    for key in ("batch_size", "batch_sampler", "collate_fn"):
        if key in dataloader_kwargs:
            raise TypeError(
                f"batched_loader() sets {key} itself; remove {key}={dataloader_kwargs[key]!r}"
            )
    if sampler is not None and shuffle:
        raise ValueError("shuffle=True and a sampler are exclusive; shuffle with the sampler")
    sampler = _own_sampler(dataset, sampler, shuffle, generator)
    threads = _use_threads(dataset, worker_mode, dataloader_kwargs)
    if sampler is None and isinstance(dataset, Refreshes):
        sampler = _following_sampler(dataset if threads else view, shuffle, generator)
    if threads:
        if sampler is None:
            sized: Sized = dataset  # type: ignore[assignment]
            sampler = (
                RandomSampler(sized, generator=generator) if shuffle else SequentialSampler(sized)
            )
        return ThreadedDataLoader(
            dataset,
            EpochBatchSampler(_with_readahead(dataset, sampler, batch_size), batch_size, drop_last),
            threads=dataloader_kwargs["num_workers"],
            prefetch_factor=dataloader_kwargs.get("prefetch_factor") or 2,
            pin_memory=bool(dataloader_kwargs.get("pin_memory", False)),
        )
    if not dataloader_kwargs.get("num_workers"):  # batches are read in this process
        if sampler is None and not shuffle:
            sampler = SequentialSampler(view)
        if sampler is not None:
            sampler = _with_readahead(dataset, sampler, batch_size)
    return SafeStartDataLoader(
        view,
        batch_size=batch_size,
        shuffle=shuffle and sampler is None,
        sampler=sampler,
        drop_last=drop_last,
        generator=generator,
        collate_fn=BatchedDataset.collate,
        **dataloader_kwargs,
    )


class _RefreshesFirst(Sampler[int]):
    """A torch sampler over a dataset that may grow: refreshed as each pass begins."""

    def __iter__(self) -> Iterator[int]:
        # not a generator itself: the indices come straight from torch's, at no cost each
        self.data_source.refresh()  # type: ignore[attr-defined]  # (torch's samplers hold it)
        return super().__iter__()  # (torch's sampler, next in the MRO)


class _RefreshingRandomSampler(_RefreshesFirst, RandomSampler):
    """torch's ``RandomSampler``, refreshing the dataset as each pass begins."""


class _RefreshingSequentialSampler(_RefreshesFirst, SequentialSampler):
    """torch's ``SequentialSampler``, refreshing the dataset as each pass begins."""


def _following_sampler(
    source: Any, shuffle: bool, generator: torch.Generator | None
) -> Sampler[int]:
    """The sampler a loader over a ``Refreshes`` dataset gets when none is given.

    torch's own samplers (Lightning and accelerate recognise them, and they draw the same
    order), whose pass first refreshes the dataset: an epoch takes the length the file has when
    it begins (one ``stat`` for a file nobody appends to), and rows appended during it wait for
    the next. Worker processes learn the new length from the indices they are asked for.
    """
    if shuffle:
        return _RefreshingRandomSampler(source, generator=generator)
    return _RefreshingSequentialSampler(source)


def _resolve_auto_workers(dataset: Any, batch_size: int, kwargs: dict[str, Any]) -> None:
    """Replace ``num_workers="auto"`` in ``kwargs`` by a count: one per core, one per batch.

    Worker processes hand batches over through their rings and each decodes with its share of
    the cores, so a process per core is the fast path for reads and decodes alike.
    """
    if kwargs.get("num_workers") != "auto":
        return
    cores = usable_cores()
    batches = -(-len(dataset) // batch_size) if isinstance(dataset, Sized) else cores
    kwargs["num_workers"] = workers = min(cores, batches) if batches > 1 else 0
    _LOG.info(
        "batched_loader: num_workers='auto' starts %d worker processes (%d usable cores, "
        "%d batches an epoch)",
        workers,
        cores,
        batches,
    )


def _own_sampler(
    dataset: Any, sampler: Sampler[int] | None, shuffle: bool, generator: torch.Generator | None
) -> Sampler[int] | None:
    """The sampler ``batched_loader`` reads by (None: the DataLoader's own), checked.

    A rank-sharded dataset's own ``make_sampler()`` when none is given; refuses a sampler that
    splits such a dataset again, tells an ``EpochShuffleSampler`` whose shard it serves, and
    sizes the chunk cache for a chunk-window sampler.
    """
    shard = dataset if isinstance(dataset, RankSharded) and is_rank_sharded(dataset) else None
    if sampler is None and shard is not None:
        seed = int(torch.randint(0, 2**62, (), generator=generator).item()) if shuffle else 0
        sampler = shard.make_sampler(seed=seed, shuffle=shuffle)
    if sampler is None:
        return None
    sharding.check_not_resharded(dataset, sampler, "batched_loader")
    if isinstance(sampler, EpochShuffleSampler) and sampler.shard_of is None and shard is not None:
        sampler.shard_of = shard.world  # what the sampler serves: this rank's shard
    fit_chunk_cache(dataset, sampler)
    return sampler


def fit_chunk_cache(dataset: object, sampler: object) -> None:
    """Size ``dataset``'s chunk cache (and decoded window) for one window of ``sampler``.

    A window of ``window_chunks`` blocks, plus the blocks at its two borders, must fit: a
    smaller cache evicts chunks the window still needs, and they are decoded again. The
    dataset gets the sampler's window as one plan (``PlansWindow``), so it keeps about two
    windows decoded instead of its whole budget, and grows its cache without closing its files.
    Nothing happens unless the sampler walks chunk windows and the dataset has a chunk cache;
    growing the cache also needs the sampler's ``size_cache``. A ``ChunkAware`` dataset
    without ``plan_window`` has its cache grown through ``set_chunk_cache``.

    Raises:
        TypeError: ``sampler`` is not a sampler (a number or a string, say).
    """
    _check_sampler("sampler", sampler)
    if not isinstance(sampler, ChunkWindowed) or not isinstance(dataset, ChunkAware):
        return
    plan = WindowPlan(sampler.cache_block_rows, sampler.window_chunks, sampler.size_cache)
    before = dataset.chunk_cache_nbytes
    if isinstance(dataset, PlansWindow):
        dataset.plan_window(plan)
    elif plan.fit_cache:
        need = int(dataset.window_cache_nbytes(plan.block_rows, plan.cache_blocks))
        if need > before:
            dataset.set_chunk_cache(need)
    after = dataset.chunk_cache_nbytes
    if after > before:
        _log_growth(dataset, plan, before, after)


def _check_sampler(name: str, sampler: object) -> None:
    """Raise ``TypeError`` unless ``sampler`` can be one: an iterable of indices, not text."""
    if isinstance(sampler, Sampler) or (
        isinstance(sampler, Iterable) and not isinstance(sampler, str | bytes)
    ):
        return
    raise TypeError(
        f"{name} must be a sampler (a torch.utils.data.Sampler or an iterable of indices), "
        f"got {type(sampler).__name__} {sampler!r}"
    )


def _log_growth(dataset: object, plan: WindowPlan, before: int, after: int) -> None:
    big = after > _BIG_CACHE
    (_LOG.warning if big else _LOG.info)(
        "chunk cache of %r grown from %d to %d bytes per key so a window of %d blocks of %s "
        "rows stays decoded%s",
        dataset,
        before,
        after,
        plan.cache_blocks,
        "its own" if plan.block_rows is None else plan.block_rows,
        " (per DataLoader worker: pass a smaller window_chunks to use less memory)" if big else "",
    )


def _with_readahead(dataset: Any, sampler: Sampler[int], batch_size: int) -> Sampler[int]:
    """``sampler``, announcing its batches early to a dataset that decodes ahead.

    Not around a ``RandomSampler``: Lightning and accelerate must still recognise (and replace
    or synchronise) it.
    """
    if isinstance(sampler, RandomSampler) or not isinstance(dataset, ReadsAhead):
        return sampler
    if dataset.readahead_rows <= 0:
        return sampler
    ahead = -(-dataset.readahead_rows // batch_size)
    return ReadaheadSampler(sampler, dataset.read_ahead, ahead, batch_size)


def _use_threads(dataset: Any, mode: WorkerMode, kwargs: dict[str, Any]) -> bool:
    """Whether ``batched_loader`` serves batches from threads (see ``worker_mode``)."""
    check_choice("worker_mode", mode, _WORKER_MODES)
    workers = check_non_negative_int("num_workers", kwargs.get("num_workers", 0))
    if mode == "process" or workers == 0:
        return False
    given = [key for key in _PROCESS_ONLY if kwargs.get(key) not in (None, False, 0)]
    unknown = set(kwargs) - {"num_workers", "prefetch_factor", "pin_memory", *_PROCESS_ONLY}
    if mode == "thread":
        if given or unknown:
            raise TypeError(
                f"worker_mode='thread' reads batches in threads of this process; "
                f"{', '.join(sorted([*given, *unknown]))} only apply to worker processes: "
                "remove them or use worker_mode='process'"
            )
        return True
    releases = isinstance(dataset, ReadsAhead) and dataset.reads_release_gil
    return not given and not unknown and releases
