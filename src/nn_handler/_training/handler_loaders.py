"""The loaders the handler builds from a dataset, and what it needs to know about any loader.

Sampler choice (when the user gives no ``sampler`` / ``batch_sampler``):

==================  ==============================================  =========================
dataset             train                                           validation
==================  ==============================================  =========================
rank-sharded        ``dataset.make_sampler(seed, shuffle)``         its local shard, no pad
                    (equal steps on every rank)
other, under DDP    ``DistributedEpochSampler(equal_steps="pad")``  ``ShardSampler`` (no pad)
other, one process  ``DistributedEpochSampler`` (world of one)      ``EpochShuffleSampler``
==================  ==============================================  =========================

All of them are stateful, so a checkpoint taken mid-epoch resumes exactly. The train sampler of
global data is a ``DistributedEpochSampler`` on any number of processes (on one it yields the
order ``EpochShuffleSampler`` would), so a mid-epoch checkpoint of N processes resumes on M.

A dataset whose ``__getitem__`` takes a whole list of indices (``supports_batch_indexing =
True``) is read one batch per call, as ``batched_loader`` does, unless a ``collate_fn`` is given.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from torch.utils.data import (
    BatchSampler,
    DataLoader,
    IterableDataset,
    RandomSampler,
    SequentialSampler,
)

from .._validate import check_loader_options, format_names
from ..dataloaders import (
    STATE_CONSUMED,
    BatchedDataset,
    DistributedEpochSampler,
    EpochShuffleSampler,
    Refreshes,
    Resumable,
    ShardSampler,
    batched_loader,
    indexes_batches,
    is_rank_sharded,
    set_epoch_once,
    splits_across_ranks,
)
from ..distributed import World

Role = Literal["train", "val"]
LOADER_KEYWORDS = frozenset(inspect.signature(DataLoader.__init__).parameters) - {"self", "dataset"}


def build_loader(
    data: Any, kwargs: Mapping[str, Any], *, role: Role, world: World, seed: int
) -> DataLoader[Any]:
    """Return ``data`` if it is a DataLoader, else a DataLoader over it built from ``kwargs``.

    ``shuffle`` defaults to True for training and False for validation.

    Raises:
        TypeError: an unknown keyword, or keywords together with a ready DataLoader.
        ValueError: a rank-sharded dataset belongs to another world.
    """
    if isinstance(data, DataLoader):
        if kwargs:
            raise TypeError(
                f"a ready DataLoader takes no loader keywords; got {format_names(kwargs)}: "
                "pass the dataset instead, or build the DataLoader with them"
            )
        return data
    unknown = set(kwargs) - LOADER_KEYWORDS
    if unknown:
        raise TypeError(
            f"unknown DataLoader keyword(s) {format_names(unknown)}; valid keywords are "
            f"{format_names(LOADER_KEYWORDS)}"
        )
    options = dict(kwargs)
    check_loader_options(options)  # before any worker starts
    shuffle = options.pop("shuffle", None)
    check_not_resharded(data, options.get("sampler"), options.get("batch_sampler"))
    if _needs_sampler(data, options):
        chosen = (role == "train") if shuffle is None else shuffle
        options["sampler"] = choose_sampler(data, chosen, role=role, world=world, seed=seed)
    elif shuffle is not None:
        options["shuffle"] = shuffle  # DataLoader reports the conflict with a sampler itself
    return _make_loader(data, options)


def _needs_sampler(data: Any, options: Mapping[str, Any]) -> bool:
    return (
        options.get("sampler") is None
        and options.get("batch_sampler") is None
        and not isinstance(data, IterableDataset)
    )


def choose_sampler(dataset: Any, shuffle: bool, *, role: Role, world: World, seed: int) -> Any:
    """The sampler the handler uses for ``dataset`` (see the module docstring)."""
    if is_rank_sharded(dataset):
        _check_same_world(dataset, world)
        if role == "train":
            return dataset.make_sampler(seed=seed, shuffle=shuffle)
        shard = getattr(dataset, "shard_size", len(dataset))  # its own rows, without the pad
        return EpochShuffleSampler(shard, seed=seed, shuffle=shuffle, shard_of=dataset.world)
    if role == "train":  # on any world: its state resumes on any other (elastic resume)
        # a dataset that can refresh() is followed: each epoch takes its length as it begins
        sized = dataset if isinstance(dataset, Refreshes) else len(dataset)
        return DistributedEpochSampler(
            sized, seed=seed, shuffle=shuffle, rank=world.rank,
            world_size=world.world_size, equal_steps="pad",
        )  # fmt: skip
    if world.is_distributed:
        return ShardSampler(len(dataset), world)
    return EpochShuffleSampler(len(dataset), seed=seed, shuffle=shuffle)


def _check_same_world(dataset: Any, world: World) -> None:
    theirs = dataset.world
    if (theirs.rank, theirs.world_size) != (world.rank, world.world_size):
        raise ValueError(
            f"{type(dataset).__name__} holds the shard of rank {theirs.rank} of "
            f"{theirs.world_size}, but the handler runs as rank {world.rank} of "
            f"{world.world_size}; build the dataset in the same torchrun job and pass "
            "NNHandler(use_distributed=True) when it is sharded over several processes"
        )


def _make_loader(data: Any, options: dict[str, Any]) -> DataLoader[Any]:
    batched = (
        options.get("sampler") is not None
        and indexes_batches(data)
        and options.get("batch_size", 1) is not None
        and "collate_fn" not in options
        and "shuffle" not in options  # DataLoader reports the conflict with a sampler itself
    )
    if not batched:
        return DataLoader(data, **options)
    # One dataset call per batch (no per-sample split and re-stack).
    batch_size = options.pop("batch_size", 1)
    return batched_loader(data, batch_size, **options)


@dataclass(frozen=True)
class LoaderParts:
    """Where a loader's epoch hooks and position live.

    Attributes:
        outer: What the loader draws from: its batch sampler, or its sampler.
        inner: The index sampler inside ``outer`` when ``outer`` cuts batches, else None.
        per_batch: Indices of the index sampler per batch (1 when ``outer`` yields batches
            itself).
        dataset: The loader's dataset.
    """

    outer: Any
    inner: Any
    per_batch: int
    dataset: Any

    @classmethod
    def of(cls, loader: DataLoader[Any]) -> LoaderParts:
        """Inspect ``loader`` (``DataLoader(batch_size=…)``, ``batched_loader``, or custom)."""
        outer = loader.batch_sampler if loader.batch_sampler is not None else loader.sampler
        if isinstance(outer, BatchSampler):
            return cls(outer, outer.sampler, outer.batch_size, loader.dataset)
        return cls(outer, None, 1, loader.dataset)

    @property
    def index_sampler(self) -> Any:
        """The sampler whose positions count samples (or batches, for custom batch samplers)."""
        return self.outer if self.inner is None else self.inner

    def set_epoch(self, epoch: int) -> None:
        """Call ``set_epoch(epoch)`` once on the outermost sampler that has it, and the dataset."""
        set_epoch_once((self.outer, self.inner), epoch)
        set_epoch_once((self.dataset,), epoch)

    def position_state(self, batches: int) -> dict[str, Any] | None:
        """The index sampler's state after ``batches`` trained batches, or None if it has none.

        Only samplers following the ``seed/epoch/consumed`` protocol (this library's) resume
        from a state; ``consumed`` is replaced by what was trained, since workers prefetch.
        """
        sampler = self.index_sampler
        if not isinstance(sampler, Resumable):
            return None
        current = dict(sampler.state_dict())
        if STATE_CONSUMED not in current:
            return None
        current[STATE_CONSUMED] = min(batches * self.per_batch, len(sampler))
        return current

    def load_position(self, state: dict[str, Any]) -> None:
        """Make the next pass yield the rest of the epoch recorded in ``state``."""
        self.index_sampler.load_state_dict(dict(state))


def check_not_resharded(dataset: Any, *samplers: Any) -> None:
    """Raise when a sampler splits a rank-sharded dataset across ranks again.

    An ``EpochShuffleSampler`` over a rank-sharded dataset is told whose shard it serves
    (``shard_of``), so it neither warns about nor lets accelerate split it.

    Raises:
        ValueError: e.g. torch's ``DistributedSampler`` over a ``RankMemCachedH5Dataset``.
    """
    if isinstance(dataset, BatchedDataset):
        dataset = dataset.dataset
    if not is_rank_sharded(dataset):
        return
    for sampler in samplers:
        if sampler is not None and splits_across_ranks(sampler):
            raise ValueError(
                f"NNHandler: {type(dataset).__name__} already holds only this rank's shard, and "
                f"{type(sampler).__name__} splits it across ranks again, so each rank would "
                "train on a fraction of its shard and the rest would never be seen. Pass no "
                "sampler (the handler then uses the dataset's make_sampler()) or an "
                "EpochShuffleSampler over len(dataset)"
            )
        if isinstance(sampler, EpochShuffleSampler) and sampler.shard_of is None:
            sampler.shard_of = dataset.world  # what it serves: this rank's shard


def check_loader_sharding(loader: DataLoader[Any]) -> None:
    """``check_not_resharded`` for a built loader (its sampler and batch sampler)."""
    parts = LoaderParts.of(loader)
    check_not_resharded(loader.dataset, parts.outer, parts.inner)


def warn_if_not_sharded(loader: DataLoader[Any], world: World) -> None:
    """Under DDP, warn when a train loader gives every rank the whole dataset.

    That is the case for the samplers that know nothing of ranks (``SequentialSampler``,
    ``RandomSampler``, ``EpochShuffleSampler``) over a dataset that is not rank-sharded. An
    ``EpochShuffleSampler`` warns itself (once, naming ``DistributedEpochSampler``).
    """
    sampler = LoaderParts.of(loader).index_sampler
    if not world.is_distributed or is_rank_sharded(loader.dataset):
        return
    if type(sampler) is EpochShuffleSampler:
        sampler.check_world(world, data_is_sharded=False)
    elif type(sampler) in (SequentialSampler, RandomSampler):
        warnings.warn(
            f"the train loader uses a {type(sampler).__name__}, so each of the "
            f"{world.world_size} ranks trains on the whole dataset; pass no sampler (the "
            "handler then shards the dataset) or a DistributedEpochSampler",
            UserWarning,
            stacklevel=3,
        )
