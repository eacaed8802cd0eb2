"""batched_loader: a DataLoader that hands whole batches of indices to the dataset.

``DataLoader(dataset, batch_size=256)`` calls ``dataset.__getitems__`` and then collates the
returned list of samples with ``torch.stack``: splitting a batch into samples and stacking it
again caps throughput near 200k samples/s even for data already in RAM (see the benchmarks).
``batched_loader`` instead samples *lists* of indices and lets the dataset return the stacked
batch itself (``DataLoader(batch_size=None, sampler=BatchSampler(...))``), so the only copy is
the read.
"""

from __future__ import annotations

from collections.abc import Sized
from typing import Any

import torch
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    Dataset,
    RandomSampler,
    Sampler,
    SequentialSampler,
)

from .._validate import check_positive_int

__all__ = ["EpochBatchSampler", "batched_loader"]


class EpochBatchSampler(BatchSampler):
    """A ``BatchSampler`` that forwards ``set_epoch`` and sampler state to the wrapped sampler.

    Training loops that call ``loader.sampler.set_epoch(epoch)`` keep working when the loader's
    sampler yields batches.
    """

    def set_epoch(self, epoch: int) -> None:
        """Call ``set_epoch(epoch)`` on the wrapped sampler when it has one."""
        set_epoch = getattr(self.sampler, "set_epoch", None)
        if callable(set_epoch):
            set_epoch(epoch)

    def state_dict(self) -> dict[str, Any]:
        """Return the wrapped sampler's state (empty when it keeps none)."""
        state_dict = getattr(self.sampler, "state_dict", None)
        return dict(state_dict()) if callable(state_dict) else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the wrapped sampler's state."""
        load = getattr(self.sampler, "load_state_dict", None)
        if callable(load):
            load(state)
        elif state:
            raise ValueError(
                f"{type(self.sampler).__name__} keeps no state, but state {state!r} was given"
            )


def batched_loader(
    dataset: Dataset[Any],
    batch_size: int,
    *,
    shuffle: bool = False,
    sampler: Sampler[int] | None = None,
    drop_last: bool = False,
    generator: torch.Generator | None = None,
    **dataloader_kwargs: Any,
) -> DataLoader[Any]:
    """Return a DataLoader whose dataset reads and stacks each batch in one call.

    Args:
        dataset: A dataset whose ``__getitem__`` accepts a list of indices and returns the
            stacked batch (``supports_batch_indexing = True``, as every dataset here does).
        batch_size: Samples per batch.
        shuffle: Shuffle with a ``RandomSampler`` (ignored when ``sampler`` is given).
        sampler: Sampler of single indices (e.g. ``EpochShuffleSampler``); batches are cut
            from its order.
        drop_last: Drop the last incomplete batch.
        generator: Random generator for ``shuffle=True``.
        **dataloader_kwargs: Any other ``DataLoader`` keyword (``num_workers``,
            ``pin_memory``, ``persistent_workers``, ``worker_init_fn``, ...).

    Raises:
        TypeError: the dataset cannot index batches, or a keyword would conflict.
        ValueError: ``shuffle=True`` together with a ``sampler``.
    """
    check_positive_int("batch_size", batch_size)
    if not getattr(dataset, "supports_batch_indexing", False):
        raise TypeError(
            f"{type(dataset).__name__} does not index whole batches "
            "(no supports_batch_indexing = True); use DataLoader(dataset, batch_size=...) instead"
        )
    for key in ("batch_size", "batch_sampler", "collate_fn"):
        if key in dataloader_kwargs:
            raise TypeError(
                f"batched_loader() sets {key} itself; remove {key}={dataloader_kwargs[key]!r}"
            )
    if sampler is not None and shuffle:
        raise ValueError("shuffle=True and a sampler are exclusive; shuffle with the sampler")
    if sampler is None:
        sized: Sized = dataset  # type: ignore[assignment]
        sampler = RandomSampler(sized, generator=generator) if shuffle else SequentialSampler(sized)
    batches = EpochBatchSampler(sampler, batch_size, drop_last)
    return DataLoader(dataset, batch_size=None, sampler=batches, **dataloader_kwargs)
