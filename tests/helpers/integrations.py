"""Loaders and checks shared by the Lightning / accelerate / torchdata tests.

The file has ``x[i, 0] == y[i] == i``, so every batch says which rows it holds. Loaders are built
by name inside the process that uses them (after the process group exists), as a user would in
Lightning's ``train_dataloader()`` or after ``Accelerator()``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import torch
from torch.utils.data import DataLoader

from nn_handler.dataloaders import (
    BatchedDataset,
    ChunkShuffleSampler,
    DistributedEpochSampler,
    EpochShuffleSampler,
    H5LazyDataset,
    RankMemCachedH5Dataset,
    batched_loader,
)

ROWS = 1003  # prime to every world size and batch size used here: shards and batches are uneven
BATCH = 32
CHUNK = 16
#: loaders over a dataset that holds every row; the framework or our sampler splits them
WHOLE_CASES = ("lazy_plain", "lazy_batched", "dist", "dist_plain", "chunk")
#: loaders over RankMemCachedH5Dataset: each rank holds its shard
SHARD_CASES = ("rank", "rank_seed")


def write_indexed(path: Path, rows: int = ROWS, chunk: int = CHUNK) -> Path:
    """``x`` (rows, 4) float32 with ``x[i, 0] == i``; ``y == arange(rows)``; gzip chunks.

    Compressed, so ``H5LazyDataset`` decodes ahead and ``batched_loader`` puts its sampler in a
    ``ReadaheadSampler``: the frameworks see that wrapper, as they would in real use.
    """
    x = np.zeros((rows, 4), dtype=np.float32)
    x[:, 0] = np.arange(rows)
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=x, chunks=(chunk, 4), compression="gzip")
        f.create_dataset(
            "y", data=np.arange(rows, dtype=np.int64), chunks=(chunk,), compression="gzip"
        )
    return path


def quiet(_message: str) -> None:
    """A ``log_fn`` that keeps test output clean (and pickles)."""


def make_loader(case: str, path: Path) -> DataLoader[Any]:
    """The loader a user would write for ``case`` (see ``WHOLE_CASES`` / ``SHARD_CASES``)."""
    if case in SHARD_CASES:
        shard = RankMemCachedH5Dataset(path, "x", "y", log_fn=quiet)
        if case == "rank":
            return batched_loader(shard, BATCH, shuffle=True)  # its own make_sampler()
        # the seed's "Basic Distributed Training Setup"
        return DataLoader(shard, batch_size=BATCH, sampler=EpochShuffleSampler(len(shard), 42))
    ds = H5LazyDataset(path, "x", "y")
    if case == "lazy_plain":
        return DataLoader(ds, batch_size=BATCH, shuffle=True)
    if case == "lazy_batched":
        return batched_loader(ds, BATCH, shuffle=True)
    if case == "dist":
        return batched_loader(ds, BATCH, sampler=DistributedEpochSampler(len(ds), seed=1))
    if case == "dist_plain":
        return DataLoader(ds, batch_size=BATCH, sampler=DistributedEpochSampler(len(ds), seed=1))
    if case == "chunk":
        return batched_loader(ds, BATCH, sampler=ChunkShuffleSampler(ds, seed=2, window_chunks=4))
    raise ValueError(f"unknown case {case!r}")


def batch_rows(batch: Any) -> list[int]:
    """The file rows of a batch, checked against its inputs (``x[:, 0] == y``)."""
    x, y = batch
    assert torch.equal(x[:, 0].long(), y), "inputs and targets of a batch are different rows"
    return [int(v) for v in y.tolist()]


def check_exactly_once(per_rank: Sequence[Sequence[int]], rows: int, max_repeats: int) -> int:
    """Assert the ranks' rows together cover ``range(rows)``, repeating at most ``max_repeats``.

    Returns the number of repeats.
    """
    seen = Counter(row for rank_rows in per_rank for row in rank_rows)
    assert set(seen) == set(range(rows)), f"missing rows: {sorted(set(range(rows)) - set(seen))}"
    repeats = sum(seen.values()) - rows
    assert repeats <= max_repeats, f"{repeats} repeats, at most {max_repeats} allowed"
    return repeats


def stateful_resume_is_exact(make: Callable[[], Any], data: Any, batched: bool) -> bool:
    """Stop a torchdata ``StatefulDataLoader`` mid-epoch 1, resume in a new one: same rows?"""
    from torchdata.stateful_dataloader import StatefulDataLoader

    def loader(sampler: Any) -> Any:
        if batched:
            return StatefulDataLoader(
                BatchedDataset(data),
                batch_size=BATCH,
                sampler=sampler,
                collate_fn=BatchedDataset.collate,
            )
        return StatefulDataLoader(data, batch_size=BATCH, sampler=sampler)

    def epoch_one(sampler: Any) -> Any:
        sampler.set_epoch(1)
        return loader(sampler)

    full = [row for batch in epoch_one(make()) for row in batch_rows(batch)]
    first = epoch_one(make())
    head: list[int] = []
    for i, batch in enumerate(first):
        head += batch_rows(batch)
        if i == 4:
            break
    state = first.state_dict()
    second = loader(make())
    second.load_state_dict(state)
    tail = [row for batch in second for row in batch_rows(batch)]
    return head + tail == full and 0 < len(head) < len(full)
