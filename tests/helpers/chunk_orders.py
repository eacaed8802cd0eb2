"""Every rank's order of one ``ChunkShuffleSampler`` epoch (for the sampler's property tests)."""

from __future__ import annotations

from typing import Any

import numpy as np

from nn_handler.dataloaders import ChunkShuffleSampler


def rank_orders(n: int, world: int, *, epoch: int = 0, **kwargs: Any) -> list[np.ndarray[Any, Any]]:
    """The indices each of ``world`` ranks draws in ``epoch`` (``kwargs`` go to the sampler)."""
    result = []
    for rank in range(world):
        sampler = ChunkShuffleSampler(n, rank=rank, world_size=world, **kwargs)
        sampler.set_epoch(epoch)
        result.append(np.array(list(sampler), dtype=np.int64))
    return result
