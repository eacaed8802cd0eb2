"""Which live datasets are rank shards, and the check that nothing splits a shard again.

Exactly once per epoch needs exactly one splitter. A *rank-sharded* dataset
(``is_rank_sharded = True``, e.g. ``RankMemCachedH5Dataset``) already holds only this rank's
part, so its sampler must not split again; a dataset holding everything needs a sampler (or a
framework such as Lightning or accelerate) that gives each rank its own part.

``EpochShuffleSampler(len(dataset))`` only sees a number. The rank-sharded datasets of this
process register here (weakly), so the sampler can tell a shard's length from a whole dataset's
and warn only about the latter. Nothing here reads files or imports a sampler.
"""

from __future__ import annotations

import weakref
from typing import Any

from ...distributed import World
from .protocols import is_rank_sharded, splits_across_ranks

__all__ = ["check_not_resharded", "register_rank_sharded", "shard_world_of_length"]

_SHARDED: weakref.WeakKeyDictionary[Any, tuple[World, frozenset[int]]] = weakref.WeakKeyDictionary()


def register_rank_sharded(dataset: object, world: World, sizes: tuple[int, ...]) -> None:
    """Remember a rank-sharded dataset of this process: its world and the lengths it goes by.

    ``sizes`` are the numbers a user may build an ``EpochShuffleSampler`` from (its ``len`` and
    its own row count). The entry goes away with the dataset.
    """
    _SHARDED[dataset] = (world, frozenset(sizes))


def shard_world_of_length(n: int) -> World | None:
    """The world of a live rank-sharded dataset that goes by ``n`` samples, if any."""
    for world, sizes in list(_SHARDED.values()):
        if n in sizes:
            return world
    return None


def check_not_resharded(dataset: object, sampler: object, where: str) -> None:
    """Raise when ``sampler`` splits a dataset that already holds only this rank's shard.

    Raises:
        ValueError: names the dataset, the sampler and the fix.
    """
    if not (is_rank_sharded(dataset) and splits_across_ranks(sampler)):
        return
    raise ValueError(
        f"{where}: {type(dataset).__name__} already holds only this rank's shard, and "
        f"{type(sampler).__name__} splits it across ranks again, so each rank would train on a "
        "fraction of its shard and the rest would never be seen. Use the dataset's own sampler "
        "(dataset.make_sampler(seed=...)) or an EpochShuffleSampler over len(dataset); keep "
        "DistributedEpochSampler / DistributedSampler / ChunkShuffleSampler for datasets that "
        "hold every sample"
    )
