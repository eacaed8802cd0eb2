"""Small models, data and recorders shared by the NNHandler tests (also used in spawned ranks)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import h5py
import numpy as np
import torch
from torch import nn
from torch.utils.data import Dataset

from nn_handler import World
from nn_handler.dataloaders import EpochShuffleSampler, _balanced_contiguous_shard

FEATURES = 8
CLASSES = 3


class TinyNet(nn.Module):
    """A two-layer classifier with dropout (so RNG handling shows in the weights)."""

    def __init__(self, features: int = FEATURES, classes: int = CLASSES, hidden: int = 32) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(features, hidden), nn.ReLU(), nn.Dropout(0.2), nn.Linear(hidden, classes)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def blobs(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``(x, y)``: column 0 of ``x`` is the sample's index, the rest are Gaussian blobs."""
    rng = np.random.default_rng(seed)
    centers = np.random.default_rng(1234).normal(0, 1.5, (CLASSES, FEATURES))
    y = rng.integers(0, CLASSES, n)
    x = np.empty((n, 1 + FEATURES), dtype=np.float32)
    x[:, 0] = np.arange(n)
    x[:, 1:] = centers[y] + rng.normal(0, 1, (n, FEATURES))
    return x, y.astype(np.int64)


def write_blobs(path: Path, n: int, seed: int = 0, **dataset_kwargs: Any) -> Path:
    """Write ``x`` / ``y`` from ``blobs`` to ``path``."""
    x, y = blobs(n, seed)
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=x, **dataset_kwargs)
        f.create_dataset("y", data=y)
    return path


def accuracy(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return (outputs.argmax(1) == targets).float().mean()


class Recorder:
    """``batch_fn`` that notes the sample indices (column 0) and strips them off."""

    def __init__(self) -> None:
        self.seen: list[int] = []

    def __call__(self, batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = batch
        self.seen.extend(x[:, 0].long().tolist())
        return x[:, 1:], y


def strip_index(batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
    x, y = batch
    return x[:, 1:], y


class ShardedBlobs(Dataset):
    """A minimal rank-sharded dataset following the ``RankMemCachedH5Dataset`` contract."""

    is_rank_sharded = True
    supports_batch_indexing = True

    def __init__(self, n: int, world: World | None = None) -> None:
        self.world = world or World.detect()
        self.total = n
        start, end = _balanced_contiguous_shard(n, self.world.world_size, self.world.rank)
        x, y = blobs(n)
        self.x, self.y = torch.from_numpy(x[start:end]), torch.from_numpy(y[start:end])

    @property
    def samples_per_rank(self) -> int:
        return -(-self.total // self.world.world_size)

    def make_sampler(self, seed: int = 0, shuffle: bool = True) -> EpochShuffleSampler:
        return EpochShuffleSampler(len(self), seed, shuffle, num_samples=self.samples_per_rank)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, index: Any) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[index], self.y[index]
