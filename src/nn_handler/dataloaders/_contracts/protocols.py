"""The capabilities datasets, samplers and loaders offer each other, named once.

Loaders, samplers and the training layer never probe an object with ``getattr``: they ask
``isinstance(obj, Capability)`` (every protocol here is ``runtime_checkable``) and, for the flag
protocols, the predicate next to it, which also checks the flag's value. Sampler state keys are
constants, shared by every stateful sampler and by the checkpoint code that rewrites them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from torch.utils.data import BatchSampler, DistributedSampler

from ...distributed import World

if TYPE_CHECKING:  # samplers import this module: no file-reading code at run time
    from ..._io import WindowPlan

__all__ = [
    "STATE_CONSUMED",
    "STATE_EPOCH",
    "STATE_PHASES",
    "STATE_SEED",
    "AdjacentChunks",
    "BatchIndexable",
    "ChunkAware",
    "ChunkWindowed",
    "EpochAware",
    "ExplainsWaits",
    "ForkOnly",
    "PlansWindow",
    "RankSharded",
    "ReadsAhead",
    "Refreshes",
    "Resumable",
    "Shuffles",
    "SplitsRanks",
    "VariableBlocks",
    "WrapsSampler",
    "indexes_batches",
    "is_fork_only",
    "is_rank_sharded",
    "set_epoch_once",
    "splits_across_ranks",
]

STATE_SEED = "seed"
STATE_EPOCH = "epoch"
# samples handed out this epoch by the sampler; a checkpoint replaces it with samples *trained*
STATE_CONSUMED = "consumed"
# finished phases of the epoch on other worlds: [[world_size, consumed, *options], …]
STATE_PHASES = "phases"


@runtime_checkable
class BatchIndexable(Protocol):
    """A dataset whose ``ds[list_of_indices]`` returns the stacked batch in one read."""

    supports_batch_indexing: bool

    def __len__(self) -> int: ...

    def __getitem__(self, index: Any) -> Any: ...


@runtime_checkable
class RankSharded(Protocol):
    """A dataset that holds only this rank's shard (e.g. ``RankMemCachedH5Dataset``).

    ``len()`` is what this rank iterates per epoch (``RankMemCachedH5Dataset``: the same on every
    rank); ``make_sampler`` gives every rank the same number of steps.
    """

    is_rank_sharded: bool
    world: World
    samples_per_rank: int

    def __len__(self) -> int: ...

    def make_sampler(self, seed: int = 0, shuffle: bool = True) -> Any: ...


@runtime_checkable
class ChunkAware(Protocol):
    """A dataset read in chunks of rows that keeps decoded chunks in a resizable cache."""

    chunk_rows: int | None
    chunk_cache_nbytes: int

    def __len__(self) -> int: ...

    def window_cache_nbytes(self, block_rows: int | None, blocks: int) -> int: ...

    def set_chunk_cache(
        self, nbytes: int, nslots: int | None = None, w0: float | None = None
    ) -> None: ...


@runtime_checkable
class AdjacentChunks(Protocol):
    """A dataset that says how many adjacent chunks a chunk sampler's default block holds.

    More than 1 where every request costs a round trip (a URL): the reader then fetches a run
    of neighbouring chunks with one request. It applies when the user gives no ``block_size``
    / ``block_starts``; 1 for a local file (every chunk is its own block).
    """

    adjacent_chunks: int


@runtime_checkable
class VariableBlocks(Protocol):
    """A dataset whose chunks hold different numbers of rows (sparse rows, ragged data).

    ``block_starts`` is the first row of every block (strictly increasing from 0), or None when
    blocks have a fixed size (``chunk_rows``).
    """

    block_starts: Any


@runtime_checkable
class ChunkWindowed(Protocol):
    """A sampler that walks blocks of rows in windows of ``window_chunks`` blocks.

    ``cache_block_rows`` is the rows of one block to size a chunk cache for (None: the
    dataset's own, varying blocks); ``size_cache`` says whether the loader should grow a
    ``ChunkAware`` dataset's chunk cache so a window (plus its two border blocks) stays decoded.
    """

    cache_block_rows: int | None
    window_chunks: int
    size_cache: bool


@runtime_checkable
class PlansWindow(Protocol):
    """A dataset that takes a chunk sampler's window as one ``WindowPlan``.

    ``batched_loader`` (or ``fit_chunk_cache``) builds the plan from the sampler and calls
    ``plan_window(plan)`` once; the dataset hands it to its readers. Nothing is read back up
    and no file is closed on the way.
    """

    def plan_window(self, plan: WindowPlan) -> None: ...


@runtime_checkable
class ReadsAhead(Protocol):
    """A dataset that decodes chunks ahead of need, in threads outside the GIL.

    ``read_ahead(indices)`` announces a coming batch (``readahead_rows`` rows ahead are useful,
    once its window is planned: ``PlansWindow``); ``reads_release_gil`` says batch reads run
    outside the GIL, so threads can serve batches.
    """

    readahead_rows: int
    reads_release_gil: bool

    def read_ahead(self, indices: Any) -> None: ...


@runtime_checkable
class Refreshes(Protocol):
    """A dataset whose files may grow: ``refresh()`` looks again and returns its length.

    Samplers built from one take its length at the start of every epoch (a SWMR writer may
    have appended rows since the last); each ``refresh()`` of a file nobody appends to costs
    about one ``stat``.
    """

    def __len__(self) -> int: ...

    def refresh(self) -> int: ...


@runtime_checkable
class ForkOnly(Protocol):
    """A dataset whose state a fork shares but a pickle would copy (``fork_only`` says so now).

    A rank cache in this process's private memory: a spawn or forkserver worker would receive
    it moved into ``/dev/shm``, so a loader choosing the start method keeps ``fork`` for it.
    """

    fork_only: bool


def is_fork_only(dataset: Any) -> bool:
    """Whether ``dataset`` (or the dataset a batch view wraps) is ``ForkOnly`` right now."""
    if isinstance(dataset, ForkOnly):
        return dataset.fork_only
    inner = dataset.dataset if isinstance(dataset, _Wraps) else None
    return inner is not None and inner is not dataset and is_fork_only(inner)


@runtime_checkable
class _Wraps(Protocol):
    dataset: Any


@runtime_checkable
class SplitsRanks(Protocol):
    """A sampler that says whether it gives each rank its own part of its indices.

    True for ``DistributedEpochSampler`` / ``ChunkShuffleSampler`` on several ranks, False for
    ``EpochShuffleSampler`` (it serves a dataset that is already this rank's shard).
    """

    shards_indices: bool


@runtime_checkable
class WrapsSampler(Protocol):
    """A sampler that draws from another one (torch's ``BatchSampler``, our readahead)."""

    sampler: Any


@runtime_checkable
class Shuffles(Protocol):
    """A sampler that says whether it draws in a random order (``DistributedSampler``, ours)."""

    shuffle: bool


@runtime_checkable
class ExplainsWaits(Protocol):
    """A dataset that can say what makes its batches slow to read (``wait_advice`` asks it)."""

    def wait_causes(self, random_order: bool) -> list[str]: ...


@runtime_checkable
class EpochAware(Protocol):
    """Anything whose order or content depends on the epoch (samplers, some datasets)."""

    def set_epoch(self, epoch: int) -> None: ...


@runtime_checkable
class Resumable(Protocol):
    """A sampler whose position can be saved and restored mid-epoch."""

    def __len__(self) -> int: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


def indexes_batches(dataset: object) -> bool:
    """True when ``dataset`` returns a stacked batch for a list of indices."""
    return isinstance(dataset, BatchIndexable) and dataset.supports_batch_indexing is True


def is_rank_sharded(dataset: object) -> bool:
    """True when ``dataset`` holds only this rank's shard."""
    return isinstance(dataset, RankSharded) and dataset.is_rank_sharded is True


def set_epoch_once(candidates: Iterable[object], epoch: int) -> bool:
    """Call ``set_epoch(epoch)`` on the first ``EpochAware`` candidate; True if one was found.

    Wrappers (batch samplers, prefetchers) forward the call inward, so calling it on the
    outermost one is enough, and calling it twice per epoch is avoided.
    """
    for candidate in candidates:
        if isinstance(candidate, EpochAware):
            candidate.set_epoch(epoch)
            return True
    return False


def splits_across_ranks(sampler: object) -> bool:
    """True when ``sampler`` gives each rank its own part of its index range.

    This library's samplers say so (``SplitsRanks``); a ``BatchSampler`` splits when its sampler
    does; any other ``DistributedSampler`` (torch's, Lightning's wrapper) when it has more than
    one replica.
    """
    if isinstance(sampler, SplitsRanks):
        return sampler.shards_indices is True
    if isinstance(sampler, BatchSampler):
        return splits_across_ranks(sampler.sampler)
    if isinstance(sampler, DistributedSampler):
        return int(sampler.num_replicas) > 1
    return False
