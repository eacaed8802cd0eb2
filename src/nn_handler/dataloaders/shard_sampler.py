"""ShardEpochSampler: the epoch of one rank's shard, resumable on another number of ranks.

The sampler lives in ``samplers/rank_shard.py`` and the shard arithmetic in
``samplers/shards.py``; this module keeps the import path users know.
"""

from __future__ import annotations

from .samplers.rank_shard import ShardEpochSampler
from .samplers.shards import shard_rows

__all__ = ["ShardEpochSampler", "shard_rows"]
