"""Who splits a sampler's order across processes besides the sampler itself.

Every sampler of this package is a ``torch.utils.data.DistributedSampler`` that already decides
what this rank sees (``DistributedEpochSampler`` and ``ChunkShuffleSampler`` split the indices
across ranks, ``EpochShuffleSampler`` serves a dataset that is this rank's shard). Lightning and
Fabric (``use_distributed_sampler=True``) add a sampler of their own only to a loader whose
sampler is not a ``DistributedSampler``: they leave ours alone, call ``set_epoch`` and split
nothing. Plain DDP splits nothing either.

accelerate's ``prepare()`` splits every loader's batches across its processes itself, and the
sampler must then hand it the whole epoch, the same order on every process:

* With its default settings ``prepare()`` first gives the sampler a shared ``generator``
  (``FrameworkSplit.install``). That is the sign that accelerate splits.
* ``DataLoaderConfiguration(use_seedable_sampler=True)`` deals the batches out
  (``BatchSamplerShard``) and installs no generator; ``dispatch_batches=True`` iterates the
  loader on process 0 only and sends each process a slice of every batch
  (``DataLoaderDispatcher``). Neither touches the sampler at ``prepare()`` time; both register
  the loader they iterate as accelerate's ``GradientState().active_dataloader`` before they call
  ``set_epoch`` and draw the first index, so the sampler asks at those moments
  (``FrameworkSplit.notice``, ``accelerate_splits``) whether that loader splits and reads this
  very sampler.

The split is refused (``ValueError``) where it would lose samples: over a sampler that serves a
rank-sharded dataset (a shard cannot be split again), and, for a split found only at the first
``set_epoch`` or pass, over a sampler that splits across several ranks itself (``len(loader)``
read before would have been wrong). An ``EpochShuffleSampler`` over a dataset of every row is
exact under all three settings.

accelerate is never imported here: a loader of accelerate can only be running if the program
imported it already.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, Protocol

from .._contracts.protocols import WrapsSampler

if TYPE_CHECKING:
    import torch

__all__ = ["FrameworkSplit", "Splittable", "accelerate_splits"]

# Loaders nest a handful of wrappers (accelerate's shard, torch's BatchSampler, our readahead);
# anything deeper is not a sampler chain.
_MAX_DEPTH = 8


class Splittable(Protocol):
    """What a framework's split needs to know of the sampler it would split."""

    @property
    def shards_indices(self) -> bool:
        """True when the sampler gives each of several ranks its own part of the indices."""
        ...

    @property
    def num_replicas(self) -> int:
        """The number of ranks the sampler runs on."""
        ...

    @property
    def serves_rank_shard(self) -> bool:
        """True when the sampler's dataset holds only this rank's shard."""
        ...


class FrameworkSplit:
    """Who, besides its sampler, splits the sampler's order: None, or the framework's name.

    A sampler holds one, reports to it (``install`` from its ``generator`` setter, ``notice`` at
    ``set_epoch`` and at the start of each pass) and asks ``by``. Once set, ``by`` stays: the
    sampler hands out the whole epoch from then on.

    Attributes:
        by: ``"accelerate"`` once accelerate splits the sampler's batches, else None.
        generator: The generator accelerate's ``prepare()`` installed (None before). The
            sampler's order never depends on it.
    """

    def __init__(self) -> None:
        self.by: str | None = None
        self.generator: torch.Generator | None = None

    def install(self, sampler: Splittable, generator: torch.Generator | None) -> None:
        """Keep the generator accelerate's ``prepare()`` gives ``sampler`` before splitting it.

        Raises:
            ValueError: ``sampler`` serves a rank-sharded dataset (the generator is not kept).
        """
        if generator is not None:
            self._accept(sampler, "accelerate")
        self.generator = generator

    def notice(self, sampler: Splittable) -> None:
        """Notice accelerate splitting ``sampler``'s batches without having installed a generator.

        Raises:
            ValueError: ``sampler`` splits across several ranks itself, or serves a rank-sharded
                dataset.
        """
        if self.by is not None or not accelerate_splits(sampler):
            return
        if sampler.shards_indices:
            # Handing accelerate the whole epoch now would be exact, but len(loader) taken
            # before this first pass (a scheduler's step count) would have been 1/world too small.
            raise ValueError(_silent_split_refused("accelerate", sampler))
        self._accept(sampler, "accelerate")

    def _accept(self, sampler: Splittable, by: str) -> None:
        if sampler.serves_rank_shard:
            raise ValueError(_shard_split_refused(by))
        self.by = by


def _silent_split_refused(by: str, sampler: Splittable) -> str:
    return (
        f"{by} splits this loader's batches across its processes without telling its "
        f"{type(sampler).__name__} (accelerate's DataLoaderConfiguration("
        "use_seedable_sampler=True) or dispatch_batches=True), which splits the epoch "
        f"across its {sampler.num_replicas} ranks too: each process would train on a fraction "
        "of its part. Keep use_seedable_sampler=False and dispatch_batches=False "
        f"(accelerate's defaults): {by} then tells the sampler, which hands it the whole "
        "epoch, seeded and in the same order on every process"
    )


def _shard_split_refused(by: str) -> str:
    return (
        f"{by} splits this loader's batches across its processes, but its "
        f"EpochShuffleSampler serves a rank-sharded dataset (each process holds only its "
        f"own shard): each would train on a fraction of its shard. Do not pass this "
        f"loader to {by}'s prepare(); prepare the model and optimizer only "
        f"('model, optimizer = accelerator.prepare(model, optimizer)') and move each "
        f"batch yourself ('x, y = x.to(accelerator.device), y.to(accelerator.device)'), "
        f"or read the file with H5LazyDataset and DistributedEpochSampler / "
        f"ChunkShuffleSampler, which {by} may split"
    )


def accelerate_splits(sampler: object) -> bool:
    """True while a loader of accelerate that splits batches across processes reads ``sampler``.

    Args:
        sampler: The sampler asking (at ``set_epoch`` or at the start of a pass).
    """
    state = sys.modules.get("accelerate.state")
    loaders = sys.modules.get("accelerate.data_loader")
    if state is None or loaders is None or not state.GradientState._shared_state:
        return False  # accelerate is not imported, or has iterated no loader yet
    loader = state.GradientState().active_dataloader
    if not isinstance(loader, loaders.DataLoaderAdapter):
        return False
    base = loader.base_dataloader
    splits = isinstance(loader, loaders.DataLoaderDispatcher) and _processes(loader.state) > 1
    node: Any = base.batch_sampler if base.batch_sampler is not None else base.sampler
    for _ in range(_MAX_DEPTH):
        if node is sampler:
            return splits
        if isinstance(node, loaders.BatchSamplerShard):
            splits = splits or _processes(node) > 1
            node = node.batch_sampler
        elif isinstance(node, loaders.SkipBatchSampler):
            node = node.batch_sampler
        elif isinstance(node, WrapsSampler):
            node = node.sampler
        else:
            return False
    return False


def _processes(holder: Any) -> int:
    return int(holder.num_processes)
