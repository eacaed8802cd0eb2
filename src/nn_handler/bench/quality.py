"""How well an index order mixes, and what it costs to read: numbers for shuffle trade-offs.

``shuffle_quality(order, block_size, batch_size, cache_blocks)`` measures one epoch's order:

* ``displacement``: mean ``|position - index| / n`` (a full shuffle gives ~1/3, file order 0);
* ``neighbour_correlation``: Pearson correlation of consecutive indices (full shuffle ~0,
  file order 1);
* ``file_neighbours_together``: fraction of file neighbours ``(i, i + 1)`` that land in the
  same batch (full shuffle ~batch/n; file order ~1);
* ``blocks_per_batch``: mean distinct blocks (chunks) a batch touches;
* ``decodes_per_block``: chunk decodes per chunk in the epoch, with an LRU cache of
  ``cache_blocks`` decoded chunks (1.0 = each chunk decoded once).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["ShuffleQuality", "shuffle_quality"]


@dataclass(frozen=True)
class ShuffleQuality:
    """Mixing and cost of one epoch's order (see the module docstring)."""

    displacement: float
    neighbour_correlation: float
    file_neighbours_together: float
    blocks_per_batch: float
    decodes_per_block: float


def shuffle_quality(
    order: Any, block_size: int, batch_size: int, cache_blocks: int
) -> ShuffleQuality:
    """Measure ``order`` (a permutation of ``range(n)``, ``n >= 2``)."""
    idx = np.asarray(order, dtype=np.int64)
    n = idx.size
    if n < 2 or not np.array_equal(np.sort(idx), np.arange(n)):
        raise ValueError(f"order must be a permutation of range(n) with n >= 2, got {n} entries")
    position = np.empty(n, dtype=np.int64)
    position[idx] = np.arange(n)
    batch_of = position // batch_size
    blocks = idx // block_size
    batch_ids = np.arange(n) // batch_size
    distinct = np.unique(batch_ids * (blocks.max() + 1) + blocks).size
    return ShuffleQuality(
        displacement=float(np.abs(position - np.arange(n)).mean() / n),
        neighbour_correlation=float(np.corrcoef(idx[:-1], idx[1:])[0, 1]),
        file_neighbours_together=float(np.mean(batch_of[:-1] == batch_of[1:])),
        blocks_per_batch=distinct / int(batch_ids[-1] + 1),
        decodes_per_block=_lru_misses(blocks, cache_blocks) / int(np.unique(blocks).size),
    )


def _lru_misses(blocks: np.ndarray[Any, Any], capacity: int) -> int:
    cache: OrderedDict[int, None] = OrderedDict()
    misses = 0
    for block in blocks.tolist():
        if block in cache:
            cache.move_to_end(block)
            continue
        misses += 1
        cache[block] = None
        if len(cache) > capacity:
            cache.popitem(last=False)
    return misses
