"""Samplers: index order as a pure function of (seed, epoch, rank, sizes).

``nn_handler.dataloaders.samplers`` is the one home of every sampler and of the arithmetic
they share:

* ``epoch`` — ``EpochShuffleSampler`` (one rank's dataset, or a rank shard),
  ``DistributedEpochSampler`` (one global dataset split across ranks), ``ShardSampler``,
  ``epoch_permutation``;
* ``chunks`` — ``ChunkShuffleSampler`` (shuffle by HDF5 chunks, then within windows);
* ``rank_shard`` — ``ShardEpochSampler`` (a rank cache's shard, resumable on other worlds);
* ``shards`` — shard and pad arithmetic, used by every sampler, the rank cache and elastic
  resume;
* ``elastic`` — what an epoch leaves to split after phases on other worlds;
* ``frameworks`` — who splits a sampler's order besides the sampler (``FrameworkSplit``: a
  framework's loader that splits batches across processes).

``nn_handler.dataloaders.chunk_sampler`` and ``.shard_sampler`` keep their names for the
samplers they always held.
"""

from __future__ import annotations

from .chunks import ChunkShuffleSampler
from .epoch import DistributedEpochSampler, EpochShuffleSampler, ShardSampler, epoch_permutation
from .rank_shard import ShardEpochSampler
from .shards import _balanced_contiguous_shard, _interleaved_indices

__all__ = [
    "ChunkShuffleSampler",
    "DistributedEpochSampler",
    "EpochShuffleSampler",
    "ShardEpochSampler",
    "ShardSampler",
    "_balanced_contiguous_shard",
    "_interleaved_indices",
    "epoch_permutation",
]
