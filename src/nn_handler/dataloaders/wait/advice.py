"""wait_advice: why a loop may wait for a loader's batches, from what the loader shows.

It reads the loader's settings, never a clock: how many processes or threads read batches,
whether the order is random over a dataset that pays for it (``ExplainsWaits``: chunks decoded
per sample, a URL fetched again every epoch), and whether batches reach a CUDA device through
pageable memory inside the step. ``WaitMeter`` and ``NNHandler`` ask it only once a loop was
measured waiting.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch.utils.data import DataLoader, RandomSampler

from ..._validate import usable_cores
from .._contracts.protocols import ExplainsWaits, Shuffles, WrapsSampler
from .._transport import ThreadedDataLoader
from ..chunk_sampler import ChunkShuffleSampler
from ..loader import BatchedDataset
from ..prefetch import DevicePrefetcher

__all__ = ["wait_advice"]

_MOST_WORKERS = 8  # beyond this many processes a loader rarely gains (each holds its own copy)
_MEASURE = (
    "time the loader alone, with your step's length: nn-handler bench FILE --x-key KEY "
    "--step-ms MS prints the wait at each num_workers and the smallest that keeps it under 5 %"
)


def wait_advice(loader: Iterable[Any], device: str | torch.device | None = None) -> list[str]:
    """Likely causes of a loop waiting for ``loader``'s batches, each with what to change.

    Args:
        loader: What the loop iterates: a ``DataLoader`` (``batched_loader``'s or any other), a
            ``DevicePrefetcher`` around one, or any iterable (then only the general advice).
        device: Where the step runs. On a CUDA device, batches copied inside the step from
            memory that is not pinned are a cause too.

    Returns:
        One line per cause, the most likely first; the last line always says how to measure
        the loader alone.
    """
    prefetched = isinstance(loader, DevicePrefetcher)
    inner = loader.loader if isinstance(loader, DevicePrefetcher) else loader
    causes: list[str] = []
    if isinstance(inner, DataLoader):
        causes += _worker_causes(inner)
        causes += _dataset_causes(inner)
        if not prefetched:
            causes += _copy_causes(inner, device)
    return [*causes, _MEASURE]


def _worker_causes(loader: DataLoader[Any]) -> list[str]:
    if isinstance(loader, ThreadedDataLoader) or loader.num_workers > 0:
        return []
    cores = usable_cores()
    if cores < 2:
        return [
            "num_workers=0 on one usable core: reading and the step take turns; give the job "
            "more cores (reading in workers then overlaps the step)"
        ]
    return [
        f"num_workers=0: this process reads every batch between two steps; pass "
        f"num_workers={min(cores, _MOST_WORKERS)} (this machine has {cores} usable cores) and "
        "persistent_workers=True, so batches are read while the step runs"
    ]


def _dataset_causes(loader: DataLoader[Any]) -> list[str]:
    dataset = loader.dataset
    if isinstance(dataset, BatchedDataset):
        dataset = dataset.dataset
    if not isinstance(dataset, ExplainsWaits):
        return []
    return dataset.wait_causes(_random_order(loader))


def _random_order(loader: DataLoader[Any]) -> bool:
    """True when the loader draws samples in a random order that ignores chunks."""
    sampler = loader.batch_sampler if loader.batch_sampler is not None else loader.sampler
    while isinstance(sampler, WrapsSampler):  # torch's BatchSampler, our read-ahead
        sampler = sampler.sampler
    if isinstance(sampler, ChunkShuffleSampler):
        return False  # shuffled, but chunk by chunk
    return isinstance(sampler, RandomSampler) or (isinstance(sampler, Shuffles) and sampler.shuffle)


def _copy_causes(loader: DataLoader[Any], device: str | torch.device | None) -> list[str]:
    if device is None or torch.device(device).type != "cuda":
        return []
    pinned = loader.pin_batches if isinstance(loader, ThreadedDataLoader) else loader.pin_memory
    if pinned:
        return []
    return [
        f"batches are copied to {device} inside the step, from memory that is not pinned: wrap "
        f"the loader in DevicePrefetcher(loader, {str(device)!r}) (it copies the next batches "
        "on a side stream while the step runs), or pass pin_memory=True"
    ]
