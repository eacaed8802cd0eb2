"""Rank functions for the growing-file DDP test (spawned: top-level, light imports)."""

from __future__ import annotations

import datetime
from typing import Any

import torch.distributed as dist

from nn_handler.dataloaders import ChunkShuffleSampler
from nn_handler.dataloaders.samplers import DistributedEpochSampler


class SeesAppend:
    """A growing dataset's length as one rank sees it: rank 1 refreshes after an append."""

    chunk_rows = 8
    chunk_cache_nbytes = 1 << 20

    def __init__(self, lengths: list[int]) -> None:
        self.lengths = lengths  # what each refresh returns, in turn (the last one stays)
        self.length = lengths[0]

    def __len__(self) -> int:
        return self.length

    def refresh(self) -> int:
        if len(self.lengths) > 1:
            self.lengths.pop(0)
        self.length = self.lengths[0]
        return self.length

    def window_cache_nbytes(self, block_rows: int | None, blocks: int) -> int:
        return 0

    def set_chunk_cache(self, nbytes: int, nslots: int | None = None, w0: float | None = None):
        raise AssertionError("the samplers never resize a cache")


def epochs_seen_rank(kind: str, lengths_by_rank: list[list[int]]) -> dict[int, list[int]]:
    """Each epoch's indices on this rank, and the length its sampler took for it."""
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    ds = SeesAppend(list(lengths_by_rank[rank]))
    sampler: Any
    if kind == "chunks":
        sampler = ChunkShuffleSampler(ds, rank=rank, world_size=world, equal_steps="drop")
    else:
        sampler = DistributedEpochSampler(ds, rank=rank, world_size=world, equal_steps="drop")
    seen: dict[int, list[int]] = {}
    for epoch in (0, 1):
        sampler.set_epoch(epoch)
        seen[epoch] = [sampler.data_len, *(int(i) for i in sampler)]
    dist.destroy_process_group()
    return seen
