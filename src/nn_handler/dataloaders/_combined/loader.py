"""create_optimized_dataloader: a sharded, per-epoch shuffled, batched DataLoader over many files.

Re-exported from ``combined_h5_dataset``; kept apart so that module stays about the dataset.
"""

from __future__ import annotations

import inspect
import logging
import os
from collections.abc import Sequence
from typing import Any

import torch
from torch.utils.data import DataLoader

from ..._validate import check_choice, check_non_negative_int, check_positive_int, format_names
from ...distributed import World
from ..loader import batched_loader
from ..samplers import DistributedEpochSampler, EvenMode

__all__ = ["create_optimized_dataloader"]

_log = logging.getLogger("nn_handler.dataloaders.combined_h5_dataset")
_MAX_AUTO_WORKERS = 8


def create_optimized_dataloader(
    hdf5_files: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    batch_size: int,
    num_workers: int | None = None,
    rank: int | None = None,
    world_size: int | None = None,
    *,
    shuffle: bool = True,
    seed: int = 0,
    drop_last: bool = False,
    even: EvenMode = "pad",
    pin_memory: bool | None = None,
    persistent_workers: bool | None = None,
    prefetch_factor: int | None = None,
    multiprocessing_context: Any = None,
    timeout: float = 0.0,
    **dataset_kwargs: Any,
) -> DataLoader[Any]:
    """Return a DataLoader of stacked batches from ``CombinedHDF5Dataset(hdf5_files, ...)``.

    The sampler is a ``DistributedEpochSampler``: each epoch one permutation (a pure function
    of ``seed`` and the epoch), dealt round-robin to the ranks. Call
    ``loader.sampler.set_epoch(epoch)`` before each epoch to reshuffle. Per epoch, with ``N``
    samples and ``W`` ranks:

    * ``even="pad"`` (default): every rank gets ``ceil(N / W)`` samples. Together they cover
      all ``N``; the ``ceil(N / W) * W - N <= W - 1`` extra places repeat the first samples of
      the epoch's permutation once each (the only overlap between ranks).
    * ``even="drop"``: every rank gets ``floor(N / W)`` samples, pairwise disjoint; the last
      ``N mod W`` samples of the permutation (different ones each epoch) are skipped.

    Every rank therefore runs the same number of batches. Batches are read whole by the dataset
    (``batched_loader``): a dict of stacked tensors, strings as lists of ``str``.

    Args:
        hdf5_files: One path or a sequence of paths.
        batch_size: Samples per batch on each rank.
        num_workers: DataLoader workers per rank. None picks
            ``min(8, cores // ranks on this node)`` (cores this process may run on; ranks
            from ``LOCAL_WORLD_SIZE``, else ``world_size``).
        rank: This rank (detected from ``torch.distributed`` / the environment when None).
        world_size: Number of ranks (detected when None).
        shuffle: Shuffle anew each epoch (False keeps file order, still dealt round-robin).
        seed: Shuffle seed, the same on every rank.
        drop_last: Drop each rank's last incomplete batch.
        even: ``"pad"`` or ``"drop"`` (see above).
        pin_memory: Pin batches for CUDA (default: when CUDA is available; without CUDA,
            True is a no-op, logged once).
        persistent_workers: Keep workers between epochs (default: when ``num_workers > 0``).
        prefetch_factor: Batches prefetched per worker (only with workers; torch's default 2).
        multiprocessing_context: ``"fork"``, ``"spawn"``, ``"forkserver"`` or None.
        timeout: Seconds to wait for a batch from a worker (0: forever).
        **dataset_kwargs: Any ``CombinedHDF5Dataset`` argument except ``paths`` and
            ``pin_memory`` (``load_fields``, filters, ``cache_size``, ``dtype``, …).

    Raises:
        TypeError: an unknown keyword (the message lists the valid ones).
        ValueError: no sample survives the filters, or options that need workers without them.
    """
    _check_dataset_kwargs(dataset_kwargs)
    check_positive_int("batch_size", batch_size)
    check_choice("even", even, ("pad", "drop"))
    world = World.detect(rank=rank, world_size=world_size)  # fail before reading any file
    workers = _workers(num_workers, world.world_size)
    options = _loader_options(workers, pin_memory, persistent_workers, prefetch_factor)
    if workers:
        options.update(multiprocessing_context=multiprocessing_context, timeout=timeout)
    from ..combined_h5_dataset import CombinedHDF5Dataset  # the module re-exports this function

    # batches are pinned by the DataLoader (after the workers), not by the dataset
    dataset = CombinedHDF5Dataset(hdf5_files, pin_memory=False, **dataset_kwargs)
    if len(dataset) == 0:
        raise ValueError(
            "no sample is left after the filters "
            f"(removed per filter: {dataset.get_stats()['removed_by_filter']}); nothing to load"
        )
    sampler = DistributedEpochSampler(
        len(dataset),
        seed=seed,
        shuffle=shuffle,
        rank=world.rank,
        world_size=world.world_size,
        even=even,
    )
    return batched_loader(dataset, batch_size, sampler=sampler, drop_last=drop_last, **options)


def _check_dataset_kwargs(kwargs: dict[str, Any]) -> None:
    from ..combined_h5_dataset import CombinedHDF5Dataset

    params = inspect.signature(CombinedHDF5Dataset).parameters
    allowed = [name for name in params if name not in ("paths", "pin_memory")]
    own = inspect.signature(create_optimized_dataloader).parameters
    loader_args = [name for name in own if name != "dataset_kwargs"]
    for name in kwargs:
        if name == "paths":
            raise TypeError("pass the files as hdf5_files, not paths=")
        if name not in allowed:
            raise TypeError(
                f"create_optimized_dataloader() got an unexpected keyword argument {name!r}; "
                f"loader arguments: {format_names(loader_args)}; dataset arguments: "
                f"{format_names(allowed)}"
            )


def _workers(num_workers: int | None, world_size: int) -> int:
    if num_workers is not None:
        return check_non_negative_int("num_workers", num_workers)  # torch warns above the cores
    ranks = check_positive_int(
        "LOCAL_WORLD_SIZE", int(os.environ.get("LOCAL_WORLD_SIZE", world_size))
    )
    return min(_MAX_AUTO_WORKERS, max(1, _cores() // ranks))


def _loader_options(
    workers: int,
    pin_memory: bool | None,
    persistent_workers: bool | None,
    prefetch_factor: int | None,
) -> dict[str, Any]:
    if pin_memory is None:
        pin_memory = torch.cuda.is_available()
    elif pin_memory and not torch.cuda.is_available():
        _log.info("pin_memory=True but CUDA is not available: batches are not pinned")
        pin_memory = False
    options: dict[str, Any] = {"num_workers": workers, "pin_memory": bool(pin_memory)}
    if workers == 0:
        for name, value in (
            ("persistent_workers", persistent_workers),
            ("prefetch_factor", prefetch_factor),
        ):
            if value:
                raise ValueError(f"{name}={value!r} needs num_workers > 0, got num_workers=0")
        return options
    options["persistent_workers"] = True if persistent_workers is None else persistent_workers
    if prefetch_factor is not None:
        options["prefetch_factor"] = check_positive_int("prefetch_factor", prefetch_factor)
    return options


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1
